/* SPDX-License-Identifier: MIT */
/*
 * Counts per tenant (include/sbx/tenant_count.h): an array searched
 * linearly, never longer than the tenants holding something.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/tenant_count.h"

struct entry {
	char *tenant;
	int64_t n;
};

struct sbx_tenant_count {
	pthread_mutex_t lock;
	struct entry *v;
	size_t n, cap, max_tenants;
	int64_t total;
};

int sbx_tenant_count_new(size_t max_tenants, sbx_tenant_count **ret)
{
	sbx_tenant_count *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->max_tenants = max_tenants;
	*ret = c;
	return 0;
}

sbx_tenant_count *sbx_tenant_count_free(sbx_tenant_count *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].tenant);
	free(c->v);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return NULL;
}

/* Under c->lock: TENANT's entry, or NULL. */
static struct entry *find_locked(sbx_tenant_count *c, const char *tenant)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->v[i].tenant, tenant) == 0)
			return &c->v[i];
	return NULL;
}

/* Under c->lock: a new entry for TENANT holding nothing, or NULL with
 * -EBUSY or -ENOMEM in *RET_CODE. */
static struct entry *add_locked(sbx_tenant_count *c, const char *tenant, int *ret_code)
{
	struct entry *e;

	if (c->max_tenants && c->n >= c->max_tenants) {
		*ret_code = -EBUSY;
		return NULL;
	}
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 8;
		struct entry *v = realloc(c->v, cap * sizeof(*v));
		if (!v) {
			*ret_code = -ENOMEM;
			return NULL;
		}
		c->v = v;
		c->cap = cap;
	}
	e = &c->v[c->n];
	e->tenant = strdup(tenant);
	if (!e->tenant) {
		*ret_code = -ENOMEM;
		return NULL;
	}
	e->n = 0;
	c->n++;
	return e;
}

int sbx_tenant_count_take(sbx_tenant_count *c, const char *tenant, int64_t per_tenant,
			  int64_t total, int64_t *ret_held)
{
	struct entry *e;
	int r = 0;

	pthread_mutex_lock(&c->lock);
	e = find_locked(c, tenant);
	if (ret_held)
		*ret_held = e ? e->n : 0;
	if (total >= 0 && c->total >= total)
		r = -EUSERS;
	else if (per_tenant >= 0 && (e ? e->n : 0) >= per_tenant)
		r = -EDQUOT;
	else if (!e)
		e = add_locked(c, tenant, &r);
	if (r == 0) {
		e->n++;
		c->total++;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

void sbx_tenant_count_give(sbx_tenant_count *c, const char *tenant)
{
	struct entry *e;

	pthread_mutex_lock(&c->lock);
	e = find_locked(c, tenant);
	if (e) {
		c->total--;
		if (--e->n <= 0) {
			free(e->tenant);
			*e = c->v[--c->n];
			if (c->n == 0) {
				free(c->v);
				c->v = NULL;
				c->cap = 0;
			}
		}
	}
	pthread_mutex_unlock(&c->lock);
}

int64_t sbx_tenant_count_held(sbx_tenant_count *c, const char *tenant)
{
	struct entry *e;
	int64_t n;

	pthread_mutex_lock(&c->lock);
	e = tenant ? find_locked(c, tenant) : NULL;
	n = tenant ? (e ? e->n : 0) : c->total;
	pthread_mutex_unlock(&c->lock);
	return n;
}

size_t sbx_tenant_count_tenants(sbx_tenant_count *c)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->n;
	pthread_mutex_unlock(&c->lock);
	return n;
}
