/* SPDX-License-Identifier: MIT */
/*
 * Tar archives, the currency of the engines' archive and build APIs.
 *
 * The writer appends ustar entries to a struct sbx_buf, with a PAX 'x' header
 * for a name or link target that ustar cannot hold and base-256 for numbers
 * that do not fit their octal field. On failure the buffer is left as it was.
 *
 * The reader is a push parser for what engines send back: bytes arrive in
 * chunks of any size and file data is passed through, never buffered. It
 * understands ustar, GNU and PAX archives: PAX 'x' (path, linkpath, size,
 * mtime), 'g' (ignored), GNU 'L'/'K' long names, octal and base-256 numbers.
 * It parses; deciding whether a name is safe to extract is the caller's job
 * (sbx_tar_check_name).
 */
#ifndef SBX_TAR_H
#define SBX_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx/buf.h"
#include "sbx/error.h"

#define SBX_TAR_BLOCK 512
#define SBX_TAR_NAME_MAX 4096			  /* longest name or link target written */
#define SBX_TAR_EXT_MAX (64 * 1024)		  /* largest PAX or GNU long-name header read */
#define SBX_TAR_TREE_DEPTH_MAX 64		  /* deepest directory sbx_tar_add_tree enters */
#define SBX_TAR_TREE_BYTES_MAX (INT64_C(1) << 30) /* most bytes sbx_tar_add_tree appends */

/*
 * 0, or -EINVAL when name is empty, absolute or has a ".." component, or
 * -ENAMETOOLONG beyond SBX_TAR_NAME_MAX. "." components and a trailing '/'
 * are allowed.
 */
int sbx_tar_check_name(const char *name, struct sbx_error *err);

/* Append a regular file. mode keeps its permission bits (07777); data may be NULL if len is 0. */
int sbx_tar_add_file(struct sbx_buf *tar, const char *name, const void *data, size_t len,
		     uint32_t mode, int64_t mtime, uid_t uid, gid_t gid, struct sbx_error *err);

/* Append a directory; a trailing '/' is added to name when missing. */
int sbx_tar_add_dir(struct sbx_buf *tar, const char *name, uint32_t mode, int64_t mtime, uid_t uid,
		    gid_t gid, struct sbx_error *err);

/* Append a symbolic link to target (any non-empty string; it is not checked like a name). */
int sbx_tar_add_symlink(struct sbx_buf *tar, const char *name, const char *target, int64_t mtime,
			uid_t uid, gid_t gid, struct sbx_error *err);

/*
 * Append what is below host_dir (not host_dir itself) with names relative to
 * it: directories, regular files and symlinks (not followed), others skipped.
 * Entries are sorted bytewise, owned by 0:0, with the host's permissions and
 * mtimes, so the same tree gives the same bytes. Fails with -ELOOP deeper than
 * SBX_TAR_TREE_DEPTH_MAX and -EFBIG when what it adds would pass
 * SBX_TAR_TREE_BYTES_MAX.
 */
int sbx_tar_add_tree(struct sbx_buf *tar, const char *host_dir, struct sbx_error *err);

/* Append the end-of-archive marker (two zero blocks). */
int sbx_tar_finish(struct sbx_buf *tar, struct sbx_error *err);

struct sbx_tar_entry {
	const char *name;	 /* without trailing '/'; valid during the entry callback */
	char type;		 /* '0' file, '5' dir, '2' symlink, '1' hard link, ... */
	int64_t size;		 /* bytes of data that follow; 0 for all but files */
	uint32_t mode;		 /* permission bits (07777) */
	int64_t mtime;		 /* seconds since the epoch */
	const char *link_target; /* for '1' and '2', else NULL */
};

/*
 * Called in order entry, data (zero or more chunks, together e->size bytes),
 * entry_end, for every entry. Any may be NULL. A negative return aborts the
 * feed with that value.
 */
struct sbx_tar_reader_ops {
	int (*entry)(void *ud, const struct sbx_tar_entry *e);
	int (*data)(void *ud, const void *p, size_t n);
	int (*entry_end)(void *ud);
};

struct sbx_tar_reader;

/* A reader calling ops with ud; NULL when out of memory. ops must outlive it. */
struct sbx_tar_reader *sbx_tar_reader_new(const struct sbx_tar_reader_ops *ops, void *ud);

/*
 * Push n more bytes of the stream. Returns 0, -EPROTO for a malformed archive
 * ("bad tar header checksum", PAX header over SBX_TAR_EXT_MAX, ...), or a
 * callback's negative value. After a failure every call returns the same code.
 * Bytes after the end-of-archive marker are ignored.
 */
int sbx_tar_reader_feed(struct sbx_tar_reader *r, const void *p, size_t n, struct sbx_error *err);

/*
 * The stream has ended: 0 at an entry boundary (with or without the
 * end-of-archive marker), -EPROTO when truncated inside a header or an entry.
 */
int sbx_tar_reader_finish(struct sbx_tar_reader *r, struct sbx_error *err);

struct sbx_tar_reader *sbx_tar_reader_free(struct sbx_tar_reader *r);

#endif
