/* SPDX-License-Identifier: MIT */
/*
 * What an artifact link costs (src/http/artifact_route.c): one file a sandbox
 * wrote, downloaded through the server's signed link and read by the engine's
 * own means, on one machine:
 *   bench/bench-artifact TYPE SOCKET IMAGE [MIB] [ROUNDS]
 * One sandbox (a manager of its own, as the server makes them) writes MIB
 * MiB (256) of random bytes to /app/results/big.bin. An in-process HTTP
 * front on 127.0.0.1 (an ephemeral port) serves it; each round then takes
 *   link         a GET of its signed link with libcurl (the bytes counted);
 *   archive GET  the engine's archive API (sbx_archive_get: a tar, as root);
 *   exec cat     `cat` of the file as uid 1000 through an exec stream;
 *   range        a GET of the link with Range: bytes=-1048576 (the last MiB).
 * Prints the median of ROUNDS (3) in MB/s (of the file's bytes), the link's
 * ratio to each reference, and the range's time next to the whole file's: a
 * range should cost what it sends. Any failed step fails the run (exit 1).
 * The sandbox is deleted and the front stopped at the end.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "sandbox/sandbox-internal.h"
#include "sbx/artifact.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#define OWNER "bench"
#define RELPATH "big.bin"
#define FILE_PATH SBX_RESULTS_DIR "/" RELPATH
#define RANGE_BYTES 1048576L
#define READ_BUF (256 * 1024)
#define MAX_ROUNDS 64

static const char *type;

static double median(double *v, int n)
{
	return quantile(v, (size_t)n, 0.5);
}

static double mb_per_s(int64_t bytes, double ms)
{
	return ms > 0 ? (double)bytes / 1e6 / (ms / 1e3) : 0;
}

/* ---- the link, with libcurl ---- */

static size_t count_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	(void)data;
	*(int64_t *)userdata += (int64_t)(size * nmemb);
	return size * nmemb;
}

/* GET URL (with RANGE, "-N" or NULL): 0 when the status is WANT_STATUS and
 * exactly WANT_BYTES of body came, *ret_ms the time it took; else -1, said. */
static int http_get(const char *url, const char *range, long want_status, int64_t want_bytes,
		    double *ret_ms)
{
	CURL *c = curl_easy_init();
	int64_t got = 0;
	long status = 0;
	CURLcode cr;
	double t0;

	if (!c) {
		fprintf(stderr, "bench-artifact: %s: curl_easy_init failed\n", type);
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROXY, ""); /* 127.0.0.1 itself, whatever the environment */
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, count_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 600L);
	if (range)
		curl_easy_setopt(c, CURLOPT_RANGE, range);
	t0 = now_ms();
	cr = curl_easy_perform(c);
	*ret_ms = now_ms() - t0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (cr != CURLE_OK || status != want_status || got != want_bytes) {
		fprintf(stderr,
			"bench-artifact: %s: GET%s%s: %s, status %ld (want %ld), %" PRId64
			" bytes (want %" PRId64 ")\n",
			type, range ? " bytes=" : "", range ? range : "", curl_easy_strerror(cr),
			status, want_status, got, want_bytes);
		return -1;
	}
	return 0;
}

/* ---- the engine's ways ---- */

static int count_sink(void *userdata, const void *data, size_t len)
{
	(void)data;
	*(int64_t *)userdata += (int64_t)len;
	return 0;
}

/* The archive API's tar of the file: its bytes and a header or two, padded
 * to a record. */
static int archive_get(sbx_engine *e, const char *container, int64_t size, double *ret_ms)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int64_t got = 0;
	double t0 = now_ms();

	if (sbx_archive_get(e, container, FILE_PATH, count_sink, &got, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: archive GET: %s\n", type, err.msg);
		return -1;
	}
	*ret_ms = now_ms() - t0;
	if (got < size || got > size + 65536) {
		fprintf(stderr,
			"bench-artifact: %s: archive GET: a tar of %" PRId64
			" bytes for a file of %" PRId64 "\n",
			type, got, size);
		return -1;
	}
	return 0;
}

/* The sandbox layer's read alone (sbx_artifact_read: a file reader, no
 * HTTP): where the route's time goes, below or above it. */
static int reader_read(sbx_manager *m, sbx_sandbox *sb, int64_t size, double *ret_ms)
{
	struct sbx_error err = SBX_ERROR_INIT;
	int64_t got = 0;
	double t0 = now_ms();

	if (sbx_artifact_read(m, sb, RELPATH, count_sink, &got, &err) < 0 || got != size) {
		fprintf(stderr, "bench-artifact: %s: reader: %s (%" PRId64 " bytes)\n", type,
			err.msg, got);
		return -1;
	}
	*ret_ms = now_ms() - t0;
	return 0;
}

/* `cat FILE_PATH` as uid 1000 through an exec stream, READ_BUF at a time:
 * exactly SIZE bytes on stdout, nothing on stderr, exit 0. */
static int exec_cat(sbx_engine *e, const char *container, int64_t size, double *ret_ms)
{
	static const char *const argv[] = {"cat", "--", FILE_PATH, NULL};
	const struct sbx_exec_spec spec = {.argv = argv, .user = "1000:1000"};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_stream *s = NULL;
	int64_t out = 0, errb = 0;
	int fd, code = -1;
	ssize_t n = 0;
	char *buf = malloc(READ_BUF);
	double t0 = now_ms();

	if (!buf)
		return -1;
	if (sbx_exec_stream(e, container, &spec, &s, &err) < 0 ||
	    sbx_stream_close_stdin(s, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: exec cat: %s\n", type, err.msg);
		sbx_stream_free(s);
		free(buf);
		return -1;
	}
	while ((n = sbx_stream_read(s, buf, READ_BUF, &fd, 60000, &err)) > 0) {
		if (fd == 1)
			out += n;
		else
			errb += n;
	}
	*ret_ms = now_ms() - t0;
	/* The exec may be told running for a moment after its stream ended. */
	for (int i = 0; n == 0 && i < 100 && (code = sbx_stream_exit_code(s, &err)) == -1; i++)
		usleep(10000);
	sbx_stream_free(s);
	free(buf);
	if (n < 0 || code != 0 || out != size || errb != 0) {
		fprintf(stderr,
			"bench-artifact: %s: exec cat: %s, exit %d, %" PRId64
			" bytes on stdout (want %" PRId64 "), %" PRId64 " on stderr\n",
			type, n < 0 ? err.msg : "end of stream", code, out, size, errb);
		return -1;
	}
	return 0;
}

/* Writes SIZE bytes of /dev/urandom to FILE_PATH as uid 1000, and checks
 * that the sandbox's own reader sees that size. */
static int write_file(sbx_manager *m, sbx_sandbox *sb, sbx_engine *e, int64_t size)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_exec_result res = {0};
	char cmd[128];
	const char *const argv[] = {"sh", "-c", cmd, NULL};
	const struct sbx_exec_spec spec = {
	    .argv = argv, .user = "1000:1000", .workdir = SBX_RESULTS_DIR, .timeout_ms = 600000};
	int64_t seen = -1;
	int r;

	snprintf(cmd, sizeof(cmd), "head -c %" PRId64 " /dev/urandom > %s", size, FILE_PATH);
	r = sbx_exec(e, sb->container, &spec, &res, &err);
	if (r < 0 || res.exit_code != 0) {
		fprintf(stderr, "bench-artifact: %s: %s: %s%s\n", type, cmd,
			r < 0 ? err.msg : "exit status non-zero: ",
			r < 0 || !res.err.data ? "" : res.err.data);
		sbx_exec_result_release(&res);
		return -1;
	}
	sbx_exec_result_release(&res);
	if (sbx_artifact_stat(m, sb, RELPATH, &seen, &err) < 0 || seen != size) {
		fprintf(stderr,
			"bench-artifact: %s: %s is %" PRId64 " bytes, not %" PRId64 ": %s\n", type,
			FILE_PATH, seen, size, err.msg);
		return -1;
	}
	return 0;
}

static int set_all(struct sbx_settings *s, const char *const *lines)
{
	struct sbx_error err = SBX_ERROR_INIT;

	for (; *lines; lines++)
		if (sbx_settings_set(s, *lines, &err) < 0) {
			fprintf(stderr, "bench-artifact: %s: %s\n", *lines, err.msg);
			return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	struct sbx_engine_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings settings;
	bool have_settings = false;
	sbx_engine *e = NULL;
	sbx_manager *m = NULL;
	sbx_link_key *key = NULL;
	sbx_mcp *mcp = NULL;
	sbx_http *http = NULL;
	sbx_sandbox *sb = NULL;
	char url_arg[512], inst[96], image[512], base[64], sandbox_id[SBX_SANDBOX_ID_MAX + 1] = "";
	char *link = NULL;
	double link_ms[MAX_ROUNDS], archive_ms[MAX_ROUNDS], cat_ms[MAX_ROUNDS],
	    range_ms[MAX_ROUNDS], reader_ms[MAX_ROUNDS];
	int mib = argc > 4 ? atoi(argv[4]) : 256, rounds = argc > 5 ? atoi(argv[5]) : 3;
	int status = 1;
	int64_t size;

	if (argc < 4 || mib < 1 || mib > 65536 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE [MIB] [ROUNDS (1..%d)]\n", argv[0],
			MAX_ROUNDS);
		return 2;
	}
	size = (int64_t)mib << 20;
	type = argv[1];
	signal(SIGPIPE, SIG_IGN);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "bench-artifact: curl_global_init failed\n");
		return 1;
	}
	snprintf(url_arg, sizeof(url_arg), "unix://%s", argv[2]);
	cfg.type = argv[1];
	cfg.url = url_arg;
	if (sbx_engine_open(&cfg, &e, &err) < 0 || sbx_engine_ping(e, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: %s\n", argv[1], err.msg);
		goto out;
	}

	/* A manager and a front as the server makes them (tests/test-tools.c). */
	sbx_settings_init(&settings);
	have_settings = true;
	snprintf(inst, sizeof(inst), "server.instance=bench-artifact-%ld", (long)getpid());
	snprintf(image, sizeof(image), "sandbox.image=%s", argv[3]);
	{
		const char *const lines[] = {inst,
					     image,
					     "sandbox.disk=0",
					     "sandbox.pool_size=0",
					     "server.listen=127.0.0.1",
					     "server.port=0",
					     NULL};
		if (set_all(&settings, lines) < 0)
			goto out;
	}
	if (sbx_link_key_open(NULL, &key, &err) < 0 ||
	    sbx_manager_new(&settings, e, &m, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: %s\n", type, err.msg);
		goto out;
	}
	{
		const struct sbx_mcp_config mc = {
		    .settings = &settings, .manager = m, .link_key = key};
		if (sbx_mcp_new(&mc, &mcp, &err) < 0) {
			fprintf(stderr, "bench-artifact: %s: mcp: %s\n", type, err.msg);
			goto out;
		}
	}
	{
		const struct sbx_http_config hc = {.settings = &settings, .mcp = mcp, .manager = m};
		if (sbx_http_start(&hc, &http, &err) < 0) {
			fprintf(stderr, "bench-artifact: %s: http: %s\n", type, err.msg);
			goto out;
		}
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", (unsigned)sbx_http_port(http));

	if (sbx_sandbox_create(m, OWNER, NULL, &sb, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: create: %s\n", type, err.msg);
		goto out;
	}
	snprintf(sandbox_id, sizeof(sandbox_id), "%s", sbx_sandbox_id(sb));
	if (write_file(m, sb, e, size) < 0)
		goto out;
	link = sbx_artifact_link(key, base, sandbox_id, RELPATH, "", (int64_t)time(NULL) + 3600);
	if (!link) {
		fprintf(stderr, "bench-artifact: %s: sbx_artifact_link failed\n", type);
		goto out;
	}

	/* Each round takes every way once, so that a drift of the machine
	 * weighs on all of them alike. */
	for (int i = 0; i < rounds; i++)
		if (http_get(link, NULL, 200, size, &link_ms[i]) < 0 ||
		    archive_get(e, sb->container, size, &archive_ms[i]) < 0 ||
		    exec_cat(e, sb->container, size, &cat_ms[i]) < 0 ||
		    reader_read(m, sb, size, &reader_ms[i]) < 0 ||
		    http_get(link, "-1048576", 206, RANGE_BYTES, &range_ms[i]) < 0)
			goto out;

	{
		double l = median(link_ms, rounds), a = median(archive_ms, rounds);
		double c = median(cat_ms, rounds), rg = median(range_ms, rounds);
		double lm = mb_per_s(size, l), am = mb_per_s(size, a), cm = mb_per_s(size, c);
		double rm = mb_per_s(size, median(reader_ms, rounds));

		printf("# artifact link of %d MiB, MB/s (median of %d); ratio = link / reference\n",
		       mib, rounds);
		printf("%-8s %-28s %10.1f\n", type, "link", lm);
		printf("%-8s %-28s %10.1f\n", type, "archive GET", am);
		printf("%-8s %-28s %10.1f\n", type, "exec cat", cm);
		printf("%-8s %-28s %10.1f\n", type, "file reader, no HTTP", rm);
		printf("%-8s %-28s %10.2f\n", type, "ratio link / archive GET",
		       am > 0 ? lm / am : 0);
		printf("%-8s %-28s %10.2f\n", type, "ratio link / exec cat", cm > 0 ? lm / cm : 0);
		printf("%-8s %-28s %10.1f ms   (whole file %.1f ms)\n", type, "range, last 1 MiB",
		       rg, l);
		fflush(stdout);
	}
	status = 0;
out:
	free(link);
	if (http)
		sbx_http_stop(http);
	sbx_mcp_free(mcp);
	sb = sbx_sandbox_unref(sb);
	if (sandbox_id[0] && sbx_sandbox_delete(m, OWNER, sandbox_id, &err) < 0) {
		fprintf(stderr, "bench-artifact: %s: delete: %s\n", type, err.msg);
		status = 1;
	}
	sbx_manager_free(m);
	if (have_settings)
		sbx_settings_release(&settings);
	sbx_link_key_free(key);
	sbx_engine_free(e);
	curl_global_cleanup();
	return status;
}
