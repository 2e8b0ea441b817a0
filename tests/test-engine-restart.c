/* SPDX-License-Identifier: MIT */
/*
 * An engine that stops and starts again under a running client:
 * tests/test-engine-restart TYPE [IMAGE [SHARED_URL]], against a private
 * engine of this test's own (tests/private-engine.h), never the shared ones
 * (SHARED_URL, the shared engine, is only read: Podman's storage is shared,
 * and the end checks that no container of the run is left in it).
 *
 * Sections, each a function on the globals below (the engine handle of the
 * sandbox fixture, opened once and kept across every restart, as a server
 * keeps its handle):
 *  - leftovers: a run whose owner died left a container; the next run's
 *    first start removes it;
 *  - stop (SIGTERM) and kill (SIGKILL) of the engine under a running
 *    container: the handle's ping fails while the engine is down and answers
 *    again once it is back; Docker (no live-restore) has stopped the
 *    container, which starts again; Podman's containers run under conmon,
 *    outside the service: it still runs, and execs through the new service;
 *  - cleanup: the engine no longer answers, its folder is gone, and (Podman)
 *    no container of the run is left in the shared storage.
 * A section with a sandbox manager across a restart fits between them: use
 * test_manager_open() of sandbox-fixture.h (its engine is the private one)
 * and, on Podman, private_engine_track_label() with the manager's instance.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "private-engine.h"
#include "sandbox-fixture.h"
#include "tap.h"

#define LABEL_TEST "org.mcp-sandbox.test"
#define LABEL_RUN "org.mcp-sandbox.test-run"

static struct private_engine pe;
/* Podman keeps its containers across a restart of the service; dockerd
 * (without live-restore) stops them when it stops or restarts after a crash. */
static bool survives;

static const char *const sleep_cmd[] = {"sleep", "infinity", NULL};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One of the engine calls of tests/private-engine.h as a check ("VERB the
 * TYPE engine NOTE"), with its time. */
static bool engine_call(int (*call)(struct private_engine *, struct sbx_error *), const char *verb,
			const char *note)
{
	struct sbx_error err = SBX_ERROR_INIT;
	bool ok = tap_call(call(&pe, &err), err.msg, "%s the %s engine%s", verb, pe.type, note);

	tap_diag("  in %.1f s", pe.seconds);
	return ok;
}

static bool answers(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	return sbx_engine_ping(engine, &err) == 0;
}

/* A labelled `sleep infinity` with no network, started; NULL (a failed check) if not. */
static char *start_sleeper(const char *what)
{
	struct sbx_kv labels[] = {
	    {LABEL_TEST, "1"},
	    {LABEL_RUN, instance},
	    {PRIVATE_ENGINE_LABEL, pe.dir},
	};
	/* Root: the image's user (uid 1000) shares RLIMIT_NPROC with every
	 * sandbox on the host, and a loaded test run exceeds it (the sleeper
	 * then dies at start with exit code 1). */
	struct sbx_container_spec spec = {
	    .image = image,
	    .cmd = sleep_cmd,
	    .labels = labels,
	    .n_labels = SBX_ARRAY_SIZE(labels),
	    .user = "0",
	    .network_mode = "none",
	};
	struct sbx_error err = SBX_ERROR_INIT;
	char *id = NULL;
	int r = sbx_container_create(engine, &spec, &id, &err);

	if (r >= 0)
		r = sbx_container_start(engine, id, &err);
	if (!tap_call(r, err.msg, "%s: a labelled sleep infinity runs", what)) {
		if (id)
			sbx_container_remove(engine, id, NULL);
		free(id);
		return NULL;
	}
	return id;
}

/* Inspect as a check; false when the call failed. */
static bool inspect(const char *id, struct sbx_container_info *info, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;

	memset(info, 0, sizeof(*info));
	return tap_call(sbx_container_inspect(engine, id, info, &err), err.msg, "%s: inspect",
			what);
}

static void remove_container(const char *id, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_container_info info = {0};

	tap_call(sbx_container_remove(engine, id, &err), err.msg, "%s: remove the container", what);
	tap_is_int(sbx_container_inspect(engine, id, &info, NULL), -ENOENT,
		   "%s: the container is gone", what);
	sbx_container_info_release(&info);
}

/* The owner of an "earlier run": a child that waits to be killed. */
static pid_t spawn_owner(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

/*
 * An earlier run of this DIR whose owner died without a cleanup left a
 * running container: the first start of the next run removes it (on Docker
 * with the whole data root, on Podman by the run's label), and the handle
 * answers on the new run's engine.
 */
static void test_leftovers(pid_t earlier_owner)
{
	struct sbx_container_info info = {0};
	char *id = start_sleeper("the earlier run");
	int r;

	kill(earlier_owner, SIGKILL);
	waitpid(earlier_owner, NULL, 0);
	pe.owner = 0; /* this process: the new run */
	if (!engine_call(private_engine_start, "start", " (a new run: the earlier one's goes)"))
		tap_bail("cannot start the private engine");
	tap_ok(answers(), "the handle answers on the new run's engine");
	if (id) {
		r = sbx_container_inspect(engine, id, &info, NULL);
		tap_is_int(r, -ENOENT, "the earlier run's container is gone");
		if (r == 0)
			tap_diag("  it is there, %s", info.status);
		sbx_container_info_release(&info);
	}
	free(id);
}

/*
 * DOWN (stop or kill) the engine under a running container and start it
 * again; the handle stays the same throughout.
 */
static void test_down_and_up(const char *how,
			     int (*down)(struct private_engine *, struct sbx_error *))
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_container_info info;
	char what[64], *id;

	snprintf(what, sizeof(what), "%s", how);
	id = start_sleeper(what);
	if (!id)
		return;
	if (inspect(id, &info, what) &&
	    !tap_ok(info.running, "%s: the container runs before", what))
		tap_diag("  status %s, exit code %d", info.status ? info.status : "?",
			 info.exit_code);
	sbx_container_info_release(&info);

	if (!engine_call(down, how, "")) {
		free(id);
		return;
	}
	{
		int r = sbx_engine_ping(engine, &err);
		tap_ok(r < 0, "%s: ping fails while the engine is down (%d: %s)", what, r, err.msg);
	}
	if (!engine_call(private_engine_start, "start", " again"))
		tap_bail("cannot start the private engine again");
	tap_ok(answers(), "%s: the same handle answers once the engine is back", what);

	if (inspect(id, &info, what)) {
		if (survives)
			tap_ok(info.running, "%s: the container still runs (status %s)", what,
			       info.status);
		else
			tap_ok(!info.running && info.status && strcmp(info.status, "exited") == 0,
			       "%s: the engine stopped the container (status %s)", what,
			       info.status);
	}
	sbx_container_info_release(&info);

	if (survives) {
		const char *const argv[] = {"echo", "alive", NULL};
		struct sbx_exec_spec spec = {.argv = argv, .timeout_ms = 30000};
		struct sbx_exec_result res = {0};
		if (tap_call(sbx_exec(engine, id, &spec, &res, &err), err.msg,
			     "%s: exec in the container through the new service", what))
			tap_is_str(res.out.data, "alive\n", "%s: the exec's output", what);
		sbx_exec_result_release(&res);
	} else if (tap_call(sbx_container_start(engine, id, &err), err.msg,
			    "%s: the stopped container starts again", what) &&
		   inspect(id, &info, what)) {
		tap_ok(info.running, "%s: and runs", what);
		sbx_container_info_release(&info);
	}
	remove_container(id, what);
	free(id);
}

/* ---- a sandbox manager across the restart ---- */

static bool wait_pool_stats(sbx_manager *m, bool (*done)(const struct sbx_pool_stats *),
			    struct sbx_pool_stats *st)
{
	/* 120 s: a bound on a hang, not a speed check. */
	for (int i = 0; i < 1200; i++) {
		sbx_manager_pool_stats(m, st);
		if (done(st))
			return true;
		usleep(100000);
	}
	return false;
}

static bool is_followed(const struct sbx_pool_stats *st)
{
	return st->followed;
}

static bool is_unfollowed(const struct sbx_pool_stats *st)
{
	return !st->followed;
}

static bool is_full(const struct sbx_pool_stats *st)
{
	return st->ready == 2 && st->filling == 0;
}

/* SB's reason in list_sandboxes (owned), once it has one; NULL after 60 s. */
static char *wait_reason(sbx_manager *m, sbx_sandbox *sb)
{
	for (int i = 0; i < 600; i++) {
		struct sbx_sandbox_info *list = NULL;
		size_t n = 0;
		char *reason = NULL;
		if (sbx_manager_list(m, "alice", &list, &n, NULL) == 0)
			for (size_t j = 0; j < n; j++)
				if (strcmp(list[j].id, sbx_sandbox_id(sb)) == 0 && list[j].reason)
					reason = strdup(list[j].reason);
		sbx_sandbox_info_list_free(list, n);
		if (reason)
			return reason;
		usleep(100000);
	}
	return NULL;
}

static bool run_ok(sbx_manager *m, sbx_sandbox *sb, const char *code, const char *want,
		   const char *what)
{
	struct sbx_run_result res = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	bool ok = tap_call(sbx_sandbox_run_python(m, sb, code, 60000, &res, &err), err.msg,
			   "%s: Python runs", what);

	if (ok) {
		ok = res.out.data && strcmp(res.out.data, want) == 0;
		tap_ok(ok, "%s: its output is %s", what, want);
	}
	sbx_run_result_release(&res);
	return ok;
}

/*
 * A sandbox manager (pool of 2) follows the engine's events while the
 * engine goes DOWN and comes back: it notices (pool_stats.followed), hands
 * out no pooled sandbox meanwhile, and once the engine is back: on Docker
 * the sandbox that stopped with the engine is listed dead with the reason
 * and a call on it says so, and the pool's containers that died are replaced
 * by live ones; on Podman the sandbox runs on and the pool is kept.
 */
static void test_manager(const char *how, int (*down)(struct private_engine *, struct sbx_error *))
{
	const char *const extra[] = {"sandbox.pool_size=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_manager *m;
	sbx_sandbox *before = NULL, *during = NULL, *after = NULL;
	char what[64], suffix[16];
	uint64_t taken;
	int r;

	snprintf(what, sizeof(what), "manager, %s", how);
	snprintf(suffix, sizeof(suffix), "m%s", how);
	m = test_manager_open(&tm, suffix, extra, NULL);
	if (survives &&
	    !tap_call(private_engine_track_label(&pe, SBX_LABEL_INSTANCE, tm.inst, &err), err.msg,
		      "%s: the run's containers are the instance's", what))
		goto out;
	recover(m);
	if (!tap_ok(wait_pool_stats(m, is_full, &st) && st.followed,
		    "%s: the pool fills, the engine followed", what))
		goto out;
	if (!tap_call(sbx_sandbox_create(m, "alice", "before", &before, &err), err.msg,
		      "%s: create a sandbox", what) ||
	    !run_ok(m, before, "x = 41\nprint(x + 1)", "42\n", what))
		goto out;
	wait_pool_stats(m, is_full, &st);
	taken = st.taken;

	if (!engine_call(down, how, " under the manager"))
		goto out;
	tap_ok(wait_pool_stats(m, is_unfollowed, &st), "%s: the manager notices the engine went",
	       what);
	r = sbx_sandbox_create(m, "alice", "during", &during, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r < 0 && !during && st.taken == taken,
	       "%s: meanwhile create hands out no pooled sandbox: %s", what, err.msg);
	sbx_sandbox_unref(during);
	if (!engine_call(private_engine_start, "start", " again under the manager"))
		tap_bail("cannot start the private engine again");
	tap_ok(wait_pool_stats(m, is_followed, &st), "%s: the manager follows the engine again",
	       what);

	if (!survives) {
		char *reason = wait_reason(m, before);
		/* A stopping dockerd kills its containers while the stream may still
		 * be open (then the reason is the kill itself); a killed one cannot. */
		tap_ok(reason && (strstr(reason, "while the server was not following the engine") ||
				  strstr(reason, "by the engine as it stopped")),
		       "%s: the sandbox that stopped with the engine is listed dead: %s", what,
		       reason ? reason : "(no reason)");
		free(reason);
		sbx_error_clear(&err);
		{
			struct sbx_run_result res = {0};
			r = sbx_sandbox_run_python(m, before, "print(x)", 60000, &res, &err);
			tap_ok(r == -ESRCH && strstr(err.msg, "no longer runs"),
			       "%s: a call on it says so: %s", what, err.msg);
			if (r == 0)
				sbx_run_result_release(&res);
		}
		tap_ok(wait_pool_stats(m, is_full, &st) && st.died >= 2,
		       "%s: the pool's dead containers are replaced (%" PRIu64 " died)", what,
		       st.died);
	} else {
		char *reason = NULL;
		tap_ok(wait_pool_stats(m, is_full, &st) && st.died == 0,
		       "%s: the pool's containers are kept (%" PRIu64 " died)", what, st.died);
		run_ok(m, before, "print(1 + 1)", "2\n", what);
		{
			struct sbx_sandbox_info *list = NULL;
			size_t n = 0;
			if (sbx_manager_list(m, "alice", &list, &n, NULL) == 0)
				for (size_t j = 0; j < n; j++)
					if (list[j].reason)
						reason = strdup(list[j].reason);
			sbx_sandbox_info_list_free(list, n);
		}
		tap_ok(!reason, "%s: no sandbox is listed dead (%s)", what,
		       reason ? reason : "none");
		free(reason);
	}
	sbx_manager_pool_stats(m, &st);
	taken = st.taken;
	if (tap_call(sbx_sandbox_create(m, "alice", "after", &after, &err), err.msg,
		     "%s: create after the restart", what)) {
		sbx_manager_pool_stats(m, &st);
		tap_ok(st.taken == taken + 1, "%s: from the pool", what);
		run_ok(m, after, "print(6 * 7)", "42\n", what);
	}
out:
	sbx_sandbox_unref(before);
	sbx_sandbox_unref(after);
	test_manager_close(&tm, "nothing of the manager's is left");
}

/* Cleanup: the engine is gone with its folder and (Podman) the run's containers. */
static void test_cleanup(const char *shared_url)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char *id = start_sleeper("cleanup");

	free(id);
	if (!engine_call(private_engine_cleanup, "clean up", ""))
		return;
	tap_ok(!answers(), "the engine no longer answers after the cleanup");
	tap_ok(access(pe.dir, F_OK) < 0 && errno == ENOENT, "its folder %s is gone", pe.dir);
	if (survives && shared_url) {
		struct sbx_engine_config cfg = {.type = pe.type, .url = shared_url};
		struct sbx_kv want[] = {{PRIVATE_ENGINE_LABEL, pe.dir}};
		struct sbx_container_summary *list = NULL;
		sbx_engine *shared = NULL;
		size_t n = 0;
		int r = sbx_engine_open(&cfg, &shared, &err);
		if (r >= 0)
			r = sbx_container_list(shared, want, 1, &list, &n, &err);
		if (tap_call(r, err.msg, "list the run's containers through the shared service"))
			tap_is_int(n, 0, "no container of the run is left in the shared storage");
		sbx_container_list_free(list, n);
		sbx_engine_free(shared);
	}
}

int main(int argc, char **argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	double t0 = now_s();
	char *fixture_argv[5];
	pid_t earlier_owner;

	/* Lines whole: the engine script writes to stderr, which shares the log. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s TYPE [IMAGE [SHARED_URL]]\n", argv[0]);
		return 2;
	}
	if (private_engine_init(&pe, argv[1], &err) < 0) {
		printf("Bail out! %s\n", err.msg);
		return 1;
	}
	private_engine_cleanup_at_exit(&pe);
	survives = strcmp(pe.type, "podman") == 0;

	/* The first start belongs to an "earlier run" (test_leftovers). */
	earlier_owner = spawn_owner();
	if (earlier_owner < 0)
		tap_bail("fork");
	pe.owner = earlier_owner;
	if (!engine_call(private_engine_start, "start", " (an earlier run, owned by a child)")) {
		kill(earlier_owner, SIGKILL);
		waitpid(earlier_owner, NULL, 0);
		tap_bail("cannot start the private engine");
	}
	fixture_argv[0] = argv[0];
	fixture_argv[1] = pe.type;
	fixture_argv[2] = pe.url;
	fixture_argv[3] = argc > 2 ? argv[2] : "localhost/mcp-sandbox:latest";
	fixture_argv[4] = NULL;
	fixture_init(4, fixture_argv, "restart");
	tap_diag("private %s engine at %s", pe.type, pe.url);
	tap_is_int(sbx_image_exists(engine, image, &err), 1, "the image %s is in it", image);

	test_leftovers(earlier_owner);
	test_down_and_up("stop", private_engine_stop);
	test_down_and_up("kill", private_engine_kill);
	test_manager("stop", private_engine_stop);
	test_manager("kill", private_engine_kill);
	test_cleanup(argc > 3 ? argv[3] : NULL);
	tap_diag("the whole test took %.1f s", now_s() - t0);
	return fixture_end();
}
