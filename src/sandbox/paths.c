/* SPDX-License-Identifier: MIT */
/*
 * The paths a sandbox's files go by: an artifact's path as a link or a
 * caller names it (sbx_artifact_check_relpath, pure: the fuzzers call it),
 * and a path the interpreter names (sbx_interp_path_ok). For files.c,
 * interp.c and the tools, below them all.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/utf8.h"

#define ARTIFACT_DEPTH_MAX 64

/* Refuses a relpath with "", ".", ".." or empty segments, or a leading '/'. */
int sbx_artifact_check_relpath(const char *relpath, struct sbx_error *err)
{
	const char *p = relpath;
	size_t depth = 0;

	if (!relpath || !*relpath)
		return sbx_error_set(err, -EPERM, "no artifact path given");
	if (strlen(relpath) >= SBX_PATH_MAX)
		return sbx_error_set(err, -EINVAL, "the artifact path is too long");
	if (relpath[0] == '/')
		return sbx_error_set(err, -EPERM,
				     "artifact paths are relative to %s, not absolute: %.200s",
				     SBX_RESULTS_DIR, relpath);
	for (;;) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return sbx_error_set(err, -EPERM,
					     "artifact path %.200s has an empty, \".\" or \"..\" "
					     "part; name a file under %s",
					     relpath, SBX_RESULTS_DIR);
		if (++depth > ARTIFACT_DEPTH_MAX)
			return sbx_error_set(err, -EINVAL, "the artifact path is too deep");
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* A path the interpreter names: code in the sandbox can write protocol lines
 * itself, so it must be a clean relative path under SBX_RESULTS_DIR (no "..",
 * no empty or "." part, not absolute, bounded), valid UTF-8 and free of
 * control characters (it becomes a link, a log line and a file name). */
bool sbx_interp_path_ok(const char *path, size_t len)
{
	if (!path || len != strlen(path) || !sbx_utf8_valid(path, len) ||
	    sbx_artifact_check_relpath(path, NULL) < 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			return false;
	return true;
}
