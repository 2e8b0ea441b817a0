/* SPDX-License-Identifier: MIT */
/* The shared fixture of tests/test-sandbox and tests/test-sandbox-pool. */
#include "sandbox-fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine-tls.h"
#include "tap.h"

sbx_engine *engine;
const char *engine_type, *engine_url, *image;
char instance[64];
const char *const *fixture_settings;

const struct sbx_engine_tls *fixture_tls(void)
{
	return test_engine_tls(engine_type);
}

void fixture_init(int argc, char **argv, const char *prefix)
{
	struct sbx_engine_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;

	if (argc < 3) {
		fprintf(stderr, "usage: %s TYPE URL [IMAGE]\n", argv[0]);
		exit(2);
	}
	signal(SIGPIPE, SIG_IGN);
	engine_type = cfg.type = argv[1];
	engine_url = cfg.url = argv[2];
	cfg.tls = fixture_tls();
	image = argc > 3 ? argv[3] : "localhost/mcp-sandbox:latest";
	/* SBX_TEST_INSTANCE_TAG (tools/mutants: its own) goes first, so that
	 * whoever set it can find what a run left behind. */
	snprintf(instance, sizeof(instance), "%s%s%s-%s-%ld-%ld",
		 getenv("SBX_TEST_INSTANCE_TAG") ? getenv("SBX_TEST_INSTANCE_TAG") : "",
		 getenv("SBX_TEST_INSTANCE_TAG") ? "-" : "", prefix, engine_type, (long)getpid(),
		 (long)time(NULL));
	if (sbx_engine_open(&cfg, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0) {
		printf("Bail out! %s engine at %s: %s\n", engine_type, engine_url, err.msg);
		exit(1);
	}
}

int fixture_end(void)
{
	engine = sbx_engine_free(engine);
	return tap_done();
}

static void set(struct sbx_settings *s, const char *line)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_settings_set(s, line, &err) < 0) {
		tap_diag("%s: %s", line, err.msg);
		tap_bail("bad test setting");
	}
}

void settings_for(struct sbx_settings *s, const char *inst, const char *const *extra)
{
	char line[512];

	if (sbx_settings_init(s) < 0)
		tap_bail("settings init");
	snprintf(line, sizeof(line), "server.instance=%s", inst);
	set(s, line);
	snprintf(line, sizeof(line), "sandbox.image=%s", image);
	set(s, line);
	set(s, "sandbox.output_cap=64k");
	set(s, "sandbox.memory=256m");
	/* The shared engines keep containers on overlay over extfs, which cannot
	 * bound a disk; tests/test-hardening's disk part sets it on the disk
	 * engines (btrfs) of tools/provision-engines. */
	set(s, "sandbox.disk=0");
	/* A pool of 2 (the default, 16, would start 16 containers for each
	 * test's manager), of the size a test gives it, unless the test lets
	 * it grow (sandbox.pool_max): its counts stay the test's own. */
	set(s, "sandbox.pool_size=2");
	set(s, "sandbox.pool_max=0");
	for (const char *const *x = fixture_settings; x && *x; x++)
		set(s, *x);
	for (; extra && *extra; extra++)
		set(s, *extra);
}

sbx_manager *manager(const struct sbx_settings *s, sbx_engine *e)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_manager *m = NULL;

	if (sbx_manager_new(s, e, &m, &err) < 0) {
		tap_diag("manager: %s", err.msg);
		tap_bail("cannot make a manager");
	}
	return m;
}

sbx_manager *test_manager_open(struct test_manager *x, const char *suffix, const char *const *extra,
			       sbx_engine *e)
{
	snprintf(x->inst, sizeof(x->inst), "%s-%s", instance, suffix);
	settings_for(&x->s, x->inst, extra);
	x->m = manager(&x->s, e ? e : engine);
	return x->m;
}

void test_manager_close(struct test_manager *x, const char *what)
{
	x->m = sbx_manager_free(x->m);
	tap_is_int(count_instance(x->inst), 0, "%s", what);
	sbx_settings_release(&x->s);
}

size_t count_instance(const char *inst)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}};
	struct sbx_container_summary *list = NULL;
	struct sbx_error err = SBX_ERROR_INIT;
	size_t n = 0;

	if (sbx_container_list(engine, want, 1, &list, &n, &err) < 0) {
		tap_diag("list the containers of %s: %s", inst, err.msg);
		return (size_t)-1;
	}
	sbx_container_list_free(list, n);
	return n;
}

char *container_of(const char *inst, const char *id)
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

int shell(sbx_manager *m, sbx_sandbox *sb, const char *cmd, struct sbx_run_result *res)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char what[64];
	int r;

	memset(res, 0, sizeof(*res));
	r = sbx_sandbox_run_shell(m, sb, cmd, 0, res, &err);
	tap_call(r, err.msg, "run_shell `%s`", tap_excerpt(what, sizeof(what), cmd));
	return r;
}

int python_opts(sbx_manager *m, sbx_sandbox *sb, const char *code, const struct sbx_run_opts *o,
		struct sbx_run_result *res)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char what[64];
	int r;

	memset(res, 0, sizeof(*res));
	r = sbx_sandbox_run_python_ex(m, sb, code, o, res, &err);
	tap_call(r, err.msg, "run_python `%s`", tap_excerpt(what, sizeof(what), code));
	return r;
}

int python(sbx_manager *m, sbx_sandbox *sb, const char *code, struct sbx_run_result *res)
{
	static const struct sbx_run_opts defaults = {0};
	return python_opts(m, sb, code, &defaults, res);
}

int recover(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int r = sbx_manager_recover(m, &err);

	tap_call(r, err.msg, "recover");
	return r;
}
