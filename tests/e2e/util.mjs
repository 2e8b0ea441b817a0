// SPDX-License-Identifier: MIT
// Helpers of the end-to-end suite: MCP clients from the official SDK, tool
// calls that parse the JSON result, raw HTTP requests for the transport checks.
// The server runs with API keys (tests/e2e/run.sh): every client and every raw
// request to /mcp and /sse sends a key, alice's (SBX_E2E_KEY) unless told
// otherwise.
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export { sleep };

function need(name) {
	const v = process.env[name];
	if (!v) throw new Error(`${name} is not set (run through tests/e2e-*.engine)`);
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
	// where its containers are: the engine's socket, or a swarm's node sockets
	engineSockets: (process.env.SBX_E2E_ENGINE_SOCKETS || process.env.SBX_E2E_ENGINE_SOCKET || '')
		.split(' ')
		.filter((x) => x),
	key: process.env.SBX_E2E_KEY || '', // tenant alice's API key: every client's
	keyBob: process.env.SBX_E2E_KEY_BOB || '', // tenant bob's (tests/e2e/tenants.mjs)
	// `SERVER -c CONFIG --set auth.keys_file=KEYS_FILE keys ...` edits the
	// running server's keys (keysCommand).
	server: process.env.SBX_E2E_SERVER || '',
	config: process.env.SBX_E2E_CONFIG || '',
	keysFile: process.env.SBX_E2E_KEYS_FILE || '',
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

// The headers that send KEY (none for an empty KEY).
export function authHeaders(key = cfg.key) {
	return key ? { Authorization: `Bearer ${key}` } : {};
}

// GET /sse with KEY in its query, as supergateway is given it.
export function sseUrlWithKey(key = cfg.key) {
	return `${cfg.base}/sse${key ? `?api_key=${encodeURIComponent(key)}` : ''}`;
}

// The legacy transport sending KEY on the stream's GET (eventSourceInit) and
// on every POST to /messages (requestInit; the server wants it on the GET
// only, the session being opened with it). SDK 1.32's EventSource fetch adds
// requestInit's headers too; the fetch given here does not rely on that.
export function sseTransport(key = cfg.key) {
	const auth = authHeaders(key);
	return new SSEClientTransport(new URL(`${cfg.base}/sse`), {
		requestInit: { headers: auth },
		eventSourceInit: {
			fetch: (url, init = {}) => {
				const headers = new Headers(init.headers);
				for (const [k, v] of Object.entries(auth)) headers.set(k, v);
				return fetch(url, { ...init, headers });
			},
		},
	});
}

export function streamableTransport(key = cfg.key) {
	return new StreamableHTTPClientTransport(new URL(`${cfg.base}/mcp`), { requestInit: { headers: authHeaders(key) } });
}

// Runs `mcp-sandboxd -c CONFIG --set auth.keys_file=... keys ARGS...` on the
// suite's keys file; returns its standard output, trimmed.
export function keysCommand(...args) {
	assert.ok(cfg.server && cfg.config && cfg.keysFile, 'SBX_E2E_SERVER, SBX_E2E_CONFIG or SBX_E2E_KEYS_FILE is not set');
	return execFileSync(cfg.server, ['-c', cfg.config, '--set', `auth.keys_file=${cfg.keysFile}`, 'keys', ...args], {
		encoding: 'utf8',
		stdio: ['ignore', 'pipe', 'pipe'],
		timeout: 30000,
	}).trim();
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

// HEADERS plus KEY's Authorization header when PATH is /mcp or /sse (the
// routes that check keys) and HEADERS send no key of their own.
function withKey(path, headers, key) {
	if (!key || !/^\/(mcp|sse)(\?|$)/.test(path)) return headers;
	if (Object.keys(headers).some((h) => ['authorization', 'x-api-key'].includes(h.toLowerCase()))) return headers;
	return { ...headers, ...authHeaders(key) };
}

// One raw HTTP request on a fresh connection (node:http, so Host and any
// path can be set as is). Resolves { status, headers, body: Buffer }.
// Requests to /mcp and /sse send KEY (alice's by default; null or '' for
// none); FROM is the local address to send from (another 127.0.0.0/8
// address is another peer to the server's count of failed keys).
export function raw({ method = 'GET', path = '/', headers = {}, body, host = '127.0.0.1', timeout = 30000, key = cfg.key, from }) {
	headers = withKey(path, headers, key);
	return new Promise((resolve, reject) => {
		let done = false;
		const opts = { host, port, method, path, headers, agent: false, setHost: !('Host' in headers || 'host' in headers) };
		if (from) opts.localAddress = from;
		const req = http.request(opts, (res) => {
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

// A raw Streamable HTTP session with KEY: initialize +
// notifications/initialized. Returns { sid, version }.
export async function rawStreamableSession(key = cfg.key) {
	const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body: initializeBody(), key });
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
		key,
	});
	assert.equal(note.status, 202, `notifications/initialized: HTTP ${note.status}`);
	return { sid, version };
}

// Opens GET /sse (PATH: with a query) and reads the endpoint event. Returns
// { endpoint, close, next() } where next() resolves the next `message`
// event's JSON; or { status, headers, body, close } for another status than
// 200. KEY and FROM as for raw().
export function rawSse(headers = {}, { key = cfg.key, from, path = '/sse' } = {}) {
	headers = withKey(path, { Accept: 'text/event-stream', ...headers }, key);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{ host: '127.0.0.1', port, method: 'GET', path, agent: false, headers, ...(from ? { localAddress: from } : {}) },
			(res) => {
				if (res.statusCode !== 200) {
					const chunks = [];
					res.on('data', (c) => chunks.push(c));
					res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), close: () => req.destroy() }));
					res.on('error', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), close: () => req.destroy() }));
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
