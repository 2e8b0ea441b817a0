/* SPDX-License-Identifier: MIT */
/*
 * The engine vtable. Only backends/ includes this; everybody else uses the
 * wrappers in include/sbx/engine.h.
 *
 * Every slot follows include/sbx/error.h: >= 0 on success, a negative errno
 * with err filled on failure. The wrappers check arguments (non-NULL ids,
 * specs) before a slot is called, so slots may assume them. Optional slots
 * may be NULL: the wrapper then answers -ENOTSUP.
 */
#ifndef SBX_BACKENDS_ENGINE_INTERNAL_H
#define SBX_BACKENDS_ENGINE_INTERNAL_H

#include <pthread.h>

#include "rest.h"
#include "sbx/engine.h"

struct sbx_engine_ops {
	const char *name; /* "docker", "podman", "swarm": what [engine] type names */
	/* A container stopped (container_stop) and started again
	 * (container_start) is the same container, its writable layer kept:
	 * a sandbox may sleep there (src/sandbox/sleep.c). */
	bool restart_keeps;

	/* Optional: frees e->backend, the backend's own state (made lazily by
	 * the backend itself, under e->lock). Called once, from sbx_engine_free. */
	void (*release)(sbx_engine *e);

	/* Find the API version to speak (cfg api_version, else ask the engine)
	 * and set e->api_prefix; called once, lazily, before any other slot but
	 * ping. */
	int (*negotiate)(sbx_engine *e, struct sbx_error *err);
	/* 0 when the engine answers its ping endpoint. Needs no negotiation. */
	int (*ping)(sbx_engine *e, struct sbx_error *err);
	/* Engine and API versions; strings owned by *ret. */
	int (*version)(sbx_engine *e, struct sbx_engine_version *ret, struct sbx_error *err);
	/* The storage driver and its backing filesystem as the engine reports
	 * them, with sbx_storage_size_bound's verdict; strings owned by *ret. */
	int (*storage)(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err);
	/* Optional (NULL: every container's spec is enforced where it runs):
	 * sbx_engine_verify's check of every place a container may run, each
	 * reported; every place is checked, the first failure returned. */
	int (*verify)(sbx_engine *e, const struct sbx_container_spec *spec, sbx_report_fn report,
		      void *userdata, struct sbx_error *err);

	/* 1 present, 0 absent. */
	int (*image_exists)(sbx_engine *e, const char *ref, struct sbx_error *err);
	/* Build tag from a tar of the context; the engine's build log goes to log
	 * (may be NULL); a failed step is -EIO with the step's error message. */
	int (*image_build)(sbx_engine *e, const struct sbx_buf *context_tar,
			   const char *containerfile, const char *tag,
			   const char *const *build_args, struct sbx_buf *log,
			   struct sbx_error *err);
	/* Import a rootfs tarball (a host file, streamed) as ref. */
	int (*image_import)(sbx_engine *e, const char *tar_path, const char *ref,
			    struct sbx_error *err);
	/* Remove ref, forced. Absent is -ENOENT. */
	int (*image_remove)(sbx_engine *e, const char *ref, struct sbx_error *err);

	/* Create (not start) from spec; *ret_id is the full id, caller owns it.
	 * An unknown image is -ENOENT; a name in use is -EBUSY. */
	int (*container_create)(sbx_engine *e, const struct sbx_container_spec *spec, char **ret_id,
				struct sbx_error *err);
	/* Start; already running is success. */
	int (*container_start)(sbx_engine *e, const char *id, struct sbx_error *err);
	/* Stop with a grace period; already stopped is success. */
	int (*container_stop)(sbx_engine *e, const char *id, int timeout_s, struct sbx_error *err);
	/* Optional (NULL: -ENOTSUP): give the container, running or not, the
	 * name NAME (sbx_container_rename checked it); a name in use is -EBUSY,
	 * an absent container -ENOENT. */
	int (*container_rename)(sbx_engine *e, const char *id, const char *name,
				struct sbx_error *err);
	/* Send a signal; a stopped container is -EBUSY. */
	int (*container_kill)(sbx_engine *e, const char *id, const char *signal,
			      struct sbx_error *err);
	/* Force-remove with anonymous volumes; absent is -ENOENT. */
	int (*container_remove)(sbx_engine *e, const char *id, struct sbx_error *err);
	/* Fill *ret (owned by the caller, release with sbx_container_info_release). */
	int (*container_inspect)(sbx_engine *e, const char *id, struct sbx_container_info *ret,
				 struct sbx_error *err);
	/* All containers with every label; *ret_list owned by the caller. The
	 * backend checks each one's labels itself (an engine's filter is not
	 * trusted: the callers remove what it returns) and leaves out any whose
	 * id is not sbx_moby_id_ok. */
	int (*container_list)(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
			      struct sbx_container_summary **ret_list, size_t *ret_n,
			      struct sbx_error *err);

	/* Create an exec instance for argv (stdin attached when attach_stdin);
	 * *ret_exec_id owned by the caller. A stopped container is -EBUSY. */
	int (*exec_create)(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
			   bool attach_stdin, char **ret_exec_id, struct sbx_error *err);
	/* Start it over a hijacked connection. */
	int (*exec_start)(sbx_engine *e, const char *exec_id, sbx_stream **ret_stream,
			  struct sbx_error *err);
	/* Exit code and whether it still runs. */
	int (*exec_inspect)(sbx_engine *e, const char *exec_id, int *ret_exit_code,
			    bool *ret_running, struct sbx_error *err);

	/* Extract tar into dir; a missing dir or container is -ENOENT. */
	int (*archive_put)(sbx_engine *e, const char *id, const char *dir, const void *tar,
			   size_t len, struct sbx_error *err);
	/* Stream path as tar to sink; a missing path is -ENOENT. */
	int (*archive_get)(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
			   void *userdata, struct sbx_error *err);
	/* Stat path; a missing path is -ENOENT. */
	int (*path_stat)(sbx_engine *e, const char *id, const char *path, struct sbx_path_stat *ret,
			 struct sbx_error *err);

	/* Stream container events as sbx_engine_events says; the wrapper has
	 * checked spec and spec->on_event. */
	int (*events)(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err);

	/* Optional (NULL: one host, no nodes): the cluster node that runs
	 * container ID, from what the backend knows without a request (its
	 * id in BUF); -ENOENT when it does not know it so. */
	int (*container_node)(sbx_engine *e, const char *id, char *buf, size_t size);

	/* Optional. */
	int (*network_connect)(sbx_engine *e, const char *id, const char *network,
			       struct sbx_error *err);
	int (*network_disconnect)(sbx_engine *e, const char *id, const char *network,
				  struct sbx_error *err);
	int (*container_stats)(sbx_engine *e, const char *id, struct sbx_stats *ret,
			       struct sbx_error *err);
	/* The writable layer's bytes as sbx_container_disk_usage says: an
	 * absent container is -ENOENT, a figure past the most -ERANGE, none
	 * or a malformed one -EPROTO. */
	int (*container_disk_usage)(sbx_engine *e, const char *id, int64_t *ret_bytes,
				    struct sbx_error *err);
};

struct sbx_engine {
	const struct sbx_engine_ops *ops;
	struct sbx_rest *rest;
	char *url;
	char *api_version;	/* what this handle speaks, set by negotiate */
	char *api_prefix;	/* "/v1.41" or "/v4.0.0/libpod", set by negotiate */
	char *server_version;	/* the engine's own version, when negotiate learned it */
	char *want_api_version; /* from the config, NULL = ask */
	pthread_mutex_t lock;	/* guards negotiation and the making of backend */
	bool negotiated;
	long timeout_ms; /* per REST request, as configured (0 = the default) */
	void *backend;	 /* the backend's own state, or NULL (ops->release frees it) */
};

/* Negotiates E's API version once (ops->negotiate under e->lock): what
 * every wrapper does before a slot, for a backend that calls another
 * handle's slots itself (swarm: a node's). */
int sbx_engine_negotiate(sbx_engine *e, struct sbx_error *err);
/* e->api_prefix + the printf-escaped path (see sbx_rest_path). */
char *sbx_engine_path(const sbx_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* sbx_rest_json on the path FMT makes under e->api_prefix (sbx_engine_path):
 * one request with an optional JSON body and reply. */
int sbx_engine_json(sbx_engine *e, const char *method, struct json_object *body,
		    const long *ok_also, struct json_object **ret_json, struct sbx_error *err,
		    const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* REQ (its path left NULL) sent to the path FMT makes, its status checked
 * (sbx_rest_check with OK_ALSO) and its reply dropped: for requests whose
 * body streams to a sink or does not matter. */
int sbx_engine_send(sbx_engine *e, struct sbx_rest_request *req, const long *ok_also,
		    struct sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

extern const struct sbx_engine_ops sbx_docker_ops;
extern const struct sbx_engine_ops sbx_podman_ops;
extern const struct sbx_engine_ops sbx_swarm_ops;

/* The REST operations Docker and libpod share (backends/moby_common.c): the
 * same paths under their prefix and the same JSON shapes. */
/* Engine and API versions from /version; the engine is named e->ops->name. */
int sbx_moby_version(sbx_engine *e, struct sbx_engine_version *ret, struct sbx_error *err);
/* The storage slot of both (GET /info, Docker's and libpod's shapes). */
int sbx_moby_storage(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err);
/* Does DRIVER on BACKING_FS enforce a container's size (storage-opt size)? */
bool sbx_storage_size_bound(const char *driver, const char *backing_fs);
/* An image_exists answer from the result R of a GET that is 404 when the
 * image is absent: 1 present, 0 absent (err cleared), else R. */
int sbx_moby_present(int r, struct sbx_error *err);
int sbx_moby_image_build(sbx_engine *e, const struct sbx_buf *tar, const char *containerfile,
			 const char *tag, const char *const *build_args, struct sbx_buf *log,
			 struct sbx_error *err);
int sbx_moby_container_start(sbx_engine *e, const char *id, struct sbx_error *err);
int sbx_moby_container_rename(sbx_engine *e, const char *id, const char *name,
			      struct sbx_error *err);
/* timeout_param: "t" (Docker) or "timeout" (libpod). */
int sbx_moby_container_stop(sbx_engine *e, const char *id, const char *timeout_param, int timeout_s,
			    struct sbx_error *err);
int sbx_moby_container_kill(sbx_engine *e, const char *id, const char *signal,
			    struct sbx_error *err);
int sbx_moby_container_remove(sbx_engine *e, const char *id, struct sbx_error *err);
int sbx_moby_container_inspect(sbx_engine *e, const char *id, struct sbx_container_info *ret,
			       struct sbx_error *err);
int sbx_moby_container_list(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
			    struct sbx_container_summary **ret_list, size_t *ret_n,
			    struct sbx_error *err);
int sbx_moby_exec_create(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
			 bool attach_stdin, char **ret_exec_id, struct sbx_error *err);
int sbx_moby_exec_start(sbx_engine *e, const char *exec_id, sbx_stream **ret_stream,
			struct sbx_error *err);
int sbx_moby_exec_inspect(sbx_engine *e, const char *exec_id, int *ret_exit_code, bool *ret_running,
			  struct sbx_error *err);
int sbx_moby_archive_put(sbx_engine *e, const char *id, const char *dir, const void *tar,
			 size_t len, struct sbx_error *err);
int sbx_moby_archive_get(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
			 void *userdata, struct sbx_error *err);
int sbx_moby_path_stat(sbx_engine *e, const char *id, const char *path, struct sbx_path_stat *ret,
		       struct sbx_error *err);

/* The disk_usage slot of both: GET /containers/{id}/json?size=SIZE_VALUE
 * ("1" Docker, "true" libpod), its SizeRw read by sbx_moby_size_rw. */
int sbx_moby_container_disk_usage(sbx_engine *e, const char *id, const char *size_value,
				  int64_t *ret_bytes, struct sbx_error *err);
/* *ret_bytes = the "SizeRw" of an inspect reply: an integer from 0 to
 * SBX_DISK_USAGE_MAX; larger -ERANGE, else -EPROTO (absent, null, a
 * string, a fraction, negative). */
int sbx_moby_size_rw(struct json_object *reply, int64_t *ret_bytes, struct sbx_error *err);
/* INFO's labels from a JSON object of them (none when LABELS is not one):
 * 0 or -ENOMEM (what was copied stays for sbx_container_info_release). */
int sbx_moby_info_labels(struct json_object *labels, struct sbx_container_info *info);
/* *ret_id = the "Id" of a create reply. */
/* Longest id of an engine's object (container, exec) taken from a reply. */
#define SBX_ENGINE_ID_MAX 128
/* Whether ID, from an engine, is 1 to SBX_ENGINE_ID_MAX lowercase letters
 * and digits: it goes into the paths of later requests. */
bool sbx_moby_id_ok(const char *id);
int sbx_moby_reply_id(struct json_object *reply, char **ret_id, struct sbx_error *err);
/* Connect or disconnect (forced); container_key is how the body names the
 * container ("Container"; libpod's connect says "container"). */
int sbx_moby_network(sbx_engine *e, const char *id, const char *network, bool connect,
		     const char *container_key, struct sbx_error *err);

/* The events stream (backends/events.c): one long-lived GET {prefix}/events
 * whose body is newline-delimited JSON, the same shape on both engines
 * ({"Type":"container","Action":...,"Actor":{"ID":...,"Attributes":{labels
 * and more}},"timeNano":...}) but for the action names and the attribute
 * that holds a DIE's exit code. */
struct sbx_events_action {
	const char *name; /* the engine's Action */
	enum sbx_event_kind kind;
};
struct sbx_events_dialect {
	const struct sbx_events_action *actions; /* ended by a NULL name */
	const char *exit_code_key;		 /* Actor.Attributes key of a DIE's exit code */
	bool stream_param;			 /* libpod wants stream=true */
};
extern const struct sbx_events_dialect sbx_events_docker; /* die, destroy, exitCode */
extern const struct sbx_events_dialect sbx_events_libpod; /* died, remove, containerExitCode */

/* Longest event line accepted; a longer one ends the stream with -EPROTO. */
#define SBX_EVENTS_LINE_MAX (1u << 20)

/* Splits the body into lines and turns each into a call of spec->on_event.
 * Lines are filtered here too (type container, a known action, an actor id,
 * every label of spec in Actor.Attributes): an engine may ignore or loosen
 * a filter (Podman 4.3 ORs label filters). Malformed lines are skipped. */
struct sbx_events_parser {
	const struct sbx_events_dialect *dialect;
	const struct sbx_events_spec *spec;
	struct sbx_buf line; /* a line begun in an earlier chunk */
	struct json_tokener *tok;
	bool stopped;	      /* spec->stopped said so */
	bool callback_failed; /* on_event returned the negative value last fed back */
};
/* 0 or -ENOMEM. */
int sbx_events_parser_init(struct sbx_events_parser *p, const struct sbx_events_dialect *d,
			   const struct sbx_events_spec *spec);
/* Feed a body chunk: every complete line is parsed and delivered. 0, or
 * on_event's negative value (callback_failed set), or -ECANCELED when
 * spec->stopped said so before an event (stopped set), or -EPROTO for a
 * line over SBX_EVENTS_LINE_MAX, or -ENOMEM (err filled for these two). */
int sbx_events_parser_feed(struct sbx_events_parser *p, const void *data, size_t len,
			   struct sbx_error *err);
void sbx_events_parser_release(struct sbx_events_parser *p);
/* The events slot of a backend speaking dialect D (sbx_engine_events). */
int sbx_events_follow(sbx_engine *e, const struct sbx_events_dialect *d,
		      const struct sbx_events_spec *spec, struct sbx_error *err);

/* JSON helpers for backends (json_util.c). */
#define _cleanup_json_ __attribute__((cleanup(sbx_json_putp)))
void sbx_json_putp(struct json_object **j);
/* {"KEY":"VALUE",...} from NULL-terminated "KEY=VALUE" strings. */
struct json_object *sbx_json_env_map(const char *const *kv);
const char *sbx_json_str(struct json_object *o, const char *key);
int64_t sbx_json_int(struct json_object *o, const char *key);
bool sbx_json_bool(struct json_object *o, const char *key);
struct json_object *sbx_json_path(struct json_object *o, const char *a, const char *b);
struct json_object *sbx_json_strv(const char *const *v);
/* {"size": "BYTES"}: a storage-opt bound on a container's writable layer. */
struct json_object *sbx_json_storage_size(int64_t bytes);
/* An array's strings as an owned NULL-terminated array (empty when not an array); NULL = ENOMEM. */
char **sbx_json_to_strv(struct json_object *a);
bool sbx_json_strv_has(struct json_object *a, const char *s);
struct json_object *sbx_json_labels(const struct sbx_kv *kv, size_t n);
/* {"label": ["KEY=VALUE", ...]}: an engine list's filters for LABELS[0..N);
 * NULL when out of memory. */
struct json_object *sbx_json_label_filters(const struct sbx_kv *labels, size_t n);
/* Whether the labels object HAVE holds every label of LABELS[0..N) (an
 * engine's filter is not trusted: its answer is checked with this). */
bool sbx_json_labels_match(struct json_object *have, const struct sbx_kv *labels, size_t n);
/* [{NAME_KEY: name, SOFT_KEY: soft, HARD_KEY: hard}, ...] of U[0..N). */
struct json_object *sbx_json_ulimits(const struct sbx_ulimit *u, size_t n, const char *name_key,
				     const char *soft_key, const char *hard_key);

#endif
