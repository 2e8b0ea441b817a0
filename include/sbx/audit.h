/* SPDX-License-Identifier: MIT */
/*
 * The audit log: one JSON object per line for every tool call and every
 * refused authentication, for whoever accounts for the server's use
 * (server.audit_log). Apart from the operator's log (include/sbx/log.h):
 * no prefix, no escaping of its own; every line is a JSON text that jq and
 * log shippers read as it is, built with json-c.
 *
 * What a line never holds: a tool's arguments, code, command, output or
 * error message (they may carry the user's data, and package index URLs
 * credentials), an API key or its secret part, a whole session id (the
 * id of an SSE session authorizes POST /messages: only its public index
 * part is logged). Every string field keeps at most SBX_AUDIT_FIELD_MAX
 * bytes (cut at a character; bytes that are not UTF-8 become U+FFFD), so a
 * line stays under SBX_AUDIT_LINE_MAX whatever a client sends.
 *
 *   {"time":"2025-06-01T12:00:00.123Z","event":"tool_call","tenant":"alice",
 *    "key_id":"3f9a0c12b7e4","session":"a1b2c3d4","transport":"streamable",
 *    "client":"192.0.2.7","tool":"execute_python_code",
 *    "sandbox_id":"0d5c...","sandbox_name":"analysis","duration_ms":1520,
 *    "outcome":"ok","error":"","bytes_out":2048}
 *   {"time":"...","event":"auth_failure","client":"192.0.2.9","method":"POST",
 *    "route":"/mcp","reason":"rejected","key_id":"3f9a0c12b7e4"}
 *
 * Where: standard error (PATH empty; each line under stderr's lock, so it
 * never mixes with a sbx_log line) or a file, opened O_APPEND (made 0600;
 * never through a symbolic link; a regular file of this user that its
 * group and others cannot write). Each line is one write(2), under the
 * log's lock. The file is reopened by sbx_audit_reopen (the program calls
 * it on SIGHUP), and by the next line at least SBX_AUDIT_CHECK_MS after the
 * last look when PATH no longer names the open file (renamed or removed
 * by a rotation): a rotation loses no line and needs no signal. A reopen
 * that fails keeps the open file and says why in the server's log.
 */
#ifndef SBX_AUDIT_H
#define SBX_AUDIT_H

#include <stdint.h>

#include "sbx/error.h"

/* Bytes of a string field kept. */
#define SBX_AUDIT_FIELD_MAX 64
/* The longest line (a field of SBX_AUDIT_FIELD_MAX control characters takes
 * six times that once escaped). */
#define SBX_AUDIT_LINE_MAX 8192
/* How often a line looks whether the file was rotated away. */
#define SBX_AUDIT_CHECK_MS 1000

typedef struct sbx_audit sbx_audit;

/*
 * Opens the audit log: standard error when PATH is NULL or "", else the
 * file PATH (absolute), made 0600 when absent. -ELOOP: PATH is a symbolic
 * link; -EPERM: not a regular file of this user, or writable by its group
 * or others; other negative errnos from open(2); ERR says which and what to
 * do, prefixed with "server.audit_log". 0 with *RET_AUDIT.
 */
int sbx_audit_open(const char *path, sbx_audit **ret_audit, struct sbx_error *err);
sbx_audit *sbx_audit_free(sbx_audit *a);

/* The file's path, "" for standard error. */
const char *sbx_audit_path(const sbx_audit *a);

/* Opens PATH again and writes the next lines there (SIGHUP after a
 * rotation). 0 (also for standard error: nothing to do), or a negative
 * errno as sbx_audit_open's with the file open before kept. */
int sbx_audit_reopen(sbx_audit *a, struct sbx_error *err);

/* One tools/call, as the MCP layer saw it. NULL strings are written as "". */
struct sbx_audit_tool_call {
	const char *tenant;
	const char *key_id;    /* the public id of the session's API key; "" none */
	const char *session;   /* the session id's index part, never the whole id */
	const char *transport; /* "streamable" or "sse" */
	const char *client;    /* the address the call came from */
	const char *tool;      /* the name asked for (a client's: cut like any field) */
	const char *sandbox_id;
	const char *sandbox_name; /* the sandbox the call resolved, "" when none */
	int64_t duration_ms;
	const char *outcome; /* "ok", "error", "refused" (a limit), "cancelled" */
	const char *error;   /* the error's kind (a word, never its message); "" when ok */
	int64_t bytes_out;   /* bytes of the JSON-RPC response; 0 when none is sent */
};

/* One refused authentication, as the HTTP front saw it. */
struct sbx_audit_auth_failure {
	const char *client;
	const char *method;
	const char *route;  /* "/mcp", "/sse" */
	const char *reason; /* missing, malformed, conflicting, rejected, throttled */
	const char *key_id; /* the presented key's public id when it had a key's shape */
};

/* Write one line each. A (may be NULL: nothing) is safe to share between
 * threads; a line that cannot be written is lost, with a line in the
 * server's log (once until writes work again). */
void sbx_audit_tool_call(sbx_audit *a, const struct sbx_audit_tool_call *c);
void sbx_audit_auth_failure(sbx_audit *a, const struct sbx_audit_auth_failure *f);

#endif
