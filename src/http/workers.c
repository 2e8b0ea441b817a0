/* SPDX-License-Identifier: MIT */
/*
 * The worker pool (sbx_http_submit): detached threads with a larger stack
 * (SBX_HTTP_STACK) that take jobs off the server's queue, a tools/call on
 * either transport each, while the connection's thread waits. A thread is
 * started when no idle one is free for the job, SBX_HTTP_WORKERS_MAX jobs
 * at most in flight, and ends after SBX_HTTP_WORKER_IDLE_MS without one.
 */
#include <errno.h>
#include <pthread.h>

#include "http-internal.h"

static void *pool_thread(void *arg)
{
	struct sbx_http *h = arg;

	pthread_mutex_lock(&h->workers_lock);
	for (;;) {
		struct sbx_http_job *job;
		while (sbx_queue_empty(&h->jobq)) {
			int r;
			if (atomic_load(&h->stopping))
				goto out;
			h->idle++;
			r = sbx_cond_wait_until(&h->work_cond, &h->workers_lock,
						sbx_monotonic_ms() + SBX_HTTP_WORKER_IDLE_MS);
			h->idle--;
			if (r == ETIMEDOUT && sbx_queue_empty(&h->jobq))
				goto out;
		}
		job = sbx_queue_entry(sbx_queue_pop(&h->jobq), struct sbx_http_job, node);
		pthread_mutex_unlock(&h->workers_lock);
		job->fn(job);
		pthread_mutex_lock(&h->workers_lock);
		h->jobs--;
	}
out:
	h->threads--;
	pthread_cond_broadcast(&h->workers_cond);
	pthread_mutex_unlock(&h->workers_lock);
	return NULL;
}

/* Starts a detached thread with STACK bytes of stack. */
static int spawn(void *(*fn)(void *), void *arg, size_t stack)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, stack);
	r = -pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return r;
}

int sbx_http_submit(struct sbx_http *h, struct sbx_http_job *job)
{
	int r = 0;

	pthread_mutex_lock(&h->workers_lock);
	if (h->jobs >= SBX_HTTP_WORKERS_MAX || atomic_load(&h->stopping)) {
		r = -EBUSY;
	} else if ((size_t)h->idle <= h->jobq.count) {
		/* Every idle thread already has a job waiting for it. */
		r = spawn(pool_thread, h, SBX_HTTP_STACK);
		if (r == 0)
			h->threads++;
	}
	if (r == 0) {
		sbx_queue_push(&h->jobq, &job->node, 0);
		h->jobs++;
		pthread_cond_signal(&h->work_cond);
	}
	pthread_mutex_unlock(&h->workers_lock);
	return r;
}

void sbx_http_wait_workers(struct sbx_http *h)
{
	pthread_mutex_lock(&h->workers_lock);
	pthread_cond_broadcast(&h->work_cond);
	while (h->threads > 0)
		pthread_cond_wait(&h->workers_cond, &h->workers_lock);
	pthread_mutex_unlock(&h->workers_lock);
}
