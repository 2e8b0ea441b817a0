/* SPDX-License-Identifier: MIT */
/*
 * MCP resources: every regular file under SBX_RESULTS_DIR of the caller's
 * own sandboxes, as sandbox://SANDBOX_ID/PATH (PATH percent-encoded per
 * segment, as in artifact links). Listed by the sandbox manager's scan
 * (sbx_artifact_list), read through the artifact route's own open
 * (sbx_artifact_open: a process of the sandbox's user, never a host path);
 * each entry carries its signed download link for clients that follow
 * links, and reads are bounded by server.resource_max_bytes.
 *
 * Pages: entries are ordered by (sandbox id, path); a cursor is the last
 * entry a page held, so a page after it starts past it whatever came or
 * went meanwhile. It is opaque to clients (base64 of "r1\nID\nPATH") and
 * checked like a URI when it comes back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/artifact.h"
#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "sbx/percent.h"
#include "sbx/utf8.h"
#include "tools-internal.h"

#define CURSOR_TAG "r1\n"

/* A resources/read's file must have arrived within this. */
#define READ_MS 60000
/* The words of an unknown sandbox: the manager's, so that another tenant's
 * sandbox reads exactly like one that does not exist. */
#define NO_SANDBOX_FMT                                                                             \
	"no sandbox \"%.80s\"; list_sandboxes shows yours, create_sandbox makes a new one"

/* ID has the shape of a sandbox id: 1..SBX_SANDBOX_ID_MAX of [A-Za-z0-9_.-],
 * not "." or "..". */
static bool id_shape_ok(const char *id)
{
	size_t n = strlen(id);

	return n >= 1 && n <= SBX_SANDBOX_ID_MAX &&
	       strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") ==
		   n &&
	       strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
}

/* RELPATH is a file name under SBX_RESULTS_DIR as the listing gives them:
 * clean (sbx_artifact_check_relpath), valid UTF-8, no control character. */
static int relpath_ok(const char *relpath, struct sbx_error *err)
{
	size_t n = strlen(relpath);
	int r = sbx_artifact_check_relpath(relpath, err);

	if (r < 0) {
		if (err)
			err->code = -EINVAL; /* a malformed URI, whatever the check calls it */
		return -EINVAL;
	}
	if (!sbx_utf8_valid(relpath, n))
		return sbx_error_set(err, -EINVAL, "the path is not valid UTF-8");
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)relpath[i] < 0x20 || relpath[i] == 0x7f)
			return sbx_error_set(err, -EINVAL, "the path holds a control character");
	return 0;
}

char *sbx_resource_uri(const char *sandbox_id, const char *relpath)
{
	struct sbx_buf b = SBX_BUF_INIT;

	if (sbx_buf_append(&b, SBX_RESOURCE_SCHEME, strlen(SBX_RESOURCE_SCHEME)) < 0 ||
	    sbx_percent_append(&b, sandbox_id, false) < 0 || sbx_buf_append(&b, "/", 1) < 0 ||
	    sbx_percent_append(&b, relpath, true) < 0) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b);
}

int sbx_resource_uri_parse(const char *uri, char **ret_sandbox_id, char **ret_relpath,
			   struct sbx_error *err)
{
	_cleanup_free_ char *id = NULL, *relpath = NULL;
	size_t n = uri ? strlen(uri) : 0, scheme = strlen(SBX_RESOURCE_SCHEME);
	int r;

	if (!uri || n > SBX_RESOURCE_URI_MAX || strncmp(uri, SBX_RESOURCE_SCHEME, scheme) != 0)
		return sbx_error_set(
		    err, -EINVAL,
		    "not a resource of this server: URIs are " SBX_RESOURCE_TEMPLATE
		    " (at most %d bytes), as resources/list gives them",
		    SBX_RESOURCE_URI_MAX);
	/* Printable ASCII only, and no query or fragment: what resources/list
	 * hands out, every other byte percent-encoded. */
	for (size_t i = scheme; i < n; i++) {
		unsigned char c = (unsigned char)uri[i];
		if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#' || c == '\\')
			return sbx_error_set(err, -EINVAL,
					     "malformed resource URI: byte %zu (0x%02x) is to be "
					     "percent-encoded; use the URI resources/list gives",
					     i, c);
	}
	/* Decoded once, per segment: an escaped '/' or NUL is refused. */
	if (sbx_artifact_parse(uri + scheme, &id, &relpath) < 0)
		return sbx_error_set(err, -EINVAL,
				     "malformed resource URI: expected " SBX_RESOURCE_TEMPLATE
				     " with PATH a file below " SBX_RESULTS_DIR
				     " (every escape %%XX valid, no escaped '/' or NUL)");
	if (!id_shape_ok(id))
		return sbx_error_set(err, -EINVAL,
				     "malformed resource URI: '%.80s' is no sandbox id (1 to %d "
				     "letters, digits, '_', '.' or '-')",
				     id, SBX_SANDBOX_ID_MAX);
	r = relpath_ok(relpath, err);
	if (r < 0) {
		sbx_error_prefix(
		    err, "malformed resource URI: PATH is to name a file below " SBX_RESULTS_DIR
			 " without '.', '..' or empty parts");
		return r;
	}
	*ret_sandbox_id = SBX_TAKE(id);
	*ret_relpath = SBX_TAKE(relpath);
	return 0;
}

/* ---- resources/list ---- */

struct cursor {
	char *id, *path; /* the last entry of the page before; NULL: from the start */
};

static void cursor_release(struct cursor *c)
{
	free(c->id);
	free(c->path);
}

/* TEXT as a cursor: a sandbox id and a path after which the page starts,
 * or an empty path for the start of that sandbox's files (a page that
 * ended at its deadline before listing it). */
static int cursor_parse(const char *text, struct cursor *ret, struct sbx_error *err)
{
	_cleanup_free_ unsigned char *raw = NULL;
	size_t n = 0, tag = strlen(CURSOR_TAG);
	char *id, *path, *nl;

	if (strlen(text) > 4 * SBX_RESOURCE_URI_MAX ||
	    sbx_base64_decode(text, strlen(text), &raw, &n) < 0 || n < tag ||
	    memcmp(raw, CURSOR_TAG, tag) != 0 || memchr(raw, '\0', n))
		goto bad;
	id = (char *)raw + tag;
	nl = strchr(id, '\n');
	if (!nl)
		goto bad;
	*nl = '\0';
	path = nl + 1;
	if (!id_shape_ok(id) || (*path && relpath_ok(path, NULL) < 0))
		goto bad;
	ret->id = strdup(id);
	ret->path = strdup(path);
	if (!ret->id || !ret->path) {
		cursor_release(ret);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
bad:
	return sbx_error_set(err, -EINVAL,
			     "resources/list: invalid cursor: pass the nextCursor of the last "
			     "page unchanged, or none for the first page");
}

static char *cursor_make(const char *id, const char *path)
{
	struct sbx_buf b = SBX_BUF_INIT;
	char *text = NULL;

	if (sbx_buf_appendf(&b, CURSOR_TAG "%s\n%s", id, path) == 0)
		text = sbx_base64_encode(b.data, b.len);
	sbx_buf_release(&b);
	return text;
}

static struct json_object *new_str(const char *s)
{
	return json_object_new_string(s ? s : "");
}

/* One entry of resources/list. */
static struct json_object *resource_json(const struct sbx_tool_ctx *ctx, const char *base,
					 const struct sbx_sandbox_info *sb,
					 const struct sbx_artifact_entry *f)
{
	_cleanup_free_ char *uri = sbx_resource_uri(sb->id, f->path);
	_cleanup_free_ char *link = sbx_tool_artifact_link(ctx, base, sb->id, f->path);
	struct json_object *o = json_object_new_object(), *meta = json_object_new_object();
	char desc[256];
	int r;

	if (!uri || !link || !o || !meta) {
		json_object_put(o);
		json_object_put(meta);
		return NULL;
	}
	snprintf(desc, sizeof(desc), "A file in " SBX_RESULTS_DIR " of sandbox %s (%s)", sb->name,
		 sb->id);
	r = sbx_tools_put(o, "uri", new_str(uri));
	r |= sbx_tools_put(o, "name", new_str(f->path));
	r |= sbx_tools_put(o, "description", new_str(desc));
	r |= sbx_tools_put(o, "mimeType", new_str(sbx_mime_type(f->path)));
	r |= sbx_tools_put(o, "size", json_object_new_int64(f->size));
	r |= sbx_tools_put(meta, SBX_RESOURCE_LINK_META, new_str(link));
	r |= sbx_tools_put(o, "_meta", SBX_TAKE(meta));
	json_object_put(meta);
	if (r < 0)
		return json_object_put(o), NULL;
	return o;
}

static bool ctx_cancelled(void *ctx)
{
	return sbx_tools_cancelled(ctx);
}

static int info_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_sandbox_info *)a)->id,
		      ((const struct sbx_sandbox_info *)b)->id);
}

/* Appends the files of sandbox INFO after the cursor C to ARR, at most
 * *ROOM of them; *RET_MORE when some are left out. A sandbox that cannot be
 * listed now (stopped, gone, its engine failing) adds nothing. */
static int list_one(const struct sbx_tool_ctx *ctx, const char *base,
		    const struct sbx_sandbox_info *info, const struct cursor *c,
		    struct json_object *arr, size_t *room,
		    const struct sbx_artifact_entry **ret_last_entry,
		    struct sbx_artifact_entry **ret_list, size_t *ret_n, bool *ret_more)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_artifact_entry *list = NULL;
	struct sbx_cancel cancel = {ctx_cancelled, (void *)ctx};
	sbx_sandbox *sb = NULL;
	size_t n = 0;
	bool truncated = false;
	int r;

	r = sbx_sandbox_get(ctx->manager, sbx_tool_owner(ctx), info->id, &sb, &err);
	if (r >= 0 && strcmp(sbx_sandbox_id(sb), info->id) == 0)
		r = sbx_artifact_list(ctx->manager, sb, SBX_ARTIFACT_LIST_MAX, &cancel, &list, &n,
				      &truncated, &err);
	sbx_sandbox_unref(sb);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (c->id && strcmp(info->id, c->id) == 0 && strcmp(list[i].path, c->path) <= 0)
			continue;
		if (*room == 0) {
			*ret_more = true;
			break;
		}
		r = sbx_tools_append(arr, resource_json(ctx, base, info, &list[i]));
		if (r < 0) {
			sbx_artifact_list_free(list, n);
			return r;
		}
		(*room)--;
		*ret_last_entry = &list[i];
	}
	*ret_list = list;
	*ret_n = n;
	return 0;
}

int sbx_resources_list(const struct sbx_tool_ctx *ctx, const char *cursor_text,
		       struct json_object **ret_result, struct sbx_error *err)
{
	struct sbx_sandbox_info *infos = NULL;
	struct cursor c = {0};
	struct json_object *res = NULL, *arr = NULL;
	_cleanup_free_ char *next = NULL;
	char base_buf[300];
	const char *base = sbx_tool_public_url(ctx, base_buf, sizeof(base_buf));
	size_t n = 0, room = SBX_RESOURCES_PAGE, listed = 0;
	int64_t until = sbx_monotonic_ms() + ctx->settings->server.resource_list_time_ms;
	bool more = false;
	int r;

	if (cursor_text) {
		r = cursor_parse(cursor_text, &c, err);
		if (r < 0)
			return r;
	}
	r = sbx_manager_list(ctx->manager, sbx_tool_owner(ctx), &infos, &n, err);
	if (r < 0) {
		cursor_release(&c);
		sbx_error_prefix(err, "resources/list: cannot list your sandboxes");
		return r;
	}
	qsort(infos, n, sizeof(*infos), info_cmp);
	arr = json_object_new_array();
	r = arr ? 0 : -ENOMEM;
	for (size_t i = 0; r == 0 && i < n && !more; i++) {
		struct sbx_artifact_entry *list = NULL;
		const struct sbx_artifact_entry *last = NULL;
		size_t count = 0;

		if (c.id && strcmp(infos[i].id, c.id) < 0)
			continue;
		if (room == 0) { /* the page ended with the sandbox before: from this one on */
			free(next);
			if (!(next = cursor_make(infos[i].id, "")))
				r = -ENOMEM;
			more = true;
			break;
		}
		/* Each sandbox's listing may take LIST_TIME_MS (its code answers
		 * it, or stalls): past server.resource_list_time the page ends
		 * before this sandbox, with or without entries, once it listed
		 * one sandbox at least (each page gets on); the next page starts
		 * at this sandbox. */
		if (listed && sbx_monotonic_ms() >= until) {
			free(next);
			if (!(next = cursor_make(infos[i].id, "")))
				r = -ENOMEM;
			more = true;
			break;
		}
		if (sbx_tools_cancelled(ctx))
			break;
		listed++;
		r = list_one(ctx, base, &infos[i], &c, arr, &room, &last, &list, &count, &more);
		if (r == 0 && last) {
			free(next);
			if (!(next = cursor_make(infos[i].id, last->path)))
				r = -ENOMEM;
		}
		sbx_artifact_list_free(list, count);
	}
	if (!more) {
		free(next);
		next = NULL;
	}
	if (r == 0 && !(res = json_object_new_object()))
		r = -ENOMEM;
	if (r == 0)
		r = sbx_tools_put(res, "resources", SBX_TAKE(arr));
	if (r == 0 && next)
		r = sbx_tools_put(res, "nextCursor", new_str(next));
	json_object_put(arr);
	sbx_sandbox_info_list_free(infos, n);
	cursor_release(&c);
	if (r < 0) {
		json_object_put(res);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_result = res;
	return 0;
}

struct json_object *sbx_resources_templates(void)
{
	struct json_object *res = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *t = json_object_new_object();
	int r = res && arr && t ? 0 : -ENOMEM;

	if (r == 0) {
		r |= sbx_tools_put(t, "uriTemplate", new_str(SBX_RESOURCE_TEMPLATE));
		r |= sbx_tools_put(t, "name", new_str("sandbox-file"));
		r |= sbx_tools_put(
		    t, "description",
		    new_str(
			"A file under " SBX_RESULTS_DIR " of one of your sandboxes: the "
			"sandbox's id (list_sandboxes) and the file's path below " SBX_RESULTS_DIR
			", each segment percent-encoded"));
		r |= sbx_tools_append(arr, SBX_TAKE(t));
		r |= sbx_tools_put(res, "resourceTemplates", SBX_TAKE(arr));
	}
	json_object_put(t);
	json_object_put(arr);
	if (r < 0)
		return json_object_put(res), NULL;
	return res;
}

/* ---- notifications/resources/list_changed ---- */

void sbx_resources_changed(const struct sbx_tool_ctx *ctx)
{
	if (ctx->notifier && ctx->notifier->send)
		ctx->notifier->send(ctx->notifier->ctx,
				    "{\"jsonrpc\":\"2.0\",\"method\":"
				    "\"notifications/resources/list_changed\"}");
}

void sbx_resources_changed_since(const struct sbx_tool_ctx *ctx, sbx_sandbox *sb,
				 const struct timespec *since)
{
	if (ctx->notifier && ctx->notifier->send && ctx->resources_watched &&
	    !sbx_tools_cancelled(ctx) &&
	    sbx_artifact_changed_since(ctx->manager, sb, since, NULL) > 0)
		sbx_resources_changed(ctx);
}

/* ---- resources/read ---- */

static bool text_type(const char *mime)
{
	static const char *const types[] = {"text/",
					    "application/json",
					    "application/geo+json",
					    "application/x-ipynb+json",
					    "application/xml",
					    "image/svg+xml"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(types); i++)
		if (strncmp(mime, types[i], strlen(types[i])) == 0)
			return true;
	return false;
}

/* The content is sent as text: a text type whose bytes are UTF-8 without
 * control characters but tab, line feed and carriage return (JSON writes
 * each other one as six bytes: a file of them would grow sixfold). */
static bool as_text(const char *mime, const char *data, size_t len)
{
	if (!text_type(mime) || !sbx_utf8_valid(data, len))
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)data[i];
		if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
			return false;
	}
	return true;
}

struct bounded {
	struct sbx_buf *b;
	int64_t max;
};

static int bounded_sink(void *userdata, const void *data, size_t len)
{
	struct bounded *s = userdata;

	if ((int64_t)(s->b->len + len) > s->max)
		return -EFBIG; /* it grew past the limit since its size was read */
	return sbx_buf_append(s->b, data, len);
}

/* The error of a file over server.resource_max_bytes: *ret_data {size,
 * limit, link}. */
static int too_large(const struct sbx_tool_ctx *ctx, const char *uri, const char *id,
		     const char *relpath, int64_t size, struct json_object **ret_data,
		     struct sbx_error *err)
{
	int64_t limit = ctx->settings->server.resource_max_bytes;
	char base_buf[300];
	_cleanup_free_ char *link = sbx_tool_artifact_link(
	    ctx, sbx_tool_public_url(ctx, base_buf, sizeof(base_buf)), id, relpath);
	struct json_object *data = json_object_new_object();
	int r = link && data ? 0 : -ENOMEM;

	if (r == 0) {
		r |= sbx_tools_put(data, "size", json_object_new_int64(size));
		r |= sbx_tools_put(data, "limit", json_object_new_int64(limit));
		r |= sbx_tools_put(data, "link", new_str(link));
	}
	if (r < 0) {
		json_object_put(data);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_data = data;
	return sbx_error_set(err, -EFBIG,
			     "%.300s is %lld bytes, over this server's limit for resources/read "
			     "(server.resource_max_bytes = %lld bytes): download it with the link "
			     "in its resources/list entry's _meta \"" SBX_RESOURCE_LINK_META
			     "\" (also in this error's data.link)",
			     uri, (long long)size, (long long)limit);
}

int sbx_resources_read(const struct sbx_tool_ctx *ctx, const char *uri,
		       struct json_object **ret_result, struct json_object **ret_data,
		       struct sbx_error *err)
{
	_cleanup_free_ char *id = NULL, *relpath = NULL, *b64 = NULL;
	struct sbx_buf content = SBX_BUF_INIT;
	struct json_object *res = NULL, *arr = NULL, *item = NULL;
	struct sbx_cancel cancel = {ctx_cancelled, (void *)ctx};
	sbx_artifact *a = NULL;
	sbx_sandbox *sb = NULL;
	const char *mime;
	int64_t size = 0, until;
	int r;

	*ret_data = NULL;
	r = sbx_resource_uri_parse(uri, &id, &relpath, err);
	if (r < 0)
		return r;
	/* The caller's own sandbox, by id only: another tenant's, or a name,
	 * is no sandbox. */
	r = sbx_sandbox_get(ctx->manager, sbx_tool_owner(ctx), id, &sb, err);
	if (r >= 0 && strcmp(sbx_sandbox_id(sb), id) != 0)
		r = sbx_error_set(err, -ENOENT, NO_SANDBOX_FMT, id);
	if (r == -ENOENT || r == -EINVAL) {
		r = -ENOENT;
		goto out;
	}
	if (r < 0)
		goto out;
	until = sbx_monotonic_ms() + READ_MS;
	{
		struct sbx_artifact_info info;
		/* At most the cap is asked for: a larger file is refused. */
		r = sbx_artifact_open(ctx->manager, sb, relpath, 0,
				      ctx->settings->server.resource_max_bytes, &cancel, &a, &info,
				      err);
		if (r < 0)
			goto out;
		size = info.size;
	}
	if (size > ctx->settings->server.resource_max_bytes) {
		r = too_large(ctx, uri, id, relpath, size, ret_data, err);
		goto out;
	}
	{
		struct bounded s = {&content, size};
		/* At most resource_max_bytes (64 MiB): a minute from the open's
		 * start is plenty, and a sandbox that trickles holds a worker no
		 * longer. */
		sbx_artifact_deadline(a, until);
		r = sbx_artifact_stream(a, bounded_sink, &s, err);
	}
	if (r < 0)
		goto out;
	mime = sbx_mime_type(relpath);
	arr = json_object_new_array();
	item = json_object_new_object();
	res = json_object_new_object();
	r = arr && item && res ? 0 : -ENOMEM;
	if (r == 0) {
		r |= sbx_tools_put(item, "uri", new_str(uri));
		r |= sbx_tools_put(item, "mimeType", new_str(mime));
	}
	if (r == 0 && as_text(mime, content.data ? content.data : "", content.len)) {
		r = sbx_tools_put(
		    item, "text",
		    json_object_new_string_len(content.data ? content.data : "", (int)content.len));
	} else if (r == 0) {
		b64 = sbx_base64_encode(content.data ? content.data : "", content.len);
		r = sbx_tools_put(item, "blob", b64 ? new_str(b64) : NULL);
	}
	if (r == 0)
		r = sbx_tools_append(arr, SBX_TAKE(item));
	if (r == 0)
		r = sbx_tools_put(res, "contents", SBX_TAKE(arr));
	if (r < 0) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	*ret_result = SBX_TAKE(res);
out:
	json_object_put(res);
	json_object_put(arr);
	json_object_put(item);
	sbx_buf_release(&content);
	sbx_artifact_close(a);
	sbx_sandbox_unref(sb);
	return r;
}
