/* SPDX-License-Identifier: MIT */
/*
 * The log's escaping (src/base/log.c): what a sandbox or an engine puts in
 * a log line (a name, an error message) cannot end the line, forge another
 * or reach the terminal as an escape sequence; valid UTF-8 stays readable.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/log.h"
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

static void test_log_line(void)
{
	char *out = capture_stderr(log_forged);
	size_t lines = 0;
	bool raw_ctl = false;

	for (const char *p = out; *p; p++) {
		lines += *p == '\n';
		raw_ctl |= (unsigned char)*p < 0x20 && *p != '\n';
	}
	tap_is_int(lines, 1, "a forged newline in a log argument makes no second line");
	tap_ok(strncmp(out, "mcp-sandboxd: sandbox evil\\x0amcp-sandboxd: adopted", 51) == 0,
	       "the line starts with the prefix and shows the newline as \\x0a");
	tap_ok(!raw_ctl && strstr(out, "\\x1b]0;owned\\x07\\x1b[2K\\x0d\n"),
	       "no raw control byte reaches stderr (ESC, BEL, CR escaped)");
	free(out);

	out = capture_stderr(log_long);
	{
		char tail[64];
		size_t want = strlen("mcp-sandboxd: ") + SBX_LOG_LINE_MAX;
		snprintf(tail, sizeof(tail), " [%d bytes cut]\n", 1000);
		tap_ok(strlen(out) == want + strlen(tail) && strcmp(out + want, tail) == 0,
		       "a line is cut at SBX_LOG_LINE_MAX bytes and says how much was cut");
	}
	free(out);

	out = capture_stderr(log_two);
	tap_is_str(out, "mcp-sandboxd: one\nmcp-sandboxd: two 2\n", "one line per call");
	free(out);
}

int main(void)
{
	test_escape();
	test_log_line();
	return tap_done();
}
