/* SPDX-License-Identifier: MIT */
/*
 * Per-tenant quotas against a real engine: tests/test-quota TYPE URL [IMAGE].
 * Each quota through the tools (sbx_tools_call with a key's limits, as a
 * session passes them), on managers of instances unique to this run:
 *
 * - sandboxes: [quota] sandboxes = 2 for a tenant whose key sets none,
 *   refused at the third naming quota.sandboxes; another tenant unaffected; a
 *   key's sandboxes=1 replaces the default; a delete frees a slot.
 * - calls: [quota] calls = 1 through MCP sessions of both transports on the
 *   real tools: a second call while `sleep` runs is refused as a tool error,
 *   another tenant's is not; the slot is free when the call ended.
 * - memory / cpus: the engine's inspect (HostConfig.Memory and NanoCpus, or
 *   what libpod reports) shows the tenant's ceiling: a key's lower memory and
 *   cpus, [quota] memory for a key without, the server's for a key above it;
 *   the lower ones never come from the pool (whose container keeps the
 *   server's limits), the capped one does; an out-of-memory notice names the
 *   tenant's limit.
 * - installs: [quota] installs = 2 with tests/pkgindex.py's "sbxslow", whose
 *   page takes as long as the test holds it: two running, the third refused
 *   naming quota.installs; a key's installs=1 replaces the default; deleting
 *   a sandbox frees the slots of its installs; an install that ended (failed)
 *   frees its slot.
 *
 * The suite ends by checking that no container of this run is left.
 * SBX_QUOTA_ONLY=counts (sandboxes and calls), =limits (memory and cpus) or
 * =installs runs that part only (for make mutants).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mcp/mcp-internal.h"
#include "tools/tools.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "pkg-index.h"
#include "sandbox-fixture.h"
#include "tap.h"
#include "tool-call.h"

#define MIB (INT64_C(1) << 20)
#define NANO INT64_C(1000000000)

/* ---- calling a tool as a tenant ---- */

/* Calls NAME with ARGS (JSON text or NULL) on X's manager as OWNER, whose
 * key has LIMITS (NULL: none). 0 with C filled, or the call's error. */
static int call_as(struct test_manager *x, const char *owner, const struct sbx_auth_limits *limits,
		   const char *name, const char *args, struct call *c)
{
	struct sbx_tool_ctx ctx = {.manager = x->m,
				   .settings = &x->s,
				   .owner = owner,
				   .limits = limits,
				   .public_url = "http://127.0.0.1:1",
				   .protocol_version = SBX_MCP_VERSION_LATEST};
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *content, *v;
	int r = tool_call_run(&ctx, name, args, c, &err);

	if (r < 0) {
		tap_diag("%s: %s", name, err.msg);
		return r;
	}
	c->is_error =
	    json_object_object_get_ex(c->res, "isError", &v) && json_object_get_boolean(v);
	if (json_object_object_get_ex(c->res, "content", &content))
		c->text = str_at(json_object_array_get_idx(content, 0), "text");
	if (!c->text)
		c->text = "";
	if (!c->is_error)
		c->obj = json_tokener_parse(c->text);
	return 0;
}

/* The text of C for a description, one line. */
static const char *shown(const struct call *c)
{
	static char buf[400];

	return tap_excerpt(buf, sizeof(buf), c->text);
}

/* Creates OWNER's sandbox NAME; true when it was made. The text stays in C. */
static bool create(struct test_manager *x, const char *owner, const struct sbx_auth_limits *key,
		   const char *name, struct call *c)
{
	char args[128];

	snprintf(args, sizeof(args), "{\"name\":\"%s\"}", name);
	return call_as(x, owner, key, "create_sandbox", args, c) == 0 && !c->is_error;
}

static void delete (struct test_manager *x, const char *owner, const char *name)
{
	struct call c;
	char args[128];
	int r;

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", name);
	r = call_as(x, owner, NULL, "delete_sandbox", args, &c);
	tap_ok(r == 0 && !c.is_error, "%s deletes %s: %s", owner, name, shown(&c));
	call_release(&c);
}

/* C is an isError result whose text has every NEEDLE (NULL-terminated). */
static bool refused(const struct call *c, const char *const *needles)
{
	if (!c->res || !c->is_error)
		return false;
	for (; *needles; needles++)
		if (!strstr(c->text, *needles)) {
			tap_diag("  no \"%s\" in: %s", *needles, c->text);
			return false;
		}
	return true;
}

/* ---- sandboxes ---- */

static void test_sandboxes(struct test_manager *x)
{
	const struct sbx_auth_limits one = {1, -1, -1, -1, -1};
	static const char *const at_default[] = {
	    "tenant \"qa\" may have at most 2 sandboxes at once",
	    "(the server's quota.sandboxes)",
	    "has 2",
	    "delete_sandbox",
	    "qa-1",
	    "qa-2",
	    NULL};
	static const char *const at_key[] = {"tenant \"qc\" may have at most 1 sandbox at once",
					     "(the sandboxes limit of its API key)", "has 1", NULL};
	const struct sbx_auth_limits none = {0, -1, -1, -1, -1};
	static const char *const at_zero[] = {"tenant \"qd\" may not create sandboxes",
					      "(the sandboxes limit of its API key is 0)", NULL};
	struct call c;
	bool ok;

	ok = create(x, "qa", NULL, "qa-1", &c);
	call_release(&c);
	ok = ok && create(x, "qa", NULL, "qa-2", &c);
	tap_ok(ok, "sandboxes: [quota] sandboxes = 2 lets a key without limits create 2: %s",
	       shown(&c));
	call_release(&c);
	ok = create(x, "qa", NULL, "qa-3", &c);
	tap_ok(!ok && refused(&c, at_default),
	       "sandboxes: the third is refused naming quota.sandboxes, the count and what to "
	       "do: %s",
	       shown(&c));
	call_release(&c);
	ok = create(x, "qb", NULL, "qb-1", &c);
	tap_ok(ok, "sandboxes: another tenant still creates: %s", shown(&c));
	call_release(&c);
	ok = create(x, "qc", &one, "qc-1", &c);
	call_release(&c);
	ok = ok && !create(x, "qc", &one, "qc-2", &c);
	tap_ok(ok && refused(&c, at_key),
	       "sandboxes: a key's sandboxes=1 replaces the default: the second is refused "
	       "naming the key: %s",
	       shown(&c));
	call_release(&c);
	ok = create(x, "qd", &none, "qd-1", &c);
	tap_ok(!ok && refused(&c, at_zero),
	       "sandboxes: a key's sandboxes=0 allows none, naming the key: %s", shown(&c));
	call_release(&c);
	delete (x, "qa", "qa-1");
	ok = create(x, "qa", NULL, "qa-3", &c);
	tap_ok(ok, "sandboxes: a delete frees a slot: %s", shown(&c));
	call_release(&c);
	delete (x, "qa", "qa-3");
	delete (x, "qb", "qb-1");
	delete (x, "qc", "qc-1");
	/* qa-2 stays for the calls */
}

/* ---- calls, through MCP sessions ---- */

struct bg_call {
	pthread_t thread;
	sbx_mcp_session *s;
	char text[512];
	char *reply;
};

/* Parses and runs TEXT on S; the reply (owned). */
static char *run_text(sbx_mcp_session *s, const char *text)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_input *in = NULL;
	char *reply = NULL, *errjson = NULL;

	if (sbx_mcp_input_parse(text, strlen(text), &in, &errjson) < 0) {
		free(errjson);
		tap_bail("a request of the test does not parse");
	}
	if (sbx_mcp_session_run(s, in, NULL, &reply, &err) < 0)
		tap_bail(err.msg);
	return reply;
}

static void *bg_main(void *arg)
{
	struct bg_call *b = arg;

	b->reply = run_text(b->s, b->text);
	return NULL;
}

static sbx_mcp_session *session(sbx_mcp *m, enum sbx_mcp_transport tr, const char *tenant)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_session *s;

	if (sbx_mcp_session_new(m, tr, tenant, NULL, &s, &err) < 0)
		tap_bail(err.msg);
	free(run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			 "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{"
			 "\"name\":\"t\",\"version\":\"1\"}}}"));
	return s;
}

static const char list_call[] = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
				"\"params\":{\"name\":\"list_sandboxes\"}}";

static void test_calls(struct test_manager *x)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_mcp_config cfg = {.settings = &x->s, .manager = x->m};
	sbx_mcp *m;
	sbx_mcp_session *a1, *a2, *other;
	struct bg_call b = {0};
	char *reply;
	bool running = false;

	if (sbx_mcp_new(&cfg, &m, &err) < 0)
		tap_bail(err.msg);
	a1 = session(m, SBX_MCP_TRANSPORT_STREAMABLE, "qa");
	a2 = session(m, SBX_MCP_TRANSPORT_SSE, "qa");
	other = session(m, SBX_MCP_TRANSPORT_SSE, "qb");
	b.s = a1;
	snprintf(b.text, sizeof(b.text),
		 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"execute_terminal_command\",\"arguments\":{\"sandbox_id\":\"qa-2\","
		 "\"command\":\"sleep 3; echo slept\"}}}");
	if (pthread_create(&b.thread, NULL, bg_main, &b) != 0)
		tap_bail("pthread_create");
	for (int i = 0; i < 200 && !running; i++) {
		running = sbx_call_table_count(sbx_mcp_call_table(m), "qa") == 1;
		if (!running)
			usleep(10000);
	}
	tap_ok(running, "calls: qa's `sleep 3` runs (streamable session)");
	reply = run_text(a2, list_call);
	tap_ok(reply && strstr(reply, "\"isError\":true") &&
		   strstr(reply, "may run at most 1 tool call at once") &&
		   strstr(reply, "quota.calls") && strstr(reply, "runs 1") &&
		   strstr(reply, "wait for one of them to end"),
	       "calls: with [quota] calls = 1 her call on an SSE session meanwhile is refused as "
	       "a tool error: %s",
	       reply ? reply : "none");
	free(reply);
	reply = run_text(other, list_call);
	tap_ok(reply && strstr(reply, "\"isError\":false"),
	       "calls: another tenant's call runs meanwhile: %.200s", reply ? reply : "none");
	free(reply);
	pthread_join(b.thread, NULL);
	tap_ok(b.reply && strstr(b.reply, "slept"), "calls: the `sleep 3` ended: %.200s",
	       b.reply ? b.reply : "none");
	free(b.reply);
	reply = run_text(a2, list_call);
	tap_ok(reply && strstr(reply, "\"isError\":false") && strstr(reply, "qa-2"),
	       "calls: then her next call runs: %.200s", reply ? reply : "none");
	free(reply);
	tap_is_int(sbx_call_table_tenants(sbx_mcp_call_table(m)), 0,
		   "calls: no tenant is left in the table");
	sbx_mcp_session_unref(a1);
	sbx_mcp_session_unref(a2);
	sbx_mcp_session_unref(other);
	sbx_mcp_free(m);
	delete (x, "qa", "qa-2");
}

/* ---- memory and cpus ---- */

static bool wait_pool_ready(sbx_manager *m, size_t ready, int seconds)
{
	struct sbx_pool_stats st;

	for (int i = 0; i < seconds * 10; i++) {
		sbx_manager_pool_stats(m, &st);
		if (st.ready == ready && st.filling == 0)
			return true;
		usleep(100000);
	}
	tap_diag("pool: %zu ready, %zu filling (wanted %zu); last error %d", st.ready, st.filling,
		 ready, st.last_error);
	return false;
}

/* The limits the engine reports for OWNER's sandbox NAME. */
static bool inspect_limits(struct test_manager *x, const char *owner, const char *name,
			   int64_t *ret_memory, int64_t *ret_cpus)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_container_info ci = {0};
	_cleanup_free_ char *cid = NULL;
	sbx_sandbox *sb = NULL;
	bool ok;

	if (sbx_sandbox_get(x->m, owner, name, &sb, &err) < 0) {
		tap_diag("get %s: %s", name, err.msg);
		return false;
	}
	cid = container_of(x->inst, sbx_sandbox_id(sb));
	sbx_sandbox_unref(sb);
	ok = cid && sbx_container_inspect(engine, cid, &ci, &err) == 0;
	if (ok) {
		*ret_memory = ci.memory_bytes;
		*ret_cpus = ci.nano_cpus;
	} else {
		tap_diag("inspect %s: %s", name, err.msg);
	}
	sbx_container_info_release(&ci);
	return ok;
}

/* Creates OWNER's sandbox NAME under KEY and checks what the engine
 * reports against MEMORY and CPUS, and whether it came from the pool. */
static void expect_limits(struct test_manager *x, const char *owner,
			  const struct sbx_auth_limits *key, const char *name, int64_t memory,
			  int64_t cpus, bool pooled, const char *what)
{
	struct sbx_pool_stats before, after;
	int64_t mem = -1, nano = -1;
	struct call c;
	bool ok;

	sbx_manager_pool_stats(x->m, &before);
	ok = create(x, owner, key, name, &c);
	sbx_manager_pool_stats(x->m, &after);
	if (!tap_ok(ok, "memory/cpus: %s creates %s: %s", owner, name, shown(&c))) {
		call_release(&c);
		return;
	}
	call_release(&c);
	ok = inspect_limits(x, owner, name, &mem, &nano);
	tap_ok(ok && mem == memory && nano == cpus,
	       "memory/cpus: %s: inspect shows %lld MiB and %.2f CPUs (want %lld MiB, %.2f)", what,
	       (long long)(mem / MIB), (double)nano / NANO, (long long)(memory / MIB),
	       (double)cpus / NANO);
	if (pooled)
		tap_ok(after.taken == before.taken + 1 && after.cold == before.cold,
		       "memory/cpus: %s: it came from the pool", what);
	else
		tap_ok(after.taken == before.taken && after.cold == before.cold + 1,
		       "memory/cpus: %s: it did not come from the pool (made for it)", what);
}

static void test_memory_cpus(struct test_manager *x)
{
	const struct sbx_auth_limits low = {-1, -1, 64 * MIB, NANO / 2, -1};
	const struct sbx_auth_limits cpus_only = {-1, -1, -1, NANO / 4, -1};
	const struct sbx_auth_limits high = {-1, -1, 4096 * MIB, 8 * NANO, -1};
	struct sbx_pool_stats st;
	struct call c;
	int64_t mem = -1, nano = -1;
	int r;

	r = recover(x->m);
	tap_ok(r == 0 && wait_pool_ready(x->m, 1, 120), "memory/cpus: the pool holds a container");
	expect_limits(x, "ma", &low, "ma-1", 64 * MIB, NANO / 2, false,
		      "a key's memory=64m cpus=0.5 (the server's: 256m, 1)");
	sbx_manager_pool_stats(x->m, &st);
	tap_ok(st.ready == 1, "memory/cpus: ... the pooled container is still there, unused");
	expect_limits(x, "mb", NULL, "mb-1", 128 * MIB, NANO, false,
		      "no key limits: [quota] memory = 128m, the server's CPUs");
	expect_limits(x, "mc", &cpus_only, "mc-1", 128 * MIB, NANO / 4, false,
		      "a key's cpus=0.25 alone: its CPUs, [quota]'s memory");
	/* Above the server's: capped to it, and a pooled container fits. The
	 * [quota] memory of this manager is 128m, so a key is needed for the
	 * server's own limits to be the ceiling. */
	expect_limits(x, "md", &high, "md-1", 256 * MIB, NANO, true,
		      "a key's memory=4g cpus=8: the server's 256m and 1 CPU");
	tap_ok(wait_pool_ready(x->m, 1, 120) && (sbx_manager_pool_stats(x->m, &st), true) &&
		   st.taken == 1,
	       "memory/cpus: the pool refilled; only the capped tenant took from it");

	/* Out of memory: the notice names the tenant's limit. */
	r = call_as(x, "ma", &low, "execute_terminal_command",
		    "{\"sandbox_id\":\"ma-1\",\"command\":\"python3 -c 'x = bytearray(200 << "
		    "20)'\"}",
		    &c);
	tap_ok(r == 0 && !c.is_error && strstr(c.text, "\"out_of_memory\":true") &&
		   strstr(c.text, "64 MiB (the memory quota of its tenant)"),
	       "memory/cpus: 200 MiB in the 64 MiB sandbox: out of memory, naming the tenant's "
	       "limit: %s",
	       shown(&c));
	call_release(&c);
	if (inspect_limits(x, "ma", "ma-1", &mem, &nano))
		tap_ok(mem == 64 * MIB, "memory/cpus: ... still 64 MiB");
	delete (x, "ma", "ma-1");
	delete (x, "mb", "mb-1");
	delete (x, "mc", "mc-1");
	delete (x, "md", "md-1");
}

/* ---- installs ---- */

/* The file that holds the stand-in package's install (pkgindex.py): made
 * in the index's folder once it runs. */
static char hold_path[128];

/* install_package_in_sandbox SPEC in OWNER's SANDBOX; C keeps the answer. */
static int install(struct test_manager *x, const char *owner, const struct sbx_auth_limits *key,
		   const char *sandbox, const char *spec, struct call *c)
{
	char args[256];

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"package_name\":\"%s\"}", sandbox,
		 spec);
	return call_as(x, owner, key, "install_package_in_sandbox", args, c);
}

/* The install is accepted and still runs (held by the index). */
static bool installing(int r, const struct call *c)
{
	return r == 0 && !c->is_error && str_at(c->obj, "status") &&
	       strcmp(str_at(c->obj, "status"), "installing") == 0;
}

/* Waits until SPEC in OWNER's SANDBOX is no longer installing; its status. */
static char *wait_install(struct test_manager *x, const char *owner, const char *sandbox,
			  const char *spec)
{
	char args[256], *st = NULL;
	struct call c;

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"package_name\":\"%s\"}", sandbox,
		 spec);
	for (int i = 0; i < 120; i++) {
		call_as(x, owner, NULL, "check_package_installation_status", args, &c);
		free(st);
		st = str_at(c.obj, "status") ? strdup(str_at(c.obj, "status")) : NULL;
		call_release(&c);
		if (!st || strcmp(st, "installing") != 0)
			break;
		sleep(1);
	}
	return st;
}

static void test_installs(struct test_manager *x)
{
	const struct sbx_auth_limits one = {-1, -1, -1, -1, 1};
	static const char *const at_default[] = {
	    "tenant \"ia\" may run at most 2 package installs at once",
	    "(the server's quota.installs)", "runs 2", "wait for one to end", NULL};
	static const char *const at_key[] = {"tenant \"ib\" may run at most 1 package install at "
					     "once",
					     "(the installs limit of its API key)", "runs 1", NULL};
	struct call c;
	char *st;
	int fd, r;
	bool ok;

	fd = open(hold_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		tap_bail("cannot make the index's hold file");
	close(fd);
	ok = create(x, "ia", NULL, "ia-1", &c);
	call_release(&c);
	ok = ok && create(x, "ia", NULL, "ia-2", &c);
	call_release(&c);
	ok = ok && create(x, "ib", &one, "ib-1", &c);
	tap_ok(ok, "installs: sandboxes of two tenants that reach the index: %s", shown(&c));
	call_release(&c);

	r = install(x, "ia", NULL, "ia-1", "sbxslow==1", &c);
	ok = installing(r, &c);
	call_release(&c);
	r = install(x, "ia", NULL, "ia-2", "sbxslow==2", &c);
	tap_ok(ok && installing(r, &c),
	       "installs: [quota] installs = 2 lets a key without limits run 2, in two sandboxes: "
	       "%s",
	       shown(&c));
	call_release(&c);
	r = install(x, "ia", NULL, "ia-1", "sbxslow==3", &c);
	tap_ok(r == 0 && refused(&c, at_default),
	       "installs: the third is refused at once naming quota.installs, the count and "
	       "what to do: %s",
	       shown(&c));
	call_release(&c);
	r = install(x, "ia", NULL, "ia-1", "sbxslow==1", &c);
	tap_ok(installing(r, &c), "installs: asking again for one that runs is not a new one: %s",
	       shown(&c));
	call_release(&c);

	r = install(x, "ib", &one, "ib-1", "sbxslow==1", &c);
	tap_ok(installing(r, &c), "installs: another tenant installs meanwhile: %s", shown(&c));
	call_release(&c);
	r = install(x, "ib", &one, "ib-1", "sbxslow==2", &c);
	tap_ok(r == 0 && refused(&c, at_key),
	       "installs: its key's installs=1 replaces the default: the second is refused "
	       "naming the key: %s",
	       shown(&c));
	call_release(&c);

	delete (x, "ia", "ia-2");
	r = install(x, "ia", NULL, "ia-1", "sbxslow==3", &c);
	tap_ok(installing(r, &c), "installs: deleting a sandbox frees its install's slot: %s",
	       shown(&c));
	call_release(&c);
	r = install(x, "ia", NULL, "ia-1", "sbxslow==4", &c);
	tap_ok(r == 0 && refused(&c, at_default), "installs: ... and she is at 2 again: %s",
	       shown(&c));
	call_release(&c);

	unlink(hold_path);
	st = wait_install(x, "ia", "ia-1", "sbxslow==1");
	tap_is_str(st, "failed", "installs: released, an install fails (no such file)");
	free(st);
	st = wait_install(x, "ia", "ia-1", "sbxslow==3");
	free(st);
	r = install(x, "ia", NULL, "ia-1", "sbxdemo", &c);
	st = str_at(c.obj, "status") ? strdup(str_at(c.obj, "status")) : NULL;
	tap_ok(r == 0 && !c.is_error && st && (!strcmp(st, "success") || !strcmp(st, "installing")),
	       "installs: installs that ended free their slots: sbxdemo installs: %s", shown(&c));
	call_release(&c);
	free(st);
	st = wait_install(x, "ia", "ia-1", "sbxdemo");
	tap_is_str(st, "success", "installs: ... and succeeds");
	free(st);
	st = wait_install(x, "ib", "ib-1", "sbxslow==1");
	free(st);
	r = install(x, "ib", &one, "ib-1", "sbxdemo", &c);
	tap_ok(r == 0 && !c.is_error, "installs: the other tenant's slot is free too: %s",
	       shown(&c));
	call_release(&c);
	st = wait_install(x, "ib", "ib-1", "sbxdemo");
	free(st);
	delete (x, "ia", "ia-1");
	delete (x, "ib", "ib-1");
}

/* Whether to run PART: all of them unless SBX_QUOTA_ONLY names one. */
static bool only(const char *part)
{
	const char *want = getenv("SBX_QUOTA_ONLY");

	return !want || !*want || !strcmp(want, part);
}

int main(int argc, char **argv)
{
	const char *const counts[] = {"sandbox.pool_size=0", "quota.sandboxes=2", "quota.calls=1",
				      NULL};
	const char *const limits[] = {"sandbox.pool_size=1", "sandbox.cpus=1", "quota.memory=128m",
				      NULL};
	char url[128], index_set[192];
	const char *installs[] = {"sandbox.pool_size=0", "sandbox.network=host", "quota.installs=2",
				  index_set, NULL};
	struct test_manager x;

	fixture_init(argc, argv, "quota");

	if (only("counts")) {
		test_manager_open(&x, "counts", counts, NULL);
		test_sandboxes(&x);
		test_calls(&x);
		test_manager_close(&x, "no container of the counts manager is left");
	}

	if (only("limits")) {
		test_manager_open(&x, "limits", limits, NULL);
		test_memory_cpus(&x);
		test_manager_close(&x, "no container of the limits manager is left");
	}

	if (only("installs") && tap_ok(pkg_index_start("quota", url, sizeof(url)) == 0,
				       "tests/pkgindex.py serves the index")) {
		snprintf(hold_path, sizeof(hold_path), "%s/hold", pkg_index_root());
		snprintf(index_set, sizeof(index_set), "sandbox.index_url=%s", url);
		test_manager_open(&x, "installs", installs, NULL);
		test_installs(&x);
		test_manager_close(&x, "no container of the installs manager is left");
	}
	pkg_index_stop();
	return fixture_end();
}
