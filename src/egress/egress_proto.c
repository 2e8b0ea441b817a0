/* SPDX-License-Identifier: MIT */
/*
 * The egress relay's frames, the requests of what connects to it, and the
 * policy that decides them: see src/egress/egress-internal.h. No I/O, no
 * threads; every input is the sandbox's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <curl/curl.h>

#include "egress-internal.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/error.h"
#include "sbx/percent.h"

/* Longest request target; more headers than this is a 431 too. */
#define TARGET_MAX 8192
#define HEADERS_MAX 100

/* ---- frames ---- */

void egress_frame_header(unsigned char out[EGRESS_HDR], uint8_t type, uint16_t id, uint32_t len)
{
	out[0] = type;
	out[1] = 0;
	out[2] = (unsigned char)(id >> 8);
	out[3] = (unsigned char)id;
	out[4] = (unsigned char)(len >> 24);
	out[5] = (unsigned char)(len >> 16);
	out[6] = (unsigned char)(len >> 8);
	out[7] = (unsigned char)len;
}

int egress_reader_feed(struct egress_reader *r, const void *data, size_t n, egress_frame_fn fn,
		       void *userdata, char *why, size_t why_size)
{
	const unsigned char *p = data;

	for (;;) {
		if (r->hdr_have < EGRESS_HDR) {
			size_t take = EGRESS_HDR - r->hdr_have;
			if (take > n)
				take = n;
			memcpy(r->hdr + r->hdr_have, p, take);
			r->hdr_have += take;
			p += take;
			n -= take;
			if (r->hdr_have < EGRESS_HDR)
				return 0;
			r->type = r->hdr[0];
			r->id = (uint16_t)(r->hdr[2] << 8 | r->hdr[3]);
			r->len = (uint32_t)r->hdr[4] << 24 | (uint32_t)r->hdr[5] << 16 |
				 (uint32_t)r->hdr[6] << 8 | r->hdr[7];
			r->have = 0;
			if (r->len > EGRESS_FRAME_MAX) {
				r->hdr_have = 0;
				return sbx_why_set(why, why_size, -EPROTO,
						   "a frame of %u bytes (the limit is %d)", r->len,
						   EGRESS_FRAME_MAX);
			}
			if (r->type < EGRESS_HELLO || r->type > EGRESS_WINDOW || r->hdr[1]) {
				r->hdr_have = 0;
				return sbx_why_set(why, why_size, -EPROTO,
						   "a frame of unknown type %u (flags %u)", r->type,
						   r->hdr[1]);
			}
		}
		size_t take = r->len - r->have;
		if (take > n)
			take = n;
		memcpy(r->buf + r->have, p, take);
		r->have += take;
		p += take;
		n -= take;
		if (r->have < r->len)
			return 0;
		r->hdr_have = 0;
		int rc = fn(userdata, r->type, r->id, r->buf, r->len);
		if (rc < 0)
			return rc;
		if (n == 0)
			return 0;
	}
}

/* ---- the policy ---- */

void egress_policy_release(struct egress_policy *p)
{
	if (!p)
		return;
	free(p->index_url);
	free(p->index_origin);
	free(p->index_path);
	free(p->files_path);
	if (p->password)
		explicit_bzero(p->password, strlen(p->password));
	free(p->user);
	free(p->password);
	free(p->allow);
	free(p->list);
	free(p->server_allow);
	free(p->tenant);
	memset(p, 0, sizeof(*p));
}

static int add_allow(struct egress_policy *p, const char *host, int port, bool any_address)
{
	struct egress_allow *a = realloc(p->allow, (p->n_allow + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	p->allow = a;
	snprintf(a[p->n_allow].host, sizeof(a[p->n_allow].host), "%s", host);
	a[p->n_allow].port = port;
	a[p->n_allow].any_address = any_address;
	p->n_allow++;
	return 0;
}

/* The file hosts of well-known indexes, allowed with them. */
static const struct {
	const char *index, *files;
} file_hosts[] = {
    {"pypi.org", "files.pythonhosted.org"},
    {"test.pypi.org", "test-files.pythonhosted.org"},
};

/* An IPv4 address in dotted-quad form or an IPv6 address, as
 * sbx_hostport_parse writes them (no brackets). */
static bool ip_literal(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

static char *url_part(CURLU *u, CURLUPart what, unsigned flags)
{
	char *v = NULL, *copy;

	if (curl_url_get(u, what, &v, flags) != CURLUE_OK)
		return NULL;
	copy = strdup(v);
	curl_free(v);
	return copy;
}

int egress_policy_init(struct egress_policy *p, const struct sbx_settings *s, char *why,
		       size_t why_size)
{
	CURLU *u = curl_url();
	_cleanup_free_ char *scheme = NULL, *host = NULL, *port = NULL;
	int r = -ENOMEM;

	memset(p, 0, sizeof(*p));
	if (!u)
		goto fail;
	if (curl_url_set(u, CURLUPART_URL, s->sandbox.index_url, 0) != CURLUE_OK ||
	    !(scheme = url_part(u, CURLUPART_SCHEME, 0)) ||
	    !(host = url_part(u, CURLUPART_HOST, 0)) ||
	    !(port = url_part(u, CURLUPART_PORT, CURLU_DEFAULT_PORT)) ||
	    !(p->index_path = url_part(u, CURLUPART_PATH, 0))) {
		r = sbx_why_set(why, why_size, -EINVAL,
				"sandbox.index_url is not a URL with a host");
		goto fail;
	}
	p->index_https = strcasecmp(scheme, "https") == 0;
	if (!p->index_https && strcasecmp(scheme, "http") != 0) {
		r = sbx_why_set(why, why_size, -EINVAL,
				"sandbox.index_url is not http:// or https://");
		goto fail;
	}
	{
		const char *h = host;
		size_t hl = strlen(host);
		char what[128];
		if (hl > 2 && h[0] == '[') { /* sbx_hostport_parse takes the brackets */
			if (sbx_hostport_parse(h, hl, 0, p->index_host, &p->index_port, what,
					       sizeof(what)) < 0) {
				r = sbx_why_set(why, why_size, -EINVAL, "sandbox.index_url: %s",
						what);
				goto fail;
			}
		} else if (sbx_hostport_parse(h, hl, 0, p->index_host, &p->index_port, what,
					      sizeof(what)) < 0) {
			r = sbx_why_set(why, why_size, -EINVAL, "sandbox.index_url: %s", what);
			goto fail;
		}
	}
	p->index_port = atoi(port);
	p->user = url_part(u, CURLUPART_USER, CURLU_URLDECODE);
	p->password = url_part(u, CURLUPART_PASSWORD, CURLU_URLDECODE);
	if (curl_url_set(u, CURLUPART_USER, NULL, 0) != CURLUE_OK ||
	    curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) != CURLUE_OK ||
	    !(p->index_url = url_part(u, CURLUPART_URL, 0)))
		goto fail;
	{
		bool default_port = p->index_port == (p->index_https ? 443 : 80);
		if (asprintf(&p->index_origin, default_port ? "%s://%s" : "%s://%s:%d",
			     p->index_https ? "https" : "http", host, p->index_port) < 0) {
			p->index_origin = NULL;
			goto fail;
		}
	}
	p->server_allow = strdup(s->sandbox.egress_allow);
	if (!p->server_allow)
		goto fail;
	r = egress_policy_set_list(p, NULL, why, why_size);
	if (r < 0)
		goto fail;
	r = -ENOMEM;
	if (s->sandbox.index_files_path && *s->sandbox.index_files_path &&
	    !(p->files_path = strdup(s->sandbox.index_files_path)))
		goto fail;
	curl_url_cleanup(u);
	return 0;
fail:
	if (r == -ENOMEM)
		sbx_why_set(why, why_size, r, "out of memory");
	curl_url_cleanup(u);
	egress_policy_release(p);
	return r;
}

int egress_policy_set_list(struct egress_policy *p, const char *list, char *why, size_t why_size)
{
	struct egress_policy n = {0}; /* only allow, n_allow */
	const char *v = list ? list : p->server_allow;
	char *copy = NULL;
	int r = -ENOMEM;

	if (list && !(copy = strdup(list)))
		goto fail;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(file_hosts); i++)
		if (strcmp(p->index_host, file_hosts[i].index) == 0 &&
		    add_allow(&n, file_hosts[i].files, 443, false) < 0)
			goto fail;
	if (list && strcmp(list, "none") == 0)
		v = "";
	while (*v) {
		char h[SBX_HOST_BUF], what[128];
		size_t len;
		int pt;

		while (*v == ' ')
			v++;
		len = strcspn(v, ",");
		while (len && v[len - 1] == ' ')
			len--;
		if (sbx_hostport_parse(v, len, SBX_HOSTPORT_WILDCARD, h, &pt, what, sizeof(what)) <
		    0) {
			r = sbx_why_set(why, why_size, -EINVAL, "%s: \"%.*s\": %s",
					list ? "the tenant's egress_allow" : "sandbox.egress_allow",
					(int)(len < 64 ? len : 64), v, what);
			goto fail;
		}
		if (add_allow(&n, h, pt, ip_literal(h)) < 0)
			goto fail;
		v += len;
		while (*v == ' ')
			v++;
		if (*v == ',')
			v++;
	}
	free(p->allow);
	p->allow = n.allow;
	p->n_allow = n.n_allow;
	free(p->list);
	p->list = copy;
	return 0;
fail:
	if (r == -ENOMEM)
		sbx_why_set(why, why_size, r, "out of memory");
	free(n.allow);
	free(copy);
	return r;
}

int egress_policy_set_tenant(struct egress_policy *p, const char *tenant, sbx_egress_lookup_fn fn,
			     void *userdata)
{
	char *t = tenant ? strdup(tenant) : NULL;

	if (tenant && !t)
		return -ENOMEM;
	free(p->tenant);
	p->tenant = t;
	p->lookup = fn;
	p->lookup_ud = userdata;
	egress_policy_follow(p);
	return 0;
}

void egress_policy_follow(struct egress_policy *p)
{
	char buf[SBX_EGRESS_LIST_MAX], why[256];
	const char *want;
	int r;

	if (!p->lookup || !p->tenant)
		return;
	r = p->lookup(p->lookup_ud, p->tenant, buf, sizeof(buf));
	/* Fail closed: a list too long cannot be what was meant, and a keys file
	 * that cannot be read now may be a revocation half made. */
	if (r < 0)
		snprintf(buf, sizeof(buf), "none");
	want = r == 0 ? NULL : buf;
	if (want ? p->list && strcmp(p->list, want) == 0 : !p->list)
		return;
	if (egress_policy_set_list(p, want, why, sizeof(why)) == -EINVAL)
		egress_policy_set_list(p, "none", why, sizeof(why));
}

enum egress_reach egress_policy_reach(const struct egress_policy *p, const char *host, int port,
				      bool tls)
{
	enum egress_reach r = EGRESS_DENIED;

	/* A tunnel to the index's own host is a raw pipe from the server's
	 * network position (any virtual host behind its address): like any
	 * name, only at public addresses, unless the index is an address. (Its
	 * pages and files are fetched by the server, any address: the index
	 * requests, not this.) */
	if (strcmp(host, p->index_host) == 0 && port == p->index_port)
		r = ip_literal(p->index_host) ? EGRESS_ANY_ADDRESS : EGRESS_PUBLIC;
	for (size_t i = 0; i < p->n_allow; i++) {
		const struct egress_allow *a = &p->allow[i];
		if (sbx_host_match(a->host, host) && port == (a->port ? a->port : tls ? 443 : 80)) {
			if (a->any_address)
				return EGRESS_ANY_ADDRESS;
			r = EGRESS_PUBLIC;
		}
	}
	return r;
}

bool egress_policy_allows(const struct egress_policy *p, const char *host, int port, bool tls)
{
	return egress_policy_reach(p, host, port, tls) != EGRESS_DENIED;
}

/* Whether PATH[0..N) is PREFIX or under it: "/simple/" holds "/simple/x";
 * "/simple" holds "/simple" and "/simple/x", not "/simplex". */
static bool path_under(const char *prefix, const char *path, size_t n)
{
	size_t pl = strlen(prefix);

	if (n < pl || strncmp(path, prefix, pl) != 0)
		return false;
	return pl && (prefix[pl - 1] == '/' || n == pl || path[pl] == '/');
}

/* The file names pip fetches: distributions (PEP 427 wheels, PEP 625
 * sdists, the older archives pip still unpacks and the eggs that
 * pypiserver and devpi list beside them) and their PEP 658 metadata
 * ("NAME.whl.metadata"). A plain ".tar" is left out: no index serves one. */
static const char *const dist_suffixes[] = {".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2",
					    ".tbz", ".tar.xz", ".txz", ".egg"};

/* Whether the clean PATH[0..N) (sbx_path_is_clean), without a query, names
 * a distribution file: its last segment a name of letters, digits and
 * "-_.+!~" starting with a letter or digit and ending in one of
 * dist_suffixes (perhaps then ".metadata"), and no character of the path
 * outside those and "/", written as such or as %XX. What the rule keeps
 * out: ";" (servers such as Tomcat read "/admin;x.whl" as "/admin"), "?",
 * "=", "&", ",", ":", "@" and the like, which no distribution's URL needs. */
static bool dist_file_path(const char *path, size_t n)
{
	const char *last = path, *end = path + n;
	size_t len;

	for (const char *c = path; c < end; c++) {
		char v = *c;

		if (v == '/') {
			last = c + 1;
			continue;
		}
		if (v == '%') { /* a %XX escape (the path is clean): what it stands for */
			char hex[3] = {c[1], c[2], 0};
			v = (char)strtol(hex, NULL, 16);
			c += 2;
		}
		if (!(((v | 0x20) >= 'a' && (v | 0x20) <= 'z') || (v >= '0' && v <= '9') ||
		      (v && strchr("-_.+!~", v))))
			return false;
	}
	len = (size_t)(end - last);
	if (len > 9 && strncasecmp(end - 9, ".metadata", 9) == 0)
		len -= 9;
	if (!len ||
	    !(((*last | 0x20) >= 'a' && (*last | 0x20) <= 'z') || (*last >= '0' && *last <= '9')))
		return false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(dist_suffixes); i++) {
		size_t sl = strlen(dist_suffixes[i]);
		if (len > sl && strncasecmp(last + len - sl, dist_suffixes[i], sl) == 0)
			return true;
	}
	return false;
}

/* Whether PATH[0..N) is under the folder that holds INDEX_PATH's last
 * segment ("/r/simple/" -> "/r/"). */
static bool under_index_parent(const char *index_path, const char *path, size_t n)
{
	size_t pl = strlen(index_path);

	while (pl > 0 && index_path[pl - 1] == '/')
		pl--;
	while (pl > 0 && index_path[pl - 1] != '/')
		pl--;
	return pl > 0 && n >= pl && memcmp(index_path, path, pl) == 0;
}

int egress_index_path_check(const struct egress_policy *p, const char *path, char *why,
			    size_t why_size)
{
	size_t n = strcspn(path, "?"), all = strlen(path);
	const char *what = NULL;
	int shown = all < 200 ? (int)all : 200; /* the query too */

	if (!sbx_path_is_clean(path, n, &what))
		return sbx_why_set(
		    why, why_size, 403,
		    "mcp-sandbox: the index path \"%.*s\" has %s: only clean paths (under "
		    "the package index's %s, %s%s) are fetched from it",
		    shown, path, what, p->index_path,
		    p->files_path ? "and sandbox.index_files_path "
				  : "or distribution files while sandbox.index_files_path "
				    "is unset",
		    p->files_path ? p->files_path : "");
	if (path_under(p->index_path, path, n))
		return 0;
	if (p->files_path) { /* set: the index's files are there, nowhere else */
		if (path_under(p->files_path, path, n))
			return 0;
		return sbx_why_set(
		    why, why_size, 403,
		    "mcp-sandbox: \"%.*s\" is not under the package index's path (%s) or "
		    "sandbox.index_files_path (%s): only those are fetched from %s with its "
		    "credentials; if the index serves its files under another path, ask "
		    "the server's operator to change sandbox.index_files_path",
		    shown, path, p->index_path, p->files_path, p->index_host);
	}
	/* Not set: the index's files under the folder its pages are in
	 * ("/simple/" -> "/", devpi's "/root/pypi/+simple/" -> "/root/pypi/",
	 * a repository manager's "/repository/pypi/simple/" -> "/repository/
	 * pypi/"; not another repository on the same host), always on its
	 * origin (the URL is index_origin + path: the credentials go to no
	 * other scheme, host or port), and only what names a distribution file. */
	if (path[n] == '\0' && under_index_parent(p->index_path, path, n) &&
	    dist_file_path(path, n))
		return 0;
	return sbx_why_set(
	    why, why_size, 403,
	    "mcp-sandbox: \"%.*s\" is not under the package index's path (%s) nor a "
	    "distribution file (.whl, .tar.gz, .tgz, .zip, .tar.bz2, .tbz, .tar.xz, .txz, "
	    ".egg; no query): "
	    "only those are "
	    "fetched from %s with its credentials; if the index serves its files there, "
	    "ask the server's operator to set sandbox.index_files_path to their path",
	    shown, path, p->index_path, p->index_host);
}

/* ---- requests ---- */

void egress_request_release(struct egress_request *q)
{
	if (!q)
		return;
	free(q->path);
	free(q->headers);
	memset(q, 0, sizeof(*q));
}

/* Request headers passed on to the index or a host: what caching and
 * content negotiation need, nothing that authenticates or routes. */
static const char *const passed_headers[] = {
    "accept",	     "accept-encoding", "accept-language",
    "cache-control", "if-match",	"if-modified-since",
    "if-none-match", "if-range",	"if-unmodified-since",
    "pragma",	     "range",		"user-agent",
};

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A request target's bytes: printable ASCII, no space, no fragment. */
static bool target_ok(const char *s, size_t n)
{
	if (n == 0 || n > TARGET_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '#')
			return false;
	return true;
}

static int refuse_host(const struct egress_policy *p, const char *host, int port, bool tls,
		       char *why, size_t why_size)
{
	bool v6 = strchr(host, ':') != NULL;

	if (p->list) /* the tenant's own list: named, cut to a bound */
		return sbx_why_set(
		    why, why_size, 403,
		    "mcp-sandbox: %s%s%s:%d is not allowed (%s): code in this sandbox may "
		    "reach only the package index (%s) and the hosts in the egress_allow "
		    "of its tenant's API keys (%.160s%s); ask the server's operator to "
		    "add this host there (mcp-sandboxd keys)",
		    v6 ? "[" : "", host, v6 ? "]" : "", port, tls ? "CONNECT" : "plain HTTP",
		    p->index_host, p->list, strlen(p->list) > 160 ? "..." : "");
	return sbx_why_set(
	    why, why_size, 403,
	    "mcp-sandbox: %s%s%s:%d is not allowed (%s): code in a sandbox may reach only the "
	    "package index (%s) and the hosts in the server's sandbox.egress_allow setting; "
	    "ask its operator to add this host there",
	    v6 ? "[" : "", host, v6 ? "]" : "", port, tls ? "CONNECT" : "plain HTTP",
	    p->index_host);
}

/* "http://AUTHORITY[/path]": the host, port (80 when absent) and path. */
static int parse_absolute(const char *t, size_t n, char *host, int *port, const char **ret_path,
			  char *why, size_t why_size)
{
	const char *a = t + 7, *end = t + n, *slash;
	char what[128];
	size_t alen;

	for (slash = a; slash < end && *slash != '/' && *slash != '?'; slash++)
		;
	alen = (size_t)(slash - a);
	if (memchr(a, '@', alen))
		return sbx_why_set(why, why_size, 400, "mcp-sandbox: a URL with user information");
	if (sbx_hostport_parse(a, alen, 0, host, port, what, sizeof(what)) < 0)
		return sbx_why_set(why, why_size, 400, "mcp-sandbox: bad host in the request: %s",
				   what);
	if (*port == 0)
		*port = 80;
	*ret_path = slash;
	return 0;
}

/* egress_parse_request, and *RET_INDEX_REFUSED (may be NULL) true when
 * the answer is egress_index_path_check's 403. */
static int parse_request(const struct egress_policy *p, int relay_port, const char *buf, size_t n,
			 struct egress_request *ret, bool *ret_index_refused, char *why,
			 size_t why_size)
{
	struct egress_request q = {0};
	struct sbx_buf hdrs = SBX_BUF_INIT;
	const char *end = NULL, *line, *eol, *sp1, *sp2, *path = NULL;
	size_t scan = n < EGRESS_HEAD_MAX ? n : EGRESS_HEAD_MAX, nlines = 0;
	bool get;
	int r;

	for (size_t i = 0; i + 3 < scan; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' &&
		    buf[i + 3] == '\n') {
			end = buf + i;
			break;
		}
	if (!end)
		return n >= EGRESS_HEAD_MAX
			   ? sbx_why_set(why, why_size, 431,
					 "mcp-sandbox: the request head is over %d bytes",
					 EGRESS_HEAD_MAX)
			   : 0;
	q.head_len = (size_t)(end - buf) + 4;

	/* The request line. */
	eol = memchr(buf, '\r', (size_t)(end - buf) + 1);
	sp1 = memchr(buf, ' ', (size_t)(eol - buf));
	sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (eol[1] != '\n' || !sp1 || !sp2 || !target_ok(sp1 + 1, (size_t)(sp2 - sp1 - 1)) ||
	    !((eol - sp2 == 9) &&
	      (memcmp(sp2 + 1, "HTTP/1.1", 8) == 0 || memcmp(sp2 + 1, "HTTP/1.0", 8) == 0)))
		return sbx_why_set(why, why_size, 400,
				   "mcp-sandbox: malformed request line (METHOD TARGET HTTP/1.x)");
	const char *target = sp1 + 1;
	size_t tlen = (size_t)(sp2 - target);
	size_t mlen = (size_t)(sp1 - buf);

	if (mlen == 7 && memcmp(buf, "CONNECT", 7) == 0) {
		char what[128];
		q.kind = EGRESS_REQ_CONNECT;
		if (sbx_hostport_parse(target, tlen, SBX_HOSTPORT_NEED_PORT, q.host, &q.port, what,
				       sizeof(what)) < 0)
			return sbx_why_set(why, why_size, 400,
					   "mcp-sandbox: bad CONNECT target: %s", what);
		get = false;
	} else if ((mlen == 3 && memcmp(buf, "GET", 3) == 0) ||
		   (mlen == 4 && memcmp(buf, "HEAD", 4) == 0)) {
		get = true;
		q.head_only = mlen == 4;
		if (target[0] == '/') {
			q.kind = EGRESS_REQ_INDEX;
			path = target;
		} else if (tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
			r = parse_absolute(target, tlen, q.host, &q.port, &path, why, why_size);
			if (r)
				return r;
			if (((strcmp(q.host, "127.0.0.1") == 0 ||
			      strcmp(q.host, "localhost") == 0) &&
			     q.port == relay_port) ||
			    (!p->index_https && strcmp(q.host, p->index_host) == 0 &&
			     q.port == p->index_port))
				q.kind = EGRESS_REQ_INDEX;
			else
				q.kind = EGRESS_REQ_FORWARD;
		} else {
			return sbx_why_set(
			    why, why_size, 400,
			    "mcp-sandbox: the target must be a path or an http:// URL "
			    "(HTTPS goes through CONNECT)");
		}
	} else {
		return sbx_why_set(
		    why, why_size, 405,
		    "mcp-sandbox: only GET and HEAD (plain HTTP) and CONNECT (HTTPS) go "
		    "through the sandbox's relay");
	}

	/* The headers. */
	for (line = eol + 2; line < end; line = eol + 2) {
		const char *colon, *v, *ve;
		size_t nlen;

		eol = memchr(line, '\r', (size_t)(end - line) + 1);
		if (eol[1] != '\n')
			goto malformed;
		if (++nlines > HEADERS_MAX) {
			sbx_buf_release(&hdrs);
			return sbx_why_set(why, why_size, 431, "mcp-sandbox: more than %d headers",
					   HEADERS_MAX);
		}
		colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line)
			goto malformed;
		nlen = (size_t)(colon - line);
		for (size_t i = 0; i < nlen; i++)
			if (!token_char(line[i]))
				goto malformed;
		for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
			;
		for (ve = eol; ve > v && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
			;
		for (const char *c = v; c < ve; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
				goto malformed;
		if ((nlen == 14 && strncasecmp(line, "content-length", 14) == 0 &&
		     !(ve - v == 1 && *v == '0')) ||
		    (nlen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0)) {
			if (!get)
				continue; /* a CONNECT's own headers are not forwarded */
			sbx_buf_release(&hdrs);
			return sbx_why_set(
			    why, why_size, 501,
			    "mcp-sandbox: a request body is not relayed over plain HTTP "
			    "(use HTTPS)");
		}
		if (!get)
			continue;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(passed_headers); i++)
			if (strlen(passed_headers[i]) == nlen &&
			    strncasecmp(line, passed_headers[i], nlen) == 0) {
				if (sbx_buf_appendf(&hdrs, "%.*s: %.*s", (int)nlen, line,
						    (int)(ve - v), v) < 0 ||
				    sbx_buf_append(&hdrs, "\0", 1) < 0)
					goto nomem;
				break;
			}
	}

	if (q.kind == EGRESS_REQ_CONNECT || q.kind == EGRESS_REQ_FORWARD) {
		bool tls = q.kind == EGRESS_REQ_CONNECT;
		enum egress_reach reach = egress_policy_reach(p, q.host, q.port, tls);

		if (reach == EGRESS_DENIED) {
			sbx_buf_release(&hdrs);
			return refuse_host(p, q.host, q.port, tls, why, why_size);
		}
		q.any_address = reach == EGRESS_ANY_ADDRESS;
	} else {
		q.any_address = true; /* the index */
	}
	if (get) {
		size_t plen = (size_t)(target + tlen - path);
		q.path = plen ? strndup(path, plen) : strdup("/");
		if (!q.path)
			goto nomem;
		if (q.path[0] == '?') { /* "http://host?x": the path is "/" */
			char *fixed = NULL;
			if (asprintf(&fixed, "/%s", q.path) < 0)
				goto nomem;
			free(q.path);
			q.path = fixed;
		}
		/* Whatever the sandbox names, the credentials go only to the
		 * index's own paths. */
		if (q.kind == EGRESS_REQ_INDEX &&
		    (r = egress_index_path_check(p, q.path, why, why_size))) {
			sbx_buf_release(&hdrs);
			egress_request_release(&q);
			if (ret_index_refused)
				*ret_index_refused = true;
			return r;
		}
		/* NUL-separated; the worker splits it. */
		q.headers_len = hdrs.len;
		q.headers = hdrs.data ? sbx_buf_steal(&hdrs) : strdup("");
		if (!q.headers)
			goto nomem;
	}
	sbx_buf_release(&hdrs);
	*ret = q;
	return 1;
malformed:
	sbx_buf_release(&hdrs);
	return sbx_why_set(why, why_size, 400, "mcp-sandbox: malformed header line");
nomem:
	sbx_buf_release(&hdrs);
	egress_request_release(&q);
	return -ENOMEM;
}

int egress_parse_request(const struct egress_policy *p, int relay_port, const char *buf, size_t n,
			 struct egress_request *ret, char *why, size_t why_size)
{
	return parse_request(p, relay_port, buf, n, ret, NULL, why, why_size);
}

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Status";
	}
}

int egress_plain_response(int status, const char *phrase, const char *text, char **ret,
			  size_t *ret_len)
{
	char *s = NULL;
	int n = asprintf(&s,
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
			 status, phrase ? phrase : reason(status), strlen(text) + 1, text);

	if (n < 0)
		return -ENOMEM;
	*ret = s;
	*ret_len = (size_t)n;
	return 0;
}

int egress_parse_head(struct egress_head_scan *s, const struct egress_policy *p, int relay_port,
		      const char *buf, size_t n, struct egress_request *ret, char *why,
		      size_t why_size)
{
	size_t scan = n < EGRESS_HEAD_MAX ? n : EGRESS_HEAD_MAX, i;

	for (i = s->next; i + 3 < scan; i++) {
		s->examined++;
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' &&
		    buf[i + 3] == '\n')
			return parse_request(p, relay_port, buf, i + 4, ret, &s->index_refused, why,
					     why_size);
	}
	s->next = i;
	if (n < EGRESS_HEAD_MAX)
		return 0;
	return parse_request(p, relay_port, buf, n, ret, &s->index_refused, why, why_size);
}
