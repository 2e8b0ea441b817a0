/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the checks that keep paths inside their folders. The
 * artifact path of a link (sbx_artifact_check_relpath, src/sandbox/files.c:
 * relative to /app/results) and a tar entry's name (sbx_tar_check_name).
 * The input is the path (up to its first NUL). Checks: an accepted path is
 * relative and has no ".." part; an accepted artifact path has no empty or
 * "." part either, and survives the link round trip (sbx_artifact_url, then
 * sbx_artifact_parse of what follows /artifacts/ gives the same path).
 * The input as an MCP resource URI (sbx_resource_uri_parse,
 * src/tools/resources.c): an accepted one gives an id of an id's shape and
 * a path the artifact check accepts, without control characters, and
 * survives the round trip through sbx_resource_uri.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox-internal.h"
#include "sbx/artifact.h"
#include "sbx/tar.h"
#include "tools/tools.h"

/* The resource URI check's invariants on S (see above). */
static void resource_uri(const char *s)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char *id = NULL, *rel = NULL, *again = NULL, *id2 = NULL, *rel2 = NULL;
	size_t n;

	if (sbx_resource_uri_parse(s, &id, &rel, &err) != 0) {
		if (err.code != -EINVAL || !err.msg[0])
			abort();
		return;
	}
	n = strlen(id);
	if (n < 1 || n > SBX_SANDBOX_ID_MAX ||
	    strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
		       "nopqrstuvwxyz0123456789_.-") != n ||
	    !strcmp(id, ".") || !strcmp(id, "..") || sbx_artifact_check_relpath(rel, NULL) != 0)
		abort();
	for (const char *p = rel; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			abort();
	again = sbx_resource_uri(id, rel);
	if (!again || sbx_resource_uri_parse(again, &id2, &rel2, NULL) != 0 || strcmp(id, id2) ||
	    strcmp(rel, rel2))
		abort();
	free(id);
	free(rel);
	free(again);
	free(id2);
	free(rel2);
}

/* The parts of P ('/'-separated): whether one is "..", one is "" or ".". */
static void parts(const char *p, bool *ret_dotdot, bool *ret_empty_or_dot)
{
	*ret_dotdot = *ret_empty_or_dot = false;
	for (;;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			*ret_dotdot = true;
		if (n == 0 || (n == 1 && p[0] == '.'))
			*ret_empty_or_dot = true;
		if (!p[n])
			return;
		p += n + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char *s = malloc(size + 1);
	bool dotdot, empty_or_dot;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	parts(s, &dotdot, &empty_or_dot);

	if (sbx_artifact_check_relpath(s, &err) == 0) {
		char *url, *id = NULL, *rel = NULL;
		const char *rest;
		if (!*s || s[0] == '/' || dotdot || empty_or_dot)
			abort();
		url = sbx_artifact_url("http://127.0.0.1:8000/", "0123456789ab", s);
		if (!url)
			abort();
		rest = strstr(url, SBX_ARTIFACT_ROUTE);
		if (!rest ||
		    sbx_artifact_parse(rest + strlen(SBX_ARTIFACT_ROUTE), &id, &rel) != 0 ||
		    strcmp(id, "0123456789ab") != 0 || strcmp(rel, s) != 0)
			abort();
		free(id);
		free(rel);
		free(url);
	} else if (err.code >= 0 || !err.msg[0]) {
		abort();
	}

	resource_uri(s);

	sbx_error_clear(&err);
	if (sbx_tar_check_name(s, &err) == 0) {
		if (!*s || s[0] == '/' || dotdot || strlen(s) > SBX_TAR_NAME_MAX)
			abort();
	} else if (err.code >= 0) {
		abort();
	}
	free(s);
	return 0;
}
