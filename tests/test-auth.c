/* SPDX-License-Identifier: MIT */
/*
 * API keys (include/sbx/auth.h, src/auth/): `mcp-sandboxd keys add|list|
 * revoke` through the real program ($SBX_BUILDDIR/src/mcp-sandboxd) on a
 * temporary configuration, the printed key accepted in the three places a
 * request may carry it, every refusal (wrong, unknown, revoked, empty,
 * over-long, non-ASCII, a last byte off) without the key in the message,
 * changes by another process seen by a running store within two seconds,
 * a broken file keeping the last good keys, the file's safety checks
 * (group-writable, a symbolic link, not a regular file, another owner),
 * the parser's refusals and bounds, and 8 concurrent adds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth-internal.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "sbx/settings.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test-auth.XXXXXX";
static char program[4096], config[256], keys_path[256];

/* ---- running the program ---- */

static void drain(int fd, struct sbx_buf *b)
{
	char chunk[4096];
	ssize_t n;

	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		if (sbx_buf_append(b, chunk, (size_t)n) < 0)
			tap_bail("out of memory");
}

/* Starts `mcp-sandboxd -c CONFIG ARGS...`; its stdout and stderr on pipes. */
static pid_t spawn(const char *const *args, int *ret_out, int *ret_err)
{
	const char *argv[16] = {program, "-c", config};
	int out[2], err[2];
	size_t n = 3;
	pid_t pid;

	for (; *args && n < SBX_ARRAY_SIZE(argv) - 1; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
		tap_bail("pipe");
	pid = fork();
	if (pid < 0)
		tap_bail("fork");
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		execv(program, (char **)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	*ret_out = out[0];
	*ret_err = err[0];
	return pid;
}

static int reap(pid_t pid, int out, int err, struct sbx_buf *o, struct sbx_buf *e)
{
	int status;

	drain(out, o);
	drain(err, e);
	close(out);
	close(err);
	if (waitpid(pid, &status, 0) < 0)
		tap_bail("waitpid");
	if (!o->data)
		sbx_buf_append(o, "", 0);
	if (!e->data)
		sbx_buf_append(e, "", 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs the program with ARGS (NULL-terminated); its exit status, stdout in
 * O and stderr in E (both reset first). */
static int run(struct sbx_buf *o, struct sbx_buf *e, const char *const *args)
{
	int out, err;
	pid_t pid = spawn(args, &out, &err);

	o->len = e->len = 0;
	return reap(pid, out, err, o, e);
}

#define RUN(o, e, ...) run(o, e, (const char *const[]){__VA_ARGS__, NULL})

/* ---- helpers ---- */

static bool key_shaped(const char *k)
{
	if (strlen(k) != SBX_API_KEY_LEN || strncmp(k, "msk_", 4) != 0 || k[16] != '_')
		return false;
	for (size_t i = 4; i < SBX_API_KEY_LEN; i++)
		if (i != 16 && !strchr("0123456789abcdef", k[i]))
			return false;
	return true;
}

/* Adds a key for TENANT through the program into KEY; the exit status. */
static int add_key(const char *tenant, const char *limit, char key[SBX_API_KEY_LEN + 1])
{
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT;
	int rc =
	    limit ? RUN(&o, &e, "keys", "add", tenant, limit) : RUN(&o, &e, "keys", "add", tenant);

	key[0] = '\0';
	if (rc == 0 && o.len == SBX_API_KEY_LEN + 1 && o.data[SBX_API_KEY_LEN] == '\n') {
		memcpy(key, o.data, SBX_API_KEY_LEN);
		key[SBX_API_KEY_LEN] = '\0';
	}
	if (rc != 0)
		tap_diag("keys add %s: status %d: %s", tenant, rc, e.data);
	sbx_buf_release(&o);
	sbx_buf_release(&e);
	return rc;
}

static void settings_for(struct sbx_settings *s, const char *mode, const char *file)
{
	char set[512];
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_settings_init(s) < 0)
		tap_bail("settings");
	snprintf(set, sizeof(set), "auth.mode=%s", mode);
	if (sbx_settings_set(s, set, &err) < 0)
		tap_bail(err.msg);
	snprintf(set, sizeof(set), "auth.keys_file=%s", file);
	if (sbx_settings_set(s, set, &err) < 0)
		tap_bail(err.msg);
}

static int open_auth(const char *file, sbx_auth **ret, struct sbx_error *err)
{
	struct sbx_settings s;
	int r;

	settings_for(&s, "keys", file);
	sbx_error_clear(err);
	r = sbx_auth_open(&s, ret, err);
	sbx_settings_release(&s);
	return r;
}

enum where { IN_BEARER, IN_HEADER, IN_QUERY };

static int check(sbx_auth *a, enum where w, const char *key, struct sbx_principal *p,
		 struct sbx_error *err)
{
	char bearer[8192];
	struct sbx_auth_request req = {0};

	snprintf(bearer, sizeof(bearer), "Bearer %s", key);
	if (w == IN_BEARER)
		req.authorization = bearer;
	else if (w == IN_HEADER)
		req.x_api_key = key;
	else
		req.api_key_query = key;
	sbx_error_clear(err);
	return sbx_auth_check(a, &req, p, err);
}

static bool accepted(sbx_auth *a, const char *key, const char *tenant)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;

	return check(a, IN_HEADER, key, &p, &err) == 0 && strcmp(p.tenant, tenant) == 0;
}

/* Waits up to MS for KEY's acceptance to become WANT; the milliseconds it
 * took, or -1. */
static int64_t wait_for(sbx_auth *a, const char *key, const char *tenant, bool want, int64_t ms)
{
	int64_t start = sbx_monotonic_ms();

	for (;;) {
		if (accepted(a, key, tenant) == want)
			return sbx_monotonic_ms() - start;
		if (sbx_monotonic_ms() - start > ms)
			return -1;
		poll(NULL, 0, 50);
	}
}

/* A refusal whose message holds none of what was presented. */
static void expect_refused(sbx_auth *a, enum where w, const char *key, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;
	int r = check(a, w, key, &p, &err);
	bool leaks = false;
	size_t n = strlen(key);

	/* No 8 characters of the credential may show (beyond "msk_"). */
	for (size_t i = 4; i + 8 <= n && !leaks; i++) {
		char part[9];
		memcpy(part, key + i, 8);
		part[8] = '\0';
		leaks = strstr(err.msg, part) != NULL;
	}
	tap_ok(r == -EACCES && err.msg[0] && !leaks, "%s: refused (%s)", what, err.msg);
}

static void write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) < 0)
		tap_bail("write a file");
	chmod(path, mode);
}

static char *read_text(const char *path)
{
	struct sbx_buf b = SBX_BUF_INIT;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		tap_bail("read a file");
	drain(fd, &b);
	close(fd);
	return sbx_buf_steal(&b);
}

static void digest_hex(const char *key, char out[2 * SBX_SHA256_LEN + 1])
{
	uint8_t d[SBX_SHA256_LEN];

	sbx_sha256(key, strlen(key), d);
	sbx_hex_encode(d, sizeof(d), out);
}

/* ---- the tests ---- */

static char alice[SBX_API_KEY_LEN + 1], bob[SBX_API_KEY_LEN + 1];

static void test_cli(void)
{
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT;
	char d[2 * SBX_SHA256_LEN + 1], *text;
	struct stat st;
	int rc;

	rc = RUN(&o, &e, "keys", "list");
	tap_ok(rc == 0 && o.len == 0, "keys list without a file: nothing (status %d)", rc);
	rc = RUN(&o, &e, "keys", "add", "alice");
	tap_is_int(rc, 0, "keys add alice");
	tap_ok(o.len == SBX_API_KEY_LEN + 1 && o.data[SBX_API_KEY_LEN] == '\n',
	       "stdout is the key alone on one line");
	memcpy(alice, o.data, SBX_API_KEY_LEN);
	tap_ok(key_shaped(alice), "the key is msk_ + 12 hex + _ + 64 hex");
	tap_ok(!strstr(e.data, alice + 17), "its secret is not on stderr: %s", e.data);
	if (lstat(keys_path, &st) < 0)
		st.st_mode = 0;
	tap_ok(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
	       "the keys file is made 0600 (%o)", st.st_mode & 0777);
	tap_is_int(add_key("bob", "sandboxes=2", bob), 0, "keys add bob sandboxes=2");
	rc = RUN(&o, &e, "keys", "add", "carol", "calls=4", "memory=1024m", "cpus=0.50",
		 "installs=1", "sandboxes=0");
	tap_is_int(rc, 0, "keys add with every limit");

	text = read_text(keys_path);
	digest_hex(alice, d);
	tap_ok(strstr(text, d) && !strstr(text, alice + 17),
	       "the file has the digest, not the key");
	free(text);

	rc = RUN(&o, &e, "keys", "list");
	tap_is_int(rc, 0, "keys list");
	tap_ok(strncmp(o.data, "alice ", 6) == 0 && strstr(o.data, alice + 4) == NULL,
	       "lists alice, without the key");
	{
		char want[64];
		snprintf(want, sizeof(want), "alice %.12s 20", alice + 4);
		tap_ok(strstr(o.data, want) != NULL, "tenant, key id, creation time: %s", o.data);
	}
	tap_ok(strstr(o.data, " calls=4 memory=1g cpus=0.5 installs=1") &&
		   strstr(o.data, "carol ") && strstr(o.data, "sandboxes=0 "),
	       "limits, as the file has them");
	digest_hex(bob, d);
	tap_ok(!strstr(o.data, d) && !strstr(o.data, bob + 17) && !strstr(o.data, alice + 17),
	       "no digest, no secret in the list");

	rc = RUN(&o, &e, "keys", "add", "bad/name");
	tap_ok(rc == 2 && strstr(e.data, "bad tenant name"), "a bad tenant name: status 2 (%s)",
	       e.data);
	rc = RUN(&o, &e, "keys", "add", "x", "disk=1g");
	tap_ok(rc == 2 && strstr(e.data, "sandboxes, calls"), "an unknown limit: status 2 (%s)",
	       e.data);
	rc = RUN(&o, &e, "keys", "add", "x", "memory=1k");
	tap_ok(rc == 2 && strstr(e.data, "memory"), "memory below 6m: status 2 (%s)", e.data);
	rc = RUN(&o, &e, "keys", "add", "x", "calls=1", "calls=2");
	tap_ok(rc == 2 && strstr(e.data, "twice"), "a limit twice: status 2 (%s)", e.data);
	rc = RUN(&o, &e, "keys", "add");
	tap_is_int(rc, 2, "keys add without a tenant: status 2");
	rc = RUN(&o, &e, "keys", "frob");
	tap_is_int(rc, 2, "keys frob: status 2");
	rc = RUN(&o, &e, "keys", "revoke", "nobody");
	tap_ok(rc == 1 && strstr(e.data, "no key of tenant nobody"), "revoke nobody: status 1 (%s)",
	       e.data);
	rc = RUN(&o, &e, "keys", "revoke", "--id", "ABC");
	tap_is_int(rc, 2, "revoke --id with a bad id: status 2");
	rc = RUN(&o, &e, "--set", "auth.keys_file=", "keys", "list");
	tap_ok(rc == 2 && strstr(e.data, "auth.keys_file is not set"),
	       "no keys_file: status 2 (%s)", e.data);
	rc = RUN(&o, &e, "stray");
	tap_is_int(rc, 2, "an unknown command: status 2");
	tap_ok(o.len == 0, "nothing on stdout after the refusals");
	sbx_buf_release(&o);
	sbx_buf_release(&e);
}

static void test_check(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;
	sbx_auth *a = NULL;
	char bad[SBX_API_KEY_LEN + 2], big[8192], lower[200];
	static const char *const places[] = {"Authorization: Bearer", "X-API-Key", "?api_key="};

	if (!tap_call(open_auth(keys_path, &a, &err), err.msg, "open the store"))
		tap_bail("no store");
	tap_ok(sbx_auth_checks_keys(a), "it checks keys");
	for (int w = IN_BEARER; w <= IN_QUERY; w++) {
		int r = check(a, w, alice, &p, &err);
		tap_ok(r == 0 && p.method == SBX_AUTH_METHOD_API_KEY &&
			   strcmp(p.tenant, "alice") == 0 && strncmp(p.key_id, alice + 4, 12) == 0,
		       "alice's key in %s: tenant %s (%s)", places[w], p.tenant, err.msg);
	}
	tap_ok(check(a, IN_HEADER, bob, &p, &err) == 0 && strcmp(p.tenant, "bob") == 0 &&
		   p.limits.sandboxes == 2 && p.limits.calls == -1 && p.limits.memory == -1,
	       "bob's key: his limits (sandboxes 2, the rest unset)");
	snprintf(lower, sizeof(lower), "bearer \t%s  ", alice);
	tap_ok(sbx_auth_check(a, &(struct sbx_auth_request){.authorization = lower}, &p, &err) == 0,
	       "the scheme in any case, spaces around the token");
	tap_ok(sbx_auth_check(a,
			      &(struct sbx_auth_request){.x_api_key = alice,
							 .api_key_query = alice,
							 .authorization = NULL},
			      &p, &err) == 0,
	       "the same key in two places");

	tap_ok(sbx_auth_check(a, &(struct sbx_auth_request){0}, &p, &err) == -EACCES &&
		   strstr(err.msg, "Bearer"),
	       "no credentials: refused, saying where to put the key (%s)", err.msg);
	for (int w = IN_BEARER; w <= IN_QUERY; w++)
		expect_refused(a, w, "", w == IN_BEARER ? "an empty Bearer token" : "an empty key");
	memcpy(bad, alice, sizeof(alice));
	bad[SBX_API_KEY_LEN - 1] = bad[SBX_API_KEY_LEN - 1] == '0' ? '1' : '0';
	for (int w = IN_BEARER; w <= IN_QUERY; w++)
		expect_refused(a, w, bad, "the key with its last byte changed");
	memcpy(bad, alice, sizeof(alice));
	bad[40] = bad[40] == 'a' ? 'b' : 'a';
	expect_refused(a, IN_HEADER, bad, "a byte in the middle changed");
	memcpy(bad, alice, sizeof(alice));
	memcpy(bad + 4, "000000000000", 12);
	expect_refused(a, IN_HEADER, bad, "an unknown key id with alice's secret");
	memcpy(bad, bob, sizeof(bob));
	memcpy(bad + 4, alice + 4, 12);
	expect_refused(a, IN_HEADER, bad, "alice's id with bob's secret");
	snprintf(bad, sizeof(bad), "%s0", alice);
	expect_refused(a, IN_HEADER, bad, "the key and one more character");
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, alice, SBX_API_KEY_LEN);
	expect_refused(a, IN_QUERY, big, "8 KiB starting with the key");
	snprintf(bad, sizeof(bad), "%.*s", SBX_API_KEY_LEN - 1, alice);
	expect_refused(a, IN_HEADER, bad, "the key less its last character");
	memcpy(bad, alice, sizeof(alice));
	memcpy(bad + SBX_API_KEY_LEN - 2, "\xc3\xa9", 2);
	expect_refused(a, IN_HEADER, bad, "non-ASCII at the end");
	memcpy(bad, alice, sizeof(alice));
	for (char *c = bad + 17; *c; c++)
		*c = *c >= 'a' ? (char)(*c - 'a' + 'A') : *c;
	expect_refused(a, IN_HEADER, bad, "the secret in uppercase hex");
	tap_ok(sbx_auth_check(a, &(struct sbx_auth_request){.authorization = "Basic YWxpY2U6eA=="},
			      &p, &err) == -EACCES,
	       "Authorization: Basic refused (%s)", err.msg);
	tap_ok(sbx_auth_check(a,
			      &(struct sbx_auth_request){.x_api_key = alice, .api_key_query = bob},
			      &p, &err) == -EACCES &&
		   !strstr(err.msg, alice + 17) && !strstr(err.msg, bob + 17),
	       "two different keys refused (%s)", err.msg);
	expect_refused(a, IN_BEARER, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "a JWT (no OAuth yet)");
	sbx_auth_free(a);
}

static void test_reload(void)
{
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT;
	struct sbx_error err = SBX_ERROR_INIT;
	char dave[SBX_API_KEY_LEN + 1], erin[SBX_API_KEY_LEN + 1], *good, *broken;
	char id[SBX_KEY_ID_LEN + 1], aside[512];
	sbx_auth *a = NULL;
	int64_t ms;
	int rc;

	if (!tap_call(open_auth(keys_path, &a, &err), err.msg, "open the store again"))
		tap_bail("no store");
	tap_ok(accepted(a, bob, "bob"), "bob's key is accepted");
	snprintf(id, sizeof(id), "%.12s", bob + 4);
	rc = RUN(&o, &e, "keys", "revoke", "--id", id);
	tap_ok(rc == 0 && strstr(o.data, id), "keys revoke --id (%s)", o.data);
	ms = wait_for(a, bob, "bob", false, 2500);
	tap_ok(ms >= 0 && ms <= 2000, "the running store refuses bob's key after %" PRId64 " ms",
	       ms);
	{
		struct sbx_principal bp = {.method = SBX_AUTH_METHOD_API_KEY, .tenant = "bob"};
		memcpy(bp.key_id, id, sizeof(bp.key_id));
		tap_is_int(sbx_auth_principal_live(a, &bp), -EKEYREVOKED,
			   "a principal of bob's revoked key: -EKEYREVOKED");
		tap_is_int(sbx_auth_key_id_live(a, id), -EKEYREVOKED, "... its key id too");
	}

	tap_is_int(add_key("dave", NULL, dave), 0, "keys add dave in another process");
	ms = wait_for(a, dave, "dave", true, 2500);
	tap_ok(ms >= 0 && ms <= 2000, "the running store accepts dave's key after %" PRId64 " ms",
	       ms);

	tap_is_int(add_key("alice", NULL, erin), 0, "a second key for alice");
	wait_for(a, erin, "alice", true, 2500);
	rc = RUN(&o, &e, "keys", "revoke", "alice");
	tap_ok(rc == 0 && strstr(o.data, alice + 4) == NULL &&
		   strncmp(o.data, "revoked ", 8) == 0 && strchr(o.data, '\n') &&
		   strstr(strchr(o.data, '\n') + 1, "revoked "),
	       "keys revoke alice: two keys (%s)", o.data);
	ms = wait_for(a, erin, "alice", false, 2500);
	tap_ok(ms >= 0 && !accepted(a, alice, "alice"),
	       "both of alice's keys refused after %" PRId64 " ms", ms);

	/* A broken file fails closed: no key is accepted (the edit that broke
	 * it may have been a revocation), the status says why; edits refuse it. */
	{
		struct sbx_principal dp;
		struct sbx_error se = SBX_ERROR_INIT;
		uint64_t gen;
		tap_ok(check(a, IN_HEADER, dave, &dp, &se) == 0, "dave's principal");
		tap_is_int(sbx_auth_principal_live(a, &dp), 0, "... is live");
		gen = sbx_auth_refresh(a);
		good = read_text(keys_path);
		if (asprintf(&broken, "%sdave 0123456789ab tooshort 2025-01-01T00:00:00Z\n", good) <
		    0)
			tap_bail("asprintf");
		write_text(keys_path, broken, 0600);
		poll(NULL, 0, 1300);
		tap_ok(sbx_auth_refresh(a) != gen, "a broken file changes the generation");
		se = (struct sbx_error)SBX_ERROR_INIT;
		tap_is_int(check(a, IN_HEADER, dave, &dp, &se), -EIO,
			   "after a broken line, dave's key is not accepted: -EIO (%s)", se.msg);
		tap_is_int(sbx_auth_principal_live(a, &dp), -EIO,
			   "... his principal's state cannot be told (-EIO)");
		se = (struct sbx_error)SBX_ERROR_INIT;
		tap_ok(sbx_auth_status(a, &se) == -EIO && strstr(se.msg, "line ") &&
			   !strstr(se.msg, "tooshort"),
		       "sbx_auth_status says why, naming the line, not its text (%s)", se.msg);
	}
	rc = RUN(&o, &e, "keys", "add", "frank");
	tap_ok(rc == 1 && strstr(e.data, "line ") && o.len == 0,
	       "keys add refuses the broken file, naming the line (%s)", e.data);
	rc = RUN(&o, &e, "keys", "list");
	tap_ok(rc == 1 && strstr(e.data, "digest"), "keys list too (%s)", e.data);
	write_text(keys_path, good, 0600);
	ms = wait_for(a, dave, "dave", true, 2500);
	tap_ok(ms >= 0, "mended: dave's key accepted again after %" PRId64 " ms", ms);
	{
		struct sbx_error se = SBX_ERROR_INIT;
		tap_is_int(sbx_auth_status(a, &se), 0, "... and the status is fine");
	}

	/* Made group-writable: refused at open and by the commands, and by a
	 * running store too. */
	chmod(keys_path, 0620);
	ms = wait_for(a, dave, "dave", false, 2500);
	tap_ok(ms >= 0, "a group-writable file on reload: no key accepted after %" PRId64 " ms",
	       ms);
	{
		struct sbx_error se = SBX_ERROR_INIT;
		tap_ok(sbx_auth_status(a, &se) == -EIO && strstr(se.msg, "writable"),
		       "... the status says why (%s)", se.msg);
	}
	chmod(keys_path, 0600);
	tap_is_int(add_key("erin", NULL, erin), 0, "keys add once it is 0600 again");
	ms = wait_for(a, erin, "erin", true, 2500);
	tap_ok(ms >= 0, "and the running store reads it again (%" PRId64 " ms)", ms);

	/* Removed: no key is accepted. */
	snprintf(aside, sizeof(aside), "%s/aside", tmpdir);
	rename(keys_path, aside);
	ms = wait_for(a, dave, "dave", false, 2500);
	tap_ok(ms >= 0, "the file removed: keys refused after %" PRId64 " ms", ms);
	rename(aside, keys_path);
	ms = wait_for(a, dave, "dave", true, 2500);
	tap_ok(ms >= 0, "and back: accepted after %" PRId64 " ms", ms);

	/* Rewritten in place (cp, an editor: truncated, then written): a file
	 * changed within the last 300 ms is not read yet, so the moment it is
	 * empty neither takes the keys away nor ends sessions. The store is
	 * due for a look (over a second since the last) while it is empty. */
	{
		char *whole = read_text(keys_path);
		bool kept = true;
		int64_t t0;
		poll(NULL, 0, 1200);
		if (!whole || truncate(keys_path, 0) < 0)
			tap_bail("truncate the keys file");
		t0 = sbx_monotonic_ms();
		while (sbx_monotonic_ms() - t0 < 200) {
			kept = kept && accepted(a, dave, "dave");
			poll(NULL, 0, 10);
		}
		write_text(keys_path, whole, 0600);
		t0 = sbx_monotonic_ms();
		while (sbx_monotonic_ms() - t0 < 1500) {
			kept = kept && accepted(a, dave, "dave");
			poll(NULL, 0, 20);
		}
		tap_ok(kept, "a file emptied and written again within 200 ms: dave's key accepted "
			     "throughout");
		free(whole);
	}
	free(good);
	free(broken);
	sbx_auth_free(a);
	sbx_buf_release(&o);
	sbx_buf_release(&e);
}

static void expect_unsafe(const char *path, const char *msg, const char *what)
{
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT;
	struct sbx_error err = SBX_ERROR_INIT;
	char set[512];
	sbx_auth *a = NULL;
	int r = open_auth(path, &a, &err), rc;

	tap_ok(r == -EPERM && strstr(err.msg, msg), "%s: refused at open (%s)", what, err.msg);
	sbx_auth_free(r == 0 ? a : NULL);
	snprintf(set, sizeof(set), "auth.keys_file=%s", path);
	rc = RUN(&o, &e, "--set", set, "keys", "add", "mallory");
	tap_ok(rc == 1 && strstr(e.data, msg) && o.len == 0, "%s: keys add refuses (%s)", what,
	       e.data);
	sbx_buf_release(&o);
	sbx_buf_release(&e);
}

static void test_file_safety(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char p[512], target[512];
	sbx_auth *a = NULL;
	int r;

	snprintf(p, sizeof(p), "%s/gw", tmpdir);
	write_text(p, "", 0620);
	expect_unsafe(p, "writable by its group", "a group-writable file");
	chmod(p, 0602);
	expect_unsafe(p, "writable by everyone", "a world-writable file");
	chmod(p, 0600);
	snprintf(target, sizeof(target), "%s/link", tmpdir);
	if (symlink(p, target) < 0)
		tap_bail("symlink");
	expect_unsafe(target, "symbolic link", "a symbolic link to a good file");
	snprintf(p, sizeof(p), "%s/dir", tmpdir);
	mkdir(p, 0700);
	expect_unsafe(p, "not a regular file", "a folder");
	snprintf(p, sizeof(p), "%s/fifo", tmpdir);
	if (mkfifo(p, 0600) < 0)
		tap_bail("mkfifo");
	expect_unsafe(p, "not a regular file", "a FIFO (no hang)");
	if (geteuid() == 0) {
		snprintf(p, sizeof(p), "%s/other", tmpdir);
		write_text(p, "", 0600);
		if (chown(p, 65534, 65534) < 0)
			tap_bail("chown");
		expect_unsafe(p, "belongs to uid 65534", "another user's file");
	} else {
		tap_skip(2, "another user's file needs root");
	}
	snprintf(p, sizeof(p), "%s/none", tmpdir);
	r = open_auth(p, &a, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "keys add"), "a missing file at open: %s", err.msg);
}

static void test_modes(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;
	struct sbx_settings s;
	sbx_auth *a = NULL;

	settings_for(&s, "none", keys_path);
	if (tap_call(sbx_auth_open(&s, &a, &err), err.msg, "auth.mode = none")) {
		tap_ok(!sbx_auth_checks_keys(a) &&
			   sbx_auth_check(a, &(struct sbx_auth_request){0}, &p, &err) == 0 &&
			   strcmp(p.tenant, "default") == 0 && p.method == SBX_AUTH_METHOD_NONE,
		       "anyone is the tenant default");
	}
	a = sbx_auth_free(a);
	sbx_settings_release(&s);
	settings_for(&s, "keys", "");
	if (tap_call(sbx_auth_open(&s, &a, &err), err.msg, "auth.mode = keys, no keys_file"))
		tap_ok(!sbx_auth_checks_keys(a),
		       "checks nothing (the program serves loopback only)");
	sbx_auth_free(a);
	sbx_settings_release(&s);
}

static void expect_parse_error(const char *text, const char *msg, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_keyset *set = NULL;
	int r = sbx_keys_parse(text, strlen(text), &set, &err);

	tap_ok(r == -EINVAL && strstr(err.msg, msg), "%s: %s", what, err.msg);
	if (!strstr(err.msg, msg))
		tap_diag("  expected \"%s\"", msg);
	sbx_keyset_free(set);
}

#define DIGEST "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca7"
#define GOOD "t 0123456789ab " DIGEST " 2025-06-01T12:00:00Z"

static void test_parser(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_keyset *set = NULL;
	struct sbx_buf big = SBX_BUF_INIT;
	char line[KEYS_LINE_MAX + 2], out[KEYS_LINE_MAX + 1];
	int r;
	static const char text[] =
	    "# c\n\n" GOOD " sandboxes=1 calls=2 memory=6m cpus=0.01 installs=0\n"
	    "u.v-w_1 0123456789ac " DIGEST " 2024-02-29T23:59:59Z";

	r = sbx_keys_parse(text, strlen(text), &set, &err);
	tap_ok(r == 0 && set->n == 2, "comments, empty lines, limits, no final newline (%s)",
	       err.msg);
	if (r == 0) {
		sbx_key_format(&set->keys[0], true, out, sizeof(out));
		tap_is_str(out, GOOD " sandboxes=1 calls=2 memory=6m cpus=0.01 installs=0",
			   "a key formats back to its line");
		tap_ok(sbx_keyset_find(set, "0123456789ac") == &set->keys[1] &&
			   !sbx_keyset_find(set, "0123456789ad"),
		       "found by id");
	}
	set = sbx_keyset_free(set);
	expect_parse_error("\n" GOOD "  sandboxes=1\n", "line 2: field 5 is empty", "two spaces");
	expect_parse_error(GOOD " \n", "field 5 is empty", "a trailing space");
	expect_parse_error(GOOD "\tcalls=1\n", "not printable ASCII", "a tab");
	expect_parse_error(GOOD "\r\n", "not printable ASCII", "a CRLF");
	expect_parse_error(" " GOOD "\n", "field 1 is empty", "a leading space");
	expect_parse_error("t\xc3\xa9 0123456789ab " DIGEST " 2025-06-01T12:00:00Z\n",
			   "not printable ASCII", "a non-ASCII tenant");
	expect_parse_error("t 0123456789AB " DIGEST " 2025-06-01T12:00:00Z\n", "bad key id",
			   "an uppercase key id");
	expect_parse_error("t 0123456789a " DIGEST " 2025-06-01T12:00:00Z\n", "bad key id",
			   "a short key id");
	expect_parse_error("t 0123456789ab " DIGEST "0 2025-06-01T12:00:00Z\n", "bad SHA-256",
			   "a long digest");
	expect_parse_error("t 0123456789ab " DIGEST " 2025-02-30T12:00:00Z\n", "bad creation",
			   "February 30");
	expect_parse_error("t 0123456789ab " DIGEST " 2025-06-01 12:00:00\n", "bad creation",
			   "a time without T and Z");
	expect_parse_error("t 0123456789ab " DIGEST "\n", "expected TENANT", "three fields");
	expect_parse_error(GOOD " disk=1g\n", "NAME one of", "an unknown limit");
	expect_parse_error(GOOD " calls=1 calls=1\n", "twice", "a limit twice");
	expect_parse_error(GOOD " calls=-1\n", "calls: expected", "a negative count");
	expect_parse_error(GOOD " sandboxes=1000001\n", "sandboxes: expected", "a count too big");
	expect_parse_error(GOOD " cpus=0\n", "cpus: expected", "cpus=0");
	expect_parse_error(GOOD " memory=1m\n", "memory: expected", "memory=1m");
	expect_parse_error(GOOD "\n" GOOD "\n", "line 2: key id 0123456789ab already on line 1",
			   "a duplicate key id");
	memset(line, 'x', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	line[0] = '#';
	expect_parse_error(line, "longer than 512", "a comment of 513 bytes");
	tap_ok(sbx_keys_parse("a\0b", 3, &set, &err) == -EINVAL, "a NUL byte");

	/* The most keys there may be, then one more. */
	for (int i = 0; i < KEYS_MAX; i++) {
		snprintf(line, sizeof(line), "t%d %012x " DIGEST " 2025-06-01T12:00:00Z\n", i % 97,
			 i);
		if (sbx_buf_append(&big, line, strlen(line)) < 0)
			tap_bail("out of memory");
	}
	r = sbx_keys_parse(big.data, big.len, &set, &err);
	tap_ok(r == 0 && set->n == KEYS_MAX && sbx_keyset_find(set, "0000000186a0") == NULL &&
		   sbx_keyset_find(set, "00000001869f") != NULL,
	       "%d keys (%zu bytes) parse (%s)", KEYS_MAX, big.len, err.msg);
	set = sbx_keyset_free(set);
	snprintf(line, sizeof(line), "t %012x " DIGEST " 2025-06-01T12:00:00Z\n", KEYS_MAX);
	sbx_buf_append(&big, line, strlen(line));
	r = sbx_keys_parse(big.data, big.len, &set, &err);
	tap_ok(r == -EINVAL && strstr(err.msg, "more than 100000 keys"), "one more: %s", err.msg);
	tap_ok(sbx_keys_parse(big.data, KEYS_FILE_MAX + 1, &set, &err) == -EFBIG,
	       "a file over %d bytes", KEYS_FILE_MAX);
	sbx_buf_release(&big);
}

/* egress_allow: a tenant's own egress list on its keys. */
static void test_egress_keys(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_keyset *set = NULL;
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT, big = SBX_BUF_INIT;
	struct sbx_settings s;
	char out[KEYS_LINE_MAX + 1], path[300], set_file[320], buf[SBX_AUTH_EGRESS_MAX + 1],
	    line[1024];
	sbx_auth *a = NULL;
	int r, rc;
	static const char text[] =
	    GOOD " calls=2 egress_allow=api.example.com,*.cdn.example:8443,10.0.0.1,[::1]:8080\n"
		 "t 0123456789ac " DIGEST " 2025-06-01T12:00:00Z\n"
		 "u 0123456789ad " DIGEST " 2025-06-01T12:00:00Z egress_allow=none\n"
		 "v 0123456789ae " DIGEST " 2025-06-01T12:00:00Z\n";

	r = sbx_keys_parse(text, strlen(text), &set, &err);
	tap_ok(r == 0 && set->n == 4, "egress_allow on keys parses (%s)", err.msg);
	if (r == 0) {
		sbx_key_format(&set->keys[0], true, out, sizeof(out));
		tap_is_str(out,
			   GOOD " calls=2 egress_allow=api.example.com,*.cdn.example:8443,10.0.0.1,"
				"[::1]:8080",
			   "a key with egress_allow formats back to its line");
		tap_is_str(sbx_keyset_tenant_egress(set, "t"),
			   "api.example.com,*.cdn.example:8443,10.0.0.1,[::1]:8080",
			   "the tenant's list, from the key that gives it");
		tap_is_str(sbx_keyset_tenant_egress(set, "u"), "none", "none: no host");
		tap_ok(!sbx_keyset_tenant_egress(set, "v") && !sbx_keyset_tenant_egress(set, "w") &&
			   !sbx_keyset_tenant_egress(set, "s"),
		       "no list for a tenant without one, or without keys");
	}
	set = sbx_keyset_free(set);
	expect_parse_error(GOOD " egress_allow=\n", "egress_allow: empty", "an empty list");
	expect_parse_error(GOOD " egress_allow=a.example,,b.example\n", "entry 2",
			   "an empty entry");
	expect_parse_error(GOOD " egress_allow=a.example:0\n", "entry 1", "port 0");
	expect_parse_error(GOOD " egress_allow=a_b.example\n", "HOST[:PORT]", "a bad name");
	expect_parse_error(GOOD " egress_allow=none egress_allow=none\n", "twice", "given twice");
	expect_parse_error(GOOD " egress_allow=a.example  calls=1\n", "field 6 is empty",
			   "an empty field after a list (the list freed: the fuzzer's leak)");
	expect_parse_error(GOOD " egress_allow=a.example, b.example\n", "entry 2: an empty host",
			   "a space in the list");
	strcpy(line, GOOD " egress_allow=");
	for (int i = 0; i < 33; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), "%sh%d.ex", i ? "," : "",
			 i);
	strcat(line, "\n");
	expect_parse_error(line, "more than 32 hosts", "33 hosts");
	strcpy(line, GOOD " egress_allow=");
	for (int i = 0; i < 6; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s%.50s.example",
			 i ? "," : "",
			 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	strcat(line, "\n");
	expect_parse_error(line, "longer than 300 bytes", "a list of 371 bytes");
	expect_parse_error(GOOD " egress_allow=a.example\n"
				"t 0123456789ac " DIGEST
				" 2025-06-01T12:00:00Z egress_allow=b.example\n",
			   "line 2: egress_allow differs from that of tenant t's key on line 1",
			   "two keys of a tenant with different lists");
	{
		static const char same[] =
		    GOOD " egress_allow=a.example\n"
			 "t 0123456789ac " DIGEST " 2025-06-01T12:00:00Z egress_allow=a.example\n";
		r = sbx_keys_parse(same, strlen(same), &set, &err);
		tap_ok(r == 0, "the same list on two keys of a tenant (%s)", err.msg);
		set = sbx_keyset_free(set);
	}
	/* Many tenants: the lookup by tenant over a sorted index. */
	for (int i = 0; i < 5000; i++) {
		snprintf(line, sizeof(line), "t%d %012x " DIGEST " 2025-06-01T12:00:00Z%s\n",
			 i % 97, i, i == 4321 ? " egress_allow=h4321.example" : "");
		sbx_buf_append(&big, line, strlen(line));
	}
	r = sbx_keys_parse(big.data, big.len, &set, &err);
	tap_ok(r == 0 && !strcmp(sbx_keyset_tenant_egress(set, "t53") ?: "", "h4321.example") &&
		   !sbx_keyset_tenant_egress(set, "t52") && !sbx_keyset_tenant_egress(set, "t530"),
	       "5000 keys of 97 tenants: the one list found by its tenant (%s)", err.msg);
	set = sbx_keyset_free(set);
	sbx_buf_release(&big);

	/* keys add, list and the store, on a file of its own. */
	snprintf(path, sizeof(path), "%s/egress-keys", tmpdir);
	snprintf(set_file, sizeof(set_file), "auth.keys_file=%s", path);
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "dave", "sandboxes=2",
		 "egress_allow=api.example.com:8443,*.cdn.example");
	tap_is_int(rc, 0, "keys add dave egress_allow=... (%s)", e.data);
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "erin", "egress_allow=none");
	tap_is_int(rc, 0, "keys add erin egress_allow=none");
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "dave");
	tap_is_int(rc, 0, "keys add dave without a list: it shares the tenant's");
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "dave", "egress_allow=other.example");
	tap_ok(rc == 1 && strstr(e.data, "egress_allow differs") && strstr(e.data, "tenant dave"),
	       "keys add dave with another list: refused, the file untouched (%s)", e.data);
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "gina");
	tap_is_int(rc, 0, "keys add gina, no list");
	rc = RUN(&o, &e, "--set", set_file, "keys", "add", "x", "egress_allow=bad..name");
	tap_ok(rc == 2 && strstr(e.data, "egress_allow: entry 1"),
	       "keys add with a bad list: status 2 (%s)", e.data);
	rc = RUN(&o, &e, "--set", set_file, "keys", "list");
	tap_ok(rc == 0 &&
		   strstr(o.data, " sandboxes=2 egress_allow=api.example.com:8443,"
				  "*.cdn.example\n") &&
		   strstr(o.data, " egress_allow=none\n") && !strstr(o.data, "other.example"),
	       "keys list shows the lists");
	settings_for(&s, "keys", path);
	tap_call(sbx_auth_open(&s, &a, &err), err.msg, "open the store");
	if (a) {
		tap_ok(sbx_auth_tenant_egress(a, "dave", buf, sizeof(buf)) == 1 &&
			   !strcmp(buf, "api.example.com:8443,*.cdn.example"),
		       "the store gives dave's list");
		tap_ok(sbx_auth_tenant_egress(a, "erin", buf, sizeof(buf)) == 1 &&
			   !strcmp(buf, "none"),
		       "and erin's none");
		tap_is_int(sbx_auth_tenant_egress(a, "gina", buf, sizeof(buf)), 0,
			   "no list for a tenant without one: the server's applies");
		tap_ok(sbx_auth_tenant_egress(a, "frank", buf, sizeof(buf)) == 1 &&
			   !strcmp(buf, "none"),
		       "a tenant with no key in the file (all revoked): none, not the server's");
		tap_is_int(sbx_auth_tenant_egress(a, "dave", buf, 8), -ENOBUFS,
			   "a buffer too small is said");
	}
	a = sbx_auth_free(a);
	sbx_settings_release(&s);
	settings_for(&s, "none", "");
	tap_call(sbx_auth_open(&s, &a, &err), err.msg, "open with auth.mode = none");
	tap_is_int(sbx_auth_tenant_egress(a, "dave", buf, sizeof(buf)), 0,
		   "no keys: no tenant has a list of its own");
	sbx_auth_free(a);
	sbx_settings_release(&s);
	sbx_buf_release(&o);
	sbx_buf_release(&e);
}

/* mcp-sandboxd --dump: the index's password is not printed. */
static void test_dump_password(void)
{
	struct sbx_buf o = SBX_BUF_INIT, e = SBX_BUF_INIT;
	int rc = RUN(&o, &e, "--set",
		     "sandbox.index_url=https://bob:pw-S3cr3t-9@idx.example/simple/", "--dump");

	tap_ok(rc == 0 && o.data &&
		   strstr(o.data, "index_url = https://bob:***@idx.example/simple/") &&
		   !strstr(o.data, "pw-S3cr3t-9") && !(e.data && strstr(e.data, "pw-S3cr3t-9")),
	       "mcp-sandboxd --dump shows the index's password as *** (status %d)", rc);
	sbx_buf_release(&o);
	sbx_buf_release(&e);
}

/* 8 processes add a key each at once: every one lands, and works. */
static void test_concurrent_adds(void)
{
	struct sbx_buf o[8], e[8];
	struct sbx_error err = SBX_ERROR_INIT;
	int out[8], errfd[8], ok = 0, works = 0, rc;
	char tenant[8][16];
	pid_t pid[8];
	sbx_auth *a = NULL;

	for (int i = 0; i < 8; i++) {
		snprintf(tenant[i], sizeof(tenant[i]), "many%d", i);
		o[i] = e[i] = (struct sbx_buf)SBX_BUF_INIT;
		pid[i] = spawn((const char *const[]){"keys", "add", tenant[i], NULL}, &out[i],
			       &errfd[i]);
	}
	for (int i = 0; i < 8; i++) {
		rc = reap(pid[i], out[i], errfd[i], &o[i], &e[i]);
		if (rc == 0 && o[i].len == SBX_API_KEY_LEN + 1)
			ok++;
		else
			tap_diag("add %d: status %d: %s", i, rc, e[i].data);
	}
	tap_is_int(ok, 8, "8 concurrent keys add: all succeed");
	if (tap_call(open_auth(keys_path, &a, &err), err.msg, "open the store")) {
		for (int i = 0; i < 8; i++) {
			o[i].data[SBX_API_KEY_LEN] = '\0';
			works += accepted(a, o[i].data, tenant[i]);
		}
		tap_is_int(works, 8, "and all 8 keys are in the file and accepted");
	}
	sbx_auth_free(a);
	for (int i = 0; i < 8; i++) {
		sbx_buf_release(&o[i]);
		sbx_buf_release(&e[i]);
	}
}

int main(void)
{
	const char *builddir = getenv("SBX_BUILDDIR");

	snprintf(program, sizeof(program), "%s/src/mcp-sandboxd",
		 builddir && *builddir ? builddir : ".");
	if (access(program, X_OK) < 0)
		tap_bail("no src/mcp-sandboxd (set SBX_BUILDDIR)");
	if (!mkdtemp(tmpdir))
		tap_bail("mkdtemp");
	snprintf(config, sizeof(config), "%s/mcp-sandbox.ini", tmpdir);
	snprintf(keys_path, sizeof(keys_path), "%s/keys", tmpdir);
	{
		char text[512];
		snprintf(text, sizeof(text), "[auth]\nkeys_file = %s\n", keys_path);
		write_text(config, text, 0600);
	}
	test_cli();
	test_check();
	test_reload();
	test_file_safety();
	test_modes();
	test_parser();
	test_egress_keys();
	test_dump_password();
	test_concurrent_adds();
	{
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			tap_diag("could not remove %s", tmpdir);
	}
	return tap_done();
}
