/* SPDX-License-Identifier: MIT */
/*
 * The state folder of an instance (sandbox-internal.h says what each call
 * does).
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
 * Its files: STATE_DIR/instance-INSTANCE/ID, one file per pooled sandbox
 * once it is assigned: {"id", "container", "owner", "name", "assigned"},
 * 0600, written to .ID.tmp and renamed (no fsync: after a power loss an
 * empty or missing file makes recover leave the container alone or remove
 * it; a server crash loses nothing). Files are opened by the instance
 * folder's descriptor, never followed through links, read up to
 * STATE_FILE_MAX bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

#define STATE_DIR_DEFAULT "/var/lib/mcp-sandbox"
#define STATE_FILE_MAX 4096
#define INSTANCE_DEFAULT "default" /* server.instance's default (src/base/settings.c) */
#define INSTANCE_FILE "default-instance"

bool sbx_state_id_valid(const char *id)
{
	size_t n = strlen(id);
	return n >= 1 && n <= SBX_SANDBOX_ID_MAX && strspn(id, "0123456789abcdef") == n;
}

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
int sbx_state_dir_open(struct sbx_state_dir *d, const struct sbx_settings *s, char **instance,
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
	if (asprintf(&d->path, "%s/%s", base, sub) < 0) {
		d->path = NULL;
		close(fd);
		close(lfd);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	d->fd = fd;
	d->lock_fd = lfd;
	free(*instance);
	*instance = SBX_TAKE(name);
	return 0;
}

int sbx_state_write(const struct sbx_state_dir *d, const sbx_sandbox *sb, struct sbx_error *err)
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
	fd = openat(d->fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		json_object_put(j);
		return sbx_error_set(err, r, "write %s/%s: %s", d->path, tmp, strerror(-r));
	}
	r = write_all(fd, text, strlen(text));
	json_object_put(j);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(d->fd, tmp, d->fd, sb->id) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(d->fd, tmp, 0);
		return sbx_error_set(err, r, "write %s/%s: %s", d->path, sb->id, strerror(-r));
	}
	return 0;
}

int sbx_state_read(const struct sbx_state_dir *d, const char *id, const char *container,
		   char **ret_owner, char **ret_name, time_t *ret_assigned, struct sbx_error *err)
{
	char buf[STATE_FILE_MAX + 1];
	json_object *j, *v;
	const char *owner, *name, *fid, *fcont;
	size_t len = 0;
	int fd, r = 0;

	fd = openat(d->fd, id, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd < 0)
		return sbx_error_set(err, -errno, "read %s/%s: %s", d->path, id, strerror(errno));
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
		return sbx_error_set(err, r, "read %s/%s: %s", d->path, id, strerror(-r));
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

void sbx_state_dir_close(struct sbx_state_dir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	if (d->lock_fd >= 0)
		close(d->lock_fd); /* the instance is free for another server */
	free(d->path);
	*d = (struct sbx_state_dir)SBX_STATE_DIR_INIT;
}
