// SPDX-License-Identifier: MIT
// Many clients behind one address, on the server's default limits
// (bench/run-mcp-bench, part 6); reads the server's threads and memory from
// /proc/PID/status (it runs on this machine).
//   node same-address.mjs BASE_URL PID FLOOD DOWNLOADS
// 1. Refusals through Node's fetch (the SDK's transport, which sends a body
//    without waiting for 100-continue): 10 POSTs of 3 MB on an unknown
//    session (404) and 10 of 40 MB (413); how many answers arrived, how many
//    ended in EPIPE or a reset:
//      REFUSALS sent <n> arrived <n> failed <n> (<first error>)
// 2. A flood from one pool: FLOOD concurrent tool calls (sleep 5) of one
//    session, each on its own connection, more than
//    server.max_connections_per_ip; then another client with a pool of its
//    own (a second process, as far as the server can tell) calls
//    list_sandboxes 20 times, timed:
//      FLOOD calls <n> ran <n> refused <n> busy503 <n> nostatus <n>
//      RESULT same.list_sandboxes P50 P99 N FAILED
// 3. Stalled downloads: DOWNLOADS GETs of a 64 MiB artifact link whose
//    clients read nothing; the server's threads before, with them held, and
//    how long until they are back (server.stream_stall_timeout), and the
//    answers (past server.max_downloads and its per-address share: 503):
//      DOWNLOADS sent <n> streaming <n> refused <n> threads_before <n>
//        threads_held <n> threads_after <n> back_after_ms <ms>
import fs from 'node:fs';
import net from 'node:net';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { now, result, sleep, toolJson } from './lib.mjs';

const [base, pidArg, floodArg, downloadsArg] = process.argv.slice(2);
const PID = Number(pidArg);
const FLOOD = Number(floodArg || 560);
const DOWNLOADS = Number(downloadsArg || 100);
const url = new URL(base);
const JSON_HEADERS = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };

function status(field) {
	const s = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
	return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(s)?.[1] ?? NaN);
}

// A connection pool of its own: undici's Agent (the class of Node's global
// dispatcher, which Node does not export), idle connections kept a minute.
function ownPool() {
	const Agent = globalThis[Symbol.for('undici.globalDispatcher.1')].constructor;
	const agent = new Agent({ keepAliveTimeout: 60000, keepAliveMaxTimeout: 60000 });
	return { agent, fetch: (u, init) => fetch(u, { ...init, dispatcher: agent }) };
}

async function connect(pool, name) {
	const client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
	await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { fetch: pool.fetch }));
	return client;
}

async function close(client) {
	try {
		await client.transport.terminateSession();
	} catch {
		/* closing anyway */
	}
	await client.close().catch(() => {});
}

await fetch(`${base}/health`); // Node's global dispatcher exists from here on

// ---- 1: refusals through Node's fetch ----
{
	const big = Buffer.alloc(3 * 1024 * 1024, 0x20);
	const huge = Buffer.alloc(40 * 1024 * 1024, 0x20);
	let sent = 0;
	let arrived = 0;
	const failed = [];
	for (const [want, headers, body] of [
		[404, { ...JSON_HEADERS, 'Mcp-Session-Id': '0123456789abcdef0123456789abcdef' }, big],
		[413, JSON_HEADERS, huge],
	]) {
		for (let i = 0; i < 10; i++) {
			sent++;
			try {
				const res = await fetch(`${base}/mcp`, { method: 'POST', headers, body });
				await res.arrayBuffer();
				if (res.status === want) arrived++;
				else failed.push(`HTTP ${res.status}`);
			} catch (e) {
				failed.push(e.cause?.code || e.message);
			}
		}
	}
	console.log(`REFUSALS sent ${sent} arrived ${arrived} failed ${failed.length} (${failed[0] || '-'})`);
}

// ---- 2: a flood from one pool; another client on the address ----
let sid;
{
	const poolA = ownPool();
	const poolB = ownPool();
	const a = await connect(poolA, 'bench-flood');
	sid = toolJson(await a.callTool({ name: 'create_sandbox', arguments: {} })).json?.sandbox_id;
	if (!sid) throw new Error('create_sandbox gave no sandbox_id');
	const n = { ran: 0, refused: 0, busy: 0, none: 0 };
	let firstNone = '';
	const calls = Array.from({ length: FLOOD }, () =>
		a
			.callTool({ name: 'execute_terminal_command', arguments: { sandbox_id: sid, command: 'sleep 5' } }, undefined, { timeout: 120000 })
			.then(() => n.ran++)
			.catch((e) => {
				if (/max_calls_per_session/.test(e.message)) n.refused++;
				else if (/\b503\b|too many connections/.test(e.message)) n.busy++;
				else {
					n.none++;
					firstNone ||= e.message;
				}
			}),
	);
	for (let i = 0; i < 400 && n.refused + n.busy + n.none < FLOOD - 8; i++) await sleep(25);
	await sleep(1500); // idle connections make room once idle for a second
	const b = await connect(poolB, 'bench-flood-other');
	const list = [];
	let failed = 0;
	for (let i = 0; i < 20; i++) {
		const t = now();
		try {
			const r = toolJson(await b.callTool({ name: 'list_sandboxes', arguments: {} }));
			if (r.isError) throw new Error('list_sandboxes: isError');
			list.push(now() - t);
		} catch (e) {
			failed++;
			if (failed === 1) console.error(`# ${e.message || e}`);
		}
	}
	await Promise.all(calls);
	console.log(`FLOOD calls ${FLOOD} ran ${n.ran} refused ${n.refused} busy503 ${n.busy} nostatus ${n.none}`);
	if (firstNone) console.error(`# without a status: ${firstNone}`);
	result('same.list_sandboxes', list, failed);
	await close(b);
	await close(a);
	await poolA.agent.close();
	await poolB.agent.close();
}

// ---- 3: stalled downloads ----
if (DOWNLOADS > 0) {
	const pool = ownPool();
	const c = await connect(pool, 'bench-downloads');
	const made = toolJson(
		await c.callTool({
			name: 'execute_python_code',
			arguments: { sandbox_id: sid, code: "open('/app/results/big.bin','wb').write(b'\\0' * (64 << 20))" },
		}),
	).json;
	const link = (made?.files || []).map((f) => f.url).find((u) => typeof u === 'string' && u.includes('big.bin'));
	if (!link) throw new Error(`no link to big.bin in ${JSON.stringify(made).slice(0, 300)}`);
	const path = new URL(link).pathname + new URL(link).search;
	const before = status('Threads');
	const socks = [];
	const answers = { streaming: 0, refused: 0, other: 0 };
	await Promise.all(
		Array.from(
			{ length: DOWNLOADS },
			() =>
				new Promise((resolve) => {
					const s = net.connect(Number(url.port), url.hostname);
					socks.push(s);
					let head = '';
					const done = (what) => {
						answers[what]++;
						s.removeAllListeners('data');
						if (what === 'streaming') s.pause(); // reads nothing more: the download stalls
						else s.destroy(); // refused: a client goes (or retries later)
						resolve();
					};
					s.on('data', (d) => {
						head += d.toString('latin1');
						const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
						if (m) done(m[1] === '200' ? 'streaming' : m[1] === '503' ? 'refused' : 'other');
					});
					s.on('error', () => resolve());
					s.write(`GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`);
				}),
		),
	);
	await sleep(1000);
	const held = status('Threads');
	const t0 = now();
	let after = held;
	while (now() - t0 < 120000) {
		after = status('Threads');
		if (after <= before + 2) break;
		await sleep(250);
	}
	const backMs = now() - t0;
	for (const s of socks) s.destroy();
	console.log(
		`DOWNLOADS sent ${DOWNLOADS} streaming ${answers.streaming} refused ${answers.refused} threads_before ${before} threads_held ${held} threads_after ${after} back_after_ms ${backMs.toFixed(0)}`,
	);
	await close(c);
	await pool.agent.close();
}
