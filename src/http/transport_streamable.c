/* SPDX-License-Identifier: MIT */
/*
 * Streamable HTTP (2025-03-26 and later) on /mcp: 405 for other methods,
 * 403 Host/Origin, 413 a Content-Length over server.max_body
 * (src/http/server.c), then for POST, from the headers alone: 406 Accept,
 * 415 Content-Type, 404 an unknown Mcp-Session-Id; without one the body can
 * only be an initialize, 413 past SBX_HTTP_SESSIONLESS_BODY_MAX. Then the
 * body: 413 when it passes its limit as it streams in, 503 when the body
 * budget is full, 400 bad JSON or too many values, 400 a body other than
 * initialize without a session, 400 an unsupported MCP-Protocol-Version; 202
 * for a body without requests, else 200 application/json with the reply.
 *
 * A body that only holds cheap requests (everything but tools/call) runs in
 * the connection's thread and gets the application/json reply. One with a
 * tools/call runs on a pooled worker while the connection's thread waits
 * (concurrent POSTs on one session run side by side). If the call finishes
 * without sending a notification, the reply is one application/json
 * response. If it sends one first (progress, log), the reply becomes
 * text/event-stream: the notifications as they come, then the response,
 * then the stream closes. A session runs at most server.max_calls_per_session
 * such bodies at once: past it the body is refused at once (200, a JSON-RPC
 * error for each request that names the limit), never queued. Without a
 * free worker (SBX_HTTP_WORKERS_MAX in all): 503 with Retry-After.
 *
 * A call's stream is bounded as the SSE transport's (src/http/event_stream.c):
 * its notifications past CALL_QUEUE_MAX_* are dropped, the biggest queue
 * over server.max_queued is closed, and a client that takes no bytes for
 * server.stream_stall_timeout is cut off; each of these cancels the call.
 *
 * A client that drops the connection of a POST whose call still runs
 * cancels it, as notifications/cancelled would (seen within
 * SBX_PEER_CHECK_MS, whether the reply was to be JSON or a stream): this
 * server offers no resumption (no event ids, no GET stream), so the response
 * could never reach anyone. DELETE of the session, or its expiry, cancels
 * every call it runs (src/http/session.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http-internal.h"
#include "sbx/common.h"

#define SESSION_HEADER "Mcp-Session-Id"
#define VERSION_HEADER "MCP-Protocol-Version"
/* Notifications queued for one request's stream; past this they are dropped. */
#define CALL_QUEUE_MAX_MSGS 256
#define CALL_QUEUE_MAX_BYTES (16u * 1024 * 1024)

/* One request running in a worker; shared by the worker and the
 * connection (and its stream), reference-counted. */
struct call {
	struct sbx_http_job job;
	atomic_int refs;
	struct sbx_http *http;
	struct sbx_http_session *session;
	sbx_mcp_input *input;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sbx_outq queue;	       /* notifications not yet sent */
	char *reply;		       /* the response text once done (NULL: none) */
	bool done;		       /* the worker finished */
	atomic_bool gone;	       /* the connection went away: queue nothing, cancel */
	bool replied;		       /* the stream sent the response */
	struct sbx_event_stream out;   /* the stream, once on */
	char client[INET6_ADDRSTRLEN]; /* the POST's address */
};

static struct call *call_unref(struct call *c)
{
	if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
		return NULL;
	sbx_outq_close(&c->queue);
	sbx_mcp_input_free(c->input);
	sbx_http_session_unref(c->session);
	free(c->reply);
	sbx_buf_release(&c->out.pending);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return NULL;
}

static struct call *of_outq(struct sbx_outq *q)
{
	return (struct call *)(void *)((char *)q - offsetof(struct call, queue));
}

static void outq_ref(struct sbx_outq *q)
{
	atomic_fetch_add(&of_outq(q)->refs, 1);
}

static void outq_unref(struct sbx_outq *q)
{
	call_unref(of_outq(q));
}

/* Closed by the server (the biggest queue over server.max_queued): as if
 * the client had gone, the call is cancelled. */
static void outq_closed(struct sbx_outq *q)
{
	atomic_store(&of_outq(q)->gone, true);
}

static const struct sbx_outq_ops call_outq_ops = {
    .ref = outq_ref, .unref = outq_unref, .closed = outq_closed};

static void call_notify(void *ctx, const char *json)
{
	struct call *c = ctx;
	struct sbx_sse_msg *m;

	if (atomic_load(&c->gone))
		return;
	m = sbx_sse_msg_new("message", json);
	if (m)
		sbx_outq_push(&c->queue, m);
}

/* The connection is done with C (its stream ended, or its reply went out as
 * JSON, or its client left): nothing more is queued, and C is no longer
 * one the server may close. Drops the connection's reference. */
static void call_leave(struct call *c)
{
	atomic_store(&c->gone, true);
	sbx_outq_detach(&c->queue);
	sbx_outq_unlist(&c->queue);
	sbx_outq_close(&c->queue);
	call_unref(c);
}

/* The run's GONE: the POST's connection went away. */
static bool call_gone(void *ctx)
{
	struct call *c = ctx;

	return atomic_load(&c->gone);
}

static void call_worker(struct sbx_http_job *job)
{
	struct call *c = (struct call *)job; /* the first member */
	struct sbx_error err = SBX_ERROR_INIT;
	const struct sbx_mcp_notifier n = {
	    .send = call_notify, .ctx = c, .gone = call_gone, .client = c->client};
	sbx_mcp_input *in = SBX_TAKE(c->input);
	char *reply = NULL;

	sbx_mcp_session_run(c->session->mcp, in, &n, &reply, &err);
	/* The slot is free before the reply goes out: a client that sends its
	 * next call on the reply finds it free. */
	sbx_http_session_call_end(c->session);
	pthread_mutex_lock(&c->lock);
	c->reply = reply;
	c->done = true;
	pthread_mutex_unlock(&c->lock);
	/* After the unlock (C lives on: this thread's reference), so the waiter
	 * does not wake into a held lock and sleep again. */
	pthread_cond_broadcast(&c->cond);
	call_unref(c);
}

/* Runs IN on S on a pooled worker, in one of S's call slots (taken by the
 * caller, given back by the worker); NULL when no worker is free (IN and the
 * slot are then still the caller's). */
static struct call *call_start(struct sbx_http *h, struct sbx_http_session *s, sbx_mcp_input *in,
			       const char *client)
{
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->job.fn = call_worker;
	atomic_init(&c->refs, 2); /* the worker's and the caller's */
	c->http = h;
	c->session = sbx_http_session_ref(s);
	c->input = in;
	snprintf(c->client, sizeof(c->client), "%s", client);
	atomic_init(&c->gone, false);
	pthread_mutex_init(&c->lock, NULL);
	sbx_cond_init_monotonic(&c->cond);
	sbx_outq_init(&c->queue, h, &c->lock, &c->cond, &call_outq_ops, CALL_QUEUE_MAX_MSGS,
		      CALL_QUEUE_MAX_BYTES, true);
	sbx_outq_list(&c->queue);
	if (sbx_http_submit(h, &c->job) < 0) {
		c->input = NULL; /* still the caller's */
		sbx_outq_unlist(&c->queue);
		atomic_store(&c->refs, 1);
		call_unref(c);
		return NULL;
	}
	return c;
}

/* The worker's end closes the stream once the notifications are out; the
 * server's stop, or its closing the queue, fails it. */
static enum sbx_event_state call_state(void *ctx)
{
	struct call *c = ctx;

	if (c->queue.evicted)
		return SBX_EVENTS_ABORTED;
	if (c->done)
		return SBX_EVENTS_DONE;
	return atomic_load(&c->http->stopping) ? SBX_EVENTS_ABORTED : SBX_EVENTS_OPEN;
}

/* The event stream of one request: notifications, then the response. A
 * client that leaves frees the connection, and call_free cancels the call. */
static ssize_t call_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct call *c = cls;
	struct sbx_sse_msg *last;
	int r;

	(void)pos;
	if (c->out.pos < c->out.pending.len)
		return (ssize_t)sbx_http_drain(&c->out.pending, &c->out.pos, buf, max);
	if (c->replied)
		return MHD_CONTENT_READER_END_OF_STREAM;
	switch (sbx_event_stream_next(&c->out)) {
	case SBX_EVENTS_MESSAGE:
		break;
	case SBX_EVENTS_KEEPALIVE:
		if (atomic_load(&c->http->stopping))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		break;
	case SBX_EVENTS_END:
		last = c->reply ? sbx_sse_msg_new("message", c->reply) : NULL;
		c->replied = true;
		if (!last)
			return MHD_CONTENT_READER_END_OF_STREAM;
		r = sbx_buf_append(&c->out.pending, last->text, last->len);
		free(last);
		if (r < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		break;
	default:
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	return (ssize_t)sbx_http_drain(&c->out.pending, &c->out.pos, buf, max);
}

/* The stream's end: the client has it all, or has gone (a call still
 * running is then cancelled: call_gone). */
static void call_free(void *cls)
{
	call_leave(cls);
}

/* Accept lists both application/json and text/event-stream (wildcards
 * count). */
bool sbx_streamable_accept_ok(const char *accept)
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
	const char *id;

	if (strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "OPTIONS") == 0) {
		/* No server->client stream on GET (yet): the client goes on without. */
		*ret = sbx_http_respond_405(rq, "GET, POST, DELETE");
		return true;
	}
	if (strcmp(rq->method, "POST") != 0)
		return false;
	if (!sbx_streamable_accept_ok(sbx_http_header(rq, "Accept"))) {
		*ret = sbx_http_respond_rpc_error(
		    rq, MHD_HTTP_NOT_ACCEPTABLE, -32000,
		    "Not Acceptable: Accept must list application/json and text/event-stream");
		return true;
	}
	if (sbx_http_refuse_non_json(rq, ret))
		return true;
	id = sbx_http_header(rq, SESSION_HEADER);
	if (!id || !*id) {
		/* Only an initialize comes without a session: a small body. */
		rq->sessionless = true;
		if (rq->body_max > SBX_HTTP_SESSIONLESS_BODY_MAX)
			rq->body_max = SBX_HTTP_SESSIONLESS_BODY_MAX;
		return false;
	}
	/* An unknown session is answered before its body is read. */
	/* Another tenant's session is not found either. */
	rq->session = sbx_session_table_find(rq->http->sessions, id, SBX_MCP_TRANSPORT_STREAMABLE,
					     rq->principal.tenant);
	if (!rq->session) {
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
						  "Session not found: initialize a new session");
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
	s = sbx_session_table_find(rq->http->sessions, id, SBX_MCP_TRANSPORT_STREAMABLE,
				   rq->principal.tenant);
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
	/* Removed from the table, the session is closed: its calls are
	 * cancelled. */
	return sbx_http_respond(rq, MHD_HTTP_OK, NULL, NULL, 0, NULL);
}

/* Answers with the request's event stream (C's reference moves to it). */
static enum MHD_Result respond_stream(struct sbx_http_request *rq, struct sbx_http_session *s,
				      struct call *c, bool created)
{
	struct MHD_Response *resp;

	c->out = (struct sbx_event_stream){.conn = rq->conn,
					   .out = &c->queue,
					   .state = call_state,
					   .ctx = c,
					   .keepalive_ms = rq->http->keepalive_ms};
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, call_read, c, call_free);
	if (!resp) {
		call_free(c);
		return MHD_NO;
	}
	sbx_outq_attach(&c->queue, rq->conn);
	/* From here on a client that takes no bytes is cut off. */
	sbx_http_stream_timeout(rq);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	if (created)
		MHD_add_response_header(resp, SESSION_HEADER, s->id);
	return sbx_http_queue(rq, MHD_HTTP_OK, resp);
}

static enum MHD_Result handle_post(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_http_session *s = NULL;
	sbx_mcp_input *in = NULL;
	_cleanup_free_ char *reply = NULL;
	const char *pv = sbx_http_header(rq, VERSION_HEADER);
	bool created = false, requests;
	struct call *c = NULL;
	enum MHD_Result ret;
	int r;

	if (!sbx_http_parse_input(rq, &in, &ret))
		return ret;
	if (rq->sessionless) {
		if (!sbx_mcp_input_is_initialize(in)) {
			sbx_mcp_input_free(in);
			return sbx_http_respond_rpc_error(
			    rq, MHD_HTTP_BAD_REQUEST, -32000,
			    "Bad Request: Mcp-Session-Id header is required");
		}
		r = sbx_session_table_add(h->sessions, h->mcp, SBX_MCP_TRANSPORT_STREAMABLE,
					  &rq->peer, &rq->principal, &s, &err);
		if (r < 0) {
			sbx_mcp_input_free(in);
			if (r == -EBUSY)
				return sbx_http_respond_rpc_busy(rq, err.msg);
			return sbx_http_respond_rpc_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
							  SBX_JSONRPC_INTERNAL_ERROR, err.msg);
		}
		created = true;
	} else {
		/* Found from the headers (sbx_streamable_check); its reference
		 * moves here. */
		s = SBX_TAKE(rq->session);
		if (!s) {
			sbx_mcp_input_free(in);
			return sbx_http_respond_rpc_error(
			    rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
			    "Session not found: initialize a new session");
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
	if (requests && sbx_mcp_input_may_block(in) &&
	    !sbx_http_session_call_begin(s, h->max_calls_per_session)) {
		/* The session runs its most: refused at once, never queued. */
		r = sbx_http_refuse_calls(rq, s, in, &reply);
		sbx_mcp_input_free(in);
	} else if (requests && sbx_mcp_input_may_block(in)) {
		bool stream, left = false;
		/* A tools/call may take minutes: no idle timeout while it runs. */
		sbx_http_set_timeout(rq, 0);
		c = call_start(h, s, in, rq->client);
		if (!c) {
			static const char *const busy[] = {"Retry-After", "1", NULL};
			static const char body[] =
			    "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,"
			    "\"message\":\"Server busy: too many tool calls in flight\"}}";
			sbx_http_session_call_end(s);
			sbx_mcp_input_free(in);
			sbx_http_set_timeout(rq, SBX_HTTP_IDLE_TIMEOUT_S);
			if (created)
				sbx_session_table_remove(h->sessions, s);
			sbx_http_session_unref(s);
			return sbx_http_respond(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						"application/json", body, sizeof(body) - 1, busy);
		}
		/* Until the reply or a notification; a client that leaves
		 * meanwhile cancels the call. */
		pthread_mutex_lock(&c->lock);
		while (!c->done && sbx_queue_empty(&c->queue.queue)) {
			if (c->queue.evicted ||
			    (sbx_cond_wait_slice(&c->cond, &c->lock, INT64_MAX) == ETIMEDOUT &&
			     sbx_http_peer_gone(rq->conn))) {
				left = true;
				break;
			}
		}
		stream = !left && !sbx_queue_empty(&c->queue.queue);
		reply = stream || left ? NULL : SBX_TAKE(c->reply);
		pthread_mutex_unlock(&c->lock);
		if (left) {
			call_leave(c);
			if (created)
				sbx_session_table_remove(h->sessions, s);
			sbx_http_session_unref(s);
			return MHD_NO;
		}
		if (stream) {
			ret = respond_stream(rq, s, c, created);
			sbx_http_session_unref(s);
			return ret;
		}
		call_leave(c);
		sbx_http_set_timeout(rq, SBX_HTTP_IDLE_TIMEOUT_S);
		r = 0;
	} else {
		/* Cheap: answered here, no worker, no wait. */
		r = sbx_mcp_session_run(s->mcp, in, NULL, &reply, &err);
	}
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
		ret = sbx_http_respond_json_take(rq, MHD_HTTP_OK, SBX_TAKE(reply),
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
	return sbx_http_respond_405(rq, "GET, POST, DELETE");
}
