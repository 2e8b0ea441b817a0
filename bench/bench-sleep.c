/* SPDX-License-Identifier: MIT */
/*
 * Sleep and wake (issue 28), through the manager as the server makes it,
 * on one engine. In one run, milliseconds:
 *   - print(1) answered in an awake sandbox (its interpreter up): the floor;
 *   - a cold create (sandbox.pool_size = 0) until its first print(1);
 *   - a create from a full pool (a second manager, pool_size 2) until its
 *     first print(1);
 *   - a sleeping sandbox until its first print(1) answered (the wake as a
 *     client sees it), p50 and p99 over ROUNDS sandboxes, and where that
 *     time goes: the wake alone (sbx_sandbox_wake: the container's start and
 *     its name's mark taken off) and then the first print(1) (the
 *     interpreter's start), measured on other sandboxes of the same run;
 *   - memory: N sandboxes idle (each ran print(1)) and then asleep, as the
 *     engine's stats tell it (the sum over their containers; a stopped
 *     container has none), with the running containers counted.
 * Every sandbox made is deleted; any failed step fails the bench.
 *
 * Usage: bench-sleep TYPE SOCKET IMAGE [ROUNDS (2..100, 20)] [N (1..100, 100)]
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-util.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#define OWNER "bench"
#define MAX 100

static const char *type;
static sbx_engine *engine;

static int fail(const char *what, const struct sbx_error *err)
{
	fprintf(stderr, "bench-sleep: %s: %s: %s\n", type, what, err->msg);
	return -1;
}

/* print(1) in SB: 0, or -1 said. */
static int print1(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	int r = sbx_sandbox_run_python(m, sb, "print(1)", 0, &res, &err);

	if (r < 0)
		return fail("print(1)", &err);
	r = res.exit_code == 0 && res.out.data && strcmp(res.out.data, "1\n") == 0 ? 0 : -1;
	if (r < 0)
		fprintf(stderr, "bench-sleep: %s: print(1) said %s%s\n", type,
			res.out.data ? res.out.data : "", res.err.data ? res.err.data : "");
	sbx_run_result_release(&res);
	return r;
}

/* A manager of this run's own: INSTANCE-SUFFIX, pool of POOL. */
static sbx_manager *manager(struct sbx_settings *s, const char *image, const char *suffix, int pool)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char inst[96], img[512], size[64];
	sbx_manager *m = NULL;

	snprintf(inst, sizeof(inst), "server.instance=bench-sleep-%ld-%s", (long)getpid(), suffix);
	snprintf(img, sizeof(img), "sandbox.image=%s", image);
	snprintf(size, sizeof(size), "sandbox.pool_size=%d", pool);
	{
		/* No reaper (the bench puts sandboxes to sleep itself), no disk
		 * quota (the bench engines have no quota-capable storage), room
		 * for N. */
		const char *const lines[] = {inst,
					     img,
					     size,
					     "sandbox.disk=0",
					     "sandbox.idle_timeout=0s",
					     "sandbox.max_lifetime=0s",
					     "sandbox.usage_interval=0s",
					     "sandbox.max_sandboxes=100",
					     NULL};
		for (const char *const *l = lines; *l; l++)
			if (sbx_settings_set(s, *l, &err) < 0) {
				fail(*l, &err);
				return NULL;
			}
	}
	if (sbx_manager_new(s, engine, &m, &err) < 0 || sbx_manager_recover(m, &err) < 0) {
		fail("manager", &err);
		sbx_manager_free(m);
		return NULL;
	}
	return m;
}

/* Creates a sandbox of M (*RET) and runs print(1): its time, or -1. */
static double create_print(sbx_manager *m, sbx_sandbox **ret)
{
	struct sbx_error err = SBX_ERROR_INIT;
	double t0 = now_ms();

	if (sbx_sandbox_create(m, OWNER, NULL, ret, &err) < 0)
		return fail("create", &err);
	if (print1(m, *ret) < 0)
		return -1;
	return now_ms() - t0;
}

static void delete_all(sbx_manager *m, sbx_sandbox **sbs, int n)
{
	for (int i = 0; i < n; i++) {
		struct sbx_error err = SBX_ERROR_INIT;
		if (sbs[i] && sbx_sandbox_delete(m, OWNER, sbx_sandbox_id(sbs[i]), &err) < 0)
			fail("delete", &err);
		sbs[i] = sbx_sandbox_unref(sbs[i]);
	}
}

/* Puts the N sandboxes of SBS to sleep: 0, or -1 said. */
static int sleep_all(sbx_sandbox **sbs, int n)
{
	for (int i = 0; i < n; i++) {
		struct sbx_error err = SBX_ERROR_INIT;
		if (sbx_sandbox_sleep(sbs[i], &err) < 0)
			return fail("sleep", &err);
	}
	return 0;
}

/* The memory the engine's stats give for the containers of instance INST,
 * summed, and how many of them run. */
static int memory_of(const char *inst, uint64_t *ret_bytes, size_t *ret_running)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}};
	struct sbx_container_summary *cs = NULL;
	struct sbx_error err = SBX_ERROR_INIT;
	size_t n = 0;

	*ret_bytes = 0;
	*ret_running = 0;
	if (sbx_container_list(engine, want, 1, &cs, &n, &err) < 0)
		return fail("list", &err);
	for (size_t i = 0; i < n; i++) {
		struct sbx_stats st = {0};
		if (!cs[i].running)
			continue;
		(*ret_running)++;
		if (sbx_container_stats(engine, cs[i].id, &st, NULL) >= 0)
			*ret_bytes += st.memory_usage_bytes;
	}
	sbx_container_list_free(cs, n);
	return 0;
}

int main(int argc, char **argv)
{
	static sbx_sandbox *sbs[MAX];
	static double awake[MAX], cold[MAX], pooled[MAX], total[MAX], wake[MAX], first[MAX];
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s1, s2;
	sbx_manager *m = NULL, *mp = NULL;
	int rounds = argc > 4 ? atoi(argv[4]) : 20, n = argc > 5 ? atoi(argv[5]) : 100;
	int status = 1, made = 0;
	char inst[96];
	uint64_t idle_bytes = 0, asleep_bytes = 0;
	size_t idle_running = 0, asleep_running = 0;

	if (argc < 4 || rounds < 2 || rounds > MAX || n < 1 || n > MAX) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE [ROUNDS (2..%d)] [N (1..%d)]\n",
			argv[0], MAX, MAX);
		return 2;
	}
	type = argv[1];
	signal(SIGPIPE, SIG_IGN);
	if (bench_engine("bench-sleep", type, argv[2], &s1, &engine) < 0) {
		sbx_settings_release(&s1);
		return 1;
	}
	if (!sbx_engine_restart_keeps(engine)) {
		printf("# %s: sandboxes do not sleep on this engine\n", type);
		status = 0;
		goto out_engine;
	}
	sbx_settings_init(&s2);
	m = manager(&s1, argv[3], "cold", 0);
	mp = m ? manager(&s2, argv[3], "pool", 2) : NULL;
	if (!mp)
		goto out;

	/* Cold creates, each to its first print(1), then print(1) awake. */
	for (int i = 0; i < rounds; i++, made++)
		if ((cold[i] = create_print(m, &sbs[i])) < 0)
			goto out;
	for (int i = 0; i < rounds; i++) {
		double t0 = now_ms();
		if (print1(m, sbs[i]) < 0)
			goto out;
		awake[i] = now_ms() - t0;
	}
	/* Asleep, then each woken by its first print(1); half first woken
	 * alone (the wake's own part), then asked print(1). */
	if (sleep_all(sbs, rounds) < 0)
		goto out;
	for (int i = 0; i < rounds; i++) {
		double t0 = now_ms();
		if (print1(m, sbs[i]) < 0)
			goto out;
		total[i] = now_ms() - t0;
	}
	if (sleep_all(sbs, rounds) < 0)
		goto out;
	for (int i = 0; i < rounds; i++) {
		bool woke = false;
		double t0 = now_ms(), t1;
		if (sbx_sandbox_wake(m, sbs[i], &woke, &err) < 0 || !woke) {
			fail("wake", &err);
			goto out;
		}
		t1 = now_ms();
		if (print1(m, sbs[i]) < 0)
			goto out;
		wake[i] = t1 - t0;
		first[i] = now_ms() - t1;
	}
	delete_all(m, sbs, made);
	made = 0;
	/* Creates from a full pool, each to its first print(1). */
	for (int i = 0; i < rounds; i++) {
		sbx_sandbox *sb = NULL;
		if (bench_pool_full(mp, "bench-sleep", type) < 0 ||
		    (pooled[i] = create_print(mp, &sb)) < 0) {
			sbx_sandbox_unref(sb);
			goto out;
		}
		delete_all(mp, &sb, 1);
	}

	printf("# sleep and wake on %s, ms to print(1) answered (p50, p99 of %d)\n", type, rounds);
	printf("%-8s %-34s %8.1f %8.1f\n", type, "awake (interpreter up)",
	       quantile(awake, (size_t)rounds, 0.5), quantile(awake, (size_t)rounds, 0.99));
	printf("%-8s %-34s %8.1f %8.1f\n", type, "asleep: wake + first print(1)",
	       quantile(total, (size_t)rounds, 0.5), quantile(total, (size_t)rounds, 0.99));
	printf("%-8s %-34s %8.1f %8.1f\n", type, "  of it: wake (start, unmark)",
	       quantile(wake, (size_t)rounds, 0.5), quantile(wake, (size_t)rounds, 0.99));
	printf("%-8s %-34s %8.1f %8.1f\n", type, "  of it: first print(1) (interp.)",
	       quantile(first, (size_t)rounds, 0.5), quantile(first, (size_t)rounds, 0.99));
	printf("%-8s %-34s %8.1f %8.1f\n", type, "create from the pool + print(1)",
	       quantile(pooled, (size_t)rounds, 0.5), quantile(pooled, (size_t)rounds, 0.99));
	printf("%-8s %-34s %8.1f %8.1f\n", type, "cold create + print(1)",
	       quantile(cold, (size_t)rounds, 0.5), quantile(cold, (size_t)rounds, 0.99));
	fflush(stdout);

	/* Memory: N idle (their interpreters up), then N asleep. */
	for (int i = 0; i < n; i++, made++)
		if (create_print(m, &sbs[i]) < 0)
			goto out;
	snprintf(inst, sizeof(inst), "bench-sleep-%ld-cold", (long)getpid());
	if (memory_of(inst, &idle_bytes, &idle_running) < 0)
		goto out;
	if (sleep_all(sbs, n) < 0)
		goto out;
	if (memory_of(inst, &asleep_bytes, &asleep_running) < 0)
		goto out;
	snprintf(inst, sizeof(inst), "memory of %d idle", n);
	printf("%-8s %-34s %8.1f MiB (%zu running)\n", type, inst, idle_bytes / 1048576.0,
	       idle_running);
	snprintf(inst, sizeof(inst), "memory of %d asleep", n);
	printf("%-8s %-34s %8.1f MiB (%zu running)\n", type, inst, asleep_bytes / 1048576.0,
	       asleep_running);
	printf("%-8s %-34s %8.2f   (wake + print(1) p50 / pooled create + print(1) p50)\n", type,
	       "ratio",
	       quantile(total, (size_t)rounds, 0.5) / quantile(pooled, (size_t)rounds, 0.5));
	status = idle_running == (size_t)n && asleep_running == 0 ? 0 : 1;
	if (status)
		fprintf(stderr, "bench-sleep: %s: %zu of %d idle ran, %zu asleep ran\n", type,
			idle_running, n, asleep_running);
out:
	delete_all(m, sbs, made);
	sbx_manager_free(mp);
	sbx_manager_free(m);
	sbx_settings_release(&s2);
out_engine:
	sbx_settings_release(&s1);
	sbx_engine_free(engine);
	return status;
}
