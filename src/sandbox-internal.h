/* SPDX-License-Identifier: MIT */
/*
 * What the sandbox manager's files share: the manager, the records and the
 * background installs. Not for anything above the manager.
 *
 * Locking: m->lock guards the record table, every record's last_used and
 * install list, and every install's state. Fields set at creation (id,
 * name, owner, container, image, created) never change afterwards and are
 * read without the lock. Engine calls are never made with the lock held.
 */
#ifndef SBX_SANDBOX_INTERNAL_H
#define SBX_SANDBOX_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "sbx/sandbox.h"

/* Most install records kept per sandbox, and most running at once. */
#define SBX_INSTALLS_MAX 64
#define SBX_INSTALLS_RUNNING_MAX 4
/* Bytes of pip's output kept in an install record. */
#define SBX_INSTALL_LOG_TAIL 4096
#define SBX_OWNER_MAX 256

struct sbx_install {
	struct sbx_install *next;
	char *spec;
	enum sbx_install_state state;
	char *version;
	char *log_tail;
	struct timespec started;
	double seconds; /* set when it ended */
};

struct sbx_interp; /* sandbox_interp.c */

struct sbx_sandbox {
	int refs; /* atomic */
	sbx_manager *m;
	char id[SBX_SANDBOX_ID_MAX + 1];
	char *name;
	char *owner;
	char *container; /* the engine's container id */
	char *image;
	time_t created;
	bool ready;   /* the container exists and runs; false while creating */
	bool removed; /* no longer in the table */
	/* Under m->lock: */
	time_t last_used;
	struct sbx_install *installs;
	struct sbx_interp *interp; /* the Python interpreter; set once, under m->lock */
};

struct sbx_manager {
	const struct sbx_settings *s;
	sbx_engine *engine;
	pthread_mutex_t lock;
	pthread_cond_t changed; /* an install ended */
	sbx_sandbox **table;	/* oldest first */
	size_t n, cap;
	size_t installs_running;
};

/* Marks the sandbox used now. */
void sbx_sandbox_touch(sbx_sandbox *sb);

/* A message for a failed exec: if the container is gone or stopped, says
 * so and tells the user to create a new sandbox; returns the code to use. */
int sbx_sandbox_exec_failed(sbx_manager *m, sbx_sandbox *sb, int r, struct sbx_error *err);

/* NULL-terminated copy of the specs installed successfully (owned), or NULL
 * when out of memory. Takes m->lock. */
char **sbx_sandbox_packages(sbx_manager *m, sbx_sandbox *sb);

/* Drops the install records of a record being freed. */
void sbx_install_list_free(struct sbx_install *list);

/* Puts the interpreter program into a new container (sbx_archive_put). */
int sbx_interp_prepare(sbx_manager *m, const char *container, struct sbx_error *err);
/* Ends the interpreter of a record being freed (closes its stream). */
void sbx_interp_free(struct sbx_interp *in);
/* sbx_sandbox_run_python_ex and sbx_sandbox_reset_python, in sandbox_interp.c. */
int sbx_interp_run(sbx_manager *m, sbx_sandbox *sb, const char *code,
		   const struct sbx_python_opts *opts, struct sbx_run_result *ret_result,
		   struct sbx_error *err);
int sbx_interp_reset(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);

/* Seconds since ts (CLOCK_MONOTONIC). */
double sbx_seconds_since(const struct timespec *ts);

#endif
