/* SPDX-License-Identifier: MIT */
/*
 * What the MCP layer (src/mcp/mcp.c) shows its tests beyond include/sbx/mcp.h:
 * the hooks that reach the tools it runs (src/tools/tools.h). Internal to
 * src/ and the tests.
 */
#ifndef SBX_MCP_INTERNAL_H
#define SBX_MCP_INTERNAL_H

#include "sbx/mcp.h"
#include "tools/tools.h"

/* For tests of the MCP layer: every tools/call of M's sessions goes to FN
 * instead of sbx_tools_call (NULL restores it). Set before any session runs. */
void sbx_mcp_set_tools_call(sbx_mcp *m, sbx_tools_call_fn fn);
/* For tests: the table M counts its tool calls in (see sbx_call_table). */
sbx_call_table *sbx_mcp_call_table(sbx_mcp *m);

#endif
