/* SPDX-License-Identifier: MIT */
/*
 * mcp-sandboxd: the MCP server. This step loads the configuration and checks
 * the engine; the HTTP/MCP layer comes on top (issue 3).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/engine.h"
#include "sbx/settings.h"

#ifndef SBX_SYSCONFDIR
#define SBX_SYSCONFDIR "/etc/mcp-sandbox"
#endif

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: mcp-sandboxd [-c FILE] [--set section.key=value ...] [--check] [--dump]\n"
		"  -c, --config FILE   INI configuration (default " SBX_SYSCONFDIR
		"/mcp-sandbox.ini)\n"
		"      --set S.K=V     override one key (repeatable)\n"
		"      --check         contact the engine, report its version and exit\n"
		"      --dump          print the effective configuration and exit\n"
		"  -h, --help          this text\n"
		"  -V, --version       the version\n");
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
	bool dump = false;
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
	}
	if (dump) {
		sbx_settings_dump(&s, stdout);
		ret = 0;
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
