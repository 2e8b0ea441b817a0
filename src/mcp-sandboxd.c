/* SPDX-License-Identifier: MIT */
/*
 * mcp-sandboxd: the MCP server. Loads the configuration, opens the engine,
 * adopts this instance's sandboxes, serves MCP over HTTP (legacy SSE on
 * /sse + /messages, Streamable HTTP on /mcp, artifacts, /health, /ready) until
 * SIGINT or SIGTERM, then stops cleanly (removing its sandboxes when
 * sandbox.remove_on_exit).
 *
 * The stop: the first SIGINT/SIGTERM stops the HTTP front, which cancels
 * every call in flight as notifications/cancelled would (the code gets a
 * KeyboardInterrupt, commands are killed) and waits for them, then frees the
 * manager, which removes the sandboxes; status 0. It may take
 * server.stop_timeout: past that (a call that ignores its cancellation, an
 * engine that hangs) the server removes this instance's containers for at
 * most SBX_STOP_SWEEP_MS and exits with status 1. A second SIGINT/SIGTERM
 * exits at once, status 128 + the signal: it skips waiting for the calls
 * and the orderly teardown (the interpreters' ends, the manager's own
 * removal, waiting for installs); it still removes this instance's
 * containers for at most SBX_STOP_SWEEP_MS when sandbox.remove_on_exit, and
 * whatever is left carries the instance's labels, so that the next start on
 * this instance adopts it (or removes it, for a pool container never handed
 * out). With remove_on_exit false nothing is removed: the sandboxes are
 * meant to outlive the server.
 *
 * A SIGINT/SIGTERM during the start-up (the engine's answer, the state
 * folder, the adoption of the instance's sandboxes, the HTTP front: with a
 * slow engine that takes many seconds) abandons it. Before the engine has
 * answered nothing has been made: the server exits at once, status 0. After
 * that the start-up, which runs on its own thread, stops at the end of the
 * step it is in and undoes what it made in the stop's order (the HTTP front,
 * the MCP layer, the manager, which removes the sandboxes adopted or pooled
 * so far as on a stop), and the server exits with status 0; the same bound
 * (server.stop_timeout, then the sweep and status 1) and the same second
 * signal apply as for a stop.
 *
 * SIGHUP reopens the audit log's file (server.audit_log, after a rotation;
 * include/sbx/audit.h), with a line in the log; nothing else is reloaded
 * (restart the server to apply a new configuration), and a closed terminal
 * must not end the server (SIGHUP's default action).
 *
 * Every line of the log goes through sbx_log and its levels
 * (include/sbx/log.h), which escape the text that engines and sandboxes put
 * in it; server.log_level and server.log_format are applied once the
 * settings are read (the lines before, a mistake in them, are text).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sbx/audit.h"
#include "sbx/auth.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/log.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

#ifndef SBX_SYSCONFDIR
#define SBX_SYSCONFDIR "/etc/mcp-sandbox"
#endif

/* The most the stop after the first SIGINT/SIGTERM may take is
 * server.stop_timeout: the calls are cancelled at once and usually end
 * within a second or two (Python's KeyboardInterrupt, then
 * sandbox.interrupt_grace before a kill). The most spent removing this
 * instance's containers when the stop is cut short (past it, or at a
 * second signal): */
#define SBX_STOP_SWEEP_MS 2000

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: mcp-sandboxd [-c FILE] [--set section.key=value ...] [--check] [--dump]\n"
	    "       mcp-sandboxd [-c FILE] [--set ...] keys add TENANT [LIMIT=VALUE ...]\n"
	    "       mcp-sandboxd [-c FILE] [--set ...] keys list\n"
	    "       mcp-sandboxd [-c FILE] [--set ...] keys revoke TENANT | --id KEY_ID\n"
	    "Serves MCP over HTTP on server.listen:server.port (default 127.0.0.1:8000):\n"
	    "  /mcp (Streamable HTTP), /sse + /messages (legacy SSE), /artifacts/..., /health, "
	    "/ready.\n"
	    "Prints 'mcp-sandboxd: listening on URL' once ready; stops on SIGINT/SIGTERM,\n"
	    "also during the start-up (calls in flight are cancelled; at most 10 s; a second\n"
	    "signal exits at once). SIGHUP reopens server.audit_log (nothing else is\n"
	    "reloaded: restart to reconfigure).\n"
	    "  -c, --config FILE   INI configuration (default " SBX_SYSCONFDIR "/mcp-sandbox.ini)\n"
	    "      --set S.K=V     override one key (repeatable)\n"
	    "      --check         contact the engine, report its version, the image, the\n"
	    "                      disk bound and (swarm) every node, and exit\n"
	    "      --dump          print the effective configuration (the index's password\n"
	    "                      as ***) and exit\n"
	    "  -h, --help          this text\n"
	    "  -V, --version       the version\n"
	    "API keys, in auth.keys_file (options come before 'keys'):\n"
	    "  keys add TENANT     make a key for TENANT ([A-Za-z0-9_.-], 1..64) and print it,\n"
	    "                      once; limits: sandboxes=N calls=N memory=SIZE cpus=N "
	    "installs=N\n"
	    "                      egress_allow=none|HOST[:PORT],... (the tenant's hosts,\n"
	    "                      instead of sandbox.egress_allow)\n"
	    "  keys list           tenant, key id, creation time and limits of every key\n"
	    "  keys revoke TENANT  remove every key of TENANT (--id KEY_ID: that key only)\n"
	    "A running server picks up changes within a few seconds.\n");
}

/* `mcp-sandboxd keys ...`: ARGV are the words after "keys". The exit status:
 * 0, 1 when the edit failed, 2 for a usage mistake. */
static int keys_command(const struct sbx_settings *s, int argc, char **argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	const char *path = s->auth.keys_file, *cmd = argc > 0 ? argv[0] : "";
	char key[SBX_API_KEY_LEN + 1];
	size_t count = 0;
	int r;

	if (strcmp(cmd, "add") != 0 && strcmp(cmd, "list") != 0 && strcmp(cmd, "revoke") != 0) {
		sbx_log_error("keys: expected add, list or revoke (see --help)");
		return 2;
	}
	if (!*path) {
		sbx_log_error(
		    "keys: auth.keys_file is not set: set it in the configuration file or "
		    "with --set auth.keys_file=/PATH");
		return 2;
	}
	if (strcmp(cmd, "list") == 0) {
		if (argc != 1) {
			sbx_log_error("keys list: takes no arguments");
			return 2;
		}
		r = sbx_keys_list(path, stdout, &err);
	} else if (strcmp(cmd, "add") == 0) {
		if (argc < 2) {
			sbx_log_error("keys add: expected TENANT [LIMIT=VALUE ...]");
			return 2;
		}
		r = sbx_keys_add(path, argv[1], argv + 2, (size_t)argc - 2, key, &err);
		if (r == 0) {
			printf("%s\n", key);
			/* The id is public: the key's characters 4..15. */
			sbx_log("keys add: key %.*s for tenant %s, shown once (the file keeps only "
				"its SHA-256)",
				SBX_KEY_ID_LEN, key + 4, argv[1]);
			explicit_bzero(key, sizeof(key));
		}
	} else {
		bool by_id = argc == 3 && strcmp(argv[1], "--id") == 0;
		if (argc != 2 && !by_id) {
			sbx_log_error("keys revoke: expected TENANT or --id KEY_ID");
			return 2;
		}
		r = sbx_keys_revoke(path, by_id ? NULL : argv[1], by_id ? argv[2] : NULL, stdout,
				    &count, &err);
	}
	if (fflush(stdout) != 0 && r == 0) {
		sbx_log_error("keys %s: cannot write the output", cmd);
		return 1;
	}
	if (r < 0) {
		sbx_log_error("keys %s: %s", cmd, err.msg);
		return r == -EINVAL ? 2 : 1; /* -EINVAL: a bad argument, nothing touched */
	}
	return 0;
}

/* Every open connection holds a descriptor (server.max_connections, 4096 by
 * default): take the soft open-file limit up to the hard one. The HTTP
 * front lowers its connection limit to what the soft limit leaves. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- the stop ---- */

/* The orderly stop, on its own thread: the HTTP front (which cancels the
 * calls in flight and waits for them), the MCP layer, the manager (which
 * removes the sandboxes). */
struct stopper {
	sbx_http *http;
	sbx_mcp *mcp;
	sbx_manager *manager;
	atomic_bool done;
};

static void *stop_main(void *arg)
{
	struct stopper *st = arg;

	st->http = sbx_http_stop(st->http);
	st->mcp = sbx_mcp_free(st->mcp);
	st->manager = sbx_manager_free(st->manager);
	atomic_store(&st->done, true);
	return NULL;
}

/* Removes the containers of one instance, on a detached thread that may
 * outlive the wait (an engine that hangs): the struct is then leaked. */
struct sweeper {
	sbx_engine *engine;
	char *instance;
	atomic_int found, removed;
	atomic_bool done;
};

static void *sweep_main(void *arg)
{
	struct sweeper *sw = arg;
	struct sbx_kv want[] = {{SBX_LABEL_MANAGED, "1"}, {SBX_LABEL_INSTANCE, sw->instance}};
	struct sbx_container_summary *cs = NULL;
	size_t n = 0;

	if (sbx_container_list(sw->engine, want, SBX_ARRAY_SIZE(want), &cs, &n, NULL) == 0) {
		atomic_store(&sw->found, (int)n);
		for (size_t i = 0; i < n; i++) {
			int r = sbx_container_remove(sw->engine, cs[i].id, NULL);
			if (r >= 0 || r == -ENOENT)
				atomic_fetch_add(&sw->removed, 1);
		}
		sbx_container_list_free(cs, n);
	}
	atomic_store(&sw->done, true);
	return NULL;
}

/* When sandbox.remove_on_exit: removes this instance's containers (the
 * sandboxes and the pool's) for at most SBX_STOP_SWEEP_MS, and says how it
 * went. */
static void sweep(sbx_engine *engine, const struct sbx_settings *s)
{
	struct sweeper *sw = calloc(1, sizeof(*sw));
	int64_t until = sbx_monotonic_ms() + SBX_STOP_SWEEP_MS;
	pthread_attr_t attr;
	pthread_t t;
	int r;

	if (!engine || !s->sandbox.remove_on_exit || !sw ||
	    !(sw->instance = strdup(s->server.instance))) {
		free(sw);
		return;
	}
	sw->engine = engine;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, sweep_main, sw);
	pthread_attr_destroy(&attr);
	if (r != 0)
		return;
	while (!atomic_load(&sw->done) && sbx_monotonic_ms() < until) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (atomic_load(&sw->done) && atomic_load(&sw->removed) == atomic_load(&sw->found))
		sbx_log("removed the instance's %d container(s)", atomic_load(&sw->removed));
	else
		sbx_log("removed %d container(s) of instance %s in %d ms; those left are adopted "
			"(or removed) by the next start on this instance",
			atomic_load(&sw->removed), s->server.instance, SBX_STOP_SWEEP_MS);
}

static const char *signame(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* The audit log (serve's), for SIGHUP. */
static sbx_audit *audit_log;

/* SIGHUP: the audit log's file is opened again (a rotation renamed it). */
static void log_hangup(void)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (!audit_log || !*sbx_audit_path(audit_log))
		sbx_log("SIGHUP ignored: there is no reload (restart the server to apply a new "
			"configuration)");
	else if (sbx_audit_reopen(audit_log, &err) < 0)
		sbx_log_error("SIGHUP: %s; the audit log stays in the file open before", err.msg);
	else
		sbx_log("SIGHUP: reopened the audit log %s (nothing else is reloaded: restart "
			"the server to apply a new configuration)",
			sbx_audit_path(audit_log));
}

/* Waits for *DONE (set by the thread that stops the server or abandons its
 * start-up) for at most server.stop_timeout; past that, or at a second
 * SIGINT/SIGTERM, sweeps and exits (see the top of the file). */
static void stop_wait(sbx_engine *engine, const struct sbx_settings *s, const sigset_t *signals,
		      atomic_bool *done)
{
	int64_t until = sbx_monotonic_ms() + s->server.stop_timeout_ms;

	for (;;) {
		int64_t left = until - sbx_monotonic_ms();
		struct timespec ts = {0, 100 * 1000000L};
		int got;

		if (atomic_load(done))
			return;
		if (left <= 0) {
			sbx_log_error(
			    "the stop did not finish within %lld ms (server.stop_timeout: "
			    "a call ignores its cancellation, or the engine hangs); "
			    "exiting without it",
			    (long long)s->server.stop_timeout_ms);
			sweep(engine, s);
			fflush(NULL);
			_exit(1);
		}
		if (left < 100)
			ts.tv_nsec = left * 1000000L;
		got = sigtimedwait(signals, NULL, &ts);
		if (got == SIGHUP)
			log_hangup();
		if (got == SIGINT || got == SIGTERM) {
			sbx_log_warn(
			    "second signal (%s): exiting now, without waiting for the calls",
			    signame(got));
			sweep(engine, s);
			fflush(NULL);
			_exit(128 + got);
		}
	}
}

/* Stops the server after the first signal SIG (see the top of the file);
 * returns the exit status when the stop finished, else exits. */
static int stop(sbx_engine *engine, sbx_http *http, sbx_mcp *mcp, sbx_manager *manager,
		const struct sbx_settings *s, const sigset_t *signals, int sig)
{
	struct stopper st = {.http = http, .mcp = mcp, .manager = manager};
	pthread_t t;

	sbx_log("%s, stopping: the calls in flight are cancelled (at most %lld ms, "
		"server.stop_timeout; a second SIGINT or SIGTERM exits at once)",
		signame(sig), (long long)s->server.stop_timeout_ms);
	atomic_init(&st.done, false);
	if (pthread_create(&t, NULL, stop_main, &st) != 0) {
		stop_main(&st); /* no thread: the stop without its bound */
		return 0;
	}
	stop_wait(engine, s, signals, &st.done);
	pthread_join(t, NULL);
	return 0;
}

/* ---- the start-up ---- */

/* Where the start-up is (struct starter.phase). */
enum {
	START_ENGINE, /* waiting for the engine's answer: nothing made yet */
	START_MAKING, /* the manager (state folder, lock), adoption, MCP, HTTP */
	START_QUIT,   /* a signal came in START_ENGINE: make nothing, the server exits */
};

/* The start-up, on its own thread so that main can take the signals. */
struct starter {
	const struct sbx_settings *s;
	sbx_audit *audit; /* serve()'s, for the MCP layer and the HTTP front */
	sbx_engine *engine;
	sbx_manager *manager;
	sbx_mcp *mcp;
	sbx_http *http;
	sbx_auth *auth; /* serve()'s, for the HTTP front */
	struct sbx_error err;
	atomic_int phase;
	atomic_bool abandon; /* a signal came in START_MAKING: stop after this step */
	atomic_bool done;    /* the thread's work is over (read started then) */
	bool started;	     /* it serves: http, mcp and manager are set */
};

static bool abandoned(struct starter *st)
{
	return atomic_load(&st->abandon);
}

/* The start-up's steps, each followed by a look at st->abandon; 0 when it
 * got to the end, else < 0 (failures are logged here). */
/* A tenant's egress allow-list: its API keys' egress_allow (the manager's
 * sbx_egress_lookup_fn; the auth outlives the manager). */
static int tenant_egress(void *auth, const char *owner, char *buf, size_t size)
{
	return sbx_auth_tenant_egress(auth, owner, buf, size);
}

/* A line of a check's report: logged, or printed for --check. */
static void log_line(void *userdata, const char *line)
{
	(void)userdata;
	sbx_log("%s", line);
}

/* A node's words among them: no control character reaches the terminal. */
static void print_line(void *userdata, const char *line)
{
	(void)userdata;
	for (const char *p = line; *p; p++)
		putchar((unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p);
	putchar('\n');
}

static int start_steps(struct starter *st)
{
	const struct sbx_settings *s = st->s;
	struct sbx_error *err = &st->err;
	int expect = START_ENGINE, n;

	sbx_log("contacting the %s engine at %s", sbx_engine_name(st->engine),
		sbx_engine_url(st->engine));
	if (sbx_engine_ping(st->engine, err) < 0) {
		sbx_log_error("the container engine is not reachable: %s", err->msg);
		sbx_log_error("  (is Docker/Podman running? set engine.socket or DOCKER_HOST)");
		return err->code;
	}
	if (sbx_disk_check(s, st->engine, err) < 0) {
		sbx_log_error("%s", err->msg);
		return err->code;
	}
	if (sbx_places_check(s, st->engine, log_line, NULL, err) < 0) {
		sbx_log_error("%s", err->msg);
		return err->code;
	}
	if (s->sandbox.disk > 0)
		sbx_log("sandbox.disk: each sandbox may write %lld MiB",
			(long long)(s->sandbox.disk >> 20));
	else
		sbx_log_warn("sandbox.disk = 0: sandboxes may fill the engine's disk (no bound)");
	if (!atomic_compare_exchange_strong(&st->phase, &expect, START_MAKING))
		return -ECANCELED; /* START_QUIT: main exits */
	if (abandoned(st))
		return -ECANCELED;
	if (sbx_manager_new(s, st->engine, &st->manager, err) < 0) {
		sbx_log_error("%s", err->msg);
		return err->code;
	}
	sbx_manager_set_egress_lookup(st->manager, tenant_egress, st->auth);
	if (abandoned(st))
		return -ECANCELED;
	n = sbx_manager_recover(st->manager, err);
	if (n < 0) {
		sbx_log_error("recover sandboxes: %s", err->msg);
		return n;
	}
	if (n > 0)
		sbx_log("adopted %d sandbox(es) of instance %s", n,
			sbx_manager_instance(st->manager));
	if (sbx_manager_state_dir(st->manager))
		sbx_log("instance %s, state folder %s", sbx_manager_instance(st->manager),
			sbx_manager_state_dir(st->manager));
	else
		sbx_log_warn(
		    "instance %s without a state folder: nothing keeps another server with "
		    "this instance off its sandboxes (set server.state_dir, or give each server "
		    "its own server.instance)",
		    sbx_manager_instance(st->manager));
	if (abandoned(st))
		return -ECANCELED;
	{
		const struct sbx_mcp_config mc = {
		    .settings = s, .manager = st->manager, .audit = st->audit};
		if (sbx_mcp_new(&mc, &st->mcp, err) < 0) {
			sbx_log_error("%s", err->msg);
			return err->code;
		}
	}
	if (!sbx_link_key_persistent(sbx_mcp_link_key(st->mcp)))
		sbx_log_warn(
		    "artifact links are signed with a secret of this process alone: they end "
		    "with it (set server.state_dir to keep them across restarts)");
	if (s->server.unsigned_links)
		sbx_log_warn(
		    st->auth && sbx_auth_checks_keys(st->auth)
			? "server.unsigned_links ignored: API keys are checked, every artifact "
			  "link is to be signed"
			: "server.unsigned_links: artifact links without a signature are served "
			  "too (anyone who knows a sandbox id may fetch its files)");
	if (abandoned(st))
		return -ECANCELED;
	{
		const struct sbx_http_config hc = {.settings = s,
						   .mcp = st->mcp,
						   .manager = st->manager,
						   .auth = st->auth,
						   .audit = st->audit};
		if (sbx_http_start(&hc, &st->http, err) < 0) {
			sbx_log_error("%s", err->msg);
			return err->code;
		}
	}
	return 0;
}

/* The start-up thread: the steps; when they failed or were abandoned, what
 * they made is undone as a stop would (the sandboxes adopted or pooled are
 * removed when sandbox.remove_on_exit). */
static void *start_main(void *arg)
{
	struct starter *st = arg;
	int r = start_steps(st);

	st->started = r == 0 && !abandoned(st);
	if (!st->started) {
		st->http = sbx_http_stop(st->http);
		st->mcp = sbx_mcp_free(st->mcp);
		st->manager = sbx_manager_free(st->manager);
	}
	atomic_store(&st->done, true);
	return NULL;
}

/* Waits for the start-up thread T; a SIGINT/SIGTERM meanwhile abandons the
 * start-up (see the top of the file). 1 when the server may serve, 0 when
 * it is to exit with status RET (the start-up failed or was abandoned),
 * else exits. */
static int start_wait(struct starter *st, pthread_t t, const sigset_t *signals, int *ret)
{
	for (;;) {
		struct timespec ts = {0, 100 * 1000000L};
		int got, expect = START_ENGINE;

		if (atomic_load(&st->done)) {
			pthread_join(t, NULL);
			*ret = 1;
			return st->started;
		}
		got = sigtimedwait(signals, NULL, &ts);
		if (got == SIGHUP)
			log_hangup();
		if (got != SIGINT && got != SIGTERM)
			continue;
		if (atomic_compare_exchange_strong(&st->phase, &expect, START_QUIT)) {
			sbx_log("%s during the start-up, before the engine answered: nothing to "
				"undo, exiting",
				signame(got));
			fflush(NULL);
			_exit(0);
		}
		sbx_log("%s during the start-up: abandoning it; what it made is undone as on a "
			"stop (at most %lld ms; a second SIGINT or SIGTERM exits at once)",
			signame(got), (long long)st->s->server.stop_timeout_ms);
		atomic_store(&st->abandon, true);
		stop_wait(st->engine, st->s, signals, &st->done);
		pthread_join(t, NULL);
		if (st->started) /* it had just finished: a plain stop */
			*ret =
			    stop(st->engine, st->http, st->mcp, st->manager, st->s, signals, got);
		else
			*ret = 0;
		return 0;
	}
}

/* True when ADDR (server.listen) is a loopback address: 127.0.0.0/8, ::1
 * (an IPv4-mapped 127.x too), "localhost"; brackets around IPv6 allowed. */
static bool listen_is_loopback(const char *addr)
{
	char buf[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;
	struct in_addr a4;
	size_t n = strlen(addr);

	if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
		if (n - 2 >= sizeof(buf))
			return false;
		memcpy(buf, addr + 1, n - 2);
		buf[n - 2] = '\0';
		addr = buf;
	}
	if (strcasecmp(addr, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, addr, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, addr, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

/* Opens what [auth] asks for into *RET (secure by default: without API keys
 * the server serves loopback only, unless auth.mode = none says anyone who
 * reaches the port may act for the tenant "default"); logs what it decided.
 * 0, or -1 when the server is not to start (logged). */
static int open_auth(const struct sbx_settings *s, sbx_auth **ret)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_auth *a = NULL;

	if (sbx_auth_open(s, &a, &err) < 0) {
		sbx_log_error("%s", err.msg);
		return -1;
	}
	if (sbx_auth_checks_keys(a)) {
		sbx_log("API keys from %s (auth.keys_file): /mcp and /sse need one",
			s->auth.keys_file);
	} else if (strcmp(s->auth.mode, "none") == 0) {
		sbx_log_warn("auth.mode = none: no credentials are checked; anyone who reaches the "
			     "port acts for tenant \"%s\"",
			     SBX_TENANT_DEFAULT);
	} else if (listen_is_loopback(s->server.listen)) {
		sbx_log("no API keys (auth.keys_file): serving loopback only");
	} else {
		sbx_log_error(
		    "server.listen = %s is not a loopback address and there are no API keys: "
		    "set auth.keys_file (and add keys with mcp-sandboxd keys add TENANT), or "
		    "set auth.mode = none to let anyone who reaches the port act for tenant "
		    "\"%s\"",
		    s->server.listen, SBX_TENANT_DEFAULT);
		sbx_auth_free(a);
		return -1;
	}
	*ret = a;
	return 0;
}

/* The engine's configuration from [engine] (TLS's paths in *TLS). */
static struct sbx_engine_config engine_config(const struct sbx_settings *s,
					      struct sbx_engine_tls *tls)
{
	*tls = (struct sbx_engine_tls){
	    .ca = s->engine.tls_ca, .cert = s->engine.tls_cert, .key = s->engine.tls_key};
	return (struct sbx_engine_config){.type = s->engine.type,
					  .url = s->engine.socket,
					  .api_version = s->engine.api_version,
					  .timeout_ms = (long)s->engine.timeout_ms,
					  .tls = tls};
}

/* A TLS key others on this host may read is said (once, at start): it
 * lets them speak to the engines as this server. */
static void tls_key_private(const struct sbx_settings *s)
{
	struct stat st;

	if (*s->engine.tls_key && stat(s->engine.tls_key, &st) == 0 && (st.st_mode & 077))
		sbx_log_warn("engine.tls_key %s may be read by others (mode %03o): whoever can "
			     "read it speaks to the engines as this server; chmod 600 it",
			     s->engine.tls_key, (unsigned)(st.st_mode & 0777));
}

/* Runs the server until SIGINT/SIGTERM; the exit status. */
static int serve(const struct sbx_settings *s, struct sbx_error *err)
{
	struct sbx_engine_tls tls;
	struct sbx_engine_config ec = engine_config(s, &tls);
	struct starter st = {.s = s, .err = SBX_ERROR_INIT};
	sigset_t signals;
	pthread_t t;
	int sig = 0, ret = 1;

	/* Blocked in every thread (they inherit the mask); main takes them. */
	sigemptyset(&signals);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	if (open_auth(s, &st.auth) < 0)
		return 1;
	if (sbx_audit_open(s->server.audit_log, &st.audit, err) < 0) {
		sbx_log_error("%s", err->msg);
		sbx_auth_free(st.auth);
		return 1;
	}
	audit_log = st.audit;
	sbx_log("audit log (JSON lines): %s",
		*s->server.audit_log ? s->server.audit_log : "standard error");
	tls_key_private(s);
	if (sbx_engine_open(&ec, &st.engine, err) < 0) {
		sbx_log_error("the container engine is not reachable: %s", err->msg);
		audit_log = st.audit = sbx_audit_free(st.audit);
		sbx_auth_free(st.auth);
		return 1;
	}
	atomic_init(&st.phase, START_ENGINE);
	atomic_init(&st.abandon, false);
	atomic_init(&st.done, false);
	if (pthread_create(&t, NULL, start_main, &st) != 0)
		start_main(&st); /* no thread: a signal waits for the start-up's end */
	else if (!start_wait(&st, t, &signals, &ret))
		st.started = false;
	if (!st.started) {
		sbx_engine_free(st.engine);
		sbx_auth_free(st.auth);
		audit_log = st.audit = sbx_audit_free(st.audit);
		return ret;
	}
	printf("mcp-sandboxd: listening on %s\n", sbx_http_public_url(st.http));
	fflush(stdout);
	for (;;) {
		if (sigwait(&signals, &sig) != 0)
			continue;
		if (sig != SIGHUP)
			break;
		log_hangup();
	}
	ret = stop(st.engine, st.http, st.mcp, st.manager, s, &signals, sig);
	sbx_engine_free(st.engine);
	sbx_auth_free(st.auth); /* after the HTTP front that used it */
	audit_log = st.audit = sbx_audit_free(st.audit);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"set", required_argument, NULL, 's'},
	    {"check", no_argument, NULL, 'k'},
	    {"dump", no_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct sbx_engine_version v = {0};
	const char *config = NULL;
	sbx_engine *engine = NULL;
	bool dump = false, check = false;
	int c, ret = 1;

	if (sbx_settings_init(&s) < 0)
		return 1;
	/* First pass: the file; second: --set on top of it. */
	while ((c = getopt_long(argc, argv, "+c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'h':
			usage(stdout);
			sbx_settings_release(&s);
			return 0;
		case 'V':
			printf("mcp-sandboxd %s\n", PACKAGE_VERSION);
			sbx_settings_release(&s);
			return 0;
		case 's':
		case 'k':
		case 'd':
			break;
		default:
			usage(stderr);
			sbx_settings_release(&s);
			return 2;
		}
	}
	if (sbx_settings_load_file(&s, config ? config : SBX_SYSCONFDIR "/mcp-sandbox.ini", &err) <
		0 &&
	    (config || err.code != -ENOENT)) {
		sbx_log_error("%s", err.msg);
		goto out;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "+c:hV", opts, NULL)) != -1) {
		if (c == 's' && sbx_settings_set(&s, optarg, &err) < 0) {
			sbx_log_error("%s", err.msg);
			goto out;
		}
		if (c == 'd')
			dump = true;
		if (c == 'k')
			check = true;
	}
	if (sbx_log_setup(s.server.log_level, s.server.log_format, &err) < 0) {
		sbx_log_error("%s", err.msg);
		goto out;
	}
	sbx_log_debug("log: level %s, format %s%s", s.server.log_level, s.server.log_format,
		      sbx_log_to_journal() ? ", to the journal (JOURNAL_STREAM is standard error)"
					   : "");
	if (optind < argc && strcmp(argv[optind], "keys") == 0) {
		ret = keys_command(&s, argc - optind - 1, argv + optind + 1);
		goto out;
	}
	if (optind < argc) {
		sbx_log_error("unknown command %s (see --help)", argv[optind]);
		ret = 2;
		goto out;
	}
	if (dump) {
		sbx_settings_dump_redacted(&s, stdout);
		ret = 0;
		goto out;
	}
	if (!check) {
		ret = serve(&s, &err);
		goto out;
	}
	{
		struct sbx_engine_tls tls;
		struct sbx_engine_config ec = engine_config(&s, &tls);
		if (sbx_engine_open(&ec, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0 ||
		    sbx_engine_version(engine, &v, &err) < 0) {
			sbx_log_error("engine: %s", err.msg);
			goto out;
		}
	}
	printf("mcp-sandboxd %s: %s %s (API %s) at %s\n", PACKAGE_VERSION, v.engine, v.version,
	       v.api_version, sbx_engine_url(engine));
	c = sbx_image_exists(engine, s.sandbox.image, &err);
	printf("sandbox image %s: %s\n", s.sandbox.image,
	       c == 1	? "present"
	       : c == 0 ? "MISSING (run tools/provision-engines)"
			: err.msg);
	ret = c == 1 ? 0 : 1;
	if (sbx_disk_check(&s, engine, &err) < 0) {
		printf("sandbox.disk: %s\n", err.msg);
		ret = 1;
	} else {
		printf("sandbox.disk: %s\n",
		       s.sandbox.disk > 0 ? "enforced by the engine's storage" : "0, no bound");
	}
	if (sbx_places_check(&s, engine, print_line, NULL, &err) < 0) {
		printf("%s\n", err.msg);
		ret = 1;
	}
out:
	sbx_engine_version_release(&v);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
	return ret;
}
