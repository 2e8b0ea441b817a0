/* SPDX-License-Identifier: MIT */
/*
 * A minimal TAP producer for automake's tap-driver.sh. Header-only; the
 * counters are weak globals, so the files of one test program (a test and its
 * fixture) share them.
 */
#ifndef SBX_TAP_H
#define SBX_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((weak)) int tap_n, tap_failed;

static inline void tap_plan(int n)
{
	printf("1..%d\n", n);
	fflush(stdout);
}

/* One check; the description is kept on one line (a newline in it, from an
 * error message say, would end the TAP line). */
static inline int tap_vok(int cond, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static inline int tap_vok(int cond, const char *fmt, va_list ap)
{
	char desc[1024];

	vsnprintf(desc, sizeof(desc), fmt, ap);
	for (char *c = desc; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	tap_n++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", tap_n, desc);
	fflush(stdout);
	if (!cond)
		tap_failed++;
	return cond;
}

static inline int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cond = tap_vok(cond, fmt, ap);
	va_end(ap);
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

/*
 * A call that should succeed, as a check: "ok" when R >= 0, else "not ok" and
 * a diagnostic with R (a negative errno) and MSG (the call's error message, or
 * NULL). Returns whether the call succeeded, so that the checks of its result
 * can follow in an if without an else: a failed call has already failed.
 */
static inline int tap_call(int r, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tap_call(int r, const char *msg, const char *fmt, ...)
{
	va_list ap;
	int ok;

	va_start(ap, fmt);
	ok = tap_vok(r >= 0, fmt, ap);
	va_end(ap);
	if (!ok)
		tap_diag("  the call failed: %d (%s)%s%s", r, strerror(-r), msg && *msg ? ": " : "",
			 msg && *msg ? msg : "");
	return ok;
}

/*
 * S as a short one-line ASCII excerpt for a description, in BUF: newlines
 * shown as \n, other control characters and non-ASCII bytes as ?, a '#'
 * escaped (it could start a TAP directive), cut with "..." when longer than
 * fits.
 */
static inline const char *tap_excerpt(char *buf, size_t size, const char *s)
{
	size_t n = 0;

	if (size < 8) {
		if (size)
			buf[0] = '\0';
		return buf;
	}
	if (!s)
		s = "(null)";
	/* Each character takes at most 2; room is left for "..." and the NUL. */
	for (; *s && n + 6 <= size; s++) {
		if (*s == '\n' || *s == '#') {
			buf[n++] = '\\';
			buf[n++] = *s == '\n' ? 'n' : '#';
		} else
			buf[n++] = (unsigned char)*s < ' ' || (unsigned char)*s > '~' ? '?' : *s;
	}
	if (*s) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
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
