/* SPDX-License-Identifier: MIT */
/* The server's log lines (include/sbx/log.h): escaped, one write each. */
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/log.h"
#include "sbx/utf8.h"

#define LOG_PREFIX "mcp-sandboxd: "

static int escape_bytes(struct sbx_buf *out, const unsigned char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		char e[4] = {'\\', 'x', hex[p[i] >> 4], hex[p[i] & 15]};
		int r = sbx_buf_append(out, e, sizeof(e));
		if (r < 0)
			return r;
	}
	return 0;
}

/* True for a valid sequence of N bytes at P that is still to be escaped:
 * a C1 control (U+0080..U+009F) or U+2028/U+2029. */
static bool seq_unsafe(const unsigned char *p, size_t n)
{
	return (n == 2 && p[0] == 0xC2 && p[1] <= 0x9F) ||
	       (n == 3 && p[0] == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9));
}

/* How many bytes at S[0..LEN) sbx_log_escape copies as they are (0: the
 * first byte is to be escaped) and, when 0, how many it escapes. */
static size_t kept_len(const unsigned char *s, size_t len, size_t *ret_escaped)
{
	size_t n;

	*ret_escaped = 1;
	if (s[0] >= 0x20 && s[0] < 0x7F)
		return s[0] == '\\' ? 0 : 1;
	if (s[0] < 0x80)
		return 0; /* C0, DEL */
	n = sbx_utf8_seq_len((const char *)s, len);
	if (n > 0 && seq_unsafe(s, n)) {
		*ret_escaped = n;
		return 0;
	}
	return n;
}

int sbx_log_escape(struct sbx_buf *out, const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0, start = 0, bad;
	int r = sbx_buf_reserve(out, len);

	while (r >= 0 && i < len) {
		size_t n = kept_len(s + i, len - i, &bad);

		if (n > 0) {
			i += n;
			continue;
		}
		r = sbx_buf_append(out, s + start, i - start);
		if (r >= 0)
			r = s[i] == '\\' ? sbx_buf_append(out, "\\\\", 2)
					 : escape_bytes(out, s + i, bad);
		i += bad;
		start = i;
	}
	if (r >= 0)
		r = sbx_buf_append(out, s + start, i - start);
	return r;
}

void sbx_logv(const char *fmt, va_list ap)
{
	static const char lost[] = LOG_PREFIX "(a log line was lost: out of memory)\n";
	struct sbx_buf line = SBX_BUF_INIT;
	char *text = NULL;
	int n = vasprintf(&text, fmt, ap);
	size_t len = n < 0 ? 0 : (size_t)n;
	int r = n < 0 ? -ENOMEM : 0;

	if (r >= 0)
		r = sbx_buf_append(&line, LOG_PREFIX, strlen(LOG_PREFIX));
	if (r >= 0)
		r = sbx_log_escape(&line, text, len > SBX_LOG_LINE_MAX ? SBX_LOG_LINE_MAX : len);
	if (r >= 0 && len > SBX_LOG_LINE_MAX)
		r = sbx_buf_appendf(&line, " [%zu bytes cut]", len - SBX_LOG_LINE_MAX);
	if (r >= 0)
		r = sbx_buf_append(&line, "\n", 1);
	if (n >= 0)
		free(text);
	flockfile(stderr);
	if (r >= 0)
		fwrite(line.data, 1, line.len, stderr);
	else
		fwrite(lost, 1, sizeof(lost) - 1, stderr);
	fflush(stderr);
	funlockfile(stderr);
	sbx_buf_release(&line);
}

void sbx_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sbx_logv(fmt, ap);
	va_end(ap);
}
