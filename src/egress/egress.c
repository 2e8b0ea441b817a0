/* SPDX-License-Identifier: MIT */
/*
 * Egress: the server's side of a sandbox's relay (src/egress/sbx_relay.py,
 * whose header describes the frames).
 *
 * A sandbox has no network (sandbox.network = none) but its own loopback.
 * The relay listens there and carries each connection accepted over ONE
 * engine exec stream to the server, which decides per connection
 * (src/egress/egress_proto.c): a GET or HEAD for a path is fetched from
 * sandbox.index_url with libcurl, the server adding the index's credentials
 * (which therefore never enter the sandbox); CONNECT HOST:PORT and
 * http://HOST/ requests reach the index's own host, its file host and the
 * hosts in sandbox.egress_allow, through a connection the server opens
 * itself; anything else gets a 403 naming the host and the setting. Only
 * the engine's exec API is used: the engine may be remote.
 *
 * With sandbox.network = none, the relay listens on a fixed port of the
 * sandbox's loopback (RELAY_PORT), so that the proxy variables can be in
 * the container's own environment from its creation (sbx_egress_container_env)
 * and every process of the sandbox has them: the persistent interpreter, a
 * shell command, pip typed in one. It is (re)started before each call that
 * runs code and each install (the sandbox layer, which keeps the relay in
 * the sandbox's record, calls sbx_egress_ensure). With any other network
 * the sandbox's loopback may be the host's (host), where a fixed port would
 * clash: the relay takes a free port and only the server's own pip is told.
 * A relay freed while its container stays (the server stops and keeps its
 * containers) is killed.
 *
 * Threads: one pump thread per running relay owns the exec stream (reads
 * and writes it), the tunnels' upstream connections and the frames; a
 * worker thread per connection that fetches or connects
 * (src/egress/egress_upstream.c; at most STREAMS_MAX per sandbox,
 * WORKERS_MAX in all) hands bytes to it through bounded buffers under
 * e->lock (the shared state: src/egress/egress-pump.h). A fetch or tunnel
 * holds one of the connections relayed at once (egress_slots.c: per tenant
 * and in all) until its stream is freed; a tunnel lives at most
 * sandbox.egress_tunnel_lifetime. The pump never waits on the relay: its
 * writes that the relay does not read within sandbox.egress_write_timeout
 * stop the relay. The
 * relay is code in the sandbox and
 * may be replaced by anything: every frame is checked (its size, its type,
 * each stream's window), so that the server holds about STREAMS_MAX x
 * (EGRESS_STREAM_WINDOW + OUT_CAP) bytes for a sandbox (plus buffer slack)
 * and one frame's payload; a relay that breaks a rule is stopped (its
 * stream closed and, Podman's conmon not always ending it then, its process
 * killed), and the next install starts a new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

#include "egress-pump.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/metrics.h"

/* The relay's program, generated from src/egress/sbx_relay.py. */
#include "src/egress/sbx_relay.inc"

#define RELAY_USER "1000:1000"
/* The relay's port on the sandbox's loopback with sandbox.network = none
 * (the proxies' customary port; sandbox code cannot listen there while the
 * relay runs). */
#define RELAY_PORT 3128
/* How long a new relay may take to say hello: e->hello_ms. A connection's
 * request head must arrive within e->head_ms (slow clients). The relay must
 * read each batch of frames the pump writes within e->write_ms (the pump
 * never waits on the write: it reads, reaps and sees stop meanwhile); one
 * that does not is stopped. */
/* Bytes of frames written to the engine stream in one go. */
#define BATCH_MAX (4 * (EGRESS_HDR + EGRESS_FRAME_MAX))
/* Bytes of the relay's own stderr kept to explain a failed start. */
#define DIAG_MAX 2048
/* Control frames (refusals, WINDOW) waiting to be written; a relay that
 * makes more in one read of its output is stopped. */
#define CTL_MAX (256 * 1024)

/* Keeps what the relay wrote to its standard error, up to DIAG_MAX bytes
 * (said when it stops). */
static void diag_keep(struct sbx_egress *e, const void *buf, size_t n)
{
	if (e->diag.len < DIAG_MAX)
		sbx_buf_append(&e->diag, buf,
			       n < DIAG_MAX - e->diag.len ? n : DIAG_MAX - e->diag.len);
}

static size_t in_pending(const struct estream *st)
{
	return st->in.len - st->in_off;
}

/* Under lock: N bytes the relay sent on ST were used up; grants them back. */
static void credit(struct sbx_egress *e, struct estream *st, size_t n)
{
	unsigned char f[EGRESS_HDR + 4];

	st->in_credit += (uint32_t)n;
	if (st->in_credit < EGRESS_STREAM_WINDOW / 4 || st->close_sent || st->peer_closed)
		return;
	egress_frame_header(f, EGRESS_WINDOW, st->id, 4);
	f[8] = (unsigned char)(st->in_credit >> 24);
	f[9] = (unsigned char)(st->in_credit >> 16);
	f[10] = (unsigned char)(st->in_credit >> 8);
	f[11] = (unsigned char)st->in_credit;
	if (sbx_buf_append(&e->ctl, f, sizeof(f)) == 0) {
		st->in_window += st->in_credit;
		st->in_credit = 0;
	}
}

/* Under lock: the stream is over for whatever reason: drops what the relay
 * no longer needs, stops its worker, closes the tunnel; CLOSE follows once
 * what is queued for the relay is sent (nothing, when it closed). */
static void end_stream(struct sbx_egress *e, struct estream *st)
{
	st->cancel = true;
	st->out_eof = true;
	if (st->peer_closed) {
		sbx_buf_release(&st->out);
		st->out_off = 0;
	}
	if (st->up) {
		curl_easy_cleanup(st->up);
		st->up = NULL;
		st->up_fd = -1;
	}
	sbx_buf_release(&st->in);
	st->in_off = 0;
	pthread_cond_broadcast(&e->cond);
}

/* The live stream ID: one we have closed is no longer the relay's (it may
 * open the id again as soon as it has our CLOSE). */
static struct estream *find(struct sbx_egress *e, uint16_t id)
{
	for (size_t i = 0; i < STREAMS_MAX; i++)
		if (e->st[i].state != S_FREE && !e->st[i].close_sent && e->st[i].id == id)
			return &e->st[i];
	return NULL;
}

/* Under lock: the head of ST is complete: starts its worker. */
static void start_worker(struct sbx_egress *e, struct estream *st)
{
	pthread_attr_t attr;
	char why[512];
	int r;

	r = egress_slot_take(e->owner, e->conns_max, e->conns_per_tenant, why, sizeof(why));
	if (r != 0) {
		e->stats.refused++;
		answer(st, 503, why);
		return;
	}
	st->slot = true;
	if (st->req.kind == EGRESS_REQ_CONNECT)
		st->life_ms = sbx_monotonic_ms() + e->tunnel_life_ms;
	if (!worker_take()) {
		answer(st, 503,
		       "mcp-sandbox: the server is relaying too many connections at "
		       "once; try again in a moment");
		return;
	}
	bool connect = st->req.kind == EGRESS_REQ_CONNECT;

	st->state = connect ? S_CONNECT : S_FETCH;
	st->worker = true;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	r = pthread_create(&st->tid, &attr, connect ? connect_main : fetch_main, st);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		worker_give();
		st->worker = false;
		st->state = S_HEAD;
		answer(st, 503,
		       "mcp-sandbox: the server cannot start a thread for this "
		       "connection; try again in a moment");
	}
}

/* ---- the pump: frames from the relay ---- */

static int protocol(struct sbx_egress *e, const char *fmt, ...) SBX_PRINTF(2, 3);
static int protocol(struct sbx_egress *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->why, sizeof(e->why), fmt, ap);
	va_end(ap);
	return -EPROTO;
}

/* Under lock: what a stream in S_HEAD has received so far. */
static void try_head(struct sbx_egress *e, struct estream *st)
{
	char why[512];
	size_t tried = st->scan.examined;
	int r;

	egress_policy_follow(&e->pol); /* its tenant's list may have changed */
	r = egress_parse_head(&st->scan, &e->pol, e->port, st->in.data + st->in_off, in_pending(st),
			      &st->req, why, sizeof(why));
	e->stats.head_scanned += st->scan.examined - tried;

	if (r == 0)
		return;
	if (r == 1) {
		st->in_off += st->req.head_len;
		credit(e, st, st->req.head_len);
		start_worker(e, st);
		return;
	}
	if (r < 0)
		snprintf(why, sizeof(why), "mcp-sandbox: out of memory");
	sbx_buf_release(&st->in);
	st->in_off = 0;
	e->stats.refused++;
	if (r == 403 && st->scan.index_refused) {
		/* The operator's to fix (an index serving its files elsewhere):
		 * said once per sandbox, not at each of pip's retries. */
		if (!e->index_refusal_logged)
			sbx_log_warn("sandbox %s: egress: %s (said once per sandbox)", e->sid, why);
		e->index_refusal_logged = true;
		answer_phrase(st, r, EGRESS_INDEX_REFUSED_PHRASE, why);
		return;
	}
	answer(st, r < 0 ? 503 : r, why);
}

static int on_frame(void *userdata, uint8_t type, uint16_t id, const unsigned char *p, uint32_t len)
{
	struct sbx_egress *e = userdata;
	struct estream *st = find(e, id);

	switch (type) {
	case EGRESS_HELLO:
		return 0; /* once at the start; later ones mean nothing */
	case EGRESS_OPEN:
		if (st)
			return protocol(e, "opened stream %u twice", id);
		for (size_t i = 0; i < STREAMS_MAX && !st; i++)
			if (e->st[i].state == S_FREE)
				st = &e->st[i];
		if (!st) {
			/* No state is kept: what the relay sends on it is dropped
			 * as for any stream the server does not know. */
			char msg[256], *resp;
			unsigned char h[EGRESS_HDR];
			size_t rl;

			snprintf(msg, sizeof(msg),
				 "mcp-sandbox: this sandbox already has %d connections through the "
				 "server at once (the limit); close one and try again",
				 STREAMS_MAX);
			e->stats.refused++;
			if (e->ctl.len > CTL_MAX)
				return protocol(e,
						"more connections than the server could refuse "
						"(over %d at once)",
						STREAMS_MAX);
			if (egress_plain_response(503, NULL, msg, &resp, &rl) == 0) {
				egress_frame_header(h, EGRESS_DATA, id, (uint32_t)rl);
				sbx_buf_append(&e->ctl, h, sizeof(h));
				sbx_buf_append(&e->ctl, resp, rl);
				free(resp);
			}
			egress_frame_header(h, EGRESS_CLOSE, id, 0);
			sbx_buf_append(&e->ctl, h, sizeof(h));
			return 0;
		}
		memset(st, 0, sizeof(*st));
		st->e = e;
		st->id = id;
		st->state = S_HEAD;
		st->up_fd = -1;
		st->in_window = EGRESS_STREAM_WINDOW;
		st->out_window = EGRESS_STREAM_WINDOW;
		st->deadline_ms = sbx_monotonic_ms() + e->head_ms;
		st->life_ms = sbx_monotonic_ms() + e->tunnel_life_ms;
		e->stats.streams++;
		return 0;
	case EGRESS_DATA:
		if (!st || st->peer_closed)
			return 0;
		if (len > st->in_window)
			return protocol(e, "%u bytes on stream %u beyond the %u its window allowed",
					len, id, st->in_window);
		st->in_window -= len;
		e->stats.bytes_out += len;
		sbx_metrics_egress_bytes(e->owner, 0, len);
		/* Nothing reads it: dropped, and not granted back (an honest relay
		 * sends nothing more on a stream we answer and close). */
		if ((st->state != S_HEAD && st->state != S_CONNECT && st->state != S_TUNNEL) ||
		    st->cancel)
			return 0;
		if (st->in_off && st->in_off == st->in.len) {
			sbx_buf_reset(&st->in);
			st->in_off = 0;
		} else if (st->in_off) {
			memmove(st->in.data, st->in.data + st->in_off, in_pending(st));
			st->in.len -= st->in_off;
			st->in_off = 0;
		}
		if (sbx_buf_append(&st->in, p, len) < 0)
			return protocol(e, "out of memory");
		if (st->state == S_HEAD)
			try_head(e, st);
		return 0;
	case EGRESS_CLOSE:
		if (!st || st->peer_closed)
			return 0;
		st->peer_closed = true;
		end_stream(e, st);
		return 0;
	case EGRESS_WINDOW:
		if (len != 4)
			return protocol(e, "a WINDOW frame of %u bytes", len);
		if (st && !st->close_sent) {
			uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
				     (uint32_t)p[2] << 8 | p[3];
			st->out_window += v;
			if (st->out_window > (1u << 30))
				st->out_window = 1u << 30;
		}
		return 0;
	default:
		return protocol(e, "a frame of type %u", type);
	}
}

/* Reads what the relay wrote (without waiting): 1 to go on, 0 at its end,
 * -EPROTO (e->why says why) or another negative code. */
static int read_relay(struct sbx_egress *e)
{
	unsigned char buf[65536];
	size_t total = 0;

	while (total < 4 * sizeof(buf)) {
		char why[192] = "";
		int fd = 1, r;
		ssize_t n = sbx_stream_read(e->stream, buf, sizeof(buf), &fd, 0, NULL);

		if (n == -ETIMEDOUT)
			return 1;
		if (n <= 0)
			return (int)n;
		total += (size_t)n;
		if (fd == 2) {
			diag_keep(e, buf, (size_t)n);
			continue;
		}
		pthread_mutex_lock(&e->lock);
		r = egress_reader_feed(&e->rd, buf, (size_t)n, on_frame, e, why, sizeof(why));
		pthread_mutex_unlock(&e->lock);
		if (r == -EPROTO && why[0])
			snprintf(e->why, sizeof(e->why), "%s", why);
		if (r < 0)
			return r;
	}
	return 1;
}

/* ---- the pump: tunnels, deadlines, frames to the relay ---- */

/* Under lock: moves bytes between the relay's buffers and the tunnel's
 * upstream connection, without waiting. */
static void tunnel_io(struct sbx_egress *e, struct estream *st, int64_t now)
{
	char buf[16384];
	bool moved = false;

	while (st->up && in_pending(st)) {
		size_t sent = 0;
		CURLcode c =
		    curl_easy_send(st->up, st->in.data + st->in_off, in_pending(st), &sent);
		if (c == CURLE_AGAIN)
			break;
		if (c != CURLE_OK) {
			end_stream(e, st);
			return;
		}
		st->in_off += sent;
		credit(e, st, sent);
		moved = true;
	}
	while (st->up && !st->up_eof && out_pending(st) < OUT_CAP) {
		size_t got = 0, want = OUT_CAP - out_pending(st);
		CURLcode c =
		    curl_easy_recv(st->up, buf, want < sizeof(buf) ? want : sizeof(buf), &got);
		if (c == CURLE_AGAIN)
			break;
		if (c != CURLE_OK || got == 0) {
			st->up_eof = true;
			st->out_eof = true;
			break;
		}
		if (out_append(st, buf, got) < 0) {
			end_stream(e, st);
			return;
		}
		moved = true;
	}
	if (moved)
		st->deadline_ms = now + IDLE_MS;
}

/* Under lock: fills B (at most BATCH_MAX) with the frames to write now:
 * control frames, DATA within each stream's window, CLOSE for streams that
 * are done. */
static void batch(struct sbx_egress *e, struct sbx_buf *b)
{
	unsigned char h[EGRESS_HDR];

	if (e->ctl.len) {
		sbx_buf_append(b, e->ctl.data, e->ctl.len);
		sbx_buf_reset(&e->ctl);
	}
	for (size_t i = 0; i < STREAMS_MAX; i++) {
		struct estream *st = &e->st[i];

		if (st->state == S_FREE || st->close_sent)
			continue;
		while (out_pending(st) && st->out_window && b->len < BATCH_MAX) {
			size_t n = out_pending(st);
			if (n > EGRESS_FRAME_MAX)
				n = EGRESS_FRAME_MAX;
			if (n > st->out_window)
				n = (size_t)st->out_window;
			egress_frame_header(h, EGRESS_DATA, st->id, (uint32_t)n);
			if (sbx_buf_append(b, h, sizeof(h)) < 0 ||
			    sbx_buf_append(b, st->out.data + st->out_off, n) < 0)
				break;
			st->out_off += n;
			st->out_window -= n;
			e->stats.bytes_in += n;
			sbx_metrics_egress_bytes(e->owner, n, 0);
			pthread_cond_broadcast(&e->cond);
		}
		if (st->out_eof && !out_pending(st) &&
		    (!st->worker || st->worker_done || st->peer_closed)) {
			egress_frame_header(h, EGRESS_CLOSE, st->id, 0);
			if (sbx_buf_append(b, h, sizeof(h)) == 0) {
				st->close_sent = true;
				end_stream(e, st);
				st->state = S_END;
			}
		}
	}
}

/* Under lock: frees the streams that are over; their workers are joined
 * (each has ended or ends at once: it was cancelled) without the lock. */
static void reap(struct sbx_egress *e)
{
	for (size_t i = 0; i < STREAMS_MAX; i++) {
		struct estream *st = &e->st[i];

		if (st->state != S_END || (st->worker && !st->worker_done))
			continue;
		if (st->worker) {
			pthread_t tid = st->tid;
			pthread_mutex_unlock(&e->lock);
			pthread_join(tid, NULL);
			pthread_mutex_lock(&e->lock);
		}
		if (st->up)
			curl_easy_cleanup(st->up);
		if (st->slot)
			egress_slot_give(e->owner);
		sbx_buf_release(&st->in);
		sbx_buf_release(&st->out);
		egress_request_release(&st->req);
		memset(st, 0, sizeof(*st));
		st->up_fd = -1;
	}
}

/* Under lock: whether ST waits, with its output pending, for a window the
 * relay does not grant, where no other deadline ends it (a live tunnel has
 * its idle and lifetime deadlines). Its CLOSE waits for that output, and the
 * stream, its connection slot with it, for its CLOSE. */
static bool stalled(const struct estream *st)
{
	return st->state != S_FREE && st->state != S_HEAD && !st->close_sent &&
	       !(st->state == S_TUNNEL && st->up) && out_pending(st) && !st->out_window;
}

/* Under lock: deadlines (a head too slow, an idle tunnel, output the relay
 * does not take); the time until the next one, in ms. */
static int deadlines(struct sbx_egress *e, int64_t now)
{
	int64_t next = now + 1000;

	for (size_t i = 0; i < STREAMS_MAX; i++) {
		struct estream *st = &e->st[i];

		if (!stalled(st))
			st->stall_ms = 0;
		else if (!st->stall_ms)
			st->stall_ms = now + STALL_MS;
		if (st->stall_ms && (now >= st->stall_ms || now >= st->life_ms)) {
			sbx_log("sandbox %s: a relayed connection (to %s) was closed: the relay "
				"took none of its bytes for %lld s",
				e->sid, st->req.host[0] ? st->req.host : "the package index",
				(long long)(now - (st->stall_ms - STALL_MS)) / 1000);
			/* Dropped, so that CLOSE goes and the slot comes back. */
			sbx_buf_release(&st->out);
			st->out_off = 0;
			st->stall_ms = 0;
			end_stream(e, st);
		} else if (st->stall_ms) {
			if (st->stall_ms < next)
				next = st->stall_ms;
			if (st->life_ms < next)
				next = st->life_ms;
		} else if (st->state == S_HEAD && now >= st->deadline_ms) {
			sbx_buf_release(&st->in);
			st->in_off = 0;
			e->stats.refused++;
			answer(st, 408,
			       "mcp-sandbox: the request head did not arrive within 10 seconds");
		} else if (st->state == S_TUNNEL && st->up &&
			   (now >= st->deadline_ms || now >= st->life_ms)) {
			if (now < st->deadline_ms)
				sbx_log(
				    "sandbox %s: a tunnel to %s:%d was closed at the end of its "
				    "lifetime (sandbox.egress_tunnel_lifetime)",
				    e->sid, st->req.host, st->req.port);
			/* What the relay has not taken is dropped, so that CLOSE
			 * goes now: a relay that grants no window cannot keep it. */
			sbx_buf_release(&st->out);
			st->out_off = 0;
			end_stream(e, st);
		} else if (st->state == S_HEAD || (st->state == S_TUNNEL && st->up)) {
			if (st->deadline_ms < next)
				next = st->deadline_ms;
			if (st->state == S_TUNNEL && st->life_ms < next)
				next = st->life_ms;
		}
	}
	return next > now ? (int)(next - now) : 0;
}

/* Stops every stream and joins the workers: the relay is gone. A worker
 * sees its cancel within a moment (curl calls its progress function at
 * least once a second; a wait for room wakes at once). */
static void teardown(struct sbx_egress *e)
{
	bool busy = true;

	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < STREAMS_MAX; i++) {
		struct estream *st = &e->st[i];
		if (st->state == S_FREE)
			continue;
		st->peer_closed = true;
		end_stream(e, st);
		st->state = S_END;
	}
	while (busy) {
		busy = false;
		for (size_t i = 0; i < STREAMS_MAX; i++)
			busy |= e->st[i].worker && !e->st[i].worker_done;
		if (busy)
			sbx_cond_wait_until(&e->cond, &e->lock, sbx_monotonic_ms() + 100);
	}
	reap(e);
	sbx_buf_release(&e->ctl);
	pthread_mutex_unlock(&e->lock);
}

/* Kills the relay with a fresh exec as the sandbox's user: the pid it gave
 * in its hello, when that process is still a relay. */
static void kill_relay(struct sbx_egress *e)
{
	char pid[32];
	const char *const argv[] = {
	    "sh",
	    "-c",
	    "grep -q sbx-relay /proc/\"$1\"/cmdline 2>/dev/null && kill -KILL \"$1\"; exit 0",
	    "sh",
	    pid,
	    NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .user = RELAY_USER,
	    .timeout_ms = 10000,
	    .output_cap = 4096,
	};
	struct sbx_exec_result res = {0};

	if (e->pid <= 1)
		return;
	snprintf(pid, sizeof(pid), "%ld", e->pid);
	if (sbx_exec(e->engine, e->container, &spec, &res, NULL) >= 0)
		sbx_exec_result_release(&res);
}

/* Takes the frames that came with the hello (e->early), as read_relay would
 * have: 0, or negative to stop the relay. */
static int take_early(struct sbx_egress *e)
{
	size_t off = 0;
	int r = 0;

	pthread_mutex_lock(&e->lock);
	while (r >= 0 && off + EGRESS_HDR <= e->early.len) {
		const unsigned char *h = (const unsigned char *)e->early.data + off;
		uint32_t len =
		    (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];

		r = on_frame(e, h[0], (uint16_t)(h[2] << 8 | h[3]), h + EGRESS_HDR, len);
		off += EGRESS_HDR + len;
	}
	sbx_buf_release(&e->early);
	pthread_mutex_unlock(&e->lock);
	return r;
}

static void *pump_main(void *arg)
{
	struct sbx_egress *e = arg;
	struct sbx_buf out = SBX_BUF_INIT;
	size_t out_done = 0;	 /* bytes of out written */
	int64_t write_until = 0; /* out must be written by then */
	bool stopped;
	int r = take_early(e) < 0 ? -EPROTO : 1;

	while (r > 0) {
		struct pollfd pf[2 + STREAMS_MAX];
		nfds_t n = 2;
		int64_t now = sbx_monotonic_ms();
		int timeout;

		pthread_mutex_lock(&e->lock);
		if (e->stop) {
			pthread_mutex_unlock(&e->lock);
			break;
		}
		for (size_t i = 0; i < STREAMS_MAX; i++)
			if (e->st[i].state == S_TUNNEL && e->st[i].up)
				tunnel_io(e, &e->st[i], now);
		timeout = deadlines(e, now);
		/* Everything the stream takes now, without waiting. */
		for (;;) {
			ssize_t w;

			if (out_done == out.len) {
				sbx_buf_reset(&out);
				out_done = 0;
				batch(e, &out);
				if (!out.len)
					break;
				write_until = now + e->write_ms;
			}
			pthread_mutex_unlock(&e->lock);
			w = sbx_stream_write_some(e->stream, out.data + out_done,
						  out.len - out_done, NULL);
			pthread_mutex_lock(&e->lock);
			if (w <= 0) {
				r = w < 0 ? (int)w : 1;
				break;
			}
			out_done += (size_t)w;
		}
		if (r > 0 && out_done < out.len) {
			if (now >= write_until) {
				snprintf(
				    e->why, sizeof(e->why),
				    "it did not read the %zu bytes the server wrote to it within "
				    "%lld ms (sandbox.egress_write_timeout)",
				    out.len - out_done, (long long)e->write_ms);
				r = -ETIMEDOUT;
			} else if (write_until - now < timeout) {
				timeout = (int)(write_until - now);
			}
		}
		reap(e);
		pf[0] = (struct pollfd){.fd = sbx_stream_fd(e->stream),
					.events = POLLIN | (out_done < out.len ? POLLOUT : 0)};
		pf[1] = (struct pollfd){.fd = e->wake[0], .events = POLLIN};
		for (size_t i = 0; i < STREAMS_MAX; i++) {
			struct estream *st = &e->st[i];
			short ev = 0;

			if (st->state != S_TUNNEL || !st->up || st->up_fd < 0)
				continue;
			if (!st->up_eof && out_pending(st) < OUT_CAP)
				ev |= POLLIN;
			if (in_pending(st))
				ev |= POLLOUT;
			if (!ev)
				continue;
			pf[n++] = (struct pollfd){.fd = st->up_fd, .events = ev};
		}
		pthread_mutex_unlock(&e->lock);
		if (r < 0)
			break;
		if (sbx_stream_pending(e->stream))
			timeout = 0;
		if (poll(pf, n, timeout) < 0 && errno != EINTR)
			break;
		if (pf[1].revents) {
			char drain[256];
			while (read(e->wake[0], drain, sizeof(drain)) > 0)
				;
		}
		if (pf[0].revents || sbx_stream_pending(e->stream))
			r = read_relay(e);
	}
	sbx_buf_release(&out);
	if (r == -EPROTO || r == -ETIMEDOUT) {
		pthread_mutex_lock(&e->lock);
		e->stats.protocol_errors++;
		pthread_mutex_unlock(&e->lock);
		sbx_log_warn("sandbox %s: egress relay stopped: %s%s", e->sid,
			     r == -EPROTO ? "it sent " : "", e->why);
	}
	teardown(e);
	pthread_mutex_lock(&e->lock);
	e->stream = sbx_stream_free(e->stream);
	stopped = e->stop;
	/* sbx_egress_ensure starts another once this thread is joined. */
	e->running = false;
	pthread_mutex_unlock(&e->lock);
	/* Closing the stream is not always the end of the relay (Podman's
	 * conmon may keep its stdin open while its output is written into): the
	 * one the server stopped is killed, unless the sandbox goes anyway. */
	if (r != 0 && !stopped)
		kill_relay(e);
	return NULL;
}

/* ---- starting the relay ---- */

struct hello {
	struct sbx_egress *e;
	bool got;
};

/* The first frame must be the hello; whole frames that follow it in the
 * same read are kept in e->early for the pump, which takes them first: no
 * stream opens (and no worker starts) before the pump runs, so that a start
 * that fails after the hello leaves nothing behind. */
static int on_hello(void *userdata, uint8_t type, uint16_t id, const unsigned char *p, uint32_t len)
{
	struct hello *h = userdata;
	struct json_object *o, *v;
	char text[256];
	int port = 0;

	if (h->got) {
		unsigned char hdr[EGRESS_HDR];

		egress_frame_header(hdr, type, id, len);
		return sbx_buf_append(&h->e->early, hdr, sizeof(hdr)) < 0 ||
			       sbx_buf_append(&h->e->early, p, len) < 0
			   ? -ENOMEM
			   : 0;
	}
	if (type != EGRESS_HELLO || len >= sizeof(text))
		return -EPROTO;
	memcpy(text, p, len);
	text[len] = '\0';
	o = json_tokener_parse(text);
	if (o && json_object_object_get_ex(o, "port", &v))
		port = json_object_get_int(v);
	if (o && json_object_object_get_ex(o, "pid", &v))
		h->e->pid = (long)json_object_get_int64(v);
	json_object_put(o);
	if (port < 1 || port > 65535)
		return -EPROTO;
	h->e->port = port;
	h->got = true;
	return 0;
}

bool sbx_egress_fixed_port(const struct sbx_settings *s)
{
	const char *net = s->sandbox.network;

	return !net[0] || strcmp(net, "none") == 0;
}

/* Under start_lock, with no pump: starts the relay and waits for its hello.
 * *EXEC_FAILED: the engine's exec failed (ERR is the engine's). */
static int start_relay(struct sbx_egress *e, bool *exec_failed, struct sbx_error *err)
{
	char frame_max[16], window[16], port[16];
	const char *const argv[] = {"python3", "-u",   "-c", sbx_relay_py, "sbx-relay",
				    frame_max, window, port, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .workdir = "/",
	    .user = RELAY_USER,
	};
	struct hello h = {.e = e};
	int64_t deadline = sbx_monotonic_ms() + e->hello_ms;
	sbx_stream *s = NULL;
	int r;

	snprintf(frame_max, sizeof(frame_max), "%d", EGRESS_FRAME_MAX);
	snprintf(window, sizeof(window), "%d", EGRESS_STREAM_WINDOW);
	snprintf(port, sizeof(port), "%d", e->fixed_port ? RELAY_PORT : 0);
	e->port = 0;
	sbx_buf_release(&e->early);
	memset(&e->rd, 0, sizeof(e->rd));
	sbx_buf_reset(&e->diag);
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < STREAMS_MAX; i++)
		e->st[i] = (struct estream){.e = e, .up_fd = -1};
	pthread_mutex_unlock(&e->lock);
	r = sbx_exec_stream(e->engine, e->container, &spec, &s, err);
	if (r < 0) {
		*exec_failed = true;
		return r;
	}
	while (!h.got) {
		unsigned char buf[4096];
		int64_t left = deadline - sbx_monotonic_ms();
		int fd = 1;
		/* The deadline holds whatever the relay writes meanwhile (a read
		 * with data at hand does not look at the clock). */
		ssize_t n = left > 0 ? sbx_stream_read(s, buf, sizeof(buf), &fd, (int)left, NULL)
				     : -ETIMEDOUT;

		if (n > 0 && fd == 2) {
			diag_keep(e, buf, (size_t)n);
			continue;
		}
		if (n > 0) {
			/* The hello is the first frame: the rest is kept for the pump. */
			r = egress_reader_feed(&e->rd, buf, (size_t)n, on_hello, &h, NULL, 0);
			if (r >= 0)
				continue;
			n = -EPROTO;
		}
		sbx_stream_free(s);
		if (n != -ETIMEDOUT && e->diag.data && strstr(e->diag.data, "port-in-use"))
			return sbx_error_set(
			    err, -EADDRINUSE,
			    "the egress relay cannot start in sandbox %s: port %d of its loopback "
			    "is taken by a process in the sandbox (with sandbox.network = none the "
			    "relay listens there, and HTTP_PROXY and PIP_INDEX_URL point to it); "
			    "stop that process, or create a new sandbox",
			    e->sid, RELAY_PORT);
		return sbx_error_set(err, n == -ETIMEDOUT ? -ETIMEDOUT : -EPIPE,
				     "the package relay did not start in sandbox %s%s%.*s", e->sid,
				     e->diag.len ? ": " : "", (int)e->diag.len,
				     e->diag.data ? e->diag.data : "");
	}
	if (e->fixed_port && e->port != RELAY_PORT) {
		sbx_stream_free(s);
		return sbx_error_set(err, -EPROTO,
				     "the egress relay in sandbox %s listens on port %d, not %d",
				     e->sid, e->port, RELAY_PORT);
	}
	e->stream = s;
	return 0;
}

struct sbx_egress *sbx_egress_new(const struct sbx_egress_config *c, struct sbx_error *err)
{
	struct sbx_egress *e = calloc(1, sizeof(*e));
	char why[256];

	if (!e) {
		sbx_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	if (egress_policy_init(&e->pol, c->s, why, sizeof(why)) < 0) {
		sbx_error_set(err, -EINVAL, "%s", why);
		free(e);
		return NULL;
	}
	/* its tenant's list */
	if (egress_policy_set_tenant(&e->pol, c->owner, c->lookup, c->lookup_ud) < 0) {
		sbx_error_set(err, -ENOMEM, "out of memory");
		egress_policy_release(&e->pol);
		free(e);
		return NULL;
	}
	if (pipe2(e->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		sbx_error_set(err, -errno, "cannot make a pipe: %s", strerror(errno));
		egress_policy_release(&e->pol);
		free(e);
		return NULL;
	}
	e->conns_max = c->s->sandbox.egress_connections;
	e->conns_per_tenant = c->s->sandbox.egress_connections_per_tenant;
	e->tunnel_life_ms = c->s->sandbox.egress_tunnel_lifetime_ms;
	e->hello_ms = c->s->sandbox.egress_hello_timeout_ms;
	e->head_ms = c->s->sandbox.egress_head_timeout_ms;
	e->write_ms = c->s->sandbox.egress_write_timeout_ms;
	e->low_speed_ms = c->s->sandbox.egress_low_speed_time_ms;
	e->page_ms = c->s->sandbox.egress_page_timeout_ms;
	e->fixed_port = sbx_egress_fixed_port(c->s);
	e->engine = c->engine;
	e->sid = strdup(c->sandbox_id);
	e->owner = strdup(c->owner ? c->owner : "");
	e->container = strdup(c->container);
	if (!e->sid || !e->owner || !e->container) {
		sbx_error_set(err, -ENOMEM, "out of memory");
		free(e->sid);
		free(e->owner);
		free(e->container);
		close(e->wake[0]);
		close(e->wake[1]);
		egress_policy_release(&e->pol);
		free(e);
		return NULL;
	}
	pthread_mutex_init(&e->start_lock, NULL);
	pthread_mutex_init(&e->lock, NULL);
	sbx_cond_init_monotonic(&e->cond);
	return e;
}

/* Under e->lock: the relay's end of the stream is closed (killed from
 * inside, say) though the pump has not seen it yet: a call that follows at
 * once must not find it "running". One poll(2), no read. */
static bool hung_up_locked(struct sbx_egress *e)
{
	struct pollfd p;

	if (!e->running || !e->stream)
		return false;
	p = (struct pollfd){.fd = sbx_stream_fd(e->stream), .events = POLLRDHUP};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Stops the pump and joins it (without e->lock): what the relay sent
 * before it went is dropped with it. */
static void stop_pump(struct sbx_egress *e)
{
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	if (e->stream) /* unblocks a write to a relay that does not read */
		shutdown(sbx_stream_fd(e->stream), SHUT_RDWR);
	wake(e);
	pthread_mutex_unlock(&e->lock);
	if (e->joinable) {
		pthread_join(e->pump, NULL);
		e->joinable = false;
	}
}

int sbx_egress_ensure(struct sbx_egress *e, int *ret_port, bool *exec_failed, struct sbx_error *err)
{
	bool failed_exec = false;
	int r = 0;

	pthread_mutex_lock(&e->start_lock);
	pthread_mutex_lock(&e->lock);
	bool running = e->running, hung_up = hung_up_locked(e);
	pthread_mutex_unlock(&e->lock);
	if (hung_up) {
		stop_pump(e);
		running = false;
	}
	if (!running) {
		if (e->joinable) {
			pthread_join(e->pump, NULL);
			e->joinable = false;
		}
		r = start_relay(e, &failed_exec, err);
		if (r >= 0) {
			e->stop = false;
			e->running = true;
			e->stats.relays++;
			r = -pthread_create(&e->pump, NULL, pump_main, e);
			if (r < 0) {
				e->running = false;
				e->stream = sbx_stream_free(e->stream);
				sbx_error_set(err, r, "cannot start the package relay's thread");
			} else {
				e->joinable = true;
			}
		}
	}
	if (r >= 0)
		*ret_port = e->port;
	pthread_mutex_unlock(&e->start_lock);
	if (exec_failed)
		*exec_failed = failed_exec;
	return r;
}

bool sbx_egress_running(struct sbx_egress *e)
{
	bool ok;

	pthread_mutex_lock(&e->lock);
	ok = e->running && !hung_up_locked(e);
	pthread_mutex_unlock(&e->lock);
	return ok;
}

void sbx_egress_free(struct sbx_egress *e, bool container_stays)
{
	bool running;

	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	running = e->running;
	pthread_mutex_unlock(&e->lock);
	stop_pump(e);
	/* Closing its stream does not always end the relay (Podman's conmon),
	 * and one left running would hold RELAY_PORT. */
	if (running && container_stays)
		kill_relay(e);
	sbx_stream_free(e->stream);
	egress_policy_release(&e->pol);
	sbx_buf_release(&e->diag);
	sbx_buf_release(&e->ctl);
	sbx_buf_release(&e->early);
	free(e->sid);
	free(e->owner);
	free(e->container);
	close(e->wake[0]);
	close(e->wake[1]);
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->lock);
	pthread_mutex_destroy(&e->start_lock);
	free(e);
}

void sbx_egress_bytes(struct sbx_egress *e, uint64_t *ret_in, uint64_t *ret_out)
{
	pthread_mutex_lock(&e->lock);
	*ret_in = e->stats.bytes_in;
	*ret_out = e->stats.bytes_out;
	pthread_mutex_unlock(&e->lock);
}

void sbx_egress_stats(struct sbx_egress *e, struct sbx_egress_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	*ret = e->stats;
	ret->running = e->running;
	ret->port = e->running ? e->port : 0;
	ret->pid = e->running ? e->pid : 0;
	for (size_t i = 0; i < STREAMS_MAX; i++)
		ret->open += e->st[i].state != S_FREE;
	pthread_mutex_unlock(&e->lock);
}

/* The proxy environment at PORT, NULL-terminated and owned. */
static int proxy_env(const struct egress_policy *pol, int port, char ***ret_env,
		     struct sbx_error *err)
{
	char **env = calloc(9, sizeof(*env));
	int k = 0;

	if (!env)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (asprintf(&env[k++], "PIP_INDEX_URL=http://127.0.0.1:%d%s", port, pol->index_path) < 0 ||
	    asprintf(&env[k++], "HTTP_PROXY=http://127.0.0.1:%d", port) < 0 ||
	    asprintf(&env[k++], "HTTPS_PROXY=http://127.0.0.1:%d", port) < 0 ||
	    asprintf(&env[k++], "http_proxy=http://127.0.0.1:%d", port) < 0 ||
	    asprintf(&env[k++], "https_proxy=http://127.0.0.1:%d", port) < 0 ||
	    !(env[k++] = strdup("NO_PROXY=127.0.0.1,localhost")) ||
	    !(env[k++] = strdup("no_proxy=127.0.0.1,localhost")) ||
	    !(env[k++] = strdup("PIP_NO_INPUT=1"))) {
		env[k - 1] = NULL;
		sbx_strv_free(env);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_env = env;
	return 0;
}

int sbx_egress_pip_env(const struct sbx_egress *e, int port, char ***ret_env, struct sbx_error *err)
{
	return proxy_env(&e->pol, port, ret_env, err);
}

int sbx_egress_container_env(const struct sbx_settings *s, char ***ret_env, struct sbx_error *err)
{
	struct egress_policy pol;
	char why[256];
	int r;

	*ret_env = NULL;
	if (!sbx_egress_fixed_port(s))
		return 0;
	if (egress_policy_init(&pol, s, why, sizeof(why)) < 0)
		return sbx_error_set(err, -EINVAL, "%s", why);
	r = proxy_env(&pol, RELAY_PORT, ret_env, err);
	egress_policy_release(&pol);
	return r;
}
