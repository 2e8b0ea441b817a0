/* SPDX-License-Identifier: MIT */
/*
 * A loopback TCP listener that relays every connection to a unix socket, so
 * the engine suite can reach a real engine through a tcp:// URL as a remote
 * engine would be reached. Test-only.
 */
#ifndef SBX_TESTS_TCP_RELAY_H
#define SBX_TESTS_TCP_RELAY_H

/* Listens on 127.0.0.1 (port chosen by the kernel) and relays to UNIX_PATH
 * from a background thread. Returns the port, or -errno. */
int tcp_relay_start(const char *unix_path);

#endif
