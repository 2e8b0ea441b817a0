/* SPDX-License-Identifier: MIT */
/*
 * The Docker Engine API backend (https://docs.docker.com/engine/api/).
 * Only what differs from libpod is here; the rest is moby_common.c.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-internal.h"
#include "sbx/common.h"

/* The newest API version this backend was written against; an older engine
 * is spoken to in its own version. */
#define DOCKER_API_MAX_MAJOR 1
#define DOCKER_API_MAX_MINOR 43

static int docker_set_version(sbx_engine *e, const char *api)
{
	free(e->api_version);
	free(e->api_prefix);
	e->api_version = strdup(api);
	if (asprintf(&e->api_prefix, "/v%s", api) < 0)
		e->api_prefix = NULL;
	return e->api_version && e->api_prefix ? 0 : -ENOMEM;
}

static int docker_negotiate(sbx_engine *e, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *api, *version;
	int major = 0, minor = 0, r;
	char mine[16];

	if (e->want_api_version)
		return docker_set_version(e, e->want_api_version) < 0
			   ? sbx_error_set(err, -ENOMEM, "out of memory")
			   : 0;
	r = sbx_rest_json(e->rest, "GET", "/version", NULL, NULL, &j, err);
	if (r < 0)
		return r;
	api = sbx_json_str(j, "ApiVersion");
	version = sbx_json_str(j, "Version");
	if (!api || sscanf(api, "%d.%d", &major, &minor) != 2)
		return sbx_error_set(err, -EPROTO, "engine /version has no ApiVersion");
	free(e->server_version);
	e->server_version = version ? strdup(version) : NULL;
	if (major > DOCKER_API_MAX_MAJOR ||
	    (major == DOCKER_API_MAX_MAJOR && minor > DOCKER_API_MAX_MINOR)) {
		snprintf(mine, sizeof(mine), "%d.%d", DOCKER_API_MAX_MAJOR, DOCKER_API_MAX_MINOR);
		api = mine;
	}
	return docker_set_version(e, api) < 0 ? sbx_error_set(err, -ENOMEM, "out of memory") : 0;
}

static int docker_ping(sbx_engine *e, struct sbx_error *err)
{
	return sbx_rest_json(e->rest, "GET", "/_ping", NULL, NULL, NULL, err);
}

static int docker_image_exists(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	return sbx_moby_present(
	    sbx_engine_json(e, "GET", NULL, NULL, NULL, err, "/images/%s/json", ref), err);
}

/* "repo:tag" -> repo, tag; a ':' before the last '/' is a registry port. */
static int split_ref(const char *ref, char **ret_repo, char **ret_tag)
{
	const char *colon = strrchr(ref, ':'), *slash = strrchr(ref, '/');

	if (colon && (!slash || colon > slash)) {
		*ret_repo = strndup(ref, (size_t)(colon - ref));
		*ret_tag = strdup(colon + 1);
	} else {
		*ret_repo = strdup(ref);
		*ret_tag = strdup("latest");
	}
	return *ret_repo && *ret_tag ? 0 : -ENOMEM;
}

static int docker_image_import(sbx_engine *e, const char *tar_path, const char *ref,
			       struct sbx_error *err)
{
	_cleanup_free_ char *repo = NULL, *tag = NULL, *path = NULL;
	struct sbx_rest_response resp;
	struct sbx_rest_request req = {
	    .method = "POST",
	    .content_type = "application/x-tar",
	    .body_file = tar_path,
	    .timeout_ms = -1,
	};
	struct json_object *j;
	int r;

	if (split_ref(ref, &repo, &tag) < 0 ||
	    !(path = sbx_engine_path(e, "/images/create?fromSrc=-&repo=%s&tag=%s", repo, tag)))
		return sbx_error_set(err, -ENOMEM, "out of memory");
	req.path = path;
	r = sbx_rest_call(e->rest, &req, &resp, err);
	if (r < 0)
		return r;
	r = sbx_rest_check(&resp, NULL, err);
	/* A 200 reply is a JSON-lines progress log that may end in an error. */
	if (r >= 0 && resp.body.data && strstr(resp.body.data, "\"error\"")) {
		char *line = strstr(resp.body.data, "{\"error");
		j = line ? json_tokener_parse(line) : NULL;
		r = sbx_error_set(err, -EIO, "image import failed: %s",
				  sbx_json_str(j, "error") ? sbx_json_str(j, "error") : "unknown");
		json_object_put(j);
	}
	sbx_rest_response_release(&resp);
	return r;
}

static int docker_image_remove(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	return sbx_engine_json(e, "DELETE", NULL, NULL, NULL, err, "/images/%s?force=1", ref);
}

static struct json_object *docker_host_config(const struct sbx_container_spec *spec)
{
	struct json_object *h = json_object_new_object();

	if (spec->memory_bytes > 0) {
		json_object_object_add(h, "Memory", json_object_new_int64(spec->memory_bytes));
		json_object_object_add(h, "MemorySwap", json_object_new_int64(spec->memory_bytes));
	}
	if (spec->nano_cpus > 0)
		json_object_object_add(h, "NanoCpus", json_object_new_int64(spec->nano_cpus));
	if (spec->pids_limit > 0)
		json_object_object_add(h, "PidsLimit", json_object_new_int64(spec->pids_limit));
	if (spec->read_only_rootfs)
		json_object_object_add(h, "ReadonlyRootfs", json_object_new_boolean(1));
	if (spec->n_tmpfs)
		json_object_object_add(h, "Tmpfs", sbx_json_labels(spec->tmpfs, spec->n_tmpfs));
	if (spec->writable_paths) {
		struct json_object *mounts = json_object_new_array();
		for (const char *const *p = spec->writable_paths; *p; p++) {
			struct json_object *m = json_object_new_object();
			json_object_object_add(m, "Type", json_object_new_string("volume"));
			json_object_object_add(m, "Target", json_object_new_string(*p));
			json_object_array_add(mounts, m);
		}
		json_object_object_add(h, "Mounts", mounts);
	}
	if (spec->cap_drop)
		json_object_object_add(h, "CapDrop", sbx_json_strv(spec->cap_drop));
	if (spec->no_new_privileges) {
		struct json_object *so = json_object_new_array();
		json_object_array_add(so, json_object_new_string("no-new-privileges"));
		json_object_object_add(h, "SecurityOpt", so);
	}
	if (spec->network_mode)
		json_object_object_add(h, "NetworkMode",
				       json_object_new_string(spec->network_mode));
	if (spec->n_ulimits)
		json_object_object_add(
		    h, "Ulimits",
		    sbx_json_ulimits(spec->ulimits, spec->n_ulimits, "Name", "Soft", "Hard"));
	if (spec->init)
		json_object_object_add(h, "Init", json_object_new_boolean(1));
	if (spec->runtime && *spec->runtime)
		json_object_object_add(h, "Runtime", json_object_new_string(spec->runtime));
	if (spec->disk_bytes > 0)
		json_object_object_add(h, "StorageOpt", sbx_json_storage_size(spec->disk_bytes));
	return h;
}

static int docker_container_create(sbx_engine *e, const struct sbx_container_spec *spec,
				   char **ret_id, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();
	_cleanup_json_ struct json_object *j = NULL;
	_cleanup_free_ char *path =
	    spec->name ? sbx_engine_path(e, "/containers/create?name=%s", spec->name)
		       : sbx_engine_path(e, "/containers/create");
	int r;

	if (!path || !body)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(body, "Image", json_object_new_string(spec->image));
	if (spec->cmd)
		json_object_object_add(body, "Cmd", sbx_json_strv(spec->cmd));
	if (spec->env)
		json_object_object_add(body, "Env", sbx_json_strv(spec->env));
	if (spec->n_labels)
		json_object_object_add(body, "Labels",
				       sbx_json_labels(spec->labels, spec->n_labels));
	if (spec->workdir)
		json_object_object_add(body, "WorkingDir", json_object_new_string(spec->workdir));
	if (spec->user)
		json_object_object_add(body, "User", json_object_new_string(spec->user));
	json_object_object_add(body, "HostConfig", docker_host_config(spec));
	r = sbx_rest_json(e->rest, "POST", path, body, NULL, &j, err);
	if (r < 0)
		return r;
	return sbx_moby_reply_id(j, ret_id, err);
}

static int docker_container_stop(sbx_engine *e, const char *id, int timeout_s,
				 struct sbx_error *err)
{
	return sbx_moby_container_stop(e, id, "t", timeout_s, err);
}

static int docker_stats(sbx_engine *e, const char *id, struct sbx_stats *ret, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err,
				"/containers/%s/stats?stream=0&one-shot=1", id);

	if (r < 0)
		return r;
	ret->cpu_total_ns =
	    (uint64_t)sbx_json_int(sbx_json_path(j, "cpu_stats", "cpu_usage"), "total_usage");
	ret->memory_usage_bytes =
	    (uint64_t)sbx_json_int(sbx_json_path(j, "memory_stats", NULL), "usage");
	ret->memory_limit_bytes =
	    (uint64_t)sbx_json_int(sbx_json_path(j, "memory_stats", NULL), "limit");
	ret->pids = (uint64_t)sbx_json_int(sbx_json_path(j, "pids_stats", NULL), "current");
	return 0;
}

static int docker_disk_usage(sbx_engine *e, const char *id, int64_t *ret_bytes,
			     struct sbx_error *err)
{
	return sbx_moby_container_disk_usage(e, id, "1", ret_bytes, err);
}

static int docker_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err)
{
	return sbx_events_follow(e, &sbx_events_docker, spec, err);
}

static int docker_network_connect(sbx_engine *e, const char *id, const char *network,
				  struct sbx_error *err)
{
	return sbx_moby_network(e, id, network, true, "Container", err);
}

static int docker_network_disconnect(sbx_engine *e, const char *id, const char *network,
				     struct sbx_error *err)
{
	return sbx_moby_network(e, id, network, false, "Container", err);
}

const struct sbx_engine_ops sbx_docker_ops = {
    .name = "docker",
    .restart_keeps = true,
    .negotiate = docker_negotiate,
    .ping = docker_ping,
    .version = sbx_moby_version,
    .storage = sbx_moby_storage,
    .image_exists = docker_image_exists,
    .image_build = sbx_moby_image_build,
    .image_import = docker_image_import,
    .image_remove = docker_image_remove,
    .container_create = docker_container_create,
    .container_start = sbx_moby_container_start,
    .container_rename = sbx_moby_container_rename,
    .container_stop = docker_container_stop,
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
    .events = docker_events,
    .network_connect = docker_network_connect,
    .network_disconnect = docker_network_disconnect,
    .container_stats = docker_stats,
    .container_disk_usage = docker_disk_usage,
};
