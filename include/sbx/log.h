/* SPDX-License-Identifier: MIT */
/*
 * The server's log: one line on stderr per event, for the operator.
 *
 * A log line often carries text that others chose: a container's name or an
 * engine's error message, a sandbox's name, a package spec, a file name. So
 * that such text can neither forge a line of its own nor drive the
 * operator's terminal, every line goes through sbx_log, which escapes the
 * whole formatted text (sbx_log_escape). Nothing else in the server writes
 * log lines to stderr.
 */
#ifndef SBX_LOG_H
#define SBX_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* Bytes of formatted text one line keeps (before escaping); the rest is cut
 * and the line says how many bytes were. */
#define SBX_LOG_LINE_MAX 8192

/* Appends TEXT[0..LEN) to OUT with every byte that could end a line, forge
 * one or drive a terminal written as \xNN (two lowercase hex digits): the
 * C0 controls (\n, \r, \t, ESC, NUL...), DEL, the C1 controls
 * (U+0080..U+009F, and the bare bytes 0x80..0x9F), U+2028 and U+2029
 * (line and paragraph separators), and every byte that is not part of
 * valid UTF-8. A backslash becomes \\, so the escapes are unambiguous.
 * Other valid UTF-8 is kept as it is. 0, or -ENOMEM with OUT holding a
 * prefix of the result. */
int sbx_log_escape(struct sbx_buf *out, const char *text, size_t len);

/* Writes one line to stderr: "mcp-sandboxd: ", FMT formatted (at most
 * SBX_LOG_LINE_MAX bytes of it) and escaped by sbx_log_escape, then "\n",
 * with one write under stderr's lock (lines of concurrent threads do not
 * mix). Never fails: out of memory, it writes a line saying so. */
void sbx_log(const char *fmt, ...) SBX_PRINTF(1, 2);
void sbx_logv(const char *fmt, va_list ap) SBX_PRINTF(1, 0);

#endif
