/* SPDX-License-Identifier: MIT */
/*
 * What each tenant's sandboxes used once they are gone (deleted, expired):
 * egress bytes, CPU time, memory and disk over time. list_sandboxes adds the live
 * sandboxes' to show the tenant's total.
 *
 * An array of (owner, usage) under m->egress_lock (a leaf lock), searched
 * linearly: one entry per tenant that had a sandbox, at most TENANTS_MAX
 * (past it a new tenant's usage is not kept, said once in the log).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/log.h"

#define TENANTS_MAX 100000

struct sbx_tenant_gone {
	char *owner;
	struct sbx_tenant_usage u;
};

/* *TO += N, stopping at the top (figures come from sandboxes). */
static void add(uint64_t *to, uint64_t n)
{
	*to = sbx_add_sat(*to, n);
}

static bool nothing(const struct sbx_tenant_usage *u)
{
	return !u->egress_bytes_in && !u->egress_bytes_out && !u->cpu_ns &&
	       !u->memory_byte_seconds && !u->disk_byte_seconds;
}

void sbx_tenant_gone_add(sbx_manager *m, const char *owner, const struct sbx_tenant_usage *u)
{
	struct sbx_tenant_gone *g = NULL;

	if (!owner || nothing(u))
		return;
	pthread_mutex_lock(&m->egress_lock);
	for (size_t i = 0; i < m->n_tenant_gone && !g; i++)
		if (strcmp(m->tenant_gone[i].owner, owner) == 0)
			g = &m->tenant_gone[i];
	if (!g && m->n_tenant_gone < TENANTS_MAX) {
		struct sbx_tenant_gone *v =
		    realloc(m->tenant_gone, (m->n_tenant_gone + 1) * sizeof(*v));
		char *o = strdup(owner);
		if (v)
			m->tenant_gone = v;
		if (v && o) {
			g = &v[m->n_tenant_gone++];
			*g = (struct sbx_tenant_gone){.owner = o};
		} else {
			free(o);
		}
	} else if (!g && !m->tenant_gone_full) {
		m->tenant_gone_full = true;
		sbx_log_warn(
		    "the usage of %d tenants' deleted sandboxes is kept; that of others is "
		    "no longer counted in list_sandboxes",
		    TENANTS_MAX);
	}
	if (g) {
		add(&g->u.egress_bytes_in, u->egress_bytes_in);
		add(&g->u.egress_bytes_out, u->egress_bytes_out);
		add(&g->u.cpu_ns, u->cpu_ns);
		add(&g->u.memory_byte_seconds, u->memory_byte_seconds);
		add(&g->u.disk_byte_seconds, u->disk_byte_seconds);
	}
	pthread_mutex_unlock(&m->egress_lock);
}

void sbx_manager_tenant_gone(sbx_manager *m, const char *owner, struct sbx_tenant_usage *ret)
{
	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock(&m->egress_lock);
	for (size_t i = 0; i < m->n_tenant_gone; i++)
		if (strcmp(m->tenant_gone[i].owner, owner) == 0) {
			*ret = m->tenant_gone[i].u;
			break;
		}
	pthread_mutex_unlock(&m->egress_lock);
}

void sbx_tenant_gone_release(sbx_manager *m)
{
	for (size_t i = 0; i < m->n_tenant_gone; i++)
		free(m->tenant_gone[i].owner);
	free(m->tenant_gone);
	m->tenant_gone = NULL;
	m->n_tenant_gone = 0;
}
