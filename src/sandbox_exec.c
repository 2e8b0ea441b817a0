/* SPDX-License-Identifier: MIT */
/*
 * Running things in a sandbox: a shell command, or Python code with the
 * files it created or modified under SBX_RESULTS_DIR.
 *
 * run_python is one exec of `python3 -c WRAPPER CAP RUNNER` with
 * "NONCE\nCODE" on stdin. The wrapper snapshots the results folder, runs
 * the code in a child `python3 -c RUNNER` (so the code never sees the
 * nonce and cannot stop the report by exiting hard; the wrapper makes itself
 * non-dumpable so the code cannot read its memory), forwards at most CAP
 * bytes of the child's output, snapshots again and writes the report as a
 * last stderr line "\nNONCE JSON\n". Because the wrapper itself keeps the
 * user's output under CAP and the exec's cap is CAP plus room for the
 * report, the report is never cut off; the manager takes the last line with
 * this call's nonce, believes only it, and strips it from the output.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/utf8.h"

#define REPORT_FILES_MAX 100
/* Room above the user's cap for the report: 100 paths of at most 1 KiB,
 * JSON-escaped (up to 6 bytes per byte). */
#define REPORT_ROOM (1024 * 1024)

static const char wrapper_py[] =
    "import ctypes, json, os, select, stat, subprocess, sys, time\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "R = '/app/results'\n"
    "CAP = int(sys.argv[1])\n"
    "def snap():\n"
    "    s = {}\n"
    "    for d, dirs, files in os.walk(R):\n"
    "        dirs.sort()\n"
    "        for f in sorted(files):\n"
    "            p = os.path.join(d, f)\n"
    "            try:\n"
    "                st = os.lstat(p)\n"
    "            except OSError:\n"
    "                continue\n"
    "            if stat.S_ISREG(st.st_mode):\n"
    "                s[p[len(R) + 1:]] = (st.st_mtime_ns, st.st_size)\n"
    "                if len(s) >= 20000:\n"
    "                    return s\n"
    "    return s\n"
    "def put(fd, b):\n"
    "    while b:\n"
    "        b = b[os.write(fd, b):]\n"
    "nonce, _, code = sys.stdin.buffer.read().partition(b'\\n')\n"
    "before = snap()\n"
    "p = subprocess.Popen([sys.executable, '-c', sys.argv[2]], stdin=subprocess.PIPE,\n"
    "                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=R)\n"
    "try:\n"
    "    p.stdin.write(code)\n"
    "    p.stdin.close()\n"
    "except OSError:\n"
    "    pass\n"
    "fds = {p.stdout.fileno(): 1, p.stderr.fileno(): 2}\n"
    "total, trunc, end = 0, False, None\n"
    "while fds:\n"
    "    for fd in select.select(list(fds), [], [], 0.2)[0]:\n"
    "        b = os.read(fd, 65536)\n"
    "        if not b:\n"
    "            del fds[fd]\n"
    "            continue\n"
    "        keep = b[:max(0, CAP - total)]\n"
    "        total += len(b)\n"
    "        trunc = trunc or len(keep) < len(b)\n"
    "        put(fds[fd], keep)\n"
    "    if end is None and p.poll() is not None:\n"
    "        end = time.monotonic() + 0.5\n"
    "    if end is not None and time.monotonic() > end:\n"
    "        break\n"
    "rc = p.wait()\n"
    "if rc < 0:\n"
    "    rc = 128 - rc\n"
    "after = snap()\n"
    "ch = [k for k in sorted(after) if before.get(k) != after[k]]\n"
    "ok = [k for k in ch if len(k.encode('utf-8', 'surrogateescape')) <= 1024]\n"
    "files = [[k.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace'), after[k][1]]\n"
    "         for k in ok[:100]]\n"
    "rep = json.dumps({'rc': rc, 'files': files, 'more': len(ch) > len(files), 'trunc': trunc})\n"
    "put(2, b'\\n' + nonce + b' ' + rep.encode() + b'\\n')\n"
    "os._exit(rc)\n";

static const char runner_py[] =
    "import linecache, os, sys, traceback\n"
    "code = sys.stdin.buffer.read().decode('utf-8', 'replace')\n"
    "fd = os.open(os.devnull, os.O_RDONLY)\n"
    "os.dup2(fd, 0)\n"
    "os.close(fd)\n"
    "linecache.cache['<code>'] = (len(code), None, code.splitlines(True), '<code>')\n"
    "sys.argv = ['<code>']\n"
    "g = {'__name__': '__main__', '__builtins__': __builtins__}\n"
    "try:\n"
    "    exec(compile(code, '<code>', 'exec'), g)\n"
    "except SystemExit:\n"
    "    raise\n"
    "except BaseException as e:\n"
    "    traceback.print_exception(type(e), e, e.__traceback__.tb_next)\n"
    "    sys.stderr.flush()\n"
    "    sys.exit(1)\n";

void sbx_run_result_release(struct sbx_run_result *r)
{
	if (!r)
		return;
	sbx_buf_release(&r->out);
	sbx_buf_release(&r->err);
	for (size_t i = 0; i < r->n_files; i++)
		free(r->files[i].path);
	free(r->files);
	memset(r, 0, sizeof(*r));
}

/* Runs spec in sb; an exec that cannot run is explained for the user. */
static int run_exec(sbx_manager *m, sbx_sandbox *sb, struct sbx_exec_spec *spec,
		    struct sbx_exec_result *ret, struct sbx_error *err)
{
	struct sbx_exec_result res = {0};
	int r;

	if (!spec->workdir)
		spec->workdir = SBX_RESULTS_DIR;
	sbx_sandbox_touch(sb);
	r = sbx_exec(m->engine, sb->container, spec, &res, err);
	if (r < 0)
		return sbx_sandbox_exec_failed(m, sb, r, err);
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

static long time_limit(sbx_manager *m, long timeout_ms)
{
	return timeout_ms > 0 ? timeout_ms : (long)m->s->sandbox.exec_timeout_ms;
}

int sbx_sandbox_run_shell(sbx_manager *m, sbx_sandbox *sb, const char *command, long timeout_ms,
			  struct sbx_run_result *ret_result, struct sbx_error *err)
{
	const char *const argv[] = {"sh", "-c", command, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .timeout_ms = time_limit(m, timeout_ms),
	    .output_cap = (size_t)m->s->sandbox.output_cap,
	};
	struct sbx_exec_result res = {0};
	struct sbx_run_result out;
	int r;

	if (!command)
		return sbx_error_set(err, -EINVAL, "no command given");
	r = run_exec(m, sb, &spec, &res, err);
	if (r < 0)
		return r;
	r = take_result(&res, &out, err);
	sbx_exec_result_release(&res);
	if (r < 0)
		return r;
	*ret_result = out;
	return 0;
}

static int make_nonce(char *buf, size_t size, struct sbx_error *err)
{
	unsigned char raw[16];
	size_t got = 0;

	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0 && errno != EINTR)
			return sbx_error_set(err, -errno, "no random bytes: %s", strerror(errno));
		if (n > 0)
			got += (size_t)n;
	}
	snprintf(buf, size, "sbx-report-");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(buf + strlen(buf), size - strlen(buf), "%02x", raw[i]);
	return 0;
}

/* The start of the last "\nMARK" in b, or NULL. */
static char *find_last(struct sbx_buf *b, const char *mark)
{
	size_t n = strlen(mark);
	char *last = NULL, *p = b->data, *end = b->data + b->len;

	while (p && (size_t)(end - p) >= n + 1) {
		char *q = memmem(p, (size_t)(end - p), mark, n);
		if (!q)
			break;
		if (q > b->data && q[-1] == '\n')
			last = q - 1;
		else if (q == b->data)
			last = q;
		p = q + 1;
	}
	return last;
}

/* Reads the report in JSON text j into r. false when it is not one. */
static bool parse_report(const char *j, size_t len, struct sbx_run_result *r)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = NULL, *files, *v;
	bool ok = false;

	if (!tok)
		return false;
	o = json_tokener_parse_ex(tok, j, (int)len);
	json_tokener_free(tok);
	if (!o || !json_object_is_type(o, json_type_object))
		goto out;
	if (json_object_object_get_ex(o, "rc", &v))
		r->exit_code = json_object_get_int(v);
	if (json_object_object_get_ex(o, "trunc", &v) && json_object_get_boolean(v))
		r->truncated = true;
	if (json_object_object_get_ex(o, "more", &v))
		r->files_truncated = json_object_get_boolean(v);
	if (!json_object_object_get_ex(o, "files", &files) ||
	    !json_object_is_type(files, json_type_array))
		goto out;
	size_t n = json_object_array_length(files);
	if (n > REPORT_FILES_MAX) {
		n = REPORT_FILES_MAX;
		r->files_truncated = true;
	}
	r->files = calloc(n + 1, sizeof(*r->files));
	if (!r->files)
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct json_object *f = json_object_array_get_idx(files, i);
		struct json_object *path = json_object_array_get_idx(f, 0);
		struct json_object *size = json_object_array_get_idx(f, 1);
		if (!path || !json_object_is_type(path, json_type_string))
			continue;
		r->files[r->n_files].path = strdup(json_object_get_string(path));
		if (!r->files[r->n_files].path)
			goto out;
		r->files[r->n_files++].size = size ? json_object_get_int64(size) : 0;
	}
	ok = true;
out:
	json_object_put(o);
	if (!ok) {
		for (size_t i = 0; i < r->n_files; i++)
			free(r->files[i].path);
		free(r->files);
		r->files = NULL;
		r->n_files = 0;
		r->files_truncated = r->truncated = false;
	}
	return ok;
}

int sbx_sandbox_run_python(sbx_manager *m, sbx_sandbox *sb, const char *code, long timeout_ms,
			   struct sbx_run_result *ret_result, struct sbx_error *err)
{
	char nonce[64], cap[32], mark[80];
	size_t user_cap = (size_t)m->s->sandbox.output_cap;
	const char *const argv[] = {"python3", "-c", wrapper_py, cap, runner_py, NULL};
	struct sbx_buf in = SBX_BUF_INIT;
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .timeout_ms = time_limit(m, timeout_ms),
	    .output_cap = user_cap + REPORT_ROOM,
	};
	struct sbx_exec_result res = {0};
	struct sbx_run_result out;
	int r;

	if (!code)
		return sbx_error_set(err, -EINVAL, "no code given");
	r = make_nonce(nonce, sizeof(nonce), err);
	if (r < 0)
		return r;
	snprintf(cap, sizeof(cap), "%zu", user_cap);
	snprintf(mark, sizeof(mark), "%s ", nonce);
	if (sbx_buf_appendf(&in, "%s\n", nonce) < 0 ||
	    sbx_buf_append(&in, code, strlen(code)) < 0) {
		sbx_buf_release(&in);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	spec.stdin_data = in.data;
	spec.stdin_len = in.len;
	r = run_exec(m, sb, &spec, &res, err);
	sbx_buf_release(&in);
	if (r < 0)
		return r;

	/* Cut the report out before anything else touches the bytes. */
	memset(&out, 0, sizeof(out));
	char *rep = res.err.data ? find_last(&res.err, mark) : NULL;
	bool have_report = false;
	if (rep) {
		char *json = rep + (*rep == '\n') + strlen(mark);
		char *eol = memchr(json, '\n', (size_t)(res.err.data + res.err.len - json));
		size_t jlen =
		    eol ? (size_t)(eol - json) : (size_t)(res.err.data + res.err.len - json);
		have_report = parse_report(json, jlen, &out);
		if (have_report) {
			char *after = eol ? eol + 1 : res.err.data + res.err.len;
			size_t rest = (size_t)(res.err.data + res.err.len - after);
			memmove(rep, after, rest);
			res.err.len = (size_t)(rep - res.err.data) + rest;
			res.err.data[res.err.len] = '\0';
		}
	}
	{
		struct sbx_file_change *files = out.files;
		size_t n_files = out.n_files;
		bool files_trunc = out.files_truncated, trunc = out.truncated;
		int rc = out.exit_code;

		r = take_result(&res, &out, err);
		sbx_exec_result_release(&res);
		if (r < 0) {
			for (size_t i = 0; i < n_files; i++)
				free(files[i].path);
			free(files);
			return r;
		}
		out.files = files;
		out.n_files = n_files;
		out.files_truncated = files_trunc;
		out.truncated |= trunc;
		if (have_report && !out.timed_out)
			out.exit_code = rc;
	}
	*ret_result = out;
	return 0;
}
