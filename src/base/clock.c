/* SPDX-License-Identifier: MIT */
/* The monotonic clock in milliseconds and condition variables on it. */
#include <errno.h>
#include <time.h>

#include "sbx/clock.h"

int64_t sbx_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sbx_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

int sbx_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t at_ms)
{
	struct timespec ts;

	if (at_ms <= sbx_monotonic_ms())
		return ETIMEDOUT;
	ts.tv_sec = (time_t)(at_ms / 1000);
	ts.tv_nsec = (long)(at_ms % 1000) * 1000000L;
	return pthread_cond_timedwait(cond, lock, &ts);
}

double sbx_seconds_since(const struct timespec *ts)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - ts->tv_sec) + (double)(now.tv_nsec - ts->tv_nsec) / 1e9;
}
