/* SPDX-License-Identifier: MIT */
/*
 * The engine handle: backend registry, socket discovery, lazy API version
 * negotiation, and the wrappers of include/sbx/engine.h. The non-interactive
 * exec (time limit, output cap) is composed here from the exec slots, once
 * for every backend.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/tar.h"

#ifndef SBX_HAVE_DOCKER
#define SBX_HAVE_DOCKER 1
#endif
#ifndef SBX_HAVE_PODMAN
#define SBX_HAVE_PODMAN 1
#endif

static const struct sbx_engine_ops *const backends[] = {
#if SBX_HAVE_DOCKER
    &sbx_docker_ops,
#endif
#if SBX_HAVE_PODMAN
    &sbx_podman_ops,
#endif
#if SBX_HAVE_DOCKER
    &sbx_swarm_ops, /* a cluster of Docker engines */
#endif
    NULL,
};

const char *const *sbx_engine_backends(void)
{
	static const char *names[SBX_ARRAY_SIZE(backends)];
	for (size_t i = 0; backends[i]; i++)
		names[i] = backends[i]->name;
	return names;
}

static bool is_socket(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* The usual places, in order; the first that exists wins. */
static char *discover_url(struct sbx_error *err)
{
	const char *docker_host = getenv("DOCKER_HOST");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char xdg_sock[4096];

	if (docker_host && *docker_host)
		return strdup(docker_host);
	if (is_socket("/run/podman/podman.sock"))
		return strdup("unix:///run/podman/podman.sock");
	if (xdg && *xdg) {
		snprintf(xdg_sock, sizeof(xdg_sock), "%s/podman/podman.sock", xdg);
		if (is_socket(xdg_sock)) {
			char *url;
			return asprintf(&url, "unix://%s", xdg_sock) < 0 ? NULL : url;
		}
	}
	if (is_socket("/var/run/docker.sock"))
		return strdup("unix:///var/run/docker.sock");
	sbx_error_set(err, -ENOENT,
		      "no engine socket found ($DOCKER_HOST, /run/podman/podman.sock, "
		      "$XDG_RUNTIME_DIR/podman/podman.sock, /var/run/docker.sock); "
		      "set [engine] socket");
	return NULL;
}

int sbx_engine_open(const struct sbx_engine_config *cfg, sbx_engine **ret_engine,
		    struct sbx_error *err)
{
	const char *type = cfg && cfg->type && *cfg->type ? cfg->type : "docker";
	const struct sbx_engine_ops *ops = NULL;
	sbx_engine *e;
	int r;

	for (size_t i = 0; backends[i]; i++)
		if (strcmp(backends[i]->name, type) == 0)
			ops = backends[i];
	if (!ops)
		return sbx_error_set(err, -EINVAL, "unknown engine type '%s' (this build has:%s%s)",
				     type, SBX_HAVE_DOCKER ? " docker swarm" : "",
				     SBX_HAVE_PODMAN ? " podman" : "");
	e = calloc(1, sizeof(*e));
	if (!e)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	e->ops = ops;
	e->timeout_ms = cfg ? cfg->timeout_ms : 0;
	pthread_mutex_init(&e->lock, NULL);
	if (cfg && cfg->url && *cfg->url)
		e->url = strdup(cfg->url);
	else if (!(e->url = discover_url(err))) {
		sbx_engine_free(e);
		return err && err->code ? err->code : -ENOMEM;
	}
	if (cfg && cfg->api_version && *cfg->api_version)
		e->want_api_version = strdup(cfg->api_version);
	r = sbx_rest_open(e->url, cfg ? cfg->timeout_ms : 0, cfg ? cfg->tls : NULL, &e->rest, err);
	if (r < 0) {
		sbx_engine_free(e);
		return r;
	}
	*ret_engine = e;
	return 0;
}

sbx_engine *sbx_engine_free(sbx_engine *e)
{
	if (!e)
		return NULL;
	if (e->backend && e->ops->release)
		e->ops->release(e);
	sbx_rest_free(e->rest);
	pthread_mutex_destroy(&e->lock);
	free(e->url);
	free(e->api_version);
	free(e->api_prefix);
	free(e->server_version);
	free(e->want_api_version);
	free(e);
	return NULL;
}

const char *sbx_engine_name(const sbx_engine *e)
{
	return e->ops->name;
}
bool sbx_engine_restart_keeps(const sbx_engine *e)
{
	return e->ops->restart_keeps;
}

const char *sbx_engine_url(const sbx_engine *e)
{
	/* The endpoint in use: a swarm's may have moved to another manager. */
	return e->rest ? sbx_rest_url(e->rest) : e->url;
}

char *sbx_engine_path(const sbx_engine *e, const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	p = sbx_rest_vpath(e->api_prefix, fmt, ap);
	va_end(ap);
	return p;
}

int sbx_engine_json(sbx_engine *e, const char *method, struct json_object *body,
		    const long *ok_also, struct json_object **ret_json, struct sbx_error *err,
		    const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	va_list ap;

	va_start(ap, fmt);
	path = sbx_rest_vpath(e->api_prefix, fmt, ap);
	va_end(ap);
	if (!path)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	return sbx_rest_json(e->rest, method, path, body, ok_also, ret_json, err);
}

int sbx_engine_send(sbx_engine *e, struct sbx_rest_request *req, const long *ok_also,
		    struct sbx_error *err, const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	struct sbx_rest_response resp;
	va_list ap;
	int r;

	va_start(ap, fmt);
	path = sbx_rest_vpath(e->api_prefix, fmt, ap);
	va_end(ap);
	if (!path)
		return sbx_error_set(err, -ENOMEM, "out of memory");
	req->path = path;
	r = sbx_rest_call(e->rest, req, &resp, err);
	req->path = NULL;
	if (r < 0)
		return r;
	r = sbx_rest_check(&resp, ok_also, err);
	sbx_rest_response_release(&resp);
	return r;
}

int sbx_engine_negotiate(sbx_engine *e, struct sbx_error *err)
{
	int r = 0;

	pthread_mutex_lock(&e->lock);
	if (!e->negotiated) {
		r = e->ops->negotiate(e, err);
		if (r >= 0)
			e->negotiated = true;
		else
			sbx_error_prefix(err, "%s", e->ops->name);
	}
	pthread_mutex_unlock(&e->lock);
	return r;
}

/* Every wrapper: check args, negotiate, call the slot. */
#define NEGOTIATE(e, err)                                                                          \
	do {                                                                                       \
		int _r = sbx_engine_negotiate(e, err);                                             \
		if (_r < 0)                                                                        \
			return _r;                                                                 \
	} while (0)

#define REQUIRE(cond, err, what)                                                                   \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return sbx_error_set(err, -EINVAL, "%s is required", what);                \
	} while (0)

int sbx_engine_ping(sbx_engine *e, struct sbx_error *err)
{
	return e->ops->ping(e, err);
}

int sbx_engine_version(sbx_engine *e, struct sbx_engine_version *ret_version, struct sbx_error *err)
{
	NEGOTIATE(e, err);
	return e->ops->version(e, ret_version, err);
}

void sbx_engine_version_release(struct sbx_engine_version *v)
{
	if (!v)
		return;
	free(v->engine);
	free(v->version);
	free(v->api_version);
	memset(v, 0, sizeof(*v));
}

int sbx_engine_storage(sbx_engine *e, struct sbx_engine_storage *ret, struct sbx_error *err)
{
	REQUIRE(ret, err, "storage result");
	NEGOTIATE(e, err);
	return e->ops->storage(e, ret, err);
}

void sbx_engine_storage_release(struct sbx_engine_storage *s)
{
	if (!s)
		return;
	free(s->driver);
	free(s->backing_fs);
	memset(s, 0, sizeof(*s));
}

int sbx_container_node(sbx_engine *e, const char *id, char *buf, size_t size)
{
	if (!e || !e->ops->container_node)
		return -ENOTSUP;
	if (!id || !*id || !buf || size == 0)
		return -EINVAL;
	return e->ops->container_node(e, id, buf, size);
}

int sbx_engine_verify(sbx_engine *e, const struct sbx_container_spec *spec, sbx_report_fn report,
		      void *userdata, struct sbx_error *err)
{
	REQUIRE(spec && spec->image, err, "container spec");
	if (!e || !e->ops->verify)
		return 0;
	NEGOTIATE(e, err);
	return e->ops->verify(e, spec, report, userdata, err);
}

int sbx_image_exists(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	REQUIRE(ref && *ref, err, "image reference");
	NEGOTIATE(e, err);
	return e->ops->image_exists(e, ref, err);
}

int sbx_image_build(sbx_engine *e, const char *context_dir, const char *containerfile,
		    const char *tag, const char *const *build_args, struct sbx_buf *log,
		    struct sbx_error *err)
{
	struct sbx_buf tar = SBX_BUF_INIT;
	int r;

	REQUIRE(context_dir && *context_dir, err, "build context");
	REQUIRE(tag && *tag, err, "image tag");
	NEGOTIATE(e, err);
	r = sbx_tar_add_tree(&tar, context_dir, err);
	if (r >= 0)
		r = sbx_tar_finish(&tar, err);
	if (r >= 0)
		r = e->ops->image_build(e, &tar, containerfile ? containerfile : "Containerfile",
					tag, build_args, log, err);
	sbx_buf_release(&tar);
	return r;
}

int sbx_image_import(sbx_engine *e, const char *tar_path, const char *ref, struct sbx_error *err)
{
	REQUIRE(tar_path && *tar_path, err, "tarball path");
	REQUIRE(ref && *ref, err, "image reference");
	NEGOTIATE(e, err);
	return e->ops->image_import(e, tar_path, ref, err);
}

int sbx_image_remove(sbx_engine *e, const char *ref, struct sbx_error *err)
{
	REQUIRE(ref && *ref, err, "image reference");
	NEGOTIATE(e, err);
	return e->ops->image_remove(e, ref, err);
}

int sbx_container_create(sbx_engine *e, const struct sbx_container_spec *spec, char **ret_id,
			 struct sbx_error *err)
{
	REQUIRE(spec && spec->image && *spec->image, err, "image");
	REQUIRE(ret_id, err, "ret_id");
	NEGOTIATE(e, err);
	return e->ops->container_create(e, spec, ret_id, err);
}

#define ID_OP(fn, slot)                                                                            \
	int fn(sbx_engine *e, const char *id, struct sbx_error *err)                               \
	{                                                                                          \
		REQUIRE(id &&*id, err, "container id");                                            \
		NEGOTIATE(e, err);                                                                 \
		return e->ops->slot(e, id, err);                                                   \
	}
ID_OP(sbx_container_start, container_start)
ID_OP(sbx_container_remove, container_remove)

int sbx_container_stop(sbx_engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	NEGOTIATE(e, err);
	return e->ops->container_stop(e, id, timeout_s < 0 ? 0 : timeout_s, err);
}

int sbx_container_rename(sbx_engine *e, const char *id, const char *name, struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	REQUIRE(name && *name, err, "container name");
	if (!sbx_container_name_ok(name))
		return sbx_error_set(
		    err, -EINVAL,
		    "container name \"%.64s\" is not [A-Za-z0-9][A-Za-z0-9_.-]* of "
		    "at most %d bytes",
		    name, SBX_CONTAINER_NAME_MAX);
	NEGOTIATE(e, err);
	if (!e->ops->container_rename)
		return sbx_error_set(err, -ENOTSUP, "engine %s cannot rename a container",
				     e->ops->name);
	return e->ops->container_rename(e, id, name, err);
}

bool sbx_container_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SBX_CONTAINER_NAME_MAX || !isalnum((unsigned char)name[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
			return false;
	return true;
}

int sbx_container_kill(sbx_engine *e, const char *id, const char *signal, struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	NEGOTIATE(e, err);
	return e->ops->container_kill(e, id, signal && *signal ? signal : "KILL", err);
}

int sbx_container_inspect(sbx_engine *e, const char *id, struct sbx_container_info *ret_info,
			  struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	NEGOTIATE(e, err);
	return e->ops->container_inspect(e, id, ret_info, err);
}

void sbx_container_info_release(struct sbx_container_info *info)
{
	if (!info)
		return;
	free(info->id);
	free(info->name);
	free(info->image);
	free(info->status);
	free(info->network_mode);
	free(info->runtime);
	free(info->node);
	free(info->lost);
	sbx_strv_free(info->cap_add);
	sbx_strv_free(info->cap_drop);
	for (size_t i = 0; i < info->n_labels; i++) {
		free((char *)info->labels[i].key);
		free((char *)info->labels[i].value);
	}
	free(info->labels);
	memset(info, 0, sizeof(*info));
}

int sbx_container_list(sbx_engine *e, const struct sbx_kv *labels, size_t n_labels,
		       struct sbx_container_summary **ret_list, size_t *ret_n,
		       struct sbx_error *err)
{
	REQUIRE(ret_list && ret_n, err, "ret_list");
	NEGOTIATE(e, err);
	return e->ops->container_list(e, labels, n_labels, ret_list, ret_n, err);
}

void sbx_container_list_free(struct sbx_container_summary *list, size_t n)
{
	for (size_t i = 0; list && i < n; i++) {
		free(list[i].id);
		free(list[i].name);
		free(list[i].status);
		free(list[i].node);
	}
	free(list);
}

/* ---- exec ---- */

/* With a time limit, argv runs under a POSIX sh that first reports its PID on
 * stderr (marked with \036 so it cannot be mistaken for output) and then
 * execs argv: the PID is in the container's namespace, so the kill goes
 * through a second exec and works with a remote engine. */
#define PID_MARK "\036sbx-pid "
static const char pid_wrapper[] = "printf '\\036sbx-pid %s\\n' \"$$\" >&2; exec \"$@\"";
/*
 * The killer stops the tree from its root down, then stops and kills every
 * process left in the wrapper's session (an exec is a session leader, so its
 * orphans, reparented to the sandbox's init, keep the session: a fork bomb's
 * processes do). It forks nothing (read, kill and globs are shell builtins):
 * it must work in a sandbox whose PID limit is full. Exits 0 when it ran.
 */
static const char tree_killer[] =
    "T=$1\n"
    "k() {\n"
    "  local f cs c\n"
    "  kill -STOP \"$1\" 2>/dev/null\n"
    "  for f in /proc/\"$1\"/task/*/children; do\n"
    "    cs=\n"
    "    { read -r cs <\"$f\"; } 2>/dev/null\n"
    "    for c in $cs; do k \"$c\"; done\n"
    "  done\n"
    "  kill -KILL \"$1\" 2>/dev/null\n"
    "}\n"
    "sweep() {\n"
    "  sig=$1 found=\n"
    "  for f in /proc/[0-9]*/stat; do\n"
    "    s=\n"
    "    { read -r s <\"$f\"; } 2>/dev/null || continue\n"
    "    set -- ${s##*) }\n"
    "    [ \"$4\" = \"$T\" ] && [ \"$1\" != Z ] || continue\n"
    "    [ \"$sig\" = STOP ] && [ \"$1\" = T ] && continue\n"
    "    p=${f#/proc/}\n"
    "    kill -\"$sig\" \"${p%/stat}\" 2>/dev/null && found=1\n"
    "  done\n"
    "}\n"
    "s=\n"
    "{ read -r s </proc/\"$T\"/stat; } 2>/dev/null\n"
    "set -- ${s##*) }\n"
    "lead=$4\n"
    "k \"$T\"\n"
    "if [ \"$lead\" = \"$T\" ]; then\n"
    "  n=0\n"
    "  while [ $n -lt 50 ]; do sweep STOP; [ -n \"$found\" ] || break; n=$((n + 1)); done\n"
    "  n=0\n"
    "  while [ $n -lt 50 ]; do sweep KILL; [ -n \"$found\" ] || break; n=$((n + 1)); done\n"
    "fi\n"
    "exit 0\n";

struct exec_capture {
	struct sbx_exec_result *res;
	size_t cap;
	bool want_pid; /* the first stderr line is the PID mark */
	char mark[64];
	size_t mark_len;
	long pid;
};

static void capture(struct exec_capture *c, int fd, const char *p, size_t n)
{
	struct sbx_buf *b = fd == 2 ? &c->res->err : &c->res->out;
	size_t kept = c->res->out.len + c->res->err.len;
	size_t room = kept < c->cap ? c->cap - kept : 0;

	c->res->total_bytes += n;
	if (n > room) {
		c->res->truncated = true;
		n = room;
	}
	if (n)
		sbx_buf_append(b, p, n);
}

static void capture_stderr(struct exec_capture *c, const char *p, size_t n)
{
	while (c->want_pid && n) {
		c->mark[c->mark_len++] = *p++;
		n--;
		if (c->mark[c->mark_len - 1] == '\n' || c->mark_len == sizeof(c->mark) - 1) {
			c->mark[c->mark_len] = '\0';
			c->want_pid = false;
			if (strncmp(c->mark, PID_MARK, strlen(PID_MARK)) == 0)
				c->pid = strtol(c->mark + strlen(PID_MARK), NULL, 10);
			else
				capture(c, 2, c->mark, c->mark_len);
		} else if (c->mark_len <= strlen(PID_MARK) &&
			   c->mark[c->mark_len - 1] != PID_MARK[c->mark_len - 1]) {
			c->want_pid = false;
			capture(c, 2, c->mark, c->mark_len);
		}
	}
	if (n)
		capture(c, 2, p, n);
}

/* How often the killer is tried before the tree is left to the time limit's end. */
#define KILL_TRIES 30

static int exec_kill_tree(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec, long pid)
{
	char pidstr[32];
	const char *argv[] = {"/bin/sh", "-c", tree_killer, "sbx-kill", pidstr, NULL};
	struct sbx_exec_spec kill_spec = {.argv = argv, .user = spec->user, .output_cap = 4096};
	struct sbx_exec_result res = {0};
	int r;

	snprintf(pidstr, sizeof(pidstr), "%ld", pid);
	/* A sandbox at its PID limit may refuse the exec for a while: try again. */
	for (int i = 0; i < KILL_TRIES; i++) {
		r = sbx_exec(e, id, &kill_spec, &res, NULL);
		if (r >= 0 && res.exit_code != 0)
			r = -ECHILD;
		sbx_exec_result_release(&res);
		memset(&res, 0, sizeof(res));
		if (r >= 0 || r == -ENOENT)
			break;
		nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
	}
	return r;
}

/* After the stream ends the engine may need a moment to record the exit. */
static int exec_wait_exit(sbx_engine *e, const char *exec_id, int *ret_code, struct sbx_error *err)
{
	for (int i = 0; i < 200; i++) {
		bool running = true;
		int code = -1, r = e->ops->exec_inspect(e, exec_id, &code, &running, err);
		/* Podman 4.3 says a removed session is a 500. */
		if (r < 0 && err && strstr(err->msg, "no such exec session"))
			r = -ENOENT;
		if (r == -ENOENT) {
			sbx_error_prefix(err,
					 "the engine removed the exec before its exit code was "
					 "read (Podman: its exit_command_delay is too short)");
			return r;
		}
		if (r < 0)
			return r;
		if (!running) {
			*ret_code = code;
			return 0;
		}
		nanosleep(&(struct timespec){.tv_nsec = (i < 20 ? 1 : 10) * 1000000L}, NULL);
	}
	*ret_code = -1;
	return 0;
}

/* How often sbx_exec asks spec->cancelled. */
#define CANCEL_POLL_MS 50
/* How long a stopped exec waits for the PID line it has not had yet. */
#define PID_WAIT_MS 5000

int sbx_exec(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
	     struct sbx_exec_result *ret_result, struct sbx_error *err)
{
	struct sbx_exec_result res = {.exit_code = -1};
	struct exec_capture cap = {.res = &res};
	_cleanup_free_ const char **argv = NULL;
	_cleanup_free_ char *exec_id = NULL;
	struct sbx_exec_spec run;
	sbx_stream *s = NULL;
	char buf[65536];
	int64_t deadline = 0, next_poll;
	size_t argc = 0;
	int r;

	REQUIRE(id && *id, err, "container id");
	REQUIRE(spec && spec->argv && spec->argv[0], err, "argv");
	NEGOTIATE(e, err);

	run = *spec;
	cap.cap = spec->output_cap ? spec->output_cap : (1u << 20);
	if (spec->timeout_ms > 0 || spec->cancelled) {
		while (spec->argv[argc])
			argc++;
		argv = calloc(argc + 5, sizeof(*argv));
		if (!argv)
			return sbx_error_set(err, -ENOMEM, "out of memory");
		argv[0] = "/bin/sh";
		argv[1] = "-c";
		argv[2] = pid_wrapper;
		argv[3] = "sbx-exec";
		memcpy(argv + 4, spec->argv, argc * sizeof(*argv));
		run.argv = argv;
		cap.want_pid = true;
		if (spec->timeout_ms > 0)
			deadline = sbx_monotonic_ms() + spec->timeout_ms;
	}

	r = e->ops->exec_create(e, id, &run, spec->stdin_data != NULL, &exec_id, err);
	if (r < 0)
		return r;
	r = e->ops->exec_start(e, exec_id, &s, err);
	if (r < 0)
		return r;
	if (spec->stdin_data) {
		r = sbx_stream_write(s, spec->stdin_data, spec->stdin_len, err);
		if (r >= 0)
			r = sbx_stream_close_stdin(s, err);
		if (r < 0)
			goto out;
	}
	next_poll = spec->cancelled ? sbx_monotonic_ms() + CANCEL_POLL_MS : 0;
	for (;;) {
		int64_t now = deadline || next_poll ? sbx_monotonic_ms() : 0;
		int fd = 1, wait = -1;
		ssize_t n;

		/* checked before every read, so a flood of output cannot hide
		 * the time limit or a cancellation */
		if (deadline && now >= deadline) {
			res.timed_out = true;
			break;
		}
		if (next_poll && now >= next_poll) {
			if (spec->cancelled(spec->userdata)) {
				res.cancelled = true;
				break;
			}
			next_poll = now + CANCEL_POLL_MS;
		}
		if (deadline)
			wait = (int)(deadline - now);
		if (next_poll && (wait < 0 || wait > next_poll - now))
			wait = (int)(next_poll - now);
		n = sbx_stream_read(s, buf, sizeof(buf), &fd, wait, err);
		if (n == -ETIMEDOUT)
			continue;
		if (n < 0) {
			r = (int)n;
			goto out;
		}
		if (n == 0)
			break;
		if (fd == 2)
			capture_stderr(&cap, buf, (size_t)n);
		else
			capture(&cap, fd, buf, (size_t)n);
	}
	/* Stopped before the wrapper's PID line came (an exec slow to start,
	 * under load): wait a little for it, or the tree would run on. */
	if ((res.timed_out || res.cancelled) && cap.want_pid) {
		int64_t until = sbx_monotonic_ms() + PID_WAIT_MS;
		for (int64_t now = sbx_monotonic_ms(); cap.want_pid && now < until;
		     now = sbx_monotonic_ms()) {
			int fd = 1;
			ssize_t n =
			    sbx_stream_read(s, buf, sizeof(buf), &fd, (int)(until - now), NULL);
			if (n <= 0 && n != -ETIMEDOUT)
				break;
			if (n > 0 && fd == 2)
				capture_stderr(&cap, buf, (size_t)n);
			else if (n > 0)
				capture(&cap, fd, buf, (size_t)n);
		}
	}
	s = sbx_stream_free(s);
	res.started = cap.pid > 0;
	if (res.timed_out || res.cancelled) {
		if (cap.pid > 0)
			exec_kill_tree(e, id, spec, cap.pid);
		res.exit_code = -1;
	} else {
		r = exec_wait_exit(e, exec_id, &res.exit_code, err);
		if (r < 0)
			goto out;
	}
	if (!res.out.data)
		sbx_buf_append(&res.out, "", 0);
	if (!res.err.data)
		sbx_buf_append(&res.err, "", 0);
	*ret_result = res;
	return 0;
out:
	sbx_stream_free(s);
	sbx_exec_result_release(&res);
	return r;
}

void sbx_exec_result_release(struct sbx_exec_result *r)
{
	if (!r)
		return;
	sbx_buf_release(&r->out);
	sbx_buf_release(&r->err);
}

int sbx_exec_stream(sbx_engine *e, const char *id, const struct sbx_exec_spec *spec,
		    sbx_stream **ret_stream, struct sbx_error *err)
{
	char *exec_id = NULL;
	sbx_stream *s = NULL;
	int r;

	REQUIRE(id && *id, err, "container id");
	REQUIRE(spec && spec->argv && spec->argv[0], err, "argv");
	REQUIRE(ret_stream, err, "ret_stream");
	NEGOTIATE(e, err);
	r = e->ops->exec_create(e, id, spec, true, &exec_id, err);
	if (r < 0)
		return r;
	r = e->ops->exec_start(e, exec_id, &s, err);
	if (r < 0) {
		free(exec_id);
		return r;
	}
	s->engine = e;
	s->exec_id = exec_id;
	*ret_stream = s;
	return 0;
}

int sbx_stream_exit_code(sbx_stream *s, struct sbx_error *err)
{
	bool running = true;
	int code = -1, r;

	if (!s->engine || !s->exec_id)
		return -1;
	r = s->engine->ops->exec_inspect(s->engine, s->exec_id, &code, &running, err);
	if (r < 0)
		return r;
	return running ? -1 : code;
}

/* ---- files ---- */

int sbx_archive_put(sbx_engine *e, const char *id, const char *dir, const void *tar, size_t len,
		    struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	REQUIRE(dir && dir[0] == '/', err, "an absolute destination directory");
	REQUIRE(tar || !len, err, "archive");
	NEGOTIATE(e, err);
	return e->ops->archive_put(e, id, dir, tar, len, err);
}

int sbx_archive_get(sbx_engine *e, const char *id, const char *path, sbx_sink_fn sink,
		    void *userdata, struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	REQUIRE(path && path[0] == '/', err, "an absolute path");
	REQUIRE(sink, err, "sink");
	NEGOTIATE(e, err);
	return e->ops->archive_get(e, id, path, sink, userdata, err);
}

int sbx_path_stat(sbx_engine *e, const char *id, const char *path, struct sbx_path_stat *ret_stat,
		  struct sbx_error *err)
{
	REQUIRE(id && *id, err, "container id");
	REQUIRE(path && path[0] == '/', err, "an absolute path");
	NEGOTIATE(e, err);
	return e->ops->path_stat(e, id, path, ret_stat, err);
}

void sbx_path_stat_release(struct sbx_path_stat *st)
{
	if (!st)
		return;
	free(st->name);
	free(st->link_target);
	free(st->mtime);
	memset(st, 0, sizeof(*st));
}

/* ---- optional ---- */

#define OPTIONAL(e, slot, err)                                                                     \
	do {                                                                                       \
		if (!(e)->ops->slot)                                                               \
			return sbx_error_set(err, -ENOTSUP, "%s backend has no " #slot,            \
					     (e)->ops->name);                                      \
	} while (0)

int sbx_network_connect(sbx_engine *e, const char *id, const char *network, struct sbx_error *err)
{
	OPTIONAL(e, network_connect, err);
	REQUIRE(id && *id && network && *network, err, "container id and network");
	NEGOTIATE(e, err);
	return e->ops->network_connect(e, id, network, err);
}

int sbx_network_disconnect(sbx_engine *e, const char *id, const char *network,
			   struct sbx_error *err)
{
	OPTIONAL(e, network_disconnect, err);
	REQUIRE(id && *id && network && *network, err, "container id and network");
	NEGOTIATE(e, err);
	return e->ops->network_disconnect(e, id, network, err);
}

int sbx_container_stats(sbx_engine *e, const char *id, struct sbx_stats *ret_stats,
			struct sbx_error *err)
{
	OPTIONAL(e, container_stats, err);
	REQUIRE(id && *id, err, "container id");
	NEGOTIATE(e, err);
	return e->ops->container_stats(e, id, ret_stats, err);
}

int sbx_container_disk_usage(sbx_engine *e, const char *id, int64_t *ret_bytes,
			     struct sbx_error *err)
{
	OPTIONAL(e, container_disk_usage, err);
	REQUIRE(id && *id && ret_bytes, err, "container id and a place for the bytes");
	NEGOTIATE(e, err);
	return e->ops->container_disk_usage(e, id, ret_bytes, err);
}

int sbx_engine_events(sbx_engine *e, const struct sbx_events_spec *spec, struct sbx_error *err)
{
	OPTIONAL(e, events, err);
	REQUIRE(spec && spec->on_event, err, "events spec with on_event");
	NEGOTIATE(e, err);
	return e->ops->events(e, spec, err);
}
