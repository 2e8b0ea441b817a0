/* SPDX-License-Identifier: MIT */
/*
 * The usage sampler: what each sandbox's container uses, for metering (the
 * measured service of a cloud). Every sandbox.usage_interval one thread asks
 * the engine for the stats of each ready sandbox, one after another (at most
 * one engine request at a time, however many sandboxes), and rests at least
 * as long as that turn took before the next (a disk figure costs Podman a
 * walk of the image, seconds on a loaded machine, and holds the
 * container's lock meanwhile: turns back to back would starve the calls of
 * the engine), and keeps in the record, under m->lock:
 *   cpu_ns               the container's CPU time (the growth of the engine's
 *                        cgroup count, cpu_seen_ns, from sample to sample);
 *   memory_bytes         the memory in use at the sample;
 *   memory_byte_seconds  memory in use integrated over time: each sample
 *                        counts for the time since the one before, at most
 *                        two intervals (a sandbox not sampled for longer,
 *                        the engine slow, is not charged for the gap);
 *   disk_bytes           the bytes its writable layer held at the disk
 *                        sample (one more request: inspect with its size),
 *   disk_byte_seconds    and those integrated as memory is, from the disk
 *                        samples alone (a failed one leaves disk unknown:
 *                        the stats go on, and the other way round, as on
 *                        rootless Podman on cgroup v1, which has no stats).
 * The growth of each is added to the tenant's counters in /metrics
 * (mcp_sandbox_tenant_cpu_seconds_total, _memory_byte_seconds_total,
 * _disk_byte_seconds_total; mcp_sandbox_tenant_disk_bytes moves with each
 * disk_bytes), and what a sandbox used stays in its tenant's total when it
 * goes (tenant_usage.c): a deletion samples it once more first. A sandbox
 * asleep (sleep.c) holds no memory and no CPU: only its disk is sampled,
 * and the time it slept is not charged as memory held (a wake starts its
 * counts again).
 *
 * The engine's figures are hostile input too (a container's cgroup and
 * files are its own): a CPU count that goes down is not counted again, nor
 * a growth past CPUS_MAX processors busy all the time; memory above the
 * container's limit counts as the limit, and no sample as more than
 * MEMORY_MAX; disk above sandbox.disk (when set) counts as sandbox.disk,
 * and so does a figure the engine layer does not believe (a sparse file
 * counts whole: 5 TB of one is no reason to stop counting).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/clock.h"
#include "sbx/log.h"
#include "sbx/metrics.h"
#include "sbx/worker.h"

/* The most a sample is believed: memory in use, processors busy. */
#define MEMORY_MAX (1ULL << 42)
#define CPUS_MAX 1024u

struct sbx_usage_sampler {
	struct sbx_worker worker; /* with m->lock */
	sbx_manager *m;		  /* its thread's argument (M's pointer to it is
				   * cleared before the stop) */
	int64_t turn_ms;	  /* how long the last turn over all sandboxes took; m->lock */
};

/* The time from one turn's start to the next's: the interval, or the last
 * turn over all sandboxes and as long a rest when that is longer (a slow
 * engine). Under m->lock. */
static int64_t period_locked(sbx_manager *m)
{
	int64_t turn = m->usage ? m->usage->turn_ms : 0, interval = m->s->sandbox.usage_interval_ms;

	return 2 * turn > interval ? 2 * turn : interval;
}

/* The longest gap a sample counts for: two periods. Under m->lock. */
static int64_t gap_max_locked(sbx_manager *m)
{
	return 2 * period_locked(m);
}

/* BYTES (at most MEMORY_MAX) held from *SINCE_MS (0: never) to NOW in
 * byte-seconds, for at most GAP_MAX ms; *SINCE_MS becomes NOW. */
static uint64_t held(uint64_t bytes, int64_t *since_ms, int64_t now, int64_t gap_max)
{
	int64_t dt = *since_ms ? now - *since_ms : 0;

	*since_ms = now;
	if (dt > gap_max)
		dt = gap_max;
	if (bytes > MEMORY_MAX)
		bytes = MEMORY_MAX;
	/* bytes x ms / 1000 < 2^42 x 2^63 / 1000, saturated to 2^64. */
	if (dt <= 0)
		return 0;
	unsigned __int128 v = ((unsigned __int128)bytes * (uint64_t)dt) / 1000;
	return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/* Applies ST, sampled at NOW, to SB; the growth in *RET_CPU_NS and
 * *RET_BYTE_S. Under m->lock. */
static void apply_locked(sbx_manager *m, sbx_sandbox *sb, const struct sbx_stats *st, int64_t now,
			 uint64_t *ret_cpu_ns, uint64_t *ret_byte_s)
{
	uint64_t mem = st->memory_usage_bytes;

	*ret_cpu_ns = 0;
	if (st->memory_limit_bytes && mem > st->memory_limit_bytes)
		mem = st->memory_limit_bytes;
	if (mem > MEMORY_MAX)
		mem = MEMORY_MAX;
	if (st->cpu_total_ns > sb->cpu_seen_ns) {
		/* No more than CPUS_MAX processors busy all the time since the
		 * last sample (or the sandbox's creation): a figure past that is
		 * not counted, only remembered. */
		int64_t since = sb->sampled_ms
				    ? now - sb->sampled_ms
				    : ((int64_t)time(NULL) - (int64_t)sb->created + 1) * 1000;
		uint64_t most = since > 0 ? (uint64_t)since * 1000000u * CPUS_MAX : 0;
		uint64_t grew = st->cpu_total_ns - sb->cpu_seen_ns;
		*ret_cpu_ns = grew <= most ? grew : 0;
		sb->cpu_ns += *ret_cpu_ns;
		sb->cpu_seen_ns = st->cpu_total_ns;
	}
	*ret_byte_s = held(mem, &sb->sampled_ms, now, gap_max_locked(m));
	sb->memory_byte_seconds = sbx_add_sat(sb->memory_byte_seconds, *ret_byte_s);
	sb->memory_bytes = mem;
}

/* Applies BYTES, the writable layer's at NOW, to SB (and to its tenant's
 * gauge while it is in the table); the growth in *RET_BYTE_S. Under m->lock. */
static void apply_disk_locked(sbx_manager *m, sbx_sandbox *sb, uint64_t bytes, int64_t now,
			      uint64_t *ret_byte_s)
{
	int64_t bound = m->s->sandbox.disk;

	if (bound > 0 && bytes > (uint64_t)bound)
		bytes = (uint64_t)bound;
	if (bytes > (uint64_t)SBX_DISK_USAGE_MAX)
		bytes = (uint64_t)SBX_DISK_USAGE_MAX;
	*ret_byte_s = held(bytes, &sb->disk_sampled_ms, now, gap_max_locked(m));
	sb->disk_byte_seconds = sbx_add_sat(sb->disk_byte_seconds, *ret_byte_s);
	if (!sb->removed)
		sbx_metrics_tenant_disk(sb->owner, (int64_t)bytes - (int64_t)sb->disk_bytes);
	sb->disk_bytes = bytes;
	sb->disk_known = true;
}

/* Samples SB; its disk too when ASK_DISK or it has no disk figure yet,
 * else its last figure counts on to now (a deletion: the sized inspect
 * costs 120 ms on Podman). A disk figure the engine layer does not believe
 * (a sparse file of 5 TB counts whole) counts as the most it may be; when
 * the engine does not tell it (it timed out walking a million files, it
 * failed), the last figure counts on. */
static void sample_one(sbx_manager *m, sbx_sandbox *sb, bool ask_disk)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_stats st = {0};
	uint64_t cpu_ns = 0, byte_s = 0, disk_s = 0;
	int64_t disk = -1;
	int64_t now;
	uint64_t run;
	bool stats, known;
	int r;

	if (!sb->container)
		return; /* gone */
	pthread_mutex_lock(&m->lock);
	known = sb->disk_known;
	run = sbx_sandbox_run_locked(sb);
	pthread_mutex_unlock(&m->lock);
	/* Either may fail (the engine did not answer, has none): the next turn.
	 * Asleep, it uses no memory and no CPU: only its disk is sampled. */
	stats = run != UINT64_MAX && sbx_container_stats(m->engine, sb->container, &st, &err) >= 0;
	/* Asleep, its disk does not change: the last figure counts on. */
	r = (ask_disk && run != UINT64_MAX) || !known
		? sbx_container_disk_usage(m->engine, sb->container, &disk, NULL)
		: -EAGAIN;
	if (r == -ERANGE)
		disk = m->s->sandbox.disk > 0 ? m->s->sandbox.disk : SBX_DISK_USAGE_MAX;
	else if (r < 0)
		disk = -1;
	pthread_mutex_lock(&m->lock);
	now = sbx_monotonic_ms();
	if (disk < 0 && sb->disk_known)
		disk = (int64_t)sb->disk_bytes;
	/* Stats of a run of its container that ended meanwhile (it was put to
	 * sleep, or woken: its counts start from 0 again) are not counted. */
	if (stats && sbx_sandbox_run_locked(sb) == run)
		apply_locked(m, sb, &st, now, &cpu_ns, &byte_s);
	if (disk >= 0)
		apply_disk_locked(m, sb, (uint64_t)disk, now, &disk_s);
	pthread_mutex_unlock(&m->lock);
	sbx_metrics_tenant_usage(sb->owner, cpu_ns / 1000, byte_s, disk_s);
}

void sbx_usage_sample(sbx_manager *m, sbx_sandbox *sb)
{
	bool on;

	pthread_mutex_lock(&m->lock);
	on = m->usage != NULL;
	pthread_mutex_unlock(&m->lock);
	if (on)
		sample_one(m, sb, false);
}

static void *sampler_main(void *arg)
{
	struct sbx_usage_sampler *u = arg;
	sbx_manager *m = u->m;

	pthread_mutex_lock(&m->lock);
	while (!sbx_worker_stopping(&u->worker)) {
		int64_t start = sbx_monotonic_ms(), next;
		sbx_sandbox **batch = m->n ? calloc(m->n, sizeof(*batch)) : NULL;
		size_t n = 0;

		for (size_t i = 0; batch && i < m->n; i++)
			if (m->table[i]->ready && m->table[i]->end == SBX_END_NONE &&
			    m->table[i]->death == SBX_DEATH_NONE)
				batch[n++] = sbx_sandbox_ref(m->table[i]);
		pthread_mutex_unlock(&m->lock);
		for (size_t i = 0; i < n; i++) {
			bool stop;
			pthread_mutex_lock(&m->lock);
			stop = sbx_worker_stopping(&u->worker);
			pthread_mutex_unlock(&m->lock);
			if (!stop)
				sample_one(m, batch[i], true);
			sbx_sandbox_unref(batch[i]);
		}
		free(batch);
		pthread_mutex_lock(&m->lock);
		u->turn_ms = sbx_monotonic_ms() - start;
		next = start + period_locked(m);
		while (!sbx_worker_stopping(&u->worker) && sbx_monotonic_ms() < next)
			sbx_cond_wait_until(&u->worker.wake, &m->lock, next);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int sbx_usage_start(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_usage_sampler *u;
	int r;

	if (m->s->sandbox.usage_interval_ms <= 0)
		return 0;
	u = calloc(1, sizeof(*u));
	if (!u)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	u->m = m;
	/* Under the lock its readers read it with. */
	pthread_mutex_lock(&m->lock);
	m->usage = u;
	pthread_mutex_unlock(&m->lock);
	r = sbx_worker_start(&u->worker, sampler_main, u);
	if (r < 0) {
		pthread_mutex_lock(&m->lock);
		m->usage = NULL;
		pthread_mutex_unlock(&m->lock);
		free(u);
		return sbx_error_set(err, r, "start the usage sampler's thread: %s", strerror(-r));
	}
	return 0;
}

void sbx_usage_stop(sbx_manager *m)
{
	struct sbx_usage_sampler *u = m->usage;

	if (!u)
		return;
	/* Unhooked first, under the lock its readers hold: none reaches it
	 * once it is freed. Its thread holds its own pointer. */
	pthread_mutex_lock(&m->lock);
	m->usage = NULL;
	pthread_mutex_unlock(&m->lock);
	sbx_worker_stop(&u->worker, &m->lock);
	free(u);
}
