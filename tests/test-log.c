/* SPDX-License-Identifier: MIT */
/*
 * The log (src/base/log.c). Its escaping: what a sandbox or an engine puts
 * in a log line (a name, an error message) cannot end the line, forge
 * another or reach the terminal as an escape sequence; valid UTF-8 stays
 * readable. Its lines: one per call, cut at SBX_LOG_LINE_MAX; every level
 * in its word, and the level set (server.log_level) filters them; JSON
 * lines (server.log_format = json) parse with json-c and hold time, level
 * and msg; a hostile message (newlines, ANSI escapes, invalid UTF-8, C1
 * controls, 100 KB) is one bounded line of valid UTF-8 without a control
 * byte in both formats; with JOURNAL_STREAM naming stderr, text lines
 * start with the syslog priority and carry no time, and not otherwise.
 * Threads that log at once never split or mix each other's lines.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/utf8.h"
#include "tap.h"

struct esc_case {
	const char *in;
	size_t len; /* 0: strlen(in) */
	const char *want;
	const char *what;
};

static void test_escape(void)
{
	static const struct esc_case cases[] = {
	    {"plain text, 123 (ok) [x] {y} ~", 0, "plain text, 123 (ok) [x] {y} ~",
	     "printable ASCII"},
	    {"a\nmcp-sandboxd: forged", 0, "a\\x0amcp-sandboxd: forged", "a newline"},
	    {"a\r\nb", 0, "a\\x0d\\x0ab", "CR LF"},
	    {"\x1b[2J\x1b]0;title\x07", 0, "\\x1b[2J\\x1b]0;title\\x07", "ESC and BEL"},
	    {"tab\there", 0, "tab\\x09here", "a tab"},
	    {"a\0b", 3, "a\\x00b", "a NUL"},
	    {"del\x7f", 0, "del\\x7f", "DEL"},
	    {"C:\\x0a", 0, "C:\\\\x0a", "a backslash is doubled (an escape cannot be faked)"},
	    {"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 0,
	     "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "valid UTF-8 is kept"},
	    {"\xc2\x9b"
	     "31m",
	     0, "\\xc2\\x9b31m", "C1 CSI (U+009B)"},
	    {"\xc2\x85", 0, "\\xc2\\x85", "C1 NEL (U+0085)"},
	    {"\xc2\xa0", 0, "\xc2\xa0", "U+00A0 is kept"},
	    {"a\xe2\x80\xa8"
	     "b\xe2\x80\xa9",
	     0, "a\\xe2\\x80\\xa8b\\xe2\\x80\\xa9", "U+2028 and U+2029"},
	    {"\xe2\x80\xa7", 0, "\xe2\x80\xa7", "U+2027 is kept"},
	    {"\x9b", 0, "\\x9b", "a bare C1 byte"},
	    {"\xff\xfe", 0, "\\xff\\xfe", "bytes never in UTF-8"},
	    {"cut \xe6\x97", 0, "cut \\xe6\\x97", "a sequence cut short at the end"},
	    {"\xe6"
	     "a",
	     0, "\\xe6a", "a sequence cut short by ASCII"},
	    {"\xc0\xaf", 0, "\\xc0\\xaf", "an overlong slash"},
	    {"\xed\xa0\x80", 0, "\\xed\\xa0\\x80", "a surrogate"},
	    {"", 0, "", "nothing"},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		const struct esc_case *c = &cases[i];
		struct sbx_buf b = SBX_BUF_INIT;
		int r = sbx_log_escape(&b, c->in, c->len ? c->len : strlen(c->in));

		tap_ok(r == 0 && b.len == strlen(c->want) && memcmp(b.data, c->want, b.len) == 0,
		       "escape: %s", c->what);
		if (r == 0 && (b.len != strlen(c->want) || memcmp(b.data, c->want, b.len) != 0))
			tap_diag("  got \"%s\", expected \"%s\"", b.data, c->want);
		sbx_buf_release(&b);
	}
	{
		struct sbx_buf b = SBX_BUF_INIT;
		sbx_buf_append(&b, "kept:", 5);
		sbx_log_escape(&b, "\n", 1);
		tap_is_str(b.data, "kept:\\x0a", "escape appends to what the buffer holds");
		sbx_buf_release(&b);
	}
}

/* Runs FN with stderr sent to a file; what it wrote (owned). */
static char *capture_stderr(void (*fn)(void))
{
	char path[] = "/tmp/test-log.XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	struct sbx_buf b = SBX_BUF_INIT;
	char chunk[4096];
	ssize_t n;

	if (fd < 0 || saved < 0)
		tap_bail("mkstemp/dup");
	unlink(path);
	fflush(stderr);
	dup2(fd, 2);
	fn();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		sbx_buf_append(&b, chunk, (size_t)n);
	close(fd);
	return sbx_buf_steal(&b);
}

/* Sets the log's level and format, or bails out. */
static void setup(const char *level, const char *format)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_log_setup(level, format, &err) < 0)
		tap_bail(err.msg);
}

/* True when P starts with "YYYY-MM-DDTHH:MM:SS.mmmZ" (RFC 3339, UTC, ms). */
static bool is_time(const char *p)
{
	static const char pat[] = "dddd-dd-ddTdd:dd:dd.dddZ";

	for (size_t i = 0; i < sizeof(pat) - 1; i++)
		if (pat[i] == 'd' ? !(p[i] >= '0' && p[i] <= '9') : p[i] != pat[i])
			return false;
	return true;
}

/* LINE past its time and a space (a text line off the journal), or NULL. */
static const char *past_time(const char *line)
{
	return is_time(line) && line[24] == ' ' ? line + 25 : NULL;
}

static void log_forged(void)
{
	sbx_log("sandbox %s: %s", "evil\nmcp-sandboxd: adopted 0 sandbox(es)",
		"\x1b]0;owned\x07\x1b[2K\r");
}

static void log_long(void)
{
	char *big = malloc(SBX_LOG_LINE_MAX + 1000 + 1);

	if (!big)
		tap_bail("out of memory");
	memset(big, 'a', SBX_LOG_LINE_MAX + 1000);
	big[SBX_LOG_LINE_MAX + 1000] = '\0';
	sbx_log("%s", big);
	free(big);
}

static void log_two(void)
{
	sbx_log("one");
	sbx_log("two %d", 2);
}

static size_t count_lines(const char *out)
{
	size_t n = 0;

	for (const char *p = out; *p; p++)
		n += *p == '\n';
	return n;
}

static void test_log_line(void)
{
	char *out;
	const char *rest;
	bool raw_ctl = false;

	setup("info", "text");
	out = capture_stderr(log_forged);
	for (const char *p = out; *p; p++)
		raw_ctl |= (unsigned char)*p < 0x20 && *p != '\n';
	tap_is_int(count_lines(out), 1, "a forged newline in a log argument makes no second line");
	rest = past_time(out);
	tap_ok(rest && strncmp(rest, "mcp-sandboxd: info: sandbox evil\\x0amcp-sandboxd: adopted",
			       57) == 0,
	       "the line starts with the time, the prefix and the level, and shows the newline "
	       "as \\x0a");
	tap_ok(!raw_ctl && strstr(out, "\\x1b]0;owned\\x07\\x1b[2K\\x0d\n"),
	       "no raw control byte reaches stderr (ESC, BEL, CR escaped)");
	free(out);

	out = capture_stderr(log_long);
	{
		char tail[64];
		size_t want = 25 + strlen("mcp-sandboxd: info: ") + SBX_LOG_LINE_MAX;
		snprintf(tail, sizeof(tail), " [%d bytes cut]\n", 1000);
		tap_ok(strlen(out) == want + strlen(tail) && strcmp(out + want, tail) == 0,
		       "a line is cut at SBX_LOG_LINE_MAX bytes and says how much was cut");
	}
	free(out);

	out = capture_stderr(log_two);
	{
		const char *second = strchr(out, '\n');
		tap_ok(count_lines(out) == 2 && past_time(out) &&
			   strncmp(past_time(out), "mcp-sandboxd: info: one\n", 24) == 0 &&
			   second && past_time(second + 1) &&
			   strcmp(past_time(second + 1), "mcp-sandboxd: info: two 2\n") == 0,
		       "one line per call");
		if (count_lines(out) != 2)
			tap_diag("got \"%s\"", out);
	}
	free(out);
}

/* ---- levels ---- */

static void log_each_level(void)
{
	sbx_log_error("an error %d", 3);
	sbx_log_warn("a warning %d", 4);
	sbx_log("an info %d", 6);
	sbx_log_debug("a debug %d", 7);
	sbx_logl(SBX_PRIO_WARNING, "sbx_logl %s", "warning");
}

/* The level set to LEVEL: the lines of the levels up to it, in their words,
 * and no other. */
static void test_levels(void)
{
	static const struct {
		const char *set;
		const char *want[6];
	} cases[] = {
	    {"error", {"error: an error 3", NULL}},
	    {"warning",
	     {"error: an error 3", "warning: a warning 4", "warning: sbx_logl warning", NULL}},
	    {"info",
	     {"error: an error 3", "warning: a warning 4", "info: an info 6",
	      "warning: sbx_logl warning", NULL}},
	    {"debug",
	     {"error: an error 3", "warning: a warning 4", "info: an info 6", "debug: a debug 7",
	      "warning: sbx_logl warning", NULL}},
	};
	struct sbx_error err = SBX_ERROR_INIT;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		char *out, *p, *nl;
		size_t n = 0;
		bool ok = true;

		setup(cases[i].set, "text");
		out = capture_stderr(log_each_level);
		for (p = out; *p; p = nl + 1, n++) {
			const char *rest = past_time(p);
			nl = strchrnul(p, '\n');
			if (!*nl || !cases[i].want[n] || !rest ||
			    strncmp(rest, "mcp-sandboxd: ", 14) != 0 ||
			    strncmp(rest + 14, cases[i].want[n], strlen(cases[i].want[n])) != 0 ||
			    rest + 14 + strlen(cases[i].want[n]) != nl) {
				ok = false;
				break;
			}
		}
		tap_ok(ok && !cases[i].want[n],
		       "server.log_level = %s: the lines of the levels up to it, each with its "
		       "level, no other",
		       cases[i].set);
		if (!ok || cases[i].want[n])
			tap_diag("got:\n%s", out);
		free(out);
	}
	setup("warning", "text");
	tap_ok(sbx_log_enabled(SBX_PRIO_ERROR) && sbx_log_enabled(SBX_PRIO_WARNING) &&
		   !sbx_log_enabled(SBX_PRIO_INFO) && !sbx_log_enabled(SBX_PRIO_DEBUG),
	       "sbx_log_enabled follows the level set");
	tap_is_int(sbx_log_setup("verbose", "text", &err), -EINVAL, "an unknown level is refused");
	tap_ok(strstr(err.msg, "server.log_level") && strstr(err.msg, "verbose") &&
		   strstr(err.msg, "error, warning, info or debug"),
	       "... naming the setting, the word and the words allowed: %s", err.msg);
	tap_is_int(sbx_log_setup("debug", "xml", &err), -EINVAL, "an unknown format is refused");
	tap_ok(strstr(err.msg, "server.log_format") && strstr(err.msg, "text or json"),
	       "... naming the setting and the words allowed: %s", err.msg);
	tap_ok(!sbx_log_enabled(SBX_PRIO_INFO), "... and nothing changed");
	setup("info", "text");
}

/* ---- JSON ---- */

/* LINE[0..LEN) parsed as an object holding exactly time (RFC 3339, UTC, ms),
 * level and msg, all strings (NULL otherwise). */
static struct json_object *json_log_line(const char *line, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL, *v;
	bool ok = o && json_tokener_get_error(tok) == json_tokener_success &&
		  json_tokener_get_parse_end(tok) == len &&
		  json_object_is_type(o, json_type_object) && json_object_object_length(o) == 3;

	json_tokener_free(tok);
	for (size_t i = 0; ok && i < 3; i++) {
		static const char *const keys[] = {"time", "level", "msg"};
		ok = json_object_object_get_ex(o, keys[i], &v) &&
		     json_object_is_type(v, json_type_string);
	}
	if (ok && json_object_object_get_ex(o, "time", &v))
		ok = json_object_get_string_len(v) == 24 && is_time(json_object_get_string(v));
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static const char *get_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

static void log_empty(void)
{
	sbx_log("%s", "");
}

static void test_json(void)
{
	static const char *const want[][2] = {{"error", "an error 3"},
					      {"warning", "a warning 4"},
					      {"info", "an info 6"},
					      {"debug", "a debug 7"},
					      {"warning", "sbx_logl warning"}};
	char *out, *p, *nl;
	size_t n = 0;
	bool ok = true;

	setup("debug", "json");
	out = capture_stderr(log_each_level);
	for (p = out; *p && ok; p = nl + 1, n++) {
		struct json_object *o;
		nl = strchrnul(p, '\n');
		o = json_log_line(p, (size_t)(nl - p));
		ok = *nl && n < SBX_ARRAY_SIZE(want) && o &&
		     !strcmp(get_str(o, "level"), want[n][0]) &&
		     !strcmp(get_str(o, "msg"), want[n][1]);
		json_object_put(o);
	}
	tap_ok(ok && n == SBX_ARRAY_SIZE(want),
	       "json: a line per call, each an object of time (RFC 3339, UTC, ms), level and "
	       "msg, nothing before or after");
	if (!ok || n != SBX_ARRAY_SIZE(want))
		tap_diag("got:\n%s", out);
	free(out);

	setup("warning", "json");
	out = capture_stderr(log_each_level);
	tap_is_int(count_lines(out), 3, "json: the level set filters the lines too");
	free(out);

	setup("info", "json");
	out = capture_stderr(log_empty);
	{
		struct json_object *o = json_log_line(out, strcspn(out, "\n"));
		tap_ok(count_lines(out) == 1 && o && !strcmp(get_str(o, "msg"), ""),
		       "json: an empty message is a line with msg \"\"");
		json_object_put(o);
	}
	free(out);

	out = capture_stderr(log_forged);
	{
		struct json_object *o = json_log_line(out, strcspn(out, "\n"));
		tap_ok(count_lines(out) == 1 && o &&
			   !strcmp(get_str(o, "msg"),
				   "sandbox evil\\x0amcp-sandboxd: adopted 0 "
				   "sandbox(es): \\x1b]0;owned\\x07\\x1b[2K\\x0d"),
		       "json: msg holds the text escaped as in the text format");
		json_object_put(o);
	}
	free(out);
	setup("info", "text");
}

/* ---- hostile messages ---- */

#define HOSTILE_LEN (100 * 1024)

static char *hostile;

static void make_hostile(void)
{
	static const char head[] = "evil\n{\"level\":\"error\"}\r\n\x1b[31mred\x1b]0;t\x07"
				   "\xff\xfe\xc2\x9b\xe2\x80\xa8\xed\xa0\x80\xf0\x9f";
	static const char fill[] = "\n\x1b\xff\\\x9b\xc2";

	hostile = malloc(HOSTILE_LEN + 1);
	if (!hostile)
		tap_bail("out of memory");
	memcpy(hostile, head, sizeof(head) - 1);
	for (size_t i = sizeof(head) - 1; i < HOSTILE_LEN; i++)
		hostile[i] = fill[i % (sizeof(fill) - 1)];
	hostile[HOSTILE_LEN] = '\0';
}

static void log_hostile(void)
{
	sbx_log_warn("%s", hostile);
}

/* What a line of OUT may hold at most: the message cut and every byte
 * escaped (4 bytes each), doubled by JSON's backslashes, plus the rest. */
#define LINE_BOUND (SBX_LOG_LINE_MAX * 4 * 2 + 256)

/* OUT is one line (it ends in its only newline), of at most LINE_BOUND
 * bytes, valid UTF-8 with no control byte. */
static bool one_clean_line(const char *out)
{
	size_t len = strlen(out);

	if (len == 0 || len > LINE_BOUND || out[len - 1] != '\n' || count_lines(out) != 1 ||
	    !sbx_utf8_valid(out, len))
		return false;
	for (size_t i = 0; i + 1 < len; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			return false;
	return true;
}

static void test_hostile(void)
{
	static const char head_want[] =
	    "mcp-sandboxd: warning: evil\\x0a{\"level\":\"error\"}\\x0d\\x0a\\x1b[31m";
	char cut[64];
	char *out;
	const char *rest;

	make_hostile();
	snprintf(cut, sizeof(cut), " [%d bytes cut]", HOSTILE_LEN - SBX_LOG_LINE_MAX);

	setup("info", "text");
	out = capture_stderr(log_hostile);
	rest = past_time(out);
	tap_ok(one_clean_line(out),
	       "text: a hostile 100 KB message is one line, bounded, valid UTF-8, no control byte "
	       "(%zu bytes)",
	       strlen(out));
	tap_ok(rest && strncmp(rest, head_want, strlen(head_want)) == 0 && strstr(out, cut) &&
		   strstr(out, cut)[strlen(cut)] == '\n',
	       "text: ... the level, the message escaped, and the bytes cut at its end");
	free(out);

	setup("info", "json");
	out = capture_stderr(log_hostile);
	tap_ok(one_clean_line(out),
	       "json: a hostile 100 KB message is one line, bounded, valid UTF-8, no control byte "
	       "(%zu bytes)",
	       strlen(out));
	{
		struct json_object *o = json_log_line(out, strcspn(out, "\n"));
		const char *msg = o ? get_str(o, "msg") : "";
		size_t mlen = strlen(msg);
		bool ctl = false;

		for (size_t i = 0; i < mlen; i++)
			ctl |= (unsigned char)msg[i] < 0x20 || msg[i] == 0x7f;
		tap_ok(
		    o && !strcmp(get_str(o, "level"), "warning") &&
			!strncmp(msg, "evil\\x0a{\"level\":\"error\"}\\x0d\\x0a\\x1b[31mred", 43) &&
			mlen > strlen(cut) && !strcmp(msg + mlen - strlen(cut), cut) && !ctl &&
			sbx_utf8_valid(msg, mlen),
		    "json: ... it parses; msg, decoded, is the message escaped (no control "
		    "byte, valid UTF-8) and says what was cut");
		json_object_put(o);
	}
	free(out);
	setup("info", "text");
	free(hostile);
}

/* ---- the journal ---- */

static char journal_value[64];

static void log_journal(void)
{
	struct stat st;

	if (fstat(STDERR_FILENO, &st) < 0)
		tap_bail("fstat");
	snprintf(journal_value, sizeof(journal_value), "%ju:%ju", (uintmax_t)st.st_dev,
		 (uintmax_t)st.st_ino);
	setenv("JOURNAL_STREAM", journal_value, 1);
	setup("debug", "text");
	log_each_level();
}

static void log_journal_json(void)
{
	log_journal();
	setup("debug", "json");
	sbx_log("a json line");
}

static void log_not_journal(void)
{
	struct stat st;

	if (fstat(STDERR_FILENO, &st) < 0)
		tap_bail("fstat");
	/* stderr's device and another inode: another stream of the journal. */
	snprintf(journal_value, sizeof(journal_value), "%ju:%ju", (uintmax_t)st.st_dev,
		 (uintmax_t)st.st_ino + 1);
	setenv("JOURNAL_STREAM", journal_value, 1);
	setup("info", "text");
	sbx_log("not the journal");
	setenv("JOURNAL_STREAM", "garbage", 1);
	setup("info", "text");
	sbx_log("garbage");
	setenv("JOURNAL_STREAM", "", 1);
	setup("info", "text");
	sbx_log("empty");
}

static void test_journal(void)
{
	char *out;
	bool to_journal;

	out = capture_stderr(log_journal);
	to_journal = sbx_log_to_journal();
	tap_is_str(
	    out,
	    "<3>mcp-sandboxd: error: an error 3\n"
	    "<4>mcp-sandboxd: warning: a warning 4\n"
	    "<6>mcp-sandboxd: info: an info 6\n"
	    "<7>mcp-sandboxd: debug: a debug 7\n"
	    "<4>mcp-sandboxd: warning: sbx_logl warning\n",
	    "JOURNAL_STREAM names stderr: each line starts with its syslog priority, no time");
	tap_ok(to_journal, "... sbx_log_to_journal says so");
	free(out);

	out = capture_stderr(log_journal_json);
	{
		const char *json = strstr(out, "\n<6>{");
		struct json_object *o =
		    json ? json_log_line(json + 4, strcspn(json + 4, "\n")) : NULL;
		tap_ok(json && o && !strcmp(get_str(o, "msg"), "a json line") &&
			   !strcmp(get_str(o, "level"), "info"),
		       "JOURNAL_STREAM names stderr, json: the line starts with its priority "
		       "(<6>), which journald takes off, and the rest is pure JSON");
		if (!json)
			tap_diag("got:\n%s", out);
		json_object_put(o);
	}
	free(out);

	out = capture_stderr(log_not_journal);
	{
		const char *p = out, *q, *r;
		bool ok = count_lines(out) == 3;
		static const char *const want[] = {"mcp-sandboxd: info: not the journal\n",
						   "mcp-sandboxd: info: garbage\n",
						   "mcp-sandboxd: info: empty\n"};
		for (size_t i = 0; ok && i < 3; i++) {
			q = past_time(p);
			r = strchr(p, '\n');
			ok = q && r && (size_t)(r + 1 - q) == strlen(want[i]) &&
			     !strncmp(q, want[i], strlen(want[i]));
			p = r ? r + 1 : p;
		}
		tap_ok(ok && !strchr(out, '<'), "JOURNAL_STREAM naming another file, not a "
						"device:inode, or empty: the time, no "
						"priority");
		if (!ok)
			tap_diag("got:\n%s", out);
	}
	tap_ok(!sbx_log_to_journal(), "... sbx_log_to_journal says so");
	free(out);
	unsetenv("JOURNAL_STREAM");
	setup("info", "text");
}

/* ---- threads ---- */

#define THREADS 4
#define THREAD_LINES 200

static void *log_many(void *arg)
{
	char text[6000];

	memset(text, 'a' + (int)(intptr_t)arg, sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	for (int i = 0; i < THREAD_LINES; i++)
		sbx_log("%d %s", i, text);
	return NULL;
}

static void log_threads(void)
{
	pthread_t t[THREADS];

	for (intptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, log_many, (void *)i) != 0)
			tap_bail("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
}

/* Lines of 6 KB from 4 threads at once: each a whole JSON line, of one
 * thread's letter only. */
static void test_threads(void)
{
	char *out, *p, *nl;
	size_t n = 0;
	bool ok = true;

	setup("info", "json");
	out = capture_stderr(log_threads);
	for (p = out; *p && ok; p = nl + 1, n++) {
		struct json_object *o;
		const char *msg, *sp;
		nl = strchrnul(p, '\n');
		o = json_log_line(p, (size_t)(nl - p));
		msg = o ? get_str(o, "msg") : "";
		sp = strchr(msg, ' ');
		ok = *nl && sp && strlen(sp + 1) == 5999 &&
		     strspn(sp + 1, (char[]){sp[1], '\0'}) == 5999;
		json_object_put(o);
	}
	tap_ok(ok && n == THREADS * THREAD_LINES,
	       "threads: %d lines of 6 KB logged at once are %d whole JSON lines, none mixed",
	       THREADS * THREAD_LINES, THREADS * THREAD_LINES);
	free(out);
	setup("info", "text");
}

int main(void)
{
	unsetenv("JOURNAL_STREAM"); /* a test run under systemd */
	test_escape();
	test_log_line();
	test_levels();
	test_json();
	test_hostile();
	test_journal();
	test_threads();
	return tap_done();
}
