/* SPDX-License-Identifier: MIT */
/*
 * GET/HEAD /artifacts/<sandbox_id>/<relpath>: a file under /app/results of
 * a sandbox, streamed from the engine as it comes. The handler opens it
 * (sbx_artifact_open: one exec in the sandbox as its own user, which tells
 * the size for Content-Length); a producer thread runs sbx_artifact_stream
 * into one end of a socket pair; MHD's content reader reads the other end in
 * the connection's thread. Nothing is stored on the host and at most a
 * socket buffer of the body is held in memory. HEAD starts no producer.
 *
 * Status, checked in this order: 400 malformed path; 403 a link that is not
 * signed by this server for this sandbox id, path and expiry (its query is
 * exp=UNIX_SECONDS[&kid=KEY_ID]&sig=SIG and nothing else; see
 * sbx_link_verify), whose expiry has passed, or, with API keys checked,
 * whose key (kid) is no longer accepted (503 when that cannot be told now:
 * the keys file is broken); then 404 unknown sandbox or missing file, 403 a refused
 * path (-EPERM), 502 the engine answered with an error, 503 the engine cannot
 * be reached. A link without a query is served unsigned only with
 * server.unsigned_links while no API keys are checked.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "http-internal.h"
#include "sbx/log.h"
#include "sbx/artifact.h"
#include "sbx/common.h"
#include "sbx/metrics.h"

struct artifact_stream {
	sbx_manager *manager;
	sbx_sandbox *sandbox;
	sbx_artifact *artifact; /* open: one exec in the sandbox, its size read */
	char *relpath;
	int64_t size;
	int fds[2]; /* [0] read by MHD, [1] written by the producer */
	bool started;
	pthread_t producer;
};

static int sink(void *userdata, const void *data, size_t len)
{
	int fd = *(int *)userdata;
	const char *p = data;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EPIPE; /* the client went away */
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void *produce(void *arg)
{
	struct artifact_stream *st = arg;
	struct sbx_error err = SBX_ERROR_INIT;

	sbx_artifact_stream(st->artifact, sink, &st->fds[1], &err);
	/* EOF for the reader; a short body makes it end with an error. */
	shutdown(st->fds[1], SHUT_WR);
	return NULL;
}

static ssize_t artifact_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct artifact_stream *st = cls;
	ssize_t n;

	if (!st->started) {
		if (pthread_create(&st->producer, NULL, produce, st) != 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		st->started = true;
	}
	do
		n = recv(st->fds[0], buf, max, 0);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		sbx_metrics_artifact_bytes((uint64_t)n);
		return n;
	}
	/* EOF or error before the announced length: cut the response. */
	return (int64_t)pos >= st->size ? MHD_CONTENT_READER_END_OF_STREAM
					: MHD_CONTENT_READER_END_WITH_ERROR;
}

static void artifact_free(void *cls)
{
	struct artifact_stream *st = cls;

	/* Closing our end makes the producer's next send fail: it stops. */
	if (st->fds[0] >= 0)
		shutdown(st->fds[0], SHUT_RDWR);
	if (st->started)
		pthread_join(st->producer, NULL);
	if (st->fds[0] >= 0)
		close(st->fds[0]);
	if (st->fds[1] >= 0)
		close(st->fds[1]);
	sbx_artifact_close(st->artifact);
	sbx_sandbox_unref(st->sandbox);
	free(st->relpath);
	free(st);
}

/* The query of an artifact link: exp and sig once each, kid at most once,
 * nothing else. */
struct link_query {
	const char *exp, *sig, *kid;
	unsigned n, other;
};

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *value)
{
	struct link_query *q = cls;
	const char **slot = !strcmp(key, "exp")	  ? &q->exp
			    : !strcmp(key, "sig") ? &q->sig
			    : !strcmp(key, "kid") ? &q->kid
						  : NULL;

	(void)kind;
	q->n++;
	if (!slot || *slot || !value)
		q->other++; /* unknown, repeated or without a value */
	else
		*slot = value;
	return MHD_YES;
}

/* 0 when the request may have the file of sandbox ID at RELPATH; else the
 * 403 has been queued in *ret. */
static int link_check(struct sbx_http_request *rq, const char *id, const char *relpath,
		      enum MHD_Result *ret)
{
	struct sbx_http *h = rq->http;
	struct link_query q = {0};
	int r;

	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, query_arg, &q);
	if (q.n == 0 && h->settings->server.unsigned_links &&
	    !(h->auth && sbx_auth_checks_keys(h->auth)))
		return 0;
	r = q.other ? -EACCES
		    : sbx_link_verify(h->link_key, id, relpath, q.kid, q.exp, q.sig,
				      (int64_t)time(NULL));
	/* With keys checked, a link lives only as long as the key whose
	 * session made it (one made with auth off, without kid, not at all). */
	if (r == 0 && h->auth && sbx_auth_checks_keys(h->auth))
		r = q.kid ? sbx_auth_key_id_live(h->auth, q.kid) : -EKEYREVOKED;
	if (r == 0)
		return 0;
	if (r == -EIO) {
		*ret = sbx_http_respond_error_with(rq, MHD_HTTP_SERVICE_UNAVAILABLE,
						   "the link could not be checked now; retry",
						   (const char *const[]){"Retry-After", "1", NULL});
		return r;
	}
	/* Which part failed is not said: only whether a link of ours ended. */
	*ret = sbx_http_respond_error(
	    rq, MHD_HTTP_FORBIDDEN,
	    r == -EKEYEXPIRED	? "expired link: ask for the file again"
	    : r == -EKEYREVOKED ? "revoked link: the API key it was made with is no longer "
				  "accepted; ask for the file again"
				: "invalid link: use the link a tool returned, unchanged");
	return -EACCES;
}

/* The status for a manager failure. */
static unsigned status_of(const struct sbx_error *err, int r)
{
	switch (r) {
	case -ENOENT:
		return MHD_HTTP_NOT_FOUND;
	case -EPERM:
	case -EACCES:
		return MHD_HTTP_FORBIDDEN;
	case -EINVAL:
		return MHD_HTTP_BAD_REQUEST;
	case -ENOMEM:
		return MHD_HTTP_INTERNAL_SERVER_ERROR;
	default:
		return err->http_status ? MHD_HTTP_BAD_GATEWAY : MHD_HTTP_SERVICE_UNAVAILABLE;
	}
}

/* "inline; filename=\"BASE\"" with anything unsafe in a quoted string
 * replaced. */
static void disposition(const char *relpath, char *out, size_t size)
{
	const char *base = strrchr(relpath, '/');
	char name[256];
	size_t n = 0;

	base = base ? base + 1 : relpath;
	for (; *base && n < sizeof(name) - 1; base++) {
		unsigned char c = (unsigned char)*base;
		name[n++] = (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : (char)c;
	}
	name[n] = '\0';
	snprintf(out, size, "inline; filename=\"%s\"", name);
}

enum MHD_Result sbx_artifact_handle(struct sbx_http_request *rq)
{
	struct sbx_http *h = rq->http;
	struct sbx_error err = SBX_ERROR_INIT;
	_cleanup_free_ char *id = NULL, *relpath = NULL;
	struct artifact_stream *st;
	struct MHD_Response *resp;
	const char *type;
	char cd[320];
	int r;

	if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0) {
		return sbx_http_respond_405(rq, "GET, HEAD");
	}
	if (sbx_artifact_parse(rq->url + strlen(SBX_ARTIFACT_ROUTE), &id, &relpath) < 0)
		return sbx_http_respond_error(rq, MHD_HTTP_BAD_REQUEST,
					      "malformed artifact path: /artifacts/SANDBOX/PATH");
	{
		enum MHD_Result ret;
		if (link_check(rq, id, relpath, &ret) < 0)
			return ret;
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return MHD_NO;
	st->fds[0] = st->fds[1] = -1;
	st->manager = h->manager;
	/* By id only, whoever owns it: a link carries no key; its signature
	 * says the server handed it out. */
	r = sbx_sandbox_get_by_id(h->manager, id, &st->sandbox, &err);
	if (r >= 0)
		r = sbx_artifact_open(h->manager, st->sandbox, relpath, NULL, &st->artifact,
				      &st->size, &err);
	if (r < 0) {
		char shown[SBX_ERROR_MSG_MAX];
		artifact_free(st);
		/* No host detail of the engine for the client; the log keeps it. */
		if (sbx_error_public(&err, shown, sizeof(shown)))
			sbx_log_error("artifact: %s", err.msg);
		return sbx_http_respond_error(rq, status_of(&err, r), shown);
	}
	st->relpath = SBX_TAKE(relpath);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st->fds) < 0) {
		artifact_free(st);
		return sbx_http_respond_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out of sockets");
	}
	resp = MHD_create_response_from_callback((uint64_t)st->size, 64 * 1024, artifact_read, st,
						 artifact_free);
	if (!resp) {
		artifact_free(st);
		return MHD_NO;
	}
	type = sbx_mime_type(st->relpath);
	disposition(st->relpath, cd, sizeof(cd));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(resp, "Content-Disposition", cd);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	/* Active content must not run with this server's origin. */
	if (strncmp(type, "text/html", 9) == 0 || strncmp(type, "image/svg", 9) == 0 ||
	    strncmp(type, "application/xml", 15) == 0)
		MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
	return sbx_http_queue(rq, MHD_HTTP_OK, resp);
}
