/* SPDX-License-Identifier: MIT */
/*
 * What the HTTP front's files share: the server, one request's state, the
 * session table (src/http/session.c) and the route handlers (the transports and
 * the artifact route). Internal to src/.
 */
#ifndef SBX_HTTP_INTERNAL_H
#define SBX_HTTP_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "queue.h"
#include "sbx/tenant_count.h"

/* 128 random bits, hex. The first SBX_SESSION_ID_INDEX characters find
 * the session (compared as they come); the rest are its secret, compared in
 * constant time (sbx_crypto_equal). */
#define SBX_SESSION_ID_LEN 32
#define SBX_SESSION_ID_INDEX 8
/* An SSE stream's outbound queue: past this the stream is ended. */
#define SBX_SSE_QUEUE_MAX_MSGS 1024
#define SBX_SSE_QUEUE_MAX_BYTES (64u * 1024 * 1024)
/* Idle event streams get a comment this often, or twice per
 * server.stream_stall_timeout when that is shorter (a client that reads
 * takes bytes well within it). */
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
 * artifact's open and reads, the engine's stream alone, run there too). The deepest use
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
/* Connections past a connection limit still get a 503 up to this many more
 * at once, of which one client address holds at most
 * SBX_HTTP_OVERFLOW_PER_PEER; beyond, they are closed at accept. Such a
 * connection has SBX_HTTP_OVER_TIMEOUT_S (of silence) to send its request. */
#define SBX_HTTP_OVERFLOW 256
#define SBX_HTTP_OVERFLOW_PER_PEER 64
/* 2 s was too short on a loaded machine: a Node client opening 560
 * connections at once wrote some requests later than that, and those were
 * closed without their 503. The band bounds what waiting holds. */
#define SBX_HTTP_OVER_TIMEOUT_S 10
/* An idle connection is closed to let another in only after this long
 * idle (its client may be reusing it right now). */
#define SBX_HTTP_EVICT_IDLE_MS 1000
/* A request's headers may take this long after its first line before its
 * connection can be closed to let another in (connections.c). */
#define SBX_HTTP_HEAD_MS 10000
/* The lingering close (src/http/linger.c): sockets at once, and their
 * bounds in time (in all, and without a byte) and bytes. */
#define SBX_HTTP_LINGER_MAX 128
/* As many as one address may have waiting for a 503 in the overflow band
 * (at 8, 40 of a flood's 48 refusals were reset before their client read
 * them). */
#define SBX_HTTP_LINGER_PER_PEER SBX_HTTP_OVERFLOW_PER_PEER
#define SBX_HTTP_LINGER_MS 30000
#define SBX_HTTP_LINGER_QUIET_MS 5000
#define SBX_HTTP_LINGER_BYTES ((size_t)64 * 1024 * 1024)
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
/* One client address holds at most this share of the body budget (1/N), and
 * never less than server.max_body: one body always fits an idle client's. */
#define SBX_HTTP_BODY_PEER_SHARE 4
/* libmicrohttpd 0.9.75 cannot answer while a body streams in: a body refused
 * midway (chunked, without Content-Length) is read on and dropped, up to
 * this many bytes, then answered; past it the connection is closed. */
#define SBX_HTTP_DRAIN_MAX ((size_t)8 * 1024 * 1024)

/* ---- client addresses (src/http/peer.c) ---- */

/* A client as the per-client limits count it: its IPv4 address, or the /64
 * of its IPv6 one (an IPv4-mapped IPv6 address is its IPv4 address). */
struct sbx_peer {
	unsigned char b[16];
};

/* The peer of ADDR (NULL: all zero). */
void sbx_peer_of(const struct sockaddr *addr, struct sbx_peer *ret);
/* A hash of P, for tables by peer. */
size_t sbx_peer_hash(const struct sbx_peer *p);
/* ADDR as text ("192.0.2.7", "2001:db8::1"; an IPv4-mapped address as its
 * IPv4 one; "" for NULL or another family) into BUF, INET6_ADDRSTRLEN bytes. */
void sbx_client_text(const struct sockaddr *addr, char *buf, size_t size);

/* ---- client connections (src/http/connections.c) ---- */

/* Counts each address's connections, tells idle ones from busy ones and
 * admits a new connection at a limit by closing the least recently used
 * idle one (of its address at server.max_connections_per_ip, of any at
 * server.max_connections); with none idle the newcomer is over the limit
 * (answered 503). PER_PEER 0: no per-address limit. */
struct sbx_conn_table;
struct sbx_http;
int sbx_conn_table_new(int max, int per_peer, struct sbx_conn_table **ret);
struct sbx_conn_table *sbx_conn_table_free(struct sbx_conn_table *t);
/* libmicrohttpd's accept policy for a client at ADDR: false past the
 * overflow band or ADDR's share of it. */
bool sbx_conn_accept_ok(struct sbx_http *h, const struct sockaddr *addr);
/* MHD_CONNECTION_NOTIFY_STARTED / _CLOSED: the record in *SOCKET_CONTEXT.
 * A closed connection marked by sbx_conn_set_linger goes to the lingering
 * close (a copy of its descriptor). */
void sbx_conn_started(struct sbx_http *h, struct MHD_Connection *conn, void **socket_context);
void sbx_conn_closed(struct sbx_http *h, void **socket_context);
/* The setting CONN is past ("server.max_connections_per_ip", ...), or
 * NULL when it was admitted. */
const char *sbx_conn_over_limit(struct MHD_Connection *conn);
/* A request on CONN began (its headers came) / ended: it is busy between.
 * False when CONN was closed to let another in meanwhile: the request is
 * dropped (its answer could not be sent). */
bool sbx_conn_request_begin(struct sbx_http *h, struct MHD_Connection *conn);
void sbx_conn_request_end(struct sbx_http *h, struct MHD_Connection *conn);
/* CONN's request has all its headers in (the access handler's first call):
 * from here it is busy until it ends, whatever it takes. False when the
 * connection was closed meanwhile to let another in (its headers took too
 * long): the request must not run, no answer can go out. */
bool sbx_conn_headers_in(struct sbx_http *h, struct MHD_Connection *conn);
/* CONN was answered before its request's body was read: it is not reused,
 * and it lingers when it closes. */
void sbx_conn_set_linger(struct sbx_http *h, struct MHD_Connection *conn);
struct sbx_conn_counts {
	int admitted, over;
	uint64_t evicted, refused;
};
void sbx_conn_counts(struct sbx_http *h, struct sbx_conn_counts *ret);

/* ---- the lingering close (src/http/linger.c) ---- */

struct sbx_linger;
/* Starts its thread. -ENOMEM, or pthread_create's error. */
int sbx_linger_new(struct sbx_linger **ret);
/* Takes FD (a client socket answered and done with, of the client PEER):
 * what its client still sends is read and dropped, within the bounds, then
 * it is closed. Closed at once when SBX_HTTP_LINGER_MAX linger already, or
 * SBX_HTTP_LINGER_PER_PEER of PEER's. */
void sbx_linger_add(struct sbx_linger *l, int fd, const struct sbx_peer *peer);
/* Sockets lingering now. */
int sbx_linger_count(struct sbx_linger *l);
/* Stops the thread and closes every socket. */
struct sbx_linger *sbx_linger_free(struct sbx_linger *l);

/* ---- who calls (src/http/auth_gate.c) ---- */

/* Failed checks of credentials from one peer (SBX_AUTH_FAIL_MAX within
 * SBX_AUTH_FAIL_WINDOW_MS from its first) make its further failures on
 * /mcp, /sse and /metrics 429 with Retry-After until the window has passed
 * (a valid key or token is still accepted); the table keeps
 * SBX_AUTH_FAIL_PEERS peers, the least recently failed one evicted. */
#define SBX_AUTH_FAIL_MAX 10
#define SBX_AUTH_FAIL_WINDOW_MS 60000
#define SBX_AUTH_FAIL_PEERS 1024
/* auth_failure lines in the audit log: at most this many a second in all;
 * a throttled peer's 429s: one line per window (its first). */
#define SBX_AUTH_AUDIT_PER_S 50

struct sbx_auth_failures;
int sbx_auth_failures_new(struct sbx_auth_failures **ret);
struct sbx_auth_failures *sbx_auth_failures_free(struct sbx_auth_failures *f);

/* The tenant "default", nothing checked (METHOD_NONE). */
void sbx_http_principal_default(struct sbx_principal *p);
struct sbx_http_request;
/* An auth_failure line in the audit log for RQ, refused as WHY says, or
 * throttled when WHY is NULL. */
void sbx_http_audit_auth_failure(struct sbx_http_request *rq, const struct sbx_auth_refusal *why);
/* RQ's credentials were refused (WHY): true when its peer is throttled
 * now, with the 429 in *RET (the first of a window in the audit log);
 * else its failure is counted and written to the audit log, and the
 * caller answers it. */
bool sbx_http_auth_failed(struct sbx_http_request *rq, const struct sbx_auth_refusal *why,
			  enum MHD_Result *ret);
/* Decides who RQ is from its headers (its first call, before any of a body
 * is read): for /mcp (every method) and /sse the credentials go through
 * sbx_auth_check into rq->principal; a refusal is answered here (401 with
 * WWW-Authenticate, or 429 with Retry-After for a peer past
 * SBX_AUTH_FAIL_MAX failures) and returns true with *RET. Other routes keep
 * the default principal (/messages acts for its session's tenant). */
bool sbx_http_auth_gate(struct sbx_http_request *rq, enum MHD_Result *ret);

/* ---- outbound event queues (src/http/event_stream.c) ---- */

struct sbx_sse_msg {
	struct sbx_queue_node node; /* counts for len bytes */
	size_t len;
	char text[]; /* one complete SSE frame */
};

/* One SSE frame "event: EVENT\ndata: DATA\n\n" (DATA is one line). */
struct sbx_sse_msg *sbx_sse_msg_new(const char *event, const char *data);
/* Frees the message whose node is N (a sbx_queue_drain callback). */
void sbx_sse_msg_free_node(struct sbx_queue_node *n);

struct sbx_outq;

/* What an outbound queue's owner does for it. */
struct sbx_outq_ops {
	/* A reference to the owner, taken while the queue is listed. */
	void (*ref)(struct sbx_outq *q);
	void (*unref)(struct sbx_outq *q);
	/* Q was closed by the server (full, or the biggest over
	 * server.max_queued): its client counts as gone, its calls are to be
	 * cancelled. Called once, no lock held, the caller holding a reference. */
	void (*closed)(struct sbx_outq *q);
};

/* The outbound queue of one event stream (an SSE session's, a Streamable
 * HTTP call's). Its bytes count in the server's queued bytes, at most
 * server.max_queued in all: past that the biggest listed queue is closed.
 * Past its own bounds a queue either drops the message (DROP_WHEN_FULL) or
 * is closed. A closed queue is drained at once and takes nothing more. */
struct sbx_outq {
	struct sbx_http *http;
	pthread_mutex_t *lock; /* the owner's: guards queue, closed and fd */
	pthread_cond_t *cond;  /* the owner's (CLOCK_MONOTONIC): broadcast on changes */
	const struct sbx_outq_ops *ops;
	struct sbx_queue queue; /* of struct sbx_sse_msg */
	size_t max_msgs, max_bytes;
	bool drop_when_full;
	bool closed;
	bool evicted;	     /* closed by the server (ops->closed was called) */
	int fd;		     /* the stream's socket while it is on it, else -1 */
	atomic_size_t bytes; /* queue.bytes, read without the lock */
	/* In the server's list (under its outq_lock). */
	struct sbx_outq *prev, *next;
	bool listed;
};

/* Sets Q up empty and open, not listed. */
void sbx_outq_init(struct sbx_outq *q, struct sbx_http *h, pthread_mutex_t *lock,
		   pthread_cond_t *cond, const struct sbx_outq_ops *ops, size_t max_msgs,
		   size_t max_bytes, bool drop_when_full);
/* Lists Q among the queues server.max_queued may close (the owner holds a
 * reference until sbx_outq_unlist); unlists it. */
void sbx_outq_list(struct sbx_outq *q);
void sbx_outq_unlist(struct sbx_outq *q);
/* Queues M (taken: freed when not queued). False when Q is closed, when it
 * was full, or when it was closed now to keep server.max_queued. */
bool sbx_outq_push(struct sbx_outq *q, struct sbx_sse_msg *m);
/* The next message, NULL when none. Lock held. */
struct sbx_sse_msg *sbx_outq_pop_locked(struct sbx_outq *q);
/* Closes Q: drains it and wakes its waiters (its stream then ends; the
 * connection may be kept alive). Lock held. Idempotent. */
void sbx_outq_close_locked(struct sbx_outq *q);
/* The same, taking the lock. */
void sbx_outq_close(struct sbx_outq *q);
/* The same, and its stream's socket (while attached) is shut down: the
 * connection ends with it (a session ended for its client's sake, e.g. its
 * key revoked). Takes the lock. */
void sbx_outq_cut(struct sbx_outq *q);
/* Q's stream is on CONN (its socket is shut down when Q is closed by the
 * server), until sbx_outq_detach (the stream's free callback: the socket is
 * not closed before it). */
void sbx_outq_attach(struct sbx_outq *q, struct MHD_Connection *conn);
void sbx_outq_detach(struct sbx_outq *q);

/* ---- sessions (src/http/session.c) ---- */

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

	struct sbx_peer peer; /* the client that opened it */
	/* The tenant it acts for (its MCP session's owner): a request naming it
	 * with another tenant's credentials finds no session. */
	char tenant[SBX_TENANT_MAX + 1];
	/* Who opened it: the session ends when that key is revoked. */
	struct sbx_principal principal;

	/* The SSE stream (SBX_MCP_TRANSPORT_SSE), under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Closed when the stream ended (or the server stops): queue nothing. */
	struct sbx_outq out;
	int calls; /* bodies with a tools/call running on workers (both transports) */
};

struct sbx_session_table;

/* A table of at most server.max_sessions, server.max_sessions_per_ip of one
 * peer and server.max_sessions_per_tenant of one API key tenant (0: no
 * limit), for H. */
int sbx_session_table_new(struct sbx_http *h, struct sbx_session_table **ret_t);
struct sbx_session_table *sbx_session_table_free(struct sbx_session_table *t);
/* A new session of PEER for PRINCIPAL (its tenant and limits; NULL: the
 * default tenant, no limits) with a fresh random id, in the table;
 * returns a reference. When the table, or PEER's or the tenant's share of
 * it, is full, the least recently used idle Streamable HTTP session (of
 * PEER, of the tenant, for their shares; for the whole table the tenant's
 * own first) is evicted (closed as if expired); -EBUSY with a message
 * naming the limit when none is idle (every one runs a call or is an open
 * SSE stream). */
int sbx_session_table_add(struct sbx_session_table *t, sbx_mcp *mcp,
			  enum sbx_mcp_transport transport, const struct sbx_peer *peer,
			  const struct sbx_principal *principal, struct sbx_http_session **ret_s,
			  struct sbx_error *err);
/* A reference to the live session ID of TRANSPORT, NULL when unknown,
 * removed or expired, or when TENANT (NULL: any) is not its tenant: another
 * tenant's session is not found. Marks it used (only when found). */
struct sbx_http_session *sbx_session_table_find(struct sbx_session_table *t, const char *id,
						enum sbx_mcp_transport transport,
						const char *tenant);
/* Forgets S (its id is then unknown); the references held stay valid. A
 * session that leaves the table (removed, deleted, expired, the table
 * freed) is closed: sbx_mcp_session_close cancels its calls. */
void sbx_session_table_remove(struct sbx_session_table *t, struct sbx_http_session *s);
/* Sessions of TRANSPORT in the table now (expired ones not swept yet left
 * out). */
size_t sbx_session_table_count(struct sbx_session_table *t, enum sbx_mcp_transport transport);
/* Closes every session's stream and wakes its readers, and cancels every
 * session's calls (server stop). */
void sbx_session_table_close_all(struct sbx_session_table *t);
/* Ends every session whose key AUTH no longer accepts
 * (sbx_auth_principal_live: -EKEYREVOKED): out of the table, its stream
 * closed, its calls cancelled; the others get their key's limits as the
 * keys file has them now. Returns how many ended. */
size_t sbx_session_table_end_revoked(struct sbx_session_table *t, sbx_auth *auth);
/* S (an SSE session, its lock held) has been idle past server.session_timeout
 * with no call running: its stream is to end, and the session with it. */
bool sbx_session_idle_expired(const struct sbx_session_table *t, struct sbx_http_session *s);
/* Takes one of S's MAX call slots: false when all are taken. */
bool sbx_http_session_call_begin(struct sbx_http_session *s, int max);
/* Gives the slot back; S is idle from now on (a call's end counts as use). */
void sbx_http_session_call_end(struct sbx_http_session *s);
/* Answers a body whose tool calls S cannot run now (server.max_calls_per_session
 * reached): the JSON-RPC error for each of its requests, in *ret_reply (NULL
 * when none); each tools/call is logged as refused (session_calls). 0 or
 * -ENOMEM. */
int sbx_http_refuse_calls(struct sbx_http_request *rq, struct sbx_http_session *s,
			  const sbx_mcp_input *in, char **ret_reply);
struct sbx_http_session *sbx_http_session_ref(struct sbx_http_session *s);
struct sbx_http_session *sbx_http_session_unref(struct sbx_http_session *s);

/* ---- the server (src/http/server.c) ---- */

struct peer_bytes;

struct sbx_http {
	const struct sbx_settings *settings;
	sbx_mcp *mcp;
	sbx_manager *manager;
	struct MHD_Daemon *daemon;
	int listen_fd;
	uint16_t port;
	size_t max_body;
	int max_calls_per_session;
	/* Bytes held by request bodies being received or parsed, and the most;
	 * per peer (a hash of struct peer_bytes, under peers_lock), and the
	 * most one peer holds. */
	atomic_size_t body_bytes;
	size_t body_budget;
	pthread_mutex_t peers_lock;
	struct peer_bytes **peers;
	size_t peer_share;
	/* A body's deadline: body_timeout_ms plus a second per body_min_rate. */
	int64_t body_timeout_ms;
	int64_t body_min_rate;
	/* Event streams: their idle timeout (whole seconds of
	 * server.stream_stall_timeout) and keepalive interval. */
	unsigned stream_timeout_s;
	int64_t keepalive_ms;
	/* The bytes in outbound queues, the most, and the listed queues. */
	atomic_size_t queued;
	size_t queued_max;
	pthread_mutex_t outq_lock;
	struct sbx_outq *outqs;
	char *public_url;
	char *listen_host; /* as it appears in a Host header ("[::1]") */
	char *public_host; /* the public URL's host, "" when none */
	unsigned public_port;
	char *public_origin; /* scheme://host[:port] of the public URL */
	struct sbx_session_table *sessions;
	atomic_bool stopping;
	/* Who calls (NULL: nothing checked) and the peers that failed to say. */
	sbx_auth *auth;
	sbx_audit *audit;	      /* logs refused authentications; may be NULL */
	const sbx_link_key *link_key; /* the MCP layer's: checks artifact links */
	struct sbx_auth_failures *auth_failures;
	/* The keys watch (keys_watch in server.c): about once a second it has
	 * the keys file re-read and ends the sessions of revoked keys. */
	pthread_t keys_thread;
	bool keys_thread_started;
	pthread_mutex_t keys_lock;
	pthread_cond_t keys_cond; /* CLOCK_MONOTONIC; signalled at stop */
	/* auth_failure lines written this second, and those dropped
	 * (sbx_http_audit_auth_failure) */
	pthread_mutex_t audit_lock;
	int64_t audit_sec;
	unsigned audit_lines;
	uint64_t audit_dropped;

	/* What GET /ready last logged, and when (ready_log). */
	pthread_mutex_t ready_log_lock;
	char ready_logged[SBX_ERROR_MSG_MAX];
	int64_t ready_logged_ms;

	/* Artifact downloads running (GET /artifacts/...), by client address
	 * (src/http/artifact_route.c): server.max_downloads in all,
	 * server.max_downloads_per_ip of one. */
	sbx_tenant_count *downloads;
	/* The bodies of those downloads, watched while they wait on their
	 * clients (src/http/artifact_route.c: sbx_artifact_watch_start). */
	struct sbx_artifact_watch *artifact_watch;

	/* Client connections: admitted now (a copy of the table's count, for
	 * reading without its lock), the most served, the table (by address,
	 * idle or busy) and the lingering close. */
	atomic_int connections;
	int max_connections;
	struct sbx_conn_table *conns;
	struct sbx_linger *linger;

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
	SBX_ROUTE_METRICS,
	SBX_ROUTE_UI,
};

/* The checks of a request's line and headers, pure (the fuzzers call them).
 * sbx_http_split_host_port splits "host[:port]" / "[v6][:port]" of LEN
 * bytes: the host's length in *RET_HOSTLEN and the port (0 = none, -1 =
 * malformed). sbx_http_host_allowed: HOST (the header, may be NULL) names
 * this server. sbx_http_origin_allowed: ORIGIN is one H serves. Both read
 * only H's settings, port, listen_host, public_host, public_port and
 * public_origin, which sbx_http_parse_public_url fills from public_url
 * (-EINVAL, -ENOMEM). sbx_http_route_of: the route of a request path.
 * sbx_streamable_accept_ok (src/http/transport_streamable.c): an Accept
 * value (may be NULL) lists application/json and text/event-stream. */
long sbx_http_split_host_port(const char *s, size_t len, size_t *ret_hostlen);
bool sbx_http_host_allowed(struct sbx_http *h, const char *host);
bool sbx_http_origin_allowed(struct sbx_http *h, const char *origin);
int sbx_http_parse_public_url(struct sbx_http *h);
enum sbx_route sbx_http_route_of(const char *url);
bool sbx_streamable_accept_ok(const char *accept);

/* One HTTP request in flight (MHD's per-connection pointer). */
struct sbx_http_request {
	struct sbx_http *http;
	struct MHD_Connection *conn;
	enum sbx_route route;
	struct sbx_peer peer;
	char client[INET6_ADDRSTRLEN];	/* its address as text (the audit log's) */
	struct sbx_principal principal; /* who it is (sbx_http_auth_gate) */
	int64_t start_ms;		/* the headers came (sbx_monotonic_ms) */
	size_t received;		/* body bytes received */
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
	bool peer_busy;	     /* a 503 for the peer's share, not the whole budget */
	size_t dropped;	     /* body bytes read and dropped */
	unsigned refused;    /* the status a body refused midway gets (413, 503), or 0 */
	const char *refusal; /* ... and why */
	bool early;	     /* in its first callback: its body not yet read */
	bool has_body;	     /* it announced one (Content-Length > 0 or chunked) */
	bool counted;	     /* sbx_conn_request_begin was called for it */
	bool evicted;	     /* ... and said its connection had been closed */
};

/* ---- a request's headers, timeout and answer (src/http/request.c) ---- */

/* The request's header NAME, or NULL. */
const char *sbx_http_header(struct sbx_http_request *rq, const char *name);
/* Lifts the idle timeout while a request blocks for long (0 = none). */
void sbx_http_set_timeout(struct sbx_http_request *rq, unsigned seconds);
#define SBX_HTTP_IDLE_TIMEOUT_S 60
/* Puts RQ's connection into event-stream mode: the idle timeout becomes
 * server.stream_stall_timeout (a client that takes no bytes that long is
 * cut off; keepalives come twice as often). */
void sbx_http_stream_timeout(struct sbx_http_request *rq);

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
/* 503 + Retry-After: 1 with the JSON-RPC error MESSAGE (code -32000). */
enum MHD_Result sbx_http_respond_rpc_busy(struct sbx_http_request *rq, const char *message);
/* A plain JSON error: {"error": message}; _with adds HEADERS (pairs, NULL-ended). */
enum MHD_Result sbx_http_respond_error(struct sbx_http_request *rq, unsigned status,
				       const char *message);
enum MHD_Result sbx_http_respond_error_with(struct sbx_http_request *rq, unsigned status,
					    const char *message, const char *const *headers);
/* 405 with Allow: ALLOW and a JSON error. */
enum MHD_Result sbx_http_respond_405(struct sbx_http_request *rq, const char *allow);
enum MHD_Result sbx_http_queue(struct sbx_http_request *rq, unsigned status,
			       struct MHD_Response *resp);

/* ---- request bodies (src/http/body.c) ---- */

/* The table of what each peer holds of the body budget (empty), NULL
 * without memory; freed with what it holds. */
struct peer_bytes **sbx_body_peers_new(void);
void sbx_body_peers_free(struct peer_bytes **peers);
/* What peer P holds of the body budget now. */
size_t sbx_body_peer_held(struct sbx_http *h, const struct sbx_peer *p);
/* Charges RQ's body for N more bytes before its buffer grows to hold them
 * (with a Content-Length all of it at once): false when the budget (or
 * the peer's share) has no room, or no memory. */
bool sbx_body_charge(struct sbx_http_request *rq, size_t n);
/* Gives back what RQ holds of the budget. */
void sbx_body_release(struct sbx_http_request *rq);
/* Whether the body of RQ keeps pace (server.body_timeout plus a second per
 * server.body_min_rate bytes received since its headers). */
bool sbx_body_in_time(struct sbx_http_request *rq);
/* 503 + Retry-After: the budget (or rq->peer_busy: the peer's share) has
 * no room for this body now. */
enum MHD_Result sbx_body_respond_busy(struct sbx_http_request *rq);
/* 413 for a body over rq->body_max. */
enum MHD_Result sbx_body_respond_too_large(struct sbx_http_request *rq);
/* The request's body as MCP input: true with *RET_IN; false when it is not
 * JSON-RPC (*RET: 400 with the JSON-RPC error, queued) or on -ENOMEM
 * (*RET: MHD_NO). */
bool sbx_http_parse_input(struct sbx_http_request *rq, sbx_mcp_input **ret_in,
			  enum MHD_Result *ret);
/* A POST body that is not application/json: answers 415 with a JSON-RPC
 * error into *RET and returns true; false (nothing sent) when it is. */
bool sbx_http_refuse_non_json(struct sbx_http_request *rq, enum MHD_Result *ret);
/* Case-insensitive check that the media type of a Content-Type value is T. */
bool sbx_http_media_is(const char *value, const char *type);

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
/* The watch over the download bodies: started before the daemon, stopped
 * after it (no body runs then). 0, or a negative errno with nothing made. */
int sbx_artifact_watch_start(sbx_http *h, struct sbx_error *err);
void sbx_artifact_watch_stop(sbx_http *h);
/* GET /ready (src/http/ready_route.c): 200 when the engine answers and the
 * keys file can be used, else 503 with Retry-After saying why. */
enum MHD_Result sbx_ready_handle(struct sbx_http_request *rq);
/* GET /metrics (src/http/metrics_route.c): its own token or loopback. */
enum MHD_Result sbx_metrics_handle(struct sbx_http_request *rq);
/* CLIENT (sbx_client_text) is in 127.0.0.0/8 or ::1. */
bool sbx_metrics_client_on_loopback(const char *client);
/* The page for people (src/http/ui_route.c): sbx_ui_path says whether URL
 * is one of its routes ("/", "/ui", "/ui/..."); sbx_ui_handle answers them,
 * each answer with the Content-Security-Policy SBX_UI_CSP. */
#define SBX_UI_CSP                                                                                 \
	"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                \
	"connect-src 'self'; frame-src 'none'; object-src 'none'; base-uri 'none'; "               \
	"form-action 'none'; frame-ancestors 'none'"
bool sbx_ui_path(const char *url);
enum MHD_Result sbx_ui_handle(struct sbx_http_request *rq);

/* ---- the worker pool (src/http/workers.c) ---- */

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

/* ---- event streams (src/http/event_stream.c) ---- */

/* The comment an idle stream sends. */
#define SBX_SSE_KEEPALIVE_FRAME ": keepalive\n\n"
/* A content reader's output step: copies up to MAX bytes of B from *POS on
 * into BUF and advances *POS; once all of B is copied, empties B and sets
 * *POS to 0 for the next frame. Returns the count copied. */
size_t sbx_http_drain(struct sbx_buf *b, size_t *pos, char *buf, size_t max);
/* Waits on COND (a CLOCK_MONOTONIC one) for at most SBX_PEER_CHECK_MS and
 * not past UNTIL_MS (sbx_monotonic_ms time): the pthread_cond_timedwait
 * result. */
int sbx_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms);
/* True when the client of CONN closed the connection (or it failed). */
bool sbx_http_peer_gone(struct MHD_Connection *conn);

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

/* One event stream on a connection: what it sends comes off OUT, whose
 * changes (and the state's) are broadcast on its cond. */
struct sbx_event_stream {
	struct MHD_Connection *conn;
	struct sbx_outq *out;
	enum sbx_event_state (*state)(void *ctx); /* called with OUT's lock held */
	void *ctx;
	int64_t keepalive_ms;
	struct sbx_buf pending; /* the frame being sent */
	size_t pos;
};

/* Once the pending frame is sent: waits for the next one and appends it to
 * PENDING, a queued message, or the keepalive when none came for
 * KEEPALIVE_MS. Checks every SBX_PEER_CHECK_MS whether the client closed. */
enum sbx_event_step sbx_event_stream_next(struct sbx_event_stream *s);

/* file_headers.c: a file's validators, the conditions on them and a
 * single byte range, as file servers speak them (pure). */

#define SBX_ETAG_MAX 64
#define SBX_HTTP_DATE_MAX 32
/* The strong ETag of INFO: "INO-SIZE-MTIME_NS" in hex, quoted. */
void sbx_file_etag(const struct sbx_artifact_info *info, char out[SBX_ETAG_MAX]);
/* Unix time T as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"). */
void sbx_http_date(int64_t t, char out[SBX_HTTP_DATE_MAX]);
/* Whether a GET or HEAD with these headers (each NULL when absent) gets 304:
 * If-None-Match names the file's ETag (weakly) or is "*"; without it,
 * If-Modified-Since is a date no earlier than the file's last change. */
bool sbx_file_not_modified(const char *if_none_match, const char *if_modified_since,
			   const struct sbx_artifact_info *info);
/* Whether a Range may be served under IF_RANGE (NULL: absent): the file's
 * ETag (strongly), or exactly its Last-Modified date when that is before
 * NOW (Unix seconds; a date within the current second is weak). */
bool sbx_file_if_range(const char *if_range, const struct sbx_artifact_info *info, int64_t now);
/* One byte range: FIRST-LAST (LAST -1: to the end) or the last SUFFIX
 * bytes (FIRST -1). */
struct sbx_byte_range {
	int64_t first, last, suffix;
};
/* 1 when V (a Range header; NULL: absent) asks for one byte range, into
 * *RET; 0 when it is absent, malformed, of another unit or asks for several
 * (then the whole file is sent, as RFC 9110 allows). */
int sbx_file_range_parse(const char *v, struct sbx_byte_range *ret);
/* The bytes of R in a file of SIZE: 0 and *RET_OFFSET, *RET_COUNT (>= 1);
 * -1 when none of it lies in the file (416). */
int sbx_file_range_resolve(const struct sbx_byte_range *r, int64_t size, int64_t *ret_offset,
			   int64_t *ret_count);

#endif
