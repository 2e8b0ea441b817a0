/* SPDX-License-Identifier: MIT */
/*
 * A sandbox's file readers: the client side of src/sandbox/sbx_reader.py
 * (whose header comment describes the protocol). A reader is a Python
 * process started with one exec as the sandbox's user and kept: a download
 * takes an idle one (or starts one), asks it for a file's bytes, and gives
 * it back when the exchange ended cleanly, so that the next costs no exec.
 *
 * Bounds, whatever the process does (code in the sandbox can replace it):
 * a line is at most READER_LINE_MAX bytes, a frame at most READER_FRAME_MAX
 * and within the credit granted (READER_WINDOW outstanding), the bytes of a
 * reply at most what was asked; anything else ends that reader. Nothing
 * arrives unasked: an idle reader that is readable (it ended, or wrote) is
 * dropped. At most READERS_IDLE_MAX idle readers are kept per sandbox, each
 * at most READER_KEEP_MS (the process ends itself after READER_IDLE_S); the
 * record frees its idle ones, and a reader in use belongs to its caller.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/log.h"

/* The program's text, generated from src/sandbox/sbx_reader.py. */
#include "src/sandbox/sbx_reader.inc"

#define READER_USER SBX_SANDBOX_USER
#define READER_FRAME_MAX (1024 * 1024)
/* File bytes a reader may send beyond what the server has taken. */
#define READER_WINDOW (4 * 1024 * 1024)
#define READER_IDLE_S 30
#define READER_KEEP_MS 25000
#define READERS_IDLE_MAX 4
#define READER_LINE_MAX 128
#define READER_BUF (256 * 1024)
#define READER_HELLO_MS 30000
/* How long a reply cut short may take to end (else its reader goes). */
#define READER_STOP_MS 250
#define READER_DIAG_MAX 1024
#define READER_HELLO "sbx-reader 1"

struct sbx_reader {
	struct sbx_reader *next; /* in its sandbox's idle list */
	sbx_stream *s;
	int64_t idle_ms; /* when it was given back */
	unsigned char *buf;
	size_t off, len; /* stdout bytes read and not yet taken: buf[off, len) */
	struct sbx_buf diag;
	/* The exchange: */
	int64_t left;	/* file bytes the reply still owes */
	int64_t frame;	/* bytes left in the frame being read */
	int64_t credit; /* bytes the reader may still send */
	int64_t taken;	/* bytes taken since the last grant */
	bool heard;	/* it sent something since the request */
	bool stopping;	/* told to stop: no more credit is granted */
	bool ended;	/* its last frame came: the reader may serve again */
	bool broken;	/* it said something it must not: never reused */
};

static bool cancel_asked(const struct sbx_cancel *c)
{
	return c && c->cancelled && c->cancelled(c->userdata);
}

ssize_t sbx_stream_read_within(sbx_stream *s, void *buf, size_t cap, int *ret_fd, int64_t wait,
			       const struct sbx_cancel *c, struct sbx_error *err)
{
	for (;;) {
		int64_t slice =
		    c && c->cancelled && wait > SBX_CANCEL_POLL_MS ? SBX_CANCEL_POLL_MS : wait;
		ssize_t n;

		if (cancel_asked(c))
			return sbx_error_set(err, -ECANCELED, "cancelled by its caller");
		n = sbx_stream_read(s, buf, cap, ret_fd, (int)slice, err);
		if (n != -ETIMEDOUT || slice == wait)
			return n;
		wait -= slice;
	}
}

static struct sbx_reader *reader_free(struct sbx_reader *r)
{
	if (!r)
		return NULL;
	sbx_stream_free(r->s);
	sbx_buf_release(&r->diag);
	free(r->buf);
	free(r);
	return NULL;
}

void sbx_readers_free(struct sbx_reader *list)
{
	while (list) {
		struct sbx_reader *next = list->next;
		reader_free(list);
		list = next;
	}
}

/* Reads more of its stdout into buf by UNTIL (sbx_monotonic_ms time):
 * the bytes read, 0 at the end of the stream, or a negative error. What it
 * writes on stderr is kept (bounded) and waited past. */
static ssize_t fill(struct sbx_reader *r, int64_t until, const struct sbx_cancel *cancel,
		    struct sbx_error *err)
{
	if (r->off == r->len)
		r->off = r->len = 0;
	else if (r->len == READER_BUF && r->off) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->len == READER_BUF)
		return sbx_error_set(err, -EPROTO, "the file reader's buffer is full");
	for (;;) {
		int64_t wait = until - sbx_monotonic_ms();
		int fd = 1;
		ssize_t n;

		if (wait <= 0)
			return sbx_error_set(err, -ETIMEDOUT,
					     "the sandbox's file reader sent "
					     "nothing in time");
		n = sbx_stream_read_within(r->s, r->buf + r->len, READER_BUF - r->len, &fd, wait,
					   cancel, err);
		if (n <= 0)
			return n == 0 ? 0 : n;
		if (fd == 2) {
			/* Kept for an error message a client may read: printable
			 * ASCII alone, whatever the sandbox wrote there. */
			for (ssize_t i = 0; i < n && r->diag.len < READER_DIAG_MAX; i++) {
				unsigned char c = r->buf[r->len + (size_t)i];
				char k = c >= 0x20 && c < 0x7f ? (char)c : '?';
				sbx_buf_append(&r->diag, &k, 1);
			}
			continue;
		}
		r->len += (size_t)n;
		r->heard = true;
		return n;
	}
}

/* One line of at most READER_LINE_MAX bytes into OUT (NUL-terminated,
 * without its newline): 0, or -EPIPE at the end of the stream, -EPROTO for
 * a longer line, another negative error. */
static int read_line(struct sbx_reader *r, char *out, size_t cap, int64_t until,
		     const struct sbx_cancel *cancel, struct sbx_error *err)
{
	for (;;) {
		size_t have = r->len - r->off;
		unsigned char *nl = memchr(r->buf + r->off, '\n', have);
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - (r->buf + r->off));
			if (len >= cap)
				break;
			memcpy(out, r->buf + r->off, len);
			out[len] = '\0';
			r->off += len + 1;
			return 0;
		}
		if (have >= cap || have >= READER_LINE_MAX)
			break;
		n = fill(r, until, cancel, err);
		if (n == 0)
			return sbx_error_set(err, -EPIPE, "the sandbox's file reader ended%s%.200s",
					     r->diag.len ? ": " : "",
					     r->diag.len ? r->diag.data : "");
		if (n < 0)
			return (int)n;
	}
	return sbx_error_set(err, -EPROTO, "the sandbox's file reader sent a malformed line");
}

/* Parses COUNT space-separated decimal numbers of LINE into V (each at
 * most UINT64_MAX); false when it is not exactly that. */
static bool numbers(const char *line, uint64_t *v, int count)
{
	const char *p = line;

	for (int i = 0; i < count; i++) {
		uint64_t x = 0;
		int digits = 0;

		if (i && *p++ != ' ')
			return false;
		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			unsigned d = (unsigned)(*p - '0');
			if (x > (UINT64_MAX - d) / 10)
				return false;
			x = x * 10 + d;
		}
		if (!digits)
			return false;
		v[i] = x;
	}
	return *p == '\0';
}

/* Writes LEN bytes of BUF to R's stdin by UNTIL (sbx_monotonic_ms time),
 * asking CANCEL: a reader that takes none in time is not waited for. */
static int write_within(struct sbx_reader *r, const void *buf, size_t len, int64_t until,
			const struct sbx_cancel *cancel, struct sbx_error *err)
{
	const char *p = buf;

	while (len) {
		ssize_t n = sbx_stream_write_some(r->s, p, len, err);
		int64_t wait = until - sbx_monotonic_ms();

		if (n < 0)
			return (int)n;
		p += n;
		len -= (size_t)n;
		if (!len)
			break;
		if (cancel_asked(cancel))
			return sbx_error_set(err, -ECANCELED, "cancelled by its caller");
		if (wait <= 0)
			return sbx_error_set(err, -ETIMEDOUT,
					     "the sandbox's file reader takes no requests");
		poll(&(struct pollfd){.fd = sbx_stream_fd(r->s), .events = POLLOUT}, 1,
		     wait < SBX_CANCEL_POLL_MS ? (int)wait : SBX_CANCEL_POLL_MS);
	}
	return 0;
}

static int reader_start(sbx_manager *m, sbx_sandbox *sb, struct sbx_reader **ret,
			const struct sbx_cancel *cancel, struct sbx_error *err)
{
	char frame_max[16], idle[16], line[READER_LINE_MAX + 1];
	const char *const argv[] = {"python3",	     "-u",	"-c", sbx_reader_py, "sbx-reader",
				    SBX_RESULTS_DIR, frame_max, idle, NULL};
	struct sbx_exec_spec spec = {.argv = argv, .workdir = "/", .user = READER_USER};
	struct sbx_reader *r = calloc(1, sizeof(*r));
	int rc;

	if (!r || !(r->buf = malloc(READER_BUF))) {
		free(r);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	snprintf(frame_max, sizeof(frame_max), "%d", READER_FRAME_MAX);
	snprintf(idle, sizeof(idle), "%d", READER_IDLE_S);
	rc = sbx_exec_stream(m->engine, sb->container, &spec, &r->s, err);
	if (rc < 0) {
		reader_free(r);
		return sbx_sandbox_exec_failed(m, sb, rc, err);
	}
	rc = read_line(r, line, sizeof(line), sbx_monotonic_ms() + READER_HELLO_MS, cancel, err);
	if (rc >= 0 && strcmp(line, READER_HELLO) != 0)
		rc = sbx_error_set(err, -EPROTO, "the sandbox's file reader did not start");
	if (rc < 0) {
		char why[SBX_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", err ? err->msg : "");
		if (rc != -ECANCELED)
			rc = sbx_error_set(err, rc == -ETIMEDOUT ? -ETIMEDOUT : -EIO,
					   "the file reader did not start in the sandbox: %.900s",
					   why);
		reader_free(r);
		return rc;
	}
	*ret = r;
	return 0;
}

/* An idle reader of SB that looks alive (nothing to read from it), or NULL. */
static struct sbx_reader *take_idle(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_reader *r, *drop = NULL;
	int64_t now = sbx_monotonic_ms();

	for (;;) {
		pthread_mutex_lock(&m->lock);
		r = sb->readers;
		if (r) {
			sb->readers = r->next;
			sb->n_readers--;
		}
		pthread_mutex_unlock(&m->lock);
		if (!r)
			break;
		r->next = NULL;
		if (now - r->idle_ms < READER_KEEP_MS && r->off == r->len &&
		    !sbx_stream_pending(r->s) &&
		    poll(&(struct pollfd){.fd = sbx_stream_fd(r->s), .events = POLLIN}, 1, 0) == 0)
			break;
		r->next = drop;
		drop = r;
	}
	sbx_readers_free(drop);
	return r;
}

/* Stops R's reply (it sends at most the credit left, then its end) within
 * READER_STOP_MS: true when it ended cleanly. */
static bool stop(struct sbx_reader *r)
{
	int64_t until = sbx_monotonic_ms() + READER_STOP_MS;

	r->stopping = true;
	if (r->broken || (r->left > 0 && write_within(r, "x\n", 2, until, NULL, NULL) < 0))
		return false;
	while (!r->ended) {
		const void *data;
		if (sbx_reader_read(r, &data, until, NULL, NULL) < 0)
			return false;
	}
	return true;
}

void sbx_reader_give(sbx_manager *m, sbx_sandbox *sb, struct sbx_reader *r)
{
	if (!r)
		return;
	if ((r->ended || stop(r)) && !r->broken && r->off == r->len) {
		r->idle_ms = sbx_monotonic_ms();
		/* Idle, it holds its stream alone. */
		sbx_buf_release(&r->diag);
		free(r->buf);
		r->buf = NULL;
		r->off = r->len = 0;
		pthread_mutex_lock(&m->lock);
		if (sb->n_readers < READERS_IDLE_MAX && !sb->removed) {
			r->next = sb->readers;
			sb->readers = r;
			sb->n_readers++;
			r = NULL;
		}
		pthread_mutex_unlock(&m->lock);
	}
	reader_free(r);
}

/* Sends the request and reads the reply's line (and the end of a reply
 * that owes no bytes). */
static int ask(struct sbx_reader *r, const char *relpath, int64_t offset, int64_t count,
	       const struct sbx_cancel *cancel, struct sbx_reader_reply *ret, struct sbx_error *err)
{
	char head[96], line[READER_LINE_MAX + 1];
	size_t plen = strlen(relpath);
	int64_t until = sbx_monotonic_ms() + SBX_FILE_IDLE_MS;
	uint64_t v[6];
	int64_t size, n;
	int rc;

	r->ended = r->heard = r->stopping = false;
	r->left = r->frame = r->taken = 0;
	r->credit = READER_WINDOW;
	snprintf(head, sizeof(head), "%" PRId64 " %" PRId64 " %d %zu\n", offset, count,
		 READER_WINDOW, plen);
	rc = write_within(r, head, strlen(head), until, cancel, err);
	if (rc >= 0)
		rc = write_within(r, relpath, plen, until, cancel, err);
	if (rc < 0)
		return rc;
	rc = read_line(r, line, sizeof(line), until, cancel, err);
	if (rc < 0)
		return rc;
	/* The count follows from the size: nothing else is taken. */
	if (!numbers(line, v, 6) || v[0] == 1 || v[0] > 5 || v[1] > INT64_MAX || v[2] > INT64_MAX ||
	    (v[0] && (v[1] || v[5])))
		goto bad;
	size = (int64_t)v[1];
	n = v[0] || size <= offset ? 0 : size - offset < count ? size - offset : count;
	if (v[5] != (uint64_t)n)
		goto bad;
	*ret = (struct sbx_reader_reply){
	    .code = (int)v[0],
	    .info = {
		.size = size, .mtime_ns = (int64_t)v[2], .ino = v[3], .dev = v[4], .count = n}};
	r->left = n;
	if (v[0])
		r->ended = true; /* a refusal has no frames */
	else if (n == 0) {
		/* Its end comes at once: taken now, the reader is free again. */
		const void *data;
		ssize_t got = sbx_reader_read(r, &data, until, cancel, err);
		if (got != 0)
			return got < 0 ? (int)got
				       : sbx_error_set(err, -EPROTO,
						       "the sandbox's file "
						       "reader sent a bad reply");
	}
	return 0;
bad:
	r->broken = true;
	return sbx_error_set(err, -EPROTO, "the sandbox's file reader sent a bad reply");
}

int sbx_reader_open(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t offset,
		    int64_t count, const struct sbx_cancel *cancel, struct sbx_reader **ret,
		    struct sbx_reader_reply *ret_reply, struct sbx_error *err)
{
	struct sbx_reader *r;
	int rc;

	if (offset < 0 || count < 0)
		return sbx_error_set(err, -EINVAL, "a negative offset or count");
	r = take_idle(m, sb);
	if (r && !(r->buf = malloc(READER_BUF))) {
		reader_free(r);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	/* One that was idle may have ended meanwhile (its time, the sandbox's
	 * code; the engine may then reset its stream): when its stream failed
	 * before a byte came, a new one is asked. */
	if (r) {
		rc = ask(r, relpath, offset, count, cancel, ret_reply, err);
		if (rc < 0 && !r->heard && rc != -ECANCELED && rc != -ETIMEDOUT && rc != -ENOMEM) {
			r = reader_free(r);
			sbx_error_clear(err);
		} else if (rc < 0) {
			reader_free(r);
			return rc;
		}
	}
	if (!r) {
		rc = reader_start(m, sb, &r, cancel, err);
		if (rc < 0)
			return rc;
		rc = ask(r, relpath, offset, count, cancel, ret_reply, err);
		if (rc < 0) {
			reader_free(r);
			return rc == -EPIPE ? -EIO : rc;
		}
	}
	*ret = r;
	return 0;
}

ssize_t sbx_reader_read(struct sbx_reader *r, const void **ret_data, int64_t until,
			const struct sbx_cancel *cancel, struct sbx_error *err)
{
	return sbx_reader_read_max(r, ret_data, SIZE_MAX, until, cancel, err);
}

ssize_t sbx_reader_read_max(struct sbx_reader *r, const void **ret_data, size_t max, int64_t until,
			    const struct sbx_cancel *cancel, struct sbx_error *err)
{
	char line[READER_LINE_MAX + 1];
	int rc;

	if (r->ended)
		return 0;
	if (r->broken)
		return sbx_error_set(err, -EPROTO, "the file reader failed before");
	if (r->frame == 0) {
		uint64_t len = 0;
		size_t digits = 0;

		rc = read_line(r, line, sizeof(line), until, cancel, err);
		if (rc < 0)
			goto broken;
		/* 1 to 8 lowercase hex digits, nothing else. */
		for (const char *p = line; *p && digits <= 8; p++, digits++) {
			int d = *p >= '0' && *p <= '9'	 ? *p - '0'
				: *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
							 : -1;
			if (d < 0) {
				digits = 9;
				break;
			}
			len = len * 16 + (uint64_t)d;
		}
		if (digits < 1 || digits > 8 || len > READER_FRAME_MAX || (int64_t)len > r->left ||
		    (int64_t)len > r->credit) {
			rc = sbx_error_set(err, -EPROTO,
					   "the sandbox's file reader sent a bad "
					   "frame");
			goto broken;
		}
		if (len == 0) {
			r->ended = true;
			return 0; /* the end, or it shrank: the caller counts */
		}
		r->frame = (int64_t)len;
	}
	if (r->off == r->len) {
		ssize_t n = fill(r, until, cancel, err);
		if (n <= 0) {
			rc = n == 0 ? sbx_error_set(err, -EIO,
						    "the sandbox's file reader ended "
						    "within a frame%s%.200s",
						    r->diag.len ? ": " : "",
						    r->diag.len ? r->diag.data : "")
				    : (int)n;
			goto broken;
		}
	}
	{
		size_t n = r->len - r->off;
		if ((int64_t)n > r->frame)
			n = (size_t)r->frame;
		if (n > max)
			n = max;
		*ret_data = r->buf + r->off;
		r->off += n;
		r->frame -= (int64_t)n;
		r->left -= (int64_t)n;
		r->credit -= (int64_t)n;
		r->taken += (int64_t)n;
		/* Half the window taken: the reader may send it again. */
		if (r->taken >= READER_WINDOW / 2 && r->left > r->credit && !r->stopping) {
			char grant[32];
			snprintf(grant, sizeof(grant), "+%" PRId64 "\n", r->taken);
			rc = write_within(r, grant, strlen(grant), until, cancel, err);
			if (rc < 0)
				goto broken;
			r->credit += r->taken;
			r->taken = 0;
		}
		return (ssize_t)n;
	}
broken:
	r->broken = true;
	return rc;
}
