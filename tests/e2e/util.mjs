// SPDX-License-Identifier: MIT
// Helpers of the end-to-end suite: MCP clients from the official SDK, tool
// calls that parse the JSON result, raw HTTP requests for the transport checks.
import assert from 'node:assert/strict';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export { sleep };

function need(name) {
	const v = process.env[name];
	if (!v) throw new Error(`${name} is not set (run through tests/e2e-*.test)`);
	return v;
}

export const cfg = {
	base: need('SBX_E2E_URL').replace(/\/+$/, ''), // http://127.0.0.1:PORT
	uploadDir: need('SBX_E2E_UPLOAD_DIR'),
	tmp: need('SBX_E2E_TMP'),
	gateway: process.env.SBX_E2E_GATEWAY || '',
	maxBody: Number(process.env.SBX_E2E_MAX_BODY || 65536),
	allowedOrigin: process.env.SBX_E2E_ALLOWED_ORIGIN || '',
	engine: process.env.SBX_E2E_ENGINE || '?',
	engineSocket: process.env.SBX_E2E_ENGINE_SOCKET || '', // the engine's unix socket
};
export const port = Number(new URL(cfg.base).port);

// The seed's seven tools and delete_sandbox: exact names, every parameter, the required ones.
export const TOOLS = {
	create_sandbox: { params: ['name'], required: [] },
	list_sandboxes: { params: [], required: [] },
	execute_python_code: { params: ['sandbox_id', 'code', 'timeout'], required: ['sandbox_id', 'code'] },
	install_package_in_sandbox: { params: ['sandbox_id', 'package_name'], required: ['sandbox_id', 'package_name'] },
	check_package_installation_status: {
		params: ['sandbox_id', 'package_name'],
		required: ['sandbox_id', 'package_name'],
	},
	execute_terminal_command: { params: ['sandbox_id', 'command', 'timeout'], required: ['sandbox_id', 'command'] },
	upload_file_to_sandbox: {
		params: ['sandbox_id', 'local_file_path', 'dest_path'],
		required: ['sandbox_id', 'local_file_path'],
	},
	delete_sandbox: { params: ['sandbox_id'], required: ['sandbox_id'] },
};

const CLIENT_INFO = { name: 'mcp-sandbox-e2e', version: '1.0.0' };

export function sseTransport() {
	return new SSEClientTransport(new URL(`${cfg.base}/sse`));
}

export function streamableTransport() {
	return new StreamableHTTPClientTransport(new URL(`${cfg.base}/mcp`));
}

// A connected client (initialize + notifications/initialized done).
export async function connect(transport, name = CLIENT_INFO.name) {
	const client = new Client({ ...CLIENT_INFO, name }, { capabilities: {} });
	await client.connect(transport);
	return client;
}

// Ends a client; a Streamable HTTP session is deleted first.
export async function disconnect(client) {
	if (!client) return;
	const t = client.transport;
	try {
		if (t instanceof StreamableHTTPClientTransport && t.sessionId) await t.terminateSession();
	} catch {
		/* the close below still runs */
	}
	await client.close().catch(() => {});
}

// tools/call; returns { result, text, json, isError }. json is the parsed
// first text item (every tool answers with one JSON object), or undefined.
export async function call(client, name, args, timeout = 120000) {
	const result = await client.callTool({ name, arguments: args }, undefined, { timeout });
	const item = (result.content || []).find((c) => c.type === 'text');
	const text = item ? item.text : undefined;
	let json;
	try {
		json = JSON.parse(text);
	} catch {
		json = undefined;
	}
	return { result, text, json, isError: result.isError === true };
}

// A call that must succeed: not isError, a JSON object in the text, and the
// same object in structuredContent when that is present.
export async function callOk(client, name, args, timeout) {
	const r = await call(client, name, args, timeout);
	assert.ok(!r.isError, `${name} failed: ${r.text}`);
	assert.ok(r.json && typeof r.json === 'object', `${name}: the text is no JSON object: ${r.text}`);
	if (r.result.structuredContent !== undefined)
		assert.deepEqual(r.result.structuredContent, r.json, `${name}: structuredContent differs from the text`);
	return r.json;
}

// A call that must be a tool error (isError: true) with a message.
export async function callErr(client, name, args, what) {
	const r = await call(client, name, args);
	assert.equal(r.isError, true, `${what || name}: expected isError, got ${r.text}`);
	assert.ok(r.text && r.text.length > 0, `${what || name}: the error has no text`);
	return r;
}

export function sandboxIdOf(json) {
	const id = json.sandbox_id ?? json.id ?? json.sandbox?.sandbox_id ?? json.sandbox?.id;
	assert.equal(typeof id, 'string', `no sandbox id in ${JSON.stringify(json)}`);
	assert.ok(id.length > 0);
	return id;
}

export async function createSandbox(client, name) {
	const json = await callOk(client, 'create_sandbox', name === undefined ? {} : { name });
	return sandboxIdOf(json);
}

// Installs PKG and polls its status until it is installed; returns the
// statuses seen.
export async function installAndWait(client, sid, pkg, limitMs = 180000) {
	const first = await callOk(client, 'install_package_in_sandbox', { sandbox_id: sid, package_name: pkg });
	assert.ok(['installing', 'success', 'installed'].includes(first.status), `install status: ${JSON.stringify(first)}`);
	const seen = [first.status];
	const end = Date.now() + limitMs;
	for (;;) {
		const st = await callOk(client, 'check_package_installation_status', { sandbox_id: sid, package_name: pkg });
		if (seen[seen.length - 1] !== st.status) seen.push(st.status);
		if (st.status === 'success' || st.status === 'installed') return seen;
		assert.notEqual(st.status, 'failed', `installing ${pkg} failed: ${JSON.stringify(st)}`);
		assert.ok(['installing', 'not_installed'].includes(st.status), `unknown status: ${JSON.stringify(st)}`);
		assert.ok(Date.now() < end, `${pkg} still not installed after ${limitMs} ms: ${JSON.stringify(st)}`);
		await sleep(500);
	}
}

// One raw HTTP request on a fresh connection (node:http, so Host and any
// path can be set as is). Resolves { status, headers, body: Buffer }.
export function raw({ method = 'GET', path = '/', headers = {}, body, host = '127.0.0.1', timeout = 30000 }) {
	return new Promise((resolve, reject) => {
		let done = false;
		const req = http.request({ host, port, method, path, headers, agent: false, setHost: !('Host' in headers || 'host' in headers) }, (res) => {
			const chunks = [];
			res.on('data', (c) => chunks.push(c));
			res.on('end', () => {
				done = true;
				resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) });
			});
			res.on('error', (e) => {
				if (!done) reject(e);
			});
		});
		req.setTimeout(timeout, () => req.destroy(new Error(`${method} ${path}: no answer in ${timeout} ms`)));
		req.on('error', (e) => {
			// A server may answer (413) and close before it read the body.
			if (!done) reject(e);
		});
		if (body !== undefined) req.write(body);
		req.end();
	});
}

export const JSON_HEADERS = {
	'Content-Type': 'application/json',
	Accept: 'application/json, text/event-stream',
};

// The JSON-RPC messages of a Streamable HTTP answer (JSON or SSE).
export function messagesOf(res) {
	const type = String(res.headers['content-type'] || '');
	const text = res.body.toString('utf8');
	if (type.startsWith('text/event-stream')) {
		const out = [];
		for (const frame of text.split(/\r?\n\r?\n/)) {
			const data = frame
				.split(/\r?\n/)
				.filter((l) => l.startsWith('data:'))
				.map((l) => l.slice(5).replace(/^ /, ''))
				.join('\n');
			if (data) out.push(JSON.parse(data));
		}
		return out;
	}
	if (text.trim() === '') return [];
	const v = JSON.parse(text);
	return Array.isArray(v) ? v : [v];
}

export function initializeBody(id = 1, version = '2025-06-18') {
	return JSON.stringify({
		jsonrpc: '2.0',
		id,
		method: 'initialize',
		params: { protocolVersion: version, capabilities: {}, clientInfo: CLIENT_INFO },
	});
}

// A raw Streamable HTTP session: initialize + notifications/initialized.
// Returns { sid, version }.
export async function rawStreamableSession() {
	const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body: initializeBody() });
	assert.equal(res.status, 200, `initialize: HTTP ${res.status} ${res.body}`);
	const sid = res.headers['mcp-session-id'];
	assert.ok(sid, 'initialize set no Mcp-Session-Id');
	assert.match(sid, /^[\x21-\x7e]+$/, 'the session id is visible ASCII');
	const [msg] = messagesOf(res);
	const version = msg.result.protocolVersion;
	const note = await raw({
		method: 'POST',
		path: '/mcp',
		headers: { ...JSON_HEADERS, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version },
		body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
	});
	assert.equal(note.status, 202, `notifications/initialized: HTTP ${note.status}`);
	return { sid, version };
}

// Opens GET /sse and reads the endpoint event. Returns { endpoint, close,
// next() } where next() resolves the next `message` event's JSON.
export function rawSse(headers = {}) {
	return new Promise((resolve, reject) => {
		const req = http.request(
			{ host: '127.0.0.1', port, method: 'GET', path: '/sse', agent: false, headers: { Accept: 'text/event-stream', ...headers } },
			(res) => {
				if (res.statusCode !== 200) {
					res.resume();
					resolve({ status: res.statusCode, headers: res.headers, close: () => req.destroy() });
					return;
				}
				let buf = '';
				let rawText = '';
				let endpoint;
				const queue = [];
				const waiters = [];
				res.setEncoding('utf8');
				res.on('data', (chunk) => {
					buf += chunk;
					rawText += chunk;
					let i;
					while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
						const frame = buf.slice(0, i);
						buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
						let event = 'message';
						const data = [];
						for (const line of frame.split(/\r?\n/)) {
							if (line.startsWith('event:')) event = line.slice(6).trim();
							else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
						}
						if (data.length === 0) continue; // a comment (keepalive)
						if (event === 'endpoint' && endpoint === undefined) {
							endpoint = data.join('\n');
							req.setTimeout(0);
							resolve({
								status: 200,
								headers: res.headers,
								endpoint,
								close: () => req.destroy(),
								raw: () => rawText,
								next: (ms = 10000) =>
									new Promise((ok, ko) => {
										if (queue.length) return ok(queue.shift());
										const t = setTimeout(() => ko(new Error('no SSE message in time')), ms);
										waiters.push((m) => {
											clearTimeout(t);
											ok(m);
										});
									}),
							});
						} else if (event === 'message') {
							const m = JSON.parse(data.join('\n'));
							if (waiters.length) waiters.shift()(m);
							else queue.push(m);
						}
					}
				});
				res.on('error', () => {});
			},
		);
		req.on('error', (e) => reject(e));
		req.setTimeout(15000, () => req.destroy(new Error('GET /sse: no endpoint event in 15 s')));
		req.end();
	});
}
