/* SPDX-License-Identifier: MIT */
/*
 * The MCP layer without HTTP and without an engine: JSON-RPC parsing and
 * validation, ids, batches by version, the lifecycle, version negotiation,
 * logging/setLevel, unknown methods and tools, and concurrent runs on one
 * session.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "sbx/common.h"
#include "sbx/mcp.h"
#include "tap.h"

static sbx_mcp *mcp;

/* Parses and runs TEXT on S; returns the reply (NULL when none). A parse
 * failure returns the error JSON and sets *ret_parse to the code. */
static char *run_text(sbx_mcp_session *s, const char *text, int *ret_parse)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_input *in = NULL;
	char *reply = NULL, *errjson = NULL;
	int r = sbx_mcp_input_parse(text, strlen(text), &in, &errjson);

	if (ret_parse)
		*ret_parse = r;
	if (r < 0)
		return errjson;
	if (sbx_mcp_session_run(s, in, NULL, &reply, &err) < 0)
		tap_bail(err.msg);
	return reply;
}

static struct json_object *run_json(sbx_mcp_session *s, const char *text)
{
	char *reply = run_text(s, text, NULL);
	struct json_object *o = reply ? json_tokener_parse(reply) : NULL;

	free(reply);
	return o;
}

/* The error code of a response object, 0 when it is a result. */
static int error_code(struct json_object *resp)
{
	struct json_object *e, *c;

	if (!json_object_object_get_ex(resp, "error", &e))
		return 0;
	return json_object_object_get_ex(e, "code", &c) ? json_object_get_int(c) : 1;
}

static const char *path_str(struct json_object *o, const char *a, const char *b)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, a, &v))
		return NULL;
	if (b && !json_object_object_get_ex(v, b, &v))
		return NULL;
	return json_object_get_string(v);
}

static sbx_mcp_session *new_session(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_session *s;

	if (sbx_mcp_session_new(mcp, SBX_MCP_TRANSPORT_STREAMABLE, SBX_OWNER_DEFAULT, &s, &err) < 0)
		tap_bail(err.msg);
	return s;
}

static const char init_fmt[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
			       "{\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":"
			       "{\"name\":\"t\",\"version\":\"1\"}}}";

/* Initializes S with VERSION; returns the negotiated version (static). */
static const char *initialize(sbx_mcp_session *s, const char *version)
{
	static char got[32];
	char text[512];
	struct json_object *o;

	snprintf(text, sizeof(text), init_fmt, version);
	o = run_json(s, text);
	snprintf(got, sizeof(got), "%s", o ? path_str(o, "result", "protocolVersion") ?: "" : "");
	json_object_put(o);
	return got;
}

static void test_parse(void)
{
	sbx_mcp_session *s = new_session();
	struct json_object *o;
	char *reply;
	int r;

	reply = run_text(s, "{\"jsonrpc\":\"2.0\",", &r);
	tap_is_int(r, -EBADMSG, "truncated JSON is -EBADMSG");
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_is_int(error_code(o), SBX_JSONRPC_PARSE_ERROR, "... answered -32700");
	tap_ok(o && json_object_object_get_ex(o, "id", NULL) &&
		   json_object_is_type(json_object_object_get(o, "id"), json_type_null),
	       "... with id null");
	json_object_put(o);
	free(reply);

	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} x", &r);
	tap_is_int(r, -EBADMSG, "trailing garbage is a parse error");
	free(reply);
	reply = run_text(s, "", &r);
	tap_is_int(r, -EBADMSG, "an empty body is a parse error");
	free(reply);
	reply = run_text(s, "42", &r);
	tap_is_int(r, -EINVAL, "a number is -EINVAL");
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_REQUEST, "... answered -32600");
	json_object_put(o);
	free(reply);
	reply = run_text(s, "[]", &r);
	tap_is_int(r, -EINVAL, "an empty batch is -EINVAL");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"1.0\",\"id\":7,\"method\":\"ping\"}", &r);
	tap_is_int(r, -EINVAL, "jsonrpc 1.0 is -EINVAL");
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_is_int(o ? json_object_get_int(json_object_object_get(o, "id")) : 0, 7,
		   "... and the readable id is echoed");
	json_object_put(o);
	free(reply);

	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", &r);
	tap_is_int(r, -EINVAL, "id null is invalid");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", &r);
	tap_is_int(r, -EINVAL, "a fractional id is invalid");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", &r);
	tap_is_int(r, -EINVAL, "an object id is invalid");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}", &r);
	tap_is_int(r, -EINVAL, "a numeric method is invalid");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":3}", &r);
	tap_is_int(r, -EINVAL, "scalar params are invalid");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0junk", &r);
	tap_is_int(r, 0, "a body ends at its length");
	free(reply);
	{
		static const char nul[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0x";
		sbx_mcp_input *in = NULL;
		char *ej = NULL;
		r = sbx_mcp_input_parse(nul, sizeof(nul) - 1, &in, &ej);
		tap_is_int(r, -EBADMSG, "an embedded NUL is a parse error");
		sbx_mcp_input_free(in);
		free(ej);
	}
	{
		char deep[400];
		memset(deep, '[', 200);
		memset(deep + 200, ']', 199);
		deep[399] = '\0';
		sbx_mcp_input *in = NULL;
		char *ej = NULL;
		r = sbx_mcp_input_parse(deep, 399, &in, &ej);
		tap_ok(r < 0, "deep nesting is refused");
		sbx_mcp_input_free(in);
		free(ej);
	}

	/* ids: string and integer echoed. */
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"ping\"}");
	tap_is_str(o ? path_str(o, "id", NULL) : NULL, "abc", "a string id is echoed");
	tap_ok(o && json_object_object_get_ex(o, "result", NULL), "ping works before initialize");
	json_object_put(o);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":9007199254740991,\"method\":\"ping\"}");
	tap_ok(o && json_object_get_int64(json_object_object_get(o, "id")) == 9007199254740991LL,
	       "a large integer id is echoed");
	json_object_put(o);
	sbx_mcp_session_unref(s);
}

static void test_lifecycle(void)
{
	sbx_mcp_session *s = new_session();
	struct json_object *o, *caps, *v;
	char *reply;
	int r;

	tap_ok(sbx_mcp_session_version(s) == NULL, "no version before initialize");
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
	tap_ok(error_code(o) != 0, "tools/list before initialize is an error");
	json_object_put(o);

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{"
			"\"name\":\"t\",\"version\":\"1\"}}}");
	tap_is_str(o ? path_str(o, "result", "protocolVersion") : NULL, "2025-06-18",
		   "initialize echoes 2025-06-18");
	tap_is_str(o ? path_str(o, "result", "serverInfo") ? "x" : NULL : NULL, "x",
		   "serverInfo present");
	v = NULL;
	if (o && json_object_object_get_ex(o, "result", &v))
		json_object_object_get_ex(v, "serverInfo", &v);
	tap_is_str(v ? path_str(v, "name", NULL) : NULL, "mcp-sandbox", "serverInfo.name");
	tap_is_str(v ? path_str(v, "version", NULL) : NULL, PACKAGE_VERSION, "serverInfo.version");
	caps = NULL;
	if (o && json_object_object_get_ex(o, "result", &v))
		json_object_object_get_ex(v, "capabilities", &caps);
	tap_ok(caps && json_object_object_get_ex(caps, "tools", NULL) &&
		   json_object_object_get_ex(caps, "logging", NULL) &&
		   !json_object_object_get_ex(caps, "resources", NULL),
	       "capabilities: tools and logging only");
	{
		const char *ins = o ? path_str(o, "result", "instructions") : NULL;
		tap_ok(ins && strstr(ins, "list_sandboxes") && strstr(ins, "create_sandbox") &&
			   strstr(ins, "install_package_in_sandbox") &&
			   strstr(ins, "check_package_installation_status") &&
			   strstr(ins, "execute_python_code") && strstr(ins, "savefig") &&
			   strstr(ins, "plt.show()") && strstr(ins, "/app/results"),
		       "instructions teach the workflow");
	}
	json_object_put(o);
	tap_is_str(sbx_mcp_session_version(s), "2025-06-18", "the session knows its version");

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-06-18\"}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_REQUEST, "a second initialize is an error");
	json_object_put(o);

	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &r);
	tap_ok(r == 0 && reply == NULL, "notifications/initialized gets no reply");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"method\":\"no/such/notification\"}", &r);
	tap_ok(r == 0 && reply == NULL, "an unknown notification gets no reply");
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &r);
	tap_ok(r == 0 && reply == NULL, "a response from the client is ignored");
	free(reply);

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"logging/setLevel\",\"params\":"
			"{\"level\":\"warning\"}}");
	tap_ok(o && error_code(o) == 0 && json_object_object_get_ex(o, "result", NULL),
	       "logging/setLevel warning -> {}");
	json_object_put(o);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"logging/setLevel\",\"params\":"
			"{\"level\":\"loud\"}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS, "logging/setLevel loud -> -32602");
	json_object_put(o);

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"resources/list\"}");
	tap_is_int(error_code(o), SBX_JSONRPC_METHOD_NOT_FOUND, "an unknown method -> -32601");
	json_object_put(o);

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}");
	v = NULL;
	if (o && json_object_object_get_ex(o, "result", &v))
		json_object_object_get_ex(v, "tools", &v);
	tap_ok(v && json_object_is_type(v, json_type_array), "tools/list returns a tools array");
	json_object_put(o);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/list\",\"params\":{"
			"\"cursor\":\"nope\"}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS, "a bad cursor -> -32602");
	json_object_put(o);

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{"
			"\"name\":\"no_such_tool\",\"arguments\":{}}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS, "an unknown tool -> -32602");
	json_object_put(o);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS, "tools/call without name -> -32602");
	json_object_put(o);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/call\",\"params\":{"
			"\"name\":\"x\",\"arguments\":[1]}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS,
		   "tools/call with array arguments -> -32602");
	json_object_put(o);

	/* Batches are refused outside 2025-03-26. */
	o = run_json(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
	tap_ok(o && json_object_is_type(o, json_type_object) &&
		   error_code(o) == SBX_JSONRPC_INVALID_REQUEST,
	       "a batch in 2025-06-18 -> -32600");
	json_object_put(o);
	sbx_mcp_session_unref(s);

	s = new_session();
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}");
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_PARAMS,
		   "initialize without protocolVersion -> -32602");
	json_object_put(o);
	tap_ok(sbx_mcp_session_version(s) == NULL, "... and the session stays uninitialized");
	sbx_mcp_session_unref(s);
}

static void test_versions(void)
{
	static const char *const versions[] = SBX_MCP_VERSIONS;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(versions); i++) {
		sbx_mcp_session *s = new_session();
		tap_is_str(initialize(s, versions[i]), versions[i], "version %s is echoed",
			   versions[i]);
		tap_ok(sbx_mcp_version_supported(versions[i]), "%s is supported", versions[i]);
		sbx_mcp_session_unref(s);
	}
	{
		sbx_mcp_session *s = new_session();
		tap_is_str(initialize(s, "2099-01-01"), SBX_MCP_VERSION_LATEST,
			   "an unknown version gets the latest");
		sbx_mcp_session_unref(s);
	}
	tap_ok(!sbx_mcp_version_supported("2024-10-07") && !sbx_mcp_version_supported(NULL),
	       "unknown versions are not supported");
}

static void test_batches(void)
{
	sbx_mcp_session *s = new_session();
	struct json_object *o;
	char *reply;
	int r;

	o = run_json(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-03-26\"}}]");
	tap_ok(o && json_object_is_type(o, json_type_object) &&
		   error_code(o) == SBX_JSONRPC_INVALID_REQUEST,
	       "initialize inside a batch is refused");
	json_object_put(o);
	tap_ok(sbx_mcp_session_version(s) == NULL, "... and does not initialize");

	tap_is_str(initialize(s, "2025-03-26"), "2025-03-26", "initialize 2025-03-26");
	o = run_json(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
			"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},"
			"{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"nope\"},"
			"{\"foo\":1},"
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-03-26\"}}]");
	tap_ok(o && json_object_is_type(o, json_type_array) && json_object_array_length(o) == 4,
	       "a batch in 2025-03-26 gets one response per request and invalid message");
	if (o && json_object_is_type(o, json_type_array) && json_object_array_length(o) == 4) {
		tap_is_int(error_code(json_object_array_get_idx(o, 0)), 0, "... ping ok");
		tap_is_int(error_code(json_object_array_get_idx(o, 1)),
			   SBX_JSONRPC_METHOD_NOT_FOUND, "... unknown method -32601");
		tap_is_int(error_code(json_object_array_get_idx(o, 2)), SBX_JSONRPC_INVALID_REQUEST,
			   "... invalid message -32600");
		tap_is_int(error_code(json_object_array_get_idx(o, 3)), SBX_JSONRPC_INVALID_REQUEST,
			   "... initialize in a batch -32600");
	} else {
		tap_skip(4, "no batch reply");
	}
	json_object_put(o);
	reply = run_text(s, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}]", &r);
	tap_ok(r == 0 && reply == NULL, "a batch of notifications gets no reply");
	free(reply);
	sbx_mcp_session_unref(s);
}

static void test_input_predicates(void)
{
	static const struct {
		const char *text;
		bool requests, init;
	} cases[] = {
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}", true, true},
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", true, false},
	    {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", false, false},
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", false, false},
	    {"[{\"jsonrpc\":\"2.0\",\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
	     "\"b\"}]",
	     true, false},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		sbx_mcp_input *in = NULL;
		char *ej = NULL;
		int r = sbx_mcp_input_parse(cases[i].text, strlen(cases[i].text), &in, &ej);
		tap_ok(r == 0 && sbx_mcp_input_has_requests(in) == cases[i].requests &&
			   sbx_mcp_input_is_initialize(in) == cases[i].init,
		       "predicates of %s", cases[i].text);
		sbx_mcp_input_free(in);
		free(ej);
	}
}

#define THREADS 8
#define ROUNDS 200

static void *hammer(void *arg)
{
	sbx_mcp_session *s = arg;
	long good = 0;

	for (int i = 0; i < ROUNDS; i++) {
		char text[128];
		struct json_object *o, *id;
		snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\"}", i,
			 i % 2 ? "ping" : "tools/list");
		o = run_json(s, text);
		if (o && error_code(o) == 0 && json_object_object_get_ex(o, "id", &id) &&
		    json_object_get_int(id) == i)
			good++;
		json_object_put(o);
	}
	return (void *)good;
}

static void test_concurrency(void)
{
	sbx_mcp_session *s = new_session();
	pthread_t t[THREADS];
	long total = 0;

	initialize(s, "2025-06-18");
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, hammer, sbx_mcp_session_ref(s));
	for (int i = 0; i < THREADS; i++) {
		void *good;
		pthread_join(t[i], &good);
		total += (long)good;
		sbx_mcp_session_unref(s);
	}
	tap_is_int(total, THREADS * ROUNDS, "%d threads x %d requests on one session", THREADS,
		   ROUNDS);
	sbx_mcp_session_unref(s);
}

int main(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_mcp_config cfg = {0};

	if (sbx_mcp_new(&cfg, &mcp, &err) < 0)
		tap_bail(err.msg);
	tap_ok(sbx_mcp_set_public_url(mcp, "http://127.0.0.1:1234/") == 0, "set the public url");
	test_parse();
	test_lifecycle();
	test_versions();
	test_batches();
	test_input_predicates();
	test_concurrency();
	sbx_mcp_free(mcp);
	return tap_done();
}
