/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "tool-call.h"
#include "tap.h"

int tool_call_run(const struct sbx_tool_ctx *ctx, const char *name, const char *args,
		  struct call *c, struct sbx_error *err)
{
	struct json_object *a = args ? json_tokener_parse(args) : NULL;
	int r;

	memset(c, 0, sizeof(*c));
	if (args && !a)
		tap_bail("bad JSON in the test");
	r = sbx_tools_call(ctx, name, a, &c->res, err);
	json_object_put(a);
	return r;
}

void call_release(struct call *c)
{
	json_object_put(c->res);
	json_object_put(c->obj);
	memset(c, 0, sizeof(*c));
}

const char *str_at(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}
