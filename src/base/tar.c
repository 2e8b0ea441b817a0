/* SPDX-License-Identifier: MIT */
/*
 * Tar: a ustar writer with PAX long names, and a streaming reader for
 * ustar, GNU and PAX archives (see include/sbx/tar.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/tar.h"

struct ustar_header {
	char name[100];
	char mode[8];
	char uid[8];
	char gid[8];
	char size[12];
	char mtime[12];
	char chksum[8];
	char typeflag;
	char linkname[100];
	char magic[6];
	char version[2];
	char uname[32];
	char gname[32];
	char devmajor[8];
	char devminor[8];
	char prefix[155];
	char pad[12];
};

_Static_assert(sizeof(struct ustar_header) == SBX_TAR_BLOCK, "ustar header is one block");

#define PAX_HEADER_NAME "././@PaxHeader"

static const char zero_block[SBX_TAR_BLOCK];

static size_t pad_of(uint64_t size)
{
	return (size_t)((SBX_TAR_BLOCK - size % SBX_TAR_BLOCK) % SBX_TAR_BLOCK);
}

static bool is_header_only(char type)
{
	return type == '1' || type == '2' || type == '3' || type == '4' || type == '5' ||
	       type == '6';
}

/* ---- names ---- */

int sbx_tar_check_name(const char *name, struct sbx_error *err)
{
	size_t len = name ? strlen(name) : 0;

	if (!len)
		return sbx_error_set(err, -EINVAL, "tar: empty entry name");
	if (len > SBX_TAR_NAME_MAX)
		return sbx_error_set(err, -ENAMETOOLONG, "tar: entry name longer than %d bytes",
				     SBX_TAR_NAME_MAX);
	if (name[0] == '/')
		return sbx_error_set(err, -EINVAL, "tar: absolute entry name \"%.200s\"", name);
	for (const char *p = name; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return sbx_error_set(err, -EINVAL,
					     "tar: entry name \"%.200s\" has a \"..\"", name);
		p += n;
		p += *p == '/';
	}
	return 0;
}

/* ---- writer ---- */

struct meta {
	const char *name;
	const char *link; /* NULL unless a link */
	char type;
	uint32_t mode;
	int64_t size;
	int64_t mtime;
	uint64_t uid, gid;
};

/* Octal when it fits the field (leaving room for the NUL), else GNU base-256. */
static void put_number(char *f, size_t width, int64_t v)
{
	size_t digits = width - 1;
	uint64_t u = (uint64_t)v;

	if (v >= 0 && (digits * 3 >= 64 || u < (UINT64_C(1) << (digits * 3)))) {
		f[digits] = '\0';
		for (size_t i = digits; i-- > 0; u >>= 3)
			f[i] = (char)('0' + (u & 7));
		return;
	}
	for (size_t i = width; i-- > 1;) {
		f[i] = (char)(u & 0xff);
		u = v < 0 ? (u >> 8) | (UINT64_C(0xff) << 56) : u >> 8;
	}
	f[0] = (char)(v < 0 ? 0xff : 0x80);
}

static void put_checksum(struct ustar_header *h)
{
	const unsigned char *p = (const unsigned char *)h;
	unsigned sum = 0;

	memset(h->chksum, ' ', sizeof(h->chksum));
	for (size_t i = 0; i < sizeof(*h); i++)
		sum += p[i];
	for (int i = 5; i >= 0; i--, sum >>= 3)
		h->chksum[i] = (char)('0' + (sum & 7));
	h->chksum[6] = '\0';
}

/* Place name in name/prefix; false when ustar cannot hold it. */
static bool put_name(struct ustar_header *h, const char *name)
{
	size_t len = strlen(name);

	if (len <= sizeof(h->name)) {
		memcpy(h->name, name, len);
		return true;
	}
	for (size_t i = len > sizeof(h->name) + 1 ? len - sizeof(h->name) - 1 : 1;
	     i <= sizeof(h->prefix) && i < len - 1; i++) {
		if (name[i] != '/')
			continue;
		memcpy(h->prefix, name, i);
		memcpy(h->name, name + i + 1, len - i - 1);
		return true;
	}
	memcpy(h->name, name, sizeof(h->name));
	return false;
}

static size_t count_digits(size_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* "LEN key=value\n", where LEN counts the whole record including itself. */
static int pax_record(struct sbx_buf *pax, const char *key, const char *value)
{
	size_t base = strlen(key) + strlen(value) + 3, len = base + 1;

	while (len != base + count_digits(len))
		len = base + count_digits(len);
	return sbx_buf_appendf(pax, "%zu %s=%s\n", len, key, value);
}

static int put_padding(struct sbx_buf *tar, uint64_t size)
{
	return sbx_buf_append(tar, zero_block, pad_of(size));
}

static int put_block(struct sbx_buf *tar, const struct meta *m)
{
	struct ustar_header h;

	memset(&h, 0, sizeof(h));
	put_name(&h, m->name);
	put_number(h.mode, sizeof(h.mode), m->mode & 07777);
	put_number(h.uid, sizeof(h.uid), (int64_t)m->uid);
	put_number(h.gid, sizeof(h.gid), (int64_t)m->gid);
	put_number(h.size, sizeof(h.size), m->size);
	put_number(h.mtime, sizeof(h.mtime), m->mtime);
	h.typeflag = m->type;
	if (m->link)
		memcpy(h.linkname, m->link, strnlen(m->link, sizeof(h.linkname)));
	memcpy(h.magic, "ustar", 6);
	memcpy(h.version, "00", 2);
	put_checksum(&h);
	return sbx_buf_append(tar, &h, sizeof(h));
}

/* The header of m, preceded by a PAX header when the name or link needs one. */
static int put_header(struct sbx_buf *tar, const struct meta *m)
{
	struct ustar_header probe;
	struct sbx_buf pax = SBX_BUF_INIT;
	bool long_link = m->link && strlen(m->link) > sizeof(probe.linkname);
	int r = 0;

	memset(&probe, 0, sizeof(probe));
	if (!put_name(&probe, m->name))
		r = pax_record(&pax, "path", m->name);
	if (r >= 0 && long_link)
		r = pax_record(&pax, "linkpath", m->link);
	if (r >= 0 && pax.len) {
		struct meta x = {PAX_HEADER_NAME,  NULL,     'x', 0644,
				 (int64_t)pax.len, m->mtime, 0,	  0};
		r = put_block(tar, &x);
		if (r >= 0)
			r = sbx_buf_append(tar, pax.data, pax.len);
		if (r >= 0)
			r = put_padding(tar, pax.len);
	}
	sbx_buf_release(&pax);
	return r < 0 ? r : put_block(tar, m);
}

static void rollback(struct sbx_buf *tar, size_t len)
{
	tar->len = len;
	if (tar->data)
		tar->data[len] = '\0';
}

static int add_entry(struct sbx_buf *tar, const struct meta *m, const void *data,
		     struct sbx_error *err)
{
	size_t start = tar->len;
	int r = put_header(tar, m);

	if (r >= 0 && m->size > 0)
		r = sbx_buf_append(tar, data, (size_t)m->size);
	if (r >= 0)
		r = put_padding(tar, (uint64_t)m->size);
	if (r < 0) {
		rollback(tar, start);
		return sbx_error_set(err, r, "tar: %.200s: out of memory", m->name);
	}
	return 0;
}

static int check_link(const char *target, struct sbx_error *err)
{
	if (!target || !*target)
		return sbx_error_set(err, -EINVAL, "tar: empty link target");
	if (strlen(target) > SBX_TAR_NAME_MAX)
		return sbx_error_set(err, -ENAMETOOLONG, "tar: link target longer than %d bytes",
				     SBX_TAR_NAME_MAX);
	return 0;
}

/* A file or link name: a valid name that does not end in '/'. */
static int check_leaf(const char *name, struct sbx_error *err)
{
	int r = sbx_tar_check_name(name, err);

	if (r >= 0 && name[strlen(name) - 1] == '/')
		r = sbx_error_set(err, -EINVAL,
				  "tar: \"%.200s\" ends in '/' but is not a directory", name);
	return r;
}

int sbx_tar_add_file(struct sbx_buf *tar, const char *name, const void *data, size_t len,
		     uint32_t mode, int64_t mtime, uid_t uid, gid_t gid, struct sbx_error *err)
{
	struct meta m = {name, NULL, '0', mode, (int64_t)len, mtime, uid, gid};
	int r = check_leaf(name, err);

	if (r < 0)
		return r;
	if (len > INT64_MAX || (len && !data))
		return sbx_error_set(err, -EINVAL, "tar: %.200s: bad data", name);
	return add_entry(tar, &m, data, err);
}

int sbx_tar_add_dir(struct sbx_buf *tar, const char *name, uint32_t mode, int64_t mtime, uid_t uid,
		    gid_t gid, struct sbx_error *err)
{
	_cleanup_free_ char *slashed = NULL;
	struct meta m = {name, NULL, '5', mode, 0, mtime, uid, gid};
	int r = sbx_tar_check_name(name, err);
	size_t len;

	if (r < 0)
		return r;
	len = strlen(name);
	if (name[len - 1] != '/') {
		slashed = malloc(len + 2);
		if (!slashed)
			return sbx_error_set(err, -ENOMEM, "tar: out of memory");
		memcpy(slashed, name, len);
		memcpy(slashed + len, "/", 2);
		m.name = slashed;
	}
	return add_entry(tar, &m, NULL, err);
}

int sbx_tar_add_symlink(struct sbx_buf *tar, const char *name, const char *target, int64_t mtime,
			uid_t uid, gid_t gid, struct sbx_error *err)
{
	struct meta m = {name, target, '2', 0777, 0, mtime, uid, gid};
	int r = check_leaf(name, err);

	if (r >= 0)
		r = check_link(target, err);
	return r < 0 ? r : add_entry(tar, &m, NULL, err);
}

int sbx_tar_finish(struct sbx_buf *tar, struct sbx_error *err)
{
	size_t start = tar->len;
	int r = sbx_buf_append(tar, zero_block, sizeof(zero_block));

	if (r >= 0)
		r = sbx_buf_append(tar, zero_block, sizeof(zero_block));
	if (r < 0) {
		rollback(tar, start);
		return sbx_error_set(err, r, "tar: out of memory");
	}
	return 0;
}

/* ---- writer: a host directory tree ---- */

struct tree {
	struct sbx_buf *tar;
	const char *root;
	size_t start; /* tar->len when the walk began */
	char path[SBX_TAR_NAME_MAX + 2];
	size_t path_len;
	char *chunk;
	struct sbx_error *err;
};

#define TREE_CHUNK (64 * 1024)

static int tree_errno(struct tree *t, int code, const char *what)
{
	return sbx_error_set(t->err, code, "tar: %s/%s: %s: %s", t->root, t->path, what,
			     strerror(-code));
}

static int tree_room(struct tree *t, uint64_t more)
{
	if (t->tar->len - t->start + more > (uint64_t)SBX_TAR_TREE_BYTES_MAX)
		return sbx_error_set(t->err, -EFBIG,
				     "tar: %s: archive larger than %" PRId64 " bytes", t->root,
				     (int64_t)SBX_TAR_TREE_BYTES_MAX);
	return 0;
}

static int tree_file(struct tree *t, int dfd, const char *name, const struct stat *lst)
{
	_cleanup_close_ int fd =
	    openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	struct meta m = {t->path, NULL, '0', 0, 0, 0, 0, 0};
	struct stat st;
	uint64_t left;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0)
		return tree_errno(t, -errno, "open");
	if (!S_ISREG(st.st_mode) || st.st_ino != lst->st_ino || st.st_dev != lst->st_dev)
		return tree_errno(t, -EAGAIN, "changed while archiving");
	r = tree_room(t, 4 * SBX_TAR_BLOCK + 2 * SBX_TAR_NAME_MAX + (uint64_t)st.st_size);
	if (r < 0)
		return r;
	m.mode = st.st_mode & 07777;
	m.size = st.st_size;
	m.mtime = st.st_mtime;
	r = put_header(t->tar, &m);
	for (left = (uint64_t)st.st_size; r >= 0 && left > 0;) {
		ssize_t n = read(fd, t->chunk, left < TREE_CHUNK ? (size_t)left : TREE_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return tree_errno(t, -errno, "read");
		if (n == 0)
			return tree_errno(t, -EAGAIN, "shrank while archiving");
		r = sbx_buf_append(t->tar, t->chunk, (size_t)n);
		left -= (uint64_t)n;
	}
	if (r >= 0)
		r = put_padding(t->tar, (uint64_t)st.st_size);
	return r < 0 ? tree_errno(t, r, "append") : 0;
}

static int tree_symlink(struct tree *t, int dfd, const char *name, const struct stat *st)
{
	char target[SBX_TAR_NAME_MAX + 1];
	ssize_t n = readlinkat(dfd, name, target, sizeof(target));
	struct meta m = {t->path, target, '2', 0777, 0, st->st_mtime, 0, 0};
	int r;

	if (n < 0)
		return tree_errno(t, -errno, "readlink");
	if ((size_t)n >= sizeof(target))
		return tree_errno(t, -ENAMETOOLONG, "readlink");
	target[n] = '\0';
	r = tree_room(t, 4 * SBX_TAR_BLOCK + 2 * SBX_TAR_NAME_MAX);
	if (r >= 0)
		r = put_header(t->tar, &m);
	return r < 0 ? tree_errno(t, r, "append") : 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* The sorted names in d, without "." and "..". */
static int list_dir(struct tree *t, DIR *d, char ***ret_names, size_t *ret_n)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	for (errno = 0; (de = readdir(d)); errno = 0) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			char **p = reallocarray(names, cap ? cap * 2 : 16, sizeof(*names));
			if (!p)
				break;
			names = p;
			cap = cap ? cap * 2 : 16;
		}
		names[n] = strdup(de->d_name);
		if (!names[n])
			break;
		n++;
	}
	if (de || errno) {
		int r = de ? -ENOMEM : -errno;
		free_names(names, n);
		return tree_errno(t, r, "readdir");
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_names);
	*ret_names = names;
	*ret_n = n;
	return 0;
}

static int tree_dir(struct tree *t, int fd, unsigned depth);

static int tree_entry(struct tree *t, int dfd, const char *name, unsigned depth)
{
	struct meta m = {t->path, NULL, '5', 0, 0, 0, 0, 0};
	struct stat st;
	int r, cfd;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return tree_errno(t, -errno, "stat");
	if (S_ISREG(st.st_mode))
		return tree_file(t, dfd, name, &st);
	if (S_ISLNK(st.st_mode))
		return tree_symlink(t, dfd, name, &st);
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (depth >= SBX_TAR_TREE_DEPTH_MAX)
		return sbx_error_set(t->err, -ELOOP, "tar: %s/%s: deeper than %d directories",
				     t->root, t->path, SBX_TAR_TREE_DEPTH_MAX);
	r = tree_room(t, 3 * SBX_TAR_BLOCK + SBX_TAR_NAME_MAX);
	if (r < 0)
		return r;
	m.mode = st.st_mode & 07777;
	m.mtime = st.st_mtime;
	t->path[t->path_len] = '/';
	t->path[t->path_len + 1] = '\0';
	r = put_header(t->tar, &m);
	t->path[t->path_len] = '\0';
	if (r < 0)
		return tree_errno(t, r, "append");
	cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (cfd < 0)
		return tree_errno(t, -errno, "open");
	return tree_dir(t, cfd, depth + 1);
}

/* Archive the contents of the directory fd (taken over) at t->path. */
static int tree_dir(struct tree *t, int fd, unsigned depth)
{
	size_t base = t->path_len, n = 0;
	char **names = NULL;
	DIR *d = fdopendir(fd);
	int r = 0;

	if (!d) {
		r = tree_errno(t, -errno, "opendir");
		close(fd);
		return r;
	}
	r = list_dir(t, d, &names, &n);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		size_t len = strlen(names[i]), at = base ? base + 1 : 0;
		if (at + len > SBX_TAR_NAME_MAX) {
			r = tree_errno(t, -ENAMETOOLONG, names[i]);
			break;
		}
		if (base)
			t->path[base] = '/';
		memcpy(t->path + at, names[i], len + 1);
		t->path_len = at + len;
		r = tree_entry(t, dirfd(d), names[i], depth);
		t->path_len = base;
		t->path[base] = '\0';
	}
	free_names(names, n);
	closedir(d);
	return r;
}

int sbx_tar_add_tree(struct sbx_buf *tar, const char *host_dir, struct sbx_error *err)
{
	struct tree t = {.tar = tar, .root = host_dir, .start = tar->len, .err = err};
	int fd, r;

	fd = open(host_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		return sbx_error_set(err, r, "tar: %s: %s", host_dir, strerror(-r));
	}
	t.chunk = malloc(TREE_CHUNK);
	if (!t.chunk) {
		close(fd);
		return sbx_error_set(err, -ENOMEM, "tar: out of memory");
	}
	r = tree_dir(&t, fd, 0);
	free(t.chunk);
	if (r < 0)
		rollback(tar, t.start);
	return r < 0 ? r : 0;
}

/* ---- reader ---- */

enum rstate {
	R_HEADER, /* collecting a header block */
	R_DATA,	  /* passing an entry's data through */
	R_EXT,	  /* collecting a PAX or GNU long-name header's data */
	R_SKIP,	  /* dropping data nobody wants (PAX global header) */
	R_PAD,	  /* dropping padding up to the next block */
	R_END,	  /* after the end-of-archive marker */
};

struct sbx_tar_reader {
	const struct sbx_tar_reader_ops *ops;
	void *ud;
	enum rstate state;
	int failed;
	uint64_t offset; /* bytes consumed, for messages */

	unsigned char block[SBX_TAR_BLOCK];
	size_t block_len;
	uint64_t left; /* bytes left of data, extension or skip */
	size_t pad;
	char ext_type;
	struct sbx_buf ext;

	/* Overrides from extension headers, for the next entry. */
	char *gnu_name, *gnu_link, *pax_path, *pax_link;
	bool has_pax_size, has_pax_mtime;
	int64_t pax_size, pax_mtime;

	/* The current entry. */
	char *name, *link;
};

struct sbx_tar_reader *sbx_tar_reader_new(const struct sbx_tar_reader_ops *ops, void *ud)
{
	struct sbx_tar_reader *r;

	if (!ops)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->ops = ops;
	r->ud = ud;
	return r;
}

static void clear_overrides(struct sbx_tar_reader *r)
{
	free(r->gnu_name);
	free(r->gnu_link);
	free(r->pax_path);
	free(r->pax_link);
	r->gnu_name = r->gnu_link = r->pax_path = r->pax_link = NULL;
	r->has_pax_size = r->has_pax_mtime = false;
}

static bool has_overrides(const struct sbx_tar_reader *r)
{
	return r->gnu_name || r->gnu_link || r->pax_path || r->pax_link || r->has_pax_size ||
	       r->has_pax_mtime;
}

struct sbx_tar_reader *sbx_tar_reader_free(struct sbx_tar_reader *r)
{
	if (!r)
		return NULL;
	clear_overrides(r);
	sbx_buf_release(&r->ext);
	free(r->name);
	free(r->link);
	free(r);
	return NULL;
}

static int fail(struct sbx_tar_reader *r, struct sbx_error *err, int code, const char *fmt, ...)
    SBX_PRINTF(4, 5);
static int fail(struct sbx_tar_reader *r, struct sbx_error *err, int code, const char *fmt, ...)
{
	char msg[SBX_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->failed = code;
	return sbx_error_set(err, code, "tar: %s", msg);
}

static int callback_failed(struct sbx_tar_reader *r, struct sbx_error *err, int code)
{
	return fail(r, err, code, "entry \"%.200s\": aborted by the consumer: %s",
		    r->name ? r->name : "", strerror(-code));
}

/* An octal field (blank = 0) or a GNU base-256 one; -EPROTO when malformed. */
static int parse_number(const char *field, size_t width, int64_t *ret)
{
	const unsigned char *f = (const unsigned char *)field;
	uint64_t x = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		unsigned char inv = (f[0] & 0x40) ? 0xff : 0;
		for (i = 0; i < width; i++) {
			unsigned char c = f[i] ^ inv;
			if (i == 0)
				c &= 0x7f;
			if (x >> 56)
				return -EPROTO;
			x = x << 8 | c;
		}
		if (x >> 63)
			return -EPROTO;
		*ret = inv ? (int64_t)~x : (int64_t)x;
		return 0;
	}
	while (i < width && (f[i] == ' ' || f[i] == '\0'))
		i++;
	for (; i < width && f[i] >= '0' && f[i] <= '7'; i++) {
		if (x >> 60)
			return -EPROTO;
		x = x << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < width; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -EPROTO;
	*ret = (int64_t)x;
	return 0;
}

static bool checksum_ok(const unsigned char *b)
{
	const struct ustar_header *h = (const void *)b;
	uint64_t usum = 0;
	int64_t ssum = 0, want;

	if (parse_number(h->chksum, sizeof(h->chksum), &want) < 0)
		return false;
	for (size_t i = 0; i < SBX_TAR_BLOCK; i++) {
		bool in_field = i >= offsetof(struct ustar_header, chksum) &&
				i < offsetof(struct ustar_header, chksum) + sizeof(h->chksum);
		unsigned char c = in_field ? ' ' : b[i];
		usum += c;
		ssum += (signed char)c;
	}
	return want == (int64_t)usum || want == ssum;
}

static char *field_dup(const char *f, size_t width)
{
	return strndup(f, strnlen(f, width));
}

/* Decimal PAX number; a time may be negative and have a fraction (dropped). */
static int pax_number(const char *v, size_t n, bool is_time, int64_t *ret)
{
	bool neg = n && v[0] == '-' && is_time;
	uint64_t x = 0;
	size_t i = neg;

	if (i == n)
		return -EPROTO;
	for (; i < n && isdigit((unsigned char)v[i]); i++) {
		if (x > (UINT64_MAX - 9) / 10)
			return -EPROTO;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (i == neg || x > (uint64_t)INT64_MAX)
		return -EPROTO;
	if (i < n && v[i] == '.' && is_time)
		for (i++; i < n && isdigit((unsigned char)v[i]);)
			i++;
	if (i != n)
		return -EPROTO;
	*ret = neg ? -(int64_t)x : (int64_t)x;
	return 0;
}

/* Replace *slot by the value (an empty one removes the override). */
static int pax_string(char **slot, const char *v, size_t n)
{
	free(*slot);
	*slot = NULL;
	if (!n)
		return 0;
	if (memchr(v, '\0', n))
		return -EPROTO;
	*slot = strndup(v, n);
	return *slot ? 0 : -ENOMEM;
}

static int pax_apply(struct sbx_tar_reader *r, const char *key, size_t klen, const char *v,
		     size_t n)
{
#define KEY_IS(s) (klen == sizeof(s) - 1 && memcmp(key, s, klen) == 0)
	if (KEY_IS("path"))
		return pax_string(&r->pax_path, v, n);
	if (KEY_IS("linkpath"))
		return pax_string(&r->pax_link, v, n);
	if (KEY_IS("size")) {
		r->has_pax_size = n > 0;
		return n ? pax_number(v, n, false, &r->pax_size) : 0;
	}
	if (KEY_IS("mtime")) {
		r->has_pax_mtime = n > 0;
		return n ? pax_number(v, n, true, &r->pax_mtime) : 0;
	}
	return 0;
#undef KEY_IS
}

/* Records "LEN key=value\n", LEN counting the whole record. */
static int parse_pax(struct sbx_tar_reader *r, const char *p, size_t n, struct sbx_error *err)
{
	while (n) {
		size_t len = 0, i = 0;
		const char *kv, *eq;
		int rc;

		for (; i < n && isdigit((unsigned char)p[i]); i++) {
			len = len * 10 + (size_t)(p[i] - '0');
			if (len > n)
				break;
		}
		if (!i || len > n || i >= n || p[i] != ' ' || len < i + 4 || p[len - 1] != '\n')
			return fail(r, err, -EPROTO, "malformed PAX record at byte %" PRIu64,
				    r->offset);
		kv = p + i + 1;
		eq = memchr(kv, '=', len - i - 2);
		if (!eq || eq == kv)
			return fail(r, err, -EPROTO, "malformed PAX record at byte %" PRIu64,
				    r->offset);
		rc = pax_apply(r, kv, (size_t)(eq - kv), eq + 1, (size_t)(p + len - 1 - eq - 1));
		if (rc == -ENOMEM)
			return fail(r, err, rc, "out of memory");
		if (rc < 0)
			return fail(r, err, rc, "bad PAX record \"%.*s\" at byte %" PRIu64,
				    (int)(eq - kv), kv, r->offset);
		p += len;
		n -= len;
	}
	return 0;
}

static int end_extension(struct sbx_tar_reader *r, struct sbx_error *err)
{
	char **slot = r->ext_type == 'L' ? &r->gnu_name : &r->gnu_link;

	if (r->ext_type == 'x')
		return parse_pax(r, r->ext.data ? r->ext.data : "", r->ext.len, err);
	free(*slot);
	*slot = field_dup(r->ext.data ? r->ext.data : "", r->ext.len);
	return *slot ? 0 : fail(r, err, -ENOMEM, "out of memory");
}

static void after_payload(struct sbx_tar_reader *r)
{
	r->state = r->pad ? R_PAD : R_HEADER;
}

static int end_entry(struct sbx_tar_reader *r, struct sbx_error *err)
{
	int rc = r->ops->entry_end ? r->ops->entry_end(r->ud) : 0;

	if (rc < 0)
		return callback_failed(r, err, rc);
	after_payload(r);
	return 0;
}

static void strip_slashes(char *s)
{
	size_t n = strlen(s);

	while (n > 1 && s[n - 1] == '/')
		s[--n] = '\0';
}

static int start_entry(struct sbx_tar_reader *r, const struct ustar_header *h, int64_t size,
		       struct sbx_error *err)
{
	bool posix = memcmp(h->magic, "ustar\0", 6) == 0;
	struct sbx_tar_entry e = {0};
	int64_t mtime, mode;
	int rc;

	free(r->name);
	free(r->link);
	r->link = NULL;
	r->name = SBX_TAKE(r->pax_path);
	if (!r->name)
		r->name = SBX_TAKE(r->gnu_name);
	if (!r->name && posix && h->prefix[0]) {
		size_t np = strnlen(h->prefix, sizeof(h->prefix)),
		       nn = strnlen(h->name, sizeof(h->name));
		r->name = malloc(np + nn + 2);
		if (r->name) {
			memcpy(r->name, h->prefix, np);
			r->name[np] = '/';
			memcpy(r->name + np + 1, h->name, nn);
			r->name[np + nn + 1] = '\0';
		}
	} else if (!r->name) {
		r->name = field_dup(h->name, sizeof(h->name));
	}
	if (!r->name)
		return fail(r, err, -ENOMEM, "out of memory");
	e.type = h->typeflag;
	if (e.type == '\0')
		e.type = r->name[0] && r->name[strlen(r->name) - 1] == '/' ? '5' : '0';
	if (e.type == '1' || e.type == '2') {
		r->link = SBX_TAKE(r->pax_link);
		if (!r->link)
			r->link = SBX_TAKE(r->gnu_link);
		if (!r->link)
			r->link = field_dup(h->linkname, sizeof(h->linkname));
		if (!r->link)
			return fail(r, err, -ENOMEM, "out of memory");
	}
	if (parse_number(h->mtime, sizeof(h->mtime), &mtime) < 0 ||
	    parse_number(h->mode, sizeof(h->mode), &mode) < 0)
		return fail(r, err, -EPROTO, "bad number in the header at byte %" PRIu64,
			    r->offset);
	if (r->has_pax_size)
		size = r->pax_size;
	if (r->has_pax_mtime)
		mtime = r->pax_mtime;
	clear_overrides(r);
	strip_slashes(r->name);
	if (!r->name[0])
		return fail(r, err, -EPROTO, "entry without a name at byte %" PRIu64, r->offset);
	if (is_header_only(e.type))
		size = 0;
	e.mode = (uint32_t)(mode & 07777);
	e.name = r->name;
	e.size = size;
	e.mtime = mtime;
	e.link_target = r->link;
	rc = r->ops->entry ? r->ops->entry(r->ud, &e) : 0;
	if (rc < 0)
		return callback_failed(r, err, rc);
	r->left = (uint64_t)size;
	r->pad = pad_of((uint64_t)size);
	if (!size)
		return end_entry(r, err);
	r->state = R_DATA;
	return 0;
}

static bool block_is_zero(const unsigned char *b)
{
	return memcmp(b, zero_block, SBX_TAR_BLOCK) == 0;
}

static int on_header(struct sbx_tar_reader *r, struct sbx_error *err)
{
	const struct ustar_header *h = (const void *)r->block;
	uint64_t at = r->offset - SBX_TAR_BLOCK;
	int64_t size;

	r->block_len = 0;
	if (block_is_zero(r->block)) {
		if (has_overrides(r))
			return fail(r, err, -EPROTO, "extended header without an entry");
		r->state = R_END;
		return 0;
	}
	if (!checksum_ok(r->block))
		return fail(r, err, -EPROTO, "bad tar header checksum at byte %" PRIu64, at);
	if (parse_number(h->size, sizeof(h->size), &size) < 0 || size < 0)
		return fail(r, err, -EPROTO, "bad size in the header at byte %" PRIu64, at);
	switch (h->typeflag) {
	case 'x':
	case 'L':
	case 'K':
		if (size > SBX_TAR_EXT_MAX)
			return fail(r, err, -EPROTO,
				    "%s header of %" PRId64 " bytes at byte %" PRIu64 " (max %d)",
				    h->typeflag == 'x' ? "PAX" : "GNU long name", size, at,
				    SBX_TAR_EXT_MAX);
		r->ext_type = h->typeflag;
		sbx_buf_reset(&r->ext);
		r->left = (uint64_t)size;
		r->pad = pad_of((uint64_t)size);
		r->state = R_EXT;
		if (!size) {
			after_payload(r);
			return end_extension(r, err);
		}
		return 0;
	case 'g':
		r->left = (uint64_t)size;
		r->pad = pad_of((uint64_t)size);
		r->state = R_SKIP;
		if (!size)
			after_payload(r);
		return 0;
	default:
		return start_entry(r, h, size, err);
	}
}

static size_t min_size(size_t a, uint64_t b)
{
	return (uint64_t)a < b ? a : (size_t)b;
}

/* Consume part of p; returns bytes used (>= 1 when n >= 1) or a negative code. */
static ssize_t step(struct sbx_tar_reader *r, const unsigned char *p, size_t n,
		    struct sbx_error *err)
{
	size_t k;
	int rc = 0;

	switch (r->state) {
	case R_HEADER:
		k = min_size(n, SBX_TAR_BLOCK - r->block_len);
		memcpy(r->block + r->block_len, p, k);
		r->block_len += k;
		r->offset += k;
		if (r->block_len == SBX_TAR_BLOCK)
			rc = on_header(r, err);
		break;
	case R_DATA:
		k = min_size(n, r->left);
		r->offset += k;
		r->left -= k;
		if (r->ops->data)
			rc = r->ops->data(r->ud, p, k);
		if (rc < 0)
			return callback_failed(r, err, rc);
		if (!r->left)
			rc = end_entry(r, err);
		break;
	case R_EXT:
		k = min_size(n, r->left);
		r->offset += k;
		r->left -= k;
		if (sbx_buf_append(&r->ext, p, k) < 0)
			return fail(r, err, -ENOMEM, "out of memory");
		if (!r->left) {
			after_payload(r);
			rc = end_extension(r, err);
		}
		break;
	case R_SKIP:
		k = min_size(n, r->left);
		r->offset += k;
		r->left -= k;
		if (!r->left)
			after_payload(r);
		break;
	case R_PAD:
		k = min_size(n, r->pad);
		r->offset += k;
		r->pad -= k;
		if (!r->pad)
			r->state = R_HEADER;
		break;
	case R_END:
	default:
		k = n;
		r->offset += k;
		break;
	}
	return rc < 0 ? rc : (ssize_t)k;
}

static int already_failed(struct sbx_tar_reader *r, struct sbx_error *err)
{
	return sbx_error_set(err, r->failed, "tar: the stream already failed: %s",
			     strerror(-r->failed));
}

int sbx_tar_reader_feed(struct sbx_tar_reader *r, const void *p, size_t n, struct sbx_error *err)
{
	const unsigned char *b = p;

	if (r->failed)
		return already_failed(r, err);
	while (n) {
		ssize_t k = step(r, b, n, err);
		if (k < 0) {
			r->failed = (int)k;
			return (int)k;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

int sbx_tar_reader_finish(struct sbx_tar_reader *r, struct sbx_error *err)
{
	if (r->failed)
		return already_failed(r, err);
	switch (r->state) {
	case R_END:
		return 0;
	case R_HEADER:
		if (!r->block_len && !has_overrides(r))
			return 0;
		return fail(r, err, -EPROTO, "truncated stream: %s at byte %" PRIu64,
			    r->block_len ? "in a header" : "extended header without an entry",
			    r->offset);
	case R_DATA:
		return fail(r, err, -EPROTO,
			    "truncated stream: entry \"%.200s\" lacks %" PRIu64 " bytes", r->name,
			    r->left);
	default:
		return fail(r, err, -EPROTO, "truncated stream at byte %" PRIu64, r->offset);
	}
}
