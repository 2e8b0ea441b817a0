/* SPDX-License-Identifier: MIT */
/*
 * The session table: random ids, lookup, expiry. A session is idle from
 * the last request that named it or the end of its last call; one idle
 * longer than server.session_timeout and not in use expires. A Streamable
 * HTTP session is then forgotten (found so at its next lookup, or swept when
 * a session is added; in use: a request or call holds it). An SSE session
 * lives as long as its stream, and the stream ends once the session has
 * been idle that long with no call running (the stream asks
 * sbx_session_idle_expired as it waits). A session that leaves the table
 * for any reason is closed (sbx_mcp_session_close): its calls are
 * cancelled. A session runs at most server.max_calls_per_session calls at
 * once (its call slots); a body with calls past them is answered with a
 * JSON-RPC error for each (sbx_http_refuse_calls).
 *
 * At most server.max_sessions, server.max_sessions_per_ip of one client
 * address and server.max_sessions_per_tenant of one API key's tenant (with
 * auth off everyone is the tenant "default": not counted). A new session
 * past a limit evicts the least recently used idle session (of that client
 * or tenant, for their own limits; for the whole table the tenant's own
 * first, so that one tenant cannot push out the others while it has idle
 * sessions of its own): a Streamable HTTP session nobody but the table
 * holds (no request, no call, no stream of one). SSE sessions are never
 * evicted (each is an open stream, which server.max_connections_per_ip
 * bounds); with none idle the new session is refused (-EBUSY).
 *
 * A session remembers the principal that opened it: when its key is
 * revoked, sbx_session_table_end_revoked (called by the server about once
 * a second when the keys changed) ends it, stream and calls.
 *
 * Lookup: the first SBX_SESSION_ID_INDEX characters of an id pick the
 * candidates (plain compares); the rest is compared with sbx_crypto_equal,
 * so how long a lookup takes tells nothing of the secret part.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http-internal.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

struct sbx_session_table {
	struct sbx_http *http;
	pthread_mutex_t lock;
	int64_t timeout_ms;
	size_t max, per_peer, per_tenant; /* per_*: 0 = no limit */
	struct sbx_http_session **slots;
	size_t n;
};

int sbx_session_table_new(struct sbx_http *h, struct sbx_session_table **ret_t)
{
	struct sbx_session_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->http = h;
	t->timeout_ms = h->settings->server.session_timeout_ms;
	t->max = (size_t)h->settings->server.max_sessions;
	t->per_peer = (size_t)h->settings->server.max_sessions_per_ip;
	t->per_tenant = (size_t)h->settings->server.max_sessions_per_tenant;
	t->slots = calloc(t->max, sizeof(*t->slots));
	if (!t->slots) {
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	*ret_t = t;
	return 0;
}

/* Takes slot I out of the table (lock held) and closes it: its calls are
 * cancelled. Returns the table's reference. */
static struct sbx_http_session *take_slot(struct sbx_session_table *t, size_t i)
{
	struct sbx_http_session *s = t->slots[i];

	t->slots[i] = t->slots[--t->n];
	t->slots[t->n] = NULL;
	s->in_table = false;
	sbx_mcp_session_close(s->mcp);
	return s;
}

struct sbx_session_table *sbx_session_table_free(struct sbx_session_table *t)
{
	if (!t)
		return NULL;
	while (t->n > 0)
		sbx_http_session_unref(take_slot(t, 0));
	pthread_mutex_destroy(&t->lock);
	free(t->slots);
	free(t);
	return NULL;
}

bool sbx_http_session_call_begin(struct sbx_http_session *s, int max)
{
	bool ok;

	pthread_mutex_lock(&s->lock);
	ok = s->calls < max;
	if (ok)
		s->calls++;
	pthread_mutex_unlock(&s->lock);
	return ok;
}

void sbx_http_session_call_end(struct sbx_http_session *s)
{
	pthread_mutex_lock(&s->lock);
	s->calls--;
	atomic_store(&s->last_used_ms, sbx_monotonic_ms());
	pthread_mutex_unlock(&s->lock);
}

int sbx_http_refuse_calls(struct sbx_http_request *rq, struct sbx_http_session *s,
			  const sbx_mcp_input *in, char **ret_reply)
{
	char msg[320];

	snprintf(msg, sizeof(msg),
		 "Too many tool calls running on this session: at most %d at once "
		 "(server.max_calls_per_session). Wait for one to finish, or cancel one with "
		 "notifications/cancelled, then send this call again.",
		 rq->http->max_calls_per_session);
	return sbx_mcp_session_refuse(s->mcp, in, rq->client, SBX_JSONRPC_SERVER_ERROR, msg,
				      "session_calls", ret_reply);
}

struct sbx_http_session *sbx_http_session_ref(struct sbx_http_session *s)
{
	if (s)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

struct sbx_http_session *sbx_http_session_unref(struct sbx_http_session *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return NULL;
	sbx_outq_close(&s->out);
	sbx_mcp_session_unref(s->mcp);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return NULL;
}

/* Idle: a Streamable HTTP session that nobody but the table holds (no
 * request names it, no call of it runs: each holds a reference). Lock
 * held: only a lookup, under it, takes a new reference. */
static bool idle(const struct sbx_http_session *s)
{
	return s->transport == SBX_MCP_TRANSPORT_STREAMABLE && atomic_load(&s->refs) == 1;
}

/* Expired: idle, and unused past the timeout; an SSE session with no call
 * running, unused past it (its stream ends then: sbx_session_idle_expired;
 * a request that comes before the stream's end has removed it finds it
 * gone all the same). Lock held. */
static bool expired(struct sbx_session_table *t, struct sbx_http_session *s, int64_t now)
{
	if (s->transport == SBX_MCP_TRANSPORT_SSE) {
		bool gone;
		pthread_mutex_lock(&s->lock); /* a leaf lock: none is taken under it */
		gone = s->calls == 0 && now - atomic_load(&s->last_used_ms) > t->timeout_ms;
		pthread_mutex_unlock(&s->lock);
		return gone;
	}
	return idle(s) && now - atomic_load(&s->last_used_ms) > t->timeout_ms;
}

bool sbx_session_idle_expired(const struct sbx_session_table *t, struct sbx_http_session *s)
{
	return s->calls == 0 && sbx_monotonic_ms() - atomic_load(&s->last_used_ms) > t->timeout_ms;
}

/* Drops expired sessions (lock held); they are unreferenced after unlock. */
static size_t sweep(struct sbx_session_table *t, struct sbx_http_session **dead, size_t max)
{
	int64_t now = sbx_monotonic_ms();
	size_t nd = 0;

	for (size_t i = 0; i < t->n && nd < max;) {
		if (expired(t, t->slots[i], now))
			dead[nd++] = take_slot(t, i);
		else
			i++;
	}
	return nd;
}

static int random_id(char out[SBX_SESSION_ID_LEN + 1])
{
	unsigned char raw[SBX_SESSION_ID_LEN / 2];
	int r = sbx_random_bytes(raw, sizeof(raw));

	if (r < 0)
		return r;
	sbx_hex_encode(raw, sizeof(raw), out);
	return 0;
}

/* S counts in the share of the API key tenant TENANT (NULL: none). */
static bool of_tenant(const struct sbx_http_session *s, const char *tenant)
{
	return tenant && s->principal.method != SBX_AUTH_METHOD_NONE &&
	       strcmp(s->tenant, tenant) == 0;
}

/* The slot of the least recently used idle session (of PEER and of the
 * API key tenant TENANT, each when not NULL), or -1. Lock held. */
static ssize_t lru_idle(struct sbx_session_table *t, const struct sbx_peer *peer,
			const char *tenant)
{
	ssize_t best = -1;
	int64_t oldest = INT64_MAX;

	for (size_t i = 0; i < t->n; i++) {
		struct sbx_http_session *s = t->slots[i];
		int64_t used = atomic_load(&s->last_used_ms);
		if (!idle(s) || (peer && memcmp(&s->peer, peer, sizeof(*peer)) != 0) ||
		    (tenant && !of_tenant(s, tenant)))
			continue;
		if (used < oldest) {
			oldest = used;
			best = (ssize_t)i;
		}
	}
	return best;
}

/* How many sessions are of PEER and of the API key tenant TENANT (each
 * when not NULL). Lock held. */
static size_t share_count(struct sbx_session_table *t, const struct sbx_peer *peer,
			  const char *tenant)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n; i++)
		n += (!peer || memcmp(&t->slots[i]->peer, peer, sizeof(*peer)) == 0) &&
		     (!tenant || of_tenant(t->slots[i], tenant));
	return n;
}

/* Evicts the least recently used idle session of that share into DEAD:
 * false when none is idle. Lock held. */
static bool share_evict(struct sbx_session_table *t, const struct sbx_peer *peer,
			const char *tenant, struct sbx_http_session **dead, size_t *nd)
{
	ssize_t i = lru_idle(t, peer, tenant);

	if (i < 0)
		return false;
	dead[(*nd)++] = take_slot(t, (size_t)i);
	return true;
}

/* Makes room for a session of PEER for P (lock held): evicts into DEAD (at
 * most one per limit); -EBUSY naming the limit when nothing can go. */
static int make_room(struct sbx_session_table *t, const struct sbx_peer *peer,
		     const struct sbx_principal *p, struct sbx_http_session **dead, size_t *nd,
		     struct sbx_error *err)
{
	const char *tenant = p->method != SBX_AUTH_METHOD_NONE ? p->tenant : NULL;

	if (t->per_tenant > 0 && tenant && share_count(t, NULL, tenant) >= t->per_tenant &&
	    !share_evict(t, NULL, tenant, dead, nd))
		return sbx_error_set(
		    err, -EBUSY,
		    "Too many MCP sessions for tenant %s: all %zu it may hold "
		    "(server.max_sessions_per_tenant) are in use (a call running or "
		    "an SSE stream open). End one (DELETE /mcp, or close an SSE "
		    "stream), then retry.",
		    tenant, t->per_tenant);
	/* The address's share: with API keys only the new session's own
	 * tenant's idle session goes (tenants behind one proxy or NAT do not
	 * push each other out); without, anyone's from that address. */
	if (t->per_peer > 0 && share_count(t, peer, NULL) >= t->per_peer &&
	    !share_evict(t, peer, tenant, dead, nd))
		return sbx_error_set(err, -EBUSY,
				     "Too many MCP sessions from this client address: all %zu it "
				     "may hold (server.max_sessions_per_ip) are in use (a call "
				     "running or an SSE stream open). End one (DELETE /mcp, or "
				     "close an SSE stream), then retry.",
				     t->per_peer);
	/* The whole table: the tenant's own idle session first. */
	if (t->n >= t->max && !(tenant && share_evict(t, NULL, tenant, dead, nd)) &&
	    !share_evict(t, NULL, NULL, dead, nd))
		return sbx_error_set(err, -EBUSY,
				     "Too many MCP sessions: all %zu the server holds "
				     "(server.max_sessions) are in use; retry later.",
				     t->max);
	return 0;
}

int sbx_session_table_add(struct sbx_session_table *t, sbx_mcp *mcp,
			  enum sbx_mcp_transport transport, const struct sbx_peer *peer,
			  const struct sbx_principal *principal, struct sbx_http_session **ret_s,
			  struct sbx_error *err)
{
	struct sbx_http_session *s = calloc(1, sizeof(*s)), *dead[67];
	size_t nd;
	int r;

	if (!s)
		return sbx_error_set(err, -ENOMEM, "session: out of memory");
	r = random_id(s->id);
	if (r < 0) {
		free(s);
		return sbx_error_set(err, r, "session: no random bytes");
	}
	if (principal)
		s->principal = *principal;
	else
		sbx_http_principal_default(&s->principal);
	snprintf(s->tenant, sizeof(s->tenant), "%s", s->principal.tenant);
	r = sbx_mcp_session_new(mcp, transport, s->tenant, principal ? &principal->limits : NULL,
				&s->mcp, err);
	if (r < 0) {
		free(s);
		return r;
	}
	{
		/* The audit log names it by its index part: the rest of the id
		 * is a secret (it authorizes POST /messages). */
		char tag[SBX_SESSION_ID_INDEX + 1];
		snprintf(tag, sizeof(tag), "%.*s", SBX_SESSION_ID_INDEX, s->id);
		sbx_mcp_session_set_audit(s->mcp, s->principal.key_id, tag);
	}
	atomic_init(&s->refs, 2); /* the table's and the caller's */
	s->transport = transport;
	s->peer = *peer;
	pthread_mutex_init(&s->lock, NULL);
	/* SSE readers wait with timeouts on the monotonic clock. */
	sbx_cond_init_monotonic(&s->cond);
	sbx_outq_init(&s->out, t->http, &s->lock, &s->cond, NULL, SBX_SSE_QUEUE_MAX_MSGS,
		      SBX_SSE_QUEUE_MAX_BYTES, false);

	pthread_mutex_lock(&t->lock);
	nd = sweep(t, dead, 64);
	r = make_room(t, peer, &s->principal, dead, &nd, err);
	if (r < 0) {
		pthread_mutex_unlock(&t->lock);
		for (size_t i = 0; i < nd; i++)
			sbx_http_session_unref(dead[i]);
		atomic_store(&s->refs, 1);
		sbx_http_session_unref(s);
		return r;
	}
	atomic_store(&s->last_used_ms, sbx_monotonic_ms());
	s->in_table = true;
	t->slots[t->n++] = s;
	pthread_mutex_unlock(&t->lock);
	for (size_t i = 0; i < nd; i++)
		sbx_http_session_unref(dead[i]);
	*ret_s = s;
	return 0;
}

struct sbx_http_session *sbx_session_table_find(struct sbx_session_table *t, const char *id,
						enum sbx_mcp_transport transport,
						const char *tenant)
{
	struct sbx_http_session *found = NULL, *dead = NULL;
	int64_t now = sbx_monotonic_ms();

	if (!id || strlen(id) != SBX_SESSION_ID_LEN)
		return NULL;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		struct sbx_http_session *s = t->slots[i];
		/* The index part finds it; the secret part is compared in
		 * constant time. */
		if (memcmp(s->id, id, SBX_SESSION_ID_INDEX) != 0 ||
		    !sbx_crypto_equal(s->id + SBX_SESSION_ID_INDEX, id + SBX_SESSION_ID_INDEX,
				      SBX_SESSION_ID_LEN - SBX_SESSION_ID_INDEX))
			continue;
		if (expired(t, s, now))
			dead = take_slot(t, i);
		else if (s->transport == transport && (!tenant || strcmp(s->tenant, tenant) == 0)) {
			atomic_store(&s->last_used_ms, now);
			found = sbx_http_session_ref(s);
		}
		break;
	}
	pthread_mutex_unlock(&t->lock);
	sbx_http_session_unref(dead);
	return found;
}

void sbx_session_table_remove(struct sbx_session_table *t, struct sbx_http_session *s)
{
	struct sbx_http_session *dead = NULL;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; s->in_table && i < t->n; i++) {
		if (t->slots[i] == s) {
			dead = take_slot(t, i);
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	sbx_http_session_unref(dead);
}

void sbx_session_table_close_all(struct sbx_session_table *t)
{
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		struct sbx_http_session *s = t->slots[i];
		sbx_outq_close(&s->out);
		sbx_mcp_session_close(s->mcp);
	}
	pthread_mutex_unlock(&t->lock);
}

size_t sbx_session_table_count(struct sbx_session_table *t, enum sbx_mcp_transport transport)
{
	int64_t now = sbx_monotonic_ms();
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++)
		n += t->slots[i]->transport == transport && !expired(t, t->slots[i], now);
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t sbx_session_table_end_revoked(struct sbx_session_table *t, sbx_auth *auth)
{
	struct sbx_http_session *dead[64];
	size_t total = 0, nd;

	do {
		nd = 0;
		pthread_mutex_lock(&t->lock);
		for (size_t i = 0; i < t->n && nd < SBX_ARRAY_SIZE(dead);) {
			struct sbx_http_session *s = t->slots[i];
			struct sbx_auth_limits now;
			int r = sbx_auth_principal_limits(auth, &s->principal, &now);
			if (r == -EKEYREVOKED) {
				sbx_outq_cut(&s->out);
				dead[nd++] = take_slot(t, i);
				continue;
			}
			/* A key's limits changed: its sessions' next calls count
			 * against the new ones. */
			if (r == 0 && memcmp(&now, &s->principal.limits, sizeof(now)) != 0) {
				s->principal.limits = now;
				sbx_mcp_session_set_limits(s->mcp, &now);
			}
			i++;
		}
		pthread_mutex_unlock(&t->lock);
		for (size_t i = 0; i < nd; i++)
			sbx_http_session_unref(dead[i]);
		total += nd;
	} while (nd == SBX_ARRAY_SIZE(dead));
	return total;
}
