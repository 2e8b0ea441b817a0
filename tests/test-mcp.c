/* SPDX-License-Identifier: MIT */
/*
 * The MCP layer without HTTP and without an engine: JSON-RPC parsing and
 * validation, the nesting bound (a balanced body MCP_JSON_DEPTH deep answered,
 * one level more a parse error), ids, batches by version, the lifecycle,
 * version negotiation, logging/setLevel, unknown methods and tools,
 * concurrent runs on one session; cancellation, progress and log messages with a stand-in for the
 * tools (sbx_mcp_set_tools_call); the value count of sbx_mcp_input_measure
 * and json-c's allocations within its estimate; sbx_mcp_input_refuse; a
 * client that has gone (the notifier's GONE, sbx_mcp_session_close)
 * cancelling like notifications/cancelled; the calls quota (quota.calls and
 * a key's calls=) over sessions of both transports, and its table.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <malloc.h>

#include "mcp/mcp-internal.h"
#include "tools/tools.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/mcp.h"
#include "sbx/utf8.h"
#include "http-client.h"
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

/* Asserts that TEXT on S is answered with error code CODE (0: a result). */
#define expect_code(s_, text_, code_, ...)                                                         \
	do {                                                                                       \
		struct json_object *_o = run_json((s_), (text_));                                  \
		tap_is_int(error_code(_o), (code_), __VA_ARGS__);                                  \
		json_object_put(_o);                                                               \
	} while (0)

static sbx_mcp_session *new_session(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_session *s;

	if (sbx_mcp_session_new(mcp, SBX_MCP_TRANSPORT_STREAMABLE, SBX_OWNER_DEFAULT, NULL, &s,
				&err) < 0)
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

	/* What each text parses to. */
	{
		static const struct {
			const char *text;
			int r;
			const char *what;
		} cases[] = {
		    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} x", -EBADMSG,
		     "trailing garbage is a parse error"},
		    {"", -EBADMSG, "an empty body is a parse error"},
		    {"[]", -EINVAL, "an empty batch is -EINVAL"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", -EINVAL,
		     "id null is invalid"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", -EINVAL,
		     "a fractional id is invalid"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", -EINVAL,
		     "an object id is invalid"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}", -EINVAL,
		     "a numeric method is invalid"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":3}", -EINVAL,
		     "scalar params are invalid"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0junk", 0,
		     "a body ends at its length"},
		    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}"
		     "}",
		     -EBADMSG, "a string that is not UTF-8 is a parse error"},
		};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
			reply = run_text(s, cases[i].text, &r);
			tap_is_int(r, cases[i].r, "%s", cases[i].what);
			free(reply);
		}
	}
	reply = run_text(s, "42", &r);
	tap_is_int(r, -EINVAL, "a number is -EINVAL");
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_is_int(error_code(o), SBX_JSONRPC_INVALID_REQUEST, "... answered -32600");
	json_object_put(o);
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"1.0\",\"id\":7,\"method\":\"ping\"}", &r);
	tap_is_int(r, -EINVAL, "jsonrpc 1.0 is -EINVAL");
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_is_int(o ? json_object_get_int(json_object_object_get(o, "id")) : 0, 7,
		   "... and the readable id is echoed");
	json_object_put(o);
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

/* Balanced bodies: exactly JSON_DEPTH_WANTED levels are parsed and answered; one
 * more is a parse error (-32700, id null, "nesting too deep"), and the
 * session answers on. */
static void test_depth(void)
{
	sbx_mcp_session *s = new_session();
	struct json_object *o;
	char *text, *reply;
	int r;

	for (int scalar = 0; scalar < 2; scalar++) {
		const char *inner = scalar ? "a number" : "an empty array";
		text = mcp_deep_ping(11, JSON_DEPTH_WANTED, scalar);
		reply = run_text(s, text, &r);
		tap_is_int(r, 0, "depth: a ping nested %d deep (innermost %s) is parsed",
			   JSON_DEPTH_WANTED, inner);
		o = reply ? json_tokener_parse(reply) : NULL;
		tap_ok(o && error_code(o) == 0 && json_object_object_get_ex(o, "result", NULL) &&
			   json_object_get_int(json_object_object_get(o, "id")) == 11,
		       "depth: ... and answered with its result: %s", reply ? reply : "no reply");
		json_object_put(o);
		free(reply);
		free(text);

		text = mcp_deep_ping(12, JSON_DEPTH_WANTED + 1, scalar);
		reply = run_text(s, text, &r);
		tap_is_int(r, -EBADMSG, "depth: one level more (%d, innermost %s) is -EBADMSG",
			   JSON_DEPTH_WANTED + 1, inner);
		o = reply ? json_tokener_parse(reply) : NULL;
		tap_is_int(error_code(o), SBX_JSONRPC_PARSE_ERROR, "depth: ... answered -32700");
		{
			struct json_object *e = NULL, *m = NULL;
			const char *msg = o && json_object_object_get_ex(o, "error", &e) &&
						  json_object_object_get_ex(e, "message", &m)
					      ? json_object_get_string(m)
					      : NULL;
			tap_ok(msg && strstr(msg, "nesting too deep"),
			       "depth: ... saying the nesting is too deep: %s", msg ? msg : "none");
		}
		tap_ok(o && json_object_object_get_ex(o, "id", NULL) &&
			   json_object_is_type(json_object_object_get(o, "id"), json_type_null),
		       "depth: ... with id null");
		json_object_put(o);
		free(reply);
		free(text);
	}
	/* A bare array: the top value is the first level. */
	{
		char deep[2 * JSON_DEPTH_WANTED + 3];
		sbx_mcp_input *in = NULL;
		char *ej = NULL;
		memset(deep, '[', JSON_DEPTH_WANTED);
		memset(deep + JSON_DEPTH_WANTED, ']', JSON_DEPTH_WANTED);
		r = sbx_mcp_input_parse(deep, 2 * JSON_DEPTH_WANTED, &in, &ej);
		tap_is_int(r, 0, "depth: %d nested arrays, balanced, are parsed",
			   JSON_DEPTH_WANTED);
		in = sbx_mcp_input_free(in);
		free(ej);
		ej = NULL;
		memset(deep, '[', JSON_DEPTH_WANTED + 1);
		memset(deep + JSON_DEPTH_WANTED + 1, ']', JSON_DEPTH_WANTED + 1);
		r = sbx_mcp_input_parse(deep, 2 * JSON_DEPTH_WANTED + 2, &in, &ej);
		tap_is_int(r, -EBADMSG, "depth: %d nested arrays, balanced, are -EBADMSG",
			   JSON_DEPTH_WANTED + 1);
		tap_ok(ej && strstr(ej, "nesting too deep"), "depth: ... saying so: %s",
		       ej ? ej : "none");
		sbx_mcp_input_free(in);
		free(ej);
	}
	expect_code(s, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"ping\"}", 0,
		    "depth: the session answers a ping after");
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
		   json_object_object_get_ex(caps, "resources", NULL) &&
		   !json_object_object_get_ex(caps, "prompts", NULL),
	       "capabilities: tools, logging and resources only");
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

	expect_code(s,
		    "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"initialize\",\"params\":{"
		    "\"protocolVersion\":\"2025-06-18\"}}",
		    SBX_JSONRPC_INVALID_REQUEST, "a second initialize is an error");

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
	expect_code(s,
		    "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"logging/setLevel\",\"params\":"
		    "{\"level\":\"loud\"}}",
		    SBX_JSONRPC_INVALID_PARAMS, "logging/setLevel loud -> -32602");

	expect_code(s, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"prompts/list\"}",
		    SBX_JSONRPC_METHOD_NOT_FOUND, "an unknown method -> -32601");

	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}");
	v = NULL;
	if (o && json_object_object_get_ex(o, "result", &v))
		json_object_object_get_ex(v, "tools", &v);
	tap_ok(v && json_object_is_type(v, json_type_array), "tools/list returns a tools array");
	json_object_put(o);
	expect_code(s,
		    "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/list\",\"params\":{"
		    "\"cursor\":\"nope\"}}",
		    SBX_JSONRPC_INVALID_PARAMS, "a bad cursor -> -32602");

	expect_code(s,
		    "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{"
		    "\"name\":\"no_such_tool\",\"arguments\":{}}}",
		    SBX_JSONRPC_INVALID_PARAMS, "an unknown tool -> -32602");
	expect_code(s, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{}}",
		    SBX_JSONRPC_INVALID_PARAMS, "tools/call without name -> -32602");
	{
		/* An error message cut to its buffer inside a character is still
		 * UTF-8 (tests/fuzz/fuzz-jsonrpc found the reply was not). */
		struct sbx_buf body = SBX_BUF_INIT;
		sbx_buf_appendf(&body, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"tools/call\","
				       "\"params\":{\"name\":\"");
		for (int i = 0; i < 400; i++)
			sbx_buf_append(&body, "\xc3\xa9", 2);
		sbx_buf_appendf(&body, "\"}}");
		char *long_reply = run_text(s, body.data, NULL);
		tap_ok(long_reply && strstr(long_reply, "Unknown tool") &&
			   sbx_utf8_valid(long_reply, strlen(long_reply)),
		       "an unknown tool's long name: the error is valid UTF-8");
		free(long_reply);
		sbx_buf_release(&body);
	}
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

	/* At most MCP_BATCH_MAX (64) messages. */
	{
		struct sbx_buf b = SBX_BUF_INIT;
		for (int n = 64; n <= 65; n++) {
			sbx_buf_release(&b);
			sbx_buf_append(&b, "[", 1);
			for (int i = 0; i < n; i++) {
				char one[64];
				snprintf(one, sizeof(one),
					 "%s{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}",
					 i ? "," : "", i + 1);
				sbx_buf_append(&b, one, strlen(one));
			}
			if (sbx_buf_append(&b, "]", 2) < 0)
				tap_bail("out of memory");
			reply = run_text(s, b.data, &r);
			if (n == 64)
				tap_ok(r == 0 && reply, "a batch of 64 pings is run");
			else
				tap_ok(r == -EINVAL && reply && strstr(reply, "batch too large"),
				       "a batch of 65 is refused as too large (%d %.80s)", r,
				       reply ? reply : "");
			free(reply);
		}
		sbx_buf_release(&b);
	}
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

/* PREFIX, then N times UNIT joined by SEP, then SUFFIX (malloc'd). */
static char *repeat(const char *prefix, const char *unit, const char *sep, size_t n,
		    const char *suffix)
{
	struct sbx_buf b = SBX_BUF_INIT;

	sbx_buf_append(&b, prefix, strlen(prefix));
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			sbx_buf_append(&b, sep, strlen(sep));
		sbx_buf_append(&b, unit, strlen(unit));
	}
	if (sbx_buf_append(&b, suffix, strlen(suffix)) < 0)
		tap_bail("out of memory");
	return sbx_buf_steal(&b);
}

/* Heap bytes in use (the main arena and mmapped chunks). */
static size_t heap_used(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* The value count of sbx_mcp_input_measure, before any parse. */
static void test_measure(void)
{
	char *ej = NULL, *text, *reply = NULL;
	sbx_mcp_input *in = NULL;
	size_t bytes = 0;
	int r;

	/* [1,1,...] of N ones holds N + 1 values (the array). */
	text = repeat("[", "1", ",", SBX_MCP_JSON_VALUES_MAX - 1, "]");
	r = sbx_mcp_input_measure(text, strlen(text), &bytes, &ej);
	tap_ok(r == 0 && bytes > 0, "%d values are accepted (%d, estimate %zu bytes)",
	       SBX_MCP_JSON_VALUES_MAX, r, bytes);
	free(text);
	free(ej);
	ej = NULL;
	text = repeat("[", "1", ",", SBX_MCP_JSON_VALUES_MAX, "]");
	r = sbx_mcp_input_measure(text, strlen(text), &bytes, &ej);
	tap_is_int(r, -E2BIG, "one value more is -E2BIG");
	tap_ok(ej && strstr(ej, "\"code\":-32600") && strstr(ej, "too many JSON values"),
	       "... with the JSON-RPC error that says so (%s)", ej ? ej : "none");
	free(ej);
	ej = NULL;
	r = sbx_mcp_input_parse(text, strlen(text), &in, &ej);
	tap_ok(r == -E2BIG && !in && ej, "sbx_mcp_input_parse refuses it too, before json-c");
	free(ej);
	ej = NULL;
	free(text);

	/* [{},{},...]: an object counts 9, its comma 1. */
	text = repeat("[", "{}", ",", SBX_MCP_JSON_VALUES_MAX / 10 - 1, "]");
	tap_is_int(sbx_mcp_input_measure(text, strlen(text), &bytes, &ej), 0,
		   "%d empty objects are accepted", SBX_MCP_JSON_VALUES_MAX / 10 - 1);
	free(text);
	text = repeat("[", "{}", ",", SBX_MCP_JSON_VALUES_MAX / 10, "]");
	tap_is_int(sbx_mcp_input_measure(text, strlen(text), &bytes, &ej), -E2BIG, "%d are refused",
		   SBX_MCP_JSON_VALUES_MAX / 10);
	free(ej);
	ej = NULL;
	free(text);

	/* Brackets, commas and colons inside strings are no values, escaped
	 * quotes included. */
	text = repeat("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"s\":\"",
		      "[{,:\\\"", "", SBX_MCP_JSON_VALUES_MAX, "\"}}");
	r = sbx_mcp_input_parse(text, strlen(text), &in, &ej);
	tap_ok(r == 0 && in, "%d brackets, commas and colons in a string are one value (%d %s)",
	       4 * SBX_MCP_JSON_VALUES_MAX, r, ej ? ej : "");
	in = sbx_mcp_input_free(in);
	free(ej);
	ej = NULL;
	free(text);

	/* What json-c takes stays within the estimate, for each shape. */
	{
		static const struct {
			const char *prefix, *unit, *sep, *suffix;
			size_t n;
		} shapes[] = {
		    {"[", "1", ",", "]", 49000},
		    {"[", "{}", ",", "]", 4900},
		    {"[", "[]", ",", "]", 24000},
		    {"[", "{\"a\":1}", ",", "]", 4000},
		    {"[", "\"abcdefgh\"", ",", "]", 40000},
		    {"[", "1.5e300", ",", "]", 40000},
		    {"[", "{\"k\":[true,null],\"l\":\"v\"}", ",", "]", 3000},
		    {"\"", "0123456789abcdef", "", "\"", 262144},
		};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(shapes); i++) {
			size_t before, used;
			char what[64];
			text = repeat(shapes[i].prefix, shapes[i].unit, shapes[i].sep, shapes[i].n,
				      shapes[i].suffix);
			r = sbx_mcp_input_measure(text, strlen(text), &bytes, &ej);
			before = heap_used();
			/* The tokener's errors are no concern here: only its memory. */
			{
				struct json_tokener *tok = json_tokener_new_ex(64);
				struct json_object *o =
				    json_tokener_parse_ex(tok, text, (int)strlen(text));
				used = heap_used() - before;
				json_object_put(o);
				json_tokener_free(tok);
			}
			snprintf(what, sizeof(what), "%zu x %s", shapes[i].n, shapes[i].unit);
			tap_ok(r == 0 && used <= bytes,
			       "%s: json-c takes %zu bytes, within the estimate of %zu", what, used,
			       bytes);
			free(ej);
			ej = NULL;
			free(text);
		}
	}

	/* The refusal of a body that is not run: an error per request. */
	text = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"},{\"jsonrpc\":\"2.0\","
	       "\"method\":\"notifications/initialized\"},{\"jsonrpc\":\"2.0\",\"id\":\"x\","
	       "\"method\":\"ping\"}]";
	if (tap_call(sbx_mcp_input_parse(text, strlen(text), &in, &ej), ej, "parse a batch") &&
	    tap_call(sbx_mcp_input_refuse(in, -32000, "no room", &reply), NULL, "refuse it"))
		tap_is_str(
		    reply,
		    "[{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":"
		    "\"no room\"}},{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-32000,"
		    "\"message\":\"no room\"}}]",
		    "... an error for each request, under its id");
	free(reply);
	reply = NULL;
	in = sbx_mcp_input_free(in);
	free(ej);
	ej = NULL;
	text = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"}";
	if (tap_call(sbx_mcp_input_parse(text, strlen(text), &in, &ej), ej, "parse a request") &&
	    tap_call(sbx_mcp_input_refuse(in, -32000, "no room", &reply), NULL, "refuse it"))
		tap_is_str(reply,
			   "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32000,\"message\":"
			   "\"no room\"}}",
			   "... one error response");
	free(reply);
	reply = NULL;
	in = sbx_mcp_input_free(in);
	free(ej);
	ej = NULL;
	text = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
	reply = (char *)"unset";
	if (tap_call(sbx_mcp_input_parse(text, strlen(text), &in, &ej), ej,
		     "parse a notification") &&
	    tap_call(sbx_mcp_input_refuse(in, -32000, "no room", &reply), NULL, "refuse it"))
		tap_ok(reply == NULL, "... nothing to answer");
	sbx_mcp_input_free(in);
	free(ej);
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

/* ---- cancellation, progress, log messages ---- */

/* What a notifier received, in order. */
#define NOTES_MAX 64
struct notes {
	pthread_mutex_t lock;
	int n;
	char *json[NOTES_MAX];
	atomic_bool gone; /* what the notifier's GONE answers */
};

static void notes_send(void *ctx, const char *json)
{
	struct notes *ns = ctx;

	pthread_mutex_lock(&ns->lock);
	if (ns->n < NOTES_MAX)
		ns->json[ns->n++] = strdup(json);
	pthread_mutex_unlock(&ns->lock);
}

static bool notes_gone(void *ctx)
{
	struct notes *ns = ctx;

	return atomic_load(&ns->gone);
}

static void notes_clear(struct notes *ns)
{
	for (int i = 0; i < ns->n; i++)
		free(ns->json[i]);
	ns->n = 0;
}

static struct json_object *note_params(struct notes *ns, int i, const char *method)
{
	struct json_object *o = i < ns->n ? json_tokener_parse(ns->json[i]) : NULL, *p = NULL;

	if (o && method &&
	    !(path_str(o, "method", NULL) && strcmp(path_str(o, "method", NULL), method) == 0)) {
		json_object_put(o);
		return NULL;
	}
	if (o && json_object_object_get_ex(o, "params", &p))
		json_object_get(p);
	json_object_put(o);
	return p;
}

/* "hold": runs until hold_release or its cancellation (10 s at most). */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int hold_running, hold_generation;

static void hold_run(const struct sbx_tool_ctx *ctx)
{
	int gen;

	pthread_mutex_lock(&hold_lock);
	gen = hold_generation;
	hold_running++;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
	for (int i = 0; i < 2000 && !sbx_tools_cancelled(ctx); i++) {
		pthread_mutex_lock(&hold_lock);
		bool released = hold_generation != gen;
		pthread_mutex_unlock(&hold_lock);
		if (released)
			break;
		sleep_ms(5);
	}
	pthread_mutex_lock(&hold_lock);
	hold_running--;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

/* Ends every hold running now. */
static void hold_release(void)
{
	pthread_mutex_lock(&hold_lock);
	hold_generation++;
	pthread_mutex_unlock(&hold_lock);
}

/* Waits until N holds run (5 s at most); true when they do. */
static bool hold_wait(int n)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&hold_lock);
	while (hold_running != n && pthread_cond_timedwait(&hold_cond, &hold_lock, &until) == 0)
		;
	ok = hold_running == n;
	pthread_mutex_unlock(&hold_lock);
	return ok;
}

/* Tools: "slow" runs until cancelled (at most 5 s) and then tries one more
 * notification; "progress" prints through sbx_progress; "log" logs at info
 * and at warning; anything else answers at once. */
static int fake_tools_call(const struct sbx_tool_ctx *ctx, const char *name,
			   struct json_object *args, struct json_object **ret_result,
			   struct sbx_error *err)
{
	(void)args;
	(void)err;
	if (strcmp(name, "slow") == 0) {
		if (slow_tool_run(ctx) && ctx->notifier)
			sbx_tools_log(ctx, SBX_LOG_ERROR, "after the cancellation");
	} else if (strcmp(name, "progress") == 0) {
		struct sbx_progress p;
		char big[10000];
		sbx_progress_init(&p, ctx);
		sbx_progress_step(&p, "started");
		sbx_progress_output(&p, "one\n", 4); /* within the interval: kept */
		sbx_progress_output(&p, "two\n", 4);
		sleep_ms(80);
		sbx_progress_flush(&p, false); /* "one\ntwo\n" */
		sleep_ms(80);
		sbx_progress_output(&p, "three\n", 6); /* sent at once */
		sleep_ms(80);
		sbx_progress_output(&p, "\xc3", 1); /* half a character: held */
		sleep_ms(80);
		sbx_progress_flush(&p, false);
		sbx_progress_output(&p, "\xa9!", 2); /* "é!": no newline, kept */
		sleep_ms(80);
		sbx_progress_flush(&p, false); /* sent */
		sleep_ms(80);
		memset(big, 'x', sizeof(big));
		sbx_progress_output(&p, big, sizeof(big)); /* capped */
		sbx_progress_flush(&p, true);
		sbx_progress_release(&p);
	} else if (strcmp(name, "log") == 0) {
		sbx_tools_log(ctx, SBX_LOG_INFO, "info %d", 1);
		sbx_tools_log(ctx, SBX_LOG_WARNING, "warning %d", 2);
	} else if (strcmp(name, "hold") == 0) {
		hold_run(ctx);
	} else if (strcmp(name, "big") == 0) {
		/* A result of 9 MiB: two fill a batch's responses. */
		size_t n = 9u << 20;
		char *text = malloc(n);
		struct json_object *c = json_object_new_object(), *a = json_object_new_array(),
				   *t = json_object_new_object();
		if (!text || !c || !a || !t)
			tap_bail("out of memory");
		memset(text, 'x', n);
		json_object_object_add(t, "type", json_object_new_string("text"));
		json_object_object_add(t, "text", json_object_new_string_len(text, (int)n));
		json_object_array_add(a, t);
		json_object_object_add(c, "content", a);
		free(text);
		*ret_result = c;
		return 0;
	} else if (strcmp(name, "fail") == 0) {
		return sbx_error_set(err, -EIO, "the fake tool failed");
	} else if (strcmp(name, "limits") == 0) {
		char text[160];
		const struct sbx_auth_limits *l = ctx->limits;
		snprintf(text, sizeof(text),
			 "{\"content\":[{\"type\":\"text\",\"text\":\"%s %" PRId64 " %" PRId64
			 " %" PRId64 " %" PRId64 " %" PRId64 "\"}]}",
			 ctx->owner, l ? l->sandboxes : -9, l ? l->calls : -9, l ? l->memory : -9,
			 l ? l->nano_cpus : -9, l ? l->installs : -9);
		*ret_result = json_tokener_parse(text);
		return *ret_result ? 0 : -ENOMEM;
	}
	*ret_result = json_tokener_parse("{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}");
	return *ret_result ? 0 : -ENOMEM;
}

struct bg_run {
	pthread_t thread;
	sbx_mcp_session *s;
	const char *text;
	struct notes *notes;
	char *reply;
};

static void *bg_main(void *arg)
{
	struct bg_run *b = arg;
	struct sbx_error err = SBX_ERROR_INIT;
	const struct sbx_mcp_notifier n = {.send = notes_send, .ctx = b->notes, .gone = notes_gone};
	sbx_mcp_input *in = NULL;
	char *ej = NULL;

	if (sbx_mcp_input_parse(b->text, strlen(b->text), &in, &ej) < 0 ||
	    sbx_mcp_session_run(b->s, in, b->notes ? &n : NULL, &b->reply, &err) < 0)
		tap_bail("bg run");
	return NULL;
}

/* Starts TEXT on S in a thread; when it calls the slow tool, waits until
 * that runs (5 s at most). */
static void bg_start(struct bg_run *b, sbx_mcp_session *s, const char *text, struct notes *notes)
{
	int before = slow_tool_started();

	memset(b, 0, sizeof(*b));
	b->s = s;
	b->text = text;
	b->notes = notes;
	if (pthread_create(&b->thread, NULL, bg_main, b) != 0)
		tap_bail("pthread_create");
	if (strstr(text, "\"name\":\"slow\""))
		slow_tool_wait_started(before + 1);
}

static char *bg_join(struct bg_run *b)
{
	pthread_join(b->thread, NULL);
	return b->reply;
}

static void test_cancel(void)
{
	sbx_mcp_session *s = new_session();
	struct notes ns = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct bg_run b;
	struct json_object *o;
	char *reply;
	int r;

	initialize(s, "2025-06-18");
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\"}}",
		 &ns);
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":8}}",
			 &r);
	tap_ok(r == 0 && !reply, "a cancellation of an unknown id gets no reply");
	free(reply);
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":\"7\",\"reason\":\"x\"}}",
			 NULL);
	free(reply);
	reply = run_text(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"}", NULL);
	free(reply);
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":null}}",
			 NULL);
	free(reply);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}");
	tap_ok(o && error_code(o) == 0, "a ping is answered while a tool runs");
	json_object_put(o);
	sleep_ms(50);
	tap_is_int(slow_tool_cancels(), 0,
		   "unknown ids, the string \"7\" for the integer 7 and no id cancel nothing");

	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":7,\"reason\":\"the user gave up\"}}",
			 &r);
	tap_ok(r == 0 && !reply, "notifications/cancelled for 7 gets no reply");
	free(reply);
	reply = bg_join(&b);
	tap_ok(reply == NULL, "the cancelled request gets no response (%s)",
	       reply ? reply : "none");
	free(reply);
	tap_is_int(slow_tool_cancels(), 1, "the tool saw ctx->cancelled");
	tap_is_int(ns.n, 0, "no notification goes out after the cancellation");
	notes_clear(&ns);

	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":7}}",
			 &r);
	tap_ok(r == 0 && !reply, "a cancellation of a finished request is ignored");
	free(reply);
	o = run_json(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
			"\"name\":\"quick\"}}");
	tap_is_str(o ? path_str(o, "result", NULL) ? "result" : "none" : "none", "result",
		   "the same id later gets its response");
	json_object_put(o);

	/* A string id. */
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":\"call-1\",\"method\":\"tools/call\",\"params\":{"
		 "\"name\":\"slow\"}}",
		 NULL);
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":\"call-1\"}}",
			 NULL);
	free(reply);
	reply = bg_join(&b);
	tap_ok(reply == NULL && slow_tool_cancels() == 2, "a string id is cancelled too");
	free(reply);
	sbx_mcp_session_unref(s);

	/* In a batch (2025-03-26) only the cancelled request's response is left out. */
	s = new_session();
	initialize(s, "2025-03-26");
	bg_start(&b, s,
		 "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\"}},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]",
		 NULL);
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":1}}",
			 NULL);
	free(reply);
	reply = bg_join(&b);
	o = reply ? json_tokener_parse(reply) : NULL;
	tap_ok(o && json_object_is_type(o, json_type_array) && json_object_array_length(o) == 1 &&
		   json_object_get_int(
		       json_object_object_get(json_object_array_get_idx(o, 0), "id")) == 2,
	       "a batch answers the other request only (%s)", reply ? reply : "none");
	json_object_put(o);
	free(reply);
	sbx_mcp_session_unref(s);
}

/* A client that has gone cancels like notifications/cancelled: the whole
 * session (sbx_mcp_session_close: its SSE stream closed, deleted, expired,
 * the server stopping) or one run (its notifier's GONE: the POST's
 * connection closed). */
static void test_gone(void)
{
	sbx_mcp_session *s = new_session();
	struct notes ns = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct bg_run b, b2;
	int started, cancels;
	char *reply;

	/* The notifier's GONE: this run's requests, not the session's others. */
	initialize(s, "2025-03-26");
	cancels = slow_tool_cancels();
	bg_start(&b, s,
		 "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\"}},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
		 "\"name\":\"slow\"}},{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}]",
		 &ns);
	bg_start(&b2, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"quick\"}}",
		 NULL);
	reply = bg_join(&b2);
	tap_ok(reply && strstr(reply, "\"id\":4,\"result\""),
	       "another run on the session is answered meanwhile (%s)", reply ? reply : "none");
	free(reply);
	started = slow_tool_started();
	atomic_store(&ns.gone, true);
	reply = bg_join(&b);
	tap_ok(reply == NULL, "a run whose notifier says GONE gets no reply (%s)",
	       reply ? reply : "none");
	free(reply);
	tap_is_int(slow_tool_cancels(), cancels + 1, "... its running tool saw ctx->cancelled");
	tap_is_int(slow_tool_started(), started,
		   "... and the batch's next call and ping were not run");
	tap_is_int(ns.n, 0, "... no notification went out after it");
	notes_clear(&ns);
	sbx_mcp_session_unref(s);

	/* sbx_mcp_session_close: every request running, and every later one. */
	s = new_session();
	initialize(s, "2025-06-18");
	atomic_store(&ns.gone, false);
	cancels = slow_tool_cancels();
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\"}}",
		 &ns);
	bg_start(&b2, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"slow\"}}",
		 NULL);
	sbx_mcp_session_close(s);
	reply = bg_join(&b);
	tap_ok(reply == NULL, "sbx_mcp_session_close: a running call gets no response (%s)",
	       reply ? reply : "none");
	free(reply);
	reply = bg_join(&b2);
	tap_ok(reply == NULL, "... nor the other one (%s)", reply ? reply : "none");
	free(reply);
	tap_is_int(slow_tool_cancels(), cancels + 2, "... both tools saw ctx->cancelled");
	tap_is_int(ns.n, 0, "... no notification went out after it");
	started = slow_tool_started();
	reply = run_text(s,
			 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"slow\"}}",
			 NULL);
	tap_ok(reply == NULL && slow_tool_started() == started,
	       "... a call on the closed session is not run and not answered (%s)",
	       reply ? reply : "none");
	free(reply);
	notes_clear(&ns);
	sbx_mcp_session_unref(s);
}

static void test_progress(void)
{
	sbx_mcp_session *s = new_session();
	struct notes ns = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct json_object *p;
	struct bg_run b;
	char *reply, expect[4200];
	int64_t last = -1;
	bool increasing = true, tokens = true;
	static const char *const messages[] = {"started", "one\ntwo\n", "three\n", "\xc3\xa9!"};

	initialize(s, "2025-06-18");
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"progress\",\"_meta\":{\"progressToken\":\"tok\"}}}",
		 &ns);
	reply = bg_join(&b);
	tap_ok(reply && strstr(reply, "\"done\""), "the progress tool answers");
	free(reply);
	tap_is_int(ns.n, 5, "five progress notifications");
	for (int i = 0; i < ns.n; i++) {
		p = note_params(&ns, i, "notifications/progress");
		int64_t v = p ? json_object_get_int64(json_object_object_get(p, "progress")) : -1;
		increasing &= p && v > last;
		last = v;
		tokens &= p && path_str(p, "progressToken", NULL) &&
			  strcmp(path_str(p, "progressToken", NULL), "tok") == 0;
		if (i < (int)SBX_ARRAY_SIZE(messages))
			tap_is_str(p ? path_str(p, "message", NULL) : NULL, messages[i],
				   "progress %d: its message", i);
		json_object_put(p);
	}
	tap_ok(increasing && ns.n > 0, "progress is strictly increasing");
	tap_ok(tokens, "every notification carries the token");
	memset(expect, 'x', SBX_PROGRESS_MSG_MAX);
	snprintf(expect + SBX_PROGRESS_MSG_MAX, sizeof(expect) - SBX_PROGRESS_MSG_MAX,
		 "\n[%d more bytes not shown here]", 10000 - SBX_PROGRESS_MSG_MAX);
	p = note_params(&ns, 4, "notifications/progress");
	tap_is_str(p ? path_str(p, "message", NULL) : NULL, expect,
		   "a long chunk is capped with a note");
	json_object_put(p);
	notes_clear(&ns);

	/* No token, no progress. */
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"progress\"}}",
		 &ns);
	free(bg_join(&b));
	tap_is_int(ns.n, 0, "without a progressToken nothing is sent");
	notes_clear(&ns);
	sbx_mcp_session_unref(s);

	/* 2024-11-05: progress without message, an integer token. */
	s = new_session();
	initialize(s, "2024-11-05");
	bg_start(&b, s,
		 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"progress\",\"_meta\":{\"progressToken\":42}}}",
		 &ns);
	free(bg_join(&b));
	p = note_params(&ns, 1, "notifications/progress");
	tap_ok(p && json_object_get_int(json_object_object_get(p, "progressToken")) == 42 &&
		   !json_object_object_get_ex(p, "message", NULL),
	       "2024-11-05: an integer token, no message field");
	json_object_put(p);
	notes_clear(&ns);
	sbx_mcp_session_unref(s);
}

static void test_log_level(void)
{
	sbx_mcp_session *s = new_session();
	struct notes ns = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct json_object *p;
	struct bg_run b;
	const char *call = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
			   "\"name\":\"log\"}}";

	initialize(s, "2025-06-18");
	bg_start(&b, s, call, &ns);
	free(bg_join(&b));
	tap_is_int(ns.n, 2, "at the default level (info) both messages go out");
	p = note_params(&ns, 0, "notifications/message");
	tap_ok(p && strcmp(path_str(p, "level", NULL) ?: "", "info") == 0 &&
		   strcmp(path_str(p, "data", NULL) ?: "", "info 1") == 0 &&
		   strcmp(path_str(p, "logger", NULL) ?: "", "mcp-sandbox") == 0,
	       "notifications/message {level, logger, data}");
	json_object_put(p);
	notes_clear(&ns);
	free(run_text(s,
		      "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"logging/setLevel\",\"params\":{"
		      "\"level\":\"warning\"}}",
		      NULL));
	bg_start(&b, s, call, &ns);
	free(bg_join(&b));
	p = note_params(&ns, 0, "notifications/message");
	tap_ok(ns.n == 1 && p && strcmp(path_str(p, "level", NULL) ?: "", "warning") == 0,
	       "after logging/setLevel warning only the warning goes out");
	json_object_put(p);
	notes_clear(&ns);
	sbx_mcp_session_unref(s);
}

/* The session keeps the limits of the key it was opened with, and every
 * tools/call sees them; a session opened without any has none (-1). */
static void test_limits(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_auth_limits l = {2, 3, 1 << 20, 500000000, 1};
	sbx_mcp_session *s, *d = new_session();
	char *reply;
	const char *call = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
			   "\"name\":\"limits\"}}";

	if (sbx_mcp_session_new(mcp, SBX_MCP_TRANSPORT_SSE, "alice", &l, &s, &err) < 0)
		tap_bail(err.msg);
	l.sandboxes = 99; /* copied: the session's stay */
	initialize(s, "2025-06-18");
	initialize(d, "2025-06-18");
	reply = run_text(s, call, NULL);
	tap_ok(reply && strstr(reply, "\"alice 2 3 1048576 500000000 1\""),
	       "a tools/call sees the owner and the limits the session was opened with");
	free(reply);
	reply = run_text(d, call, NULL);
	tap_ok(reply && strstr(reply, "\"default -1 -1 -1 -1 -1\""),
	       "a session opened without limits has none (-1 each)");
	free(reply);
	sbx_mcp_session_unref(s);
	sbx_mcp_session_unref(d);
}

/* ---- the calls quota ---- */

static const char hold_call[] = "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
				"\"params\":{\"name\":\"%s\"}}";

/* A session of M for TENANT with KEY's limits (NULL: none), initialized. */
static sbx_mcp_session *tenant_session(sbx_mcp *m, enum sbx_mcp_transport tr, const char *tenant,
				       const struct sbx_auth_limits *key)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_session *s;

	if (sbx_mcp_session_new(m, tr, tenant, key, &s, &err) < 0)
		tap_bail(err.msg);
	initialize(s, "2025-06-18");
	return s;
}

/* Starts the tool NAME on S in a thread (B's text lives in TEXT) and, for
 * "hold", waits until N holds run. */
static void hold_start(struct bg_run *b, sbx_mcp_session *s, char *text, size_t size, int id, int n)
{
	snprintf(text, size, hold_call, id, "hold");
	memset(b, 0, sizeof(*b));
	b->s = s;
	b->text = text;
	if (pthread_create(&b->thread, NULL, bg_main, b) != 0)
		tap_bail("pthread_create");
	if (!hold_wait(n))
		tap_diag("  %d holds do not run", n);
}

/* Runs tool NAME on S now; the reply (owned). */
static char *call_now(sbx_mcp_session *s, const char *name, int id)
{
	char text[256];

	snprintf(text, sizeof(text), hold_call, id, name);
	return run_text(s, text, NULL);
}

/* The reply is a result (not a JSON-RPC error) with isError true whose text
 * has every NEEDLE (NULL-terminated). */
static bool refused_with(const char *reply, const char *const *needles)
{
	struct json_object *o = reply ? json_tokener_parse(reply) : NULL, *res, *v, *content;
	const char *text = NULL;
	bool ok;

	ok = o && json_object_object_get_ex(o, "result", &res) &&
	     json_object_object_get_ex(res, "isError", &v) && json_object_get_boolean(v) &&
	     json_object_object_get_ex(res, "content", &content) &&
	     (text = path_str(json_object_array_get_idx(content, 0), "text", NULL));
	for (; ok && *needles; needles++)
		ok = strstr(text, *needles) != NULL;
	json_object_put(o);
	return ok;
}

/* [quota] calls = 2 on a second server: a tenant without a key limit runs
 * 2 at once over two sessions of both transports, the third refused at once
 * as a tool error naming the quota, its source, the count and what to do;
 * another tenant is not affected; a key's limit replaces the default
 * (lower, higher, and 0); every way a call ends frees its slot (its end, a
 * tool that fails, an unknown tool, notifications/cancelled, the session
 * closed); the table keeps no tenant without calls. */
static void test_calls_quota(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings set;
	struct sbx_mcp_config cfg = {.settings = &set};
	const struct sbx_auth_limits one = {-1, 1, -1, -1, -1}, three = {-1, 3, -1, -1, -1};
	const struct sbx_auth_limits zero = {-1, 0, -1, -1, -1};
	sbx_mcp *m;
	sbx_call_table *table;
	sbx_mcp_session *a1, *a2, *bob, *carol, *dave, *eve;
	struct bg_run b[4];
	char texts[4][256], *reply;
	static const char *const at_limit[] = {
	    "tenant \"alice\" may run at most 2 tool calls at once", "; the server's quota.calls)",
	    "runs 2", "wait for one of them to end", NULL};
	static const char *const key_limit[] = {
	    "tenant \"carol\" may run at most 1 tool call at once",
	    "; the calls limit of its API key)", "runs 1", NULL};
	static const char *const none[] = {"tenant \"eve\" may not call tools",
					   "the calls limit of its API key is 0",
					   "ask the server's administrator", NULL};

	sbx_settings_init(&set);
	if (sbx_settings_set(&set, "quota.calls=2", &err) < 0 || sbx_mcp_new(&cfg, &m, &err) < 0)
		tap_bail(err.msg);
	sbx_mcp_set_tools_call(m, fake_tools_call);
	table = sbx_mcp_call_table(m);
	a1 = tenant_session(m, SBX_MCP_TRANSPORT_STREAMABLE, "alice", NULL);
	a2 = tenant_session(m, SBX_MCP_TRANSPORT_SSE, "alice", NULL);
	bob = tenant_session(m, SBX_MCP_TRANSPORT_STREAMABLE, "bob", NULL);

	hold_start(&b[0], a1, texts[0], sizeof(texts[0]), 10, 1);
	hold_start(&b[1], a2, texts[1], sizeof(texts[1]), 11, 2);
	tap_is_int(sbx_call_table_count(table, "alice"), 2,
		   "calls: alice runs 2 calls, one per session and transport");
	reply = call_now(a1, "quick", 12);
	tap_ok(refused_with(reply, at_limit),
	       "calls: her third is refused at once as a tool error naming quota.calls, the "
	       "count and what to do: %s",
	       reply ? reply : "none");
	free(reply);
	reply = call_now(a2, "quick", 13);
	tap_ok(refused_with(reply, at_limit), "calls: ... on her other session too");
	free(reply);
	reply = call_now(bob, "quick", 14);
	tap_ok(reply && strstr(reply, "\"text\":\"done\""), "calls: bob is not affected: %s",
	       reply ? reply : "none");
	free(reply);
	tap_is_int(sbx_call_table_count(table, "alice"), 2, "calls: refusals took no slot");

	/* A cancelled call frees its slot. */
	reply = run_text(a1,
			 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
			 "\"requestId\":10}}",
			 NULL);
	free(reply);
	free(bg_join(&b[0]));
	tap_is_int(sbx_call_table_count(table, "alice"), 1,
		   "calls: a cancelled call freed its slot");
	hold_start(&b[0], a1, texts[0], sizeof(texts[0]), 15, 2);
	tap_is_int(sbx_call_table_count(table, "alice"), 2, "calls: ... which the next call takes");

	/* A closed session (its client gone) frees its slots. */
	sbx_mcp_session_close(a2);
	free(bg_join(&b[1]));
	tap_is_int(sbx_call_table_count(table, "alice"), 1,
		   "calls: a call whose client went (session closed) freed its slot");

	/* A tool that fails, an unknown tool: the slot comes back. */
	reply = call_now(a1, "fail", 16);
	tap_ok(reply && strstr(reply, "\"error\""), "calls: a failing tool is an error");
	free(reply);
	reply = call_now(a1, "no-such-tool", 17);
	free(reply);
	tap_is_int(sbx_call_table_count(table, "alice"), 1,
		   "calls: a failed call and an unknown tool freed their slots");
	hold_release();
	free(bg_join(&b[0]));
	tap_is_int(sbx_call_table_count(table, "alice"), 0,
		   "calls: a call that ended freed its slot");
	tap_is_int(sbx_call_table_tenants(table), 0, "calls: no tenant left in the table");

	/* A key's limit replaces the default: lower, higher, 0. */
	carol = tenant_session(m, SBX_MCP_TRANSPORT_SSE, "carol", &one);
	hold_start(&b[0], carol, texts[0], sizeof(texts[0]), 20, 1);
	reply = call_now(carol, "quick", 21);
	tap_ok(refused_with(reply, key_limit),
	       "calls: carol's key (calls=1) is below the default: her second is refused, naming "
	       "her key: %s",
	       reply ? reply : "none");
	free(reply);
	hold_release();
	free(bg_join(&b[0]));
	dave = tenant_session(m, SBX_MCP_TRANSPORT_STREAMABLE, "dave", &three);
	for (int i = 0; i < 3; i++)
		hold_start(&b[i], dave, texts[i], sizeof(texts[i]), 30 + i, i + 1);
	tap_is_int(sbx_call_table_count(table, "dave"), 3,
		   "calls: dave's key (calls=3) is above the default: 3 run at once");
	reply = call_now(dave, "quick", 33);
	tap_ok(refused_with(reply, (const char *const[]){"at most 3 tool calls", "runs 3", NULL}),
	       "calls: ... his fourth is refused");
	free(reply);
	hold_release();
	for (int i = 0; i < 3; i++)
		free(bg_join(&b[i]));
	eve = tenant_session(m, SBX_MCP_TRANSPORT_STREAMABLE, "eve", &zero);
	reply = call_now(eve, "quick", 40);
	tap_ok(refused_with(reply, none), "calls: a key with calls=0 may call no tool: %s",
	       reply ? reply : "none");
	free(reply);
	tap_is_int(sbx_call_table_tenants(table), 0, "calls: the table is empty again");

	sbx_mcp_session_unref(a1);
	sbx_mcp_session_unref(a2);
	sbx_mcp_session_unref(bob);
	sbx_mcp_session_unref(carol);
	sbx_mcp_session_unref(dave);
	sbx_mcp_session_unref(eve);
	sbx_mcp_free(m);
	sbx_settings_release(&set);
}

/* The table alone: bounded at SBX_CALL_TABLE_MAX tenants, an entry freed
 * with its tenant's last call. */
static void test_call_table(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_call_table *t = NULL;
	char name[32];
	bool all = true;
	int r;

	if (sbx_call_table_new(&t) < 0)
		tap_bail("sbx_call_table_new");
	for (int i = 0; i < SBX_CALL_TABLE_MAX && all; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		all = sbx_call_table_begin(t, name, -1, false, &err) == 0;
	}
	tap_ok(all && sbx_call_table_tenants(t) == SBX_CALL_TABLE_MAX,
	       "call table: %d tenants with a call each", SBX_CALL_TABLE_MAX);
	r = sbx_call_table_begin(t, "one-more", -1, false, &err);
	tap_ok(r == -EBUSY && strstr(err.msg, "try again"),
	       "call table: one more tenant is refused: %s", err.msg);
	tap_ok(sbx_call_table_begin(t, "t7", -1, false, &err) == 0 &&
		   sbx_call_table_count(t, "t7") == 2,
	       "call table: a tenant already in it may still call");
	for (int i = 0; i < SBX_CALL_TABLE_MAX; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		sbx_call_table_end(t, name);
	}
	tap_ok(sbx_call_table_tenants(t) == 1 && sbx_call_table_count(t, "t7") == 1,
	       "call table: every entry freed with its last call but t7's");
	sbx_call_table_end(t, "t7");
	tap_is_int(sbx_call_table_tenants(t), 0, "call table: empty");
	sbx_call_table_free(t);
}

/* A batch's bounds on what it holds (the fake tools: "big" answers 9 MiB). */
static void test_batch_bounds(void)
{
	sbx_mcp_session *s = new_session();
	struct json_object *o;

	tap_is_str(initialize(s, "2025-03-26"), "2025-03-26", "initialize 2025-03-26");
	/* Once the responses held reach MCP_BATCH_REPLY_MAX (16 MiB), the
	 * batch's further calls are refused; a ping still runs. */
	o = run_json(s,
		     "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
		     "\"name\":\"big\"}},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
		     "\"params\":{\"name\":\"big\"}},{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
		     "\"tools/call\",\"params\":{\"name\":\"big\"}},{\"jsonrpc\":\"2.0\",\"id\":4,"
		     "\"method\":\"ping\"}]");
	if (tap_ok(o && json_object_is_type(o, json_type_array) && json_object_array_length(o) == 4,
		   "a batch of three 9 MiB calls and a ping: four responses")) {
		struct json_object *third = json_object_array_get_idx(o, 2), *e, *m;
		tap_ok(error_code(json_object_array_get_idx(o, 0)) == 0 &&
			   error_code(json_object_array_get_idx(o, 1)) == 0,
		       "... the first two run");
		tap_ok(error_code(third) == SBX_JSONRPC_INVALID_REQUEST &&
			   json_object_object_get_ex(third, "error", &e) &&
			   json_object_object_get_ex(e, "message", &m) &&
			   strstr(json_object_get_string(m), "responses hold"),
		       "... the third is refused: the batch's responses hold 18 MiB");
		tap_is_int(error_code(json_object_array_get_idx(o, 3)), 0, "... the ping runs");
	} else {
		tap_skip(3, "no batch reply");
	}
	json_object_put(o);
	/* One resources/read per batch: its file is held until the batch ends. */
	o = run_json(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":{"
			"\"uri\":\"sandbox://x/a\"}},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
			"\"resources/read\",\"params\":{\"uri\":\"sandbox://x/a\"}}]");
	if (tap_ok(o && json_object_is_type(o, json_type_array) && json_object_array_length(o) == 2,
		   "a batch of two resources/read: two responses")) {
		struct json_object *second = json_object_array_get_idx(o, 1), *e, *m;
		tap_ok(json_object_object_get_ex(second, "error", &e) &&
			   json_object_object_get_ex(e, "message", &m) &&
			   strstr(json_object_get_string(m), "at most one per batch"),
		       "... the second is refused: at most one per batch");
	} else {
		tap_skip(1, "no batch reply");
	}
	json_object_put(o);
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
	test_depth();
	test_lifecycle();
	test_versions();
	test_batches();
	test_input_predicates();
	test_measure();
	test_concurrency();
	sbx_mcp_set_tools_call(mcp, fake_tools_call);
	test_cancel();
	test_gone();
	test_progress();
	test_log_level();
	test_limits();
	test_calls_quota();
	test_call_table();
	test_batch_bounds();
	sbx_mcp_free(mcp);
	return tap_done();
}
