/* SPDX-License-Identifier: MIT */
/*
 * Egress, as the sandbox layer sees it: a sandbox's relay to the package
 * index and the hosts of sandbox.egress_allow (src/egress/egress.c says
 * how it works), one struct sbx_egress per sandbox. Egress knows no
 * sandbox record: what it needs of the sandbox (its settings, engine,
 * container, id and owner, and where its tenant's allow-list comes from)
 * comes in struct sbx_egress_config, and an exec of the engine that fails
 * is told to the caller to explain. The sandbox layer, above, keeps each
 * sandbox's relay in its record and calls in here; nothing here calls back
 * up.
 */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx/egress_lookup.h"
#include "sbx/engine.h"
#include "sbx/error.h"
#include "sbx/settings.h"

struct sbx_egress; /* egress.c */

/* What a relay is made from (sbx_egress_new copies what it keeps). */
struct sbx_egress_config {
	const struct sbx_settings *s; /* read at sbx_egress_new only */
	sbx_engine *engine;	      /* outlives the relay */
	const char *container;	      /* the sandbox's container */
	const char *sandbox_id;	      /* for the log and the errors */
	const char *owner;	      /* its tenant (NULL: none, the server's list) */
	sbx_egress_lookup_fn lookup;  /* where the tenant's own list comes from (may be NULL) */
	void *lookup_ud;
};

/* A relay for C's sandbox, not started yet (sbx_egress_ensure starts it).
 * NULL with ERR saying why: an index URL that does not parse (-EINVAL),
 * out of memory, no pipe. */
struct sbx_egress *sbx_egress_new(const struct sbx_egress_config *c, struct sbx_error *err);
/* Stops the relay's pump (closing its stream ends the relay, mostly) and
 * frees E; CONTAINER_STAYS (the record goes, the container does not: the
 * server stops and keeps it): a running relay is also killed, with an exec,
 * so that none is left holding its port. */
void sbx_egress_free(struct sbx_egress *e, bool container_stays);

/* Starts E's relay unless it runs (its first use, or it died, was killed
 * or broke the protocol since) and tells its port on the sandbox's loopback.
 * *EXEC_FAILED (may be NULL) is set on every return: true when what failed
 * is the engine's exec that starts the relay (ERR is the engine's; the
 * caller tells why, the container may be gone), false otherwise. */
int sbx_egress_ensure(struct sbx_egress *e, int *ret_port, bool *exec_failed,
		      struct sbx_error *err);
/* Whether E's relay runs and its stream is not hung up: cheap (E's lock, a
 * flag and a poll(2)), for a call that finds it running to go on at once. */
bool sbx_egress_running(struct sbx_egress *e);
/* The environment pip runs with on E's relay at PORT (as sbx_egress_ensure
 * told it; NULL-terminated, owned): PIP_INDEX_URL on the relay (the index's
 * path, no credentials), HTTP(S)_PROXY to it, NO_PROXY for the relay itself. */
int sbx_egress_pip_env(const struct sbx_egress *e, int port, char ***ret_env,
		       struct sbx_error *err);
/* Whether the relays of sandboxes made under S listen on the fixed port in
 * their containers' environment: sandbox.network = none (the sandbox has a
 * loopback of its own). With any other network the relay takes a free port
 * and only the server's own pip is told. */
bool sbx_egress_fixed_port(const struct sbx_settings *s);
/* The environment of every sandbox container (NULL-terminated, owned):
 * with sandbox.network = none, the variables of sbx_egress_pip_env on the
 * relay's fixed port; *RET_ENV NULL with any other network (the relay has
 * no fixed port there, and only the server's pip is told it). -EINVAL for
 * an index URL that does not parse. */
int sbx_egress_container_env(const struct sbx_settings *s, char ***ret_env, struct sbx_error *err);

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
/* What E did; all zero when E is NULL (the sandbox never had a relay). */
void sbx_egress_stats(struct sbx_egress *e, struct sbx_egress_stats *ret);
/* E's bytes in and out so far (E's lock only: callable under the sandbox
 * manager's lock). */
void sbx_egress_bytes(struct sbx_egress *e, uint64_t *ret_in, uint64_t *ret_out);

#endif
