/* SPDX-License-Identifier: MIT */
/*
 * What the egress relay costs (src/egress/egress.c): one file downloaded by
 * code in a sandbox, through the relay and directly, on one machine:
 *   bench/bench-egress TYPE SOCKET IMAGE [MIB] [ROUNDS]
 * A file of MIB MiB (64) is served on 127.0.0.1 by a Python server the
 * benchmark starts. One sandbox with network none reaches it through its
 * relay, as an index file (GET on the relay: the server fetches with
 * libcurl) and through a tunnel (CONNECT, as for files.pythonhosted.org);
 * one sandbox with network host reads it directly. Prints the median of
 * ROUNDS (3) downloads in MB/s and each relayed path's share of the direct
 * one. Every container is removed at the end.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "sandbox/sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

/* Serves ROOT/blob (N MiB of zeros, made first) on 127.0.0.1; prints its port. */
static const char server_py[] = "import http.server, os, sys, threading, time\n"
				"root, mib = sys.argv[1], int(sys.argv[2])\n"
				"with open(os.path.join(root, 'blob'), 'wb') as f:\n"
				"    f.truncate(mib << 20)\n"
				"os.chdir(root)\n"
				"class Q(http.server.SimpleHTTPRequestHandler):\n"
				"    def log_message(self, *a):\n"
				"        pass\n"
				"s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Q)\n"
				"parent = os.getppid()\n"
				"def orphaned():\n"
				"    while os.getppid() == parent:\n"
				"        time.sleep(0.5)\n"
				"    os._exit(0)\n"
				"threading.Thread(target=orphaned, daemon=True).start()\n"
				"print(s.server_address[1], flush=True)\n"
				"s.serve_forever()\n";

/* In the sandbox: MODE (direct, index, tunnel) ROUNDS times, MB/s each. */
static const char client_py[] =
    "import socket, time, urllib.request\n"
    "mode, port, relay, rounds = '%s', %d, %d, %d\n"
    "def body(s):\n"
    "    n = 0\n"
    "    while True:\n"
    "        b = s.recv(1 << 20)\n"
    "        if not b:\n"
    "            return n\n"
    "        n += len(b)\n"
    "def once():\n"
    "    if mode == 'direct':\n"
    "        s = socket.create_connection(('127.0.0.1', port))\n"
    "    else:\n"
    "        s = socket.create_connection(('127.0.0.1', relay))\n"
    "    if mode == 'tunnel':\n"
    "        s.sendall(b'CONNECT 127.0.0.1:%%d HTTP/1.1\\r\\n\\r\\n' %% port)\n"
    "        head = b''\n"
    "        while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "            head += s.recv(1)\n"
    "    s.sendall(b'GET /blob HTTP/1.0\\r\\n\\r\\n')\n"
    "    return body(s)\n"
    "for _ in range(rounds):\n"
    "    t = time.time()\n"
    "    n = once()\n"
    "    print('%%.1f %%d' %% (n / (time.time() - t) / 1e6, n))\n";

static pid_t server_pid;
static char root[] = "/tmp/sbx-bench-egress-XXXXXX";

static int start_server(int mib)
{
	int fds[2], port = 0;
	char line[32], n[16];
	FILE *f;

	if (!mkdtemp(root) || pipe(fds) < 0)
		return -1;
	snprintf(n, sizeof(n), "%d", mib);
	server_pid = fork();
	if (server_pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execlp("python3", "python3", "-c", server_py, root, n, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (f && fgets(line, sizeof(line), f))
		port = atoi(line);
	if (f)
		fclose(f);
	return port;
}

/* The median MB/s of MODE in SB (the response head counted, EXPECT bytes of
 * body at least), 0 when it failed. */
static double measure(sbx_manager *m, sbx_sandbox *sb, const char *mode, int port, int relay,
		      int rounds, long expect)
{
	struct sbx_run_result res = {0};
	struct sbx_run_opts o = {.timeout_ms = 600000};
	struct sbx_error err = SBX_ERROR_INIT;
	char code[sizeof(client_py) + 64];
	double v[64];
	int n = 0;

	snprintf(code, sizeof(code), client_py, mode, port, relay, rounds);
	if (sbx_sandbox_run_python_ex(m, sb, code, &o, &res, &err) < 0) {
		fprintf(stderr, "bench-egress: %s: %s\n", mode, err.msg);
		return 0;
	}
	for (char *line = res.out.data; line && *line && n < 64;) {
		double mbs;
		long got;
		if (sscanf(line, "%lf %ld", &mbs, &got) == 2 && got >= expect)
			v[n++] = mbs;
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	if (n < rounds)
		fprintf(stderr, "bench-egress: %s: %d of %d downloads complete: %s%s\n", mode, n,
			rounds, res.out.data ? res.out.data : "", res.err.data ? res.err.data : "");
	sbx_run_result_release(&res);
	if (!n)
		return 0;
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	return v[n / 2];
}

static sbx_manager *manager(struct sbx_settings *s, sbx_engine *e, const char *inst,
			    const char *image, const char *const *extra)
{
	struct sbx_error err = SBX_ERROR_INIT;
	char line[512];
	sbx_manager *m = NULL;
	const char *common[] = {"sandbox.disk=0", "sandbox.pool_size=0", "sandbox.memory=512m",
				NULL};

	sbx_settings_init(s);
	snprintf(line, sizeof(line), "server.instance=%s", inst);
	sbx_settings_set(s, line, NULL);
	snprintf(line, sizeof(line), "sandbox.image=%s", image);
	sbx_settings_set(s, line, NULL);
	for (const char *const *x = common; *x; x++)
		sbx_settings_set(s, *x, NULL);
	for (; extra && *extra; extra++)
		if (sbx_settings_set(s, *extra, &err) < 0) {
			fprintf(stderr, "bench-egress: %s: %s\n", *extra, err.msg);
			sbx_settings_release(s);
			return NULL;
		}
	if (sbx_manager_new(s, e, &m, &err) < 0) {
		fprintf(stderr, "bench-egress: manager: %s\n", err.msg);
		sbx_settings_release(s);
		return NULL;
	}
	return m;
}

int main(int argc, char **argv)
{
	struct sbx_engine_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings rs, ds;
	sbx_engine *e = NULL;
	sbx_manager *rm = NULL, *dm = NULL;
	sbx_sandbox *r = NULL, *d = NULL;
	char url[128], allow[128], rinst[64], dinst[64], url_arg[160];
	int mib = argc > 4 ? atoi(argv[4]) : 64, rounds = argc > 5 ? atoi(argv[5]) : 3;
	int port, relay = 0, status = 1;
	double direct, index, tunnel;

	if (argc < 4 || mib < 1 || rounds < 1 || rounds > 64) {
		fprintf(stderr, "usage: %s TYPE SOCKET IMAGE [MIB] [ROUNDS]\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(url_arg, sizeof(url_arg), "unix://%s", argv[2]);
	cfg.type = argv[1];
	cfg.url = url_arg;
	if (sbx_engine_open(&cfg, &e, &err) < 0 || sbx_engine_ping(e, &err) < 0) {
		fprintf(stderr, "bench-egress: %s: %s\n", argv[1], err.msg);
		return 1;
	}
	port = start_server(mib);
	if (port <= 0) {
		fprintf(stderr, "bench-egress: the file server did not start\n");
		goto out;
	}
	snprintf(url, sizeof(url), "sandbox.index_url=http://127.0.0.1:%d/", port);
	snprintf(allow, sizeof(allow), "sandbox.egress_allow=127.0.0.1:%d", port);
	snprintf(rinst, sizeof(rinst), "bench-egress-r-%ld", (long)getpid());
	snprintf(dinst, sizeof(dinst), "bench-egress-d-%ld", (long)getpid());
	{
		const char *const rx[] = {"sandbox.network=none", url, allow, NULL};
		const char *const dx[] = {"sandbox.network=host", NULL};
		rm = manager(&rs, e, rinst, argv[3], rx);
		dm = manager(&ds, e, dinst, argv[3], dx);
	}
	if (!rm || !dm || sbx_sandbox_create(rm, "bench", NULL, &r, &err) < 0 ||
	    sbx_sandbox_create(dm, "bench", NULL, &d, &err) < 0 ||
	    sbx_sandbox_egress_ensure(rm, r, &relay, &err) < 0) {
		fprintf(stderr, "bench-egress: %s\n", err.msg);
		goto out;
	}
	direct = measure(dm, d, "direct", port, 0, rounds, (long)mib << 20);
	index = measure(rm, r, "index", port, relay, rounds, (long)mib << 20);
	tunnel = measure(rm, r, "tunnel", port, relay, rounds, (long)mib << 20);
	printf("%-8s %-28s %10.1f\n", argv[1], "direct (network host)", direct);
	printf("%-8s %-28s %10.1f   %5.0f%%\n", argv[1], "relay, index file (libcurl)", index,
	       direct > 0 ? 100 * index / direct : 0);
	printf("%-8s %-28s %10.1f   %5.0f%%\n", argv[1], "relay, CONNECT tunnel", tunnel,
	       direct > 0 ? 100 * tunnel / direct : 0);
	status = direct > 0 && index > 0 && tunnel > 0 ? 0 : 1;
out:
	sbx_sandbox_unref(r);
	sbx_sandbox_unref(d);
	sbx_manager_free(rm);
	sbx_manager_free(dm);
	if (rm)
		sbx_settings_release(&rs);
	if (dm)
		sbx_settings_release(&ds);
	if (server_pid > 0) {
		char rmcmd[96];
		kill(server_pid, SIGTERM);
		waitpid(server_pid, NULL, 0);
		snprintf(rmcmd, sizeof(rmcmd), "rm -rf '%s'", root);
		if (system(rmcmd) != 0)
			fprintf(stderr, "bench-egress: could not remove %s\n", root);
	}
	sbx_engine_free(e);
	return status;
}
