/* SPDX-License-Identifier: MIT */
/* A minimal TAP producer for automake's tap-driver.sh. Header-only. */
#ifndef SBX_TAP_H
#define SBX_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

static inline void tap_plan(int n)
{
	printf("1..%d\n", n);
	fflush(stdout);
}

static inline int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...)
{
	va_list ap;
	tap_n++;
	printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!cond)
		tap_failed++;
	return cond;
}

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
	va_list ap;
	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static inline void tap_skip(int n, const char *why)
{
	for (int i = 0; i < n; i++)
		printf("ok %d # SKIP %s\n", ++tap_n, why);
	fflush(stdout);
}

/* Abandon the whole test program (TAP "Bail out!" stops the harness run). */
static inline void tap_bail(const char *why)
{
	printf("Bail out! %s\n", why);
	fflush(stdout);
	exit(1);
}

/* Print the plan at the end (when the count is not known up front). */
static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	fflush(stdout);
	return tap_failed ? 1 : 0;
}

#define tap_is_int(a, b, ...)                                                                      \
	do {                                                                                       \
		long long _a = (a), _b = (b);                                                      \
		if (!tap_ok(_a == _b, __VA_ARGS__))                                                \
			tap_diag("  got %lld, expected %lld", _a, _b);                             \
	} while (0)

#define tap_is_str(a, b, ...)                                                                      \
	do {                                                                                       \
		const char *_a = (a), *_b = (b);                                                   \
		if (!tap_ok(_a && _b && strcmp(_a, _b) == 0, __VA_ARGS__))                         \
			tap_diag("  got \"%s\", expected \"%s\"", _a ? _a : "(null)",              \
				 _b ? _b : "(null)");                                              \
	} while (0)

#endif
