/* SPDX-License-Identifier: MIT */
/*
 * The audit log (include/sbx/audit.h), no engine needed.
 *
 * The module: every line is one JSON object with its time (RFC 3339, UTC,
 * milliseconds) and the fields given; hostile field values (10 kB, control
 * characters, a newline, bytes that are not UTF-8, a character across the
 * cut) stay one valid line with each field cut to SBX_AUDIT_FIELD_MAX; the
 * file is made 0600 whatever the umask, appended to (an existing line
 * kept); a symbolic link (to a file, dangling), a directory, a FIFO, a
 * group-writable file and a relative path are refused, naming the file and
 * touching nothing; 8 threads writing 8,000 lines leave 8,000 whole lines;
 * sbx_audit_reopen (SIGHUP) writes to a new file at the path after a
 * rename, and so does the next line a second after a rename or a removal
 * without any signal; a reopen refused (a symbolic link put there) keeps
 * the old file; on standard error the lines are pure JSON between the
 * server's own log lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sbx/audit.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "http-client.h"
#include "tap.h"

static char dir[] = "/tmp/test-audit.XXXXXX";

/* ---- reading the log ---- */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *text = NULL;
	size_t len = 0;

	if (!f)
		return strdup("");
	if (getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(f);
	return text;
}

/* The lines of PATH as a JSON array of their objects; *RET_ALL_JSON: every
 * line is one JSON object and the text ends with a newline. */
static struct json_object *lines_of(const char *path, bool *ret_all_json)
{
	struct json_object *arr = json_object_new_array();
	char *text = slurp(path), *p = text;
	bool ok = true;

	while (*p) {
		char *nl = strchr(p, '\n');
		struct json_object *o;
		if (!nl) {
			ok = false; /* a line without its end */
			break;
		}
		*nl = '\0';
		o = json_tokener_parse(p);
		if (!o || !json_object_is_type(o, json_type_object)) {
			tap_diag("not a JSON object: %s", p);
			ok = false;
			json_object_put(o);
		} else {
			json_object_array_add(arr, o);
		}
		p = nl + 1;
	}
	free(text);
	if (ret_all_json)
		*ret_all_json = ok;
	return arr;
}

static const char *str_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static int64_t int_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return -1;
	return json_object_get_int64(v);
}

static bool str_is(struct json_object *o, const char *key, const char *want)
{
	const char *v = str_of(o, key);
	return v && strcmp(v, want) == 0;
}

static size_t count_lines(const char *path)
{
	struct json_object *arr = lines_of(path, NULL);
	size_t n = json_object_array_length(arr);

	json_object_put(arr);
	return n;
}

static bool time_ok(const char *t)
{
	regex_t re;
	bool ok;

	if (!t ||
	    regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$",
		    REG_EXTENDED | REG_NOSUB) != 0)
		return false;
	ok = regexec(&re, t, 0, NULL, 0) == 0;
	regfree(&re);
	if (ok) {
		/* Within a minute of now. */
		struct tm tm = {0};
		time_t now = time(NULL), then;
		if (!strptime(t, "%Y-%m-%dT%H:%M:%S", &tm))
			return false;
		then = timegm(&tm);
		ok = then <= now + 1 && now - then < 60;
	}
	return ok;
}

/* ---- the module ---- */

static const struct sbx_audit_tool_call sample = {
    .tenant = "alice",
    .key_id = "0123456789ab",
    .session = "a1b2c3d4",
    .transport = "streamable",
    .client = "192.0.2.7",
    .tool = "execute_python_code",
    .sandbox_id = "0d5c0d5c0d5c",
    .sandbox_name = "analysis",
    .duration_ms = 1520,
    .outcome = "ok",
    .error = "",
    .bytes_out = 2048,
};

static void test_lines(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char path[256], tool[10001], cut[80];
	struct json_object *arr, *o;
	struct stat st;
	sbx_audit *a = NULL;
	mode_t old;
	bool all;
	int r;

	snprintf(path, sizeof(path), "%s/lines.log", dir);
	old = umask(0);
	r = sbx_audit_open(path, &a, &err);
	umask(old);
	if (r < 0 || stat(path, &st) < 0)
		st.st_mode = 0;
	tap_ok(r == 0 && (st.st_mode & 07777) == 0600, "the file is made 0600 under umask 0 (%o)",
	       (unsigned)(st.st_mode & 07777));
	tap_is_str(a ? sbx_audit_path(a) : "", path, "sbx_audit_path names it");
	sbx_audit_tool_call(a, &sample);
	sbx_audit_auth_failure(a, &(struct sbx_audit_auth_failure){.client = "192.0.2.9",
								   .method = "POST",
								   .route = "/mcp",
								   .reason = "rejected",
								   .key_id = "0123456789ab"});
	/* Hostile values: long, control characters, a newline, not UTF-8. */
	memset(tool, '\x01', sizeof(tool) - 1);
	tool[sizeof(tool) - 1] = '\0';
	sbx_audit_tool_call(
	    a, &(struct sbx_audit_tool_call){.tool = tool,
					     .tenant = "x\ny\r\n{\"event\":\"forged\"}",
					     .client = "\xff\xfe bad",
					     .outcome = "error"});
	/* A two-byte character across the cut: cut before it. */
	memset(cut, 'a', SBX_AUDIT_FIELD_MAX - 1);
	memcpy(cut + SBX_AUDIT_FIELD_MAX - 1, "\xc3\xa9zz", 5);
	sbx_audit_tool_call(a, &(struct sbx_audit_tool_call){.tool = cut});
	sbx_audit_tool_call(NULL, &sample); /* nothing, no crash */
	a = sbx_audit_free(a);

	arr = lines_of(path, &all);
	tap_ok(all && json_object_array_length(arr) == 4, "four lines, each one JSON object (%zu)",
	       json_object_array_length(arr));
	o = json_object_array_get_idx(arr, 0);
	tap_ok(str_is(o, "event", "tool_call") && time_ok(str_of(o, "time")),
	       "a tool_call line with its time as 2025-06-01T12:00:00.123Z: %s",
	       str_of(o, "time") ? str_of(o, "time") : "-");
	tap_ok(str_is(o, "tenant", "alice") && str_is(o, "key_id", "0123456789ab") &&
		   str_is(o, "session", "a1b2c3d4") && str_is(o, "transport", "streamable") &&
		   str_is(o, "client", "192.0.2.7") && str_is(o, "tool", "execute_python_code") &&
		   str_is(o, "sandbox_id", "0d5c0d5c0d5c") &&
		   str_is(o, "sandbox_name", "analysis") && int_of(o, "duration_ms") == 1520 &&
		   str_is(o, "outcome", "ok") && str_is(o, "error", "") &&
		   int_of(o, "bytes_out") == 2048,
	       "... every field as given");
	{
		static const char *const order[] = {
		    "time",	   "event",   "tenant", "key_id",     "session",
		    "transport",   "client",  "tool",	"sandbox_id", "sandbox_name",
		    "duration_ms", "outcome", "error",	"bytes_out"};
		size_t i = 0;
		bool same = (size_t)json_object_object_length(o) == SBX_ARRAY_SIZE(order);
		json_object_object_foreach(o, k, v)
		{
			(void)v;
			same = same && i < SBX_ARRAY_SIZE(order) && strcmp(k, order[i++]) == 0;
		}
		tap_ok(same, "... and nothing else, in a fixed order");
	}
	o = json_object_array_get_idx(arr, 1);
	tap_ok(str_is(o, "event", "auth_failure") && str_is(o, "client", "192.0.2.9") &&
		   str_is(o, "method", "POST") && str_is(o, "route", "/mcp") &&
		   str_is(o, "reason", "rejected") && str_is(o, "key_id", "0123456789ab") &&
		   time_ok(str_of(o, "time")) && json_object_object_length(o) == 7,
	       "an auth_failure line: time, event, client, method, route, reason, key_id");
	o = json_object_array_get_idx(arr, 2);
	tap_ok(str_of(o, "tool") && strlen(str_of(o, "tool")) == SBX_AUDIT_FIELD_MAX &&
		   str_is(o, "tenant", "x\ny\r\n{\"event\":\"forged\"}") &&
		   str_is(o, "client", "\xef\xbf\xbd\xef\xbf\xbd bad") && str_is(o, "key_id", "") &&
		   str_is(o, "sandbox_id", "") && str_is(o, "event", "tool_call"),
	       "hostile values: 10 kB cut to %d bytes, a newline escaped inside its string, "
	       "bytes that are not UTF-8 as U+FFFD, absent ones \"\"",
	       SBX_AUDIT_FIELD_MAX);
	o = json_object_array_get_idx(arr, 3);
	tap_ok(str_of(o, "tool") && strlen(str_of(o, "tool")) == SBX_AUDIT_FIELD_MAX - 1,
	       "a character across the cut is left out whole");
	json_object_put(arr);
	{
		char *text = slurp(path);
		size_t longest = 0;
		for (char *p = text, *nl; (nl = strchr(p, '\n')); p = nl + 1)
			if ((size_t)(nl - p) > longest)
				longest = (size_t)(nl - p);
		tap_ok(longest < SBX_AUDIT_LINE_MAX && strstr(text, "\\u0001"),
		       "the longest line (%zu bytes) is under SBX_AUDIT_LINE_MAX, control "
		       "characters escaped by json-c",
		       longest);
		free(text);
	}

	/* An existing file is appended to, its lines kept; 0640 is taken. */
	chmod(path, 0640);
	r = sbx_audit_open(path, &a, &err);
	sbx_audit_tool_call(a, &sample);
	a = sbx_audit_free(a);
	tap_ok(r == 0 && count_lines(path) == 5 && stat(path, &st) == 0 &&
		   (st.st_mode & 07777) == 0640,
	       "an existing file (0640) is appended to, its mode and lines kept");
}

static void expect_refused(const char *path, int want, const char *needle, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_audit *a = NULL;
	int r = sbx_audit_open(path, &a, &err);

	if (!tap_ok(r == want && !a && strstr(err.msg, "server.audit_log") &&
			strstr(err.msg, needle),
		    "%s: %d, \"%s\"", what, r, err.msg))
		sbx_audit_free(a);
}

static void test_refusals(void)
{
	char file[256], link[256], dangling[256], sub[256], fifo[256], gw[256], target[256];
	struct stat st;

	snprintf(file, sizeof(file), "%s/target.log", dir);
	snprintf(link, sizeof(link), "%s/link.log", dir);
	snprintf(dangling, sizeof(dangling), "%s/dangling.log", dir);
	snprintf(target, sizeof(target), "%s/not-made.log", dir);
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(gw, sizeof(gw), "%s/gw.log", dir);
	{
		int fd = open(file, O_CREAT | O_WRONLY | O_EXCL, 0600);
		if (fd < 0 || write(fd, "x\n", 2) != 2)
			tap_bail("target file");
		close(fd);
	}
	if (symlink(file, link) < 0 || symlink(target, dangling) < 0 || mkdir(sub, 0700) < 0 ||
	    mkfifo(fifo, 0600) < 0)
		tap_bail("fixtures");
	{
		int fd = open(gw, O_CREAT | O_WRONLY | O_EXCL, 0600);
		if (fd < 0)
			tap_bail("gw");
		fchmod(fd, 0620);
		close(fd);
	}
	expect_refused(link, -ELOOP, "symbolic link", "a symbolic link to a file is refused");
	tap_ok(stat(file, &st) == 0 && st.st_size == 2, "... its target untouched");
	expect_refused(dangling, -ELOOP, "symbolic link", "a dangling symbolic link is refused");
	tap_ok(access(target, F_OK) < 0, "... nothing made where it points");
	expect_refused(sub, -EISDIR, "cannot open", "a directory is refused");
	expect_refused(fifo, -EPERM, "not a regular file", "a FIFO is refused, not waited on");
	expect_refused(gw, -EPERM, "writable by its group", "a group-writable file is refused");
	expect_refused("audit.log", -EINVAL, "absolute", "a relative path is refused");
	{
		char missing[300];
		snprintf(missing, sizeof(missing), "%s/no/such/folder.log", dir);
		expect_refused(missing, -ENOENT, "its folder must exist", "a missing folder");
	}
}

#define THREADS 8
#define PER_THREAD 1000

static void *writer_main(void *arg)
{
	sbx_audit *a = arg;
	static atomic_int next;
	int t = atomic_fetch_add(&next, 1);

	for (int i = 0; i < PER_THREAD; i++) {
		char tool[SBX_AUDIT_FIELD_MAX + 1];
		struct sbx_audit_tool_call c = sample;
		/* Long lines: more bytes per write, more room to interleave. */
		snprintf(tool, sizeof(tool), "t%d-%d-%0*d", t, i, 50, 0);
		c.tool = tool;
		sbx_audit_tool_call(a, &c);
	}
	return NULL;
}

static void test_threads(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	static bool seen[THREADS][PER_THREAD];
	pthread_t t[THREADS];
	struct json_object *arr;
	char path[256];
	sbx_audit *a = NULL;
	size_t n, dup = 0, bad = 0;
	bool all;

	snprintf(path, sizeof(path), "%s/threads.log", dir);
	if (sbx_audit_open(path, &a, &err) < 0)
		tap_bail(err.msg);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, writer_main, a);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	a = sbx_audit_free(a);
	arr = lines_of(path, &all);
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		int th, k;
		const char *tool = str_of(json_object_array_get_idx(arr, i), "tool");
		if (!tool || sscanf(tool, "t%d-%d-", &th, &k) != 2 || th < 0 || th >= THREADS ||
		    k < 0 || k >= PER_THREAD) {
			bad++;
			continue;
		}
		dup += seen[th][k];
		seen[th][k] = true;
	}
	tap_ok(all && n == THREADS * PER_THREAD && !dup && !bad,
	       "%d threads x %d lines: %zu whole JSON lines, each once (%zu bad, %zu twice)",
	       THREADS, PER_THREAD, n, bad, dup);
	json_object_put(arr);
}

static void test_reopen(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char path[256], old[300];
	struct stat st;
	sbx_audit *a = NULL;

	snprintf(path, sizeof(path), "%s/rotate.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	if (sbx_audit_open(path, &a, &err) < 0)
		tap_bail(err.msg);
	sbx_audit_tool_call(a, &sample);
	/* The rotation: renamed, then the signal. */
	if (rename(path, old) < 0)
		tap_bail("rename");
	tap_ok(sbx_audit_reopen(a, &err) == 0, "sbx_audit_reopen after a rename: %s", err.msg);
	sbx_audit_tool_call(a, &sample);
	tap_ok(count_lines(old) == 1 && count_lines(path) == 1 && stat(path, &st) == 0 &&
		   (st.st_mode & 07777) == 0600,
	       "... the next line goes to a new file at the path, made 0600; the old one keeps "
	       "its line");

	/* Renamed without a signal: followed within SBX_AUDIT_CHECK_MS. */
	if (rename(path, old) < 0)
		tap_bail("rename");
	sleep_ms(SBX_AUDIT_CHECK_MS + 100);
	sbx_audit_tool_call(a, &sample);
	tap_ok(count_lines(path) == 1 && count_lines(old) == 1,
	       "renamed, no signal: the first line after %d ms goes to a new file",
	       SBX_AUDIT_CHECK_MS);
	/* Removed: the same. */
	unlink(path);
	sleep_ms(SBX_AUDIT_CHECK_MS + 100);
	sbx_audit_tool_call(a, &sample);
	tap_ok(count_lines(path) == 1, "removed: the next line makes it again");

	/* A symbolic link put in its place: the reopen is refused, the open
	 * file kept. */
	if (rename(path, old) < 0 || symlink("/etc/passwd", path) < 0)
		tap_bail("swap");
	tap_ok(sbx_audit_reopen(a, &err) == -ELOOP && strstr(err.msg, "symbolic link"),
	       "a reopen onto a symbolic link is refused: %s", err.msg);
	sbx_audit_tool_call(a, &sample);
	tap_ok(count_lines(old) == 2, "... the line goes to the file open before");
	sleep_ms(SBX_AUDIT_CHECK_MS + 100);
	sbx_audit_tool_call(a, &sample);
	tap_ok(count_lines(old) == 3, "... also when the next line sees the change");
	unlink(path);
	a = sbx_audit_free(a);
}

static void test_stderr(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char path[256], *text, *second;
	struct json_object *o;
	sbx_audit *a = NULL;
	int saved, fd;

	snprintf(path, sizeof(path), "%s/stderr.txt", dir);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	saved = dup(STDERR_FILENO);
	if (fd < 0 || saved < 0 || dup2(fd, STDERR_FILENO) < 0)
		tap_bail("stderr");
	close(fd);
	tap_ok(sbx_audit_open("", &a, &err) == 0 && a && !*sbx_audit_path(a),
	       "an empty path: standard error");
	sbx_log("a line of the server's log");
	sbx_audit_tool_call(a, &sample);
	tap_ok(sbx_audit_reopen(a, &err) == 0, "... a reopen does nothing");
	a = sbx_audit_free(a);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	text = slurp(path);
	second = strchr(text, '\n');
	second = second ? second + 1 : text;
	*strchrnul(second, '\n') = '\0';
	o = json_tokener_parse(second);
	tap_ok(strncmp(text, "mcp-sandboxd: a line", 20) == 0 && second[0] == '{' &&
		   str_is(o, "event", "tool_call"),
	       "the line on stderr is pure JSON (no prefix), apart from the log's: %s", second);
	json_object_put(o);
	free(text);
}

int main(void)
{
	char cmd[300];

	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	test_lines();
	test_refusals();
	test_threads();
	test_reopen();
	test_stderr();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		tap_diag("could not remove %s", dir);
	return tap_done();
}
