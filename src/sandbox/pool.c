/* SPDX-License-Identifier: MIT */
/*
 * The warm pool and the state folder (include/sbx/sandbox.h says what they
 * are for).
 *
 * The pool is a FIFO of started, never assigned containers, one refill
 * thread per manager and up to sandbox.pool_fill filler threads. Everything
 * here is under m->lock, which is never held across an engine call or a file
 * write: the refill thread reserves what a filler is about to make (a slot
 * of `filling`) so that the limit, stats and recover see it, and starts the
 * filler, which provisions with sbx_container_provision and starts its
 * Python interpreter without the lock, then takes the lock to push the entry
 * (or back off) and give its slot back.
 *
 * Its size: sandbox.pool_size, grown by one (up to sandbox.pool_max) by each
 * create that found no pooled container (a miss), so that the next burst
 * like the last one is served from the pool; back to pool_size once no
 * create missed for sandbox.pool_shrink_after. While creates that missed are
 * making their own containers no filler starts: the engine serves them
 * first (a burst past the pool is as fast as the engine allows), and the
 * pool refills after.
 *
 * The refill thread, in order: removes pooled containers beyond the room
 * left (the pool is off, stopping, shrunk, or assigned sandboxes took the
 * room); tries again to remove the containers whose removal failed
 * (`doomed`: the engine was stopping, say; backing off like the refill);
 * starts fillers (the container, then its Python interpreter, which the
 * entry owns and which moves to the record at assignment) while the pool
 * has started filling, has room, no create that missed is making its own
 * and it is not backing off (0.5 s after a failure, doubling up to 30 s);
 * lists the pooled containers (one engine call) and drops those no longer
 * running, every 30 s and whenever following the engine (re)starts (watch.c:
 * until then no pooled container of an earlier epoch is handed out); else
 * sleeps on `wake`, which fillers signal when they end.
 *
 * One server per instance: the manager holds an exclusive flock(2) on
 * STATE_DIR/instance-INSTANCE.lock (which names its pid) for as long as it
 * lives, so that a second server with the same state folder and instance
 * fails to start (-EBUSY) instead of adopting, reaping and removing the
 * first one's sandboxes; the kernel drops the lock when the process ends,
 * however it ends. And server.instance left at "default" is made unique to
 * the state folder: STATE_DIR/default-instance holds the name used,
 * "default-" and 8 random hex digits, made at the first start (or "default"
 * when the folder already has an instance-default folder from an earlier
 * version, whose sandboxes stay adoptable); so two servers with state
 * folders of their own never share an instance, and two with one state
 * folder share the lock. Without a state folder there is nothing to lock:
 * the instance stays "default" (or what was set) and keeping servers apart
 * is the administrator's (their own server.instance each).
 *
 * State folder: STATE_DIR/instance-INSTANCE/ID, one file per pooled sandbox
 * once it is assigned: {"id", "container", "owner", "name", "assigned"},
 * 0600, written to .ID.tmp and renamed (no fsync: after a power loss an
 * empty or missing file makes recover leave the container alone or remove
 * it; a server crash loses nothing). Files are opened by the instance
 * folder's descriptor, never followed through links, read up to
 * STATE_FILE_MAX bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sys/file.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

#define STATE_DIR_DEFAULT "/var/lib/mcp-sandbox"
#define STATE_FILE_MAX 4096
#define INSTANCE_DEFAULT "default" /* server.instance's default (src/base/settings.c) */
#define INSTANCE_FILE "default-instance"
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define CHECK_EVERY_S 30
#define FILL_MAX 16 /* sandbox.pool_fill's upper bound (src/base/settings.c) */

struct sbx_pool {
	pthread_t thread;
	bool have_thread;
	pthread_cond_t wake;
	bool started;		   /* may fill */
	bool stopping;		   /* sbx_pool_stop was called */
	size_t size;		   /* sandbox.pool_size; 0 = off */
	size_t max;		   /* the most it grows to: at least size */
	size_t grown;		   /* above size now: one per miss, up to max */
	struct timespec shrink_at; /* CLOCK_MONOTONIC: grown falls to 0 */
	size_t fill;		   /* fillers at once: sandbox.pool_fill */
	size_t cold_making;	   /* creates that missed, making their own */
	struct sbx_pool_entry *head;
	size_t n_ready;
	uint64_t pushes; /* entries pushed so far: an entry's `pushed` */
	/* The fillers' ids (a slot of "" is free). */
	size_t n_filling;
	char filling[FILL_MAX][SBX_SANDBOX_ID_MAX + 1];
	unsigned failures_in_row;
	struct timespec retry_at, check_at; /* CLOCK_MONOTONIC */
	uint64_t taken, cold, made, failed;
	uint64_t checked_epoch; /* the epoch of the last check (none: 0) */
	uint64_t died;		/* pooled containers found dead */
	/* Containers out of the pool whose removal failed (the engine was
	 * stopping, say): the refill thread tries again, backing off. */
	struct sbx_pool_entry *doomed;
	unsigned doomed_failures;
	struct timespec doomed_at;
	int last_error;
	/* The instance's state folder: -1 and NULL when there is none. */
	int state_fd;
	char *state_path;
	int lock_fd; /* its lock file, flock()ed; -1 without a state folder */
	/* Pool sandbox ids recover saw but did not adopt or remove (their
	 * state files stay). */
	char (*seen)[SBX_SANDBOX_ID_MAX + 1];
	size_t n_seen;
};

static void ts_add_ms(struct timespec *ts, long ms)
{
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool ts_reached(const struct timespec *now, const struct timespec *t)
{
	return now->tv_sec > t->tv_sec || (now->tv_sec == t->tv_sec && now->tv_nsec >= t->tv_nsec);
}

/* Our ids are hex; anything else is not used as a file name. */
static bool id_valid(const char *id)
{
	size_t n = strlen(id);
	return n >= 1 && n <= SBX_SANDBOX_ID_MAX && strspn(id, "0123456789abcdef") == n;
}

/* ---- the state folder ---- */

static int write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Opens PATH (relative to AT) as a directory; with PRIVATE, creates it
 * 0700 when missing and insists that it is ours and closed to others. */
static int open_dir(int at, const char *path, bool private, struct sbx_error *err)
{
	struct stat st;
	int fd;

	if (private && mkdirat(at, path, 0700) < 0 && errno != EEXIST)
		return sbx_error_set(err, -errno, "create %s: %s", path, strerror(errno));
	fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (private ? O_NOFOLLOW : 0));
	if (fd < 0)
		return sbx_error_set(err, -errno, "open %s: %s", path, strerror(errno));
	if (!private)
		return fd;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid()) {
		close(fd);
		return sbx_error_set(err, -EPERM, "%s is not owned by this user", path);
	}
	if ((st.st_mode & 077) && fchmod(fd, 0700) < 0) {
		close(fd);
		return sbx_error_set(err, -errno, "make %s private: %s", path, strerror(errno));
	}
	return fd;
}

static bool instance_valid(const char *v)
{
	size_t n = strlen(v);
	return n >= 1 && n <= 64 &&
	       strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

/* 0 when FD is a regular file of ours (not a FIFO, a device, another
 * user's), else -EPERM. */
static int file_ours(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	return S_ISREG(st.st_mode) && st.st_uid == geteuid() ? 0 : -EPERM;
}

/* 0 when ST (of the folder PATH, WHAT in messages) is a folder of ours that
 * no one else may write to; else -EPERM in ERR. Another local user who could
 * write to the state folder or the instance folder could plant state files
 * and lock files that make this server adopt, hand out or remove containers
 * of anyone's. */
static int dir_safe(const struct stat *st, const char *what, const char *path,
		    struct sbx_error *err)
{
	if (!S_ISDIR(st->st_mode))
		return sbx_error_set(err, -EPERM, "%s %s is not a folder", what, path);
	if (st->st_uid != geteuid())
		return sbx_error_set(
		    err, -EPERM,
		    "%s %s belongs to uid %lu, not to this server's user (uid %lu): another user "
		    "could plant files in it that make this server adopt or remove containers; "
		    "give the server a folder of its own",
		    what, path, (unsigned long)st->st_uid, (unsigned long)geteuid());
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return sbx_error_set(
		    err, -EPERM,
		    "%s %s is writable by %s (mode %04o): another user could plant "
		    "files in it that make this server adopt or remove containers; "
		    "chmod go-w it, or give the server a folder of its own (0700)",
		    what, path, st->st_mode & S_IWOTH ? "everyone" : "its group",
		    (unsigned)(st->st_mode & 07777));
	return 0;
}

/* The instance name in TOP/INSTANCE_FILE: 1 with *ret_name, 0 when there is
 * none (or it is not a valid name), < 0 when it cannot be read. */
static int instance_read(int top, char **ret_name)
{
	char buf[80];
	ssize_t n;
	int r, fd = openat(top, INSTANCE_FILE,
			   O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = file_ours(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	r = n < 0 ? -errno : 0;
	close(fd);
	if (r < 0)
		return r;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (!instance_valid(buf))
		return 0;
	*ret_name = strdup(buf);
	return *ret_name ? 1 : -ENOMEM;
}

/* The instance a server with server.instance left at INSTANCE_DEFAULT uses
 * with the state folder TOP (see the top of this file). */
static int instance_derive(int top, const char *base, char **ret_name, struct sbx_error *err)
{
	char name[32], tmp[64];
	unsigned char raw[4];
	struct stat st;
	int r, fd;

	for (int tries = 0; tries < 3; tries++) {
		r = instance_read(top, ret_name);
		if (r != 0)
			return r < 0 ? sbx_error_set(err, r, "read %s/%s: %s", base, INSTANCE_FILE,
						     strerror(-r))
				     : 0;
		if (fstatat(top, "instance-" INSTANCE_DEFAULT, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			snprintf(name, sizeof(name), "%s", INSTANCE_DEFAULT);
		} else {
			r = sbx_random_bytes(raw, sizeof(raw));
			if (r < 0)
				return sbx_error_set(err, r, "no random bytes: %s", strerror(-r));
			memcpy(name, INSTANCE_DEFAULT "-", sizeof(INSTANCE_DEFAULT));
			sbx_hex_encode(raw, sizeof(raw), name + sizeof(INSTANCE_DEFAULT));
		}
		/* Written aside and linked into place: of two servers starting at
		 * once, one name wins and both read it. */
		snprintf(tmp, sizeof(tmp), ".%s.%ld.tmp", INSTANCE_FILE, (long)getpid());
		fd = openat(top, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return sbx_error_set(err, -errno, "write %s/%s: %s", base, tmp,
					     strerror(errno));
		strcat(name, "\n");
		r = write_all(fd, name, strlen(name));
		if (close(fd) < 0 && r == 0)
			r = -errno;
		if (r == 0 && linkat(top, tmp, top, INSTANCE_FILE, 0) < 0 && errno != EEXIST)
			r = -errno;
		unlinkat(top, tmp, 0);
		if (r < 0)
			return sbx_error_set(err, r, "write %s/%s: %s", base, INSTANCE_FILE,
					     strerror(-r));
	}
	return sbx_error_set(err, -EIO, "%s/%s holds no valid instance name", base, INSTANCE_FILE);
}

/* Takes the lock of instance NAME, the file instance-NAME.lock in the state
 * folder TOP (BASE): 0 with *ret_fd; in FATAL -EBUSY when another process
 * holds it, -EPERM when the file is not a plain file of ours (a symbolic
 * link, a FIFO, another user's); other failures in ERR. */
static int instance_lock(int top, const char *base, const char *instance, int *ret_fd,
			 struct sbx_error *fatal, struct sbx_error *err)
{
	_cleanup_free_ char *file = NULL;
	char pid[32] = "";
	ssize_t n;
	int lfd;

	if (asprintf(&file, "instance-%s.lock", instance) < 0) {
		file = NULL;
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	lfd = openat(top, file, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
		     0600);
	if (lfd < 0 && errno == ELOOP)
		return sbx_error_set(fatal, -EPERM,
				     "%s/%s is a symbolic link: refused (the lock file is to be a "
				     "plain file of this server's user)",
				     base, file);
	if (lfd < 0)
		return sbx_error_set(err, -errno, "open %s/%s: %s", base, file, strerror(errno));
	if (file_ours(lfd) < 0) {
		close(lfd);
		return sbx_error_set(fatal, -EPERM,
				     "%s/%s is not a plain file of this server's user: refused",
				     base, file);
	}
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		if (e != EWOULDBLOCK) {
			close(lfd);
			return sbx_error_set(err, -e, "lock %s/%s: %s", base, file, strerror(e));
		}
		n = pread(lfd, pid, sizeof(pid) - 1, 0);
		close(lfd);
		pid[n > 0 ? n : 0] = '\0';
		pid[strspn(pid, "0123456789")] = '\0';
		return sbx_error_set(
		    fatal, -EBUSY,
		    "another mcp-sandbox server%s%s%s already serves server.instance \"%s\" with "
		    "the state folder %s: two servers on one instance would adopt, expire and "
		    "remove each other's sandboxes. Stop that one, or give this one its own "
		    "server.instance or server.state_dir",
		    *pid ? " (pid " : "", pid, *pid ? ")" : "", instance, base);
	}
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(lfd, 0) == 0)
		n = pwrite(lfd, pid, strlen(pid), 0); /* for the message above only */
	*ret_fd = lfd;
	return 0;
}

/* Finds the state folder: server.state_dir (created when missing; any
 * failure is an error), else $STATE_DIRECTORY (its first entry), else
 * /var/lib/mcp-sandbox when it exists (any failure: no state folder). With
 * a state folder, derives the instance left at its default and takes the
 * instance's lock (another server holding it is always an error). Always
 * an error too (-EPERM), since another local user could plant the files
 * that say what to adopt and remove: a state folder or an instance folder
 * that is not ours or that its group or others may write to, and a lock
 * file that is not a plain file of ours (never followed, never truncated). */
static int state_open(sbx_manager *m, struct sbx_pool *p, const struct sbx_settings *s,
		      struct sbx_error *err)
{
	const char *conf = s->server.state_dir, *env = getenv("STATE_DIRECTORY");
	_cleanup_free_ char *base = NULL, *sub = NULL, *name = NULL;
	struct sbx_error ignore = SBX_ERROR_INIT, *fatal = err;
	struct stat st;
	bool explicit = conf && *conf;
	int top, fd, lfd = -1, r;

	if (explicit)
		base = strdup(conf);
	else if (env && *env)
		base = strndup(env, strcspn(env, ":"));
	else if (stat(STATE_DIR_DEFAULT, &st) == 0 && S_ISDIR(st.st_mode))
		base = strdup(STATE_DIR_DEFAULT);
	else
		return 0;
	if (!base)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (!explicit)
		err = &ignore;
	if (explicit && mkdir(base, 0700) < 0 && errno != EEXIST)
		return sbx_error_set(err, -errno, "state folder (server.state_dir) %s: %s", base,
				     strerror(errno));
	top = open_dir(AT_FDCWD, base, false, err);
	if (top >= 0 && !explicit && faccessat(top, ".", W_OK, AT_EACCESS) < 0) {
		/* A folder we did not ask for: only if we may write to it. */
		close(top);
		return 0;
	}
	if (top < 0) {
		sbx_error_prefix(err, "state folder (server.state_dir)");
		return explicit ? err->code : 0;
	}
	/* Refused even when it was not asked for: the operator is to fix it. */
	if (fstat(top, &st) < 0)
		r = sbx_error_set(fatal, -errno, "state folder %s: %s", base, strerror(errno));
	else
		r = dir_safe(&st, "the state folder", base, fatal);
	if (r < 0) {
		close(top);
		return r;
	}
	r = strcmp(s->server.instance, INSTANCE_DEFAULT) == 0
		? instance_derive(top, base, &name, err)
		: ((name = strdup(s->server.instance)) ? 0 : -ENOMEM);
	if (r >= 0 && asprintf(&sub, "instance-%s", name) < 0) {
		sub = NULL;
		r = sbx_error_set(err, -ENOMEM, "out of memory");
	}
	if (r >= 0) {
		r = instance_lock(top, base, name, &lfd, fatal, err);
		/* Held or refused: in FATAL, naming the folder already. */
		if (r < 0 && r != -EBUSY && r != -EPERM)
			sbx_error_prefix(err, "state folder %s", base);
	} else {
		sbx_error_prefix(err, "state folder %s", base);
	}
	if (r < 0) {
		close(top);
		/* Without an explicit folder, what went to FATAL (ignore still
		 * unset) stops the server too. */
		return explicit || r == -ENOMEM || ignore.code == 0 ? r : 0;
	}
	/* An instance folder that others may write to may hold their files. */
	if (fstatat(top, sub, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    dir_safe(&st, "the instance folder", sub, fatal) < 0) {
		sbx_error_prefix(fatal, "state folder %s", base);
		close(top);
		close(lfd);
		return fatal->code;
	}
	fd = open_dir(top, sub, true, err);
	close(top);
	if (fd < 0) {
		close(lfd);
		sbx_error_prefix(err, "state folder %s", base);
		return explicit ? fd : 0;
	}
	if (asprintf(&p->state_path, "%s/%s", base, sub) < 0) {
		p->state_path = NULL;
		close(fd);
		close(lfd);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	p->state_fd = fd;
	p->lock_fd = lfd;
	free(m->instance);
	m->instance = SBX_TAKE(name);
	return 0;
}

static int state_write(struct sbx_pool *p, const sbx_sandbox *sb, struct sbx_error *err)
{
	char tmp[SBX_SANDBOX_ID_MAX + 8];
	json_object *j = json_object_new_object();
	const char *text;
	int fd, r;

	if (!j)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(j, "id", json_object_new_string(sb->id));
	json_object_object_add(j, "container", json_object_new_string(sb->container));
	json_object_object_add(j, "owner", json_object_new_string(sb->owner));
	json_object_object_add(j, "name", json_object_new_string(sb->name));
	json_object_object_add(j, "assigned", json_object_new_int64((int64_t)sb->created));
	text = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
	if (!text || strlen(text) >= STATE_FILE_MAX) {
		json_object_put(j);
		return sbx_error_set(err, -ENOMEM, "state of sandbox %s: out of memory", sb->id);
	}
	snprintf(tmp, sizeof(tmp), ".%s.tmp", sb->id);
	fd = openat(p->state_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		json_object_put(j);
		return sbx_error_set(err, r, "write %s/%s: %s", p->state_path, tmp, strerror(-r));
	}
	r = write_all(fd, text, strlen(text));
	json_object_put(j);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(p->state_fd, tmp, p->state_fd, sb->id) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(p->state_fd, tmp, 0);
		return sbx_error_set(err, r, "write %s/%s: %s", p->state_path, sb->id,
				     strerror(-r));
	}
	return 0;
}

/* Reads the assignment of ID: 1 when there is a valid one, 0 when there is
 * none (-ENOENT in *ret_why) or it cannot be trusted, < 0 when the file
 * cannot be read. */
static int state_read(struct sbx_pool *p, const char *id, const char *container, char **ret_owner,
		      char **ret_name, time_t *ret_assigned, struct sbx_error *err)
{
	char buf[STATE_FILE_MAX + 1];
	json_object *j, *v;
	const char *owner, *name, *fid, *fcont;
	size_t len = 0;
	int fd, r = 0;

	fd = openat(p->state_fd, id, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd < 0)
		return sbx_error_set(err, -errno, "read %s/%s: %s", p->state_path, id,
				     strerror(errno));
	while (len < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			r = -errno;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (r < 0)
		return sbx_error_set(err, r, "read %s/%s: %s", p->state_path, id, strerror(-r));
	buf[len] = '\0';
	j = json_tokener_parse(buf);
	if (!j || !json_object_is_type(j, json_type_object)) {
		json_object_put(j);
		return 0;
	}
	fid = json_object_object_get_ex(j, "id", &v) ? json_object_get_string(v) : NULL;
	fcont = json_object_object_get_ex(j, "container", &v) ? json_object_get_string(v) : NULL;
	owner =
	    json_object_object_get_ex(j, "owner", &v) && json_object_is_type(v, json_type_string)
		? json_object_get_string(v)
		: NULL;
	name = json_object_object_get_ex(j, "name", &v) && json_object_is_type(v, json_type_string)
		   ? json_object_get_string(v)
		   : NULL;
	if (json_object_object_get_ex(j, "assigned", &v) && json_object_is_type(v, json_type_int))
		*ret_assigned = (time_t)json_object_get_int64(v);
	r = 0;
	if (fid && strcmp(fid, id) == 0 && fcont && strcmp(fcont, container) == 0 && owner &&
	    name) {
		*ret_owner = strdup(owner);
		*ret_name = strdup(name);
		r = *ret_owner && *ret_name ? 1 : -ENOMEM;
		if (r < 0) {
			free(*ret_owner), *ret_owner = NULL;
			free(*ret_name), *ret_name = NULL;
			sbx_error_set(err, r, "out of memory");
		}
	}
	json_object_put(j);
	return r;
}

/* ---- the pool ---- */

struct sbx_pool_entry *sbx_pool_entry_free(struct sbx_pool_entry *e)
{
	if (e) {
		sbx_interp_free(e->interp);
		free(e->container);
		free(e);
	}
	return NULL;
}

/* Under m->lock: E may be handed out. While the engine's events are
 * followed, only a container seen running in the current epoch; when they
 * are not (the engine is unreachable, or following broke), none. */
static bool trusted_locked(sbx_manager *m, const struct sbx_pool_entry *e)
{
	return !m->watching || (m->engine_followed && e->epoch == m->engine_epoch);
}

/* Under m->lock: some pooled container waits for a check. */
static bool stale_locked(sbx_manager *m)
{
	for (const struct sbx_pool_entry *e = m->pool->head; e; e = e->next)
		if (!trusted_locked(m, e))
			return true;
	return false;
}

/* The containers the pool aims to keep now. */
static size_t target(const struct sbx_pool *p)
{
	return p->size + p->grown < p->max ? p->size + p->grown : p->max;
}

/* Under m->lock: more pooled containers than the pool may keep now. */
static bool excess_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	size_t max = (size_t)m->s->sandbox.max_sandboxes;

	return p->n_ready > 0 && (p->stopping || p->n_ready > target(p) || m->n + p->n_ready > max);
}

/* Under m->lock: the pool may start one more container now. */
static bool wants_one_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	size_t have = p->n_ready + p->n_filling;

	return p->started && !p->stopping && have < target(p) && p->n_filling < p->fill &&
	       p->cold_making == 0 && m->n + have < (size_t)m->s->sandbox.max_sandboxes;
}

/* Under m->lock: E's container is to be removed later. */
static void doom_locked(sbx_manager *m, struct sbx_pool_entry *e)
{
	struct sbx_pool *p = m->pool;

	sbx_interp_free(e->interp);
	e->interp = NULL;
	e->next = p->doomed;
	p->doomed = e;
	pthread_cond_signal(&p->wake);
}

/* Removes E's container (unless GONE already) and frees E; a removal that
 * fails is tried again later. Without m->lock. True when it is done. */
static bool discard(sbx_manager *m, struct sbx_pool_entry *e, bool gone)
{
	int r = gone ? 0 : sbx_container_remove(m->engine, e->container, NULL);

	if (r < 0 && r != -ENOENT) {
		pthread_mutex_lock(&m->lock);
		doom_locked(m, e);
		pthread_mutex_unlock(&m->lock);
		return false;
	}
	sbx_pool_entry_free(e);
	return true;
}

void sbx_pool_discard(sbx_manager *m, struct sbx_pool_entry *e, bool gone)
{
	discard(m, e, gone);
}

/* Under m->lock, dropped around the engine calls: tries the doomed
 * containers again; on a failure backs off (0.5 s doubling to 30 s). */
static void retry_doomed_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *list = p->doomed;
	bool failed = false;
	long ms = BACKOFF_MIN_MS;

	p->doomed = NULL;
	pthread_mutex_unlock(&m->lock);
	while (list) {
		struct sbx_pool_entry *next = list->next;
		failed |= !discard(m, list, false);
		list = next;
	}
	pthread_mutex_lock(&m->lock);
	p->doomed_failures = failed ? p->doomed_failures + 1 : 0;
	for (unsigned i = 1; i < p->doomed_failures && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	clock_gettime(CLOCK_MONOTONIC, &p->doomed_at);
	ts_add_ms(&p->doomed_at, ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS);
}

/* Under m->lock, dropped around the engine call. */
static void drop_oldest_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e = p->head;

	p->head = e->next;
	p->n_ready--;
	pthread_mutex_unlock(&m->lock);
	discard(m, e, false);
	pthread_mutex_lock(&m->lock);
}

static void push_locked(struct sbx_pool *p, struct sbx_pool_entry *e)
{
	struct sbx_pool_entry **at = &p->head;

	while (*at)
		at = &(*at)->next;
	e->next = NULL;
	e->pushed = ++p->pushes;
	*at = e;
	p->n_ready++;
}

/* Under m->lock: a start failed; the next waits 0.5 s, doubling up to 30 s
 * while they fail in a row. */
static void back_off_locked(struct sbx_pool *p, int r)
{
	struct timespec now;
	long ms = BACKOFF_MIN_MS;

	for (unsigned i = 0; i < p->failures_in_row && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	p->last_error = r;
	p->failed++;
	p->failures_in_row++;
	clock_gettime(CLOCK_MONOTONIC, &now);
	p->retry_at = now;
	ts_add_ms(&p->retry_at, ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS);
}

struct filler {
	sbx_manager *m;
	struct sbx_pool_entry *e;
	size_t slot; /* its id's place in p->filling */
};

/* A filler thread: makes F's entry without the lock, then pushes it (or
 * backs off), frees its slot and wakes the refill thread and a stop. */
static void *fill_main(void *arg)
{
	struct filler *f = arg;
	sbx_manager *m = f->m;
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e = f->e;
	struct sbx_error err = SBX_ERROR_INIT;
	int r;

	r = sbx_container_provision(m, e->id, time(NULL), NULL, NULL, m->s->sandbox.memory,
				    m->s->sandbox.nano_cpus, &e->container, &err);
	/* Without an interpreter the entry still serves: the first call
	 * starts one, as for a cold create. */
	if (r >= 0 && sbx_interp_start_pooled(m, e->id, e->container, &e->interp, NULL) < 0)
		e->interp = NULL;
	pthread_mutex_lock(&m->lock);
	p->filling[f->slot][0] = '\0';
	p->n_filling--;
	if (r < 0) {
		back_off_locked(p, r);
		sbx_pool_entry_free(e);
	} else {
		p->last_error = 0;
		p->failures_in_row = 0;
		p->made++;
		if (e->epoch != m->engine_epoch)
			p->checked_epoch = 0; /* made across a change: check it */
		push_locked(p, e); /* excess_locked() trims it if the room went meanwhile */
	}
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&m->lock);
	free(f);
	return NULL;
}

/* Under m->lock: reserves a slot and an id and starts a filler thread
 * (detached: sbx_pool_stop waits for n_filling to reach 0). */
static void start_filler_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_error err = SBX_ERROR_INIT;
	struct filler *f = calloc(1, sizeof(*f));
	struct sbx_pool_entry *e = calloc(1, sizeof(*e));
	pthread_attr_t attr;
	pthread_t t;
	size_t slot = 0;
	int r = f && e ? sbx_sandbox_make_id(e->id, &err) : -ENOMEM;

	while (slot < FILL_MAX && p->filling[slot][0])
		slot++;
	if (r >= 0 && slot == FILL_MAX)
		r = -EAGAIN; /* not reached: n_filling < fill <= FILL_MAX */
	if (r >= 0) {
		*f = (struct filler){m, e, slot};
		e->epoch = m->engine_epoch;
		r = -pthread_attr_init(&attr);
	}
	if (r >= 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		r = -pthread_create(&t, &attr, fill_main, f);
		pthread_attr_destroy(&attr);
	}
	if (r < 0) {
		back_off_locked(p, r);
		sbx_pool_entry_free(e);
		free(f);
		return;
	}
	snprintf(p->filling[slot], sizeof(p->filling[slot]), "%s", e->id);
	p->n_filling++;
}

/* Under m->lock, dropped around the engine calls: drops pooled containers
 * that no longer run. Entries pushed before the list was asked for (give-
 * backs were in it before too) and missing from it are really gone; those a
 * filler pushed since are left for the next check. */
static void check_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, m->instance}, {SBX_LABEL_POOL, "1"}};
	struct sbx_container_summary *cs = NULL;
	struct sbx_pool_entry *dead = NULL, **at;
	uint64_t epoch = m->engine_epoch, pushes = p->pushes;
	size_t n = 0;
	int r;

	pthread_mutex_unlock(&m->lock);
	r = sbx_container_list(m->engine, want, SBX_ARRAY_SIZE(want), &cs, &n, NULL);
	pthread_mutex_lock(&m->lock);
	clock_gettime(CLOCK_MONOTONIC, &p->check_at);
	p->check_at.tv_sec += CHECK_EVERY_S;
	p->checked_epoch = epoch;
	if (r < 0)
		return;
	for (at = &p->head; *at;) {
		struct sbx_pool_entry *e = *at;
		const struct sbx_container_summary *c = sbx_summary_find(cs, n, e->container);
		if (e->pushed > pushes) {
			if (e->epoch < epoch)
				p->checked_epoch = 0; /* made across a change: check again */
			at = &e->next;
			continue;
		}
		if (c && c->running) {
			/* Seen running after this epoch began: it may be handed out. */
			if (e->epoch < epoch)
				e->epoch = epoch;
			at = &e->next;
			continue;
		}
		*at = e->next;
		p->n_ready--;
		p->died++;
		e->next = dead;
		dead = e;
	}
	sbx_container_list_free(cs, n);
	pthread_mutex_unlock(&m->lock);
	while (dead) {
		struct sbx_pool_entry *next = dead->next;
		discard(m, dead, false);
		dead = next;
	}
	pthread_mutex_lock(&m->lock);
}

static void *refill_main(void *arg)
{
	sbx_manager *m = arg;
	struct sbx_pool *p = m->pool;
	struct timespec now;

	pthread_mutex_lock(&m->lock);
	while (!p->stopping) {
		const struct timespec *until = NULL;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (p->grown > 0 && ts_reached(&now, &p->shrink_at))
			p->grown = 0; /* no miss for pool_shrink_after */
		if (excess_locked(m)) {
			drop_oldest_locked(m);
			continue;
		}
		if (p->doomed) {
			if (ts_reached(&now, &p->doomed_at)) {
				retry_doomed_locked(m);
				continue;
			}
			until = &p->doomed_at;
		}
		if (wants_one_locked(m)) {
			if (ts_reached(&now, &p->retry_at)) {
				start_filler_locked(m);
				continue;
			}
			if (!until || !ts_reached(&p->retry_at, until))
				until = &p->retry_at;
		}
		if (p->grown > 0 && (!until || !ts_reached(&p->shrink_at, until)))
			until = &p->shrink_at;
		if (p->n_ready > 0) {
			/* Following the engine (re)started: check before handing out. */
			if (ts_reached(&now, &p->check_at) ||
			    (m->engine_followed && p->checked_epoch != m->engine_epoch &&
			     stale_locked(m))) {
				check_locked(m);
				continue;
			}
			if (!until || !ts_reached(&p->check_at, until))
				until = &p->check_at;
		}
		if (until)
			pthread_cond_timedwait(&p->wake, &m->lock, until);
		else
			pthread_cond_wait(&p->wake, &m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int sbx_pool_new(sbx_manager *m, struct sbx_error *err)
{
	struct sbx_pool *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	p->state_fd = -1;
	p->lock_fd = -1;
	sbx_cond_init_monotonic(&p->wake);
	m->pool = p;
	m->instance = strdup(m->s->server.instance);
	if (!m->instance) {
		sbx_pool_free(m);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	r = state_open(m, p, m->s, err);
	if (r < 0) {
		sbx_pool_free(m);
		return r;
	}
	/* Without a state folder a pooled sandbox could not be adopted after a
	 * restart: then the pool only serves servers that remove their
	 * sandboxes on exit. */
	p->size = (size_t)m->s->sandbox.pool_size;
	if (p->state_fd < 0 && !m->s->sandbox.remove_on_exit)
		p->size = 0;
	p->max =
	    (size_t)m->s->sandbox.pool_max > p->size ? (size_t)m->s->sandbox.pool_max : p->size;
	p->fill = (size_t)m->s->sandbox.pool_fill;
	if (p->fill < 1 || p->fill > FILL_MAX)
		p->fill = p->fill < 1 ? 1 : FILL_MAX;
	if (p->size == 0)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &p->check_at);
	p->check_at.tv_sec += CHECK_EVERY_S;
	r = -pthread_create(&p->thread, NULL, refill_main, m);
	if (r < 0) {
		sbx_pool_free(m);
		return sbx_error_set(err, r, "start the pool thread: %s", strerror(-r));
	}
	p->have_thread = true;
	return 0;
}

/* sbx_containers_remove's view of the pool's entries, at its stop. */
static const char *entry_container(void *ctx, size_t i)
{
	return ((struct sbx_pool_entry **)ctx)[i]->container;
}

void sbx_pool_stop(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry *e, **all;
	size_t n = 0, i = 0;
	bool one_by_one;

	pthread_mutex_lock(&m->lock);
	p->stopping = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
	if (p->have_thread)
		pthread_join(p->thread, NULL);
	p->have_thread = false;
	/* The fillers push what they made (or fail) and end. */
	pthread_mutex_lock(&m->lock);
	while (p->n_filling > 0)
		pthread_cond_wait(&p->wake, &m->lock);
	pthread_mutex_unlock(&m->lock);
	/* The threads are gone and nobody else adds to the pool now (the watch
	 * stopped before). A container whose removal fails now is left to the
	 * next start's recover, which removes pooled containers never assigned. */
	for (e = p->head; e; e = e->next)
		n++;
	for (e = p->doomed; e; e = e->next)
		n++;
	all = calloc(n ? n : 1, sizeof(*all));
	for (e = p->head; all && e; e = e->next)
		all[i++] = e;
	for (e = p->doomed; all && e; e = e->next)
		all[i++] = e;
	one_by_one = !all; /* else they all go here */
	if (all)
		sbx_containers_remove(m->engine, n, entry_container, NULL, all);
	free(all);
	while ((e = p->head)) {
		p->head = e->next;
		p->n_ready--;
		if (one_by_one)
			sbx_container_remove(m->engine, e->container, NULL);
		sbx_pool_entry_free(e);
	}
	while ((e = p->doomed)) {
		p->doomed = e->next;
		if (one_by_one)
			sbx_container_remove(m->engine, e->container, NULL);
		sbx_pool_entry_free(e);
	}
}

void sbx_pool_free(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;

	if (!p)
		return;
	if (p->have_thread)
		sbx_pool_stop(m);
	while (p->head) {
		struct sbx_pool_entry *e = p->head;
		p->head = e->next;
		sbx_pool_entry_free(e);
	}
	while (p->doomed) {
		struct sbx_pool_entry *e = p->doomed;
		p->doomed = e->next;
		sbx_pool_entry_free(e);
	}
	if (p->state_fd >= 0)
		close(p->state_fd);
	if (p->lock_fd >= 0)
		close(p->lock_fd); /* the instance is free for another server */
	free(p->state_path);
	free(p->seen);
	pthread_cond_destroy(&p->wake);
	free(p);
	m->pool = NULL;
}

struct sbx_pool_entry *sbx_pool_take_locked(sbx_manager *m, bool *missed)
{
	struct sbx_pool *p = m->pool;
	struct sbx_pool_entry **at = &p->head, *e;

	while (*at && !trusted_locked(m, *at))
		at = &(*at)->next;
	e = *at;
	*missed = !e && p->size > 0 && !p->stopping;
	if (*missed) {
		if (p->size + p->grown < p->max)
			p->grown++;
		clock_gettime(CLOCK_MONOTONIC, &p->shrink_at);
		ts_add_ms(&p->shrink_at, (long)m->s->sandbox.pool_shrink_after_ms);
		p->cold_making++;
	}
	if (!e)
		return NULL;
	*at = e->next;
	p->n_ready--;
	e->next = NULL;
	return e;
}

struct sbx_pool_entry *sbx_pool_unlink_locked(sbx_manager *m, const char *container)
{
	struct sbx_pool *p = m->pool;

	for (struct sbx_pool_entry **at = &p->head; *at; at = &(*at)->next) {
		struct sbx_pool_entry *e = *at;
		if (strcmp(e->container, container) != 0)
			continue;
		*at = e->next;
		p->n_ready--;
		p->died++;
		e->next = NULL;
		pthread_cond_signal(&p->wake);
		return e;
	}
	return NULL;
}

void sbx_pool_recheck_locked(sbx_manager *m)
{
	pthread_cond_signal(&m->pool->wake);
}

void sbx_pool_give_back_locked(sbx_manager *m, struct sbx_pool_entry *e)
{
	struct sbx_pool *p = m->pool;

	e->next = p->head;
	p->head = e;
	p->n_ready++;
	pthread_cond_signal(&p->wake);
}

void sbx_pool_missed_done_locked(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;

	if (p->cold_making > 0)
		p->cold_making--;
	pthread_cond_signal(&p->wake);
}

void sbx_pool_created_locked(sbx_manager *m, bool from_pool)
{
	struct sbx_pool *p = m->pool;

	if (from_pool) {
		p->taken++;
	} else {
		p->cold++;
		p->started = true; /* the engine can run a sandbox */
	}
	pthread_cond_signal(&p->wake);
}

int sbx_pool_assign(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err)
{
	if (m->pool->state_fd < 0)
		return 0;
	return state_write(m->pool, sb, err);
}

void sbx_pool_forget(sbx_manager *m, sbx_sandbox *sb)
{
	struct sbx_pool *p = m->pool;

	if (sb->pooled && p->state_fd >= 0)
		unlinkat(p->state_fd, sb->id, 0);
	pthread_mutex_lock(&m->lock);
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
}

/* Under m->lock: the id is one of this manager's, pooled, being made, or a
 * record (maybe still being assigned). */
static bool own_id_locked(sbx_manager *m, const char *id)
{
	struct sbx_pool *p = m->pool;

	for (size_t i = 0; i < FILL_MAX; i++)
		if (strcmp(p->filling[i], id) == 0)
			return true;
	for (struct sbx_pool_entry *e = p->head; e; e = e->next)
		if (strcmp(e->id, id) == 0)
			return true;
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->table[i]->id, id) == 0)
			return true;
	return false;
}

static int remember_locked(struct sbx_pool *p, const char *id)
{
	void *seen = reallocarray(p->seen, p->n_seen + 1, sizeof(*p->seen));

	if (!seen)
		return -ENOMEM;
	p->seen = seen;
	snprintf(p->seen[p->n_seen++], sizeof(*p->seen), "%s", id);
	return 0;
}

int sbx_pool_recover_one(sbx_manager *m, const char *id, const char *container, char **ret_owner,
			 char **ret_name, time_t *ret_assigned, struct sbx_error *err)
{
	struct sbx_pool *p = m->pool;
	char *owner = NULL, *name = NULL;
	time_t assigned = 0;
	bool own;
	int r;

	if (!id_valid(id))
		return 0;
	pthread_mutex_lock(&m->lock);
	own = own_id_locked(m, id);
	pthread_mutex_unlock(&m->lock);
	if (own)
		return 0;
	if (p->state_fd < 0) {
		/* Unknowable. Gone with the server anyway when remove_on_exit. */
		if (m->s->sandbox.remove_on_exit)
			sbx_container_remove(m->engine, container, NULL);
		return 0;
	}
	r = state_read(p, id, container, &owner, &name, &assigned, err);
	if (r == -ENOENT) {
		/* Never assigned: nobody's, and maybe from an older image. */
		r = sbx_container_remove(m->engine, container, err);
		return r == -ENOENT ? 0 : r < 0 ? r : 0;
	}
	if (r <= 0) {
		/* Unreadable or untrusted: leave container and file alone. */
		pthread_mutex_lock(&m->lock);
		if (remember_locked(p, id) < 0 && r == 0)
			r = sbx_error_set(err, -ENOMEM, "out of memory");
		pthread_mutex_unlock(&m->lock);
		return r;
	}
	*ret_owner = owner;
	*ret_name = name;
	*ret_assigned = assigned;
	return 1;
}

void sbx_pool_recover_done(sbx_manager *m)
{
	struct sbx_pool *p = m->pool;
	struct dirent *de;
	DIR *d = NULL;
	int fd;

	if (p->state_fd >= 0) {
		fd = openat(p->state_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d && fd >= 0)
			close(fd);
	}
	while (d && (de = readdir(d))) {
		char id[SBX_SANDBOX_ID_MAX + 1];
		const char *n = de->d_name;
		size_t len = strlen(n);
		bool keep = false;

		if (n[0] == '.' && len > 5 && strcmp(n + len - 4, ".tmp") == 0 &&
		    len - 5 <= SBX_SANDBOX_ID_MAX) {
			memcpy(id, n + 1, len - 5);
			id[len - 5] = '\0';
		} else if (len <= SBX_SANDBOX_ID_MAX) {
			memcpy(id, n, len + 1);
		} else {
			continue;
		}
		if (!id_valid(id))
			continue;
		pthread_mutex_lock(&m->lock);
		keep = own_id_locked(m, id);
		for (size_t i = 0; i < p->n_seen && !keep; i++)
			keep = strcmp(p->seen[i], id) == 0;
		pthread_mutex_unlock(&m->lock);
		if (!keep)
			unlinkat(p->state_fd, n, 0);
	}
	if (d)
		closedir(d);
	pthread_mutex_lock(&m->lock);
	free(p->seen);
	p->seen = NULL;
	p->n_seen = 0;
	p->started = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&m->lock);
}

/* Under m->lock: the pooled containers that may be handed out now. */
static size_t trusted_count_locked(sbx_manager *m)
{
	size_t n = 0;

	for (const struct sbx_pool_entry *e = m->pool->head; e; e = e->next)
		n += trusted_locked(m, e);
	return n;
}

void sbx_manager_pool_stats(sbx_manager *m, struct sbx_pool_stats *ret_stats)
{
	struct sbx_pool *p = m->pool;

	pthread_mutex_lock(&m->lock);
	*ret_stats = (struct sbx_pool_stats){
	    .size = target(p),
	    .floor = p->size,
	    .max = p->max,
	    .ready = trusted_count_locked(m),
	    .filling = p->n_filling,
	    .filling_on = p->started && p->size > 0,
	    .taken = p->taken,
	    .cold = p->cold,
	    .made = p->made,
	    .failures = p->failed,
	    .last_error = p->last_error,
	    .died = p->died,
	    .followed = m->engine_followed,
	};
	pthread_mutex_unlock(&m->lock);
}

const char *sbx_manager_state_dir(const sbx_manager *m)
{
	return m->pool->state_path;
}

const char *sbx_manager_instance(const sbx_manager *m)
{
	return m->instance;
}
