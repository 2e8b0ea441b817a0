/* SPDX-License-Identifier: MIT */
/*
 * The warm pool and the state folder (include/sbx/sandbox.h says what they
 * are for).
 *
 * The pool is a FIFO of started, never assigned containers, one refill
 * thread per manager and up to sandbox.pool_fill filler threads. Everything
 * here is under m->lock, which is never held across an engine call or a file
 * write: the refill thread reserves what a filler is about to make (a slot
 * of `filling`) so that the limit, stats and recover see it, and starts the
 * filler, which provisions with sbx_container_provision and starts its
 * Python interpreter without the lock, then takes the lock to push the entry
 * (or back off) and give its slot back.
 *
 * Its size: sandbox.pool_size, grown by one (up to sandbox.pool_max) by each
 * create that found no pooled container (a miss), so that the next burst
 * like the last one is served from the pool; back to pool_size once no
 * create missed for sandbox.pool_shrink_after. While creates that missed are
 * making their own containers no filler starts: the engine serves them
 * first (a burst past the pool is as fast as the engine allows), and the
 * pool refills after.
 *
 * The refill thread, in order: removes pooled containers beyond the room
 * left (the pool is off, stopping, shrunk, or assigned sandboxes took the
 * room); tries again to remove the containers whose removal failed
 * (`doomed`: the engine was stopping, say; backing off like the refill);
 * starts fillers (the container, then its Python interpreter, which the
 * entry owns and which moves to the record at assignment) while the pool
 * has started filling, has room, no create that missed is making its own
 * and it is not backing off (0.5 s after a failure, doubling up to 30 s);
 * lists the pooled containers (one engine call) and drops those no longer
 * running, every 30 s and whenever following the engine (re)starts (watch.c:
 * until then no pooled container of an earlier epoch is handed out); else
 * sleeps on `wake`, which fillers signal when they end.
 *
 * The state folder (the instance's lock and one file per assigned pooled
 * sandbox) is state_dir.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define CHECK_EVERY_S 30
#define FILL_MAX 16 /* sandbox.pool_fill's upper bound (src/base/settings.c) */

struct sbx_pool {
	pthread_t thread;
	bool have_thread;
	pthread_cond_t wake;
	bool started;		   /* may fill */
	bool stopping;		   /* sbx_pool_stop was called */
	size_t size;		   /* sandbox.pool_size; 0 = off */
	size_t max;		   /* the most it grows to: at least size */
	size_t grown;		   /* above size now: one per miss, up to max */
	struct timespec shrink_at; /* CLOCK_MONOTONIC: grown falls to 0 */
	size_t fill;		   /* fillers at once: sandbox.pool_fill */
	size_t cold_making;	   /* creates that missed, making their own */
	struct sbx_pool_entry *head;
	size_t n_ready;
	uint64_t pushes; /* entries pushed so far: an entry's `pushed` */
	/* The fillers' ids (a slot of "" is free). */
	size_t n_filling;
	char filling[FILL_MAX][SBX_SANDBOX_ID_MAX + 1];
	unsigned failures_in_row;
	struct timespec retry_at, check_at; /* CLOCK_MONOTONIC */
	uint64_t taken, cold, made, failed;
	uint64_t checked_epoch; /* the epoch of the last check (none: 0) */
	uint64_t died;		/* pooled containers found dead */
	/* Containers out of the pool whose removal failed (the engine was
	 * stopping, say): the refill thread tries again, backing off. */
	struct sbx_pool_entry *doomed;
	unsigned doomed_failures;
	struct timespec doomed_at;
	int last_error;
	struct sbx_state_dir state; /* the instance's; closed when there is none */
	/* Pool sandbox ids recover saw but did not adopt or remove (their
	 * state files stay). */
	char (*seen)[SBX_SANDBOX_ID_MAX + 1];
	size_t n_seen;
};

static void ts_add_ms(struct timespec *ts, long ms)
{
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool ts_reached(const struct timespec *now, const struct timespec *t)
{
	return now->tv_sec > t->tv_sec || (now->tv_sec == t->tv_sec && now->tv_nsec >= t->tv_nsec);
}

/* ---- the pool ---- */

struct sbx_pool_entry *sbx_pool_entry_free(struct sbx_pool_entry *e)
{
	if (e) {
		sbx_interp_free(e->interp);
		free(e->container);
		free(e);
	}
	return NULL;
}

/* Under m->lock: E may be handed out. While the engine's events are
 * followed, only a container seen running in the current epoch; when they
 * are not (the engine is unreachable, or following broke), none. */
static bool trusted_locked(sbx_manager *m, const struct sbx_pool_entry *e)
{
	return !m->watching || (m->engine_followed && e->epoch == m->engine_epoch);
}

/* Under m->lock: some pooled container waits for a check. */
static bool stale_locked(sbx_manager *m)
{
	for (const struct sbx_pool_entry *e = m->pool->head; e; e = e->next)
		if (!trusted_locked(m, e))
			return true;
	return false;
}

/* The containers the pool aims to keep now. */
static size_t target(const struct sbx_pool *p)
{
	return p->size + p->grown < p->max ? p->size + p->grown : p->max;
}

/* Under m->lock: more pooled containers than the pool may keep now. */
static bool excess_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	size_t max = (size_t)m->s->sandbox.max_sandboxes;

	return p->n_ready > 0 && (p->stopping || p->n_ready > target(p) || m->n + p->n_ready > max);
}

/* Under m->lock: the pool may start one more container now. */
static bool wants_one_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	size_t have = p->n_ready + p->n_filling;

	return p->started && !p->stopping && have < target(p) && p->n_filling < p->fill &&
	       p->cold_making == 0 && m->n + have < (size_t)m->s->sandbox.max_sandboxes;
}

/* Under m->lock: E's container is to be removed later. */
static void doom_locked(sbx_manager *m, struct sbx_pool_entry *e)
{
	struct sbx_pool *p = m->pool;

	sbx_interp_free(e->interp);
	e->interp = NULL;
	e->next = p->doomed;
	p->doomed = e;
	pthread_cond_signal(&p->wake);
}

/* Removes E's container (unless GONE already) and frees E; a removal that
 * fails is tried again later. Without m->lock. True when it is done. */
static bool discard(sbx_manager *m, struct sbx_pool_entry *e, bool gone)
{
	int r = gone ? 0 : sbx_container_remove(m->engine, e->container, NULL);

	if (r < 0 && r != -ENOENT) {
		pthread_mutex_lock(&m->lock);
		doom_locked(m, e);
		pthread_mutex_unlock(&m->lock);
		return false;
	}
	sbx_pool_entry_free(e);
	return true;
}

void sbx_pool_discard(sbx_manager *m, struct sbx_pool_entry *e, bool gone)
{
	discard(m, e, gone);
}

/* Under m->lock, dropped around the engine calls: tries the doomed
 * containers again; on a failure backs off (0.5 s doubling to 30 s). */
static void retry_doomed_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *list = p->doomed;
	bool failed = false;
	long ms = BACKOFF_MIN_MS;

	p->doomed = NULL;
	pthread_mutex_unlock(&m->lock);
	while (list) {
		struct sbx_pool_entry *next = list->next;
		failed |= !discard(m, list, false);
		list = next;
	}
	pthread_mutex_lock(&m->lock);
	p->doomed_failures = failed ? p->doomed_failures + 1 : 0;
	for (unsigned i = 1; i < p->doomed_failures && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	clock_gettime(CLOCK_MONOTONIC, &p->doomed_at);
	ts_add_ms(&p->doomed_at, ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS);
}

/* Under m->lock, dropped around the engine call. */
static void drop_oldest_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e = p->head;

	p->head = e->next;
	p->n_ready--;
	pthread_mutex_unlock(&m->lock);
	discard(m, e, false);
	pthread_mutex_lock(&m->lock);
}

static void push_locked(struct sbx_pool *p, struct sbx_pool_entry *e)
{
	struct sbx_pool_entry **at = &p->head;

	while (*at)
		at = &(*at)->next;
	e->next = NULL;
	e->pushed = ++p->pushes;
	*at = e;
	p->n_ready++;
}

/* Under m->lock: a start failed; the next waits 0.5 s, doubling up to 30 s
 * while they fail in a row. */
static void back_off_locked(struct sbx_pool *p, int r)
{
	struct timespec now;
	long ms = BACKOFF_MIN_MS;

	for (unsigned i = 0; i < p->failures_in_row && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	p->last_error = r;
	p->failed++;
	p->failures_in_row++;
	clock_gettime(CLOCK_MONOTONIC, &now);
	p->retry_at = now;
	ts_add_ms(&p->retry_at, ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS);
}

struct filler {
	sbx_manager *m;
	struct sbx_pool_entry *e;
	size_t slot; /* its id's place in p->filling */
};

/* A filler thread: makes F's entry without the lock, then pushes it (or
 * backs off), frees its slot and wakes the refill thread and a stop. */
static void *fill_main(void *arg)
{
	struct filler *f = arg;
	sbx_manager *m = f->m;
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e = f->e;
	struct sbx_error err = SBX_ERROR_INIT;
	int r;

	r = sbx_container_provision(m, e->id, time(NULL), NULL, NULL, m->s->sandbox.memory,
				    m->s->sandbox.nano_cpus, &e->container, &err);
	/* Without an interpreter the entry still serves: the first call
	 * starts one, as for a cold create. */
	if (r >= 0 && sbx_interp_start_pooled(m, e->id, e->container, &e->interp, NULL) < 0)
		e->interp = NULL;
	pthread_mutex_lock(&m->lock);
	p->filling[f->slot][0] = '\0';
	p->n_filling--;
	if (r < 0) {
		back_off_locked(p, r);
		sbx_pool_entry_free(e);
	} else {
		p->last_error = 0;
		p->failures_in_row = 0;
		p->made++;
		if (e->epoch != m->engine_epoch)
			p->checked_epoch = 0; /* made across a change: check it */
		push_locked(p, e); /* excess_locked() trims it if the room went meanwhile */
	}
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&m->lock);
	free(f);
	return NULL;
}

/* Under m->lock: reserves a slot and an id and starts a filler thread
 * (detached: sbx_pool_stop waits for n_filling to reach 0). */
static void start_filler_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_error err = SBX_ERROR_INIT;
	struct filler *f = calloc(1, sizeof(*f));
	struct sbx_pool_entry *e = calloc(1, sizeof(*e));
	pthread_attr_t attr;
	pthread_t t;
	size_t slot = 0;
	int r = f && e ? sbx_sandbox_make_id(e->id, &err) : -ENOMEM;

	while (slot < FILL_MAX && p->filling[slot][0])
		slot++;
	if (r >= 0 && slot == FILL_MAX)
		r = -EAGAIN; /* not reached: n_filling < fill <= FILL_MAX */
	if (r >= 0) {
		*f = (struct filler){m, e, slot};
		e->epoch = m->engine_epoch;
		r = -pthread_attr_init(&attr);
	}
	if (r >= 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		r = -pthread_create(&t, &attr, fill_main, f);
		pthread_attr_destroy(&attr);
	}
	if (r < 0) {
		back_off_locked(p, r);
		sbx_pool_entry_free(e);
		free(f);
		return;
	}
	snprintf(p->filling[slot], sizeof(p->filling[slot]), "%s", e->id);
	p->n_filling++;
}

/* Under m->lock, dropped around the engine calls: drops pooled containers
 * that no longer run. Entries pushed before the list was asked for (give-
 * backs were in it before too) and missing from it are really gone; those a
 * filler pushed since are left for the next check. */
static void check_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, m->instance}, {SBX_LABEL_POOL, "1"}};
	struct sbx_container_summary *cs = NULL;
	struct sbx_pool_entry *dead = NULL, **at;
	uint64_t epoch = m->engine_epoch, pushes = p->pushes;
	size_t n = 0;
	int r;

	pthread_mutex_unlock(&m->lock);
	r = sbx_container_list(m->engine, want, SBX_ARRAY_SIZE(want), &cs, &n, NULL);
	pthread_mutex_lock(&m->lock);
	clock_gettime(CLOCK_MONOTONIC, &p->check_at);
	p->check_at.tv_sec += CHECK_EVERY_S;
	p->checked_epoch = epoch;
	if (r < 0)
		return;
	for (at = &p->head; *at;) {
		struct sbx_pool_entry *e = *at;
		const struct sbx_container_summary *c = sbx_summary_find(cs, n, e->container);
		if (e->pushed > pushes) {
			if (e->epoch < epoch)
				p->checked_epoch = 0; /* made across a change: check again */
			at = &e->next;
			continue;
		}
		if (c && c->running) {
			/* Seen running after this epoch began: it may be handed out. */
			if (e->epoch < epoch)
				e->epoch = epoch;
			at = &e->next;
			continue;
		}
		*at = e->next;
		p->n_ready--;
		p->died++;
		e->next = dead;
		dead = e;
	}
	sbx_container_list_free(cs, n);
	pthread_mutex_unlock(&m->lock);
	while (dead) {
		struct sbx_pool_entry *next = dead->next;
		discard(m, dead, false);
		dead = next;
	}
	pthread_mutex_lock(&m->lock);
}

static void *refill_main(void *arg)
{
	sbx_manager *m = arg;
	struct sbx_pool *p = m->pool;
	struct timespec now;

	pthread_mutex_lock(&m->lock);
	while (!p->stopping) {
		const struct timespec *until = NULL;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (p->grown > 0 && ts_reached(&now, &p->shrink_at))
			p->grown = 0; /* no miss for pool_shrink_after */
		if (excess_locked(m)) {
			drop_oldest_locked(m);
			continue;
		}
		if (p->doomed) {
			if (ts_reached(&now, &p->doomed_at)) {
				retry_doomed_locked(m);
				continue;
			}
			until = &p->doomed_at;
		}
		if (wants_one_locked(m)) {
			if (ts_reached(&now, &p->retry_at)) {
				start_filler_locked(m);
				continue;
			}
			if (!until || !ts_reached(&p->retry_at, until))
				until = &p->retry_at;
		}
		if (p->grown > 0 && (!until || !ts_reached(&p->shrink_at, until)))
			until = &p->shrink_at;
		if (p->n_ready > 0) {
			/* Following the engine (re)started: check before handing out. */
			if (ts_reached(&now, &p->check_at) ||
			    (m->engine_followed && p->checked_epoch != m->engine_epoch &&
			     stale_locked(m))) {
				check_locked(m);
				continue;
			}
			if (!until || !ts_reached(&p->check_at, until))
				until = &p->check_at;
		}
		if (until)
			pthread_cond_timedwait(&p->wake, &m->lock, until);
		else
			pthread_cond_wait(&p->wake, &m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int sbx_pool_new(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_pool *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	p->state = (struct sbx_state_dir)SBX_STATE_DIR_INIT;
	sbx_cond_init_monotonic(&p->wake);
	m->pool = p;
	m->instance = strdup(m->s->server.instance);
	if (!m->instance) {
		sbx_pool_free(m);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	r = sbx_state_dir_open(&p->state, m->s, &m->instance, err);
	if (r < 0) {
		sbx_pool_free(m);
		return r;
	}
	/* Without a state folder a pooled sandbox could not be adopted after a
	 * restart: then the pool only serves servers that remove their
	 * sandboxes on exit. */
	p->size = (size_t)m->s->sandbox.pool_size;
	if (p->state.fd < 0 && !m->s->sandbox.remove_on_exit)
		p->size = 0;
	p->max =
	    (size_t)m->s->sandbox.pool_max > p->size ? (size_t)m->s->sandbox.pool_max : p->size;
	p->fill = (size_t)m->s->sandbox.pool_fill;
	if (p->fill < 1 || p->fill > FILL_MAX)
		p->fill = p->fill < 1 ? 1 : FILL_MAX;
	if (p->size == 0)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &p->check_at);
	p->check_at.tv_sec += CHECK_EVERY_S;
	r = -pthread_create(&p->thread, NULL, refill_main, m);
	if (r < 0) {
		sbx_pool_free(m);
		return sbx_error_set(err, r, "start the pool thread: %s", strerror(-r));
	}
	p->have_thread = true;
	return 0;
}

/* sbx_containers_remove's view of the pool's entries, at its stop. */
static const char *entry_container(void *ctx, size_t i)
{
	return ((struct sbx_pool_entry **)ctx)[i]->container;
}

void sbx_pool_stop(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e, **all;
	size_t n = 0, i = 0;
	bool one_by_one;

	pthread_mutex_lock(&m->lock);
	p->stopping = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
	if (p->have_thread)
		pthread_join(p->thread, NULL);
	p->have_thread = false;
	/* The fillers push what they made (or fail) and end. */
	pthread_mutex_lock(&m->lock);
	while (p->n_filling > 0)
		pthread_cond_wait(&p->wake, &m->lock);
	pthread_mutex_unlock(&m->lock);
	/* The threads are gone and nobody else adds to the pool now (the watch
	 * stopped before). A container whose removal fails now is left to the
	 * next start's recover, which removes pooled containers never assigned. */
	for (e = p->head; e; e = e->next)
		n++;
	for (e = p->doomed; e; e = e->next)
		n++;
	all = calloc(n ? n : 1, sizeof(*all));
	for (e = p->head; all && e; e = e->next)
		all[i++] = e;
	for (e = p->doomed; all && e; e = e->next)
		all[i++] = e;
	one_by_one = !all; /* else they all go here */
	if (all)
		sbx_containers_remove(m->engine, n, entry_container, NULL, all);
	free(all);
	while ((e = p->head)) {
		p->head = e->next;
		p->n_ready--;
		if (one_by_one)
			sbx_container_remove(m->engine, e->container, NULL);
		sbx_pool_entry_free(e);
	}
	while ((e = p->doomed)) {
		p->doomed = e->next;
		if (one_by_one)
			sbx_container_remove(m->engine, e->container, NULL);
		sbx_pool_entry_free(e);
	}
}

void sbx_pool_free(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;

	if (!p)
		return;
	if (p->have_thread)
		sbx_pool_stop(m);
	while (p->head) {
		struct sbx_pool_entry *e = p->head;
		p->head = e->next;
		sbx_pool_entry_free(e);
	}
	while (p->doomed) {
		struct sbx_pool_entry *e = p->doomed;
		p->doomed = e->next;
		sbx_pool_entry_free(e);
	}
	sbx_state_dir_close(&p->state); /* the instance is free for another server */
	free(p->seen);
	pthread_cond_destroy(&p->wake);
	free(p);
	m->pool = NULL;
}

struct sbx_pool_entry *sbx_pool_take_locked(sbx_manager *m, bool *missed)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry **at = &p->head, *e;

	while (*at && !trusted_locked(m, *at))
		at = &(*at)->next;
	e = *at;
	*missed = !e && p->size > 0 && !p->stopping;
	if (!e)
		return NULL;
	*at = e->next;
	p->n_ready--;
	e->next = NULL;
	return e;
}

struct sbx_pool_entry *sbx_pool_unlink_locked(sbx_manager *m, const char *container)
{
	struct sbx_pool *p = m->pool;

	for (struct sbx_pool_entry **at = &p->head; *at; at = &(*at)->next) {
		struct sbx_pool_entry *e = *at;
		if (strcmp(e->container, container) != 0)
			continue;
		*at = e->next;
		p->n_ready--;
		p->died++;
		e->next = NULL;
		pthread_cond_signal(&p->wake);
		return e;
	}
	return NULL;
}

void sbx_pool_recheck_locked(sbx_manager *m)
{
	pthread_cond_signal(&m->pool->wake);
}

void sbx_pool_give_back_locked(sbx_manager *m, struct sbx_pool_entry *e)
{
	struct sbx_pool *p = m->pool;

	e->next = p->head;
	p->head = e;
	p->n_ready++;
	pthread_cond_signal(&p->wake);
}

void sbx_pool_missed_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;

	if (p->size + p->grown < p->max)
		p->grown++;
	clock_gettime(CLOCK_MONOTONIC, &p->shrink_at);
	ts_add_ms(&p->shrink_at, (long)m->s->sandbox.pool_shrink_after_ms);
	p->cold_making++;
}

void sbx_pool_missed_done_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;

	if (p->cold_making > 0)
		p->cold_making--;
	pthread_cond_signal(&p->wake);
}

void sbx_pool_created_locked(sbx_manager *m, bool from_pool)
{
	struct sbx_pool *p = m->pool;

	if (from_pool) {
		p->taken++;
	} else {
		p->cold++;
		p->started = true; /* the engine can run a sandbox */
	}
	pthread_cond_signal(&p->wake);
}

int sbx_pool_assign(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	if (m->pool->state.fd < 0)
		return 0;
	return sbx_state_write(&m->pool->state, sb, err);
}

void sbx_pool_forget(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_pool *p = m->pool;

	if (sb->pooled && p->state.fd >= 0)
		unlinkat(p->state.fd, sb->id, 0);
	pthread_mutex_lock(&m->lock);
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
}

/* Under m->lock: the id is one of this manager's, pooled, being made, or a
 * record (maybe still being assigned). */
static bool own_id_locked(sbx_manager *m, const char *id)
{
	struct sbx_pool *p = m->pool;

	for (size_t i = 0; i < FILL_MAX; i++)
		if (strcmp(p->filling[i], id) == 0)
			return true;
	for (struct sbx_pool_entry *e = p->head; e; e = e->next)
		if (strcmp(e->id, id) == 0)
			return true;
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->table[i]->id, id) == 0)
			return true;
	return false;
}

static int remember_locked(struct sbx_pool *p, const char *id)
{
	void *seen = reallocarray(p->seen, p->n_seen + 1, sizeof(*p->seen));

	if (!seen)
		return -ENOMEM;
	p->seen = seen;
	snprintf(p->seen[p->n_seen++], sizeof(*p->seen), "%s", id);
	return 0;
}

int sbx_pool_recover_one(sbx_manager *m, const char *id, const char *container, char **ret_owner,
			 char **ret_name, time_t *ret_assigned, struct sbx_error *err)
{
	struct sbx_pool *p = m->pool;
	char *owner = NULL, *name = NULL;
	time_t assigned = 0;
	bool own;
	int r;

	if (!sbx_state_id_valid(id))
		return 0;
	pthread_mutex_lock(&m->lock);
	own = own_id_locked(m, id);
	pthread_mutex_unlock(&m->lock);
	if (own)
		return 0;
	if (p->state.fd < 0) {
		/* Unknowable. Gone with the server anyway when remove_on_exit. */
		if (m->s->sandbox.remove_on_exit)
			sbx_container_remove(m->engine, container, NULL);
		return 0;
	}
	r = sbx_state_read(&p->state, id, container, &owner, &name, &assigned, err);
	if (r == -ENOENT) {
		/* Never assigned: nobody's, and maybe from an older image. */
		r = sbx_container_remove(m->engine, container, err);
		return r == -ENOENT ? 0 : r < 0 ? r : 0;
	}
	if (r <= 0) {
		/* Unreadable or untrusted: leave container and file alone. */
		pthread_mutex_lock(&m->lock);
		if (remember_locked(p, id) < 0 && r == 0)
			r = sbx_error_set(err, -ENOMEM, "out of memory");
		pthread_mutex_unlock(&m->lock);
		return r;
	}
	*ret_owner = owner;
	*ret_name = name;
	*ret_assigned = assigned;
	return 1;
}

void sbx_pool_recover_done(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct dirent *de;
	DIR *d = NULL;
	int fd;

	if (p->state.fd >= 0) {
		fd = openat(p->state.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d && fd >= 0)
			close(fd);
	}
	while (d && (de = readdir(d))) {
		char id[SBX_SANDBOX_ID_MAX + 1];
		const char *n = de->d_name;
		size_t len = strlen(n);
		bool keep = false;

		if (n[0] == '.' && len > 5 && strcmp(n + len - 4, ".tmp") == 0 &&
		    len - 5 <= SBX_SANDBOX_ID_MAX) {
			memcpy(id, n + 1, len - 5);
			id[len - 5] = '\0';
		} else if (len <= SBX_SANDBOX_ID_MAX) {
			memcpy(id, n, len + 1);
		} else {
			continue;
		}
		if (!sbx_state_id_valid(id))
			continue;
		pthread_mutex_lock(&m->lock);
		keep = own_id_locked(m, id);
		for (size_t i = 0; i < p->n_seen && !keep; i++)
			keep = strcmp(p->seen[i], id) == 0;
		pthread_mutex_unlock(&m->lock);
		if (!keep)
			unlinkat(p->state.fd, n, 0);
	}
	if (d)
		closedir(d);
	pthread_mutex_lock(&m->lock);
	free(p->seen);
	p->seen = NULL;
	p->n_seen = 0;
	p->started = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
}

/* Under m->lock: the pooled containers that may be handed out now. */
static size_t trusted_count_locked(sbx_manager *m)
{
	size_t n = 0;

	for (const struct sbx_pool_entry *e = m->pool->head; e; e = e->next)
		n += trusted_locked(m, e);
	return n;
}

void sbx_manager_pool_stats(sbx_manager *m, struct sbx_pool_stats *ret_stats)
{
	struct sbx_pool *p = m->pool;

	pthread_mutex_lock(&m->lock);
	*ret_stats = (struct sbx_pool_stats){
	    .size = target(p),
	    .floor = p->size,
	    .max = p->max,
	    .ready = trusted_count_locked(m),
	    .filling = p->n_filling,
	    .making_own = p->cold_making,
	    .filling_on = p->started && p->size > 0,
	    .taken = p->taken,
	    .cold = p->cold,
	    .made = p->made,
	    .failures = p->failed,
	    .last_error = p->last_error,
	    .died = p->died,
	    .followed = m->engine_followed,
	};
	pthread_mutex_unlock(&m->lock);
}

const char *sbx_manager_state_dir(const sbx_manager *m)
{
	return m->pool->state.path;
}

const char *sbx_manager_instance(const sbx_manager *m)
{
	return m->instance;
}
