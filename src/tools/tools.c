/* SPDX-License-Identifier: MIT */
/*
 * The tools: their names, descriptions and schemas (one table), the
 * checking of arguments against the inputSchema itself, and the shape of a
 * CallToolResult for each protocol version. The work is done by the sandbox
 * manager; the handlers (src/tools/handlers.c) only translate.
 *
 * Policy, the same for every tool: isError is true only when the tool could
 * not do what was asked (bad arguments, unknown sandbox, engine failure).
 * Code or a command that ran and exited non-zero, timed out, or a pip install
 * that failed, is a normal result the model reads (exit_code, status).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sbx/buf.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/utf8.h"
#include "tools-internal.h"

#define V_ANNOTATIONS "2025-03-26"	    /* annotations */
#define V_STRUCTURED SBX_TOOLS_V_STRUCTURED /* title, outputSchema, structuredContent, links */

bool sbx_tools_version_at_least(const char *version, const char *min)
{
	/* Versions are dates, YYYY-MM-DD: they compare as strings. Unknown = oldest. */
	return version && strcmp(version, min) >= 0;
}

/* ---- notifications: log messages, progress ---- */

const char *sbx_log_level_name(enum sbx_log_level level)
{
	static const char *const names[] = {"debug", "info",	 "notice", "warning",
					    "error", "critical", "alert",  "emergency"};
	return (unsigned)level < SBX_ARRAY_SIZE(names) ? names[level] : NULL;
}

bool sbx_tools_cancelled(const struct sbx_tool_ctx *ctx)
{
	return ctx->cancelled && ctx->cancelled(ctx->cancel_ud);
}

/* Sends {"jsonrpc":"2.0","method":METHOD,"params":PARAMS} (PARAMS consumed). */
static void send_notification(const struct sbx_tool_ctx *ctx, const char *method,
			      struct json_object *params)
{
	struct json_object *n = json_object_new_object();
	int r = 0;

	if (!n || !params) {
		json_object_put(n);
		json_object_put(params);
		return;
	}
	r |= sbx_tools_put(n, "jsonrpc", json_object_new_string("2.0"));
	r |= sbx_tools_put(n, "method", json_object_new_string(method));
	r |= sbx_tools_put(n, "params", params);
	if (r == 0)
		ctx->notifier->send(ctx->notifier->ctx, json_object_to_json_string_ext(
							    n, JSON_C_TO_STRING_PLAIN |
								   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(n);
}

void sbx_tools_log(const struct sbx_tool_ctx *ctx, enum sbx_log_level level, const char *fmt, ...)
{
	struct json_object *p;
	char text[1024];
	va_list ap;
	int r = 0;

	if (!ctx->notifier || !ctx->notifier->send || level < ctx->log_level ||
	    !sbx_log_level_name(level))
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	p = json_object_new_object();
	if (!p)
		return;
	r |= sbx_tools_put(p, "level", json_object_new_string(sbx_log_level_name(level)));
	r |= sbx_tools_put(p, "logger", json_object_new_string("mcp-sandbox"));
	r |= sbx_tools_put(p, "data", json_object_new_string(text));
	if (r < 0)
		return json_object_put(p), (void)0;
	send_notification(ctx, "notifications/message", p);
}

void sbx_progress_init(struct sbx_progress *p, const struct sbx_tool_ctx *ctx)
{
	memset(p, 0, sizeof(*p));
	p->ctx = ctx;
	p->active = ctx->notifier && ctx->notifier->send && ctx->progress_token;
	p->progress = -1;
	pthread_mutex_init(&p->lock, NULL);
}

void sbx_progress_release(struct sbx_progress *p)
{
	pthread_mutex_destroy(&p->lock);
	sbx_buf_release(&p->pending);
}

/* The next progress value with MESSAGE (LEN bytes, valid UTF-8). Under
 * p->lock, so values go out in order. */
static void progress_send(struct sbx_progress *p, const char *message, size_t len)
{
	struct json_object *params = json_object_new_object();
	int r = 0;

	if (!params)
		return;
	p->progress++;
	p->last_ms = sbx_monotonic_ms();
	r |= sbx_tools_put(params, "progressToken", json_object_get(p->ctx->progress_token));
	r |= sbx_tools_put(params, "progress", json_object_new_int64(p->progress));
	/* The message field exists from 2025-03-26 on. */
	if (sbx_tools_version_at_least(p->ctx->protocol_version, "2025-03-26"))
		r |=
		    sbx_tools_put(params, "message", json_object_new_string_len(message, (int)len));
	if (r < 0)
		return json_object_put(params), (void)0;
	send_notification(p->ctx, "notifications/progress", params);
}

/* Bytes at the end of S[0..N) that start a UTF-8 character not complete yet. */
static size_t utf8_open_tail(const char *s, size_t n)
{
	size_t i = n, need;
	unsigned char lead;

	while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
		i--;
	if (i == 0)
		return 0;
	lead = (unsigned char)s[i - 1];
	if (lead < 0xC0)
		return 0; /* ASCII, or continuation bytes without a lead: not ours to hold */
	need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
	return n - (i - 1) < need ? n - (i - 1) : 0;
}

/* Sends the kept text; FINAL sends a split character too (as U+FFFD).
 * Under p->lock. */
static void progress_flush_locked(struct sbx_progress *p, bool final)
{
	struct sbx_buf msg = SBX_BUF_INIT;
	size_t hold = 0, n;

	if (p->pending.len == 0 && p->dropped == 0)
		return;
	if (!final && p->dropped == 0)
		hold = utf8_open_tail(p->pending.data, p->pending.len);
	n = p->pending.len - hold;
	if (n == 0 && p->dropped == 0)
		return;
	if (sbx_buf_append(&msg, p->pending.data ? p->pending.data : "", n) < 0 ||
	    sbx_utf8_sanitize(&msg) < 0 ||
	    (p->dropped &&
	     sbx_buf_appendf(&msg, "\n[%zu more bytes not shown here]", p->dropped) < 0)) {
		sbx_buf_release(&msg);
		return;
	}
	progress_send(p, msg.data ? msg.data : "", msg.len);
	sbx_buf_release(&msg);
	if (p->pending.data) {
		memmove(p->pending.data, p->pending.data + n, hold);
		p->pending.len = hold;
		p->pending.data[hold] = '\0';
	}
	p->dropped = 0;
}

void sbx_progress_step(struct sbx_progress *p, const char *message)
{
	if (!p->active)
		return;
	pthread_mutex_lock(&p->lock);
	progress_flush_locked(p, true);
	progress_send(p, message, strlen(message));
	pthread_mutex_unlock(&p->lock);
}

void sbx_progress_output(struct sbx_progress *p, const char *text, size_t len)
{
	size_t room, take;

	if (!p->active || len == 0)
		return;
	pthread_mutex_lock(&p->lock);
	room = p->pending.len < SBX_PROGRESS_MSG_MAX ? SBX_PROGRESS_MSG_MAX - p->pending.len : 0;
	take = len < room ? len : room;
	/* Cut at a character boundary. */
	while (take < len && take > 0 && ((unsigned char)text[take] & 0xC0) == 0x80)
		take--;
	if (sbx_buf_append(&p->pending, text, take) < 0)
		take = 0;
	p->dropped += len - take;
	/* A line that is still being written (print() writes the text, then the
	 * newline) waits for its end or for the next sbx_progress_flush. */
	if (sbx_monotonic_ms() - p->last_ms >= SBX_PROGRESS_INTERVAL_MS &&
	    (p->dropped || p->pending.len >= SBX_PROGRESS_MSG_MAX ||
	     (p->pending.len && p->pending.data[p->pending.len - 1] == '\n')))
		progress_flush_locked(p, false);
	pthread_mutex_unlock(&p->lock);
}

void sbx_progress_flush(struct sbx_progress *p, bool final)
{
	if (!p->active)
		return;
	pthread_mutex_lock(&p->lock);
	if (final || sbx_monotonic_ms() - p->last_ms >= SBX_PROGRESS_INTERVAL_MS)
		progress_flush_locked(p, final);
	pthread_mutex_unlock(&p->lock);
}

/* ---- the table ---- */

#define SANDBOX_ID_PROP                                                                            \
	"\"sandbox_id\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64,"                    \
	"\"description\":\"The sandbox_id (or name) returned by create_sandbox or "                \
	"list_sandboxes.\"}"
#define TIMEOUT_PROP                                                                               \
	"\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":3600,"                \
	"\"description\":\"Time limit in seconds (default: the server's, usually 60; at most the " \
	"server's maximum, usually 600: a longer one is cut to it and `notice` says so). "         \
	"The process is killed when it is reached.\"}"
#define PY_TIMEOUT_PROP                                                                            \
	"\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":3600,"                \
	"\"description\":\"Time limit in seconds (default: the server's, usually 60; at most the " \
	"server's maximum, usually 600: a longer one is cut to it and `notice` says so). "         \
	"The code is then interrupted; if it does not stop, the interpreter is restarted and its " \
	"variables are lost.\"}"
#define PACKAGE_PROP                                                                               \
	"\"package_name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200,"                 \
	"\"description\":\"A pip requirement: a project name with optional extras and version, "   \
	"e.g. 'requests', 'scikit-learn==1.5.0', 'pandas[excel]>=2'. No options, URLs or "         \
	"paths.\"}"
#define RUN_OUTPUT_PROPS                                                                           \
	"\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"                       \
	"\"exit_code\":{\"type\":\"integer\",\"description\":\"0 on success; non-zero after an "   \
	"error or an interrupt at the time limit; -1 when the process was killed\"},"              \
	"\"timed_out\":{\"type\":\"boolean\"},"                                                    \
	"\"truncated\":{\"type\":\"boolean\",\"description\":\"output beyond the server's cap "    \
	"was cut\"},"                                                                              \
	"\"out_of_memory\":{\"type\":\"boolean\",\"description\":\"present and true when the "     \
	"kernel's OOM killer struck at the sandbox's memory limit\"},"                             \
	"\"out_of_disk\":{\"type\":\"boolean\",\"description\":\"present and true when a "         \
	"write failed because the sandbox's disk space (sandbox.disk) is used up\"}"
#define RUN_OUTPUT_REQUIRED "\"stdout\",\"stderr\",\"exit_code\",\"timed_out\",\"truncated\""
/* In every tool that wakes a sleeping sandbox. */
#define WAKE_NOTICE_PROP                                                                           \
	"\"notice\":{\"type\":\"string\",\"description\":\"what the server did besides: "          \
	"the sandbox was asleep and was woken for this call (its Python state is gone, "           \
	"its files kept)\"}"
#define STATUS_ENUM "\"installing\",\"success\",\"failed\",\"installed\",\"not_installed\""

static const struct sbx_tool_def tools[] = {
    {
	.name = "list_sandboxes",
	.title = "List sandboxes",
	.description =
	    "List your Python sandboxes with their status (\"sleeping\" when one was unused "
	    "for a while: its files are kept and any call on it wakes it, with its Python "
	    "variables reset; \"dead\" with a reason when one no longer runs), image, "
	    "creation, last-use, sleep and expiry times (UTC: a sandbox asleep for long is "
	    "removed with its files, and `expires` says when) "
	    "and the packages installed in them with install_package_in_sandbox. Call this first: "
	    "reuse a running sandbox instead of creating a new one, and use it to find a "
	    "sandbox_id you lost. Workflow: list_sandboxes -> create_sandbox (if none fits) -> "
	    "install_package_in_sandbox -> check_package_installation_status -> "
	    "execute_python_code -> delete_sandbox when done.",
	.input_schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{\"sandboxes\":{\"type\":\"array\",\"items\":{"
	    "\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
	    "\"name\":{\"type\":\"string\"},\"status\":{\"type\":\"string\"},"
	    "\"node\":{\"type\":\"string\",\"description\":\"on a cluster: the node it "
	    "runs on\"},"
	    "\"image\":{\"type\":\"string\"},"
	    "\"created\":{\"type\":\"string\",\"description\":\"ISO 8601, UTC\"},"
	    "\"last_used\":{\"type\":\"string\",\"description\":\"ISO 8601, UTC\"},"
	    "\"sleeps_at\":{\"type\":\"string\",\"description\":\"ISO 8601, UTC: when "
	    "the server puts it to sleep unless it is used again before (its files are "
	    "kept, its Python variables are not; the next call wakes it); absent: never\"},"
	    "\"asleep_since\":{\"type\":\"string\",\"description\":\"with status "
	    "sleeping: since when (ISO 8601, UTC). Any call on it wakes it in a moment\"},"
	    "\"sleeps\":{\"type\":\"integer\",\"description\":\"times it was put to "
	    "sleep\"},"
	    "\"expires\":{\"type\":\"string\",\"description\":\"ISO 8601, UTC: when the "
	    "server removes it with its files unless it is used again before (a sandbox "
	    "asleep too long expires; so does any sandbox at the server's maximum age); "
	    "absent: never\"},"
	    "\"reason\":{\"type\":\"string\",\"description\":\"with status dead: why it "
	    "no longer runs (killed from outside, out of memory, the engine restarted); "
	    "delete it and create a new one\"},"
	    "\"packages\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
	    "\"egress_bytes_in\":{\"type\":\"integer\",\"description\":\"bytes the server "
	    "carried into the sandbox for it (package index, egress_allow hosts)\"},"
	    "\"egress_bytes_out\":{\"type\":\"integer\",\"description\":\"bytes the "
	    "server carried out of the sandbox for it\"},"
	    "\"cpu_seconds\":{\"type\":\"number\",\"description\":\"CPU time its "
	    "container used (sampled every minute or so)\"},"
	    "\"memory_bytes\":{\"type\":\"integer\",\"description\":\"memory in use "
	    "at the last sample\"},"
	    "\"memory_byte_seconds\":{\"type\":\"integer\",\"description\":\"memory "
	    "held over time, bytes x seconds\"},"
	    "\"disk_bytes\":{\"type\":\"integer\",\"description\":\"bytes its "
	    "container had written to its own disk at the last sample\"},"
	    "\"disk_byte_seconds\":{\"type\":\"integer\",\"description\":\"those "
	    "bytes held over time, bytes x seconds\"}},"
	    "\"required\":[\"sandbox_id\",\"name\",\"status\",\"image\",\"created\","
	    "\"last_used\",\"packages\"],\"additionalProperties\":false}},"
	    "\"count\":{\"type\":\"integer\"},"
	    "\"tenant_egress_bytes_in\":{\"type\":\"integer\",\"description\":\"bytes "
	    "the server carried into all your sandboxes, deleted ones included, since it "
	    "started\"},"
	    "\"tenant_egress_bytes_out\":{\"type\":\"integer\",\"description\":\"bytes "
	    "carried out of them\"},"
	    "\"tenant_cpu_seconds\":{\"type\":\"number\",\"description\":\"CPU time "
	    "all your sandboxes used, deleted ones included\"},"
	    "\"tenant_memory_byte_seconds\":{\"type\":\"integer\",\"description\":"
	    "\"memory all your sandboxes held over time, bytes x "
	    "seconds\"},"
	    "\"tenant_disk_byte_seconds\":{\"type\":\"integer\",\"description\":"
	    "\"disk all your sandboxes held over time, deleted ones included, bytes x "
	    "seconds\"}},\"required\":[\"sandboxes\",\"count\"],"
	    "\"additionalProperties\":false}",
	.read_only = true,
	.idempotent = true,
	.run = sbx_tool_list_sandboxes,
    },
    {
	.name = "create_sandbox",
	.title = "Create sandbox",
	.description =
	    "Create a new isolated Python sandbox (a container with Python 3.11, numpy, pandas and "
	    "matplotlib) and return its sandbox_id. A sandbox keeps its files and installed "
	    "packages until it is deleted (delete_sandbox) or expires (unused for long; "
	    "list_sandboxes shows when), so create one "
	    "per task and pass its sandbox_id to every later call; call list_sandboxes first to "
	    "reuse one you already have, and delete_sandbox what you no longer need. "
	    "Optional name: a label you can use instead of the id (1-64 letters, digits, '_', '.', "
	    "'-'; unique among your sandboxes). Next: install_package_in_sandbox for anything "
	    "missing, then execute_python_code.",
	.input_schema =
	    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,"
	    "\"maxLength\":64,\"pattern\":\"^[A-Za-z0-9_.-]+$\",\"description\":\"Optional "
	    "label for the sandbox, unique among yours, e.g. 'sales-analysis'.\"}},"
	    "\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
	    "\"name\":{\"type\":\"string\"},\"status\":{\"type\":\"string\"},"
	    "\"image\":{\"type\":\"string\"}},"
	    "\"required\":[\"sandbox_id\",\"name\",\"status\",\"image\"],"
	    "\"additionalProperties\":false}",
	.run = sbx_tool_create_sandbox,
    },
    {
	.name = "execute_python_code",
	.title = "Run Python code",
	.description =
	    "Run Python 3 code in a sandbox and return stdout, stderr and the exit code. The "
	    "sandbox keeps one Python interpreter, like a notebook: variables, imports and "
	    "functions defined in one call are there in the next, so build on earlier calls "
	    "instead of repeating them. Code runs in /app/results. Print what you want to see "
	    "(the value of a last expression is not shown). Files the code creates or changes "
	    "under /app/results come back in `files` with a download link (url) to show the "
	    "user; new PNG/JPEG images also come back as images you can look at. For plots use "
	    "matplotlib and save them, e.g. plt.savefig('plot.png') (or 'plots/p.png' after "
	    "os.makedirs('plots', exist_ok=True)); never call plt.show(): there is no display. "
	    "An uncaught exception is a normal result, not a tool error: exit_code is 1, the "
	    "traceback is in stderr and earlier variables are kept; fix the code and run it "
	    "again. At the time limit the code is interrupted (KeyboardInterrupt); if it does not "
	    "stop, the interpreter is restarted and every variable is lost: then "
	    "interpreter_restarted is true and `notice` says so (re-run your setup code). "
	    "reset_python_interpreter starts over on purpose. A missing module: install it with "
	    "install_package_in_sandbox first. Code normally has no network access.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP
			",\"code\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1000000,"
			"\"description\":\"The Python source to run.\"}," PY_TIMEOUT_PROP
			"},\"required\":[\"sandbox_id\",\"code\"],\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{" RUN_OUTPUT_PROPS
	    ",\"files\":{\"type\":\"array\",\"description\":\"files created or modified under "
	    "/app/results during the run\",\"items\":{\"type\":\"object\",\"properties\":{"
	    "\"path\":{\"type\":\"string\",\"description\":\"relative to /app/results\"},"
	    "\"size\":{\"type\":\"integer\"},\"url\":{\"type\":\"string\"},"
	    "\"mime_type\":{\"type\":\"string\"},"
	    "\"inline_image\":{\"type\":\"boolean\",\"description\":\"the image is also in "
	    "the result's content\"}},"
	    "\"required\":[\"path\",\"size\",\"url\",\"mime_type\"],"
	    "\"additionalProperties\":false}},"
	    "\"files_truncated\":{\"type\":\"boolean\"},"
	    "\"interpreter_restarted\":{\"type\":\"boolean\",\"description\":\"the variables "
	    "and imports of earlier calls are gone\"},"
	    "\"notice\":{\"type\":\"string\",\"description\":\"what happened to the "
	    "interpreter (time limit, restart, output cut; the sandbox was asleep), and a "
	    "timeout cut to the server's maximum\"}},"
	    "\"required\":[" RUN_OUTPUT_REQUIRED ",\"files\",\"files_truncated\","
	    "\"interpreter_restarted\"],"
	    "\"additionalProperties\":false}",
	.destructive = true,
	.run = sbx_tool_execute_python_code,
    },
    {
	.name = "install_package_in_sandbox",
	.title = "Install a Python package",
	.description =
	    "Install a Python package into a sandbox with pip (from the server's package index). "
	    "The install starts in the background; this call waits a few seconds and reports "
	    "status: 'success' (ready to import), 'failed' (see log_tail: usually a misspelt name "
	    "or a version that does not exist) or 'installing' (still running: call "
	    "check_package_installation_status with the same sandbox_id and package_name every few "
	    "seconds until it says success or failed). numpy, pandas and matplotlib are already "
	    "there. One package per call; a failed install is a normal result, not a tool error.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP "," PACKAGE_PROP
			"},\"required\":[\"sandbox_id\",\"package_name\"],"
			"\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{\"package\":{\"type\":\"string\"},"
	    "\"status\":{\"type\":\"string\",\"enum\":[" STATUS_ENUM "]},"
	    "\"version\":{\"type\":\"string\"},"
	    "\"log_tail\":{\"type\":\"string\",\"description\":\"the end of pip's "
	    "output\"},"
	    "\"seconds\":{\"type\":\"number\"},\"message\":{\"type\":\"string\"}," WAKE_NOTICE_PROP
	    "},"
	    "\"required\":[\"package\",\"status\",\"seconds\",\"message\"],"
	    "\"additionalProperties\":false}",
	.idempotent = true,
	.open_world = true,
	.run = sbx_tool_install_package,
    },
    {
	.name = "check_package_installation_status",
	.title = "Check a package installation",
	.description =
	    "Report where an install started with install_package_in_sandbox is: 'installing' "
	    "(wait a few seconds and call again), 'success', 'failed' (log_tail says why), or, for "
	    "a package this server did not install, 'installed' (already in the sandbox, e.g. "
	    "numpy) or 'not_installed' (call install_package_in_sandbox). Use the same "
	    "package_name you passed to install_package_in_sandbox.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP "," PACKAGE_PROP
			"},\"required\":[\"sandbox_id\",\"package_name\"],"
			"\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{\"package\":{\"type\":\"string\"},"
	    "\"status\":{\"type\":\"string\",\"enum\":[" STATUS_ENUM "]},"
	    "\"version\":{\"type\":\"string\"},\"log_tail\":{\"type\":\"string\"},"
	    "\"seconds\":{\"type\":\"number\"},\"message\":{\"type\":\"string\"}," WAKE_NOTICE_PROP
	    "},"
	    "\"required\":[\"package\",\"status\",\"message\"],"
	    "\"additionalProperties\":false}",
	.read_only = true,
	.idempotent = true,
	.run = sbx_tool_check_package,
    },
    {
	.name = "execute_terminal_command",
	.title = "Run a shell command",
	.description =
	    "Run a shell command (`sh -c`) in a sandbox, in /app/results, as an unprivileged user, "
	    "and return stdout, stderr and the exit code. Use it to look at files (ls -la, head), "
	    "move or unpack them, or run tools; use execute_python_code for Python and "
	    "install_package_in_sandbox for packages (not pip here). A non-zero exit_code is a "
	    "normal result, not a tool error: read stderr. timed_out is true when the time limit "
	    "killed the command. Normally no network access; write files under /app/results (they "
	    "can be downloaded) or /tmp.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP
			",\"command\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":30000,"
			"\"description\":\"The command line, run with sh -c.\"}," TIMEOUT_PROP
			"},\"required\":[\"sandbox_id\",\"command\"],"
			"\"additionalProperties\":false}",
	.output_schema = "{\"type\":\"object\",\"properties\":{" RUN_OUTPUT_PROPS
			 ",\"notice\":{\"type\":\"string\",\"description\":\"what the server "
			 "changed about the call (a timeout cut to its maximum; the sandbox was "
			 "asleep and was woken for it)\"}"
			 "},\"required\":[" RUN_OUTPUT_REQUIRED "],"
			 "\"additionalProperties\":false}",
	.destructive = true,
	.run = sbx_tool_execute_terminal_command,
    },
    {
	.name = "upload_file_to_sandbox",
	.title = "Upload a file to a sandbox",
	.description =
	    "Copy a file from the server's upload folder into a sandbox, e.g. a CSV the user "
	    "provided, so code can read it. local_file_path is a path on the server inside its "
	    "upload folder (other paths are refused); dest_path is a directory in the sandbox "
	    "(the file keeps its name) or a full file path, under /app/results or /tmp; default "
	    "/app/results. A file of the same name is replaced. Then read it from "
	    "execute_python_code, e.g. pd.read_csv('data.csv') when it is in /app/results.",
	.input_schema =
	    "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP
	    ",\"local_file_path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,"
	    "\"description\":\"Path of the file on the server, inside its upload folder.\"},"
	    "\"dest_path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,"
	    "\"description\":\"Where to put it in the sandbox: a directory or a file path "
	    "under /app/results or /tmp (default /app/results).\"}},"
	    "\"required\":[\"sandbox_id\",\"local_file_path\"],\"additionalProperties\":false}",
	.output_schema =
	    "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
	    "\"path\":{\"type\":\"string\",\"description\":\"where the file is in the sandbox\"},"
	    "\"size\":{\"type\":\"integer\"},"
	    "\"url\":{\"type\":\"string\",\"description\":\"a download link, for files under "
	    "/app/results\"}," WAKE_NOTICE_PROP "},\"required\":[\"sandbox_id\",\"path\",\"size\"],"
	    "\"additionalProperties\":false}",
	.destructive = true,
	.idempotent = true,
	.run = sbx_tool_upload_file,
    },
    {
	.name = "reset_python_interpreter",
	.title = "Reset the Python interpreter",
	.description =
	    "Start a fresh Python interpreter in a sandbox: clears all variables, imports and "
	    "functions that earlier execute_python_code calls defined (also stops code still "
	    "running there). Files in the sandbox and installed packages stay. Use it when the "
	    "state is muddled or to free memory; not needed after a normal error.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP
			"},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}",
	.output_schema = "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":"
			 "\"string\"},\"reset\":{\"type\":\"boolean\"},"
			 "\"message\":{\"type\":\"string\"}," WAKE_NOTICE_PROP "},"
			 "\"required\":[\"sandbox_id\",\"reset\",\"message\"],"
			 "\"additionalProperties\":false}",
	.destructive = true,
	.idempotent = true,
	.run = sbx_tool_reset_python,
    },
    {
	.name = "delete_sandbox",
	.title = "Delete a sandbox",
	.description =
	    "Delete one of your sandboxes when you are done with it: its container is removed "
	    "with every file, installed package and Python variable in it, and the server's "
	    "slot is free at once for a new sandbox. A call still running in it is stopped and "
	    "fails. Download what you need first (the file links stop working). Use it when "
	    "create_sandbox says the server is at its limit: the error names your least "
	    "recently used sandboxes.",
	.input_schema = "{\"type\":\"object\",\"properties\":{" SANDBOX_ID_PROP
			"},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}",
	.output_schema = "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":"
			 "\"string\"},\"name\":{\"type\":\"string\"},"
			 "\"deleted\":{\"type\":\"boolean\"},"
			 "\"message\":{\"type\":\"string\"}},"
			 "\"required\":[\"sandbox_id\",\"name\",\"deleted\",\"message\"],"
			 "\"additionalProperties\":false}",
	.destructive = true,
	.idempotent = true,
	.run = sbx_tool_delete_sandbox,
    },
};

/* ---- tools/list ---- */

/* Adds V under K to O; V is consumed. -ENOMEM when V is NULL or the add fails. */
int sbx_tools_put(struct json_object *o, const char *k, struct json_object *v)
{
	if (!v)
		return -ENOMEM;
	if (json_object_object_add(o, k, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

int sbx_tools_append(struct json_object *a, struct json_object *v)
{
	if (!v)
		return -ENOMEM;
	if (json_object_array_add(a, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static struct json_object *parse_schema(const char *text)
{
	/* The table holds literals; a parse failure is a bug the tests catch. */
	return json_tokener_parse(text);
}

static struct json_object *annotations_of(const struct sbx_tool_def *t)
{
	struct json_object *a = json_object_new_object();
	int r = 0;

	if (!a)
		return NULL;
	r |= sbx_tools_put(a, "title", json_object_new_string(t->title));
	r |= sbx_tools_put(a, "readOnlyHint", json_object_new_boolean(t->read_only));
	if (!t->read_only) {
		r |= sbx_tools_put(a, "destructiveHint", json_object_new_boolean(t->destructive));
		r |= sbx_tools_put(a, "idempotentHint", json_object_new_boolean(t->idempotent));
	}
	r |= sbx_tools_put(a, "openWorldHint", json_object_new_boolean(t->open_world));
	if (r < 0)
		return json_object_put(a), NULL;
	return a;
}

static struct json_object *tool_entry(const struct sbx_tool_def *t, const char *version)
{
	struct json_object *o = json_object_new_object();
	int r = 0;

	if (!o)
		return NULL;
	r |= sbx_tools_put(o, "name", json_object_new_string(t->name));
	if (sbx_tools_version_at_least(version, V_STRUCTURED))
		r |= sbx_tools_put(o, "title", json_object_new_string(t->title));
	r |= sbx_tools_put(o, "description", json_object_new_string(t->description));
	r |= sbx_tools_put(o, "inputSchema", parse_schema(t->input_schema));
	if (sbx_tools_version_at_least(version, V_STRUCTURED))
		r |= sbx_tools_put(o, "outputSchema", parse_schema(t->output_schema));
	if (sbx_tools_version_at_least(version, V_ANNOTATIONS))
		r |= sbx_tools_put(o, "annotations", annotations_of(t));
	if (r < 0)
		return json_object_put(o), NULL;
	return o;
}

struct json_object *sbx_tools_list(const char *version)
{
	struct json_object *list = json_object_new_array();

	if (!list)
		return NULL;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tools); i++)
		if (sbx_tools_append(list, tool_entry(&tools[i], version)) < 0)
			return json_object_put(list), NULL;
	return list;
}

/* ---- checking arguments against the inputSchema ---- */

static const char *json_type_word(struct json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_double:
	case json_type_int:
		return "a number";
	case json_type_object:
		return "an object";
	case json_type_array:
		return "an array";
	case json_type_string:
		return "a string";
	}
	return "?";
}

/* Code points of valid UTF-8; a stray byte counts as one. */
static size_t utf8_chars(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xC0) != 0x80;
	return n;
}

static bool schema_num(struct json_object *prop, const char *key, double *ret)
{
	struct json_object *v;
	if (!json_object_object_get_ex(prop, key, &v))
		return false;
	*ret = json_object_get_double(v);
	return true;
}

static bool is_required(struct json_object *schema, const char *key)
{
	struct json_object *req;
	if (!json_object_object_get_ex(schema, "required", &req))
		return false;
	for (size_t i = 0; i < json_object_array_length(req); i++)
		if (strcmp(json_object_get_string(json_object_array_get_idx(req, i)), key) == 0)
			return true;
	return false;
}

static int append_names(struct sbx_buf *b, struct json_object *props)
{
	const char *sep = "";
	int r = 0;
	json_object_object_foreach(props, k, v)
	{
		(void)v;
		r = sbx_buf_appendf(b, "%s%s", sep, k);
		if (r < 0)
			return r;
		sep = ", ";
	}
	return sep[0] ? 0 : sbx_buf_appendf(b, "no arguments");
}

/* One argument against its property schema; appends why to MSG when wrong. */
static int check_value(const char *key, struct json_object *prop, struct json_object *v,
		       struct sbx_buf *msg)
{
	struct json_object *type;
	const char *want;
	double lim;

	json_object_object_get_ex(prop, "type", &type);
	want = json_object_get_string(type);
	if (strcmp(want, "string") == 0) {
		const char *s;
		size_t len, chars;
		if (!json_object_is_type(v, json_type_string))
			return sbx_buf_appendf(msg, "argument '%s' must be a string, not %s", key,
					       json_type_word(v));
		s = json_object_get_string(v);
		len = (size_t)json_object_get_string_len(v);
		chars = utf8_chars(s, len);
		if (memchr(s, '\0', len))
			return sbx_buf_appendf(msg, "argument '%s' contains a NUL character", key);
		if (schema_num(prop, "minLength", &lim) && chars < lim)
			return sbx_buf_appendf(msg, "argument '%s' must not be empty", key);
		if (schema_num(prop, "maxLength", &lim) && chars > lim)
			return sbx_buf_appendf(msg,
					       "argument '%s' is too long: %zu characters, at "
					       "most %.0f",
					       key, chars, lim);
		return 0;
	}
	/* "number" */
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return sbx_buf_appendf(msg, "argument '%s' must be a number, not %s", key,
				       json_type_word(v));
	double d = json_object_get_double(v), lo = 0, hi = 0;
	bool has_lo = schema_num(prop, "exclusiveMinimum", &lo);
	bool has_hi = schema_num(prop, "maximum", &hi);
	if (!isfinite(d) || (has_lo && !(d > lo)) || (has_hi && d > hi))
		return sbx_buf_appendf(
		    msg, "argument '%s' is out of range: %g; use a number above %g and at most %g",
		    key, d, lo, hi);
	return 0;
}

/* The input schemas parsed once, shared by every thread and only read
 * (no get/put, no serialising: json-c's reference counts and string caches
 * are not thread-safe); an entry left NULL is parsed per call. */
static struct json_object *input_schemas[SBX_ARRAY_SIZE(tools)];
static pthread_once_t input_schemas_once = PTHREAD_ONCE_INIT;

static void parse_input_schemas(void)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(tools); i++)
		input_schemas[i] = parse_schema(tools[i].input_schema);
}

/* Checks ARGS (an object or NULL) against the tool's inputSchema. 0 when
 * fine, 1 with *ret_msg when not, -ENOMEM. */
static int check_arguments(const struct sbx_tool_def *t, struct json_object *args, char **ret_msg)
{
	struct json_object *schema, *owned = NULL, *props;
	struct sbx_buf msg = SBX_BUF_INIT;
	int r = 0;

	pthread_once(&input_schemas_once, parse_input_schemas);
	schema = input_schemas[t - tools];
	if (!schema)
		schema = owned = parse_schema(t->input_schema);
	if (!schema)
		return -ENOMEM;
	json_object_object_get_ex(schema, "properties", &props);
	if (args && !json_object_is_type(args, json_type_object)) {
		r = sbx_buf_appendf(&msg, "the arguments of %s must be a JSON object, not %s",
				    t->name, json_type_word(args));
		goto out;
	}
	if (args) {
		json_object_object_foreach(args, key, v)
		{
			(void)v;
			if (json_object_object_get_ex(props, key, NULL))
				continue;
			r = sbx_buf_appendf(&msg, "unknown argument '%.64s': %s takes ", key,
					    t->name);
			if (r == 0)
				r = append_names(&msg, props);
			goto out;
		}
	}
	json_object_object_foreach(props, key, prop)
	{
		struct json_object *v = NULL;
		bool required = is_required(schema, key);
		if (args)
			json_object_object_get_ex(args, key, &v);
		if (!v && !required)
			continue; /* absent or null: the default */
		if (!v && !(args && json_object_object_get_ex(args, key, NULL))) {
			const char *d =
			    json_object_get_string(json_object_object_get(prop, "description"));
			r = sbx_buf_appendf(
			    &msg, "missing required argument '%s' (%.*s)", key,
			    (int)(strlen(d) - (strlen(d) && d[strlen(d) - 1] == '.')), d);
			goto out;
		}
		r = check_value(key, prop, v, &msg);
		if (r < 0 || msg.len)
			goto out;
	}
out:
	json_object_put(owned);
	if (r < 0) {
		sbx_buf_release(&msg);
		return r;
	}
	if (!msg.len)
		return 0;
	*ret_msg = sbx_buf_steal(&msg);
	return 1;
}

/* ---- the result ---- */

int sbx_tool_fail(struct sbx_tool_out *out, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = sbx_str_vreplacef(&out->error, fmt, ap);
	va_end(ap);
	return r;
}

/* The manager's messages often say what to do already, naming a tool. */
static bool says_what_to_do(const char *msg)
{
	static const char *const advice[] = {"list_sandboxes",
					     "create_sandbox",
					     "install_package_in_sandbox",
					     "check_package_installation_status",
					     "create a new sandbox",
					     "delete_sandbox"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(advice); i++)
		if (strstr(msg, advice[i]))
			return true;
	return false;
}

/* The audit log's word for a failure with ERR (struct sbx_tool_audit). */
static const char *error_kind(const struct sbx_error *err)
{
	if (err->http_status)
		return "engine";
	switch (err->code) {
	case -EINVAL:
		return "invalid_arguments";
	case -ENOENT:
		return "not_found";
	case -EEXIST:
		return "exists";
	case -EDQUOT:
		return "quota";
	case -EBUSY:
		return "busy";
	case -EPERM:
	case -EACCES:
		return "forbidden";
	case -ETIMEDOUT:
		return "timeout";
	case -ECANCELED:
		return "cancelled";
	case -EFBIG:
	case -E2BIG:
		return "too_large";
	case -ENOSPC:
		return "no_space";
	case -ENOMEM:
		return "no_memory";
	case -EIO:
	case -EPROTO:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ENOTCONN:
	case -EPIPE:
	case -EHOSTUNREACH:
		return "engine";
	default:
		return "failed";
	}
}

void sbx_tool_audit_sandbox(const struct sbx_tool_ctx *ctx, const sbx_sandbox *sb)
{
	if (!ctx->audit || !sb)
		return;
	snprintf(ctx->audit->sandbox_id, sizeof(ctx->audit->sandbox_id), "%s", sbx_sandbox_id(sb));
	snprintf(ctx->audit->sandbox_name, sizeof(ctx->audit->sandbox_name), "%s",
		 sbx_sandbox_name(sb) ? sbx_sandbox_name(sb) : "");
}

int sbx_tool_fail_err(struct sbx_tool_out *out, const struct sbx_error *err, const char *hint)
{
	char shown[SBX_ERROR_MSG_MAX];
	const char *msg = shown;
	size_t n;

	out->error_kind = error_kind(err);
	/* The client sees no host detail of the engine; the log keeps it. */
	if (sbx_error_public(err, shown, sizeof(shown)))
		sbx_log_error("tool error: %s", err->msg);
	if (!shown[0])
		msg = "the operation failed";
	n = strlen(msg);

	/* "msg. hint", without a doubled full stop, or the advice the message has. */
	while (n > 0 && (msg[n - 1] == '.' || msg[n - 1] == ' ' || msg[n - 1] == '\n'))
		n--;
	if (!hint || says_what_to_do(msg))
		return sbx_tool_fail(out, "%.*s.", (int)n, msg);
	return sbx_tool_fail(out, "%.*s. %s", (int)n, msg, hint);
}

static void out_release(struct sbx_tool_out *out)
{
	json_object_put(out->result);
	free(out->notice);
	free(out->wake_notice);
	json_object_put(out->images);
	json_object_put(out->links);
	free(out->error);
}

static struct json_object *text_item(const char *text)
{
	struct json_object *o = json_object_new_object();
	if (!o)
		return NULL;
	if (sbx_tools_put(o, "type", json_object_new_string("text")) < 0 ||
	    sbx_tools_put(o, "text", json_object_new_string(text)) < 0)
		return json_object_put(o), NULL;
	return o;
}

struct json_object *sbx_tools_refusal(const char *message)
{
	struct json_object *res = json_object_new_object(), *content = json_object_new_array();

	if (!res || !content || sbx_tools_put(res, "content", SBX_TAKE(content)) < 0 ||
	    sbx_tools_append(json_object_object_get(res, "content"), text_item(message)) < 0 ||
	    sbx_tools_put(res, "isError", json_object_new_boolean(true)) < 0) {
		json_object_put(content);
		json_object_put(res);
		return NULL;
	}
	return res;
}

/* {content, isError, structuredContent?} from OUT. */
static int build_result(const struct sbx_tool_ctx *ctx, struct sbx_tool_out *out,
			struct json_object **ret)
{
	bool structured = sbx_tools_version_at_least(ctx->protocol_version, V_STRUCTURED);
	struct json_object *res = json_object_new_object(), *content = json_object_new_array();
	int r = 0;

	if (!res || !content) {
		json_object_put(content);
		r = -ENOMEM;
		goto fail;
	}
	r = sbx_tools_put(res, "content", content);
	if (r < 0)
		goto fail;
	if (out->error) {
		r = sbx_tools_append(content, text_item(out->error));
		r |= sbx_tools_put(res, "isError", json_object_new_boolean(true));
		if (r < 0)
			goto fail;
		*ret = res;
		return 0;
	}
	r = sbx_tools_append(
	    content, text_item(json_object_to_json_string_ext(
			 out->result, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)));
	/* The JSON first (clients of the older versions read content[0]), then
	 * what the model should see: the notice, the images, the links. */
	if (r == 0 && out->notice)
		r = sbx_tools_append(content, text_item(out->notice));
	for (size_t i = 0; r == 0 && out->images && i < json_object_array_length(out->images); i++)
		r = sbx_tools_append(content,
				     json_object_get(json_object_array_get_idx(out->images, i)));
	if (r == 0 && structured && out->links)
		for (size_t i = 0; r == 0 && i < json_object_array_length(out->links); i++)
			r = sbx_tools_append(
			    content, json_object_get(json_object_array_get_idx(out->links, i)));
	if (r == 0 && structured)
		r = sbx_tools_put(res, "structuredContent", json_object_get(out->result));
	if (r == 0)
		r = sbx_tools_put(res, "isError", json_object_new_boolean(false));
	if (r < 0)
		goto fail;
	*ret = res;
	return 0;
fail:
	json_object_put(res);
	return -ENOMEM;
}

/* What OUT tells the audit log: its error's kind, and the sandbox its
 * result names (create_sandbox's) when the call resolved none before. */
static void audit_out(const struct sbx_tool_ctx *ctx, const struct sbx_tool_out *out)
{
	struct sbx_tool_audit *a = ctx->audit;
	struct json_object *v;

	if (!a)
		return;
	if (out->error)
		a->error = out->error_kind ? out->error_kind : "invalid_arguments";
	if (a->sandbox_id[0] || !out->result ||
	    !json_object_object_get_ex(out->result, "sandbox_id", &v) ||
	    !json_object_is_type(v, json_type_string))
		return;
	snprintf(a->sandbox_id, sizeof(a->sandbox_id), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(out->result, "name", &v) &&
	    json_object_is_type(v, json_type_string))
		snprintf(a->sandbox_name, sizeof(a->sandbox_name), "%s", json_object_get_string(v));
}

bool sbx_tools_known(const char *name)
{
	for (size_t i = 0; name && i < SBX_ARRAY_SIZE(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			return true;
	return false;
}

/* OUT->wake_notice put before OUT's notice and its result's "notice". */
static int wake_notice(struct sbx_tool_out *out)
{
	struct json_object *had = json_object_object_get(out->result, "notice");
	const char *was =
	    json_object_is_type(had, json_type_string) ? json_object_get_string(had) : NULL;
	char *in_result = NULL, *text = NULL;

	if (asprintf(&in_result, "%s%s%s", out->wake_notice, was ? " " : "", was ? was : "") < 0 ||
	    asprintf(&text, "%s%s%s", out->wake_notice, out->notice ? " " : "",
		     out->notice ? out->notice : "") < 0) {
		free(in_result);
		return -ENOMEM;
	}
	struct json_object *v = json_object_new_string(in_result);

	free(in_result);
	free(out->notice);
	out->notice = text;
	return sbx_tools_put(out->result, "notice", v);
}

int sbx_tools_call(const struct sbx_tool_ctx *ctx, const char *name, struct json_object *arguments,
		   struct json_object **ret_result, struct sbx_error *err)
{
	const struct sbx_tool_def *t = NULL;
	struct sbx_tool_out out = {0};
	char *why = NULL;
	int r;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(tools); i++)
		if (name && strcmp(tools[i].name, name) == 0)
			t = &tools[i];
	if (!t)
		return sbx_error_set(err, -ENOENT,
				     "unknown tool '%.64s': tools/list gives the tool names",
				     name ? name : "");
	r = check_arguments(t, arguments, &why);
	if (r == 1) {
		r = sbx_tool_fail(&out, "%s. See the inputSchema of %s in tools/list.", why,
				  t->name);
		free(why);
	} else if (r == 0) {
		r = t->run(ctx, arguments, &out);
	}
	if (r == 0 && !out.error && !out.result)
		r = -ENOMEM;
	if (r == 0 && !out.error && out.wake_notice)
		r = wake_notice(&out);
	if (r == 0)
		audit_out(ctx, &out);
	if (r == 0)
		r = build_result(ctx, &out, ret_result);
	out_release(&out);
	if (r < 0)
		return sbx_error_set(err, r, "%s: out of memory", t->name);
	return 0;
}
