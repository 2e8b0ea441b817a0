/* SPDX-License-Identifier: MIT */
/* A growable byte buffer, always NUL-terminated so text can be used in place. */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct sbx_buf {
	char *data; /* NUL-terminated; NULL until the first append */
	size_t len;
	size_t cap;
};

#define SBX_BUF_INIT                                                                               \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}

/* Room for EXTRA more bytes (and the NUL) without a reallocation, doubling
 * the capacity as needed; 0 or -ENOMEM. */
int sbx_buf_reserve(struct sbx_buf *b, size_t extra);
/* Append n bytes; returns 0 or -ENOMEM. */
int sbx_buf_append(struct sbx_buf *b, const void *p, size_t n);
int sbx_buf_appendf(struct sbx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the data over to the caller (NUL-terminated, never NULL) and reset b. */
char *sbx_buf_steal(struct sbx_buf *b);
void sbx_buf_reset(struct sbx_buf *b);
void sbx_buf_release(struct sbx_buf *b);

/* Replaces the owned string *DST with one formatted from FMT, freeing the
 * old one. Returns 0, or -ENOMEM with *DST left as it was. */
int sbx_str_replacef(char **dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sbx_str_vreplacef(char **dst, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#endif
