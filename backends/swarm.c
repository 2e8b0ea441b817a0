/* SPDX-License-Identifier: MIT */
/*
 * The Docker Swarm backend (engine.type = swarm): sandboxes across a
 * cluster of Docker engines, behind the same vtable.
 *
 * A container here is a service of one replica, restart condition none,
 * made through the manager's API (engine.socket) with the limits, the
 * capabilities, the init, the user and the labels the docker backend gives
 * a container; its id is the service's id. It is made with 0 replicas
 * (created, not started, as a container is) and started by raising that to
 * 1 and waiting until its task runs. Everything container-level (exec, its
 * stream, files, stats, disk, inspect, kill) goes to the node that runs the
 * task, through that node's own Docker API and the docker backend's code
 * (swarm_nodes.c finds the node). An exec's id is "NODE.EXEC", so that its
 * start and its inspect find the node again.
 *
 * What a service cannot carry: no-new-privileges and the OCI runtime are a
 * node's settings (dockerd --no-new-privileges, --default-runtime), a
 * container's disk bound is none (sandbox.disk must be 0), and its swap
 * comes out as twice its memory: once the task runs, the node's container
 * is updated to memory + 0 swap, as the docker backend creates it. Network:
 * Swarm refuses "none"; a service without networks on a node started with
 * --bridge=none has only lo, which is what "none" asks.
 */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbx/clock.h"
#include "sbx/common.h"
#include "swarm-internal.h"

/* How long a start waits for the task to run when the engine's request
 * timeout is not set. */
#define SWARM_START_MS 60000

static int swarm_negotiate(sbx_engine *e, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	int r = sbx_docker_ops.negotiate(e, err);

	if (r < 0)
		return r;
	r = sbx_rest_json(e->rest, "GET", "/info", NULL, NULL, &j, err);
	if (r < 0)
		return r;
	if (!sbx_json_bool(sbx_json_path(j, "Swarm", NULL), "ControlAvailable"))
		return sbx_error_set(
		    err, -ENOTSUP,
		    "engine.socket %s is not a Swarm manager's (engine.type = swarm "
		    "needs a manager's socket)",
		    e->url);
	/* Another manager of this cluster is followed if this one goes. */
	return swarm_cluster_set(
	    e, sbx_json_str(sbx_json_path(sbx_json_path(j, "Swarm", NULL), "Cluster", NULL), "ID"),
	    err);
}

static int swarm_ping(sbx_engine *e, struct sbx_error *err)
{
	return sbx_docker_ops.ping(e, err);
}

/* The storage of the manager's own engine; a service carries no disk
 * bound, whatever a node's storage could do. */
static int swarm_storage(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err)
{
	int r = sbx_moby_storage(e, ret, err);

	if (r >= 0)
		ret->size_bound = false;
	return r;
}

/* ---- a node's side ---- */

/* The node that runs service ID, negotiated, and the container's id there. */
static int on_node(sbx_engine *e, const char *id, sbx_engine **ret_node,
		   char cid[SBX_ENGINE_ID_MAX + 1], struct sbx_error *err)
{
	int r = swarm_place(e, id, ret_node, cid, err);

	return r < 0 ? r : sbx_engine_negotiate(*ret_node, err);
}

/* "NODE.EXEC" split: the node's handle (known since the exec's create) and
 * the exec's id there. */
static int exec_node(sbx_engine *e, const char *exec_id, sbx_engine **ret_node,
		     const char **ret_exec, struct sbx_error *err)
{
	const char *dot = strchr(exec_id, '.');
	char node[SBX_ENGINE_ID_MAX + 1];
	size_t n = dot ? (size_t)(dot - exec_id) : 0;
	int r;

	if (!dot || n == 0 || n > SBX_ENGINE_ID_MAX || !sbx_moby_id_ok(dot + 1))
		return sbx_error_set(err, -EINVAL, "not an exec of this cluster: %.80s", exec_id);
	memcpy(node, exec_id, n);
	node[n] = '\0';
	r = swarm_node_known(e, node, ret_node, err);
	if (r < 0)
		return r;
	*ret_exec = dot + 1;
	return sbx_engine_negotiate(*ret_node, err);
}

/* ---- images: on every node ---- */

/* Calls FN(node, its id, UD, err) on every node up, in the manager's
 * order, until one returns other than 0: that value (an error prefixed with
 * the node's id); 0 when every one returned 0; -EHOSTDOWN when no node is
 * up. */
static int each_node(sbx_engine *e,
		     int (*fn)(sbx_engine *node, const char *id, void *ud, struct sbx_error *err),
		     void *ud, struct sbx_error *err)
{
	sbx_engine **nodes = NULL;
	char **ids = NULL;
	size_t n = 0;
	int r = swarm_nodes(e, &nodes, &ids, &n, err);

	if (r >= 0 && n == 0)
		r = sbx_error_set(err, -EHOSTDOWN, "the cluster has no node up");
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = fn(nodes[i], ids[i], ud, err);
		if (r < 0)
			sbx_error_prefix(err, "node %s", ids[i]);
	}
	free(nodes);
	sbx_strv_free(ids);
	return r;
}

struct image_job {
	const char *ref, *tar_path, *containerfile;
	const struct sbx_buf *tar;
	const char *const *build_args;
	struct sbx_buf *log;
	size_t removed;
	char lacking[SBX_ENGINE_ID_MAX + 1]; /* lacks_image: the node without it */
};

/* 1 (stop) when the node lacks the image, named in the job. */
static int lacks_image(sbx_engine *node, const char *id, void *ud, struct sbx_error *err)
{
	struct image_job *job = ud;
	int r = sbx_image_exists(node, job->ref, err);

	if (r == 0)
		snprintf(job->lacking, sizeof(job->lacking), "%s", id);
	return r < 0 ? r : r == 0;
}

/* Present only when on every node: the cluster runs a task anywhere. */
static int swarm_image_exists(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	struct image_job job = {.ref = ref};
	int r = each_node(e, lacks_image, &job, err);

	if (r == 1) /* said for a caller that tells its own error with it */
		sbx_error_set(err, -ENOENT, "node %s has no image %s", job.lacking, ref);
	return r < 0 ? r : r == 0;
}

static int build_on(sbx_engine *node, const char *id, void *ud, struct sbx_error *err)
{
	struct image_job *job = ud;
	int r = sbx_engine_negotiate(node, err);

	return r < 0 ? r
		     : node->ops->image_build(node, job->tar, job->containerfile, job->ref,
					      job->build_args, job->log, err);
}

static int swarm_image_build(sbx_engine *e, const struct sbx_buf *tar, const char *containerfile,
			     const char *tag, const char *const *build_args, struct sbx_buf *log,
			     struct sbx_error *err)
{
	struct image_job job = {.ref = tag,
				.tar = tar,
				.containerfile = containerfile,
				.build_args = build_args,
				.log = log};
	return each_node(e, build_on, &job, err);
}

static int import_on(sbx_engine *node, const char *id, void *ud, struct sbx_error *err)
{
	struct image_job *job = ud;

	return sbx_image_import(node, job->tar_path, job->ref, err);
}

static int swarm_image_import(sbx_engine *e, const char *tar_path, const char *ref,
			      struct sbx_error *err)
{
	struct image_job job = {.ref = ref, .tar_path = tar_path};
	return each_node(e, import_on, &job, err);
}

static int remove_on(sbx_engine *node, const char *id, void *ud, struct sbx_error *err)
{
	struct image_job *job = ud;
	int r = sbx_image_remove(node, job->ref, err);

	if (r == -ENOENT) {
		sbx_error_clear(err);
		return 0;
	}
	job->removed += r >= 0;
	return r < 0 ? r : 0;
}

/* Removed from every node: -ENOENT only when no node had it. */
static int swarm_image_remove(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	struct image_job job = {.ref = ref};
	int r = each_node(e, remove_on, &job, err);

	if (r >= 0 && job.removed == 0)
		return sbx_error_set(err, -ENOENT, "no such image: %s", ref);
	return r;
}

/* ---- services ---- */

/* "size=16m,mode=1777" as a tmpfs mount's TmpfsOptions. */
static int tmpfs_options(const char *opts, struct json_object *o)
{
	_cleanup_free_ char *copy = strdup(opts ? opts : "");
	char *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *end = NULL;
		if (strncmp(t, "size=", 5) == 0) {
			unsigned long long v = strtoull(t + 5, &end, 10);
			unsigned long long mul = 1;
			if (end == t + 5)
				return -EINVAL;
			switch (*end) {
			case 'k':
				mul = 1ULL << 10;
				break;
			case 'm':
				mul = 1ULL << 20;
				break;
			case 'g':
				mul = 1ULL << 30;
				break;
			case '\0':
				break;
			default:
				return -EINVAL;
			}
			if (*end && end[1])
				return -EINVAL;
			json_object_object_add(o, "SizeBytes",
					       json_object_new_int64((int64_t)(v * mul)));
		} else if (strncmp(t, "mode=", 5) == 0) {
			long mode = strtol(t + 5, &end, 8);
			if (end == t + 5 || *end || mode < 0 || mode > 07777)
				return -EINVAL;
			json_object_object_add(o, "Mode", json_object_new_int64(mode));
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

static struct json_object *service_mounts(const struct sbx_container_spec *spec, int *ret)
{
	struct json_object *mounts = json_object_new_array();

	*ret = 0;
	for (size_t i = 0; i < spec->n_tmpfs; i++) {
		struct json_object *m = json_object_new_object(), *o = json_object_new_object();
		json_object_object_add(m, "Type", json_object_new_string("tmpfs"));
		json_object_object_add(m, "Target", json_object_new_string(spec->tmpfs[i].key));
		if (tmpfs_options(spec->tmpfs[i].value, o) < 0)
			*ret = -EINVAL;
		json_object_object_add(m, "TmpfsOptions", o);
		json_object_array_add(mounts, m);
	}
	for (const char *const *p = spec->writable_paths; p && *p; p++) {
		struct json_object *m = json_object_new_object();
		json_object_object_add(m, "Type", json_object_new_string("volume"));
		json_object_object_add(m, "Target", json_object_new_string(*p));
		json_object_array_add(mounts, m);
	}
	return mounts;
}

/* What a service cannot carry at all: -ENOTSUP naming the setting. */
static int carried(const struct sbx_container_spec *spec, struct sbx_error *err)
{
	if (spec->disk_bytes > 0)
		return sbx_error_set(err, -ENOTSUP,
				     "swarm: a service carries no disk bound: set sandbox.disk = 0 "
				     "(and bound the nodes' storage)");
	if (spec->runtime && *spec->runtime)
		return sbx_error_set(err, -ENOTSUP,
				     "swarm: a service carries no OCI runtime: make %s each node's "
				     "default runtime and leave sandbox.runtime empty",
				     spec->runtime);
	return 0;
}

static int swarm_container_create(sbx_engine *e, const struct sbx_container_spec *spec,
				  char **ret_id, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();
	_cleanup_json_ struct json_object *j = NULL;
	struct json_object *task = json_object_new_object(), *cs = json_object_new_object();
	struct json_object *limits = json_object_new_object(), *res = json_object_new_object();
	struct json_object *restart = json_object_new_object(), *mode = json_object_new_object();
	struct json_object *replicated = json_object_new_object();
	const char *id;
	int r = 0;

	if (!body || !task || !cs || !limits || !res || !restart || !mode || !replicated) {
		json_object_put(task);
		json_object_put(cs);
		json_object_put(limits);
		json_object_put(res);
		json_object_put(restart);
		json_object_put(mode);
		json_object_put(replicated);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	json_object_object_add(task, "ContainerSpec", cs);
	json_object_object_add(res, "Limits", limits);
	json_object_object_add(task, "Resources", res);
	json_object_object_add(task, "RestartPolicy", restart);
	json_object_object_add(mode, "Replicated", replicated);
	json_object_object_add(body, "TaskTemplate", task);
	json_object_object_add(body, "Mode", mode);

	/* "none": no network at all (Swarm refuses "none" by name; a node with
	 * --bridge=none then gives only lo). Another (host, an overlay the
	 * operator made) is asked for by name. */
	if (spec->network_mode && *spec->network_mode && strcmp(spec->network_mode, "none") != 0) {
		struct json_object *nets = json_object_new_array(), *net = json_object_new_object();
		json_object_object_add(net, "Target", json_object_new_string(spec->network_mode));
		json_object_array_add(nets, net);
		json_object_object_add(task, "Networks", nets);
	}
	r = carried(spec, err);
	if (r < 0)
		return r;
	/* A service of an image a node lacks is accepted, and its task then
	 * fails there: the image must be on every node. */
	r = swarm_image_exists(e, spec->image, err);
	if (r == 0 && err) /* err names the node that lacks it: as the engine's 404 */
		err->http_status = 404;
	if (r == 0)
		r = -ENOENT;
	if (r < 0)
		return r;
	r = 0;

	if (spec->name)
		json_object_object_add(body, "Name", json_object_new_string(spec->name));
	if (spec->n_labels) {
		json_object_object_add(body, "Labels",
				       sbx_json_labels(spec->labels, spec->n_labels));
		json_object_object_add(cs, "Labels", sbx_json_labels(spec->labels, spec->n_labels));
	}
	json_object_object_add(cs, "Image", json_object_new_string(spec->image));
	if (spec->cmd)
		json_object_object_add(cs, "Args", sbx_json_strv(spec->cmd));
	if (spec->env)
		json_object_object_add(cs, "Env", sbx_json_strv(spec->env));
	if (spec->workdir)
		json_object_object_add(cs, "Dir", json_object_new_string(spec->workdir));
	if (spec->user)
		json_object_object_add(cs, "User", json_object_new_string(spec->user));
	if (spec->read_only_rootfs)
		json_object_object_add(cs, "ReadOnly", json_object_new_boolean(1));
	if (spec->init)
		json_object_object_add(cs, "Init", json_object_new_boolean(1));
	if (spec->cap_drop)
		json_object_object_add(cs, "CapabilityDrop", sbx_json_strv(spec->cap_drop));
	if (spec->n_ulimits)
		json_object_object_add(
		    cs, "Ulimits",
		    sbx_json_ulimits(spec->ulimits, spec->n_ulimits, "Name", "Soft", "Hard"));
	if (spec->n_tmpfs || spec->writable_paths)
		json_object_object_add(cs, "Mounts", service_mounts(spec, &r));
	if (r < 0)
		return sbx_error_set(err, r,
				     "swarm: a tmpfs option it cannot carry (size=N[kmg], "
				     "mode=OCTAL)");
	if (spec->memory_bytes > 0)
		json_object_object_add(limits, "MemoryBytes",
				       json_object_new_int64(spec->memory_bytes));
	if (spec->nano_cpus > 0)
		json_object_object_add(limits, "NanoCPUs", json_object_new_int64(spec->nano_cpus));
	if (spec->pids_limit > 0)
		json_object_object_add(limits, "Pids", json_object_new_int64(spec->pids_limit));
	json_object_object_add(restart, "Condition", json_object_new_string("none"));
	/* Created, not started: 0 replicas until container_start. */
	json_object_object_add(replicated, "Replicas", json_object_new_int64(0));

	r = sbx_engine_json(e, "POST", body, NULL, &j, err, "/services/create");
	if (r < 0)
		return r;
	id = sbx_json_str(j, "ID");
	if (!sbx_moby_id_ok(id))
		return sbx_error_set(err, -EPROTO,
				     "the manager's service create reply has no ID of 1 to %d "
				     "lowercase letters and digits",
				     SBX_ENGINE_ID_MAX);
	*ret_id = strdup(id);
	return *ret_id ? 0 : sbx_error_set(err, -ENOMEM, "out of memory");
}

/* The service's spec and version; -ENOENT when there is none. */
static int service_get(sbx_engine *e, const char *id, struct json_object **ret,
		       struct sbx_error *err)
{
	int r = sbx_engine_json(e, "GET", NULL, NULL, ret, err, "/services/%s", id);

	if (r == -ENOENT)
		sbx_error_set_http(err, -ENOENT, 404, "no such service: %s", id);
	return r;
}

/* Its replicas set to N (the manager's spec as it is, but for that). */
static int service_scale(sbx_engine *e, const char *id, struct json_object *svc, int n,
			 struct sbx_error *err)
{
	struct json_object *spec = sbx_json_path(svc, "Spec", NULL);
	struct json_object *rep =
	    sbx_json_path(sbx_json_path(spec, "Mode", NULL), "Replicated", NULL);
	int64_t version = sbx_json_int(sbx_json_path(svc, "Version", NULL), "Index");

	if (!rep)
		return sbx_error_set(err, -EPROTO, "service %s is not a replicated service", id);
	json_object_object_add(rep, "Replicas", json_object_new_int64(n));
	if (version < 0 || version > INT_MAX) /* the path's %d */
		return sbx_error_set(err, -EPROTO, "service %s has version %lld", id,
				     (long long)version);
	return sbx_engine_json(e, "POST", spec, NULL, NULL, err, "/services/%s/update?version=%d",
			       id, (int)version);
}

/* After the task runs: its container's swap as the docker backend sets it
 * (none beyond memory), which a service cannot say. */
static int no_swap(sbx_engine *node, const char *cid, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();
	struct sbx_container_info info = {0};
	int r = node->ops->container_inspect(node, cid, &info, err);

	if (r < 0)
		return r;
	if (info.memory_bytes > 0) {
		json_object_object_add(body, "Memory", json_object_new_int64(info.memory_bytes));
		json_object_object_add(body, "MemorySwap",
				       json_object_new_int64(info.memory_bytes));
		r = sbx_engine_json(node, "POST", body, NULL, NULL, err, "/containers/%s/update",
				    cid);
	}
	sbx_container_info_release(&info);
	/* One that ended meanwhile (a command that ends at once) swaps no more. */
	if (r < 0 && node->ops->container_inspect(node, cid, &info, NULL) >= 0) {
		if (!info.running) {
			sbx_error_clear(err);
			r = 0;
		}
		sbx_container_info_release(&info);
	}
	return r;
}

/* Whether the interface names in LIST (one per line) are lo and the
 * kernel's fallback tunnels that every network namespace may have (down,
 * without addresses) only. */
static bool only_lo(const char *list)
{
	static const char *const fallback[] = {"lo",   "tunl0",	  "sit0",    "ip6tnl0", "ip6gre0",
					       "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0"};
	bool saw_lo = false;

	while (*list) {
		size_t n = strcspn(list, "\n");
		bool known = false;

		for (size_t i = 0; i < SBX_ARRAY_SIZE(fallback) && !known; i++)
			known = strlen(fallback[i]) == n && strncmp(list, fallback[i], n) == 0;
		if (!known)
			return false;
		saw_lo |= n == 2 && strncmp(list, "lo", 2) == 0;
		list += n + (list[n] == '\n');
	}
	return saw_lo;
}

/* What a node's check runs in a container there: its PID 1's status, then
 * its interfaces. */
static const char *const look_argv[] = {
    "sh", "-c", "cat /proc/1/status; echo '@@net'; ls /sys/class/net", NULL};

/* The verdict on a look's output OUT from a container on node NODE_ID that
 * asked for neither no-new-privileges nor a network: that its engine gives
 * containers no-new-privileges (dockerd --no-new-privileges: PID 1 says
 * NoNewPrivs 1) and, for sandboxes asked to have no network (WANT_NONE),
 * no interface but lo (dockerd --bridge=none: else Swarm puts a service
 * on the node's default bridge). 0, or -EPERM naming the node and the
 * flag. */
static int look_verdict(const char *out, const char *node_id, bool want_none, struct sbx_error *err)
{
	const char *net = strstr(out, "\n@@net\n");

	if (!strstr(out, "\nNoNewPrivs:\t1\n"))
		return sbx_error_set(err, -EPERM,
				     "node %s runs containers without no-new-privileges, which a "
				     "service cannot ask for: start its dockerd with "
				     "--no-new-privileges",
				     node_id);
	if (want_none && (!net || !only_lo(net + 7)))
		return sbx_error_set(err, -EPERM,
				     "node %s gives a sandbox asked to have no network an "
				     "interface besides lo (a service cannot ask for network "
				     "none): start its dockerd with --bridge=none",
				     node_id);
	return 0;
}

/* The same checked on a node the first time one of its sandboxes runs,
 * from inside it (a node that joined after sbx_engine_verify). A node is
 * taken as verified only after a check with WANT_NONE (both settings are
 * the node's). */
static int node_verify(sbx_engine *e, const char *id, sbx_engine *node, const char *node_id,
		       bool want_none, struct sbx_error *err)
{
	struct sbx_exec_spec spec = {.argv = look_argv, .timeout_ms = 30000, .output_cap = 16384};
	struct sbx_exec_result res = {0};
	int r;

	if (swarm_node_verified(e, node, false))
		return 0;
	/* A look that fails while the container ends (an OOM kill takes the
	 * look with it) is tried again; one whose container has ended is left
	 * for the next sandbox on the node to verify. */
	for (int tries = 0;; tries++) {
		struct sbx_container_info ci = {0};
		char cid[SBX_ENGINE_ID_MAX + 1];
		sbx_engine *where;
		bool runs;

		r = sbx_exec(e, id, &spec, &res, err);
		if (r >= 0 && res.exit_code == 0 && res.out.data)
			break;
		if (r >= 0)
			sbx_exec_result_release(&res);
		memset(&res, 0, sizeof(res));
		runs = on_node(e, id, &where, cid, NULL) >= 0 &&
		       where->ops->container_inspect(where, cid, &ci, NULL) >= 0 && ci.running;
		sbx_container_info_release(&ci);
		if (!runs) {
			sbx_error_clear(err);
			return 0;
		}
		if (tries == 4)
			return r < 0
				   ? r
				   : sbx_error_set(err, -EIO,
						   "node %s: cannot read a sandbox's PID 1 status",
						   node_id);
		nanosleep(&(struct timespec){.tv_nsec = 200 * 1000000L}, NULL);
	}
	r = look_verdict(res.out.data, node_id, want_none, err);
	if (r >= 0 && want_none)
		swarm_node_verified(e, node, true);
	sbx_exec_result_release(&res);
	return r;
}

int swarm_node_check(sbx_engine *node, const char *node_id, const struct sbx_container_spec *check,
		     bool want_none, struct sbx_error *err)
{
	static const struct sbx_kv mark = {SBX_SWARM_CHECK_LABEL, "1"};
	struct sbx_exec_spec xs = {.argv = look_argv, .timeout_ms = 30000, .output_cap = 16384};
	struct sbx_exec_result res = {0};
	struct sbx_container_summary *left = NULL;
	_cleanup_free_ char *cid = NULL;
	size_t n_left = 0;
	int r;

	/* What a check cut short (a server killed meanwhile) left behind:
	 * ended (its sleep is 60 s), never one that runs, which may be
	 * another server's check in progress. */
	if (sbx_container_list(node, &mark, 1, &left, &n_left, NULL) >= 0) {
		for (size_t i = 0; i < n_left; i++)
			if (!left[i].running)
				sbx_container_remove(node, left[i].id, NULL);
		sbx_container_list_free(left, n_left);
	}
	r = sbx_container_create(node, check, &cid, err);
	if (r >= 0)
		r = sbx_container_start(node, cid, err);
	if (r >= 0)
		r = sbx_exec(node, cid, &xs, &res, err);
	if (r >= 0) {
		r = res.exit_code != 0 || !res.out.data
			? sbx_error_set(err, -EIO,
					"node %s: a check container cannot read its PID 1's "
					"status (exit %d)",
					node_id, res.exit_code)
			: look_verdict(res.out.data, node_id, want_none, err);
		sbx_exec_result_release(&res);
	}
	if (cid)
		sbx_container_remove(node, cid, NULL);
	return r;
}

static void report_line(sbx_report_fn report, void *userdata, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report_line(sbx_report_fn report, void *userdata, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!report)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	report(userdata, line);
}

/* Most nodes checked at once (sbx_engine_verify at start and --check). */
#define SWARM_CHECKS_AT_ONCE 8

/* The nodes of one sbx_engine_verify, checked by up to
 * SWARM_CHECKS_AT_ONCE threads: each takes the next node until none is
 * left, its verdict in rs[i] and errs[i]. */
struct node_checks {
	const struct sbx_container_spec *spec, *check;
	bool want_none;
	sbx_engine **nodes;
	char **ids;
	size_t n;
	atomic_size_t next;
	int *rs;
	struct sbx_error *errs;
};

static void *check_nodes(void *arg)
{
	struct node_checks *c = arg;

	for (size_t i; (i = atomic_fetch_add(&c->next, 1)) < c->n;) {
		struct sbx_error *nerr = &c->errs[i];
		int r = sbx_engine_negotiate(c->nodes[i], nerr);

		if (r >= 0)
			r = sbx_image_exists(c->nodes[i], c->spec->image, nerr);
		if (r == 0)
			r = sbx_error_set(nerr, -ENOENT, "node %s has no image %s", c->ids[i],
					  c->spec->image);
		if (r >= 0)
			r = swarm_node_check(c->nodes[i], c->ids[i], c->check, c->want_none, nerr);
		c->rs[i] = r;
	}
	return NULL;
}

/* Every node up, checked as a sandbox there would need: reachable at its
 * label, the image, and with a container of its own (swarm_node_check)
 * made as a sandbox's is, but asking for neither no-new-privileges nor a
 * network, so that what it gets is the node's doing. Nodes are checked
 * SWARM_CHECKS_AT_ONCE at a time, reported in the manager's order. */
static int swarm_verify(sbx_engine *e, const struct sbx_container_spec *spec, sbx_report_fn report,
			void *userdata, struct sbx_error *err)
{
	static const char *const wait[] = {"sleep", "60", NULL};
	static const struct sbx_kv mark = {SBX_SWARM_CHECK_LABEL, "1"};
	const bool want_none =
	    !spec->network_mode || !*spec->network_mode || strcmp(spec->network_mode, "none") == 0;
	const struct sbx_container_spec check = {.image = spec->image,
						 .cmd = wait,
						 .labels = &mark,
						 .n_labels = 1,
						 .user = spec->user,
						 .cap_drop = spec->cap_drop,
						 .init = spec->init};
	struct node_checks c = {.spec = spec, .check = &check, .want_none = want_none};
	pthread_t threads[SWARM_CHECKS_AT_ONCE - 1];
	size_t started = 0;
	int r = carried(spec, err);

	if (r >= 0)
		r = swarm_nodes(e, &c.nodes, &c.ids, &c.n, err);
	if (r >= 0 && c.n == 0)
		r = sbx_error_set(err, -EHOSTDOWN, "the cluster has no node up");
	if (r >= 0 &&
	    (!(c.rs = calloc(c.n, sizeof(*c.rs))) || !(c.errs = calloc(c.n, sizeof(*c.errs)))))
		r = sbx_error_set(err, -ENOMEM, "out of memory");
	if (r < 0) {
		report_line(report, userdata, "%s", err ? err->msg : "cannot be checked");
		goto out;
	}
	atomic_init(&c.next, 0);
	/* This thread checks too: a thread that cannot start leaves its share
	 * to the others. */
	while (started < SBX_ARRAY_SIZE(threads) && started + 1 < c.n &&
	       pthread_create(&threads[started], NULL, check_nodes, &c) == 0)
		started++;
	check_nodes(&c);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	for (size_t i = 0; i < c.n; i++) {
		if (c.rs[i] >= 0 && want_none)
			swarm_node_verified(e, c.nodes[i], true);
		if (c.rs[i] >= 0)
			report_line(report, userdata,
				    "node %s (%s): image present, no-new-privileges%s", c.ids[i],
				    sbx_engine_url(c.nodes[i]),
				    want_none ? ", no network but lo" : "");
		else
			report_line(report, userdata, "node %s (%s): %s", c.ids[i],
				    sbx_engine_url(c.nodes[i]), c.errs[i].msg);
		if (c.rs[i] < 0 && r >= 0) {
			r = c.rs[i];
			if (err)
				*err = c.errs[i];
		}
	}
out:
	free(c.rs);
	free(c.errs);
	free(c.nodes);
	sbx_strv_free(c.ids);
	return r;
}

static bool task_ended(const char *state)
{
	static const char *const ended[] = {"complete", "failed",   "shutdown",
					    "rejected", "orphaned", "remove"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(ended); i++)
		if (strcmp(state, ended[i]) == 0)
			return true;
	return false;
}

/* Waits until ID's task runs, then remembers where (WANT_NONE: the
 * service asked for no network, node_verify). */
static int wait_running(sbx_engine *e, const char *id, bool want_none, struct sbx_error *err)
{
	int64_t deadline =
	    sbx_monotonic_ms() + (e->timeout_ms > 0 ? e->timeout_ms : SWARM_START_MS);
	struct swarm_task t = {0};
	long pause_ms = 20;

	for (;;) {
		bool exists;
		int r = swarm_task_of(e, id, &t, &exists, err);

		if (r < 0 && r != -ENOENT)
			return r;
		if (r == -ENOENT && !exists)
			return r;
		/* Started: it runs, or it ran and ended already (a command
		 * that ends at once), as a container's start says. */
		if (r >= 0 && t.container[0] &&
		    (strcmp(t.state, "running") == 0 || task_ended(t.state))) {
			sbx_engine *node;
			char cid[SBX_ENGINE_ID_MAX + 1];
			r = swarm_place_set(e, id, t.node, t.container, err);
			if (r >= 0)
				r = on_node(e, id, &node, cid, err);
			if (r >= 0 && strcmp(t.state, "running") == 0)
				r = no_swap(node, cid, err);
			if (r >= 0 && strcmp(t.state, "running") == 0)
				r = node_verify(e, id, node, t.node, want_none, err);
			if (r < 0)
				sbx_error_prefix(err, "service %s on node %s", id, t.node);
			return r;
		}
		if (r >= 0 && task_ended(t.state))
			return sbx_error_set(err, -EIO, "service %s: its task ended (%s%s%s)", id,
					     t.state, t.message[0] ? ": " : "", t.message);
		if (sbx_monotonic_ms() >= deadline)
			return sbx_error_set(
			    err, -ETIMEDOUT, "service %s: its task did not run in time (%s%s%s)",
			    id, r >= 0 ? t.state : "no task", r >= 0 && t.message[0] ? ": " : "",
			    r >= 0 ? t.message : "");
		sbx_error_clear(err);
		nanosleep(&(struct timespec){.tv_nsec = pause_ms * 1000000L}, NULL);
		if (pause_ms < 200)
			pause_ms *= 2;
	}
}

static int swarm_container_start(sbx_engine *e, const char *id, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *svc = NULL;
	struct json_object *rep;
	struct swarm_task t;
	bool exists, want_none;
	int r = service_get(e, id, &svc, err);

	if (r < 0)
		return r;
	rep = sbx_json_path(sbx_json_path(sbx_json_path(svc, "Spec", NULL), "Mode", NULL),
			    "Replicated", NULL);
	want_none =
	    !sbx_json_path(sbx_json_path(sbx_json_path(svc, "Spec", NULL), "TaskTemplate", NULL),
			   "Networks", NULL);
	if (sbx_json_int(rep, "Replicas") == 0) {
		/* The manager may bump the service's version meanwhile (its
		 * allocator after the create): asked again, a few times. */
		r = service_scale(e, id, svc, 1, err);
		for (int tries = 0;
		     r == -EIO && err && strstr(err->msg, "out of sequence") && tries < 5;
		     tries++) {
			json_object_put(svc);
			svc = NULL;
			nanosleep(&(struct timespec){.tv_nsec = 50 * 1000000L}, NULL);
			sbx_error_clear(err);
			r = service_get(e, id, &svc, err);
			if (r >= 0)
				r = service_scale(e, id, svc, 1, err);
		}
		return r < 0 ? r : wait_running(e, id, want_none, err);
	}
	r = swarm_task_of(e, id, &t, &exists, err);
	if (r < 0)
		return r;
	if (task_ended(t.state) && t.container[0]) {
		/* Stopped, as a container is: started again where it is. */
		sbx_engine *node;
		char cid[SBX_ENGINE_ID_MAX + 1];
		r = on_node(e, id, &node, cid, err);
		return r < 0 ? r : node->ops->container_start(node, cid, err);
	}
	return wait_running(e, id, want_none, err);
}

static int swarm_container_stop(sbx_engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	if (r == -EBUSY) { /* no container: nothing runs */
		sbx_error_clear(err);
		return 0;
	}
	return r < 0 ? r : node->ops->container_stop(node, cid, timeout_s, err);
}

static int swarm_container_kill(sbx_engine *e, const char *id, const char *signal,
				struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->container_kill(node, cid, signal, err);
}

/* The container on its node first (the node's agent would remove it only
 * later), then the service. */
static int swarm_container_remove(sbx_engine *e, const char *id, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, NULL);

	if (r >= 0)
		node->ops->container_remove(node, cid, NULL);
	/* Kept a while, so that its DESTROY event still finds the service. */
	swarm_place_removed(e, id);
	r = sbx_engine_json(e, "DELETE", NULL, NULL, NULL, err, "/services/%s", id);
	if (r == -ENOENT)
		sbx_error_set_http(err, -ENOENT, 404, "no such service: %s", id);
	return r;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* An inspect from the service alone: before its task has a container
 * ("created"), after it ended where its container cannot be reached, or
 * lost with its node (LOST: why, then "lost"). */
static int info_of_service(struct json_object *svc, const char *id, const struct swarm_task *t,
			   const char *lost, struct sbx_container_info *info)
{
	struct json_object *ts =
	    sbx_json_path(sbx_json_path(svc, "Spec", NULL), "TaskTemplate", NULL);
	struct json_object *cs = sbx_json_path(ts, "ContainerSpec", NULL);
	struct json_object *limits =
	    sbx_json_path(sbx_json_path(ts, "Resources", NULL), "Limits", NULL);
	bool ended = t && task_ended(t->state);

	memset(info, 0, sizeof(*info));
	info->id = strdup(id);
	info->name = dup_or_null(sbx_json_str(sbx_json_path(svc, "Spec", NULL), "Name"));
	info->image = dup_or_null(sbx_json_str(cs, "Image"));
	info->status = strdup(lost ? "lost" : ended ? "exited" : "created");
	info->exit_code = ended ? t->exit_code : 0;
	if (t && t->node[0] && !(info->node = strdup(t->node)))
		goto fail;
	if (lost && !(info->lost = strdup(lost)))
		goto fail;
	info->memory_bytes = sbx_json_int(limits, "MemoryBytes");
	info->nano_cpus = sbx_json_int(limits, "NanoCPUs");
	info->pids_limit = sbx_json_int(limits, "Pids");
	info->read_only_rootfs = sbx_json_bool(cs, "ReadOnly");
	info->network_mode = strdup("none");
	info->init = sbx_json_bool(cs, "Init");
	info->cap_add = sbx_json_to_strv(sbx_json_path(cs, "CapabilityAdd", NULL));
	info->cap_drop = sbx_json_to_strv(sbx_json_path(cs, "CapabilityDrop", NULL));
	if (!info->id || !info->status || !info->network_mode || !info->cap_add ||
	    !info->cap_drop || sbx_moby_info_labels(sbx_json_path(cs, "Labels", NULL), info) < 0)
		goto fail;
	return 0;
fail:
	sbx_container_info_release(info);
	return -ENOMEM;
}

static int swarm_container_inspect(sbx_engine *e, const char *id, struct sbx_container_info *ret,
				   struct sbx_error *err)
{
	_cleanup_json_ struct json_object *svc = NULL;
	struct swarm_task t;
	sbx_engine *node = NULL;
	bool exists, has_task;
	int r = service_get(e, id, &svc, err);

	if (r < 0)
		return r;
	r = swarm_task_of(e, id, &t, &exists, err);
	if (r < 0 && r != -ENOENT)
		return r;
	has_task = r >= 0;
	sbx_error_clear(err);
	if (has_task && t.node[0]) {
		/* Its node down: the sandbox is lost with it, said so. */
		struct sbx_error nerr = SBX_ERROR_INIT;
		r = swarm_node_engine(e, t.node, &node, &nerr);
		if (r == -EHOSTDOWN) {
			r = info_of_service(svc, id, &t, nerr.msg, ret);
			return r < 0 ? sbx_error_set(err, r, "out of memory") : 0;
		}
		if (r < 0) { /* cannot be told now: never a death */
			if (err)
				*err = nerr;
			return r;
		}
	}
	if (has_task && t.container[0] && node) {
		/* The node's word about the container its task names. */
		struct sbx_container_info info = {0};
		r = sbx_engine_negotiate(node, err);
		if (r >= 0)
			r = node->ops->container_inspect(node, t.container, &info, err);
		if (r == -ENOENT)
			return sbx_error_set_http(
			    err, -ENOENT, 404, "service %s: its container was removed from node %s",
			    id, t.node);
		if (r < 0)
			return r;
		/* The sandbox's id and name are the service's. */
		free(info.id);
		free(info.name);
		info.id = strdup(id);
		info.name = dup_or_null(sbx_json_str(sbx_json_path(svc, "Spec", NULL), "Name"));
		info.node = strdup(t.node);
		if (!info.id || !info.node) {
			sbx_container_info_release(&info);
			return sbx_error_set(err, -ENOMEM, "out of memory");
		}
		*ret = info;
		return 0;
	}
	r = info_of_service(svc, id, has_task ? &t : NULL, NULL, ret);
	return r < 0 ? sbx_error_set(err, r, "out of memory") : 0;
}

/* Whether node NODE is down, as the node list NODES says. */
static bool node_down(struct json_object *nodes, const char *node)
{
	for (size_t i = 0; i < json_object_array_length(nodes); i++) {
		struct json_object *nj = json_object_array_get_idx(nodes, i);
		const char *id = sbx_json_str(nj, "ID");
		const char *state = sbx_json_str(sbx_json_path(nj, "Status", NULL), "State");

		if (id && strcmp(id, node) == 0)
			return state && strcmp(state, "down") == 0;
	}
	return true; /* no longer in the cluster */
}

/* The state of the newest task of service ID in the task list TASKS, its
 * node and its container in *RET_NODE and *RET_CONTAINER (NULL when none). */
static const char *state_in(struct json_object *tasks, const char *id, const char **ret_node,
			    const char **ret_container)
{
	const char *state = NULL;
	int64_t best = -1;

	for (size_t i = 0; i < json_object_array_length(tasks); i++) {
		struct json_object *t = json_object_array_get_idx(tasks, i);
		int64_t index = sbx_json_int(sbx_json_path(t, "Version", NULL), "Index");
		const char *sid = sbx_json_str(t, "ServiceID");

		if (sid && strcmp(sid, id) == 0 && index > best) {
			const char *node = sbx_json_str(t, "NodeID");
			const char *cid =
			    sbx_json_str(sbx_json_path(sbx_json_path(t, "Status", NULL),
						       "ContainerStatus", NULL),
					 "ContainerID");
			best = index;
			state = sbx_json_str(sbx_json_path(t, "Status", NULL), "State");
			*ret_node = node && *node ? node : NULL;
			*ret_container = cid && *cid ? cid : NULL;
		}
	}
	return state;
}

/* A node's own list of the containers with the labels asked for (the node
 * is the truth about its containers: the manager learns a death later). */
struct node_view {
	const char *node;
	struct sbx_container_summary *cs;
	size_t n;
	bool ok;
};

/* The container CID on NODE as the node lists it, or NULL (not listed, or
 * the node cannot say: *RET_KNOWN false). VIEWS[0..*N_VIEWS) is filled as
 * nodes are asked, once each. */
static const struct sbx_container_summary *
node_container(sbx_engine *e, const char *node, const char *cid, const struct sbx_kv *labels,
	       size_t n_labels, struct node_view *views, size_t *n_views, size_t max_views,
	       bool *ret_known)
{
	struct node_view *v = NULL;

	for (size_t i = 0; i < *n_views && !v; i++)
		if (strcmp(views[i].node, node) == 0)
			v = &views[i];
	if (!v && *n_views < max_views) {
		sbx_engine *ne = NULL;
		v = &views[(*n_views)++];
		*v = (struct node_view){.node = node};
		v->ok = swarm_node_engine(e, node, &ne, NULL) >= 0 &&
			sbx_container_list(ne, labels, n_labels, &v->cs, &v->n, NULL) >= 0;
	}
	*ret_known = v && v->ok;
	for (size_t i = 0; v && v->ok && i < v->n; i++)
		if (strcmp(v->cs[i].id, cid) == 0)
			return &v->cs[i];
	return NULL;
}

static int swarm_container_list(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
				struct sbx_container_summary **ret_list, size_t *ret_n,
				struct sbx_error *err)
{
	_cleanup_json_ struct json_object *filters = sbx_json_label_filters(labels, n_labels);
	_cleanup_json_ struct json_object *j = NULL, *tasks = NULL, *nodes = NULL;
	struct sbx_container_summary *list;
	struct node_view *views;
	size_t n = 0, n_views = 0;
	int r;

	if (!filters)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/services?filters=%s",
			    json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN));
	if (r >= 0)
		r = sbx_engine_json(e, "GET", NULL, NULL, &tasks, err, "/tasks");
	if (r >= 0)
		r = sbx_engine_json(e, "GET", NULL, NULL, &nodes, err, "/nodes");
	if (r < 0)
		return r;
	if (!json_object_is_type(j, json_type_array) ||
	    !json_object_is_type(tasks, json_type_array) ||
	    !json_object_is_type(nodes, json_type_array))
		return sbx_error_set(err, -EPROTO,
				     "the manager's service, task or node list is not an array");
	list = calloc(json_object_array_length(j) + 1, sizeof(*list));
	views = calloc(json_object_array_length(nodes) + 1, sizeof(*views));
	if (!list || !views) {
		free(list);
		free(views);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < json_object_array_length(j); i++) {
		struct json_object *svc = json_object_array_get_idx(j, i);
		const char *id = sbx_json_str(svc, "ID"), *state, *node = NULL, *cid = NULL;
		const struct sbx_container_summary *c = NULL;
		bool lost, known = false;

		if (!sbx_moby_id_ok(id) ||
		    !sbx_json_labels_match(
			sbx_json_path(sbx_json_path(svc, "Spec", NULL), "Labels", NULL), labels,
			n_labels))
			continue;
		state = state_in(tasks, id, &node, &cid);
		lost = node && node_down(nodes, node);
		if (!lost && node && cid && sbx_moby_id_ok(node))
			c = node_container(e, node, cid, labels, n_labels, views, &n_views,
					   json_object_array_length(nodes), &known);
		list[n].id = strdup(id);
		list[n].name = dup_or_null(sbx_json_str(sbx_json_path(svc, "Spec", NULL), "Name"));
		list[n].node = node && sbx_moby_id_ok(node) ? strdup(node) : NULL;
		if (c) { /* the node's word */
			char at[SBX_ENGINE_ID_MAX + 1];

			/* Remembered where it runs, if not yet (one adopted after
			 * a restart): /metrics counts it on its node at once. */
			if (c->running && swarm_place_node(e, id, at, sizeof(at)) == -ENOENT)
				(void)swarm_place_set(e, id, node, cid, NULL);
			list[n].running = c->running;
			list[n].status = dup_or_null(c->status ? c->status : "unknown");
		} else {
			list[n].running = !lost && !known && state && strcmp(state, "running") == 0;
			list[n].status = strdup(lost		    ? "lost"
						: known		    ? "removed"
						: !state	    ? "created"
						: list[n].running   ? "running"
						: task_ended(state) ? "exited"
								    : "created");
		}
		if (!list[n].id || !list[n].status) {
			sbx_container_list_free(list, n + 1);
			list = NULL;
			r = sbx_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		n++;
	}
	for (size_t i = 0; i < n_views; i++)
		sbx_container_list_free(views[i].cs, views[i].n);
	free(views);
	if (!list)
		return r;
	*ret_list = list;
	*ret_n = n;
	return 0;
}

/* ---- execs, files, stats: on the node ---- */

static int swarm_exec_create(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
			     bool attach_stdin, char **ret_exec_id, struct sbx_error *err)
{
	_cleanup_free_ char *exec = NULL;
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	const char *node_id;
	int r = on_node(e, id, &node, cid, err);

	if (r < 0)
		return r;
	r = node->ops->exec_create(node, cid, spec, attach_stdin, &exec, err);
	if (r < 0)
		return r;
	node_id = swarm_node_id(e, node);
	if (!node_id)
		return sbx_error_set(err, -ENOENT, "service %s: its node left the cluster", id);
	if (asprintf(ret_exec_id, "%s.%s", node_id, exec) < 0) {
		*ret_exec_id = NULL;
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static int swarm_exec_start(sbx_engine *e, const char *exec_id, sbx_stream **ret_stream,
			    struct sbx_error *err)
{
	sbx_engine *node;
	const char *exec;
	int r = exec_node(e, exec_id, &node, &exec, err);

	return r < 0 ? r : node->ops->exec_start(node, exec, ret_stream, err);
}

static int swarm_exec_inspect(sbx_engine *e, const char *exec_id, int *ret_exit_code,
			      bool *ret_running, struct sbx_error *err)
{
	sbx_engine *node;
	const char *exec;
	int r = exec_node(e, exec_id, &node, &exec, err);

	return r < 0 ? r : node->ops->exec_inspect(node, exec, ret_exit_code, ret_running, err);
}

static int swarm_archive_put(sbx_engine *e, const char *id, const char *dir, const void *tar,
			     size_t len, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->archive_put(node, cid, dir, tar, len, err);
}

static int swarm_archive_get(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
			     void *userdata, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->archive_get(node, cid, path, sink, userdata, err);
}

static int swarm_path_stat(sbx_engine *e, const char *id, const char *path,
			   struct sbx_path_stat *ret, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->path_stat(node, cid, path, ret, err);
}

static int swarm_stats(sbx_engine *e, const char *id, struct sbx_stats *ret, struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->container_stats(node, cid, ret, err);
}

static int swarm_disk_usage(sbx_engine *e, const char *id, int64_t *ret_bytes,
			    struct sbx_error *err)
{
	sbx_engine *node;
	char cid[SBX_ENGINE_ID_MAX + 1];
	int r = on_node(e, id, &node, cid, err);

	return r < 0 ? r : node->ops->container_disk_usage(node, cid, ret_bytes, err);
}

const struct sbx_engine_ops sbx_swarm_ops = {
    .name = "swarm",
    .release = swarm_release,
    .negotiate = swarm_negotiate,
    .ping = swarm_ping,
    .version = sbx_moby_version,
    .storage = swarm_storage,
    .verify = swarm_verify,
    .image_exists = swarm_image_exists,
    .image_build = swarm_image_build,
    .image_import = swarm_image_import,
    .image_remove = swarm_image_remove,
    .container_create = swarm_container_create,
    .container_start = swarm_container_start,
    .container_stop = swarm_container_stop,
    .container_kill = swarm_container_kill,
    .container_remove = swarm_container_remove,
    .container_inspect = swarm_container_inspect,
    .container_list = swarm_container_list,
    .exec_create = swarm_exec_create,
    .exec_start = swarm_exec_start,
    .exec_inspect = swarm_exec_inspect,
    .archive_put = swarm_archive_put,
    .archive_get = swarm_archive_get,
    .path_stat = swarm_path_stat,
    .events = swarm_events,
    .container_stats = swarm_stats,
    .container_disk_usage = swarm_disk_usage,
    .container_node = swarm_place_node,
};
