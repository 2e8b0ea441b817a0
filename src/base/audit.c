/* SPDX-License-Identifier: MIT */
/* The audit log (include/sbx/audit.h): JSON lines, one write each. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sbx/audit.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/log.h"
#include "sbx/utf8.h"

struct sbx_audit {
	char *path;	      /* NULL: standard error */
	pthread_mutex_t lock; /* guards what follows, and orders the writes */
	int fd;		      /* the file, or STDERR_FILENO */
	int64_t checked_ms;   /* the last look at PATH (sbx_monotonic_ms) */
	bool failing;	      /* a write or reopen failed, and the log said so */
};

/* Opens PATH for appending as the header says it must be: the fd, or a
 * negative errno with ERR. */
static int open_log(const char *path, struct sbx_error *err)
{
	/* O_NONBLOCK: a FIFO there is refused below, not waited on. */
	int fd = open(
	    path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
	    0600);
	struct stat st;

	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			return sbx_error_set(err, -ELOOP,
					     "server.audit_log: %s is a symbolic link: refused "
					     "(name the file itself)",
					     path);
		if (e == ENXIO) /* a FIFO without a reader, a socket */
			return sbx_error_set(err, -EPERM,
					     "server.audit_log: %s is not a regular file: refused",
					     path);
		return sbx_error_set(err, -e,
				     "server.audit_log: cannot open %s: %s (its folder must "
				     "exist and be writable by the server's user)",
				     path, strerror(e));
	}
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return sbx_error_set(err, -e, "server.audit_log: %s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
	    st.st_nlink != 1) {
		const char *why =
		    !S_ISREG(st.st_mode)     ? "is not a regular file"
		    : st.st_uid != geteuid() ? "belongs to another user"
		    : st.st_nlink != 1
			? "has other hard links (it could be another file of the server's, "
			  "such as its keys file)"
			: "is writable by its group or others (chmod go-w it)";
		close(fd);
		return sbx_error_set(err, -EPERM, "server.audit_log: %s %s: refused", path, why);
	}
	fcntl(fd, F_SETFL, O_APPEND);
	return fd;
}

int sbx_audit_open(const char *path, sbx_audit **ret_audit, struct sbx_error *err)
{
	sbx_audit *a;
	int fd = STDERR_FILENO;

	if (path && *path) {
		if (path[0] != '/')
			return sbx_error_set(err, -EINVAL,
					     "server.audit_log: %s: expected an absolute path, or "
					     "empty for standard error",
					     path);
		fd = open_log(path, err);
		if (fd < 0)
			return fd;
	}
	a = calloc(1, sizeof(*a));
	if (!a || (path && *path && !(a->path = strdup(path)))) {
		free(a);
		if (fd != STDERR_FILENO)
			close(fd);
		return sbx_error_set(err, -ENOMEM, "server.audit_log: out of memory");
	}
	pthread_mutex_init(&a->lock, NULL);
	a->fd = fd;
	a->checked_ms = sbx_monotonic_ms();
	*ret_audit = a;
	return 0;
}

sbx_audit *sbx_audit_free(sbx_audit *a)
{
	if (!a)
		return NULL;
	if (a->path)
		close(a->fd);
	pthread_mutex_destroy(&a->lock);
	free(a->path);
	free(a);
	return NULL;
}

const char *sbx_audit_path(const sbx_audit *a)
{
	return a->path ? a->path : "";
}

/* Lock held. */
static int reopen_locked(sbx_audit *a, struct sbx_error *err)
{
	int fd = open_log(a->path, err);

	if (fd < 0)
		return fd;
	close(a->fd);
	a->fd = fd;
	return 0;
}

int sbx_audit_reopen(sbx_audit *a, struct sbx_error *err)
{
	int r;

	if (!a->path)
		return 0;
	pthread_mutex_lock(&a->lock);
	r = reopen_locked(a, err);
	a->checked_ms = sbx_monotonic_ms();
	if (r == 0)
		a->failing = false;
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* Says once (until it works again) that a line was lost, and why. Lock held. */
static void note_failure(sbx_audit *a, const char *what)
{
	if (a->failing)
		return;
	a->failing = true;
	sbx_log("audit log %s: %s; lines are lost until it works again (SIGHUP reopens it)",
		a->path ? a->path : "(standard error)", what);
}

/* When PATH no longer names the open file (rotated: renamed or removed),
 * opens it again; looked at once per SBX_AUDIT_CHECK_MS. Lock held. */
static void follow_rotation(sbx_audit *a)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct stat now, open;
	int64_t t = sbx_monotonic_ms();

	if (!a->path || t - a->checked_ms < SBX_AUDIT_CHECK_MS)
		return;
	a->checked_ms = t;
	if (lstat(a->path, &now) == 0 && fstat(a->fd, &open) == 0 && now.st_dev == open.st_dev &&
	    now.st_ino == open.st_ino)
		return;
	if (reopen_locked(a, &err) < 0)
		note_failure(a, err.msg);
	else
		a->failing = false;
}

/* Writes LINE[0..LEN) (one line with its newline) in one write(2). */
static void write_line(sbx_audit *a, const char *line, size_t len)
{
	ssize_t n;

	pthread_mutex_lock(&a->lock);
	follow_rotation(a);
	if (!a->path)
		flockfile(stderr); /* sbx_log writes there under this lock */
	do
		n = write(a->fd, line, len);
	while (n < 0 && errno == EINTR);
	if (!a->path)
		funlockfile(stderr);
	if (n != (ssize_t)len && a->path)
		note_failure(a, n < 0 ? strerror(errno) : "a short write (disk full?)");
	pthread_mutex_unlock(&a->lock);
}

/* "2025-06-01T12:00:00.123Z" into BUF (at least 32 bytes). */
static void time_now(char *buf, size_t size)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (!gmtime_r(&ts.tv_sec, &tm) || (n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm)) == 0)
		n = (size_t)snprintf(buf, size, "1970-01-01T00:00:00");
	snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* Adds KEY: V (NULL: "") cut to SBX_AUDIT_FIELD_MAX bytes at a character,
 * as valid UTF-8. -ENOMEM. */
static int add_str(struct json_object *o, const char *key, const char *v)
{
	struct sbx_buf b = SBX_BUF_INIT;
	size_t n = v ? strnlen(v, SBX_AUDIT_FIELD_MAX + 1) : 0;
	int r;

	if (n > SBX_AUDIT_FIELD_MAX) {
		n = SBX_AUDIT_FIELD_MAX;
		while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
			n--; /* not inside a character */
	}
	r = sbx_buf_append(&b, v ? v : "", n);
	if (r >= 0)
		r = sbx_utf8_sanitize(&b);
	if (r >= 0)
		r = json_object_object_add(o, key, json_object_new_string_len(b.data, (int)b.len));
	sbx_buf_release(&b);
	return r < 0 ? -ENOMEM : 0;
}

static int add_int(struct json_object *o, const char *key, int64_t v)
{
	return json_object_object_add(o, key, json_object_new_int64(v)) < 0 ? -ENOMEM : 0;
}

/* A new line's object with its time and EVENT, or NULL. */
static struct json_object *event_new(const char *event)
{
	struct json_object *o = json_object_new_object();
	char t[48];

	time_now(t, sizeof(t));
	if (o && (add_str(o, "time", t) < 0 || add_str(o, "event", event) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* Writes O (taken; NULL: out of memory) as one line; R < 0: a field could
 * not be added. */
static void event_write(sbx_audit *a, struct json_object *o, int r)
{
	struct sbx_buf line = SBX_BUF_INIT;
	const char *text = NULL;
	size_t len = 0;

	if (o && r == 0)
		text = json_object_to_json_string_length(
		    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (text && len < SBX_AUDIT_LINE_MAX && sbx_buf_reserve(&line, len + 1) == 0) {
		sbx_buf_append(&line, text, len);
		sbx_buf_append(&line, "\n", 1);
		write_line(a, line.data, line.len);
	} else {
		/* The fields' cut keeps every line far below the bound. */
		pthread_mutex_lock(&a->lock);
		note_failure(a, text && len >= SBX_AUDIT_LINE_MAX ? "a line over SBX_AUDIT_LINE_MAX"
								  : "out of memory");
		pthread_mutex_unlock(&a->lock);
	}
	sbx_buf_release(&line);
	json_object_put(o);
}

void sbx_audit_tool_call(sbx_audit *a, const struct sbx_audit_tool_call *c)
{
	struct json_object *o;
	int r = 0;

	if (!a)
		return;
	o = event_new("tool_call");
	if (o) {
		r |= add_str(o, "tenant", c->tenant);
		r |= add_str(o, "key_id", c->key_id);
		r |= add_str(o, "session", c->session);
		r |= add_str(o, "transport", c->transport);
		r |= add_str(o, "client", c->client);
		r |= add_str(o, "tool", c->tool);
		r |= add_str(o, "sandbox_id", c->sandbox_id);
		r |= add_str(o, "sandbox_name", c->sandbox_name);
		r |= add_int(o, "duration_ms", c->duration_ms);
		r |= add_str(o, "outcome", c->outcome);
		r |= add_str(o, "error", c->error);
		r |= add_int(o, "bytes_out", c->bytes_out);
	}
	event_write(a, o, r);
}

void sbx_audit_auth_failure(sbx_audit *a, const struct sbx_audit_auth_failure *f)
{
	struct json_object *o;
	int r = 0;

	if (!a)
		return;
	o = event_new("auth_failure");
	if (o) {
		r |= add_str(o, "client", f->client);
		r |= add_str(o, "method", f->method);
		r |= add_str(o, "route", f->route);
		r |= add_str(o, "reason", f->reason);
		r |= add_str(o, "key_id", f->key_id);
	}
	event_write(a, o, r);
}
