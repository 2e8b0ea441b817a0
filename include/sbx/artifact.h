/* SPDX-License-Identifier: MIT */
/*
 * Artifact links: how a file a run wrote is named in a URL the server serves
 * itself. The tools build them (src/tools/artifact_link.c); the HTTP front
 * parses them (src/http/artifact_route.c).
 */
#ifndef SBX_ARTIFACT_H
#define SBX_ARTIFACT_H

/* PUBLIC_URL/artifacts/SANDBOX_ID/RELPATH, every path segment
 * percent-encoded; NULL on -ENOMEM. The caller frees it. */
#define SBX_ARTIFACT_ROUTE "/artifacts/"
char *sbx_artifact_url(const char *public_url, const char *sandbox_id, const char *relpath);
/* Splits the part of a request path after SBX_ARTIFACT_ROUTE into a sandbox
 * id and a relative path, percent-decoded. -EINVAL when malformed (no
 * relpath, bad escapes, a decoded NUL or '/' inside a segment). */
int sbx_artifact_parse(const char *route_rest, char **ret_sandbox_id, char **ret_relpath);

#endif
