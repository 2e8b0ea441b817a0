/* SPDX-License-Identifier: MIT */
/*
 * The HTTP front of mcp-sandboxd (libmicrohttpd): the MCP transports
 * (GET /sse + POST /messages, and /mcp), GET /health, GET /ready and the artifact
 * routes (SBX_ARTIFACT_ROUTE). It checks Host and Origin, the body limit and
 * the session, then hands bodies to the MCP layer (include/sbx/mcp.h);
 * artifacts stream from the sandbox manager (include/sbx/sandbox.h).
 *
 * Errors and ownership: include/sbx/error.h and include/sbx/common.h.
 */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <stdint.h>

#include "sbx/audit.h"
#include "sbx/auth.h"
#include "sbx/error.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

typedef struct sbx_http sbx_http;

struct sbx_http_config {
	const struct sbx_settings *settings; /* server.* keys; must outlive the server */
	sbx_mcp *mcp;			     /* must outlive the server */
	sbx_manager *manager;		     /* for the artifact routes */
	/* Who calls /mcp and GET /sse (sbx_auth_check, from the headers); must
	 * outlive the server. NULL: nothing is checked, every caller is the
	 * tenant "default". */
	sbx_auth *auth;
	/* Where refused authentications are logged (include/sbx/audit.h); must
	 * outlive the server. NULL: nowhere. (Tool calls: the MCP layer's.) */
	sbx_audit *audit;
};

/* Binds server.listen:server.port (port 0 = any free port) and starts
 * serving. Then sets the MCP layer's public URL (server.public_url, else
 * http://LISTEN:PORT with the bound port). -EADDRINUSE and friends name the
 * address. */
int sbx_http_start(const struct sbx_http_config *cfg, sbx_http **ret_http, struct sbx_error *err);
/* The TCP port bound. */
uint16_t sbx_http_port(const sbx_http *h);
/* The URL links are built on (as given to the MCP layer). */
const char *sbx_http_public_url(const sbx_http *h);
/* Stops accepting, ends open streams, waits for running requests. */
sbx_http *sbx_http_stop(sbx_http *h);

#endif
