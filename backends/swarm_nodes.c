/* SPDX-License-Identifier: MIT */
/*
 * The Swarm backend's nodes and places (see swarm-internal.h): a handle per
 * node, made from the node's label, and where each service's container is.
 * What the manager says is checked as any engine reply: ids must be fit for
 * a path, a label's endpoint must be a plain unix:// or tcp:// one.
 */
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "swarm-internal.h"

struct swarm_node {
	char id[SBX_ENGINE_ID_MAX + 1];
	char *url;
	sbx_engine *engine;
	bool verified; /* a container of it was seen with no-new-privileges */
	bool manager;  /* a manager, as the manager followed last listed it */
};

struct swarm_place {
	char service[SBX_ENGINE_ID_MAX + 1];
	char container[SBX_ENGINE_ID_MAX + 1];
	const sbx_engine *node; /* one of the nodes' handles */
	int64_t gone_ms;	/* when its service was removed, 0 while it lives */
};

struct swarm {
	pthread_mutex_t lock;
	/* Following another manager (swarm_follow): one search at a time. */
	pthread_mutex_t follow_lock;
	char cluster[SBX_ENGINE_ID_MAX + 1]; /* the cluster's id, at negotiation */
	int64_t none_ms;		     /* when a search last found no manager */
	struct swarm_node **nodes;	     /* never removed: handles and ids are borrowed out */
	size_t n_nodes;
	struct swarm_place *places;
	size_t n_places, cap_places;
};

/* E's state, made at first use; the caller holds e->lock. */
static struct swarm *swarm_of_locked(sbx_engine *e)
{
	struct swarm *s = e->backend;

	if (!s && (s = calloc(1, sizeof(*s)))) {
		pthread_mutex_init(&s->lock, NULL);
		pthread_mutex_init(&s->follow_lock, NULL);
		e->backend = s;
	}
	return s;
}

/* E's state, made at first use. */
static struct swarm *swarm_of(sbx_engine *e)
{
	struct swarm *s;

	pthread_mutex_lock(&e->lock);
	s = swarm_of_locked(e);
	pthread_mutex_unlock(&e->lock);
	return s;
}

void swarm_release(sbx_engine *e)
{
	struct swarm *s = e->backend;

	if (!s)
		return;
	for (size_t i = 0; i < s->n_nodes; i++) {
		sbx_engine_free(s->nodes[i]->engine);
		free(s->nodes[i]->url);
		free(s->nodes[i]);
	}
	free(s->nodes);
	free(s->places);
	pthread_mutex_destroy(&s->follow_lock);
	pthread_mutex_destroy(&s->lock);
	free(s);
	e->backend = NULL;
}

/* Copies an id from the manager into OUT: 0, or -EPROTO when it is not one. */
static int take_id(const char *id, char out[SBX_ENGINE_ID_MAX + 1])
{
	if (!sbx_moby_id_ok(id))
		return -EPROTO;
	snprintf(out, SBX_ENGINE_ID_MAX + 1, "%s", id);
	return 0;
}

/* Whether URL, from a node's label, is an endpoint we reach: "unix://"
 * and an absolute path, or "tcp://" and host:port, of printable characters
 * without quotes, spaces or "..", at most SBX_SWARM_URL_MAX long. */
static bool url_ok(const char *url)
{
	size_t n = url ? strlen(url) : 0;

	if (n == 0 || n > SBX_SWARM_URL_MAX || strstr(url, ".."))
		return false;
	for (size_t i = 0; i < n; i++)
		if (url[i] <= ' ' || url[i] >= 0x7f || strchr("\"'\\", url[i]))
			return false;
	if (strncmp(url, "unix:///", 8) == 0)
		return n > 8;
	if (strncmp(url, "tcp://", 6) == 0) {
		const char *port = strrchr(url + 6, ':');
		return port && port > url + 6 && port[1] &&
		       strspn(port + 1, "0123456789") == strlen(port + 1) && !strchr(url + 6, '/');
	}
	return false;
}

/* The endpoint of node NODE_ID from its entry J in the manager's
 * answer, *RET_URL owned: -EHOSTDOWN when it is down, -ENXIO when its
 * label is missing or unusable. */
static int node_url(struct json_object *j, const char *node_id, char **ret_url,
		    struct sbx_error *err)
{
	const char *url, *state, *host;

	host = sbx_json_str(sbx_json_path(j, "Description", NULL), "Hostname");
	state = sbx_json_str(sbx_json_path(j, "Status", NULL), "State");
	if (state && strcmp(state, "down") == 0)
		return sbx_error_set(err, -EHOSTDOWN, "node %s (%.64s) is down", node_id,
				     host ? host : "?");
	url = sbx_json_str(sbx_json_path(sbx_json_path(j, "Spec", NULL), "Labels", NULL),
			   SBX_SWARM_ENGINE_LABEL);
	if (!url_ok(url))
		return sbx_error_set(err, -ENXIO,
				     "node %s (%.64s) has %s label " SBX_SWARM_ENGINE_LABEL
				     " (its engine's endpoint: unix:///PATH or tcp://HOST:PORT)",
				     node_id, host ? host : "?", url ? "an unusable" : "no");
	*ret_url = strdup(url);
	return *ret_url ? 0 : sbx_error_set(err, -ENOMEM, "out of memory");
}

/* Whether the engine NE reached at URL is node NODE_ID itself, as it says
 * (GET /info: Swarm.NodeID): a label naming another engine (this host's
 * own, another node's, one outside the cluster) is refused (-ENXIO), so a
 * label alone cannot send sandboxes' code, files or removals elsewhere. */
static int node_is(sbx_engine *ne, const char *node_id, const char *url, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	const char *id;
	int r = sbx_engine_negotiate(ne, err);

	if (r >= 0)
		r = sbx_engine_json(ne, "GET", NULL, NULL, &j, err, "/info");
	if (r < 0)
		return r;
	id = sbx_json_str(sbx_json_path(j, "Swarm", NULL), "NodeID");
	if (!id || strcmp(id, node_id) != 0)
		return sbx_error_set(err, -ENXIO,
				     "its label " SBX_SWARM_ENGINE_LABEL
				     " names %s, an engine that "
				     "is %s%.64s, not that node",
				     url, id && *id ? "node " : "in no swarm", id ? id : "");
	return 0;
}

/* The handle of the node NODE_ID whose entry in the manager's answer is J. */
static int node_engine(sbx_engine *e, struct json_object *j, const char *node_id,
		       sbx_engine **ret_node, struct sbx_error *err)
{
	struct swarm *s = swarm_of(e);
	_cleanup_free_ char *url = NULL;
	sbx_engine *ne = NULL;
	struct swarm_node **grown, *node;
	bool manager = sbx_json_path(j, "ManagerStatus", NULL) != NULL;
	int r;

	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = node_url(j, node_id, &url, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->lock);
	for (size_t i = s->n_nodes; i-- > 0;)
		if (strcmp(s->nodes[i]->id, node_id) == 0 && strcmp(s->nodes[i]->url, url) == 0) {
			s->nodes[i]->manager = manager;
			*ret_node = s->nodes[i]->engine;
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
	pthread_mutex_unlock(&s->lock);
	r = sbx_engine_open(&(struct sbx_engine_config){.type = "docker",
							.url = url,
							.timeout_ms = e->timeout_ms,
							.tls = sbx_rest_tls(e->rest)},
			    &ne, err);
	if (r >= 0)
		r = node_is(ne, node_id, url, err);
	if (r < 0) {
		sbx_engine_free(ne);
		sbx_error_prefix(err, "node %s (%s)", node_id, url);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = s->n_nodes; i-- > 0;)
		if (strcmp(s->nodes[i]->id, node_id) == 0 && strcmp(s->nodes[i]->url, url) == 0) {
			/* made meanwhile by another thread */
			s->nodes[i]->manager = manager;
			*ret_node = s->nodes[i]->engine;
			pthread_mutex_unlock(&s->lock);
			sbx_engine_free(ne);
			return 0;
		}
	node = calloc(1, sizeof(*node));
	grown = s->n_nodes < SBX_SWARM_NODES_MAX && node
		    ? realloc(s->nodes, (s->n_nodes + 1) * sizeof(*s->nodes))
		    : NULL;
	if (!grown) {
		pthread_mutex_unlock(&s->lock);
		free(node);
		sbx_engine_free(ne);
		return sbx_error_set(err, -ENOMEM, "out of memory, or too many nodes (%d at most)",
				     SBX_SWARM_NODES_MAX);
	}
	s->nodes = grown;
	snprintf(node->id, sizeof(node->id), "%s", node_id);
	node->url = SBX_TAKE(url);
	node->engine = ne;
	node->manager = manager;
	s->nodes[s->n_nodes++] = node;
	*ret_node = ne;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int swarm_node_engine(sbx_engine *e, const char *node_id, sbx_engine **ret_node,
		      struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	int r;

	if (!sbx_moby_id_ok(node_id))
		return sbx_error_set(err, -EPROTO, "the manager named a node without a usable id");
	/* Asked each time: a node that went down is said so, and a label
	 * changed since is followed. */
	r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/nodes/%s", node_id);
	if (r == -ENOENT)
		return sbx_error_set(err, -EHOSTDOWN, "node %s is no longer in the cluster",
				     node_id);
	return r < 0 ? r : node_engine(e, j, node_id, ret_node, err);
}

int swarm_node_known(sbx_engine *e, const char *node_id, sbx_engine **ret_node,
		     struct sbx_error *err)
{
	struct swarm *s = swarm_of(e);

	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&s->lock);
	for (size_t i = s->n_nodes; i-- > 0;)
		if (strcmp(s->nodes[i]->id, node_id) == 0) {
			*ret_node = s->nodes[i]->engine;
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
	pthread_mutex_unlock(&s->lock);
	return sbx_error_set(err, -ENOENT, "node %.64s is not one this server reached", node_id);
}

bool swarm_node_verified(sbx_engine *e, const sbx_engine *node, bool set)
{
	struct swarm *s = swarm_of(e);
	bool v = false;

	if (!s)
		return false;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_nodes; i++)
		if (s->nodes[i]->engine == node) {
			if (set)
				s->nodes[i]->verified = true;
			v = s->nodes[i]->verified;
		}
	pthread_mutex_unlock(&s->lock);
	return v;
}

void swarm_node_unverify(sbx_engine *e, const sbx_engine *node)
{
	struct swarm *s = swarm_of(e);

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_nodes; i++)
		if (s->nodes[i]->engine == node)
			s->nodes[i]->verified = false;
	pthread_mutex_unlock(&s->lock);
}

const char *swarm_node_id(sbx_engine *e, const sbx_engine *node)
{
	struct swarm *s = swarm_of(e);
	const char *id = NULL;

	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_nodes && !id; i++)
		if (s->nodes[i]->engine == node)
			id = s->nodes[i]->id;
	pthread_mutex_unlock(&s->lock);
	return id;
}

int swarm_nodes(sbx_engine *e, sbx_engine ***ret_nodes, char ***ret_ids, size_t *ret_n,
		struct sbx_error *err)
{
	_cleanup_json_ struct json_object *j = NULL;
	sbx_engine **nodes = NULL;
	char **ids = NULL;
	size_t n = 0, len;
	int r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/nodes");

	if (r < 0)
		return r;
	if (!json_object_is_type(j, json_type_array))
		return sbx_error_set(err, -EPROTO, "the manager's node list is not an array");
	len = json_object_array_length(j);
	if (len > SBX_SWARM_NODES_MAX)
		return sbx_error_set(err, -EPROTO, "the manager lists %zu nodes (%d at most)", len,
				     SBX_SWARM_NODES_MAX);
	nodes = calloc(len + 1, sizeof(*nodes));
	ids = calloc(len + 1, sizeof(*ids));
	if (!nodes || !ids) {
		free(nodes);
		free(ids);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < len; i++) {
		struct json_object *nj = json_object_array_get_idx(j, i);
		const char *id = sbx_json_str(nj, "ID");
		const char *state = sbx_json_str(sbx_json_path(nj, "Status", NULL), "State");

		if (!sbx_moby_id_ok(id) || (state && strcmp(state, "down") == 0))
			continue;
		r = node_engine(e, nj, id, &nodes[n], err);
		if (r == -EHOSTDOWN)
			continue;
		if (r < 0 || !(ids[n] = strdup(id))) {
			r = r < 0 ? r : sbx_error_set(err, -ENOMEM, "out of memory");
			sbx_strv_free(ids);
			free(nodes);
			return r;
		}
		n++;
	}
	*ret_nodes = nodes;
	if (ret_ids)
		*ret_ids = ids;
	else
		sbx_strv_free(ids);
	*ret_n = n;
	return 0;
}

int swarm_task_of(sbx_engine *e, const char *service, struct swarm_task *ret,
		  bool *ret_service_exists, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *filters = json_object_new_object();
	_cleanup_json_ struct json_object *j = NULL;
	struct json_object *list = json_object_new_array(), *best = NULL;
	int64_t best_index = -1;
	int r;

	*ret_service_exists = false;
	if (!filters || !list) {
		json_object_put(list);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	json_object_array_add(list, json_object_new_string(service));
	json_object_object_add(filters, "service", list);
	r = sbx_engine_json(e, "GET", NULL, NULL, &j, err, "/tasks?filters=%s",
			    json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN));
	if (r < 0)
		return r;
	if (!json_object_is_type(j, json_type_array))
		return sbx_error_set(err, -EPROTO, "the manager's task list is not an array");
	for (size_t i = 0; i < json_object_array_length(j); i++) {
		struct json_object *t = json_object_array_get_idx(j, i);
		int64_t index = sbx_json_int(sbx_json_path(t, "Version", NULL), "Index");
		const char *sid = sbx_json_str(t, "ServiceID");

		/* The filter may match by name too: only this service's. */
		if (!sid || strcmp(sid, service) != 0)
			continue;
		if (index > best_index) {
			best = t;
			best_index = index;
		}
	}
	if (!best) {
		_cleanup_json_ struct json_object *sj = NULL;
		r = sbx_engine_json(e, "GET", NULL, NULL, &sj, err, "/services/%s", service);
		if (r < 0 && r != -ENOENT) /* the manager cannot say: not "removed" */
			return r;
		*ret_service_exists = r >= 0;
		return sbx_error_set_http(err, -ENOENT, 404,
					  r >= 0 ? "service %s has no task" : "no such service: %s",
					  service);
	}
	*ret_service_exists = true;
	{
		struct json_object *st = sbx_json_path(best, "Status", NULL);
		struct json_object *cs = sbx_json_path(st, "ContainerStatus", NULL);
		const char *node = sbx_json_str(best, "NodeID"),
			   *cid = sbx_json_str(cs, "ContainerID");
		const char *state = sbx_json_str(st, "State"), *msg = sbx_json_str(st, "Err");
		const char *desired = sbx_json_str(best, "DesiredState");

		memset(ret, 0, sizeof(*ret));
		if ((node && *node && take_id(node, ret->node) < 0) ||
		    (cid && *cid && take_id(cid, ret->container) < 0))
			return sbx_error_set(err, -EPROTO,
					     "the manager's task of %s names a node or container "
					     "without a usable id",
					     service);
		snprintf(ret->state, sizeof(ret->state), "%s", state ? state : "unknown");
		if (!msg || !*msg)
			msg = sbx_json_str(st, "Message");
		snprintf(ret->message, sizeof(ret->message), "%s", msg ? msg : "");
		ret->exit_code = (int)sbx_json_int(cs, "ExitCode");
		ret->desired_running = desired && strcmp(desired, "running") == 0;
	}
	return 0;
}

/* The live place of SERVICE (lock held by the caller); removed ones past
 * SBX_SWARM_GONE_MS are dropped on the way. */
static struct swarm_place *place_find(struct swarm *s, const char *service)
{
	int64_t now = sbx_monotonic_ms();

	for (size_t i = 0; i < s->n_places;) {
		struct swarm_place *p = &s->places[i];
		if (p->gone_ms && now - p->gone_ms > SBX_SWARM_GONE_MS) {
			*p = s->places[--s->n_places];
			continue;
		}
		if (!p->gone_ms && strcmp(p->service, service) == 0)
			return p;
		i++;
	}
	return NULL;
}

void swarm_place_removed(sbx_engine *e, const char *service)
{
	struct swarm *s = swarm_of(e);
	struct swarm_place *p;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	p = place_find(s, service);
	if (p)
		p->gone_ms = sbx_monotonic_ms();
	pthread_mutex_unlock(&s->lock);
}

int swarm_place_set(sbx_engine *e, const char *service, const char *node_id, const char *container,
		    struct sbx_error *err)
{
	struct swarm *s = swarm_of(e);
	sbx_engine *node = NULL;
	struct swarm_place *p;
	int r;

	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (container) {
		r = swarm_node_engine(e, node_id, &node, err);
		if (r < 0)
			return r;
	}
	pthread_mutex_lock(&s->lock);
	p = place_find(s, service);
	if (!container) {
		if (p)
			*p = s->places[--s->n_places];
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	if (!p) {
		if (s->n_places == s->cap_places) {
			size_t cap = s->cap_places ? 2 * s->cap_places : 64;
			struct swarm_place *grown = realloc(s->places, cap * sizeof(*grown));
			if (!grown) {
				pthread_mutex_unlock(&s->lock);
				return sbx_error_set(err, -ENOMEM, "out of memory");
			}
			s->places = grown;
			s->cap_places = cap;
		}
		p = &s->places[s->n_places++];
		snprintf(p->service, sizeof(p->service), "%s", service);
	}
	snprintf(p->container, sizeof(p->container), "%s", container);
	p->node = node;
	p->gone_ms = 0;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int swarm_service_of(sbx_engine *e, const sbx_engine *node, const char *container,
		     char ret[SBX_ENGINE_ID_MAX + 1])
{
	struct swarm *s = swarm_of(e);
	int r = -ENOENT;

	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_places; i++)
		if (s->places[i].node == node && strcmp(s->places[i].container, container) == 0) {
			snprintf(ret, SBX_ENGINE_ID_MAX + 1, "%s", s->places[i].service);
			r = 0;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int swarm_place_node(sbx_engine *e, const char *service, char *buf, size_t size)
{
	struct swarm *s = swarm_of(e);
	struct swarm_place *p;
	int r = -ENOENT;

	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	p = place_find(s, service);
	for (size_t i = 0; p && !p->gone_ms && i < s->n_nodes && r < 0; i++)
		if (s->nodes[i]->engine == p->node) {
			snprintf(buf, size, "%s", s->nodes[i]->id);
			r = 0;
		}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int swarm_place(sbx_engine *e, const char *service, sbx_engine **ret_node,
		char ret_container[SBX_ENGINE_ID_MAX + 1], struct sbx_error *err)
{
	struct swarm *s = swarm_of(e);
	struct swarm_task t;
	struct swarm_place *p;
	bool exists;
	int r;

	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&s->lock);
	p = place_find(s, service);
	if (p) {
		*ret_node = (sbx_engine *)p->node;
		snprintf(ret_container, SBX_ENGINE_ID_MAX + 1, "%s", p->container);
	}
	pthread_mutex_unlock(&s->lock);
	if (p)
		return 0;
	r = swarm_task_of(e, service, &t, &exists, err);
	if (r == -ENOENT && exists) /* created, not started: nothing runs */
		return sbx_error_set(err, -EBUSY, "service %s has no task: it is not started",
				     service);
	if (r < 0)
		return r;
	if (!t.node[0] || !t.container[0])
		return sbx_error_set(err, -EBUSY,
				     "service %s has no container yet (its task is %s%s%s)",
				     service, t.state, t.message[0] ? ": " : "", t.message);
	r = swarm_node_engine(e, t.node, ret_node, err);
	if (r >= 0)
		r = swarm_place_set(e, service, t.node, t.container, err);
	if (r < 0)
		return r;
	snprintf(ret_container, SBX_ENGINE_ID_MAX + 1, "%s", t.container);
	return 0;
}

/* ---- the manager followed ---- */

int swarm_cluster_set(sbx_engine *e, const char *cluster_id, struct sbx_error *err)
{
	struct swarm *s = swarm_of_locked(e);

	if (!s)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	if (!sbx_moby_id_ok(cluster_id))
		return sbx_error_set(err, -EPROTO, "the manager names no usable cluster id");
	pthread_mutex_lock(&s->lock);
	snprintf(s->cluster, sizeof(s->cluster), "%s", cluster_id);
	pthread_mutex_unlock(&s->lock);
	sbx_rest_set_failover(e->rest, swarm_follow, e);
	return 0;
}

/* Whether node handle NE, of node NODE_ID, says it is that node and a
 * manager of cluster CLUSTER (GET /info, answered within SWARM_PROBE_MS:
 * a node that accepts and never answers does not hold the search up). */
static bool is_manager(sbx_engine *ne, const char *node_id, const char *cluster)
{
	_cleanup_json_ struct json_object *j = NULL;
	struct sbx_rest_response resp;
	struct json_object *sw;
	const char *id, *node;
	char path[64];

	if (sbx_engine_negotiate(ne, NULL) < 0)
		return false;
	snprintf(path, sizeof(path), "%s/info", ne->api_prefix ? ne->api_prefix : "");
	if (sbx_rest_call(ne->rest,
			  &(struct sbx_rest_request){
			      .method = "GET", .path = path, .timeout_ms = SWARM_PROBE_MS},
			  &resp, NULL) < 0)
		return false;
	if (resp.status == 200 && resp.body.data)
		j = json_tokener_parse(resp.body.data);
	sbx_rest_response_release(&resp);
	sw = sbx_json_path(j, "Swarm", NULL);
	id = sbx_json_str(sbx_json_path(sw, "Cluster", NULL), "ID");
	node = sbx_json_str(sw, "NodeID");
	return sbx_json_bool(sw, "ControlAvailable") && id && strcmp(id, cluster) == 0 && node &&
	       strcmp(node, node_id) == 0;
}

int swarm_follow(void *userdata, struct sbx_rest *r, const char *failed_url)
{
	sbx_engine *e = userdata;
	struct swarm *s = swarm_of(e);
	struct {
		char id[SBX_ENGINE_ID_MAX + 1];
		char *url;
		sbx_engine *engine;
	} *cand = NULL;
	char cluster[SBX_ENGINE_ID_MAX + 1];
	size_t n = 0;
	int found = 0;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->follow_lock);
	/* Another caller moved it meanwhile: try there. */
	if (strcmp(sbx_rest_url(r), failed_url) != 0) {
		pthread_mutex_unlock(&s->follow_lock);
		return 1;
	}
	/* A search that found none is not repeated by every caller at once. */
	if (s->none_ms && sbx_monotonic_ms() - s->none_ms < SWARM_FOLLOW_RETRY_MS) {
		pthread_mutex_unlock(&s->follow_lock);
		return 0;
	}
	/* The nodes this server reached, newest handle of each (their
	 * handles and urls live as long as E). */
	pthread_mutex_lock(&s->lock);
	snprintf(cluster, sizeof(cluster), "%s", s->cluster);
	cand = calloc(s->n_nodes + 1, sizeof(*cand));
	for (size_t i = s->n_nodes; cand && i-- > 0;) {
		bool seen = false;
		for (size_t k = 0; k < n && !seen; k++)
			seen = strcmp(cand[k].id, s->nodes[i]->id) == 0;
		if (seen || !s->nodes[i]->manager || strcmp(s->nodes[i]->url, failed_url) == 0)
			continue;
		snprintf(cand[n].id, sizeof(cand[n].id), "%s", s->nodes[i]->id);
		cand[n].url = s->nodes[i]->url;
		cand[n].engine = s->nodes[i]->engine;
		n++;
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n && !found && *cluster; i++) {
		if (!is_manager(cand[i].engine, cand[i].id, cluster) ||
		    sbx_rest_retarget(r, cand[i].url, NULL) < 0)
			continue;
		/* The one notice this backend logs: the call that moved it
		 * succeeds, so no caller learns of the move. (None found: the
		 * call fails, and its caller says so.) */
		sbx_log_warn("swarm: the manager at %s cannot be reached; following the one on "
			     "node %s (%s)",
			     failed_url, cand[i].id, cand[i].url);
		found = 1;
	}
	s->none_ms = found ? 0 : sbx_monotonic_ms();
	pthread_mutex_unlock(&s->follow_lock);
	free(cand);
	return found;
}
