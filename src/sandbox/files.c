/* SPDX-License-Identifier: MIT */
/*
 * Files in and out of a sandbox: uploads from the host's upload folder, and
 * artifacts (regular files under SBX_RESULTS_DIR) listed and read back as bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/tar.h"

/* Go os.FileMode type bits other than dir and symlink: named pipe, socket,
 * device, char device, irregular. */
#define GO_MODE_NOT_REGULAR ((1u << 25) | (1u << 24) | (1u << 26) | (1u << 21) | (1u << 19))

/* True when PATH (absolute, resolved) is ROOT or below it. */
static bool path_inside(const char *root, const char *path)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return path[0] == '/';
	return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* True when PATH has a ".." component. */
static bool has_dotdot(const char *path)
{
	for (const char *p = path; (p = strstr(p, "..")); p += 2)
		if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return true;
	return false;
}

/* Opens the host file LOCAL for an upload: relative paths are relative to
 * the upload folder; the resolved path must be a regular file inside it. */
static int open_upload(const struct sbx_settings *s, const char *local, int *ret_fd,
		       char **ret_name, struct stat *ret_st, struct sbx_error *err)
{
	_cleanup_free_ char *root = NULL, *joined = NULL, *real = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;
	const char *base;

	if (!s->sandbox.upload_dir[0])
		return sbx_error_set(err, -EPERM,
				     "uploads are disabled on this server "
				     "(no [sandbox] upload_dir is set)");
	if (!local || !*local || strlen(local) >= SBX_PATH_MAX)
		return sbx_error_set(err, -EINVAL, "give the path of a file in the upload folder");
	root = realpath(s->sandbox.upload_dir, NULL);
	if (!root)
		return sbx_error_set(err, -EIO, "the upload folder %s is not usable: %s",
				     s->sandbox.upload_dir, strerror(errno));
	if (local[0] == '/')
		joined = strdup(local);
	else if (asprintf(&joined, "%s/%s", root, local) < 0)
		joined = NULL;
	if (!joined)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	real = realpath(joined, NULL);
	if (!real) {
		int e = errno;
		/* Say "missing" only for what would be inside; else do not tell. */
		if ((e == ENOENT || e == ENOTDIR) && path_inside(root, joined) &&
		    !has_dotdot(joined))
			return sbx_error_set(err, -ENOENT, "no file %s in the upload folder %s",
					     local, root);
		return sbx_error_set(err, -EPERM,
				     "%s is not a file inside the upload folder %s; only files "
				     "there can be uploaded",
				     local, root);
	}
	if (!path_inside(root, real) || strcmp(root, real) == 0)
		return sbx_error_set(err, -EPERM,
				     "%s is outside the upload folder %s; only files there can be "
				     "uploaded",
				     local, root);
	/* The check is on the resolved path; open it without following a link
	 * swapped in since, and check what was opened. */
	fd = open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return sbx_error_set(err, errno == ELOOP ? -EPERM : -errno, "cannot open %s: %s",
				     local, strerror(errno));
	if (fstat(fd, &st) < 0)
		return sbx_error_set(err, -errno, "cannot stat %s: %s", local, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return sbx_error_set(err, -EPERM, "%s is not a regular file", local);
	if (st.st_size > s->sandbox.max_upload)
		return sbx_error_set(err, -EFBIG,
				     "%s is %lld bytes, over the upload limit of %lld bytes", local,
				     (long long)st.st_size, (long long)s->sandbox.max_upload);
	base = strrchr(real, '/');
	*ret_name = strdup(base ? base + 1 : real);
	if (!*ret_name)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	*ret_st = st;
	*ret_fd = fd;
	fd = -1;
	return 0;
}

/*
 * Files move through an exec run as the sandbox's own user, never through the
 * engine's archive API, which acts as root and follows symbolic links in
 * parent folders: whatever code in the sandbox does to the path (a link, a
 * swap between our check and our act), uid 1000 can reach no more than it
 * could itself. The file's bytes stream through the exec's stdin or stdout;
 * its path is an argv element (no escaping for any engine).
 */
#define FILE_USER SBX_SANDBOX_USER
/* What file_exec returns when it stopped reading (out_max, the sink). */
#define FILE_STOPPED 256
/* Bytes of the exec's stderr kept for an error message. */
#define FILE_ERR_MAX 1024

struct file_exec {
	sbx_sink_fn sink; /* stdout goes here (NULL: into out) */
	void *userdata;
	int64_t out_max; /* stdout bytes passed on; more ends the stream */
	int64_t out_len;
	struct sbx_buf out; /* stdout when no sink (at most FILE_ERR_MAX) */
	struct sbx_buf err; /* stderr (at most FILE_ERR_MAX) */
	int sink_error;
	bool over;	     /* stdout went past out_max */
	bool no_exit;	     /* at the end of the stream, do not wait for the exit code: 0 */
	int64_t deadline_ms; /* sbx_monotonic_ms time the stream must have ended by; 0: none */
	const struct sbx_cancel *cancel; /* or NULL */
};

static void keep_bounded(struct sbx_buf *b, const char *p, size_t n)
{
	if (b->len < FILE_ERR_MAX)
		sbx_buf_append(b, p, n < FILE_ERR_MAX - b->len ? n : FILE_ERR_MAX - b->len);
}

/* The exit code of an ended exec stream (the engine may take a moment). */
static int stream_exit(sbx_stream *s)
{
	for (int i = 0; i < 100; i++) {
		int code = sbx_stream_exit_code(s, NULL);
		if (code >= 0)
			return code;
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
	}
	return -1;
}

/* Runs ARGV as the sandbox user in SBX_RESULTS_DIR with stdin from IN_FD (or
 * none, -1), at most IN_MAX bytes of it, stdout to fx. Returns the exit code,
 * FILE_STOPPED when it stopped reading (fx->over, fx->sink_error), or a
 * negative error. */
static int file_exec(sbx_manager *m, sbx_sandbox *sb, const char *const *argv, int in_fd,
		     int64_t in_max, struct file_exec *fx, struct sbx_error *err)
{
	struct sbx_exec_spec spec = {.argv = argv, .workdir = SBX_RESULTS_DIR, .user = FILE_USER};
	sbx_stream *s = NULL;
	char buf[65536];
	int64_t sent = 0;
	int r, code;

	r = sbx_exec_stream(m->engine, sb->container, &spec, &s, err);
	if (r < 0)
		return sbx_sandbox_exec_failed(m, sb, r, err);
	while (in_fd >= 0) {
		ssize_t n = read(in_fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = sbx_error_set(err, -errno, "read: %s", strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		if ((sent += n) > in_max) {
			r = sbx_error_set(err, -EFBIG, "the file grew over the upload limit");
			goto out;
		}
		r = sbx_stream_write(s, buf, (size_t)n, err);
		if (r < 0)
			goto out;
	}
	r = sbx_stream_close_stdin(s, err);
	if (r < 0)
		goto out;
	for (;;) {
		int fd = 1;
		int64_t wait = SBX_FILE_IDLE_MS, left = fx->deadline_ms - sbx_monotonic_ms();
		ssize_t n;

		if (fx->deadline_ms && left <= 0) {
			r = sbx_error_set(err, -ETIMEDOUT, "the sandbox took too long to answer");
			goto out;
		}
		if (fx->deadline_ms && left < wait)
			wait = left;
		n = sbx_stream_read_within(s, buf, sizeof(buf), &fd, wait, fx->cancel, err);
		if (n == 0)
			break;
		if (n < 0 && n == -ETIMEDOUT && wait < SBX_FILE_IDLE_MS)
			continue; /* the deadline: said above */
		if (n < 0) {
			r = n == -ETIMEDOUT ? sbx_error_set(err, -ETIMEDOUT,
							    "the sandbox sent nothing for %d s",
							    SBX_FILE_IDLE_MS / 1000)
					    : (int)n;
			goto out;
		}
		if (fd == 2) {
			keep_bounded(&fx->err, buf, (size_t)n);
			continue;
		}
		if (fx->out_len + n > fx->out_max) {
			n = (ssize_t)(fx->out_max - fx->out_len);
			fx->over = true;
		}
		fx->out_len += n;
		if (n > 0 && fx->sink && (fx->sink_error = fx->sink(fx->userdata, buf, (size_t)n)))
			break;
		if (n > 0 && !fx->sink)
			keep_bounded(&fx->out, buf, (size_t)n);
		if (fx->over)
			break;
	}
	if (fx->sink_error || fx->over) {
		code = FILE_STOPPED; /* by us: the rest of the stream is dropped */
	} else if (fx->no_exit) {
		code = 0;
	} else {
		code = stream_exit(s);
	}
	sbx_stream_free(s);
	sbx_buf_append(&fx->out, "", 0);
	sbx_buf_append(&fx->err, "", 0);
	return code;
out:
	sbx_stream_free(s);
	return r;
}

static void file_exec_release(struct file_exec *fx)
{
	sbx_buf_release(&fx->out);
	sbx_buf_release(&fx->err);
}

/* Where in the sandbox the file goes: *ret_dir and *ret_name. */
static int upload_target(sbx_manager *m, sbx_sandbox *sb, const char *dest, const char *host_name,
			 char **ret_dir, char **ret_name, struct sbx_error *err)
{
	struct sbx_path_stat st = {0};
	_cleanup_free_ char *dir = NULL, *name = NULL;
	const char *slash;
	int r;

	if (dest[0] != '/' || strlen(dest) >= SBX_PATH_MAX)
		return sbx_error_set(err, -EINVAL,
				     "the destination must be an absolute path in the sandbox, "
				     "such as %s",
				     SBX_RESULTS_DIR);
	r = sbx_path_stat(m->engine, sb->container, dest, &st, err);
	if (r >= 0 && st.is_dir) {
		size_t n = strlen(dest);
		sbx_path_stat_release(&st);
		while (n > 1 && dest[n - 1] == '/')
			n--;
		dir = strndup(dest, n);
		name = strdup(host_name);
		goto done;
	}
	sbx_path_stat_release(&st);
	if (r < 0 && r != -ENOENT)
		return sbx_sandbox_exec_failed(m, sb, r, err);
	/* A file path: its directory must exist. */
	slash = strrchr(dest, '/');
	name = strdup(slash + 1);
	dir = slash == dest ? strdup("/") : strndup(dest, (size_t)(slash - dest));
	if (!name || !dir)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return sbx_error_set(err, -EINVAL, "%s is not a usable destination", dest);
	r = sbx_path_stat(m->engine, sb->container, dir, &st, err);
	if (r == -ENOENT || (r >= 0 && !st.is_dir)) {
		sbx_path_stat_release(&st);
		return sbx_error_set(err, -ENOENT,
				     "the folder %s does not exist in the sandbox; create it first "
				     "or upload into %s",
				     dir, SBX_RESULTS_DIR);
	}
	sbx_path_stat_release(&st);
	if (r < 0)
		return r;
done:
	if (!dir || !name)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	*ret_dir = SBX_TAKE(dir);
	*ret_name = SBX_TAKE(name);
	return 0;
}

/*
 * Writes stdin to DIR/NAME as the sandbox user: into a new file beside it
 * (noclobber: never through a link planted there), then renamed over the
 * name (a link there is replaced, not followed). Prints the path on stdout.
 * Exit 3: no such folder; 4: cannot write there.
 */
static const char upload_sh[] = "t=\"${1%/}/$2\"; [ -d \"$1\" ] || exit 3\n"
				"tmp=\"${1%/}/.sbx-upload-$$\"; set -C; umask 022\n"
				"cat >\"$tmp\" || { rm -f -- \"$tmp\"; exit 4; }\n"
				"mv -f -- \"$tmp\" \"$t\" || { rm -f -- \"$tmp\"; exit 4; }\n"
				"printf '%s' \"$t\"\n";

static int upload(sbx_manager *m, sbx_sandbox *sb, const char *local_path, const char *dest_path,
		  char **ret_path, int64_t *ret_size, struct sbx_error *err)
{
	_cleanup_free_ char *host_name = NULL, *dir = NULL, *name = NULL, *path = NULL;
	_cleanup_close_ int fd = -1;
	struct file_exec fx = {.out_max = SBX_PATH_MAX};
	struct stat st = {0};
	int r;

	r = open_upload(m->s, local_path, &fd, &host_name, &st, err);
	if (r < 0)
		return r;
	r = upload_target(m, sb, dest_path ? dest_path : SBX_RESULTS_DIR, host_name, &dir, &name,
			  err);
	if (r < 0)
		goto out;
	{
		const char *const argv[] = {"sh", "-c", upload_sh, "sbx-upload", dir, name, NULL};
		r = file_exec(m, sb, argv, fd, m->s->sandbox.max_upload, &fx, err);
	}
	if (r < 0)
		goto out;
	if (r == 3) {
		r = sbx_error_set(err, -ENOENT,
				  "the folder %s does not exist in the sandbox; create it first or "
				  "upload into %s",
				  dir, SBX_RESULTS_DIR);
		goto out;
	}
	if (r != 0) {
		r = sbx_error_set(err, -EACCES,
				  "the sandbox's user (uid 1000) cannot write %s/%s%s%.300s", dir,
				  name, fx.err.len ? ": " : "", fx.err.len ? fx.err.data : "");
		goto out;
	}
	path = strdup(fx.out.data);
	if (!path) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	*ret_path = SBX_TAKE(path);
	if (ret_size)
		*ret_size = (int64_t)st.st_size;
	r = 0;
out:
	file_exec_release(&fx);
	if (r < 0)
		sbx_error_prefix(err, "upload %s", local_path ? local_path : "");
	return r;
}

int sbx_sandbox_upload(sbx_manager *m, sbx_sandbox *sb, const char *local_path,
		       const char *dest_path, char **ret_path, int64_t *ret_size,
		       struct sbx_error *err)
{
	char *path = NULL;
	int64_t size = 0;
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = upload(m, sb, local_path, dest_path, &path, &size, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	if (r >= 0 && q < 0) {
		free(path);
		return q;
	}
	if (r < 0)
		return r;
	*ret_path = path;
	if (ret_size)
		*ret_size = size;
	return 0;
}

/*
 * An artifact is read by one of the sandbox's file readers (reader.c), a
 * process of the sandbox's user kept between downloads: it opens every
 * part of the way with O_NOFOLLOW, tells the size from the open file, and
 * sends the bytes asked for.
 */
struct sbx_artifact {
	sbx_manager *m;
	sbx_sandbox *sb; /* a reference; a call runs on it until the close */
	struct sbx_reader *reader;
	char *relpath;
	struct sbx_reader_reply reply;
	bool streamed;
	int64_t read;			 /* bytes sbx_artifact_pull gave */
	int64_t deadline_ms;		 /* sbx_artifact_deadline; 0: none */
	const struct sbx_cancel *cancel; /* the caller's, or NULL */
};

void sbx_artifact_deadline(sbx_artifact *a, int64_t at_ms)
{
	a->deadline_ms = at_ms;
}

sbx_artifact *sbx_artifact_close(sbx_artifact *a)
{
	if (!a)
		return NULL;
	sbx_reader_give(a->m, a->sb, a->reader);
	sbx_sandbox_end(a->sb, NULL);
	sbx_sandbox_unref(a->sb);
	free(a->relpath);
	free(a);
	return NULL;
}

static int open_failed(sbx_artifact *a, int code, struct sbx_error *err)
{
	const char *rel = a->relpath;

	switch (code) {
	case 2:
		return sbx_error_set(err, -ENOENT, "no file %s in %s", rel, SBX_RESULTS_DIR);
	case 3:
		return sbx_error_set(err, -ENOENT, "%s in %s is not a regular file", rel,
				     SBX_RESULTS_DIR);
	case 4:
		return sbx_error_set(err, -EPERM,
				     "%s leads through a symbolic link; only regular files under "
				     "%s are served",
				     rel, SBX_RESULTS_DIR);
	default:
		return sbx_error_set(err, -EACCES, "the sandbox's user cannot read %s", rel);
	}
}

int sbx_artifact_open(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t offset,
		      int64_t count, const struct sbx_cancel *cancel, sbx_artifact **ret,
		      struct sbx_artifact_info *ret_info, struct sbx_error *err)
{
	sbx_artifact *a;
	int r;

	r = sbx_artifact_check_relpath(relpath, err);
	if (r < 0)
		return r;
	a = calloc(1, sizeof(*a));
	if (!a || !(a->relpath = strdup(relpath))) {
		free(a);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	a->m = m;
	a->cancel = cancel;
	a->sb = sbx_sandbox_ref(sb);
	r = sbx_sandbox_begin(sb, err);
	if (r < 0) {
		sbx_sandbox_unref(a->sb);
		free(a->relpath);
		free(a);
		return r;
	}
	r = sbx_reader_open(m, sb, relpath, offset, count, cancel, &a->reader, &a->reply, err);
	if (r >= 0 && a->reply.code)
		r = open_failed(a, a->reply.code, err);
	if (r < 0) {
		sbx_artifact_close(a);
		return r;
	}
	*ret_info = a->reply.info;
	*ret = a;
	return 0;
}

/* The next bytes of A's reply, at most MAX: sbx_reader_read_max within
 * SBX_FILE_IDLE_MS (only the file's bytes count as progress: stderr does
 * not), or by the artifact's deadline when that comes first. */
static ssize_t next_bytes(sbx_artifact *a, const void **ret_data, size_t max, struct sbx_error *err)
{
	int64_t until = sbx_monotonic_ms() + SBX_FILE_IDLE_MS;
	bool by_deadline = a->deadline_ms && a->deadline_ms < until;
	ssize_t n = sbx_reader_read_max(a->reader, ret_data, max,
					by_deadline ? a->deadline_ms : until, a->cancel, err);

	if (n != -ETIMEDOUT)
		return n;
	return by_deadline ? sbx_error_set(err, -ETIMEDOUT, "reading %s took too long", a->relpath)
			   : sbx_error_set(err, -ETIMEDOUT, "the sandbox sent nothing for %d s",
					   SBX_FILE_IDLE_MS / 1000);
}

int sbx_artifact_stream(sbx_artifact *a, sbx_sink_fn sink, void *userdata, struct sbx_error *err)
{
	int64_t sent = 0;
	int r;

	if (!sink || a->streamed)
		return sbx_error_set(err, -EINVAL, "no sink, or read twice");
	a->streamed = true;
	for (;;) {
		const void *data;
		ssize_t n = next_bytes(a, &data, SIZE_MAX, err);

		if (n == 0)
			break;
		if (n < 0)
			return (int)n;
		r = sink(userdata, data, (size_t)n);
		if (r < 0)
			return sbx_error_set(err, r, "reading %s was stopped by its receiver",
					     a->relpath);
		sent += n;
	}
	if (sent < a->reply.info.count)
		return sbx_error_set(err, -EIO, "%s shrank while it was read", a->relpath);
	sbx_sandbox_touch(a->sb);
	return 0;
}

ssize_t sbx_artifact_pull(sbx_artifact *a, void *buf, size_t cap, struct sbx_error *err)
{
	unsigned char *out = buf;
	size_t got = 0;

	if (!cap)
		return sbx_error_set(err, -EINVAL, "a read of no bytes");
	a->streamed = true;
	while (got < cap) {
		const void *data;
		ssize_t n = next_bytes(a, &data, cap - got, err);

		if (n == 0) {
			if (a->read + (int64_t)got < a->reply.info.count)
				return sbx_error_set(err, -EIO, "%s shrank while it was read",
						     a->relpath);
			if (!got)
				sbx_sandbox_touch(a->sb);
			break;
		}
		if (n < 0)
			return (int)n;
		memcpy(out + got, data, (size_t)n);
		got += (size_t)n;
	}
	a->read += (int64_t)got;
	return (ssize_t)got;
}

int sbx_artifact_stat(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t *ret_size,
		      struct sbx_error *err)
{
	struct sbx_artifact_info info;
	sbx_artifact *a = NULL;
	int r = sbx_artifact_open(m, sb, relpath, 0, 0, NULL, &a, &info, err);

	sbx_artifact_close(a);
	if (r >= 0 && ret_size)
		*ret_size = info.size;
	return r;
}

int sbx_artifact_read(sbx_manager *m, sbx_sandbox *sb, const char *relpath, sbx_sink_fn sink,
		      void *userdata, struct sbx_error *err)
{
	struct sbx_artifact_info info;
	sbx_artifact *a = NULL;
	int r;

	if (!sink)
		return sbx_error_set(err, -EINVAL, "no sink");
	r = sbx_artifact_open(m, sb, relpath, 0, INT64_MAX, NULL, &a, &info, err);
	if (r >= 0)
		r = sbx_artifact_stream(a, sink, userdata, err);
	sbx_artifact_close(a);
	return r;
}

/* ---- the listing of SBX_RESULTS_DIR ---- */

/* What one entry may take in the listing's line: the path with every byte
 * escaped, its numbers and punctuation. */
/* A listing's output is read up to this (a thousand names of about 1 KiB):
 * what comes after is left out, and the listing says it is not whole. */
#define LIST_OUT_MAX (1 << 20)
/* How long a listing, or a look for changes, may take in all: the program
 * that answers is the sandbox's to replace (python3 and find are looked up
 * in its PATH), and a trickle must not hold a worker. */
#define LIST_TIME_MS 15000

static int list_sink(void *userdata, const void *data, size_t len)
{
	return sbx_buf_append(userdata, data, len);
}

void sbx_artifact_list_free(struct sbx_artifact_entry *list, size_t n)
{
	for (size_t i = 0; list && i < n; i++)
		free(list[i].path);
	free(list);
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_artifact_entry *)a)->path,
		      ((const struct sbx_artifact_entry *)b)->path);
}

/* A decimal number of at most 19 digits (a '-' first when NEG_OK) at *P,
 * ended by a space, which is passed. */
static bool list_number(const char **p, const char *end, bool neg_ok, int64_t *ret)
{
	const char *q = *p;
	bool neg = false;
	int64_t v = 0;
	int digits = 0;

	if (neg_ok && q < end && *q == '-') {
		neg = true;
		q++;
	}
	for (; q < end && *q >= '0' && *q <= '9' && digits < 19; q++, digits++) {
		if (v > (INT64_MAX - (*q - '0')) / 10)
			return false; /* past int64: no number of ours */
		v = v * 10 + (*q - '0');
	}
	if (!digits || q >= end || *q != ' ')
		return false;
	*p = q + 1;
	*ret = neg ? -v : v;
	return true;
}

/* Takes the entries of the listing TEXT (LEN bytes: "more B" then "SIZE
 * MTIME_NS PATH" lines, see sbx_interp.py's list_files). Nothing in it is
 * trusted: code in the sandbox may have replaced the program. It is read
 * line by line, with no tree built (memory: the entries kept, at most MAX);
 * a line that does not parse, or a name not served, is left out (the
 * listing says it is not whole); a last line without its newline (the
 * output was cut) too. */
static int list_parse(const char *text, size_t len, size_t max,
		      struct sbx_artifact_entry **ret_list, size_t *ret_n, bool *ret_truncated,
		      struct sbx_error *err)
{
	const char *p = text, *end = text + len, *nl;
	struct sbx_artifact_entry *list;
	bool truncated = false;
	size_t n = 0;

	nl = memchr(p, '\n', len);
	if (!nl || nl - p != 6 || memcmp(p, "more ", 5) != 0 || (p[5] != '0' && p[5] != '1'))
		return sbx_error_set(err, -EPROTO, "listing %s: no list from the sandbox",
				     SBX_RESULTS_DIR);
	truncated = p[5] == '1';
	p = nl + 1;
	list = calloc(max + 1, sizeof(*list));
	if (!list)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	for (; p < end; p = nl + 1) {
		const char *q = p;
		int64_t size, mtime;

		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			truncated = true; /* cut */
			break;
		}
		if (n == max) {
			truncated = true;
			break;
		}
		if (!list_number(&q, nl, false, &size) || !list_number(&q, nl, true, &mtime)) {
			truncated = true; /* a line that does not parse */
			continue;
		}
		list[n].path = strndup(q, (size_t)(nl - q));
		if (!list[n].path) {
			sbx_artifact_list_free(list, n);
			return sbx_error_set(err, -ENOMEM, "out of memory");
		}
		/* (a NUL in the line makes the copy shorter: refused too) */
		if (!sbx_interp_path_ok(list[n].path, (size_t)(nl - q))) {
			free(list[n].path);
			list[n].path = NULL;
			truncated = true; /* a name we do not serve */
			continue;
		}
		list[n].size = size;
		list[n].mtime_ns = mtime;
		n++;
	}
	qsort(list, n, sizeof(*list), entry_cmp);
	/* The same path twice is no listing of a folder. */
	for (size_t i = 1; i < n; i++) {
		if (strcmp(list[i - 1].path, list[i].path) == 0) {
			sbx_artifact_list_free(list, n);
			return sbx_error_set(err, -EPROTO, "listing %s: a path listed twice",
					     SBX_RESULTS_DIR);
		}
	}
	*ret_list = list;
	*ret_n = n;
	*ret_truncated = truncated;
	return 0;
}

/* SB is asleep (or being put to sleep or woken): what only looks at its
 * files leaves it so. */
static bool asleep(sbx_sandbox *sb)
{
	bool r;

	pthread_mutex_lock(&sb->m->lock);
	r = sb->sleep != SBX_SLEEP_AWAKE;
	pthread_mutex_unlock(&sb->m->lock);
	return r;
}

int sbx_artifact_list(sbx_manager *m, sbx_sandbox *sb, size_t max, const struct sbx_cancel *cancel,
		      struct sbx_artifact_entry **ret_list, size_t *ret_n, bool *ret_truncated,
		      struct sbx_error *err)
{
	struct sbx_buf out = SBX_BUF_INIT;
	struct file_exec fx = {.sink = list_sink,
			       .userdata = &out,
			       .deadline_ms = sbx_monotonic_ms() + LIST_TIME_MS,
			       .cancel = cancel};
	char most[24];
	int r;

	if (max < 1 || max > SBX_ARTIFACT_LIST_MAX)
		return sbx_error_set(err, -EINVAL, "list at most 1 to %d files",
				     SBX_ARTIFACT_LIST_MAX);
	if (asleep(sb)) { /* a listing does not wake it: nothing listed */
		*ret_list = NULL;
		*ret_n = 0;
		*ret_truncated = false;
		return 0;
	}
	snprintf(most, sizeof(most), "%zu", max);
	fx.out_max = LIST_OUT_MAX; /* more: cut, and said so (list_parse) */
	{
		const char *const argv[] = {"python3",	"-c", sbx_interp_program(),
					    "sbx-list", most, NULL};
		r = file_exec(m, sb, argv, -1, 0, &fx, err);
	}
	if (r >= 0 && ((r != 0 && !fx.over) || fx.sink_error))
		r = sbx_error_set(err, fx.sink_error ? -ENOMEM : -EIO,
				  "listing %s in the sandbox failed (exit %d)%s%.300s",
				  SBX_RESULTS_DIR, r, fx.err.len ? ": " : "",
				  fx.err.len ? fx.err.data : "");
	if (r >= 0)
		r = list_parse(out.data ? out.data : "", out.len, max, ret_list, ret_n,
			       ret_truncated, err);
	sbx_buf_release(&out);
	file_exec_release(&fx);
	return r;
}

int sbx_artifact_changed_since(sbx_manager *m, sbx_sandbox *sb, const struct timespec *since,
			       struct sbx_error *err)
{
	/* The first byte of a name found says it; no wait for the exit code
	 * (an engine may take a while to tell it): find's errors are on stderr. */
	struct file_exec fx = {
	    .out_max = 0, .no_exit = true, .deadline_ms = sbx_monotonic_ms() + LIST_TIME_MS};
	char when[48];
	int r;

	if (asleep(sb))
		return 0; /* nothing changes in a stopped container */
	/* Files and folders alike: a name added or removed changes its
	 * folder's mtime. GNU find reads "@SECONDS.NANOSECONDS". */
	snprintf(when, sizeof(when), "@%lld.%09ld", (long long)since->tv_sec, since->tv_nsec);
	{
		const char *const argv[] = {"find", SBX_RESULTS_DIR, "-maxdepth", "64", "-newermt",
					    when,   "-print",	     "-quit",	  NULL};
		r = file_exec(m, sb, argv, -1, 0, &fx, err);
	}
	if (r >= 0 && !fx.over && fx.err.len)
		r = sbx_error_set(err, -EIO, "looking for changes in %s failed: %.300s",
				  SBX_RESULTS_DIR, fx.err.data);
	else if (r >= 0)
		r = fx.over;
	file_exec_release(&fx);
	return r;
}
