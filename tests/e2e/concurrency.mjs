// SPDX-License-Identifier: MIT
// Case 6: 20 sessions at once (10 legacy SSE + 10 Streamable HTTP).
// Case 7: a slow tool call does not hold up a ping on the same session.
// And the timeout argument of both run tools; a flood of calls from one
// session's pool does not lock another client of its address out.
import assert from 'node:assert/strict';

import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { check, diag } from './tap.mjs';
import { TOOLS, authHeaders, call, callOk, cfg, connect, disconnect, sleep, sseTransport, streamableTransport } from './util.mjs';

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

// A connection pool of its own (another process's, as far as the server can
// tell): undici's Agent, the class of Node's own global dispatcher, which Node
// does not export. Its idle connections are kept for a minute.
function ownPool() {
	const global = globalThis[Symbol.for('undici.globalDispatcher.1')];
	assert.ok(global && typeof global.constructor === 'function', "no undici dispatcher in Node's fetch");
	const Agent = global.constructor;
	const agent = new Agent({ keepAliveTimeout: 60000, keepAliveMaxTimeout: 60000 });
	return { agent, fetch: (url, init) => fetch(url, { ...init, dispatcher: agent }) };
}

function pooledTransport(pool) {
	return new StreamableHTTPClientTransport(new URL(`${cfg.base}/mcp`), { requestInit: { headers: authHeaders() }, fetch: pool.fetch });
}

// An error's message with what undici says under it ("fetch failed" alone
// does not tell a reset from a refused connect or a timeout).
function withCause(e) {
	const c = e && e.cause;
	return c ? `${e.message} (${c.code || c.name || ''}: ${c.message || c})` : String(e && e.message);
}

// One session floods FLOOD calls at once from its own pool (8 run, the rest
// are refused by server.max_calls_per_session), more than
// server.max_connections_per_ip (512) connections, which then sit idle in its
// pool; another client on the same address, with a pool of its own, is still
// served: its connections are let in in place of idle ones, never refused.
const FLOOD = 560;
export async function floodCase(sid) {
	await check(`one session floods ${FLOOD} calls from its own pool; another client on the same address is served meanwhile`, async () => {
		assert.ok(sid, 'no shared sandbox');
		const poolA = ownPool();
		const poolB = ownPool();
		const a = await connect(pooledTransport(poolA), 'e2e-flood');
		let b;
		try {
			await fetch(`${cfg.base}/health`); // the global dispatcher exists from here on
			const outcome = { ok: 0, refused: 0, toolErrors: [], other: [], spans: [] };
			const calls = [];
			for (let i = 0; i < FLOOD; i++) {
				calls.push(
					// Each says when it ran, by the sandbox's clock (ns).
					call(a, 'execute_terminal_command', { sandbox_id: sid, command: 'date +%s%N; sleep 5; date +%s%N' })
						.then((r) => {
							// An answer all the same (an engine slow under load).
							if (r.isError) return outcome.toolErrors.push(r.text);
							outcome.ok++;
							const [from, to] = String(r.json?.stdout || '').trim().split('\n').map(BigInt);
							outcome.spans.push([from, to]);
						})
						.catch((e) => (/max_calls_per_session/.test(e.message) ? outcome.refused++ : outcome.other.push(withCause(e)))),
				);
			}
			// The refusals come back at once; the 8 running calls sleep 5 s.
			for (let i = 0; i < 200 && outcome.refused + outcome.other.length < FLOOD - 8; i++) await sleep(50);
			// Idle connections make room once idle for a second (SBX_HTTP_EVICT_IDLE_MS).
			await sleep(1500);
			b = await connect(pooledTransport(poolB), 'e2e-flood-other');
			const listed = await callOk(b, 'list_sandboxes', {});
			assert.ok(listed && typeof listed === 'object', 'list_sandboxes answered');
			await Promise.all(calls);
			if (outcome.toolErrors.length) diag(`flood: ${outcome.toolErrors.length} tool errors (${outcome.toolErrors[0]})`);
			diag(`flood: ${outcome.ok} ran, ${outcome.refused} refused by max_calls_per_session, ${outcome.other.length} otherwise (${outcome.other[0] || '-'})`);
			// A slow client's flood can outlast the first calls: more than 8
			// may run in all, never more than 8 at once.
			const edges = outcome.spans.flatMap(([from, to]) => [[from, 1], [to, -1]]).sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] - y[1]));
			let now = 0, most = 0;
			for (const [, d] of edges) most = Math.max(most, (now += d));
			assert.ok(outcome.ok >= 1 && most <= 8, `${outcome.ok} of the flood ran, ${most} at once (at most 8)`);
			// Past the limit with none idle the answer is a 503, never a close without one.
			const closed = outcome.other.filter((m) => !/\b503\b|too many connections/.test(m));
			assert.equal(closed.length, 0, `${closed.length} of the flood's calls got no HTTP status: ${[...new Set(closed)].join('; ')}`);
		} finally {
			await disconnect(b);
			await disconnect(a);
			await poolA.agent.close().catch(() => {});
			await poolB.agent.close().catch(() => {});
		}
	}, 180000);
}
