/* SPDX-License-Identifier: MIT */
/*
 * The operations Docker Engine and Podman's libpod API share: the same path
 * under each backend's prefix (e->api_prefix) and the same JSON shapes.
 * What differs lives in docker.c and podman.c.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-internal.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

static const long ok_304[] = {304, 0};

/* ---- image build: a JSON-lines log ---- */

struct build_log {
	struct sbx_buf line;
	struct sbx_buf *log;
	char *error;
};

static void build_log_line(struct build_log *bl)
{
	struct json_object *j = json_tokener_parse(bl->line.data);
	const char *s;

	if (j && (s = sbx_json_str(j, "error")) && !bl->error)
		bl->error = strdup(s);
	else if (j && (s = sbx_json_str(j, "stream")) && bl->log)
		sbx_buf_append(bl->log, s, strlen(s));
	else if (!j && bl->log)
		sbx_buf_appendf(bl->log, "%s\n", bl->line.data);
	json_object_put(j);
	sbx_buf_reset(&bl->line);
}

static int build_log_sink(void *userdata, const void *data, size_t len)
{
	struct build_log *bl = userdata;
	const char *p = data;

	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\n' || p[i] == '\r') {
			if (bl->line.len)
				build_log_line(bl);
			continue;
		}
		if (bl->line.len > (1u << 20))
			continue; /* a pathological line: keep the head */
		if (sbx_buf_append(&bl->line, p + i, 1) < 0)
			return -ENOMEM;
	}
	return 0;
}

int sbx_moby_image_build(sbx_engine *e, const struct sbx_buf *tar, const char *containerfile,
			 const char *tag, const char *const *build_args, struct sbx_buf *log,
			 struct sbx_error *err)
{
	_cleanup_json_ struct json_object *args = sbx_json_env_map(build_args);
	_cleanup_free_ char *build_path =
	    args ? sbx_engine_path(e, "/build?t=%s&dockerfile=%s&buildargs=%s&rm=1&forcerm=1", tag,
				   containerfile,
				   json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN))
		 : NULL;
	struct build_log bl = {.log = log};
	struct sbx_rest_response resp;
	struct sbx_rest_request req = {
	    .method = "POST",
	    .path = build_path,
	    .content_type = "application/x-tar",
	    .body = tar->data,
	    .body_len = tar->len,
	    .sink = build_log_sink,
	    .sink_data = &bl,
	    .timeout_ms = -1,
	};
	int ret;

	if (!build_path)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	ret = sbx_rest_call(e->rest, &req, &resp, err);
	if (ret >= 0) {
		ret = sbx_rest_check(&resp, NULL, err);
		if (bl.line.len)
			build_log_line(&bl);
		if (ret >= 0 && bl.error)
			ret = sbx_error_set(err, -EIO, "image build failed: %s", bl.error);
	}
	sbx_rest_response_release(&resp);
	sbx_buf_release(&bl.line);
	free(bl.error);
	return ret;
}

/* ---- the engine and its images ---- */

int sbx_moby_version(sbx_engine *e, struct sbx_engine_version *ret, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_engine_version v = {0};
	const char *ver;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/version");

	if (r < 0)
		return r;
	ver = sbx_json_str(j, "Version");
	v.engine = strdup(e->ops->name);
	v.version = strdup(ver ? ver : "unknown");
	v.api_version = strdup(e->api_version);
	if (!v.engine || !v.version || !v.api_version) {
		sbx_engine_version_release(&v);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret = v;
	return 0;
}

bool sbx_storage_size_bound(const char *driver, const char *backing_fs)
{
	if (!driver)
		return false;
	if (!strcmp(driver, "btrfs") || !strcmp(driver, "zfs"))
		return true;
	return (!strcmp(driver, "overlay2") || !strcmp(driver, "overlay")) && backing_fs &&
	       !strcmp(backing_fs, "xfs");
}

/* Docker's /info: Driver, and DriverStatus [["Backing Filesystem", "xfs"], ...];
 * libpod's: store.graphDriverName and store.graphStatus {"Backing Filesystem": ...}. */
int sbx_moby_storage(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct json_object *store, *status;
	struct sbx_engine_storage st = {0};
	const char *driver, *backing = NULL;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/info");

	if (r < 0)
		return r;
	store = sbx_json_path(j, "store", NULL);
	if (store) {
		driver = sbx_json_str(store, "graphDriverName");
		backing =
		    sbx_json_str(sbx_json_path(store, "graphStatus", NULL), "Backing Filesystem");
	} else {
		driver = sbx_json_str(j, "Driver");
		status = sbx_json_path(j, "DriverStatus", NULL);
		for (size_t i = 0; status && json_object_is_type(status, json_type_array) &&
				   i < json_object_array_length(status) && !backing;
		     i++) {
			struct json_object *pair = json_object_array_get_idx(status, i);
			if (!json_object_is_type(pair, json_type_array) ||
			    json_object_array_length(pair) != 2)
				continue;
			const char *k = json_object_get_string(json_object_array_get_idx(pair, 0));
			if (k && !strcmp(k, "Backing Filesystem"))
				backing =
				    json_object_get_string(json_object_array_get_idx(pair, 1));
		}
	}
	if (!driver || !*driver)
		return sbx_error_set(err, -EPROTO, "the engine's info names no storage driver");
	st.driver = strdup(driver);
	st.backing_fs = strdup(backing ? backing : "");
	if (!st.driver || !st.backing_fs) {
		sbx_engine_storage_release(&st);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	st.size_bound = sbx_storage_size_bound(st.driver, st.backing_fs);
	*ret = st;
	return 0;
}

int sbx_moby_present(int r, struct sbx_error *err)
{
	if (r == -ENOENT) {
		sbx_error_clear(err);
		return 0;
	}
	return r < 0 ? r : 1;
}

/* ---- containers ---- */

int sbx_moby_container_start(sbx_engine *e, const char *id, struct sbx_error *err)
{
	return sbx_engine_json(e, "POST", NULL, ok_304, NULL, err, "/containers/%s/start", id);
}

int sbx_moby_container_rename(sbx_engine *e, const char *id, const char *name,
			      struct sbx_error *err)
{
	return sbx_engine_json(e, "POST", NULL, NULL, NULL, err, "/containers/%s/rename?name=%s",
			       id, name);
}

int sbx_moby_container_stop(sbx_engine *e, const char *id, const char *timeout_param, int timeout_s,
			    struct sbx_error *err)
{
	struct sbx_rest_request req = {
	    .method = "POST",
	    .timeout_ms = (timeout_s + 30) * 1000L,
	};
	return sbx_engine_send(e, &req, ok_304, err, "/containers/%s/stop?%s=%d", id, timeout_param,
			       timeout_s);
}

int sbx_moby_container_kill(sbx_engine *e, const char *id, const char *signal,
			    struct sbx_error *err)
{
	return sbx_engine_json(e, "POST", NULL, NULL, NULL, err, "/containers/%s/kill?signal=%s",
			       id, signal ? signal : "KILL");
}

int sbx_moby_container_remove(sbx_engine *e, const char *id, struct sbx_error *err)
{
	return sbx_engine_json(e, "DELETE", NULL, NULL, NULL, err, "/containers/%s?force=1&v=1",
			       id);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static const char *strip_slash(const char *name)
{
	return name && name[0] == '/' ? name + 1 : name;
}

int sbx_moby_info_labels(struct json_object *labels, struct sbx_container_info *info)
{
	size_t n = 0;

	if (!labels || !json_object_is_type(labels, json_type_object))
		return 0;
	info->labels = calloc((size_t)json_object_object_length(labels) + 1, sizeof(*info->labels));
	if (!info->labels)
		return -ENOMEM;
	json_object_object_foreach(labels, k, v)
	{
		info->labels[n].key = strdup(k);
		info->labels[n].value = strdup(json_object_get_string(v));
		n++;
		if (!info->labels[n - 1].key || !info->labels[n - 1].value)
			break;
	}
	info->n_labels = n;
	return n && (!info->labels[n - 1].key || !info->labels[n - 1].value) ? -ENOMEM : 0;
}

int sbx_moby_container_inspect(sbx_engine *e, const char *id, struct sbx_container_info *ret,
			       struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_container_info info = {0};
	struct json_object *state, *host, *config;
	const char *image, *runtime, *size;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/containers/%s/json", id);

	if (r < 0)
		return r;
	/* Its Id goes into the paths of later requests (an adopted sandbox's). */
	if (!sbx_moby_id_ok(sbx_json_str(j, "Id")))
		return sbx_error_set(
		    err, -EPROTO,
		    "engine inspect reply for %.64s has no Id of 1 to %d lowercase "
		    "letters and digits",
		    id, SBX_ENGINE_ID_MAX);
	state = sbx_json_path(j, "State", NULL);
	host = sbx_json_path(j, "HostConfig", NULL);
	config = sbx_json_path(j, "Config", NULL);
	/* Docker names the image in Config.Image; libpod in ImageName. */
	image = sbx_json_str(j, "ImageName");
	if (!image)
		image = sbx_json_str(config, "Image");

	info.id = dup_or_null(sbx_json_str(j, "Id"));
	info.name = dup_or_null(strip_slash(sbx_json_str(j, "Name")));
	info.image = dup_or_null(image);
	info.status = dup_or_null(sbx_json_str(state, "Status"));
	info.running = sbx_json_bool(state, "Running");
	info.exit_code = (int)sbx_json_int(state, "ExitCode");
	info.oom_killed = sbx_json_bool(state, "OOMKilled");
	info.memory_bytes = sbx_json_int(host, "Memory");
	info.memory_swap_bytes = sbx_json_int(host, "MemorySwap");
	info.nano_cpus = sbx_json_int(host, "NanoCpus");
	if (!info.nano_cpus && sbx_json_int(host, "CpuPeriod") > 0)
		info.nano_cpus =
		    sbx_json_int(host, "CpuQuota") * 1000000000 / sbx_json_int(host, "CpuPeriod");
	info.pids_limit = sbx_json_int(host, "PidsLimit");
	info.read_only_rootfs = sbx_json_bool(host, "ReadonlyRootfs");
	info.network_mode = dup_or_null(sbx_json_str(host, "NetworkMode"));
	info.init = sbx_json_bool(host, "Init");
	info.no_new_privileges =
	    sbx_json_strv_has(sbx_json_path(host, "SecurityOpt", NULL), "no-new-privileges");
	info.cap_add = sbx_json_to_strv(sbx_json_path(host, "CapAdd", NULL));
	info.cap_drop = sbx_json_to_strv(sbx_json_path(host, "CapDrop", NULL));
	/* libpod's HostConfig.Runtime says "oci"; its OCIRuntime names the runtime. */
	runtime = sbx_json_str(j, "OCIRuntime");
	info.runtime = dup_or_null(runtime ? runtime : sbx_json_str(host, "Runtime"));
	size = sbx_json_str(sbx_json_path(host, "StorageOpt", NULL), "size");
	info.disk_bytes = size ? strtoll(size, NULL, 10) : 0;
	r = sbx_moby_info_labels(sbx_json_path(config, "Labels", NULL), &info);
	if (r >= 0 && (!info.cap_add || !info.cap_drop))
		r = -ENOMEM;
	if (r < 0 || !info.id) {
		sbx_container_info_release(&info);
		return r < 0 ? sbx_error_set(err, r, "out of memory")
			     : sbx_error_set(err, -EPROTO, "engine inspect reply has no Id");
	}
	*ret = info;
	return 0;
}

int sbx_moby_size_rw(struct json_object *reply, int64_t *ret_bytes, struct sbx_error *err)
{
	struct json_object *v = sbx_json_path(reply, "SizeRw", NULL);
	int64_t n;

	/* A fraction or a string is no byte count; json-c reads a number past
	 * INT64_MAX as INT64_MAX, which the bound refuses too. */
	if (!json_object_is_type(v, json_type_int))
		return sbx_error_set(err, -EPROTO,
				     "engine inspect reply has no integer SizeRw (the writable "
				     "layer's size)");
	n = json_object_get_int64(v);
	if (n < 0)
		return sbx_error_set(err, -EPROTO,
				     "engine inspect reply says the writable layer holds %lld "
				     "bytes",
				     (long long)n);
	if (n > SBX_DISK_USAGE_MAX)
		return sbx_error_set(err, -ERANGE,
				     "engine inspect reply says the writable layer holds %lld "
				     "bytes: more than %lld, not believed",
				     (long long)n, (long long)SBX_DISK_USAGE_MAX);
	*ret_bytes = n;
	return 0;
}

int sbx_moby_container_disk_usage(sbx_engine *e, const char *id, const char *size_value,
				  int64_t *ret_bytes, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/containers/%s/json?size=%s", id,
				size_value);

	return r < 0 ? r : sbx_moby_size_rw(j, ret_bytes, err);
}

int sbx_moby_container_list(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
			    struct sbx_container_summary **ret_list, size_t *ret_n,
			    struct sbx_error *err)
{
	_cleanup_json_ struct json_object *filters = sbx_json_label_filters(labels, n_labels);
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_container_summary *list;
	size_t n;
	int r;

	if (!filters)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/containers/json?all=1&filters=%s",
			    json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN));
	if (r < 0)
		return r;
	if (!json_object_is_type(j, json_type_array))
		return sbx_error_set(err, -EPROTO, "engine list reply is not an array");
	list = calloc(json_object_array_length(j) + 1, sizeof(*list));
	if (!list)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	n = 0;
	for (size_t i = 0; i < json_object_array_length(j); i++) {
		struct json_object *c = json_object_array_get_idx(j, i);
		struct json_object *names = sbx_json_path(c, "Names", NULL);
		const char *state = sbx_json_str(c, "State"), *id = sbx_json_str(c, "Id");

		/* What the callers remove or adopt: only a container that has
		 * every label asked for, whatever the engine's filter did, and
		 * an id fit for a path. */
		if (!sbx_moby_id_ok(id) ||
		    !sbx_json_labels_match(sbx_json_path(c, "Labels", NULL), labels, n_labels))
			continue;
		list[n].id = dup_or_null(id);
		if (json_object_is_type(names, json_type_array) &&
		    json_object_array_length(names) &&
		    json_object_is_type(json_object_array_get_idx(names, 0), json_type_string))
			list[n].name = dup_or_null(strip_slash(
			    json_object_get_string(json_object_array_get_idx(names, 0))));
		list[n].status = dup_or_null(state);
		list[n].running = state && strcmp(state, "running") == 0;
		if (!list[n].id) {
			sbx_container_list_free(list, n + 1);
			return sbx_error_set(err, -ENOMEM, "out of memory");
		}
		n++;
	}
	*ret_list = list;
	*ret_n = n;
	return 0;
}

/* ---- exec ---- */

int sbx_moby_exec_create(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
			 bool attach_stdin, char **ret_exec_id, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();
	_cleanup_json_ struct json_object *j = NULL;
	int r;

	if (!body)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(body, "AttachStdin", json_object_new_boolean(attach_stdin));
	json_object_object_add(body, "AttachStdout", json_object_new_boolean(1));
	json_object_object_add(body, "AttachStderr", json_object_new_boolean(1));
	json_object_object_add(body, "Tty", json_object_new_boolean(0));
	json_object_object_add(body, "Cmd", sbx_json_strv(spec->argv));
	if (spec->env)
		json_object_object_add(body, "Env", sbx_json_strv(spec->env));
	if (spec->workdir)
		json_object_object_add(body, "WorkingDir", json_object_new_string(spec->workdir));
	if (spec->user)
		json_object_object_add(body, "User", json_object_new_string(spec->user));
	r = sbx_engine_json(e, "POST", body, NULL, &j, err, "/containers/%s/exec", id);
	if (r < 0)
		return r;
	return sbx_moby_reply_id(j, ret_exec_id, err);
}

int sbx_moby_exec_start(sbx_engine *e, const char *exec_id, sbx_stream **ret_stream,
			struct sbx_error *err)
{
	_cleanup_free_ char *path = sbx_engine_path(e, "/exec/%s/start", exec_id);
	_cleanup_json_ struct json_object *body = json_object_new_object();

	if (!path || !body)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(body, "Detach", json_object_new_boolean(0));
	json_object_object_add(body, "Tty", json_object_new_boolean(0));
	return sbx_rest_hijack(e->rest, path, body, ret_stream, err);
}

int sbx_moby_exec_inspect(sbx_engine *e, const char *exec_id, int *ret_exit_code, bool *ret_running,
			  struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/exec/%s/json", exec_id);

	if (r < 0)
		return r;
	*ret_exit_code = (int)sbx_json_int(j, "ExitCode");
	*ret_running = sbx_json_bool(j, "Running");
	return 0;
}

/* ---- files ---- */

int sbx_moby_archive_put(sbx_engine *e, const char *id, const char *dir, const void *tar,
			 size_t len, struct sbx_error *err)
{
	struct sbx_rest_request req = {
	    .method = "PUT",
	    .content_type = "application/x-tar",
	    .body = tar,
	    .body_len = len,
	};
	return sbx_engine_send(e, &req, NULL, err, "/containers/%s/archive?path=%s", id, dir);
}

int sbx_moby_archive_get(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
			 void *userdata, struct sbx_error *err)
{
	struct sbx_rest_request req = {
	    .method = "GET",
	    .sink = sink,
	    .sink_data = userdata,
	    .timeout_ms = -1,
	};
	return sbx_engine_send(e, &req, NULL, err, "/containers/%s/archive?path=%s", id, path);
}

int sbx_moby_path_stat(sbx_engine *e, const char *id, const char *path, struct sbx_path_stat *ret,
		       struct sbx_error *err)
{
	_cleanup_free_ char *p = sbx_engine_path(e, "/containers/%s/archive?path=%s", id, path);
	_cleanup_free_ unsigned char *raw = NULL;
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_rest_response resp;
	struct sbx_rest_request req = {
	    .method = "HEAD",
	    .path = p,
	    .want_header = "X-Docker-Container-Path-Stat",
	};
	struct sbx_path_stat st = {0};
	size_t raw_len = 0;
	int r;

	if (!p)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = sbx_rest_call(e->rest, &req, &resp, err);
	if (r < 0)
		return r;
	if (resp.status == 404) {
		sbx_rest_response_release(&resp);
		return sbx_error_set_http(err, -ENOENT, 404, "no such path: %s", path);
	}
	r = sbx_rest_check(&resp, NULL, err);
	if (r >= 0 && !resp.header)
		r = sbx_error_set(err, -EPROTO, "engine sent no path stat for %s", path);
	/* Padded or not; the decoder NUL-terminates the JSON text. */
	if (r >= 0 &&
	    (sbx_base64_decode_lenient(resp.header, strlen(resp.header), &raw, &raw_len) < 0 ||
	     !(j = json_tokener_parse((const char *)raw))))
		r = sbx_error_set(err, -EPROTO, "engine sent a malformed path stat for %s", path);
	sbx_rest_response_release(&resp);
	if (r < 0)
		return r;
	st.name = dup_or_null(sbx_json_str(j, "name"));
	st.size = sbx_json_int(j, "size");
	st.mode = (uint32_t)sbx_json_int(j, "mode");
	/* Go's os.FileMode: ModeDir = 1<<31, ModeSymlink = 1<<27. */
	st.is_dir = (st.mode & (1u << 31)) != 0;
	st.is_symlink = (st.mode & (1u << 27)) != 0;
	st.link_target = dup_or_null(sbx_json_str(j, "linkTarget"));
	st.mtime = dup_or_null(sbx_json_str(j, "mtime"));
	*ret = st;
	return 0;
}

bool sbx_moby_id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	if (n < 1 || n > SBX_ENGINE_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z')))
			return false;
	return true;
}

int sbx_moby_reply_id(struct json_object *reply, char **ret_id, struct sbx_error *err)
{
	const char *id = sbx_json_str(reply, "Id");

	if (!id)
		return sbx_error_set(err, -EPROTO, "engine reply has no Id");
	if (!sbx_moby_id_ok(id))
		return sbx_error_set(err, -EPROTO,
				     "engine reply has an Id that is not 1 to %d lowercase letters "
				     "and digits",
				     SBX_ENGINE_ID_MAX);
	*ret_id = strdup(id);
	return *ret_id ? 0 : sbx_error_set(err, -ENOMEM, "out of memory");
}

int sbx_moby_network(sbx_engine *e, const char *id, const char *network, bool connect,
		     const char *container_key, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();

	if (!body)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	json_object_object_add(body, container_key, json_object_new_string(id));
	if (!connect)
		json_object_object_add(body, "Force", json_object_new_boolean(1));
	return sbx_engine_json(e, "POST", body, NULL, NULL, err, "/networks/%s/%s", network,
			       connect ? "connect" : "disconnect");
}
