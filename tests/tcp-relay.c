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

static char target[sizeof(((struct sockaddr_un *)0)->sun_path)];

struct pair {
	int a, b;
};

/* Copies both ways until both directions reach EOF; a half-close on one side
 * becomes shutdown(SHUT_WR) on the other, as the hijacked exec stream needs. */
static void *relay_conn(void *arg)
{
	struct pair p = *(struct pair *)arg;
	free(arg);
	bool open_ab = true, open_ba = true;
	char buf[65536];

	while (open_ab || open_ba) {
		struct pollfd fds[2] = {{.fd = open_ab ? p.a : -1, .events = POLLIN},
					{.fd = open_ba ? p.b : -1, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int from = i == 0 ? p.a : p.b, to = i == 0 ? p.b : p.a;
			ssize_t n = read(from, buf, sizeof(buf));
			if (n <= 0) {
				shutdown(to, SHUT_WR);
				if (i == 0)
					open_ab = false;
				else
					open_ba = false;
				continue;
			}
			for (ssize_t off = 0; off < n;) {
				ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0) {
					open_ab = open_ba = false;
					break;
				}
				off += w;
			}
		}
	}
	close(p.a);
	close(p.b);
	return NULL;
}

static void *relay_accept(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		memcpy(sa.sun_path, target, sizeof(target));
		struct pair *p = malloc(sizeof(*p));
		pthread_t t;
		if (u < 0 || !p || connect(u, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			close(c);
			if (u >= 0)
				close(u);
			free(p);
			continue;
		}
		p->a = c;
		p->b = u;
		if (pthread_create(&t, NULL, relay_conn, p) != 0) {
			close(c);
			close(u);
			free(p);
			continue;
		}
		pthread_detach(t);
	}
}

int tcp_relay_start(const char *unix_path)
{
	if (strlen(unix_path) >= sizeof(target))
		return -ENAMETOOLONG;
	strcpy(target, unix_path);

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		int r = -errno;
		close(lfd);
		return r;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, relay_accept, (void *)(intptr_t)lfd) != 0) {
		close(lfd);
		return -EAGAIN;
	}
	pthread_detach(t);
	return ntohs(sa.sin_port);
}
