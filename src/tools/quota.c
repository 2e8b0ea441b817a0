/* SPDX-License-Identifier: MIT */
/*
 * Per-tenant quotas (src/tools/tools.h): a tenant's quotas from its API
 * key's limits and the [quota] defaults, and the table of the tool calls
 * each tenant runs now, which the calls quota is checked against.
 *
 * The table is an array of (tenant, calls) under one mutex, searched
 * linearly: it holds an entry only while its tenant has a call running, so
 * it is as long as the number of tenants with calls at once (the HTTP front
 * runs at most a few hundred calls), and at most SBX_CALL_TABLE_MAX.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/common.h"
#include "tools.h"

struct call_entry {
	char *tenant;
	int64_t calls;
};

struct sbx_call_table {
	pthread_mutex_t lock;
	struct call_entry *v;
	size_t n, cap;
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

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	*ret_table = t;
	return 0;
}

sbx_call_table *sbx_call_table_free(sbx_call_table *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].tenant);
	free(t->v);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return NULL;
}

/* Under t->lock: TENANT's entry, or NULL. */
static struct call_entry *find_locked(sbx_call_table *t, const char *tenant)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].tenant, tenant) == 0)
			return &t->v[i];
	return NULL;
}

/* Under t->lock: a new entry for TENANT with no calls, or NULL (-ENOMEM, or
 * -EBUSY when the table is full) in *ret_code. */
static struct call_entry *add_locked(sbx_call_table *t, const char *tenant, int *ret_code)
{
	struct call_entry *e;

	if (t->n >= SBX_CALL_TABLE_MAX) {
		*ret_code = -EBUSY;
		return NULL;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 8;
		struct call_entry *v = realloc(t->v, cap * sizeof(*v));
		if (!v) {
			*ret_code = -ENOMEM;
			return NULL;
		}
		t->v = v;
		t->cap = cap;
	}
	e = &t->v[t->n];
	e->tenant = strdup(tenant);
	if (!e->tenant) {
		*ret_code = -ENOMEM;
		return NULL;
	}
	e->calls = 0;
	t->n++;
	return e;
}

/* Under t->lock: drops E, and the array with the last entry. */
static void remove_locked(sbx_call_table *t, struct call_entry *e)
{
	free(e->tenant);
	*e = t->v[--t->n];
	if (t->n == 0) {
		free(t->v);
		t->v = NULL;
		t->cap = 0;
	}
}

int sbx_call_table_begin(sbx_call_table *t, const char *tenant, int64_t max, bool from_key,
			 struct sbx_error *err)
{
	const char *source =
	    from_key ? "the calls limit of its API key" : "the server's quota.calls";
	struct call_entry *e;
	int64_t running;
	int r = 0;

	if (max == 0)
		return sbx_error_set(
		    err, -EDQUOT,
		    "tenant \"%s\" may not call tools (%s is 0): ask the server's "
		    "administrator to allow calls",
		    tenant, from_key ? "the calls limit of its API key" : "its calls quota");
	pthread_mutex_lock(&t->lock);
	e = find_locked(t, tenant);
	running = e ? e->calls : 0;
	if (max > 0 && running >= max)
		r = -EDQUOT;
	else if (!e)
		e = add_locked(t, tenant, &r);
	if (e && r == 0)
		e->calls++;
	pthread_mutex_unlock(&t->lock);
	if (r == -EDQUOT)
		return sbx_error_set(err, r,
				     "tenant \"%s\" may run at most %" PRId64
				     " tool call%s at once (%s) and runs %" PRId64
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
	struct call_entry *e;

	pthread_mutex_lock(&t->lock);
	e = find_locked(t, tenant);
	if (e && --e->calls <= 0)
		remove_locked(t, e);
	pthread_mutex_unlock(&t->lock);
}

int64_t sbx_call_table_count(sbx_call_table *t, const char *tenant)
{
	struct call_entry *e;
	int64_t n;

	pthread_mutex_lock(&t->lock);
	e = find_locked(t, tenant);
	n = e ? e->calls : 0;
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t sbx_call_table_tenants(sbx_call_table *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->n;
	pthread_mutex_unlock(&t->lock);
	return n;
}
