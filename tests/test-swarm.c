/* SPDX-License-Identifier: MIT */
/*
 * Sandboxes on a Docker Swarm (engine.type = swarm), what only a cluster
 * has: tests/test-swarm swarm unix://MANAGER [IMAGE], against the three
 * nodes of tools/provision-engines (the only swarm suite that stops a
 * node: tests/engine-suite runs the swarm suites one at a time).
 *
 * - Sandboxes spread over the nodes, and each one's calls reach it there;
 *   list_sandboxes names the node.
 * - A worker whose engine dies (its dockerd SIGKILLed, by the PID in the
 *   docker.pid beside the socket its label names): its sandboxes are dead
 *   with the reason ("node ... is down") without any call on them, a call
 *   on one says so, new sandboxes land on the live nodes, the others run
 *   on. The node is brought back (tools/provision-engines, which started
 *   it); what it ran is removed with its sandboxes, nothing of the run is
 *   left on any node.
 * - The manager's engine restarted (SIGTERM, then tools/provision-engines):
 *   a sandbox on a worker runs commands meanwhile and after, a create
 *   meanwhile is refused with a reason, creates work once it leads again.
 * - The manager in engine.socket gone for good (a relay to its socket,
 *   stopped): the server follows another manager of the cluster,
 *   found among the nodes it reached by their labels; everything goes on.
 *   A worker is never followed, even one whose engine claims to be a
 *   manager of the cluster (an engine of the test's own, named by the
 *   worker's label).
 * - One node (3) is reached over TCP with TLS client certificates (its
 *   label is tcp://127.0.0.3:2376; MCP_SANDBOX_TLS_DIR): everything above
 *   that lands there goes so.
 * - What a service cannot carry is checked on every node before the first
 *   sandbox (sbx_places_check, as the server's start and --check run it),
 *   and a node check refuses an engine started without the flags a node
 *   needs: this host's docker engine of tools/provision-engines, which has
 *   no --no-new-privileges (the docker backend asks for it per container).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../backends/swarm-internal.h"
#include "sandbox-fixture.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "tap.h"
#include "tcp-relay.h"

#define SPREAD 6
#define OWNER "alice"

/* The instance the main server's sandboxes are labelled with. */
static const char *run_inst = "";

/* The node a sandbox's listing names, copied; NULL when none. */
static char *node_of(sbx_manager *m, const char *id, char **ret_status, char **ret_reason)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info *list = NULL;
	char *node = NULL;
	size_t n = 0;

	if (ret_status)
		*ret_status = NULL;
	if (ret_reason)
		*ret_reason = NULL;
	if (sbx_manager_list(m, OWNER, &list, &n, &err) < 0) {
		tap_diag("list: %s", err.msg);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i].id, id) != 0)
			continue;
		node = list[i].node ? strdup(list[i].node) : NULL;
		if (ret_status)
			*ret_status = strdup(list[i].status);
		if (ret_reason && list[i].reason)
			*ret_reason = strdup(list[i].reason);
	}
	sbx_sandbox_info_list_free(list, n);
	return node;
}

/* The manager's own node id. */
static char *manager_node(void)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *id;

	if (sbx_engine_negotiate(engine, NULL) < 0 ||
	    sbx_engine_json(engine, "GET", NULL, NULL, &j, NULL, "/info") < 0)
		return NULL;
	id = sbx_json_str(sbx_json_path(j, "Swarm", NULL), "NodeID");
	return id ? strdup(id) : NULL;
}

/* Node NODE's label org.mcp-sandbox.engine as the manager has it (NULL
 * when none), and its state. */
static char *node_label(const char *node, char *state, size_t size)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *url, *st;

	snprintf(state, size, "?");
	if (sbx_engine_json(engine, "GET", NULL, NULL, &j, NULL, "/nodes/%s", node) < 0)
		return NULL;
	url = sbx_json_str(sbx_json_path(sbx_json_path(j, "Spec", NULL), "Labels", NULL),
			   "org.mcp-sandbox.engine");
	st = sbx_json_str(sbx_json_path(j, "Status", NULL), "State");
	snprintf(state, size, "%s", st ? st : "?");
	return url ? strdup(url) : NULL;
}

/* Node NODE's own unix socket, one of MCP_SANDBOX_SWARM_NODE_SOCKETS (its
 * label may name a tcp:// one): the one whose engine says it is NODE,
 * remembered (so known while the node is down); and its state. */
static char *node_socket(const char *node, char *state, size_t size)
{
	static struct {
		char id[SBX_ENGINE_ID_MAX + 1];
		char path[512];
	} known[8];
	static size_t n_known;
	_cleanup_free_ char *socks = NULL;
	char *save = NULL;

	free(node_label(node, state, size));
	for (size_t i = 0; i < n_known; i++)
		if (strcmp(known[i].id, node) == 0)
			return strdup(known[i].path);
	socks = getenv("MCP_SANDBOX_SWARM_NODE_SOCKETS")
		    ? strdup(getenv("MCP_SANDBOX_SWARM_NODE_SOCKETS"))
		    : NULL;
	for (char *p = socks ? strtok_r(socks, " ", &save) : NULL; p && n_known < 8;
	     p = strtok_r(NULL, " ", &save)) {
		_cleanup_json_ struct json_object *j = NULL;
		sbx_engine *ne = NULL;
		const char *id = NULL;
		char url[600];

		snprintf(url, sizeof(url), "unix://%s", p);
		if (sbx_engine_open(&(struct sbx_engine_config){.type = "docker", .url = url}, &ne,
				    NULL) == 0 &&
		    sbx_engine_negotiate(ne, NULL) == 0 &&
		    sbx_engine_json(ne, "GET", NULL, NULL, &j, NULL, "/info") == 0)
			id = sbx_json_str(sbx_json_path(j, "Swarm", NULL), "NodeID");
		if (id && strcmp(id, node) == 0) {
			snprintf(known[n_known].id, sizeof(known[n_known].id), "%s", id);
			snprintf(known[n_known].path, sizeof(known[n_known].path), "%s", p);
			n_known++;
			sbx_engine_free(ne);
			return strdup(p);
		}
		sbx_engine_free(ne);
	}
	return NULL;
}

/* The PID in the docker.pid beside SOCKET, if that process is a dockerd
 * serving SOCKET (never another's PID). */
static pid_t node_pid(const char *socket)
{
	char path[512], cmd[4096] = "";
	const char *slash = strrchr(socket, '/');
	long pid = 0;
	size_t n;
	FILE *f;

	if (!slash)
		return 0;
	snprintf(path, sizeof(path), "%.*s/docker.pid", (int)(slash - socket), socket);
	f = fopen(path, "r");
	if (!f || fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	if (f)
		fclose(f);
	if (pid <= 1)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	f = fopen(path, "r");
	n = f ? fread(cmd, 1, sizeof(cmd) - 1, f) : 0;
	if (f)
		fclose(f);
	for (size_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = '\0';
	return strstr(cmd, "dockerd") && strstr(cmd, socket) ? (pid_t)pid : 0;
}

/* Sets node NODE's label org.mcp-sandbox.engine to URL (the manager's
 * node update, at the node's version). */
static bool set_label(const char *node, const char *url)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct json_object *spec, *labels;
	int64_t version;

	if (sbx_engine_json(engine, "GET", NULL, NULL, &j, NULL, "/nodes/%s", node) < 0)
		return false;
	spec = sbx_json_path(j, "Spec", NULL);
	labels = sbx_json_path(spec, "Labels", NULL);
	version = sbx_json_int(sbx_json_path(j, "Version", NULL), "Index");
	if (!labels || version <= 0 || version > INT32_MAX)
		return false;
	json_object_object_add(labels, "org.mcp-sandbox.engine", json_object_new_string(url));
	return sbx_engine_json(engine, "POST", spec, NULL, NULL, NULL,
			       "/nodes/%s/update?version=%d", node, (int)version) >= 0;
}

/* A node whose label names another engine (here another node's socket,
 * as one naming this host's own engine would): the server refuses to use
 * it, saying why, and takes it again once the label is right. */
static void test_wrong_label(sbx_manager *m, char **nodes)
{
	struct sbx_error err = SBX_ERROR_INIT;
	_cleanup_free_ char *mgr = manager_node(), *own = NULL, *other = NULL, *label = NULL;
	char state[32], url[600];
	sbx_sandbox *sb = NULL;
	const char *victim = NULL;
	int r;

	for (int i = 0; i < SPREAD && !victim; i++)
		if (nodes[i] && mgr && strcmp(nodes[i], mgr) != 0)
			victim = nodes[i];
	own = victim ? node_socket(victim, state, sizeof(state)) : NULL;
	label = victim ? node_label(victim, state, sizeof(state)) : NULL;
	other = mgr ? node_socket(mgr, state, sizeof(state)) : NULL;
	if (!tap_ok(own && other && label,
		    "a worker's socket and label, and the manager's socket (%s, %s, %s)",
		    own ? own : "-", label ? label : "-", other ? other : "-"))
		return;
	snprintf(url, sizeof(url), "unix://%s", other);
	tap_ok(set_label(victim, url), "the worker's label now names the manager's engine");
	r = sbx_sandbox_create(m, OWNER, "mislabelled", &sb, &err);
	tap_ok(r < 0 && strstr(err.msg, "not that node") && strstr(err.msg, victim),
	       "a create is refused, naming the node and why: %s", r < 0 ? err.msg : "(made)");
	if (r == 0) {
		sbx_sandbox_delete(m, OWNER, "mislabelled", NULL);
		sbx_sandbox_unref(sb);
	}
	sbx_error_clear(&err);
	tap_ok(set_label(victim, label), "the label is set right again (%s)", label);
	r = sbx_sandbox_create(m, OWNER, "relabelled", &sb, &err);
	tap_ok(r == 0, "then creates work (%s)", err.msg);
	if (r == 0) {
		sbx_sandbox_delete(m, OWNER, "relabelled", NULL);
		sbx_sandbox_unref(sb);
	}
}

struct report {
	int lines, passed, tcp;
};

static void count_line(void *userdata, const char *line)
{
	struct report *rep = userdata;

	rep->lines++;
	rep->passed +=
	    strstr(line, ": image present, no-new-privileges, no network but lo") != NULL;
	rep->tcp += strstr(line, " (tcp://") != NULL;
	tap_diag("%s", line);
}

/* Containers labelled as a node check's on engine E, or -1. */
static long checks_on(sbx_engine *e)
{
	static const struct sbx_kv mark = {SBX_SWARM_CHECK_LABEL, "1"};
	struct sbx_container_summary *cs = NULL;
	size_t n = 0;

	if (sbx_container_list(e, &mark, 1, &cs, &n, NULL) < 0)
		return -1;
	sbx_container_list_free(cs, n);
	return (long)n;
}

/* mcp-sandboxd --check against the cluster: a line for each node, and
 * success. */
static void test_check_command(void)
{
	const char *builddir = getenv("SBX_BUILDDIR");
	const struct sbx_engine_tls *tls = fixture_tls();
	char cmd[4096], line[1024];
	int nodes = 0, status;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "%s/src/mcp-sandboxd -c /dev/null --set engine.type=swarm --set engine.socket=%s "
		 "--set sandbox.image=%s --set sandbox.disk=0%s%s%s%s%s%s --check 2>&1",
		 builddir ? builddir : ".", engine_url, image, tls ? " --set engine.tls_ca=" : "",
		 tls ? tls->ca : "", tls ? " --set engine.tls_cert=" : "", tls ? tls->cert : "",
		 tls ? " --set engine.tls_key=" : "", tls ? tls->key : "");
	p = popen(cmd, "r");
	if (!tap_ok(p != NULL, "run mcp-sandboxd --check"))
		return;
	while (fgets(line, sizeof(line), p)) {
		tap_diag("--check: %s", line);
		nodes += strncmp(line, "node ", 5) == 0 &&
			 strstr(line, ": image present, no-new-privileges, no network but lo");
	}
	status = pclose(p);
	tap_ok(status == 0, "--check succeeds (status %d)", status);
	tap_is_int(nodes, 3, "--check reports each node checked");
}

static void test_verify(void)
{
	static const char *const wait[] = {"sleep", "60", NULL};
	static const struct sbx_kv mark = {SBX_SWARM_CHECK_LABEL, "1"};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct report rep = {0};
	struct sbx_container_spec check = {.image = image,
					   .cmd = wait,
					   .labels = &mark,
					   .n_labels = 1,
					   .user = "1000:1000",
					   .init = true};
	const char *plain = getenv("MCP_SANDBOX_DOCKER_SOCKET");
	char url[600];
	sbx_engine *d = NULL;
	char *left = NULL;
	int r;

	settings_for(&s, instance, NULL);
	r = sbx_places_check(&s, engine, count_line, &rep, &err);
	tap_ok(r == 0, "every node passes the check a sandbox needs (%s)", err.msg);
	tap_is_int(rep.lines, 3, "a line for each of the three nodes");
	tap_is_int(rep.passed, 3, "each with its image, no-new-privileges and no network but lo");
	tap_is_int(rep.tcp, 1, "one of them reached over TCP, with TLS (its label is tcp://)");
	sbx_settings_release(&s);
	sbx_error_clear(&err);
	test_check_command();

	if (!tap_ok(plain && *plain, "this host's docker engine (MCP_SANDBOX_DOCKER_SOCKET)"))
		return;
	snprintf(url, sizeof(url), "unix://%s", plain);
	r = sbx_engine_open(&(struct sbx_engine_config){.type = "docker", .url = url}, &d, &err);
	if (!tap_ok(r == 0, "open it (%s)", err.msg))
		return;
	/* A check cut short left its container: the next one removes it. */
	r = sbx_container_create(d, &check, &left, &err);
	tap_ok(r == 0, "a container as a check cut short leaves it (%s)", err.msg);
	free(left);
	sbx_error_clear(&err);
	r = swarm_node_check(d, "plain", &check, true, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "node plain") &&
		   strstr(err.msg, "--no-new-privileges"),
	       "an engine without --no-new-privileges is refused, naming the flag: %s", err.msg);
	sbx_error_clear(&err);
	/* The same engine, with what it lacks asked for by the container: the
	 * network is now the one to fail (host: the host's interfaces). */
	check.no_new_privileges = true;
	check.network_mode = "host";
	r = swarm_node_check(d, "plain", &check, true, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "--bridge=none"),
	       "a container with an interface besides lo is refused, naming the flag: %s", err.msg);
	sbx_error_clear(&err);
	r = swarm_node_check(d, "plain", &check, false, &err);
	tap_ok(r == 0, "which is not asked when sandboxes may have a network (%s)", err.msg);
	sbx_error_clear(&err);
	check.network_mode = NULL;
	r = swarm_node_check(d, "plain", &check, true, &err);
	tap_ok(r == 0, "and with both given the check passes (%s)", err.msg);
	sbx_error_clear(&err);
	tap_is_int(checks_on(d), 0, "no check's container is left, the one cut short included");
	sbx_engine_free(d);
}

static void test_spread(sbx_manager *m, sbx_sandbox **sb, char **nodes)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	size_t distinct = 0, ran = 0;

	for (int i = 0; i < SPREAD; i++) {
		char name[16];
		snprintf(name, sizeof(name), "spread%d", i);
		if (sbx_sandbox_create(m, OWNER, name, &sb[i], &err) < 0) {
			tap_ok(0, "create sandbox %s (%s)", name, err.msg);
			sbx_error_clear(&err);
			continue;
		}
		nodes[i] = node_of(m, sbx_sandbox_id(sb[i]), NULL, NULL);
	}
	for (int i = 0; i < SPREAD; i++) {
		bool seen = false;
		for (int k = 0; k < i; k++)
			seen |= nodes[i] && nodes[k] && strcmp(nodes[i], nodes[k]) == 0;
		distinct += nodes[i] && !seen;
		if (sb[i] && shell(m, sb[i], "echo here", &res) == 0) {
			ran += res.exit_code == 0 && strstr(res.out.data, "here") != NULL;
			sbx_run_result_release(&res);
		}
		tap_diag("sandbox %d on node %s", i, nodes[i] ? nodes[i] : "(none)");
	}
	tap_ok(distinct >= 2, "%d sandboxes spread over %zu nodes, each listed with its node",
	       SPREAD, distinct);
	tap_is_int((long)ran, SPREAD, "a command runs in each, on its node");
	{
		/* /metrics' mcp_sandbox_node_sandboxes, as the engine knows it
		 * without a request: the same nodes, the same counts. */
		struct sbx_node_count counts[8];
		size_t n = sbx_manager_node_counts(m, counts, 8), total = 0, agree = 0;

		for (size_t k = 0; k < n; k++) {
			size_t listed = 0;
			for (int i = 0; i < SPREAD; i++)
				listed += nodes[i] && strcmp(nodes[i], counts[k].node) == 0;
			total += counts[k].sandboxes;
			agree += listed == counts[k].sandboxes;
			tap_diag("node %s: %zu sandboxes", counts[k].node, counts[k].sandboxes);
		}
		tap_ok(n == distinct && agree == n && total == SPREAD,
		       "sandboxes by node, as /metrics gives them: %zu nodes, %zu sandboxes, as "
		       "listed",
		       n, total);
	}
	{
		/* A server that adopts them (a fresh handle, as after a
		 * restart): its listing alone tells where each runs. */
		const struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, run_inst}};
		struct sbx_container_summary *cs = NULL;
		sbx_engine *fresh = NULL;
		size_t n = 0, placed = 0, running = 0;
		char at[SBX_ENGINE_ID_MAX + 1];

		if (sbx_engine_open(&(struct sbx_engine_config){.type = "swarm",
								.url = engine_url,
								.tls = fixture_tls()},
				    &fresh, &err) == 0 &&
		    sbx_container_list(fresh, want, 1, &cs, &n, &err) == 0) {
			for (size_t i = 0; i < n; i++) {
				running += cs[i].running;
				placed += cs[i].running && cs[i].node &&
					  swarm_place_node(fresh, cs[i].id, at, sizeof(at)) == 0 &&
					  strcmp(at, cs[i].node) == 0;
			}
			sbx_container_list_free(cs, n);
		}
		tap_ok(running == SPREAD && placed == running,
		       "a fresh handle's listing remembers where each runs (%zu of %zu; %s)",
		       placed, running, err.msg);
		sbx_error_clear(&err);
		sbx_engine_free(fresh);
	}
}

/* tools/provision-engines run again (it brings back a node it started):
 * its status; its output as diagnostics when it fails. A node that
 * restarts with containers to clean up may take a minute to be ready
 * on a loaded machine (its 30 s default). */
static int provision(const char *srcdir)
{
	char log[64], cmd[1024];
	int rc;

	snprintf(log, sizeof(log), "/tmp/sbx-swarm-provision-%ld.log", (long)getpid());
	snprintf(cmd, sizeof(cmd),
		 "MCP_SANDBOX_ENGINES_WAIT=120 '%s/tools/provision-engines' --no-image >'%s' 2>&1",
		 srcdir ? srcdir : ".", log);
	rc = system(cmd);
	if (rc != 0) {
		snprintf(cmd, sizeof(cmd), "tail -n 20 '%s' | sed 's/^/#   /'", log);
		tap_diag("tools/provision-engines: status %d; its last lines:", rc);
		fflush(stdout);
		if (system(cmd) != 0)
			tap_diag("(cannot show %s)", log);
	}
	unlink(log);
	return rc;
}

/* Waits (up to 120 s) until the pool of X's manager holds its size, and
 * says how many of its containers run on NODE; the pool's stats in *PS. */
static size_t pool_on(struct test_manager *x, const char *node, struct sbx_pool_stats *ps)
{
	const struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, x->inst}, {SBX_LABEL_POOL, "1"}};
	struct sbx_container_summary *cs = NULL;
	size_t n = 0, there = 0;
	int64_t t0 = sbx_monotonic_ms();

	do {
		usleep(200000);
		sbx_manager_pool_stats(x->m, ps);
	} while (ps->ready < ps->size && sbx_monotonic_ms() - t0 < 120000);
	if (sbx_container_list(engine, want, 2, &cs, &n, NULL) < 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		there += cs[i].running && cs[i].node && strcmp(cs[i].node, node) == 0;
	sbx_container_list_free(cs, n);
	return there;
}

static void test_node_loss(sbx_manager *m, sbx_sandbox **sb, char **nodes)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	_cleanup_free_ char *mgr = manager_node(), *sock = NULL;
	sbx_sandbox *fresh = NULL;
	char state[32] = "", *status = NULL, *reason = NULL, *where;
	const char *builddir = getenv("SBX_SRCDIR");
	int victim = -1, other = -1;
	int64_t t0;
	pid_t pid = 0;
	struct test_manager px;
	struct sbx_pool_stats ps = {0};
	size_t pooled_there = 0;
	sbx_manager *pm;

	for (int i = 0; i < SPREAD; i++) {
		if (!sb[i] || !nodes[i] || !mgr)
			continue;
		if (victim < 0 && strcmp(nodes[i], mgr) != 0)
			victim = i;
		else if (other < 0 && victim >= 0 && strcmp(nodes[i], nodes[victim]) != 0)
			other = i;
	}
	for (int i = 0; other < 0 && victim >= 0 && i < SPREAD; i++)
		if (sb[i] && nodes[i] && strcmp(nodes[i], nodes[victim]) != 0)
			other = i;
	if (!tap_ok(victim >= 0 && other >= 0,
		    "a sandbox on a worker and one on another node (manager %s)", mgr ? mgr : "?"))
		return;
	sock = node_socket(nodes[victim], state, sizeof(state));
	pid = sock ? node_pid(sock) : 0;
	if (!tap_ok(pid > 0, "the worker's engine: %s, pid %ld", sock ? sock : "(no label)",
		    (long)pid))
		return;
	/* A warm pool of its own, some of it on the worker. */
	pm = test_manager_open(&px, "pool", (const char *const[]){"sandbox.pool_size=6", NULL},
			       NULL);
	recover(pm); /* the pool fills once it has */
	pooled_there = pool_on(&px, nodes[victim], &ps);
	tap_ok(pooled_there > 0,
	       "a second server's warm pool holds %zu ready, %zu of them on the worker", ps.ready,
	       pooled_there);
	{
		sbx_engine *nh = NULL;
		tap_ok(swarm_node_known(engine, nodes[victim], &nh, NULL) == 0 && nh &&
			   swarm_node_verified(engine, nh, false),
		       "the worker was checked (its first sandbox's look)");
	}
	tap_ok(kill(pid, SIGKILL) == 0, "its dockerd is killed (SIGKILL)");

	/* Dead with the reason, without any call on it. */
	t0 = sbx_monotonic_ms();
	while (sbx_monotonic_ms() - t0 < 60000) {
		free(status);
		free(reason);
		free(node_of(m, sbx_sandbox_id(sb[victim]), &status, &reason));
		if (reason)
			break;
		usleep(200000);
	}
	tap_ok(reason && strstr(reason, "is down") && strstr(reason, nodes[victim]),
	       "its sandbox is listed dead, its reason naming the node (%lld ms): %s",
	       (long long)(sbx_monotonic_ms() - t0), reason ? reason : "(none)");
	tap_diag("status %s", status ? status : "-");
	tap_ok(reason && !strstr(reason, "not following"),
	       "... said as what it is, not as a gap in following the engine");
	{
		/* Its engine may come back started otherwise: checked again. */
		sbx_engine *nh = NULL;
		tap_ok(swarm_node_known(engine, nodes[victim], &nh, NULL) == 0 && nh &&
			   !swarm_node_verified(engine, nh, false),
		       "the lost node's check is due again");
	}
	free(status);
	free(reason);
	sbx_error_clear(&err);
	tap_ok(sbx_sandbox_run_shell(m, sb[victim], "echo hi", 0, &res, &err) == -ESRCH &&
		   strstr(err.msg, "is down"),
	       "a call on it fails saying its node is down: %s", err.msg);
	tap_ok(shell(m, sb[other], "echo still", &res) == 0 && res.exit_code == 0,
	       "a sandbox on another node runs on");
	sbx_run_result_release(&res);
	sbx_error_clear(&err);
	if (tap_ok(sbx_sandbox_create(m, OWNER, "after", &fresh, &err) == 0,
		   "a new sandbox is made meanwhile (%s)", err.msg)) {
		where = node_of(m, sbx_sandbox_id(fresh), NULL, NULL);
		tap_ok(where && strcmp(where, nodes[victim]) != 0, "... on a live node (%s)",
		       where ? where : "none");
		free(where);
		tap_ok(shell(m, fresh, "echo new", &res) == 0 && res.exit_code == 0,
		       "... and runs commands");
		sbx_run_result_release(&res);
		sbx_sandbox_unref(fresh);
	}
	sbx_error_clear(&err);
	tap_ok(sbx_sandbox_delete(m, OWNER, sbx_sandbox_name(sb[victim]), &err) == 0,
	       "the dead sandbox is deleted (%s)", err.msg);
	/* The pool drops what it held on the lost node, by itself. */
	{
		uint64_t died0 = ps.died;

		t0 = sbx_monotonic_ms();
		do {
			usleep(200000);
			sbx_manager_pool_stats(pm, &ps);
		} while (ps.died - died0 < pooled_there && sbx_monotonic_ms() - t0 < 30000);
		tap_ok(ps.died - died0 >= pooled_there,
		       "the pool dropped the %zu it held on the lost node (%llu dropped, %lld ms)",
		       pooled_there, (unsigned long long)(ps.died - died0),
		       (long long)(sbx_monotonic_ms() - t0));
	}

	/* The node back: tools/provision-engines started it, and starts it again. */
	tap_ok(provision(builddir) == 0, "tools/provision-engines brings the node back");
	t0 = sbx_monotonic_ms();
	while (sbx_monotonic_ms() - t0 < 60000) {
		free(node_socket(nodes[victim], state, sizeof(state)));
		if (strcmp(state, "ready") == 0)
			break;
		usleep(200000);
	}
	tap_is_str(state, "ready", "the node is ready again");
	{
		/* What it ran of this run is gone from it once its sandboxes
		 * (dead with it) are deleted. */
		struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, run_inst}};
		struct sbx_container_summary *cs = NULL;
		sbx_engine *node = NULL;
		char url[600];
		size_t n = 1;

		for (int i = 0; i < SPREAD; i++)
			if (i != victim && sb[i] && nodes[i] &&
			    strcmp(nodes[i], nodes[victim]) == 0)
				tap_ok(sbx_sandbox_delete(m, OWNER, sbx_sandbox_name(sb[i]),
							  &err) == 0,
				       "another sandbox the node ran is deleted (%s)", err.msg);

		snprintf(url, sizeof(url), "unix://%s", sock);
		if (sbx_engine_open(&(struct sbx_engine_config){.type = "docker", .url = url},
				    &node, &err) == 0) {
			t0 = sbx_monotonic_ms();
			while (sbx_monotonic_ms() - t0 < 60000) {
				if (sbx_container_list(node, want, 1, &cs, &n, NULL) == 0) {
					sbx_container_list_free(cs, n);
					if (n == 0)
						break;
				}
				usleep(500000);
			}
		}
		tap_is_int((long)n, 0, "the container the node ran for it is gone from the node");
		sbx_engine_free(node);
	}
	test_manager_close(&px, "the pool's server");
}

/* The manager's engine restarted (SIGTERM, as a host's service manager
 * stops it; brought back by tools/provision-engines): a sandbox on a
 * worker runs commands all along (its calls go to its node), the server
 * lives and says what it cannot do meanwhile, and once the manager is
 * back the worker's sandbox still runs (or, when Swarm replaced its task,
 * is said to be killed) and creates work again. */
static void test_manager_restart(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	_cleanup_free_ char *mgr = manager_node(), *sock = NULL;
	sbx_sandbox *sb[3] = {0}, *fresh = NULL;
	char state[32] = "", *node;
	const char *builddir = getenv("SBX_SRCDIR");
	struct sbx_sandbox_info *list = NULL;
	size_t n = 0;
	int worker = -1, r;
	int64_t t0;
	pid_t pid;

	for (int i = 0; i < 3; i++) {
		char name[16];
		snprintf(name, sizeof(name), "mr%d", i);
		if (sbx_sandbox_create(m, OWNER, name, &sb[i], &err) < 0) {
			tap_diag("create %s: %s", name, err.msg);
			sbx_error_clear(&err);
			continue;
		}
		node = node_of(m, sbx_sandbox_id(sb[i]), NULL, NULL);
		if (worker < 0 && node && mgr && strcmp(node, mgr) != 0)
			worker = i;
		free(node);
	}
	sock = mgr ? node_socket(mgr, state, sizeof(state)) : NULL;
	pid = sock ? node_pid(sock) : 0;
	if (!tap_ok(worker >= 0 && pid > 0, "a sandbox on a worker; the manager's engine (pid %ld)",
		    (long)pid))
		goto out;
	kill(pid, SIGTERM);
	t0 = sbx_monotonic_ms();
	while (kill(pid, 0) == 0 && sbx_monotonic_ms() - t0 < 60000)
		usleep(100000);
	tap_ok(kill(pid, 0) < 0, "the manager's engine stopped (%lld ms)",
	       (long long)(sbx_monotonic_ms() - t0));
	r = shell(m, sb[worker], "echo meanwhile", &res);
	tap_ok(r == 0 && res.exit_code == 0 && res.out.data && strstr(res.out.data, "meanwhile"),
	       "meanwhile the worker's sandbox runs a command");
	if (r == 0)
		sbx_run_result_release(&res);
	r = sbx_sandbox_create(m, OWNER, "mrnone", &fresh, &err);
	tap_ok(r < 0 && *err.msg, "meanwhile a create is refused, saying why: %s", err.msg);
	if (r == 0)
		sbx_sandbox_unref(fresh);
	sbx_error_clear(&err);
	tap_ok(provision(builddir) == 0, "tools/provision-engines brings the manager back");
	/* Swarm itself may replace the worker's task when its manager comes
	 * back (seen twice in the sanitizer's slower pass: the task's container
	 * killed, 137): then the server must say so, the sandbox dead from
	 * outside, and nothing else. */
	memset(&res, 0, sizeof(res));
	r = sbx_sandbox_run_shell(m, sb[worker], "echo after", 0, &res, &err);
	if (r == -ESRCH && strstr(err.msg, "killed"))
		tap_diag("Swarm replaced the worker's task as its manager came back: %s", err.msg);
	tap_ok((r == 0 && res.exit_code == 0 && res.out.data && strstr(res.out.data, "after")) ||
		   (r == -ESRCH && strstr(err.msg, "killed") && strstr(err.msg, "from outside")),
	       "after it the worker's sandbox still runs commands, or (Swarm replaced its "
	       "task) is said to be killed from outside (%d %s)",
	       r, err.msg);
	sbx_error_clear(&err);
	if (r == 0)
		sbx_run_result_release(&res);
	r = -1;
	t0 = sbx_monotonic_ms();
	/* The manager takes a while to lead again. */
	while (sbx_monotonic_ms() - t0 < 60000) {
		sbx_error_clear(&err);
		r = sbx_sandbox_create(m, OWNER, "mrafter", &fresh, &err);
		if (r == 0)
			break;
		usleep(500000);
	}
	tap_ok(r == 0, "and creates work again (%lld ms; %s)", (long long)(sbx_monotonic_ms() - t0),
	       err.msg);
	if (r == 0) {
		tap_ok(shell(m, fresh, "echo new", &res) == 0 && res.exit_code == 0,
		       "... the new sandbox runs commands");
		sbx_run_result_release(&res);
		sbx_sandbox_delete(m, OWNER, "mrafter", NULL);
		sbx_sandbox_unref(fresh);
	}
	r = sbx_manager_list(m, OWNER, &list, &n, &err);
	tap_ok(r == 0, "list_sandboxes answers (%s)", err.msg);
	for (size_t i = 0; r == 0 && i < n; i++)
		tap_diag("after the restart: %s %s on %s%s%s", list[i].name, list[i].status,
			 list[i].node ? list[i].node : "-", list[i].reason ? ": " : "",
			 list[i].reason ? list[i].reason : "");
	if (r == 0)
		sbx_sandbox_info_list_free(list, n);
out:
	for (int i = 0; i < 3; i++) {
		if (sb[i])
			sbx_sandbox_delete(m, OWNER, sbx_sandbox_name(sb[i]), NULL);
		sbx_sandbox_unref(sb[i]);
	}
}

/* An engine of the test's own on a unix socket that claims, in its
 * /info, to be node NODE and a manager of the cluster: what a worker taken
 * over could answer. It counts the /info requests it gets. */
struct fake_engine {
	int lfd;
	pthread_t thread;
	char info[512];
	atomic_int infos;
};

static void *fake_main(void *arg)
{
	struct fake_engine *f = arg;
	char req[4096], head[256];

	for (;;) {
		int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		const char *body = "{\"message\":\"no such thing here\"}";
		ssize_t n;

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* fake_stop shut the listener down */
		}
		n = read(c, req, sizeof(req) - 1);
		req[n > 0 ? n : 0] = '\0';
		if (strstr(req, "/info ")) {
			atomic_fetch_add(&f->infos, 1);
			body = f->info;
		} else if (strstr(req, "/version ")) {
			body = "{\"ApiVersion\":\"1.41\",\"Version\":\"20.10.24\"}";
		}
		snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: "
			 "%zu\r\nConnection: close\r\n\r\n",
			 strchr(body, ':') && !strstr(body, "message") ? "200 OK" : "404 Not Found",
			 strlen(body));
		if (write(c, head, strlen(head)) < 0 || write(c, body, strlen(body)) < 0)
			tap_diag("the fake engine could not answer");
		close(c);
	}
}

static bool fake_start(struct fake_engine *f, const char *path, const char *node,
		       const char *cluster)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(f->info, sizeof(f->info),
		 "{\"Swarm\":{\"NodeID\":\"%s\",\"ControlAvailable\":true,\"Cluster\":{\"ID\":"
		 "\"%s\"}}}",
		 node, cluster);
	atomic_init(&f->infos, 0);
	if (strlen(path) >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(f->lfd, 16) < 0 || pthread_create(&f->thread, NULL, fake_main, f) != 0) {
		if (f->lfd >= 0)
			close(f->lfd);
		return false;
	}
	return true;
}

static void fake_stop(struct fake_engine *f, const char *path)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	unlink(path);
}

/* The cluster's id, as the manager says. */
static char *cluster_id(void)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *id;

	if (sbx_engine_json(engine, "GET", NULL, NULL, &j, NULL, "/info") < 0)
		return NULL;
	id = sbx_json_str(sbx_json_path(sbx_json_path(j, "Swarm", NULL), "Cluster", NULL), "ID");
	return id ? strdup(id) : NULL;
}

/* A worker that claims to be a manager is never followed: a server that
 * reached a worker (here through a label naming an engine of the test's
 * own that says, in its /info, it is that worker and a manager of the
 * cluster, as a worker taken over could) and then loses its manager
 * fails its calls rather than sending them to the worker. Only nodes the
 * manager listed as managers are asked. */
static void test_worker_not_followed(char **nodes)
{
	struct sbx_error err = SBX_ERROR_INIT;
	_cleanup_free_ char *mgr = manager_node(), *cluster = cluster_id(), *label = NULL;
	char fpath[128], furl[160], rpath[128], rurl[160], state[32] = "", sock[512] = "";
	struct sbx_container_summary *cs = NULL;
	struct tcp_relay *relay = NULL;
	struct fake_engine fake;
	const char *worker = NULL;
	sbx_engine *e = NULL, *wh = NULL;
	size_t n = 0;
	int r, asked;

	for (int i = 0; i < SPREAD && !worker; i++)
		if (nodes[i] && mgr && strcmp(nodes[i], mgr) != 0)
			worker = nodes[i];
	if (engine_url && strncmp(engine_url, "unix://", 7) == 0)
		snprintf(sock, sizeof(sock), "%s", engine_url + 7);
	label = worker ? node_label(worker, state, sizeof(state)) : NULL;
	snprintf(fpath, sizeof(fpath), "/tmp/sbx-swarm-fake-%ld.sock", (long)getpid());
	snprintf(furl, sizeof(furl), "unix://%s", fpath);
	snprintf(rpath, sizeof(rpath), "/tmp/sbx-swarm-mgr2-%ld.sock", (long)getpid());
	snprintf(rurl, sizeof(rurl), "unix://%s", rpath);
	unlink(rpath);
	if (!tap_ok(worker && label && cluster && *sock &&
			fake_start(&fake, fpath, worker, cluster),
		    "an engine that claims to be worker %s and a manager", worker ? worker : "-"))
		return;
	r = unix_relay_new(rpath, sock, &relay);
	if (r == 0)
		r = sbx_engine_open(
		    &(struct sbx_engine_config){.type = "swarm", .url = rurl, .tls = fixture_tls()},
		    &e, &err);
	if (!tap_ok(r == 0 && sbx_engine_negotiate(e, &err) == 0,
		    "a cluster handle through a relay to the manager (%s)", err.msg))
		goto out;
	/* Only the worker reached, through the label naming the fake. */
	tap_ok(set_label(worker, furl), "the worker's label names the fake engine");
	r = swarm_node_engine(e, worker, &wh, &err);
	tap_ok(r == 0, "the handle reaches the worker there (%s)", err.msg);
	tap_ok(set_label(worker, label), "the worker's label is set right again");
	relay = tcp_relay_free(relay);
	asked = atomic_load(&fake.infos);
	sbx_error_clear(&err);
	r = sbx_container_list(e, (const struct sbx_kv[]){{SBX_LABEL_INSTANCE, run_inst}}, 1, &cs,
			       &n, &err);
	tap_ok(r == -ECONNREFUSED, "with the manager gone, a call fails (%s)", err.msg);
	if (r == 0)
		sbx_container_list_free(cs, n);
	tap_is_str(sbx_engine_url(e), rurl, "... and is not sent to the worker");
	tap_is_int((long)(atomic_load(&fake.infos) - asked), 0,
		   "the worker was not even asked whether it is a manager");
out:
	tcp_relay_free(relay);
	unlink(rpath);
	sbx_engine_free(e);
	fake_stop(&fake, fpath);
}

/* The manager the server was given gone for good: a server whose
 * engine.socket is a relay to the manager's socket, stopped while it runs
 * (every connection cut, new ones refused), follows another manager of
 * the cluster, found among the nodes it reached by their labels (here
 * node 1's own socket, the same cluster's manager): creates, lists, calls
 * and deletes go on with no restart, and the handle now speaks to that
 * manager. */
static void test_manager_gone(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	_cleanup_free_ char *mgr = manager_node(), *label = NULL;
	char path[128], url[160], state[32] = "", sock[512] = "";
	struct sbx_sandbox_info *list = NULL;
	struct tcp_relay *relay = NULL;
	struct test_manager x;
	sbx_sandbox *sb = NULL;
	sbx_engine *e = NULL, **nodes = NULL;
	sbx_manager *m;
	size_t n = 0;
	int r;

	label = mgr ? node_label(mgr, state, sizeof(state)) : NULL;
	if (engine_url && strncmp(engine_url, "unix://", 7) == 0)
		snprintf(sock, sizeof(sock), "%s", engine_url + 7);
	snprintf(path, sizeof(path), "/tmp/sbx-swarm-manager-%ld.sock", (long)getpid());
	snprintf(url, sizeof(url), "unix://%s", path);
	unlink(path);
	r = label && *sock ? unix_relay_new(path, sock, &relay) : -ENOENT;
	if (!tap_ok(r == 0, "a relay to the manager's socket at %s (%s); its label %s", path,
		    strerror(-r), label ? label : "-"))
		return;
	r = sbx_engine_open(
	    &(struct sbx_engine_config){.type = "swarm", .url = url, .tls = fixture_tls()}, &e,
	    &err);
	if (!tap_ok(r == 0 && sbx_engine_negotiate(e, &err) == 0, "a cluster handle there (%s)",
		    err.msg))
		goto out;
	/* The nodes reached, as the server's start reaches them all. */
	tap_ok(swarm_nodes(e, &nodes, NULL, &n, &err) == 0 && n == 3,
	       "its three nodes reached (%s)", err.msg);
	free(nodes);
	m = test_manager_open(&x, "follow", (const char *const[]){"sandbox.pool_size=0", NULL}, e);
	relay = tcp_relay_free(relay);
	tap_ok(relay == NULL, "the relay is stopped: its connections cut, new ones refused");
	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, OWNER, "follow", &sb, &err);
	tap_ok(r == 0, "a create after it works (%s)", err.msg);
	tap_is_str(sbx_engine_url(e), label, "... through the manager named by its label");
	if (r == 0) {
		tap_ok(shell(m, sb, "echo followed", &res) == 0 && res.exit_code == 0,
		       "... and the sandbox runs commands");
		sbx_run_result_release(&res);
	}
	r = sbx_manager_list(m, OWNER, &list, &n, &err);
	tap_ok(r == 0 && n == 1, "list_sandboxes answers (%zu; %s)", n, err.msg);
	if (r == 0)
		sbx_sandbox_info_list_free(list, n);
	sbx_error_clear(&err);
	tap_ok(sbx_sandbox_delete(m, OWNER, "follow", &err) == 0, "delete works (%s)", err.msg);
	sbx_sandbox_unref(sb);
	test_manager_close(&x, "the following server leaves nothing");
out:
	tcp_relay_free(relay);
	unlink(path);
	sbx_engine_free(e);
}

int main(int argc, char **argv)
{
	struct test_manager x;
	sbx_sandbox *sb[SPREAD] = {0};
	char *nodes[SPREAD] = {0};
	sbx_manager *m;

	fixture_init(argc, argv, "swarm");
	/* No pool: every create here asks the cluster itself. */
	m = test_manager_open(&x, "swarm", (const char *const[]){"sandbox.pool_size=0", NULL},
			      NULL);
	run_inst = x.inst;
	test_verify();
	test_spread(m, sb, nodes);
	test_wrong_label(m, nodes);
	test_node_loss(m, sb, nodes);
	test_manager_restart(m);
	test_manager_gone();
	test_worker_not_followed(nodes);
	for (int i = 0; i < SPREAD; i++) {
		if (sb[i])
			sbx_sandbox_delete(m, OWNER, sbx_sandbox_name(sb[i]), NULL);
		sbx_sandbox_unref(sb[i]);
		free(nodes[i]);
	}
	sbx_sandbox_delete(m, OWNER, "after", NULL);
	test_manager_close(&x, "the swarm suite");
	return fixture_end();
}
