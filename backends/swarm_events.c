/* SPDX-License-Identifier: MIT */
/*
 * The Swarm backend's events: each node's own container events (a task's
 * container carries the sandbox's labels, so each node's stream is asked
 * for them as the docker backend asks one engine), followed by a thread per
 * node, their containers named by their services, delivered one at a time.
 * SBX_EVENT_OPEN is delivered once every node's stream is open. The cluster
 * is asked for its nodes every SWARM_NODES_POLL_MS: when the set of nodes
 * that are up changes (one went down, one joined), the call ends with
 * -EAGAIN and the caller follows again, on the nodes there are then.
 */
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbx/clock.h"
#include "sbx/common.h"
#include "swarm-internal.h"

#define SWARM_NODES_POLL_MS 1000

struct mux {
	sbx_engine *e;
	const struct sbx_events_spec *spec;
	pthread_mutex_t lock; /* one event at a time to spec->on_event */
	size_t n, opened;
	atomic_bool stop;
	atomic_int ended; /* node streams that ended */
	int failed;	  /* on_event's negative value, 0 */
};

struct follow {
	struct mux *mux;
	sbx_engine *node;
	pthread_t thread;
	bool started;
	int r;
	struct sbx_error err;
};

static bool follow_stopped(void *userdata)
{
	struct follow *f = userdata;
	const struct sbx_events_spec *spec = f->mux->spec;

	return atomic_load(&f->mux->stop) || (spec->stopped && spec->stopped(spec->userdata));
}

/* The service of a node's container: from the places remembered, else
 * from the container's own label (set by Swarm, not by the sandbox). */
static int service_of(struct follow *f, const char *container, char out[SBX_ENGINE_ID_MAX + 1])
{
	struct sbx_container_info info = {0};
	struct swarm_task t;
	bool ok = false, exists;

	if (swarm_service_of(f->mux->e, f->node, container, out) == 0)
		return 0;
	if (!sbx_moby_id_ok(container) ||
	    f->node->ops->container_inspect(f->node, container, &info, NULL) < 0)
		return -ENOENT;
	for (size_t i = 0; i < info.n_labels && !ok; i++)
		if (strcmp(info.labels[i].key, SBX_SWARM_SERVICE_LABEL) == 0 &&
		    sbx_moby_id_ok(info.labels[i].value)) {
			snprintf(out, SBX_ENGINE_ID_MAX + 1, "%s", info.labels[i].value);
			ok = true;
		}
	sbx_container_info_release(&info);
	/* A node's word about whose container it is counts only where the
	 * manager agrees: that service's task is this container on this node
	 * (a node cannot speak for another's sandboxes). */
	/* (Its container is known to the manager only once the node reports
	 * it running: until then, the task being this node's is enough.) */
	ok = ok && swarm_task_of(f->mux->e, out, &t, &exists, NULL) >= 0 &&
	     (!t.container[0] || strcmp(t.container, container) == 0) &&
	     swarm_node_id(f->mux->e, f->node) &&
	     strcmp(t.node, swarm_node_id(f->mux->e, f->node)) == 0;
	return ok ? 0 : -ENOENT;
}

static int relay(void *userdata, const struct sbx_engine_event *ev)
{
	struct follow *f = userdata;
	struct mux *m = f->mux;
	struct sbx_engine_event out = *ev;
	char sid[SBX_ENGINE_ID_MAX + 1];
	int r = 0;

	if (ev->kind == SBX_EVENT_OPEN) {
		pthread_mutex_lock(&m->lock);
		if (++m->opened == m->n)
			r = m->spec->on_event(m->spec->userdata, ev);
		pthread_mutex_unlock(&m->lock);
	} else {
		/* Nothing before OPEN (the caller catches up then). */
		pthread_mutex_lock(&m->lock);
		r = m->opened < m->n;
		pthread_mutex_unlock(&m->lock);
		if (r)
			return 0;
		/* A removed container can no longer say its service: one of
		 * ours is forgotten as its service is removed. */
		if (service_of(f, ev->container, sid) < 0)
			return 0;
		out.container = sid;
		pthread_mutex_lock(&m->lock);
		r = m->failed ? m->failed : m->spec->on_event(m->spec->userdata, &out);
		pthread_mutex_unlock(&m->lock);
	}
	if (r < 0) {
		pthread_mutex_lock(&m->lock);
		if (!m->failed)
			m->failed = r;
		pthread_mutex_unlock(&m->lock);
		atomic_store(&m->stop, true);
	}
	return r;
}

static void *follow_main(void *arg)
{
	struct follow *f = arg;
	const struct sbx_events_spec *spec = f->mux->spec;
	struct sbx_events_spec sub = {
	    .labels = spec->labels,
	    .n_labels = spec->n_labels,
	    .on_event = relay,
	    .stopped = follow_stopped,
	    .userdata = f,
	};

	f->r = sbx_engine_events(f->node, &sub, &f->err);
	/* Its stream ended by itself: its engine went away (killed, restarted,
	 * unreachable) and may come back started with other flags. */
	if (!follow_stopped(f))
		swarm_node_unverify(f->mux->e, f->node);
	atomic_fetch_add(&f->mux->ended, 1);
	return NULL;
}

/* Whether the ids IDS[0..N) are those of the nodes up now, in any order:
 * 1 or 0, -1 when the manager cannot say. */
static int same_nodes(sbx_engine *e, char **ids, size_t n)
{
	sbx_engine **nodes = NULL;
	char **now = NULL;
	size_t k = 0;
	int same;

	if (swarm_nodes(e, &nodes, &now, &k, NULL) < 0)
		return -1;
	same = k == n;
	for (size_t i = 0; same && i < n; i++) {
		bool found = false;
		for (size_t j = 0; j < k && !found; j++)
			found = strcmp(ids[i], now[j]) == 0;
		same = found;
	}
	free(nodes);
	sbx_strv_free(now);
	return same;
}

int swarm_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err)
{
	struct mux m = {.e = e, .spec = spec};
	struct follow *f = NULL;
	sbx_engine **nodes = NULL;
	char **ids = NULL;
	size_t n = 0;
	int64_t next_poll;
	bool ended = false;
	int r = swarm_nodes(e, &nodes, &ids, &n, err);

	if (r < 0)
		return r;
	if (n == 0) {
		free(nodes);
		sbx_strv_free(ids);
		return sbx_error_set(err, -EHOSTDOWN, "the cluster has no node up");
	}
	/* Whatever happened while no stream was open (nodes restarted between
	 * two cycles) is not known: every node is checked again, from inside
	 * its next sandbox (one look each). */
	for (size_t i = 0; i < n; i++)
		swarm_node_unverify(e, nodes[i]);
	pthread_mutex_init(&m.lock, NULL);
	atomic_init(&m.stop, false);
	atomic_init(&m.ended, 0);
	m.n = n;
	f = calloc(n, sizeof(*f));
	if (!f)
		r = sbx_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		f[i] = (struct follow){.mux = &m, .node = nodes[i], .err = SBX_ERROR_INIT};
		if (pthread_create(&f[i].thread, NULL, follow_main, &f[i]) != 0)
			r = sbx_error_set(err, -EAGAIN, "cannot start a thread for node %s",
					  ids[i]);
		else
			f[i].started = true;
	}
	next_poll = sbx_monotonic_ms() + SWARM_NODES_POLL_MS;
	while (r >= 0) {
		if (spec->stopped && spec->stopped(spec->userdata))
			break;
		if (atomic_load(&m.stop) || atomic_load(&m.ended) > 0) {
			ended = true;
			break;
		}
		if (sbx_monotonic_ms() >= next_poll) {
			if (same_nodes(e, ids, n) == 0)
				r = sbx_error_set(err, -EAGAIN, "the cluster's nodes changed");
			next_poll = sbx_monotonic_ms() + SWARM_NODES_POLL_MS;
		}
		nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
	}
	atomic_store(&m.stop, true);
	for (size_t i = 0; f && i < n; i++)
		if (f[i].started)
			pthread_join(f[i].thread, NULL);
	/* What ended it: on_event's value, else the first node's stream that
	 * broke (the caller follows again). */
	if (r >= 0 && ended) {
		r = m.failed;
		for (size_t i = 0; !r && i < n; i++)
			if (f[i].started && f[i].r < 0) {
				r = f[i].r;
				if (err)
					*err = f[i].err;
				sbx_error_prefix(err, "node %s", ids[i]);
			}
		if (!r)
			r = sbx_error_set(err, -EPIPE, "a node's event stream ended");
	}
	free(f);
	free(nodes);
	sbx_strv_free(ids);
	pthread_mutex_destroy(&m.lock);
	return r;
}
