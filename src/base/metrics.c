/* SPDX-License-Identifier: MIT */
/*
 * The metrics registry (include/sbx/metrics.h): a fixed set of metrics,
 * each a lock-free open-addressing table of series keyed by their label
 * text as it is written out (`tool="x",outcome="ok"`).
 *
 * A table has twice SBX_METRICS_SERIES_MAX slots; a slot goes from NULL to
 * a series once (compare-and-swap) and never back, so a lookup needs no
 * lock and always finds a free slot while the count is under the cap. A
 * new series reserves its place in the count before it takes a slot; past
 * the cap it goes to the metric's overflow series (every label
 * SBX_METRICS_OTHER). Histograms keep per-bucket counts (cumulated when
 * written, so a scrape's buckets and _count agree) and their sum in
 * microseconds.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbx/common.h"
#include "sbx/metrics.h"

#define SLOTS (2 * SBX_METRICS_SERIES_MAX)
#define LABELS_MAX 3
#define BUCKETS_MAX 16
/* The longest label text: every value escaped (2 bytes a byte at worst). */
#define KEY_MAX (LABELS_MAX * (32 + 2 * SBX_METRICS_VALUE_MAX))

enum kind { COUNTER, GAUGE, HISTOGRAM };

struct bound {
	int64_t us;
	const char *le;
};

struct series {
	/* a counter's value; a gauge's (its moves added, wrapping: never
	 * below 0 when each move is counted before the one that undoes it);
	 * a histogram's sum (us) */
	_Atomic uint64_t value;
	_Atomic uint64_t buckets[BUCKETS_MAX];
	char key[]; /* the label text */
};

struct metric {
	const char *name;
	const char *help;
	enum kind kind;
	const char *labels[LABELS_MAX + 1]; /* NULL-ended */
	const struct bound *bounds;	    /* HISTOGRAM: ascending; +Inf after them */
	bool micro;			    /* COUNTER: kept in millionths, written as a decimal */
	size_t n_bounds;
	_Atomic(struct series *) slots[SLOTS];
	atomic_size_t n;
	_Atomic(struct series *) overflow;
};

static const struct bound call_bounds[] = {
    {5000, "0.005"},  {10000, "0.01"},	{25000, "0.025"}, {50000, "0.05"},    {100000, "0.1"},
    {250000, "0.25"}, {500000, "0.5"},	{1000000, "1"},	  {2500000, "2.5"},   {5000000, "5"},
    {10000000, "10"}, {30000000, "30"}, {60000000, "60"}, {120000000, "120"}, {300000000, "300"},
};

static const struct bound engine_bounds[] = {
    {1000, "0.001"},  {2500, "0.0025"}, {5000, "0.005"},  {10000, "0.01"},  {25000, "0.025"},
    {50000, "0.05"},  {100000, "0.1"},	{250000, "0.25"}, {500000, "0.5"},  {1000000, "1"},
    {2500000, "2.5"}, {5000000, "5"},	{10000000, "10"}, {30000000, "30"}, {60000000, "60"},
};

static struct metric tool_calls = {
    .name = "mcp_sandbox_tool_calls_total",
    .help = "Tool calls (tools/call) by tool, outcome (ok, error, refused, cancelled; as the "
	    "audit log has it) and tenant.",
    .kind = COUNTER,
    .labels = {"tool", "outcome", "tenant", NULL},
};
static struct metric tool_duration = {
    .name = "mcp_sandbox_tool_call_duration_seconds",
    .help = "How long tool calls took, by tool.",
    .kind = HISTOGRAM,
    .labels = {"tool", NULL},
    .bounds = call_bounds,
    .n_bounds = SBX_ARRAY_SIZE(call_bounds),
};
static struct metric engine_requests = {
    .name = "mcp_sandbox_engine_requests_total",
    .help = "Requests to the container engine's API, by operation and outcome (ok, "
	    "client_error, server_error, transport_error, cancelled).",
    .kind = COUNTER,
    .labels = {"op", "outcome", NULL},
};
static struct metric engine_duration = {
    .name = "mcp_sandbox_engine_request_duration_seconds",
    .help = "How long requests to the container engine's API took, by operation (a streamed "
	    "reply until its end; an exec's attach until its stream opened).",
    .kind = HISTOGRAM,
    .labels = {"op", NULL},
    .bounds = engine_bounds,
    .n_bounds = SBX_ARRAY_SIZE(engine_bounds),
};
static struct metric installs = {
    .name = "mcp_sandbox_installs_total",
    .help = "Package installs that ended, by outcome (ok, failed, timeout, out_of_memory, "
	    "out_of_disk, error).",
    .kind = COUNTER,
    .labels = {"outcome", NULL},
};
static struct metric artifact_bytes = {
    .name = "mcp_sandbox_artifact_bytes_total",
    .help = "Bytes of artifacts (files of sandboxes behind links) sent to clients.",
    .kind = COUNTER,
    .labels = {NULL},
};
static struct metric downloads_refused = {
    .name = "mcp_sandbox_artifact_downloads_refused_total",
    .help = "Artifact downloads refused with 503, by the limit reached (max_downloads, "
	    "max_downloads_per_ip).",
    .kind = COUNTER,
    .labels = {"limit", NULL},
};
static struct metric egress_bytes = {
    .name = "mcp_sandbox_egress_bytes_total",
    .help = "Bytes the egress relays of a tenant's sandboxes carried, by direction (in: to "
	    "the sandbox, out: from it).",
    .kind = COUNTER,
    .labels = {"tenant", "direction", NULL},
};

static struct metric tenant_cpu = {
    .name = "mcp_sandbox_tenant_cpu_seconds_total",
    .help = "CPU time the containers of a tenant's sandboxes used, as the engine's samples "
	    "tell (every sandbox.usage_interval).",
    .kind = COUNTER,
    .labels = {"tenant", NULL},
    .micro = true,
};
static struct metric tenant_memory = {
    .name = "mcp_sandbox_tenant_memory_byte_seconds_total",
    .help = "Memory the containers of a tenant's sandboxes held, integrated over time "
	    "(bytes x seconds, from the engine's samples).",
    .kind = COUNTER,
    .labels = {"tenant", NULL},
};

static struct metric tenant_disk_seconds = {
    .name = "mcp_sandbox_tenant_disk_byte_seconds_total",
    .help = "Bytes the containers of a tenant's sandboxes held in their writable layers, "
	    "integrated over time (bytes x seconds, from the engine's samples).",
    .kind = COUNTER,
    .labels = {"tenant", NULL},
};
static struct metric tenant_disk = {
    .name = "mcp_sandbox_tenant_disk_bytes",
    .help = "Bytes the writable layers of a tenant's sandboxes held at their last samples "
	    "(the sandboxes that exist now).",
    .kind = GAUGE,
    .labels = {"tenant", NULL},
};

static struct metric sleeps = {
    .name = "mcp_sandbox_sleeps_total",
    .help = "Sandboxes put to sleep (idle: their containers stopped, their files kept), by "
	    "outcome (ok, error).",
    .kind = COUNTER,
    .labels = {"outcome", NULL},
};
static struct metric wake_duration = {
    .name = "mcp_sandbox_wake_duration_seconds",
    .help = "How long waking a sleeping sandbox took (its container started again, the call "
	    "then runs), by outcome (ok, error); _count is the number of wakes.",
    .kind = HISTOGRAM,
    .labels = {"outcome", NULL},
    .bounds = engine_bounds,
    .n_bounds = SBX_ARRAY_SIZE(engine_bounds),
};

static struct metric *const metrics[] = {
    &tool_calls,	  &tool_duration,     &engine_requests, &engine_duration, &installs,
    &artifact_bytes,	  &downloads_refused, &egress_bytes,	&tenant_cpu,	  &tenant_memory,
    &tenant_disk_seconds, &tenant_disk,	      &sleeps,		&wake_duration,
};

int64_t sbx_metrics_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the text format ---- */

/* Appends S (at most MAX bytes of it) escaped: a label value's \\ \" \n,
 * or HELP's \\ \n (QUOTES false); bytes outside printable ASCII as '?'. */
static size_t escape(char *out, const char *s, size_t max, bool quotes)
{
	size_t k = 0;

	for (size_t i = 0; s && s[i] && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\' || (quotes && c == '"')) {
			out[k++] = '\\';
			out[k++] = (char)c;
		} else if (c == '\n') {
			out[k++] = '\\';
			out[k++] = 'n';
		} else {
			out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
		}
	}
	out[k] = '\0';
	return k;
}

/* The label text of VALUES (one per label of M) into KEY (KEY_MAX bytes). */
static void key_of(const struct metric *m, const char *const *values, char *key)
{
	size_t k = 0;

	key[0] = '\0';
	for (size_t i = 0; m->labels[i]; i++) {
		k += (size_t)snprintf(key + k, KEY_MAX - k, "%s%s=\"", i ? "," : "", m->labels[i]);
		k += escape(key + k, values[i] ? values[i] : "", SBX_METRICS_VALUE_MAX, true);
		key[k++] = '"';
		key[k] = '\0';
	}
}

static struct series *series_new(const char *key)
{
	size_t len = strlen(key);
	struct series *s = calloc(1, sizeof(*s) + len + 1);

	if (s)
		memcpy(s->key, key, len + 1);
	return s;
}

/* M's overflow series (every label SBX_METRICS_OTHER), made at first use. */
static struct series *overflow_of(struct metric *m)
{
	struct series *s = atomic_load(&m->overflow), *mine, *none = NULL;
	const char *others[LABELS_MAX] = {SBX_METRICS_OTHER, SBX_METRICS_OTHER, SBX_METRICS_OTHER};
	char key[KEY_MAX];

	if (s)
		return s;
	key_of(m, others, key);
	mine = series_new(key);
	if (!mine)
		return NULL;
	if (atomic_compare_exchange_strong(&m->overflow, &none, mine))
		return mine;
	free(mine);
	return none;
}

/* The series of VALUES in M, made when new; NULL without memory (the
 * increment is lost). */
static struct series *series_of(struct metric *m, const char *const *values)
{
	char key[KEY_MAX];
	uint32_t h = 2166136261u; /* FNV-1a */
	struct series *mine = NULL;
	bool reserved = false;

	key_of(m, values, key);
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	for (size_t i = h % SLOTS, probes = 0; probes < SLOTS; i = (i + 1) % SLOTS, probes++) {
		struct series *s = atomic_load_explicit(&m->slots[i], memory_order_acquire);
		if (s && strcmp(s->key, key) == 0) {
			free(mine);
			if (reserved)
				atomic_fetch_sub(&m->n, 1);
			return s;
		}
		if (s)
			continue;
		if (!reserved) {
			if (atomic_fetch_add(&m->n, 1) >= SBX_METRICS_SERIES_MAX) {
				atomic_fetch_sub(&m->n, 1);
				return overflow_of(m);
			}
			reserved = true;
		}
		if (!mine && !(mine = series_new(key))) {
			atomic_fetch_sub(&m->n, 1);
			return NULL;
		}
		if (atomic_compare_exchange_strong(&m->slots[i], &s, mine))
			return mine;
		/* Another thread took the slot: its series may be ours. */
		if (strcmp(s->key, key) == 0) {
			free(mine);
			atomic_fetch_sub(&m->n, 1);
			return s;
		}
	}
	/* Not reached: the count stays under the cap, half the slots. */
	free(mine);
	if (reserved)
		atomic_fetch_sub(&m->n, 1);
	return overflow_of(m);
}

static void count(struct metric *m, const char *const *values, uint64_t n)
{
	struct series *s = series_of(m, values);

	if (s)
		atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed);
}

static void observe(struct metric *m, const char *const *values, int64_t us)
{
	struct series *s = series_of(m, values);
	size_t b = 0;

	if (!s)
		return;
	if (us < 0)
		us = 0;
	while (b < m->n_bounds && us > m->bounds[b].us)
		b++;
	atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->value, (uint64_t)us, memory_order_relaxed);
}

/* ---- the sites ---- */

void sbx_metrics_tool_call(const char *tool, const char *outcome, const char *tenant,
			   int64_t duration_us)
{
	const char *v[] = {tool, outcome, tenant};

	count(&tool_calls, v, 1);
	observe(&tool_duration, v, duration_us);
}

void sbx_metrics_engine_request(const char *op, const char *outcome, int64_t duration_us)
{
	const char *v[] = {op, outcome};

	count(&engine_requests, v, 1);
	observe(&engine_duration, v, duration_us);
}

void sbx_metrics_sleep(const char *outcome)
{
	count(&sleeps, &outcome, 1);
}

void sbx_metrics_wake(const char *outcome, int64_t duration_us)
{
	observe(&wake_duration, &outcome, duration_us);
}

void sbx_metrics_install(const char *outcome)
{
	count(&installs, &outcome, 1);
}

void sbx_metrics_artifact_bytes(uint64_t n)
{
	count(&artifact_bytes, NULL, n);
}

void sbx_metrics_download_refused(const char *limit)
{
	const char *v[] = {limit};

	count(&downloads_refused, v, 1);
}

void sbx_metrics_egress_bytes(const char *tenant, uint64_t in, uint64_t out)
{
	const char *vin[] = {tenant, "in"}, *vout[] = {tenant, "out"};

	if (in)
		count(&egress_bytes, vin, in);
	if (out)
		count(&egress_bytes, vout, out);
}

void sbx_metrics_tenant_usage(const char *tenant, uint64_t cpu_us, uint64_t memory_byte_seconds,
			      uint64_t disk_byte_seconds)
{
	const char *v[] = {tenant};

	if (cpu_us)
		count(&tenant_cpu, v, cpu_us);
	if (memory_byte_seconds)
		count(&tenant_memory, v, memory_byte_seconds);
	if (disk_byte_seconds)
		count(&tenant_disk_seconds, v, disk_byte_seconds);
}

void sbx_metrics_tenant_disk(const char *tenant, int64_t delta)
{
	const char *v[] = {tenant};

	if (delta)
		count(&tenant_disk, v, (uint64_t)delta); /* two's complement: a move down */
}

/* ---- writing ---- */

int sbx_metrics_write_family(struct sbx_buf *out, const char *name, const char *type,
			     const char *help)
{
	char text[2 * 512 + 1];

	escape(text, help, 512, false);
	return sbx_buf_appendf(out, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

int sbx_metrics_write_sample(struct sbx_buf *out, const char *name, const char *const *labels,
			     uint64_t value)
{
	char v[2 * SBX_METRICS_VALUE_MAX + 1];
	int r = sbx_buf_appendf(out, "%s", name);

	for (size_t i = 0; r == 0 && labels && labels[i]; i += 2) {
		escape(v, labels[i + 1], SBX_METRICS_VALUE_MAX, true);
		r = sbx_buf_appendf(out, "%s%s=\"%s\"", i ? "," : "{", labels[i], v);
	}
	if (r == 0 && labels && labels[0])
		r = sbx_buf_append(out, "}", 1);
	if (r == 0)
		r = sbx_buf_appendf(out, " %llu\n", (unsigned long long)value);
	return r;
}

/* NAME{KEY[,EXTRA]} or NAME{EXTRA} or NAME, as the labels are. */
static int write_name(struct sbx_buf *out, const char *name, const char *suffix, const char *key,
		      const char *extra)
{
	bool any = key[0] || extra;

	return sbx_buf_appendf(out, "%s%s%s%s%s%s%s", name, suffix, any ? "{" : "", key,
			       key[0] && extra ? "," : "", extra ? extra : "", any ? "}" : "");
}

static int write_series(struct sbx_buf *out, const struct metric *m, struct series *s)
{
	uint64_t total = 0;
	char le[48];
	int r = 0;

	if (m->kind != HISTOGRAM) {
		uint64_t v = atomic_load(&s->value);
		/* A gauge's moves wrap: one below 0 (a move up lost, out of
		 * memory) shows as 0, not as 1.8e19. */
		if (m->kind == GAUGE && v > INT64_MAX)
			v = 0;
		r = write_name(out, m->name, "", s->key, NULL);
		if (r == 0 && m->micro)
			return sbx_buf_appendf(out, " %llu.%06llu\n",
					       (unsigned long long)(v / 1000000),
					       (unsigned long long)(v % 1000000));
		return r ? r : sbx_buf_appendf(out, " %llu\n", (unsigned long long)v);
	}
	for (size_t b = 0; r == 0 && b <= m->n_bounds; b++) {
		total += atomic_load_explicit(&s->buckets[b], memory_order_relaxed);
		snprintf(le, sizeof(le), "le=\"%s\"", b < m->n_bounds ? m->bounds[b].le : "+Inf");
		r = write_name(out, m->name, "_bucket", s->key, le);
		if (r == 0)
			r = sbx_buf_appendf(out, " %llu\n", (unsigned long long)total);
	}
	if (r == 0)
		r = write_name(out, m->name, "_sum", s->key, NULL);
	if (r == 0) {
		uint64_t us = atomic_load_explicit(&s->value, memory_order_relaxed);
		r = sbx_buf_appendf(out, " %llu.%06llu\n", (unsigned long long)(us / 1000000),
				    (unsigned long long)(us % 1000000));
	}
	if (r == 0)
		r = write_name(out, m->name, "_count", s->key, NULL);
	if (r == 0)
		r = sbx_buf_appendf(out, " %llu\n", (unsigned long long)total);
	return r;
}

int sbx_metrics_render(struct sbx_buf *out)
{
	int r = 0;

	for (size_t i = 0; r == 0 && i < SBX_ARRAY_SIZE(metrics); i++) {
		struct metric *m = metrics[i];
		struct series *o;
		r = sbx_metrics_write_family(out, m->name,
					     m->kind == COUNTER ? "counter"
					     : m->kind == GAUGE ? "gauge"
								: "histogram",
					     m->help);
		for (size_t k = 0; r == 0 && k < SLOTS; k++) {
			struct series *s = atomic_load_explicit(&m->slots[k], memory_order_acquire);
			if (s)
				r = write_series(out, m, s);
		}
		o = atomic_load(&m->overflow);
		if (r == 0 && o)
			r = write_series(out, m, o);
	}
	return r;
}
