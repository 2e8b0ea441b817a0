/* SPDX-License-Identifier: MIT */
/*
 * Settings: defaults, files, --set, every error kind with its FILE:LINE, the
 * number parsers' edges, and etc/mcp-sandbox.ini (from $SBX_SRCDIR or argv[1]).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/settings.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test-settings.XXXXXX";
static char path[sizeof(tmpdir) + 32];

static char *dump(const struct sbx_settings *s)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f || sbx_settings_dump(s, f) < 0)
		tap_bail("dump");
	fclose(f);
	return text;
}

static void write_file(const char *text)
{
	FILE *f = fopen(path, "we");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		tap_bail("cannot write the temporary settings file");
}

/* Load text (as a fresh file) on top of defaults into s; returns the result. */
static int load_text(struct sbx_settings *s, const char *text, struct sbx_error *err)
{
	write_file(text);
	sbx_error_clear(err);
	if (sbx_settings_init(s) < 0)
		tap_bail("init");
	return sbx_settings_load_file(s, path, err);
}

static void expect_load_error(const char *text, const char *msg, const char *what)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	char want[512];
	int r = load_text(&s, text, &err);

	snprintf(want, sizeof(want), "%s:%s", path, msg);
	tap_ok(r == -EINVAL && strncmp(err.msg, want, strlen(want)) == 0, "%s: %s", what, err.msg);
	if (strncmp(err.msg, want, strlen(want)) != 0)
		tap_diag("  expected a message starting with \"%s\"", want);
	sbx_settings_release(&s);
}

static void test_defaults(void)
{
	struct sbx_settings s, t;
	struct sbx_error err = SBX_ERROR_INIT;
	char *a, *b;

	tap_is_int(sbx_settings_init(&s), 0, "init");
	tap_is_str(s.engine.type, "docker", "engine.type");
	tap_is_str(s.engine.socket, "", "engine.socket");
	tap_is_str(s.engine.api_version, "", "engine.api_version");
	tap_is_int(s.engine.timeout_ms, 60000, "engine.timeout");
	tap_is_str(s.server.listen, "127.0.0.1", "server.listen");
	tap_is_int(s.server.port, 8000, "server.port");
	tap_is_str(s.server.public_url, "", "server.public_url");
	tap_is_int(s.server.max_body, 4 << 20, "server.max_body");
	tap_is_str(s.server.allowed_origins, "", "server.allowed_origins");
	tap_is_int(s.server.max_connections, 4096, "server.max_connections");
	tap_is_int(s.server.max_connections_per_ip, 512,
		   "server.max_connections_per_ip: 50 agents behind one address each hold a "
		   "stream and 8 calls");
	tap_is_int(s.server.max_calls_per_session, 8, "server.max_calls_per_session");
	tap_is_str(s.sandbox.image, "localhost/mcp-sandbox:latest", "sandbox.image");
	tap_is_int(s.sandbox.memory, 512 << 20, "sandbox.memory");
	tap_is_int(s.sandbox.nano_cpus, 1000000000, "sandbox.cpus");
	tap_is_int(s.sandbox.pids_limit, 256, "sandbox.pids_limit");
	tap_is_str(s.sandbox.network, "none", "sandbox.network");
	tap_is_int(s.sandbox.exec_timeout_ms, 60000, "sandbox.exec_timeout");
	tap_is_int(s.sandbox.output_cap, 1 << 20, "sandbox.output_cap");
	tap_is_int(s.sandbox.image_inline_max, 1 << 20, "sandbox.image_inline_max");
	tap_ok(s.quota.sandboxes == 0 && s.quota.calls == 0 && s.quota.memory == 0 &&
		   s.quota.nano_cpus == 0 && s.quota.installs == 0,
	       "[quota]: every default is 0 (no quota)");
	tap_is_int(s.sandbox.interrupt_grace_ms, 2000, "sandbox.interrupt_grace");
	tap_is_int(s.sandbox.max_exec_timeout_ms, 600000, "sandbox.max_exec_timeout");
	tap_is_int(s.sandbox.idle_timeout_ms, 30 * 60000, "sandbox.idle_timeout");
	tap_is_int(s.sandbox.sleep_lifetime_ms, 7 * 24 * 3600000LL, "sandbox.sleep_lifetime");
	tap_is_int(s.sandbox.max_lifetime_ms, 24 * 3600000LL, "sandbox.max_lifetime");
	tap_is_str(s.sandbox.upload_dir, "", "sandbox.upload_dir");
	tap_is_str(s.sandbox.index_url, "https://pypi.org/simple/", "sandbox.index_url");
	tap_is_str(s.sandbox.egress_allow, "", "sandbox.egress_allow");
	tap_is_int(s.sandbox.egress_connections, 512, "sandbox.egress_connections");
	tap_is_int(s.sandbox.egress_connections_per_tenant, 64,
		   "sandbox.egress_connections_per_tenant");
	tap_is_int(s.sandbox.egress_tunnel_lifetime_ms, 3600000, "sandbox.egress_tunnel_lifetime");
	tap_is_int(s.sandbox.egress_hello_timeout_ms, 15000, "sandbox.egress_hello_timeout");
	tap_is_int(s.server.stop_timeout_ms, 10000, "server.stop_timeout");
	tap_is_int(s.sandbox.egress_head_timeout_ms, 10000, "sandbox.egress_head_timeout");
	tap_is_int(s.sandbox.egress_write_timeout_ms, 30000, "sandbox.egress_write_timeout");
	tap_is_int(s.sandbox.egress_low_speed_time_ms, 30000, "sandbox.egress_low_speed_time");
	tap_is_int(s.sandbox.egress_page_timeout_ms, 60000, "sandbox.egress_page_timeout");

	a = dump(&s);
	tap_ok(strstr(a, "[engine]\ntype = docker\nsocket =\n") != NULL, "dump is INI");
	tap_ok(load_text(&t, a, &err) == 0, "the dump loads back (%s)", err.msg);
	b = dump(&t);
	tap_is_str(b, a, "and gives the same settings");
	free(a);
	free(b);
	sbx_settings_release(&t);
	sbx_settings_release(&s);
	sbx_settings_release(&s);
	tap_ok(s.engine.type == NULL, "release zeroes and may be repeated");
}

static void test_load(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	int r;

	r = load_text(&s,
		      "\xEF\xBB\xBF"
		      "; a comment after a BOM\n"
		      "# another\n"
		      "[engine]\n"
		      "type = podman ; inline comment\n"
		      "  socket = unix:///run/podman/podman.sock\n"
		      "timeout=500ms\r\n"
		      "\n"
		      "[sandbox]\n"
		      "memory = 1g\n"
		      "cpus = 0.25\n"
		      "exec_timeout = 2m\n"
		      "index_url = https://pypi.example/simple\n"
		      "[server]\n"
		      "port: 9000\n"
		      "max_body = 64k",
		      &err);
	tap_ok(r == 0, "load a file (%s)", err.msg);
	tap_is_str(s.engine.type, "podman", "enum with an inline comment");
	tap_is_str(s.engine.socket, "unix:///run/podman/podman.sock",
		   "an indented key is a key, not a continuation");
	tap_is_int(s.engine.timeout_ms, 500, "CRLF line, no spaces");
	tap_is_int(s.sandbox.memory, 1LL << 30, "size 1g");
	tap_is_int(s.sandbox.nano_cpus, 250000000, "cpus 0.25");
	tap_is_int(s.sandbox.exec_timeout_ms, 120000, "duration 2m");
	tap_is_int(s.server.port, 9000, "key: value form");
	tap_is_int(s.server.max_body, 65536, "last line without a newline");
	tap_is_str(s.sandbox.image, "localhost/mcp-sandbox:latest", "untouched keys keep defaults");
	sbx_settings_release(&s);

	/* Its text is a NULL buffer: no pointer arithmetic on it (clang's UBSan
	 * caught NULL + 0 in the line reader, tests/fuzz/fuzz-settings). */
	r = load_text(&s, "", &err);
	tap_ok(r == 0 && strcmp(s.engine.type, "docker") == 0, "an empty file is fine");
	sbx_settings_release(&s);
}

static void test_file_errors(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	char longline[400];
	int r;

	expect_load_error("[engine]\ntype = docker\n\n[bogus]\nx = 1\n",
			  "4: unknown section [bogus]", "unknown section");
	expect_load_error("[engine]\n[empty]\n", "2: unknown section [empty]",
			  "unknown section without keys");
	expect_load_error("[engine]\ntype = docker\ncolour = blue\n",
			  "3: unknown key colour in [engine] (known: type, socket, api_version, "
			  "timeout, tls_ca, tls_cert, tls_key)",
			  "unknown key");
	expect_load_error("port = 1\n", "1: key port outside of a [section]",
			  "key before a section");
	expect_load_error("[server]\nport = 70000\n",
			  "2: server.port: bad value \"70000\": expected an integer in 0..65535",
			  "int out of range");
	expect_load_error("[server]\nmax_connections = 4\n",
			  "2: server.max_connections: bad value \"4\": expected an integer in "
			  "8..65536",
			  "max_connections below its floor");
	expect_load_error("[server]\nmax_calls_per_session = 0\n",
			  "2: server.max_calls_per_session: bad value \"0\": expected an integer "
			  "in 1..256",
			  "max_calls_per_session below its floor");
	expect_load_error("[server]\nmax_calls_per_session = 257\n",
			  "2: server.max_calls_per_session: bad value \"257\": expected an "
			  "integer in 1..256",
			  "max_calls_per_session above its ceiling");
	expect_load_error("[engine]\ntype = lxc\n",
			  "2: engine.type: bad value \"lxc\": expected one of: docker podman",
			  "enum word");
	expect_load_error("[sandbox]\nmemory = 12q\n",
			  "2: sandbox.memory: bad value \"12q\": expected a size (suffix k, m or "
			  "g) of at least 6m",
			  "size suffix");
	expect_load_error("[engine]\ntimeout = 60\n",
			  "2: engine.timeout: bad value \"60\": expected a duration (suffix ms, s "
			  "or m) in 1ms..60m",
			  "duration without a unit");
	expect_load_error("[engine]\nsocket = http://x\n",
			  "2: engine.socket: bad value \"http://x\": expected unix:///PATH, /PATH "
			  "or tcp://HOST:PORT",
			  "socket form");
	expect_load_error(
	    "[server]\nstate_dir = var/lib/x\n",
	    "2: server.state_dir: bad value \"var/lib/x\": expected an absolute path, "
	    "or empty",
	    "a relative state folder");
	expect_load_error("[sandbox]\npool_size = 65\n",
			  "2: sandbox.pool_size: bad value \"65\": expected an integer in 0..64",
			  "pool size bounded");
	expect_load_error("[sandbox]\ncpus = 1\nimage = a\n\ncpus = 2\n",
			  "5: duplicate key sandbox.cpus (first set on line 2)", "duplicate key");
	expect_load_error("[sandbox]\ncpus = 1\n[engine]\n[sandbox]\ncpus = 2\n",
			  "5: duplicate key sandbox.cpus", "duplicate key across sections");
	expect_load_error("[server]\nport = 1\njust words\nport = 2\n",
			  "3: syntax error (expected [section], key = value or a comment)",
			  "syntax error");
	expect_load_error("[server\n", "1: syntax error", "unterminated section");
	expect_load_error("[server]\nport = x\njunk\n", "2: server.port: bad value",
			  "the first error wins over a later syntax error");
	expect_load_error("[server]\njunk\nport = x\n", "2: syntax error",
			  "the first error wins over a later bad value");
	expect_load_error("[server]\nlisten = \n\nlisten = ::\n", "4: duplicate key",
			  "duplicate of an empty value");
	memset(longline, 'a', sizeof(longline));
	memcpy(longline, "[sandbox]\nimage = ", 18);
	strcpy(longline + 250, "\nnetwork = x\n");
	expect_load_error(longline, "2: line too long (max 197 characters)", "line too long");
	{
		/* A short line and a long run of line ends (found by
		 * fuzz-settings): read as the short line, nothing past inih's
		 * buffer. */
		static char crs[8192];
		memcpy(crs, "[sandbox]\nimage = crs", 21);
		memset(crs + 21, '\r', sizeof(crs) - 40);
		strcpy(crs + sizeof(crs) - 19, "\n[server]\nport = 7");
		r = load_text(&s, crs, &err);
		tap_ok(r == 0 && !strcmp(s.sandbox.image, "crs") && s.server.port == 7,
		       "a line ended by 8,000 carriage returns (%s)", err.msg);
		sbx_settings_release(&s);
	}
	{
		FILE *f = fopen(path, "we");
		fwrite("[sandbox]\nimage = a\0b\n", 1, 22, f);
		fclose(f);
	}
	sbx_settings_init(&s);
	sbx_error_clear(&err);
	r = sbx_settings_load_file(&s, path, &err);
	tap_ok(r == -EINVAL && strstr(err.msg, ":2: NUL byte in line"), "NUL in the file (%s)",
	       err.msg);
	sbx_settings_release(&s);

	sbx_settings_init(&s);
	sbx_error_clear(&err);
	r = sbx_settings_load_file(&s, "/nonexistent/mcp-sandbox.ini", &err);
	tap_is_int(r, -ENOENT, "a missing file is ENOENT");
	tap_ok(strstr(err.msg, "/nonexistent/mcp-sandbox.ini") != NULL, "naming the path: %s",
	       err.msg);
	sbx_error_clear(&err);
	r = sbx_settings_load_file(&s, tmpdir, &err);
	tap_is_int(r, -EISDIR, "a directory is refused (%s)", err.msg);
	tap_is_int(sbx_settings_load_file(&s, "/nonexistent", NULL), -ENOENT, "err may be NULL");
	sbx_settings_release(&s);
}

/* One --set against defaults; returns the result, the value of field via get. */
static int set1(const char *assignment, struct sbx_settings *s, struct sbx_error *err)
{
	sbx_error_clear(err);
	if (sbx_settings_init(s) < 0)
		tap_bail("init");
	return sbx_settings_set(s, assignment, err);
}

#define SET_OK(assign, field, want)                                                                \
	do {                                                                                       \
		struct sbx_settings _s;                                                            \
		struct sbx_error _e = SBX_ERROR_INIT;                                              \
		int _r = set1(assign, &_s, &_e);                                                   \
		tap_ok(_r == 0 && _s.field == (want), "%s -> %s (%s)", assign, #want, _e.msg);     \
		if (_r == 0 && _s.field != (want))                                                 \
			tap_diag("  got %" PRId64, (int64_t)_s.field);                             \
		sbx_settings_release(&_s);                                                         \
	} while (0)

static void set_fails(const char *assign, const char *msg)
{
	struct sbx_settings s;
	struct sbx_error err = SBX_ERROR_INIT;
	char *before, *after;
	int r;

	sbx_settings_init(&s);
	before = dump(&s);
	r = sbx_settings_set(&s, assign, &err);
	after = dump(&s);
	tap_ok(r == -EINVAL && strncmp(err.msg, msg, strlen(msg)) == 0 &&
		   strcmp(before, after) == 0,
	       "--set %s is refused: %s", assign, err.msg);
	if (strncmp(err.msg, msg, strlen(msg)) != 0)
		tap_diag("  expected a message starting with \"%s\"", msg);
	free(before);
	free(after);
	sbx_settings_release(&s);
}

static void test_set(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;

	write_file("[server]\nport = 9000\nlisten = 0.0.0.0\n");
	sbx_settings_init(&s);
	tap_ok(sbx_settings_load_file(&s, path, &err) == 0, "load");
	tap_ok(sbx_settings_set(&s, "server.port=9100", &err) == 0, "--set after the file");
	tap_ok(sbx_settings_set(&s, " engine.type = podman ", &err) == 0, "--set with spaces");
	tap_ok(sbx_settings_set(&s, "sandbox.network=a=b", &err) == 0, "value with '='");
	tap_ok(sbx_settings_set(&s, "server.listen=", &err) == 0, "empty value");
	tap_is_int(s.server.port, 9100, "--set overrides the file");
	tap_is_str(s.engine.type, "podman", "trimmed");
	tap_is_str(s.sandbox.network, "a=b", "split at the first '='");
	tap_is_str(s.server.listen, "", "string emptied");
	tap_ok(sbx_settings_set(&s, "server.port=9200", &err) == 0 && s.server.port == 9200,
	       "--set twice: the last wins");
	sbx_settings_release(&s);

	set_fails("server.port", "--set server.port: expected section.key=value");
	set_fails("port=1", "--set port=1: expected section.key=value");
	set_fails(".port=1", "--set .port=1: expected section.key=value");
	set_fails("server.=1", "--set server.=1: expected section.key=value");
	set_fails("bogus.port=1", "--set bogus.port: unknown section [bogus]");
	set_fails("server.colour=1",
		  "--set server.colour: unknown key colour in [server] (known: "
		  "listen, port, public_url, max_body, body_timeout, body_min_rate, "
		  "allowed_origins, instance, session_timeout, stop_timeout, max_sessions, "
		  "max_sessions_per_ip, "
		  "max_sessions_per_tenant, "
		  "max_connections, max_connections_per_ip, max_calls_per_session, "
		  "stream_stall_timeout, max_queued, max_downloads, max_downloads_per_ip, "
		  "download_min_rate, "
		  "state_dir, link_ttl, unsigned_links, "
		  "resource_max_bytes, resource_list_time, audit_log, log_level, log_format, "
		  "metrics_token)");
	set_fails("server.port=x", "--set server.port: bad value \"x\": expected an integer in "
				   "0..65535");
	set_fails("sandbox.image=a\tb", "--set sandbox.image: bad value \"a\tb\": "
					"control characters are not allowed");
	set_fails("server.public_url=ftp://x", "--set server.public_url: bad "
					       "value \"ftp://x\": expected an http:// or "
					       "https:// URL");
	set_fails("sandbox.index_url=", "--set sandbox.index_url: bad value \"\": expected an "
					"http:// or https:// URL with a host");
	set_fails("sandbox.index_url=https://x/simple/?a=b", "--set sandbox.index_url: bad value");
	set_fails("sandbox.index_url=ftp://x/", "--set sandbox.index_url: bad value");
	{
		struct sbx_settings t;
		sbx_settings_init(&t);
		tap_ok(sbx_settings_set(
			   &t, "sandbox.index_url=https://u:p%40ss@idx.example:8443/r/simple/",
			   &err) == 0,
		       "an index URL with user:password and a port (%s)", err.msg);
		sbx_settings_release(&t);
	}
	set_fails("sandbox.index_files_path=packages/",
		  "--set sandbox.index_files_path: bad value \"packages/\": expected empty or a "
		  "path such as /packages/ (it does not start with /)");
	set_fails("sandbox.index_files_path=/simple/../admin/",
		  "--set sandbox.index_files_path: bad value \"/simple/../admin/\": expected empty "
		  "or a path such as /packages/ (a dot segment (. or ..))");
	set_fails("sandbox.index_files_path=/p/?x", "--set sandbox.index_files_path: bad value");
	set_fails("sandbox.egress_connections_per_tenant=0",
		  "--set sandbox.egress_connections_per_tenant: bad value \"0\": expected an "
		  "integer in 1..65536");
	set_fails("sandbox.egress_tunnel_lifetime=0s",
		  "--set sandbox.egress_tunnel_lifetime: bad value");
	set_fails("sandbox.egress_allow=a.example,,b",
		  "--set sandbox.egress_allow: bad value "
		  "\"a.example,,b\": entry \"\": an empty host");
	set_fails("sandbox.egress_allow=a.example:0",
		  "--set sandbox.egress_allow: bad value "
		  "\"a.example:0\": entry \"a.example:0\": a bad port");
	set_fails("sandbox.egress_allow=a_b.example",
		  "--set sandbox.egress_allow: bad value "
		  "\"a_b.example\": entry \"a_b.example\": a bad "
		  "host name");
	set_fails("sandbox.egress_allow=[::1", "--set sandbox.egress_allow: bad value \"[::1\": "
					       "entry \"[::1\": a bad IPv6 address");
	{
		struct sbx_settings t;
		sbx_settings_init(&t);
		tap_ok(sbx_settings_set(&t,
					"sandbox.egress_allow=api.example.com, *.Example.org:8443,"
					"127.0.0.1:9,[::1]:443",
					&err) == 0,
		       "egress_allow with names, a wildcard, ports, IPv4 and IPv6 (%s)", err.msg);
		sbx_settings_release(&t);
	}
	/* Only what the file can hold, so that a dump loads again (the fuzzer's
	 * round trip, tests/fuzz/fuzz-settings). */
	{
		char set[300];
		snprintf(set, sizeof(set), "engine.socket=tcp://%0190d", 0);
		set_fails(set, "--set engine.socket: value longer than a line of the file (197)");
	}
	set_fails("server.allowed_origins=http://a ;http://b",
		  "--set server.allowed_origins: a line break or \" ;\" (a comment in the file) "
		  "in the value");
	set_fails("server.instance=a\nb", "--set server.instance: a line break or \" ;\" (a "
					  "comment in the file) in the value");
	tap_is_int(sbx_settings_set(&s, "x", NULL), -EINVAL, "err may be NULL");
}

static void test_numbers(void)
{
	/* int */
	SET_OK("server.port=1", server.port, 1);
	SET_OK("server.port=65535", server.port, 65535);
	SET_OK("server.port=08080", server.port, 8080);
	set_fails("server.port=-1", "--set server.port: bad value \"-1\"");
	set_fails("server.port=65536", "--set server.port: bad value");
	set_fails("server.port=-1", "--set server.port: bad value");
	set_fails("server.port=+80", "--set server.port: bad value");
	set_fails("server.port=80x", "--set server.port: bad value");
	set_fails("server.port=8 0", "--set server.port: bad value");
	set_fails("server.port=99999999999999999999999", "--set server.port: bad");
	set_fails("sandbox.pids_limit=-9223372036854775808", "--set sandbox.pids_limit: bad value");

	/* size */
	SET_OK("sandbox.output_cap=1024", sandbox.output_cap, 1024);
	SET_OK("sandbox.output_cap=1k", sandbox.output_cap, 1024);
	SET_OK("sandbox.output_cap=3K", sandbox.output_cap, 3072);
	SET_OK("sandbox.output_cap=2M", sandbox.output_cap, 2 << 20);
	SET_OK("sandbox.output_cap=1g", sandbox.output_cap, 1 << 30);
	SET_OK("sandbox.memory=8589934591g", sandbox.memory, INT64_C(8589934591) << 30);
	SET_OK("sandbox.memory=9223372036854775807", sandbox.memory, INT64_MAX);
	set_fails("sandbox.memory=8589934592g",
		  "--set sandbox.memory: bad value \"8589934592g\": expected a "
		  "size (suffix k, m or g) of at least 6m");
	set_fails("sandbox.memory=9223372036854775808", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=18446744073709551616", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=-1m", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=1mb", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=1 m", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=1.5g", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=m", "--set sandbox.memory: bad");
	set_fails("sandbox.memory=5m", "--set sandbox.memory: bad value \"5m\"");
	set_fails("sandbox.output_cap=2g", "--set sandbox.output_cap: bad value \"2g\": expected a "
					   "size (suffix k, m or g) in 1k..1g");

	/* duration */
	SET_OK("engine.timeout=1ms", engine.timeout_ms, 1);
	SET_OK("engine.timeout=30s", engine.timeout_ms, 30000);
	SET_OK("engine.timeout=5m", engine.timeout_ms, 300000);
	SET_OK("engine.timeout=60m", engine.timeout_ms, 3600000);
	SET_OK("sandbox.exec_timeout=1500MS", sandbox.exec_timeout_ms, 1500);
	SET_OK("sandbox.egress_tunnel_lifetime=2s", sandbox.egress_tunnel_lifetime_ms, 2000);
	SET_OK("sandbox.egress_connections_per_tenant=3", sandbox.egress_connections_per_tenant, 3);
	SET_OK("sandbox.idle_timeout=0s", sandbox.idle_timeout_ms, 0);
	SET_OK("sandbox.sleep_lifetime=0s", sandbox.sleep_lifetime_ms, 0);
	SET_OK("sandbox.sleep_lifetime=525600m", sandbox.sleep_lifetime_ms, 365 * 24 * 3600000LL);
	set_fails("sandbox.sleep_lifetime=525601m",
		  "--set sandbox.sleep_lifetime: bad value \"525601m\": expected a duration "
		  "(suffix ms, s or m) in 0ms..525600m");
	SET_OK("sandbox.max_lifetime=0m", sandbox.max_lifetime_ms, 0);
	set_fails("engine.timeout=61m", "--set engine.timeout: bad value \"61m\": "
					"expected a duration (suffix ms, s or m) in 1ms..60m");
	set_fails("engine.timeout=0s", "--set engine.timeout: bad");
	set_fails("engine.timeout=-1s", "--set engine.timeout: bad");
	set_fails("engine.timeout=1h", "--set engine.timeout: bad");
	set_fails("engine.timeout=1sec", "--set engine.timeout: bad");
	set_fails("engine.timeout=153722867280912931m", "--set engine.timeout: bad");
	set_fails("engine.timeout=s", "--set engine.timeout: bad");

	/* cpus */
	SET_OK("sandbox.cpus=2", sandbox.nano_cpus, 2000000000);
	SET_OK("sandbox.cpus=0.5", sandbox.nano_cpus, 500000000);
	SET_OK("sandbox.cpus=0.01", sandbox.nano_cpus, 10000000);
	SET_OK("sandbox.cpus=1.000000001", sandbox.nano_cpus, 1000000001);
	SET_OK("sandbox.cpus=1024", sandbox.nano_cpus, INT64_C(1024000000000));
	SET_OK("sandbox.cpus=007.50", sandbox.nano_cpus, 7500000000);
	set_fails("sandbox.cpus=0.009",
		  "--set sandbox.cpus: bad value \"0.009\": expected a number of "
		  "CPUs (up to 9 decimals) in 0.01..1024");
	set_fails("sandbox.cpus=1024.000000001", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=1.0000000001", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=-1", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=1.", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=.5", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=1e3", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=1,5", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=9223372037", "--set sandbox.cpus: bad");
	set_fails("sandbox.cpus=99999999999999999999.5", "--set sandbox.cpus: bad");

	/* [quota]: 0 is no quota, else what the server's own limits take */
	SET_OK("quota.memory=0", quota.memory, 0);
	SET_OK("quota.memory=6m", quota.memory, 6 << 20);
	SET_OK("quota.memory=4g", quota.memory, INT64_C(4) << 30);
	set_fails("quota.memory=5m", "--set quota.memory: bad value \"5m\": expected 0 (no "
				     "quota) or a size of at least 6m");
	set_fails("quota.memory=1", "--set quota.memory: bad value \"1\": expected 0");
	set_fails("quota.memory=-1", "--set quota.memory: bad value \"-1\": expected a size");
	SET_OK("quota.cpus=0", quota.nano_cpus, 0);
	SET_OK("quota.cpus=0.01", quota.nano_cpus, 10000000);
	SET_OK("quota.cpus=0.5", quota.nano_cpus, 500000000);
	set_fails("quota.cpus=0.009", "--set quota.cpus: bad value \"0.009\": expected 0 (no "
				      "quota) or a number of CPUs of at least 0.01");
	set_fails("quota.cpus=1025", "--set quota.cpus: bad value \"1025\": expected a number");
	SET_OK("quota.calls=0", quota.calls, 0);
	SET_OK("quota.calls=3", quota.calls, 3);
	SET_OK("quota.sandboxes=1000000", quota.sandboxes, 1000000);
	SET_OK("quota.installs=2", quota.installs, 2);
	set_fails("quota.installs=1000001", "--set quota.installs: bad value \"1000001\": "
					    "expected an integer in 0..1000000");
	set_fails("quota.calls=-1", "--set quota.calls: bad value");
	set_fails("quota.rate=1", "--set quota.rate: unknown key rate in [quota] (known: "
				  "sandboxes, calls, memory, cpus, installs)");

	/* strings with a check */
	{
		struct sbx_settings s;
		struct sbx_error err = SBX_ERROR_INIT;
		static const char *const ok[] = {"unix:///run/docker.sock", "/run/docker.sock",
						 "tcp://10.0.0.2:2375", ""};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++) {
			char a[128];
			snprintf(a, sizeof(a), "engine.socket=%s", ok[i]);
			tap_ok(set1(a, &s, &err) == 0 && strcmp(s.engine.socket, ok[i]) == 0,
			       "socket \"%s\" accepted", ok[i]);
			sbx_settings_release(&s);
		}
	}
	set_fails("engine.socket=tcp://", "--set engine.socket: bad");
	set_fails("engine.socket=unix://relative", "--set engine.socket: bad");
	set_fails("engine.socket=docker.sock", "--set engine.socket: bad");
}

/* A value of d other than its default, spelled for --set. */
static void non_default(const struct sbx_setting *d, char *out, size_t n)
{
	switch (d->type) {
	case SBX_SETTING_STRING:
		snprintf(out, n, "%s",
			 strcmp(d->key, "socket") == 0		   ? "/x.sock"
			 : strcmp(d->key, "instance") == 0	   ? "x"
			 : strcmp(d->key, "state_dir") == 0	   ? "/x"
			 : strcmp(d->key, "keys_file") == 0	   ? "/x"
			 : strcmp(d->key, "audit_log") == 0	   ? "/x"
			 : strcmp(d->key, "runtime") == 0	   ? "runsc"
			 : strcmp(d->key, "egress_allow") == 0	   ? "x.example"
			 : strcmp(d->key, "index_files_path") == 0 ? "/x/"
			 : strcmp(d->key, "metrics_token") == 0	   ? "x-metrics-token-0123"
			 : strncmp(d->key, "tls_", 4) == 0	   ? "/x.pem"
								   : "http://x");
		break;
	case SBX_SETTING_ENUM:
		snprintf(out, n, "%s", strcmp(d->words[0], d->def) ? d->words[0] : d->words[1]);
		break;
	case SBX_SETTING_BOOL:
		snprintf(out, n, "%s", strcmp(d->def, "true") ? "true" : "false");
		break;
	case SBX_SETTING_CPUS:
		snprintf(out, n, "%s", strcmp(d->def, "3") ? "3" : "2");
		break;
	case SBX_SETTING_INT:
		snprintf(out, n, "%" PRId64, d->min + 1);
		break;
	case SBX_SETTING_SIZE: /* 8m: quota.memory takes 0 or 6m and more */
		snprintf(out, n, "%" PRId64, d->min + 8 * 1024 * 1024);
		break;
	case SBX_SETTING_DURATION:
		snprintf(out, n, "%" PRId64 "ms", d->min + 1);
		break;
	}
}

static void test_shipped_file(const char *srcdir)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings def, s;
	char ini[4096], *a, *b, *text;
	const struct sbx_setting *schema;
	size_t n, len = 0;
	FILE *f;
	bool all_changed = true, all_help = true;

	snprintf(ini, sizeof(ini), "%s/etc/mcp-sandbox.ini", srcdir);
	sbx_settings_init(&def);
	sbx_settings_init(&s);
	tap_ok(sbx_settings_load_file(&s, ini, &err) == 0, "load %s (%s)", ini, err.msg);
	a = dump(&def);
	b = dump(&s);
	tap_is_str(b, a, "the shipped file gives the defaults");
	free(b);

	/* Move every key off its default; the file must bring each one back. */
	schema = sbx_settings_schema(&n);
	for (size_t i = 0; i < n; i++) {
		char assign[256], v[64];
		non_default(&schema[i], v, sizeof(v));
		snprintf(assign, sizeof(assign), "%s.%s=%s", schema[i].section, schema[i].key, v);
		if (sbx_settings_set(&s, assign, &err) < 0) {
			tap_diag("%s: %s", assign, err.msg);
			all_changed = false;
		}
	}
	b = dump(&s);
	tap_ok(all_changed && strcmp(a, b) != 0, "every key can be moved off its default");
	free(b);
	tap_ok(sbx_settings_load_file(&s, ini, &err) == 0, "load again");
	b = dump(&s);
	tap_is_str(b, a, "the shipped file sets every key");
	free(a);
	free(b);

	f = fopen(ini, "re");
	text = NULL;
	if (!f || getdelim(&text, &len, '\0', f) < 0)
		tap_bail("read the shipped file");
	fclose(f);
	for (size_t i = 0; i < n; i++) {
		char comment[256];
		snprintf(comment, sizeof(comment), "\n# %s", schema[i].help);
		if (!strstr(text, comment)) {
			tap_diag("no \"# %s\"", schema[i].help);
			all_help = false;
		}
	}
	tap_ok(all_help, "every key is commented with its help text");
	free(text);
	sbx_settings_release(&def);
	sbx_settings_release(&s);
}

/* The index's password: shown as *** by the dump for people (--dump) and
 * in a refusal's message; the plain dump keeps it (it must load back). */
static void test_index_password(void)
{
	struct sbx_settings s, t;
	struct sbx_error err = SBX_ERROR_INIT;
	char *text = NULL, *plain;
	size_t len = 0;
	FILE *f;

	sbx_settings_init(&s); /* t: load_text makes it */
	tap_call(sbx_settings_set(
		     &s, "sandbox.index_url=https://bob:pw-S3cr3t-9@idx.example/simple/", &err),
		 err.msg, "an index URL with user:password");
	f = open_memstream(&text, &len);
	if (!f || sbx_settings_dump_redacted(&s, f) < 0)
		tap_bail("dump");
	fclose(f);
	tap_ok(!strstr(text, "pw-S3cr3t-9") &&
		   strstr(text, "\n# index_url's password is shown as ***: the configuration has "
				"it\nindex_url = https://bob:***@idx.example/simple/\n"),
	       "the dump for people shows the password as *** after a note");
	tap_ok(load_text(&t, text, &err) == 0 &&
		   !strcmp(t.sandbox.index_url, "https://bob:***@idx.example/simple/"),
	       "and still loads (%s)", err.msg);
	plain = dump(&s);
	tap_ok(strstr(plain, "index_url = https://bob:pw-S3cr3t-9@idx.example/simple/\n") != NULL,
	       "the plain dump (a round trip) keeps it");
	free(plain);
	free(text);
	sbx_settings_release(&s);
	sbx_settings_release(&t);

	sbx_settings_init(&s);
	text = NULL;
	f = open_memstream(&text, &len);
	if (!f || sbx_settings_dump_redacted(&s, f) < 0)
		tap_bail("dump");
	fclose(f);
	plain = dump(&s);
	tap_is_str(text, plain, "without a password both dumps are the same");
	free(plain);
	free(text);
	tap_ok(sbx_settings_set(&s, "sandbox.index_url=https://bob:pw-S3cr3t-9@idx.example/s/?q=1",
				&err) == -EINVAL &&
		   !strstr(err.msg, "pw-S3cr3t-9") && strstr(err.msg, "bob:***@idx.example"),
	       "a refused index URL's message has no password: %s", err.msg);
	sbx_settings_release(&s);
}

/* The metrics token: a secret like the index's password (*** in --dump,
 * never in a refusal's message); too short or with spaces: refused. */
static void test_metrics_token(void)
{
	struct sbx_settings s;
	struct sbx_error err = SBX_ERROR_INIT;
	char *text = NULL, *plain;
	size_t len = 0;
	FILE *f;

	sbx_settings_init(&s);
	tap_call(sbx_settings_set(&s, "server.metrics_token=tok-S3cr3t-0123456789", &err), err.msg,
		 "a metrics token");
	f = open_memstream(&text, &len);
	if (!f || sbx_settings_dump_redacted(&s, f) < 0)
		tap_bail("dump");
	fclose(f);
	tap_ok(!strstr(text, "tok-S3cr3t") &&
		   strstr(text, "\n# metrics_token is shown as ***: the configuration has it\n"
				"metrics_token = ***\n"),
	       "the dump for people shows the metrics token as *** after a note");
	plain = dump(&s);
	tap_ok(strstr(plain, "metrics_token = tok-S3cr3t-0123456789\n") != NULL,
	       "the plain dump keeps it");
	free(plain);
	free(text);
	tap_ok(sbx_settings_set(&s, "server.metrics_token=short-S3cr3t", &err) == -EINVAL &&
		   !strstr(err.msg, "S3cr3t") && strstr(err.msg, "server.metrics_token") &&
		   strstr(err.msg, "16..256"),
	       "a token too short is refused, its value not shown: %s", err.msg);
	tap_ok(sbx_settings_set(&s, "server.metrics_token=has a space in-S3cr3t-0123", &err) ==
		       -EINVAL &&
		   !strstr(err.msg, "S3cr3t"),
	       "a token with spaces is refused: %s", err.msg);
	tap_is_str(s.server.metrics_token, "tok-S3cr3t-0123456789", "and the token stays");
	sbx_settings_release(&s);
}

int main(int argc, char **argv)
{
	const char *srcdir = argc > 1 ? argv[1] : getenv("SBX_SRCDIR");

	if (!mkdtemp(tmpdir))
		tap_bail("mkdtemp");
	snprintf(path, sizeof(path), "%s/test.ini", tmpdir);
	test_defaults();
	test_load();
	test_file_errors();
	test_set();
	test_numbers();
	test_index_password();
	test_metrics_token();
	test_shipped_file(srcdir && *srcdir ? srcdir : ".");
	unlink(path);
	rmdir(tmpdir);
	return tap_done();
}
