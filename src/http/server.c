/* SPDX-License-Identifier: MIT */
/*
 * The HTTP front (include/sbx/http.h): the libmicrohttpd daemon, routing,
 * the Host/Origin allow-list (DNS rebinding), CORS, the body limits and
 * GET /health. The routes (the transports, /ready, the artifacts, /metrics,
 * the page) live next door, and below them all what they share: the
 * request's answer (request.c), its body (body.c), the worker pool
 * (workers.c) and the event streams (event_stream.c).
 *
 * Bodies: nothing of a body is kept before the headers show it is wanted
 * (the route reads one, the session exists: the transports' header checks).
 * A body is kept up to its limit (server.max_body, less for a POST to /mcp
 * without a session) and within the body budget (SBX_HTTP_BODY_BUDGET_MIN
 * or 8 x server.max_body in all, for the bodies being read and the parses
 * of them, which sbx_mcp_input_measure sizes up first), of which one client
 * address holds at most a quarter (SBX_HTTP_BODY_PEER_SHARE; at least
 * server.max_body). A body is charged its Content-Length (or, without one,
 * the buffer it grows into) before its buffer is made. A Content-Length
 * over any of these is answered from the headers; a body without one that
 * passes a limit midway is dropped as it comes in and answered at its end
 * (libmicrohttpd 0.9.75 queues no answer while a body streams in), or cut
 * off after SBX_HTTP_DRAIN_MAX more. A body must arrive within
 * server.body_timeout plus a second per server.body_min_rate bytes of it:
 * a client that trickles it in has its connection closed.
 *
 * Threading model: MHD_USE_THREAD_PER_CONNECTION (with its internal polling
 * thread, poll() rather than select() so that descriptors past FD_SETSIZE
 * work). Cheap requests (ping, initialize, tools/list, notifications) are
 * answered in the connection's thread. A tools/call runs on a pooled worker
 * (sbx_http_submit) with a larger stack while the connection's thread waits
 * for its first notification or its end (so progress can stream); an SSE
 * stream's thread waits on the session's queue; an artifact's thread waits
 * on the engine. So a slow call never holds up another connection, a ping on
 * the same session included. The cost is one thread per open connection,
 * with a small stack (SBX_HTTP_CONN_STACK), at most server.max_connections
 * (clamped to what RLIMIT_NOFILE allows); the next SBX_HTTP_OVERFLOW get an
 * immediate 503 with Retry-After, and further ones are closed at accept.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http-internal.h"
#include "sbx/log.h"
#include "sbx/artifact.h"
#include "sbx/common.h"

/* ---- the Host and Origin allow-list ---- */

static bool ieq(const char *a, size_t alen, const char *b)
{
	return strlen(b) == alen && strncasecmp(a, b, alen) == 0;
}

/* Splits "host[:port]" / "[v6][:port]": host span and port (0 = none, -1 =
 * malformed). */
long sbx_http_split_host_port(const char *s, size_t len, size_t *ret_hostlen)
{
	const char *colon = NULL;
	char *end;
	long port;

	if (len > 0 && s[0] == '[') {
		const char *rb = memchr(s, ']', len);
		if (!rb)
			return -1;
		if ((size_t)(rb + 1 - s) == len) {
			*ret_hostlen = len;
			return 0;
		}
		if (rb[1] != ':')
			return -1;
		colon = rb + 1;
	} else {
		colon = memchr(s, ':', len);
		if (!colon) {
			*ret_hostlen = len;
			return 0;
		}
	}
	*ret_hostlen = (size_t)(colon - s);
	if ((size_t)(colon + 1 - s) == len)
		return -1;
	{
		char buf[8];
		size_t pl = len - (size_t)(colon + 1 - s);
		if (pl >= sizeof(buf))
			return -1;
		memcpy(buf, colon + 1, pl);
		buf[pl] = '\0';
		errno = 0;
		port = strtol(buf, &end, 10);
		if (*end || errno || port <= 0 || port > 65535 || buf[0] == '+' || buf[0] == '-')
			return -1;
	}
	return port;
}

static bool loopback_host(const char *h, size_t len)
{
	return ieq(h, len, "localhost") || ieq(h, len, "127.0.0.1") || ieq(h, len, "[::1]");
}

/* Host must name this server: a loopback name, the listen address or the
 * public URL's host, with no port or one we answer on. */
bool sbx_http_host_allowed(struct sbx_http *h, const char *host)
{
	size_t hl;
	long port;

	if (!host || !*host || strlen(host) > 255)
		return false;
	port = sbx_http_split_host_port(host, strlen(host), &hl);
	if (port < 0)
		return false;
	if (port > 0 && port != h->port && (h->public_port == 0 || port != (long)h->public_port))
		return false;
	return loopback_host(host, hl) || ieq(host, hl, h->listen_host) ||
	       (h->public_host[0] && ieq(host, hl, h->public_host));
}

/* Origin, when present: a loopback origin, the public URL's, or one listed
 * in server.allowed_origins. */
bool sbx_http_origin_allowed(struct sbx_http *h, const char *origin)
{
	const char *rest = NULL;
	size_t hl, len = strlen(origin);

	if (strncasecmp(origin, "http://", 7) == 0)
		rest = origin + 7;
	else if (strncasecmp(origin, "https://", 8) == 0)
		rest = origin + 8;
	if (rest && !strchr(rest, '/') && sbx_http_split_host_port(rest, strlen(rest), &hl) >= 0 &&
	    loopback_host(rest, hl))
		return true;
	if (h->public_origin[0] && ieq(origin, len, h->public_origin))
		return true;
	for (const char *p = h->settings->server.allowed_origins; p && *p;) {
		const char *e;
		size_t n;
		while (*p == ' ' || *p == ',' || *p == '\t')
			p++;
		e = p;
		while (*e && *e != ',')
			e++;
		n = (size_t)(e - p);
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '/'))
			n--;
		if (n > 0 && n == len && strncasecmp(p, origin, n) == 0)
			return true;
		p = e;
	}
	return false;
}

/* ---- connections (the table: src/http/connections.c) ---- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct sbx_http *h = cls;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		sbx_conn_started(h, conn, socket_context);
	else
		sbx_conn_closed(h, socket_context);
}

/* Past the overflow band a connection is closed at once (no thread). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)addrlen;
	return sbx_conn_accept_ok(cls, addr) ? MHD_YES : MHD_NO;
}

/* 503 + Retry-After for a connection over LIMIT (the setting, or "server
 * memory"), none of the connections it would displace being idle; the
 * connection closes. */
static enum MHD_Result respond_busy(struct sbx_http_request *rq, const char *limit)
{
	static const char *const headers[] = {"Retry-After", "1", MHD_HTTP_HEADER_CONNECTION,
					      "close", NULL};
	char body[400];

	if (strcmp(limit, "server.max_connections_per_ip") == 0)
		snprintf(body, sizeof(body),
			 "{\"error\":\"too many connections from this client address, none of "
			 "them idle (%s = %lld); retry later\"}",
			 limit, (long long)rq->http->settings->server.max_connections_per_ip);
	else if (strcmp(limit, "server.max_connections") == 0)
		snprintf(body, sizeof(body),
			 "{\"error\":\"too many connections, none of them idle (%s = %d); "
			 "retry later\"}",
			 limit, rq->http->max_connections);
	else
		snprintf(body, sizeof(body),
			 "{\"error\":\"too many connections (%s); retry later\"}", limit);
	return sbx_http_respond(rq, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", body,
				strlen(body), headers);
}

/* ---- routing ---- */

enum sbx_route sbx_http_route_of(const char *url)
{
	if (strcmp(url, "/health") == 0)
		return SBX_ROUTE_HEALTH;
	if (strcmp(url, "/ready") == 0)
		return SBX_ROUTE_READY;
	if (strcmp(url, "/sse") == 0)
		return SBX_ROUTE_SSE;
	if (strcmp(url, "/messages") == 0 || strcmp(url, "/messages/") == 0)
		return SBX_ROUTE_MESSAGES;
	if (strcmp(url, "/mcp") == 0 || strcmp(url, "/mcp/") == 0)
		return SBX_ROUTE_MCP;
	if (strncmp(url, SBX_ARTIFACT_ROUTE, strlen(SBX_ARTIFACT_ROUTE)) == 0)
		return SBX_ROUTE_ARTIFACT;
	if (strcmp(url, "/metrics") == 0)
		return SBX_ROUTE_METRICS;
	if (sbx_ui_path(url))
		return SBX_ROUTE_UI;
	return SBX_ROUTE_NONE;
}

/* CORS preflight for an allowed origin. */
static enum MHD_Result preflight(struct sbx_http_request *rq)
{
	static const char *const headers[] = {
	    "Access-Control-Allow-Methods",
	    "GET, POST, DELETE, OPTIONS",
	    "Access-Control-Allow-Headers",
	    "Content-Type, Accept, Authorization, X-API-Key, Mcp-Session-Id, MCP-Protocol-Version, "
	    "Last-Event-ID",
	    "Access-Control-Max-Age",
	    "600",
	    NULL,
	};
	return sbx_http_respond(rq, MHD_HTTP_NO_CONTENT, NULL, NULL, 0, headers);
}

/* Checks before the body: answers at once when the request is refused. */
static bool header_phase(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	struct sbx_http *h = rq->http;
	const char *origin = sbx_http_header(rq, "Origin");
	unsigned long long length;
	const char *cl;

	if (rq->route == SBX_ROUTE_MCP && strcmp(rq->method, "POST") != 0 &&
	    strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "DELETE") != 0 &&
	    strcmp(rq->method, "OPTIONS") != 0) {
		*ret = sbx_http_respond_405(rq, "GET, POST, DELETE");
		return true;
	}
	if (!sbx_http_host_allowed(h, sbx_http_header(rq, "Host"))) {
		*ret = sbx_http_respond_error(rq, MHD_HTTP_FORBIDDEN,
					      "Host not allowed (DNS rebinding protection)");
		return true;
	}
	if (origin && !sbx_http_origin_allowed(h, origin)) {
		*ret = sbx_http_respond_error(rq, MHD_HTTP_FORBIDDEN, "Origin not allowed");
		return true;
	}
	rq->origin = origin;
	if (strcmp(rq->method, "OPTIONS") == 0 && rq->route != SBX_ROUTE_NONE &&
	    rq->route != SBX_ROUTE_HEALTH && rq->route != SBX_ROUTE_READY &&
	    rq->route != SBX_ROUTE_METRICS && rq->route != SBX_ROUTE_UI && origin) {
		*ret = preflight(rq);
		return true;
	}
	/* Who it is, from the headers, before anything of a body is looked at
	 * or charged and before a session is looked up (a refusal is answered
	 * now; libmicrohttpd then drops the upload unread). */
	if (sbx_http_auth_gate(rq, ret))
		return true;
	rq->body_max = h->max_body;
	cl = sbx_http_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
	length = cl ? strtoull(cl, NULL, 10) : 0;
	if (length > rq->body_max) {
		*ret = sbx_body_respond_too_large(rq);
		return true;
	}
	/* The transports check the session from the headers (and may lower
	 * body_max): nothing of a body is read before it is known to be wanted. */
	switch (rq->route) {
	case SBX_ROUTE_MCP:
		if (sbx_streamable_check(rq, ret))
			return true;
		break;
	case SBX_ROUTE_SSE:
	case SBX_ROUTE_MESSAGES:
		if (sbx_sse_check(rq, ret))
			return true;
		break;
	default:
		break;
	}
	rq->want_body = (rq->route == SBX_ROUTE_MCP || rq->route == SBX_ROUTE_MESSAGES) &&
			strcmp(rq->method, "POST") == 0;
	if (length > rq->body_max) {
		*ret = sbx_body_respond_too_large(rq);
		return true;
	}
	rq->length = (size_t)length;
	/* A body that cannot fit the budget, or its peer's share, now is
	 * refused before it is sent (one without Content-Length, as it streams
	 * in). */
	if (rq->want_body && length > h->body_budget - atomic_load(&h->body_bytes)) {
		rq->peer_busy = false;
		*ret = sbx_body_respond_busy(rq);
		return true;
	}
	if (rq->want_body && length > h->peer_share - sbx_body_peer_held(h, &rq->peer)) {
		rq->peer_busy = true;
		*ret = sbx_body_respond_busy(rq);
		return true;
	}
	return false;
}

static enum MHD_Result dispatch(struct sbx_http_request *rq)
{
	bool get = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0;

	switch (rq->route) {
	case SBX_ROUTE_HEALTH:
		if (!get) {
			return sbx_http_respond_405(rq, "GET, HEAD");
		}
		return sbx_http_respond(rq, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}",
					strlen("{\"status\":\"ok\"}"), NULL);
	case SBX_ROUTE_READY:
		if (!get)
			return sbx_http_respond_405(rq, "GET, HEAD");
		return sbx_ready_handle(rq);
	case SBX_ROUTE_SSE:
		return sbx_sse_open(rq);
	case SBX_ROUTE_MESSAGES:
		return sbx_sse_post(rq);
	case SBX_ROUTE_MCP:
		return sbx_streamable_handle(rq);
	case SBX_ROUTE_ARTIFACT:
		return sbx_artifact_handle(rq);
	case SBX_ROUTE_METRICS:
		return sbx_metrics_handle(rq);
	case SBX_ROUTE_UI:
		return sbx_ui_handle(rq);
	case SBX_ROUTE_NONE:
		break;
	}
	return sbx_http_respond_error(rq, MHD_HTTP_NOT_FOUND, "not found");
}

static struct sbx_http_request *request_new(struct sbx_http *h, struct MHD_Connection *conn)
{
	struct sbx_http_request *rq = calloc(1, sizeof(*rq));

	if (rq) {
		rq->http = h;
		rq->conn = conn;
	}
	return rq;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct sbx_http *h = cls;
	struct sbx_http_request *rq = *con_cls;
	const char *limit;
	enum MHD_Result r;

	(void)version;
	if (!rq || !rq->method) {
		if (!rq) /* on_uri_seen made none (out of memory) */
			rq = request_new(h, conn);
		if (!rq)
			return MHD_NO;
		rq->url = url;
		rq->method = method;
		rq->route = sbx_http_route_of(url);
		rq->start_ms = sbx_monotonic_ms();
		sbx_http_principal_default(&rq->principal);
		{
			const union MHD_ConnectionInfo *ci =
			    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
			sbx_peer_of(ci ? ci->client_addr : NULL, &rq->peer);
			sbx_client_text(ci ? ci->client_addr : NULL, rq->client,
					sizeof(rq->client));
		}
		*con_cls = rq;
		if (!rq->counted) {
			rq->counted = true;
			rq->evicted = !sbx_conn_request_begin(h, conn);
		}
		if (!sbx_conn_headers_in(h, conn))
			rq->evicted = true;
		if (rq->evicted) /* closed to let another in: no answer can go out */
			return MHD_NO;
		rq->early = true;
		{
			const char *cl = sbx_http_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
			rq->has_body = (cl && strtoull(cl, NULL, 10) > 0) ||
				       sbx_http_header(rq, MHD_HTTP_HEADER_TRANSFER_ENCODING);
		}
		if (atomic_load(&h->stopping))
			r = sbx_http_respond_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						   "server stopping");
		else if ((limit = sbx_conn_over_limit(conn)))
			r = respond_busy(rq, limit);
		else if (!header_phase(rq, &r))
			r = MHD_YES;
		rq->early = false;
		return r;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		rq->received += n;
		/* A body trickled in: the connection is closed (no answer can go
		 * out while a body streams in). */
		if (!sbx_body_in_time(rq))
			return MHD_NO;
		if (rq->want_body && !rq->refused) {
			/* Refused as soon as it passes a limit: what came is freed,
			 * the rest is not kept. */
			if (n > rq->body_max - rq->body.len)
				rq->refused = MHD_HTTP_CONTENT_TOO_LARGE;
			else if (!sbx_body_charge(rq, n))
				rq->refused = MHD_HTTP_SERVICE_UNAVAILABLE;
			else if (sbx_buf_append(&rq->body, upload_data, n) < 0)
				return MHD_NO;
			if (!rq->refused)
				return MHD_YES;
			sbx_buf_release(&rq->body);
			sbx_body_release(rq);
		}
		/* A body nobody reads (or refused): dropped as it comes, up to
		 * SBX_HTTP_DRAIN_MAX. */
		rq->dropped += n;
		return rq->dropped > SBX_HTTP_DRAIN_MAX ? MHD_NO : MHD_YES;
	}
	if (rq->refused == MHD_HTTP_CONTENT_TOO_LARGE)
		return sbx_body_respond_too_large(rq);
	if (rq->refused)
		return sbx_body_respond_busy(rq);
	return dispatch(rq);
}

/* A request's first line has come (libmicrohttpd has read it, perhaps
 * with part of its headers): from here its connection is busy, so that
 * fair admission never closes it under a request that has begun. */
static void *on_uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct sbx_http *h = cls;
	struct sbx_http_request *rq = request_new(h, conn);

	(void)uri;
	if (rq) {
		rq->counted = true;
		rq->evicted = !sbx_conn_request_begin(h, conn);
	}
	return rq;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct sbx_http_request *rq = *con_cls;

	(void)toe;
	if (!rq)
		return;
	if (rq->counted)
		sbx_conn_request_end(cls, conn);
	sbx_buf_release(&rq->body);
	sbx_body_release(rq);
	sbx_http_session_unref(rq->session);
	free(rq);
	*con_cls = NULL;
}

/* MHD would percent-decode the path before routing; the artifact route
 * decodes each segment itself (sbx_artifact_parse), so an escaped '/' or
 * '%' in a file name survives. Query values stay raw too (session ids are
 * hex). */
static size_t keep_escapes(void *cls, struct MHD_Connection *conn, char *s)
{
	(void)cls;
	(void)conn;
	return strlen(s);
}

/* ---- start / stop ---- */

/* Opens the listening socket on LISTEN:PORT. */
static int open_listener(const char *listen_addr, uint16_t port, int *ret_fd, uint16_t *ret_port,
			 bool *ret_v6, struct sbx_error *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char portstr[8];
	int fd, one = 1, r;

	snprintf(portstr, sizeof(portstr), "%u", port);
	r = getaddrinfo(listen_addr, portstr, &hints, &ai);
	if (r != 0)
		return sbx_error_set(err, -EINVAL, "listen address %s: %s", listen_addr,
				     gai_strerror(r));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(ai);
		return sbx_error_set(err, r, "socket: %s", strerror(-r));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6) {
		/* "::" listens on IPv4 too; "::1" on IPv6 only. */
		int v6only = 0;
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
	}
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		r = -errno;
		close(fd);
		freeaddrinfo(ai);
		return sbx_error_set(err, r, "listen on %s port %u: %s", listen_addr, port,
				     strerror(-r));
	}
	*ret_v6 = ai->ai_family == AF_INET6;
	freeaddrinfo(ai);
	*ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	*ret_fd = fd;
	return 0;
}

/* server.max_connections, lowered to what the open-file limit leaves after
 * SBX_HTTP_FD_RESERVE and the overflow band (at least 8). */
static int connection_limit(int64_t wanted)
{
	struct rlimit rl;
	int64_t cap = wanted;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		int64_t fds = (int64_t)rl.rlim_cur - SBX_HTTP_FD_RESERVE - 2 * SBX_HTTP_OVERFLOW -
			      SBX_HTTP_LINGER_MAX;
		if (fds < cap)
			cap = fds;
	}
	return cap < 8 ? 8 : (int)cap;
}

/* Fills public_host, public_port and public_origin from public_url. */
int sbx_http_parse_public_url(struct sbx_http *h)
{
	const char *u = h->public_url, *rest, *end;
	size_t schemelen, hl;
	long port;

	rest = strstr(u, "://");
	if (!rest)
		return -EINVAL;
	schemelen = (size_t)(rest - u);
	rest += 3;
	end = rest + strcspn(rest, "/?#");
	port = sbx_http_split_host_port(rest, (size_t)(end - rest), &hl);
	if (port < 0 || hl == 0)
		return -EINVAL;
	h->public_host = strndup(rest, hl);
	h->public_origin = strndup(u, schemelen + 3 + (size_t)(end - rest));
	if (!h->public_host || !h->public_origin)
		return -ENOMEM;
	if (port == 0)
		port = ieq(u, schemelen, "https") ? 443 : 80;
	h->public_port = (unsigned)port;
	return 0;
}

/* The keys watch: the keys file re-read about once a second
 * (sbx_auth_refresh), and when what is accepted changed, the sessions of
 * keys no longer accepted ended, streams and calls with them, whether or
 * not a request comes. */
static void *keys_watch(void *arg)
{
	struct sbx_http *h = arg;
	uint64_t seen = sbx_auth_refresh(h->auth);

	pthread_mutex_lock(&h->keys_lock);
	while (!atomic_load(&h->stopping)) {
		uint64_t now;
		sbx_cond_wait_until(&h->keys_cond, &h->keys_lock, sbx_monotonic_ms() + 1000);
		if (atomic_load(&h->stopping))
			break;
		pthread_mutex_unlock(&h->keys_lock);
		now = sbx_auth_refresh(h->auth);
		if (now != seen) {
			size_t n = sbx_session_table_end_revoked(h->sessions, h->auth);
			if (n)
				sbx_log("auth: ended %zu session%s of revoked API keys", n,
					n == 1 ? "" : "s");
			seen = now;
		}
		pthread_mutex_lock(&h->keys_lock);
	}
	pthread_mutex_unlock(&h->keys_lock);
	return NULL;
}

static int keys_watch_start(struct sbx_http *h, struct sbx_error *err)
{
	pthread_attr_t attr;
	int r;

	if (!h->auth || !sbx_auth_checks_keys(h->auth))
		return 0;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, SBX_HTTP_STACK);
	r = -pthread_create(&h->keys_thread, &attr, keys_watch, h);
	pthread_attr_destroy(&attr);
	if (r < 0)
		return sbx_error_set(err, r, "http: cannot start the keys watch: %s", strerror(-r));
	h->keys_thread_started = true;
	return 0;
}

int sbx_http_start(const struct sbx_http_config *cfg, sbx_http **ret_http, struct sbx_error *err)
{
	const struct sbx_settings *s = cfg->settings;
	sbx_http *h = calloc(1, sizeof(*h));
	bool v6 = false;
	int r;

	if (!h)
		return sbx_error_set(err, -ENOMEM, "http: out of memory");
	h->settings = s;
	h->mcp = cfg->mcp;
	h->manager = cfg->manager;
	h->auth = cfg->auth;
	h->audit = cfg->audit;
	h->link_key = sbx_mcp_link_key(cfg->mcp);
	h->listen_fd = -1;
	h->max_body = (size_t)s->server.max_body;
	h->max_calls_per_session = (int)s->server.max_calls_per_session;
	h->body_budget = h->max_body > SIZE_MAX / SBX_HTTP_BODY_BUDGET_BODIES
			     ? SIZE_MAX
			     : h->max_body * SBX_HTTP_BODY_BUDGET_BODIES;
	if (h->body_budget < SBX_HTTP_BODY_BUDGET_MIN)
		h->body_budget = SBX_HTTP_BODY_BUDGET_MIN;
	h->peer_share = h->body_budget / SBX_HTTP_BODY_PEER_SHARE;
	if (h->peer_share < h->max_body)
		h->peer_share = h->max_body;
	h->body_timeout_ms = s->server.body_timeout_ms;
	h->body_min_rate = s->server.body_min_rate;
	/* Whole seconds for libmicrohttpd, rounded up; keepalives twice as often. */
	h->stream_timeout_s = (unsigned)((s->server.stream_stall_timeout_ms + 999) / 1000);
	h->keepalive_ms = s->server.stream_stall_timeout_ms / 2;
	if (h->keepalive_ms > SBX_SSE_KEEPALIVE_MS)
		h->keepalive_ms = SBX_SSE_KEEPALIVE_MS;
	h->queued_max = (size_t)s->server.max_queued;
	atomic_init(&h->queued, 0);
	pthread_mutex_init(&h->outq_lock, NULL);
	pthread_mutex_init(&h->peers_lock, NULL);
	atomic_init(&h->body_bytes, 0);
	atomic_init(&h->stopping, false);
	atomic_init(&h->connections, 0);
	pthread_mutex_init(&h->ready_log_lock, NULL);
	pthread_mutex_init(&h->keys_lock, NULL);
	pthread_mutex_init(&h->audit_lock, NULL);
	sbx_cond_init_monotonic(&h->keys_cond);
	pthread_mutex_init(&h->workers_lock, NULL);
	pthread_cond_init(&h->workers_cond, NULL);
	sbx_cond_init_monotonic(&h->work_cond);
	sbx_queue_init(&h->jobq);
	h->max_connections = connection_limit(s->server.max_connections);

	h->peers = sbx_body_peers_new();
	r = h->peers ? sbx_auth_failures_new(&h->auth_failures) : -ENOMEM;
	if (r == 0)
		r = sbx_conn_table_new(h->max_connections, (int)s->server.max_connections_per_ip,
				       &h->conns);
	if (r == 0)
		r = sbx_linger_new(&h->linger);
	if (r == 0)
		r = sbx_tenant_count_new(0, &h->downloads);
	if (r == 0)
		r = sbx_session_table_new(h, &h->sessions);
	if (r < 0) {
		sbx_error_set(err, r, "http: out of memory");
		goto fail;
	}
	r = open_listener(s->server.listen, (uint16_t)s->server.port, &h->listen_fd, &h->port, &v6,
			  err);
	if (r < 0)
		goto fail;
	{
		bool colon = strchr(s->server.listen, ':') != NULL;
		char url[512];
		if (asprintf(&h->listen_host, colon ? "[%s]" : "%s", s->server.listen) < 0) {
			h->listen_host = NULL;
			r = sbx_error_set(err, -ENOMEM, "http: out of memory");
			goto fail;
		}
		if (s->server.public_url[0])
			snprintf(url, sizeof(url), "%s", s->server.public_url);
		else
			snprintf(url, sizeof(url), "http://%s:%u", h->listen_host, h->port);
		h->public_url = strdup(url);
		if (!h->public_url) {
			r = sbx_error_set(err, -ENOMEM, "http: out of memory");
			goto fail;
		}
		for (size_t n = strlen(h->public_url); n > 0 && h->public_url[n - 1] == '/'; n--)
			h->public_url[n - 1] = '\0';
	}
	r = sbx_http_parse_public_url(h);
	if (r < 0) {
		sbx_error_set(err, r, "server.public_url %s: not an http(s) URL", h->public_url);
		goto fail;
	}
	r = sbx_mcp_set_public_url(h->mcp, h->public_url);
	if (r < 0) {
		sbx_error_set(err, r, "http: out of memory");
		goto fail;
	}
	r = sbx_artifact_watch_start(h, err);
	if (r < 0)
		goto fail;
	h->daemon = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC |
		(v6 ? MHD_USE_IPv6 : 0),
	    0, on_accept, h, on_request, h, MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->max_connections + 2 * SBX_HTTP_OVERFLOW),
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SBX_HTTP_IDLE_TIMEOUT_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SBX_HTTP_CONN_MEMORY,
	    MHD_OPTION_THREAD_STACK_SIZE, (size_t)SBX_HTTP_CONN_STACK, MHD_OPTION_NOTIFY_COMPLETED,
	    on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
	    MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL, MHD_OPTION_URI_LOG_CALLBACK,
	    on_uri_seen, h, MHD_OPTION_END);
	if (!h->daemon) {
		r = sbx_error_set(err, -EIO, "http: cannot start the server on %s port %u",
				  s->server.listen, h->port);
		goto fail;
	}
	h->listen_fd = -1; /* the daemon owns it now and closes it on stop */
	r = keys_watch_start(h, err);
	if (r < 0)
		goto fail;
	*ret_http = h;
	return 0;
fail:
	sbx_http_stop(h);
	return r;
}

uint16_t sbx_http_port(const sbx_http *h)
{
	return h->port;
}

const char *sbx_http_public_url(const sbx_http *h)
{
	return h->public_url;
}

sbx_http *sbx_http_stop(sbx_http *h)
{
	if (!h)
		return NULL;
	atomic_store(&h->stopping, true);
	if (h->keys_thread_started) {
		pthread_mutex_lock(&h->keys_lock);
		pthread_cond_broadcast(&h->keys_cond);
		pthread_mutex_unlock(&h->keys_lock);
		pthread_join(h->keys_thread, NULL);
	}
	if (h->sessions)
		sbx_session_table_close_all(h->sessions);
	if (h->daemon)
		MHD_stop_daemon(h->daemon);
	sbx_artifact_watch_stop(h); /* after the daemon: no body runs now */
	sbx_http_wait_workers(h);
	h->linger = sbx_linger_free(h->linger);
	h->conns = sbx_conn_table_free(h->conns);
	h->downloads = sbx_tenant_count_free(h->downloads);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	sbx_session_table_free(h->sessions);
	sbx_body_peers_free(h->peers);
	sbx_auth_failures_free(h->auth_failures);
	pthread_mutex_destroy(&h->peers_lock);
	pthread_mutex_destroy(&h->outq_lock);
	pthread_cond_destroy(&h->workers_cond);
	pthread_cond_destroy(&h->work_cond);
	pthread_mutex_destroy(&h->workers_lock);
	pthread_mutex_destroy(&h->ready_log_lock);
	pthread_cond_destroy(&h->keys_cond);
	pthread_mutex_destroy(&h->keys_lock);
	pthread_mutex_destroy(&h->audit_lock);
	free(h->public_url);
	free(h->listen_host);
	free(h->public_host);
	free(h->public_origin);
	free(h);
	return NULL;
}
