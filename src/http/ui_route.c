/* SPDX-License-Identifier: MIT */
/*
 * The page for people (issue 15): GET/HEAD /ui is src/http/ui/index.html,
 * /ui/app.js and /ui/app.css its script and style; / and /ui/ redirect to
 * /ui; any other /ui/... is 404, other methods 405. The three files are
 * compiled in (src/http/ui/ui.inc, made by tools/embed.awk at
 * build time): nothing is read from disk, nothing is fetched from elsewhere.
 *
 * The page talks MCP itself (POST /mcp with the API key in Authorization),
 * so these routes are open like /health: they hold no data. Every answer
 * carries SBX_UI_CSP: scripts, styles, images and fetches from this origin
 * only (no inline script or style, no eval), no plugins, no <base>, no form
 * posts, and no framing of the page by anyone (frame-ancestors, plus
 * X-Frame-Options for older browsers). HTML files are previewed in an
 * <iframe sandbox> through srcdoc, which needs no frame source and inherits
 * this policy (its scripts are blocked twice): frame-src 'none' lets the
 * page frame nothing else, not even this origin's URLs.
 * X-Content-Type-Options: nosniff keeps each file its declared type, and
 * Referrer-Policy: no-referrer keeps the signed links the page loads out
 * of Referer headers.
 */
#include <string.h>

#include "http-internal.h"
#include "sbx/common.h"

#include "src/http/ui/ui.inc"

/* One embedded file. */
struct ui_file {
	const char *path;
	const char *type;
	const char *body;
	size_t len;
};

#define UI_FILE(path_, type_, array_)                                                              \
	{                                                                                          \
		path_, type_, array_, sizeof(array_) - 1                                           \
	}

static const struct ui_file ui_files[] = {
    UI_FILE("/ui", "text/html; charset=utf-8", sbx_ui_index_html),
    UI_FILE("/ui/app.js", "text/javascript; charset=utf-8", sbx_ui_app_js),
    UI_FILE("/ui/app.css", "text/css; charset=utf-8", sbx_ui_app_css),
};

/* The headers of every answer on these routes (pairs, NULL-ended). */
static const char *const ui_headers[] = {
    "Content-Security-Policy",
    SBX_UI_CSP,
    "X-Content-Type-Options",
    "nosniff",
    "X-Frame-Options",
    "DENY",
    "Referrer-Policy",
    "no-referrer",
    "Cross-Origin-Opener-Policy",
    "same-origin",
    NULL,
};

bool sbx_ui_path(const char *url)
{
	return strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0;
}

/* A redirect to LOCATION (relative: the page also works under a reverse
 * proxy's path prefix). */
static enum MHD_Result redirect(struct sbx_http_request *rq, const char *location)
{
	const char *const headers[] = {
	    "Location", location, "Content-Security-Policy", SBX_UI_CSP, "X-Content-Type-Options",
	    "nosniff",	NULL};

	return sbx_http_respond(rq, MHD_HTTP_FOUND, "text/plain; charset=utf-8", location,
				strlen(location), headers);
}

enum MHD_Result sbx_ui_handle(struct sbx_http_request *rq)
{
	bool head = strcmp(rq->method, "HEAD") == 0;

	if (!head && strcmp(rq->method, "GET") != 0) {
		static const char *const allow[] = {"Allow", "GET, HEAD", NULL};
		return sbx_http_respond_error_with(rq, MHD_HTTP_METHOD_NOT_ALLOWED,
						   "method not allowed: the page is GET or HEAD",
						   allow);
	}
	if (strcmp(rq->url, "/") == 0)
		return redirect(rq, "ui");
	if (strcmp(rq->url, "/ui/") == 0)
		return redirect(rq, "../ui");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(ui_files); i++) {
		const struct ui_file *f = &ui_files[i];
		if (strcmp(rq->url, f->path) == 0)
			/* HEAD: libmicrohttpd sends the headers (with the
			 * body's Content-Length) and no body. */
			return sbx_http_respond(rq, MHD_HTTP_OK, f->type, f->body, f->len,
						ui_headers);
	}
	{
		static const char nf[] = "{\"error\":\"not found: the page is /ui\"}";
		return sbx_http_respond(rq, MHD_HTTP_NOT_FOUND, "application/json", nf,
					sizeof(nf) - 1, ui_headers);
	}
}
