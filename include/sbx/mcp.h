/* SPDX-License-Identifier: MIT */
/*
 * The MCP layer: JSON-RPC 2.0, the MCP lifecycle and the tools, over any
 * transport. Transports (src/transport_*.c) hand it HTTP bodies and send back
 * what it returns; it never sees HTTP, and it reaches containers only through
 * the sandbox manager (include/sbx/sandbox.h).
 *
 * Flow of one HTTP body:
 *   sbx_mcp_input_parse()  -> 400 + the returned JSON-RPC error when invalid
 *   sbx_mcp_input_*()      -> the transport picks its status (202 when the body
 *                             holds no request, a new session for initialize)
 *   sbx_mcp_session_run()  -> the reply text, produced in the calling thread
 *
 * Threads: sbx_mcp_session_run may be called for the same session from
 * several threads at once (concurrent POSTs); a slow tools/call in one never
 * delays another call or a ping. Everything else is thread-safe too.
 *
 * Errors and ownership: include/sbx/error.h and include/sbx/common.h.
 */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include "sbx/artifact.h"
#include "sbx/audit.h"
#include "sbx/auth.h"
#include "sbx/error.h"
#include "sbx/sandbox.h"
#include "sbx/settings.h"

/* Protocol versions, oldest first; the last is what we answer a client whose
 * version we do not know. */
#define SBX_MCP_VERSIONS                                                                           \
	{                                                                                          \
		"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"                             \
	}
#define SBX_MCP_VERSION_LATEST "2025-11-25"

/* JSON-RPC and MCP error codes. */
#define SBX_JSONRPC_PARSE_ERROR -32700
#define SBX_JSONRPC_INVALID_REQUEST -32600
#define SBX_JSONRPC_METHOD_NOT_FOUND -32601
#define SBX_JSONRPC_INVALID_PARAMS -32602
#define SBX_JSONRPC_INTERNAL_ERROR -32603
#define SBX_JSONRPC_SERVER_ERROR -32000	  /* the implementation-defined range's first */
#define SBX_MCP_SESSION_NOT_FOUND -32001  /* what the TypeScript SDK uses */
#define SBX_MCP_RESOURCE_NOT_FOUND -32002 /* the specification's */

typedef struct sbx_mcp sbx_mcp;
typedef struct sbx_mcp_session sbx_mcp_session;
typedef struct sbx_mcp_input sbx_mcp_input;

enum sbx_mcp_transport {
	SBX_MCP_TRANSPORT_SSE,	      /* legacy HTTP+SSE, 2024-11-05 */
	SBX_MCP_TRANSPORT_STREAMABLE, /* Streamable HTTP, 2025-03-26 and later */
};

struct sbx_mcp_config {
	const struct sbx_settings *settings; /* must outlive the sbx_mcp */
	sbx_manager *manager;		     /* must outlive the sbx_mcp */
	/* Signs the artifact links the tools hand out; must outlive the
	 * sbx_mcp. NULL: the sbx_mcp opens its own from the manager's state
	 * folder (sbx_link_key_open; a random one without), and its failure is
	 * sbx_mcp_new's. */
	const sbx_link_key *link_key;
	/* Where every tools/call is logged (include/sbx/audit.h); must outlive
	 * the sbx_mcp. NULL: nowhere. */
	sbx_audit *audit;
};

int sbx_mcp_new(const struct sbx_mcp_config *cfg, sbx_mcp **ret_mcp, struct sbx_error *err);
sbx_mcp *sbx_mcp_free(sbx_mcp *m);
/* The key the tools sign links with (the HTTP front checks them with it). */
const sbx_link_key *sbx_mcp_link_key(const sbx_mcp *m);
/* The base of artifact links ("http://127.0.0.1:8000", no trailing slash),
 * known once the HTTP server is bound; copied. */
int sbx_mcp_set_public_url(sbx_mcp *m, const char *url);

/* 1 when V is one of SBX_MCP_VERSIONS. */
bool sbx_mcp_version_supported(const char *v);

/* A session acting for OWNER (the tenant that owns its sandboxes), under
 * LIMITS (the quotas of the key it was opened with, copied; NULL: none). */
int sbx_mcp_session_new(sbx_mcp *m, enum sbx_mcp_transport transport, const char *owner,
			const struct sbx_auth_limits *limits, sbx_mcp_session **ret_session,
			struct sbx_error *err);
/* How S acts and is named: KEY_ID, the public id of the API key it was
 * opened with (NULL or "": none), signs the artifact links its tools hand
 * out (revoking the key ends them) and names its calls in the audit log,
 * with SESSION_TAG, what identifies the session there (copied; the
 * transport's public part of its id, never a secret). Call before S runs
 * anything. */
void sbx_mcp_session_set_audit(sbx_mcp_session *s, const char *key_id, const char *session_tag);
/* S's key's limits are now LIMITS (copied; its keys file changed): its
 * next tool calls count against them. */
void sbx_mcp_session_set_limits(sbx_mcp_session *s, const struct sbx_auth_limits *limits);
sbx_mcp_session *sbx_mcp_session_ref(sbx_mcp_session *s);
sbx_mcp_session *sbx_mcp_session_unref(sbx_mcp_session *s);
/* The negotiated protocol version; NULL until initialize succeeded. */
const char *sbx_mcp_session_version(const sbx_mcp_session *s);
/* The session's client has gone (its SSE stream closed, the session deleted
 * or expired, the server stopping): every request running on S is
 * cancelled exactly as by notifications/cancelled (the tools see
 * ctx->cancelled, their notifications stop, no response is sent), and so is
 * every request run on S from now on, before it starts. Idempotent. */
void sbx_mcp_session_close(sbx_mcp_session *s);

/* The most JSON values one body may hold, an object counting as
 * SBX_MCP_JSON_OBJECT_WEIGHT (json-c spends about 80 bytes on a value and 10
 * times that on an object, its hash table): what a parse may allocate is
 * bounded by the value count as well as by the body's length. */
#define SBX_MCP_JSON_VALUES_MAX 50000
#define SBX_MCP_JSON_OBJECT_WEIGHT 9

/* Sizes up BODY before any parse, without a parser: its values are counted
 * from the brackets, commas and colons outside strings (an upper bound for
 * valid JSON). Over SBX_MCP_JSON_VALUES_MAX it is -E2BIG and fills
 * *ret_error_json with the JSON-RPC error response to send (id null); else
 * *ret_bytes is an upper estimate of what sbx_mcp_input_parse allocates for
 * it (the body's own buffer not included). -ENOMEM. */
int sbx_mcp_input_measure(const char *body, size_t len, size_t *ret_bytes, char **ret_error_json);
/* One parsed HTTP body: a message or (2025-03-26) a batch. Invalid JSON is
 * -EBADMSG, a body over the value count of sbx_mcp_input_measure -E2BIG and a
 * shape that is no JSON-RPC message at all -EINVAL; each fills
 * *ret_error_json with the JSON-RPC error response to send (id null). The
 * parse allocates at most what sbx_mcp_input_measure estimates. */
int sbx_mcp_input_parse(const char *body, size_t len, sbx_mcp_input **ret_input,
			char **ret_error_json);
sbx_mcp_input *sbx_mcp_input_free(sbx_mcp_input *in);
/* Holds at least one request (a message that gets a response). */
bool sbx_mcp_input_has_requests(const sbx_mcp_input *in);
/* Holds an initialize request. */
bool sbx_mcp_input_is_initialize(const sbx_mcp_input *in);
/* Holds a request that may block for long (tools/call, resources/list,
 * resources/read: they go into containers); everything else is answered
 * without waiting, so a transport may run it in any thread. */
bool sbx_mcp_input_may_block(const sbx_mcp_input *in);
/* The reply that refuses every request of IN (a body not run) with the
 * JSON-RPC error CODE and MESSAGE, each under its request's id; an array for
 * a batch. *ret_reply is NULL when IN holds no request. 0 or -ENOMEM. */
int sbx_mcp_input_refuse(const sbx_mcp_input *in, int code, const char *message, char **ret_reply);
/* The same for a body of S's from CLIENT (may be NULL) refused for a limit:
 * each tools/call in it is logged to the audit log as refused, with the
 * error's kind KIND. */
int sbx_mcp_session_refuse(sbx_mcp_session *s, const sbx_mcp_input *in, const char *client,
			   int code, const char *message, const char *kind, char **ret_reply);

/* Where a running request sends notifications (notifications/progress,
 * notifications/message) before its response. Called from the thread that
 * runs the request; json is one JSON-RPC message, valid during the call.
 * GONE (may be NULL) says that the client this run answers to has gone (its
 * connection closed): from then on every request of the run is cancelled
 * as by notifications/cancelled. It is asked often (each time a tool polls
 * its cancellation), from the running thread: cheap and thread-safe.
 * CLIENT (may be NULL) is the address the body came from, for the audit
 * log. */
struct sbx_mcp_notifier {
	void (*send)(void *ctx, const char *json);
	void *ctx;
	bool (*gone)(void *ctx);
	const char *client;
};

/* Runs every message of IN on S in order (IN is consumed, also on error).
 * *ret_reply: the text to send back, one response object or, for a batch,
 * an array; NULL when nothing needs an answer (notifications, responses,
 * requests cancelled while they ran: by notifications/cancelled, by the
 * notifier's GONE, or by sbx_mcp_session_close).
 * Protocol errors are JSON-RPC error responses in *ret_reply, not failures
 * of this call; it fails only on -ENOMEM. Blocks as long as the tools take:
 * call it from a thread that may block. NOTIFIER may be NULL. */
int sbx_mcp_session_run(sbx_mcp_session *s, sbx_mcp_input *in, const struct sbx_mcp_notifier *n,
			char **ret_reply, struct sbx_error *err);

#endif
