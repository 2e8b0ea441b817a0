/* SPDX-License-Identifier: MIT */
/*
 * The lingering close. A request refused from its headers (401, 403, 404
 * for an unknown session, 413, 429, 503) is answered before its body is
 * read, with Connection: close. A client that sends its body without
 * waiting for 100-continue (Node's fetch, the official SDK's transport) is
 * still sending then; were the socket closed with its bytes unread, the
 * kernel would answer them with a reset, and the client would see EPIPE or
 * ECONNRESET instead of the answer. So such a socket is kept a while after
 * libmicrohttpd lets it go (a copy of its descriptor, taken before
 * libmicrohttpd closes its own): what the client still sends is read and
 * dropped until it closes, for at most SBX_HTTP_LINGER_MS in all,
 * SBX_HTTP_LINGER_QUIET_MS without a byte and SBX_HTTP_LINGER_BYTES,
 * then it is closed (what nginx calls lingering_close). Nothing read is
 * kept. One thread serves them all, at most SBX_HTTP_LINGER_MAX at once
 * and SBX_HTTP_LINGER_PER_PEER of one client address, and no more of one
 * address than an equal share with one more address (SBX_HTTP_LINGER_MAX
 * / (addresses lingering + 1)): however many addresses fill it, the table
 * keeps room for the next one. Past that a socket is closed at once, as
 * before.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-internal.h"
#include "sbx/log.h"

struct lingerer {
	int fd;
	struct sbx_peer peer;
	int64_t end_ms;	  /* closed at this time whatever comes */
	int64_t quiet_ms; /* ... or at this one when nothing more comes */
	size_t bytes;
};

struct sbx_linger {
	pthread_mutex_t lock;
	int wake[2]; /* a byte: a socket was added, or stop */
	pthread_t thread;
	bool started;
	bool stopping;		/* under lock */
	struct lingerer *added; /* handed over, not yet taken by the thread */
	int nadded;		/* under lock */
	int count;		/* lingering now (added or taken), under lock */
	/* Lingering sockets by client address (under lock): at most count
	 * entries in use, each with n > 0. */
	struct {
		struct sbx_peer peer;
		int n;
	} peers[SBX_HTTP_LINGER_MAX];
	char *buf;		 /* the thread's */
	uint64_t total, dropped; /* lingered in all; closed at once (full) */
};

#define LINGER_READ (64 * 1024)

/* The entry of P in l->peers (lock held), or a free one when none; NULL
 * when full. */
static int peer_slot(struct sbx_linger *l, const struct sbx_peer *p)
{
	int free_slot = -1;

	for (int i = 0; i < SBX_HTTP_LINGER_MAX; i++) {
		if (l->peers[i].n > 0 && memcmp(&l->peers[i].peer, p, sizeof(*p)) == 0)
			return i;
		if (l->peers[i].n == 0 && free_slot < 0)
			free_slot = i;
	}
	return free_slot;
}

static void close_one(struct sbx_linger *l, const struct lingerer *e)
{
	int i;

	close(e->fd);
	pthread_mutex_lock(&l->lock);
	l->count--;
	i = peer_slot(l, &e->peer);
	if (i >= 0 && l->peers[i].n > 0)
		l->peers[i].n--;
	pthread_mutex_unlock(&l->lock);
}

/* Reads and drops what E's client sends: false when it is done (its end,
 * an error, or past the byte bound). */
static bool drain(struct lingerer *e, char *buf, int64_t now)
{
	for (int i = 0; i < 16; i++) {
		ssize_t n = recv(e->fd, buf, LINGER_READ, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		if (n == 0)
			return false;
		e->bytes += (size_t)n;
		e->quiet_ms = now + SBX_HTTP_LINGER_QUIET_MS;
		if (e->bytes > SBX_HTTP_LINGER_BYTES)
			return false;
	}
	return true;
}

static void *linger_thread(void *arg)
{
	struct sbx_linger *l = arg;
	struct lingerer e[SBX_HTTP_LINGER_MAX];
	struct pollfd pf[SBX_HTTP_LINGER_MAX + 1];
	char *buf = l->buf;
	int n = 0;

	for (;;) {
		int64_t now = sbx_monotonic_ms(), next = now + 60000;
		bool stop;
		char c;

		pthread_mutex_lock(&l->lock);
		stop = l->stopping;
		for (int i = 0; i < l->nadded && n < SBX_HTTP_LINGER_MAX; i++)
			e[n++] = l->added[i];
		l->nadded = 0;
		pthread_mutex_unlock(&l->lock);
		if (stop)
			break;
		/* The ones done or out of time are closed. */
		for (int i = 0; i < n;) {
			if (now >= e[i].end_ms || now >= e[i].quiet_ms) {
				close_one(l, &e[i]);
				e[i] = e[--n];
				continue;
			}
			if (e[i].end_ms < next)
				next = e[i].end_ms;
			if (e[i].quiet_ms < next)
				next = e[i].quiet_ms;
			i++;
		}
		pf[0] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
		for (int i = 0; i < n; i++)
			pf[i + 1] = (struct pollfd){.fd = e[i].fd, .events = POLLIN | POLLRDHUP};
		if (poll(pf, (nfds_t)n + 1, (int)(next - now)) < 0 && errno != EINTR) {
			/* Never seen; without the thread nothing lingers. */
			sbx_log_error("http: the lingering close stops: poll: %s", strerror(errno));
			pthread_mutex_lock(&l->lock);
			l->stopping = true;
			pthread_mutex_unlock(&l->lock);
			break;
		}
		if (pf[0].revents & POLLIN)
			while (read(l->wake[0], &c, 1) == 1)
				;
		now = sbx_monotonic_ms();
		for (int i = n - 1; i >= 0; i--) {
			if (!pf[i + 1].revents)
				continue;
			if (!drain(&e[i], buf, now) ||
			    (pf[i + 1].revents & (POLLHUP | POLLERR | POLLNVAL))) {
				close_one(l, &e[i]);
				e[i] = e[--n];
			}
		}
	}
	for (int i = 0; i < n; i++)
		close_one(l, &e[i]);
	return NULL;
}

int sbx_linger_new(struct sbx_linger **ret)
{
	struct sbx_linger *l = calloc(1, sizeof(*l));
	pthread_attr_t attr;
	int r;

	if (!l)
		return -ENOMEM;
	pthread_mutex_init(&l->lock, NULL);
	l->wake[0] = l->wake[1] = -1;
	l->added = calloc(SBX_HTTP_LINGER_MAX, sizeof(*l->added));
	l->buf = malloc(LINGER_READ);
	if (!l->added || !l->buf || pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = l->added && l->buf ? -errno : -ENOMEM;
		sbx_linger_free(l);
		return r;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, (size_t)64 * 1024 +
					     sizeof(struct lingerer[SBX_HTTP_LINGER_MAX]) +
					     sizeof(struct pollfd[SBX_HTTP_LINGER_MAX + 1]));
	r = -pthread_create(&l->thread, &attr, linger_thread, l);
	pthread_attr_destroy(&attr);
	if (r < 0) {
		sbx_linger_free(l);
		return r;
	}
	l->started = true;
	*ret = l;
	return 0;
}

/* How many sockets one address may linger now (lock held): at most
 * SBX_HTTP_LINGER_PER_PEER, and an equal share of the table among the
 * addresses lingering (SLOT's among them) and one more. */
static int peer_share(const struct sbx_linger *l, int slot)
{
	int addresses = 1, share;

	for (int i = 0; i < SBX_HTTP_LINGER_MAX; i++)
		addresses += l->peers[i].n > 0 && i != slot;
	share = SBX_HTTP_LINGER_MAX / (addresses + 1);
	return share < SBX_HTTP_LINGER_PER_PEER ? share : SBX_HTTP_LINGER_PER_PEER;
}

void sbx_linger_add(struct sbx_linger *l, int fd, const struct sbx_peer *peer)
{
	int64_t now = sbx_monotonic_ms();
	bool taken = false;
	int slot;

	pthread_mutex_lock(&l->lock);
	slot = peer_slot(l, peer);
	if (!l->stopping && l->count < SBX_HTTP_LINGER_MAX && l->nadded < SBX_HTTP_LINGER_MAX &&
	    slot >= 0 && l->peers[slot].n < peer_share(l, slot)) {
		l->added[l->nadded++] = (struct lingerer){
		    .fd = fd,
		    .peer = *peer,
		    .end_ms = now + SBX_HTTP_LINGER_MS,
		    .quiet_ms = now + SBX_HTTP_LINGER_QUIET_MS,
		};
		l->peers[slot].peer = *peer;
		l->peers[slot].n++;
		l->count++;
		l->total++;
		taken = true;
	} else {
		l->dropped++;
	}
	pthread_mutex_unlock(&l->lock);
	if (!taken) {
		/* No place to linger: the answer is followed by our end, and what
		 * the client already sent is read, so that the close does not
		 * reset the connection over an answer it has not read yet (a
		 * small body sent right after its headers, as fetch does). */
		char buf[16384];
		shutdown(fd, SHUT_WR);
		for (int i = 0; i < 16 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
			;
		close(fd);
		return;
	}
	/* Our side is done: the client sees the end once it has read. */
	shutdown(fd, SHUT_WR);
	if (write(l->wake[1], "", 1) < 0) {
		/* the pipe is full: the thread is awake already */
	}
}

int sbx_linger_count(struct sbx_linger *l)
{
	int n;

	pthread_mutex_lock(&l->lock);
	n = l->count;
	pthread_mutex_unlock(&l->lock);
	return n;
}

struct sbx_linger *sbx_linger_free(struct sbx_linger *l)
{
	if (!l)
		return NULL;
	if (l->started) {
		pthread_mutex_lock(&l->lock);
		l->stopping = true;
		pthread_mutex_unlock(&l->lock);
		if (write(l->wake[1], "", 1) < 0) {
			/* full: awake already */
		}
		pthread_join(l->thread, NULL);
	}
	for (int i = 0; i < l->nadded; i++)
		close(l->added[i].fd);
	if (l->wake[0] >= 0)
		close(l->wake[0]);
	if (l->wake[1] >= 0)
		close(l->wake[1]);
	free(l->added);
	free(l->buf);
	pthread_mutex_destroy(&l->lock);
	free(l);
	return NULL;
}
