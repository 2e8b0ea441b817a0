/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http-client.h"
#include "tap.h"

/* ---- the target ---- */

struct http_target http_target;

struct http_target http_use(uint16_t port, bool v6)
{
	struct http_target saved = http_target;

	http_target.port = port;
	http_target.v6 = v6;
	snprintf(http_target.base, sizeof(http_target.base),
		 v6 ? "http://[::1]:%u" : "http://127.0.0.1:%u", port);
	return saved;
}

void http_restore(const struct http_target *saved)
{
	http_target = *saved;
}

static __thread char http_source[16];

void http_from(const char *ip)
{
	snprintf(http_source, sizeof(http_source), "%s", ip ? ip : "");
}

/* ---- requests ---- */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	return sbx_buf_append(ud, p, size * n) < 0 ? 0 : size * n;
}

void reply_release(struct reply *r)
{
	sbx_buf_release(&r->headers);
	sbx_buf_release(&r->body);
}

const char *header_of(const struct reply *r, const char *name)
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

struct reply request(const char *method, const char *path, const char *const *headers,
		     const char *body)
{
	struct reply r = {0};
	struct curl_slist *h = NULL;
	char url[512];
	CURL *c = curl_easy_init();

	if (!c)
		tap_bail("curl_easy_init");
	snprintf(url, sizeof(url), "%s%s", http_target.base, path);
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
	if (http_source[0]) {
		char iface[32];
		snprintf(iface, sizeof(iface), "host!%s", http_source);
		curl_easy_setopt(c, CURLOPT_INTERFACE, iface);
	}
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return r;
}

const char init_body[] =
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}";
const char ping_body[] = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";
const char initialized_body[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";

struct reply mcp_post(const char *session, const char *extra, const char *body)
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

char *mcp_initialize_with(const char *extra)
{
	struct reply r = mcp_post(NULL, extra, init_body);
	const char *id = r.status == 200 ? header_of(&r, "Mcp-Session-Id") : NULL;
	char *copy = id ? strdup(id) : NULL;

	reply_release(&r);
	return copy;
}

char *mcp_initialize(void)
{
	return mcp_initialize_with(NULL);
}

struct reply sse_post(const char *id, const char *body)
{
	char path[128];
	const char *const hs[] = {CT_JSON, NULL};

	snprintf(path, sizeof(path), "/messages?session_id=%s", id);
	return request("POST", path, hs, body);
}

/* ---- raw sockets ---- */

long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* A socket to the target, connected (-1 when the connect failed). */
static int connect_fd(void)
{
	int fd, r;

	if (http_target.v6) {
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
					  .sin6_port = htons(http_target.port),
					  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		r = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	} else {
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons(http_target.port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		struct sockaddr_in from = {.sin_family = AF_INET};
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		r = fd < 0 ? -1 : 0;
		if (r == 0 && http_source[0]) {
			r = inet_pton(AF_INET, http_source, &from.sin_addr) == 1 ? 0 : -1;
			if (r == 0)
				r = bind(fd, (struct sockaddr *)&from, sizeof(from));
		}
		if (r == 0)
			r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	if (r < 0 && fd >= 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int connect_raw(void)
{
	int fd = connect_fd();

	if (fd < 0)
		tap_bail("connect");
	return fd;
}

bool connect_quiet(int *ret_fd, int ms)
{
	struct pollfd p;
	int fd = connect_fd();

	*ret_fd = fd;
	if (fd < 0)
		return false;
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	/* Anything to read, or the end, before a request is sent: refused. */
	return poll(&p, 1, ms) == 0;
}

void send_all(int fd, const char *s)
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

bool read_until(int fd, struct sbx_buf *acc, const char *needle, int ms)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char buf[4096];
		long left;
		ssize_t n;

		if (acc->data && strstr(acc->data, needle))
			return true;
		left = ms - elapsed_ms(&t0);
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return acc->data && strstr(acc->data, needle);
		sbx_buf_append(acc, buf, (size_t)n);
	}
}

bool closed_within(int fd, int ms)
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

/* "Host: 127.0.0.1:PORT" or "Host: [::1]:PORT". */
static const char *host_line(char *buf, size_t n)
{
	snprintf(buf, n, "Host: %s:%u", http_target.v6 ? "[::1]" : "127.0.0.1", http_target.port);
	return buf;
}

int raw_post(const char *path, const char *headers, size_t content_length, const char *body)
{
	char req[2048], host[64];
	int fd = connect_raw();

	snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\n%s\r\n%sContent-Length: %zu\r\n\r\n%s",
		 path, host_line(host, sizeof(host)), headers,
		 content_length ? content_length : strlen(body), body);
	send_all(fd, req);
	return fd;
}

int raw_mcp_post(const char *id, size_t content_length, const char *body)
{
	char headers[256];

	snprintf(headers, sizeof(headers),
		 "Accept: application/json, text/event-stream\r\nContent-Type: "
		 "application/json\r\nMcp-Session-Id: %s\r\n",
		 id);
	return raw_post("/mcp", headers, content_length, body);
}

bool send_quiet(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
		if (k <= 0)
			return false;
		c += k;
		n -= (size_t)k;
	}
	return true;
}

int raw_post_chunked(const char *path, const char *headers)
{
	char req[2048], host[64];
	int fd = connect_raw();

	snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\n%s\r\n%sTransfer-Encoding: chunked\r\n\r\n",
		 path, host_line(host, sizeof(host)), headers);
	send_all(fd, req);
	return fd;
}

bool send_chunk(int fd, const void *data, size_t n)
{
	char size[32];

	snprintf(size, sizeof(size), "%zx\r\n", n);
	return send_quiet(fd, size, strlen(size)) && send_quiet(fd, data, n) &&
	       send_quiet(fd, "\r\n", 2);
}

long raw_status(int fd, struct sbx_buf *acc, int ms)
{
	int code = 0;

	if (!read_until(fd, acc, "\r\n\r\n", ms) || sscanf(acc->data, "HTTP/1.1 %d", &code) != 1)
		return 0;
	return code;
}

/* ---- an SSE session ---- */

#define ENDPOINT_EVENT "event: endpoint\ndata: /messages?session_id="

static int step_ms(const struct sse_session *s)
{
	return s->ms > 0 ? s->ms : 5000;
}

static bool step_connect(struct sse_session *s)
{
	char req[768], host[64];

	s->fd = connect_raw();
	s->id[0] = '\0';
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n%s\r\nAccept: text/event-stream\r\n\r\n",
		 s->path ? s->path : "/sse", host_line(host, sizeof(host)));
	send_all(s->fd, req);
	return true;
}

static bool step_open(struct sse_session *s)
{
	const char *h;

	if (!read_until(s->fd, &s->acc, "\r\n\r\n", step_ms(s)))
		return false;
	h = s->acc.data;
	return strncmp(h, "HTTP/1.1 200 OK\r\n", 17) == 0 &&
	       strcasestr(h, "\r\nContent-Type: text/event-stream") &&
	       strcasestr(h, "\r\nCache-Control: no-cache");
}

static bool step_endpoint(struct sse_session *s)
{
	const char *p;
	size_t n;

	if (!read_until(s->fd, &s->acc, ENDPOINT_EVENT, step_ms(s)))
		return false;
	p = strstr(s->acc.data, ENDPOINT_EVENT) + strlen(ENDPOINT_EVENT);
	n = strspn(p, "0123456789abcdef");
	if (p[n] != '\n' && !read_until(s->fd, &s->acc, "\n\n", step_ms(s)))
		return false;
	p = strstr(s->acc.data, ENDPOINT_EVENT) + strlen(ENDPOINT_EVENT);
	n = strspn(p, "0123456789abcdef");
	snprintf(s->id, sizeof(s->id), "%.*s", (int)n, p);
	return n == 32 && p[n] == '\n';
}

static bool post_202(struct sse_session *s, const char *body)
{
	struct reply r = sse_post(s->id, body);
	bool ok = r.status == 202;

	reply_release(&r);
	return ok;
}

static bool step_initialize(struct sse_session *s)
{
	return post_202(s, init_body);
}

/* The initialize result: an event: message whose data ends the event. */
static bool step_init_reply(struct sse_session *s)
{
	static const char start[] =
	    "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":";

	if (!read_until(s->fd, &s->acc, start, step_ms(s)) ||
	    !read_until(s->fd, &s->acc, "}}\n\n", step_ms(s)))
		return false;
	return strstr(strstr(s->acc.data, start), "\"protocolVersion\":\"2025-06-18\"") != NULL;
}

static bool step_initialized(struct sse_session *s)
{
	return post_202(s, initialized_body);
}

static const struct {
	const char *what;
	bool (*run)(struct sse_session *s);
} sse_steps[SSE_STEPS] = {
    [SSE_CONNECT] = {"connect and send GET /sse", step_connect},
    [SSE_OPEN] = {"GET /sse -> 200 text/event-stream, no-cache", step_open},
    [SSE_ENDPOINT] = {"the first frame is the endpoint with a session id", step_endpoint},
    [SSE_INITIALIZE] = {"POST initialize to the endpoint -> 202", step_initialize},
    [SSE_INIT_REPLY] = {"... and the reply arrives on the stream as event: message",
			step_init_reply},
    [SSE_INITIALIZED] = {"a notification -> 202", step_initialized},
};

const char *sse_step_what(enum sse_step step)
{
	return sse_steps[step].what;
}

bool sse_step(struct sse_session *s, enum sse_step step)
{
	return sse_steps[step].run(s);
}

bool sse_open(struct sse_session *s, enum sse_step last)
{
	for (int i = SSE_CONNECT; i <= (int)last; i++)
		if (!sse_step(s, (enum sse_step)i))
			return false;
	return true;
}

void sse_close(struct sse_session *s)
{
	if (s->fd > 0) /* 0: never connected (a zeroed session) */
		close(s->fd);
	s->fd = -1;
	sbx_buf_release(&s->acc);
}

/* ---- bodies ---- */

/* A ping (id ID) whose params nest so that the body is LEVELS deep in all:
 * the message is level 1, its params level 2, then arrays, the innermost
 * empty, or holding the number 1 (one level more) when SCALAR. Owned. */
char *mcp_deep_ping(int id, int levels, bool scalar)
{
	int arrays = levels - 2 - (scalar ? 1 : 0);
	size_t n = 128 + 2 * (size_t)arrays;
	char *text = malloc(n), *p;

	if (!text || arrays < 1)
		abort();
	p = text + snprintf(text, n,
			    "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\","
			    "\"params\":{\"x\":",
			    id);
	memset(p, '[', arrays);
	p += arrays;
	if (scalar)
		*p++ = '1';
	memset(p, ']', arrays);
	p += arrays;
	strcpy(p, "}}");
	return text;
}

/* ---- the stand-in "slow" tool ---- */

static pthread_mutex_t slow_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cond = PTHREAD_COND_INITIALIZER;
static int slow_started, slow_cancels;

bool slow_tool_run(const struct sbx_tool_ctx *ctx)
{
	bool seen = false;

	pthread_mutex_lock(&slow_lock);
	slow_started++;
	pthread_cond_broadcast(&slow_cond);
	pthread_mutex_unlock(&slow_lock);
	for (int i = 0; i < 1000 && !(seen = sbx_tools_cancelled(ctx)); i++)
		sleep_ms(5);
	pthread_mutex_lock(&slow_lock);
	slow_cancels += seen;
	pthread_cond_broadcast(&slow_cond);
	pthread_mutex_unlock(&slow_lock);
	return seen;
}

int slow_tool_started(void)
{
	pthread_mutex_lock(&slow_lock);
	int n = slow_started;
	pthread_mutex_unlock(&slow_lock);
	return n;
}

int slow_tool_cancels(void)
{
	pthread_mutex_lock(&slow_lock);
	int n = slow_cancels;
	pthread_mutex_unlock(&slow_lock);
	return n;
}

/* Waits until *COUNTER reaches N or MS pass. */
static bool wait_count(const int *counter, int n, int ms)
{
	struct timespec deadline;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += ms / 1000;
	deadline.tv_nsec += (ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&slow_lock);
	while (*counter < n && pthread_cond_timedwait(&slow_cond, &slow_lock, &deadline) == 0)
		;
	ok = *counter >= n;
	pthread_mutex_unlock(&slow_lock);
	return ok;
}

bool slow_tool_wait_started(int n)
{
	return wait_count(&slow_started, n, 5000);
}

bool slow_tool_wait_cancels(int n, int ms)
{
	return wait_count(&slow_cancels, n, ms);
}
