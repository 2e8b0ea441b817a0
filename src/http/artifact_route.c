/* SPDX-License-Identifier: MIT */
/*
 * GET/HEAD /artifacts/<sandbox_id>/<relpath>: a file under /app/results of
 * a sandbox, streamed from the engine as it comes. The handler opens it
 * (sbx_artifact_open: one of the sandbox's file readers, a process of its
 * own user, tells the size for Content-Length); libmicrohttpd's content
 * reader, on the connection's own thread, then pulls the next bytes from
 * that reader straight into the response's block (sbx_artifact_pull: no
 * thread of ours, no copy through a socket), ARTIFACT_BLOCK at a time.
 * Nothing is stored on the host: a download holds one block and its
 * reader's buffer. HEAD reads no bytes.
 *
 * A download holds a connection's thread, a file reader and its sandbox
 * "in use", so it is bounded like an event stream: at most
 * server.max_downloads run at once, server.max_downloads_per_ip for one
 * client address (HEAD counted too: it opens the file in the sandbox as GET
 * does, which may start a reader; past either, 503 with Retry-After naming
 * the key); a client that takes no bytes for server.stream_stall_timeout is
 * cut off (the connection's idle timeout), and so is a download that has
 * run longer than that plus a second per server.download_min_rate bytes
 * sent (a client reading a byte now and then, or a sandbox writing one,
 * holds its place no longer). While a read waits on the sandbox, the cancel
 * hook notices a client that left (one that only shut its sending side is
 * served on while bytes move: client_gone) and a sandbox going. While the
 * connection waits on its client instead, one thread watches every body
 * (struct sbx_artifact_watch): the sandbox's going (a delete, its reaping,
 * the manager's stop) or the rate bound ends the connection then, not
 * when its client next reads, which one that stalls never does.
 *
 * Status, checked in this order: 400 malformed path; 403 a link that is not
 * signed by this server for this sandbox id, path and expiry (its query is
 * exp=UNIX_SECONDS[&kid=KEY_ID]&sig=SIG and nothing else; see
 * sbx_link_verify), whose expiry has passed, or, with API keys checked,
 * whose key (kid) is no longer accepted (503 when that cannot be told now:
 * the keys file is broken); 503 past a download limit; then 404 unknown
 * sandbox or missing file, 403 a refused
 * path (-EPERM), 502 the engine answered with an error, 503 the engine cannot
 * be reached. A link without a query is served unsigned only with
 * server.unsigned_links while no API keys are checked.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
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
#include "sbx/tenant_count.h"
#include "sbx/worker.h"

/* What a refused download is told to wait. */
#define DOWNLOAD_RETRY_AFTER "5"
/* The body's block: what one content read may give libmicrohttpd. */
#define ARTIFACT_BLOCK (256 * 1024)

struct artifact_stream {
	struct sbx_http *http;
	sbx_sandbox *sandbox;
	sbx_artifact *artifact; /* open: a file reader of the sandbox asked for it */
	char *relpath;
	struct sbx_artifact_info info; /* what the open told */
	unsigned status;	       /* 200, 206; 304, 416 (no body) */
	int64_t offset, size;	       /* the bytes sent: SIZE from OFFSET */
	int client_fd;		       /* the connection's socket (libmicrohttpd's), or -1 */
	struct sbx_peer peer;
	bool counted;		  /* holds a download slot (download_give at the end) */
	_Atomic int64_t start_ms; /* when the body began; 0: not yet */
	_Atomic uint64_t sent;	  /* bytes given to libmicrohttpd so far */
	int64_t moved_ms;	  /* when bytes last moved (from the sandbox, to the client) */
	struct sbx_cancel cancel;
	/* In the watch's list (under its lock): */
	struct artifact_stream *prev, *next;
	bool listed;
	atomic_bool cut; /* the watch ended it: a read under way stops too */
};

/* The watch over the download bodies (one thread for all of them): while a
 * body waits on its client (libmicrohttpd sends and calls the content
 * reader only when the client took the last block), its sandbox's going (a
 * delete, its reaping, the manager's stop) and falling behind
 * server.download_min_rate are noticed here, every ARTIFACT_WATCH_MS, and
 * end the connection (a shutdown(2) of its socket, under the lock: the
 * socket is closed by libmicrohttpd only after artifact_free, which takes
 * the body out of the list first). Idle without bodies. */
#define ARTIFACT_WATCH_MS 250
struct sbx_artifact_watch {
	pthread_mutex_t lock;
	struct sbx_worker worker;
	struct artifact_stream *head;
};

/* PEER as the key of its download count: its 16 bytes in hex. */
static void peer_key(const struct sbx_peer *peer, char key[2 * sizeof(peer->b) + 1])
{
	for (size_t i = 0; i < sizeof(peer->b); i++)
		snprintf(key + 2 * i, 3, "%02x", peer->b[i]);
}

/* Takes a download slot for PEER: 0, -EBUSY with the key of the limit
 * reached in *RET_KEY, or -ENOMEM. */
static int download_take(struct sbx_http *h, const struct sbx_peer *peer, const char **ret_key)
{
	const int64_t per_ip = h->settings->server.max_downloads_per_ip;
	char key[2 * sizeof(peer->b) + 1];
	int r;

	peer_key(peer, key);
	r = sbx_tenant_count_take(h->downloads, key, per_ip > 0 ? per_ip : -1,
				  h->settings->server.max_downloads, NULL);
	if (r == -EDQUOT || r == -EUSERS) {
		*ret_key = r == -EDQUOT ? "max_downloads_per_ip" : "max_downloads";
		return -EBUSY;
	}
	return r;
}

static void download_give(struct sbx_http *h, const struct sbx_peer *peer)
{
	char key[2 * sizeof(peer->b) + 1];

	peer_key(peer, key);
	sbx_tenant_count_give(h->downloads, key);
}

/* How long a client that has shut its sending side is served while no
 * byte moves. */
#define HALF_CLOSED_GRACE_MS 5000

/* Whether ST's client has gone, asked while a read waits on the sandbox:
 * its connection reset or shut both ways, or its sending side shut while
 * the sandbox has sent no byte for HALF_CLOSED_GRACE_MS. A client that
 * leaves shuts its side as one that shuts it once its request is sent (as
 * some do) and still reads; only bytes sent tell them apart (to one gone,
 * libmicrohttpd's next send fails), so the grace ends only a wait on the
 * sandbox (an open, a read that waits), the one a client gone meanwhile
 * would never see end. */
static bool client_gone(struct artifact_stream *st)
{
	struct pollfd p = {.fd = st->client_fd, .events = POLLRDHUP};

	if (st->client_fd < 0 || poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
		return true;
	return (p.revents & POLLRDHUP) && sbx_monotonic_ms() - st->moved_ms >= HALF_CLOSED_GRACE_MS;
}

/* The cancel hook of the open and the reads: the sandbox is being deleted
 * or reaped, or the client has gone. */
static bool cancelled(void *userdata)
{
	struct artifact_stream *st = userdata;

	return atomic_load(&st->cut) || sbx_sandbox_ending(st->sandbox) || client_gone(st);
}

/* Whether ST has fallen behind: running longer than
 * server.stream_stall_timeout plus a second per server.download_min_rate
 * bytes sent. */
static bool behind(const struct artifact_stream *st)
{
	const struct sbx_settings *s = st->http->settings;
	const uint64_t rate = (uint64_t)s->server.download_min_rate; /* 1..1 GiB */
	/* The division first: no overflow whatever the file's size. */
	const uint64_t sent = atomic_load(&st->sent);
	const int64_t start = atomic_load(&st->start_ms);
	uint64_t earned_ms = sent / rate * 1000 + sent % rate * 1000 / rate;

	return start &&
	       sbx_monotonic_ms() - start > s->server.stream_stall_timeout_ms + (int64_t)earned_ms;
}

static void *watch_main(void *arg)
{
	struct sbx_artifact_watch *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!sbx_worker_stopping(&w->worker)) {
		if (!w->head) {
			pthread_cond_wait(&w->worker.wake, &w->lock);
			continue;
		}
		sbx_cond_wait_until(&w->worker.wake, &w->lock,
				    sbx_monotonic_ms() + ARTIFACT_WATCH_MS);
		for (struct artifact_stream *st = w->head; st; st = st->next) {
			bool going;

			/* Every byte given: only the client's last block is left. */
			if (atomic_load(&st->cut) || atomic_load(&st->sent) >= (uint64_t)st->size)
				continue;
			going = sbx_sandbox_ending(st->sandbox);
			if (!going && !behind(st))
				continue;
			atomic_store(&st->cut, true);
			if (going)
				sbx_log_debug(
				    "artifact %s: its sandbox is going: the download ends",
				    st->relpath);
			else
				sbx_log("artifact %s: cut off after %llu bytes: fewer than "
					"server.download_min_rate (%lld) a second",
					st->relpath, (unsigned long long)atomic_load(&st->sent),
					(long long)st->http->settings->server.download_min_rate);
			if (st->client_fd >= 0)
				shutdown(st->client_fd, SHUT_RDWR);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int sbx_artifact_watch_start(sbx_http *h, struct sbx_error *err)
{
	struct sbx_artifact_watch *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return sbx_error_set(err, -ENOMEM, "http: out of memory");
	pthread_mutex_init(&w->lock, NULL);
	r = sbx_worker_start(&w->worker, watch_main, w);
	if (r < 0) {
		pthread_mutex_destroy(&w->lock);
		free(w);
		return sbx_error_set(err, r, "http: cannot start the downloads' watch: %s",
				     strerror(-r));
	}
	h->artifact_watch = w;
	return 0;
}

void sbx_artifact_watch_stop(sbx_http *h)
{
	struct sbx_artifact_watch *w = h->artifact_watch;

	if (!w)
		return;
	sbx_worker_stop(&w->worker, &w->lock);
	pthread_mutex_destroy(&w->lock);
	free(w);
	h->artifact_watch = NULL;
}

/* Puts ST in the watch's list (IN), or takes it out. */
static void watch_list(struct artifact_stream *st, bool in)
{
	struct sbx_artifact_watch *w = st->http->artifact_watch;

	pthread_mutex_lock(&w->lock);
	if (in && !st->listed) {
		st->prev = NULL;
		st->next = w->head;
		if (w->head)
			w->head->prev = st;
		w->head = st;
		st->listed = true;
		sbx_worker_wake_locked(&w->worker);
	} else if (!in && st->listed) {
		if (st->prev)
			st->prev->next = st->next;
		else
			w->head = st->next;
		if (st->next)
			st->next->prev = st->prev;
		st->listed = false;
	}
	pthread_mutex_unlock(&w->lock);
}

/* libmicrohttpd's content reader, on the connection's own thread: the next
 * bytes straight from the sandbox's file reader into its buffer. A wait on
 * the sandbox asks the cancel hook (the client gone, the sandbox going). */
static ssize_t artifact_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct artifact_stream *st = cls;
	struct sbx_error err = SBX_ERROR_INIT;
	ssize_t n;

	if (!atomic_load(&st->start_ms))
		atomic_store(&st->start_ms, sbx_monotonic_ms());
	/* Asked again: the client took the block before (bytes moved). */
	st->moved_ms = sbx_monotonic_ms();
	n = sbx_artifact_pull(st->artifact, buf, max, &err);
	if (n > 0) {
		atomic_fetch_add(&st->sent, (uint64_t)n);
		st->moved_ms = sbx_monotonic_ms();
		sbx_metrics_artifact_bytes((uint64_t)n);
		return n;
	}
	if (n < 0)
		sbx_log_debug("artifact %s: %s", st->relpath, err.msg);
	/* The end, or an error before the announced length: cut the response. */
	return n == 0 && (int64_t)pos >= st->size ? MHD_CONTENT_READER_END_OF_STREAM
						  : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void artifact_free(void *cls)
{
	struct artifact_stream *st = cls;

	watch_list(st, false);
	sbx_artifact_close(st->artifact);
	sbx_sandbox_unref(st->sandbox);
	if (st->counted)
		download_give(st->http, &st->peer);
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

/* The headers every answer about the file carries: its validators, that
 * ranges are served, and that no cache keeps it (a link is a capability:
 * a client keeps its copy itself and asks with its validators). */
static void validators(struct MHD_Response *resp, const struct sbx_artifact_info *info)
{
	char etag[SBX_ETAG_MAX], date[SBX_HTTP_DATE_MAX];

	sbx_file_etag(info, etag);
	sbx_http_date(info->mtime_ns / 1000000000, date);
	MHD_add_response_header(resp, "ETag", etag);
	MHD_add_response_header(resp, "Last-Modified", date);
	MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
}

/* 304, or 416 with the file's size, from what the open told. */
static enum MHD_Result respond_bodiless(struct sbx_http_request *rq, struct artifact_stream *st)
{
	struct MHD_Response *resp;
	unsigned status = st->status;
	char range[48];

	if (status == MHD_HTTP_RANGE_NOT_SATISFIABLE) {
		snprintf(range, sizeof(range), "bytes */%" PRId64, st->info.size);
		artifact_free(st);
		return sbx_http_respond_error_with(
		    rq, status, "the range asked for lies past the file's end",
		    (const char *const[]){"Content-Range", range, "Accept-Ranges", "bytes", NULL});
	}
	resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (resp)
		validators(resp, &st->info);
	artifact_free(st);
	if (!resp)
		return MHD_NO;
	return sbx_http_queue(rq, status, resp);
}

/* Opens RELPATH for what the request asks: the whole file (200), one range
 * of it (206, If-Range permitting), nothing (304 under If-None-Match or
 * If-Modified-Since; 416 for a range past the end) or, for HEAD, the
 * headers only. The bytes asked for are read from their offset in the
 * sandbox. What is answered is decided on what the open file tells, and
 * sent from that same open: when the bytes it was asked for are not the
 * ones decided (a condition or a suffix range needs the file's state
 * first; the file changed since), it is asked again, three times at most. */
static int open_asked(struct sbx_http_request *rq, struct artifact_stream *st, const char *relpath,
		      struct sbx_error *err)
{
	struct MHD_Connection *c = rq->conn;
	const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
	const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
	const char *ims = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Modified-Since");
	const char *ifr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Range");
	bool head = strcmp(rq->method, "HEAD") == 0;
	struct sbx_byte_range br;
	bool ranged = sbx_file_range_parse(range, &br) == 1;
	int64_t offset = 0, count = INT64_MAX;

	if (head || inm || ims || (ranged && (ifr || br.suffix >= 0)))
		count = 0; /* the file's state first */
	else if (ranged) {
		offset = br.first;
		count = br.last < 0 ? INT64_MAX : br.last - br.first + 1;
	}
	for (int round = 0;; round++) {
		int r = sbx_artifact_open(rq->http->manager, st->sandbox, relpath, offset, count,
					  &st->cancel, &st->artifact, &st->info, err);

		if (r < 0)
			return r;
		if (sbx_file_not_modified(inm, ims, &st->info)) {
			st->status = MHD_HTTP_NOT_MODIFIED;
			return 0;
		}
		st->status = MHD_HTTP_OK;
		st->offset = 0;
		st->size = st->info.size;
		if (ranged && sbx_file_if_range(ifr, &st->info, (int64_t)time(NULL))) {
			if (sbx_file_range_resolve(&br, st->info.size, &st->offset, &st->size) <
			    0) {
				st->status = MHD_HTTP_RANGE_NOT_SATISFIABLE;
				return 0;
			}
			st->status = MHD_HTTP_PARTIAL_CONTENT;
		}
		if (head || (offset == st->offset && st->info.count == st->size))
			return 0;
		if (round == 2)
			return sbx_error_set(err, -EAGAIN, "%s kept changing while it was opened",
					     relpath);
		st->artifact = sbx_artifact_close(st->artifact);
		offset = st->offset;
		count = st->size;
	}
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
	st->client_fd = -1;
	atomic_init(&st->start_ms, 0);
	atomic_init(&st->sent, 0);
	atomic_init(&st->cut, false);
	st->http = h;
	st->peer = rq->peer;
	st->cancel = (struct sbx_cancel){.cancelled = cancelled, .userdata = st};
	st->moved_ms = sbx_monotonic_ms();
	{
		const char *key = NULL;
		r = download_take(h, &rq->peer, &key);
		if (r < 0) {
			char msg[256];
			artifact_free(st);
			if (r != -EBUSY)
				return MHD_NO;
			sbx_metrics_download_refused(key);
			snprintf(msg, sizeof(msg),
				 "too many artifact downloads at once%s (server.%s = %lld); retry "
				 "later",
				 strcmp(key, "max_downloads") == 0 ? "" : " from this address", key,
				 (long long)(strcmp(key, "max_downloads") == 0
						 ? h->settings->server.max_downloads
						 : h->settings->server.max_downloads_per_ip));
			return sbx_http_respond_error_with(
			    rq, MHD_HTTP_SERVICE_UNAVAILABLE, msg,
			    (const char *const[]){"Retry-After", DOWNLOAD_RETRY_AFTER, NULL});
		}
		st->counted = true;
	}
	{
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (ci)
			st->client_fd = ci->connect_fd;
	}
	/* By id only, whoever owns it: a link carries no key; its signature
	 * says the server handed it out. */
	r = sbx_sandbox_get_by_id(h->manager, id, &st->sandbox, &err);
	if (r >= 0)
		r = open_asked(rq, st, relpath, &err);
	if (r < 0) {
		char shown[SBX_ERROR_MSG_MAX];
		artifact_free(st);
		/* No host detail of the engine for the client; the log keeps it. */
		if (sbx_error_public(&err, shown, sizeof(shown)))
			sbx_log_error("artifact: %s", err.msg);
		return sbx_http_respond_error(rq, status_of(&err, r), shown);
	}
	st->relpath = SBX_TAKE(relpath);
	if (st->status != MHD_HTTP_OK && st->status != MHD_HTTP_PARTIAL_CONTENT)
		return respond_bodiless(rq, st);
	resp = MHD_create_response_from_callback((uint64_t)st->size, ARTIFACT_BLOCK, artifact_read,
						 st, artifact_free);
	if (!resp) {
		artifact_free(st);
		return MHD_NO;
	}
	watch_list(st, true);
	/* A client that takes no bytes this long is cut off, as on a stream. */
	sbx_http_stream_timeout(rq);
	type = sbx_mime_type(st->relpath);
	disposition(st->relpath, cd, sizeof(cd));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(resp, "Content-Disposition", cd);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	validators(resp, &st->info);
	if (st->status == MHD_HTTP_PARTIAL_CONTENT) {
		char range[80];
		snprintf(range, sizeof(range), "bytes %" PRId64 "-%" PRId64 "/%" PRId64, st->offset,
			 st->offset + st->size - 1, st->info.size);
		MHD_add_response_header(resp, "Content-Range", range);
	}
	/* Active content must not run with this server's origin. */
	if (strncmp(type, "text/html", 9) == 0 || strncmp(type, "image/svg", 9) == 0 ||
	    strncmp(type, "application/xml", 15) == 0)
		MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
	return sbx_http_queue(rq, st->status, resp);
}
