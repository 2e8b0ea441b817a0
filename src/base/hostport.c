/* SPDX-License-Identifier: MIT */
/* "HOST[:PORT]": see include/sbx/hostport.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "sbx/error.h"
#include "sbx/hostport.h"

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* A DNS name (or an IPv4 address, which is one by these rules) in S[0..N). */
static bool name_ok(const char *s, size_t n)
{
	size_t label = 0;

	if (n == 0 || n > SBX_HOST_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!is_alnum(c) && c != '-')
			return false;
		if (c == '-' && label == 0)
			return false;
		if (++label > 63)
			return false;
	}
	return label > 0 && s[n - 1] != '-';
}

int sbx_hostport_parse(const char *s, size_t n, unsigned flags, char *ret_host, int *ret_port,
		       char *why, size_t why_size)
{
	const char *host = s, *colon = NULL;
	size_t host_len;
	bool wild = false;
	int port = 0;

	if (n == 0)
		return sbx_why_set(why, why_size, -EINVAL, "an empty host");
	if (s[0] == '[') {
		const char *close = memchr(s, ']', n);
		char v6[64];
		struct in6_addr a;

		if (!close || (size_t)(close - s) - 1 >= sizeof(v6))
			return sbx_why_set(why, why_size, -EINVAL, "a bad IPv6 address");
		host = s + 1;
		host_len = (size_t)(close - s) - 1;
		memcpy(v6, host, host_len);
		v6[host_len] = '\0';
		if (inet_pton(AF_INET6, v6, &a) != 1)
			return sbx_why_set(why, why_size, -EINVAL, "a bad IPv6 address");
		if (close + 1 < s + n) {
			if (close[1] != ':')
				return sbx_why_set(why, why_size, -EINVAL,
						   "junk after the IPv6 address");
			colon = close + 1;
		}
	} else {
		colon = memchr(s, ':', n);
		host_len = colon ? (size_t)(colon - s) : n;
		if (host_len >= 2 && host[0] == '*' && host[1] == '.') {
			if (!(flags & SBX_HOSTPORT_WILDCARD))
				return sbx_why_set(why, why_size, -EINVAL, "a wildcard host");
			wild = true;
			host += 2;
			host_len -= 2;
		}
		if (host_len > 1 && host[host_len - 1] == '.')
			host_len--;
		if (!name_ok(host, host_len))
			return sbx_why_set(
			    why, why_size, -EINVAL,
			    "a bad host name (letters, digits, '-' and '.', at most %d)",
			    SBX_HOST_MAX);
	}
	if (colon) {
		const char *p = colon + 1, *end = s + n;
		if (p == end)
			return sbx_why_set(why, why_size, -EINVAL, "an empty port");
		for (; p < end; p++) {
			if (*p < '0' || *p > '9' || port > 65535)
				return sbx_why_set(why, why_size, -EINVAL, "a bad port (1..65535)");
			port = port * 10 + (*p - '0');
		}
		if (port < 1 || port > 65535)
			return sbx_why_set(why, why_size, -EINVAL, "a bad port (1..65535)");
	} else if (flags & SBX_HOSTPORT_NEED_PORT) {
		return sbx_why_set(why, why_size, -EINVAL, "no port (HOST:PORT)");
	}
	if (wild) {
		memcpy(ret_host, "*.", 2);
		ret_host += 2;
	}
	for (size_t i = 0; i < host_len; i++)
		ret_host[i] = lower(host[i]);
	ret_host[host_len] = '\0';
	*ret_port = port;
	return 0;
}

bool sbx_host_match(const char *pattern, const char *host)
{
	size_t hl, pl;

	if (strncmp(pattern, "*.", 2) != 0)
		return strcmp(pattern, host) == 0;
	pattern += 1; /* ".example.com" */
	pl = strlen(pattern);
	hl = strlen(host);
	return hl > pl && strcmp(host + hl - pl, pattern) == 0;
}
