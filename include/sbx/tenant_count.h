/* SPDX-License-Identifier: MIT */
/*
 * What each tenant holds now of one kind (tool calls running, connections
 * relayed): a table of (tenant, count) under one mutex, an entry only while
 * its tenant holds one, bounded per tenant, in all and in tenants.
 * Thread-safe.
 */
#ifndef SBX_TENANT_COUNT_H
#define SBX_TENANT_COUNT_H

#include <stddef.h>
#include <stdint.h>

typedef struct sbx_tenant_count sbx_tenant_count;

/* A table of at most MAX_TENANTS entries (0: no bound but the counts'). */
int sbx_tenant_count_new(size_t max_tenants, sbx_tenant_count **ret); /* 0 or -ENOMEM */
sbx_tenant_count *sbx_tenant_count_free(sbx_tenant_count *c);
/* Counts one more for TENANT when it holds fewer than PER_TENANT and all
 * together fewer than TOTAL (negative: no such bound): 0, to be given back
 * with sbx_tenant_count_give. Else nothing is counted: -EDQUOT (TENANT at
 * PER_TENANT), -EUSERS (TOTAL reached), -EBUSY (MAX_TENANTS others hold
 * some), -ENOMEM. *RET_HELD (may be NULL): what TENANT held before. */
int sbx_tenant_count_take(sbx_tenant_count *c, const char *tenant, int64_t per_tenant,
			  int64_t total, int64_t *ret_held);
void sbx_tenant_count_give(sbx_tenant_count *c, const char *tenant);
/* What TENANT holds (NULL: all together), and the tenants holding some. */
int64_t sbx_tenant_count_held(sbx_tenant_count *c, const char *tenant);
size_t sbx_tenant_count_tenants(sbx_tenant_count *c);

#endif
