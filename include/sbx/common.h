/* SPDX-License-Identifier: MIT */
/*
 * The one ownership convention of mcp-sandbox.
 *
 * - Output parameters are named ret_* and come last; they are written only on
 *   success. Ownership is handed over with `*ret = p; p = NULL;`.
 * - Destructors accept NULL and return NULL, so `x = x_free(x);` is safe.
 * - Local owners use the cleanup attributes below; whatever is still owned at
 *   scope exit is released.
 */
#ifndef SBX_COMMON_H
#define SBX_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void sbx_freep(void *p)
{
	free(*(void **)p);
}
static inline void sbx_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}
#define _cleanup_free_ _cleanup_(sbx_freep)
#define _cleanup_close_ _cleanup_(sbx_closep)

/* Take ownership out of a cleanup-managed local. */
#define SBX_TAKE(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})

/* A NULL-terminated array of owned strings. */
static inline char **sbx_strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
	return NULL;
}

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A + B, stopping at the top (totals of figures from sandboxes). */
static inline uint64_t sbx_add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

#endif
