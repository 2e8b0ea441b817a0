/* SPDX-License-Identifier: MIT */
/*
 * sbx_engine_events for Docker and libpod: one long-lived GET {prefix}/events
 * with filters, its newline-delimited JSON body split into bounded lines,
 * each parsed, filtered again here and handed over as a struct
 * sbx_engine_event. What the engines send (Docker 20.10, Podman 4.3.1):
 *   Docker: {"status":"die","id":ID,"from":IMAGE,"Type":"container",
 *     "Action":"die","Actor":{"ID":ID,"Attributes":{LABELS...,"exitCode":"137",
 *     "image":...,"name":...}},"scope":"local","time":S,"timeNano":NS}
 *     and on "kill" Attributes.signal "9"; "oom" before "die" on an OOM kill.
 *   libpod: the same shape; actions "died" and "remove", the exit code in
 *     Attributes.containerExitCode (on every event, meaningful on "died"),
 *     no signal on "kill", no "oom" event; label filters ORed.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine-internal.h"
#include "sbx/common.h"

static const struct sbx_events_action docker_actions[] = {
    {"start", SBX_EVENT_START}, {"die", SBX_EVENT_DIE},		{"oom", SBX_EVENT_OOM},
    {"kill", SBX_EVENT_KILL},	{"destroy", SBX_EVENT_DESTROY}, {NULL, SBX_EVENT_OPEN},
};

static const struct sbx_events_action libpod_actions[] = {
    {"start", SBX_EVENT_START}, {"died", SBX_EVENT_DIE},       {"oom", SBX_EVENT_OOM},
    {"kill", SBX_EVENT_KILL},	{"remove", SBX_EVENT_DESTROY}, {NULL, SBX_EVENT_OPEN},
};

const struct sbx_events_dialect sbx_events_docker = {
    .actions = docker_actions,
    .exit_code_key = "exitCode",
};

const struct sbx_events_dialect sbx_events_libpod = {
    .actions = libpod_actions,
    .exit_code_key = "containerExitCode",
    .stream_param = true,
};

/* ---- one line ---- */

/* A decimal integer in [lo, hi] from a JSON string or number; else dflt. */
static int64_t json_to_int(struct json_object *v, int64_t lo, int64_t hi, int64_t dflt)
{
	int64_t n;

	if (json_object_is_type(v, json_type_int)) {
		n = json_object_get_int64(v);
	} else if (json_object_is_type(v, json_type_string)) {
		const char *s = json_object_get_string(v);
		char *end;
		errno = 0;
		n = strtoll(s, &end, 10);
		if (errno || end == s || *end)
			return dflt;
	} else {
		return dflt;
	}
	return n >= lo && n <= hi ? n : dflt;
}

/* Linux's numbering, which the engines' hosts use. */
static const char *const signal_names[] = {
    NULL,   "HUP",  "INT",  "QUIT", "ILL",    "TRAP",	"ABRT",	 "BUS",	 "FPE",	 "KILL", "USR1",
    "SEGV", "USR2", "PIPE", "ALRM", "TERM",   "STKFLT", "CHLD",	 "CONT", "STOP", "TSTP", "TTIN",
    "TTOU", "URG",  "XCPU", "XFSZ", "VTALRM", "PROF",	"WINCH", "IO",	 "PWR",	 "SYS",
};

/* "9", 9, "SIGKILL" or "KILL" -> 9; 0 when unknown. */
static int signal_number(struct json_object *v)
{
	const char *s;

	if (!v)
		return 0;
	if (json_object_is_type(v, json_type_int) ||
	    (json_object_is_type(v, json_type_string) && json_object_get_string(v)[0] >= '0' &&
	     json_object_get_string(v)[0] <= '9'))
		return (int)json_to_int(v, 1, 64, 0);
	if (!json_object_is_type(v, json_type_string))
		return 0;
	s = json_object_get_string(v);
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 1; i < SBX_ARRAY_SIZE(signal_names); i++)
		if (strcasecmp(s, signal_names[i]) == 0)
			return (int)i;
	return 0;
}

static bool kind_of(const struct sbx_events_dialect *d, const char *action,
		    enum sbx_event_kind *ret)
{
	for (const struct sbx_events_action *a = d->actions; action && a->name; a++)
		if (strcmp(a->name, action) == 0) {
			*ret = a->kind;
			return true;
		}
	return false;
}

/* Every label of the spec, with its value (NULL = ""), among the attributes. */
static bool labels_match(const struct sbx_events_spec *spec, struct json_object *attrs)
{
	for (size_t i = 0; i < spec->n_labels; i++) {
		const char *want = spec->labels[i].value ? spec->labels[i].value : "";
		const char *have = sbx_json_str(attrs, spec->labels[i].key);
		if (!have || strcmp(have, want) != 0)
			return false;
	}
	return true;
}

/* 1 and *ev filled (its strings in J) when the line is an event for the spec. */
static int parse_event(struct sbx_events_parser *p, struct json_object *j,
		       struct sbx_engine_event *ev)
{
	struct json_object *actor = sbx_json_path(j, "Actor", NULL);
	struct json_object *attrs = sbx_json_path(actor, "Attributes", NULL);
	const char *type = sbx_json_str(j, "Type");
	const char *action = sbx_json_str(j, "Action");
	const char *id = sbx_json_str(actor, "ID");

	if (!json_object_is_type(j, json_type_object) || (type && strcmp(type, "container") != 0))
		return 0;
	if (!action)
		action = sbx_json_str(j, "status");
	if (!id)
		id = sbx_json_str(j, "id");
	if (!id || !*id || !kind_of(p->dialect, action, &ev->kind))
		return 0;
	if (!labels_match(p->spec, attrs))
		return 0;
	ev->container = id;
	ev->exit_code = -1;
	ev->signal = 0;
	if (ev->kind == SBX_EVENT_DIE)
		ev->exit_code = (int)json_to_int(
		    sbx_json_path(attrs, p->dialect->exit_code_key, NULL), 0, 255, -1);
	if (ev->kind == SBX_EVENT_KILL)
		ev->signal = signal_number(sbx_json_path(attrs, "signal", NULL));
	ev->time_ns = json_to_int(sbx_json_path(j, "timeNano", NULL), 1, INT64_MAX, 0);
	if (!ev->time_ns) {
		int64_t s =
		    json_to_int(sbx_json_path(j, "time", NULL), 1, INT64_MAX / 1000000000, 0);
		ev->time_ns = s * 1000000000;
	}
	return 1;
}

/* Where the tokener stopped. */
static size_t tokener_end(struct json_tokener *tok)
{
#if JSON_C_VERSION_NUM >= 0x000f00
	return json_tokener_get_parse_end(tok);
#else
	return (size_t)tok->char_offset;
#endif
}

/* One line (no newline): 0 when skipped or delivered, else negative. */
static int events_line(struct sbx_events_parser *p, const char *s, size_t n)
{
	struct sbx_engine_event ev = {0};
	struct json_object *j;
	int r;

	while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (!n)
		return 0;
	json_tokener_reset(p->tok);
	j = json_tokener_parse_ex(p->tok, s, (int)n);
	/* Only a whole line that is one JSON value. */
	if (!j || json_tokener_get_error(p->tok) != json_tokener_success ||
	    tokener_end(p->tok) != n || parse_event(p, j, &ev) != 1) {
		json_object_put(j);
		return 0;
	}
	if (p->spec->stopped && p->spec->stopped(p->spec->userdata)) {
		p->stopped = true;
		r = -ECANCELED;
	} else {
		r = p->spec->on_event(p->spec->userdata, &ev);
		if (r < 0)
			p->callback_failed = true;
		else
			r = 0;
	}
	json_object_put(j);
	return r;
}

/* ---- the line splitter ---- */

int sbx_events_parser_init(struct sbx_events_parser *p, const struct sbx_events_dialect *d,
			   const struct sbx_events_spec *spec)
{
	memset(p, 0, sizeof(*p));
	p->dialect = d;
	p->spec = spec;
	p->tok = json_tokener_new();
	return p->tok ? 0 : -ENOMEM;
}

void sbx_events_parser_release(struct sbx_events_parser *p)
{
	if (p->tok)
		json_tokener_free(p->tok);
	p->tok = NULL;
	sbx_buf_release(&p->line);
}

static int line_too_long(struct sbx_error *err)
{
	return sbx_error_set(err, -EPROTO, "the engine's events stream sent a line over %u bytes",
			     SBX_EVENTS_LINE_MAX);
}

int sbx_events_parser_feed(struct sbx_events_parser *p, const void *data, size_t len,
			   struct sbx_error *err)
{
	const char *s = data;

	while (len) {
		const char *nl = memchr(s, '\n', len);
		size_t take = nl ? (size_t)(nl - s) : len;
		int r;

		if (p->line.len + take > SBX_EVENTS_LINE_MAX)
			return line_too_long(err);
		if (!nl) {
			/* A partial line: keep it for the next chunk. */
			if (sbx_buf_append(&p->line, s, take) < 0)
				return sbx_error_set(err, -ENOMEM, "out of memory");
			return 0;
		}
		if (p->line.len) {
			if (sbx_buf_append(&p->line, s, take) < 0)
				return sbx_error_set(err, -ENOMEM, "out of memory");
			r = events_line(p, p->line.data, p->line.len);
			sbx_buf_reset(&p->line);
		} else {
			r = events_line(p, s, take);
		}
		if (r < 0)
			return r;
		s += take + 1;
		len -= take + 1;
	}
	return 0;
}

/* ---- the request ---- */

struct events_call {
	struct sbx_events_parser parser;
	struct sbx_error *err;
	bool sink_failed; /* the parser ended the transfer (err filled unless a callback did) */
};

static int events_sink(void *userdata, const void *data, size_t len)
{
	struct events_call *c = userdata;
	int r = sbx_events_parser_feed(&c->parser, data, len, c->err);

	c->sink_failed = r < 0;
	return r;
}

/* The engine accepted the request: SBX_EVENT_OPEN, before any event. */
static int events_open(void *userdata, long status)
{
	struct events_call *c = userdata;
	const struct sbx_events_spec *spec = c->parser.spec;
	struct sbx_engine_event ev = {.kind = SBX_EVENT_OPEN, .exit_code = -1};
	int r = spec->on_event(spec->userdata, &ev);

	(void)status;
	if (r < 0)
		c->parser.callback_failed = true;
	return r < 0 ? r : 0;
}

static bool events_stopped(void *userdata)
{
	struct events_call *c = userdata;
	const struct sbx_events_spec *spec = c->parser.spec;

	if (!c->parser.stopped && spec->stopped && spec->stopped(spec->userdata))
		c->parser.stopped = true;
	return c->parser.stopped;
}

/* {"type":["container"],"event":[actions],"label":["k=v",...]} */
static struct json_object *events_filters(const struct sbx_events_dialect *d,
					  const struct sbx_events_spec *spec)
{
	struct json_object *f = json_object_new_object();
	struct json_object *type = json_object_new_array();
	struct json_object *event = json_object_new_array();
	struct json_object *label = json_object_new_array();
	bool ok = f && type && event && label;

	for (const struct sbx_events_action *a = d->actions; ok && a->name; a++)
		ok = json_object_array_add(event, json_object_new_string(a->name)) == 0;
	for (size_t i = 0; ok && i < spec->n_labels; i++) {
		_cleanup_free_ char *kv = NULL;
		const char *v = spec->labels[i].value;
		ok = asprintf(&kv, "%s=%s", spec->labels[i].key, v ? v : "") >= 0 &&
		     json_object_array_add(label, json_object_new_string(kv)) == 0;
	}
	ok = ok && json_object_array_add(type, json_object_new_string("container")) == 0;
	if (ok) {
		json_object_object_add(f, "type", type);
		json_object_object_add(f, "event", event);
		json_object_object_add(f, "label", label);
		return f;
	}
	json_object_put(f);
	json_object_put(type);
	json_object_put(event);
	json_object_put(label);
	return NULL;
}

static int events_check_spec(const struct sbx_events_spec *spec, struct sbx_error *err)
{
	if (spec->n_labels && !spec->labels)
		return sbx_error_set(err, -EINVAL, "events: %zu labels but no array",
				     spec->n_labels);
	for (size_t i = 0; i < spec->n_labels; i++)
		if (!spec->labels[i].key || !*spec->labels[i].key ||
		    strchr(spec->labels[i].key, '='))
			return sbx_error_set(
			    err, -EINVAL, "events: label %zu has an empty key or one with '='", i);
	return 0;
}

int sbx_events_follow(sbx_engine *e, const struct sbx_events_dialect *d,
		      const struct sbx_events_spec *spec, struct sbx_error *err)
{
	_cleanup_json_ struct json_object *filters = NULL;
	_cleanup_free_ char *path = NULL;
	struct events_call c = {.err = err};
	struct sbx_rest_response resp;
	struct sbx_rest_request req = {
	    .method = "GET",
	    .sink = events_sink,
	    .sink_data = &c,
	    .timeout_ms = -1,
	    .on_head = events_open,
	    .abort = events_stopped,
	};
	const char *f;
	int r = events_check_spec(spec, err);

	if (r < 0)
		return r;
	filters = events_filters(d, spec);
	f = filters ? json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN) : NULL;
	if (f)
		path = d->stream_param ? sbx_engine_path(e, "/events?stream=true&filters=%s", f)
				       : sbx_engine_path(e, "/events?filters=%s", f);
	if (!path || sbx_events_parser_init(&c.parser, d, spec) < 0) {
		sbx_events_parser_release(&c.parser);
		return sbx_error_set(err, -ENOMEM, "out of memory");
	}
	req.path = path;
	r = sbx_rest_call(e->rest, &req, &resp, err);
	if (c.parser.stopped) {
		/* Asked to stop: whatever ended the transfer, that is a success. */
		sbx_error_clear(err);
		r = 0;
	} else if (r < 0 && c.parser.callback_failed) {
		sbx_error_set(err, r, "events: the event callback ended the stream (%d)", r);
	} else if (r < 0 && !c.sink_failed) {
		sbx_error_prefix(err, "the engine's events stream broke");
	} else if (r >= 0) {
		r = sbx_rest_check(&resp, NULL, err);
		if (r >= 0)
			r = sbx_error_set(err, -EPIPE, "the engine's events stream ended");
	}
	sbx_rest_response_release(&resp);
	sbx_events_parser_release(&c.parser);
	return r;
}
