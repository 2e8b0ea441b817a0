/* SPDX-License-Identifier: MIT */
/*
 * The MCP layer: JSON-RPC 2.0 messages, the session lifecycle and the
 * dispatch to the tools (src/tools/tools.h). Transport-neutral (include/sbx/mcp.h).
 *
 * A session's protocol state (negotiated version, log level) sits under the
 * session's mutex, held only for the few instructions that read or write it,
 * never across a tools/call: many threads may run requests on one session.
 *
 * Cancellation: every request but initialize is on its session's in-flight
 * list while it runs. notifications/cancelled {requestId} marks the entries
 * with that id (string and integer ids never match each other); unknown or
 * finished ids are ignored. A marked request's tool sees ctx->cancelled,
 * its notifications stop, and its response is dropped: the run returns no
 * reply for it (the transport then ends the exchange without one). A client
 * that has gone sets the same mark: sbx_mcp_session_close marks every entry
 * of the session (and every later one as it is added), and a run whose
 * transport's notifier says GONE marks its own entries when they are next
 * asked (every poll of ctx->cancelled, each notification, the end).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <json-c/printbuf.h>

#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/mcp.h"
#include "sbx/metrics.h"
#include "sbx/utf8.h"
#include "mcp/mcp-internal.h"
#include "tools/tools.h"

/* Nesting accepted in a JSON body: enough for any tool argument. */
#define MCP_JSON_DEPTH 64
/* Messages in one batch. */
#define MCP_BATCH_MAX 64
/* A batch's responses are held until its last request ends: once they hold
 * this many bytes, its further requests that go into containers are
 * refused (each one response more at most: a tool's output cap, a file). */
#define MCP_BATCH_REPLY_MAX (16u << 20)
#define MCP_VERSION_MAX 16
/* How replies are serialised (and measured for the audit log). */
#define MCP_JSON_TEXT (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

static const char *const versions[] = SBX_MCP_VERSIONS;

static const char instructions[] =
    "mcp-sandbox runs Python code and shell commands in isolated containers (sandboxes).\n"
    "Workflow:\n"
    "1. list_sandboxes to see the sandboxes you already have; reuse one when it fits.\n"
    "2. create_sandbox if you need a new one (remember the sandbox id it returns).\n"
    "3. install_package_in_sandbox for every Python package you need that is missing.\n"
    "4. check_package_installation_status until the install reports success (large packages "
    "take a while).\n"
    "5. execute_python_code or execute_terminal_command in that sandbox. The Python "
    "interpreter keeps variables and imports between calls, like a notebook; "
    "reset_python_interpreter starts it afresh.\n"
    "upload_file_to_sandbox copies a file from the server's upload folder into a sandbox.\n"
    "Code runs in /app/results. Save figures with plt.savefig('name.png') into /app/results; "
    "never call plt.show() (there is no display). Files written to /app/results come back as "
    "links in the result.";

struct sbx_mcp {
	const struct sbx_settings *settings;
	sbx_manager *manager;
	sbx_tools_call_fn tools_call;
	const sbx_link_key *link_key; /* cfg's, or own_link_key */
	sbx_link_key *own_link_key;
	sbx_audit *audit;      /* cfg's, may be NULL */
	sbx_call_table *calls; /* the tool calls each tenant runs, for its calls quota */
	pthread_mutex_t lock;  /* guards public_url and tools_text */
	char *public_url;
	/* The tools/list "tools" array as text, per entry of versions[]; built
	 * on first use, then constant. */
	char *tools_text[SBX_ARRAY_SIZE(versions)];
};

/* One request in flight: on its session's list while it runs. Lives on the
 * stack of the thread that runs the request. */
struct inflight {
	struct inflight *next;
	struct json_object *id; /* borrowed from the message, which outlives the entry */
	atomic_bool cancelled;
	const struct sbx_mcp_notifier *outer; /* the transport's, may be NULL */
	struct sbx_tool_notifier notifier;    /* what the tools get: OUTER until cancelled */
};

struct sbx_mcp_session {
	sbx_mcp *mcp;
	atomic_int refs;
	enum sbx_mcp_transport transport;
	char *owner;
	struct sbx_auth_limits limits;	 /* of its key, as last read (under lock) */
	char key_id[SBX_KEY_ID_LEN + 1]; /* its API key's id, "" when none */
	/* How the audit log names it (sbx_mcp_session_set_audit). */
	char audit_session[SBX_AUDIT_FIELD_MAX + 1];
	pthread_mutex_t lock;	       /* guards the fields below */
	char version[MCP_VERSION_MAX]; /* "" until initialize succeeded */
	bool initialized_notified;
	enum sbx_log_level log_level;
	/* The client asked for resources (list, templates or read) in this
	 * session: only then do its commands look for changed files to send
	 * notifications/resources/list_changed (an exec each). */
	bool resources_watched;
	struct inflight *inflight; /* requests running now */
	bool closed;		   /* sbx_mcp_session_close: its client has gone */
};

struct sbx_mcp_input {
	struct json_object *root; /* one object, or an array of them (a batch) */
};

int sbx_mcp_new(const struct sbx_mcp_config *cfg, sbx_mcp **ret_mcp, struct sbx_error *err)
{
	sbx_mcp *m = calloc(1, sizeof(*m));

	if (!m || !(m->public_url = strdup("http://127.0.0.1"))) {
		free(m);
		return sbx_error_set(err, -ENOMEM, "mcp: out of memory");
	}
	if (sbx_call_table_new(&m->calls) < 0) {
		free(m->public_url);
		free(m);
		return sbx_error_set(err, -ENOMEM, "mcp: out of memory");
	}
	m->settings = cfg->settings;
	m->manager = cfg->manager;
	m->tools_call = sbx_tools_call;
	m->link_key = cfg->link_key;
	m->audit = cfg->audit;
	if (!m->link_key) {
		const char *dir = m->manager ? sbx_manager_state_dir(m->manager) : NULL;
		int r = sbx_link_key_open(dir, &m->own_link_key, err);
		if (r < 0) {
			sbx_call_table_free(m->calls);
			free(m->public_url);
			free(m);
			return r;
		}
		m->link_key = m->own_link_key;
	}
	pthread_mutex_init(&m->lock, NULL);
	*ret_mcp = m;
	return 0;
}

void sbx_mcp_set_tools_call(sbx_mcp *m, sbx_tools_call_fn fn)
{
	m->tools_call = fn ? fn : sbx_tools_call;
}

sbx_call_table *sbx_mcp_call_table(sbx_mcp *m)
{
	return m->calls;
}

sbx_mcp *sbx_mcp_free(sbx_mcp *m)
{
	if (!m)
		return NULL;
	pthread_mutex_destroy(&m->lock);
	sbx_link_key_free(m->own_link_key);
	sbx_call_table_free(m->calls);
	free(m->public_url);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(m->tools_text); i++)
		free(m->tools_text[i]);
	free(m);
	return NULL;
}

const sbx_link_key *sbx_mcp_link_key(const sbx_mcp *m)
{
	return m->link_key;
}

int sbx_mcp_set_public_url(sbx_mcp *m, const char *url)
{
	char *copy = strdup(url);
	size_t len;

	if (!copy)
		return -ENOMEM;
	len = strlen(copy);
	while (len > 0 && copy[len - 1] == '/')
		copy[--len] = '\0';
	pthread_mutex_lock(&m->lock);
	free(m->public_url);
	m->public_url = copy;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* A copy of the public URL, or NULL on -ENOMEM. */
static char *public_url_dup(sbx_mcp *m)
{
	char *url;

	pthread_mutex_lock(&m->lock);
	url = strdup(m->public_url);
	pthread_mutex_unlock(&m->lock);
	return url;
}

bool sbx_mcp_version_supported(const char *v)
{
	if (!v)
		return false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(versions); i++)
		if (strcmp(v, versions[i]) == 0)
			return true;
	return false;
}

int sbx_mcp_session_new(sbx_mcp *m, enum sbx_mcp_transport transport, const char *owner,
			const struct sbx_auth_limits *limits, sbx_mcp_session **ret_session,
			struct sbx_error *err)
{
	sbx_mcp_session *s = calloc(1, sizeof(*s));

	if (!s || !(s->owner = strdup(owner ? owner : SBX_OWNER_DEFAULT))) {
		free(s);
		return sbx_error_set(err, -ENOMEM, "mcp session: out of memory");
	}
	s->mcp = m;
	s->limits = limits ? *limits : SBX_AUTH_LIMITS_NONE;
	atomic_init(&s->refs, 1);
	s->transport = transport;
	s->log_level = SBX_LOG_INFO;
	pthread_mutex_init(&s->lock, NULL);
	*ret_session = s;
	return 0;
}

void sbx_mcp_session_set_limits(sbx_mcp_session *s, const struct sbx_auth_limits *limits)
{
	pthread_mutex_lock(&s->lock);
	s->limits = *limits;
	pthread_mutex_unlock(&s->lock);
}

void sbx_mcp_session_set_audit(sbx_mcp_session *s, const char *key_id, const char *session_tag)
{
	snprintf(s->key_id, sizeof(s->key_id), "%s", key_id ? key_id : "");
	snprintf(s->audit_session, sizeof(s->audit_session), "%s", session_tag ? session_tag : "");
}

sbx_mcp_session *sbx_mcp_session_ref(sbx_mcp_session *s)
{
	if (s)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

sbx_mcp_session *sbx_mcp_session_unref(sbx_mcp_session *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return NULL;
	pthread_mutex_destroy(&s->lock);
	free(s->owner);
	free(s);
	return NULL;
}

/* Once set, the version never changes, so the pointer stays valid. */
const char *sbx_mcp_session_version(const sbx_mcp_session *s)
{
	sbx_mcp_session *w = (sbx_mcp_session *)s;
	const char *v;

	pthread_mutex_lock(&w->lock);
	v = w->version[0] ? w->version : NULL;
	pthread_mutex_unlock(&w->lock);
	return v;
}

/* ---- messages ---- */

enum msg_kind {
	MSG_INVALID,
	MSG_REQUEST,
	MSG_NOTIFICATION,
	MSG_RESPONSE,
};

static bool id_valid(struct json_object *id)
{
	return json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int);
}

/* Classifies one message; *ret_id is the request id (borrowed) when it can
 * be read, else NULL. */
static enum msg_kind classify(struct json_object *msg, struct json_object **ret_id)
{
	struct json_object *v, *id = NULL, *method = NULL, *params = NULL;
	bool has_id;

	*ret_id = NULL;
	if (!json_object_is_type(msg, json_type_object))
		return MSG_INVALID;
	has_id = json_object_object_get_ex(msg, "id", &id);
	if (has_id && id_valid(id))
		*ret_id = id;
	if (!json_object_object_get_ex(msg, "jsonrpc", &v) ||
	    !json_object_is_type(v, json_type_string) || strcmp(json_object_get_string(v), "2.0"))
		return MSG_INVALID;
	if (json_object_object_get_ex(msg, "method", &method)) {
		if (!json_object_is_type(method, json_type_string))
			return MSG_INVALID;
		if (json_object_object_get_ex(msg, "params", &params) &&
		    !json_object_is_type(params, json_type_object) &&
		    !json_object_is_type(params, json_type_array))
			return MSG_INVALID;
		if (!has_id)
			return MSG_NOTIFICATION;
		return id_valid(id) ? MSG_REQUEST : MSG_INVALID;
	}
	if (has_id && (json_object_object_get_ex(msg, "result", NULL) ||
		       json_object_object_get_ex(msg, "error", NULL)))
		return MSG_RESPONSE; /* a response from the client: ignored */
	return MSG_INVALID;
}

/* {"jsonrpc":"2.0","id":ID|null,"error":{code,message}}; ID borrowed. */
static struct json_object *error_response(struct json_object *id, int code, const char *fmt, ...)
    SBX_PRINTF(3, 4);
static struct json_object *error_response(struct json_object *id, int code, const char *fmt, ...)
{
	struct json_object *r = json_object_new_object(), *e = json_object_new_object();
	struct sbx_buf text = SBX_BUF_INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* A message cut to its buffer (here, or an error's on the way up) may
	 * end inside a character: JSON text is UTF-8 (U+FFFD instead). */
	if (!r || !e || sbx_buf_append(&text, msg, strlen(msg)) < 0 ||
	    sbx_utf8_sanitize(&text) < 0) {
		sbx_buf_release(&text);
		json_object_put(r);
		json_object_put(e);
		return NULL;
	}
	json_object_object_add(r, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(r, "id", id ? json_object_get(id) : NULL);
	json_object_object_add(e, "code", json_object_new_int(code));
	json_object_object_add(e, "message", json_object_new_string(text.data ? text.data : ""));
	json_object_object_add(r, "error", e);
	sbx_buf_release(&text);
	return r;
}

/* {"jsonrpc":"2.0","id":ID,"result":RESULT}; takes RESULT. */
static struct json_object *result_response(struct json_object *id, struct json_object *result)
{
	struct json_object *r = json_object_new_object();

	if (!r || !result) {
		json_object_put(r);
		json_object_put(result);
		return NULL;
	}
	json_object_object_add(r, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(r, "id", json_object_get(id));
	json_object_object_add(r, "result", result);
	return r;
}

/* One line of JSON, or NULL on -ENOMEM. */
static char *to_text(struct json_object *o)
{
	const char *t = json_object_to_json_string_ext(o, MCP_JSON_TEXT);
	return t ? strdup(t) : NULL;
}

/* The bytes of O as to_text writes it (0 on -ENOMEM). */
static size_t text_len(struct json_object *o)
{
	size_t n = 0;

	if (!json_object_to_json_string_length(o, MCP_JSON_TEXT, &n))
		return 0;
	return n;
}

/* ---- the audit log ---- */

/* What the audit log is told about one tools/call. */
struct call_audit {
	struct sbx_tool_audit tool; /* filled by the tools */
	const char *error;	    /* the kind of a JSON-RPC error of ours, or NULL */
};

/* One tool_call line for S's request with PARAMS (its tool's name), from
 * CLIENT, when there is an audit log; and the call counted in the metrics
 * (the tool named "unknown" when there is no such tool). */
static void audit_write(sbx_mcp_session *s, const char *client, struct json_object *params,
			const struct sbx_tool_audit *t, int64_t duration_us, const char *outcome,
			const char *error, size_t bytes_out)
{
	int64_t duration_ms = duration_us / 1000;
	struct json_object *name = NULL;
	struct sbx_audit_tool_call c = {
	    .tenant = s->owner,
	    .key_id = s->key_id,
	    .session = s->audit_session,
	    .transport = s->transport == SBX_MCP_TRANSPORT_SSE ? "sse" : "streamable",
	    .client = client,
	    .sandbox_id = t ? t->sandbox_id : NULL,
	    .sandbox_name = t ? t->sandbox_name : NULL,
	    .duration_ms = duration_ms,
	    .outcome = outcome,
	    .error = error,
	    .bytes_out = (int64_t)bytes_out,
	};

	if (json_object_object_get_ex(params, "name", &name) &&
	    json_object_is_type(name, json_type_string))
		c.tool = json_object_get_string(name);
	sbx_metrics_tool_call(sbx_tools_known(c.tool) ? c.tool : "unknown", outcome, s->owner,
			      duration_us);
	if (s->mcp->audit)
		sbx_audit_tool_call(s->mcp->audit, &c);
}

/* The error reply for a body that cannot be parsed or is no message. */
static char *error_text(int code, const char *msg)
{
	struct json_object *r = error_response(NULL, code, "%s", msg);
	char *t = r ? to_text(r) : NULL;

	json_object_put(r);
	return t;
}

/* What json-c allocates per value (measured with json-c 0.16 on x86-64: 72
 * to 88 bytes for a scalar with its slot in an array or its key, about 790
 * for an empty object), rounded up; and the tokener's own (its stack). */
#define MCP_JSON_VALUE_BYTES 96
#define MCP_JSON_TOKENER_BYTES 8192

int sbx_mcp_input_measure(const char *body, size_t len, size_t *ret_bytes, char **ret_error_json)
{
	/* Every value but the first follows a '[', ',' or ':' and every key a
	 * '{' or ','; none of them counts inside a string. */
	size_t values = 1, objects = 0, weight;
	bool in_string = false, escaped = false;

	for (size_t i = 0; i < len; i++) {
		char c = body[i];
		if (in_string) {
			if (escaped)
				escaped = false;
			else if (c == '\\')
				escaped = true;
			else if (c == '"')
				in_string = false;
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			break;
		case '{':
			objects++;
			values++;
			break;
		case '[':
		case ',':
		case ':':
			values++;
			break;
		default:
			break;
		}
	}
	weight = values + objects * (SBX_MCP_JSON_OBJECT_WEIGHT - 1);
	if (weight > SBX_MCP_JSON_VALUES_MAX) {
		char msg[256];
		snprintf(msg, sizeof(msg),
			 "Invalid Request: too many JSON values in one body (%zu, %zu of them "
			 "objects; at most %d, an object counting as %d)",
			 values, objects, SBX_MCP_JSON_VALUES_MAX, SBX_MCP_JSON_OBJECT_WEIGHT);
		*ret_error_json = error_text(SBX_JSONRPC_INVALID_REQUEST, msg);
		return *ret_error_json ? -E2BIG : -ENOMEM;
	}
	/* The values, then the strings: each copied into its value, and into
	 * the tokener's buffer, which grows by doubling to hold the longest. */
	*ret_bytes = weight * MCP_JSON_VALUE_BYTES + 3 * len + MCP_JSON_TOKENER_BYTES;
	return 0;
}

int sbx_mcp_input_parse(const char *body, size_t len, sbx_mcp_input **ret_input,
			char **ret_error_json)
{
	struct json_tokener *tok;
	struct json_object *root;
	enum json_tokener_error jerr;
	sbx_mcp_input *in;
	size_t used, bytes;
	int m;

	m = sbx_mcp_input_measure(body ? body : "", body ? len : 0, &bytes, ret_error_json);
	if (m < 0)
		return m;
	if (len > INT32_MAX)
		len = INT32_MAX; /* the tokener takes an int; never reached below the body limit */
	tok = json_tokener_new_ex(MCP_JSON_DEPTH);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, body ? body : "", (int)len);
	jerr = json_tokener_get_error(tok);
	used = json_tokener_get_parse_end(tok);
	if (jerr == json_tokener_continue) {
		/* A number can only end at a terminator: feed one. Whatever is
		 * still open then is a truncated body. */
		root = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
		if (jerr == json_tokener_continue)
			jerr = json_tokener_error_parse_eof;
	}
	json_tokener_free(tok);
	if (jerr == json_tokener_success) {
		/* Only white space may follow the value. */
		for (; used < len; used++) {
			char c = body[used];
			if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
				jerr = json_tokener_error_parse_unexpected;
				break;
			}
		}
	}
	if (jerr != json_tokener_success || !root) {
		char msg[160];
		json_object_put(root);
		snprintf(msg, sizeof(msg), "Parse error: %s",
			 root || jerr != json_tokener_success ? json_tokener_error_desc(jerr)
							      : "null is no message");
		*ret_error_json = error_text(SBX_JSONRPC_PARSE_ERROR, msg);
		return *ret_error_json ? -EBADMSG : -ENOMEM;
	}
	if (json_object_is_type(root, json_type_array)) {
		size_t n = json_object_array_length(root);
		if (n == 0 || n > MCP_BATCH_MAX) {
			json_object_put(root);
			*ret_error_json = error_text(SBX_JSONRPC_INVALID_REQUEST,
						     n ? "Invalid Request: batch too large"
						       : "Invalid Request: empty batch");
			return *ret_error_json ? -EINVAL : -ENOMEM;
		}
	} else {
		struct json_object *id;
		if (classify(root, &id) == MSG_INVALID) {
			struct json_object *r =
			    error_response(id, SBX_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: not a JSON-RPC 2.0 request, "
					   "notification or response");
			*ret_error_json = r ? to_text(r) : NULL;
			json_object_put(r);
			json_object_put(root);
			return *ret_error_json ? -EINVAL : -ENOMEM;
		}
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		json_object_put(root);
		return -ENOMEM;
	}
	in->root = root;
	*ret_input = in;
	return 0;
}

sbx_mcp_input *sbx_mcp_input_free(sbx_mcp_input *in)
{
	if (!in)
		return NULL;
	json_object_put(in->root);
	free(in);
	return NULL;
}

static size_t input_count(const sbx_mcp_input *in)
{
	return json_object_is_type(in->root, json_type_array) ? json_object_array_length(in->root)
							      : 1;
}

static struct json_object *input_at(const sbx_mcp_input *in, size_t i)
{
	return json_object_is_type(in->root, json_type_array)
		   ? json_object_array_get_idx(in->root, i)
		   : in->root;
}

static struct json_object *params_of(struct json_object *msg)
{
	struct json_object *p;

	return json_object_object_get_ex(msg, "params", &p) ? p : NULL;
}

static const char *method_of(struct json_object *msg)
{
	struct json_object *m;

	if (!json_object_object_get_ex(msg, "method", &m) ||
	    !json_object_is_type(m, json_type_string))
		return NULL;
	return json_object_get_string(m);
}

bool sbx_mcp_input_has_requests(const sbx_mcp_input *in)
{
	size_t n = input_count(in);

	for (size_t i = 0; i < n; i++) {
		struct json_object *id;
		enum msg_kind k = classify(input_at(in, i), &id);
		/* An invalid message in a batch gets an error response, too. */
		if (k == MSG_REQUEST || k == MSG_INVALID)
			return true;
	}
	return false;
}

/* Whether IN holds a request (not a notification or response) for METHOD. */
static bool input_has_request(const sbx_mcp_input *in, const char *method)
{
	size_t n = input_count(in);

	for (size_t i = 0; i < n; i++) {
		struct json_object *id, *msg = input_at(in, i);
		const char *m = method_of(msg);
		if (classify(msg, &id) == MSG_REQUEST && m && strcmp(m, method) == 0)
			return true;
	}
	return false;
}

bool sbx_mcp_input_is_initialize(const sbx_mcp_input *in)
{
	return input_has_request(in, "initialize");
}

/* The methods that go into containers: tools/call, and the resources (an
 * exec each: a listing per sandbox, a read up to server.resource_max_bytes). */
static const char *const blocking_methods[] = {"tools/call", "resources/list", "resources/read"};

static bool method_may_block(const char *method)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(blocking_methods); i++)
		if (strcmp(method, blocking_methods[i]) == 0)
			return true;
	return false;
}

bool sbx_mcp_input_may_block(const sbx_mcp_input *in)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(blocking_methods); i++)
		if (input_has_request(in, blocking_methods[i]))
			return true;
	return false;
}

/* sbx_mcp_input_refuse; with S, each tools/call refused is logged as
 * sbx_mcp_session_refuse says. */
static int input_refuse(const sbx_mcp_input *in, int code, const char *message, sbx_mcp_session *s,
			const char *client, const char *kind, char **ret_reply)
{
	bool batch = json_object_is_type(in->root, json_type_array);
	struct json_object *reply = batch ? json_object_new_array() : NULL;
	size_t n = input_count(in);
	char *text = NULL;

	if (batch && !reply)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *id, *e;
		if (classify(input_at(in, i), &id) != MSG_REQUEST)
			continue;
		e = error_response(id, code, "%s", message);
		if (!e || (batch && json_object_array_add(reply, e) < 0)) {
			json_object_put(e);
			json_object_put(reply);
			return -ENOMEM;
		}
		if (s && strcmp(method_of(input_at(in, i)), "tools/call") == 0)
			audit_write(s, client, params_of(input_at(in, i)), NULL, 0, "refused", kind,
				    s->mcp->audit ? text_len(e) : 0);
		if (!batch)
			reply = e;
	}
	if (reply && (!batch || json_object_array_length(reply) > 0) && !(text = to_text(reply))) {
		json_object_put(reply);
		return -ENOMEM;
	}
	json_object_put(reply);
	*ret_reply = text;
	return 0;
}

int sbx_mcp_input_refuse(const sbx_mcp_input *in, int code, const char *message, char **ret_reply)
{
	return input_refuse(in, code, message, NULL, NULL, NULL, ret_reply);
}

int sbx_mcp_session_refuse(sbx_mcp_session *s, const sbx_mcp_input *in, const char *client,
			   int code, const char *message, const char *kind, char **ret_reply)
{
	return input_refuse(in, code, message, s, client, kind, ret_reply);
}

/* ---- requests in flight ---- */

/* Same JSON-RPC id: both strings and equal, or both integers and equal. */
static bool id_equal(struct json_object *a, struct json_object *b)
{
	if (json_object_is_type(a, json_type_string) && json_object_is_type(b, json_type_string))
		return strcmp(json_object_get_string(a), json_object_get_string(b)) == 0;
	if (json_object_is_type(a, json_type_int) && json_object_is_type(b, json_type_int))
		return json_object_get_int64(a) == json_object_get_int64(b) &&
		       json_object_get_uint64(a) == json_object_get_uint64(b);
	return false;
}

/* F's mark; the transport's word that the client has gone sets it too. */
static bool inflight_is_cancelled(struct inflight *f)
{
	if (atomic_load(&f->cancelled))
		return true;
	if (f->outer && f->outer->gone && f->outer->gone(f->outer->ctx)) {
		atomic_store(&f->cancelled, true);
		return true;
	}
	return false;
}

static bool inflight_cancelled(void *ud)
{
	return inflight_is_cancelled(ud);
}

/* The tools' notifier: the transport's, silent once the request is cancelled
 * (no notification may follow a cancellation). */
static void inflight_send(void *ctx, const char *json)
{
	struct inflight *f = ctx;

	if (!inflight_is_cancelled(f) && f->outer && f->outer->send)
		f->outer->send(f->outer->ctx, json);
}

static void inflight_add(sbx_mcp_session *s, struct inflight *f, struct json_object *id,
			 const struct sbx_mcp_notifier *outer)
{
	f->id = id;
	atomic_init(&f->cancelled, false);
	f->outer = outer;
	f->notifier.send = inflight_send;
	f->notifier.ctx = f;
	pthread_mutex_lock(&s->lock);
	f->next = s->inflight;
	s->inflight = f;
	if (s->closed)
		atomic_store(&f->cancelled, true);
	pthread_mutex_unlock(&s->lock);
}

/* Takes F off the list; true when it was cancelled (then it gets no
 * response). */
static bool inflight_remove(sbx_mcp_session *s, struct inflight *f)
{
	bool cancelled;

	pthread_mutex_lock(&s->lock);
	for (struct inflight **pp = &s->inflight; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	/* Read under the lock: a cancellation either found F or comes too late. */
	cancelled = inflight_is_cancelled(f);
	pthread_mutex_unlock(&s->lock);
	return cancelled;
}

void sbx_mcp_session_close(sbx_mcp_session *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	for (struct inflight *f = s->inflight; f; f = f->next)
		atomic_store(&f->cancelled, true);
	pthread_mutex_unlock(&s->lock);
}

/* notifications/cancelled {requestId, reason?}: marks the requests in flight
 * with that id. Anything else (unknown id, no id, a finished request) is
 * ignored, as the specification asks. */
static void cancel_request(sbx_mcp_session *s, struct json_object *params)
{
	struct json_object *id;

	if (!json_object_is_type(params, json_type_object) ||
	    !json_object_object_get_ex(params, "requestId", &id) || !id_valid(id))
		return;
	pthread_mutex_lock(&s->lock);
	for (struct inflight *f = s->inflight; f; f = f->next)
		if (id_equal(f->id, id))
			atomic_store(&f->cancelled, true);
	pthread_mutex_unlock(&s->lock);
}

/* ---- methods ---- */

/* What one request produces: a result (taken) or an error. */
struct outcome {
	struct json_object *result;
	int code; /* JSON-RPC error code when result is NULL */
	char msg[384];
	struct json_object *data; /* the error's data (taken), or NULL */
	bool nomem;
};

static void fail(struct outcome *o, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
static void fail(struct outcome *o, int code, const char *fmt, ...)
{
	va_list ap;

	o->code = code;
	va_start(ap, fmt);
	vsnprintf(o->msg, sizeof(o->msg), fmt, ap);
	va_end(ap);
}

static void succeed(struct outcome *o, struct json_object *result)
{
	o->result = result;
	if (!result)
		o->nomem = true;
}

static void do_initialize(sbx_mcp_session *s, struct json_object *params, struct outcome *o)
{
	struct json_object *v = NULL, *r, *caps, *tools, *resources, *info;
	const char *want = NULL, *chosen;

	if (!json_object_is_type(params, json_type_object)) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "initialize: params must be an object");
		return;
	}
	if (json_object_object_get_ex(params, "protocolVersion", &v) &&
	    json_object_is_type(v, json_type_string))
		want = json_object_get_string(v);
	if (!want) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS,
		     "initialize: params.protocolVersion (a string) is required");
		return;
	}
	chosen = sbx_mcp_version_supported(want) ? want : SBX_MCP_VERSION_LATEST;

	pthread_mutex_lock(&s->lock);
	if (s->version[0]) {
		pthread_mutex_unlock(&s->lock);
		fail(o, SBX_JSONRPC_INVALID_REQUEST,
		     "initialize: this session is already initialized");
		return;
	}
	snprintf(s->version, sizeof(s->version), "%s", chosen);
	pthread_mutex_unlock(&s->lock);

	r = json_object_new_object();
	caps = json_object_new_object();
	tools = json_object_new_object();
	resources = json_object_new_object();
	info = json_object_new_object();
	if (!r || !caps || !tools || !resources || !info) {
		json_object_put(r);
		json_object_put(caps);
		json_object_put(tools);
		json_object_put(resources);
		json_object_put(info);
		o->nomem = true;
		return;
	}
	json_object_object_add(tools, "listChanged", json_object_new_boolean(0));
	json_object_object_add(caps, "tools", tools);
	/* The files of the session's sandboxes (src/tools/resources.c); a tool
	 * call that changes them says so. No subscriptions. */
	json_object_object_add(resources, "listChanged", json_object_new_boolean(1));
	json_object_object_add(caps, "resources", resources);
	json_object_object_add(caps, "logging", json_object_new_object());
	json_object_object_add(info, "name", json_object_new_string("mcp-sandbox"));
	json_object_object_add(info, "version", json_object_new_string(PACKAGE_VERSION));
	json_object_object_add(r, "protocolVersion", json_object_new_string(chosen));
	json_object_object_add(r, "capabilities", caps);
	json_object_object_add(r, "serverInfo", info);
	json_object_object_add(r, "instructions", json_object_new_string(instructions));
	succeed(o, r);
}

static void do_set_level(sbx_mcp_session *s, struct json_object *params, struct outcome *o)
{
	struct json_object *v;
	const char *level = NULL;

	if (json_object_is_type(params, json_type_object) &&
	    json_object_object_get_ex(params, "level", &v) &&
	    json_object_is_type(v, json_type_string))
		level = json_object_get_string(v);
	for (int i = SBX_LOG_DEBUG; level && i <= SBX_LOG_EMERGENCY; i++) {
		if (strcmp(level, sbx_log_level_name((enum sbx_log_level)i)) == 0) {
			pthread_mutex_lock(&s->lock);
			s->log_level = (enum sbx_log_level)i;
			pthread_mutex_unlock(&s->lock);
			succeed(o, json_object_new_object());
			return;
		}
	}
	fail(o, SBX_JSONRPC_INVALID_PARAMS,
	     "logging/setLevel: params.level must be one of debug, info, notice, warning, error, "
	     "critical, alert, emergency");
}

/* Writes the text a placeholder stands for (see tools_of). */
static int cached_text_serialize(struct json_object *jso, struct printbuf *pb, int level, int flags)
{
	const char *text = json_object_get_userdata(jso);

	(void)level;
	(void)flags;
	return printbuf_memappend(pb, text, (int)strlen(text)) < 0 ? -1 : 0;
}

/* The tools array for VERSION. The list only depends on the version, so its
 * text is built once per version and the answer is a placeholder object
 * that serialises as that text (only ever serialised, never inspected). */
static struct json_object *tools_of(sbx_mcp *m, const char *version)
{
	struct json_object *tools, *o;
	size_t i = 0;
	char *text;

	while (i < SBX_ARRAY_SIZE(versions) && strcmp(versions[i], version) != 0)
		i++;
	if (i == SBX_ARRAY_SIZE(versions))
		return sbx_tools_list(version);
	pthread_mutex_lock(&m->lock);
	text = m->tools_text[i];
	pthread_mutex_unlock(&m->lock);
	if (!text) {
		tools = sbx_tools_list(version);
		text = tools ? to_text(tools) : NULL;
		json_object_put(tools);
		if (!text)
			return NULL;
		pthread_mutex_lock(&m->lock);
		if (m->tools_text[i]) {
			free(text); /* another thread was first */
		} else {
			m->tools_text[i] = text;
		}
		text = m->tools_text[i];
		pthread_mutex_unlock(&m->lock);
	}
	o = json_object_new_object();
	if (o)
		json_object_set_serializer(o, cached_text_serialize, text, NULL);
	return o;
}

static void do_tools_list(sbx_mcp *m, const char *version, struct json_object *params,
			  struct outcome *o)
{
	struct json_object *cursor, *r, *tools;

	if (params && !json_object_is_type(params, json_type_object)) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "tools/list: params must be an object");
		return;
	}
	/* One page only: no cursor we hand out exists. */
	if (params && json_object_object_get_ex(params, "cursor", &cursor) && cursor) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "tools/list: unknown cursor");
		return;
	}
	tools = tools_of(m, version);
	r = json_object_new_object();
	if (!tools || !r) {
		json_object_put(tools);
		json_object_put(r);
		o->nomem = true;
		return;
	}
	json_object_object_add(r, "tools", tools);
	succeed(o, r);
}

/* A slot of S's tenant's calls quota, over all its sessions, with the
 * key's limits as they are now (the HTTP front updates them when the keys
 * file changes: sbx_mcp_session_set_limits), copied to *RET_LIMITS. 0, or
 * -EDQUOT, -EBUSY, -ENOMEM with ERR. Given back with sbx_call_table_end
 * however the request ends (an error, a cancellation, its client gone). */
static int call_slot_take(sbx_mcp_session *s, struct sbx_auth_limits *ret_limits,
			  struct sbx_error *err)
{
	struct sbx_quota quota;

	pthread_mutex_lock(&s->lock);
	*ret_limits = s->limits;
	pthread_mutex_unlock(&s->lock);
	sbx_quota_of(s->mcp->settings, ret_limits, &quota);
	return sbx_call_table_begin(s->mcp->calls, s->owner, quota.calls, quota.calls_from_key,
				    err);
}

static void do_tools_call(sbx_mcp_session *s, const char *version, struct json_object *params,
			  struct inflight *f, struct outcome *o, struct call_audit *ca)
{
	struct sbx_auth_limits limits;
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *name, *args = NULL, *meta, *token = NULL, *result = NULL;
	_cleanup_free_ char *url = NULL;
	int r;

	if (!json_object_is_type(params, json_type_object) ||
	    !json_object_object_get_ex(params, "name", &name) ||
	    !json_object_is_type(name, json_type_string)) {
		ca->error = "invalid_params";
		fail(o, SBX_JSONRPC_INVALID_PARAMS,
		     "tools/call: params.name (a string) is required");
		return;
	}
	if (json_object_object_get_ex(params, "arguments", &args) && args &&
	    !json_object_is_type(args, json_type_object)) {
		ca->error = "invalid_params";
		fail(o, SBX_JSONRPC_INVALID_PARAMS,
		     "tools/call: params.arguments must be an object");
		return;
	}
	if (json_object_object_get_ex(params, "_meta", &meta) &&
	    json_object_is_type(meta, json_type_object) &&
	    json_object_object_get_ex(meta, "progressToken", &token) && !id_valid(token))
		token = NULL;
	url = public_url_dup(s->mcp);
	if (!url) {
		o->nomem = true;
		return;
	}
	/* A slot from here until the tool returns (it does in every case). */
	r = call_slot_take(s, &limits, &err);
	if (r == -ENOMEM) {
		o->nomem = true;
		return;
	}
	if (r < 0) {
		ca->tool.error = r == -EDQUOT ? "quota" : "busy";
		succeed(o, sbx_tools_refusal(err.msg));
		return;
	}
	{
		struct sbx_tool_ctx ctx = {
		    .manager = s->mcp->manager,
		    .settings = s->mcp->settings,
		    .owner = s->owner,
		    .limits = &limits,
		    .key_id = s->key_id,
		    .public_url = url,
		    .link_key = s->mcp->link_key,
		    .protocol_version = version,
		    .notifier = f->outer ? &f->notifier : NULL,
		    .progress_token = token,
		    .cancelled = inflight_cancelled,
		    .cancel_ud = f,
		    .audit = &ca->tool,
		};
		pthread_mutex_lock(&s->lock);
		ctx.log_level = s->log_level;
		ctx.resources_watched = s->resources_watched;
		pthread_mutex_unlock(&s->lock);
		r = s->mcp->tools_call(&ctx, json_object_get_string(name), args, &result, &err);
	}
	sbx_call_table_end(s->mcp->calls, s->owner);
	if (r == -ENOENT) {
		ca->error = "unknown_tool";
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "Unknown tool: %s",
		     json_object_get_string(name));
	} else if (r == -ENOMEM) {
		o->nomem = true;
	} else if (r < 0) {
		char shown[SBX_ERROR_MSG_MAX];
		ca->error = "internal";
		if (sbx_error_public(&err, shown, sizeof(shown)))
			sbx_log_error("tools/call: %s", err.msg);
		fail(o, SBX_JSONRPC_INTERNAL_ERROR, "tools/call: %s", shown);
	} else {
		succeed(o, result);
	}
}

/* ---- resources ---- */

/* The context the resource functions run with for S (URL: the public URL;
 * LIMITS: the key's), cancelled with the request F. */
static void resource_ctx(sbx_mcp_session *s, const char *version, const char *url,
			 const struct sbx_auth_limits *limits, struct inflight *f,
			 struct sbx_tool_ctx *ctx)
{
	*ctx = (struct sbx_tool_ctx){
	    .manager = s->mcp->manager,
	    .settings = s->mcp->settings,
	    .owner = s->owner,
	    .limits = limits,
	    .key_id = s->key_id,
	    .public_url = url,
	    .link_key = s->mcp->link_key,
	    .protocol_version = version,
	    .cancelled = inflight_cancelled,
	    .cancel_ud = f,
	};
}

/* A failure of the resource functions as a JSON-RPC error of METHOD. */
static void resource_fail(struct outcome *o, const char *method, int r, struct sbx_error *err)
{
	char shown[SBX_ERROR_MSG_MAX];

	if (r == -ENOMEM) {
		o->nomem = true;
		return;
	}
	/* Whatever the error, as a client may see it (no engine's address). */
	if (sbx_error_public(err, shown, sizeof(shown)))
		sbx_log("%s: %s", method, err->msg);
	switch (r) {
	case -EINVAL:
	case -EPERM:
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "%s: %s", method, shown);
		return;
	case -ENOENT:
		fail(o, SBX_MCP_RESOURCE_NOT_FOUND, "Resource not found: %s", shown);
		return;
	case -EFBIG:
		fail(o, SBX_JSONRPC_SERVER_ERROR, "%s: %s", method, shown);
		return;
	default:
		fail(o, SBX_JSONRPC_INTERNAL_ERROR, "%s: %s", method, shown);
	}
}

static void do_resources(sbx_mcp_session *s, const char *version, const char *method,
			 struct json_object *params, struct inflight *f, struct outcome *o)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct json_object *v = NULL, *result = NULL, *data = NULL;
	_cleanup_free_ char *url = NULL;
	struct sbx_auth_limits limits;
	struct sbx_tool_ctx ctx;
	bool read = strcmp(method, "resources/read") == 0;
	int r;

	if (strcmp(method, "resources/templates/list") != 0) { /* list and read only */
		pthread_mutex_lock(&s->lock);
		s->resources_watched = true;
		pthread_mutex_unlock(&s->lock);
	}
	if (params && !json_object_is_type(params, json_type_object)) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "%s: params must be an object", method);
		return;
	}
	if (strcmp(method, "resources/templates/list") == 0) {
		if (params && json_object_object_get_ex(params, "cursor", &v) && v) {
			fail(o, SBX_JSONRPC_INVALID_PARAMS, "%s: unknown cursor", method);
			return;
		}
		succeed(o, sbx_resources_templates());
		return;
	}
	if (params && json_object_object_get_ex(params, read ? "uri" : "cursor", &v) && v &&
	    !json_object_is_type(v, json_type_string)) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS, "%s: params.%s must be a string", method,
		     read ? "uri" : "cursor");
		return;
	}
	if (read && !v) {
		fail(o, SBX_JSONRPC_INVALID_PARAMS,
		     "resources/read: params.uri (a string, " SBX_RESOURCE_TEMPLATE
		     ") is required");
		return;
	}
	if (!s->mcp->manager) {
		fail(o, SBX_JSONRPC_INTERNAL_ERROR, "%s: this server has no sandbox manager",
		     method);
		return;
	}
	url = public_url_dup(s->mcp);
	if (!url) {
		o->nomem = true;
		return;
	}
	/* Each runs code in the tenant's sandboxes for up to a minute: it
	 * counts against the tenant's calls as a tool call does. */
	r = call_slot_take(s, &limits, &err);
	if (r == -EDQUOT || r == -EBUSY) {
		fail(o, SBX_JSONRPC_SERVER_ERROR, "%s: %s", method, err.msg);
		return;
	}
	if (r < 0) {
		o->nomem = true;
		return;
	}
	resource_ctx(s, version, url, &limits, f, &ctx);
	if (read)
		r = sbx_resources_read(&ctx, json_object_get_string(v), &result, &data, &err);
	else
		r = sbx_resources_list(&ctx, v ? json_object_get_string(v) : NULL, &result, &err);
	sbx_call_table_end(s->mcp->calls, s->owner);
	if (r < 0) {
		resource_fail(o, method, r, &err);
		o->data = data;
		return;
	}
	succeed(o, result);
}

/* The tool_call line of a request of S with PARAMS that ran from T0_US on
 * (notifier N) and ended with O: cancelled (no response), or RESP (NULL:
 * out of memory), whose size is what it sends. */
static void audit_call(sbx_mcp_session *s, const struct sbx_mcp_notifier *n,
		       struct json_object *params, const struct call_audit *ca, int64_t t0_us,
		       const struct outcome *o, bool cancelled, struct json_object *resp)
{
	const char *outcome = "ok", *error = "";
	struct json_object *v;

	if (cancelled) {
		outcome = "cancelled";
		resp = NULL;
	} else if (o->nomem || !resp) {
		outcome = "error";
		error = "no_memory";
	} else if (!o->result) {
		outcome = "error";
		error = ca->error ? ca->error : "invalid_request";
	} else if (json_object_object_get_ex(o->result, "isError", &v) &&
		   json_object_get_boolean(v)) {
		error = ca->tool.error ? ca->tool.error : "failed";
		/* A limit said no: the tool did not run. */
		outcome = !strcmp(error, "quota") || !strcmp(error, "busy") ? "refused" : "error";
	}
	/* The response's size only for the audit log (it costs a serialization). */
	audit_write(s, n ? n->client : NULL, params, &ca->tool, sbx_metrics_now_us() - t0_us,
		    outcome, error, resp && s->mcp->audit ? text_len(resp) : 0);
}

/* What a batch's requests so far hold (NULL outside a batch). */
struct batch {
	unsigned reads; /* resources/read requests */
	size_t bytes;	/* of their responses' text */
};

/* Runs one request (of batch B, or NULL); *ret_response is its response, or
 * NULL when the client cancelled it. 0 or -ENOMEM. */
static int run_request(sbx_mcp_session *s, struct json_object *msg, struct batch *b,
		       const struct sbx_mcp_notifier *n, struct json_object **ret_response)
{
	struct json_object *id, *resp, *params = params_of(msg);
	const char *method = method_of(msg);
	char version[MCP_VERSION_MAX];
	struct outcome o = {0};
	struct call_audit ca = {0};
	struct inflight f;
	bool cancellable = strcmp(method, "initialize") != 0, cancelled = false;
	bool call = strcmp(method, "tools/call") == 0;
	int64_t t0_us = sbx_metrics_now_us();

	classify(msg, &id);
	if (cancellable)
		inflight_add(s, &f, id, n);
	pthread_mutex_lock(&s->lock);
	snprintf(version, sizeof(version), "%s", s->version);
	pthread_mutex_unlock(&s->lock);

	if (cancellable && inflight_is_cancelled(&f)) {
		/* Its client has gone already: not run, not answered. */
	} else if (strcmp(method, "ping") == 0) {
		succeed(&o, json_object_new_object());
	} else if (strcmp(method, "initialize") == 0) {
		if (b)
			fail(&o, SBX_JSONRPC_INVALID_REQUEST,
			     "initialize is not allowed inside a batch");
		else
			do_initialize(s, params, &o);
	} else if (!version[0]) {
		fail(&o, SBX_JSONRPC_INVALID_REQUEST,
		     "Session not initialized: send initialize first (got %.64s)", method);
	} else if (strcmp(method, "logging/setLevel") == 0) {
		do_set_level(s, params, &o);
	} else if (strcmp(method, "tools/list") == 0) {
		do_tools_list(s->mcp, version, params, &o);
	} else if (b && b->bytes >= MCP_BATCH_REPLY_MAX && method_may_block(method)) {
		fail(&o, SBX_JSONRPC_INVALID_REQUEST,
		     "%.64s: this batch's responses hold %zu bytes, its most (%u MiB): send "
		     "this request alone or in another batch",
		     method, b->bytes, MCP_BATCH_REPLY_MAX >> 20);
	} else if (strcmp(method, "tools/call") == 0) {
		do_tools_call(s, version, params, &f, &o, &ca);
	} else if (strcmp(method, "resources/read") == 0 && b && b->reads++ > 0) {
		/* A batch's responses are held until its last request ends: one
		 * file (up to server.resource_max_bytes) per batch, not 64. */
		fail(&o, SBX_JSONRPC_INVALID_REQUEST,
		     "resources/read: at most one per batch (a batch's responses are held "
		     "until it ends): send this one alone or in another batch");
	} else if (strcmp(method, "resources/list") == 0 ||
		   strcmp(method, "resources/templates/list") == 0 ||
		   strcmp(method, "resources/read") == 0) {
		do_resources(s, version, method, params, &f, &o);
	} else {
		fail(&o, SBX_JSONRPC_METHOD_NOT_FOUND, "Method not found: %.64s", method);
	}
	if (cancellable)
		cancelled = inflight_remove(s, &f);
	/* A tools/call before initialize is no tool call: a protocol error. */
	call = call && version[0];
	if (cancelled || o.nomem) {
		if (call)
			audit_call(s, n, params, &ca, t0_us, &o, cancelled, NULL);
		json_object_put(o.result);
		json_object_put(o.data);
		*ret_response = NULL;
		return o.nomem ? -ENOMEM : 0;
	}
	resp = o.result ? result_response(id, o.result) : error_response(id, o.code, "%s", o.msg);
	if (resp && o.data)
		json_object_object_add(json_object_object_get(resp, "error"), "data",
				       SBX_TAKE(o.data));
	json_object_put(o.data);
	if (call)
		audit_call(s, n, params, &ca, t0_us, &o, false, resp);
	if (!resp)
		return -ENOMEM;
	*ret_response = resp;
	return 0;
}

static void run_notification(sbx_mcp_session *s, struct json_object *msg)
{
	const char *method = method_of(msg);

	if (strcmp(method, "notifications/initialized") == 0) {
		pthread_mutex_lock(&s->lock);
		s->initialized_notified = true;
		pthread_mutex_unlock(&s->lock);
	} else if (strcmp(method, "notifications/cancelled") == 0) {
		cancel_request(s, params_of(msg));
	}
	/* The rest (roots/list_changed, progress from the client...): nothing to do. */
}

/* Runs one message of IN (of batch B, or NULL); *ret_response is NULL when
 * it needs no answer. */
static int run_message(sbx_mcp_session *s, struct json_object *msg, struct batch *b,
		       const struct sbx_mcp_notifier *n, struct json_object **ret_response)
{
	struct json_object *id, *resp = NULL;

	switch (classify(msg, &id)) {
	case MSG_REQUEST:
		if (run_request(s, msg, b, n, &resp) < 0)
			return -ENOMEM;
		break;
	case MSG_NOTIFICATION:
		run_notification(s, msg);
		break;
	case MSG_RESPONSE:
		break;
	case MSG_INVALID:
		resp = error_response(id, SBX_JSONRPC_INVALID_REQUEST,
				      "Invalid Request: not a JSON-RPC 2.0 message");
		if (!resp)
			return -ENOMEM;
		break;
	}
	*ret_response = resp;
	return 0;
}

/* Runs the batch IN (2025-03-26) on S; *ret_text is its reply, or NULL
 * when no response is due. Each response is written into the reply as it
 * ends and its tree freed: what the batch holds is its text (bounded by
 * MCP_BATCH_REPLY_MAX plus one response), not trees and texts. 0 or
 * -ENOMEM. */
static int run_batch(sbx_mcp_session *s, sbx_mcp_input *in, const struct sbx_mcp_notifier *n,
		     char **ret_text)
{
	struct sbx_buf out = SBX_BUF_INIT;
	size_t count = json_object_array_length(in->root);
	struct batch b = {0};
	int r = 0;

	for (size_t i = 0; r == 0 && i < count; i++) {
		struct json_object *resp = NULL;
		const char *t;

		r = run_message(s, json_object_array_get_idx(in->root, i), &b, n, &resp);
		if (r < 0 || !resp)
			continue;
		t = json_object_to_json_string_ext(resp, MCP_JSON_TEXT);
		if (!t || sbx_buf_append(&out, out.len ? "," : "[", 1) < 0 ||
		    sbx_buf_append(&out, t, strlen(t)) < 0)
			r = -ENOMEM;
		json_object_put(resp);
		b.bytes = out.len;
	}
	if (r == 0 && out.len && sbx_buf_append(&out, "]", 1) < 0)
		r = -ENOMEM;
	if (r < 0 || !out.len) {
		sbx_buf_release(&out);
		*ret_text = NULL;
		return r;
	}
	*ret_text = sbx_buf_steal(&out);
	return 0;
}

int sbx_mcp_session_run(sbx_mcp_session *s, sbx_mcp_input *in, const struct sbx_mcp_notifier *n,
			char **ret_reply, struct sbx_error *err)
{
	struct json_object *reply = NULL;
	char *text = NULL;
	int r = 0;

	if (json_object_is_type(in->root, json_type_array)) {
		char version[MCP_VERSION_MAX];

		pthread_mutex_lock(&s->lock);
		snprintf(version, sizeof(version), "%s", s->version);
		pthread_mutex_unlock(&s->lock);
		if (strcmp(version, "2025-03-26") == 0)
			r = run_batch(s, in, n, &text);
		else if (!(reply = error_response(NULL, SBX_JSONRPC_INVALID_REQUEST,
						  "Invalid Request: batches are only accepted in "
						  "protocol version 2025-03-26")))
			r = -ENOMEM;
	} else {
		r = run_message(s, in->root, NULL, n, &reply);
	}
	sbx_mcp_input_free(in);
	if (r == 0 && reply && !(text = to_text(reply)))
		r = -ENOMEM;
	json_object_put(reply);
	if (r < 0) {
		free(text);
		return sbx_error_set(err, r, "mcp: out of memory");
	}
	*ret_reply = text;
	return 0;
}
