/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the protocol lines of the in-sandbox Python interpreter
 * as the server reads them (src/sandbox/interp.c, through
 * sbx_interp_protocol_feed): output, image, result and hello lines, which
 * code in the sandbox can forge. Each call to the feed is a fresh call
 * (id 1) with a fresh line buffer, so a line left without its newline at the
 * end of a chunk is buffered and then dropped, never joined with the next.
 *
 * The first byte chooses how the rest is fed:
 *   0x80 set:  amplified: the rest repeated up to a length of the line cap
 *              (sbx_interp_line_max) - 16 + (byte & 0x1f), so that a line
 *              just under, at and just over the cap is reached;
 *   else 0x40: split in two feeds, the first (byte & 0x3f)/63 of it long;
 *   else:      one feed.
 * sandbox.image_inline_max is 4k, which keeps the cap near its floor.
 * Checks: the feed returns 0, -EPROTO or -ENOMEM, and -EPROTO (unless
 * -ENOMEM came first) exactly when one of its lines, the unterminated last
 * one included, is longer than the cap.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox-internal.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

static struct sbx_settings settings;
static sbx_manager manager;
static size_t line_max;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sbx_error err = SBX_ERROR_INIT;

	(void)argc;
	(void)argv;
	if (sbx_settings_init(&settings) < 0 ||
	    sbx_settings_set(&settings, "sandbox.image_inline_max=4k", &err) < 0)
		abort();
	manager.s = &settings;
	line_max = sbx_interp_line_max(&settings);
	return 0;
}

/* Whether P[0..N) holds a line (up to a '\n' or the end) over the cap. */
static bool has_long_line(const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;
		if (len > line_max)
			return true;
		if (!nl)
			break;
		p = nl + 1;
		n -= len + 1;
	}
	return false;
}

/* One feed of a copy of P[0..N) (its own allocation, so that ASan sees a
 * read past the chunk), with the checks. */
static void feed_one(const char *p, size_t n)
{
	char *copy = malloc(n ? n : 1);
	int r;

	if (!copy)
		abort();
	if (n)
		memcpy(copy, p, n);
	r = sbx_interp_protocol_feed(&manager, copy, n);
	if (r != 0 && r != -EPROTO && r != -ENOMEM)
		abort();
	if (r != -ENOMEM && (r == -EPROTO) != has_long_line(copy, n))
		abort();
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data + 1;
	size_t n = size ? size - 1 : 0;
	unsigned mode = size ? data[0] : 0;

	if (mode & 0x80) {
		size_t len = line_max - 16 + (mode & 0x1f);
		char *big;

		if (!n)
			return 0;
		big = malloc(len);
		if (!big)
			abort();
		for (size_t off = 0; off < len; off += n)
			memcpy(big + off, p, len - off < n ? len - off : n);
		feed_one(big, len);
		free(big);
	} else if (mode & 0x40) {
		size_t first = n * (mode & 0x3f) / 63;
		feed_one(p, first);
		feed_one(p + first, n - first);
	} else {
		feed_one(p, n);
	}
	return 0;
}
