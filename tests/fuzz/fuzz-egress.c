/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: what a sandbox sends through its egress relay
 * (src/egress/egress_proto.c): the relay's frames, and the request heads of
 * what connects to it, decided by a fixed policy (index
 * https://u:PASSWORD@idx.example/r/simple/, egress_allow api.example.com,
 * *.cdn.example:8443, 10.0.0.5).
 *
 * The first byte picks the parser; the rest is the input.
 * Frames (even first byte): fed in pieces whose sizes come from the second
 * byte. Checks: every frame handed out has a known type and at most
 * EGRESS_FRAME_MAX bytes; once the reader refuses (-EPROTO, with a reason)
 * nothing more is fed.
 * Requests (odd first byte). Checks: the answer is 0 (more needed), 1, or one
 * of 400, 403, 405, 431, 501 with a reason that holds the password only
 * when the input did (a refused host is named as it was asked for);
 * an accepted head ends within the input and within EGRESS_HEAD_MAX + 4
 * bytes with a blank line; a CONNECT or forwarded target is one the policy
 * allows; an index or forwarded path starts with '/' and holds no control
 * character or space; an index path (before any '?') is under /r/simple/
 * and clean: no "." or ".." segment (dots perhaps %2e, the segment perhaps
 * with a ";param"), no "//", no backslash, no %2f, %5c, %00 or %25; a
 * CONNECT or forward may reach any address only when its host is the
 * index's or the IP literal in egress_allow (10.0.0.5); the headers passed on are "Name: value"
 * entries of the passed list, without CR or LF; a prefix of an accepted head that lacks its blank
 * line is never accepted.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress/egress-internal.h"
#include "sbx/settings.h"

#define PASSWORD "fuzz-secret-pw"

static struct egress_policy pol;
static struct egress_reader rd;

static void init(void)
{
	static bool done;
	struct sbx_settings s;
	char why[256];

	if (done)
		return;
	done = true;
	if (sbx_settings_init(&s) < 0 ||
	    sbx_settings_set(&s, "sandbox.index_url=https://u:" PASSWORD "@idx.example/r/simple/",
			     NULL) < 0 ||
	    sbx_settings_set(&s,
			     "sandbox.egress_allow=api.example.com, *.cdn.example:8443, 10.0.0.5",
			     NULL) < 0 ||
	    egress_policy_init(&pol, &s, why, sizeof(why)) < 0)
		abort();
	sbx_settings_release(&s);
}

static int on_frame(void *userdata, uint8_t type, uint16_t id, const unsigned char *p, uint32_t len)
{
	(void)userdata, (void)id, (void)p;
	if (type < EGRESS_HELLO || type > EGRESS_WINDOW || len > EGRESS_FRAME_MAX)
		abort();
	return 0;
}

static void frames(const uint8_t *data, size_t size)
{
	size_t piece = size ? (size_t)data[0] % 64 + 1 : 1, off = 1;

	memset(&rd, 0, sizeof(rd));
	while (off < size) {
		size_t n = size - off < piece ? size - off : piece;
		char why[128] = "";
		int r = egress_reader_feed(&rd, data + off, n, on_frame, NULL, why, sizeof(why));

		if (r < 0) {
			if (r != -EPROTO || !why[0])
				abort();
			return;
		}
		off += n;
	}
}

static bool clean(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* A distribution file's path (sandbox.index_files_path unset: anywhere
 * on the index's host): no query; letters, digits, "-_.+!~" and "/" only,
 * as such or as %XX; its last segment starting with a letter or digit and
 * ending in .whl, .tar.gz, .tgz, .zip, .tar.bz2, .tbz, .tar.xz, .txz or
 * .egg, perhaps then .metadata.
 * Checked here without the parser's code. */
static bool dist_name_ok(const char *path)
{
	static const char *const ext[] = {".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2",
					  ".tbz", ".tar.xz", ".txz", ".egg"};
	char dec[8192], *last;
	size_t k = 0, n;

	if (strchr(path, '?'))
		return false;
	for (const char *p = path; *p; p++) {
		char c = *p;
		if (c == '%') {
			char h[3] = {p[1], p[1] ? p[2] : 0, 0};
			if (!isxdigit((unsigned char)h[0]) || !isxdigit((unsigned char)h[1]))
				return false;
			c = (char)strtol(h, NULL, 16);
			p += 2;
		}
		if (!c || !(isalnum((unsigned char)c) || strchr("-_.+!~/", c)) ||
		    k + 1 >= sizeof(dec))
			return false;
		dec[k++] = c;
	}
	dec[k] = '\0';
	last = strrchr(dec, '/');
	last = last ? last + 1 : dec;
	n = strlen(last);
	if (n > 9 && strcasecmp(last + n - 9, ".metadata") == 0)
		n -= 9;
	if (!n || !isalnum((unsigned char)last[0]))
		return false;
	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		size_t el = strlen(ext[i]);
		if (n > el && strncasecmp(last + n - el, ext[i], el) == 0)
			return true;
	}
	return false;
}

/* An index path (up to '?'): under /r/simple/, or a distribution file
 * (dist_name_ok), and clean, checked here without the parser's code. */
static bool index_path_ok(const char *path)
{
	static const char prefix[] = "/r/simple/";
	size_t n = strcspn(path, "?");
	char seg[64];
	size_t k = 0;

	if (strncmp(path, prefix, sizeof(prefix) - 1) != 0 && !dist_name_ok(path))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = path[i];
		if (c == '\\')
			return false;
		if (c == '%' && i + 2 < n) {
			char e[3] = {(char)(path[i + 1] | 0x20), (char)(path[i + 2] | 0x20), 0};
			if (!strcmp(e, "2f") || !strcmp(e, "5c") || !strcmp(e, "00") ||
			    !strcmp(e, "25"))
				return false;
			if (!strcmp(e, "2e")) {
				c = '.';
				i += 2;
			}
		}
		if (c == '/') {
			if (i > 0 && k == 0)
				return false; /* "//" */
			k = 0;
			continue;
		}
		if (k < sizeof(seg) - 1)
			seg[k++] = c;
		seg[k] = '\0';
		/* A segment that is (up to a ';') "." or "..", complete at the
		 * next '/', ';' or the end. */
		bool ends = i + 1 == n || path[i + 1] == '/' || path[i + 1] == ';';
		if (ends && (!strcmp(seg, ".") || !strcmp(seg, "..")))
			return false;
	}
	return true;
}

/* The input holds the password, in any case (hosts are named in lower case). */
static bool has_password(const uint8_t *data, size_t size)
{
	size_t n = strlen(PASSWORD);

	for (size_t i = 0; i + n <= size; i++)
		if (strncasecmp((const char *)data + i, PASSWORD, n) == 0)
			return true;
	return false;
}

static void request(const uint8_t *data, size_t size)
{
	struct egress_request q = {0};
	char why[512] = "";
	int r = egress_parse_request(&pol, 3128, (const char *)data, size, &q, why, sizeof(why));

	/* The same bytes arriving one at a time: the same answer as soon as the
	 * head is complete (or at its bound), after at most one try per offset. */
	{
		struct egress_head_scan s = {0};
		struct egress_request q3 = {0};
		char why3[512] = "";
		size_t k;
		int r3 = 0;

		for (k = 1; k <= size && r3 == 0; k++)
			r3 = egress_parse_head(&s, &pol, 3128, (const char *)data, k, &q3, why3,
					       sizeof(why3));
		if (s.examined > size || (r3 != r && r3 != -ENOMEM && r != -ENOMEM) ||
		    (r3 == 1 && r == 1 && q3.head_len != q.head_len))
			abort();
		egress_request_release(&q3);
	}
	if (r == 0 || r == -ENOMEM)
		return;
	if (r != 1) {
		if ((r != 400 && r != 403 && r != 405 && r != 431 && r != 501) || !why[0] ||
		    (strstr(why, PASSWORD) && !has_password(data, size)))
			abort();
		return;
	}
	if (q.head_len > size || q.head_len > EGRESS_HEAD_MAX + 4 || q.head_len < 4 ||
	    memcmp(data + q.head_len - 4, "\r\n\r\n", 4) != 0)
		abort();
	if (q.kind == EGRESS_REQ_CONNECT && !egress_policy_allows(&pol, q.host, q.port, true))
		abort();
	if (q.kind == EGRESS_REQ_FORWARD && !egress_policy_allows(&pol, q.host, q.port, false))
		abort();
	if (q.kind == EGRESS_REQ_INDEX && (!q.path || !index_path_ok(q.path) || !q.any_address))
		abort();
	if (q.kind != EGRESS_REQ_INDEX && q.any_address && strcmp(q.host, "idx.example") != 0 &&
	    strcmp(q.host, "10.0.0.5") != 0)
		abort();
	if (q.kind != EGRESS_REQ_CONNECT) {
		if (!q.path || q.path[0] != '/' || !clean(q.path) || !q.headers)
			abort();
		for (size_t off = 0; off < q.headers_len; off += strlen(q.headers + off) + 1) {
			const char *h = q.headers + off;
			if (strpbrk(h, "\r\n") || !strstr(h, ": "))
				abort();
			if (strncasecmp(h, "authorization", 13) == 0 ||
			    strncasecmp(h, "host:", 5) == 0)
				abort();
		}
	}
	/* Cut before its blank line, the same head is not complete. */
	{
		struct egress_request q2 = {0};
		int r2 = egress_parse_request(&pol, 3128, (const char *)data, q.head_len - 1, &q2,
					      why, sizeof(why));
		if (r2 == 1)
			abort();
		egress_request_release(&q2);
	}
	egress_request_release(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	if (!size)
		return 0;
	if (data[0] & 1)
		request(data + 1, size - 1);
	else
		frames(data + 1, size - 1);
	return 0;
}
