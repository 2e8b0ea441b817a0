/* SPDX-License-Identifier: MIT */
/*
 * Who is calling: the credentials of a request turned into a principal (the
 * tenant that owns whatever the call makes), by one check that the HTTP
 * front calls from the headers, before any body is read.
 *
 * Today the credential is an API key from [auth] keys_file (src/auth/keys.c):
 * "msk_" + its key id (12 hex digits, public) + "_" + 64 hex digits of
 * secret; the file holds the key's SHA-256, never the key. The check finds
 * the key's line by its id and compares digests in constant time. A bearer
 * token that is not such a key is where OAuth 2.1 access tokens (RFC 9728
 * protected-resource metadata) will be told apart later, behind the same
 * sbx_auth_check: callers never see which kind of credential it was beyond
 * the principal's method.
 *
 * The store re-reads the keys file when it changes (its inode, size or mtime,
 * looked at no more than once a second, at a check), so `mcp-sandboxd keys
 * add|revoke` reach a running server within a second or two. A file that no
 * longer parses or is no longer safe fails closed: no key is accepted until
 * it is mended (the edit that broke it may have been a revocation); the log
 * and sbx_auth_status (GET /ready) say why.
 */
#ifndef SBX_AUTH_H
#define SBX_AUTH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sbx/error.h"
#include "sbx/settings.h"

#define SBX_TENANT_MAX 64 /* [A-Za-z0-9_.-]{1,64} */
#define SBX_KEY_ID_LEN 12 /* lowercase hex */
/* "msk_" ID "_" SECRET: the length of every API key. */
#define SBX_API_KEY_LEN (4 + SBX_KEY_ID_LEN + 1 + 64)
/* The tenant of every caller when no credentials are checked. */
#define SBX_TENANT_DEFAULT "default"
/* The tenant every session acts for until API keys exist. */
#define SBX_OWNER_DEFAULT "default"

typedef struct sbx_auth sbx_auth;

/* Per-tenant limits a key may carry; -1 = not set (the server's applies). */
struct sbx_auth_limits {
	int64_t sandboxes; /* sandboxes at once */
	int64_t calls;	   /* tool calls at once */
	int64_t memory;	   /* bytes per sandbox */
	int64_t nano_cpus; /* per sandbox */
	int64_t installs;  /* package installs at once */
};
/* No limit set. */
#define SBX_AUTH_LIMITS_NONE ((struct sbx_auth_limits){-1, -1, -1, -1, -1})

enum sbx_auth_method {
	SBX_AUTH_METHOD_NONE,	 /* nothing checked (auth.mode = none, or no keys file) */
	SBX_AUTH_METHOD_API_KEY, /* a key of the keys file */
};

/* Who a request is. */
struct sbx_principal {
	enum sbx_auth_method method;
	char tenant[SBX_TENANT_MAX + 1];
	char key_id[SBX_KEY_ID_LEN + 1]; /* "" for METHOD_NONE */
	struct sbx_auth_limits limits;
};

/* Why sbx_auth_check refused a request, as the audit log classes it (the
 * client's message says more). */
enum sbx_auth_reason {
	SBX_AUTH_ACCEPTED,
	SBX_AUTH_MISSING,     /* no credential given */
	SBX_AUTH_MALFORMED,   /* not "Bearer TOKEN", or a token without an API key's shape */
	SBX_AUTH_CONFLICTING, /* different credentials in two places */
	/* A key of the right shape that the keys file does not accept: unknown,
	 * wrong secret or revoked (the store tells them apart to nobody). */
	SBX_AUTH_REJECTED,
};

/* "accepted", "missing", "malformed", "conflicting", "rejected". */
const char *sbx_auth_reason_name(enum sbx_auth_reason reason);

/* What sbx_auth_check says about a refusal, for the audit log. */
struct sbx_auth_refusal {
	enum sbx_auth_reason reason;
	/* The public id of the key presented when it had an API key's shape,
	 * else "": never any byte of its secret. */
	char key_id[SBX_KEY_ID_LEN + 1];
};

/* A request's credentials as the HTTP front found them; any may be NULL
 * (absent). Given more than one, they must be the same credential. */
struct sbx_auth_request {
	const char *authorization; /* the Authorization header: "Bearer TOKEN" */
	const char *x_api_key;	   /* the X-API-Key header */
	const char *api_key_query; /* ?api_key=, percent-decoded */
	/* When not NULL, sbx_auth_check fills it on every return (reason
	 * SBX_AUTH_ACCEPTED when it accepted, or on failures of its own). */
	struct sbx_auth_refusal *refusal;
};

/*
 * Opens what S's [auth] section asks for. mode = none: every request is the
 * tenant "default", nothing checked. mode = keys with a keys_file: the file
 * is read now and must parse and be safe (a regular file of this user, not
 * writable by group or others; not a symbolic link), else -EINVAL/-EPERM/
 * -ENOENT with the reason in ERR. mode = keys without a keys_file: nothing
 * is checked either (sbx_auth_checks_keys is false); the program is to serve
 * loopback only then. 0 with *ret_auth, or a negative errno.
 */
int sbx_auth_open(const struct sbx_settings *s, sbx_auth **ret_auth, struct sbx_error *err);
sbx_auth *sbx_auth_free(sbx_auth *a);

/* True when sbx_auth_check asks for credentials (mode keys with a file). */
bool sbx_auth_checks_keys(const sbx_auth *a);

/*
 * Decides who REQ is. 0 with *ret: accepted. -EACCES with a message for the
 * client in ERR when the credentials are missing, malformed, unknown, wrong,
 * revoked or given twice differently; the message never holds any of the
 * credential's bytes, and REQ->refusal (when set) classes it for the audit
 * log. Safe to call from any number of threads; may re-read
 * the keys file (at most once a second). -ENOMEM/-EIO on failures of ours.
 */
int sbx_auth_check(sbx_auth *a, const struct sbx_auth_request *req, struct sbx_principal *ret,
		   struct sbx_error *err);

/*
 * Re-reads the keys file when it changed and a second has passed since the
 * last look (the HTTP front calls it about once a second, so revocations
 * take effect without a request). Returns a generation number that changes
 * whenever what is accepted may have changed; 0 when no keys are checked.
 */
uint64_t sbx_auth_refresh(sbx_auth *a);

/*
 * Whether P (a principal sbx_auth_check gave) is still accepted, as of the
 * last read (no re-read here, no lock held long): 0 yes (always for
 * METHOD_NONE); -EKEYREVOKED its key is gone (revoked, or now another
 * tenant's); -EIO the keys file cannot be used now (nothing is accepted; do
 * not end what P holds for that alone).
 */
int sbx_auth_principal_live(sbx_auth *a, const struct sbx_principal *p);

/* The same, and at 0 the key's limits as the file has them now into
 * *RET_LIMITS (may be NULL; METHOD_NONE: P's own). */
int sbx_auth_principal_limits(sbx_auth *a, const struct sbx_principal *p,
			      struct sbx_auth_limits *ret_limits);

/* The same for the key KEY_ID, whoever's it is (an artifact link's). */
int sbx_auth_key_id_live(sbx_auth *a, const char *key_id);

/* The egress allow-list of TENANT's keys as of the last read (no re-read):
 * 1 with it in BUF ("none", or comma-separated HOST[:PORT] as
 * sandbox.egress_allow takes them), 0 when its keys give none (or no keys
 * are checked): the server's sandbox.egress_allow applies; "none" for a
 * tenant with no key in the file (all revoked: fail closed); -EIO when the
 * keys file cannot be used now; -ENOBUFS when SIZE is too small
 * (SBX_AUTH_EGRESS_MAX + 1 is enough). A tenant has one list: every key of
 * it that gives egress_allow gives the same (the file does not parse
 * otherwise). */
#define SBX_AUTH_EGRESS_MAX 300
int sbx_auth_tenant_egress(sbx_auth *a, const char *tenant, char *buf, size_t size);

/* 0, or -EIO with why the keys file cannot be used now (GET /ready). */
int sbx_auth_status(sbx_auth *a, struct sbx_error *err);

/* ---- the keys file, for `mcp-sandboxd keys ...` ---- */

/* True when NAME is a valid tenant name. */
bool sbx_tenant_valid(const char *name);

/*
 * Makes a key for TENANT with LIMITS (n words "name=value": sandboxes=N,
 * calls=N, memory=SIZE, cpus=N, installs=N, egress_allow=none|HOST[:PORT],...)
 * and appends its line to PATH:
 * under an flock of PATH.lock, the file is read (it must parse and be safe),
 * written again with the new line to a temporary file in its folder,
 * fsync'd and renamed over it (made 0600 when absent). The key is written to
 * RET_KEY (SBX_API_KEY_LEN + 1 bytes) and exists nowhere else. -EINVAL: a
 * bad tenant or limit (the file untouched); -EBADMSG: the file does not
 * parse, or would not with the new line (an egress_allow other than the
 * tenant's other keys give); -EPERM: it is not safe; other negative errnos from the system.
 */
int sbx_keys_add(const char *path, const char *tenant, char *const *limits, size_t n,
		 char ret_key[SBX_API_KEY_LEN + 1], struct sbx_error *err);

/* Removes the keys of TENANT (key_id NULL) or the key KEY_ID (tenant NULL),
 * as sbx_keys_add writes. *ret_count: how many; -ENOENT when none, -EINVAL
 * for a bad tenant or key id, other errors as sbx_keys_add. Each
 * revoked key is written to OUT (may be NULL) as "revoked ID (TENANT)". */
int sbx_keys_revoke(const char *path, const char *tenant, const char *key_id, FILE *out,
		    size_t *ret_count, struct sbx_error *err);

/* Writes one line per key to OUT: tenant, key id, creation time, limits;
 * never digests. An absent file lists nothing. */
int sbx_keys_list(const char *path, FILE *out, struct sbx_error *err);

#endif
