/* SPDX-License-Identifier: MIT */
/* Artifact links: built by the tools, parsed by the artifact route. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/artifact.h"
#include "sbx/percent.h"

char *sbx_artifact_url(const char *public_url, const char *sandbox_id, const char *relpath)
{
	struct sbx_buf b = SBX_BUF_INIT;
	size_t n = strlen(public_url);

	while (n > 0 && public_url[n - 1] == '/')
		n--;
	if (sbx_buf_append(&b, public_url, n) < 0 ||
	    sbx_buf_append(&b, SBX_ARTIFACT_ROUTE, strlen(SBX_ARTIFACT_ROUTE)) < 0 ||
	    sbx_percent_append(&b, sandbox_id, false) < 0 || sbx_buf_append(&b, "/", 1) < 0 ||
	    sbx_percent_append(&b, relpath, true) < 0) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b);
}

/* Decodes [s, end) into a new string; a '/' or NUL that was escaped is refused. */
static int decode_segment(const char *s, const char *end, char **ret)
{
	_cleanup_free_ char *out = NULL;
	size_t n = 0;
	int r = sbx_percent_decode(s, (size_t)(end - s), &out, &n);

	if (r < 0)
		return r;
	if (strlen(out) != n || strchr(out, '/'))
		return -EINVAL;
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
		/* Every '/' is kept: "ID//x" is "/x" (refused), never "x". */
		if (r == 0 && p != slash + 1)
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
