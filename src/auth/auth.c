/* SPDX-License-Identifier: MIT */
/*
 * sbx_auth: the request's credentials, found in one of three places and
 * handed to the verifier for their kind. Today that is the key store
 * (keys.c) for API keys; an OAuth 2.1 access token would be a bearer token
 * of another shape, verified here against its authorization server, giving
 * the same struct sbx_principal.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/auth-internal.h"
#include "sbx/auth.h"

struct sbx_auth {
	struct sbx_keystore *keys; /* NULL: nothing is checked */
};

int sbx_auth_open(const struct sbx_settings *s, sbx_auth **ret_auth, struct sbx_error *err)
{
	sbx_auth *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (strcmp(s->auth.mode, "keys") == 0 && *s->auth.keys_file) {
		r = sbx_keystore_open(s->auth.keys_file, &a->keys, err);
		if (r < 0) {
			free(a);
			return sbx_error_prefix(err, "auth.keys_file");
		}
	}
	*ret_auth = a;
	return 0;
}

sbx_auth *sbx_auth_free(sbx_auth *a)
{
	if (!a)
		return NULL;
	sbx_keystore_free(a->keys);
	free(a);
	return NULL;
}

bool sbx_auth_checks_keys(const sbx_auth *a)
{
	return a->keys != NULL;
}

/* The token of "Bearer TOKEN" (the scheme in any case, spaces around), or
 * NULL when HEADER names another scheme or no token. */
static const char *bearer_token(const char *header, size_t *ret_len)
{
	const char *t;
	size_t n;

	if (strncasecmp(header, "Bearer", 6) != 0 || (header[6] != ' ' && header[6] != '\t'))
		return NULL;
	t = header + 6 + strspn(header + 6, " \t");
	n = strlen(t);
	while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
		n--;
	if (!n)
		return NULL;
	*ret_len = n;
	return t;
}

const char *sbx_auth_reason_name(enum sbx_auth_reason reason)
{
	static const char *const names[] = {[SBX_AUTH_ACCEPTED] = "accepted",
					    [SBX_AUTH_MISSING] = "missing",
					    [SBX_AUTH_MALFORMED] = "malformed",
					    [SBX_AUTH_CONFLICTING] = "conflicting",
					    [SBX_AUTH_REJECTED] = "rejected"};

	return (size_t)reason < sizeof(names) / sizeof(names[0]) ? names[reason] : "?";
}

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Fills REQ's refusal (when asked for) with REASON and, when TOKEN[0..LEN)
 * has an API key's shape ("msk_" ID "_" SECRET, lowercase hex), its ID. */
static void refuse(const struct sbx_auth_request *req, enum sbx_auth_reason reason,
		   const char *token, size_t len)
{
	struct sbx_auth_refusal *f = req->refusal;

	if (!f)
		return;
	*f = (struct sbx_auth_refusal){.reason = reason};
	if (token && len == SBX_API_KEY_LEN && memcmp(token, "msk_", 4) == 0 &&
	    is_lower_hex(token + 4, SBX_KEY_ID_LEN) && token[4 + SBX_KEY_ID_LEN] == '_' &&
	    is_lower_hex(token + 5 + SBX_KEY_ID_LEN, SBX_API_KEY_LEN - 5 - SBX_KEY_ID_LEN))
		memcpy(f->key_id, token + 4, SBX_KEY_ID_LEN);
	else if (reason == SBX_AUTH_REJECTED)
		f->reason = SBX_AUTH_MALFORMED; /* the store refuses such a token unseen */
}

int sbx_auth_check(sbx_auth *a, const struct sbx_auth_request *req, struct sbx_principal *ret,
		   struct sbx_error *err)
{
	const char *given[3] = {NULL, NULL, NULL}, *token = NULL;
	size_t len[3] = {0, 0, 0}, token_len = 0;
	int r;

	refuse(req, SBX_AUTH_ACCEPTED, NULL, 0);
	if (!a->keys) {
		*ret = (struct sbx_principal){.method = SBX_AUTH_METHOD_NONE,
					      .tenant = SBX_TENANT_DEFAULT,
					      .limits = {-1, -1, -1, -1, -1}};
		return 0;
	}
	if (req->authorization) {
		given[0] = bearer_token(req->authorization, &len[0]);
		if (!given[0]) {
			refuse(req, SBX_AUTH_MALFORMED, NULL, 0);
			return sbx_error_set(err, -EACCES,
					     "Authorization: expected \"Bearer KEY\" (the API key "
					     "as mcp-sandboxd keys add printed it)");
		}
	}
	if (req->x_api_key)
		given[1] = req->x_api_key, len[1] = strlen(req->x_api_key);
	if (req->api_key_query)
		given[2] = req->api_key_query, len[2] = strlen(req->api_key_query);
	for (size_t i = 0; i < 3; i++) {
		if (!given[i])
			continue;
		if (token && (token_len != len[i] || memcmp(token, given[i], len[i]) != 0)) {
			refuse(req, SBX_AUTH_CONFLICTING, NULL, 0);
			return sbx_error_set(err, -EACCES,
					     "different credentials in the Authorization header, "
					     "X-API-Key and api_key: send one");
		}
		token = given[i], token_len = len[i];
	}
	if (!token || !token_len) {
		refuse(req, SBX_AUTH_MISSING, NULL, 0);
		return sbx_error_set(
		    err, -EACCES,
		    "an API key is required: send it as Authorization: Bearer KEY, "
		    "X-API-Key: KEY or ?api_key=KEY");
	}
	/* Only API keys so far; an OAuth access token would be told apart here. */
	r = sbx_keystore_verify(a->keys, token, token_len, ret, err);
	if (r == -EACCES)
		refuse(req, SBX_AUTH_REJECTED, token, token_len);
	return r;
}

uint64_t sbx_auth_refresh(sbx_auth *a)
{
	return a && a->keys ? sbx_keystore_refresh(a->keys) : 0;
}

int sbx_auth_principal_live(sbx_auth *a, const struct sbx_principal *p)
{
	return sbx_auth_principal_limits(a, p, NULL);
}

int sbx_auth_principal_limits(sbx_auth *a, const struct sbx_principal *p,
			      struct sbx_auth_limits *ret_limits)
{
	if (p->method == SBX_AUTH_METHOD_NONE) {
		if (ret_limits)
			*ret_limits = p->limits;
		return 0;
	}
	if (!a || !a->keys)
		return -EKEYREVOKED; /* a key's principal, and no keys any more */
	return sbx_keystore_key_state(a->keys, p->tenant, p->key_id, ret_limits);
}

int sbx_auth_key_id_live(sbx_auth *a, const char *key_id)
{
	if (!a || !a->keys)
		return -EKEYREVOKED;
	return sbx_keystore_key_state(a->keys, NULL, key_id, NULL);
}

int sbx_auth_tenant_egress(sbx_auth *a, const char *tenant, char *buf, size_t size)
{
	return a && a->keys ? sbx_keystore_tenant_egress(a->keys, tenant, buf, size) : 0;
}

int sbx_auth_status(sbx_auth *a, struct sbx_error *err)
{
	return a && a->keys ? sbx_keystore_status(a->keys, err) : 0;
}
