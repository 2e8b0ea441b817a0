/* SPDX-License-Identifier: MIT */
/*
 * mcp-sandboxd: the MCP server. Loads the configuration, opens the engine,
 * adopts this instance's sandboxes, serves MCP over HTTP (legacy SSE on
 * /sse + /messages, Streamable HTTP on /mcp, artifacts, /health, /ready) until
 * SIGINT or SIGTERM, then stops cleanly (removing its sandboxes when
 * sandbox.remove_on_exit).
 *
 * The stop: the first SIGINT/SIGTERM stops the HTTP front, which cancels
 * every call in flight as notifications/cancelled would (the code gets a
 * KeyboardInterrupt, commands are killed) and waits for them, then frees the
 * manager, which removes the sandboxes; status 0. It may take
 * SBX_STOP_TIMEOUT_MS: past that (a call that ignores its cancellation, an
 * engine that hangs) the server removes this instance's containers for at
 * most SBX_STOP_SWEEP_MS and exits with status 1. A second SIGINT/SIGTERM
 * exits at once, status 128 + the signal: it skips waiting for the calls
 * and the orderly teardown (the interpreters' ends, the manager's own
 * removal, waiting for installs); it still removes this instance's
 * containers for at most SBX_STOP_SWEEP_MS when sandbox.remove_on_exit, and
 * whatever is left carries the instance's labels, so that the next start on
 * this instance adopts it (or removes it, for a pool container never handed
 * out). With remove_on_exit false nothing is removed: the sandboxes are
 * meant to outlive the server.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#ifndef SBX_SYSCONFDIR
#define SBX_SYSCONFDIR "/etc/mcp-sandbox"
#endif

/* The most the stop after the first SIGINT/SIGTERM may take: the calls are
 * cancelled at once and usually end within a second or two (Python's
 * KeyboardInterrupt, then sandbox.interrupt_grace before a kill). */
#define SBX_STOP_TIMEOUT_MS 10000
/* The most spent removing this instance's containers when the stop is cut
 * short (past SBX_STOP_TIMEOUT_MS, or at a second signal). */
#define SBX_STOP_SWEEP_MS 2000

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: mcp-sandboxd [-c FILE] [--set section.key=value ...] [--check] [--dump]\n"
		"Serves MCP over HTTP on server.listen:server.port (default 127.0.0.1:8000):\n"
		"  /mcp (Streamable HTTP), /sse + /messages (legacy SSE), /artifacts/..., /health, "
		"/ready.\n"
		"Prints 'mcp-sandboxd: listening on URL' once ready; stops on SIGINT/SIGTERM\n"
		"(calls in flight are cancelled; at most 10 s; a second signal exits at once).\n"
		"  -c, --config FILE   INI configuration (default " SBX_SYSCONFDIR
		"/mcp-sandbox.ini)\n"
		"      --set S.K=V     override one key (repeatable)\n"
		"      --check         contact the engine, report its version and exit\n"
		"      --dump          print the effective configuration and exit\n"
		"  -h, --help          this text\n"
		"  -V, --version       the version\n");
}

/* Runs the server until SIGINT/SIGTERM; the exit status. */
/* Every open connection holds a descriptor (server.max_connections, 4096 by
 * default): take the soft open-file limit up to the hard one. The HTTP
 * front lowers its connection limit to what the soft limit leaves. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- the stop ---- */

/* The orderly stop, on its own thread: the HTTP front (which cancels the
 * calls in flight and waits for them), the MCP layer, the manager (which
 * removes the sandboxes). */
struct stopper {
	sbx_http *http;
	sbx_mcp *mcp;
	sbx_manager *manager;
	atomic_bool done;
};

static void *stop_main(void *arg)
{
	struct stopper *st = arg;

	st->http = sbx_http_stop(st->http);
	st->mcp = sbx_mcp_free(st->mcp);
	st->manager = sbx_manager_free(st->manager);
	atomic_store(&st->done, true);
	return NULL;
}

/* Removes the containers of one instance, on a detached thread that may
 * outlive the wait (an engine that hangs): the struct is then leaked. */
struct sweeper {
	sbx_engine *engine;
	char *instance;
	atomic_int found, removed;
	atomic_bool done;
};

static void *sweep_main(void *arg)
{
	struct sweeper *sw = arg;
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, sw->instance}};
	struct sbx_container_summary *cs = NULL;
	size_t n = 0;

	if (sbx_container_list(sw->engine, want, SBX_ARRAY_SIZE(want), &cs, &n, NULL) == 0) {
		atomic_store(&sw->found, (int)n);
		for (size_t i = 0; i < n; i++) {
			int r = sbx_container_remove(sw->engine, cs[i].id, NULL);
			if (r >= 0 || r == -ENOENT)
				atomic_fetch_add(&sw->removed, 1);
		}
		sbx_container_list_free(cs, n);
	}
	atomic_store(&sw->done, true);
	return NULL;
}

/* When sandbox.remove_on_exit: removes this instance's containers (the
 * sandboxes and the pool's) for at most SBX_STOP_SWEEP_MS, and says how it
 * went. */
static void sweep(sbx_engine *engine, const struct sbx_settings *s)
{
	struct sweeper *sw = calloc(1, sizeof(*sw));
	int64_t until = sbx_monotonic_ms() + SBX_STOP_SWEEP_MS;
	pthread_attr_t attr;
	pthread_t t;
	int r;

	if (!engine || !s->sandbox.remove_on_exit || !sw ||
	    !(sw->instance = strdup(s->server.instance))) {
		free(sw);
		return;
	}
	sw->engine = engine;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, sweep_main, sw);
	pthread_attr_destroy(&attr);
	if (r != 0)
		return;
	while (!atomic_load(&sw->done) && sbx_monotonic_ms() < until) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (atomic_load(&sw->done) && atomic_load(&sw->removed) == atomic_load(&sw->found))
		fprintf(stderr, "mcp-sandboxd: removed the instance's %d container(s)\n",
			atomic_load(&sw->removed));
	else
		fprintf(stderr,
			"mcp-sandboxd: removed %d container(s) of instance %s in %d ms; those left "
			"are adopted (or removed) by the next start on this instance\n",
			atomic_load(&sw->removed), s->server.instance, SBX_STOP_SWEEP_MS);
}

static const char *signame(int sig)
{
	return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

/* Stops the server after the first signal SIG (see the top of the file);
 * returns the exit status when the stop finished, else exits. */
static int stop(sbx_engine *engine, sbx_http *http, sbx_mcp *mcp, sbx_manager *manager,
		const struct sbx_settings *s, const sigset_t *signals, int sig)
{
	struct stopper st = {.http = http, .mcp = mcp, .manager = manager};
	int64_t until = sbx_monotonic_ms() + SBX_STOP_TIMEOUT_MS;
	pthread_t t;

	fprintf(stderr,
		"mcp-sandboxd: %s, stopping: the calls in flight are cancelled (at most %d s; a "
		"second SIGINT or SIGTERM exits at once)\n",
		signame(sig), SBX_STOP_TIMEOUT_MS / 1000);
	atomic_init(&st.done, false);
	if (pthread_create(&t, NULL, stop_main, &st) != 0) {
		stop_main(&st); /* no thread: the stop without its bound */
		return 0;
	}
	for (;;) {
		int64_t left = until - sbx_monotonic_ms();
		struct timespec ts = {0, 100 * 1000000L};
		int got;

		if (atomic_load(&st.done)) {
			pthread_join(t, NULL);
			return 0;
		}
		if (left <= 0) {
			fprintf(stderr,
				"mcp-sandboxd: the stop did not finish within %d s (a call ignores "
				"its cancellation, or the engine hangs); exiting without it\n",
				SBX_STOP_TIMEOUT_MS / 1000);
			sweep(engine, s);
			fflush(NULL);
			_exit(1);
		}
		if (left < 100)
			ts.tv_nsec = left * 1000000L;
		got = sigtimedwait(signals, NULL, &ts);
		if (got == SIGINT || got == SIGTERM) {
			fprintf(
			    stderr,
			    "mcp-sandboxd: second signal (%s): exiting now, without waiting for "
			    "the calls\n",
			    signame(got));
			sweep(engine, s);
			fflush(NULL);
			_exit(128 + got);
		}
	}
}

static int serve(const struct sbx_settings *s, struct sbx_error *err)
{
	struct sbx_engine_config ec = {.type = s->engine.type,
				       .url = s->engine.socket,
				       .api_version = s->engine.api_version,
				       .timeout_ms = (long)s->engine.timeout_ms};
	sbx_engine *engine = NULL;
	sbx_manager *manager = NULL;
	sbx_mcp *mcp = NULL;
	sbx_http *http = NULL;
	sigset_t signals;
	int sig = 0, ret = 1, n;

	/* Blocked in every thread (they inherit the mask); main takes them. */
	sigemptyset(&signals);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	if (sbx_engine_open(&ec, &engine, err) < 0 || sbx_engine_ping(engine, err) < 0) {
		fprintf(stderr,
			"mcp-sandboxd: the container engine is not reachable: %s\n"
			"  (is Docker/Podman running? set engine.socket or DOCKER_HOST)\n",
			err->msg);
		goto out;
	}
	if (sbx_manager_new(s, engine, &manager, err) < 0) {
		fprintf(stderr, "mcp-sandboxd: %s\n", err->msg);
		goto out;
	}
	n = sbx_manager_recover(manager, err);
	if (n < 0) {
		fprintf(stderr, "mcp-sandboxd: recover sandboxes: %s\n", err->msg);
		goto out;
	}
	if (n > 0)
		fprintf(stderr, "mcp-sandboxd: adopted %d sandbox(es) of instance %s\n", n,
			sbx_manager_instance(manager));
	if (sbx_manager_state_dir(manager))
		fprintf(stderr, "mcp-sandboxd: instance %s, state folder %s\n",
			sbx_manager_instance(manager), sbx_manager_state_dir(manager));
	else
		fprintf(stderr,
			"mcp-sandboxd: instance %s without a state folder: nothing keeps another "
			"server with this instance off its sandboxes (set server.state_dir, or "
			"give each server its own server.instance)\n",
			sbx_manager_instance(manager));
	{
		const struct sbx_mcp_config mc = {.settings = s, .manager = manager};
		if (sbx_mcp_new(&mc, &mcp, err) < 0) {
			fprintf(stderr, "mcp-sandboxd: %s\n", err->msg);
			goto out;
		}
	}
	{
		const struct sbx_http_config hc = {.settings = s, .mcp = mcp, .manager = manager};
		if (sbx_http_start(&hc, &http, err) < 0) {
			fprintf(stderr, "mcp-sandboxd: %s\n", err->msg);
			goto out;
		}
	}
	printf("mcp-sandboxd: listening on %s\n", sbx_http_public_url(http));
	fflush(stdout);
	while (sigwait(&signals, &sig) != 0)
		;
	ret = stop(engine, http, mcp, manager, s, &signals, sig);
	http = NULL;
	mcp = NULL;
	manager = NULL;
out:
	sbx_http_stop(http);
	sbx_mcp_free(mcp);
	sbx_manager_free(manager);
	sbx_engine_free(engine);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"set", required_argument, NULL, 's'},
	    {"check", no_argument, NULL, 'k'},
	    {"dump", no_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct sbx_engine_version v = {0};
	const char *config = NULL;
	sbx_engine *engine = NULL;
	bool dump = false, check = false;
	int c, ret = 1;

	if (sbx_settings_init(&s) < 0)
		return 1;
	/* First pass: the file; second: --set on top of it. */
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'h':
			usage(stdout);
			sbx_settings_release(&s);
			return 0;
		case 'V':
			printf("mcp-sandboxd %s\n", PACKAGE_VERSION);
			sbx_settings_release(&s);
			return 0;
		case 's':
		case 'k':
		case 'd':
			break;
		default:
			usage(stderr);
			sbx_settings_release(&s);
			return 2;
		}
	}
	if (sbx_settings_load_file(&s, config ? config : SBX_SYSCONFDIR "/mcp-sandbox.ini", &err) <
		0 &&
	    (config || err.code != -ENOENT)) {
		fprintf(stderr, "mcp-sandboxd: %s\n", err.msg);
		goto out;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		if (c == 's' && sbx_settings_set(&s, optarg, &err) < 0) {
			fprintf(stderr, "mcp-sandboxd: %s\n", err.msg);
			goto out;
		}
		if (c == 'd')
			dump = true;
		if (c == 'k')
			check = true;
	}
	if (dump) {
		sbx_settings_dump(&s, stdout);
		ret = 0;
		goto out;
	}
	if (!check) {
		ret = serve(&s, &err);
		goto out;
	}
	{
		struct sbx_engine_config ec = {.type = s.engine.type,
					       .url = s.engine.socket,
					       .api_version = s.engine.api_version,
					       .timeout_ms = (long)s.engine.timeout_ms};
		if (sbx_engine_open(&ec, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0 ||
		    sbx_engine_version(engine, &v, &err) < 0) {
			fprintf(stderr, "mcp-sandboxd: engine: %s\n", err.msg);
			goto out;
		}
	}
	printf("mcp-sandboxd %s: %s %s (API %s) at %s\n", PACKAGE_VERSION, v.engine, v.version,
	       v.api_version, sbx_engine_url(engine));
	c = sbx_image_exists(engine, s.sandbox.image, &err);
	printf("sandbox image %s: %s\n", s.sandbox.image,
	       c == 1	? "present"
	       : c == 0 ? "MISSING (run tools/provision-engines)"
			: err.msg);
	ret = c == 1 ? 0 : 1;
out:
	sbx_engine_version_release(&v);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
	return ret;
}
