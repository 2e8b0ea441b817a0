/* SPDX-License-Identifier: MIT */
/*
 * What the HTTP front's files share: the server, one request's state, the
 * session table (src/session.c) and the route handlers (the transports and
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
#include "sbx/http.h"
#include "sbx/mcp.h"

/* 128 random bits, hex. */
#define SBX_SESSION_ID_LEN 32
/* Sessions alive at once (SSE streams + Streamable HTTP sessions). */
#define SBX_SESSIONS_MAX 1024
/* An SSE stream's outbound queue: past this the stream is ended. */
#define SBX_SSE_QUEUE_MAX_MSGS 1024
#define SBX_SSE_QUEUE_MAX_BYTES (64u * 1024 * 1024)
/* Idle SSE streams get a comment this often. */
#define SBX_SSE_KEEPALIVE_MS 15000
/* Requests running in background threads: per SSE session, and in all
 * (SSE bodies and Streamable HTTP requests). */
#define SBX_SSE_WORKERS_PER_SESSION 16
#define SBX_HTTP_WORKERS_MAX 256
/* Stack of every thread the server runs requests in. */
#define SBX_HTTP_STACK (512 * 1024)

/* ---- sessions (src/session.c) ---- */

struct sbx_sse_msg {
	struct sbx_sse_msg *next;
	size_t len;
	char text[]; /* one complete SSE frame */
};

/* One transport session: the MCP session plus what the transport needs. */
struct sbx_http_session {
	atomic_int refs;
	char id[SBX_SESSION_ID_LEN + 1];
	enum sbx_mcp_transport transport;
	sbx_mcp_session *mcp;

	/* Under the table's lock. */
	int64_t last_used_ms;
	bool in_table;

	/* The SSE stream (SBX_MCP_TRANSPORT_SSE), under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sbx_sse_msg *head, *tail;
	size_t queued_msgs, queued_bytes;
	bool closed; /* the stream ended (or the server stops): queue nothing */
	int workers; /* POST bodies running in the background */
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
/* Forgets S (its id is then unknown); the references held stay valid. */
void sbx_session_table_remove(struct sbx_session_table *t, struct sbx_http_session *s);
/* Closes every session's stream and wakes its readers (server stop). */
void sbx_session_table_close_all(struct sbx_session_table *t);
struct sbx_http_session *sbx_http_session_ref(struct sbx_http_session *s);
struct sbx_http_session *sbx_http_session_unref(struct sbx_http_session *s);
int64_t sbx_monotonic_ms(void);

/* ---- the server (src/http.c) ---- */

struct sbx_http {
	const struct sbx_settings *settings;
	sbx_mcp *mcp;
	sbx_manager *manager;
	struct MHD_Daemon *daemon;
	int listen_fd;
	uint16_t port;
	size_t max_body;
	char *public_url;
	char *listen_host; /* as it appears in a Host header ("[::1]") */
	char *public_host; /* the public URL's host, "" when none */
	unsigned public_port;
	char *public_origin; /* scheme://host[:port] of the public URL */
	struct sbx_session_table *sessions;
	atomic_bool stopping;

	/* Background workers (detached), counted so stop can wait. */
	pthread_mutex_t workers_lock;
	pthread_cond_t workers_cond;
	int workers;
};

enum sbx_route {
	SBX_ROUTE_NONE,
	SBX_ROUTE_HEALTH,
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
	struct sbx_buf body;
	bool too_large;
};

/* Responses. Every helper adds the CORS headers for an allowed origin and
 * queues the response; the return value goes back to MHD. */
enum MHD_Result sbx_http_respond(struct sbx_http_request *rq, unsigned status,
				 const char *content_type, const char *body, size_t len,
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
/* Background workers: begin is -EBUSY over SBX_HTTP_WORKERS_MAX or while
 * stopping; end wakes sbx_http_wait_workers (server stop). */
int sbx_http_worker_begin(struct sbx_http *h);
void sbx_http_worker_end(struct sbx_http *h);
void sbx_http_wait_workers(struct sbx_http *h);
/* Starts a detached thread with the server's stack size. */
int sbx_http_spawn(void *(*fn)(void *), void *arg);

/* One SSE frame "event: EVENT\ndata: DATA\n\n" (DATA is one line). */
struct sbx_sse_msg *sbx_sse_msg_new(const char *event, const char *data);

#endif
