/* SPDX-License-Identifier: MIT */
/*
 * Percent-encoding (RFC 3986 section 2.1) for paths and query values, done
 * by libcurl (curl_easy_escape, curl_easy_unescape): the engine's REST paths
 * (backends/rest.c) and the artifact links (src/tools/artifact_link.c); and
 * whether a path is clean enough to fetch from the package index with its
 * credentials (src/egress/egress_proto.c, sandbox.index_files_path).
 */
#ifndef SBX_PERCENT_H
#define SBX_PERCENT_H

#include <stdbool.h>
#include <stddef.h>

#include "sbx/buf.h"

/* Appends S to B with every byte but the unreserved ones (ALPHA DIGIT - . _ ~)
 * as %XX; with KEEP_SLASH, '/' stays as it is (a path of segments).
 * Returns 0 or -ENOMEM. */
int sbx_percent_append(struct sbx_buf *b, const char *s, bool keep_slash);

/* S percent-encoded as one value ('/' too), malloc'd; NULL on -ENOMEM. */
char *sbx_percent_escape(const char *s);

/* Decodes s[0..len) into a malloc'd, NUL-terminated *RET_OUT of *RET_LEN
 * bytes (which may hold NUL bytes: check when that matters). Every '%' must
 * start a %XX escape: -EINVAL otherwise; -ENOMEM. */
int sbx_percent_decode(const char *s, size_t len, char **ret_out, size_t *ret_len);

/* Whether the URL path S[0..N) (no query: the caller cuts it at '?') names
 * exactly what it says to any server that reads it: it starts with '/' and
 * has no "." or ".." segment (a dot perhaps %2e, a segment perhaps with a
 * ";parameter"), no empty segment ("//"; a final '/' is fine), no backslash,
 * no %2f, %5c, %00 or %25 (a slash, backslash, NUL or percent sign a server
 * might decode into one of the above) and no '%' outside a %XX escape. When
 * not, *RET_WHAT (may be NULL) says which, as a phrase ("a dot segment (.
 * or ..)"). Pure, no allocation. */
bool sbx_path_is_clean(const char *s, size_t n, const char **ret_what);

#endif
