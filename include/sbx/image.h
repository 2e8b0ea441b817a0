/* SPDX-License-Identifier: MIT */
/*
 * What kind of image some bytes are, by their structure (not their name):
 * a PNG's signature, IHDR first and chunks that fit up to IEND at the end;
 * a JPEG's SOI, marker segments that fit up to the scan, and EOI at the end.
 * It decodes nothing; it only refuses what cannot be the image it claims to
 * be (a text file starting with a PNG signature, a truncated or padded one).
 */
#ifndef SBX_IMAGE_H
#define SBX_IMAGE_H

#include <stddef.h>

/* "image/png", "image/jpeg" (static strings), or NULL. */
const char *sbx_image_sniff(const unsigned char *p, size_t n);

#endif
