/* SPDX-License-Identifier: MIT */
/*
 * The tools against a real engine: tests/test-tools TYPE URL [IMAGE].
 * A real sandbox manager under a server.instance unique to this run; every
 * tool is called through sbx_tools_call with parsed JSON arguments, for each
 * protocol version where the shape differs. Results are checked against the
 * tool's own outputSchema. The suite ends by checking that no container of
 * this run is left.
 *
 * The install cases use a second manager whose sandboxes use network host
 * and tests/pkgindex.py on 127.0.0.1 as the package index.
 *
 * GET /ready runs against the engine reached through a counting relay
 * (tests/tcp-relay.c): its answer is cached for a second, and it turns 503
 * once the relay stops, in words that do not show the engine's address (nor
 * do the tools' errors and /ready the socket of an absent engine).
 *
 * Through the HTTP front on the real manager: a Python call sleeping 3000 s
 * is cancelled when its client goes (the POST's connection closed, as JSON
 * or as an event stream; the session deleted; the SSE stream closed), the
 * sandbox answering again within seconds; a call waiting for the busy
 * sandbox is cancelled while it waits.
 *
 * The audit log (test_audit): what the tools report (the sandbox resolved or
 * made, an error's kind), and the lines of real calls through the HTTP front.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/tools.h"
#include "sbx/artifact.h"
#include "sbx/audit.h"
#include "sbx/common.h"
#include "sbx/crypto.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "http-client.h"
#include "pkg-index.h"
#include "engine-tls.h"
#include "tap.h"
#include "tcp-relay.h"
#include "tool-call.h"

#define PUBLIC_URL "http://127.0.0.1:8765"

static const char *const versions[] = SBX_MCP_VERSIONS;
static const char *const tool_names[] = {
    "list_sandboxes",
    "create_sandbox",
    "execute_python_code",
    "install_package_in_sandbox",
    "check_package_installation_status",
    "execute_terminal_command",
    "upload_file_to_sandbox",
    "reset_python_interpreter",
    "delete_sandbox",
};

static sbx_engine *engine;
static sbx_link_key *link_key; /* signs the links of call_as, and of the HTTP fronts here */
static char instance[64], instance2[80], upload_dir[64] = "";
static struct json_object *schemas; /* tools/list of the newest version */
static int rc;			    /* the last call's return, read after it in tap_ok */
static size_t count_instance(const char *inst);

/* ---- calling a tool (struct call, str_at: tool-call.h) ---- */

static int64_t int_at(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v))
		return -999;
	return json_object_get_int64(v);
}

static bool bool_at(struct json_object *o, const char *key)
{
	struct json_object *v;
	return o && json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

static bool has(struct json_object *o, const char *key)
{
	return o && json_object_object_get_ex(o, key, NULL);
}

/* What call_as passes as the notifier, progress token, cancellation hook
 * and log level (usually none). */
static const struct sbx_tool_notifier *notifier;
static struct json_object *progress_token;
static bool (*cancel_fn)(void *ud);
static enum sbx_log_level log_level = SBX_LOG_INFO;
static char notified[1024];
/* Every notification since the last notes_clear, with when it came. */
#define NOTES_MAX 256
static char *notes[NOTES_MAX];
static int64_t notes_ms[NOTES_MAX];
static int n_notes;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void record_notification(void *ctx, const char *json)
{
	(void)ctx;
	snprintf(notified, sizeof(notified), "%s", json);
	if (n_notes < NOTES_MAX) {
		notes_ms[n_notes] = mono_ms();
		notes[n_notes++] = strdup(json);
	}
}

static void notes_clear(void)
{
	for (int i = 0; i < n_notes; i++)
		free(notes[i]);
	n_notes = 0;
}

/* Mini JSON Schema: type, properties, required, additionalProperties: false,
 * items, enum. Returns true when VALUE matches; WHY says where not. */
static bool validate(struct json_object *schema, struct json_object *value, const char *where,
		     char *why, size_t n)
{
	const char *type = str_at(schema, "type");
	struct json_object *props, *req, *items, *en;
	enum json_type t = json_object_get_type(value);

	if (type) {
		bool ok =
		    (!strcmp(type, "object") && t == json_type_object) ||
		    (!strcmp(type, "array") && t == json_type_array) ||
		    (!strcmp(type, "string") && t == json_type_string) ||
		    (!strcmp(type, "boolean") && t == json_type_boolean) ||
		    (!strcmp(type, "integer") && t == json_type_int) ||
		    (!strcmp(type, "number") && (t == json_type_int || t == json_type_double));
		if (!ok) {
			snprintf(why, n, "%s: not %s", where, type);
			return false;
		}
	}
	if (json_object_object_get_ex(schema, "enum", &en)) {
		bool found = false;
		for (size_t i = 0; i < json_object_array_length(en); i++)
			found |= !strcmp(json_object_get_string(json_object_array_get_idx(en, i)),
					 json_object_get_string(value));
		if (!found) {
			snprintf(why, n, "%s: %s not in enum", where,
				 json_object_get_string(value));
			return false;
		}
	}
	if (t == json_type_object && json_object_object_get_ex(schema, "properties", &props)) {
		if (json_object_object_get_ex(schema, "required", &req))
			for (size_t i = 0; i < json_object_array_length(req); i++) {
				const char *k =
				    json_object_get_string(json_object_array_get_idx(req, i));
				if (!has(value, k)) {
					snprintf(why, n, "%s: required %s missing", where, k);
					return false;
				}
			}
		json_object_object_foreach(value, k, v)
		{
			struct json_object *ps;
			char sub[256];
			if (!json_object_object_get_ex(props, k, &ps)) {
				snprintf(why, n, "%s: extra property %s", where, k);
				return false;
			}
			snprintf(sub, sizeof(sub), "%s.%s", where, k);
			if (!validate(ps, v, sub, why, n))
				return false;
		}
	}
	if (t == json_type_array && json_object_object_get_ex(schema, "items", &items))
		for (size_t i = 0; i < json_object_array_length(value); i++) {
			char sub[256];
			snprintf(sub, sizeof(sub), "%s[%zu]", where, i);
			if (!validate(items, json_object_array_get_idx(value, i), sub, why, n))
				return false;
		}
	return true;
}

static struct json_object *tool_in(struct json_object *list, const char *name)
{
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		struct json_object *t = json_object_array_get_idx(list, i);
		if (!strcmp(str_at(t, "name"), name))
			return t;
	}
	return NULL;
}

/* The key limits call_as passes (NULL: none). */
static const struct sbx_auth_limits *call_limits;
static struct sbx_tool_audit *call_audit; /* call_as's ctx.audit */

/* Calls NAME with ARGS (JSON text, or NULL for no arguments) as OWNER
 * speaking VERSION. Checks the result's shape for that version: one text
 * item first; on success the text parses to an object that matches the
 * outputSchema and equals structuredContent (2025-06-18+) or there is no
 * structuredContent (older); errors carry no structuredContent. */
static int call_as(sbx_manager *m, const struct sbx_settings *s, const char *owner,
		   const char *version, const char *name, const char *args, struct call *c)
{
	struct sbx_tool_ctx ctx = {.manager = m,
				   .settings = s,
				   .owner = owner,
				   .limits = call_limits,
				   .public_url = PUBLIC_URL,
				   .link_key = link_key,
				   .protocol_version = version,
				   .notifier = notifier,
				   .progress_token = progress_token,
				   .cancelled = cancel_fn,
				   .log_level = log_level,
				   .audit = call_audit};
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *content, *sc;
	bool structured = strcmp(version, "2025-06-18") >= 0;
	char why[512] = "";
	int r = tool_call_run(&ctx, name, args, c, &err);

	if (r < 0)
		return r;
	c->is_error = bool_at(c->res, "isError");
	if (!json_object_object_get_ex(c->res, "content", &content) ||
	    json_object_array_length(content) < 1 ||
	    strcmp(str_at(json_object_array_get_idx(content, 0), "type"), "text") != 0) {
		tap_ok(0, "%s: content[0] is a text item", name);
		return -EBADMSG;
	}
	c->text = str_at(json_object_array_get_idx(content, 0), "text");
	json_object_object_get_ex(c->res, "structuredContent", &sc);
	if (c->is_error) {
		if (sc)
			tap_ok(0, "%s: an error carries no structuredContent", name);
		return 0;
	}
	c->obj = json_tokener_parse(c->text);
	if (!c->obj || !json_object_is_type(c->obj, json_type_object)) {
		tap_ok(0, "%s: the text of a result is a JSON object: %s", name, c->text);
		return -EBADMSG;
	}
	if (structured != (sc != NULL) || (sc && !json_object_equal(sc, c->obj)))
		tap_ok(0, "%s (%s): structuredContent %s", name, version,
		       structured ? "equals the text" : "is absent");
	if (!validate(json_object_object_get(tool_in(schemas, name), "outputSchema"), c->obj, name,
		      why, sizeof(why)))
		tap_ok(0, "%s: result matches its outputSchema: %s", name, why);
	return 0;
}

static sbx_manager *mgr;
static struct sbx_settings settings;

static int call(const char *name, const char *args, struct call *c)
{
	return call_as(mgr, &settings, "default", SBX_MCP_VERSION_LATEST, name, args, c);
}

/* Expects an isError result whose text contains NEEDLE. */
static void expect_error(const char *name, const char *args, const char *needle, const char *what)
{
	struct call c;
	int r = call(name, args, &c);
	if (!tap_ok(r == 0 && c.is_error && c.text && strstr(c.text, needle), "%s: %s", name, what))
		tap_diag("  r=%d isError=%d text: %s", r, c.is_error, c.text ? c.text : "-");
	else {
		char one_line[301];
		snprintf(one_line, sizeof(one_line), "%s", c.text);
		for (char *p = one_line; *p; p++)
			if (*p == '\n')
				*p = ' ';
		tap_diag("  %s", one_line);
	}
	call_release(&c);
}

/* ---- tools/list ---- */

static void test_list(void)
{
	for (size_t v = 0; v < SBX_ARRAY_SIZE(versions); v++) {
		struct json_object *list = sbx_tools_list(versions[v]);
		bool newer = strcmp(versions[v], "2025-06-18") >= 0;
		bool annotated = strcmp(versions[v], "2025-03-26") >= 0;
		bool names_ok, shapes_ok = true;

		names_ok = list && json_object_array_length(list) == SBX_ARRAY_SIZE(tool_names);
		for (size_t i = 0; names_ok && i < SBX_ARRAY_SIZE(tool_names); i++) {
			struct json_object *t = json_object_array_get_idx(list, i), *in, *props;
			const char *d = str_at(t, "description");
			names_ok = !strcmp(str_at(t, "name"), tool_names[i]);
			in = json_object_object_get(t, "inputSchema");
			props = json_object_object_get(in, "properties");
			shapes_ok &= d && strlen(d) > 80 && in && props &&
				     json_object_is_type(props, json_type_object) &&
				     !strcmp(str_at(in, "type"), "object") &&
				     json_object_object_get_ex(in, "additionalProperties", NULL) &&
				     !json_object_get_boolean(
					 json_object_object_get(in, "additionalProperties"));
			shapes_ok &= has(t, "title") == newer && has(t, "outputSchema") == newer &&
				     has(t, "annotations") == annotated;
			if (newer)
				shapes_ok &= !strcmp(
				    str_at(json_object_object_get(t, "outputSchema"), "type"),
				    "object");
		}
		tap_ok(names_ok, "%s: tools/list names the tools in order", versions[v]);
		tap_ok(shapes_ok,
		       "%s: descriptions, object inputSchemas; title/outputSchema %s, "
		       "annotations %s",
		       versions[v], newer ? "present" : "absent", annotated ? "present" : "absent");
		json_object_put(list);
	}
	{
		struct json_object *list = sbx_tools_list("2025-06-18");
		struct json_object *ann =
		    json_object_object_get(tool_in(list, "list_sandboxes"), "annotations");
		struct json_object *inst = json_object_object_get(
		    tool_in(list, "install_package_in_sandbox"), "annotations");
		tap_ok(bool_at(ann, "readOnlyHint") && bool_at(inst, "openWorldHint") &&
			   !bool_at(inst, "readOnlyHint") && has(inst, "destructiveHint") &&
			   !bool_at(inst, "destructiveHint"),
		       "annotations: list is read-only, install is open-world and not destructive");
		tap_ok(strstr(str_at(tool_in(list, "execute_python_code"), "description"),
			      "savefig") != NULL,
		       "the python description tells to save plots with savefig");
		json_object_put(list);
	}
	{
		struct sbx_tool_ctx ctx = {.manager = mgr,
					   .settings = &settings,
					   .owner = "default",
					   .public_url = PUBLIC_URL,
					   .protocol_version = SBX_MCP_VERSION_LATEST};
		struct json_object *res = NULL;
		struct sbx_error err = SBX_ERROR_INIT;
		tap_is_int(sbx_tools_call(&ctx, "no_such_tool", NULL, &res, &err), -ENOENT,
			   "an unknown tool is -ENOENT (%s)", err.msg);
		tap_ok(res == NULL, "and gives no result");
	}
}

/* ---- bad arguments (no sandbox needed) ---- */

static void test_bad_arguments(void)
{
	expect_error("execute_python_code", "[1,2]", "must be a JSON object", "arguments an array");
	expect_error("execute_python_code", "\"print(1)\"", "must be a JSON object",
		     "arguments a string");
	expect_error("execute_python_code", NULL, "missing required argument 'sandbox_id'",
		     "no arguments at all");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\"}",
		     "missing required argument 'code'", "code missing");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":5}",
		     "'code' must be a string, not a number", "code: 5");
	expect_error("execute_python_code", "{\"sandbox_id\":null,\"code\":\"1\"}",
		     "'sandbox_id' must be a string, not null", "sandbox_id: null");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":\"\"}",
		     "'code' must not be empty", "empty code");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":\"1\",\"timeout\":-1}",
		     "'timeout' is out of range", "negative timeout");
	expect_error("execute_python_code",
		     "{\"sandbox_id\":\"x\",\"code\":\"1\",\"timeout\":\"30\"}",
		     "'timeout' must be a number", "timeout as a string");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":\"1\",\"cwd\":\"/\"}",
		     "unknown argument 'cwd'", "an unknown argument");
	expect_error("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":\"a\\u0000b\"}", "NUL",
		     "a NUL in the code");
	expect_error("execute_python_code",
		     "{\"sandbox_id\":\"x\",\"code\":\"1\",\"timeout\":3601}", "at most 3600",
		     "a timeout over an hour");
	expect_error(
	    "execute_terminal_command",
	    "{\"sandbox_id\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\","
	    "\"command\":\"ls\"}",
	    "'sandbox_id' is too long", "an over-long sandbox_id");
	{
		struct json_object *a = json_object_new_object();
		char *big = malloc(1000002);
		memset(big, 'x', 1000001);
		big[1000001] = '\0';
		json_object_object_add(a, "sandbox_id", json_object_new_string("x"));
		json_object_object_add(a, "code", json_object_new_string(big));
		expect_error("execute_python_code", json_object_to_json_string(a),
			     "'code' is too long", "code over a million characters");
		json_object_put(a);
		free(big);
	}
	expect_error("list_sandboxes", "{\"all\":true}", "list_sandboxes takes no arguments",
		     "list takes no arguments");
	expect_error("create_sandbox", "{\"name\":7}", "'name' must be a string", "name: 7");
	expect_error(
	    "create_sandbox",
	    "{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaa\"}",
	    "too long", "an over-long name");
	expect_error("create_sandbox", "{\"name\":\"../../etc\"}", "invalid sandbox name",
		     "a name with slashes");
	expect_error("execute_terminal_command", "{\"sandbox_id\":\"x\"}",
		     "missing required argument 'command'", "command missing");
	expect_error("execute_terminal_command", "{\"sandbox_id\":\"x\",\"command\":[\"ls\"]}",
		     "'command' must be a string, not an array", "command as an array");
	expect_error("install_package_in_sandbox", "{\"sandbox_id\":\"x\"}",
		     "missing required argument 'package_name'", "package_name missing");
	expect_error("check_package_installation_status",
		     "{\"sandbox_id\":\"x\",\"package_name\":{}}",
		     "'package_name' must be a string, not an object", "package_name an object");
	expect_error("upload_file_to_sandbox", "{\"sandbox_id\":\"x\"}",
		     "missing required argument 'local_file_path'", "local_file_path missing");
	expect_error("upload_file_to_sandbox",
		     "{\"sandbox_id\":\"x\",\"local_file_path\":\"/a\",\"dest_path\":false}",
		     "'dest_path' must be a string", "dest_path: false");
	{
		/* Refused before the sandbox is looked up ("x" is none): a
		 * '.' or '..' part, or a place beside /app/results and /tmp. */
		static const char *const dests[] = {
		    "/app/results/../../etc", "/tmp/../etc", "/app/results/./x",
		    "/app/resultsx",	      "/tmpx/y",     "/etc"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(dests); i++) {
			char args[256], what[96];
			snprintf(args, sizeof(args),
				 "{\"sandbox_id\":\"x\",\"local_file_path\":\"a\",\"dest_path\":"
				 "\"%s\"}",
				 dests[i]);
			snprintf(what, sizeof(what), "dest_path %s is refused", dests[i]);
			expect_error("upload_file_to_sandbox", args, "is not allowed", what);
		}
	}
	expect_error("execute_terminal_command",
		     "{\"sandbox_id\":\"no-such-sandbox\",\"command\":\"ls\"}", "list_sandboxes",
		     "an unknown sandbox says to call list_sandboxes");
	expect_error("check_package_installation_status",
		     "{\"sandbox_id\":\"no-such-sandbox\",\"package_name\":\"numpy\"}",
		     "create_sandbox", "an unknown sandbox says to call create_sandbox");
	{
		static const char *const hostile[] = {
		    "x; rm -rf /",
		    "--index-url=http://evil.example/simple",
		    "git+https://example.com/x.git",
		    "../../etc/passwd",
		    "pkg @ file:///etc/passwd",
		    "-e .",
		    "requests\nnumpy",
		    "$(id)",
		    "evil-1.0-py3-none-any.whl",
		    "evil-1.0.tar.gz",
		};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(hostile); i++) {
			struct json_object *a = json_object_new_object();
			json_object_object_add(a, "sandbox_id", json_object_new_string("x"));
			json_object_object_add(a, "package_name",
					       json_object_new_string(hostile[i]));
			expect_error(i % 2 ? "install_package_in_sandbox"
					   : "check_package_installation_status",
				     json_object_to_json_string(a), "invalid package_name",
				     "a hostile package name is refused before anything runs");
			json_object_put(a);
		}
	}
}

/* ---- with a sandbox ---- */

static char sandbox_id[SBX_SANDBOX_ID_MAX + 1];

static void test_create_and_list(void)
{
	struct call c;
	char args[256];

	if (call("create_sandbox", "{\"name\":\"tools-a\"}", &c) < 0 || c.is_error)
		tap_bail(c.text ? c.text : "create_sandbox failed");
	snprintf(sandbox_id, sizeof(sandbox_id), "%s", str_at(c.obj, "sandbox_id"));
	tap_ok(sandbox_id[0] != '\0', "create_sandbox gives a sandbox_id: %s", sandbox_id);
	tap_is_str(str_at(c.obj, "name"), "tools-a", "and the name asked for");
	tap_is_str(str_at(c.obj, "status"), "running", "and status running");
	tap_ok(str_at(c.obj, "image") && strstr(str_at(c.obj, "image"), "mcp-sandbox"),
	       "and the image: %s", str_at(c.obj, "image"));
	call_release(&c);

	expect_error("create_sandbox", "{\"name\":\"tools-a\"}", "already exists",
		     "a second sandbox of the same name is refused");

	rc = call("list_sandboxes", "{}", &c);
	tap_ok(rc == 0 && !c.is_error, "list_sandboxes");
	{
		struct json_object *arr = json_object_object_get(c.obj, "sandboxes"), *mine = NULL;
		for (size_t i = 0; i < json_object_array_length(arr); i++)
			if (!strcmp(str_at(json_object_array_get_idx(arr, i), "sandbox_id"),
				    sandbox_id))
				mine = json_object_array_get_idx(arr, i);
		tap_is_int(int_at(c.obj, "count"), 1, "count is 1");
		tap_ok(json_object_object_get_ex(c.obj, "tenant_egress_bytes_in", NULL) &&
			   int_at(c.obj, "tenant_egress_bytes_in") == 0 &&
			   int_at(c.obj, "tenant_egress_bytes_out") == 0,
		       "the tenant's egress bytes, none yet");
		tap_ok(mine != NULL, "the list holds the new sandbox");
		tap_is_str(str_at(mine, "name"), "tools-a", "with its name");
		tap_ok(str_at(mine, "created") && strlen(str_at(mine, "created")) == 20 &&
			   str_at(mine, "created")[10] == 'T' && str_at(mine, "created")[19] == 'Z',
		       "created is ISO 8601 UTC: %s", str_at(mine, "created"));
		tap_ok(str_at(mine, "expires") && strlen(str_at(mine, "expires")) == 20 &&
			   strcmp(str_at(mine, "expires"), str_at(mine, "last_used")) > 0,
		       "expires (ISO 8601 UTC) is after last_used: %s > %s",
		       str_at(mine, "expires"), str_at(mine, "last_used"));
	}
	call_release(&c);

	/* The same call for an old protocol: no structuredContent (call_as checks). */
	rc = call_as(mgr, &settings, "default", "2024-11-05", "list_sandboxes", NULL, &c);
	tap_ok(rc == 0 && !c.is_error && !has(c.res, "structuredContent"),
	       "2024-11-05: a result without structuredContent");
	call_release(&c);
	rc = call_as(mgr, &settings, "someone-else", SBX_MCP_VERSION_LATEST, "list_sandboxes", NULL,
		     &c);
	tap_ok(rc == 0 && int_at(c.obj, "count") == 0, "another owner sees no sandboxes");
	call_release(&c);
	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"id\"}", sandbox_id);
	rc = call_as(mgr, &settings, "someone-else", SBX_MCP_VERSION_LATEST,
		     "execute_terminal_command", args, &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "list_sandboxes"),
	       "another owner's sandbox is not found: %s", c.text);
	call_release(&c);
}

static struct json_object *file_named(struct json_object *obj, const char *path)
{
	struct json_object *files = json_object_object_get(obj, "files");
	for (size_t i = 0; i < json_object_array_length(files); i++)
		if (!strcmp(str_at(json_object_array_get_idx(files, i), "path"), path))
			return json_object_array_get_idx(files, i);
	return NULL;
}

static void test_python(void)
{
	struct call c;
	struct json_object *a = json_object_new_object(), *f, *content;
	const char *code = "import os\n"
			   "import matplotlib\n"
			   "matplotlib.use('Agg')\n"
			   "import matplotlib.pyplot as plt\n"
			   "os.makedirs('plots', exist_ok=True)\n"
			   "plt.plot([1, 2, 3], [1, 4, 9])\n"
			   "plt.savefig('plots/p.png')\n"
			   "print('plotted', 6 * 7)\n";

	json_object_object_add(a, "sandbox_id", json_object_new_string(sandbox_id));
	json_object_object_add(a, "code", json_object_new_string(code));
	rc = call("execute_python_code", json_object_to_json_string(a), &c);
	tap_ok(rc == 0 && !c.is_error, "execute_python_code with a plot: %s",
	       c.is_error ? c.text : "ok");
	json_object_put(a);
	tap_diag("  %.600s", c.text);
	tap_is_str(str_at(c.obj, "stdout"), "plotted 42\n", "stdout");
	tap_is_int(int_at(c.obj, "exit_code"), 0, "exit code 0");
	tap_ok(!bool_at(c.obj, "timed_out") && !bool_at(c.obj, "truncated"),
	       "not timed out, not truncated");
	f = file_named(c.obj, "plots/p.png");
	if (tap_ok(f != NULL, "files lists plots/p.png")) {
		const char *url = str_at(f, "url");
		const char *route = url ? strstr(url, SBX_ARTIFACT_ROUTE) : NULL;
		char *id = NULL, *rel = NULL;
		tap_ok(int_at(f, "size") > 1000, "with its size (%lld)",
		       (long long)int_at(f, "size"));
		tap_is_str(str_at(f, "mime_type"), "image/png", "and mime type image/png");
		tap_ok(url && strncmp(url, PUBLIC_URL "/artifacts/", strlen(PUBLIC_URL) + 11) == 0,
		       "and a url under the public URL: %s", url);
		{
			_cleanup_free_ char *rest =
			    route ? strndup(route + strlen(SBX_ARTIFACT_ROUTE),
					    strcspn(route + strlen(SBX_ARTIFACT_ROUTE), "?"))
				  : NULL;
			const char *q = route ? strchr(route, '?') : NULL;
			char exp[24] = "", sig[64] = "";
			long long e = 0;
			tap_ok(rest && sbx_artifact_parse(rest, &id, &rel) == 0,
			       "the url parses back");
			tap_is_str(id, sandbox_id, "to the sandbox id");
			tap_is_str(rel, "plots/p.png", "and the relative path");
			tap_ok(q &&
				   sscanf(q, "?exp=%23[0-9]&sig=%63[A-Za-z0-9_-]", exp, sig) == 2 &&
				   strlen(q) == 5 + strlen(exp) + 5 + strlen(sig),
			       "its query is ?exp=EXP&sig=SIG alone: %s", q ? q : "none");
			e = atoll(exp);
			tap_ok(e >= (long long)time(NULL) + 24 * 3600 - 5 &&
				   e <= (long long)time(NULL) + 24 * 3600 + 1,
			       "exp is 24 h from now (server.link_ttl's default)");
			tap_is_int(sbx_link_verify(link_key, id ? id : "", rel ? rel : "", NULL,
						   exp, sig, (int64_t)time(NULL)),
				   0, "and the signature verifies");
		}
		free(id);
		free(rel);
	}
	{
		bool link = false;
		json_object_object_get_ex(c.res, "content", &content);
		for (size_t i = 1; i < json_object_array_length(content); i++) {
			struct json_object *it = json_object_array_get_idx(content, i);
			link |= !strcmp(str_at(it, "type"), "resource_link") && str_at(it, "uri") &&
				!strcmp(str_at(it, "name"), "plots/p.png") &&
				!strcmp(str_at(it, "mimeType"), "image/png");
		}
		tap_ok(link, "2025-06-18+: a resource_link item for the plot");
	}
	call_release(&c);

	/* The same run for 2025-03-26: the link stays in the JSON, no resource_link. */
	{
		char args[256];
		snprintf(args, sizeof(args),
			 "{\"sandbox_id\":\"%s\",\"code\":\"open('t.txt','w').write('x')\"}",
			 sandbox_id);
		rc = call_as(mgr, &settings, "default", "2025-03-26", "execute_python_code", args,
			     &c);
		tap_ok(rc == 0 && !c.is_error, "2025-03-26: execute_python_code");
		json_object_object_get_ex(c.res, "content", &content);
		tap_ok(json_object_array_length(content) == 1 && file_named(c.obj, "t.txt") &&
			   !has(c.res, "structuredContent"),
		       "one text item that lists t.txt, no structuredContent");
		call_release(&c);

		snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"code\":\"print(1/0)\"}",
			 sandbox_id);
		rc = call("execute_python_code", args, &c);
		tap_ok(rc == 0 && !c.is_error, "an exception is a normal result (isError false)");
		tap_is_int(int_at(c.obj, "exit_code"), 1, "with exit code 1");
		tap_ok(str_at(c.obj, "stderr") &&
			   strstr(str_at(c.obj, "stderr"), "ZeroDivisionError"),
		       "and the traceback in stderr");
		call_release(&c);

		snprintf(args, sizeof(args),
			 "{\"sandbox_id\":\"tools-a\",\"code\":\"import time; time.sleep(30)\","
			 "\"timeout\":1.5}");
		rc = call("execute_python_code", args, &c);
		tap_ok(rc == 0 && !c.is_error, "a run over its timeout (by name) is a result");
		tap_ok(bool_at(c.obj, "timed_out"), "timed_out is true");
		call_release(&c);
	}
}

/* ---- the notebook: state, progress, cancellation, time limits, reset, images ---- */

/* Runs CODE (a JSON string literal's content) in the sandbox; TIMEOUT > 0 adds it. */
static int run_py(const char *code, double timeout, struct call *c)
{
	struct json_object *a = json_object_new_object();
	int r;

	json_object_object_add(a, "sandbox_id", json_object_new_string(sandbox_id));
	json_object_object_add(a, "code", json_object_new_string(code));
	if (timeout > 0)
		json_object_object_add(a, "timeout", json_object_new_double(timeout));
	r = call("execute_python_code", json_object_to_json_string(a), c);
	json_object_put(a);
	return r;
}

static int64_t cancel_at_ms;
static int cancel_said; /* how often cancel_after answered true */
static bool cancel_after(void *ud)
{
	bool yes = mono_ms() >= cancel_at_ms;

	(void)ud;
	cancel_said += yes;
	return yes;
}

static void test_notebook(void)
{
	static const struct sbx_tool_notifier rec = {.send = record_notification};
	struct call c;
	int64_t t0, done_ms;

	/* State persists from call to call. */
	rc = run_py("x = 41\nimport math", 0, &c);
	tap_ok(rc == 0 && !c.is_error && !bool_at(c.obj, "interpreter_restarted"),
	       "define a variable");
	call_release(&c);
	rc = run_py("print(x + 1, math.floor(2.5))", 0, &c);
	tap_is_str(str_at(c.obj, "stdout"), "42 2\n",
		   "the variable and the import are still there");
	call_release(&c);

	/* Progress carries the printed text as it is produced. */
	notifier = &rec;
	progress_token = json_object_new_string("tok-py");
	notes_clear();
	t0 = mono_ms();
	rc = run_py("import time\nfor i in range(3): print(i); time.sleep(0.3)", 0, &c);
	done_ms = mono_ms();
	tap_is_str(str_at(c.obj, "stdout"), "0\n1\n2\n", "the loop prints 0 1 2");
	{
		struct sbx_buf all = SBX_BUF_INIT;
		int64_t last = -1, first_out_ms = 0;
		bool increasing = true, token = true;
		int with_output = 0;
		for (int i = 0; i < n_notes; i++) {
			struct json_object *o = json_tokener_parse(notes[i]), *p = NULL;
			const char *m;
			json_object_object_get_ex(o, "params", &p);
			increasing &= p && int_at(p, "progress") > last;
			last = int_at(p, "progress");
			token &= str_at(p, "progressToken") &&
				 !strcmp(str_at(p, "progressToken"), "tok-py");
			m = str_at(p, "message");
			if (i > 0 && m) {
				sbx_buf_append(&all, m, strlen(m));
				with_output++;
				if (!first_out_ms)
					first_out_ms = notes_ms[i];
			}
			json_object_put(o);
		}
		tap_is_str(all.data, "0\n1\n2\n", "the progress messages carry the printed text");
		tap_ok(with_output >= 3, "one notification per chunk (%d)", with_output);
		tap_ok(increasing && token && n_notes > 0, "progress increases, with the token");
		tap_ok(first_out_ms && done_ms - first_out_ms >= 400,
		       "the first line arrives while the code runs (%lld ms before the end, "
		       "%lld ms in)",
		       (long long)(done_ms - first_out_ms), (long long)(first_out_ms - t0));
		sbx_buf_release(&all);
	}
	call_release(&c);
	notes_clear();
	json_object_put(progress_token);
	progress_token = NULL;

	/* Cancellation stops a busy loop, keeps the state, the next call answers. */
	cancel_fn = cancel_after;
	cancel_said = 0;
	t0 = mono_ms();
	cancel_at_ms = t0 + 500;
	rc = run_py("while True: pass", 0, &c);
	tap_ok(rc == 0 && mono_ms() - t0 < 3000, "a cancelled busy loop stops (%lld ms)",
	       (long long)(mono_ms() - t0));
	tap_ok(!c.is_error && cancel_said > 0 && has(c.obj, "timed_out") &&
		   !bool_at(c.obj, "timed_out") && !bool_at(c.obj, "interpreter_restarted") &&
		   str_at(c.obj, "notice") && strstr(str_at(c.obj, "notice"), "cancelled"),
	       "... a result whose notice says it was cancelled, not timed out: %s",
	       c.is_error		 ? c.text
	       : str_at(c.obj, "notice") ? str_at(c.obj, "notice")
					 : "none");
	call_release(&c);
	cancel_fn = NULL;
	rc = run_py("print(x)", 0, &c);
	tap_is_str(str_at(c.obj, "stdout"), "41\n",
		   "the sandbox answers the next call, state kept");
	call_release(&c);

	/* A cancelled terminal command stops, its processes with it. */
	{
		struct json_object *a = json_object_new_object();
		json_object_object_add(a, "sandbox_id", json_object_new_string(sandbox_id));
		json_object_object_add(a, "command",
				       json_object_new_string("sleep 311 & sleep 312; echo never"));
		int64_t ms;
		cancel_fn = cancel_after;
		cancel_said = 0;
		t0 = mono_ms();
		cancel_at_ms = t0 + 500;
		rc = call("execute_terminal_command", json_object_to_json_string(a), &c);
		ms = mono_ms() - t0;
		tap_ok(rc == 0 && ms < 60000, "a cancelled terminal command stops (%lld ms)",
		       (long long)ms);
		/* A cancelled command is a result (the MCP layer sends none for a
		 * cancelled request); what marks it: killed (exit_code -1), not at
		 * its time limit, after the hook said so and not before 500 ms. */
		if (!tap_ok(rc == 0 && !c.is_error && cancel_said > 0 && ms >= 500 &&
				int_at(c.obj, "exit_code") == -1 && has(c.obj, "timed_out") &&
				!bool_at(c.obj, "timed_out"),
			    "... stopped by the cancellation: exit_code -1, not timed out, not an "
			    "error"))
			tap_diag("  isError=%d cancel_said=%d ms=%lld: %s", c.is_error, cancel_said,
				 (long long)ms, c.text ? c.text : "-");
		tap_ok(c.obj && str_at(c.obj, "stdout") &&
			   !strstr(str_at(c.obj, "stdout"), "never"),
		       "... before it went on");
		call_release(&c);
		cancel_fn = NULL;
		json_object_put(a);
		rc = run_py("import os\nn = 0\nfor p in os.listdir('/proc'):\n"
			    "    try:\n        n += open('/proc/%s/cmdline' % p, 'rb').read()"
			    ".startswith(b'sleep\\x00311')\n    except Exception:\n        pass\n"
			    "print(n)",
			    0, &c);
		tap_is_str(str_at(c.obj, "stdout"), "0\n", "... and no process of it is left");
		call_release(&c);
	}

	/* The timeout argument: an interrupt first. */
	notifier = &rec;
	notes_clear();
	t0 = mono_ms();
	rc = run_py("while True: pass", 1, &c);
	tap_ok(rc == 0 && bool_at(c.obj, "timed_out") && mono_ms() - t0 < 4000,
	       "timeout 1: the busy loop is stopped, timed_out (%lld ms)",
	       (long long)(mono_ms() - t0));
	tap_ok(!bool_at(c.obj, "interpreter_restarted"), "... by an interrupt: state kept");
	tap_is_int(n_notes, 0, "... no log message for it (no progressToken, nothing killed)");
	notifier = NULL;
	call_release(&c);

	/* Code that swallows the interrupt: killed, restarted, and said so. */
	notifier = &rec;
	notes_clear();
	t0 = mono_ms();
	rc = run_py("import time\nwhile True:\n    try:\n        time.sleep(10)\n"
		    "    except KeyboardInterrupt:\n        pass",
		    1, &c);
	tap_ok(rc == 0 && !c.is_error && bool_at(c.obj, "timed_out") &&
		   bool_at(c.obj, "interpreter_restarted"),
	       "code that ignores the interrupt: timed_out, interpreter_restarted (%lld ms)",
	       (long long)(mono_ms() - t0));
	tap_ok(str_at(c.obj, "notice") && strlen(str_at(c.obj, "notice")) > 10,
	       "... a notice says so: %s", str_at(c.obj, "notice"));
	{
		struct json_object *content = json_object_object_get(c.res, "content");
		struct json_object *second = json_object_array_get_idx(content, 1);
		tap_ok(second && !strcmp(str_at(second, "type"), "text") &&
			   str_at(c.obj, "notice") &&
			   !strcmp(str_at(second, "text"), str_at(c.obj, "notice")),
		       "... also as a text item after the JSON");
	}
	tap_ok(n_notes >= 1 && strstr(notes[n_notes - 1], "notifications/message") &&
		   strstr(notes[n_notes - 1], "\"level\":\"warning\""),
	       "... and a warning log message: %s", n_notes ? notes[n_notes - 1] : "none");
	call_release(&c);
	notes_clear();
	notifier = NULL;
	rc = run_py("print('x' in globals())", 0, &c);
	tap_is_str(str_at(c.obj, "stdout"), "False\n", "after the restart the variable is gone");
	call_release(&c);

	/* reset_python_interpreter clears variables, files stay. */
	rc = run_py("y = 5\nopen('keep.txt', 'w').write('k')", 0, &c);
	call_release(&c);
	{
		char args[128];
		snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sandbox_id);
		rc = call("reset_python_interpreter", args, &c);
		tap_ok(rc == 0 && !c.is_error && bool_at(c.obj, "reset"),
		       "reset_python_interpreter: %s", c.text);
		call_release(&c);
	}
	rc = run_py("import os\nprint('y' in globals(), os.path.exists('keep.txt'))", 0, &c);
	tap_is_str(str_at(c.obj, "stdout"), "False True\n",
		   "after the reset the variable is gone, the file stays");
	call_release(&c);
	expect_error("reset_python_interpreter", "{\"sandbox_id\":\"no-such\"}", "list_sandboxes",
		     "an unknown sandbox");

	/* A new PNG comes back inline as a valid image. */
	rc = run_py(
	    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
	    "plt.figure(figsize=(2, 2))\nplt.plot([1, 2], [2, 1])\nplt.savefig('inline.png')",
	    0, &c);
	{
		struct json_object *content = json_object_object_get(c.res, "content"), *img = NULL;
		struct json_object *f = file_named(c.obj, "inline.png");
		unsigned char *png = NULL;
		size_t len = 0;
		for (size_t i = 0; i < json_object_array_length(content); i++)
			if (!strcmp(str_at(json_object_array_get_idx(content, i), "type"), "image"))
				img = json_object_array_get_idx(content, i);
		tap_ok(img && !strcmp(str_at(img, "mimeType") ?: "", "image/png"),
		       "an image content item with mimeType image/png");
		if (img && str_at(img, "data") &&
		    sbx_base64_decode(str_at(img, "data"), strlen(str_at(img, "data")), &png,
				      &len) < 0)
			png = NULL;
		tap_ok(png && len > 8 && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0,
		       "its data is base64 of a PNG (%zu bytes)", len);
		tap_ok(f && int_at(f, "size") == (int64_t)len && bool_at(f, "inline_image"),
		       "of the file's size, marked inline_image in files");
		free(png);
	}
	call_release(&c);
}

static void test_terminal(void)
{
	struct call c;
	char args[256];

	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"command\":\"echo hi; pwd; echo oops >&2; exit 3\"}",
		 sandbox_id);
	rc = call("execute_terminal_command", args, &c);
	tap_ok(rc == 0 && !c.is_error, "execute_terminal_command: %s", c.is_error ? c.text : "ok");
	tap_is_str(str_at(c.obj, "stdout"), "hi\n/app/results\n", "stdout, in /app/results");
	tap_is_str(str_at(c.obj, "stderr"), "oops\n", "stderr");
	tap_is_int(int_at(c.obj, "exit_code"), 3, "exit code 3 is a result");
	tap_ok(!has(c.obj, "files"), "no file list for a command");
	call_release(&c);

	{
		static const struct sbx_tool_notifier rec = {.send = record_notification};
		notifier = &rec;
		progress_token = json_object_new_string("tok-1");
		snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"true\"}",
			 sandbox_id);
		notes_clear();
		rc = call("execute_terminal_command", args, &c);
		{
			/* Not necessarily the last: notifications/resources/list_changed
			 * may follow (anything newly changed in /app/results). */
			bool seen = false;
			for (int i = 0; i < n_notes; i++)
				seen |= strstr(notes[i], "\"method\":\"notifications/progress\"") &&
					strstr(notes[i], "\"progressToken\":\"tok-1\"");
			tap_ok(rc == 0 && seen,
			       "with a progress token, a progress notification: %s", notified);
		}
		call_release(&c);
		notifier = NULL;
		json_object_put(progress_token);
		progress_token = NULL;
	}

	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"command\":\"sleep 20\",\"timeout\":1}", sandbox_id);
	rc = call("execute_terminal_command", args, &c);
	tap_ok(rc == 0 && bool_at(c.obj, "timed_out"), "a command over its timeout: timed_out");
	call_release(&c);
}

/* ---- calls whose client has gone, through the HTTP front ---- */

/* tools/call execute_python_code REQUEST_ID in the sandbox: touches
 * /tmp/FLAG, then sleeps 3000 s (timeout 3600); with a progressToken when
 * TOKEN. */
static char *sleep_body(int request_id, const char *flag, bool token)
{
	struct json_object *o = json_object_new_object(), *p = json_object_new_object(),
			   *a = json_object_new_object();
	char code[160];
	char *text;

	snprintf(code, sizeof(code), "import time\nopen('/tmp/%s', 'w').close()\ntime.sleep(3000)",
		 flag);
	json_object_object_add(a, "sandbox_id", json_object_new_string(sandbox_id));
	json_object_object_add(a, "code", json_object_new_string(code));
	json_object_object_add(a, "timeout", json_object_new_int(3600));
	json_object_object_add(p, "name", json_object_new_string("execute_python_code"));
	json_object_object_add(p, "arguments", a);
	if (token) {
		struct json_object *meta = json_object_new_object();
		json_object_object_add(meta, "progressToken", json_object_new_string("gone"));
		json_object_object_add(p, "_meta", meta);
	}
	json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(o, "id", json_object_new_int(request_id));
	json_object_object_add(o, "method", json_object_new_string("tools/call"));
	json_object_object_add(o, "params", p);
	text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return text;
}

/* The sleeping code has started: /tmp/FLAG exists (asked with a shell
 * command, which needs no interpreter), within 60 s. */
static bool flag_seen(const char *flag)
{
	char cmd[128], args[256];
	int64_t t0 = mono_ms();

	snprintf(cmd, sizeof(cmd), "test -e /tmp/%s && echo yes", flag);
	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"%s\"}", sandbox_id, cmd);
	while (mono_ms() - t0 < 60000) {
		struct call c;
		bool yes = call("execute_terminal_command", args, &c) == 0 && !c.is_error &&
			   str_at(c.obj, "stdout") && !strcmp(str_at(c.obj, "stdout"), "yes\n");
		call_release(&c);
		if (yes)
			return true;
		sleep_ms(200);
	}
	return false;
}

/* The sandbox's interpreter answers again: a Python call (timeout 60 s,
 * so that it waits for a call still running) prints; the ms it took, or
 * -1 when it did not answer. */
static long answers_again(void)
{
	int64_t t0 = mono_ms();
	struct call c;
	bool ok = run_py("print('again')", 60, &c) == 0 && !c.is_error && str_at(c.obj, "stdout") &&
		  !strcmp(str_at(c.obj, "stdout"), "again\n");

	if (!ok)
		tap_diag("  the call: %s", c.text ? c.text : "-");
	call_release(&c);
	return ok ? (long)(mono_ms() - t0) : -1;
}

/* An in-process HTTP front on 127.0.0.1 (an ephemeral port: S has
 * server.listen and server.port set) over an MCP layer of its own, with
 * http-client.h pointed at it; front_stop undoes it all. */
struct front {
	sbx_mcp *mcp;
	sbx_http *http;
	struct http_target saved;
};
static sbx_audit *front_audit; /* the fronts' audit log (NULL: none) */

static void front_start(struct front *f, const struct sbx_settings *s, sbx_manager *m,
			const sbx_link_key *key)
{
	struct sbx_error err = SBX_ERROR_INIT;
	const struct sbx_mcp_config mc = {
	    .settings = s, .manager = m, .link_key = key, .audit = front_audit};

	*f = (struct front){0};
	if (sbx_mcp_new(&mc, &f->mcp, &err) < 0)
		tap_bail(err.msg);
	{
		const struct sbx_http_config hc = {.settings = s, .mcp = f->mcp, .manager = m};
		if (sbx_http_start(&hc, &f->http, &err) < 0)
			tap_bail(err.msg);
	}
	f->saved = http_use(sbx_http_port(f->http), false);
}

static void front_stop(struct front *f)
{
	http_restore(&f->saved);
	sbx_http_stop(f->http);
	sbx_mcp_free(f->mcp);
}

/* "Within a few seconds": the generous bound on a shared machine. */
#define AGAIN_MS 15000

static void test_client_gone(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct front front;
	struct sbx_buf acc = SBX_BUF_INIT;
	char *id, *body;
	long ms;
	int fd;

	if (sbx_settings_set(&settings, "server.listen=127.0.0.1", &err) < 0 ||
	    sbx_settings_set(&settings, "server.port=0", &err) < 0)
		tap_bail(err.msg);
	front_start(&front, &settings, mgr, link_key);
	id = mcp_initialize();
	tap_ok(id != NULL, "gone: a Streamable HTTP session");

	/* The POST's connection closes while the reply is to be JSON. */
	body = sleep_body(1, "gone-json", false);
	fd = raw_mcp_post(id, 0, body);
	free(body);
	tap_ok(flag_seen("gone-json"), "gone: a Python call sleeps 3000 s (reply as JSON)");
	close(fd);
	ms = answers_again();
	tap_ok(ms >= 0 && ms < AGAIN_MS,
	       "gone: its client closes the connection: the call is cancelled and the sandbox "
	       "answers again (%ld ms)",
	       ms);

	/* ... and while it is an event stream (progress asked). */
	body = sleep_body(2, "gone-stream", true);
	fd = raw_mcp_post(id, 0, body);
	free(body);
	tap_ok(flag_seen("gone-stream") && read_until(fd, &acc, "text/event-stream", 5000),
	       "gone: a Python call sleeps 3000 s (reply as an event stream)");
	close(fd);
	ms = answers_again();
	tap_ok(ms >= 0 && ms < AGAIN_MS,
	       "gone: its client closes the stream: the call is cancelled and the sandbox answers "
	       "again (%ld ms)",
	       ms);
	sbx_buf_release(&acc);

	/* A call waiting for the busy sandbox is cancelled while it waits. */
	body = sleep_body(3, "gone-busy", false);
	fd = raw_mcp_post(id, 0, body);
	free(body);
	tap_ok(flag_seen("gone-busy"), "gone: a Python call holds the sandbox");
	{
		struct call c;
		int64_t t0 = mono_ms();
		cancel_fn = cancel_after;
		cancel_said = 0;
		cancel_at_ms = t0 + 1000;
		rc = run_py("print('never')", 60, &c);
		ms = (long)(mono_ms() - t0);
		cancel_fn = NULL;
		if (!tap_ok(
			rc == 0 && c.is_error && cancel_said > 0 && ms >= 1000 && ms < AGAIN_MS &&
			    c.text && strstr(c.text, "cancelled while it waited"),
			"gone: another call that waits for it (timeout 60 s) is cancelled while "
			"it waits (%ld ms)",
			ms))
			tap_diag("  isError=%d: %s", c.is_error, c.text ? c.text : "-");
		call_release(&c);
	}
	close(fd);
	ms = answers_again();
	tap_ok(ms >= 0 && ms < AGAIN_MS, "gone: ... then the first is cancelled too (%ld ms)", ms);

	/* The session is deleted. */
	body = sleep_body(4, "gone-delete", false);
	fd = raw_mcp_post(id, 0, body);
	free(body);
	tap_ok(flag_seen("gone-delete"), "gone: a Python call sleeps 3000 s");
	{
		char hdr[96];
		const char *const hs[] = {hdr, NULL};
		struct reply r;
		snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s", id);
		r = request("DELETE", "/mcp", hs, NULL);
		tap_is_int(r.status, 200, "gone: DELETE of its session");
		reply_release(&r);
	}
	ms = answers_again();
	tap_ok(ms >= 0 && ms < AGAIN_MS,
	       "gone: ... the call is cancelled and the sandbox answers again (%ld ms)", ms);
	close(fd);
	free(id);

	/* The SSE stream closes. */
	{
		struct sse_session ss = {0};
		struct reply r;
		tap_ok(sse_open(&ss, SSE_INITIALIZED), "gone: an SSE session");
		body = sleep_body(5, "gone-sse", false);
		r = sse_post(ss.id, body);
		free(body);
		tap_ok(r.status == 202 && flag_seen("gone-sse"),
		       "gone: a Python call sleeps 3000 s (%ld)", r.status);
		reply_release(&r);
		sse_close(&ss);
		ms = answers_again();
		tap_ok(ms >= 0 && ms < AGAIN_MS,
		       "gone: its SSE stream closes: the call is cancelled and the sandbox answers "
		       "again (%ld ms)",
		       ms);
	}

	front_stop(&front);
}

/* The path (and query) of a link URL of ours: what follows PUBLIC_URL. */
static const char *path_of(const char *url)
{
	return url && !strncmp(url, PUBLIC_URL, strlen(PUBLIC_URL)) ? url + strlen(PUBLIC_URL)
								    : "/none";
}

/* Runs CODE in sandbox ID as OWNER; the url of FILE in its result, or NULL
 * (owned). */
static char *link_of(const char *owner, const char *id, const char *code, const char *file)
{
	struct json_object *a = json_object_new_object();
	struct call c;
	char *url = NULL;

	json_object_object_add(a, "sandbox_id", json_object_new_string(id));
	json_object_object_add(a, "code", json_object_new_string(code));
	if (call_as(mgr, &settings, owner, SBX_MCP_VERSION_LATEST, "execute_python_code",
		    json_object_to_json_string(a), &c) == 0 &&
	    !c.is_error && file_named(c.obj, file))
		url = strdup(str_at(file_named(c.obj, file), "url"));
	json_object_put(a);
	call_release(&c);
	return url;
}

/* GET PATH: its status; *ret_body (owned) when asked. */
static long get(const char *path, char **ret_body)
{
	struct reply r = request("GET", path, NULL, NULL);
	long st = r.status;

	if (ret_body)
		*ret_body = strdup(r.body.data ? r.body.data : "");
	reply_release(&r);
	return st;
}

/* ---- artifact downloads, bounded like streams ---- */

/* A GET of PATH on a raw connection (from http_from's address), its head
 * read: the status; the connection in *RET_FD, read on or not. */
static long download_start(const char *path, int *ret_fd)
{
	struct sbx_buf acc = SBX_BUF_INIT;
	char req[1024];
	long st;

	*ret_fd = connect_raw();
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n\r\n", path,
		 (unsigned)http_target.port);
	send_all(*ret_fd, req);
	st = raw_status(*ret_fd, &acc, 15000);
	sbx_buf_release(&acc);
	return st;
}

/* Reads FD until its end, or until nothing came for IDLE_MS: the bytes. */
static int64_t drain(int fd, int idle_ms)
{
	char buf[65536];
	int64_t total = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;
		if (poll(&p, 1, idle_ms) <= 0)
			return total;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return total;
		total += n;
	}
}

/* The gauge mcp_sandbox_artifact_downloads of the front, or -1. */
static long downloads_running(void)
{
	static const char name[] = "\nmcp_sandbox_artifact_downloads ";
	struct reply r = request("GET", "/metrics", NULL, NULL);
	const char *p = r.status == 200 && r.body.data ? strstr(r.body.data, name) : NULL;
	long v = p ? strtol(p + strlen(name), NULL, 10) : -1;

	reply_release(&r);
	return v;
}

/* Waits until no download runs: the ms it took, or -1 after MS. */
static long downloads_end_within(long ms)
{
	int64_t t0 = mono_ms();

	while (mono_ms() - t0 < ms) {
		if (downloads_running() == 0)
			return (long)(mono_ms() - t0);
		sleep_ms(50);
	}
	return -1;
}

/* Threads of this process. */
static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* True once this process has at most N threads, within MS. */
static bool threads_back_within(int n, long ms)
{
	int64_t t0 = mono_ms();

	while (thread_count() > n && mono_ms() - t0 < ms)
		sleep_ms(50);
	return thread_count() <= n;
}

/* Processes in sandbox ID that hold /app/results/FILE open (the download's
 * file reader), or -1. */
static long readers_of(const char *id, const char *file)
{
	struct json_object *a = json_object_new_object();
	char code[640];
	struct call c;
	long n = -1;

	snprintf(code, sizeof(code),
		 "import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n"
		 "        n += p.isdigit() and any(os.readlink('/proc/%%s/fd/%%s' %% (p, f)) == "
		 "'/app/results/%s' for f in os.listdir('/proc/%%s/fd' %% p))\n"
		 "    except OSError:\n        pass\nprint(n)",
		 file);
	json_object_object_add(a, "sandbox_id", json_object_new_string(id));
	json_object_object_add(a, "code", json_object_new_string(code));
	if (call("execute_python_code", json_object_to_json_string(a), &c) == 0 && !c.is_error &&
	    str_at(c.obj, "stdout"))
		n = strtol(str_at(c.obj, "stdout"), NULL, 10);
	json_object_put(a);
	call_release(&c);
	return n;
}

static void set_or_bail(const char *assign)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (sbx_settings_set(&settings, assign, &err) < 0)
		tap_bail(err.msg);
}

#define BIG_SIZE ((int64_t)64 << 20)
/* Python: a sparse file of BIG_SIZE bytes in /app/results. */
#define BIG_CODE(name) "f = open('" name "', 'wb'); f.truncate(64 << 20); f.close()"
/* Python: a sparse file slow.bin, and a thread that stops (SIGSTOP) each
 * process that holds it open once that has read 1 MiB more (its rchar): the
 * sandbox then sends nothing. */
#define SLOW_CODE                                                                                  \
	BIG_CODE("slow.bin")                                                                       \
	"\nimport os, signal, threading, time\n"                                                   \
	"def holds(p):\n"                                                                          \
	"    return any(os.readlink('/proc/%s/fd/%s' % (p, f)) == '/app/results/slow.bin' "        \
	"for f in os.listdir('/proc/%s/fd' % p))\n"                                                \
	"def rchar(p):\n"                                                                          \
	"    return int(open('/proc/%s/io' % p).read().split('rchar:')[1].split()[0])\n"           \
	"def stopper():\n"                                                                         \
	"    done = set(); seen = {}; end = time.time() + 60\n"                                    \
	"    while time.time() < end:\n"                                                           \
	"        for p in os.listdir('/proc'):\n"                                                  \
	"            try:\n"                                                                       \
	"                if not p.isdigit() or p in done or not holds(p): continue\n"              \
	"                n = rchar(p)\n"                                                           \
	"            except (OSError, ValueError, IndexError): continue\n"                         \
	"            seen.setdefault(p, n)\n"                                                      \
	"            if n - seen[p] >= 1 << 20:\n"                                                 \
	"                os.kill(int(p), signal.SIGSTOP); done.add(p)\n"                           \
	"        time.sleep(0.005)\n"                                                              \
	"threading.Thread(target=stopper, daemon=True).start()"

/* Runs the curl program with ARGV (after "curl"): its exit status, -1. */
static int curl_cli(const char *const *argv)
{
	const char *args[16] = {"curl", "-sS", "--max-time", "30"};
	size_t n = 4;
	int status;
	pid_t pid;

	for (; *argv && n < 15; argv++)
		args[n++] = *argv;
	args[n] = NULL;
	pid = fork();
	if (pid == 0) {
		execvp("curl", (char *const *)args);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether file PATH holds exactly LEN bytes of the pattern (byte i = i % 256)
 * from OFFSET. */
static bool file_is_pattern(const char *path, int64_t offset, size_t len)
{
	unsigned char buf[2048];
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;

	if (f)
		fclose(f);
	if (n != len)
		return false;
	for (size_t i = 0; i < n; i++)
		if (buf[i] != (unsigned char)((offset + (int64_t)i) % 256))
			return false;
	return true;
}

static bool body_is_pattern(const struct reply *r, int64_t offset, size_t len)
{
	if (r->body.len != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)r->body.data[i] != (unsigned char)((offset + (int64_t)i) % 256))
			return false;
	return true;
}

/* Python: a file of WIDE_SIZE bytes, byte i = wide_byte(i). */
#define WIDE_SIZE (5 * 1048576 + 5)
#define WIDE_CODE(name)                                                                            \
	"open('" name "', 'wb').write(bytes((i + (i >> 8) * 37 + (i >> 16) * 101) & 255 "          \
	"for i in range(5 * 1048576 + 5)))"

static unsigned char wide_byte(int64_t i)
{
	return (unsigned char)((i + (i >> 8) * 37 + (i >> 16) * 101) & 255);
}

static bool body_is_wide(const struct reply *r, int64_t offset, size_t len)
{
	if (r->body.len != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)r->body.data[i] != wide_byte(offset + (int64_t)i))
			return false;
	return true;
}

/* Issue 30: links answer as file servers do, on a file whose bytes are
 * known (1024 bytes, byte i = i % 256): Accept-Ranges, ETag and
 * Last-Modified; one range -> 206 with Content-Range (from the start, to
 * the end, a suffix), past the end -> 416; If-None-Match and
 * If-Modified-Since -> 304; If-Range with the ETag -> 206, with another ->
 * 200; HEAD with the same headers; a changed file has a new ETag. The curl
 * program fetches a range (-r) and resumes a broken download (-C -). */
static void test_ranges(void)
{
	struct front front;
	_cleanup_free_ char *url = NULL;
	char etag[80] = "", lm[64] = "", h1[128], h2[128], full[512],
	     tmp[] = "/tmp/sbx-range-XXXXXX";
	const char *path;
	struct reply r;
	int fd;

	set_or_bail("server.listen=127.0.0.1");
	set_or_bail("server.port=0");
	front_start(&front, &settings, mgr, link_key);
	url = link_of("default", sandbox_id, "open('r.bin', 'wb').write(bytes(range(256)) * 4)",
		      "r.bin");
	tap_ok(url != NULL, "ranges: a 1024-byte file r.bin");
	path = path_of(url);
	snprintf(full, sizeof(full), "%s%s", http_target.base, path);

	r = request("GET", path, NULL, NULL);
	tap_ok(r.status == 200 && body_is_pattern(&r, 0, 1024), "ranges: GET -> 200, its bytes");
	tap_is_str(header_of(&r, "Accept-Ranges"), "bytes", "ranges: Accept-Ranges: bytes");
	if (header_of(&r, "ETag"))
		snprintf(etag, sizeof(etag), "%s", header_of(&r, "ETag"));
	if (header_of(&r, "Last-Modified"))
		snprintf(lm, sizeof(lm), "%s", header_of(&r, "Last-Modified"));
	tap_ok(etag[0] == '"' && strlen(etag) > 2, "ranges: a strong ETag (%s)", etag);
	tap_ok(strlen(lm) == 29 && !strcmp(lm + 25, " GMT"), "ranges: Last-Modified (%s)", lm);
	reply_release(&r);

	r = request("GET", path, (const char *const[]){"Range: bytes=10-19", NULL}, NULL);
	tap_ok(r.status == 206 && body_is_pattern(&r, 10, 10),
	       "ranges: bytes=10-19 -> 206 and bytes 10..19 (%ld, %zu bytes)", r.status,
	       r.body.len);
	tap_is_str(header_of(&r, "Content-Range"), "bytes 10-19/1024",
		   "ranges: ... Content-Range: bytes 10-19/1024");
	tap_is_str(header_of(&r, "ETag"), etag, "ranges: ... the same ETag");
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"Range: bytes=1000-", NULL}, NULL);
	tap_ok(r.status == 206 && body_is_pattern(&r, 1000, 24),
	       "ranges: bytes=1000- -> 206, its last 24 bytes (%ld, %zu)", r.status, r.body.len);
	tap_is_str(header_of(&r, "Content-Range"), "bytes 1000-1023/1024",
		   "ranges: ... Content-Range: bytes 1000-1023/1024");
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"Range: bytes=-16", NULL}, NULL);
	tap_ok(r.status == 206 && body_is_pattern(&r, 1008, 16),
	       "ranges: bytes=-16 -> 206, the last 16 bytes (%ld, %zu)", r.status, r.body.len);
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"Range: bytes=1024-", NULL}, NULL);
	tap_is_int(r.status, 416, "ranges: bytes=1024- -> 416");
	tap_is_str(header_of(&r, "Content-Range"), "bytes */1024",
		   "ranges: ... Content-Range: bytes */1024");
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"Range: bytes=0-1,5-6", NULL}, NULL);
	tap_ok(r.status == 200 && body_is_pattern(&r, 0, 1024),
	       "ranges: two ranges -> 200, the whole file (%ld)", r.status);
	reply_release(&r);

	snprintf(h1, sizeof(h1), "If-None-Match: %s", etag);
	r = request("GET", path, (const char *const[]){h1, NULL}, NULL);
	tap_ok(r.status == 304 && r.body.len == 0, "ranges: If-None-Match: its ETag -> 304 (%ld)",
	       r.status);
	tap_is_str(header_of(&r, "ETag"), etag, "ranges: ... with its ETag");
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"If-None-Match: \"other\"", NULL}, NULL);
	tap_ok(r.status == 200 && body_is_pattern(&r, 0, 1024),
	       "ranges: If-None-Match: another -> 200 (%ld)", r.status);
	reply_release(&r);
	snprintf(h1, sizeof(h1), "If-Modified-Since: %s", lm);
	r = request("GET", path, (const char *const[]){h1, NULL}, NULL);
	tap_is_int(r.status, 304, "ranges: If-Modified-Since: its Last-Modified -> 304");
	reply_release(&r);
	r = request("GET", path,
		    (const char *const[]){"If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT", NULL},
		    NULL);
	tap_is_int(r.status, 200, "ranges: If-Modified-Since: long before -> 200");
	reply_release(&r);
	snprintf(h1, sizeof(h1), "If-Range: %s", etag);
	r = request("GET", path, (const char *const[]){"Range: bytes=0-9", h1, NULL}, NULL);
	tap_ok(r.status == 206 && body_is_pattern(&r, 0, 10),
	       "ranges: If-Range: its ETag -> 206 (%ld)", r.status);
	reply_release(&r);
	r = request("GET", path,
		    (const char *const[]){"Range: bytes=0-9", "If-Range: \"old\"", NULL}, NULL);
	tap_ok(r.status == 200 && body_is_pattern(&r, 0, 1024),
	       "ranges: If-Range: another ETag -> 200, the whole file (%ld, %zu)", r.status,
	       r.body.len);
	reply_release(&r);

	r = request("HEAD", path, (const char *const[]){"Range: bytes=10-19", NULL}, NULL);
	tap_ok(r.status == 206 && r.body.len == 0, "ranges: HEAD with a range -> 206 (%ld)",
	       r.status);
	tap_is_str(header_of(&r, "Content-Length"), "10", "ranges: ... Content-Length: 10");
	tap_is_str(header_of(&r, "Content-Range"), "bytes 10-19/1024",
		   "ranges: ... Content-Range: bytes 10-19/1024");
	reply_release(&r);
	r = request("HEAD", path, NULL, NULL);
	tap_ok(r.status == 200 && header_of(&r, "Content-Length") &&
		   !strcmp(header_of(&r, "Content-Length"), "1024") && header_of(&r, "ETag") &&
		   !strcmp(header_of(&r, "ETag"), etag),
	       "ranges: HEAD -> 200, Content-Length 1024, its ETag (%ld)", r.status);
	reply_release(&r);
	snprintf(h1, sizeof(h1), "If-None-Match: %s", etag);
	r = request("HEAD", path, (const char *const[]){h1, NULL}, NULL);
	tap_is_int(r.status, 304, "ranges: HEAD with If-None-Match: its ETag -> 304");
	reply_release(&r);

	/* curl: a range, and a download broken at 300 bytes resumed. */
	fd = mkstemp(tmp);
	if (fd >= 0)
		close(fd);
	tap_ok(fd >= 0 &&
		   curl_cli((const char *const[]){"-r", "100-199", "-o", tmp, full, NULL}) == 0 &&
		   file_is_pattern(tmp, 100, 100),
	       "ranges: curl -r 100-199 gets bytes 100..199");
	tap_ok(curl_cli((const char *const[]){"-r", "0-299", "-o", tmp, full, NULL}) == 0 &&
		   file_is_pattern(tmp, 0, 300) &&
		   curl_cli((const char *const[]){"-C", "-", "-o", tmp, full, NULL}) == 0 &&
		   file_is_pattern(tmp, 0, 1024),
	       "ranges: curl -C - resumes a download broken at 300 bytes: all 1024 come right");
	unlink(tmp);

	/* A file of several of the reader's frames (1 MiB) whose bytes tell
	 * their offset apart from any other a multiple of 256 away, past the
	 * reader's credit window (4 MiB: grants come between frames): sent
	 * whole, and as a range of 3 frames (counted from the range's start),
	 * byte for byte. */
	{
		_cleanup_free_ char *wide =
		    link_of("default", sandbox_id, WIDE_CODE("w.bin"), "w.bin");

		r = wide ? request("GET", path_of(wide), NULL, NULL) : (struct reply){0};
		tap_ok(
		    r.status == 200 && body_is_wide(&r, 0, WIDE_SIZE),
		    "ranges: GET of a %d-byte file (5 frames and 5 bytes) -> its bytes (%ld, %zu)",
		    WIDE_SIZE, r.status, r.body.len);
		reply_release(&r);
		r = wide
			? request("GET", path_of(wide),
				  (const char *const[]){"Range: bytes=1048570-3145741", NULL}, NULL)
			: (struct reply){0};
		tap_ok(r.status == 206 && body_is_wide(&r, 1048570, 2097172),
		       "ranges: bytes=1048570-3145741 (3 frames of the reader) -> 206, its bytes "
		       "(%ld, %zu)",
		       r.status, r.body.len);
		reply_release(&r);
	}

	/* The file changes: its ETag does, and the old one no longer matches. */
	free(link_of("default", sandbox_id, "open('r.bin', 'ab').write(bytes(range(256)) * 4)",
		     "r.bin"));
	snprintf(h1, sizeof(h1), "If-None-Match: %s", etag);
	snprintf(h2, sizeof(h2), "If-Range: %s", etag);
	r = request("GET", path, (const char *const[]){h1, NULL}, NULL);
	tap_ok(r.status == 200 && r.body.len == 2048 && header_of(&r, "ETag") &&
		   strcmp(header_of(&r, "ETag"), etag) != 0,
	       "ranges: the file grew to 2048 bytes: a new ETag, sent whole (%ld, %zu)", r.status,
	       r.body.len);
	reply_release(&r);
	r = request("GET", path, (const char *const[]){"Range: bytes=1024-1033", h2, NULL}, NULL);
	tap_ok(r.status == 200 && r.body.len == 2048,
	       "ranges: If-Range with the old ETag -> 200, the whole new file (%ld, %zu)", r.status,
	       r.body.len);
	reply_release(&r);
	front_stop(&front);
}

/* Issue 25: a download whose client takes no bytes for
 * server.stream_stall_timeout ends, with its exec and threads; at most
 * server.max_downloads run (server.max_downloads_per_ip per address), past
 * either 503 with Retry-After naming the key, HEAD counted too; a client
 * that leaves while its sandbox sends nothing, a server that stops, a
 * sandbox deleted during a stalled download: each ends it at once (before
 * the sandbox's own 30 s limit, or the 60 s stall timeout). */
static void test_downloads(void)
{
	struct front front;
	char dlid[SBX_SANDBOX_ID_MAX + 1] = "";
	_cleanup_free_ char *big = NULL, *slow = NULL, *big2 = NULL;
	struct call c;
	long ms;
	int fd, fd2, threads;

	set_or_bail("server.listen=127.0.0.1");
	set_or_bail("server.port=0");
	set_or_bail("server.stream_stall_timeout=1s");
	set_or_bail("server.max_downloads=2");
	set_or_bail("server.max_downloads_per_ip=1");
	front_start(&front, &settings, mgr, link_key);
	big = link_of("default", sandbox_id, BIG_CODE("big.bin"), "big.bin");
	tap_ok(big != NULL, "downloads: a 64 MiB file big.bin");
	/* A link signed for a path out of /app/results ('..' parts, sent as
	 * %2E%2E: a client would resolve plain ones) is refused all the same:
	 * no file outside it is served. */
	{
		static const char *const out[] = {"../../etc/passwd", "x/../../../etc/passwd"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(out); i++) {
			_cleanup_free_ char *l = sbx_artifact_link(link_key, "", sandbox_id, out[i],
								   "", time(NULL) + 60);
			struct sbx_buf enc = SBX_BUF_INIT;
			char *body = NULL;
			long st = 0;
			for (const char *p = l; p && *p; p++) {
				if (!strncmp(p, "../", 3)) {
					sbx_buf_append(&enc, "%2E%2E/", 7);
					p += 2;
				} else {
					sbx_buf_append(&enc, p, 1);
				}
			}
			if (l && sbx_buf_append(&enc, "", 1) == 0)
				st = get(enc.data, &body);
			tap_ok(
			    st == 403 && body && !strstr(body, "root:"),
			    "downloads: a signed link to %s is 403, without the file (%ld %.120s)",
			    out[i], st, body ? body : "");
			free(body);
			sbx_buf_release(&enc);
		}
	}

	/* A client that never reads. */
	threads = thread_count();
	tap_is_int(download_start(path_of(big), &fd), 200, "downloads: GET big.bin -> 200");
	tap_is_int(readers_of(sandbox_id, "big.bin"), 1, "downloads: a file reader holds it open");
	ms = downloads_end_within(15000);
	tap_ok(ms >= 0,
	       "downloads: its client takes nothing for stream_stall_timeout (1 s): it "
	       "ends (%ld ms)",
	       ms);
	{
		int64_t t0 = mono_ms();
		long n;
		while ((n = readers_of(sandbox_id, "big.bin")) != 0 && mono_ms() - t0 < 10000)
			sleep_ms(100);
		tap_ok(n == 0, "downloads: ... and its reader let it go (%ld, %ld ms)", n,
		       (long)(mono_ms() - t0));
	}
	tap_ok(threads_back_within(threads, 5000), "downloads: ... and its threads (%d, was %d)",
	       thread_count(), threads);
	tap_ok(drain(fd, 3000) < BIG_SIZE,
	       "downloads: ... its connection was closed before the whole body");
	close(fd);

	/* A client that shuts its sending side once its request is sent (as
	 * some HTTP/1.0-style clients do) and reads on, pausing longer than
	 * the 5 s a half-closed client is given while the sandbox sends
	 * nothing: served whole (bytes waiting for it, it is there). Under
	 * a stall timeout longer than its pause, which alone may end it. */
	front_stop(&front);
	set_or_bail("server.stream_stall_timeout=30s");
	front_start(&front, &settings, mgr, link_key);
	{
		struct sbx_buf acc = SBX_BUF_INIT;
		char req[1024];
		const char *eoh;
		int64_t body = -1;

		fd = connect_raw();
		snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n",
			 path_of(big), (unsigned)http_target.port);
		send_all(fd, req);
		shutdown(fd, SHUT_WR);
		read_until(fd, &acc, "\r\n\r\n", 15000);
		sleep_ms(6500);
		eoh = acc.data ? strstr(acc.data, "\r\n\r\n") : NULL;
		if (eoh)
			body = (int64_t)(acc.len - (size_t)(eoh + 4 - acc.data)) + drain(fd, 15000);
		tap_ok(eoh && strncmp(acc.data, "HTTP/1.1 200", 12) == 0 && body == BIG_SIZE,
		       "downloads: a client that shuts its side after its request gets the whole "
		       "body (%lld of %lld bytes: %.12s)",
		       (long long)body, (long long)BIG_SIZE, acc.data ? acc.data : "");
		sbx_buf_release(&acc);
		close(fd);
		downloads_end_within(15000);
	}
	/* The caps: 2 in all, 1 per address; HEAD counted too. The two held
	 * downloads are held by clients that read nothing: under a stall
	 * timeout far longer than the checks take (a slow machine must not
	 * end one early and free its slot), they end when their clients
	 * close. */
	http_from("127.0.0.1");
	tap_is_int(download_start(path_of(big), &fd), 200, "downloads: a first one from 127.0.0.1");
	{
		struct reply r = request("GET", path_of(big), NULL, NULL);
		tap_ok(r.status == 503 && header_of(&r, "Retry-After") && r.body.data &&
			   strstr(r.body.data, "server.max_downloads_per_ip = 1"),
		       "downloads: a second from 127.0.0.1 -> 503 with Retry-After naming "
		       "server.max_downloads_per_ip (%ld: %s)",
		       r.status, r.body.data ? r.body.data : "");
		reply_release(&r);
		r = request("HEAD", path_of(big), NULL, NULL);
		tap_is_int(r.status, 503,
			   "downloads: HEAD from 127.0.0.1 meanwhile -> 503 too (it opens the file "
			   "in the sandbox, as GET does)");
		reply_release(&r);
	}
	http_from("127.0.0.2");
	tap_is_int(download_start(path_of(big), &fd2), 200, "downloads: one from 127.0.0.2");
	http_from("127.0.0.3");
	{
		struct reply r = request("GET", path_of(big), NULL, NULL);
		tap_ok(r.status == 503 && header_of(&r, "Retry-After") && r.body.data &&
			   strstr(r.body.data, "server.max_downloads = 2"),
		       "downloads: a third at once (127.0.0.3) -> 503 with Retry-After naming "
		       "server.max_downloads (%ld: %s)",
		       r.status, r.body.data ? r.body.data : "");
		reply_release(&r);
	}
	http_from(NULL);
	close(fd);
	close(fd2);
	tap_ok(downloads_end_within(15000) >= 0,
	       "downloads: both end when their clients close, stalled as they are");
	http_from("127.0.0.1");
	tap_is_int(download_start(path_of(big), &fd), 200,
		   "downloads: then 127.0.0.1 has its slot back -> 200");
	close(fd);
	http_from(NULL);
	downloads_end_within(15000);
	front_stop(&front);

	/* A client that reads 64 KiB every 100 ms (never idle for
	 * stream_stall_timeout, 3 s), slower than server.download_min_rate
	 * (4m): cut off once it is behind (what the buffers took counts as
	 * sent). At its pace the file would take 100 s. */
	set_or_bail("server.stream_stall_timeout=3s");
	set_or_bail("server.download_min_rate=4m");
	front_start(&front, &settings, mgr, link_key);
	tap_is_int(download_start(path_of(big), &fd), 200,
		   "downloads: GET big.bin, read at 640 KiB/s -> 200");
	{
		int64_t t0 = mono_ms(), got = 0, checked = 0;
		long running = 1;
		char buf[65536];

		while (running != 0 && mono_ms() - t0 < 30000) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n > 0)
				got += n;
			sleep_ms(100);
			if (mono_ms() - checked >= 500) {
				checked = mono_ms();
				running = downloads_running();
			}
		}
		tap_ok(running == 0 && got < BIG_SIZE / 2,
		       "downloads: ... it is cut off, behind server.download_min_rate (%lld "
		       "bytes read, %lld ms)",
		       (long long)got, (long long)(mono_ms() - t0));
	}
	close(fd);
	downloads_end_within(15000);
	front_stop(&front);
	set_or_bail("server.download_min_rate=16k");

	/* A sandbox that sends nothing (its reader stopped), a long stall timeout. */
	set_or_bail("server.stream_stall_timeout=60s");
	set_or_bail("server.max_downloads=64");
	set_or_bail("server.max_downloads_per_ip=16");
	front_start(&front, &settings, mgr, link_key);
	rc = call("create_sandbox", "{\"name\":\"tools-dl\"}", &c);
	if (rc == 0 && !c.is_error)
		snprintf(dlid, sizeof(dlid), "%s", str_at(c.obj, "sandbox_id"));
	call_release(&c);
	slow = link_of("default", dlid, SLOW_CODE, "slow.bin");
	big2 = link_of("default", dlid, BIG_CODE("big.bin"), "big.bin");
	tap_ok(slow && big2, "downloads: sandbox tools-dl with slow.bin (its reader is stopped "
			     "past 1 MiB) and big.bin");

	tap_is_int(download_start(path_of(slow), &fd), 200, "downloads: GET slow.bin -> 200");
	tap_ok(drain(fd, 1500) < BIG_SIZE, "downloads: ... it stops coming");
	close(fd);
	ms = downloads_end_within(20000);
	tap_ok(ms >= 0,
	       "downloads: its client leaves: the download ends before the sandbox's "
	       "own 30 s limit (%ld ms)",
	       ms);

	tap_is_int(download_start(path_of(slow), &fd), 200, "downloads: GET slow.bin again");
	drain(fd, 1500);
	{
		int64_t t0 = mono_ms();
		front_stop(&front);
		ms = (long)(mono_ms() - t0);
		tap_ok(ms < 20000,
		       "downloads: the server stops meanwhile: before the sandbox's own 30 s "
		       "limit (%ld ms)",
		       ms);
	}
	close(fd);

	/* A sandbox deleted while its download's client takes nothing. */
	front_start(&front, &settings, mgr, link_key);
	threads = thread_count();
	tap_is_int(download_start(path_of(big2), &fd), 200, "downloads: GET big.bin of tools-dl");
	sleep_ms(1500); /* its client takes nothing: the buffers fill, the producer waits */
	{
		struct sbx_error err = SBX_ERROR_INIT;
		int64_t t0 = mono_ms();
		tap_ok(sbx_sandbox_delete(mgr, "default", dlid, &err) == 0,
		       "downloads: tools-dl is deleted meanwhile (%s)", err.msg);
		ms = downloads_end_within(45000);
		tap_ok(ms >= 0 && mono_ms() - t0 < 45000,
		       "downloads: ... the download ends before the 60 s stall timeout (%ld ms "
		       "after the delete)",
		       (long)(mono_ms() - t0));
	}
	tap_ok(threads_back_within(threads, 5000), "downloads: ... and its threads (%d, was %d)",
	       thread_count(), threads);
	close(fd);
	front_stop(&front);
	set_or_bail("server.stream_stall_timeout=30s");
}

/* The links of a tenant's files work: the artifact route finds a sandbox
 * by its id whoever owns it (links carry ids and no key), never by name.
 * Signed links through the HTTP front: served as handed out; refused (403)
 * with the path, the signature (one character of it, the length and the
 * alphabet kept: the 6th, a middle one, the last) or exp changed or the
 * query removed, each changed link naming a file that exists, and the
 * refusal holding none of the file; the link as handed out served after;
 * a link made with link_ttl = 1s is 403 expired 2 s later;
 * server.unsigned_links with auth off serves the plain link. */
static void test_tenant_artifact(void)
{
	struct front front;
	struct call c;
	char args[256];
	const char *sid = NULL;

	front_start(&front, &settings, mgr, link_key);
	if (call_as(mgr, &settings, "alice", SBX_MCP_VERSION_LATEST, "create_sandbox",
		    "{\"name\":\"alices-box\"}", &c) == 0 &&
	    !c.is_error)
		sid = str_at(c.obj, "sandbox_id");
	if (tap_ok(sid != NULL, "tenant alice creates a sandbox")) {
		char id[64], path[600], *body = NULL;
		long st;
		_cleanup_free_ char *url = NULL, *short_url = NULL, *by_name = NULL;
		struct call w;
		snprintf(id, sizeof(id), "%s", sid);
		url = link_of("alice", id,
			      "open('t.txt','w').write('alice'); open('u.txt','w').write('other')",
			      "t.txt");
		tap_ok(url != NULL, "alice writes t.txt and u.txt: %s", url ? url : "no link");
		st = get(path_of(url), &body);
		tap_ok(st == 200 && !strcmp(body, "alice"),
		       "its signed link is served, by id (200)");
		free(body);
		/* Each change names a file that exists: only the check refuses it. */
		snprintf(path, sizeof(path), "%s", path_of(url));
		if (strstr(path, "/t.txt?"))
			strstr(path, "/t.txt?")[1] = 'u';
		tap_is_int(get(path, NULL), 403, "the link with its path changed to u.txt is 403");
		snprintf(path, sizeof(path), "%s", path_of(url));
		{
			char *sig = strstr(path, "&sig=");
			if (sig)
				sig[10] = sig[10] == 'A' ? 'B' : 'A';
		}
		tap_is_int(get(path, NULL), 403, "the link with its sig changed is 403");
		/* One character of the signature changed, the length and the
		 * alphabet kept: a middle one, then the last (whose low two bits
		 * encode none of the MAC's: base64url's other spelling of the
		 * same bytes, refused all the same). */
		{
			static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
						     "abcdefghijklmnopqrstuvwxyz0123456789-_";
			const size_t at[] = {SBX_LINK_SIG_LEN / 2, SBX_LINK_SIG_LEN - 1};
			for (size_t i = 0; i < SBX_ARRAY_SIZE(at); i++) {
				char *sig;
				const char *ch;
				snprintf(path, sizeof(path), "%s", path_of(url));
				sig = strstr(path, "&sig=");
				ch = sig && strlen(sig + 5) == SBX_LINK_SIG_LEN
					 ? strchr(b64url, sig[5 + at[i]])
					 : NULL;
				if (!tap_ok(ch && *ch,
					    "the link's sig is %d base64url characters, last "
					    "in its query: %s",
					    SBX_LINK_SIG_LEN, path))
					continue;
				/* The character one bit away, in the alphabet. */
				sig[5 + at[i]] = b64url[(size_t)(ch - b64url) ^ 1];
				st = get(path, &body);
				tap_ok(
				    st == 403 && strstr(body, "invalid link") &&
					!strstr(body, "alice"),
				    "the link with sig character %zu of %d changed (%c to %c) is "
				    "403 invalid link, without the file: %ld %s",
				    at[i] + 1, SBX_LINK_SIG_LEN, *ch, sig[5 + at[i]], st, body);
				free(body);
			}
			st = get(path_of(url), &body);
			tap_ok(st == 200 && !strcmp(body, "alice"),
			       "... and the link as handed out is still served (200)");
			free(body);
		}
		snprintf(path, sizeof(path), "%s", path_of(url));
		{
			char *exp = strstr(path, "?exp=");
			if (exp)
				exp[6] = exp[6] == '9' ? '8' : (char)(exp[6] + 1);
		}
		tap_is_int(get(path, NULL), 403, "the link with its exp changed is 403");
		snprintf(path, sizeof(path), "%s", path_of(url));
		path[strcspn(path, "?")] = '\0';
		st = get(path, &body);
		tap_ok(st == 403 && strstr(body, "invalid link"),
		       "the link without its query is 403 invalid link: %s", body ? body : "");
		free(body);
		/* By name: even a link signed for the name finds nothing. */
		by_name =
		    sbx_artifact_link(link_key, "", "alices-box", "t.txt", "", time(NULL) + 60);
		tap_is_int(get(by_name, NULL), 404,
			   "the same file by the sandbox's name (a signed link) is 404");

		settings.server.link_ttl_ms = 1000;
		short_url = link_of("alice", id, "open('s.txt','w').write('short')", "s.txt");
		settings.server.link_ttl_ms = 24 * 3600 * 1000;
		tap_is_int(get(path_of(short_url), NULL), 200,
			   "a link made with link_ttl = 1s is served at once");
		sleep_ms(2100);
		st = get(path_of(short_url), &body);
		tap_ok(st == 403 && strstr(body, "expired"), "... and 2 s later is 403 expired: %s",
		       body ? body : "");
		free(body);

		snprintf(path, sizeof(path), "%s", path_of(url));
		path[strcspn(path, "?")] = '\0';
		settings.server.unsigned_links = true;
		st = get(path, &body);
		tap_ok(st == 200 && !strcmp(body, "alice"),
		       "unsigned_links = true, auth off: the plain link is served (200)");
		free(body);
		settings.server.unsigned_links = false;

		snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", id);
		tap_ok(call_as(mgr, &settings, "alice", SBX_MCP_VERSION_LATEST, "delete_sandbox",
			       args, &w) == 0 &&
			   !w.is_error,
		       "alice deletes it");
		call_release(&w);
		tap_is_int(get(path_of(url), NULL), 404, "its signed link is 404 then");
	}
	call_release(&c);
	front_stop(&front);
}

/* The MCP layer's key from the manager's state folder: the secret file is
 * made 0600 by the first, read by a second manager on the same folder (a
 * link of the first verifies with the second); a group-readable or
 * symbolically linked one makes sbx_mcp_new fail, saying why. */
static void test_link_secret(void)
{
	char dir[] = "/tmp/sbx-tools-state-XXXXXX", set[300], file[400], inst[128];
	char sig[SBX_LINK_SIG_LEN + 1];
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	struct stat st;
	int r;

	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(inst, sizeof(inst), "%s-links", instance);
	sbx_settings_init(&s);
	{
		const char *keys[] = {
		    "server.instance=",	 "engine.type=",       "engine.socket=", "sandbox.image=",
		    "server.state_dir=", "sandbox.pool_size=", "sandbox.disk="};
		const char *vals[] = {inst,
				      settings.engine.type,
				      settings.engine.socket,
				      settings.sandbox.image,
				      dir,
				      "0",
				      "0"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			snprintf(set, sizeof(set), "%s%s", keys[i], vals[i]);
			if (sbx_settings_set(&s, set, &err) < 0)
				tap_bail(err.msg);
		}
	}
	for (int round = 0; round < 4; round++) {
		sbx_manager *m = NULL;
		sbx_mcp *mcp = NULL;
		const struct sbx_mcp_config mc = {.settings = &s};
		if (sbx_manager_new(&s, engine, &m, &err) < 0)
			tap_bail(err.msg);
		snprintf(file, sizeof(file), "%s/%s", sbx_manager_state_dir(m),
			 SBX_LINK_SECRET_FILE);
		{
			struct sbx_mcp_config c2 = mc;
			c2.manager = m;
			r = sbx_mcp_new(&c2, &mcp, &err);
		}
		switch (round) {
		case 0:
			tap_ok(r == 0 && lstat(file, &st) == 0 && S_ISREG(st.st_mode) &&
				   (st.st_mode & 07777) == 0600 && st.st_size == 32,
			       "link secret: the first manager's MCP layer made %s, 0600", file);
			tap_ok(r == 0 && sbx_link_sign(sbx_mcp_link_key(mcp), "ab12", "x.txt", "",
						       99, sig) == 0,
			       "link secret: a link signed with it");
			break;
		case 1:
			tap_ok(r == 0 && sbx_link_verify(sbx_mcp_link_key(mcp), "ab12", "x.txt",
							 NULL, "99", sig, 1) == 0,
			       "link secret: a second manager on the folder reads it: the first's "
			       "link verifies");
			chmod(file, 0640);
			break;
		case 2:
			tap_ok(r == -EPERM && strstr(err.msg, file) && strstr(err.msg, "0600"),
			       "link secret: group-readable: refused: %s", err.msg);
			chmod(file, 0600);
			snprintf(set, sizeof(set), "%s.elsewhere", dir);
			if (rename(file, set) < 0 || symlink(set, file) < 0)
				tap_bail("symlink");
			break;
		case 3:
			tap_ok(r == -EPERM && strstr(err.msg, "symbolic link"),
			       "link secret: a symbolic link: refused: %s", err.msg);
			unlink(file);
			unlink(set);
			break;
		}
		sbx_mcp_free(mcp);
		sbx_manager_free(m);
	}
	sbx_settings_release(&s);
	snprintf(set, sizeof(set), "rm -rf '%s'", dir);
	if (system(set) != 0)
		tap_diag("could not remove %s", dir);
}

/* A timeout argument over sandbox.max_exec_timeout (3 s here) is cut to it,
 * and the result says so; one under it is left alone. */
static void test_timeout_cap(void)
{
	struct call c;
	char args[256];
	int64_t t0, ms;
	const char *n;

	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"command\":\"sleep 40; echo slept\",\"timeout\":3600}",
		 sandbox_id);
	t0 = mono_ms();
	rc = call("execute_terminal_command", args, &c);
	ms = mono_ms() - t0;
	tap_ok(rc == 0 && !c.is_error && bool_at(c.obj, "timed_out") &&
		   !strstr(str_at(c.obj, "stdout") ?: "", "slept") && ms < 30000,
	       "a command asking for timeout 3600 is stopped at sandbox.max_exec_timeout (3 s): "
	       "timed_out after %lld ms",
	       (long long)ms);
	n = str_at(c.obj, "notice");
	tap_ok(n && strstr(n, "3600") && strstr(n, "max_exec_timeout") && strstr(n, "3 s"),
	       "... and its notice says the timeout was cut: %s", n ? n : "none");
	call_release(&c);

	t0 = mono_ms();
	rc = run_py("import time\ntime.sleep(40)\nprint('slept')", 3600, &c);
	ms = mono_ms() - t0;
	tap_ok(rc == 0 && !c.is_error && bool_at(c.obj, "timed_out") && ms < 30000,
	       "Python code asking for timeout 3600 is interrupted at 3 s: timed_out after %lld ms",
	       (long long)ms);
	n = str_at(c.obj, "notice");
	tap_ok(n && strstr(n, "3600") && strstr(n, "max_exec_timeout") &&
		   strstr(n, "KeyboardInterrupt"),
	       "... its notice says the timeout was cut, and what the interrupt did: %s",
	       n ? n : "none");
	call_release(&c);

	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"command\":\"echo quick\",\"timeout\":2}", sandbox_id);
	rc = call("execute_terminal_command", args, &c);
	tap_ok(rc == 0 && !c.is_error && !has(c.obj, "notice") &&
		   !strcmp(str_at(c.obj, "stdout") ?: "", "quick\n"),
	       "a timeout under the maximum is left alone: no notice");
	call_release(&c);
}

/* delete_sandbox: only the owner's, and then a call on it says it was deleted. */
static void test_delete(void)
{
	struct call c;
	char id[SBX_SANDBOX_ID_MAX + 1] = "", args[256];

	rc = call("create_sandbox", "{\"name\":\"tools-del\"}", &c);
	if (tap_ok(rc == 0 && !c.is_error, "create a sandbox to delete: %s", c.text))
		snprintf(id, sizeof(id), "%s", str_at(c.obj, "sandbox_id"));
	call_release(&c);
	rc = call_as(mgr, &settings, "someone-else", SBX_MCP_VERSION_LATEST, "delete_sandbox",
		     "{\"sandbox_id\":\"tools-del\"}", &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "no sandbox"),
	       "another owner cannot delete it: %s", c.text);
	call_release(&c);
	rc = call("execute_terminal_command", "{\"sandbox_id\":\"tools-del\",\"command\":\"true\"}",
		  &c);
	tap_ok(rc == 0 && !c.is_error, "it still runs commands");
	call_release(&c);

	rc = call_as(mgr, &settings, "default", "2024-11-05", "delete_sandbox",
		     "{\"sandbox_id\":\"tools-del\"}", &c);
	tap_ok(rc == 0 && !c.is_error && bool_at(c.obj, "deleted") &&
		   !strcmp(str_at(c.obj, "sandbox_id") ?: "", id) &&
		   !strcmp(str_at(c.obj, "name") ?: "", "tools-del") && str_at(c.obj, "message"),
	       "delete_sandbox by name (2024-11-05): deleted, with its id and name: %s", c.text);
	call_release(&c);
	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"true\"}", id);
	rc = call("execute_terminal_command", args, &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "was deleted") &&
		   strstr(c.text, "create_sandbox"),
	       "a later call on it says it was deleted: %s", c.text);
	call_release(&c);
	rc = call("list_sandboxes", NULL, &c);
	tap_ok(rc == 0 && !c.is_error && !strstr(c.text, id), "list_sandboxes no longer shows it");
	call_release(&c);
	rc = call("delete_sandbox", "{\"sandbox_id\":\"tools-del\"}", &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "was deleted"),
	       "deleting it again is an error that says it was deleted: %s", c.text);
	call_release(&c);
	expect_error("delete_sandbox", "{}", "missing required argument 'sandbox_id'",
		     "sandbox_id missing");
}

/* Creates NAME as OWNER; true when it was created. */
static bool quota_create(const char *owner, const char *name, struct call *c)
{
	char args[128];

	snprintf(args, sizeof(args), "{\"name\":\"%s\"}", name);
	return call_as(mgr, &settings, owner, SBX_MCP_VERSION_LATEST, "create_sandbox", args, c) ==
		   0 &&
	       !c->is_error;
}

static void quota_delete(const char *owner, const char *name)
{
	struct call c;
	char args[128];
	int r;

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", name);
	r = call_as(mgr, &settings, owner, SBX_MCP_VERSION_LATEST, "delete_sandbox", args, &c);
	tap_ok(r == 0 && !c.is_error, "%s deletes %s: %s", owner, name, c.text);
	call_release(&c);
}

/* A key's `sandboxes`: exactly that many at once, the next refused with a
 * message naming the limit, the count and what to delete; another tenant
 * with the same limit is not affected; a deleted one frees its slot. */
static void test_quota_sandboxes(void)
{
	const struct sbx_auth_limits two = {2, -1, -1, -1, -1};
	struct call c;
	bool ok;

	call_limits = &two;
	ok = quota_create("quota-a", "qa-1", &c);
	call_release(&c);
	ok = ok && quota_create("quota-a", "qa-2", &c);
	tap_ok(ok, "with sandboxes=2 a tenant creates 2: %s", c.text);
	call_release(&c);
	ok = quota_create("quota-a", "qa-3", &c);
	tap_ok(
	    !ok && c.is_error &&
		strstr(c.text, "tenant \"quota-a\" may have at most 2 sandboxes") &&
		strstr(c.text, "sandboxes limit of its API key") && strstr(c.text, "has 2") &&
		strstr(c.text, "delete_sandbox") && strstr(c.text, "qa-1") &&
		strstr(c.text, "qa-2"),
	    "the third is refused, naming the limit, the count, its sandboxes and what to do: %s",
	    c.text);
	call_release(&c);
	ok = quota_create("quota-b", "qb-1", &c);
	tap_ok(ok, "another tenant with the same limit still creates: %s", c.text);
	call_release(&c);
	call_limits = NULL;
	ok = quota_create("quota-a", "qa-3", &c);
	tap_ok(ok, "the same tenant without the limit (another key) creates: %s", c.text);
	call_release(&c);
	call_limits = &two;
	quota_delete("quota-a", "qa-3");
	quota_delete("quota-a", "qa-1");
	ok = quota_create("quota-a", "qa-4", &c);
	tap_ok(ok, "after a delete it may create again: %s", c.text);
	call_release(&c);
	call_limits = NULL;
	quota_delete("quota-a", "qa-2");
	quota_delete("quota-a", "qa-4");
	quota_delete("quota-b", "qb-1");
}

/* ---- the audit log ---- */

/* The struct sbx_tool_audit a call as OWNER fills (the error's kind, the
 * sandbox it resolved), or false when the call itself failed. */
static bool audited(const char *owner, const char *name, const char *args, struct sbx_tool_audit *a,
		    struct call *c)
{
	int r;

	*a = (struct sbx_tool_audit){0};
	call_audit = a;
	r = call_as(mgr, &settings, owner, SBX_MCP_VERSION_LATEST, name, args, c);
	call_audit = NULL;
	return r == 0;
}

/* The structuredContent's KEY of a JSON-RPC reply's result, or "". */
static const char *reply_str(struct json_object *reply, const char *key)
{
	struct json_object *result, *sc;

	if (!json_object_object_get_ex(reply, "result", &result) ||
	    !json_object_object_get_ex(result, "structuredContent", &sc))
		return "";
	return str_at(sc, key) ? str_at(sc, key) : "";
}

/* The last line of the audit log at PATH whose tool is TOOL, parsed (NULL:
 * none within 2 s). */
static struct json_object *audit_line(const char *path, const char *tool)
{
	for (int i = 0; i < 40; i++) {
		FILE *f = fopen(path, "re");
		char line[SBX_AUDIT_LINE_MAX];
		struct json_object *found = NULL;
		while (f && fgets(line, sizeof(line), f)) {
			struct json_object *o = json_tokener_parse(line);
			if (o && str_at(o, "tool") && !strcmp(str_at(o, "tool"), tool)) {
				json_object_put(found);
				found = o;
			} else {
				json_object_put(o);
			}
		}
		if (f)
			fclose(f);
		if (found)
			return found;
		sleep_ms(50);
	}
	return NULL;
}

/* What the tools tell the audit log (struct sbx_tool_audit): the sandbox a
 * call resolved, by name too, or made; the kind of an isError, never its
 * message. Through the HTTP front, with an audit log: the lines of
 * create_sandbox, execute_python_code and delete_sandbox on a real sandbox
 * (its id and name, ok, bytes_out the response's size), and none of the
 * call's code or output in the log. */
static void test_audit(void)
{
	const struct sbx_auth_limits one = {1, -1, -1, -1, -1};
	struct sbx_error err = SBX_ERROR_INIT;
	char id[SBX_SANDBOX_ID_MAX + 1] = "", dir[] = "/tmp/sbx-tools-audit-XXXXXX", log[64];
	struct sbx_tool_audit a;
	struct front front;
	bool ok;
	struct call c;
	char *session, *text;
	struct reply r;
	struct json_object *o, *reply;

	ok = audited("audit", "create_sandbox", "{\"name\":\"audit-box\"}", &a, &c) &&
	     !c.is_error && !a.error && str_at(c.obj, "sandbox_id") &&
	     !strcmp(a.sandbox_id, str_at(c.obj, "sandbox_id")) &&
	     !strcmp(a.sandbox_name, "audit-box");
	tap_ok(ok, "audit: create_sandbox names the sandbox it made (%s, %s)", a.sandbox_id,
	       a.sandbox_name);
	snprintf(id, sizeof(id), "%s", a.sandbox_id);
	call_release(&c);
	ok = audited("audit", "execute_python_code",
		     "{\"sandbox_id\":\"audit-box\",\"code\":\"print(1)\"}", &a, &c) &&
	     !c.is_error && !a.error && !strcmp(a.sandbox_id, id) &&
	     !strcmp(a.sandbox_name, "audit-box");
	tap_ok(ok, "audit: a call by the sandbox's name resolves its id");
	call_release(&c);
	ok = audited("audit", "execute_python_code",
		     "{\"sandbox_id\":\"no-such-box\",\"code\":\"print(1)\"}", &a, &c) &&
	     c.is_error && a.error && !strcmp(a.error, "not_found") && !a.sandbox_id[0];
	tap_ok(ok, "audit: an unknown sandbox: not_found, no sandbox (%s)",
	       a.error ? a.error : "-");
	call_release(&c);
	ok = audited("audit", "execute_python_code", "{\"sandbox_id\":\"audit-box\"}", &a, &c) &&
	     c.is_error && a.error && !strcmp(a.error, "invalid_arguments");
	tap_ok(ok, "audit: no code: invalid_arguments (%s)", a.error ? a.error : "-");
	call_release(&c);
	call_limits = &one;
	ok = audited("audit", "create_sandbox", "{\"name\":\"audit-box2\"}", &a, &c) &&
	     c.is_error && a.error && !strcmp(a.error, "quota") && !a.sandbox_id[0];
	tap_ok(ok, "audit: past the key's sandboxes: quota (%s)", a.error ? a.error : "-");
	call_limits = NULL;
	call_release(&c);
	quota_delete("audit", "audit-box");

	/* Through the HTTP front. */
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(log, sizeof(log), "%s/audit.log", dir);
	if (sbx_audit_open(log, &front_audit, &err) < 0)
		tap_bail(err.msg);
	front_start(&front, &settings, mgr, link_key);
	session = mcp_initialize();
	r = mcp_post(session, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
		     "\"create_sandbox\",\"arguments\":{\"name\":\"audit-http\"}}}");
	reply = json_tokener_parse(r.body.data ? r.body.data : "");
	snprintf(id, sizeof(id), "%s", reply_str(reply, "sandbox_id"));
	json_object_put(reply);
	o = audit_line(log, "create_sandbox");
	tap_ok(r.status == 200 && id[0] && str_at(o, "sandbox_id") &&
		   !strcmp(str_at(o, "sandbox_id"), id) &&
		   !strcmp(str_at(o, "sandbox_name"), "audit-http") &&
		   !strcmp(str_at(o, "outcome"), "ok") && !strcmp(str_at(o, "tenant"), "default") &&
		   int_at(o, "bytes_out") == (int64_t)r.body.len,
	       "audit: HTTP create_sandbox: a line with the new sandbox's id and name, ok, "
	       "bytes_out the response's size");
	json_object_put(o);
	reply_release(&r);
	text = NULL;
	if (asprintf(&text,
		     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
		     "\"execute_python_code\",\"arguments\":{\"sandbox_id\":\"%s\",\"code\":\"x = "
		     "'code-marker-31c'\\nprint('output' + '-marker-8f0')\"}}}",
		     id) < 0)
		tap_bail("asprintf");
	r = mcp_post(session, NULL, text);
	free(text);
	o = audit_line(log, "execute_python_code");
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "output-marker-8f0") &&
		   !strcmp(str_at(o, "sandbox_id"), id) &&
		   !strcmp(str_at(o, "sandbox_name"), "audit-http") &&
		   !strcmp(str_at(o, "outcome"), "ok") && !strcmp(str_at(o, "error"), "") &&
		   int_at(o, "duration_ms") > 0 && int_at(o, "bytes_out") == (int64_t)r.body.len,
	       "audit: HTTP execute_python_code: its sandbox, ok, a duration, bytes_out the "
	       "response's size (%zu)",
	       r.body.len);
	json_object_put(o);
	reply_release(&r);
	r = mcp_post(session, NULL,
		     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
		     "\"delete_sandbox\",\"arguments\":{\"sandbox_id\":\"audit-http\"}}}");
	o = audit_line(log, "delete_sandbox");
	tap_ok(r.status == 200 && !strcmp(str_at(o, "sandbox_id"), id) &&
		   !strcmp(str_at(o, "outcome"), "ok"),
	       "audit: HTTP delete_sandbox by name: the sandbox's id");
	json_object_put(o);
	reply_release(&r);
	free(session);
	front_stop(&front);
	front_audit = sbx_audit_free(front_audit);
	{
		FILE *f = fopen(log, "re");
		char all[65536];
		size_t n = f ? fread(all, 1, sizeof(all) - 1, f) : 0;
		all[n] = '\0';
		if (f)
			fclose(f);
		tap_ok(n > 0 && !strstr(all, "code-marker-31c") && !strstr(all, "output-marker") &&
			   !strstr(all, "print("),
		       "audit: none of the call's code or output in the log");
	}
	unlink(log);
	rmdir(dir);
}

static void test_upload(void)
{
	struct call c;
	char path[256], args[1024], link[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/data.csv", upload_dir);
	f = fopen(path, "we");
	fputs("a,b\n1,2\n", f);
	fclose(f);
	snprintf(link, sizeof(link), "%s/link", upload_dir);
	tap_ok(symlink("/etc/passwd", link) == 0, "a symlink out of the upload folder");

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s\"}",
		 sandbox_id, path);
	rc = call("upload_file_to_sandbox", args, &c);
	tap_ok(rc == 0 && !c.is_error, "upload a file: %s", c.is_error ? c.text : "ok");
	tap_is_str(str_at(c.obj, "path"), "/app/results/data.csv", "into /app/results");
	tap_is_int(int_at(c.obj, "size"), 8, "size");
	tap_ok(str_at(c.obj, "url") && strstr(str_at(c.obj, "url"), "/artifacts/") &&
		   strstr(str_at(c.obj, "url"), "/data.csv"),
	       "with a url: %s", str_at(c.obj, "url"));
	{
		struct json_object *content = json_object_object_get(c.res, "content");
		struct json_object *it = json_object_array_get_idx(content, 1);
		tap_ok(json_object_array_length(content) == 2 &&
			   !strcmp(str_at(it, "type"), "resource_link") &&
			   !strcmp(str_at(it, "uri"), str_at(c.obj, "url")) &&
			   !strcmp(str_at(it, "name"), "data.csv"),
		       "and a resource_link to it");
	}
	call_release(&c);
	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"code\":\"import pandas as pd; "
		 "print(pd.read_csv('data.csv').b.sum())\"}",
		 sandbox_id);
	rc = call("execute_python_code", args, &c);
	tap_ok(rc == 0 && str_at(c.obj, "stdout") && !strcmp(str_at(c.obj, "stdout"), "2\n"),
	       "python reads the uploaded file");
	call_release(&c);

	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s\",\"dest_path\":\"/tmp\"}",
		 sandbox_id, path);
	rc = call("upload_file_to_sandbox", args, &c);
	tap_ok(rc == 0 && !c.is_error && !strcmp(str_at(c.obj, "path"), "/tmp/data.csv") &&
		   !has(c.obj, "url"),
	       "upload to /tmp: no url outside /app/results (%s)", c.text);
	call_release(&c);

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"local_file_path\":\"/etc/passwd\"}",
		 sandbox_id);
	expect_error("upload_file_to_sandbox", args, "upload folder", "a file outside the folder");
	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s/../../etc/passwd\"}", sandbox_id,
		 upload_dir);
	expect_error("upload_file_to_sandbox", args, "upload folder", "'..' out of the folder");
	snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s\"}",
		 sandbox_id, link);
	expect_error("upload_file_to_sandbox", args, "upload folder",
		     "a symlink out of the folder");
	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s/missing.csv\"}", sandbox_id,
		 upload_dir);
	{
		int r = call("upload_file_to_sandbox", args, &c);
		tap_ok(r == 0 && c.is_error && strstr(c.text, "missing.csv"),
		       "a missing file is an error that names it: %s", c.text);
		call_release(&c);
	}
	snprintf(args, sizeof(args),
		 "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s\",\"dest_path\":"
		 "\"/app/results/../../etc\"}",
		 sandbox_id, path);
	{
		int r = call("upload_file_to_sandbox", args, &c);
		tap_ok(r == 0 && c.is_error && strstr(c.text, "'..'"),
		       "a dest_path with '..' is an error: %s", c.text);
		call_release(&c);
	}
	{
		static const char *const bad_dest[] = {"/etc",	      "/etc/profile.d/x.sh",
						       "../../etc",   "/app/resultsx",
						       "/tmp/../etc", "/"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(bad_dest); i++) {
			snprintf(args, sizeof(args),
				 "{\"sandbox_id\":\"%s\",\"local_file_path\":\"%s\",\"dest_path\":"
				 "\"%s\"}",
				 sandbox_id, path, bad_dest[i]);
			expect_error("upload_file_to_sandbox", args, "is not allowed",
				     "dest_path outside /app/results and /tmp is refused");
		}
	}
	unlink(link);
	unlink(path);
}

/* ---- installs, with the test package index ---- */

static void test_install(const char *image)
{
	struct sbx_settings s2;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_manager *m2 = NULL;
	char url[128], set[256], args[256];
	struct call c;
	const char *st;

	if (!tap_ok(pkg_index_start("tools", url, sizeof(url)) == 0,
		    "tests/pkgindex.py serves the index"))
		goto stop_index;
	sbx_settings_init(&s2);
	snprintf(set, sizeof(set), "server.instance=%s", instance2);
	sbx_settings_set(&s2, set, &err);
	snprintf(set, sizeof(set), "engine.socket=%s", settings.engine.socket);
	sbx_settings_set(&s2, set, &err);
	snprintf(set, sizeof(set), "sandbox.image=%s", image);
	sbx_settings_set(&s2, set, &err);
	sbx_settings_set(&s2, "sandbox.network=host", &err);
	sbx_settings_set(&s2, "sandbox.disk=0", &err);
	sbx_settings_set(&s2, "sandbox.pool_size=2", &err);
	snprintf(set, sizeof(set), "sandbox.index_url=%s", url);
	tap_ok(sbx_settings_set(&s2, set, &err) == 0, "index_url %s (%s)", url, err.msg);
	if (!tap_ok(sbx_manager_new(&s2, engine, &m2, &err) == 0, "a manager for installs (%s)",
		    err.msg))
		goto out;

	rc = call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "create_sandbox",
		     "{\"name\":\"pkgs\"}", &c);
	tap_ok(rc == 0 && !c.is_error, "a sandbox that reaches the index: %s", c.text);
	call_release(&c);

	rc = call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "install_package_in_sandbox",
		     "{\"sandbox_id\":\"pkgs\",\"package_name\":\"sbxdemo\"}", &c);
	tap_ok(rc == 0 && !c.is_error, "install_package_in_sandbox sbxdemo: %s", c.text);
	st = str_at(c.obj, "status");
	tap_ok(st && (!strcmp(st, "success") || !strcmp(st, "installing")),
	       "status success or installing: %s", st);
	tap_ok(str_at(c.obj, "message") && has(c.obj, "seconds"), "with a message and seconds");
	call_release(&c);
	for (int i = 0; i < 120; i++) {
		call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST,
			"check_package_installation_status",
			"{\"sandbox_id\":\"pkgs\",\"package_name\":\"sbxdemo\"}", &c);
		st = str_at(c.obj, "status");
		if (!st || strcmp(st, "installing") != 0)
			break;
		call_release(&c);
		sleep(1);
	}
	tap_is_str(st, "success", "check_package_installation_status: success");
	tap_is_str(str_at(c.obj, "version"), "1.0", "with the version");
	call_release(&c);

	tap_ok(
	    call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "execute_python_code",
		    "{\"sandbox_id\":\"pkgs\",\"code\":\"import sbxdemo; print(sbxdemo.VALUE)\"}",
		    &c) == 0 &&
		str_at(c.obj, "stdout") && !strcmp(str_at(c.obj, "stdout"), "42\n"),
	    "the installed package imports");
	call_release(&c);

	rc = call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "list_sandboxes", NULL, &c);
	tap_ok(rc == 0 && strstr(c.text, "\"packages\":[\"sbxdemo\"]"),
	       "list_sandboxes shows the package: %s", c.text);
	call_release(&c);

	call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "check_package_installation_status",
		"{\"sandbox_id\":\"pkgs\",\"package_name\":\"numpy\"}", &c);
	tap_is_str(str_at(c.obj, "status"), "installed", "numpy: installed (from the image)");
	call_release(&c);
	call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "check_package_installation_status",
		"{\"sandbox_id\":\"pkgs\",\"package_name\":\"sbxdemo-absent\"}", &c);
	tap_is_str(str_at(c.obj, "status"), "not_installed", "an unknown package: not_installed");
	call_release(&c);

	call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "install_package_in_sandbox",
		"{\"sandbox_id\":\"pkgs\",\"package_name\":\"sbxdemo-absent==9\"}", &c);
	st = str_at(c.obj, "status");
	for (int i = 0; i < 120 && st && !strcmp(st, "installing"); i++) {
		call_release(&c);
		sleep(1);
		call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST,
			"check_package_installation_status",
			"{\"sandbox_id\":\"pkgs\",\"package_name\":\"sbxdemo-absent==9\"}", &c);
		st = str_at(c.obj, "status");
	}
	tap_is_str(st, "failed", "a package the index does not have: failed");
	tap_ok(!c.is_error && str_at(c.obj, "log_tail") && *str_at(c.obj, "log_tail"),
	       "a normal result with pip's log tail");
	call_release(&c);

	snprintf(args, sizeof(args), "{\"sandbox_id\":\"pkgs\",\"package_name\":\"x y\"}");
	rc = call_as(m2, &s2, "default", SBX_MCP_VERSION_LATEST, "install_package_in_sandbox", args,
		     &c);
	tap_ok(rc == 0 && c.is_error, "an invalid spec is an error: %s", c.text);
	call_release(&c);

	tap_ok(sbx_sandbox_delete(m2, "default", "pkgs", &err) == 0, "delete the install sandbox");
out:
	sbx_manager_free(m2);
	sbx_settings_release(&s2);
stop_index:
	pkg_index_stop();
}

/* Waits up to 60 s until list_sandboxes shows the sandbox STATUS ("sleeping"),
 * or (STATUS NULL) none at all: whether it did; its entry's asleep_since
 * present into *RET_SINCE (may be NULL). */
static bool wait_listed(sbx_manager *m, const struct sbx_settings *s, const char *status,
			bool *ret_since)
{
	int64_t t0 = mono_ms();
	bool got = false;
	struct call c;

	do {
		struct json_object *one;
		sleep_ms(250);
		rc = call_as(m, s, "default", SBX_MCP_VERSION_LATEST, "list_sandboxes", NULL, &c);
		one = json_object_array_get_idx(json_object_object_get(c.obj, "sandboxes"), 0);
		got = rc == 0 && (status ? one && str_at(one, "status") &&
					       strcmp(str_at(one, "status"), status) == 0
					 : int_at(c.obj, "count") == 0);
		if (got && ret_since)
			*ret_since = has(one, "asleep_since");
		call_release(&c);
	} while (!got && mono_ms() - t0 < 60000);
	return got;
}

/* A manager whose sandboxes are put to sleep after 2 s unused (where the
 * engine keeps a stopped container; elsewhere they expire then): listed
 * sleeping; every kind of call on one wakes it, its files kept, and the
 * result's notice says it was asleep. Where they expire, a call on one
 * says so. */
static void test_reap(const char *type, const char *url, const char *image)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_manager *m = NULL;
	struct call c;
	char set[256], inst[96];
	bool since = false;
	int64_t t0;

	snprintf(inst, sizeof(inst), "%s-reap", instance);
	sbx_settings_init(&s);
	{
		const char *keys[] = {
		    "server.instance=",	       "engine.type=",	     "engine.socket=",
		    "sandbox.image=",	       "sandbox.pool_size=", "sandbox.idle_timeout=",
		    "sandbox.sleep_lifetime=", "sandbox.disk=",	     "sandbox.upload_dir="};
		const char *vals[] = {inst, type, url, image, "0", "2s", "0s", "0", upload_dir};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			snprintf(set, sizeof(set), "%s%s", keys[i], vals[i]);
			if (sbx_settings_set(&s, set, &err) < 0)
				tap_bail(err.msg);
		}
	}
	if (!tap_call(sbx_manager_new(&s, engine, &m, &err), err.msg,
		      "a manager with sandbox.idle_timeout=2s"))
		goto out;
	rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "create_sandbox",
		     "{\"name\":\"short-lived\"}", &c);
	tap_ok(rc == 0 && !c.is_error, "create a sandbox: %s", c.text);
	call_release(&c);
	if (sbx_engine_restart_keeps(engine)) {
		static const struct {
			const char *tool, *args, *want;
		} wakers[] = {
		    {"execute_terminal_command",
		     "{\"sandbox_id\":\"short-lived\",\"command\":\"cat kept.txt\"}", "kept"},
		    {"check_package_installation_status",
		     "{\"sandbox_id\":\"short-lived\",\"package_name\":\"numpy\"}", "installed"},
		    {"upload_file_to_sandbox",
		     "{\"sandbox_id\":\"short-lived\",\"local_file_path\":\"UPLOAD\"}", "size"},
		    {"reset_python_interpreter", "{\"sandbox_id\":\"short-lived\"}", "reset"},
		    {"execute_python_code",
		     "{\"sandbox_id\":\"short-lived\",\"code\":\"print(open('kept.txt').read())\"}",
		     "kept"},
		};
		char upload[128], args[512];
		FILE *f;

		snprintf(upload, sizeof(upload), "%s/wake.txt", upload_dir);
		f = fopen(upload, "w");
		if (f) {
			fputs("wake\n", f);
			fclose(f);
		}
		rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "execute_python_code",
			     "{\"sandbox_id\":\"short-lived\",\"code\":\"x = 1\\n"
			     "open('kept.txt', 'w').write('kept')\"}",
			     &c);
		tap_ok(rc == 0 && !c.is_error, "write a file and a variable: %s", c.text);
		call_release(&c);
		for (size_t i = 0; i < SBX_ARRAY_SIZE(wakers); i++) {
			const char *at;
			bool ok;
			t0 = mono_ms();
			ok = wait_listed(m, &s, "sleeping", &since);
			tap_ok(ok && since,
			       "unused, it is listed sleeping, with since when, within 60 s "
			       "(%lld ms)",
			       (long long)(mono_ms() - t0));
			at = strstr(wakers[i].args, "UPLOAD");
			if (at)
				snprintf(args, sizeof(args), "%.*s%s%s", (int)(at - wakers[i].args),
					 wakers[i].args, upload, at + strlen("UPLOAD"));
			else
				snprintf(args, sizeof(args), "%s", wakers[i].args);
			rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, wakers[i].tool, args,
				     &c);
			tap_ok(rc == 0 && !c.is_error && c.text && strstr(c.text, wakers[i].want),
			       "%s wakes it and succeeds: %.200s", wakers[i].tool, c.text);
			tap_ok(rc == 0 && str_at(c.obj, "notice") &&
				   strstr(str_at(c.obj, "notice"), "asleep"),
			       "... and its notice says the sandbox was asleep: %s",
			       rc == 0 && str_at(c.obj, "notice") ? str_at(c.obj, "notice")
								  : "(none)");
			call_release(&c);
		}
		rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "execute_python_code",
			     "{\"sandbox_id\":\"short-lived\",\"code\":\"print(1)\"}", &c);
		tap_ok(rc == 0 && !c.is_error && !str_at(c.obj, "notice"),
		       "a call on an awake sandbox has no such notice: %s", c.text);
		call_release(&c);
		unlink(upload);
		goto out;
	}
	t0 = mono_ms();
	since = wait_listed(m, &s, NULL, NULL);
	tap_ok(since, "unused, it is gone from list_sandboxes within 60 s (%lld ms)",
	       (long long)(mono_ms() - t0));
	rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "execute_python_code",
		     "{\"sandbox_id\":\"short-lived\",\"code\":\"print(1)\"}", &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "expired") &&
		   strstr(c.text, "sandbox.idle_timeout") && strstr(c.text, "create_sandbox"),
	       "a call on it says it expired, why, and what to do: %s", c.text);
	call_release(&c);
out:
	sbx_manager_free(m);
	tap_is_int(count_instance(inst), 0, "no container of the reaping manager is left");
	sbx_settings_release(&s);
}

/* A manager whose engine socket leads nowhere: every tool that needs the
 * engine is an isError result that says so, never a crash. */
static void test_engine_down(const char *type)
{
	struct sbx_engine_config cfg = {.type = type, .url = "unix:///nonexistent/sbx-tools.sock"};
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	sbx_engine *e = NULL;
	sbx_manager *m = NULL;
	struct call c;

	sbx_settings_init(&s);
	if (!tap_ok(sbx_engine_open(&cfg, &e, &err) == 0 && sbx_manager_new(&s, e, &m, &err) == 0,
		    "a manager on an engine that is not there (%s)", err.msg)) {
		sbx_engine_free(e);
		sbx_settings_release(&s);
		return;
	}
	rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "create_sandbox", NULL, &c);
	tap_ok(rc == 0 && c.is_error && strstr(c.text, "Docker or Podman"),
	       "engine down: create_sandbox is an error that says what to check: %s", c.text);
	tap_ok(rc == 0 && c.text && strstr(c.text, "the container engine is not reachable") &&
		   !strstr(c.text, "/nonexistent") && !strstr(c.text, "sbx-tools.sock"),
	       "... in words that do not show the host's engine socket");
	call_release(&c);
	rc = call_as(m, &s, "default", SBX_MCP_VERSION_LATEST, "execute_python_code",
		     "{\"sandbox_id\":\"x\",\"code\":\"1\"}", &c);
	tap_ok(rc == 0 && c.is_error, "engine down: execute_python_code is an error: %s", c.text);
	tap_ok(rc == 0 && c.text && !strstr(c.text, "/nonexistent"),
	       "... without the host's engine socket either");
	call_release(&c);
	/* GET /ready of a server on this manager. */
	sbx_settings_set(&s, "server.listen=127.0.0.1", &err);
	sbx_settings_set(&s, "server.port=0", &err);
	{
		struct front front;
		struct reply r;
		front_start(&front, &s, m, NULL);
		r = request("GET", "/ready", NULL, NULL);
		tap_ok(r.status == 503 && r.body.data &&
			   strstr(r.body.data, "the container engine is not reachable") &&
			   !strstr(r.body.data, "/nonexistent") &&
			   !strstr(r.body.data, "sbx-tools.sock"),
		       "engine down: GET /ready -> 503 without the host's engine socket (%ld: %s)",
		       r.status, r.body.data ? r.body.data : "");
		reply_release(&r);
		front_stop(&front);
	}
	sbx_manager_free(m);
	sbx_engine_free(e);
	sbx_settings_release(&s);
}

/* ---- GET /ready against the real engine, through a relay ---- */

#define READY_THREADS 4
#define READY_MIN 200	  /* requests in the burst, at least */
#define READY_MIN_MS 2500 /* and for at least this long, past the cache's second */

struct ready_burst {
	pthread_t thread;
	int made, ok;
	const struct timespec *t0;
};

static void *ready_burst_main(void *arg)
{
	struct ready_burst *b = arg;

	while (b->made < READY_MIN / READY_THREADS || elapsed_ms(b->t0) < READY_MIN_MS) {
		struct reply r = request("GET", "/ready", NULL, NULL);
		b->made++;
		b->ok +=
		    r.status == 200 && r.body.data && strstr(r.body.data, "\"status\":\"ready\"");
		reply_release(&r);
		sleep_ms(2); /* a burst that leaves the shared machine some air */
	}
	return NULL;
}

/* The HTTP server with a manager whose engine is the real one reached through
 * a relay that counts its pings: a burst of /ready reaches the engine about
 * once a second, not once a request; with the relay gone /ready turns 503. */
static void test_ready(const char *type, const char *url)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct ready_burst b[READY_THREADS] = {{0}};
	struct tcp_relay *relay = NULL;
	struct front front;
	struct sbx_settings s;
	sbx_engine *e = NULL;
	sbx_manager *m = NULL;
	char set[256], tcp_url[64];
	struct timespec t0;
	struct reply r;
	unsigned before, pings;
	int made = 0, ok = 0, r0;
	long ms;

	if (strncmp(url, "unix://", 7) != 0) {
		tap_skip(7, "GET /ready through a relay needs a unix:// engine socket");
		return;
	}
	r0 = tcp_relay_new(url + 7, "_ping HTTP/1.", &relay);
	if (!tap_ok(r0 == 0, "a counting relay to %s (%s)", url + 7, strerror(-r0))) {
		tap_skip(6, "no relay");
		return;
	}
	snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", tcp_relay_port(relay));
	sbx_settings_init(&s);
	{
		char inst[96];
		snprintf(inst, sizeof(inst), "%s-ready", instance);
		const char *keys[] = {
		    "server.instance=", "engine.type=",	      "engine.socket=", "server.listen=",
		    "server.port=",	"sandbox.pool_size=", "sandbox.disk="};
		const char *vals[] = {inst, type, tcp_url, "127.0.0.1", "0", "0", "0"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			snprintf(set, sizeof(set), "%s%s", keys[i], vals[i]);
			if (sbx_settings_set(&s, set, &err) < 0)
				tap_bail(err.msg);
		}
	}
	{
		/* A plain relay: no TLS, whatever the engine (only the
		 * manager is asked here, never a node). */
		struct sbx_engine_config ec = {.type = type, .url = tcp_url, .timeout_ms = 5000};
		if (sbx_engine_open(&ec, &e, &err) < 0 || sbx_manager_new(&s, e, &m, &err) < 0)
			tap_bail(err.msg);
	}
	front_start(&front, &s, m, NULL);

	r = request("GET", "/ready", NULL, NULL);
	tap_ok(r.status == 200 && r.body.data && strstr(r.body.data, "\"status\":\"ready\"") &&
		   tcp_relay_matches(relay) >= 1,
	       "GET /ready through the relay -> 200 ready, after a ping of the engine (%ld, %u "
	       "pings: %s)",
	       r.status, tcp_relay_matches(relay), r.body.data ? r.body.data : "");
	reply_release(&r);

	/* The burst. */
	before = tcp_relay_matches(relay);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < READY_THREADS; i++) {
		b[i].t0 = &t0;
		if (pthread_create(&b[i].thread, NULL, ready_burst_main, &b[i]) != 0)
			tap_bail("pthread_create");
	}
	for (int i = 0; i < READY_THREADS; i++) {
		pthread_join(b[i].thread, NULL);
		made += b[i].made;
		ok += b[i].ok;
	}
	ms = elapsed_ms(&t0);
	pings = tcp_relay_matches(relay) - before;
	tap_is_int(ok, made, "a burst of %d GET /ready in %ld ms: every one 200 ready", made, ms);
	if (!tap_ok(pings <= (unsigned)(ms / 1000 + 2),
		    "... reaches the engine at most once a second: %u pings for %d requests in "
		    "%ld ms",
		    pings, made, ms))
		tap_diag("  the engine was pinged more often than the one-second cache allows");
	tap_ok(pings >= 1, "... and asks it again once the cached answer is a second old (%u)",
	       pings);

	/* The engine goes away. */
	relay = tcp_relay_free(relay);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		r = request("GET", "/ready", NULL, NULL);
		if (r.status == 503 || elapsed_ms(&t0) >= 15000)
			break;
		reply_release(&r);
		sleep_ms(100);
	}
	tap_ok(r.status == 503 && r.body.data &&
		   strstr(r.body.data, "\"status\":\"unavailable\"") &&
		   !strstr(r.body.data, "\"engine\":\"ok\""),
	       "with the relay stopped GET /ready turns 503 unavailable within 15 s (%ld after "
	       "%ld ms: %s)",
	       r.status, elapsed_ms(&t0), r.body.data ? r.body.data : "");
	tap_ok(r.body.data && strstr(r.body.data, "the container engine") &&
		   !strstr(r.body.data, tcp_url + 6) && !strstr(r.body.data, "tcp://"),
	       "... in words that do not show the engine's address %s", tcp_url);
	reply_release(&r);

	front_stop(&front);
	sbx_manager_free(m);
	sbx_engine_free(e);
	sbx_settings_release(&s);
}

static size_t count_instance(const char *inst)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, inst}};
	struct sbx_container_summary *list = NULL;
	size_t n = 0;
	if (sbx_container_list(engine, want, 1, &list, &n, NULL) < 0)
		return (size_t)-1;
	sbx_container_list_free(list, n);
	return n;
}

int main(int argc, char **argv)
{
	struct sbx_engine_config cfg = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	char set[256], dir[] = "/tmp/sbx-tools-up-XXXXXX";
	const char *image;

	if (argc < 3) {
		fprintf(stderr, "usage: %s TYPE URL [IMAGE]\n", argv[0]);
		return 2;
	}
	cfg.type = argv[1];
	cfg.url = argv[2];
	cfg.tls = test_engine_tls(argv[1]); /* a swarm's node over TCP */
	image = argc > 3 ? argv[3] : "localhost/mcp-sandbox:latest";
	/* SBX_TEST_INSTANCE_TAG first, as tests/sandbox-fixture.c puts it. */
	snprintf(instance, sizeof(instance), "%s%stools-%s-%ld-%ld",
		 getenv("SBX_TEST_INSTANCE_TAG") ? getenv("SBX_TEST_INSTANCE_TAG") : "",
		 getenv("SBX_TEST_INSTANCE_TAG") ? "-" : "", argv[1], (long)getpid(),
		 (long)time(NULL));
	snprintf(instance2, sizeof(instance2), "%s-pkg", instance);
	if (sbx_engine_open(&cfg, &engine, &err) < 0 || sbx_engine_ping(engine, &err) < 0) {
		printf("Bail out! %s engine at %s: %s\n", argv[1], argv[2], err.msg);
		return 1;
	}
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(upload_dir, sizeof(upload_dir), "%s", dir);

	sbx_settings_init(&settings);
	{
		const char *keys[] = {
		    "server.instance=", "engine.type=",	       "engine.socket=",
		    "sandbox.image=",	"sandbox.upload_dir=", "sandbox.max_exec_timeout=",
		    "sandbox.disk=",	"sandbox.pool_size="};
		/* A pool of 2: the default (16) would start 16 containers. */
		const char *vals[] = {instance,	  argv[1], argv[2], image,
				      upload_dir, "3s",	   "0",	    "2"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++) {
			snprintf(set, sizeof(set), "%s%s", keys[i], vals[i]);
			if (sbx_settings_set(&settings, set, &err) < 0)
				tap_bail(err.msg);
		}
	}
	if (sbx_link_key_open(NULL, &link_key, &err) < 0)
		tap_bail(err.msg);
	if (sbx_manager_new(&settings, engine, &mgr, &err) < 0) {
		printf("Bail out! manager: %s\n", err.msg);
		return 1;
	}
	schemas = sbx_tools_list(SBX_MCP_VERSION_LATEST);

	if (getenv("SBX_TOOLS_ONLY") && !strcmp(getenv("SBX_TOOLS_ONLY"), "arguments")) {
		/* The arguments' checks alone, no sandbox (their mutation runs). */
		test_list();
		test_bad_arguments();
		goto out;
	}
	/* One case alone, in a sandbox of its own (their mutation runs). */
	if (getenv("SBX_TOOLS_ONLY")) {
		static const struct {
			const char *name;
			void (*run)(void);
		} only[] = {{"upload", test_upload},
			    {"ranges", test_ranges},
			    {"downloads", test_downloads}};

		for (size_t i = 0; i < SBX_ARRAY_SIZE(only); i++) {
			if (strcmp(getenv("SBX_TOOLS_ONLY"), only[i].name) != 0)
				continue;
			test_create_and_list();
			only[i].run();
			tap_ok(sbx_sandbox_delete(mgr, "default", sandbox_id, &err) == 0,
			       "delete the sandbox (%s)", err.msg);
			goto out;
		}
	}
	test_list();
	test_bad_arguments();
	test_create_and_list();
	test_python();
	test_notebook();
	test_terminal();
	test_client_gone();
	test_tenant_artifact();
	test_ranges();
	test_downloads();
	test_link_secret();
	test_timeout_cap();
	test_delete();
	test_quota_sandboxes();
	test_audit();
	test_upload();
	tap_ok(sbx_sandbox_delete(mgr, "default", sandbox_id, &err) == 0, "delete the sandbox (%s)",
	       err.msg);
	test_install(image);
	test_reap(argv[1], argv[2], image);
	test_engine_down(argv[1]);
	test_ready(argv[1], argv[2]);
out:
	mgr = sbx_manager_free(mgr);
	tap_is_int(count_instance(instance), 0, "no container of this run is left");
	tap_is_int(count_instance(instance2), 0, "no container of the install manager is left");
	json_object_put(schemas);
	sbx_settings_release(&settings);
	rmdir(upload_dir);
	engine = sbx_engine_free(engine);
	sbx_link_key_free(link_key);
	return tap_done();
}
