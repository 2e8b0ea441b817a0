/* SPDX-License-Identifier: MIT */
/*
 * A loopback TCP listener that relays every connection to a unix socket, so
 * the engine suite can reach a real engine through a tcp:// URL as a remote
 * engine would be reached. It counts what it relays and can be stopped, so a
 * test can see how often the engine is asked and cut it off. Test-only.
 */
#ifndef SBX_TESTS_TCP_RELAY_H
#define SBX_TESTS_TCP_RELAY_H

struct tcp_relay;

/* Listens on 127.0.0.1 (port chosen by the kernel) and relays to UNIX_PATH
 * from background threads. NEEDLE (may be NULL) is counted wherever it
 * appears in what clients send, across reads. 0 or -errno. */
int tcp_relay_new(const char *unix_path, const char *needle, struct tcp_relay **ret_relay);
/* The same, listening on the unix socket LISTEN_PATH (made; left behind
 * by tcp_relay_free, which then refuses connections). Its port is 0. */
int unix_relay_new(const char *listen_path, const char *unix_path, struct tcp_relay **ret_relay);
int tcp_relay_port(const struct tcp_relay *relay);
/* Connections accepted, and occurrences of the needle, so far. */
unsigned tcp_relay_connections(struct tcp_relay *relay);
unsigned tcp_relay_matches(struct tcp_relay *relay);
/* Stops listening, cuts every relayed connection, waits for the threads and
 * frees RELAY (NULL is fine). Returns NULL. */
struct tcp_relay *tcp_relay_free(struct tcp_relay *relay);

/* A relay to UNIX_PATH that lives as long as the program. Returns the
 * port, or -errno. */
int tcp_relay_start(const char *unix_path);

#endif
