/* SPDX-License-Identifier: MIT */
/*
 * The sandbox manager against a real engine: tests/test-sandbox TYPE URL [IMAGE].
 * Every manager here uses an instance name unique to this run, and the suite
 * ends by checking that no container of those instances is left.
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
#include "tap.h"

static sbx_engine *engine;
static const char *engine_type;
static const char *image;
static char instance[64];

static void settings_for(struct sbx_settings *s, const char *inst, const char *const *extra)
{
	char line[512];
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_settings_init(s) < 0)
		tap_bail("settings init");
	snprintf(line, sizeof(line), "server.instance=%s", inst);
	if (sbx_settings_set(s, line, &err) < 0)
		tap_bail(err.msg);
	snprintf(line, sizeof(line), "sandbox.image=%s", image);
	if (sbx_settings_set(s, line, &err) < 0)
		tap_bail(err.msg);
	if (sbx_settings_set(s, "sandbox.output_cap=64k", &err) < 0)
		tap_bail(err.msg);
	if (sbx_settings_set(s, "sandbox.memory=256m", &err) < 0)
		tap_bail(err.msg);
	for (; extra && *extra; extra++)
		if (sbx_settings_set(s, *extra, &err) < 0) {
			tap_diag("%s: %s", *extra, err.msg);
			tap_bail("bad test setting");
		}
}

static size_t count_instance(const char *inst)
{
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, inst}};
	struct sbx_container_summary *list = NULL;
	size_t n = 0;
	if (sbx_container_list(engine, want, 2, &list, &n, NULL) < 0)
		return (size_t)-1;
	sbx_container_list_free(list, n);
	return n;
}

/* The container id of a sandbox, found through its labels. */
static char *container_of(const char *inst, const char *id)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}, {SBX_LABEL_ID, id}};
	struct sbx_container_summary *list = NULL;
	size_t n = 0;
	char *cid = NULL;
	if (sbx_container_list(engine, want, 2, &list, &n, NULL) == 0 && n == 1)
		cid = strdup(list[0].id);
	sbx_container_list_free(list, n);
	return cid;
}

static int shell(sbx_manager *m, sbx_sandbox *sb, const char *cmd, struct sbx_run_result *res)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int r;
	memset(res, 0, sizeof(*res));
	r = sbx_sandbox_run_shell(m, sb, cmd, 0, res, &err);
	if (r < 0)
		tap_diag("run_shell %s: %s", cmd, err.msg);
	return r;
}

static int python(sbx_manager *m, sbx_sandbox *sb, const char *code, struct sbx_run_result *res)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int r;
	memset(res, 0, sizeof(*res));
	r = sbx_sandbox_run_python(m, sb, code, 0, res, &err);
	if (r < 0)
		tap_diag("run_python: %s", err.msg);
	return r;
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
	} else
		tap_ok(0, "run_shell");
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
		tap_ok(has_file(&res, "hard.txt", 1), "and its files are reported");
	}
	sbx_run_result_release(&res);

	if (python(m, sb,
		   "import os\nos.makedirs('many', exist_ok=True)\n"
		   "for i in range(150):\n    open('many/f%03d' % i, 'w').write('m')\n",
		   &res) == 0) {
		tap_is_int(res.n_files, 100, "at most 100 files reported");
		tap_ok(res.files_truncated, "with files_truncated");
	}
	sbx_run_result_release(&res);

	if (python(m, sb, "import sys\nprint(sys.stdin.read() == '')\n", &res) == 0)
		tap_is_str(res.out.data, "True\n", "the code's stdin is empty");
	sbx_run_result_release(&res);
}

static void test_stopped(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	sbx_sandbox *sb = NULL;
	char *cid;
	int r;

	if (sbx_sandbox_create(m, "alice", "stopme", &sb, &err) < 0) {
		tap_ok(0, "create a sandbox to stop (%s)", err.msg);
		return;
	}
	cid = container_of(instance, sbx_sandbox_id(sb));
	tap_ok(cid && sbx_container_kill(engine, cid, "KILL", &err) == 0, "kill its container");
	usleep(300000);
	r = sbx_sandbox_run_shell(m, sb, "echo hi", 0, &res, &err);
	tap_ok(r < 0, "running in a stopped sandbox fails");
	tap_ok(strstr(err.msg, "create a new sandbox") != NULL, "and says what to do: %s", err.msg);
	if (r == 0)
		sbx_run_result_release(&res);
	tap_ok(sbx_sandbox_delete(m, "alice", "stopme", &err) == 0, "a stopped one is deleted");
	sbx_sandbox_unref(sb);
	free(cid);
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
	sbx_manager_new(&s1, engine, &m, &err);
	r = sbx_sandbox_create(m, "dave", "kept", &sb, &err);
	tap_ok(r == 0, "create under max_sandboxes=1 (%s)", err.msg);
	if (sb)
		snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sb));
	r = sbx_sandbox_create(m, "erin", NULL, &sb2, &err);
	tap_is_int(r, -EBUSY, "a second one: EBUSY (%s)", err.msg);
	if (sb)
		shell(m, sb, "echo kept > /app/results/k.txt", &res), sbx_run_result_release(&res);
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 1, "with remove_on_exit=false the container stays");

	sbx_manager_new(&s2, engine, &m, &err);
	r = sbx_manager_recover(m, &err);
	tap_is_int(r, 1, "recover adopts it (%s)", err.msg);
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
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "with remove_on_exit the manager removes it");
	sbx_settings_release(&s1);
	sbx_settings_release(&s2);
}

int main(int argc, char **argv)
{
	struct sbx_engine_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m = NULL;
	sbx_sandbox *a = NULL, *named = NULL;

	if (argc < 3) {
		fprintf(stderr, "usage: %s TYPE URL [IMAGE]\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	engine_type = cfg.type = argv[1];
	cfg.url = argv[2];
	image = argc > 3 ? argv[3] : "localhost/mcp-sandbox:latest";
	snprintf(instance, sizeof(instance), "test-%s-%ld-%ld", argv[1], (long)getpid(),
		 (long)time(NULL));
	if (sbx_engine_open(&cfg, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0) {
		printf("Bail out! %s engine at %s: %s\n", argv[1], argv[2], err.msg);
		return 1;
	}

	test_utf8();
	settings_for(&s, instance, NULL);
	if (sbx_manager_new(&s, engine, &m, &err) < 0)
		tap_bail(err.msg);
	test_create_get_list(m, &a, &named);
	test_shell(m, a);
	test_python(m, named);
	test_stopped(m);
	{
		sbx_sandbox *x = NULL;
		tap_ok(sbx_sandbox_delete(m, "alice", "work", &err) == 0, "delete by name (%s)",
		       err.msg);
		tap_is_int(sbx_sandbox_get(m, "alice", "work", &x, &err), -ENOENT,
			   "then it is gone");
	}
	sbx_sandbox_unref(named);
	sbx_sandbox_unref(a);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(instance), 0, "the manager removed its sandboxes on free");

	test_engine_down();
	test_recover_and_limit();

	tap_is_int(count_instance(instance), 0, "no container of this run is left");
	sbx_settings_release(&s);
	engine = sbx_engine_free(engine);
	return tap_done();
}
