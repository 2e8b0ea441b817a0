/* SPDX-License-Identifier: MIT */
/* A background thread's start, wake and stop: see include/sbx/worker.h. */
#include <pthread.h>

#include "sbx/clock.h"
#include "sbx/worker.h"

int sbx_worker_start(struct sbx_worker *w, void *(*fn)(void *), void *arg)
{
	int r;

	sbx_cond_init_monotonic(&w->wake);
	w->stopping = false;
	r = -pthread_create(&w->thread, NULL, fn, arg);
	if (r < 0)
		pthread_cond_destroy(&w->wake);
	return r;
}

void sbx_worker_wake_locked(struct sbx_worker *w)
{
	pthread_cond_signal(&w->wake);
}

bool sbx_worker_stopping(struct sbx_worker *w)
{
	return __atomic_load_n(&w->stopping, __ATOMIC_ACQUIRE);
}

void sbx_worker_stop(struct sbx_worker *w, pthread_mutex_t *lock)
{
	pthread_mutex_lock(lock);
	__atomic_store_n(&w->stopping, true, __ATOMIC_RELEASE);
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->wake);
}
