/* SPDX-License-Identifier: MIT */
/*
 * The API keys: the keys file's parser (format in auth-internal.h), the
 * store a running server checks keys against and re-reads when the file
 * changes, and the edits `mcp-sandboxd keys add|revoke|list` make.
 *
 * A key is "msk_" ID "_" SECRET: ID 6 random bytes, SECRET 32, both in
 * lowercase hex. The file keeps SHA-256 of the whole key text, never the
 * key; a check finds the line by ID (binary search) and compares digests
 * with sbx_crypto_equal.
 *
 * The file is trusted only when it is a regular file of this user that no
 * one else may write (not a symbolic link): whoever can write it can let
 * themselves in as any tenant. Edits hold an flock on PATH.lock, write the
 * whole file anew beside it, fsync and rename it into place, so a reader
 * sees either the old file or the new one.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth-internal.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/hostport.h"
#include "sbx/log.h"
#include "sbx/settings.h"

#define KEYS_RELOAD_MS 1000
#define KEYS_SETTLE_MS 300
#define LIMIT_COUNT_MAX 1000000
#define KIB INT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define NANO INT64_C(1000000000)

static const char keys_header[] =
    "# mcp-sandbox API keys (mcp-sandboxd keys add|list|revoke): one key a line,\n"
    "# TENANT KEY_ID SHA256 CREATED [LIMIT=VALUE ...]; the keys themselves are not kept.\n";

/* ---- the format ---- */

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool tenant_valid(const char *s, size_t n)
{
	if (n < 1 || n > SBX_TENANT_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
			return false;
	return true;
}

bool sbx_tenant_valid(const char *name)
{
	return tenant_valid(name, strlen(name));
}

/* "YYYY-MM-DDTHH:MM:SSZ", a real UTC time from 1970 to 9999. */
static int parse_created(const char *s, size_t n, int64_t *ret)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	struct tm tm = {0}, back;
	time_t t;

	if (n != KEYS_CREATED_LEN)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
			return -EINVAL;
#define NUM2(p) ((s[p] - '0') * 10 + (s[p + 1] - '0'))
	tm.tm_year = NUM2(0) * 100 + NUM2(2) - 1900;
	tm.tm_mon = NUM2(5) - 1;
	tm.tm_mday = NUM2(8);
	tm.tm_hour = NUM2(11);
	tm.tm_min = NUM2(14);
	tm.tm_sec = NUM2(17);
#undef NUM2
	if (tm.tm_year < 70)
		return -EINVAL;
	back = tm;
	t = timegm(&back);
	if (t == (time_t)-1 || back.tm_year != tm.tm_year || back.tm_mon != tm.tm_mon ||
	    back.tm_mday != tm.tm_mday || back.tm_hour != tm.tm_hour || back.tm_min != tm.tm_min ||
	    back.tm_sec != tm.tm_sec)
		return -EINVAL;
	*ret = (int64_t)t;
	return 0;
}

static void format_created(int64_t t, char out[KEYS_CREATED_LEN + 1])
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(out, KEYS_CREATED_LEN + 1, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void limits_unset(struct sbx_auth_limits *l)
{
	*l = (struct sbx_auth_limits){-1, -1, -1, -1, -1};
}

static int parse_count(const char *v, int64_t *ret)
{
	int64_t n = 0;

	if (!*v || strlen(v) > 7)
		return -EINVAL;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		n = n * 10 + (*p - '0');
	}
	if (n > LIMIT_COUNT_MAX)
		return -ERANGE;
	*ret = n;
	return 0;
}

/* One "name=value" (NUL-terminated) into L: 0, or -EINVAL with WHY (names
 * only, never the value). */
static int parse_limit(const char *word, struct sbx_auth_limits *l, char *why, size_t n)
{
	const char *eq = strchr(word, '=');
	size_t name_len = eq ? (size_t)(eq - word) : 0;
	const char *v = eq ? eq + 1 : "";
	int64_t *slot, x;
	int r;

#define IS(s) (name_len == sizeof(s) - 1 && memcmp(word, s, name_len) == 0)
	if (IS("sandboxes"))
		slot = &l->sandboxes;
	else if (IS("calls"))
		slot = &l->calls;
	else if (IS("installs"))
		slot = &l->installs;
	else if (IS("memory"))
		slot = &l->memory;
	else if (IS("cpus"))
		slot = &l->nano_cpus;
	else {
		snprintf(why, n,
			 "expected a limit NAME=VALUE, NAME one of sandboxes, calls, memory, cpus, "
			 "installs, egress_allow");
		return -EINVAL;
	}
#undef IS
	if (*slot != -1) {
		snprintf(why, n, "limit %.*s given twice", (int)name_len, word);
		return -EINVAL;
	}
	if (slot == &l->memory) {
		r = sbx_parse_size(v, &x);
		if (r == 0 && x < 6 * MIB)
			r = -ERANGE;
		if (r < 0)
			snprintf(why, n,
				 "memory: expected a size of at least 6m (suffix k, m or g)");
	} else if (slot == &l->nano_cpus) {
		r = sbx_parse_cpus(v, &x);
		if (r == 0 && (x < NANO / 100 || x > 1024 * NANO))
			r = -ERANGE;
		if (r < 0)
			snprintf(why, n, "cpus: expected a number of CPUs in 0.01..1024");
	} else {
		r = parse_count(v, &x);
		if (r < 0)
			snprintf(why, n, "%.*s: expected an integer in 0..%d", (int)name_len, word,
				 LIMIT_COUNT_MAX);
	}
	if (r < 0)
		return -EINVAL;
	*slot = x;
	return 0;
}

/* An egress_allow value V: "none", or 1..KEYS_EGRESS_ENTRIES comma-separated
 * HOST[:PORT] (sbx_hostport_parse with wildcards, as sandbox.egress_allow)
 * within KEYS_EGRESS_LEN bytes. 0, or -EINVAL with WHY. */
static int check_egress(const char *v, char *why, size_t n)
{
	static const char expected[] =
	    "expected none or HOST[:PORT],... as in sandbox.egress_allow, no spaces";
	size_t len = strlen(v), entries = 0;

	if (len == 0) {
		snprintf(why, n, "egress_allow: empty; %s", expected);
		return -EINVAL;
	}
	if (len > KEYS_EGRESS_LEN) {
		snprintf(why, n,
			 "egress_allow: longer than %d bytes; list fewer hosts (*.name "
			 "covers a domain's)",
			 KEYS_EGRESS_LEN);
		return -EINVAL;
	}
	if (strcmp(v, "none") == 0)
		return 0;
	for (const char *p = v;; p++) {
		size_t elen = strcspn(p, ",");
		char host[SBX_HOST_BUF], what[128];
		int port;

		if (++entries > KEYS_EGRESS_ENTRIES) {
			snprintf(why, n,
				 "egress_allow: more than %d hosts; list fewer (*.name "
				 "covers a domain's)",
				 KEYS_EGRESS_ENTRIES);
			return -EINVAL;
		}
		if (sbx_hostport_parse(p, elen, SBX_HOSTPORT_WILDCARD, host, &port, what,
				       sizeof(what)) < 0) {
			snprintf(why, n, "egress_allow: entry %zu: %.80s; %s", entries, what,
				 expected);
			return -EINVAL;
		}
		p += elen;
		if (!*p)
			return 0;
	}
}

/* One "name=value" word of a key's line (NUL-terminated) into K: a limit,
 * or egress_allow. 0, or -EINVAL with WHY; -ENOMEM. */
static int parse_word(const char *word, struct sbx_key *k, char *why, size_t n)
{
	static const char egress[] = "egress_allow=";

	if (strncmp(word, egress, sizeof(egress) - 1) != 0)
		return parse_limit(word, &k->limits, why, n);
	if (k->egress_allow) {
		snprintf(why, n, "egress_allow given twice");
		return -EINVAL;
	}
	if (check_egress(word + sizeof(egress) - 1, why, n) < 0)
		return -EINVAL;
	k->egress_allow = strdup(word + sizeof(egress) - 1);
	if (!k->egress_allow) {
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void format_size(int64_t v, char *out, size_t n)
{
	static const struct {
		const char *suffix;
		int64_t scale;
	} units[] = {{"g", GIB}, {"m", MIB}, {"k", KIB}, {"", 1}};
	size_t i = 0;

	while (i + 1 < SBX_ARRAY_SIZE(units) && v % units[i].scale != 0)
		i++;
	snprintf(out, n, "%" PRId64 "%s", v / units[i].scale, units[i].suffix);
}

static void format_cpus(int64_t v, char *out, size_t n)
{
	char frac[16];
	int len = snprintf(frac, sizeof(frac), "%09" PRId64, v % NANO);

	while (len > 0 && frac[len - 1] == '0')
		frac[--len] = '\0';
	snprintf(out, n, "%" PRId64 "%s%s", v / NANO, len ? "." : "", frac);
}

/* The limits that are set, as " name=value" each, appended to BUF. */
static void format_limits(const struct sbx_auth_limits *l, char *buf, size_t size)
{
	size_t len = strlen(buf);
	char v[32];

	if (l->sandboxes >= 0)
		len += (size_t)snprintf(buf + len, size - len, " sandboxes=%" PRId64, l->sandboxes);
	if (len < size && l->calls >= 0)
		len += (size_t)snprintf(buf + len, size - len, " calls=%" PRId64, l->calls);
	if (len < size && l->memory >= 0) {
		format_size(l->memory, v, sizeof(v));
		len += (size_t)snprintf(buf + len, size - len, " memory=%s", v);
	}
	if (len < size && l->nano_cpus >= 0) {
		format_cpus(l->nano_cpus, v, sizeof(v));
		len += (size_t)snprintf(buf + len, size - len, " cpus=%s", v);
	}
	if (len < size && l->installs >= 0)
		snprintf(buf + len, size - len, " installs=%" PRId64, l->installs);
}

void sbx_key_format(const struct sbx_key *k, bool with_digest, char *buf, size_t size)
{
	char digest[2 * SBX_SHA256_LEN + 2] = "", created[KEYS_CREATED_LEN + 1];

	if (with_digest) {
		sbx_hex_encode(k->digest, sizeof(k->digest), digest);
		strcat(digest, " ");
	}
	format_created(k->created, created);
	snprintf(buf, size, "%s %s %s%s", k->tenant, k->id, digest, created);
	format_limits(&k->limits, buf, size);
	if (k->egress_allow) {
		size_t len = strlen(buf);
		if (len < size)
			snprintf(buf + len, size - len, " egress_allow=%s", k->egress_allow);
	}
}

static int hex_nibble(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* One key line LINE[0..len) (printable ASCII, checked) into K. */
static int parse_key_line(const char *line, size_t len, struct sbx_key *k, char *why, size_t n)
{
	static const char *const names[] = {"tenant", "key id", "SHA-256 digest", "creation time"};
	char word[KEYS_LINE_MAX + 1];
	size_t field = 0;
	int r;

	limits_unset(&k->limits);
	k->egress_allow = NULL;
	for (size_t pos = 0; pos <= len; field++) {
		const char *sp = memchr(line + pos, ' ', len - pos);
		size_t wlen = sp ? (size_t)(sp - line) - pos : len - pos;
		const char *w = line + pos;

		if (wlen == 0) {
			snprintf(why, n, "field %zu is empty (fields are separated by one space)",
				 field + 1);
			r = -EINVAL;
			goto fail;
		}
		pos += wlen + 1;
		switch (field) {
		case 0:
			if (!tenant_valid(w, wlen))
				goto bad_field;
			memcpy(k->tenant, w, wlen);
			k->tenant[wlen] = '\0';
			break;
		case 1:
			if (wlen != SBX_KEY_ID_LEN || !is_lower_hex(w, wlen))
				goto bad_field;
			memcpy(k->id, w, wlen);
			k->id[wlen] = '\0';
			break;
		case 2:
			if (wlen != 2 * SBX_SHA256_LEN || !is_lower_hex(w, wlen))
				goto bad_field;
			for (size_t i = 0; i < SBX_SHA256_LEN; i++)
				k->digest[i] =
				    (uint8_t)(hex_nibble(w[2 * i]) << 4 | hex_nibble(w[2 * i + 1]));
			break;
		case 3:
			if (parse_created(w, wlen, &k->created) < 0)
				goto bad_field;
			break;
		default:
			memcpy(word, w, wlen);
			word[wlen] = '\0';
			r = parse_word(word, k, why, n);
			if (r < 0)
				goto fail;
			break;
		}
	}
	if (field < 4) {
		snprintf(why, n, "expected TENANT KEY_ID SHA256 CREATED [LIMIT=VALUE ...]");
		r = -EINVAL;
		goto fail;
	}
	return 0;
bad_field:
	snprintf(why, n, "bad %s: expected %s", names[field],
		 field == 0   ? "1..64 of A-Z a-z 0-9 _ . -"
		 : field == 1 ? "12 lowercase hex digits"
		 : field == 2 ? "64 lowercase hex digits"
			      : "YYYY-MM-DDTHH:MM:SSZ (UTC)");
	r = -EINVAL;
fail: /* an egress_allow parsed before the failure is dropped */
	free(k->egress_allow);
	k->egress_allow = NULL;
	return r;
}

static int cmp_id(const void *a, const void *b, void *set)
{
	const struct sbx_key *keys = ((const struct sbx_keyset *)set)->keys;

	return strcmp(keys[*(const uint32_t *)a].id, keys[*(const uint32_t *)b].id);
}

/* By tenant, then the keys with an egress_allow first, then by line. */
static int cmp_tenant(const void *a, const void *b, void *set)
{
	const struct sbx_key *keys = ((const struct sbx_keyset *)set)->keys,
			     *x = &keys[*(const uint32_t *)a], *y = &keys[*(const uint32_t *)b];
	int c = strcmp(x->tenant, y->tenant);

	if (c)
		return c;
	if (!x->egress_allow != !y->egress_allow)
		return x->egress_allow ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

struct sbx_keyset *sbx_keyset_free(struct sbx_keyset *set)
{
	if (!set)
		return NULL;
	for (size_t i = 0; i < set->n; i++)
		free(set->keys[i].egress_allow);
	free(set->keys);
	free(set->by_id);
	free(set->by_tenant);
	free(set);
	return NULL;
}

int sbx_keys_parse(const char *text, size_t len, struct sbx_keyset **ret_set, struct sbx_error *err)
{
	struct sbx_keyset *set = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	char why[256];
	int r;

	if (len > KEYS_FILE_MAX)
		return sbx_error_set(err, -EFBIG, "larger than %d bytes", KEYS_FILE_MAX);
	set = calloc(1, sizeof(*set));
	if (!set)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	for (size_t pos = 0; pos < len;) {
		const char *line = text + pos, *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos;

		pos += n + 1;
		lineno++;
		if (n > KEYS_LINE_MAX) {
			r = sbx_error_set(err, -EINVAL, "line %u: longer than %d bytes", lineno,
					  KEYS_LINE_MAX);
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			if (line[i] < 0x20 || line[i] > 0x7e) {
				r = sbx_error_set(err, -EINVAL,
						  "line %u: byte %zu is not printable ASCII "
						  "(no tabs, \\r, control or non-ASCII bytes)",
						  lineno, i + 1);
				goto fail;
			}
		}
		if (n == 0 || line[0] == '#')
			continue;
		if (set->n == KEYS_MAX) {
			r = sbx_error_set(err, -EINVAL, "line %u: more than %d keys", lineno,
					  KEYS_MAX);
			goto fail;
		}
		if (set->n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct sbx_key *k = realloc(set->keys, ncap * sizeof(*k));
			if (!k) {
				r = sbx_error_set(err, -ENOMEM, "out of memory");
				goto fail;
			}
			set->keys = k;
			cap = ncap;
		}
		r = parse_key_line(line, n, &set->keys[set->n], why, sizeof(why));
		if (r < 0) {
			r = sbx_error_set(err, r, "line %u: %s", lineno, why);
			goto fail;
		}
		set->keys[set->n++].line = lineno;
	}
	set->by_id = malloc((set->n ? set->n : 1) * sizeof(*set->by_id));
	set->by_tenant = malloc((set->n ? set->n : 1) * sizeof(*set->by_tenant));
	if (!set->by_id || !set->by_tenant) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < set->n; i++)
		set->by_id[i] = set->by_tenant[i] = (uint32_t)i;
	qsort_r(set->by_id, set->n, sizeof(*set->by_id), cmp_id, set);
	qsort_r(set->by_tenant, set->n, sizeof(*set->by_tenant), cmp_tenant, set);
	for (size_t i = 1; i < set->n; i++) {
		const struct sbx_key *a = &set->keys[set->by_id[i - 1]],
				     *b = &set->keys[set->by_id[i]];
		if (strcmp(a->id, b->id) == 0) {
			r = sbx_error_set(err, -EINVAL, "line %u: key id %s already on line %u",
					  a->line > b->line ? a->line : b->line, a->id,
					  a->line > b->line ? b->line : a->line);
			goto fail;
		}
	}
	/* A tenant has one egress list: its keys that give one agree (those
	 * are first among its keys, so neighbours tell). */
	for (size_t i = 1; i < set->n; i++) {
		const struct sbx_key *a = &set->keys[set->by_tenant[i - 1]],
				     *b = &set->keys[set->by_tenant[i]];
		if (a->egress_allow && b->egress_allow && strcmp(a->tenant, b->tenant) == 0 &&
		    strcmp(a->egress_allow, b->egress_allow) != 0) {
			r = sbx_error_set(err, -EINVAL,
					  "line %u: egress_allow differs from that of tenant %s's "
					  "key on line %u: a tenant has one egress list (give it "
					  "on one of its keys, or the same on each)",
					  b->line, b->tenant, a->line);
			goto fail;
		}
	}
	*ret_set = set;
	return 0;
fail:
	sbx_keyset_free(set);
	return r;
}

/* The index in set->by_tenant of TENANT's first key, or set->n. */
static size_t first_of_tenant(const struct sbx_keyset *set, const char *tenant)
{
	size_t lo = 0, hi = set->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(set->keys[set->by_tenant[mid]].tenant, tenant) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < set->n && strcmp(set->keys[set->by_tenant[lo]].tenant, tenant) == 0)
		return lo;
	return set->n;
}

const char *sbx_keyset_tenant_egress(const struct sbx_keyset *set, const char *tenant)
{
	size_t i = first_of_tenant(set, tenant);

	return i < set->n ? set->keys[set->by_tenant[i]].egress_allow : NULL;
}

bool sbx_keyset_has_tenant(const struct sbx_keyset *set, const char *tenant)
{
	return first_of_tenant(set, tenant) < set->n;
}

const struct sbx_key *sbx_keyset_find(const struct sbx_keyset *set, const char *id)
{
	size_t lo = 0, hi = set->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct sbx_key *k = &set->keys[set->by_id[mid]];
		int c = strcmp(id, k->id);
		if (c == 0)
			return k;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* ---- reading the file safely ---- */

/* 0 when ST (of PATH) is a file the keys may come from, else -EPERM in ERR. */
static int file_safe(const struct stat *st, const char *path, struct sbx_error *err)
{
	if (!S_ISREG(st->st_mode))
		return sbx_error_set(err, -EPERM, "%s is not a regular file: refused", path);
	if (st->st_uid != geteuid())
		return sbx_error_set(err, -EPERM,
				     "%s belongs to uid %lu, not to this user (uid %lu): refused "
				     "(whoever owns it can let anyone in; run as its owner, or "
				     "chown it)",
				     path, (unsigned long)st->st_uid, (unsigned long)geteuid());
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return sbx_error_set(err, -EPERM,
				     "%s is writable by %s (mode %04o): refused (anyone who can "
				     "write it can let themselves in; chmod go-w it)",
				     path, st->st_mode & S_IWOTH ? "everyone" : "its group",
				     (unsigned)(st->st_mode & 07777));
	return 0;
}

/* Reads PATH (safe, bounded) into OUT with its stat in *RET_ST: 0, -ENOENT
 * (named in ERR), or another negative errno in ERR. */
static int read_keys_file(const char *path, struct sbx_buf *out, struct stat *ret_st,
			  struct sbx_error *err)
{
	_cleanup_close_ int fd = -1;
	char chunk[16384];
	int r;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		return sbx_error_set(err, -EPERM,
				     "%s is a symbolic link: refused (the keys file is to be a "
				     "regular file of the server's user)",
				     path);
	if (fd < 0)
		return sbx_error_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, ret_st) < 0)
		return sbx_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = file_safe(ret_st, path, err);
	if (r < 0)
		return r;
	if (ret_st->st_size > KEYS_FILE_MAX)
		return sbx_error_set(err, -EFBIG, "%s: larger than %d bytes", path, KEYS_FILE_MAX);
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_error_set(err, -errno, "%s: %s", path, strerror(errno));
		if (n == 0)
			return 0;
		if (out->len + (size_t)n > KEYS_FILE_MAX)
			return sbx_error_set(err, -EFBIG, "%s: larger than %d bytes", path,
					     KEYS_FILE_MAX);
		r = sbx_buf_append(out, chunk, (size_t)n);
		if (r < 0)
			return sbx_error_set(err, r, "%s: out of memory", path);
	}
}

/* Reads and parses PATH; -ENOENT when it does not exist. */
static int load_keys(const char *path, struct sbx_buf *text, struct stat *ret_st,
		     struct sbx_keyset **ret_set, struct sbx_error *err)
{
	int r = read_keys_file(path, text, ret_st, err);

	if (r < 0)
		return r;
	r = sbx_keys_parse(text->data, text->len, ret_set, err);
	if (r < 0)
		return sbx_error_prefix(err, "%s", path);
	return 0;
}

/* ---- the store ---- */

struct stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

struct sbx_keystore {
	char *path;
	pthread_rwlock_t lock; /* guards set and broken */
	struct sbx_keyset *set;
	/* Why the file cannot be used now ("" when it can): then no key is
	 * accepted (the keys read before are not trusted either: the edit that
	 * broke the file may have been a revocation). */
	char broken[SBX_ERROR_MSG_MAX];
	/* Bumped at every change of what is accepted (keys swapped, the file
	 * broken or mended). */
	atomic_uint_fast64_t generation;
	pthread_mutex_t reload_lock; /* guards the stamps; one re-read at a time */
	struct stamp loaded;	     /* the file the keys came from (or the failure logged) */
	_Atomic int64_t next_check_ms;
};

static struct stamp stamp_of(const struct stat *st)
{
	return (struct stamp){st->st_dev, st->st_ino, st->st_size, st->st_mtim, st->st_ctim};
}

static bool stamp_equal(const struct stamp *a, const struct stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* SET (NULL: keep the keys) becomes what is accepted, or nothing while
 * BROKEN (NULL: the file is fine) says why. */
static void store_swap(struct sbx_keystore *store, struct sbx_keyset *set, const char *broken)
{
	struct sbx_keyset *old = NULL;

	pthread_rwlock_wrlock(&store->lock);
	if (set) {
		old = store->set;
		store->set = set;
	}
	snprintf(store->broken, sizeof(store->broken), "%s", broken ? broken : "");
	atomic_fetch_add(&store->generation, 1);
	pthread_rwlock_unlock(&store->lock);
	sbx_keyset_free(old);
}

/* Re-reads the file when it changed. A file that vanished takes every key
 * away. One that cannot be read, is not safe or does not parse fails
 * closed: no key is accepted until it is mended (the edit that broke it may
 * have been a revocation), and the log and GET /ready say why; one log line
 * per change of the file. */
static void store_refresh(struct sbx_keystore *store)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf text = SBX_BUF_INIT;
	struct sbx_keyset *set = NULL;
	struct stamp now;
	struct stat st;
	int64_t t = sbx_monotonic_ms();
	int r;

	if (t < atomic_load(&store->next_check_ms) || pthread_mutex_trylock(&store->reload_lock))
		return; /* checked lately, or another thread is at it */
	atomic_store(&store->next_check_ms, t + KEYS_RELOAD_MS);
	if (lstat(store->path, &st) < 0) {
		struct stamp gone = {0};
		if (errno != ENOENT) {
			/* Cannot be looked at: fail closed too. */
			char why[SBX_ERROR_MSG_MAX];
			snprintf(why, sizeof(why), "%s: %s", store->path, strerror(errno));
			if (strcmp(why, store->broken) != 0) {
				sbx_log_error("%s; no API key is accepted until it is mended", why);
				store_swap(store, NULL, why);
			}
			store->loaded = gone;
			goto out;
		}
		if (!stamp_equal(&store->loaded, &gone)) {
			sbx_log_error("%s: removed: no API key is accepted until it is back",
				      store->path);
			store->loaded = gone;
			r = sbx_keys_parse("", 0, &set, &err);
			if (r == 0)
				store_swap(store, set, NULL);
		}
		goto out;
	}
	now = stamp_of(&st);
	if (stamp_equal(&now, &store->loaded))
		goto out;
	/* Changed within the last KEYS_SETTLE_MS: it may be mid-write (cp or
	 * an editor truncates, then writes; `keys` itself renames a whole
	 * file into place). Looked at again then, so that a half-written
	 * file neither ends every session nor breaks the keys for a moment. */
	{
		struct timespec wall;
		int64_t age_ms;
		clock_gettime(CLOCK_REALTIME, &wall);
		age_ms = (int64_t)(wall.tv_sec - st.st_mtim.tv_sec) * 1000 +
			 (wall.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
		if (age_ms >= 0 && age_ms < KEYS_SETTLE_MS) {
			atomic_store(&store->next_check_ms, t + KEYS_SETTLE_MS - age_ms);
			goto out;
		}
	}
	r = load_keys(store->path, &text, &st, &set, &err);
	if (r < 0) {
		sbx_log_error("%s; no API key is accepted until it is mended", err.msg);
		store->loaded = now;
		store_swap(store, NULL, err.msg);
		goto out;
	}
	store->loaded = stamp_of(&st);
	sbx_log("%s: %zu API key%s", store->path, set->n, set->n == 1 ? "" : "s");
	store_swap(store, set, NULL);
out:
	sbx_buf_release(&text);
	pthread_mutex_unlock(&store->reload_lock);
}

int sbx_keystore_open(const char *path, struct sbx_keystore **ret_store, struct sbx_error *err)
{
	struct sbx_buf text = SBX_BUF_INIT;
	struct sbx_keystore *store;
	struct stat st;
	int r;

	store = calloc(1, sizeof(*store));
	if (!store || !(store->path = strdup(path))) {
		free(store);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_rwlock_init(&store->lock, NULL);
	pthread_mutex_init(&store->reload_lock, NULL);
	r = load_keys(path, &text, &st, &store->set, err);
	sbx_buf_release(&text);
	if (r == -ENOENT)
		sbx_error_prefix(err, "keys file (make it with mcp-sandboxd keys add TENANT)");
	if (r < 0) {
		sbx_keystore_free(store);
		return r;
	}
	store->loaded = stamp_of(&st);
	atomic_init(&store->next_check_ms, sbx_monotonic_ms() + KEYS_RELOAD_MS);
	atomic_init(&store->generation, 1);
	*ret_store = store;
	return 0;
}

struct sbx_keystore *sbx_keystore_free(struct sbx_keystore *store)
{
	if (!store)
		return NULL;
	sbx_keyset_free(store->set);
	pthread_rwlock_destroy(&store->lock);
	pthread_mutex_destroy(&store->reload_lock);
	free(store->path);
	free(store);
	return NULL;
}

/* KEY has the shape of an API key: "msk_" 12 hex "_" 64 hex. */
static bool key_shape(const char *key, size_t len)
{
	return len == SBX_API_KEY_LEN && memcmp(key, "msk_", 4) == 0 &&
	       is_lower_hex(key + 4, SBX_KEY_ID_LEN) && key[4 + SBX_KEY_ID_LEN] == '_' &&
	       is_lower_hex(key + 5 + SBX_KEY_ID_LEN, SBX_API_KEY_LEN - 5 - SBX_KEY_ID_LEN);
}

int sbx_keystore_verify(struct sbx_keystore *store, const char *key, size_t len,
			struct sbx_principal *ret, struct sbx_error *err)
{
	uint8_t digest[SBX_SHA256_LEN];
	char id[SBX_KEY_ID_LEN + 1];
	const struct sbx_key *k;
	int r;

	if (!key_shape(key, len))
		return sbx_error_set(err, -EACCES,
				     "malformed API key (expected msk_ID_SECRET, as "
				     "mcp-sandboxd keys add prints it)");
	memcpy(id, key + 4, SBX_KEY_ID_LEN);
	id[SBX_KEY_ID_LEN] = '\0';
	r = sbx_sha256(key, len, digest);
	if (r < 0)
		return sbx_error_set(err, r, "cannot check the API key");
	store_refresh(store);
	pthread_rwlock_rdlock(&store->lock);
	k = store->broken[0] ? NULL : sbx_keyset_find(store->set, id);
	if (store->broken[0]) {
		r = sbx_error_set(err, -EIO, "%s", store->broken);
	} else if (k && sbx_crypto_equal(k->digest, digest, sizeof(digest))) {
		*ret =
		    (struct sbx_principal){.method = SBX_AUTH_METHOD_API_KEY, .limits = k->limits};
		memcpy(ret->tenant, k->tenant, sizeof(ret->tenant));
		memcpy(ret->key_id, k->id, sizeof(ret->key_id));
		r = 0;
	} else {
		r = sbx_error_set(err, -EACCES, "API key not accepted (unknown, wrong or revoked)");
	}
	pthread_rwlock_unlock(&store->lock);
	return r;
}

uint64_t sbx_keystore_refresh(struct sbx_keystore *store)
{
	store_refresh(store);
	return atomic_load(&store->generation);
}

int sbx_keystore_key_state(struct sbx_keystore *store, const char *tenant, const char *id,
			   struct sbx_auth_limits *ret_limits)
{
	const struct sbx_key *k;
	int r;

	pthread_rwlock_rdlock(&store->lock);
	if (store->broken[0]) {
		r = -EIO;
	} else {
		k = sbx_keyset_find(store->set, id);
		r = k && (!tenant || strcmp(k->tenant, tenant) == 0) ? 0 : -EKEYREVOKED;
		if (r == 0 && ret_limits)
			*ret_limits = k->limits;
	}
	pthread_rwlock_unlock(&store->lock);
	return r;
}

int sbx_keystore_tenant_egress(struct sbx_keystore *store, const char *tenant, char *buf,
			       size_t size)
{
	const char *v;
	int r = 0;

	pthread_rwlock_rdlock(&store->lock);
	if (store->broken[0]) {
		r = -EIO;
	} else {
		/* A tenant with no key left (all revoked) reaches no host: its
		 * sandboxes' code may still run, and must not gain the server's
		 * list in place of its own. */
		v = sbx_keyset_has_tenant(store->set, tenant)
			? sbx_keyset_tenant_egress(store->set, tenant)
			: "none";
		if (v)
			r = (size_t)snprintf(buf, size, "%s", v) < size ? 1 : -ENOBUFS;
	}
	pthread_rwlock_unlock(&store->lock);
	return r;
}

int sbx_keystore_status(struct sbx_keystore *store, struct sbx_error *err)
{
	int r = 0;

	pthread_rwlock_rdlock(&store->lock);
	if (store->broken[0])
		r = sbx_error_set(err, -EIO, "%s", store->broken);
	pthread_rwlock_unlock(&store->lock);
	return r;
}

/* ---- edits: keys add, revoke, list ---- */

/* Holds PATH.lock (an flock, blocking) for an edit: the fd, or < 0 in ERR. */
static int edit_lock(const char *path, struct sbx_error *err)
{
	_cleanup_free_ char *lock = NULL;
	struct stat st;
	int fd;

	if (asprintf(&lock, "%s.lock", path) < 0) {
		lock = NULL;
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0600);
	if (fd < 0 && errno == ELOOP)
		return sbx_error_set(err, -EPERM, "%s is a symbolic link: refused", lock);
	if (fd < 0)
		return sbx_error_set(err, -errno, "%s: %s", lock, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		return sbx_error_set(err, -EPERM, "%s is not a regular file of this user: refused",
				     lock);
	}
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			return sbx_error_set(err, -e, "lock %s: %s", lock, strerror(e));
		}
	}
	return fd;
}

/* Writes TEXT as PATH's new content: a temporary file in its folder,
 * fsync'd, renamed over PATH, then the folder fsync'd. MODE for the file. */
static int replace_file(const char *path, const char *text, size_t len, mode_t mode,
			struct sbx_error *err)
{
	_cleanup_free_ char *dir_copy = strdup(path), *base_copy = strdup(path), *tmp = NULL;
	const char *dir, *base;
	int fd, dfd, r = 0;

	if (!dir_copy || !base_copy)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	dir = dirname(dir_copy);
	base = basename(base_copy);
	if (asprintf(&tmp, "%s/.%s.XXXXXX", dir, base) < 0) {
		tmp = NULL;
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return sbx_error_set(err, -errno, "create a file in %s: %s", dir, strerror(errno));
	for (size_t off = 0; off < len && r == 0;) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno != EINTR)
			r = -errno;
		else if (n > 0)
			off += (size_t)n;
	}
	if (r == 0 && fchmod(fd, mode) < 0)
		r = -errno;
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return sbx_error_set(err, r, "write %s: %s", path, strerror(-r));
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

/* The file as it is for an edit: its text, keys and mode; an absent file
 * is empty (mode 0600). */
static int edit_read(const char *path, struct sbx_buf *text, struct sbx_keyset **ret_set,
		     mode_t *ret_mode, struct sbx_error *err)
{
	struct stat st;
	int r = load_keys(path, text, &st, ret_set, err);

	if (r == -ENOENT) {
		sbx_error_clear(err);
		text->len = 0;
		*ret_mode = 0600;
		return sbx_keys_parse("", 0, ret_set, err);
	}
	if (r < 0)
		return r == -EINVAL ? -EBADMSG : r;
	*ret_mode = st.st_mode & 0755;
	return 0;
}

/* The start of an edit: the lock taken (into *RET_LOCK, for the caller to
 * close), then the file read as edit_read does. */
static int edit_begin(const char *path, int *ret_lock, struct sbx_buf *text,
		      struct sbx_keyset **ret_set, mode_t *ret_mode, struct sbx_error *err)
{
	*ret_lock = edit_lock(path, err);
	if (*ret_lock < 0)
		return *ret_lock;
	return edit_read(path, text, ret_set, ret_mode, err);
}

int sbx_keys_add(const char *path, const char *tenant, char *const *limits, size_t n,
		 char ret_key[SBX_API_KEY_LEN + 1], struct sbx_error *err)
{
	struct sbx_buf text = SBX_BUF_INIT;
	struct sbx_keyset *set = NULL;
	struct sbx_key k = {0};
	uint8_t raw[SBX_KEY_ID_LEN / 2 + 32];
	char key[SBX_API_KEY_LEN + 1], line[KEYS_LINE_MAX + 2], why[256];
	_cleanup_close_ int lock = -1;
	mode_t mode;
	int r;

	if (!sbx_tenant_valid(tenant))
		return sbx_error_set(err, -EINVAL,
				     "bad tenant name: expected 1..64 of A-Z a-z 0-9 _ . -");
	snprintf(k.tenant, sizeof(k.tenant), "%s", tenant);
	limits_unset(&k.limits);
	for (size_t i = 0; i < n; i++) {
		r = parse_word(limits[i], &k, why, sizeof(why));
		if (r < 0) {
			r = sbx_error_set(err, r, "%s", why);
			goto out;
		}
	}
	r = edit_begin(path, &lock, &text, &set, &mode, err);
	if (r < 0)
		goto out;
	if (set->n >= KEYS_MAX) {
		r = sbx_error_set(err, -ENOSPC, "%s: holds %d keys already", path, KEYS_MAX);
		goto out;
	}
	do {
		r = sbx_random_bytes(raw, sizeof(raw));
		if (r < 0) {
			r = sbx_error_set(err, r, "no random bytes");
			goto out;
		}
		sbx_hex_encode(raw, SBX_KEY_ID_LEN / 2, k.id);
	} while (sbx_keyset_find(set, k.id));
	memcpy(key, "msk_", 4);
	memcpy(key + 4, k.id, SBX_KEY_ID_LEN);
	key[4 + SBX_KEY_ID_LEN] = '_';
	sbx_hex_encode(raw + SBX_KEY_ID_LEN / 2, 32, key + 5 + SBX_KEY_ID_LEN);
	explicit_bzero(raw, sizeof(raw));
	r = sbx_sha256(key, SBX_API_KEY_LEN, k.digest);
	if (r < 0) {
		r = sbx_error_set(err, r, "SHA-256 failed");
		goto out;
	}
	k.created = (int64_t)time(NULL);
	sbx_key_format(&k, true, line, sizeof(line));
	strcat(line, "\n");
	r = 0;
	if (text.len == 0)
		r = sbx_buf_append(&text, keys_header, strlen(keys_header));
	else if (text.data[text.len - 1] != '\n')
		r = sbx_buf_append(&text, "\n", 1);
	if (r == 0)
		r = sbx_buf_append(&text, line, strlen(line));
	if (r < 0) {
		r = sbx_error_set(err, r, "out of memory");
		goto out;
	}
	/* What a server will read: the new line must parse with the rest. */
	set = sbx_keyset_free(set);
	r = sbx_keys_parse(text.data, text.len, &set, err);
	if (r < 0) {
		sbx_error_prefix(err, "%s with the new key", path);
		r = err ? (err->code = -EBADMSG) : -EBADMSG;
		goto out;
	}
	r = replace_file(path, text.data, text.len, mode, err);
	if (r == 0)
		memcpy(ret_key, key, sizeof(key));
out:
	explicit_bzero(key, sizeof(key));
	free(k.egress_allow);
	sbx_keyset_free(set);
	sbx_buf_release(&text);
	return r;
}

int sbx_keys_revoke(const char *path, const char *tenant, const char *key_id, FILE *out,
		    size_t *ret_count, struct sbx_error *err)
{
	struct sbx_buf text = SBX_BUF_INIT, kept = SBX_BUF_INIT;
	struct sbx_keyset *set = NULL;
	_cleanup_close_ int lock = -1;
	size_t count = 0, next = 0;
	unsigned lineno = 0;
	mode_t mode;
	int r;

	if (tenant && !sbx_tenant_valid(tenant))
		return sbx_error_set(err, -EINVAL,
				     "bad tenant name: expected 1..64 of A-Z a-z 0-9 _ . -");
	if (key_id && (strlen(key_id) != SBX_KEY_ID_LEN || !is_lower_hex(key_id, SBX_KEY_ID_LEN)))
		return sbx_error_set(err, -EINVAL, "bad key id: expected 12 lowercase hex digits");
	r = edit_begin(path, &lock, &text, &set, &mode, err);
	if (r < 0)
		goto out;
	/* Keep every line but the revoked keys' (comments stay). */
	for (size_t pos = 0; pos < text.len; lineno++) {
		const char *line = text.data + pos, *nl = memchr(line, '\n', text.len - pos);
		size_t n = nl ? (size_t)(nl - line) + 1 : text.len - pos;
		const struct sbx_key *k =
		    next < set->n && set->keys[next].line == lineno + 1 ? &set->keys[next++] : NULL;

		pos += n;
		if (k && ((tenant && strcmp(k->tenant, tenant) == 0) ||
			  (key_id && strcmp(k->id, key_id) == 0))) {
			count++;
			if (out)
				fprintf(out, "revoked %s (%s)\n", k->id, k->tenant);
			continue;
		}
		r = sbx_buf_append(&kept, line, n);
		if (r < 0) {
			r = sbx_error_set(err, r, "out of memory");
			goto out;
		}
	}
	if (count == 0) {
		r = sbx_error_set(err, -ENOENT, "no key %s %s in %s",
				  tenant ? "of tenant" : "with id", tenant ? tenant : key_id, path);
		goto out;
	}
	r = replace_file(path, kept.data ? kept.data : "", kept.len, mode, err);
	if (r == 0)
		*ret_count = count;
out:
	sbx_keyset_free(set);
	sbx_buf_release(&text);
	sbx_buf_release(&kept);
	return r;
}

int sbx_keys_list(const char *path, FILE *out, struct sbx_error *err)
{
	struct sbx_buf text = SBX_BUF_INIT;
	struct sbx_keyset *set = NULL;
	struct stat st;
	char line[KEYS_LINE_MAX + 1];
	int r = load_keys(path, &text, &st, &set, err);

	sbx_buf_release(&text);
	if (r == -ENOENT) {
		sbx_error_clear(err);
		return 0;
	}
	if (r < 0)
		return r == -EINVAL ? (err ? (err->code = -EBADMSG) : -EBADMSG) : r;
	for (size_t i = 0; i < set->n; i++) {
		sbx_key_format(&set->keys[i], false, line, sizeof(line));
		fprintf(out, "%s\n", line);
	}
	sbx_keyset_free(set);
	return 0;
}
