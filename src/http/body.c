/* SPDX-License-Identifier: MIT */
/*
 * Request bodies (src/http/server.c reads them in): the body budget, its
 * share per client address, the charge of a body as it grows, its deadline,
 * and its parse into MCP input, which is charged too before it is made.
 * What a body holds is given back when it is parsed or its request ends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-internal.h"
#include "sbx/common.h"

/* ---- the budget ---- */

/* What one peer holds of the body budget (a chained hash, under the
 * server's peers_lock; an entry lives while it holds something). */
struct peer_bytes {
	struct peer_bytes *next;
	struct sbx_peer peer;
	size_t bytes;
};
#define PEER_BUCKETS 1024

struct peer_bytes **sbx_body_peers_new(void)
{
	return calloc(PEER_BUCKETS, sizeof(struct peer_bytes *));
}

void sbx_body_peers_free(struct peer_bytes **peers)
{
	for (size_t i = 0; peers && i < PEER_BUCKETS; i++) {
		while (peers[i]) {
			struct peer_bytes *e = peers[i];
			peers[i] = e->next;
			free(e);
		}
	}
	free(peers);
}

static size_t peer_bucket(const struct sbx_peer *p)
{
	return sbx_peer_hash(p) % PEER_BUCKETS;
}

/* The entry of P in its bucket's chain (lock held); NULL when none. */
static struct peer_bytes **peer_find(struct sbx_http *h, const struct sbx_peer *p)
{
	struct peer_bytes **pp = &h->peers[peer_bucket(p)];

	while (*pp && memcmp(&(*pp)->peer, p, sizeof(*p)) != 0)
		pp = &(*pp)->next;
	return pp;
}

/* Takes N bytes of P's share: false when they do not fit (or no memory). */
static bool peer_take(struct sbx_http *h, const struct sbx_peer *p, size_t n)
{
	struct peer_bytes **pp, *e;
	bool ok = false;

	pthread_mutex_lock(&h->peers_lock);
	pp = peer_find(h, p);
	e = *pp;
	if (!e && (e = calloc(1, sizeof(*e)))) {
		e->peer = *p;
		*pp = e;
	}
	if (e && n <= h->peer_share - e->bytes) {
		e->bytes += n;
		ok = true;
	}
	if (e && e->bytes == 0) {
		*pp = e->next;
		free(e);
	}
	pthread_mutex_unlock(&h->peers_lock);
	return ok;
}

static void peer_give(struct sbx_http *h, const struct sbx_peer *p, size_t n)
{
	struct peer_bytes **pp, *e;

	pthread_mutex_lock(&h->peers_lock);
	pp = peer_find(h, p);
	e = *pp;
	if (e) {
		e->bytes -= n < e->bytes ? n : e->bytes;
		if (e->bytes == 0) {
			*pp = e->next;
			free(e);
		}
	}
	pthread_mutex_unlock(&h->peers_lock);
}

/* What P holds now. */
size_t sbx_body_peer_held(struct sbx_http *h, const struct sbx_peer *p)
{
	struct peer_bytes *e;
	size_t n;

	pthread_mutex_lock(&h->peers_lock);
	e = *peer_find(h, p);
	n = e ? e->bytes : 0;
	pthread_mutex_unlock(&h->peers_lock);
	return n;
}

/* Takes N bytes of the body budget for RQ, and of its peer's share: false
 * when they do not fit (rq->peer_busy says which). */
static bool budget_take(struct sbx_http_request *rq, size_t n)
{
	struct sbx_http *h = rq->http;
	size_t cur = atomic_load(&h->body_bytes);

	do {
		if (n > h->body_budget - cur) {
			rq->peer_busy = false;
			return false;
		}
	} while (!atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n));
	if (!peer_take(h, &rq->peer, n)) {
		atomic_fetch_sub(&h->body_bytes, n);
		rq->peer_busy = true;
		return false;
	}
	rq->charged += n;
	return true;
}

/* Gives back what RQ holds of the budget. */
void sbx_body_release(struct sbx_http_request *rq)
{
	if (rq->charged > 0) {
		atomic_fetch_sub(&rq->http->body_bytes, rq->charged);
		peer_give(rq->http, &rq->peer, rq->charged);
	}
	rq->charged = 0;
}

/* 503 + Retry-After: the budget (or the peer's share of it) has no room for
 * this body now. */
enum MHD_Result sbx_body_respond_busy(struct sbx_http_request *rq)
{
	static const char *const headers[] = {"Retry-After", "1", NULL};
	char body[400];

	if (rq->peer_busy)
		snprintf(body, sizeof(body),
			 "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
			 "\"Server busy: the request bodies this client address is sending now "
			 "fill its share of the server's memory for them (%zu bytes); retry once "
			 "they are in\"}}",
			 SBX_JSONRPC_SERVER_ERROR, rq->http->peer_share);
	else
		snprintf(body, sizeof(body),
			 "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
			 "\"Server busy: the request bodies being read now fill its memory for "
			 "them (%zu bytes); retry in a moment\"}}",
			 SBX_JSONRPC_SERVER_ERROR, rq->http->body_budget);
	return sbx_http_respond(rq, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", body,
				strlen(body), headers);
}

/* Whether the body of RQ keeps pace: false when it is late (more than
 * server.body_timeout plus a second per server.body_min_rate bytes received
 * since its headers). */
bool sbx_body_in_time(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	/* received is at most server.max_body (1 GiB) plus what is dropped
	 * (SBX_HTTP_DRAIN_MAX): no overflow. */
	uint64_t earned_ms = (uint64_t)rq->received * 1000 / (uint64_t)h->body_min_rate;

	return sbx_monotonic_ms() - rq->start_ms <= h->body_timeout_ms + (int64_t)earned_ms;
}

/* Charges RQ's body for N more bytes before its buffer grows to hold them:
 * with a Content-Length all of it at the first bytes, before the buffer is
 * made (once, for all of it). False when the budget (or the peer's share)
 * has no room, or no memory. */
bool sbx_body_charge(struct sbx_http_request *rq, size_t n)
{
	size_t need = rq->body.len + n;

	if (rq->length > 0 && rq->body.cap == 0)
		return budget_take(rq, rq->length) && sbx_buf_reserve(&rq->body, rq->length) == 0;
	return need <= rq->charged || budget_take(rq, need - rq->charged);
}

/* 413 for a body over RQ's limit (server.max_body, or the initialize cap of
 * a POST to /mcp without a session). */
enum MHD_Result sbx_body_respond_too_large(struct sbx_http_request *rq)
{
	char msg[200];

	if (rq->sessionless)
		snprintf(msg, sizeof(msg),
			 "request body too large: without Mcp-Session-Id only an initialize of "
			 "at most %zu bytes is accepted",
			 rq->body_max);
	else
		snprintf(msg, sizeof(msg),
			 "request body too large: at most %zu bytes (server.max_body)",
			 rq->body_max);
	return sbx_http_respond_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, msg);
}

/* ---- the body as MCP input ---- */

bool sbx_http_parse_input(struct sbx_http_request *rq, sbx_mcp_input **ret_in, enum MHD_Result *ret)
{
	_cleanup_free_ char *errjson = NULL;
	size_t bytes;
	int r;

	/* Sized up first: what the parse would take must fit the budget. */
	r = sbx_mcp_input_measure(rq->body.data ? rq->body.data : "", rq->body.len, &bytes,
				  &errjson);
	if (r == 0 && !budget_take(rq, bytes)) {
		*ret = sbx_body_respond_busy(rq);
		return false;
	}
	if (r == 0)
		r = sbx_mcp_input_parse(rq->body.data, rq->body.len, ret_in, &errjson);
	/* Parsed (or refused): the body's bytes are free again. */
	sbx_buf_release(&rq->body);
	sbx_body_release(rq);
	if (r == -ENOMEM)
		*ret = MHD_NO;
	else if (r < 0)
		*ret = sbx_http_respond(rq, MHD_HTTP_BAD_REQUEST, "application/json", errjson,
					strlen(errjson), NULL);
	return r >= 0;
}

bool sbx_http_refuse_non_json(struct sbx_http_request *rq, enum MHD_Result *ret)
{
	if (sbx_http_media_is(sbx_http_header(rq, MHD_HTTP_HEADER_CONTENT_TYPE),
			      "application/json"))
		return false;
	*ret = sbx_http_respond_rpc_error(rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, -32000,
					  "Unsupported Media Type: Content-Type must be "
					  "application/json");
	return true;
}

bool sbx_http_media_is(const char *value, const char *type)
{
	size_t n = strlen(type);

	if (!value)
		return false;
	while (*value == ' ' || *value == '\t')
		value++;
	if (strncasecmp(value, type, n) != 0)
		return false;
	value += n;
	while (*value == ' ' || *value == '\t')
		value++;
	return *value == '\0' || *value == ';';
}
