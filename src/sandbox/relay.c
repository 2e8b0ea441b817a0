/* SPDX-License-Identifier: MIT */
/*
 * A sandbox's egress relay, as its record holds it. The relay itself
 * (src/egress/egress.h) knows no record: this file makes it at the
 * sandbox's first use, from the manager's settings, engine and tenants'
 * lookup and the record's container, id and owner, keeps it in sb->egress
 * (set once, under m->lock; freed with the record, record.c), and turns a
 * failed exec of its start into the sandbox's own error
 * (sbx_sandbox_exec_failed: gone, dead, deleted while the call ran). Lock
 * order: m->lock is never held while the relay's own locks are taken.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "egress/egress.h"
#include "sandbox-internal.h"
#include "sbx/common.h"

void sbx_manager_set_egress_lookup(sbx_manager *m, sbx_egress_lookup_fn fn, void *userdata)
{
	m->egress_lookup = fn;
	m->egress_lookup_ud = userdata;
}

/* SB's relay, or NULL when it never had one. */
static struct sbx_egress *relay_get(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress *e;

	pthread_mutex_lock(&m->lock);
	e = sb->egress;
	pthread_mutex_unlock(&m->lock);
	return e;
}

/* SB's relay, made at its first use (one of two made at once is dropped). */
static struct sbx_egress *relay_of(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	/* The lookup is set once, before any sandbox; the record's fields
	 * were set at its creation: all read without the lock. */
	const struct sbx_egress_config c = {
	    .s = m->s,
	    .engine = m->engine,
	    .container = sb->container,
	    .sandbox_id = sb->id,
	    .owner = sb->owner,
	    .lookup = m->egress_lookup,
	    .lookup_ud = m->egress_lookup_ud,
	};
	struct sbx_egress *e = relay_get(m, sb), *fresh;

	if (e)
		return e;
	fresh = sbx_egress_new(&c, err);
	if (!fresh)
		return NULL;
	pthread_mutex_lock(&m->lock);
	if (!sb->egress)
		sb->egress = SBX_TAKE(fresh);
	e = sb->egress;
	pthread_mutex_unlock(&m->lock);
	sbx_egress_free(fresh, false);
	return e;
}

/* sbx_sandbox_egress_ensure, also giving the relay. */
static int relay_ensure(sbx_manager *m, sbx_sandbox *sb, struct sbx_egress **ret_e, int *ret_port,
			struct sbx_error *err)
{
	struct sbx_egress *e = relay_of(m, sb, err);
	bool exec_failed;
	int port, r;

	if (!e)
		return err ? err->code : -ENOMEM;
	r = sbx_egress_ensure(e, &port, &exec_failed, err);
	if (r < 0)
		return exec_failed ? sbx_sandbox_exec_failed(m, sb, r, err) : r;
	*ret_e = e;
	*ret_port = port;
	return r;
}

int sbx_sandbox_egress_ensure(sbx_manager *m, sbx_sandbox *sb, int *ret_port, struct sbx_error *err)
{
	struct sbx_egress *e;

	return relay_ensure(m, sb, &e, ret_port, err);
}

int sbx_sandbox_egress_pip_env(sbx_manager *m, sbx_sandbox *sb, char ***ret_env,
			       struct sbx_error *err)
{
	struct sbx_egress *e;
	int port, r;

	r = relay_ensure(m, sb, &e, &port, err);
	if (r < 0)
		return r;
	return sbx_egress_pip_env(e, port, ret_env, err);
}

bool sbx_sandbox_egress_ready(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_egress *e;

	if (!sbx_egress_fixed_port(m->s))
		return true;
	/* Cheap when the relay runs: m->lock, then its lock, a flag and a poll(2). */
	e = relay_get(m, sb);
	return e && sbx_egress_running(e);
}

char *sbx_sandbox_egress_for_code(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char *notice = NULL;
	int port;

	if (sbx_sandbox_egress_ready(m, sb))
		return NULL;
	/* Counted as a call: the reaper leaves the sandbox alone meanwhile; a
	 * sandbox that is going is the call's own error to tell. */
	if (sbx_sandbox_begin(sb, NULL) < 0)
		return NULL;
	if (sbx_sandbox_egress_ensure(m, sb, &port, &err) < 0 &&
	    asprintf(&notice,
		     "The package index and sandbox.egress_allow are out of reach for this call: "
		     "%s.",
		     err.msg) < 0)
		notice = NULL;
	sbx_sandbox_end(sb, NULL);
	return notice;
}

void sbx_sandbox_egress_stats(sbx_manager *m, sbx_sandbox *sb, struct sbx_egress_stats *ret)
{
	sbx_egress_stats(relay_get(m, sb), ret);
}
