/* SPDX-License-Identifier: MIT */
/*
 * The warm pool against a real engine: tests/test-sandbox-pool TYPE URL [IMAGE].
 * Every manager here uses an instance name unique to this run and a state
 * folder under a temporary directory; the suite ends by checking that no
 * container of those instances is left.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"
#include "sandbox-fixture.h"
#include "tap.h"

static char state_root[] = "/tmp/sbx-pool-XXXXXX";
static char state_dir[128];

static size_t count_pool_labelled(const char *inst)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}, {SBX_LABEL_POOL, "1"}};
	struct sbx_container_summary *list = NULL;
	size_t n = 0;
	if (sbx_container_list(engine, want, 2, &list, &n, NULL) < 0)
		return (size_t)-1;
	sbx_container_list_free(list, n);
	return n;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Waits until the pool holds READY containers and is not filling. */
static bool wait_pool(sbx_manager *m, size_t ready, int seconds)
{
	struct sbx_pool_stats st;
	double until = now_ms() + seconds * 1000.0;

	do {
		sbx_manager_pool_stats(m, &st);
		if (st.ready == ready && st.filling == 0)
			return true;
		usleep(50000);
	} while (now_ms() < until);
	tap_diag("pool: %zu ready, %zu filling (wanted %zu); last error %d", st.ready, st.filling,
		 ready, st.last_error);
	return false;
}

/* Waits (30 s at most: a bound on a hang) until the manager follows the
 * engine's events (FOLLOWED) or no longer does. */
static bool wait_followed(sbx_manager *m, bool followed)
{
	struct sbx_pool_stats st;

	for (int i = 0; i < 300; i++) {
		sbx_manager_pool_stats(m, &st);
		if (st.followed == followed)
			return true;
		usleep(100000);
	}
	return false;
}

/* Runs CMD (a check); its stdout, or "<failed>". */
static char *shell_out(sbx_manager *m, sbx_sandbox *sb, const char *cmd)
{
	struct sbx_run_result res;
	char *out;

	if (shell(m, sb, cmd, &res) < 0)
		return strdup("<failed>");
	out = strdup(res.out.data ? res.out.data : "");
	sbx_run_result_release(&res);
	return out;
}

static bool state_file(const char *inst, const char *id, struct stat *ret_st)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/instance-%s/%s", state_root, inst, id);
	return stat(path, ret_st) == 0;
}

static size_t state_files(const char *inst)
{
	char cmd[512];
	size_t n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls -A '%s/instance-%s' 2>/dev/null | wc -l", state_root, inst);
	f = popen(cmd, "r");
	if (!f || fscanf(f, "%zu", &n) != 1)
		n = (size_t)-1;
	if (f)
		pclose(f);
	return n;
}

/* Counts the processes running `sleep 4242` (the pattern does not match itself). */
static const char procs_4242[] = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; "
				 "done 2>/dev/null | grep -c 'sleep 424[2]'; true";

static void test_fill_take_refill(void)
{
	const char *const extra[] = {"sandbox.pool_size=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	struct sbx_sandbox_info info = {0};
	struct stat fst;
	sbx_manager *m;
	sbx_sandbox *a = NULL;
	const char *inst;
	char *cid = NULL, *pooled_before = NULL;
	int r;

	m = test_manager_open(&tm, "fill", extra, NULL);
	inst = tm.inst;
	{
		char want[300];
		snprintf(want, sizeof(want), "%s/instance-%s", state_root, inst);
		tap_is_str(sbx_manager_state_dir(m), want, "the instance's state folder");
	}
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.size == 2 && !st.filling_on && st.ready == 0,
	       "a new manager does not fill before recover");
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 0, "recover finds nothing (%s)", err.msg);
	tap_ok(wait_pool(m, 2, 60), "the pool fills to pool_size");
	tap_is_int(count_pool_labelled(inst), 2, "two pool containers on the engine");
	{
		struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}, {SBX_LABEL_POOL, "1"}};
		struct sbx_container_summary *list = NULL;
		size_t n = 0;
		if (sbx_container_list(engine, want, 2, &list, &n, NULL) == 0 && n >= 1) {
			size_t len = 0;
			pooled_before = calloc(n, 80);
			for (size_t i = 0; pooled_before && i < n; i++)
				len += (size_t)sprintf(pooled_before + len, "%.64s ", list[i].id);
		}
		sbx_container_list_free(list, n);
	}

	r = sbx_sandbox_create(m, "alice", "a", &a, &err);
	tap_ok(r == 0 && a, "create (%s)", err.msg);
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.taken == 1 && st.cold == 0, "it came from the pool (taken %llu, cold %llu)",
	       (unsigned long long)st.taken, (unsigned long long)st.cold);
	if (!a)
		tap_bail("no sandbox");
	cid = container_of(inst, sbx_sandbox_id(a));
	tap_ok(cid && pooled_before && strstr(pooled_before, cid),
	       "its container was started before the call");
	tap_ok(state_file(inst, sbx_sandbox_id(a), &fst) && (fst.st_mode & 0777) == 0600,
	       "its assignment is a 0600 file in the state folder");
	{
		char path[512];
		struct stat dst;
		snprintf(path, sizeof(path), "%s/instance-%s", state_root, inst);
		tap_ok(stat(path, &dst) == 0 && (dst.st_mode & 0777) == 0700,
		       "the instance's state folder is 0700");
	}
	r = sbx_sandbox_describe(m, a, &info, &err);
	tap_ok(r == 0 && strcmp(info.status, "running") == 0 && strcmp(info.owner, "alice") == 0 &&
		   strcmp(info.name, "a") == 0,
	       "it runs, with its owner and name (%s)", err.msg);
	sbx_sandbox_info_release(&info);
	tap_ok(wait_pool(m, 2, 60), "the pool refills");
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.made >= 3, "the pool started a third container (%llu)",
	       (unsigned long long)st.made);

	/* Leave traces in A, then check that B, from the pool, has none. */
	{
		const char *traces =
		    "echo secret > /app/results/secret.txt && mkdir -p /app/results/sub && "
		    "echo s > /app/results/sub/s.txt && echo secret > /tmp/secret-a && "
		    "echo 'export SECRET_A=1' >> ~/.profile && echo 'export SECRET_A=1' >> "
		    "~/.bashrc "
		    "&& (setsid nohup sleep 4242 >/dev/null 2>&1 &) && echo ok";
		struct sbx_run_result res = {0};
		char *out = shell_out(m, a, traces);
		tap_is_str(out, "ok\n", "leave files, a profile and a process in sandbox A");
		free(out);
		out = shell_out(m, a, procs_4242);
		tap_is_str(out, "1\n", "A runs that process");
		free(out);
		python(m, a, "import os\nopen('py.txt','w').write('x')\n", &res);
		sbx_run_result_release(&res);
	}
	{
		char id_a[SBX_SANDBOX_ID_MAX + 1];
		sbx_sandbox *b = NULL;
		char *out, *cid_b;

		snprintf(id_a, sizeof(id_a), "%s", sbx_sandbox_id(a));
		tap_ok(sbx_sandbox_delete(m, "alice", "a", &err) == 0, "delete A (%s)", err.msg);
		tap_ok(!state_file(inst, id_a, &fst), "its state file is gone");
		a = sbx_sandbox_unref(a);
		tap_ok(wait_pool(m, 2, 60), "the pool is full again");
		r = sbx_sandbox_create(m, "bob", "a", &b, &err);
		sbx_manager_pool_stats(m, &st);
		tap_ok(r == 0 && st.taken == 2, "create B from the pool (%s)", err.msg);
		if (!b)
			tap_bail("no sandbox B");
		cid_b = container_of(inst, sbx_sandbox_id(b));
		tap_ok(strcmp(sbx_sandbox_id(b), id_a) != 0 && cid_b && cid &&
			   strcmp(cid_b, cid) != 0,
		       "B is another container");
		out = shell_out(m, b, "ls -A /app/results");
		tap_is_str(out, "", "B's /app/results is empty");
		free(out);
		out = shell_out(m, b, "ls -A /tmp | grep -c secret; true");
		tap_is_str(out, "0\n", "B's /tmp has no file of A");
		free(out);
		out = shell_out(m, b,
				"env | grep -c SECRET; cat ~/.profile ~/.bashrc 2>/dev/null | "
				"grep -c SECRET; true");
		tap_is_str(out, "0\n0\n", "B has no variable or profile line of A");
		free(out);
		out = shell_out(m, b, procs_4242);
		tap_is_str(out, "0\n", "B runs no process of A");
		free(out);
		{
			struct sbx_run_result res = {0};
			r = sbx_sandbox_run_python(
			    m, b, "print(sorted(n for n in globals() if not n.startswith('__')))\n",
			    0, &res, &err);
			tap_ok(r == 0 && res.out.data && strcmp(res.out.data, "[]\n") == 0,
			       "B's Python starts with no variables (%s)", r == 0 ? "" : err.msg);
			sbx_run_result_release(&res);
		}
		free(cid_b);
		sbx_sandbox_unref(b);
	}
	test_manager_close(&tm, "free removes the sandboxes and the pooled containers");
	tap_is_int(state_files(inst), 0, "and their state files");
	free(cid);
	free(pooled_before);
}

static void test_pool_off(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct sbx_settings s;
	struct sbx_container_info ci = {0};
	sbx_manager *m;
	sbx_sandbox *sb = NULL;
	char inst[80], *cid;
	int r;

	snprintf(inst, sizeof(inst), "%s-off", instance);
	settings_for(&s, inst, extra);
	m = manager(&s, engine);
	recover(m);
	r = sbx_sandbox_create(m, "alice", "cold", &sb, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.size == 0 && st.cold == 1 && st.taken == 0,
	       "pool_size=0: create makes its own container (%s)", err.msg);
	usleep(300000);
	tap_is_int(count_pool_labelled(inst), 0, "and no pool container exists");
	cid = sb ? container_of(inst, sbx_sandbox_id(sb)) : NULL;
	if (cid && sbx_container_inspect(engine, cid, &ci, &err) == 0) {
		bool name = false, owner = false;
		for (size_t i = 0; i < ci.n_labels; i++) {
			name |= strcmp(ci.labels[i].key, SBX_LABEL_NAME) == 0 &&
				strcmp(ci.labels[i].value, "cold") == 0;
			owner |= strcmp(ci.labels[i].key, SBX_LABEL_OWNER) == 0 &&
				 strcmp(ci.labels[i].value, "alice") == 0;
		}
		tap_ok(name && owner, "a cold sandbox keeps its name and owner in labels");
	} else {
		tap_ok(0, "inspect the cold sandbox (%s)", err.msg);
	}
	sbx_container_info_release(&ci);
	tap_is_int(state_files(inst), 0, "and needs no state file");
	free(cid);
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "nothing left");
	sbx_settings_release(&s);

	/* No state folder and sandboxes that outlive the server: no pool. */
	{
		const char *const keep[] = {"sandbox.pool_size=2", "sandbox.remove_on_exit=false",
					    "server.state_dir=", NULL};
		settings_for(&s, inst, keep);
		m = manager(&s, engine);
		sbx_manager_pool_stats(m, &st);
		if (sbx_manager_state_dir(m))
			tap_skip(1, "a default state folder exists on this host");
		else
			tap_is_int(
			    st.size, 0,
			    "without a state folder, remove_on_exit=false turns the pool off");
		m = sbx_manager_free(m);
		sbx_settings_release(&s);
	}
	/* Empty server.state_dir: $STATE_DIRECTORY (its first entry), as systemd sets it. */
	{
		const char *const dflt[] = {"server.state_dir=", NULL};
		char env[300], want[400];
		snprintf(env, sizeof(env), "%s/env", state_root);
		snprintf(want, sizeof(want), "%s/instance-%s", env, inst);
		mkdir(env, 0700);
		strcat(env, ":/nonexistent/second");
		setenv("STATE_DIRECTORY", env, 1);
		settings_for(&s, inst, dflt);
		m = manager(&s, engine);
		tap_is_str(sbx_manager_state_dir(m), want,
			   "an empty state_dir uses $STATE_DIRECTORY");
		m = sbx_manager_free(m);
		unsetenv("STATE_DIRECTORY");
		sbx_settings_release(&s);
	}
	/* An explicit state folder that cannot be made is an error. */
	{
		char bad[300];
		const char *const broken[] = {bad, NULL};
		snprintf(bad, sizeof(bad), "server.state_dir=%s/no/such/parent", state_root);
		settings_for(&s, inst, broken);
		m = NULL;
		r = sbx_manager_new(&s, engine, &m, &err);
		tap_ok(r < 0 && !m && strstr(err.msg, "state"), "a bad server.state_dir fails: %s",
		       err.msg);
		sbx_settings_release(&s);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* p50 of N creates (each then deleted), from the pool or cold. */
static void measure(bool pooled, int n)
{
	char size[32];
	const char *const extra[] = {size, NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	double t[64];
	sbx_manager *m;
	int ok = 0, deleted = 0;

	snprintf(size, sizeof(size), "sandbox.pool_size=%d", pooled ? 2 : 0);
	m = test_manager_open(&tm, pooled ? "p50-pool" : "p50-cold", extra, NULL);
	recover(m);
	for (int i = 0; i < n; i++) {
		sbx_sandbox *sb = NULL;
		double t0;
		if (pooled && !wait_pool(m, 2, 60))
			break;
		t0 = now_ms();
		if (sbx_sandbox_create(m, "alice", NULL, &sb, &err) < 0) {
			tap_diag("create: %s", err.msg);
			break;
		}
		t[ok++] = now_ms() - t0;
		deleted += sbx_sandbox_delete(m, "alice", sbx_sandbox_id(sb), NULL) == 0;
		sbx_sandbox_unref(sb);
	}
	sbx_manager_pool_stats(m, &st);
	tap_ok(ok == n && deleted == n && (pooled ? st.taken : st.cold) == (uint64_t)n,
	       "%d creates (and deletes), all %s (taken %llu, cold %llu)", n,
	       pooled ? "from the pool" : "cold", (unsigned long long)st.taken,
	       (unsigned long long)st.cold);
	qsort(t, (size_t)ok, sizeof(*t), cmp_double);
	if (ok > 0)
		tap_diag("%s: create_sandbox %s: p50 %.2f ms, min %.2f ms, max %.2f ms over %d",
			 engine_type, pooled ? "from the pool" : "cold", t[ok / 2], t[0], t[ok - 1],
			 ok);
	test_manager_close(&tm, "nothing left");
}

/* Runs CODE (a check); its stdout, or "<failed>". RES keeps the result
 * flags. */
static char *py_out(sbx_manager *m, sbx_sandbox *sb, const char *code, struct sbx_run_result *res)
{
	if (python(m, sb, code, res) < 0)
		return strdup("<failed>");
	return strdup(res->out.data ? res->out.data : "");
}

/* Kills the interpreter process in every pooled container of INST but the
 * (assigned) container KEEP, from outside (a fresh exec); returns how many
 * containers it was killed in. */
static int kill_pooled_interps(const char *inst, const char *keep)
{
	/* The pattern does not match the shell's own command line. */
	const char *const argv[] = {
	    "sh", "-c",
	    "n=0; for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in "
	    "*\" sbx-int\"\"erp \") kill -KILL ${p#/proc/} && n=$((n+1));; esac; done; echo $n",
	    NULL};
	struct sbx_exec_spec spec = {.argv = argv, .timeout_ms = 10000, .output_cap = 4096};
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}, {SBX_LABEL_POOL, "1"}};
	struct sbx_container_summary *list = NULL;
	size_t n = 0;
	int killed = 0;

	if (sbx_container_list(engine, want, 2, &list, &n, NULL) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct sbx_exec_result res = {0};
		if (keep && strcmp(list[i].id, keep) == 0)
			continue;
		if (sbx_exec(engine, list[i].id, &spec, &res, NULL) == 0) {
			killed += res.out.data && strcmp(res.out.data, "1\n") == 0;
			sbx_exec_result_release(&res);
		}
	}
	sbx_container_list_free(list, n);
	return killed;
}

/* A sandbox from the pool comes with a live, fresh Python interpreter; one
 * that died in the pool is restarted by the first call, silently. */
static void test_warm_interp(void)
{
	const char *const extra[] = {"sandbox.pool_size=2", NULL};
	const char *const fresh = "import os\nprint(sorted(n for n in globals() if not "
				  "n.startswith('__') and n != 'os'), sorted(os.listdir('.')))\n";
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_manager *m;
	const char *inst;
	sbx_sandbox *a = NULL, *b = NULL;
	char *out, *cid;
	bool ready = true;
	int r;

	m = test_manager_open(&tm, "warm", extra, NULL);
	inst = tm.inst;
	recover(m);
	tap_ok(wait_pool(m, 2, 60), "warm: the pool fills");
	r = sbx_sandbox_create(m, "alice", "w1", &a, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.taken == 1, "create from the pool (%s)", err.msg);
	if (!a)
		tap_bail("no sandbox");
	tap_ok(sbx_sandbox_python_ready(a), "it has a live interpreter before its first call");
	out = py_out(m, a, fresh, &res);
	tap_is_str(out, "[] []\n", "the first call sees no variables and no files");
	tap_ok(res.exit_code == 0 && !res.interpreter_restarted && !res.notice,
	       "and reports no (re)start (exit %d%s%s)", res.exit_code, res.notice ? ": " : "",
	       res.notice ? res.notice : "");
	free(out);
	sbx_run_result_release(&res);
	out = py_out(m, a, "x = 41\nimport os\nprint(x + 1, os.getcwd(), os.getuid())\n", &res);
	tap_is_str(out, "42 /app/results 1000\n", "it runs as uid 1000 in /app/results");
	free(out);
	sbx_run_result_release(&res);
	out = py_out(m, a, "print(x)\n", &res);
	tap_is_str(out, "41\n", "state persists in the pooled interpreter");
	free(out);
	sbx_run_result_release(&res);

	/* Kill the interpreters of the refilled pool before assignment. */
	tap_ok(wait_pool(m, 2, 60), "the pool refills");
	cid = container_of(inst, sbx_sandbox_id(a));
	tap_is_int(kill_pooled_interps(inst, cid), 2,
		   "kill the interpreter of both pooled containers");
	free(cid);
	r = sbx_sandbox_create(m, "bob", "w2", &b, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.taken == 2, "create another from the pool (%s)", err.msg);
	if (!b)
		tap_bail("no sandbox");
	for (int i = 0; i < 50 && ready; i++) {
		ready = sbx_sandbox_python_ready(b);
		if (ready)
			usleep(100000);
	}
	tap_ok(!ready, "its interpreter, killed in the pool, is seen dead");
	out = py_out(m, b, fresh, &res);
	tap_is_str(out, "[] []\n", "the first call starts a fresh one and works");
	tap_ok(res.exit_code == 0 && !res.interpreter_restarted && !res.notice,
	       "with no state lost, it reports no restart%s%s", res.notice ? ": " : "",
	       res.notice ? res.notice : "");
	free(out);
	sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_python_ready(b), "and it is live afterwards");
	out = py_out(m, a, "print(x)\n", &res);
	tap_is_str(out, "41\n", "the first sandbox kept its state");
	free(out);
	sbx_run_result_release(&res);

	tap_ok(sbx_sandbox_delete(m, "alice", "w1", &err) == 0 &&
		   sbx_sandbox_delete(m, "bob", "w2", &err) == 0,
	       "delete both (%s)", err.msg);
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	test_manager_close(&tm, "nothing left");
}

/* Times one "print(1)" in SB: ms, or -1 when it failed or printed wrong. */
static double time_print1(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	double t0 = now_ms(), t;
	int r = sbx_sandbox_run_python(m, sb, "print(1)\n", 0, &res, &err);

	t = now_ms() - t0;
	if (r < 0)
		tap_diag("run_python: %s", err.msg);
	if (r < 0 || !res.out.data || strcmp(res.out.data, "1\n") != 0 || res.exit_code != 0)
		t = -1;
	sbx_run_result_release(&res);
	return t;
}

static void diag_p50(const char *what, double *t, int n)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	if (n > 0)
		tap_diag("%s: %s: p50 %.2f ms, min %.2f ms, max %.2f ms over %d", engine_type, what,
			 t[n / 2], t[0], t[n - 1], n);
}

/* p50 of the first execute_python_code on new sandboxes, from the pool or
 * cold (the create is not timed). Each round makes two sandboxes: the
 * first call of A right after the create (a pool refill then competes for
 * the engine), that of B once the pool is full again; for comparison a
 * call in A (used, then idle as long as B was) and a second call in B. */
static void measure_first_call(bool pooled, int n)
{
	char size[32];
	const char *const extra[] = {size, NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct test_manager tm;
	double now[64], quiet[64], idle[64], second[64], t;
	sbx_manager *m;
	int ok = 0, n_quiet = 0, n_idle = 0, n_second = 0, ready = 0, calls = 0, deleted = 0;

	snprintf(size, sizeof(size), "sandbox.pool_size=%d", pooled ? 2 : 0);
	m = test_manager_open(&tm, pooled ? "first-pool" : "first-cold", extra, NULL);
	recover(m);
	for (int i = 0; i < n; i++) {
		sbx_sandbox *a = NULL, *b = NULL;
		if (pooled && !wait_pool(m, 2, 60))
			break;
		if (sbx_sandbox_create(m, "alice", NULL, &a, &err) < 0 ||
		    sbx_sandbox_create(m, "alice", NULL, &b, &err) < 0) {
			tap_diag("create: %s", err.msg);
			sbx_sandbox_unref(a);
			break;
		}
		ready += sbx_sandbox_python_ready(a) + sbx_sandbox_python_ready(b);
		calls += 2;
		if ((t = time_print1(m, a)) >= 0)
			now[ok++] = t;
		if (pooled)
			wait_pool(m, 2, 60);
		if ((t = time_print1(m, b)) >= 0)
			quiet[n_quiet++] = t;
		if ((t = time_print1(m, a)) >= 0)
			idle[n_idle++] = t;
		if ((t = time_print1(m, b)) >= 0)
			second[n_second++] = t;
		deleted += sbx_sandbox_delete(m, "alice", sbx_sandbox_id(a), NULL) == 0;
		deleted += sbx_sandbox_delete(m, "alice", sbx_sandbox_id(b), NULL) == 0;
		sbx_sandbox_unref(a);
		sbx_sandbox_unref(b);
	}
	tap_ok(ok == n && n_quiet == n && n_second == n && deleted == 2 * n &&
		   ready == (pooled ? calls : 0),
	       "%d first calls %s, all right (%d of %d had a live interpreter)", 2 * n,
	       pooled ? "from the pool" : "cold", ready, calls);
	diag_p50(pooled ? "first execute_python_code from the pool, right after create"
			: "first execute_python_code cold, right after create",
		 now, ok);
	diag_p50(pooled ? "first execute_python_code from the pool, pool refilled"
			: "first execute_python_code cold, other sandbox",
		 quiet, n_quiet);
	diag_p50(pooled ? "a used sandbox after the same idle time (pool)"
			: "a used sandbox after the same idle time (cold)",
		 idle, n_idle);
	diag_p50(pooled ? "second call, back to back (pool)" : "second call, back to back (cold)",
		 second, n_second);
	test_manager_close(&tm, "nothing left");
}

static void test_limit(void)
{
	const char *const extra[] = {"sandbox.pool_size=2", "sandbox.max_sandboxes=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_manager *m;
	sbx_sandbox *x = NULL, *y = NULL, *z = NULL;
	const char *inst;
	int r;

	m = test_manager_open(&tm, "max", extra, NULL);
	inst = tm.inst;
	recover(m);
	tap_ok(wait_pool(m, 2, 60), "max_sandboxes=2, pool_size=2: the pool fills to 2");
	r = sbx_sandbox_create(m, "alice", "x", &x, &err);
	tap_ok(r == 0, "create x (%s)", err.msg);
	tap_ok(wait_pool(m, 1, 30), "the pool shrinks to the room left: 1");
	tap_is_int(count_instance(inst), 2, "two containers in all");
	r = sbx_sandbox_create(m, "alice", "y", &y, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.taken == 2, "create y from the pool (%s)", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, "alice", "z", &z, &err);
	tap_is_int(r, -EBUSY, "a third: EBUSY (%s)", err.msg);
	usleep(1500000);
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.ready == 0 && st.filling == 0 && count_instance(inst) == 2,
	       "at the limit the pool stays empty");
	tap_ok(strstr(err.msg, "delete_sandbox") && strstr(err.msg, "\"x\"") &&
		   strstr(err.msg, "\"y\""),
	       "... naming the caller's sandboxes to delete: %s", err.msg);
	tap_ok(sbx_sandbox_delete(m, "alice", "y", &err) == 0, "delete y");
	r = sbx_sandbox_create(m, "alice", "z", &z, &err);
	tap_call(r, err.msg, "at once a create takes the slot y freed");
	tap_call(sbx_sandbox_delete(m, "alice", "z", &err), err.msg, "delete z");
	z = sbx_sandbox_unref(z);
	tap_ok(wait_pool(m, 1, 60), "the pool takes the room back");
	tap_is_int(count_instance(inst), 2, "still two containers in all");
	sbx_sandbox_unref(x);
	sbx_sandbox_unref(y);
	test_manager_close(&tm, "nothing left");
}

struct racer {
	sbx_manager *m;
	const char *owner, *name;
	sbx_sandbox *sb;
	int r;
	pthread_barrier_t *go;
};

static void *race_create(void *arg)
{
	struct racer *x = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	pthread_barrier_wait(x->go);
	x->r = sbx_sandbox_create(x->m, x->owner, x->name, &x->sb, &err);
	return NULL;
}

static int race(sbx_manager *m, struct racer *x, int n)
{
	pthread_barrier_t go;
	pthread_t t[8];
	int ok = 0;

	pthread_barrier_init(&go, NULL, (unsigned)n);
	for (int i = 0; i < n; i++) {
		x[i].m = m;
		x[i].go = &go;
		x[i].sb = NULL;
		pthread_create(&t[i], NULL, race_create, &x[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		ok += x[i].r == 0;
	}
	pthread_barrier_destroy(&go);
	return ok;
}

static void test_names_race(void)
{
	const char *const extra[] = {"sandbox.pool_size=4", NULL};
	struct sbx_pool_stats st;
	struct test_manager tm;
	struct racer x[4];
	sbx_manager *m;
	int ok, exist = 0;

	m = test_manager_open(&tm, "race", extra, NULL);
	recover(m);
	tap_ok(wait_pool(m, 4, 90), "a pool of 4 fills");
	for (int i = 0; i < 4; i++)
		x[i] = (struct racer){.owner = "alice", .name = "race"};
	ok = race(m, x, 4);
	for (int i = 0; i < 4; i++) {
		exist += x[i].r == -EEXIST;
		sbx_sandbox_unref(x[i].sb);
	}
	sbx_manager_pool_stats(m, &st);
	tap_ok(ok == 1 && exist == 3 && st.taken == 1 && st.cold == 0,
	       "4 threads take the same name from the pool: one wins, 3 get EEXIST");
	tap_ok(st.ready + st.filling >= 3, "the losers' containers went back to the pool (%zu)",
	       st.ready);
	tap_ok(wait_pool(m, 4, 60), "the pool is full again");

	for (int i = 0; i < 4; i++)
		x[i] = (struct racer){.owner = i % 2 ? "bob" : "carol", .name = "same"};
	ok = race(m, x, 4);
	tap_is_int(ok, 2, "2 owners, 2 threads each, one name: one per owner wins");
	for (int i = 0; i < 4; i++)
		sbx_sandbox_unref(x[i].sb);
	test_manager_close(&tm, "nothing left");
}

struct race_run {
	sbx_manager *m;
	struct racer *x;
	int n, ok;
	bool done;
};

static void *race_bg(void *arg)
{
	struct race_run *r = arg;

	r->ok = race(r->m, r->x, r->n);
	__atomic_store_n(&r->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* sandbox.pool_max: each create that finds the pool empty grows it by one,
 * up to pool_max; no filler starts while such creates make their own
 * containers; it refills pool_fill at once, never more; and it falls
 * back to pool_size pool_shrink_after the last such create, removing what
 * it grew. */
static void test_grow(void)
{
	const char *const extra[] = {"sandbox.pool_size=1", "sandbox.pool_max=3",
				     "sandbox.pool_fill=2", "sandbox.pool_shrink_after=20s", NULL};
	struct sbx_pool_stats st;
	struct test_manager tm;
	struct racer x[4];
	sbx_manager *m;
	size_t most_filling = 0;
	double until;
	int ok;

	m = test_manager_open(&tm, "grow", extra, NULL);
	recover(m);
	tap_ok(wait_pool(m, 1, 60), "the pool fills to pool_size (1)");
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.size == 1 && st.floor == 1 && st.max == 3, "it aims at 1, may grow to 3");
	for (int i = 0; i < 4; i++)
		x[i] = (struct racer){.owner = "alice"};
	{
		struct race_run run = {m, x, 4, 0, false};
		pthread_t t;
		size_t started = 0; /* made + filling once creates made their own */
		bool seen = false, held = true;

		pthread_create(&t, NULL, race_bg, &run);
		while (!__atomic_load_n(&run.done, __ATOMIC_ACQUIRE)) {
			sbx_manager_pool_stats(m, &st);
			if (st.making_own > 0 && !seen) {
				seen = true;
				started = st.made + st.filling;
			} else if (st.making_own > 0 && st.made + st.filling > started) {
				held = false;
			}
			usleep(2000);
		}
		pthread_join(t, NULL);
		ok = run.ok;
		tap_ok(seen && held,
		       "while creates that found the pool empty make their own containers, no "
		       "filler starts (seen %d)",
		       seen);
	}
	for (int i = 0; i < 4; i++)
		sbx_sandbox_unref(x[i].sb);
	tap_is_int(ok, 4, "4 creates at once");
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.taken == 1 && st.cold == 3 && st.size == 3,
	       "1 from the pool, 3 found it empty: it grows to pool_max (taken %llu, cold "
	       "%llu, size %zu)",
	       (unsigned long long)st.taken, (unsigned long long)st.cold, st.size);
	until = now_ms() + 90000;
	do {
		sbx_manager_pool_stats(m, &st);
		if (st.filling > most_filling)
			most_filling = st.filling;
		if (st.ready == 3 && st.filling == 0)
			break;
		usleep(5000);
	} while (now_ms() < until);
	tap_ok(st.ready == 3 && st.filling == 0, "it refills to 3 (%zu ready)", st.ready);
	tap_is_int(most_filling, 2, "pool_fill = 2: two started at once, never more");
	/* The one taken keeps its pool label. */
	tap_is_int(count_pool_labelled(tm.inst), 4,
		   "3 pool containers on the engine, and the one taken");
	/* 20 s: the refill to 3 must end before it, on a loaded machine too. */
	tap_ok(wait_pool(m, 1, 60), "20 s after the last create that found it empty, it is "
				    "back to pool_size");
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.size == 1, "it aims at 1 again (%zu)", st.size);
	/* Its ready count drops before the engine's removal ends. */
	for (int i = 0; i < 200 && count_pool_labelled(tm.inst) != 2; i++)
		usleep(50000);
	tap_is_int(count_pool_labelled(tm.inst), 2, "the 2 it grew are removed from the engine");
	tap_is_int(count_instance(tm.inst), 5, "the 4 sandboxes run on");
	test_manager_close(&tm, "nothing left");
}

/* A create refused at a limit (here max_sandboxes, the pool holding none)
 * grows nothing: no one keeps the pool grown with creates that fail. */
static void test_grow_refused(void)
{
	const char *const extra[] = {"sandbox.pool_size=1", "sandbox.pool_max=3",
				     "sandbox.max_sandboxes=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_sandbox *a = NULL, *b = NULL, *c = NULL;
	sbx_manager *m;
	int r;

	m = test_manager_open(&tm, "grow2", extra, NULL);
	recover(m);
	tap_ok(wait_pool(m, 1, 60), "max_sandboxes 2: the pool fills to 1");
	r = sbx_sandbox_create(m, "alice", NULL, &a, &err);
	tap_ok(r == 0 && wait_pool(m, 1, 60), "a sandbox, and the pool refills (%s)", err.msg);
	r = sbx_sandbox_create(m, "alice", NULL, &b, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.ready == 0 && st.taken == 2,
	       "a second takes the pooled one: no room is left for the pool (%s)", err.msg);
	r = sbx_sandbox_create(m, "alice", NULL, &c, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == -EBUSY, "a third is refused at max_sandboxes (%s)", err.msg);
	tap_ok(st.size == 1 && st.cold == 0 && st.making_own == 0,
	       "the refused create did not grow the pool (size %zu)", st.size);
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	sbx_sandbox_unref(c);
	test_manager_close(&tm, "nothing left");
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		tap_bail("write a test file");
}

static void test_recover(void)
{
	const char *const keep[] = {"sandbox.pool_size=2", "sandbox.remove_on_exit=false", NULL};
	const char *const again[] = {"sandbox.pool_size=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct sbx_settings s1, s2;
	sbx_manager *m;
	sbx_sandbox *kept = NULL, *anon = NULL, *x = NULL;
	char inst[80], id_kept[SBX_SANDBOX_ID_MAX + 1] = "", id_anon[SBX_SANDBOX_ID_MAX + 1] = "";
	char path[512], *out, *orphan = NULL;
	int r;

	snprintf(inst, sizeof(inst), "%s-rec", instance);
	settings_for(&s1, inst, keep);
	settings_for(&s2, inst, again);
	m = manager(&s1, engine);
	recover(m);
	tap_ok(wait_pool(m, 2, 60), "remove_on_exit=false with a state folder: the pool fills");
	r = sbx_sandbox_create(m, "dave", "kept", &kept, &err);
	tap_ok(r == 0, "create kept (%s)", err.msg);
	r = sbx_sandbox_create(m, "dave", NULL, &anon, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.taken == 2, "and an unnamed one, both from the pool (%s)", err.msg);
	if (!kept || !anon)
		tap_bail("no sandboxes to recover");
	snprintf(id_kept, sizeof(id_kept), "%s", sbx_sandbox_id(kept));
	snprintf(id_anon, sizeof(id_anon), "%s", sbx_sandbox_id(anon));
	out = shell_out(m, kept, "echo kept > k.txt && echo ok");
	tap_is_str(out, "ok\n", "write a file in it");
	free(out);
	kept = sbx_sandbox_unref(kept);
	anon = sbx_sandbox_unref(anon);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 2,
		   "free keeps the assigned ones, removes the pooled ones");

	/* What a crash leaves: an unassigned pool container, a state file
	 * without a container, a half-written temporary file. */
	{
		char when[32];
		struct sbx_kv labels[] = {{SBX_LABEL_MANAGED, "1"},
					  {SBX_LABEL_INSTANCE, inst},
					  {SBX_LABEL_ID, "0123456789ab"},
					  {SBX_LABEL_CREATED, when},
					  {SBX_LABEL_POOL, "1"}};
		const char *const cmd[] = {"sleep", "infinity", NULL};
		struct sbx_container_spec spec = {.image = image,
						  .cmd = cmd,
						  .labels = labels,
						  .n_labels = SBX_ARRAY_SIZE(labels),
						  .network_mode = "none"};
		snprintf(when, sizeof(when), "%lld", (long long)time(NULL));
		r = sbx_container_create(engine, &spec, &orphan, &err);
		tap_ok(r == 0, "make an unassigned pool container (%s)", err.msg);
		snprintf(path, sizeof(path), "%s/instance-%s/abcdefabcdef", state_root, inst);
		write_file(path, "{\"id\":\"abcdefabcdef\",\"container\":\"gone\",\"owner\":\"x\","
				 "\"name\":\"y\",\"assigned\":1}");
		snprintf(path, sizeof(path), "%s/instance-%s/.fedcbafedcba.tmp", state_root, inst);
		write_file(path, "{");
	}
	tap_is_int(state_files(inst), 4, "the state folder holds 2 files, a stale one and a temp");

	m = manager(&s2, engine);
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 2, "recover adopts the two assigned sandboxes (%s)", err.msg);
	out = container_of(inst, "0123456789ab");
	tap_ok(out == NULL, "and removes the unassigned pool container");
	free(out);
	tap_is_int(state_files(inst), 2, "and the stale state files");
	r = sbx_sandbox_get(m, "dave", "kept", &kept, &err);
	tap_ok(r == 0 && kept && strcmp(sbx_sandbox_id(kept), id_kept) == 0,
	       "kept is dave's, by name, after recover (%s)", err.msg);
	r = sbx_sandbox_get(m, "dave", id_anon, &anon, &err);
	tap_ok(r == 0 && anon && strcmp(sbx_sandbox_name(anon), id_anon) == 0,
	       "the unnamed one too, by id");
	tap_is_int(sbx_sandbox_get(m, "erin", "kept", &x, &err), -ENOENT,
		   "another owner does not see it");
	if (kept) {
		out = shell_out(m, kept, "cat k.txt");
		tap_is_str(out, "kept\n", "its files are there");
		free(out);
	}
	tap_ok(wait_pool(m, 2, 60), "the new manager's pool fills");
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 0, "recover again adopts nothing");
	sbx_manager_pool_stats(m, &st);
	tap_ok(st.ready == 2 && count_instance(inst) == 4,
	       "and leaves the manager's own pool alone");
	r = sbx_sandbox_create(m, "dave", "kept", &x, &err);
	tap_is_int(r, -EEXIST, "an adopted name stays taken (%s)", err.msg);
	sbx_sandbox_unref(kept);
	sbx_sandbox_unref(anon);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "with remove_on_exit all is removed");
	tap_is_int(state_files(inst), 0, "and the state folder is empty");
	if (orphan) /* only in case recover left it: the error is not a check */
		sbx_container_remove(engine, orphan, NULL);
	free(orphan);
	sbx_settings_release(&s1);
	sbx_settings_release(&s2);
}

/* ---- an engine that goes away: a relay we can stop ---- */

static void relay_conn(int a, const char *target)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int b = socket(AF_UNIX, SOCK_STREAM, 0);
	char buf[65536];
	bool ab = true, ba = true;

	memcpy(sa.sun_path, target, strlen(target));
	if (b < 0 || connect(b, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		_exit(1);
	while (ab || ba) {
		struct pollfd fds[2] = {{.fd = ab ? a : -1, .events = POLLIN},
					{.fd = ba ? b : -1, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0)
			continue;
		for (int i = 0; i < 2; i++) {
			int from = i ? b : a, to = i ? a : b;
			ssize_t n;
			if (!fds[i].revents)
				continue;
			n = read(from, buf, sizeof(buf));
			if (n <= 0) {
				shutdown(to, SHUT_WR);
				*(i ? &ba : &ab) = false;
				continue;
			}
			for (ssize_t off = 0; off < n;) {
				ssize_t w = write(to, buf + off, (size_t)(n - off));
				if (w <= 0)
					_exit(0);
				off += w;
			}
		}
	}
	_exit(0);
}

/* A process (group) that relays PATH to TARGET; only system calls after fork. */
static pid_t relay_up(const char *path, const char *target)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	pid_t pid;
	int l;

	unlink(path);
	memcpy(sa.sun_path, path, strlen(path));
	l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 64) < 0)
		tap_bail("relay socket");
	pid = fork();
	if (pid < 0)
		tap_bail("fork");
	if (pid == 0) {
		setpgid(0, 0);
		signal(SIGCHLD, SIG_IGN);
		for (;;) {
			int c = accept(l, NULL, NULL);
			if (c < 0)
				continue;
			if (fork() == 0) {
				close(l);
				relay_conn(c, target);
			}
			close(c);
		}
	}
	setpgid(pid, pid);
	close(l);
	return pid;
}

static void relay_down(pid_t pid, const char *path)
{
	kill(-pid, SIGKILL);
	waitpid(pid, NULL, 0);
	unlink(path);
}

static void test_engine_down(void)
{
	const char *const extra[] = {"sandbox.pool_size=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_engine_config cfg = {.type = engine_type};
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_engine *via = NULL;
	sbx_manager *m;
	sbx_sandbox *a = NULL, *b = NULL;
	char sock[200], url[220];
	pid_t relay;
	int r;

	snprintf(sock, sizeof(sock), "%s/relay.sock", state_root);
	snprintf(url, sizeof(url), "unix://%s", sock);
	relay = relay_up(sock, engine_url + strlen("unix://"));
	cfg.url = url;
	if (sbx_engine_open(&cfg, &via, &err) < 0)
		tap_bail(err.msg);
	m = test_manager_open(&tm, "down", extra, via);
	r = sbx_manager_recover(m, &err);
	tap_ok(r == 0 && wait_pool(m, 2, 60), "through a relay: the pool fills (%s)", err.msg);

	relay_down(relay, sock);
	tap_ok(wait_followed(m, false), "the engine gone, the server no longer follows it");
	r = sbx_sandbox_create(m, "alice", "a", &a, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r < 0 && !a && st.taken == 0 && strstr(err.msg, "create sandbox"),
	       "meanwhile create hands out no pooled sandbox (it may have died with the "
	       "engine) and reports the engine's error: %s",
	       err.msg);
	tap_ok(st.ready == 0, "none of the pooled containers is ready meanwhile (%zu)", st.ready);

	relay = relay_up(sock, engine_url + strlen("unix://"));
	sbx_error_clear(&err);
	tap_ok(wait_followed(m, true), "the engine back, the server follows it again");
	tap_ok(wait_pool(m, 2, 90), "and the pool is full");
	r = sbx_sandbox_create(m, "alice", "a", &a, &err);
	if (r == 0)
		r = sbx_sandbox_create(m, "alice", "b", &b, &err);
	sbx_manager_pool_stats(m, &st);
	tap_ok(r == 0 && st.taken == 2 && st.died == 0,
	       "the pooled containers, checked alive, are handed out again (%s)", err.msg);
	if (a) {
		struct sbx_run_result res = {0};
		if (python(m, a, "print(6 * 7)", &res) == 0) {
			tap_is_str(res.out.data, "42\n", "and Python runs in one");
			sbx_run_result_release(&res);
		}
	}
	tap_ok(sbx_sandbox_delete(m, "alice", "a", &err) == 0 &&
		   sbx_sandbox_delete(m, "alice", "b", &err) == 0,
	       "delete both (%s)", err.msg);
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	test_manager_close(&tm, "nothing left");
	relay_down(relay, sock);
	sbx_engine_free(via);
}

/* A pooled container that dies is noticed (within 30 s) and replaced. */
static void test_dead_pooled(void)
{
	const char *const extra[] = {"sandbox.pool_size=1", NULL};
	struct sbx_kv want[2];
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_container_summary *list = NULL;
	struct sbx_pool_stats st;
	struct test_manager tm;
	sbx_manager *m;
	char *victim = NULL;
	size_t n = 0;
	bool replaced = false;
	int r;

	m = test_manager_open(&tm, "dead", extra, NULL);
	want[0] = (struct sbx_kv){SBX_LABEL_INSTANCE, tm.inst};
	want[1] = (struct sbx_kv){SBX_LABEL_POOL, "1"};
	recover(m);
	tap_ok(wait_pool(m, 1, 60), "a pool of one fills");
	if (sbx_container_list(engine, want, 2, &list, &n, &err) == 0 && n == 1)
		victim = strdup(list[0].id);
	sbx_container_list_free(list, n);
	tap_ok(victim && sbx_container_kill(engine, victim, "KILL", &err) == 0,
	       "kill the pooled container (%s)", err.msg);
	for (int i = 0; i < 50 && !replaced; i++) {
		sleep(1);
		sbx_manager_pool_stats(m, &st);
		replaced = st.made == 2 && st.ready == 1 && st.filling == 0;
	}
	tap_ok(replaced, "the pool notices and starts another");
	tap_ok(st.died == 1 && st.followed,
	       "it counts one dead (%" PRIu64 "), following the engine", st.died);
	list = NULL;
	n = 0;
	r = sbx_container_list(engine, want, 2, &list, &n, &err);
	tap_ok(r == 0 && n == 1 && list[0].running && victim && strcmp(list[0].id, victim) != 0,
	       "the dead one is removed, the new one runs (%s)", err.msg);
	sbx_container_list_free(list, n);
	{
		sbx_sandbox *sb = NULL;
		struct sbx_run_result res = {0};
		r = sbx_sandbox_create(m, "alice", "afterdeath", &sb, &err);
		sbx_manager_pool_stats(m, &st);
		tap_ok(r == 0 && st.taken == 1, "create takes the new pooled one (%s)", err.msg);
		if (sb && python(m, sb, "print(6 * 7)", &res) == 0) {
			tap_is_str(res.out.data, "42\n", "and Python runs in it");
			sbx_run_result_release(&res);
		}
		sbx_sandbox_unref(sb);
	}
	free(victim);
	test_manager_close(&tm, "nothing left");
}

/* One server per instance: a second manager on the instance and state
 * folder of a live one is refused; server.instance left at "default" gets a
 * name of its own per state folder, so two such managers never touch each
 * other's sandboxes; the name is kept; a state folder of an earlier version
 * keeps "default". */
static void test_instances(void)
{
	const char *const off[] = {"sandbox.pool_size=0", NULL};
	char dirs[3][256], sets[3][300], path[512], inst_a[80] = "",
						    id[SBX_SANDBOX_ID_MAX + 1] = "";
	const char *const d1[] = {"server.instance=default", sets[0], "sandbox.pool_size=0", NULL};
	const char *const d2[] = {"server.instance=default", sets[1], "sandbox.pool_size=0", NULL};
	const char *const d3[] = {"server.instance=default", sets[2], "sandbox.pool_size=0", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s2, sa, sb, sc;
	struct test_manager tm;
	sbx_manager *m2 = NULL, *ma = NULL, *mb = NULL;
	sbx_sandbox *x = NULL;
	char pid[32], *cid, *out;
	int r;

	for (int i = 0; i < 3; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%s/state-%d", state_root, i + 1);
		snprintf(sets[i], sizeof(sets[i]), "server.state_dir=%s", dirs[i]);
	}
	snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());

	/* The same instance and state folder. */
	test_manager_open(&tm, "inst", off, NULL);
	settings_for(&s2, tm.inst, off);
	r = sbx_manager_new(&s2, engine, &m2, &err);
	tap_is_int(r, -EBUSY, "a second manager on a live one's instance and state folder: EBUSY");
	tap_ok(m2 == NULL && strstr(err.msg, "already serves") && strstr(err.msg, tm.inst) &&
		   strstr(err.msg, pid),
	       "... saying which instance and which process holds it: %s", err.msg);
	m2 = sbx_manager_free(m2);
	test_manager_close(&tm, "nothing left");
	r = sbx_manager_new(&s2, engine, &m2, &err);
	tap_call(r, err.msg, "once the first is freed, the instance is free again");
	m2 = sbx_manager_free(m2);
	sbx_settings_release(&s2);

	/* server.instance left at "default", two state folders. */
	settings_for(&sa, "unused", d1);
	settings_for(&sb, "unused", d2);
	settings_for(&sc, "unused", d1);
	ma = manager(&sa, engine);
	mb = manager(&sb, engine);
	snprintf(inst_a, sizeof(inst_a), "%s", sbx_manager_instance(ma));
	if (!tap_ok(strncmp(inst_a, "default-", 8) == 0 &&
			strncmp(sbx_manager_instance(mb), "default-", 8) == 0 &&
			strcmp(inst_a, sbx_manager_instance(mb)) != 0,
		    "\"default\" becomes a name of its own per state folder: %s and %s", inst_a,
		    sbx_manager_instance(mb)))
		goto out; /* not with two managers on one instance of a shared engine */
	if (!tap_call(sbx_sandbox_create(ma, "alice", "mine", &x, &err), err.msg,
		      "the first creates a sandbox"))
		goto out;
	snprintf(id, sizeof(id), "%s", sbx_sandbox_id(x));
	tap_is_int(recover(mb), 0, "the second's recover adopts nothing of it");
	mb = sbx_manager_free(mb); /* removes its own sandboxes: none */
	cid = container_of(inst_a, id);
	tap_ok(cid != NULL, "the second's exit leaves the first's container alone");
	free(cid);
	out = shell_out(ma, x, "echo alive");
	tap_is_str(out, "alive\n", "and the first's sandbox answers");
	free(out);
	r = sbx_manager_new(&sc, engine, &m2, &err);
	tap_ok(r == -EBUSY && strstr(err.msg, inst_a),
	       "a third on the first's state folder, \"default\" too, is refused: %s", err.msg);
	x = sbx_sandbox_unref(x);
	ma = sbx_manager_free(ma);
	tap_is_int(count_instance(inst_a), 0, "the first removes its sandbox when freed");
	ma = manager(&sc, engine);
	tap_is_str(sbx_manager_instance(ma), inst_a, "the name is kept: the next start has it too");
	ma = sbx_manager_free(ma);

	/* A state folder from before, with an instance-default folder. */
	snprintf(path, sizeof(path), "%s/instance-default", dirs[2]);
	if (mkdir(dirs[2], 0700) < 0 || mkdir(path, 0700) < 0)
		tap_bail("mkdir");
	settings_for(&s2, "unused", d3);
	m2 = manager(&s2, engine);
	tap_is_str(sbx_manager_instance(m2), "default",
		   "a state folder with an instance-default folder keeps \"default\"");
	m2 = sbx_manager_free(m2);
	sbx_settings_release(&s2);
out:
	sbx_sandbox_unref(x);
	sbx_manager_free(ma);
	sbx_manager_free(mb);
	if (inst_a[0])
		tap_is_int(count_instance(inst_a), 0, "nothing of the first is left");
	sbx_settings_release(&sa);
	sbx_settings_release(&sb);
	sbx_settings_release(&sc);
}

/* A manager on the state folder DIR (server.instance INST, no pool): its
 * sbx_manager_new's result, the message in ERR; a manager made is freed. */
static int manager_on(const char *dir, const char *inst, struct sbx_error *err)
{
	char set_dir[300];
	const char *const extra[] = {set_dir, "sandbox.pool_size=0", NULL};
	struct sbx_settings s;
	sbx_manager *m = NULL;
	int r;

	snprintf(set_dir, sizeof(set_dir), "server.state_dir=%s", dir);
	settings_for(&s, inst, extra);
	sbx_error_clear(err);
	r = sbx_manager_new(&s, engine, &m, err);
	if (r < 0 && m)
		r = -EPROTO; /* a failure must not leave a manager */
	sbx_manager_free(m);
	sbx_settings_release(&s);
	return r;
}

/* Another local user must not be able to plant state files or lock files:
 * a state folder or an instance folder that its group (or anyone) may
 * write to is refused, and so is a lock file or a default-instance file
 * that is not a plain file of ours (the lock file, a symbolic link to a
 * file of ours, is neither followed nor truncated). */
static void test_state_safety(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char dir[256], path[512], target[300], inst[80], buf[64] = "";
	ssize_t n;
	int r, fd;

	snprintf(inst, sizeof(inst), "%s-safe", instance);

	snprintf(dir, sizeof(dir), "%s/safe-ok", state_root);
	if (mkdir(dir, 0700) < 0 || chmod(dir, 0755) < 0)
		tap_bail("mkdir");
	r = manager_on(dir, inst, &err);
	tap_call(r, err.msg, "a state folder of ours that only we may write to (0755) is used");

	snprintf(dir, sizeof(dir), "%s/safe-group", state_root);
	if (mkdir(dir, 0700) < 0 || chmod(dir, 0770) < 0)
		tap_bail("mkdir");
	r = manager_on(dir, inst, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "writable by its group"),
	       "a group-writable state folder is refused: %s", err.msg);
	snprintf(path, sizeof(path), "%s/instance-%s.lock", dir, inst);
	tap_ok(access(path, F_OK) != 0, "... before anything is written in it");

	snprintf(dir, sizeof(dir), "%s/safe-world", state_root);
	if (mkdir(dir, 0700) < 0 || chmod(dir, 01777) < 0)
		tap_bail("mkdir");
	r = manager_on(dir, inst, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "writable by everyone"),
	       "a world-writable (sticky) state folder is refused: %s", err.msg);

	snprintf(dir, sizeof(dir), "%s/safe-inst", state_root);
	snprintf(path, sizeof(path), "%s/instance-%s", dir, inst);
	if (mkdir(dir, 0700) < 0 || mkdir(path, 0700) < 0 || chmod(path, 0770) < 0)
		tap_bail("mkdir");
	r = manager_on(dir, inst, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "instance folder") &&
		   strstr(err.msg, "writable by its group"),
	       "a group-writable instance folder is refused: %s", err.msg);

	/* A lock file that is a symbolic link to a file of ours. */
	snprintf(dir, sizeof(dir), "%s/safe-link", state_root);
	snprintf(target, sizeof(target), "%s/safe-link-target", state_root);
	snprintf(path, sizeof(path), "%s/instance-%s.lock", dir, inst);
	fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (mkdir(dir, 0700) < 0 || fd < 0 || write(fd, "keep\n", 5) != 5 ||
	    symlink(target, path) < 0)
		tap_bail("set up the symbolic link");
	close(fd);
	r = manager_on(dir, inst, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "symbolic link"),
	       "a lock file that is a symbolic link is refused: %s", err.msg);
	fd = open(target, O_RDONLY);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
	tap_is_str(buf, "keep\n", "... and the file it points to is neither locked nor truncated");

	/* A lock file that is a FIFO. */
	snprintf(dir, sizeof(dir), "%s/safe-fifo", state_root);
	snprintf(path, sizeof(path), "%s/instance-%s.lock", dir, inst);
	if (mkdir(dir, 0700) < 0 || mkfifo(path, 0600) < 0)
		tap_bail("mkfifo");
	r = manager_on(dir, inst, &err);
	tap_ok(r == -EPERM && strstr(err.msg, "not a plain file"),
	       "a lock file that is a FIFO is refused: %s", err.msg);

	/* A default-instance file that is a FIFO holding a name. */
	snprintf(dir, sizeof(dir), "%s/safe-dflt", state_root);
	snprintf(path, sizeof(path), "%s/default-instance", dir);
	if (mkdir(dir, 0700) < 0 || mkfifo(path, 0600) < 0)
		tap_bail("mkfifo");
	fd = open(path, O_RDWR | O_NONBLOCK); /* a writer: opening it to read does not wait */
	if (fd < 0 || write(fd, "default-planted\n", 16) != 16)
		tap_bail("write the FIFO");
	r = manager_on(dir, "default", &err);
	tap_ok(r < 0, "a default-instance file that is a FIFO is not read: %s", err.msg);
	close(fd);
}

/* A sandbox taken from the pool and then unused is put to sleep
 * (sandbox.idle_timeout=2s; where the engine keeps a stopped container)
 * keeping its state file, then reaped (sandbox.sleep_lifetime=3s: long
 * enough for a loaded machine's describe to see it asleep first): its
 * container and its state file go, a get says it expired, and the pool
 * refills. */
static void test_reap_pooled(void)
{
	const char *const extra[] = {"sandbox.pool_size=1", "sandbox.idle_timeout=2s",
				     "sandbox.sleep_lifetime=3s", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_pool_stats st;
	struct test_manager tm;
	struct stat fst;
	sbx_manager *m;
	sbx_sandbox *a = NULL, *x = NULL;
	char id[SBX_SANDBOX_ID_MAX + 1] = "", *cid = NULL;
	double t0;
	int r = 0;

	m = test_manager_open(&tm, "reap", extra, NULL);
	recover(m);
	tap_ok(wait_pool(m, 1, 60), "a pool of one fills");
	r = sbx_sandbox_create(m, "alice", "reap-me", &a, &err);
	sbx_manager_pool_stats(m, &st);
	if (!tap_ok(r == 0 && st.taken == 1, "create a sandbox from the pool (%s)", err.msg))
		goto out;
	snprintf(id, sizeof(id), "%s", sbx_sandbox_id(a));
	tap_ok(state_file(tm.inst, id, &fst), "its assignment is in the state folder");
	t0 = now_ms();
	if (sbx_engine_restart_keeps(engine)) {
		struct sbx_sandbox_info in = {0};
		bool asleep = false;
		while (!asleep && now_ms() - t0 < 60000) {
			if (sbx_sandbox_describe(m, a, &in, NULL) == 0) {
				asleep = strcmp(in.status, "sleeping") == 0;
				sbx_sandbox_info_release(&in);
			}
			if (!asleep)
				usleep(100000);
		}
		tap_ok(asleep && state_file(tm.inst, id, &fst),
		       "unused, it is put to sleep, its state file kept (%.1f s)",
		       (now_ms() - t0) / 1000);
	}
	do {
		sbx_error_clear(&err);
		r = sbx_sandbox_get(m, "alice", "reap-me", &x, &err);
		x = sbx_sandbox_unref(x);
		if (r == 0)
			usleep(200000);
	} while (r == 0 && now_ms() - t0 < 60000);
	tap_ok(r == -ENOENT && strstr(err.msg, "expired"),
	       "unused, it is removed within 60 s (%.1f s): %s", (now_ms() - t0) / 1000, err.msg);
	do {
		free(cid);
		cid = container_of(tm.inst, id);
		if (cid)
			usleep(200000);
	} while (cid && now_ms() - t0 < 90000);
	tap_ok(cid == NULL, "its container is gone");
	/* The reaper removes the state file after the container: give it the
	 * same time (under ASan the gap can be seen). */
	while (state_file(tm.inst, id, &fst) && now_ms() - t0 < 90000)
		usleep(100000);
	tap_ok(!state_file(tm.inst, id, &fst), "and its state file");
	tap_ok(wait_pool(m, 1, 60), "the pool refills");
out:
	free(cid);
	sbx_sandbox_unref(a);
	test_manager_close(&tm, "nothing left");
}

int main(int argc, char **argv)
{
	static const char *const defaults[] = {state_dir, NULL};
	const char *only = getenv("SBX_POOL_ONLY");
	char rm[300];

	if (argc >= 3 && strncmp(argv[2], "unix://", 7) != 0) {
		printf("1..0 # SKIP needs a unix:// engine URL\n");
		return 0;
	}
	fixture_init(argc, argv, "pool");
	if (!mkdtemp(state_root))
		tap_bail("mkdtemp");
	snprintf(state_dir, sizeof(state_dir), "server.state_dir=%s", state_root);
	fixture_settings = defaults;

	/* SBX_POOL_ONLY=grow runs that part alone (tools/mutants). */
	if (!only || strcmp(only, "grow") != 0) {
		test_fill_take_refill();
		test_pool_off();
		test_limit();
		test_names_race();
		test_recover();
		test_engine_down();
		test_dead_pooled();
		test_warm_interp();
		test_reap_pooled();
		test_instances();
		test_state_safety();
		/* A few rounds each: enough to see every create come from the pool
		 * (or none), not to time it; bench/bench-sleep times pooled and cold
		 * against each other. */
		measure(true, 4);
		measure(false, 4);
		measure_first_call(true, 3);
		measure_first_call(false, 3);
	}
	test_grow();
	test_grow_refused();

	{
		static const char *const parts[] = {"fill",	"off",	"max",	      "race",
						    "rec",	"down", "dead",	      "p50-pool",
						    "p50-cold", "warm", "first-pool", "first-cold",
						    "reap",	"inst", "grow",	      "grow2"};
		size_t left = 0;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(parts); i++) {
			char inst[80];
			snprintf(inst, sizeof(inst), "%s-%s", instance, parts[i]);
			left += count_instance(inst);
		}
		tap_is_int(left, 0, "no container of this run is left");
	}
	snprintf(rm, sizeof(rm), "rm -rf '%s'", state_root);
	if (system(rm) != 0)
		tap_diag("could not remove %s", state_root);
	return fixture_end();
}
