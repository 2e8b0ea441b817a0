/* SPDX-License-Identifier: MIT */
/*
 * Address classes (include/sbx/netaddr.h): the IANA special-purpose
 * registries (RFC 6890 and its updates) reduced to what a server must not
 * reach on a sandbox's behalf.
 */
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "sbx/common.h"
#include "sbx/netaddr.h"

/* Whether the first BITS bits of A equal those of PREFIX. */
static bool in_prefix(const unsigned char *a, const unsigned char *prefix, unsigned bits)
{
	unsigned full = bits / 8, rest = bits % 8;

	if (memcmp(a, prefix, full) != 0)
		return false;
	if (!rest)
		return true;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (a[full] & mask) == (prefix[full] & mask);
}

enum sbx_addr_class sbx_addr_classify4(const unsigned char a[4])
{
	static const struct {
		unsigned char prefix[4];
		unsigned bits;
		enum sbx_addr_class c;
	} nets[] = {
	    {{0, 0, 0, 0}, 8, SBX_ADDR_UNSPECIFIED},
	    {{127, 0, 0, 0}, 8, SBX_ADDR_LOOPBACK},
	    {{10, 0, 0, 0}, 8, SBX_ADDR_PRIVATE},
	    {{172, 16, 0, 0}, 12, SBX_ADDR_PRIVATE},
	    {{192, 168, 0, 0}, 16, SBX_ADDR_PRIVATE},
	    {{100, 64, 0, 0}, 10, SBX_ADDR_SHARED},
	    {{169, 254, 0, 0}, 16, SBX_ADDR_LINK_LOCAL},
	    {{224, 0, 0, 0}, 4, SBX_ADDR_MULTICAST},
	    {{240, 0, 0, 0}, 4, SBX_ADDR_RESERVED},
	    {{192, 0, 0, 0}, 24, SBX_ADDR_RESERVED},
	    {{198, 18, 0, 0}, 15, SBX_ADDR_RESERVED},
	    /* Not special to IANA, but Azure's platform endpoint (WireServer) on
	     * every host: cloud metadata as much as 169.254.169.254. */
	    {{168, 63, 129, 16}, 32, SBX_ADDR_LINK_LOCAL},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(nets); i++)
		if (in_prefix(a, nets[i].prefix, nets[i].bits))
			return nets[i].c;
	return SBX_ADDR_PUBLIC;
}

enum sbx_addr_class sbx_addr_classify6(const unsigned char a[16])
{
	static const unsigned char zero[16],
	    loop[16] = {[15] = 1}, mapped[12] = {[10] = 0xff, [11] = 0xff},
	    translated[12] = {[8] = 0xff, [9] = 0xff}, nat64[12] = {0, 0x64, 0xff, 0x9b},
	    nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 0x01}, sixto4[2] = {0x20, 0x02},
	    discard[8] = {0x01, 0x00}, ll[2] = {0xfe, 0x80}, site[2] = {0xfe, 0xc0},
	    ula[1] = {0xfc}, mc[1] = {0xff};

	if (memcmp(a, zero, 16) == 0)
		return SBX_ADDR_UNSPECIFIED;
	if (memcmp(a, loop, 16) == 0)
		return SBX_ADDR_LOOPBACK;
	if (in_prefix(a, mapped, 96) || in_prefix(a, translated, 96) || in_prefix(a, nat64, 96) ||
	    in_prefix(a, zero, 96))
		return sbx_addr_classify4(a + 12);
	/* The local-use NAT64 prefix (RFC 8215): a translator of the site's own,
	 * to whatever IPv4 addresses it is given. */
	if (in_prefix(a, nat64_local, 48))
		return SBX_ADDR_PRIVATE;
	if (in_prefix(a, sixto4, 16))
		return sbx_addr_classify4(a + 2);
	if (in_prefix(a, discard, 64))
		return SBX_ADDR_RESERVED;
	if (in_prefix(a, ll, 10))
		return SBX_ADDR_LINK_LOCAL;
	if (in_prefix(a, site, 10))
		return SBX_ADDR_PRIVATE;
	if (in_prefix(a, ula, 7))
		return SBX_ADDR_UNIQUE_LOCAL;
	if (in_prefix(a, mc, 8))
		return SBX_ADDR_MULTICAST;
	return SBX_ADDR_PUBLIC;
}

enum sbx_addr_class sbx_addr_classify(const struct sockaddr *sa, size_t len)
{
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in in;
		memcpy(&in, sa, sizeof(in));
		return sbx_addr_classify4((const unsigned char *)&in.sin_addr);
	}
	if (sa && sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 in6;
		memcpy(&in6, sa, sizeof(in6));
		return sbx_addr_classify6(in6.sin6_addr.s6_addr);
	}
	return SBX_ADDR_NOT_IP;
}

const char *sbx_addr_class_name(enum sbx_addr_class c)
{
	switch (c) {
	case SBX_ADDR_PUBLIC:
		return "public";
	case SBX_ADDR_UNSPECIFIED:
		return "unspecified";
	case SBX_ADDR_LOOPBACK:
		return "loopback (the server's own host)";
	case SBX_ADDR_PRIVATE:
		return "private";
	case SBX_ADDR_SHARED:
		return "shared (carrier-grade NAT)";
	case SBX_ADDR_LINK_LOCAL:
		return "link-local (cloud metadata)";
	case SBX_ADDR_UNIQUE_LOCAL:
		return "unique local (private IPv6)";
	case SBX_ADDR_MULTICAST:
		return "multicast";
	case SBX_ADDR_RESERVED:
		return "reserved";
	case SBX_ADDR_NOT_IP:
		break;
	}
	return "not an IP address";
}
