/* SPDX-License-Identifier: MIT */
/* The server's log lines (include/sbx/log.h): a level, escaped, text or
 * JSON, one write each. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/utf8.h"

#define LOG_PREFIX "mcp-sandboxd: "
#define TIME_MAX 32 /* "2025-06-01T12:00:00.123Z" and its NUL, with room */

enum journal_state { JOURNAL_UNKNOWN, JOURNAL_NO, JOURNAL_YES };

/* Set by sbx_log_setup before threads log; atomic because a line may be
 * written while a test sets them again. */
static atomic_int log_level = SBX_PRIO_INFO;
static atomic_int log_format = SBX_LOG_TEXT;
static atomic_int log_journal = JOURNAL_UNKNOWN;

static const struct {
	const char *word;
	enum sbx_log_prio level;
} levels[] = {
    {"error", SBX_PRIO_ERROR},
    {"warning", SBX_PRIO_WARNING},
    {"info", SBX_PRIO_INFO},
    {"debug", SBX_PRIO_DEBUG},
};

static const char *level_word(enum sbx_log_prio level)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(levels); i++)
		if (levels[i].level == level)
			return levels[i].word;
	return "info";
}

/* Whether JOURNAL_STREAM ("DEVICE:INODE", decimal) names stderr. */
static bool stderr_is_journal(void)
{
	const char *v = getenv("JOURNAL_STREAM");
	uintmax_t dev, ino;
	struct stat st;
	char *end;

	if (!v || !*v || fstat(STDERR_FILENO, &st) < 0)
		return false;
	errno = 0;
	dev = strtoumax(v, &end, 10);
	if (errno || end == v || *end != ':')
		return false;
	v = end + 1;
	ino = strtoumax(v, &end, 10);
	if (errno || end == v || *end)
		return false;
	return dev == (uintmax_t)st.st_dev && ino == (uintmax_t)st.st_ino;
}

static bool journal(void)
{
	int j = atomic_load_explicit(&log_journal, memory_order_relaxed);

	if (j == JOURNAL_UNKNOWN) {
		j = stderr_is_journal() ? JOURNAL_YES : JOURNAL_NO;
		atomic_store_explicit(&log_journal, j, memory_order_relaxed);
	}
	return j == JOURNAL_YES;
}

int sbx_log_setup(const char *level, const char *format, struct sbx_error *err)
{
	int lv = -1, fm = -1;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(levels); i++)
		if (strcmp(level, levels[i].word) == 0)
			lv = levels[i].level;
	if (lv < 0)
		return sbx_error_set(err, -EINVAL,
				     "server.log_level: unknown level \"%s\" (expected error, "
				     "warning, info or debug)",
				     level);
	if (strcmp(format, "text") == 0)
		fm = SBX_LOG_TEXT;
	else if (strcmp(format, "json") == 0)
		fm = SBX_LOG_JSON;
	else
		return sbx_error_set(err, -EINVAL,
				     "server.log_format: unknown format \"%s\" (expected text or "
				     "json)",
				     format);
	atomic_store(&log_level, lv);
	atomic_store(&log_format, fm);
	atomic_store(&log_journal, stderr_is_journal() ? JOURNAL_YES : JOURNAL_NO);
	return 0;
}

bool sbx_log_enabled(enum sbx_log_prio level)
{
	return (int)level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

bool sbx_log_to_journal(void)
{
	return journal();
}

/* "2025-06-01T12:00:00.123Z" (RFC 3339, UTC, ms) into BUF[TIME_MAX]. */
static void time_now(char buf[TIME_MAX])
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (!gmtime_r(&ts.tv_sec, &tm) ||
	    (n = strftime(buf, TIME_MAX, "%Y-%m-%dT%H:%M:%S", &tm)) == 0)
		n = (size_t)snprintf(buf, TIME_MAX, "1970-01-01T00:00:00");
	snprintf(buf + n, TIME_MAX - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

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

/* The line's start in the text format: the syslog priority for the
 * journal, else the time; then the prefix and the level. */
static int text_head(struct sbx_buf *line, enum sbx_log_prio level, const char *now)
{
	if (journal())
		return sbx_buf_appendf(line, "<%d>" LOG_PREFIX "%s: ", (int)level,
				       level_word(level));
	return sbx_buf_appendf(line, "%s " LOG_PREFIX "%s: ", now, level_word(level));
}

/* Adds KEY: V (taken; NULL: out of memory) to O. */
static int add(struct json_object *o, const char *key, struct json_object *v)
{
	if (!v || json_object_object_add(o, key, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

/* MSG[0..LEN) (escaped: valid UTF-8 with no control) as the JSON object
 * {"time","level","msg"} on one line, appended to LINE. */
static int json_line(struct sbx_buf *line, enum sbx_log_prio level, const char *now,
		     const char *msg, size_t len)
{
	struct json_object *o = json_object_new_object();
	const char *text = NULL;
	size_t n = 0;
	int r = o ? 0 : -ENOMEM;

	if (r >= 0)
		r = add(o, "time", json_object_new_string(now));
	if (r >= 0)
		r = add(o, "level", json_object_new_string(level_word(level)));
	if (r >= 0)
		r = add(o, "msg", json_object_new_string_len(msg, (int)len));
	/* PLAIN: no newline or indentation; the message has no control left. */
	if (r >= 0)
		text = json_object_to_json_string_length(
		    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
	if (r >= 0 && !text)
		r = -ENOMEM;
	if (r >= 0)
		r = sbx_buf_append(line, text, n);
	json_object_put(o);
	return r;
}

/* The line that says one was lost (nothing allocated), into BUF[SIZE]. */
static size_t lost_line(char *buf, size_t size, enum sbx_log_format format, const char *now)
{
	static const char what[] = "(a log line was lost: out of memory)";
	int n;

	if (format == SBX_LOG_JSON)
		n = snprintf(buf, size, "%s{\"time\":\"%s\",\"level\":\"error\",\"msg\":\"%s\"}\n",
			     journal() ? "<3>" : "", now, what);
	else if (journal())
		n = snprintf(buf, size, "<3>" LOG_PREFIX "error: %s\n", what);
	else
		n = snprintf(buf, size, "%s " LOG_PREFIX "error: %s\n", now, what);
	return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* Writes LINE[0..LEN) to stderr under its lock (the audit log's lines on
 * stderr take it too): one write(2), more only after a short one. */
static void write_stderr(const char *line, size_t len)
{
	flockfile(stderr);
	fflush(stderr); /* what stdio holds goes first */
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, line, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* nowhere to say it */
		line += n;
		len -= (size_t)n;
	}
	funlockfile(stderr);
}

void sbx_loglv(enum sbx_log_prio level, const char *fmt, va_list ap)
{
	enum sbx_log_format format = atomic_load_explicit(&log_format, memory_order_relaxed);
	struct sbx_buf line = SBX_BUF_INIT, msg = SBX_BUF_INIT;
	char now[TIME_MAX], *text = NULL;
	size_t len = 0;
	int r = 0, n;

	if (!sbx_log_enabled(level))
		return;
	time_now(now);
	/* The text is formatted into a bounded buffer: a huge argument costs
	 * no more memory than SBX_LOG_LINE_MAX. */
	text = malloc(SBX_LOG_LINE_MAX + 1);
	n = text ? vsnprintf(text, SBX_LOG_LINE_MAX + 1, fmt, ap) : -1;
	if (n < 0)
		r = -ENOMEM;
	else
		len = (size_t)n;
	if (r >= 0)
		r = sbx_log_escape(&msg, text, len > SBX_LOG_LINE_MAX ? SBX_LOG_LINE_MAX : len);
	if (r >= 0 && len > SBX_LOG_LINE_MAX)
		r = sbx_buf_appendf(&msg, " [%zu bytes cut]", len - SBX_LOG_LINE_MAX);
	free(text);
	/* On the journal a JSON line carries its priority too: journald takes
	 * the prefix off (SyslogLevelPrefix=), so the message stays pure JSON
	 * at its own priority. */
	if (r >= 0 && format == SBX_LOG_JSON && journal())
		r = sbx_buf_appendf(&line, "<%d>", (int)level);
	if (r >= 0 && format == SBX_LOG_JSON)
		r = json_line(&line, level, now, msg.data ? msg.data : "", msg.len);
	else if (r >= 0)
		r = text_head(&line, level, now);
	if (r >= 0 && format != SBX_LOG_JSON)
		r = sbx_buf_append(&line, msg.data, msg.len);
	if (r >= 0)
		r = sbx_buf_append(&line, "\n", 1);
	if (r >= 0) {
		write_stderr(line.data, line.len);
	} else {
		char lost[160];
		write_stderr(lost, lost_line(lost, sizeof(lost), format, now));
	}
	sbx_buf_release(&msg);
	sbx_buf_release(&line);
}

void sbx_logl(enum sbx_log_prio level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sbx_loglv(level, fmt, ap);
	va_end(ap);
}

void sbx_logv(const char *fmt, va_list ap)
{
	sbx_loglv(SBX_PRIO_INFO, fmt, ap);
}

#define LOG_AT(name, level)                                                                        \
	void name(const char *fmt, ...)                                                            \
	{                                                                                          \
		va_list ap;                                                                        \
                                                                                                   \
		va_start(ap, fmt);                                                                 \
		sbx_loglv(level, fmt, ap);                                                         \
		va_end(ap);                                                                        \
	}

LOG_AT(sbx_log_error, SBX_PRIO_ERROR)
LOG_AT(sbx_log_warn, SBX_PRIO_WARNING)
LOG_AT(sbx_log, SBX_PRIO_INFO)
LOG_AT(sbx_log_debug, SBX_PRIO_DEBUG)
