/* SPDX-License-Identifier: MIT */
/*
 * What makes a sandbox safe to hand to hostile code, checked on a real engine
 * for sandboxes the manager made: what the engine's inspect says (capabilities
 * dropped, no-new-privileges, memory, PIDs, CPUs, network, init, runtime) and
 * what code inside sees (no capabilities, NoNewPrivs, no route out, the
 * process limit), then the behaviours those lines exist for: 300 orphans
 * leave the sandbox working (an init reaps them), a fork bomb's time limit
 * leaves nothing of it behind, and a neighbour keeps answering meanwhile;
 * and a file reader's replies, forged by code in the sandbox that stands in
 * for it on its pipes, end in a clear error and leave the server whole.
 *
 * Usage: test-hardening [--part=rest|--part=swap-race|--part=swap-race-half] TYPE URL [IMAGE]
 * The swap race (a link swapped under 2,000 fetches, SBX_SWAP_FETCHES, the
 * longest part: 23 minutes on Podman at load 40) runs alone with
 * --part=swap-race, everything else with --part=rest; --part=swap-race-half
 * runs half the fetches, on a sandbox and a swapper of its own, so that make
 * check runs two halves and the rest at once (tests/engine-suite:
 * swap-race1-ENGINE, swap-race2-ENGINE, hardening-ENGINE): the same 2,000
 * fetches in all. Without --part, all of it.
 */
#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/engine-internal.h"
#include "sandbox-fixture.h"
#include "sbx/artifact.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "tap.h"

static bool strv_has(char *const *v, const char *s)
{
	for (; v && *v; v++)
		if (!strcmp(*v, s))
			return true;
	return false;
}

/* Docker reports the "ALL" that was asked; libpod lists each default
 * capability it dropped. Either way nothing may be added back. */
static bool caps_all_dropped(const struct sbx_container_info *ci)
{
	static const char *const podman_defaults[] = {
	    "CAP_CHOWN",   "CAP_DAC_OVERRIDE",	   "CAP_FOWNER",     "CAP_FSETID",
	    "CAP_KILL",	   "CAP_NET_BIND_SERVICE", "CAP_SETFCAP",    "CAP_SETGID",
	    "CAP_SETPCAP", "CAP_SETUID",	   "CAP_SYS_CHROOT", NULL};

	if (ci->cap_add && ci->cap_add[0])
		return false;
	if (strv_has(ci->cap_drop, "ALL"))
		return true;
	for (const char *const *c = podman_defaults; *c; c++)
		if (!strv_has(ci->cap_drop, *c))
			return false;
	return true;
}

/* The value of "KEY:\tVALUE" in a /proc status text, or "" . */
static const char *status_field(const char *text, const char *key, char *buf, size_t size)
{
	const char *p = text;
	size_t klen = strlen(key);

	buf[0] = '\0';
	while (p && *p) {
		if (!strncmp(p, key, klen) && p[klen] == ':') {
			p += klen + 1;
			p += strspn(p, " \t");
			snprintf(buf, size, "%.*s", (int)strcspn(p, "\n"), p);
			break;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	return buf;
}

/* The user the container itself runs as, from the engine's own inspect
 * (Config.User): the request's, not the image's USER (the image runs as
 * uid 1000 too, so only this tells that the request says so whatever the
 * image is). */
static void check_user(const char *cid)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_error err = SBX_ERROR_INIT;
	const char *user;

	if (!tap_call(
		sbx_engine_json(engine, "GET", NULL, NULL, &j, &err, "/containers/%s/json", cid),
		err.msg, "inspect, the engine's reply"))
		return;
	user = sbx_json_str(sbx_json_path(j, "Config", NULL), "User");
	tap_is_str(user ? user : "", "1000:1000", "inspect: the container runs as 1000:1000");
}

static void check_inspect(const struct test_manager *x, sbx_sandbox *sb)
{
	const struct sbx_settings *s = &x->s;
	struct sbx_container_info ci = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	_cleanup_free_ char *cid = container_of(x->inst, sbx_sandbox_id(sb));

	if (!tap_ok(cid != NULL, "the sandbox's container is found by its labels"))
		return;
	check_user(cid);
	if (!tap_call(sbx_container_inspect(engine, cid, &ci, &err), err.msg, "inspect"))
		return;
	tap_ok(ci.init, "inspect: the engine's init is PID 1");
	tap_ok(ci.no_new_privileges, "inspect: no-new-privileges");
	tap_ok(caps_all_dropped(&ci), "inspect: every capability dropped, none added (%s%s)",
	       ci.cap_drop && ci.cap_drop[0] ? ci.cap_drop[0] : "none dropped",
	       ci.cap_drop && ci.cap_drop[0] && ci.cap_drop[1] ? ", ..." : "");
	tap_is_int(ci.memory_bytes, s->sandbox.memory, "inspect: memory limit");
	tap_is_int(ci.pids_limit, s->sandbox.pids_limit, "inspect: PID limit");
	tap_is_int(ci.nano_cpus, s->sandbox.nano_cpus, "inspect: CPU limit");
	tap_is_str(ci.network_mode ? ci.network_mode : "", "none", "inspect: network mode");
	if (s->sandbox.runtime[0])
		tap_is_str(ci.runtime ? ci.runtime : "", s->sandbox.runtime, "inspect: runtime");
	else
		tap_ok(ci.runtime && *ci.runtime, "inspect: a runtime (%s)",
		       ci.runtime ? ci.runtime : "none");
	sbx_container_info_release(&ci);
}

static void check_inside(const struct test_manager *x, sbx_sandbox *sb)
{
	struct sbx_run_result res;
	char v[128], want[64];
	long long nproc = (long long)sbx_sandbox_nproc(&x->s);

	if (shell(x->m, sb, "cat /proc/self/status", &res) == 0) {
		tap_is_str(status_field(res.out.data, "CapEff", v, sizeof(v)), "0000000000000000",
			   "inside: CapEff");
		tap_is_str(status_field(res.out.data, "CapPrm", v, sizeof(v)), "0000000000000000",
			   "inside: CapPrm");
		tap_is_str(status_field(res.out.data, "CapBnd", v, sizeof(v)), "0000000000000000",
			   "inside: CapBnd");
		tap_is_str(status_field(res.out.data, "NoNewPrivs", v, sizeof(v)), "1",
			   "inside: NoNewPrivs");
		tap_is_str(status_field(res.out.data, "Uid", v, sizeof(v)),
			   "1000\t1000\t1000\t1000", "inside: uid 1000");
	}
	sbx_run_result_release(&res);
	/* The interpreter is an exec of its own: the same holds there. */
	if (python(x->m, sb, "print(open('/proc/self/status').read())", &res) == 0) {
		tap_is_str(status_field(res.out.data, "CapEff", v, sizeof(v)), "0000000000000000",
			   "inside, the interpreter: CapEff");
		tap_is_str(status_field(res.out.data, "NoNewPrivs", v, sizeof(v)), "1",
			   "inside, the interpreter: NoNewPrivs");
	}
	sbx_run_result_release(&res);
	if (shell(x->m, sb, "cat /proc/1/comm", &res) == 0)
		tap_ok(strcmp(res.out.data, "sleep\n") != 0, "inside: PID 1 is an init, not %s",
		       res.out.data);
	sbx_run_result_release(&res);
	/* Network none: a loopback and nothing else, no route anywhere. */
	if (shell(x->m, sb, "ls /sys/class/net; tail -n +2 /proc/net/route", &res) == 0)
		tap_is_str(res.out.data, "lo\n", "inside: only a loopback, no route");
	sbx_run_result_release(&res);
	if (python(x->m, sb,
		   "import socket, errno\n"
		   "try:\n"
		   "    socket.create_connection(('192.0.2.1', 80), timeout=3)\n"
		   "    print('connected')\n"
		   "except OSError as e:\n"
		   "    print(errno.errorcode.get(e.errno, e))\n",
		   &res) == 0)
		tap_is_str(res.out.data, "ENETUNREACH\n", "inside: a connection out has no route");
	sbx_run_result_release(&res);
	/* RLIMIT_NPROC counts the uid on the whole host: above what all
	 * sandboxes may hold together, so each one's own pids limit binds. */
	if (shell(x->m, sb, "grep '^Max processes' /proc/self/limits | tr -s ' '", &res) == 0) {
		snprintf(want, sizeof(want), "Max processes %lld %lld processes \n", nproc, nproc);
		tap_is_str(res.out.data, want, "inside: RLIMIT_NPROC is pids_limit x sandboxes");
	}
	sbx_run_result_release(&res);
	tap_ok(nproc >=
		   x->s.sandbox.pids_limit * (x->s.sandbox.max_sandboxes + x->s.sandbox.pool_size),
	       "the process limit %lld holds every sandbox's pids limit", nproc);
}

/* Counts processes and zombies from inside, without forking. */
static const char count_procs[] =
    "n=0 z=0; for f in /proc/[0-9]*/stat; do s=; { read -r s <\"$f\"; } 2>/dev/null || continue; "
    "n=$((n+1)); set -- ${s##*) }; [ \"$1\" = Z ] && z=$((z+1)); done; echo \"$n $z\"";

static void test_orphans(const struct test_manager *x, sbx_sandbox *sb)
{
	struct sbx_run_result res;
	char cmd[512];
	int n = -1, z = -1;

	/* Each (sleep &) is orphaned at once: only an init reaps it. Without
	 * one, 300 zombies would fill the PID limit of 256 for good. */
	snprintf(cmd, sizeof(cmd),
		 "for i in $(seq 300); do (sleep 0.1 &); done; sleep 1.5; echo alive; %s",
		 count_procs);
	if (shell(x->m, sb, cmd, &res) == 0) {
		tap_is_int(res.exit_code, 0, "300 orphans: the command ends well (%s)",
			   res.err.data);
		tap_ok(strstr(res.out.data, "alive\n") != NULL, "300 orphans: still forking after");
		if (sscanf(strstr(res.out.data, "alive\n") ? strstr(res.out.data, "alive\n") + 6
							   : "",
			   "%d %d", &n, &z) == 2)
			tap_is_int(z, 0, "300 orphans: no zombie left (%d processes)", n);
		else
			tap_ok(false, "300 orphans: processes counted (%s)", res.out.data);
	}
	sbx_run_result_release(&res);
	if (shell(x->m, sb, "echo again", &res) == 0)
		tap_is_str(res.out.data, "again\n", "300 orphans: a new command runs after");
	sbx_run_result_release(&res);
}

struct bomb {
	sbx_manager *m;
	sbx_sandbox *sb;
	struct sbx_run_result res;
	struct sbx_error err;
	int r;
};

static void *bomb_run(void *arg)
{
	struct bomb *b = arg;

	/* A persistent bomb (bash retries a failed fork where dash gives up):
	 * every loop it starts is orphaned at once (a double fork), out of the
	 * reach of a walk down the process tree; only its session is left. */
	b->r = sbx_sandbox_run_shell(
	    b->m, b->sb, "exec bash -c 'while :; do ( (while :; do sleep 1; done) & ); done'", 6000,
	    &b->res, &b->err);
	return NULL;
}

static void test_fork_bomb(const struct test_manager *x, sbx_sandbox *a, sbx_sandbox *b)
{
	struct bomb bomb = {.m = x->m, .sb = a, .err = SBX_ERROR_INIT};
	struct sbx_run_result res;
	pthread_t t;
	int n = -1, z = -1;

	if (pthread_create(&t, NULL, bomb_run, &bomb) != 0)
		tap_bail("pthread_create");
	nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
	/* The neighbour, meanwhile: its own PID limit, its own process count. */
	if (shell(x->m, b, "for i in 1 2 3 4 5 6 7 8 9 10; do sh -c true || exit 1; done; echo ok",
		  &res) == 0) {
		tap_is_int(res.exit_code, 0, "fork bomb next door: the neighbour forks (%s)",
			   res.err.data);
		tap_is_str(res.out.data, "ok\n", "fork bomb next door: the neighbour answers");
	}
	sbx_run_result_release(&res);
	if (python(x->m, b, "print(sum(range(10)))", &res) == 0)
		tap_is_str(res.out.data, "45\n",
			   "fork bomb next door: the neighbour's Python answers");
	sbx_run_result_release(&res);
	pthread_join(t, NULL);
	tap_call(bomb.r, bomb.err.msg, "the fork bomb's call returns");
	tap_ok(bomb.r < 0 || bomb.res.timed_out, "the fork bomb ran to its time limit");
	sbx_run_result_release(&bomb.res);
	/* The killer swept the bomb's session: its orphans are gone too. */
	if (shell(x->m, a, count_procs, &res) == 0 && sscanf(res.out.data, "%d %d", &n, &z) == 2) {
		tap_ok(n <= 5,
		       "after the bomb's time limit: %d processes left in it (init, sleep, "
		       "the egress relay, this shell)",
		       n);
		tap_is_int(z, 0, "after the bomb's time limit: no zombie");
	}
	sbx_run_result_release(&res);
}

/* Code in the sandbox runs inside the interpreter's process and can write
 * protocol lines itself: each forged line is checked like any other input. */
static const char forge_prelude[] =
    "import gc, os, json, base64, struct, zlib\n"
    "m = next(o for o in gc.get_objects() if isinstance(o, dict) and 'PROTO_OUT' in o)\n"
    "fd, cid = m['PROTO_OUT'], m['CUR'].id\n"
    "def line(o):\n"
    "    os.write(fd, json.dumps(o).encode().replace(b'NOT-UTF-8', b'\\xff\\xfe') + b'\\n')\n"
    "def chunk(t, d):\n"
    "    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n"
    "png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 0, 0, 0, "
    "0))"
    " + chunk(b'IDAT', zlib.compress(b'\\x00\\x00')) + chunk(b'IEND', b''))\n"
    "b64 = lambda b: base64.b64encode(b).decode()\n";

static const struct sbx_file_change *file_named(const struct sbx_run_result *r, const char *p)
{
	for (size_t i = 0; i < r->n_files; i++)
		if (!strcmp(r->files[i].path, p))
			return &r->files[i];
	return NULL;
}

static void test_forged_protocol(const struct test_manager *x, sbx_sandbox *sb)
{
	struct sbx_run_result res;
	struct sbx_error err = SBX_ERROR_INIT;
	char code[4096];
	const struct sbx_file_change *f;
	int r;

	snprintf(code, sizeof(code),
		 "%s"
		 "line({'t': 'i', 'id': cid, 'p': 'fake.png', 'b': b64(b'\\x89PNG\\r\\n\\x1a\\n' + "
		 "b'not an image' * 10)})\n"
		 "line({'t': 'i', 'id': cid, 'p': 'fake.jpg', 'b': b64(b'\\xff\\xd8\\xff' + b'x' * "
		 "50)})\n"
		 "line({'t': 'i', 'id': cid, 'p': 'real.png', 'b': b64(png)})\n"
		 "line({'t': 'i', 'id': cid, 'p': '../up.png', 'b': b64(png)})\n"
		 "line({'t': 'i', 'id': cid, 'p': 'big.png', 'b': b64(png + b'\\0' * 70000)})\n"
		 "line({'t': 'r', 'id': cid, 'rc': 0, 'files': [\n"
		 "    {'p': '../../etc/passwd', 's': 1}, {'p': '/etc/shadow', 's': 1},\n"
		 "    {'p': 'a/../../b', 's': 1}, {'p': 'a//b', 's': 1}, {'p': './a', 's': 1},\n"
		 "    {'p': 'ctl\\u0001name', 's': 1}, {'p': 'x' * 5000, 's': 1},\n"
		 "    {'p': 'fake.png', 's': 130}, {'p': 'fake.jpg', 's': 53},\n"
		 "    {'p': 'real.png', 's': len(png)}, {'p': 'big.png', 's': 1},\n"
		 "    {'p': 'NOT-UTF-8', 's': 1},\n"
		 "    {'p': 'ok dir/na\\u00efve #1?.txt', 's': -5}]})\n",
		 forge_prelude);
	if (python(x->m, sb, code, &res) == 0) {
		tap_is_int((long long)res.n_files, 5,
			   "forged result: only the clean paths are listed");
		for (size_t i = 0; res.n_files != 5 && i < res.n_files; i++)
			tap_diag("listed: %s", res.files[i].path);
		tap_ok(!file_named(&res, "../../etc/passwd") && !file_named(&res, "/etc/shadow") &&
			   !file_named(&res, "a/../../b") && !file_named(&res, "a//b") &&
			   !file_named(&res, "./a") && !file_named(&res, "ctl\001name"),
		       "forged result: no '..', absolute, empty-part, '.', control-character or "
		       "non-UTF-8 path");
		f = file_named(&res, "fake.png");
		tap_ok(f && !f->image, "forged image: PNG magic and then text is not inlined");
		f = file_named(&res, "fake.jpg");
		tap_ok(f && !f->image, "forged image: JPEG magic and then junk is not inlined");
		f = file_named(&res, "real.png");
		tap_ok(f && f->image && f->image_mime && !strcmp(f->image_mime, "image/png"),
		       "forged image: a real PNG is inlined, typed by its bytes");
		f = file_named(&res, "big.png");
		tap_ok(f && !f->image, "forged image: one over sandbox.image_inline_max is not");
		f = file_named(&res, "ok dir/na\xc3\xafve #1?.txt");
		tap_ok(f && f->size == 0, "forged result: a clean odd name is kept, its size not "
					  "negative");
	}
	sbx_run_result_release(&res);
	/* The stale lines (the real result, a later id's) confuse no later call. */
	if (python(x->m, sb, "print('next')", &res) == 0) {
		tap_is_str(res.out.data, "next\n", "after forged lines: the next call is in step");
		tap_is_int((long long)res.n_files, 0, "after forged lines: no stale files");
	}
	sbx_run_result_release(&res);
	if (python(x->m, sb, "keep = 41", &res) == 0)
		tap_is_int(res.exit_code, 0, "a variable set");
	sbx_run_result_release(&res);

	/* A 100 MB line: ended at the cap, with a clear error and a new interpreter. */
	snprintf(code, sizeof(code),
		 "%s"
		 "os.write(fd, b'{\"t\":\"o\",\"id\":%%d,\"fd\":1,\"s\":\"' %% cid)\n"
		 "blk = b'x' * (1 << 20)\n"
		 "for i in range(100):\n"
		 "    os.write(fd, blk)\n",
		 forge_prelude);
	memset(&res, 0, sizeof(res));
	r = sbx_sandbox_run_python(x->m, sb, code, 60000, &res, &err);
	tap_is_int(r, -EPROTO, "a 100 MB protocol line: the call fails");
	tap_ok(strstr(err.msg, "protocol line over") && strstr(err.msg, "restarted"),
	       "a 100 MB protocol line: the error says so and that the interpreter restarted "
	       "(%s)",
	       err.msg);
	sbx_run_result_release(&res);
	if (python(x->m, sb, "print('keep' in dir())", &res) == 0)
		tap_is_str(res.out.data, "False\n",
			   "after the long line: a fresh interpreter answers (state gone)");
	sbx_run_result_release(&res);
	tap_ok(sbx_interp_line_max(&x->s) < 4u * 1024 * 1024,
	       "the line cap (%zu bytes with image_inline_max %lld) is far below 12 MB",
	       sbx_interp_line_max(&x->s), (long long)x->s.sandbox.image_inline_max);
}

/* The OOM killer, reported as such by each tool: a command, the interpreter
 * (restarted), an install (pip killed in a 16 MiB sandbox). */
static void test_oom(const struct test_manager *x, sbx_sandbox *sb)
{
	static const char hog[] = "python3 -c \"x = b'\\\\1' * (400 << 20)\"";
	struct test_manager small;
	const char *const small_extra[] = {"sandbox.pool_size=0", "sandbox.memory=16m", NULL};
	struct sbx_install_status st = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	sbx_sandbox *tiny = NULL;

	if (shell(x->m, sb, hog, &res) == 0) {
		tap_is_int(res.exit_code, 137, "OOM, a command: killed");
		tap_ok(res.out_of_memory, "OOM, a command: reported as out of memory");
		tap_ok(res.notice && strstr(res.notice, "out of memory") &&
			   strstr(res.notice, "sandbox.memory"),
		       "OOM, a command: the notice names the limit (%s)",
		       res.notice ? res.notice : "none");
	}
	sbx_run_result_release(&res);
	if (shell(x->m, sb, "kill -KILL $$", &res) == 0)
		tap_ok(res.exit_code == 137 && !res.out_of_memory,
		       "a SIGKILL that is not the OOM killer's is not reported as one (exit %d%s)",
		       res.exit_code, res.out_of_memory ? ", out of memory" : "");
	sbx_run_result_release(&res);
	if (python(x->m, sb, "x = b'\\1' * (400 << 20)", &res) == 0) {
		tap_ok(res.out_of_memory && res.interpreter_restarted,
		       "OOM, Python: reported as out of memory, the interpreter restarted");
		tap_ok(res.notice && strstr(res.notice, "out of memory"),
		       "OOM, Python: the notice says so (%s)", res.notice ? res.notice : "none");
	}
	sbx_run_result_release(&res);
	if (python(x->m, sb, "print('back')", &res) == 0)
		tap_is_str(res.out.data, "back\n", "OOM, Python: the next call runs");
	sbx_run_result_release(&res);

	test_manager_open(&small, "oom", small_extra, NULL);
	if (tap_call(sbx_sandbox_create(small.m, "alice", "tiny", &tiny, &err), err.msg,
		     "create a 16 MiB sandbox")) {
		if (tap_call(sbx_sandbox_install(small.m, tiny, "numpy==99", 120000, &st, &err),
			     err.msg, "install in it")) {
			tap_is_int(st.state, SBX_INSTALL_FAILED, "OOM, an install: it failed");
			tap_ok(st.log_tail && strstr(st.log_tail, "pip ran out of memory"),
			       "OOM, an install: the log says pip ran out of memory (%.200s)",
			       st.log_tail ? st.log_tail : "no log");
		}
		sbx_install_status_release(&st);
	}
	sbx_sandbox_unref(tiny);
	test_manager_close(&small, "the 16 MiB sandbox is removed");
}

/* ---- files: as the sandbox's user, whatever the sandbox does to the path ---- */

struct collect {
	struct sbx_buf b;
};

static int collect_sink(void *userdata, const void *data, size_t len)
{
	struct collect *c = userdata;
	return sbx_buf_append(&c->b, data, len);
}

/* Reads RELPATH as the artifact route does; 0 with its bytes, or the error. */
static int fetch(const struct test_manager *x, sbx_sandbox *sb, const char *relpath,
		 struct sbx_buf *out, struct sbx_error *err)
{
	struct collect c = {SBX_BUF_INIT};
	int64_t size = -1;
	int r = sbx_artifact_stat(x->m, sb, relpath, &size, err);

	if (r >= 0)
		r = sbx_artifact_read(x->m, sb, relpath, collect_sink, &c, err);
	if (r >= 0 && (int64_t)c.b.len != size)
		r = sbx_error_set(err, -EIO, "got %zu bytes of %lld", c.b.len, (long long)size);
	if (r >= 0)
		sbx_buf_append(&c.b, "", 0);
	*out = c.b;
	return r;
}

static void test_odd_names(const struct test_manager *x, sbx_sandbox *sb)
{
	static const char *const names[] = {
	    "#hash?.txt",
	    "a b%20c%.txt",
	    "quote\"s' and `ticks`.txt",
	    "na\xc3\xafve \xe2\x82\xac \xe6\x97\xa5\xe6\x9c\xac.txt",
	    "d1/d2/d3/d4/d5/d6/d7/d8/deep file.csv",
	    "semi;colon&amp=1+2.txt",
	    "-leading-dash.txt",
	    "star*[brackets].txt",
	};
	struct sbx_run_result res;
	char code[256];

	for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++) {
		struct sbx_error err = SBX_ERROR_INIT;
		struct sbx_buf got = SBX_BUF_INIT;
		_cleanup_free_ char *url = sbx_artifact_url("http://h", "0123456789ab", names[i]);
		_cleanup_free_ char *id = NULL, *rel = NULL;

		{
			/* The name in hex: no quoting of it in Python source. */
			char hex[512] = "";
			for (const char *c = names[i]; *c && strlen(hex) < sizeof(hex) - 3; c++)
				snprintf(hex + strlen(hex), 3, "%02x", (unsigned char)*c);
			snprintf(code, sizeof(code),
				 "import os\np = bytes.fromhex('%s').decode()\n"
				 "os.makedirs(os.path.dirname(p) or '.', exist_ok=True)\n"
				 "open(p, 'w').write('content of ' + p)\n",
				 hex);
		}
		if (python(x->m, sb, code, &res) == 0)
			tap_ok(res.n_files == 1 && !strcmp(res.files[0].path, names[i]),
			       "odd name listed as itself: %s", names[i]);
		sbx_run_result_release(&res);
		tap_ok(
		    url && !strncmp(url, "http://h/artifacts/0123456789ab/", 32) &&
			sbx_artifact_parse(url + strlen("http://h/artifacts/"), &id, &rel) == 0 &&
			!strcmp(rel, names[i]) && !strchr(url + 32, '#') && !strchr(url + 32, '?'),
		    "odd name: its link parses back to it (%s)", url ? url : "no url");
		if (tap_call(fetch(x, sb, names[i], &got, &err), err.msg, "odd name fetched: %s",
			     names[i]))
			tap_ok(!strncmp(got.data, "content of ", 11) &&
				   !strcmp(got.data + 11, names[i]),
			       "odd name: the right bytes");
		sbx_buf_release(&got);
	}
}

static void test_upload_through_link(const struct test_manager *x, sbx_sandbox *sb, const char *up)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res;
	char *path = NULL;
	int64_t size = 0;
	int r;

	if (shell(x->m, sb, "ln -sfn /etc /app/results/e && ln -sfn /etc/hostname /app/results/h",
		  &res) == 0)
		tap_is_int(res.exit_code, 0, "the sandbox links a folder of its own to /etc");
	sbx_run_result_release(&res);
	r = sbx_sandbox_upload(x->m, sb, "notes.txt", "/app/results/e/", &path, &size, &err);
	tap_ok(r < 0, "upload into a linked folder: refused (%s)", err.msg);
	free(path);
	path = NULL;
	err = (struct sbx_error)SBX_ERROR_INIT;
	r = sbx_sandbox_upload(x->m, sb, "notes.txt", "/app/results/e/notes.txt", &path, &size,
			       &err);
	tap_ok(r < 0, "upload to a file path through a linked folder: refused (%s)", err.msg);
	free(path);
	path = NULL;
	/* A link at the destination's name is replaced, never written through. */
	err = (struct sbx_error)SBX_ERROR_INIT;
	r = sbx_sandbox_upload(x->m, sb, "notes.txt", "/app/results/h", &path, &size, &err);
	tap_call(r, err.msg, "upload over a link named like the destination");
	free(path);
	if (shell(x->m, sb,
		  "ls /etc/notes.txt 2>&1; cat /etc/hostname | grep -c uploaded; "
		  "[ -L /app/results/h ] && echo link || cat /app/results/h",
		  &res) == 0) {
		tap_ok(strstr(res.out.data, "No such file") != NULL,
		       "nothing was written into /etc (%s)", res.out.data);
		tap_ok(strstr(res.out.data, "0\nuploaded notes\n") != NULL,
		       "the link was replaced by the file, its target untouched");
	}
	sbx_run_result_release(&res);
	(void)up;
}

struct swapper_fetch {
	const struct test_manager *x;
	sbx_sandbox *sb;
	int n, leaked, served, refused, failed;
};

static void *fetch_loop(void *arg)
{
	struct swapper_fetch *f = arg;

	for (int i = 0; i < f->n; i++) {
		struct sbx_error err = SBX_ERROR_INIT;
		struct sbx_buf got = SBX_BUF_INIT;
		int r = fetch(f->x, f->sb, "d/secret", &got, &err);

		if (r >= 0 && strstr(got.data, "ROOT ONLY"))
			__atomic_add_fetch(&f->leaked, 1, __ATOMIC_RELAXED);
		else if (r >= 0)
			__atomic_add_fetch(&f->served, 1, __ATOMIC_RELAXED);
		else if (r == -EPERM || r == -ENOENT || r == -EACCES || r == -EIO)
			__atomic_add_fetch(&f->refused, 1, __ATOMIC_RELAXED);
		else {
			if (!__atomic_fetch_add(&f->failed, 1, __ATOMIC_RELAXED))
				tap_diag("an unexpected failure: %d %s", r, err.msg);
		}
		sbx_buf_release(&got);
	}
	return NULL;
}

/* A folder swapped back and forth with a link to one only root may read,
 * while its file is fetched: never a byte of the root-only file. */
/* 2 with --part=swap-race-half: this run makes half the fetches. */
static int swap_share = 1;

static void test_swap_race(const struct test_manager *x, sbx_sandbox *sb, const char *cid)
{
	enum { THREADS = 4 };
	const char *const root_argv[] = {
	    "sh", "-c",
	    "mkdir -p /srv/private && echo 'ROOT ONLY' > /srv/private/secret && "
	    "chmod 700 /srv/private && chmod 600 /srv/private/secret",
	    NULL};
	struct sbx_exec_spec root = {.argv = root_argv, .user = "0:0", .output_cap = 4096};
	struct sbx_exec_result er = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct swapper_fetch f = {.x = x, .sb = sb};
	struct sbx_run_result res;
	pthread_t t[THREADS];
	const char *n_env = getenv("SBX_SWAP_FETCHES");
	int total = (n_env ? atoi(n_env) : 2000) / swap_share;

	/* The container's own root plants a file uid 1000 cannot read. */
	if (!tap_call(sbx_exec(engine, cid, &root, &er, &err), err.msg, "root plants a secret") ||
	    !tap_ok(er.exit_code == 0, "root's file is there (%s)", er.err.data)) {
		sbx_exec_result_release(&er);
		return;
	}
	sbx_exec_result_release(&er);
	if (shell(x->m, sb, "cat /srv/private/secret 2>&1", &res) == 0)
		tap_ok(!strstr(res.out.data, "ROOT ONLY"), "uid 1000 cannot read it itself");
	sbx_run_result_release(&res);
	/* The swapper exchanges d (a folder) and l (a link to root's folder)
	 * atomically (renameat2 RENAME_EXCHANGE), as fast as it can, until told
	 * to stop (at most 10 minutes): d is always one or the other. */
	if (shell(x->m, sb,
		  "mkdir -p d && echo decoy > d/secret && ln -sfn /srv/private l && "
		  "(exec python3 -c \"\n"
		  "import ctypes, os, time\n"
		  "swap = ctypes.CDLL(None, use_errno=True).renameat2\n"
		  "end = time.time() + 600\n"
		  "while not os.path.exists('stop') and time.time() < end:\n"
		  "    swap(-100, b'd', -100, b'l', 2)\n"
		  "\") >/dev/null 2>&1 & "
		  "sleep 0.5; echo started",
		  &res) == 0)
		tap_is_str(res.out.data, "started\n",
			   "a process swaps d between a folder and a link to root's");
	sbx_run_result_release(&res);
	f.n = total / THREADS;
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, fetch_loop, &f);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	if (shell(x->m, sb, "touch stop; sleep 0.3; echo stopped", &res) == 0)
		tap_is_str(res.out.data, "stopped\n", "the swapper stopped");
	sbx_run_result_release(&res);
	tap_is_int(f.leaked, 0,
		   "%d fetches during the swaps: none served the root-only file (%d served the "
		   "decoy, %d refused)",
		   f.n * THREADS, f.served, f.refused);
	tap_is_int(f.failed, 0, "every fetch ended in a file or a clear refusal");
}

/* A runtime the engine does not run: the create fails and leaves nothing.
 * Docker refuses an unknown runtime name itself; Podman 4.3's API takes the
 * name and runs its default runtime, which the manager's look at the
 * created container catches. */
/* sandbox.network left empty means no network, as its default "none" does. */
static void test_network_empty(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.network=", NULL};
	struct test_manager x;
	struct sbx_container_info ci = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *sb = NULL;
	char *cid = NULL;

	test_manager_open(&x, "net", extra, NULL);
	if (tap_call(sbx_sandbox_create(x.m, "alice", "net", &sb, &err), err.msg,
		     "create a sandbox with sandbox.network empty") &&
	    (cid = container_of(x.inst, sbx_sandbox_id(sb))) &&
	    tap_call(sbx_container_inspect(engine, cid, &ci, &err), err.msg, "inspect it"))
		tap_is_str(ci.network_mode ? ci.network_mode : "", "none",
			   "sandbox.network empty: network mode none");
	sbx_container_info_release(&ci);
	free(cid);
	sbx_sandbox_unref(sb);
	test_manager_close(&x, "the sandbox.network empty manager leaves no container");
}

static void test_runtime_not_run(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.runtime=sbx-no-such-runtime",
				     NULL};
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *sb = NULL;
	int r;

	test_manager_open(&x, "rt", extra, NULL);
	r = sbx_sandbox_create(x.m, "alice", "rt", &sb, &err);
	tap_ok(r < 0 && !sb, "a runtime the engine does not run: no sandbox (%s)", err.msg);
	if (!strcmp(engine_type, "podman"))
		tap_ok(r == -ENOTSUP && strstr(err.msg, "sandbox.runtime") &&
			   strstr(err.msg, "sbx-no-such-runtime"),
		       "podman: the message says the engine ignored sandbox.runtime");
	sbx_sandbox_unref(sb);
	test_manager_close(&x, "a refused runtime leaves no container");
}

/* ---- file readers: a man in the middle in the sandbox ---- */

/* Code in the sandbox runs as the readers' user: it can stop a reader and
 * speak for it on its pipes (/proc/PID/fd/0, the requests; /proc/PID/fd/1,
 * the replies toward the server). This program does so for the test. It
 * looks for readers every 3 ms. Told a case (MITM_DIR "mode": "N HEX PAD"),
 * it stops every reader and takes its pipes, then says so ("ack"); it
 * answers the first request that comes to one of them with the bytes of HEX
 * and PAD 'A's, kills that reader, records "N PATH" in "done" and lets the
 * others go on. A reader that starts while a case waits is taken before its
 * hello (its write count is still the least any reader began with: what the
 * engine's exec wrote) and the hello said for it; one seen too late is
 * killed, and the case fails. It ends on MITM_DIR "stop" or after 60 s,
 * letting go the readers it holds. */
static const char mitm_py[] =
    "import os, select, signal, sys, time\n"
    "D = '/tmp/sbx-mitm/'\n"
    "END = time.monotonic() + 60\n"
    "# seen: pid -> (write count when first seen, first seen while a case waited)\n"
    "seen, held, gone, answered = {}, {}, set(), []\n"
    "case, acked = None, None\n"
    "# The least write count a reader was first seen with: what the engine's exec\n"
    "# wrote before the program began (the reader's own writes come on top).\n"
    "base = None\n"
    "\n"
    "\n"
    "def log(*a):\n"
    "    print(*a, file=sys.stderr, flush=True)\n"
    "\n"
    "\n"
    "def put(name, text):\n"
    "    with open(D + name + '.tmp', 'w') as f:\n"
    "        f.write(text)\n"
    "    os.replace(D + name + '.tmp', D + name)\n"
    "\n"
    "\n"
    "def readers():\n"
    "    for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "        try:\n"
    "            with open('/proc/' + p + '/cmdline', 'rb') as f:\n"
    "                if b'sbx-reader' in f.read().split(b'\\0'):\n"
    "                    yield int(p)\n"
    "        except OSError:\n"
    "            pass\n"
    "\n"
    "\n"
    "def wchar(p):\n"
    "    try:\n"
    "        with open('/proc/%d/io' % p) as f:\n"
    "            return int(f.read().split('wchar:')[1].split()[0])\n"
    "    except (OSError, IndexError, ValueError):\n"
    "        return -1\n"
    "\n"
    "\n"
    "def stop(p):\n"
    "    \"\"\"True once P is stopped; False when it is gone; None when it did not\n"
    "    stop within a second (asked again on the next round).\"\"\"\n"
    "    try:\n"
    "        os.kill(p, signal.SIGSTOP)\n"
    "        end = time.monotonic() + 1\n"
    "        while time.monotonic() < end:\n"
    "            with open('/proc/%d/stat' % p) as f:\n"
    "                s = f.read()\n"
    "            state = s[s.rindex(')') + 2]\n"
    "            if state in 'tT':\n"
    "                return True\n"
    "            if state in 'ZX':\n"
    "                return False\n"
    "            time.sleep(0.0005)\n"
    "    except OSError:\n"
    "        return False\n"
    "    return None\n"
    "\n"
    "\n"
    "def signal_(p, sig):\n"
    "    try:\n"
    "        os.kill(p, sig)\n"
    "    except OSError:\n"
    "        pass\n"
    "\n"
    "\n"
    "def release(p):\n"
    "    \"\"\"Lets P go on; one whose hello was said for it is ended instead (its\n"
    "    own would follow).\"\"\"\n"
    "    fd0, fd1, fresh = held.pop(p)\n"
    "    os.close(fd0)\n"
    "    os.close(fd1)\n"
    "    if fresh:\n"
    "        signal_(p, signal.SIGKILL)\n"
    "        gone.add(p)\n"
    "    else:\n"
    "        signal_(p, signal.SIGCONT)\n"
    "\n"
    "\n"
    "def release_all():\n"
    "    for p in list(held):\n"
    "        release(p)\n"
    "    for p in seen:\n"
    "        if p not in gone:\n"
    "            signal_(p, signal.SIGCONT)  # one whose stop was still under way\n"
    "\n"
    "\n"
    "def write_all(fd, data, secs):\n"
    "    end, view = time.monotonic() + secs, memoryview(data)\n"
    "    while view and time.monotonic() < end:\n"
    "        select.select([], [fd], [], 0.05)\n"
    "        try:\n"
    "            view = view[os.write(fd, view):]\n"
    "        except BlockingIOError:\n"
    "            pass\n"
    "        except OSError:\n"
    "            break\n"
    "    return not view\n"
    "\n"
    "\n"
    "def answer(p, n, reply):\n"
    "    \"\"\"Reads the request that came to P, sends REPLY for it, ends P: the\n"
    "    request's path, or None when none came (the server closed).\"\"\"\n"
    "    fd0, fd1, _ = held.pop(p)\n"
    "    req, end = b'', time.monotonic() + 1\n"
    "    while time.monotonic() < end:\n"
    "        try:\n"
    "            data = os.read(fd0, 65536)\n"
    "        except BlockingIOError:\n"
    "            data = None\n"
    "        if data == b'':\n"
    "            break\n"
    "        req += data or b''\n"
    "        head, nl, path = req.partition(b'\\n')\n"
    "        f = head.split()\n"
    "        if nl and len(f) == 4 and f[3].isdigit() and len(path) >= int(f[3]):\n"
    "            break\n"
    "        select.select([fd0], [], [], 0.05)\n"
    "    sent = write_all(fd1, reply, 2) if req else False\n"
    "    # Ended: whatever the server does next, it meets the end of the stream.\n"
    "    signal_(p, signal.SIGKILL)\n"
    "    os.close(fd0)\n"
    "    os.close(fd1)\n"
    "    gone.add(p)\n"
    "    log('case', n, 'pid', p, 'request', req[:60], 'sent' if sent else 'not sent')\n"
    "    return req.partition(b'\\n')[2].decode(errors='replace') if req else None\n"
    "\n"
    "\n"
    "def hold(p, fresh):\n"
    "    \"\"\"Takes stopped P's pipes; for one that just started, says its hello.\"\"\"\n"
    "    fds = []\n"
    "    try:\n"
    "        fds.append(os.open('/proc/%d/fd/0' % p, os.O_RDONLY | os.O_NONBLOCK))\n"
    "        fds.append(os.open('/proc/%d/fd/1' % p, os.O_WRONLY | os.O_NONBLOCK))\n"
    "    except OSError as e:\n"
    "        log('open', p, e)\n"
    "        for fd in fds:\n"
    "            os.close(fd)\n"
    "        signal_(p, signal.SIGCONT)\n"
    "        gone.add(p)\n"
    "        return\n"
    "    held[p] = (fds[0], fds[1], fresh)\n"
    "    if fresh:\n"
    "        write_all(fds[1], b'sbx-reader 1\\n', 1)\n"
    "    log('hold', p, 'fresh' if fresh else 'idle')\n"
    "\n"
    "\n"
    "os.makedirs(D, exist_ok=True)\n"
    "put('ready', 'ready\\n')\n"
    "try:\n"
    "    while time.monotonic() < END and not os.path.exists(D + 'stop'):\n"
    "        try:\n"
    "            with open(D + 'mode') as f:\n"
    "                m = f.read().split()\n"
    "            if not case or case[0] != int(m[0]):\n"
    "                case = (int(m[0]), bytes.fromhex(m[1]) + b'A' * int(m[2]))\n"
    "        except (OSError, IndexError, ValueError):\n"
    "            pass\n"
    "        want = case if case and case[0] not in answered else None\n"
    "        stopping = False\n"
    "        for p in readers():\n"
    "            if p in gone or p in held:\n"
    "                continue\n"
    "            if p not in seen:\n"
    "                seen[p] = (wchar(p), bool(want))\n"
    "                log('seen', p, 'while a case waits' if want else 'idle', seen[p][0])\n"
    "                if seen[p][0] >= 0 and (base is None or seen[p][0] < base):\n"
    "                    base = seen[p][0]\n"
    "            if not want:\n"
    "                continue\n"
    "            stopped = stop(p)\n"
    "            if stopped is None:\n"
    "                log('not stopped yet', p)\n"
    "                stopping = True\n"
    "                continue\n"
    "            if not stopped:\n"
    "                gone.add(p)\n"
    "                continue\n"
    "            # Seen first while a case waits: it just started, and the server\n"
    "            # waits for its hello, unless it wrote already (seen late): then\n"
    "            # it is ended, and the case fails rather than pass unanswered.\n"
    "            if seen[p][1] and wchar(p) != base:\n"
    "                log('missed', p, wchar(p))\n"
    "                signal_(p, signal.SIGKILL)\n"
    "                gone.add(p)\n"
    "                continue\n"
    "            hold(p, seen[p][1])\n"
    "        if want and acked != want[0] and not stopping:\n"
    "            acked = want[0]\n"
    "            put('ack', '%d\\n' % acked)\n"
    "            log('ack', acked, 'holding', *sorted(held))\n"
    "        if not held:\n"
    "            time.sleep(0.003)\n"
    "            continue\n"
    "        ready = select.select([h[0] for h in held.values()], [], [], 0.003)[0]\n"
    "        for p in [p for p, h in held.items() if h[0] in ready]:\n"
    "            if p not in held:\n"
    "                continue\n"
    "            if not want:\n"
    "                release(p)  # no case waits for it: the reader takes the request\n"
    "                continue\n"
    "            path = answer(p, want[0], want[1])\n"
    "            if path is not None:\n"
    "                answered.append(want[0])\n"
    "                with open(D + 'done', 'a') as f:\n"
    "                    f.write('%d %s\\n' % (want[0], path))\n"
    "                want = None\n"
    "                release_all()\n"
    "except BaseException:\n"
    "    import traceback\n"
    "    log(traceback.format_exc())\n"
    "finally:\n"
    "    release_all()\n"
    "    put('exited', '%d\\n' % len(answered))\n";

#define MITM_DIR "/tmp/sbx-mitm/"
#define MITM_TARGET "mitm/target.txt"
#define MITM_WARM "mitm/warm.txt"
#define MITM_KNOWN "mitm/known.bin"
#define MITM_KNOWN_SIZE (3 * 1024 * 1024 + 17)
/* A case's open and stream must end by this, or the case fails (the server
 * waits SBX_FILE_IDLE_MS, 30 s, for a reader that says nothing). */
#define MITM_DEADLINE_MS 10000

struct mitm_case {
	const char *name;
	const char *reply; /* what the reader seems to say */
	int pad;	   /* then this many 'A' */
	int64_t offset, count;
	bool opens;	/* the open succeeds and the stream fails */
	int want;	/* the open's error, or the stream's */
	long long sink; /* the bytes the sink gets (a stream) */
};

#define WHOLE 0, INT64_MAX
#define NONE 0, 0

/* Each case uses one reader (the server drops it); the test warms 4 before
 * every fourth case. The early end (a reader given back, but dead) comes
 * last of its four: the warm-up after it meets the dead one, not a case. */
static const struct mitm_case mitm_cases[] = {
    {"a size of 20 digits", "0 99999999999999999999 0 0 0 0\n0\n", 0, NONE, false, -EPROTO, 0},
    {"a size of 20 digits, the whole file", "0 99999999999999999999 0 0 0 0\n", 0, WHOLE, false,
     -EPROTO, 0},
    {"a size of 19 digits past INT64_MAX", "0 9999999999999999999 0 0 0 0\n0\n", 0, NONE, false,
     -EPROTO, 0},
    {"a size that wraps to 5 in 64 bits", "0 18446744073709551621 0 0 0 5\n5\nabcde0\n", 0, WHOLE,
     false, -EPROTO, 0},
    {"an mtime past INT64_MAX", "0 5 9223372036854775808 0 0 0\n0\n", 0, NONE, false, -EPROTO, 0},
    {"a count that does not follow from the size (100, 50)", "0 100 0 0 0 50\n32\n", 50, WHOLE,
     false, -EPROTO, 0},
    {"a count past the range asked (20 at 10)", "0 100 0 0 0 30\n", 0, 10, 20, false, -EPROTO, 0},
    {"a count where none was asked", "0 100 0 0 0 1\n1\nx0\n", 0, NONE, false, -EPROTO, 0},
    {"a refusal with a size", "2 5 0 0 0 0\n", 0, WHOLE, false, -EPROTO, 0},
    {"code 1", "1 0 0 0 0 0\n", 0, WHOLE, false, -EPROTO, 0},
    {"five fields", "0 5 0 0 0\n", 0, WHOLE, false, -EPROTO, 0},
    {"a frame where none is owed", "0 5 0 0 0 0\n5\nabcde0\n", 0, NONE, false, -EPROTO, 0},
    {"a frame over 1 MiB", "0 2000000 0 0 0 2000000\n100001\n", 65536, WHOLE, true, -EPROTO, 0},
    {"a frame longer than the reply owes", "0 10 0 0 0 10\n14\nBBBBBBBBBBBBBBBBBBBB0\n", 0, WHOLE,
     true, -EPROTO, 0},
    {"junk for a frame's length", "0 10 0 0 0 10\nzz\n", 0, WHOLE, true, -EPROTO, 0},
    {"junk after a good frame", "0 10 0 0 0 10\n5\nabcdezz\n", 0, WHOLE, true, -EPROTO, 5},
    {"frames past the count", "0 10 0 0 0 10\n5\nabcde6\nabcdef0\n", 0, WHOLE, true, -EPROTO, 5},
    {"a frame length of 9 digits", "0 10 0 0 0 10\n000000005\nabcde0\n", 0, WHOLE, true, -EPROTO,
     0},
    {"a negative frame length", "0 10 0 0 0 10\n-1\n", 0, WHOLE, true, -EPROTO, 0},
    {"the end before the count", "0 10 0 0 0 10\n5\nabcde0\n", 0, WHOLE, true, -EIO, 5},
    {"a line without its end", "0 10 0 0 0 10\n", 300, WHOLE, true, -EPROTO, 0},
    {"the reader gone within a frame", "0 10 0 0 0 10\na\nabc", 0, WHOLE, true, -EIO, 3},
};

static bool mitm_past(void *userdata)
{
	return sbx_monotonic_ms() > *(const int64_t *)userdata;
}

static int count_sink(void *userdata, const void *data, size_t len)
{
	(void)data;
	*(long long *)userdata += (long long)len;
	return 0;
}

/* The test program's open descriptors. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the listing's own */
}

/* The cases the man in the middle answered on a request of MITM_TARGET
 * (its "done" file: "CASE PATH" lines), as printed by the snippet every
 * call below ends with; one answered on another request (a warm-up's) is
 * not. */
static const char mitm_done_py[] =
    "try:\n"
    "    done = open('" MITM_DIR "done').read().splitlines()\n"
    "    done = [(l.split(' ', 1) + [''])[:2] for l in done]\n"
    "except OSError:\n"
    "    done = []\n"
    "print('done', *[n for n, p in done if p == '" MITM_TARGET "'])\n"
    "print('other', *[n + ':' + p for n, p in done if p != '" MITM_TARGET "'])\n";

static void mitm_parse_done(const char *out, int *answered, size_t n)
{
	const char *p = !strncmp(out, "done ", 5) ? out : strstr(out, "\ndone ");

	memset(answered, 0, n * sizeof(*answered));
	if (!p)
		return;
	p += *p == '\n';
	for (p += 4; *p == ' ';) {
		char *end;
		long i = strtol(p + 1, &end, 10);
		if (end == p + 1)
			break;
		if (i >= 0 && (size_t)i < n)
			answered[i]++;
		p = end;
	}
}

struct mitm_warm {
	const struct test_manager *x;
	sbx_sandbox *sb;
	pthread_barrier_t *barrier;
	int r;
};

static void *mitm_warm_one(void *arg)
{
	struct mitm_warm *w = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_artifact_info info;
	sbx_artifact *a = NULL;

	w->r = sbx_artifact_open(w->x->m, w->sb, MITM_WARM, 0, 0, NULL, &a, &info, &err);
	if (w->r < 0)
		tap_diag("warm-up open: %s", err.msg);
	pthread_barrier_wait(w->barrier);
	sbx_artifact_close(a);
	return NULL;
}

/* Four readers open at once, then given back: four idle ones for the next
 * cases, none started while a case waits. */
static void mitm_warm_up(const struct test_manager *x, sbx_sandbox *sb, int round)
{
	enum { WARM = 4 };
	struct mitm_warm w[WARM];
	pthread_t t[WARM];
	pthread_barrier_t barrier;
	int failed = 0;

	pthread_barrier_init(&barrier, NULL, WARM);
	for (int i = 0; i < WARM; i++) {
		w[i] = (struct mitm_warm){.x = x, .sb = sb, .barrier = &barrier};
		if (pthread_create(&t[i], NULL, mitm_warm_one, &w[i]) != 0)
			tap_bail("pthread_create");
	}
	for (int i = 0; i < WARM; i++) {
		pthread_join(t[i], NULL);
		failed += w[i].r < 0;
	}
	pthread_barrier_destroy(&barrier);
	tap_is_int(failed, 0, "reader man in the middle: warm-up %d opens 4 readers at once",
		   round);
}

/* Tells the man in the middle case I, waits for it to hold the readers;
 * ANSWERED gets what it answered so far. */
static bool mitm_arm(const struct test_manager *x, sbx_sandbox *sb, size_t i, int *answered,
		     size_t n)
{
	const struct mitm_case *c = &mitm_cases[i];
	size_t len = strlen(c->reply);
	_cleanup_free_ char *hex = malloc(2 * len + 1), *code = NULL;
	struct sbx_run_result res;
	bool acked = false;

	if (!hex)
		tap_bail("out of memory");
	for (size_t k = 0; k < len; k++)
		snprintf(hex + 2 * k, 3, "%02x", (unsigned char)c->reply[k]);
	hex[2 * len] = '\0';
	if (asprintf(&code,
		     "import os, time\n"
		     "with open('" MITM_DIR "mode.tmp', 'w') as f:\n"
		     "    f.write('%zu %s %d\\n')\n"
		     "os.replace('" MITM_DIR "mode.tmp', '" MITM_DIR "mode')\n"
		     "end = time.monotonic() + 10\n"
		     "while time.monotonic() < end:\n"
		     "    try:\n"
		     "        if open('" MITM_DIR "ack').read().strip() == '%zu':\n"
		     "            print('acked')\n"
		     "            break\n"
		     "    except OSError:\n"
		     "        pass\n"
		     "    time.sleep(0.002)\n"
		     "%s",
		     i, hex, c->pad, i, mitm_done_py) < 0)
		tap_bail("out of memory");
	if (python(x->m, sb, code, &res) == 0) {
		acked = strstr(res.out.data, "acked\n") != NULL;
		mitm_parse_done(res.out.data, answered, n);
	}
	sbx_run_result_release(&res);
	tap_ok(acked, "reader man in the middle: it holds the readers for \"%s\"", c->name);
	return acked;
}

static void mitm_run(const struct test_manager *x, sbx_sandbox *sb, const struct mitm_case *c)
{
	int64_t until = sbx_monotonic_ms() + MITM_DEADLINE_MS;
	const struct sbx_cancel cancel = {mitm_past, &until};
	struct sbx_artifact_info info = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_artifact *a = NULL;
	long long got = 0;
	int r;

	r = sbx_artifact_open(x->m, sb, MITM_TARGET, c->offset, c->count, &cancel, &a, &info, &err);
	if (!c->opens) {
		tap_ok(r == c->want && err.msg[0],
		       "reader man in the middle, %s: the open fails with %s (%d: %s)", c->name,
		       strerror(-c->want), r, err.msg);
	} else if (tap_call(r, err.msg, "reader man in the middle, %s: the open", c->name)) {
		sbx_artifact_deadline(a, until);
		r = sbx_artifact_stream(a, count_sink, &got, &err);
		tap_ok(r == c->want && err.msg[0],
		       "reader man in the middle, %s: the stream fails with %s (%d: %s)", c->name,
		       strerror(-c->want), r, err.msg);
		tap_ok(got == c->sink && got <= info.count,
		       "reader man in the middle, %s: %lld bytes reached the sink (%lld expected, "
		       "%lld announced)",
		       c->name, got, c->sink, (long long)info.count);
	}
	sbx_artifact_close(a);
}

/* Counts the sandbox's readers (an argument "sbx-reader"), until at most 4
 * run and none is stopped (at most 5 s): "RUNNING STOPPED". */
static const char count_readers_py[] =
    "import os, time\n"
    "end = time.monotonic() + 5\n"
    "while True:\n"
    "    run = stopped = 0\n"
    "    for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "        try:\n"
    "            with open('/proc/%s/cmdline' % p, 'rb') as f:\n"
    "                if b'sbx-reader' not in f.read().split(b'\\0'):\n"
    "                    continue\n"
    "            with open('/proc/%s/stat' % p) as f:\n"
    "                s = f.read()\n"
    "        except OSError:\n"
    "            continue\n"
    "        state = s[s.rindex(')') + 2]\n"
    "        stopped += state in 'tT'\n"
    "        run += state not in 'tTZX'\n"
    "    if (run <= 4 and not stopped) or time.monotonic() > end:\n"
    "        break\n"
    "    time.sleep(0.05)\n"
    "print(run, stopped)\n";

/* A reader's replies, written by code in the sandbox between the reader and
 * the server: sizes past 64 bits, counts that do not follow, frames too long
 * or of junk. Each fails its open or its stream with an error, in time and
 * with no byte past the count; the server reads right once the man in the
 * middle is gone, and holds no more descriptors than before. */
static void test_reader_mitm(const struct test_manager *x, sbx_sandbox *sb)
{
	enum { N = SBX_ARRAY_SIZE(mitm_cases) };
	int answered[N], fds_before = -1, fds_after, run = -1, stopped = -1;
	size_t plen = strlen(mitm_py);
	_cleanup_free_ char *hex = malloc(2 * plen + 1), *cmd = NULL, *code = NULL;
	struct sbx_run_result res;
	bool exited = false;
	int failed = tap_failed;

	if (!hex)
		tap_bail("out of memory");
	for (size_t k = 0; k < plen; k++)
		snprintf(hex + 2 * k, 3, "%02x", (unsigned char)mitm_py[k]);
	hex[2 * plen] = '\0';
	if (asprintf(&cmd,
		     "mkdir -p " MITM_DIR " /app/results/mitm && rm -f " MITM_DIR "* && "
		     "echo target > /app/results/" MITM_TARGET " && "
		     "echo warm > /app/results/" MITM_WARM " && "
		     "python3 -c \"import sys; open(sys.argv[1], 'wb').write(bytes.fromhex("
		     "sys.argv[2]))\" " MITM_DIR "mitm.py %s && "
		     "python3 -c \"n = %d; open('/app/results/" MITM_KNOWN "', 'wb').write("
		     "(bytes(range(251)) * (n // 251 + 1))[:n])\" && "
		     "(exec python3 -u " MITM_DIR "mitm.py) </dev/null >/dev/null 2>" MITM_DIR
		     "log & "
		     "for i in $(seq 500); do [ -e " MITM_DIR "ready ] && break; sleep 0.01; done; "
		     "cat " MITM_DIR "ready",
		     hex, MITM_KNOWN_SIZE) < 0)
		tap_bail("out of memory");
	if (shell(x->m, sb, cmd, &res) < 0 ||
	    !tap_ok(!strcmp(res.out.data, "ready\n"),
		    "reader man in the middle: it runs in the sandbox (%s%s)", res.out.data,
		    res.err.data)) {
		sbx_run_result_release(&res);
		return;
	}
	sbx_run_result_release(&res);

	for (size_t i = 0; i < N; i++) {
		if (i % 4 == 0)
			mitm_warm_up(x, sb, (int)i / 4 + 1);
		/* Counted with 4 readers idle and the engine's handles for 4
		 * calls at once: each stream is 3 descriptors (its socket and
		 * curl's socketpair), each pooled handle as many. */
		if (i == 0)
			fds_before = count_fds();
		if (!mitm_arm(x, sb, i, answered, N))
			break; /* it is gone: no case would be tested */
		if (i > 0)
			tap_ok(answered[i - 1] == 1,
			       "reader man in the middle, %s: it answered that request",
			       mitm_cases[i - 1].name);
		mitm_run(x, sb, &mitm_cases[i]);
	}

	/* It stops: the readers it holds go on, the ones it answered are dead. */
	if (asprintf(&code,
		     "import os, time\n"
		     "open('" MITM_DIR "stop', 'w').close()\n"
		     "end = time.monotonic() + 10\n"
		     "while not os.path.exists('" MITM_DIR "exited') and time.monotonic() < end:\n"
		     "    time.sleep(0.01)\n"
		     "print('exited' if os.path.exists('" MITM_DIR "exited') else 'running')\n"
		     "%s"
		     "print(open('" MITM_DIR "log').read())\n",
		     mitm_done_py) < 0)
		tap_bail("out of memory");
	memset(answered, 0, sizeof(answered));
	if (python(x->m, sb, code, &res) == 0) {
		exited = !strncmp(res.out.data, "exited\n", 7);
		mitm_parse_done(res.out.data, answered, N);
	}
	tap_ok(exited, "reader man in the middle: it stops when told");
	tap_ok(answered[N - 1] == 1, "reader man in the middle, %s: it answered that request",
	       mitm_cases[N - 1].name);
	{
		int once = 0;
		for (size_t i = 0; i < N; i++)
			once += answered[i] == 1;
		tap_ok(once == N,
		       "reader man in the middle: every case's request answered, once (%d of %d)",
		       once, (int)N);
	}
	if (tap_failed != failed)
		tap_diag("the man in the middle's record: %s", res.out.data);
	sbx_run_result_release(&res);

	/* The server recovered: known bytes read right, by readers of its own. */
	for (int k = 1; k <= 3; k++) {
		struct sbx_error err = SBX_ERROR_INIT;
		struct sbx_buf got = SBX_BUF_INIT;
		size_t bad = 0;

		if (tap_call(fetch(x, sb, MITM_KNOWN, &got, &err), err.msg,
			     "after the man in the middle: read %d of a known file", k)) {
			while (bad < got.len && (unsigned char)got.data[bad] == bad % 251)
				bad++;
			tap_ok(got.len == MITM_KNOWN_SIZE && bad == got.len,
			       "after the man in the middle: read %d has its %d bytes (%zu, the "
			       "first %zu right)",
			       k, MITM_KNOWN_SIZE, got.len, bad);
		}
		sbx_buf_release(&got);
	}
	fds_after = count_fds();
	tap_ok(fds_before > 0 && fds_after <= fds_before + 8,
	       "after %d hostile replies: the server holds %d descriptors (%d before)", (int)N,
	       fds_after, fds_before);
	if (python(x->m, sb, count_readers_py, &res) == 0 &&
	    sscanf(res.out.data, "%d %d", &run, &stopped) == 2) {
		tap_ok(run >= 1 && run <= 4,
		       "after the man in the middle: %d readers in the sandbox (1 to 4 idle)", run);
		tap_is_int(stopped, 0, "after the man in the middle: no reader left stopped");
	} else {
		tap_ok(false, "the sandbox's readers counted (%s)", res.out.data);
	}
	sbx_run_result_release(&res);
}

int main(int argc, char **argv)
{
	const char *runtime = getenv("MCP_SANDBOX_RUNTIME");
	char runtime_set[128];
	char up[] = "/tmp/sbx-hard-up-XXXXXX", upload_set[128], notes[160];
	const char *const extra[] = {"sandbox.pool_size=0",
				     upload_set,
				     "sandbox.pids_limit=256",
				     "sandbox.max_sandboxes=4",
				     "sandbox.cpus=0.5",
				     "sandbox.image_inline_max=64k",
				     runtime_set,
				     NULL};
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *a = NULL, *b = NULL;

	const char *part = argc > 1 && !strncmp(argv[1], "--part=", 7) ? argv[1] + 7 : "";
	bool half = !strcmp(part, "swap-race-half");
	bool rest = !*part || !strcmp(part, "rest"),
	     swap = !*part || !strcmp(part, "swap-race") || half;

	if (!rest && !swap) {
		fprintf(stderr,
			"test-hardening: unknown --part=%s (rest, swap-race, swap-race-half)\n",
			part);
		return 2;
	}
	if (half)
		swap_share = 2;
	if (*part) {
		argv[1] = argv[0];
		argc--, argv++;
	}
	fixture_init(argc, argv, swap && !rest ? "swap" : "hard");
	if (!mkdtemp(up))
		tap_bail("mkdtemp");
	snprintf(upload_set, sizeof(upload_set), "sandbox.upload_dir=%s", up);
	snprintf(notes, sizeof(notes), "%s/notes.txt", up);
	{
		FILE *f = fopen(notes, "w");
		if (!f || fputs("uploaded notes\n", f) < 0 || fclose(f) != 0)
			tap_bail("write the upload file");
	}
	snprintf(runtime_set, sizeof(runtime_set), "sandbox.runtime=%s", runtime ? runtime : "");
	test_manager_open(&x, "h", extra, NULL);
	if (!tap_call(sbx_sandbox_create(x.m, "alice", "a", &a, &err), err.msg, "create a") ||
	    !tap_call(sbx_sandbox_create(x.m, "alice", "b", &b, &err), err.msg, "create b"))
		tap_bail("no sandbox");
	if (rest) {
		check_inspect(&x, a);
		check_inside(&x, a);
		test_runtime_not_run();
		test_network_empty();
		test_orphans(&x, a);
		test_fork_bomb(&x, a, b);
		test_forged_protocol(&x, b);
		test_oom(&x, b);
		test_odd_names(&x, a);
		test_upload_through_link(&x, a, up);
		test_reader_mitm(&x, b);
	}
	if (swap) {
		_cleanup_free_ char *cid = container_of(x.inst, sbx_sandbox_id(a));
		if (tap_ok(cid != NULL, "a's container"))
			test_swap_race(&x, a, cid);
	}
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	test_manager_close(&x, "no container of the run is left");
	unlink(notes);
	rmdir(up);
	return fixture_end();
}
