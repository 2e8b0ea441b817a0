/* SPDX-License-Identifier: MIT */
/*
 * Artifact links: how a file a run wrote is named in a URL the server serves
 * itself. The tools build them (src/tools/artifact_link.c); the HTTP front
 * parses them (src/http/artifact_route.c).
 */
#ifndef SBX_ARTIFACT_H
#define SBX_ARTIFACT_H

#include <stdbool.h>
#include <stdint.h>

#include "sbx/error.h"

/* PUBLIC_URL/artifacts/SANDBOX_ID/RELPATH, every path segment
 * percent-encoded; NULL on -ENOMEM. The caller frees it. */
#define SBX_ARTIFACT_ROUTE "/artifacts/"
char *sbx_artifact_url(const char *public_url, const char *sandbox_id, const char *relpath);
/* Splits the part of a request path after SBX_ARTIFACT_ROUTE into a sandbox
 * id and a relative path, percent-decoded. -EINVAL when malformed (no
 * relpath, bad escapes, a decoded NUL or '/' inside a segment). */
int sbx_artifact_parse(const char *route_rest, char **ret_sandbox_id, char **ret_relpath);

/*
 * Signed, expiring links (src/tools/link_sign.c). A link the server hands
 * out is
 *   PUBLIC_URL/artifacts/SANDBOX_ID/RELPATH?exp=EXP[&kid=KID]&sig=SIG
 * EXP the Unix time (seconds) it ends, KID the id of the API key whose
 * session made it (absent when none: auth off), SIG the unpadded base64url
 * of
 *   HMAC-SHA256(secret, "v2\n" SANDBOX_ID "\n" RELPATH "\n" EXP "\n" KID)
 * over the decoded id and path (an encoding variant of the URL cannot change
 * what is signed). The artifact route serves a link with a KID only while
 * that key is accepted: revoking a key ends the links it made. The secret is SBX_LINK_SECRET_LEN
 * random bytes kept in the state folder, so links outlive a restart; without a state folder it is
 * made per process and links end with it.
 */
#define SBX_LINK_SECRET_LEN 32
#define SBX_LINK_SECRET_FILE "link-secret"
#define SBX_LINK_SIG_LEN 43 /* base64url of 32 bytes, no padding */
typedef struct sbx_link_key sbx_link_key;

/* The secret in DIR/link-secret, made there (O_CREAT|O_EXCL, 0600, 32
 * random bytes) when missing; DIR NULL or "": a random one of this object
 * alone. A file there that is not a regular file (a symbolic link is never
 * followed), not of this user, not mode 0600 or not exactly 32 bytes is
 * -EPERM, the message naming it and what to do. */
int sbx_link_key_open(const char *dir, sbx_link_key **ret_key, struct sbx_error *err);
sbx_link_key *sbx_link_key_free(sbx_link_key *k);
/* Whether the secret is kept in a file (false: it ends with the object). */
bool sbx_link_key_persistent(const sbx_link_key *k);

/* SIG of (SANDBOX_ID, RELPATH, EXP, KID) into out (SBX_LINK_SIG_LEN +
 * NUL); KID "" or a key id. -EINVAL when the id holds a newline, KID is
 * malformed or EXP is negative, -EIO. */
int sbx_link_sign(const sbx_link_key *k, const char *sandbox_id, const char *relpath,
		  const char *kid, int64_t exp, char out[SBX_LINK_SIG_LEN + 1]);
/* sbx_artifact_url with ?exp=EXP[&kid=KID]&sig=SIG appended (no kid= when
 * KID is ""); NULL on failure. */
char *sbx_artifact_link(const sbx_link_key *k, const char *public_url, const char *sandbox_id,
			const char *relpath, const char *kid, int64_t exp);
/* Checks a link's KID, EXP and SIG as they came in the query (each may be
 * NULL: absent) against the decoded SANDBOX_ID and RELPATH at Unix time NOW:
 * 0 when the signature is ours and EXP >= NOW, -EKEYEXPIRED when it is ours
 * and EXP has passed, else -EACCES (missing, malformed, another path,
 * sandbox, key or EXP, a signature not ours). Signatures are compared in
 * constant time. Whether KID's key is still accepted is the caller's to
 * ask. */
int sbx_link_verify(const sbx_link_key *k, const char *sandbox_id, const char *relpath,
		    const char *kid, const char *exp, const char *sig, int64_t now);

#endif
