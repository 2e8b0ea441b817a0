/* SPDX-License-Identifier: MIT */
/*
 * The mcp-sandboxd program and its signals (src/mcp-sandboxd.c), without a
 * container engine: the engine is a fake one on a unix socket in a
 * temporary folder, served by a thread here, that never answers, answers
 * all (a ping, an empty container list) or holds the container list until
 * told. Checks: a SIGTERM or SIGINT during the start-up, while the engine
 * does not answer, ends the server at once with status 0 (not after
 * engine.timeout, 10 minutes here); one while the adoption waits for the
 * engine abandons the start-up, which ends as a stop (status 0, never
 * listening); a second one then exits at once (status 143); SIGHUP leaves
 * the server running, during the start-up and while it serves, and says so
 * in its log; a server that started stops on SIGTERM with status 0.
 * Secure by default: without API keys, server.listen = 0.0.0.0 refuses to
 * start (naming auth.keys_file and auth.mode = none) before it asks the
 * engine anything, starts with auth.mode = none (saying anyone is the
 * tenant "default"), and a loopback server says it serves loopback only.
 * The artifact links' secret: made 0600 in the state folder at the first
 * start, the same at the next (a link of the first server is taken by the
 * second); a group-readable or symbolically linked secret stops the start.
 * The audit log: with API keys and server.audit_log, a refused GET /sse and
 * a tools/call (list_sandboxes) through the program are JSON lines in the
 * file (made 0600), with the session's first 8 characters and the key's id
 * only; after a rename, SIGHUP reopens it (the log says so) and the next
 * line is in a new file; a symbolic link as server.audit_log stops the
 * start; without it the lines are pure JSON on standard error.
 * server.log_format = json: every line the server writes on standard error,
 * from its start to its stop (SIGHUP and SIGTERM) and on a refused start,
 * is a JSON object of time, level and msg; the refusal's level is error.
 *
 * The waits only bound hangs (SBX_WAIT_S): nothing here is timed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sbx/artifact.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/sandbox.h"
#include "tap.h"

#define SBX_WAIT_S 60 /* bounds every wait: a hang, not a duration, fails */
#define MAX_CONNS 32

enum engine_mode {
	ENGINE_SILENT,	  /* reads requests, never answers */
	ENGINE_ANSWER,	  /* answers every request */
	ENGINE_HOLD_LIST, /* answers, but holds container lists until released */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	enum engine_mode mode;
	int requests;	/* requests read */
	int lists_held; /* container lists waiting for a release */
	bool release;	/* answer the held lists */
	bool stop;	/* end the thread */
	int listen_fd;
	/* Non-empty: container lists hold two strangers whatever their filter
	 * (one without the instance label, one of this instance with an id
	 * that is a path), and stranger_requests counts requests that name
	 * either. */
	char stranger_instance[128];
	int stranger_requests;
} eng = {PTHREAD_MUTEX_INITIALIZER,
	 PTHREAD_COND_INITIALIZER,
	 ENGINE_SILENT,
	 0,
	 0,
	 false,
	 false,
	 -1,
	 "",
	 0};

#define STRANGER_ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define STRANGER_PATH_ID "..%2F..%2Fimages%2Fx"

static char tmp[] = "/tmp/test-daemon.XXXXXX";
static char sock_path[256], config_path[256], state_path[256], server[512];

struct conn {
	int fd;
	struct sbx_buf in;
	bool held; /* a container list waits for the release */
};

static void respond(int fd, int status, const char *type, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Api-Version: 1.41\r\n\r\n",
			 status, type, strlen(body));

	if (write(fd, head, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0)
		return; /* the server went away */
}

/* Answers the request line LINE (as a Docker Engine would, with nothing in
 * it): a ping, the version, empty lists, 404 for the rest. */
static void answer(int fd, const char *line)
{
	if (strstr(line, "/_ping "))
		respond(fd, 200, "text/plain", "OK");
	else if (strstr(line, "/info "))
		respond(fd, 200, "application/json",
			"{\"Driver\":\"overlay2\",\"DriverStatus\":[[\"Backing Filesystem\","
			"\"extfs\"],[\"Supports d_type\",\"true\"]]}");
	else if (strstr(line, "/version "))
		respond(
		    fd, 200, "application/json",
		    "{\"Version\":\"24.0.0\",\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1.12\"}");
	else if (strncmp(line, "GET ", 4) == 0 && strstr(line, "/containers/json") &&
		 eng.stranger_instance[0]) {
		char body[1024];

		snprintf(body, sizeof(body),
			 "[{\"Id\":\"" STRANGER_ID "\",\"Names\":[\"/not-ours\"],"
			 "\"State\":\"exited\",\"Labels\":{\"" SBX_LABEL_MANAGED "\":\"1\"}},"
			 "{\"Id\":\"../../images/x\",\"Names\":[\"/a-path\"],\"State\":"
			 "\"exited\",\"Labels\":{\"" SBX_LABEL_MANAGED
			 "\":\"1\",\"" SBX_LABEL_INSTANCE "\":\"%s\"}}]",
			 eng.stranger_instance);
		respond(fd, 200, "application/json", body);
	} else if (strncmp(line, "GET ", 4) == 0 && strstr(line, "/json"))
		respond(fd, 200, "application/json", "[]");
	else
		respond(fd, 404, "application/json", "{\"message\":\"not in this fake engine\"}");
}

/* Takes the complete requests out of C's input (they have no body: the
 * server sends none while it starts and stops without sandboxes). */
static void serve_requests(struct conn *c)
{
	char *end;

	while (!c->held && c->in.data && (end = strstr(c->in.data, "\r\n\r\n"))) {
		size_t used = (size_t)(end + 4 - c->in.data);
		char line[512];
		enum engine_mode mode;
		bool list;

		snprintf(line, sizeof(line), "%.*s", (int)strcspn(c->in.data, "\r"), c->in.data);
		list = strncmp(line, "GET ", 4) == 0 && strstr(line, "/containers/json");
		pthread_mutex_lock(&eng.lock);
		eng.requests++;
		if (eng.stranger_instance[0] &&
		    (strstr(line, STRANGER_ID) || strstr(line, "/images/x") ||
		     strstr(line, STRANGER_PATH_ID) || strstr(line, "..")))
			eng.stranger_requests++;
		mode = eng.mode;
		if (mode == ENGINE_HOLD_LIST && list && !eng.release) {
			c->held = true;
			eng.lists_held++;
		}
		pthread_cond_broadcast(&eng.changed);
		pthread_mutex_unlock(&eng.lock);
		if (c->held)
			return; /* the request stays in c->in */
		if (mode != ENGINE_SILENT)
			answer(c->fd, line);
		memmove(c->in.data, c->in.data + used, c->in.len - used + 1);
		c->in.len -= used;
	}
}

static void *engine_main(void *arg)
{
	struct conn conns[MAX_CONNS];
	size_t n = 0;

	(void)arg;
	for (;;) {
		struct pollfd pf[MAX_CONNS + 1];
		bool release;

		pthread_mutex_lock(&eng.lock);
		release = eng.release;
		if (eng.stop) {
			pthread_mutex_unlock(&eng.lock);
			break;
		}
		pthread_mutex_unlock(&eng.lock);
		for (size_t i = 0; i < n; i++) {
			if (release && conns[i].held) {
				conns[i].held = false;
				pthread_mutex_lock(&eng.lock);
				eng.lists_held--;
				pthread_mutex_unlock(&eng.lock);
				serve_requests(&conns[i]);
			}
		}
		pf[0] = (struct pollfd){.fd = eng.listen_fd, .events = POLLIN};
		for (size_t i = 0; i < n; i++)
			pf[i + 1] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
		if (poll(pf, n + 1, 50) < 0 && errno != EINTR)
			break;
		for (size_t i = n; i-- > 0;) {
			char buf[4096];
			ssize_t got;

			if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			got = read(conns[i].fd, buf, sizeof(buf));
			if (got > 0) {
				sbx_buf_append(&conns[i].in, buf, (size_t)got);
				serve_requests(&conns[i]);
				continue;
			}
			close(conns[i].fd);
			sbx_buf_release(&conns[i].in);
			if (conns[i].held) {
				pthread_mutex_lock(&eng.lock);
				eng.lists_held--;
				pthread_mutex_unlock(&eng.lock);
			}
			conns[i] = conns[--n];
		}
		if ((pf[0].revents & POLLIN) && n < MAX_CONNS) {
			int fd = accept(eng.listen_fd, NULL, NULL);
			if (fd >= 0)
				conns[n++] = (struct conn){.fd = fd};
		}
	}
	for (size_t i = 0; i < n; i++) {
		close(conns[i].fd);
		sbx_buf_release(&conns[i].in);
	}
	return NULL;
}

static void engine_set(enum engine_mode mode)
{
	pthread_mutex_lock(&eng.lock);
	eng.mode = mode;
	eng.requests = 0;
	eng.release = false;
	pthread_mutex_unlock(&eng.lock);
}

static void engine_release(void)
{
	pthread_mutex_lock(&eng.lock);
	eng.release = true;
	pthread_mutex_unlock(&eng.lock);
}

/* Waits (at most SBX_WAIT_S) until the engine read a request (or, with
 * LIST, holds a container list). */
static bool engine_wait(bool list)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += SBX_WAIT_S;
	pthread_mutex_lock(&eng.lock);
	while (!(ok = list ? eng.lists_held > 0 : eng.requests > 0))
		if (pthread_cond_timedwait(&eng.changed, &eng.lock, &until) == ETIMEDOUT)
			break;
	ok = list ? eng.lists_held > 0 : eng.requests > 0;
	pthread_mutex_unlock(&eng.lock);
	return ok;
}

/* ---- the server ---- */

struct daemon {
	pid_t pid;
	char out[300], err[300];
};

/* Starts the server against the fake engine; NAME names its output files,
 * EXTRA (NULL or NULL-terminated) are more --set values, after the others. */
static void daemon_start_with(struct daemon *d, const char *name, const char *const *extra)
{
	char inst[96], set_sock[300], set_state[300], set_inst[128];

	snprintf(d->out, sizeof(d->out), "%s/%s.out", tmp, name);
	snprintf(d->err, sizeof(d->err), "%s/%s.err", tmp, name);
	snprintf(inst, sizeof(inst), "test-daemon-%ld-%s", (long)getpid(), name);
	snprintf(set_sock, sizeof(set_sock), "engine.socket=unix://%s", sock_path);
	snprintf(set_state, sizeof(set_state), "server.state_dir=%s", state_path);
	snprintf(set_inst, sizeof(set_inst), "server.instance=%s", inst);
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0)
		tap_bail("fork");
	if (d->pid == 0) {
		const char *argv[] = {server,
				      "-c",
				      config_path,
				      "--set",
				      "engine.type=docker",
				      "--set",
				      set_sock,
				      "--set",
				      "engine.timeout=10m",
				      "--set",
				      "server.listen=127.0.0.1",
				      "--set",
				      "server.port=0",
				      "--set",
				      set_inst,
				      "--set",
				      set_state,
				      "--set",
				      "sandbox.pool_size=0",
				      "--set",
				      "sandbox.disk=0",
				      NULL,
				      NULL,
				      NULL,
				      NULL,
				      NULL,
				      NULL,
				      NULL};
		size_t n = 0;
		while (argv[n])
			n++;
		for (size_t i = 0; extra && extra[i] && n + 2 < SBX_ARRAY_SIZE(argv); i++) {
			argv[n++] = "--set";
			argv[n++] = extra[i];
		}
		int out = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int err = open(d->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int null = open("/dev/null", O_RDONLY);
		if (out < 0 || err < 0 || null < 0)
			_exit(126);
		dup2(null, 0);
		dup2(out, 1);
		dup2(err, 2);
		execv(server, (char *const *)argv);
		_exit(127);
	}
}

static void daemon_start(struct daemon *d, const char *name)
{
	daemon_start_with(d, name, NULL);
}

/* The content of PATH (owned; "" when unreadable). */
static char *slurp(const char *path)
{
	struct sbx_buf b = SBX_BUF_INIT;
	char chunk[4096];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	while (fd >= 0 && (n = read(fd, chunk, sizeof(chunk))) > 0)
		sbx_buf_append(&b, chunk, (size_t)n);
	if (fd >= 0)
		close(fd);
	return b.data ? sbx_buf_steal(&b) : strdup("");
}

/* Waits (at most SBX_WAIT_S) until PATH holds TEXT; a copy of the content
 * from TEXT on, or NULL. */
static char *wait_text(const char *path, const char *text)
{
	for (int i = 0; i < SBX_WAIT_S * 20; i++) {
		char *all = slurp(path), *at = strstr(all, text);
		if (at) {
			char *copy = strdup(at);
			free(all);
			return copy;
		}
		free(all);
		usleep(50000);
	}
	return NULL;
}

/* Waits (at most SBX_WAIT_S) for the server to end: its wait status, or -1
 * when it did not (it is then killed). */
static int daemon_wait(struct daemon *d)
{
	int status;

	for (int i = 0; i < SBX_WAIT_S * 20; i++) {
		pid_t r = waitpid(d->pid, &status, WNOHANG);
		if (r == d->pid)
			return status;
		usleep(50000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &status, 0);
	return -1;
}

static bool running(struct daemon *d)
{
	int status;
	return waitpid(d->pid, &status, WNOHANG) == 0;
}

static void diag_file(const char *path)
{
	char *all = slurp(path);
	tap_diag("%s:\n%s", path, all);
	free(all);
}

/* One check: the server ended within SBX_WAIT_S with exit status WANT. */
static void check_exit(struct daemon *d, int want, const char *what)
{
	int st = daemon_wait(d);

	if (!tap_ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == want,
		    "%s: the server exits with status %d", what, want)) {
		tap_diag("  wait status %d (%s)", st,
			 st == -1 ? "still running, killed" : "not that exit");
		diag_file(d->err);
	}
}

/* SIG while the engine does not answer the first request: an exit at
 * once, status 0, not after engine.timeout. With HUP first: SIGHUP is
 * ignored. */
static void test_silent_engine(int sig, bool hup)
{
	const char *name = sig == SIGINT ? "silent-int" : "silent-term";
	struct daemon d;
	char *line;

	engine_set(ENGINE_SILENT);
	daemon_start(&d, name);
	if (!tap_ok(engine_wait(false), "%s: the server asks the engine", name)) {
		diag_file(d.err);
		kill(d.pid, SIGKILL);
		daemon_wait(&d);
		return;
	}
	if (hup) {
		kill(d.pid, SIGHUP);
		line = wait_text(d.err, "SIGHUP ignored");
		tap_ok(line != NULL, "%s: SIGHUP during the start-up is logged as ignored", name);
		free(line);
		tap_ok(running(&d), "%s: and the server is still running", name);
	}
	kill(d.pid, sig);
	check_exit(&d, 0,
		   sig == SIGINT ? "SIGINT while the engine does not answer"
				 : "SIGTERM while the engine does not answer");
	line = wait_text(d.err, "before the engine answered");
	tap_ok(line != NULL, "%s: its log says it stopped before the engine answered", name);
	free(line);
}

/* SIGTERM while the adoption waits for the engine's container list: the
 * start-up is abandoned once the list comes, as a stop (status 0); or,
 * with SECOND, a second SIGTERM exits at once (status 143). */
static void test_abandon(bool second)
{
	const char *name = second ? "abandon-twice" : "abandon";
	struct daemon d;
	char *line, *out;

	engine_set(ENGINE_HOLD_LIST);
	daemon_start(&d, name);
	if (!tap_ok(engine_wait(true), "%s: the adoption waits for the engine's container list",
		    name)) {
		diag_file(d.err);
		kill(d.pid, SIGKILL);
		daemon_wait(&d);
		engine_release();
		return;
	}
	kill(d.pid, SIGTERM);
	line = wait_text(d.err, "during the start-up: abandoning it");
	tap_ok(line != NULL, "%s: SIGTERM during the adoption abandons the start-up", name);
	free(line);
	if (second) {
		kill(d.pid, SIGTERM);
		check_exit(&d, 128 + SIGTERM, "a second SIGTERM while the start-up is abandoned");
		engine_release();
		return;
	}
	tap_ok(running(&d), "%s: the server waits for the step in progress", name);
	engine_release();
	check_exit(&d, 0, "SIGTERM during the adoption");
	out = slurp(d.out);
	tap_ok(!strstr(out, "listening on"), "%s: the server never listened", name);
	free(out);
}

/* GET PATH on the server at URL (http://127.0.0.1:PORT): the status line's
 * code, or -1. */
static int get_status(const char *url, const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char buf[256] = "", req[512];
	int port = 0, code = -1, fd, len;
	ssize_t n;

	if (sscanf(url, "http://127.0.0.1:%d", &port) != 1)
		return -1;
	len =
	    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n", path, port);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(fd, req, (size_t)len) == len && (n = read(fd, buf, sizeof(buf) - 1)) > 0) {
		buf[n] = '\0';
		sscanf(buf, "HTTP/1.%*d %d", &code);
	}
	close(fd);
	return code;
}

static int health(const char *url)
{
	return get_status(url, "/health");
}

/* A server that started: SIGHUP is ignored (it still answers), SIGTERM
 * stops it with status 0. The engine's container lists hold two strangers
 * whatever the filter asked (one without the instance's label, one with an
 * id that is a path): the server neither adopts nor removes them, and never
 * names them to the engine. */
static void test_serving(void)
{
	struct daemon d;
	char *line, url[128] = "";

	engine_set(ENGINE_ANSWER);
	pthread_mutex_lock(&eng.lock);
	snprintf(eng.stranger_instance, sizeof(eng.stranger_instance), "test-daemon-%ld-serving",
		 (long)getpid());
	eng.stranger_requests = 0;
	pthread_mutex_unlock(&eng.lock);
	daemon_start(&d, "serving");
	line = wait_text(d.out, "listening on ");
	if (!tap_ok(line != NULL, "serving: the server starts against an engine with nothing")) {
		diag_file(d.err);
		kill(d.pid, SIGKILL);
		daemon_wait(&d);
		return;
	}
	sscanf(line, "listening on %127s", url);
	free(line);
	tap_is_int(health(url), 200, "serving: GET /health answers 200");
	kill(d.pid, SIGHUP);
	line = wait_text(d.err, "SIGHUP ignored");
	tap_ok(line != NULL, "serving: SIGHUP is logged as ignored");
	free(line);
	tap_ok(running(&d), "serving: the server still runs after SIGHUP");
	tap_is_int(health(url), 200, "serving: and still answers GET /health");
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "SIGTERM while serving");
	pthread_mutex_lock(&eng.lock);
	tap_is_int(eng.stranger_requests, 0,
		   "serving: containers the engine listed against the filter (without the "
		   "instance's label, or with a path for an id) were never adopted, removed or "
		   "named");
	eng.stranger_instance[0] = '\0';
	pthread_mutex_unlock(&eng.lock);
}

/* sandbox.disk on storage that cannot enforce it: the server does not
 * start, and says why and what to do. */
static void test_disk_refused(void)
{
	struct daemon d;
	char *line;
	int st;

	engine_set(ENGINE_ANSWER);
	daemon_start_with(&d, "disk", (const char *const[]){"sandbox.disk=2g", NULL});
	st = daemon_wait(&d);
	tap_ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
	       "sandbox.disk on overlay2 over extfs: the server refuses to start (status %d)",
	       st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	line = wait_text(d.err, "cannot be enforced");
	tap_ok(line && strstr(line, "overlay2 storage driver on extfs") &&
		   strstr(line, "sandbox.disk = 0"),
	       "disk: its log names the storage and the way out (%s)", line ? line : "none");
	free(line);
	line = slurp(d.out); /* the server has exited: its output is all there */
	tap_ok(line && !strstr(line, "listening on "), "disk: the server never listened");
	free(line);
}

/* Secure by default: without API keys a server listening beyond loopback
 * refuses to start, naming auth.keys_file and auth.mode = none, before it
 * asks the engine anything; with auth.mode = none it starts and says that
 * anyone who reaches the port is the tenant "default"; on loopback without
 * keys it starts and says it serves loopback only. */
static void test_auth_default(void)
{
	struct daemon d;
	char *line, *all;
	int requests;

	engine_set(ENGINE_ANSWER);
	pthread_mutex_lock(&eng.lock);
	requests = eng.requests;
	pthread_mutex_unlock(&eng.lock);
	daemon_start_with(&d, "public-nokeys",
			  (const char *const[]){"server.listen=0.0.0.0", NULL});
	check_exit(&d, 1, "listen 0.0.0.0 without keys");
	all = slurp(d.err);
	if (!tap_ok(strstr(all, "auth.keys_file") && strstr(all, "auth.mode = none") &&
			strstr(all, "0.0.0.0"),
		    "... its error names server.listen, auth.keys_file and auth.mode = none"))
		tap_diag("%s", all);
	free(all);
	all = slurp(d.out);
	tap_ok(!strstr(all, "listening on"), "... it never listened");
	free(all);
	pthread_mutex_lock(&eng.lock);
	tap_is_int(eng.requests, requests, "... nor asked the engine anything");
	pthread_mutex_unlock(&eng.lock);

	daemon_start_with(&d, "public-none",
			  (const char *const[]){"server.listen=0.0.0.0", "auth.mode=none", NULL});
	line = wait_text(d.out, "listening on ");
	if (!tap_ok(line != NULL, "listen 0.0.0.0 with auth.mode = none: the server starts"))
		diag_file(d.err);
	free(line);
	line = wait_text(d.err, "anyone who reaches the port acts for tenant \"default\"");
	tap_ok(line != NULL, "... and its log says anyone who reaches the port is tenant default");
	free(line);
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "auth.mode = none, SIGTERM");

	daemon_start(&d, "loopback-nokeys");
	line = wait_text(d.out, "listening on ");
	tap_ok(line != NULL, "listen 127.0.0.1 without keys: the server starts");
	free(line);
	line = wait_text(d.err, "no API keys (auth.keys_file): serving loopback only");
	tap_ok(line != NULL, "... and its log says it serves loopback only");
	free(line);
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "loopback without keys, SIGTERM");
}

/* The path of a link to x.txt of sandbox "nosuchbox", signed with K. */
static void link_path(const sbx_link_key *k, char *out, size_t size)
{
	_cleanup_free_ char *url =
	    sbx_artifact_link(k, "", "nosuchbox", "x.txt", "", time(NULL) + 600);

	snprintf(out, size, "%s", url ? url : "/none");
}

/* Starts server NAME with EXTRA --set values, expecting it to listen; its
 * URL into url. */
static bool start_with(struct daemon *d, const char *name, const char *const *extra, char *url,
		       size_t size)
{
	char *line;

	daemon_start_with(d, name, extra);
	line = wait_text(d->out, "listening on ");
	if (!line) {
		diag_file(d->err);
		kill(d->pid, SIGKILL);
		daemon_wait(d);
		return false;
	}
	snprintf(url, size, "%.*s", (int)strcspn(line + 13, " \n"), line + 13);
	free(line);
	return true;
}

/* Starts the server NAME, expecting it to listen; its URL into url. */
static bool start_listening(struct daemon *d, const char *name, char *url, size_t size)
{
	char path[300];

	/* Not the last server's output (its files are truncated by the child). */
	snprintf(path, sizeof(path), "%s/%s.out", tmp, name);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s.err", tmp, name);
	unlink(path);
	return start_with(d, name, NULL, url, size);
}

/* The link secret: made 0600 in the instance folder at the first start,
 * the same at the next (a link signed with it is taken, past the signature
 * to the sandbox lookup: 404; one signed otherwise is 403); a group-readable
 * secret file or a symbolic link there stops the start, saying why. */
static void test_link_secret(void)
{
	char url[128], dir[400], file[420], target[420], good[512], bad[512];
	unsigned char before[32] = {0}, after[32] = {1};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_link_key *k = NULL, *other = NULL;
	struct daemon d;
	struct stat st;
	char *all;
	int fd;

	engine_set(ENGINE_ANSWER);
	snprintf(dir, sizeof(dir), "%s/instance-test-daemon-%ld-links", state_path, (long)getpid());
	snprintf(file, sizeof(file), "%s/link-secret", dir);
	if (!tap_ok(start_listening(&d, "links", url, sizeof(url)), "links: a server starts"))
		return;
	tap_ok(lstat(file, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 &&
		   st.st_size == 32,
	       "links: the first start made STATE/instance-INSTANCE/link-secret, 0600, 32 bytes");
	if (sbx_link_key_open(dir, &k, &err) < 0 || sbx_link_key_open(NULL, &other, &err) < 0)
		tap_bail(err.msg);
	link_path(k, good, sizeof(good));
	link_path(other, bad, sizeof(bad));
	tap_is_int(get_status(url, good), 404,
		   "links: a link signed with that secret passes (unknown sandbox: 404)");
	tap_is_int(get_status(url, bad), 403, "links: one signed with another secret is 403");
	fd = open(file, O_RDONLY);
	tap_ok(fd >= 0 && read(fd, before, 32) == 32, "links: the secret read");
	if (fd >= 0)
		close(fd);
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "links, first server");

	if (tap_ok(start_listening(&d, "links", url, sizeof(url)),
		   "links: a second server on the same state folder starts")) {
		tap_is_int(get_status(url, good), 404,
			   "links: the first server's link passes on the second");
		fd = open(file, O_RDONLY);
		tap_ok(fd >= 0 && read(fd, after, 32) == 32 && !memcmp(before, after, 32),
		       "links: the secret file is the same");
		if (fd >= 0)
			close(fd);
		kill(d.pid, SIGTERM);
		check_exit(&d, 0, "links, second server");
	}

	chmod(file, 0640);
	daemon_start(&d, "links");
	check_exit(&d, 1, "links: a group-readable link-secret");
	all = slurp(d.err);
	if (!tap_ok(strstr(all, file) && strstr(all, "mode 0600") && strstr(all, "0640"),
		    "... its log names the file and the mode it must have"))
		tap_diag("%s", all);
	free(all);

	snprintf(target, sizeof(target), "%s/secret-elsewhere", tmp);
	chmod(file, 0600);
	if (rename(file, target) < 0 || symlink(target, file) < 0)
		tap_bail("symlink");
	daemon_start(&d, "links");
	check_exit(&d, 1, "links: link-secret a symbolic link to a good one");
	all = slurp(d.err);
	if (!tap_ok(strstr(all, file) && strstr(all, "symbolic link"),
		    "... its log says it is a symbolic link"))
		tap_diag("%s", all);
	free(all);
	all = slurp(d.out);
	tap_ok(!strstr(all, "listening on"), "... it never listened");
	free(all);
	sbx_link_key_free(k);
	sbx_link_key_free(other);
}

/* METHOD PATH on the server at URL (http://127.0.0.1:PORT) with HEADERS
 * ("Name: value\r\n" each, may be "") and BODY (NULL: none), HTTP/1.0: the
 * status, and the whole response in *RET_TEXT (owned). */
static int http_raw(const char *url, const char *method, const char *path, const char *headers,
		    const char *body, char **ret_text)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct sbx_buf req = SBX_BUF_INIT, resp = SBX_BUF_INIT;
	char chunk[4096];
	int port = 0, code = -1, fd;
	ssize_t n;

	*ret_text = strdup("");
	if (sscanf(url, "http://127.0.0.1:%d", &port) != 1)
		return -1;
	sbx_buf_appendf(&req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n%s", method, path, port,
			headers);
	if (body)
		sbx_buf_appendf(&req,
				"Content-Type: application/json\r\nAccept: application/json, "
				"text/event-stream\r\nContent-Length: %zu\r\n\r\n%s",
				strlen(body), body);
	else
		sbx_buf_appendf(&req, "\r\n");
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(fd, req.data, req.len) == (ssize_t)req.len) {
		while ((n = read(fd, chunk, sizeof(chunk))) > 0)
			sbx_buf_append(&resp, chunk, (size_t)n);
		if (resp.data)
			sscanf(resp.data, "HTTP/1.%*d %d", &code);
	}
	if (fd >= 0)
		close(fd);
	sbx_buf_release(&req);
	if (resp.data) {
		free(*ret_text);
		*ret_text = sbx_buf_steal(&resp);
	}
	return code;
}

/* The last line of the text at PATH holding NEEDLE, parsed (NULL: none). */
static struct json_object *json_line(const char *path, const char *needle)
{
	char *all = slurp(path), *line = NULL;
	struct json_object *o = NULL;

	for (char *p = all, *nl; *p; p = nl + 1) {
		nl = strchrnul(p, '\n');
		if (memmem(p, (size_t)(nl - p), needle, strlen(needle)))
			line = p;
		if (!*nl)
			break;
	}
	if (line) {
		line[strcspn(line, "\n")] = '\0';
		o = json_tokener_parse(line);
	}
	free(all);
	return o;
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return "";
	return json_object_get_string(v);
}

static size_t lines_in(const char *path)
{
	char *all = slurp(path);
	size_t n = 0;

	for (char *p = all; (p = strchr(p, '\n')); p++)
		n++;
	free(all);
	return n;
}

static void test_audit_log(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char keys[300], log[300], old[320], set_keys[340], set_log[340], url[128], auth[200];
	char key[SBX_API_KEY_LEN + 1], session[64] = "", *text = NULL, *all;
	struct json_object *o;
	struct daemon d;
	struct stat st;

	engine_set(ENGINE_ANSWER);
	snprintf(keys, sizeof(keys), "%s/keys", tmp);
	snprintf(log, sizeof(log), "%s/audit.log", tmp);
	snprintf(old, sizeof(old), "%s.1", log);
	snprintf(set_keys, sizeof(set_keys), "auth.keys_file=%s", keys);
	snprintf(set_log, sizeof(set_log), "server.audit_log=%s", log);
	if (sbx_keys_add(keys, "alice", NULL, 0, key, &err) < 0)
		tap_bail(err.msg);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", key);
	if (!tap_ok(start_with(&d, "audit", (const char *const[]){set_keys, set_log, NULL}, url,
			       sizeof(url)),
		    "audit: a server with API keys and server.audit_log starts"))
		return;
	tap_is_int(http_raw(url, "GET", "/sse", "", NULL, &text), 401,
		   "audit: GET /sse, no key: 401");
	free(text);
	all = wait_text(log, "auth_failure");
	free(all);
	o = json_line(log, "auth_failure");
	tap_ok(o && !strcmp(jstr(o, "reason"), "missing") && !strcmp(jstr(o, "route"), "/sse") &&
		   !strcmp(jstr(o, "client"), "127.0.0.1"),
	       "audit: ... an auth_failure line in the file: missing, /sse, 127.0.0.1");
	json_object_put(o);
	tap_ok(stat(log, &st) == 0 && (st.st_mode & 07777) == 0600, "audit: the file is 0600");

	if (http_raw(url, "POST", "/mcp", auth,
		     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
		     "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
		     "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}",
		     &text) == 200 &&
	    strcasestr(text, "Mcp-Session-Id: "))
		sscanf(strcasestr(text, "Mcp-Session-Id: ") + 16, "%63[0-9a-f]", session);
	free(text);
	{
		char h[400];
		snprintf(h, sizeof(h), "%sMcp-Session-Id: %s\r\n", auth, session);
		tap_is_int(http_raw(url, "POST", "/mcp", h,
				    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
				    "\"params\":{\"name\":\"list_sandboxes\",\"arguments\":{}}}",
				    &text),
			   200, "audit: alice's session calls list_sandboxes");
		free(text);
	}
	all = wait_text(log, "tool_call");
	free(all);
	o = json_line(log, "tool_call");
	tap_ok(o && strlen(session) == 32 && !strcmp(jstr(o, "tenant"), "alice") &&
		   !strncmp(jstr(o, "key_id"), key + 4, SBX_KEY_ID_LEN) &&
		   strlen(jstr(o, "session")) == 8 && !strncmp(jstr(o, "session"), session, 8) &&
		   !strcmp(jstr(o, "tool"), "list_sandboxes") && !strcmp(jstr(o, "outcome"), "ok"),
	       "audit: ... a tool_call line: alice, her key's id, the session's first 8 "
	       "characters, list_sandboxes, ok");
	json_object_put(o);

	/* A rotation: renamed, then SIGHUP. */
	if (rename(log, old) < 0)
		tap_bail("rename");
	kill(d.pid, SIGHUP);
	all = wait_text(d.err, "reopened the audit log");
	tap_ok(all != NULL, "audit: SIGHUP reopens the audit log, and says so");
	free(all);
	tap_is_int(http_raw(url, "GET", "/sse", "", NULL, &text), 401,
		   "audit: another GET /sse, no key: 401");
	free(text);
	all = wait_text(log, "auth_failure");
	free(all);
	tap_ok(lines_in(log) == 1 && lines_in(old) == 2 && stat(log, &st) == 0 &&
		   (st.st_mode & 07777) == 0600,
	       "audit: ... its line is in a new file at the path (0600), the renamed one keeps "
	       "its two");
	all = slurp(old);
	{
		char *now = slurp(log);
		tap_ok(!strstr(all, key) && !strstr(now, key) && !strstr(all, key + 17) &&
			   !strstr(all, session) && !strstr(all, session + 8),
		       "audit: no key, secret or whole session id in either file");
		free(now);
	}
	free(all);
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "audit, SIGTERM");

	/* A symbolic link as server.audit_log stops the start. */
	unlink(log);
	if (symlink(old, log) < 0)
		tap_bail("symlink");
	daemon_start_with(&d, "audit", (const char *const[]){set_keys, set_log, NULL});
	check_exit(&d, 1, "audit: server.audit_log a symbolic link");
	all = slurp(d.err);
	if (!tap_ok(strstr(all, log) && strstr(all, "symbolic link") && lines_in(old) == 2,
		    "audit: ... its log names the file and why; the link's target untouched"))
		tap_diag("%s", all);
	free(all);

	/* Without server.audit_log: pure JSON lines on standard error. */
	if (tap_ok(start_with(&d, "audit-stderr", (const char *const[]){set_keys, NULL}, url,
			      sizeof(url)),
		   "audit: a server without server.audit_log starts")) {
		http_raw(url, "GET", "/sse", "", NULL, &text);
		free(text);
		all = wait_text(d.err, "{\"time\":");
		o = all ? json_tokener_parse(strtok(all, "\n")) : NULL;
		tap_ok(o && !strcmp(jstr(o, "event"), "auth_failure"),
		       "audit: ... a 401's line on standard error is a JSON object of its own");
		json_object_put(o);
		free(all);
		all = slurp(d.err);
		tap_ok(strstr(all, "audit log (JSON lines): standard error") != NULL,
		       "audit: ... the start-up says where the audit log goes");
		free(all);
		kill(d.pid, SIGTERM);
		check_exit(&d, 0, "audit-stderr, SIGTERM");
	}
	unlink(log);
}

/* Every line of the text at PATH is a JSON object holding time, level and
 * msg, all strings, and nothing else; *RET_N the lines. With LEVEL, one of
 * them has that level and a msg holding NEEDLE. */
static bool all_json(const char *path, size_t *ret_n, const char *level, const char *needle)
{
	char *all = slurp(path);
	bool ok = *all != '\0', found = !level;

	*ret_n = 0;
	for (char *p = all, *nl; ok && *p; p = nl + 1) {
		struct json_object *o;
		nl = strchrnul(p, '\n');
		ok = *nl == '\n';
		*nl = '\0';
		o = json_tokener_parse(p);
		ok = ok && o && json_object_is_type(o, json_type_object) &&
		     json_object_object_length(o) == 3 && *jstr(o, "time") && *jstr(o, "level") &&
		     *jstr(o, "msg");
		if (ok && level && !strcmp(jstr(o, "level"), level) &&
		    strstr(jstr(o, "msg"), needle))
			found = true;
		if (!ok)
			tap_diag("  not a JSON log line: %s", p);
		json_object_put(o);
		(*ret_n)++;
	}
	free(all);
	return ok && found;
}

/* server.log_format = json: what the server writes on standard error as it
 * starts, ignores a SIGHUP and stops is JSON lines, every one; so is a
 * refused start, whose line is an error. */
static void test_json_log(void)
{
	struct daemon d;
	char url[128], *line;
	size_t n = 0;
	bool ok;

	engine_set(ENGINE_ANSWER);
	if (!tap_ok(start_with(&d, "json-log",
			       (const char *const[]){"server.log_format=json",
						     "server.log_level=debug", NULL},
			       url, sizeof(url)),
		    "json log: a server with server.log_format = json starts"))
		return;
	kill(d.pid, SIGHUP);
	line = wait_text(d.err, "SIGHUP ignored");
	free(line);
	kill(d.pid, SIGTERM);
	check_exit(&d, 0, "json log, SIGTERM");
	ok = all_json(d.err, &n, "info", "stopping") && all_json(d.err, &n, "debug", "log: ");
	if (!tap_ok(ok && n >= 5,
		    "json log: each of the %zu lines on standard error from the start to the stop "
		    "is a JSON object of time, level and msg",
		    n))
		diag_file(d.err);

	daemon_start_with(
	    &d, "json-refused",
	    (const char *const[]){"server.log_format=json", "server.listen=0.0.0.0", NULL});
	check_exit(&d, 1, "json log: listen 0.0.0.0 without keys");
	if (!tap_ok(all_json(d.err, &n, "error", "auth.keys_file"),
		    "json log: a refused start's lines are JSON too, the refusal an error naming "
		    "auth.keys_file"))
		diag_file(d.err);
}

int main(void)
{
	const char *builddir = getenv("SBX_BUILDDIR");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	pthread_t t;
	int fd;
	char rm[300];

	snprintf(server, sizeof(server), "%s/src/mcp-sandboxd", builddir ? builddir : ".");
	if (access(server, X_OK) != 0)
		tap_bail("no src/mcp-sandboxd (build first)");
	if (!mkdtemp(tmp))
		tap_bail("mkdtemp");
	snprintf(sock_path, sizeof(sock_path), "%s/engine.sock", tmp);
	snprintf(config_path, sizeof(config_path), "%s/empty.ini", tmp);
	snprintf(state_path, sizeof(state_path), "%s/state", tmp);
	fd = open(config_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		tap_bail("config");
	close(fd);
	if (strlen(sock_path) >= sizeof(sa.sun_path))
		tap_bail("the socket path is too long");
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	eng.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (eng.listen_fd < 0 || bind(eng.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(eng.listen_fd, 16) < 0)
		tap_bail("the fake engine's socket");
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&t, NULL, engine_main, NULL) != 0)
		tap_bail("pthread_create");

	test_silent_engine(SIGTERM, true);
	test_silent_engine(SIGINT, false);
	test_abandon(false);
	test_abandon(true);
	test_serving();
	test_disk_refused();
	test_auth_default();
	test_link_secret();
	test_audit_log();
	test_json_log();

	pthread_mutex_lock(&eng.lock);
	eng.stop = true;
	pthread_mutex_unlock(&eng.lock);
	pthread_join(t, NULL);
	close(eng.listen_fd);
	snprintf(rm, sizeof(rm), "rm -rf '%s'", tmp);
	if (system(rm) != 0)
		tap_diag("could not remove %s", tmp);
	return tap_done();
}
