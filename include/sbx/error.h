/* SPDX-License-Identifier: MIT */
/*
 * The one error convention of mcp-sandbox.
 *
 * A function that can fail returns an int: >= 0 on success, a negative errno
 * on failure. When the caller passes a struct sbx_error, it is filled with a
 * human-readable message and, for engine failures, the engine's HTTP status.
 * Context is prepended on the way up with sbx_error_prefix(), so the message
 * that reaches a user reads "create sandbox: engine: no such image: ...".
 * Library code never logs errors itself; the program's edge does, once.
 */
#ifndef SBX_ERROR_H
#define SBX_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#define SBX_ERROR_MSG_MAX 1024

struct sbx_error {
	int code;	 /* negative errno, 0 when unset */
	int http_status; /* engine HTTP status, 0 when not an HTTP failure */
	char msg[SBX_ERROR_MSG_MAX];
};

#define SBX_ERROR_INIT                                                                             \
	{                                                                                          \
		0, 0,                                                                              \
		{                                                                                  \
			0                                                                          \
		}                                                                                  \
	}

#if defined(__GNUC__)
#define SBX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SBX_PRINTF(a, b)
#endif

/* Fill err (may be NULL) and return code, which must be negative. */
int sbx_error_set(struct sbx_error *err, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
/* As sbx_error_set, also recording the engine's HTTP status. */
int sbx_error_set_http(struct sbx_error *err, int code, int http_status, const char *fmt, ...)
    SBX_PRINTF(4, 5);
/* Prepend "context: " to the message; returns err->code (or -EIO when unset). */
int sbx_error_prefix(struct sbx_error *err, const char *fmt, ...) SBX_PRINTF(2, 3);
/* Reset to the unset state. */
void sbx_error_clear(struct sbx_error *err);

/* Say why, return an error, for a check that reports into the caller's
 * buffer instead of a struct sbx_error: the formatted reason goes into WHY
 * (WHY_SIZE bytes; nothing when WHY is NULL or WHY_SIZE 0) and CODE, whatever
 * it is (a negative errno, an HTTP status, false), is returned unchanged. */
int sbx_why_set(char *why, size_t why_size, int code, const char *fmt, ...) SBX_PRINTF(4, 5);

/* ERR's message as a client may see it, into BUF (SIZE bytes): a failure
 * to reach the container engine names the host's engine socket or address
 * (backends/rest.c: "engine not reachable at unix:///...", "engine at ...
 * did not answer in time", "engine request to ... failed", "engine URL
 * '...'"), which is the server's business. From the first such phrase on
 * the message becomes a plain sentence ("the container engine is not
 * reachable"); the context before it stays. True when the text differs from
 * ERR's (the edge then logs ERR's message on stderr for the operator). The
 * one place the split is made: the tools' errors (sbx_tool_fail_err) and
 * GET /ready use it. */
bool sbx_error_public(const struct sbx_error *err, char *buf, size_t size);

#endif
