/* SPDX-License-Identifier: MIT */
/*
 * What kind of address a connection goes to: the egress relay
 * (src/egress/egress_upstream.c) refuses to connect a sandbox, under a
 * name, to the server's own host, its private networks or a cloud's
 * metadata service. Pure, no allocation, no name lookup.
 */
#ifndef SBX_NETADDR_H
#define SBX_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

enum sbx_addr_class {
	SBX_ADDR_PUBLIC = 0,   /* anything below is not */
	SBX_ADDR_UNSPECIFIED,  /* 0.0.0.0/8 ("this network"), :: */
	SBX_ADDR_LOOPBACK,     /* 127.0.0.0/8, ::1 */
	SBX_ADDR_PRIVATE,      /* 10/8, 172.16/12, 192.168/16, fec0::/10 (site-local) */
	SBX_ADDR_SHARED,       /* 100.64.0.0/10 (carrier-grade NAT) */
	SBX_ADDR_LINK_LOCAL,   /* 169.254.0.0/16 (cloud metadata), fe80::/10 */
	SBX_ADDR_UNIQUE_LOCAL, /* fc00::/7 */
	SBX_ADDR_MULTICAST,    /* 224.0.0.0/4, ff00::/8 */
	SBX_ADDR_RESERVED,     /* 192.0.0.0/24, 198.18.0.0/15, 240.0.0.0/4 (broadcast
				* too), 100::/64 (discard) */
	SBX_ADDR_NOT_IP,       /* a family other than AF_INET and AF_INET6 */
};

/* The class of the IPv4 address A (network byte order, as in in_addr). */
enum sbx_addr_class sbx_addr_classify4(const unsigned char a[4]);
/* The class of the IPv6 address A; one that embeds an IPv4 address is
 * classed by it: IPv4-mapped ::ffff:a.b.c.d, IPv4-translated
 * ::ffff:0:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d and
 * 6to4 2002:AABB:CCDD::. */
enum sbx_addr_class sbx_addr_classify6(const unsigned char a[16]);
/* The class of SA (LEN bytes: a sockaddr_in or sockaddr_in6; shorter or
 * another family is SBX_ADDR_NOT_IP). */
enum sbx_addr_class sbx_addr_classify(const struct sockaddr *sa, size_t len);
/* "loopback", "private", "link-local (cloud metadata)", ...: for messages. */
const char *sbx_addr_class_name(enum sbx_addr_class c);

#endif
