/* SPDX-License-Identifier: MIT */
/*
 * Bursts of create_sandbox (issue 30), through the manager as the server
 * makes it, on one engine. With the default pool settings (sandbox.pool_size
 * 16, refilled pool_fill at once): the p50 of a create served from a full
 * pool, one at a time; 16 creates at once and 64 at once (threads released
 * together, the pool full when they start), each burst's wall time until
 * the last is answered, the p50 and p90 of its calls, and how many the pool
 * served. Then a pool of 2 that grows (pool_size 2, pool_max 16: a server
 * for one agent): 16 at once at that size, the time the pool takes to grow
 * after them, and 16 at once again. Then the time to fill a pool of 16 from
 * empty with 1, 2 and 4 started at once; last the stop of a manager with 16
 * sandboxes and its pool. Every sandbox made is deleted; any failed create
 * fails the bench.
 *
 * Usage: bench-burst TYPE SOCKET IMAGE [ROUNDS]
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#define OWNER "bench"
#define BURST_MAX 64

static const char *type;

struct burst {
	sbx_manager *m;
	pthread_barrier_t go;
	double t0;
	double ms[BURST_MAX];
	char ids[BURST_MAX][SBX_SANDBOX_ID_MAX + 1];
	int failed;
	char why[SBX_ERROR_MSG_MAX];
	pthread_mutex_t lock;
};

struct slot {
	struct burst *b;
	int i;
};

static void *create_one(void *arg)
{
	struct slot *s = arg;
	struct burst *b = s->b;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *sb = NULL;
	int r;

	pthread_barrier_wait(&b->go);
	r = sbx_sandbox_create(b->m, OWNER, NULL, &sb, &err);
	b->ms[s->i] = now_ms() - b->t0;
	if (r < 0) {
		pthread_mutex_lock(&b->lock);
		if (!b->failed++)
			snprintf(b->why, sizeof(b->why), "%s", err.msg);
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	snprintf(b->ids[s->i], sizeof(b->ids[s->i]), "%s", sbx_sandbox_id(sb));
	sbx_sandbox_unref(sb);
	return NULL;
}

static void *delete_one(void *arg)
{
	struct slot *s = arg;
	struct sbx_error err = SBX_ERROR_INIT;

	if (s->b->ids[s->i][0] && sbx_sandbox_delete(s->b->m, OWNER, s->b->ids[s->i], &err) < 0) {
		fprintf(stderr, "bench-burst: %s: delete %s: %s\n", type, s->b->ids[s->i], err.msg);
		__atomic_add_fetch(&s->b->failed, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* N creates at once, then N deletes at once: 0, or -1 when any failed. */
static int burst(sbx_manager *m, int n, bool keep, double *ret_wall, double *ret_p50,
		 double *ret_p90, uint64_t *ret_pooled)
{
	static struct burst b;
	struct slot slots[BURST_MAX];
	pthread_t t[BURST_MAX];
	struct sbx_pool_stats before, after;
	double wall = 0;

	memset(&b, 0, sizeof(b));
	b.m = m;
	pthread_mutex_init(&b.lock, NULL);
	pthread_barrier_init(&b.go, NULL, (unsigned)n + 1);
	sbx_manager_pool_stats(m, &before);
	for (int i = 0; i < n; i++) {
		slots[i] = (struct slot){&b, i};
		pthread_create(&t[i], NULL, create_one, &slots[i]);
	}
	b.t0 = now_ms();
	pthread_barrier_wait(&b.go);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	sbx_manager_pool_stats(m, &after);
	for (int i = 0; i < n; i++)
		if (b.ms[i] > wall)
			wall = b.ms[i];
	*ret_wall = wall;
	*ret_pooled = after.taken - before.taken;
	*ret_p90 = quantile(b.ms, (size_t)n, 0.9);
	*ret_p50 = quantile(b.ms, (size_t)n, 0.5);
	if (b.failed)
		fprintf(stderr, "bench-burst: %s: %d of %d creates failed: %s\n", type, b.failed, n,
			b.why);
	for (int i = 0; !keep && i < n; i++)
		pthread_create(&t[i], NULL, delete_one, &slots[i]);
	for (int i = 0; !keep && i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&b.go);
	pthread_mutex_destroy(&b.lock);
	return b.failed ? -1 : 0;
}

/* A manager of its own on E: the defaults, then LINES (NULL-ended), its
 * settings in FS (released by the caller after the manager). */
static sbx_manager *manager_with(sbx_engine *e, struct sbx_settings *fs, const char *const *lines,
				 struct sbx_error *err)
{
	sbx_manager *m = NULL;
	int r = sbx_settings_init(fs);

	for (const char *const *l = lines; r >= 0 && *l; l++)
		r = sbx_settings_set(fs, *l, err);
	if (r >= 0)
		r = bench_tls(&(struct sbx_engine_config){0}, fs, err);
	if (r >= 0 && (sbx_manager_new(fs, e, &m, err) < 0 || sbx_manager_recover(m, err) < 0))
		m = sbx_manager_free(m);
	return m;
}

int main(int argc, char **argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings settings;
	sbx_engine *e = NULL;
	sbx_manager *m = NULL;
	char inst[96], image[512];
	int rounds = argc > 4 ? atoi(argv[4]) : 5, status = 1;
	bool have_settings = false;
	double pooled_ms[32], delete_ms[32];

	if (argc < 4 || rounds < 1 || rounds > 32) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE [ROUNDS (1..32)]\n", argv[0]);
		return 2;
	}
	type = argv[1];
	signal(SIGPIPE, SIG_IGN);
	have_settings = true;
	if (bench_engine("bench-burst", type, argv[2], &settings, &e) < 0)
		goto out;
	snprintf(inst, sizeof(inst), "server.instance=bench-burst-%ld", (long)getpid());
	snprintf(image, sizeof(image), "sandbox.image=%s", argv[3]);
	{
		/* The defaults but the disk quota (the bench engines have no
		 * quota-capable storage) and room for 64 at once. */
		const char *const lines[] = {inst, image, "sandbox.disk=0",
					     "sandbox.max_sandboxes=80", NULL};
		for (const char *const *l = lines; *l; l++)
			if (sbx_settings_set(&settings, *l, &err) < 0) {
				fprintf(stderr, "bench-burst: %s: %s\n", *l, err.msg);
				goto out;
			}
	}
	if (sbx_manager_new(&settings, e, &m, &err) < 0 || sbx_manager_recover(m, &err) < 0) {
		fprintf(stderr, "bench-burst: %s: %s\n", type, err.msg);
		goto out;
	}

	/* A create from a full pool, one at a time. */
	for (int i = 0; i < rounds; i++) {
		sbx_sandbox *sb = NULL;
		double t0;
		int r;

		if (bench_pool_full(m, "bench-burst", type) < 0)
			goto out;
		t0 = now_ms();
		r = sbx_sandbox_create(m, OWNER, NULL, &sb, &err);
		pooled_ms[i] = now_ms() - t0;
		if (r < 0) {
			fprintf(stderr, "bench-burst: %s: create: %s\n", type, err.msg);
			goto out;
		}
		{
			char id[SBX_SANDBOX_ID_MAX + 1];
			snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sb));
			sbx_sandbox_unref(sb);
			t0 = now_ms();
			r = sbx_sandbox_delete(m, OWNER, id, &err);
			delete_ms[i] = now_ms() - t0;
			if (r < 0) {
				fprintf(stderr, "bench-burst: %s: delete: %s\n", type, err.msg);
				goto out;
			}
		}
	}
	printf("# bursts of create_sandbox, the default pool (pool_size %lld, pool_max %lld, "
	       "pool_fill %lld); ms\n",
	       (long long)settings.sandbox.pool_size, (long long)settings.sandbox.pool_max,
	       (long long)settings.sandbox.pool_fill);
	printf("%-8s %-28s %10.1f   (p50 of %d, one at a time)\n", type, "create from the pool",
	       quantile(pooled_ms, (size_t)rounds, 0.5), rounds);
	fflush(stdout);
	for (int k = 0; k < 2; k++) {
		const int n = k ? 64 : 16;
		double wall, p50, p90;
		uint64_t pooled;

		if (bench_pool_full(m, "bench-burst", type) < 0 ||
		    burst(m, n, false, &wall, &p50, &p90, &pooled) < 0)
			goto out;
		printf("%-8s %-28s %10.1f   (p50 %.1f, p90 %.1f; %" PRIu64 " from the pool)\n",
		       type, k ? "64 at once" : "16 at once", wall, p50, p90, pooled);
		fflush(stdout);
	}
	/* A pool of 2 that grows after the creates that found it empty. */
	{
		char ginst[128];
		snprintf(ginst, sizeof(ginst), "%s-grow", inst);
		const char *const lines[] = {
		    ginst, image, "sandbox.disk=0", "sandbox.pool_size=2", "sandbox.pool_max=16",
		    NULL};
		struct sbx_settings gs;
		struct sbx_pool_stats ps;
		sbx_manager *gm;
		int r;

		/* The default pool refilled first: its refill would take the
		 * engine from the bursts below. */
		if (bench_pool_full(m, "bench-burst", type) < 0)
			goto out;
		gm = manager_with(e, &gs, lines, &err);
		r = gm ? 0 : -1;

		printf("# a pool of 2 that grows (pool_size 2, pool_max 16)\n");
		for (int k = 0; r >= 0 && k < 2; k++) {
			double wall, p50, p90, t0;
			uint64_t pooled;

			r = bench_pool_full(gm, "bench-burst", type);
			if (r >= 0)
				r = burst(gm, 16, false, &wall, &p50, &p90, &pooled);
			if (r < 0)
				break;
			printf("%-8s %-28s %10.1f   (p50 %.1f, p90 %.1f; %" PRIu64
			       " from the pool)\n",
			       type, k ? "16 at once, grown" : "16 at once, pool of 2", wall, p50,
			       p90, pooled);
			fflush(stdout);
			if (k)
				break;
			/* The pool grows after the misses: how long until it is full. */
			t0 = now_ms();
			r = bench_pool_full(gm, "bench-burst", type);
			if (r < 0)
				break;
			sbx_manager_pool_stats(gm, &ps);
			printf("%-8s %-28s %10.1f   (to %zu, %lld at once, after the deletes)\n",
			       type, "the pool grows", now_ms() - t0, ps.size,
			       (long long)gs.sandbox.pool_fill);
			fflush(stdout);
		}
		sbx_manager_free(gm);
		sbx_settings_release(&gs);
		if (r < 0) {
			fprintf(stderr, "bench-burst: %s: the pool of 2: %s\n", type,
				err.msg[0] ? err.msg : "failed");
			goto out;
		}
	}
	/* A pool of 16 filled from empty, 1, 2 and 4 containers started at
	 * once (a manager of its own each): what sandbox.pool_fill buys. */
	for (int f = 1; f <= 4; f *= 2) {
		char fill[64], finst[128];
		snprintf(fill, sizeof(fill), "sandbox.pool_fill=%d", f);
		snprintf(finst, sizeof(finst), "%s-fill%d", inst, f);
		const char *const lines[] = {
		    finst, image, "sandbox.disk=0", "sandbox.pool_size=16", "sandbox.pool_max=0",
		    fill,  NULL};
		struct sbx_settings fs;
		double t0 = now_ms(), ms;
		sbx_manager *fm = manager_with(e, &fs, lines, &err);
		int r = fm ? bench_pool_full(fm, "bench-burst", type) : -1;

		ms = now_ms() - t0;
		sbx_manager_free(fm);
		sbx_settings_release(&fs);
		if (r < 0) {
			fprintf(stderr, "bench-burst: %s: pool_fill=%d: %s\n", type, f, err.msg);
			goto out;
		}
		snprintf(fill, sizeof(fill), "fill 16, %d at once", f);
		printf("%-8s %-28s %10.1f   (%.0f ms a container)\n", type, fill, ms, ms / 16);
		fflush(stdout);
	}
	/* The stop (sbx_manager_free with sandbox.remove_on_exit) of a server
	 * with 16 sandboxes and its pool, against removing them one by one. */
	{
		double wall, p50, p90, t0, one = quantile(delete_ms, (size_t)rounds, 0.5);
		uint64_t pooled;
		struct sbx_pool_stats ps;
		size_t n;

		if (bench_pool_full(m, "bench-burst", type) < 0 ||
		    burst(m, 16, true, &wall, &p50, &p90, &pooled) < 0 ||
		    bench_pool_full(m, "bench-burst", type) < 0)
			goto out;
		sbx_manager_pool_stats(m, &ps);
		n = 16 + ps.ready;
		t0 = now_ms();
		m = sbx_manager_free(m);
		wall = now_ms() - t0;
		printf("%-8s %-28s %10.1f   (%zu containers; one delete %.1f: %.2fx of one by "
		       "one)\n",
		       type, "stop with 16 sandboxes", wall, n, one, wall / (one * (double)n));
	}
	status = 0;
out:
	sbx_manager_free(m);
	if (have_settings)
		sbx_settings_release(&settings);
	sbx_engine_free(e);
	return status;
}
