/* SPDX-License-Identifier: MIT */
/*
 * The tree's one crypto and encoding library: a thin wrapper over OpenSSL's
 * libcrypto (EVP, HMAC, CRYPTO_memcmp, RAND_bytes). Nothing here is written
 * by hand; every codec and primitive of mcp-sandbox goes through this file.
 * Errors are negative errno values; ret_* out-parameters are written only on
 * success.
 */
#ifndef SBX_CRYPTO_H
#define SBX_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_SHA256_LEN 32

/* Standard base64 (RFC 4648 section 4 alphabet, '=' padded, no line breaks)
 * of data[0..len), as a malloc'd NUL-terminated string; NULL when out of
 * memory. data may be NULL when len is 0 (the result is then ""). */
char *sbx_base64_encode(const void *data, size_t len);

/*
 * Strict base64 decoding of s[0..len): the standard alphabet only, len a
 * multiple of 4, '=' only as one or two final padding characters; no
 * whitespace, line breaks or NUL bytes. Unused bits of the last character
 * before the padding are ignored, as RFC 4648 section 3.5 allows. On success
 * *ret_data is a malloc'd buffer of exactly *ret_len bytes followed by one NUL
 * byte that *ret_len does not count (so decoded text can be used as a C
 * string). Returns 0, -EINVAL when s is not such base64, or -ENOMEM.
 */
int sbx_base64_decode(const char *s, size_t len, unsigned char **ret_data, size_t *ret_len);

/*
 * Lenient base64 decoding, for a peer that may or may not pad (Docker's and
 * Podman's X-Docker-Container-Path-Stat header): the standard alphabet or the
 * URL-safe one ('-' and '_' for '+' and '/'; Podman's header uses it),
 * decoding stops at the first '=' and whatever follows it is ignored; with
 * or without padding; a final lone character (6 bits, no whole byte) is
 * dropped. Any other byte before the first '=' (whitespace, NUL) is -EINVAL.
 * Output and other errors as sbx_base64_decode.
 */
int sbx_base64_decode_lenient(const char *s, size_t len, unsigned char **ret_data, size_t *ret_len);

/* SHA-256 of data[0..len) into out. Returns 0 or -EIO (libcrypto failed). */
int sbx_sha256(const void *data, size_t len, uint8_t out[SBX_SHA256_LEN]);

/* HMAC-SHA256 (RFC 2104) of data[0..len) under key[0..key_len) into out.
 * Returns 0, -EINVAL when key_len exceeds INT_MAX, or -EIO. */
int sbx_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
		    uint8_t out[SBX_SHA256_LEN]);

/* True when a[0..len) and b[0..len) are equal, in time that depends only on
 * len (CRYPTO_memcmp): for comparing secrets and MACs. */
bool sbx_crypto_equal(const void *a, const void *b, size_t len);

/* Fills buf[0..len) with bytes from libcrypto's CSPRNG (RAND_bytes).
 * Returns 0, or -EIO when the generator failed (buf is then unspecified). */
int sbx_random_bytes(void *buf, size_t len);

/* Lowercase hex of data[0..len) into out, which holds 2 * len + 1 chars
 * (NUL-terminated). */
void sbx_hex_encode(const void *data, size_t len, char *out);

#endif
