/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics: the registry's counters and histograms
 * (include/sbx/metrics.h) and the gauges read now (sandboxes by state and,
 * on a cluster, by node; sessions by transport, the warm pool, HTTP
 * connections), in the
 * Prometheus text format 0.0.4.
 *
 * Who may read it: with server.metrics_token set, a request with
 * `Authorization: Bearer TOKEN` (compared in constant time, as digests),
 * from wherever it comes; 401 with WWW-Authenticate without a bearer
 * token, 403 with a wrong one, which counts against its address as a wrong
 * API key does (429 past SBX_AUTH_FAIL_MAX) and goes to the audit log
 * (route /metrics, reason rejected). Without it, clients on loopback
 * (127.0.0.0/8, ::1) only, and only while no API keys are checked: with
 * keys, a reverse proxy's clients (and every local user) come from loopback
 * too, so the token is needed; others get 403 naming the setting. Tenants'
 * API keys open nothing here (the metrics name every tenant). A request
 * with an Origin (a page in a browser: scrapers send none) is refused, so
 * that no page, not even one on a loopback origin, reads it. The Host and
 * Origin checks of every route come first (server.c); no CORS preflight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-internal.h"
#include "sbx/crypto.h"
#include "sbx/metrics.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

bool sbx_metrics_client_on_loopback(const char *client)
{
	return strncmp(client, "127.", 4) == 0 || strcmp(client, "::1") == 0;
}

/* AUTHORIZATION ("Bearer TOKEN") carries TOKEN: 1; another token: 0; no
 * bearer token at all (NULL, another scheme, empty): -1. */
static int bearer_matches(const char *authorization, const char *token)
{
	uint8_t want[SBX_SHA256_LEN], got[SBX_SHA256_LEN];
	const char *p = authorization;

	if (!p || strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
		return -1;
	p += 6;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return -1;
	/* Digests of equal length: the time taken tells nothing of the token. */
	if (sbx_sha256(token, strlen(token), want) < 0 || sbx_sha256(p, strlen(p), got) < 0)
		return 0;
	return sbx_crypto_equal(want, got, sizeof(want)) ? 1 : 0;
}

/* Whether RQ may read the metrics; false with the refusal in *RET. */
static bool allowed(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	static const char *const challenge[] = {"WWW-Authenticate",
						"Bearer realm=\"mcp-sandbox-metrics\"", NULL};
	const char *token = rq->http->settings->server.metrics_token;
	int m;

	if (sbx_http_header(rq, "Origin")) {
		*ret = sbx_http_respond_error(
		    rq, MHD_HTTP_FORBIDDEN,
		    "GET /metrics is for scrapers: a request from a page (with an Origin "
		    "header) is refused");
		return false;
	}
	if (!token || !*token) {
		if (rq->http->auth && sbx_auth_checks_keys(rq->http->auth)) {
			*ret = sbx_http_respond_error(
			    rq, MHD_HTTP_FORBIDDEN,
			    "GET /metrics needs server.metrics_token while API keys are checked "
			    "(clients behind a reverse proxy come from loopback too); set it and "
			    "send Authorization: Bearer TOKEN");
			return false;
		}
		if (sbx_metrics_client_on_loopback(rq->client))
			return true;
		*ret = sbx_http_respond_error(
		    rq, MHD_HTTP_FORBIDDEN,
		    "GET /metrics answers only clients on loopback while server.metrics_token is "
		    "not set; set it and send Authorization: Bearer TOKEN");
		return false;
	}
	m = bearer_matches(sbx_http_header(rq, MHD_HTTP_HEADER_AUTHORIZATION), token);
	if (m == 1)
		return true;
	/* A wrong token counts against its address as a wrong API key does
	 * (then 429), and is in the audit log; none at all is no guess. */
	if (m == 0 &&
	    sbx_http_auth_failed(rq, &(struct sbx_auth_refusal){.reason = SBX_AUTH_REJECTED}, ret))
		return false;
	if (m < 0)
		*ret = sbx_http_respond_error_with(
		    rq, MHD_HTTP_UNAUTHORIZED,
		    "GET /metrics needs Authorization: Bearer TOKEN, the token of "
		    "server.metrics_token",
		    challenge);
	else
		*ret = sbx_http_respond_error(
		    rq, MHD_HTTP_FORBIDDEN,
		    "wrong token for GET /metrics: it is the value of server.metrics_token "
		    "(API keys do not open it)");
	return false;
}

/* Most cluster nodes /metrics names. */
#define METRICS_NODES_MAX 256

/* The gauges (and the pool's counters), read now. */
static int write_now(struct sbx_http *h, struct sbx_buf *b)
{
	struct sbx_sandbox_counts c = {0};
	struct sbx_pool_stats p = {0};
	size_t sse = 0, streamable = 0;
	int r;

	if (h->manager) {
		sbx_manager_sandbox_counts(h->manager, &c);
		sbx_manager_pool_stats(h->manager, &p);
	}
	sse = sbx_session_table_count(h->sessions, SBX_MCP_TRANSPORT_SSE);
	streamable = sbx_session_table_count(h->sessions, SBX_MCP_TRANSPORT_STREAMABLE);
	r = sbx_metrics_write_family(
	    b, "mcp_sandbox_sandboxes", "gauge",
	    "Sandboxes by state: creating, idle, busy (a call runs in it), "
	    "sleeping (its container stopped, its files kept), dead (its container stopped "
	    "or went), ending (being removed).");
	{
		const struct {
			const char *state;
			size_t n;
		} states[] = {{"creating", c.creating}, {"idle", c.idle}, {"busy", c.busy},
			      {"sleeping", c.sleeping}, {"dead", c.dead}, {"ending", c.ending}};
		for (size_t i = 0; r == 0 && i < sizeof(states) / sizeof(states[0]); i++)
			r = sbx_metrics_write_sample(
			    b, "mcp_sandbox_sandboxes",
			    (const char *const[]){"state", states[i].state, NULL}, states[i].n);
	}
	if (r == 0 && h->manager) {
		/* A cluster's nodes (engine.type = swarm): none on one host. */
		struct sbx_node_count *nodes = calloc(METRICS_NODES_MAX, sizeof(*nodes));
		size_t n =
		    nodes ? sbx_manager_node_counts(h->manager, nodes, METRICS_NODES_MAX) : 0;

		if (n > 0)
			r = sbx_metrics_write_family(b, "mcp_sandbox_node_sandboxes", "gauge",
						     "Live sandboxes by the cluster node that runs "
						     "them (engine.type = swarm).");
		for (size_t i = 0; r == 0 && i < n; i++)
			r = sbx_metrics_write_sample(
			    b, "mcp_sandbox_node_sandboxes",
			    (const char *const[]){"node", nodes[i].node, NULL}, nodes[i].sandboxes);
		free(nodes);
	}
	if (r == 0)
		r = sbx_metrics_write_family(b, "mcp_sandbox_sessions", "gauge",
					     "MCP sessions open, by transport (sse, streamable).");
	if (r == 0)
		r = sbx_metrics_write_sample(b, "mcp_sandbox_sessions",
					     (const char *const[]){"transport", "sse", NULL}, sse);
	if (r == 0)
		r = sbx_metrics_write_sample(b, "mcp_sandbox_sessions",
					     (const char *const[]){"transport", "streamable", NULL},
					     streamable);
	{
		int conns = atomic_load(&h->connections);
		int64_t downloads = sbx_tenant_count_held(h->downloads, NULL);
		struct sbx_conn_counts cc;

		sbx_conn_counts(h, &cc);
		const struct {
			const char *name, *type, *help;
			uint64_t value;
		} one[] = {
		    {"mcp_sandbox_pool_hits_total", "counter",
		     "create_sandbox calls served from the warm pool.", p.taken},
		    {"mcp_sandbox_pool_misses_total", "counter",
		     "create_sandbox calls that created their own container (the pool empty or "
		     "off).",
		     p.cold},
		    {"mcp_sandbox_pool_ready", "gauge",
		     "Started containers waiting in the warm pool.", p.ready},
		    {"mcp_sandbox_pool_target", "gauge",
		     "Containers the warm pool aims to keep now: sandbox.pool_size, grown by "
		     "creates that found it empty up to sandbox.pool_max.",
		     p.size},
		    {"mcp_sandbox_http_connections", "gauge",
		     "HTTP connections open (event streams included).",
		     conns > 0 ? (uint64_t)conns : 0},
		    {"mcp_sandbox_http_connections_evicted_total", "counter",
		     "Idle HTTP connections closed to let a new one in at a connection limit.",
		     cc.evicted},
		    {"mcp_sandbox_http_connections_refused_total", "counter",
		     "HTTP connections answered 503 at a connection limit, none idle.", cc.refused},
		    {"mcp_sandbox_http_lingering", "gauge",
		     "Sockets read and dropped after a refusal sent before their body (lingering "
		     "close).",
		     (uint64_t)sbx_linger_count(h->linger)},
		    {"mcp_sandbox_artifact_downloads", "gauge",
		     "Artifact downloads running (GET /artifacts/...).",
		     downloads > 0 ? (uint64_t)downloads : 0},
		};
		for (size_t i = 0; r == 0 && i < sizeof(one) / sizeof(one[0]); i++) {
			r = sbx_metrics_write_family(b, one[i].name, one[i].type, one[i].help);
			if (r == 0)
				r = sbx_metrics_write_sample(b, one[i].name, NULL, one[i].value);
		}
	}
	return r;
}

enum MHD_Result sbx_metrics_handle(struct sbx_http_request *rq)
{
	struct sbx_buf b = SBX_BUF_INIT;
	enum MHD_Result ret;

	if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0)
		return sbx_http_respond_405(rq, "GET, HEAD");
	if (!allowed(rq, &ret))
		return ret;
	if (write_now(rq->http, &b) < 0 || sbx_metrics_render(&b) < 0) {
		sbx_buf_release(&b);
		return MHD_NO;
	}
	ret = sbx_http_respond(rq, MHD_HTTP_OK, SBX_METRICS_CONTENT_TYPE, b.data, b.len, NULL);
	sbx_buf_release(&b);
	return ret;
}
