/* SPDX-License-Identifier: MIT */
/*
 * The one clock for deadlines and timed waits: CLOCK_MONOTONIC, in
 * milliseconds, and condition variables that wait on it.
 */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (an arbitrary start; only differences mean anything). */
int64_t sbx_monotonic_ms(void);

/* Seconds on CLOCK_MONOTONIC since TS (a clock_gettime(CLOCK_MONOTONIC)). */
double sbx_seconds_since(const struct timespec *ts);

/* pthread_cond_init with CLOCK_MONOTONIC, the clock sbx_cond_wait_until uses. */
void sbx_cond_init_monotonic(pthread_cond_t *cond);

/* pthread_cond_timedwait on COND (made by sbx_cond_init_monotonic) until
 * AT_MS (sbx_monotonic_ms time): 0 when woken, ETIMEDOUT at once when AT_MS
 * has passed. */
int sbx_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t at_ms);

#endif
