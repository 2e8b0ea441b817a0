/* SPDX-License-Identifier: MIT */
/*
 * The connections the server relays at once for sandboxes (src/egress/
 * egress.c): a fetch's or a tunnel's, each holding an upstream socket of the
 * server's from its request until its stream is freed. Bounded in all
 * (sandbox.egress_connections: the server's file descriptors) and per tenant
 * (sandbox.egress_connections_per_tenant: one tenant's sandboxes cannot
 * take them all and stall every other tenant's installs).
 *
 * One sbx_tenant_count for the server (all sandboxes' relays): it holds an
 * entry only while its tenant has a connection.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "egress-internal.h"
#include "sbx/tenant_count.h"

static pthread_once_t slots_once = PTHREAD_ONCE_INIT;
static sbx_tenant_count *slots; /* NULL: out of memory at the first use */

static void slots_init(void)
{
	if (sbx_tenant_count_new(0, &slots) < 0)
		slots = NULL;
}

int egress_slot_take(const char *tenant, int64_t max, int64_t per_tenant, char *why,
		     size_t why_size)
{
	int r;

	pthread_once(&slots_once, slots_init);
	r = slots ? sbx_tenant_count_take(slots, tenant, per_tenant, max, NULL) : -ENOMEM;
	if (r == -EUSERS) {
		snprintf(why, why_size,
			 "mcp-sandbox: the server relays %lld connections at once for all "
			 "sandboxes (its limit, sandbox.egress_connections); try again in a "
			 "moment",
			 (long long)max);
		return 503;
	}
	if (r == -EDQUOT) {
		snprintf(why, why_size,
			 "mcp-sandbox: this sandbox's tenant already has %lld connections "
			 "relayed at once over all its sandboxes (the limit, "
			 "sandbox.egress_connections_per_tenant); close some or wait for them "
			 "to end, and try again",
			 (long long)per_tenant);
		return 503;
	}
	if (r < 0)
		snprintf(why, why_size, "mcp-sandbox: out of memory");
	return r;
}

void egress_slot_give(const char *tenant)
{
	pthread_once(&slots_once, slots_init);
	if (slots)
		sbx_tenant_count_give(slots, tenant);
}

int64_t egress_slots_held(const char *tenant)
{
	pthread_once(&slots_once, slots_init);
	return slots ? sbx_tenant_count_held(slots, tenant) : 0;
}
