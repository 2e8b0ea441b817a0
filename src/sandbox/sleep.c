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
 * Not yet here (issue 28): the reaper putting idle sandboxes to sleep,
 * sandbox.sleep_lifetime, the wake notice, list_sandboxes' status,
 * /metrics, adoption of sleeping sandboxes after a restart.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "sandbox-internal.h"

/* Seconds the container's processes get to end at a stop. */
#define SLEEP_STOP_S 2

int sbx_sandbox_sleep(sbx_sandbox *sb, struct sbx_error *err)
{
	sbx_manager *m = sb->m;
	struct sbx_reader *readers;
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
	if (sbx_sandbox_busy_locked(sb)) {
		pthread_mutex_unlock(&m->lock);
		return sbx_error_set(err, -EBUSY,
				     "sandbox %s is running a call or an install: it cannot sleep",
				     sb->id);
	}
	sb->sleep = SBX_SLEEP_GOING;
	readers = sb->readers;
	sb->readers = NULL;
	sb->n_readers = 0;
	pthread_mutex_unlock(&m->lock);

	sbx_readers_free(readers);
	sbx_interp_sleep(sb);
	r = sbx_container_stop(m->engine, sb->container, SLEEP_STOP_S, err);

	pthread_mutex_lock(&m->lock);
	if (r >= 0) {
		sb->sleep = SBX_SLEEP_ASLEEP;
		sb->slept_at = time(NULL);
		sb->memory_bytes = 0;
	} else {
		sb->sleep = SBX_SLEEP_AWAKE;
	}
	pthread_cond_broadcast(&m->woke);
	pthread_mutex_unlock(&m->lock);
	return r;
}
