/* SPDX-License-Identifier: MIT */
/*
 * The Swarm backend's own state (backends/swarm_nodes.c): the cluster's
 * nodes as this server reaches them, and where each sandbox's container
 * runs. Only backends/swarm*.c include this.
 *
 * A sandbox is a service of one replica. The manager's API (the engine's
 * own handle, e->rest) answers for services, tasks and nodes; what is
 * container-level goes to the node that runs the service's task, through
 * that node's own Docker API (a docker handle per node). A node's endpoint
 * comes from the cluster: its label SBX_SWARM_ENGINE_LABEL, as the
 * operator or tools/provision-engines set it; a node labelled later needs
 * no restart. Nothing here assumes a node shares a host, a filesystem or a
 * network with this server.
 */
#ifndef SBX_BACKENDS_SWARM_INTERNAL_H
#define SBX_BACKENDS_SWARM_INTERNAL_H

#include "engine-internal.h"

/* The node label that holds a node's engine endpoint ("unix:///path" or
 * "tcp://host:port"). */
#define SBX_SWARM_ENGINE_LABEL "org.mcp-sandbox.engine"
/* The container label Swarm puts on a task's container: its service. */
#define SBX_SWARM_SERVICE_LABEL "com.docker.swarm.service.id"
/* The label of a node check's own container (swarm_node_check). */
#define SBX_SWARM_CHECK_LABEL "org.mcp-sandbox.check"
/* Most nodes one server keeps handles for. */
#define SBX_SWARM_NODES_MAX 1024
/* Longest endpoint taken from a node label. */
#define SBX_SWARM_URL_MAX 512

/* Where a service's task is, as the manager says. */
struct swarm_task {
	char node[SBX_ENGINE_ID_MAX + 1];      /* NodeID, "" before it is assigned */
	char container[SBX_ENGINE_ID_MAX + 1]; /* "" before the container exists */
	char state[16];			       /* Status.State: "pending", "running", ... */
	char message[256];		       /* Status.Err, else Status.Message */
	int exit_code;			       /* Status.ContainerStatus.ExitCode */
	bool desired_running;		       /* DesiredState is "running" */
};

/* The newest task of SERVICE: 0, -ENOENT when it has none (a service of 0
 * replicas, or none such: *ret_service_exists tells which). */
int swarm_task_of(sbx_engine *e, const char *service, struct swarm_task *ret,
		  bool *ret_service_exists, struct sbx_error *err);

/* The docker handle of node NODE_ID (made at first use from its label; the
 * handle lives as long as E). -EHOSTDOWN naming the node when the manager
 * says it is down, -ENXIO when it has no usable label. */
int swarm_node_engine(sbx_engine *e, const char *node_id, sbx_engine **ret_node,
		      struct sbx_error *err);

/* The handle of NODE_ID made before (no request to the manager: for an
 * exec's start and inspect, asked often): -ENOENT when there is none. */
int swarm_node_known(sbx_engine *e, const char *node_id, sbx_engine **ret_node,
		     struct sbx_error *err);
/* Whether the node of handle NODE was verified (SET: it is now). */
bool swarm_node_verified(sbx_engine *e, const sbx_engine *node, bool set);
/* The node of handle NODE is to be verified again (its engine went away:
 * it may come back started otherwise). */
void swarm_node_unverify(sbx_engine *e, const sbx_engine *node);
/* The id of the node whose handle NODE is, or NULL (valid while E lives). */
const char *swarm_node_id(sbx_engine *e, const sbx_engine *node);

/* Where SERVICE's container runs: the node's handle and the container's id
 * on it, from the place remembered or, failing that, from its task. A task
 * that is not running (yet, or any more) is -EBUSY, saying its state; none
 * -ENOENT. */
int swarm_place(sbx_engine *e, const char *service, sbx_engine **ret_node,
		char ret_container[SBX_ENGINE_ID_MAX + 1], struct sbx_error *err);
/* The id of the node SERVICE's container runs on, from the places
 * remembered only (no request): 0 with it in BUF, -ENOENT. */
int swarm_place_node(sbx_engine *e, const char *service, char *buf, size_t size);
/* Remembers SERVICE at NODE_ID / CONTAINER, or forgets it (CONTAINER NULL). */
int swarm_place_set(sbx_engine *e, const char *service, const char *node_id, const char *container,
		    struct sbx_error *err);
/* SERVICE was removed: its place is kept SBX_SWARM_GONE_MS more (its
 * container's last events still name it), then forgotten. */
void swarm_place_removed(sbx_engine *e, const char *service);
#define SBX_SWARM_GONE_MS 120000
/* The service whose container CONTAINER on the node of handle NODE is,
 * from the places remembered: 0 with *ret filled, -ENOENT. */
int swarm_service_of(sbx_engine *e, const sbx_engine *node, const char *container,
		     char ret[SBX_ENGINE_ID_MAX + 1]);

/* Every node's handle the cluster lists now (down ones left out), made as
 * swarm_node_engine makes them: an owned array of borrowed handles, and the
 * ids of the nodes in *ret_ids (owned, NULL when not asked for). */
int swarm_nodes(sbx_engine *e, sbx_engine ***ret_nodes, char ***ret_ids, size_t *ret_n,
		struct sbx_error *err);

/* Node NODE's engine checked with a container of its own made from CHECK
 * (labelled SBX_SWARM_CHECK_LABEL; its command keeps it running a while):
 * that containers there get no-new-privileges and, WANT_NONE, no interface
 * but lo, though CHECK asks for neither. 0, or -EPERM naming node NODE_ID
 * and the dockerd flag. The container is removed, as any such one a check
 * cut short left once it no longer runs. */
int swarm_node_check(sbx_engine *node, const char *node_id, const struct sbx_container_spec *check,
		     bool want_none, struct sbx_error *err);

/* The cluster's id CLUSTER_ID, as the manager of E's socket says at
 * negotiation (called from the negotiate slot: e->lock held); from then
 * on, a manager E cannot reach is replaced by another manager of that
 * cluster (swarm_follow). */
int swarm_cluster_set(sbx_engine *e, const char *cluster_id, struct sbx_error *err);
/* E's manager handle R could not reach FAILED_URL: the nodes this server
 * reached that a manager listed as managers are asked, newest first,
 * whether they are (GET /info on the node's own endpoint, from its label:
 * that node, a manager of the same cluster, within SWARM_PROBE_MS); R is
 * pointed at the first (the sbx_rest_failover_fn contract). A worker is
 * never asked, whatever it would say. A search that found none is not
 * made again for SWARM_FOLLOW_RETRY_MS. */
int swarm_follow(void *userdata, struct sbx_rest *r, const char *failed_url);
#define SWARM_FOLLOW_RETRY_MS 1000
#define SWARM_PROBE_MS 3000

/* The events slot (backends/swarm_events.c): every node's container
 * events, their containers named by their services. */
int swarm_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err);

/* The ops' release slot: every node handle and the places. */
void swarm_release(sbx_engine *e);

#endif
