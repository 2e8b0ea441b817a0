/* SPDX-License-Identifier: MIT */
/*
 * Address classes (src/base/netaddr.c): every range's first and last
 * address and its neighbours outside it, IPv6 forms that embed an IPv4
 * address, and the sockaddr wrapper.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "sbx/common.h"
#include "sbx/netaddr.h"
#include "tap.h"

static enum sbx_addr_class classify(const char *text)
{
	unsigned char a[16];

	if (inet_pton(AF_INET, text, a) == 1)
		return sbx_addr_classify4(a);
	if (inet_pton(AF_INET6, text, a) == 1)
		return sbx_addr_classify6(a);
	tap_bail(text);
	return SBX_ADDR_NOT_IP;
}

static const struct {
	const char *addr;
	enum sbx_addr_class c;
} cases[] = {
    /* IPv4: each range's edges and what lies just outside. */
    {"0.0.0.0", SBX_ADDR_UNSPECIFIED},
    {"0.255.255.255", SBX_ADDR_UNSPECIFIED},
    {"1.0.0.0", SBX_ADDR_PUBLIC},
    {"9.255.255.255", SBX_ADDR_PUBLIC},
    {"10.0.0.0", SBX_ADDR_PRIVATE},
    {"10.255.255.255", SBX_ADDR_PRIVATE},
    {"11.0.0.0", SBX_ADDR_PUBLIC},
    {"100.63.255.255", SBX_ADDR_PUBLIC},
    {"100.64.0.0", SBX_ADDR_SHARED},
    {"100.127.255.255", SBX_ADDR_SHARED},
    {"100.128.0.0", SBX_ADDR_PUBLIC},
    {"126.255.255.255", SBX_ADDR_PUBLIC},
    {"127.0.0.0", SBX_ADDR_LOOPBACK},
    {"127.0.0.1", SBX_ADDR_LOOPBACK},
    {"127.255.255.255", SBX_ADDR_LOOPBACK},
    {"128.0.0.0", SBX_ADDR_PUBLIC},
    {"169.253.255.255", SBX_ADDR_PUBLIC},
    {"169.254.0.0", SBX_ADDR_LINK_LOCAL},
    {"169.254.169.254", SBX_ADDR_LINK_LOCAL},
    {"169.254.255.255", SBX_ADDR_LINK_LOCAL},
    {"168.63.129.16", SBX_ADDR_LINK_LOCAL}, /* Azure's WireServer */
    {"168.63.129.15", SBX_ADDR_PUBLIC},
    {"168.63.129.17", SBX_ADDR_PUBLIC},
    {"169.255.0.0", SBX_ADDR_PUBLIC},
    {"172.15.255.255", SBX_ADDR_PUBLIC},
    {"172.16.0.0", SBX_ADDR_PRIVATE},
    {"172.17.0.1", SBX_ADDR_PRIVATE},
    {"172.31.255.255", SBX_ADDR_PRIVATE},
    {"172.32.0.0", SBX_ADDR_PUBLIC},
    {"191.255.255.255", SBX_ADDR_PUBLIC},
    {"192.0.0.0", SBX_ADDR_RESERVED},
    {"192.0.0.255", SBX_ADDR_RESERVED},
    {"192.0.1.0", SBX_ADDR_PUBLIC},
    {"192.167.255.255", SBX_ADDR_PUBLIC},
    {"192.168.0.0", SBX_ADDR_PRIVATE},
    {"192.168.255.255", SBX_ADDR_PRIVATE},
    {"192.169.0.0", SBX_ADDR_PUBLIC},
    {"198.17.255.255", SBX_ADDR_PUBLIC},
    {"198.18.0.0", SBX_ADDR_RESERVED},
    {"198.19.255.255", SBX_ADDR_RESERVED},
    {"198.20.0.0", SBX_ADDR_PUBLIC},
    {"223.255.255.255", SBX_ADDR_PUBLIC},
    {"224.0.0.0", SBX_ADDR_MULTICAST},
    {"239.255.255.255", SBX_ADDR_MULTICAST},
    {"240.0.0.0", SBX_ADDR_RESERVED},
    {"255.255.255.255", SBX_ADDR_RESERVED},
    {"8.8.8.8", SBX_ADDR_PUBLIC},
    {"151.101.0.223", SBX_ADDR_PUBLIC},
    /* IPv6. */
    {"::", SBX_ADDR_UNSPECIFIED},
    {"::1", SBX_ADDR_LOOPBACK},
    {"::2", SBX_ADDR_UNSPECIFIED}, /* ::0.0.0.2, IPv4-compatible */
    {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_PUBLIC},
    {"fe80::", SBX_ADDR_LINK_LOCAL},
    {"fe80::1", SBX_ADDR_LINK_LOCAL},
    {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_LINK_LOCAL},
    {"fec0::", SBX_ADDR_PRIVATE},
    {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_PRIVATE},
    {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_PUBLIC},
    {"fc00::", SBX_ADDR_UNIQUE_LOCAL},
    {"fd00:ec2::254", SBX_ADDR_UNIQUE_LOCAL},
    {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_UNIQUE_LOCAL},
    {"ff00::", SBX_ADDR_MULTICAST},
    {"ff02::1", SBX_ADDR_MULTICAST},
    {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SBX_ADDR_MULTICAST},
    {"100::", SBX_ADDR_RESERVED},
    {"100::ffff:ffff:ffff:ffff", SBX_ADDR_RESERVED},
    {"100:0:0:1::", SBX_ADDR_PUBLIC},
    {"2001:4860:4860::8888", SBX_ADDR_PUBLIC},
    {"2a04:4e42::223", SBX_ADDR_PUBLIC},
    /* IPv4 inside IPv6: classed by the IPv4 address. */
    {"::ffff:127.0.0.1", SBX_ADDR_LOOPBACK},
    {"::ffff:169.254.169.254", SBX_ADDR_LINK_LOCAL},
    {"::ffff:10.1.2.3", SBX_ADDR_PRIVATE},
    {"::ffff:0.0.0.0", SBX_ADDR_UNSPECIFIED},
    {"::ffff:8.8.8.8", SBX_ADDR_PUBLIC},
    {"::ffff:0:127.0.0.1", SBX_ADDR_LOOPBACK},
    {"::ffff:0:8.8.8.8", SBX_ADDR_PUBLIC},
    {"::127.0.0.1", SBX_ADDR_LOOPBACK},
    {"::192.168.1.1", SBX_ADDR_PRIVATE},
    {"::8.8.8.8", SBX_ADDR_PUBLIC},
    {"64:ff9b::127.0.0.1", SBX_ADDR_LOOPBACK},
    {"64:ff9b::a9fe:a9fe", SBX_ADDR_LINK_LOCAL},
    {"64:ff9b::8.8.8.8", SBX_ADDR_PUBLIC},
    {"64:ff9b:1::7f00:1", SBX_ADDR_PRIVATE}, /* the local-use NAT64 prefix (RFC 8215) */
    {"64:ff9b:1:ffff::1", SBX_ADDR_PRIVATE},
    {"64:ff9b:2::7f00:1", SBX_ADDR_PUBLIC}, /* neither NAT64 prefix */
    {"2002:7f00:1::", SBX_ADDR_LOOPBACK},
    {"2002:a9fe:a9fe::1", SBX_ADDR_LINK_LOCAL},
    {"2002:c0a8:101::", SBX_ADDR_PRIVATE},
    {"2002:808:808::", SBX_ADDR_PUBLIC},
    {"::fffe:127.0.0.1", SBX_ADDR_PUBLIC}, /* neither mapped nor compatible */
};

int main(void)
{
	struct sockaddr_in in = {.sin_family = AF_INET};
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
	struct sockaddr sa = {.sa_family = AF_UNIX};
	int bad = 0;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		enum sbx_addr_class c = classify(cases[i].addr);
		if (c != cases[i].c) {
			tap_diag("%s: %s, expected %s", cases[i].addr, sbx_addr_class_name(c),
				 sbx_addr_class_name(cases[i].c));
			bad++;
		}
	}
	tap_is_int(bad, 0, "%zu addresses classed as expected", SBX_ARRAY_SIZE(cases));

	/* Every IPv4 address at a /8 step and the last of each /8: only the
	 * ranges above are other than public. */
	bad = 0;
	for (unsigned n = 0; n < 256; n++) {
		unsigned char a[4] = {(unsigned char)n, 0, 0, 0},
			      z[4] = {(unsigned char)n, 255, 255, 255};
		bool special = n == 0 || n == 10 || n == 127 || n >= 224;
		if ((sbx_addr_classify4(a) != SBX_ADDR_PUBLIC) != special && n != 100 && n != 169 &&
		    n != 172 && n != 192 && n != 198)
			bad++;
		if ((sbx_addr_classify4(z) != SBX_ADDR_PUBLIC) != special)
			bad++;
	}
	tap_is_int(bad, 0, "the /8s: only 0, 10, 127 and 224 and above are special as a whole");

	inet_pton(AF_INET, "169.254.169.254", &in.sin_addr);
	tap_is_int(sbx_addr_classify((struct sockaddr *)&in, sizeof(in)), SBX_ADDR_LINK_LOCAL,
		   "a sockaddr_in");
	tap_is_int(sbx_addr_classify((struct sockaddr *)&in, sizeof(in) - 1), SBX_ADDR_NOT_IP,
		   "a short one is not an IP address");
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
	tap_is_int(sbx_addr_classify((struct sockaddr *)&in6, sizeof(in6)), SBX_ADDR_LOOPBACK,
		   "a sockaddr_in6 (IPv4-mapped loopback)");
	inet_pton(AF_INET6, "2606:4700::1111", &in6.sin6_addr);
	tap_is_int(sbx_addr_classify((struct sockaddr *)&in6, sizeof(in6)), SBX_ADDR_PUBLIC,
		   "a public one");
	tap_is_int(sbx_addr_classify(&sa, sizeof(sa)), SBX_ADDR_NOT_IP, "AF_UNIX is not");
	tap_is_int(sbx_addr_classify(NULL, 0), SBX_ADDR_NOT_IP, "nor NULL");
	tap_ok(strstr(sbx_addr_class_name(SBX_ADDR_LINK_LOCAL), "metadata") != NULL &&
		   strstr(sbx_addr_class_name(SBX_ADDR_LOOPBACK), "loopback") != NULL,
	       "the names say what the class is");
	return tap_done();
}
