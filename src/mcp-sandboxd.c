/* SPDX-License-Identifier: MIT */
/*
 * mcp-sandboxd: the MCP server. Loads the configuration, opens the engine,
 * adopts this instance's sandboxes, serves MCP over HTTP (legacy SSE on
 * /sse + /messages, Streamable HTTP on /mcp, artifacts, /health, /ready) until
 * SIGINT or SIGTERM, then stops cleanly (removing its sandboxes when
 * sandbox.remove_on_exit).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#ifndef SBX_SYSCONFDIR
#define SBX_SYSCONFDIR "/etc/mcp-sandbox"
#endif

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: mcp-sandboxd [-c FILE] [--set section.key=value ...] [--check] [--dump]\n"
		"Serves MCP over HTTP on server.listen:server.port (default 127.0.0.1:8000):\n"
		"  /mcp (Streamable HTTP), /sse + /messages (legacy SSE), /artifacts/..., /health, "
		"/ready.\n"
		"Prints 'mcp-sandboxd: listening on URL' once ready; stops on SIGINT/SIGTERM.\n"
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
	sigset_t stop;
	int sig = 0, ret = 1, n;

	/* Blocked in every thread (they inherit the mask); main takes them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
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
	while (sigwait(&stop, &sig) != 0)
		;
	fprintf(stderr, "mcp-sandboxd: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	ret = 0;
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
