/* SPDX-License-Identifier: MIT */
/* placeholder until the tools land: no tools */
#include <errno.h>

#include "tools.h"

struct json_object *sbx_tools_list(const char *version)
{
	(void)version;
	return json_object_new_array();
}

int sbx_tools_call(const struct sbx_tool_ctx *ctx, const char *name,
		   struct json_object *arguments, struct json_object **ret_result,
		   struct sbx_error *err)
{
	return sbx_error_set(err, -ENOENT, "unknown tool: %s", name);
}
