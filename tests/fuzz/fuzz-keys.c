/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the keys file (src/auth/keys.c). The input is a keys
 * file for sbx_keys_parse. Checks: a refusal has a message naming a line
 * (or the size); a file that parses gives keys that each format back to a
 * line, and those lines parse again into the same keys (egress_allow
 * included), each found by its id, and a key's egress_allow is its
 * tenant's. Then the input's first line is presented as a credential, in each of
 * the three places, to a store holding one known key: only that key is
 * accepted, and a refusal's message is one of the fixed ones (none holds
 * any of the input).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth-internal.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/crypto.h"
#include "sbx/settings.h"

static sbx_auth *auth;
static char known[SBX_API_KEY_LEN + 1];
static char dir[] = "/tmp/fuzz-keys.XXXXXX", path[64], lock[80];

static void cleanup(void)
{
	auth = sbx_auth_free(auth);
	unlink(path);
	unlink(lock);
	rmdir(dir);
}

static bool same_key(const struct sbx_key *a, const struct sbx_key *b)
{
	return strcmp(a->tenant, b->tenant) == 0 && strcmp(a->id, b->id) == 0 &&
	       memcmp(a->digest, b->digest, sizeof(a->digest)) == 0 && a->created == b->created &&
	       memcmp(&a->limits, &b->limits, sizeof(a->limits)) == 0 &&
	       !a->egress_allow == !b->egress_allow &&
	       (!a->egress_allow || strcmp(a->egress_allow, b->egress_allow) == 0);
}

static void round_trip(const struct sbx_keyset *set)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf text = SBX_BUF_INIT;
	struct sbx_keyset *again = NULL;
	char line[KEYS_LINE_MAX + 2];

	for (size_t i = 0; i < set->n; i++) {
		const char *list = sbx_keyset_tenant_egress(set, set->keys[i].tenant);
		if (sbx_keyset_find(set, set->keys[i].id) != &set->keys[i])
			abort();
		/* A tenant has one list: its keys' that give one. */
		if (set->keys[i].egress_allow &&
		    (!list || strcmp(list, set->keys[i].egress_allow) != 0))
			abort();
		sbx_key_format(&set->keys[i], true, line, sizeof(line));
		strcat(line, "\n");
		if (sbx_buf_append(&text, line, strlen(line)) < 0)
			abort();
	}
	if (sbx_keys_parse(text.data, text.len, &again, &err) < 0) {
		fprintf(stderr, "fuzz-keys: the formatted keys do not parse: %s\n", err.msg);
		abort();
	}
	if (again->n != set->n)
		abort();
	for (size_t i = 0; i < set->n; i++) {
		if (!same_key(&set->keys[i], &again->keys[i])) {
			fprintf(stderr, "fuzz-keys: key %zu changes on the round trip\n", i);
			abort();
		}
	}
	sbx_keyset_free(again);
	sbx_buf_release(&text);
}

/* The refusals' messages, from credentials of each kind: every refusal is
 * one of them word for word, so none can carry a byte of the credential. */
static char refusals[4][SBX_ERROR_MSG_MAX];

static bool known_refusal(const char *msg)
{
	for (size_t i = 0; i < 4; i++)
		if (strcmp(msg, refusals[i]) == 0)
			return true;
	return false;
}

static void learn_refusals(void)
{
	char wrong[SBX_API_KEY_LEN + 1];
	struct sbx_auth_request reqs[4] = {{.x_api_key = ""},
					   {.authorization = "Basic x"},
					   {.x_api_key = "x"},
					   {.x_api_key = wrong}};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;

	memcpy(wrong, known, sizeof(wrong));
	wrong[SBX_API_KEY_LEN - 1] = wrong[SBX_API_KEY_LEN - 1] == '0' ? '1' : '0';
	for (size_t i = 0; i < 4; i++) {
		sbx_error_clear(&err);
		if (sbx_auth_check(auth, &reqs[i], &p, &err) != -EACCES)
			abort();
		memcpy(refusals[i], err.msg, sizeof(err.msg));
	}
}

static void present(const char *cred)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_principal p;
	char bearer[KEYS_LINE_MAX + 16];
	struct sbx_auth_request reqs[3] = {
	    {.authorization = bearer}, {.x_api_key = cred}, {.api_key_query = cred}};

	snprintf(bearer, sizeof(bearer), "Bearer %s", cred);
	for (size_t i = 0; i < 3; i++) {
		int r;

		sbx_error_clear(&err);
		r = sbx_auth_check(auth, &reqs[i], &p, &err);
		if (r == 0 && strcmp(cred, known) != 0) {
			fprintf(stderr, "fuzz-keys: accepted a credential that is not the key\n");
			abort();
		}
		if (r < 0 && (r != -EACCES || !known_refusal(err.msg))) {
			fprintf(stderr, "fuzz-keys: bad refusal %d: %s\n", r, err.msg);
			abort();
		}
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	char set[128];

	(void)argc;
	(void)argv;
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/keys", dir);
	snprintf(lock, sizeof(lock), "%s.lock", path);
	atexit(cleanup);
	if (sbx_keys_add(path, "fuzz", NULL, 0, known, &err) < 0 || sbx_settings_init(&s) < 0)
		abort();
	snprintf(set, sizeof(set), "auth.keys_file=%s", path);
	if (sbx_settings_set(&s, set, &err) < 0 || sbx_auth_open(&s, &auth, &err) < 0)
		abort();
	sbx_settings_release(&s);
	learn_refusals();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_keyset *set = NULL;
	char cred[KEYS_LINE_MAX + 1];
	size_t n = 0;
	int r = sbx_keys_parse((const char *)data, size, &set, &err);

	if (r == 0)
		round_trip(set);
	else if (r >= 0 || (strncmp(err.msg, "line ", 5) != 0 && strncmp(err.msg, "larger", 6)))
		abort();
	sbx_keyset_free(set);

	while (n < size && n < sizeof(cred) - 1 && data[n] != '\n' && data[n] != '\0')
		n++;
	memcpy(cred, data, n);
	cred[n] = '\0';
	present(cred);
	return 0;
}
