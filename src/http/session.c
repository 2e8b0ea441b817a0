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
 * cancelled. At most SBX_SESSIONS_MAX.
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
	pthread_mutex_t lock;
	int64_t timeout_ms;
	struct sbx_http_session *slots[SBX_SESSIONS_MAX];
	size_t n;
};

int sbx_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms)
{
	int64_t at = sbx_monotonic_ms() + SBX_PEER_CHECK_MS;

	return sbx_cond_wait_until(cond, lock, until_ms < at ? until_ms : at);
}

int sbx_session_table_new(int64_t timeout_ms, struct sbx_session_table **ret_t)
{
	struct sbx_session_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->timeout_ms = timeout_ms;
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
	sbx_queue_drain(&s->queue, sbx_sse_msg_free_node);
	sbx_mcp_session_unref(s->mcp);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return NULL;
}

/* Expired: a Streamable HTTP session idle past the timeout that nobody but
 * the table holds. Lock held. */
static bool expired(struct sbx_session_table *t, struct sbx_http_session *s, int64_t now)
{
	return s->transport == SBX_MCP_TRANSPORT_STREAMABLE &&
	       now - atomic_load(&s->last_used_ms) > t->timeout_ms && atomic_load(&s->refs) == 1;
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

int sbx_session_table_add(struct sbx_session_table *t, sbx_mcp *mcp,
			  enum sbx_mcp_transport transport, struct sbx_http_session **ret_s,
			  struct sbx_error *err)
{
	struct sbx_http_session *s = calloc(1, sizeof(*s)), *dead[64];
	size_t nd;
	int r;

	if (!s)
		return sbx_error_set(err, -ENOMEM, "session: out of memory");
	r = random_id(s->id);
	if (r < 0) {
		free(s);
		return sbx_error_set(err, r, "session: no random bytes");
	}
	r = sbx_mcp_session_new(mcp, transport, SBX_OWNER_DEFAULT, &s->mcp, err);
	if (r < 0) {
		free(s);
		return r;
	}
	atomic_init(&s->refs, 2); /* the table's and the caller's */
	s->transport = transport;
	pthread_mutex_init(&s->lock, NULL);
	/* SSE readers wait with timeouts on the monotonic clock. */
	sbx_cond_init_monotonic(&s->cond);
	sbx_queue_init(&s->queue);

	pthread_mutex_lock(&t->lock);
	nd = sweep(t, dead, SBX_ARRAY_SIZE(dead));
	if (t->n >= SBX_SESSIONS_MAX) {
		pthread_mutex_unlock(&t->lock);
		for (size_t i = 0; i < nd; i++)
			sbx_http_session_unref(dead[i]);
		atomic_store(&s->refs, 1);
		sbx_http_session_unref(s);
		return sbx_error_set(err, -EBUSY, "too many sessions (%d); try again later",
				     SBX_SESSIONS_MAX);
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
						enum sbx_mcp_transport transport)
{
	struct sbx_http_session *found = NULL, *dead = NULL;
	int64_t now = sbx_monotonic_ms();

	if (!id || strlen(id) != SBX_SESSION_ID_LEN)
		return NULL;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		struct sbx_http_session *s = t->slots[i];
		if (strcmp(s->id, id) != 0)
			continue;
		if (expired(t, s, now))
			dead = take_slot(t, i);
		else if (s->transport == transport) {
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
		pthread_mutex_lock(&s->lock);
		s->closed = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		sbx_mcp_session_close(s->mcp);
	}
	pthread_mutex_unlock(&t->lock);
}
