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
 *
 * Through the HTTP front (in-process, API keys from a keys file, stand-in
 * tools; tenants alice, bob and carol): a tool call's line on Streamable
 * HTTP and on SSE (tenant, key id, the session id's first 8 characters,
 * transport, client address, tool, sandbox, duration, outcome, bytes_out
 * equal to the response's size); a failing real tool (not_found), an
 * unknown tool, a limit's refusal (quota, from the tool), a call refused
 * at server.max_calls_per_session (session_calls), a call cancelled by its
 * client leaving; auth failures: missing, malformed (scheme, shape),
 * conflicting, rejected (a wrong secret, a revoked key: their key ids),
 * throttled (429). Nowhere in the log: any key or its secret part, a whole
 * session id, the code, arguments or output of a call.
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

#include <curl/curl.h>
#include <json-c/json.h>

#include "http/http-internal.h"
#include "mcp/mcp-internal.h"
#include "tools/tools.h"
#include "sbx/audit.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/http.h"
#include "sbx/log.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "http-client.h"
#include "tap.h"

#define HS(...) ((const char *const[]){__VA_ARGS__, NULL})

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

/* The last line of PATH whose EVENT and KEY (NULL: any) = VALUE, a new
 * reference, waiting for it at most MS. */
static struct json_object *find_line(const char *path, const char *event, const char *key,
				     const char *value, int ms)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct json_object *arr = lines_of(path, NULL), *found = NULL;
		for (size_t i = json_object_array_length(arr); i-- > 0 && !found;) {
			struct json_object *o = json_object_array_get_idx(arr, i);
			if (str_is(o, "event", event) && (!key || str_is(o, key, value)))
				found = json_object_get(o);
		}
		json_object_put(arr);
		if (found || elapsed_ms(&t0) >= ms)
			return found;
		sleep_ms(50);
	}
}

static size_t count_lines(const char *path)
{
	struct json_object *arr = lines_of(path, NULL);
	size_t n = json_object_array_length(arr);

	json_object_put(arr);
	return n;
}

static void diag_line(struct json_object *o)
{
	tap_diag("  line: %s", o ? json_object_to_json_string(o) : "(none)");
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
	{
		char hard[300];
		snprintf(hard, sizeof(hard), "%s/hard.log", dir);
		if (linkat(AT_FDCWD, file, AT_FDCWD, hard, 0) < 0)
			tap_bail("hard link");
		expect_refused(
		    hard, -EPERM, "hard links",
		    "a file with another hard link (it could be the keys file) is refused");
		tap_ok(stat(file, &st) == 0 && st.st_size == 2,
		       "... the other name's file untouched");
		unlink(hard);
	}
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
	tap_ok(strstr(text, " mcp-sandboxd: info: a line") && second[0] == '{' &&
		   str_is(o, "event", "tool_call"),
	       "the line on stderr is pure JSON (no prefix), apart from the log's: %s", second);
	json_object_put(o);
	free(text);
}

/* ---- through the HTTP front ---- */

#define CODE_MARK "code-marker-5e1f"
#define ARG_MARK "arg-marker-77c2"
#define OUT_MARK "output-marker-a9d3"
#define MCP_HEADERS ACCEPT_BOTH "\r\n" CT_JSON "\r\n"

static int fake_tools_call(const struct sbx_tool_ctx *ctx, const char *name,
			   struct json_object *args, struct json_object **ret_result,
			   struct sbx_error *err)
{
	const char *text = NULL;
	bool is_error = false;

	if (strcmp(name, "run") == 0) {
		/* Stands for code run in a sandbox: takes a while, prints. */
		sleep_ms(60);
		if (ctx->audit) {
			snprintf(ctx->audit->sandbox_id, sizeof(ctx->audit->sandbox_id),
				 "abc123abc123");
			snprintf(ctx->audit->sandbox_name, sizeof(ctx->audit->sandbox_name), "box");
		}
		text = "printed " OUT_MARK;
	} else if (strcmp(name, "limited") == 0) {
		if (ctx->audit)
			ctx->audit->error = "quota";
		text = "the tenant's quota of sandboxes (2) is reached";
		is_error = true;
	} else if (strcmp(name, "slow") == 0) {
		slow_tool_run(ctx);
		text = "done";
	} else {
		return sbx_tools_call(ctx, name, args, ret_result, err);
	}
	*ret_result = json_object_new_object();
	{
		struct json_object *content = json_object_new_array(),
				   *item = json_object_new_object();
		json_object_object_add(item, "type", json_object_new_string("text"));
		json_object_object_add(item, "text", json_object_new_string(text));
		json_object_array_add(content, item);
		json_object_object_add(*ret_result, "content", content);
		json_object_object_add(*ret_result, "isError", json_object_new_boolean(is_error));
	}
	return 0;
}

static const char *bearer(char *buf, size_t n, const char *key)
{
	snprintf(buf, n, "Authorization: Bearer %s", key);
	return buf;
}

static char *call_body(int id, const char *tool, const char *args)
{
	char *b = NULL;

	if (asprintf(&b,
		     "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":"
		     "{\"name\":\"%s\",\"arguments\":%s}}",
		     id, tool, args) < 0)
		tap_bail("asprintf");
	return b;
}

struct keys {
	char alice[SBX_API_KEY_LEN + 1], bob[SBX_API_KEY_LEN + 1], carol[SBX_API_KEY_LEN + 1];
	char alice_id[SBX_KEY_ID_LEN + 1], bob_id[SBX_KEY_ID_LEN + 1], carol_id[SBX_KEY_ID_LEN + 1];
	char wrong[SBX_API_KEY_LEN + 1]; /* alice's id, another secret */
};

static bool id_prefix(const char *line_session, const char *id)
{
	return line_session && strlen(line_session) == SBX_SESSION_ID_INDEX &&
	       strncmp(line_session, id, SBX_SESSION_ID_INDEX) == 0;
}

static void test_streamable_calls(const char *log, const struct keys *k, char *sessions[2])
{
	char ha[160], *body;
	struct json_object *o;
	struct reply r;
	char *id;

	http_from("127.0.0.50");
	bearer(ha, sizeof(ha), k->alice);
	id = mcp_initialize_with(ha);
	if (!tap_ok(id != NULL, "alice initializes a Streamable HTTP session"))
		return;
	sessions[0] = id;

	body = call_body(10, "run", "{\"code\":\"x = '" CODE_MARK "'\",\"arg\":\"" ARG_MARK "\"}");
	r = mcp_post(id, ha, body);
	free(body);
	o = find_line(log, "tool_call", "tool", "run", 2000);
	tap_ok(r.status == 200 && o, "a tool call: a tool_call line");
	if (!tap_ok(str_is(o, "tenant", "alice") && str_is(o, "key_id", k->alice_id) &&
			id_prefix(str_of(o, "session"), id) &&
			str_is(o, "transport", "streamable") && str_is(o, "client", "127.0.0.50") &&
			str_is(o, "sandbox_id", "abc123abc123") &&
			str_is(o, "sandbox_name", "box") && str_is(o, "outcome", "ok") &&
			str_is(o, "error", "") && time_ok(str_of(o, "time")),
		    "... tenant alice, her key's id, the session's first %d characters, "
		    "streamable, 127.0.0.50, its sandbox, ok",
		    SBX_SESSION_ID_INDEX))
		diag_line(o);
	tap_ok(int_of(o, "duration_ms") >= 60 && int_of(o, "duration_ms") < 10000,
	       "... duration_ms %lld (the tool took 60 ms)", (long long)int_of(o, "duration_ms"));
	tap_ok(int_of(o, "bytes_out") == (int64_t)r.body.len,
	       "... bytes_out %lld: the size of the response sent (%zu)",
	       (long long)int_of(o, "bytes_out"), r.body.len);
	json_object_put(o);
	reply_release(&r);

	/* A real tool that fails: an unknown sandbox. */
	body = call_body(11, "execute_python_code",
			 "{\"sandbox_id\":\"nosuchbox\",\"code\":\"print('" CODE_MARK "')\"}");
	r = mcp_post(id, ha, body);
	free(body);
	o = find_line(log, "tool_call", "tool", "execute_python_code", 2000);
	if (!tap_ok(r.status == 200 && strstr(r.body.data, "\"isError\":true") &&
			str_is(o, "outcome", "error") && str_is(o, "error", "not_found") &&
			str_is(o, "sandbox_id", "") &&
			int_of(o, "bytes_out") == (int64_t)r.body.len,
		    "a failing call (no such sandbox): outcome error, error not_found, no sandbox"))
		diag_line(o);
	json_object_put(o);
	reply_release(&r);

	/* An unknown tool: its name (a client's) cut to the field's bound. */
	{
		char name[200];
		memset(name, 'z', sizeof(name) - 1);
		name[sizeof(name) - 1] = '\0';
		body = call_body(12, name, "{}");
		r = mcp_post(id, ha, body);
		free(body);
		name[SBX_AUDIT_FIELD_MAX] = '\0';
		o = find_line(log, "tool_call", "tool", name, 2000);
		tap_ok(r.status == 200 && str_is(o, "outcome", "error") &&
			   str_is(o, "error", "unknown_tool"),
		       "an unknown tool: error unknown_tool, its name cut to %d bytes",
		       SBX_AUDIT_FIELD_MAX);
		json_object_put(o);
		reply_release(&r);
	}
	/* A limit of the tenant's, said by the tool: refused. */
	body = call_body(13, "limited", "{}");
	r = mcp_post(id, ha, body);
	free(body);
	o = find_line(log, "tool_call", "tool", "limited", 2000);
	tap_ok(str_is(o, "outcome", "refused") && str_is(o, "error", "quota"),
	       "a quota's refusal: outcome refused, error quota");
	json_object_put(o);
	reply_release(&r);
	http_from(NULL);
}

/* A slow call on a connection that its client closes: cancelled; one
 * past server.max_calls_per_session (1) meanwhile: refused. */
static void test_cancel_refuse(const char *log, const struct keys *k, const char *id)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	char headers[512], ha[160], *body;
	struct json_object *o;
	struct reply r;
	int fd, started = slow_tool_started();

	http_from("127.0.0.51");
	bearer(ha, sizeof(ha), k->alice);
	snprintf(headers, sizeof(headers), MCP_HEADERS "Mcp-Session-Id: %s\r\n%s\r\n", id, ha);
	body = call_body(20, "slow", "{}");
	fd = raw_post("/mcp", headers, 0, body);
	free(body);
	tap_ok(slow_tool_wait_started(started + 1), "a slow call runs");
	body = call_body(21, "run", "{}");
	r = mcp_post(id, ha, body);
	free(body);
	o = find_line(log, "tool_call", "outcome", "refused", 2000);
	if (!tap_ok(r.status == 200 && strstr(r.body.data, "max_calls_per_session") &&
			str_is(o, "tool", "run") && str_is(o, "error", "session_calls") &&
			str_is(o, "client", "127.0.0.51") && id_prefix(str_of(o, "session"), id) &&
			int_of(o, "bytes_out") == (int64_t)r.body.len,
		    "a call past server.max_calls_per_session: outcome refused, error "
		    "session_calls, bytes_out the refusal's size"))
		diag_line(o);
	json_object_put(o);
	reply_release(&r);
	close(fd);
	o = find_line(log, "tool_call", "outcome", "cancelled", 5000);
	if (!tap_ok(str_is(o, "tool", "slow") && int_of(o, "bytes_out") == 0 &&
			str_is(o, "client", "127.0.0.51"),
		    "its client gone, the slow call's line: outcome cancelled, bytes_out 0"))
		diag_line(o);
	json_object_put(o);
	sbx_buf_release(&acc);
	http_from(NULL);
}

static void test_sse_call(const char *log, const struct keys *k, char **ret_id)
{
	struct sse_session s = {0};
	char path[160], *body;
	struct json_object *o;
	struct reply r;

	http_from("127.0.0.52");
	snprintf(path, sizeof(path), "/sse?api_key=%s", k->bob);
	s.path = path;
	if (!tap_ok(sse_open(&s, SSE_INITIALIZED), "bob opens an SSE session with ?api_key="))
		return;
	*ret_id = strdup(s.id);
	body = call_body(30, "run", "{\"code\":\"" CODE_MARK "\"}");
	r = sse_post(s.id, body);
	free(body);
	tap_ok(r.status == 202 && read_until(s.fd, &s.acc, OUT_MARK, 5000),
	       "... a tool call's result comes on the stream");
	reply_release(&r);
	o = find_line(log, "tool_call", "tenant", "bob", 2000);
	if (!tap_ok(str_is(o, "key_id", k->bob_id) && id_prefix(str_of(o, "session"), s.id) &&
			str_is(o, "transport", "sse") && str_is(o, "client", "127.0.0.52") &&
			str_is(o, "tool", "run") && str_is(o, "outcome", "ok") &&
			int_of(o, "bytes_out") > 0,
		    "... its line: bob, his key's id, the SSE session's first %d characters, sse, "
		    "the POST's address",
		    SBX_SESSION_ID_INDEX))
		diag_line(o);
	json_object_put(o);
	sse_close(&s);
	http_from(NULL);
}

/* The last auth_failure line from CLIENT after a request: REASON and KEY_ID. */
static void expect_failure(const char *log, size_t before, const char *client, const char *method,
			   const char *route, const char *reason, const char *key_id,
			   const char *what)
{
	struct json_object *o = NULL;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (count_lines(log) <= before && elapsed_ms(&t0) < 2000)
		sleep_ms(20);
	o = find_line(log, "auth_failure", NULL, NULL, 0);
	if (!tap_ok(count_lines(log) == before + 1 && str_is(o, "client", client) &&
			str_is(o, "method", method) && str_is(o, "route", route) &&
			str_is(o, "reason", reason) && str_is(o, "key_id", key_id) &&
			time_ok(str_of(o, "time")),
		    "%s: one auth_failure line, reason %s, key_id \"%s\"", what, reason, key_id))
		diag_line(o);
	json_object_put(o);
}

static void test_failures(const char *log, const struct keys *k, const char *keys_path)
{
	char h[200], path[200];
	struct reply r;
	size_t n;

	http_from("127.0.0.60");
	n = count_lines(log);
	r = mcp_post(NULL, NULL, init_body);
	tap_is_int(r.status, 401, "no key: 401");
	reply_release(&r);
	expect_failure(log, n, "127.0.0.60", "POST", "/mcp", "missing", "", "no key");

	n = count_lines(log);
	r = mcp_post(NULL, "Authorization: Basic YWxpY2U6eA==", init_body);
	reply_release(&r);
	expect_failure(log, n, "127.0.0.60", "POST", "/mcp", "malformed", "", "Basic auth");

	n = count_lines(log);
	snprintf(h, sizeof(h), "X-API-Key: %.40s", k->alice);
	r = mcp_post(NULL, h, init_body);
	reply_release(&r);
	expect_failure(log, n, "127.0.0.60", "POST", "/mcp", "malformed", "",
		       "alice's key cut short");

	n = count_lines(log);
	{
		char hb[160];
		snprintf(hb, sizeof(hb), "X-API-Key: %s", k->bob);
		r = request("POST", "/mcp",
			    HS(ACCEPT_BOTH, CT_JSON, bearer(h, sizeof(h), k->alice), hb),
			    init_body);
		reply_release(&r);
	}
	expect_failure(log, n, "127.0.0.60", "POST", "/mcp", "conflicting", "",
		       "alice's key and bob's");

	http_from("127.0.0.61");
	n = count_lines(log);
	snprintf(path, sizeof(path), "/sse?api_key=%s", k->wrong);
	r = request("GET", path, HS("Accept: text/event-stream"), NULL);
	tap_is_int(r.status, 401, "a wrong secret on /sse: 401");
	reply_release(&r);
	expect_failure(log, n, "127.0.0.61", "GET", "/sse", "rejected", k->alice_id,
		       "alice's id with a wrong secret");

	/* Revoked: carol's key, refused within a few seconds. */
	{
		struct sbx_error err = SBX_ERROR_INIT;
		struct timespec t0;
		size_t count;
		long st = 0;
		if (sbx_keys_revoke(keys_path, NULL, k->carol_id, NULL, &count, &err) < 0)
			tap_bail(err.msg);
		bearer(h, sizeof(h), k->carol);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (elapsed_ms(&t0) < 5000) {
			n = count_lines(log);
			r = mcp_post(NULL, h, init_body);
			st = r.status;
			reply_release(&r);
			if (st == 401)
				break;
			sleep_ms(200);
		}
		tap_is_int(st, 401, "a revoked key: 401");
		expect_failure(log, n, "127.0.0.61", "POST", "/mcp", "rejected", k->carol_id,
			       "carol's revoked key");
	}

	/* Throttled: past SBX_AUTH_FAIL_MAX failures from one address. */
	http_from("127.0.0.62");
	for (int i = 0; i < SBX_AUTH_FAIL_MAX; i++) {
		r = mcp_post(NULL, NULL, init_body);
		reply_release(&r);
	}
	n = count_lines(log);
	r = mcp_post(NULL, NULL, init_body);
	tap_is_int(r.status, 429, "past %d failures: the next failure is 429", SBX_AUTH_FAIL_MAX);
	reply_release(&r);
	expect_failure(log, n, "127.0.0.62", "POST", "/mcp", "throttled", "",
		       "the throttled request");
	n = count_lines(log);
	for (int i = 0; i < 5; i++) {
		r = mcp_post(NULL, NULL, init_body);
		reply_release(&r);
	}
	tap_is_int(count_lines(log), n,
		   "5 more 429s from it add no line (one per window: a refused flood does not "
		   "flood the log)");
	r = mcp_post(NULL, bearer(h, sizeof(h), k->alice), init_body);
	tap_is_int(r.status, 200, "... while a right key from that address is served");
	reply_release(&r);
	tap_is_int(count_lines(log), n, "... and logs no auth_failure");

	/* Many addresses failing at once: at most SBX_AUTH_AUDIT_PER_S lines a
	 * second in all (each address stays under the 429). */
	{
		size_t sent = 0;
		n = count_lines(log);
		for (int a = 1; a <= 200 && (sent < 300 || count_lines(log) - n == sent); a++) {
			char addr[32];
			snprintf(addr, sizeof(addr), "127.0.1.%d", a);
			http_from(addr);
			for (int i = 0; i < SBX_AUTH_FAIL_MAX - 1; i++, sent++) {
				r = mcp_post(NULL, NULL, init_body);
				reply_release(&r);
			}
		}
		tap_ok(count_lines(log) - n < sent,
		       "%zu failures from many addresses as fast as they come: %zu audit lines (at "
		       "most %d a second)",
		       sent, count_lines(log) - n, SBX_AUTH_AUDIT_PER_S);
	}
	http_from(NULL);
}

static void test_front(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct keys k = {0};
	char keys_path[256], log[256], set[320], *sessions[2] = {NULL, NULL};
	sbx_engine *engine = NULL;
	sbx_manager *manager = NULL;
	sbx_auth *auth = NULL;
	sbx_audit *audit = NULL;
	sbx_mcp *mcp = NULL;
	sbx_http *http = NULL;
	struct http_target saved;

	snprintf(keys_path, sizeof(keys_path), "%s/keys", dir);
	snprintf(log, sizeof(log), "%s/front.log", dir);
	if (sbx_keys_add(keys_path, "alice", NULL, 0, k.alice, &err) < 0 ||
	    sbx_keys_add(keys_path, "bob", NULL, 0, k.bob, &err) < 0 ||
	    sbx_keys_add(keys_path, "carol", NULL, 0, k.carol, &err) < 0)
		tap_bail(err.msg);
	snprintf(k.alice_id, sizeof(k.alice_id), "%.*s", SBX_KEY_ID_LEN, k.alice + 4);
	snprintf(k.bob_id, sizeof(k.bob_id), "%.*s", SBX_KEY_ID_LEN, k.bob + 4);
	snprintf(k.carol_id, sizeof(k.carol_id), "%.*s", SBX_KEY_ID_LEN, k.carol + 4);
	snprintf(k.wrong, sizeof(k.wrong), "msk_%s_%064d", k.alice_id, 7);

	snprintf(set, sizeof(set), "auth.keys_file=%s", keys_path);
	if (sbx_settings_init(&s) < 0 ||
	    sbx_settings_set(&s, "server.listen=127.0.0.1", &err) < 0 ||
	    sbx_settings_set(&s, "server.port=0", &err) < 0 ||
	    sbx_settings_set(&s, "server.max_calls_per_session=1", &err) < 0 ||
	    sbx_settings_set(&s, set, &err) < 0 ||
	    sbx_settings_set(&s, "engine.socket=unix:///nonexistent/mcp-sandbox-test.sock", &err) <
		0)
		tap_bail(err.msg[0] ? err.msg : "settings");
	{
		struct sbx_engine_config ec = {
		    .type = s.engine.type, .url = s.engine.socket, .timeout_ms = 2000};
		if (sbx_engine_open(&ec, &engine, &err) < 0 ||
		    sbx_manager_new(&s, engine, &manager, &err) < 0 ||
		    sbx_auth_open(&s, &auth, &err) < 0 || sbx_audit_open(log, &audit, &err) < 0)
			tap_bail(err.msg);
	}
	{
		const struct sbx_mcp_config mc = {
		    .settings = &s, .manager = manager, .audit = audit};
		if (sbx_mcp_new(&mc, &mcp, &err) < 0)
			tap_bail(err.msg);
		sbx_mcp_set_tools_call(mcp, fake_tools_call);
	}
	{
		const struct sbx_http_config hc = {
		    .settings = &s, .mcp = mcp, .manager = manager, .auth = auth, .audit = audit};
		if (sbx_http_start(&hc, &http, &err) < 0)
			tap_bail(err.msg);
	}
	saved = http_use(sbx_http_port(http), false);

	test_streamable_calls(log, &k, sessions);
	if (sessions[0])
		test_cancel_refuse(log, &k, sessions[0]);
	test_sse_call(log, &k, &sessions[1]);
	test_failures(log, &k, keys_path);

	http_restore(&saved);
	sbx_http_stop(http);
	{
		bool all;
		struct json_object *arr = lines_of(log, &all);
		char *text = slurp(log);
		const char *const keys[] = {k.alice, k.bob, k.carol, k.wrong};
		bool clean = true;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			/* The key, and any 12 characters of its secret part (the
			 * wrong key's is zeros: whole only). */
			const char *secret = keys[i] + 5 + SBX_KEY_ID_LEN;
			size_t w = keys[i] == k.wrong ? 64 : SBX_KEY_ID_LEN;
			if (strstr(text, keys[i]))
				clean = false;
			for (size_t j = 0; j + w <= 64; j++) {
				char part[65];
				snprintf(part, sizeof(part), "%.*s", (int)w, secret + j);
				if (strstr(text, part)) {
					tap_diag("key %zu: \"%s\" of its secret is in the log", i,
						 part);
					clean = false;
					break;
				}
			}
		}
		tap_ok(all && json_object_array_length(arr) >= 20u,
		       "the whole log: %zu lines, every one a JSON object",
		       json_object_array_length(arr));
		tap_ok(clean, "no API key and no key's secret part anywhere in the log");
		tap_ok(sessions[0] && sessions[1] && !strstr(text, sessions[0]) &&
			   !strstr(text, sessions[1]) &&
			   !strstr(text, sessions[0] + SBX_SESSION_ID_INDEX) &&
			   !strstr(text, sessions[1] + SBX_SESSION_ID_INDEX),
		       "no whole session id, nor its secret part, anywhere in the log");
		tap_ok(!strstr(text, CODE_MARK) && !strstr(text, ARG_MARK) &&
			   !strstr(text, OUT_MARK) && !strstr(text, "nosuchbox"),
		       "no code, argument or output of a call anywhere in the log");
		json_object_put(arr);
		free(text);
	}
	free(sessions[0]);
	free(sessions[1]);
	sbx_mcp_free(mcp);
	sbx_audit_free(audit);
	sbx_auth_free(auth);
	sbx_manager_free(manager);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
}

int main(void)
{
	char cmd[300];

	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	test_lines();
	test_refusals();
	test_threads();
	test_reopen();
	test_stderr();
	test_front();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		tap_diag("could not remove %s", dir);
	curl_global_cleanup();
	return tap_done();
}
