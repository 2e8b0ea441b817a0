/* SPDX-License-Identifier: MIT */
/*
 * The page for people (src/http/ui_route.c) from an in-process server on
 * 127.0.0.1 with API keys (no engine needed): /ui, /ui/app.js and
 * /ui/app.css each with its content type and the headers that keep it safe
 * (the Content-Security-Policy SBX_UI_CSP, nosniff, no framing), HEAD, the
 * redirects of / and /ui/, 404 for any other /ui/... (with the same
 * headers), 405 for other methods, 403 for a foreign Host; the page needs
 * no key, /mcp still does; the page's own requests (Origin
 * http://127.0.0.1:PORT or http://localhost:PORT, the key in Authorization)
 * pass the Origin check, a foreign Origin does not. And what the served
 * files must never hold: inline scripts, styles or event handlers, markup
 * built from strings (innerHTML and kin), eval, third-party URLs, the key
 * in a URL or in localStorage. tests/ui-docker.engine drives the page in a
 * browser.
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http/http-internal.h"
#include "sbx/auth.h"
#include "sbx/common.h"
#include "sbx/engine.h"
#include "sbx/http.h"
#include "sbx/mcp.h"
#include "sbx/sandbox.h"
#include "http-client.h"
#include "tap.h"

#define HS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Checks the headers every answer of the page's routes carries. */
static void expect_page_headers(const struct reply *r, const char *what)
{
	const char *csp = header_of(r, "Content-Security-Policy");

	if (!tap_ok(csp && strcmp(csp, SBX_UI_CSP) == 0,
		    "%s: Content-Security-Policy is the page's", what))
		tap_diag("  got %s", csp ? csp : "(none)");
	tap_ok(csp && strstr(csp, "default-src 'self'") && strstr(csp, "frame-ancestors 'none'") &&
		   strstr(csp, "script-src 'self'") && strstr(csp, "frame-src 'none'") &&
		   !strstr(csp, "unsafe-"),
	       "%s: the policy holds default-src 'self', frame-ancestors 'none', frame-src "
	       "'none', no unsafe-*",
	       what);
	tap_is_str(header_of(r, "X-Content-Type-Options"), "nosniff",
		   "%s: X-Content-Type-Options: nosniff", what);
	tap_is_str(header_of(r, "X-Frame-Options"), "DENY", "%s: X-Frame-Options: DENY", what);
}

/* A file of the page: status 200, TYPE, the headers; its body (taken). */
static struct sbx_buf get_file(const char *path, const char *type)
{
	struct reply r = request("GET", path, NULL, NULL);
	struct sbx_buf body = SBX_BUF_INIT;
	char what[64];

	snprintf(what, sizeof(what), "GET %s", path);
	tap_is_int(r.status, 200, "%s -> 200", what);
	tap_is_str(header_of(&r, "Content-Type"), type, "%s: Content-Type %s", what, type);
	expect_page_headers(&r, what);
	body = r.body;
	r.body = (struct sbx_buf)SBX_BUF_INIT;
	reply_release(&r);
	return body;
}

static void test_files(struct sbx_buf *html, struct sbx_buf *js, struct sbx_buf *css)
{
	struct reply r;
	char len[32];

	*html = get_file("/ui", "text/html; charset=utf-8");
	tap_ok(
	    html->data && strstr(html->data, "<script src=\"ui/app.js\"") &&
		strstr(html->data, "href=\"ui/app.css\""),
	    "GET /ui: the page loads ui/app.js and ui/app.css (relative: a proxy's prefix works)");
	*js = get_file("/ui/app.js", "text/javascript; charset=utf-8");
	tap_ok(js->data && strstr(js->data, "Authorization: \"Bearer \" + this.key"),
	       "GET /ui/app.js: the script sends the key as Authorization: Bearer");
	*css = get_file("/ui/app.css", "text/css; charset=utf-8");
	tap_ok(css->len > 0, "GET /ui/app.css: %zu bytes", css->len);

	r = request("HEAD", "/ui", NULL, NULL);
	snprintf(len, sizeof(len), "%zu", html->len);
	tap_is_int(r.status, 200, "HEAD /ui -> 200");
	tap_is_str(header_of(&r, "Content-Length"), len, "HEAD /ui: Content-Length of the page");
	tap_ok(r.body.len == 0, "HEAD /ui: no body");
	expect_page_headers(&r, "HEAD /ui");
	reply_release(&r);
}

static void test_routes(void)
{
	static const char *const unknown[] = {
	    "/ui/nope",	  "/ui/app.jsx", "/ui/app.js/",	    "/ui/index.html", "/ui/%61pp.js",
	    "/ui/ui.inc", "/ui//app.js", "/ui/app.css.map", "/ui/APP.JS",
	};
	struct reply r;

	r = request("GET", "/", NULL, NULL);
	tap_is_int(r.status, 302, "GET / -> 302");
	tap_is_str(header_of(&r, "Location"), "ui", "GET /: Location: ui (the page)");
	reply_release(&r);
	r = request("GET", "/ui/", NULL, NULL);
	tap_is_int(r.status, 302, "GET /ui/ -> 302");
	tap_is_str(header_of(&r, "Location"), "../ui", "GET /ui/: Location: ../ui");
	reply_release(&r);

	for (size_t i = 0; i < SBX_ARRAY_SIZE(unknown); i++) {
		char what[64];
		r = request("GET", unknown[i], NULL, NULL);
		snprintf(what, sizeof(what), "GET %s", unknown[i]);
		tap_is_int(r.status, 404, "%s -> 404", what);
		if (i == 0)
			expect_page_headers(&r, what);
		reply_release(&r);
	}
	r = request("GET", "/uix", NULL, NULL);
	tap_is_int(r.status, 404, "GET /uix -> 404 (not the page)");
	reply_release(&r);

	r = request("POST", "/ui", HS("Content-Type: text/plain"), "x");
	tap_is_int(r.status, 405, "POST /ui -> 405");
	tap_is_str(header_of(&r, "Allow"), "GET, HEAD", "POST /ui: Allow: GET, HEAD");
	reply_release(&r);
	r = request("DELETE", "/ui/app.js", NULL, NULL);
	tap_is_int(r.status, 405, "DELETE /ui/app.js -> 405");
	reply_release(&r);

	r = request("GET", "/ui", HS("Host: evil.example"), NULL);
	tap_is_int(r.status, 403, "GET /ui with Host: evil.example -> 403 (DNS rebinding)");
	reply_release(&r);
	r = request("GET", "/ui", HS("Origin: http://evil.example"), NULL);
	tap_is_int(r.status, 403, "GET /ui with Origin: http://evil.example -> 403");
	reply_release(&r);

	tap_ok(sbx_http_route_of("/ui") == SBX_ROUTE_UI &&
		   sbx_http_route_of("/ui/app.js") == SBX_ROUTE_UI &&
		   sbx_http_route_of("/") == SBX_ROUTE_UI &&
		   sbx_http_route_of("/uix") == SBX_ROUTE_NONE &&
		   sbx_http_route_of("/mcp") == SBX_ROUTE_MCP,
	       "routes: /, /ui and /ui/... are the page's; /uix and /mcp are not");
}

/* The page's own requests: POST /mcp with the Origin a browser sends for
 * it and the key in Authorization. */
static void test_same_origin(const char *key)
{
	char auth[160], origin[96], local[96];
	struct reply r;

	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
	snprintf(origin, sizeof(origin), "Origin: http://127.0.0.1:%u", http_target.port);
	snprintf(local, sizeof(local), "Origin: http://localhost:%u", http_target.port);

	r = request("GET", "/ui", NULL, NULL);
	tap_is_int(r.status, 200, "keys on: GET /ui needs no key");
	reply_release(&r);
	r = request("POST", "/mcp", HS(ACCEPT_BOTH, CT_JSON, origin), init_body);
	tap_is_int(r.status, 401, "keys on: the page's initialize without a key -> 401");
	reply_release(&r);
	r = request("POST", "/mcp", HS(ACCEPT_BOTH, CT_JSON, origin, auth), init_body);
	tap_is_int(r.status, 200, "the page at http://127.0.0.1:PORT/ui: its initialize -> 200");
	tap_ok(header_of(&r, "Mcp-Session-Id") != NULL, "... with an Mcp-Session-Id");
	reply_release(&r);
	r = request("POST", "/mcp", HS(ACCEPT_BOTH, CT_JSON, local, auth), init_body);
	tap_is_int(r.status, 200, "the page at http://localhost:PORT/ui: its initialize -> 200");
	reply_release(&r);
	r = request("POST", "/mcp", HS(ACCEPT_BOTH, CT_JSON, "Origin: http://evil.example", auth),
		    init_body);
	tap_is_int(r.status, 403, "a page elsewhere (Origin: http://evil.example) -> 403");
	reply_release(&r);
}

/* True when S holds an attribute whose name starts with "on" (an inline
 * event handler): whitespace, "on", letters, '='. */
static bool has_event_attribute(const char *s)
{
	for (const char *p = s; (p = strstr(p, "on")) != NULL; p += 2) {
		const char *q = p + 2;
		if (p == s || !isspace((unsigned char)p[-1]))
			continue;
		while (isalpha((unsigned char)*q))
			q++;
		if (q > p + 2 && *q == '=')
			return true;
	}
	return false;
}

/* Every <script in S has a src. */
static bool scripts_external(const char *s)
{
	for (const char *p = s; (p = strstr(p, "<script")) != NULL; p++) {
		const char *end = strchr(p, '>');
		const char *src = strstr(p, " src=");
		if (!end || !src || src > end)
			return false;
	}
	return true;
}

static void test_contents(const struct sbx_buf *html, const struct sbx_buf *js,
			  const struct sbx_buf *css)
{
	static const char *const js_never[] = {
	    "innerHTML",      "outerHTML", "insertAdjacentHTML",
	    "document.write", "eval(",	   "new Function",
	    "localStorage",   "api_key",   "setAttribute(\"on",
	    "javascript:",
	};
	const char *files[] = {html->data, js->data, css->data};
	const char *names[] = {"index.html", "app.js", "app.css"};

	if (!html->data || !js->data || !css->data) {
		tap_bail("the page's files were not served");
		return;
	}
	tap_ok(scripts_external(html->data), "index.html: every <script> has a src (none inline)");
	tap_ok(!strstr(html->data, "<style") && !strstr(html->data, " style="),
	       "index.html: no <style> element or style attribute");
	tap_ok(!has_event_attribute(html->data), "index.html: no inline event handler (on...=)");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(js_never); i++)
		tap_ok(!strstr(js->data, js_never[i]), "app.js: no %s", js_never[i]);
	tap_ok(strstr(js->data, "sessionStorage") != NULL,
	       "app.js: the key is kept in sessionStorage");
	tap_ok(strstr(js->data, "frame.setAttribute(\"sandbox\", \"\")") != NULL &&
		   !strstr(js->data, "allow-scripts") && !strstr(js->data, "allow-same-origin"),
	       "app.js: HTML previews in an <iframe sandbox> with no allow-scripts or "
	       "allow-same-origin");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(files); i++)
		tap_ok(!strstr(files[i], "http://") && !strstr(files[i], "https://") &&
			   !strstr(files[i], "@import") && !strstr(files[i], "url("),
		       "%s: no absolute URL, @import or url() (nothing from elsewhere)", names[i]);
}

int main(void)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_buf html = SBX_BUF_INIT, js = SBX_BUF_INIT, css = SBX_BUF_INIT;
	char dir[] = "/tmp/test-ui.XXXXXX", keys[128], set[192], key[SBX_API_KEY_LEN + 1];
	struct sbx_settings s;
	sbx_engine *engine = NULL;
	sbx_manager *manager = NULL;
	sbx_auth *auth = NULL;
	sbx_mcp *mcp = NULL;
	sbx_http *http = NULL;

	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (!mkdtemp(dir))
		tap_bail("mkdtemp");
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	if (sbx_keys_add(keys, "alice", NULL, 0, key, &err) < 0)
		tap_bail(err.msg);
	snprintf(set, sizeof(set), "auth.keys_file=%s", keys);
	if (sbx_settings_init(&s) < 0 ||
	    sbx_settings_set(&s, "server.listen=127.0.0.1", &err) < 0 ||
	    sbx_settings_set(&s, "server.port=0", &err) < 0 ||
	    sbx_settings_set(&s, set, &err) < 0 ||
	    sbx_settings_set(&s, "engine.socket=unix:///nonexistent/mcp-sandbox-test.sock", &err) <
		0)
		tap_bail(err.msg[0] ? err.msg : "settings");
	{
		struct sbx_engine_config ec = {
		    .type = s.engine.type, .url = s.engine.socket, .timeout_ms = 2000};
		if (sbx_engine_open(&ec, &engine, &err) < 0 ||
		    sbx_manager_new(&s, engine, &manager, &err) < 0)
			tap_bail(err.msg);
	}
	if (sbx_auth_open(&s, &auth, &err) < 0)
		tap_bail(err.msg);
	{
		const struct sbx_mcp_config mc = {.settings = &s, .manager = manager};
		if (sbx_mcp_new(&mc, &mcp, &err) < 0)
			tap_bail(err.msg);
	}
	{
		const struct sbx_http_config hc = {
		    .settings = &s, .mcp = mcp, .manager = manager, .auth = auth};
		if (sbx_http_start(&hc, &http, &err) < 0)
			tap_bail(err.msg);
	}
	http_use(sbx_http_port(http), false);

	test_files(&html, &js, &css);
	test_routes();
	test_same_origin(key);
	test_contents(&html, &js, &css);

	sbx_buf_release(&html);
	sbx_buf_release(&js);
	sbx_buf_release(&css);
	sbx_http_stop(http);
	sbx_mcp_free(mcp);
	sbx_auth_free(auth);
	sbx_manager_free(manager);
	sbx_engine_free(engine);
	sbx_settings_release(&s);
	unlink(keys);
	rmdir(dir);
	curl_global_cleanup();
	return tap_done();
}
