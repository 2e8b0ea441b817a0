/* SPDX-License-Identifier: MIT */
/*
 * Streamable HTTP (2025-03-26 and later) on /mcp, in the order of
 * docs/mcp.md: 405 for other methods, 403 Host/Origin (src/http.c), then for
 * POST 406 Accept, 415 Content-Type, 413 body, 400 bad JSON, the session
 * (400 missing, 404 unknown), 400 an unsupported MCP-Protocol-Version; 202
 * for a body without requests, else 200 application/json with the reply.
 *
 * A request runs in the connection's own thread (see src/http.c), so
 * concurrent POSTs on one session run side by side. Replies are
 * application/json for now; a request carrying a progressToken may later be
 * answered as text/event-stream, with the notifier of sbx_mcp_session_run
 * feeding the stream from this same thread.
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "http-internal.h"
#include "sbx/common.h"

#define SESSION_HEADER "Mcp-Session-Id"
#define VERSION_HEADER "MCP-Protocol-Version"

/* Accept lists both application/json and text/event-stream (wildcards
 * count). */
static bool accept_ok(const char *accept)
{
	bool json = false, sse = false;

	for (const char *p = accept; p && *p;) {
		const char *e = p + strcspn(p, ",");
		const char *semi = memchr(p, ';', (size_t)(e - p));
		const char *end = semi ? semi : e;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		size_t n = (size_t)(end - p);
#define IS(s) (n == strlen(s) && strncasecmp(p, s, n) == 0)
		if (IS("*/*"))
			json = sse = true;
		else if (IS("application/json") || IS("application/*"))
			json = true;
		else if (IS("text/event-stream") || IS("text/*"))
			sse = true;
#undef IS
		p = *e ? e + 1 : e;
	}
	return json && sse;
}

bool sbx_streamable_check(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	if (strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "OPTIONS") == 0) {
		/* No server->client stream on GET (yet): the client goes on without. */
		static const char *const allow[] = {"Allow", "GET, POST, DELETE", NULL};
		*ret = sbx_http_respond(rq, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
					"{\"error\":\"no server-initiated stream on GET\"}", 44,
					allow);
		return true;
	}
	if (strcmp(rq->method, "POST") != 0)
		return false;
	if (!accept_ok(sbx_http_header(rq, "Accept"))) {
		*ret = sbx_http_respond_rpc_error(
		    rq, MHD_HTTP_NOT_ACCEPTABLE, -32000,
		    "Not Acceptable: Accept must list application/json and text/event-stream");
		return true;
	}
	if (!sbx_http_media_is(sbx_http_header(rq, MHD_HTTP_HEADER_CONTENT_TYPE),
			       "application/json")) {
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, -32000,
						  "Unsupported Media Type: Content-Type must be "
						  "application/json");
		return true;
	}
	return false;
}

/* The session the request names: 400 when none, 404 when unknown. */
static struct sbx_http_session *lookup(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	const char *id = sbx_http_header(rq, SESSION_HEADER);
	struct sbx_http_session *s;

	if (!id || !*id) {
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_BAD_REQUEST, -32000,
						  "Bad Request: Mcp-Session-Id header is required");
		return NULL;
	}
	s = sbx_session_table_find(rq->http->sessions, id, SBX_MCP_TRANSPORT_STREAMABLE);
	if (!s)
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
						  "Session not found: initialize a new session");
	return s;
}

static enum MHD_Result handle_delete(struct sbx_http_request *rq)
{
	struct sbx_http_session *s;
	enum MHD_Result r;

	s = lookup(rq, &r);
	if (!s)
		return r;
	sbx_session_table_remove(rq->http->sessions, s);
	sbx_http_session_unref(s);
	return sbx_http_respond(rq, MHD_HTTP_OK, NULL, NULL, 0, NULL);
}

static enum MHD_Result handle_post(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_http_session *s = NULL;
	sbx_mcp_input *in = NULL;
	_cleanup_free_ char *errjson = NULL, *reply = NULL;
	const char *pv = sbx_http_header(rq, VERSION_HEADER);
	bool created = false, requests;
	enum MHD_Result ret;
	int r;

	r = sbx_mcp_input_parse(rq->body.data, rq->body.len, &in, &errjson);
	if (r == -ENOMEM)
		return MHD_NO;
	if (r < 0)
		return sbx_http_respond(rq, MHD_HTTP_BAD_REQUEST, "application/json", errjson,
					strlen(errjson), NULL);
	if (sbx_mcp_input_is_initialize(in) && !sbx_http_header(rq, SESSION_HEADER)) {
		r = sbx_session_table_add(h->sessions, h->mcp, SBX_MCP_TRANSPORT_STREAMABLE, &s,
					  &err);
		if (r < 0) {
			sbx_mcp_input_free(in);
			return sbx_http_respond_rpc_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
							  SBX_JSONRPC_INTERNAL_ERROR, err.msg);
		}
		created = true;
	} else {
		s = lookup(rq, &ret);
		if (!s) {
			sbx_mcp_input_free(in);
			return ret;
		}
		if (pv && !sbx_mcp_version_supported(pv)) {
			sbx_mcp_input_free(in);
			sbx_http_session_unref(s);
			return sbx_http_respond_rpc_error(
			    rq, MHD_HTTP_BAD_REQUEST, -32000,
			    "Bad Request: unsupported MCP-Protocol-Version");
		}
	}

	requests = sbx_mcp_input_has_requests(in);
	/* A tools/call may take minutes: no idle timeout while it runs. */
	sbx_http_set_timeout(rq, 0);
	r = sbx_mcp_session_run(s->mcp, in, NULL, &reply, &err);
	sbx_http_set_timeout(rq, SBX_HTTP_IDLE_TIMEOUT_S);
	if (r < 0) {
		if (created)
			sbx_session_table_remove(h->sessions, s);
		sbx_http_session_unref(s);
		return MHD_NO;
	}
	if (created && !sbx_mcp_session_version(s->mcp)) {
		/* initialize failed: no session to hand out. */
		sbx_session_table_remove(h->sessions, s);
		created = false;
	}
	if (!requests || !reply) {
		ret = sbx_http_respond(rq, MHD_HTTP_ACCEPTED, NULL, NULL, 0, NULL);
	} else {
		const char *const hdrs[] = {SESSION_HEADER, s->id, NULL};
		ret = sbx_http_respond(rq, MHD_HTTP_OK, "application/json", reply, strlen(reply),
				       created ? hdrs : NULL);
	}
	sbx_http_session_unref(s);
	return ret;
}

enum MHD_Result sbx_streamable_handle(struct sbx_http_request *rq)
{
	if (strcmp(rq->method, "DELETE") == 0)
		return handle_delete(rq);
	if (strcmp(rq->method, "POST") == 0)
		return handle_post(rq);
	/* GET/OPTIONS were answered in the header phase. */
	return sbx_http_respond_error(rq, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
}
