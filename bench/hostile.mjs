// SPDX-License-Identifier: MIT
// Hostile clients against mcp-sandboxd (bench/run-mcp-bench, part 5); reads
// the server's memory from /proc/PID/status (it runs on this machine).
//   node hostile.mjs BASE_URL PID BODIES BODY_BYTES FLOOD
// 1. BODIES concurrent POSTs of BODY_BYTES without a session: half to /mcp
//    without Mcp-Session-Id, half to /messages with a session_id nobody has;
//    the body is "[1,1,...]" (the costliest JSON per byte for a parser).
// 2. The same on live sessions (one Streamable HTTP, one SSE): "[1,1,...]"
//    to /mcp, a ping whose one string fills the body to /messages.
//    For both: VmRSS before, its peak (sampled every 5 ms) and after, and
//    the statuses ("413+head": answered from the headers, before the client
//    sent any of the body; see post()):
//      BODIES <label> before <kB> peak <kB> after <kB> statuses <s:n,...>
// 3. One session floods: FLOOD concurrent tools/call execute_terminal_command
//    "sleep 5" on one sandbox; past server.max_calls_per_session they are
//    refused. Meanwhile another session calls list_sandboxes and ping, one at
//    a time, timed:
//      FLOOD calls <F> refused <R> ran <A> other <n> refused_max_ms <ms>
//      RESULT flood.list_sandboxes P50 P99 N FAILED   (bench/lib.mjs result())
//      RESULT flood.ping ...
//    then cancels the calls that run and waits for them.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

import { PROTOCOL, RawClient, now, result, sleep, toolJson } from './lib.mjs';

const [base, pidArg, bodiesArg, bytesArg, floodArg] = process.argv.slice(2);
const PID = Number(pidArg);
const BODIES = Number(bodiesArg || 16);
const BYTES = Number(bytesArg || 4 * 1024 * 1024 - 64);
const FLOOD = Number(floodArg || 300);
const url = new URL(base);

function rssKb() {
	const s = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
	return Number(/VmRSS:\s+(\d+)/.exec(s)?.[1] ?? NaN);
}

// One POST of BODY to PATH on its own connection: the headers first, then
// (unless an answer came within 100 ms) the body; resolves with the answer's
// status, "<status>+head" when it came before any body byte was sent, or the
// error's code when the connection failed without an answer.
function post(path, headers, body) {
	return new Promise((resolve) => {
		const sock = net.connect(Number(url.port), url.hostname);
		let got = '';
		let sent = false;
		let done = false;
		const status = () => /^HTTP\/1\.1 (\d{3})/.exec(got)?.[1];
		const finish = (v) => {
			if (done) return;
			done = true;
			clearTimeout(timer);
			sock.destroy();
			resolve(v);
		};
		const timer = setTimeout(() => finish(status() || 'timeout'), 60000);
		sock.on('data', (d) => {
			got += d.toString('latin1');
			if (status() && got.includes('\r\n\r\n')) finish(sent ? status() : `${status()}+head`);
		});
		sock.on('error', (e) => finish(status() || e.code || 'error'));
		sock.on('close', () => finish(status() || 'closed'));
		sock.on('connect', async () => {
			let head = `POST ${path} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Length: ${body.length}\r\n`;
			for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
			sock.write(`${head}\r\n`);
			await sleep(100);
			if (done) return;
			sent = true;
			for (let off = 0; off < body.length && !done; off += 65536) {
				if (!sock.write(body.subarray(off, off + 65536))) await new Promise((r) => sock.once('drain', r).once('close', r));
			}
		});
	});
}

const MCP_HEADERS = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };

// "[1,1,...,1]" of N bytes (the last number "11" when N is even).
function valuesBody(n) {
	const b = Buffer.alloc(n, ',1');
	b[0] = '['.charCodeAt(0);
	if (n % 2 === 0) b[n - 2] = '1'.charCodeAt(0);
	b[n - 1] = ']'.charCodeAt(0);
	return b;
}

function stringBody(n) {
	const head = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"';
	const b = Buffer.alloc(n, 'x');
	b.write(head, 0);
	b.write('"}}', n - 3);
	return b;
}

async function measure(label, jobs) {
	const before = rssKb();
	let peak = before;
	const timer = setInterval(() => {
		const r = rssKb();
		if (r > peak) peak = r;
	}, 5);
	const statuses = await Promise.all(jobs.map((j) => j()));
	await sleep(100);
	clearInterval(timer);
	const after = rssKb();
	peak = Math.max(peak, after);
	const counts = {};
	for (const s of statuses) counts[s] = (counts[s] || 0) + 1;
	const list = Object.entries(counts)
		.map(([s, n]) => `${s}:${n}`)
		.join(',');
	console.log(`BODIES ${label} before ${before} peak ${peak} after ${after} statuses ${list}`);
}

// An SSE session: its id once the endpoint event came; the stream is read
// (and dropped) until close().
function sseSession() {
	return new Promise((resolve, reject) => {
		const req = http.get(`${base}/sse`, { agent: false, headers: { Accept: 'text/event-stream' } }, (res) => {
			let buf = '';
			res.setEncoding('utf8');
			res.on('data', (d) => {
				buf += d;
				const m = /session_id=([0-9a-f]+)\n/.exec(buf);
				if (m) resolve({ id: m[1], close: () => req.destroy() });
				if (buf.length > 65536) buf = buf.slice(-1024);
			});
		});
		req.on('error', reject);
	});
}

const values = valuesBody(BYTES);
const text = stringBody(BYTES);

// ---- 1 and 2: bodies ----
await measure(
	'nosession',
	Array.from({ length: BODIES }, (_, i) =>
		i % 2 ? () => post('/messages?session_id=0123456789abcdef0123456789abcdef', { 'Content-Type': 'application/json' }, values) : () => post('/mcp', MCP_HEADERS, values),
	),
);
{
	const raw = new RawClient(base);
	await raw.connect();
	const sse = await sseSession();
	const init = (id) => ({ jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'bench-hostile', version: '1' } } });
	await post(`/messages?session_id=${sse.id}`, { 'Content-Type': 'application/json' }, Buffer.from(JSON.stringify(init(0))));
	await measure(
		'session',
		Array.from({ length: BODIES }, (_, i) =>
			i % 2
				? () => post(`/messages?session_id=${sse.id}`, { 'Content-Type': 'application/json' }, text)
				: () => post('/mcp', { ...MCP_HEADERS, 'Mcp-Session-Id': raw.session, 'MCP-Protocol-Version': PROTOCOL }, values),
		),
	);
	sse.close();
	await raw.close();
}

// ---- 3: one session floods, another is served ----
if (FLOOD > 0) {
	const flooder = new RawClient(base);
	const other = new RawClient(base);
	await flooder.connect();
	await other.connect();
	const created = toolJson(await flooder.callTool('create_sandbox', {}));
	const sid = created.json?.sandbox_id;
	if (!sid) throw new Error(`create_sandbox: ${JSON.stringify(created.json)}`);
	const headers = { ...MCP_HEADERS, 'Mcp-Session-Id': flooder.session, 'MCP-Protocol-Version': PROTOCOL };
	const t0 = now();
	let refused = 0;
	let refusedMax = 0;
	const running = [];
	const calls = Array.from({ length: FLOOD }, (_, i) => {
		const id = 1000 + i;
		const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'execute_terminal_command', arguments: { sandbox_id: sid, command: 'sleep 5' } } }));
		return new Promise((resolve) => {
			const req = http.request({ host: url.hostname, port: url.port, path: '/mcp', method: 'POST', agent: false, headers: { ...headers, 'Content-Length': body.length } }, (res) => {
				let s = '';
				res.setEncoding('utf8');
				res.on('data', (d) => (s += d));
				res.on('end', () => {
					if (s.includes('server.max_calls_per_session')) {
						refused++;
						refusedMax = Math.max(refusedMax, now() - t0);
					}
					resolve();
				});
			});
			req.on('error', () => resolve());
			req.end(body);
			running.push(id);
		});
	});
	await sleep(300);
	const list = [];
	const ping = [];
	let failed = 0;
	for (let i = 0; i < 20; i++) {
		let t = now();
		try {
			const r = toolJson(await other.callTool('list_sandboxes', {}));
			if (r.isError) throw new Error('list_sandboxes: isError');
			list.push(now() - t);
		} catch (e) {
			failed++;
			if (failed === 1) console.error(`# ${e.message || e}`);
		}
		t = now();
		await other.request('ping', {});
		ping.push(now() - t);
	}
	console.log(`FLOOD calls ${FLOOD} refused ${refused} ran ${FLOOD - refused} other ${list.length} refused_max_ms ${refusedMax.toFixed(1)}`);
	result('flood.list_sandboxes', list, failed);
	result('flood.ping', ping, 0);
	for (const id of running) {
		await flooder.post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'bench over' } }).catch(() => {});
	}
	await Promise.race([Promise.all(calls), sleep(60000)]);
	await flooder.close();
	await other.close();
}
