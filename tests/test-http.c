/* SPDX-License-Identifier: MIT */
/*
 * The HTTP front in-process on 127.0.0.1 (a free port), no engine needed
 * (the manager points at an absent socket): /health, the checks and codes
 * of /mcp in their order, a body MCP_JSON_DEPTH deep served and one level
 * deeper 400 -32700, sessions, the legacy SSE transport, the artifact
 * route's refusals, 20 concurrent sessions, a request held mid-body not
 * delaying a ping on the same session; progress (the event-stream form) and
 * cancellation on both transports, with stand-in tools "progress" and "slow"
 * (sbx_mcp_set_tools_call; every other name goes to the real tools); cheap
 * requests answered while tool calls hold workers; server.max_connections
 * (600 idle SSE streams under 1000, 503 past a small limit) and a closed SSE
 * client's session let go of within 2 s. Hostile clients: an unknown session
 * and an over-sized initialize refused from their headers, before the body
 * is sent; chunked bodies refused as they pass their limit (cut off past
 * SBX_HTTP_DRAIN_MAX more); the JSON value count; the body budget; VmRSS
 * under 16 concurrent 4 MB bodies (the server runs in this process); and
 * server.max_calls_per_session on both transports, another session served
 * meanwhile and with slots of its own. Clients that have gone: a dropped
 * POST cancels its call only (JSON and event-stream forms), so do a DELETE
 * of the session and a closed SSE stream (all its calls); with
 * server.session_timeout=1s an idle SSE stream ends, one whose call runs
 * does not, and a call's end counts as use; the server's stop cancels the
 * calls in flight on both transports. GET /ready does not show the host's
 * engine socket. Clients that hold on (each limit with small settings, from
 * several loopback addresses 127.0.0.x): the outbound queues alone
 * (server.max_queued closes the biggest, a full one is drained at once), a
 * stalled stream cut off after server.stream_stall_timeout and its call
 * cancelled (a reading client's idle stream lives on), a stalled flooded
 * stream closed at once past server.max_queued, server.max_sessions and its
 * least recently used idle session, server.max_sessions_per_ip, a trickled
 * body (server.body_timeout, body_min_rate), server.max_connections_per_ip;
 * the per-address share of the body budget and a Content-Length charged at
 * the first bytes; a session id with its secret part changed is unknown.
 * API keys (test_auth, a server with auth.keys_file, keys made by
 * `mcp-sandboxd keys add` and sbx_keys_add, a stand-in tool "whoami" that
 * names the session's owner): 401 and its challenge without a key, with a
 * wrong one and with ?api_key= on /mcp, answered before a 100 MB body is
 * sent; the right key in each place it is taken; tenants on sessions;
 * revocation; 429 past SBX_AUTH_FAIL_MAX failures from one address.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http/http-internal.h"
#include "mcp/mcp-internal.h"
#include "tools/tools.h"
#include "sbx/artifact.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "http-client.h"
#include "tap.h"

/* A NULL-terminated list of header lines, for request(). */
#define HS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Asserts that the reply REP_ (released here) has status CODE_ and a body
 * that holds NEEDLE_. */
#define expect_body(rep_, code_, needle_, ...)                                                     \
	do {                                                                                       \
		struct reply _r = (rep_);                                                          \
		if (!tap_ok(_r.status == (code_) && _r.body.data &&                                \
				strstr(_r.body.data, (needle_)),                                   \
			    __VA_ARGS__))                                                          \
			tap_diag("  got %ld: %s", _r.status, _r.body.data ? _r.body.data : "");    \
		reply_release(&_r);                                                                \
	} while (0)

/* Asserts that the reply REP_ (released here) has status CODE_. */
#define expect_status(rep_, code_, ...)                                                            \
	do {                                                                                       \
		struct reply _r = (rep_);                                                          \
		tap_is_int(_r.status, (code_), __VA_ARGS__);                                       \
		reply_release(&_r);                                                                \
	} while (0)

static void test_basics(void)
{
	struct reply r;

	expect_body(request("GET", "/health", NULL, NULL), 200, "\"ok\"", "GET /health -> 200 ok");
	/* the engine socket here does not exist: not ready, and why */
	r = request("GET", "/ready", NULL, NULL);
	tap_is_int(r.status, 503, "GET /ready without an engine -> 503");
	tap_ok(r.body.data && strstr(r.body.data, "\"status\":\"unavailable\"") &&
		   strstr(r.body.data, "\"engine\":\"") &&
		   !strstr(r.body.data, "\"engine\":\"ok\""),
	       "... the body says the engine is unavailable and why (%s)",
	       r.body.data ? r.body.data : "");
	tap_ok(r.body.data && strstr(r.body.data, "the container engine is not reachable") &&
		   !strstr(r.body.data, "/nonexistent") &&
		   !strstr(r.body.data, "mcp-sandbox-test.sock"),
	       "... in words that do not show the host's engine socket (%s)",
	       r.body.data ? r.body.data : "");
	tap_is_str(header_of(&r, "Retry-After"), "5", "... with Retry-After");
	reply_release(&r);
	expect_status(request("POST", "/ready", NULL, "x"), 405, "POST /ready -> 405");
	expect_status(request("GET", "/nope", NULL, NULL), 404, "an unknown path -> 404");

	r = request("PUT", "/mcp", NULL, "x");
	tap_is_int(r.status, 405, "PUT /mcp -> 405");
	tap_is_str(header_of(&r, "Allow"), "GET, POST, DELETE", "... with Allow");
	reply_release(&r);
	expect_status(request("GET", "/mcp", HS("Accept: text/event-stream"), NULL), 405,
		      "GET /mcp -> 405 (no server stream)");

	expect_status(
	    request("POST", "/mcp", HS("Host: evil.example", ACCEPT_BOTH, CT_JSON), init_body), 403,
	    "a foreign Host -> 403");
	expect_status(
	    request("POST", "/mcp", HS("Host: localhost:1", ACCEPT_BOTH, CT_JSON), init_body), 403,
	    "localhost on another port -> 403");
	{
		char host[64];
		snprintf(host, sizeof(host), "Host: localhost:%u", http_target.port);
		const char *const hs[] = {host, ACCEPT_BOTH, CT_JSON, NULL};
		expect_status(request("POST", "/mcp", hs, init_body), 200,
			      "Host localhost:PORT is fine");
	}
	expect_status(mcp_post(NULL, "Origin: http://evil.example", init_body), 403,
		      "a foreign Origin -> 403");
	expect_status(mcp_post(NULL, "Origin: null", init_body), 403, "Origin null -> 403");
	r = mcp_post(NULL, "Origin: http://localhost:5173", init_body);
	tap_ok(r.status == 200 && header_of(&r, "Access-Control-Expose-Headers") &&
		   strstr(header_of(&r, "Access-Control-Expose-Headers"), "Mcp-Session-Id"),
	       "a loopback Origin is fine and sees Mcp-Session-Id");
	tap_is_str(header_of(&r, "Access-Control-Allow-Origin"), "http://localhost:5173",
		   "... Access-Control-Allow-Origin echoes it");
	reply_release(&r);
	expect_status(mcp_post(NULL, "Origin: https://app.example", init_body), 200,
		      "an Origin from server.allowed_origins is fine");
	expect_status(mcp_post(NULL, "Origin: https://app.example.evil", init_body), 403,
		      "an Origin that only begins with an allowed one -> 403");
	expect_status(mcp_post(NULL, "Origin: http://localhost.evil.example", init_body), 403,
		      "an Origin that only begins with a loopback name -> 403");
	{
		const char *const hs[] = {"Origin: https://app.example",
					  "Access-Control-Request-Method: POST", NULL};
		r = request("OPTIONS", "/mcp", hs, NULL);
		tap_ok(r.status == 204 && header_of(&r, "Access-Control-Allow-Headers") &&
			   strstr(header_of(&r, "Access-Control-Allow-Headers"), "Mcp-Session-Id"),
		       "CORS preflight for an allowed origin -> 204");
		reply_release(&r);
	}

	expect_status(request("POST", "/mcp", HS("Accept: application/json", CT_JSON), init_body),
		      406, "Accept without text/event-stream -> 406");
	expect_status(
	    request("POST", "/mcp", HS(ACCEPT_BOTH, "Content-Type: text/plain"), init_body), 415,
	    "Content-Type text/plain -> 415");
	expect_body(mcp_post(NULL, NULL, "{\"jsonrpc\":"), 400, "-32700",
		    "bad JSON -> 400 with -32700");
	{
		size_t n = 64 * 1024;
		char *big = malloc(n + 1);
		if (!big)
			tap_bail("malloc");
		memset(big, ' ', n);
		big[0] = '[';
		big[n - 1] = ']';
		big[n] = '\0';
		expect_status(mcp_post(NULL, NULL, big), 413, "a body over server.max_body -> 413");
		free(big);
	}
}

/* The checks of POST /mcp come in the order of docs/mcp.md. */
static void test_order(void)
{
	expect_status(request("PUT", "/mcp", HS("Host: evil.example"), "x"), 405,
		      "order: 405 before 403");
	expect_status(request("POST", "/mcp",
			      HS("Origin: http://evil.example", "Accept: text/html",
				 "Content-Type: text/plain"),
			      "{"),
		      403, "order: 403 before 406");
	expect_status(
	    request("POST", "/mcp", HS("Accept: text/html", "Content-Type: text/plain"), "{"), 406,
	    "order: 406 before 415");
	expect_status(request("POST", "/mcp", HS(ACCEPT_BOTH, "Content-Type: text/plain"), "{"),
		      415, "order: 415 before 400");
	expect_status(request("POST", "/mcp",
			      HS("Accept: */*", "Content-Type: application/json; charset=utf-8"),
			      init_body),
		      200, "Accept */* and a charset parameter are fine");
	expect_status(
	    request("OPTIONS", "/mcp",
		    HS("Origin: http://evil.example", "Access-Control-Request-Method: POST"), NULL),
	    403, "CORS preflight from a foreign origin -> 403");
	expect_status(request("GET", "/messages?session_id=x", NULL, NULL), 405,
		      "GET /messages -> 405");
	expect_status(request("POST", "/sse", HS(CT_JSON), ping_body), 405, "POST /sse -> 405");
}

static void test_batch_http(void)
{
	static const char init_0326[] =
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
	    "\"protocolVersion\":\"2025-03-26\",\"capabilities\":{},\"clientInfo\":{\"name\":"
	    "\"t\",\"version\":\"1\"}}}";
	struct reply r = mcp_post(NULL, NULL, init_0326);
	const char *h = header_of(&r, "Mcp-Session-Id");
	char *id = h ? strdup(h) : NULL;

	reply_release(&r);
	r = mcp_post(id, NULL,
		     "[{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"},"
		     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},"
		     "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/list\"}]");
	tap_ok(r.status == 200 && r.body.data && r.body.data[0] == '[' &&
		   strstr(r.body.data, "\"id\":7") && strstr(r.body.data, "\"id\":8"),
	       "a batch in 2025-03-26 -> 200 with an array of responses");
	reply_release(&r);
	r = mcp_post(id, NULL, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}]");
	tap_ok(r.status == 202 && r.body.len == 0, "a batch of notifications -> 202");
	reply_release(&r);
	free(id);
}

/* POST /mcp with a balanced body JSON_DEPTH_WANTED deep: 200 and its result; one
 * level deeper: 400, -32700 "nesting too deep"; the session answers on. */
static void test_depth_http(void)
{
	char *id = mcp_initialize();
	char *text;
	struct reply r;

	if (!tap_ok(id != NULL, "depth: a session"))
		return;
	text = mcp_deep_ping(11, JSON_DEPTH_WANTED, false);
	r = mcp_post(id, NULL, text);
	if (!tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"id\":11") &&
			strstr(r.body.data, "\"result\"") && !strstr(r.body.data, "\"error\""),
		    "depth: a ping nested %d deep -> 200 with its result", JSON_DEPTH_WANTED))
		tap_diag("  got %ld: %s", r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	free(text);
	text = mcp_deep_ping(12, JSON_DEPTH_WANTED + 1, false);
	r = mcp_post(id, NULL, text);
	if (!tap_ok(r.status == 400 && r.body.data && strstr(r.body.data, "-32700") &&
			strstr(r.body.data, "nesting too deep") &&
			strstr(r.body.data, "\"id\":null"),
		    "depth: one level more (%d) -> 400, -32700 nesting too deep",
		    JSON_DEPTH_WANTED + 1))
		tap_diag("  got %ld: %s", r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	free(text);
	expect_body(mcp_post(id, NULL, ping_body), 200, "\"result\"",
		    "depth: the session answers a ping after");
	free(id);
}

static void test_sessions(void)
{
	struct reply r;
	char *id = mcp_initialize(), *id2;

	tap_ok(id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32,
	       "initialize -> Mcp-Session-Id of 128 random bits (%s)", id ? id : "none");
	id2 = mcp_initialize();
	tap_ok(id && id2 && strcmp(id, id2) != 0, "two sessions have different ids");
	free(id2);

	expect_body(mcp_post(NULL, NULL, ping_body), 400, "\"error\"",
		    "a request without Mcp-Session-Id -> 400");
	expect_body(mcp_post("0123456789abcdef0123456789abcdef", NULL, ping_body), 404, "-32001",
		    "an unknown session -> 404 with -32001");
	r = mcp_post(id, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	tap_ok(r.status == 202 && r.body.len == 0, "a notification -> 202, empty");
	reply_release(&r);
	r = mcp_post(id, NULL, ping_body);
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"result\":{}") &&
		   header_of(&r, "Content-Type") &&
		   strncmp(header_of(&r, "Content-Type"), "application/json", 16) == 0,
	       "ping on the session -> 200 application/json {}");
	reply_release(&r);
	if (id) {
		/* The index part (the first 8) right and the secret wrong, or the
		 * other way round: unknown either way. */
		char bad[33];
		snprintf(bad, sizeof(bad), "%s", id);
		bad[31] = bad[31] == '0' ? '1' : '0';
		expect_status(mcp_post(bad, NULL, ping_body), 404,
			      "the session id with its last digit changed -> 404");
		snprintf(bad, sizeof(bad), "%s", id);
		bad[0] = bad[0] == '0' ? '1' : '0';
		expect_status(mcp_post(bad, NULL, ping_body), 404,
			      "... with its first digit changed -> 404");
	}
	expect_status(mcp_post(id, "MCP-Protocol-Version: 2025-06-18", ping_body), 200,
		      "a supported MCP-Protocol-Version is fine");
	expect_status(mcp_post(id, "MCP-Protocol-Version: 1999-01-01", ping_body), 400,
		      "an unsupported MCP-Protocol-Version -> 400");
	expect_body(mcp_post(id, NULL, init_body), 200, "-32600",
		    "a second initialize on the session is a JSON-RPC error");
	expect_body(mcp_post(id, NULL,
			     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
			     "\"name\":\"no_such_tool\",\"arguments\":{}}}"),
		    200, "-32602", "tools/call of an unknown tool -> -32602");
	{
		char sh[128];
		snprintf(sh, sizeof(sh), "Mcp-Session-Id: %s", id ? id : "x");
		const char *const hs[] = {sh, NULL};
		expect_status(request("DELETE", "/mcp", hs, NULL), 200,
			      "DELETE the session -> 200");
		expect_status(request("DELETE", "/mcp", hs, NULL), 404, "DELETE it again -> 404");
		expect_status(request("DELETE", "/mcp", NULL, NULL), 400,
			      "DELETE without a session -> 400");
	}
	expect_status(mcp_post(id, NULL, ping_body), 404, "a deleted session -> 404");
	free(id);

	r = mcp_post(NULL, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}");
	tap_ok(r.status == 200 && !header_of(&r, "Mcp-Session-Id"),
	       "a failed initialize hands out no session");
	reply_release(&r);
}

static void test_sse(void)
{
	struct sse_session s = {0};
	struct reply r;
	const char *id = s.id;

	/* The setup, one assertion a step. */
	for (int i = 0; i < SSE_STEPS; i++)
		tap_ok(sse_step(&s, (enum sse_step)i), "%s", sse_step_what((enum sse_step)i));
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":\"p-77\",\"method\":\"ping\"}");
	tap_ok(r.status == 202 && read_until(s.fd, &s.acc, "\"id\":\"p-77\",\"result\":{}", 5000),
	       "ping -> 202, the result on the stream");
	reply_release(&r);

	expect_body(sse_post(id, "{\"jsonrpc\":"), 400, "-32700", "bad JSON -> 400 with -32700");
	{
		char path[128];
		const char *const hs[] = {"Content-Type: text/plain", NULL};
		snprintf(path, sizeof(path), "/messages?session_id=%s", id);
		r = request("POST", path, hs, ping_body);
		tap_is_int(r.status, 415, "Content-Type text/plain on a known session -> 415");
		tap_ok(r.body.data && strstr(r.body.data, "Unsupported Media Type"),
		       "... a JSON-RPC error that says why (%s)", r.body.data ? r.body.data : "");
		reply_release(&r);
	}
	expect_status(sse_post("0123456789abcdef0123456789abcdef", ping_body), 404,
		      "an unknown session -> 404");
	expect_status(request("POST", "/messages", HS(CT_JSON), ping_body), 400,
		      "no session_id -> 400");
	expect_status(request("GET", "/sse", HS("Origin: http://evil.example"), NULL), 403,
		      "GET /sse from a foreign Origin -> 403");

	/* A POST held mid-body does not delay a ping on the same session. */
	{
		char path[128];
		struct timespec t0;
		int held;
		snprintf(path, sizeof(path), "/messages?session_id=%s", id);
		held = raw_post(path, CT_JSON "\r\n", 200, "{\"jsonrpc\"");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":\"p-78\",\"method\":\"ping\"}");
		tap_ok(r.status == 202 && read_until(s.fd, &s.acc, "\"id\":\"p-78\"", 3000) &&
			   elapsed_ms(&t0) < 3000,
		       "a request held mid-body does not delay a ping on the session (%ld ms)",
		       elapsed_ms(&t0));
		reply_release(&r);
		close(held);
	}

	sse_close(&s);
	/* The session ends with its stream. */
	{
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			r = sse_post(id, ping_body);
			if (r.status == 404)
				break;
			reply_release(&r);
			usleep(50 * 1000);
		} while (elapsed_ms(&t0) < 5000);
		tap_is_int(r.status, 404, "after the stream closes the session is gone");
		reply_release(&r);
	}
}

static void test_held_streamable(void)
{
	char *id = mcp_initialize();
	struct timespec t0;
	struct reply r;
	int held = raw_mcp_post(id ? id : "x", 300, "{\"jsonrpc\":\"2.0\",");

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = mcp_post(id, NULL, ping_body);
	tap_ok(r.status == 200 && elapsed_ms(&t0) < 3000,
	       "/mcp: a request held mid-body does not delay a ping on the session (%ld ms)",
	       elapsed_ms(&t0));
	reply_release(&r);
	close(held);
	free(id);
}

/* ---- progress and cancellation ---- */

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t fake_progress_tid; /* the thread of the last "progress" call */

/* "flood": {"frames": N, "size": S} sends N notifications/message of about S
 * bytes each at once, then runs as "slow" does. */
static void flood(const struct sbx_tool_ctx *ctx, struct json_object *args)
{
	static const char head[] =
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{"
	    "\"level\":\"info\",\"data\":\"";
	struct json_object *v;
	int frames = 0, size = 0;
	char *msg;

	if (json_object_object_get_ex(args, "frames", &v))
		frames = json_object_get_int(v);
	if (json_object_object_get_ex(args, "size", &v))
		size = json_object_get_int(v);
	if (size < 64)
		size = 64;
	msg = malloc((size_t)size + 1);
	if (!msg)
		tap_bail("malloc");
	memset(msg, 'f', (size_t)size);
	memcpy(msg, head, sizeof(head) - 1);
	memcpy(msg + size - 4, "\"}}", 4);
	for (int i = 0; i < frames && ctx->notifier && !sbx_tools_cancelled(ctx); i++)
		ctx->notifier->send(ctx->notifier->ctx, msg);
	free(msg);
	slow_tool_run(ctx);
}

/* "progress" prints two chunks 100 ms apart; "slow" reports a start (when
 * asked for progress) and runs until cancelled, at most 5 s; "flood": above. */
static int fake_tools_call(const struct sbx_tool_ctx *ctx, const char *name,
			   struct json_object *args, struct json_object **ret_result,
			   struct sbx_error *err)
{
	struct sbx_progress p;

	if (strcmp(name, "flood") == 0) {
		flood(ctx, args);
		*ret_result =
		    json_tokener_parse("{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}");
		return *ret_result ? 0 : -ENOMEM;
	}
	if (strcmp(name, "whoami") == 0) {
		char text[200];
		snprintf(text, sizeof(text),
			 "{\"content\":[{\"type\":\"text\",\"text\":\"owner=%s sandboxes=%lld\"}]}",
			 ctx->owner, ctx->limits ? (long long)ctx->limits->sandboxes : -1LL);
		*ret_result = json_tokener_parse(text);
		return *ret_result ? 0 : -ENOMEM;
	}
	if (strcmp(name, "progress") != 0 && strcmp(name, "slow") != 0)
		return sbx_tools_call(ctx, name, args, ret_result, err);
	sbx_progress_init(&p, ctx);
	if (strcmp(name, "progress") == 0) {
		pthread_mutex_lock(&fake_lock);
		fake_progress_tid = gettid();
		pthread_mutex_unlock(&fake_lock);
		sbx_progress_output(&p, "chunk-one\n", 10);
		sleep_ms(100);
		sbx_progress_output(&p, "chunk-two\n", 10);
	} else {
		sbx_progress_step(&p, "slow started");
		slow_tool_run(ctx);
	}
	sbx_progress_flush(&p, true);
	sbx_progress_release(&p);
	*ret_result = json_tokener_parse("{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}");
	return *ret_result ? 0 : -ENOMEM;
}

static void cancel_on(const char *id, const char *request_id)
{
	char body[256];

	snprintf(body, sizeof(body),
		 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
		 "\"requestId\":%s,\"reason\":\"test\"}}",
		 request_id);
	expect_status(mcp_post(id, NULL, body), 202, "notifications/cancelled -> 202");
}

struct bg_post {
	pthread_t thread;
	const char *session, *body;
	struct reply r;
	long ms;
};

static void *bg_post_main(void *arg)
{
	struct bg_post *b = arg;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	b->r = mcp_post(b->session, NULL, b->body);
	b->ms = elapsed_ms(&t0);
	return NULL;
}

/* The server the tests below run against (set in main). */
static sbx_http *main_http;

static void test_progress_http(void)
{
	char *id = mcp_initialize();
	struct reply r;
	const char *one, *two, *resp;

	r = mcp_post(
	    id, NULL,
	    "{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"tools/call\",\"params\":{\"name\":"
	    "\"progress\",\"arguments\":{},\"_meta\":{\"progressToken\":\"pt-1\"}}}");
	tap_is_int(r.status, 200, "/mcp: a call that sends progress -> 200");
	tap_is_str(header_of(&r, "Content-Type"), "text/event-stream", "... as text/event-stream");
	one = r.body.data ? strstr(r.body.data, "\"message\":\"chunk-one\\n\"") : NULL;
	two = r.body.data ? strstr(r.body.data, "\"message\":\"chunk-two\\n\"") : NULL;
	resp = r.body.data ? strstr(r.body.data, "\"id\":31,\"result\"") : NULL;
	tap_ok(one && two && resp && one < two && two < resp,
	       "... the progress notifications with the printed text, then the response");
	tap_ok(r.body.data &&
		   strstr(r.body.data, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
				       "\"notifications/progress\",\"params\":{\"progressToken\":"
				       "\"pt-1\",\"progress\":0,"),
	       "... as event: message frames carrying the token, progress from 0");
	reply_release(&r);

	r = mcp_post(
	    id, NULL,
	    "{\"jsonrpc\":\"2.0\",\"id\":32,\"method\":\"tools/call\",\"params\":{\"name\":"
	    "\"progress\",\"arguments\":{}}}");
	tap_ok(r.status == 200 && header_of(&r, "Content-Type") &&
		   strcmp(header_of(&r, "Content-Type"), "application/json") == 0 && r.body.data &&
		   !strstr(r.body.data, "notifications/progress"),
	       "without a progressToken: one application/json response");
	reply_release(&r);
	{
		/* Another call runs on a thread that was alive before it (an idle
		 * worker of the pool, whichever of them wakes), not a new one. */
		pid_t before[512];
		size_t n = 0;
		bool pooled = false, idle = false;
		DIR *d;
		struct dirent *e;

		/* The worker that ran call 32 sends its answer before it goes
		 * back to the pool: wait until it is there (or never comes). */
		for (int i = 0; i < 500 && !idle; i++) {
			pthread_mutex_lock(&main_http->workers_lock);
			idle = main_http->idle > 0;
			pthread_mutex_unlock(&main_http->workers_lock);
			if (!idle)
				sleep_ms(10);
		}
		tap_ok(idle, "after a call, its worker waits idle in the pool");
		d = opendir("/proc/self/task");
		while (d && (e = readdir(d)) && n < SBX_ARRAY_SIZE(before))
			if (e->d_name[0] != '.')
				before[n++] = (pid_t)atoi(e->d_name);
		if (d)
			closedir(d);
		r = mcp_post(id, NULL,
			     "{\"jsonrpc\":\"2.0\",\"id\":33,\"method\":\"tools/call\",\"params\":{"
			     "\"name\":\"progress\",\"arguments\":{}}}");
		pthread_mutex_lock(&fake_lock);
		for (size_t i = 0; i < n; i++)
			pooled |= fake_progress_tid == before[i];
		tap_ok(
		    r.status == 200 && n > 0 && pooled,
		    "the next call runs on a pooled worker thread, alive before it (tid %d of %zu)",
		    (int)fake_progress_tid, n);
		pthread_mutex_unlock(&fake_lock);
		reply_release(&r);
	}
	free(id);
}

static void test_cancel_http(void)
{
	char *id = mcp_initialize();
	struct sbx_buf acc = SBX_BUF_INIT;
	struct bg_post b = {0};
	int fd, cancels = slow_tool_cancels(), started;

	started = slow_tool_started();

	/* The JSON form: the exchange ends with 202 and no body. */
	b.session = id;
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(slow_tool_wait_started(++started), "/mcp: the slow tool runs");
	cancel_on(id, "41");
	pthread_join(b.thread, NULL);
	tap_ok(b.r.status == 202 && b.r.body.len == 0 && b.ms < 3000,
	       "a cancelled request's POST ends at once with 202 and no body (%ld, %ld ms)",
	       b.r.status, b.ms);
	tap_is_int(slow_tool_cancels(), ++cancels, "... and the tool saw the cancellation");
	reply_release(&b.r);

	/* The event-stream form: the stream ends without a response. */
	fd = raw_mcp_post(id, 0,
			  "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":"
			  "{\"name\":\"slow\",\"_meta\":{\"progressToken\":7}}}");
	tap_ok(read_until(fd, &acc, "slow started", 5000) && strstr(acc.data, "text/event-stream"),
	       "a slow call with a progressToken streams its progress");
	started++; /* it sent "slow started", so it has started */
	cancel_on(id, "42");
	tap_ok(read_until(fd, &acc, "\r\n0\r\n\r\n", 3000) && !strstr(acc.data, "\"id\":42"),
	       "... and after the cancellation the stream ends without a response");
	close(fd);
	tap_is_int(slow_tool_cancels(), ++cancels, "... the tool saw it");
	sbx_buf_release(&acc);

	/* A dropped connection cancels its call, and only its call: another
	 * call of the session runs on until cancelled itself. */
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":44,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(slow_tool_wait_started(++started), "a slow call runs");
	fd = raw_mcp_post(id, 0,
			  "{\"jsonrpc\":\"2.0\",\"id\":43,\"method\":\"tools/call\",\"params\":"
			  "{\"name\":\"slow\"}}");
	tap_ok(slow_tool_wait_started(++started),
	       "another slow call runs (its reply is to be JSON)");
	{
		struct timespec t0;
		bool seen;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		close(fd);
		seen = slow_tool_wait_cancels(++cancels, 3000);
		tap_ok(seen,
		       "closing its connection cancels it: the tool saw it within 3 s (%ld ms)",
		       elapsed_ms(&t0));
	}
	sleep_ms(300);
	tap_is_int(slow_tool_cancels(), cancels, "... and the session's other call runs on");
	cancel_on(id, "44");
	pthread_join(b.thread, NULL);
	tap_ok(slow_tool_wait_cancels(++cancels, 2000) && b.r.status == 202,
	       "... until cancelled itself (%ld)", b.r.status);
	reply_release(&b.r);

	/* The event-stream form: the client closes the stream. */
	fd = raw_mcp_post(id, 0,
			  "{\"jsonrpc\":\"2.0\",\"id\":45,\"method\":\"tools/call\",\"params\":"
			  "{\"name\":\"slow\",\"_meta\":{\"progressToken\":8}}}");
	tap_ok(read_until(fd, &acc, "slow started", 5000), "a slow call streams its progress");
	started++;
	close(fd);
	tap_ok(slow_tool_wait_cancels(++cancels, 3000),
	       "closing its event stream cancels it (the tool saw it within 3 s)");
	sbx_buf_release(&acc);

	expect_status(mcp_post(id, NULL, ping_body), 200, "the session answers a ping afterwards");

	/* DELETE of the session cancels what it runs. */
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":46,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(slow_tool_wait_started(++started), "a slow call runs");
	{
		char hdr[96];
		snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s", id);
		expect_status(request("DELETE", "/mcp", HS(hdr), NULL), 200,
			      "DELETE of its session -> 200");
	}
	tap_ok(slow_tool_wait_cancels(++cancels, 3000),
	       "... and the call is cancelled: the tool saw it within 3 s");
	pthread_join(b.thread, NULL);
	tap_ok(b.r.status == 202 && b.r.body.len == 0,
	       "... its POST ends with 202 and no response (%ld)", b.r.status);
	reply_release(&b.r);
	free(id);
}

/* server.max_calls_per_session of the servers here (the default). */
#define CALLS_PER_SESSION 8

static void test_cancel_sse(void)
{
	struct sse_session s = {0};
	struct reply r;
	const char *id = s.id;
	int cancels = slow_tool_cancels(), started;

	tap_ok(sse_open(&s, SSE_INITIALIZED), "SSE: a session is set up");
	started = slow_tool_started();
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":51,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"slow\"}}");
	tap_ok(r.status == 202 && slow_tool_wait_started(started + 1), "SSE: a slow call runs");
	reply_release(&r);
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":51}}");
	reply_release(&r);
	slow_tool_wait_cancels(cancels + 1, 2000);
	tap_is_int(slow_tool_cancels(), cancels + 1,
		   "SSE: notifications/cancelled reaches the tool");
	sleep_ms(100);
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}");
	tap_ok(read_until(s.fd, &s.acc, "\"id\":\"after\"", 5000) &&
		   !strstr(s.acc.data, "\"id\":51"),
	       "SSE: the cancelled request's response is never sent");
	reply_release(&r);

	/* A session whose workers are all busy (server.max_calls_per_session,
	 * 8 here)
	 * still gets its cancellations through. */
	started = slow_tool_started();
	cancels = slow_tool_cancels();
	for (int i = 0; i < CALLS_PER_SESSION; i++) {
		char body[160];
		snprintf(body, sizeof(body),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"slow\"}}",
			 600 + i);
		r = sse_post(id, body);
		reply_release(&r);
	}
	tap_ok(slow_tool_wait_started(started + CALLS_PER_SESSION), "SSE: %d slow calls run",
	       CALLS_PER_SESSION);
	/* One more is refused at once: the error goes onto the stream. */
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":699,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"slow\"}}");
	tap_ok(r.status == 202 &&
		   read_until(s.fd, &s.acc, "\"id\":699,\"error\":{\"code\":-32000", 5000) &&
		   read_until(s.fd, &s.acc, "(server.max_calls_per_session)", 5000),
	       "SSE: one call more -> its JSON-RPC error on the stream, naming "
	       "server.max_calls_per_session");
	reply_release(&r);
	tap_is_int(slow_tool_started(), started + CALLS_PER_SESSION, "SSE: ... and it did not run");
	{
		bool accepted = true;
		for (int i = 0; i < CALLS_PER_SESSION; i++) {
			char body[160];
			snprintf(body, sizeof(body),
				 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
				 "\"params\":{\"requestId\":%d}}",
				 600 + i);
			r = sse_post(id, body);
			accepted &= r.status == 202;
			reply_release(&r);
		}
		tap_ok(accepted, "SSE: with every worker busy, cancellations are still accepted");
	}
	slow_tool_wait_cancels(cancels + CALLS_PER_SESSION, 3000);
	tap_is_int(slow_tool_cancels(), cancels + CALLS_PER_SESSION,
		   "SSE: ... and reach all %d tools", CALLS_PER_SESSION);

	/* The client closes the stream: every call of the session is cancelled. */
	started = slow_tool_started();
	cancels = slow_tool_cancels();
	for (int i = 0; i < 2; i++) {
		char body[160];
		snprintf(body, sizeof(body),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"slow\"}}",
			 700 + i);
		r = sse_post(id, body);
		reply_release(&r);
	}
	tap_ok(slow_tool_wait_started(started + 2), "SSE: two slow calls run");
	sse_close(&s);
	tap_ok(slow_tool_wait_cancels(cancels + 2, 3000),
	       "SSE: closing the stream cancels both (the tools saw it within 3 s)");
}

/* The path of a link to RELPATH of sandbox ID signed with the MCP layer's
 * key for the API key id KID ("": none), ending at EXP, then EXTRA (e.g.
 * "&x=1"). */
static const char *signed_path_kid(sbx_mcp *mcp, const char *id, const char *relpath,
				   const char *kid, int64_t exp, const char *extra)
{
	static char path[512];
	_cleanup_free_ char *url =
	    sbx_artifact_link(sbx_mcp_link_key(mcp), "", id, relpath, kid, exp);

	if (!url)
		tap_bail("sbx_artifact_link");
	snprintf(path, sizeof(path), "%s%s", url, extra);
	return path;
}

static const char *signed_path(sbx_mcp *mcp, const char *id, const char *relpath, int64_t exp,
			       const char *extra)
{
	return signed_path_kid(mcp, id, relpath, "", exp, extra);
}

/* The route's order: a malformed path is 400 whatever its query; then a
 * link not signed by this server (or expired) is 403; then an unknown
 * sandbox is 404. */
static void test_artifacts(sbx_mcp *mcp, struct sbx_settings *s)
{
	const int64_t later = (int64_t)time(NULL) + 600;
	char path[600];
	struct reply r;

	expect_status(request("GET", "/artifacts/", NULL, NULL), 400,
		      "/artifacts/ without a path -> 400");
	expect_status(request("GET", "/artifacts/abc", NULL, NULL), 400,
		      "/artifacts/ID without a file -> 400");
	expect_status(request("GET", "/artifacts/abc/%zz.png", NULL, NULL), 400,
		      "a bad escape -> 400");
	expect_status(request("GET", "/artifacts/abc/%zz.png?exp=1&sig=x", NULL, NULL), 400,
		      "a bad escape with a query -> 400 (the path is checked first)");
	expect_status(request("GET", "/artifacts/a%2Fb/x.png", NULL, NULL), 400,
		      "an escaped '/' in the id -> 400");
	r = request("GET", "/artifacts/nosuchsandbox/plot.png", NULL, NULL);
	tap_ok(r.status == 403 && r.body.data && strstr(r.body.data, "invalid link"),
	       "an unsigned link -> 403 invalid link (%ld %s)", r.status,
	       r.body.data ? r.body.data : "");
	reply_release(&r);
	expect_status(request("HEAD", "/artifacts/nosuchsandbox/plot.png", NULL, NULL), 403,
		      "HEAD of an unsigned link -> 403");
	expect_status(
	    request("GET", signed_path(mcp, "nosuchsandbox", "plot.png", later, ""), NULL, NULL),
	    404, "a signed link to an unknown sandbox -> 404");
	expect_status(
	    request("HEAD", signed_path(mcp, "nosuchsandbox", "plot.png", later, ""), NULL, NULL),
	    404, "HEAD of it -> 404");
	expect_status(request("GET",
			      signed_path(mcp, "nosuchsandbox", "plot.png", later, "&sig=AAAA"),
			      NULL, NULL),
		      403, "the same with sig given twice -> 403");
	expect_status(request("GET", signed_path(mcp, "nosuchsandbox", "plot.png", later, "&x=1"),
			      NULL, NULL),
		      403, "the same with another query argument -> 403");
	expect_status(request("GET", signed_path(mcp, "nosuchsandbox", "plot.png", later, "&exp"),
			      NULL, NULL),
		      403, "the same with a bare exp after it -> 403");
	snprintf(path, sizeof(path), "%s",
		 signed_path(mcp, "nosuchsandbox", "plot.png", later, ""));
	path[strlen("/artifacts/nosuchsandbox/plot")] = 'x';
	expect_status(request("GET", path, NULL, NULL), 403, "its path changed -> 403");
	snprintf(path, sizeof(path), "%s",
		 signed_path(mcp, "nosuchsandbox", "plot.png", later, ""));
	memcpy(path + strlen("/artifacts/"), "nosuchsandboy", 13);
	expect_status(request("GET", path, NULL, NULL), 403, "its sandbox id changed -> 403");
	/* An encoding variant of the same path signs alike. */
	snprintf(path, sizeof(path), "%s",
		 signed_path(mcp, "nosuchsandbox", "plot.png", later, ""));
	{
		char variant[640];
		const char *q = strchr(path, '?');
		snprintf(variant, sizeof(variant), "/artifacts/nosuchsandbox/%%70lot.png%s", q);
		expect_status(request("GET", variant, NULL, NULL), 404,
			      "the same link with its path percent-encoded otherwise -> 404 (the "
			      "decoded path is signed)");
	}
	r = request("GET", signed_path(mcp, "nosuchsandbox", "plot.png", time(NULL) - 5, ""), NULL,
		    NULL);
	tap_ok(r.status == 403 && r.body.data && strstr(r.body.data, "expired"),
	       "a link past its exp -> 403 expired (%ld %s)", r.status,
	       r.body.data ? r.body.data : "");
	reply_release(&r);
	/* server.unsigned_links, auth off here: the plain link passes the check. */
	s->server.unsigned_links = true;
	expect_status(
	    request("GET", "/artifacts/nosuchsandbox/plot.png", NULL, NULL), 404,
	    "unsigned_links = true without keys: an unsigned link -> 404 (checked no more)");
	expect_status(request("GET", "/artifacts/nosuchsandbox/plot.png?exp=1&sig=x", NULL, NULL),
		      403, "... a link with a bad signature still -> 403");
	s->server.unsigned_links = false;
	expect_status(request("POST", "/artifacts/nosuchsandbox/plot.png", NULL, "x"), 405,
		      "POST to an artifact -> 405");
}

/* file_headers.c: validators, conditions and one byte range, as RFC 9110
 * has them (the artifact route's answers on a real engine are in
 * test-tools). */
static void test_file_headers(void)
{
	const struct sbx_artifact_info info = {
	    .size = 1000, .mtime_ns = 784111777123456789LL, .ino = 0xabc, .dev = 7, .count = 1000};
	struct sbx_byte_range br;
	int64_t off = -1, count = -1;
	char etag[SBX_ETAG_MAX], date[SBX_HTTP_DATE_MAX], other[SBX_ETAG_MAX + 8];

	sbx_file_etag(&info, etag);
	tap_is_str(etag, "\"abc-3e8-ae1b981c3a4d715\"", "ETag: inode, size, mtime in ns (hex)");
	sbx_http_date(784111777, date);
	tap_is_str(date, "Sun, 06 Nov 1994 08:49:37 GMT", "Last-Modified is an IMF-fixdate");
	tap_ok(sbx_file_not_modified(etag, NULL, &info), "If-None-Match: its ETag -> 304");
	snprintf(other, sizeof(other), "\"x\", W/%s", etag);
	tap_ok(sbx_file_not_modified(other, NULL, &info), "... a weak one in a list too");
	tap_ok(sbx_file_not_modified("*", NULL, &info), "... and *");
	tap_ok(!sbx_file_not_modified("\"abc-3e8-ae1b981c3a4d716\"", NULL, &info),
	       "... another version's ETag is sent the file");
	tap_ok(!sbx_file_not_modified("\"x\"", date, &info),
	       "If-Modified-Since is not looked at beside If-None-Match");
	tap_ok(sbx_file_not_modified(NULL, date, &info), "If-Modified-Since: its date -> 304");
	tap_ok(sbx_file_not_modified(NULL, "Sunday, 06-Nov-94 08:49:38 GMT", &info),
	       "... a later one (RFC 850 form) too");
	tap_ok(!sbx_file_not_modified(NULL, "Sun, 06 Nov 1994 08:49:36 GMT", &info),
	       "... an earlier one is sent the file");
	tap_ok(!sbx_file_not_modified(NULL, "yesterday-ish", &info), "... not a date: sent");
	tap_ok(sbx_file_if_range(NULL, &info, 784111800), "no If-Range: the range is served");
	tap_ok(sbx_file_if_range(etag, &info, 784111800), "If-Range with its ETag: served");
	snprintf(other, sizeof(other), "W/%s", etag);
	tap_ok(!sbx_file_if_range(other, &info, 784111800),
	       "... a weak ETag never matches (strong comparison)");
	tap_ok(sbx_file_if_range(date, &info, 784111800), "If-Range with its exact date: served");
	tap_ok(!sbx_file_if_range(date, &info, 784111777),
	       "... not while that date is the current second (a weak validator then)");
	tap_ok(!sbx_file_if_range("Sun, 06 Nov 1994 08:49:38 GMT", &info, 784111800),
	       "... another date: the whole file");

	tap_ok(sbx_file_range_parse("bytes=0-99", &br) == 1 && br.first == 0 && br.last == 99,
	       "Range bytes=0-99");
	tap_ok(sbx_file_range_parse("bytes=900-", &br) == 1 && br.first == 900 && br.last == -1,
	       "Range bytes=900-");
	tap_ok(sbx_file_range_parse("bytes=-10", &br) == 1 && br.suffix == 10, "Range bytes=-10");
	tap_is_int(sbx_file_range_parse("bytes=0-1,5-6", &br), 0, "several ranges: the whole file");
	tap_is_int(sbx_file_range_parse("bytes=9-5", &br), 0, "last before first: ignored");
	tap_is_int(sbx_file_range_parse("items=0-5", &br), 0, "another unit: ignored");
	tap_is_int(sbx_file_range_parse("bytes=1234567890123456789-", &br), 0,
		   "a number past 18 digits: ignored");
	tap_is_int(sbx_file_range_parse("bytes=x-", &br), 0, "not a number: ignored");
	sbx_file_range_parse("bytes=990-2000", &br);
	tap_ok(sbx_file_range_resolve(&br, 1000, &off, &count) == 0 && off == 990 && count == 10,
	       "990-2000 of 1000 bytes: 10 from 990 (%lld, %lld)", (long long)off,
	       (long long)count);
	sbx_file_range_parse("bytes=-2000", &br);
	tap_ok(sbx_file_range_resolve(&br, 1000, &off, &count) == 0 && off == 0 && count == 1000,
	       "-2000 of 1000 bytes: all of it");
	sbx_file_range_parse("bytes=1000-", &br);
	tap_is_int(sbx_file_range_resolve(&br, 1000, &off, &count), -1, "1000- of 1000: 416");
	sbx_file_range_parse("bytes=-0", &br);
	tap_is_int(sbx_file_range_resolve(&br, 1000, &off, &count), -1, "-0: 416");
}

static void test_mime(void)
{
	static const char *const cases[][2] = {
	    {"fig.png", "image/png"},
	    {"dir/Photo.JPG", "image/jpeg"},
	    {"a.jpeg", "image/jpeg"},
	    {"a.gif", "image/gif"},
	    {"plot.svg", "image/svg+xml"},
	    {"a.webp", "image/webp"},
	    {"r.pdf", "application/pdf"},
	    {"t.csv", "text/csv; charset=utf-8"},
	    {"d.json", "application/json"},
	    {"p.html", "text/html; charset=utf-8"},
	    {"x.txt", "text/plain; charset=utf-8"},
	    {"run.log", "text/plain; charset=utf-8"},
	    {"README.md", "text/plain; charset=utf-8"},
	    {"s.py", "text/plain; charset=utf-8"},
	    {"x.xml", "application/xml"},
	    {"a.zip", "application/zip"},
	    {"t.parquet", "application/vnd.apache.parquet"},
	    {"noext", "application/octet-stream"},
	    {".hidden", "application/octet-stream"},
	    {"dir.png/file", "application/octet-stream"},
	    {"weird.", "application/octet-stream"},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++)
		tap_is_str(sbx_mime_type(cases[i][0]), cases[i][1], "mime type of %s", cases[i][0]);
}

#define SESSIONS 24

static void *init_thread(void *arg)
{
	(void)arg;
	return mcp_initialize();
}

static void test_concurrent_sessions(void)
{
	pthread_t t[SESSIONS];
	char *ids[SESSIONS];
	int good = 0, distinct = 1;

	for (int i = 0; i < SESSIONS; i++)
		pthread_create(&t[i], NULL, init_thread, NULL);
	for (int i = 0; i < SESSIONS; i++) {
		void *p;
		pthread_join(t[i], &p);
		ids[i] = p;
		good += ids[i] != NULL;
	}
	for (int i = 0; i < SESSIONS; i++)
		for (int j = i + 1; j < SESSIONS; j++)
			if (ids[i] && ids[j] && strcmp(ids[i], ids[j]) == 0)
				distinct = 0;
	tap_is_int(good, SESSIONS, "%d sessions initialized concurrently", SESSIONS);
	tap_ok(distinct, "... all with distinct ids");
	for (int i = 0; i < SESSIONS; i++) {
		if (ids[i]) {
			struct reply r = mcp_post(ids[i], NULL, ping_body);
			if (r.status != 200)
				good--;
			reply_release(&r);
		}
		free(ids[i]);
	}
	tap_is_int(good, SESSIONS, "... and each answers a ping");
}

/* Cheap requests are answered in the connection's thread: they do not
 * wait for the tool calls that hold workers, on either transport. */
static void test_cheap_while_busy(void)
{
	char *id = mcp_initialize(), *id2;
	struct bg_post b[3] = {{0}};
	struct sse_session s = {0};
	struct timespec t0;
	struct reply r;
	bool set_up;
	int started, cancels = slow_tool_cancels();

	started = slow_tool_started();
	for (int i = 0; i < 3; i++) {
		b[i].session = id;
		b[i].body = i == 0   ? "{\"jsonrpc\":\"2.0\",\"id\":61,\"method\":\"tools/call\","
				       "\"params\":{\"name\":\"slow\",\"arguments\":{}}}"
			    : i == 1 ? "{\"jsonrpc\":\"2.0\",\"id\":62,\"method\":\"tools/call\","
				       "\"params\":{\"name\":\"slow\",\"arguments\":{}}}"
				     : "{\"jsonrpc\":\"2.0\",\"id\":63,\"method\":\"tools/call\","
				       "\"params\":{\"name\":\"slow\",\"arguments\":{}}}";
		pthread_create(&b[i].thread, NULL, bg_post_main, &b[i]);
	}
	started += 3;
	tap_ok(slow_tool_wait_started(started), "three slow tool calls hold workers");

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = mcp_post(id, NULL, ping_body);
	tap_ok(r.status == 200 && r.body.data &&
		   strcmp(r.body.data, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}") == 0,
	       "... meanwhile ping on their session -> its JSON result (%s)",
	       r.body.data ? r.body.data : "");
	reply_release(&r);
	r = mcp_post(id, NULL, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
	tap_ok(r.status == 200 && r.body.data &&
		   strstr(r.body.data, "\"id\":3,\"result\":{\"tools\":[") &&
		   strstr(r.body.data, "execute_python_code"),
	       "... tools/list -> the tools");
	reply_release(&r);
	expect_body(
	    mcp_post(id, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"logging/setLevel\",\"params\":{"
		     "\"level\":\"info\"}}"),
	    200, "\"id\":4,\"result\":{}", "... logging/setLevel -> an empty result");
	r = mcp_post(id, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	tap_ok(r.status == 202 && r.body.len == 0, "... a notification -> 202, no body");
	reply_release(&r);
	id2 = mcp_initialize();
	tap_ok(id2 != NULL, "... initialize of another session");
	tap_ok(elapsed_ms(&t0) < 2000, "... all within %ld ms", elapsed_ms(&t0));
	free(id2);

	/* The legacy transport: the reply goes onto the stream. */
	set_up = sse_open(&s, SSE_INITIALIZE);
	r = sse_post(s.id, "{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"ping\"}");
	tap_ok(set_up && r.status == 202 &&
		   read_until(s.fd, &s.acc, "{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}", 2000),
	       "SSE: a ping while the slow calls run -> 202, its result on the stream");
	reply_release(&r);
	sse_close(&s);

	cancel_on(id, "61");
	cancel_on(id, "62");
	cancel_on(id, "63");
	for (int i = 0; i < 3; i++) {
		pthread_join(b[i].thread, NULL);
		reply_release(&b[i].r);
	}
	tap_is_int(slow_tool_cancels(), cancels + 3, "the three slow calls were cancelled");
	free(id);
}

/* A session id of the right shape that no session has. */
#define NO_SESSION "0123456789abcdef0123456789abcdef"
#define MCP_HEADERS ACCEPT_BOTH "\r\n" CT_JSON "\r\n"

/* POSTs that the headers already settle are answered before their body is
 * sent; a body over its limit as it streams in. */
static void test_early_refusals(void)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	char path[128], headers[256], chunk[4096];
	char *id = mcp_initialize();
	int fd, started;
	long st;

	fd = raw_mcp_post(NO_SESSION, 12000, "{\"jsonrpc\"");
	st = raw_status(fd, &acc, 10000);
	tap_is_int(st, 404,
		   "/mcp: an unknown Mcp-Session-Id -> 404 before the body is sent "
		   "(12000 bytes announced, 10 sent)");
	tap_ok(acc.data && read_until(fd, &acc, "-32001", 2000), "... with the JSON-RPC -32001");
	close(fd);
	sbx_buf_reset(&acc);
	snprintf(path, sizeof(path), "/messages?session_id=%s", NO_SESSION);
	fd = raw_post(path, CT_JSON "\r\n", 12000, "{\"jsonrpc\"");
	tap_is_int(raw_status(fd, &acc, 10000), 404,
		   "/messages: an unknown session_id -> 404 before the body is sent");
	close(fd);
	sbx_buf_reset(&acc);

	started = slow_tool_started();
	expect_body(mcp_post(NULL, NULL,
			     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
			     "\"name\":\"slow\"}}"),
		    400, "Mcp-Session-Id header is required",
		    "/mcp: a tools/call without a session -> 400 (only an initialize comes "
		    "without one)");
	tap_is_int(slow_tool_started(), started, "... and the tool did not run");

	/* Chunked: no Content-Length to refuse it by; refused as it passes
	 * server.max_body (16k here), its bytes dropped, answered at its end. */
	snprintf(headers, sizeof(headers), MCP_HEADERS "Mcp-Session-Id: %s\r\n", id ? id : "x");
	memset(chunk, ' ', sizeof(chunk));
	fd = raw_post_chunked("/mcp", headers);
	{
		bool sent =
		    send_chunk(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 40);
		for (int i = 0; i < 5; i++)
			sent = sent && send_chunk(fd, chunk, sizeof(chunk));
		sent = sent && send_chunk(fd, "", 0);
		st = raw_status(fd, &acc, 10000);
		tap_ok(sent && st == 413 && read_until(fd, &acc, "(server.max_body)", 2000),
		       "/mcp: a chunked body past server.max_body -> 413 naming the limit (%ld)",
		       st);
	}
	close(fd);
	sbx_buf_reset(&acc);

	/* ... and one that goes on for more than SBX_HTTP_DRAIN_MAX (8 MiB)
	 * past it gets its connection closed, without an answer. */
	fd = raw_post_chunked("/mcp", headers);
	{
		size_t sent = 0;
		while (sent < (size_t)10 << 20 && send_chunk(fd, chunk, sizeof(chunk)))
			sent += sizeof(chunk);
		if (sent >= (size_t)10 << 20)
			send_chunk(fd, "", 0);
		tap_ok(closed_within(fd, 10000) && raw_status(fd, &acc, 100) == 0,
		       "... one that goes on for 10 MiB is cut off without an answer (%zu bytes "
		       "went out)",
		       sent);
	}
	close(fd);
	sbx_buf_release(&acc);
	expect_status(mcp_post(id, NULL, ping_body), 200, "the session answers a ping afterwards");
	free(id);
}

/* Sends up to N bytes of zeros on FD in 64 KiB pieces, waiting WAIT_MS
 * after the first: false when the peer reset the connection. */
static bool keeps_taking(int fd, size_t n, int wait_ms)
{
	static char zeros[64 * 1024];
	int err = 0;
	socklen_t len = sizeof(err);

	for (size_t sent = 0; sent < n; sent += sizeof(zeros)) {
		if (!send_quiet(fd, zeros, sizeof(zeros)))
			return false;
		if (sent == 0)
			sleep_ms(wait_ms);
	}
	sleep_ms(wait_ms);
	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 &&
	       send_quiet(fd, zeros, 1);
}

/* An answer from the headers (here 404 for an unknown session, 413 for a
 * body past server.max_body) goes to a client that sends its body without
 * waiting for 100-continue (Node's fetch): it says Connection: close, and
 * the socket lingers after it (what the client still sends is read and
 * dropped, then it ends), so the client reads the answer, not a reset. */
static void test_refusal_lingers(void)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	static const struct {
		size_t length;
		long status;
		const char *what;
	} cases[] = {
	    {1 << 20, 413, "a 1 MiB body past server.max_body"},
	    {12000, 404, "an unknown Mcp-Session-Id with a 12000-byte body"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = raw_mcp_post(NO_SESSION, cases[i].length, "{");
		long st = raw_status(fd, &acc, 10000);
		bool close_said = acc.data && strcasestr(acc.data, "\r\nConnection: close\r\n");
		/* The server's end of the answer (its FIN), then the body goes on. */
		bool ended = closed_within(fd, 5000);
		bool taken = keeps_taking(fd, (size_t)1 << 20, 200);

		tap_ok(st == cases[i].status && close_said && ended && taken,
		       "%s -> %ld with Connection: close, and the 1 MiB the client sends after "
		       "it is taken, not reset (status %ld, close %d, end %d, taken %d)",
		       cases[i].what, cases[i].status, st, close_said, ended, taken);
		close(fd);
		sbx_buf_reset(&acc);
	}
	sbx_buf_release(&acc);
}

static const char *const slow_bodies[] = {
    "{\"jsonrpc\":\"2.0\",\"id\":700,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":701,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":702,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":703,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":704,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":705,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":706,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":707,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}",
};

/* Starts the CALLS_PER_SESSION slow calls (ids 700...) on SESSION in B. */
static void start_slow_calls(struct bg_post *b, const char *session)
{
	for (int i = 0; i < CALLS_PER_SESSION; i++) {
		b[i] = (struct bg_post){.session = session, .body = slow_bodies[i]};
		pthread_create(&b[i].thread, NULL, bg_post_main, &b[i]);
	}
}

/* POSTs one more slow call (id 799) on SESSION: true when it is refused at
 * once with the JSON-RPC error that names the limit. */
static bool one_call_more_refused(const char *session)
{
	struct reply r =
	    mcp_post(session, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":799,\"method\":\"tools/call\",\"params\":{"
		     "\"name\":\"slow\"}}");
	char want[64];
	bool ok;

	snprintf(want, sizeof(want), "at most %d at once", CALLS_PER_SESSION);
	ok = r.status == 200 && r.body.data &&
	     strstr(r.body.data, "{\"jsonrpc\":\"2.0\",\"id\":799,\"error\":{\"code\":-32000,") &&
	     strstr(r.body.data, "(server.max_calls_per_session)") && strstr(r.body.data, want) &&
	     strstr(r.body.data, "notifications/cancelled");
	if (!ok)
		tap_diag("  got %ld: %s", r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	return ok;
}

/* server.max_calls_per_session: a session at its most gets the next call
 * refused at once; another session is served meanwhile and has its own. */
static void test_calls_per_session(void)
{
	char *a = mcp_initialize(), *b = mcp_initialize();
	struct bg_post on_a[CALLS_PER_SESSION], on_b[CALLS_PER_SESSION];
	int started = slow_tool_started(), cancels = slow_tool_cancels(), ended = 0;
	struct reply r;

	start_slow_calls(on_a, a);
	started += CALLS_PER_SESSION;
	tap_ok(slow_tool_wait_started(started), "session A runs %d slow calls, its most",
	       CALLS_PER_SESSION);
	tap_ok(one_call_more_refused(a),
	       "... one more on A -> refused at once: a JSON-RPC error under its id that names "
	       "server.max_calls_per_session and what to do");
	tap_is_int(slow_tool_started(), started, "... and it did not run");

	expect_body(mcp_post(b, NULL, ping_body), 200, "\"result\":{}",
		    "session B: a ping is answered meanwhile");
	r = mcp_post(b, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
		     "\"name\":\"list_sandboxes\",\"arguments\":{}}}");
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"id\":5,\"result\":") &&
		   !strstr(r.body.data, "\"isError\":true"),
	       "session B: a list_sandboxes call is answered meanwhile (%s)",
	       r.body.data ? r.body.data : "");
	reply_release(&r);

	start_slow_calls(on_b, b);
	started += CALLS_PER_SESSION;
	tap_ok(slow_tool_wait_started(started), "session B runs %d slow calls of its own meanwhile",
	       CALLS_PER_SESSION);
	tap_ok(one_call_more_refused(b), "... and its next one is refused too");

	for (int i = 0; i < CALLS_PER_SESSION; i++) {
		char rid[8];
		snprintf(rid, sizeof(rid), "%d", 700 + i);
		cancel_on(a, rid);
		cancel_on(b, rid);
	}
	for (int i = 0; i < CALLS_PER_SESSION; i++) {
		pthread_join(on_a[i].thread, NULL);
		pthread_join(on_b[i].thread, NULL);
		ended += on_a[i].r.status == 202;
		ended += on_b[i].r.status == 202;
		reply_release(&on_a[i].r);
		reply_release(&on_b[i].r);
	}
	tap_is_int(ended, 2 * CALLS_PER_SESSION, "the %d calls are cancelled (202 each)",
		   2 * CALLS_PER_SESSION);
	tap_is_int(slow_tool_cancels(), cancels + 2 * CALLS_PER_SESSION, "... every tool saw it");
	expect_body(mcp_post(a, NULL,
			     "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{"
			     "\"name\":\"progress\",\"arguments\":{}}}"),
		    200, "\"id\":9,\"result\"", "session A runs a call again once its calls ended");
	free(a);
	free(b);
}

/* Lifts the soft open-file limit to N (or the hard limit); the soft limit. */
static rlim_t raise_nofile(rlim_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur < n) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > n ? n : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur;
}

/* Another server on the loopback with the settings SETS (NULL-terminated
 * "key=value"), port 0; the helpers talk to it until server_end. */
struct server {
	struct sbx_settings s;
	sbx_auth *auth; /* from the settings' [auth] */
	sbx_http *h;
	struct http_target saved;
};

static void server_begin(struct server *sv, sbx_mcp *mcp, sbx_manager *manager, bool v6,
			 const char *const *sets)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_settings_init(&sv->s) < 0 ||
	    sbx_settings_set(&sv->s, v6 ? "server.listen=::1" : "server.listen=127.0.0.1", &err) <
		0 ||
	    sbx_settings_set(&sv->s, "server.port=0", &err) < 0)
		tap_bail(err.msg[0] ? err.msg : "settings");
	for (size_t i = 0; sets[i]; i++)
		if (sbx_settings_set(&sv->s, sets[i], &err) < 0)
			tap_bail(err.msg[0] ? err.msg : "settings");
	if (sbx_auth_open(&sv->s, &sv->auth, &err) < 0)
		tap_bail(err.msg);
	{
		const struct sbx_http_config hc = {
		    .settings = &sv->s, .mcp = mcp, .manager = manager, .auth = sv->auth};
		if (sbx_http_start(&hc, &sv->h, &err) < 0)
			tap_bail(err.msg);
	}
	sv->saved = http_use(sbx_http_port(sv->h), v6);
}

static void server_end(struct server *sv)
{
	sv->h = sbx_http_stop(sv->h);
	sv->auth = sbx_auth_free(sv->auth);
	sbx_settings_release(&sv->s);
	http_restore(&sv->saved);
}

#define MANY_SSE 600

/* Waits (up to 3 s) until SV's server counts N connections admitted (closed
 * ones are counted off a moment after their clients go). */
static bool connections_settle(struct server *sv, int n)
{
	struct timespec t0;
	struct sbx_conn_counts c;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		sbx_conn_counts(sv->h, &c);
		if (c.admitted == n)
			return true;
		if (elapsed_ms(&t0) > 3000) {
			tap_diag("  %d connections admitted, not %d", c.admitted, n);
			return false;
		}
		sleep_ms(20);
	}
}

/* A keep-alive connection that made one request (GET /health) and is idle
 * now: its fd, or -1. */
static int idle_connection(void)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	char req[256];
	int fd = connect_raw();
	bool ok;

	snprintf(req, sizeof(req), "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n\r\n",
		 http_target.port);
	send_all(fd, req);
	ok = read_until(fd, &acc, "{\"status\":\"ok\"}", 5000);
	sbx_buf_release(&acc);
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

/* FD (an idle keep-alive connection) is still open and serves a request. */
static bool still_serves(int fd)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	char req[256];
	bool ok;

	snprintf(req, sizeof(req), "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n\r\n",
		 http_target.port);
	ok = send_quiet(fd, req, strlen(req)) && read_until(fd, &acc, "{\"status\":\"ok\"}", 5000);
	sbx_buf_release(&acc);
	return ok;
}

/* MANY_SSE idle SSE streams at once, all served, with max_connections=1000. */
static void test_many_sse(sbx_mcp *mcp, sbx_manager *manager)
{
	static struct sse_session ss[MANY_SSE];
	struct server sv;
	struct timespec t0;
	int got = 0;
	rlim_t lim = raise_nofile(4096);

	if (lim < 2 * MANY_SSE + 600) {
		char why[160];
		snprintf(why, sizeof(why),
			 "%d SSE streams need %d open files in this process (server and "
			 "clients); RLIMIT_NOFILE allows %llu",
			 MANY_SSE, 2 * MANY_SSE + 600, (unsigned long long)lim);
		tap_skip(2, why);
		return;
	}
	server_begin(&sv, mcp, manager, false,
		     HS("server.max_connections=1000", "server.max_connections_per_ip=0",
			"server.max_sessions_per_ip=0"));
	/* Every request goes out first; then each stream is read. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < MANY_SSE; i++)
		sse_step(&ss[i], SSE_CONNECT);
	for (int i = 0; i < MANY_SSE; i++) {
		long left = 20000 - elapsed_ms(&t0);
		ss[i].ms = left > 100 ? (int)left : 100;
		if (sse_step(&ss[i], SSE_OPEN) && sse_step(&ss[i], SSE_ENDPOINT))
			got++;
	}
	tap_is_int(got, MANY_SSE,
		   "server.max_connections=1000: %d idle SSE streams all get "
		   "their endpoint event (%ld ms)",
		   MANY_SSE, elapsed_ms(&t0));
	{
		struct reply r = request("GET", "/health", NULL, NULL);
		tap_is_int(r.status, 200, "... and the server still answers /health");
		reply_release(&r);
	}
	for (int i = 0; i < MANY_SSE; i++)
		sse_close(&ss[i]);
	server_end(&sv);
}

/* server.max_connections=8: the 9th connection gets 503 + Retry-After at
 * once; a closed SSE client frees its slot and session within 2 s. */
static void test_over_limit(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session ss[8] = {0};
	struct server sv;
	struct timespec t0;
	struct reply r;
	long status = 0;
	int got = 0;

	server_begin(&sv, mcp, manager, false, HS("server.max_connections=8"));
	for (int i = 0; i < 8; i++)
		got += sse_open(&ss[i], SSE_ENDPOINT);
	tap_is_int(got, 8, "server.max_connections=8: 8 SSE streams open");
	connections_settle(&sv, 8);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = request("GET", "/health", NULL, NULL);
	tap_ok(r.status == 503 && header_of(&r, "Retry-After") &&
		   strcmp(header_of(&r, "Retry-After"), "1") == 0 && elapsed_ms(&t0) < 1000 &&
		   r.body.data && strstr(r.body.data, "server.max_connections = 8"),
	       "... a 9th connection, none idle -> 503 with Retry-After: 1 at once, naming "
	       "server.max_connections (%ld, %ld ms: %s)",
	       r.status, elapsed_ms(&t0), r.body.data ? r.body.data : "");
	reply_release(&r);

	/* The client of stream 0 goes away: its session ends, its slot frees. */
	sse_close(&ss[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < 3000) {
		r = sse_post(ss[0].id, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
		status = r.status;
		reply_release(&r);
		if (status == 404)
			break;
		sleep_ms(50);
	}
	tap_ok(status == 404 && elapsed_ms(&t0) < 2000,
	       "a closed SSE client's session is gone within 2 s (%ld after %ld ms)", status,
	       elapsed_ms(&t0));
	/* The closed connections' slots free a moment after their sessions. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		r = sse_post(ss[1].id, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
		status = r.status;
		reply_release(&r);
		if (status != 202)
			sleep_ms(50);
	} while (status == 503 && elapsed_ms(&t0) < 2000);
	tap_is_int(status, 202, "... the others live on, and a new connection is served again");
	for (int i = 1; i < 8; i++)
		sse_close(&ss[i]);

	/* Eight idle keep-alive connections, from two addresses: a 9th
	 * connection closes the least recently used of all of them. */
	{
		int idle[8], alive = 0;
		got = 0;
		connections_settle(&sv, 0);
		for (int i = 0; i < 8; i++) {
			http_from(i % 2 ? "127.0.0.51" : "127.0.0.50");
			idle[i] = idle_connection();
			got += idle[i] >= 0;
			sleep_ms(20);
		}
		tap_is_int(got, 8, "8 idle keep-alive connections from two addresses");
		connections_settle(&sv, 8);
		sleep_ms(SBX_HTTP_EVICT_IDLE_MS + 300);
		/* 127.0.0.51 uses one of its own again: 127.0.0.50 holds as many
		 * and its oldest is the least recently used of all. */
		tap_ok(idle[1] >= 0 && still_serves(idle[1]), "... one of them used again");
		http_from("127.0.0.52");
		r = request("GET", "/health", NULL, NULL);
		tap_is_int(r.status, 200, "... a 9th connection from a third address is served");
		reply_release(&r);
		tap_ok(idle[0] >= 0 && closed_within(idle[0], 3000),
		       "... in place of the least recently used idle connection, closed");
		for (int i = 1; i < 8; i++)
			alive += idle[i] >= 0 && still_serves(idle[i]);
		tap_is_int(alive, 7, "... the other idle connections live and serve");
		for (int i = 0; i < 8; i++)
			if (idle[i] >= 0)
				close(idle[i]);
		tap_ok(connections_settle(&sv, 0),
		       "... all closed: none counted (an evicted one was counted off once)");
		http_from(NULL);
	}
	server_end(&sv);
}

/* A second server: IPv6 loopback when available, a public URL on another
 * host name, a 1 s session timeout; stopped with a stream open. */
static void test_second_server(sbx_mcp *mcp, sbx_manager *manager)
{
	struct server sv;
	char *id;
	bool v6;

	{
		int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
					  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		v6 = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (fd >= 0)
			close(fd);
	}
	server_begin(&sv, mcp, manager, v6,
		     HS("server.public_url=http://mcp.example:8080/", "server.session_timeout=1s"));
	tap_is_str(sbx_http_public_url(sv.h), "http://mcp.example:8080",
		   "server.public_url is the public URL (without the trailing slash)");
	expect_status(request("GET", "/health", NULL, NULL), 200, "GET /health on %s",
		      v6 ? "[::1]" : "127.0.0.1 (no IPv6 here)");
	expect_status(request("GET", "/health",
			      HS("Host: mcp.example:8080", "Origin: http://mcp.example:8080"),
			      NULL),
		      200, "the public URL's host and origin are allowed");
	expect_status(request("GET", "/health", HS("Host: mcp.example:9999"), NULL), 403,
		      "... on another port they are not");

	id = mcp_initialize();
	tap_ok(id != NULL, "initialize on the second server");
	expect_status(mcp_post(id, NULL, ping_body), 200, "the session answers at once");
	usleep(1600 * 1000);
	expect_status(mcp_post(id, NULL, ping_body), 404,
		      "after server.session_timeout idle it is gone (404)");
	free(id);

	{
		struct sse_session ss = {0};
		struct timespec t0;
		tap_ok(sse_open(&ss, SSE_ENDPOINT), "an SSE stream is open");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		sv.h = sbx_http_stop(sv.h);
		tap_ok(elapsed_ms(&t0) < 3000, "stop with a stream open takes %ld ms",
		       elapsed_ms(&t0));
		tap_ok(closed_within(ss.fd, 2000), "... and the stream is closed");
		sse_close(&ss);
	}
	server_end(&sv);
}

/* server.session_timeout=2s: an idle SSE stream ends, and its session with
 * it; a session in use (a call running past the timeout) is not expired,
 * and the call's end counts as use. Then the server stops with calls in
 * flight on both transports: they are cancelled, and the stop is quick. */
/* The chunked stream of S ends (its last chunk) within MS. */
static bool stream_ends(struct sse_session *s, int ms)
{
	return read_until(s->fd, &s->acc, "\r\n0\r\n\r\n", ms);
}

static void test_expiry(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session ss = {0}, busy = {0};
	struct bg_post b = {0};
	struct server sv;
	struct timespec t0;
	struct reply r;
	int started, cancels;
	char *id;
	long ms;

	server_begin(&sv, mcp, manager, false, HS("server.session_timeout=2s"));

	/* An idle stream. */
	tap_ok(sse_open(&ss, SSE_INITIALIZED), "session_timeout=2s: an SSE session is set up");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ms = stream_ends(&ss, 8000) ? elapsed_ms(&t0) : -1;
	tap_ok(ms >= 1900, "... idle, its stream ends after the timeout, not before (%ld ms)", ms);
	expect_status(sse_post(ss.id, ping_body), 404, "... and its session is gone (404)");
	sse_close(&ss);

	/* A stream whose session runs a call past the timeout lives on. */
	tap_ok(sse_open(&busy, SSE_INITIALIZED), "another SSE session is set up");
	started = slow_tool_started();
	cancels = slow_tool_cancels();
	r = sse_post(busy.id, "{\"jsonrpc\":\"2.0\",\"id\":81,\"method\":\"tools/call\","
			      "\"params\":{\"name\":\"slow\"}}");
	tap_ok(r.status == 202 && slow_tool_wait_started(started + 1), "... it runs a slow call");
	reply_release(&r);
	tap_ok(!stream_ends(&busy, 3500),
	       "... its stream is still open 3.5 s later (a session in use does not expire)");
	r = sse_post(busy.id, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			      "\"params\":{\"requestId\":81}}");
	tap_ok(r.status == 202 && slow_tool_wait_cancels(cancels + 1, 2000),
	       "... the call is cancelled (%ld)", r.status);
	reply_release(&r);
	tap_ok(stream_ends(&busy, 8000), "... and then, idle, the stream ends");
	sse_close(&busy);

	/* A Streamable HTTP session whose call outlasts the timeout: the
	 * call's end counts as use (the slow tool gives up after 5 s). */
	id = mcp_initialize();
	b.session = id;
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":82,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	started = slow_tool_started();
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(slow_tool_wait_started(started + 1), "/mcp: a slow call runs");
	pthread_join(b.thread, NULL);
	tap_ok(b.r.status == 200 && b.ms > 2500, "... and ends by itself after %ld ms (%ld)", b.ms,
	       b.r.status);
	reply_release(&b.r);
	expect_status(mcp_post(id, NULL, ping_body), 200,
		      "... its session answers right after, though idle-by-requests for longer "
		      "than the timeout");

	/* The stop with a call in flight on each transport. */
	tap_ok(sse_open(&ss, SSE_INITIALIZED), "an SSE session is set up");
	started = slow_tool_started();
	cancels = slow_tool_cancels();
	r = sse_post(ss.id, "{\"jsonrpc\":\"2.0\",\"id\":83,\"method\":\"tools/call\","
			    "\"params\":{\"name\":\"slow\"}}");
	reply_release(&r);
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":84,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(slow_tool_wait_started(started + 2), "a slow call runs on each transport");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sv.h = sbx_http_stop(sv.h);
	ms = elapsed_ms(&t0);
	tap_ok(slow_tool_cancels() == cancels + 2 && ms < 3000,
	       "the stop cancels both (%d of 2) and takes %ld ms (the calls would run 5 s)",
	       slow_tool_cancels() - cancels, ms);
	pthread_join(b.thread, NULL);
	reply_release(&b.r);
	sse_close(&ss);
	free(id);
	server_end(&sv);
}

/* VmRSS of this process (the server runs in it), in kB. */
static long vm_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

/* Samples VmRSS every 5 ms while running; keeps the highest. */
struct rss_peak {
	pthread_t thread;
	atomic_bool stop;
	long peak_kb;
};

static void *rss_peak_main(void *arg)
{
	struct rss_peak *p = arg;

	while (!atomic_load(&p->stop)) {
		long kb = vm_rss_kb();
		if (kb > p->peak_kb)
			p->peak_kb = kb;
		sleep_ms(5);
	}
	return NULL;
}

/* One hostile POST: BODY (LEN bytes, Content-Length LEN) to PATH with
 * HEADERS, sent until an answer (or a close) comes; its status. */
struct hostile {
	pthread_t thread;
	const char *path;
	char headers[256];
	const char *body;
	size_t len;
	long status;
};

static void *hostile_main(void *arg)
{
	struct hostile *h = arg;
	struct sbx_buf acc = SBX_BUF_INIT;
	char head[1024];
	size_t off = 0;
	int fd = connect_raw();

	snprintf(head, sizeof(head),
		 "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%sContent-Length: %zu\r\n\r\n", h->path,
		 http_target.port, h->headers, h->len);
	if (send_quiet(fd, head, strlen(head))) {
		while (off < h->len) {
			struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
			size_t n = h->len - off < 65536 ? h->len - off : 65536;
			ssize_t k;
			if (poll(&p, 1, 20000) <= 0 || (p.revents & (POLLIN | POLLHUP | POLLERR)))
				break; /* an answer came (or the server closed) */
			k = send(fd, h->body + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k < 0 && errno == EAGAIN)
				continue;
			if (k <= 0)
				break;
			off += (size_t)k;
		}
	}
	h->status = raw_status(fd, &acc, 20000);
	close(fd);
	sbx_buf_release(&acc);
	return NULL;
}

#define HOSTILE 16
#define BIG_BODY ((size_t)4 * 1024 * 1024 - 64)
/* What 16 hostile 4 MB bodies on live sessions may add to RSS: the 32 MiB
 * body budget and json-c's share. AddressSanitizer keeps freed blocks in
 * quarantine and pads each with redzones, so under it the bound is wider. */
#if defined(__SANITIZE_ADDRESS__)
#define LIVE_RSS_BOUND_KB (128 * 1024)
#else
#define LIVE_RSS_BOUND_KB (64 * 1024)
#endif

/* Runs HOSTILE posts at once; the growth of the peak VmRSS over before, in
 * kB. */
static long run_hostile(struct hostile *hs)
{
	struct rss_peak peak = {.peak_kb = 0};
	long before = vm_rss_kb();

	atomic_init(&peak.stop, false);
	pthread_create(&peak.thread, NULL, rss_peak_main, &peak);
	for (int i = 0; i < HOSTILE; i++)
		pthread_create(&hs[i].thread, NULL, hostile_main, &hs[i]);
	for (int i = 0; i < HOSTILE; i++)
		pthread_join(hs[i].thread, NULL);
	sleep_ms(50);
	atomic_store(&peak.stop, true);
	pthread_join(peak.thread, NULL);
	return (peak.peak_kb > before ? peak.peak_kb : before) - before;
}

/* A body of LEN bytes: "[1,1,...]" (VALUES), or a ping whose one string
 * fills it (a body that parses). malloc'd. */
static char *big_body(size_t len, bool values)
{
	static const char head[] =
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"s\":\"";
	char *b = malloc(len + 1);

	if (!b)
		tap_bail("malloc");
	if (values) {
		for (size_t i = 0; i < len; i += 2)
			memcpy(b + i, i + 2 < len ? "1," : "1]", i + 2 <= len ? 2 : 1);
		b[0] = '[';
	} else {
		memset(b, 'x', len);
		memcpy(b, head, sizeof(head) - 1);
		memcpy(b + len - 3, "\"}}", 3);
	}
	b[len] = '\0';
	return b;
}

/* A POST /mcp from address FROM that announces a 4 MiB body and sends its
 * first 16 bytes of VALUES, then holds: its connection (the Nth held). */
static int hold_body(const char *from, const char *headers, const char *values, int n)
{
	char head[512];
	int fd;

	http_from(from);
	fd = connect_raw();
	http_from(NULL);
	snprintf(head, sizeof(head),
		 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%sContent-Length: %d\r\n\r\n",
		 http_target.port, headers, 4 << 20);
	if (!send_quiet(fd, head, strlen(head)) || !send_quiet(fd, values, 16))
		tap_diag("  held body %d: send failed", n);
	return fd;
}

/* server.max_body=4m: the initialize cap of a POST without a session, the
 * JSON value count, the body budget, and what hostile 4 MB bodies cost. */
static void test_hostile_bodies(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	struct hostile hs[HOSTILE];
	struct sse_session ss = {0};
	char *values = big_body(BIG_BODY, true), *text = big_body(BIG_BODY, false);
	char headers[256], path[128], *id;
	struct server sv;
	long grew, st;
	int fd, good;

	server_begin(&sv, mcp, manager, false, HS("server.max_body=4m"));

	/* Without a session only an initialize, of at most 64 KiB. */
	fd = raw_post("/mcp", MCP_HEADERS, 100000, "{\"jsonrpc\"");
	st = raw_status(fd, &acc, 10000);
	tap_ok(st == 413 && read_until(fd, &acc, "only an initialize of at most 65536 bytes", 2000),
	       "/mcp without a session: 100000 bytes announced -> 413 before the body is sent, "
	       "saying why (%ld)",
	       st);
	close(fd);
	sbx_buf_reset(&acc);
	fd = raw_post_chunked("/mcp", MCP_HEADERS);
	{
		bool sent = true;
		for (int i = 0; i < 18; i++)
			sent = sent && send_chunk(fd, values, 4096);
		sent = sent && send_chunk(fd, "", 0);
		st = raw_status(fd, &acc, 10000);
		tap_ok(sent && st == 413 && read_until(fd, &acc, "only an initialize", 2000),
		       "... a chunked one past 64 KiB -> 413 (%ld)", st);
	}
	close(fd);
	sbx_buf_reset(&acc);
	{
		char *init = malloc(61000);
		if (!init)
			tap_bail("malloc");
		/* init_body without its last "}}", then a "pad" param. */
		memset(init, 'a', 61000);
		memcpy(init, init_body, strlen(init_body) - 2);
		memcpy(init + strlen(init_body) - 2, ",\"pad\":\"", 8);
		memcpy(init + 61000 - 4, "\"}}", 4);
		expect_status(mcp_post(NULL, NULL, init), 200,
			      "... an initialize of 61000 bytes is fine");
		free(init);
	}

	/* The value count: refused before json-c sees the body. */
	id = mcp_initialize();
	{
		char *b = malloc(200000);
		size_t n;
		if (!b)
			tap_bail("malloc");
		n = (size_t)snprintf(
		    b, 200000,
		    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"v\":[");
		for (int i = 0; i < 60000; i++)
			memcpy(b + n + 2 * (size_t)i, "1,", 2);
		memcpy(b + n + 2 * 60000 - 1, "]}}", 4);
		expect_body(mcp_post(id, NULL, b), 400, "too many JSON values",
			    "a body of 60000 JSON values -> 400 (too many JSON values)");
		memcpy(b + n + 2 * 40000 - 1, "]}}", 4);
		expect_body(mcp_post(id, NULL, b), 200, "\"id\":3,\"result\":{}",
			    "... one of 40000 is answered");
		free(b);
	}

	/* 16 unauthenticated 4 MB bodies at once: refused from their headers,
	 * none kept. */
	snprintf(path, sizeof(path), "/messages?session_id=%s", NO_SESSION);
	for (int i = 0; i < HOSTILE; i++) {
		hs[i] = (struct hostile){
		    .path = i % 2 ? path : "/mcp", .body = values, .len = BIG_BODY};
		snprintf(hs[i].headers, sizeof(hs[i].headers), "%s",
			 i % 2 ? CT_JSON "\r\n" : MCP_HEADERS);
	}
	grew = run_hostile(hs);
	good = 0;
	for (int i = 0; i < HOSTILE; i++)
		good += hs[i].status == (i % 2 ? 404 : 413);
	tap_is_int(good, HOSTILE,
		   "%d concurrent 4 MB bodies without a session: each 413 (/mcp) or 404 "
		   "(/messages)",
		   HOSTILE);
	tap_ok(grew < 16 * 1024, "... and RSS grew by %ld kB (bound: 16 MB; nothing is kept)",
	       grew);

	/* The same with live sessions: read within the body budget. */
	tap_ok(sse_open(&ss, SSE_INITIALIZED), "an SSE session on this server");
	snprintf(path, sizeof(path), "/messages?session_id=%s", ss.id);
	for (int i = 0; i < HOSTILE; i++) {
		hs[i] = (struct hostile){
		    .path = i % 2 ? path : "/mcp", .body = i % 2 ? text : values, .len = BIG_BODY};
		if (i % 2)
			snprintf(hs[i].headers, sizeof(hs[i].headers), CT_JSON "\r\n");
		else
			snprintf(hs[i].headers, sizeof(hs[i].headers),
				 MCP_HEADERS "Mcp-Session-Id: %s\r\n", id ? id : "x");
	}
	grew = run_hostile(hs);
	good = 0;
	for (int i = 0; i < HOSTILE; i++)
		good += hs[i].status == 503 || hs[i].status == (i % 2 ? 202 : 400);
	tap_is_int(good, HOSTILE,
		   "%d concurrent 4 MB bodies on live sessions: each answered (400 too many "
		   "values, 202 a ping, or 503 while the body budget is full)",
		   HOSTILE);
	tap_ok(grew < LIVE_RSS_BOUND_KB, "... and RSS grew by %ld kB (bound: %d MB)", grew,
	       LIVE_RSS_BOUND_KB / 1024);
	sse_close(&ss);

	/* The budget (32 MiB here): 8 bodies that announce 4 MiB fill it from
	 * their first bytes (a declared length is charged before its buffer is
	 * made), two from each of 4 client addresses (one address holds at most
	 * a quarter). */
	{
		int held[8];
		snprintf(headers, sizeof(headers), MCP_HEADERS "Mcp-Session-Id: %s\r\n",
			 id ? id : "x");
		for (int i = 0; i < 8; i++) {
			static const char *const from[] = {"127.0.0.10", "127.0.0.11", "127.0.0.12",
							   "127.0.0.13"};
			held[i] = hold_body(from[i / 2], headers, values, i);
		}
		/* Once the server has their first bytes, a body that does not
		 * fit is answered 503 from its headers (the probes send headers
		 * only: they hold nothing of the budget while they wait). */
		st = 0;
		for (int tries = 0; tries < 40 && st != 503; tries++) {
			sbx_buf_reset(&acc);
			fd = raw_mcp_post(id ? id : "x", 1000, "");
			st = raw_status(fd, &acc, 250);
			if (st != 503)
				close(fd);
		}
		tap_ok(st == 503 && strstr(acc.data, "\r\nRetry-After: 1\r\n") &&
			   read_until(fd, &acc, "fill its memory for them", 2000),
		       "8 bodies that announce 4 MiB and have sent 16 bytes each fill the body "
		       "budget: the next is 503 + Retry-After before its body is sent (%ld)",
		       st);
		if (st == 503)
			close(fd);
		sbx_buf_reset(&acc);
		fd = raw_post_chunked("/mcp", headers);
		st = send_chunk(fd, values, 1000) && send_chunk(fd, "", 0)
			 ? raw_status(fd, &acc, 10000)
			 : -1;
		tap_is_int(st, 503, "... a chunked one -> 503 once it is in");
		close(fd);
		for (int i = 0; i < 8; i++)
			close(held[i]);
		{
			struct timespec t0;
			struct reply r;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			do {
				r = mcp_post(id, NULL, ping_body);
				st = r.status;
				reply_release(&r);
				if (st != 200)
					sleep_ms(50);
			} while (st != 200 && elapsed_ms(&t0) < 10000);
			tap_is_int(st, 200, "once they are closed the budget is free again");
		}
	}

	/* One client address holds at most a quarter of the budget (8 MiB
	 * here): two bodies that announce 4 MiB take its share. */
	{
		int held[2];
		for (int i = 0; i < 2; i++) {
			held[i] = hold_body("127.0.0.20", headers, values, i);
		}
		/* Until the server has their first bytes, or while the bodies
		 * of the case above are still being let go (a 503 for the
		 * whole budget then), the probe may get another answer. */
		bool said = false;
		st = 0;
		for (int tries = 0; tries < 40 && !said; tries++) {
			sbx_buf_reset(&acc);
			http_from("127.0.0.20");
			fd = raw_mcp_post(id ? id : "x", 1000, "");
			http_from(NULL);
			st = raw_status(fd, &acc, 250);
			said = st == 503 && read_until(fd, &acc, "this client address", 2000);
			close(fd);
			if (!said)
				sleep_ms(50);
		}
		tap_ok(said,
		       "two bodies that announce 4 MiB from one address fill its share: its next "
		       "body is 503, saying so (%ld: %.200s)",
		       st, acc.data ? acc.data : "");
		sbx_buf_reset(&acc);
		http_from("127.0.0.20");
		fd = raw_post_chunked("/mcp", headers);
		http_from(NULL);
		st = send_chunk(fd, values, 1000) && send_chunk(fd, "", 0)
			 ? raw_status(fd, &acc, 10000)
			 : -1;
		tap_ok(st == 503 && read_until(fd, &acc, "this client address", 2000),
		       "... a chunked one from it -> 503 once it is in (%ld)", st);
		close(fd);
		http_from("127.0.0.21");
		{
			struct reply r = mcp_post(id, NULL, ping_body);
			tap_is_int(r.status, 200, "... while another address is served");
			reply_release(&r);
		}
		http_from(NULL);
		for (int i = 0; i < 2; i++)
			close(held[i]);
	}
	sbx_buf_release(&acc);
	free(id);
	free(values);
	free(text);
	server_end(&sv);
}

/* ---- stalled streams, queued bytes, sessions, slow bodies, addresses ---- */

/* The outbound queues on their own (src/http/event_stream.c), with a stand-in
 * server: what server.max_queued closes, and a full queue. */
struct fake_owner {
	struct sbx_outq q;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int refs, closed;
};

static struct fake_owner *fake_of(struct sbx_outq *q)
{
	return (struct fake_owner *)(void *)q; /* the first member */
}

static void fake_ref(struct sbx_outq *q)
{
	fake_of(q)->refs++;
}

static void fake_unref(struct sbx_outq *q)
{
	fake_of(q)->refs--;
}

static void fake_closed(struct sbx_outq *q)
{
	fake_of(q)->closed++;
}

static const struct sbx_outq_ops fake_ops = {
    .ref = fake_ref, .unref = fake_unref, .closed = fake_closed};

static void fake_init(struct fake_owner *o, struct sbx_http *h, size_t max_msgs, bool drop)
{
	memset(o, 0, sizeof(*o));
	pthread_mutex_init(&o->lock, NULL);
	sbx_cond_init_monotonic(&o->cond);
	sbx_outq_init(&o->q, h, &o->lock, &o->cond, &fake_ops, max_msgs, SIZE_MAX, drop);
	sbx_outq_list(&o->q);
}

static void fake_release(struct fake_owner *o)
{
	sbx_outq_unlist(&o->q);
	sbx_outq_close(&o->q);
	pthread_cond_destroy(&o->cond);
	pthread_mutex_destroy(&o->lock);
}

/* A message of LEN bytes in all (LEN >= 24). */
static struct sbx_sse_msg *msg_of(size_t len)
{
	char data[2048];
	struct sbx_sse_msg *m;

	memset(data, 'x', len - 23);
	data[len - 23] = '\0';
	m = sbx_sse_msg_new("message", data);
	if (!m || m->len != len)
		tap_bail("sbx_sse_msg_new");
	return m;
}

static void test_outq(void)
{
	struct sbx_http h;
	struct fake_owner a, b, c, d;
	bool ok;

	memset(&h, 0, sizeof(h));
	h.queued_max = 1000;
	atomic_init(&h.queued, 0);
	pthread_mutex_init(&h.outq_lock, NULL);
	fake_init(&a, &h, 100, false);
	fake_init(&b, &h, 100, false);
	ok = sbx_outq_push(&a.q, msg_of(700)) && sbx_outq_push(&b.q, msg_of(200));
	tap_ok(ok && atomic_load(&h.queued) == 900, "queues: 700 + 200 bytes queued, under 1000");
	ok = sbx_outq_push(&b.q, msg_of(200));
	tap_ok(ok && a.q.closed && a.closed == 1 && b.closed == 0 && !b.q.closed,
	       "server.max_queued: a message that passes it closes the biggest queue (not the "
	       "one it goes to), and its owner is told once");
	tap_ok(a.q.queue.count == 0 && atomic_load(&a.q.bytes) == 0 &&
		   atomic_load(&h.queued) == 400 && b.q.queue.count == 2,
	       "... the closed queue is drained at once: 400 bytes left, the other's (%zu)",
	       atomic_load(&h.queued));
	tap_ok(!sbx_outq_push(&a.q, msg_of(100)) && atomic_load(&h.queued) == 400,
	       "... and takes nothing more");
	tap_ok(!sbx_outq_push(&b.q, msg_of(1001)) && b.q.closed && b.closed == 1 &&
		   atomic_load(&h.queued) == 0,
	       "a message bigger than the budget closes its own queue (the biggest now)");
	tap_is_int(a.refs + b.refs, 0, "... the references taken are given back");

	fake_init(&c, &h, 2, false);
	fake_init(&d, &h, 2, true);
	ok = sbx_outq_push(&c.q, msg_of(100)) && sbx_outq_push(&c.q, msg_of(100)) &&
	     sbx_outq_push(&d.q, msg_of(100)) && sbx_outq_push(&d.q, msg_of(100));
	tap_ok(ok && atomic_load(&h.queued) == 400, "two queues of at most 2 messages, full");
	ok = sbx_outq_push(&c.q, msg_of(100));
	tap_ok(!ok && c.q.closed && c.closed == 1 && c.q.queue.count == 0 &&
		   atomic_load(&h.queued) == 200,
	       "a queue past its own bound is closed, drained at once (its 200 bytes freed)");
	ok = sbx_outq_push(&d.q, msg_of(100));
	tap_ok(!ok && !d.q.closed && d.closed == 0 && d.q.queue.count == 2 &&
		   atomic_load(&h.queued) == 200,
	       "... one that drops when full drops the message and stays open");
	fake_release(&a);
	fake_release(&b);
	fake_release(&c);
	fake_release(&d);
	tap_ok(atomic_load(&h.queued) == 0 && !h.outqs,
	       "all released: nothing counted, none listed");
	pthread_mutex_destroy(&h.outq_lock);
}

#define FLOOD_CALL(id)                                                                             \
	"{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":"      \
	"\"flood\",\"arguments\":{\"frames\":200,\"size\":65536}}}"

/* S stops reading: its receive buffer shrinks and nothing is read on. */
static void stall(int fd)
{
	int small = 4096;

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
}

/* server.stream_stall_timeout=1s: an idle stream whose client reads lives
 * on (keepalives every half second); one whose client stops reading is cut
 * off and its call cancelled, on both transports. */
static void test_stalled_streams(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session ss = {0};
	struct sbx_buf acc = SBX_BUF_INIT;
	struct server sv;
	struct reply r;
	int cancels, started, keepalives = 0, fd;
	char *id;

	server_begin(&sv, mcp, manager, false, HS("server.stream_stall_timeout=1s"));

	tap_ok(sse_open(&ss, SSE_INITIALIZED), "stream_stall_timeout=1s: an SSE session is set up");
	sbx_buf_reset(&ss.acc);
	read_until(ss.fd, &ss.acc, "no such text", 2500);
	for (const char *p = ss.acc.data; p && (p = strstr(p, SBX_SSE_KEEPALIVE_FRAME)); p++)
		keepalives++;
	tap_ok(keepalives >= 2, "... idle 2.5 s, its client reading: %d keepalives came",
	       keepalives);
	r = sse_post(ss.id, ping_body);
	tap_ok(r.status == 202 && read_until(ss.fd, &ss.acc, "\"id\":2,\"result\":{}", 5000),
	       "... and the stream lives on: a ping's reply arrives on it (%ld)", r.status);
	reply_release(&r);

	/* The client stops reading while a call floods its stream. */
	cancels = slow_tool_cancels();
	started = slow_tool_started();
	stall(ss.fd);
	r = sse_post(ss.id, FLOOD_CALL(91));
	tap_ok(r.status == 202 && slow_tool_wait_started(started + 1),
	       "SSE: a call sends 200 notifications of 64 KiB, the client reads none");
	reply_release(&r);
	tap_ok(slow_tool_wait_cancels(cancels + 1, 8000),
	       "... the stream is cut off and the call cancelled (the tool would wait 5 s)");
	expect_status(sse_post(ss.id, ping_body), 404, "... and its session is gone (404)");
	sse_close(&ss);
	/* Had it not been cancelled, the close does it: settled before the next. */
	slow_tool_wait_cancels(cancels + 1, 6000);

	/* The same for the event stream of a POST to /mcp. */
	id = mcp_initialize();
	cancels = slow_tool_cancels();
	started = slow_tool_started();
	fd = raw_mcp_post(id ? id : "x", 0, FLOOD_CALL(92));
	stall(fd);
	tap_ok(slow_tool_wait_started(started + 1) && raw_status(fd, &acc, 5000) == 200,
	       "/mcp: a call floods its event stream, the client reads no more");
	tap_ok(slow_tool_wait_cancels(cancels + 1, 8000),
	       "... the stream is cut off and the call cancelled");
	close(fd);
	expect_status(mcp_post(id, NULL, ping_body), 200, "... the session itself lives on");
	free(id);
	sbx_buf_release(&acc);
	server_end(&sv);
}

/* server.max_queued=1m: a stream that does not read is closed as soon as
 * its queue makes the total pass it, long before stream_stall_timeout; the
 * other streams are not touched. */
static void test_queue_budget(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session a = {0}, b = {0};
	struct sbx_buf acc = SBX_BUF_INIT;
	struct server sv;
	struct reply r;
	int cancels, started, fd;
	char *id;

	server_begin(&sv, mcp, manager, false,
		     HS("server.max_queued=1m", "server.stream_stall_timeout=60s"));
	tap_ok(sse_open(&a, SSE_INITIALIZED) && sse_open(&b, SSE_INITIALIZED),
	       "max_queued=1m: two SSE sessions are set up");
	cancels = slow_tool_cancels();
	started = slow_tool_started();
	stall(a.fd);
	r = sse_post(a.id, FLOOD_CALL(93));
	tap_ok(r.status == 202 && slow_tool_wait_started(started + 1),
	       "a call floods stream A (12.5 MiB), its client reads none");
	reply_release(&r);
	tap_ok(slow_tool_wait_cancels(cancels + 1, 4000),
	       "... stream A is closed at once (the stall timeout is 60 s) and its call "
	       "cancelled");
	expect_status(sse_post(a.id, ping_body), 404, "... its session is gone (404)");
	r = sse_post(b.id, ping_body);
	tap_ok(r.status == 202 && read_until(b.fd, &b.acc, "\"id\":2,\"result\":{}", 5000),
	       "... stream B lives on: a ping's reply arrives on it (%ld)", r.status);
	reply_release(&r);
	sse_close(&a);
	sse_close(&b);
	/* Had A's call not been cancelled, the close does it: settled before the
	 * next. */
	slow_tool_wait_cancels(cancels + 1, 6000);

	id = mcp_initialize();
	cancels = slow_tool_cancels();
	started = slow_tool_started();
	fd = raw_mcp_post(id ? id : "x", 0, FLOOD_CALL(94));
	stall(fd);
	tap_ok(slow_tool_wait_started(started + 1), "/mcp: a call floods its event stream");
	tap_ok(slow_tool_wait_cancels(cancels + 1, 4000),
	       "... its queue passes max_queued: the stream is closed, the call cancelled");
	close(fd);
	free(id);
	sbx_buf_release(&acc);
	server_end(&sv);
}

/* server.max_sessions=8: a new session evicts the least recently used idle
 * one, never one with a call running or an SSE stream; with none idle it is
 * refused with 503, a JSON-RPC error and Retry-After. */
static void test_session_table(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session ss[7] = {0};
	struct bg_post b = {0};
	struct server sv;
	struct reply r;
	char *ids[9] = {0};
	int started, cancels, alive = 0, got = 0;

	server_begin(&sv, mcp, manager, false, HS("server.max_sessions=8"));
	for (int i = 0; i < 8; i++)
		ids[i] = mcp_initialize();
	/* Session 0, the oldest, runs a call. */
	started = slow_tool_started();
	cancels = slow_tool_cancels();
	b.session = ids[0];
	b.body = "{\"jsonrpc\":\"2.0\",\"id\":95,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\",\"arguments\":{}}}";
	pthread_create(&b.thread, NULL, bg_post_main, &b);
	tap_ok(ids[7] && slow_tool_wait_started(started + 1),
	       "max_sessions=8: 8 sessions, the first runs a call");
	/* The others are used after it: the busy one is the least recently
	 * used, the 2nd the least recently used idle one. */
	for (int i = 1; i < 8; i++) {
		r = mcp_post(ids[i], NULL, ping_body);
		alive += r.status == 200;
		reply_release(&r);
	}
	tap_is_int(alive, 7, "... then each of the others answers a ping");
	alive = 0;
	ids[8] = mcp_initialize();
	tap_ok(ids[8] != NULL, "a 9th initialize is served");
	expect_status(mcp_post(ids[1], NULL, ping_body), 404,
		      "... the least recently used idle session (the 2nd) was evicted");
	for (int i = 2; i < 9; i++) {
		r = mcp_post(ids[i], NULL, ping_body);
		alive += r.status == 200;
		reply_release(&r);
	}
	tap_is_int(alive, 7, "... the others answer");
	tap_is_int(slow_tool_cancels(), cancels, "... and the busy one's call runs on");

	/* SSE streams take the idle ones' places; then nothing can go. */
	for (int i = 0; i < 7; i++)
		got += sse_open(&ss[i], SSE_ENDPOINT);
	tap_is_int(got, 7, "7 SSE streams open, evicting the idle sessions");
	r = mcp_post(NULL, NULL, init_body);
	tap_ok(r.status == 503 && r.body.data && strstr(r.body.data, "\"code\":-32000") &&
		   strstr(r.body.data, "server.max_sessions") && header_of(&r, "Retry-After"),
	       "with none idle an initialize -> 503 with a JSON-RPC error naming "
	       "server.max_sessions, and Retry-After (%ld %s)",
	       r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	expect_body(request("GET", "/sse", NULL, NULL), 503, "server.max_sessions",
		    "... so does GET /sse");
	cancel_on(ids[0], "95");
	pthread_join(b.thread, NULL);
	tap_is_int(b.r.status, 202, "the busy session's call, cancelled, ends (202)");
	reply_release(&b.r);
	for (int i = 0; i < 7; i++)
		sse_close(&ss[i]);
	for (int i = 0; i < 9; i++)
		free(ids[i]);
	server_end(&sv);
}

/* server.max_sessions_per_ip=2: an address past it loses its own least
 * recently used idle session, or is refused when none is idle; other
 * addresses are not touched. */
static void test_sessions_per_ip(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session a = {0}, b = {0};
	struct server sv;
	struct reply r;
	char *x, *y, *z, *w;

	server_begin(&sv, mcp, manager, false, HS("server.max_sessions_per_ip=2"));
	http_from("127.0.0.30");
	tap_ok(sse_open(&a, SSE_ENDPOINT) && sse_open(&b, SSE_ENDPOINT),
	       "max_sessions_per_ip=2: two SSE streams from 127.0.0.30");
	r = request("GET", "/sse", NULL, NULL);
	tap_ok(r.status == 503 && r.body.data && strstr(r.body.data, "server.max_sessions_per_ip"),
	       "... a third GET /sse from it -> 503 naming server.max_sessions_per_ip (%ld)",
	       r.status);
	reply_release(&r);
	r = mcp_post(NULL, NULL, init_body);
	tap_ok(r.status == 503 && r.body.data && strstr(r.body.data, "\"code\":-32000") &&
		   strstr(r.body.data, "server.max_sessions_per_ip"),
	       "... an initialize from it -> 503 with the JSON-RPC error (%ld)", r.status);
	reply_release(&r);

	http_from("127.0.0.31");
	x = mcp_initialize();
	y = mcp_initialize();
	z = mcp_initialize();
	tap_ok(x && y && z, "127.0.0.31: three initializes are served");
	http_from(NULL);
	expect_status(mcp_post(x, NULL, ping_body), 404, "... its oldest idle session is gone");
	expect_status(mcp_post(y, NULL, ping_body), 200, "... the next one lives");
	w = mcp_initialize();
	tap_ok(w != NULL, "another address is served");
	sse_close(&a);
	sse_close(&b);
	free(x);
	free(y);
	free(z);
	free(w);
	server_end(&sv);
}

/* server.body_timeout=1s, body_min_rate=1k: a body trickled in at 100
 * bytes a second has its connection closed; one sent at once is served. */
static void test_slow_body(sbx_mcp *mcp, sbx_manager *manager)
{
	struct server sv;
	struct timespec t0;
	bool closed = false;
	char *id;
	int fd;

	server_begin(&sv, mcp, manager, false,
		     HS("server.body_timeout=1s", "server.body_min_rate=1k"));
	id = mcp_initialize();
	fd = raw_mcp_post(id ? id : "x", 100000, "");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!closed && elapsed_ms(&t0) < 6000) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char buf[256];
		if (!send_quiet(fd, "          ", 10))
			closed = true;
		else if (poll(&p, 1, 100) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0)
			closed = true;
	}
	tap_ok(closed,
	       "body_timeout=1s, body_min_rate=1k: a body trickled at 100 bytes/s is cut "
	       "off (%ld ms)",
	       elapsed_ms(&t0));
	close(fd);
	expect_status(mcp_post(id, NULL, ping_body), 200, "... a body sent at once is served");
	free(id);
	server_end(&sv);
}

/* Waits up to a second for one address's share of the overflow band to
 * fill; *CC: the counts then. */
static void band_filled(struct server *sv, struct sbx_conn_counts *cc)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sbx_conn_counts(sv->h, cc);
		if (cc->over < SBX_HTTP_OVERFLOW_PER_PEER)
			sleep_ms(5);
	} while (cc->over < SBX_HTTP_OVERFLOW_PER_PEER && elapsed_ms(&t0) < 1000);
}

/* The overflow band: one address past server.max_connections_per_ip holds
 * at most SBX_HTTP_OVERFLOW_PER_PEER connections waiting for their 503;
 * past that its connections are closed at accept, while other addresses
 * are served; a silent one of them is closed after SBX_HTTP_OVER_TIMEOUT_S;
 * the counts go back to zero. One address lingers at most
 * SBX_HTTP_LINGER_PER_PEER sockets. */
static void test_overflow_band(sbx_mcp *mcp, sbx_manager *manager)
{
	enum { N = 4 + SBX_HTTP_OVERFLOW_PER_PEER };
	int fds[N], extra = -1, quiet = 0, lingering = 0;
	struct sbx_conn_counts cc;
	struct sbx_buf acc = SBX_BUF_INIT;
	struct server sv;
	struct timespec t0;
	bool closed_at_accept;

	server_begin(&sv, mcp, manager, false, HS("server.max_connections_per_ip=4"));
	http_from("127.0.0.60");
	for (int i = 0; i < N; i++)
		fds[i] = connect_raw();
	band_filled(&sv, &cc);
	for (int i = 0; i < N; i++) {
		struct pollfd p = {.fd = fds[i], .events = POLLIN};
		quiet += poll(&p, 1, 0) == 0;
	}
	tap_ok(quiet == N && cc.admitted == 4 && cc.over == SBX_HTTP_OVERFLOW_PER_PEER,
	       "max_connections_per_ip=4: 4 silent connections from 127.0.0.60 admitted, %d more "
	       "wait for their 503 (%d quiet, %d admitted, %d over)",
	       SBX_HTTP_OVERFLOW_PER_PEER, quiet, cc.admitted, cc.over);
	closed_at_accept = !connect_quiet(&extra, 1000);
	tap_ok(closed_at_accept, "... one more from it is closed at accept (its share of the band "
				 "is full)");
	if (extra >= 0)
		close(extra);
	http_from("127.0.0.61");
	expect_status(request("GET", "/health", NULL, NULL), 200,
		      "... another address is served meanwhile");
	http_from("127.0.0.60");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	tap_ok(closed_within(fds[N - 1], 3000 * SBX_HTTP_OVER_TIMEOUT_S) &&
		   elapsed_ms(&t0) < 2000 * SBX_HTTP_OVER_TIMEOUT_S,
	       "... a silent connection waiting for its 503 is closed after %d s, not 60 (%ld ms)",
	       SBX_HTTP_OVER_TIMEOUT_S, elapsed_ms(&t0));
	for (int i = 0; i < N; i++)
		close(fds[i]);
	tap_ok(connections_settle(&sv, 0), "... all closed: no connection counted");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sbx_conn_counts(sv.h, &cc);
		if (cc.over)
			sleep_ms(20);
	} while (cc.over && elapsed_ms(&t0) < 3000);
	tap_is_int(cc.over, 0, "... and none over a limit");

	/* Connections of the band that trickle their requests (a byte a
	 * second: libmicrohttpd's timeout of silence never passes) leave it
	 * once they have been in it SBX_HTTP_OVER_TIMEOUT_S and a newcomer
	 * needs the place: it is let in and answered 503. The address's 4
	 * admitted connections are SSE streams (busy: none can be closed to
	 * make room). */
	http_from("127.0.0.62");
	{
		struct sse_session ss[4] = {0};
		int trickled = 0, gone = 0, got = 0;
		struct reply r;

		for (int i = 0; i < 4; i++)
			got += sse_open(&ss[i], SSE_ENDPOINT);
		connections_settle(&sv, 4);
		for (int i = 0; i < SBX_HTTP_OVERFLOW_PER_PEER; i++)
			fds[i] = connect_raw();
		band_filled(&sv, &cc);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (elapsed_ms(&t0) < 1000 * (SBX_HTTP_OVER_TIMEOUT_S + 2)) {
			trickled = 0;
			for (int i = 0; i < SBX_HTTP_OVERFLOW_PER_PEER; i++)
				trickled += send_quiet(fds[i], "G", 1);
			sleep_ms(1000);
		}
		sbx_conn_counts(sv.h, &cc);
		tap_ok(got == 4 && trickled == SBX_HTTP_OVERFLOW_PER_PEER &&
			   cc.over == SBX_HTTP_OVERFLOW_PER_PEER,
		       "4 SSE streams from 127.0.0.62 and %d connections trickling their "
		       "requests for %d s, all in the band (%d streams, %d trickling, %d over)",
		       SBX_HTTP_OVERFLOW_PER_PEER, SBX_HTTP_OVER_TIMEOUT_S + 2, got, trickled,
		       cc.over);
		r = request("GET", "/health", NULL, NULL);
		tap_is_int(r.status, 503,
			   "... a newcomer from it is let into the band (not closed at accept) and "
			   "answered 503");
		reply_release(&r);
		for (int i = 0; i < SBX_HTTP_OVERFLOW_PER_PEER; i++) {
			/* Shut down before the newcomer was let in: its end is
			 * there now (the server sends a band connection nothing
			 * before its request is whole). */
			struct pollfd p = {.fd = fds[i], .events = POLLIN};
			char b[64];

			gone += poll(&p, 1, 0) > 0 && recv(fds[i], b, sizeof(b), MSG_DONTWAIT) <= 0;
		}
		tap_is_int(gone, 1,
			   "... and one trickling connection past its time in the band was closed "
			   "for it, not more");
		for (int i = 0; i < SBX_HTTP_OVERFLOW_PER_PEER; i++)
			close(fds[i]);
		for (int i = 0; i < 4; i++)
			sse_close(&ss[i]);
	}
	tap_ok(connections_settle(&sv, 0), "... all closed: no connection counted");

	/* Refusals from the headers, their clients still connected: at most
	 * SBX_HTTP_LINGER_PER_PEER of one address linger. */
	for (int i = 0; i < SBX_HTTP_LINGER_PER_PEER + 2; i++) {
		fds[i] = raw_mcp_post(NO_SESSION, 1 << 20, "{");
		raw_status(fds[i], &acc, 5000);
		sbx_buf_reset(&acc);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < 3000 &&
	       (lingering = sbx_linger_count(sv.h->linger)) < SBX_HTTP_LINGER_PER_PEER)
		sleep_ms(20);
	sleep_ms(200);
	lingering = sbx_linger_count(sv.h->linger);
	tap_is_int(lingering, SBX_HTTP_LINGER_PER_PEER,
		   "%d refusals from one address with their bodies pending: %d linger",
		   SBX_HTTP_LINGER_PER_PEER + 2, SBX_HTTP_LINGER_PER_PEER);
	/* A second address lingers its share with one more (128 / 3), so
	 * that a third still finds room. A byte more of each pending body
	 * keeps the first address's sockets from their 5 s without one
	 * meanwhile (a loaded machine is slow to make 66 refusals). */
	{
		enum { SHARE2 = SBX_HTTP_LINGER_MAX / 3 };
		int more[SBX_HTTP_LINGER_PER_PEER + 2], third, before;

		http_from("127.0.0.63");
		for (int i = 0; i < SBX_HTTP_LINGER_PER_PEER + 2; i++) {
			more[i] = raw_mcp_post(NO_SESSION, 1 << 20, "{");
			raw_status(more[i], &acc, 5000);
			sbx_buf_reset(&acc);
			if (i % 16 == 15)
				for (int k = 0; k < SBX_HTTP_LINGER_PER_PEER + 2; k++)
					send_quiet(fds[k], " ", 1);
		}
		for (int k = 0; k < SBX_HTTP_LINGER_PER_PEER + 2; k++)
			send_quiet(fds[k], " ", 1);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (elapsed_ms(&t0) < 3000 &&
		       sbx_linger_count(sv.h->linger) < SBX_HTTP_LINGER_PER_PEER + SHARE2)
			sleep_ms(20);
		sleep_ms(200);
		before = sbx_linger_count(sv.h->linger);
		tap_is_int(before, SBX_HTTP_LINGER_PER_PEER + SHARE2,
			   "%d refusals from a second address: %d of them linger (a share of %d "
			   "sockets with one address more)",
			   SBX_HTTP_LINGER_PER_PEER + 2, SHARE2, SBX_HTTP_LINGER_MAX);
		http_from("127.0.0.64");
		for (int k = 0; k < SBX_HTTP_LINGER_PER_PEER + 2; k++) {
			send_quiet(fds[k], " ", 1);
			send_quiet(more[k], " ", 1);
		}
		third = raw_mcp_post(NO_SESSION, 1 << 20, "{");
		raw_status(third, &acc, 5000);
		sbx_buf_reset(&acc);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (elapsed_ms(&t0) < 3000 && sbx_linger_count(sv.h->linger) == before)
			sleep_ms(20);
		tap_is_int(sbx_linger_count(sv.h->linger), before + 1,
			   "... and a refusal from a third address still lingers");
		close(third);
		for (int i = 0; i < SBX_HTTP_LINGER_PER_PEER + 2; i++)
			close(more[i]);
	}
	for (int i = 0; i < SBX_HTTP_LINGER_PER_PEER + 2; i++)
		close(fds[i]);
	sbx_buf_release(&acc);
	http_from(NULL);
	server_end(&sv);
}

/* server.max_connections_per_ip=4: with its 4 connections busy (SSE
 * streams) a 5th from the address gets 503 + Retry-After naming the limit,
 * never a bare close; with idle keep-alive connections among them the
 * least recently used idle one is closed and the newcomer served. Other
 * addresses are served throughout. */
/* N new connections (FDS), each with a request begun: its first line and
 * a header sent, not the end of its headers; 20 ms apart, so the server
 * has them in this order. How many were sent. */
static int begin_requests(int *fds, int n)
{
	int got = 0;

	for (int i = 0; i < n; i++) {
		char req[128];

		snprintf(req, sizeof(req), "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n",
			 http_target.port);
		fds[i] = connect_raw();
		got += send_quiet(fds[i], req, strlen(req));
		sleep_ms(20);
	}
	return got;
}

/* Sends TAIL (what ends a request) on each of FDS[0..N), reads its 200
 * and closes it: how many were answered. */
static int end_requests(int *fds, int n, const char *tail)
{
	int got = 0;

	for (int i = 0; i < n; i++) {
		struct sbx_buf acc = SBX_BUF_INIT;

		got += send_quiet(fds[i], tail, strlen(tail)) &&
		       read_until(fds[i], &acc, "{\"status\":\"ok\"}", 5000);
		sbx_buf_release(&acc);
		close(fds[i]);
	}
	return got;
}

static void test_connections_per_ip(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sse_session ss[4] = {0};
	struct server sv;
	struct timespec t0;
	int got = 0, idle[4];
	bool served = false;
	struct reply r;

	server_begin(&sv, mcp, manager, false, HS("server.max_connections_per_ip=4"));
	http_from("127.0.0.40");
	for (int i = 0; i < 4; i++)
		got += sse_open(&ss[i], SSE_ENDPOINT);
	tap_is_int(got, 4, "max_connections_per_ip=4: 4 SSE streams from 127.0.0.40");
	connections_settle(&sv, 4);
	r = request("GET", "/health", NULL, NULL);
	tap_ok(r.status == 503 && header_of(&r, "Retry-After") &&
		   strcmp(header_of(&r, "Retry-After"), "1") == 0 && r.body.data &&
		   strstr(r.body.data, "server.max_connections_per_ip = 4") &&
		   strstr(r.body.data, "none of them idle"),
	       "... a 5th connection from it, none idle -> 503 + Retry-After naming "
	       "server.max_connections_per_ip (%ld: %s)",
	       r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	http_from("127.0.0.41");
	expect_status(request("GET", "/health", NULL, NULL), 200, "... another address is served");
	http_from("127.0.0.40");
	sse_close(&ss[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!served && elapsed_ms(&t0) < 3000) {
		r = request("GET", "/health", NULL, NULL);
		served = r.status == 200;
		reply_release(&r);
		if (!served)
			sleep_ms(50);
	}
	tap_ok(served, "... once one of its streams closes, the address is served again");
	for (int i = 1; i < 4; i++)
		sse_close(&ss[i]);

	/* Four idle keep-alive connections (the pool a client keeps after its
	 * calls): a 5th connection closes the least recently used of them. */
	http_from("127.0.0.42");
	got = 0;
	connections_settle(&sv, 0);
	for (int i = 0; i < 4; i++) {
		idle[i] = idle_connection();
		got += idle[i] >= 0;
		sleep_ms(20);
	}
	tap_is_int(got, 4, "4 idle keep-alive connections from 127.0.0.42");
	connections_settle(&sv, 4);
	/* Idle for less than SBX_HTTP_EVICT_IDLE_MS: their clients may be
	 * reusing them right now; the newcomer gets the 503. */
	/* Used one after another, 100 ms apart: the server's idle lists have
	 * them in this order however its threads are scheduled. */
	got = 0;
	for (int i = 0; i < 4; i++) {
		got += idle[i] >= 0 && still_serves(idle[i]);
		sleep_ms(100);
	}
	r = request("GET", "/health", NULL, NULL);
	tap_ok(got == 4 && r.status == 503,
	       "... a 5th while all 4 were used just now -> 503 (none idle for %d ms) (%ld)",
	       SBX_HTTP_EVICT_IDLE_MS, r.status);
	reply_release(&r);
	sleep_ms(SBX_HTTP_EVICT_IDLE_MS + 300);
	/* The first is used again: the second is now the least recently used. */
	tap_ok(idle[0] >= 0 && still_serves(idle[0]), "... the first one used again");
	r = request("GET", "/health", NULL, NULL);
	tap_is_int(r.status, 200, "... a 5th connection from it is served, not refused");
	reply_release(&r);
	tap_ok(idle[1] >= 0 && closed_within(idle[1], 3000),
	       "... in place of its least recently used idle connection, closed");
	tap_ok(idle[0] >= 0 && still_serves(idle[0]) && idle[2] >= 0 && still_serves(idle[2]) &&
		   idle[3] >= 0 && still_serves(idle[3]),
	       "... its other idle connections live and serve");
	for (int i = 0; i < 4; i++)
		if (idle[i] >= 0)
			close(idle[i]);
	tap_ok(connections_settle(&sv, 0),
	       "... all closed: none counted (an evicted one was counted off once)");

	/* Four connections each mid-request (its first line and a header
	 * sent, the end of its headers not yet): busy, not idle, however long
	 * their clients take, so a 5th is refused rather than one of them
	 * closed under its request. */
	http_from("127.0.0.43");
	got = begin_requests(idle, 4);
	tap_ok(got == 4 && connections_settle(&sv, 4),
	       "4 connections from 127.0.0.43, each with a request begun");
	sleep_ms(SBX_HTTP_EVICT_IDLE_MS + 300);
	r = request("GET", "/health", NULL, NULL);
	tap_ok(r.status == 503 && r.body.data && strstr(r.body.data, "none of them idle"),
	       "... a 5th connection %d ms later -> 503: none of them is idle (%ld: %s)",
	       SBX_HTTP_EVICT_IDLE_MS + 300, r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	tap_is_int(end_requests(idle, 4, "\r\n"), 4,
		   "... each of the 4 requests, ended, is answered 200");
	tap_ok(connections_settle(&sv, 0), "... all closed: none counted");

	/* Four new connections whose clients have sent nothing yet (a loaded
	 * client can take seconds between its connect and its request): not
	 * idle, so a 5th SBX_HTTP_EVICT_IDLE_MS later is refused rather than
	 * one of them closed just before its request comes; each is then
	 * served. */
	http_from("127.0.0.45");
	got = 0;
	for (int i = 0; i < 4; i++)
		got += (idle[i] = connect_raw()) >= 0;
	tap_ok(got == 4 && connections_settle(&sv, 4),
	       "4 new connections from 127.0.0.45, nothing sent on them");
	sleep_ms(SBX_HTTP_EVICT_IDLE_MS + 300);
	r = request("GET", "/health", NULL, NULL);
	tap_ok(r.status == 503 && r.body.data && strstr(r.body.data, "none of them idle"),
	       "... a 5th connection %d ms later -> 503: a new connection is not idle (%ld: %s)",
	       SBX_HTTP_EVICT_IDLE_MS + 300, r.status, r.body.data ? r.body.data : "");
	reply_release(&r);
	{
		char req[128];

		snprintf(req, sizeof(req), "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n\r\n",
			 http_target.port);
		tap_is_int(end_requests(idle, 4, req), 4,
			   "... each of the 4, its request sent late, is answered 200");
	}
	tap_ok(connections_settle(&sv, 0), "... all closed: none counted");

	/* The same four, their clients trickling a header line every 2 s (a
	 * slow-headers attack: each byte in time for libmicrohttpd's timeout
	 * of silence): once the oldest has been at its headers for
	 * SBX_HTTP_HEAD_MS, a 5th is let in in its place. */
	http_from("127.0.0.44");
	got = begin_requests(idle, 4);
	tap_ok(got == 4 && connections_settle(&sv, 4),
	       "4 connections from 127.0.0.44, each with a request begun");
	for (int waited = 0; waited < SBX_HTTP_HEAD_MS + 300; waited += 2000) {
		sleep_ms(SBX_HTTP_HEAD_MS + 300 - waited < 2000 ? SBX_HTTP_HEAD_MS + 300 - waited
								: 2000);
		for (int i = 0; i < 4; i++)
			send_quiet(idle[i], "X-Slow: 1\r\n", 11);
	}
	r = request("GET", "/health", NULL, NULL);
	tap_is_int(r.status, 200,
		   "... their headers still coming %d ms on, a 5th connection is served",
		   SBX_HTTP_HEAD_MS + 300);
	reply_release(&r);
	tap_ok(closed_within(idle[0], 3000), "... in place of the oldest of them, closed");
	got = 0;
	for (int i = 1; i < 4; i++) {
		struct sbx_buf acc = SBX_BUF_INIT;

		got += send_quiet(idle[i], "\r\n", 2) &&
		       read_until(idle[i], &acc, "{\"status\":\"ok\"}", 5000);
		sbx_buf_release(&acc);
	}
	tap_is_int(got, 3, "... the other 3, ended, are answered 200");
	for (int i = 0; i < 4; i++)
		close(idle[i]);
	tap_ok(connections_settle(&sv, 0), "... all closed: none counted");
	http_from(NULL);
	server_end(&sv);
}

/* ---- API keys (issue 13) ---- */

#define WHOAMI_BODY                                                                                \
	"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"whoami\"," \
	"\"arguments\":{}}}"
#define CHALLENGE "Bearer realm=\"mcp-sandbox\""
#define CHALLENGE_INVALID "Bearer realm=\"mcp-sandbox\", error=\"invalid_token\""
/* A well-formed key that is in no keys file. */
#define WRONG_KEY                                                                                  \
	"msk_0123456789ab_0000000000000000000000000000000000000000000000000000000000000000"

/* "NAME: VALUE" in BUF. */
static const char *hdr(char *buf, size_t n, const char *name, const char *value)
{
	snprintf(buf, n, "%s: %s", name, value);
	return buf;
}

static const char *bearer(char *buf, size_t n, const char *key)
{
	snprintf(buf, n, "Authorization: Bearer %s", key);
	return buf;
}

/* Posts BODY on SESSION (may be NULL) with the header line AUTH every 100
 * ms until the status is WANT: the milliseconds that took, or -1 after 5 s. */
static long wait_status(const char *session, const char *auth, const char *body, long want)
{
	struct timespec t0;
	struct reply r;
	long st;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < 5000) {
		r = mcp_post(session, auth, body);
		st = r.status;
		reply_release(&r);
		if (st == want)
			return elapsed_ms(&t0);
		sleep_ms(100);
	}
	return -1;
}

/* The same until the body of a 200 holds NEEDLE. */
static long wait_status_body(const char *session, const char *auth, const char *body,
			     const char *needle)
{
	struct timespec t0;
	struct reply r;
	bool got;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < 5000) {
		r = mcp_post(session, auth, body);
		got = r.status == 200 && r.body.data && strstr(r.body.data, needle);
		reply_release(&r);
		if (got)
			return elapsed_ms(&t0);
		sleep_ms(100);
	}
	return -1;
}

/* Asserts a 401 with the challenge WANT (exactly) and a JSON error. */
static void expect_401(struct reply r, const char *want, const char *what)
{
	const char *wa = header_of(&r, "WWW-Authenticate");

	if (!tap_ok(r.status == 401 && wa && strcmp(wa, want) == 0 && r.body.data &&
			strncmp(r.body.data, "{\"error\":\"", 10) == 0 &&
			!strstr(r.body.data, "0123456789ab_0000"),
		    "%s -> 401, WWW-Authenticate: %s, {\"error\"}", what, want))
		tap_diag("  got %ld, WWW-Authenticate: %s, %s", r.status, wa ? wa : "(none)",
			 r.body.data ? r.body.data : "");
	reply_release(&r);
}

/* `mcp-sandboxd -c CONF keys add TENANT`: the key it prints, in KEY. */
static bool keys_add_cli(const char *conf, const char *tenant, char key[SBX_API_KEY_LEN + 1])
{
	const char *builddir = getenv("SBX_BUILDDIR");
	char cmd[1024], line[256] = "";
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s/src/mcp-sandboxd' -c '%s' keys add %s 2>/dev/null",
		 builddir ? builddir : ".", conf, tenant);
	p = popen(cmd, "r");
	if (!p)
		return false;
	if (!fgets(line, sizeof(line), p))
		line[0] = '\0';
	st = pclose(p);
	line[strcspn(line, "\n")] = '\0';
	if (st != 0 || strlen(line) != SBX_API_KEY_LEN)
		return false;
	memcpy(key, line, SBX_API_KEY_LEN + 1);
	return true;
}

static void test_auth(sbx_mcp *mcp, sbx_manager *manager)
{
	char dir[] = "/tmp/test-http-keys.XXXXXX", keys[128], conf[160], set[192];
	char alice[SBX_API_KEY_LEN + 1], bob[SBX_API_KEY_LEN + 1], carol[SBX_API_KEY_LEN + 1];
	char ha[160], hb[160], hc[160], hs[160], path[256];
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf acc = SBX_BUF_INIT;
	struct sse_session s = {0};
	struct timespec t0;
	struct server sv;
	struct reply r;
	char *a = NULL, *c = NULL;
	size_t count = 0;
	long st;
	int fd;

	/* Without keys (the main server): every session is tenant default. */
	a = mcp_initialize();
	expect_body(mcp_post(a, NULL, WHOAMI_BODY), 200, "owner=default",
		    "no keys: a session acts for tenant default");
	free(a);
	a = NULL;
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	snprintf(conf, sizeof(conf), "%s/conf.ini", dir);
	{
		FILE *f = fopen(conf, "w");
		if (!f)
			tap_bail("conf");
		fprintf(f, "[auth]\nkeys_file = %s\n", keys);
		fclose(f);
	}
	tap_ok(keys_add_cli(conf, "alice", alice),
	       "keys: mcp-sandboxd keys add alice prints a key");
	if (sbx_keys_add(keys, "bob", NULL, 0, bob, &err) < 0 ||
	    sbx_keys_add(keys, "carol", NULL, 0, carol, &err) < 0)
		tap_bail(err.msg);
	snprintf(set, sizeof(set), "auth.keys_file=%s", keys);
	server_begin(&sv, mcp, manager, false, HS(set));
	bearer(ha, sizeof(ha), alice);
	bearer(hb, sizeof(hb), bob);
	bearer(hc, sizeof(hc), carol);

	/* No key (from 127.0.0.60: each address below stays under the
	 * failure limit). */
	http_from("127.0.0.60");
	expect_401(mcp_post(NULL, NULL, init_body), CHALLENGE, "keys: POST /mcp without a key");
	expect_401(request("GET", "/mcp", HS("Accept: text/event-stream"), NULL), CHALLENGE,
		   "keys: GET /mcp without a key");
	expect_401(request("DELETE", "/mcp", HS("Mcp-Session-Id: " NO_SESSION), NULL), CHALLENGE,
		   "keys: DELETE /mcp without a key");
	expect_401(request("GET", "/sse", HS("Accept: text/event-stream"), NULL), CHALLENGE,
		   "keys: GET /sse without a key");
	snprintf(path, sizeof(path), "/mcp?api_key=%s", alice);
	expect_401(request("POST", path, HS(ACCEPT_BOTH, CT_JSON), init_body), CHALLENGE,
		   "keys: ?api_key= on /mcp is not taken (the right key)");
	expect_status(request("GET", "/health", NULL, NULL), 200, "keys: GET /health stays open");
	/* Links carry no key: a signed one passes; server.unsigned_links is
	 * ignored while keys are checked. */
	sv.s.server.unsigned_links = true;
	expect_status(request("GET", "/artifacts/nosuchsandbox/plot.png", NULL, NULL), 403,
		      "keys: unsigned_links = true is ignored: an unsigned link -> 403");
	sv.s.server.unsigned_links = false;
	{
		char kid[SBX_KEY_ID_LEN + 1];
		snprintf(kid, sizeof(kid), "%.*s", SBX_KEY_ID_LEN, alice + 4);
		expect_status(request("GET",
				      signed_path_kid(mcp, "nosuchsandbox", "plot.png", kid,
						      time(NULL) + 60, ""),
				      NULL, NULL),
			      404,
			      "keys: a link signed for alice's key needs no key (unknown sandbox "
			      "-> 404)");
		expect_body(
		    request("GET",
			    signed_path(mcp, "nosuchsandbox", "plot.png", time(NULL) + 60, ""),
			    NULL, NULL),
		    403, "revoked link",
		    "keys: a signed link without a key id (made with auth off) -> 403");
		expect_body(request("GET",
				    signed_path_kid(mcp, "nosuchsandbox", "plot.png",
						    "ffffffffffff", time(NULL) + 60, ""),
				    NULL, NULL),
			    403, "revoked link",
			    "keys: a signed link for an unknown key id -> 403");
	}

	/* Wrong keys (127.0.0.61). */
	http_from("127.0.0.61");
	expect_401(mcp_post(NULL, "Authorization: Bearer " WRONG_KEY, init_body), CHALLENGE_INVALID,
		   "keys: a wrong key as Bearer");
	expect_401(mcp_post(NULL, "X-API-Key: " WRONG_KEY, init_body), CHALLENGE_INVALID,
		   "keys: a wrong key as X-API-Key");
	expect_401(request("GET", "/sse?api_key=" WRONG_KEY, HS("Accept: text/event-stream"), NULL),
		   CHALLENGE_INVALID, "keys: a wrong key as ?api_key= on /sse");
	{
		const char *const two[] = {ACCEPT_BOTH, CT_JSON, ha,
					   hdr(hs, sizeof(hs), "X-API-Key", bob), NULL};
		expect_401(request("POST", "/mcp", two, init_body), CHALLENGE_INVALID,
			   "keys: alice's key as Bearer and bob's as X-API-Key");
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fd = raw_post("/mcp", MCP_HEADERS "Authorization: Bearer " WRONG_KEY "\r\n", 100000000,
		      "{\"jsonrpc\"");
	st = raw_status(fd, &acc, 5000);
	tap_ok(st == 401 && elapsed_ms(&t0) < 2000 && strstr(acc.data, "invalid_token"),
	       "keys: a wrong key with Content-Length: 100000000 -> 401 at once, the body "
	       "unsent (%ld after %ld ms)",
	       st, elapsed_ms(&t0));
	close(fd);
	sbx_buf_reset(&acc);

	/* The right keys (127.0.0.62). */
	http_from("127.0.0.62");
	a = mcp_initialize_with(ha);
	tap_ok(a != NULL, "keys: initialize with alice's key as Bearer -> 200 with a session");
	expect_body(mcp_post(a, ha, WHOAMI_BODY), 200, "owner=alice",
		    "keys: ... its tool calls act for tenant alice");
	{
		char *x = mcp_initialize_with(hdr(hs, sizeof(hs), "X-API-Key", bob));
		tap_ok(x != NULL, "keys: initialize with bob's key as X-API-Key -> 200");
		expect_body(mcp_post(x, hs, WHOAMI_BODY), 200, "owner=bob",
			    "keys: ... acting for tenant bob");
		free(x);
	}
	expect_401(mcp_post(a, NULL, ping_body), CHALLENGE, "keys: alice's session without a key");
	expect_body(mcp_post(a, hb, ping_body), 404, "-32001",
		    "keys: alice's session with bob's key -> 404, as an unknown session");
	{
		char sh[64];
		snprintf(sh, sizeof(sh), "Mcp-Session-Id: %s", a ? a : "x");
		expect_status(request("DELETE", "/mcp", HS(sh, hb), NULL), 404,
			      "keys: DELETE of alice's session with bob's key -> 404");
	}
	expect_body(mcp_post(a, ha, ping_body), 200, "\"result\"",
		    "keys: ... and alice's session lives on for alice");

	snprintf(path, sizeof(path), "/sse?api_key=%s", alice);
	s.path = path;
	tap_ok(sse_open(&s, SSE_INITIALIZED),
	       "keys: GET /sse?api_key=alice's key opens a stream that names /messages, which "
	       "takes initialize without a key");
	r = sse_post(s.id, WHOAMI_BODY);
	tap_ok(r.status == 202 && read_until(s.fd, &s.acc, "owner=alice", 5000),
	       "keys: ... its tool calls act for tenant alice");
	reply_release(&r);
	sse_close(&s);
	/* The value is percent-decoded: "msk%5F..." is the same key. */
	snprintf(path, sizeof(path), "/sse?api_key=msk%%5F%s", bob + 4);
	s = (struct sse_session){.path = path};
	tap_ok(sse_open(&s, SSE_ENDPOINT), "keys: ?api_key= percent-encoded is decoded");
	sse_close(&s);

	/* Revocation (127.0.0.63): carol's key refused within about 2 s, her
	 * SSE stream ended, her links refused. */
	http_from("127.0.0.63");
	c = mcp_initialize_with(hc);
	tap_ok(c != NULL, "keys: carol's key works");
	snprintf(path, sizeof(path), "/sse?api_key=%s", carol);
	s = (struct sse_session){.path = path};
	tap_ok(sse_open(&s, SSE_INITIALIZED), "keys: carol opens an SSE stream with her key");
	{
		char id[SBX_KEY_ID_LEN + 1];
		long ms;
		snprintf(id, sizeof(id), "%.*s", SBX_KEY_ID_LEN, carol + 4);
		expect_status(request("GET",
				      signed_path_kid(mcp, "nosuchsandbox", "plot.png", id,
						      time(NULL) + 60, ""),
				      NULL, NULL),
			      404, "keys: a link for carol's key passes the link check");
		if (sbx_keys_revoke(keys, NULL, id, NULL, &count, &err) < 0)
			tap_bail(err.msg);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		tap_ok(closed_within(s.fd, 4000) && elapsed_ms(&t0) <= 3500,
		       "keys: revoking carol's key ends her open SSE stream without a request "
		       "(%ld ms)",
		       elapsed_ms(&t0));
		r = sse_post(s.id, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}");
		tap_ok(r.status == 404, "keys: ... and its /messages endpoint is 404 (%ld)",
		       r.status);
		reply_release(&r);
		sse_close(&s);
		expect_body(request("GET",
				    signed_path_kid(mcp, "nosuchsandbox", "plot.png", id,
						    time(NULL) + 60, ""),
				    NULL, NULL),
			    403, "revoked link", "keys: ... and the links made for it -> 403");
		ms = wait_status(c, hc, ping_body, 401);
		tap_ok(ms >= 0 && ms <= 2500,
		       "keys: a revoked key -> 401 within 2.5 s, on its open session too (%ld ms)",
		       ms);
		expect_401(mcp_post(NULL, hc, init_body), CHALLENGE_INVALID,
			   "keys: ... and for a new initialize");
	}

	/* Failures from one address: past SBX_AUTH_FAIL_MAX, 429 (127.0.0.64),
	 * while another address is served (127.0.0.65). */
	http_from("127.0.0.64");
	{
		int n401 = 0;
		for (int i = 0; i < SBX_AUTH_FAIL_MAX; i++) {
			r = mcp_post(NULL, "Authorization: Bearer " WRONG_KEY, init_body);
			n401 += r.status == 401;
			reply_release(&r);
		}
		tap_is_int(n401, SBX_AUTH_FAIL_MAX,
			   "keys: %d failures from one address -> 401 each", SBX_AUTH_FAIL_MAX);
	}
	r = mcp_post(NULL, "X-API-Key: " WRONG_KEY, init_body);
	{
		const char *ra = header_of(&r, "Retry-After");
		int secs = ra ? atoi(ra) : 0;
		tap_ok(r.status == 429 && secs >= 1 && secs <= 60,
		       "keys: ... its next failure -> 429, Retry-After %d", secs);
	}
	reply_release(&r);
	{
		char *y = mcp_initialize_with(ha);
		tap_ok(y != NULL,
		       "keys: ... while alice's right key from the same address is served (one "
		       "client failing locks out no other behind its address)");
		expect_body(mcp_post(y, ha, WHOAMI_BODY), 200, "owner=alice",
			    "keys: ... and her calls too");
		free(y);
	}
	expect_status(request("GET", "/sse?api_key=" WRONG_KEY, NULL, NULL), 429,
		      "keys: ... GET /sse from it -> 429");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fd = raw_post("/mcp", MCP_HEADERS, 100000000, "{\"jsonrpc\"");
	st = raw_status(fd, &acc, 5000);
	tap_ok(st == 429 && elapsed_ms(&t0) < 2000,
	       "keys: ... a 100 MB POST from it without a key -> 429 at once, its body unsent "
	       "(%ld)",
	       st);
	close(fd);
	sbx_buf_reset(&acc);
	expect_status(request("GET", "/health", NULL, NULL), 200,
		      "keys: ... GET /health still 200");
	http_from("127.0.0.65");
	expect_401(mcp_post(NULL, "Authorization: Bearer " WRONG_KEY, init_body), CHALLENGE_INVALID,
		   "keys: another address with a wrong key, not 429");
	{
		char *y = mcp_initialize_with(ha);
		tap_ok(y != NULL, "keys: another address with alice's key -> 200");
		free(y);
	}
	http_from("127.0.0.64");
	expect_status(mcp_post(NULL, "Authorization: Bearer " WRONG_KEY, init_body), 429,
		      "keys: successes leave the first address's failures at 429");

	/* A keys file that stops parsing fails closed (127.0.0.66): no key is
	 * accepted, /ready says so; mended, the keys work again. */
	http_from("127.0.0.66");
	{
		FILE *f = fopen(keys, "a");
		long ms;
		if (!f || fputs("this line does not parse\n", f) < 0 || fclose(f) != 0)
			tap_bail("keys file");
		ms = wait_status(NULL, ha, init_body, 503);
		tap_ok(ms >= 0 && ms <= 2500,
		       "keys: a keys file that no longer parses -> alice's right key gets 503 "
		       "within 2.5 s (%ld ms): no key is accepted",
		       ms);
		expect_body(request("GET", "/ready", NULL, NULL), 503,
			    "the keys file cannot be used",
			    "keys: ... and GET /ready is 503 saying so");
		if (truncate(keys, 0) < 0)
			tap_bail("truncate the keys file");
		if (sbx_keys_add(keys, "dave", NULL, 0, carol, &err) < 0)
			tap_bail(err.msg);
		/* alice's line is gone with the truncation: dave's key checks
		 * the mended file. */
		snprintf(hc, sizeof(hc), "Authorization: Bearer %s", carol);
		ms = wait_status(NULL, hc, init_body, 200);
		tap_ok(ms >= 0, "keys: ... mended, a key is accepted again (%ld ms)", ms);
		r = request("GET", "/ready", NULL, NULL);
		tap_ok(!r.body.data || !strstr(r.body.data, "keys file"),
		       "keys: ... and GET /ready no longer names the keys file");
		reply_release(&r);
	}

	http_from(NULL);
	sbx_buf_release(&acc);
	free(a);
	free(c);
	server_end(&sv);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path) != 0)
		tap_diag("could not remove %s", dir);
}

/* Sessions of API key tenants: server.max_sessions_per_tenant=2 bounds
 * one tenant (its own idle session goes, else 503 naming the limit) and
 * leaves the others alone; when the whole table (server.max_sessions=8) is
 * full, a tenant's new session evicts its own idle one before another
 * tenant's older one. */
static void test_sessions_per_tenant(sbx_mcp *mcp, sbx_manager *manager)
{
	char dir[] = "/tmp/test-http-tenants.XXXXXX", keys[128], set[192];
	char alice[SBX_API_KEY_LEN + 1], bob[SBX_API_KEY_LEN + 1], ha[160], hb[160], path[256];
	struct sbx_error err = SBX_ERROR_INIT;
	struct sse_session s1 = {0}, s2 = {0};
	struct server sv;
	struct reply r;
	char *x[5] = {0}, *b[4] = {0};
	int alive = 0;

	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	if (sbx_keys_add(keys, "alice", NULL, 0, alice, &err) < 0 ||
	    sbx_keys_add(keys, "bob", NULL, 0, bob, &err) < 0)
		tap_bail(err.msg);
	bearer(ha, sizeof(ha), alice);
	bearer(hb, sizeof(hb), bob);
	snprintf(set, sizeof(set), "auth.keys_file=%s", keys);

	server_begin(&sv, mcp, manager, false, HS(set, "server.max_sessions_per_tenant=2"));
	snprintf(path, sizeof(path), "/sse?api_key=%s", alice);
	s1.path = s2.path = path;
	http_from("127.0.0.70");
	tap_ok(sse_open(&s1, SSE_ENDPOINT) && sse_open(&s2, SSE_ENDPOINT),
	       "max_sessions_per_tenant=2: alice opens two SSE streams");
	http_from("127.0.0.71");
	r = mcp_post(NULL, ha, init_body);
	tap_ok(r.status == 503 && r.body.data &&
		   strstr(r.body.data, "server.max_sessions_per_tenant") &&
		   strstr(r.body.data, "alice"),
	       "... her initialize from another address -> 503 naming the limit and the tenant "
	       "(%ld)",
	       r.status);
	reply_release(&r);
	b[0] = mcp_initialize_with(hb);
	tap_ok(b[0] != NULL, "... bob's is served");
	sse_close(&s1);
	sse_close(&s2);
	/* The streams' sessions leave the table as their connections end. */
	for (int tries = 0; tries < 50 && !x[0]; tries++) {
		x[0] = mcp_initialize_with(ha);
		if (!x[0])
			sleep_ms(100);
	}
	sleep_ms(300);
	for (int i = 1; i < 3; i++)
		x[i] = mcp_initialize_with(ha);
	tap_ok(x[0] && x[1] && x[2], "with the streams closed, alice opens three sessions");
	expect_status(mcp_post(x[0], ha, ping_body), 404, "... her oldest idle one is gone");
	expect_status(mcp_post(x[1], ha, ping_body), 200, "... the next one lives");
	expect_status(mcp_post(b[0], hb, ping_body), 200, "... bob's is untouched");
	for (int i = 0; i < 3; i++) {
		free(x[i]);
		x[i] = NULL;
	}
	free(b[0]);
	b[0] = NULL;
	server_end(&sv);

	server_begin(&sv, mcp, manager, false,
		     HS(set, "server.max_sessions=8", "server.max_sessions_per_tenant=0"));
	http_from("127.0.0.72");
	for (int i = 0; i < 4; i++)
		b[i] = mcp_initialize_with(hb);
	for (int i = 0; i < 4; i++)
		x[i] = mcp_initialize_with(ha);
	tap_ok(b[3] && x[3], "max_sessions=8: bob's four sessions, then alice's four");
	x[4] = mcp_initialize_with(ha);
	tap_ok(x[4] != NULL, "... alice's fifth is served");
	expect_status(mcp_post(x[0], ha, ping_body), 404,
		      "... in place of her own oldest idle session");
	for (int i = 0; i < 4; i++) {
		r = mcp_post(b[i], hb, ping_body);
		alive += r.status == 200;
		reply_release(&r);
	}
	tap_is_int(alive, 4, "... bob's older sessions all live");
	http_from(NULL);
	for (int i = 0; i < 5; i++) {
		free(x[i]);
		x[i] = NULL;
	}
	for (int i = 0; i < 4; i++) {
		free(b[i]);
		b[i] = NULL;
	}
	server_end(&sv);

	/* One address's share (tenants behind one proxy): a tenant's new
	 * session evicts its own idle one there, never another tenant's. */
	server_begin(&sv, mcp, manager, false, HS(set, "server.max_sessions_per_ip=2"));
	http_from("127.0.0.73");
	x[0] = mcp_initialize_with(ha);
	b[0] = mcp_initialize_with(hb);
	b[1] = mcp_initialize_with(hb);
	tap_ok(x[0] && b[0] && b[1],
	       "max_sessions_per_ip=2: alice's session, then bob's two, from one address");
	expect_status(mcp_post(x[0], ha, ping_body), 200,
		      "... alice's (the least recently used) lives");
	expect_status(mcp_post(b[0], hb, ping_body), 404, "... bob's own older one made room");
	expect_status(mcp_post(b[1], hb, ping_body), 200, "... bob's newer one lives");
	http_from(NULL);

	/* A key's limits changed in the file reach its open sessions. */
	{
		char erin[SBX_API_KEY_LEN + 1], he[160];
		char *const three[] = {"sandboxes=3"};
		char *text = NULL, tmp[160];
		long ms;
		FILE *f;
		if (sbx_keys_add(keys, "erin", three, 1, erin, &err) < 0)
			tap_bail(err.msg);
		bearer(he, sizeof(he), erin);
		http_from("127.0.0.74");
		free(x[1]);
		x[1] = NULL;
		for (int tries = 0; tries < 50 && !x[1]; tries++) {
			x[1] = mcp_initialize_with(he);
			if (!x[1])
				sleep_ms(100);
		}
		expect_body(mcp_post(x[1], he, WHOAMI_BODY), 200, "sandboxes=3",
			    "erin's session acts under her key's sandboxes=3");
		{
			struct sbx_buf b2 = SBX_BUF_INIT;
			FILE *in = fopen(keys, "r");
			char line[1024];
			while (in && fgets(line, sizeof(line), in)) {
				char *p = strstr(line, " sandboxes=3");
				if (p)
					memcpy(p, " sandboxes=1", 12);
				sbx_buf_append(&b2, line, strlen(line));
			}
			if (in)
				fclose(in);
			text = b2.data;
		}
		snprintf(tmp, sizeof(tmp), "%s.new", keys);
		f = fopen(tmp, "w");
		if (!text || !f || fputs(text, f) < 0 || fclose(f) != 0 || chmod(tmp, 0600) < 0 ||
		    rename(tmp, keys) < 0)
			tap_bail("rewrite the keys file");
		free(text);
		ms = wait_status_body(x[1], he, WHOAMI_BODY, "sandboxes=1");
		tap_ok(ms >= 0,
		       "... her key's line changed to sandboxes=1: her open session's calls act "
		       "under it (%ld ms)",
		       ms);
		http_from(NULL);
	}
	for (int i = 0; i < 5; i++)
		free(x[i]);
	for (int i = 0; i < 4; i++)
		free(b[i]);
	server_end(&sv);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path) != 0)
		tap_diag("could not remove %s", dir);
}

/* SBX_HTTP_ONLY=NAME,... runs only those tests (test_NAME), for the
 * mutation runs (tools/mutants); unset or empty, all of them. */
static bool wanted(const char *name)
{
	const char *only = getenv("SBX_HTTP_ONLY");
	size_t n = strlen(name);

	if (!only || !*only)
		return true;
	for (const char *p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

int main(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_engine *engine = NULL;
	sbx_manager *manager = NULL;
	sbx_mcp *mcp = NULL;
	sbx_http *http = NULL;

	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (sbx_settings_init(&s) < 0 ||
	    sbx_settings_set(&s, "server.listen=127.0.0.1", &err) < 0 ||
	    sbx_settings_set(&s, "server.port=0", &err) < 0 ||
	    sbx_settings_set(&s, "server.max_body=16k", &err) < 0 ||
	    sbx_settings_set(&s, "server.allowed_origins=https://app.example", &err) < 0 ||
	    sbx_settings_set(&s, "engine.socket=unix:///nonexistent/mcp-sandbox-test.sock", &err) <
		0)
		tap_bail(err.msg[0] ? err.msg : "settings");
	{
		struct sbx_engine_config ec = {
		    .type = s.engine.type, .url = s.engine.socket, .timeout_ms = 2000};
		if (sbx_engine_open(&ec, &engine, &err) < 0 ||
		    sbx_manager_new(&s, engine, &manager, &err) < 0)
			tap_bail(err.msg);
	}
	{
		const struct sbx_mcp_config mc = {.settings = &s, .manager = manager};
		if (sbx_mcp_new(&mc, &mcp, &err) < 0)
			tap_bail(err.msg);
		sbx_mcp_set_tools_call(mcp, fake_tools_call);
	}
	{
		const struct sbx_http_config hc = {.settings = &s, .mcp = mcp, .manager = manager};
		if (sbx_http_start(&hc, &http, &err) < 0)
			tap_bail(err.msg);
	}
	main_http = http;
	http_use(sbx_http_port(http), false);
	tap_ok(http_target.port != 0, "bound a free port (%u)", http_target.port);
	tap_is_str(sbx_http_public_url(http), http_target.base,
		   "the public URL is http://127.0.0.1:PORT");

	if (wanted("mime"))
		test_mime();
	if (wanted("file_headers"))
		test_file_headers();
	if (wanted("basics"))
		test_basics();
	if (wanted("order"))
		test_order();
	if (wanted("sessions"))
		test_sessions();
	if (wanted("batch_http"))
		test_batch_http();
	if (wanted("depth_http"))
		test_depth_http();
	if (wanted("sse"))
		test_sse();
	if (wanted("held_streamable"))
		test_held_streamable();
	if (wanted("progress_http"))
		test_progress_http();
	if (wanted("cancel_http"))
		test_cancel_http();
	if (wanted("cancel_sse"))
		test_cancel_sse();
	if (wanted("artifacts"))
		test_artifacts(mcp, &s);
	if (wanted("concurrent_sessions"))
		test_concurrent_sessions();
	if (wanted("cheap_while_busy"))
		test_cheap_while_busy();
	if (wanted("early_refusals"))
		test_early_refusals();
	if (wanted("refusal_lingers"))
		test_refusal_lingers();
	if (wanted("calls_per_session"))
		test_calls_per_session();
	if (wanted("over_limit"))
		test_over_limit(mcp, manager);
	if (wanted("many_sse"))
		test_many_sse(mcp, manager);
	if (wanted("second_server"))
		test_second_server(mcp, manager);
	if (wanted("expiry"))
		test_expiry(mcp, manager);
	if (wanted("hostile_bodies"))
		test_hostile_bodies(mcp, manager);
	if (wanted("outq"))
		test_outq();
	if (wanted("stalled_streams"))
		test_stalled_streams(mcp, manager);
	if (wanted("queue_budget"))
		test_queue_budget(mcp, manager);
	if (wanted("session_table"))
		test_session_table(mcp, manager);
	if (wanted("sessions_per_ip"))
		test_sessions_per_ip(mcp, manager);
	if (wanted("slow_body"))
		test_slow_body(mcp, manager);
	if (wanted("connections_per_ip"))
		test_connections_per_ip(mcp, manager);
	if (wanted("overflow_band"))
		test_overflow_band(mcp, manager);
	if (wanted("auth"))
		test_auth(mcp, manager);
	if (wanted("sessions_per_tenant"))
		test_sessions_per_tenant(mcp, manager);

	sbx_http_stop(http);
	sbx_mcp_free(mcp);
	sbx_manager_free(manager);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
	curl_global_cleanup();
	return tap_done();
}
