/* SPDX-License-Identifier: MIT */
/*
 * libcurl plumbing shared by every REST backend. One struct sbx_rest per
 * engine: the target (unix socket or TCP) and a small pool of easy handles
 * so concurrent callers each get one and connections are reused.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rest.h"
#include "sbx/percent.h"
#include "sbx/common.h"
#include "sbx/metrics.h"

#define REST_POOL_MAX 8
#define REST_TARGETS_MAX 8	  /* endpoints one handle may be pointed at */
#define REST_BODY_MAX (64u << 20) /* a non-streamed reply larger than this is refused */
#define REST_HDR_MAX (16u << 10)  /* response head of a hijacked connection */
#define REST_CONNECT_TIMEOUT_MS 5000L
#define REST_KEEPIDLE_S 30L  /* TCP keepalive: first probe after this much silence */
#define REST_KEEPINTVL_S 10L /* then one every this often (the kernel's count, 9) */

/* One endpoint a handle speaks to: made once, never changed or freed
 * before the handle (calls in flight keep reading the one they took). */
struct rest_target {
	char *url;	   /* as given, for messages */
	char *unix_path;   /* NULL for TCP */
	char *base;	   /* "http://localhost", "http://host:port" or "https://host:port" */
	char *host_header; /* "localhost" or "host:port" */
	bool tls;	   /* TCP spoken over TLS (the handle's files) */
};

struct sbx_rest {
	/* targets[0] is the one opened; sbx_rest_retarget adds others (a
	 * swarm's other managers). cur, the one calls go to now, is read
	 * without the lock: an entry is complete before cur names it. */
	struct rest_target targets[REST_TARGETS_MAX];
	size_t n_targets; /* under lock */
	atomic_size_t cur;
	/* Set once (the argument first, then the function, released): read
	 * by callers already running on other threads. */
	_Atomic(sbx_rest_failover_fn) failover;
	void *failover_ud;
	/* As given (NULL: not): for TCP, and for handles opened from this one. */
	char *tls_ca, *tls_cert, *tls_key;
	struct sbx_engine_tls tls_view; /* the three, for sbx_rest_tls */
	long timeout_ms;
	pthread_mutex_t lock;
	CURL *pool[REST_POOL_MAX];
	size_t n_pool;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool given(const char *s)
{
	return s && *s;
}

/* TLS's files checked before any connection: a client certificate comes
 * with its key, and each given can be read. */
static int tls_check(const struct sbx_engine_tls *tls, struct sbx_error *err)
{
	const char *const files[] = {tls->ca, tls->cert, tls->key};
	const char *const names[] = {"engine.tls_ca", "engine.tls_cert", "engine.tls_key"};

	if (given(tls->cert) != given(tls->key))
		return sbx_error_set(err, -EINVAL,
				     "engine.tls_cert and engine.tls_key go together (a client "
				     "certificate and its private key)");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(files); i++)
		if (given(files[i]) && access(files[i], R_OK) < 0)
			return sbx_error_set(err, -errno, "%s: cannot read %s: %s", names[i],
					     files[i], strerror(errno));
	return 0;
}

static void target_free(struct rest_target *t)
{
	free(t->url);
	free(t->unix_path);
	free(t->base);
	free(t->host_header);
	*t = (struct rest_target){0};
}

/* TARGET filled from URL (unix:///path, /path, tcp://host:port or
 * http://host:port), spoken over TLS when TLS and it is TCP. */
static int target_make(const char *url, bool tls, struct rest_target *t, struct sbx_error *err)
{
	const char *hostport = NULL, *path = NULL;

	if (!url || !*url)
		return sbx_error_set(err, -EINVAL, "no engine URL");
	if (strncmp(url, "unix://", 7) == 0)
		path = url + 7;
	else if (url[0] == '/')
		path = url;
	else if (strncmp(url, "tcp://", 6) == 0)
		hostport = url + 6;
	else if (strncmp(url, "http://", 7) == 0)
		hostport = url + 7;
	else
		return sbx_error_set(
		    err, -EINVAL,
		    "engine URL '%s': expected unix:///path, /path or tcp://host:port", url);
	if (path && path[0] != '/')
		return sbx_error_set(err, -EINVAL, "engine URL '%s': socket path must be absolute",
				     url);
	if (hostport && (!*hostport || strpbrk(hostport, "/?# ")))
		return sbx_error_set(err, -EINVAL, "engine URL '%s': expected tcp://host:port",
				     url);
	*t = (struct rest_target){.url = strdup(url), .tls = tls && hostport};
	if (path) {
		t->unix_path = strdup(path);
		t->base = strdup("http://localhost");
		t->host_header = strdup("localhost");
	} else {
		t->host_header = strdup(hostport);
		if (asprintf(&t->base, "%s://%s", t->tls ? "https" : "http", hostport) < 0)
			t->base = NULL;
	}
	if (!t->url || !t->base || !t->host_header || (path && !t->unix_path)) {
		target_free(t);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static bool has_tls(const struct sbx_rest *r)
{
	return r->tls_ca || r->tls_cert || r->tls_key;
}

/* The target calls go to now. */
static const struct rest_target *target_now(const struct sbx_rest *r)
{
	return &r->targets[atomic_load_explicit(&r->cur, memory_order_acquire)];
}

int sbx_rest_open(const char *url, long timeout_ms, const struct sbx_engine_tls *tls,
		  struct sbx_rest **ret_rest, struct sbx_error *err)
{
	struct sbx_rest *r;
	bool have_tls = tls && (given(tls->ca) || given(tls->cert) || given(tls->key));
	int ret;

	/* TLS is for TCP (a unix socket is guarded by its file's mode); kept
	 * for handles opened from this one (a swarm manager's, for its nodes). */
	if (have_tls && tls_check(tls, err) < 0)
		return err ? err->code : -EINVAL;

	pthread_once(&curl_once, curl_init_once);
	r = calloc(1, sizeof(*r));
	if (!r)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_init(&r->lock, NULL);
	ret = target_make(url, have_tls, &r->targets[0], err);
	if (ret < 0) {
		sbx_rest_free(r);
		return ret;
	}
	r->n_targets = 1;
	atomic_init(&r->cur, 0);
	atomic_init(&r->failover, NULL);
	r->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
	if (have_tls) {
		r->tls_ca = given(tls->ca) ? strdup(tls->ca) : NULL;
		r->tls_cert = given(tls->cert) ? strdup(tls->cert) : NULL;
		r->tls_key = given(tls->key) ? strdup(tls->key) : NULL;
	}
	r->tls_view = (struct sbx_engine_tls){r->tls_ca, r->tls_cert, r->tls_key};
	if (have_tls && ((given(tls->ca) && !r->tls_ca) || (given(tls->cert) && !r->tls_cert) ||
			 (given(tls->key) && !r->tls_key))) {
		sbx_rest_free(r);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_rest = r;
	return 0;
}

struct sbx_rest *sbx_rest_free(struct sbx_rest *r)
{
	if (!r)
		return NULL;
	for (size_t i = 0; i < r->n_pool; i++)
		curl_easy_cleanup(r->pool[i]);
	pthread_mutex_destroy(&r->lock);
	for (size_t i = 0; i < r->n_targets; i++)
		target_free(&r->targets[i]);
	free(r->tls_ca);
	free(r->tls_cert);
	free(r->tls_key);
	free(r);
	return NULL;
}

const struct sbx_engine_tls *sbx_rest_tls(const struct sbx_rest *r)
{
	return &r->tls_view;
}

const char *sbx_rest_url(const struct sbx_rest *r)
{
	return target_now(r)->url;
}

int sbx_rest_retarget(struct sbx_rest *r, const char *url, struct sbx_error *err)
{
	struct rest_target t;
	size_t i;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->n_targets && strcmp(r->targets[i].url, url) != 0; i++)
		;
	if (i == r->n_targets && (ret = target_make(url, has_tls(r), &t, err)) >= 0) {
		if (i < REST_TARGETS_MAX) {
			r->targets[r->n_targets++] = t;
		} else {
			target_free(&t);
			ret = sbx_error_set(err, -ENOSPC,
					    "engine handle already pointed at %d endpoints",
					    REST_TARGETS_MAX);
		}
	}
	if (ret >= 0)
		atomic_store_explicit(&r->cur, i, memory_order_release);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

void sbx_rest_set_failover(struct sbx_rest *r, sbx_rest_failover_fn fn, void *userdata)
{
	r->failover_ud = userdata;
	atomic_store_explicit(&r->failover, fn, memory_order_release);
}

static CURL *rest_handle_get(struct sbx_rest *r)
{
	CURL *c = NULL;
	pthread_mutex_lock(&r->lock);
	if (r->n_pool)
		c = r->pool[--r->n_pool];
	pthread_mutex_unlock(&r->lock);
	if (c)
		curl_easy_reset(c);
	else
		c = curl_easy_init();
	return c;
}

static void rest_handle_put(struct sbx_rest *r, CURL *c)
{
	pthread_mutex_lock(&r->lock);
	if (r->n_pool < REST_POOL_MAX) {
		r->pool[r->n_pool++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&r->lock);
	if (c)
		curl_easy_cleanup(c);
}

void sbx_rest_response_release(struct sbx_rest_response *resp)
{
	if (!resp)
		return;
	sbx_buf_release(&resp->body);
	free(resp->header);
	resp->header = NULL;
	resp->status = 0;
}

struct call_ctx {
	CURL *curl;
	const struct sbx_rest_request *req;
	struct sbx_rest_response *resp;
	int sink_error; /* the sink's or on_head's negative return, when it aborted */
	bool too_big;
	bool aborted;	/* req->abort said so */
	bool head_done; /* on_head was called */
};

static size_t call_write(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct call_ctx *ctx = userdata;
	size_t n = size * nmemb;
	long status = 0;

	curl_easy_getinfo(ctx->curl, CURLINFO_RESPONSE_CODE, &status);
	if (ctx->req->sink && status >= 200 && status < 300) {
		int r = ctx->req->sink(ctx->req->sink_data, data, n);
		if (r < 0) {
			ctx->sink_error = r;
			return 0;
		}
		return n;
	}
	if (ctx->resp->body.len + n > REST_BODY_MAX) {
		ctx->too_big = true;
		return 0;
	}
	if (sbx_buf_append(&ctx->resp->body, data, n) < 0)
		return 0;
	return n;
}

/* The blank line that ends a response head: on_head for a 2xx. */
static bool call_head_end(struct call_ctx *ctx, const char *data, size_t n)
{
	bool blank = (n == 2 && data[0] == '\r' && data[1] == '\n') || (n == 1 && data[0] == '\n');
	long status = 0;

	if (!ctx->req->on_head || !blank || ctx->head_done)
		return true;
	curl_easy_getinfo(ctx->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status >= 300)
		return true;
	ctx->head_done = true;
	ctx->sink_error = ctx->req->on_head(ctx->req->sink_data, status);
	return ctx->sink_error >= 0;
}

static size_t call_header(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct call_ctx *ctx = userdata;
	size_t n = size * nmemb, klen;
	const char *want = ctx->req->want_header;

	if (!call_head_end(ctx, data, n))
		return 0;
	if (!want)
		return n;
	klen = strlen(want);
	if (n > klen + 1 && strncasecmp(data, want, klen) == 0 && data[klen] == ':') {
		const char *v = data + klen + 1;
		size_t vlen = n - klen - 1;
		while (vlen && isspace((unsigned char)*v))
			v++, vlen--;
		while (vlen && isspace((unsigned char)v[vlen - 1]))
			vlen--;
		free(ctx->resp->header);
		ctx->resp->header = strndup(v, vlen);
	}
	return n;
}

/* How often a request with an abort hook checks it while nothing arrives. */
#define ABORT_POLL_MS 100

/* curl_easy_perform for a request with an abort hook: libcurl's own loop
 * calls the progress callback only about once a second while idle, too slow
 * for a server that stops; this loop polls the hook every ABORT_POLL_MS. */
static CURLcode perform_abortable(CURL *c, struct call_ctx *ctx)
{
	CURLM *mh = curl_multi_init();
	CURLcode code = CURLE_OK;
	CURLMsg *msg;
	int running = 1, left;

	if (!mh)
		return CURLE_OUT_OF_MEMORY;
	if (curl_multi_add_handle(mh, c) != CURLM_OK) {
		curl_multi_cleanup(mh);
		return CURLE_FAILED_INIT;
	}
	while (running) {
		if (curl_multi_perform(mh, &running) != CURLM_OK) {
			code = CURLE_RECV_ERROR;
			break;
		}
		if (!running)
			break;
		if (!ctx->aborted && ctx->req->abort(ctx->req->sink_data))
			ctx->aborted = true;
		if (ctx->aborted) {
			code = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		if (curl_multi_poll(mh, NULL, 0, ABORT_POLL_MS, NULL) != CURLM_OK) {
			code = CURLE_RECV_ERROR;
			break;
		}
	}
	while (code == CURLE_OK && (msg = curl_multi_info_read(mh, &left)))
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == c)
			code = msg->data.result;
	curl_multi_remove_handle(mh, c);
	curl_multi_cleanup(mh);
	return code;
}

/* libcurl's progress callback: about once a second when idle. */
static int call_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			 curl_off_t ulnow)
{
	struct call_ctx *ctx = userdata;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	if (!ctx->aborted && ctx->req->abort(ctx->req->sink_data))
		ctx->aborted = true;
	return ctx->aborted;
}

static int rest_curl_error(const struct rest_target *r, CURLcode code, const char *detail,
			   struct sbx_error *err)
{
	struct stat st;

	/* An engine that refuses our certificate (none, or of another CA)
	 * ends the connection once the handshake is done on our side: its
	 * alert comes with the first read or write. */
	bool refused =
	    strstr(detail, "alert") || strstr(detail, "certificate") || strstr(detail, "verify");

	/* A reset or an end during the handshake is the network's, not TLS
	 * refusing us: said as a failed request. */
	if (r->tls && code == CURLE_SSL_CONNECT_ERROR && !refused)
		code = CURLE_RECV_ERROR;
	if (r->tls && (code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR) && refused)
		code = CURLE_SSL_CONNECT_ERROR;
	switch (code) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		if (r->unix_path && stat(r->unix_path, &st) < 0)
			return sbx_error_set(
			    err, -ECONNREFUSED,
			    "engine not reachable: socket %s does not exist (is the "
			    "engine running? set [engine] socket)",
			    r->unix_path);
		return sbx_error_set(err, -ECONNREFUSED, "engine not reachable at %s: %s", r->url,
				     detail[0] ? detail : curl_easy_strerror(code));
	case CURLE_OPERATION_TIMEDOUT:
		return sbx_error_set(err, -ETIMEDOUT, "engine at %s did not answer in time",
				     r->url);
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		return sbx_error_set(err, -EACCES,
				     "TLS with the engine at %s failed: %s (engine.tls_ca, "
				     "engine.tls_cert, engine.tls_key)",
				     r->url, detail[0] ? detail : curl_easy_strerror(code));
	case CURLE_OUT_OF_MEMORY:
		return sbx_error_set(err, -ENOMEM, "out of memory");
	default:
		return sbx_error_set(err, -EIO, "engine request to %s failed: %s", r->url,
				     detail[0] ? detail : curl_easy_strerror(code));
	}
}

static void rest_common_opts(const struct sbx_rest *r, const struct rest_target *t, CURL *c)
{
	if (t->unix_path)
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, t->unix_path);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, REST_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, t->tls ? "https" : "http");
	/* The engine directly, never through a proxy from the environment. */
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	if (t->tls) {
		/* libcurl's defaults, said: the engine's certificate is verified
		 * and must name the address dialled. */
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
		curl_easy_setopt(c, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
		/* tls_ca alone: not the system's CAs besides (libcurl's CA
		 * folder would still be trusted with CAINFO alone). */
		if (r->tls_ca) {
			curl_easy_setopt(c, CURLOPT_CAINFO, r->tls_ca);
			curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
		}
		if (r->tls_cert) {
			curl_easy_setopt(c, CURLOPT_SSLCERT, r->tls_cert);
			curl_easy_setopt(c, CURLOPT_SSLKEY, r->tls_key);
		}
	}
	if (!t->unix_path) {
		curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, REST_KEEPIDLE_S);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, REST_KEEPINTVL_S);
	}
}

/* ---- metrics ---- */

/* Words a path's second segment may be that are not an id. */
static bool action_word(const char *s, size_t n)
{
	static const char *const words[] = {"create", "json",  "import", "load",
					    "prune",  "build", "search", "exists"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(words); i++)
		if (strlen(words[i]) == n && strncmp(words[i], s, n) == 0)
			return true;
	return false;
}

/* Lower-case letters and '_' only: an operation's name, not an id. */
static bool plain_word(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
			return false;
	return n > 0 && n <= 16;
}

/* The operation of METHOD PATH for the metrics, ids left out: "POST
 * /containers/{id}/start" for /v1.41/containers/3f.../start?x=1 (the API
 * version and Podman's /libpod dropped). At most OP_MAX bytes. */
#define OP_MAX 96
static void op_of(const char *method, const char *path, char *out)
{
	const char *seg[8];
	size_t len[8], n = 0, k;
	const char *p = path;

	while (*p && *p != '?' && n < SBX_ARRAY_SIZE(seg)) {
		while (*p == '/')
			p++;
		if (!*p || *p == '?')
			break;
		seg[n] = p;
		while (*p && *p != '/' && *p != '?')
			p++;
		len[n] = (size_t)(p - seg[n]);
		/* The version ("v1.41", "v4.0.0") and "libpod" say nothing of the operation. */
		if (!(n == 0 && len[0] > 1 && seg[0][0] == 'v' && seg[0][1] >= '0' &&
		      seg[0][1] <= '9') &&
		    !(n == 0 && len[0] == 6 && strncmp(seg[0], "libpod", 6) == 0))
			n++;
	}
	k = (size_t)snprintf(out, OP_MAX, "%s", method);
	for (size_t i = 0; i < n && k < OP_MAX; i++) {
		/* The first segment (the resource) and the last (the action) are
		 * kept when they are words; those between are ids. */
		bool keep = plain_word(seg[i], len[i]) &&
			    (i == 0 || (i == n - 1 && (n > 2 || action_word(seg[i], len[i]))));
		if (keep)
			k += (size_t)snprintf(out + k, OP_MAX - k, "%s/%.*s", i ? "" : " ",
					      (int)len[i], seg[i]);
		else
			k += (size_t)snprintf(out + k, OP_MAX - k, "%s/{id}", i ? "" : " ");
	}
	if (n == 0 && k < OP_MAX)
		snprintf(out + k, OP_MAX - k, " /");
}

/* Counts one request: RET its result, STATUS the HTTP status (0: none). */
static void count_request(const char *method, const char *path, int ret, long status, int64_t t0_us)
{
	char op[OP_MAX];
	const char *outcome = "ok";

	op_of(method, path, op);
	if (ret == -ECANCELED)
		outcome = "cancelled";
	else if (status >= 500)
		outcome = "server_error";
	else if (status >= 400)
		outcome = "client_error";
	else if (ret < 0)
		outcome = "transport_error";
	sbx_metrics_engine_request(op, outcome, sbx_metrics_now_us() - t0_us);
}

/* Whether a transfer that failed with CODE never reached the engine (no
 * connection was made: nothing was sent, so any request may be tried at
 * another endpoint). */
static bool unsent(CURL *c, CURLcode code)
{
	curl_off_t connect_us = 0;
	long sent = 1;

	/* libcurl may have sent the request on a reused connection that then
	 * closed, and failed only its own retry on a new one: not unsent. */
	if (curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &sent) != CURLE_OK || sent != 0)
		return false;
	if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST)
		return true;
	return code == CURLE_OPERATION_TIMEDOUT &&
	       curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &connect_us) == CURLE_OK &&
	       connect_us == 0;
}

/* One attempt of sbx_rest_call at target T; *RET_UNSENT when it failed
 * before anything reached the engine. */
static int rest_call_at(struct sbx_rest *r, const struct rest_target *t,
			const struct sbx_rest_request *req, struct sbx_rest_response *resp,
			bool *ret_unsent, struct sbx_error *err)
{
	int64_t t0_us = sbx_metrics_now_us();
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = NULL;
	struct call_ctx ctx = {.req = req, .resp = resp};
	_cleanup_free_ char *url = NULL;
	char ctype[128];
	FILE *body_file = NULL;
	CURLcode code;
	CURL *c;
	int ret = 0;

	memset(resp, 0, sizeof(*resp));
	if (asprintf(&url, "%s%s", t->base, req->path) < 0)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	c = rest_handle_get(r);
	if (!c)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	ctx.curl = c;
	rest_common_opts(r, t, c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, call_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &ctx);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, call_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &ctx);
	if (req->timeout_ms >= 0)
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
				 req->timeout_ms ? req->timeout_ms : r->timeout_ms);
	if (req->abort) {
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, call_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, &ctx);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	}
	headers = curl_slist_append(headers, "Expect:");

	if (strcmp(req->method, "HEAD") == 0) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (req->body_file) {
		struct stat st;
		body_file = fopen(req->body_file, "rbe");
		if (!body_file || fstat(fileno(body_file), &st) < 0) {
			ret = sbx_error_set(err, -errno, "cannot read %s: %s", req->body_file,
					    strerror(errno));
			goto out;
		}
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READDATA, body_file);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	} else if (req->body || strcmp(req->method, "POST") == 0 ||
		   strcmp(req->method, "PUT") == 0) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	} else {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	}
	if (req->body || req->body_file) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s",
			 req->content_type ? req->content_type : "application/json");
		headers = curl_slist_append(headers, ctype);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

	code = req->abort ? perform_abortable(c, &ctx) : curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
	if (code == CURLE_WRITE_ERROR && ctx.sink_error < 0)
		ret = ctx.sink_error;
	else if (code == CURLE_ABORTED_BY_CALLBACK && ctx.aborted)
		ret = sbx_error_set(err, -ECANCELED, "engine request to %s cancelled", t->url);
	else if (code == CURLE_WRITE_ERROR && ctx.too_big)
		ret = sbx_error_set(err, -EMSGSIZE, "engine reply over %u bytes", REST_BODY_MAX);
	else if (code != CURLE_OK) {
		ret = rest_curl_error(t, code, errbuf, err);
		*ret_unsent = unsent(c, code);
	}
	count_request(req->method, req->path, ret, resp->status, t0_us);
out:
	if (body_file)
		fclose(body_file);
	curl_slist_free_all(headers);
	/* A pooled handle keeps no pointer into this frame. */
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	/* A handle whose transfer was cut short may hold a half-read connection. */
	if (ret < 0) {
		curl_easy_cleanup(c);
		sbx_rest_response_release(resp);
	} else {
		rest_handle_put(r, c);
	}
	return ret;
}

int sbx_rest_call(struct sbx_rest *r, const struct sbx_rest_request *req,
		  struct sbx_rest_response *resp, struct sbx_error *err)
{
	for (int tries = 0;; tries++) {
		const struct rest_target *t = target_now(r);
		sbx_rest_failover_fn failover =
		    atomic_load_explicit(&r->failover, memory_order_acquire);
		bool not_sent = false;
		int ret = rest_call_at(r, t, req, resp, &not_sent, err);

		/* Not reached, nothing sent: another endpoint, if the owner
		 * knows one (a swarm's other managers), is asked instead. */
		if (ret >= 0 || !not_sent || !failover || tries + 1 >= REST_TARGETS_MAX ||
		    failover(r->failover_ud, r, t->url) <= 0)
			return ret;
		sbx_error_clear(err); /* the call made again fills it anew */
	}
}

static int status_errno(long status)
{
	switch (status) {
	case 400:
		return -EINVAL;
	case 401:
	case 403:
		return -EACCES;
	case 404:
		return -ENOENT;
	case 409:
		return -EBUSY;
	case 304:
		return -EALREADY;
	default:
		return -EIO;
	}
}

int sbx_rest_check(const struct sbx_rest_response *resp, const long *ok_also, struct sbx_error *err)
{
	struct json_object *j = NULL, *m;
	const char *msg = NULL;
	int ret;

	if (resp->status >= 200 && resp->status < 300)
		return 0;
	for (; ok_also && *ok_also; ok_also++)
		if (*ok_also == resp->status)
			return 0;
	if (resp->body.len)
		j = json_tokener_parse(resp->body.data);
	if (j && (json_object_object_get_ex(j, "message", &m) ||
		  json_object_object_get_ex(j, "cause", &m)))
		msg = json_object_get_string(m);
	if (!msg && resp->body.len && !j)
		msg = resp->body.data;
	if (!msg)
		msg = "no message";
	ret = sbx_error_set_http(err, status_errno(resp->status), (int)resp->status,
				 "engine answered %ld: %.*s", resp->status, 900, msg);
	json_object_put(j);
	/* Strip the trailing newline engines put on text bodies. */
	if (err) {
		size_t n = strlen(err->msg);
		while (n && (err->msg[n - 1] == '\n' || err->msg[n - 1] == '\r'))
			err->msg[--n] = '\0';
	}
	return ret;
}

int sbx_rest_json(struct sbx_rest *r, const char *method, const char *path,
		  struct json_object *body_json, const long *ok_also, struct json_object **ret_json,
		  struct sbx_error *err)
{
	struct sbx_rest_response resp;
	struct sbx_rest_request req = {.method = method, .path = path};
	int ret;

	if (body_json) {
		req.body = json_object_to_json_string_ext(body_json, JSON_C_TO_STRING_PLAIN);
		req.body_len = strlen(req.body);
	}
	ret = sbx_rest_call(r, &req, &resp, err);
	if (ret < 0)
		return ret;
	ret = sbx_rest_check(&resp, ok_also, err);
	if (ret >= 0 && ret_json) {
		struct json_object *j = NULL;
		if (resp.body.len) {
			j = json_tokener_parse(resp.body.data);
			if (!j)
				ret = sbx_error_set(err, -EPROTO,
						    "engine sent malformed JSON for %s %s", method,
						    path);
		}
		if (ret >= 0)
			*ret_json = j;
	}
	sbx_rest_response_release(&resp);
	return ret;
}

char *sbx_rest_vpath(const char *prefix, const char *fmt, va_list ap)
{
	struct sbx_buf b = SBX_BUF_INIT;

	if (prefix && sbx_buf_append(&b, prefix, strlen(prefix)) < 0)
		return NULL;
	for (const char *f = fmt; *f; f++) {
		int r;
		if (f[0] == '%' && f[1] == 's') {
			const char *arg = va_arg(ap, const char *);
			char *x = sbx_percent_escape(arg ? arg : "");
			r = x ? sbx_buf_append(&b, x, strlen(x)) : -ENOMEM;
			free(x);
			f++;
		} else if (f[0] == '%' && f[1] == 'd') {
			r = sbx_buf_appendf(&b, "%d", va_arg(ap, int));
			f++;
		} else {
			r = sbx_buf_append(&b, f, 1);
		}
		if (r < 0) {
			sbx_buf_release(&b);
			return NULL;
		}
	}
	return sbx_buf_steal(&b);
}

char *sbx_rest_path(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	p = sbx_rest_vpath(NULL, fmt, ap);
	va_end(ap);
	return p;
}

int sbx_demux_feed(struct sbx_demux *d, const void *data, size_t len, sbx_demux_fn fn,
		   void *userdata)
{
	const unsigned char *p = data;

	while (len) {
		if (d->remaining == 0) {
			size_t take = sizeof(d->hdr) - d->hdr_have;
			if (take > len)
				take = len;
			memcpy(d->hdr + d->hdr_have, p, take);
			d->hdr_have += take;
			p += take;
			len -= take;
			if (d->hdr_have < sizeof(d->hdr))
				return 0;
			d->hdr_have = 0;
			if (d->hdr[0] > 3 || d->hdr[1] || d->hdr[2] || d->hdr[3])
				return -EPROTO;
			d->fd = d->hdr[0];
			d->remaining = (size_t)d->hdr[4] << 24 | (size_t)d->hdr[5] << 16 |
				       (size_t)d->hdr[6] << 8 | d->hdr[7];
			continue;
		}
		size_t take = d->remaining < len ? d->remaining : len;
		int r = fn(userdata, d->fd, p, take);
		if (r < 0)
			return r;
		d->remaining -= take;
		p += take;
		len -= take;
	}
	return 0;
}

/* ---- the hijacked connection ---- */

static int stream_wait(sbx_stream *s, short events, int timeout_ms)
{
	struct pollfd pfd = {.fd = s->fd, .events = events};
	int n;

	do
		n = poll(&pfd, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == 0 ? -ETIMEDOUT : 0;
}

static int stream_send_all(sbx_stream *s, const void *buf, size_t len, struct sbx_error *err)
{
	const char *p = buf;

	while (len) {
		size_t sent = 0;
		CURLcode code = curl_easy_send(s->curl, p, len, &sent);
		if (code == CURLE_AGAIN) {
			int r = stream_wait(s, POLLOUT, 30000);
			if (r < 0)
				return sbx_error_set(err, r, "engine stream: cannot write: %s",
						     strerror(-r));
			continue;
		}
		if (code != CURLE_OK)
			return sbx_error_set(err, -EPIPE, "engine stream: write failed: %s",
					     curl_easy_strerror(code));
		p += sent;
		len -= sent;
	}
	return 0;
}

/* Room in s->in for more: 0, or -ENOMEM. */
static int stream_room(sbx_stream *s)
{
	if (s->in_off == s->in_len)
		s->in_off = s->in_len = 0;
	if (s->in_len < s->in_cap)
		return 0;
	if (s->in_off) {
		memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
		s->in_len -= s->in_off;
		s->in_off = 0;
	} else {
		size_t cap = s->in_cap ? s->in_cap * 2 : 65536;
		unsigned char *p = realloc(s->in, cap);
		if (!p)
			return -ENOMEM;
		s->in = p;
		s->in_cap = cap;
	}
	return 0;
}

/* Over TLS, after a receive: whatever more libcurl holds decrypted (or
 * undecrypted in its own buffers) is taken now, into the room s->in has
 * (never grown for it), until libcurl says there is nothing
 * (CURLE_AGAIN). Bytes may wait there while the socket looks idle to a
 * caller's poll(2): when the room ends first, or an end or an error is
 * left for the next receive to see, s->tls_more says so, and
 * sbx_stream_pending tells it. */
static void stream_take_tls(sbx_stream *s)
{
	s->tls_more = true;
	for (;;) {
		size_t got = 0;
		CURLcode code;

		if (s->in_off == s->in_len)
			s->in_off = s->in_len = 0;
		if (s->in_len == s->in_cap && s->in_off) {
			memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
			s->in_len -= s->in_off;
			s->in_off = 0;
		}
		if (s->in_len == s->in_cap)
			return; /* full: what waits in libcurl is for the next receive */
		code = curl_easy_recv(s->curl, s->in + s->in_len, s->in_cap - s->in_len, &got);
		if (code == CURLE_AGAIN) {
			s->tls_more = false;
			return;
		}
		if (code != CURLE_OK || got == 0)
			return; /* an end or an error: the next receive says it */
		s->in_len += got;
	}
}

/* Receive into s->in; 0 on data, 1 on EOF, negative on error or timeout. */
static int stream_fill(sbx_stream *s, int timeout_ms)
{
	for (;;) {
		size_t got = 0;
		CURLcode code;

		if (stream_room(s) < 0)
			return -ENOMEM;
		code = curl_easy_recv(s->curl, s->in + s->in_len, s->in_cap - s->in_len, &got);
		s->tls_more = false;
		if (code == CURLE_AGAIN) {
			int r = stream_wait(s, POLLIN, timeout_ms);
			if (r < 0)
				return r;
			continue;
		}
		if (code != CURLE_OK)
			return -ECONNRESET;
		if (got == 0)
			return 1;
		s->in_len += got;
		if (s->tls)
			stream_take_tls(s);
		return 0;
	}
}

static int stream_read_head(sbx_stream *s, struct sbx_error *err)
{
	unsigned char *end;
	long status = 0;
	int r;

	for (;;) {
		end = s->in_len >= 4 ? memmem(s->in, s->in_len, "\r\n\r\n", 4) : NULL;
		if (end)
			break;
		if (s->in_len > REST_HDR_MAX)
			return sbx_error_set(err, -EPROTO, "engine stream: response head too long");
		r = stream_fill(s, 30000);
		if (r == 1)
			return sbx_error_set(err, -EPROTO, "engine closed the exec stream at once");
		if (r < 0)
			return sbx_error_set(err, r, "engine stream: no answer: %s", strerror(-r));
	}
	if (sscanf((const char *)s->in, "HTTP/1.%*d %ld", &status) != 1)
		return sbx_error_set(err, -EPROTO, "engine stream: malformed status line");
	s->in_off = (size_t)(end + 4 - s->in);
	if (status == 101 || status == 200)
		return 0;

	/* An error: the body (JSON) follows; read what arrives in a moment. */
	while (stream_fill(s, 1000) == 0 && s->in_len - s->in_off < REST_HDR_MAX)
		;
	{
		struct sbx_rest_response resp = {.status = status};
		sbx_buf_append(&resp.body, s->in + s->in_off, s->in_len - s->in_off);
		r = sbx_rest_check(&resp, NULL, err);
		sbx_rest_response_release(&resp);
	}
	return r;
}

int sbx_rest_hijack(struct sbx_rest *r, const char *path, struct json_object *body_json,
		    sbx_stream **ret_stream, struct sbx_error *err)
{
	const struct rest_target *t = target_now(r);
	struct sbx_error own = SBX_ERROR_INIT; /* the status of a failure, for the metrics */
	int64_t t0_us = sbx_metrics_now_us();
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sbx_buf head = SBX_BUF_INIT;
	const char *body = json_object_to_json_string_ext(body_json, JSON_C_TO_STRING_PLAIN);
	_cleanup_free_ char *url = NULL;
	curl_socket_t sock = CURL_SOCKET_BAD;
	sbx_stream *s;
	CURLcode code;
	int ret;

	if (!err)
		err = &own;

	s = calloc(1, sizeof(*s));
	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	s->fd = -1;
	s->curl = curl_easy_init();
	if (!s->curl || asprintf(&url, "%s/", t->base) < 0) {
		ret = sbx_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rest_common_opts(r, t, s->curl);
	curl_easy_setopt(s->curl, CURLOPT_URL, url);
	curl_easy_setopt(s->curl, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, errbuf);
	code = curl_easy_perform(s->curl);
	if (code != CURLE_OK) {
		ret = rest_curl_error(t, code, errbuf, err);
		goto fail;
	}
	/* errbuf is this frame's, and the handle outlives it in the stream:
	 * libcurl would copy a later send's or receive's error there, into
	 * whatever stack (of any thread) is then at that address. */
	curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_getinfo(s->curl, CURLINFO_ACTIVESOCKET, &sock);
	s->fd = (int)sock;
	s->tls = t->tls;

	ret = sbx_buf_appendf(&head,
			      "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: mcp-sandbox\r\n"
			      "Content-Type: application/json\r\nConnection: Upgrade\r\n"
			      "Upgrade: tcp\r\nContent-Length: %zu\r\n\r\n%s",
			      path, t->host_header, strlen(body), body);
	if (ret < 0) {
		ret = sbx_error_set(err, ret, "out of memory");
		goto fail;
	}
	ret = stream_send_all(s, head.data, head.len, err);
	if (ret < 0)
		goto fail;
	ret = stream_read_head(s, err);
	if (ret < 0)
		goto fail;
	sbx_buf_release(&head);
	count_request("POST", path, 0, 0, t0_us);
	*ret_stream = s;
	return 0;
fail:
	count_request("POST", path, ret, ret < 0 ? err->http_status : 0, t0_us);
	sbx_buf_release(&head);
	sbx_stream_free(s);
	return ret;
}

int sbx_stream_write(sbx_stream *s, const void *buf, size_t len, struct sbx_error *err)
{
	return stream_send_all(s, buf, len, err);
}

ssize_t sbx_stream_write_some(sbx_stream *s, const void *buf, size_t len, struct sbx_error *err)
{
	size_t sent = 0;
	CURLcode code;

	if (len == 0)
		return 0;
	code = curl_easy_send(s->curl, buf, len, &sent);
	if (code == CURLE_AGAIN)
		return 0;
	if (code != CURLE_OK)
		return sbx_error_set(err, -EPIPE, "engine stream: write failed: %s",
				     curl_easy_strerror(code));
	return (ssize_t)sent;
}

int sbx_stream_close_stdin(sbx_stream *s, struct sbx_error *err)
{
	if (shutdown(s->fd, SHUT_WR) < 0)
		return sbx_error_set(err, -errno, "engine stream: cannot close stdin: %s",
				     strerror(errno));
	return 0;
}

ssize_t sbx_stream_read(sbx_stream *s, void *buf, size_t cap, int *ret_fd, int timeout_ms,
			struct sbx_error *err)
{
	struct sbx_demux *d = &s->demux;

	if (cap == 0)
		return sbx_error_set(err, -EINVAL, "engine stream: zero-sized read");
	for (;;) {
		size_t avail = s->in_len - s->in_off;

		if (d->remaining && avail) {
			size_t take = d->remaining;
			if (take > avail)
				take = avail;
			if (take > cap)
				take = cap;
			memcpy(buf, s->in + s->in_off, take);
			s->in_off += take;
			d->remaining -= take;
			*ret_fd = d->fd;
			return (ssize_t)take;
		}
		if (!d->remaining && avail) {
			size_t take = sizeof(d->hdr) - d->hdr_have;
			if (take > avail)
				take = avail;
			memcpy(d->hdr + d->hdr_have, s->in + s->in_off, take);
			d->hdr_have += take;
			s->in_off += take;
			if (d->hdr_have == sizeof(d->hdr)) {
				d->hdr_have = 0;
				if (d->hdr[0] > 3 || d->hdr[1] || d->hdr[2] || d->hdr[3])
					return sbx_error_set(err, -EPROTO,
							     "engine stream: bad frame header");
				d->fd = d->hdr[0];
				d->remaining = (size_t)d->hdr[4] << 24 | (size_t)d->hdr[5] << 16 |
					       (size_t)d->hdr[6] << 8 | d->hdr[7];
			}
			continue;
		}
		if (s->eof)
			return 0;
		int r = stream_fill(s, timeout_ms);
		if (r == 1) {
			s->eof = true;
			if (d->remaining || d->hdr_have)
				return sbx_error_set(err, -EPROTO, "engine stream: cut mid-frame");
			return 0;
		}
		if (r == -ETIMEDOUT)
			return -ETIMEDOUT;
		if (r < 0)
			return sbx_error_set(err, r, "engine stream: read failed: %s",
					     strerror(-r));
	}
}

int sbx_stream_fd(const sbx_stream *s)
{
	return s->fd;
}

bool sbx_stream_pending(const sbx_stream *s)
{
	return s->in_len > s->in_off || s->eof || s->tls_more;
}

sbx_stream *sbx_stream_free(sbx_stream *s)
{
	if (!s)
		return NULL;
	if (s->curl)
		curl_easy_cleanup(s->curl);
	free(s->in);
	free(s->exec_id);
	free(s);
	return NULL;
}
