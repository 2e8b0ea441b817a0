/* SPDX-License-Identifier: MIT */
/*
 * A background thread of its owner's: started once, woken through a
 * condition variable (on CLOCK_MONOTONIC, include/sbx/clock.h) that waits
 * with the owner's lock, and stopped (told, woken, joined) once. The owner
 * keeps the lock and whatever the thread works on; the thread waits on
 * WAKE with that lock (pthread_cond_wait, sbx_cond_wait_until) and ends when
 * sbx_worker_stopping says so.
 */
#ifndef SBX_WORKER_H
#define SBX_WORKER_H

#include <pthread.h>
#include <stdbool.h>

struct sbx_worker {
	pthread_t thread;
	pthread_cond_t wake; /* CLOCK_MONOTONIC, with the owner's lock */
	bool stopping;	     /* set under that lock; atomic: read without it too */
};

/* Makes W's condition and runs FN(ARG) on a new thread. 0, or a negative
 * errno with nothing left to undo (FN did not run). */
int sbx_worker_start(struct sbx_worker *w, void *(*fn)(void *), void *arg);
/* Under the owner's lock: wakes the thread (a waiting one returns). */
void sbx_worker_wake_locked(struct sbx_worker *w);
/* True once sbx_worker_stop began: the thread should end. Under the
 * owner's lock or not. */
bool sbx_worker_stopping(struct sbx_worker *w);
/* Without LOCK held: under LOCK (the owner's) marks W stopping and wakes
 * the thread, then joins it and destroys W's condition. */
void sbx_worker_stop(struct sbx_worker *w, pthread_mutex_t *lock);

#endif
