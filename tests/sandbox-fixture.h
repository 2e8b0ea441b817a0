/* SPDX-License-Identifier: MIT */
/*
 * What tests/test-sandbox and tests/test-sandbox-pool share: the engine under
 * test and this run's instance name, settings and managers for an instance,
 * what an instance has on the engine, and the calls that should succeed as
 * checks (a failed call is a failed TAP point, so the checks of its result
 * may follow in an if without an else).
 */
#ifndef SBX_TEST_SANDBOX_FIXTURE_H
#define SBX_TEST_SANDBOX_FIXTURE_H

#include <stddef.h>

#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

/* Set by fixture_init from TYPE URL [IMAGE]. */
extern sbx_engine *engine;
extern const char *engine_type, *engine_url, *image;
/* PREFIX-TYPE-PID-TIME: unique to this run; managers use it or INSTANCE-SUFFIX. */
extern char instance[64];
/* Settings every manager of the program gets after the common ones
 * (NULL-terminated; NULL for none). */
extern const char *const *fixture_settings;

/* TLS for the engine under test (tests/engine-tls.h: a swarm's, for its
 * node reached over TCP), or NULL. */
const struct sbx_engine_tls *fixture_tls(void);
/* Reads TYPE URL [IMAGE] (a usage error exits 2), opens and pings the engine
 * (or bails out), names the run's instance. */
void fixture_init(int argc, char **argv, const char *prefix);
/* Frees the engine; the exit status of the TAP run. */
int fixture_end(void);

/* Settings for instance INST: the image, a 64k output cap, 256m of memory,
 * fixture_settings, then EXTRA (NULL-terminated, may be NULL). Bails out on a
 * setting that does not parse. */
void settings_for(struct sbx_settings *s, const char *inst, const char *const *extra);
/* A manager on E with S; bails out when it cannot be made. */
sbx_manager *manager(const struct sbx_settings *s, sbx_engine *e);

/* A manager of its own instance, INSTANCE-SUFFIX, with its settings. */
struct test_manager {
	char inst[80];
	struct sbx_settings s;
	sbx_manager *m;
};
/* Settings for INSTANCE-SUFFIX with EXTRA and a manager on E (NULL: the
 * engine under test); returns the manager. */
sbx_manager *test_manager_open(struct test_manager *x, const char *suffix, const char *const *extra,
			       sbx_engine *e);
/* Frees the manager, checks (named WHAT) that no container of the instance is
 * left, releases the settings. */
void test_manager_close(struct test_manager *x, const char *what);

/* The containers labelled with instance INST; (size_t)-1 when the engine
 * cannot list them. */
size_t count_instance(const char *inst);
/* The container id of a sandbox, found through its labels; NULL when there
 * is not exactly one. */
char *container_of(const char *inst, const char *id);

/* Calls that should succeed, each a check ("not ok" naming the call and its
 * error when it fails). RES is cleared first; the call's result is returned. */
int shell(sbx_manager *m, sbx_sandbox *sb, const char *cmd, struct sbx_run_result *res);
int python(sbx_manager *m, sbx_sandbox *sb, const char *code, struct sbx_run_result *res);
int python_opts(sbx_manager *m, sbx_sandbox *sb, const char *code, const struct sbx_run_opts *o,
		struct sbx_run_result *res);
/* sbx_manager_recover as a check; returns what it adopted, or the error. */
int recover(sbx_manager *m);

#endif
