/* SPDX-License-Identifier: MIT */
/*
 * The egress relay's protocol and policy, without threads or I/O
 * (src/egress/egress_proto.c), for src/egress/egress.c, the tests and the
 * fuzzer. The frame format is described in src/egress/sbx_relay.py.
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

#include "sbx/egress_lookup.h"
#include "sbx/hostport.h"
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
	EGRESS_REQ_INDEX,   /* a GET/HEAD for a clean path under the index's path or its
			     * files path: the server adds credentials */
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
	/* The upstream may be at any address: the index, its file host, or an
	 * allow-list entry that is an IP literal. Otherwise loopback, private,
	 * link-local and such addresses are refused when connecting
	 * (egress_upstream.c). */
	bool any_address;
};
void egress_request_release(struct egress_request *q);

/* The index and the allow-list, parsed once from the settings. */
struct egress_policy {
	char *index_url;       /* the index URL without user:password, for curl */
	char *index_origin;    /* "scheme://host[:port]" as pip would spell it, for Location */
	char *index_path;      /* its path, "/simple/" */
	char *files_path;      /* sandbox.index_files_path; NULL when empty */
	char *user, *password; /* decoded; NULL when none */
	char index_host[SBX_HOST_BUF];
	int index_port;
	bool index_https;
	/* Hosts a tunnel may reach besides the index's: egress_allow plus the
	 * index's file host (files.pythonhosted.org for pypi.org). */
	struct egress_allow {
		char host[SBX_HOST_BUF]; /* perhaps "*.example.com" */
		int port;		 /* 0: 443 for CONNECT, 80 for plain HTTP */
		bool any_address;	 /* an IP literal, or the index's file host */
	} * allow;
	size_t n_allow;
	/* The list allow was built from: the tenant's own (owned; "none" or
	 * HOST[:PORT],...), or NULL for server_allow (sandbox.egress_allow,
	 * owned). */
	char *list;
	char *server_allow;
	/* The tenant whose list applies (owned; NULL: the server's always) and
	 * where its list is looked up (struct sbx_egress_config's lookup: the
	 * program's, sbx_manager_set_egress_lookup). */
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
 * the keys file applies to the next connections). A lookup that fails (the
 * keys file cannot be used now), or a list that does not parse or fit,
 * allows no host besides the index's. Not thread-safe: under the relay's
 * lock. */
void egress_policy_follow(struct egress_policy *p);
/* Whether a tunnel (TLS: CONNECT) or a plain HTTP request to HOST:PORT is
 * allowed: the index's own host and port, or an entry of the allow-list. */
bool egress_policy_allows(const struct egress_policy *p, const char *host, int port, bool tls);
/* Likewise, saying how: EGRESS_DENIED, EGRESS_PUBLIC (an allowed name: only
 * public addresses may be reached under it) or EGRESS_ANY_ADDRESS (the
 * index's host, its file host, or an entry that is an IP literal: the
 * operator named the address). */
enum egress_reach { EGRESS_DENIED, EGRESS_PUBLIC, EGRESS_ANY_ADDRESS };
enum egress_reach egress_policy_reach(const struct egress_policy *p, const char *host, int port,
				      bool tls);
/* Whether PATH ("/path?query") may be fetched from the index (always at
 * index_origin: no other scheme, host or port) with its credentials: clean
 * (sbx_path_is_clean) and under its path, or under files_path when that is
 * set, or else a distribution file anywhere on the index's origin (its last
 * segment NAME.whl, .tar.gz, .zip or .tar.bz2, perhaps + ".metadata", no
 * query, no byte outside letters, digits, "-_.+!~/"); 0, or 403 with WHY
 * naming the index's path and sandbox.index_files_path. */
int egress_index_path_check(const struct egress_policy *p, const char *path, char *why,
			    size_t why_size);

/* Parses the request head at the start of BUF[0..N): 1 and *RET when it is
 * complete and allowed, 0 when more bytes are needed; else the HTTP status
 * to answer (400 malformed, 403 not allowed, 405 a method other than GET,
 * HEAD or CONNECT, 431 past EGRESS_HEAD_MAX, 501 a body) with WHY, the
 * answer's text. RELAY_PORT is the relay's own port (absolute-form requests
 * to it are for the index). */
int egress_parse_request(const struct egress_policy *p, int relay_port, const char *buf, size_t n,
			 struct egress_request *ret, char *why, size_t why_size);

/* Where the search for a request head's end stopped, kept between the
 * arrivals of its bytes (zeroed for a new head). */
struct egress_head_scan {
	size_t next;	 /* the first offset not yet tried as the start of CRLF CRLF */
	size_t examined; /* offsets tried over all calls (the tests' measure of work) */
	/* The head was refused by egress_index_path_check: a path the index's
	 * credentials do not go to. */
	bool index_refused;
};
/* egress_parse_request for a head that arrives in pieces: BUF[0..N) is all
 * that arrived so far (its first bytes the same at every call); the blank
 * line is looked for only past where the last call on S stopped, so a head
 * sent a byte at a time costs O(N) in all rather than O(N^2). The head is
 * parsed (once) when its end is found or N reaches EGRESS_HEAD_MAX. */
int egress_parse_head(struct egress_head_scan *s, const struct egress_policy *p, int relay_port,
		      const char *buf, size_t n, struct egress_request *ret, char *why,
		      size_t why_size);

/* Connections relayed at once (src/egress/egress_slots.c), each holding an
 * upstream socket: takes one for TENANT (0), or refuses it with 503 and
 * WHY, the answer's text naming the limit, when MAX are held over all
 * tenants (sandbox.egress_connections) or PER_TENANT by TENANT
 * (sandbox.egress_connections_per_tenant); -ENOMEM. */
int egress_slot_take(const char *tenant, int64_t max, int64_t per_tenant, char *why,
		     size_t why_size);
/* Gives back one that TENANT took. */
void egress_slot_give(const char *tenant);
/* Those held now by TENANT, or by all when NULL (for the tests). */
int64_t egress_slots_held(const char *tenant);

/* "HTTP/1.1 STATUS PHRASE" (NULL: the status's usual one; else one line of
 * printable ASCII) with Content-Type text/plain, Content-Length and
 * Connection: close, then TEXT and a newline, into a malloc'd *RET of
 * *RET_LEN. */
int egress_plain_response(int status, const char *phrase, const char *text, char **ret,
			  size_t *ret_len);
/* The reason phrase of the 403 for a path the index's credentials do not
 * go to: pip shows it ("403 Client Error: PHRASE for url: ..."), where it
 * drops the body. */
#define EGRESS_INDEX_REFUSED_PHRASE                                                                \
	"Forbidden by mcp-sandbox: not the index's path nor a distribution file (see "             \
	"sandbox.index_files_path)"

#endif
