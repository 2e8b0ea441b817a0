/* SPDX-License-Identifier: MIT */
/*
 * The sandbox manager against a real engine: tests/test-sandbox [--rootless] TYPE URL [IMAGE].
 * --rootless: the engine is a rootless Podman (tests/sandbox-rootless.engine),
 * whose limits test_limits expects as they really are (see there).
 * Every manager here uses an instance name unique to this run, and the suite
 * ends by checking that no container of those instances is left.
 * SBX_SANDBOX_ONLY=basics runs only the first manager's basic cases (owners,
 * limits, shell, Python, uploads and artifacts), =delete only test_delete
 * (max_sandboxes, another owner's deletes), =dead-asleep only
 * test_dead_asleep: for make mutants.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"
#include "sbx/utf8.h"
#include "sandbox-fixture.h"
#include "sandbox/sandbox-internal.h"
#include "tap.h"

/* Whether to run PART: all of them unless SBX_SANDBOX_ONLY names one. */
static bool only(const char *part)
{
	const char *want = getenv("SBX_SANDBOX_ONLY");

	return !want || !*want || !strcmp(want, part);
}

/* Whether every part runs (no SBX_SANDBOX_ONLY). */
static bool all_parts(void)
{
	return only("");
}

static bool shell_cancel_after_500ms(void *ud)
{
	struct timespec *t0 = ud, now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000 > 500;
}

static bool has_file(const struct sbx_run_result *r, const char *path, int64_t size)
{
	for (size_t i = 0; i < r->n_files; i++)
		if (strcmp(r->files[i].path, path) == 0 && (size < 0 || r->files[i].size == size))
			return true;
	return false;
}

static void diag_files(const struct sbx_run_result *r)
{
	for (size_t i = 0; i < r->n_files; i++)
		tap_diag("  file %s (%lld)", r->files[i].path, (long long)r->files[i].size);
}

static void test_utf8(void)
{
	struct sbx_buf b = SBX_BUF_INIT;
	sbx_buf_append(&b, "ok \xff\xfe a\xc3\xa9 \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98\x80 \xc3", 24);
	tap_ok(!sbx_utf8_valid(b.data, b.len), "invalid UTF-8 is detected");
	tap_ok(sbx_utf8_sanitize(&b) > 0, "sanitize replaces something");
	tap_is_str(b.data,
		   "ok \xef\xbf\xbd\xef\xbf\xbd a\xc3\xa9 \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd"
		   "\xef\xbf\xbd \xf0\x9f\x98\x80 \xef\xbf\xbd",
		   "maximal subparts become U+FFFD, valid characters stay");
	tap_ok(sbx_utf8_valid(b.data, b.len), "the result is valid");
	tap_is_int(sbx_utf8_sanitize(&b), 0, "valid input is left alone");
	sbx_buf_release(&b);
}

static void test_create_get_list(sbx_manager *m, sbx_sandbox **ret_a, sbx_sandbox **ret_named)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *a = NULL, *named = NULL, *x = NULL, *bobs = NULL;
	struct sbx_sandbox_info *list = NULL, info = {0};
	size_t n = 0;
	int r;

	r = sbx_sandbox_create(m, "alice", NULL, &a, &err);
	if (!tap_ok(r == 0 && a, "create a sandbox without a name (%s)", err.msg))
		tap_bail("cannot create a sandbox");
	tap_ok(strlen(sbx_sandbox_id(a)) == 12, "its id is 12 characters: %s", sbx_sandbox_id(a));
	tap_is_str(sbx_sandbox_name(a), sbx_sandbox_id(a), "without a name, the name is the id");
	r = sbx_sandbox_create(m, "alice", "work", &named, &err);
	if (!tap_ok(r == 0 && named, "create a sandbox named work (%s)", err.msg))
		tap_bail("cannot create a sandbox");
	tap_is_str(sbx_sandbox_name(named), "work", "it has the name");
	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, "alice", "work", &x, &err);
	tap_is_int(r, -EEXIST, "a second sandbox named work: EEXIST (%s)", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, "alice", "bad name", &x, &err);
	tap_is_int(r, -EINVAL, "a name with a space: EINVAL (%s)", err.msg);
	r = sbx_sandbox_create(m, "alice", "../x", &x, &err);
	tap_is_int(r, -EINVAL, "a name with a slash: EINVAL");
	r = sbx_sandbox_create(m, "alice", "", &x, &err);
	tap_is_int(r, -EINVAL, "an empty name: EINVAL");
	r = sbx_sandbox_create(m, "alice",
			       "a123456789b123456789c123456789d123456789e123456789f123456789g1234",
			       &x, &err);
	tap_is_int(r, -EINVAL, "a 65-character name: EINVAL");
	tap_ok(x == NULL, "failed creates return nothing");

	r = sbx_sandbox_get(m, "alice", sbx_sandbox_id(named), &x, &err);
	tap_ok(r == 0 && x == named, "get by id finds it");
	x = sbx_sandbox_unref(x);
	r = sbx_sandbox_get(m, "alice", "work", &x, &err);
	tap_ok(r == 0 && x == named, "get by name finds it");
	x = sbx_sandbox_unref(x);
	sbx_error_clear(&err);
	r = sbx_sandbox_get(m, "bob", "work", &x, &err);
	tap_is_int(r, -ENOENT, "another owner does not see it by name (%s)", err.msg);
	r = sbx_sandbox_get(m, "bob", sbx_sandbox_id(a), &x, &err);
	tap_is_int(r, -ENOENT, "another owner does not see it by id");
	r = sbx_sandbox_get(m, "alice", "nope", &x, &err);
	tap_is_int(r, -ENOENT, "an unknown name: ENOENT");
	r = sbx_sandbox_delete(m, "bob", "work", &err);
	tap_is_int(r, -ENOENT, "another owner cannot delete it");

	r = sbx_sandbox_create(m, "bob", "work", &bobs, &err);
	tap_ok(r == 0, "another owner may use the same name (%s)", err.msg);

	r = sbx_manager_list(m, "alice", &list, &n, &err);
	tap_ok(r == 0, "list (%s)", err.msg);
	tap_is_int(n, 2, "alice has two sandboxes");
	if (n == 2) {
		tap_is_str(list[0].id, sbx_sandbox_id(a), "oldest first");
		tap_is_str(list[1].name, "work", "the named one second");
		tap_is_str(list[0].owner, "alice", "owner listed");
		tap_is_str(list[0].status, "running", "status running");
		tap_is_str(list[0].image, image, "image listed");
		tap_ok(list[0].created > 0 && list[0].last_used >= list[0].created,
		       "created and last_used set");
		tap_ok(list[0].packages && !list[0].packages[0], "no packages yet");
	}
	sbx_sandbox_info_list_free(list, n);
	r = sbx_manager_list(m, "carol", &list, &n, &err);
	tap_ok(r == 0 && n == 0, "carol has none");
	sbx_sandbox_info_list_free(list, n);

	r = sbx_sandbox_describe(m, named, &info, &err);
	tap_ok(r == 0, "describe (%s)", err.msg);
	tap_is_str(info.name, "work", "describe gives the name");
	tap_is_str(info.status, "running", "describe gives the status");
	sbx_sandbox_info_release(&info);

	if (bobs) {
		tap_ok(sbx_sandbox_delete(m, "bob", "work", &err) == 0, "bob deletes his (%s)",
		       err.msg);
		r = sbx_sandbox_describe(m, bobs, &info, &err);
		tap_ok(r == 0 && info.status && strcmp(info.status, "missing") == 0,
		       "a held reference to a deleted sandbox describes as missing");
		sbx_sandbox_info_release(&info);
		r = sbx_sandbox_get(m, "bob", "work", &x, &err);
		tap_is_int(r, -ENOENT, "a deleted sandbox is gone");
		r = sbx_sandbox_delete(m, "bob", "work", &err);
		tap_is_int(r, -ENOENT, "deleting it again: ENOENT");
		sbx_sandbox_unref(bobs);
	}
	*ret_a = a;
	*ret_named = named;
}

/* The sandbox's memory, PID and CPU limits, as the engine reports them and as
 * the memory cgroup inside sees them. A rootful engine applies them all. A
 * rootless Podman on cgroup v1 (no cgroup v2 here) cannot: it creates the
 * container without them ("Resource limits are not supported and ignored on
 * cgroups V1 rootless systems"), so inspect says 0 and the sandbox sees the
 * host's memory; README's "Rootless Podman" says so. This is what it does, not
 * what it should: the day it applies them (cgroup v2), this test says so. */
static void test_limits(sbx_manager *m, sbx_sandbox *sb, const struct sbx_settings *s,
			bool rootless)
{
	struct sbx_container_info ci = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	_cleanup_free_ char *cid = container_of(instance, sbx_sandbox_id(sb));
	bool dropped = rootless && access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0;
	char want[32];

	if (!tap_ok(cid != NULL, "limits: the sandbox's container is found by its labels") ||
	    !tap_call(sbx_container_inspect(engine, cid, &ci, &err), err.msg, "limits: inspect"))
		return;
	if (dropped) {
		tap_is_int(ci.memory_bytes, 0, "limits: rootless on cgroup v1: no memory limit");
		tap_is_int(ci.pids_limit, 0, "limits: rootless on cgroup v1: no PID limit");
		tap_is_int(ci.nano_cpus, 0, "limits: rootless on cgroup v1: no CPU limit");
	} else {
		tap_is_int(ci.memory_bytes, s->sandbox.memory, "limits: memory limit");
		tap_is_int(ci.pids_limit, s->sandbox.pids_limit, "limits: PID limit");
		tap_is_int(ci.nano_cpus, s->sandbox.nano_cpus, "limits: CPU limit");
	}
	sbx_container_info_release(&ci);
	snprintf(want, sizeof(want), "%lld\n", (long long)s->sandbox.memory);
	if (shell(m, sb,
		  "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || "
		  "cat /sys/fs/cgroup/memory.max",
		  &res) == 0) {
		if (dropped)
			tap_ok(strcmp(res.out.data, want) != 0,
			       "limits: rootless on cgroup v1: the sandbox's memory cgroup has no "
			       "limit of %lld (%.30s)",
			       (long long)s->sandbox.memory, res.out.data);
		else
			tap_is_str(res.out.data, want, "limits: the sandbox's memory cgroup limit");
	}
	sbx_run_result_release(&res);
}

/* An engine that drops the limits (rootless Podman on cgroup v1) gets the
 * create refused unless sandbox.allow_unlimited says to run such sandboxes
 * (the suite runs with it on rootless): the refusal names what it dropped and
 * the setting, and no container is left. */
static void test_unlimited_refused(bool dropped)
{
	const char *const strict[] = {"sandbox.allow_unlimited=false", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s2;
	sbx_manager *m2;
	sbx_sandbox *sb = NULL;
	char inst[96];
	int r;

	snprintf(inst, sizeof(inst), "%s-strict", instance);
	settings_for(&s2, inst, strict);
	m2 = manager(&s2, engine);
	r = sbx_sandbox_create(m2, "alice", "strict", &sb, &err);
	if (dropped)
		tap_ok(r == -ENOTSUP && strstr(err.msg, "without its limits") &&
			   strstr(err.msg, "memory (sandbox.memory)") &&
			   strstr(err.msg, "sandbox.allow_unlimited"),
		       "limits dropped by the engine: the create is refused, naming them and "
		       "sandbox.allow_unlimited (%d %s)",
		       r, err.msg);
	else
		tap_ok(r == 0, "limits applied by the engine: the create goes on (%d %s)", r,
		       err.msg);
	sbx_sandbox_unref(sb);
	sbx_manager_free(m2);
	tap_is_int((int)count_instance(inst), 0, "no container of the strict manager is left");
	sbx_settings_release(&s2);
}

static void test_shell(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	int r;

	if (shell(m, sb, "echo out; echo err >&2; exit 3", &res) == 0) {
		tap_is_str(res.out.data, "out\n", "shell stdout");
		tap_is_str(res.err.data, "err\n", "shell stderr");
		tap_is_int(res.exit_code, 3, "shell exit code");
		tap_ok(!res.timed_out && !res.truncated, "not timed out nor truncated");
	}
	sbx_run_result_release(&res);

	if (shell(m, sb, "id -u; pwd", &res) == 0)
		tap_is_str(res.out.data, "1000\n/app/results\n", "runs as 1000 in /app/results");
	sbx_run_result_release(&res);

	if (shell(m, sb, "printf 'a\\377b\\n'", &res) == 0)
		tap_is_str(res.out.data,
			   "a\xef\xbf\xbd"
			   "b\n",
			   "invalid UTF-8 becomes U+FFFD");
	sbx_run_result_release(&res);

	if (shell(m, sb, "head -c 1000000 /dev/zero | tr '\\0' x", &res) == 0) {
		tap_ok(res.truncated, "big output is truncated");
		tap_ok(res.out.len <= 64 * 1024 && res.out.len > 1000, "kept at most the cap (%zu)",
		       res.out.len);
	}
	sbx_run_result_release(&res);

	memset(&res, 0, sizeof(res));
	{
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sbx_sandbox_run_shell(m, sb, "sleep 60", 1000, &res, &err);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		tap_ok(r == 0, "a command past its limit returns a result (%s)", err.msg);
		tap_ok(res.timed_out, "it says it timed out");
		tap_is_int(res.exit_code, -1, "exit code -1");
		tap_ok(t1.tv_sec - t0.tv_sec < 30, "well before the command would end");
	}
	sbx_run_result_release(&res);

	/* A flood of output does not hide the time limit. */
	memset(&res, 0, sizeof(res));
	r = sbx_sandbox_run_shell(m, sb, "yes", 1000, &res, &err);
	tap_ok(r == 0 && res.timed_out && res.truncated && res.exit_code == -1,
	       "`yes` stops at its limit, output cut (%s)", err.msg);
	sbx_run_result_release(&res);

	/* Cancellation kills the command's whole process tree. */
	{
		struct timespec t0, t1;
		struct sbx_run_opts o = {.cancelled = shell_cancel_after_500ms, .userdata = &t0};
		memset(&res, 0, sizeof(res));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sbx_sandbox_run_shell_ex(m, sb, "sleep 301 & sleep 302; echo never", &o, &res,
					     &err);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		tap_ok(r == 0, "a cancelled command returns a result (%s)", err.msg);
		tap_ok(res.cancelled && !res.timed_out && res.exit_code == -1,
		       "it says it was cancelled, exit code -1");
		tap_ok(t1.tv_sec - t0.tv_sec < 60, "well before the command would end");
		tap_ok(!res.out.data || !strstr(res.out.data, "never"),
		       "the command did not go on");
		sbx_run_result_release(&res);
	}
	/* no sleep 301/302 left behind (without procps: /proc) */
	if (shell(
		m, sb,
		"n=0; for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" "
		"in \"sleep 30\"[12]*) n=$((n+1));; esac; done; echo $n",
		&res) == 0)
		tap_is_str(res.out.data, "0\n", "no process of the cancelled command is left");
	sbx_run_result_release(&res);
	r = sbx_sandbox_run_shell(m, sb, NULL, 0, &res, &err);
	tap_is_int(r, -EINVAL, "no command: EINVAL");
}

static void test_python(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_run_result res;

	if (python(m, sb, "print('hi')\nimport os\nprint(os.getcwd())", &res) == 0) {
		tap_is_str(res.out.data, "hi\n/app/results\n", "python prints, in /app/results");
		tap_is_int(res.exit_code, 0, "python exits 0");
		tap_is_str(res.err.data, "", "no stderr, the report is stripped");
		tap_is_int(res.n_files, 0, "no files changed");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "x = 1\ndef f():\n    raise ValueError('boom')\nf()\n", &res) == 0) {
		tap_is_int(res.exit_code, 1, "an exception exits 1");
		tap_ok(strstr(res.err.data, "Traceback (most recent call last)") &&
			   strstr(res.err.data, "ValueError: boom") &&
			   strstr(res.err.data, "File \"<code>\", line 4") &&
			   strstr(res.err.data, "raise ValueError('boom')"),
		       "with the traceback on stderr");
		tap_ok(!strstr(res.err.data, "sbx-report"), "the report is not in stderr");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "print('bye')\nraise SystemExit(3)", &res) == 0) {
		tap_is_int(res.exit_code, 3, "SystemExit(3) exits 3");
		tap_is_str(res.out.data, "bye\n", "output before it is kept");
		tap_is_str(res.err.data, "", "no traceback for SystemExit");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "def broken(:\n", &res) == 0) {
		tap_is_int(res.exit_code, 1, "a syntax error exits 1");
		tap_ok(strstr(res.err.data, "SyntaxError") != NULL, "and says SyntaxError");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "open('keep.txt', 'w').write('same')\nopen('mod.txt', 'w').write('v1')\n",
		   &res) == 0) {
		tap_is_int(res.n_files, 2, "two new files reported");
		tap_ok(has_file(&res, "keep.txt", 4) && has_file(&res, "mod.txt", 2),
		       "keep.txt and mod.txt with sizes");
		diag_files(&res);
	}
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "import os\nos.makedirs('sub/deep', exist_ok=True)\n"
		   "open('sub/deep/new.txt', 'w').write('hello')\n"
		   "open('mod.txt', 'a').write('v2')\n"
		   "os.symlink('/etc/passwd', 'link.txt')\n",
		   &res) == 0) {
		tap_is_int(res.n_files, 2, "created and modified files reported");
		tap_ok(has_file(&res, "sub/deep/new.txt", 5), "a file in a new subfolder");
		tap_ok(has_file(&res, "mod.txt", 4), "a modified file");
		tap_ok(!has_file(&res, "keep.txt", -1), "an unchanged file is not reported");
		tap_ok(!has_file(&res, "link.txt", -1), "a symlink is not reported");
		diag_files(&res);
	}
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "import sys\n"
		   "sys.stderr.write('\\nsbx-report-00000000000000000000000000000000 "
		   "{\"rc\": 0, \"files\": [[\"evil.txt\", 1]], \"more\": false, \"trunc\": "
		   "false}\\n')\n"
		   "print('sbx-report-x {\"rc\": 7, \"files\": [[\"evil2\", 1]]}')\n"
		   "open('real.txt', 'w').write('r')\n"
		   "sys.exit(2)\n",
		   &res) == 0) {
		tap_ok(res.n_files == 1 && has_file(&res, "real.txt", 1),
		       "a forged report is not believed, the real one is");
		tap_is_int(res.exit_code, 2, "the real exit code");
		tap_ok(strstr(res.err.data, "evil.txt") != NULL, "the forged text stays in stderr");
		diag_files(&res);
	}
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "import sys\nsys.stdout.write('y' * 500000)\nsys.stderr.write('z' * 500000)\n"
		   "open('capped.txt', 'w').write('c')\n",
		   &res) == 0) {
		tap_ok(res.truncated, "output beyond the cap is truncated");
		tap_ok(res.out.len + res.err.len <= 64 * 1024, "at most the cap is kept (%zu+%zu)",
		       res.out.len, res.err.len);
		tap_ok(res.n_files == 1 && has_file(&res, "capped.txt", 1),
		       "files are still reported past the cap");
		tap_ok(!strstr(res.err.data, "sbx-report"), "no report text in the output");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "import os\nopen('hard.txt', 'w').write('h')\nos._exit(5)\n", &res) ==
	    0) {
		tap_is_int(res.exit_code, 5, "os._exit(5) exits 5");
		tap_ok(res.interpreter_restarted && res.notice && strstr(res.notice, "ended"),
		       "and says the interpreter ended (%s)",
		       res.notice ? res.notice : "no notice");
	}
	sbx_run_result_release(&res);
	if (python(m, sb, "print(1)", &res) == 0)
		tap_ok(strcmp(res.out.data, "1\n") == 0 && !res.interpreter_restarted,
		       "the next call runs in a new interpreter, reported once");
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "import os\nos.makedirs('many', exist_ok=True)\n"
		   "for i in range(150):\n    open('many/f%03d' % i, 'w').write('m')\n",
		   &res) == 0) {
		tap_is_int(res.n_files, 100, "at most 100 files reported");
		tap_ok(res.files_truncated, "with files_truncated");
	}
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "print('{\"t\":\"r\",\"id\":1,\"rc\":9,\"files\":[{\"p\":\"x\",\"s\":1}]}')\n"
		   "import sys, subprocess\n"
		   "sys.__stdout__.write('{\"t\":\"o\",\"id\":1,\"fd\":1,\"s\":\"forged\"}\\n')\n"
		   "subprocess.run(['echo', '{\"t\":\"r\",\"rc\":8}'])\n",
		   &res) == 0)
		tap_ok(res.exit_code == 0 && res.n_files == 0 && strstr(res.out.data, "\"rc\":8") &&
			   strstr(res.out.data, "forged"),
		       "protocol-like prints (also from a subprocess) are only output");
	sbx_run_result_release(&res);

	{
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (python(m, sb,
			   "import subprocess\nsubprocess.Popen(['sleep', '30'])\n"
			   "print('started')\n",
			   &res) == 0)
			tap_is_str(res.out.data, "started\n", "code that leaves a process behind");
		clock_gettime(CLOCK_MONOTONIC, &t1);
		tap_ok(t1.tv_sec - t0.tv_sec < 10, "returns without waiting for it (%lds)",
		       (long)(t1.tv_sec - t0.tv_sec));
		sbx_run_result_release(&res);
	}

	if (python(m, sb, "import sys\nprint(sys.stdin.read() == '')\n", &res) == 0)
		tap_is_str(res.out.data, "True\n", "the code's stdin is empty");
	sbx_run_result_release(&res);
}

/* ---- the persistent interpreter ---- */

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

struct streamed {
	struct timespec t0;
	int calls;
	double first_ms;
	struct sbx_buf text;
	bool fd_ok;
};

static void on_output(void *ud, int fd, const char *text, size_t len)
{
	struct streamed *s = ud;
	if (s->calls++ == 0)
		s->first_ms = ms_since(&s->t0);
	s->fd_ok = s->fd_ok && fd == 1;
	sbx_buf_append(&s->text, text, len);
}

static bool cancel_after_500ms(void *ud)
{
	return ms_since(ud) > 500;
}

struct py_racer {
	sbx_manager *m;
	sbx_sandbox *sb;
	const char *code;
	int r;
	char out[64];
};

static void *race_python(void *arg)
{
	struct py_racer *x = arg;
	struct sbx_run_result res = {0};
	x->r = sbx_sandbox_run_python(x->m, x->sb, x->code, 0, &res, NULL);
	if (x->r == 0)
		snprintf(x->out, sizeof(x->out), "%s", res.out.data);
	sbx_run_result_release(&res);
	return NULL;
}

/* A field of /proc/self/status in kB (NAME with its colon), or -1. */
static long proc_status_kb(const char *name)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, name, strlen(name)) == 0) {
			kb = strtol(line + strlen(name), NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return kb;
}

/* Resets this process's peak resident size (VmHWM) to its current size. */
static bool reset_peak_memory(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, "5", 1) == 1;

	if (fd >= 0)
		close(fd);
	return ok;
}

static const struct sbx_file_change *file_named(const struct sbx_run_result *r, const char *path)
{
	for (size_t i = 0; i < r->n_files; i++)
		if (strcmp(r->files[i].path, path) == 0)
			return &r->files[i];
	return NULL;
}

static void test_interpreter(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	struct timespec t0;
	double ms;

	/* State persists; an exception keeps the interpreter. */
	if (python(m, sb, "import json\nx = 41\nf = open('persist.txt', 'w')\n", &res) == 0)
		tap_is_int(res.exit_code, 0, "define a variable, an import, an open file");
	sbx_run_result_release(&res);
	if (python(m, sb, "f.write(json.dumps(x + 1))\nf.close()\nprint(x + 1)\n", &res) == 0) {
		tap_is_str(res.out.data, "42\n", "variables and imports persist");
		tap_ok(has_file(&res, "persist.txt", 2), "the file opened before is written now");
		tap_ok(!res.interpreter_restarted && !res.notice, "no restart, no notice");
	}
	sbx_run_result_release(&res);
	if (python(m, sb, "y = 5\nraise KeyError('k')\n", &res) == 0)
		tap_ok(res.exit_code == 1 && strstr(res.err.data, "KeyError"),
		       "an uncaught exception: exit 1 and its traceback");
	sbx_run_result_release(&res);
	if (python(m, sb, "print(x, y)\n", &res) == 0)
		tap_is_str(res.out.data, "41 5\n", "the interpreter lives on after the exception");
	sbx_run_result_release(&res);

	/* run_shell while the interpreter holds state. */
	if (shell(m, sb, "echo from-shell", &res) == 0)
		tap_is_str(res.out.data, "from-shell\n", "run_shell works beside the interpreter");
	sbx_run_result_release(&res);

	/* The time limit: an interrupt keeps the state. What is asserted is what
	 * happened, in order (the output, then the interrupt at the limit, not
	 * before it); the upper bound only proves that the loop was stopped. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		struct sbx_run_opts o = {.timeout_ms = 1000};
		if (python_opts(m, sb, "print('looping')\nwhile True:\n    pass\n", &o, &res) ==
		    0) {
			ms = ms_since(&t0);
			tap_ok(res.timed_out && res.exit_code == 1 && ms >= 1000 && ms < 30000,
			       "while True: pass is stopped at its limit, not before (%.0f ms)",
			       ms);
			tap_ok(strstr(res.err.data, "KeyboardInterrupt") != NULL,
			       "with a KeyboardInterrupt traceback");
			tap_ok(!res.interpreter_restarted && res.notice &&
				   strstr(res.notice, "interrupted") && strstr(res.notice, "kept"),
			       "the notice says interrupted, state kept (%s)",
			       res.notice ? res.notice : "none");
			tap_is_str(res.out.data, "looping\n", "its output before the interrupt");
		}
		sbx_run_result_release(&res);
	}
	if (python(m, sb, "print(x)\n", &res) == 0)
		tap_is_str(res.out.data, "41\n", "the next call answers, state kept");
	sbx_run_result_release(&res);
	{
		struct sbx_run_opts o = {.timeout_ms = 1000};
		if (python_opts(m, sb, "import time\ntime.sleep(30)\n", &o, &res) == 0)
			tap_ok(res.timed_out && !res.interpreter_restarted,
			       "time.sleep(30) is interrupted too");
		sbx_run_result_release(&res);
	}

	/* Code that ignores KeyboardInterrupt is killed; the interpreter restarts. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		struct sbx_run_opts o = {.timeout_ms = 1000};
		if (python_opts(m, sb,
				"print('stubborn')\nwhile True:\n    try:\n        while True:\n"
				"            pass\n    except KeyboardInterrupt:\n        pass\n",
				&o, &res) == 0) {
			ms = ms_since(&t0);
			tap_ok(res.timed_out && res.exit_code == -1 && res.interpreter_restarted,
			       "code ignoring the interrupt is killed (%.0f ms)", ms);
			tap_ok(ms < 1000 + 2000 + 15000, "within limit + grace + restart");
			tap_ok(res.notice && strstr(res.notice, "killed") &&
				   strstr(res.notice, "restarted"),
			       "the notice says killed and restarted (%s)",
			       res.notice ? res.notice : "none");
			tap_is_str(res.out.data, "stubborn\n", "its output is kept");
		}
		sbx_run_result_release(&res);
	}
	if (python(m, sb, "print(globals().get('x'))\n", &res) == 0) {
		tap_is_str(res.out.data, "None\n",
			   "after the kill the state is reset, no stale output");
		tap_ok(!res.interpreter_restarted, "and the restart was reported once");
	}
	sbx_run_result_release(&res);

	/* Code blocked in C with the GIL held and SIGINT blocked: only the exec
	 * kill reaches it. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		struct sbx_run_opts o = {.timeout_ms = 1000};
		if (python_opts(m, sb,
				"import ctypes, signal\nw = 1\n"
				"signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
				"ctypes.PyDLL(None).sleep(60)\n",
				&o, &res) == 0) {
			ms = ms_since(&t0);
			tap_ok(res.timed_out && res.interpreter_restarted &&
				   ms < 1000 + 2000 + 20000,
			       "code blocked in C holding the GIL is killed too (%.0f ms)", ms);
		}
		sbx_run_result_release(&res);
	}
	if (python(m, sb, "print(globals().get('w'))\n", &res) == 0)
		tap_is_str(res.out.data, "None\n",
			   "and the next call answers in a new interpreter");
	sbx_run_result_release(&res);

	/* Streaming. */
	{
		struct streamed st = {.fd_ok = true};
		struct sbx_run_opts o = {.on_output = on_output, .userdata = &st};
		clock_gettime(CLOCK_MONOTONIC, &st.t0);
		if (python_opts(m, sb,
				"import time\nfor i in range(4):\n    print('tick', i)\n"
				"    time.sleep(0.3)\n",
				&o, &res) == 0) {
			ms = ms_since(&st.t0);
			tap_ok(st.calls >= 4, "output streams as produced (%d callbacks)",
			       st.calls);
			tap_ok(st.first_ms < ms - 600,
			       "the first text came early (%.0f of %.0f ms)", st.first_ms, ms);
			tap_ok(st.text.data && strcmp(st.text.data, res.out.data) == 0 && st.fd_ok,
			       "the streamed text is the result's stdout");
		}
		sbx_run_result_release(&res);
		sbx_buf_release(&st.text);
	}

	/* Cancellation. */
	if (python(m, sb, "z = 'kept'\n", &res) == 0)
		sbx_run_result_release(&res);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		struct sbx_run_opts o = {.cancelled = cancel_after_500ms, .userdata = &t0};
		if (python_opts(m, sb, "import time\ntime.sleep(30)\n", &o, &res) == 0) {
			ms = ms_since(&t0);
			tap_ok(res.cancelled && !res.timed_out && ms >= 500 && ms < 20000,
			       "a cancelled call stops after the cancel, before the sleep ends "
			       "(%.0f ms)",
			       ms);
			tap_ok(res.notice && strstr(res.notice, "cancelled"), "the notice says so");
		}
		sbx_run_result_release(&res);
	}
	if (python(m, sb, "print(z)\n", &res) == 0)
		tap_is_str(res.out.data, "kept\n", "state survives the cancellation");
	sbx_run_result_release(&res);

	/* Killed from outside. */
	/* pkill -9 -f, without procps (not in every image). */
	if (shell(m, sb,
		  "n=0; pat=sbx-in; pat=${pat}terp; for p in /proc/[0-9]*; do "
		  "case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in *\" $pat \") "
		  "kill -9 ${p#/proc/} && n=$((n+1));; esac; done; echo $n",
		  &res) == 0)
		tap_is_str(res.out.data, "1\n", "kill -9 the interpreter via run_shell");
	sbx_run_result_release(&res);
	if (python(m, sb, "print(globals().get('z'))\n", &res) == 0) {
		tap_is_str(res.out.data, "None\n", "the next call runs in a new interpreter");
		tap_ok(res.interpreter_restarted && res.notice && strstr(res.notice, "had ended"),
		       "and says it was restarted (%s)", res.notice ? res.notice : "none");
	}
	sbx_run_result_release(&res);

	/* Lines the sandbox's code writes on the protocol's own descriptor (it
	 * runs in the interpreter's process): a result planted for the next
	 * call ahead of it, and a hello with a pid of its choosing just before
	 * the interpreter dies, are both dropped. */
	if (python(
		m, sb,
		"import gc, os, threading, time\n"
		"p = [o for o in gc.get_objects() if isinstance(o, dict) and 'PROTO_OUT' in o][0]\n"
		"me = p['CUR'].id\n"
		"def plant():\n"
		"    time.sleep(0.5)\n"
		"    for k in range(me + 1, me + 4):\n"
		"        os.write(p['PROTO_OUT'], ('{\"t\":\"a\",\"id\":%d}\\n"
		"{\"t\":\"o\",\"id\":%d,\"fd\":1,\"s\":\"forged\\\\n\"}\\n"
		"{\"t\":\"r\",\"id\":%d,\"rc\":0,\"files\":[]}\\n' % (k, k, k)).encode())\n"
		"threading.Thread(target=plant).start()\n"
		"print('planted')\n",
		&res) == 0)
		tap_is_str(res.out.data, "planted\n", "code plants result lines for the next ids");
	sbx_run_result_release(&res);
	usleep(1500000);
	if (python(m, sb, "print('real')\n", &res) == 0)
		tap_is_str(res.out.data, "real\n",
			   "the next call's result is its own, not the planted one");
	sbx_run_result_release(&res);
	if (python(
		m, sb,
		"import gc, os, threading, time\n"
		"p = [o for o in gc.get_objects() if isinstance(o, dict) and 'PROTO_OUT' in o][0]\n"
		"def forge():\n"
		"    time.sleep(0.5)\n"
		"    os.write(p['PROTO_OUT'], b'{\"t\":\"hello\",\"v\":1,\"pid\":999999,"
		"\"pgid\":999999}\\n')\n"
		"    os.kill(os.getpid(), 9)\n"
		"threading.Thread(target=forge).start()\n"
		"print('forging')\n",
		&res) == 0)
		tap_is_str(res.out.data, "forging\n", "code writes a hello of its own, then dies");
	sbx_run_result_release(&res);
	usleep(1500000);
	if (python(m, sb, "import os\nprint(os.getpid())\n", &res) == 0) {
		long real = strtol(res.out.data ? res.out.data : "0", NULL, 10),
		     known = sbx_interp_pid(sb);
		tap_ok(res.interpreter_restarted && real > 0 && known == real,
		       "the new interpreter's pid is the one it said (%ld), not the forged one "
		       "(%ld known)",
		       real, known);
	}
	sbx_run_result_release(&res);

	/* A 50 MB print is capped, and this process's memory stays bounded: its
	 * peak resident size (VmHWM, reset to the current size first where the
	 * kernel lets us) grows by far less than the 50 MB that keeping the
	 * whole print, even for a moment, would take. */
	{
		bool reset = reset_peak_memory();
		long rss0 = proc_status_kb("VmRSS:"), peak0 = proc_status_kb("VmHWM:"), peak1;
		long growth;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (python(m, sb,
			   "print('x' * 50000000)\nprint('after', file=__import__('sys').stderr)\n",
			   &res) == 0) {
			tap_ok(res.truncated && res.out.len + res.err.len <= 64 * 1024,
			       "a 50 MB print is cut at the cap (%zu bytes kept, %.0f ms)",
			       res.out.len + res.err.len, ms_since(&t0));
			tap_ok(res.notice && strstr(res.notice, "cut"), "with a note (%s)",
			       res.notice ? res.notice : "none");
		}
		sbx_run_result_release(&res);
		peak1 = proc_status_kb("VmHWM:");
		growth = peak1 - (reset ? rss0 : peak0);
		if (!reset)
			tap_diag("VmHWM could not be reset: the growth is over the earlier peak");
		tap_ok(rss0 > 0 && peak0 > 0 && peak1 > 0 && growth < 24 * 1024,
		       "and this process's peak memory grew by %ld kB, far below 50 MB (from "
		       "%ld kB)",
		       growth, rss0);
	}
	if (python(m, sb, "print('fine')\n", &res) == 0)
		tap_ok(strcmp(res.out.data, "fine\n") == 0 && !res.truncated,
		       "the next call is whole again");
	sbx_run_result_release(&res);

	/* Inline images. */
	if (python(m, sb,
		   "import os, struct, zlib\n"
		   "def chunk(t, d):\n"
		   "    c = struct.pack('>I', len(d)) + t + d\n"
		   "    return c + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)\n"
		   "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, "
		   "8, 2, "
		   "0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + "
		   "chunk(b'IEND', b'')\n"
		   "os.makedirs('plots/deep', exist_ok=True)\n"
		   "open('plots/deep/dot.png', 'wb').write(png)\n"
		   /* SOI, an APP0 (JFIF) segment, a scan header, data, EOI. */
		   "open('photo.JPG', 'wb').write(b'\\xff\\xd8\\xff\\xe0\\x00\\x10JFIF\\x00'"
		   " + b'\\x01\\x01\\x00\\x00\\x01\\x00\\x01\\x00\\x00' + "
		   "b'\\xff\\xda\\x00\\x08\\x01\\x01\\x00\\x00\\x3f\\x00' + b'j' * 80 + "
		   "b'\\xff\\xd9')\n"
		   "open('notjpeg.jpg', 'wb').write(b'\\xff\\xd8\\xff\\xe0' + b'j' * 100)\n"
		   "open('fake.png', 'w').write('not a png')\n"
		   "open('big.png', 'wb').write(png + b'\\0' * (2 << 20))\n",
		   &res) == 0) {
		const struct sbx_file_change *dot = file_named(&res, "plots/deep/dot.png");
		const struct sbx_file_change *jpg = file_named(&res, "photo.JPG");
		const struct sbx_file_change *fake = file_named(&res, "fake.png");
		const struct sbx_file_change *big = file_named(&res, "big.png");
		const struct sbx_file_change *notjpeg = file_named(&res, "notjpeg.jpg");
		tap_is_int(res.n_files, 5, "five files reported, one in a subfolder");
		tap_ok(dot && dot->image && dot->image_len == (size_t)dot->size &&
			   memcmp(dot->image, "\x89PNG\r\n\x1a\n", 8) == 0 &&
			   strcmp(dot->image_mime, "image/png") == 0,
		       "the new PNG comes inline, a valid PNG");
		tap_ok(jpg && jpg->image && jpg->image_len == 112 &&
			   strcmp(jpg->image_mime, "image/jpeg") == 0,
		       "a JPEG too");
		tap_ok(notjpeg && !notjpeg->image,
		       "JPEG magic then junk (no segments, no EOI) does not come inline");
		tap_ok(fake && !fake->image, "a .png that is not one does not");
		tap_ok(big && !big->image && big->size > (1 << 20),
		       "a PNG over image_inline_max does not");
	}
	sbx_run_result_release(&res);

	/* One call at a time: a second one waits. */
	{
		struct py_racer a = {m, sb, "import time\ntime.sleep(1)\nprint('slow')\n", -1, ""};
		struct py_racer b = {m, sb, "print('quick')\n", -1, ""};
		pthread_t ta, tb;
		pthread_create(&ta, NULL, race_python, &a);
		nanosleep(&(struct timespec){.tv_nsec = 200000000L}, NULL);
		pthread_create(&tb, NULL, race_python, &b);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		tap_ok(a.r == 0 && b.r == 0 && strcmp(a.out, "slow\n") == 0 &&
			   strcmp(b.out, "quick\n") == 0,
		       "two calls at once on one sandbox: the second waits, both answer");
	}
	{
		struct py_racer a = {m, sb, "import time\ntime.sleep(1.5)\n", -1, ""};
		struct sbx_run_opts o = {.timeout_ms = 300};
		pthread_t ta;
		pthread_create(&ta, NULL, race_python, &a);
		nanosleep(&(struct timespec){.tv_nsec = 300000000L}, NULL);
		memset(&res, 0, sizeof(res));
		tap_is_int(sbx_sandbox_run_python_ex(m, sb, "print(1)", &o, &res, &err), -EBUSY,
			   "a second call waits at most its own limit, then EBUSY (%s)", err.msg);
		sbx_run_result_release(&res);
		pthread_join(ta, NULL);
		tap_is_int(a.r, 0, "the first call is not disturbed");
	}
	memset(&res, 0, sizeof(res));
	tap_is_int(sbx_sandbox_run_python(m, sb, "print('\xff')", 0, &res, &err), -EINVAL,
		   "code that is not UTF-8: EINVAL");
	tap_is_int(sbx_sandbox_run_python(m, sb, NULL, 0, &res, &err), -EINVAL, "no code: EINVAL");

	/* Reset. */
	if (python(m, sb, "q = 1\n", &res) == 0)
		sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_reset_python(m, sb, &err) == 0, "reset the interpreter (%s)", err.msg);
	if (python(m, sb, "print(globals().get('q'))\n", &res) == 0)
		tap_is_str(res.out.data, "None\n", "after a reset the variables are gone");
	sbx_run_result_release(&res);
}

/* A protocol line just under the cap (written by the code itself, as code in
 * the interpreter's process can) is taken, and what the reader grew for it
 * (the line buffer, the tokener's string buffer) is given back after it. */
static void test_long_line(sbx_manager *m, sbx_sandbox *sb, const struct sbx_settings *s)
{
	struct sbx_run_result res;
	size_t len = sbx_interp_line_max(s) - 4096, before, after;
	char code[1024];

	snprintf(
	    code, sizeof(code),
	    "import gc, os\n"
	    "g = next(o for o in gc.get_objects() if isinstance(o, dict) and 'PROTO_OUT' in o)\n"
	    "head = b'{\"t\":\"o\",\"id\":%%d,\"fd\":1,\"s\":\"' %% g['CUR'].id\n"
	    "os.write(g['PROTO_OUT'], head + b'x' * (%zu - len(head) - 2) + b'\"}\\n')\n"
	    "print('after')\n",
	    len);
	if (python(m, sb, "print('warm')", &res) == 0)
		sbx_run_result_release(&res);
	before = sbx_interp_line_bytes(sb);
	if (python(m, sb, code, &res) == 0)
		tap_ok(res.truncated && strncmp(res.out.data, "xxxx", 4) == 0 &&
			   !res.interpreter_restarted,
		       "a %zu-byte protocol line (cap %zu) is taken, its text capped", len,
		       sbx_interp_line_max(s));
	sbx_run_result_release(&res);
	after = sbx_interp_line_bytes(sb);
	tap_ok(before > 0 && after <= 64 * 1024,
	       "the reader's buffers are given back after it (%zu bytes kept before, %zu after)",
	       before, after);
}

static void test_spec_table(void)
{
	static const char *const good[] = {
	    "numpy",
	    "numpy==1.26.4",
	    "pandas>=2,<3",
	    "requests[socks,security]>=2.0",
	    "Django~=4.2",
	    "foo.bar_baz-qux",
	    "pkg===1.0+local",
	    "numpy != 1.0",
	    "x<2",
	    "zope.interface",
	    "numpy==1.*",
	    "scikit-learn[ alldeps ] >= 1.0 , != 1.1",
	};
	static const char *const bad[] = {
	    "numpy; rm -rf /",
	    "-r x",
	    "--index-url=x",
	    "pkg @ http://x",
	    "../x",
	    "a b",
	    "",
	    "numpy\nscipy",
	    "git+https://x/y.git",
	    "./local",
	    "numpy==",
	    "numpy[",
	    "numpy>=1 2",
	    "$(id)",
	    "`id`",
	    "'numpy'",
	    "numpy==1.0 ; python_version>'3'",
	    "/tmp/x.whl",
	    "x.whl",
	    "evil.tar.gz",
	    "pkg.ZIP",
	    "x.tgz[extra]",
	    "a.tar.bz2",
	    "b.tar.xz",
	    "c.tar",
	    "numpy>>1",
	    "_numpy",
	    "numpy-",
	    "numpy[]",
	    "numpy|cat",
	    "numpy==1\t",
	    "C:\\x",
	    "numpy --user",
	    "numpy==1.0,",
	    "http://x/numpy.tar.gz",
	    "numpy>1 && id",
	};
	char why[256], big[2101];

	for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++) {
		why[0] = '\0';
		tap_ok(sbx_package_spec_valid(good[i], false, why, sizeof(why)),
		       "spec accepted: %s %s", good[i], why);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		char shown[64];
		snprintf(shown, sizeof(shown), "%s", bad[i]);
		for (char *c = shown; *c; c++)
			if (*c == '\n' || *c == '\t')
				*c = ' ';
		why[0] = '\0';
		tap_ok(!sbx_package_spec_valid(bad[i], false, why, sizeof(why)) && why[0],
		       "spec refused: [%s] (%s)", shown, why);
	}
	memset(big, 'a', 300);
	big[300] = '\0';
	tap_ok(!sbx_package_spec_valid(big, false, why, sizeof(why)), "a 300-character spec: %s",
	       why);
	tap_ok(!sbx_package_spec_valid(NULL, false, NULL, 0), "NULL refused without a why buffer");
	tap_ok(!sbx_package_spec_valid("x.whl", false, why, sizeof(why)) &&
		   strstr(why, "allow_direct_urls"),
	       "a local archive name says which setting allows it: %s", why);
	/* sandbox.allow_direct_urls: URLs, paths and files go to pip... */
	tap_ok(sbx_package_spec_valid("pkg @ https://example.org/pkg-1.0.tar.gz", true, why,
				      sizeof(why)),
	       "direct: name @ URL accepted (%s)", why);
	tap_ok(
	    sbx_package_spec_valid("/app/results/x-1.0-py3-none-any.whl", true, why, sizeof(why)),
	    "direct: a wheel's path accepted (%s)", why);
	tap_ok(sbx_package_spec_valid("x.whl", true, why, sizeof(why)),
	       "direct: a file name accepted (%s)", why);
	/* ...but never an option, a control character or an endless spec. */
	tap_ok(!sbx_package_spec_valid("--index-url=http://x", true, why, sizeof(why)),
	       "direct: an option still refused: %s", why);
	tap_ok(!sbx_package_spec_valid("x\ny", true, why, sizeof(why)),
	       "direct: a newline still refused: %s", why);
	memset(big, 'a', 2100);
	big[2100] = '\0';
	tap_ok(!sbx_package_spec_valid(big, true, why, sizeof(why)),
	       "direct: a 2100-character spec refused: %s", why);
}

/* Starts tests/pkgindex.py; returns its pid and the port in *port. */
static pid_t start_index(const char *script, const char *root, int *port)
{
	int fds[2];
	pid_t pid;
	char line[64];
	FILE *f;

	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execlp("python3", "python3", script, root, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	*port = 0;
	if (f && fgets(line, sizeof(line), f))
		*port = atoi(line);
	if (f)
		fclose(f);
	if (*port <= 0 && pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

static const char *find_script(const char *argv0)
{
	static char path[PATH_MAX];
	const char *src = getenv("SBX_SRCDIR");
	if (src) {
		snprintf(path, sizeof(path), "%s/tests/pkgindex.py", src);
		if (access(path, R_OK) == 0)
			return path;
	}
	snprintf(path, sizeof(path), "%s", argv0);
	char *slash = strrchr(path, '/');
	if (slash) {
		snprintf(slash, sizeof(path) - (size_t)(slash - path), "/pkgindex.py");
		if (access(path, R_OK) == 0)
			return path;
	}
	if (access("tests/pkgindex.py", R_OK) == 0)
		return "tests/pkgindex.py";
	return NULL;
}

static bool list_has(char **v, const char *s)
{
	for (; v && *v; v++)
		if (strcmp(*v, s) == 0)
			return true;
	return false;
}

static bool always(void *userdata)
{
	(void)userdata;
	return true;
}

static void test_packages(const char *script)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct sbx_install_status st = {0};
	struct sbx_run_result res;
	struct sbx_sandbox_info info = {0};
	sbx_manager *m = NULL;
	sbx_sandbox *sb = NULL;
	char root[] = "/tmp/sbx-pkgindex-XXXXXX", url[128], inst[80], rm[200];
	char index_url[160];
	int port = 0, r;
	pid_t pid;

	if (!tap_ok(script && mkdtemp(root), "tests/pkgindex.py found (set SBX_SRCDIR)"))
		return;
	pid = start_index(script, root, &port);
	if (!tap_ok(pid > 0, "the test package index runs on port %d", port))
		return;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/simple/", port);
	snprintf(index_url, sizeof(index_url), "sandbox.index_url=%s", url);
	snprintf(inst, sizeof(inst), "%s-pkg", instance);
	{
		const char *const extra[] = {"sandbox.network=host", index_url,
					     "sandbox.install_timeout=120s", NULL};
		settings_for(&s, inst, extra);
	}
	m = manager(&s, engine);
	r = sbx_sandbox_create(m, "alice", "pkgs", &sb, &err);
	if (!tap_ok(r == 0, "create a sandbox with host networking (%s)", err.msg))
		goto out;

	if (python(m, sb, "kept = 7\ntry:\n    import sbxdemo\nexcept ImportError:\n    pass\n",
		   &res) == 0)
		tap_is_int(res.exit_code, 0, "the interpreter holds state before the install");
	sbx_run_result_release(&res);

	r = sbx_sandbox_install(m, sb, "numpy; rm -rf /", 1000, &st, &err);
	tap_is_int(r, -EINVAL, "install of a hostile spec: EINVAL (%s)", err.msg);

	r = sbx_sandbox_install(m, sb, "sbxdemo", 120000, &st, &err);
	tap_ok(r == 0, "install sbxdemo (%s)", err.msg);
	tap_is_int(st.state, SBX_INSTALL_SUCCESS, "it succeeds");
	tap_is_str(st.version, "1.0", "version 1.0");
	tap_ok(st.log_tail && strstr(st.log_tail, "sbxdemo"), "with pip's log");
	tap_ok(st.seconds > 0, "and how long it took (%.1f s)", st.seconds);
	if (st.state != SBX_INSTALL_SUCCESS && st.log_tail)
		tap_diag("%s", st.log_tail);
	sbx_install_status_release(&st);

	if (python(m, sb, "import sbxdemo\nprint(sbxdemo.VALUE, kept)", &res) == 0)
		tap_is_str(res.out.data, "42 7\n",
			   "the installed module imports in the running interpreter");
	sbx_run_result_release(&res);

	r = sbx_sandbox_install_status(m, sb, "sbxdemo", &st, &err);
	tap_ok(r == 0 && st.state == SBX_INSTALL_SUCCESS, "status says SUCCESS (%s)", err.msg);
	sbx_install_status_release(&st);
	r = sbx_sandbox_describe(m, sb, &info, &err);
	tap_ok(r == 0 && list_has(info.packages, "sbxdemo"), "describe lists the package");
	sbx_sandbox_info_release(&info);

	r = sbx_sandbox_install(m, sb, "sbxdemo-does-not-exist", 120000, &st, &err);
	tap_ok(r == 0, "install of an unknown package returns (%s)", err.msg);
	tap_is_int(st.state, SBX_INSTALL_FAILED, "it failed");
	tap_ok(st.log_tail && strstr(st.log_tail, "sbxdemo-does-not-exist") &&
		   strstr(st.log_tail, "[pip exited with 1]"),
	       "with a log tail that names it and pip's exit");
	if (st.log_tail) {
		const char *e = strstr(st.log_tail, "ERROR");
		e = e ? e : st.log_tail;
		tap_diag("log tail: %.*s", (int)strcspn(e, "\n"), e);
	}
	sbx_install_status_release(&st);

	r = sbx_sandbox_install_status(m, sb, "numpy", &st, &err);
	tap_ok(r == 0 && st.state == SBX_INSTALL_PRESENT, "numpy is present (%s)", err.msg);
	tap_ok(st.version && *st.version, "with its version %s", st.version ? st.version : "-");
	sbx_install_status_release(&st);
	r = sbx_sandbox_install_status(m, sb, "nosuchpkg-xyz", &st, &err);
	tap_ok(r == 0 && st.state == SBX_INSTALL_NONE && !st.version, "an absent package is NONE");
	sbx_install_status_release(&st);

	r = sbx_sandbox_install(m, sb, "sbxdemo==1.0", 0, &st, &err);
	tap_ok(r == 0 && st.state == SBX_INSTALL_RUNNING, "install without waiting is RUNNING");
	sbx_install_status_release(&st);
	r = sbx_sandbox_install(m, sb, "sbxdemo==1.0", 0, &st, &err);
	tap_ok(r == 0 && st.state == SBX_INSTALL_RUNNING, "asking again while it runs: RUNNING");
	sbx_install_status_release(&st);
	for (int i = 0; i < 600; i++) {
		sbx_install_status_release(&st);
		if (sbx_sandbox_install_status(m, sb, "sbxdemo==1.0", &st, &err) < 0 ||
		    st.state != SBX_INSTALL_RUNNING)
			break;
		usleep(200000);
	}
	tap_is_int(st.state, SBX_INSTALL_SUCCESS, "then status says SUCCESS");
	sbx_install_status_release(&st);

	/* A caller that cancels stops waiting (pip takes far longer than the
	 * first poll), and the install goes on in the background. */
	{
		struct sbx_install_opts o = {.wait_ms = 120000, .cancelled = always};
		r = sbx_sandbox_install_ex(m, sb, "sbxdemo==1.0.0", &o, &st, &err);
		tap_ok(r == -ECANCELED, "a cancelled wait for an install ends at once (%d %s)", r,
		       err.msg);
		if (r == 0)
			sbx_install_status_release(&st);
		for (int i = 0; i < 600; i++) {
			sbx_install_status_release(&st);
			if (sbx_sandbox_install_status(m, sb, "sbxdemo==1.0.0", &st, &err) < 0 ||
			    st.state != SBX_INSTALL_RUNNING)
				break;
			usleep(200000);
		}
		tap_is_int(st.state, SBX_INSTALL_SUCCESS, "and the install ends well all the same");
		sbx_install_status_release(&st);
	}

	/* One left running while the manager is freed: free waits for it. */
	r = sbx_sandbox_install(m, sb, "sbxdemo>=1", 0, &st, &err);
	tap_ok(r == 0, "an install left running at the end (%s)", err.msg);
	sbx_install_status_release(&st);
out:
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "the package sandbox is gone");
	sbx_settings_release(&s);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	snprintf(rm, sizeof(rm), "rm -rf '%s'", root);
	if (system(rm) != 0)
		tap_diag("could not remove %s", root);
}

struct collect {
	struct sbx_buf b;
	int fail_with;
};

static int collect_sink(void *ud, const void *p, size_t n)
{
	struct collect *c = ud;
	if (c->fail_with)
		return c->fail_with;
	return sbx_buf_append(&c->b, p, n);
}

static int write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, data, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

static void test_upload_artifacts(sbx_manager *m, sbx_sandbox *sb, const char *up,
				  const char *outside)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	struct collect c = {SBX_BUF_INIT, 0};
	char path[PATH_MAX], target[PATH_MAX];
	char *got = NULL;
	int64_t size = -1;
	size_t blen = 100000;
	unsigned char *blob = malloc(blen);
	int r, setup = 0;

	srand(7);
	for (size_t i = 0; i < blen; i++)
		blob[i] = (unsigned char)rand();
	snprintf(path, sizeof(path), "%s/data.txt", up);
	setup |= write_file(path, "hello upload\n", 13);
	snprintf(path, sizeof(path), "%s/sub", up);
	setup |= mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/sub/blob.bin", up);
	setup |= write_file(path, blob, blen);
	snprintf(path, sizeof(path), "%s/secret.txt", outside);
	setup |= write_file(path, "secret\n", 7);
	snprintf(target, sizeof(target), "%s/secret.txt", outside);
	snprintf(path, sizeof(path), "%s/link.txt", up);
	setup |= symlink(target, path);
	{
		char *big = calloc(1, 2 << 20);
		snprintf(path, sizeof(path), "%s/big.bin", up);
		setup |= big ? write_file(path, big, 2 << 20) : -1;
		free(big);
	}
	tap_ok(setup == 0, "the upload folder holds a file, a subfolder, a symlink out and a "
			   "big file");

	r = sbx_sandbox_upload(m, sb, "data.txt", NULL, &got, &size, &err);
	tap_ok(r == 0, "upload a file of the upload folder (%s)", err.msg);
	tap_is_str(got, "/app/results/data.txt", "it lands in /app/results");
	tap_is_int(size, 13, "its size");
	free(got);
	got = NULL;
	if (shell(m, sb, "cat /app/results/data.txt; stat -c '%u %a' /app/results/data.txt",
		  &res) == 0)
		tap_is_str(res.out.data, "hello upload\n1000 644\n",
			   "the bytes arrived, owned by 1000, mode 644");
	sbx_run_result_release(&res);

	snprintf(path, sizeof(path), "%s/sub/blob.bin", up);
	r = sbx_sandbox_upload(m, sb, path, "/app/results/in/renamed.bin", &got, &size, &err);
	tap_is_int(r, -ENOENT, "into a folder that does not exist: ENOENT (%s)", err.msg);
	shell(m, sb, "mkdir -p /app/results/in", &res);
	sbx_run_result_release(&res);
	r = sbx_sandbox_upload(m, sb, path, "/app/results/in/renamed.bin", &got, &size, &err);
	tap_ok(r == 0, "upload by absolute path to a file path (%s)", err.msg);
	tap_is_str(got, "/app/results/in/renamed.bin", "it takes the new name");
	free(got);
	got = NULL;
	r = sbx_sandbox_upload(m, sb, "sub/blob.bin", "/tmp//", &got, &size, &err);
	tap_ok(r == 0, "upload into another existing folder (%s)", err.msg);
	tap_is_str(got, "/tmp/blob.bin", "it keeps its name");
	free(got);
	got = NULL;
	r = sbx_sandbox_upload(m, sb, "sub/../data.txt", "/app/results/again.txt", &got, &size,
			       &err);
	tap_ok(r == 0, "a path with .. that stays inside is fine (%s)", err.msg);
	free(got);
	got = NULL;

	snprintf(path, sizeof(path), "%s/secret.txt", outside);
	r = sbx_sandbox_upload(m, sb, path, NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "a file outside the folder: EPERM (%s)", err.msg);
	r = sbx_sandbox_upload(m, sb, "link.txt", NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "a symlink out of the folder: EPERM (%s)", err.msg);
	snprintf(path, sizeof(path), "../%s/secret.txt", strrchr(outside, '/') + 1);
	r = sbx_sandbox_upload(m, sb, path, NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "escaping with ..: EPERM (%s)", err.msg);
	r = sbx_sandbox_upload(m, sb, "/etc/passwd", NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "/etc/passwd: EPERM");
	r = sbx_sandbox_upload(m, sb, "/etc/no-such-file", NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "a missing file outside: EPERM, not ENOENT");
	r = sbx_sandbox_upload(m, sb, "nope.txt", NULL, &got, &size, &err);
	tap_is_int(r, -ENOENT, "a missing file inside: ENOENT (%s)", err.msg);
	r = sbx_sandbox_upload(m, sb, "sub", NULL, &got, &size, &err);
	tap_is_int(r, -EPERM, "a directory: EPERM (%s)", err.msg);
	r = sbx_sandbox_upload(m, sb, "big.bin", NULL, &got, &size, &err);
	tap_is_int(r, -EFBIG, "over max_upload: EFBIG (%s)", err.msg);
	/* Refused from its size, before a byte went (not cut off on the way). */
	tap_ok(strstr(err.msg, "bytes, over the upload limit of 1048576 bytes") != NULL,
	       "over max_upload: refused from its size before it is sent (%s)", err.msg);
	r = sbx_sandbox_upload(m, sb, "data.txt", "app/results", &got, &size, &err);
	tap_is_int(r, -EINVAL, "a relative destination: EINVAL (%s)", err.msg);
	tap_ok(got == NULL, "failed uploads return no path");

	/* Artifacts. */
	r = sbx_artifact_stat(m, sb, "in/renamed.bin", &size, &err);
	tap_ok(r == 0 && size == (int64_t)blen, "artifact stat gives the size (%s)", err.msg);
	r = sbx_artifact_read(m, sb, "in/renamed.bin", collect_sink, &c, &err);
	tap_ok(r == 0, "artifact read (%s)", err.msg);
	tap_ok(c.b.len == blen && memcmp(c.b.data, blob, blen) == 0,
	       "100000 bytes come back byte for byte (%zu)", c.b.len);
	sbx_buf_release(&c.b);
	shell(m, sb,
	      "ln -sf /etc/passwd /app/results/plink; ln -sfn /etc /app/results/etcdir; "
	      "mkfifo /app/results/fifo",
	      &res);
	sbx_run_result_release(&res);
	static const struct {
		const char *path;
		int code;
	} cases[] = {
	    {"../etc/passwd", -EPERM},
	    {"/etc/passwd", -EPERM},
	    {"in//renamed.bin", -EPERM},
	    {"./data.txt", -EPERM},
	    {"in/./renamed.bin", -EPERM},
	    {"", -EPERM},
	    {"in/", -EPERM},
	    {"plink", -EPERM},
	    {"etcdir/passwd", -EPERM},
	    {"missing.txt", -ENOENT},
	    {"in", -ENOENT},
	    {"data.txt/x", -ENOENT},
	    {"fifo", -ENOENT},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		sbx_error_clear(&err);
		r = sbx_artifact_stat(m, sb, cases[i].path, &size, &err);
		tap_is_int(r, cases[i].code, "artifact stat [%s]: %s", cases[i].path, err.msg);
		r = sbx_artifact_read(m, sb, cases[i].path, collect_sink, &c, &err);
		tap_ok(r == cases[i].code && c.b.len == 0, "artifact read [%s] refused too",
		       cases[i].path);
	}
	c.fail_with = -ECANCELED;
	r = sbx_artifact_read(m, sb, "in/renamed.bin", collect_sink, &c, &err);
	tap_is_int(r, -ECANCELED, "a sink's error stops the read (%s)", err.msg);
	sbx_buf_release(&c.b);
	free(blob);
}

struct racer {
	sbx_manager *m;
	sbx_sandbox *sb;
	int i;
	int r;
	char out[64];
};

static void *race_create(void *arg)
{
	struct racer *x = arg;
	x->r = sbx_sandbox_create(x->m, "alice", "race", &x->sb, NULL);
	return NULL;
}

static void *race_run(void *arg)
{
	struct racer *x = arg;
	struct sbx_run_result res = {0};
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "echo run-%d", x->i);
	x->r = sbx_sandbox_run_shell(x->m, x->sb, cmd, 0, &res, NULL);
	if (x->r == 0)
		snprintf(x->out, sizeof(x->out), "%s", res.out.data);
	sbx_run_result_release(&res);
	return NULL;
}

/* Several threads at once: one name, one winner; runs in parallel. */
static void test_threads(sbx_manager *m)
{
	struct racer x[4];
	pthread_t t[4];
	sbx_sandbox *won = NULL;
	int ok = 0, exist = 0, right = 0;

	for (int i = 0; i < 4; i++) {
		x[i] = (struct racer){.m = m, .i = i};
		pthread_create(&t[i], NULL, race_create, &x[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		if (x[i].r == 0) {
			ok++;
			won = x[i].sb;
		}
		exist += x[i].r == -EEXIST;
	}
	tap_ok(ok == 1 && exist == 3, "4 threads create the same name: one wins, 3 get EEXIST");
	if (!won)
		return;
	for (int i = 0; i < 4; i++) {
		x[i].sb = won;
		pthread_create(&t[i], NULL, race_run, &x[i]);
	}
	for (int i = 0; i < 4; i++) {
		char want[32];
		pthread_join(t[i], NULL);
		snprintf(want, sizeof(want), "run-%d\n", i);
		right += x[i].r == 0 && strcmp(x[i].out, want) == 0;
	}
	tap_is_int(right, 4, "4 commands run in parallel in one sandbox, each gets its output");
	tap_ok(sbx_sandbox_delete(m, "alice", "race", NULL) == 0, "delete it");
	sbx_sandbox_unref(won);
}

/* The status and reason list_sandboxes gives SB of alice's (owned), or NULL. */
static char *listed(sbx_manager *m, sbx_sandbox *sb, char **ret_reason)
{
	struct sbx_sandbox_info *list = NULL;
	size_t n = 0;
	char *status = NULL;

	*ret_reason = NULL;
	if (sbx_manager_list(m, "alice", &list, &n, NULL) < 0)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i].id, sbx_sandbox_id(sb)) == 0) {
			status = strdup(list[i].status);
			*ret_reason = list[i].reason ? strdup(list[i].reason) : NULL;
		}
	sbx_sandbox_info_list_free(list, n);
	return status;
}

/* Waits (up to 30 s, a bound on a hang) until list_sandboxes gives SB a
 * reason it no longer runs that holds WANT; the last reason (owned), or
 * NULL when there was none. */
static char *wait_dead(sbx_manager *m, sbx_sandbox *sb, const char *want)
{
	char *reason = NULL;

	for (int i = 0; i < 300; i++) {
		char *status;
		free(reason);
		status = listed(m, sb, &reason);
		free(status);
		if (reason && strstr(reason, want))
			break;
		usleep(100000);
	}
	return reason;
}

struct mid_call {
	sbx_manager *m;
	sbx_sandbox *sb;
	struct sbx_run_result res;
	struct sbx_error err;
	int r;
};

static void *mid_call_main(void *arg)
{
	struct mid_call *c = arg;

	c->r = sbx_sandbox_run_shell(c->m, c->sb, "sleep 30; echo slept", 0, &c->res, &c->err);
	return NULL;
}

/* A command running when its sandbox's container is killed (as the engine
 * does to all when it stops): the call fails saying the sandbox no longer
 * runs; it is no result with the exit code the engine gave (Docker: 137, or
 * 126 "cannot exec in a stopped state"). */
static void test_killed_mid_call(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct mid_call c = {.m = m, .err = SBX_ERROR_INIT};
	pthread_t t;
	char *cid;

	if (sbx_sandbox_create(m, "alice", "killmid", &c.sb, &err) < 0) {
		tap_ok(0, "create a sandbox to kill mid-call (%s)", err.msg);
		return;
	}
	cid = container_of(instance, sbx_sandbox_id(c.sb));
	pthread_create(&t, NULL, mid_call_main, &c);
	usleep(1500000); /* the command runs */
	tap_ok(cid && sbx_container_kill(engine, cid, "KILL", &err) == 0,
	       "kill a sandbox's container while 'sleep 30' runs in it");
	pthread_join(t, NULL);
	tap_ok(c.r == -ESRCH && strstr(c.err.msg, "no longer runs"),
	       "the call fails saying the sandbox no longer runs, not a result (%d, exit %d: %s)",
	       c.r, c.r == 0 ? c.res.exit_code : 0, c.r == 0 ? "" : c.err.msg);
	if (c.r == 0)
		sbx_run_result_release(&c.res);
	tap_ok(sbx_sandbox_delete(m, "alice", "killmid", &err) == 0, "it is deleted");
	sbx_sandbox_unref(c.sb);
	free(cid);
}

/* A command that prints Docker's words for an exec in a stopping container
 * ("cannot exec in a stopped state") and exits 126 ran: that is its result,
 * with its output, not an error about the sandbox; the sandbox lives on. */
static void test_forged_stop(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	sbx_sandbox *sb = NULL;
	int r;

	if (sbx_sandbox_create(m, "alice", "forgestop", &sb, &err) < 0) {
		tap_ok(0, "create a sandbox to print the engine's words in (%s)", err.msg);
		return;
	}
	r = sbx_sandbox_run_shell(m, sb,
				  "echo 'OCI runtime exec failed: exec failed: cannot exec in a "
				  "stopped state: unknown'; exit 126",
				  0, &res, &err);
	tap_ok(r == 0 && res.exit_code == 126 && res.out.data &&
		   strstr(res.out.data, "cannot exec in a stopped state"),
	       "a command printing \"cannot exec in a stopped state\" and exiting 126 is its "
	       "own result, with its output (%d, exit %d: %s)",
	       r, r == 0 ? res.exit_code : 0, r == 0 ? "" : err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	sbx_error_clear(&err);
	r = sbx_sandbox_run_shell(m, sb, "echo alive", 0, &res, &err);
	tap_ok(r == 0 && res.exit_code == 0 && res.out.data && strstr(res.out.data, "alive"),
	       "... and the sandbox still runs commands (%d %s)", r, r == 0 ? "" : err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_delete(m, "alice", "forgestop", &err) == 0, "it is deleted");
	sbx_sandbox_unref(sb);
}

/* A sandbox whose container is killed, or removed, from outside the server:
 * the server learns it from the engine's events, without any call (list
 * shows it dead with the reason), and a call on it says so and what to do. */
struct woken {
	sbx_manager *m;
	sbx_sandbox *sb;
	int r;
	char out[64];
};

static void *call_in(void *arg)
{
	struct woken *w = arg;
	struct sbx_run_result res = {0};

	w->r = sbx_sandbox_run_shell(w->m, w->sb, "cat /app/results/kept", 0, &res, NULL);
	if (w->r == 0) {
		snprintf(w->out, sizeof(w->out), "%s", res.out.data ? res.out.data : "");
		sbx_run_result_release(&res);
	}
	return NULL;
}

/* A sandbox put to sleep (sleep.c): its container stopped, not taken for a
 * death (the engine's events say it died), its files kept; two calls at
 * once wake it once; Python starts afresh; a sleeping one is deleted like
 * any other. */
static void test_sleep(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	struct sbx_container_info ci = {0};
	struct woken w[2];
	pthread_t t[2];
	sbx_sandbox *sb = NULL;
	char *cid = NULL, *status, *reason = NULL;
	int r;

	if (!tap_ok(sbx_sandbox_create(m, "alice", "sleeper", &sb, &err) == 0,
		    "create a sandbox to put to sleep (%s)", err.msg))
		return;
	if (!sbx_engine_restart_keeps(engine)) {
		/* Swarm: a task's stopped container is a failed task. */
		r = sbx_sandbox_sleep(sb, &err);
		tap_ok(r == -ENOTSUP && strstr(err.msg, "cannot sleep"),
		       "this engine cannot keep a sleeping sandbox, and says so: %s", err.msg);
		sbx_error_clear(&err);
		r = sbx_sandbox_run_shell(m, sb, "echo awake", 0, &res, &err);
		tap_ok(r == 0 && res.exit_code == 0, "... and the sandbox runs on (%s)", err.msg);
		if (r == 0)
			sbx_run_result_release(&res);
		sbx_sandbox_delete(m, "alice", "sleeper", NULL);
		sbx_sandbox_unref(sb);
		return;
	}
	cid = container_of(instance, sbx_sandbox_id(sb));
	r = sbx_sandbox_run_shell(m, sb, "mkdir -p /app/results && echo kept > /app/results/kept",
				  0, &res, &err);
	tap_ok(r == 0 && res.exit_code == 0, "a file is written (%s)", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	r = sbx_sandbox_run_python(m, sb, "x = 41", 0, &res, &err);
	tap_ok(r == 0, "Python holds a variable (%s)", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_sleep(sb, &err) == 0, "it is put to sleep (%s)", err.msg);
	tap_ok(cid && sbx_container_inspect(engine, cid, &ci, &err) == 0 && !ci.running,
	       "its container is stopped, not removed (%s)", err.msg);
	sbx_container_info_release(&ci);
	tap_ok(sbx_sandbox_sleep(sb, &err) == 0, "putting it to sleep again is fine");
	/* The stop is in the engine's events by now: not a death. */
	usleep(1500000);
	status = listed(m, sb, &reason);
	tap_ok(!reason, "its stop is not taken for a death (%s)", reason ? reason : "no reason");
	free(status);
	free(reason);
	for (int i = 0; i < 2; i++) {
		w[i] = (struct woken){.m = m, .sb = sb, .r = -1};
		if (pthread_create(&t[i], NULL, call_in, &w[i]) != 0)
			w[i].r = -EAGAIN;
	}
	for (int i = 0; i < 2; i++)
		if (w[i].r != -EAGAIN)
			pthread_join(t[i], NULL);
	tap_ok(w[0].r == 0 && w[1].r == 0 && strstr(w[0].out, "kept") && strstr(w[1].out, "kept"),
	       "two calls at once wake it, and its file is there (%d %d)", w[0].r, w[1].r);
	pthread_mutex_lock(&m->lock);
	tap_is_int((long)sb->wakes, 1, "it was woken once");
	tap_ok(sb->sleep == SBX_SLEEP_AWAKE, "it is awake");
	pthread_mutex_unlock(&m->lock);
	r = sbx_sandbox_run_python(m, sb, "print(x)", 0, &res, &err);
	tap_ok(r == 0 && res.err.data && strstr(res.err.data, "NameError"),
	       "Python starts afresh: its variables are gone");
	tap_ok(r == 0 && res.interpreter_restarted && res.notice &&
		   strstr(res.notice, "new Python interpreter"),
	       "... and the result says so: %s", r == 0 && res.notice ? res.notice : "(none)");
	if (r == 0)
		sbx_run_result_release(&res);
	r = sbx_sandbox_run_python(m, sb, "print(6 * 7)", 0, &res, &err);
	tap_ok(r == 0 && res.out.data && strstr(res.out.data, "42"), "and runs code (%s)", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_sleep(sb, &err) == 0, "asleep again (%s)", err.msg);
	sbx_error_clear(&err);
	tap_ok(sbx_sandbox_delete(m, "alice", "sleeper", &err) == 0,
	       "a sleeping sandbox is deleted (%s)", err.msg);
	tap_ok(cid && sbx_container_inspect(engine, cid, &ci, NULL) == -ENOENT,
	       "with its container");
	sbx_container_info_release(&ci);
	free(cid);
	sbx_sandbox_unref(sb);
}

static void test_stopped(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	sbx_sandbox *sb = NULL, *gone = NULL;
	char *cid, *gid, *reason;
	int r;

	if (sbx_sandbox_create(m, "alice", "stopme", &sb, &err) < 0 ||
	    sbx_sandbox_create(m, "alice", "removeme", &gone, &err) < 0) {
		tap_ok(0, "create sandboxes to stop and to remove (%s)", err.msg);
		sbx_sandbox_unref(sb);
		return;
	}
	{
		char *status = listed(m, sb, &reason);
		tap_ok(status && strcmp(status, "running") == 0 && !reason,
		       "a live sandbox is listed running, without a reason");
		free(status);
		free(reason);
	}
	cid = container_of(instance, sbx_sandbox_id(sb));
	tap_ok(cid && sbx_container_kill(engine, cid, "KILL", &err) == 0, "kill its container");
	reason = wait_dead(m, sb, "killed");
	tap_ok(reason && strstr(reason, "killed (signal 9) from outside the server"),
	       "list_sandboxes says it was killed, without any call on it: %s",
	       reason ? reason : "(no reason)");
	free(reason);
	{
		char *status = listed(m, sb, &reason);
		/* Docker says "exited", Podman "exited" or "stopped". */
		tap_ok(status && strcmp(status, "running") != 0 && strcmp(status, "missing") != 0,
		       "its status is the engine's: %s (list_sandboxes says dead)",
		       status ? status : "(none)");
		free(status);
		free(reason);
	}
	r = sbx_sandbox_run_shell(m, sb, "echo hi", 0, &res, &err);
	tap_ok(r == -ESRCH, "running in a killed sandbox fails (%d)", r);
	tap_ok(strstr(err.msg, "no longer runs: its container was killed (signal 9)") &&
		   strstr(err.msg, "delete_sandbox") && strstr(err.msg, "create_sandbox"),
	       "and says what happened and what to do: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	sbx_error_clear(&err);
	r = sbx_sandbox_run_python(m, sb, "print(1)", 0, &res, &err);
	tap_ok(r == -ESRCH && strstr(err.msg, "killed (signal 9)"), "so does Python: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);

	gid = container_of(instance, sbx_sandbox_id(gone));
	tap_ok(gid && sbx_container_remove(engine, gid, &err) == 0,
	       "remove a container from outside");
	reason = wait_dead(m, gone, "removed");
	tap_ok(reason && strstr(reason, "removed from outside the server"),
	       "list_sandboxes says its container was removed: %s",
	       reason ? reason : "(no reason)");
	free(reason);
	sbx_error_clear(&err);
	r = sbx_sandbox_run_shell(m, gone, "echo hi", 0, &res, &err);
	tap_ok(r == -ESRCH && strstr(err.msg, "removed from outside the server"),
	       "a call on it says so: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);

	tap_ok(sbx_sandbox_delete(m, "alice", "stopme", &err) == 0, "a killed one is deleted");
	tap_ok(sbx_sandbox_delete(m, "alice", "removeme", &err) == 0,
	       "so is one whose container went (%s)", err.msg);
	sbx_sandbox_unref(sb);
	sbx_sandbox_unref(gone);
	free(cid);
	free(gid);
}

/* A call run in a thread of its own, for a delete to cut short. */
struct busy_call {
	pthread_t thread;
	sbx_manager *m;
	sbx_sandbox *sb;
	bool python;
	const char *code;
	int r;
	struct sbx_error err;
	struct timespec done;
};

static void *busy_main(void *arg)
{
	struct busy_call *b = arg;
	struct sbx_run_result res = {0};

	b->r = b->python ? sbx_sandbox_run_python(b->m, b->sb, b->code, 120000, &res, &b->err)
			 : sbx_sandbox_run_shell(b->m, b->sb, b->code, 120000, &res, &b->err);
	if (b->r == 0)
		sbx_run_result_release(&res);
	clock_gettime(CLOCK_MONOTONIC, &b->done);
	return NULL;
}

static double secs_since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* sandbox.exec_timeout: the limit of a command or of Python code given none
 * (a time limit of 0), on a manager whose default is 3 s: each stops there
 * and says it timed out, well before its 20 s would end. */
static void test_default_time_limit(void)
{
	const char *const short_limit[] = {"sandbox.exec_timeout=3s", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	struct test_manager tm;
	struct timespec t0;
	sbx_manager *m;
	sbx_sandbox *sb = NULL;
	int r;

	m = test_manager_open(&tm, "tmo", short_limit, NULL);
	if (tap_call(sbx_sandbox_create(m, "alice", "tmo", &sb, &err), err.msg,
		     "create a sandbox under sandbox.exec_timeout=3s")) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sbx_sandbox_run_shell(m, sb, "sleep 20; echo ended", 0, &res, &err);
		tap_ok(r == 0 && res.timed_out && secs_since(&t0) < 15,
		       "a command given no time limit stops at sandbox.exec_timeout (%s%.1f s)",
		       r < 0 ? err.msg : "", secs_since(&t0));
		sbx_run_result_release(&res);
		/* The interpreter up first: its start is not the code's time. */
		r = sbx_sandbox_run_python(m, sb, "print(1)", 60000, &res, &err);
		tap_ok(r == 0 && !res.timed_out, "Python runs (%s)", err.msg);
		sbx_run_result_release(&res);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sbx_sandbox_run_python(m, sb, "import time\ntime.sleep(20)\nprint('ended')", 0,
					   &res, &err);
		tap_ok(r == 0 && res.timed_out && secs_since(&t0) < 15,
		       "Python code given no time limit stops at sandbox.exec_timeout (%s%.1f s)",
		       r < 0 ? err.msg : "", secs_since(&t0));
		sbx_run_result_release(&res);
	}
	sbx_sandbox_unref(sb);
	test_manager_close(&tm, "no container of the time-limit manager is left");
}

/* delete: owner-checked, its container gone from the engine, the slot free
 * at once, a busy sandbox deleted all the same (its calls fail saying so),
 * a later call told it was deleted; the error at max_sandboxes names the
 * caller's least recently used sandboxes. */
static void test_delete(void)
{
	const char *const two[] = {"sandbox.max_sandboxes=2", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	struct busy_call py = {0}, sh = {0};
	struct test_manager tm;
	struct timespec t0;
	sbx_manager *m;
	sbx_sandbox *a = NULL, *b = NULL, *c = NULL, *x = NULL;
	char id_a[SBX_SANDBOX_ID_MAX + 1] = "", id_b[SBX_SANDBOX_ID_MAX + 1] = "", *cid;
	int r;

	m = test_manager_open(&tm, "del", two, NULL);
	if (!tap_call(sbx_sandbox_create(m, "alice", "del-a", &a, &err), err.msg, "create del-a") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "del-b", &b, &err), err.msg, "create del-b"))
		goto out;
	snprintf(id_a, sizeof(id_a), "%s", sbx_sandbox_id(a));
	snprintf(id_b, sizeof(id_b), "%s", sbx_sandbox_id(b));
	/* b is used last: a is the least recently used. */
	if (shell(m, b, "true", &res) == 0)
		sbx_run_result_release(&res);

	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, "alice", "del-c", &c, &err);
	tap_is_int(r, -EBUSY, "at max_sandboxes=2 a third create: EBUSY");
	{
		const char *pa = strstr(err.msg, id_a), *pb = strstr(err.msg, id_b);
		tap_ok(strstr(err.msg, "delete_sandbox") && pa && pb && pa < pb &&
			   strstr(err.msg, "\"del-a\"") && strstr(err.msg, "last used"),
		       "... its message names the caller's sandboxes, least recently used first, "
		       "and delete_sandbox: %s",
		       err.msg);
	}
	sbx_error_clear(&err);
	r = sbx_sandbox_create(m, "bob", NULL, &c, &err);
	tap_ok(r == -EBUSY && !strstr(err.msg, id_a) && strstr(err.msg, "none of them yours"),
	       "another owner's EBUSY names none of them: %s", err.msg);

	sbx_error_clear(&err);
	r = sbx_sandbox_delete(m, "bob", id_b, &err);
	tap_is_int(r, -ENOENT, "another owner cannot delete it, by id (%s)", err.msg);
	r = sbx_sandbox_delete(m, "bob", "del-b", &err);
	tap_is_int(r, -ENOENT, "nor by name");
	r = sbx_sandbox_get(m, "alice", "del-b", &x, &err);
	tap_ok(r == 0 && x == b, "it is still there");
	x = sbx_sandbox_unref(x);

	r = sbx_sandbox_delete(m, "alice", "del-b", &err);
	tap_call(r, err.msg, "alice deletes del-b by name");
	cid = container_of(tm.inst, id_b);
	tap_ok(cid == NULL, "its container is gone from the engine");
	free(cid);
	sbx_error_clear(&err);
	r = sbx_sandbox_get(m, "alice", "del-b", &x, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "was deleted") && strstr(err.msg, "create_sandbox"),
	       "a later get by name says it was deleted: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_get(m, "alice", id_b, &x, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "was deleted"), "and by id: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_get(m, "bob", id_b, &x, &err);
	tap_ok(r == -ENOENT && !strstr(err.msg, "deleted"),
	       "another owner is told only that there is no such sandbox: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_run_shell(m, b, "echo held", 0, &res, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "was deleted"),
	       "a call through a reference held from before says it was deleted: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	sbx_error_clear(&err);
	r = sbx_sandbox_delete(m, "alice", "del-b", &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "was deleted"), "deleting it again: ENOENT (%s)",
	       err.msg);
	b = sbx_sandbox_unref(b);

	r = sbx_sandbox_create(m, "alice", "del-c", &c, &err);
	tap_call(r, err.msg, "the slot is free at once: a create after the delete works");

	/* A busy sandbox: its calls are cut short and say why. */
	py = (struct busy_call){
	    .m = m,
	    .sb = a,
	    .python = true,
	    .code = "open('/tmp/py-up', 'w').close()\nimport time\ntime.sleep(100)"};
	sh = (struct busy_call){.m = m, .sb = a, .code = "touch /tmp/sh-up; sleep 100"};
	pthread_create(&py.thread, NULL, busy_main, &py);
	pthread_create(&sh.thread, NULL, busy_main, &sh);
	/* Both calls' code running (each says so with a file; a loaded
	 * machine can take seconds to get there). */
	{
		bool up = false;
		for (int i = 0; i < 120 && !up; i++) {
			struct sbx_run_result q = {0};
			usleep(500000);
			if (sbx_sandbox_run_shell(
				m, a, "test -e /tmp/py-up && test -e /tmp/sh-up && echo up", 0, &q,
				NULL) == 0) {
				up = q.out.data && strcmp(q.out.data, "up\n") == 0;
				sbx_run_result_release(&q);
			}
		}
		tap_ok(up, "both calls' code runs");
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = sbx_sandbox_delete(m, "alice", id_a, &err);
	tap_call(r, err.msg, "delete a sandbox with two calls running in it (%.1f s)",
		 secs_since(&t0));
	pthread_join(py.thread, NULL);
	pthread_join(sh.thread, NULL);
	tap_ok(secs_since(&t0) < 60, "both calls end soon after (%.1f s)", secs_since(&t0));
	tap_ok(py.r == -ENOENT && strstr(py.err.msg, "was deleted") &&
		   strstr(py.err.msg, "while this call ran"),
	       "the Python call fails saying the sandbox was deleted while it ran: %d %s", py.r,
	       py.err.msg);
	tap_ok(sh.r == -ENOENT && strstr(sh.err.msg, "was deleted") &&
		   strstr(sh.err.msg, "while this call ran"),
	       "the command fails saying so too: %d %s", sh.r, sh.err.msg);
	cid = container_of(tm.inst, id_a);
	tap_ok(cid == NULL, "its container is gone from the engine");
	free(cid);
	tap_call(sbx_sandbox_delete(m, "alice", "del-c", &err), err.msg, "delete del-c");
out:
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	sbx_sandbox_unref(c);
	test_manager_close(&tm, "nothing of the delete test is left");
}

/* Waits up to SECONDS for OWNER's ID_OR_NAME to be gone; returns get's
 * error then (0 when it is still there), with its message in ERR. */
static int wait_gone(sbx_manager *m, const char *owner, const char *id_or_name, int seconds,
		     struct sbx_error *err)
{
	struct timespec t0;
	sbx_sandbox *x = NULL;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		sbx_error_clear(err);
		r = sbx_sandbox_get(m, owner, id_or_name, &x, err);
		if (r < 0 || secs_since(&t0) > seconds)
			break;
		x = sbx_sandbox_unref(x);
		usleep(200000);
	}
	sbx_sandbox_unref(x);
	return r < 0 ? r : 0;
}

/* Waits up to SECONDS until the engine has no container for sandbox ID of
 * INST (a get fails as soon as the removal starts); whether it went. */
static bool wait_container_gone(const char *inst, const char *id, int seconds)
{
	struct timespec t0;
	char *cid;
	bool gone;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((cid = container_of(inst, id)) && secs_since(&t0) < seconds) {
		free(cid);
		usleep(200000);
	}
	gone = cid == NULL;
	free(cid);
	return gone;
}

/* The list's entry for alice's sandbox NAME in M (a copy to release), or
 * false. */
static bool entry_of(sbx_manager *m, const char *name, struct sbx_sandbox_info *ret)
{
	struct sbx_sandbox_info *list = NULL;
	size_t n = 0;
	bool found = false;

	if (sbx_manager_list(m, "alice", &list, &n, NULL) < 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!found && strcmp(list[i].name, name) == 0) {
			*ret = list[i];
			memset(&list[i], 0, sizeof(list[i]));
			found = true;
		}
	sbx_sandbox_info_list_free(list, n);
	return found;
}

/* Waits up to SECONDS until alice's sandbox NAME is listed with STATUS. */
static bool wait_status(sbx_manager *m, const char *name, const char *status, int seconds)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (secs_since(&t0) < seconds) {
		struct sbx_sandbox_info in;
		bool got = false;
		if (entry_of(m, name, &in)) {
			got = strcmp(in.status, status) == 0;
			sbx_sandbox_info_release(&in);
		}
		if (got)
			return true;
		usleep(200000);
	}
	return false;
}

/* The lifecycle: sandbox.idle_timeout=2s puts an unused sandbox to sleep
 * (its container stopped, its files kept; where the engine cannot keep a
 * stopped container, it is removed instead), never one with a call running
 * in it; sandbox.sleep_lifetime=3s then removes it; the list says when each
 * falls asleep and expires; a later call says it expired. */
static void test_reap(void)
{
	const char *const idle[] = {"sandbox.idle_timeout=2s", "sandbox.sleep_lifetime=3s",
				    "sandbox.max_sandboxes=2", NULL};
	bool sleeps = sbx_engine_restart_keeps(engine);
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info in = {0};
	struct sbx_run_result res = {0};
	struct busy_call busy = {0};
	struct test_manager tm;
	struct timespec t0;
	sbx_manager *m;
	sbx_sandbox *a = NULL, *b = NULL;
	char id_a[SBX_SANDBOX_ID_MAX + 1] = "";
	int r;

	m = test_manager_open(&tm, "reap", idle, NULL);
	if (!tap_call(sbx_sandbox_create(m, "alice", "idle", &a, &err), err.msg, "create idle") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "busy", &b, &err), err.msg, "create busy"))
		goto out;
	snprintf(id_a, sizeof(id_a), "%s", sbx_sandbox_id(a));
	/* busy is used for 8 s, four times idle_timeout. */
	busy = (struct busy_call){
	    .m = m, .sb = b, .python = true, .code = "import time\ntime.sleep(8)\nprint('done')"};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&busy.thread, NULL, busy_main, &busy);
	if (tap_ok(entry_of(m, "idle", &in), "list it")) {
		if (sleeps && in.asleep_since > 0) /* 2 s gone already: a loaded machine */
			tap_ok(in.sleeps_at == 0 && in.expires == in.asleep_since + 3,
			       "listed asleep already (%lld s after its last use): it expires 3 s "
			       "after it fell asleep (%lld)",
			       (long long)(in.asleep_since - in.last_used),
			       (long long)(in.expires - in.asleep_since));
		else if (sleeps)
			tap_ok(in.sleeps_at == in.last_used + 2 && in.expires == in.last_used + 5,
			       "the list says when it falls asleep (2 s after its last use: %lld) "
			       "and expires (3 s later: %lld)",
			       (long long)(in.sleeps_at - in.last_used),
			       (long long)(in.expires - in.last_used));
		else
			tap_ok(in.sleeps_at == 0 && in.expires == in.last_used + 2,
			       "the list says when it expires: 2 s after its last use (%lld), and "
			       "that it never sleeps here",
			       (long long)(in.expires - in.last_used));
		sbx_sandbox_info_release(&in);
	}

	if (sleeps) {
		char *cid = container_of(tm.inst, id_a);
		struct sbx_container_info ci = {0};

		bool ok = wait_status(m, "idle", "sleeping", 60);

		/* Listed sleeping from the start of its stop: wait for the end. */
		for (int i = 0; ok && i < 300; i++) {
			enum sbx_sleep st;
			pthread_mutex_lock(&m->lock);
			st = a->sleep;
			pthread_mutex_unlock(&m->lock);
			if (st == SBX_SLEEP_ASLEEP)
				break;
			usleep(100000);
		}
		tap_ok(ok, "the unused sandbox is put to sleep within 60 s (%.1f s)",
		       secs_since(&t0));
		tap_ok(cid && sbx_container_inspect(engine, cid, &ci, &err) == 0 && !ci.running &&
			   ci.name && strstr(ci.name, ".asleep-"),
		       "its container is stopped, kept, and named asleep (%s)",
		       ci.name ? ci.name : err.msg);
		sbx_container_info_release(&ci);
		if (tap_ok(entry_of(m, "idle", &in), "list it asleep")) {
			tap_ok(!in.reason && in.asleep_since > 0 && in.sleeps == 1 &&
				   in.expires == in.asleep_since + 3 && in.memory_bytes == 0,
			       "listed asleep since %lld, once, expiring 3 s later (%lld), no "
			       "memory, not dead (%s)",
			       (long long)in.asleep_since,
			       (long long)(in.expires - in.asleep_since),
			       in.reason ? in.reason : "no reason");
			sbx_sandbox_info_release(&in);
		}
		{
			struct sbx_sandbox_counts c;
			sbx_manager_sandbox_counts(m, &c);
			tap_ok(c.sleeping >= 1, "counted sleeping (%zu)", c.sleeping);
		}
		{
			sbx_sandbox *third = NULL;
			sbx_error_clear(&err);
			r = sbx_sandbox_create(m, "alice", "third", &third, &err);
			tap_ok(r == -EBUSY && strstr(err.msg, "asleep, last used"),
			       "asleep, it keeps its place in sandbox.max_sandboxes (2), and the "
			       "error says it sleeps: %s",
			       err.msg);
			sbx_sandbox_unref(third);
		}
		free(cid);
	}
	r = wait_gone(m, "alice", "idle", 60, &err);
	tap_ok(r == -ENOENT, "the unused sandbox is removed within 60 s (%.1f s)", secs_since(&t0));
	if (sleeps)
		tap_ok(strstr(err.msg, "expired") && strstr(err.msg, "asleep (unused) for 3 s") &&
			   strstr(err.msg, "sandbox.sleep_lifetime"),
		       "asleep for sleep_lifetime: a get of it says it expired, and why: %s",
		       err.msg);
	else
		tap_ok(strstr(err.msg, "expired") && strstr(err.msg, "not used for 2 s") &&
			   strstr(err.msg, "sandbox.idle_timeout"),
		       "a get of it says it expired, and why: %s", err.msg);
	tap_ok(wait_container_gone(tm.inst, id_a, 30), "its container is gone from the engine");
	sbx_error_clear(&err);
	r = sbx_sandbox_run_shell(m, a, "true", 0, &res, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "expired"),
	       "a call through a reference held from before says it expired: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);

	pthread_join(busy.thread, NULL);
	tap_ok(busy.r == 0,
	       "a sandbox with a call running in it is neither put to sleep nor removed: its 8 s "
	       "call ends well (%d %s)",
	       busy.r, busy.err.msg);
	r = wait_gone(m, "alice", "busy", 60, &err);
	tap_ok(r == -ENOENT && strstr(err.msg, "expired"),
	       "once the call has ended, it goes in its turn: %s", err.msg);
out:
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	test_manager_close(&tm, "nothing of the reaping test is left");
}

/* A sleeping sandbox whose container is removed from outside: the
 * engine's destroy event makes it dead and no longer asleep, and wakes the
 * reaper, which removes it at once (its idle time passed long ago), not at
 * its sleep's end ten minutes later. */
static void test_dead_asleep(void)
{
	const char *const set[] = {"sandbox.idle_timeout=2s", "sandbox.sleep_lifetime=10m", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct test_manager tm;
	struct timespec t0;
	sbx_manager *m;
	sbx_sandbox *a = NULL;
	enum sbx_sleep st = SBX_SLEEP_AWAKE;
	char *cid = NULL;
	int r;

	m = test_manager_open(&tm, "dead-asleep", set, NULL);
	if (!tap_call(sbx_sandbox_create(m, "alice", "napper", &a, &err), err.msg,
		      "create a sandbox that sleeps after 2 s"))
		goto out;
	cid = container_of(tm.inst, sbx_sandbox_id(a));
	for (int i = 0; i < 600 && st != SBX_SLEEP_ASLEEP; i++) {
		usleep(100000);
		pthread_mutex_lock(&m->lock);
		st = a->sleep;
		pthread_mutex_unlock(&m->lock);
	}
	if (!tap_ok(st == SBX_SLEEP_ASLEEP && cid, "it falls asleep within 60 s"))
		goto out;
	if (!tap_call(sbx_container_remove(engine, cid, &err), err.msg,
		      "its stopped container is removed from outside"))
		goto out;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = wait_gone(m, "alice", "napper", 60, &err);
	tap_ok(r == -ENOENT,
	       "the dead sleeper is removed within 60 s, not at its sleep's end in 10 min "
	       "(%.1f s): %s",
	       secs_since(&t0), err.msg);
	pthread_mutex_lock(&m->lock);
	tap_ok(a->death == SBX_DEATH_REMOVED && a->sleep == SBX_SLEEP_AWAKE,
	       "its record says it was removed, and no longer asleep (death %d, sleep %d)",
	       (int)a->death, (int)a->sleep);
	pthread_mutex_unlock(&m->lock);
out:
	free(cid);
	sbx_sandbox_unref(a);
	test_manager_close(&tm, "nothing of the dead sleeper's test is left");
}

/* Across a restart: a sandbox put to sleep is adopted asleep (from its
 * container's name) and wakes with its files; a container stopped from
 * outside is adopted dead, not asleep; one that was woken while its name
 * kept the mark (the server died between) is adopted running, unmarked. */
static void test_sleep_restart(void)
{
	const char *const keep[] = {"sandbox.remove_on_exit=false", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s1, s2;
	struct sbx_run_result res = {0};
	struct sbx_sandbox_info in = {0};
	struct sbx_container_info ci = {0};
	sbx_manager *m;
	sbx_sandbox *nap = NULL, *stop = NULL, *marked = NULL;
	char inst[80], *nap_cid = NULL, *stop_cid = NULL, *marked_cid = NULL;
	time_t slept;
	int r;

	if (!sbx_engine_restart_keeps(engine))
		return;
	snprintf(inst, sizeof(inst), "%s-slp", instance);
	settings_for(&s1, inst, keep);
	settings_for(&s2, inst, NULL);
	m = manager(&s1, engine);
	if (!tap_call(sbx_sandbox_create(m, "alice", "napper", &nap, &err), err.msg, "create") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "stopped", &stop, &err), err.msg, "create") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "marked", &marked, &err), err.msg, "create"))
		goto out;
	nap_cid = container_of(inst, sbx_sandbox_id(nap));
	stop_cid = container_of(inst, sbx_sandbox_id(stop));
	marked_cid = container_of(inst, sbx_sandbox_id(marked));
	r = shell(m, nap, "echo napped > /app/results/n.txt", &res);
	tap_ok(r == 0 && res.exit_code == 0, "a file is written");
	sbx_run_result_release(&res);
	tap_call(sbx_sandbox_sleep(nap, &err), err.msg, "put it to sleep");
	slept = time(NULL);
	tap_call(sbx_container_stop(engine, stop_cid, 0, &err), err.msg,
		 "stop another one's container from outside");
	{
		char name[SBX_CONTAINER_NAME_MAX + 1];
		snprintf(name, sizeof(name), "mcp-sbx-%s-%s.asleep-%lld", inst,
			 sbx_sandbox_id(marked), (long long)slept);
		tap_call(sbx_container_rename(engine, marked_cid, name, &err), err.msg,
			 "name a running one's container asleep");
	}
	sbx_sandbox_unref(nap);
	sbx_sandbox_unref(stop);
	sbx_sandbox_unref(marked);
	nap = stop = marked = NULL;
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 3, "with remove_on_exit=false the containers stay");

	m = manager(&s2, engine);
	{
		/* The mark is read strictly: this instance, this id, 1 to 12 digits. */
		static const char *const bad[] = {
		    ".asleep-",	 ".asleep-12a", ".asleep-1234567890123", ".asleep--5", ".asleep-5 ",
		    ".Asleep-5", "x.asleep-5",	".asleep-5.asleep-6"};
		char name[SBX_CONTAINER_NAME_MAX + 1];
		bool none = true;

		snprintf(name, sizeof(name), "mcp-sbx-%s-abc.asleep-1700000000", inst);
		tap_is_int((long)sbx_container_asleep_since(m, "abc", name), 1700000000L,
			   "a marked name gives the time it fell asleep");
		tap_is_int((long)sbx_container_asleep_since(m, "ab", name), 0,
			   "... and not for another id it starts with");
		snprintf(name, sizeof(name), "mcp-sbx-%s-x-abc.asleep-5", inst);
		none = sbx_container_asleep_since(m, "abc", name) == 0;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
			snprintf(name, sizeof(name), "mcp-sbx-%s-abc%s", inst, bad[i]);
			none = none && sbx_container_asleep_since(m, "abc", name) == 0;
		}
		tap_ok(none, "no time from a name of another instance, or a mark that is not one");
	}
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 3, "recover adopts them (%s)", err.msg);
	if (tap_ok(entry_of(m, "napper", &in), "list the sleeping one")) {
		tap_ok(strcmp(in.status, "sleeping") == 0 && !in.reason &&
			   in.asleep_since >= slept - 2 && in.asleep_since <= slept,
		       "adopted asleep, since when it fell asleep (%s, %lld s before the stop)",
		       in.status, (long long)(slept - in.asleep_since));
		sbx_sandbox_info_release(&in);
	}
	tap_ok(nap_cid && sbx_container_inspect(engine, nap_cid, &ci, NULL) == 0 && !ci.running,
	       "... and not started by the adoption");
	sbx_container_info_release(&ci);
	if (tap_ok(entry_of(m, "stopped", &in), "list the one stopped from outside")) {
		tap_ok(in.reason && strcmp(in.status, "sleeping") != 0,
		       "it is dead, not asleep: %s", in.reason ? in.reason : in.status);
		sbx_sandbox_info_release(&in);
	}
	if (tap_ok(entry_of(m, "marked", &in), "list the running one named asleep")) {
		tap_ok(strcmp(in.status, "running") == 0 && !in.reason,
		       "it is adopted running (%s)", in.status);
		sbx_sandbox_info_release(&in);
	}
	tap_ok(marked_cid && sbx_container_inspect(engine, marked_cid, &ci, NULL) == 0 && ci.name &&
		   !strstr(ci.name, ".asleep-"),
	       "... and its name loses the mark (%s)", ci.name ? ci.name : "?");
	sbx_container_info_release(&ci);
	if (tap_call(sbx_sandbox_get(m, "alice", "napper", &nap, &err), err.msg, "get it")) {
		bool woke = false;
		tap_call(sbx_sandbox_wake(m, nap, &woke, &err), err.msg, "wake it");
		tap_ok(woke, "the wake says it was asleep");
		r = shell(m, nap, "cat /app/results/n.txt", &res);
		tap_ok(r == 0 && res.out.data && strcmp(res.out.data, "napped\n") == 0,
		       "after the restart it wakes with its file");
		sbx_run_result_release(&res);
		tap_ok(nap_cid && sbx_container_inspect(engine, nap_cid, &ci, NULL) == 0 &&
			   ci.running && ci.name && !strstr(ci.name, ".asleep-"),
		       "its container runs, its name without the mark (%s)",
		       ci.name ? ci.name : "?");
		sbx_container_info_release(&ci);
	}
out:
	sbx_sandbox_unref(nap);
	sbx_sandbox_unref(stop);
	sbx_sandbox_unref(marked);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "with remove_on_exit the manager removes them");
	free(nap_cid);
	free(stop_cid);
	free(marked_cid);
	sbx_settings_release(&s1);
	sbx_settings_release(&s2);
}

/* sandbox.max_lifetime=3s removes a sandbox that is used all the time. */
static void test_lifetime(void)
{
	const char *const life[] = {"sandbox.idle_timeout=0s", "sandbox.max_lifetime=3s", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info info = {0};
	struct sbx_run_result res = {0};
	struct test_manager tm;
	struct timespec t0;
	sbx_manager *m;
	sbx_sandbox *a = NULL;
	int r = 0, calls = 0;

	m = test_manager_open(&tm, "life", life, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!tap_call(sbx_sandbox_create(m, "alice", "old", &a, &err), err.msg, "create old"))
		goto out;
	if (tap_call(sbx_sandbox_describe(m, a, &info, &err), err.msg, "describe"))
		tap_ok(info.expires == info.created + 3, "it expires 3 s after its creation (%lld)",
		       (long long)(info.expires - info.created));
	sbx_sandbox_info_release(&info);
	while (secs_since(&t0) < 60) {
		sbx_error_clear(&err);
		r = sbx_sandbox_run_shell(m, a, "true", 0, &res, &err);
		if (r < 0)
			break;
		sbx_run_result_release(&res);
		calls++;
		usleep(300000);
	}
	tap_ok(r == -ENOENT && strstr(err.msg, "maximum age of 3 s") &&
		   strstr(err.msg, "sandbox.max_lifetime"),
	       "used every 0.3 s, it is removed all the same after %d calls: %s", calls, err.msg);
	tap_ok(secs_since(&t0) >= 2.0, "not before its time (%.1f s)", secs_since(&t0));
out:
	sbx_sandbox_unref(a);
	test_manager_close(&tm, "nothing of the lifetime test is left");
}

static void test_engine_down(void)
{
	struct sbx_engine_config cfg = {.type = engine_type,
					.url = "unix:///nonexistent/sbx/engine.sock"};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_engine *dead = NULL;
	sbx_manager *m = NULL;
	sbx_sandbox *sb = NULL;
	char inst[80];
	int r;

	snprintf(inst, sizeof(inst), "%s-dead", instance);
	settings_for(&s, inst, NULL);
	if (sbx_engine_open(&cfg, &dead, &err) < 0 || sbx_manager_new(&s, dead, &m, &err) < 0) {
		tap_ok(0, "a manager on an absent engine (%s)", err.msg);
		return;
	}
	r = sbx_sandbox_create(m, "alice", NULL, &sb, &err);
	tap_ok(r < 0 && sb == NULL, "create on an absent engine fails");
	tap_ok(strstr(err.msg, "create sandbox") && strstr(err.msg, "does not exist"),
	       "with a clear message: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_manager_recover(m, &err);
	tap_ok(r < 0, "recover fails too: %s", err.msg);
	m = sbx_manager_free(m);
	sbx_engine_free(dead);
	sbx_settings_release(&s);
}

/* Failed creates leave nothing behind and say why. */
static void test_create_failures(void)
{
	const char *const no_image[] = {"sandbox.image=localhost/sbx-no-such-image:missing", NULL};
	const char *const no_net[] = {"sandbox.network=sbx-no-such-network", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m = NULL;
	sbx_sandbox *sb = NULL;
	char inst[80];
	int r;

	snprintf(inst, sizeof(inst), "%s-fail", instance);
	settings_for(&s, inst, no_image);
	m = manager(&s, engine);
	r = sbx_sandbox_create(m, "alice", NULL, &sb, &err);
	tap_is_int(r, -ENOENT, "create from a missing image: ENOENT");
	tap_ok(strstr(err.msg, "sbx-no-such-image") && strstr(err.msg, "missing"),
	       "the message names the image: %s", err.msg);
	m = sbx_manager_free(m);
	sbx_settings_release(&s);

	sbx_error_clear(&err);
	settings_for(&s, inst, no_net);
	m = manager(&s, engine);
	r = sbx_sandbox_create(m, "alice", NULL, &sb, &err);
	tap_ok(r < 0 && !sb, "create on a missing network fails: %s", err.msg);
	tap_is_int(count_instance(inst), 0, "and leaves no container behind");
	{
		struct sbx_sandbox_info *list = NULL;
		size_t n = 9;
		r = sbx_manager_list(m, "alice", &list, &n, &err);
		tap_ok(r == 0 && n == 0, "nor a record");
		sbx_sandbox_info_list_free(list, n);
	}
	m = sbx_manager_free(m);
	sbx_settings_release(&s);
}

static void test_recover_and_limit(void)
{
	const char *const keep[] = {"sandbox.remove_on_exit=false", "sandbox.max_sandboxes=1",
				    NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s1, s2;
	struct sbx_run_result res;
	sbx_manager *m = NULL;
	sbx_sandbox *sb = NULL, *sb2 = NULL;
	char inst[80], id[SBX_SANDBOX_ID_MAX + 1] = "";
	int r;

	snprintf(inst, sizeof(inst), "%s-rec", instance);
	settings_for(&s1, inst, keep);
	settings_for(&s2, inst, NULL);
	m = manager(&s1, engine);
	r = sbx_sandbox_create(m, "dave", "kept", &sb, &err);
	tap_ok(r == 0, "create under max_sandboxes=1 (%s)", err.msg);
	if (sb)
		snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sb));
	r = sbx_sandbox_create(m, "erin", NULL, &sb2, &err);
	tap_is_int(r, -EBUSY, "a second one: EBUSY (%s)", err.msg);
	if (sb)
		shell(m, sb, "echo kept > /app/results/k.txt", &res), sbx_run_result_release(&res);
	if (sb && python(m, sb, "import subprocess\nsubprocess.Popen(['sleep', '321'])\nv = 1\n",
			 &res) == 0)
		tap_is_int(res.exit_code, 0, "the interpreter runs and leaves a child");
	sbx_run_result_release(&res);
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 1, "with remove_on_exit=false the container stays");

	m = manager(&s2, engine);
	{
		time_t before = time(NULL);
		struct sbx_sandbox_info *list = NULL;
		size_t n = 0;
		r = sbx_manager_recover(m, &err);
		tap_is_int(r, 1, "recover adopts it (%s)", err.msg);
		if (tap_call(sbx_manager_list(m, "dave", &list, &n, &err), err.msg, "list") &&
		    n == 1)
			tap_ok(
			    list[0].last_used >= before && list[0].expires > list[0].last_used,
			    "an adopted sandbox counts as used at adoption, its expiry from then");
		sbx_sandbox_info_list_free(list, n);
	}
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 0, "recover again adopts nothing new");
	sb = NULL;
	r = sbx_sandbox_get(m, "dave", id, &sb, &err);
	tap_ok(r == 0, "get it by id after recover (%s)", err.msg);
	tap_is_str(sb ? sbx_sandbox_name(sb) : NULL, "kept", "its name came back from labels");
	r = sbx_sandbox_get(m, "erin", "kept", &sb2, &err);
	tap_is_int(r, -ENOENT, "its owner came back too");
	if (sb && shell(m, sb, "cat k.txt", &res) == 0)
		tap_is_str(res.out.data, "kept\n", "and its files");
	sbx_run_result_release(&res);
	/* The old server's interpreter ended with its stream, child included. */
	if (sb && shell(m, sb,
			"a=sbx_in; b=sleep; for i in $(seq 50); do n=0; for p in /proc/[0-9]*; do "
			"case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in "
			"*\"${a}terp.py\"*|\"${b} 321 \") n=$((n+1));; esac; done; "
			"[ $n = 0 ] && break; sleep 0.1; done; echo $n",
			&res) == 0)
		tap_is_str(res.out.data, "0\n",
			   "a freed record's interpreter and its children are gone");
	sbx_run_result_release(&res);
	if (sb && python(m, sb, "print(globals().get('v'))\n", &res) == 0)
		tap_ok(strcmp(res.out.data, "None\n") == 0 && !res.interpreter_restarted,
		       "an adopted sandbox starts a fresh interpreter");
	sbx_run_result_release(&res);
	if (sb) {
		char *got = NULL;
		int64_t size;
		r = sbx_sandbox_upload(m, sb, "/etc/hostname", NULL, &got, &size, &err);
		tap_is_int(r, -EPERM, "uploads disabled: EPERM (%s)", err.msg);
		free(got);
	}
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "with remove_on_exit the manager removes it");
	sbx_settings_release(&s1);
	sbx_settings_release(&s2);
}

int main(int argc, char **argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m = NULL;
	sbx_sandbox *a = NULL, *named = NULL;
	char up[] = "/tmp/sbx-upload-XXXXXX", outside[] = "/tmp/sbx-outside-XXXXXX";
	char upload_dir[128], rm[128];
	const char *const extra[] = {upload_dir, "sandbox.max_upload=1m", NULL};
	bool rootless = argc > 1 && !strcmp(argv[1], "--rootless");

	if (rootless) {
		argv[1] = argv[0];
		argc--;
		argv++;
	}
	if (rootless) {
		/* Rootless Podman on cgroup v1 drops the limits: run anyway (the
		 * refusal has its own test). */
		static const char *const unlimited[] = {"sandbox.allow_unlimited=true", NULL};
		fixture_settings = unlimited;
	}
	fixture_init(argc, argv, "test");
	if (!mkdtemp(up) || !mkdtemp(outside))
		tap_bail("mkdtemp");
	snprintf(upload_dir, sizeof(upload_dir), "sandbox.upload_dir=%s", up);

	settings_for(&s, instance, extra);
	if (only("basics")) {
		test_utf8();
		test_spec_table();
		m = manager(&s, engine);
		test_create_get_list(m, &a, &named);
		test_limits(m, a, &s, rootless);
		test_unlimited_refused(rootless &&
				       access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0);
		test_shell(m, a);
		test_python(m, named);
		test_interpreter(m, a);
		test_long_line(m, a, &s);
		test_upload_artifacts(m, named, up, outside);
		test_default_time_limit();
		if (all_parts()) {
			test_threads(m);
			test_stopped(m);
			test_sleep(m);
			test_killed_mid_call(m);
			test_forged_stop(m);
		}
		{
			sbx_sandbox *x = NULL;
			tap_ok(sbx_sandbox_delete(m, "alice", "work", &err) == 0,
			       "delete by name (%s)", err.msg);
			tap_is_int(sbx_sandbox_get(m, "alice", "work", &x, &err), -ENOENT,
				   "then it is gone");
		}
		sbx_sandbox_unref(named);
		sbx_sandbox_unref(a);
		m = sbx_manager_free(m);
		tap_is_int(count_instance(instance), 0,
			   "the manager removed its sandboxes on free");
	}

	if (only("delete"))
		test_delete();
	if (only("dead-asleep") && sbx_engine_restart_keeps(engine))
		test_dead_asleep();
	if (all_parts()) {
		test_reap();
		test_sleep_restart();
		test_lifetime();
		test_engine_down();
		test_create_failures();
		test_recover_and_limit();
		test_packages(find_script(argv[0]));
	}

	tap_is_int(count_instance(instance), 0, "no container of this run is left");
	sbx_settings_release(&s);
	snprintf(rm, sizeof(rm), "rm -rf '%s' '%s'", up, outside);
	if (system(rm) != 0)
		tap_diag("could not remove %s and %s", up, outside);
	return fixture_end();
}
