/* SPDX-License-Identifier: MIT */
/*
 * The engine vtable against the engine's own CLI, in one run on one machine:
 *   bench/bench-engine TYPE SOCKET IMAGE CLI [ROUNDS]
 * TYPE is docker or podman, SOCKET the engine's unix socket, CLI the command
 * that reaches the same engine ("docker" or "podman"; the socket is passed
 * with -H / --url). Prints the median (and p90) of
 *   create+start  a sandbox-shaped container (network none, limits);
 *   exec          `true` in a running container;
 *   round trip    one line to a process behind an interactive exec and back.
 * The ratio is CLI / vtable: above 1 means the vtable is faster.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "sbx/common.h"
#include "sbx/engine.h"

extern char **environ;

static sbx_engine *engine;
static const char *type, *sock, *image, *cli;
static char host_arg[512];

#define LABEL_BENCH "org.mcp-sandbox.bench"

/* Runs CLI with the engine address and ARGS; stdout goes to OUT (may be
 * NULL = discarded). Returns the exit status or -1. */
static int run_cli(const char *const *args, char *out, size_t out_cap)
{
	const char *argv[32];
	size_t n = 0;
	argv[n++] = cli;
	if (strcmp(type, "podman") == 0)
		argv[n++] = "--remote";
	argv[n++] = strcmp(type, "podman") == 0 ? "--url" : "-H";
	argv[n++] = host_arg;
	for (size_t i = 0; args[i] && n < SBX_ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawnp(&pid, cli, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (r != 0) {
		close(p[0]);
		return -1;
	}
	size_t have = 0;
	char scratch[4096];
	for (;;) {
		char *dst = out ? out + have : scratch;
		size_t room = out ? out_cap - 1 - have : sizeof(scratch);
		if (room == 0) {
			dst = scratch;
			room = sizeof(scratch);
		}
		ssize_t k = read(p[0], dst, room);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		if (out && dst != scratch)
			have += (size_t)k;
	}
	if (out) {
		out[have] = '\0';
		out[strcspn(out, "\n")] = '\0';
	}
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *const sleep_cmd[] = {"sleep", "infinity", NULL};

static char *vt_create_start(struct sbx_error *err)
{
	struct sbx_kv labels[] = {{LABEL_BENCH, "1"}};
	struct sbx_container_spec spec = {
	    .image = image,
	    .cmd = sleep_cmd,
	    .labels = labels,
	    .n_labels = 1,
	    .workdir = "/app/results",
	    .user = "1000:1000",
	    .memory_bytes = 256 << 20,
	    .pids_limit = 128,
	    .network_mode = "none",
	};
	char *id = NULL;
	if (sbx_container_create(engine, &spec, &id, err) < 0)
		return NULL;
	if (sbx_container_start(engine, id, err) < 0) {
		sbx_container_remove(engine, id, err);
		free(id);
		return NULL;
	}
	return id;
}

static int cli_create_start(char *id, size_t cap)
{
	const char *const args[] = {
	    "run",    "-d",	      "--label",  LABEL_BENCH "=1", "--network",    "none",
	    "--user", "1000:1000",    "--memory", "256m",	    "--pids-limit", "128",
	    "-w",     "/app/results", image,	  "sleep",	    "infinity",	    NULL};
	return run_cli(args, id, cap);
}

static void cli_remove(const char *id)
{
	const char *const args[] = {"rm", "-f", id, NULL};
	run_cli(args, NULL, 0);
}

static void report(const char *op, double *vt, size_t n_vt, double *ref, size_t n_ref)
{
	double v50 = quantile(vt, n_vt, 0.5), v90 = quantile(vt, n_vt, 0.9);
	double c50 = quantile(ref, n_ref, 0.5), c90 = quantile(ref, n_ref, 0.9);
	printf("%-8s %-14s %10.3f %10.3f   %10.3f %10.3f   %7.1fx  (n=%zu/%zu)\n", type, op, v50,
	       v90, c50, c90, v50 > 0 ? c50 / v50 : 0.0, n_vt, n_ref);
	fflush(stdout);
}

static void bench_create(int rounds)
{
	double *vt = calloc((size_t)rounds, sizeof(double)),
	       *ref = calloc((size_t)rounds, sizeof(double));
	size_t nv = 0, nr = 0;
	struct sbx_error err = SBX_ERROR_INIT;

	for (int i = 0; i < rounds; i++) {
		double t0 = now_ms();
		_cleanup_free_ char *id = vt_create_start(&err);
		double t1 = now_ms();
		if (!id) {
			fprintf(stderr, "create+start: %s\n", err.msg);
			break;
		}
		vt[nv++] = t1 - t0;
		sbx_container_remove(engine, id, &err);

		char cid[256];
		t0 = now_ms();
		int r = cli_create_start(cid, sizeof(cid));
		t1 = now_ms();
		if (r != 0 || !cid[0]) {
			fprintf(stderr, "%s run -d failed (%d)\n", cli, r);
			break;
		}
		ref[nr++] = t1 - t0;
		cli_remove(cid);
	}
	report("create+start", vt, nv, ref, nr);
	free(vt);
	free(ref);
}

static void bench_exec(const char *id, int rounds)
{
	static const char *const true_argv[] = {"true", NULL};
	double *vt = calloc((size_t)rounds, sizeof(double)),
	       *ref = calloc((size_t)rounds, sizeof(double));
	size_t nv = 0, nr = 0;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_exec_spec spec = {.argv = true_argv};

	for (int i = 0; i < rounds; i++) {
		struct sbx_exec_result res = {0};
		double t0 = now_ms();
		int r = sbx_exec(engine, id, &spec, &res, &err);
		double t1 = now_ms();
		sbx_exec_result_release(&res);
		if (r < 0 || res.exit_code != 0) {
			fprintf(stderr, "exec: %s\n", err.msg);
			break;
		}
		vt[nv++] = t1 - t0;

		const char *const args[] = {"exec", id, "true", NULL};
		t0 = now_ms();
		r = run_cli(args, NULL, 0);
		t1 = now_ms();
		if (r != 0) {
			fprintf(stderr, "%s exec failed (%d)\n", cli, r);
			break;
		}
		ref[nr++] = t1 - t0;
	}
	report("exec", vt, nv, ref, nr);
	free(vt);
	free(ref);
}

static const char *const echo_py[] = {
    "python3", "-u", "-c",
    "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n",
    NULL};

static int vt_round_trips(const char *id, double *out, int rounds)
{
	struct sbx_exec_spec spec = {.argv = echo_py};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_stream *s = NULL;
	int n = 0;

	if (sbx_exec_stream(engine, id, &spec, &s, &err) < 0) {
		fprintf(stderr, "stream: %s\n", err.msg);
		return 0;
	}
	for (int i = -10; i < rounds; i++) { /* 10 warm-up lines */
		char got[64];
		size_t have = 0;
		int fd;
		double t0 = now_ms();
		if (sbx_stream_write(s, "ping\n", 5, &err) < 0)
			break;
		while (have == 0 || got[have - 1] != '\n') {
			ssize_t r =
			    sbx_stream_read(s, got + have, sizeof(got) - have, &fd, 10000, &err);
			if (r <= 0)
				goto out;
			have += (size_t)r;
		}
		if (i >= 0)
			out[n++] = now_ms() - t0;
	}
out:
	sbx_stream_close_stdin(s, &err);
	sbx_stream_free(s);
	return n;
}

/* The CLI's interactive form: `CLI exec -i ID python3 ...` with pipes. */
static int cli_round_trips(const char *id, double *out, int rounds)
{
	const char *argv[16];
	size_t k = 0;
	argv[k++] = cli;
	if (strcmp(type, "podman") == 0)
		argv[k++] = "--remote";
	argv[k++] = strcmp(type, "podman") == 0 ? "--url" : "-H";
	argv[k++] = host_arg;
	argv[k++] = "exec";
	argv[k++] = "-i";
	argv[k++] = id;
	for (size_t i = 0; echo_py[i]; i++)
		argv[k++] = echo_py[i];
	argv[k] = NULL;

	int in[2], outp[2];
	if (pipe2(in, O_CLOEXEC) < 0)
		return 0;
	if (pipe2(outp, O_CLOEXEC) < 0) {
		close(in[0]);
		close(in[1]);
		return 0;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
	pid_t pid;
	int r = posix_spawnp(&pid, cli, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(outp[1]);
	int n = 0;
	if (r == 0) {
		for (int i = -10; i < rounds; i++) {
			char got[64];
			size_t have = 0;
			double t0 = now_ms();
			if (write(in[1], "ping\n", 5) != 5)
				break;
			while (have == 0 || got[have - 1] != '\n') {
				ssize_t g = read(outp[0], got + have, sizeof(got) - have);
				if (g <= 0)
					goto out;
				have += (size_t)g;
			}
			if (i >= 0)
				out[n++] = now_ms() - t0;
		}
	}
out:
	close(in[1]);
	close(outp[0]);
	if (r == 0) {
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	return n;
}

static void bench_stream(const char *id, int rounds)
{
	double *vt = calloc((size_t)rounds, sizeof(double)),
	       *ref = calloc((size_t)rounds, sizeof(double));
	int nv = vt_round_trips(id, vt, rounds);
	int nr = cli_round_trips(id, ref, rounds);
	report("round trip", vt, (size_t)nv, ref, (size_t)nr);
	free(vt);
	free(ref);
}

static int count_sink(void *userdata, const void *data, size_t len)
{
	(void)data;
	*(size_t *)userdata += len;
	return 0;
}

/* One artifact of 1 MiB read as the server reads it now (an exec as uid
 * 1000 that streams it, src/sandbox/files.c) next to the engine's archive
 * API (as root: what the server used before, for the cost of the change). */
static void bench_artifact(const char *id, int rounds)
{
	static const char *const make_argv[] = {
	    "sh", "-c", "head -c 1048576 /dev/urandom > /tmp/bench-artifact", NULL};
	static const char *const cat_argv[] = {"sh", "-c", "exec cat -- /tmp/bench-artifact", NULL};
	struct sbx_exec_spec make = {.argv = make_argv, .user = "1000:1000"};
	struct sbx_exec_spec cat = {.argv = cat_argv, .user = "1000:1000"};
	double *vt = calloc((size_t)rounds, sizeof(double)),
	       *ref = calloc((size_t)rounds, sizeof(double));
	struct sbx_exec_result res = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	size_t nv = 0, nr = 0;

	if (sbx_exec(engine, id, &make, &res, &err) < 0 || res.exit_code != 0) {
		fprintf(stderr, "artifact: %s\n", err.msg);
		goto out;
	}
	for (int i = 0; i < rounds; i++) {
		sbx_stream *s = NULL;
		size_t got = 0;
		char buf[65536];
		int fd;
		ssize_t n;
		double t0 = now_ms();

		if (sbx_exec_stream(engine, id, &cat, &s, &err) < 0 ||
		    sbx_stream_close_stdin(s, &err) < 0) {
			sbx_stream_free(s);
			break;
		}
		while ((n = sbx_stream_read(s, buf, sizeof(buf), &fd, 10000, &err)) > 0)
			got += fd == 1 ? (size_t)n : 0;
		sbx_stream_free(s);
		if (got != 1048576)
			break;
		vt[nv++] = now_ms() - t0;
		got = 0;
		t0 = now_ms();
		if (sbx_archive_get(engine, id, "/tmp/bench-artifact", count_sink, &got, &err) <
			0 ||
		    got < 1048576)
			break;
		ref[nr++] = now_ms() - t0;
	}
	printf("# artifact of 1 MiB: vt = an exec as uid 1000 (the server's way), "
	       "cli = the archive API as root (the old way)\n");
	report("artifact 1m", vt, nv, ref, nr);
out:
	sbx_exec_result_release(&res);
	free(vt);
	free(ref);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE CLI [ROUNDS]\n", argv[0]);
		return 2;
	}
	type = argv[1];
	sock = argv[2];
	image = argv[3];
	cli = argv[4];
	int rounds = argc > 5 ? atoi(argv[5]) : 20;
	if (rounds < 1)
		rounds = 1;
	snprintf(host_arg, sizeof(host_arg), "unix://%s", sock);
	signal(SIGPIPE, SIG_IGN);

	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_engine_config cfg = {.type = type, .url = host_arg};
	if (sbx_engine_open(&cfg, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0) {
		fprintf(stderr, "%s: %s\n", type, err.msg);
		sbx_engine_free(engine);
		return 1;
	}
	bench_create(rounds);
	_cleanup_free_ char *id = vt_create_start(&err);
	if (!id) {
		fprintf(stderr, "create+start: %s\n", err.msg);
		sbx_engine_free(engine);
		return 1;
	}
	bench_exec(id, rounds * 2);
	bench_stream(id, rounds * 50);
	bench_artifact(id, rounds);
	sbx_container_remove(engine, id, &err);
	sbx_engine_free(engine);
	return 0;
}
