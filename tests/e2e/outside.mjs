// SPDX-License-Identifier: MIT
// A sandbox's container killed from outside the server, through the engine's
// own API (as an operator or the OOM killer would): the server learns it from
// the engine's events, list_sandboxes shows it dead with the reason before
// any call on it, a call on it says what happened and what to do, and
// delete_sandbox frees it.
import assert from 'node:assert/strict';
import http from 'node:http';

import { check } from './tap.mjs';
import { call, callOk, cfg, connect, createSandbox, disconnect, sleep, streamableTransport } from './util.mjs';

// One request to an engine's Docker-compatible API (both engines serve it;
// on a swarm, a node's own).
function engine(method, path, socketPath = cfg.engineSocket) {
	return new Promise((resolve, reject) => {
		const req = http.request({ socketPath, method, path: `/v1.41${path}`, timeout: 30000 }, (res) => {
			let body = '';
			res.on('data', (d) => (body += d));
			res.on('end', () => resolve({ status: res.statusCode, body }));
		});
		req.on('timeout', () => req.destroy(new Error(`engine ${method} ${path}: timed out`)));
		req.on('error', reject);
		req.end();
	});
}

// The sandbox's container and the socket of the engine that runs it (on a
// swarm, each node is asked).
async function containerOf(sid) {
	const filters = encodeURIComponent(JSON.stringify({ label: [`org.mcp-sandbox.sandbox-id=${sid}`] }));
	const found = [];
	for (const socket of cfg.engineSockets) {
		const r = await engine('GET', `/containers/json?all=1&filters=${filters}`, socket);
		assert.equal(r.status, 200, r.body);
		for (const c of JSON.parse(r.body)) found.push({ socket, id: c.Id });
	}
	assert.equal(found.length, 1, `one container for ${sid}: ${JSON.stringify(found)}`);
	return found[0];
}

export async function outsideCase() {
	if (!cfg.engineSocket) {
		await check('killed from outside: SBX_E2E_ENGINE_SOCKET is set', async () => assert.fail('no engine socket'));
		return;
	}
	const client = await check('killed from outside: a session', async () => connect(streamableTransport(), 'e2e-outside'), 30000);
	if (!client) return;
	try {
		const sid = await check('killed from outside: create a sandbox', async () => createSandbox(client, 'e2e-outside'), 120000);
		if (!sid) return;
		await check('killed from outside: list_sandboxes says dead, with the reason, before any call', async () => {
			const { socket, id } = await containerOf(sid);
			const k = await engine('POST', `/containers/${id}/kill?signal=KILL`, socket);
			assert.ok(k.status === 204 || k.status === 200, `kill: ${k.status} ${k.body}`);
			let mine;
			for (let i = 0; i < 300; i++) {
				const list = await callOk(client, 'list_sandboxes', {});
				mine = list.sandboxes.find((s) => s.sandbox_id === sid);
				if (mine?.status === 'dead') break;
				await sleep(100);
			}
			assert.equal(mine?.status, 'dead', JSON.stringify(mine));
			assert.match(mine.reason, /killed \(signal 9\) from outside the server/, mine.reason);
		}, 60000);
		await check('killed from outside: a call on it says what happened and what to do', async () => {
			const r = await call(client, 'execute_python_code', { sandbox_id: sid, code: 'print(1)' });
			assert.ok(r.isError, r.text);
			assert.match(r.text, /no longer runs: its container was killed \(signal 9\)/);
			assert.match(r.text, /delete_sandbox/);
			assert.match(r.text, /create_sandbox/);
		});
		await check('killed from outside: delete_sandbox removes it', async () => {
			const r = await callOk(client, 'delete_sandbox', { sandbox_id: sid });
			assert.equal(r.deleted, true, JSON.stringify(r));
			const f = encodeURIComponent(JSON.stringify({ label: [`org.mcp-sandbox.sandbox-id=${sid}`] }));
			const left = await engine('GET', `/containers/json?all=1&filters=${f}`);
			assert.deepEqual(JSON.parse(left.body), [], 'its container is gone');
		});
	} finally {
		await disconnect(client);
	}
}
