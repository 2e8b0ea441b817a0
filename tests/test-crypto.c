/* SPDX-License-Identifier: MIT */
/*
 * The crypto wrapper (include/sbx/crypto.h) against published known answers:
 * RFC 4648 base64, the strict decoder's rejections and the lenient one's
 * path-stat behaviour, SHA-256 (FIPS 180-2 examples), HMAC-SHA256 (RFC 4231),
 * constant-time equality and the random generator; and percent-encoding
 * (include/sbx/percent.h) with the artifact links built on it; signed links
 * (src/tools/link_sign.c): the signature against one computed here with
 * OpenSSL, each refusal of sbx_link_verify, and the secret file's checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "sbx/artifact.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "sbx/percent.h"
#include "tap.h"

/* The bytes of a vector's hex (OpenSSL's parser); bails out on failure. */
static unsigned char *unhex(const char *hex, size_t *ret_len)
{
	long n = 0;
	unsigned char *p = OPENSSL_hexstr2buf(hex, &n);

	if (!p)
		tap_bail("bad hex in a test vector");
	*ret_len = (size_t)n;
	return p;
}

static void test_base64_vectors(void)
{
	/* RFC 4648 section 10. */
	static const char *const vec[][2] = {
	    {"", ""},
	    {"f", "Zg=="},
	    {"fo", "Zm8="},
	    {"foo", "Zm9v"},
	    {"foob", "Zm9vYg=="},
	    {"fooba", "Zm9vYmE="},
	    {"foobar", "Zm9vYmFy"},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(vec); i++) {
		_cleanup_free_ char *enc = sbx_base64_encode(vec[i][0], strlen(vec[i][0]));
		_cleanup_free_ unsigned char *dec = NULL;
		size_t n = 99;
		int r;

		tap_is_str(enc, vec[i][1], "base64 encode \"%s\"", vec[i][0]);
		r = sbx_base64_decode(vec[i][1], strlen(vec[i][1]), &dec, &n);
		tap_ok(r == 0 && n == strlen(vec[i][0]) && memcmp(dec, vec[i][0], n) == 0 &&
			   dec[n] == '\0',
		       "base64 decode \"%s\" (r=%d, len=%zu)", vec[i][1], r, n);
	}
	{
		/* Unused bits of the last character are ignored (RFC 4648 3.5),
		 * as the decoders this one replaced did. */
		_cleanup_free_ unsigned char *dec = NULL;
		size_t n = 0;
		int r = sbx_base64_decode("Zh==", 4, &dec, &n);
		tap_ok(r == 0 && n == 1 && dec[0] == 'f',
		       "non-zero unused bits: \"Zh==\" is \"f\"");
	}
	{
		_cleanup_free_ char *enc = sbx_base64_encode(NULL, 0);
		tap_is_str(enc, "", "base64 encode of NULL, 0 is \"\"");
	}
	{
		/* Every character of the alphabet, both ways. */
		static const unsigned char all[] = {
		    0x00, 0x10, 0x83, 0x10, 0x51, 0x87, 0x20, 0x92, 0x8b, 0x30, 0xd3, 0x8f,
		    0x41, 0x14, 0x93, 0x51, 0x55, 0x97, 0x61, 0x96, 0x9b, 0x71, 0xd7, 0x9f,
		    0x82, 0x18, 0xa3, 0x92, 0x59, 0xa7, 0xa2, 0x9a, 0xab, 0xb2, 0xdb, 0xaf,
		    0xc3, 0x1c, 0xb3, 0xd3, 0x5d, 0xb7, 0xe3, 0x9e, 0xbb, 0xf3, 0xdf, 0xbf};
		static const char all_b64[] =
		    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
		_cleanup_free_ char *enc = sbx_base64_encode(all, sizeof(all));
		_cleanup_free_ unsigned char *dec = NULL;
		size_t n = 0;

		tap_is_str(enc, all_b64, "base64 encode uses the standard alphabet (+ and /)");
		tap_ok(sbx_base64_decode(all_b64, strlen(all_b64), &dec, &n) == 0 &&
			   n == sizeof(all) && memcmp(dec, all, n) == 0,
		       "base64 decode of the whole alphabet");
	}
}

static void test_base64_rejects(void)
{
	static const struct {
		const char *s;
		size_t len; /* 0: strlen */
		const char *why;
	} bad[] = {
	    {"Zm9v!mFy", 0, "a character outside the alphabet"},
	    {"Zm9v-_Fy", 0, "the URL-safe alphabet"},
	    {"Zm9vYmF\x80", 0, "a non-ASCII byte"},
	    {"Zg=", 0, "length 3"},
	    {"Zm9vY", 0, "length 5"},
	    {"Zg", 0, "unpadded (length 2)"},
	    {"Zm8", 0, "unpadded (length 3)"},
	    {"Z===", 0, "three '='"},
	    {"====", 0, "only '='"},
	    {"Zg=a", 0, "'=' before a data character"},
	    {"Z=g=", 0, "'=' inside the last group"},
	    {"Zg==Zm9v", 0, "'=' in a group that is not the last"},
	    {"=Zm9", 0, "a leading '='"},
	    {" Zm9v", 0, "leading space (length 5)"},
	    {" Zm9vYg=", 0, "leading space (length 8)"},
	    {"Zm9vYg= ", 0, "trailing space after one '='"},
	    {"Zm9v   ", 0, "trailing spaces (length 7)"},
	    {"Zm9vYmF\n", 0, "trailing newline"},
	    {"Zm9v\nYmFy", 0, "an embedded newline"},
	    {"Zm9v\r\nYmFy\r\n", 0, "CRLF line breaks"},
	    {"Zm\t9", 0, "a tab"},
	    {"Zm9v\0mFy", 8, "an embedded NUL"},
	    {"Zm9vYmF\0", 8, "a final NUL"},
	    {"Zm9vYmF-", 0, "a trailing '-' (OpenSSL's end-of-data mark)"},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		unsigned char *dec = (unsigned char *)"untouched";
		size_t n = 12345;
		size_t len = bad[i].len ? bad[i].len : strlen(bad[i].s);
		int r = sbx_base64_decode(bad[i].s, len, &dec, &n);

		tap_ok(r == -EINVAL && n == 12345 && strcmp((char *)dec, "untouched") == 0,
		       "strict decode rejects %s (r=%d)", bad[i].why, r);
	}
}

static void test_base64_lenient(void)
{
	/* Padded or not; a lone final character is dropped; what follows the
	 * first '=' is ignored (as the decoder in backends/moby_common.c did). */
	static const struct {
		const char *s, *want;
	} ok[] = {
	    {"Zm9vYg==", "foob"},
	    {"Zm9vYg", "foob"},
	    {"Zm9vYmE=", "fooba"},
	    {"Zm9vYmE", "fooba"},
	    {"Zm9vYmFy", "foobar"},
	    {"", ""},
	    {"Zm9vY", "foo"},
	    {"Zg==garbage!", "f"},
	    /* the URL-safe alphabet, as Podman sends it: "~~~" and "???" */
	    {"fn5-", "~~~"},
	    {"Pz8_", "???"},
	};
	static const char *const bad[] = {"Zm9v YmFy", "Zm9v\n", " Zm9v", "Zm9v!", "Zm9v.,"};
	unsigned char *nul_dec = NULL;
	size_t nul_n = 0;
	/* A path stat as Docker sends it, unpadded by one of the engines. */
	static const char stat_json[] = "{\"name\":\"a.txt\",\"size\":5,\"mode\":420,"
					"\"mtime\":\"2024-01-01T00:00:00Z\",\"linkTarget\":\"\"}";

	for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++) {
		_cleanup_free_ unsigned char *dec = NULL;
		size_t n = 99;
		int r = sbx_base64_decode_lenient(ok[i].s, strlen(ok[i].s), &dec, &n);

		tap_ok(r == 0 && n == strlen(ok[i].want) && memcmp(dec, ok[i].want, n) == 0 &&
			   dec[n] == '\0',
		       "lenient decode \"%s\" (r=%d, len=%zu)", ok[i].s, r, n);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		unsigned char *dec = NULL;
		size_t n = 0;
		int r = sbx_base64_decode_lenient(bad[i], strlen(bad[i]), &dec, &n);

		tap_ok(r == -EINVAL && !dec, "lenient decode rejects \"%s\" (r=%d)", bad[i], r);
	}
	tap_is_int(sbx_base64_decode_lenient("Zm9v\0mFy", 8, &nul_dec, &nul_n), -EINVAL,
		   "lenient decode rejects an embedded NUL");
	{
		_cleanup_free_ char *enc = sbx_base64_encode(stat_json, strlen(stat_json));
		_cleanup_free_ unsigned char *dec = NULL;
		size_t len = enc ? strlen(enc) : 0, n = 0;
		int r;

		while (len > 0 && enc[len - 1] == '=')
			len--;
		tap_ok(enc && len < strlen(enc), "the path stat's base64 is padded (%s)",
		       enc ? enc : "NULL");
		r = enc ? sbx_base64_decode_lenient(enc, len, &dec, &n) : -ENOMEM;
		tap_ok(r == 0 && n == strlen(stat_json) && strcmp((char *)dec, stat_json) == 0,
		       "lenient decode of the unpadded path stat is the NUL-terminated JSON");
	}
}

static void test_base64_round_trips(void)
{
	unsigned char data[300];
	bool all_ok = true;
	size_t bad_len = 0;
	uint32_t x = 2463534242u;

	for (size_t i = 0; i < sizeof(data); i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5; /* xorshift32: test data only */
		data[i] = (unsigned char)x;
	}
	data[0] = 0;
	data[1] = 0xff;
	for (size_t len = 0; len <= sizeof(data) && all_ok; len++) {
		_cleanup_free_ char *enc = sbx_base64_encode(data, len);
		_cleanup_free_ unsigned char *dec = NULL;
		size_t n = 0;

		all_ok = enc && strlen(enc) == (len + 2) / 3 * 4 &&
			 sbx_base64_decode(enc, strlen(enc), &dec, &n) == 0 && n == len &&
			 memcmp(dec, data, len) == 0;
		if (!all_ok)
			bad_len = len;
	}
	if (!tap_ok(all_ok, "binary round trips of every length 0..300"))
		tap_diag("  first failure at length %zu", bad_len);
}

static void test_sha256(void)
{
	static const struct {
		const char *msg, *hex;
	} vec[] = {
	    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	};
	uint8_t md[SBX_SHA256_LEN];
	char hex[2 * SBX_SHA256_LEN + 1];
	char *million;
	int r;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(vec); i++) {
		memset(md, 0, sizeof(md));
		r = sbx_sha256(vec[i].msg, strlen(vec[i].msg), md);
		sbx_hex_encode(md, sizeof(md), hex);
		tap_ok(r == 0 && strcmp(hex, vec[i].hex) == 0, "SHA-256(\"%.8s\") = %s", vec[i].msg,
		       hex);
	}
	memset(md, 0, sizeof(md));
	r = sbx_sha256(NULL, 0, md);
	sbx_hex_encode(md, sizeof(md), hex);
	tap_is_str(r == 0 ? hex : "error", vec[0].hex, "SHA-256 of NULL, 0 is that of \"\"");

	million = malloc(1000000);
	if (!million)
		tap_bail("out of memory");
	memset(million, 'a', 1000000);
	r = sbx_sha256(million, 1000000, md);
	free(million);
	sbx_hex_encode(md, sizeof(md), hex);
	tap_is_str(r == 0 ? hex : "error",
		   "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
		   "SHA-256 of 1,000,000 x 'a'");
}

static void test_hmac(void)
{
	/* RFC 4231 section 4, test cases 1-4, 6 and 7 (5 truncates its output). */
#define KEY_131_AA /* 131 bytes of 0xaa */                                                         \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"         \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"         \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"         \
	"aaaaaaaaaaaaaaaaaaaaaa"
	static const struct {
		const char *key_hex, *data_hex, *mac_hex;
	} tc[] = {
	    {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
	     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
	    {"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
	     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
	    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	     "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	     "dddddddddddddddddddddd",
	     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
	    {"0102030405060708090a0b0c0d0e0f10111213141516171819",
	     "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	     "cdcdcdcdcdcdcdcdcdcdcd",
	     "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
	    {KEY_131_AA,
	     "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048"
	     "617368204b6579204669727374",
	     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
	    {KEY_131_AA,
	     "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d"
	     "73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a6520646174"
	     "612e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e"
	     "6720757365642062792074686520484d414320616c676f726974686d2e",
	     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	};
	static const int case_no[] = {1, 2, 3, 4, 6, 7};
	uint8_t mac[SBX_SHA256_LEN];
	char hex[2 * SBX_SHA256_LEN + 1];

	for (size_t i = 0; i < SBX_ARRAY_SIZE(tc); i++) {
		size_t klen, dlen;
		unsigned char *key = unhex(tc[i].key_hex, &klen),
			      *data = unhex(tc[i].data_hex, &dlen);
		int r;

		memset(mac, 0, sizeof(mac));
		r = sbx_hmac_sha256(key, klen, data, dlen, mac);
		OPENSSL_free(key);
		OPENSSL_free(data);
		sbx_hex_encode(mac, sizeof(mac), hex);
		tap_ok(r == 0 && strcmp(hex, tc[i].mac_hex) == 0,
		       "HMAC-SHA256 RFC 4231 test case %d (key %zu bytes, data %zu bytes): %s",
		       case_no[i], klen, dlen, hex);
	}
	{
		/* The empty key and message (a widely published value). */
		int r;

		memset(mac, 0, sizeof(mac));
		r = sbx_hmac_sha256(NULL, 0, NULL, 0, mac);
		sbx_hex_encode(mac, sizeof(mac), hex);
		tap_is_str(r == 0 ? hex : "error",
			   "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
			   "HMAC-SHA256 with an empty key of an empty message");
	}
}

static void test_equal(void)
{
	unsigned char a[64], b[64];

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = b[i] = (unsigned char)(i * 7 + 1);
	tap_ok(sbx_crypto_equal(a, b, sizeof(a)), "equal buffers compare equal");
	tap_ok(sbx_crypto_equal(a, b, 0), "zero-length buffers compare equal");
	b[sizeof(b) - 1] ^= 0x01;
	tap_ok(!sbx_crypto_equal(a, b, sizeof(a)), "buffers differing in the last byte differ");
	tap_ok(sbx_crypto_equal(a, b, sizeof(a) - 1), "... and their common prefix is equal");
	b[sizeof(b) - 1] = a[sizeof(a) - 1];
	b[0] ^= 0x80;
	tap_ok(!sbx_crypto_equal(a, b, sizeof(a)), "buffers differing in the first byte differ");
}

static void test_random(void)
{
	static const uint8_t zero[32];
	uint8_t x[32], y[32];
	char hex[2 * 3 + 1];
	int rx, ry;

	memset(x, 0, sizeof(x));
	memset(y, 0, sizeof(y));
	rx = sbx_random_bytes(x, sizeof(x));
	ry = sbx_random_bytes(y, sizeof(y));
	tap_ok(rx == 0 && ry == 0, "two 32-byte random draws succeed (%d, %d)", rx, ry);
	tap_ok(memcmp(x, y, sizeof(x)) != 0, "the two draws differ");
	tap_ok(memcmp(x, zero, sizeof(x)) != 0 && memcmp(y, zero, sizeof(y)) != 0,
	       "neither draw is all zero");
	tap_ok(sbx_random_bytes(NULL, 0) == 0, "a zero-length draw succeeds");

	sbx_hex_encode((const uint8_t[]){0x00, 0xab, 0xf9}, 3, hex);
	tap_is_str(hex, "00abf9", "hex is lowercase, two digits a byte");
	sbx_hex_encode(NULL, 0, hex);
	tap_is_str(hex, "", "hex of nothing is \"\"");
}

static void test_percent(void)
{
	static const struct {
		const char *in, *value, *path;
	} enc[] = {
	    {"", "", ""},
	    {"AZaz09-._~", "AZaz09-._~", "AZaz09-._~"},
	    {"a b/c", "a%20b%2Fc", "a%20b/c"},
	    {"#hash?.txt", "%23hash%3F.txt", "%23hash%3F.txt"},
	    {"/x//y/", "%2Fx%2F%2Fy%2F", "/x//y/"},
	    {"\xc3\xa9%+&=", "%C3%A9%25%2B%26%3D", "%C3%A9%25%2B%26%3D"},
	};
	static const char *const bad[] = {"%", "%4", "%zz", "a%g0", "%%41"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(enc); i++) {
		_cleanup_free_ char *v = sbx_percent_escape(enc[i].in);
		struct sbx_buf b = SBX_BUF_INIT;
		_cleanup_free_ char *back = NULL;
		size_t n = 0;
		int r;

		tap_is_str(v, enc[i].value, "percent-escape of \"%s\"", enc[i].value);
		r = sbx_percent_append(&b, enc[i].in, true);
		tap_ok(r == 0 && !strcmp(b.data ? b.data : "", enc[i].path),
		       "as a path it is \"%s\" (got \"%s\")", enc[i].path, b.data ? b.data : "");
		sbx_buf_release(&b);
		r = v ? sbx_percent_decode(v, strlen(v), &back, &n) : -ENOMEM;
		tap_ok(r == 0 && n == strlen(enc[i].in) && !memcmp(back, enc[i].in, n),
		       "and decodes back (r=%d)", r);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		char *out = NULL;
		size_t n = 0;
		tap_is_int(sbx_percent_decode(bad[i], strlen(bad[i]), &out, &n), -EINVAL,
			   "percent-decode refuses \"%s\"", bad[i]);
		free(out);
	}
	{
		_cleanup_free_ char *out = NULL;
		size_t n = 0;
		tap_ok(sbx_percent_decode("a%00b", 5, &out, &n) == 0 && n == 3 && out[1] == '\0',
		       "an escaped NUL is decoded and counted (the caller decides)");
	}
}

/* Links and their parsing: every segment escaped, '/' and NUL refused
 * inside a segment. */
static void test_artifact_links(void)
{
	_cleanup_free_ char *url = sbx_artifact_url("http://h:1/", "ab12", "dir one/#hash?.txt");
	char *id = NULL, *rel = NULL;

	tap_is_str(url, "http://h:1/artifacts/ab12/dir%20one/%23hash%3F.txt",
		   "an artifact link escapes each segment, keeps the slashes");
	tap_ok(sbx_artifact_parse("ab12/dir%20one/%23hash%3F.txt", &id, &rel) == 0 && id && rel &&
		   !strcmp(id, "ab12") && !strcmp(rel, "dir one/#hash?.txt"),
	       "and parses back to the id and the path");
	free(id);
	free(rel);
	static const char *const bad[] = {"ab12",	"ab12/",	"/x",	   "ab12/a%2Fb",
					  "ab12/a%00b", "ab12/%zz.png", "a%2Fb/x", "ab12/x/%2F/y"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		id = rel = NULL;
		tap_is_int(sbx_artifact_parse(bad[i], &id, &rel), -EINVAL,
			   "artifact path \"%s\" is refused", bad[i]);
		free(id);
		free(rel);
	}
	/* An empty first segment is kept, not dropped (the fuzzer found that
	 * "ab12//" gave an empty path and "ab12//x" the file x). */
	static const char *const kept[][2] = {
	    {"ab12//x", "/x"}, {"ab12//", "/"}, {"ab12/a//b", "a//b"}};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(kept); i++) {
		id = rel = NULL;
		tap_ok(sbx_artifact_parse(kept[i][0], &id, &rel) == 0 && rel &&
			   !strcmp(rel, kept[i][1]),
		       "artifact path \"%s\" is \"%s\"", kept[i][0], kept[i][1]);
		free(id);
		free(rel);
	}
}

/* The base64url (unpadded) HMAC-SHA256 of MSG under KEY, computed with
 * OpenSSL directly. */
static void expected_sig(const unsigned char *key, const char *msg, char out[64])
{
	unsigned char mac[32], b64[64];
	unsigned len = 0;
	int n, i;

	HMAC(EVP_sha256(), key, 32, (const unsigned char *)msg, strlen(msg), mac, &len);
	n = EVP_EncodeBlock(b64, mac, (int)len);
	for (i = 0; i < n && b64[i] != '='; i++)
		out[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
	out[i] = '\0';
}

static int write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ssize_t n = fd >= 0 ? write(fd, data, len) : -1;

	if (fd >= 0)
		close(fd);
	return fd >= 0 && n == (ssize_t)len && chmod(path, mode) == 0 ? 0 : -1;
}

static char tmpdir[] = "/tmp/sbx-links-XXXXXX";

/* Signatures and their check, with a secret of known bytes. */
static void test_link_sign(void)
{
	unsigned char secret[32];
	char path[256], want[64], sig[SBX_LINK_SIG_LEN + 1], bad[SBX_LINK_SIG_LEN + 2], exp[32];
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_link_key *k = NULL, *other = NULL;
	const int64_t now = 1700000000, e = now + 60;

	for (size_t i = 0; i < sizeof(secret); i++)
		secret[i] = (unsigned char)(i * 7 + 1);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, SBX_LINK_SECRET_FILE);
	if (write_file(path, secret, sizeof(secret), 0600) < 0 ||
	    sbx_link_key_open(tmpdir, &k, &err) < 0 || sbx_link_key_open(NULL, &other, &err) < 0)
		tap_bail(err.msg[0] ? err.msg : "a secret file");
	unlink(path);
	snprintf(exp, sizeof(exp), "%lld", (long long)e);

	expected_sig(secret, "v2\nab12\ndir one/p.png\n1700000060\n", want);
	tap_ok(sbx_link_sign(k, "ab12", "dir one/p.png", "", e, sig) == 0 && !strcmp(sig, want),
	       "a signature is base64url(HMAC-SHA256(secret, \"v2\\nID\\nPATH\\nEXP\\nKID\")), "
	       "unpadded, KID empty: %s",
	       sig);
	{
		_cleanup_free_ char *url =
		    sbx_artifact_link(k, "http://h:1/", "ab12", "dir one/p.png", "", e);
		char expect[256];
		snprintf(expect, sizeof(expect),
			 "http://h:1/artifacts/ab12/dir%%20one/p.png?exp=%s&sig=%s", exp, want);
		tap_is_str(url, expect, "a link is the path, then ?exp=EXP&sig=SIG");
	}
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, sig, now), 0,
		   "a link verifies");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, sig, e), 0,
		   "... until its second EXP itself");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, sig, e + 1), -EKEYEXPIRED,
		   "an expired link is told as expired");
	tap_is_int(sbx_link_verify(other, "ab12", "dir one/p.png", NULL, exp, sig, now), -EACCES,
		   "another secret's key refuses it");
	for (size_t i = 0; i < SBX_LINK_SIG_LEN; i += 7) {
		snprintf(bad, sizeof(bad), "%s", sig);
		bad[i] = bad[i] == 'A' ? 'B' : 'A';
		tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, bad, now),
			   -EACCES, "a signature with character %zu changed is refused", i);
	}
	/* The last character carries 2 unused bits: another spelling of the same
	 * bytes is still refused (the signature is compared as text). */
	snprintf(bad, sizeof(bad), "%s", sig);
	bad[SBX_LINK_SIG_LEN - 1] ^= 1;
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, bad, now), -EACCES,
		   "a flipped bit in the last character is refused");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/q.png", NULL, exp, sig, now), -EACCES,
		   "the signature of another path is refused");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png/", NULL, exp, sig, now), -EACCES,
		   "... a path one byte longer too");
	tap_is_int(sbx_link_verify(k, "ab13", "dir one/p.png", NULL, exp, sig, now), -EACCES,
		   "the signature for another sandbox id is refused");
	snprintf(bad, sizeof(bad), "%lld", (long long)e + 1);
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, bad, sig, now), -EACCES,
		   "a changed exp is refused (not expired: invalid)");
	snprintf(bad, sizeof(bad), "%lld", (long long)now - 10);
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, bad, sig, now), -EACCES,
		   "an exp changed to the past is invalid, not expired");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, NULL, now), -EACCES,
		   "no sig is refused");
	tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, NULL, sig, now), -EACCES,
		   "no exp is refused");
	tap_is_int(sbx_link_verify(NULL, "ab12", "dir one/p.png", NULL, exp, sig, now), -EACCES,
		   "no key refuses every link");
	{
		static const char *const exps[] = {"",
						   "+1700000060",
						   " 1700000060",
						   "01700000060",
						   "1700000060 ",
						   "1700000060x",
						   "-1",
						   "0x10",
						   "9999999999999999999"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(exps); i++)
			tap_is_int(
			    sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exps[i], sig, now),
			    -EACCES, "a malformed exp \"%s\" is refused", exps[i]);
	}
	{
		char padded[SBX_LINK_SIG_LEN + 2], std[SBX_LINK_SIG_LEN + 1];
		const char *junk[] = {"",      "not base64!",
				      padded,  std,
				      sig + 1, "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"};
		snprintf(padded, sizeof(padded), "%s=", sig);
		snprintf(std, sizeof(std), "%s", sig);
		for (char *p = std; *p; p++)
			*p = *p == '-' ? '+' : *p == '_' ? '/' : *p;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(junk); i++) {
			/* The standard alphabet's spelling is only junk when it differs. */
			if (junk[i] == std && !strcmp(std, sig))
				continue;
			tap_is_int(
			    sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, junk[i], now),
			    -EACCES, "a junk sig \"%s\" is refused", junk[i]);
		}
	}
	/* A newline ends the id in what is signed: an id that holds one is never
	 * signed, so (id "ab12", path "a\nb") cannot pass for (id "ab12\na", "b"). */
	tap_ok(sbx_link_sign(k, "ab12", "a\nb", "", e, sig) == 0,
	       "a path with a newline is signed");
	tap_is_int(sbx_link_verify(k, "ab12\na", "b", NULL, exp, sig, now), -EACCES,
		   "its signature does not pass for an id that holds the newline");
	tap_is_int(sbx_link_sign(k, "ab12\na", "b", "", e, sig), -EINVAL,
		   "such an id is never signed");

	/* A key's id in the link: signed, in the query as kid=, not movable. */
	{
		char ksig[SBX_LINK_SIG_LEN + 1], kwant[64];
		static const char *const bad_kids[] = {
		    "", "0123456789a", "0123456789abc", "0123456789aB", "0123456789a\n", "../../x"};
		expected_sig(secret, "v2\nab12\ndir one/p.png\n1700000060\n0123456789ab", kwant);
		tap_ok(sbx_link_sign(k, "ab12", "dir one/p.png", "0123456789ab", e, ksig) == 0 &&
			   !strcmp(ksig, kwant),
		       "with a key id KID, the signed text ends with it");
		{
			_cleanup_free_ char *url = sbx_artifact_link(
			    k, "http://h:1", "ab12", "dir one/p.png", "0123456789ab", e);
			char expect[256];
			snprintf(
			    expect, sizeof(expect),
			    "http://h:1/artifacts/ab12/dir%%20one/p.png?exp=%s&kid=0123456789ab&"
			    "sig=%s",
			    exp, kwant);
			tap_is_str(url, expect, "... and the link carries it as &kid=");
		}
		tap_is_int(
		    sbx_link_verify(k, "ab12", "dir one/p.png", "0123456789ab", exp, ksig, now), 0,
		    "... and verifies with it");
		tap_is_int(sbx_link_verify(k, "ab12", "dir one/p.png", NULL, exp, ksig, now),
			   -EACCES, "... not without it (kid= removed)");
		tap_is_int(
		    sbx_link_verify(k, "ab12", "dir one/p.png", "0123456789ac", exp, ksig, now),
		    -EACCES, "... nor with another key's id");
		tap_is_int(
		    sbx_link_verify(k, "ab12", "dir one/p.png", "0123456789ab", exp, sig, now),
		    -EACCES, "a link made without a key does not take a kid=");
		for (size_t i = 0; i < SBX_ARRAY_SIZE(bad_kids); i++) {
			tap_is_int(sbx_link_sign(k, "ab12", "x", bad_kids[i], e, ksig),
				   *bad_kids[i] ? -EINVAL : 0, "sign with kid \"%s\"", bad_kids[i]);
			tap_is_int(
			    sbx_link_verify(k, "ab12", "dir one/p.png", bad_kids[i], exp, sig, now),
			    -EACCES, "a malformed kid= \"%s\" is refused", bad_kids[i]);
		}
	}
	sbx_link_key_free(k);
	sbx_link_key_free(other);
}

/* The secret file: made 0600 on first use, the same on the next; any other
 * kind of file refused with a message that names it. */
static void test_link_secret(void)
{
	char path[256], target[300], sig1[SBX_LINK_SIG_LEN + 1], sig2[SBX_LINK_SIG_LEN + 1];
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_link_key *k = NULL, *k2 = NULL;
	unsigned char bytes[33] = {0};
	struct stat st;
	int r;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, SBX_LINK_SECRET_FILE);
	snprintf(target, sizeof(target), "%s/target", tmpdir);
	r = sbx_link_key_open(tmpdir, &k, &err);
	tap_ok(r == 0 && sbx_link_key_persistent(k), "a first open makes %s (%s)", path, err.msg);
	tap_ok(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 &&
		   st.st_size == 32 && st.st_uid == geteuid(),
	       "a regular file of ours, mode 0600, 32 bytes");
	r = sbx_link_key_open(tmpdir, &k2, &err);
	tap_ok(r == 0 && sbx_link_sign(k, "ab12", "x", "", 5, sig1) == 0 &&
		   sbx_link_sign(k2, "ab12", "x", "", 5, sig2) == 0 && !strcmp(sig1, sig2) &&
		   sbx_link_verify(k2, "ab12", "x", NULL, "5", sig1, 1) == 0,
	       "a second open reads the same secret: a link of the first verifies with it");
	sbx_link_key_free(k2);
	k2 = NULL;
	r = sbx_link_key_open(NULL, &k2, &err);
	tap_ok(r == 0 && !sbx_link_key_persistent(k2) &&
		   sbx_link_verify(k2, "ab12", "x", NULL, "5", sig1, 1) == -EACCES,
	       "without a folder: a random secret of its own");
	sbx_link_key_free(k2);
	k2 = NULL;
	sbx_link_key_free(k);

	chmod(path, 0640);
	r = sbx_link_key_open(tmpdir, &k, &err);
	tap_ok(r == -EPERM && strstr(err.msg, path) && strstr(err.msg, "0600"),
	       "a group-readable secret file is refused, saying why: %s", err.msg);
	chmod(path, 0400);
	tap_is_int(sbx_link_key_open(tmpdir, &k, &err), -EPERM, "mode 0400 is refused too");
	unlink(path);
	tap_ok(write_file(path, bytes, 31, 0600) == 0 &&
		   sbx_link_key_open(tmpdir, &k, &err) == -EPERM && strstr(err.msg, "32 bytes"),
	       "31 bytes are refused: %s", err.msg);
	tap_ok(write_file(path, bytes, 33, 0600) == 0 &&
		   sbx_link_key_open(tmpdir, &k, &err) == -EPERM,
	       "33 bytes are refused");
	unlink(path);
	tap_ok(write_file(target, bytes, 32, 0600) == 0 && symlink(target, path) == 0 &&
		   sbx_link_key_open(tmpdir, &k, &err) == -EPERM &&
		   strstr(err.msg, "symbolic link"),
	       "a symbolic link to a good secret file is refused (never followed): %s", err.msg);
	unlink(path);
	tap_ok(symlink("/nonexistent/sbx-link-secret", path) == 0 &&
		   sbx_link_key_open(tmpdir, &k, &err) == -EPERM &&
		   lstat("/nonexistent/sbx-link-secret", &st) < 0,
	       "a dangling symbolic link is refused, nothing made where it points");
	unlink(path);
	tap_ok(mkdir(path, 0700) == 0 && sbx_link_key_open(tmpdir, &k, &err) == -EPERM,
	       "a folder in its place is refused: %s", err.msg);
	rmdir(path);
	unlink(target);
}

/* sbx_path_is_clean: what the egress relay takes as an index path. */
static void test_clean_paths(void)
{
	static const struct {
		const char *path;
		const char *what; /* NULL: clean */
	} cases[] = {
	    {"/", NULL},
	    {"/simple/", NULL},
	    {"/simple/x/", NULL},
	    {"/simple/a.b/...", NULL},
	    {"/simple/.x/x./..x/x..", NULL},
	    {"/packages/torch-2.0%2Bcpu.whl", NULL},
	    {"/p/x;v=1", NULL},
	    {"/p/;", NULL},
	    {"/p/%2e%2e%2e", NULL},
	    {"", "start"},
	    {"simple/", "start"},
	    {"/.", "dot"},
	    {"/..", "dot"},
	    {"/./", "dot"},
	    {"/a/../b", "dot"},
	    {"/a/..", "dot"},
	    {"/a/%2e%2e/b", "dot"},
	    {"/a/%2E./b", "dot"},
	    {"/a/.%2E", "dot"},
	    {"/a/%2e", "dot"},
	    {"/a/..;x/b", "dot"},
	    {"/a/.;/b", "dot"},
	    {"//a", "empty"},
	    {"/a//b", "empty"},
	    {"/a\\b", "backslash"},
	    {"/a/%2f", "encoded"},
	    {"/a/%2F..", "encoded"},
	    {"/a/%5c", "encoded"},
	    {"/a/%5C", "encoded"},
	    {"/a/%00", "encoded"},
	    {"/a/%252e%252e/", "encoded"},
	    {"/a/%", "escape"},
	    {"/a/%2", "escape"},
	    {"/a/%g0", "escape"},
	};
	int bad = 0;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		const char *what = "unset";
		bool clean = sbx_path_is_clean(cases[i].path, strlen(cases[i].path), &what);
		if (cases[i].what ? clean || !what || !strstr(what, cases[i].what)
				  : !clean || what) {
			tap_diag("\"%s\": %s", cases[i].path, clean ? "clean" : what);
			bad++;
		}
	}
	tap_is_int(bad, 0, "%zu paths judged clean or not, saying why", SBX_ARRAY_SIZE(cases));
	tap_ok(sbx_path_is_clean("/a/../b", 2, NULL), "only the N bytes given count");
}

int main(void)
{
	test_base64_vectors();
	test_base64_rejects();
	test_base64_lenient();
	test_base64_round_trips();
	test_sha256();
	test_hmac();
	test_equal();
	test_random();
	test_percent();
	test_clean_paths();
	test_artifact_links();
	if (!mkdtemp(tmpdir))
		tap_bail("mkdtemp");
	test_link_sign();
	test_link_secret();
	rmdir(tmpdir);
	return tap_done();
}
