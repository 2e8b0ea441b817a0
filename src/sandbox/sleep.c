/* SPDX-License-Identifier: MIT */
/*
 * A sandbox's sleep: its container stopped on the engine (its writable
 * layer, /app/results and installed packages kept), its interpreter and
 * idle file readers ended; the next call wakes it (sbx_sandbox_begin_woke
 * marks it WAKING and starts the container).
 *
 * The state (sb->sleep, under m->lock) is set before the engine is asked,
 * so that the container's stop, seen in the engine's events or by a call,
 * is not taken for a death (sbx_sandbox_died_locked: only a removal is one
 * while the sandbox is not awake). Calls that arrive while it is put to
 * sleep or woken wait on m->woke; one call wakes it (calls.c, below this
 * file: a call's begin).
 *
 * The reaper puts a sandbox to sleep at sandbox.idle_timeout
 * (reaper.c). The container's name carries the mark of its sleep
 * (sbx_container_name: set before the stop, taken off after the start), so
 * that a restarted server adopts it asleep (manager.c) and a container
 * stopped by anyone else dead. A later step that keeps the interpreter's
 * memory too (a checkpoint through the engine, CRIU) goes here, between
 * the readers' end and the stop, and its restore in the wake.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/metrics.h"

/* Seconds the container's processes get to end at a stop. */
#define SLEEP_STOP_S 2

/* Whether SB's container is stopped, as the engine says now. */
static bool stopped(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_container_info ci = {0};
	bool r = sbx_container_inspect(m->engine, sb->container, &ci, NULL) >= 0 && !ci.running;

	sbx_container_info_release(&ci);
	return r;
}

int sbx_sandbox_sleep(sbx_sandbox *sb, struct sbx_error *err)
{
	return sbx_sandbox_sleep_idle(sb, INT64_MIN, err);
}

int sbx_sandbox_sleep_idle(sbx_sandbox *sb, int64_t used_ms, struct sbx_error *err)
{
	sbx_manager *m = sb->m;
	struct sbx_reader *readers;
	time_t at;
	int r;

	if (!sbx_engine_restart_keeps(m->engine))
		return sbx_error_set(err, -ENOTSUP,
				     "sandbox %s cannot sleep on engine %s: a container stopped "
				     "there is not started again with its files",
				     sb->id, sbx_engine_name(m->engine));
	pthread_mutex_lock(&m->lock);
	if (sb->end != SBX_END_NONE || sb->removed || sb->death != SBX_DEATH_NONE || !sb->ready ||
	    !sb->container) {
		pthread_mutex_unlock(&m->lock);
		return sbx_error_set(err, -ESRCH, "sandbox %s does not run: it cannot sleep",
				     sb->id);
	}
	if (sb->sleep != SBX_SLEEP_AWAKE) {
		pthread_mutex_unlock(&m->lock);
		return 0;
	}
	if (sbx_sandbox_busy_locked(sb) || (used_ms != INT64_MIN && sb->used_ms != used_ms)) {
		pthread_mutex_unlock(&m->lock);
		return sbx_error_set(err, -EBUSY,
				     "sandbox %s is running a call or an install: it cannot sleep",
				     sb->id);
	}
	sb->sleep = SBX_SLEEP_GOING;
	sb->slept_at = at = time(NULL);
	readers = sb->readers;
	sb->readers = NULL;
	sb->n_readers = 0;
	pthread_mutex_unlock(&m->lock);

	sbx_readers_free(readers);
	sbx_interp_sleep(sb);
	/* What it used up to now is counted before its counts end. */
	sbx_usage_sample(m, sb);
	/* Marked asleep on the engine first, then stopped: a server that
	 * restarts adopts a stopped container so marked as asleep, any other
	 * stopped one as dead (manager.c). A mark without the stop (the stop
	 * failed, or the server died between) is taken off again. */
	r = sbx_sandbox_mark_asleep(sb, at, err);
	if (r >= 0) {
		r = sbx_container_stop(m->engine, sb->container, SLEEP_STOP_S, err);
		if (r < 0 && r != -ENOENT && stopped(m, sb)) {
			/* The answer was lost (a timeout), not the stop. */
			sbx_error_clear(err);
			r = 0;
		} else if (r < 0) {
			sbx_sandbox_mark_asleep(sb, 0, NULL);
		}
	}

	pthread_mutex_lock(&m->lock);
	if (r >= 0 && sb->death != SBX_DEATH_NONE) {
		/* Its container was removed from outside while it was stopped
		 * (a destroy event came meanwhile): dead, and awake as a
		 * sleeper whose container goes is (sbx_sandbox_died_locked). */
		sb->sleep = SBX_SLEEP_AWAKE;
		sb->slept_at = 0;
		r = sbx_error_set(err, -ESRCH, "its container was removed meanwhile");
	} else if (r >= 0) {
		sb->sleep = SBX_SLEEP_ASLEEP;
		sb->sleeps++;
		sb->sleep_failures = 0;
		sb->memory_bytes = 0;
	} else {
		sb->sleep = SBX_SLEEP_AWAKE;
		sb->slept_at = 0;
		sb->sleep_failures++;
		/* Gone behind the server's back: dead, and removed at its idle
		 * time like any dead one. */
		if (r == -ENOENT)
			sbx_sandbox_died_locked(m, sb, SBX_DEATH_REMOVED, -1, false);
	}
	pthread_cond_broadcast(&m->woke);
	pthread_mutex_unlock(&m->lock);
	sbx_metrics_sleep(r >= 0 ? "ok" : "error");
	if (r < 0)
		sbx_error_prefix(err, "put sandbox %s to sleep", sb->id);
	return r;
}
