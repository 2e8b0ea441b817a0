/* SPDX-License-Identifier: MIT */
/*
 * What the tests that call tools in-process share (test-tools, test-quota):
 * a tools/call's result as they read it, the call itself through
 * sbx_tools_call with its arguments as JSON text, and a string member of a
 * JSON object. Each test checks the result its own way. Test-only.
 */
#ifndef SBX_TESTS_TOOL_CALL_H
#define SBX_TESTS_TOOL_CALL_H

#include <stdbool.h>

#include <json-c/json.h>

#include "tools/tools.h"
#include "sbx/common.h"

struct call {
	struct json_object *res; /* the CallToolResult */
	struct json_object *obj; /* the parsed text of a successful result */
	bool is_error;
	const char *text; /* content[0].text */
};

/* Zeroes C, then calls tool NAME with ARGS (JSON text or NULL; bad JSON
 * bails out) in CTX; the result (owned by C) into C->res. 0 or the call's
 * error, in ERR. The other fields of C are the caller's to fill. */
int tool_call_run(const struct sbx_tool_ctx *ctx, const char *name, const char *args,
		  struct call *c, struct sbx_error *err);
/* Frees what C holds and zeroes it. */
void call_release(struct call *c);
/* The string member KEY of object O (may be NULL), or NULL. */
const char *str_at(struct json_object *o, const char *key);

#endif
