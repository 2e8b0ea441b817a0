// SPDX-License-Identifier: MIT
// Tool-call latency of mcp-sandboxd through the MCP layer, with the official
// SDK client (Client + StreamableHTTPClientTransport) and with a minimal
// keep-alive client (bench/lib.mjs RawClient), to separate the SDK's own cost.
//   node mcp-latency.mjs exec BASE_URL CALLS FRESH_CALLS
//     one hot sandbox; CALLS `ping`s per client, then, taking turns, CALLS
//     execute_python_code("print(1)") per client and FRESH_CALLS
//     execute_terminal_command("python3 -c 'print(1)'") (a fresh exec per call,
//     SDK client only: at ~100 ms the client's cost does not show)
//   node mcp-latency.mjs create BASE_URL ROUNDS [GAP_MS]
//     create_sandbox ROUNDS times, GAP_MS apart (time for a pool to refill)
// Prints RESULT lines (bench/lib.mjs result()) for bench/run-mcp-bench; the
// script does not know or care how the server runs the code.
import { RawClient, now, result, sdkClose, sdkConnect, sleep, toolJson } from './lib.mjs';

const [mode, base, a1, a2] = process.argv.slice(2);
const WARMUP = 10;
const TIMEOUT = { timeout: 120000 };

async function timed(n, fn) {
	const samples = [];
	let failed = 0;
	for (let i = -WARMUP; i < n; i++) {
		const t0 = now();
		let ok = false;
		try {
			ok = await fn();
		} catch (e) {
			if (failed === 0) console.error(`# ${e.message || e}`);
		}
		const dt = now() - t0;
		if (i < 0) continue;
		if (ok) samples.push(dt);
		else failed++;
	}
	return { samples, failed };
}

const printedOne = (json) => json && json.exit_code === 0 && json.stdout === '1\n';

async function benchExec(calls, freshCalls) {
	const sdk = await sdkConnect(base);
	const raw = new RawClient(base);
	await raw.connect();
	try {
		const created = toolJson(await sdk.callTool({ name: 'create_sandbox', arguments: {} }, undefined, TIMEOUT));
		if (created.isError || !created.json?.sandbox_id) throw new Error(`create_sandbox: ${JSON.stringify(created.json)}`);
		const id = created.json.sandbox_id;
		const py = { sandbox_id: id, code: 'print(1)' };
		const sh = { sandbox_id: id, command: "python3 -c 'print(1)'" };
		let r;

		r = await timed(calls, async () => (await sdk.ping(), true));
		result('ping.sdk', r.samples, r.failed);
		r = await timed(calls, async () => (await raw.request('ping', {}), true));
		result('ping.raw', r.samples, r.failed);

		// The three tool calls take turns, so that a change in the machine's
		// load hits them alike.
		const ops = [
			['python.sdk', calls, async () => toolJson(await sdk.callTool({ name: 'execute_python_code', arguments: py }, undefined, TIMEOUT))],
			['python.raw', calls, async () => toolJson(await raw.callTool('execute_python_code', py))],
			['fresh.sdk', freshCalls, async () => toolJson(await sdk.callTool({ name: 'execute_terminal_command', arguments: sh }, undefined, TIMEOUT))],
		];
		const acc = ops.map(() => ({ samples: [], failed: 0 }));
		for (let i = -WARMUP; i < Math.max(calls, freshCalls); i++) {
			for (const [k, [, n, fn]] of ops.entries()) {
				if (i >= n) continue;
				const t0 = now();
				let ok = false;
				try {
					const res = await fn();
					ok = !res.isError && printedOne(res.json);
					if (!ok && acc[k].failed === 0 && i >= 0) console.error(`# ${ops[k][0]}: ${JSON.stringify(res.json)}`);
				} catch (e) {
					if (acc[k].failed === 0 && i >= 0) console.error(`# ${ops[k][0]}: ${e.message || e}`);
				}
				const dt = now() - t0;
				if (i < 0) continue;
				if (ok) acc[k].samples.push(dt);
				else acc[k].failed++;
			}
		}
		for (const [k, [name]] of ops.entries()) result(name, acc[k].samples, acc[k].failed);
	} finally {
		await raw.close();
		await sdkClose(sdk);
	}
}

async function benchCreate(rounds, gapMs, name) {
	const sdk = await sdkConnect(base);
	const samples = [];
	let failed = 0;
	try {
		for (let i = 0; i < rounds; i++) {
			if (gapMs > 0) await sleep(gapMs);
			const t0 = now();
			const res = toolJson(await sdk.callTool({ name: 'create_sandbox', arguments: {} }, undefined, TIMEOUT));
			const dt = now() - t0;
			if (res.isError || !res.json?.sandbox_id) {
				if (failed++ === 0) console.error(`# create_sandbox: ${JSON.stringify(res.json)}`);
			} else samples.push(dt);
		}
	} finally {
		await sdkClose(sdk);
	}
	result(name, samples, failed);
}

if (mode === 'exec') await benchExec(Number(a1 || 200), Number(a2 || a1 || 200));
else if (mode === 'create') await benchCreate(Number(a1 || 10), Number(a2 || 0), process.env.SBX_BENCH_NAME || 'create');
else {
	console.error('usage: mcp-latency.mjs exec|create BASE_URL N [M]');
	process.exit(2);
}
