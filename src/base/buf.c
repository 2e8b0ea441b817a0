/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"

int sbx_buf_reserve(struct sbx_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (extra > SIZE_MAX - b->len - 1)
		return -ENOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int sbx_buf_append(struct sbx_buf *b, const void *p, size_t n)
{
	int r = sbx_buf_reserve(b, n);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int sbx_buf_appendf(struct sbx_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	r = sbx_buf_reserve(b, (size_t)n);
	if (r < 0)
		return r;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *sbx_buf_steal(struct sbx_buf *b)
{
	char *p = b->data;
	if (!p)
		p = calloc(1, 1);
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

void sbx_buf_reset(struct sbx_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void sbx_buf_release(struct sbx_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int sbx_str_vreplacef(char **dst, const char *fmt, va_list ap)
{
	char *s;

	if (vasprintf(&s, fmt, ap) < 0)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

int sbx_str_replacef(char **dst, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = sbx_str_vreplacef(dst, fmt, ap);
	va_end(ap);
	return r;
}
