/* SPDX-License-Identifier: MIT */
/*
 * Settings: one schema table, parsed with inih.
 *
 * inih is fed through our own line reader so that we know the line number of
 * every key (the packaged inih is built without INI_HANDLER_LINENO), can
 * reject over-long lines instead of having inih split them, can refuse an
 * unknown [section] even when it holds no key, and can strip indentation so
 * that an indented key is never taken as a multi-line continuation.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <ini.h>

#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/hostport.h"
#include "sbx/percent.h"
#include "sbx/settings.h"

#define KIB INT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define SEC INT64_C(1000)
#define MIN (SEC * 60)
#define HOUR (MIN * 60)
#define NANO INT64_C(1000000000)

#define SET_VALUE_MAX 4096 /* longest --set value */
#define SET_NAME_MAX 128   /* longest --set section.key */
#define WHY_MAX 256

#define OFF(field) offsetof(struct sbx_settings, field)

/* clang-format off */
#define STRING(sec, key, field, def, check, help) \
	{sec, key, SBX_SETTING_STRING, OFF(field), def, help, 0, 0, NULL, check}
#define NUMBER(type, sec, key, field, def, min, max, help) \
	{sec, key, SBX_SETTING_##type, OFF(field), def, help, min, max, NULL, NULL}
/* A number with a check past its range (on the value as written). */
#define NUMBER_CHECKED(type, sec, key, field, def, min, max, check, help) \
	{sec, key, SBX_SETTING_##type, OFF(field), def, help, min, max, NULL, check}
#define BOOLEAN(sec, key, field, def, help) \
	{sec, key, SBX_SETTING_BOOL, OFF(field), def, help, 0, 0, NULL, NULL}
#define ENUM(sec, key, field, def, words, help) \
	{sec, key, SBX_SETTING_ENUM, OFF(field), def, help, 0, 0, words, NULL}
/* clang-format on */

static bool check_socket(const char *v, char *why, size_t n)
{
	if (!*v || v[0] == '/' || strncmp(v, "unix:///", 8) == 0 ||
	    (strncmp(v, "tcp://", 6) == 0 && v[6]))
		return true;
	snprintf(why, n, "expected unix:///PATH, /PATH or tcp://HOST:PORT");
	return false;
}

static bool check_http_url(const char *v, char *why, size_t n)
{
	if (!*v || (strncmp(v, "http://", 7) == 0 && v[7]) ||
	    (strncmp(v, "https://", 8) == 0 && v[8]))
		return true;
	snprintf(why, n, "expected an http:// or https:// URL");
	return false;
}

/* The package index: an http:// or https:// URL with a host, perhaps
 * user:password@ (the server adds them; sandboxes never see them), no query
 * or fragment (the server appends the paths pip asks for). */
static bool check_index_url(const char *v, char *why, size_t n)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *query = NULL, *frag = NULL;
	bool ok = false;

	if (!u)
		return snprintf(why, n, "out of memory"), false;
	if ((strncmp(v, "http://", 7) == 0 || strncmp(v, "https://", 8) == 0) &&
	    curl_url_set(u, CURLUPART_URL, v, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && *host &&
	    curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_NO_QUERY &&
	    curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_NO_FRAGMENT)
		ok = true;
	else
		snprintf(why, n,
			 "expected an http:// or https:// URL with a host (user:password@ "
			 "allowed), no query or fragment");
	curl_free(scheme);
	curl_free(host);
	curl_free(query);
	curl_free(frag);
	curl_url_cleanup(u);
	return ok;
}

/* Empty, or a clean path (sbx_path_is_clean) on the index's host. */
static bool check_index_files_path(const char *v, char *why, size_t n)
{
	const char *what;

	if (!*v || (!strchr(v, '?') && sbx_path_is_clean(v, strlen(v), &what)))
		return true;
	snprintf(why, n, "expected empty or a path such as /packages/ (%s)",
		 strchr(v, '?') ? "it has a query" : what);
	return false;
}

/* URL's "user:password@" with the password as "***", into a malloc'd
 * string; NULL when URL holds no password (or out of memory). */
static char *url_redacted(const char *url)
{
	const char *auth = strstr(url, "://"), *end, *at = NULL, *colon;
	char *ret;

	if (!auth)
		return NULL;
	auth += 3;
	end = auth + strcspn(auth, "/?#");
	for (const char *p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (!colon)
		return NULL;
	if (asprintf(&ret, "%.*s***%s", (int)(colon + 1 - url), url, at) < 0)
		return NULL;
	return ret;
}

/* Comma-separated HOST[:PORT] entries (spaces around them allowed), a host
 * perhaps "*.example.com"; empty = none. */
static bool check_egress_allow(const char *v, char *why, size_t n)
{
	const char *p = v;

	while (*p) {
		char host[SBX_HOST_BUF], what[128];
		size_t len;
		int port;

		while (*p == ' ')
			p++;
		len = strcspn(p, ",");
		while (len && p[len - 1] == ' ')
			len--;
		if (sbx_hostport_parse(p, len, SBX_HOSTPORT_WILDCARD, host, &port, what,
				       sizeof(what)) < 0) {
			snprintf(why, n,
				 "entry \"%.*s\": %s; expected comma-separated HOST[:PORT] "
				 "(HOST a name, *.name, an IPv4 address or [IPv6])",
				 (int)(len < 64 ? len : 64), p, what);
			return false;
		}
		p += len;
		while (*p == ' ')
			p++;
		if (*p == ',')
			p++;
	}
	return true;
}

static bool check_instance(const char *v, char *why, size_t n)
{
	size_t len = strlen(v);
	if (len >= 1 && len <= 64 &&
	    strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		      "0123456789_.-") == len)
		return true;
	snprintf(why, n, "expected 1..64 of A-Z a-z 0-9 _ . -");
	return false;
}

static bool check_abs_path(const char *v, char *why, size_t n)
{
	if (!*v || v[0] == '/')
		return true;
	snprintf(why, n, "expected an absolute path, or empty");
	return false;
}

/* Empty, or 16..256 visible ASCII characters (it goes in a header). */
static bool check_token(const char *v, char *why, size_t n)
{
	size_t len = strlen(v);
	bool visible = true;

	for (size_t i = 0; i < len; i++)
		visible = visible && v[i] > ' ' && v[i] < 0x7f;
	if (len == 0 || (len >= 16 && len <= 256 && visible))
		return true;
	snprintf(why, n, "expected empty or 16..256 visible ASCII characters (no spaces)");
	return false;
}

/* An OCI runtime's name as the engine knows it (no path: the engine's own table). */
static bool check_runtime(const char *v, char *why, size_t n)
{
	size_t len = strlen(v);
	if (len <= 64 && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				   "0123456789_.-") == len)
		return true;
	snprintf(why, n, "expected a runtime name (up to 64 of A-Z a-z 0-9 _ . -), or empty");
	return false;
}

/* [quota] memory: 0 (no quota) or what sandbox.memory may be at least. */
static bool check_quota_memory(const char *v, char *why, size_t n)
{
	int64_t x;

	if (sbx_parse_size(v, &x) == 0 && (x == 0 || x >= 6 * MIB))
		return true;
	snprintf(why, n, "expected 0 (no quota) or a size of at least 6m (suffix k, m or g)");
	return false;
}

/* [quota] cpus: 0 (no quota) or what sandbox.cpus may be at least. */
static bool check_quota_cpus(const char *v, char *why, size_t n)
{
	int64_t x;

	if (sbx_parse_cpus(v, &x) == 0 && (x == 0 || x >= NANO / 100))
		return true;
	snprintf(why, n, "expected 0 (no quota) or a number of CPUs of at least 0.01");
	return false;
}

static const char *const engine_types[] = {"docker", "podman", "swarm", NULL};
static const char *const auth_modes[] = {"keys", "none", NULL};
static const char *const log_levels[] = {"error", "warning", "info", "debug", NULL};
static const char *const log_formats[] = {"text", "json", NULL};

static const struct sbx_setting schema[] = {
    ENUM("engine", "type", engine.type, "docker", engine_types,
	 "container engine API: docker, podman or swarm (a Docker Swarm manager: sandboxes "
	 "spread over its nodes)"),
    STRING("engine", "socket", engine.socket, "", check_socket,
	   "engine endpoint: unix:///PATH, /PATH or tcp://HOST:PORT; empty = discover"),
    STRING("engine", "api_version", engine.api_version, "", NULL,
	   "engine API version (e.g. 1.41 or 4.0.0); empty = negotiate"),
    NUMBER(DURATION, "engine", "timeout", engine.timeout_ms, "60s", 1, HOUR,
	   "time limit of one engine API request (not exec or streams)"),
    STRING("engine", "tls_ca", engine.tls_ca, "", check_abs_path,
	   "TLS for tcp:// endpoints (dockerd --tlsverify; a swarm node's label too): the CA "
	   "that signed the engine's certificate, a PEM file; empty = the system's CAs"),
    STRING("engine", "tls_cert", engine.tls_cert, "", check_abs_path,
	   "TLS: this server's client certificate (PEM), with engine.tls_key; setting any "
	   "engine.tls_* speaks TLS to every tcp:// endpoint"),
    STRING("engine", "tls_key", engine.tls_key, "", check_abs_path,
	   "TLS: the client certificate's private key (PEM; readable by this server alone)"),

    STRING("server", "listen", server.listen, "127.0.0.1", NULL, "address to listen on"),
    NUMBER(INT, "server", "port", server.port, "8000", 0, 65535,
	   "TCP port to listen on; 0 = any free port (printed at start)"),
    STRING("server", "public_url", server.public_url, "", check_http_url,
	   "URL clients reach the server at; empty = http://LISTEN:PORT"),
    NUMBER(SIZE, "server", "max_body", server.max_body, "4m", KIB, GIB,
	   "largest request body accepted"),
    NUMBER(DURATION, "server", "body_timeout", server.body_timeout_ms, "30s", SEC, HOUR,
	   "time a request body may take to arrive, plus a second per body_min_rate bytes"),
    NUMBER(SIZE, "server", "body_min_rate", server.body_min_rate, "16k", 1, GIB,
	   "bytes per second a request body must keep up past body_timeout"),
    STRING("server", "allowed_origins", server.allowed_origins, "", NULL,
	   "comma-separated browser origins allowed to call the server; empty = none"),
    STRING("server", "instance", server.instance, "default", check_instance,
	   "name of this server's sandboxes in engine labels ([A-Za-z0-9_.-], 1..64)"),
    NUMBER(DURATION, "server", "session_timeout", server.session_timeout_ms, "60m", SEC, 24 * HOUR,
	   "an MCP session idle this long is forgotten"),
    NUMBER(DURATION, "server", "stop_timeout", server.stop_timeout_ms, "10s", SEC, 10 * MIN,
	   "a stop (SIGINT, SIGTERM) waits this long for the cancelled calls to end, then "
	   "removes this instance's containers and exits with status 1"),
    NUMBER(INT, "server", "max_sessions", server.max_sessions, "4096", 8, 65536,
	   "MCP sessions alive at once; past it the least recently used idle one is forgotten"),
    NUMBER(INT, "server", "max_sessions_per_ip", server.max_sessions_per_ip, "256", 0, 65536,
	   "MCP sessions one client address holds at once; 0 = no limit"),
    NUMBER(INT, "server", "max_sessions_per_tenant", server.max_sessions_per_tenant, "256", 0,
	   65536, "MCP sessions one tenant (API key owner) holds at once; 0 = no limit"),
    NUMBER(INT, "server", "max_connections", server.max_connections, "4096", 8, 65536,
	   "HTTP connections open at once (SSE streams included); past it the least recently "
	   "used idle one is closed, and with none idle the new one gets 503"),
    NUMBER(INT, "server", "max_connections_per_ip", server.max_connections_per_ip, "512", 0, 65536,
	   "HTTP connections open at once from one client address; past it the address's least "
	   "recently used idle one is closed, and with none idle the new one gets 503; 0 = no "
	   "limit"),
    NUMBER(INT, "server", "max_calls_per_session", server.max_calls_per_session, "8", 1, 256,
	   "tool calls one session may run at once; more are refused at once"),
    NUMBER(DURATION, "server", "stream_stall_timeout", server.stream_stall_timeout_ms, "30s", SEC,
	   HOUR, "an event stream whose client takes no bytes for this long is closed"),
    NUMBER(SIZE, "server", "max_queued", server.max_queued, "256m", MIB, 64 * GIB,
	   "bytes queued for all event streams together; past it the biggest is closed"),
    NUMBER(INT, "server", "max_downloads", server.max_downloads, "64", 1, 65536,
	   "artifact downloads (GET /artifacts/...) running at once; more get 503"),
    NUMBER(INT, "server", "max_downloads_per_ip", server.max_downloads_per_ip, "16", 0, 65536,
	   "artifact downloads running at once for one client address; 0 = no limit"),
    NUMBER(SIZE, "server", "download_min_rate", server.download_min_rate, "16k", 1, GIB,
	   "bytes per second a download's client must take past stream_stall_timeout"),
    STRING(
	"server", "state_dir", server.state_dir, "", check_abs_path,
	"folder for state kept across restarts; empty = $STATE_DIRECTORY or /var/lib/mcp-sandbox"),
    NUMBER(DURATION, "server", "link_ttl", server.link_ttl_ms, "1440m", SEC, 366 * 24 * HOUR,
	   "how long an artifact link a tool hands out works (it is signed and carries its end)"),
    BOOLEAN("server", "unsigned_links", server.unsigned_links, "false",
	    "also serve artifact links without a signature (/artifacts/ID/PATH) while no API "
	    "keys are checked"),
    NUMBER(SIZE, "server", "resource_max_bytes", server.resource_max_bytes, "4m", KIB, 64 * MIB,
	   "largest file resources/read returns (larger ones: their download link)"),
    NUMBER(DURATION, "server", "resource_list_time", server.resource_list_time_ms, "20s", SEC,
	   2 * MIN,
	   "a resources/list page lists no further sandbox after this long, and ends with a "
	   "cursor to the next"),
    STRING("server", "audit_log", server.audit_log, "", check_abs_path,
	   "file the audit log (a JSON line per tool call and refused authentication) is "
	   "appended to; empty = standard error"),
    ENUM("server", "log_level", server.log_level, "info", log_levels,
	 "lines of the server's log written: error, warning, info (and those before) or debug"),
    ENUM("server", "log_format", server.log_format, "text", log_formats,
	 "the server's log on standard error: text or json (an object per line)"),
    STRING("server", "metrics_token", server.metrics_token, "", check_token,
	   "bearer token GET /metrics requires (Authorization: Bearer TOKEN); empty = /metrics "
	   "answers clients on loopback only"),

    STRING("sandbox", "image", sandbox.image, "localhost/mcp-sandbox:latest", NULL,
	   "image sandboxes are created from"),
    NUMBER(SIZE, "sandbox", "memory", sandbox.memory, "512m", 6 * MIB, INT64_MAX,
	   "memory limit of one sandbox (swap limited to the same)"),
    NUMBER(CPUS, "sandbox", "cpus", sandbox.nano_cpus, "1", NANO / 100, 1024 * NANO,
	   "CPU limit of one sandbox, in CPUs (0.5 = half of one)"),
    NUMBER(INT, "sandbox", "pids_limit", sandbox.pids_limit, "256", 1, 4194304,
	   "most processes one sandbox may run"),
    NUMBER(SIZE, "sandbox", "disk", sandbox.disk, "2g", 0, INT64_MAX,
	   "disk space one sandbox may fill in all (its files, /tmp, the venv); 0 = no bound"),
    STRING("sandbox", "runtime", sandbox.runtime, "", check_runtime,
	   "OCI runtime the engine runs sandboxes with (runc, crun, runsc); empty = the engine's "
	   "default"),
    STRING("sandbox", "network", sandbox.network, "none", NULL,
	   "network of a sandbox: none, or the name of an engine network"),
    NUMBER(DURATION, "sandbox", "exec_timeout", sandbox.exec_timeout_ms, "60s", 1, 24 * HOUR,
	   "time limit of one command run in a sandbox"),
    NUMBER(SIZE, "sandbox", "output_cap", sandbox.output_cap, "1m", KIB, GIB,
	   "most output kept from one command"),
    STRING("sandbox", "upload_dir", sandbox.upload_dir, "", NULL,
	   "host directory for uploaded files; empty = uploads disabled"),
    STRING("sandbox", "index_url", sandbox.index_url, "https://pypi.org/simple/", check_index_url,
	   "package index pip installs from, fetched by the server for the sandbox (user:password@ "
	   "allowed; never given to sandboxes)"),
    STRING("sandbox", "index_files_path", sandbox.index_files_path, "", check_index_files_path,
	   "path on the index's host under which it serves its files, fetched with its "
	   "credentials like the index's own path (e.g. /packages/); empty = distribution files "
	   "under the folder of the index's path"),
    STRING("sandbox", "egress_allow", sandbox.egress_allow, "", check_egress_allow,
	   "comma-separated HOST[:PORT] that code in a sandbox may reach over HTTP and HTTPS "
	   "through the server, besides the index; empty = none"),
    NUMBER(INT, "sandbox", "egress_connections", sandbox.egress_connections, "512", 1, 65536,
	   "connections the server relays at once for all sandboxes (fetches and tunnels, each "
	   "an upstream socket); more get 503"),
    NUMBER(INT, "sandbox", "egress_connections_per_tenant", sandbox.egress_connections_per_tenant,
	   "64", 1, 65536,
	   "connections the server relays at once for one tenant's sandboxes together; more get "
	   "503"),
    NUMBER(DURATION, "sandbox", "egress_tunnel_lifetime", sandbox.egress_tunnel_lifetime_ms, "60m",
	   SEC, 24 * HOUR,
	   "a tunnel (HTTPS CONNECT) through the server is closed this long "
	   "after it was asked for, busy or not"),
    NUMBER(DURATION, "sandbox", "egress_hello_timeout", sandbox.egress_hello_timeout_ms, "15s", SEC,
	   10 * MIN,
	   "a sandbox's egress relay must say hello this long after it is started, or the "
	   "install (or code) that needs it fails"),
    NUMBER(DURATION, "sandbox", "egress_head_timeout", sandbox.egress_head_timeout_ms, "10s", SEC,
	   10 * MIN, "a request's head from code in a sandbox must arrive within this (408)"),
    NUMBER(DURATION, "sandbox", "egress_write_timeout", sandbox.egress_write_timeout_ms, "30s", SEC,
	   10 * MIN,
	   "a relay must read what the server writes to it within this, or it is stopped"),
    NUMBER(DURATION, "sandbox", "egress_low_speed_time", sandbox.egress_low_speed_time_ms, "30s",
	   SEC, HOUR,
	   "a fetch through the server slower than 1 KiB/s this long (the wait for its first "
	   "byte too) is cut off (504)"),
    NUMBER(DURATION, "sandbox", "egress_page_timeout", sandbox.egress_page_timeout_ms, "60s", SEC,
	   HOUR,
	   "an index page (HTML or JSON) must have arrived this long after its request (504); "
	   "files and forwards have no total deadline"),
    BOOLEAN("sandbox", "allow_direct_urls", sandbox.allow_direct_urls, "false",
	    "let install_package_in_sandbox take URLs, paths and file names, not only "
	    "package names from the index"),
    NUMBER(INT, "sandbox", "max_sandboxes", sandbox.max_sandboxes, "32", 1, 100000,
	   "most sandboxes at once"),
    NUMBER(DURATION, "sandbox", "install_timeout", sandbox.install_timeout_ms, "10m", SEC,
	   24 * HOUR, "time limit of one package install"),
    NUMBER(SIZE, "sandbox", "max_upload", sandbox.max_upload, "100m", 1, GIB,
	   "largest file upload_file_to_sandbox copies"),
    BOOLEAN("sandbox", "remove_on_exit", sandbox.remove_on_exit, "true",
	    "remove this server's sandboxes when it stops (no = adopt them at the next start)"),
    BOOLEAN("sandbox", "allow_unlimited", sandbox.allow_unlimited, "false",
	    "run sandboxes whose engine drops their memory, CPU and process limits (rootless "
	    "Podman on cgroup v1) instead of refusing to create them"),
    NUMBER(INT, "sandbox", "pool_size", sandbox.pool_size, "16", 0, 64,
	   "started sandboxes kept ready for create_sandbox; 0 = none"),
    NUMBER(INT, "sandbox", "pool_max", sandbox.pool_max, "16", 0, 64,
	   "most sandboxes the pool grows to after creates found it empty; at most pool_size "
	   "= the pool never grows"),
    NUMBER(INT, "sandbox", "pool_fill", sandbox.pool_fill, "2", 1, 16,
	   "pooled sandboxes started at once while the pool refills"),
    NUMBER(DURATION, "sandbox", "pool_shrink_after", sandbox.pool_shrink_after_ms, "10m", SEC,
	   24 * HOUR, "how long the pool stays grown after the last create that found it empty"),
    NUMBER(SIZE, "sandbox", "image_inline_max", sandbox.image_inline_max, "1m", 0, 16 * MIB,
	   "largest PNG/JPEG made by Python code that is returned inline as an image; 0 = none"),
    NUMBER(DURATION, "sandbox", "interrupt_grace", sandbox.interrupt_grace_ms, "2s", 1, 10 * MIN,
	   "how long Python code may take to stop after its interrupt before the interpreter "
	   "is killed and restarted"),
    NUMBER(DURATION, "sandbox", "max_exec_timeout", sandbox.max_exec_timeout_ms, "10m", SEC,
	   24 * HOUR, "longest time limit a client may ask for with a tool's timeout argument"),
    NUMBER(DURATION, "sandbox", "idle_timeout", sandbox.idle_timeout_ms, "30m", 0, 7 * 24 * HOUR,
	   "a sandbox not used for this long is put to sleep: its container is stopped, its "
	   "files kept, and the next call wakes it (on swarm it is removed); 0s = never"),
    NUMBER(DURATION, "sandbox", "sleep_lifetime", sandbox.sleep_lifetime_ms, "10080m", 0,
	   365 * 24 * HOUR, "a sandbox asleep for this long is removed with its files; 0s = never"),
    NUMBER(DURATION, "sandbox", "max_lifetime", sandbox.max_lifetime_ms, "1440m", 0, 30 * 24 * HOUR,
	   "a sandbox older than this is removed with its files once no call runs in it; "
	   "0s = no limit"),
    NUMBER(DURATION, "sandbox", "usage_interval", sandbox.usage_interval_ms, "60s", 0, HOUR,
	   "how often each sandbox's CPU, memory and disk use is sampled from the engine, "
	   "for list_sandboxes and /metrics; 0s = never"),

    ENUM("auth", "mode", auth.mode, "keys", auth_modes,
	 "who may call the server: keys (an API key from keys_file) or none (anyone)"),
    STRING("auth", "keys_file", auth.keys_file, "", check_abs_path,
	   "file of API keys (mcp-sandboxd keys add TENANT); empty = none"),

    NUMBER(INT, "quota", "sandboxes", quota.sandboxes, "0", 0, SBX_QUOTA_COUNT_MAX,
	   "sandboxes one tenant may have at once, unless its API key sets sandboxes=; "
	   "0 = no quota (sandbox.max_sandboxes still applies)"),
    NUMBER(INT, "quota", "calls", quota.calls, "0", 0, SBX_QUOTA_COUNT_MAX,
	   "tool calls one tenant may run at once over all its sessions, unless its API key "
	   "sets calls=; 0 = no quota"),
    NUMBER_CHECKED(SIZE, "quota", "memory", quota.memory, "0", 0, INT64_MAX, check_quota_memory,
		   "memory limit of each sandbox one tenant creates, unless its API key sets "
		   "memory=; 0 = sandbox.memory (never more than sandbox.memory)"),
    NUMBER_CHECKED(CPUS, "quota", "cpus", quota.nano_cpus, "0", 0, 1024 * NANO, check_quota_cpus,
		   "CPU limit of each sandbox one tenant creates, unless its API key sets cpus=; "
		   "0 = sandbox.cpus (never more than sandbox.cpus)"),
    NUMBER(INT, "quota", "installs", quota.installs, "0", 0, SBX_QUOTA_COUNT_MAX,
	   "package installs one tenant may run at once over all its sandboxes, unless its API "
	   "key sets installs=; 0 = no quota"),
};

struct unit {
	const char *suffix;
	int64_t scale;
};

/* Largest first, so formatting picks the shortest exact spelling. */
static const struct unit size_units[] = {{"g", GIB}, {"m", MIB}, {"k", KIB}, {"", 1}, {NULL, 0}};
static const struct unit duration_units[] = {{"m", MIN}, {"s", SEC}, {"ms", 1}, {NULL, 0}};

union value {
	char *str;
	int64_t num;
	bool b;
};

const struct sbx_setting *sbx_settings_schema(size_t *ret_n)
{
	*ret_n = SBX_ARRAY_SIZE(schema);
	return schema;
}

static int parse_digits(const char *s, const char **ret_end, uint64_t *ret)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*ret_end = p;
	*ret = v;
	return 0;
}

/* "NUMBER[SUFFIX]" with a suffix from units (case-insensitive). */
static int parse_scaled(const char *s, const struct unit *units, int64_t *ret)
{
	const char *end;
	uint64_t v;
	int r = parse_digits(s, &end, &v);

	if (r < 0)
		return r;
	for (const struct unit *u = units; u->suffix; u++) {
		if (strcasecmp(end, u->suffix) != 0)
			continue;
		if (v > (uint64_t)(INT64_MAX / u->scale))
			return -ERANGE;
		*ret = (int64_t)v * u->scale;
		return 0;
	}
	return -EINVAL;
}

static int parse_int(const char *s, int64_t *ret)
{
	bool neg = *s == '-';
	const char *end;
	uint64_t v;
	int r = parse_digits(s + neg, &end, &v);

	if (r < 0)
		return r;
	if (*end)
		return -EINVAL;
	if (v > (uint64_t)INT64_MAX + neg)
		return -ERANGE;
	*ret = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

/* "INT[.FRACTION]" with at most 9 decimals, in nano-units. */
static int parse_cpus(const char *s, int64_t *ret)
{
	const char *end;
	uint64_t whole, frac = 0;
	int r = parse_digits(s, &end, &whole), digits = 0;

	if (r < 0)
		return r;
	if (*end == '.') {
		for (end++; isdigit((unsigned char)*end); end++, digits++) {
			if (digits == 9)
				return -EINVAL;
			frac = frac * 10 + (uint64_t)(*end - '0');
		}
		if (!digits)
			return -EINVAL;
	}
	if (*end)
		return -EINVAL;
	for (; digits < 9; digits++)
		frac *= 10;
	if (whole > (uint64_t)(INT64_MAX / NANO) ||
	    (int64_t)whole * NANO > INT64_MAX - (int64_t)frac)
		return -ERANGE;
	*ret = (int64_t)whole * NANO + (int64_t)frac;
	return 0;
}

int sbx_parse_size(const char *s, int64_t *ret)
{
	return parse_scaled(s, size_units, ret);
}

int sbx_parse_cpus(const char *s, int64_t *ret)
{
	return parse_cpus(s, ret);
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
			*ret = strcasecmp(s, yes[i]) == 0;
			return 0;
		}
	}
	return -EINVAL;
}

static void format_scaled(int64_t v, const struct unit *units, char *out, size_t n)
{
	const struct unit *u = units;

	while (u[1].suffix && (v == 0 || v % u->scale != 0))
		u++;
	snprintf(out, n, "%" PRId64 "%s", v / u->scale, u->suffix);
}

static void format_cpus(int64_t v, char *out, size_t n)
{
	char frac[16];
	int len;

	if (v % NANO == 0) {
		snprintf(out, n, "%" PRId64, v / NANO);
		return;
	}
	len = snprintf(frac, sizeof(frac), "%09" PRId64, v % NANO);
	while (len > 0 && frac[len - 1] == '0')
		frac[--len] = '\0';
	snprintf(out, n, "%" PRId64 ".%s", v / NANO, frac);
}

/* The value as a settings file spells it; numbers use the shortest exact unit. */
static void format_number(const struct sbx_setting *d, int64_t v, char *out, size_t n)
{
	switch (d->type) {
	case SBX_SETTING_SIZE:
		format_scaled(v, size_units, out, n);
		break;
	case SBX_SETTING_DURATION:
		format_scaled(v, duration_units, out, n);
		break;
	case SBX_SETTING_CPUS:
		format_cpus(v, out, n);
		break;
	default:
		snprintf(out, n, "%" PRId64, v);
		break;
	}
}

static void explain(const struct sbx_setting *d, char *why, size_t n)
{
	static const char *const kinds[] = {
	    [SBX_SETTING_INT] = "an integer",
	    [SBX_SETTING_SIZE] = "a size (suffix k, m or g)",
	    [SBX_SETTING_DURATION] = "a duration (suffix ms, s or m)",
	    [SBX_SETTING_CPUS] = "a number of CPUs (up to 9 decimals)",
	};
	char lo[32], hi[32];
	size_t len;

	switch (d->type) {
	case SBX_SETTING_BOOL:
		snprintf(why, n, "expected true or false (yes/no, on/off, 1/0)");
		return;
	case SBX_SETTING_ENUM:
		len = (size_t)snprintf(why, n, "expected one of:");
		for (size_t i = 0; d->words[i] && len < n; i++)
			len += (size_t)snprintf(why + len, n - len, " %s", d->words[i]);
		return;
	default:
		break;
	}
	format_number(d, d->min, lo, sizeof(lo));
	format_number(d, d->max, hi, sizeof(hi));
	if (d->max == INT64_MAX)
		snprintf(why, n, "expected %s of at least %s", kinds[d->type], lo);
	else
		snprintf(why, n, "expected %s in %s..%s", kinds[d->type], lo, hi);
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* Returns 0, -ENOMEM, or -EINVAL with why filled. */
static int parse_value(const struct sbx_setting *d, const char *v, union value *ret, char *why,
		       size_t n)
{
	int64_t num = 0;
	int r = -EINVAL;

	switch (d->type) {
	case SBX_SETTING_STRING:
		if (has_control(v)) {
			snprintf(why, n, "control characters are not allowed");
			return -EINVAL;
		}
		if (d->check && !d->check(v, why, n))
			return -EINVAL;
		ret->str = strdup(v);
		return ret->str ? 0 : -ENOMEM;
	case SBX_SETTING_ENUM:
		for (size_t i = 0; d->words[i]; i++) {
			if (strcmp(v, d->words[i]) == 0) {
				ret->str = strdup(v);
				return ret->str ? 0 : -ENOMEM;
			}
		}
		break;
	case SBX_SETTING_BOOL:
		r = parse_bool(v, &ret->b);
		break;
	case SBX_SETTING_INT:
		r = parse_int(v, &num);
		break;
	case SBX_SETTING_SIZE:
		r = parse_scaled(v, size_units, &num);
		break;
	case SBX_SETTING_DURATION:
		r = parse_scaled(v, duration_units, &num);
		break;
	case SBX_SETTING_CPUS:
		r = parse_cpus(v, &num);
		break;
	}
	if (r == 0 && d->type != SBX_SETTING_BOOL && (num < d->min || num > d->max))
		r = -ERANGE;
	if (r < 0) {
		explain(d, why, n);
		return -EINVAL;
	}
	if (d->check && !d->check(v, why, n))
		return -EINVAL;
	if (d->type != SBX_SETTING_BOOL)
		ret->num = num;
	return 0;
}

static void *field_of(struct sbx_settings *s, const struct sbx_setting *d)
{
	return (char *)s + d->offset;
}

static void store(struct sbx_settings *s, const struct sbx_setting *d, union value *v)
{
	void *f = field_of(s, d);

	switch (d->type) {
	case SBX_SETTING_STRING:
	case SBX_SETTING_ENUM:
		free(*(char **)f);
		*(char **)f = v->str;
		break;
	case SBX_SETTING_BOOL:
		*(bool *)f = v->b;
		break;
	default:
		*(int64_t *)f = v->num;
		break;
	}
}

/* Parse value for d and store it; where ("FILE:LINE: " or "--set ") leads the message. */
static int apply(struct sbx_settings *s, const struct sbx_setting *d, const char *value,
		 const char *where, struct sbx_error *err)
{
	char why[WHY_MAX] = "";
	union value v;
	int r = parse_value(d, value, &v, why, sizeof(why));

	if (r == -ENOMEM)
		return sbx_error_set(err, r, "%s%s.%s: out of memory", where, d->section, d->key);
	if (r < 0) {
		/* An index URL's password and a token stay out of the message
		 * (and the log). */
		_cleanup_free_ char *shown =
		    d->offset == offsetof(struct sbx_settings, sandbox.index_url)
			? url_redacted(value)
			: NULL;
		if (d->offset == offsetof(struct sbx_settings, server.metrics_token))
			return sbx_error_set(err, r, "%s%s.%s: bad value (not shown): %s", where,
					     d->section, d->key, why);
		return sbx_error_set(err, r, "%s%s.%s: bad value \"%.100s\": %s", where, d->section,
				     d->key, shown ? shown : value, why);
	}
	store(s, d, &v);
	return 0;
}

static bool section_known(const char *section)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema); i++)
		if (strcmp(schema[i].section, section) == 0)
			return true;
	return false;
}

static int find_key(const char *section, const char *key)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema); i++)
		if (strcmp(schema[i].section, section) == 0 && strcmp(schema[i].key, key) == 0)
			return (int)i;
	return -1;
}

static void known_keys(const char *section, char *out, size_t n)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema) && len < n; i++)
		if (strcmp(schema[i].section, section) == 0)
			len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "",
						schema[i].key);
}

int sbx_settings_init(struct sbx_settings *s)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema); i++) {
		int r = apply(s, &schema[i], schema[i].def, "default ", NULL);
		if (r < 0) {
			sbx_settings_release(s);
			return r;
		}
	}
	return 0;
}

void sbx_settings_release(struct sbx_settings *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema); i++)
		if (schema[i].type == SBX_SETTING_STRING || schema[i].type == SBX_SETTING_ENUM)
			free(*(char **)field_of(s, &schema[i]));
	memset(s, 0, sizeof(*s));
}

struct load_ctx {
	struct sbx_settings *s;
	const char *path;
	const char *data;
	size_t len, pos;
	int lineno;			    /* lines handed to inih so far */
	int set_on[SBX_ARRAY_SIZE(schema)]; /* line each key was set on, 0 = not yet */
	int err_line;			    /* line of the first error, 0 = none */
	struct sbx_error first;
};

static void ctx_fail(struct load_ctx *c, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
static void ctx_fail(struct load_ctx *c, int code, const char *fmt, ...)
{
	char msg[SBX_ERROR_MSG_MAX];
	va_list ap;

	if (c->err_line)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->err_line = c->lineno;
	sbx_error_set(&c->first, code, "%s:%d: %s", c->path, c->lineno, msg);
}

/* A "[name]" line: inih takes name verbatim up to the first ']'. */
static void check_section_line(struct load_ctx *c, const char *line)
{
	const char *end = strchr(line + 1, ']');
	char name[64];

	if (!end)
		return; /* inih reports the syntax error */
	if ((size_t)(end - line - 1) >= sizeof(name)) {
		ctx_fail(c, -EINVAL, "unknown section [%.*s]", (int)(end - line - 1), line + 1);
		return;
	}
	memcpy(name, line + 1, (size_t)(end - line - 1));
	name[end - line - 1] = '\0';
	if (!section_known(name))
		ctx_fail(c, -EINVAL, "unknown section [%s]", name);
}

/* An fgets for inih over the file in memory: exactly one line per call. */
static char *ctx_read_line(char *str, int num, void *stream)
{
	struct load_ctx *c = stream;
	const char *p, *nl;
	size_t n, body;

	if (c->pos >= c->len)
		return NULL;
	p = c->data + c->pos; /* data is NULL for an empty file */
	nl = memchr(p, '\n', c->len - c->pos);
	n = nl ? (size_t)(nl - p) + 1 : c->len - c->pos;
	c->pos += n;
	c->lineno++;
	if (c->lineno == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3, n -= 3;
	while (n && (*p == ' ' || *p == '\t'))
		p++, n--;
	body = n;
	while (body && (p[body - 1] == '\n' || p[body - 1] == '\r'))
		body--;
	if (memchr(p, '\0', n)) {
		ctx_fail(c, -EINVAL, "NUL byte in line");
		n = 0;
	} else if (num < 4 || body > (size_t)num - 3) {
		ctx_fail(c, -EINVAL, "line too long (max %d characters)", num - 3);
		n = 0;
	}
	/* The line's body and its newline, never its run of line ends: a
	 * short line ended by thousands of "\r" must not overrun inih's buffer. */
	if (n) {
		memcpy(str, p, body);
		n = body;
		if (nl)
			str[n++] = '\n';
	}
	str[n] = '\0';
	if (str[0] == '[')
		check_section_line(c, str);
	return str;
}

static int ctx_on_value(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *c = user;
	char where[SBX_ERROR_MSG_MAX], keys[512];
	int i;

	/* Only the first error is reported; returning nonzero leaves inih's count to syntax. */
	if (c->err_line)
		return 1;
	if (!*section) {
		ctx_fail(c, -EINVAL, "key %s outside of a [section]", name);
		return 1;
	}
	if (!section_known(section)) {
		ctx_fail(c, -EINVAL, "unknown section [%s]", section);
		return 1;
	}
	i = find_key(section, name);
	if (i < 0) {
		known_keys(section, keys, sizeof(keys));
		ctx_fail(c, -EINVAL, "unknown key %s in [%s] (known: %s)", name, section, keys);
		return 1;
	}
	if (c->set_on[i]) {
		ctx_fail(c, -EINVAL, "duplicate key %s.%s (first set on line %d)", section, name,
			 c->set_on[i]);
		return 1;
	}
	c->set_on[i] = c->lineno;
	snprintf(where, sizeof(where), "%s:%d: ", c->path, c->lineno);
	if (apply(c->s, &schema[i], value, where, &c->first) < 0)
		c->err_line = c->lineno;
	return 1;
}

static int read_bounded(const char *path, struct sbx_buf *out, struct sbx_error *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	char chunk[16384];
	struct stat st;
	int r;

	if (fd < 0) {
		r = -errno;
		return sbx_error_set(err, r, "%s: %s", path, strerror(-r));
	}
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
		return sbx_error_set(err, -EISDIR, "%s: is a directory", path);
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			return sbx_error_set(err, r, "%s: %s", path, strerror(-r));
		}
		if (n == 0)
			return 0;
		if (out->len + (size_t)n > SBX_SETTINGS_FILE_MAX)
			return sbx_error_set(err, -EFBIG, "%s: larger than %d bytes", path,
					     SBX_SETTINGS_FILE_MAX);
		r = sbx_buf_append(out, chunk, (size_t)n);
		if (r < 0)
			return sbx_error_set(err, r, "%s: out of memory", path);
	}
}

int sbx_settings_load_file(struct sbx_settings *s, const char *path, struct sbx_error *err)
{
	struct sbx_buf text = SBX_BUF_INIT;
	struct load_ctx *c;
	int r;

	r = read_bounded(path, &text, err);
	if (r < 0) {
		sbx_buf_release(&text);
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		sbx_buf_release(&text);
		return sbx_error_set(err, -ENOMEM, "%s: out of memory", path);
	}
	c->s = s;
	c->path = path;
	c->data = text.data;
	c->len = text.len;
	r = ini_parse_stream(ctx_read_line, c, ctx_on_value, c);
	if (r > 0 && (!c->err_line || r < c->err_line))
		r = sbx_error_set(
		    err, -EINVAL,
		    "%s:%d: syntax error (expected [section], key = value or a comment)", path, r);
	else if (c->err_line)
		r = sbx_error_set(err, c->first.code, "%s", c->first.msg);
	else if (r < 0)
		r = sbx_error_set(err, -ENOMEM, "%s: out of memory", path);
	free(c);
	sbx_buf_release(&text);
	return r;
}

static void trim(const char **p, size_t *n)
{
	while (*n && isspace((unsigned char)**p))
		(*p)++, (*n)--;
	while (*n && isspace((unsigned char)(*p)[*n - 1]))
		(*n)--;
}

int sbx_settings_set(struct sbx_settings *s, const char *assignment, struct sbx_error *err)
{
	const char *eq = strchr(assignment, '='), *name = assignment, *value, *dot;
	char section[SET_NAME_MAX], key[SET_NAME_MAX], where[SET_NAME_MAX + 8], keys[512];
	_cleanup_free_ char *v = NULL;
	size_t name_len, value_len;
	int i;

	if (!eq)
		return sbx_error_set(err, -EINVAL, "--set %.100s: expected section.key=value",
				     assignment);
	name_len = (size_t)(eq - assignment);
	trim(&name, &name_len);
	dot = memchr(name, '.', name_len);
	if (!dot || dot == name || dot == name + name_len - 1)
		return sbx_error_set(err, -EINVAL, "--set %.100s: expected section.key=value",
				     assignment);
	if (name_len >= SET_NAME_MAX)
		return sbx_error_set(err, -EINVAL, "--set %.100s: name too long", assignment);
	snprintf(where, sizeof(where), "--set %.*s", (int)name_len, name);
	snprintf(section, sizeof(section), "%.*s", (int)(dot - name), name);
	snprintf(key, sizeof(key), "%.*s", (int)(name + name_len - dot - 1), dot + 1);
	if (!section_known(section))
		return sbx_error_set(err, -EINVAL, "%s: unknown section [%s]", where, section);
	i = find_key(section, key);
	if (i < 0) {
		known_keys(section, keys, sizeof(keys));
		return sbx_error_set(err, -EINVAL, "%s: unknown key %s in [%s] (known: %s)", where,
				     key, section, keys);
	}
	value = eq + 1;
	value_len = strlen(value);
	trim(&value, &value_len);
	if (value_len > SET_VALUE_MAX)
		return sbx_error_set(err, -EINVAL, "%s: value longer than %d bytes", where,
				     SET_VALUE_MAX);
	/* What sbx_settings_dump writes must load again: a value no line of the
	 * file can hold is refused here too. */
	if (strlen(key) + 3 + value_len > INI_MAX_LINE - 3)
		return sbx_error_set(err, -EINVAL, "%s: value longer than a line of the file (%d)",
				     where, INI_MAX_LINE - 3);
	for (size_t j = 0; j < value_len; j++)
		if (value[j] == '\n' ||
		    (value[j] == ';' && j && isspace((unsigned char)value[j - 1])))
			return sbx_error_set(
			    err, -EINVAL,
			    "%s: a line break or \" ;\" (a comment in the file) in "
			    "the value",
			    where);
	v = strndup(value, value_len);
	if (!v)
		return sbx_error_set(err, -ENOMEM, "%s: out of memory", where);
	return apply(s, &schema[i], v, "--set ", err);
}

static int dump(const struct sbx_settings *s, FILE *out, bool redact)
{
	const char *section = NULL;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(schema); i++) {
		const struct sbx_setting *d = &schema[i];
		const void *f = (const char *)s + d->offset;
		char num[64];
		const char *v = num;

		if (!section || strcmp(section, d->section) != 0) {
			fprintf(out, "%s[%s]\n", section ? "\n" : "", d->section);
			section = d->section;
		}
		if (d->type == SBX_SETTING_STRING || d->type == SBX_SETTING_ENUM)
			v = *(char *const *)f ? *(char *const *)f : "";
		else if (d->type == SBX_SETTING_BOOL)
			v = *(const bool *)f ? "true" : "false";
		else
			format_number(d, *(const int64_t *)f, num, sizeof(num));
		if (redact && *v &&
		    d->offset == offsetof(struct sbx_settings, server.metrics_token)) {
			fprintf(out,
				"# metrics_token is shown as ***: the configuration has it\n%s = "
				"***\n",
				d->key);
			continue;
		}
		if (redact && d->offset == offsetof(struct sbx_settings, sandbox.index_url)) {
			_cleanup_free_ char *shown = url_redacted(v);
			if (shown) {
				fprintf(out,
					"# index_url's password is shown as ***: the "
					"configuration has it\n%s = %s\n",
					d->key, shown);
				continue;
			}
		}
		fprintf(out, "%s =%s%s\n", d->key, *v ? " " : "", v);
	}
	return fflush(out) == 0 && !ferror(out) ? 0 : -EIO;
}

int sbx_settings_dump(const struct sbx_settings *s, FILE *out)
{
	return dump(s, out, false);
}

int sbx_settings_dump_redacted(const struct sbx_settings *s, FILE *out)
{
	return dump(s, out, true);
}
