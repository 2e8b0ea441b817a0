/* SPDX-License-Identifier: MIT */
/* What the C benches share: a clock in milliseconds and a sorted sample's
 * quantile. Header only (each bench is one program). */
#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The Q-quantile (0..1) of the N values of V, which it sorts; 0 when N is 0. */
static inline double quantile(double *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

#endif
