/* SPDX-License-Identifier: MIT */
/*
 * The engine events stream without an engine: the line splitter and parser
 * of backends/events.c on event lines captured from the real engines
 * (Docker 20.10.24, Podman 4.3.1) and on hostile input (garbage, partial
 * lines cut anywhere, a line over 1 MiB); then sbx_engine_events end to end
 * against a scripted loopback HTTP server (OPEN from the head alone, stop
 * while idle, a clean end, an error status, a huge line, a cut connection);
 * last a hijacked stream that its engine resets.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../backends/engine-internal.h"
#include "../backends/rest.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "tap.h"

/* Docker 20.10.24: start, kill, die, destroy of a container labelled evcap=1
 * (and other=x), then the oom of another (labelled evoom=1). */
static const char docker_lines[] =
    "{\"status\":\"start\",\"id\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"Attributes\":{"
    "\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"name\":\"ecstatic_hugle\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\"}},"
    "\"scope\":\"local\",\"time\":1796323556,\"timeNano\":1796323556406123748}\n"
    "{\"status\":\"kill\",\"id\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"kill\",\"Actor\":{\"ID\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"Attributes\":{"
    "\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"name\":\"ecstatic_hugle\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"signal\":\"9\"}},\"scope\":\"local\",\"time\":1796323557,\"timeNano\":1796323557466090701}\n"
    "{\"status\":\"die\",\"id\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"die\",\"Actor\":{\"ID\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"Attributes\":{"
    "\"evcap\":\"1\",\"exitCode\":\"137\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"name\":\"ecstatic_hugle\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\"}},"
    "\"scope\":\"local\",\"time\":1796323557,\"timeNano\":1796323557527837111}\n"
    "{\"status\":\"destroy\",\"id\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"destroy\",\"Actor\":{\"ID\":"
    "\"60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9\",\"Attributes\":{"
    "\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"name\":\"ecstatic_hugle\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\"}},"
    "\"scope\":\"local\",\"time\":1796323558,\"timeNano\":1796323558573587252}\n";
static const char docker_oom_line[] =
    "{\"status\":\"oom\",\"id\":"
    "\"e4d8ebd45cf0b01ce8ed8bf5259cd0ddfbbf41fc135c3dfdbff3c1901f28760e\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"oom\",\"Actor\":{\"ID\":"
    "\"e4d8ebd45cf0b01ce8ed8bf5259cd0ddfbbf41fc135c3dfdbff3c1901f28760e\",\"Attributes\":{"
    "\"evoom\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"name\":\"amazing_pasteur\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\"}},\"scope\":\"local\","
    "\"time\":1796323632,\"timeNano\":1796323632966409344}\n";
/* Podman 4.3.1: start, kill, died, remove of a container labelled evcap=1,
 * and a create and a cleanup (actions not followed). */
static const char podman_lines[] =
    "{\"status\":\"start\",\"id\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"happy_hofstadter\",\"org."
    "mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"podId\":\"\"}},\"scope\":\"local\",\"time\":1796323568,\"timeNano\":1796323568785699676}\n"
    "{\"status\":\"kill\",\"id\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"kill\",\"Actor\":{\"ID\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"happy_hofstadter\",\"org."
    "mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"podId\":\"\"}},\"scope\":\"local\",\"time\":1796323571,\"timeNano\":1796323571243369147}\n"
    "{\"status\":\"died\",\"id\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"died\",\"Actor\":{\"ID\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"Attributes\":{"
    "\"containerExitCode\":\"137\",\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"happy_hofstadter\",\"org."
    "mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"podId\":\"\"}},\"scope\":\"local\",\"time\":1796323571,\"timeNano\":1796323571272405164}\n"
    "{\"status\":\"remove\",\"id\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"remove\",\"Actor\":{\"ID\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"happy_hofstadter\",\"org."
    "mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"podId\":\"\"}},\"scope\":\"local\",\"time\":1796323574,\"timeNano\":1796323574493364756}\n"
    "{\"status\":\"create\",\"id\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"create\",\"Actor\":{\"ID\":"
    "\"ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"evcap\":\"1\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"happy_hofstadter\",\"org."
    "mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"other\":\"x\","
    "\"podId\":\"\"}},\"scope\":\"local\",\"time\":1796323567,\"timeNano\":1796323567550462360}\n"
    "{\"status\":\"create\",\"id\":"
    "\"79a5b6f78204251eaf451bf348842cf54da8973b6925b3a27c4fd9c631656a6c\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"create\",\"Actor\":{\"ID\":"
    "\"79a5b6f78204251eaf451bf348842cf54da8973b6925b3a27c4fd9c631656a6c\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"serene_dirac\",\"nolabel\":"
    "\"1\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"podId\":\"\"}},"
    "\"scope\":\"local\",\"time\":1796323567,\"timeNano\":1796323567665024405}\n";
/* Podman 4.3.1: the start of a container without evcap=1 (label nolabel=1). */
static const char podman_other_start[] =
    "{\"status\":\"start\",\"id\":"
    "\"79a5b6f78204251eaf451bf348842cf54da8973b6925b3a27c4fd9c631656a6c\",\"from\":\"localhost/"
    "mcp-sandbox:latest\",\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":"
    "\"79a5b6f78204251eaf451bf348842cf54da8973b6925b3a27c4fd9c631656a6c\",\"Attributes\":{"
    "\"containerExitCode\":\"0\",\"image\":\"localhost/"
    "mcp-sandbox:latest\",\"io.buildah.version\":\"1.28.2\",\"name\":\"serene_dirac\",\"nolabel\":"
    "\"1\",\"org.mcp-sandbox.containerfile-sha256\":"
    "\"68a38df01c9ef275fd9dbcc8c32c33f8c829f984a56600e279a7760357d66dcb\",\"podId\":\"\"}},"
    "\"scope\":\"local\",\"time\":1796323570,\"timeNano\":1796323570079814596}\n";

#define DOCKER_ID "60ade8ef6e6377b974003c587e60b5baef92973d8878a153a5d8664b2576b1a9"
#define PODMAN_ID "ccbf74a8af7410679c375e938118b8a9c8fa873c2433ae754a3500d0f4fb3172"
#define MAX_EVENTS 64

/* What on_event was given, copied. */
struct got {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	struct {
		enum sbx_event_kind kind;
		char id[80];
		bool has_id;
		int exit_code, signal;
		int64_t time_ns;
	} ev[MAX_EVENTS];
	int fail_at; /* on_event returns -ENOLINK for the fail_at-th event (1-based) */
	int stop;    /* stopped() answers this (atomic) */
	int stopped_calls;
};

static void got_init(struct got *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
}

static void got_free(struct got *g)
{
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->cond);
}

static int collect(void *ud, const struct sbx_engine_event *ev)
{
	struct got *g = ud;
	int n;

	pthread_mutex_lock(&g->lock);
	n = ++g->n;
	if (n <= MAX_EVENTS) {
		g->ev[n - 1].kind = ev->kind;
		g->ev[n - 1].has_id = ev->container != NULL;
		snprintf(g->ev[n - 1].id, sizeof(g->ev[n - 1].id), "%s",
			 ev->container ? ev->container : "");
		g->ev[n - 1].exit_code = ev->exit_code;
		g->ev[n - 1].signal = ev->signal;
		g->ev[n - 1].time_ns = ev->time_ns;
	}
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
	return g->fail_at == n ? -ENOLINK : 0;
}

static bool stopped(void *ud)
{
	struct got *g = ud;
	__atomic_add_fetch(&g->stopped_calls, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&g->stop, __ATOMIC_SEQ_CST) != 0;
}

/* Waits (up to timeout_s, a bound on hangs only) until N events arrived. */
static bool got_wait(struct got *g, int n, int timeout_s)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_s;
	pthread_mutex_lock(&g->lock);
	while (g->n < n && pthread_cond_timedwait(&g->cond, &g->lock, &until) == 0)
		;
	ok = g->n >= n;
	pthread_mutex_unlock(&g->lock);
	return ok;
}

static const char *kind_name(enum sbx_event_kind k)
{
	static const char *const names[] = {"OPEN", "START", "DIE", "OOM", "KILL", "DESTROY"};
	return (unsigned)k < SBX_ARRAY_SIZE(names) ? names[k] : "?";
}

/* "START KILL DIE DESTROY" of what was collected. */
static const char *kinds(struct got *g, char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < g->n && i < MAX_EVENTS && off < size; i++)
		off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? " " : "",
					kind_name(g->ev[i].kind));
	return buf;
}

/* Feeds TEXT in chunks of CHUNK bytes (0 = whole) to a fresh parser. */
static int feed(const struct sbx_events_dialect *d, const struct sbx_kv *labels, size_t n_labels,
		const char *text, size_t len, size_t chunk, struct got *g, struct sbx_error *err)
{
	struct sbx_events_spec spec = {
	    .labels = labels,
	    .n_labels = n_labels,
	    .on_event = collect,
	    .stopped = stopped,
	    .userdata = g,
	};
	struct sbx_events_parser p;
	int r = sbx_events_parser_init(&p, d, &spec);

	for (size_t off = 0; r == 0 && off < len;) {
		size_t take = chunk && chunk < len - off ? chunk : len - off;
		r = sbx_events_parser_feed(&p, text + off, take, err);
		off += take;
	}
	sbx_events_parser_release(&p);
	return r;
}

static const struct sbx_kv evcap[] = {{"evcap", "1"}};

static void test_docker_lines(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct got g;
	char buf[256];
	int r;

	got_init(&g);
	r = feed(&sbx_events_docker, evcap, 1, docker_lines, strlen(docker_lines), 0, &g, &err);
	tap_is_int(r, 0, "docker: the captured lines are taken (%s)", err.msg);
	tap_is_str(kinds(&g, buf, sizeof(buf)), "START KILL DIE DESTROY",
		   "docker: start, kill, die, destroy");
	tap_ok(g.n == 4 && !strcmp(g.ev[0].id, DOCKER_ID) && !strcmp(g.ev[3].id, DOCKER_ID),
	       "docker: each names the container's full id");
	tap_is_int(g.ev[1].signal, 9, "docker: kill carries Attributes.signal \"9\"");
	tap_is_int(g.ev[2].exit_code, 137, "docker: die carries Attributes.exitCode \"137\"");
	tap_is_int(g.ev[0].time_ns, 1796323556406123748LL, "docker: timeNano is the time");
	got_free(&g);

	got_init(&g);
	r = feed(&sbx_events_docker, (const struct sbx_kv[]){{"evoom", "1"}}, 1, docker_oom_line,
		 strlen(docker_oom_line), 0, &g, &err);
	tap_ok(r == 0 && g.n == 1 && g.ev[0].kind == SBX_EVENT_OOM, "docker: the oom line is OOM");
	got_free(&g);

	got_init(&g);
	r = feed(&sbx_events_docker, evcap, 1, docker_oom_line, strlen(docker_oom_line), 0, &g,
		 &err);
	tap_ok(r == 0 && g.n == 0, "docker: a container without the label gives nothing");
	got_free(&g);
}

static void test_podman_lines(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf all = SBX_BUF_INIT;
	struct got g;
	char buf[256];
	int r;

	sbx_buf_appendf(&all, "%s%s", podman_lines, podman_other_start);
	got_init(&g);
	r = feed(&sbx_events_libpod, evcap, 1, all.data, all.len, 0, &g, &err);
	tap_is_int(r, 0, "podman: the captured lines are taken (%s)", err.msg);
	tap_is_str(kinds(&g, buf, sizeof(buf)), "START KILL DIE DESTROY",
		   "podman: start, kill, died, remove; create, cleanup and the unlabelled "
		   "container's start left out");
	tap_ok(g.n == 4 && !strcmp(g.ev[0].id, PODMAN_ID) && !strcmp(g.ev[2].id, PODMAN_ID),
	       "podman: each names the container's full id");
	tap_is_int(g.ev[1].signal, 0, "podman: kill says no signal (0)");
	tap_is_int(g.ev[2].exit_code, 137, "podman: died carries Attributes.containerExitCode");
	got_free(&g);

	/* Podman ORs label filters: every label must be checked here. */
	got_init(&g);
	r = feed(&sbx_events_libpod, (const struct sbx_kv[]){{"evcap", "1"}, {"other", "x"}}, 2,
		 all.data, all.len, 0, &g, &err);
	tap_ok(r == 0 && g.n == 4, "podman: two labels both carried: 4 events (%d)", g.n);
	got_free(&g);
	got_init(&g);
	r = feed(&sbx_events_libpod, (const struct sbx_kv[]){{"evcap", "1"}, {"other", "y"}}, 2,
		 all.data, all.len, 0, &g, &err);
	tap_ok(r == 0 && g.n == 0, "podman: one label of two not carried: nothing (%d)", g.n);
	got_free(&g);
	got_init(&g);
	r = feed(&sbx_events_libpod, NULL, 0, all.data, all.len, 0, &g, &err);
	tap_ok(r == 0 && g.n == 5, "podman: no labels: the other container's start too (%d)", g.n);
	got_free(&g);

	/* The dialects differ: Docker's names do not match libpod's. */
	got_init(&g);
	r = feed(&sbx_events_docker, evcap, 1, podman_lines, strlen(podman_lines), 0, &g, &err);
	tap_is_str(kinds(&g, buf, sizeof(buf)), "START KILL",
		   "podman's died and remove are not Docker's actions");
	got_free(&g);
	sbx_buf_release(&all);
}

/* The same events whatever the chunking, with \n or \r\n. */
static void test_chunks(void)
{
	static const size_t sizes[] = {1, 2, 3, 7, 64, 333, 4096};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf crlf = SBX_BUF_INIT;
	bool all_same = true;
	char buf[256];

	for (const char *s = docker_lines; *s; s++)
		sbx_buf_appendf(&crlf, "%s", *s == '\n' ? "\r\n" : (char[]){*s, 0});
	for (size_t i = 0; i < SBX_ARRAY_SIZE(sizes); i++)
		for (int crlf_too = 0; crlf_too < 2; crlf_too++) {
			const char *text = crlf_too ? crlf.data : docker_lines;
			struct got g;
			int r;

			got_init(&g);
			r = feed(&sbx_events_docker, evcap, 1, text, strlen(text), sizes[i], &g,
				 &err);
			if (r != 0 ||
			    strcmp(kinds(&g, buf, sizeof(buf)), "START KILL DIE DESTROY") ||
			    g.ev[2].exit_code != 137 || strcmp(g.ev[3].id, DOCKER_ID)) {
				all_same = false;
				tap_diag("chunks of %zu%s: %d, %s", sizes[i],
					 crlf_too ? " (CRLF)" : "", r, buf);
			}
			got_free(&g);
		}
	tap_ok(all_same, "lines cut anywhere (chunks of 1 to 4096 bytes, LF or CRLF) give the "
			 "same four events");
	sbx_buf_release(&crlf);
}

static void test_garbage(void)
{
	/* Each line but the last must be skipped without ending the stream. */
	static const char garbage[] =
	    "garbage\n"
	    "{\n"
	    "}\n"
	    "[]\n"
	    "42\n"
	    "\"a string\"\n"
	    "null\n"
	    "{}\n"
	    "\n"
	    "   \n"
	    "{\"Type\":\"container\",\"Action\":\"start\"}\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":7,"
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n"
	    "{\"Type\":\"image\",\"Action\":\"start\",\"Actor\":{\"ID\":\"i\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n"
	    "{\"Type\":\"container\",\"Action\":\"restart\",\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n"
	    "{\"Type\":\"container\",\"Action\":42,\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":{\"evcap\":1}}}\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":\"evcap=1\"}}\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":{\"evcap\":\"1\"}}} trailing\n"
	    "{\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"c\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}{\"second\":1}\n"
	    "{\"Type\":\"container\",\"Action\":\"sta\xff\xfe\",\"Actor\":{\"ID\":\"c\"}}\n"
	    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
	    "{\"Type\":\"container\",\"Action\":\"destroy\",\"Actor\":{\"ID\":\"last\","
	    "\"Attributes\":{\"evcap\":\"1\"}}}\n";
	static const char nul_line[] = "{\"Type\":\"container\",\"Action\":\"start\"\0,"
				       "\"Actor\":{\"ID\":\"c\"}}\n";
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf withnul = SBX_BUF_INIT;
	struct got g;
	int r;

	got_init(&g);
	r = feed(&sbx_events_docker, evcap, 1, garbage, strlen(garbage), 0, &g, &err);
	tap_is_int(r, 0, "malformed, partial, foreign and unknown lines do not end the stream");
	tap_ok(g.n == 1 && g.ev[0].kind == SBX_EVENT_DESTROY && !strcmp(g.ev[0].id, "last"),
	       "only the one well-formed event after them is delivered (%d)", g.n);
	got_free(&g);

	/* A NUL inside a line. */
	sbx_buf_append(&withnul, nul_line, sizeof(nul_line) - 1);
	sbx_buf_appendf(&withnul, "%s", docker_oom_line);
	got_init(&g);
	r = feed(&sbx_events_docker, NULL, 0, withnul.data, withnul.len, 0, &g, &err);
	tap_ok(r == 0 && g.n == 1 && g.ev[0].kind == SBX_EVENT_OOM,
	       "a NUL byte inside a line: that line skipped, the next taken (%d)", g.n);
	got_free(&g);
	sbx_buf_release(&withnul);
}

/* One synthetic event line with ATTRS (JSON members) and TAIL (more members). */
static int one(const struct sbx_events_dialect *d, const char *action, const char *attrs,
	       const char *tail, struct got *g)
{
	char line[1024];
	struct sbx_error err = SBX_ERROR_INIT;

	snprintf(line, sizeof(line),
		 "{\"Type\":\"container\",\"Action\":\"%s\",\"Actor\":{\"ID\":\"c1\","
		 "\"Attributes\":{%s}}%s}\n",
		 action, attrs, tail);
	got_init(g);
	return feed(d, NULL, 0, line, strlen(line), 0, g, &err);
}

static void test_attributes(void)
{
	static const struct {
		const char *attrs;
		int signal;
	} sig[] = {
	    {"\"signal\":\"9\"", 9},
	    {"\"signal\":\"SIGTERM\"", 15},
	    {"\"signal\":\"KILL\"", 9},
	    {"\"signal\":\"sigint\"", 2},
	    {"\"signal\":2", 2},
	    {"\"signal\":\"bogus\"", 0},
	    {"\"signal\":\"99\"", 0},
	    {"\"signal\":\"-9\"", 0},
	    {"\"signal\":\"9x\"", 0},
	    {"\"signal\":\"RTMIN+1\"", 0},
	    {"", 0},
	    {"\"signal\":null", 0},
	};
	static const struct {
		const struct sbx_events_dialect *d;
		const char *attrs;
		int exit_code;
	} ec[] = {
	    {&sbx_events_docker, "\"exitCode\":\"137\"", 137},
	    {&sbx_events_docker, "\"exitCode\":3", 3},
	    {&sbx_events_docker, "\"exitCode\":\"abc\"", -1},
	    {&sbx_events_docker, "\"exitCode\":\"300\"", -1},
	    {&sbx_events_docker, "\"exitCode\":\"\"", -1},
	    {&sbx_events_docker, "", -1},
	    {&sbx_events_docker, "\"containerExitCode\":\"1\"", -1},
	    {&sbx_events_libpod, "\"containerExitCode\":\"1\"", 1},
	    {&sbx_events_libpod, "\"exitCode\":\"1\"", -1},
	};
	struct got g;
	bool ok = true;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(sig); i++) {
		int r = one(&sbx_events_docker, "kill", sig[i].attrs, "", &g);
		if (r || g.n != 1 || g.ev[0].kind != SBX_EVENT_KILL ||
		    g.ev[0].signal != sig[i].signal) {
			ok = false;
			tap_diag("signal {%s}: r %d n %d signal %d", sig[i].attrs, r, g.n,
				 g.n ? g.ev[0].signal : -100);
		}
		got_free(&g);
	}
	tap_ok(ok, "kill signals: numbers, names with or without SIG, unknown ones 0");
	ok = true;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(ec); i++) {
		const char *action = ec[i].d == &sbx_events_docker ? "die" : "died";
		int r = one(ec[i].d, action, ec[i].attrs, "", &g);
		if (r || g.n != 1 || g.ev[0].kind != SBX_EVENT_DIE ||
		    g.ev[0].exit_code != ec[i].exit_code) {
			ok = false;
			tap_diag("exit code {%s}: r %d n %d code %d", ec[i].attrs, r, g.n,
				 g.n ? g.ev[0].exit_code : -100);
		}
		got_free(&g);
	}
	tap_ok(ok, "die exit codes from the dialect's attribute, -1 when absent or not 0-255");
	one(&sbx_events_docker, "start", "", ",\"time\":5", &g);
	tap_ok(g.n == 1 && g.ev[0].time_ns == 5000000000LL, "time alone: seconds to ns");
	got_free(&g);
	one(&sbx_events_docker, "start", "", "", &g);
	tap_ok(g.n == 1 && g.ev[0].time_ns == 0 && g.ev[0].exit_code == -1 && g.ev[0].signal == 0,
	       "no time: 0; a START has exit code -1 and signal 0");
	got_free(&g);
	one(&sbx_events_docker, "start", "", ",\"timeNano\":\"x\",\"time\":-3", &g);
	tap_ok(g.n == 1 && g.ev[0].time_ns == 0, "nonsense times: 0");
	got_free(&g);
}

static void test_line_limit(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf text = SBX_BUF_INIT;
	struct got g;
	int r;

	/* Exactly the limit, then newline and an event: skipped, then taken. */
	sbx_buf_reserve(&text, SBX_EVENTS_LINE_MAX + 1024);
	memset(text.data, 'x', SBX_EVENTS_LINE_MAX);
	text.len = SBX_EVENTS_LINE_MAX;
	sbx_buf_appendf(&text, "\n%s", docker_oom_line);
	got_init(&g);
	r = feed(&sbx_events_docker, NULL, 0, text.data, text.len, 65536, &g, &err);
	tap_ok(r == 0 && g.n == 1, "a line of exactly 1 MiB is read (and skipped) (%d, %s)", r,
	       err.msg);
	got_free(&g);

	/* One byte more, in 64 KiB chunks, the newline never reached. */
	text.len = 0;
	sbx_buf_reserve(&text, SBX_EVENTS_LINE_MAX + 1);
	memset(text.data, 'x', SBX_EVENTS_LINE_MAX + 1);
	text.len = SBX_EVENTS_LINE_MAX + 1;
	text.data[text.len] = '\0';
	got_init(&g);
	r = feed(&sbx_events_docker, NULL, 0, text.data, text.len, 65536, &g, &err);
	tap_is_int(r, -EPROTO, "a line over 1 MiB ends the stream with EPROTO: %s", err.msg);
	tap_ok(strstr(err.msg, "over 1048576 bytes") != NULL, "the message says why");
	got_free(&g);

	/* The same in one chunk with its newline, after an event begun earlier. */
	sbx_error_clear(&err);
	sbx_buf_append(&text, "\n", 1);
	got_init(&g);
	r = feed(&sbx_events_docker, NULL, 0, text.data, text.len, 0, &g, &err);
	tap_is_int(r, -EPROTO, "and in one chunk with its newline");
	got_free(&g);
	sbx_buf_release(&text);
}

static void test_callbacks(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_events_parser p;
	struct sbx_events_spec spec = {.on_event = collect, .stopped = stopped};
	struct got g;
	int r;

	got_init(&g);
	g.fail_at = 2;
	spec.userdata = &g;
	sbx_events_parser_init(&p, &sbx_events_docker, &spec);
	r = sbx_events_parser_feed(&p, docker_lines, strlen(docker_lines), &err);
	tap_is_int(r, -ENOLINK, "on_event's negative value ends the feed");
	tap_ok(p.callback_failed && !p.stopped && g.n == 2, "no event after it (%d)", g.n);
	sbx_events_parser_release(&p);
	got_free(&g);

	got_init(&g);
	g.stop = 1;
	spec.userdata = &g;
	sbx_events_parser_init(&p, &sbx_events_docker, &spec);
	r = sbx_events_parser_feed(&p, docker_lines, strlen(docker_lines), &err);
	tap_is_int(r, -ECANCELED, "stopped() is asked before an event and ends the feed");
	tap_ok(p.stopped && !p.callback_failed && g.n == 0, "no event delivered once stopped");
	sbx_events_parser_release(&p);
	got_free(&g);
}

/* ---- sbx_engine_events against a scripted loopback server ---- */

enum fake_end {
	FAKE_CLOSE, /* the terminating chunk (if chunked), then close */
	FAKE_CUT,   /* half a chunk, then close */
	FAKE_HOLD,  /* keep the connection until the client closes it */
};

struct fake {
	int lfd, port;
	int client_port; /* the client's end of the accepted connection */
	pthread_t th;
	char req[8192]; /* the request head received */
	const char *head;
	const char *chunks[4]; /* body pieces, each sent as one HTTP chunk */
	size_t big;	       /* then one chunk of this many 'x' */
	enum fake_end end;
};

static void send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

static void send_chunk(int fd, const void *p, size_t n)
{
	char hdr[32];
	snprintf(hdr, sizeof(hdr), "%zx\r\n", n);
	send_all(fd, hdr, strlen(hdr));
	send_all(fd, p, n);
	send_all(fd, "\r\n", 2);
}

/* Reads until the peer closes, up to 60 s (a bound on hangs). */
static void wait_eof(int fd)
{
	char buf[4096];
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	while (poll(&pfd, 1, 60000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0)
		;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	struct pollfd pfd = {.fd = f->lfd, .events = POLLIN};
	size_t have = 0;
	int fd;

	struct sockaddr_in peer;
	socklen_t peer_len = sizeof(peer);

	if (poll(&pfd, 1, 60000) <= 0 ||
	    (fd = accept(f->lfd, (struct sockaddr *)&peer, &peer_len)) < 0)
		return NULL;
	__atomic_store_n(&f->client_port, ntohs(peer.sin_port), __ATOMIC_SEQ_CST);
	while (have < sizeof(f->req) - 1 && !strstr(f->req, "\r\n\r\n")) {
		struct pollfd c = {.fd = fd, .events = POLLIN};
		ssize_t n;
		if (poll(&c, 1, 60000) <= 0 ||
		    (n = recv(fd, f->req + have, sizeof(f->req) - 1 - have, 0)) <= 0)
			break;
		have += (size_t)n;
		f->req[have] = '\0';
	}
	send_all(fd, f->head, strlen(f->head));
	for (size_t i = 0; i < SBX_ARRAY_SIZE(f->chunks) && f->chunks[i]; i++)
		send_chunk(fd, f->chunks[i], strlen(f->chunks[i]));
	if (f->big) {
		char *x = malloc(f->big);
		if (x) {
			memset(x, 'x', f->big);
			send_chunk(fd, x, f->big);
			free(x);
		}
	}
	if (f->end == FAKE_CUT)
		send_all(fd, "400\r\nhalf a chunk", 17);
	else if (f->end == FAKE_CLOSE && strstr(f->head, "chunked"))
		send_all(fd, "0\r\n\r\n", 5);
	if (f->end == FAKE_HOLD)
		wait_eof(fd);
	close(fd);
	return NULL;
}

static int fake_start(struct fake *f)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(f->lfd, 4) < 0 || getsockname(f->lfd, (struct sockaddr *)&a, &len) < 0)
		return -errno;
	f->port = ntohs(a.sin_port);
	return -pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(struct fake *f)
{
	pthread_join(f->th, NULL);
	close(f->lfd);
}

#define HEAD_200                                                                                   \
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

/* A call of sbx_engine_events in a thread. */
struct run {
	sbx_engine *e;
	struct sbx_events_spec spec;
	struct sbx_error err;
	struct got got;
	int r;
	pthread_t th;
};

static void *run_main(void *arg)
{
	struct run *r = arg;
	r->r = sbx_engine_events(r->e, &r->spec, &r->err);
	return NULL;
}

static bool run_start(struct run *r, const char *type, const char *api, const struct fake *f,
		      const struct sbx_kv *labels, size_t n_labels, int fail_at)
{
	char url[64];
	struct sbx_engine_config cfg = {.type = type, .url = url, .api_version = api};

	memset(r, 0, sizeof(*r));
	got_init(&r->got);
	r->got.fail_at = fail_at;
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", f->port);
	if (sbx_engine_open(&cfg, &r->e, &r->err) < 0)
		return false;
	r->spec = (struct sbx_events_spec){.labels = labels,
					   .n_labels = n_labels,
					   .on_event = collect,
					   .stopped = stopped,
					   .userdata = &r->got};
	return pthread_create(&r->th, NULL, run_main, r) == 0;
}

/* Joins within 30 s (a bound on hangs); a hung call bails out. */
static void run_join(struct run *r)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	if (pthread_timedjoin_np(r->th, NULL, &until) != 0)
		tap_bail("sbx_engine_events did not return within 30 s");
	sbx_engine_free(r->e);
	got_free(&r->got);
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The request's filters, percent-decoded. */
static void request_filters(const char *req, char *buf, size_t size)
{
	const char *f = strstr(req, "filters=");
	size_t n = 0;

	for (f = f ? f + 8 : ""; *f && *f != ' ' && *f != '&' && n + 1 < size; f++) {
		unsigned v;
		if (*f == '%' && sscanf(f + 1, "%2x", &v) == 1) {
			buf[n++] = (char)v;
			f += 2;
		} else {
			buf[n++] = *f;
		}
	}
	buf[n] = '\0';
}

/* The timer of the loopback TCP connection from LOCAL_PORT to REMOTE_PORT
 * (/proc/net/tcp: 2 = keepalive, 0 = none) and when it fires (in clock
 * ticks); -1 when the connection is not found. */
static int tcp_timer(int local_port, int remote_port, unsigned long *ret_when)
{
	FILE *fp = fopen("/proc/net/tcp", "re");
	char line[512];
	int timer = -1;

	while (fp && fgets(line, sizeof(line), fp)) {
		unsigned lport, rport, state, tr;
		unsigned long when;
		if (sscanf(line, " %*d: %*x:%x %*x:%x %x %*x:%*x %x:%lx", &lport, &rport, &state,
			   &tr, &when) == 5 &&
		    (int)lport == local_port && (int)rport == remote_port) {
			timer = (int)tr;
			*ret_when = when;
		}
	}
	if (fp)
		fclose(fp);
	return timer;
}

static void test_open_and_stop(void)
{
	struct fake f = {.head = HEAD_200, .end = FAKE_HOLD};
	struct run r;
	char filters[512];

	if (!tap_ok(fake_start(&f) == 0, "a scripted server listens") ||
	    !tap_ok(run_start(&r, "docker", "1.41", &f, evcap, 1, 0), "sbx_engine_events runs"))
		tap_bail("cannot run the server test");
	tap_ok(got_wait(&r.got, 1, 30), "OPEN arrives from the head alone, before any body");
	tap_ok(r.got.n == 1 && r.got.ev[0].kind == SBX_EVENT_OPEN && !r.got.ev[0].has_id,
	       "it is OPEN, with no container");
	{
		/* The idle connection to a tcp:// engine has its keepalive timer
		 * running, due within 30 s (REST_KEEPIDLE_S). */
		unsigned long when = 0;
		int timer =
		    tcp_timer(__atomic_load_n(&f.client_port, __ATOMIC_SEQ_CST), f.port, &when);
		if (timer < 0)
			tap_skip(1, "the connection is not in /proc/net/tcp");
		else
			tap_ok(timer == 2 && when <= 30 * (unsigned long)sysconf(_SC_CLK_TCK),
			       "TCP keepalive is on, first probe within 30 s (timer %d, %lu ticks)",
			       timer, when);
	}
	__atomic_store_n(&r.got.stop, 1, __ATOMIC_SEQ_CST);
	run_join(&r);
	tap_is_int(r.r, 0, "stopped() ends an idle stream with 0 (%s)", r.err.msg);
	tap_ok(r.err.code == 0, "and no error is left in err");
	fake_stop(&f);
	tap_ok(starts_with(f.req, "GET /v1.41/events?filters="), "docker: GET /v1.41/events");
	request_filters(f.req, filters, sizeof(filters));
	tap_is_str(
	    filters,
	    "{\"type\":[\"container\"],\"event\":[\"start\",\"die\",\"oom\",\"kill\","
	    "\"destroy\"],\"label\":[\"evcap=1\"]}",
	    "docker: the filters ask for container start/die/oom/kill/destroy with the label");
}

static void test_stream_end(void)
{
	struct fake f = {.head = HEAD_200, .end = FAKE_CLOSE};
	struct run r;
	char half[2048], buf[256], filters[512];
	size_t cut = strlen(podman_lines) / 3;

	/* The lines in three pieces cut mid-line. */
	snprintf(half, sizeof(half), "%.*s", (int)cut, podman_lines);
	f.chunks[0] = half;
	f.chunks[1] = podman_lines + cut;
	f.chunks[2] = podman_other_start;
	if (fake_start(&f) < 0 || !run_start(&r, "podman", "4.0.0", &f, evcap, 1, 0))
		tap_bail("cannot run the server test");
	run_join(&r);
	fake_stop(&f);
	tap_is_int(r.r, -EPIPE, "a stream the engine ends is EPIPE");
	tap_is_str(r.err.msg, "the engine's events stream ended", "with a message that says so");
	tap_is_str(kinds(&r.got, buf, sizeof(buf)), "OPEN START KILL DIE DESTROY",
		   "podman: OPEN, then the four events of the labelled container");
	tap_ok(starts_with(f.req, "GET /v4.0.0/libpod/events?stream=true&filters="),
	       "podman: GET /v4.0.0/libpod/events?stream=true");
	request_filters(f.req, filters, sizeof(filters));
	tap_is_str(filters,
		   "{\"type\":[\"container\"],\"event\":[\"start\",\"died\",\"oom\",\"kill\","
		   "\"remove\"],\"label\":[\"evcap=1\"]}",
		   "podman: the filters name libpod's actions");
}

static void test_error_status(void)
{
	struct fake f = {
	    .head = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
		    "Content-Length: 36\r\n\r\n{\"message\":\"invalid filter 'boom'\"}\n",
	    .end = FAKE_CLOSE,
	};
	struct run r;

	if (fake_start(&f) < 0 || !run_start(&r, "docker", "1.41", &f, NULL, 0, 0))
		tap_bail("cannot run the server test");
	run_join(&r);
	fake_stop(&f);
	tap_is_int(r.r, -EIO, "an error status is an error: %s", r.err.msg);
	tap_ok(r.err.http_status == 500 && strstr(r.err.msg, "invalid filter 'boom'"),
	       "with the status and the engine's message");
	tap_is_int(r.got.n, 0, "and no OPEN");
}

static void test_huge_line(void)
{
	struct fake f = {.head = HEAD_200, .big = SBX_EVENTS_LINE_MAX + 10, .end = FAKE_HOLD};
	struct run r;

	f.chunks[0] = docker_oom_line;
	if (fake_start(&f) < 0 || !run_start(&r, "docker", "1.41", &f, NULL, 0, 0))
		tap_bail("cannot run the server test");
	run_join(&r);
	fake_stop(&f);
	tap_is_int(r.r, -EPROTO, "a line over 1 MiB from the engine ends the call: %s", r.err.msg);
	tap_ok(r.got.n == 2 && r.got.ev[1].kind == SBX_EVENT_OOM, "after the events before it");
}

static void test_cut(void)
{
	struct fake f = {.head = HEAD_200, .end = FAKE_CUT};
	struct run r;

	f.chunks[0] = docker_lines;
	if (fake_start(&f) < 0 || !run_start(&r, "docker", "1.41", &f, evcap, 1, 0))
		tap_bail("cannot run the server test");
	run_join(&r);
	fake_stop(&f);
	tap_ok(r.r < 0 && r.r != -EPIPE && strstr(r.err.msg, "events stream broke"),
	       "a connection cut mid-chunk is the transport's error: %d %s", r.r, r.err.msg);
	tap_is_int(r.got.n, 5, "after OPEN and the four events");
}

static void test_callback_ends(void)
{
	struct fake f = {.head = HEAD_200, .end = FAKE_HOLD};
	struct run r;

	if (fake_start(&f) < 0 || !run_start(&r, "docker", "1.41", &f, NULL, 0, 1))
		tap_bail("cannot run the server test");
	run_join(&r);
	fake_stop(&f);
	tap_is_int(r.r, -ENOLINK, "on_event's negative value on OPEN ends the call with it");
	tap_ok(strstr(r.err.msg, "callback") != NULL, "err says so: %s", r.err.msg);
}

static void test_bad_spec(void)
{
	struct sbx_engine_config cfg = {
	    .type = "docker", .url = "tcp://127.0.0.1:9", .api_version = "1.41"};
	struct sbx_kv bad[] = {{"", "x"}};
	struct sbx_kv eq[] = {{"a=b", "x"}};
	struct sbx_events_spec spec = {.labels = bad, .n_labels = 1, .on_event = collect};
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_engine *e = NULL;

	if (sbx_engine_open(&cfg, &e, &err) < 0)
		tap_bail("cannot open an engine handle");
	tap_is_int(sbx_engine_events(e, &spec, &err), -EINVAL, "an empty label key: %s", err.msg);
	spec.labels = eq;
	tap_is_int(sbx_engine_events(e, &spec, &err), -EINVAL, "a label key with '=': %s", err.msg);
	spec.labels = NULL;
	tap_is_int(sbx_engine_events(e, &spec, &err), -EINVAL, "labels counted but absent");
	spec.on_event = NULL;
	spec.n_labels = 0;
	tap_is_int(sbx_engine_events(e, &spec, &err), -EINVAL, "no on_event: %s", err.msg);
	sbx_engine_free(e);
}

/* ---- a hijacked stream reset by its engine ---- */

/* The engine's side: answers the upgrade, waits for the client's first
 * bytes and closes without reading them (a reset). */
static void *reset_main(void *arg)
{
	int lfd = *(int *)arg, fd;
	struct pollfd p = {.events = POLLIN};
	char buf[4096];
	size_t have = 0;
	static const char up[] =
	    "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

	p.fd = lfd;
	if (poll(&p, 1, 60000) <= 0 || (fd = accept(lfd, NULL, NULL)) < 0)
		return NULL;
	p.fd = fd;
	/* The request's head and its body, "{}". */
	while (have < sizeof(buf) - 1 && poll(&p, 1, 60000) > 0) {
		ssize_t n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		if (strstr(buf, "\r\n\r\n{}"))
			break;
	}
	send_all(fd, up, sizeof(up) - 1);
	poll(&p, 1, 60000);
	close(fd);
	return NULL;
}

static sbx_stream *__attribute__((noinline)) reset_open(struct sbx_rest *r, struct sbx_error *err)
{
	struct json_object *body = json_object_new_object();
	sbx_stream *s = NULL;

	if (sbx_rest_hijack(r, "/exec/x/start", body, &s, err) < 0)
		s = NULL;
	json_object_put(body);
	return s;
}

/* A frame over the one reset_open's call had: libcurl's message for the
 * failed receive must not land in it. RET_N: what the read returned. */
static bool __attribute__((noinline))
reset_read(sbx_stream *s, ssize_t *ret_n, struct sbx_error *err)
{
	volatile char canary[65536];
	char buf[64];
	int fd = 1;

	memset((char *)canary, 'Z', sizeof(canary));
	sbx_stream_write(s, "x\n", 2, err);
	*ret_n = sbx_stream_read(s, buf, sizeof(buf), &fd, 30000, err);
	for (size_t i = 0; i < sizeof(canary); i++)
		if (canary[i] != 'Z')
			return false;
	return true;
}

/* The bug behind hardening-podman's SIGSEGV (ci23, ci32, ci34): the
 * stream's handle kept sbx_rest_hijack's stack error buffer, and libcurl
 * copied "Recv failure: ..." there, into another live frame. */
static void test_stream_reset(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_rest *r = NULL;
	sbx_stream *s;
	char url[64];
	pthread_t th;
	ssize_t n = 0;
	bool clean;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &len) < 0 ||
	    pthread_create(&th, NULL, reset_main, &lfd) != 0)
		tap_bail("a loopback listener");
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	if (!tap_call(sbx_rest_open(url, 5000, NULL, &r, &err), err.msg, "a client for %s", url))
		tap_bail("no client");
	s = reset_open(r, &err);
	if (tap_ok(s != NULL, "a stream upgraded (%s)", err.msg)) {
		clean = reset_read(s, &n, &err);
		tap_ok(n < 0, "the engine's reset fails the read (%zd: %s)", n, err.msg);
		tap_ok(clean, "libcurl wrote nothing into a frame over the stream's opening");
		sbx_stream_free(s);
	}
	pthread_join(th, NULL);
	sbx_rest_free(r);
	close(lfd);
}

int main(void)
{
	test_docker_lines();
	test_podman_lines();
	test_chunks();
	test_garbage();
	test_attributes();
	test_line_limit();
	test_callbacks();
	test_open_and_stop();
	test_stream_end();
	test_error_status();
	test_huge_line();
	test_cut();
	test_callback_ends();
	test_bad_spec();
	test_stream_reset();
	return tap_done();
}
