/* SPDX-License-Identifier: MIT */
/*
 * The legacy HTTP+SSE transport (2024-11-05).
 *
 * GET /sse opens a session and its stream: first `event: endpoint` with the
 * relative URL to POST to, then `event: message` per message, and a
 * `: keepalive` comment when idle. The session ends with the stream.
 * POST /messages?session_id=ID answers 202 (an unknown ID 404 from the
 * query, before the body is read); a body with a tools/call runs on a
 * pooled worker, at most server.max_calls_per_session per session (past it
 * the JSON-RPC error that says so goes onto the stream at once), anything
 * else in the connection's thread before the 202.
 * The reply (and any notification) goes onto the session's queue, which the
 * stream's connection thread drains. The queue is bounded (by itself and
 * by server.max_queued over all streams: src/http/event_stream.c): a client
 * that does not read gets its stream ended, the queue freed at once, and so
 * does one that takes no bytes for server.stream_stall_timeout. A stream
 * whose client closed ends within SBX_PEER_CHECK_MS, and its session with
 * it; so does a stream whose session has been idle (no POST, no call
 * ending) past server.session_timeout with no call running. A session whose
 * stream ended for any reason is closed: the calls still running for it are
 * cancelled as by notifications/cancelled (sbx_mcp_session_close).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http-internal.h"
#include "sbx/common.h"

/* ---- the queue ---- */

static struct sbx_http_session *of_outq(struct sbx_outq *q)
{
	return (struct sbx_http_session *)(void *)((char *)q -
						   offsetof(struct sbx_http_session, out));
}

static void outq_ref(struct sbx_outq *q)
{
	sbx_http_session_ref(of_outq(q));
}

static void outq_unref(struct sbx_outq *q)
{
	sbx_http_session_unref(of_outq(q));
}

/* Closed by the server (full, or the biggest queue): the session leaves the
 * table, which cancels its calls, as when its client goes. */
static void outq_closed(struct sbx_outq *q)
{
	struct sbx_http_session *s = of_outq(q);

	sbx_session_table_remove(q->http->sessions, s);
}

static const struct sbx_outq_ops sse_outq_ops = {
    .ref = outq_ref, .unref = outq_unref, .closed = outq_closed};

/* Queues one frame. false when the stream is closed (the frame is
 * dropped). Ends the stream when the queue is full. */
static bool enqueue(struct sbx_http_session *s, const char *event, const char *data)
{
	struct sbx_sse_msg *m = sbx_sse_msg_new(event, data);

	return m && sbx_outq_push(&s->out, m);
}

static void notify(void *ctx, const char *json)
{
	enqueue(ctx, "message", json);
}

/* ---- the stream ---- */

struct sse_stream {
	struct sbx_http *http;
	struct sbx_http_session *session;
	struct sbx_event_stream out;
};

/* Closed, idle past the session timeout, or the server stops: the stream
 * ends, what is queued unsent. */
static enum sbx_event_state sse_state(void *ctx)
{
	struct sse_stream *st = ctx;

	return st->session->out.closed || atomic_load(&st->http->stopping) ||
		       sbx_session_idle_expired(st->http->sessions, st->session)
		   ? SBX_EVENTS_CLOSED
		   : SBX_EVENTS_OPEN;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse_stream *st = cls;

	(void)pos;
	if (st->out.pos >= st->out.pending.len) {
		switch (sbx_event_stream_next(&st->out)) {
		case SBX_EVENTS_END:
			return MHD_CONTENT_READER_END_OF_STREAM;
		case SBX_EVENTS_FAIL:
			return MHD_CONTENT_READER_END_WITH_ERROR;
		default:
			break;
		}
	}
	return (ssize_t)sbx_http_drain(&st->out.pending, &st->out.pos, buf, max);
}

/* The stream's end: the session leaves the table, which closes it (its
 * calls are cancelled; at the server's stop sbx_session_table_close_all has
 * done so). */
static void sse_free(void *cls)
{
	struct sse_stream *st = cls;
	struct sbx_http_session *s = st->session;

	sbx_session_table_remove(st->http->sessions, s);
	sbx_outq_detach(&s->out);
	sbx_outq_unlist(&s->out);
	sbx_outq_close(&s->out);
	sbx_http_session_unref(s);
	sbx_buf_release(&st->out.pending);
	free(st);
}

/* ---- routes ---- */

static const char *session_arg(struct sbx_http_request *rq)
{
	return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "session_id");
}

bool sbx_sse_check(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	struct sbx_http_session *s;
	const char *id;

	if (rq->route == SBX_ROUTE_SSE) {
		if (strcmp(rq->method, "GET") != 0) {
			*ret = sbx_http_respond_405(rq, "GET");
			return true;
		}
		return false;
	}
	if (strcmp(rq->method, "POST") != 0) {
		*ret = sbx_http_respond_405(rq, "POST");
		return true;
	}
	id = session_arg(rq);
	if (!id || !*id) {
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_BAD_REQUEST, -32000,
						  "Bad Request: session_id is required");
		return true;
	}
	/* An unknown session is answered before its body is read; a known one
	 * is kept for sbx_sse_post. */
	/* The session id is what authorizes a POST here (its GET /sse was
	 * authorized; the seed's clients send no key to /messages). */
	s = sbx_session_table_find(rq->http->sessions, id, SBX_MCP_TRANSPORT_SSE, NULL);
	if (!s) {
		*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
						  "Session not found: open a new stream on /sse");
		return true;
	}
	/* Its key may have been revoked since (the keys watch ends such a
	 * session within about a second; this closes that gap). */
	switch (sbx_auth_principal_live(rq->http->auth, &s->principal)) {
	case 0:
		break;
	case -EKEYREVOKED:
		sbx_session_table_remove(rq->http->sessions, s);
		sbx_http_session_unref(s);
		*ret = sbx_http_respond_rpc_error(
		    rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
		    "Session not found: the API key that opened it was revoked");
		return true;
	default:
		sbx_http_session_unref(s);
		*ret =
		    sbx_http_respond_error_with(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						"the credentials could not be checked now; retry",
						(const char *const[]){"Retry-After", "1", NULL});
		return true;
	}
	rq->session = s;
	return sbx_http_refuse_non_json(rq, ret);
}

enum MHD_Result sbx_sse_open(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sse_stream *st = calloc(1, sizeof(*st));
	struct MHD_Response *resp;
	int r;

	if (!st)
		return MHD_NO;
	st->http = h;
	r = sbx_session_table_add(h->sessions, h->mcp, SBX_MCP_TRANSPORT_SSE, &rq->peer,
				  &rq->principal, &st->session, &err);
	if (r < 0) {
		free(st);
		if (r == -EBUSY)
			return sbx_http_respond_rpc_busy(rq, err.msg);
		return sbx_http_respond_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE, err.msg);
	}
	/* Its id is not out yet: nothing is queued before this. */
	st->session->out.ops = &sse_outq_ops;
	sbx_outq_list(&st->session->out);
	sbx_outq_attach(&st->session->out, rq->conn);
	st->out = (struct sbx_event_stream){.conn = rq->conn,
					    .out = &st->session->out,
					    .state = sse_state,
					    .ctx = st,
					    .keepalive_ms = h->keepalive_ms};
	if (sbx_buf_appendf(&st->out.pending, "event: endpoint\ndata: /messages?session_id=%s\n\n",
			    st->session->id) < 0) {
		sse_free(st);
		return MHD_NO;
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, st, sse_free);
	if (!resp) {
		sse_free(st);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	/* The stream lives as long as the client keeps reading it. */
	sbx_http_stream_timeout(rq);
	return sbx_http_queue(rq, MHD_HTTP_OK, resp);
}

struct sse_job {
	struct sbx_http_job job; /* first */
	struct sbx_http_session *session;
	sbx_mcp_input *input;
	char client[INET6_ADDRSTRLEN]; /* the POST's address */
};

/* Runs IN, from CLIENT, on S, the reply onto the stream. */
static int run_body(struct sbx_http_session *s, sbx_mcp_input *in, const char *client)
{
	struct sbx_error err = SBX_ERROR_INIT;
	const struct sbx_mcp_notifier n = {.send = notify, .ctx = s, .client = client};
	char *reply = NULL;
	int r;

	r = sbx_mcp_session_run(s->mcp, in, &n, &reply, &err);
	if (r == 0 && reply)
		enqueue(s, "message", reply);
	free(reply);
	return r;
}

static void sse_worker(struct sbx_http_job *j)
{
	struct sse_job *job = (struct sse_job *)j;
	struct sbx_http_session *s = job->session;

	run_body(s, job->input, job->client);
	free(job);
	sbx_http_session_call_end(s);
	sbx_http_session_unref(s);
}

/* Starts a worker for IN on S in one of its call slots (taking IN on
 * success): -EBUSY when S runs server.max_calls_per_session bodies, else
 * what sbx_http_submit says. */
static int start_worker(struct sbx_http *h, struct sbx_http_session *s, sbx_mcp_input *in,
			const char *client)
{
	struct sse_job *job = calloc(1, sizeof(*job));
	int r;

	if (!job)
		return -ENOMEM;
	if (!sbx_http_session_call_begin(s, h->max_calls_per_session)) {
		free(job);
		return -EBUSY;
	}
	job->job.fn = sse_worker;
	job->session = sbx_http_session_ref(s);
	job->input = in;
	snprintf(job->client, sizeof(job->client), "%s", client);
	r = sbx_http_submit(h, &job->job);
	if (r < 0) {
		sbx_http_session_unref(s);
		free(job);
		sbx_http_session_call_end(s);
		/* The pool's -EBUSY is not the session's. */
		if (r == -EBUSY)
			r = -EAGAIN;
	}
	return r;
}

enum MHD_Result sbx_sse_post(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	struct sbx_http_session *s;
	sbx_mcp_input *in = NULL;
	enum MHD_Result ret;
	int r;

	if (!sbx_http_parse_input(rq, &in, &ret))
		return ret;
	/* Found from the query (sbx_sse_check); its reference moves here. */
	s = SBX_TAKE(rq->session);
	if (!s) {
		sbx_mcp_input_free(in);
		return sbx_http_respond_rpc_error(rq, MHD_HTTP_NOT_FOUND, SBX_MCP_SESSION_NOT_FOUND,
						  "Session not found: open a new stream on /sse");
	}
	if (!sbx_mcp_input_may_block(in)) {
		/* Notifications (notifications/cancelled above all) and cheap
		 * requests are instant and must not wait for a worker: a session
		 * busy with slow calls still gets to cancel them. */
		r = run_body(s, in, rq->client);
		sbx_http_session_unref(s);
		if (r < 0)
			return MHD_NO;
		return sbx_http_respond(rq, MHD_HTTP_ACCEPTED, "text/plain; charset=utf-8",
					"Accepted", strlen("Accepted"), NULL);
	}
	r = start_worker(h, s, in, rq->client);
	if (r == -EBUSY) {
		/* The session runs its most: refused at once, never queued; the
		 * error goes where the reply would have gone. */
		char *reply = NULL;
		r = sbx_http_refuse_calls(rq, s, in, &reply);
		if (r == 0 && reply)
			enqueue(s, "message", reply);
		free(reply);
		if (r == 0)
			r = 1;
	}
	sbx_http_session_unref(s);
	if (r < 0) {
		sbx_mcp_input_free(in);
		if (r == -ENOMEM)
			return MHD_NO;
		return sbx_http_respond_rpc_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						  SBX_JSONRPC_INTERNAL_ERROR,
						  "Server busy: too many tool calls in flight");
	}
	if (r > 0)
		sbx_mcp_input_free(in);
	return sbx_http_respond(rq, MHD_HTTP_ACCEPTED, "text/plain; charset=utf-8", "Accepted",
				strlen("Accepted"), NULL);
}
