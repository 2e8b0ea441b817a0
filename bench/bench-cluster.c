/* SPDX-License-Identifier: MIT */
/*
 * Many sandboxes at once on one engine or a cluster (issue 27), through the
 * manager as the server makes them, without a pool (every create is a cold
 * one): N creates, CONCURRENCY at a time (the wall time, creates a second,
 * the p50 and p90 of one create); then the p50 of a command (`true`) in a
 * sandbox on each node (on one engine: its one node); then N deletes. Run
 * on docker and on the swarm in the same run (bench/run-bench), the figures
 * compare the cluster with one engine on the same machine. Every sandbox
 * made is deleted; any failed create fails the bench.
 *
 * Usage: bench-cluster TYPE SOCKET IMAGE [N (1..256)] [CONCURRENCY (1..32)]
 * With MCP_SANDBOX_TLS_DIR (ca.pem, cert.pem, key.pem) tcp:// nodes are
 * reached with TLS, as tools/provision-engines' swarm needs.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backends/engine-internal.h"
#include "bench-util.h"
#include "sbx/common.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#define OWNER "bench"
#define N_MAX 256
#define CONC_MAX 32
#define EXEC_ROUNDS 30

static const char *type;

struct run {
	sbx_manager *m;
	int n, conc;
	int next; /* the next create's index (under lock) */
	double t0;
	double ms[N_MAX];
	char ids[N_MAX][SBX_SANDBOX_ID_MAX + 1];
	int failed;
	char why[SBX_ERROR_MSG_MAX];
	pthread_mutex_t lock;
};

static int take(struct run *r)
{
	int i;

	pthread_mutex_lock(&r->lock);
	i = r->next < r->n ? r->next++ : -1;
	pthread_mutex_unlock(&r->lock);
	return i;
}

static void *creator(void *arg)
{
	struct run *r = arg;

	for (int i; (i = take(r)) >= 0;) {
		struct sbx_error err = SBX_ERROR_INIT;
		sbx_sandbox *sb = NULL;
		double t0 = now_ms();
		int rc = sbx_sandbox_create(r->m, OWNER, NULL, &sb, &err);

		r->ms[i] = now_ms() - t0;
		if (rc < 0) {
			pthread_mutex_lock(&r->lock);
			if (!r->failed++)
				snprintf(r->why, sizeof(r->why), "%s", err.msg);
			pthread_mutex_unlock(&r->lock);
			continue;
		}
		snprintf(r->ids[i], sizeof(r->ids[i]), "%s", sbx_sandbox_id(sb));
		sbx_sandbox_unref(sb);
	}
	return NULL;
}

static void *deleter(void *arg)
{
	struct run *r = arg;

	for (int i; (i = take(r)) >= 0;) {
		struct sbx_error err = SBX_ERROR_INIT;
		if (r->ids[i][0] && sbx_sandbox_delete(r->m, OWNER, r->ids[i], &err) < 0) {
			fprintf(stderr, "bench-cluster: %s: delete %s: %s\n", type, r->ids[i],
				err.msg);
			__atomic_add_fetch(&r->failed, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

/* All of R's work by R->conc threads of FN; its wall time in ms. */
static double in_parallel(struct run *r, void *(*fn)(void *))
{
	pthread_t t[CONC_MAX];
	double t0 = now_ms();

	r->next = 0;
	for (int i = 0; i < r->conc; i++)
		pthread_create(&t[i], NULL, fn, r);
	for (int i = 0; i < r->conc; i++)
		pthread_join(t[i], NULL);
	return now_ms() - t0;
}

/* The manager's own node id (swarm), or "" (one engine). */
static void manager_node(sbx_engine *e, char *out, size_t size)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *id = NULL;

	if (sbx_engine_json(e, "GET", NULL, NULL, &j, NULL, "/info") >= 0)
		id = sbx_json_str(sbx_json_path(j, "Swarm", NULL), "NodeID");
	snprintf(out, size, "%s", id ? id : "");
}

/* The p50 of EXEC_ROUNDS `true` in sandbox ID, in ms; -1 on a failure. */
static double exec_p50(sbx_manager *m, const char *id)
{
	struct sbx_error err = SBX_ERROR_INIT;
	double ms[EXEC_ROUNDS];
	sbx_sandbox *sb = NULL;

	if (sbx_sandbox_get(m, OWNER, id, &sb, &err) < 0) {
		fprintf(stderr, "bench-cluster: %s: %s: %s\n", type, id, err.msg);
		return -1;
	}
	for (int i = 0; i < EXEC_ROUNDS; i++) {
		struct sbx_run_result res = {0};
		double t0 = now_ms();
		int r = sbx_sandbox_run_shell(m, sb, "true", 0, &res, &err);

		ms[i] = now_ms() - t0;
		if (r < 0 || res.exit_code != 0) {
			fprintf(stderr, "bench-cluster: %s: true in %s: %s\n", type, id,
				r < 0 ? err.msg : "exit code not 0");
			sbx_run_result_release(&res);
			sbx_sandbox_unref(sb);
			return -1;
		}
		sbx_run_result_release(&res);
	}
	sbx_sandbox_unref(sb);
	return quantile(ms, EXEC_ROUNDS, 0.5);
}

/* A line per node: how many of the sandboxes it runs, and a command's
 * p50 in one of them. */
static int by_node(sbx_manager *m, const char *manager)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info *list = NULL;
	size_t n = 0;
	struct {
		const char *node, *id;
		int count;
	} nodes[16];
	size_t n_nodes = 0;
	int status = 0;

	if (sbx_manager_list(m, OWNER, &list, &n, &err) < 0) {
		fprintf(stderr, "bench-cluster: %s: list: %s\n", type, err.msg);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		const char *node = list[i].node ? list[i].node : "";
		size_t k = 0;
		while (k < n_nodes && strcmp(nodes[k].node, node) != 0)
			k++;
		if (k == n_nodes && n_nodes < SBX_ARRAY_SIZE(nodes))
			nodes[n_nodes++] = (typeof(nodes[0])){node, list[i].id, 0};
		if (k < n_nodes)
			nodes[k].count++;
	}
	for (size_t k = 0; k < n_nodes; k++) {
		double p50 = exec_p50(m, nodes[k].id);
		const char *role = !*nodes[k].node			 ? "the engine"
				   : strcmp(nodes[k].node, manager) == 0 ? "the manager"
									 : "a worker";
		char what[64];

		if (p50 < 0)
			status = -1;
		snprintf(what, sizeof(what), "command p50, %s", role);
		printf("%-8s %-28s %10.1f   (%.12s: %d sandboxes there)\n", type, what, p50,
		       *nodes[k].node ? nodes[k].node : "-", nodes[k].count);
	}
	sbx_sandbox_info_list_free(list, n);
	return status;
}

int main(int argc, char **argv)
{
	static struct run run;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings settings;
	sbx_engine *e = NULL;
	char inst[96], image[512], max[64], manager[64];
	int n = argc > 4 ? atoi(argv[4]) : 100, conc = argc > 5 ? atoi(argv[5]) : 8, status = 1;
	bool have_settings = false;
	double wall;

	if (argc < 4 || n < 1 || n > N_MAX || conc < 1 || conc > CONC_MAX) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE [N (1..%d)] [CONCURRENCY (1..%d)]\n",
			argv[0], N_MAX, CONC_MAX);
		return 2;
	}
	type = argv[1];
	signal(SIGPIPE, SIG_IGN);
	have_settings = true;
	if (bench_engine("bench-cluster", type, argv[2], &settings, &e) < 0)
		goto out;
	if (sbx_engine_negotiate(e, &err) < 0) {
		fprintf(stderr, "bench-cluster: %s: %s\n", type, err.msg);
		goto out;
	}
	manager_node(e, manager, sizeof(manager));
	snprintf(inst, sizeof(inst), "server.instance=bench-cluster-%ld", (long)getpid());
	snprintf(image, sizeof(image), "sandbox.image=%s", argv[3]);
	snprintf(max, sizeof(max), "sandbox.max_sandboxes=%d", n + 8);
	{
		/* No pool (every create a cold one), no disk quota (the bench
		 * engines have no quota-capable storage), room for N. */
		const char *const lines[] = {
		    inst, image, max, "sandbox.disk=0", "sandbox.pool_size=0", NULL};
		for (const char *const *l = lines; *l; l++)
			if (sbx_settings_set(&settings, *l, &err) < 0) {
				fprintf(stderr, "bench-cluster: %s: %s\n", *l, err.msg);
				goto out;
			}
	}
	if (sbx_manager_new(&settings, e, &run.m, &err) < 0 ||
	    sbx_manager_recover(run.m, &err) < 0) {
		fprintf(stderr, "bench-cluster: %s: %s\n", type, err.msg);
		goto out;
	}
	pthread_mutex_init(&run.lock, NULL);
	run.n = n;
	run.conc = conc;
	wall = in_parallel(&run, creator);
	printf("# %d sandboxes, %d creates at a time, no pool; ms\n", n, conc);
	printf("%-8s %-28s %10.1f   (%.2f creates/s; one create p50 %.1f, p90 %.1f)\n", type,
	       "all created", wall, wall > 0 ? n * 1000.0 / wall : 0, quantile(run.ms, n, 0.5),
	       quantile(run.ms, n, 0.9));
	fflush(stdout);
	if (run.failed)
		fprintf(stderr, "bench-cluster: %s: %d of %d creates failed: %s\n", type,
			run.failed, n, run.why);
	else if (by_node(run.m, manager) == 0)
		status = 0;
	fflush(stdout);
	wall = in_parallel(&run, deleter);
	printf("%-8s %-28s %10.1f   (%.2f deletes/s)\n", type, "all deleted", wall,
	       wall > 0 ? n * 1000.0 / wall : 0);
	if (run.failed)
		status = 1;
	pthread_mutex_destroy(&run.lock);
out:
	sbx_manager_free(run.m);
	if (have_settings)
		sbx_settings_release(&settings);
	sbx_engine_free(e);
	return status;
}
