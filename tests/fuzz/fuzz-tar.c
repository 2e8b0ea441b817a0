/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the tar reader (src/base/tar.c) fed in chunks of
 * random sizes. The first two bytes choose the chunking (a seed for the
 * sizes, and the largest chunk); the rest is the stream. The callbacks check
 * the reader's contract: entry, data of exactly e->size bytes, entry_end,
 * in that order; a name without a trailing '/', a link target only for
 * links; after a failure every call returns the same code.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/tar.h"

struct check {
	bool in_entry;
	int64_t size, got;
	size_t entries;
	int abort_at; /* a callback fails at this entry (tests the abort path), 0 = never */
};

static int on_entry(void *ud, const struct sbx_tar_entry *e)
{
	struct check *c = ud;
	size_t n = strlen(e->name);

	if (c->in_entry || e->size < 0 || n == 0 || (n > 1 && e->name[n - 1] == '/'))
		abort();
	if ((e->type == '1' || e->type == '2') != (e->link_target != NULL))
		abort();
	if (e->mode & ~07777u)
		abort();
	/* Callers check names; that must not crash on what the reader gives. */
	(void)sbx_tar_check_name(e->name, NULL);
	c->in_entry = true;
	c->size = e->size;
	c->got = 0;
	if (c->abort_at && ++c->entries == (size_t)c->abort_at)
		return -ECANCELED;
	return 0;
}

static int on_data(void *ud, const void *p, size_t n)
{
	struct check *c = ud;
	volatile unsigned char sink = 0;

	if (!c->in_entry || n == 0 || c->got + (int64_t)n > c->size)
		abort();
	/* Touch every byte: ASan sees a read past what was fed. */
	for (size_t i = 0; i < n; i++)
		sink ^= ((const unsigned char *)p)[i];
	(void)sink;
	c->got += (int64_t)n;
	return 0;
}

static int on_end(void *ud)
{
	struct check *c = ud;

	if (!c->in_entry || c->got != c->size)
		abort();
	c->in_entry = false;
	return 0;
}

static const struct sbx_tar_reader_ops ops = {
    .entry = on_entry,
    .data = on_data,
    .entry_end = on_end,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct check c = {0};
	struct sbx_tar_reader *r;
	uint32_t seed;
	size_t max_chunk;
	int rc = 0, again;

	if (size < 2)
		return 0;
	seed = data[0] | 1u;
	/* 1 .. 2048 bytes per chunk at most; 0 in the low bits: one chunk. */
	max_chunk = (data[1] & 0x0f) ? (size_t)1 << ((data[1] & 0x0f) - 1) : SIZE_MAX;
	c.abort_at = data[1] >> 6;
	data += 2;
	size -= 2;
	r = sbx_tar_reader_new(&ops, &c);
	if (!r)
		return 0;
	while (size && rc == 0) {
		size_t n = size;
		if (max_chunk != SIZE_MAX) {
			seed = seed * 1103515245u + 12345u;
			n = 1 + (seed >> 8) % max_chunk;
			if (n > size)
				n = size;
		}
		/* A copy of exactly N bytes: an over-read of the chunk is caught. */
		{
			unsigned char *chunk = malloc(n);
			if (!chunk)
				break;
			memcpy(chunk, data, n);
			rc = sbx_tar_reader_feed(r, chunk, n, &err);
			free(chunk);
		}
		data += n;
		size -= n;
	}
	if (rc == 0)
		rc = sbx_tar_reader_finish(r, &err);
	if (rc < 0) {
		/* Sticky: every later call fails with the same code. */
		again = sbx_tar_reader_feed(r, "x", 1, &err);
		if (again != rc || sbx_tar_reader_finish(r, &err) != rc)
			abort();
	} else if (c.in_entry) {
		abort(); /* finished cleanly inside an entry */
	}
	sbx_tar_reader_free(r);
	return 0;
}
