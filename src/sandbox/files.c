/* SPDX-License-Identifier: MIT */
/*
 * Files in and out of a sandbox: uploads from the host's upload folder, and
 * artifacts (regular files under SBX_RESULTS_DIR) read back as bytes.
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

#include "sandbox-internal.h"
#include "sbx/common.h"
#include "sbx/tar.h"

#define SBX_PATH_MAX 4096
#define ARTIFACT_DEPTH_MAX 64

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

/* Reads at most max bytes of fd into b; -EFBIG beyond. */
static int read_bounded(int fd, int64_t max, struct sbx_buf *b, struct sbx_error *err)
{
	char chunk[65536];

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_error_set(err, -errno, "read: %s", strerror(errno));
		if (n == 0)
			return 0;
		if ((int64_t)(b->len + (size_t)n) > max)
			return sbx_error_set(err, -EFBIG, "the file grew over the upload limit");
		if (sbx_buf_append(b, chunk, (size_t)n) < 0)
			return sbx_error_set(err, -ENOMEM, "out of memory");
	}
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

static int upload(sbx_manager *m, sbx_sandbox *sb, const char *local_path, const char *dest_path,
		  char **ret_path, int64_t *ret_size, struct sbx_error *err)
{
	_cleanup_free_ char *host_name = NULL, *dir = NULL, *name = NULL, *path = NULL;
	_cleanup_close_ int fd = -1;
	struct sbx_buf data = SBX_BUF_INIT, tar = SBX_BUF_INIT;
	struct stat st;
	int64_t size;
	int r;

	r = open_upload(m->s, local_path, &fd, &host_name, &st, err);
	if (r < 0)
		return r;
	r = upload_target(m, sb, dest_path ? dest_path : SBX_RESULTS_DIR, host_name, &dir, &name,
			  err);
	if (r < 0)
		goto out;
	r = read_bounded(fd, m->s->sandbox.max_upload, &data, err);
	if (r < 0)
		goto out;
	r = sbx_tar_add_file(&tar, name, data.data, data.len, 0644, (int64_t)time(NULL), 1000, 1000,
			     err);
	if (r >= 0)
		r = sbx_tar_finish(&tar, err);
	if (r < 0)
		goto out;
	size = (int64_t)data.len;
	sbx_buf_release(&data);
	r = sbx_archive_put(m->engine, sb->container, dir, tar.data, tar.len, err);
	if (r < 0) {
		r = sbx_sandbox_exec_failed(m, sb, r, err);
		goto out;
	}
	if (asprintf(&path, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name) < 0) {
		path = NULL;
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	*ret_path = SBX_TAKE(path);
	if (ret_size)
		*ret_size = size;
	r = 0;
out:
	sbx_buf_release(&data);
	sbx_buf_release(&tar);
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

/* Refuses a relpath with "", ".", ".." or empty segments, or a leading '/'. */
int sbx_artifact_check_relpath(const char *relpath, struct sbx_error *err)
{
	const char *p = relpath;
	size_t depth = 0;

	if (!relpath || !*relpath)
		return sbx_error_set(err, -EPERM, "no artifact path given");
	if (strlen(relpath) >= SBX_PATH_MAX)
		return sbx_error_set(err, -EINVAL, "the artifact path is too long");
	if (relpath[0] == '/')
		return sbx_error_set(err, -EPERM,
				     "artifact paths are relative to %s, not absolute: %.200s",
				     SBX_RESULTS_DIR, relpath);
	for (;;) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return sbx_error_set(err, -EPERM,
					     "artifact path %.200s has an empty, \".\" or \"..\" "
					     "part; name a file under %s",
					     relpath, SBX_RESULTS_DIR);
		if (++depth > ARTIFACT_DEPTH_MAX)
			return sbx_error_set(err, -EINVAL, "the artifact path is too deep");
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* Checks RELPATH and every directory on the way with the engine; gives the
 * file's size and full path. */
static int artifact_resolve(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t *ret_size,
			    char **ret_full, struct sbx_error *err)
{
	_cleanup_free_ char *full = NULL;
	size_t base = strlen(SBX_RESULTS_DIR);
	int r;

	r = sbx_artifact_check_relpath(relpath, err);
	if (r < 0)
		return r;
	if (asprintf(&full, "%s/%s", SBX_RESULTS_DIR, relpath) < 0)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	/* Stat SBX_RESULTS_DIR itself, then each component. */
	for (size_t end = base;;) {
		struct sbx_path_stat st = {0};
		bool last = full[end] == '\0';
		char save = full[end];

		full[end] = '\0';
		r = sbx_path_stat(m->engine, sb->container, full, &st, err);
		full[end] = save;
		if (r == -ENOENT)
			return sbx_error_set(err, -ENOENT, "no file %s in %s", relpath,
					     SBX_RESULTS_DIR);
		if (r < 0)
			return sbx_sandbox_exec_failed(m, sb, r, err);
		if (st.is_symlink) {
			sbx_path_stat_release(&st);
			return sbx_error_set(err, -EPERM,
					     "%s leads through a symbolic link; only regular files "
					     "under %s are served",
					     relpath, SBX_RESULTS_DIR);
		}
		if (!last && !st.is_dir) {
			sbx_path_stat_release(&st);
			return sbx_error_set(err, -ENOENT, "no file %s in %s", relpath,
					     SBX_RESULTS_DIR);
		}
		if (last) {
			bool regular = !st.is_dir && !(st.mode & GO_MODE_NOT_REGULAR);
			int64_t size = st.size;
			sbx_path_stat_release(&st);
			if (!regular)
				return sbx_error_set(err, -ENOENT, "%s in %s is not a regular file",
						     relpath, SBX_RESULTS_DIR);
			*ret_size = size;
			if (ret_full)
				*ret_full = SBX_TAKE(full);
			return 0;
		}
		sbx_path_stat_release(&st);
		end += 1 + strcspn(full + end + 1, "/");
	}
}

int sbx_artifact_stat(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t *ret_size,
		      struct sbx_error *err)
{
	int64_t size = 0;
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = artifact_resolve(m, sb, relpath, &size, NULL, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	if (r >= 0 && q < 0)
		return q;
	if (r >= 0)
		*ret_size = size;
	return r;
}

struct artifact_reader {
	struct sbx_tar_reader *tar;
	const char *name; /* the basename expected */
	sbx_sink_fn sink;
	void *userdata;
	int entries;
	int refused; /* why the stream was stopped by us, 0 if not */
	int sink_error;
};

static int ar_entry(void *ud, const struct sbx_tar_entry *e)
{
	struct artifact_reader *a = ud;

	if (++a->entries > 1 || e->type != '0' || strcmp(e->name, a->name) != 0)
		return a->refused = -EPERM;
	return 0;
}

static int ar_data(void *ud, const void *p, size_t n)
{
	struct artifact_reader *a = ud;
	int r = a->sink(a->userdata, p, n);

	if (r < 0)
		a->sink_error = r;
	return r;
}

static int ar_feed(void *ud, const void *p, size_t n)
{
	struct artifact_reader *a = ud;
	return sbx_tar_reader_feed(a->tar, p, n, NULL);
}

static int artifact_read(sbx_manager *m, sbx_sandbox *sb, const char *relpath, sbx_sink_fn sink,
			 void *userdata, struct sbx_error *err)
{
	static const struct sbx_tar_reader_ops ops = {.entry = ar_entry, .data = ar_data};
	_cleanup_free_ char *full = NULL;
	struct artifact_reader a = {.sink = sink, .userdata = userdata};
	int64_t size;
	int r;

	if (!sink)
		return sbx_error_set(err, -EINVAL, "no sink");
	r = artifact_resolve(m, sb, relpath, &size, &full, err);
	if (r < 0)
		return r;
	a.name = strrchr(full, '/') + 1;
	a.tar = sbx_tar_reader_new(&ops, &a);
	if (!a.tar)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = sbx_archive_get(m->engine, sb->container, full, ar_feed, &a, err);
	if (a.refused)
		r = sbx_error_set(err, -EPERM,
				  "%s changed while it was read and is no longer a regular file",
				  relpath);
	else if (a.sink_error)
		r = sbx_error_set(err, a.sink_error, "reading %s was stopped by its receiver",
				  relpath);
	else if (r >= 0)
		r = sbx_tar_reader_finish(a.tar, err);
	if (r >= 0 && a.entries != 1)
		r = sbx_error_set(err, -ENOENT, "no file %s in %s", relpath, SBX_RESULTS_DIR);
	sbx_tar_reader_free(a.tar);
	return r < 0 ? r : 0;
}

int sbx_artifact_read(sbx_manager *m, sbx_sandbox *sb, const char *relpath, sbx_sink_fn sink,
		      void *userdata, struct sbx_error *err)
{
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = artifact_read(m, sb, relpath, sink, userdata, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	return r < 0 ? r : q;
}
