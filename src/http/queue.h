/* SPDX-License-Identifier: MIT */
/*
 * An intrusive FIFO: the node lives in the queued struct, the queue counts
 * its nodes and the bytes they stand for. No locking: the owner guards it.
 */
#ifndef SBX_QUEUE_H
#define SBX_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

struct sbx_queue_node {
	struct sbx_queue_node *next;
	size_t bytes; /* what it counts for in the queue's bytes */
};

struct sbx_queue {
	struct sbx_queue_node *head, *tail;
	size_t count, bytes;
};

/* The struct TYPE whose MEMBER is the node N (NULL for NULL). */
#define sbx_queue_entry(n, type, member)                                                           \
	({                                                                                         \
		struct sbx_queue_node *_n = (n);                                                   \
		_n ? (type *)(void *)((char *)_n - offsetof(type, member)) : (type *)NULL;         \
	})

static inline void sbx_queue_init(struct sbx_queue *q)
{
	q->head = q->tail = NULL;
	q->count = q->bytes = 0;
}

static inline bool sbx_queue_empty(const struct sbx_queue *q)
{
	return q->head == NULL;
}

/* Appends N, which counts for BYTES. */
static inline void sbx_queue_push(struct sbx_queue *q, struct sbx_queue_node *n, size_t bytes)
{
	n->next = NULL;
	n->bytes = bytes;
	if (q->tail)
		q->tail->next = n;
	else
		q->head = n;
	q->tail = n;
	q->count++;
	q->bytes += bytes;
}

/* Appends N unless the queue would then hold more than MAX_COUNT nodes or
 * MAX_BYTES bytes; false when it did not (N is still the caller's). */
static inline bool sbx_queue_push_bounded(struct sbx_queue *q, struct sbx_queue_node *n,
					  size_t bytes, size_t max_count, size_t max_bytes)
{
	if (q->count + 1 > max_count || q->bytes + bytes > max_bytes)
		return false;
	sbx_queue_push(q, n, bytes);
	return true;
}

/* Takes the first node off, NULL when empty. */
static inline struct sbx_queue_node *sbx_queue_pop(struct sbx_queue *q)
{
	struct sbx_queue_node *n = q->head;

	if (!n)
		return NULL;
	q->head = n->next;
	if (!q->head)
		q->tail = NULL;
	q->count--;
	q->bytes -= n->bytes;
	n->next = NULL;
	return n;
}

/* Takes every node off, in order, handing each to FREE_FN. */
static inline void sbx_queue_drain(struct sbx_queue *q, void (*free_fn)(struct sbx_queue_node *n))
{
	struct sbx_queue_node *n;

	while ((n = sbx_queue_pop(q)))
		free_fn(n);
}

#endif
