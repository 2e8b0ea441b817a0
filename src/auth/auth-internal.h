/* SPDX-License-Identifier: MIT */
/*
 * Inside src/auth: the keys file's parser and the key store that
 * sbx_auth_check (auth.c) asks. The parser is here, not static, for
 * tests/fuzz/fuzz-keys.c.
 *
 * The keys file, one key per line, fields separated by one space:
 *
 *   TENANT KEY_ID SHA256 CREATED [LIMIT=VALUE ...]
 *   alice 3f9a0c12b7e4 9b71...(64 hex) 2025-06-01T12:00:00Z sandboxes=4 memory=1g
 *
 * TENANT is [A-Za-z0-9_.-]{1,64}; KEY_ID 12 lowercase hex digits, unique in
 * the file; SHA256 the 64 lowercase hex digits of SHA-256 over the whole key
 * text ("msk_ID_SECRET"); CREATED RFC 3339 UTC to the second with "Z";
 * limits: sandboxes, calls, installs (0..1000000), memory (a size, k/m/g,
 * 6m at least), cpus (0.01..1024), egress_allow (the tenant's egress
 * allow-list: "none", or up to KEYS_EGRESS_ENTRIES comma-separated
 * HOST[:PORT] as sandbox.egress_allow takes them, no spaces, at most
 * KEYS_EGRESS_LEN bytes; every key of a tenant that gives it gives the same
 * list), each at most once. Lines starting with #
 * are comments; empty lines are allowed. Nothing else: no other whitespace,
 * no \r, only printable ASCII, at most KEYS_LINE_MAX bytes a line,
 * KEYS_MAX keys and KEYS_FILE_MAX bytes.
 */
#ifndef SBX_AUTH_INTERNAL_H
#define SBX_AUTH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/auth.h"
#include "sbx/crypto.h"
#include "sbx/error.h"

#define KEYS_LINE_MAX 512
#define KEYS_MAX 100000
#define KEYS_FILE_MAX (32 * 1024 * 1024)
#define KEYS_CREATED_LEN 20		    /* 2025-06-01T12:00:00Z */
#define KEYS_EGRESS_LEN SBX_AUTH_EGRESS_MAX /* bytes of an egress_allow value */
#define KEYS_EGRESS_ENTRIES 32		    /* hosts in an egress_allow value */

struct sbx_key {
	char tenant[SBX_TENANT_MAX + 1];
	char id[SBX_KEY_ID_LEN + 1];
	uint8_t digest[SBX_SHA256_LEN];
	int64_t created; /* seconds since the epoch */
	struct sbx_auth_limits limits;
	/* Its egress_allow as written ("none" or HOST[:PORT],...; owned), NULL
	 * when the line has none. */
	char *egress_allow;
	unsigned line;
};

/* Keys in file order, an index sorted by id for lookups, and one sorted by
 * tenant (a tenant's keys with an egress_allow first). */
struct sbx_keyset {
	struct sbx_key *keys;
	uint32_t *by_id;
	uint32_t *by_tenant;
	size_t n;
};

/* Parses TEXT[0..LEN): 0 with *ret_set, -EINVAL with "line N: why" in ERR
 * (never a field's value), -EFBIG, -ENOMEM. */
int sbx_keys_parse(const char *text, size_t len, struct sbx_keyset **ret_set,
		   struct sbx_error *err);
struct sbx_keyset *sbx_keyset_free(struct sbx_keyset *set);
/* The key with ID (NUL-terminated), or NULL. */
const struct sbx_key *sbx_keyset_find(const struct sbx_keyset *set, const char *id);

/* The egress_allow TENANT's keys give ("none" or a list), NULL when none
 * of them gives one (or TENANT has no key). */
const char *sbx_keyset_tenant_egress(const struct sbx_keyset *set, const char *tenant);
/* Whether TENANT has a key in SET. */
bool sbx_keyset_has_tenant(const struct sbx_keyset *set, const char *tenant);

/* K's line as the file has it, without the newline, into BUF (KEYS_LINE_MAX
 * + 1 bytes); WITH_DIGEST false leaves the digest out (keys list). */
void sbx_key_format(const struct sbx_key *k, bool with_digest, char *buf, size_t size);

/* The store behind sbx_auth: the keys file and the keys last read from it. */
struct sbx_keystore;

/* Reads PATH now: it must be safe and parse. */
int sbx_keystore_open(const char *path, struct sbx_keystore **ret_store, struct sbx_error *err);
struct sbx_keystore *sbx_keystore_free(struct sbx_keystore *store);

/* KEY[0..LEN) (any bytes) against the store, re-read first when the file
 * changed and a second has passed: 0 with *ret filled, or -EACCES with a
 * message that holds none of KEY. */
int sbx_keystore_verify(struct sbx_keystore *store, const char *key, size_t len,
			struct sbx_principal *ret, struct sbx_error *err);
/* Re-reads the file when it changed and a second has passed; returns the
 * store's generation (bumped at every change of what is accepted). */
uint64_t sbx_keystore_refresh(struct sbx_keystore *store);
/* Whether the key ID of TENANT (NULL: any) is accepted now, as last read (no re-read):
 * 0 yes, -EKEYREVOKED no longer (gone, or another tenant's), -EIO the file
 * cannot be used now (nothing is accepted). At 0 the key's limits go to
 * *RET_LIMITS (may be NULL). */
int sbx_keystore_key_state(struct sbx_keystore *store, const char *tenant, const char *id,
			   struct sbx_auth_limits *ret_limits);
/* TENANT's egress_allow as last read (no re-read) into BUF (SIZE bytes): 1
 * when its keys give one, 0 when not, -EIO when the file cannot be used
 * now, -ENOBUFS when SIZE is too small. */
int sbx_keystore_tenant_egress(struct sbx_keystore *store, const char *tenant, char *buf,
			       size_t size);
/* 0, or -EIO with why the file cannot be used now in ERR. */
int sbx_keystore_status(struct sbx_keystore *store, struct sbx_error *err);

#endif
