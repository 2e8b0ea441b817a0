/* SPDX-License-Identifier: MIT */
/*
 * Tar: our writer read back by our reader in chunks of every size, by the
 * system tar (list and extract), and the system tar's ustar/GNU/PAX streams
 * read by our reader; plus every malformed-stream error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/tar.h"
#include "tap.h"

#define MAX_GOT 64

struct got_entry {
	char *name, *link;
	char type;
	int64_t size, mtime;
	uint32_t mode;
	struct sbx_buf data;
	bool ended;
};

struct got {
	struct got_entry e[MAX_GOT];
	int n;
	bool open, order_ok;
	int abort_entry; /* 1-based entry whose callback fails; 0 = none */
	int abort_code;
	bool abort_in_data;
};

static char tmp[] = "/tmp/test-tar.XXXXXX";

static int on_entry(void *ud, const struct sbx_tar_entry *e)
{
	struct got *g = ud;
	struct got_entry *x;

	if (g->open || g->n == MAX_GOT)
		g->order_ok = false;
	if (g->n == MAX_GOT)
		return -E2BIG;
	x = &g->e[g->n++];
	x->name = strdup(e->name);
	x->link = e->link_target ? strdup(e->link_target) : NULL;
	x->type = e->type;
	x->size = e->size;
	x->mtime = e->mtime;
	x->mode = e->mode;
	g->open = true;
	if (g->abort_entry == g->n && !g->abort_in_data)
		return g->abort_code;
	return 0;
}

static int on_data(void *ud, const void *p, size_t n)
{
	struct got *g = ud;
	struct got_entry *x = &g->e[g->n - 1];

	if (!g->open || n == 0 || x->data.len + n > (size_t)x->size)
		g->order_ok = false;
	if (g->abort_entry == g->n && g->abort_in_data)
		return g->abort_code;
	return sbx_buf_append(&x->data, p, n);
}

static int on_end(void *ud)
{
	struct got *g = ud;
	struct got_entry *x = &g->e[g->n - 1];

	if (!g->open || x->data.len != (size_t)x->size)
		g->order_ok = false;
	x->ended = true;
	g->open = false;
	return 0;
}

static const struct sbx_tar_reader_ops ops = {on_entry, on_data, on_end};

static void got_init(struct got *g)
{
	memset(g, 0, sizeof(*g));
	g->order_ok = true;
}

static void got_release(struct got *g)
{
	for (int i = 0; i < g->n; i++) {
		free(g->e[i].name);
		free(g->e[i].link);
		sbx_buf_release(&g->e[i].data);
	}
	got_init(g);
}

static const struct got_entry *got_find(const struct got *g, const char *name)
{
	for (int i = 0; i < g->n; i++)
		if (strcmp(g->e[i].name, name) == 0)
			return &g->e[i];
	return NULL;
}

/* Feed p in chunks of chunk bytes (0 = all at once), then finish. */
static int read_tar(const void *p, size_t len, size_t chunk, struct got *g, struct sbx_error *err)
{
	struct sbx_tar_reader *r = sbx_tar_reader_new(&ops, g);
	const char *b = p;
	int rc = 0;

	if (!r)
		tap_bail("reader_new");
	sbx_error_clear(err);
	for (size_t off = 0; rc >= 0 && off < len;) {
		size_t n = chunk && chunk < len - off ? chunk : len - off;
		rc = sbx_tar_reader_feed(r, b + off, n, err);
		off += n;
	}
	if (rc >= 0)
		rc = sbx_tar_reader_finish(r, err);
	sbx_tar_reader_free(r);
	return rc;
}

static bool contains(const char *p, size_t n, const char *needle)
{
	size_t k = strlen(needle);

	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(p + i, needle, k) == 0)
			return true;
	return false;
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "we");

	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		tap_bail("write a temporary file");
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* ---- our writer, our reader ---- */

struct expect {
	const char *name;
	char type;
	const void *data;
	size_t len;
	uint32_t mode;
	int64_t mtime;
	const char *link;
};

static bool entry_matches(const struct got_entry *g, const struct expect *x)
{
	if (strcmp(g->name, x->name) != 0 || g->type != x->type || g->size != (int64_t)x->len ||
	    g->mode != x->mode || g->mtime != x->mtime || !g->ended)
		return false;
	if ((g->link == NULL) != (x->link == NULL) || (g->link && strcmp(g->link, x->link) != 0))
		return false;
	return g->data.len == x->len && (!x->len || memcmp(g->data.data, x->data, x->len) == 0);
}

static void test_round_trip(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf tar = SBX_BUF_INIT;
	unsigned char all[256];
	size_t big_len = 100000, chunks[] = {1, 7, 512, 4096, 0};
	unsigned char *big = malloc(big_len);
	char *long200 = repeat('n', 200), *target150 = repeat('t', 150);
	char split150[160], path[64];
	struct got g;
	int r = 0;

	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	for (size_t i = 0; i < big_len; i++)
		big[i] = (unsigned char)(i * 7919 >> 3);
	/* 150 characters that fit ustar's prefix + name split. */
	snprintf(split150, sizeof(split150), "%.70s/%.79s", long200, target150);
	struct expect want[] = {
	    {"d", '5', NULL, 0, 0755, 1700000000, NULL},
	    {"d/hello.txt", '0', "hello\n", 6, 0644, 1700000001, NULL},
	    {"d/empty", '0', NULL, 0, 0600, 1700000002, NULL},
	    {"all-bytes.bin", '0', all, sizeof(all), 0755, 1700000003, NULL},
	    {long200, '0', "long", 4, 0644, 1700000004, NULL},
	    {split150, '0', "split", 5, 0644, 1700000005, NULL},
	    {"link", '2', NULL, 0, 0777, 1700000006, "d/hello.txt"},
	    {"longlink", '2', NULL, 0, 0777, 1700000007, target150},
	    {"before-1970", '0', "old", 3, 04755, -86400, NULL},
	    {"far-future", '0', "new", 3, 0644, INT64_C(100000000000), NULL},
	    {"big.bin", '0', big, big_len, 0644, 1700000008, NULL},
	};
	size_t n_want = SBX_ARRAY_SIZE(want);

	for (size_t i = 0; r >= 0 && i < n_want; i++) {
		const struct expect *x = &want[i];
		uid_t uid = i == 8 ? 3000000 : 1000;
		if (x->type == '5')
			r = sbx_tar_add_dir(&tar, x->name, x->mode, x->mtime, uid, uid, &err);
		else if (x->type == '2')
			r = sbx_tar_add_symlink(&tar, x->name, x->link, x->mtime, uid, uid, &err);
		else
			r = sbx_tar_add_file(&tar, x->name, x->data, x->len, x->mode, x->mtime, uid,
					     uid, &err);
	}
	tap_ok(r == 0, "write %zu entries (%s)", n_want, err.msg);
	tap_ok(sbx_tar_finish(&tar, &err) == 0, "finish");
	tap_ok(tar.len % SBX_TAR_BLOCK == 0, "the archive is whole blocks (%zu bytes)", tar.len);
	tap_ok(contains(tar.data, tar.len, "././@PaxHeader"), "long names use PAX");

	for (size_t c = 0; c < SBX_ARRAY_SIZE(chunks); c++) {
		bool all_match = true;
		got_init(&g);
		r = read_tar(tar.data, tar.len, chunks[c], &g, &err);
		for (size_t i = 0; i < n_want && (int)i < g.n; i++) {
			if (!entry_matches(&g.e[i], &want[i])) {
				tap_diag("entry %zu: got %.40s type %c size %" PRId64 " mode %o "
					 "mtime %" PRId64,
					 i, g.e[i].name, g.e[i].type, g.e[i].size, g.e[i].mode,
					 g.e[i].mtime);
				all_match = false;
			}
		}
		tap_ok(r == 0 && g.n == (int)n_want && all_match && g.order_ok,
		       "read back in chunks of %zu: %d entries, all equal (%s)",
		       chunks[c] ? chunks[c] : tar.len, g.n, err.msg);
		got_release(&g);
	}

	/* The system tar agrees. */
	snprintf(path, sizeof(path), "%s/ours.tar", tmp);
	write_file(path, tar.data, tar.len);
	{
		char cmd[256], line[512];
		int listed = 0, same = 0;
		FILE *p;
		snprintf(cmd, sizeof(cmd), "tar -tf %s", path);
		p = popen(cmd, "re");
		while (p && fgets(line, sizeof(line), p)) {
			line[strcspn(line, "\n")] = '\0';
			if (listed < (int)n_want) {
				char name[300];
				snprintf(name, sizeof(name), "%s%s", want[listed].name,
					 want[listed].type == '5' ? "/" : "");
				same += strcmp(line, name) == 0;
			}
			listed++;
		}
		tap_ok(p && pclose(p) == 0 && listed == (int)n_want && same == listed,
		       "system tar lists the same %d names", same);
		tap_is_int(
		    run("mkdir %s/x && tar -C %s/x --warning=no-timestamp -xf %s", tmp, tmp, path),
		    0, "system tar extracts");
		snprintf(cmd, sizeof(cmd), "%s/x/%s", tmp, long200);
		{
			struct stat st;
			tap_ok(lstat(cmd, &st) == 0 && st.st_size == 4 && st.st_mtime == 1700000004,
			       "the 200-char name extracts with its size and mtime");
			snprintf(cmd, sizeof(cmd), "%s/x/before-1970", tmp);
			tap_ok(lstat(cmd, &st) == 0 && st.st_mtime == -86400,
			       "a base-256 mtime extracts");
		}
	}

	sbx_buf_release(&tar);
	free(big);
	free(long200);
	free(target150);
}

static void test_writer_rejects(void)
{
	static const char *const bad[] = {"",	    "/etc/passwd", "..",   "../x",
					  "a/../b", "a/..",	   "./..", "file/"};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf tar = SBX_BUF_INIT;
	char *huge = repeat('h', SBX_TAR_NAME_MAX + 1);

	sbx_tar_add_file(&tar, "ok", "x", 1, 0644, 0, 0, 0, NULL);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sbx_error_clear(&err);
		tap_ok(sbx_tar_add_file(&tar, bad[i], "x", 1, 0644, 0, 0, 0, &err) == -EINVAL &&
			   tar.len == 1024,
		       "file name \"%s\" refused, buffer unchanged (%s)", bad[i], err.msg);
	}
	tap_is_int(sbx_tar_add_dir(&tar, "/abs", 0755, 0, 0, 0, NULL), -EINVAL, "absolute dir");
	tap_is_int(sbx_tar_add_symlink(&tar, "../l", "x", 0, 0, 0, NULL), -EINVAL, "symlink name");
	tap_is_int(sbx_tar_add_symlink(&tar, "l", "", 0, 0, 0, NULL), -EINVAL, "empty target");
	tap_is_int(sbx_tar_add_file(&tar, huge, "", 0, 0644, 0, 0, 0, NULL), -ENAMETOOLONG,
		   "a name over SBX_TAR_NAME_MAX");
	tap_ok(sbx_tar_add_file(&tar, "a/..b/.c/./d..", NULL, 0, 0644, 0, 0, 0, &err) == 0,
	       "dots that are not a \"..\" component are fine");
	tap_is_int(sbx_tar_check_name("x/../y", NULL), -EINVAL, "check_name");
	tap_is_int(sbx_tar_check_name("x/y/", NULL), 0, "check_name with a trailing slash");
	sbx_buf_release(&tar);
	free(huge);
}

/* ---- hand-made streams ---- */

/* A ustar header block as other writers make it (octal, GNU or POSIX magic). */
static void make_header(unsigned char *b, const char *name, char type, int64_t size,
			const char *magic)
{
	unsigned sum = 0;

	memset(b, 0, SBX_TAR_BLOCK);
	memcpy(b, name, strnlen(name, 100));
	memcpy(b + 100, "0000644", 8);
	memcpy(b + 108, "0001750", 8);
	memcpy(b + 116, "0001750", 8);
	snprintf((char *)b + 124, 12, "%011" PRIo64, (uint64_t)size);
	memcpy(b + 136, "14544345340", 12);
	b[156] = (unsigned char)type;
	if (magic)
		memcpy(b + 257, magic, 8);
	memset(b + 148, ' ', 8);
	for (int i = 0; i < SBX_TAR_BLOCK; i++)
		sum += b[i];
	snprintf((char *)b + 148, 8, "%06o", sum);
}

static void put(struct sbx_buf *s, const char *name, char type, const void *data, size_t n,
		const char *magic)
{
	unsigned char b[SBX_TAR_BLOCK];
	static const char zeros[SBX_TAR_BLOCK];

	make_header(b, name, type, (int64_t)n, magic);
	sbx_buf_append(s, b, sizeof(b));
	sbx_buf_append(s, data, n);
	sbx_buf_append(s, zeros, (SBX_TAR_BLOCK - n % SBX_TAR_BLOCK) % SBX_TAR_BLOCK);
}

static void put_end(struct sbx_buf *s)
{
	sbx_tar_finish(s, NULL);
}

#define POSIX "ustar\00000"
#define GNU "ustar  "

static void test_handmade(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf s = SBX_BUF_INIT;
	struct got g;
	char *long_name = repeat('g', 300);
	int r;

	/* GNU 'L' and 'K' */
	put(&s, "././@LongLink", 'L', long_name, 301, GNU);
	put(&s, "truncated", '0', "data", 4, GNU);
	put(&s, "././@LongLink", 'K', "/a/long/target", 15, GNU);
	put(&s, "sym", '2', NULL, 0, GNU);
	put_end(&s);
	got_init(&g);
	r = read_tar(s.data, s.len, 100, &g, &err);
	tap_ok(r == 0 && g.n == 2, "GNU long name and long link (%s)", err.msg);
	tap_ok(g.n == 2 && strcmp(g.e[0].name, long_name) == 0 && g.e[0].data.len == 4,
	       "'L' names the next entry");
	tap_ok(g.n == 2 && g.e[1].link && strcmp(g.e[1].link, "/a/long/target") == 0 &&
		   strcmp(g.e[1].name, "sym") == 0,
	       "'K' gives the next link target");
	got_release(&g);
	sbx_buf_reset(&s);

	/* PAX: path, size, mtime with a fraction, global header ignored, unknown keys ignored */
	{
		struct sbx_buf pax = SBX_BUF_INIT;
		sbx_buf_appendf(&pax, "30 mtime=1700000000.123456789\n");
		sbx_buf_appendf(&pax, "21 path=pax/name.txt\n");
		sbx_buf_appendf(&pax, "24 SCHILY.xattr.user.a=\n");
		sbx_buf_appendf(&pax, "8 size=\n");
		put(&s, "g-header", 'g', "16 path=ignored\n", 16, POSIX);
		put(&s, "x-header", 'x', pax.data, pax.len, POSIX);
		put(&s, "short", '0', "hello", 5, POSIX);
		put(&s, "x-header", 'x', "9 size=3\n", 9, POSIX);
		/* header says 0 bytes, PAX says 3 */
		{
			unsigned char b[SBX_TAR_BLOCK] = {0};
			make_header(b, "sized", '0', 0, POSIX);
			sbx_buf_append(&s, b, sizeof(b));
			memset(b, 0, sizeof(b));
			memcpy(b, "abc", 3);
			sbx_buf_append(&s, b, sizeof(b));
		}
		put(&s, "olddir/", '\0', NULL, 0, NULL);
		put(&s, "oldfile", '\0', "v7", 2, NULL);
		put_end(&s);
		sbx_buf_append(&s, "trailing garbage after the end", 30);
		sbx_buf_release(&pax);
	}
	got_init(&g);
	r = read_tar(s.data, s.len, 3, &g, &err);
	tap_ok(r == 0 && g.n == 4 && g.order_ok, "PAX stream (%s), %d entries", err.msg, g.n);
	tap_ok(got_find(&g, "pax/name.txt") && got_find(&g, "pax/name.txt")->mtime == 1700000000,
	       "PAX path and fractional mtime");
	tap_ok(got_find(&g, "sized") && got_find(&g, "sized")->data.len == 3 &&
		   memcmp(got_find(&g, "sized")->data.data, "abc", 3) == 0,
	       "PAX size overrides the header");
	tap_ok(got_find(&g, "olddir") && got_find(&g, "olddir")->type == '5',
	       "a pre-POSIX directory (type NUL, trailing slash)");
	tap_ok(got_find(&g, "oldfile") && got_find(&g, "oldfile")->type == '0' &&
		   got_find(&g, "oldfile")->mode == 0644,
	       "a v7 header without magic");
	got_release(&g);
	sbx_buf_reset(&s);

	/* base-256 size and a prefix */
	{
		unsigned char b[SBX_TAR_BLOCK] = {0};
		unsigned sum = 0;
		make_header(b, "name", '0', 0, POSIX);
		memset(b + 124, 0, 12);
		b[124] = 0x80;
		b[135] = 2;
		memcpy(b + 345, "the/prefix", 10);
		memset(b + 148, ' ', 8);
		for (int i = 0; i < SBX_TAR_BLOCK; i++)
			sum += b[i];
		snprintf((char *)b + 148, 8, "%06o", sum);
		sbx_buf_append(&s, b, sizeof(b));
		memset(b, 'z', sizeof(b));
		sbx_buf_append(&s, b, sizeof(b));
		put_end(&s);
	}
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_ok(r == 0 && g.n == 1 && strcmp(g.e[0].name, "the/prefix/name") == 0 &&
		   g.e[0].size == 2 && g.e[0].data.len == 2,
	       "a base-256 size and a ustar prefix (%s)", err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	/* no end-of-archive marker: fine at a boundary */
	put(&s, "f", '0', "x", 1, POSIX);
	got_init(&g);
	tap_is_int(read_tar(s.data, s.len, 0, &g, &err), 0, "a stream without the end marker");
	got_release(&g);
	sbx_buf_reset(&s);

	/* errors */
	put(&s, "x-header", 'x', "", 0, POSIX);
	sbx_buf_append(&s, (char[SBX_TAR_BLOCK]){0}, SBX_TAR_BLOCK);
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_is_int(r, 0, "an empty PAX header before the end is harmless (%s)", err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	put(&s, "x-header", 'x', "9 size=3\n", 9, POSIX);
	sbx_buf_append(&s, (char[SBX_TAR_BLOCK]){0}, SBX_TAR_BLOCK);
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_ok(r == -EPROTO && strstr(err.msg, "without an entry"),
	       "a PAX header followed by the end: %s", err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	put(&s, "x-header", 'x', "9 size=3\n", 9, POSIX);
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_ok(r == -EPROTO && strstr(err.msg, "truncated"), "a PAX header, then EOF: %s", err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	{
		char *big = repeat('a', SBX_TAR_EXT_MAX + 1);
		put(&s, "x-header", 'x', big, SBX_TAR_EXT_MAX + 1, POSIX);
		free(big);
	}
	got_init(&g);
	r = read_tar(s.data, s.len, 4096, &g, &err);
	tap_ok(r == -EPROTO && strstr(err.msg, "max 65536"), "a PAX header over 64 KiB: %s",
	       err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	static const char *const bad_records[] = {
	    "abc\n",	"9 size=3",	"3 a=\n",	"99 path=x\n",
	    "8 =abc\n", "10 size=-3\n", "10 size=3x\n", "29 size=99999999999999999999\n",
	    "0 \n",	"1 x=y\n",
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad_records); i++) {
		put(&s, "x-header", 'x', bad_records[i], strlen(bad_records[i]), POSIX);
		put(&s, "f", '0', "x", 1, POSIX);
		put_end(&s);
		got_init(&g);
		r = read_tar(s.data, s.len, 0, &g, &err);
		tap_ok(r == -EPROTO && g.n == 0, "malformed PAX record \"%.*s\": %s",
		       (int)strcspn(bad_records[i], "\n"), bad_records[i], err.msg);
		got_release(&g);
		sbx_buf_reset(&s);
	}
	put(&s, "x-header", 'x', "13 path=a\0bc\n", 13, POSIX);
	put(&s, "f", '0', "x", 1, POSIX);
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_ok(r == -EPROTO, "a NUL inside a PAX path: %s", err.msg);
	got_release(&g);
	sbx_buf_reset(&s);

	put(&s, "f", '0', "x", 1, POSIX);
	s.data[124 + 3] = '9';
	{
		unsigned sum = 0;
		memset(s.data + 148, ' ', 8);
		for (int i = 0; i < SBX_TAR_BLOCK; i++)
			sum += (unsigned char)s.data[i];
		snprintf(s.data + 148, 8, "%06o", sum);
	}
	got_init(&g);
	r = read_tar(s.data, s.len, 0, &g, &err);
	tap_ok(r == -EPROTO && strstr(err.msg, "bad size"), "a non-octal size: %s", err.msg);
	got_release(&g);
	sbx_buf_release(&s);
	free(long_name);
}

static void test_reader_errors(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf tar = SBX_BUF_INIT;
	struct sbx_tar_reader *r;
	struct got g;
	int rc;

	sbx_tar_add_file(&tar, "one", "1111", 4, 0644, 0, 0, 0, NULL);
	sbx_tar_add_file(&tar, "two", "2222", 4, 0644, 0, 0, 0, NULL);
	sbx_tar_finish(&tar, NULL);

	tar.data[SBX_TAR_BLOCK * 2] ^= 1;
	got_init(&g);
	rc = read_tar(tar.data, tar.len, 0, &g, &err);
	tap_ok(rc == -EPROTO && strstr(err.msg, "bad tar header checksum") && g.n == 1,
	       "a corrupt checksum after one good entry: %s", err.msg);
	got_release(&g);
	tar.data[SBX_TAR_BLOCK * 2] ^= 1;

	got_init(&g);
	rc = read_tar(tar.data, SBX_TAR_BLOCK + 2, 1, &g, &err);
	tap_ok(rc == -EPROTO && strstr(err.msg, "lacks 2 bytes"), "truncated in the data: %s",
	       err.msg);
	got_release(&g);
	got_init(&g);
	rc = read_tar(tar.data, SBX_TAR_BLOCK * 2 + 100, 0, &g, &err);
	tap_ok(rc == -EPROTO && strstr(err.msg, "in a header"), "truncated in a header: %s",
	       err.msg);
	got_release(&g);
	got_init(&g);
	rc = read_tar(tar.data, SBX_TAR_BLOCK + 100, 0, &g, &err);
	tap_ok(rc == -EPROTO, "truncated in the padding: %s", err.msg);
	got_release(&g);
	got_init(&g);
	tap_is_int(read_tar(tar.data, 0, 0, &g, &err), 0, "an empty stream is an empty archive");
	got_release(&g);

	got_init(&g);
	g.abort_entry = 2;
	g.abort_code = -ECANCELED;
	rc = read_tar(tar.data, tar.len, 0, &g, &err);
	tap_ok(rc == -ECANCELED && g.n == 2, "an entry callback aborts with its code: %s", err.msg);
	got_release(&g);
	got_init(&g);
	g.abort_entry = 1;
	g.abort_code = -ENOSPC;
	g.abort_in_data = true;
	rc = read_tar(tar.data, tar.len, 0, &g, &err);
	tap_ok(rc == -ENOSPC && g.n == 1, "a data callback aborts with its code: %s", err.msg);
	got_release(&g);

	got_init(&g);
	tar.data[0] ^= 1;
	r = sbx_tar_reader_new(&ops, &g);
	rc = sbx_tar_reader_feed(r, tar.data, tar.len, NULL);
	tar.data[0] ^= 1;
	tap_is_int(rc, -EPROTO, "err may be NULL");
	tap_is_int(sbx_tar_reader_feed(r, tar.data, tar.len, &err), -EPROTO,
		   "a failed reader stays failed");
	tap_is_int(sbx_tar_reader_finish(r, &err), -EPROTO, "and finish says so");
	sbx_tar_reader_free(r);
	tap_ok(sbx_tar_reader_free(NULL) == NULL, "free(NULL)");
	got_release(&g);

	/* all callbacks NULL */
	{
		static const struct sbx_tar_reader_ops none = {NULL, NULL, NULL};
		r = sbx_tar_reader_new(&none, NULL);
		rc = sbx_tar_reader_feed(r, tar.data, tar.len, &err);
		tap_ok(rc == 0 && sbx_tar_reader_finish(r, &err) == 0, "callbacks may be NULL");
		sbx_tar_reader_free(r);
	}
	sbx_buf_release(&tar);
}

/* ---- the system tar's streams ---- */

static int read_command(const char *cmd, size_t chunk, struct got *g, struct sbx_error *err)
{
	struct sbx_tar_reader *r = sbx_tar_reader_new(&ops, g);
	char *buf = malloc(chunk);
	FILE *p = popen(cmd, "re");
	int rc = 0, status;
	size_t n;

	if (!p || !r || !buf)
		tap_bail("popen");
	sbx_error_clear(err);
	while (rc >= 0 && (n = fread(buf, 1, chunk, p)) > 0)
		rc = sbx_tar_reader_feed(r, buf, n, err);
	if (rc >= 0)
		rc = sbx_tar_reader_finish(r, err);
	while (fread(buf, 1, chunk, p) > 0)
		;
	status = pclose(p);
	sbx_tar_reader_free(r);
	free(buf);
	if (rc >= 0 && status != 0)
		rc = sbx_error_set(err, -EIO, "%s: exit status %d", cmd, status);
	return rc;
}

static void make_source_tree(const char *dir, bool long_names)
{
	unsigned char all[1024];
	char path[1024];
	char *l150 = repeat('L', 150), *l200 = repeat('M', 200);
	struct timeval tv[2] = {{1600000000, 0}, {1600000000, 0}};

	for (size_t i = 0; i < sizeof(all); i++)
		all[i] = (unsigned char)i;
	run("mkdir -p %s/sub/deeper %s/empty-dir", dir, dir);
	snprintf(path, sizeof(path), "%s/a.txt", dir);
	write_file(path, "alpha\n", 6);
	utimes(path, tv);
	snprintf(path, sizeof(path), "%s/sub/b.bin", dir);
	write_file(path, all, sizeof(all));
	snprintf(path, sizeof(path), "%s/sub/deeper/private", dir);
	write_file(path, "secret", 6);
	chmod(path, 0700);
	snprintf(path, sizeof(path), "%s/empty", dir);
	write_file(path, "", 0);
	snprintf(path, sizeof(path), "%s/ln", dir);
	if (symlink("a.txt", path) < 0)
		tap_bail("symlink");
	snprintf(path, sizeof(path), "%s/dangling", dir);
	if (symlink("/nonexistent/target", path) < 0)
		tap_bail("symlink");
	if (long_names) {
		snprintf(path, sizeof(path), "%s/sub/%s", dir, l150);
		write_file(path, "long150", 7);
		snprintf(path, sizeof(path), "%s/%s", dir, l200);
		write_file(path, "long200", 7);
	} else {
		/* a 150-character path ustar holds with its prefix field */
		snprintf(path, sizeof(path), "%s/%.60s", dir, l150);
		run("mkdir -p %s", path);
		snprintf(path, sizeof(path), "%s/%.60s/%.80s", dir, l150, l200);
		write_file(path, "long150", 7);
	}
	free(l150);
	free(l200);
}

static void test_system_tar(void)
{
	static const struct {
		const char *flag;
		bool long_names;
	} formats[] = {
	    {"", true}, {"--format=gnu", true}, {"--format=pax", true}, {"--format=ustar", false}};
	struct sbx_error err = SBX_ERROR_INIT;
	char dir[256], cmd[512], name[300];
	char *l150 = repeat('L', 150), *l200 = repeat('M', 200);
	struct got g;

	for (size_t f = 0; f < SBX_ARRAY_SIZE(formats); f++) {
		const struct got_entry *e;
		const char *fmt = formats[f].flag[0] ? formats[f].flag : "default";
		unsigned char all[1024];
		int rc;

		for (size_t i = 0; i < sizeof(all); i++)
			all[i] = (unsigned char)i;
		snprintf(dir, sizeof(dir), "%s/sys%zu", tmp, f);
		make_source_tree(dir, formats[f].long_names);
		snprintf(cmd, sizeof(cmd), "tar -C %s %s -cf - .", dir, formats[f].flag);
		got_init(&g);
		rc = read_command(cmd, 1000 + f * 333, &g, &err);
		tap_ok(rc == 0 && g.order_ok, "tar %s: %d entries (%s)", fmt, g.n, err.msg);
		e = got_find(&g, "./a.txt");
		tap_ok(e && e->type == '0' && e->data.len == 6 &&
			   memcmp(e->data.data, "alpha\n", 6) == 0 && e->mtime == 1600000000 &&
			   e->mode == 0644,
		       "tar %s: a small file with its mode and mtime", fmt);
		e = got_find(&g, "./sub/b.bin");
		tap_ok(e && e->data.len == sizeof(all) &&
			   memcmp(e->data.data, all, sizeof(all)) == 0,
		       "tar %s: all byte values", fmt);
		e = got_find(&g, "./sub/deeper/private");
		tap_ok(e && e->mode == 0700, "tar %s: mode 0700", fmt);
		e = got_find(&g, "./sub");
		tap_ok(e && e->type == '5' && e->size == 0, "tar %s: a directory", fmt);
		e = got_find(&g, "./empty");
		tap_ok(e && e->type == '0' && e->size == 0 && e->ended, "tar %s: an empty file",
		       fmt);
		e = got_find(&g, "./ln");
		tap_ok(e && e->type == '2' && e->link && strcmp(e->link, "a.txt") == 0,
		       "tar %s: a symlink", fmt);
		if (formats[f].long_names) {
			snprintf(name, sizeof(name), "./sub/%s", l150);
			e = got_find(&g, name);
			tap_ok(e && e->data.len == 7 && memcmp(e->data.data, "long150", 7) == 0,
			       "tar %s: a 150-character file name", fmt);
			snprintf(name, sizeof(name), "./%s", l200);
			e = got_find(&g, name);
			tap_ok(e && e->data.len == 7, "tar %s: a 200-character file name", fmt);
		} else {
			snprintf(name, sizeof(name), "./%.60s/%.80s", l150, l200);
			e = got_find(&g, name);
			tap_ok(e && e->data.len == 7, "tar %s: a 150-character path (prefix)", fmt);
		}
		got_release(&g);
	}
	/* the stream is read as it comes: one byte at a time */
	snprintf(cmd, sizeof(cmd), "tar -C %s/sys2 --format=pax -cf - .", tmp);
	got_init(&g);
	tap_ok(read_command(cmd, 1, &g, &err) == 0 && g.n >= 10,
	       "tar --format=pax fed a byte at a time (%s)", err.msg);
	got_release(&g);
	free(l150);
	free(l200);
}

/* ---- sbx_tar_add_tree ---- */

static void test_add_tree(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf tar = SBX_BUF_INIT, again = SBX_BUF_INIT;
	char src[256], out[256], path[1024];
	bool sorted = true, no_fifo = true;
	struct got g;
	struct stat st;
	int rc;

	snprintf(src, sizeof(src), "%s/tree", tmp);
	snprintf(out, sizeof(out), "%s/tree-out", tmp);
	make_source_tree(src, true);
	snprintf(path, sizeof(path), "%s/fifo", src);
	if (mkfifo(path, 0644) < 0)
		tap_bail("mkfifo");

	rc = sbx_tar_add_tree(&tar, src, &err);
	tap_ok(rc == 0, "add_tree (%s)", err.msg);
	tap_ok(sbx_tar_finish(&tar, &err) == 0, "finish");
	tap_ok(sbx_tar_add_tree(&again, src, &err) == 0 && sbx_tar_finish(&again, &err) == 0 &&
		   again.len == tar.len && memcmp(again.data, tar.data, tar.len) == 0,
	       "the same tree gives the same bytes");

	got_init(&g);
	rc = read_tar(tar.data, tar.len, 4096, &g, &err);
	for (int i = 0; i < g.n; i++) {
		if (strcmp(g.e[i].name, "fifo") == 0)
			no_fifo = false;
		if (i && strcmp(g.e[i - 1].name, g.e[i].name) >= 0)
			sorted = false;
	}
	tap_ok(rc == 0 && g.n == 11, "our reader reads it: %d entries (%s)", g.n, err.msg);
	tap_ok(sorted, "entries are sorted");
	tap_ok(no_fifo, "a FIFO is left out");
	tap_ok(got_find(&g, "sub/deeper/private") &&
		   got_find(&g, "sub/deeper/private")->mode == 0700,
	       "modes are kept");
	tap_ok(got_find(&g, "a.txt") && got_find(&g, "a.txt")->mtime == 1600000000,
	       "mtimes are kept");
	tap_ok(got_find(&g, "dangling") && got_find(&g, "dangling")->type == '2',
	       "symlinks are not followed");
	got_release(&g);

	snprintf(path, sizeof(path), "%s/tree.tar", tmp);
	write_file(path, tar.data, tar.len);
	tap_is_int(run("mkdir %s && tar -C %s -xpf %s", out, out, path), 0,
		   "system tar extracts it");
	tap_is_int(run("diff -r --no-dereference -x fifo %s %s >&2", src, out), 0,
		   "the extracted tree equals the source (diff -r)");
	snprintf(path, sizeof(path), "%s/sub/deeper/private", out);
	tap_ok(stat(path, &st) == 0 && (st.st_mode & 07777) == 0700 &&
		   (st.st_uid == 0 || geteuid() != 0),
	       "extracted with its mode, owned by 0:0");
	snprintf(path, sizeof(path), "%s/a.txt", out);
	tap_ok(stat(path, &st) == 0 && st.st_mtime == 1600000000, "and its mtime");

	/* failures leave the buffer as it was */
	{
		size_t len = tar.len;
		char deep[1024];
		int n = snprintf(deep, sizeof(deep), "%s/deep", tmp);

		for (int i = 0; i < SBX_TAR_TREE_DEPTH_MAX; i++)
			n += snprintf(deep + n, sizeof(deep) - (size_t)n, "/d");
		run("mkdir -p %s", deep);
		snprintf(path, sizeof(path), "%s/deep", tmp);
		tap_is_int(sbx_tar_add_tree(&tar, path, &err), 0, "%d levels deep is fine",
			   SBX_TAR_TREE_DEPTH_MAX);
		tar.len = len;
		run("mkdir %s/d", deep);
		sbx_error_clear(&err);
		rc = sbx_tar_add_tree(&tar, path, &err);
		tap_ok(rc == -ELOOP && tar.len == len, "one more is -ELOOP: %s", err.msg);
		rc = sbx_tar_add_tree(&tar, "/nonexistent", &err);
		tap_ok(rc == -ENOENT && strstr(err.msg, "/nonexistent"), "a missing dir: %s",
		       err.msg);
		snprintf(path, sizeof(path), "%s/a.txt", src);
		tap_is_int(sbx_tar_add_tree(&tar, path, &err), -ENOTDIR, "a file is not a tree");
		tap_ok(tar.len == len, "the buffer is unchanged");
	}
	sbx_buf_release(&tar);
	sbx_buf_release(&again);
}

int main(void)
{
	if (!mkdtemp(tmp))
		tap_bail("mkdtemp");
	test_round_trip();
	test_writer_rejects();
	test_handmade();
	test_reader_errors();
	test_system_tar();
	test_add_tree();
	run("rm -rf %s", tmp);
	return tap_done();
}
