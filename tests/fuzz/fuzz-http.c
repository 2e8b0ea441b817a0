/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: what the HTTP front reads from a request's line and
 * headers before anything else (src/http/): the route of the path, the Host
 * and Origin checks (DNS rebinding), host:port splitting, the Accept check,
 * the Mcp-Session-Id / session_id lookup in a session table holding one
 * session per transport, the artifact route's path (sbx_artifact_parse) and
 * percent-decoding, and a public URL (sbx_http_parse_public_url). The input
 * is one header value (up to its first NUL); the raw bytes go to the
 * functions that take a length. Checks the answers that must hold whatever
 * the input: an allowed Host names a loopback or configured host, a parsed
 * artifact path has no '/' that was escaped, a session is found only by its
 * own id.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http-internal.h"
#include "sbx/artifact.h"
#include "sbx/percent.h"
#include "sbx/settings.h"

static struct sbx_settings settings;
static struct sbx_http http;
static struct sbx_http_session *sessions[2];
static sbx_mcp *mcp;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_mcp_config cfg = {.settings = &settings};
	struct sbx_peer peer = {{0}};

	(void)argc;
	(void)argv;
	if (sbx_settings_init(&settings) < 0 ||
	    sbx_settings_set(&settings,
			     "server.allowed_origins=https://app.example.com, http://x.test:3000/",
			     &err) < 0 ||
	    sbx_mcp_new(&cfg, &mcp, &err) < 0)
		abort();
	http.settings = &settings;
	http.mcp = mcp;
	http.port = 8000;
	http.listen_host = strdup("[::1]");
	http.public_url = strdup("https://mcp.example.com:8443/base");
	if (!http.listen_host || !http.public_url || sbx_http_parse_public_url(&http) < 0 ||
	    sbx_session_table_new(&http, &http.sessions) < 0 ||
	    sbx_session_table_add(http.sessions, mcp, SBX_MCP_TRANSPORT_STREAMABLE, &peer, NULL,
				  &sessions[0], &err) < 0 ||
	    sbx_session_table_add(http.sessions, mcp, SBX_MCP_TRANSPORT_SSE, &peer, NULL,
				  &sessions[1], &err) < 0)
		abort();
	return 0;
}

static bool ieq_prefix(const char *s, size_t n, const char *word)
{
	return strlen(word) == n && strncasecmp(s, word, n) == 0;
}

static void check_host(const char *s)
{
	size_t hl = 0;

	if (!sbx_http_host_allowed(&http, s))
		return;
	/* Allowed: a loopback name, the listen host or the public host, and a
	 * port we answer on. */
	if (sbx_http_split_host_port(s, strlen(s), &hl) < 0)
		abort();
	if (!ieq_prefix(s, hl, "localhost") && !ieq_prefix(s, hl, "127.0.0.1") &&
	    !ieq_prefix(s, hl, "[::1]") && !ieq_prefix(s, hl, http.public_host))
		abort();
}

static void check_session(const char *s, size_t len)
{
	for (int i = 0; i < 2; i++) {
		enum sbx_mcp_transport t = sessions[i]->transport;
		struct sbx_http_session *found = sbx_session_table_find(http.sessions, s, t, NULL);
		char id[SBX_SESSION_ID_LEN + 1];

		if (found && (found != sessions[i] || strcmp(s, sessions[i]->id) != 0))
			abort();
		sbx_http_session_unref(found);
		/* The input over the start of a real id: the index part may
		 * match, the secret part must be compared in full. */
		memcpy(id, sessions[i]->id, sizeof(id));
		memcpy(id + SBX_SESSION_ID_INDEX, s,
		       len < SBX_SESSION_ID_LEN - SBX_SESSION_ID_INDEX
			   ? len
			   : SBX_SESSION_ID_LEN - SBX_SESSION_ID_INDEX);
		found = sbx_session_table_find(http.sessions, id, t, NULL);
		if (found && (found != sessions[i] || strcmp(id, sessions[i]->id) != 0))
			abort();
		sbx_http_session_unref(found);
	}
}

static void check_artifact(const char *s)
{
	char *id = NULL, *rel = NULL;
	const char *rest = s;

	if (sbx_http_route_of(s) == SBX_ROUTE_ARTIFACT)
		rest = s + strlen(SBX_ARTIFACT_ROUTE);
	if (sbx_artifact_parse(rest, &id, &rel) == 0) {
		if (!*id || strchr(id, '/') || !*rel)
			abort();
		free(id);
		free(rel);
	}
}

static void check_public_url(const char *s)
{
	struct sbx_http h = {.settings = &settings, .public_url = (char *)s};

	(void)sbx_http_parse_public_url(&h);
	free(h.public_host);
	free(h.public_origin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *raw = malloc(size ? size : 1), *dec = NULL;
	size_t hl, declen;

	if (!s || !raw) {
		free(s);
		free(raw);
		return 0;
	}
	memcpy(s, data, size);
	s[size] = '\0';
	memcpy(raw, data, size);

	(void)sbx_http_route_of(s);
	check_host(s);
	(void)sbx_http_origin_allowed(&http, s);
	if (sbx_http_split_host_port(raw, size, &hl) >= 0 && hl > size)
		abort();
	(void)sbx_streamable_accept_ok(s);
	(void)sbx_http_media_is(s, "application/json");
	check_session(s, strlen(s));
	check_artifact(s);
	if (sbx_percent_decode(raw, size, &dec, &declen) == 0) {
		if (declen > size || dec[declen] != '\0')
			abort();
		free(dec);
	}
	check_public_url(s);
	free(raw);
	free(s);
	return 0;
}
