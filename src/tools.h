/* SPDX-License-Identifier: MIT */
/*
 * The seven tools, as the MCP layer (src/mcp.c) sees them. tools.c owns
 * their names, schemas and results; it reaches containers only through the
 * sandbox manager (include/sbx/sandbox.h). Internal to src/.
 */
#ifndef SBX_TOOLS_H
#define SBX_TOOLS_H

#include <json-c/json.h>

#include "sbx/error.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

/* What one tools/call runs with. */
struct sbx_tool_ctx {
	sbx_manager *manager;
	const struct sbx_settings *settings;
	const char *owner;			 /* the tenant the session acts for */
	const char *public_url;			 /* base of artifact links, no trailing slash */
	const char *protocol_version;		 /* negotiated: newer result fields are left out */
	const struct sbx_mcp_notifier *notifier; /* may be NULL */
	struct json_object *progress_token;	 /* params._meta.progressToken, or NULL */
};

/* The `tools` array of tools/list for VERSION (title, outputSchema and
 * annotations only from 2025-06-18 on). New reference, never NULL but on
 * -ENOMEM. */
struct json_object *sbx_tools_list(const char *version);

/* Runs tool NAME with ARGUMENTS (an object, or NULL when absent) and fills
 * *ret_result with the CallToolResult object {content, isError?,
 * structuredContent?}. A tool that ran and failed (bad arguments, unknown
 * sandbox, engine down) is a success of this call with isError: true and a
 * message that says what to do. Fails with -ENOENT only when no tool has that
 * name (the MCP layer answers -32602), or with -ENOMEM. */
int sbx_tools_call(const struct sbx_tool_ctx *ctx, const char *name, struct json_object *arguments,
		   struct json_object **ret_result, struct sbx_error *err);

#endif
