/* SPDX-License-Identifier: MIT */
/*
 * The wait of an event stream (the SSE transport's stream, a Streamable HTTP
 * call's stream): for the next queued message, a keepalive when idle, and
 * the client closing the connection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http-internal.h"

enum sbx_event_step sbx_event_stream_next(struct sbx_event_stream *s)
{
	struct sbx_sse_msg *m = NULL;
	int64_t keepalive_at = sbx_monotonic_ms() + SBX_SSE_KEEPALIVE_MS;
	enum sbx_event_step step = SBX_EVENTS_KEEPALIVE;
	int r;

	pthread_mutex_lock(s->lock);
	for (;;) {
		enum sbx_event_state state = s->state(s->ctx);
		if (state == SBX_EVENTS_CLOSED) {
			step = SBX_EVENTS_END;
			break;
		}
		m = sbx_queue_entry(sbx_queue_pop(s->queue), struct sbx_sse_msg, node);
		if (m) {
			step = SBX_EVENTS_MESSAGE;
			break;
		}
		if (state != SBX_EVENTS_OPEN) {
			step = state == SBX_EVENTS_DONE ? SBX_EVENTS_END : SBX_EVENTS_FAIL;
			break;
		}
		if (sbx_cond_wait_slice(s->cond, s->lock, keepalive_at) == ETIMEDOUT) {
			if (sbx_monotonic_ms() >= keepalive_at)
				break;
			if (sbx_http_peer_gone(s->conn)) {
				step = SBX_EVENTS_FAIL;
				break;
			}
		}
	}
	pthread_mutex_unlock(s->lock);
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
