/* SPDX-License-Identifier: MIT */
/*
 * The persistent Python interpreter of a sandbox: the client side of
 * src/sandbox/interp/sbx_interp.py (whose header comment describes the protocol).
 *
 * The program is given on the command line, `python3 -u -c PROGRAM`, so that
 * nothing is written into the container (its root may be read-only, and the
 * engine's archive API refuses to write there), started with sbx_exec_stream
 * as uid 1000, in
 * SBX_RESULTS_DIR: by the pool's refill thread for a pooled container
 * (sbx_interp_start_pooled; the interpreter moves to the record when the
 * container is assigned), else on first use. The stream stays open; every
 * call writes one request line and reads output lines and one result line,
 * all tagged with the call's id, so output of an earlier call is never taken
 * for this one's. Ids are random (call_id), not counted: code in the sandbox
 * (a thread an earlier call left running) cannot write the next call's
 * result ahead of it. A hello line counts only while an interpreter starts,
 * and only the first one, and nothing else counts then. This narrows what
 * code in the sandbox can forge, it does not end it: that code runs as the
 * interpreter's user (in its process, or in one it left behind that can
 * open the interpreter's descriptors through /proc), so it can read a
 * call's id and write its lines, a result or a hello with another pid
 * (a kill that then misses leaves the interpreter to end with its stdin).
 * What it gains stays in its own sandbox: the server bounds and checks
 * every line, and the call's time limit is the server's.
 *
 * Stopping code needs no host signal (the engine may be remote): an "int"
 * request makes the interpreter raise KeyboardInterrupt in its main thread;
 * if the code has not returned after sandbox.interrupt_grace, a fresh exec
 * kills the interpreter's process group (the pid its hello line gave) and a
 * new interpreter is started.
 *
 * Locking: in->run serialises calls (and starts, kills); in->pid_lock guards
 * pid/pgid so that a reset can kill a running call's interpreter without
 * waiting for the call.
 */
#include <errno.h>
#include <json-c/json.h>
#include <json-c/printbuf.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "sbx/image.h"
#include "sbx/log.h"
#include "sbx/tar.h"
#include "sbx/utf8.h"

/* The program's text, generated from src/sandbox/interp/sbx_interp.py. */
#include "src/sandbox/interp/sbx_interp.inc"

#define INTERP_USER SBX_SANDBOX_USER

const char *sbx_interp_program(void)
{
	return sbx_interp_py;
}
/* How long a new interpreter may take to say hello. */
#define START_MS 30000
/* How often opts->cancelled is polled. */
#define POLL_MS 50
/* How long the interpreter may take to end itself when asked to. */
#define KILL_WAIT_MS 1000
/* Bytes of the interpreter's own stderr kept to explain a failed start. */
#define DIAG_MAX 2048
#define FILES_MAX 100
/* Longest protocol line accepted besides an image line: an output chunk (64
 * KiB of text, escaped) or a result listing FILES_MAX paths. An image line
 * may hold one image of sandbox.image_inline_max bytes in base64 on top. */
#define LINE_BASE (1024 * 1024)
/* Buffers grown past this for a long line are given back after it. */
#define LINE_KEEP (64 * 1024)
/* The inline images of one call together, in units of image_inline_max. */
#define IMG_TOTAL_FACTOR 4

/* Why a new interpreter's start lost the state of earlier calls, until a
 * run says so. */
enum untold {
	UNTOLD_NONE,
	UNTOLD_RESTART, /* a start after a deliberate end (a reset's old one) */
	UNTOLD_LOST,	/* the old one had ended (killed, out of memory) */
	UNTOLD_ASLEEP,	/* the sandbox was put to sleep */
};

struct sbx_interp {
	pthread_mutex_t run;
	pthread_mutex_t pid_lock;
	sbx_stream *stream;
	long pid, pgid;		  /* in the container; under pid_lock */
	uint64_t next_id;	  /* call_id's fallback */
	bool has_state;		  /* a restart would lose state the user was not told about;
				   * false in a pooled interpreter no call has used yet */
	bool lost;		  /* it ended between calls; nobody was told yet */
	bool slept;		  /* its sandbox was put to sleep since; nobody was told yet */
	enum untold untold;	  /* a start lost state: the next run says why */
	struct sbx_buf line;	  /* an incomplete protocol line */
	struct sbx_buf diag;	  /* the interpreter's own stderr */
	struct json_tokener *tok; /* parses each line (reset first); under run */
};

void sbx_interp_free(struct sbx_interp *in)
{
	if (!in)
		return;
	sbx_stream_free(in->stream);
	sbx_buf_release(&in->line);
	if (in->tok)
		json_tokener_free(in->tok);
	sbx_buf_release(&in->diag);
	pthread_mutex_destroy(&in->run);
	pthread_mutex_destroy(&in->pid_lock);
	free(in);
}

static struct sbx_interp *interp_new(void)
{
	struct sbx_interp *in = calloc(1, sizeof(*in));

	if (in) {
		pthread_mutex_init(&in->run, NULL);
		pthread_mutex_init(&in->pid_lock, NULL);
	}
	return in;
}

static struct sbx_interp *interp_of(sbx_sandbox *sb)
{
	struct sbx_interp *in;

	pthread_mutex_lock(&sb->m->lock);
	if (!sb->interp)
		sb->interp = interp_new();
	in = sb->interp;
	pthread_mutex_unlock(&sb->m->lock);
	return in;
}

/* ---- one call's state ---- */

/* A new call's id: random, within JSON's exact integers (2^53), never 0
 * (no call's); a count when the system has no randomness to give. */
static uint64_t call_id(struct sbx_interp *in)
{
	uint64_t id = 0;

	if (sbx_random_bytes(&id, sizeof(id)) < 0)
		id = ++in->next_id;
	id &= (UINT64_C(1) << 53) - 1;
	return id ? id : 1;
}

struct call {
	sbx_manager *m;
	sbx_sandbox *sb;	     /* NULL when starting a pooled interpreter */
	const char *container, *sid; /* the sandbox's container and id */
	struct sbx_interp *in;
	const struct sbx_run_opts *opts;
	uint64_t id;
	size_t cap;
	struct sbx_run_result res;
	struct json_object *hello; /* the first hello line while starting */
	bool starting;		   /* start_once waits for the hello */
	bool acked;		   /* the interpreter took the request */
	bool done;		   /* the result line arrived */
	/* Images announced before the result line, checked, by path. */
	struct call_image {
		char *path;
		unsigned char *data;
		size_t len;
		const char *mime;
	} images[FILES_MAX];
	size_t n_images, image_bytes;
};

static void call_release(struct call *c)
{
	json_object_put(c->hello);
	c->hello = NULL;
	for (size_t i = 0; i < c->n_images; i++) {
		free(c->images[i].path);
		free(c->images[i].data);
	}
	c->n_images = c->image_bytes = 0;
}

static const char *str_of(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static int64_t int_of(struct json_object *o, const char *key, int64_t def)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return def;
	return json_object_get_int64(v);
}

static bool bool_of(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* Keeps output text within the cap (cut at a character boundary). */
static int take_output(struct call *c, int fd, const char *s, size_t len)
{
	struct sbx_run_result *r = &c->res;
	size_t used = r->out.len + r->err.len, take = len;

	if (used >= c->cap)
		take = 0;
	else if (take > c->cap - used)
		take = c->cap - used;
	while (take > 0 && take < len && ((unsigned char)s[take] & 0xC0) == 0x80)
		take--;
	if (take < len)
		r->truncated = true;
	if (take == 0)
		return 0;
	if (sbx_buf_append(fd == 2 ? &r->err : &r->out, s, take) < 0)
		return -ENOMEM;
	if (c->opts && c->opts->on_output)
		c->opts->on_output(c->opts->userdata, fd, s, take);
	return 0;
}

static int take_files(struct call *c, struct json_object *files)
{
	struct sbx_run_result *r = &c->res;
	size_t n = json_object_array_length(files);

	if (n > FILES_MAX) {
		n = FILES_MAX;
		r->files_truncated = true;
	}
	const char *first_bad = NULL;
	size_t bad = 0;

	r->files = calloc(n + 1, sizeof(*r->files));
	if (!r->files)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *f = json_object_array_get_idx(files, i);
		struct sbx_file_change *fc = &r->files[r->n_files];
		struct json_object *p;
		const char *path;

		if (!f || !json_object_object_get_ex(f, "p", &p) ||
		    !json_object_is_type(p, json_type_string))
			continue;
		path = json_object_get_string(p);
		if (!sbx_interp_path_ok(path, (size_t)json_object_get_string_len(p))) {
			if (!bad++)
				first_bad = path;
			continue;
		}
		fc->path = strdup(path);
		if (!fc->path)
			return -ENOMEM;
		fc->size = int_of(f, "s", 0);
		if (fc->size < 0)
			fc->size = 0;
		r->n_files++;
		for (size_t k = 0; k < c->n_images; k++) {
			struct call_image *im = &c->images[k];
			if (im->data && !strcmp(im->path, fc->path)) {
				fc->image = SBX_TAKE(im->data);
				fc->image_len = im->len;
				fc->image_mime = im->mime;
				break;
			}
		}
	}
	if (bad) /* one line per call, however many: the names are the sandbox's */
		sbx_log_warn("sandbox %s: the interpreter listed %zu file(s) with a bad name, "
			     "dropped (the first: %.100s)",
			     c->sid, bad, first_bad);
	return 0;
}

/* An image line: kept when its path is clean and its bytes are a real PNG or
 * JPEG within sandbox.image_inline_max, and the call's images together within
 * IMG_TOTAL_FACTOR times that; else dropped (the file is still listed). */
static int take_image(struct call *c, struct json_object *o)
{
	size_t max = (size_t)c->m->s->sandbox.image_inline_max;
	struct json_object *p, *b;
	struct call_image *im;
	unsigned char *data = NULL;
	size_t len = 0, b64_len;
	const char *mime;

	if (c->n_images >= FILES_MAX || !json_object_object_get_ex(o, "p", &p) ||
	    !json_object_is_type(p, json_type_string) || !json_object_object_get_ex(o, "b", &b) ||
	    !json_object_is_type(b, json_type_string))
		return 0;
	b64_len = (size_t)json_object_get_string_len(b);
	if (!sbx_interp_path_ok(json_object_get_string(p), (size_t)json_object_get_string_len(p)) ||
	    b64_len > (max + 2) / 3 * 4)
		return 0;
	if (sbx_base64_decode(json_object_get_string(b), b64_len, &data, &len) < 0)
		return 0;
	mime = sbx_image_sniff(data, len);
	if (!mime || len > max || c->image_bytes + len > IMG_TOTAL_FACTOR * max) {
		free(data);
		return 0;
	}
	im = &c->images[c->n_images];
	im->path = strdup(json_object_get_string(p));
	if (!im->path) {
		free(data);
		return -ENOMEM;
	}
	im->data = data;
	im->len = len;
	im->mime = mime;
	c->n_images++;
	c->image_bytes += len;
	return 0;
}

/* One protocol line. Lines of other calls are ignored. */
static int handle_line(struct call *c, const char *line, size_t len)
{
	struct json_object *o, *files;
	const char *t;
	int r = 0;

	if (!c->in->tok && !(c->in->tok = json_tokener_new()))
		return -ENOMEM;
	json_tokener_reset(c->in->tok);
	o = json_tokener_parse_ex(c->in->tok, line, (int)len);
	if (len > LINE_KEEP) {
		/* The tokener keeps what it grew for a long string: give it back. */
		json_tokener_free(c->in->tok);
		c->in->tok = NULL;
	}
	if (!o || !json_object_is_type(o, json_type_object) || !(t = str_of(o, "t")))
		goto out;
	if (strcmp(t, "hello") == 0) {
		/* The new interpreter says it first, before any code of the
		 * sandbox's runs in it; one at any other time is forged. */
		if (c->starting && !c->hello)
			c->hello = json_object_get(o);
		goto out;
	}
	/* While a new interpreter starts, nothing but its hello is news: a
	 * result there (of the call it restarts for) is forged. */
	if (c->starting)
		goto out;
	/* Id 0 is no call's (a start, a check, a prepare): what comes then is
	 * dropped, whatever id a line claims. */
	if (c->id == 0 || (uint64_t)int_of(o, "id", -1) != c->id || c->done)
		goto out;
	if (strcmp(t, "a") == 0) {
		c->acked = true;
	} else if (strcmp(t, "o") == 0) {
		struct json_object *s;
		if (json_object_object_get_ex(o, "s", &s) &&
		    json_object_is_type(s, json_type_string))
			r = take_output(c, (int)int_of(o, "fd", 1), json_object_get_string(s),
					(size_t)json_object_get_string_len(s));
	} else if (strcmp(t, "i") == 0) {
		r = take_image(c, o);
	} else if (strcmp(t, "r") == 0) {
		c->done = true;
		c->res.exit_code = (int)int_of(o, "rc", 1);
		c->res.truncated |= bool_of(o, "trunc");
		c->res.files_truncated = bool_of(o, "more");
		c->res.files_removed = bool_of(o, "rm");
		if (json_object_object_get_ex(o, "files", &files) &&
		    json_object_is_type(files, json_type_array))
			r = take_files(c, files);
	}
out:
	json_object_put(o);
	return r;
}

size_t sbx_interp_line_max(const struct sbx_settings *s)
{
	return LINE_BASE + ((size_t)s->sandbox.image_inline_max + 2) / 3 * 4 + 4096;
}

/* Feeds stdout bytes of the stream; complete lines are handled. */
static int feed(struct call *c, const char *p, size_t n)
{
	struct sbx_buf *b = &c->in->line;
	size_t max = sbx_interp_line_max(c->m->s);

	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		int r;

		if (b->len + take > max)
			return -EPROTO;
		if (nl && b->len == 0) {
			r = handle_line(c, p, take);
		} else {
			if (sbx_buf_append(b, p, take) < 0)
				return -ENOMEM;
			r = 0;
			if (nl) {
				r = handle_line(c, b->data, b->len);
				if (b->cap > LINE_KEEP)
					sbx_buf_release(b);
				else
					sbx_buf_reset(b);
			}
		}
		if (r < 0)
			return r;
		if (!nl)
			break;
		p = nl + 1;
		n -= take + 1;
	}
	return 0;
}

int sbx_interp_protocol_feed(sbx_manager *m, const char *p, size_t n)
{
	struct sbx_interp *in = interp_new();
	struct call c = {.m = m, .in = in, .sid = "fuzz", .id = 1, .cap = 65536};
	int r = in ? feed(&c, p, n) : -ENOMEM;

	call_release(&c);
	sbx_run_result_release(&c.res);
	sbx_interp_free(in);
	return r;
}

size_t sbx_interp_line_bytes(sbx_sandbox *sb)
{
	struct sbx_interp *in;
	size_t n = 0;

	pthread_mutex_lock(&sb->m->lock);
	in = sb->interp;
	pthread_mutex_unlock(&sb->m->lock);
	if (!in)
		return 0;
	pthread_mutex_lock(&in->run);
	n = in->line.cap;
	/* json-c has no call for it: the tokener's string buffer is read from
	 * its struct (public, marked for json-c's own use). */
	if (in->tok && in->tok->pb && in->tok->pb->size > 0)
		n += (size_t)in->tok->pb->size;
	pthread_mutex_unlock(&in->run);
	return n;
}

long sbx_interp_pid(sbx_sandbox *sb)
{
	struct sbx_interp *in;
	long pid = 0;

	pthread_mutex_lock(&sb->m->lock);
	in = sb->interp;
	pthread_mutex_unlock(&sb->m->lock);
	if (in) {
		pthread_mutex_lock(&in->pid_lock);
		pid = in->pid;
		pthread_mutex_unlock(&in->pid_lock);
	}
	return pid;
}

/* Reads one chunk of the stream: 1 when something was read, 0 at end of
 * stream, -ETIMEDOUT, or another negative code. */
static int pump(struct call *c, int wait_ms, struct sbx_error *err)
{
	char buf[65536];
	int fd = 1;
	ssize_t n = sbx_stream_read(c->in->stream, buf, sizeof(buf), &fd, wait_ms, err);

	if (n <= 0)
		return (int)n;
	if (fd == 2) {
		struct sbx_buf *d = &c->in->diag;
		if (d->len < DIAG_MAX)
			sbx_buf_append(
			    d, buf, (size_t)n < DIAG_MAX - d->len ? (size_t)n : DIAG_MAX - d->len);
		return 1;
	}
	int r = feed(c, buf, (size_t)n);
	if (r < 0)
		return sbx_error_set(err, r,
				     r == -EPROTO ? "the Python interpreter sent an over-long line"
						  : "out of memory");
	return 1;
}

static void drop_stream(struct sbx_interp *in)
{
	in->stream = sbx_stream_free(in->stream);
	sbx_buf_release(&in->line);
	pthread_mutex_lock(&in->pid_lock);
	in->pid = in->pgid = 0;
	pthread_mutex_unlock(&in->pid_lock);
}

/* Kills the interpreter whose pid is known (and its process group when it
 * leads one), with a fresh exec. */
static void kill_pid(sbx_manager *m, sbx_sandbox *sb, long pid, long pgid)
{
	char p[32];
	const char *const argv[] = {
	    "sh",
	    "-c",
	    pgid == pid ? "kill -KILL -- -\"$1\" 2>/dev/null; kill -KILL \"$1\" 2>/dev/null; exit 0"
			: "kill -KILL \"$1\" 2>/dev/null; exit 0",
	    "sh",
	    p,
	    NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .user = INTERP_USER,
	    .timeout_ms = 10000,
	    .output_cap = 4096,
	};
	struct sbx_exec_result res = {0};

	if (pid <= 0)
		return;
	snprintf(p, sizeof(p), "%ld", pid);
	if (sbx_exec(m->engine, sb->container, &spec, &res, NULL) >= 0)
		sbx_exec_result_release(&res);
}

/* Asks the interpreter to end itself (its reader thread does it while the
 * code runs): true when its stream ended within KILL_WAIT_MS. */
static bool kill_politely(struct sbx_interp *in)
{
	static const char line[] = "{\"op\":\"kill\"}\n";
	int64_t deadline = sbx_monotonic_ms() + KILL_WAIT_MS;
	char buf[4096];

	if (!in->stream || sbx_stream_write(in->stream, line, sizeof(line) - 1, NULL) < 0)
		return false;
	for (;;) {
		int64_t left = deadline - sbx_monotonic_ms();
		int fd;
		ssize_t n = sbx_stream_read(in->stream, buf, sizeof(buf), &fd,
					    left > 0 ? (int)left : 0, NULL);
		if (n == 0)
			return true;
		if (n < 0)
			return false;
	}
}

static void interp_kill(sbx_manager *m, sbx_sandbox *sb, struct sbx_interp *in)
{
	long pid, pgid;

	if (kill_politely(in)) {
		drop_stream(in);
		return;
	}

	pthread_mutex_lock(&in->pid_lock);
	pid = in->pid;
	pgid = in->pgid;
	pthread_mutex_unlock(&in->pid_lock);
	kill_pid(m, sb, pid, pgid);
	drop_stream(in); /* closing stdin also ends an interpreter the kill missed */
}

/* Starts the interpreter and waits for its hello. Under in->run. */
static int start_once(struct call *c, struct sbx_error *err)
{
	/* The last word names the process for whoever looks at /proc (tests). */
	const char *const argv[] = {"python3", "-u", "-c", sbx_interp_py, "sbx-interp", NULL};
	const char *const env[] = {"PYTHONIOENCODING=utf-8", NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv,
	    .env = env,
	    .workdir = SBX_RESULTS_DIR,
	    .user = INTERP_USER,
	};
	struct sbx_interp *in = c->in;
	int64_t deadline = sbx_monotonic_ms() + START_MS;
	int r;

	sbx_buf_reset(&in->diag);
	sbx_buf_reset(&in->line);
	json_object_put(c->hello);
	c->hello = NULL;
	r = sbx_exec_stream(c->m->engine, c->container, &spec, &in->stream, err);
	if (r < 0 && !c->sb) {
		sbx_error_prefix(err, "sandbox %s", c->sid);
		return r;
	}
	if (r < 0)
		return sbx_sandbox_exec_failed(c->m, c->sb, r, err);
	c->starting = true;
	while (!c->hello) {
		int64_t left = deadline - sbx_monotonic_ms();
		r = pump(c, left > 0 ? (int)left : 0, err);
		if (r == 0 || r == -ETIMEDOUT) {
			const char *d = in->diag.data ? in->diag.data : "";
			r = sbx_error_set(err, r == 0 ? -EPIPE : -ETIMEDOUT,
					  "the Python interpreter did not start%s%s%s%.*s",
					  c->sb ? "" : " in sandbox ", c->sb ? "" : c->sid,
					  *d ? ": " : "", (int)in->diag.len, d);
		}
		if (r < 0) {
			c->starting = false;
			drop_stream(in);
			/* A sandbox's own: deleted or dead meanwhile, it says so. */
			return c->sb ? sbx_sandbox_exec_failed(c->m, c->sb, r, err) : r;
		}
	}
	c->starting = false;
	pthread_mutex_lock(&in->pid_lock);
	in->pid = (long)int_of(c->hello, "pid", 0);
	in->pgid = (long)int_of(c->hello, "pgid", 0);
	pthread_mutex_unlock(&in->pid_lock);
	json_object_put(c->hello);
	c->hello = NULL;
	in->has_state = true;
	in->lost = false;
	in->slept = false;
	return 0;
}

static int start(struct call *c, struct sbx_error *err)
{
	return start_once(c, err);
}

/* True when the stream has ended (the interpreter died) since last used. */
static bool stream_ended(struct call *c)
{
	struct pollfd p = {.fd = sbx_stream_fd(c->in->stream), .events = POLLIN};

	while (sbx_stream_pending(c->in->stream) || poll(&p, 1, 0) > 0) {
		int r = pump(c, 0, NULL);
		if (r == -ETIMEDOUT)
			return false;
		if (r <= 0)
			return true;
	}
	return false;
}

static int send_line(struct sbx_interp *in, struct json_object *o, struct sbx_error *err)
{
	size_t len;
	const char *s = json_object_to_json_string_length(
	    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	_cleanup_free_ char *line = s ? malloc(len + 1) : NULL;

	if (!line)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	/* One write: the line reaches the interpreter in one piece, not two
	 * trips through the engine. */
	memcpy(line, s, len);
	line[len] = '\n';
	return sbx_stream_write(in->stream, line, len + 1, err);
}

static int send_run(struct call *c, const char *code, struct sbx_error *err)
{
	const struct sbx_settings *s = c->m->s;
	struct json_object *o = json_object_new_object();
	int r = o ? 0 : -ENOMEM;

	if (o) {
		r |= json_object_object_add(o, "op", json_object_new_string("run"));
		r |= json_object_object_add(o, "id", json_object_new_int64((int64_t)c->id));
		r |= json_object_object_add(o, "code", json_object_new_string(code));
		r |= json_object_object_add(o, "cap", json_object_new_int64((int64_t)c->cap));
		r |= json_object_object_add(o, "img",
					    json_object_new_int64(s->sandbox.image_inline_max));
		r |= json_object_object_add(
		    o, "img_total",
		    json_object_new_int64(IMG_TOTAL_FACTOR * s->sandbox.image_inline_max));
	}
	if (r < 0) {
		json_object_put(o);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	r = send_line(c->in, o, err);
	json_object_put(o);
	return r;
}

static int send_interrupt(struct call *c)
{
	struct json_object *o = json_object_new_object();
	int r = -ENOMEM;

	if (o && json_object_object_add(o, "op", json_object_new_string("int")) == 0 &&
	    json_object_object_add(o, "id", json_object_new_int64((int64_t)c->id)) == 0)
		r = send_line(c->in, o, NULL);
	json_object_put(o);
	return r;
}

/* The interpreter's exit code once its stream ended, or -1. */
static int ended_code(struct call *c)
{
	for (int i = 0; i < 20; i++) {
		int code = sbx_stream_exit_code(c->in->stream, NULL);
		if (code >= 0)
			return code;
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
	}
	return -1;
}

/* The stream ended (EOF) or broke during the call: the container went
 * away, or only the interpreter did (a broken one is killed). */
static int interp_died(struct call *c, bool eof, struct sbx_error *err)
{
	int code = eof ? ended_code(c) : -1, st;

	if (eof)
		drop_stream(c->in);
	else
		interp_kill(c->m, c->sb, c->in);
	/* Killed (the engine stopping kills it a moment before it records
	 * the container's end): that end is waited for a while. */
	st = sbx_sandbox_stopped(c->m, c->sb, code == 137 || code < 0 ? SBX_STOP_SETTLE_MS : 0,
				 NULL);
	if (st > 0)
		return sbx_sandbox_exec_failed(c->m, c->sb, -EPIPE, err);
	if (st < 0 && (code == 137 || code < 0)) {
		c->in->has_state = false;
		return sbx_error_set(
		    err, st,
		    "sandbox %s: its Python interpreter was killed during this call "
		    "and the engine cannot say whether the sandbox still runs; its "
		    "variables and imports are gone",
		    c->sb->id);
	}
	c->res.exit_code = code;
	c->res.interpreter_restarted = true;
	c->in->has_state = false; /* told now, not again at the restart */
	if ((code == 137 || code < 0) && sbx_sandbox_oom_since(c->m, c->sb) > 0) {
		c->res.out_of_memory = true;
		return sbx_oom_notice(c->m, c->sb,
				      "The Python code (its interpreter's variables and imports "
				      "are gone; the next call starts a new one)",
				      &c->res.notice);
	}
	if (code == 137 || code < 0)
		return sbx_str_replacef(
		    &c->res.notice,
		    "The Python interpreter was killed during this call (for example "
		    "for using too much memory, or from outside); its variables and "
		    "imports are gone, and the next call starts a new interpreter.");
	return sbx_str_replacef(
	    &c->res.notice,
	    "The code ended the Python interpreter (exit status %d); its variables "
	    "and imports are gone, and the next call starts a new interpreter.",
	    code);
}

static double secs(long ms)
{
	return (double)ms / 1000.0;
}

/* Runs the call: request out, lines in until the result, the time limit
 * or cancellation. Under in->run with a live stream. */
static int converse(struct call *c, const char *code, long limit_ms, struct sbx_error *err)
{
	const struct sbx_run_opts *o = c->opts;
	int64_t deadline = sbx_monotonic_ms() + limit_ms, kill_at = 0;
	long grace = (long)c->m->s->sandbox.interrupt_grace_ms;
	bool interrupted = false;
	int r;

	r = send_run(c, code, err);
	if (r < 0)
		return r == -ENOMEM ? r : -EAGAIN; /* it had died: start another */
	while (!c->done) {
		int64_t now = sbx_monotonic_ms(), until = interrupted ? kill_at : deadline, wait;

		wait = until > now ? until - now : 0;
		if (o && o->cancelled && wait > POLL_MS)
			wait = POLL_MS;
		r = pump(c, (int)wait, err);
		if (r == -EPROTO) {
			/* Code in the sandbox wrote past the protocol's bounds: the
			 * interpreter cannot be trusted to be in step any more. */
			interp_kill(c->m, c->sb, c->in);
			c->in->has_state = false;
			if (start(c, NULL) < 0)
				drop_stream(c->in);
			return sbx_error_set(
			    err, -EPROTO,
			    "the Python interpreter of sandbox %s sent a protocol line over %zu "
			    "bytes (code that writes to the interpreter's own channel?); the "
			    "call was ended and the interpreter restarted: variables and "
			    "imports of earlier calls are gone",
			    c->sid, sbx_interp_line_max(c->m->s));
		}
		if (r == 0 && !c->acked)
			return -EAGAIN; /* it had died before this call: start another */
		if (r == 0 || (r < 0 && r != -ETIMEDOUT && r != -ENOMEM))
			return interp_died(c, r == 0, err);
		if (r < 0 && r != -ETIMEDOUT)
			return r;
		if (c->done)
			break;
		now = sbx_monotonic_ms();
		if (!interrupted && o && o->cancelled && o->cancelled(o->userdata)) {
			c->res.cancelled = true;
			interrupted = true;
		} else if (!interrupted && now >= deadline) {
			c->res.timed_out = true;
			interrupted = true;
		} else if (interrupted && now >= kill_at) {
			interp_kill(c->m, c->sb, c->in);
			c->res.exit_code = -1;
			c->res.interpreter_restarted = true;
			r = c->res.cancelled
				? sbx_str_replacef(
				      &c->res.notice,
				      "The call was cancelled and the code did not stop "
				      "when interrupted, so the Python interpreter was "
				      "killed and restarted: variables, imports and open "
				      "files of earlier calls are gone.")
				: sbx_str_replacef(
				      &c->res.notice,
				      "The code ran past its time limit of %.3g s and did "
				      "not stop when interrupted, so the Python interpreter "
				      "was killed and restarted: variables, imports and "
				      "open files of earlier calls are gone.",
				      secs(limit_ms));
			if (r < 0)
				return sbx_error_set(err, r, "out of memory");
			c->in->has_state = false; /* told now */
			if (start(c, NULL) < 0)
				drop_stream(c->in);
			return 0;
		} else {
			continue;
		}
		/* Just interrupted. */
		kill_at = now + grace;
		if (send_interrupt(c) < 0)
			kill_at = now;
	}
	if (c->res.cancelled)
		r = sbx_str_replacef(&c->res.notice,
				     "The call was cancelled: the code got a KeyboardInterrupt; "
				     "the interpreter and its variables were kept.");
	else if (c->res.timed_out)
		r = sbx_str_replacef(
		    &c->res.notice,
		    "The code ran past its time limit of %.3g s and was interrupted "
		    "(KeyboardInterrupt); the interpreter and its variables were kept.",
		    secs(limit_ms));
	return r < 0 ? sbx_error_set(err, -ENOMEM, "out of memory") : 0;
}

/* Takes in->run, waiting at most WAIT_MS (another call holds it): 0,
 * -ETIMEDOUT, or -ECANCELED as soon as O's cancelled says so (polled every
 * POLL_MS while it waits). */
static int lock_until(struct sbx_interp *in, long wait_ms, const struct sbx_run_opts *o)
{
	int64_t deadline = sbx_monotonic_ms() + wait_ms;

	for (;;) {
		int64_t slice = deadline - sbx_monotonic_ms();
		struct timespec ts;
		int r;

		if (slice < 0)
			slice = 0;
		if (o && o->cancelled && slice > POLL_MS)
			slice = POLL_MS;
		/* pthread_mutex_timedlock takes CLOCK_REALTIME; each slice is short. */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += slice / 1000;
		ts.tv_nsec += (slice % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		r = -pthread_mutex_timedlock(&in->run, &ts);
		if (r != -ETIMEDOUT)
			return r;
		if (sbx_monotonic_ms() >= deadline)
			return -ETIMEDOUT;
		if (o && o->cancelled && o->cancelled(o->userdata))
			return -ECANCELED;
	}
}

/* Under in->run: starts C's interpreter when it has none (one whose
 * stream ended is dropped first). A start that loses state the user was
 * not told about leaves in->untold for the next run to say. */
static int ensure_started(struct call *c, struct sbx_error *err)
{
	struct sbx_interp *in = c->in;
	enum untold why;
	int r;

	if (in->stream && stream_ended(c)) {
		drop_stream(in);
		in->lost = true;
	}
	if (in->stream)
		return 0;
	why = !in->has_state ? UNTOLD_NONE
	      : in->lost     ? UNTOLD_LOST
	      : in->slept    ? UNTOLD_ASLEEP
			     : UNTOLD_RESTART;
	r = start(c, err);
	if (r >= 0 && why != UNTOLD_NONE)
		in->untold = why;
	return r;
}

int sbx_interp_prepare(sbx_manager *m, sbx_sandbox *sb)
{
	struct call c = {.m = m, .sb = sb, .container = sb->container, .sid = sb->id};
	int r = sbx_sandbox_begin(sb, NULL);

	if (r < 0)
		return r;
	c.in = interp_of(sb);
	/* A run or a reset holding it starts it itself; c.id 0 matches no
	 * call: pending lines of no call are dropped. */
	if (c.in && pthread_mutex_trylock(&c.in->run) == 0) {
		r = ensure_started(&c, NULL);
		pthread_mutex_unlock(&c.in->run);
	}
	call_release(&c);
	sbx_run_result_release(&c.res);
	sbx_sandbox_end(sb, NULL);
	return r;
}

static int interp_run(sbx_manager *m, sbx_sandbox *sb, const char *code,
		      const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
		      struct sbx_error *err)
{
	struct sbx_interp *in = interp_of(sb);
	long limit =
	    opts && opts->timeout_ms > 0 ? opts->timeout_ms : (long)m->s->sandbox.exec_timeout_ms;
	struct call c = {
	    .m = m,
	    .sb = sb,
	    .container = sb->container,
	    .sid = sb->id,
	    .in = in,
	    .opts = opts,
	    .cap = (size_t)m->s->sandbox.output_cap,
	};
	bool had_state, retried = false;
	int r;

	if (!code)
		return sbx_error_set(err, -EINVAL, "no code given");
	if (!sbx_utf8_valid(code, strlen(code)))
		return sbx_error_set(err, -EINVAL, "the code is not valid UTF-8");
	if (!in)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = lock_until(in, limit, opts);
	if (r == -ECANCELED)
		return sbx_error_set(err, r,
				     "the call was cancelled while it waited for another "
				     "execute_python_code call in sandbox %s; its code did not run",
				     sb->id);
	if (r < 0)
		return sbx_error_set(err, -EBUSY,
				     "another execute_python_code call is still running in sandbox "
				     "%s; wait for it to end, or give a longer timeout",
				     sb->id);
	c.id = call_id(in);
	c.res.exit_code = -1;
again:
	r = ensure_started(&c, err);
	if (r < 0)
		goto out;
	if (in->untold != UNTOLD_NONE) {
		c.res.interpreter_restarted = true;
		r = sbx_str_replacef(
		    &c.res.notice, "%s",
		    in->untold == UNTOLD_LOST
			? "The Python interpreter had ended since the last call (killed, or out of "
			  "memory); a new one ran this code: variables and imports of earlier "
			  "calls are gone."
		    : in->untold == UNTOLD_ASLEEP
			? "The sandbox was asleep since the last call (unused: "
			  "sandbox.idle_timeout), so a new Python interpreter ran this code: "
			  "variables and imports of earlier calls are gone; files and installed "
			  "packages are kept."
			: "A new Python interpreter ran this code: variables and imports of "
			  "earlier calls are gone.");
		in->untold = UNTOLD_NONE;
		if (r < 0) {
			r = sbx_error_set(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	had_state = in->has_state;
	in->has_state = true; /* this call's code may leave some */
	r = converse(&c, code, limit, err);
	if (r == -EAGAIN)
		in->has_state = had_state; /* the request was not taken: no code ran */
	if (r == -EAGAIN && !retried) {
		/* The request went to an interpreter that had ended unnoticed. */
		retried = true;
		drop_stream(in);
		in->lost = true;
		sbx_buf_reset(&c.res.out);
		sbx_buf_reset(&c.res.err);
		goto again;
	}
	if (r == -EAGAIN)
		r = sbx_error_set(err, -EPIPE, "the Python interpreter of sandbox %s ended at once",
				  sb->id);
	if (r < 0)
		goto out;
	if (sbx_buf_append(&c.res.out, "", 0) < 0 || sbx_buf_append(&c.res.err, "", 0) < 0 ||
	    sbx_utf8_sanitize(&c.res.out) < 0 || sbx_utf8_sanitize(&c.res.err) < 0) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (c.res.truncated && !c.res.notice)
		sbx_str_replacef(&c.res.notice,
				 "The output was cut at %lld bytes (sandbox.output_cap).",
				 (long long)c.cap);
	*ret_result = c.res;
	memset(&c.res, 0, sizeof(c.res));
out:
	pthread_mutex_unlock(&in->run);
	call_release(&c);
	sbx_run_result_release(&c.res);
	return r;
}

/* The call counts as one in the sandbox while it waits for the one before
 * it too: the reaper leaves the sandbox alone meanwhile. */
int sbx_interp_run(sbx_manager *m, sbx_sandbox *sb, const char *code,
		   const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
		   struct sbx_error *err)
{
	struct sbx_run_result res = {0};
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = interp_run(m, sb, code, opts, &res, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	if (r >= 0 && q < 0) {
		sbx_run_result_release(&res);
		return q;
	}
	if (r >= 0)
		*ret_result = res;
	return r;
}

static int interp_reset(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);

int sbx_interp_reset(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = interp_reset(m, sb, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	return r < 0 ? r : q;
}

static int interp_reset(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	struct sbx_interp *in = interp_of(sb);
	struct call c = {.m = m, .sb = sb, .container = sb->container, .sid = sb->id, .in = in};
	long pid, pgid;
	int r;

	if (!in)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	/* Kill first, so that a running call ends now instead of at its limit. */
	pthread_mutex_lock(&in->pid_lock);
	pid = in->pid;
	pgid = in->pgid;
	pthread_mutex_unlock(&in->pid_lock);
	kill_pid(m, sb, pid, pgid);
	pthread_mutex_lock(&in->run);
	drop_stream(in);
	r = start(&c, err);
	in->lost = false;
	in->untold = UNTOLD_NONE; /* the reset's own result says it */
	pthread_mutex_unlock(&in->run);
	call_release(&c);
	if (r < 0)
		sbx_error_prefix(err, "reset the Python interpreter");
	return r;
}

/* Runs "pass" once in a new interpreter, so that the first user call finds
 * its code paths warm (compiled, imported, paged in): it leaves no
 * variable, output or file. Under in->run. */
static int warm_up(struct call *c, struct sbx_error *err)
{
	int64_t deadline = sbx_monotonic_ms() + START_MS;
	int r;

	c->id = call_id(c->in);
	c->cap = 4096;
	r = send_run(c, "pass", err);
	while (r >= 0 && !c->done) {
		int64_t left = deadline - sbx_monotonic_ms();
		r = pump(c, left > 0 ? (int)left : 0, err);
		if (r == 0)
			r = sbx_error_set(err, -EPIPE, "the Python interpreter ended");
	}
	sbx_run_result_release(&c->res);
	return r < 0 ? r : 0;
}

int sbx_interp_start_pooled(sbx_manager *m, const char *id, const char *container,
			    struct sbx_interp **ret_in, struct sbx_error *err)
{
	struct sbx_interp *in = interp_new();
	struct call c = {.m = m, .in = in, .container = container, .sid = id};
	int r;

	if (!in)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&in->run);
	r = start_once(&c, err);
	if (r >= 0)
		r = warm_up(&c, err);
	pthread_mutex_unlock(&in->run);
	call_release(&c);
	if (r < 0) {
		sbx_interp_free(in);
		return r;
	}
	in->has_state = false; /* nobody's code ran in it: losing it loses nothing */
	*ret_in = in;
	return 0;
}

void sbx_interp_sleep(sbx_sandbox *sb)
{
	struct sbx_interp *in;

	pthread_mutex_lock(&sb->m->lock);
	in = sb->interp;
	pthread_mutex_unlock(&sb->m->lock);
	if (!in)
		return;
	pthread_mutex_lock(&in->run);
	drop_stream(in);
	in->lost = false; /* has_state kept: the next run says a new one ran it */
	in->slept = in->has_state;
	pthread_mutex_unlock(&in->run);
}

bool sbx_sandbox_python_ready(sbx_sandbox *sb)
{
	struct sbx_interp *in;
	struct call c = {.m = sb->m, .sb = sb, .container = sb->container, .sid = sb->id};
	bool ready;

	pthread_mutex_lock(&sb->m->lock);
	in = sb->interp;
	pthread_mutex_unlock(&sb->m->lock);
	if (!in)
		return false;
	if (pthread_mutex_trylock(&in->run) != 0)
		return true; /* a call (or reset) is using it */
	c.in = in;
	/* c.id 0 matches no call: pending lines of no call are dropped. */
	if (in->stream && stream_ended(&c)) {
		drop_stream(in);
		in->lost = true;
	}
	ready = in->stream != NULL;
	pthread_mutex_unlock(&in->run);
	call_release(&c);
	return ready;
}
