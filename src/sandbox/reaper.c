/* SPDX-License-Identifier: MIT */
/*
 * The reaper: one thread per manager (when sandbox.idle_timeout or
 * sandbox.max_lifetime is set) that removes the sandboxes whose time is up.
 *
 * A sandbox's deadline is the earlier of its last use plus idle_timeout
 * (on CLOCK_MONOTONIC: a change of the wall clock neither reaps early nor
 * spares) and its creation plus max_lifetime (on the wall clock: the
 * creation time comes from the container's labels, or the state folder, and
 * so survives a restart). A sandbox with a call running in it, or a package
 * install, is never reaped: it is skipped, and the end of the call (or the
 * install) wakes the reaper, which then finds the new deadline.
 *
 * Under m->lock the thread finds the first sandbox past its deadline, marks
 * it (end = SBX_END_IDLE or SBX_END_LIFETIME: from then on no call starts
 * in it, and sbx_sandbox_begin fails saying it expired), drops the lock and
 * removes it with sbx_sandbox_remove_marked, like delete_sandbox does; the
 * table of sandboxes gone lately then lets a later call say it expired. When
 * the engine cannot remove it, the sandbox stays usable and is tried again
 * RETRY_MS later. With nothing to do it sleeps until the nearest deadline,
 * or until woken (sbx_reaper_wake_locked: a sandbox was added, a call or an
 * install ended; sbx_reaper_stop).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/worker.h"

/* After a failed removal, the next try. */
#define RETRY_MS 30000

int64_t sbx_sandbox_deadline_locked(sbx_manager *m, const sbx_sandbox *sb, int64_t now_ms,
				    enum sbx_end *ret_why, time_t *ret_wall)
{
	int64_t idle = m->s->sandbox.idle_timeout_ms, life = m->s->sandbox.max_lifetime_ms;
	int64_t at = INT64_MAX, wall_ms = (int64_t)time(NULL) * 1000;
	time_t wall = 0;
	enum sbx_end why = SBX_END_NONE;

	if (idle > 0) {
		at = sb->used_ms + idle;
		wall = sb->last_used + (time_t)(idle / 1000);
		why = SBX_END_IDLE;
	}
	if (life > 0) {
		int64_t end_wall_ms = (int64_t)sb->created * 1000 + life;
		int64_t life_at = now_ms + (end_wall_ms - wall_ms);
		if (life_at < at) {
			at = life_at;
			wall = sb->created + (time_t)(life / 1000);
			why = SBX_END_LIFETIME;
		}
	}
	if (ret_why)
		*ret_why = why;
	if (ret_wall)
		*ret_wall = wall;
	return at;
}

static void *reaper_main(void *arg)
{
	sbx_manager *m = arg;
	struct sbx_reaper *rp = m->reaper;

	pthread_mutex_lock(&m->lock);
	while (!sbx_worker_stopping(&rp->worker)) {
		int64_t now = sbx_monotonic_ms(), next = INT64_MAX;
		sbx_sandbox *victim = NULL;
		enum sbx_end why = SBX_END_NONE;

		for (size_t i = 0; i < m->n && !victim; i++) {
			sbx_sandbox *sb = m->table[i];
			int64_t at;

			if (!sb->ready || sb->end != SBX_END_NONE || sbx_sandbox_busy_locked(sb))
				continue;
			if (sb->reap_retry_ms > now) {
				next = sb->reap_retry_ms < next ? sb->reap_retry_ms : next;
				continue;
			}
			at = sbx_sandbox_deadline_locked(m, sb, now, &why, NULL);
			if (at <= now)
				victim = sbx_sandbox_ref(sb);
			else if (at < next)
				next = at;
		}
		if (victim) {
			struct sbx_error err = SBX_ERROR_INIT;
			int r;

			victim->end = why;
			victim->end_at = time(NULL);
			pthread_mutex_unlock(&m->lock);
			r = sbx_sandbox_remove_marked(m, victim, &err);
			pthread_mutex_lock(&m->lock);
			if (r < 0)
				victim->reap_retry_ms = sbx_monotonic_ms() + RETRY_MS;
			pthread_mutex_unlock(&m->lock);
			sbx_sandbox_unref(victim);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		if (next == INT64_MAX)
			pthread_cond_wait(&rp->worker.wake, &m->lock);
		else
			sbx_cond_wait_until(&rp->worker.wake, &m->lock, next);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int sbx_reaper_start(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_reaper *rp;
	int r;

	if (m->s->sandbox.idle_timeout_ms <= 0 && m->s->sandbox.max_lifetime_ms <= 0)
		return 0;
	rp = calloc(1, sizeof(*rp));
	if (!rp)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	m->reaper = rp;
	r = sbx_worker_start(&rp->worker, reaper_main, m);
	if (r < 0) {
		free(rp);
		m->reaper = NULL;
		return sbx_error_set(err, r, "start the reaper thread: %s", strerror(-r));
	}
	return 0;
}

void sbx_reaper_stop(sbx_manager *m)
{
	struct sbx_reaper *rp = m->reaper;

	if (!rp)
		return;
	sbx_worker_stop(&rp->worker, &m->lock);
	free(rp);
	m->reaper = NULL;
}
