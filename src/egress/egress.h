/* SPDX-License-Identifier: MIT */
/*
 * Egress, as the sandbox layer sees it: a sandbox's relay to the package
 * index and the hosts of sandbox.egress_allow (src/egress/egress.c says
 * how it works). The sandbox's record holds its relay (sb->egress, set
 * under m->lock at first use); what egress takes from the sandbox layer is
 * the record (src/sandbox/sandbox-internal.h) and the calls on it
 * (src/sandbox/calls.c: sbx_sandbox_begin, sbx_sandbox_end,
 * sbx_sandbox_exec_failed), which stand below egress.
 */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx/error.h"
#include "sbx/sandbox.h"

struct sbx_egress; /* egress.c */

/* Starts SB's relay unless it runs (its first use, or it died, was killed
 * or broke the protocol since) and tells its port on the sandbox's loopback. */
int sbx_egress_ensure(sbx_manager *m, sbx_sandbox *sb, int *ret_port, struct sbx_error *err);
/* sbx_egress_ensure, then the environment pip runs with (NULL-terminated,
 * owned): PIP_INDEX_URL on the relay (the index's path, no credentials),
 * HTTP(S)_PROXY to it, NO_PROXY for the relay itself. */
int sbx_egress_pip_env(sbx_manager *m, sbx_sandbox *sb, char ***ret_env, struct sbx_error *err);
/* Stops the relay's pump (closing its stream ends the relay, mostly) and
 * frees E; CONTAINER_STAYS (the record goes, the container does not: the
 * server stops and keeps it): a running relay is also killed, with an exec,
 * so that none is left holding its port. */
void sbx_egress_free(struct sbx_egress *e, bool container_stays);
/* The environment of every sandbox container (NULL-terminated, owned):
 * with sandbox.network = none, the variables of sbx_egress_pip_env on the
 * relay's fixed port; *RET_ENV NULL with any other network (the relay has
 * no fixed port there, and only the server's pip is told it). -EINVAL for
 * an index URL that does not parse. */
int sbx_egress_container_env(sbx_manager *m, char ***ret_env, struct sbx_error *err);
/* Before a call runs code in SB (sandbox.network = none): starts its relay
 * unless it runs (as the call's proxy variables expect); cheap when it does.
 * NULL, or a notice (owned) for the call's result when the relay cannot
 * start (its port taken, say): the call runs anyway, without egress. */
char *sbx_egress_for_code(sbx_manager *m, sbx_sandbox *sb);

/* What a sandbox's relay did, since the sandbox was made. */
struct sbx_egress_stats {
	bool running;		  /* a relay runs now */
	int port;		  /* its port, 0 when none runs */
	long pid;		  /* its pid in the sandbox (as it says), 0 when none runs */
	uint64_t relays;	  /* relays started */
	uint64_t protocol_errors; /* relays stopped for breaking the protocol */
	uint64_t streams;	  /* connections carried (accepted by the server) */
	uint64_t refused;	  /* connections answered with an error of ours */
	size_t open;		  /* connections open now */
	uint64_t bytes_in;	  /* DATA to the sandbox */
	uint64_t bytes_out;	  /* DATA from the sandbox */
	/* Offsets of request heads tried as their end: about their bytes,
	 * however the heads were split into frames. */
	uint64_t head_scanned;
};
/* All zero when SB never had a relay. */
void sbx_egress_stats(sbx_manager *m, sbx_sandbox *sb, struct sbx_egress_stats *ret);
/* E's bytes in and out so far (E's lock only: callable under m->lock). */
void sbx_egress_bytes(struct sbx_egress *e, uint64_t *ret_in, uint64_t *ret_out);

#endif
