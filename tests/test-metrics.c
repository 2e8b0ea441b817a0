/* SPDX-License-Identifier: MIT */
/*
 * The metrics: tests/test-metrics [TYPE URL [IMAGE]].
 *
 * Without arguments, the registry and its text format (include/sbx/metrics.h):
 * HELP and TYPE lines, escaped label values, counters and cumulative
 * histogram buckets, the cap on label sets, exact counts under concurrent
 * increments, the cost of one increment, and the whole output parsed by
 * Prometheus' own parser (python3-prometheus-client; missing, the check
 * fails under MCP_SANDBOX_REQUIRE_ENGINES=1 and is skipped otherwise).
 *
 * With an engine, GET /metrics of a real server on it (a real manager, MCP
 * layer and HTTP front in this process): tool calls through Streamable
 * HTTP move the counters by exactly what they did (by tool, outcome and
 * tenant; durations; sandboxes by state; sessions; the pool's misses; the
 * engine's create requests; an artifact's bytes; installs from
 * tests/pkgindex.py by outcome, and their traffic through the egress
 * relay), the output parses, and who may read it:
 * loopback without a token, 403 elsewhere; with server.metrics_token 401
 * without a bearer token and 403 with a wrong one (an API key's shape
 * included), from anywhere. "Elsewhere" is this host's own non-loopback
 * address (the traffic stays in the host); without one that part is skipped.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <json-c/json.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http/http-internal.h"
#include "sbx/artifact.h"
#include "sbx/audit.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/metrics.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"
#include "pkg-index.h"
#include "tap.h"

/* ---- reading the text ---- */

/* The value of the sample written exactly as SERIES ("name{labels}" or
 * "name") in TEXT; -1 when absent. */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p;) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* Lines of TEXT that start with PREFIX. */
static size_t lines_with(const char *text, const char *prefix)
{
	size_t n = 0, len = strlen(prefix);

	for (const char *p = text; p && *p;) {
		n += strncmp(p, prefix, len) == 0;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return n;
}

static char *render(void)
{
	struct sbx_buf b = SBX_BUF_INIT;

	if (sbx_metrics_render(&b) < 0)
		tap_bail("render");
	return sbx_buf_steal(&b);
}

/* Prometheus' parser (prometheus_client.parser) on TEXT: 0 when all of it
 * parses and every family's name is one of ours; 3 when the module is
 * missing; else its failure. WHAT names the check. */
static const char parse_py[] =
    "import sys\n"
    "try:\n"
    "    from prometheus_client.parser import text_string_to_metric_families\n"
    "except ImportError:\n"
    "    sys.exit(3)\n"
    "text = open(sys.argv[1], encoding='utf-8').read()\n"
    "n = 0\n"
    "for f in text_string_to_metric_families(text):\n"
    "    assert f.name.startswith('mcp_sandbox_'), f.name\n"
    "    assert f.documentation, f.name\n"
    "    for s in f.samples:\n"
    "        n += 1\n"
    "print('# parsed %d samples' % n)\n";

static void check_parses(const char *text, const char *what)
{
	char dir[] = "/tmp/sbx-metrics-XXXXXX", file[64], script[64], cmd[512];
	const char *req = getenv("MCP_SANDBOX_REQUIRE_ENGINES");
	FILE *f;
	int st;

	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(file, sizeof(file), "%s/metrics.txt", dir);
	snprintf(script, sizeof(script), "%s/parse.py", dir);
	f = fopen(file, "we");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		tap_bail("write the metrics");
	f = fopen(script, "we");
	if (!f || fputs(parse_py, f) < 0 || fclose(f) != 0)
		tap_bail("write the parser");
	/* The Debian package's module is /usr/bin/python3's, which another
	 * python3 first on PATH (pyenv) may not see. */
	snprintf(cmd, sizeof(cmd),
		 "python3 %s %s; r=$?; if [ $r = 3 ] && [ -x /usr/bin/python3 ]; then "
		 "/usr/bin/python3 %s %s; r=$?; fi; exit $r",
		 script, file, script, file);
	st = system(cmd);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 3 && !(req && !strcmp(req, "1"))) {
		tap_skip(1, "python3-prometheus-client is not installed (tools/provision-engines "
			    "installs it)");
	} else {
		tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "%s: Prometheus' parser reads all of it (exit %d%s)", what,
		       WIFEXITED(st) ? WEXITSTATUS(st) : -1,
		       WIFEXITED(st) && WEXITSTATUS(st) == 3
			   ? ": python3-prometheus-client is missing"
			   : "");
	}
	unlink(file);
	unlink(script);
	rmdir(dir);
}

/* ---- the registry ---- */

struct hammer {
	int id;
	int n;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	char tenant[32];

	for (int i = 0; i < h->n; i++) {
		sbx_metrics_tool_call("list_sandboxes", "ok", "hammer", 1000);
		/* New series made by several threads at once: the same 500. */
		snprintf(tenant, sizeof(tenant), "race-%d", i % 500);
		sbx_metrics_install(tenant);
	}
	return NULL;
}

static void test_registry(void)
{
	char *text, line[256];
	struct timespec t0, t1;
	pthread_t th[4];
	struct hammer hm[4];
	double per_call_ns;
	bool all;
	const int rounds = 200000;

	text = render();
	all = true;
	for (const char *const *n =
		 (const char *const[]){"mcp_sandbox_tool_calls_total counter",
				       "mcp_sandbox_tool_call_duration_seconds "
				       "histogram",
				       "mcp_sandbox_engine_requests_total counter",
				       "mcp_sandbox_engine_request_duration_seconds "
				       "histogram",
				       "mcp_sandbox_installs_total counter",
				       "mcp_sandbox_artifact_bytes_total counter",
				       "mcp_sandbox_artifact_downloads_refused_total counter",
				       "mcp_sandbox_egress_bytes_total counter",
				       "mcp_sandbox_tenant_cpu_seconds_total counter",
				       "mcp_sandbox_tenant_memory_byte_seconds_total counter",
				       "mcp_sandbox_tenant_disk_byte_seconds_total counter",
				       "mcp_sandbox_tenant_disk_bytes gauge",
				       "mcp_sandbox_sleeps_total counter",
				       "mcp_sandbox_wake_duration_seconds histogram", NULL};
	     *n; n++) {
		snprintf(line, sizeof(line), "# TYPE %s\n", *n);
		all = all && strstr(text, line);
	}
	tap_ok(all && lines_with(text, "# HELP ") == 14 && lines_with(text, "# TYPE ") == 14,
	       "an empty registry: a HELP and a TYPE line for each of its 14 metrics");
	free(text);

	/* The disk gauge moves both ways. */
	sbx_metrics_tenant_disk("gauged", 3000);
	sbx_metrics_tenant_disk("gauged", 500);
	sbx_metrics_tenant_disk("gauged", -3000);
	sbx_metrics_tenant_usage("gauged", 0, 0, 777);
	text = render();
	tap_ok(value_of(text, "mcp_sandbox_tenant_disk_bytes{tenant=\"gauged\"}") == 500 &&
		   value_of(text,
			    "mcp_sandbox_tenant_disk_byte_seconds_total{tenant=\"gauged\"}") == 777,
	       "the disk gauge goes up and down (500), its counter counts (777)");
	sbx_metrics_tenant_disk("gauged", -500);
	free(text);
	text = render();
	tap_ok(value_of(text, "mcp_sandbox_tenant_disk_bytes{tenant=\"gauged\"}") == 0,
	       "the disk gauge back to 0");
	free(text);

	sbx_metrics_tool_call("execute_python_code", "ok", "alice", 1000);	 /* 1 ms */
	sbx_metrics_tool_call("execute_python_code", "ok", "alice", 20000);	 /* 20 ms */
	sbx_metrics_tool_call("execute_python_code", "error", "alice", 2000000); /* 2 s */
	sbx_metrics_tool_call("execute_python_code", "ok", "we\"ird\\te\nnant\x01", 0);
	sbx_metrics_artifact_bytes(1000);
	sbx_metrics_artifact_bytes(234);
	text = render();
	tap_is_int((int)value_of(text, "mcp_sandbox_tool_calls_total{tool=\"execute_python_code\","
				       "outcome=\"ok\",tenant=\"alice\"}"),
		   2, "a counter by its labels");
	tap_is_int((int)value_of(text, "mcp_sandbox_tool_calls_total{tool=\"execute_python_code\","
				       "outcome=\"error\",tenant=\"alice\"}"),
		   1, "another outcome is another series");
	tap_ok(value_of(text, "mcp_sandbox_tool_calls_total{tool=\"execute_python_code\","
			      "outcome=\"ok\",tenant=\"we\\\"ird\\\\te\\nnant?\"}") == 1,
	       "a label value's \" \\ and newline escaped, a control byte as '?'");
	{
		const char *h = "mcp_sandbox_tool_call_duration_seconds";
		char s[160];
		int le0005, le0025, le1, le25, inf, cnt;
		snprintf(s, sizeof(s), "%s_bucket{tool=\"execute_python_code\",le=\"0.005\"}", h);
		le0005 = (int)value_of(text, s);
		snprintf(s, sizeof(s), "%s_bucket{tool=\"execute_python_code\",le=\"0.025\"}", h);
		le0025 = (int)value_of(text, s);
		snprintf(s, sizeof(s), "%s_bucket{tool=\"execute_python_code\",le=\"1\"}", h);
		le1 = (int)value_of(text, s);
		snprintf(s, sizeof(s), "%s_bucket{tool=\"execute_python_code\",le=\"2.5\"}", h);
		le25 = (int)value_of(text, s);
		snprintf(s, sizeof(s), "%s_bucket{tool=\"execute_python_code\",le=\"+Inf\"}", h);
		inf = (int)value_of(text, s);
		snprintf(s, sizeof(s), "%s_count{tool=\"execute_python_code\"}", h);
		cnt = (int)value_of(text, s);
		tap_ok(
		    le0005 == 2 && le0025 == 3 && le1 == 3 && le25 == 4 && inf == 4 && cnt == 4,
		    "histogram buckets are cumulative, +Inf and _count the total (%d %d %d %d %d "
		    "%d)",
		    le0005, le0025, le1, le25, inf, cnt);
		snprintf(s, sizeof(s), "%s_sum{tool=\"execute_python_code\"} 2.021000\n", h);
		tap_ok(strstr(text, s) != NULL, "_sum in seconds (2.021)");
	}
	tap_ok(value_of(text, "mcp_sandbox_artifact_bytes_total") == 1234,
	       "a counter without labels is written bare");
	check_parses(text, "the registry");
	free(text);

	/* Four threads: no increment lost, new series made at once agree. */
	for (int i = 0; i < 4; i++) {
		hm[i] = (struct hammer){.id = i, .n = 50000};
		pthread_create(&th[i], NULL, hammer_main, &hm[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	text = render();
	tap_ok(value_of(text, "mcp_sandbox_tool_calls_total{tool=\"list_sandboxes\",outcome=\"ok\","
			      "tenant=\"hammer\"}") == 200000,
	       "4 threads x 50000 increments of one series: 200000");
	all = true;
	for (int i = 0; i < 500; i++) {
		snprintf(line, sizeof(line), "mcp_sandbox_installs_total{outcome=\"race-%d\"}", i);
		all = all && value_of(text, line) == 400;
	}
	tap_ok(all && lines_with(text, "mcp_sandbox_installs_total{") == 500,
	       "500 series made by 4 threads at once: one each, 400 apiece");
	free(text);

	/* The cap: 2048 tenants x 2 directions fill it; the rest is ~other. */
	for (int i = 0; i < 2100; i++) {
		snprintf(line, sizeof(line), "tenant-%d", i);
		sbx_metrics_egress_bytes(line, 10, 1);
	}
	text = render();
	tap_is_int((int)lines_with(text, "mcp_sandbox_egress_bytes_total{"),
		   SBX_METRICS_SERIES_MAX + 1, "label sets past %d are counted in one more series",
		   SBX_METRICS_SERIES_MAX);
	tap_ok(value_of(text,
			"mcp_sandbox_egress_bytes_total{tenant=\"~other\",direction=\"~other\"}") ==
		   52 * 11,
	       "the 52 tenants past the cap: counted under ~other (572 bytes)");
	free(text);

	/* What an increment costs (the execute path makes a handful). */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < rounds; i++)
		sbx_metrics_engine_request("POST /containers/{id}/exec", "ok", 1500);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	per_call_ns =
	    ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / rounds;
	tap_ok(per_call_ns < 20000,
	       "an engine request counted in %.0f ns (a counter and a "
	       "histogram; the execute path is 1-2 ms)",
	       per_call_ns);

	tap_ok(sbx_metrics_client_on_loopback("127.0.0.1") &&
		   sbx_metrics_client_on_loopback("127.200.3.4") &&
		   sbx_metrics_client_on_loopback("::1") &&
		   !sbx_metrics_client_on_loopback("192.0.2.2") &&
		   !sbx_metrics_client_on_loopback("::2") &&
		   !sbx_metrics_client_on_loopback("fd00::1") &&
		   !sbx_metrics_client_on_loopback("12.7.0.1") &&
		   !sbx_metrics_client_on_loopback(""),
	       "loopback: 127.0.0.0/8 and ::1 only");
}

/* ---- a real server ---- */

struct got {
	long status;
	struct sbx_buf body;
	struct sbx_buf headers;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	sbx_buf_append(ud, p, size * n);
	return size * n;
}

static void got_release(struct got *g)
{
	sbx_buf_release(&g->body);
	sbx_buf_release(&g->headers);
}

/* METHOD BASE PATH from address FROM (NULL: any) with header lines HDRS
 * (NULL-ended, may be NULL) and BODY (NULL: none). */
static struct got fetch(const char *method, const char *base, const char *path, const char *from,
			const char *const *hdrs, const char *body)
{
	struct got g = {0};
	struct curl_slist *h = NULL;
	char url[256];
	CURL *c = curl_easy_init();

	if (!c)
		tap_bail("curl");
	snprintf(url, sizeof(url), "%s%s", base, path);
	for (size_t i = 0; hdrs && hdrs[i]; i++)
		h = curl_slist_append(h, hdrs[i]);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &g.body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &g.headers);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	if (from)
		curl_easy_setopt(c, CURLOPT_INTERFACE, from);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &g.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (!g.body.data)
		sbx_buf_append(&g.body, "", 0);
	if (!g.headers.data)
		sbx_buf_append(&g.headers, "", 0);
	return g;
}

struct front {
	struct sbx_settings s;
	sbx_mcp *mcp;
	sbx_http *http;
	sbx_audit *audit; /* server.audit_log's, when set */
	sbx_auth *auth;	  /* auth.keys_file's, when set */
	char base[96];
};

static sbx_engine *engine;
static sbx_manager *mgr;
static sbx_link_key *link_key;
static struct sbx_settings settings; /* the manager's */
static char index_url[128];	     /* tests/pkgindex.py's, "" when it did not start */

/* A front on LISTEN (port 0) over the shared manager, with SETS (--set
 * lines, NULL-ended, may be NULL) on top of the manager's settings. */
static void front_start(struct front *f, const char *listen, const char *const *sets)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char set[300];

	*f = (struct front){0};
	sbx_settings_init(&f->s);
	snprintf(set, sizeof(set), "server.listen=%s", listen);
	if (sbx_settings_set(&f->s, set, &err) < 0 ||
	    sbx_settings_set(&f->s, "server.port=0", &err) < 0)
		tap_bail(err.msg);
	for (size_t i = 0; sets && sets[i]; i++)
		if (sbx_settings_set(&f->s, sets[i], &err) < 0)
			tap_bail(err.msg);
	{
		const struct sbx_mcp_config mc = {
		    .settings = &settings, .manager = mgr, .link_key = link_key};
		if (sbx_mcp_new(&mc, &f->mcp, &err) < 0)
			tap_bail(err.msg);
	}
	if (sbx_auth_open(&f->s, &f->auth, &err) < 0)
		tap_bail(err.msg);
	if (f->s.server.audit_log[0] && sbx_audit_open(f->s.server.audit_log, &f->audit, &err) < 0)
		tap_bail(err.msg);
	{
		const struct sbx_http_config hc = {.settings = &f->s,
						   .mcp = f->mcp,
						   .manager = mgr,
						   .auth = f->auth,
						   .audit = f->audit};
		if (sbx_http_start(&hc, &f->http, &err) < 0)
			tap_bail(err.msg);
	}
	snprintf(f->base, sizeof(f->base), strchr(listen, ':') ? "http://[%s]:%u" : "http://%s:%u",
		 listen, sbx_http_port(f->http));
}

static void front_stop(struct front *f)
{
	sbx_http_stop(f->http);
	sbx_mcp_free(f->mcp);
	sbx_auth_free(f->auth);
	sbx_audit_free(f->audit);
	sbx_settings_release(&f->s);
}

static char *scrape(struct front *f)
{
	struct got g = fetch("GET", f->base, "/metrics", NULL, NULL, NULL);

	if (g.status != 200) {
		tap_diag("GET /metrics: %ld %s", g.status, g.body.data);
		tap_bail("GET /metrics");
	}
	sbx_buf_release(&g.headers);
	return sbx_buf_steal(&g.body);
}

/* The value of SERIES in TEXT, 0 when absent. */
static double v0(const char *text, const char *series)
{
	double v = value_of(text, series);
	return v < 0 ? 0 : v;
}

static const char *const mcp_headers[] = {"Content-Type: application/json",
					  "Accept: application/json, text/event-stream", NULL};

/* A tools/call of NAME with ARGS on SESSION: the HTTP status; the body in
 * *RET_BODY (malloc'd) when it is not NULL. */
static long call_tool_body(struct front *f, const char *session, const char *name, const char *args,
			   char **ret_body)
{
	char body[1024], sid[128];
	const char *hdrs[] = {mcp_headers[0], mcp_headers[1], sid,
			      "MCP-Protocol-Version: 2025-06-18", NULL};
	struct got g;
	long st;

	snprintf(sid, sizeof(sid), "Mcp-Session-Id: %s", session);
	snprintf(body, sizeof(body),
		 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"%s\",\"arguments\":%s}}",
		 name, args);
	g = fetch("POST", f->base, "/mcp", NULL, hdrs, body);
	st = g.status;
	if (ret_body)
		*ret_body = sbx_buf_steal(&g.body);
	got_release(&g);
	return st;
}

static long call_tool(struct front *f, const char *session, const char *name, const char *args)
{
	return call_tool_body(f, session, name, args, NULL);
}

/* The status of package SPEC in sandbox metrics-box once its install
 * ended (at most 120 s): "success", "failed", or what it was then; when
 * it is not WANT, the status call's answer is shown. */
static char *install_end(struct front *f, const char *session, const char *spec, const char *want)
{
	char args[200], *body = NULL, *st = NULL;

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"metrics-box\",\"package_name\":\"%s\"}",
		 spec);
	call_tool(f, session, "install_package_in_sandbox", args);
	for (int i = 0; i < 240; i++) {
		const char *p;
		free(body);
		body = NULL;
		call_tool_body(f, session, "check_package_installation_status", args, &body);
		/* structuredContent's (the text's copy has its quotes escaped) */
		p = body ? strstr(body, "\"status\":\"") : NULL;
		free(st);
		st = p ? strndup(p + 10, strcspn(p + 10, "\"")) : strdup("?");
		if (strcmp(st, "installing") != 0)
			break;
		usleep(500 * 1000);
	}
	/* What the status said, for a failure's diagnosis (pip's words). */
	if (strcmp(st, want) != 0)
		tap_diag("%s: %.2000s", spec, body ? body : "(no answer)");
	free(body);
	return st;
}

/* Opens a Streamable HTTP session on F: its id (malloc'd). */
static char *session_open(struct front *f)
{
	struct got g =
	    fetch("POST", f->base, "/mcp", NULL, mcp_headers,
		  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
		  "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":"
		  "\"test-metrics\",\"version\":\"1\"}}}");
	const char *h = strcasestr(g.headers.data, "\nMcp-Session-Id: ");
	char *id = NULL, sid[128];

	if (g.status == 200 && h)
		id = strndup(h + 17, strcspn(h + 17, "\r\n"));
	got_release(&g);
	if (!id)
		tap_bail("initialize");
	snprintf(sid, sizeof(sid), "Mcp-Session-Id: %s", id);
	g = fetch("POST", f->base, "/mcp", NULL,
		  (const char *const[]){mcp_headers[0], mcp_headers[1], sid,
					"MCP-Protocol-Version: 2025-06-18", NULL},
		  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	got_release(&g);
	return id;
}

/* No engine operation label holds a run of 12 hex digits (an id). */
static bool no_ids(const char *text)
{
	const char *prefix = "mcp_sandbox_engine_requests_total{op=\"";

	for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
		size_t run = 0;
		for (const char *q = p + strlen(prefix); *q && *q != '"'; q++) {
			run = strchr("0123456789abcdef", *q) ? run + 1 : 0;
			if (run >= 12)
				return false;
		}
	}
	return true;
}

#define CALLS "mcp_sandbox_tool_calls_total"
#define DEFAULT_OK(tool) CALLS "{tool=\"" tool "\",outcome=\"ok\",tenant=\"default\"}"
#define DEFAULT_ERR(tool) CALLS "{tool=\"" tool "\",outcome=\"error\",tenant=\"default\"}"
#define DURATION_COUNT(tool) "mcp_sandbox_tool_call_duration_seconds_count{tool=\"" tool "\"}"

/* list_sandboxes through F's session: metrics-box's usage and the tenant's
 * totals; false when the call or its answer fails. */
struct usage {
	double cpu, tenant_cpu;
	int64_t mem, mem_bs, tenant_mem_bs;
	int64_t disk, disk_bs, tenant_disk_bs;
};

static bool usage_of(struct front *f, const char *session, struct usage *u)
{
	char *body = NULL;
	struct json_object *j, *sc = NULL, *arr = NULL, *v;
	bool ok = false;

	*u = (struct usage){0};
	if (call_tool_body(f, session, "list_sandboxes", "{}", &body) != 200 || !body) {
		free(body);
		return false;
	}
	j = json_tokener_parse(body);
	if (j && json_object_object_get_ex(j, "result", &v) &&
	    json_object_object_get_ex(v, "structuredContent", &sc) &&
	    json_object_object_get_ex(sc, "sandboxes", &arr)) {
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *o = json_object_array_get_idx(arr, i), *x;
			if (!json_object_object_get_ex(o, "name", &x) ||
			    strcmp(json_object_get_string(x), "metrics-box") != 0)
				continue;
			if (json_object_object_get_ex(o, "cpu_seconds", &x))
				u->cpu = json_object_get_double(x);
			if (json_object_object_get_ex(o, "memory_bytes", &x))
				u->mem = json_object_get_int64(x);
			if (json_object_object_get_ex(o, "memory_byte_seconds", &x))
				u->mem_bs = json_object_get_int64(x);
			if (json_object_object_get_ex(o, "disk_bytes", &x))
				u->disk = json_object_get_int64(x);
			if (json_object_object_get_ex(o, "disk_byte_seconds", &x))
				u->disk_bs = json_object_get_int64(x);
		}
		if (json_object_object_get_ex(sc, "tenant_cpu_seconds", &v))
			u->tenant_cpu = json_object_get_double(v);
		if (json_object_object_get_ex(sc, "tenant_memory_byte_seconds", &v))
			u->tenant_mem_bs = json_object_get_int64(v);
		if (json_object_object_get_ex(sc, "tenant_disk_byte_seconds", &v))
			u->tenant_disk_bs = json_object_get_int64(v);
		ok = true;
	}
	json_object_put(j);
	free(body);
	return ok;
}

/* Puts SB to sleep. The server ends the call that served an artifact just
 * after the client has its last byte, so a sandbox busy (-EBUSY) is tried
 * again for up to 10 s. */
static int sleep_now(sbx_sandbox *sb, struct sbx_error *err)
{
	int r = -EBUSY;

	for (int i = 0; i < 200 && r == -EBUSY; i++) {
		if (i > 0) {
			sbx_error_clear(err);
			usleep(50 * 1000);
		}
		r = sbx_sandbox_sleep(sb, err);
	}
	return r;
}
/* The usage sampler (sandbox.usage_interval=1s here): code that burns a
 * second and a half of CPU, holds 64 MiB and writes 20 MiB to
 * /app/results shows in list_sandboxes (the sandbox's and the tenant's) and
 * in /metrics per tenant. */
static void test_usage(struct front *f, const char *session, struct usage *ret)
{
	struct usage u = {0};
	char *text;
	long st = call_tool(f, session, "execute_python_code",
			    "{\"sandbox_id\":\"metrics-box\",\"code\":\"import time\\n"
			    "open('/app/results/disk.bin', 'wb').write(bytes(20 << 20))\\n"
			    "held = bytearray(64 << 20)\\nt = time.process_time()\\n"
			    "while time.process_time() - t < 1.5:\\n    pass\\nprint('burnt')\"}");
	int64_t until = sbx_monotonic_ms() + 20000;

	tap_is_int((int)st, 200,
		   "usage: code burns 1.5 s of CPU, holds 64 MiB and writes 20 MiB to disk");
	while (sbx_monotonic_ms() < until) {
		if (usage_of(f, session, &u) && u.cpu >= 1.5 && u.mem_bs > 0 &&
		    u.disk >= 20 << 20 && u.disk_bs > 0)
			break;
		usleep(250 * 1000);
	}
	tap_ok(u.cpu >= 1.5 && u.cpu < 30, "usage: list_sandboxes shows its cpu_seconds (%.3f)",
	       u.cpu);
	tap_ok(u.mem >= 64LL << 20 && u.mem_bs > 0,
	       "usage: its memory_bytes (%lld) and memory_byte_seconds (%lld)", (long long)u.mem,
	       (long long)u.mem_bs);
	tap_ok(u.disk >= 20 << 20 && u.disk < 200 << 20 && u.disk_bs > 0,
	       "usage: its disk_bytes (%lld: 20 MiB and a little) and disk_byte_seconds (%lld)",
	       (long long)u.disk, (long long)u.disk_bs);
	tap_ok(u.tenant_cpu >= u.cpu && u.tenant_mem_bs >= u.mem_bs &&
		   u.tenant_disk_bs >= u.disk_bs,
	       "usage: the tenant's totals hold them (%.3f, %lld, %lld)", u.tenant_cpu,
	       (long long)u.tenant_mem_bs, (long long)u.tenant_disk_bs);
	text = scrape(f);
	tap_ok(v0(text, "mcp_sandbox_tenant_disk_byte_seconds_total{tenant=\"default\"}") > 0 &&
		   v0(text, "mcp_sandbox_tenant_disk_bytes{tenant=\"default\"}") >= 20 << 20 &&
		   v0(text, "mcp_sandbox_tenant_disk_bytes{tenant=\"default\"}") < 200 << 20,
	       "usage: /metrics has the tenant's disk byte-seconds and disk bytes (%.0f)",
	       v0(text, "mcp_sandbox_tenant_disk_bytes{tenant=\"default\"}"));
	tap_ok(v0(text, "mcp_sandbox_tenant_cpu_seconds_total{tenant=\"default\"}") >= 1.5 &&
		   v0(text, "mcp_sandbox_tenant_memory_byte_seconds_total{tenant=\"default\"}") > 0,
	       "usage: /metrics has the tenant's CPU seconds (%.3f) and memory byte-seconds",
	       v0(text, "mcp_sandbox_tenant_cpu_seconds_total{tenant=\"default\"}"));
	check_parses(text, "/metrics with the usage counters");
	free(text);
	*ret = u;
}

static void test_counts(void)
{
	struct front f;
	char *before, *after, *session, *result = NULL, *link = NULL;
	const char *creates = "mcp_sandbox_engine_requests_total{op=\"POST /containers/create\","
			      "outcome=\"ok\"}";
	struct usage used = {0};
	long st[5];

	front_start(&f, "127.0.0.1", NULL);
	before = scrape(&f);
	session = session_open(&f);
	st[0] = call_tool(&f, session, "create_sandbox", "{\"name\":\"metrics-box\"}");
	st[1] = call_tool_body(&f, session, "execute_python_code",
			       "{\"sandbox_id\":\"metrics-box\",\"code\":\"open('m.txt','w')."
			       "write('x' * 5000)\"}",
			       &result);
	st[2] = call_tool(&f, session, "execute_python_code",
			  "{\"sandbox_id\":\"no-such-box\",\"code\":\"print(1)\"}");
	st[3] = call_tool(&f, session, "no_such_tool", "{}");
	tap_ok(st[0] == 200 && st[1] == 200 && st[2] == 200 && st[3] == 200,
	       "four tool calls answered (%ld %ld %ld %ld)", st[0], st[1], st[2], st[3]);
	after = scrape(&f);
	tap_is_int((int)(v0(after, DEFAULT_OK("create_sandbox")) -
			 v0(before, DEFAULT_OK("create_sandbox"))),
		   1, "create_sandbox ok: +1");
	tap_is_int((int)(v0(after, DEFAULT_OK("execute_python_code")) -
			 v0(before, DEFAULT_OK("execute_python_code"))),
		   1, "execute_python_code ok: +1");
	tap_is_int((int)(v0(after, DEFAULT_ERR("execute_python_code")) -
			 v0(before, DEFAULT_ERR("execute_python_code"))),
		   1, "execute_python_code on an unknown sandbox: error +1");
	tap_is_int((int)(v0(after, DEFAULT_ERR("unknown")) - v0(before, DEFAULT_ERR("unknown"))), 1,
		   "a tool that does not exist: error +1 under tool=\"unknown\"");
	tap_ok(!strstr(after, "no_such_tool"), "a client's tool name never becomes a label");
	tap_is_int((int)(v0(after, DURATION_COUNT("execute_python_code")) -
			 v0(before, DURATION_COUNT("execute_python_code"))),
		   2, "execute_python_code's duration histogram: +2");
	tap_is_int((int)(v0(after, creates) - v0(before, creates)), 1,
		   "one container created: engine requests POST /containers/create ok +1");
	tap_is_int((int)(v0(after, "mcp_sandbox_pool_misses_total") -
			 v0(before, "mcp_sandbox_pool_misses_total")),
		   1, "the pool is off: a miss");
	tap_is_int((int)v0(after, "mcp_sandbox_sandboxes{state=\"idle\"}"), 1, "one sandbox, idle");
	tap_ok(value_of(after, "mcp_sandbox_sandboxes{state=\"sleeping\"}") == 0,
	       "none sleeping, and the state is there to count them");
	tap_is_int((int)v0(after, "mcp_sandbox_sessions{transport=\"streamable\"}"), 1,
		   "one Streamable HTTP session open");
	tap_ok(no_ids(after) && strstr(after, "op=\"POST /containers/{id}/exec\""),
	       "engine operations name routes, with {id} for ids");
	check_parses(after, "a real server's /metrics");
	free(before);
	free(after);

	/* An artifact's bytes. */
	{
		const char *u = result ? strstr(result, "\"url\":\"http") : NULL;
		struct got g;
		if (u)
			link = strndup(u + 7, strcspn(u + 7, "\""));
		before = scrape(&f);
		g = fetch("GET", link ? link : f.base, link ? "" : "/none", NULL, NULL, NULL);
		after = scrape(&f);
		tap_ok(link && g.status == 200 && g.body.len == 5000 &&
			   v0(after, "mcp_sandbox_artifact_bytes_total") -
				   v0(before, "mcp_sandbox_artifact_bytes_total") ==
			       5000,
		       "an artifact of 5000 bytes fetched: artifact bytes +5000 (%ld, %s)",
		       g.status, link ? link : "no link");
		got_release(&g);
		free(before);
		free(after);
	}

	/* Asleep: counted so; woken by its artifact link (silently), then by a
	 * call; each wake counted with its time. */
	{
		const char *wakes = "mcp_sandbox_wake_duration_seconds_count{outcome=\"ok\"}",
			   *sleeps = "mcp_sandbox_sleeps_total{outcome=\"ok\"}",
			   *asleep = "mcp_sandbox_sandboxes{state=\"sleeping\"}";
		struct sbx_error err = SBX_ERROR_INIT;
		sbx_sandbox *sb = NULL;
		char *mid;
		struct got g;

		before = scrape(&f);
		tap_ok(sbx_sandbox_get(mgr, "default", "metrics-box", &sb, &err) == 0 &&
			   sleep_now(sb, &err) == 0,
		       "put the sandbox to sleep (%s)", err.msg);
		mid = scrape(&f);
		tap_ok(v0(mid, asleep) == 1 &&
			   v0(mid, "mcp_sandbox_sandboxes{state=\"idle\"}") == 0 &&
			   v0(mid, sleeps) - v0(before, sleeps) == 1,
		       "asleep: counted sleeping, not idle; sleeps +1");
		g = fetch("GET", link ? link : f.base, link ? "" : "/none", NULL, NULL, NULL);
		after = scrape(&f);
		tap_ok(g.status == 200 && g.body.len == 5000 &&
			   v0(after, wakes) - v0(mid, wakes) == 1 && v0(after, asleep) == 0,
		       "its artifact link wakes it and serves the file (%ld): wakes +1", g.status);
		got_release(&g);
		free(mid);
		mid = after;
		tap_ok(sb && sleep_now(sb, &err) == 0, "asleep again (%s)", err.msg);
		st[4] = call_tool(&f, session, "execute_terminal_command",
				  "{\"sandbox_id\":\"metrics-box\",\"command\":\"true\"}");
		after = scrape(&f);
		tap_ok(st[4] == 200 && v0(after, wakes) - v0(mid, wakes) == 1 &&
			   v0(after, "mcp_sandbox_wake_duration_seconds_sum{outcome=\"ok\"}") > 0,
		       "a call wakes it: wakes +1, with its time");
		check_parses(after, "/metrics with sleeps and wakes");
		sbx_sandbox_unref(sb);
		free(before);
		free(mid);
		free(after);
	}

	/* Installs through the egress relay, from tests/pkgindex.py: the first
	 * wakes the sandbox, whose relay starts again. */
	if (index_url[0]) {
		struct sbx_error err = SBX_ERROR_INIT;
		sbx_sandbox *sb = NULL;
		char *ok, *failed;
		tap_ok(sbx_sandbox_get(mgr, "default", "metrics-box", &sb, &err) == 0 &&
			   sleep_now(sb, &err) == 0,
		       "asleep before the installs (%s)", err.msg);
		sbx_sandbox_unref(sb);
		before = scrape(&f);
		ok = install_end(&f, session, "sbxdemo", "success");
		failed = install_end(&f, session, "sbxdemo-absent==9", "failed");
		after = scrape(&f);
		tap_ok(!strcmp(ok, "success") && !strcmp(failed, "failed"),
		       "an install succeeds, one fails (%s, %s)", ok, failed);
		tap_is_int((int)(v0(after, "mcp_sandbox_installs_total{outcome=\"ok\"}") -
				 v0(before, "mcp_sandbox_installs_total{outcome=\"ok\"}")),
			   1, "installs ok: +1");
		tap_is_int((int)(v0(after, "mcp_sandbox_installs_total{outcome=\"failed\"}") -
				 v0(before, "mcp_sandbox_installs_total{outcome=\"failed\"}")),
			   1, "installs failed: +1");
		tap_ok(
		    v0(after,
		       "mcp_sandbox_egress_bytes_total{tenant=\"default\",direction=\"in\"}") >
			    v0(before, "mcp_sandbox_egress_bytes_total{tenant=\"default\","
				       "direction=\"in\"}") &&
			v0(after, "mcp_sandbox_egress_bytes_total{tenant=\"default\","
				  "direction=\"out\"}") >
			    v0(before, "mcp_sandbox_egress_bytes_total{tenant=\"default\","
				       "direction=\"out\"}"),
		    "pip's traffic through the relay: egress bytes of tenant default, in and out");
		free(ok);
		free(failed);
		free(before);
		free(after);
	} else {
		tap_skip(5, "tests/pkgindex.py did not start");
	}
	free(result);
	free(link);

	test_usage(&f, session, &used);
	st[4] = call_tool(&f, session, "delete_sandbox", "{\"sandbox_id\":\"metrics-box\"}");
	after = scrape(&f);
	tap_ok(st[4] == 200 && v0(after, "mcp_sandbox_sandboxes{state=\"idle\"}") == 0,
	       "deleted: no sandbox left");
	tap_ok(v0(after, "mcp_sandbox_tenant_disk_bytes{tenant=\"default\"}") == 0 &&
		   v0(after, "mcp_sandbox_tenant_disk_byte_seconds_total{tenant=\"default\"}") > 0,
	       "deleted: the tenant's disk gauge is 0 again (%.0f), its byte-seconds stay",
	       v0(after, "mcp_sandbox_tenant_disk_bytes{tenant=\"default\"}"));
	free(after);
	{
		struct usage gone = {0};
		bool listed = usage_of(&f, session, &gone);
		tap_ok(listed && gone.tenant_cpu >= used.cpu && gone.tenant_mem_bs >= used.mem_bs &&
			   gone.tenant_disk_bs >= used.disk_bs && used.disk_bs > 0,
		       "usage: the tenant's totals keep the deleted sandbox's (%.3f >= %.3f, "
		       "disk %lld >= %lld)",
		       gone.tenant_cpu, used.cpu, (long long)gone.tenant_disk_bs,
		       (long long)used.disk_bs);
	}
	{
		char sid[128];
		struct got g;
		snprintf(sid, sizeof(sid), "Mcp-Session-Id: %s", session);
		g = fetch("DELETE", f.base, "/mcp", NULL, (const char *const[]){sid, NULL}, NULL);
		got_release(&g);
		after = scrape(&f);
		tap_is_int((int)v0(after, "mcp_sandbox_sessions{transport=\"streamable\"}"), 0,
			   "the session deleted: none open");
		free(after);
	}
	{
		struct got g = fetch("GET", f.base, "/metrics", NULL, NULL, NULL);
		tap_ok(g.status == 200 &&
			   strstr(g.headers.data,
				  "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
		       "Content-Type: text/plain; version=0.0.4; charset=utf-8");
		got_release(&g);
		g = fetch("POST", f.base, "/metrics", NULL, NULL, "x");
		tap_is_int(g.status, 405, "POST /metrics: 405");
		got_release(&g);
		g = fetch("GET", f.base, "/metrics", NULL,
			  (const char *const[]){"Host: evil.example", NULL}, NULL);
		tap_is_int(g.status, 403, "a foreign Host: 403 (DNS rebinding)");
		got_release(&g);
		g = fetch("GET", f.base, "/metrics", NULL,
			  (const char *const[]){"Origin: http://evil.example", NULL}, NULL);
		tap_is_int(g.status, 403, "a foreign Origin: 403");
		got_release(&g);
		{
			char origin[160];
			snprintf(origin, sizeof(origin), "Origin: %s", f.base);
			g = fetch("GET", f.base, "/metrics", NULL,
				  (const char *const[]){origin, NULL}, NULL);
			tap_ok(
			    g.status == 403 && strstr(g.body.data, "scrapers"),
			    "its own Origin (a page served on loopback, in a browser): 403 (%ld)",
			    g.status);
			got_release(&g);
		}
	}
	free(session);
	front_stop(&f);
}

/* A non-loopback IPv4 address of this host into BUF, or false. */
static bool local_address(char *buf, size_t size)
{
	struct ifaddrs *all, *i;
	bool found = false;

	if (getifaddrs(&all) < 0)
		return false;
	for (i = all; i && !found; i = i->ifa_next) {
		const struct sockaddr_in *a = (const void *)i->ifa_addr;
		if (!a || a->sin_family != AF_INET || (ntohl(a->sin_addr.s_addr) >> 24) == 127)
			continue;
		found = inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)size) != NULL;
	}
	freeifaddrs(all);
	return found;
}

#define TOKEN "metrics-T0ken-for-the-test-4f1c"

/* The audit log's lines holding both NEEDLE and NEEDLE2. */
static int audit_lines(const char *path, const char *needle, const char *needle2)
{
	char line[1024];
	int n = 0;
	FILE *fp = fopen(path, "r");

	while (fp && fgets(line, sizeof(line), fp))
		n += strstr(line, needle) && strstr(line, needle2);
	if (fp)
		fclose(fp);
	return n;
}

static void test_access(void)
{
	char audit[] = "/tmp/sbx-metrics-audit-XXXXXX", audit_set[64];
	const char *const with_token[] = {"server.metrics_token=" TOKEN, audit_set, NULL};
	struct front f;
	struct got g;
	char addr[INET_ADDRSTRLEN];
	long last = 0;
	int fd = mkstemp(audit);

	if (fd < 0)
		tap_bail("mkstemp");
	close(fd);
	snprintf(audit_set, sizeof(audit_set), "server.audit_log=%s", audit);
	front_start(&f, "127.0.0.1", with_token);
	g = fetch("GET", f.base, "/metrics", NULL, NULL, NULL);
	tap_ok(g.status == 401 && strcasestr(g.headers.data, "\nWWW-Authenticate: Bearer") &&
		   strstr(g.body.data, "server.metrics_token"),
	       "with a token, no Authorization (even on loopback): 401 with WWW-Authenticate, "
	       "naming the setting (%ld)",
	       g.status);
	got_release(&g);
	g = fetch("GET", f.base, "/metrics", NULL,
		  (const char *const[]){"Authorization: Basic bWV0cmljczp4", NULL}, NULL);
	tap_is_int(g.status, 401, "another scheme: 401");
	got_release(&g);
	g = fetch("GET", f.base, "/metrics", NULL,
		  (const char *const[]){"Authorization: Bearer " TOKEN "x", NULL}, NULL);
	tap_ok(g.status == 403 && strstr(g.body.data, "server.metrics_token"),
	       "a wrong token: 403 (%ld)", g.status);
	got_release(&g);
	g = fetch("GET", f.base, "/metrics", NULL,
		  (const char *const[]){"Authorization: Bearer sk-mcp-3f9a0c12b7e4."
					"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
					NULL},
		  NULL);
	tap_is_int(g.status, 403, "an API key's shape: 403");
	got_release(&g);
	g = fetch("GET", f.base, "/metrics", NULL,
		  (const char *const[]){"Authorization: Bearer " TOKEN, NULL}, NULL);
	tap_ok(g.status == 200 &&
		   strstr(g.body.data, "# TYPE mcp_sandbox_tool_calls_total counter"),
	       "the token: 200 (%ld)", g.status);
	got_release(&g);
	/* Two wrong tokens so far; eight more reach SBX_AUTH_FAIL_MAX. */
	for (int i = 0; i < SBX_AUTH_FAIL_MAX - 1; i++) {
		g = fetch("GET", f.base, "/metrics", NULL,
			  (const char *const[]){"Authorization: Bearer " TOKEN "y", NULL}, NULL);
		last = g.status;
		if (i == SBX_AUTH_FAIL_MAX - 2)
			tap_ok(g.status == 429 && strcasestr(g.headers.data, "\nRetry-After: "),
			       "wrong tokens from one address: after %d, 429 with Retry-After "
			       "(%ld)",
			       SBX_AUTH_FAIL_MAX, g.status);
		else if (i == SBX_AUTH_FAIL_MAX - 3 && last != 403)
			tap_diag("the %dth wrong token: %ld", SBX_AUTH_FAIL_MAX, last);
		got_release(&g);
	}
	g = fetch("GET", f.base, "/metrics", NULL,
		  (const char *const[]){"Authorization: Bearer " TOKEN, NULL}, NULL);
	tap_is_int(g.status, 200, "the token still opens it from that address");
	got_release(&g);
	front_stop(&f);
	tap_ok(audit_lines(audit, "\"route\":\"/metrics\"", "\"reason\":\"rejected\"") ==
		       SBX_AUTH_FAIL_MAX &&
		   audit_lines(audit, "\"route\":\"/metrics\"", "\"reason\":\"throttled\"") == 1,
	       "the audit log has each wrong token (%d) and the first 429 (%d)",
	       audit_lines(audit, "\"route\":\"/metrics\"", "\"reason\":\"rejected\""),
	       audit_lines(audit, "\"route\":\"/metrics\"", "\"reason\":\"throttled\""));
	unlink(audit);

	front_start(&f, "::1", NULL);
	g = fetch("GET", f.base, "/metrics", NULL, NULL, NULL);
	tap_is_int(g.status, 200, "no token, a client on ::1: 200");
	got_release(&g);
	front_stop(&f);

	/* API keys checked: loopback alone does not open it (a reverse proxy's
	 * clients come from there too). */
	{
		char dir[] = "/tmp/test-metrics-keys-XXXXXX", keys[128], set[160];
		char key[SBX_API_KEY_LEN + 1];
		struct sbx_error err = SBX_ERROR_INIT;
		const char *sets[] = {set, NULL};

		if (!mkdtemp(dir))
			tap_bail("mkdtemp");
		snprintf(keys, sizeof(keys), "%s/keys", dir);
		snprintf(set, sizeof(set), "auth.keys_file=%s", keys);
		if (sbx_keys_add(keys, "alice", NULL, 0, key, &err) < 0)
			tap_bail(err.msg);
		front_start(&f, "127.0.0.1", sets);
		g = fetch("GET", f.base, "/metrics", NULL, NULL, NULL);
		tap_ok(g.status == 403 && strstr(g.body.data, "server.metrics_token") &&
			   strstr(g.body.data, "API keys"),
		       "API keys checked, no token: a client on loopback gets 403 naming "
		       "server.metrics_token (%ld)",
		       g.status);
		got_release(&g);
		front_stop(&f);
		unlink(keys);
		snprintf(keys, sizeof(keys), "%s/keys.lock", dir);
		unlink(keys);
		rmdir(dir);
	}

	if (!local_address(addr, sizeof(addr))) {
		tap_skip(3, "this host has no non-loopback IPv4 address to call from");
		return;
	}
	front_start(&f, addr, NULL);
	g = fetch("GET", f.base, "/metrics", addr, NULL, NULL);
	tap_ok(g.status == 403 && strstr(g.body.data, "server.metrics_token") &&
		   strstr(g.body.data, "loopback"),
	       "no token, a client at %s (not loopback): 403 naming server.metrics_token (%ld)",
	       addr, g.status);
	got_release(&g);
	front_stop(&f);
	front_start(&f, addr, with_token);
	g = fetch("GET", f.base, "/metrics", addr, NULL, NULL);
	tap_is_int(g.status, 401, "with a token, a client at %s without it: 401", addr);
	got_release(&g);
	g = fetch("GET", f.base, "/metrics", addr,
		  (const char *const[]){"Authorization: Bearer " TOKEN, NULL}, NULL);
	tap_is_int(g.status, 200, "with the token, a client at %s: 200", addr);
	got_release(&g);
	front_stop(&f);
}

static void test_server(const char *type, const char *url, const char *image)
{
	struct sbx_engine_config cfg = {.type = type, .url = url};
	struct sbx_error err = SBX_ERROR_INIT;
	char set[256], instance[64];

	snprintf(instance, sizeof(instance), "metrics-%s-%ld-%ld", type, (long)getpid(),
		 (long)time(NULL));
	if (sbx_engine_open(&cfg, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0) {
		printf("Bail out! %s engine at %s: %s\n", type, url, err.msg);
		exit(1);
	}
	if (pkg_index_start("metrics", index_url, sizeof(index_url)) < 0)
		index_url[0] = '\0';
	sbx_settings_init(&settings);
	if (index_url[0]) {
		snprintf(set, sizeof(set), "sandbox.index_url=%s", index_url);
		if (sbx_settings_set(&settings, set, &err) < 0)
			tap_bail(err.msg);
	}
	{
		const char *keys[] = {
		    "server.instance=",	      "engine.type=",  "engine.socket=",
		    "sandbox.image=",	      "sandbox.disk=", "sandbox.pool_size=",
		    "sandbox.usage_interval="};
		const char *vals[] = {instance, type, url, image, "0", "0", "1s"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			snprintf(set, sizeof(set), "%s%s", keys[i], vals[i]);
			if (sbx_settings_set(&settings, set, &err) < 0)
				tap_bail(err.msg);
		}
	}
	if (sbx_link_key_open(NULL, &link_key, &err) < 0)
		tap_bail(err.msg);
	if (sbx_manager_new(&settings, engine, &mgr, &err) < 0) {
		printf("Bail out! manager: %s\n", err.msg);
		exit(1);
	}
	test_counts();
	test_access();
	mgr = sbx_manager_free(mgr);
	sbx_settings_release(&settings);
	engine = sbx_engine_free(engine);
	sbx_link_key_free(link_key);
	pkg_index_stop();
}

int main(int argc, char **argv)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (argc == 1)
		test_registry();
	else if (argc >= 3)
		test_server(argv[1], argv[2], argc > 3 ? argv[3] : "localhost/mcp-sandbox:latest");
	else
		tap_bail("usage: test-metrics [TYPE URL [IMAGE]]");
	curl_global_cleanup();
	return tap_done();
}
