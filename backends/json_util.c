/* SPDX-License-Identifier: MIT */
/* Small json-c helpers for reading engine replies and building bodies. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-internal.h"
#include "sbx/common.h"

const char *sbx_json_str(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

int64_t sbx_json_int(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v))
		return 0;
	return json_object_get_int64(v);
}

bool sbx_json_bool(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v))
		return false;
	return json_object_get_boolean(v);
}

struct json_object *sbx_json_path(struct json_object *o, const char *a, const char *b)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, a, &v))
		return NULL;
	if (b && (!v || !json_object_object_get_ex(v, b, &v)))
		return NULL;
	return v;
}

char **sbx_json_to_strv(struct json_object *a)
{
	size_t n = json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
	char **v = calloc(n + 1, sizeof(*v));
	size_t k = 0;

	for (size_t i = 0; v && i < n; i++) {
		struct json_object *e = json_object_array_get_idx(a, i);
		if (!json_object_is_type(e, json_type_string))
			continue;
		if (!(v[k++] = strdup(json_object_get_string(e))))
			return sbx_strv_free(v);
	}
	return v;
}

bool sbx_json_strv_has(struct json_object *a, const char *s)
{
	size_t n = json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;

	for (size_t i = 0; i < n; i++) {
		const char *e = json_object_get_string(json_object_array_get_idx(a, i));
		if (e && !strcmp(e, s))
			return true;
	}
	return false;
}

struct json_object *sbx_json_storage_size(int64_t bytes)
{
	struct json_object *so = json_object_new_object();
	char size[32];

	snprintf(size, sizeof(size), "%lld", (long long)bytes);
	if (so)
		json_object_object_add(so, "size", json_object_new_string(size));
	return so;
}

struct json_object *sbx_json_strv(const char *const *v)
{
	struct json_object *a = json_object_new_array();
	for (; a && v && *v; v++)
		json_object_array_add(a, json_object_new_string(*v));
	return a;
}

struct json_object *sbx_json_labels(const struct sbx_kv *kv, size_t n)
{
	struct json_object *o = json_object_new_object();
	for (size_t i = 0; o && i < n; i++)
		json_object_object_add(o, kv[i].key,
				       json_object_new_string(kv[i].value ? kv[i].value : ""));
	return o;
}

struct json_object *sbx_json_ulimits(const struct sbx_ulimit *u, size_t n, const char *name_key,
				     const char *soft_key, const char *hard_key)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; a && i < n; i++) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, name_key, json_object_new_string(u[i].name));
		json_object_object_add(o, soft_key, json_object_new_int64(u[i].soft));
		json_object_object_add(o, hard_key, json_object_new_int64(u[i].hard));
		json_object_array_add(a, o);
	}
	return a;
}

void sbx_json_putp(struct json_object **j)
{
	json_object_put(*j);
}

struct json_object *sbx_json_env_map(const char *const *kv)
{
	struct json_object *o = json_object_new_object();

	for (; o && kv && *kv; kv++) {
		const char *eq = strchr(*kv, '=');
		char *k = eq ? strndup(*kv, (size_t)(eq - *kv)) : strdup(*kv);
		if (k)
			json_object_object_add(o, k, json_object_new_string(eq ? eq + 1 : ""));
		free(k);
	}
	return o;
}

struct json_object *sbx_json_label_filters(const struct sbx_kv *labels, size_t n)
{
	struct json_object *filters = json_object_new_object(), *list = json_object_new_array();

	if (!filters || !list) {
		json_object_put(filters);
		json_object_put(list);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		char *f = NULL;
		if (asprintf(&f, "%s=%s", labels[i].key, labels[i].value ? labels[i].value : "") <
		    0)
			f = NULL;
		json_object_array_add(list, json_object_new_string(f ? f : ""));
		free(f);
	}
	json_object_object_add(filters, "label", list);
	return filters;
}

bool sbx_json_labels_match(struct json_object *have, const struct sbx_kv *labels, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *v = sbx_json_str(have, labels[i].key);

		if (!v || strcmp(v, labels[i].value ? labels[i].value : "") != 0)
			return false;
	}
	return true;
}
