/* SPDX-License-Identifier: MIT */
/*
 * Egress per tenant: where a tenant's own allow-list comes from (the lookup
 * the program sets, which reads the API keys' egress_allow). What its
 * sandboxes carried is kept with the rest of its usage
 * (src/sandbox/tenant_usage.c).
 */
#include "egress-internal.h"
#include "sandbox/sandbox-internal.h"

void sbx_manager_set_egress_lookup(sbx_manager *m, sbx_egress_lookup_fn fn, void *userdata)
{
	m->egress_lookup = fn;
	m->egress_lookup_ud = userdata;
}

int sbx_egress_policy_for(sbx_manager *m, sbx_sandbox *sb, struct egress_policy *p)
{
	return egress_policy_set_tenant(p, sb->owner, m->egress_lookup, m->egress_lookup_ud);
}
