/* SPDX-License-Identifier: MIT */
/*
 * The server's log: one line on stderr per event, for the operator, with a
 * level (error, warning, info, debug) and in one of two formats
 * (server.log_format): text, or a JSON object per line.
 *
 * A log line often carries text that others chose: a container's name or an
 * engine's error message, a sandbox's name, a package spec, a file name. So
 * that such text can neither forge a line of its own nor drive the
 * operator's terminal, every line goes through sbx_logl, which escapes the
 * whole formatted text (sbx_log_escape), in both formats. Nothing else in
 * the server writes log lines to stderr.
 *
 * Text lines read "TIME mcp-sandboxd: LEVEL: MESSAGE" (TIME in RFC 3339,
 * UTC, ms). When stderr is the systemd journal's stream (JOURNAL_STREAM
 * names stderr's device and inode, see systemd.exec(5)) the journal keeps
 * the time, so a line is "<P>mcp-sandboxd: LEVEL: MESSAGE" instead, P the
 * syslog priority (3 error, 4 warning, 6 info, 7 debug; sd-daemon(3)), which
 * journald takes as the line's priority. JSON lines are
 * {"time":TIME,"level":LEVEL,"msg":MESSAGE}, built with json-c, under the
 * journal too.
 */
#ifndef SBX_LOG_H
#define SBX_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* Bytes of formatted text one line keeps (before escaping); the rest is cut
 * and the line says how many bytes were. */
#define SBX_LOG_LINE_MAX 8192

/* The levels, valued as their syslog priorities. A line is written when
 * its level is at most the one set (sbx_log_setup): "info" writes errors,
 * warnings and info lines, not debug ones. */
enum sbx_log_prio {
	SBX_PRIO_ERROR = 3,
	SBX_PRIO_WARNING = 4,
	SBX_PRIO_INFO = 6,
	SBX_PRIO_DEBUG = 7,
};

enum sbx_log_format {
	SBX_LOG_TEXT,
	SBX_LOG_JSON,
};

/* Sets the level ("error", "warning", "info" or "debug", the words of
 * server.log_level) and the format ("text" or "json", server.log_format),
 * and looks whether stderr is the journal's stream (again: call it after
 * stderr changed). Until it is called: info, text, and the journal looked
 * at by the first line. 0, or -EINVAL naming the word (nothing changed).
 * Call it before threads log (the server: once, at the start). */
int sbx_log_setup(const char *level, const char *format, struct sbx_error *err);

/* True when a line of LEVEL would be written (to skip costly arguments). */
bool sbx_log_enabled(enum sbx_log_prio level);

/* True when text lines go to the journal (the last sbx_log_setup saw
 * JOURNAL_STREAM naming stderr). */
bool sbx_log_to_journal(void);

/* Appends TEXT[0..LEN) to OUT with every byte that could end a line, forge
 * one or drive a terminal written as \xNN (two lowercase hex digits): the
 * C0 controls (\n, \r, \t, ESC, NUL...), DEL, the C1 controls
 * (U+0080..U+009F, and the bare bytes 0x80..0x9F), U+2028 and U+2029
 * (line and paragraph separators), and every byte that is not part of
 * valid UTF-8. A backslash becomes \\, so the escapes are unambiguous.
 * Other valid UTF-8 is kept as it is. 0, or -ENOMEM with OUT holding a
 * prefix of the result. */
int sbx_log_escape(struct sbx_buf *out, const char *text, size_t len);

/* Writes one line of LEVEL to stderr, unless the level set filters it out:
 * FMT formatted (at most SBX_LOG_LINE_MAX bytes of it) and escaped by
 * sbx_log_escape, in the format set, then "\n", with one write(2) under
 * stderr's lock (lines of concurrent threads, and the audit log's, do not
 * mix). Never fails: out of memory, it writes a line saying so. */
void sbx_logl(enum sbx_log_prio level, const char *fmt, ...) SBX_PRINTF(2, 3);
void sbx_loglv(enum sbx_log_prio level, const char *fmt, va_list ap) SBX_PRINTF(2, 0);

/* sbx_logl at a level: an operation of the server failed (an engine's
 * error, a refused start); something is wrong but the server goes on (a
 * relay's protocol violation, a limit reached); what the server does; what
 * helps to debug it. */
void sbx_log_error(const char *fmt, ...) SBX_PRINTF(1, 2);
void sbx_log_warn(const char *fmt, ...) SBX_PRINTF(1, 2);
void sbx_log(const char *fmt, ...) SBX_PRINTF(1, 2); /* info */
void sbx_log_debug(const char *fmt, ...) SBX_PRINTF(1, 2);
void sbx_logv(const char *fmt, va_list ap) SBX_PRINTF(1, 0); /* info */

#endif
