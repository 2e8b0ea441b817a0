-- SPDX-License-Identifier: MIT
-- wrk script of `make bench`: every request is a JSON-RPC `ping` POSTed to
-- /mcp on one Streamable HTTP session, whose id comes in $SBX_SESSION (the
-- bench opens the session with curl first). Same script for mcp-sandboxd and
-- the TypeScript SDK reference server.
wrk.method = "POST"
wrk.path = "/mcp"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Mcp-Session-Id"] = os.getenv("SBX_SESSION")
wrk.headers["MCP-Protocol-Version"] = os.getenv("SBX_PROTOCOL") or "2025-06-18"
