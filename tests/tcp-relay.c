/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tcp-relay.h"

#define NEEDLE_MAX 64

struct pair;

struct tcp_relay {
	char target[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char needle[NEEDLE_MAX];
	size_t needle_len;
	int lfd, port;
	pthread_t acceptor;
	pthread_mutex_t lock;
	pthread_cond_t idle; /* signalled when a relayed connection ends */
	bool stopping;
	unsigned connections, matches;
	struct pair *pairs; /* the connections being relayed */
};

struct pair {
	struct tcp_relay *relay;
	int a, b; /* the client, the target */
	struct pair *next;
};

/* Counts the needle in DATA (N bytes: what was kept of the last read of
 * this direction, then the new bytes); none can lie in the kept part alone,
 * as it is shorter than the needle. Returns how many bytes to keep. */
static size_t count(struct tcp_relay *r, const char *data, size_t n)
{
	size_t keep = r->needle_len ? r->needle_len - 1 : 0;
	unsigned found = 0;

	if (!r->needle_len)
		return 0;
	for (const char *p = data, *end = data + n;
	     (p = memmem(p, (size_t)(end - p), r->needle, r->needle_len)); p++)
		found++;
	if (found) {
		pthread_mutex_lock(&r->lock);
		r->matches += found;
		pthread_mutex_unlock(&r->lock);
	}
	return n < keep ? n : keep;
}

/* Copies both ways until both directions reach EOF; a half-close on one side
 * becomes shutdown(SHUT_WR) on the other, as the hijacked exec stream needs. */
static void *relay_conn(void *arg)
{
	struct pair *p = arg;
	struct tcp_relay *r = p->relay;
	bool open_ab = true, open_ba = true;
	/* client to target: the kept bytes (at most NEEDLE_MAX - 1), then a read */
	char buf[NEEDLE_MAX + 65536];
	size_t kept = 0;

	while (open_ab || open_ba) {
		struct pollfd fds[2] = {{.fd = open_ab ? p->a : -1, .events = POLLIN},
					{.fd = open_ba ? p->b : -1, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int from = i == 0 ? p->a : p->b, to = i == 0 ? p->b : p->a;
			char *in = i == 0 ? buf + kept : buf;
			ssize_t n = read(from, in, 65536);
			if (n <= 0) {
				shutdown(to, SHUT_WR);
				if (i == 0)
					open_ab = false;
				else
					open_ba = false;
				continue;
			}
			for (ssize_t off = 0; off < n;) {
				ssize_t w = send(to, in + off, (size_t)(n - off), MSG_NOSIGNAL);
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0) {
					open_ab = open_ba = false;
					break;
				}
				off += w;
			}
			if (i == 0) {
				size_t all = kept + (size_t)n;
				size_t keep = count(r, buf, all);
				memmove(buf, buf + all - keep, keep);
				kept = keep;
			}
		}
	}
	pthread_mutex_lock(&r->lock);
	for (struct pair **pp = &r->pairs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	close(p->a);
	close(p->b);
	free(p);
	pthread_cond_broadcast(&r->idle);
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

static void *relay_accept(void *arg)
{
	struct tcp_relay *r = arg;

	for (;;) {
		int c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* tcp_relay_free shut the listener down */
		}
		int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		memcpy(sa.sun_path, r->target, sizeof(r->target));
		struct pair *p = calloc(1, sizeof(*p));
		pthread_t t;
		pthread_mutex_lock(&r->lock);
		r->connections++;
		if (r->stopping || u < 0 || !p ||
		    connect(u, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			pthread_mutex_unlock(&r->lock);
			close(c);
			if (u >= 0)
				close(u);
			free(p);
			continue;
		}
		p->relay = r;
		p->a = c;
		p->b = u;
		p->next = r->pairs;
		r->pairs = p;
		if (pthread_create(&t, NULL, relay_conn, p) != 0) {
			r->pairs = p->next;
			close(c);
			close(u);
			free(p);
		} else {
			pthread_detach(t);
		}
		pthread_mutex_unlock(&r->lock);
	}
}

/* A relay to UNIX_PATH accepting on the listening socket LFD (taken). */
static int relay_new(int lfd, int port, const char *unix_path, const char *needle,
		     struct tcp_relay **ret_relay)
{
	struct tcp_relay *r;

	if (strlen(unix_path) >= sizeof(r->target) || (needle && strlen(needle) >= NEEDLE_MAX)) {
		close(lfd);
		return -ENAMETOOLONG;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		close(lfd);
		return -ENOMEM;
	}
	strcpy(r->target, unix_path);
	if (needle && *needle) {
		strcpy(r->needle, needle);
		r->needle_len = strlen(needle);
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->idle, NULL);
	r->lfd = lfd;
	r->port = port;
	if (pthread_create(&r->acceptor, NULL, relay_accept, r) != 0) {
		close(r->lfd);
		free(r);
		return -EAGAIN;
	}
	*ret_relay = r;
	return 0;
}

int tcp_relay_new(const char *unix_path, const char *needle, struct tcp_relay **ret_relay)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		int e = -errno;
		if (lfd >= 0)
			close(lfd);
		return e;
	}
	return relay_new(lfd, ntohs(sa.sin_port), unix_path, needle, ret_relay);
}

int unix_relay_new(const char *listen_path, const char *unix_path, struct tcp_relay **ret_relay)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd;

	if (strlen(listen_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, listen_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0) {
		int e = -errno;
		if (lfd >= 0)
			close(lfd);
		return e;
	}
	return relay_new(lfd, 0, unix_path, NULL, ret_relay);
}

int tcp_relay_port(const struct tcp_relay *relay)
{
	return relay->port;
}

unsigned tcp_relay_connections(struct tcp_relay *relay)
{
	pthread_mutex_lock(&relay->lock);
	unsigned n = relay->connections;
	pthread_mutex_unlock(&relay->lock);
	return n;
}

unsigned tcp_relay_matches(struct tcp_relay *relay)
{
	pthread_mutex_lock(&relay->lock);
	unsigned n = relay->matches;
	pthread_mutex_unlock(&relay->lock);
	return n;
}

struct tcp_relay *tcp_relay_free(struct tcp_relay *relay)
{
	if (!relay)
		return NULL;
	pthread_mutex_lock(&relay->lock);
	relay->stopping = true;
	pthread_mutex_unlock(&relay->lock);
	/* wakes accept4 (EINVAL), after which the listener is gone */
	shutdown(relay->lfd, SHUT_RDWR);
	pthread_join(relay->acceptor, NULL);
	close(relay->lfd);
	/* every relayed connection sees EOF both ways and ends */
	pthread_mutex_lock(&relay->lock);
	for (struct pair *p = relay->pairs; p; p = p->next) {
		shutdown(p->a, SHUT_RDWR);
		shutdown(p->b, SHUT_RDWR);
	}
	while (relay->pairs)
		pthread_cond_wait(&relay->idle, &relay->lock);
	pthread_mutex_unlock(&relay->lock);
	pthread_cond_destroy(&relay->idle);
	pthread_mutex_destroy(&relay->lock);
	free(relay);
	return NULL;
}

int tcp_relay_start(const char *unix_path)
{
	struct tcp_relay *r;
	int e = tcp_relay_new(unix_path, NULL, &r);

	return e < 0 ? e : tcp_relay_port(r);
}
