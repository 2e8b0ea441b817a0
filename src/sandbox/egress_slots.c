/* SPDX-License-Identifier: MIT */
/*
 * The connections the server relays at once for sandboxes (src/sandbox/
 * egress.c): a fetch's or a tunnel's, each holding an upstream socket of the
 * server's from its request until its stream is freed. Bounded in all
 * (sandbox.egress_connections: the server's file descriptors) and per tenant
 * (sandbox.egress_connections_per_tenant: one tenant's sandboxes cannot
 * take them all and stall every other tenant's installs).
 *
 * The table is an array of (tenant, connections) under one mutex, searched
 * linearly, as src/tools/quota.c keeps calls: it holds an entry only while
 * its tenant has a connection, so it is never longer than the connections
 * relayed at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress-internal.h"

struct slot_entry {
	char *tenant;
	int64_t n;
};

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot_entry *slots;
static size_t n_slots, cap_slots;
static int64_t held; /* over all tenants */

/* Under slots_lock: TENANT's entry, or NULL. */
static struct slot_entry *find_locked(const char *tenant)
{
	for (size_t i = 0; i < n_slots; i++)
		if (strcmp(slots[i].tenant, tenant) == 0)
			return &slots[i];
	return NULL;
}

int egress_slot_take(const char *tenant, int64_t max, int64_t per_tenant, char *why,
		     size_t why_size)
{
	struct slot_entry *t;
	int r = 0;

	pthread_mutex_lock(&slots_lock);
	t = find_locked(tenant);
	if (held >= max) {
		snprintf(why, why_size,
			 "mcp-sandbox: the server relays %lld connections at once for all "
			 "sandboxes (its limit, sandbox.egress_connections); try again in a "
			 "moment",
			 (long long)max);
		r = 503;
	} else if (t && t->n >= per_tenant) {
		snprintf(why, why_size,
			 "mcp-sandbox: this sandbox's tenant already has %lld connections "
			 "relayed at once over all its sandboxes (the limit, "
			 "sandbox.egress_connections_per_tenant); close some or wait for them "
			 "to end, and try again",
			 (long long)per_tenant);
		r = 503;
	} else if (!t) {
		if (n_slots == cap_slots) {
			size_t cap = cap_slots ? cap_slots * 2 : 8;
			struct slot_entry *v = realloc(slots, cap * sizeof(*v));
			if (!v)
				r = -ENOMEM;
			else
				slots = v, cap_slots = cap;
		}
		if (r == 0) {
			t = &slots[n_slots];
			t->tenant = strdup(tenant);
			t->n = 0;
			if (t->tenant)
				n_slots++;
			else
				r = -ENOMEM;
		}
		if (r < 0)
			snprintf(why, why_size, "mcp-sandbox: out of memory");
	}
	if (r == 0) {
		t->n++;
		held++;
	}
	pthread_mutex_unlock(&slots_lock);
	return r;
}

void egress_slot_give(const char *tenant)
{
	struct slot_entry *t;

	pthread_mutex_lock(&slots_lock);
	t = find_locked(tenant);
	if (t) {
		held--;
		if (--t->n == 0) {
			free(t->tenant);
			*t = slots[--n_slots];
			if (n_slots == 0) {
				free(slots);
				slots = NULL;
				cap_slots = 0;
			}
		}
	}
	pthread_mutex_unlock(&slots_lock);
}

int64_t egress_slots_held(const char *tenant)
{
	struct slot_entry *t;
	int64_t n;

	pthread_mutex_lock(&slots_lock);
	t = tenant ? find_locked(tenant) : NULL;
	n = tenant ? (t ? t->n : 0) : held;
	pthread_mutex_unlock(&slots_lock);
	return n;
}
