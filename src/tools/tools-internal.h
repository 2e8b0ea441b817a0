/* SPDX-License-Identifier: MIT */
/*
 * Between the tool table (src/tools/tools.c: schemas, argument checks, result
 * shape) and the handlers (src/tools/handlers.c: the calls into the sandbox
 * manager). Internal to src/tools/.
 */
#ifndef SBX_TOOLS_INTERNAL_H
#define SBX_TOOLS_INTERNAL_H

#include <stdbool.h>

#include "tools.h"

/* What a handler produces: either RESULT (the structured object, which is
 * also sent as text) or ERROR (the message of an isError result). */
struct sbx_tool_out {
	struct json_object *result;
	char *notice; /* a sentence the model must not miss: a text item, or NULL */
	/* The sandbox was asleep and was woken for this call: said before the
	 * notice, in the text and in the result's "notice" (sbx_tools_call). */
	char *wake_notice;
	struct json_object *images; /* image content items (every version), or NULL */
	struct json_object *links;  /* resource_link content items (2025-06-18+), or NULL */
	char *error;
	const char *error_kind; /* the audit log's word for it (struct sbx_tool_audit) */
};

/* A handler runs with ARGS already checked against the inputSchema (an
 * object or NULL; optional arguments may be absent or null). Returns 0 with
 * OUT filled, or -ENOMEM; every other failure is OUT->error. */
typedef int (*sbx_tool_fn)(const struct sbx_tool_ctx *ctx, struct json_object *args,
			   struct sbx_tool_out *out);

struct sbx_tool_def {
	const char *name;
	const char *title;
	const char *description;
	const char *input_schema;  /* JSON text; the arguments are checked against it */
	const char *output_schema; /* JSON text; structuredContent matches it */
	bool read_only, destructive, idempotent, open_world;
	sbx_tool_fn run;
};

int sbx_tool_list_sandboxes(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out);
int sbx_tool_create_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out);
int sbx_tool_execute_python_code(const struct sbx_tool_ctx *ctx, struct json_object *args,
				 struct sbx_tool_out *out);
int sbx_tool_install_package(const struct sbx_tool_ctx *ctx, struct json_object *args,
			     struct sbx_tool_out *out);
int sbx_tool_check_package(const struct sbx_tool_ctx *ctx, struct json_object *args,
			   struct sbx_tool_out *out);
int sbx_tool_execute_terminal_command(const struct sbx_tool_ctx *ctx, struct json_object *args,
				      struct sbx_tool_out *out);
int sbx_tool_upload_file(const struct sbx_tool_ctx *ctx, struct json_object *args,
			 struct sbx_tool_out *out);
int sbx_tool_reset_python(const struct sbx_tool_ctx *ctx, struct json_object *args,
			  struct sbx_tool_out *out);
int sbx_tool_delete_sandbox(const struct sbx_tool_ctx *ctx, struct json_object *args,
			    struct sbx_tool_out *out);

/* Sets OUT->error to the formatted message: a refusal of the arguments
 * (the audit log's kind invalid_arguments); 0 or -ENOMEM. */
int sbx_tool_fail(struct sbx_tool_out *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets OUT->error to "<err->msg>. <hint>" (no hint when HINT is NULL or the
 * message already names what to do), its kind from ERR's code; 0 or
 * -ENOMEM. */
int sbx_tool_fail_err(struct sbx_tool_out *out, const struct sbx_error *err, const char *hint);
/* Tells the audit log that the call resolved SB (nothing when ctx->audit is NULL). */
void sbx_tool_audit_sandbox(const struct sbx_tool_ctx *ctx, const sbx_sandbox *sb);

/* What the call's context says (src/tools/context.c), for the handlers and
 * the resources. */

/* The tenant the call acts for: ctx->owner, SBX_OWNER_DEFAULT when unset. */
const char *sbx_tool_owner(const struct sbx_tool_ctx *ctx);
/* The base of links: ctx->public_url, else server.public_url, else
 * http://LISTEN:PORT written into BUF. */
const char *sbx_tool_public_url(const struct sbx_tool_ctx *ctx, char *buf, size_t size);
/* The signed link (base BASE) to RELPATH of sandbox ID, valid for
 * server.link_ttl from now (unsigned without ctx->link_key); NULL on
 * -ENOMEM. The caller frees it. */
char *sbx_tool_artifact_link(const struct sbx_tool_ctx *ctx, const char *base, const char *id,
			     const char *relpath);

/* json-c helpers: V is consumed; -ENOMEM when V is NULL or the add fails. */
int sbx_tools_put(struct json_object *o, const char *k, struct json_object *v);
int sbx_tools_append(struct json_object *a, struct json_object *v);

/* VERSION (a negotiated protocol version, may be NULL) is MIN or newer. */
bool sbx_tools_version_at_least(const char *version, const char *min);
#define SBX_TOOLS_V_STRUCTURED "2025-06-18"

#endif
