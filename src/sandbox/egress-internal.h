/* SPDX-License-Identifier: MIT */
/*
 * The egress relay's protocol and policy, without threads or I/O
 * (src/sandbox/egress_proto.c), for src/sandbox/egress.c, the tests and the
 * fuzzer. The frame format is described in src/sandbox/interp/sbx_relay.py.
 *
 * Everything here reads bytes a sandbox chose: the relay's frames and the
 * requests of whatever connects to it. Each parser is bounded (a frame's
 * payload, a request head, a line) and refuses what does not fit, saying why.
 */
#ifndef SBX_EGRESS_INTERNAL_H
#define SBX_EGRESS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx/hostport.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

enum egress_frame_type {
	EGRESS_HELLO = 1,
	EGRESS_OPEN = 2,
	EGRESS_DATA = 3,
	EGRESS_CLOSE = 4,
	EGRESS_WINDOW = 5,
};

#define EGRESS_HDR 8
/* Largest payload of one frame, both ways; a relay that announces more is
 * stopped. */
#define EGRESS_FRAME_MAX 32768
/* Bytes of DATA each side may send on a stream beyond what the other granted. */
#define EGRESS_STREAM_WINDOW 65536
/* Longest request head (request line and headers) a connection may send. */
#define EGRESS_HEAD_MAX 16384

/* The frame reader: bytes in, whole frames out. */
struct egress_reader {
	unsigned char hdr[EGRESS_HDR];
	size_t hdr_have;
	uint8_t type;
	uint16_t id;
	uint32_t len;
	size_t have; /* payload bytes in buf */
	unsigned char buf[EGRESS_FRAME_MAX];
};

/* Receives one frame (PAYLOAD valid during the call); 0 to go on, negative
 * to stop (egress_reader_feed returns it). */
typedef int (*egress_frame_fn)(void *userdata, uint8_t type, uint16_t id, const unsigned char *p,
			       uint32_t len);

/* Feeds N bytes; calls FN for every complete frame. A header announcing more
 * than EGRESS_FRAME_MAX, a type outside HELLO..WINDOW or non-zero flags is
 * -EPROTO with WHY (may be NULL) saying so, and nothing of it is kept. */
int egress_reader_feed(struct egress_reader *r, const void *data, size_t n, egress_frame_fn fn,
		       void *userdata, char *why, size_t why_size);
/* Writes a frame header into OUT. */
void egress_frame_header(unsigned char out[EGRESS_HDR], uint8_t type, uint16_t id, uint32_t len);

/* What a connection to the relay asks for. */
enum egress_kind {
	EGRESS_REQ_INDEX,   /* a GET/HEAD for a path on the index: the server adds credentials */
	EGRESS_REQ_FORWARD, /* a GET/HEAD for http://HOST:PORT/... in egress_allow, no credentials
			     */
	EGRESS_REQ_CONNECT, /* CONNECT HOST:PORT, allowed: a tunnel */
};

/* A parsed request head. */
struct egress_request {
	enum egress_kind kind;
	bool head_only;		 /* HEAD */
	char host[SBX_HOST_BUF]; /* CONNECT, FORWARD: the target */
	int port;
	char *path;    /* INDEX, FORWARD: "/path?query" as sent (owned) */
	char *headers; /* INDEX, FORWARD: the headers passed on, "Name: value" each
			* followed by a NUL (owned) */
	size_t headers_len;
	size_t head_len; /* bytes of the head, the blank line included */
};
void egress_request_release(struct egress_request *q);

/* The index and the allow-list, parsed once from the settings. */
struct egress_policy {
	char *index_url;       /* the index URL without user:password, for curl */
	char *index_origin;    /* "scheme://host[:port]" as pip would spell it, for Location */
	char *index_path;      /* its path, "/simple/" */
	char *user, *password; /* decoded; NULL when none */
	char index_host[SBX_HOST_BUF];
	int index_port;
	bool index_https;
	/* Hosts a tunnel may reach besides the index's: egress_allow plus the
	 * index's file host (files.pythonhosted.org for pypi.org). */
	struct egress_allow {
		char host[SBX_HOST_BUF]; /* perhaps "*.example.com" */
		int port;		 /* 0: 443 for CONNECT, 80 for plain HTTP */
	} * allow;
	size_t n_allow;
	/* The list allow was built from: the tenant's own (owned; "none" or
	 * HOST[:PORT],...), or NULL for server_allow (sandbox.egress_allow,
	 * owned). */
	char *list;
	char *server_allow;
	/* The tenant whose list applies (owned; NULL: the server's always) and
	 * where its list is looked up (sbx_manager_set_egress_lookup). */
	char *tenant;
	sbx_egress_lookup_fn lookup;
	void *lookup_ud;
};
/* Parses S's sandbox.index_url and sandbox.egress_allow; -EINVAL saying why
 * (never with the password), -ENOMEM. */
int egress_policy_init(struct egress_policy *p, const struct sbx_settings *s, char *why,
		       size_t why_size);
void egress_policy_release(struct egress_policy *p);
/* The allow-list becomes LIST's (a tenant's: "none" for no host besides the
 * index's, or HOST[:PORT],...), or the server's sandbox.egress_allow when
 * LIST is NULL; the index's file host stays. On failure (-EINVAL saying
 * why, -ENOMEM) P is as it was. */
int egress_policy_set_list(struct egress_policy *p, const char *list, char *why, size_t why_size);
/* P follows TENANT's own list, looked up with FN (may be NULL: never) now
 * and at each egress_policy_follow. -ENOMEM. */
int egress_policy_set_tenant(struct egress_policy *p, const char *tenant, sbx_egress_lookup_fn fn,
			     void *userdata);
/* Asks P's lookup for its tenant's list and rebuilds the allow-list when it
 * changed (called before each request is decided, so that a list changed in
 * the keys file applies to the next connections). A lookup that fails keeps
 * the list as it was; a list that does not parse (or does not fit) allows
 * no host besides the index's. Not thread-safe: under the relay's lock. */
void egress_policy_follow(struct egress_policy *p);
/* Whether a tunnel (TLS: CONNECT) or a plain HTTP request to HOST:PORT is
 * allowed: the index's own host and port, or an entry of the allow-list. */
bool egress_policy_allows(const struct egress_policy *p, const char *host, int port, bool tls);

/* Parses the request head at the start of BUF[0..N): 1 and *RET when it is
 * complete and allowed, 0 when more bytes are needed; else the HTTP status
 * to answer (400 malformed, 403 not allowed, 405 a method other than GET,
 * HEAD or CONNECT, 431 past EGRESS_HEAD_MAX, 501 a body) with WHY, the
 * answer's text. RELAY_PORT is the relay's own port (absolute-form requests
 * to it are for the index). */
int egress_parse_request(const struct egress_policy *p, int relay_port, const char *buf, size_t n,
			 struct egress_request *ret, char *why, size_t why_size);

/* "HTTP/1.1 STATUS REASON" with Content-Type text/plain, Content-Length and
 * Connection: close, then TEXT and a newline, into a malloc'd *RET of *RET_LEN. */
int egress_plain_response(int status, const char *text, char **ret, size_t *ret_len);

#endif
