/* SPDX-License-Identifier: MIT */
/*
 * The sandbox record's own life: made (sbx_record_new), shared by
 * reference (sbx_sandbox_ref, sbx_sandbox_unref) and freed with the last
 * reference, with what it owns: its install records, its interpreter and
 * its egress relay. Above those it frees (interp.c, src/egress), below the
 * files that hold references (files.c, packages.c, usage.c, the manager).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egress/egress.h"
#include "sandbox-internal.h"
#include "sbx/clock.h"

sbx_sandbox *sbx_record_free(sbx_sandbox *sb)
{
	if (!sb)
		return NULL;
	free(sb->name);
	free(sb->owner);
	free(sb->container);
	free(sb->image);
	sbx_install_list_free(sb->installs);
	sbx_interp_free(sb->interp);
	sbx_readers_free(sb->readers);
	/* Read without the lock: nothing else holds the record now. */
	sbx_egress_free(sb->egress, sb->end == SBX_END_NONE && sb->death == SBX_DEATH_NONE);
	free(sb);
	return NULL;
}

sbx_sandbox *sbx_sandbox_ref(sbx_sandbox *sb)
{
	if (sb)
		__atomic_add_fetch(&sb->refs, 1, __ATOMIC_RELAXED);
	return sb;
}

sbx_sandbox *sbx_sandbox_unref(sbx_sandbox *sb)
{
	if (sb && __atomic_sub_fetch(&sb->refs, 1, __ATOMIC_ACQ_REL) == 0)
		sbx_record_free(sb);
	return NULL;
}

const char *sbx_sandbox_id(const sbx_sandbox *sb)
{
	return sb->id;
}

const char *sbx_sandbox_name(const sbx_sandbox *sb)
{
	return sb->name;
}

sbx_sandbox *sbx_record_new(sbx_manager *m, const char *id, const char *name, const char *owner,
			    time_t created)
{
	sbx_sandbox *sb = calloc(1, sizeof(*sb));

	if (!sb)
		return NULL;
	sb->refs = 1;
	sb->m = m;
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	sb->name = strdup(name ? name : id);
	sb->owner = strdup(owner);
	sb->image = strdup(m->s->sandbox.image);
	sb->created = created;
	sb->memory = m->s->sandbox.memory;
	sb->nano_cpus = m->s->sandbox.nano_cpus;
	/* Used now: a new sandbox, or one adopted after a restart (its last use
	 * before is not kept: it gets a full sandbox.idle_timeout). */
	sb->last_used = time(NULL);
	sb->used_ms = sbx_monotonic_ms();
	if (!sb->name || !sb->owner || !sb->image)
		return sbx_record_free(sb);
	return sb;
}

void sbx_install_list_free(struct sbx_install *list)
{
	while (list) {
		struct sbx_install *next = list->next;
		free(list->spec);
		free(list->version);
		free(list->log_tail);
		free(list);
		list = next;
	}
}
