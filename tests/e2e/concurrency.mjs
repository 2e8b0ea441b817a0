// SPDX-License-Identifier: MIT
// Case 6: 20 sessions at once (10 legacy SSE + 10 Streamable HTTP).
// Case 7: a slow tool call does not hold up a ping on the same session.
// And the timeout argument of both run tools.
import assert from 'node:assert/strict';

import { check } from './tap.mjs';
import { TOOLS, callOk, connect, disconnect, sleep, sseTransport, streamableTransport } from './util.mjs';

async function oneSession(kind, i, sid) {
	const client = await connect(kind === 'sse' ? sseTransport() : streamableTransport(), `e2e-many-${kind}-${i}`);
	try {
		const { tools } = await client.listTools();
		const names = tools.map((x) => x.name);
		for (const name of Object.keys(TOOLS)) assert.ok(names.includes(name), `${kind} ${i}: tools/list lacks ${name}`);
		assert.deepEqual(await client.ping(), {}, `${kind} ${i}: ping`);
		const word = `session-${kind}-${i}`;
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: `echo ${word}` });
		assert.equal(r.stdout, `${word}\n`, `${kind} ${i}: its own output`);
		assert.equal(r.exit_code, 0);
		return kind === 'sse' ? undefined : client.transport.sessionId;
	} finally {
		await disconnect(client);
	}
}

export async function manySessionsCase(sid) {
	await check('20 sessions at once (10 SSE + 10 Streamable): initialize, tools/list, ping, a command each', async () => {
		assert.ok(sid, 'no shared sandbox');
		const jobs = [];
		for (let i = 0; i < 10; i++) {
			jobs.push(oneSession('sse', i, sid));
			jobs.push(oneSession('streamable', i, sid));
		}
		const results = await Promise.allSettled(jobs);
		const failed = results.filter((r) => r.status === 'rejected');
		assert.equal(failed.length, 0, `${failed.length} of 20 sessions failed; first: ${failed[0]?.reason?.stack || failed[0]?.reason}`);
		const ids = results.map((r) => r.value).filter(Boolean);
		assert.equal(new Set(ids).size, 10, 'ten distinct Streamable session ids');
	}, 180000);
}

// Starts "sleep 3" on CLIENT, pings while it runs; the ping must come back
// first. Ordering is asserted, not absolute times.
async function slowCallVsPing(client, sid) {
	const order = [];
	const slow = callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'sleep 3; echo slept' }).then((r) => {
		order.push('call');
		return r;
	});
	slow.catch(() => {});
	await sleep(500); // let the call reach the sandbox
	assert.deepEqual(order, [], 'the call ended before the ping was sent');
	const pong = await client.ping();
	order.push('ping');
	assert.deepEqual(pong, {});
	const r = await slow;
	assert.deepEqual(order, ['ping', 'call'], 'the ping was answered while the call ran');
	assert.equal(r.stdout, 'slept\n');
}

export async function slowCallCase(sid) {
	for (const [kind, make] of [
		['Streamable HTTP', streamableTransport],
		['SSE', sseTransport],
	]) {
		await check(`${kind}: a slow tool call (sleep 3) does not block a ping on the same session`, async () => {
			assert.ok(sid, 'no shared sandbox');
			const client = await connect(make(), `e2e-slow-${kind}`);
			try {
				await slowCallVsPing(client, sid);
			} finally {
				await disconnect(client);
			}
		}, 60000);
	}
}

export async function timeoutCase(client, sid) {
	await check('execute_terminal_command: timeout 1 s kills "sleep 30" (timed_out, exit_code -1)', async () => {
		const t0 = Date.now();
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'sleep 30', timeout: 1 });
		assert.equal(r.timed_out, true, JSON.stringify(r));
		assert.equal(r.exit_code, -1, JSON.stringify(r));
		assert.ok(Date.now() - t0 < 20000, 'the call waited for the whole sleep');
	}, 40000);
	await check('execute_python_code: timeout 1 s stops an endless loop; the sandbox still works', async () => {
		const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: 'print("start", flush=True)\nwhile True:\n    pass', timeout: 1 });
		assert.equal(r.timed_out, true, JSON.stringify(r));
		// -1 when the process was killed; an interpreter that is interrupted
		// instead reports the KeyboardInterrupt's exit code.
		assert.notEqual(r.exit_code, 0, JSON.stringify(r));
		assert.match(r.stdout, /start/, 'the output before the limit is kept');
		const again = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: 'print(6 * 7)' });
		assert.equal(again.stdout, '42\n');
	}, 40000);
}
