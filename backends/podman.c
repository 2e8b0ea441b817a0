/* SPDX-License-Identifier: MIT */
/*
 * The Podman backend, speaking the libpod API (/vX/libpod/...), not Podman's
 * Docker-compatibility endpoints. Only what differs from Docker is here; the
 * rest is moby_common.c under the "/v4.0.0/libpod" prefix.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-internal.h"
#include "sbx/common.h"

/* The libpod API this backend was written against; Podman 4 and 5 serve it. */
#define LIBPOD_API_VERSION "4.0.0"
#define CPU_PERIOD_US 100000

static int podman_negotiate(sbx_engine *e, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *api = e->want_api_version ? e->want_api_version : LIBPOD_API_VERSION;
	int r;

	if (!e->want_api_version) {
		/* Learn the engine's version (libpod routes only versioned paths). */
		r = sbx_rest_json(e->rest, "GET", "/v" LIBPOD_API_VERSION "/libpod/version", NULL,
				  NULL, &j, err);
		if (r < 0)
			return r;
		free(e->server_version);
		e->server_version =
		    sbx_json_str(j, "Version") ? strdup(sbx_json_str(j, "Version")) : NULL;
	}
	free(e->api_version);
	free(e->api_prefix);
	e->api_version = strdup(api);
	if (asprintf(&e->api_prefix, "/v%s/libpod", api) < 0)
		e->api_prefix = NULL;
	return e->api_version && e->api_prefix ? 0 : sbx_error_set(err, -ENOMEM, "out of memory");
}

static int podman_ping(sbx_engine *e, struct sbx_error *err)
{
	return sbx_rest_json(e->rest, "GET", "/libpod/_ping", NULL, NULL, NULL, err);
}

static int podman_image_exists(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	return sbx_moby_present(
	    sbx_engine_json(e, "GET", NULL, NULL, NULL, err, "/images/%s/exists", ref), err);
}

static int podman_image_import(sbx_engine *e, const char *tar_path, const char *ref,
			       struct sbx_error *err)
{
	struct sbx_rest_request req = {
	    .method = "POST",
	    .content_type = "application/x-tar",
	    .body_file = tar_path,
	    .timeout_ms = -1,
	};
	return sbx_engine_send(e, &req, NULL, err, "/images/import?reference=%s", ref);
}

static int podman_image_remove(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	return sbx_engine_json(e, "DELETE", NULL, NULL, NULL, err, "/images/%s?force=true", ref);
}

static struct json_object *podman_resources(const struct sbx_container_spec *spec)
{
	struct json_object *res = json_object_new_object(), *o;

	if (spec->memory_bytes > 0) {
		o = json_object_new_object();
		json_object_object_add(o, "limit", json_object_new_int64(spec->memory_bytes));
		json_object_object_add(o, "swap", json_object_new_int64(spec->memory_bytes));
		json_object_object_add(res, "memory", o);
	}
	if (spec->nano_cpus > 0) {
		o = json_object_new_object();
		json_object_object_add(
		    o, "quota",
		    json_object_new_int64(spec->nano_cpus * CPU_PERIOD_US / 1000000000));
		json_object_object_add(o, "period", json_object_new_int64(CPU_PERIOD_US));
		json_object_object_add(res, "cpu", o);
	}
	if (spec->pids_limit > 0) {
		o = json_object_new_object();
		json_object_object_add(o, "limit", json_object_new_int64(spec->pids_limit));
		json_object_object_add(res, "pids", o);
	}
	return res;
}

/* Tmpfs "size=64m,mode=1777" -> a mount with options ["size=64m","mode=1777"]. */
static struct json_object *podman_mounts(const struct sbx_container_spec *spec)
{
	struct json_object *mounts = json_object_new_array();

	for (size_t i = 0; i < spec->n_tmpfs; i++) {
		struct json_object *m = json_object_new_object(), *opts = json_object_new_array();
		_cleanup_free_ char *copy =
		    strdup(spec->tmpfs[i].value ? spec->tmpfs[i].value : "");
		char *save = NULL;

		for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
		     t = strtok_r(NULL, ",", &save))
			json_object_array_add(opts, json_object_new_string(t));
		json_object_object_add(m, "destination",
				       json_object_new_string(spec->tmpfs[i].key));
		json_object_object_add(m, "type", json_object_new_string("tmpfs"));
		json_object_object_add(m, "source", json_object_new_string("tmpfs"));
		json_object_object_add(m, "options", opts);
		json_object_array_add(mounts, m);
	}
	return mounts;
}

static struct json_object *podman_netns(const char *mode, struct json_object *body)
{
	struct json_object *ns = json_object_new_object();
	bool builtin = !strcmp(mode, "none") || !strcmp(mode, "host") || !strcmp(mode, "bridge") ||
		       !strcmp(mode, "private");

	json_object_object_add(ns, "nsmode", json_object_new_string(builtin ? mode : "bridge"));
	if (!builtin) {
		struct json_object *nets = json_object_new_object();
		json_object_object_add(nets, mode, json_object_new_object());
		json_object_object_add(body, "Networks", nets);
	}
	return ns;
}

static int podman_container_create(sbx_engine *e, const struct sbx_container_spec *spec,
				   char **ret_id, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();
	_cleanup_json_ struct json_object *j = NULL;
	_cleanup_free_ char *path = sbx_engine_path(e, "/containers/create");
	int r;

	if (!path || !body)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(body, "image", json_object_new_string(spec->image));
	if (spec->name)
		json_object_object_add(body, "name", json_object_new_string(spec->name));
	if (spec->cmd)
		json_object_object_add(body, "command", sbx_json_strv(spec->cmd));
	if (spec->env)
		json_object_object_add(body, "env", sbx_json_env_map(spec->env));
	if (spec->n_labels)
		json_object_object_add(body, "labels",
				       sbx_json_labels(spec->labels, spec->n_labels));
	if (spec->workdir)
		json_object_object_add(body, "work_dir", json_object_new_string(spec->workdir));
	if (spec->user)
		json_object_object_add(body, "user", json_object_new_string(spec->user));
	json_object_object_add(body, "resource_limits", podman_resources(spec));
	if (spec->read_only_rootfs)
		json_object_object_add(body, "read_only_filesystem", json_object_new_boolean(1));
	if (spec->n_tmpfs)
		json_object_object_add(body, "mounts", podman_mounts(spec));
	if (spec->writable_paths) {
		/* A named volume with no name is an anonymous one. */
		struct json_object *vols = json_object_new_array();
		for (const char *const *p = spec->writable_paths; *p; p++) {
			struct json_object *v = json_object_new_object();
			json_object_object_add(v, "Name", json_object_new_string(""));
			json_object_object_add(v, "Dest", json_object_new_string(*p));
			json_object_array_add(vols, v);
		}
		json_object_object_add(body, "volumes", vols);
	}
	if (spec->cap_drop)
		json_object_object_add(body, "cap_drop", sbx_json_strv(spec->cap_drop));
	if (spec->no_new_privileges)
		json_object_object_add(body, "no_new_privileges", json_object_new_boolean(1));
	if (spec->network_mode)
		json_object_object_add(body, "netns", podman_netns(spec->network_mode, body));
	if (spec->n_ulimits)
		json_object_object_add(
		    body, "r_limits",
		    sbx_json_ulimits(spec->ulimits, spec->n_ulimits, "type", "soft", "hard"));
	if (spec->init)
		json_object_object_add(body, "init", json_object_new_boolean(1));
	if (spec->runtime && *spec->runtime)
		json_object_object_add(body, "oci_runtime", json_object_new_string(spec->runtime));
	if (spec->disk_bytes > 0)
		json_object_object_add(body, "storage_opts",
				       sbx_json_storage_size(spec->disk_bytes));
	r = sbx_rest_json(e->rest, "POST", path, body, NULL, &j, err);
	/* libpod answers 500 for an absent image; Docker says 404. */
	if (r == -EIO && err && strstr(err->msg, "image not known"))
		r = err->code = -ENOENT;
	if (r < 0)
		return r;
	return sbx_moby_reply_id(j, ret_id, err);
}

static int podman_container_stop(sbx_engine *e, const char *id, int timeout_s,
				 struct sbx_error *err)
{
	return sbx_moby_container_stop(e, id, "timeout", timeout_s, err);
}

static int podman_stats(sbx_engine *e, const char *id, struct sbx_stats *ret, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct json_object *stats, *s;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err,
				"/containers/stats?containers=%s&stream=false", id);

	if (r < 0)
		return r;
	stats = sbx_json_path(j, "Stats", NULL);
	if (!stats || !json_object_is_type(stats, json_type_array) ||
	    json_object_array_length(stats) < 1)
		return sbx_error_set(err, -EPROTO, "engine stats reply has no Stats");
	s = json_object_array_get_idx(stats, 0);
	ret->cpu_total_ns = (uint64_t)sbx_json_int(s, "CPUNano");
	ret->memory_usage_bytes = (uint64_t)sbx_json_int(s, "MemUsage");
	ret->memory_limit_bytes = (uint64_t)sbx_json_int(s, "MemLimit");
	ret->pids = (uint64_t)sbx_json_int(s, "PIDs");
	return 0;
}

static int podman_disk_usage(sbx_engine *e, const char *id, int64_t *ret_bytes,
			     struct sbx_error *err)
{
	return sbx_moby_container_disk_usage(e, id, "true", ret_bytes, err);
}

static int podman_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err)
{
	return sbx_events_follow(e, &sbx_events_libpod, spec, err);
}

static int podman_network_connect(sbx_engine *e, const char *id, const char *network,
				  struct sbx_error *err)
{
	return sbx_moby_network(e, id, network, true, "container", err);
}

static int podman_network_disconnect(sbx_engine *e, const char *id, const char *network,
				     struct sbx_error *err)
{
	return sbx_moby_network(e, id, network, false, "Container", err);
}

const struct sbx_engine_ops sbx_podman_ops = {
    .name = "podman",
    .restart_keeps = true,
    .negotiate = podman_negotiate,
    .ping = podman_ping,
    .version = sbx_moby_version,
    .storage = sbx_moby_storage,
    .image_exists = podman_image_exists,
    .image_build = sbx_moby_image_build,
    .image_import = podman_image_import,
    .image_remove = podman_image_remove,
    .container_create = podman_container_create,
    .container_start = sbx_moby_container_start,
    .container_rename = sbx_moby_container_rename,
    .container_stop = podman_container_stop,
    .container_kill = sbx_moby_container_kill,
    .container_remove = sbx_moby_container_remove,
    .container_inspect = sbx_moby_container_inspect,
    .container_list = sbx_moby_container_list,
    .exec_create = sbx_moby_exec_create,
    .exec_start = sbx_moby_exec_start,
    .exec_inspect = sbx_moby_exec_inspect,
    .archive_put = sbx_moby_archive_put,
    .archive_get = sbx_moby_archive_get,
    .path_stat = sbx_moby_path_stat,
    .events = podman_events,
    .network_connect = podman_network_connect,
    .network_disconnect = podman_network_disconnect,
    .container_stats = podman_stats,
    .container_disk_usage = podman_disk_usage,
};
