/* SPDX-License-Identifier: MIT */
/*
 * What the sandbox manager's files share: the manager, the records and the
 * background installs. Not for anything above the manager.
 *
 * Locking: m->lock guards the record table, every record's use (last_used,
 * used_ms, calls, end) and install list, every install's state, and the
 * table of sandboxes gone lately. Fields set at creation (id, name, owner,
 * container, image, created) never change afterwards and are read without
 * the lock. Engine calls are never made with the lock held.
 */
#ifndef SBX_SANDBOX_INTERNAL_H
#define SBX_SANDBOX_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx/engine.h"
#include "sbx/sandbox.h"
#include "sbx/worker.h"

/* Most install records kept per sandbox, and most running at once. */
/* Who a sandbox's processes run as (the image's user "sandbox"). */
#define SBX_SANDBOX_USER "1000:1000"
#define SBX_INSTALLS_MAX 64
#define SBX_INSTALLS_RUNNING_MAX 4
/* Bytes of pip's output kept in an install record. */
#define SBX_INSTALL_LOG_TAIL 4096
#define SBX_OWNER_MAX 256
/* Longest path a caller names (files.c, paths.c). */
#define SBX_PATH_MAX 4096

struct sbx_install {
	struct sbx_install *next;
	char *spec;
	enum sbx_install_state state;
	char *version;
	char *log_tail;
	struct timespec started;
	double seconds; /* set when it ended */
};

struct sbx_interp;	 /* interp.c */
struct sbx_reader;	 /* reader.c */
struct sbx_egress;	 /* src/egress/egress.h; a record's: relay.c */
struct sbx_egress_stats; /* src/egress/egress.h */

/* Why a sandbox is being removed, or was (the table of sandboxes gone
 * lately keeps it, so that a later call can say so). */
enum sbx_end {
	SBX_END_NONE,
	SBX_END_DELETED,  /* delete_sandbox */
	SBX_END_IDLE,	  /* not used for sandbox.idle_timeout (the reaper) */
	SBX_END_LIFETIME, /* older than sandbox.max_lifetime (the reaper) */
	SBX_END_SLEPT,	  /* asleep for sandbox.sleep_lifetime (the reaper) */
};

/* Why a sandbox's container stopped without the server's doing (watch.c
 * learns it from the engine's events, or a call finds it). */
enum sbx_death {
	SBX_DEATH_NONE,
	SBX_DEATH_OOM,	   /* the kernel's OOM killer */
	SBX_DEATH_KILLED,  /* a signal (death_code) */
	SBX_DEATH_EXITED,  /* its main process ended (exit code death_code) */
	SBX_DEATH_REMOVED, /* its container was removed */
	SBX_DEATH_LOST,	   /* its engine lost it: its cluster node went down (death_lost) */
};

/* A sandbox's sleep (sleep.c): its container stopped, its files kept. */
enum sbx_sleep {
	SBX_SLEEP_AWAKE,
	SBX_SLEEP_GOING,  /* being stopped: a call waits (m->woke) */
	SBX_SLEEP_ASLEEP, /* stopped: the next call wakes it */
	SBX_SLEEP_WAKING, /* being started by one call: the others wait */
};

struct sbx_sandbox {
	int refs; /* atomic */
	sbx_manager *m;
	char id[SBX_SANDBOX_ID_MAX + 1];
	char *name;
	char *owner;
	char *container; /* the engine's container id */
	char *image;
	time_t created;
	/* Its container's limits: the server's sandbox.memory and sandbox.cpus,
	 * or lower under its owner's quota; an adopted one's as inspected. */
	int64_t memory; /* bytes */
	int64_t nano_cpus;
	bool ready;   /* the container exists and runs; false while creating */
	bool removed; /* no longer in the table */
	bool pooled;  /* taken from the pool: owner and name live in the state folder */
	/* Under m->lock: */
	time_t last_used;      /* wall clock, for list_sandboxes */
	int64_t used_ms;       /* sbx_monotonic_ms() then, for the idle time */
	int calls;	       /* calls running on it (sbx_sandbox_begin .. end) */
	enum sbx_end end;      /* set while it is being removed: no call starts then */
	time_t end_at;	       /* when end was set */
	int64_t reap_retry_ms; /* the reaper failed to remove it: not before then */
	enum sbx_sleep sleep;  /* sleep.c */
	time_t slept_at;       /* wall clock, while asleep (or going to sleep) */
	uint64_t wakes;	       /* times it was woken */
	uint64_t sleeps;       /* times it was put to sleep */
	int sleep_failures;    /* in a row: past SBX_SLEEP_TRIES it is removed instead */
	/* Wakes tried; the last one failed with WAKE_ERROR: calls that waited
	 * for it fail with its error rather than each trying again. */
	uint64_t wake_tries;
	struct sbx_error wake_error;
	/* Its container stopped or went without the server's doing: no call
	 * starts in it (sbx_sandbox_begin says why) until it is deleted. */
	enum sbx_death death;
	int death_code;	      /* exit code or signal number; -1 unknown */
	time_t death_at;      /* when the server learnt it */
	bool death_blind;     /* learnt after the server lost the engine for a while */
	char death_lost[160]; /* SBX_DEATH_LOST: what the engine said ("node N is down") */
	struct sbx_install *installs;
	/* The Python interpreter: set once, under m->lock, at first use or (from
	 * the pool entry) at assignment before the record is ready. */
	struct sbx_interp *interp;
	/* Its egress relay (src/egress/egress.h): set once, under m->lock, at
	 * first use (relay.c). */
	struct sbx_egress *egress;
	/* Its idle file readers (reader.c), under m->lock. */
	struct sbx_reader *readers;
	int n_readers;
	/* usage.c, under m->lock: CPU time counted (and the engine's count at
	 * the last sample), memory in use then and integrated over the
	 * samples, and when (monotonic ms; 0: never sampled); the same of its
	 * writable layer's bytes, from the disk samples. */
	uint64_t cpu_ns, cpu_seen_ns, memory_bytes, memory_byte_seconds;
	int64_t sampled_ms;
	uint64_t disk_bytes, disk_byte_seconds;
	int64_t disk_sampled_ms;
	bool disk_known; /* disk_bytes is a figure (a sample told one) */
	/* The OOM kills its memory cgroup had counted when last looked at
	 * (0 for a new container; under m->lock). */
	int64_t oom_kills;
};

/* A sandbox removed lately (sbx_gone_add_locked). */
struct sbx_gone {
	char id[SBX_SANDBOX_ID_MAX + 1];
	char *name;
	char *owner;
	enum sbx_end end;
	time_t when;   /* wall clock */
	int64_t at_ms; /* sbx_monotonic_ms() */
};

struct sbx_manager {
	const struct sbx_settings *s;
	sbx_engine *engine;
	/* The instance in labels and the state folder: server.instance, or
	 * the name derived from the state folder (state_dir.c). Set once. */
	char *instance;
	pthread_mutex_t lock;
	pthread_cond_t changed; /* an install ended */
	pthread_cond_t woke;	/* a sandbox's sleep or wake ended (sleep.c) */
	sbx_sandbox **table;	/* oldest first */
	size_t n, cap;
	size_t installs_running;
	struct sbx_gone *gone; /* oldest first */
	size_t n_gone;
	struct sbx_reaper *reaper; /* reaper.c; NULL when nothing expires */
	struct sbx_watch *watch;   /* watch.c; set once, before its thread starts */
	bool watching;		   /* under lock: watch.c follows (or tries to) */
	/* The engine's events are followed now (watch.c connected and caught
	 * up), and how many times following started or stopped: a pooled
	 * container checked in an earlier epoch is not handed out. */
	bool engine_followed;
	uint64_t engine_epoch;
	struct sbx_pool *pool; /* pool.c; its fields are under lock too */
	/* manager_disk_check (under disk_lock, not check_lock: a slow engine
	 * there holds no GET /ready): passed (containers may be made), or its
	 * last failure, kept for a second */
	pthread_mutex_t disk_lock;
	bool disk_checked;
	bool disk_failed;
	struct timespec disk_failed_at;
	struct sbx_error disk_err;
	/* sbx_manager_check_engine: the last answer, kept for a second */
	pthread_mutex_t check_lock;
	struct timespec check_at;
	bool check_done;
	struct sbx_error check_err;
	/* relay.c: where tenants' egress lists come from (set once, before any
	 * sandbox), and the bytes of their sandboxes gone (under egress_lock,
	 * taken under no other lock of the manager's). */
	sbx_egress_lookup_fn egress_lookup;
	void *egress_lookup_ud;
	pthread_mutex_t egress_lock;
	struct sbx_tenant_gone *tenant_gone; /* tenant_usage.c, under egress_lock */
	size_t n_tenant_gone;
	bool tenant_gone_full;
	struct sbx_usage_sampler *usage; /* usage.c; NULL when sampling is off */
};

/* outcome.c: what became of a run (below every file that runs things). */

/* 1 when the kernel's OOM killer struck in the sandbox since the
 * last look (its memory cgroup's oom_kill count went up), 0 when not,
 * negative when the count cannot be read (no memory cgroup in sight). One
 * exec: called only after a process died of SIGKILL. */
int sbx_sandbox_oom_since(sbx_manager *m, sbx_sandbox *sb);
/* Whether SB's container is gone or no longer runs, as the engine
 * says within SETTLE_MS (an exec or the interpreter ends as a kill reaches
 * it, a moment before the engine records the container's end; 0: one
 * look): 1 it is, 0 it runs, < 0 the engine could not be asked (ERR says
 * why). A sandbox the server ended itself (deleted, reaped) is stopped
 * without asking. SBX_STOP_SETTLE_MS after a process died of SIGKILL. */
#define SBX_STOP_SETTLE_MS 1000
int sbx_sandbox_stopped(sbx_manager *m, sbx_sandbox *sb, int settle_ms, struct sbx_error *err);
/* provision.c: removes the containers labelled with this instance and
 * sandbox ID (every one of the instance's when ID is NULL): after a failed
 * create the engine may have made one without telling its id. AGAIN: one
 * more round a second later when a removal was refused. */
void sbx_remove_labelled(sbx_manager *m, const char *id, bool again);
/* The output shows a write refused for lack of space ("No space left on
 * device", "Disk quota exceeded"). */
bool sbx_says_out_of_disk(const struct sbx_buf *b);
/* The sentence that says so, naming SB's memory limit; WHAT is "The command". */
int sbx_oom_notice(const sbx_manager *m, const sbx_sandbox *sb, const char *what,
		   char **ret_notice);
/* SB's memory limit for people: "512 MiB (sandbox.memory)", or "64 MiB (the
 * memory quota of its tenant)" when its owner's quota made it lower. */
void sbx_memory_limit_text(const sbx_manager *m, const sbx_sandbox *sb, char *buf, size_t size);

/* paths.c: sbx_artifact_check_relpath (include/sbx/sandbox.h) is pure (the
 * fuzzers call it). */

/* Whether PATH[0..LEN), named by code in the sandbox, is a clean
 * relative path under SBX_RESULTS_DIR (sbx_artifact_check_relpath), valid
 * UTF-8 and free of control characters. */
bool sbx_interp_path_ok(const char *path, size_t len);

/* calls.c: a call in a sandbox, and why none may start. */

/* Every manager call that works in a sandbox's container runs between
 * these two: begin fails (-ENOENT, saying why) when the sandbox is being
 * removed or is gone, else counts the call and marks the sandbox used, so
 * that the reaper leaves it alone; end marks it used again and fails
 * (-ENOENT, saying why) when the sandbox was deleted while the call ran,
 * when the caller must drop what the call produced. */
int sbx_sandbox_begin(sbx_sandbox *sb, struct sbx_error *err);
int sbx_sandbox_end(sbx_sandbox *sb, struct sbx_error *err);
/* sbx_sandbox_begin, which also wakes a sleeping sandbox (sleep.c): one
 * call starts its container, calls arriving meanwhile (or while it is
 * put to sleep) wait for that; *RET_WOKE (may be NULL) says it was not
 * awake when this call came (this call woke it, or waited for that). A wake that fails fails the
 * call, and the sandbox stays asleep (the next call tries again) unless its container is gone. */
int sbx_sandbox_begin_woke(sbx_sandbox *sb, bool *ret_woke, struct sbx_error *err);
/* Under m->lock: a call or a package install runs in SB. */
bool sbx_sandbox_busy_locked(const sbx_sandbox *sb);
/* Under m->lock: which run of SB's container this is (its wakes), or
 * UINT64_MAX while it is not awake. What the engine said of a container
 * asked before SB slept or woke is of another run: a death learnt from
 * it is dropped when this changed meanwhile. */
uint64_t sbx_sandbox_run_locked(const sbx_sandbox *sb);

/* sleep.c: a sandbox put to sleep and woken. */

/* The name of sandbox ID's container in BUF: "mcp-sbx-INSTANCE-ID", and
 * while it is asleep ".asleep-T" after it (T: when it fell asleep, Unix
 * time). The engine keeps the name, so a restarted server tells a sandbox
 * put to sleep from a container stopped by someone else; a sandbox's
 * processes cannot rename their container. -ENAMETOOLONG when it does not
 * fit BUF or SBX_CONTAINER_NAME_MAX. (provision.c) */
int sbx_container_name(sbx_manager *m, const char *id, time_t asleep_since, char *buf, size_t size);
/* When the container named NAME (the engine's, without a leading '/') of
 * sandbox ID fell asleep, from its name; 0 when the name has no asleep
 * mark. (provision.c) */
time_t sbx_container_asleep_since(sbx_manager *m, const char *id, const char *name);
/* Failed sleeps in a row after which the reaper removes an idle sandbox
 * instead (its engine cannot stop or mark it). */
#define SBX_SLEEP_TRIES 3
/* sbx_sandbox_sleep for the reaper: -EBUSY also when SB was used since
 * USED_MS (its sb->used_ms when the reaper chose it; INT64_MIN: no check). */
int sbx_sandbox_sleep_idle(sbx_sandbox *sb, int64_t used_ms, struct sbx_error *err);
/* Names SB's container as asleep since ASLEEP_SINCE (0: awake), on the
 * engine (sbx_container_name). (provision.c) */
int sbx_sandbox_mark_asleep(sbx_sandbox *sb, time_t asleep_since, struct sbx_error *err);

/* Marks the sandbox used now (a background install that ended). */
void sbx_sandbox_touch(sbx_sandbox *sb);
/* Under m->lock: sbx_sandbox_touch. */
void sbx_sandbox_touch_locked(sbx_sandbox *sb);

/* A message for a failed exec: if the container is gone or stopped, says
 * so and tells the user to create a new sandbox; returns the code to use. */
int sbx_sandbox_exec_failed(sbx_manager *m, sbx_sandbox *sb, int r, struct sbx_error *err);
/* The error for a call on sandbox WHAT that was removed (or is being
 * removed) at WHEN for END; DURING: while the call ran. -ENOENT. */
int sbx_gone_error(sbx_manager *m, struct sbx_error *err, const char *what, enum sbx_end end,
		   time_t when, bool during);

/* Under m->lock: records that SB's container stopped or went (DEATH,
 * CODE: exit code or signal, -1 unknown); BLIND: found after the server
 * lost the engine for a while. No-op when SB is being removed or already
 * dead, but for its removal, which replaces how it died. True when it is
 * news. */
bool sbx_sandbox_died_locked(sbx_manager *m, sbx_sandbox *sb, enum sbx_death death, int code,
			     bool blind);
/* Logs that SB no longer runs, and why (after sbx_sandbox_died_locked said
 * it is news, without m->lock: the log may block). */
void sbx_sandbox_log_death(sbx_manager *m, sbx_sandbox *sb);
/* The death that container info CI shows (stopped, OOM, killed, lost with
 * its node), or SBX_DEATH_NONE when it runs; *ret_code is the exit code or
 * signal. */
enum sbx_death sbx_death_of(const struct sbx_container_info *ci, int *ret_code);
/* sbx_sandbox_died_locked with the death CI shows (what a lost one's
 * engine said kept for its text): true when it is news. */
bool sbx_sandbox_died_of_locked(sbx_manager *m, sbx_sandbox *sb,
				const struct sbx_container_info *ci, bool blind);
/* What happened to dead SB, for people (under m->lock). */
void sbx_death_text(sbx_manager *m, const sbx_sandbox *sb, char *buf, size_t size);

/* Time T as ISO 8601 UTC ("?" when it cannot be told). */
void sbx_iso_time(time_t t, char *buf, size_t size);

/* Under m->lock: a deadline may have changed (a sandbox was added, a call
 * or an install ended): wakes the reaper (reaper.c), when it runs. */
void sbx_reaper_wake_locked(sbx_manager *m);

/* interp.c: the persistent Python interpreter. */

/* The in-sandbox interpreter program's text (src/sandbox/interp/sbx_interp.py),
 * for `python3 -c`: with argv[1] "sbx-interp" the interpreter, with
 * "sbx-list" the listing of SBX_RESULTS_DIR (sbx_artifact_list). */
const char *sbx_interp_program(void);

/* Starts a fresh interpreter in a pooled container (sandbox ID, no record
 * yet) and waits for its hello; the pool entry owns it until assignment. */
int sbx_interp_start_pooled(sbx_manager *m, const char *id, const char *container,
			    struct sbx_interp **ret_in, struct sbx_error *err);
/* Ends the interpreter of a record or pool entry being freed (closes its
 * stream, which ends the process). */
void sbx_interp_free(struct sbx_interp *in);
/* SB's interpreter (if any) ends as its container is put to sleep: the
 * next run starts a fresh one and, when earlier calls left state, says
 * that a new interpreter ran its code. Waits for a run in progress. */
void sbx_interp_sleep(sbx_sandbox *sb);
/* Starts SB's interpreter now, when it has none and no run or reset holds
 * it (which would start it itself), as a call of its own (it wakes a
 * sleeping sandbox): the next run then finds it up, and says what a
 * restart lost. 0, or the start's error (the run tries again and tells). */
int sbx_interp_prepare(sbx_manager *m, sbx_sandbox *sb);
/* sbx_sandbox_run_python_ex and sbx_sandbox_reset_python, in interp.c. */
int sbx_interp_run(sbx_manager *m, sbx_sandbox *sb, const char *code,
		   const struct sbx_run_opts *opts, struct sbx_run_result *ret_result,
		   struct sbx_error *err);
int sbx_interp_reset(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);

/* interp.c, for the fuzzer: feeds N bytes through the protocol reader as the
 * interpreter's stdout during call 1 (m->s is all of M it reads), then frees
 * what the lines made; the reader's result (0, -EPROTO past the line cap). */
int sbx_interp_protocol_feed(sbx_manager *m, const char *p, size_t n);
/* interp.c, for the tests: the bytes SB's interpreter keeps for protocol
 * lines between calls (its line buffer's capacity and its tokener's string
 * buffer's), 0 before its first call. */
size_t sbx_interp_line_bytes(sbx_sandbox *sb);
/* interp.c, for the tests: the pid SB's interpreter gave in its hello (the
 * one a kill goes to), 0 before its first start. */
long sbx_interp_pid(sbx_sandbox *sb);

/* record.c: the record's own life. */

/* A new record (one reference, the caller's) of sandbox ID, NAME (ID when
 * NULL) and OWNER, made at CREATED, with the server's limits; NULL when out
 * of memory. */
sbx_sandbox *sbx_record_new(sbx_manager *m, const char *id, const char *name, const char *owner,
			    time_t created);
/* Frees SB and what it owns (no reference left, or never shared); NULL. */
sbx_sandbox *sbx_record_free(sbx_sandbox *sb);
/* Drops the install records of a record being freed. */
void sbx_install_list_free(struct sbx_install *list);

/* reader.c: a sandbox's file readers, kept between downloads. */

/* How long a file's bytes may pause before reading it fails. */
#define SBX_FILE_IDLE_MS 30000

/* sbx_stream_read within WAIT ms, asking C every SBX_CANCEL_POLL_MS:
 * -ECANCELED once it says so. */
ssize_t sbx_stream_read_within(sbx_stream *s, void *buf, size_t cap, int *ret_fd, int64_t wait,
			       const struct sbx_cancel *c, struct sbx_error *err);

/* What a reader said of a file it was asked for. */
struct sbx_reader_reply {
	int code;		       /* 0 open; 2 no such file, 3 not a regular file, 4 a
					* symbolic link on the way, 5 it cannot be opened */
	struct sbx_artifact_info info; /* when open: what the open file tells,
					* and the count of bytes that follow */
};
/* Asks a reader of SB (an idle one, else one started now: an exec as the
 * sandbox's user) for COUNT bytes of RELPATH (checked by the caller) from
 * OFFSET. 0 and *RET, the reader, which the caller then owns: *RET_REPLY
 * says what came (a refusal too); or a negative error (the engine's, a
 * stopped sandbox's, -EPROTO a reader that broke the protocol,
 * -ECANCELED). */
int sbx_reader_open(sbx_manager *m, sbx_sandbox *sb, const char *relpath, int64_t offset,
		    int64_t count, const struct sbx_cancel *cancel, struct sbx_reader **ret,
		    struct sbx_reader_reply *ret_reply, struct sbx_error *err);
/* The next bytes of the reply, by UNTIL (sbx_monotonic_ms time): their
 * count with *RET_DATA pointing to them (valid until the next call), 0
 * when the reply ended (fewer than told when the file shrank: the caller
 * counts), or a negative error. */
ssize_t sbx_reader_read(struct sbx_reader *r, const void **ret_data, int64_t until,
			const struct sbx_cancel *cancel, struct sbx_error *err);
/* sbx_reader_read giving at most MAX (> 0) bytes. */
ssize_t sbx_reader_read_max(struct sbx_reader *r, const void **ret_data, size_t max, int64_t until,
			    const struct sbx_cancel *cancel, struct sbx_error *err);
/* Gives R back to SB's idle readers when its reply ended cleanly, else
 * ends it. NULL is a no-op. */
void sbx_reader_give(sbx_manager *m, sbx_sandbox *sb, struct sbx_reader *r);
/* Ends a record's idle readers. */
void sbx_readers_free(struct sbx_reader *list);

/* relay.c: a sandbox's egress relay (src/egress/egress.h), made at its
 * first use and kept in its record. */

/* Starts SB's relay unless it runs (its first use, or it died, was killed
 * or broke the protocol since) and tells its port on the sandbox's
 * loopback; an exec that cannot run is explained (sbx_sandbox_exec_failed). */
int sbx_sandbox_egress_ensure(sbx_manager *m, sbx_sandbox *sb, int *ret_port,
			      struct sbx_error *err);
/* sbx_sandbox_egress_ensure, then the environment pip runs with
 * (sbx_egress_pip_env: NULL-terminated, owned). */
int sbx_sandbox_egress_pip_env(sbx_manager *m, sbx_sandbox *sb, char ***ret_env,
			       struct sbx_error *err);
/* Before a call runs code in SB (sandbox.network = none): starts its relay
 * unless it runs (as the call's proxy variables expect); cheap when it does.
 * NULL, or a notice (owned) for the call's result when the relay cannot
 * start (its port taken, say): the call runs anyway, without egress. */
char *sbx_sandbox_egress_for_code(sbx_manager *m, sbx_sandbox *sb);
/* Whether sbx_sandbox_egress_for_code has nothing to start: no relay is
 * used, or SB's runs. Cheap. */
bool sbx_sandbox_egress_ready(sbx_manager *m, sbx_sandbox *sb);
/* What SB's relay did (sbx_egress_stats); all zero when it never had one. */
void sbx_sandbox_egress_stats(sbx_manager *m, sbx_sandbox *sb, struct sbx_egress_stats *ret);

/* packages.c */

/* NULL-terminated copy of the specs installed successfully (owned), or NULL
 * when out of memory. Takes m->lock. */
char **sbx_sandbox_packages(sbx_manager *m, sbx_sandbox *sb);

/* tenant_usage.c: adds U to what OWNER's sandboxes gone used (a sandbox
 * that leaves the table; under m->lock or not). */
void sbx_tenant_gone_add(sbx_manager *m, const char *owner, const struct sbx_tenant_usage *u);
/* Frees what is kept (sbx_manager_free). */
void sbx_tenant_gone_release(sbx_manager *m);

/* usage.c: the sampler of the containers' CPU and memory (a thread, every
 * sandbox.usage_interval; none when it is 0). */
int sbx_usage_start(sbx_manager *m, struct sbx_error *err);
void sbx_usage_stop(sbx_manager *m);
/* Samples SB now (before its container is removed), when sampling is on:
 * its stats; its disk counts on at its last figure (no sized inspect). */
void sbx_usage_sample(sbx_manager *m, sbx_sandbox *sb);

/* provision.c: a sandbox's container. */

/* A fresh random sandbox id (12 hex digits). */
int sbx_sandbox_make_id(char id[SBX_SANDBOX_ID_MAX + 1], struct sbx_error *err);

/* The one place a container is made, for a cold create and for the pool
 * alike: create, start, and whatever a sandbox needs before its first use.
 * Labels: managed, instance, id, created; plus name and owner when OWNER is
 * given (a cold create), or SBX_LABEL_POOL when it is NULL (a pool container,
 * assigned later). MEMORY (bytes) and NANO_CPUS are its limits: the
 * server's sandbox.memory and sandbox.cpus, or lower for a tenant's quota.
 * On failure nothing is left on the engine. */
int sbx_container_provision(sbx_manager *m, const char *id, time_t created, const char *name,
			    const char *owner, int64_t memory, int64_t nano_cpus,
			    char **ret_container, struct sbx_error *err);

/* The entry of CS[0..N) that is CONTAINER (a list may give ids cut to 12
 * or more hex digits), or NULL. */
const struct sbx_container_summary *sbx_summary_find(const struct sbx_container_summary *cs,
						     size_t n, const char *container);

/* bulk_remove.c: many containers removed at once. */

/* Removes N containers, at most SBX_REMOVE_AT_ONCE at a time (a stop with
 * many sandboxes takes the engine's time for a few, not for all one after
 * the other): ID(CTX, i) names the i-th (NULL: none, taken as gone), and
 * DONE(CTX, i, r), on the thread that removed it and with no lock held,
 * gets its result: 0, or a negative errno (-ENOENT: it was gone). The
 * caller's thread takes its share; without threads it removes them all. */
#define SBX_REMOVE_AT_ONCE 8
void sbx_containers_remove(sbx_engine *e, size_t n, const char *(*id)(void *ctx, size_t i),
			   void (*done)(void *ctx, size_t i, int r), void *ctx);

/* removal.c: a sandbox's removal, and the table of sandboxes gone lately. */

/* Removes the container of SB, whose end was set under m->lock (so that
 * no call starts in it), and then the record, which the table of sandboxes
 * gone lately remembers. When the engine cannot remove the container, the
 * sandbox is usable again (end cleared) and the error says why. */
int sbx_sandbox_remove_marked(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);
/* Under m->lock. Takes SB out of the table and returns the table's
 * reference (NULL when it was not there). */
sbx_sandbox *sbx_table_remove_locked(sbx_manager *m, sbx_sandbox *sb);
/* Under m->lock. OWNER's latest gone sandbox with that id, else with that
 * name; NULL when there is none. */
const struct sbx_gone *sbx_gone_find_locked(sbx_manager *m, const char *owner,
					    const char *id_or_name);
/* Forgets every sandbox gone (sbx_manager_free). */
void sbx_gone_free(sbx_manager *m);

/* reaper.c: removes the sandboxes whose time is up. */

/* Its state; the thread waits on wake with m->lock (sbx_reaper_wake_locked). */
struct sbx_reaper {
	struct sbx_worker worker; /* with m->lock */
	sbx_manager *m;		  /* its thread's argument is this, not M: M's
				   * pointer to it is cleared before the stop */
};

/* Starts the reaper thread when sandbox.idle_timeout or max_lifetime is set. */
int sbx_reaper_start(sbx_manager *m, struct sbx_error *err);
/* Wakes and joins it. */
void sbx_reaper_stop(sbx_manager *m);
/* Under m->lock: when the reaper acts on SB next (on sbx_monotonic_ms(),
 * given as NOW_MS), INT64_MAX when never (also while it is being put to
 * sleep or woken); *ret_why says which limit removes it then, or
 * SBX_END_NONE when it is put to sleep then (idle, on an engine where it
 * may sleep); *ret_wall the wall-clock time (each may be NULL). Calls
 * running in it are not counted. */
int64_t sbx_sandbox_deadline_locked(sbx_manager *m, const sbx_sandbox *sb, int64_t now_ms,
				    enum sbx_end *ret_why, time_t *ret_wall);
/* Under m->lock: for list_sandboxes, when SB (unused from now on) is put
 * to sleep (*RET_SLEEPS) and when it is removed (*RET_EXPIRES); 0: never. */
void sbx_sandbox_times_locked(sbx_manager *m, const sbx_sandbox *sb, time_t *ret_sleeps,
			      time_t *ret_expires);

/* watch.c: follows the engine's container events. */

/* Starts the thread (a backend without events leaves m->watch NULL). */
int sbx_watch_start(sbx_manager *m, struct sbx_error *err);
/* Ends and joins it. */
void sbx_watch_stop(sbx_manager *m);

/* state_dir.c: an instance's state folder (server.state_dir): its lock, so
 * that one server runs an instance, and one file per pooled sandbox once
 * assigned, naming its owner and name, so that recover can adopt it. */
struct sbx_state_dir {
	int fd;	     /* STATE_DIR/instance-INSTANCE; -1 when there is none */
	char *path;  /* its path, for messages; NULL when there is none */
	int lock_fd; /* the instance's lock file, flock()ed; -1 without a folder */
};
#define SBX_STATE_DIR_INIT                                                                         \
	{                                                                                          \
		-1, NULL, -1                                                                       \
	}
/* Finds S's state folder (server.state_dir, else $STATE_DIRECTORY, else
 * /var/lib/mcp-sandbox when it exists and is writable) and opens its
 * instance folder into D, holding the instance's lock; *INSTANCE (freed and
 * replaced) becomes the instance's name: server.instance, or the one made
 * unique to the folder for "default". 0 with D left closed when there is no
 * folder to use; a negative errno in ERR when the folder asked for cannot be
 * used or another server holds the instance (-EBUSY). */
int sbx_state_dir_open(struct sbx_state_dir *d, const struct sbx_settings *s, char **instance,
		       struct sbx_error *err);
/* Closes D (and so drops the lock); D may be closed already. */
void sbx_state_dir_close(struct sbx_state_dir *d);
/* Our ids are hex: anything else is never used as a file name. */
bool sbx_state_id_valid(const char *id);
/* Writes SB's assignment (id, container, owner, name, when) to its file,
 * atomically (a temporary file renamed). 0 or a negative errno in ERR. */
int sbx_state_write(const struct sbx_state_dir *d, const sbx_sandbox *sb, struct sbx_error *err);
/* Reads the assignment of ID: 1 with its owner, name and time when there is
 * a valid one for CONTAINER, 0 when it cannot be trusted, -ENOENT when
 * there is none, another negative errno (in ERR) when it cannot be read. */
int sbx_state_read(const struct sbx_state_dir *d, const char *id, const char *container,
		   char **ret_owner, char **ret_name, time_t *ret_assigned, struct sbx_error *err);

/* pool.c: the warm pool. */

/* A started, never assigned pool container. */
struct sbx_pool_entry {
	struct sbx_pool_entry *next;
	char id[SBX_SANDBOX_ID_MAX + 1];
	char *container;
	/* Its started interpreter, or NULL (then started on first use). Moves
	 * to the record, under m->lock, when the container is assigned. */
	struct sbx_interp *interp;
	/* m->engine_epoch when it was last known to run: only entries of the
	 * current epoch are handed out while the engine is followed. */
	uint64_t epoch;
	uint64_t pushed; /* its number among the entries pushed into the pool */
};

/* Resolves the state folder and starts the refill thread (when the pool is
 * on). It fills nothing before recover succeeded or a cold create worked. */
int sbx_pool_new(sbx_manager *m, struct sbx_error *err);
/* Stops and joins the refill thread and removes every pooled container,
 * whatever sandbox.remove_on_exit says. */
void sbx_pool_stop(sbx_manager *m);
void sbx_pool_free(sbx_manager *m);

/* Under m->lock. The oldest ready container, or NULL when there is none;
 * *MISSED says whether the pool was on and had none to give. */
struct sbx_pool_entry *sbx_pool_take_locked(sbx_manager *m, bool *missed);
/* Under m->lock: a create that missed was admitted and makes its own
 * container. The pool grows by one (up to sandbox.pool_max) and starts no
 * filler until the caller calls sbx_pool_missed_done_locked, however its
 * create ends. */
void sbx_pool_missed_locked(sbx_manager *m);
void sbx_pool_missed_done_locked(sbx_manager *m);
/* Under m->lock. Puts back a container that was taken but not assigned. */
void sbx_pool_give_back_locked(sbx_manager *m, struct sbx_pool_entry *e);
struct sbx_pool_entry *sbx_pool_entry_free(struct sbx_pool_entry *e);
/* Under m->lock. A create ended well (from the pool or cold): counts it and
 * wakes the refill thread. */
void sbx_pool_created_locked(sbx_manager *m, bool from_pool);

/* Under m->lock: takes the pooled entry whose container is CONTAINER out of
 * the pool (the caller removes the container and frees it), or NULL. */
struct sbx_pool_entry *sbx_pool_unlink_locked(sbx_manager *m, const char *container);
/* Removes the container of E, an entry out of the pool (unless GONE: the
 * engine removed it already), and frees E; when the engine cannot remove it
 * now, the refill thread tries again later. Without m->lock. */
void sbx_pool_discard(sbx_manager *m, struct sbx_pool_entry *e, bool gone);
/* Under m->lock: the engine's state may have changed under the pool
 * (following it started or stopped): wakes the refill thread, which checks
 * the pooled containers again before any is handed out. */
void sbx_pool_recheck_locked(sbx_manager *m);

/* Records a pooled sandbox's owner and name in the state folder (atomically:
 * a temporary file renamed), so that recover can adopt it. */
int sbx_pool_assign(sbx_manager *m, sbx_sandbox *sb, struct sbx_error *err);
/* A sandbox is gone: drops its state file (pooled ones) and lets the pool
 * use the freed slot. */
void sbx_pool_forget(sbx_manager *m, sbx_sandbox *sb);

/* What recover does with a container labelled SBX_LABEL_POOL: 1 and its
 * owner, name and assignment time when the state folder says it was
 * assigned; 0 when it is to be skipped (one of this manager's own, or
 * unknowable), after removing it when it was never assigned. */
int sbx_pool_recover_one(sbx_manager *m, const char *id, const char *container, char **ret_owner,
			 char **ret_name, time_t *ret_assigned, struct sbx_error *err);
/* After a complete recover: drops state files of sandboxes that are gone,
 * and starts the pool. */
void sbx_pool_recover_done(sbx_manager *m);

#endif
