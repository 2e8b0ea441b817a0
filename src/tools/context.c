/* SPDX-License-Identifier: MIT */
/*
 * What a tool call's context (struct sbx_tool_ctx) says for the handlers
 * and the resources alike: the tenant it acts for, the base of its links and
 * the signed artifact links themselves. Below both, so that neither calls
 * the other for them.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "sbx/artifact.h"
#include "sbx/common.h"
#include "tools-internal.h"

const char *sbx_tool_owner(const struct sbx_tool_ctx *ctx)
{
	return ctx->owner && *ctx->owner ? ctx->owner : SBX_OWNER_DEFAULT;
}

const char *sbx_tool_public_url(const struct sbx_tool_ctx *ctx, char *buf, size_t size)
{
	if (ctx->public_url && *ctx->public_url)
		return ctx->public_url;
	if (ctx->settings->server.public_url[0])
		return ctx->settings->server.public_url;
	snprintf(buf, size, "http://%s:%lld", ctx->settings->server.listen,
		 (long long)ctx->settings->server.port);
	return buf;
}

/* The signed link to RELPATH of sandbox ID, valid for server.link_ttl from
 * now (whole seconds, rounded up); NULL on failure. Without a key (tests of
 * the tools alone) the link is unsigned. */
char *sbx_tool_artifact_link(const struct sbx_tool_ctx *ctx, const char *base, const char *id,
			     const char *relpath)
{
	int64_t ttl = (ctx->settings->server.link_ttl_ms + 999) / 1000;

	if (!ctx->link_key)
		return sbx_artifact_url(base, id, relpath);
	return sbx_artifact_link(ctx->link_key, base, id, relpath, ctx->key_id ? ctx->key_id : "",
				 (int64_t)time(NULL) + ttl);
}
