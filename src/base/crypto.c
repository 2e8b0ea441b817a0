/* SPDX-License-Identifier: MIT */
/*
 * The wrapper over libcrypto. The only logic of our own is checking input
 * before EVP_DecodeBlock, which on its own skips leading and trailing
 * whitespace, takes '=' anywhere as a zero sextet and counts padding in the
 * length it returns; and chunking, since libcrypto's block calls take an int.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <openssl/rand.h>
#if OPENSSL_VERSION_MAJOR >= 3
#include <openssl/core_names.h>
#endif

#include "sbx/crypto.h"

/* Block sizes handed to EVP_EncodeBlock/EVP_DecodeBlock: whole groups
 * (3 bytes in, 4 characters out), far below INT_MAX. */
#define ENCODE_CHUNK ((size_t)3 << 22)
#define DECODE_CHUNK ((size_t)4 << 22)

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static bool is_b64_char(char c)
{
	return c != '\0' && memchr(b64_alphabet, c, sizeof(b64_alphabet) - 1) != NULL;
}

char *sbx_base64_encode(const void *data, size_t len)
{
	const unsigned char *in = data;
	size_t o = 0;
	char *out;

	if (len > (SIZE_MAX - 1) / 4 * 3 - 2) {
		errno = ENOMEM;
		return NULL;
	}
	out = malloc((len + 2) / 3 * 4 + 1);
	if (!out)
		return NULL;
	out[0] = '\0';
	for (size_t i = 0; i < len; i += ENCODE_CHUNK) {
		size_t n = len - i < ENCODE_CHUNK ? len - i : ENCODE_CHUNK;
		/* Writes 4 * ceil(n / 3) characters and a NUL. */
		o += (size_t)EVP_EncodeBlock((unsigned char *)out + o, in + i, (int)n);
	}
	out[o] = '\0';
	return out;
}

int sbx_base64_decode(const char *s, size_t len, unsigned char **ret_data, size_t *ret_len)
{
	unsigned char *out;
	size_t pad = 0, o = 0;

	if (len % 4 != 0)
		return -EINVAL;
	if (len > 0 && s[len - 1] == '=')
		pad = s[len - 2] == '=' ? 2 : 1;
	for (size_t i = 0; i < len - pad; i++)
		if (!is_b64_char(s[i]))
			return -EINVAL;
	out = malloc(len / 4 * 3 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < len; i += DECODE_CHUNK) {
		size_t n = len - i < DECODE_CHUNK ? len - i : DECODE_CHUNK;
		/* Counts 3 bytes per group, padding included. */
		int r = EVP_DecodeBlock(out + o, (const unsigned char *)s + i, (int)n);
		if (r < 0 || (size_t)r != n / 4 * 3) {
			ERR_clear_error();
			free(out);
			return -EINVAL;
		}
		o += (size_t)r;
	}
	o -= pad;
	out[o] = '\0';
	*ret_data = out;
	*ret_len = o;
	return 0;
}

int sbx_base64_decode_lenient(const char *s, size_t len, unsigned char **ret_data, size_t *ret_len)
{
	const char *eq = len ? memchr(s, '=', len) : NULL;
	size_t n = eq ? (size_t)(eq - s) : len, whole;
	char *padded;
	int r;

	for (size_t i = 0; i < n; i++)
		if (!is_b64_char(s[i]) && s[i] != '-' && s[i] != '_')
			return -EINVAL;
	/* A lone final character carries no whole byte. */
	whole = n % 4 == 1 ? n - 1 : n;
	if (whole > SIZE_MAX - 4)
		return -ENOMEM;
	padded = malloc(whole + 4);
	if (!padded)
		return -ENOMEM;
	/* The URL-safe alphabet (RFC 4648 section 5) differs in two places. */
	for (size_t i = 0; i < whole; i++)
		padded[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
	while (whole % 4 != 0)
		padded[whole++] = '=';
	r = sbx_base64_decode(padded, whole, ret_data, ret_len);
	free(padded);
	return r;
}

int sbx_sha256(const void *data, size_t len, uint8_t out[SBX_SHA256_LEN])
{
	unsigned int n = 0;

	if (EVP_Digest(len ? data : "", len, out, &n, EVP_sha256(), NULL) != 1 ||
	    n != SBX_SHA256_LEN) {
		ERR_clear_error();
		return -EIO;
	}
	return 0;
}

int sbx_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
		    uint8_t out[SBX_SHA256_LEN])
{
	unsigned int n = 0;

	if (key_len > INT_MAX)
		return -EINVAL;
	/* Never a NULL key or data: some OpenSSL 3 releases refuse a NULL key
	 * even of length 0. */
	if (!HMAC(EVP_sha256(), key_len ? key : "", (int)key_len, len ? data : (const void *)"",
		  len, out, &n) ||
	    n != SBX_SHA256_LEN) {
		ERR_clear_error();
		return -EIO;
	}
	return 0;
}

bool sbx_crypto_equal(const void *a, const void *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len) == 0;
}

#if OPENSSL_VERSION_MAJOR >= 3
/*
 * RAND_bytes keeps a pair of DRBGs per calling thread, about 3 KiB that live
 * as long as the thread: with a thread per connection that is 3 MB per 1,000
 * SSE streams (make bench saw it). One DRBG of our own instead, seeded from
 * libcrypto's global primary one and used under a lock: ids are drawn a few
 * times a session, never in a hot loop.
 */
static pthread_once_t rand_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t rand_lock = PTHREAD_MUTEX_INITIALIZER;
static EVP_RAND_CTX *rand_ctx;

static void rand_init(void)
{
	EVP_RAND *rand = EVP_RAND_fetch(NULL, "CTR-DRBG", NULL);
	EVP_RAND_CTX *ctx = rand ? EVP_RAND_CTX_new(rand, RAND_get0_primary(NULL)) : NULL;
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_utf8_string(OSSL_DRBG_PARAM_CIPHER, (char *)"AES-256-CTR", 0),
	    OSSL_PARAM_construct_end(),
	};

	EVP_RAND_free(rand);
	if (ctx && EVP_RAND_instantiate(ctx, 256, 0, NULL, 0, params) == 1)
		rand_ctx = ctx;
	else
		EVP_RAND_CTX_free(ctx);
	ERR_clear_error();
}

int sbx_random_bytes(void *buf, size_t len)
{
	int ok;

	if (len == 0)
		return 0;
	pthread_once(&rand_once, rand_init);
	if (!rand_ctx)
		return -EIO;
	pthread_mutex_lock(&rand_lock);
	/* EVP_RAND_generate splits a request larger than the DRBG's maximum. */
	ok = EVP_RAND_generate(rand_ctx, buf, len, 256, 0, NULL, 0);
	pthread_mutex_unlock(&rand_lock);
	if (ok != 1) {
		ERR_clear_error();
		return -EIO;
	}
	return 0;
}
#else
int sbx_random_bytes(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len > 0) {
		int n = len > INT_MAX ? INT_MAX : (int)len;
		if (RAND_bytes(p, n) != 1) {
			ERR_clear_error();
			return -EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
#endif

void sbx_hex_encode(const void *data, size_t len, char *out)
{
	const unsigned char *in = data;

	out[0] = '\0';
	for (size_t i = 0; i < len; i++)
		snprintf(out + 2 * i, 3, "%02x", in[i]);
}
