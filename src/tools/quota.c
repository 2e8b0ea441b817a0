/* SPDX-License-Identifier: MIT */
/*
 * Per-tenant quotas (src/tools/tools.h): a tenant's quotas from its API
 * key's limits and the [quota] defaults, and the table of the tool calls
 * each tenant runs now, which the calls quota is checked against (an
 * sbx_tenant_count of at most SBX_CALL_TABLE_MAX tenants).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/common.h"
#include "sbx/tenant_count.h"
#include "tools.h"

struct sbx_call_table {
	sbx_tenant_count *c;
};

/* A key's limit where it sets one (>= 0, 0 included: none allowed), else
 * the default where it is not 0, else -1. */
static int64_t pick(int64_t key, int64_t def, bool *ret_from_key)
{
	*ret_from_key = key >= 0;
	if (key >= 0)
		return key;
	return def > 0 ? def : -1;
}

void sbx_quota_of(const struct sbx_settings *s, const struct sbx_auth_limits *key,
		  struct sbx_quota *ret)
{
	const struct sbx_auth_limits none = SBX_AUTH_LIMITS_NONE;
	bool unused;

	if (!key)
		key = &none;
	memset(ret, 0, sizeof(*ret));
	ret->sandbox.sandboxes =
	    pick(key->sandboxes, s ? s->quota.sandboxes : 0, &ret->sandbox.sandboxes_from_key);
	ret->sandbox.installs =
	    pick(key->installs, s ? s->quota.installs : 0, &ret->sandbox.installs_from_key);
	/* Ceilings: the manager takes the lower of each and the server's. */
	ret->sandbox.memory = pick(key->memory, s ? s->quota.memory : 0, &unused);
	ret->sandbox.nano_cpus = pick(key->nano_cpus, s ? s->quota.nano_cpus : 0, &unused);
	ret->calls = pick(key->calls, s ? s->quota.calls : 0, &ret->calls_from_key);
}

int sbx_call_table_new(sbx_call_table **ret_table)
{
	sbx_call_table *t = calloc(1, sizeof(*t));

	if (!t || sbx_tenant_count_new(SBX_CALL_TABLE_MAX, &t->c) < 0) {
		free(t);
		return -ENOMEM;
	}
	*ret_table = t;
	return 0;
}

sbx_call_table *sbx_call_table_free(sbx_call_table *t)
{
	if (!t)
		return NULL;
	sbx_tenant_count_free(t->c);
	free(t);
	return NULL;
}

int sbx_call_table_begin(sbx_call_table *t, const char *tenant, int64_t max, bool from_key,
			 struct sbx_error *err)
{
	const char *source =
	    from_key ? "the calls limit of its API key" : "the server's quota.calls";
	int64_t running;
	int r;

	if (max == 0)
		return sbx_error_set(
		    err, -EDQUOT,
		    "tenant \"%s\" may not call tools or read resources (%s is 0): ask the "
		    "server's administrator to allow calls",
		    tenant, from_key ? "the calls limit of its API key" : "its calls quota");
	r = sbx_tenant_count_take(t->c, tenant, max, -1, &running);
	if (r == -EDQUOT)
		return sbx_error_set(err, r,
				     "tenant \"%s\" may run at most %" PRId64
				     " tool call%s at once (resources/list and resources/read "
				     "count as calls; %s) and runs %" PRId64
				     ": wait for one of them to end (or cancel one) and try again",
				     tenant, max, max == 1 ? "" : "s", source, running);
	if (r == -EBUSY)
		return sbx_error_set(err, r,
				     "the server runs tool calls of %d tenants at once, its most: "
				     "try again in a moment",
				     SBX_CALL_TABLE_MAX);
	if (r < 0)
		return sbx_error_set(err, r, "out of memory");
	return 0;
}

void sbx_call_table_end(sbx_call_table *t, const char *tenant)
{
	sbx_tenant_count_give(t->c, tenant);
}

int64_t sbx_call_table_count(sbx_call_table *t, const char *tenant)
{
	return sbx_tenant_count_held(t->c, tenant);
}

size_t sbx_call_table_tenants(sbx_call_table *t)
{
	return sbx_tenant_count_tenants(t->c);
}
