/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the signed artifact link check (sbx_link_verify,
 * src/tools/link_sign.c), as the artifact route calls it. The input is a
 * sandbox id, a relative path and a link's query, separated by NUL bytes
 * (id NUL path NUL query); the query is split as the route does (exp and
 * sig once each, nothing else) and checked with a fixed key at a fixed
 * time. Checks: a link the verifier takes as ours (0 or -EKEYEXPIRED) is
 * exactly the one the signer makes for that id and path (sbx_link_sign
 * again: the same EXP, written alike, and the same SIG), 0 only when it
 * has not ended; any other answer is -EACCES.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/artifact.h"

#define NOW INT64_C(1700000000)

static sbx_link_key *key;

/* The key of the seeds: bytes 0..31 in a link-secret file of a new folder. */
static void key_open(void)
{
	char dir[] = "/tmp/fuzz-links.XXXXXX", path[64];
	struct sbx_error err = SBX_ERROR_INIT;
	uint8_t secret[SBX_LINK_SECRET_LEN];
	int fd;

	for (int i = 0; i < SBX_LINK_SECRET_LEN; i++)
		secret[i] = (uint8_t)i;
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/%s", dir, SBX_LINK_SECRET_FILE);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, secret, sizeof(secret)) != (ssize_t)sizeof(secret) || close(fd) < 0)
		abort();
	if (sbx_link_key_open(dir, &key, &err) < 0) {
		fprintf(stderr, "fuzz-links: %s\n", err.msg);
		abort();
	}
	unlink(path);
	rmdir(dir);
}

/* The route's split of QUERY (modified): 0 with *EXP and *SIG (either may
 * stay NULL) when every argument is exp or sig, once and with a value. */
static int query_split(char *query, const char **exp, const char **sig)
{
	*exp = *sig = NULL;
	if (!*query)
		return 0;
	for (char *arg = query, *next; arg; arg = next) {
		char *eq = strchr(arg, '=');
		const char **slot;
		next = strchr(arg, '&');
		if (next)
			*next++ = '\0';
		if (!eq)
			return -1;
		*eq = '\0';
		slot = !strcmp(arg, "exp") ? exp : !strcmp(arg, "sig") ? sig : NULL;
		if (!slot || *slot)
			return -1;
		*slot = eq + 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 3), *id, *path, *query;
	const char *exp, *sig;
	int r;

	if (!s)
		return 0;
	if (!key)
		key_open();
	memcpy(s, data, size);
	s[size] = s[size + 1] = s[size + 2] = '\0';
	id = s;
	path = id + strlen(id) + 1;
	if (path > s + size)
		path = s + size + 1;
	query = path + strlen(path) + 1;
	if (query > s + size + 1)
		query = s + size + 2;

	if (query_split(query, &exp, &sig) == 0) {
		r = sbx_link_verify(key, id, path, NULL, exp, sig, NOW);
		if (r == 0 || r == -EKEYEXPIRED) {
			char want[SBX_LINK_SIG_LEN + 1], num[24];
			char *end;
			long long e;
			errno = 0;
			e = strtoll(exp, &end, 10);
			if (errno || *end || e < 0)
				abort();
			snprintf(num, sizeof(num), "%" PRId64, (int64_t)e);
			if (strcmp(num, exp) != 0)
				abort(); /* another spelling of EXP taken */
			if (sbx_link_sign(key, id, path, "", (int64_t)e, want) < 0 ||
			    strcmp(want, sig) != 0)
				abort(); /* a signature the signer does not make */
			if ((r == 0) != ((int64_t)e >= NOW))
				abort();
		} else if (r != -EACCES) {
			abort();
		}
	}
	free(s);
	return 0;
}
