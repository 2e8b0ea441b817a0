/* SPDX-License-Identifier: MIT */
/*
 * The handlers: arguments (already checked against the inputSchema)
 * in, one sandbox-manager call, the structured result or a message that says
 * what went wrong and what to do out. The manager's messages are written for
 * the user; a hint chosen by the error code is added to them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbx/artifact.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "tools-internal.h"

/* How much before a command's start a change under /app/results counts as
 * its own: a file's time comes from the kernel's coarse clock, up to a tick
 * (10 ms at HZ=100) behind; the exec starts later than that anyway. */
#define CHANGE_MARGIN_NS 20000000L

/* How long install_package_in_sandbox waits before answering "installing". */
#define INSTALL_WAIT_MS 5000

#define HINT_ENGINE                                                                                \
	"The container engine failed or is unreachable: try again in a moment. If it keeps "       \
	"failing, the server's administrator should check that Docker or Podman is running."
#define HINT_NO_SANDBOX                                                                            \
	"Call list_sandboxes to see your sandboxes, or create_sandbox to make a new one."
#define HINT_GONE                                                                                  \
	"The sandbox's container is gone or stopped: create a new one with create_sandbox "        \
	"(list_sandboxes shows its status)."

static const char *arg_str(struct json_object *args, const char *key)
{
	struct json_object *v;
	if (!args || !json_object_object_get_ex(args, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

/* The timeout argument (seconds) in ms, rounded up; 0 when absent. */
static long arg_timeout_ms(struct json_object *args)
{
	struct json_object *v;
	double ms;
	if (!args || !json_object_object_get_ex(args, "timeout", &v) || !v)
		return 0;
	ms = json_object_get_double(v) * 1000.0;
	return ms < 1.0 ? 1 : (long)(ms + 0.999);
}

/* The time limit a run gets from its timeout argument: cut to
 * sandbox.max_exec_timeout, and then *ret_notice (owned) says so; 0 (the
 * server's sandbox.exec_timeout) when the argument is absent. 0 or -ENOMEM. */
static int run_timeout_ms(const struct sbx_tool_ctx *ctx, struct json_object *args, long *ret_ms,
			  char **ret_notice)
{
	long ms = arg_timeout_ms(args), max = (long)ctx->settings->sandbox.max_exec_timeout_ms;

	*ret_notice = NULL;
	*ret_ms = ms;
	if (max <= 0 || ms <= max)
		return 0;
	*ret_ms = max;
	return sbx_str_replacef(ret_notice,
				"The timeout of %g s asked for is over this server's limit "
				"(sandbox.max_exec_timeout): it ran with a time limit of %g s.",
				(double)ms / 1000.0, (double)max / 1000.0);
}

/* Adds NOTICE (consumed) before OUT->notice, in the result's "notice" and
 * as a text item. 0 or -ENOMEM. */
static int add_notice(struct json_object *res, struct sbx_tool_out *out, char *notice)
{
	char *both = NULL;

	if (!notice)
		return 0;
	if (out->notice) {
		if (asprintf(&both, "%s %s", notice, out->notice) < 0) {
			free(notice);
			return -ENOMEM;
		}
		free(notice);
		free(out->notice);
		notice = both;
	}
	out->notice = notice;
	return sbx_tools_put(res, "notice", json_object_new_string(notice));
}

/* The hint for an error of the engine or the manager that no caller
 * expected specially. */
static const char *hint_general(int code)
{
	switch (code) {
	case -ENOMEM:
		return "The server is short of memory: try again later.";
	case -EINVAL:
		return "Check the arguments against the tool's inputSchema.";
	case -EPERM:
	case -EACCES:
		return "This is not allowed on this server.";
	default:
		return HINT_ENGINE;
	}
}

/* Looks the sandbox_id argument up. 0 with *ret_sb, 1 with OUT->error set,
 * or -ENOMEM. */
static int get_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
		       struct sbx_tool_out *out, sbx_sandbox **ret_sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	const char *id = arg_str(args, "sandbox_id");
	int r = sbx_sandbox_get(ctx->manager, sbx_tool_owner(ctx), id, ret_sb, &err);

	if (r >= 0) {
		sbx_tool_audit_sandbox(ctx, *ret_sb);
		return 0;
	}
	if (r == -ENOENT || r == -EINVAL) {
		if (!err.msg[0])
			sbx_error_set(&err, r, "sandbox '%s' not found", id);
		r = sbx_tool_fail_err(out, &err, HINT_NO_SANDBOX);
	} else {
		sbx_error_prefix(&err, "cannot look up sandbox '%s'", id);
		r = sbx_tool_fail_err(out, &err, hint_general(r));
	}
	return r < 0 ? r : 1;
}

/* get_sandbox, for a call that needs the sandbox to run: a sleeping one
 * is woken first, and OUT->wake_notice says so. */
static int use_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
		       struct sbx_tool_out *out, sbx_sandbox **ret_sb)
{
	struct sbx_error err = SBX_ERROR_INIT;
	bool woke = false;
	int r = get_sandbox(ctx, args, out, ret_sb);

	if (r != 0)
		return r;
	r = sbx_sandbox_wake(ctx->manager, *ret_sb, &woke, &err);
	if (r < 0) {
		*ret_sb = sbx_sandbox_unref(*ret_sb);
		r = sbx_tool_fail_err(out, &err, r == -ENOENT ? HINT_GONE : hint_general(r));
		return r < 0 ? r : 1;
	}
	if (woke && asprintf(&out->wake_notice,
			     "Sandbox %s was asleep (unused for a while) and was woken for this "
			     "call: its files and installed packages are kept, its Python "
			     "variables and imports are gone.",
			     sbx_sandbox_id(*ret_sb)) < 0) {
		out->wake_notice = NULL;
		*ret_sb = sbx_sandbox_unref(*ret_sb);
		return -ENOMEM;
	}
	return 0;
}

/* Tells a client that asked for progress (params._meta.progressToken) that
 * the work has started; the response ends it. */
static void notify_started(const struct sbx_tool_ctx *ctx, const char *what)
{
	struct sbx_progress p;

	sbx_progress_init(&p, ctx);
	sbx_progress_step(&p, what);
	sbx_progress_release(&p);
}

static int iso_time(time_t t, char *buf, size_t size)
{
	struct tm tm;
	if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		return snprintf(buf, size, "1970-01-01T00:00:00Z");
	return 0;
}

static struct json_object *new_str(const char *s)
{
	return json_object_new_string(s ? s : "");
}

/* A count as a JSON integer: past INT64_MAX (saturated totals) it stays
 * there rather than turn negative. */
static struct json_object *count_json(uint64_t n)
{
	return json_object_new_int64(n > INT64_MAX ? INT64_MAX : (int64_t)n);
}

/* ---- list_sandboxes ---- */

/* O[KEY] = T in ISO 8601 when T is set. */
static int put_time(struct json_object *o, const char *key, time_t t)
{
	char at[32];

	if (!t)
		return 0;
	iso_time(t, at, sizeof(at));
	return sbx_tools_put(o, key, new_str(at));
}

static struct json_object *sandbox_json(const struct sbx_sandbox_info *in)
{
	struct json_object *o = json_object_new_object(), *pk = json_object_new_array();
	char created[32], used[32];
	int r = 0;

	if (!o || !pk) {
		json_object_put(o);
		json_object_put(pk);
		return NULL;
	}
	iso_time(in->created, created, sizeof(created));
	iso_time(in->last_used ? in->last_used : in->created, used, sizeof(used));
	for (char **p = in->packages; p && *p && r == 0; p++)
		r = sbx_tools_append(pk, new_str(*p));
	r |= sbx_tools_put(o, "sandbox_id", new_str(in->id));
	r |= sbx_tools_put(o, "name", new_str(in->name));
	r |= sbx_tools_put(o, "status", new_str(in->reason ? "dead" : in->status));
	if (in->node) /* on a cluster: where it runs */
		r |= sbx_tools_put(o, "node", new_str(in->node));
	r |= sbx_tools_put(o, "image", new_str(in->image));
	r |= sbx_tools_put(o, "created", new_str(created));
	r |= sbx_tools_put(o, "last_used", new_str(used));
	r |= put_time(o, "sleeps_at", in->reason ? 0 : in->sleeps_at);
	r |= put_time(o, "asleep_since", in->asleep_since);
	r |= put_time(o, "expires", in->expires);
	if (in->sleeps > 0)
		r |= sbx_tools_put(o, "sleeps", count_json(in->sleeps));
	if (in->reason)
		r |= sbx_tools_put(o, "reason", new_str(in->reason));
	r |= sbx_tools_put(o, "packages", pk);
	r |= sbx_tools_put(o, "egress_bytes_in", count_json(in->egress_bytes_in));
	r |= sbx_tools_put(o, "egress_bytes_out", count_json(in->egress_bytes_out));
	r |= sbx_tools_put(o, "cpu_seconds", json_object_new_double((double)in->cpu_ns / 1e9));
	r |= sbx_tools_put(o, "memory_bytes", count_json(in->memory_bytes));
	r |= sbx_tools_put(o, "memory_byte_seconds", count_json(in->memory_byte_seconds));
	r |= sbx_tools_put(o, "disk_bytes", count_json(in->disk_bytes));
	r |= sbx_tools_put(o, "disk_byte_seconds", count_json(in->disk_byte_seconds));
	if (r < 0)
		return json_object_put(o), NULL;
	return o;
}

/* The end of a tool: on R < 0 drops RES, else hands it to OUT. Returns R. */
static int set_result(struct sbx_tool_out *out, struct json_object *res, int r)
{
	if (r < 0)
		json_object_put(res);
	else
		out->result = res;
	return r;
}

int sbx_tool_list_sandboxes(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info *list = NULL;
	struct json_object *res, *arr;
	struct sbx_tenant_usage t;
	size_t n = 0;
	int r;

	(void)args;
	r = sbx_manager_list(ctx->manager, sbx_tool_owner(ctx), &list, &n, &err);
	if (r < 0) {
		sbx_error_prefix(&err, "cannot list sandboxes");
		return sbx_tool_fail_err(out, &err, hint_general(r));
	}
	/* The tenant's usage: its sandboxes gone, and those listed. */
	sbx_manager_tenant_gone(ctx->manager, sbx_tool_owner(ctx), &t);
	res = json_object_new_object();
	arr = json_object_new_array();
	r = res && arr ? 0 : -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		t.egress_bytes_in = sbx_add_sat(t.egress_bytes_in, list[i].egress_bytes_in);
		t.egress_bytes_out = sbx_add_sat(t.egress_bytes_out, list[i].egress_bytes_out);
		t.cpu_ns = sbx_add_sat(t.cpu_ns, list[i].cpu_ns);
		t.memory_byte_seconds =
		    sbx_add_sat(t.memory_byte_seconds, list[i].memory_byte_seconds);
		t.disk_byte_seconds = sbx_add_sat(t.disk_byte_seconds, list[i].disk_byte_seconds);
		r = sbx_tools_append(arr, sandbox_json(&list[i]));
	}
	sbx_sandbox_info_list_free(list, n);
	if (r == 0 && res) {
		r = sbx_tools_put(res, "sandboxes", SBX_TAKE(arr));
		r |= sbx_tools_put(res, "count", json_object_new_int64((int64_t)n));
		r |= sbx_tools_put(res, "tenant_egress_bytes_in", count_json(t.egress_bytes_in));
		r |= sbx_tools_put(res, "tenant_egress_bytes_out", count_json(t.egress_bytes_out));
		r |= sbx_tools_put(res, "tenant_cpu_seconds",
				   json_object_new_double((double)t.cpu_ns / 1e9));
		r |= sbx_tools_put(res, "tenant_memory_byte_seconds",
				   count_json(t.memory_byte_seconds));
		r |=
		    sbx_tools_put(res, "tenant_disk_byte_seconds", count_json(t.disk_byte_seconds));
	}
	json_object_put(arr);
	return set_result(out, res, r);
}

/* ---- create_sandbox ---- */

int sbx_tool_create_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info info = {0};
	struct json_object *res;
	struct sbx_quota q;
	sbx_sandbox *sb = NULL;
	const char *hint;
	int r;

	sbx_quota_of(ctx->settings, ctx->limits, &q);
	r = sbx_sandbox_create_quota(ctx->manager, sbx_tool_owner(ctx), arg_str(args, "name"),
				     &q.sandbox, &sb, &err);
	if (r < 0) {
		switch (r) {
		case -EEXIST:
		case -EINVAL:
		case -EDQUOT:
			hint = NULL; /* the manager's message says it all */
			break;
		case -EBUSY:
			hint = "Delete one of your sandboxes with delete_sandbox, or reuse one "
			       "(list_sandboxes shows them).";
			break;
		default:
			hint = hint_general(r);
		}
		return sbx_tool_fail_err(out, &err, hint);
	}
	/* The status and image as the engine reports them; the settings when it does not. */
	if (sbx_sandbox_describe(ctx->manager, sb, &info, NULL) < 0)
		memset(&info, 0, sizeof(info));
	res = json_object_new_object();
	r = res ? 0 : -ENOMEM;
	if (res) {
		r |= sbx_tools_put(res, "sandbox_id", new_str(sbx_sandbox_id(sb)));
		r |= sbx_tools_put(res, "name", new_str(sbx_sandbox_name(sb)));
		r |= sbx_tools_put(res, "status", new_str(info.status ? info.status : "running"));
		r |= sbx_tools_put(res, "image",
				   new_str(info.image ? info.image : ctx->settings->sandbox.image));
	}
	sbx_sandbox_info_release(&info);
	sbx_sandbox_unref(sb);
	return set_result(out, res, r);
}

/* ---- delete_sandbox ---- */

int sbx_tool_delete_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *res;
	sbx_sandbox *sb = NULL;
	char msg[256];
	int r;

	r = get_sandbox(ctx, args, out, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	r = sbx_sandbox_delete(ctx->manager, sbx_tool_owner(ctx), sbx_sandbox_id(sb), &err);
	if (r < 0) {
		r = sbx_tool_fail_err(out, &err, r == -ENOENT ? HINT_NO_SANDBOX : hint_general(r));
		goto out;
	}
	snprintf(msg, sizeof(msg),
		 "Sandbox %s is deleted: its container, files, installed packages and Python "
		 "variables are gone. create_sandbox makes a new one.",
		 sbx_sandbox_id(sb));
	res = json_object_new_object();
	r = res ? 0 : -ENOMEM;
	if (res) {
		r |= sbx_tools_put(res, "sandbox_id", new_str(sbx_sandbox_id(sb)));
		r |= sbx_tools_put(res, "name", new_str(sbx_sandbox_name(sb)));
		r |= sbx_tools_put(res, "deleted", json_object_new_boolean(true));
		r |= sbx_tools_put(res, "message", new_str(msg));
	}
	r = set_result(out, res, r);
out:
	sbx_sandbox_unref(sb);
	return r;
}

/* ---- execute_python_code, execute_terminal_command ---- */

/* A resource_link content item (2025-06-18+) for a file with a download link. */
static struct json_object *link_item(const char *url, const char *name, const char *mime,
				     int64_t size)
{
	struct json_object *lo = json_object_new_object();
	int r = 0;

	if (!lo)
		return NULL;
	r |= sbx_tools_put(lo, "type", new_str("resource_link"));
	r |= sbx_tools_put(lo, "uri", new_str(url));
	r |= sbx_tools_put(lo, "name", new_str(name));
	r |= sbx_tools_put(lo, "mimeType", new_str(mime));
	r |= sbx_tools_put(lo, "size", json_object_new_int64(size));
	if (r < 0)
		return json_object_put(lo), NULL;
	return lo;
}

/* An image content item {type: "image", data: base64, mimeType}. */
static struct json_object *image_item(const struct sbx_file_change *f)
{
	_cleanup_free_ char *b64 = sbx_base64_encode(f->image, f->image_len);
	struct json_object *io = b64 ? json_object_new_object() : NULL;
	int r = 0;

	if (!io)
		return NULL;
	r |= sbx_tools_put(io, "type", new_str("image"));
	r |= sbx_tools_put(io, "data", new_str(b64));
	r |= sbx_tools_put(io, "mimeType", new_str(f->image_mime));
	if (r < 0)
		return json_object_put(io), NULL;
	return io;
}

/* The file list, one image item per image the manager returned inline, and
 * one resource_link per file (used from 2025-06-18 on). */
static int files_json(const struct sbx_tool_ctx *ctx, sbx_sandbox *sb,
		      const struct sbx_run_result *rr, struct json_object *res,
		      struct sbx_tool_out *out)
{
	struct json_object *files = json_object_new_array(), *links = json_object_new_array();
	struct json_object *images = json_object_new_array();
	char base_buf[300];
	const char *base = sbx_tool_public_url(ctx, base_buf, sizeof(base_buf));
	int r = files && links && images ? 0 : -ENOMEM;

	for (size_t i = 0; r == 0 && i < rr->n_files; i++) {
		const struct sbx_file_change *f = &rr->files[i];
		_cleanup_free_ char *url =
		    sbx_tool_artifact_link(ctx, base, sbx_sandbox_id(sb), f->path);
		const char *mime = sbx_mime_type(f->path);
		bool inline_image = f->image && f->image_len > 0 && f->image_mime;
		struct json_object *fo = json_object_new_object();
		if (!url || !fo) {
			json_object_put(fo);
			r = -ENOMEM;
			break;
		}
		r |= sbx_tools_put(fo, "path", new_str(f->path));
		r |= sbx_tools_put(fo, "size", json_object_new_int64(f->size));
		r |= sbx_tools_put(fo, "url", new_str(url));
		r |= sbx_tools_put(fo, "mime_type", new_str(mime));
		if (inline_image) {
			r |= sbx_tools_put(fo, "inline_image", json_object_new_boolean(true));
			r |= sbx_tools_append(images, image_item(f));
		}
		r |= sbx_tools_append(files, fo);
		r |= sbx_tools_append(links, link_item(url, f->path, mime, f->size));
	}
	if (r == 0) {
		r = sbx_tools_put(res, "files", SBX_TAKE(files));
		r |= sbx_tools_put(res, "files_truncated",
				   json_object_new_boolean(rr->files_truncated));
	}
	json_object_put(files);
	if (r < 0) {
		json_object_put(links);
		json_object_put(images);
		return -ENOMEM;
	}
	out->links = links;
	if (json_object_array_length(images) > 0)
		out->images = images;
	else
		json_object_put(images);
	return 0;
}

/* stdout, stderr, exit_code, timed_out, truncated. */
static int output_json(const struct sbx_run_result *rr, struct json_object *res)
{
	int r = 0;

	r |= sbx_tools_put(
	    res, "stdout",
	    json_object_new_string_len(rr->out.data ? rr->out.data : "", (int)rr->out.len));
	r |= sbx_tools_put(
	    res, "stderr",
	    json_object_new_string_len(rr->err.data ? rr->err.data : "", (int)rr->err.len));
	r |= sbx_tools_put(res, "exit_code", json_object_new_int(rr->exit_code));
	r |= sbx_tools_put(res, "timed_out", json_object_new_boolean(rr->timed_out));
	r |= sbx_tools_put(res, "truncated", json_object_new_boolean(rr->truncated));
	if (rr->out_of_memory)
		r |= sbx_tools_put(res, "out_of_memory", json_object_new_boolean(true));
	if (rr->out_of_disk)
		r |= sbx_tools_put(res, "out_of_disk", json_object_new_boolean(true));
	return r < 0 ? -ENOMEM : 0;
}

/* The start of a tool that runs code or a command: its time limit (*RET_CAPPED,
 * owned, says when the client's was cut) and its sandbox. 0 to go on; else
 * what get_sandbox says (> 0: the failure is in OUT), nothing held. */
static int run_prepare(const struct sbx_tool_ctx *ctx, struct json_object *args,
		       struct sbx_tool_out *out, long *ret_timeout_ms, char **ret_capped,
		       sbx_sandbox **ret_sb)
{
	int r;

	if (run_timeout_ms(ctx, args, ret_timeout_ms, ret_capped) < 0)
		return -ENOMEM;
	r = use_sandbox(ctx, args, out, ret_sb);
	if (r != 0) {
		free(*ret_capped);
		*ret_capped = NULL;
	}
	return r;
}

static bool command_cancelled(void *userdata)
{
	return sbx_tools_cancelled(userdata);
}

int sbx_tool_execute_terminal_command(const struct sbx_tool_ctx *ctx, struct json_object *args,
				      struct sbx_tool_out *out)
{
	struct sbx_run_opts opts = {
	    .cancelled = command_cancelled,
	    .userdata = (void *)ctx,
	};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result rr = {0};
	struct json_object *res = NULL;
	struct timespec t0;
	sbx_sandbox *sb = NULL;
	char *capped = NULL;
	int r;

	r = run_prepare(ctx, args, out, &opts.timeout_ms, &capped, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	notify_started(ctx, "running the command");
	/* What the command changes under /app/results is not tracked: what
	 * changed since a little before it started (a file's time comes from
	 * the kernel's coarse clock) is looked for after it. */
	clock_gettime(CLOCK_REALTIME, &t0);
	t0.tv_sec -= t0.tv_nsec < CHANGE_MARGIN_NS ? 1 : 0;
	t0.tv_nsec = (t0.tv_nsec + 1000000000L - CHANGE_MARGIN_NS) % 1000000000L;
	r = sbx_sandbox_run_shell_ex(ctx->manager, sb, arg_str(args, "command"), &opts, &rr, &err);
	if (r < 0) {
		r = sbx_tool_fail_err(out, &err, r == -ENOENT ? HINT_GONE : hint_general(r));
		goto out;
	}
	sbx_resources_changed_since(ctx, sb, &t0);
	res = json_object_new_object();
	r = res ? output_json(&rr, res) : -ENOMEM;
	if (r == 0 && rr.notice)
		r = add_notice(res, out, SBX_TAKE(rr.notice));
	if (r == 0)
		r = add_notice(res, out, SBX_TAKE(capped));
	r = set_result(out, res, r);
out:
	free(capped);
	sbx_run_result_release(&rr);
	sbx_sandbox_unref(sb);
	return r;
}

/* The interpreter's hooks: output becomes progress; the cancellation poll
 * (about every 50 ms) also sends output kept back by the rate limit. */
struct python_hooks {
	const struct sbx_tool_ctx *ctx;
	struct sbx_progress progress;
};

static void python_output(void *userdata, int fd, const char *text, size_t len)
{
	struct python_hooks *h = userdata;

	(void)fd;
	sbx_progress_output(&h->progress, text, len);
}

static bool python_cancelled(void *userdata)
{
	struct python_hooks *h = userdata;

	sbx_progress_flush(&h->progress, false);
	return sbx_tools_cancelled(h->ctx);
}

/* Log messages for what the interpreter went through: a warning when a run
 * was killed, info when the interpreter was restarted for another reason
 * (it had died). An interrupt that kept the state is in the result only. */
static void python_log(const struct sbx_tool_ctx *ctx, sbx_sandbox *sb,
		       const struct sbx_run_result *rr)
{
	const char *id = sbx_sandbox_id(sb);

	if (!rr->interpreter_restarted)
		return;
	if (rr->timed_out || rr->cancelled)
		sbx_tools_log(ctx, SBX_LOG_WARNING,
			      "sandbox %s: the Python code did not stop when interrupted %s; the "
			      "interpreter was killed and restarted, its variables are gone",
			      id, rr->timed_out ? "at its time limit" : "after a cancellation");
	else
		sbx_tools_log(
		    ctx, SBX_LOG_INFO,
		    "sandbox %s: the Python interpreter was restarted; variables of earlier "
		    "calls are gone",
		    id);
}

#define HINT_PY_BUSY                                                                               \
	"Another execute_python_code call is still running in this sandbox: wait for it to "       \
	"finish, or use another sandbox."

int sbx_tool_execute_python_code(const struct sbx_tool_ctx *ctx, struct json_object *args,
				 struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result rr = {0};
	struct python_hooks h = {.ctx = ctx};
	struct sbx_run_opts opts = {
	    .on_output = python_output,
	    .cancelled = python_cancelled,
	    .userdata = &h,
	};
	struct json_object *res = NULL;
	sbx_sandbox *sb = NULL;
	char *capped = NULL;
	int r;

	r = run_prepare(ctx, args, out, &opts.timeout_ms, &capped, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	sbx_progress_init(&h.progress, ctx);
	sbx_progress_step(&h.progress, "running the Python code");
	r = sbx_sandbox_run_python_ex(ctx->manager, sb, arg_str(args, "code"), &opts, &rr, &err);
	sbx_progress_flush(&h.progress, true);
	if (r < 0) {
		r = sbx_tool_fail_err(out, &err,
				      r == -ENOENT	? HINT_GONE
				      : r == -EBUSY	? HINT_PY_BUSY
				      : r == -ECANCELED ? NULL /* nobody waits for the answer */
							: hint_general(r));
		goto out;
	}
	python_log(ctx, sb, &rr);
	if (rr.interpreter_restarted) { /* its notice says the state is gone */
		free(out->wake_notice);
		out->wake_notice = NULL;
	}
	if (rr.n_files > 0 || rr.files_truncated || rr.files_removed)
		sbx_resources_changed(ctx);
	res = json_object_new_object();
	r = res ? output_json(&rr, res) : -ENOMEM;
	if (r == 0)
		r = files_json(ctx, sb, &rr, res, out);
	if (r == 0)
		r = sbx_tools_put(res, "interpreter_restarted",
				  json_object_new_boolean(rr.interpreter_restarted));
	if (r == 0 && rr.notice && !(out->notice = strdup(rr.notice)))
		r = -ENOMEM;
	if (r == 0 && out->notice && !capped)
		r = sbx_tools_put(res, "notice", new_str(out->notice));
	if (r == 0)
		r = add_notice(res, out, SBX_TAKE(capped));
	r = set_result(out, res, r);
out:
	free(capped);
	sbx_progress_release(&h.progress);
	sbx_run_result_release(&rr);
	sbx_sandbox_unref(sb);
	return r;
}

/* ---- reset_python_interpreter ---- */

int sbx_tool_reset_python(const struct sbx_tool_ctx *ctx, struct json_object *args,
			  struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *res;
	sbx_sandbox *sb = NULL;
	int r;

	r = use_sandbox(ctx, args, out, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	r = sbx_sandbox_reset_python(ctx->manager, sb, &err);
	if (r < 0) {
		r = sbx_tool_fail_err(out, &err, r == -ENOENT ? HINT_GONE : hint_general(r));
		goto out;
	}
	res = json_object_new_object();
	r = res ? 0 : -ENOMEM;
	if (res) {
		r |= sbx_tools_put(res, "sandbox_id", new_str(sbx_sandbox_id(sb)));
		r |= sbx_tools_put(res, "reset", json_object_new_boolean(true));
		r |= sbx_tools_put(
		    res, "message",
		    new_str("A fresh Python interpreter runs in this sandbox: every "
			    "variable and import is gone; files and installed packages "
			    "are still there."));
	}
	r = set_result(out, res, r);
out:
	sbx_sandbox_unref(sb);
	return r;
}

/* ---- install_package_in_sandbox, check_package_installation_status ---- */

static const char *state_word(enum sbx_install_state s)
{
	switch (s) {
	case SBX_INSTALL_PRESENT:
		return "installed";
	case SBX_INSTALL_RUNNING:
		return "installing";
	case SBX_INSTALL_SUCCESS:
		return "success";
	case SBX_INSTALL_FAILED:
		return "failed";
	case SBX_INSTALL_NONE:
		break;
	}
	return "not_installed";
}

static int state_message(const struct sbx_install_status *st, const char *id, char *buf,
			 size_t size)
{
	const char *v = st->version ? st->version : "?";
	switch (st->state) {
	case SBX_INSTALL_RUNNING:
		return snprintf(buf, size,
				"pip is still installing '%s' (%.0f s so far). Call "
				"check_package_installation_status with sandbox_id '%s' and the "
				"same package_name in a few seconds, until the status is success "
				"or failed.",
				st->package, st->seconds, id);
	case SBX_INSTALL_SUCCESS:
		return snprintf(buf, size,
				"'%s' is installed (version %s): import it in "
				"execute_python_code.",
				st->package, v);
	case SBX_INSTALL_PRESENT:
		return snprintf(buf, size,
				"'%s' is already in the sandbox (version %s): import it in "
				"execute_python_code.",
				st->package, v);
	case SBX_INSTALL_FAILED:
		return snprintf(buf, size,
				"pip could not install '%s': log_tail shows why. Check the "
				"package name and version; the sandbox installs only from the "
				"server's package index.",
				st->package);
	case SBX_INSTALL_NONE:
		break;
	}
	return snprintf(buf, size,
			"'%s' is not installed: call install_package_in_sandbox to install it.",
			st->package);
}

/* Seconds with millisecond precision, also in the JSON text. */
static struct json_object *seconds_json(double s)
{
	char text[32];
	snprintf(text, sizeof(text), "%.3f", s >= 0 ? s : 0);
	return json_object_new_double_s(strtod(text, NULL), text);
}

static int install_tool(const struct sbx_tool_ctx *ctx, struct json_object *args,
			struct sbx_tool_out *out, bool install)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_install_status st = {0};
	const char *spec = arg_str(args, "package_name");
	struct json_object *res;
	struct sbx_quota q;
	sbx_sandbox *sb = NULL;
	char why[256] = "", msg[1024];
	int r;

	if (!sbx_package_spec_valid(spec, ctx->settings->sandbox.allow_direct_urls, why,
				    sizeof(why)))
		return sbx_tool_fail(out,
				     "invalid package_name '%.200s': %s. Example: 'requests' or "
				     "'pandas==2.2.2'.",
				     spec, why[0] ? why : "not a pip requirement");
	r = use_sandbox(ctx, args, out, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	if (install) {
		sbx_quota_of(ctx->settings, ctx->limits, &q);
		const struct sbx_install_opts o = {.wait_ms = INSTALL_WAIT_MS,
						   .cancelled = command_cancelled,
						   .userdata = (void *)ctx,
						   .quota = &q.sandbox};
		notify_started(ctx, "pip install started");
		r = sbx_sandbox_install_ex(ctx->manager, sb, spec, &o, &st, &err);
	} else {
		r = sbx_sandbox_install_status(ctx->manager, sb, spec, &st, &err);
	}
	if (r < 0) {
		r = sbx_tool_fail_err(out, &err,
				      r == -ENOENT   ? HINT_GONE
				      : r == -EDQUOT ? NULL /* the manager's message says it all */
						     : hint_general(r));
		goto out;
	}
	state_message(&st, sbx_sandbox_id(sb), msg, sizeof(msg));
	res = json_object_new_object();
	r = res ? 0 : -ENOMEM;
	if (res) {
		r |= sbx_tools_put(res, "package", new_str(st.package ? st.package : spec));
		r |= sbx_tools_put(res, "status", new_str(state_word(st.state)));
		if (st.version)
			r |= sbx_tools_put(res, "version", new_str(st.version));
		if (st.log_tail)
			r |= sbx_tools_put(res, "log_tail", new_str(st.log_tail));
		if (install || st.state == SBX_INSTALL_RUNNING || st.state == SBX_INSTALL_SUCCESS ||
		    st.state == SBX_INSTALL_FAILED)
			r |= sbx_tools_put(res, "seconds", seconds_json(st.seconds));
		r |= sbx_tools_put(res, "message", new_str(msg));
	}
	r = set_result(out, res, r);
out:
	sbx_install_status_release(&st);
	sbx_sandbox_unref(sb);
	return r;
}

int sbx_tool_install_package(const struct sbx_tool_ctx *ctx, struct json_object *args,
			     struct sbx_tool_out *out)
{
	return install_tool(ctx, args, out, true);
}

int sbx_tool_check_package(const struct sbx_tool_ctx *ctx, struct json_object *args,
			   struct sbx_tool_out *out)
{
	return install_tool(ctx, args, out, false);
}

/* ---- upload_file_to_sandbox ---- */

/* PATH has a "." or ".." segment. */
static bool has_dot_segment(const char *path)
{
	for (const char *p = path;; p++) {
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return true;
		p += n;
		if (!*p)
			return false;
	}
}

/* PATH is DIR or below it. */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Uploads go where the sandbox's user works: the engine writes them as root,
 * so anywhere else they could replace the sandbox's own system files. */
int sbx_tool_upload_file(const struct sbx_tool_ctx *ctx, struct json_object *args,
			 struct sbx_tool_out *out)
{
	struct sbx_error err = SBX_ERROR_INIT;
	const char *local = arg_str(args, "local_file_path");
	const char *dest = arg_str(args, "dest_path");
	const char *upload_dir = ctx->settings->sandbox.upload_dir;
	_cleanup_free_ char *path = NULL, *url = NULL;
	char base_buf[300];
	struct json_object *res;
	sbx_sandbox *sb = NULL;
	int64_t size = 0;
	size_t rl = strlen(SBX_RESULTS_DIR);
	int r;

	if (dest &&
	    (has_dot_segment(dest) || !(under(dest, SBX_RESULTS_DIR) || under(dest, "/tmp"))))
		return sbx_tool_fail(
		    out,
		    "dest_path '%.300s' is not allowed: give %s, /tmp or a path "
		    "below one of them, without '.' or '..' parts, e.g. %s/data.csv",
		    dest, SBX_RESULTS_DIR, SBX_RESULTS_DIR);
	r = use_sandbox(ctx, args, out, &sb);
	if (r != 0)
		return r < 0 ? r : 0;
	r = sbx_sandbox_upload(ctx->manager, sb, local, dest, &path, &size, &err);
	if (r < 0) {
		const char *hint = NULL; /* the manager's message says it all */
		switch (r) {
		case -EPERM:
		case -EACCES:
			if (upload_dir[0])
				hint = "Ask the user to put the file into the upload folder first.";
			break;
		case -ENOENT:
			hint = "Check local_file_path (a file in the upload folder) and dest_path "
			       "(a folder in the sandbox, default " SBX_RESULTS_DIR ").";
			break;
		case -EFBIG:
		case -EINVAL:
			break;
		default:
			hint = hint_general(r);
		}
		r = sbx_tool_fail_err(out, &err, hint);
		goto out;
	}
	/* A link for files under the results folder, the ones the artifact route serves. */
	if (strncmp(path, SBX_RESULTS_DIR, rl) == 0 && path[rl] == '/' && path[rl + 1] &&
	    !has_dot_segment(path + rl + 1) && !strstr(path + rl, "//")) {
		url = sbx_tool_artifact_link(ctx,
					     sbx_tool_public_url(ctx, base_buf, sizeof(base_buf)),
					     sbx_sandbox_id(sb), path + rl + 1);
		if (!url) {
			r = -ENOMEM;
			goto out;
		}
	}
	res = json_object_new_object();
	r = res ? 0 : -ENOMEM;
	if (res) {
		r |= sbx_tools_put(res, "sandbox_id", new_str(sbx_sandbox_id(sb)));
		r |= sbx_tools_put(res, "path", new_str(path));
		r |= sbx_tools_put(res, "size", json_object_new_int64(size));
		if (url)
			r |= sbx_tools_put(res, "url", new_str(url));
	}
	if (r == 0 && url) {
		sbx_resources_changed(ctx);
		out->links = json_object_new_array();
		r = out->links ? sbx_tools_append(out->links, link_item(url, path + rl + 1,
									sbx_mime_type(path), size))
			       : -ENOMEM;
	}
	r = set_result(out, res, r);
out:
	sbx_sandbox_unref(sb);
	return r;
}
