/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "sbx/utf8.h"

/*
 * Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid. When
 * invalid, *ret_bad is the length of the maximal subpart to replace (>= 1).
 */
static size_t utf8_seq(const unsigned char *p, size_t len, size_t *ret_bad)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*ret_bad = 1;
		return 0;
	}
	for (i = 1; i < need; i++) {
		if (i >= len || p[i] < lo || p[i] > hi) {
			*ret_bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}

size_t sbx_utf8_seq_len(const char *p, size_t len)
{
	size_t bad;

	return len > 0 ? utf8_seq((const unsigned char *)p, len, &bad) : 0;
}

bool sbx_utf8_valid(const char *p, size_t len)
{
	const unsigned char *s = (const unsigned char *)p;
	size_t i = 0, bad;

	while (i < len) {
		size_t n = utf8_seq(s + i, len - i, &bad);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

int sbx_utf8_sanitize(struct sbx_buf *b)
{
	static const char fffd[] = "\xEF\xBF\xBD";
	const unsigned char *s;
	struct sbx_buf out = SBX_BUF_INIT;
	size_t i = 0, start = 0, bad;
	int n_bad = 0, r;

	if (!b->data || sbx_utf8_valid(b->data, b->len))
		return 0;
	s = (const unsigned char *)b->data;
	while (i < b->len) {
		size_t n = utf8_seq(s + i, b->len - i, &bad);
		if (n) {
			i += n;
			continue;
		}
		r = sbx_buf_append(&out, s + start, i - start);
		if (r >= 0)
			r = sbx_buf_append(&out, fffd, 3);
		if (r < 0) {
			sbx_buf_release(&out);
			return r;
		}
		if (n_bad < 0x7fffffff)
			n_bad++;
		i += bad;
		start = i;
	}
	r = sbx_buf_append(&out, s + start, i - start);
	if (r < 0) {
		sbx_buf_release(&out);
		return r;
	}
	sbx_buf_release(b);
	*b = out;
	return n_bad;
}
