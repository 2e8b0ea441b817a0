/* SPDX-License-Identifier: MIT */
/*
 * Egress (src/egress/egress.c): package installs with sandbox.network =
 * none through the sandbox's relay, the index's credentials kept out of the
 * sandbox, sandbox.egress_allow, and relays that misbehave.
 *
 * First without an engine: the frame reader's bounds, the request parser
 * and the allow-list. Then against the engine given as TYPE URL [IMAGE]: a
 * package index needing basic auth and a plain "API" server run by the test
 * on 127.0.0.1 (tests/egress-index.py): the server reaches them itself, the
 * sandbox only through its relay. Nothing leaves loopback: the hosts a
 * sandbox may reach here are 127.0.0.1 ports the test opened, and refused
 * hosts are refused before any connection is tried.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox-fixture.h"
#include "egress/egress-internal.h"
#include "egress/egress.h"
#include "sandbox/sandbox-internal.h"
#include "sbx/auth.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "tap.h"

#define USER "egressuser"
/* Long and unusual enough that finding it anywhere can only be a leak. */
#define PASSWORD "pw-Zq81vXk2-s3cr3t-egress"

/* ---- without an engine ---- */

struct frames {
	int n;
	uint8_t type[8];
	uint16_t id[8];
	uint32_t len[8];
};

static int count_frame(void *userdata, uint8_t type, uint16_t id, const unsigned char *p,
		       uint32_t len)
{
	struct frames *f = userdata;

	(void)p;
	if (f->n < 8) {
		f->type[f->n] = type;
		f->id[f->n] = id;
		f->len[f->n] = len;
	}
	f->n++;
	return 0;
}

static void test_reader(void)
{
	struct egress_reader *r = calloc(1, sizeof(*r));
	struct frames f = {0};
	unsigned char buf[EGRESS_HDR * 3 + 10], h[EGRESS_HDR];
	char why[256] = "";
	int rc;

	/* OPEN 7, DATA 7 "0123456789", CLOSE 7, fed a byte at a time. */
	egress_frame_header(buf, EGRESS_OPEN, 7, 0);
	egress_frame_header(buf + 8, EGRESS_DATA, 7, 10);
	memcpy(buf + 16, "0123456789", 10);
	egress_frame_header(buf + 26, EGRESS_CLOSE, 7, 0);
	rc = 0;
	for (size_t i = 0; i < sizeof(buf) && rc == 0; i++)
		rc = egress_reader_feed(r, buf + i, 1, count_frame, &f, why, sizeof(why));
	tap_ok(rc == 0 && f.n == 3 && f.type[0] == EGRESS_OPEN && f.type[1] == EGRESS_DATA &&
		   f.len[1] == 10 && f.id[2] == 7 && f.type[2] == EGRESS_CLOSE,
	       "frames fed a byte at a time: OPEN, DATA of 10, CLOSE (%d frames)", f.n);

	memset(&f, 0, sizeof(f));
	egress_frame_header(h, EGRESS_DATA, 1, EGRESS_FRAME_MAX);
	rc = egress_reader_feed(r, h, sizeof(h), count_frame, &f, why, sizeof(why));
	tap_ok(rc == 0 && f.n == 0, "a header of a frame of exactly %d bytes waits for them",
	       EGRESS_FRAME_MAX);
	memset(r, 0, sizeof(*r));
	egress_frame_header(h, EGRESS_DATA, 1, EGRESS_FRAME_MAX + 1);
	rc = egress_reader_feed(r, h, sizeof(h), count_frame, &f, why, sizeof(why));
	tap_ok(rc == -EPROTO && strstr(why, "32769") && strstr(why, "limit"),
	       "a frame of %d bytes is refused at its header: %s", EGRESS_FRAME_MAX + 1, why);
	memset(r, 0, sizeof(*r));
	egress_frame_header(h, EGRESS_DATA, 1, 0x7fffffff);
	tap_is_int(egress_reader_feed(r, h, sizeof(h), count_frame, &f, why, sizeof(why)), -EPROTO,
		   "and one of 2 GiB");
	memset(r, 0, sizeof(*r));
	tap_is_int(egress_reader_feed(r, "\xff\xff\xff\xff\xff\xff\xff\xff", 8, count_frame, &f,
				      why, sizeof(why)),
		   -EPROTO, "garbage is refused: %s", why);
	memset(r, 0, sizeof(*r));
	egress_frame_header(h, 9, 1, 0);
	tap_is_int(egress_reader_feed(r, h, sizeof(h), count_frame, &f, why, sizeof(why)), -EPROTO,
		   "an unknown type is refused: %s", why);
	free(r);
}

static struct egress_policy policy_files(const char *index_url, const char *allow,
					 const char *files_path)
{
	struct sbx_settings s;
	struct sbx_error err = SBX_ERROR_INIT;
	struct egress_policy p;
	char a[512], b[512], c[512], why[256];

	sbx_settings_init(&s);
	snprintf(a, sizeof(a), "sandbox.index_url=%s", index_url);
	snprintf(b, sizeof(b), "sandbox.egress_allow=%s", allow);
	snprintf(c, sizeof(c), "sandbox.index_files_path=%s", files_path);
	if (sbx_settings_set(&s, a, &err) < 0 || sbx_settings_set(&s, b, &err) < 0 ||
	    sbx_settings_set(&s, c, &err) < 0)
		tap_bail(err.msg);
	if (egress_policy_init(&p, &s, why, sizeof(why)) < 0)
		tap_bail(why);
	sbx_settings_release(&s);
	return p;
}

static struct egress_policy policy(const char *index_url, const char *allow)
{
	return policy_files(index_url, allow, "");
}

/* Parses REQ with P (relay port 3128): the result, and the request or WHY. */
static int parse(const struct egress_policy *p, const char *req, struct egress_request *q,
		 char *why, size_t why_size)
{
	memset(q, 0, sizeof(*q));
	why[0] = '\0';
	return egress_parse_request(p, 3128, req, strlen(req), q, why, why_size);
}

/* Without sandbox.index_files_path: distribution files anywhere on the
 * index's origin, and nothing else off its path. */
static void test_dist_files(const struct egress_policy *p)
{
	struct egress_policy plain = policy("http://" USER ":" PASSWORD "@127.0.0.1:8080/simple/",
					    "127.0.0.1:8081, 127.0.0.2:8080");
	struct egress_head_scan s = {0};
	static const char *const files[] = {
	    "/packages/sbxdemo-1.0-py3-none-any.whl",	       /* pypiserver */
	    "/root/pypi/+f/0ab/1234567890abcdef/x-1.0.tar.gz", /* devpi */
	    "/files/x-1.0.zip",				       /* ../../files/ */
	    "/a/x-1.0.tar.bz2",
	    "/packages/x-1.0.tgz",	  /* pypiserver, older uploads */
	    "/packages/x-1.0-py3.11.egg", /* eggs beside them */
	    "/a/x-1.0.tar.xz",
	    "/a/x-1.0.TBZ",
	    "/a/x-1.0.txz",
	    "/a/x-1.0-py3-none-any.whl.metadata", /* PEP 658 */
	    "/a/torch-2.0%2Bcpu-cp311-none-any.whl",
	    "/a/X_Y-1.0!1~.WHL",
	    "/x.whl",
	};
	static const char *const others[] = {
	    "/secret.txt",
	    "/admin",
	    "/x.whl?sig=1",   /* a query */
	    "/x.whl?",	      /* an empty one */
	    "/admin;x.whl",   /* Tomcat: /admin */
	    "/admin;/x.whl",  /* a path parameter anywhere */
	    "/admin%3bx.whl", /* encoded */
	    "/admin%3Fx.whl", /* an encoded ? */
	    "/a%3a/x.whl",    /* : */
	    "/a@b/x.whl",     /* @ */
	    "/a=b&c/x.whl",   /* = & */
	    "/a,b/x.whl",     /* , */
	    "/a$b/x.whl",     /* $ */
	    "/a'b/x.whl",     /* ' */
	    "/a(b)/x.whl",    /* ( ) */
	    "/a*b/x.whl",     /* * */
	    "/.whl",	      /* no name */
	    "/a/.whl",
	    "/a/-x.whl", /* not starting with a letter or digit */
	    "/a/%41x.whl",
	    "/x.whl/",
	    "/x.whl/y",
	    "/x.whlx",
	    "/x.tar",
	    "/x.egg/",
	    "/x.tgzx",
	    "/.tgz",
	    "/x%2ewhl",
	    "/x.whl.metadata.metadata",
	    "/.metadata",
	    "/x.metadata",
	    "/a/../x.whl",
	    "/a/%2e%2e/x.whl",
	    "/a/..%2fx.whl",
	    "/a/..;/x.whl",
	    "//x.whl",
	    "/a\\x.whl",
	    "http://127.0.0.1:3128/a/../x.whl",
	};
	struct egress_request q;
	char req[512], why[512];
	int r, bad = 0;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(files); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", files[i]);
		r = parse(&plain, req, &q, why, sizeof(why));
		if (r != 1 || q.kind != EGRESS_REQ_INDEX || strcmp(q.path, files[i]) != 0) {
			tap_diag("%s: %d %s", files[i], r, why);
			bad++;
		}
		if (r == 1)
			egress_request_release(&q);
	}
	tap_is_int(bad, 0,
		   "without sandbox.index_files_path: %zu distribution files anywhere under the "
		   "folder of an index at /simple/ are index requests (pypiserver, devpi, "
		   "../../files/, metadata)",
		   SBX_ARRAY_SIZE(files));
	r = parse(p, "GET /r/packages/x-1.0.whl HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX,
	       "an index at /r/simple/: a file under /r/ is an index request (%d %s)", r, why);
	if (r == 1)
		egress_request_release(&q);
	r = parse(p, "GET /other/x-1.0.whl HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && !q.path,
	       "... one outside /r/ (another repository on its host) is refused (%d)", r);
	if (r == 1)
		egress_request_release(&q);
	bad = 0;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(others); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", others[i]);
		r = parse(p, req, &q, why, sizeof(why));
		if (r != 403 || !strstr(why, "/r/simple/") ||
		    !strstr(why, "sandbox.index_files_path") || q.path) {
			tap_diag("%s: %d %s", others[i], r, why);
			bad++;
		}
		if (r == 1)
			egress_request_release(&q);
	}
	tap_is_int(bad, 0,
		   "%zu other paths (not a file, a query, ; = : @ and the like, encoded too, no "
		   "name, dot segments): 403 naming the index's path and sandbox.index_files_path",
		   SBX_ARRAY_SIZE(others));

	r = egress_parse_head(&s, p, 3128, "GET /admin HTTP/1.1\r\n\r\n", 24, &q, why, sizeof(why));
	tap_ok(r == 403 && s.index_refused, "the relay is told it was the index's path (%d)", r);
	memset(&s, 0, sizeof(s));
	r = egress_parse_head(&s, p, 3128, "CONNECT a.example:443 HTTP/1.1\r\n\r\n", 35, &q, why,
			      sizeof(why));
	tap_ok(r == 403 && !s.index_refused, "and not for a host refused (%d)", r);

	/* Credentials are added for the index's origin only: other ports,
	 * hosts and schemes are forwards (or tunnels), without them. */
	r = parse(&plain, "GET http://127.0.0.1:8080/packages/x.whl HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX, "an http:// index's own origin: the index");
	egress_request_release(&q);
	r = parse(&plain, "GET http://127.0.0.1:8081/packages/x.whl HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_FORWARD && q.port == 8081,
	       "another port of its host, allowed: a forward, without credentials");
	egress_request_release(&q);
	r = parse(&plain, "GET http://127.0.0.2:8080/packages/x.whl HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_FORWARD && !strcmp(q.host, "127.0.0.2"),
	       "another host on its port, allowed: likewise");
	egress_request_release(&q);
	r = parse(&plain, "GET http://127.0.0.1:8082/packages/x.whl HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_ok(r == 403 && strstr(why, "sandbox.egress_allow"), "a port not allowed: 403 (%d %s)",
	       r, why);
	egress_policy_release(&plain);
}

/* Paths on the index: only clean ones under its path (or files path). */
static void test_index_paths(const struct egress_policy *p)
{
	struct egress_policy f =
	    policy_files("https://" USER ":" PASSWORD "@idx.example/r/simple/", "", "/r/packages/");
	struct egress_policy root = policy("http://idx.example:8080", "");
	struct egress_policy bare = policy_files("https://idx.example/simple", "", "/files");
	static const char *const refused[] = {
	    "/r/simple/../admin",
	    "/r/simple/..",
	    "/r/simple/./x/",
	    "/r/simple/x/../../../admin",
	    "/r/simple/%2e%2e/admin",
	    "/r/simple/%2E%2e/admin",
	    "/r/simple/.%2e/admin",
	    "/r/simple/%2e/x",
	    "/r/simple/..;/admin",
	    "/r/simple/..%2fadmin",
	    "/r/simple/..%2Fadmin",
	    "/r/simple/..%5cadmin",
	    "/r/simple/..\\admin",
	    "/r/simple/x\\..\\..\\admin",
	    "/r/simple//admin",
	    "/r/simple/%252e%252e/admin",
	    "/r/simple/x%00.html",
	    "/r/simple/%zz",
	    "/r/simple/%2",
	    "/r/simplex/",
	    "/r/simple",
	    "/r/",
	    "/",
	    "/api/x",
	    "/admin?/r/simple/",
	    "http://127.0.0.1:3128/r/admin",
	    "http://127.0.0.1:3128/r/simple/../admin",
	    "http://127.0.0.1:3128",
	    "http://127.0.0.1:3128?/r/simple/",
	};
	struct egress_request q;
	char req[512], why[512];
	int r, bad = 0;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(refused); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", refused[i]);
		r = parse(p, req, &q, why, sizeof(why));
		if (r != 403 || !strstr(why, "/r/simple/") || q.path) {
			tap_diag("%s: %d %s", refused[i], r, why);
			bad++;
		}
		if (r == 1)
			egress_request_release(&q);
	}
	tap_is_int(bad, 0, "%zu paths outside the index's path or not clean: 403 naming it",
		   SBX_ARRAY_SIZE(refused));
	r = parse(p, "GET /r/simple/../admin HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "dot segment") && strstr(why, "/r/simple/../admin"),
	       "a dot segment is named as such: %s", why);
	r = parse(p, "GET /r/simple/x%2fy HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "encoded slash"), "an encoded slash too: %s", why);

	static const char *const taken[] = {
	    "/r/simple/",
	    "/r/simple/sbxdemo/",
	    "/r/simple/sbxdemo/?x=../..",
	    "/r/simple/a.b/..c/c../.../x.whl",
	    "/r/simple/torch-2.0%2Bcpu.whl",
	    "/r/simple/x;y=1",
	};
	bad = 0;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(taken); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", taken[i]);
		r = parse(p, req, &q, why, sizeof(why));
		if (r != 1 || q.kind != EGRESS_REQ_INDEX || strcmp(q.path, taken[i]) != 0) {
			tap_diag("%s: %d %s", taken[i], r, why);
			bad++;
		}
		if (r == 1)
			egress_request_release(&q);
	}
	tap_is_int(bad, 0, "%zu clean paths under it are index requests, passed as sent",
		   SBX_ARRAY_SIZE(taken));

	test_dist_files(p);
	r = parse(&f, "GET /r/other/x-1.0-py3-none-any.whl HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "/r/packages/") && strstr(why, "sandbox.index_files_path"),
	       "with sandbox.index_files_path set, a file elsewhere on the host is not: %s", why);
	r = parse(&f, "GET /r/packages/x.whl HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX && q.any_address,
	       "with sandbox.index_files_path=/r/packages/, a file there is (%d %s)", r, why);
	egress_request_release(&q);
	r = parse(&f, "GET /r/packages/../x HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "/r/packages/"), "not a dot segment there: %s", why);
	r = parse(&f, "GET /r/other HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "/r/packages/"), "nor another path: %s", why);

	r = parse(&root, "GET /anything/x HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX, "an index at / holds every clean path");
	egress_request_release(&q);
	r = parse(&root, "GET /a/../b HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "but not a dot segment");
	r = parse(&root, "GET http://idx.example:8080/x/../y HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_is_int(r, 403, "nor through an absolute URL to its own host (plain http)");

	r = parse(&bare, "GET /simple/x HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "an index path without a final slash holds the paths under it");
	egress_request_release(&q);
	r = parse(&bare, "GET /simplex HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "not the names that merely start with it");
	r = parse(&bare, "GET /files/x.whl HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "likewise a files path without one");
	egress_request_release(&q);
	r = parse(&bare, "GET /filesx HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "and not /filesx");

	egress_policy_release(&f);
	egress_policy_release(&root);
	egress_policy_release(&bare);
}

/* A head of 16 KiB arriving a byte at a time (a DATA frame each): its end is
 * looked for only in what is new, so the work is O(n), not O(n^2) (about
 * 134 million offsets tried if every arrival rescanned from the start). */
static void test_head_bytewise(const struct egress_policy *p)
{
	static char head[EGRESS_HEAD_MAX];
	struct egress_head_scan s = {0};
	struct egress_request q = {0}, whole = {0};
	char why[512], why2[512];
	size_t n, len = 0, waits = 0;
	int r = 0, r2;

	len += (size_t)snprintf(head, sizeof(head), "GET /r/simple/ HTTP/1.1\r\n");
	while (len + 256 < sizeof(head))
		len += (size_t)snprintf(head + len, sizeof(head) - len, "X-Pad: %0200zu\r\n", len);
	len += (size_t)snprintf(head + len, sizeof(head) - len, "\r\n");
	for (n = 1; n <= len && r == 0; n++) {
		r = egress_parse_head(&s, p, 3128, head, n, &q, why, sizeof(why));
		waits += r == 0;
	}
	r2 = egress_parse_request(p, 3128, head, len, &whole, why2, sizeof(why2));
	tap_ok(r == 1 && r2 == 1 && waits == len - 1 && q.head_len == len,
	       "a head of %zu bytes fed a byte at a time: complete at its last byte, as parsed "
	       "whole (%d, %d: %s)",
	       len, r, r2, r == 1 ? "" : why);
	tap_ok(s.examined <= len, "its end was looked for at %zu offsets (O(n): at most %zu)",
	       s.examined, len);
	egress_request_release(&q);
	egress_request_release(&whole);

	/* No blank line at all: refused at the bound, again in O(n). */
	memset(head, 'a', sizeof(head));
	memcpy(head, "GET /", 5);
	memset(&s, 0, sizeof(s));
	for (n = 1, r = 0; n <= sizeof(head) && r == 0; n++)
		r = egress_parse_head(&s, p, 3128, head, n, &q, why, sizeof(why));
	tap_ok(r == 431 && n == sizeof(head) + 1 && s.examined <= sizeof(head),
	       "a head without end fed a byte at a time: 431 at %d bytes after %zu offsets tried",
	       EGRESS_HEAD_MAX, s.examined);
}

static void test_requests(void)
{
	struct egress_policy p = policy("https://" USER ":" PASSWORD "@idx.example/r/simple/",
					"api.example.com, *.cdn.example:8443, 127.0.0.1:9000");
	struct egress_policy pypi = policy("https://pypi.org/simple/", "");
	struct egress_request q;
	char why[512], big[EGRESS_HEAD_MAX + 64];
	int r;

	tap_is_str(p.index_url, "https://idx.example/r/simple/",
		   "the index URL curl gets has no credentials");
	tap_ok(p.user && !strcmp(p.user, USER) && p.password && !strcmp(p.password, PASSWORD),
	       "they are kept apart for curl's basic auth");
	tap_is_str(p.index_path, "/r/simple/", "pip gets the index's path on the relay");

	r = parse(&p,
		  "GET /r/simple/sbxdemo/ HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n"
		  "Accept: text/html\r\nAuthorization: Basic eA==\r\n\r\n",
		  &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX && !strcmp(q.path, "/r/simple/sbxdemo/"),
	       "a path is an index request (%d %s)", r, why);
	tap_ok(r == 1 && q.headers && strstr(q.headers, "Accept: text/html") &&
		   !strstr(q.headers, "Authorization") && !strstr(q.headers, "Host"),
	       "Accept is passed on; Authorization and Host are not");
	egress_request_release(&q);
	r = parse(&p, "GET /r/packages/x.txt HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "/r/packages/x.txt") && strstr(why, "/r/simple/") &&
		   strstr(why, "sandbox.index_files_path"),
	       "a path outside the index's path, not a file: 403 naming both and the setting: %s",
	       why);
	r = parse(&p, "GET http://127.0.0.1:3128/r/simple/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX && !strcmp(q.path, "/r/simple/"),
	       "an absolute URL to the relay itself is for the index");
	egress_request_release(&q);
	r = parse(&p, "GET /r/simple/ HTTP/1.1\r\nHost: x\r\n", &q, why, sizeof(why));
	tap_is_int(r, 0, "an incomplete head waits");
	test_index_paths(&p);

	r = parse(&p, "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
		  &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_CONNECT && !strcmp(q.host, "api.example.com") &&
		   q.port == 443,
	       "CONNECT to a host in egress_allow (%d %s)", r, why);
	r = parse(&p, "CONNECT API.Example.COM.:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1, "in any case, with a final dot");
	r = parse(&p, "CONNECT idx.example:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1, "CONNECT to the index's own host");
	r = parse(&p, "CONNECT a.cdn.example:8443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1, "CONNECT to a host under a wildcard, its port");
	r = parse(&p, "CONNECT 127.0.0.1:9000 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.any_address,
	       "CONNECT to an address and port listed, which may be any address");
	r = parse(&p, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && !q.any_address, "a listed name only to public addresses");
	r = parse(&p, "CONNECT x.cdn.example:8443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && !q.any_address, "a name under a wildcard likewise");
	r = parse(&p, "CONNECT idx.example:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && !q.any_address,
	       "a tunnel to the index's host, a name: public addresses only (a raw pipe from the "
	       "server's network)");
	r = parse(&pypi, "CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_ok(r == 1 && !q.any_address, "and to its file host");
	{
		struct egress_policy lit = policy("http://10.1.2.3:8080/simple/", "");
		r = parse(&lit, "CONNECT 10.1.2.3:8080 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
		tap_ok(r == 1 && q.any_address, "an index given as an address: any, that address");
		egress_policy_release(&lit);
	}
	r = parse(&p, "GET /r/simple/x/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_INDEX && q.any_address,
	       "the index's pages, fetched by the server: any address");
	egress_request_release(&q);
	r = parse(&p, "GET http://api.example.com/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && !q.any_address, "a forward to a listed name only public ones");
	egress_request_release(&q);
	r = parse(&p, "GET http://127.0.0.1:9000/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.any_address, "to a listed address any");
	egress_request_release(&q);
	{
		struct egress_policy lit =
		    policy("https://idx.example/simple/", "127.1:80, [::1]:81, 0x7f.0.0.1:82");
		tap_is_int(egress_policy_reach(&lit, "127.1", 80, false), EGRESS_PUBLIC,
			   "\"127.1\" is a name, not an IP literal: public addresses only");
		tap_is_int(egress_policy_reach(&lit, "::1", 81, false), EGRESS_ANY_ADDRESS,
			   "[::1] is an IP literal");
		tap_is_int(egress_policy_reach(&lit, "0x7f.0.0.1", 82, false), EGRESS_PUBLIC,
			   "0x7f.0.0.1 a name");
		egress_policy_release(&lit);
	}

	r = parse(&p, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "evil.example:443") && strstr(why, "sandbox.egress_allow"),
	       "CONNECT to another host: 403 naming it and the setting: %s", why);
	r = parse(&p, "CONNECT api.example.com:8443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "a listed host on another port: 403");
	r = parse(&p, "CONNECT cdn.example:8443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "the wildcard's own domain: 403");
	r = parse(&p, "CONNECT api.example.com.evil.example:443 HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_is_int(r, 403, "a host that only begins with a listed one: 403");
	r = parse(&p, "CONNECT api.example.comx:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "a listed name with more after it: 403");
	r = parse(&p, "CONNECT evilcdn.example:8443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "a name that ends like a wildcard's domain, not under it: 403");
	r = parse(&p, "CONNECT 127.0.0.1:9001 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "an unlisted port of a listed address: 403");
	r = parse(&p, "CONNECT [::1]:9000 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "[::1]:9000"), "an IPv6 address, named: %s", why);
	r = parse(&p, "CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "PyPI's file host is not allowed with a private index");
	r = parse(&pypi, "CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_is_int(r, 1, "but is with pypi.org, the default index");
	r = parse(&pypi, "CONNECT evil.pythonhosted.org:443 HTTP/1.1\r\n\r\n", &q, why,
		  sizeof(why));
	tap_is_int(r, 403, "and no other host beside it");

	r = parse(&p, "GET http://api.example.com/v1?q=1 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && q.kind == EGRESS_REQ_FORWARD && q.port == 80 && !strcmp(q.path, "/v1?q=1"),
	       "plain HTTP to an allowed host is forwarded (%d %s)", r, why);
	egress_request_release(&q);
	r = parse(&p, "GET http://evil.example/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "evil.example:80"), "plain HTTP elsewhere: 403: %s", why);
	r = parse(&p, "GET http://u:p@api.example.com/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "a URL with user information: 400");
	r = parse(&p, "POST /r/simple/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &q, why,
		  sizeof(why));
	tap_ok(r == 405 && strstr(why, "GET"), "POST: 405 (%s)", why);
	r = parse(&p, "GET /r/simple/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &q, why,
		  sizeof(why));
	tap_is_int(r, 501, "a GET with a body: 501");
	r = parse(&p, "GET /x\x01y HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "a control character in the target: 400");
	r = parse(&p, "GET /x HTTP/1.1\r\nBad Header: x\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "a space in a header name: 400");
	r = parse(&p, "GET /x HTTP/1.1\r\nX: a\rb\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "a bare CR in a header: 400");
	r = parse(&p, "CONNECT api.example.com:443 HTTP/1.1\rx\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "a bare CR after the request line: 400");
	r = parse(&p, "GET /x HTTP/2\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "another version: 400");
	r = parse(&p, "\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 400, "an empty request line: 400");
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /", 5);
	big[sizeof(big) - 1] = '\0';
	r = parse(&p, big, &q, why, sizeof(why));
	tap_ok(r == 431 && strstr(why, "16384"), "a head over %d bytes: 431 (%s)", EGRESS_HEAD_MAX,
	       why);
	test_head_bytewise(&p);
	egress_policy_release(&p);
	egress_policy_release(&pypi);
}

/* A stand-in for the keys: alice's list is ALICE_LIST (NULL: none of her
 * own), bob's none, carol's lookup fails. */
static const char *alice_list;
static int stand_in_lookup(void *userdata, const char *owner, char *buf, size_t size)
{
	(void)userdata;
	if (!strcmp(owner, "carol"))
		return -EIO;
	if (!strcmp(owner, "bob"))
		return snprintf(buf, size, "none"), 1;
	if (!strcmp(owner, "alice") && alice_list)
		return (size_t)snprintf(buf, size, "%s", alice_list) < size ? 1 : -ENOBUFS;
	return 0;
}

static void test_tenant_policy(void)
{
	struct egress_policy a = policy("https://pypi.org/simple/", "api.example.com");
	struct egress_policy b = policy("https://pypi.org/simple/", "api.example.com");
	struct egress_policy c = policy("https://pypi.org/simple/", "api.example.com");
	struct egress_request q;
	char why[512];
	int r;

	alice_list = "127.0.0.1:9000,*.alice.example";
	tap_is_int(egress_policy_set_tenant(&a, "alice", stand_in_lookup, NULL), 0,
		   "alice's policy follows her list");
	r = parse(&a, "CONNECT 127.0.0.1:9000 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "alice reaches a host of her list");
	r = parse(&a, "CONNECT x.alice.example:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "and one under its wildcard");
	r = parse(&a, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "api.example.com:443") &&
		   strstr(why, "egress_allow of its tenant's API keys (127.0.0.1:9000,"
			       "*.alice.example)") &&
		   !strstr(why, "sandbox.egress_allow"),
	       "her list replaces sandbox.egress_allow: 403 naming her list: %s", why);
	r = parse(&a, "CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "the index's file host stays reachable");
	r = parse(&a, "GET /simple/numpy/ HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "and the index");
	egress_request_release(&q);

	tap_is_int(egress_policy_set_tenant(&b, "bob", stand_in_lookup, NULL), 0, "bob's: none");
	r = parse(&b, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "(none)"), "none: no host of sandbox.egress_allow: %s", why);
	r = parse(&b, "CONNECT pypi.org:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "but the index's host");

	alice_list = "api.example.com";
	egress_policy_follow(&a);
	r = parse(&a, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 1, "her list changed: the next request has the new one");
	r = parse(&a, "CONNECT 127.0.0.1:9000 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_is_int(r, 403, "and not the old");
	alice_list = NULL;
	egress_policy_follow(&a);
	r = parse(&a, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 1 && !a.list, "no list of her own: sandbox.egress_allow again");
	r = parse(&a, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && strstr(why, "sandbox.egress_allow"), "named as the setting: %s", why);
	alice_list = "bad..name";
	egress_policy_follow(&a);
	r = parse(&a, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && a.list && !strcmp(a.list, "none"),
	       "a list that does not parse allows no host (fail closed)");
	{
		static char longlist[SBX_EGRESS_LIST_MAX + 8];
		memset(longlist, 'a', sizeof(longlist) - 1);
		alice_list = longlist;
		egress_policy_follow(&a);
		tap_ok(a.list && !strcmp(a.list, "none"), "nor one too long for the lookup");
	}

	tap_is_int(egress_policy_set_tenant(&c, "carol", stand_in_lookup, NULL), 0,
		   "carol's lookup fails");
	r = parse(&c, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n", &q, why, sizeof(why));
	tap_ok(r == 403 && c.list && !strcmp(c.list, "none"),
	       "a failed lookup (the keys file cannot be used now) allows no host, not the list "
	       "last used (fail closed)");
	alice_list = NULL;
	egress_policy_release(&a);
	egress_policy_release(&b);
	egress_policy_release(&c);
}

/* ---- the index ---- */

static pid_t index_pid;
static int index_port, api_port, sink_port, spy_port, spy2_port;
static char index_root[] = "/tmp/sbx-egress-index-XXXXXX";

static const char *find_script(const char *argv0)
{
	static char path[PATH_MAX];
	const char *src = getenv("SBX_SRCDIR");
	char *slash;

	if (src) {
		snprintf(path, sizeof(path), "%s/tests/egress-index.py", src);
		if (access(path, R_OK) == 0)
			return path;
	}
	snprintf(path, sizeof(path), "%s", argv0);
	slash = strrchr(path, '/');
	if (slash) {
		snprintf(slash, sizeof(path) - (size_t)(slash - path), "/egress-index.py");
		if (access(path, R_OK) == 0)
			return path;
	}
	return access("tests/egress-index.py", R_OK) == 0 ? "tests/egress-index.py" : NULL;
}

static bool start_index(const char *script)
{
	int fds[2];
	char line[64];
	FILE *f;

	if (!script || !mkdtemp(index_root) || pipe(fds) < 0)
		return false;
	index_pid = fork();
	if (index_pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execlp("python3", "python3", script, index_root, USER, PASSWORD, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (f && fgets(line, sizeof(line), f))
		sscanf(line, "%d %d %d %d %d", &index_port, &api_port, &sink_port, &spy_port,
		       &spy2_port);
	if (f)
		fclose(f);
	return index_pid > 0 && index_port > 0 && api_port > 0 && sink_port > 0 && spy_port > 0;
}

static void stop_index(void)
{
	char rm[128];

	if (index_pid > 0) {
		kill(index_pid, SIGTERM);
		waitpid(index_pid, NULL, 0);
	}
	snprintf(rm, sizeof(rm), "rm -rf '%s'", index_root);
	if (system(rm) != 0)
		tap_diag("could not remove %s", index_root);
}

/* How many lines of the index's log NAME contain WHAT. */
static int log_count(const char *name, const char *what)
{
	char path[PATH_MAX], line[1024];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", index_root, name);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* How many lines of the index's request log contain WHAT. */
static int index_log_count(const char *what)
{
	return log_count("requests.log", what);
}

/* ---- in a sandbox ---- */

static bool install(sbx_manager *m, sbx_sandbox *sb, const char *spec, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_install_status st = {0};
	int r = sbx_sandbox_install(m, sb, spec, 120000, &st, &err);
	bool ok = r == 0 && st.state == SBX_INSTALL_SUCCESS;

	tap_ok(ok, "%s: install %s (%s)", what, spec, r < 0 ? err.msg : "");
	if (!ok && st.log_tail)
		tap_diag("%s", st.log_tail);
	sbx_install_status_release(&st);
	return ok;
}

/* Runs CODE in SB's interpreter and returns its stdout (owned; "" when the
 * call failed, which is a failed check). */
static char *py(sbx_manager *m, sbx_sandbox *sb, const char *code)
{
	struct sbx_run_result res;
	char *out = NULL;

	if (python(m, sb, code, &res) == 0) {
		out = strdup(res.out.data ? res.out.data : "");
		if (res.exit_code != 0)
			tap_diag("exit %d: %s", res.exit_code, res.err.data ? res.err.data : "");
	}
	sbx_run_result_release(&res);
	return out ? out : strdup("");
}

static struct sbx_egress_stats stats(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress_stats es;

	sbx_sandbox_egress_stats(m, sb, &es);
	return es;
}

/* Waits up to MS for the relay of SB to be stopped. */
static bool relay_stops(sbx_manager *m, sbx_sandbox *sb, int ms)
{
	int64_t until = sbx_monotonic_ms() + ms;

	while (stats(m, sb).running) {
		if (sbx_monotonic_ms() > until)
			return false;
		usleep(50 * 1000);
	}
	return true;
}

/* The main manager's egress deadlines (test_engine), shorter than the
 * defaults so that the cases which wait them out are quick; each still
 * leaves a loaded machine room for a real relay's start and an install. */
#define HELLO_S 6      /* sandbox.egress_hello_timeout */
#define HEAD_S 4       /* sandbox.egress_head_timeout */
#define WRITE_S 10     /* sandbox.egress_write_timeout */
#define LOW_SPEED_S 10 /* sandbox.egress_low_speed_time */
#define PAGE_S 20      /* sandbox.egress_page_timeout */

/* Whether the relay process PID is gone from SB within 10 s. */
static bool relay_gone(sbx_manager *m, sbx_sandbox *sb, long pid)
{
	char code[512];
	_cleanup_free_ char *out = NULL;

	snprintf(code, sizeof(code),
		 "import time\n"
		 "def alive():\n"
		 "    try:\n"
		 "        return b'sbx-relay' in open('/proc/%ld/cmdline', 'rb').read()\n"
		 "    except OSError:\n"
		 "        return False\n"
		 "end = time.time() + 10\n"
		 "while alive() and time.time() < end:\n"
		 "    time.sleep(0.05)\n"
		 "print('alive' if alive() else 'gone')\n",
		 pid);
	out = py(m, sb, code);
	return strstr(out, "gone") != NULL;
}

static int relay_port(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int port = 0, r = sbx_sandbox_egress_ensure(m, sb, &port, &err);

	tap_call(r, err.msg, "the relay runs (port %d)", port);
	return port;
}

/* Python (a format taking the relay's port): raw(REQ) sends REQ to the
 * relay and returns the socket and the answer (a tunnel's head only). */
static const char raw_py[] =
    "import socket\n"
    "def raw(req, port=%d):\n"
    "    s = socket.create_connection(('127.0.0.1', port), timeout=30)\n"
    "    s.sendall(req)\n"
    "    data = b''\n"
    "    while True:\n"
    "        b = s.recv(65536)\n"
    "        if not b:\n"
    "            break\n"
    "        data += b\n"
    "        if data.startswith(b'HTTP/1.1 200 Connection') and data.endswith(b'\\r\\n\\r\\n'):\n"
    "            break\n"
    "    return s, data\n"
    /* The test's hosts are on the server's 127.0.0.1, which the sandbox's
     * NO_PROXY (its own loopback) sends direct: lifted while one runs. */
    "import contextlib, os\n"
    "@contextlib.contextmanager\n"
    "def via_proxy():\n"
    "    saved = {k: os.environ.pop(k) for k in ('no_proxy', 'NO_PROXY') if k in os.environ}\n"
    "    try:\n"
    "        yield\n"
    "    finally:\n"
    "        os.environ.update(saved)\n";

static void test_password_nowhere(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_install_status st = {0};
	struct sbx_exec_result res = {0};
	_cleanup_free_ char *cid = strdup(sb->container);
	/* As the sandbox's user (the one code in it runs as, and pip, and the
	 * relay), while an install runs: the environment and command line of
	 * every process, then every file it can read where a sandbox or pip
	 * writes. The patterns come on stdin, so no command line holds them. */
	static const char scan[] =
	    "import os, sys, time\n"
	    "pats = [l.encode() for l in sys.stdin.read().split('\\n') if l]\n"
	    "hits, pips, relayed = set(), 0, 0\n"
	    "end = time.time() + 8\n"
	    "while time.time() < end:\n"
	    "    for p in os.listdir('/proc'):\n"
	    "        if not p.isdigit() or int(p) == os.getpid():\n"
	    "            continue\n"
	    "        for what in ('environ', 'cmdline'):\n"
	    "            try:\n"
	    "                data = open(f'/proc/{p}/{what}', 'rb').read()\n"
	    "            except OSError:\n"
	    "                continue\n"
	    "            if what == 'cmdline' and b'pip' in data and b'install' in data:\n"
	    "                pips += 1\n"
	    "            if what == 'environ' and b'PIP_INDEX_URL=http://127.0.0.1:' in data:\n"
	    "                relayed += 1\n"
	    "            for pat in pats:\n"
	    "                if pat in data:\n"
	    "                    hits.add(f'/proc/{p}/{what}')\n"
	    "    time.sleep(0.02)\n"
	    "for top in ('/home', '/tmp', '/app', '/opt', '/etc', '/root', '/var', '/usr/local'):\n"
	    "    for d, _, files in os.walk(top):\n"
	    "        for f in files:\n"
	    "            path = os.path.join(d, f)\n"
	    "            try:\n"
	    "                if os.path.islink(path) or os.path.getsize(path) > 64 << 20:\n"
	    "                    continue\n"
	    "                data = open(path, 'rb').read()\n"
	    "            except OSError:\n"
	    "                continue\n"
	    "            for pat in pats:\n"
	    "                if pat in data:\n"
	    "                    hits.add(path)\n"
	    "print('pips', pips, 'relayed', relayed, 'hits', sorted(hits))\n";
	const char *const argv[] = {"python3", "-c", scan, NULL};
	/* The password, the user:password pair and its basic-auth form. */
	const char *pats = PASSWORD "\n" USER ":" PASSWORD "\n"
				    "ZWdyZXNzdXNlcjpwdy1acTgxdlhrMi1zM2NyM3QtZWdyZXNz\n";
	struct sbx_exec_spec spec = {.argv = argv,
				     .user = "1000:1000",
				     .timeout_ms = 120000,
				     .output_cap = 65536,
				     .stdin_data = pats,
				     .stdin_len = strlen(pats)};
	int r;

	r = sbx_sandbox_install(m, sb, "sbxdemo4", 0, &st, &err);
	tap_ok(r == 0, "an install starts in the background (%s)", err.msg);
	sbx_install_status_release(&st);
	r = sbx_exec(engine, cid, &spec, &res, &err);
	if (tap_call(r, err.msg, "scan the sandbox while pip runs")) {
		const char *o = res.out.data ? res.out.data : "";
		tap_ok(strstr(o, "hits []") != NULL,
		       "the password is in no process's environment or command line, and in no "
		       "file: %s",
		       o);
		tap_ok(strstr(o, "pips 0 ") == NULL && strstr(o, "relayed 0 ") == NULL,
		       "the scan saw pip running, with the relay's index URL: %s", o);
	}
	sbx_exec_result_release(&res);
	for (int i = 0; i < 600; i++) {
		if (sbx_sandbox_install_status(m, sb, "sbxdemo4", &st, &err) < 0 ||
		    st.state != SBX_INSTALL_RUNNING)
			break;
		sbx_install_status_release(&st);
		usleep(200 * 1000);
	}
	tap_is_int(st.state, SBX_INSTALL_SUCCESS, "that install succeeded");
	sbx_install_status_release(&st);
}

static void test_egress_allow(sbx_manager *m, sbx_sandbox *sb, int port)
{
	char code[8192], pre[1024];
	_cleanup_free_ char *out = NULL;

	snprintf(pre, sizeof(pre), raw_py, port);
	snprintf(
	    code, sizeof(code),
	    "%s"
	    "import urllib.request\n"
	    "_, a = raw(b'CONNECT evil.example:443 HTTP/1.1\\r\\nHost: "
	    "evil.example:443\\r\\n\\r\\n')\n"
	    "print('A', a.split(b'\\r\\n')[0].decode(), a.split(b'\\r\\n\\r\\n', 1)[1].decode())\n"
	    "_, b = raw(b'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\n\\r\\n')\n"
	    "print('B', b.split(b'\\r\\n')[0].decode(), b'127.0.0.1:9' in b)\n"
	    "s, c = raw(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
	    "s.sendall(b'GET /tunnelled HTTP/1.0\\r\\n\\r\\n')\n"
	    "d = b''\n"
	    "while True:\n"
	    "    x = s.recv(65536)\n"
	    "    if not x:\n"
	    "        break\n"
	    "    d += x\n"
	    "print('C', c.split(b'\\r\\n')[0].decode(), b'egress-api-ok /tunnelled' in d)\n"
	    "o = urllib.request.build_opener(urllib.request.ProxyHandler("
	    "{'http': 'http://127.0.0.1:%d'}))\n"
	    "with via_proxy():\n"
	    "    print('D', o.open('http://127.0.0.1:%d/proxied', "
	    "timeout=30).read().decode().strip())\n"
	    "    try:\n"
	    "        o.open('http://127.0.0.1:9/x', timeout=30)\n"
	    "    except urllib.error.HTTPError as e:\n"
	    "        print('E', e.code, '127.0.0.1:9' in e.read().decode())\n"
	    "_, f = raw(b'POST /simple/ HTTP/1.1\\r\\nContent-Length: 0\\r\\n\\r\\n')\n"
	    "print('F', f.split(b'\\r\\n')[0].decode())\n"
	    "_, g = raw(b'GET /simple/sbxdemo/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
	    "print('G', g.split(b'\\r\\n')[0].decode(), b'sbxdemo-1.0' in g)\n"
	    "try:\n"
	    "    socket.create_connection(('127.0.0.1', %d), timeout=5)\n"
	    "    print('H reached')\n"
	    "except OSError as e:\n"
	    "    print('H', type(e).__name__)\n"
	    "_, j = raw(b'CONNECT localhost:%d HTTP/1.1\\r\\n\\r\\n')\n"
	    "print('J', j.split(b'\\r\\n')[0].decode(), b'loopback' in j, "
	    "b'sandbox.egress_allow' in j, b'127.0.0.1:%d' in j or b'[::1]:%d' in j)\n"
	    "print('JM', j.split(b'\\r\\n\\r\\n', 1)[-1].decode().strip())\n"
	    "with via_proxy():\n"
	    "    try:\n"
	    "        o.open('http://localhost:%d/named', timeout=30)\n"
	    "        print('K reached')\n"
	    "    except urllib.error.HTTPError as e:\n"
	    "        print('K', e.code, 'loopback' in e.read().decode())\n"
	    "for i, t in enumerate((b'/simple/../secret.txt', b'/simple/%%2e%%2e/secret.txt', "
	    "b'/other', b'/simple/..%%2fsecret.txt', b'http://127.0.0.1:%d/simple/../secret.txt', "
	    "b'/packages/../secret.txt')):\n"
	    "    _, x = raw(b'GET ' + t + b' HTTP/1.1\\r\\n\\r\\n')\n"
	    "    print('I%%d' %% i, x.split(b'\\r\\n')[0].decode(), b'/simple/' in x, "
	    "b'secret-of-the-index' in x)\n",
	    pre, api_port, port, api_port, index_port, api_port, api_port, api_port, api_port,
	    port);
	out = py(m, sb, code);
	tap_ok(strstr(out, "A HTTP/1.1 403 Forbidden") && strstr(out, "evil.example:443") &&
		   strstr(out, "sandbox.egress_allow"),
	       "CONNECT to a host not allowed: 403 naming the host and sandbox.egress_allow");
	tap_ok(strstr(out, "B HTTP/1.1 403 Forbidden True") != NULL,
	       "CONNECT to an unlisted port of 127.0.0.1: 403 naming it");
	tap_ok(strstr(out, "C HTTP/1.1 200 Connection established True") != NULL,
	       "CONNECT to a host:port in egress_allow: a tunnel to it");
	tap_ok(strstr(out, "D egress-api-ok /proxied") != NULL,
	       "plain HTTP through the relay as a proxy to an allowed host (urllib)");
	tap_ok(strstr(out, "E 403 True") != NULL, "and to another: 403 naming it");
	tap_ok(strstr(out, "F HTTP/1.1 405") != NULL, "POST through the relay: 405");
	tap_ok(strstr(out, "G HTTP/1.1 200 OK True") != NULL,
	       "sandbox code gets the index's pages through the relay (the server adds the "
	       "credentials)");
	tap_ok(strstr(out, "H ConnectionRefusedError") != NULL,
	       "but cannot reach the index's port itself: the sandbox has no network");
	if (!strstr(out, "H ConnectionRefusedError"))
		tap_diag("%s", out);
	{
		int refused = 0;
		for (int i = 0; i < 6; i++) {
			char want[192];
			snprintf(want, sizeof(want),
				 "I%d HTTP/1.1 403 " EGRESS_INDEX_REFUSED_PHRASE " True False", i);
			refused += strstr(out, want) != NULL;
		}
		tap_is_int(refused, 6,
			   "paths outside /simple/ and /packages/ or with dot segments (direct, "
			   "%%2e, encoded slash, absolute URL): 403 naming the index's path");
		if (refused != 6)
			tap_diag("%s", out);
	}
	tap_ok(strstr(out, "J HTTP/1.1 403 Forbidden True True True") != NULL,
	       "CONNECT to localhost:PORT, allowed by name: 403, it resolves to loopback (the "
	       "message names the class and the IP literal to allow)");
	{
		const char *jm = strstr(out, "JM ");
		tap_diag("%.*s", jm ? (int)strcspn(jm, "\n") : 0, jm ? jm : "");
	}
	tap_ok(strstr(out, "K 403 True") != NULL, "plain HTTP to it likewise");
	tap_ok(index_log_count("secret") == 0 && index_log_count("/other") == 0,
	       "and the index never saw them (it logs every request)");
}

/* Writes PAYLOAD into the relay's own output, as code in the sandbox can:
 * the relay's protocol fds are the pipes at 100 (in) and 101 (out),
 * reachable through /proc as the sandbox's user (its pid is the one the
 * server has). PAYLOAD is a Python bytes
 * expression, or statements that set `data` and perhaps `flood` (written
 * after a second, again and again, for at most 20 s and 64 MiB, until the
 * relay is gone: the server closed its stream; "relay gone" then). */
static char *hijack(sbx_manager *m, sbx_sandbox *sb, const char *payload)
{
	char code[4096];
	bool stmts = strstr(payload, "\n") != NULL;

	snprintf(code, sizeof(code),
		 "import errno, os, struct, time\n"
		 "pid = %ld\n"
		 "fd = os.open(f'/proc/{pid}/fd/101', os.O_WRONLY | os.O_NONBLOCK)\n"
		 "H = struct.Struct('>BBHI')\n"
		 "flood = b''\n"
		 "%s%s\n"
		 "def put(b, until):\n"
		 "    while b:\n"
		 "        try:\n"
		 "            b = b[os.write(fd, b):]\n"
		 "        except BlockingIOError:\n"
		 "            if time.time() > until:\n"
		 "                return False\n"
		 "            time.sleep(0.01)\n"
		 "        except BrokenPipeError:\n"
		 "            return False\n"
		 "    return True\n"
		 "put(data, time.time() + 10)\n"
		 "sent, end = 0, time.time() + 20\n"
		 "if flood:\n"
		 "    time.sleep(1)\n"
		 "    while sent < 64 << 20 and os.path.exists(f'/proc/{pid}') and put(flood, "
		 "min(end, time.time() + 3)):\n"
		 "        sent += len(flood)\n"
		 "print('written', len(data), 'flood', sent, 'relay gone' if flood and not "
		 "os.path.exists(f'/proc/{pid}') else '')\n",
		 stats(m, sb).pid, stmts ? "" : "data = ", payload);
	return py(m, sb, code);
}

/* A relay that stops reading its input (code in the sandbox stops it) while
 * a download is pushed to it, with a window it granted itself: the pump's
 * writes to the engine stream do not block it, and a batch not read within
 * WRITE_S stops the relay (counted and logged), its process killed. */
static void test_deaf(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress_stats before, after;
	char path[PATH_MAX], code[2048];
	_cleanup_free_ char *out = NULL;
	FILE *f;
	bool made = false;

	snprintf(path, sizeof(path), "%s/packages/big.bin", index_root);
	f = fopen(path, "we");
	if (f) {
		static char chunk[1 << 20];
		memset(chunk, 'x', sizeof(chunk));
		made = true;
		for (int i = 0; i < 64; i++)
			made &= fwrite(chunk, 1, sizeof(chunk), f) == sizeof(chunk);
		made &= fclose(f) == 0;
	}
	if (!tap_ok(made, "a file of 64 MiB on the index"))
		return;
	relay_port(m, sb);
	before = stats(m, sb);
	snprintf(code, sizeof(code),
		 "import os, signal, struct\n"
		 "pid = %ld\n"
		 "fd = os.open(f'/proc/{pid}/fd/101', os.O_WRONLY)\n"
		 "H = struct.Struct('>BBHI')\n"
		 "os.kill(pid, signal.SIGSTOP)\n"
		 "req = b'GET /packages/big.bin HTTP/1.1\\r\\n\\r\\n'\n"
		 "os.write(fd, H.pack(2, 0, 7000, 0) + H.pack(5, 0, 7000, 4) + "
		 "struct.pack('>I', 1 << 30) + H.pack(3, 0, 7000, len(req)) + req)\n"
		 "print('stopped', pid)\n",
		 before.pid);
	out = py(m, sb, code);
	tap_ok(strstr(out, "stopped") != NULL,
	       "sandbox code stops the relay, then asks for the "
	       "file with a window of 1 GiB in its place (%s)",
	       out);
	tap_ok(relay_stops(m, sb, 60000), "the relay that does not read is stopped (within 60 s)");
	after = stats(m, sb);
	tap_is_int((int)(after.protocol_errors - before.protocol_errors), 1,
		   "as a relay that broke the protocol (logged: it did not read)");
	tap_ok(relay_gone(m, sb, before.pid), "and its process is gone (pid %ld)", before.pid);
	unlink(path);
}

static void test_hostile(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress_stats before, after;
	char code[8192];
	char *out = NULL;
	int port;

	/* A frame header announcing 2 GiB. */
	relay_port(m, sb);
	before = stats(m, sb);
	free(hijack(m, sb, "H.pack(3, 0, 1, 0x7fffffff)"));
	tap_ok(relay_stops(m, sb, 30000), "a frame of 2 GiB from the relay: the relay is stopped");
	after = stats(m, sb);
	tap_is_int((int)(after.protocol_errors - before.protocol_errors), 1, "as a protocol error");
	tap_ok(relay_gone(m, sb, before.pid), "and its process is gone (pid %ld)", before.pid);

	relay_port(m, sb);
	before = stats(m, sb);
	free(hijack(m, sb, "b'\\xff' * 64"));
	tap_ok(relay_stops(m, sb, 30000), "garbage: the relay is stopped");
	tap_ok(relay_gone(m, sb, before.pid), "and its process is gone");

	/* Past a stream's window: a tunnel to a host that reads nothing, then
	 * DATA on it regardless of WINDOW, until the server's socket buffers are
	 * full and the window is spent (without the check, the server would
	 * keep all 64 MiB). */
	relay_port(m, sb);
	before = stats(m, sb);
	snprintf(code, sizeof(code),
		 "c = b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n'\n"
		 "data = H.pack(2, 0, 4000, 0) + H.pack(3, 0, 4000, len(c)) + c\n"
		 "flood = (H.pack(3, 0, 4000, 32768) + b'A' * 32768) * 32\n",
		 sink_port);
	out = hijack(m, sb, code);
	after = stats(m, sb);
	tap_ok(strstr(out, "relay gone") && relay_stops(m, sb, 30000) &&
		   after.protocol_errors == before.protocol_errors + 1,
	       "DATA past a stream's window: the relay is stopped (%s)", out);
	free(out);
	out = NULL;

	/* A head of about 16 KiB in DATA frames of a byte each: each byte is
	 * looked at about once (not rescanned with every frame: 134 million). */
	relay_port(m, sb);
	before = stats(m, sb);
	out = hijack(m, sb,
		     "h = b'GET /simple/ HTTP/1.1\\r\\n' + b''.join(b'X-Pad: %0200d\\r\\n' % i for "
		     "i in range(75)) + b'\\r\\n'\n"
		     "data = H.pack(2, 0, 4100, 0) + b''.join(H.pack(3, 0, 4100, 1) + h[i:i + 1] "
		     "for i in range(len(h)))\n");
	usleep(1000 * 1000);
	after = stats(m, sb);
	tap_ok(after.running && after.streams == before.streams + 1 &&
		   after.refused == before.refused &&
		   after.head_scanned - before.head_scanned <= 16384,
	       "a head of 15 KiB a byte per frame: accepted after %llu offsets tried (%s)",
	       (unsigned long long)(after.head_scanned - before.head_scanned), out);
	free(out);
	out = NULL;

	/* 300 streams opened at once: 16 are taken, the rest refused without
	 * state; the relay goes on. */
	relay_port(m, sb);
	before = stats(m, sb);
	out = hijack(m, sb, "b''.join(H.pack(2, 0, 20000 + i, 0) for i in range(300))");
	usleep(500 * 1000);
	after = stats(m, sb);
	tap_ok(after.running, "300 streams opened at once: the relay still runs");
	tap_ok(after.open <= 16 && after.refused - before.refused >= 284,
	       "16 are carried (%zu open), the others refused (%llu)", after.open,
	       (unsigned long long)(after.refused - before.refused));
	free(out);
	out = NULL;

	/* From a client's side: 30 connections that send nothing (slow-loris). */
	port = relay_port(m, sb);
	snprintf(code, sizeof(code),
		 "import socket, time\n"
		 "time.sleep(%d)\n" /* the flood's streams time out first */
		 "socks = [socket.create_connection(('127.0.0.1', %d), timeout=30) for _ in "
		 "range(30)]\n"
		 "socks[0].sendall(b'GET /simple/ HT')\n"
		 "t = time.time()\n"
		 "answers = []\n"
		 "for s in socks:\n"
		 "    d = b''\n"
		 "    while True:\n"
		 "        b = s.recv(4096)\n"
		 "        if not b:\n"
		 "            break\n"
		 "        d += b\n"
		 "    answers.append(d.split(b'\\r\\n')[0].decode())\n"
		 "print('busy', sum('503' in a for a in answers), 'slow', "
		 "sum('408' in a for a in answers), 'after', int(time.time() - t))\n"
		 "print([a for a in answers if '503' not in a and '408' not in a])\n",
		 HEAD_S + 1, port);
	free(out);
	out = py(m, sb, code);
	tap_ok(strstr(out, "busy 14 slow 16") != NULL,
	       "30 idle connections: 14 refused at once (503), 16 answered 408 after %d s: %s",
	       HEAD_S, out);

	/* The server keeps serving: the next install starts a relay again. */
	install(m, sb, "sbxdemo3", "after the hostile relays");
	after = stats(m, sb);
	tap_ok(after.running && after.open == 0, "its relay runs, with no stream left open");
	free(out);
}

/* Sandbox code makes its own relay: python3 is first found in the venv, whose
 * bin it owns. fake_relay puts a wrapper there that runs SRC (the body of a
 * Python list of source lines) when called as the relay and the real python3
 * otherwise, and kills the running relay; real_relay puts python3 back. */
static void fake_relay(sbx_manager *m, sbx_sandbox *sb, const char *src, const char *what)
{
	_cleanup_free_ char *code = NULL, *out = NULL;

	if (asprintf(&code,
		     "import os, signal\n"
		     "src = [\n%s]\n"
		     "open('/tmp/fake_relay.py', 'w').write(chr(10).join(src) + chr(10))\n"
		     "sh = ['#!/bin/sh', 'for a in \"$@\"; do [ \"$a\" = sbx-relay ] && exec "
		     "/usr/bin/python3 /tmp/fake_relay.py; done', "
		     "'exec /opt/venv/bin/python3.real \"$@\"']\n"
		     "if not os.path.exists('/opt/venv/bin/python3.real'):\n"
		     "    os.rename('/opt/venv/bin/python3', '/opt/venv/bin/python3.real')\n"
		     "open('/opt/venv/bin/python3', 'w').write(chr(10).join(sh) + chr(10))\n"
		     "os.chmod('/opt/venv/bin/python3', 0o755)\n"
		     "n = 0\n"
		     "for p in os.listdir('/proc'):\n"
		     "    try:\n"
		     "        if p.isdigit() and b'sbx-relay' in open(f'/proc/{p}/cmdline', "
		     "'rb').read():\n"
		     "            os.kill(int(p), signal.SIGKILL)\n"
		     "            n += 1\n"
		     "    except OSError:\n"
		     "        pass\n"
		     "print('faked, killed', n)\n",
		     src) < 0)
		abort();
	out = py(m, sb, code);
	tap_ok(strstr(out, "faked, killed 1") != NULL,
	       "%s: sandbox code puts its own python3 first and kills the relay (%s)", what, out);
	tap_ok(relay_stops(m, sb, 30000), "%s: the server sees the relay end", what);
}

static void real_relay(sbx_manager *m, sbx_sandbox *sb, const char *what)
{
	_cleanup_free_ char *back = py(m, sb,
				       "import os\n"
				       "os.replace('/opt/venv/bin/python3.real', "
				       "'/opt/venv/bin/python3')\n"
				       "print('restored')\n");

	tap_ok(strstr(back, "restored") != NULL, "%s: sandbox code puts python3 back (%s)", what,
	       back);
	tap_ok(relay_port(m, sb) == 3128, "%s: and the next start is the real relay's", what);
}

/* A relay whose start fails after its hello (here: it says a port other than
 * 3128) may have sent more frames with it, in the same write: OPEN and a
 * request. None of them is acted on before the pump runs, so the failed
 * start leaves no stream and no worker (one fetching while its record was
 * freed was a use after free), and the index never sees the request. */
static void test_early_frames(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int port = 0, r;

	fake_relay(
	    m, sb,
	    "    'import json, os, struct, time',\n"
	    "    \"H = struct.Struct('>BBHI')\",\n"
	    "    \"hello = json.dumps({'v': 1, 'port': 1, 'pid': os.getpid()}).encode()\",\n"
	    "    \"req = b'GET /simple/early-marker/ HTTP/1.1' + bytes([13, 10, 13, 10])\",\n"
	    "    'os.write(1, H.pack(1, 0, 0, len(hello)) + hello + H.pack(2, 0, 1, 0) + '\n"
	    "    'H.pack(3, 0, 1, len(req)) + req)',\n"
	    "    'time.sleep(5)',\n",
	    "early frames");
	r = sbx_sandbox_egress_ensure(m, sb, &port, &err);
	tap_ok(r < 0 && strstr(err.msg, "port 1, not 3128"),
	       "a relay saying port 1 with OPEN and a request in its hello's write: the start "
	       "fails (%d %s)",
	       r, err.msg);
	usleep(2000 * 1000);
	tap_is_int((int)stats(m, sb).open, 0, "no stream is open after the failed start");
	tap_is_int(index_log_count("early-marker"), 0,
		   "and the request that came with the hello never reached the index");
	real_relay(m, sb, "early frames");
}

/* The wait for a relay's hello ends at its deadline (HELLO_S) whatever the relay
 * writes meanwhile, so a relay that chatters on its stderr and never says hello
 * holds the start, and the sandbox's start_lock that every code call and
 * install of the sandbox takes, for HELLO_S only. This fake chatters for
 * HELLO_S + 9 s and ends: a start that waited for it fails with -EPIPE then. (A read after
 * the deadline is not even tried, 02272f2; that one line is not caught here:
 * through the engine the server's reads outpace any writer, so a poll(0) after
 * the deadline finds nothing and times out even without it.) */
static void test_chatty_hello(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char src[512];
	int port = 0, r;
	int64_t t0, ms;

	snprintf(src, sizeof(src),
		 "    'import os, time',\n"
		 "    't0 = time.time()',\n"
		 "    'while time.time() < t0 + %d:',\n"
		 "    \"    os.write(2, b'chatter ' * 8)\",\n"
		 "    '    time.sleep(0.005)',\n",
		 HELLO_S + 9);
	fake_relay(m, sb, src, "chatty relay");
	t0 = sbx_monotonic_ms();
	r = sbx_sandbox_egress_ensure(m, sb, &port, &err);
	ms = sbx_monotonic_ms() - t0;
	tap_ok(r == -ETIMEDOUT && strstr(err.msg, "did not start") && ms < (HELLO_S + 8) * 1000,
	       "a relay writing its stderr without end and no hello: the start fails at the "
	       "hello's deadline (%d after %lld ms: %.120s)",
	       r, (long long)ms, err.msg);
	real_relay(m, sb, "chatty relay");
}

static void test_killed(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress_stats before = stats(m, sb), after;
	_cleanup_free_ char *out = NULL, *again = NULL;

	out = py(
	    m, sb,
	    "import os, signal\n"
	    "n = 0\n"
	    "for p in os.listdir('/proc'):\n"
	    "    try:\n"
	    "        if p.isdigit() and b'sbx-relay' in open(f'/proc/{p}/cmdline', 'rb').read():\n"
	    "            os.kill(int(p), signal.SIGKILL)\n"
	    "            n += 1\n"
	    "    except OSError:\n"
	    "        pass\n"
	    "print('killed', n)\n");
	tap_ok(strstr(out, "killed 1") != NULL, "sandbox code kills the relay (%s)", out);
	tap_ok(relay_stops(m, sb, 30000), "the server sees it end");
	if (install(m, sb, "sbxdemo2", "after the kill")) {
		again = py(m, sb, "import sbxdemo2\nprint('value', sbxdemo2.VALUE)\n");
		tap_ok(strstr(again, "value 7") != NULL, "sbxdemo2 imports");
	}
	after = stats(m, sb);
	tap_ok(after.running && after.relays == before.relays + 1,
	       "the install started a new relay (%llu relays)", (unsigned long long)after.relays);
}

/* Fetches the index cut off: a file under 1 KiB/s after LOW_SPEED_S, a page
 * still coming after PAGE_S (both 1 MiB that would take minutes); run beside
 * test_parallel, without TAP output (another thread writes it). */
struct slow {
	sbx_manager *m;
	sbx_sandbox *sb;
	int port;
	char *out;
};

static void *slow_fetches(void *arg)
{
	struct slow *w = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_opts o = {.timeout_ms = 180000};
	struct sbx_run_result res = {0};
	char code[2048];

	snprintf(code, sizeof(code),
		 "import socket, threading, time\n"
		 "res = {}\n"
		 "def get(name, path):\n"
		 "    s = socket.create_connection(('127.0.0.1', %d), timeout=170)\n"
		 "    s.sendall(b'GET ' + path + b' HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
		 "    t, n, first = time.time(), 0, b''\n"
		 "    while True:\n"
		 "        b = s.recv(65536)\n"
		 "        if not b:\n"
		 "            break\n"
		 "        first += b[:200] if len(first) < 200 else b''\n"
		 "        n += len(b)\n"
		 "    res[name] = (int(time.time() - t), n, first.split(b'\\r\\n')[0].decode())\n"
		 "ts = [threading.Thread(target=get, args=a) for a in (('trickle', "
		 "b'/packages/trickle.whl'), ('page', b'/simple/slowpage/'))]\n"
		 "[t.start() for t in ts]\n"
		 "[t.join() for t in ts]\n"
		 "for k in ('trickle', 'page'):\n"
		 "    print(k, *res.get(k, ('-', '-', '-')))\n",
		 w->port);
	if (sbx_sandbox_run_python_ex(w->m, w->sb, code, &o, &res, &err) == 0)
		w->out = strdup(res.out.data ? res.out.data : "");
	else
		w->out = strdup(err.msg);
	sbx_run_result_release(&res);
	return NULL;
}

static void check_slow(const char *out)
{
	int tt = -1, tn = -1, pt = -1, pn = -1;
	const char *t = strstr(out, "trickle "), *p = strstr(out, "page ");
	bool t_ok, p_ok;

	if (t)
		sscanf(t, "trickle %d %d", &tt, &tn);
	if (p)
		sscanf(p, "page %d %d", &pt, &pn);
	t_ok = tt >= LOW_SPEED_S - 2 && tt <= LOW_SPEED_S + 20;
	p_ok = pt >= PAGE_S - 2 && pt <= PAGE_S + 20;

	tap_ok(t_ok && tn >= 0 && tn < (1 << 20),
	       "a file arriving at 200 B/s is cut off after %d s under 1 KiB/s (%d s, %d bytes)",
	       LOW_SPEED_S, tt, tn);
	tap_ok(p_ok && pn > PAGE_S / 2 * 4000 && pn < (1 << 20),
	       "a page arriving at 4 KB/s is cut off %d s after its request (%d s, %d bytes)",
	       PAGE_S, pt, pn);
	if (!t_ok || !p_ok)
		tap_diag("%s", out);
}

/* Runs CMD in a shell in SB: its stdout and stderr (owned), and the
 * result's notice in *RET_NOTICE (owned, may be NULL; RET_NOTICE may be NULL). */
static char *sh(sbx_manager *m, sbx_sandbox *sb, const char *cmd, char **ret_notice)
{
	struct sbx_run_result res;
	char *out = NULL;

	if (ret_notice)
		*ret_notice = NULL;
	if (shell(m, sb, cmd, &res) == 0) {
		if (asprintf(&out, "%s%s", res.out.data ? res.out.data : "",
			     res.err.data ? res.err.data : "") < 0)
			out = NULL;
		if (ret_notice && res.notice)
			*ret_notice = strdup(res.notice);
	}
	sbx_run_result_release(&res);
	return out ? out : strdup("");
}

/* Python that kills the relay from inside (its argv holds "sbx-relay"). */
static const char kill_relay_py[] =
    "import os, signal\n"
    "n = 0\n"
    "for p in os.listdir('/proc'):\n"
    "    try:\n"
    "        if p.isdigit() and b'sbx-relay' in open(f'/proc/{p}/cmdline', "
    "'rb').read().split(b'\\0'):\n"
    "            os.kill(int(p), signal.SIGKILL)\n"
    "            n += 1\n"
    "    except OSError:\n"
    "        pass\n"
    "print('killed', n)\n";

/* Python code that kills the relay and puts another process on its port
 * 3128 (a stale relay: one with the relay's marker in its command line), all
 * in one call: the call's relay check comes before it, and the next call's
 * after the server has seen the relay end (relay_stops), so which of the two
 * starts a relay does not depend on when the engine reports its end. */
static const char *squat_py(bool stale)
{
	static char code[2048];

	snprintf(code, sizeof(code),
		 "import os, signal, socket, subprocess, sys, time\n"
		 "%s"
		 "squatter = subprocess.Popen([sys.executable, '-c', 'import socket, time\\n"
		 "s = socket.socket()\\n"
		 "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\\n"
		 "end = time.time() + 10\\n"
		 "while True:\\n"
		 "    try:\\n"
		 "        s.bind((\"127.0.0.1\", 3128))\\n"
		 "        break\\n"
		 "    except OSError:\\n"
		 "        if time.time() > end: raise\\n"
		 "        time.sleep(0.02)\\n"
		 "s.listen()\\n"
		 "open(\"/tmp/squatting\", \"w\").close()\\n"
		 "time.sleep(600)'%s], start_new_session=True)\n"
		 "end = time.time() + 10\n"
		 "while time.time() < end and squatter.poll() is None and "
		 "not os.path.exists('/tmp/squatting'):\n"
		 "    time.sleep(0.02)\n"
		 "if os.path.exists('/tmp/squatting'):\n"
		 "    os.unlink('/tmp/squatting')\n"
		 "print('squatting 3128' if squatter.poll() is None else 'no squatter')\n",
		 kill_relay_py, stale ? ", 'sbx-relay'" : "");
	return code;
}

/* A shell command: how many relays run in the sandbox. */
static const char count_relays_sh[] =
    "python3 -c \"import os; print('relays', sum(1 for p in os.listdir('/proc') if "
    "p.isdigit() and p != str(os.getpid()) and b'sbx-relay' in "
    "open('/proc/'+p+'/cmdline','rb').read().split(b'\\0')))\"";

/* Sandbox code (sandbox.network = none) reaches the index and egress_allow
 * with nothing but the environment every process of the sandbox has. */
static void test_code_egress(sbx_manager *m, sbx_sandbox *sb)
{
	char cmd[4096];
	_cleanup_free_ char *env = NULL, *out = NULL, *scan = NULL, *again = NULL, *refused = NULL,
			    *note = NULL;
	struct sbx_egress_stats before, after;
	int64_t t0;

	env = sh(m, sb, "env", NULL);
	tap_ok(strstr(env, "HTTP_PROXY=http://127.0.0.1:3128\n") &&
		   strstr(env, "HTTPS_PROXY=http://127.0.0.1:3128\n") &&
		   strstr(env, "http_proxy=http://127.0.0.1:3128\n") &&
		   strstr(env, "https_proxy=http://127.0.0.1:3128\n") &&
		   strstr(env, "NO_PROXY=127.0.0.1,localhost\n") &&
		   strstr(env, "no_proxy=127.0.0.1,localhost\n") &&
		   strstr(env, "PIP_INDEX_URL=http://127.0.0.1:3128/simple/\n") &&
		   strstr(env, "PIP_NO_INPUT=1\n"),
	       "env in a shell command shows the proxy variables on the relay's port 3128");
	tap_ok(!strstr(env, PASSWORD) && !strstr(env, USER), "and no credentials");
	if (!strstr(env, "HTTP_PROXY="))
		tap_diag("%s", env);

	/* A fresh process of a shell command: urllib with the environment's
	 * proxies (NO_PROXY lifted: the test's hosts are the server's
	 * 127.0.0.1), plain HTTP and a CONNECT tunnel, and a refused host. */
	snprintf(cmd, sizeof(cmd),
		 "NO_PROXY= no_proxy= python3 -c \"\n"
		 "import http.client, os, urllib.request, urllib.error\n"
		 "print('A', urllib.request.urlopen('http://127.0.0.1:%d/shell', "
		 "timeout=30).read().decode().strip())\n"
		 "try:\n"
		 "    urllib.request.urlopen('http://refused.example/x', timeout=30)\n"
		 "except urllib.error.HTTPError as e:\n"
		 "    print('B', e.code, e.read().decode().strip())\n"
		 "c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=30)\n"
		 "c.set_tunnel('127.0.0.1', %d)\n"
		 "c.request('GET', '/tunnel')\n"
		 "print('C', c.getresponse().read().decode().strip())\n"
		 "print('P', os.environ['https_proxy'])\n"
		 "\"",
		 api_port, api_port);
	out = sh(m, sb, cmd, NULL);
	tap_ok(strstr(out, "A egress-api-ok /shell") != NULL,
	       "a shell command's urllib reaches an egress_allow host through the relay (HTTP)");
	tap_ok(strstr(out, "B 403 ") && strstr(out, "refused.example") &&
		   strstr(out, "sandbox.egress_allow"),
	       "a host not allowed: 403 naming it and sandbox.egress_allow");
	tap_ok(strstr(out, "C egress-api-ok /tunnel") != NULL,
	       "and a CONNECT tunnel to it, at the port https_proxy names");
	if (!strstr(out, "C egress-api-ok"))
		tap_diag("%s", out);
	free(out);

	/* The persistent interpreter: its environment too. */
	snprintf(cmd, sizeof(cmd),
		 "import os, urllib.request\n"
		 "print('E', os.environ.get('HTTPS_PROXY'), os.environ.get('PIP_INDEX_URL'))\n"
		 "saved = {k: os.environ.pop(k) for k in ('no_proxy', 'NO_PROXY') if k in "
		 "os.environ}\n"
		 "try:\n"
		 "    print('F', urllib.request.urlopen('http://127.0.0.1:%d/interp', "
		 "timeout=30).read().decode().strip())\n"
		 "finally:\n"
		 "    os.environ.update(saved)\n",
		 api_port);
	out = py(m, sb, cmd);
	tap_ok(strstr(out, "E http://127.0.0.1:3128 http://127.0.0.1:3128/simple/") != NULL,
	       "the persistent interpreter has the proxy variables");
	tap_ok(strstr(out, "F egress-api-ok /interp") != NULL,
	       "and its urllib reaches an egress_allow host through the relay");
	free(out);

	/* pip typed in a shell command: from the index needing basic auth,
	 * whose password is then in no file the install wrote, no process's
	 * environment or command line. */
	out = sh(m, sb,
		 "touch /tmp/.before-pip && sleep 1 && pip install sbxdemo4 >/tmp/pip.log 2>&1; "
		 "echo pip $?; python3 -c 'import sbxdemo4; print(\"value\", sbxdemo4.VALUE)'",
		 NULL);
	tap_ok(strstr(out, "pip 0") && strstr(out, "value 4"),
	       "pip install in a shell command installs from the index through the relay");
	if (!strstr(out, "pip 0"))
		free(sh(m, sb, "cat /tmp/pip.log >&2; false", NULL));
	free(out);
	/* The scan's own command line holds the password in two halves. */
	snprintf(cmd, sizeof(cmd),
		 "python3 -c \"\n"
		 "import base64, os\n"
		 "pw = '%.8s' + '%s'\n"
		 "needles = [pw.encode(), base64.b64encode(('%s:' + pw).encode())]\n"
		 "since = os.stat('/tmp/.before-pip').st_mtime\n"
		 "files, hits = 0, []\n"
		 "def look(path):\n"
		 "    try:\n"
		 "        with open(path, 'rb') as f:\n"
		 "            data = f.read()\n"
		 "    except OSError:\n"
		 "        return\n"
		 "    if any(n in data for n in needles):\n"
		 "        hits.append(path)\n"
		 "for top in ('/', '/tmp', '/home', '/opt', '/app'):\n"
		 "    for d, dirs, names in os.walk(top):\n"
		 "        dirs[:] = [x for x in dirs if os.path.join(d, x) not in ('/proc', "
		 "'/sys', '/dev')]\n"
		 "        for n in names:\n"
		 "            p = os.path.join(d, n)\n"
		 "            try:\n"
		 "                st = os.lstat(p)\n"
		 "            except OSError:\n"
		 "                continue\n"
		 "            if st.st_mtime >= since and os.path.isfile(p) and not "
		 "os.path.islink(p):\n"
		 "                files += 1\n"
		 "                look(p)\n"
		 "        if top == '/':\n"
		 "            break\n"
		 "for p in os.listdir('/proc'):\n"
		 "    if p.isdigit() and int(p) != os.getpid():\n"
		 "        look(f'/proc/{p}/environ')\n"
		 "        look(f'/proc/{p}/cmdline')\n"
		 "print('files', files, 'hits', hits)\n"
		 "\"",
		 PASSWORD, PASSWORD + 8, USER);
	scan = sh(m, sb, cmd, NULL);
	tap_ok(strstr(scan, "hits []") && strstr(scan, "files ") && !strstr(scan, "files 0 "),
	       "the password is in none of the files pip wrote, no environment, no command line "
	       "(%.60s)",
	       scan);

	/* The relay killed from inside: the very next call starts another. */
	before = stats(m, sb);
	out = py(m, sb, kill_relay_py);
	tap_ok(strstr(out, "killed 1") != NULL, "sandbox code kills the relay (%s)", out);
	/* The engine tells of the relay's end within some ms (Docker: under
	 * 50); a call in that moment would still find the port closed. */
	tap_ok(relay_stops(m, sb, 30000), "the server sees it end");
	snprintf(cmd, sizeof(cmd),
		 "NO_PROXY= no_proxy= python3 -c \"import urllib.request; print('G', "
		 "urllib.request.urlopen('http://127.0.0.1:%d/again', "
		 "timeout=30).read().decode().strip())\"",
		 api_port);
	again = sh(m, sb, cmd, NULL);
	after = stats(m, sb);
	tap_ok(strstr(again, "G egress-api-ok /again") && after.relays > before.relays,
	       "the next call starts a new relay and reaches the host (%llu relays before, %llu "
	       "after)",
	       (unsigned long long)before.relays, (unsigned long long)after.relays);

	/* A relay an earlier stream left running (a server that died) holds
	 * the port: the new relay ends it and takes the port. */
	free(out);
	out = py(m, sb, squat_py(true));
	tap_ok(relay_stops(m, sb, 30000), "the server sees the relay end before the squatter");
	free(again);
	again = sh(m, sb, count_relays_sh, &note);
	tap_ok(strstr(out, "squatting 3128") && strstr(again, "relays 1") && !note,
	       "a stale relay holding port 3128 is ended by the next one (%s; %s)", again,
	       note ? note : "no notice");
	free(note);
	note = NULL;

	/* Anything else on the port: the call runs, and says why egress is out
	 * of reach; an install fails naming the port; once the port is free,
	 * the next call has egress again. */
	free(out);
	out = py(m, sb, squat_py(false));
	relay_stops(m, sb, 30000);
	refused = sh(m, sb, "echo still-runs", &note);
	tap_ok(strstr(out, "squatting 3128") && strstr(refused, "still-runs") && note &&
		   strstr(note, "port 3128") && strstr(note, "sandbox.egress_allow"),
	       "code on port 3128: the call runs, its notice names the port (%s)",
	       note ? note : "no notice");
	{
		struct sbx_error err = SBX_ERROR_INIT;
		struct sbx_install_status st = {0};
		int r = sbx_sandbox_install(m, sb, "sbxdemo2", 60000, &st, &err);
		tap_ok(r < 0 ? strstr(err.msg, "port 3128") != NULL
			     : st.state == SBX_INSTALL_FAILED && st.log_tail &&
				   strstr(st.log_tail, "port 3128"),
		       "and an install fails naming it (%s)",
		       r < 0	     ? err.msg
		       : st.log_tail ? st.log_tail
				     : "");
		sbx_install_status_release(&st);
	}
	free(out);
	out = py(m, sb, "squatter.kill(); squatter.wait(); print('freed')\n");
	free(again);
	snprintf(cmd, sizeof(cmd),
		 "NO_PROXY= no_proxy= python3 -c \"import urllib.request; print('H', "
		 "urllib.request.urlopen('http://127.0.0.1:%d/freed', "
		 "timeout=30).read().decode().strip())\"",
		 api_port);
	free(note);
	again = sh(m, sb, cmd, &note);
	tap_ok(strstr(again, "H egress-api-ok /freed") && !note,
	       "the port freed, the next call has egress again");

	/* What a call pays for the relay when it runs. */
	{
		int64_t c0 = sbx_monotonic_ms();
		bool none = true;
		for (int i = 0; i < 100000; i++) {
			char *n = sbx_sandbox_egress_for_code(m, sb);
			none &= n == NULL;
			free(n);
		}
		tap_ok(none, "the relay runs: a call is told nothing");
		tap_diag("sbx_sandbox_egress_for_code with the relay running: %.2f us a call",
			 (double)(sbx_monotonic_ms() - c0) * 1000.0 / 100000);
	}

	/* What starting the relay at create would cost each sandbox: its
	 * start (an exec and python3) and its memory. */
	free(out);
	out = py(m, sb, kill_relay_py);
	relay_stops(m, sb, 30000);
	t0 = sbx_monotonic_ms();
	relay_port(m, sb);
	{
		long ms = (long)(sbx_monotonic_ms() - t0);
		char code[512];
		snprintf(code, sizeof(code),
			 "print('rss', [l.split()[1] for l in open('/proc/%ld/status') if "
			 "l.startswith('VmRSS')][0])\n",
			 stats(m, sb).pid);
		free(out);
		out = py(m, sb, code);
		tap_diag("a relay's start: %ld ms; its memory: %s kB", ms, out);
	}
}

/* How many relays run in CONTAINER, asked with an exec of its own (no
 * manager); -1 when the exec fails. */
static int relays_in(const char *container)
{
	const char *const argv[] = {"sh", "-c", count_relays_sh, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv, .user = "1000:1000", .timeout_ms = 30000, .output_cap = 4096};
	struct sbx_exec_result res = {0};
	const char *p;
	int n = -1;

	if (sbx_exec(engine, container, &spec, &res, NULL) >= 0 && res.out.data &&
	    (p = strstr(res.out.data, "relays ")))
		n = atoi(p + 7);
	sbx_exec_result_release(&res);
	return n;
}

/* relays_in, until none is left or 3 s passed (a relay whose input ended
 * takes a moment to go). */
static int relays_left(const char *container)
{
	int64_t until = sbx_monotonic_ms() + 3000;
	int n;

	while ((n = relays_in(container)) > 0 && sbx_monotonic_ms() < until)
		usleep(100 * 1000);
	return n;
}

/* The server stops and keeps its containers: no relay is left in them; a
 * server that adopts them starts one at the next call. */
static void test_kept(const char *idx, const char *allow)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m;
	sbx_sandbox *sb = NULL;
	char inst[96], code[512], id[SBX_SANDBOX_ID_MAX + 1] = "";
	_cleanup_free_ char *container = NULL, *out = NULL;
	const char *const extra[] = {
	    "sandbox.network=none", idx, allow, "sandbox.remove_on_exit=false",
	    "sandbox.pool_size=0",  NULL};

	snprintf(inst, sizeof(inst), "%s-kept", instance);
	settings_for(&s, inst, extra);
	snprintf(code, sizeof(code),
		 "import os, urllib.request\n"
		 "saved = {k: os.environ.pop(k) for k in ('no_proxy', 'NO_PROXY') if k in "
		 "os.environ}\n"
		 "try:\n"
		 "    print(urllib.request.urlopen('http://127.0.0.1:%d/kept', "
		 "timeout=30).read().decode().strip())\n"
		 "finally:\n"
		 "    os.environ.update(saved)\n",
		 api_port);
	m = manager(&s, engine);
	if (tap_call(sbx_sandbox_create(m, "alice", "kept", &sb, &err), err.msg,
		     "create a sandbox kept at exit")) {
		snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sb));
		out = py(m, sb, code);
		tap_ok(strstr(out, "egress-api-ok /kept") != NULL,
		       "its code reaches an allowed host through its relay");
		container = container_of(inst, id);
		/* A busy relay at the stop: frames (WINDOW for a stream nobody
		 * knows, which the server drops) written into its output all
		 * along. Podman's conmon may keep the stdin of a process whose
		 * output is written into open after the server closed the stream:
		 * the relay would live on. */
		char flood[1024];
		snprintf(
		    flood, sizeof(flood),
		    "import subprocess, sys, time\n"
		    "prog = (\"import os, struct, time\\n\"\n"
		    "        \"pid = %ld\\n\"\n"
		    "        \"fd = os.open(f'/proc/{pid}/fd/101', os.O_WRONLY)\\n\"\n"
		    "        \"buf = (struct.pack('>BBHI', 5, 0, 9999, 4) + bytes(4)) * 4096\\n\"\n"
		    "        \"end = time.time() + 120\\n\"\n"
		    "        \"while time.time() < end and "
		    "os.path.exists(f'/proc/{pid}/cmdline'):\\n\"\n"
		    "        \"    try:\\n\"\n"
		    "        \"        os.write(fd, buf)\\n\"\n"
		    "        \"    except OSError:\\n\"\n"
		    "        \"        break\\n\")\n"
		    "w = subprocess.Popen([sys.executable, '-c', prog], start_new_session=True)\n"
		    "time.sleep(1)\n"
		    "print('flooding', w.poll() is None)\n",
		    stats(m, sb).pid);
		free(out);
		out = py(m, sb, flood);
		tap_ok(strstr(out, "flooding True") && stats(m, sb).running,
		       "code writes into the relay's output all along; the relay runs (%s)", out);
	}
	sb = sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	tap_ok(container && count_instance(inst) == 1, "the server stopped, the container stays");
	tap_is_int(container ? relays_left(container) : -1, 0,
		   "and no relay is left running in it");

	m = manager(&s, engine);
	tap_is_int(recover(m), 1, "a new server adopts it");
	if (tap_call(sbx_sandbox_get(m, "alice", "kept", &sb, &err), err.msg, "get it")) {
		free(out);
		out = py(m, sb, code);
		tap_ok(strstr(out, "egress-api-ok /kept") != NULL && stats(m, sb).relays == 1,
		       "its next call starts a relay and reaches the host again");
	}
	sbx_sandbox_unref(sb);
	tap_call(sbx_sandbox_delete(m, "alice", "kept", &err), err.msg, "delete it");
	sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "no container of the kept instance is left");
	sbx_settings_release(&s);
}

struct parallel {
	sbx_manager *m;
	sbx_sandbox *sb;
	int r;
	enum sbx_install_state state;
	char msg[256];
};

static void *parallel_install(void *arg)
{
	struct parallel *p = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_install_status st = {0};

	p->r = sbx_sandbox_install(p->m, p->sb, "sbxdemo", 240000, &st, &err);
	p->state = st.state;
	snprintf(p->msg, sizeof(p->msg), "%.200s", p->r < 0 ? err.msg : "");
	sbx_install_status_release(&st);
	return NULL;
}

static void test_parallel(sbx_manager *m, int n)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct parallel p[16] = {{0}};
	pthread_t t[16];
	int ok = 0, made = 0;

	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "par%d", i);
		p[i].m = m;
		if (sbx_sandbox_create(m, "alice", name, &p[i].sb, &err) < 0) {
			tap_diag("create %s: %s", name, err.msg);
			break;
		}
		made++;
	}
	tap_is_int(made, n, "%d sandboxes", n);
	for (int i = 0; i < made; i++)
		pthread_create(&t[i], NULL, parallel_install, &p[i]);
	for (int i = 0; i < made; i++) {
		pthread_join(t[i], NULL);
		ok += p[i].r == 0 && p[i].state == SBX_INSTALL_SUCCESS;
		if (p[i].r < 0 || p[i].state != SBX_INSTALL_SUCCESS)
			tap_diag("par%d: %d %d %s", i, p[i].r, p[i].state, p[i].msg);
	}
	tap_is_int(ok, made, "%d installs in %d sandboxes at once, each through its own relay",
		   made, made);
	for (int i = 0; i < made; i++) {
		char name[32];
		snprintf(name, sizeof(name), "par%d", i);
		sbx_sandbox_unref(p[i].sb);
		sbx_sandbox_delete(m, "alice", name, NULL);
	}
}

/* The relay's start is an exec in the sandbox: when the engine cannot run
 * it (the container was removed from outside), the error is the sandbox's
 * own, as for any exec (sbx_sandbox_exec_failed), not the engine's bare one:
 * egress tells the sandbox layer that the exec failed. */
static void test_exec_failed(sbx_manager *m)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *sb = NULL;
	int port = 0, r;

	if (!tap_call(sbx_sandbox_create(m, "alice", "noexec", &sb, &err), err.msg,
		      "create a sandbox whose relay cannot start"))
		return;
	tap_call(sbx_container_remove(engine, sb->container, &err), err.msg,
		 "remove its container from outside");
	sbx_error_clear(&err);
	r = sbx_sandbox_egress_ensure(m, sb, &port, &err);
	tap_ok(r == -ESRCH && strstr(err.msg, "removed from outside the server"),
	       "the relay's start says the sandbox's container was removed (%d): %s", r, err.msg);
	sbx_sandbox_unref(sb);
	sbx_sandbox_delete(m, "alice", "noexec", NULL);
}

/* Python (a format taking the relay's port): tun(TARGET) sends TARGET's
 * request (bytes) to the relay and returns the socket and the answer's
 * status line and body (or 'timeout' when none came in 5 s). */
static const char tun_py[] =
    "import os, socket, time\n"
    "def tun(req, port=%d):\n"
    "    s = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
    "    s.sendall(req)\n"
    "    d = b''\n"
    "    try:\n"
    "        while b'\\r\\n\\r\\n' not in d or (b' 503 ' in d and not d.endswith(b'\\n')):\n"
    "            b = s.recv(4096)\n"
    "            if not b:\n"
    "                break\n"
    "            d += b\n"
    "    except socket.timeout:\n"
    "        return s, 'timeout'\n"
    "    return s, d.decode(errors='replace').replace('\\r\\n', ' ')\n";

struct holder {
	const char *cid;
	char *code;
	char out[4096];
};

/* Runs the holder's Python in its sandbox (a plain exec, beside the tests'
 * calls), as the sandbox's user. */
static void *holder_main(void *arg)
{
	struct holder *h = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_exec_result res = {0};
	const char *const argv[] = {"python3", "-c", h->code, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv, .user = "1000:1000", .timeout_ms = 90000, .output_cap = 65536};

	if (sbx_exec(engine, h->cid, &spec, &res, &err) >= 0)
		snprintf(h->out, sizeof(h->out), "%s%s", res.out.data ? res.out.data : "",
			 res.err.data ? res.err.data : "");
	else
		snprintf(h->out, sizeof(h->out), "exec: %s", err.msg);
	sbx_exec_result_release(&res);
	return NULL;
}

/* sandbox.egress_tunnel_lifetime of test_tenant_slots's manager, which
 * test_stalled_stream uses too. */
#define TUNNEL_LIFE_S 15

/* A relay that grants no window: a fetch whose answer is larger than the
 * first window (64 KiB) stalls with its output pending. Its worker gives up
 * after 120 s, but the stream, and its connection slot counted against the
 * tenant's and the server's limits, went only with its CLOSE, which waited for
 * that output: up to 16 slots a sandbox held until the relay died. The pump
 * now drops a stalled stream's output at the end of its lifetime (here
 * TUNNEL_LIFE_S;
 * 120 s of stall at most otherwise) and closes it. The fake relay reads what
 * it is sent (so it is no deaf relay) and reports the CLOSE it gets. */
static void test_stalled_stream(sbx_manager *m, sbx_sandbox *sb, int api)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char src[2048];
	int port = 0, r;
	int64_t until;
	bool held = false, freed = false;

	snprintf(
	    src, sizeof(src),
	    "    'import json, os, struct, time',\n"
	    "    \"H = struct.Struct('>BBHI')\",\n"
	    "    \"hello = json.dumps({'v': 1, 'port': 3128, 'pid': os.getpid()}).encode()\",\n"
	    "    \"req = b'GET http://127.0.0.1:%d/big/1000000 HTTP/1.1' + bytes([13, 10, 13, "
	    "10])\",\n"
	    "    'os.write(1, H.pack(1, 0, 0, len(hello)) + hello + H.pack(2, 0, 1, 0) + '\n"
	    "    'H.pack(3, 0, 1, len(req)) + req)',\n"
	    "    'end = time.time() + 40',\n"
	    "    'while time.time() < end and os.read(0, 65536):',\n"
	    "    '    pass',\n",
	    api);
	fake_relay(m, sb, src, "stalled stream");
	r = sbx_sandbox_egress_ensure(m, sb, &port, &err);
	tap_ok(r == 0 && port == 3128, "a relay that grants no window starts (%d %s)", r, err.msg);
	until = sbx_monotonic_ms() + 10000;
	while (!(held = egress_slots_held(sb->owner) == 1) && sbx_monotonic_ms() < until)
		usleep(20 * 1000);
	tap_ok(held, "its fetch of 1 MB holds a relayed connection");
	until = sbx_monotonic_ms() + (TUNNEL_LIFE_S + 15) * 1000;
	while (!(freed = egress_slots_held(sb->owner) == 0) && sbx_monotonic_ms() < until)
		usleep(50 * 1000);
	tap_ok(freed && stats(m, sb).running && stats(m, sb).open == 0,
	       "the stalled stream is closed at the end of its lifetime (%d s) and its slot "
	       "given back, while the relay runs on",
	       TUNNEL_LIFE_S);
	real_relay(m, sb, "stalled stream");
}

/* The connections relayed at once, per tenant and in all, and a tunnel's
 * lifetime: with 3 per tenant and 4 in all, alice's two sandboxes hold 3
 * (two fetches from a host that never answers, a tunnel) and her fourth is
 * refused, bob's first is still served and his second meets the server's
 * limit; his tunnel is closed after its lifetime (TUNNEL_LIFE_S: long
 * enough that alice's tunnel still holds its place when bob's second
 * connection comes, on a loaded machine too). */
static void test_tenant_slots(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m;
	sbx_sandbox *a1 = NULL, *a2 = NULL, *b1 = NULL;
	char idx[256], allow[128], inst[96], code[8192], pre[2048];
	struct holder h = {0};
	pthread_t t;
	bool held = false;
	int64_t until;
	_cleanup_free_ char *out_a2 = NULL, *out_b1 = NULL;

	snprintf(idx, sizeof(idx), "sandbox.index_url=http://%s:%s@127.0.0.1:%d/simple/", USER,
		 PASSWORD, index_port);
	snprintf(allow, sizeof(allow), "sandbox.egress_allow=127.0.0.1:%d,127.0.0.1:%d", api_port,
		 sink_port);
	snprintf(inst, sizeof(inst), "%s-egress-t", instance);
	{
		const char *const extra[] = {
		    "sandbox.network=none",
		    idx,
		    allow,
		    "sandbox.pool_size=0",
		    "sandbox.egress_connections=4",
		    "sandbox.egress_connections_per_tenant=3",
		    "sandbox.egress_tunnel_lifetime=15s", /* TUNNEL_LIFE_S */
		    NULL};
		settings_for(&s, inst, extra);
	}
	m = manager(&s, engine);
	if (!tap_call(sbx_sandbox_create(m, "alice", "t1", &a1, &err), err.msg,
		      "alice's first sandbox") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "t2", &a2, &err), err.msg,
		      "alice's second sandbox") ||
	    !tap_call(sbx_sandbox_create(m, "bob", "t3", &b1, &err), err.msg, "bob's sandbox"))
		goto out;

	/* a1: two fetches from the sink (it never answers), held until told. */
	snprintf(pre, sizeof(pre), tun_py, relay_port(m, a1));
	snprintf(code, sizeof(code),
		 "%s"
		 "get = b'GET http://127.0.0.1:%d/hold HTTP/1.1\\r\\n\\r\\n'\n"
		 "held = [socket.create_connection(('127.0.0.1', %d)) for _ in range(2)]\n"
		 "for x in held:\n"
		 "    x.sendall(get)\n"
		 "end = time.time() + 60\n"
		 "while not os.path.exists('/tmp/release') and time.time() < end:\n"
		 "    time.sleep(0.05)\n"
		 "for x in held:\n"
		 "    x.close()\n"
		 "print('released')\n",
		 pre, sink_port, relay_port(m, a1));
	h.cid = a1->container;
	h.code = code;
	pthread_create(&t, NULL, holder_main, &h);
	until = sbx_monotonic_ms() + 20000;
	while (!(held = egress_slots_held("alice") == 2) && sbx_monotonic_ms() < until)
		usleep(50 * 1000);
	tap_ok(held, "alice's first sandbox holds 2 relayed connections (fetches that wait)");

	/* a2: a tunnel is her third; a fourth connection is refused. */
	snprintf(pre, sizeof(pre), tun_py, relay_port(m, a2));
	snprintf(code, sizeof(code),
		 "%s"
		 "s1, a = tun(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
		 "print('A', a)\n"
		 "s2, b = tun(b'GET http://127.0.0.1:%d/x HTTP/1.1\\r\\n\\r\\n')\n"
		 "print('B', b)\n"
		 "s2.close()\n", /* s1 stays open until bob is done */
		 pre, api_port, api_port);
	out_a2 = py(m, a2, code);
	tap_ok(strstr(out_a2, "A HTTP/1.1 200 Connection established") != NULL,
	       "her second sandbox: a tunnel, her third connection");
	tap_ok(strstr(out_a2, "B HTTP/1.1 503") && strstr(out_a2, "egress_connections_per_tenant"),
	       "and her fourth: 503 naming sandbox.egress_connections_per_tenant: %s", out_a2);

	/* b1: bob is served (the server's fourth); his next meets its limit. */
	snprintf(pre, sizeof(pre), tun_py, relay_port(m, b1));
	snprintf(code, sizeof(code),
		 "%s"
		 "t = time.time()\n"
		 "s1, a = tun(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
		 "print('A', a)\n"
		 "s2, b = tun(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
		 "print('B', b)\n"
		 "s1.settimeout(60)\n"
		 "try:\n"
		 "    x = s1.recv(10)\n"
		 "    print('C closed' if x == b'' else 'C data', round(time.time() - t))\n"
		 "except socket.timeout:\n"
		 "    print('C open after 60 s')\n"
		 "s1.close(), s2.close()\n",
		 pre, sink_port, sink_port);
	out_b1 = py(m, b1, code);
	tap_ok(strstr(out_b1, "A HTTP/1.1 200 Connection established") != NULL,
	       "another tenant's sandbox is still served: %s", out_b1);
	tap_ok(strstr(out_b1, "B HTTP/1.1 503") && strstr(out_b1, "sandbox.egress_connections)"),
	       "its next connection is the server's fifth: 503 naming sandbox.egress_connections");
	{
		const char *c = strstr(out_b1, "C closed ");
		int after = c ? atoi(c + 9) : -1;

		tap_ok(after >= TUNNEL_LIFE_S - 1 && after <= TUNNEL_LIFE_S + 5,
		       "his tunnel is closed at the end of its lifetime (%d s after it opened; "
		       "the lifetime is %d s, the idle timeout 10 min)",
		       after, TUNNEL_LIFE_S);
	}

	free(py(m, a2, "s1.close()\n"));
	{
		const char *const argv[] = {"touch", "/tmp/release", NULL};
		struct sbx_exec_spec spec = {
		    .argv = argv, .user = "1000:1000", .timeout_ms = 10000};
		struct sbx_exec_result res = {0};
		sbx_exec(engine, a1->container, &spec, &res, NULL);
		sbx_exec_result_release(&res);
	}
	pthread_join(t, NULL);
	tap_ok(strstr(h.out, "released") != NULL, "alice's fetches let go (%s)", h.out);
	test_stalled_stream(m, b1, api_port);
	until = sbx_monotonic_ms() + 10000;
	while (egress_slots_held(NULL) > 0 && sbx_monotonic_ms() < until)
		usleep(50 * 1000);
	tap_is_int((int)egress_slots_held(NULL), 0, "no relayed connection is held afterwards");
out:
	sbx_sandbox_unref(a1);
	sbx_sandbox_unref(a2);
	sbx_sandbox_unref(b1);
	m = sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "no container of the tenants' manager is left");
	sbx_settings_release(&s);
}

/* ---- tenants: lists from a keys file ---- */

static char keys_path[PATH_MAX];

static void write_keys(const char *text)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.new", keys_path);
	f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || chmod(tmp, 0600) < 0 ||
	    rename(tmp, keys_path) < 0)
		tap_bail("cannot write the keys file");
}

static int keys_lookup(void *auth, const char *owner, char *buf, size_t size)
{
	return sbx_auth_tenant_egress(auth, owner, buf, size);
}

#define TDIGEST "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca7"

/* The keys file's text: tenA's list is A_LIST, tenB's B_LIST; alice (the
 * other tests' tenant) has a key without a list: sandbox.egress_allow. */
static void keys_text(char *out, size_t n, const char *a_list, const char *b_list)
{
	snprintf(out, n,
		 "tenA 0123456789ab " TDIGEST " 2025-06-01T12:00:00Z egress_allow=%s\n"
		 "tenB 0123456789ac " TDIGEST " 2025-06-01T12:00:00Z egress_allow=%s\n"
		 "alice 0123456789ad " TDIGEST " 2025-06-01T12:00:00Z\n",
		 a_list, b_list);
}

static sbx_auth *open_keys(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	char set[PATH_MAX + 32], text[512], api[64];
	sbx_auth *a = NULL;

	snprintf(keys_path, sizeof(keys_path), "/tmp/test-egress-keys.%d", (int)getpid());
	snprintf(api, sizeof(api), "127.0.0.1:%d", api_port);
	keys_text(text, sizeof(text), api, "none");
	write_keys(text);
	sbx_settings_init(&s);
	snprintf(set, sizeof(set), "auth.keys_file=%s", keys_path);
	if (sbx_settings_set(&s, "auth.mode=keys", &err) < 0 || sbx_settings_set(&s, set, &err) < 0)
		tap_bail(err.msg);
	tap_call(sbx_auth_open(&s, &a, &err), err.msg, "a keys file: tenA may reach %s, tenB none",
		 api);
	sbx_settings_release(&s);
	return a;
}

/* CONNECT to the API server through SB's relay and a GET through the
 * tunnel: what came back ("ok" or the refusal's first lines). */
static char *tunnel_api(sbx_manager *m, sbx_sandbox *sb, int port)
{
	char code[4096], pre[1024];

	snprintf(pre, sizeof(pre), raw_py, port);
	snprintf(code, sizeof(code),
		 "%s"
		 "s, c = raw(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
		 "if c.startswith(b'HTTP/1.1 200'):\n"
		 "    s.sendall(b'GET /tenant HTTP/1.0\\r\\n\\r\\n')\n"
		 "    d = b''\n"
		 "    while True:\n"
		 "        x = s.recv(65536)\n"
		 "        if not x:\n"
		 "            break\n"
		 "        d += x\n"
		 "    print('TUNNEL', b'egress-api-ok /tenant' in d)\n"
		 "else:\n"
		 "    print('REFUSED', c.decode(errors='replace'))\n",
		 pre, api_port);
	return py(m, sb, code);
}

static void test_tenants(sbx_manager *m, sbx_auth *auth)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_sandbox *a = NULL, *b = NULL;
	struct sbx_egress_stats es;
	uint64_t in, out;
	char text[512], api[64], want[160];
	int pa, pb;

	if (!auth)
		return;
	if (!tap_call(sbx_sandbox_create(m, "tenA", "ta", &a, &err), err.msg,
		      "a sandbox of tenA") ||
	    !tap_call(sbx_sandbox_create(m, "tenB", "tb", &b, &err), err.msg, "a sandbox of tenB"))
		goto out;
	pa = relay_port(m, a);
	pb = relay_port(m, b);
	{
		_cleanup_free_ char *oa = tunnel_api(m, a, pa), *ob = tunnel_api(m, b, pb);
		snprintf(want, sizeof(want), "127.0.0.1:%d is not allowed (CONNECT)", api_port);
		tap_ok(strstr(oa, "TUNNEL True") != NULL,
		       "tenA's sandbox reaches a host of tenA's egress_allow (%s)", oa);
		tap_ok(strstr(ob, "REFUSED HTTP/1.1 403") && strstr(ob, want) &&
			   strstr(ob, "egress_allow of its tenant's API keys (none)"),
		       "tenB's is refused it, though sandbox.egress_allow has it: 403 naming "
		       "tenB's list (%s)",
		       ob);
	}
	/* tenB's list changed in the keys file: its relay's next connection. */
	snprintf(api, sizeof(api), "127.0.0.1:%d", api_port);
	keys_text(text, sizeof(text), "none", api);
	write_keys(text);
	{
		uint64_t gen = sbx_auth_refresh(auth), now = gen;
		int64_t until = sbx_monotonic_ms() + 5000;
		while (now == gen && sbx_monotonic_ms() < until) {
			usleep(100 * 1000);
			now = sbx_auth_refresh(auth);
		}
		tap_ok(now != gen, "the store read the new keys file");
	}
	{
		_cleanup_free_ char *oa = tunnel_api(m, a, pa), *ob = tunnel_api(m, b, pb);
		tap_ok(strstr(ob, "TUNNEL True") != NULL,
		       "tenB's running relay takes its new list at the next connection (%s)", ob);
		tap_ok(strstr(oa, "REFUSED HTTP/1.1 403") && strstr(oa, "(none)"),
		       "and tenA's its none (%s)", oa);
	}
	/* A keys file that cannot be used now (a revocation half made, a typo)
	 * fails closed: no tenant list is in force until it can be read again. */
	write_keys("tenB 0123456789ac not-a-digest 2025-06-01T12:00:00Z\n");
	{
		int64_t until = sbx_monotonic_ms() + 5000;
		while (sbx_auth_status(auth, NULL) == 0 && sbx_monotonic_ms() < until) {
			usleep(100 * 1000);
			sbx_auth_refresh(auth);
		}
		tap_ok(sbx_auth_status(auth, NULL) < 0, "the store finds the keys file broken");
	}
	{
		_cleanup_free_ char *ob = tunnel_api(m, b, pb);
		tap_ok(strstr(ob, "REFUSED HTTP/1.1 403") && strstr(ob, "(none)"),
		       "while it is, tenB's running relay allows no host, not its last list (%s)",
		       ob);
	}
	write_keys(text);
	{
		int64_t until = sbx_monotonic_ms() + 5000;
		while (sbx_auth_status(auth, NULL) < 0 && sbx_monotonic_ms() < until) {
			usleep(100 * 1000);
			sbx_auth_refresh(auth);
		}
		_cleanup_free_ char *ob = tunnel_api(m, b, pb);
		tap_ok(strstr(ob, "TUNNEL True") != NULL,
		       "the file mended, tenB's list is in force again (%s)", ob);
	}
	/* Metering: a tenant's bytes outlive its sandboxes. */
	es = stats(m, a);
	tap_ok(es.bytes_in > 0 && es.bytes_out > 0,
	       "tenA's relay counted bytes (%llu in, %llu out)", (unsigned long long)es.bytes_in,
	       (unsigned long long)es.bytes_out);
	sbx_sandbox_unref(SBX_TAKE(a));
	tap_call(sbx_sandbox_delete(m, "tenA", "ta", &err), err.msg, "delete tenA's sandbox");
	{
		struct sbx_tenant_usage t;
		sbx_manager_tenant_gone(m, "tenA", &t);
		in = t.egress_bytes_in;
		out = t.egress_bytes_out;
	}
	tap_ok(in == es.bytes_in && out == es.bytes_out,
	       "tenA's total keeps the bytes of its deleted sandbox (%llu in, %llu out)",
	       (unsigned long long)in, (unsigned long long)out);
	{
		struct sbx_tenant_usage t;
		sbx_manager_tenant_gone(m, "tenB", &t);
		in = t.egress_bytes_in;
		out = t.egress_bytes_out;
	}
	tap_ok(in == 0 && out == 0, "tenB's has none of them");
out:
	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	sbx_sandbox_delete(m, "tenB", "tb", NULL);
	sbx_sandbox_delete(m, "tenA", "ta", NULL);
}

/* pip's output (owned) for an install of SPEC that ends; *RET_OK when it
 * succeeded. */
static char *install_out(sbx_manager *m, sbx_sandbox *sb, const char *spec, bool *ret_ok)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_install_status st = {0};
	int r = sbx_sandbox_install(m, sb, spec, 120000, &st, &err);
	char *out = strdup(st.log_tail ? st.log_tail : err.msg);

	*ret_ok = r == 0 && st.state == SBX_INSTALL_SUCCESS;
	sbx_install_status_release(&st);
	return out ? out : strdup("");
}

/* The server's log lines (stderr) while FN(M) runs, into a malloc'd text. */
static int log_fd = -1, saved_stderr = -1;
static void log_capture(void)
{
	char path[] = "/tmp/test-egress-log-XXXXXX";

	fflush(stderr);
	log_fd = mkostemp(path, O_CLOEXEC);
	saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 3);
	if (log_fd < 0 || saved_stderr < 0)
		tap_bail("mkstemp/dup");
	unlink(path);
	dup2(log_fd, 2);
}
static char *log_captured(void)
{
	struct sbx_buf b = SBX_BUF_INIT;
	char chunk[4096];
	ssize_t n;

	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	lseek(log_fd, 0, SEEK_SET);
	while ((n = read(log_fd, chunk, sizeof(chunk))) > 0)
		sbx_buf_append(&b, chunk, (size_t)n);
	close(log_fd);
	sbx_buf_append(&b, "", 1);
	fputs(b.data, stderr); /* still shown */
	return sbx_buf_steal(&b);
}

/* How many lines of TEXT contain both A and B. */
static int lines_with(const char *text, const char *a, const char *b)
{
	int n = 0;

	for (const char *l = text; l && *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		_cleanup_free_ char *line = strndup(l, len);
		n += line && strstr(line, a) && strstr(line, b);
		l = e ? e + 1 : NULL;
	}
	return n;
}

/* Python: pip(*SPECS) runs pip install as the install tool does and prints
 * "pip exit N" and its output. */
#define PIP_PY                                                                                     \
	"import subprocess\n"                                                                      \
	"def pip(*specs):\n"                                                                       \
	"    p = subprocess.run(['pip', 'install', '--no-input', '--disable-pip-version-check', "  \
	"'--', *specs], capture_output=True, text=True)\n"                                         \
	"    print('pip exit', p.returncode, p.stdout, p.stderr)\n"

/* A private index with no sandbox.index_files_path: its files behind the
 * usual layouts (pypiserver's /packages/, devpi's /+f/, ../../files/) are
 * fetched with its credentials; a link with a query, to another host or
 * another port is not; the refusal names the setting, in pip's output and
 * once per sandbox in the server's log. */
static void test_layouts(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct test_manager x;
	sbx_sandbox *sb = NULL, *sb2 = NULL;
	char idx[256], allow[96], code[2048], pre[1024];
	_cleanup_free_ char *log = NULL, *out = NULL, *pd = NULL, *pf = NULL, *raw2 = NULL;
	bool ok = false, okd = true;
	sbx_manager *m;

	snprintf(idx, sizeof(idx), "sandbox.index_url=http://%s:%s@127.0.0.1:%d/simple/", USER,
		 PASSWORD, index_port);
	/* The other host is allowed: a fetch from it is a forward, without the
	 * credentials; the other port of 127.0.0.1 is not: 403. */
	snprintf(allow, sizeof(allow), "sandbox.egress_allow=127.0.0.2:%d", index_port);
	{
		const char *const extra[] = {
		    "sandbox.network=none", idx, allow, "sandbox.install_timeout=120s",
		    "sandbox.pool_size=0",  NULL};
		log_capture();
		m = test_manager_open(&x, "egress-l", extra, NULL);
	}
	if (!tap_call(sbx_sandbox_create(m, "alice", "lay", &sb, &err), err.msg,
		      "a sandbox on an index without sandbox.index_files_path") ||
	    !tap_call(sbx_sandbox_create(m, "alice", "lay2", &sb2, &err), err.msg,
		      "and a second one"))
		goto out;
	out = install_out(m, sb, "sbxpa", &ok);
	tap_ok(ok, "install_package_in_sandbox: a package whose file is at /packages/ "
		   "(pypiserver's absolute link)");
	if (!ok)
		tap_diag("%s", out);
	free(out);
	/* Two more in one pip run from sandbox code (the same relay). */
	out = py(m, sb,
		 PIP_PY "pip('sbxpb', 'sbxpc')\n"
			"import sbxpa, sbxpb, sbxpc\n"
			"print('v', sbxpa.VALUE, sbxpb.VALUE, sbxpc.VALUE)\n");
	tap_ok(strstr(out, "v 104 105 106") != NULL,
	       "pip in the sandbox: two whose files are at ../../root/pypi/+f/HASH/ (devpi) and "
	       "../../files/; all three import (%s)",
	       out);
	tap_ok(index_log_count("200 /packages/sbxpa-1.0-py3-none-any.whl") == 1 &&
		   index_log_count("200 /root/pypi/%2Bf/0ab/1234567890abcdef/sbxpb-1.0-py3-none-"
				   "any.whl") == 1 &&
		   index_log_count("200 /files/sbxpc-1.0-py3-none-any.whl") == 1,
	       "the index served each file once, with the credentials");

	pd = install_out(m, sb, "sbxpd", &okd);
	{
		const char *ce = strstr(pd, "Client Error");
		tap_diag("pip: %.*s", ce ? (int)strcspn(ce, "\n") : 0, ce ? ce : "");
	}
	tap_ok(!okd && strstr(pd, "403") && strstr(pd, "sandbox.index_files_path"),
	       "a link with a query (/get/NAME.whl?sig=1): the install fails, and pip's output "
	       "names sandbox.index_files_path");
	if (okd || !strstr(pd, "sandbox.index_files_path"))
		tap_diag("%s", pd);
	tap_is_int(index_log_count("/get/"), 0, "the index never saw it");

	pf = py(m, sb, PIP_PY "pip('sbxpf')\n");
	tap_ok(strstr(pf, "pip exit 0") == NULL && strstr(pf, "pip exit") != NULL,
	       "a link to another host (127.0.0.2, the index's port): the install fails");
	if (spy2_port) {
		tap_ok(log_count("spy.log", "other-host /packages/sbxpf-1.0-py3-none-any.whl "
					    "noauth") >= 1 &&
			   log_count("spy.log", "other-host") ==
			       log_count("spy.log", "other-host /packages/sbxpf-1.0-py3-none-any."
						    "whl noauth"),
		       "that host (allowed) got the request without an Authorization header");
	} else {
		tap_skip(1, "127.0.0.2 cannot be bound here");
	}

	snprintf(pre, sizeof(pre), raw_py, relay_port(m, sb));
	snprintf(code, sizeof(code),
		 "%s"
		 "for i, t in enumerate((b'http://127.0.0.1:%d/packages/x-1.0-py3-none-any.whl', "
		 "b'/secret.txt', b'/admin;x.whl', b'/x.whl?sig=1')):\n"
		 "    _, x = raw(b'GET ' + t + b' HTTP/1.1\\r\\n\\r\\n')\n"
		 "    print('R%%d' %% i, x.split(b'\\r\\n')[0].decode(), "
		 "b'sandbox.index_files_path' in x, b'sandbox.egress_allow' in x)\n",
		 pre, spy_port);
	free(out);
	out = py(m, sb, code);
	tap_ok(strstr(out, "R0 HTTP/1.1 403 Forbidden False True") != NULL,
	       "another port of the index's host: 403 naming sandbox.egress_allow");
	tap_is_int(log_count("spy.log", "other-port"), 0, "and that port saw no request");
	{
		int refused = 0;
		for (int i = 1; i < 4; i++) {
			char want[192];
			snprintf(want, sizeof(want),
				 "R%d HTTP/1.1 403 " EGRESS_INDEX_REFUSED_PHRASE " True False", i);
			refused += strstr(out, want) != NULL;
		}
		tap_is_int(refused, 3,
			   "not a file, a path parameter, a query: 403, its reason phrase and text "
			   "naming sandbox.index_files_path");
		if (refused != 3)
			tap_diag("%s", out);
	}
	tap_ok(index_log_count("secret") == 0 && index_log_count("admin") == 0,
	       "the index saw none of them");
	snprintf(pre, sizeof(pre), raw_py, relay_port(m, sb2));
	snprintf(code, sizeof(code),
		 "%s_, x = raw(b'GET /admin HTTP/1.1\\r\\n\\r\\n')\n"
		 "print(x.split(b'\\r\\n')[0].decode())\n",
		 pre);
	raw2 = py(m, sb2, code);
	tap_ok(strstr(raw2, "403 Forbidden by mcp-sandbox") != NULL, "the second sandbox: 403");
out : {
	char id1[SBX_SANDBOX_ID_MAX + 16] = "", id2[SBX_SANDBOX_ID_MAX + 16] = "";
	if (sb)
		snprintf(id1, sizeof(id1), "sandbox %s:", sb->id);
	if (sb2)
		snprintf(id2, sizeof(id2), "sandbox %s:", sb2->id);
	sbx_sandbox_unref(sb);
	sbx_sandbox_unref(sb2);
	test_manager_close(&x, "the layouts' manager");
	log = log_captured();
	if (sb && sb2) {
		tap_is_int(lines_with(log, id1, "sandbox.index_files_path"), 1,
			   "the server logged the refusals once for the first sandbox "
			   "(of 4)");
		tap_is_int(lines_with(log, id2, "sandbox.index_files_path"), 1,
			   "and once for the second");
		tap_ok(!strstr(log, PASSWORD), "the log has no password");
	}
}
}

static void test_engine(const char *script)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct sbx_sandbox_info info = {0};
	struct sbx_egress_stats es;
	sbx_manager *m;
	sbx_sandbox *sb = NULL;
	char idx[256], allow[192], inst[96];
	char hello[64], head[64], write_to[64], low_speed[64], page[64];
	_cleanup_free_ char *out = NULL;
	const char *par = getenv("SBX_EGRESS_PARALLEL");
	sbx_auth *auth = NULL;
	int port;

	bool up = start_index(script);

	if (!tap_ok(up, "tests/egress-index.py serves on 127.0.0.1:%d and :%d", index_port,
		    api_port))
		return;
	test_layouts();
	if (getenv("SBX_EGRESS_LAYOUTS_ONLY")) { /* SBX_EGRESS_LAYOUTS_ONLY=1: only those */
		stop_index();
		return;
	}
	snprintf(idx, sizeof(idx), "sandbox.index_url=http://%s:%s@127.0.0.1:%d/simple/", USER,
		 PASSWORD, index_port);
	/* localhost:API is the same server under a name: refused, it is loopback. */
	snprintf(allow, sizeof(allow),
		 "sandbox.egress_allow=127.0.0.1:%d,127.0.0.1:%d,localhost:%d", api_port, sink_port,
		 api_port);
	/* The test index serves its files under /packages/, as devpi does. */
	snprintf(inst, sizeof(inst), "%s-egress", instance);
	{
		const char *const extra[] = {"sandbox.network=none",
					     idx,
					     allow,
					     "sandbox.install_timeout=120s",
					     "sandbox.index_files_path=/packages/",
					     "sandbox.pool_size=0",
					     hello,
					     head,
					     write_to,
					     low_speed,
					     page,
					     NULL};
		snprintf(hello, sizeof(hello), "sandbox.egress_hello_timeout=%ds", HELLO_S);
		snprintf(head, sizeof(head), "sandbox.egress_head_timeout=%ds", HEAD_S);
		snprintf(write_to, sizeof(write_to), "sandbox.egress_write_timeout=%ds", WRITE_S);
		snprintf(low_speed, sizeof(low_speed), "sandbox.egress_low_speed_time=%ds",
			 LOW_SPEED_S);
		snprintf(page, sizeof(page), "sandbox.egress_page_timeout=%ds", PAGE_S);
		settings_for(&s, inst, extra);
	}
	m = manager(&s, engine);
	auth = open_keys();
	sbx_manager_set_egress_lookup(m, keys_lookup, auth); /* alice: a key without a list */
	if (!tap_call(sbx_sandbox_create(m, "alice", "eg", &sb, &err), err.msg,
		      "create a sandbox with network none"))
		goto out;

	es = stats(m, sb);
	tap_ok(!es.running && es.relays == 0, "no relay before the first install");
	if (install(m, sb, "sbxdemo", "network none, an index needing basic auth")) {
		out = py(m, sb, "import sbxdemo\nprint('value', sbxdemo.VALUE)\n");
		tap_ok(strstr(out, "value 42") != NULL, "the package imports (%s)", out);
	}
	tap_ok(index_log_count("200 /simple/sbxdemo/") >= 1 &&
		   index_log_count("200 /packages/sbxdemo-1.0-py3-none-any.whl") >= 1,
	       "the index served its page and the wheel behind a relative link, with the "
	       "credentials");
	tap_is_int(index_log_count("401 "), 0, "and never had to refuse a request");
	es = stats(m, sb);
	tap_ok(es.running && es.relays == 1 && es.streams >= 2,
	       "one relay carried the install's connections (%llu)",
	       (unsigned long long)es.streams);
	tap_ok(es.bytes_in > 1000 && es.bytes_out > 100, "bytes counted: %llu in, %llu out",
	       (unsigned long long)es.bytes_in, (unsigned long long)es.bytes_out);
	if (tap_call(sbx_sandbox_describe(m, sb, &info, &err), err.msg, "describe the sandbox"))
		tap_ok(info.egress_bytes_in == es.bytes_in && info.egress_bytes_out == es.bytes_out,
		       "list_sandboxes shows them");
	sbx_sandbox_info_release(&info);

	port = relay_port(m, sb);
	test_egress_allow(m, sb, port);
	test_tenants(m, auth);
	test_code_egress(m, sb);
	test_password_nowhere(m, sb);
	test_killed(m, sb);
	test_early_frames(m, sb);
	test_chatty_hello(m, sb);
	test_deaf(m, sb);
	test_hostile(m, sb);
	{
		struct slow w = {.m = m, .sb = sb, .port = relay_port(m, sb)};
		pthread_t tid;
		bool started = pthread_create(&tid, NULL, slow_fetches, &w) == 0;

		test_parallel(m, par ? atoi(par) : 10);
		if (started)
			pthread_join(tid, NULL);
		check_slow(w.out ? w.out : "");
		free(w.out);
	}
	test_exec_failed(m);
	test_kept(idx, allow);
out:
	sbx_sandbox_unref(sb);
	m = sbx_manager_free(m);
	sbx_auth_free(auth);
	if (*keys_path)
		unlink(keys_path);
	tap_is_int(count_instance(inst), 0, "no container of the egress manager is left");
	sbx_settings_release(&s);
	test_tenant_slots();
	stop_index();
}

int main(int argc, char **argv)
{
	test_reader();
	test_requests();
	test_tenant_policy();
	fixture_init(argc, argv, "egress");
	test_engine(find_script(argv[0]));
	tap_is_int(count_instance(instance), 0, "no container of this run is left");
	return fixture_end();
}
