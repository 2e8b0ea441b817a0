/* SPDX-License-Identifier: MIT */
/*
 * Many containers removed at once (sbx_containers_remove): the manager's
 * stop, the pool's and the sweep of an instance's labelled containers take
 * the engine's time for a few removals, not for all one after the other.
 * It knows the engine alone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "sandbox-internal.h"
#include "sbx/common.h"

struct remover {
	sbx_engine *e;
	size_t n;
	const char *(*id)(void *ctx, size_t i);
	void (*done)(void *ctx, size_t i, int r);
	void *ctx;
	atomic_size_t next; /* the next container not yet taken */
};

static void *remover_main(void *arg)
{
	struct remover *rm = arg;
	size_t i;

	while ((i = atomic_fetch_add(&rm->next, 1)) < rm->n) {
		const char *id = rm->id(rm->ctx, i);
		int r = id ? sbx_container_remove(rm->e, id, NULL) : -ENOENT;

		if (rm->done)
			rm->done(rm->ctx, i, r);
	}
	return NULL;
}

void sbx_containers_remove(sbx_engine *e, size_t n, const char *(*id)(void *ctx, size_t i),
			   void (*done)(void *ctx, size_t i, int r), void *ctx)
{
	struct remover rm = {.e = e, .n = n, .id = id, .done = done, .ctx = ctx};
	pthread_t t[SBX_REMOVE_AT_ONCE - 1];
	size_t started = 0;

	atomic_init(&rm.next, 0);
	while (started < SBX_ARRAY_SIZE(t) && started + 1 < n &&
	       pthread_create(&t[started], NULL, remover_main, &rm) == 0)
		started++;
	remover_main(&rm);
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
}
