/* SPDX-License-Identifier: MIT */
/* Artifact links: built by the tools, parsed by the artifact route. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/artifact.h"

/* RFC 3986 unreserved characters stay; everything else is %XX. */
static int append_escaped(struct sbx_buf *b, const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int r;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
			r = sbx_buf_append(b, s, 1);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			r = sbx_buf_append(b, e, 3);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

char *sbx_artifact_url(const char *public_url, const char *sandbox_id, const char *relpath)
{
	struct sbx_buf b = SBX_BUF_INIT;
	size_t n = strlen(public_url);

	while (n > 0 && public_url[n - 1] == '/')
		n--;
	if (sbx_buf_append(&b, public_url, n) < 0 ||
	    sbx_buf_append(&b, SBX_ARTIFACT_ROUTE, strlen(SBX_ARTIFACT_ROUTE)) < 0 ||
	    append_escaped(&b, sandbox_id, false) < 0 || sbx_buf_append(&b, "/", 1) < 0 ||
	    append_escaped(&b, relpath, true) < 0) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decode [s, end) into a new string; a '/' or NUL that was escaped is refused. */
static int decode_segment(const char *s, const char *end, char **ret)
{
	_cleanup_free_ char *out = malloc((size_t)(end - s) + 1);
	size_t n = 0;

	if (!out)
		return -ENOMEM;
	while (s < end) {
		if (*s == '%') {
			int hi, lo;
			if (end - s < 3 || (hi = hexval(s[1])) < 0 || (lo = hexval(s[2])) < 0)
				return -EINVAL;
			char c = (char)(hi << 4 | lo);
			if (c == '\0' || c == '/')
				return -EINVAL;
			out[n++] = c;
			s += 3;
		} else {
			out[n++] = *s++;
		}
	}
	out[n] = '\0';
	*ret = SBX_TAKE(out);
	return 0;
}

int sbx_artifact_parse(const char *rest, char **ret_sandbox_id, char **ret_relpath)
{
	_cleanup_free_ char *id = NULL;
	struct sbx_buf path = SBX_BUF_INIT;
	const char *slash = strchr(rest, '/');
	const char *p;
	int r;

	if (!slash || slash == rest || !slash[1])
		return -EINVAL;
	r = decode_segment(rest, slash, &id);
	if (r < 0)
		return r;
	for (p = slash + 1;;) {
		const char *end = strchr(p, '/');
		_cleanup_free_ char *seg = NULL;
		if (!end)
			end = p + strlen(p);
		r = decode_segment(p, end, &seg);
		if (r == 0 && path.len)
			r = sbx_buf_append(&path, "/", 1);
		if (r == 0)
			r = sbx_buf_append(&path, seg, strlen(seg));
		if (r < 0) {
			sbx_buf_release(&path);
			return r;
		}
		if (!*end)
			break;
		p = end + 1;
	}
	*ret_sandbox_id = SBX_TAKE(id);
	*ret_relpath = sbx_buf_steal(&path);
	return 0;
}
