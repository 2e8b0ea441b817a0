/* SPDX-License-Identifier: MIT */
/*
 * The server's metrics, for GET /metrics (src/http/metrics_route.c) in the
 * Prometheus text exposition format, version 0.0.4: counters, gauges and
 * histograms that the layers bump as things happen, one call at each site,
 * kept in one registry for the process (src/base/metrics.c).
 *
 * Cost: an increment finds its series (the label values) in a lock-free
 * open-addressing table and adds with atomics; no lock, no allocation
 * after a series' first use. A series, once made, lives as long as the
 * process.
 *
 * Cardinality: each metric keeps at most SBX_METRICS_SERIES_MAX label sets;
 * what comes after is counted in one series whose every label is
 * SBX_METRICS_OTHER. Tenants are bounded by the keys file, tools by the
 * tool list (the MCP layer names any other tool "unknown"), engine
 * operations by the engine API's routes (ids never go into a label).
 * A label value keeps at most SBX_METRICS_VALUE_MAX bytes; bytes outside
 * printable ASCII become '?'.
 */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include <stdint.h>

#include "sbx/buf.h"

#define SBX_METRICS_SERIES_MAX 4096
#define SBX_METRICS_VALUE_MAX 128
#define SBX_METRICS_OTHER "~other" /* no tenant, tool or outcome is named so */
/* The Content-Type of the text format. */
#define SBX_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Microseconds on CLOCK_MONOTONIC, for durations. */
int64_t sbx_metrics_now_us(void);

/* One tools/call as the audit log has it (src/mcp): OUTCOME ok, error,
 * refused or cancelled; TENANT the session's. Counts
 * mcp_sandbox_tool_calls_total{tool,outcome,tenant} and observes
 * mcp_sandbox_tool_call_duration_seconds{tool}. */
void sbx_metrics_tool_call(const char *tool, const char *outcome, const char *tenant,
			   int64_t duration_us);
/* One request to the engine's API (backends/rest.c): OP names the route
 * ("POST /containers/{id}/start"), OUTCOME ok, client_error (4xx),
 * server_error (5xx), transport_error (no answer) or cancelled. */
void sbx_metrics_engine_request(const char *op, const char *outcome, int64_t duration_us);
/* A sandbox put to sleep (mcp_sandbox_sleeps_total{outcome}: "ok",
 * "error"), and one woken, with how long its wake took
 * (mcp_sandbox_wake_duration_seconds{outcome}). */
void sbx_metrics_sleep(const char *outcome);
void sbx_metrics_wake(const char *outcome, int64_t duration_us);
/* One package install that ended (src/sandbox/packages.c): OUTCOME ok,
 * failed, timeout, out_of_memory, out_of_disk or error (pip did not run). */
void sbx_metrics_install(const char *outcome);
/* N bytes of an artifact sent to a client (src/http/artifact_route.c). */
void sbx_metrics_artifact_bytes(uint64_t n);
/* An artifact download refused past a limit (src/http/artifact_route.c):
 * LIMIT max_downloads or max_downloads_per_ip. */
void sbx_metrics_download_refused(const char *limit);
/* Bytes a tenant's sandbox relay carried (src/egress/egress.c): IN from
 * upstream to the sandbox, OUT from the sandbox upstream. */
void sbx_metrics_egress_bytes(const char *tenant, uint64_t in, uint64_t out);

/* What a tenant's sandboxes used since the last sample
 * (src/sandbox/usage.c): CPU_US microseconds of CPU time,
 * MEMORY_BYTE_SECONDS of memory and DISK_BYTE_SECONDS of disk (their
 * writable layers) held over time. */
void sbx_metrics_tenant_usage(const char *tenant, uint64_t cpu_us, uint64_t memory_byte_seconds,
			      uint64_t disk_byte_seconds);
/* The gauge mcp_sandbox_tenant_disk_bytes{tenant} moves by DELTA bytes: a
 * sandbox's disk sample (new - old), a sandbox gone (- its last). A move
 * down must come after the moves up it undoes (src/sandbox: under the
 * manager's lock). */
void sbx_metrics_tenant_disk(const char *tenant, int64_t delta);

/* Appends every metric of the registry to OUT, each with its # HELP and
 * # TYPE lines (a metric with no series yet: those lines only). 0 or
 * -ENOMEM. */
int sbx_metrics_render(struct sbx_buf *out);

/* The format's pieces, for metrics read at scrape time (gauges): "# HELP
 * NAME HELP\n# TYPE NAME TYPE\n" (HELP escaped), and one sample
 * "NAME{L1="V1",...} VALUE\n", LABELS being NULL or name/value pairs ended
 * by a NULL name (values escaped). 0 or -ENOMEM. */
int sbx_metrics_write_family(struct sbx_buf *out, const char *name, const char *type,
			     const char *help);
int sbx_metrics_write_sample(struct sbx_buf *out, const char *name, const char *const *labels,
			     uint64_t value);

#endif
