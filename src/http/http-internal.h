/* SPDX-License-Identifier: MIT */
/*
 * What the HTTP front's files share: the server, one request's state, the
 * session table (src/http/session.c) and the route handlers (the transports and
 * the artifact route). Internal to src/.
 */
#ifndef SBX_HTTP_INTERNAL_H
#define SBX_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/queue.h"

/* 128 random bits, hex. */
#define SBX_SESSION_ID_LEN 32
/* Sessions alive at once (SSE streams + Streamable HTTP sessions). */
#define SBX_SESSIONS_MAX 4096
/* An SSE stream's outbound queue: past this the stream is ended. */
#define SBX_SSE_QUEUE_MAX_MSGS 1024
#define SBX_SSE_QUEUE_MAX_BYTES (64u * 1024 * 1024)
/* Idle SSE streams get a comment this often. */
#define SBX_SSE_KEEPALIVE_MS 15000
/* A waiting stream checks this often whether its client closed. */
#define SBX_PEER_CHECK_MS 500
/* Requests running on pooled worker threads (tools/call on either
 * transport), in all; per session it is server.max_calls_per_session. */
#define SBX_HTTP_WORKERS_MAX 256
/* A pooled worker idle this long ends. */
#define SBX_HTTP_WORKER_IDLE_MS 10000
/* Stack of a pooled worker (tools run there: engine calls, libcurl, tar). */
#define SBX_HTTP_STACK (512 * 1024)
/* Stack of a connection's thread: routing, JSON-RPC parse/serialise (json-c
 * nesting is bounded at depth 64) and the cheap methods; never a tool (an
 * artifact's engine calls run on its producer thread). The deepest use
 * measured over tests/test-http is 17 KiB; AddressSanitizer's redzones need
 * several times more. */
#if defined(__SANITIZE_ADDRESS__)
#define SBX_HTTP_CONN_STACK (512 * 1024)
#else
#define SBX_HTTP_CONN_STACK (128 * 1024)
#endif
/* libmicrohttpd's memory per connection (request line and headers, the
 * read buffer, the response headers); its default is 32 KiB, zeroed on
 * every keep-alive request. */
#define SBX_HTTP_CONN_MEMORY (16 * 1024)
/* Connections past server.max_connections still get a 503 up to this many
 * more; beyond, they are closed at accept. */
#define SBX_HTTP_OVERFLOW 64
/* File descriptors kept for everything but client connections (engine
 * sockets, artifact streams, files, log). */
#define SBX_HTTP_FD_RESERVE 256
/* A POST to /mcp without Mcp-Session-Id can only be an initialize: its
 * body is refused past this (or server.max_body when smaller). */
#define SBX_HTTP_SESSIONLESS_BODY_MAX (64 * 1024)
/* Request bodies being received or parsed hold at most this many bytes in
 * all (their buffers and what the parse is estimated to take), or
 * SBX_HTTP_BODY_BUDGET_BODIES times server.max_body when that is more; a
 * body that does not fit is answered 503 with Retry-After. */
#define SBX_HTTP_BODY_BUDGET_MIN ((size_t)32 * 1024 * 1024)
#define SBX_HTTP_BODY_BUDGET_BODIES 8
/* libmicrohttpd 0.9.75 cannot answer while a body streams in: a body refused
 * midway (chunked, without Content-Length) is read on and dropped, up to
 * this many bytes, then answered; past it the connection is closed. */
#define SBX_HTTP_DRAIN_MAX ((size_t)8 * 1024 * 1024)

/* ---- sessions (src/http/session.c) ---- */

struct sbx_sse_msg {
	struct sbx_queue_node node; /* counts for len bytes */
	size_t len;
	char text[]; /* one complete SSE frame */
};

/* One transport session: the MCP session plus what the transport needs. */
struct sbx_http_session {
	atomic_int refs;
	char id[SBX_SESSION_ID_LEN + 1];
	enum sbx_mcp_transport transport;
	sbx_mcp_session *mcp;

	/* The last request that named it, or call of it that ended
	 * (sbx_monotonic_ms): it is idle from then on. */
	_Atomic int64_t last_used_ms;
	bool in_table; /* under the table's lock */

	/* The SSE stream (SBX_MCP_TRANSPORT_SSE), under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sbx_queue queue; /* of struct sbx_sse_msg */
	bool closed;		/* the stream ended (or the server stops): queue nothing */
	int calls;		/* bodies with a tools/call running on workers (both transports) */
};

struct sbx_session_table;

int sbx_session_table_new(int64_t timeout_ms, struct sbx_session_table **ret_t);
struct sbx_session_table *sbx_session_table_free(struct sbx_session_table *t);
/* A new session with a fresh random id, in the table; returns a reference.
 * -EBUSY when SBX_SESSIONS_MAX are alive. */
int sbx_session_table_add(struct sbx_session_table *t, sbx_mcp *mcp,
			  enum sbx_mcp_transport transport, struct sbx_http_session **ret_s,
			  struct sbx_error *err);
/* A reference to the live session ID of TRANSPORT, NULL when unknown,
 * removed or expired. Marks it used. */
struct sbx_http_session *sbx_session_table_find(struct sbx_session_table *t, const char *id,
						enum sbx_mcp_transport transport);
/* Forgets S (its id is then unknown); the references held stay valid. A
 * session that leaves the table (removed, deleted, expired, the table
 * freed) is closed: sbx_mcp_session_close cancels its calls. */
void sbx_session_table_remove(struct sbx_session_table *t, struct sbx_http_session *s);
/* Closes every session's stream and wakes its readers, and cancels every
 * session's calls (server stop). */
void sbx_session_table_close_all(struct sbx_session_table *t);
/* S (an SSE session, its lock held) has been idle past server.session_timeout
 * with no call running: its stream is to end, and the session with it. */
bool sbx_session_idle_expired(const struct sbx_session_table *t, struct sbx_http_session *s);
/* Takes one of S's MAX call slots: false when all are taken. */
bool sbx_http_session_call_begin(struct sbx_http_session *s, int max);
/* Gives the slot back; S is idle from now on (a call's end counts as use). */
void sbx_http_session_call_end(struct sbx_http_session *s);
struct sbx_http_session *sbx_http_session_ref(struct sbx_http_session *s);
struct sbx_http_session *sbx_http_session_unref(struct sbx_http_session *s);
/* Waits on COND (a CLOCK_MONOTONIC one) for at most SBX_PEER_CHECK_MS and
 * not past UNTIL_MS (sbx_monotonic_ms time): the pthread_cond_timedwait
 * result. */
int sbx_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms);

/* ---- the server (src/http/server.c) ---- */

struct sbx_http {
	const struct sbx_settings *settings;
	sbx_mcp *mcp;
	sbx_manager *manager;
	struct MHD_Daemon *daemon;
	int listen_fd;
	uint16_t port;
	size_t max_body;
	int max_calls_per_session;
	/* Bytes held by request bodies being received or parsed, and the most. */
	atomic_size_t body_bytes;
	size_t body_budget;
	char *public_url;
	char *listen_host; /* as it appears in a Host header ("[::1]") */
	char *public_host; /* the public URL's host, "" when none */
	unsigned public_port;
	char *public_origin; /* scheme://host[:port] of the public URL */
	struct sbx_session_table *sessions;
	atomic_bool stopping;

	/* What GET /ready last logged, and when (ready_log). */
	pthread_mutex_t ready_log_lock;
	char ready_logged[SBX_ERROR_MSG_MAX];
	int64_t ready_logged_ms;

	/* Client connections: open now, and the most served (more get 503). */
	atomic_int connections;
	int max_connections;

	/* The worker pool: detached threads that take jobs off the queue and
	 * end after SBX_HTTP_WORKER_IDLE_MS without one. */
	pthread_mutex_t workers_lock;
	pthread_cond_t work_cond;    /* a job was queued, or stop */
	pthread_cond_t workers_cond; /* a thread ended */
	struct sbx_queue jobq;	     /* of struct sbx_http_job, bytes 0 */
	int jobs;		     /* jobs queued or running */
	int threads;		     /* pool threads alive */
	int idle;		     /* pool threads waiting for a job */
};

enum sbx_route {
	SBX_ROUTE_NONE,
	SBX_ROUTE_HEALTH,
	SBX_ROUTE_READY,
	SBX_ROUTE_SSE,
	SBX_ROUTE_MESSAGES,
	SBX_ROUTE_MCP,
	SBX_ROUTE_ARTIFACT,
};

/* One HTTP request in flight (MHD's per-connection pointer). */
struct sbx_http_request {
	struct sbx_http *http;
	struct MHD_Connection *conn;
	enum sbx_route route;
	const char *url;
	const char *method;
	const char *origin; /* an allowed Origin header, or NULL */
	/* The session the headers name, found before the body is read (a
	 * reference), or NULL. */
	struct sbx_http_session *session;
	bool sessionless; /* a POST to /mcp without Mcp-Session-Id (an initialize) */
	bool want_body;	  /* the route reads a body: else it is dropped unread */
	size_t body_max;  /* server.max_body, or less (see the transports' checks) */
	size_t length;	  /* Content-Length, 0 when none */
	struct sbx_buf body;
	size_t charged;	     /* bytes of the body budget this request holds */
	size_t dropped;	     /* body bytes read and dropped */
	unsigned refused;    /* the status a body refused midway gets (413, 503), or 0 */
	const char *refusal; /* ... and why */
};

/* Responses. Every helper adds the CORS headers for an allowed origin and
 * queues the response; the return value goes back to MHD. */
enum MHD_Result sbx_http_respond(struct sbx_http_request *rq, unsigned status,
				 const char *content_type, const char *body, size_t len,
				 const char *const *headers);
/* The same for an application/json BODY from malloc, which it takes (no
 * copy; freed also on failure). */
enum MHD_Result sbx_http_respond_json_take(struct sbx_http_request *rq, unsigned status, char *body,
					   const char *const *headers);
/* {"jsonrpc":"2.0","id":null,"error":{code,message}} */
enum MHD_Result sbx_http_respond_rpc_error(struct sbx_http_request *rq, unsigned status, int code,
					   const char *message);
/* A plain JSON error: {"error": message} */
enum MHD_Result sbx_http_respond_error(struct sbx_http_request *rq, unsigned status,
				       const char *message);
/* 405 with Allow: ALLOW and a JSON error. */
enum MHD_Result sbx_http_respond_405(struct sbx_http_request *rq, const char *allow);
enum MHD_Result sbx_http_queue(struct sbx_http_request *rq, unsigned status,
			       struct MHD_Response *resp);
/* Case-insensitive check that the media type of a Content-Type value is T. */
bool sbx_http_media_is(const char *value, const char *type);
/* The request's body as MCP input: true with *RET_IN; false when it is not
 * JSON-RPC (*RET: 400 with the JSON-RPC error, queued) or on -ENOMEM
 * (*RET: MHD_NO). */
bool sbx_http_parse_input(struct sbx_http_request *rq, sbx_mcp_input **ret_in,
			  enum MHD_Result *ret);
/* Answers a body whose tool calls S cannot run now (server.max_calls_per_session
 * reached): the JSON-RPC error for each of its requests, in *ret_reply (NULL
 * when none). 0 or -ENOMEM. */
int sbx_http_refuse_calls(struct sbx_http_request *rq, const sbx_mcp_input *in, char **ret_reply);
/* A POST body that is not application/json: answers 415 with a JSON-RPC
 * error into *RET and returns true; false (nothing sent) when it is. */
bool sbx_http_refuse_non_json(struct sbx_http_request *rq, enum MHD_Result *ret);
/* The request's header NAME, or NULL. */
const char *sbx_http_header(struct sbx_http_request *rq, const char *name);
/* Lifts the idle timeout while a request blocks for long (0 = none). */
void sbx_http_set_timeout(struct sbx_http_request *rq, unsigned seconds);
#define SBX_HTTP_IDLE_TIMEOUT_S 60

/* ---- routes ---- */

/* Header phase: may answer at once (a non-zero return says it did, and
 * *ret_result holds what goes back to MHD). */
bool sbx_sse_check(struct sbx_http_request *rq, enum MHD_Result *ret_result);
bool sbx_streamable_check(struct sbx_http_request *rq, enum MHD_Result *ret_result);
/* Full requests (the body has arrived). */
enum MHD_Result sbx_sse_open(struct sbx_http_request *rq);
enum MHD_Result sbx_sse_post(struct sbx_http_request *rq);
enum MHD_Result sbx_streamable_handle(struct sbx_http_request *rq);
enum MHD_Result sbx_artifact_handle(struct sbx_http_request *rq);
/* A job for the worker pool, embedded in the caller's struct. */
struct sbx_http_job {
	struct sbx_queue_node node;
	void (*fn)(struct sbx_http_job *job);
};
/* Runs JOB->fn(JOB) on a pooled worker (stack SBX_HTTP_STACK), reusing an
 * idle one or starting one. -EBUSY with SBX_HTTP_WORKERS_MAX jobs in flight
 * or while stopping, -EAGAIN when no thread can be started; JOB is then the
 * caller's again. The pool does not touch JOB once fn is called. */
int sbx_http_submit(struct sbx_http *h, struct sbx_http_job *job);
/* Stop: runs what is queued, then waits for every pool thread to end. */
void sbx_http_wait_workers(struct sbx_http *h);
/* True when the client of CONN closed the connection (or it failed). */
bool sbx_http_peer_gone(struct MHD_Connection *conn);

/* One SSE frame "event: EVENT\ndata: DATA\n\n" (DATA is one line). */
struct sbx_sse_msg *sbx_sse_msg_new(const char *event, const char *data);
/* Frees the message whose node is N (a sbx_queue_drain callback). */
void sbx_sse_msg_free_node(struct sbx_queue_node *n);
/* The comment an idle stream sends. */
#define SBX_SSE_KEEPALIVE_FRAME ": keepalive\n\n"
/* A content reader's output step: copies up to MAX bytes of B from *POS on
 * into BUF and advances *POS; once all of B is copied, empties B and sets
 * *POS to 0 for the next frame. Returns the count copied. */
size_t sbx_http_drain(struct sbx_buf *b, size_t *pos, char *buf, size_t max);

/* ---- event streams (src/http/event_stream.c) ---- */

/* Where an event stream stands: its state callback's answer, under its lock. */
enum sbx_event_state {
	SBX_EVENTS_OPEN,    /* more may come: send what is queued, else wait */
	SBX_EVENTS_CLOSED,  /* end now; what is queued is not sent */
	SBX_EVENTS_DONE,    /* send what is queued, then end */
	SBX_EVENTS_ABORTED, /* send what is queued, then fail */
};

/* What sbx_event_stream_next did. */
enum sbx_event_step {
	SBX_EVENTS_MESSAGE,   /* appended the next queued message */
	SBX_EVENTS_KEEPALIVE, /* appended SBX_SSE_KEEPALIVE_FRAME (idle SBX_SSE_KEEPALIVE_MS) */
	SBX_EVENTS_END,	      /* CLOSED, or DONE with the queue empty */
	SBX_EVENTS_FAIL,      /* the client left, ABORTED with the queue empty, or no memory */
};

/* One event stream on a connection: what it sends comes off QUEUE (of struct
 * sbx_sse_msg), which LOCK guards and whose changes (and the state's) are
 * broadcast on COND (a CLOCK_MONOTONIC one). */
struct sbx_event_stream {
	struct MHD_Connection *conn;
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	struct sbx_queue *queue;
	enum sbx_event_state (*state)(void *ctx); /* called with LOCK held */
	void *ctx;
	struct sbx_buf pending; /* the frame being sent */
	size_t pos;
};

/* Once the pending frame is sent: waits for the next one and appends it to
 * PENDING, a queued message, or the keepalive when none came for
 * SBX_SSE_KEEPALIVE_MS. Checks every SBX_PEER_CHECK_MS whether the client
 * closed. */
enum sbx_event_step sbx_event_stream_next(struct sbx_event_stream *s);

#endif
