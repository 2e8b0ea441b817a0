/* SPDX-License-Identifier: MIT */
/*
 * The tools, as the MCP layer (src/mcp/mcp.c) sees them. tools.c owns their
 * names, schemas and results; it reaches containers only through the
 * sandbox manager (include/sbx/sandbox.h). Internal to src/.
 */
#ifndef SBX_TOOLS_H
#define SBX_TOOLS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "sbx/artifact.h"
#include "sbx/auth.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

/* The levels of notifications/message, lowest first (logging/setLevel). */
enum sbx_log_level {
	SBX_LOG_DEBUG,
	SBX_LOG_INFO,
	SBX_LOG_NOTICE,
	SBX_LOG_WARNING,
	SBX_LOG_ERROR,
	SBX_LOG_CRITICAL,
	SBX_LOG_ALERT,
	SBX_LOG_EMERGENCY,
};

/* "debug" ... "emergency"; NULL out of range. */
const char *sbx_log_level_name(enum sbx_log_level level);

/* What a tools/call tells the audit log (include/sbx/audit.h) about itself:
 * filled by the tools as they go, never with arguments, code or output. */
struct sbx_tool_audit {
	/* The sandbox the call resolved (its sandbox_id argument, or the one it
	 * made), "" when none. */
	char sandbox_id[SBX_SANDBOX_ID_MAX + 1];
	char sandbox_name[SBX_SANDBOX_NAME_MAX + 1];
	/* An isError result's kind, a static word: invalid_arguments,
	 * not_found, exists, quota, busy, forbidden, timeout, cancelled,
	 * too_large, no_space, no_memory, engine, failed. NULL on success. */
	const char *error;
};

/* Where a running tool call sends its notifications (notifications/progress,
 * notifications/message, notifications/resources/list_changed) before its
 * response: the tools' own interface, which the MCP layer (src/mcp/mcp.c)
 * implements. SEND is called from the thread that runs the call; json is
 * one JSON-RPC message, valid during the call. */
struct sbx_tool_notifier {
	void (*send)(void *ctx, const char *json);
	void *ctx;
};

/* What one tools/call runs with. */
struct sbx_tool_ctx {
	sbx_manager *manager;
	const struct sbx_settings *settings;
	const char *owner;			  /* the tenant the session acts for */
	const struct sbx_auth_limits *limits;	  /* its key's limits (NULL: none); the
						   * handlers add [quota]'s: sbx_quota_of */
	const char *key_id;			  /* its API key's id; NULL or "": none */
	const char *public_url;			  /* base of artifact links, no trailing slash */
	const sbx_link_key *link_key;		  /* signs them (settings->server.link_ttl) */
	const char *protocol_version;		  /* negotiated: newer result fields are left out */
	const struct sbx_tool_notifier *notifier; /* may be NULL; silent once cancelled */
	struct json_object *progress_token;	  /* params._meta.progressToken, or NULL */
	/* True once the client cancelled this request (notifications/cancelled):
	 * stop the work, the response is dropped anyway. Cheap and thread-safe;
	 * NULL when the request cannot be cancelled. */
	bool (*cancelled)(void *cancel_ud);
	void *cancel_ud;
	/* notifications/message below this level are not sent (logging/setLevel). */
	enum sbx_log_level log_level;
	/* The session's client has asked for resources: a command's changes to
	 * /app/results are looked for (an exec) to send list_changed. */
	bool resources_watched;
	struct sbx_tool_audit *audit; /* may be NULL: nobody asks */
};

/*
 * Per-tenant quotas (src/tools/quota.c). A tenant's quota in each field is
 * its API key's limit where the key sets one (0 included: none allowed),
 * else the server's [quota] default where that is not 0, else -1: no quota,
 * only the server's own limits.
 */
struct sbx_quota {
	struct sbx_tenant_quota sandbox; /* what the sandbox manager enforces */
	int64_t calls;			 /* tool calls at once, all its sessions together */
	bool calls_from_key;		 /* set by its API key, not by [quota] */
};
/* The quotas of a tenant whose key has KEY (NULL: a key without limits, or
 * none) on a server with settings S (NULL: no [quota] defaults). */
void sbx_quota_of(const struct sbx_settings *s, const struct sbx_auth_limits *key,
		  struct sbx_quota *ret);

/* Tenants with tool calls running in one sbx_call_table at most. */
#define SBX_CALL_TABLE_MAX 4096

/*
 * The tool calls each tenant runs now, for the calls quota: one table per
 * server (the MCP layer's), shared by every session of both transports.
 * Every call is counted, whatever its quota, from sbx_call_table_begin to
 * sbx_call_table_end; a tenant has an entry only while it has a call
 * running (freed with its last one). Thread-safe.
 */
typedef struct sbx_call_table sbx_call_table;
int sbx_call_table_new(sbx_call_table **ret_table); /* 0 or -ENOMEM */
sbx_call_table *sbx_call_table_free(sbx_call_table *t);
/* Counts one more call of TENANT, which may run at most MAX at once
 * (negative: no quota; FROM_KEY: MAX is its API key's, for the message).
 * 0: counted, to be ended with sbx_call_table_end whatever happens to the
 * call. -EDQUOT when TENANT runs MAX already (or MAX is 0), -EBUSY when
 * SBX_CALL_TABLE_MAX other tenants have calls running, -ENOMEM: not
 * counted, ERR says so for the client (the quota, where it comes from, the
 * count and what to do). */
int sbx_call_table_begin(sbx_call_table *t, const char *tenant, int64_t max, bool from_key,
			 struct sbx_error *err);
void sbx_call_table_end(sbx_call_table *t, const char *tenant);
/* For tests: the calls TENANT runs (0 without an entry), and the entries. */
int64_t sbx_call_table_count(sbx_call_table *t, const char *tenant);
size_t sbx_call_table_tenants(sbx_call_table *t);

/* The CallToolResult of a call refused before any tool ran: {content: [a
 * text item with MESSAGE], isError: true}. New reference; NULL on -ENOMEM. */
struct json_object *sbx_tools_refusal(const char *message);

/* The `tools` array of tools/list for VERSION (title, outputSchema and
 * annotations only from 2025-06-18 on). New reference, never NULL but on
 * -ENOMEM. */
struct json_object *sbx_tools_list(const char *version);

/* NAME (may be NULL) is one of the tools (a metric's label takes no other). */
bool sbx_tools_known(const char *name);

/* Runs tool NAME with ARGUMENTS (an object, or NULL when absent) and fills
 * *ret_result with the CallToolResult object {content, isError?,
 * structuredContent?}. A tool that ran and failed (bad arguments, unknown
 * sandbox, engine down) is a success of this call with isError: true and a
 * message that says what to do (and ctx->audit->error its kind). Fails with -ENOENT only when no
 * tool has that name (the MCP layer answers -32602), or with -ENOMEM. */
int sbx_tools_call(const struct sbx_tool_ctx *ctx, const char *name, struct json_object *arguments,
		   struct json_object **ret_result, struct sbx_error *err);

typedef int (*sbx_tools_call_fn)(const struct sbx_tool_ctx *ctx, const char *name,
				 struct json_object *arguments, struct json_object **ret_result,
				 struct sbx_error *err);

/*
 * MCP resources (src/tools/resources.c): every regular file under
 * SBX_RESULTS_DIR of the caller's own sandboxes (ctx->owner), as
 * sandbox://SANDBOX_ID/PATH. The MCP layer turns the errors into JSON-RPC
 * ones: -EINVAL -32602, -ENOENT SBX_MCP_RESOURCE_NOT_FOUND, -EFBIG
 * SBX_JSONRPC_SERVER_ERROR with its data; ERR says what and what to do.
 */
#define SBX_RESOURCE_SCHEME "sandbox://"
#define SBX_RESOURCE_TEMPLATE "sandbox://{sandbox_id}/{path}"
#define SBX_RESOURCE_URI_MAX 8192
#define SBX_RESOURCES_PAGE 100 /* entries per resources/list page */
/* The key of an entry's _meta that holds its signed download link. */
#define SBX_RESOURCE_LINK_META "mcp-sandbox/link"
/* The URI of RELPATH in sandbox SANDBOX_ID (each segment percent-encoded);
 * NULL on -ENOMEM. */
char *sbx_resource_uri(const char *sandbox_id, const char *relpath);
/* Splits URI into a sandbox id and a path below SBX_RESULTS_DIR, each
 * percent-decoded once. -EINVAL, ERR saying why, unless URI is
 * sandbox://ID/PATH with printable ASCII only (no '?', '#' or '\\'), ID of
 * a sandbox id's shape, PATH without "", "." or ".." segments (after
 * decoding), escaped '/' or NUL, valid UTF-8 without control characters. */
int sbx_resource_uri_parse(const char *uri, char **ret_sandbox_id, char **ret_relpath,
			   struct sbx_error *err);
/* resources/list: one page of at most SBX_RESOURCES_PAGE entries {uri,
 * name, description, mimeType, size, _meta: {SBX_RESOURCE_LINK_META: the
 * signed link}} after CURSOR (NULL: the first page), and nextCursor when
 * there may be more. A sandbox that cannot be listed now is left out.
 * -EINVAL for a cursor not ours, -ENOMEM, or the manager's error. */
int sbx_resources_list(const struct sbx_tool_ctx *ctx, const char *cursor,
		       struct json_object **ret_result, struct sbx_error *err);
/* Sends notifications/resources/list_changed through ctx->notifier (none
 * without one): a tool call created or changed files under SBX_RESULTS_DIR
 * (execute_python_code's changed files, an upload there). */
void sbx_resources_changed(const struct sbx_tool_ctx *ctx);
/* The same when anything under SBX_RESULTS_DIR of SB changed since SINCE
 * (sbx_artifact_changed_since: one exec), for execute_terminal_command,
 * whose files are not tracked; nothing is asked without a notifier or once
 * the call is cancelled. */
void sbx_resources_changed_since(const struct sbx_tool_ctx *ctx, sbx_sandbox *sb,
				 const struct timespec *since);
/* resources/templates/list's result; NULL on -ENOMEM. */
struct json_object *sbx_resources_templates(void);
/* resources/read URI: {contents: [{uri, mimeType, text | blob}]}: text for a
 * text type whose bytes are UTF-8, else base64. -EINVAL a malformed URI;
 * -ENOENT no such sandbox of the caller's (another tenant's reads the same)
 * or no such file; -EPERM a path through a symbolic link; -EFBIG a file over
 * server.resource_max_bytes, *ret_data {size, limit, link}; -ENOMEM; else
 * the engine's error. */
int sbx_resources_read(const struct sbx_tool_ctx *ctx, const char *uri,
		       struct json_object **ret_result, struct json_object **ret_data,
		       struct sbx_error *err);

/* ctx->cancelled, false when there is none. */
bool sbx_tools_cancelled(const struct sbx_tool_ctx *ctx);

/* Sends notifications/message {level, logger: "mcp-sandbox", data: text}
 * when LEVEL is at least ctx->log_level. Best effort (nothing on -ENOMEM). */
void sbx_tools_log(const struct sbx_tool_ctx *ctx, enum sbx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Progress of one tools/call, for a client that gave a progressToken
 * (nothing is sent otherwise). Text handed to sbx_progress_output (what the
 * code prints) becomes notifications/progress with the new text as
 * `message`: at most one per SBX_PROGRESS_INTERVAL_MS, the text of a
 * quieter period coalesced, at most SBX_PROGRESS_MSG_MAX bytes per message
 * (more is cut with a note), always valid UTF-8 (a character split between
 * two chunks waits for its end). `progress` counts up from 0 (the start
 * message), strictly increasing. All functions are thread-safe.
 */
#define SBX_PROGRESS_INTERVAL_MS 50
#define SBX_PROGRESS_MSG_MAX 4096
struct sbx_progress {
	const struct sbx_tool_ctx *ctx;
	bool active; /* a token was given and there is a notifier */
	pthread_mutex_t lock;
	struct sbx_buf pending; /* text not yet sent */
	size_t dropped;		/* bytes past the cap since the last send */
	int64_t last_ms;	/* monotonic time of the last send */
	int64_t progress;	/* the last value sent, -1 before the first */
};
void sbx_progress_init(struct sbx_progress *p, const struct sbx_tool_ctx *ctx);
/* Sends MESSAGE now as the next step (e.g. "running the Python code"). */
void sbx_progress_step(struct sbx_progress *p, const char *message);
/* New output: sent at once when the interval since the last send has passed
 * and the text ends a line (or fills a message), else kept for later. */
void sbx_progress_output(struct sbx_progress *p, const char *text, size_t len);
/* Sends the kept text when its interval has passed (call it now and then
 * while the work runs); FINAL sends everything now (before the response). */
void sbx_progress_flush(struct sbx_progress *p, bool final);
void sbx_progress_release(struct sbx_progress *p);

#endif
