/* SPDX-License-Identifier: MIT */
/*
 * The reaper: one thread per manager (when sandbox.idle_timeout or
 * sandbox.max_lifetime is set) that puts idle sandboxes to sleep and
 * removes the sandboxes whose time is up.
 *
 * A sandbox's life: running -> sleeping -> removed. Unused for
 * idle_timeout, a running sandbox is put to sleep (sleep.c: its container
 * stopped, its files kept; the next call wakes it); on an engine where a
 * stopped container is not started again with its files (Swarm:
 * sbx_engine_restart_keeps), and for a dead sandbox, it is removed then
 * instead, and so after SBX_SLEEP_TRIES failed sleeps in a row (an engine
 * that cannot stop or mark it). Asleep for sandbox.sleep_lifetime, it is
 * removed. Older than max_lifetime, any sandbox is removed.
 *
 * The idle time is on CLOCK_MONOTONIC (a change of the wall clock neither
 * reaps early nor spares); the creation time (from the container's labels,
 * or the state folder) and the time it fell asleep (from its container's
 * name, sleep.c) are on the wall clock, so they survive a restart. A
 * sandbox with a call running in it, or a package install, or being put to
 * sleep or woken, is never acted on: it is skipped, and the end of the call
 * (or the install) wakes the reaper, which then finds the new deadline.
 *
 * Under m->lock the thread finds the first sandbox past its deadline. To
 * put it to sleep it drops the lock and calls sbx_sandbox_sleep (which
 * gives way to a call that began meanwhile). To remove it, it marks it
 * (end = SBX_END_IDLE, SBX_END_SLEPT or SBX_END_LIFETIME: from then on no
 * call starts in it, and sbx_sandbox_begin fails saying it expired), drops
 * the lock and removes it with sbx_sandbox_remove_marked, like
 * delete_sandbox does; the table of sandboxes gone lately then lets a later
 * call say it expired. When the engine cannot stop or remove it, the
 * sandbox stays as it was and is tried again RETRY_MS later. With nothing
 * to do it waits until the nearest deadline, or until woken
 * (sbx_reaper_wake_locked: a sandbox was added, a call or an install
 * ended; sbx_reaper_stop).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/log.h"
#include "sbx/worker.h"

/* After a failed removal, the next try. */
#define RETRY_MS 30000

/* Under m->lock: whether SB, awake, goes to sleep at its idle time rather
 * than being removed. */
static bool sleeps_locked(sbx_manager *m, const sbx_sandbox *sb)
{
	return sbx_engine_restart_keeps(m->engine) && sb->death == SBX_DEATH_NONE &&
	       sb->container && sb->sleep_failures < SBX_SLEEP_TRIES;
}

/* NOW_MS plus the time from now to the wall-clock time AT_WALL_MS. */
static int64_t mono_of(int64_t now_ms, int64_t at_wall_ms)
{
	return now_ms + (at_wall_ms - (int64_t)time(NULL) * 1000);
}

int64_t sbx_sandbox_deadline_locked(sbx_manager *m, const sbx_sandbox *sb, int64_t now_ms,
				    enum sbx_end *ret_why, time_t *ret_wall)
{
	int64_t idle = m->s->sandbox.idle_timeout_ms, life = m->s->sandbox.max_lifetime_ms;
	int64_t slept = m->s->sandbox.sleep_lifetime_ms;
	int64_t at = INT64_MAX;
	time_t wall = 0;
	enum sbx_end why = SBX_END_NONE;

	if (sb->sleep == SBX_SLEEP_AWAKE && idle > 0) {
		at = sb->used_ms + idle;
		wall = sb->last_used + (time_t)(idle / 1000);
		why = sleeps_locked(m, sb) ? SBX_END_NONE : SBX_END_IDLE;
	} else if (sb->sleep == SBX_SLEEP_ASLEEP && slept > 0) {
		at = mono_of(now_ms, (int64_t)sb->slept_at * 1000 + slept);
		wall = sb->slept_at + (time_t)(slept / 1000);
		why = SBX_END_SLEPT;
	}
	if (life > 0 && (sb->sleep == SBX_SLEEP_AWAKE || sb->sleep == SBX_SLEEP_ASLEEP)) {
		int64_t life_at = mono_of(now_ms, (int64_t)sb->created * 1000 + life);
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

void sbx_sandbox_times_locked(sbx_manager *m, const sbx_sandbox *sb, time_t *ret_sleeps,
			      time_t *ret_expires)
{
	int64_t idle = m->s->sandbox.idle_timeout_ms, life = m->s->sandbox.max_lifetime_ms;
	int64_t slept = m->s->sandbox.sleep_lifetime_ms;
	time_t sleeps = 0, expires = 0;

	if (sb->sleep == SBX_SLEEP_AWAKE && idle > 0) {
		time_t idle_at = sb->last_used + (time_t)(idle / 1000);
		if (!sleeps_locked(m, sb)) {
			expires = idle_at;
		} else {
			sleeps = idle_at;
			if (slept > 0)
				expires = idle_at + (time_t)(slept / 1000);
		}
	} else if (sb->sleep != SBX_SLEEP_AWAKE && slept > 0) {
		expires = (sb->slept_at ? sb->slept_at : time(NULL)) + (time_t)(slept / 1000);
	}
	if (life > 0) {
		time_t life_at = sb->created + (time_t)(life / 1000);
		if (!expires || life_at < expires)
			expires = life_at;
		if (sleeps && life_at <= sleeps)
			sleeps = 0;
	}
	*ret_sleeps = sleeps;
	*ret_expires = expires;
}

static void *reaper_main(void *arg)
{
	struct sbx_reaper *rp = arg;
	sbx_manager *m = rp->m;

	pthread_mutex_lock(&m->lock);
	while (!sbx_worker_stopping(&rp->worker)) {
		int64_t now = sbx_monotonic_ms(), next = INT64_MAX;
		sbx_sandbox *victim = NULL;
		enum sbx_end why = SBX_END_NONE;

		for (size_t i = 0; i < m->n && !victim; i++) {
			sbx_sandbox *sb = m->table[i];
			int64_t at;

			if (!sb->ready || sb->end != SBX_END_NONE || sbx_sandbox_busy_locked(sb) ||
			    sb->sleep == SBX_SLEEP_GOING || sb->sleep == SBX_SLEEP_WAKING)
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
			bool dead = false;
			int r;

			if (why == SBX_END_NONE) {
				/* Idle, and it may sleep: unless used meanwhile. */
				int64_t used = victim->used_ms;
				pthread_mutex_unlock(&m->lock);
				r = sbx_sandbox_sleep_idle(victim, used, &err);
				/* Its container gone meanwhile: dead, it goes at once
				 * (the next turn), not at a retry. */
				pthread_mutex_lock(&m->lock);
				dead = victim->death != SBX_DEATH_NONE;
				pthread_mutex_unlock(&m->lock);
				if (r >= 0)
					sbx_log("sandbox %s (owner %s) was put to sleep: not "
						"used for %lld s (sandbox.idle_timeout)",
						victim->id, victim->owner,
						(long long)(m->s->sandbox.idle_timeout_ms / 1000));
				else if (r != -EBUSY && !dead) /* a call's end wakes the reaper */
					sbx_log_warn("sandbox %s: %s; tried again in %d s",
						     victim->id, err.msg, RETRY_MS / 1000);
			} else {
				victim->end = why;
				victim->end_at = time(NULL);
				pthread_mutex_unlock(&m->lock);
				r = sbx_sandbox_remove_marked(m, victim, &err);
			}
			pthread_mutex_lock(&m->lock);
			if (r < 0 && r != -EBUSY && !dead)
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
	if (m->s->sandbox.idle_timeout_ms > 0 && !sbx_engine_restart_keeps(m->engine))
		sbx_log("engine %s: an idle sandbox is removed at sandbox.idle_timeout, not put to "
			"sleep: a container stopped there is not started again with its files",
			sbx_engine_name(m->engine));
	rp = calloc(1, sizeof(*rp));
	if (!rp)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	rp->m = m;
	/* Under the lock its wakers read it with. */
	pthread_mutex_lock(&m->lock);
	m->reaper = rp;
	pthread_mutex_unlock(&m->lock);
	r = sbx_worker_start(&rp->worker, reaper_main, rp);
	if (r < 0) {
		pthread_mutex_lock(&m->lock);
		m->reaper = NULL;
		pthread_mutex_unlock(&m->lock);
		free(rp);
		return sbx_error_set(err, r, "start the reaper thread: %s", strerror(-r));
	}
	return 0;
}

void sbx_reaper_stop(sbx_manager *m)
{
	struct sbx_reaper *rp = m->reaper;

	if (!rp)
		return;
	/* Unhooked first, under the lock its wakers hold (calls, installs,
	 * the relay and the pool wake it): none reaches it once it is freed.
	 * Its thread holds its own pointer. */
	pthread_mutex_lock(&m->lock);
	m->reaper = NULL;
	pthread_mutex_unlock(&m->lock);
	sbx_worker_stop(&rp->worker, &m->lock);
	free(rp);
}
