// SPDX-License-Identifier: MIT
// The reference server of `make bench`: the official MCP TypeScript SDK's
// McpServer behind its StreamableHTTPServerTransport in stateful mode (one
// transport per session, found by the Mcp-Session-Id header), on node:http,
// as the SDK's own examples set it up. It offers one trivial tool so that
// `tools` is advertised; the bench only sends `ping` to it.
//   node ts-reference.mjs [PORT]   (0 = any free port, the default)
// Prints "ts-reference: listening on http://127.0.0.1:PORT" once ready;
// stops on SIGTERM/SIGINT. SBX_REF_JSON=1 (the default) answers requests
// with application/json; SBX_REF_JSON=0 keeps the SDK default (an SSE
// stream per request).
import http from 'node:http';
import { randomUUID } from 'node:crypto';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const port = Number(process.argv[2] || 0);
const jsonResponse = (process.env.SBX_REF_JSON ?? '1') !== '0';
const MAX_BODY = 4 << 20;
const transports = new Map();

function newServer() {
	const server = new McpServer({ name: 'ts-reference', version: '1.0.0' });
	server.registerTool('echo', { description: 'Returns its text.' }, async () => ({
		content: [{ type: 'text', text: 'ok' }],
	}));
	return server;
}

function fail(res, status, message) {
	res.writeHead(status, { 'Content-Type': 'application/json' });
	res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

function readBody(req) {
	return new Promise((resolve, reject) => {
		const chunks = [];
		let size = 0;
		req.on('data', (c) => {
			size += c.length;
			if (size > MAX_BODY) {
				reject(new Error('body too large'));
				req.destroy();
			} else chunks.push(c);
		});
		req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
		req.on('error', reject);
	});
}

async function handle(req, res) {
	if (new URL(req.url, 'http://x').pathname !== '/mcp') return fail(res, 404, 'not found');
	const sid = req.headers['mcp-session-id'];
	if (req.method === 'POST') {
		let body;
		try {
			body = JSON.parse(await readBody(req));
		} catch {
			return fail(res, 400, 'bad JSON');
		}
		let transport = sid ? transports.get(sid) : undefined;
		if (!transport) {
			if (sid || !isInitializeRequest(body)) return fail(res, sid ? 404 : 400, 'no valid session');
			transport = new StreamableHTTPServerTransport({
				sessionIdGenerator: () => randomUUID(),
				enableJsonResponse: jsonResponse,
				onsessioninitialized: (id) => transports.set(id, transport),
			});
			transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
			await newServer().connect(transport);
		}
		return transport.handleRequest(req, res, body);
	}
	const transport = sid && transports.get(sid);
	if (!transport) return fail(res, 400, 'no valid session');
	return transport.handleRequest(req, res);
}

const httpServer = http.createServer((req, res) => {
	handle(req, res).catch((e) => {
		if (!res.headersSent) fail(res, 500, String(e?.message || e));
		else res.end();
	});
});
httpServer.keepAliveTimeout = 60000;
httpServer.listen(port, '127.0.0.1', () => {
	console.log(`ts-reference: listening on http://127.0.0.1:${httpServer.address().port}`);
});
for (const sig of ['SIGTERM', 'SIGINT'])
	process.on(sig, () => {
		httpServer.closeAllConnections?.();
		httpServer.close(() => process.exit(0));
		setTimeout(() => process.exit(0), 2000).unref();
	});
