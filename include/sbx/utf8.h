/* SPDX-License-Identifier: MIT */
/*
 * Making bytes valid UTF-8 for JSON: command output may hold anything.
 */
#ifndef SBX_UTF8_H
#define SBX_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "sbx/buf.h"

/* True when p[0..len) is valid UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). NUL bytes are valid. */
bool sbx_utf8_valid(const char *p, size_t len);

/* The length (1..4) of the valid UTF-8 sequence at p[0..len), or 0 when
 * the bytes there are not one (or len is 0). */
size_t sbx_utf8_seq_len(const char *p, size_t len);

/*
 * Rewrites b in place so that it is valid UTF-8: every maximal invalid
 * subpart (as Unicode's "U+FFFD substitution of maximal subparts" defines
 * it; a sequence cut short at the end counts as one) becomes U+FFFD
 * (EF BF BD). Valid input is left untouched and costs no allocation. The
 * result stays NUL-terminated. Returns the number of replacements made
 * (>= 0), or -ENOMEM with b unchanged.
 */
int sbx_utf8_sanitize(struct sbx_buf *b);

#endif
