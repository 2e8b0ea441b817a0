/* SPDX-License-Identifier: MIT */
/*
 * A request as its route handles it (the routes' side of
 * http-internal.h): its headers, its connection's idle timeout, and its
 * answer. Every answer carries the CORS headers of an allowed origin, and
 * one sent before the request's body was read closes its connection with a
 * lingering close (src/http/linger.c). Calls nothing of the server or the
 * routes.
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "http-internal.h"

/* ---- the request ---- */

const char *sbx_http_header(struct sbx_http_request *rq, const char *name)
{
	return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

void sbx_http_set_timeout(struct sbx_http_request *rq, unsigned seconds)
{
	MHD_set_connection_option(rq->conn, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

void sbx_http_stream_timeout(struct sbx_http_request *rq)
{
	/* libmicrohttpd counts a send of any bytes as activity; a stream waits
	 * at most keepalive_ms (half the timeout) before it sends. */
	sbx_http_set_timeout(rq, rq->http->stream_timeout_s);
}

/* ---- responses ---- */

enum MHD_Result sbx_http_queue(struct sbx_http_request *rq, unsigned status,
			       struct MHD_Response *resp)
{
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	/* Answered before its body was read: the client may still be sending
	 * it. The connection is not reused and lingers at its close
	 * (src/http/linger.c), so the answer reaches it, not a reset. */
	if (rq->early && rq->has_body) {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
		sbx_conn_set_linger(rq->http, rq->conn);
	}
	if (rq->origin) {
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", rq->origin);
		MHD_add_response_header(resp, "Vary", "Origin");
		MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Mcp-Session-Id");
	}
	r = MHD_queue_response(rq->conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

enum MHD_Result sbx_http_respond(struct sbx_http_request *rq, unsigned status,
				 const char *content_type, const char *body, size_t len,
				 const char *const *headers)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);

	if (!resp)
		return MHD_NO;
	if (content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	for (size_t i = 0; headers && headers[i]; i += 2)
		MHD_add_response_header(resp, headers[i], headers[i + 1]);
	return sbx_http_queue(rq, status, resp);
}

enum MHD_Result sbx_http_respond_json_take(struct sbx_http_request *rq, unsigned status, char *body,
					   const char *const *headers)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);

	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	for (size_t i = 0; headers && headers[i]; i += 2)
		MHD_add_response_header(resp, headers[i], headers[i + 1]);
	return sbx_http_queue(rq, status, resp);
}

/* A JSON-RPC error without an id: {"jsonrpc","id":null,"error":{code,message}}. */
static enum MHD_Result respond_rpc(struct sbx_http_request *rq, unsigned status, int code,
				   const char *message, const char *const *headers)
{
	struct json_object *o = json_object_new_object(), *e = json_object_new_object();
	enum MHD_Result r;
	const char *t;

	if (!o || !e) {
		json_object_put(o);
		json_object_put(e);
		return MHD_NO;
	}
	json_object_object_add(e, "code", json_object_new_int(code));
	json_object_object_add(e, "message", json_object_new_string(message));
	json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(o, "id", NULL);
	json_object_object_add(o, "error", e);
	t = json_object_to_json_string_ext(o,
					   JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	r = sbx_http_respond(rq, status, "application/json", t, strlen(t), headers);
	json_object_put(o);
	return r;
}

enum MHD_Result sbx_http_respond_rpc_error(struct sbx_http_request *rq, unsigned status, int code,
					   const char *message)
{
	return respond_rpc(rq, status, code, message, NULL);
}

enum MHD_Result sbx_http_respond_rpc_busy(struct sbx_http_request *rq, const char *message)
{
	static const char *const headers[] = {"Retry-After", "1", NULL};

	return respond_rpc(rq, MHD_HTTP_SERVICE_UNAVAILABLE, SBX_JSONRPC_SERVER_ERROR, message,
			   headers);
}

enum MHD_Result sbx_http_respond_405(struct sbx_http_request *rq, const char *allow)
{
	static const char body[] = "{\"error\":\"method not allowed\"}";
	const char *const headers[] = {"Allow", allow, NULL};

	return sbx_http_respond(rq, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", body,
				sizeof(body) - 1, headers);
}

enum MHD_Result sbx_http_respond_error(struct sbx_http_request *rq, unsigned status,
				       const char *message)
{
	return sbx_http_respond_error_with(rq, status, message, NULL);
}

enum MHD_Result sbx_http_respond_error_with(struct sbx_http_request *rq, unsigned status,
					    const char *message, const char *const *headers)
{
	struct json_object *o = json_object_new_object();
	enum MHD_Result r;
	const char *t;

	if (!o)
		return MHD_NO;
	json_object_object_add(o, "error", json_object_new_string(message));
	t = json_object_to_json_string_ext(o,
					   JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	r = sbx_http_respond(rq, status, "application/json", t, strlen(t), headers);
	json_object_put(o);
	return r;
}
