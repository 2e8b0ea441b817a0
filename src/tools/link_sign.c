/* SPDX-License-Identifier: MIT */
/*
 * Signed, expiring artifact links: the secret (kept in the state folder,
 * else made per process), the signature of a link and its check. The tools
 * sign every link they hand out (artifact_link.c builds the URL); the
 * artifact route checks it before it looks the sandbox up.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/artifact.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

struct sbx_link_key {
	uint8_t secret[SBX_LINK_SECRET_LEN];
	bool persistent;
};

/* Reads the secret from the open file FD (PATH in messages) after checking
 * it: a regular file of ours, mode 0600, exactly SBX_LINK_SECRET_LEN bytes. */
static int secret_read(int fd, const char *path, uint8_t *out, struct sbx_error *err)
{
	struct stat st;
	size_t got = 0;

	if (fstat(fd, &st) < 0)
		return sbx_error_set(err, -errno, "link secret %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600 ||
	    st.st_size != SBX_LINK_SECRET_LEN)
		return sbx_error_set(
		    err, -EPERM,
		    "link secret %s: refused: it must be a regular file of this server's user "
		    "(uid %lu), mode 0600, of exactly %d bytes (it is %s, uid %lu, mode %04o, "
		    "%lld bytes); remove it to have a new one made (links handed out so far then "
		    "stop working)",
		    path, (unsigned long)geteuid(), SBX_LINK_SECRET_LEN,
		    S_ISREG(st.st_mode) ? "a regular file" : "no regular file",
		    (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777),
		    (long long)st.st_size);
	while (got < SBX_LINK_SECRET_LEN) {
		ssize_t n = read(fd, out + got, SBX_LINK_SECRET_LEN - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sbx_error_set(err, n < 0 ? -errno : -EIO, "link secret %s: %s", path,
					     n < 0 ? strerror(errno) : "short read");
		got += (size_t)n;
	}
	return 0;
}

/* Makes PATH with a new secret (O_CREAT|O_EXCL, 0600); -EEXIST when it
 * appeared meanwhile. */
static int secret_make(const char *path, uint8_t *out, struct sbx_error *err)
{
	int fd, r = 0;
	size_t done = 0;

	if (sbx_random_bytes(out, SBX_LINK_SECRET_LEN) < 0)
		return sbx_error_set(err, -EIO, "link secret: no random bytes");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == EEXIST
			   ? -EEXIST
			   : sbx_error_set(err, -errno, "link secret %s: cannot make it: %s", path,
					   strerror(errno));
	if (fchmod(fd, 0600) < 0)
		r = -errno;
	while (r == 0 && done < SBX_LINK_SECRET_LEN) {
		ssize_t n = write(fd, out + done, SBX_LINK_SECRET_LEN - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r < 0) {
		unlink(path);
		return sbx_error_set(err, r, "link secret %s: cannot write it: %s", path,
				     strerror(-r));
	}
	return 0;
}

int sbx_link_key_open(const char *dir, sbx_link_key **ret_key, struct sbx_error *err)
{
	_cleanup_free_ char *path = NULL;
	sbx_link_key *k = calloc(1, sizeof(*k));
	int r;

	if (!k)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (!dir || !*dir) {
		if (sbx_random_bytes(k->secret, sizeof(k->secret)) < 0) {
			free(k);
			return sbx_error_set(err, -EIO, "link secret: no random bytes");
		}
		*ret_key = k;
		return 0;
	}
	if (asprintf(&path, "%s/%s", dir, SBX_LINK_SECRET_FILE) < 0) {
		path = NULL;
		free(k);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	for (int tries = 0;; tries++) {
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0) {
			r = secret_read(fd, path, k->secret, err);
			close(fd);
			break;
		}
		if (errno == ELOOP) {
			r = sbx_error_set(
			    err, -EPERM,
			    "link secret %s is a symbolic link: refused (it is to be a "
			    "regular file of this server's user, mode 0600)",
			    path);
			break;
		}
		if (errno != ENOENT || tries > 0) {
			r = sbx_error_set(err, -errno, "link secret %s: %s", path, strerror(errno));
			break;
		}
		r = secret_make(path, k->secret, err);
		if (r != -EEXIST) /* made (or failed); else another made it: read that */
			break;
	}
	if (r < 0) {
		explicit_bzero(k->secret, sizeof(k->secret));
		free(k);
		return r;
	}
	k->persistent = true;
	*ret_key = k;
	return 0;
}

sbx_link_key *sbx_link_key_free(sbx_link_key *k)
{
	if (k) {
		explicit_bzero(k->secret, sizeof(k->secret));
		free(k);
	}
	return NULL;
}

bool sbx_link_key_persistent(const sbx_link_key *k)
{
	return k && k->persistent;
}

/* KID as a link may carry it: "" or SBX_KEY_ID_LEN lowercase hex digits. */
static bool kid_valid(const char *kid)
{
	size_t n = strlen(kid);

	return n == 0 || (n == SBX_KEY_ID_LEN && strspn(kid, "0123456789abcdef") == n);
}

int sbx_link_sign(const sbx_link_key *k, const char *sandbox_id, const char *relpath,
		  const char *kid, int64_t exp, char out[SBX_LINK_SIG_LEN + 1])
{
	struct sbx_buf msg = SBX_BUF_INIT;
	uint8_t mac[SBX_SHA256_LEN];
	char num[24];
	_cleanup_free_ char *b64 = NULL;
	size_t n = 0;
	int r;

	/* The id ends at the first newline: one holding one would make two
	 * (id, path) pairs sign alike. Ids never hold one. */
	if (!k || exp < 0 || strchr(sandbox_id, '\n') || !kid || !kid_valid(kid))
		return -EINVAL;
	snprintf(num, sizeof(num), "%" PRId64, exp);
	r = sbx_buf_append(&msg, "v2\n", 3);
	if (r == 0)
		r = sbx_buf_append(&msg, sandbox_id, strlen(sandbox_id));
	if (r == 0)
		r = sbx_buf_append(&msg, "\n", 1);
	if (r == 0)
		r = sbx_buf_append(&msg, relpath, strlen(relpath));
	if (r == 0)
		r = sbx_buf_append(&msg, "\n", 1);
	if (r == 0)
		r = sbx_buf_append(&msg, num, strlen(num));
	if (r == 0)
		r = sbx_buf_append(&msg, "\n", 1);
	if (r == 0)
		r = sbx_buf_append(&msg, kid, strlen(kid));
	if (r == 0)
		r = sbx_hmac_sha256(k->secret, sizeof(k->secret), msg.data, msg.len, mac);
	sbx_buf_release(&msg);
	if (r < 0)
		return r;
	b64 = sbx_base64_encode(mac, sizeof(mac));
	if (!b64)
		return -ENOMEM;
	/* base64url, unpadded (RFC 4648 section 5). */
	for (const char *p = b64; *p && *p != '=' && n < SBX_LINK_SIG_LEN; p++)
		out[n++] = *p == '+' ? '-' : *p == '/' ? '_' : *p;
	out[n] = '\0';
	return n == SBX_LINK_SIG_LEN ? 0 : -EIO;
}

char *sbx_artifact_link(const sbx_link_key *k, const char *public_url, const char *sandbox_id,
			const char *relpath, const char *kid, int64_t exp)
{
	_cleanup_free_ char *url = NULL;
	char sig[SBX_LINK_SIG_LEN + 1], *out;

	if (sbx_link_sign(k, sandbox_id, relpath, kid, exp, sig) < 0)
		return NULL;
	url = sbx_artifact_url(public_url, sandbox_id, relpath);
	if (!url || asprintf(&out, "%s?exp=%" PRId64 "%s%s&sig=%s", url, exp, *kid ? "&kid=" : "",
			     kid, sig) < 0)
		return NULL;
	return out;
}

/* EXP as a link carries it: 1 to 18 digits, no leading zero. */
static bool exp_parse(const char *s, int64_t *ret)
{
	size_t n = s ? strlen(s) : 0;
	int64_t v = 0;

	if (n < 1 || n > 18 || strspn(s, "0123456789") != n || (s[0] == '0' && n > 1))
		return false;
	for (size_t i = 0; i < n; i++)
		v = v * 10 + (s[i] - '0');
	*ret = v;
	return true;
}

int sbx_link_verify(const sbx_link_key *k, const char *sandbox_id, const char *relpath,
		    const char *kid, const char *exp, const char *sig, int64_t now)
{
	char want[SBX_LINK_SIG_LEN + 1];
	int64_t e;
	bool ok;

	if (!k || !sig || !exp_parse(exp, &e) || strlen(sig) != SBX_LINK_SIG_LEN)
		return -EACCES;
	/* A link without kid= signed ""; one with an empty or malformed kid= is
	 * no link of ours. */
	if (kid && (!*kid || !kid_valid(kid)))
		return -EACCES;
	if (sbx_link_sign(k, sandbox_id, relpath, kid ? kid : "", e, want) < 0)
		return -EACCES;
	ok = sbx_crypto_equal(want, sig, SBX_LINK_SIG_LEN);
	explicit_bzero(want, sizeof(want));
	if (!ok)
		return -EACCES;
	return e < now ? -EKEYEXPIRED : 0;
}
