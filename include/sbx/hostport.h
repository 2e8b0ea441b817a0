/* SPDX-License-Identifier: MIT */
/*
 * "HOST[:PORT]" as the egress allow-list (sandbox.egress_allow) and an HTTP
 * CONNECT target spell it: one parser for the setting's check, the list the
 * server matches and what a sandbox asks for. Pure, no allocation.
 */
#ifndef SBX_HOSTPORT_H
#define SBX_HOSTPORT_H

#include <stdbool.h>
#include <stddef.h>

/* Longest host name (RFC 1035); an IPv6 literal's text is shorter. */
#define SBX_HOST_MAX 253
/* Room for a parsed host: a wildcard's "*." and the NUL on top. */
#define SBX_HOST_BUF (SBX_HOST_MAX + 3)

enum {
	SBX_HOSTPORT_NEED_PORT = 1, /* ":PORT" is required (a CONNECT target) */
	SBX_HOSTPORT_WILDCARD = 2,  /* "*.example.com" is taken (an allow-list entry) */
};

/* Parses S[0..N): HOST is a DNS name (letters, digits, '-' inside labels of
 * 1..63, '.' between them, at most SBX_HOST_MAX; one trailing '.' dropped),
 * an IPv4 address, or "[IPv6]"; with SBX_HOSTPORT_WILDCARD it may start with
 * "*." (kept in RET_HOST). PORT is 1..65535 in decimal. Writes the host in
 * lower case without brackets to RET_HOST (SBX_HOST_BUF bytes) and the
 * port to *RET_PORT (0 when absent); 0, or -EINVAL with WHY (may be NULL)
 * saying what is wrong. */
int sbx_hostport_parse(const char *s, size_t n, unsigned flags, char *ret_host, int *ret_port,
		       char *why, size_t why_size);

/* Whether HOST (as sbx_hostport_parse writes it, no wildcard) is matched by
 * PATTERN (likewise, "*.example.com" matching any name under example.com but
 * not example.com itself). */
bool sbx_host_match(const char *pattern, const char *host);

#endif
