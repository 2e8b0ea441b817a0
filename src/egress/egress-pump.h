/* SPDX-License-Identifier: MIT */
/*
 * What the egress relay's pump (src/egress/egress.c) and its upstream
 * workers (src/egress/egress_upstream.c) share: a relay's state, its
 * streams, and the few helpers both use. Private to those two files.
 *
 * Locking: everything in struct sbx_egress below its lock, and every field
 * of a stream but those its worker owns (req, read-only while it runs), is
 * touched only under e->lock.
 */
#ifndef SBX_EGRESS_PUMP_H
#define SBX_EGRESS_PUMP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "egress-internal.h"
#include "egress.h"
#include "sbx/buf.h"

/* Connections one sandbox's relay carries at once; more are answered 503. */
#define STREAMS_MAX 16
/* Bytes held for the relay per stream before a worker waits. */
#define OUT_CAP EGRESS_STREAM_WINDOW
/* Opening an upstream connection (name lookup included). */
#define CONNECT_MS 15000
/* A tunnel with no byte either way this long is closed. */
#define IDLE_MS (10 * 60 * 1000)
/* A worker waits this long at most for the relay to take its bytes. */
#define STALL_MS 120000

enum stream_state {
	S_FREE,
	S_HEAD,	   /* reading the request head */
	S_REPLY,   /* answering it ourselves (a refusal); what comes is dropped */
	S_FETCH,   /* a worker fetches (GET, HEAD); what comes is dropped */
	S_CONNECT, /* a worker connects (CONNECT); what comes waits for the tunnel */
	S_TUNNEL,  /* bytes both ways between the relay and up */
	S_END,	   /* CLOSE sent: waits for its worker to end, then freed */
};

struct estream {
	struct sbx_egress *e;
	enum stream_state state;
	uint16_t id;
	int64_t deadline_ms; /* S_HEAD: the head's; S_TUNNEL: idle */
	int64_t life_ms;     /* closed then, busy or not (a tunnel; a stalled stream) */
	int64_t stall_ms;    /* output pending, no window: dropped then (0: not stalled) */
	bool slot;	     /* holds a relayed connection (egress_slot_take) */
	/* From the relay. in_window: what it may still send; in_credit:
	 * consumed, not yet granted back with WINDOW. */
	struct sbx_buf in;
	size_t in_off;
	uint32_t in_window, in_credit;
	/* To the relay, within out_window (granted by its WINDOW frames). */
	struct sbx_buf out;
	size_t out_off;
	uint64_t out_window;
	bool out_eof;	  /* nothing more comes: CLOSE once out is sent */
	bool close_sent;  /* we sent CLOSE */
	bool peer_closed; /* the relay sent CLOSE */
	bool cancel;	  /* the worker stops */
	bool worker, worker_done;
	pthread_t tid;
	struct egress_request req;
	struct egress_head_scan scan; /* S_HEAD: how far its end was looked for */
	CURL *up;		      /* S_TUNNEL: the upstream connection (CONNECT_ONLY) */
	int up_fd;
	bool up_eof;
};

struct sbx_egress {
	char *sid;   /* the sandbox's id */
	char *owner; /* the sandbox's tenant ("" when none) */
	/* sandbox.egress_connections, _per_tenant, egress_tunnel_lifetime */
	int64_t conns_max, conns_per_tenant, tunnel_life_ms;
	/* sandbox.egress_hello_timeout, _head_, _write_, egress_low_speed_time,
	 * egress_page_timeout (ms) */
	int64_t hello_ms, head_ms, write_ms, low_speed_ms, page_ms;
	bool fixed_port;    /* sbx_egress_fixed_port: listens on RELAY_PORT */
	sbx_engine *engine; /* outlives the relay */
	char *container;
	struct egress_policy pol;
	pthread_mutex_t start_lock; /* serialises starts */
	pthread_mutex_t lock;	    /* everything below */
	pthread_cond_t cond;	    /* room in an out buffer, or cancel */
	sbx_stream *stream;	    /* the pump's while it runs */
	pthread_t pump;
	bool running;  /* the pump runs (it clears this as it ends) */
	bool joinable; /* a pump thread was started and not joined */
	bool stop;
	int wake[2]; /* a byte wakes the pump */
	int port;
	long pid;
	struct sbx_egress_stats stats;
	struct estream st[STREAMS_MAX];
	struct sbx_buf ctl; /* control frames waiting to be written */
	/* Whole frames that came after the hello in the same read, for the pump
	 * to take first (none is acted on before the pump runs). */
	struct sbx_buf early;
	struct egress_reader rd;   /* the pump's */
	struct sbx_buf diag;	   /* the relay's stderr */
	char why[256];		   /* why the pump stopped the relay (protocol) */
	bool index_refusal_logged; /* a path refused for the index's credentials was logged */
};

static inline void wake(struct sbx_egress *e)
{
	ssize_t n = write(e->wake[1], "x", 1);
	(void)n; /* a full pipe already wakes it */
}

static inline size_t out_pending(const struct estream *st)
{
	return st->out.len - st->out_off;
}

/* Under lock: queues BYTES for the relay on ST (no bound: the callers
 * bound it). */
static inline int out_append(struct estream *st, const void *p, size_t n)
{
	if (st->out_off && st->out_off == st->out.len) {
		sbx_buf_reset(&st->out);
		st->out_off = 0;
	} else if (st->out_off >= EGRESS_FRAME_MAX) {
		memmove(st->out.data, st->out.data + st->out_off, st->out.len - st->out_off);
		st->out.len -= st->out_off;
		st->out_off = 0;
	}
	return sbx_buf_append(&st->out, p, n);
}

/* Under lock: answers ST with a short plain-text response (reason PHRASE,
 * or NULL: the usual one) and ends it (what the relay sends on it from now
 * on is dropped). */
static inline void answer_phrase(struct estream *st, int status, const char *phrase,
				 const char *text)
{
	char *resp;
	size_t len;

	if (egress_plain_response(status, phrase, text, &resp, &len) == 0) {
		out_append(st, resp, len);
		free(resp);
	}
	if (st->state == S_HEAD)
		st->state = S_REPLY;
	st->out_eof = true;
}

/* answer with the status's usual reason phrase. */
static inline void answer(struct estream *st, int status, const char *text)
{
	answer_phrase(st, status, NULL, text);
}

/* egress_workers.c: a worker slot (WORKERS_MAX in all); false when none
 * is free. */
bool worker_take(void);
/* egress_workers.c: gives back the worker slot worker_take took. */
void worker_give(void);
/* egress_workers.c: a worker's last act: nothing of ST or E is touched
 * after it. */
void worker_end(struct estream *st);

/* egress_upstream.c: the worker threads start_worker starts for a stream
 * whose head was accepted (ARG: the struct estream). fetch_main fetches
 * st->req (INDEX, FORWARD) and passes the response on; connect_main opens
 * the tunnel of a CONNECT and hands it to the pump (S_TUNNEL). Both answer
 * a failure themselves and end with worker_give. */
void *fetch_main(void *arg);
void *connect_main(void *arg);

#endif
