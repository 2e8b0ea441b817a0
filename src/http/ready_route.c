/* SPDX-License-Identifier: MIT */
/*
 * GET /ready (src/http/server.c routes it, and answers GET /health itself):
 * whether the engine answers and the keys file can be used, for a load
 * balancer or an orchestrator. The client is told what is wrong in words
 * without the host's engine socket or address; the log has the detail,
 * once per reason and at most once a READY_LOG_MS while it stays.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "http-internal.h"
#include "sbx/log.h"

/* Logs why the engine is not ready (the detail the client is not shown):
 * when the reason changes, and at most once a READY_LOG_MS while it stays. */
#define READY_LOG_MS 60000
static void ready_log(struct sbx_http *h, const struct sbx_error *err)
{
	int64_t now = sbx_monotonic_ms();
	bool say;

	pthread_mutex_lock(&h->ready_log_lock);
	say = strcmp(h->ready_logged, err->msg) != 0 || now - h->ready_logged_ms >= READY_LOG_MS;
	if (say) {
		snprintf(h->ready_logged, sizeof(h->ready_logged), "%s", err->msg);
		h->ready_logged_ms = now;
	}
	pthread_mutex_unlock(&h->ready_log_lock);
	if (say)
		sbx_log_warn("not ready: %s", err->msg);
}

/* GET /ready: 200 when the engine answers, else 503 saying why, in words
 * without the host's engine socket or address (sbx_error_public; the log
 * has them). The server itself is alive: that is GET /health. */
enum MHD_Result sbx_ready_handle(struct sbx_http_request *rq)
{
	static const char *const retry[] = {"Retry-After", "5", NULL};
	struct sbx_error err = SBX_ERROR_INIT;
	char shown[SBX_ERROR_MSG_MAX];
	struct json_object *o;
	enum MHD_Result ret;
	const char *t;
	int r;

	struct sbx_error auth_err = SBX_ERROR_INIT;
	int auth_r = sbx_auth_status(rq->http->auth, &auth_err);

	r = sbx_manager_check_engine(rq->http->manager, &err);
	if (r < 0 && sbx_error_public(&err, shown, sizeof(shown)))
		ready_log(rq->http, &err);
	o = json_object_new_object();
	if (!o)
		return MHD_NO;
	json_object_object_add(
	    o, "status", json_object_new_string(r < 0 || auth_r < 0 ? "unavailable" : "ready"));
	json_object_object_add(o, "engine", json_object_new_string(r < 0 ? shown : "ok"));
	/* The keys file's trouble is the operator's to see (the log has the
	 * path and line); the response says only that no key is accepted. */
	if (auth_r < 0) {
		ready_log(rq->http, &auth_err);
		json_object_object_add(
		    o, "auth",
		    json_object_new_string("the keys file cannot be used: no API key is accepted "
					   "until it is mended (the server's log says why)"));
	}
	if (auth_r < 0)
		r = auth_r;
	t = json_object_to_json_string_ext(o,
					   JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	ret = sbx_http_respond(rq, r < 0 ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
			       "application/json", t, strlen(t), r < 0 ? retry : NULL);
	json_object_put(o);
	return ret;
}
