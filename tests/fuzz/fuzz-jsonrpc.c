/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the JSON-RPC layer (src/mcp/mcp.c). The input is an
 * HTTP body: sbx_mcp_input_measure, sbx_mcp_input_parse (its error JSON must
 * be JSON), the input's predicates and sbx_mcp_input_refuse, then the body
 * runs on a session of an sbx_mcp made without an engine: once before
 * initialize, then after an initialize with a version the input's length
 * picks. tools/call goes to a stand-in (sbx_mcp_set_tools_call) that logs and
 * sends progress with the arguments' text, so the notifications are built
 * from fuzzed bytes too. Checks: every reply and notification is valid JSON,
 * and what a parse keeps allocated stays within sbx_mcp_input_measure's
 * estimate.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <sanitizer/allocator_interface.h>

#include "sbx/mcp.h"
#include "mcp/mcp-internal.h"
#include "tools/tools.h"

static sbx_mcp *mcp;

static void must_be_json(const char *what, const char *text)
{
	struct json_tokener *tok;
	struct json_object *o;
	enum json_tokener_error e;

	if (!text)
		return;
	tok = json_tokener_new();
	if (!tok)
		return;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	e = json_tokener_get_error(tok);
	json_tokener_free(tok);
	if (e != json_tokener_success || !o) {
		fprintf(stderr, "fuzz-jsonrpc: %s is not JSON: %s\n", what, text);
		abort();
	}
	json_object_put(o);
}

static void notify(void *ctx, const char *json)
{
	(void)ctx;
	must_be_json("a notification", json);
}

static const struct sbx_mcp_notifier notifier = {.send = notify};

static int fake_tools_call(const struct sbx_tool_ctx *ctx, const char *name,
			   struct json_object *args, struct json_object **ret_result,
			   struct sbx_error *err)
{
	struct json_object *text = NULL;
	const char *s = "";
	size_t len = 0;

	if (args && json_object_object_get_ex(args, "text", &text) &&
	    json_object_is_type(text, json_type_string)) {
		s = json_object_get_string(text);
		len = (size_t)json_object_get_string_len(text);
	}
	if (strcmp(name, "fail") == 0)
		return sbx_error_set(err, -EIO, "failed: %.*s", (int)len, s);
	if (strcmp(name, "missing") == 0)
		return -ENOENT;
	if (strcmp(name, "log") == 0) {
		for (int l = SBX_LOG_DEBUG; l <= SBX_LOG_EMERGENCY; l++)
			sbx_tools_log(ctx, (enum sbx_log_level)l, "%.*s", (int)len, s);
	} else if (strcmp(name, "progress") == 0) {
		struct sbx_progress p;
		sbx_progress_init(&p, ctx);
		sbx_progress_step(&p, s);
		/* In pieces, splitting UTF-8 sequences anywhere. */
		for (size_t i = 0; i < len; i += 7)
			sbx_progress_output(&p, s + i, len - i < 7 ? len - i : 7);
		sbx_progress_flush(&p, false);
		sbx_progress_output(&p, s, len);
		sbx_progress_flush(&p, true);
		sbx_progress_release(&p);
	}
	(void)sbx_tools_cancelled(ctx);
	*ret_result = json_object_new_object();
	if (!*ret_result)
		return -ENOMEM;
	json_object_object_add(*ret_result, "content",
			       text ? json_object_get(text) : json_object_new_string(name));
	return 0;
}

static void run_on(sbx_mcp_session *s, const char *body, size_t len)
{
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_mcp_input *in = NULL;
	char *reply = NULL, *errjson = NULL;

	if (sbx_mcp_input_parse(body, len, &in, &errjson) < 0) {
		free(errjson);
		return;
	}
	if (sbx_mcp_session_run(s, in, &notifier, &reply, &err) == 0) {
		must_be_json("a reply", reply);
		free(reply);
	}
}

static void initialize(sbx_mcp_session *s, const char *version)
{
	char text[512];

	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
		 "{\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":"
		 "{\"name\":\"fuzz\",\"version\":\"1\"}}}",
		 version);
	run_on(s, text, strlen(text));
	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	run_on(s, text, strlen(text));
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sbx_mcp_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;

	(void)argc;
	(void)argv;
	if (sbx_mcp_new(&cfg, &mcp, &err) < 0)
		abort();
	sbx_mcp_set_tools_call(mcp, fake_tools_call);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const versions[] = {"2024-11-05", "2025-03-26", "2025-06-18",
					       "2025-11-25"};
	struct sbx_error err = SBX_ERROR_INIT;
	/* An exact copy: a read past the body is caught. */
	char *body = malloc(size ? size : 1);
	sbx_mcp_input *in = NULL;
	sbx_mcp_session *s = NULL;
	char *errjson = NULL, *reply = NULL;
	size_t estimate = 0, before;
	int m, r;

	if (!body)
		return 0;
	memcpy(body, data, size);
	m = sbx_mcp_input_measure(body, size, &estimate, &errjson);
	must_be_json("the measure error", errjson);
	free(errjson);
	errjson = NULL;
	before = __sanitizer_get_current_allocated_bytes();
	r = sbx_mcp_input_parse(body, size, &in, &errjson);
	if ((m == -E2BIG) != (r == -E2BIG))
		abort();
	if (r < 0) {
		if (!errjson)
			abort();
		must_be_json("the parse error", errjson);
		free(errjson);
		free(body);
		return 0;
	}
	{
		size_t held = __sanitizer_get_current_allocated_bytes() - before;
		if (held > estimate) {
			fprintf(stderr, "fuzz-jsonrpc: the parse holds %zu bytes, estimate %zu\n",
				held, estimate);
			abort();
		}
	}
	(void)sbx_mcp_input_has_requests(in);
	(void)sbx_mcp_input_is_initialize(in);
	(void)sbx_mcp_input_may_block(in);
	if (sbx_mcp_input_refuse(in, SBX_JSONRPC_SERVER_ERROR, "refused", &reply) == 0) {
		/* A reply only for a body with requests (an invalid member of a
		 * batch counts as one, but is not refused). */
		if (reply && !sbx_mcp_input_has_requests(in))
			abort();
		must_be_json("a refusal", reply);
		free(reply);
	}
	sbx_mcp_input_free(in);

	if (sbx_mcp_session_new(mcp,
				size % 3 ? SBX_MCP_TRANSPORT_STREAMABLE : SBX_MCP_TRANSPORT_SSE,
				SBX_OWNER_DEFAULT, NULL, &s, &err) < 0)
		abort();
	run_on(s, body, size); /* before initialize */
	initialize(s, versions[size % 4]);
	run_on(s, body, size);
	sbx_mcp_session_close(s);
	run_on(s, body, size); /* after the client has gone */
	sbx_mcp_session_unref(s);
	free(body);
	return 0;
}
