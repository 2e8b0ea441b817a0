/* SPDX-License-Identifier: MIT */
/*
 * A sandbox's removal (sbx_sandbox_remove_marked, for delete_sandbox and
 * the reaper): its container, then its record out of the manager's table,
 * and the table of sandboxes gone lately that remembers it, so that a
 * later call can say it was deleted or expired.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egress/egress.h"
#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/metrics.h"

/* The table of sandboxes gone lately: at most GONE_PER_OWNER per owner and
 * GONE_MAX in all, each for GONE_KEEP_MS. */
#define GONE_MAX 4096
#define GONE_PER_OWNER 256
#define GONE_KEEP_MS (3600 * INT64_C(1000))

static void gone_drop_locked(sbx_manager *m, size_t i)
{
	free(m->gone[i].name);
	free(m->gone[i].owner);
	memmove(m->gone + i, m->gone + i + 1, (m->n_gone - i - 1) * sizeof(*m->gone));
	m->n_gone--;
}

/* Under m->lock. Forgets what is older than GONE_KEEP_MS. */
static void gone_expire_locked(sbx_manager *m)
{
	int64_t now = sbx_monotonic_ms();

	while (m->n_gone > 0 && now - m->gone[0].at_ms > GONE_KEEP_MS)
		gone_drop_locked(m, 0);
}

/* Under m->lock. Remembers that SB is gone (best effort: nothing on
 * -ENOMEM). */
static void gone_add_locked(sbx_manager *m, const sbx_sandbox *sb)
{
	size_t mine = 0, oldest_mine = 0;
	struct sbx_gone g = {.end = sb->end, .when = sb->end_at, .at_ms = sbx_monotonic_ms()};
	void *t;

	gone_expire_locked(m);
	for (size_t i = m->n_gone; i-- > 0;)
		if (strcmp(m->gone[i].owner, sb->owner) == 0) {
			mine++;
			oldest_mine = i;
		}
	if (mine >= GONE_PER_OWNER)
		gone_drop_locked(m, oldest_mine);
	else if (m->n_gone >= GONE_MAX)
		gone_drop_locked(m, 0);
	snprintf(g.id, sizeof(g.id), "%s", sb->id);
	g.name = strdup(sb->name);
	g.owner = strdup(sb->owner);
	t = reallocarray(m->gone, m->n_gone + 1, sizeof(*m->gone));
	if (!g.name || !g.owner || !t) {
		free(g.name);
		free(g.owner);
		if (t)
			m->gone = t;
		return;
	}
	m->gone = t;
	m->gone[m->n_gone++] = g;
}

/* Under m->lock. OWNER's latest gone sandbox with that id, else with that
 * name; NULL when there is none. */
const struct sbx_gone *sbx_gone_find_locked(sbx_manager *m, const char *owner,
					    const char *id_or_name)
{
	gone_expire_locked(m);
	for (size_t i = m->n_gone; i-- > 0;)
		if (strcmp(m->gone[i].owner, owner) == 0 && strcmp(m->gone[i].id, id_or_name) == 0)
			return &m->gone[i];
	for (size_t i = m->n_gone; i-- > 0;)
		if (strcmp(m->gone[i].owner, owner) == 0 &&
		    strcmp(m->gone[i].name, id_or_name) == 0)
			return &m->gone[i];
	return NULL;
}

void sbx_gone_free(sbx_manager *m)
{
	while (m->n_gone > 0)
		gone_drop_locked(m, m->n_gone - 1);
	free(m->gone);
	m->gone = NULL;
}

/* Under m->lock. Takes sb out of the table and returns the table's
 * reference (NULL when it was not there). */
sbx_sandbox *sbx_table_remove_locked(sbx_manager *m, sbx_sandbox *sb)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->table[i] != sb)
			continue;
		memmove(m->table + i, m->table + i + 1, (m->n - i - 1) * sizeof(*m->table));
		m->n--;
		sb->removed = true;
		{ /* what it used stays in its tenant's total */
			struct sbx_tenant_usage u = {.cpu_ns = sb->cpu_ns,
						     .memory_byte_seconds = sb->memory_byte_seconds,
						     .disk_byte_seconds = sb->disk_byte_seconds};
			sbx_metrics_tenant_disk(sb->owner, -(int64_t)sb->disk_bytes);
			if (sb->egress)
				sbx_egress_bytes(sb->egress, &u.egress_bytes_in,
						 &u.egress_bytes_out);
			sbx_tenant_gone_add(m, sb->owner, &u);
		}
		return sb;
	}
	return NULL;
}

int sbx_sandbox_remove_marked(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	int r;

	sbx_usage_sample(m, sb); /* its last figures go to its tenant's total */
	r = sbx_container_remove(m->engine, sb->container, err);

	pthread_mutex_lock(&m->lock);
	if (r < 0 && r != -ENOENT) {
		sb->end = SBX_END_NONE; /* still there: usable again */
	} else {
		gone_add_locked(m, sb);
		sbx_sandbox_unref(sbx_table_remove_locked(m, sb));
		r = 0;
	}
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		return sbx_error_prefix(err, "remove sandbox %s", sb->id);
	sbx_pool_forget(m, sb);
	return 0;
}
