/* SPDX-License-Identifier: MIT */
/* What the C benches share: a clock in milliseconds and a sorted sample's
 * quantile. Header only (each bench is one program). */
#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

static inline double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The Q-quantile (0..1) of the N values of V, which it sorts; 0 when N is 0. */
static inline double quantile(double *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* TLS for tcp:// endpoints from MCP_SANDBOX_TLS_DIR (ca.pem, cert.pem,
 * key.pem: tools/provision-engines' swarm has a node reached so): into
 * CFG, and into S when not NULL. 0 (nothing when it is not set), or
 * sbx_settings_set's error. */
static inline int bench_tls(struct sbx_engine_config *cfg, struct sbx_settings *s,
			    struct sbx_error *err)
{
	static const char *const files[] = {"ca.pem", "cert.pem", "key.pem"};
	static const char *const keys[] = {"tls_ca", "tls_cert", "tls_key"};
	static char path[3][512];
	static struct sbx_engine_tls tls;
	const char *dir = getenv("MCP_SANDBOX_TLS_DIR");

	if (!dir || !*dir)
		return 0;
	for (int i = 0; i < 3; i++) {
		char line[2048];
		snprintf(path[i], sizeof(path[i]), "%s/%s", dir, files[i]);
		snprintf(line, sizeof(line), "engine.%s=%s", keys[i], path[i]);
		if (s && sbx_settings_set(s, line, err) < 0)
			return -1;
	}
	tls = (struct sbx_engine_tls){path[0], path[1], path[2]};
	cfg->tls = &tls;
	return 0;
}

/* The engine of TYPE at the unix socket SOCK, with bench_tls, pinged;
 * SETTINGS initialised (with its TLS), for the caller to release. 0, or
 * -1 with the error printed after WHO. */
static inline int bench_engine(const char *who, const char *type, const char *sock,
			       struct sbx_settings *settings, sbx_engine **ret)
{
	static char url[512];
	struct sbx_engine_config cfg = {.type = type, .url = url};
	struct sbx_error err = SBX_ERROR_INIT;

	snprintf(url, sizeof(url), "unix://%s", sock);
	sbx_settings_init(settings);
	if (bench_tls(&cfg, settings, &err) < 0 || sbx_engine_open(&cfg, ret, &err) < 0 ||
	    sbx_engine_ping(*ret, &err) < 0) {
		fprintf(stderr, "%s: %s: %s\n", who, type, err.msg);
		return -1;
	}
	return 0;
}

/* Waits until M's pool holds its size: 0, or -1 (said after WHO and TYPE)
 * after two minutes. */
static inline int bench_pool_full(sbx_manager *m, const char *who, const char *type)
{
	double t0 = now_ms();
	struct sbx_pool_stats ps;

	for (;;) {
		sbx_manager_pool_stats(m, &ps);
		if (ps.ready >= ps.size)
			return 0;
		if (now_ms() - t0 > 120000) {
			fprintf(stderr, "%s: %s: the pool holds %zu of %zu after 120 s\n", who,
				type, ps.ready, ps.size);
			return -1;
		}
		usleep(20000);
	}
}

#endif
