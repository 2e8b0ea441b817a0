/* SPDX-License-Identifier: MIT */
/*
 * The relay's worker threads, counted: WORKERS_MAX fetches and connects in
 * progress across all sandboxes. egress.c takes a slot before it starts a
 * worker (egress_upstream.c: fetch_main, connect_main), and the worker
 * gives it back with its last act. Below both, so neither calls the other
 * back.
 */
#include <pthread.h>
#include <stdbool.h>

#include "egress-pump.h"

/* Worker threads (fetches and connects in progress) of all sandboxes. */
#define WORKERS_MAX 256

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static int workers;

bool worker_take(void)
{
	bool ok;

	pthread_mutex_lock(&workers_lock);
	ok = workers < WORKERS_MAX;
	if (ok)
		workers++;
	pthread_mutex_unlock(&workers_lock);
	return ok;
}

void worker_give(void)
{
	pthread_mutex_lock(&workers_lock);
	workers--;
	pthread_mutex_unlock(&workers_lock);
}

/* The worker's last act: nothing of ST or E is touched after it. */
void worker_end(struct estream *st)
{
	struct sbx_egress *e = st->e;

	pthread_mutex_lock(&e->lock);
	st->out_eof = true;
	st->worker_done = true;
	pthread_cond_broadcast(&e->cond);
	wake(e);
	pthread_mutex_unlock(&e->lock);
	worker_give();
}
