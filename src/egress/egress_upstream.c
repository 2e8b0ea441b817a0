/* SPDX-License-Identifier: MIT */
/*
 * The egress relay's upstream workers (src/egress/egress-pump.h): a fetch
 * (a GET or HEAD for the index, with its credentials, or for an allowed
 * http:// host, without) passed back response head and body, and the
 * connect of a CONNECT tunnel, which the pump then carries. One thread per
 * stream; each hands bytes to the pump through the stream's bounded out
 * buffer and watches its cancel flag.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "egress-pump.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/netaddr.h"

/* The address check of one connection: curl opens its sockets through
 * open_checked, which sees each address it is about to connect to, after
 * the name lookup (so a name that resolves differently the second time
 * gains nothing). */
struct guard {
	bool any_address;	     /* st->req.any_address: no check */
	enum sbx_addr_class refused; /* the class of addr, or PUBLIC: none refused */
	char addr[INET6_ADDRSTRLEN];
};

static curl_socket_t open_checked(void *userdata, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct guard *g = userdata;
	enum sbx_addr_class c = sbx_addr_classify(&a->addr, a->addrlen);
	const void *raw = NULL;

	(void)purpose;
	if (g->any_address || c == SBX_ADDR_PUBLIC)
		return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	/* Refused. The answer names the first such address, an IPv4 one
	 * rather than an IPv6 one (what operators mostly write). */
	if (g->refused == SBX_ADDR_PUBLIC || (a->family == AF_INET && strchr(g->addr, ':'))) {
		if (a->family == AF_INET)
			raw = &((const struct sockaddr_in *)(const void *)&a->addr)->sin_addr;
		else if (a->family == AF_INET6)
			raw = &((const struct sockaddr_in6 *)(const void *)&a->addr)->sin6_addr;
		if (!raw || !inet_ntop(a->family, raw, g->addr, sizeof(g->addr)))
			snprintf(g->addr, sizeof(g->addr), "?");
		g->refused = c;
	}
	return CURL_SOCKET_BAD;
}

/* Sets up C to connect through G for ST's request. */
static void guard_init(CURL *c, struct guard *g, const struct estream *st)
{
	*g = (struct guard){.any_address = st->req.any_address, .refused = SBX_ADDR_PUBLIC};
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, g);
}

/* The answer when G refused an address (and no other one connected):
 * 403 naming HOST, the address, its class and the setting. */
static bool guard_refused(const struct guard *g, const char *host, int port, char *msg, size_t size)
{
	bool v6 = strchr(g->addr, ':') != NULL;
	const char *what = sbx_addr_class_name(g->refused);

	if (g->refused == SBX_ADDR_PUBLIC)
		return false;
	snprintf(msg, size,
		 "mcp-sandbox: %s resolves to %s, %s %s address: the server connects a sandbox "
		 "to such addresses only when sandbox.egress_allow names the address itself, "
		 "not a name; if this host is meant to be reached, ask the server's operator "
		 "to add %s%s%s:%d there",
		 host, g->addr, strchr("aeiou", what[0]) ? "an" : "a", what, v6 ? "[" : "", g->addr,
		 v6 ? "]" : "", port);
	return true;
}

static int xfer_cancelled(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut,
			  curl_off_t un)
{
	struct estream *st = userdata;
	bool c;

	(void)dt, (void)dn, (void)ut, (void)un;
	pthread_mutex_lock(&st->e->lock);
	c = st->cancel;
	pthread_mutex_unlock(&st->e->lock);
	return c;
}

/* Hands N bytes to the pump, waiting (bounded) while the relay has not
 * taken what came before; false when the stream ended or stalled. */
static bool push(struct estream *st, const void *p, size_t n)
{
	struct sbx_egress *e = st->e;
	int64_t until = sbx_monotonic_ms() + STALL_MS;
	bool ok = false;

	pthread_mutex_lock(&e->lock);
	while (!st->cancel && out_pending(st) > 0 && out_pending(st) + n > OUT_CAP)
		if (sbx_cond_wait_until(&e->cond, &e->lock, until) == ETIMEDOUT)
			break;
	if (!st->cancel && (out_pending(st) == 0 || out_pending(st) + n <= OUT_CAP) &&
	    out_append(st, p, n) == 0)
		ok = true;
	wake(e);
	pthread_mutex_unlock(&e->lock);
	return ok;
}

/* A fetch slower than LOW_SPEED_BPS bytes a second for
 * sandbox.egress_low_speed_time (e->low_speed_ms, whole seconds) is cut off,
 * so that a host that trickles holds a worker no longer. The wait for the
 * first byte counts too; 30 s leaves room for an index that proxies another
 * and fetches upstream first. An index page (HTML or JSON, PEP 503 and 691)
 * must have arrived sandbox.egress_page_timeout (e->page_ms) after its
 * request; files and forwards have only the bound above (a large wheel may
 * take long, at a fair rate). */
#define LOW_SPEED_BPS 1024L

struct fetch {
	struct estream *st;
	int64_t start;	       /* of the request (monotonic ms) */
	int64_t page_deadline; /* 0 until the response is an index page */
	bool page_late;	       /* cut off at it */
	long status;	       /* of the response being read */
	struct sbx_buf head;   /* its headers passed on */
	bool head_sent;
};

/* Fetches: xfer_cancelled, and an index page's deadline. */
static int fetch_progress(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut,
			  curl_off_t un)
{
	struct fetch *f = userdata;

	if (f->page_deadline && sbx_monotonic_ms() > f->page_deadline) {
		f->page_late = true;
		return 1;
	}
	return xfer_cancelled(f->st, dt, dn, ut, un);
}

/* Response headers passed back to the sandbox. */
static const char *const kept_headers[] = {
    "accept-ranges", "age",  "cache-control", "content-encoding", "content-length", "content-range",
    "content-type",  "date", "etag",	      "expires",	  "last-modified",  "location",
    "vary",
};

/* Whether the Content-Type value V[0..N) is an index page's. */
static bool is_page(const char *v, size_t n)
{
	static const char *const types[] = {"text/html", "application/vnd.pypi.simple",
					    "application/json"};

	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(types); i++)
		if (n >= strlen(types[i]) && strncasecmp(v, types[i], strlen(types[i])) == 0)
			return true;
	return false;
}

static size_t on_header(char *b, size_t size, size_t nitems, void *userdata)
{
	struct fetch *f = userdata;
	struct sbx_egress *e = f->st->e;
	size_t n = size * nitems, len = n, name;
	const char *colon;

	while (len && (b[len - 1] == '\n' || b[len - 1] == '\r'))
		len--;
	if (len >= 5 && memcmp(b, "HTTP/", 5) == 0) { /* a new response (after a 1xx) */
		const char *sp = memchr(b, ' ', len);
		f->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		sbx_buf_reset(&f->head);
		return n;
	}
	colon = memchr(b, ':', len);
	if (!colon)
		return n;
	name = (size_t)(colon - b);
	if (name == 12 && strncasecmp(b, "content-type", 12) == 0 &&
	    f->st->req.kind == EGRESS_REQ_INDEX &&
	    is_page(colon + 1, (size_t)(b + len - colon - 1)))
		f->page_deadline = f->start + f->st->e->page_ms;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(kept_headers); i++) {
		const char *v = b + name + 1;
		size_t vlen;

		if (strlen(kept_headers[i]) != name || strncasecmp(b, kept_headers[i], name) != 0)
			continue;
		while (v < b + len && (*v == ' ' || *v == '\t'))
			v++;
		vlen = (size_t)(b + len - v);
		if (f->head.len + name + vlen + 4 > EGRESS_HEAD_MAX)
			break;
		/* A redirect within the index stays on the relay. */
		const char *o = e->pol.index_origin;
		size_t ol = strlen(o);
		if (name == 8 && vlen >= ol && strncasecmp(v, o, ol) == 0 &&
		    (vlen == ol || v[ol] == '/'))
			sbx_buf_appendf(&f->head, "Location: http://127.0.0.1:%d%.*s\r\n", e->port,
					(int)(vlen - ol), v + ol);
		else
			sbx_buf_appendf(&f->head, "%.*s: %.*s\r\n", (int)name, b, (int)vlen, v);
		break;
	}
	return n;
}

static bool send_head(struct fetch *f)
{
	struct sbx_buf h = SBX_BUF_INIT;
	bool ok;

	f->head_sent = true;
	if (sbx_buf_appendf(&h, "HTTP/1.1 %ld %s\r\n%sConnection: close\r\n\r\n", f->status,
			    f->status < 300 ? "OK" : "-", f->head.data ? f->head.data : "") < 0)
		return false;
	ok = push(f->st, h.data, h.len);
	sbx_buf_release(&h);
	return ok;
}

static size_t on_body(char *b, size_t size, size_t nmemb, void *userdata)
{
	struct fetch *f = userdata;
	size_t n = size * nmemb;

	if (!f->head_sent && !send_head(f))
		return 0;
	if (n && !push(f->st, b, n))
		return 0;
	return n;
}

void *fetch_main(void *arg)
{
	struct estream *st = arg;
	struct sbx_egress *e = st->e;
	const struct egress_request *q = &st->req;
	struct fetch f = {.st = st, .start = sbx_monotonic_ms()};
	struct guard g = {.refused = SBX_ADDR_PUBLIC};
	struct curl_slist *hl = NULL;
	char *url = NULL, msg[512], slow[128] = "";
	CURL *c = curl_easy_init();
	CURLcode code = CURLE_OUT_OF_MEMORY;
	bool index = q->kind == EGRESS_REQ_INDEX, v6 = strchr(q->host, ':') != NULL;
	int r;

	if (index)
		r = asprintf(&url, "%s%s", e->pol.index_origin, q->path);
	else
		r = asprintf(&url, "http://%s%s%s:%d%s", v6 ? "[" : "", q->host, v6 ? "]" : "",
			     q->port, q->path);
	if (r < 0)
		url = NULL;
	for (size_t off = 0; off < q->headers_len; off += strlen(q->headers + off) + 1) {
		struct curl_slist *n = curl_slist_append(hl, q->headers + off);
		if (!n)
			goto out;
		hl = n;
	}
	/* curl adds none of its own then (an index may vary on them). */
	if (!(hl = curl_slist_append(hl, "Accept:")) || !c || !url)
		goto out;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_PROXY, ""); /* the server connects itself */
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_BPS);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)((e->low_speed_ms + 999) / 1000));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	/* The path goes out as egress_parse_request checked it (no dot segment
	 * squashed); redirects are passed back, never followed here
	 * (CURLOPT_FOLLOWLOCATION stays off). */
	curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	if (q->head_only)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	if (index && e->pol.user) {
		curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(c, CURLOPT_USERNAME, e->pol.user);
		curl_easy_setopt(c, CURLOPT_PASSWORD, e->pol.password ? e->pol.password : "");
	}
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &f);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, fetch_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, &f);
	guard_init(c, &g, st);
	code = curl_easy_perform(c);
	if (f.page_late)
		snprintf(slow, sizeof(slow),
			 "an index page must arrive within %lld s (sandbox.egress_page_timeout)",
			 (long long)(e->page_ms / 1000));
	else
		snprintf(slow, sizeof(slow),
			 "under 1 KiB/s for %lld s (sandbox.egress_low_speed_time)",
			 (long long)((e->low_speed_ms + 999) / 1000));
	if (f.page_late || code == CURLE_OPERATION_TIMEDOUT)
		sbx_log_warn("sandbox %s: egress: a fetch from %s cut off: %s", e->sid,
			     index ? e->pol.index_host : q->host, slow);
	if (code == CURLE_OK && !f.head_sent)
		send_head(&f);
out:
	if (code != CURLE_OK && !f.head_sent) {
		pthread_mutex_lock(&e->lock);
		if (st->cancel) {
			/* ended meanwhile */
		} else if (guard_refused(&g, q->host, q->port, msg, sizeof(msg))) {
			answer(st, 403, msg);
			wake(e);
		} else if (f.page_late || code == CURLE_OPERATION_TIMEDOUT) {
			snprintf(
			    msg, sizeof(msg),
			    "mcp-sandbox: %s was too slow: %s (the server's bounds on a fetch)",
			    index ? e->pol.index_host : q->host, slow);
			answer(st, 504, msg);
			wake(e);
		} else {
			snprintf(msg, sizeof(msg), "mcp-sandbox: could not fetch from %s: %s",
				 index ? e->pol.index_host : q->host, curl_easy_strerror(code));
			answer(st, code == CURLE_OPERATION_TIMEDOUT ? 504 : 502, msg);
			wake(e);
		}
		pthread_mutex_unlock(&e->lock);
	}
	curl_slist_free_all(hl);
	if (c)
		curl_easy_cleanup(c);
	free(url);
	sbx_buf_release(&f.head);
	worker_end(st);
	return NULL;
}

void *connect_main(void *arg)
{
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	struct estream *st = arg;
	struct sbx_egress *e = st->e;
	const struct egress_request *q = &st->req;
	bool v6 = strchr(q->host, ':') != NULL;
	CURL *c = curl_easy_init();
	CURLcode code = CURLE_OUT_OF_MEMORY;
	curl_socket_t fd = CURL_SOCKET_BAD;
	struct guard g = {.refused = SBX_ADDR_PUBLIC};
	char *url = NULL, msg[512];

	if (c && asprintf(&url, "http://%s%s%s:%d/", v6 ? "[" : "", q->host, v6 ? "]" : "",
			  q->port) >= 0) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
		curl_easy_setopt(c, CURLOPT_PROXY, "");
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xfer_cancelled);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, st);
		guard_init(c, &g, st);
		code = curl_easy_perform(c);
		if (code == CURLE_OK)
			curl_easy_getinfo(c, CURLINFO_ACTIVESOCKET, &fd);
	} else {
		url = NULL;
	}
	pthread_mutex_lock(&e->lock);
	if (st->cancel) {
		/* ended meanwhile */
	} else if (code == CURLE_OK && fd != CURL_SOCKET_BAD) {
		st->up = SBX_TAKE(c);
		st->up_fd = (int)fd;
		st->state = S_TUNNEL;
		st->deadline_ms = sbx_monotonic_ms() + IDLE_MS;
		out_append(st, ok, sizeof(ok) - 1);
	} else if (guard_refused(&g, q->host, q->port, msg, sizeof(msg))) {
		answer(st, 403, msg);
	} else {
		snprintf(msg, sizeof(msg), "mcp-sandbox: cannot connect to %s%s%s:%d: %s",
			 v6 ? "[" : "", q->host, v6 ? "]" : "", q->port, curl_easy_strerror(code));
		answer(st, code == CURLE_OPERATION_TIMEDOUT ? 504 : 502, msg);
	}
	st->worker_done = true;
	pthread_cond_broadcast(&e->cond);
	wake(e);
	pthread_mutex_unlock(&e->lock);
	if (c)
		curl_easy_cleanup(c);
	free(url);
	worker_give();
	return NULL;
}
