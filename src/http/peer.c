/* SPDX-License-Identifier: MIT */
/*
 * Client addresses as the per-client limits count them (struct sbx_peer):
 * an IPv4 address, or the /64 of an IPv6 one; as text for the logs; a hash
 * for tables by address.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "http-internal.h"

void sbx_peer_of(const struct sockaddr *addr, struct sbx_peer *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (addr && addr->sa_family == AF_INET) {
		memcpy(ret->b, &((const struct sockaddr_in *)(const void *)addr)->sin_addr, 4);
	} else if (addr && addr->sa_family == AF_INET6) {
		const struct in6_addr *a =
		    &((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(ret->b, a->s6_addr + 12, 4);
		} else {
			/* The /64, marked apart from any IPv4 address. */
			memcpy(ret->b, a->s6_addr, 8);
			ret->b[15] = 6;
		}
	}
}

void sbx_client_text(const struct sockaddr *addr, char *buf, size_t size)
{
	const void *a = NULL;
	int family = AF_INET;

	if (addr && addr->sa_family == AF_INET) {
		a = &((const struct sockaddr_in *)(const void *)addr)->sin_addr;
	} else if (addr && addr->sa_family == AF_INET6) {
		const struct in6_addr *a6 =
		    &((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a6)) {
			a = a6->s6_addr + 12;
		} else {
			a = a6;
			family = AF_INET6;
		}
	}
	if (!a || !inet_ntop(family, a, buf, (socklen_t)size))
		buf[0] = '\0';
}

size_t sbx_peer_hash(const struct sbx_peer *p)
{
	size_t x = 0;

	for (size_t i = 0; i < sizeof(p->b); i++)
		x = x * 131 + p->b[i];
	return x;
}
