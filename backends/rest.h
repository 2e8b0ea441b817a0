/* SPDX-License-Identifier: MIT */
/*
 * The REST plumbing Docker and Podman share, written once: libcurl over a
 * unix socket or TCP, JSON bodies, engine error bodies turned into
 * struct sbx_error, the 8-byte-header multiplexed stream format, and the
 * hijacked (upgraded) connection of exec/start. Internal to backends/.
 */
#ifndef SBX_BACKENDS_REST_H
#define SBX_BACKENDS_REST_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>

#include "sbx/buf.h"
#include "sbx/engine.h"
#include "sbx/error.h"

struct sbx_rest;

/* Where to connect: url is "unix:///path", "/path", "tcp://host:port" or
 * "http://host:port"; TLS (may be NULL) as sbx_engine_tls says, for TCP
 * only (its files checked now). Nothing is contacted yet. */
int sbx_rest_open(const char *url, long timeout_ms, const struct sbx_engine_tls *tls,
		  struct sbx_rest **ret_rest, struct sbx_error *err);
struct sbx_rest *sbx_rest_free(struct sbx_rest *r);
/* The endpoint calls go to now (valid while R lives). */
const char *sbx_rest_url(const struct sbx_rest *r);
/* Calls go to URL from now on (as sbx_rest_open parses it, with R's TLS):
 * an endpoint R was opened with or pointed at before, or a new one while
 * fewer than 8 were (-ENOSPC). Calls in flight finish where they are. */
int sbx_rest_retarget(struct sbx_rest *r, const char *url, struct sbx_error *err);
/* Asked when a call of R could not reach FAILED_URL and sent nothing: 1
 * when R now points elsewhere, or another caller's failover already moved
 * it (the call is made again there), 0 when there is nowhere else. Called
 * without any lock of R held, from any calling thread. */
typedef int (*sbx_rest_failover_fn)(void *userdata, struct sbx_rest *r, const char *failed_url);
/* Sets R's failover, once, before any call. */
void sbx_rest_set_failover(struct sbx_rest *r, sbx_rest_failover_fn fn, void *userdata);
/* The TLS files R was opened with (fields NULL when none): for handles
 * opened from it (a swarm's nodes). Valid while R lives. */
const struct sbx_engine_tls *sbx_rest_tls(const struct sbx_rest *r);

struct sbx_rest_request {
	const char *method;	  /* "GET", "POST", "PUT", "DELETE", "HEAD" */
	const char *path;	  /* absolute, with query, already escaped */
	const char *content_type; /* for body; NULL = application/json when body set */
	const void *body;
	size_t body_len;
	const char *body_file; /* stream the body from this host file instead */
	sbx_sink_fn sink;      /* 2xx bodies go here instead of resp->body */
	void *sink_data;
	long timeout_ms;	 /* 0 = the handle's; -1 = none (streams) */
	const char *want_header; /* a response header to capture in resp->header */
	/* Optional, for long-lived requests; both get sink_data. on_head is
	 * called once the head of a 2xx response has arrived, before any of
	 * its body; a negative return ends the call with that value. abort is
	 * polled about every 100 ms even while nothing arrives (and as data
	 * does); true ends the call with -ECANCELED. */
	int (*on_head)(void *sink_data, long status);
	bool (*abort)(void *sink_data);
};

struct sbx_rest_response {
	long status;
	struct sbx_buf body;
	char *header; /* value of want_header, owned */
};

void sbx_rest_response_release(struct sbx_rest_response *resp);

/* Perform one request. Transport failures are errors (-ECONNREFUSED with the
 * URL, -ETIMEDOUT, ...); any HTTP status is a success of this call and is
 * left to the caller, who usually passes it to sbx_rest_check(). A sink's
 * or on_head's negative value is returned as is, err untouched. TCP
 * connections have keepalive on, so a vanished engine host breaks a
 * long-lived request (after about two minutes) instead of hanging it. */
int sbx_rest_call(struct sbx_rest *r, const struct sbx_rest_request *req,
		  struct sbx_rest_response *resp, struct sbx_error *err);

/* 0 for a 2xx (and for the statuses in ok_also, 0-terminated), else an error
 * carrying the status and the engine's message ("message" or "cause" of a JSON
 * body, else the body text). 404 -> -ENOENT, 409 -> -EBUSY, 400 -> -EINVAL,
 * 401/403 -> -EACCES, 5xx -> -EIO. */
int sbx_rest_check(const struct sbx_rest_response *resp, const long *ok_also,
		   struct sbx_error *err);

/* Convenience: call, check, and parse a JSON reply into *ret_json (may be
 * NULL to discard). body_json may be NULL. */
int sbx_rest_json(struct sbx_rest *r, const char *method, const char *path,
		  struct json_object *body_json, const long *ok_also, struct json_object **ret_json,
		  struct sbx_error *err);

/* Printf a path: %s arguments are URL-escaped, %d printed; nothing else
 * is a conversion. sbx_rest_vpath puts prefix (may be NULL) first. */
char *sbx_rest_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *sbx_rest_vpath(const char *prefix, const char *fmt, va_list ap);

/* Demultiplexer of the 8-byte-header stream format:
 * [stream, 0, 0, 0, size32be] payload. stream 0 = stdin, 1 = stdout, 2 = stderr. */
struct sbx_demux {
	unsigned char hdr[8];
	size_t hdr_have;
	size_t remaining;
	int fd;
};
typedef int (*sbx_demux_fn)(void *userdata, int fd, const void *data, size_t len);
/* Feed bytes; calls fn for every payload piece. Returns fn's negative value
 * or -EPROTO on a malformed header. */
int sbx_demux_feed(struct sbx_demux *d, const void *data, size_t len, sbx_demux_fn fn,
		   void *userdata);

/* A hijacked connection to a process's stdio (see sbx_exec_stream). */
struct sbx_stream {
	void *curl;	   /* CURL *, CONNECT_ONLY */
	int fd;		   /* the socket, for poll() */
	unsigned char *in; /* received, not yet consumed */
	size_t in_off, in_len, in_cap;
	struct sbx_demux demux;
	bool eof;
	bool tls;	    /* over TLS: what libcurl decrypted is out of poll()'s sight */
	bool tls_more;	    /* ... and bytes (or an end) may wait there now */
	sbx_engine *engine; /* for the exit code; not owned */
	char *exec_id;	    /* owned */
};

/* The hijacked connection: POST path with body_json and
 * "Connection: Upgrade / Upgrade: tcp"; accepts 101 or a 200 raw stream. */
int sbx_rest_hijack(struct sbx_rest *r, const char *path, struct json_object *body_json,
		    sbx_stream **ret_stream, struct sbx_error *err);

#endif
