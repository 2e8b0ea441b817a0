/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the check of a pip requirement spec before it reaches
 * `pip install` (sbx_package_spec_valid, src/sandbox/packages.c), and the
 * sniffing of image bytes (sbx_image_sniff, src/base/image.c) that decides
 * which files of a run are inlined as images.
 *
 * Spec: the first byte's low bit is allow_direct (sandbox.allow_direct_urls),
 * the rest up to its first NUL the spec. Checks: an accepted spec (without
 * allow_direct) is at most 200 characters of [A-Za-z0-9 ._-[],=<>!~*+],
 * starts (after spaces) with a letter or digit, has no '/', ':', '@' or ';',
 * and its name does not end like an archive pip would take for a local file
 * (.whl, .zip, .tar.gz, .tgz, .tar, ...); it is accepted with allow_direct
 * too. An accepted spec with allow_direct is printable ASCII, at most 2048
 * characters and does not start with '-'. A refused spec fills why with a
 * non-empty string, NUL-terminated even in a small buffer; the answer does
 * not depend on the buffer (none, small or large).
 *
 * Image: the whole input. Checks: "image/png" starts with the PNG signature
 * and an IHDR chunk of 13 bytes and ends with an empty IEND chunk;
 * "image/jpeg" starts with FF D8 FF and ends with FF D9.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbx/image.h"
#include "sbx/sandbox.h"

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The name part: after leading spaces, the run of letters, digits, '.', '_'
 * and '-', without the '.', '_' or '-' at its end. */
static bool name_is_archive(const char *s)
{
	static const char *const exts[] = {".whl", ".zip",     ".tar.gz", ".tgz",
					   ".tar", ".tar.bz2", ".tbz",	  ".tar.xz",
					   ".txz", ".tlz",     ".tar.lz", ".tar.lzma"};
	size_t n = 0;

	while (*s == ' ')
		s++;
	while (is_alnum(s[n]) || s[n] == '.' || s[n] == '_' || s[n] == '-')
		n++;
	while (n > 0 && !is_alnum(s[n - 1]))
		n--;
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t k = strlen(exts[i]);
		if (n >= k && strncasecmp(s + n - k, exts[i], k) == 0)
			return true;
	}
	return false;
}

/* The answer for SPEC, checking that why is filled when it is refused. */
static bool valid(const char *spec, bool allow_direct)
{
	char why[256], small[8];
	bool ok;

	memset(why, 0xAA, sizeof(why));
	ok = sbx_package_spec_valid(spec, allow_direct, why, sizeof(why));
	if (!ok && (!memchr(why, '\0', sizeof(why)) || !why[0]))
		abort();
	memset(small, 0xAA, sizeof(small));
	if (sbx_package_spec_valid(spec, allow_direct, small, sizeof(small)) != ok ||
	    (!ok && (!memchr(small, '\0', sizeof(small)) || !small[0])))
		abort();
	if (sbx_package_spec_valid(spec, allow_direct, NULL, 0) != ok)
		abort();
	return ok;
}

static void check_spec(const char *spec, bool allow_direct)
{
	size_t len = strlen(spec);

	if (!valid(spec, allow_direct))
		return;
	if (!len || spec[0] == '-')
		abort();
	if (allow_direct) {
		if (len > 2048)
			abort();
		for (const char *p = spec; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
				abort();
		return;
	}
	if (len > 200 || strspn(spec, " ") == len || !is_alnum(spec[strspn(spec, " ")]))
		abort();
	for (const char *p = spec; *p; p++)
		if (!is_alnum(*p) && !strchr(" ._-[],=<>!~*+", *p))
			abort();
	if (strpbrk(spec, "/:@;") || name_is_archive(spec))
		abort();
	if (!valid(spec, true))
		abort();
}

static void check_image(const unsigned char *p, size_t n)
{
	static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	static const unsigned char ihdr[8] = {0, 0, 0, 13, 'I', 'H', 'D', 'R'};
	static const unsigned char iend[8] = {0, 0, 0, 0, 'I', 'E', 'N', 'D'};
	const char *mime = sbx_image_sniff(p, n);

	if (!mime)
		return;
	if (!strcmp(mime, "image/png")) {
		if (n < 8 + 25 + 12 || memcmp(p, png_sig, 8) != 0 || memcmp(p + 8, ihdr, 8) != 0 ||
		    memcmp(p + n - 12, iend, 8) != 0)
			abort();
	} else if (!strcmp(mime, "image/jpeg")) {
		if (n < 4 || p[0] != 0xFF || p[1] != 0xD8 || p[2] != 0xFF || p[n - 2] != 0xFF ||
		    p[n - 1] != 0xD9)
			abort();
	} else {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *spec;

	check_image(data, size);
	if (!size)
		return 0;
	spec = malloc(size);
	if (!spec)
		abort();
	memcpy(spec, data + 1, size - 1);
	spec[size - 1] = '\0';
	check_spec(spec, data[0] & 1);
	free(spec);
	return 0;
}
