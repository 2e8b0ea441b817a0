/* SPDX-License-Identifier: MIT */
/*
 * A container engine of a test's own, run by the script tests/private-engine:
 * a private dockerd (its own socket, data root and containerd, the sandbox
 * image already in) or podman service (its own socket on the shared storage),
 * which the test may stop, kill and start again without touching the shared
 * engines that other tests use at the same time. Needs root.
 *
 * The script is $SBX_PRIVATE_ENGINE_SCRIPT, else $SBX_SRCDIR/tests/private-engine
 * (make check sets SBX_SRCDIR), else tests/private-engine. Its progress and
 * failures (naming the engine's log) go to stderr, i.e. the test's log. Each
 * call is bounded (a hang of the script is killed and reported).
 *
 * Containers: on Docker every container of the private engine is the run's.
 * On Podman only those labelled PRIVATE_ENGINE_LABEL=pe->dir, or with a label
 * passed to private_engine_track_label (a sandbox manager's instance label, say),
 * are removed by cleanup, also by the next run's start after a crash.
 */
#ifndef SBX_TEST_PRIVATE_ENGINE_H
#define SBX_TEST_PRIVATE_ENGINE_H

#include <stdbool.h>
#include <sys/types.h>

#include "sbx/error.h"

#define PRIVATE_ENGINE_LABEL "org.mcp-sandbox.private-engine"

struct private_engine {
	char type[8];	   /* "docker" or "podman" */
	char dir[64];	   /* the script's DIR, a fresh folder under /tmp; the label value */
	char socket[96];   /* DIR/docker.sock or DIR/podman.sock */
	char url[112];	   /* "unix://" socket, for sbx_engine_config.url */
	char script[1024]; /* the script's path */
	pid_t owner;	   /* the process whose life is the run; 0 = this one */
	bool started;	   /* start was called: cleanup has work to do */
	double seconds;	   /* how long the last call took */
};

/* Fill PE for TYPE ("docker" or "podman") with a fresh DIR; starts nothing. */
int private_engine_init(struct private_engine *pe, const char *type, struct sbx_error *err);
/* Start the engine (the first start of a run removes what an earlier run of
 * DIR left) and wait until it answers; a running engine of this run is kept. */
int private_engine_start(struct private_engine *pe, struct sbx_error *err);
/* SIGTERM the engine's process and wait until it exited: a dockerd stops its
 * containers first; podman's containers run on. */
int private_engine_stop(struct private_engine *pe, struct sbx_error *err);
/* SIGKILL the engine's process (a crash) and wait until it is gone. */
int private_engine_kill(struct private_engine *pe, struct sbx_error *err);
/* Podman: count the containers labelled KEY=VALUE as the run's too. Docker:
 * nothing to do. After a start. */
int private_engine_track_label(struct private_engine *pe, const char *key, const char *value,
			       struct sbx_error *err);
/* Remove the run's containers, stop the engine, remove DIR. Nothing to do
 * when start was never called; again after a cleanup is fine. */
int private_engine_cleanup(struct private_engine *pe, struct sbx_error *err);
/* Clean PE up at exit and on SIGINT, SIGTERM and SIGHUP (then die of the
 * signal). PE must stay valid to the end; one engine per program. */
void private_engine_cleanup_at_exit(struct private_engine *pe);

#endif
