// SPDX-License-Identifier: MIT
// Case 5: the HTTP rules of both transports, with raw requests.
import assert from 'node:assert/strict';

import { check } from './tap.mjs';
import { JSON_HEADERS, authHeaders, cfg, initializeBody, messagesOf, port, raw, rawSse, rawStreamableSession } from './util.mjs';

const PING = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' });

function jsonError(res) {
	const text = res.body.toString('utf8');
	let v;
	try {
		v = JSON.parse(text);
	} catch {
		assert.fail(`HTTP ${res.status}: body is no JSON: ${text.slice(0, 200)}`);
	}
	assert.ok(v.error, `no JSON-RPC error in ${text.slice(0, 200)}`);
	return v;
}

export async function httpCase() {
	const t = (name) => `http: ${name}`;

	await check(t('GET /health is 200'), async () => {
		const res = await raw({ path: '/health' });
		assert.equal(res.status, 200);
	});
	await check(t('GET /ready is 200: the engine answers'), async () => {
		const res = await raw({ path: '/ready' });
		assert.equal(res.status, 200, `HTTP ${res.status} ${res.body}`);
		assert.deepEqual(JSON.parse(res.body.toString('utf8')), { status: 'ready', engine: 'ok' });
	});
	await check(t('/mcp: malformed JSON is 400 with -32700 and id null'), async () => {
		for (const body of ['{"jsonrpc": "2.0", "id": 1, "method": ', 'not json at all', '\u0000\u0001']) {
			const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body });
			assert.equal(res.status, 400, `${JSON.stringify(body)}: HTTP ${res.status}`);
			const v = jsonError(res);
			assert.equal(v.error.code, -32700);
			assert.equal(v.id, null);
		}
	});
	await check(t('/mcp: a JSON value that is no JSON-RPC message is 400 with -32600'), async () => {
		const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body: '{"hello": "world"}' });
		assert.equal(res.status, 400);
		assert.equal(jsonError(res).error.code, -32600);
	});
	await check(t('/mcp: a wrong Content-Type is 415'), async () => {
		for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
			const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Content-Type': type }, body: initializeBody() });
			assert.equal(res.status, 415, `${type}: HTTP ${res.status}`);
		}
	});
	await check(t('/mcp: an Accept without text/event-stream is 406'), async () => {
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, Accept: 'application/json' }, body: initializeBody() });
		assert.equal(res.status, 406);
	});
	const session = await check(t('/mcp: a raw initialize sets Mcp-Session-Id; initialized is 202'), async () => rawStreamableSession());
	await check(t('/mcp: a ping on the session is answered'), async () => {
		assert.ok(session, 'no session from the previous step');
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Mcp-Session-Id': session.sid, 'MCP-Protocol-Version': session.version }, body: PING });
		assert.equal(res.status, 200);
		const [m] = messagesOf(res);
		assert.equal(m.id, 7);
		assert.deepEqual(m.result, {});
	});
	await check(t('/mcp: a second initialize on a live session is refused'), async () => {
		assert.ok(session, 'no session');
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Mcp-Session-Id': session.sid }, body: initializeBody(9) });
		if (res.status === 200) {
			const [m] = messagesOf(res);
			assert.ok(m.error, `second initialize answered ${JSON.stringify(m)}`);
		} else assert.ok(res.status >= 400 && res.status < 500, `HTTP ${res.status}`);
	});
	await check(t('/mcp: an unsupported MCP-Protocol-Version header is 400'), async () => {
		assert.ok(session, 'no session');
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Mcp-Session-Id': session.sid, 'MCP-Protocol-Version': '1999-01-01' }, body: PING });
		assert.equal(res.status, 400);
	});
	await check(t('/mcp: an unknown session is 404'), async () => {
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Mcp-Session-Id': 'no-such-session-e2e-0123456789' }, body: PING });
		assert.equal(res.status, 404);
	});
	// Node's fetch (the SDK's transport) sends a body without waiting for
	// 100-continue: a refusal from the headers must reach it while it is still
	// sending (the server lingers), not as EPIPE or a reset. Each outcome is
	// counted; every one must be the status.
	await check(t("Node's fetch: refusals of big bodies arrive, never EPIPE (401 x3, 404 x5, 413 x10)"), async () => {
		const big = Buffer.alloc(3 * 1024 * 1024, 0x20);
		const huge = Buffer.alloc(40 * 1024 * 1024, 0x20);
		// server.max_body is 64k here: a 404 needs a body within it
		const fits = Buffer.alloc(Math.min(cfg.maxBody, 60000), 0x20);
		const url = `${cfg.base}/mcp`;
		const runs = [
			// without credentials: 3 only (each counts against 127.0.0.1's failed logins)
			[401, 3, { ...JSON_HEADERS }, big],
			[404, 5, { ...JSON_HEADERS, ...authHeaders(), 'Mcp-Session-Id': 'no-such-session-e2e-0123456789' }, fits],
			[413, 7, { ...JSON_HEADERS, ...authHeaders() }, big],
			[413, 3, { ...JSON_HEADERS, ...authHeaders() }, huge],
		];
		const bad = [];
		for (const [want, times, headers, body] of runs) {
			for (let i = 0; i < times; i++) {
				try {
					const res = await fetch(url, { method: 'POST', headers, body });
					await res.arrayBuffer();
					if (res.status !== want) bad.push(`${want}: got HTTP ${res.status}`);
					else if ((res.headers.get('connection') || '').toLowerCase() !== 'close') bad.push(`${want}: no Connection: close`);
				} catch (e) {
					bad.push(`${want}: ${e.message}${e.cause ? ` (${e.cause.code || e.cause.message})` : ''}`);
				}
			}
		}
		assert.deepEqual(bad, [], `${bad.length} of 18 refusals did not arrive: ${bad.join('; ')}`);
	});
	await check(t('/mcp: a request without a session is 400'), async () => {
		const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body: PING });
		assert.equal(res.status, 400);
	});
	await check(t('/mcp: a foreign Origin is 403'), async () => {
		for (const origin of ['http://evil.example', `http://evil.example:${port}`, 'null']) {
			const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, Origin: origin }, body: initializeBody() });
			assert.equal(res.status, 403, `Origin ${origin}: HTTP ${res.status}`);
		}
	});
	await check(t('/mcp: an Origin in server.allowed_origins is accepted'), async () => {
		assert.ok(cfg.allowedOrigin, 'SBX_E2E_ALLOWED_ORIGIN is not set');
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, Origin: cfg.allowedOrigin }, body: initializeBody() });
		assert.equal(res.status, 200, `Origin ${cfg.allowedOrigin}: HTTP ${res.status}`);
		const sid = res.headers['mcp-session-id'];
		if (sid) await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sid, Origin: cfg.allowedOrigin } });
	});
	await check(t('/mcp: a bad Host is 403'), async () => {
		for (const host of [`evil.example:${port}`, 'evil.example', `127.0.0.1.evil.example:${port}`]) {
			const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, Host: host }, body: initializeBody() });
			assert.equal(res.status, 403, `Host ${host}: HTTP ${res.status}`);
		}
	});
	await check(t('/mcp: the server\'s own Host names are accepted'), async () => {
		for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
			const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, Host: host }, body: initializeBody() });
			assert.equal(res.status, 200, `Host ${host}: HTTP ${res.status}`);
			const sid = res.headers['mcp-session-id'];
			if (sid) await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sid } });
		}
	});
	await check(t(`/mcp: a body over server.max_body (${cfg.maxBody}) is 413`), async () => {
		const pad = 'x'.repeat(cfg.maxBody + 16 * 1024);
		const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { pad } });
		const res = await raw({ method: 'POST', path: '/mcp', headers: JSON_HEADERS, body });
		assert.equal(res.status, 413);
	});
	await check(t('/mcp: DELETE ends the session, which is then 404'), async () => {
		const s = await rawStreamableSession();
		const del = await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': s.sid } });
		assert.ok(del.status === 200 || del.status === 204, `DELETE: HTTP ${del.status}`);
		const res = await raw({ method: 'POST', path: '/mcp', headers: { ...JSON_HEADERS, 'Mcp-Session-Id': s.sid, 'MCP-Protocol-Version': s.version }, body: PING });
		assert.equal(res.status, 404);
		const again = await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': s.sid } });
		assert.equal(again.status, 404, 'a second DELETE');
	});
	await check(t('/mcp: other methods are 405 with Allow'), async () => {
		for (const method of ['PUT', 'PATCH']) {
			const res = await raw({ method, path: '/mcp', headers: JSON_HEADERS, body: PING });
			assert.equal(res.status, 405, `${method}: HTTP ${res.status}`);
			const allow = String(res.headers.allow || '');
			for (const m of ['GET', 'POST', 'DELETE']) assert.ok(allow.includes(m), `Allow: ${allow} lacks ${m}`);
		}
	});

	// The legacy transport.
	const sse = await check(t('GET /sse: text/event-stream, no-cache, an endpoint event with a relative URL'), async () => {
		const s = await rawSse();
		assert.equal(s.status, 200);
		assert.match(String(s.headers['content-type']), /^text\/event-stream/);
		assert.match(String(s.headers['cache-control']), /no-cache/);
		assert.match(s.endpoint, /^\/messages\?session_id=[\x21-\x7e]+$/);
		return s;
	});
	try {
		await check(t('/messages: bad JSON on a live session is 400'), async () => {
			assert.ok(sse, 'no SSE stream');
			const res = await raw({ method: 'POST', path: sse.endpoint, headers: { 'Content-Type': 'application/json' }, body: '{"jsonrpc":' });
			assert.equal(res.status, 400);
		});
		await check(t('/messages: a request is 202 and its answer comes on the stream'), async () => {
			assert.ok(sse, 'no SSE stream');
			const res = await raw({ method: 'POST', path: sse.endpoint, headers: { 'Content-Type': 'application/json' }, body: initializeBody(3, '2024-11-05') });
			assert.equal(res.status, 202);
			const m = await sse.next();
			assert.equal(m.id, 3);
			assert.equal(m.result.protocolVersion, '2024-11-05');
			assert.equal(m.result.capabilities.tools !== undefined, true);
		});
		await check(t('/messages: a 2024-11-05 session gets no fields newer than its version'), async () => {
			assert.ok(sse, 'no SSE stream');
			const post = (body) => raw({ method: 'POST', path: sse.endpoint, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
			assert.equal((await post({ jsonrpc: '2.0', method: 'notifications/initialized' })).status, 202);
			assert.equal((await post({ jsonrpc: '2.0', id: 4, method: 'tools/list' })).status, 202);
			const list = await sse.next();
			assert.equal(list.id, 4);
			assert.ok(list.result.tools.length >= 7, `${list.result.tools.length} tools`);
			for (const tool of list.result.tools) {
				assert.equal(tool.outputSchema, undefined, `${tool.name} has an outputSchema`);
				assert.equal(tool.title, undefined, `${tool.name} has a title`);
			}
			assert.equal((await post({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'list_sandboxes', arguments: {} } })).status, 202);
			const res = await sse.next(30000);
			assert.equal(res.id, 5);
			assert.equal(res.result.structuredContent, undefined, 'structuredContent in a 2024-11-05 session');
			assert.equal(res.result.content[0].type, 'text');
			assert.ok(JSON.parse(res.result.content[0].text).sandboxes, res.result.content[0].text);
		});
		await check(t('GET /sse: every frame is "event: NAME", "data: ONE LINE", a blank line'), async () => {
			assert.ok(sse, 'no SSE stream');
			const text = sse.raw();
			assert.ok(!text.includes('\0'), `a NUL byte in the stream: ${JSON.stringify(text.slice(0, 300))}`);
			assert.ok(text.endsWith('\n\n'), `the stream does not end with a blank line: ${JSON.stringify(text.slice(-80))}`);
			for (const frame of text.slice(0, -2).split('\n\n')) {
				if (frame.startsWith(':')) continue; // a keepalive comment
				assert.match(frame, /^event: (endpoint|message)\ndata: [^\n]+$/, `frame ${JSON.stringify(frame.slice(0, 200))}`);
			}
		});
		await check(t('/messages: an unknown session is 404, a missing one 400'), async () => {
			const unknown = await raw({ method: 'POST', path: '/messages?session_id=no-such-session-e2e', headers: { 'Content-Type': 'application/json' }, body: PING });
			assert.equal(unknown.status, 404);
			const missing = await raw({ method: 'POST', path: '/messages', headers: { 'Content-Type': 'application/json' }, body: PING });
			assert.equal(missing.status, 400);
		});
		await check(t('/messages: a foreign Origin and a bad Host are 403'), async () => {
			assert.ok(sse, 'no SSE stream');
			const o = await raw({ method: 'POST', path: sse.endpoint, headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example' }, body: PING });
			assert.equal(o.status, 403, 'Origin');
			const h = await raw({ method: 'POST', path: sse.endpoint, headers: { 'Content-Type': 'application/json', Host: 'evil.example' }, body: PING });
			assert.equal(h.status, 403, 'Host');
		});
		await check(t('GET /sse: a foreign Origin and a bad Host are 403'), async () => {
			const o = await rawSse({ Origin: 'http://evil.example' });
			o.close();
			assert.equal(o.status, 403, 'Origin');
			const h = await rawSse({ Host: `evil.example:${port}` });
			h.close();
			assert.equal(h.status, 403, 'Host');
		});
	} finally {
		sse?.close();
	}
	await check(t('an unknown path is 404'), async () => {
		const res = await raw({ path: '/no-such-route-e2e' });
		assert.equal(res.status, 404);
	});
}
