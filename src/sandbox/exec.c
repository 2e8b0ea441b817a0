/* SPDX-License-Identifier: MIT */
/*
 * Running things in a sandbox: a shell command is one plain exec; Python code
 * goes to the sandbox's persistent interpreter (interp.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/utf8.h"

/* Runs spec in sb; an exec that cannot run is explained for the user. */
static int run_exec(sbx_manager *m, sbx_sandbox *sb, struct sbx_exec_spec *spec,
		    struct sbx_exec_result *ret, struct sbx_error *err)
{
	struct sbx_exec_result res = {0};
	int r;

	if (!spec->workdir)
		spec->workdir = SBX_RESULTS_DIR;
	r = sbx_sandbox_begin(sb, err);
	if (r < 0)
		return r;
	r = sbx_exec(m->engine, sb->container, spec, &res, err);
	if (r >= 0 && !res.timed_out && !res.cancelled &&
	    (res.exit_code == 126 || res.exit_code == 137)) {
		/* The engine may have cut it off as the container stopped
		 * (Docker: 126 "cannot exec in a stopped state", 137 for what
		 * it killed): then it is the sandbox's end, not the command's
		 * result; so is an engine that cannot tell (stopping itself). */
		struct sbx_error ierr = SBX_ERROR_INIT;
		int st = sbx_sandbox_stopped(m, sb, SBX_STOP_SETTLE_MS, &ierr),
		    code = res.exit_code;
		if (st < 0) {
			sbx_exec_result_release(&res);
			sbx_sandbox_end(sb, NULL);
			if (err)
				*err = ierr;
			sbx_error_prefix(err,
					 "sandbox %s: the command ended with exit code %d and the "
					 "engine cannot say whether the sandbox still runs",
					 sb->id, code);
			return st;
		}
		if (st == 0 && code == 126 && !res.started && res.out.data &&
		    strstr(res.out.data, "cannot exec in a stopped state")) {
			/* Docker's own words while its engine stops the container
			 * (its inspect still says running), said only when the
			 * command never started: the same text printed by a
			 * command that ran is that command's output. */
			sbx_exec_result_release(&res);
			sbx_sandbox_end(sb, NULL);
			return sbx_error_set(
			    err, -EPIPE,
			    "sandbox %s: the engine could not run the command: its "
			    "container is stopping (cannot exec in a stopped state); "
			    "if the engine is restarting, create_sandbox makes a new "
			    "one once it is back",
			    sb->id);
		}
		if (st > 0) {
			sbx_exec_result_release(&res);
			r = -EPIPE;
		}
	}
	if (r < 0) {
		r = sbx_sandbox_exec_failed(m, sb, r, err);
		sbx_sandbox_end(sb, NULL);
		return r;
	}
	r = sbx_sandbox_end(sb, err);
	if (r < 0) {
		sbx_exec_result_release(&res);
		return r;
	}
	*ret = res;
	return 0;
}

/* Moves an exec result into a run result with valid UTF-8 output. */
static int take_result(struct sbx_exec_result *res, struct sbx_run_result *out,
		       struct sbx_error *err)
{
	memset(out, 0, sizeof(*out));
	out->exit_code = res->timed_out ? -1 : res->exit_code;
	out->timed_out = res->timed_out;
	out->cancelled = res->cancelled;
	out->truncated = res->truncated;
	out->out = res->out;
	out->err = res->err;
	memset(&res->out, 0, sizeof(res->out));
	memset(&res->err, 0, sizeof(res->err));
	if (sbx_buf_append(&out->out, "", 0) < 0 || sbx_buf_append(&out->err, "", 0) < 0 ||
	    sbx_utf8_sanitize(&out->out) < 0 || sbx_utf8_sanitize(&out->err) < 0) {
		sbx_run_result_release(out);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

/* A command that died of SIGKILL, or whose shell says a process was
 * killed: was it the OOM killer? */
static int shell_oom(sbx_manager *m, sbx_sandbox *sb, struct sbx_run_result *out)
{
	bool killed = out->exit_code == 137 ||
		      (out->exit_code != 0 && out->err.data && strstr(out->err.data, "Killed"));

	if (!killed || out->timed_out || out->cancelled || sbx_sandbox_oom_since(m, sb) <= 0)
		return 0;
	out->out_of_memory = true;
	return sbx_oom_notice(m, sb, "The command", &out->notice);
}

/* The output shows a write refused for lack of space (ENOSPC, or EDQUOT
 * from a quota) while sandbox.disk bounds the sandbox: say so. The text is
 * the sandbox's own, so a forged one misleads only its own caller. */
static int disk_notice(const sbx_manager *m, struct sbx_run_result *out, const char *what)
{
	if (m->s->sandbox.disk <= 0 ||
	    !(sbx_says_out_of_disk(&out->err) || sbx_says_out_of_disk(&out->out)))
		return 0;
	out->out_of_disk = true;
	return sbx_str_replacef(
	    &out->notice,
	    "%s%s%s ran out of disk space: a sandbox may write %lld MiB in all (sandbox.disk), "
	    "its files, /tmp and installed packages together. Delete files it no longer "
	    "needs, or create a new sandbox.",
	    out->notice ? out->notice : "", out->notice ? " " : "", what,
	    (long long)(m->s->sandbox.disk >> 20));
}

/* Adds the egress relay's NOTICE (sbx_sandbox_egress_for_code; may be NULL) after
 * what OUT's notice says. */
static int relay_notice(struct sbx_run_result *out, const char *notice)
{
	if (!notice)
		return 0;
	return sbx_str_replacef(&out->notice, "%s%s%s", out->notice ? out->notice : "",
				out->notice ? " " : "", notice);
}

static long time_limit(sbx_manager *m, long timeout_ms)
{
	return timeout_ms > 0 ? timeout_ms : (long)m->s->sandbox.exec_timeout_ms;
}

int sbx_sandbox_run_shell_ex(sbx_manager *m, sbx_sandbox *sb, const char *command,
			     const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
			     struct sbx_error *err)
{
	const char *const argv[] = {"sh", "-c", command, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .timeout_ms = time_limit(m, opts ? opts->timeout_ms : 0),
	    .output_cap = (size_t)m->s->sandbox.output_cap,
	    .cancelled = opts ? opts->cancelled : NULL,
	    .userdata = opts ? opts->userdata : NULL,
	};
	struct sbx_exec_result res = {0};
	struct sbx_run_result out;
	_cleanup_free_ char *relay = NULL;
	int r;

	if (!command)
		return sbx_error_set(err, -EINVAL, "no command given");
	relay = sbx_sandbox_egress_for_code(m, sb);
	r = run_exec(m, sb, &spec, &res, err);
	if (r < 0)
		return r;
	r = take_result(&res, &out, err);
	sbx_exec_result_release(&res);
	if (r < 0)
		return r;
	if (shell_oom(m, sb, &out) < 0 || disk_notice(m, &out, "The command") < 0 ||
	    relay_notice(&out, relay) < 0) {
		sbx_run_result_release(&out);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_result = out;
	return 0;
}

int sbx_sandbox_run_shell(sbx_manager *m, sbx_sandbox *sb, const char *command, long timeout_ms,
			  struct sbx_run_result *ret_result, struct sbx_error *err)
{
	struct sbx_run_opts opts = {.timeout_ms = timeout_ms};
	return sbx_sandbox_run_shell_ex(m, sb, command, &opts, ret_result, err);
}

struct relay_job {
	sbx_manager *m;
	sbx_sandbox *sb;
	char *notice;
};

static void *relay_main(void *arg)
{
	struct relay_job *j = arg;

	j->notice = sbx_sandbox_egress_for_code(j->m, j->sb);
	return NULL;
}

/* Before Python code runs in SB: its relay (sbx_sandbox_egress_for_code's
 * notice) and its interpreter up. When both must start (the first call,
 * or the first after a wake: about 100 ms each), they start side by side,
 * the relay on a thread of its own that ends before the code runs. */
static char *relay_and_interp(sbx_manager *m, sbx_sandbox *sb)
{
	struct relay_job j = {m, sb, NULL};
	pthread_t t;

	if (sbx_sandbox_egress_ready(m, sb) || pthread_create(&t, NULL, relay_main, &j) != 0)
		return sbx_sandbox_egress_for_code(m, sb);
	sbx_interp_prepare(m, sb);
	pthread_join(t, NULL);
	return j.notice;
}

int sbx_sandbox_run_python_ex(sbx_manager *m, sbx_sandbox *sb, const char *code,
			      const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
			      struct sbx_error *err)
{
	struct sbx_run_result out;
	_cleanup_free_ char *relay = relay_and_interp(m, sb);
	int r = sbx_interp_run(m, sb, code, opts, &out, err);

	if (r < 0)
		return r;
	if (disk_notice(m, &out, "The Python code") < 0 || relay_notice(&out, relay) < 0) {
		sbx_run_result_release(&out);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_result = out;
	return r;
}

int sbx_sandbox_run_python(sbx_manager *m, sbx_sandbox *sb, const char *code, long timeout_ms,
			   struct sbx_run_result *ret_result, struct sbx_error *err)
{
	struct sbx_run_opts opts = {.timeout_ms = timeout_ms};
	return sbx_sandbox_run_python_ex(m, sb, code, &opts, ret_result, err);
}

int sbx_sandbox_reset_python(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	return sbx_interp_reset(m, sb, err);
}
