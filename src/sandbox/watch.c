/* SPDX-License-Identifier: MIT */
/*
 * Following the engine: one thread per manager reads the engine's events
 * stream (sbx_engine_events) for the containers of this instance and keeps
 * the records and the pool true to what the engine did behind our back.
 *
 * - A pooled container that dies or is removed leaves the pool at once (and
 *   is removed); the refill thread makes a new one.
 * - A sandbox whose container dies (killed from outside, the OOM killer, its
 *   main process ended) or is removed is marked dead with the reason
 *   (sbx_sandbox_died_locked): list_sandboxes shows it and calls on it say
 *   so. Removals the server makes itself are not deaths: those records are
 *   marked ended (or gone from the pool) before the container goes.
 * - When the stream opens (at start and after every reconnect) the thread
 *   catches up on what it missed: one list of the instance's containers;
 *   a sandbox whose container is missing or stopped is dead ("while the
 *   server was not following the engine"), and the pool is checked before
 *   anything in it is handed out again (m->engine_epoch, pool.c).
 * - When the stream breaks (the engine stopped, restarted or is unreachable)
 *   m->engine_followed is false, so the pool hands nothing out, and the
 *   thread reconnects: after 0.25 s, doubling up to 5 s while it fails.
 *
 * A backend without events (-ENOTSUP) ends the thread at once; the pool
 * then relies on its periodic check, as before. Engine calls are never made
 * with m->lock held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/worker.h"

#define RETRY_MIN_MS 250
#define RETRY_MAX_MS 5000
/* A stream that stayed open this long ended as streams do: the next
 * reconnection is at once again (one that opens and ends at once, a node
 * that accepts and closes, backs off). */
#define STABLE_MS 10000

struct sbx_watch {
	struct sbx_worker worker; /* with m->lock; stopping read by the stream's poll */
	unsigned failures;	  /* streams in a row that did not stay open STABLE_MS */
	int64_t opened_ms;	  /* when the current stream opened, 0 before */
	bool lost;		  /* the stream broke and has not opened since (logged) */
};

static bool stopped(void *userdata)
{
	sbx_manager *m = userdata;
	return sbx_worker_stopping(&m->watch->worker);
}

/* Under m->lock: the ready record whose container is CONTAINER, or NULL. */
static sbx_sandbox *find_container_locked(sbx_manager *m, const char *container)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->table[i]->ready && m->table[i]->container &&
		    strcmp(m->table[i]->container, container) == 0)
			return m->table[i];
	return NULL;
}

/* A pooled container that died or went: out of the pool; removed from the
 * engine unless it is gone already (later, if the engine cannot now). True
 * if it was one. */
static bool pool_drop(sbx_manager *m, const char *container, bool gone)
{
	struct sbx_pool_entry *e;

	pthread_mutex_lock(&m->lock);
	e = sbx_pool_unlink_locked(m, container);
	pthread_mutex_unlock(&m->lock);
	if (e)
		sbx_pool_discard(m, e, gone);
	return e != NULL;
}

/* SB's container stopped or went: ask the engine how (ENOENT: removed). */
static void learn_death(sbx_manager *m, sbx_sandbox *sb, int exit_code, bool blind)
{
	struct sbx_container_info ci = {0};
	enum sbx_death d = SBX_DEATH_EXITED;
	int code = exit_code;
	uint64_t run;
	bool news;
	int r;

	pthread_mutex_lock(&m->lock);
	run = sbx_sandbox_run_locked(sb);
	pthread_mutex_unlock(&m->lock);
	r = sbx_container_inspect(m->engine, sb->container, &ci, NULL);
	if (r == -ENOENT)
		d = SBX_DEATH_REMOVED;
	else if (exit_code > 128 && exit_code < 128 + 65)
		d = SBX_DEATH_KILLED, code = exit_code - 128;
	pthread_mutex_lock(&m->lock);
	if (r >= 0)
		news = !ci.running && sbx_sandbox_run_locked(sb) == run &&
		       sbx_sandbox_died_of_locked(m, sb, &ci, blind);
	else
		news = sbx_sandbox_died_locked(m, sb, d, code, blind);
	pthread_mutex_unlock(&m->lock);
	sbx_container_info_release(&ci);
	if (news)
		sbx_sandbox_log_death(m, sb);
}

static void on_gone(sbx_manager *m, const char *container, bool removed, int exit_code)
{
	sbx_sandbox *sb;
	bool news = false;

	if (pool_drop(m, container, removed))
		return;
	pthread_mutex_lock(&m->lock);
	sb = find_container_locked(m, container);
	if (sb && (sb->end != SBX_END_NONE || (sb->death != SBX_DEATH_NONE && !removed)))
		sb = NULL; /* being removed by us, or known dead */
	sb = sbx_sandbox_ref(sb);
	if (sb && removed)
		news = sbx_sandbox_died_locked(m, sb, SBX_DEATH_REMOVED, -1, false);
	pthread_mutex_unlock(&m->lock);
	if (news)
		sbx_sandbox_log_death(m, sb);
	if (sb && !removed)
		learn_death(m, sb, exit_code, false);
	sbx_sandbox_unref(sb);
}

/* The stream is open: catch up on what happened while it was not. */
static int catch_up(sbx_manager *m)
{
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, m->instance}};
	struct sbx_container_summary *cs = NULL;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox **seen = NULL;
	size_t n_cs = 0, n = 0;
	int r;

	/* The records ready before the list: their containers are in it unless
	 * they stopped or went. */
	pthread_mutex_lock(&m->lock);
	seen = calloc(m->n + 1, sizeof(*seen));
	for (size_t i = 0; seen && i < m->n; i++)
		if (m->table[i]->ready && m->table[i]->end == SBX_END_NONE &&
		    m->table[i]->death == SBX_DEATH_NONE && m->table[i]->container)
			seen[n++] = sbx_sandbox_ref(m->table[i]);
	pthread_mutex_unlock(&m->lock);
	if (!seen)
		return -ENOMEM;
	r = sbx_container_list(m->engine, want, SBX_ARRAY_SIZE(want), &cs, &n_cs, &err);
	if (r >= 0) {
		pthread_mutex_lock(&m->lock);
		m->engine_followed = true;
		m->engine_epoch++;
		sbx_pool_recheck_locked(m);
		pthread_mutex_unlock(&m->lock);
		if (m->watch->lost)
			sbx_log("following the engine's events again");
		m->watch->lost = false;
	}
	for (size_t i = 0; r >= 0 && i < n; i++) {
		const struct sbx_container_summary *c =
		    sbx_summary_find(cs, n_cs, seen[i]->container);
		bool awake;

		pthread_mutex_lock(&m->lock);
		awake = seen[i]->sleep == SBX_SLEEP_AWAKE;
		pthread_mutex_unlock(&m->lock);
		/* A sleeping one's container is stopped: only its absence is news. */
		if (!c || (!c->running && awake))
			learn_death(m, seen[i], -1, true);
	}
	sbx_container_list_free(cs, n_cs);
	for (size_t i = 0; i < n; i++)
		sbx_sandbox_unref(seen[i]);
	free(seen);
	return r;
}

static int on_event(void *userdata, const struct sbx_engine_event *ev)
{
	sbx_manager *m = userdata;

	switch (ev->kind) {
	case SBX_EVENT_OPEN:
		m->watch->opened_ms = sbx_monotonic_ms();
		/* A failed catch-up ends the stream: the next one tries again. */
		return catch_up(m);
	case SBX_EVENT_DIE:
		on_gone(m, ev->container, false, ev->exit_code);
		break;
	case SBX_EVENT_DESTROY:
		on_gone(m, ev->container, true, -1);
		break;
	case SBX_EVENT_START:
	case SBX_EVENT_OOM: /* a die follows, and inspect tells OOMKilled */
	case SBX_EVENT_KILL:
		break;
	}
	return 0;
}

static void *watch_main(void *arg)
{
	sbx_manager *m = arg;
	struct sbx_watch *w = m->watch;
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, m->instance}};
	struct sbx_events_spec spec = {
	    .labels = want,
	    .n_labels = SBX_ARRAY_SIZE(want),
	    .on_event = on_event,
	    .stopped = stopped,
	    .userdata = m,
	};

	while (!stopped(m)) {
		struct sbx_error err = SBX_ERROR_INIT;
		int64_t ms = RETRY_MIN_MS;
		int r = sbx_engine_events(m->engine, &spec, &err);

		if (w->opened_ms && sbx_monotonic_ms() - w->opened_ms >= STABLE_MS)
			w->failures = 0;
		w->opened_ms = 0;

		if (r != -ENOTSUP && !w->lost && !stopped(m)) {
			sbx_log_warn(
			    "lost the engine's events stream (%s): no pooled sandbox is handed "
			    "out until it is back; reconnecting",
			    err.msg[0] ? err.msg : strerror(-r));
			w->lost = true;
		}
		pthread_mutex_lock(&m->lock);
		if (m->engine_followed) {
			m->engine_followed = false;
			m->engine_epoch++;
		}
		if (r == -ENOTSUP) {
			m->watching = false; /* the pool trusts its own checks */
			pthread_mutex_unlock(&m->lock);
			break;
		}
		for (unsigned i = 0; i < w->failures && ms < RETRY_MAX_MS; i++)
			ms *= 2;
		w->failures++;
		if (!stopped(m))
			sbx_cond_wait_until(&w->worker.wake, &m->lock,
					    sbx_monotonic_ms() +
						(ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS));
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

int sbx_watch_start(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_watch *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	m->watch = w;
	pthread_mutex_lock(&m->lock);
	m->watching = true;
	pthread_mutex_unlock(&m->lock);
	r = sbx_worker_start(&w->worker, watch_main, m);
	if (r < 0) {
		pthread_mutex_lock(&m->lock);
		m->watching = false;
		pthread_mutex_unlock(&m->lock);
		free(w);
		m->watch = NULL;
		return sbx_error_set(err, r, "start the engine watch thread: %s", strerror(-r));
	}
	return 0;
}

void sbx_watch_stop(sbx_manager *m)
{
	struct sbx_watch *w = m->watch;

	if (!w)
		return;
	sbx_worker_stop(&w->worker, &m->lock);
	pthread_mutex_lock(&m->lock);
	m->watching = false;
	m->engine_followed = false;
	pthread_mutex_unlock(&m->lock);
	free(w);
	m->watch = NULL;
}
