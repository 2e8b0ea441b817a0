/* SPDX-License-Identifier: MIT */
#include "sbx/image.h"

#include <stdint.h>
#include <string.h>

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int chunk_type_ok(const unsigned char *t)
{
	for (int i = 0; i < 4; i++)
		if (!((t[i] >= 'A' && t[i] <= 'Z') || (t[i] >= 'a' && t[i] <= 'z')))
			return 0;
	return 1;
}

/* Signature, IHDR (13 bytes) first, then length/type/data/CRC chunks that
 * end exactly with IEND. */
static int is_png(const unsigned char *p, size_t n)
{
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	size_t off = 8;
	int first = 1;

	if (n < 8 + 25 + 12 || memcmp(p, sig, 8) != 0)
		return 0;
	while (n - off >= 12) {
		uint32_t len = be32(p + off);
		const unsigned char *type = p + off + 4;

		if (len > n - off - 12 || !chunk_type_ok(type))
			return 0;
		if (first && (memcmp(type, "IHDR", 4) != 0 || len != 13))
			return 0;
		first = 0;
		off += 12 + (size_t)len;
		if (memcmp(type, "IEND", 4) == 0)
			return len == 0 && off == n;
	}
	return 0;
}

/* SOI, then marker segments (FF xx LEN) that fit, up to SOS; the entropy-
 * coded data after it; EOI as the last two bytes. */
static int is_jpeg(const unsigned char *p, size_t n)
{
	size_t off = 2;

	if (n < 4 || p[0] != 0xFF || p[1] != 0xD8 || p[2] != 0xFF)
		return 0;
	if (p[n - 2] != 0xFF || p[n - 1] != 0xD9)
		return 0;
	while (off + 4 <= n) {
		unsigned marker;
		size_t len;

		if (p[off] != 0xFF)
			return 0;
		while (off < n && p[off] == 0xFF) /* fill bytes */
			off++;
		if (off + 3 > n)
			return 0;
		marker = p[off++];
		if (marker == 0xD8 || marker == 0xD9 || marker == 0x00 ||
		    (marker >= 0xD0 && marker <= 0xD7))
			return 0; /* no second SOI, no EOI or RST before the scan */
		len = (size_t)p[off] << 8 | p[off + 1];
		if (len < 2 || len > n - off)
			return 0;
		off += len;
		if (marker == 0xDA) /* start of scan: the rest is image data */
			return off <= n - 2;
	}
	return 0;
}

const char *sbx_image_sniff(const unsigned char *p, size_t n)
{
	if (!p)
		return NULL;
	if (is_png(p, n))
		return "image/png";
	if (is_jpeg(p, n))
		return "image/jpeg";
	return NULL;
}
