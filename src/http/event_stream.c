/* SPDX-License-Identifier: MIT */
/*
 * Event streams (the SSE transport's stream, a Streamable HTTP call's
 * stream): their frames, their outbound queues, bounded each and in all,
 * and the wait for the next queued message, a keepalive when idle, and the
 * client closing the connection (checked every SBX_PEER_CHECK_MS).
 *
 * The queues' bytes count in one total, server.max_queued at most: a message
 * that would pass it first closes the biggest listed queue (possibly its
 * own), so a few clients that stop reading cannot make the server grow. A
 * closed queue is drained at once, its stream's socket shut down (its
 * connection thread wakes and ends) and its owner told (ops->closed: the
 * session's or call's client counts as gone). Lock order: the server's
 * outq_lock is never held while taking a queue's lock, and a queue's lock
 * is never held while closing another queue.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http-internal.h"

/* ---- SSE frames ---- */

struct sbx_sse_msg *sbx_sse_msg_new(const char *event, const char *data)
{
	/* "event: " + EVENT + "\ndata: " + DATA + "\n\n" + NUL */
	size_t len = 7 + strlen(event) + 7 + strlen(data) + 2 + 1;
	struct sbx_sse_msg *m = malloc(sizeof(*m) + len);

	if (!m)
		return NULL;
	m->len = (size_t)snprintf(m->text, len, "event: %s\ndata: %s\n\n", event, data);
	return m;
}

void sbx_sse_msg_free_node(struct sbx_queue_node *n)
{
	free(sbx_queue_entry(n, struct sbx_sse_msg, node));
}

size_t sbx_http_drain(struct sbx_buf *b, size_t *pos, char *buf, size_t max)
{
	size_t n = b->len - *pos;

	if (n > max)
		n = max;
	if (n) {
		memcpy(buf, b->data + *pos, n);
		*pos += n;
	}
	if (*pos >= b->len) {
		sbx_buf_reset(b);
		*pos = 0;
	}
	return n;
}

/* ---- outbound queues ---- */

void sbx_outq_init(struct sbx_outq *q, struct sbx_http *h, pthread_mutex_t *lock,
		   pthread_cond_t *cond, const struct sbx_outq_ops *ops, size_t max_msgs,
		   size_t max_bytes, bool drop_when_full)
{
	q->http = h;
	q->lock = lock;
	q->cond = cond;
	q->ops = ops;
	sbx_queue_init(&q->queue);
	q->max_msgs = max_msgs;
	q->max_bytes = max_bytes;
	q->drop_when_full = drop_when_full;
	q->closed = false;
	q->evicted = false;
	q->fd = -1;
	atomic_init(&q->bytes, 0);
	q->prev = q->next = NULL;
	q->listed = false;
}

void sbx_outq_list(struct sbx_outq *q)
{
	struct sbx_http *h = q->http;

	pthread_mutex_lock(&h->outq_lock);
	if (!q->listed) {
		q->prev = NULL;
		q->next = h->outqs;
		if (h->outqs)
			h->outqs->prev = q;
		h->outqs = q;
		q->listed = true;
	}
	pthread_mutex_unlock(&h->outq_lock);
}

void sbx_outq_unlist(struct sbx_outq *q)
{
	struct sbx_http *h = q->http;

	pthread_mutex_lock(&h->outq_lock);
	if (q->listed) {
		if (q->prev)
			q->prev->next = q->next;
		else
			h->outqs = q->next;
		if (q->next)
			q->next->prev = q->prev;
		q->prev = q->next = NULL;
		q->listed = false;
	}
	pthread_mutex_unlock(&h->outq_lock);
}

struct sbx_sse_msg *sbx_outq_pop_locked(struct sbx_outq *q)
{
	struct sbx_sse_msg *m = sbx_queue_entry(sbx_queue_pop(&q->queue), struct sbx_sse_msg, node);

	if (m) {
		atomic_fetch_sub(&q->bytes, m->len);
		atomic_fetch_sub(&q->http->queued, m->len);
	}
	return m;
}

void sbx_outq_close_locked(struct sbx_outq *q)
{
	struct sbx_sse_msg *m;

	q->closed = true;
	while ((m = sbx_outq_pop_locked(q)))
		free(m);
	pthread_cond_broadcast(q->cond);
}

void sbx_outq_close(struct sbx_outq *q)
{
	pthread_mutex_lock(q->lock);
	sbx_outq_close_locked(q);
	pthread_mutex_unlock(q->lock);
}

void sbx_outq_attach(struct sbx_outq *q, struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	pthread_mutex_lock(q->lock);
	q->fd = ci ? ci->connect_fd : -1;
	pthread_mutex_unlock(q->lock);
}

void sbx_outq_detach(struct sbx_outq *q)
{
	pthread_mutex_lock(q->lock);
	q->fd = -1;
	pthread_mutex_unlock(q->lock);
}

void sbx_outq_cut(struct sbx_outq *q)
{
	pthread_mutex_lock(q->lock);
	sbx_outq_close_locked(q);
	if (q->fd >= 0)
		shutdown(q->fd, SHUT_RDWR);
	pthread_mutex_unlock(q->lock);
}

/* Closes Q for the server and tells its owner (once). The caller holds a
 * reference and no lock. libmicrohttpd closes a connection's socket only
 * after its response (whose free callback detaches Q) is gone, so the
 * shutdown under Q's lock hits this stream's socket. */
static void evict(struct sbx_outq *q)
{
	bool tell;

	pthread_mutex_lock(q->lock);
	tell = !q->evicted;
	q->evicted = true;
	sbx_outq_close_locked(q);
	if (tell && q->fd >= 0)
		shutdown(q->fd, SHUT_RDWR);
	pthread_mutex_unlock(q->lock);
	if (tell)
		q->ops->closed(q);
}

/* The listed queue that holds the most bytes, with a reference; NULL when
 * none holds any. */
static struct sbx_outq *biggest(struct sbx_http *h)
{
	struct sbx_outq *best = NULL;
	size_t most = 0;

	pthread_mutex_lock(&h->outq_lock);
	for (struct sbx_outq *q = h->outqs; q; q = q->next) {
		size_t n = atomic_load(&q->bytes);
		if (n > most) {
			most = n;
			best = q;
		}
	}
	if (best)
		best->ops->ref(best);
	pthread_mutex_unlock(&h->outq_lock);
	return best;
}

/* Brings the total (Q's new message counted) back within server.max_queued
 * by closing the biggest queues; false when Q itself had to go. */
static bool keep_budget(struct sbx_outq *q)
{
	struct sbx_http *h = q->http;

	while (atomic_load(&h->queued) > h->queued_max) {
		struct sbx_outq *v = biggest(h);
		bool self = !v || v == q;
		/* None holds anything: this message alone (with what others add
		 * now) passes it, and Q goes. */
		if (!v) {
			q->ops->ref(q);
			v = q;
		}
		evict(v);
		v->ops->unref(v);
		if (self)
			return false;
	}
	return true;
}

bool sbx_outq_push(struct sbx_outq *q, struct sbx_sse_msg *m)
{
	struct sbx_http *h = q->http;
	size_t len = m->len;
	bool queued = false, full = false;

	/* Counted first, so that pushes at once cannot pass the budget together. */
	atomic_fetch_add(&h->queued, len);
	if (keep_budget(q)) {
		pthread_mutex_lock(q->lock);
		if (q->closed) {
			/* nothing: the stream has ended */
		} else if (q->queue.count < q->max_msgs && len <= q->max_bytes - q->queue.bytes) {
			sbx_queue_push(&q->queue, &m->node, len);
			atomic_fetch_add(&q->bytes, len);
			queued = true;
		} else if (!q->drop_when_full) {
			/* The client does not read: its stream ends now. */
			full = !q->evicted;
			q->evicted = true;
			sbx_outq_close_locked(q);
			if (full && q->fd >= 0)
				shutdown(q->fd, SHUT_RDWR);
		}
		pthread_mutex_unlock(q->lock);
	}
	if (queued) {
		/* Woken after the unlock: the waiter does not wake into a held lock. */
		pthread_cond_broadcast(q->cond);
		return true;
	}
	atomic_fetch_sub(&h->queued, len);
	free(m);
	if (full) {
		q->ops->ref(q);
		q->ops->closed(q);
		q->ops->unref(q);
	}
	return false;
}

/* ---- the wait ---- */

int sbx_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms)
{
	int64_t at = sbx_monotonic_ms() + SBX_PEER_CHECK_MS;

	return sbx_cond_wait_until(cond, lock, until_ms < at ? until_ms : at);
}

bool sbx_http_peer_gone(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p;

	if (!ci)
		return false;
	p.fd = ci->connect_fd;
	p.events = POLLRDHUP;
	p.revents = 0;
	if (poll(&p, 1, 0) <= 0)
		return false;
	return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

enum sbx_event_step sbx_event_stream_next(struct sbx_event_stream *s)
{
	struct sbx_sse_msg *m = NULL;
	int64_t keepalive_at = sbx_monotonic_ms() + s->keepalive_ms;
	enum sbx_event_step step = SBX_EVENTS_KEEPALIVE;
	int r;

	pthread_mutex_lock(s->out->lock);
	for (;;) {
		enum sbx_event_state state = s->state(s->ctx);
		if (state == SBX_EVENTS_CLOSED) {
			step = SBX_EVENTS_END;
			break;
		}
		m = sbx_outq_pop_locked(s->out);
		if (m) {
			step = SBX_EVENTS_MESSAGE;
			break;
		}
		if (state != SBX_EVENTS_OPEN) {
			step = state == SBX_EVENTS_DONE ? SBX_EVENTS_END : SBX_EVENTS_FAIL;
			break;
		}
		if (sbx_cond_wait_slice(s->out->cond, s->out->lock, keepalive_at) == ETIMEDOUT) {
			if (sbx_monotonic_ms() >= keepalive_at)
				break;
			if (sbx_http_peer_gone(s->conn)) {
				step = SBX_EVENTS_FAIL;
				break;
			}
		}
	}
	pthread_mutex_unlock(s->out->lock);
	if (step == SBX_EVENTS_MESSAGE) {
		r = sbx_buf_append(&s->pending, m->text, m->len);
		free(m);
	} else if (step == SBX_EVENTS_KEEPALIVE) {
		r = sbx_buf_append(&s->pending, SBX_SSE_KEEPALIVE_FRAME,
				   strlen(SBX_SSE_KEEPALIVE_FRAME));
	} else {
		return step;
	}
	return r < 0 ? SBX_EVENTS_FAIL : step;
}
