/* SPDX-License-Identifier: MIT */
/*
 * The seam between mcp-sandbox and container engines.
 *
 * Everything above this header (sandbox manager, tools, MCP, transports) sees
 * an opaque engine handle and these wrapper functions, never libcurl and never
 * a backend. Backends (Docker Engine, Podman libpod) live under backends/ and
 * fill the operations table in backends/engine-internal.h.
 *
 * The engine may be on another host (tcp://): nothing here assumes that the
 * caller shares a filesystem or a PID namespace with it.
 *
 * Errors and ownership follow include/sbx/error.h and include/sbx/common.h:
 * negative errno plus a filled struct sbx_error (with the engine's HTTP
 * status when there is one); -ENOTSUP when a backend lacks an optional
 * operation; -ENOENT for a container, image, exec or path that does not exist.
 */
#ifndef SBX_ENGINE_H
#define SBX_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx/buf.h"
#include "sbx/error.h"

typedef struct sbx_engine sbx_engine;
typedef struct sbx_stream sbx_stream;

/* TLS to tcp:// endpoints, as dockerd --tlsverify expects it: paths of PEM
 * files, NULL or "" when not given. Any one given makes every tcp://
 * endpoint spoken over TLS, the engine's certificate verified (against CA,
 * else the system's CAs) and its address checked against it. */
struct sbx_engine_tls {
	const char *ca;	  /* the CA that signed the engine's certificate */
	const char *cert; /* this client's certificate, with KEY */
	const char *key;
};

struct sbx_engine_config {
	const char *type;	 /* "docker", "podman" or "swarm"; NULL = "docker" */
	const char *url;	 /* "unix:///path", "/path" or "tcp://host:port"; NULL = discover */
	const char *api_version; /* e.g. "1.41" or "4.0.0"; NULL = negotiate with the engine */
	long timeout_ms;	 /* per REST request (not exec/streams); 0 = 60 s */
	const struct sbx_engine_tls *tls; /* NULL = plain TCP */
};

struct sbx_kv {
	const char *key;
	const char *value;
};

struct sbx_ulimit {
	const char *name; /* "nofile", "nproc", ... */
	int64_t soft, hard;
};

/* What a container is made of. Zero/NULL fields take the engine's default. */
struct sbx_container_spec {
	const char *image;
	const char *name;	/* NULL = engine-generated */
	const char *const *cmd; /* NULL-terminated argv; NULL = image default */
	const char *const *env; /* NULL-terminated "KEY=VALUE" */
	const struct sbx_kv *labels;
	size_t n_labels;
	const char *workdir;
	const char *user;     /* "uid[:gid]" or name */
	int64_t memory_bytes; /* hard memory limit (swap limited to the same) */
	int64_t nano_cpus;    /* 1e9 = one CPU */
	int64_t pids_limit;
	bool read_only_rootfs;
	const char *const *writable_paths; /* NULL-terminated; anonymous volumes, removed with it */
	const struct sbx_kv *tmpfs;	   /* path -> mount options ("size=64m,mode=1777") */
	size_t n_tmpfs;
	const char *const *cap_drop; /* NULL-terminated; {"ALL", NULL} drops all */
	bool no_new_privileges;
	const char *network_mode; /* "none", "host", "bridge" or a network name */
	const struct sbx_ulimit *ulimits;
	size_t n_ulimits;
	bool init; /* an init as PID 1 (the engine's: docker-init, catatonit) reaps orphans */
	const char
	    *runtime; /* OCI runtime name known to the engine ("runc", "runsc"); NULL = default */
	int64_t
	    disk_bytes; /* bound on the container's writable layer (storage-opt size); 0 = none */
};

/* What inspect reports. Strings are owned by the struct. */
struct sbx_container_info {
	char *id;
	char *name;
	char *image;
	char *status; /* engine words: "created", "running", "exited", ... */
	bool running;
	int exit_code;
	bool oom_killed;
	int64_t memory_bytes;
	int64_t memory_swap_bytes; /* memory + swap, as the engine says; 0 when not told */
	int64_t nano_cpus;
	int64_t pids_limit;
	bool read_only_rootfs;
	char *network_mode;
	struct sbx_kv *labels; /* owned keys and values */
	size_t n_labels;
	bool init;		/* the engine put its init as PID 1 */
	bool no_new_privileges; /* "no-new-privileges" among the security options */
	char **cap_add;		/* NULL-terminated, owned; as the engine reports them */
	char **cap_drop;	/* Docker: what was asked ("ALL"); libpod: each one dropped */
	char *runtime;		/* the OCI runtime in use ("runc", "runsc") */
	int64_t disk_bytes;	/* the writable layer's size bound, 0 when none */
	/* On a cluster: the node it runs (or ran) on, and why it cannot run
	 * any more beyond its own doing ("node N (HOST) is down"; then
	 * running is false). NULL on one engine. */
	char *node;
	char *lost;
};

struct sbx_container_summary {
	char *id;
	char *name;
	char *status;
	bool running;
	char *node; /* on a cluster: the node it runs on; NULL on one engine */
};

struct sbx_engine_version {
	char *engine;	   /* "docker" or "podman" */
	char *version;	   /* the engine's own version, e.g. "20.10.24" */
	char *api_version; /* the API version this handle speaks */
};

/* A non-interactive exec. */
struct sbx_exec_spec {
	const char *const *argv; /* NULL-terminated, required */
	const char *const *env;	 /* NULL-terminated "KEY=VALUE" */
	const char *workdir;
	const char *user;
	long timeout_ms;	/* 0 = none; on expiry the process tree is killed */
	size_t output_cap;	/* bytes kept of stdout + stderr together; 0 = 1 MiB */
	const void *stdin_data; /* optional, written then closed */
	size_t stdin_len;
	/* Optional: polled about every 50 ms while the process runs; true kills
	 * the process tree as the time limit does (result.cancelled). */
	bool (*cancelled)(void *userdata);
	void *userdata;
};

struct sbx_exec_result {
	int exit_code; /* -1 when unknown (killed on timeout) */
	bool timed_out;
	bool cancelled; /* spec->cancelled said so; the process tree was killed */
	bool truncated; /* output beyond output_cap was dropped */
	/* The command's process ran: the wrapper that a spec with a timeout
	 * or a cancel hook gets said so before it ran the command (a process
	 * cannot forge it: it comes first). False when the engine could not
	 * start it, or for a spec run without the wrapper. */
	bool started;
	struct sbx_buf out; /* stdout, NUL-terminated, may hold binary */
	struct sbx_buf err; /* stderr */
	size_t total_bytes; /* output produced, kept or not */
};

/* The stat of a path inside a container. */
struct sbx_path_stat {
	char *name;
	int64_t size;
	uint32_t mode; /* Go os.FileMode bits as the engine reports them */
	bool is_dir;
	bool is_symlink;
	char *link_target;
	char *mtime; /* RFC 3339 as reported */
};

struct sbx_stats {
	uint64_t cpu_total_ns;
	uint64_t memory_usage_bytes;
	uint64_t memory_limit_bytes;
	uint64_t pids;
};

/* How the engine keeps containers' files. */
struct sbx_engine_storage {
	char *driver;	  /* "overlay2", "overlay", "btrfs", "zfs", "vfs", ... */
	char *backing_fs; /* the filesystem under the driver ("extfs", "xfs"), "" when not told */
	/* The engine enforces sbx_container_spec.disk_bytes with this storage:
	 * btrfs (quotas), zfs, overlay on XFS (which must be mounted with pquota:
	 * Docker then refuses the create without it, Podman does not check). */
	bool size_bound;
};

/* Receives a streamed body chunk; return 0 to go on, negative to abort. */
typedef int (*sbx_sink_fn)(void *userdata, const void *data, size_t len);

/* Open a handle: selects the backend by cfg->type, resolves the URL
 * (explicit, else $DOCKER_HOST, /run/podman/podman.sock,
 * $XDG_RUNTIME_DIR/podman/podman.sock, /var/run/docker.sock), and does not
 * contact the engine yet. */
int sbx_engine_open(const struct sbx_engine_config *cfg, sbx_engine **ret_engine,
		    struct sbx_error *err);
sbx_engine *sbx_engine_free(sbx_engine *e);
/* Backend name ("docker", "podman", "swarm") and the URL in use (a
 * swarm's: the manager followed now, see README). */
const char *sbx_engine_name(const sbx_engine *e);
const char *sbx_engine_url(const sbx_engine *e);
/* Whether a container stopped and started again keeps its writable layer
 * (Docker, Podman), so that a sandbox may sleep; not on Swarm, where a
 * task's stopped container is the cluster's failed task. */
bool sbx_engine_restart_keeps(const sbx_engine *e);
/* NULL-terminated list of the backends compiled in. */
const char *const *sbx_engine_backends(void);

int sbx_engine_ping(sbx_engine *e, struct sbx_error *err);
int sbx_engine_version(sbx_engine *e, struct sbx_engine_version *ret_version,
		       struct sbx_error *err);
void sbx_engine_version_release(struct sbx_engine_version *v);

/* The engine's storage driver, what it stands on, and whether it bounds a
 * container's disk; strings owned by *ret (sbx_engine_storage_release). */
int sbx_engine_storage(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err);
void sbx_engine_storage_release(struct sbx_engine_storage *s);

/* Longest cluster node id sbx_container_node gives. */
#define SBX_ENGINE_NODE_MAX 128
/* The cluster node that runs container ID, as the engine knows it without
 * asking anyone (a swarm: where it placed the task; never a request, so a
 * metrics scrape may ask for every sandbox): 0 with its id in BUF,
 * -ENOENT when it is not known so, -ENOTSUP on an engine of one host. */
int sbx_container_node(sbx_engine *e, const char *id, char *buf, size_t size);

/* Receives one line of a check's report (valid during the call only). */
typedef void (*sbx_report_fn)(void *userdata, const char *line);
/* What a container made from SPEC gets from where it runs rather than
 * from SPEC (a cluster node's own settings: no-new-privileges, no network
 * but lo), checked now on every place the engine may run it, before any
 * sandbox is made there: REPORT (may be NULL) gets a line per place. 0
 * when every place passes, or when the engine runs containers only where
 * SPEC itself is enforced (docker, podman); else the first failure: -EPERM
 * naming the place and the setting, -ENOENT the image a place lacks,
 * -ENXIO or -ECONNREFUSED a place that cannot be reached. */
int sbx_engine_verify(sbx_engine *e, const struct sbx_container_spec *spec, sbx_report_fn report,
		      void *userdata, struct sbx_error *err);

/* 1 if present, 0 if not. */
int sbx_image_exists(sbx_engine *e, const char *ref, struct sbx_error *err);
/* Build tag from a context directory on this host (sent as a tar stream).
 * containerfile is relative to the context ("Containerfile" when NULL).
 * build_args: NULL-terminated "KEY=VALUE". log (may be NULL) gets the output. */
int sbx_image_build(sbx_engine *e, const char *context_dir, const char *containerfile,
		    const char *tag, const char *const *build_args, struct sbx_buf *log,
		    struct sbx_error *err);
/* Import a root filesystem tarball from a file on this host as ref. */
int sbx_image_import(sbx_engine *e, const char *tar_path, const char *ref, struct sbx_error *err);
int sbx_image_remove(sbx_engine *e, const char *ref, struct sbx_error *err);

/* Create; *ret_id (owned by the caller) is the full container id. */
int sbx_container_create(sbx_engine *e, const struct sbx_container_spec *spec, char **ret_id,
			 struct sbx_error *err);
int sbx_container_start(sbx_engine *e, const char *id, struct sbx_error *err);
/* SIGTERM, then SIGKILL after timeout_s seconds. */
int sbx_container_stop(sbx_engine *e, const char *id, int timeout_s, struct sbx_error *err);
/* Longest container name sbx_container_name_ok allows. */
#define SBX_CONTAINER_NAME_MAX 200
/* Whether NAME is one the engines take: [A-Za-z0-9][A-Za-z0-9_.-]*, at most
 * SBX_CONTAINER_NAME_MAX bytes (so it needs no escaping in a URL). */
bool sbx_container_name_ok(const char *name);
/* Renames container ID, running or stopped, to NAME (sbx_container_name_ok:
 * else -EINVAL). A name in use is -EBUSY; -ENOTSUP on an engine that cannot
 * (Swarm: a task's container is the cluster's). */
int sbx_container_rename(sbx_engine *e, const char *id, const char *name, struct sbx_error *err);
/* signal: "KILL", "TERM", ... */
int sbx_container_kill(sbx_engine *e, const char *id, const char *signal, struct sbx_error *err);
/* Force-removes, with its anonymous volumes. Absent is -ENOENT. */
int sbx_container_remove(sbx_engine *e, const char *id, struct sbx_error *err);
int sbx_container_inspect(sbx_engine *e, const char *id, struct sbx_container_info *ret_info,
			  struct sbx_error *err);
void sbx_container_info_release(struct sbx_container_info *info);
/* Every container (running or not) carrying all the given labels. */
int sbx_container_list(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
		       struct sbx_container_summary **ret_list, size_t *ret_n,
		       struct sbx_error *err);
void sbx_container_list_free(struct sbx_container_summary *list, size_t n);

/* Run argv to completion. A non-zero exit code is a success of this call. */
int sbx_exec(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
	     struct sbx_exec_result *ret_result, struct sbx_error *err);
void sbx_exec_result_release(struct sbx_exec_result *r);

/* Start argv with stdin attached and return a bidirectional stream to it
 * (the hijacked exec/start upgrade). spec->timeout_ms and output_cap are
 * ignored; the stream lives until freed or the process ends. */
int sbx_exec_stream(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
		    sbx_stream **ret_stream, struct sbx_error *err);

/* Write all of buf to the process's stdin. */
int sbx_stream_write(sbx_stream *s, const void *buf, size_t len, struct sbx_error *err);
/* Write what the stream takes now of buf, without waiting: the bytes
 * written, 0 when it takes none now (poll sbx_stream_fd for POLLOUT), or a
 * negative code. For a writer that must not block on a process that does
 * not read its stdin. */
ssize_t sbx_stream_write_some(sbx_stream *s, const void *buf, size_t len, struct sbx_error *err);
/* Close the process's stdin (half-close); reading goes on. */
int sbx_stream_close_stdin(sbx_stream *s, struct sbx_error *err);
/* Read up to cap payload bytes of the next frame. *ret_fd is 1 (stdout) or
 * 2 (stderr). Waits up to timeout_ms (-1 = forever). Returns the byte count,
 * 0 at end of stream, -ETIMEDOUT when nothing arrived in time. */
ssize_t sbx_stream_read(sbx_stream *s, void *buf, size_t cap, int *ret_fd, int timeout_ms,
			struct sbx_error *err);
/* The socket, for poll() in an event loop (readable = sbx_stream_read won't block
 * for long). Data may already be buffered: check sbx_stream_pending() first. */
int sbx_stream_fd(const sbx_stream *s);
bool sbx_stream_pending(const sbx_stream *s);
/* Exit code once the stream ended, -1 if still running or unknown. */
int sbx_stream_exit_code(sbx_stream *s, struct sbx_error *err);
sbx_stream *sbx_stream_free(sbx_stream *s);

/* Extract a tar archive into dir (which must exist) in the container. */
int sbx_archive_put(sbx_engine *e, const char *id, const char *dir, const void *tar, size_t len,
		    struct sbx_error *err);
/* Stream path (file or directory) out of the container as a tar archive. */
int sbx_archive_get(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
		    void *userdata, struct sbx_error *err);
int sbx_path_stat(sbx_engine *e, const char *id, const char *path, struct sbx_path_stat *ret_stat,
		  struct sbx_error *err);
void sbx_path_stat_release(struct sbx_path_stat *st);

/* What the engine's events stream says about a container. */
enum sbx_event_kind {
	SBX_EVENT_OPEN,	   /* the stream is established (first callback; no container) */
	SBX_EVENT_START,   /* the container started */
	SBX_EVENT_DIE,	   /* its main process ended (exit_code when known) */
	SBX_EVENT_OOM,	   /* the kernel's OOM killer struck in it (Docker only) */
	SBX_EVENT_KILL,	   /* a signal was sent to it (signal when known) */
	SBX_EVENT_DESTROY, /* it was removed */
};

struct sbx_engine_event {
	enum sbx_event_kind kind;
	const char *container; /* full id; NULL for SBX_EVENT_OPEN */
	int exit_code;	       /* SBX_EVENT_DIE: -1 when the engine did not say */
	int signal;	       /* SBX_EVENT_KILL: the signal number, 0 when unknown */
	int64_t time_ns;       /* the engine's timestamp, 0 when none */
};

/* Receives one event (valid during the call only); return 0 to go on,
 * negative to end the stream (sbx_engine_events then returns that value). */
typedef int (*sbx_event_fn)(void *userdata, const struct sbx_engine_event *ev);

struct sbx_events_spec {
	const struct sbx_kv *labels; /* only containers carrying all of them */
	size_t n_labels;
	sbx_event_fn on_event; /* required */
	/* Optional: polled about every 100 ms, also while the stream is idle (and
	 * between events); true ends the stream and the call returns 0. */
	bool (*stopped)(void *userdata);
	void *userdata;
};

/* Follows the engine's container events (start, die, oom, kill, destroy of
 * containers with spec->labels) from now on, calling spec->on_event for each,
 * SBX_EVENT_OPEN first once the engine accepted the request. Blocks until
 * spec->stopped says so (0), on_event fails (its value), or the stream ends
 * or breaks (-EPIPE, or the transport's error: the engine stopped or is
 * unreachable; the caller reconnects). Unknown actions and malformed lines
 * are skipped; a line over 1 MiB ends the stream with -EPROTO. */
int sbx_engine_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err);

/* Optional operations: -ENOTSUP when the backend has none. */
int sbx_network_connect(sbx_engine *e, const char *id, const char *network, struct sbx_error *err);
int sbx_network_disconnect(sbx_engine *e, const char *id, const char *network,
			   struct sbx_error *err);
int sbx_container_stats(sbx_engine *e, const char *id, struct sbx_stats *ret_stats,
			struct sbx_error *err);

/* The most sbx_container_disk_usage believes: 4 TiB. */
#define SBX_DISK_USAGE_MAX (INT64_C(1) << 42)
/* The bytes the container wrote to its own writable layer (files it made or
 * changed; not its image, volumes or tmpfs), as the engine measures them now
 * (inspect with its size: Docker walks the layer, Podman the whole image
 * too). The figure is the files' apparent sizes and the container's own
 * doing (a sparse file counts whole): a figure past SBX_DISK_USAGE_MAX is
 * -ERANGE; none, or one that is not an integer from 0, -EPROTO. */
int sbx_container_disk_usage(sbx_engine *e, const char *id, int64_t *ret_bytes,
			     struct sbx_error *err);

#endif
