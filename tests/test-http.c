/* SPDX-License-Identifier: MIT */
/*
 * The HTTP front in-process on 127.0.0.1 (a free port), no engine needed
 * (the manager points at an absent socket): /health, the checks and codes
 * of /mcp in their order, sessions, the legacy SSE transport, the artifact
 * route's refusals, 20 concurrent sessions, and a request held mid-body not
 * delaying a ping on the same session.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "tap.h"

static uint16_t port;
static char base[64];

struct reply {
	long status;
	struct sbx_buf headers;
	struct sbx_buf body;
};

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	return sbx_buf_append(ud, p, size * n) < 0 ? 0 : size * n;
}

static void reply_release(struct reply *r)
{
	sbx_buf_release(&r->headers);
	sbx_buf_release(&r->body);
}

/* The value of response header NAME (a per-thread buffer), or NULL. */
static const char *header_of(const struct reply *r, const char *name)
{
	static __thread char val[256];
	size_t n = strlen(name);

	for (const char *p = r->headers.data; p && *p;) {
		const char *e = strstr(p, "\r\n");
		if (!e)
			break;
		if ((size_t)(e - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1;
			while (*v == ' ')
				v++;
			snprintf(val, sizeof(val), "%.*s", (int)(e - v), v);
			return val;
		}
		p = e + 2;
	}
	return NULL;
}

/* One request. HEADERS: NULL-terminated "Name: value" lines. */
static struct reply request(const char *method, const char *path, const char *const *headers,
			    const char *body)
{
	struct reply r = {0};
	struct curl_slist *h = NULL;
	char url[512];
	CURL *c = curl_easy_init();

	if (!c)
		tap_bail("curl_easy_init");
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	for (size_t i = 0; headers && headers[i]; i++)
		h = curl_slist_append(h, headers[i]);
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return r;
}

#define ACCEPT_BOTH "Accept: application/json, text/event-stream"
#define CT_JSON "Content-Type: application/json"

static const char init_body[] =
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}";
static const char ping_body[] = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";

/* A POST to /mcp with the usual headers plus EXTRA (may be NULL). */
static struct reply mcp_post(const char *session, const char *extra, const char *body)
{
	char sh[128];
	const char *hs[5] = {ACCEPT_BOTH, CT_JSON, NULL, NULL, NULL};
	size_t n = 2;

	if (session) {
		snprintf(sh, sizeof(sh), "Mcp-Session-Id: %s", session);
		hs[n++] = sh;
	}
	if (extra)
		hs[n++] = extra;
	return request("POST", "/mcp", hs, body);
}

/* Initializes a Streamable HTTP session; its id (malloc'd) or NULL. */
static char *mcp_initialize(void)
{
	struct reply r = mcp_post(NULL, NULL, init_body);
	const char *id = r.status == 200 ? header_of(&r, "Mcp-Session-Id") : NULL;
	char *copy = id ? strdup(id) : NULL;

	reply_release(&r);
	return copy;
}

static void test_basics(void)
{
	struct reply r;

	r = request("GET", "/health", NULL, NULL);
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"ok\""),
	       "GET /health -> 200 ok");
	reply_release(&r);
	r = request("GET", "/nope", NULL, NULL);
	tap_is_int(r.status, 404, "an unknown path -> 404");
	reply_release(&r);

	r = request("PUT", "/mcp", NULL, "x");
	tap_is_int(r.status, 405, "PUT /mcp -> 405");
	tap_is_str(header_of(&r, "Allow"), "GET, POST, DELETE", "... with Allow");
	reply_release(&r);
	r = request("GET", "/mcp", (const char *const[]){"Accept: text/event-stream", NULL}, NULL);
	tap_is_int(r.status, 405, "GET /mcp -> 405 (no server stream)");
	reply_release(&r);

	{
		const char *const hs[] = {"Host: evil.example", ACCEPT_BOTH, CT_JSON, NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 403, "a foreign Host -> 403");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Host: localhost:1", ACCEPT_BOTH, CT_JSON, NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 403, "localhost on another port -> 403");
		reply_release(&r);
	}
	{
		char host[64];
		snprintf(host, sizeof(host), "Host: localhost:%u", port);
		const char *const hs[] = {host, ACCEPT_BOTH, CT_JSON, NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 200, "Host localhost:PORT is fine");
		reply_release(&r);
	}
	r = mcp_post(NULL, "Origin: http://evil.example", init_body);
	tap_is_int(r.status, 403, "a foreign Origin -> 403");
	reply_release(&r);
	r = mcp_post(NULL, "Origin: null", init_body);
	tap_is_int(r.status, 403, "Origin null -> 403");
	reply_release(&r);
	r = mcp_post(NULL, "Origin: http://localhost:5173", init_body);
	tap_ok(r.status == 200 && header_of(&r, "Access-Control-Expose-Headers") &&
		   strstr(header_of(&r, "Access-Control-Expose-Headers"), "Mcp-Session-Id"),
	       "a loopback Origin is fine and sees Mcp-Session-Id");
	tap_is_str(header_of(&r, "Access-Control-Allow-Origin"), "http://localhost:5173",
		   "... Access-Control-Allow-Origin echoes it");
	reply_release(&r);
	r = mcp_post(NULL, "Origin: https://app.example", init_body);
	tap_is_int(r.status, 200, "an Origin from server.allowed_origins is fine");
	reply_release(&r);
	{
		const char *const hs[] = {"Origin: https://app.example",
					  "Access-Control-Request-Method: POST", NULL};
		r = request("OPTIONS", "/mcp", hs, NULL);
		tap_ok(r.status == 204 && header_of(&r, "Access-Control-Allow-Headers") &&
			   strstr(header_of(&r, "Access-Control-Allow-Headers"), "Mcp-Session-Id"),
		       "CORS preflight for an allowed origin -> 204");
		reply_release(&r);
	}

	{
		const char *const hs[] = {"Accept: application/json", CT_JSON, NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 406, "Accept without text/event-stream -> 406");
		reply_release(&r);
	}
	{
		const char *const hs[] = {ACCEPT_BOTH, "Content-Type: text/plain", NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 415, "Content-Type text/plain -> 415");
		reply_release(&r);
	}
	r = mcp_post(NULL, NULL, "{\"jsonrpc\":");
	tap_ok(r.status == 400 && r.body.data && strstr(r.body.data, "-32700"),
	       "bad JSON -> 400 with -32700");
	reply_release(&r);
	{
		size_t n = 64 * 1024;
		char *big = malloc(n + 1);
		if (!big)
			tap_bail("malloc");
		memset(big, ' ', n);
		big[0] = '[';
		big[n - 1] = ']';
		big[n] = '\0';
		r = mcp_post(NULL, NULL, big);
		tap_is_int(r.status, 413, "a body over server.max_body -> 413");
		reply_release(&r);
		free(big);
	}
}

/* The checks of POST /mcp come in the order of docs/mcp.md. */
static void test_order(void)
{
	struct reply r;

	{
		const char *const hs[] = {"Host: evil.example", NULL};
		r = request("PUT", "/mcp", hs, "x");
		tap_is_int(r.status, 405, "order: 405 before 403");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Origin: http://evil.example", "Accept: text/html",
					  "Content-Type: text/plain", NULL};
		r = request("POST", "/mcp", hs, "{");
		tap_is_int(r.status, 403, "order: 403 before 406");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Accept: text/html", "Content-Type: text/plain", NULL};
		r = request("POST", "/mcp", hs, "{");
		tap_is_int(r.status, 406, "order: 406 before 415");
		reply_release(&r);
	}
	{
		const char *const hs[] = {ACCEPT_BOTH, "Content-Type: text/plain", NULL};
		r = request("POST", "/mcp", hs, "{");
		tap_is_int(r.status, 415, "order: 415 before 400");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Accept: */*",
					  "Content-Type: application/json; charset=utf-8", NULL};
		r = request("POST", "/mcp", hs, init_body);
		tap_is_int(r.status, 200, "Accept */* and a charset parameter are fine");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Origin: http://evil.example",
					  "Access-Control-Request-Method: POST", NULL};
		r = request("OPTIONS", "/mcp", hs, NULL);
		tap_is_int(r.status, 403, "CORS preflight from a foreign origin -> 403");
		reply_release(&r);
	}
	r = request("GET", "/messages?session_id=x", NULL, NULL);
	tap_is_int(r.status, 405, "GET /messages -> 405");
	reply_release(&r);
	r = request("POST", "/sse", (const char *const[]){CT_JSON, NULL}, ping_body);
	tap_is_int(r.status, 405, "POST /sse -> 405");
	reply_release(&r);
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

static void test_sessions(void)
{
	struct reply r;
	char *id = mcp_initialize(), *id2;

	tap_ok(id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32,
	       "initialize -> Mcp-Session-Id of 128 random bits (%s)", id ? id : "none");
	id2 = mcp_initialize();
	tap_ok(id && id2 && strcmp(id, id2) != 0, "two sessions have different ids");
	free(id2);

	r = mcp_post(NULL, NULL, ping_body);
	tap_ok(r.status == 400 && r.body.data && strstr(r.body.data, "\"error\""),
	       "a request without Mcp-Session-Id -> 400");
	reply_release(&r);
	r = mcp_post("0123456789abcdef0123456789abcdef", NULL, ping_body);
	tap_ok(r.status == 404 && r.body.data && strstr(r.body.data, "-32001"),
	       "an unknown session -> 404 with -32001");
	reply_release(&r);
	r = mcp_post(id, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	tap_ok(r.status == 202 && r.body.len == 0, "a notification -> 202, empty");
	reply_release(&r);
	r = mcp_post(id, NULL, ping_body);
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"result\":{}") &&
		   header_of(&r, "Content-Type") &&
		   strncmp(header_of(&r, "Content-Type"), "application/json", 16) == 0,
	       "ping on the session -> 200 application/json {}");
	reply_release(&r);
	r = mcp_post(id, "MCP-Protocol-Version: 2025-06-18", ping_body);
	tap_is_int(r.status, 200, "a supported MCP-Protocol-Version is fine");
	reply_release(&r);
	r = mcp_post(id, "MCP-Protocol-Version: 1999-01-01", ping_body);
	tap_is_int(r.status, 400, "an unsupported MCP-Protocol-Version -> 400");
	reply_release(&r);
	r = mcp_post(id, NULL, init_body);
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "-32600"),
	       "a second initialize on the session is a JSON-RPC error");
	reply_release(&r);
	r = mcp_post(id, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
		     "\"name\":\"no_such_tool\",\"arguments\":{}}}");
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "-32602"),
	       "tools/call of an unknown tool -> -32602");
	reply_release(&r);
	{
		char sh[128];
		snprintf(sh, sizeof(sh), "Mcp-Session-Id: %s", id ? id : "x");
		const char *const hs[] = {sh, NULL};
		r = request("DELETE", "/mcp", hs, NULL);
		tap_is_int(r.status, 200, "DELETE the session -> 200");
		reply_release(&r);
		r = request("DELETE", "/mcp", hs, NULL);
		tap_is_int(r.status, 404, "DELETE it again -> 404");
		reply_release(&r);
		r = request("DELETE", "/mcp", NULL, NULL);
		tap_is_int(r.status, 400, "DELETE without a session -> 400");
		reply_release(&r);
	}
	r = mcp_post(id, NULL, ping_body);
	tap_is_int(r.status, 404, "a deleted session -> 404");
	reply_release(&r);
	free(id);

	r = mcp_post(NULL, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}");
	tap_ok(r.status == 200 && !header_of(&r, "Mcp-Session-Id"),
	       "a failed initialize hands out no session");
	reply_release(&r);
}

/* ---- raw sockets (SSE, held requests) ---- */

static int connect_raw(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		tap_bail("connect");
	return fd;
}

static void send_all(int fd, const char *s)
{
	size_t len = strlen(s);

	while (len > 0) {
		ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
		if (n <= 0)
			tap_bail("send");
		s += n;
		len -= (size_t)n;
	}
}

/* Reads from FD into ACC until NEEDLE appears or MS pass; true if found. */
static bool read_until(int fd, struct sbx_buf *acc, const char *needle, int ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char buf[4096];
		long left;
		ssize_t n;

		if (acc->data && strstr(acc->data, needle))
			return true;
		clock_gettime(CLOCK_MONOTONIC, &t);
		left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return acc->data && strstr(acc->data, needle);
		sbx_buf_append(acc, buf, (size_t)n);
	}
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* True when the peer closes FD within MS (data before that is skipped). */
static bool closed_within(int fd, int ms)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < ms) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char buf[512];
		if (poll(&p, 1, 100) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0)
			return true;
	}
	return false;
}

/* Opens GET /sse; returns the fd and fills the session id. */
static int open_sse(char id[64], struct sbx_buf *acc)
{
	char req[256];
	int fd = connect_raw();
	const char *p;

	snprintf(req, sizeof(req),
		 "GET /sse HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAccept: text/event-stream\r\n\r\n",
		 port);
	send_all(fd, req);
	id[0] = '\0';
	if (!read_until(fd, acc, "\n\n", 5000) || !read_until(fd, acc, "session_id=", 5000))
		return fd;
	read_until(fd, acc, "\n\n", 5000);
	p = strstr(acc->data, "event: endpoint\ndata: /messages?session_id=");
	if (p) {
		p += strlen("event: endpoint\ndata: /messages?session_id=");
		size_t n = strspn(p, "0123456789abcdef");
		snprintf(id, 64, "%.*s", (int)n, p);
	}
	return fd;
}

static struct reply sse_post(const char *id, const char *body)
{
	char path[128];
	const char *const hs[] = {CT_JSON, NULL};

	snprintf(path, sizeof(path), "/messages?session_id=%s", id);
	return request("POST", path, hs, body);
}

static void test_sse(void)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	struct reply r;
	char id[64];
	int fd = open_sse(id, &acc);

	tap_ok(acc.data && strstr(acc.data, "200 OK") &&
		   strcasestr(acc.data, "Content-Type: text/event-stream") &&
		   strcasestr(acc.data, "Cache-Control: no-cache"),
	       "GET /sse -> 200 text/event-stream, no-cache");
	tap_ok(strlen(id) == 32, "the first frame is the endpoint with a session id");

	r = sse_post(id, init_body);
	tap_is_int(r.status, 202, "POST initialize to the endpoint -> 202");
	reply_release(&r);
	tap_ok(read_until(fd, &acc, "links in the result.\"}}\n\n", 5000) &&
		   strstr(acc.data, "\"protocolVersion\":\"2025-06-18\"") &&
		   strstr(acc.data, "event: message\ndata: {"),
	       "... and the reply arrives on the stream as event: message");
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	tap_is_int(r.status, 202, "a notification -> 202");
	reply_release(&r);
	r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":\"p-77\",\"method\":\"ping\"}");
	tap_ok(r.status == 202 && read_until(fd, &acc, "\"id\":\"p-77\",\"result\":{}", 5000),
	       "ping -> 202, the result on the stream");
	reply_release(&r);

	r = sse_post(id, "{\"jsonrpc\":");
	tap_ok(r.status == 400 && r.body.data && strstr(r.body.data, "-32700"),
	       "bad JSON -> 400 with -32700");
	reply_release(&r);
	{
		char path[128];
		const char *const hs[] = {"Content-Type: text/plain", NULL};
		snprintf(path, sizeof(path), "/messages?session_id=%s", id);
		r = request("POST", path, hs, ping_body);
		tap_ok(r.status == 415 || r.status == 400, "wrong Content-Type -> 415");
		reply_release(&r);
	}
	r = sse_post("0123456789abcdef0123456789abcdef", ping_body);
	tap_is_int(r.status, 404, "an unknown session -> 404");
	reply_release(&r);
	{
		const char *const hs[] = {CT_JSON, NULL};
		r = request("POST", "/messages", hs, ping_body);
		tap_is_int(r.status, 400, "no session_id -> 400");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Origin: http://evil.example", NULL};
		r = request("GET", "/sse", hs, NULL);
		tap_is_int(r.status, 403, "GET /sse from a foreign Origin -> 403");
		reply_release(&r);
	}

	/* A POST held mid-body does not delay a ping on the same session. */
	{
		char req[512];
		struct timespec t0;
		int held = connect_raw();
		snprintf(
		    req, sizeof(req),
		    "POST /messages?session_id=%s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
		    "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"jsonrpc\"",
		    id, port);
		send_all(held, req);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sse_post(id, "{\"jsonrpc\":\"2.0\",\"id\":\"p-78\",\"method\":\"ping\"}");
		tap_ok(r.status == 202 && read_until(fd, &acc, "\"id\":\"p-78\"", 3000) &&
			   elapsed_ms(&t0) < 3000,
		       "a request held mid-body does not delay a ping on the session (%ld ms)",
		       elapsed_ms(&t0));
		reply_release(&r);
		close(held);
	}

	close(fd);
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
	sbx_buf_release(&acc);
}

static void test_held_streamable(void)
{
	char *id = mcp_initialize();
	char req[512];
	struct timespec t0;
	struct reply r;
	int held = connect_raw();

	snprintf(req, sizeof(req),
		 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAccept: application/json, "
		 "text/event-stream\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\n"
		 "Content-Length: 300\r\n\r\n{\"jsonrpc\":\"2.0\",",
		 port, id ? id : "x");
	send_all(held, req);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = mcp_post(id, NULL, ping_body);
	tap_ok(r.status == 200 && elapsed_ms(&t0) < 3000,
	       "/mcp: a request held mid-body does not delay a ping on the session (%ld ms)",
	       elapsed_ms(&t0));
	reply_release(&r);
	close(held);
	free(id);
}

static void test_artifacts(void)
{
	struct reply r;

	r = request("GET", "/artifacts/", NULL, NULL);
	tap_is_int(r.status, 400, "/artifacts/ without a path -> 400");
	reply_release(&r);
	r = request("GET", "/artifacts/abc", NULL, NULL);
	tap_is_int(r.status, 400, "/artifacts/ID without a file -> 400");
	reply_release(&r);
	r = request("GET", "/artifacts/abc/%zz.png", NULL, NULL);
	tap_is_int(r.status, 400, "a bad escape -> 400");
	reply_release(&r);
	r = request("GET", "/artifacts/nosuchsandbox/plot.png", NULL, NULL);
	tap_is_int(r.status, 404, "an unknown sandbox -> 404");
	reply_release(&r);
	r = request("HEAD", "/artifacts/nosuchsandbox/plot.png", NULL, NULL);
	tap_is_int(r.status, 404, "HEAD of an unknown sandbox -> 404");
	reply_release(&r);
	r = request("POST", "/artifacts/nosuchsandbox/plot.png", NULL, "x");
	tap_is_int(r.status, 405, "POST to an artifact -> 405");
	reply_release(&r);
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

/* A second server: IPv6 loopback when available, a public URL on another
 * host name, a 1 s session timeout; stopped with a stream open. */
static void test_second_server(sbx_mcp *mcp, sbx_manager *manager)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s2;
	sbx_http *h2 = NULL;
	uint16_t saved_port = port;
	char saved_base[64], *id;
	struct reply r;
	bool v6;

	snprintf(saved_base, sizeof(saved_base), "%s", base);
	{
		int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
					  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		v6 = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (fd >= 0)
			close(fd);
	}
	if (sbx_settings_init(&s2) < 0 ||
	    sbx_settings_set(&s2, v6 ? "server.listen=::1" : "server.listen=127.0.0.1", &err) < 0 ||
	    sbx_settings_set(&s2, "server.port=0", &err) < 0 ||
	    sbx_settings_set(&s2, "server.public_url=http://mcp.example:8080/", &err) < 0 ||
	    sbx_settings_set(&s2, "server.session_timeout=1s", &err) < 0)
		tap_bail(err.msg[0] ? err.msg : "settings");
	{
		const struct sbx_http_config hc = {.settings = &s2, .mcp = mcp, .manager = manager};
		if (sbx_http_start(&hc, &h2, &err) < 0)
			tap_bail(err.msg);
	}
	port = sbx_http_port(h2);
	snprintf(base, sizeof(base), v6 ? "http://[::1]:%u" : "http://127.0.0.1:%u", port);
	tap_is_str(sbx_http_public_url(h2), "http://mcp.example:8080",
		   "server.public_url is the public URL (without the trailing slash)");
	r = request("GET", "/health", NULL, NULL);
	tap_is_int(r.status, 200, "GET /health on %s", v6 ? "[::1]" : "127.0.0.1 (no IPv6 here)");
	reply_release(&r);
	{
		const char *const hs[] = {"Host: mcp.example:8080",
					  "Origin: http://mcp.example:8080", NULL};
		r = request("GET", "/health", hs, NULL);
		tap_is_int(r.status, 200, "the public URL's host and origin are allowed");
		reply_release(&r);
	}
	{
		const char *const hs[] = {"Host: mcp.example:9999", NULL};
		r = request("GET", "/health", hs, NULL);
		tap_is_int(r.status, 403, "... on another port they are not");
		reply_release(&r);
	}

	id = mcp_initialize();
	tap_ok(id != NULL, "initialize on the second server");
	r = mcp_post(id, NULL, ping_body);
	tap_is_int(r.status, 200, "the session answers at once");
	reply_release(&r);
	usleep(1600 * 1000);
	r = mcp_post(id, NULL, ping_body);
	tap_is_int(r.status, 404, "after server.session_timeout idle it is gone (404)");
	reply_release(&r);
	free(id);

	{
		struct sbx_buf acc = SBX_BUF_INIT;
		struct timespec t0;
		char sid[64];
		int fd = -1;
		if (v6) {
			/* open_sse speaks IPv4; use curl-less raw IPv6 here. */
			struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
						  .sin6_port = htons(port),
						  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
			char req[128];
			fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				tap_bail("connect [::1]");
			snprintf(req, sizeof(req), "GET /sse HTTP/1.1\r\nHost: [::1]:%u\r\n\r\n",
				 port);
			send_all(fd, req);
		} else {
			fd = open_sse(sid, &acc);
		}
		tap_ok(read_until(fd, &acc, "event: endpoint", 5000), "an SSE stream is open");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		h2 = sbx_http_stop(h2);
		tap_ok(elapsed_ms(&t0) < 3000, "stop with a stream open takes %ld ms",
		       elapsed_ms(&t0));
		tap_ok(closed_within(fd, 2000), "... and the stream is closed");
		close(fd);
		sbx_buf_release(&acc);
	}
	sbx_settings_release(&s2);
	port = saved_port;
	snprintf(base, sizeof(base), "%s", saved_base);
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
	}
	{
		const struct sbx_http_config hc = {.settings = &s, .mcp = mcp, .manager = manager};
		if (sbx_http_start(&hc, &http, &err) < 0)
			tap_bail(err.msg);
	}
	port = sbx_http_port(http);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", port);
	tap_ok(port != 0, "bound a free port (%u)", port);
	tap_is_str(sbx_http_public_url(http), base, "the public URL is http://127.0.0.1:PORT");

	test_mime();
	test_basics();
	test_order();
	test_sessions();
	test_batch_http();
	test_sse();
	test_held_streamable();
	test_artifacts();
	test_concurrent_sessions();
	test_second_server(mcp, manager);

	sbx_http_stop(http);
	sbx_mcp_free(mcp);
	sbx_manager_free(manager);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
	curl_global_cleanup();
	return tap_done();
}
