/* SPDX-License-Identifier: MIT */
/*
 * The sandbox manager: its start and end, the table of records and the
 * owners' limits on it, create/get/delete/list and recover after a
 * restart. It orchestrates the parts below it: the record's life
 * (record.c) and calls (calls.c), the container's making (provision.c),
 * removal (removal.c), exec, interp, packages and files, the warm pool
 * (pool.c) and the state folder (state_dir.c), the reaper, the watch and
 * the samplers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egress/egress.h"
#include "sandbox-internal.h"
#include "sbx/log.h"
#include "sbx/clock.h"
#include "sbx/common.h"

/* How many of the caller's sandboxes the error at max_sandboxes names. */
#define LRU_NAMED 3

int sbx_manager_new(const struct sbx_settings *s, sbx_engine *engine, sbx_manager **ret_m,
		    struct sbx_error *err)
{
	sbx_manager *m;
	int r;

	if (!s || !engine)
		return sbx_error_set(err, -EINVAL, "sandbox manager: no settings or no engine");
	m = calloc(1, sizeof(*m));
	if (!m)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	m->s = s;
	m->engine = engine;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->check_lock, NULL);
	pthread_mutex_init(&m->disk_lock, NULL);
	pthread_mutex_init(&m->egress_lock, NULL);
	pthread_cond_init(&m->changed, NULL);
	pthread_cond_init(&m->woke, NULL);
	r = sbx_pool_new(m, err);
	if (r >= 0) {
		r = sbx_reaper_start(m, err);
		if (r >= 0) {
			r = sbx_watch_start(m, err);
			if (r < 0)
				sbx_reaper_stop(m);
		}
		if (r >= 0) {
			r = sbx_usage_start(m, err);
			if (r < 0) {
				sbx_watch_stop(m);
				sbx_reaper_stop(m);
			}
		}
		if (r < 0)
			sbx_pool_free(m);
	}
	if (r < 0) {
		pthread_mutex_destroy(&m->check_lock);
		pthread_mutex_destroy(&m->disk_lock);
		pthread_mutex_destroy(&m->egress_lock);
		pthread_cond_destroy(&m->changed);
		pthread_cond_destroy(&m->woke);
		pthread_mutex_destroy(&m->lock);
		free(m->instance);
		free(m);
		return r;
	}
	*ret_m = m;
	return 0;
}

static bool name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SBX_SANDBOX_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* ---- sandboxes whose container stopped without us ---- */

/* ---- the table of sandboxes gone lately ---- */

/* Under m->lock. Adds sb to the table, which takes a reference. */
static int table_add_locked(sbx_manager *m, sbx_sandbox *sb)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 16;
		sbx_sandbox **t = realloc(m->table, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		m->table = t;
		m->cap = cap;
	}
	m->table[m->n++] = sbx_sandbox_ref(sb);
	sbx_reaper_wake_locked(m); /* a new deadline (once it is ready) */
	return 0;
}

/* Under m->lock. By id first, then by name; only OWNER's ready sandboxes,
 * those being removed too when ENDING. */
static sbx_sandbox *find_any_locked(sbx_manager *m, const char *owner, const char *id_or_name,
				    bool ending)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->table[i]->ready && (ending || m->table[i]->end == SBX_END_NONE) &&
		    strcmp(m->table[i]->owner, owner) == 0 &&
		    strcmp(m->table[i]->id, id_or_name) == 0)
			return m->table[i];
	for (size_t i = 0; i < m->n; i++)
		if (m->table[i]->ready && (ending || m->table[i]->end == SBX_END_NONE) &&
		    strcmp(m->table[i]->owner, owner) == 0 &&
		    strcmp(m->table[i]->name, id_or_name) == 0)
			return m->table[i];
	return NULL;
}

static sbx_sandbox *find_locked(sbx_manager *m, const char *owner, const char *id_or_name)
{
	return find_any_locked(m, owner, id_or_name, false);
}

/* Under m->lock. The error for OWNER's ID_OR_NAME that find_locked does
 * not know: being removed, removed lately (deleted or expired), or unknown
 * (-ENOENT in each case). */
static int not_found_locked(sbx_manager *m, const char *owner, const char *id_or_name,
			    struct sbx_error *err)
{
	const sbx_sandbox *sb = find_any_locked(m, owner, id_or_name, true);
	const struct sbx_gone *g = sb ? NULL : sbx_gone_find_locked(m, owner, id_or_name);

	if (sb)
		return sbx_gone_error(m, err, id_or_name, sb->end, sb->end_at, false);
	if (g)
		return sbx_gone_error(m, err, id_or_name, g->end, g->when, false);
	return sbx_error_set(err, -ENOENT,
			     "no sandbox \"%.80s\"; list_sandboxes shows yours, "
			     "create_sandbox makes a new one",
			     id_or_name);
}

static int check_owner(const char *owner, struct sbx_error *err)
{
	if (!owner || strlen(owner) > SBX_OWNER_MAX)
		return sbx_error_set(err, -EINVAL, "invalid sandbox owner");
	return 0;
}

/* Creates and starts the container of a cold sandbox. */
static int container_up(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	return sbx_container_provision(m, sb->id, sb->created, sb->name, sb->owner, sb->memory,
				       sb->nano_cpus, &sb->container, err);
}

/* Under m->lock (used_ms). */
/* Dead ones first (they are of no use), then the least recently used. */
static int by_last_used(const void *a, const void *b)
{
	const sbx_sandbox *x = *(sbx_sandbox *const *)a, *y = *(sbx_sandbox *const *)b;
	bool xd = x->death != SBX_DEATH_NONE, yd = y->death != SBX_DEATH_NONE;

	if (xd != yd)
		return xd ? -1 : 1;
	return (x->used_ms > y->used_ms) - (x->used_ms < y->used_ms);
}

/* Under m->lock. Writes OWNER's least recently used sandboxes into LIST
 * (for an error that asks to delete one); returns how many OWNER has. */
static size_t lru_list_locked(sbx_manager *m, const char *owner, char *list, size_t size)
{
	sbx_sandbox *lru[LRU_NAMED];
	size_t n = 0, mine = 0, len = 0;

	list[0] = '\0';

	for (size_t i = 0; i < m->n; i++) {
		sbx_sandbox *sb = m->table[i];
		if (!sb->ready || sb->end != SBX_END_NONE || strcmp(sb->owner, owner) != 0)
			continue;
		mine++;
		/* Keep the LRU_NAMED least recently used, in order. */
		if (n < LRU_NAMED)
			lru[n++] = sb;
		else if (by_last_used(&sb, &lru[n - 1]) < 0)
			lru[n - 1] = sb;
		else
			continue;
		qsort(lru, n, sizeof(*lru), by_last_used);
	}
	for (size_t i = 0; i < n && len < size; i++) {
		char used[32];
		sbx_iso_time(lru[i]->last_used, used, sizeof(used));
		len +=
		    (size_t)snprintf(list + len, size - len, "%s%s (name \"%.64s\", %s%s)",
				     i ? "; " : "", lru[i]->id, lru[i]->name,
				     lru[i]->death != SBX_DEATH_NONE	? "dead, "
				     : lru[i]->sleep != SBX_SLEEP_AWAKE ? "asleep, last used "
									: "last used ",
				     lru[i]->death != SBX_DEATH_NONE ? "it no longer runs" : used);
	}
	return mine;
}

/* Under m->lock. The error at sandbox.max_sandboxes, naming OWNER's least
 * recently used sandboxes, which the caller may delete. */
static int limit_error_locked(sbx_manager *m, const char *owner, struct sbx_error *err)
{
	char list[SBX_ERROR_MSG_MAX / 2];
	size_t mine = lru_list_locked(m, owner, list, sizeof(list));

	if (mine == 0)
		return sbx_error_set(err, -EBUSY,
				     "the server already runs its limit of %" PRId64
				     " sandboxes, none of them yours: try again later "
				     "(sandboxes unused for long are removed)",
				     m->s->sandbox.max_sandboxes);
	return sbx_error_set(
	    err, -EBUSY,
	    "the server already runs its limit of %" PRId64
	    " sandboxes, %zu of them yours: delete one you no longer need with "
	    "delete_sandbox and try again, or reuse one. Your dead and least recently used: "
	    "%s",
	    m->s->sandbox.max_sandboxes, mine, list);
}

/* Under m->lock. The sandboxes OWNER has now, those still being created
 * included (they hold their slot), those being deleted not. */
static size_t owned_locked(sbx_manager *m, const char *owner)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n; i++)
		if (m->table[i]->end == SBX_END_NONE && strcmp(m->table[i]->owner, owner) == 0)
			n++;
	return n;
}

/* Under m->lock. Checks the limits (the server's, then OWNER's quota Q when
 * it has one) and the name and adds sb to the table. */
static int reserve_locked(sbx_manager *m, sbx_sandbox *sb, const struct sbx_tenant_quota *q,
			  struct sbx_error *err)
{
	size_t mine;

	if (m->n >= (size_t)m->s->sandbox.max_sandboxes)
		return limit_error_locked(m, sb->owner, err);
	if (q && q->sandboxes == 0)
		return sbx_error_set(err, -EDQUOT,
				     "tenant \"%s\" may not create sandboxes (%s is 0): ask the "
				     "server's administrator to allow them",
				     sb->owner,
				     q->sandboxes_from_key ? "the sandboxes limit of its API key"
							   : "its sandboxes quota");
	if (q && q->sandboxes > 0 &&
	    (mine = owned_locked(m, sb->owner)) >= (uint64_t)q->sandboxes) {
		char list[SBX_ERROR_MSG_MAX / 2];
		lru_list_locked(m, sb->owner, list, sizeof(list));
		return sbx_error_set(
		    err, -EDQUOT,
		    "tenant \"%s\" may have at most %" PRId64
		    " sandbox%s at once (%s) and has %zu: delete one you no longer need with "
		    "delete_sandbox and try again, or reuse one. Your dead and least recently "
		    "used: %s",
		    sb->owner, q->sandboxes, q->sandboxes == 1 ? "" : "es",
		    q->sandboxes_from_key ? "the sandboxes limit of its API key"
					  : "the server's quota.sandboxes",
		    mine, list[0] ? list : "none yet ready");
	}
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->table[i]->owner, sb->owner) == 0 &&
		    (strcmp(m->table[i]->name, sb->name) == 0 ||
		     strcmp(m->table[i]->id, sb->name) == 0))
			return sbx_error_set(err, -EEXIST,
					     "a sandbox named \"%s\" already exists; pick another "
					     "name or use that one",
					     sb->name);
	if (table_add_locked(m, sb) < 0)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

int sbx_sandbox_create(sbx_manager *m, const char *owner, const char *name, sbx_sandbox **ret_sb,
		       struct sbx_error *err)
{
	return sbx_sandbox_create_quota(m, owner, name, NULL, ret_sb, err);
}

/* A quota's ceiling on one of the server's limits: the lower of the two
 * (a quota of -1 or 0 is none). */
static int64_t ceiling(int64_t server, int64_t quota)
{
	return quota > 0 && quota < server ? quota : server;
}

int sbx_sandbox_create_quota(sbx_manager *m, const char *owner, const char *name,
			     const struct sbx_tenant_quota *q, sbx_sandbox **ret_sb,
			     struct sbx_error *err)
{
	char id[SBX_SANDBOX_ID_MAX + 1];
	struct sbx_pool_entry *e = NULL;
	sbx_sandbox *sb = NULL;
	int64_t memory = ceiling(m->s->sandbox.memory, q ? q->memory : -1);
	int64_t nano_cpus = ceiling(m->s->sandbox.nano_cpus, q ? q->nano_cpus : -1);
	/* Pooled containers have the server's limits: a tenant held below them
	 * gets a container made with its own (updating a pooled one's limits
	 * through the engine would be a second way to set them, per engine,
	 * with a moment in which the higher ones hold). */
	bool use_pool = memory == m->s->sandbox.memory && nano_cpus == m->s->sandbox.nano_cpus;
	bool missed = false;
	int r;

	r = check_owner(owner, err);
	if (r < 0)
		return r;
	if (name && !name_valid(name))
		return sbx_error_set(
		    err, -EINVAL,
		    "invalid sandbox name \"%.80s\": use 1 to %d of the characters "
		    "A-Z a-z 0-9 _ . -",
		    name, SBX_SANDBOX_NAME_MAX);
again:
	r = sbx_sandbox_make_id(id, err);
	if (r < 0)
		return r;

	/* Reserve the slot and the name, and take a pooled container (whose id
	 * the sandbox gets), before talking to the engine. */
	pthread_mutex_lock(&m->lock);
	e = use_pool ? sbx_pool_take_locked(m, &missed) : NULL;
	sb = sbx_record_new(m, e ? e->id : id, name, owner, time(NULL));
	if (sb) {
		sb->pooled = e != NULL;
		sb->memory = memory;
		sb->nano_cpus = nano_cpus;
	}
	r = sb ? reserve_locked(m, sb, q, err) : sbx_error_set(err, -ENOMEM, "out of memory");
	if (r < 0 && e)
		sbx_pool_give_back_locked(m, SBX_TAKE(e));
	missed = missed && r >= 0; /* a refused create grows nothing */
	if (missed)
		sbx_pool_missed_locked(m);
	pthread_mutex_unlock(&m->lock);
	if (r < 0) {
		sbx_sandbox_unref(sb);
		return r;
	}

	if (e) {
		sb->container = SBX_TAKE(e->container);
		r = sbx_pool_assign(m, sb, err);
		if (r < 0) {
			/* Never used: back to the pool, and make this one cold. */
			pthread_mutex_lock(&m->lock);
			sbx_sandbox_unref(sbx_table_remove_locked(m, sb));
			e->container = SBX_TAKE(sb->container);
			sbx_pool_give_back_locked(m, SBX_TAKE(e));
			pthread_mutex_unlock(&m->lock);
			sbx_sandbox_unref(sb);
			sbx_error_clear(err);
			use_pool = false;
			goto again;
		}
	} else {
		r = container_up(m, sb, err);
	}

	pthread_mutex_lock(&m->lock);
	if (r >= 0) {
		if (e)
			sb->interp = SBX_TAKE(e->interp); /* its pooled interpreter */
		sb->ready = true;
		/* Its usage counts from now (the first sample integrates back to it). */
		sb->sampled_ms = sb->disk_sampled_ms = sbx_monotonic_ms();
		sbx_sandbox_touch_locked(
		    sb); /* its idle time starts now, however long the create took */
		sbx_reaper_wake_locked(m); /* a new deadline */
		sbx_pool_created_locked(m, sb->pooled);
	} else {
		sbx_sandbox_unref(sbx_table_remove_locked(m, sb));
	}
	if (missed)
		sbx_pool_missed_done_locked(m);
	pthread_mutex_unlock(&m->lock);
	sbx_pool_entry_free(e);
	if (r < 0) {
		sbx_sandbox_unref(sb);
		sbx_error_prefix(err, "create sandbox");
		return r;
	}
	*ret_sb = sb;
	return 0;
}

/* Under m->lock: *RET_SB (a reference) is OWNER's sandbox ID_OR_NAME, or
 * the error says why there is none. */
static int lookup_locked(sbx_manager *m, const char *owner, const char *id_or_name,
			 sbx_sandbox **ret_sb, struct sbx_error *err)
{
	sbx_sandbox *sb;

	if (!owner || !id_or_name)
		return sbx_error_set(err, -EINVAL, "no sandbox id given");
	sb = find_locked(m, owner, id_or_name);
	if (!sb)
		return not_found_locked(m, owner, id_or_name, err);
	*ret_sb = sbx_sandbox_ref(sb);
	return 0;
}

int sbx_sandbox_get(sbx_manager *m, const char *owner, const char *id_or_name, sbx_sandbox **ret_sb,
		    struct sbx_error *err)
{
	int r;

	pthread_mutex_lock(&m->lock);
	r = lookup_locked(m, owner, id_or_name, ret_sb, err);
	pthread_mutex_unlock(&m->lock);
	return r;
}

int sbx_sandbox_get_by_id(sbx_manager *m, const char *id, sbx_sandbox **ret_sb,
			  struct sbx_error *err)
{
	sbx_sandbox *sb = NULL;

	if (!id)
		return sbx_error_set(err, -EINVAL, "no sandbox id given");
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->n && !sb; i++)
		if (m->table[i]->ready && m->table[i]->end == SBX_END_NONE &&
		    strcmp(m->table[i]->id, id) == 0)
			sb = sbx_sandbox_ref(m->table[i]);
	pthread_mutex_unlock(&m->lock);
	if (!sb)
		return sbx_error_set(err, -ENOENT, "no sandbox \"%.80s\"", id);
	*ret_sb = sb;
	return 0;
}

int sbx_sandbox_delete(sbx_manager *m, const char *owner, const char *id_or_name,
		       struct sbx_error *err)
{
	sbx_sandbox *sb = NULL;
	int r;

	/* Marked first: no call starts in it from now on, and the calls
	 * running in it end with its container, saying it was deleted. */
	pthread_mutex_lock(&m->lock);
	r = lookup_locked(m, owner, id_or_name, &sb, err);
	if (r >= 0) {
		sb->end = SBX_END_DELETED;
		sb->end_at = time(NULL);
	}
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		return r;
	r = sbx_sandbox_remove_marked(m, sb, err);
	if (r < 0)
		sbx_error_prefix(err, "delete sandbox");
	sbx_sandbox_unref(sb);
	return r;
}

void sbx_sandbox_info_release(struct sbx_sandbox_info *info)
{
	if (!info)
		return;
	free(info->id);
	free(info->name);
	free(info->owner);
	free(info->status);
	free(info->node);
	free(info->image);
	free(info->reason);
	if (info->packages)
		for (char **p = info->packages; *p; p++)
			free(*p);
	free(info->packages);
	memset(info, 0, sizeof(*info));
}

void sbx_sandbox_info_list_free(struct sbx_sandbox_info *list, size_t n)
{
	for (size_t i = 0; list && i < n; i++)
		sbx_sandbox_info_release(&list[i]);
	free(list);
}

/* Fills info from the record; status and node (may be NULL) are given. */
static int info_fill(sbx_manager *m, sbx_sandbox *sb, const char *status, const char *node,
		     struct sbx_sandbox_info *info)
{
	bool dead = false; /* out of memory for the reason */

	memset(info, 0, sizeof(*info));
	info->id = strdup(sb->id);
	info->name = strdup(sb->name);
	info->owner = strdup(sb->owner);
	info->node = node ? strdup(node) : NULL;
	info->image = strdup(sb->image);
	info->created = sb->created;
	pthread_mutex_lock(&m->lock);
	/* Asleep: its container is stopped, as the engine says; gone, it
	 * is not asleep. */
	info->status = strdup(
	    sb->sleep != SBX_SLEEP_AWAKE && strcmp(status, "missing") != 0 ? "sleeping" : status);
	info->asleep_since = sb->sleep != SBX_SLEEP_AWAKE ? sb->slept_at : 0;
	info->sleeps = sb->sleeps;
	info->wakes = sb->wakes;
	info->last_used = sb->last_used;
	info->cpu_ns = sb->cpu_ns;
	info->memory_bytes = sb->memory_bytes;
	info->memory_byte_seconds = sb->memory_byte_seconds;
	info->disk_bytes = sb->disk_bytes;
	info->disk_byte_seconds = sb->disk_byte_seconds;
	sbx_sandbox_times_locked(m, sb, &info->sleeps_at, &info->expires);
	if (sb->death != SBX_DEATH_NONE) {
		char why[320];
		sbx_death_text(m, sb, why, sizeof(why));
		info->reason = strdup(why);
		dead = !info->reason;
	}
	pthread_mutex_unlock(&m->lock);
	info->packages = sbx_sandbox_packages(m, sb);
	{
		struct sbx_egress_stats es;
		sbx_sandbox_egress_stats(m, sb, &es);
		info->egress_bytes_in = es.bytes_in;
		info->egress_bytes_out = es.bytes_out;
	}
	if (!info->id || !info->name || !info->owner || !info->status || !info->image ||
	    !info->packages || dead || (node && !info->node)) {
		sbx_sandbox_info_release(info);
		return -ENOMEM;
	}
	return 0;
}

int sbx_sandbox_describe(sbx_manager *m, sbx_sandbox *sb, struct sbx_sandbox_info *ret_info,
			 struct sbx_error *err)
{
	struct sbx_container_info ci = {0};
	struct sbx_sandbox_info info;
	const char *status = "missing";
	int r;

	r = sbx_container_inspect(m->engine, sb->container, &ci, err);
	if (r < 0 && r != -ENOENT) {
		sbx_error_prefix(err, "describe sandbox %s", sb->id);
		return r;
	}
	if (r >= 0 && ci.status)
		status = ci.status;
	r = info_fill(m, sb, status, ci.node, &info);
	sbx_container_info_release(&ci);
	if (r < 0)
		return sbx_error_set(err, r, "out of memory");
	*ret_info = info;
	return 0;
}

void sbx_manager_sandbox_counts(sbx_manager *m, struct sbx_sandbox_counts *ret_counts)
{
	struct sbx_sandbox_counts c = {0};

	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->n; i++) {
		const sbx_sandbox *sb = m->table[i];
		if (sb->end != SBX_END_NONE)
			c.ending++;
		else if (!sb->ready)
			c.creating++;
		else if (sb->death != SBX_DEATH_NONE)
			c.dead++;
		else if (sb->sleep != SBX_SLEEP_AWAKE)
			c.sleeping++;
		else if (sb->calls > 0)
			c.busy++;
		else
			c.idle++;
	}
	pthread_mutex_unlock(&m->lock);
	*ret_counts = c;
}

size_t sbx_manager_node_counts(sbx_manager *m, struct sbx_node_count *out, size_t max)
{
	char **cids;
	size_t n = 0, used = 0;

	pthread_mutex_lock(&m->lock);
	cids = calloc(m->n + 1, sizeof(*cids));
	for (size_t i = 0; cids && i < m->n; i++) {
		const sbx_sandbox *sb = m->table[i];
		if (sb->ready && sb->end == SBX_END_NONE && sb->death == SBX_DEATH_NONE &&
		    sb->container && (cids[n] = strdup(sb->container)))
			n++;
	}
	pthread_mutex_unlock(&m->lock);
	for (size_t i = 0; i < n; i++) {
		char node[SBX_ENGINE_NODE_MAX + 1];
		size_t k = 0;

		int r = sbx_container_node(m->engine, cids[i], node, sizeof(node));

		if (r == -ENOTSUP) /* one host: no node to count by */
			break;
		if (r < 0)
			continue;
		while (k < used && strcmp(out[k].node, node) != 0)
			k++;
		if (k == used && used < max) {
			snprintf(out[used].node, sizeof(out[used].node), "%s", node);
			out[used++].sandboxes = 0;
		}
		if (k < used)
			out[k].sandboxes++;
	}
	sbx_strv_free(cids);
	return used;
}

int sbx_manager_list(sbx_manager *m, const char *owner, struct sbx_sandbox_info **ret_list,
		     size_t *ret_n, struct sbx_error *err)
{
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, m->instance}};
	struct sbx_container_summary *cs = NULL;
	struct sbx_sandbox_info *list = NULL;
	sbx_sandbox **mine = NULL;
	size_t n = 0, n_cs = 0, done = 0;
	int r;

	r = check_owner(owner, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&m->lock);
	mine = calloc(m->n + 1, sizeof(*mine));
	for (size_t i = 0; mine && i < m->n; i++)
		if (m->table[i]->ready && m->table[i]->end == SBX_END_NONE &&
		    strcmp(m->table[i]->owner, owner) == 0)
			mine[n++] = sbx_sandbox_ref(m->table[i]);
	pthread_mutex_unlock(&m->lock);
	if (!mine)
		return sbx_error_set(err, -ENOMEM, "out of memory");

	if (n > 0) {
		r = sbx_container_list(m->engine, want, SBX_ARRAY_SIZE(want), &cs, &n_cs, err);
		if (r < 0) {
			sbx_error_prefix(err, "list sandboxes");
			goto out;
		}
	}
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (done = 0; done < n; done++) {
		const struct sbx_container_summary *c =
		    sbx_summary_find(cs, n_cs, mine[done]->container);
		const char *status = !c ? "missing" : c->status ? c->status : "unknown";
		r = info_fill(m, mine[done], status, c ? c->node : NULL, &list[done]);
		if (r < 0) {
			r = sbx_error_set(err, r, "out of memory");
			goto out;
		}
	}
	*ret_list = SBX_TAKE(list);
	*ret_n = n;
	r = 0;
out:
	sbx_sandbox_info_list_free(list, done);
	sbx_container_list_free(cs, n_cs);
	for (size_t i = 0; i < n; i++)
		sbx_sandbox_unref(mine[i]);
	free(mine);
	return r;
}

static const char *label_of(const struct sbx_container_info *ci, const char *key)
{
	for (size_t i = 0; i < ci->n_labels; i++)
		if (ci->labels[i].key && strcmp(ci->labels[i].key, key) == 0)
			return ci->labels[i].value;
	return NULL;
}

static int by_created(const void *a, const void *b)
{
	const sbx_sandbox *x = *(sbx_sandbox *const *)a, *y = *(sbx_sandbox *const *)b;
	return (x->created > y->created) - (x->created < y->created);
}

/* Adopts one container if its labels make a valid record we lack: 1 if
 * adopted, 0 if skipped. */
static int adopt(sbx_manager *m, const char *cid, struct sbx_error *err)
{
	struct sbx_container_info ci = {0};
	const char *id, *name, *owner, *created, *pool;
	_cleanup_free_ char *pool_owner = NULL, *pool_name = NULL;
	time_t when = 0;
	sbx_sandbox *sb = NULL;
	bool known = false, running;
	time_t asleep;
	int r;

	r = sbx_container_inspect(m->engine, cid, &ci, err);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	id = label_of(&ci, SBX_LABEL_ID);
	name = label_of(&ci, SBX_LABEL_NAME);
	owner = label_of(&ci, SBX_LABEL_OWNER);
	created = label_of(&ci, SBX_LABEL_CREATED);
	pool = label_of(&ci, SBX_LABEL_POOL);
	if (created)
		when = (time_t)strtoll(created, NULL, 10);
	if (id && pool && strcmp(pool, "1") == 0) {
		/* Owner and name are in the state folder, if it was assigned. */
		r = sbx_pool_recover_one(m, id, ci.id ? ci.id : cid, &pool_owner, &pool_name, &when,
					 err);
		if (r <= 0) {
			sbx_container_info_release(&ci);
			return r;
		}
		name = pool_name;
		owner = pool_owner;
		created = "";
	}
	if (!id || !name || !owner || !created || strlen(id) > SBX_SANDBOX_ID_MAX ||
	    !name_valid(id) || !name_valid(name) || check_owner(owner, NULL) < 0) {
		sbx_container_info_release(&ci);
		return 0;
	}
	sb = sbx_record_new(m, id, name, owner, when);
	if (sb) {
		sb->pooled = pool_owner != NULL;
		free(sb->image);
		sb->image = strdup(ci.image ? ci.image : m->s->sandbox.image);
		sb->container = strdup(ci.id ? ci.id : cid);
		if (ci.memory_bytes > 0)
			sb->memory = ci.memory_bytes;
		if (ci.nano_cpus > 0)
			sb->nano_cpus = ci.nano_cpus;
	}
	running = ci.running;
	asleep = sbx_engine_restart_keeps(m->engine)
		     ? sbx_container_asleep_since(m, id, ci.name ? ci.name : "")
		     : 0;
	if (!sb || !sb->image || !sb->container) {
		sbx_container_info_release(&ci);
		sbx_record_free(sb);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	sb->ready = true;
	sb->sampled_ms = sb->disk_sampled_ms = sbx_monotonic_ms(); /* adopted: from now */
	pthread_mutex_lock(&m->lock);
	if (!running && asleep) { /* put to sleep, its name says (sleep.c) */
		time_t now = time(NULL);
		sb->sleep = SBX_SLEEP_ASLEEP;
		/* The engine's word: not before its creation, not in the future. */
		sb->slept_at = asleep < sb->created ? sb->created : asleep > now ? now : asleep;
		sb->sleeps = 1;
	} else if (!running) { /* it stopped while no server followed the engine */
		sbx_sandbox_died_of_locked(m, sb, &ci, true);
	}
	sbx_container_info_release(&ci);
	for (size_t i = 0; i < m->n; i++)
		known |= strcmp(m->table[i]->id, sb->id) == 0 ||
			 (m->table[i]->container &&
			  strcmp(m->table[i]->container, sb->container) == 0) ||
			 (strcmp(m->table[i]->owner, sb->owner) == 0 &&
			  strcmp(m->table[i]->name, sb->name) == 0);
	r = known ? 0 : table_add_locked(m, sb);
	if (r >= 0 && !known)
		r = 1;
	pthread_mutex_unlock(&m->lock);
	/* Woken, and the server died before it took the mark off. */
	if (r == 1 && running && asleep) {
		struct sbx_error unmark = SBX_ERROR_INIT;
		if (sbx_sandbox_mark_asleep(sb, 0, &unmark) < 0)
			sbx_log_warn("sandbox %s: its container's name keeps the asleep mark: %s",
				     sb->id, unmark.msg);
	}
	sbx_sandbox_unref(sb);
	return r == -ENOMEM ? sbx_error_set(err, r, "out of memory") : r;
}

int sbx_manager_recover(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, m->instance}};
	struct sbx_container_summary *cs = NULL;
	size_t n_cs = 0;
	int r, adopted = 0;

	r = sbx_container_list(m->engine, want, SBX_ARRAY_SIZE(want), &cs, &n_cs, err);
	if (r < 0) {
		sbx_error_prefix(err, "recover sandboxes");
		return r;
	}
	for (size_t i = 0; i < n_cs; i++) {
		r = adopt(m, cs[i].id, err);
		if (r < 0) {
			sbx_error_prefix(err, "recover sandbox container %.12s", cs[i].id);
			break;
		}
		adopted += r;
	}
	sbx_container_list_free(cs, n_cs);
	pthread_mutex_lock(&m->lock);
	if (m->n > 1)
		qsort(m->table, m->n, sizeof(*m->table), by_created);
	pthread_mutex_unlock(&m->lock);
	if (r >= 0)
		sbx_pool_recover_done(m);
	return r < 0 ? r : adopted;
}

/* sbx_containers_remove's view of the table, at the end. */
static const char *table_container(void *ctx, size_t i)
{
	return ((sbx_manager *)ctx)->table[i]->container;
}

static void table_removed(void *ctx, size_t i, int r)
{
	sbx_manager *m = ctx;

	if (r < 0 && r != -ENOENT)
		return;
	sbx_pool_forget(m, m->table[i]);
	/* nothing left to stop in it (its egress relay) */
	pthread_mutex_lock(&m->lock);
	m->table[i]->death = SBX_DEATH_REMOVED;
	pthread_mutex_unlock(&m->lock);
}

sbx_manager *sbx_manager_free(sbx_manager *m)
{
	if (!m)
		return NULL;
	sbx_reaper_stop(m); /* first: its sleeps sample usage */
	sbx_usage_stop(m);
	sbx_watch_stop(m);
	sbx_pool_stop(m);
	/* Removing a container also ends the installs running in it. The
	 * table no longer changes: nothing adds to it or takes from it now. */
	if (m->s->sandbox.remove_on_exit)
		sbx_containers_remove(m->engine, m->n, table_container, table_removed, m);
	pthread_mutex_lock(&m->lock);
	while (m->installs_running > 0)
		pthread_cond_wait(&m->changed, &m->lock);
	pthread_mutex_unlock(&m->lock);
	/* At the end, with sandbox.remove_on_exit: whatever container still
	 * carries this instance's label goes too (a create the engine carried
	 * out while its answer was lost, a removal it refused while it
	 * restarted). Only this server runs this instance (the pool's lock),
	 * so every such container is its own. */
	if (m->s->sandbox.remove_on_exit)
		sbx_remove_labelled(m, NULL, true);
	for (size_t i = 0; i < m->n; i++) {
		m->table[i]->removed = true;
		sbx_sandbox_unref(m->table[i]);
	}
	free(m->table);
	sbx_gone_free(m);
	sbx_pool_free(m);
	sbx_tenant_gone_release(m);
	free(m->instance);
	pthread_cond_destroy(&m->changed);
	pthread_cond_destroy(&m->woke);
	pthread_mutex_destroy(&m->check_lock);
	pthread_mutex_destroy(&m->disk_lock);
	pthread_mutex_destroy(&m->egress_lock);
	pthread_mutex_destroy(&m->lock);
	free(m);
	return NULL;
}

int sbx_manager_check_engine(sbx_manager *m, struct sbx_error *err)
{
	int r;

	pthread_mutex_lock(&m->check_lock);
	if (!m->check_done || sbx_seconds_since(&m->check_at) >= 1.0) {
		sbx_error_clear(&m->check_err);
		r = sbx_engine_ping(m->engine, &m->check_err);
		if (r < 0 && !m->check_err.code)
			sbx_error_set(&m->check_err, r, "the engine did not answer");
		clock_gettime(CLOCK_MONOTONIC, &m->check_at);
		m->check_done = true;
	}
	r = m->check_err.code;
	if (err && r < 0)
		*err = m->check_err;
	pthread_mutex_unlock(&m->check_lock);
	return r;
}
