/* SPDX-License-Identifier: MIT */
/*
 * Client connections: how many each address holds, which are idle, and who
 * is let in at a limit (fair admission).
 *
 * A connection is idle between its requests (a keep-alive connection in a
 * client's pool); one with a request in flight (a call, an SSE stream, a
 * download) is busy, from the moment libmicrohttpd has read the request's
 * first line (its URI callback), before the rest of its headers. One whose
 * headers have not all come SBX_HTTP_HEAD_MS after its first line (or,
 * its first request's, after its accept) (a
 * client trickling them, a byte now and then) can be closed to make room
 * as an idle one can: else a few addresses could hold every place for as
 * long as libmicrohttpd's timeout of silence lets each byte wait. At server.max_connections_per_ip
 * a new connection of an address is let in by closing that address's least recently used idle
 * connection, as the session table evicts idle sessions; at
 * server.max_connections by closing the least recently used idle one of
 * any address. Only when none is idle is the newcomer over the limit: it
 * is answered 503 with Retry-After and a body naming the limit, then
 * closed: SBX_HTTP_OVERFLOW such connections at once, of which one
 * address holds at most SBX_HTTP_OVERFLOW_PER_PEER, and each has
 * SBX_HTTP_OVER_TIMEOUT_S to send its request: libmicrohttpd closes one
 * silent that long, and one that trickles its request is closed once it
 * has been in the band that long and a newcomer needs its place (a timeout
 * of silence alone would let a byte every few seconds hold a place for
 * ever; clients that keep opening new connections can still keep the band
 * full, each connection for 10 s at most). Past those a connection
 * that would be over a limit is closed at accept, the one case without a
 * status, bounded by the descriptors it would take; one that would be
 * admitted never is, so no address can fill the band against another.
 *
 * At server.max_connections the idle connection closed is the least
 * recently used one of the address holding the most connections (the
 * heaviest holder makes room first), else of any address.
 *
 * An idle connection is closed with shutdown(2) on its socket, under the
 * table's lock: libmicrohttpd's thread for it reads the end and closes it.
 * The record leaves the table (sbx_conn_closed) before libmicrohttpd closes
 * the descriptor, so a shutdown under the lock never reaches a reused one.
 * Closing an idle keep-alive connection races with its client reusing it
 * (its request then fails without a status, as at any server's keep-alive
 * timeout). So only a connection idle for SBX_HTTP_EVICT_IDLE_MS is
 * closed, never one with bytes waiting to be read, and a request that
 * still arrives on a closed one is dropped before it runs (its answer
 * could not be sent). A new connection is not idle: its client opened it
 * to send a request, and a loaded client (hundreds of requests at once)
 * can take more than a second to write it. It counts as one whose headers
 * are coming from its accept until its first request's headers are in,
 * and so can be closed only SBX_HTTP_HEAD_MS after its accept: one silent
 * that long, or trickling its first request, is closed as a trickler is.
 *
 * A connection answered before its request's body was read is handed to
 * the lingering close (src/http/linger.c) when it closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-internal.h"
#include "sbx/log.h"

/* A list of connections by when they entered it (idle, or their headers
 * begun), oldest first. */
struct conn_list {
	struct sbx_http_conn *head, *tail;
};

/* Which of its address's lists (and the table's) a connection is in. */
enum conn_listed {
	LISTED_NONE,
	LISTED_IDLE,	/* between requests */
	LISTED_HEADING, /* new, or a request's first line in: its headers not all */
};

struct conn_peer {
	struct conn_peer *next; /* its bucket's chain */
	struct sbx_peer peer;
	int admitted;		  /* its connections that count against the limits */
	int over;		  /* its connections past a limit (CONN_OVER) */
	int refs;		  /* its connection records (admitted or not) */
	struct conn_list idle;	  /* its idle connections */
	struct conn_list heading; /* its connections with headers coming */
};

enum conn_state {
	CONN_ADMITTED,
	CONN_OVER,    /* past a limit with none idle: answered 503 */
	CONN_EVICTED, /* closed to let another in; no longer counted */
};

struct sbx_http_conn {
	struct conn_peer *peer;
	int fd;
	enum conn_state state;
	const char *over_limit; /* CONN_OVER: the setting it is past */
	unsigned busy;		/* requests in flight */
	int64_t since;		/* in a list: since when (monotonic ms) */
	bool linger;		/* answered before its body was read */
	/* In its peer's list and the global one of that kind while admitted
	 * and idle, or heading. */
	enum conn_listed listed;
	struct sbx_http_conn *pprev, *pnext, *gprev, *gnext;
	/* CONN_OVER: in the band's list, oldest first, since over_since. */
	int64_t over_since;
	struct sbx_http_conn *oprev, *onext;
};

#define CONN_BUCKETS 1024

/* The socket context of a connection with no record (no memory for one):
 * it is answered 503 like one over a limit. */
static char unrecorded;

struct sbx_conn_table {
	pthread_mutex_t lock;
	struct conn_peer *buckets[CONN_BUCKETS];
	struct conn_list idle;	  /* every idle connection */
	struct conn_list heading; /* every connection with headers coming */
	/* Every CONN_OVER connection, by when it came (oprev, onext). */
	struct sbx_http_conn *over_head, *over_tail;
	int per_peer; /* server.max_connections_per_ip, 0 = none */
	int max;      /* server.max_connections (clamped) */
	int admitted;
	int over;
	uint64_t evicted; /* idle connections closed to let others in */
	uint64_t refused; /* connections answered 503 for a limit */
};

int sbx_conn_table_new(int max, int per_peer, struct sbx_conn_table **ret)
{
	struct sbx_conn_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->max = max;
	t->per_peer = per_peer;
	*ret = t;
	return 0;
}

struct sbx_conn_table *sbx_conn_table_free(struct sbx_conn_table *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < CONN_BUCKETS; i++) {
		while (t->buckets[i]) {
			struct conn_peer *p = t->buckets[i];
			t->buckets[i] = p->next;
			free(p);
		}
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
	return NULL;
}

/* The entry of P (lock held); created when CREATE, else NULL when none. */
static struct conn_peer *peer_get(struct sbx_conn_table *t, const struct sbx_peer *p, bool create)
{
	struct conn_peer **pp = &t->buckets[sbx_peer_hash(p) % CONN_BUCKETS];

	while (*pp && memcmp(&(*pp)->peer, p, sizeof(*p)) != 0)
		pp = &(*pp)->next;
	if (!*pp && create && (*pp = calloc(1, sizeof(**pp))))
		(*pp)->peer = *p;
	return *pp;
}

static void peer_put(struct sbx_conn_table *t, struct conn_peer *e)
{
	struct conn_peer **pp = &t->buckets[sbx_peer_hash(&e->peer) % CONN_BUCKETS];

	if (--e->refs > 0)
		return;
	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (*pp)
		*pp = e->next;
	free(e);
}

/* ---- the idle and heading lists (lock held) ---- */

static void list_add(struct sbx_conn_table *t, struct sbx_http_conn *c, enum conn_listed which)
{
	struct conn_list *pl = which == LISTED_IDLE ? &c->peer->idle : &c->peer->heading;
	struct conn_list *gl = which == LISTED_IDLE ? &t->idle : &t->heading;

	c->since = sbx_monotonic_ms();
	c->pnext = NULL;
	c->pprev = pl->tail;
	if (pl->tail)
		pl->tail->pnext = c;
	else
		pl->head = c;
	pl->tail = c;
	c->gnext = NULL;
	c->gprev = gl->tail;
	if (gl->tail)
		gl->tail->gnext = c;
	else
		gl->head = c;
	gl->tail = c;
	c->listed = which;
}

static void list_remove(struct sbx_conn_table *t, struct sbx_http_conn *c)
{
	struct conn_list *pl, *gl;

	if (c->listed == LISTED_NONE)
		return;
	pl = c->listed == LISTED_IDLE ? &c->peer->idle : &c->peer->heading;
	gl = c->listed == LISTED_IDLE ? &t->idle : &t->heading;
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else
		pl->head = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	else
		pl->tail = c->pprev;
	if (c->gprev)
		c->gprev->gnext = c->gnext;
	else
		gl->head = c->gnext;
	if (c->gnext)
		c->gnext->gprev = c->gprev;
	else
		gl->tail = c->gprev;
	c->pprev = c->pnext = c->gprev = c->gnext = NULL;
	c->listed = LISTED_NONE;
}

/* Whether C, idle, has bytes of a next request waiting on its socket. */
static bool bytes_waiting(const struct sbx_http_conn *c)
{
	int n = 0;

	return c->fd >= 0 && ioctl(c->fd, FIONREAD, &n) == 0 && n > 0;
}

/* Closes C (idle or heading, admitted) to make room. */
static void evict(struct sbx_conn_table *t, struct sbx_http_conn *c)
{
	list_remove(t, c);
	c->state = CONN_EVICTED;
	c->peer->admitted--;
	t->admitted--;
	t->evicted++;
	/* libmicrohttpd's thread for it sees the end and closes it. */
	shutdown(c->fd, SHUT_RDWR);
}

/* The connection in PEER's lists (or the global ones when PEER is NULL)
 * that may be closed to make room now, or NULL: the least recently used
 * idle one that has been idle SBX_HTTP_EVICT_IDLE_MS with nothing waiting
 * to be read, else the oldest whose headers have been coming for
 * SBX_HTTP_HEAD_MS (bytes waiting or not: that is how it trickles). */
static struct sbx_http_conn *evictable(struct sbx_conn_table *t, struct conn_peer *peer,
				       int64_t now)
{
	struct sbx_http_conn *c = peer ? peer->idle.head : t->idle.head;

	for (; c; c = peer ? c->pnext : c->gnext) {
		/* The lists are in `since' order: the rest are younger. */
		if (now - c->since < SBX_HTTP_EVICT_IDLE_MS)
			break;
		if (c->fd >= 0 && !bytes_waiting(c))
			return c;
	}
	c = peer ? peer->heading.head : t->heading.head;
	return c && c->fd >= 0 && now - c->since >= SBX_HTTP_HEAD_MS ? c : NULL;
}

/* Closes evictable's choice: true when there was one. */
static bool evict_one(struct sbx_conn_table *t, struct conn_peer *peer, int64_t now)
{
	struct sbx_http_conn *c = evictable(t, peer, now);

	if (c)
		evict(t, c);
	return c != NULL;
}

/* At server.max_connections: the address holding the most connections
 * makes room first (one of its own), then any. */
static bool evict_for_total(struct sbx_conn_table *t, int64_t now)
{
	struct conn_peer *heaviest = NULL;

	for (size_t i = 0; i < CONN_BUCKETS; i++)
		for (struct conn_peer *p = t->buckets[i]; p; p = p->next)
			if ((p->idle.head || p->heading.head) &&
			    (!heaviest || p->admitted > heaviest->admitted))
				heaviest = p;
	return (heaviest && evict_one(t, heaviest, now)) || evict_one(t, NULL, now);
}

/* ---- the overflow band's list (lock held) ---- */

static void over_add(struct sbx_conn_table *t, struct sbx_http_conn *c, int64_t now)
{
	c->state = CONN_OVER;
	c->over_since = now;
	c->onext = NULL;
	c->oprev = t->over_tail;
	if (t->over_tail)
		t->over_tail->onext = c;
	else
		t->over_head = c;
	t->over_tail = c;
	c->peer->over++;
	t->over++;
}

static void over_remove(struct sbx_conn_table *t, struct sbx_http_conn *c)
{
	if (c->oprev)
		c->oprev->onext = c->onext;
	else
		t->over_head = c->onext;
	if (c->onext)
		c->onext->oprev = c->oprev;
	else
		t->over_tail = c->oprev;
	c->oprev = c->onext = NULL;
	c->peer->over--;
	t->over--;
}

/* Closes the connection longest in the band, of PEER (NULL: of any
 * address), when it has been there SBX_HTTP_OVER_TIMEOUT_S (a client
 * trickling its request: libmicrohttpd's timeout is one of silence), so
 * that it leaves the band now: true when one did. One per newcomer, so
 * that no address's newcomers close others' connections beyond the place
 * they take, and the connections shut down but not yet closed stay few. */
static bool over_expire(struct sbx_conn_table *t, struct conn_peer *peer, int64_t now)
{
	for (struct sbx_http_conn *c = t->over_head;
	     c && now - c->over_since >= SBX_HTTP_OVER_TIMEOUT_S * 1000; c = c->onext) {
		if (c->fd < 0 || (peer && c->peer != peer))
			continue; /* one with no descriptor cannot be closed from here */
		over_remove(t, c);
		c->state = CONN_EVICTED;
		/* libmicrohttpd's thread for it sees the end and closes it. */
		shutdown(c->fd, SHUT_RDWR);
		return true;
	}
	return false;
}

/* ---- libmicrohttpd's notifications ---- */

void sbx_conn_started(struct sbx_http *h, struct MHD_Connection *conn, void **socket_context)
{
	struct sbx_conn_table *t = h->conns;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const union MHD_ConnectionInfo *fi =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct sbx_http_conn *c = calloc(1, sizeof(*c));
	int64_t now = sbx_monotonic_ms();
	bool over = false;
	struct sbx_peer p;

	sbx_peer_of(ci ? ci->client_addr : NULL, &p);
	pthread_mutex_lock(&t->lock);
	if (c && !(c->peer = peer_get(t, &p, true))) {
		free(c);
		c = NULL;
	}
	if (!c) {
		/* No memory for its record: answered 503 like one over a limit. */
		*socket_context = &unrecorded;
		t->over++;
		goto out;
	}
	c->peer->refs++;
	c->fd = fi ? fi->connect_fd : -1;
	if (t->per_peer > 0 && c->peer->admitted >= t->per_peer && !evict_one(t, c->peer, now))
		c->over_limit = "server.max_connections_per_ip";
	else if (t->admitted >= t->max && !evict_for_total(t, now))
		c->over_limit = "server.max_connections";
	if (c->over_limit) {
		over_add(t, c, now);
		t->refused++;
		over = true;
	} else {
		c->state = CONN_ADMITTED;
		c->peer->admitted++;
		t->admitted++;
		/* Its headers coming from its accept (see the top). */
		list_add(t, c, LISTED_HEADING);
	}
	*socket_context = c;
out:
	atomic_store(&h->connections, t->admitted);
	pthread_mutex_unlock(&t->lock);
	/* Its 503 goes as soon as its request's headers are in: a client
	 * that sends none does not hold its place in the band for long. */
	if (over || !c)
		MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
					  (unsigned)SBX_HTTP_OVER_TIMEOUT_S);
}

void sbx_conn_closed(struct sbx_http *h, void **socket_context)
{
	struct sbx_conn_table *t = h->conns;
	struct sbx_http_conn *c = *socket_context;
	struct sbx_peer peer;
	int linger_fd = -1;

	*socket_context = NULL;
	if (!c)
		return;
	pthread_mutex_lock(&t->lock);
	if (c == (void *)&unrecorded) {
		t->over--;
		pthread_mutex_unlock(&t->lock);
		return;
	}
	list_remove(t, c);
	if (c->state == CONN_ADMITTED) {
		c->peer->admitted--;
		t->admitted--;
	} else if (c->state == CONN_OVER) {
		over_remove(t, c);
	}
	/* Its descriptor is still open (libmicrohttpd closes it after this):
	 * a copy keeps the socket for the lingering close. */
	if (c->linger && c->fd >= 0 && h->linger)
		linger_fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
	peer = c->peer->peer;
	peer_put(t, c->peer);
	atomic_store(&h->connections, t->admitted);
	pthread_mutex_unlock(&t->lock);
	free(c);
	if (linger_fd >= 0)
		sbx_linger_add(h->linger, linger_fd, &peer);
}

/* Whether the overflow band has a place for one more of E (NULL: an
 * address with no connection). */
static bool band_room(const struct sbx_conn_table *t, const struct conn_peer *e)
{
	return t->over < SBX_HTTP_OVERFLOW && (!e || e->over < SBX_HTTP_OVERFLOW_PER_PEER);
}

/* A connection that would be past a limit, with none idle to make room,
 * is closed at accept once the overflow band (in all, or its address's
 * share of it) is full: it would take a descriptor and a thread just to be
 * refused. One that would be admitted is never refused here, whoever
 * fills the band. */
bool sbx_conn_accept_ok(struct sbx_http *h, const struct sockaddr *addr)
{
	struct sbx_conn_table *t = h->conns;
	int64_t now = sbx_monotonic_ms();
	struct conn_peer *e;
	struct sbx_peer p;
	bool over, ok;

	sbx_peer_of(addr, &p);
	pthread_mutex_lock(&t->lock);
	e = peer_get(t, &p, false);
	if (t->per_peer > 0 && e && e->admitted >= t->per_peer)
		over = !evictable(t, e, now);
	else
		over = t->admitted >= t->max && !evictable(t, NULL, now);
	/* A full band makes room by closing one connection past its time in
	 * it: of this address when its share is what is full, else of any. */
	ok = !over || band_room(t, e) ||
	     (over_expire(t, e && e->over >= SBX_HTTP_OVERFLOW_PER_PEER ? e : NULL, now) &&
	      band_room(t, e));
	pthread_mutex_unlock(&t->lock);
	return ok;
}

/* The record of CONN, or NULL (none, or no memory for one). */
static struct sbx_http_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	if (!ci || !ci->socket_context || ci->socket_context == (void *)&unrecorded)
		return NULL;
	return ci->socket_context;
}

const char *sbx_conn_over_limit(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct sbx_http_conn *c;

	if (ci && ci->socket_context == (void *)&unrecorded)
		return "server memory";
	c = conn_of(conn);
	/* Set at its start and never changed (read without the lock): a
	 * connection of the band that over_expire closed meanwhile is still
	 * answered as one over a limit, never served. */
	return c ? c->over_limit : NULL;
}

bool sbx_conn_request_begin(struct sbx_http *h, struct MHD_Connection *conn)
{
	struct sbx_http_conn *c = conn_of(conn);
	bool evicted;

	if (!c)
		return true;
	pthread_mutex_lock(&h->conns->lock);
	/* A new connection's first request is heading since its accept. */
	if (c->busy++ == 0 && c->listed != LISTED_HEADING) {
		list_remove(h->conns, c);
		if (c->state == CONN_ADMITTED)
			list_add(h->conns, c, LISTED_HEADING);
	}
	evicted = c->state == CONN_EVICTED;
	pthread_mutex_unlock(&h->conns->lock);
	return !evicted;
}

void sbx_conn_request_end(struct sbx_http *h, struct MHD_Connection *conn)
{
	struct sbx_http_conn *c = conn_of(conn);

	if (!c)
		return;
	pthread_mutex_lock(&h->conns->lock);
	if (c->busy > 0 && --c->busy == 0) {
		list_remove(h->conns, c);
		if (c->state == CONN_ADMITTED && !c->linger)
			list_add(h->conns, c, LISTED_IDLE);
	}
	pthread_mutex_unlock(&h->conns->lock);
}

bool sbx_conn_headers_in(struct sbx_http *h, struct MHD_Connection *conn)
{
	struct sbx_http_conn *c = conn_of(conn);
	bool evicted;

	if (!c)
		return true;
	pthread_mutex_lock(&h->conns->lock);
	if (c->listed == LISTED_HEADING)
		list_remove(h->conns, c);
	evicted = c->state == CONN_EVICTED;
	pthread_mutex_unlock(&h->conns->lock);
	return !evicted;
}

void sbx_conn_set_linger(struct sbx_http *h, struct MHD_Connection *conn)
{
	struct sbx_http_conn *c = conn_of(conn);

	if (!c)
		return;
	pthread_mutex_lock(&h->conns->lock);
	c->linger = true;
	pthread_mutex_unlock(&h->conns->lock);
}

void sbx_conn_counts(struct sbx_http *h, struct sbx_conn_counts *ret)
{
	struct sbx_conn_table *t = h->conns;

	pthread_mutex_lock(&t->lock);
	ret->admitted = t->admitted;
	ret->over = t->over;
	ret->evicted = t->evicted;
	ret->refused = t->refused;
	pthread_mutex_unlock(&t->lock);
}
