/* SPDX-License-Identifier: MIT */
/*
 * TLS for tcp:// engine endpoints in the tests, from MCP_SANDBOX_TLS_DIR
 * (ca.pem, cert.pem, key.pem, as tools/provision-engines writes them for
 * the swarm node it reaches over TCP): every engine handle a test opens on
 * the swarm needs it, since its node handles are opened with it. Not for
 * other engines: TLS given, every tcp:// endpoint is spoken over it (a
 * test's plain loopback relay would not answer). Header only.
 */
#ifndef SBX_TEST_ENGINE_TLS_H
#define SBX_TEST_ENGINE_TLS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/engine.h"

/* The files for an engine of TYPE: NULL unless TYPE is "swarm" (or NULL:
 * any) and MCP_SANDBOX_TLS_DIR is set. Valid for the program's life. */
static inline const struct sbx_engine_tls *test_engine_tls(const char *type)
{
	static char ca[512], cert[512], key[512];
	static struct sbx_engine_tls tls;
	const char *dir = getenv("MCP_SANDBOX_TLS_DIR");

	if (!dir || !*dir || (type && strcmp(type, "swarm") != 0))
		return NULL;
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	tls = (struct sbx_engine_tls){.ca = ca, .cert = cert, .key = key};
	return &tls;
}

#endif
