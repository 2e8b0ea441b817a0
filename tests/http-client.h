/* SPDX-License-Identifier: MIT */
/*
 * What the tests share as clients of the server (test-http, test-mcp,
 * test-tools): HTTP requests through libcurl and raw sockets, the Streamable
 * HTTP and legacy SSE sessions (the SSE setup as one list of steps), and the
 * stand-in "slow" tool that runs until it is cancelled. Test-only.
 */
#ifndef SBX_TESTS_HTTP_CLIENT_H
#define SBX_TESTS_HTTP_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "tools/tools.h"
#include "sbx/buf.h"

/* ---- the server the helpers talk to ---- */

struct http_target {
	uint16_t port;
	bool v6;       /* [::1] rather than 127.0.0.1 */
	char base[64]; /* http://127.0.0.1:PORT or http://[::1]:PORT */
};

/* The current target; http_use switches to PORT on the IPv4 or IPv6
 * loopback and returns the one it replaced, for http_restore. */
extern struct http_target http_target;
struct http_target http_use(uint16_t port, bool v6);
void http_restore(const struct http_target *saved);
/* Requests and raw connections of the calling thread come from the IPv4
 * loopback address IP ("127.0.0.2": another client address for the
 * server's per-address limits), or the default one (NULL). */
void http_from(const char *ip);

/* ---- requests (libcurl) ---- */

struct reply {
	long status; /* 0 when the request failed */
	struct sbx_buf headers;
	struct sbx_buf body;
};

void reply_release(struct reply *r);
/* The value of response header NAME (a per-thread buffer), or NULL. */
const char *header_of(const struct reply *r, const char *name);
/* One request to the target. HEADERS: NULL-terminated "Name: value" lines. */
struct reply request(const char *method, const char *path, const char *const *headers,
		     const char *body);

#define ACCEPT_BOTH "Accept: application/json, text/event-stream"
#define CT_JSON "Content-Type: application/json"

extern const char init_body[];	      /* initialize, id 1, 2025-06-18 */
extern const char ping_body[];	      /* ping, id 2 */
extern const char initialized_body[]; /* notifications/initialized */

/* A POST to /mcp with the usual headers, Mcp-Session-Id SESSION (if not
 * NULL) and EXTRA (may be NULL). */
struct reply mcp_post(const char *session, const char *extra, const char *body);
/* Initializes a Streamable HTTP session; its id (malloc'd) or NULL. */
char *mcp_initialize(void);
/* The same with the header line EXTRA (may be NULL), e.g. Authorization. */
char *mcp_initialize_with(const char *extra);
/* A POST of BODY to the SSE session ID's endpoint. */
struct reply sse_post(const char *id, const char *body);

/* ---- raw sockets ---- */

long elapsed_ms(const struct timespec *t0);
void sleep_ms(long ms);
/* A connection to the target (bails out when there is none). */
int connect_raw(void);
void send_all(int fd, const char *s);
/* Reads from FD into ACC until NEEDLE appears or MS pass; true if found. */
bool read_until(int fd, struct sbx_buf *acc, const char *needle, int ms);
/* True when the peer closes FD within MS (data before that is skipped). */
bool closed_within(int fd, int ms);
/* Sends a raw POST to PATH with HEADERS (lines that end in CRLF) and
 * Content-Length CONTENT_LENGTH (0: the length of BODY); BODY may be
 * shorter (the rest is held back). The connection's fd. */
int raw_post(const char *path, const char *headers, size_t content_length, const char *body);
/* raw_post of BODY to /mcp on session ID with the usual headers. */
int raw_mcp_post(const char *id, size_t content_length, const char *body);
/* A connection to the target that has not been answered or closed yet
 * (false: refused, or closed by the server within MS). */
bool connect_quiet(int *ret_fd, int ms);
/* Sends N bytes of P; false when the peer closed (no bail-out). */
bool send_quiet(int fd, const void *p, size_t n);
/* Sends a raw POST to PATH with HEADERS (lines that end in CRLF) and
 * Transfer-Encoding: chunked; the body follows with send_chunk (N = 0 ends
 * it). The connection's fd. */
int raw_post_chunked(const char *path, const char *headers);
bool send_chunk(int fd, const void *data, size_t n);
/* The status of the answer read from FD into ACC within MS, 0 when none. */
long raw_status(int fd, struct sbx_buf *acc, int ms);

/* ---- an SSE session, set up step by step ---- */

enum sse_step {
	SSE_CONNECT,	 /* connect and send GET /sse */
	SSE_OPEN,	 /* its answer: 200, text/event-stream, no-cache */
	SSE_ENDPOINT,	 /* the endpoint event names a session id */
	SSE_INITIALIZE,	 /* POST initialize -> 202 */
	SSE_INIT_REPLY,	 /* its result arrives on the stream */
	SSE_INITIALIZED, /* POST notifications/initialized -> 202 */
	SSE_STEPS,
};

struct sse_session {
	int fd;
	char id[64];
	struct sbx_buf acc; /* everything read from the stream */
	int ms;		    /* how long a step waits for the stream (0: 5000) */
	const char *path;   /* what SSE_CONNECT GETs (NULL: "/sse"), e.g. "/sse?api_key=K" */
};

/* What step STEP checks, as a test description. */
const char *sse_step_what(enum sse_step step);
/* Runs one step on S (SSE_CONNECT first); true when it did what it should. */
bool sse_step(struct sse_session *s, enum sse_step step);
/* Runs the steps from SSE_CONNECT through LAST; true when all did. */
bool sse_open(struct sse_session *s, enum sse_step last);
/* Closes the stream and releases S. */
void sse_close(struct sse_session *s);

/* ---- bodies (test-http, test-mcp) ---- */

/* The nesting a body may have: src/mcp/mcp.c's MCP_JSON_DEPTH, stated here
 * on its own so that a change to the bound fails the tests. */
#define JSON_DEPTH_WANTED 64

/* A ping (id ID) whose params nest so that the body is LEVELS deep in all
 * (JSON_DEPTH_WANTED's count: the message is level 1, its params level 2,
 * then arrays, the innermost empty, or holding the number 1, one level
 * more, when SCALAR). Owned. */
char *mcp_deep_ping(int id, int levels, bool scalar);

/* ---- the stand-in "slow" tool (test-http, test-mcp) ---- */

/* Marks a start, then polls the cancellation until it comes (at most 5 s);
 * true when it came. */
bool slow_tool_run(const struct sbx_tool_ctx *ctx);
/* Slow runs started and cancellations they saw, since the program began. */
int slow_tool_started(void);
int slow_tool_cancels(void);
/* Waits until N slow runs have started in all (5 s at most). */
bool slow_tool_wait_started(int n);
/* Waits until N cancellations have been seen in all (MS at most). */
bool slow_tool_wait_cancels(int n, int ms);

#endif
