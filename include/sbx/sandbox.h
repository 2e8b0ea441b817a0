/* SPDX-License-Identifier: MIT */
/*
 * The sandbox manager: what a "sandbox" is to the tools above it.
 *
 * A sandbox is one container on the engine plus a small record here. The
 * record's durable part (id, name, owner, created) also lives in the
 * container's labels, so a restarted server can adopt its sandboxes back
 * (sbx_manager_recover). Every sandbox has an owner from day one: callers
 * pass the tenant they act for, and a sandbox of another owner is reported
 * as not found (-ENOENT), exactly like one that does not exist.
 *
 * The warm pool (sandbox.pool_size, pool.c): create_sandbox takes an
 * already started container that was never assigned to anyone, so a create
 * costs no engine call; with the pool empty or off it creates and starts one
 * (a "cold" create). A pool container is fresh from the image and is never
 * reused: deleting a sandbox removes its container. One thread per manager
 * refills the pool in the background (backing off while the engine fails);
 * it starts filling after sbx_manager_recover succeeds or a create worked,
 * so it never races the adoption of a previous run's containers and never
 * hammers an engine that is down. Pooled containers count against
 * sandbox.max_sandboxes: the pool only fills the room the assigned
 * sandboxes leave (momentarily one more while a refill is under way) and
 * never makes a create fail with -EBUSY. They are always removed by
 * sbx_manager_free.
 *
 * Restart: labels are fixed when a container is created, but a pool
 * container's owner and name are known only when it is assigned. It carries
 * the managed/instance/sandbox-id/created labels plus SBX_LABEL_POOL, and its
 * assignment (owner, name, time) is written to a small file in the state
 * folder (server.state_dir, one 0600 file per sandbox in a 0700 folder per
 * instance, written to a temporary file and renamed) before create returns.
 * Recover adopts pool containers that have such a file, removes those that
 * have none (never assigned), leaves alone those whose file it cannot trust,
 * and drops files whose container is gone. A
 * cold sandbox keeps its owner and name in labels as before and needs no
 * file. Without a state folder the pool is used only when
 * sandbox.remove_on_exit is true (sandboxes do not outlive the server
 * anyway; after a crash, recover then removes pool containers, assigned or
 * not); with remove_on_exit false it is off, so that every sandbox stays
 * adoptable. Simpler schemes were set aside: a container name (renamed at
 * assignment) cannot hold an arbitrary owner and renaming is not in the
 * engine seam; a file inside the container would be data the sandbox's own
 * user could reach; creating every container at create time loses the pool.
 *
 * Lifecycle: a sandbox lives until it is deleted (sbx_sandbox_delete) or
 * the reaper removes it (src/sandbox/reaper.c): when it has not been used
 * for sandbox.idle_timeout, or is older than sandbox.max_lifetime (either 0
 * = never). Used means any call below that works in it (a run, a reset, an
 * install or its status, an upload, an artifact read); a sandbox with such
 * a call running, or a package install, is never reaped. Its creation time
 * is in its labels (or its state file), so max_lifetime counts across
 * restarts; its last use is not kept: an adopted sandbox counts as used at
 * adoption. sbx_sandbox_info.expires says when it goes if unused. A call on
 * a reaped sandbox says that it expired, and why, like one on a deleted
 * sandbox says that it was deleted.
 *
 * Threads: every function may be called from any thread at the same time.
 * Records are reference-counted; sbx_sandbox_get/create return a reference
 * that the caller drops with sbx_sandbox_unref.
 *
 * Errors: include/sbx/error.h. Messages are written for the person (or
 * model) who called the tool: they say what went wrong and what to do.
 * -ENOENT: unknown sandbox (or path), or one deleted lately (the message
 * says so); -EINVAL: a bad argument; -EPERM: a path outside what is
 * allowed; -EFBIG: a file over a size limit; -EBUSY: a limit on the number
 * of sandboxes (at sandbox.max_sandboxes the message names the caller's
 * least recently used sandboxes, to delete one); anything else: the engine
 * failed.
 */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sbx/buf.h"
#include "sbx/egress_lookup.h"
#include "sbx/engine.h"
#include "sbx/error.h"
#include "sbx/settings.h"

/* Labels every managed container carries. */
#define SBX_LABEL_MANAGED "org.mcp-sandbox.managed"   /* "1" */
#define SBX_LABEL_INSTANCE "org.mcp-sandbox.instance" /* server.instance */
#define SBX_LABEL_ID "org.mcp-sandbox.sandbox-id"
#define SBX_LABEL_NAME "org.mcp-sandbox.name"
#define SBX_LABEL_OWNER "org.mcp-sandbox.owner"
#define SBX_LABEL_CREATED "org.mcp-sandbox.created" /* Unix seconds */
/* "1" on a container started for the warm pool. It has no name or owner
 * label (labels are fixed at creation, and those are only known when it is
 * assigned); its assignment is a file in the state folder instead. */
#define SBX_LABEL_POOL "org.mcp-sandbox.pool"

/* Where code runs and writes the files that come back as links. */
#define SBX_RESULTS_DIR "/app/results"

#define SBX_SANDBOX_ID_MAX 32
#define SBX_SANDBOX_NAME_MAX 64

typedef struct sbx_manager sbx_manager;
typedef struct sbx_sandbox sbx_sandbox;

/* A snapshot of one sandbox for list_sandboxes. Strings owned. */
struct sbx_sandbox_info {
	char *id;
	char *name;
	char *owner;
	/* The engine's word: "running", "exited", ...; "missing" if gone;
	 * "sleeping" while it is asleep (or being put to sleep or woken). */
	char *status;
	char *node; /* on a cluster (engine.type = swarm): the node it runs on; else NULL */
	char *image;
	time_t created;
	time_t last_used;
	/* When the reaper removes it if it is not used again (the earlier of
	 * created + sandbox.max_lifetime and, after it falls asleep,
	 * sandbox.sleep_lifetime; where it cannot sleep, last_used +
	 * sandbox.idle_timeout; never while a call runs in it); 0 = never. */
	time_t expires;
	/* Running: when it is put to sleep if it is not used again
	 * (last_used + sandbox.idle_timeout), 0 = never. Status "sleeping":
	 * since when it is asleep (asleep_since); it has been put to sleep
	 * SLEEPS times and woken WAKES times. */
	time_t sleeps_at, asleep_since;
	uint64_t sleeps, wakes;
	/* Why it no longer runs, for people, when its container stopped or
	 * went without the server's doing (killed from outside, the OOM killer,
	 * the engine restarted); NULL while it is fine. Calls on it fail. */
	char *reason;
	char **packages; /* successfully installed package specs, NULL-terminated */
	/* Bytes its egress relay carried (src/egress/egress.c): to the sandbox
	 * (downloads: index pages, packages, answers) and from it (requests). */
	uint64_t egress_bytes_in, egress_bytes_out;
	/* What its container used, as the engine's samples tell
	 * (src/sandbox/usage.c, every sandbox.usage_interval): CPU time, memory
	 * in use integrated over time, and the memory in use at the last
	 * sample; the same of the bytes in its writable layer (at most
	 * sandbox.disk when set). All 0 while sampling is off or before the
	 * first sample. */
	uint64_t cpu_ns, memory_byte_seconds, memory_bytes;
	uint64_t disk_byte_seconds, disk_bytes;
};

/* What a tenant's sandboxes used, in all: see sbx_sandbox_info. */
struct sbx_tenant_usage {
	uint64_t egress_bytes_in, egress_bytes_out;
	uint64_t cpu_ns, memory_byte_seconds, disk_byte_seconds;
};

/* One file created or modified under SBX_RESULTS_DIR during a run. */
struct sbx_file_change {
	char *path; /* relative to SBX_RESULTS_DIR, e.g. "plots/fig.png" */
	int64_t size;
	/* A PNG or JPEG (by name and magic bytes) of at most
	 * sandbox.image_inline_max bytes that execute_python_code created or
	 * changed: its content, read by the interpreter in the same round trip
	 * (at most 4 x image_inline_max per call). NULL otherwise. */
	unsigned char *image;
	size_t image_len;
	const char *image_mime; /* "image/png" or "image/jpeg" (static) when image is set */
};

/* What a command or a piece of Python code produced. */
struct sbx_run_result {
	int exit_code; /* -1 when the process was killed (time limit, restart) */
	bool timed_out;
	bool truncated;		       /* output beyond sandbox.output_cap was cut */
	struct sbx_buf out;	       /* stdout: valid UTF-8 (invalid bytes replaced by U+FFFD) */
	struct sbx_buf err;	       /* stderr: valid UTF-8 */
	struct sbx_file_change *files; /* execute_python_code only */
	size_t n_files;
	bool files_truncated; /* more changed files than reported */
	bool files_removed;   /* files under SBX_RESULTS_DIR were removed */
	bool cancelled;	      /* stopped because sbx_run_opts.cancelled said so */
	/* The kernel's OOM killer struck in the sandbox during the call (at
	 * sandbox.memory): a process of the command, or the interpreter. */
	bool out_of_memory;
	/* The output shows a write refused for lack of space (ENOSPC, EDQUOT)
	 * in a sandbox that sandbox.disk bounds; the notice names the bound. */
	bool out_of_disk;
	/* Python only: */
	/* The variables, imports and open files of earlier calls are gone: the
	 * interpreter ended or was killed during this call (it is restarted), or
	 * it had ended since the last call and a new one ran this code. */
	bool interpreter_restarted;
	/* A sentence for the user about the interpreter (time limit reached,
	 * cancelled, restarted, output cut), or NULL. Owned. */
	char *notice;
};

enum sbx_install_state {
	SBX_INSTALL_NONE,    /* never asked and not present */
	SBX_INSTALL_PRESENT, /* not installed by us, but importable/installed */
	SBX_INSTALL_RUNNING,
	SBX_INSTALL_SUCCESS,
	SBX_INSTALL_FAILED,
};

struct sbx_install_status {
	enum sbx_install_state state;
	char *package;	/* the spec as asked */
	char *version;	/* installed version when known (PRESENT/SUCCESS), else NULL */
	char *log_tail; /* last few KiB of pip's output (RUNNING/SUCCESS/FAILED), else NULL */
	double seconds; /* how long the install ran (so far) */
};

/* The manager works on one engine with one settings snapshot; both must
 * outlive it. Nothing is created on the engine until a sandbox is.
 *
 * One server per instance: with a state folder the manager holds an
 * exclusive lock on the instance (a flock on STATE/instance-INSTANCE.lock)
 * until it is freed; when another process holds it, this fails with -EBUSY
 * and a message naming that process. server.instance left at "default" is
 * replaced by a name unique to the state folder (kept in
 * STATE/default-instance), so servers with state folders of their own never
 * share an instance. Without a state folder neither applies (state_dir.c). */
/* The RLIMIT_NPROC each sandbox gets: above what all sandboxes may hold
 * together, so that each one's pids_limit (its own cgroup) binds first. */
int64_t sbx_sandbox_nproc(const struct sbx_settings *s);
/* The longest line the in-sandbox interpreter may send (one inline image in
 * base64 plus a bounded rest); a longer one ends the call with an error and
 * restarts the interpreter. */
size_t sbx_interp_line_max(const struct sbx_settings *s);

int sbx_manager_new(const struct sbx_settings *s, sbx_engine *engine, sbx_manager **ret_m,
		    struct sbx_error *err);
/* Waits for background installs; removes every sandbox when
 * sandbox.remove_on_exit (the default), else leaves them for recover. Pooled
 * containers are always removed. */
sbx_manager *sbx_manager_free(sbx_manager *m);

/* Adopts the containers labelled with this server.instance (after a
 * restart). Returns how many were adopted. Then lets the pool fill. */
int sbx_manager_recover(sbx_manager *m, struct sbx_error *err);

/* The warm pool, for tests and the benchmark. */
struct sbx_pool_stats {
	size_t size;	   /* containers the pool aims to keep now; 0 when off */
	size_t floor;	   /* sandbox.pool_size: what it shrinks back to (0 when off) */
	size_t max;	   /* what it may grow to: sandbox.pool_max, at least floor */
	size_t ready;	   /* started, unassigned containers that may be handed out now
			    * (checked since following the engine last (re)started) */
	size_t filling;	   /* containers being started for the pool now (0..pool_fill) */
	size_t making_own; /* creates that found it empty, making their own now (no
			    * filler starts meanwhile) */
	bool filling_on;   /* the pool has started filling (see above) */
	uint64_t taken;	   /* creates served from the pool */
	uint64_t cold;	   /* creates that made their own container */
	uint64_t made;	   /* containers the pool started */
	uint64_t failures; /* failed attempts to start one */
	int last_error;	   /* negative errno of the last attempt, 0 when it worked */
	uint64_t died;	   /* pooled containers that died or went before use (dropped) */
	bool followed;	   /* the engine's events are followed now (see the watch) */
};
void sbx_manager_pool_stats(sbx_manager *m, struct sbx_pool_stats *ret_stats);
/* The sandboxes in each state now (under the manager's lock, no engine
 * call), for GET /metrics. */
struct sbx_sandbox_counts {
	size_t creating; /* its container is being made */
	size_t idle;	 /* ready, no call running in it */
	size_t busy;	 /* ready, a call running in it */
	size_t sleeping; /* asleep: its container stopped, its files kept (or being
			  * put to sleep or woken) */
	size_t dead;	 /* its container stopped or went without the server's doing */
	size_t ending;	 /* being removed */
};
void sbx_manager_sandbox_counts(sbx_manager *m, struct sbx_sandbox_counts *ret_counts);
/* Live sandboxes (ready, not dead, not ending) by the cluster node that
 * runs them, as the engine knows it without a request
 * (sbx_container_node): up to MAX nodes into OUT, how many; none on an
 * engine of one host. Sandboxes on nodes past MAX are left out. */
struct sbx_node_count {
	char node[SBX_ENGINE_NODE_MAX + 1];
	size_t sandboxes;
};
size_t sbx_manager_node_counts(sbx_manager *m, struct sbx_node_count *out, size_t max);
/* Whether the engine answers (its _ping), for a readiness check: 0, or a
 * negative errno with a message saying what is wrong. The answer is reused
 * for one second, so a probe cannot hammer the engine; callers wait for a
 * check in progress rather than start another. */
int sbx_manager_check_engine(sbx_manager *m, struct sbx_error *err);
/* Whether the engine's storage enforces sandbox.disk (sbx_engine_storage):
 * 0 when it does or sandbox.disk is 0; -ENOTSUP with a message naming the
 * storage, what the engine host needs and the setting when it cannot; the
 * engine's error when it does not answer. Needs no manager: the server calls
 * it before it makes one, and every container a manager makes is preceded by
 * one successful check (sbx_manager_disk_check, kept once it passed). */
int sbx_disk_check(const struct sbx_settings *s, sbx_engine *e, struct sbx_error *err);
/* Whether every place the engine may run a sandbox gives it what its
 * settings ask but its container cannot carry there (sbx_engine_verify with
 * a sandbox's spec; a cluster's nodes): 0, or the first failure, prefixed.
 * REPORT gets a line per place. Needs no manager: the server calls it at
 * start and --check. */
int sbx_places_check(const struct sbx_settings *s, sbx_engine *e, sbx_report_fn report,
		     void *userdata, struct sbx_error *err);
/* Sets M's lookup of the tenants' egress allow-lists (sbx/egress_lookup.h;
 * NULL: every sandbox has sandbox.egress_allow); before any sandbox is made.
 * Each sandbox's relay is given it. */
void sbx_manager_set_egress_lookup(sbx_manager *m, sbx_egress_lookup_fn fn, void *userdata);
/* What OWNER's sandboxes that are gone (deleted, expired) used, since the
 * manager started (src/sandbox/tenant_usage.c); list_sandboxes adds its
 * live ones'. */
void sbx_manager_tenant_gone(sbx_manager *m, const char *owner, struct sbx_tenant_usage *ret);

/* This instance's state folder, or NULL when there is none. */
const char *sbx_manager_state_dir(const sbx_manager *m);
/* The instance the manager's containers are labelled with: server.instance,
 * or, when that is left at "default" and there is a state folder, the name
 * derived from it (see sbx_manager_new). */
const char *sbx_manager_instance(const sbx_manager *m);

/* Creates a sandbox: takes one from the pool, else creates and starts a
 * container. NAME may be NULL (then it is the id); it is
 * 1..SBX_SANDBOX_NAME_MAX of [A-Za-z0-9_.-] and unique per owner (-EEXIST). */
int sbx_sandbox_create(sbx_manager *m, const char *owner, const char *name, sbx_sandbox **ret_sb,
		       struct sbx_error *err);
/* What one tenant (an owner) may use, as the manager enforces it: its API
 * key's limits folded with the [quota] defaults (src/tools/quota.c). -1 in a
 * field: no quota there, only the server's settings. The *_from_key flags
 * only pick the words of an error ("the ... limit of its API key" or
 * "quota.NAME"). */
struct sbx_tenant_quota {
	int64_t sandboxes; /* sandboxes at once */
	int64_t installs;  /* package installs running at once, all its sandboxes together */
	int64_t memory;	   /* bytes per sandbox; above sandbox.memory it is sandbox.memory */
	int64_t nano_cpus; /* per sandbox; above sandbox.cpus it is sandbox.cpus */
	bool sandboxes_from_key, installs_from_key;
};
#define SBX_TENANT_QUOTA_NONE ((struct sbx_tenant_quota){-1, -1, -1, -1, false, false})

/* The same for an OWNER under quota Q (NULL: none). Q->sandboxes is counted
 * under the manager's lock with the server's sandbox.max_sandboxes, which
 * still applies first: two creates at once cannot both pass. Past it
 * -EDQUOT, with a message naming the quota, the count and OWNER's sandboxes
 * to delete. The container gets the lower of Q->memory and sandbox.memory,
 * and of Q->nano_cpus and sandbox.cpus; when either is below the server's,
 * the sandbox never comes from the pool (whose containers have the server's
 * limits) but is made for it. */
int sbx_sandbox_create_quota(sbx_manager *m, const char *owner, const char *name,
			     const struct sbx_tenant_quota *q, sbx_sandbox **ret_sb,
			     struct sbx_error *err);
/* Finds a sandbox by id, or by name when no id matches. */
int sbx_sandbox_get(sbx_manager *m, const char *owner, const char *id_or_name, sbx_sandbox **ret_sb,
		    struct sbx_error *err);
/* Finds a sandbox by its id alone, whoever owns it, never by name: for the
 * artifact route, whose links carry ids (unguessable, random) and no
 * credentials; -ENOENT when none is live. */
int sbx_sandbox_get_by_id(sbx_manager *m, const char *id, sbx_sandbox **ret_sb,
			  struct sbx_error *err);
/* Puts SB to sleep now, as the reaper does at sandbox.idle_timeout
 * (src/sandbox/sleep.c): its interpreter and idle file readers end, its
 * container is marked asleep and stopped (its writable layer and
 * /app/results kept); the next call wakes it. 0, also when it sleeps
 * already; -EBUSY while a call or an install runs in it; -ESRCH when it is
 * being removed, dead or not yet made; -ENOTSUP on an engine whose
 * restarted container is not the same (Swarm: sbx_engine_restart_keeps);
 * the engine's error (SB stays awake). Calls that arrive meanwhile wait. */
int sbx_sandbox_sleep(sbx_sandbox *sb, struct sbx_error *err);
/* Makes sure SB runs before a call on it: a sleeping sandbox (status
 * "sleeping") is woken, its container started again with its files (one
 * call wakes it, calls at the same time wait for that). *RET_WOKE (may be
 * NULL) says SB was asleep when this came: its Python state is gone. The
 * manager's calls wake a sleeping sandbox themselves; this is for a caller
 * that tells its client so. Errors as sbx_sandbox_exec's: a sandbox that
 * cannot be woken is dead (the reason said) or stays asleep (the engine's
 * error). */
int sbx_sandbox_wake(sbx_manager *m, sbx_sandbox *sb, bool *ret_woke, struct sbx_error *err);
/* True once SB is going: its delete or reaping began, or it left the table
 * (the manager stopping). Something that holds it open without a call of
 * its own (an artifact download) asks this to let go at once. */
bool sbx_sandbox_ending(sbx_sandbox *sb);
sbx_sandbox *sbx_sandbox_ref(sbx_sandbox *sb);
sbx_sandbox *sbx_sandbox_unref(sbx_sandbox *sb);
/* Deletes a sandbox (delete_sandbox): removes its container (force) and
 * forgets the record; its slot under sandbox.max_sandboxes is free when this
 * returns. Another owner's sandbox is -ENOENT, like an unknown one. A
 * sandbox busy with calls is deleted all the same: from the start of the
 * delete no call starts in it, and the calls running in it end with its
 * container and fail (-ENOENT) saying it was deleted while they ran. Later
 * on, for an hour (and at most the last 256 per owner), a get, call or
 * delete of it by id or name says that it was deleted, and when, instead of
 * "no sandbox". When the engine cannot remove the container, the sandbox
 * stays as it was and the error says why. */
int sbx_sandbox_delete(sbx_manager *m, const char *owner, const char *id_or_name,
		       struct sbx_error *err);

const char *sbx_sandbox_id(const sbx_sandbox *sb);
const char *sbx_sandbox_name(const sbx_sandbox *sb);

/* A snapshot with the engine's current status. */
int sbx_sandbox_describe(sbx_manager *m, sbx_sandbox *sb, struct sbx_sandbox_info *ret_info,
			 struct sbx_error *err);
void sbx_sandbox_info_release(struct sbx_sandbox_info *info);
/* All sandboxes of OWNER, oldest first. */
int sbx_manager_list(sbx_manager *m, const char *owner, struct sbx_sandbox_info **ret_list,
		     size_t *ret_n, struct sbx_error *err);
void sbx_sandbox_info_list_free(struct sbx_sandbox_info *list, size_t n);

/* How a command or Python code runs (sbx_sandbox_run_shell_ex,
 * sbx_sandbox_run_python_ex). Zeroed = the defaults. */
struct sbx_run_opts {
	long timeout_ms; /* > 0 overrides sandbox.exec_timeout */
	/* Python only. New output as it is produced: fd 1 (stdout) or 2
	 * (stderr), valid UTF-8, only what is kept within sandbox.output_cap.
	 * Called on the calling thread, between reads of the engine stream:
	 * keep it short. */
	void (*on_output)(void *userdata, int fd, const char *text, size_t len);
	/* Polled about every 50 ms while the code or command runs; true stops
	 * it like the time limit does (result.cancelled). */
	bool (*cancelled)(void *userdata);
	void *userdata;
};

/* `sh -c COMMAND` in SBX_RESULTS_DIR, with sandbox.exec_timeout and
 * sandbox.output_cap (timeout_ms > 0 overrides the time limit). A non-zero
 * exit is a result, not an error. At the time limit, or when opts->cancelled
 * says so, the command's whole process tree is killed (exit_code -1,
 * timed_out or cancelled). */
int sbx_sandbox_run_shell_ex(sbx_manager *m, sbx_sandbox *sb, const char *command,
			     const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
			     struct sbx_error *err);
/* sbx_sandbox_run_shell_ex with only a time limit. */
int sbx_sandbox_run_shell(sbx_manager *m, sbx_sandbox *sb, const char *command, long timeout_ms,
			  struct sbx_run_result *ret_result, struct sbx_error *err);

/* Runs CODE in the sandbox's persistent Python interpreter (as uid 1000 in
 * SBX_RESULTS_DIR, through the engine's exec stream; a pooled sandbox comes
 * with a fresh one started by the pool, else it is started on first use): variables, imports and
 * open files persist from call to call, as in a notebook. Per call: stdout, stderr (an uncaught
 * exception's traceback, exit code 1; SystemExit(n) gives n), and the files created or modified
 * under SBX_RESULTS_DIR (recursively, by mtime in ns and size, at most 100,
 * PNG/JPEG content inline), all in one round trip after the code ends.
 *
 * At the time limit (or when cancelled) the code gets a KeyboardInterrupt
 * and the interpreter is kept; if the code does not stop within
 * sandbox.interrupt_grace, the interpreter is killed and restarted
 * (interpreter_restarted, and the notice says so). An interpreter that died
 * (killed from outside, out of memory, os._exit) is restarted by the next
 * call, which says so. Output beyond sandbox.output_cap is read and dropped.
 *
 * One call at a time per sandbox: a second call waits for the first, at most
 * its own time limit, then fails with -EBUSY; cancelled while it waits
 * (opts->cancelled, polled as it waits) it fails at once with -ECANCELED and
 * its code never runs. */
int sbx_sandbox_run_python_ex(sbx_manager *m, sbx_sandbox *sb, const char *code,
			      const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
			      struct sbx_error *err);
/* sbx_sandbox_run_python_ex with only a time limit. */
int sbx_sandbox_run_python(sbx_manager *m, sbx_sandbox *sb, const char *code, long timeout_ms,
			   struct sbx_run_result *ret_result, struct sbx_error *err);
/* True when the sandbox has a live Python interpreter, so that the next
 * call costs a round trip, not a start (also true while a call runs). An
 * interpreter found dead here is restarted by the next call, as usual. For
 * tests and the benchmark; no engine call. */
bool sbx_sandbox_python_ready(sbx_sandbox *sb);
/* Kills the sandbox's interpreter (a running call ends, reporting it) and
 * starts a fresh one: every variable and import is gone. */
int sbx_sandbox_reset_python(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);
void sbx_run_result_release(struct sbx_run_result *r);

/* Checks a pip requirement spec: a package from the index, by its PEP 508
 * name (not one pip would take for a local archive, such as x.whl or
 * x.tar.gz), optional [extras], optional version specifiers; no options,
 * URLs, paths or shell syntax. With ALLOW_DIRECT (sandbox.allow_direct_urls)
 * any printable ASCII spec that is not an option is passed on to pip: a
 * URL, a path, "name @ URL". */
bool sbx_package_spec_valid(const char *spec, bool allow_direct, char *why, size_t why_size);

/* Starts `pip install SPEC` in the background (argv, never a shell) and
 * waits up to wait_ms for it to end; *ret_status is where it is then. A
 * second call for a package already installing reports RUNNING. */
int sbx_sandbox_install(sbx_manager *m, sbx_sandbox *sb, const char *spec, long wait_ms,
			struct sbx_install_status *ret_status, struct sbx_error *err);
/* How sbx_sandbox_install_ex waits. */
struct sbx_install_opts {
	long wait_ms; /* as sbx_sandbox_install's */
	/* Optional: polled about every 100 ms while it waits; true ends the
	 * wait with -ECANCELED (the install goes on in the background). */
	bool (*cancelled)(void *userdata);
	void *userdata;
	/* Optional: the quota of the sandbox's owner. Past Q->installs installs
	 * of that owner running at once in all its live sandboxes (counted under
	 * the manager's lock, from the start of each until pip ends, fails or
	 * times out, or its sandbox is deleted) a new install is -EDQUOT, with a
	 * message naming the quota, the count and what to do; joining an install
	 * of the same spec that runs already is not a new one. */
	const struct sbx_tenant_quota *quota;
};
int sbx_sandbox_install_ex(sbx_manager *m, sbx_sandbox *sb, const char *spec,
			   const struct sbx_install_opts *opts,
			   struct sbx_install_status *ret_status, struct sbx_error *err);
/* The state of an install we started, or whether the package is present. */
int sbx_sandbox_install_status(sbx_manager *m, sbx_sandbox *sb, const char *spec,
			       struct sbx_install_status *ret_status, struct sbx_error *err);
void sbx_install_status_release(struct sbx_install_status *st);

/* Copies LOCAL_PATH, which must resolve (links and .. followed) to a
 * regular file inside sandbox.upload_dir, into the sandbox at DEST_PATH:
 * an existing directory (the file keeps its name) or a file path whose
 * directory exists. NULL DEST_PATH = SBX_RESULTS_DIR. *ret_path receives the
 * path written in the sandbox. -EPERM outside the upload folder or with
 * uploads disabled. */
int sbx_sandbox_upload(sbx_manager *m, sbx_sandbox *sb, const char *local_path,
		       const char *dest_path, char **ret_path, int64_t *ret_size,
		       struct sbx_error *err);

/* An artifact: a regular file under SBX_RESULTS_DIR, read as the sandbox's
 * own user (uid 1000) by a process of that user (kept between reads), never through the engine's
 * archive API (root's, following links): whatever the sandbox does to the path, no more than uid
 * 1000 may read is reached. RELPATH is relative to it; "..",
 * ".", empty segments, NUL, and symbolic links anywhere on the way are
 * refused (-EPERM); a missing file or a directory is -ENOENT; a file uid 1000
 * cannot read is -EACCES. */
typedef struct sbx_artifact sbx_artifact;
/* A caller's word that it no longer wants what a file operation brings
 * (its client cancelled or left): asked at least every SBX_CANCEL_POLL_MS
 * while the operation waits on its sandbox; true ends it with -ECANCELED.
 * A NULL pointer or function: never. */
struct sbx_cancel {
	bool (*cancelled)(void *userdata);
	void *userdata;
};
#define SBX_CANCEL_POLL_MS 200
/* What sbx_artifact_open tells of the file, from the open file. */
struct sbx_artifact_info {
	int64_t size;	   /* its size */
	int64_t mtime_ns;  /* when it was last modified, ns since the epoch */
	uint64_t ino, dev; /* its inode and device inside the sandbox */
	int64_t count;	   /* what sbx_artifact_stream sends: COUNT bytes from
			    * OFFSET, fewer at the file's end (0 past it) */
};
/* Opens it and asks for COUNT bytes from OFFSET (both >= 0; INT64_MAX: to
 * the end; 0: none, to learn what *RET_INFO tells); the bytes are read at
 * OFFSET in the sandbox, not skipped. The sandbox counts as in use until
 * the close. CANCEL (or NULL) holds for the open and the stream, and must
 * outlive the artifact. */
int sbx_artifact_open(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t offset,
		      int64_t count, const struct sbx_cancel *cancel, sbx_artifact **ret_artifact,
		      struct sbx_artifact_info *ret_info, struct sbx_error *err);
/* Streams exactly the count told to SINK, as the bytes come (nothing is
 * stored on the host): a file that grew is cut there, one that shrank is
 * -EIO. Once per open. */
int sbx_artifact_stream(sbx_artifact *a, sbx_sink_fn sink, void *userdata, struct sbx_error *err);
/* The pull form of sbx_artifact_stream, for a caller with a buffer of its
 * own: fills BUF with the next bytes of the count told, waiting for them
 * as they come (CAP of them; fewer only at the count's end): their count,
 * 0 once all were read, or a negative error (-EIO: the file shrank). Full
 * blocks, not each of the engine's frames as it lands: a caller that sends
 * them makes one send per block (Podman's exec stream comes in small
 * frames). Not mixed with sbx_artifact_stream on one open. */
ssize_t sbx_artifact_pull(sbx_artifact *a, void *buf, size_t cap, struct sbx_error *err);
/* The stream must have ended by AT_MS (sbx_monotonic_ms time), or it ends
 * with -ETIMEDOUT; without it only a pause of the file's bytes ends it (the
 * sandbox writing on stderr meanwhile does not count). */
void sbx_artifact_deadline(sbx_artifact *a, int64_t at_ms);
sbx_artifact *sbx_artifact_close(sbx_artifact *a);
/* Open and close: the size. */
int sbx_artifact_stat(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t *ret_size,
		      struct sbx_error *err);
/* Open, stream, close. */
int sbx_artifact_read(sbx_manager *m, sbx_sandbox *sb, const char *relpath, sbx_sink_fn sink,
		      void *userdata, struct sbx_error *err);

/* One regular file under SBX_RESULTS_DIR (sbx_artifact_list). */
struct sbx_artifact_entry {
	char *path; /* relative to SBX_RESULTS_DIR: valid UTF-8, no control character */
	int64_t size;
	int64_t mtime_ns;
};
#define SBX_ARTIFACT_LIST_MAX 1000
/* The regular files under SBX_RESULTS_DIR of SB, sorted by path (bytewise),
 * at most MAX (1..SBX_ARTIFACT_LIST_MAX): found as the sandbox's own user
 * by the interpreter program's scan (the one that finds a run's new files:
 * it never follows a symbolic link and looks at 20,000 entries at most).
 * Names that are not UTF-8, hold a control character or that
 * sbx_artifact_check_relpath refuses (too deep, too long) are left out;
 * *ret_truncated says that there were more. Not a use of the sandbox (the
 * reaper's clock is left alone), and a sleeping sandbox is not woken for it:
 * it lists nothing then. -ENOENT when its container is gone;
 * -ECANCELED when CANCEL (or NULL) said so. */
int sbx_artifact_list(sbx_manager *m, sbx_sandbox *sb, size_t max, const struct sbx_cancel *cancel,
		      struct sbx_artifact_entry **ret_list, size_t *ret_n, bool *ret_truncated,
		      struct sbx_error *err);
void sbx_artifact_list_free(struct sbx_artifact_entry *list, size_t n);
/* Whether anything under SBX_RESULTS_DIR (a file, or a folder whose names
 * changed) was modified at or after SINCE (CLOCK_REALTIME: the sandbox
 * shares the engine host's clock), as the sandbox's user sees it: 1 yes, 0
 * no, or a negative error. One exec of find; links are not followed. Not a
 * use of the sandbox; 0 for a sleeping one (not woken). */
int sbx_artifact_changed_since(sbx_manager *m, sbx_sandbox *sb, const struct timespec *since,
			       struct sbx_error *err);
/* 0 when RELPATH names a file below SBX_RESULTS_DIR without "", "." or ".."
 * segments or a leading '/'; else -EPERM (-EINVAL: too long or too deep),
 * ERR saying why. */
int sbx_artifact_check_relpath(const char *relpath, struct sbx_error *err);

/* The Content-Type for a file name, by extension; "application/octet-stream"
 * when unknown. */
const char *sbx_mime_type(const char *path);

#endif
