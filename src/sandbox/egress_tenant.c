/* SPDX-License-Identifier: MIT */
/*
 * Egress per tenant: where a tenant's own allow-list comes from (the lookup
 * the program sets, which reads the API keys' egress_allow), and the bytes
 * the relays of a tenant's sandboxes carried once those sandboxes are gone
 * (list_sandboxes adds the live ones' to show the tenant's total).
 *
 * The bytes of sandboxes gone are kept in an array of (owner, in, out)
 * under m->egress_lock, searched linearly: one entry per tenant that had a
 * sandbox with a relay, at most EGRESS_TENANTS_MAX (past it a new tenant's
 * bytes are not kept, said once in the log).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "egress-internal.h"
#include "sandbox-internal.h"
#include "sbx/log.h"

#define EGRESS_TENANTS_MAX 100000

struct sbx_egress_gone {
	char *owner;
	uint64_t in, out;
};

void sbx_manager_set_egress_lookup(sbx_manager *m, sbx_egress_lookup_fn fn, void *userdata)
{
	m->egress_lookup = fn;
	m->egress_lookup_ud = userdata;
}

int sbx_egress_policy_for(sbx_manager *m, sbx_sandbox *sb, struct egress_policy *p)
{
	return egress_policy_set_tenant(p, sb->owner, m->egress_lookup, m->egress_lookup_ud);
}

void sbx_egress_tenant_add(sbx_manager *m, const char *owner, uint64_t in, uint64_t out)
{
	struct sbx_egress_gone *g = NULL;

	if (!owner || (!in && !out))
		return;
	pthread_mutex_lock(&m->egress_lock);
	for (size_t i = 0; i < m->n_egress_gone && !g; i++)
		if (strcmp(m->egress_gone[i].owner, owner) == 0)
			g = &m->egress_gone[i];
	if (!g && m->n_egress_gone < EGRESS_TENANTS_MAX) {
		struct sbx_egress_gone *v =
		    realloc(m->egress_gone, (m->n_egress_gone + 1) * sizeof(*v));
		char *o = strdup(owner);
		if (v)
			m->egress_gone = v;
		if (v && o) {
			g = &v[m->n_egress_gone++];
			*g = (struct sbx_egress_gone){.owner = o};
		} else {
			free(o);
		}
	} else if (!g && !m->egress_gone_full) {
		m->egress_gone_full = true;
		sbx_log_warn(
		    "egress: the bytes of %d tenants' deleted sandboxes are kept; those of "
		    "others are no longer counted in list_sandboxes",
		    EGRESS_TENANTS_MAX);
	}
	if (g) {
		g->in += in;
		g->out += out;
	}
	pthread_mutex_unlock(&m->egress_lock);
}

void sbx_manager_egress_gone(sbx_manager *m, const char *owner, uint64_t *ret_in, uint64_t *ret_out)
{
	*ret_in = *ret_out = 0;
	pthread_mutex_lock(&m->egress_lock);
	for (size_t i = 0; i < m->n_egress_gone; i++)
		if (strcmp(m->egress_gone[i].owner, owner) == 0) {
			*ret_in = m->egress_gone[i].in;
			*ret_out = m->egress_gone[i].out;
			break;
		}
	pthread_mutex_unlock(&m->egress_lock);
}

void sbx_egress_tenant_release(sbx_manager *m)
{
	for (size_t i = 0; i < m->n_egress_gone; i++)
		free(m->egress_gone[i].owner);
	free(m->egress_gone);
	m->egress_gone = NULL;
	m->n_egress_gone = 0;
}
