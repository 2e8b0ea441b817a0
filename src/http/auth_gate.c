/* SPDX-License-Identifier: MIT */
/*
 * Who calls, decided from the headers (sbx_http_auth_gate, from the request
 * handler's first call, before any of a body is read or charged and before
 * a session is looked up): for /mcp (every method) and /sse the request's
 * credentials go to sbx_auth_check (include/sbx/auth.h): `Authorization:
 * Bearer KEY`, `X-API-Key: KEY`, and on GET /sse alone `?api_key=KEY` (the
 * seed's form; in a URL a key ends up in logs and histories, so /mcp does
 * not take it). Refused: 401 with `WWW-Authenticate: Bearer
 * realm="mcp-sandbox"` (and `error="invalid_token"` when a credential was
 * given) and {"error": why}; libmicrohttpd then drops the upload unread.
 *
 * POST /messages is authorized by its session_id: the session was made by
 * an authorized GET /sse (and acts for its tenant), and the seed's clients
 * send no key there. /health is open. /ready and the artifact routes are
 * unchanged in this step: artifact links become signed ones (issue 13,
 * step 3), which a browser can follow without a key.
 *
 * Repeated failures are answered differently: a peer (an IPv4 address, an
 * IPv6 /64: struct sbx_peer) with SBX_AUTH_FAIL_MAX failed checks within
 * SBX_AUTH_FAIL_WINDOW_MS of its first gets 429 with Retry-After instead of
 * 401 for each further failure until that window has passed. A valid key
 * from that peer is still accepted: every client behind one address (a
 * NAT, a proxy, every local process on 127.0.0.1) would otherwise be locked
 * out by whoever fails there, and a key's 256 random bits need no slowing
 * of guesses. The table of failing peers is bounded (SBX_AUTH_FAIL_PEERS,
 * the least recently failed one evicted); a peer's successes change nothing
 * in it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-internal.h"
#include "sbx/log.h"
#include "sbx/percent.h"

#define FAIL_BUCKETS 256

struct fail_entry {
	struct sbx_peer peer;
	int64_t first_ms; /* the window's start: its first failure */
	int64_t last_ms;  /* its latest failure (for the eviction) */
	unsigned count;	  /* failures since first_ms */
	int next;	  /* the bucket's chain, -1 at its end */
};

struct sbx_auth_failures {
	pthread_mutex_t lock;
	size_t n; /* entries in use: e[0..n) */
	int buckets[FAIL_BUCKETS];
	struct fail_entry e[SBX_AUTH_FAIL_PEERS];
};

int sbx_auth_failures_new(struct sbx_auth_failures **ret)
{
	struct sbx_auth_failures *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	for (size_t i = 0; i < FAIL_BUCKETS; i++)
		f->buckets[i] = -1;
	*ret = f;
	return 0;
}

struct sbx_auth_failures *sbx_auth_failures_free(struct sbx_auth_failures *f)
{
	if (!f)
		return NULL;
	pthread_mutex_destroy(&f->lock);
	free(f);
	return NULL;
}

static size_t bucket_of(const struct sbx_peer *p)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (size_t i = 0; i < sizeof(p->b); i++)
		h = (h ^ p->b[i]) * 16777619u;
	return h % FAIL_BUCKETS;
}

/* P's entry, or -1. Lock held. */
static int fail_find(struct sbx_auth_failures *f, const struct sbx_peer *p)
{
	for (int i = f->buckets[bucket_of(p)]; i >= 0; i = f->e[i].next)
		if (memcmp(f->e[i].peer.b, p->b, sizeof(p->b)) == 0)
			return i;
	return -1;
}

static void fail_unlink(struct sbx_auth_failures *f, int i)
{
	int *at = &f->buckets[bucket_of(&f->e[i].peer)];

	while (*at != i)
		at = &f->e[*at].next;
	*at = f->e[i].next;
}

/* How long P is still refused (ms), 0 when it is not. */
static int64_t fail_wait(struct sbx_auth_failures *f, const struct sbx_peer *p, int64_t now)
{
	int64_t wait = 0;
	int i;

	pthread_mutex_lock(&f->lock);
	if (f->n > 0 && (i = fail_find(f, p)) >= 0 && f->e[i].count >= SBX_AUTH_FAIL_MAX &&
	    now - f->e[i].first_ms < SBX_AUTH_FAIL_WINDOW_MS)
		wait = f->e[i].first_ms + SBX_AUTH_FAIL_WINDOW_MS - now;
	pthread_mutex_unlock(&f->lock);
	return wait;
}

/* Counts a failure of P; returns its failures in the window, this one
 * included (SBX_AUTH_FAIL_MAX: the peer's failures are 429 from now on). */
static unsigned fail_count(struct sbx_auth_failures *f, const struct sbx_peer *p, int64_t now)
{
	unsigned reached;
	int i;

	pthread_mutex_lock(&f->lock);
	i = fail_find(f, p);
	if (i < 0) {
		if (f->n < SBX_AUTH_FAIL_PEERS) {
			i = (int)f->n++;
		} else {
			/* Full: the least recently failed peer goes. */
			i = 0;
			for (size_t j = 1; j < f->n; j++)
				if (f->e[j].last_ms < f->e[i].last_ms)
					i = (int)j;
			fail_unlink(f, i);
		}
		f->e[i] = (struct fail_entry){.peer = *p, .first_ms = now, .count = 0};
		f->e[i].next = f->buckets[bucket_of(p)];
		f->buckets[bucket_of(p)] = i;
	}
	if (now - f->e[i].first_ms >= SBX_AUTH_FAIL_WINDOW_MS) {
		f->e[i].first_ms = now;
		f->e[i].count = 0;
	}
	f->e[i].last_ms = now;
	f->e[i].count++;
	reached = f->e[i].count;
	pthread_mutex_unlock(&f->lock);
	return reached;
}

/* P as text for the log: an IPv4 address, or an IPv6 /64. */
static void peer_text(const struct sbx_peer *p, char *buf, size_t size)
{
	char a[INET6_ADDRSTRLEN];

	if (p->b[15] == 6) {
		unsigned char v6[16] = {0};
		memcpy(v6, p->b, 8);
		snprintf(buf, size, "%s/64", inet_ntop(AF_INET6, v6, a, sizeof(a)) ? a : "?");
	} else {
		snprintf(buf, size, "%s", inet_ntop(AF_INET, p->b, a, sizeof(a)) ? a : "?");
	}
}

void sbx_http_principal_default(struct sbx_principal *p)
{
	*p = (struct sbx_principal){.method = SBX_AUTH_METHOD_NONE,
				    .tenant = SBX_TENANT_DEFAULT,
				    .limits = {-1, -1, -1, -1, -1}};
}

static enum MHD_Result respond_throttled(struct sbx_http_request *rq, int64_t wait_ms)
{
	char secs[24], msg[160];
	const char *const headers[] = {"Retry-After", secs, NULL};
	long long s = (wait_ms + 999) / 1000;

	snprintf(secs, sizeof(secs), "%lld", s > 0 ? s : 1);
	snprintf(msg, sizeof(msg),
		 "too many failed authentications from this address; retry after %s s", secs);
	return sbx_http_respond_error_with(rq, MHD_HTTP_TOO_MANY_REQUESTS, msg, headers);
}

/* At most SBX_AUTH_AUDIT_PER_S auth_failure lines a second in all (many
 * addresses failing at once); the rest are counted and the count logged
 * once in the next second that writes one. */
void sbx_http_audit_auth_failure(struct sbx_http_request *rq, const struct sbx_auth_refusal *why)
{
	struct sbx_http *h = rq->http;
	int64_t sec = sbx_monotonic_ms() / 1000;
	uint64_t dropped = 0;
	bool write;

	const struct sbx_audit_auth_failure f = {
	    .client = rq->client,
	    .method = rq->method,
	    .route = rq->route == SBX_ROUTE_SSE	      ? "/sse"
		     : rq->route == SBX_ROUTE_METRICS ? "/metrics"
						      : "/mcp",
	    .reason = why ? sbx_auth_reason_name(why->reason) : "throttled",
	    .key_id = why ? why->key_id : NULL,
	};

	pthread_mutex_lock(&h->audit_lock);
	if (h->audit_sec != sec) {
		dropped = h->audit_dropped;
		h->audit_dropped = 0;
		h->audit_sec = sec;
		h->audit_lines = 0;
	}
	write = h->audit_lines < SBX_AUTH_AUDIT_PER_S;
	if (write)
		h->audit_lines++;
	else
		h->audit_dropped++;
	pthread_mutex_unlock(&h->audit_lock);
	if (dropped)
		sbx_log_warn("audit: %llu failed authentications were not written to the audit log "
			     "(more than %d a second)",
			     (unsigned long long)dropped, SBX_AUTH_AUDIT_PER_S);
	if (write)
		sbx_audit_auth_failure(h->audit, &f);
}

bool sbx_http_auth_failed(struct sbx_http_request *rq, const struct sbx_auth_refusal *why,
			  enum MHD_Result *ret)
{
	struct sbx_http *h = rq->http;
	int64_t now = sbx_monotonic_ms(), wait = fail_wait(h->auth_failures, &rq->peer, now);

	/* A failure of a throttled peer is 429 (a valid key is let through
	 * before: others failing from the same address, behind the same NAT or
	 * proxy, lock no one out). */
	if (wait > 0) {
		/* One audit line for the first 429 of a window, not one per
		 * request: a refused flood must not flood the log. */
		if (fail_count(h->auth_failures, &rq->peer, now) == SBX_AUTH_FAIL_MAX + 1)
			sbx_http_audit_auth_failure(rq, NULL);
		*ret = respond_throttled(rq, wait);
		return true;
	}
	if (fail_count(h->auth_failures, &rq->peer, now) == SBX_AUTH_FAIL_MAX) {
		char who[INET6_ADDRSTRLEN + 8];
		peer_text(&rq->peer, who, sizeof(who));
		sbx_log_warn(
		    "auth: %d failed authentications from %s within %d s: its requests get 429 "
		    "until then",
		    SBX_AUTH_FAIL_MAX, who, SBX_AUTH_FAIL_WINDOW_MS / 1000);
	}
	sbx_http_audit_auth_failure(rq, why);
	return false;
}

bool sbx_http_auth_gate(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	static const char *const challenge[] = {"WWW-Authenticate", "Bearer realm=\"mcp-sandbox\"",
						NULL};
	static const char *const invalid[] = {
	    "WWW-Authenticate", "Bearer realm=\"mcp-sandbox\", error=\"invalid_token\"", NULL};
	struct sbx_http *h = rq->http;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_auth_refusal why;
	struct sbx_auth_request ar = {.refusal = &why};
	char *query = NULL;
	int r;

	sbx_http_principal_default(&rq->principal);
	/* /messages: its session's tenant (the id authorizes it); /health
	 * open; /ready and the artifacts as before (signed links: step 3). */
	if (rq->route != SBX_ROUTE_MCP && rq->route != SBX_ROUTE_SSE)
		return false;
	if (!h->auth || !sbx_auth_checks_keys(h->auth))
		return false;
	ar.authorization = sbx_http_header(rq, MHD_HTTP_HEADER_AUTHORIZATION);
	ar.x_api_key = sbx_http_header(rq, "X-API-Key");
	if (rq->route == SBX_ROUTE_SSE && strcmp(rq->method, "GET") == 0) {
		/* Query values reach us still percent-encoded (keep_escapes in
		 * server.c); one that does not decode, or decodes to a NUL, is
		 * passed as it came (no key has '%' in it: refused). */
		const char *q =
		    MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "api_key");
		size_t len = 0;
		ar.api_key_query = q;
		r = q ? sbx_percent_decode(q, strlen(q), &query, &len) : -EINVAL;
		if (r == -ENOMEM) {
			*ret = MHD_NO;
			return true;
		}
		if (r == 0 && strlen(query) == len)
			ar.api_key_query = query;
	}
	r = sbx_auth_check(h->auth, &ar, &rq->principal, &err);
	if (r == 0) {
		free(query);
		return false;
	}
	sbx_http_principal_default(&rq->principal);
	if (r != -EACCES) {
		free(query);
		/* The keys file's trouble (-EIO) was logged once by the store. */
		if (r != -EIO)
			sbx_log_error("auth: %s", err.msg);
		*ret =
		    sbx_http_respond_error_with(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						"the credentials could not be checked now; retry",
						(const char *const[]){"Retry-After", "1", NULL});
		return true;
	}
	if (sbx_http_auth_failed(rq, &why, ret)) {
		free(query);
		return true;
	}
	*ret = sbx_http_respond_error_with(
	    rq, MHD_HTTP_UNAUTHORIZED, err.msg,
	    ar.authorization || ar.x_api_key || ar.api_key_query ? invalid : challenge);
	free(query);
	return true;
}
