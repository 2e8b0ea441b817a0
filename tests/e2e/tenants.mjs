// SPDX-License-Identifier: MIT
// Case 9: API keys and tenants on the real server (issue 13). Tenants alice
// (SBX_E2E_KEY, the suite's) and bob (SBX_E2E_KEY_BOB), each through the
// official SDK client over both transports: bob's list does not show alice's
// sandbox, every tool on it from bob, by id and by name, answers exactly as
// for a sandbox that does not exist, and it is untouched afterwards; the
// same name in both tenants is two sandboxes; another tenant's session is
// 404. Then 401s through real HTTP: no key, a wrong or unknown key, a key
// revoked with `mcp-sandboxd keys revoke` while the server runs, the key in
// the wrong place (?api_key= on /mcp), answered before a body is read; the
// SDK client without a key and supergateway with a wrong ?api_key= do not
// connect. A key's egress_allow reaches the relays of its tenant's sandboxes
// through the program (issue 14).
//
// The server slows an address down after 10 failed keys a minute (429): the
// raw refusals come from other loopback addresses (127.0.0.N, one per
// group), so 127.0.0.1, which the rest of the suite uses, sees at most the
// three failures of the SDK and supergateway checks.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { check, diag } from './tap.mjs';
import {
	JSON_HEADERS,
	call,
	callErr,
	callOk,
	cfg,
	connect,
	createSandbox,
	disconnect,
	installAndWait,
	initializeBody,
	keysCommand,
	messagesOf,
	port,
	raw,
	rawSse,
	rawStreamableSession,
	sleep,
	sseTransport,
	sseUrlWithKey,
	streamableTransport,
} from './util.mjs';

const t = (name) => `tenants: ${name}`;
const ALICE_BOX = 'e2e-tenant-alice';
const SAME_NAME = 'e2e-tenant-same';
const UNKNOWN = 'e2e-tenant-no-such-box';
const CHALLENGE = 'Bearer realm="mcp-sandbox"';
const INVALID = 'Bearer realm="mcp-sandbox", error="invalid_token"';
const PING = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' });

// The tools that take a sandbox, with arguments that would change it.
function toolArgs(ref, uploadFile) {
	return [
		['execute_python_code', { sandbox_id: ref, code: "secret = 0\nopen('/tmp/bob-e2e.txt', 'w').write('bob')" }],
		['execute_terminal_command', { sandbox_id: ref, command: 'echo bob > /tmp/bob-e2e.txt' }],
		['install_package_in_sandbox', { sandbox_id: ref, package_name: 'sbxdemo' }],
		['check_package_installation_status', { sandbox_id: ref, package_name: 'sbxdemo' }],
		['upload_file_to_sandbox', { sandbox_id: ref, local_file_path: uploadFile, dest_path: '/tmp/bob-upload-e2e.txt' }],
		['reset_python_interpreter', { sandbox_id: ref }],
		['delete_sandbox', { sandbox_id: ref }],
	];
}

// A key that is ALICE's with its last hex digit changed.
function wrongKey(key) {
	const last = key.slice(-1);
	return key.slice(0, -1) + (last === '0' ? '1' : '0');
}

// A 401 as the server sends it: the challenge (with error="invalid_token"
// when a key was SENT), a JSON body with an error, never the key itself.
function is401(res, sent, what) {
	assert.equal(res.status, 401, `${what}: HTTP ${res.status} ${res.body}`);
	assert.equal(res.headers['www-authenticate'], sent ? INVALID : CHALLENGE, `${what}: WWW-Authenticate`);
	const text = res.body.toString('utf8');
	let v;
	try {
		v = JSON.parse(text);
	} catch {
		assert.fail(`${what}: the body is no JSON: ${text.slice(0, 200)}`);
	}
	assert.ok(typeof v.error === 'string' && v.error.length > 0, `${what}: no error in ${text}`);
	for (const k of [cfg.key, cfg.keyBob]) assert.ok(!text.includes(k.slice(4)), `${what}: the body holds a key`);
}

// An initialize POSTed to /mcp; KEY, FROM, HEADERS and PATH as for raw().
function initialize({ key, from, headers = {}, path: p = '/mcp' }) {
	return raw({ method: 'POST', path: p, headers: { ...JSON_HEADERS, ...headers }, body: initializeBody(), key, from });
}

// Sends the headers of a POST to /mcp that announce a body of LENGTH bytes,
// and no body. Resolves { status, headers, ms } once the answer starts.
function headersOnly(length, from) {
	return new Promise((resolve, reject) => {
		const t0 = Date.now();
		const req = http.request({
			host: '127.0.0.1',
			port,
			method: 'POST',
			path: '/mcp',
			localAddress: from,
			agent: false,
			headers: { ...JSON_HEADERS, 'Content-Length': String(length) },
		});
		req.on('response', (res) => {
			resolve({ status: res.statusCode, headers: res.headers, ms: Date.now() - t0 });
			res.resume();
			req.destroy();
		});
		req.on('error', (e) => reject(e));
		req.setTimeout(15000, () => req.destroy(new Error(`no answer within 15 s to headers announcing ${length} bytes`)));
		req.flushHeaders();
	});
}

// Polls FN (an HTTP status) until it is WANT, at most TRIES times every
// EVERY ms; returns { status, ms }.
async function until(fn, want, tries, every) {
	const t0 = Date.now();
	let status;
	for (let i = 0; i < tries; i++) {
		if (i > 0) await sleep(every);
		status = await fn();
		if (status === want) break;
	}
	return { status, ms: Date.now() - t0 };
}

async function isolation(alice, aliceSse, bobs) {
	const uploadFile = path.join(cfg.uploadDir, 'tenant-bob-e2e.txt');
	writeFileSync(uploadFile, 'from bob\n');

	const aid = await check(t(`alice creates ${ALICE_BOX} and leaves state in it`), async () => {
		const id = await createSandbox(alice, ALICE_BOX);
		const py = await callOk(alice, 'execute_python_code', { sandbox_id: id, code: 'secret = 41\nprint("set")' });
		assert.equal(py.stdout, 'set\n', JSON.stringify(py));
		const sh = await callOk(alice, 'execute_terminal_command', { sandbox_id: id, command: 'echo alice > /tmp/owner-e2e.txt' });
		assert.equal(sh.exit_code, 0, JSON.stringify(sh));
		return id;
	});
	if (!aid) return;

	for (const [label, client] of [
		['Streamable HTTP', alice],
		['SSE', aliceSse],
	])
		await check(t(`alice's list_sandboxes over ${label} shows ${ALICE_BOX}`), async () => {
			const list = await callOk(client, 'list_sandboxes', {});
			const mine = list.sandboxes.filter((s) => s.sandbox_id === aid);
			assert.equal(mine.length, 1, JSON.stringify(list));
			assert.equal(mine[0].name, ALICE_BOX);
		});
	for (const [label, bob] of bobs)
		await check(t(`bob's list_sandboxes over ${label} does not show alice's sandbox`), async () => {
			const list = await callOk(bob, 'list_sandboxes', {});
			assert.ok(Array.isArray(list.sandboxes), JSON.stringify(list));
			const seen = list.sandboxes.filter((s) => s.sandbox_id === aid || s.name === ALICE_BOX);
			assert.deepEqual(seen, [], JSON.stringify(list));
		});

	// Each tool from bob, on alice's sandbox by id and by name: the very
	// answer a sandbox that does not exist gets (the reference differs).
	for (const [label, bob] of bobs) {
		const unknown = Object.fromEntries(await Promise.all(toolArgs(UNKNOWN, uploadFile).map(async ([name, args]) => [name, (await call(bob, name, args)).text])));
		for (const [name] of toolArgs(aid, uploadFile)) {
			await check(t(`bob's ${name} over ${label} on alice's sandbox, by id and by name: no such sandbox`), async () => {
				const base = unknown[name];
				assert.ok(base && base.includes(`no sandbox "${UNKNOWN}"`), `${name} on an unknown sandbox: ${base}`);
				for (const ref of [aid, ALICE_BOX]) {
					const args = Object.fromEntries(toolArgs(ref, uploadFile))[name];
					const r = await callErr(bob, name, args, `${name} on ${ref}`);
					assert.ok(r.text.includes(`no sandbox "${ref}"`), `${name} on ${ref}: ${r.text}`);
					assert.equal(r.text, base.replaceAll(UNKNOWN, ref), `${name} on ${ref}: not the answer for an unknown sandbox`);
				}
			});
		}
	}

	await check(t("alice's sandbox is untouched: running, its Python state and files as she left them, nothing of bob's"), async () => {
		const list = await callOk(aliceSse, 'list_sandboxes', {});
		const mine = list.sandboxes.filter((s) => s.sandbox_id === aid);
		assert.equal(mine.length, 1, `alice's sandbox is gone: ${JSON.stringify(list)}`);
		assert.equal(mine[0].status, 'running', JSON.stringify(mine[0]));
		const py = await callOk(aliceSse, 'execute_python_code', { sandbox_id: aid, code: 'print(secret + 1)' });
		assert.equal(py.stdout, '42\n', `the interpreter was reset or its state changed: ${JSON.stringify(py)}`);
		const sh = await callOk(aliceSse, 'execute_terminal_command', {
			sandbox_id: ALICE_BOX,
			command: 'cat /tmp/owner-e2e.txt; ls /tmp/bob-e2e.txt /tmp/bob-upload-e2e.txt 2>/dev/null; python3 -c "import sbxdemo" 2>/dev/null && echo installed; true',
		});
		assert.equal(sh.stdout, 'alice\n', JSON.stringify(sh));
		const st = await callOk(aliceSse, 'check_package_installation_status', { sandbox_id: aid, package_name: 'sbxdemo' });
		assert.notEqual(st.status, 'installed', JSON.stringify(st));
		assert.notEqual(st.status, 'installing', JSON.stringify(st));
		assert.notEqual(st.status, 'success', JSON.stringify(st));
	});
}

async function sameName(alice, aliceSse, bobHttp, bobSse) {
	const ids = await check(t(`the name ${SAME_NAME} in both tenants: two sandboxes`), async () => {
		const a = await createSandbox(aliceSse, SAME_NAME);
		const b = await createSandbox(bobHttp, SAME_NAME);
		assert.notEqual(a, b);
		return { a, b };
	});
	if (!ids) return;
	await check(t(`${SAME_NAME} by name reaches each tenant's own sandbox; each list has its own`), async () => {
		await callOk(alice, 'execute_terminal_command', { sandbox_id: SAME_NAME, command: 'echo alice > /tmp/who' });
		await callOk(bobSse, 'execute_terminal_command', { sandbox_id: SAME_NAME, command: 'echo bob > /tmp/who' });
		for (const [who, client, id] of [
			['alice', aliceSse, ids.a],
			['bob', bobHttp, ids.b],
		]) {
			const r = await callOk(client, 'execute_terminal_command', { sandbox_id: id, command: 'cat /tmp/who' });
			assert.equal(r.stdout, `${who}\n`, `${who}'s sandbox: ${JSON.stringify(r)}`);
			const list = await callOk(client, 'list_sandboxes', {});
			const named = list.sandboxes.filter((s) => s.name === SAME_NAME);
			assert.deepEqual(
				named.map((s) => s.sandbox_id),
				[id],
				`${who}'s list: ${JSON.stringify(list)}`,
			);
		}
	});
	await check(t(`bob deletes his ${SAME_NAME} by name; alice's stays`), async () => {
		await callOk(bobSse, 'delete_sandbox', { sandbox_id: SAME_NAME });
		await callErr(bobHttp, 'execute_terminal_command', { sandbox_id: ids.b, command: 'true' }, "bob's deleted sandbox");
		const r = await callOk(alice, 'execute_terminal_command', { sandbox_id: SAME_NAME, command: 'cat /tmp/who' });
		assert.equal(r.stdout, 'alice\n', JSON.stringify(r));
	});
}

async function sessions() {
	await check(t("alice's Mcp-Session-Id with bob's key is 404, like an unknown session; with hers, 200"), async () => {
		const s = await rawStreamableSession(cfg.key);
		const headers = { ...JSON_HEADERS, 'Mcp-Session-Id': s.sid, 'MCP-Protocol-Version': s.version };
		const bob = await raw({ method: 'POST', path: '/mcp', headers, body: PING, key: cfg.keyBob });
		assert.equal(bob.status, 404, `bob: HTTP ${bob.status} ${bob.body}`);
		const bobDel = await raw({ method: 'DELETE', path: '/mcp', headers, key: cfg.keyBob });
		assert.equal(bobDel.status, 404, `bob's DELETE: HTTP ${bobDel.status}`);
		const alice = await raw({ method: 'POST', path: '/mcp', headers, body: PING });
		assert.equal(alice.status, 200, `alice: HTTP ${alice.status} ${alice.body}`);
		assert.deepEqual(messagesOf(alice)[0].result, {});
		await raw({ method: 'DELETE', path: '/mcp', headers });
	});
}

async function refusals() {
	await check(t('the key is taken as X-API-Key on /mcp and as ?api_key= on GET /sse'), async () => {
		const res = await initialize({ key: null, headers: { 'X-API-Key': cfg.key } });
		assert.equal(res.status, 200, `X-API-Key: HTTP ${res.status} ${res.body}`);
		const sid = res.headers['mcp-session-id'];
		if (sid) await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sid } });
		const s = await rawSse({}, { key: null, path: `/sse?api_key=${encodeURIComponent(cfg.key)}` });
		s.close();
		assert.equal(s.status, 200, `?api_key=: HTTP ${s.status} ${s.body}`);
		assert.match(s.endpoint, /^\/messages\?session_id=/);
	});
	await check(t('no key: POST /mcp, DELETE /mcp and GET /sse are 401 with the Bearer challenge'), async () => {
		const from = '127.0.0.2';
		is401(await initialize({ key: null, from }), false, 'POST /mcp');
		is401(await raw({ method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': 'e2e-any' }, key: null, from }), false, 'DELETE /mcp');
		is401(await rawSse({}, { key: null, from }), false, 'GET /sse');
	});
	await check(t('a wrong or unknown key is 401 with error="invalid_token", in each of its places'), async () => {
		const from = '127.0.0.3';
		const wrong = wrongKey(cfg.key);
		is401(await initialize({ key: wrong, from }), true, 'Bearer, a last digit off');
		is401(await initialize({ key: null, from, headers: { 'X-API-Key': wrong } }), true, 'X-API-Key, a last digit off');
		is401(await rawSse({}, { key: null, from, path: `/sse?api_key=${encodeURIComponent(wrong)}` }), true, 'GET /sse?api_key=, a last digit off');
		is401(await initialize({ key: `msk_000000000000_${'0'.repeat(64)}`, from }), true, 'an unknown key id');
		is401(await initialize({ key: cfg.key.slice(0, -1), from }), true, 'a key cut short');
	});
	await check(t('the key in the wrong place: ?api_key= on /mcp is 401'), async () => {
		const from = '127.0.0.4';
		const q = `?api_key=${encodeURIComponent(cfg.key)}`;
		is401(await initialize({ key: null, from, path: `/mcp${q}` }), false, 'POST /mcp?api_key=');
		is401(await raw({ path: `/mcp${q}`, headers: { Accept: 'text/event-stream' }, key: null, from }), false, 'GET /mcp?api_key=');
	});
	await check(t('a 401 comes before the body: headers announcing 1 GiB or 60 kB and no body are answered at once'), async () => {
		const from = '127.0.0.5';
		for (const length of [1 << 30, 60000]) {
			const res = await headersOnly(length, from);
			assert.equal(res.status, 401, `Content-Length ${length}: HTTP ${res.status} (1 GiB over server.max_body would be 413)`);
			assert.equal(res.headers['www-authenticate'], CHALLENGE);
			assert.ok(res.ms < 3000, `Content-Length ${length}: answered after ${res.ms} ms`);
		}
	});

	// A key added and revoked while the server runs.
	let carol;
	const carolSession = await check(t('a key added by `mcp-sandboxd keys add` while the server runs works within a few seconds'), async () => {
		carol = keysCommand('add', 'carol');
		assert.match(carol, /^msk_[0-9a-f]{12}_[0-9a-f]{64}$/, 'keys add printed no key');
		const got = await until(async () => (await initialize({ key: carol, from: '127.0.0.6' })).status, 200, 8, 750);
		assert.equal(got.status, 200, `the new key: HTTP ${got.status} after ${got.ms} ms`);
		diag(`carol's new key accepted after ${got.ms} ms`);
		return rawStreamableSession(carol);
	});
	// Carol's SDK client over SSE, with a sandbox and a file link of hers.
	const carolSse = await check(t("carol's SDK client over SSE makes a sandbox and a file: a link that names her key"), async () => {
		const client = await connect(sseTransport(carol), 'e2e-tenants-carol');
		const sid = await createSandbox(client, 'e2e-tenant-carol');
		const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: "open('c.txt','w').write('carol')" });
		const f = (r.files || []).find((x) => x.path.endsWith('c.txt'));
		assert.ok(f, `no file c.txt in ${JSON.stringify(r)}`);
		const u = new URL(f.url);
		assert.equal(u.searchParams.get('kid'), carol.slice(4, 16), `the link ${f.url} does not name carol's key id`);
		const got = await raw({ path: `${u.pathname}${u.search}`, key: '' });
		assert.equal(got.status, 200, `her link before the revocation: HTTP ${got.status}`);
		await client.ping();
		return { client, sid, link: `${u.pathname}${u.search}` };
	}, 120000);
	await check(t('a key revoked by `mcp-sandboxd keys revoke` while the server runs is 401 within a few seconds, on its open session too'), async () => {
		assert.ok(carolSession, 'no session of the added key');
		const headers = { ...JSON_HEADERS, 'Mcp-Session-Id': carolSession.sid, 'MCP-Protocol-Version': carolSession.version };
		const before = await raw({ method: 'POST', path: '/mcp', headers, body: PING, key: carol });
		assert.equal(before.status, 200, `the session before the revocation: HTTP ${before.status}`);
		keysCommand('revoke', 'carol');
		const got = await until(async () => (await initialize({ key: carol, from: '127.0.0.7' })).status, 401, 8, 750);
		assert.equal(got.status, 401, `the revoked key: HTTP ${got.status} after ${got.ms} ms`);
		diag(`carol's revoked key refused after ${got.ms} ms`);
		is401(await raw({ method: 'POST', path: '/mcp', headers, body: PING, key: carol, from: '127.0.0.7' }), true, 'its open session');
		assert.ok(!keysCommand('list').split('\n').some((l) => /^carol\b/.test(l.trim())), 'keys list still shows carol');
	});
	await check(t("... her SDK client's SSE session is ended (its /messages 404) and her file's link is 403 revoked"), async () => {
		assert.ok(carolSse, "no SSE client of carol's");
		await assert.rejects(carolSse.client.ping(), (e) => {
			assert.match(String(e?.message ?? e), /404/, `not a 404: ${e?.message ?? e}`);
			return true;
		});
		const res = await raw({ path: carolSse.link, key: '' });
		assert.equal(res.status, 403, `her link after the revocation: HTTP ${res.status}`);
		assert.match(String(res.body), /revoked link/, `not a revoked link: ${res.body}`);
		await carolSse.client.close().catch(() => {});
	}, 30000);

	// From 127.0.0.1: three failures in all.
	for (const [label, make] of [
		['Streamable HTTP', () => streamableTransport('')],
		['SSE', () => sseTransport('')],
	])
		await check(t(`the SDK client over ${label} without a key does not connect`), async () => {
			let client;
			try {
				client = await connect(make(), 'e2e-tenants-nokey');
			} catch (e) {
				// The SDK's errors carry the HTTP status as their code.
				assert.ok(e?.code === 401 || /\b401\b/.test(String(e?.message)), `not a 401 (code ${e?.code}): ${e?.message ?? e}`);
				return;
			}
			await disconnect(client);
			assert.fail('connected without a key');
		}, 30000);
	await check(t('supergateway with a wrong ?api_key= does not connect'), async () => {
		assert.ok(cfg.gateway, 'SBX_E2E_GATEWAY (the supergateway program) is not set');
		let stderr = '';
		const transport = new StdioClientTransport({
			command: process.execPath,
			args: [cfg.gateway, '--sse', sseUrlWithKey(wrongKey(cfg.key)), '--logLevel', 'info'],
			stderr: 'pipe',
			env: { ...process.env },
		});
		transport.stderr?.on('data', (d) => {
			stderr += d.toString();
		});
		const c = new Client({ name: 'e2e-tenants-gateway', version: '1.0.0' }, { capabilities: {} });
		const pid = () => transport.pid;
		const kill = () => {
			try {
				if (pid()) process.kill(pid(), 'SIGTERM');
			} catch {
				/* gone */
			}
		};
		process.once('exit', kill);
		try {
			await assert.rejects(c.connect(transport), (e) => {
				assert.match(`${e?.message ?? e}\n${stderr}`, /401/, `no 401 in ${e?.message ?? e}; stderr: ${stderr.slice(-500)}`);
				return true;
			});
		} finally {
			await c.close().catch(() => {});
			await transport.close().catch(() => {});
			kill();
		}
	}, 45000);
}

// Python for a sandbox after an install: finds its relay (by its command
// line, its listening socket by inode) and sends CONNECT 127.0.0.1:TARGET;
// prints the answer's head.
function connectThroughRelay(target) {
	return [
		'import os, socket',
		'def relay_port():',
		"    for pid in filter(str.isdigit, os.listdir('/proc')):",
		'        try:',
		"            if b'sbx-relay' not in open(f'/proc/{pid}/cmdline', 'rb').read():",
		'                continue',
		"            links = [os.readlink(f'/proc/{pid}/fd/{fd}') for fd in os.listdir(f'/proc/{pid}/fd')]",
		"            lines = open(f'/proc/{pid}/net/tcp').read().splitlines()[1:]",
		'        except OSError:',
		'            continue',
		"        inodes = {l[8:-1] for l in links if l.startswith('socket:[')}",
		'        for line in lines:',
		'            f = line.split()',
		"            if f[3] == '0A' and f[9] in inodes:",
		"                return int(f[1].split(':')[1], 16)",
		"s = socket.create_connection(('127.0.0.1', relay_port()), timeout=30)",
		`s.sendall(b'CONNECT 127.0.0.1:${target} HTTP/1.1\\r\\n\\r\\n')`,
		"d = b''",
		"while b'\\r\\n\\r\\n' not in d:",
		'    x = s.recv(4096)',
		'    if not x:',
		'        break',
		'    d += x',
		"print(d.decode(errors='replace'))",
	].join('\n');
}

// A key's egress_allow (issue 14): dana's key lets her sandboxes reach the
// server's own port, which sandbox.egress_allow (empty here) does not;
// alice, whose keys carry no list, keeps the setting.
async function egressPerTenant(alice) {
	let dana, client;
	const sids = [];
	await check(t("a key's egress_allow replaces sandbox.egress_allow for its tenant's sandboxes (the program asks the keys)"), async () => {
		dana = keysCommand('add', 'dana', `egress_allow=127.0.0.1:${port}`);
		assert.match(dana, /^msk_[0-9a-f]{12}_[0-9a-f]{64}$/, 'keys add printed no key');
		assert.match(keysCommand('list'), new RegExp(`^dana [0-9a-f]{12} \\S+ egress_allow=127\\.0\\.0\\.1:${port}$`, 'm'));
		const got = await until(async () => (await initialize({ key: dana, from: '127.0.0.8' })).status, 200, 8, 750);
		assert.equal(got.status, 200, `dana's key: HTTP ${got.status}`);
		client = await connect(streamableTransport(dana), 'e2e-tenants-dana');
		for (const [who, c] of [['dana', client], ['alice', alice]]) {
			const sid = await createSandbox(c, `e2e-egress-${who}`);
			sids.push([c, sid]);
			await installAndWait(c, sid, 'sbxdemo');
			const r = await callOk(c, 'execute_python_code', { sandbox_id: sid, code: connectThroughRelay(port) });
			const out = String(r.stdout ?? r.output ?? JSON.stringify(r));
			if (who === 'dana') assert.match(out, /^HTTP\/1\.1 200 Connection established/, `dana: ${out}`);
			else assert.match(out, /^HTTP\/1\.1 403[\s\S]*is not allowed[\s\S]*sandbox\.egress_allow/, `alice: ${out}`);
		}
		const list = await callOk(client, 'list_sandboxes', {});
		assert.ok(list.tenant_egress_bytes_in > 0 && list.tenant_egress_bytes_out > 0, `dana's totals: ${JSON.stringify(list)}`);
	}, 400000);
	for (const [c, sid] of sids) await call(c, 'delete_sandbox', { sandbox_id: sid }).catch(() => {});
	if (client) await disconnect(client);
	if (dana) keysCommand('revoke', 'dana');
}

export async function tenantsCase() {
	if (!cfg.key || !cfg.keyBob) {
		await check(t('the keys of alice and bob are set (SBX_E2E_KEY, SBX_E2E_KEY_BOB)'), async () => assert.fail('run through tests/e2e-*.engine'));
		return;
	}
	const clients = await check(t('alice and bob connect with their keys over Streamable HTTP and SSE'), async () => ({
		alice: await connect(streamableTransport(cfg.key), 'e2e-tenants-alice'),
		aliceSse: await connect(sseTransport(cfg.key), 'e2e-tenants-alice-sse'),
		bobHttp: await connect(streamableTransport(cfg.keyBob), 'e2e-tenants-bob'),
		bobSse: await connect(sseTransport(cfg.keyBob), 'e2e-tenants-bob-sse'),
	}), 60000);
	try {
		if (clients) {
			const { alice, aliceSse, bobHttp, bobSse } = clients;
			const bobs = [
				['Streamable HTTP', bobHttp],
				['SSE', bobSse],
			];
			await isolation(alice, aliceSse, bobs);
			await sameName(alice, aliceSse, bobHttp, bobSse);
			await egressPerTenant(alice);
		}
		await sessions();
		await refusals();
	} finally {
		if (clients) for (const c of Object.values(clients)) await disconnect(c);
	}
}
