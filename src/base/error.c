/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sbx/error.h"

static int error_vset(struct sbx_error *err, int code, int http_status, const char *fmt, va_list ap)
{
	if (code >= 0)
		code = -EIO;
	if (err) {
		err->code = code;
		err->http_status = http_status;
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	}
	return code;
}

int sbx_error_set(struct sbx_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	code = error_vset(err, code, 0, fmt, ap);
	va_end(ap);
	return code;
}

int sbx_error_set_http(struct sbx_error *err, int code, int http_status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	code = error_vset(err, code, http_status, fmt, ap);
	va_end(ap);
	return code;
}

int sbx_error_prefix(struct sbx_error *err, const char *fmt, ...)
{
	char prefix[256], old[SBX_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return -EIO;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* Keep the prefix whole and cut the old message if it must. */
	size_t n = strlen(prefix);
	if (n > sizeof(err->msg) - 3)
		n = sizeof(err->msg) - 3;
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	size_t rest = sizeof(err->msg) - n - 3, olen = strnlen(old, sizeof(old) - 1);
	if (olen > rest)
		olen = rest;
	memcpy(err->msg + n + 2, old, olen);
	err->msg[n + 2 + olen] = '\0';
	return err->code < 0 ? err->code : -EIO;
}

void sbx_error_clear(struct sbx_error *err)
{
	if (err) {
		err->code = 0;
		err->http_status = 0;
		err->msg[0] = '\0';
	}
}

/* The engine's transport failures (backends/rest.c), each from its phrase
 * on: what follows names the socket path or the host and port. */
static const struct {
	const char *phrase;
	const char *says;
} engine_failures[] = {
    {"engine not reachable", "the container engine is not reachable"},
    {"TLS with the engine", "TLS with the container engine failed (engine.tls_ca, "
			    "engine.tls_cert, engine.tls_key: the server's log says more)"},
    {"engine at ", "the container engine did not answer in time"},
    {"engine request to ", "a request to the container engine failed"},
    {"engine URL '", "the container engine's address is not valid"},
};

/* Every engine endpoint left in BUF (a cluster node's, as an error's
 * "node ID (tcp://HOST:PORT)" names it; Go's "dial tcp HOST:PORT" in an
 * engine's own words) said as "an engine address": a client is not shown
 * where the engines are. True if there was one. */
static bool withhold_addresses(char *buf, size_t size)
{
	static const char *const marks[] = {"tcp://", "unix://", "dial tcp ", "dial unix "};
	static const char said[] = "an engine address";
	bool any = false;

	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++) {
		char *p;
		while ((p = strcasestr(buf, marks[k]))) {
			/* "dial tcp " keeps its words; what follows is the address. */
			size_t skip = marks[k][strlen(marks[k]) - 1] == ' ' ? strlen(marks[k]) : 0;
			size_t n, rest, room;

			p += skip;
			n = strcspn(p, " )\"',;");
			if (n == 0 && skip) { /* "dial tcp " with nothing after it */
				memmove(p - 1, p, strlen(p) + 1);
				continue;
			}
			rest = strlen(p + n);
			room = size - (size_t)(p - buf) - 1; /* for the words and the rest */
			if (room < sizeof(said) - 1) {	     /* not even the words: cut here */
				*p = '\0';
				any = true;
				break;
			}
			if (rest > room - (sizeof(said) - 1)) /* the tail cut to fit */
				rest = room - (sizeof(said) - 1);
			memmove(p + sizeof(said) - 1, p + n, rest);
			memcpy(p, said, sizeof(said) - 1);
			p[sizeof(said) - 1 + rest] = '\0';
			any = true;
			if (skip) /* "dial tcp an engine address": its words too */
				memmove(p - skip, p, strlen(p) + 1);
		}
	}
	return any;
}

bool sbx_error_public(const struct sbx_error *err, char *buf, size_t size)
{
	const char *msg = err && err->msg[0] ? err->msg : "", *at = NULL, *says = NULL;

	if (!size)
		return false;
	for (size_t i = 0; i < sizeof(engine_failures) / sizeof(engine_failures[0]); i++) {
		const char *p = strstr(msg, engine_failures[i].phrase);
		if (p && (!at || p < at)) {
			at = p;
			says = engine_failures[i].says;
		}
	}
	if (!at) {
		snprintf(buf, size, "%s", msg);
		return withhold_addresses(buf, size);
	}
	snprintf(buf, size, "%.*s%s", (int)(at - msg), msg, says);
	withhold_addresses(buf, size);
	return true;
}

int sbx_why_set(char *why, size_t why_size, int code, const char *fmt, ...)
{
	va_list ap;

	if (why && why_size) {
		va_start(ap, fmt);
		vsnprintf(why, why_size, fmt, ap);
		va_end(ap);
	}
	return code;
}
