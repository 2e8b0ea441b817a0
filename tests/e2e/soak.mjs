// SPDX-License-Identifier: MIT
// The soak with faults (tests/soak-*.engine through tests/e2e/soak.sh, and
// `make bench` through bench/run-soak-bench): SBX_SOAK_SESSIONS sessions
// (50) from 127.0.0.1, SBX_SOAK_SSE of them (10) on the legacy SSE transport,
// the rest Streamable HTTP, all the official SDK client, each making mixed
// calls (execute_python_code, execute_terminal_command, list_sandboxes, ping)
// on a few shared sandboxes of a server on default limits. Three phases,
// SBX_SOAK_CALLS (10) calls per session in A and C together:
//  A. half the calls; meanwhile the container of sandbox V is killed through
//     the engine (the sessions that call V wait for the kill before their last
//     calls): calls on V after it must be tool errors that name the
//     container's death, every other call must succeed; and some sessions
//     leave mid-call (a `sleep` running in a shared sandbox): one aborts its
//     call (AbortController: notifications/cancelled), the others close their
//     transport without a DELETE; the sleep's processes must be gone from the
//     sandbox afterwards (the server cancelled the call), then they reconnect;
//  B. the engine (a private one: tests/private-engine) is stopped while the
//     sessions keep calling, one call at a time with a pause; once at least
//     SBX_SOAK_DOWN_CALLS calls ended after the stop, it is started again;
//     tool errors here must name the engine or the sandbox's death; once
//     the shared sandboxes answer again (Docker stops its containers with
//     it: new ones are made) the phase ends;
//  C. the other half of the calls, which must all succeed.
// Then every session leaves and the run's sandboxes are deleted; once this
// process has exited, tests/e2e/soak.sh checks that the server's threads, RSS
// and open descriptors (/proc/PID) are back near the "SOAK before" figures
// printed here (taken before any sandbox was made).
// Every rejected promise of the SDK that is not a call we abandoned on
// purpose is a transport error, and there must be none; every call issued
// must end (no lost call). No assertion is about time.
// Figures go out as "# SOAK key ..." lines (bench/run-soak-bench reads them).
// A result that is no tool error but not the call's own output (a command
// cut by the engine's stop, say) counts as a failed call ("wrong").
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';

import { check, diag, notOk, ok, runMain } from './tap.mjs';
import { call, callOk, cfg, connect, createSandbox, disconnect, sleep, sseTransport, streamableTransport } from './util.mjs';

// The server's stderr is its audit log here: its last lines say nothing
// about a failed check of this script.
process.env.SBX_E2E_SERVER_LOG = '';

const num = (name, dflt) => Number(process.env[name] || dflt);
const SESSIONS = num('SBX_SOAK_SESSIONS', 50);
const SSE = num('SBX_SOAK_SSE', 10);
const CALLS = num('SBX_SOAK_CALLS', 10);
const SHARED = num('SBX_SOAK_SHARED', 4);
const DOWN_CALLS = num('SBX_SOAK_DOWN_CALLS', 50);
const PID = num('SBX_SOAK_PID', 0);
const PE_SCRIPT = process.env.SBX_SOAK_PRIVATE_ENGINE || '';
const PE_DIR = process.env.SBX_SOAK_PRIVATE_DIR || '';
const RUN = `${process.pid}`;
// A call that has no answer after this long is lost (the longest ones here,
// Python calls queued on a shared sandbox, take seconds).
const CALL_TIMEOUT = 60000;
const HALF = Math.ceil(CALLS / 2);

// What a tool error may say, by where it happened.
const DEATH = /container (was killed|stopped|was removed|is gone)|no longer runs/i;
const ENGINE = /engine/i;

// ---- the server's process ----
function proc() {
	const s = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
	const field = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? NaN);
	return { rss: field('VmRSS'), threads: field('Threads'), fds: fs.readdirSync(`/proc/${PID}/fd`).length };
}
// What the server's descriptors point at, by kind (socket:[inode] -> socket).
function fdKinds() {
	const kinds = {};
	for (const fd of fs.readdirSync(`/proc/${PID}/fd`)) {
		let t;
		try {
			t = fs.readlinkSync(`/proc/${PID}/fd/${fd}`).replace(/:\[\d+\]$/, '').replace(/^\/tmp\/.*/, '/tmp/...');
		} catch {
			continue;
		}
		kinds[t] = (kinds[t] || 0) + 1;
	}
	return kinds;
}

// ---- the engine: the private one of the run ----
function engineRequest(method, path) {
	return new Promise((resolve, reject) => {
		const req = http.request({ socketPath: cfg.engineSocket, method, path, headers: { Host: 'd' } }, (res) => {
			const chunks = [];
			res.on('data', (c) => chunks.push(c));
			res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
			res.on('error', reject);
		});
		req.setTimeout(60000, () => req.destroy(new Error(`${method} ${path}: no answer`)));
		req.on('error', reject);
		req.end();
	});
}

async function containerOf(sid) {
	const filters = encodeURIComponent(JSON.stringify({ label: [`org.mcp-sandbox.sandbox-id=${sid}`] }));
	const res = await engineRequest('GET', `/containers/json?all=1&filters=${filters}`);
	assert.equal(res.status, 200, `list: ${res.body}`);
	const list = JSON.parse(res.body);
	assert.equal(list.length, 1, `containers of sandbox ${sid}: ${list.length}`);
	return list[0].Id;
}

function privateEngine(cmd) {
	return new Promise((resolve, reject) => {
		const t0 = performance.now();
		execFile('bash', [PE_SCRIPT, cmd, cfg.engine, PE_DIR], { timeout: 300000 }, (err, stdout, stderr) => {
			const ms = Math.round(performance.now() - t0);
			if (err) reject(new Error(`tests/private-engine ${cmd}: ${err.message}\n${stderr}`));
			else resolve(ms);
		});
	});
}

// ---- the record of every call ----
const calls = []; // { session, phase, op, sid, t0, t1, outcome: ok|tool|transport|abandoned|pending, text }
const transportErrors = [];
let killDone = 0; // performance.now() when V's container was killed (0: not yet)
let engineDown = 0; // when the stop of the engine ended
let engineStopAt = 0; // when it began

function describe(e) {
	let t = `${e?.name || 'Error'}: ${e?.message ?? e}`;
	for (let c = e?.cause, d = 0; c && d < 3; c = c.cause, d++) t += ` <- ${c.code ? `[${c.code}] ` : ''}${c.message ?? c}`;
	return t;
}

// One call on CLIENT, recorded. OP: python|shell|list|ping. ABANDON: the
// signal of a call left on purpose.
async function one(w, op, sid, { signal, command } = {}) {
	const rec = { session: w.name, kind: w.kind, phase: w.phase, op, sid, t0: performance.now(), t1: 0, outcome: 'pending', text: '' };
	calls.push(rec);
	try {
		let r;
		const opts = { timeout: CALL_TIMEOUT, signal };
		if (op === 'ping') {
			await w.client.ping(opts);
			r = { isError: false };
		} else {
			const [name, args] =
				op === 'python'
					? ['execute_python_code', { sandbox_id: sid, code: `print(${w.i} * ${w.n})` }]
					: op === 'shell'
						? ['execute_terminal_command', { sandbox_id: sid, command: command || `echo ${w.name}-${w.n}` }]
						: ['list_sandboxes', {}];
			const res = await w.client.callTool({ name, arguments: args }, undefined, opts);
			const item = (res.content || []).find((c) => c.type === 'text');
			r = { isError: res.isError === true, text: item ? item.text : '' };
			// A result that is no tool error must be the call's own output.
			if (!r.isError && op === 'python' && !new RegExp(`"stdout":\\s*"${w.i * w.n}\\\\n"`).test(r.text)) r.wrong = true;
			if (!r.isError && op === 'shell' && !command && !new RegExp(`"stdout":\\s*"${w.name}-${w.n}\\\\n"`).test(r.text)) r.wrong = true;
		}
		rec.outcome = r.isError ? 'tool' : r.wrong ? 'wrong' : 'ok';
		rec.text = r.text || '';
	} catch (e) {
		if (signal?.aborted || w.leaving) {
			rec.outcome = 'abandoned';
		} else if (e?.code === -32001 && /timed out/i.test(e?.message || '')) {
			rec.outcome = 'lost'; // the SDK's request timeout: no answer came
			rec.text = describe(e);
		} else {
			rec.outcome = 'transport';
			rec.text = describe(e);
			transportErrors.push({ session: w.name, op, text: rec.text });
		}
	} finally {
		rec.t1 = performance.now();
		w.n++;
	}
	return rec;
}

// ---- sessions ----
let shared = []; // the shared sandboxes now
let victim = '';
let phase = 'A';
let recovered;
let markRecovered;
recovered = new Promise((r) => (markRecovered = r));
let stopBegun;
let markStopBegun;
stopBegun = new Promise((r) => (markStopBegun = r));
let killed;
let markKilled;
killed = new Promise((r) => (markKilled = r));
let doneA = 0;
let aCalls = 0;

// A session that cannot connect tries again, up to 10 times, each failure
// counted as a transport error; false when it never could.
async function reopen(w) {
	for (let t = 0; t < 10; t++) {
		if (await open(w)) return true;
		await sleep(250);
	}
	return false;
}

async function open(w) {
	w.client = undefined;
	try {
		w.client = await connect(w.kind === 'sse' ? sseTransport() : streamableTransport(), `soak-${w.name}`);
		return true;
	} catch (e) {
		transportErrors.push({ session: w.name, op: 'connect', text: describe(e) });
		return false;
	}
}

function pick(w, j) {
	const ops = ['python', 'shell', 'list', 'python', 'ping', 'shell'];
	return ops[(w.i + j) % ops.length];
}

// A tool call of the control session (the harness's own: probes, the
// restart's recovery, the teardown). It is one more client from 127.0.0.1:
// a call that fails in transport is counted as a transport error and tried
// again, up to 10 times. Returns call()'s { json, text, isError }.
async function ctlCall(ctl, name, args) {
	for (let t = 0; ; t++) {
		try {
			return await call(ctl, name, args, CALL_TIMEOUT);
		} catch (e) {
			transportErrors.push({ session: 'control', op: name, text: describe(e) });
			if (t >= 9) throw e;
			await sleep(250);
		}
	}
}

// How many processes in SID have MARK in their command line (the marker is
// cut in two in the command that looks, so that it never finds itself).
async function countMarked(ctl, sid, mark) {
	const a = mark.slice(0, 6);
	const b = mark.slice(6);
	const r = await ctlCall(ctl, 'execute_terminal_command', {
		sandbox_id: sid,
		command: `n=0; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <"$f" 2>/dev/null | grep -q "${a}""${b}" && n=$((n+1)); done; echo $n`,
	});
	assert.ok(!r.isError && r.json, `the look for ${mark}: ${r.text}`);
	return Number(r.json.stdout.trim());
}

const cancels = []; // { session, how, mark, seen, gone }

// A session that leaves mid-call: a long sleep in a shared sandbox, seen
// running, then abandoned (HOW: abort | close), then its processes must go.
async function leaveMidCall(w, ctl, how) {
	const sid = shared[w.i % shared.length];
	const mark = `soakcancel${RUN}x${w.i}`;
	const entry = { session: w.name, kind: w.kind, how, mark, seen: false, gone: false };
	cancels.push(entry);
	const count = () =>
		countMarked(ctl, sid, mark).catch((e) => {
			diag(`the look for ${mark} failed: ${describe(e)}`);
			return -1;
		});
	const ac = new AbortController();
	const pending = one(w, 'shell', sid, { signal: how === 'abort' ? ac.signal : undefined, command: `sleep 600 && echo ${mark}` });
	const rec = calls[calls.length - 1];
	for (let k = 0; k < 120 && !entry.seen && !rec.t1; k++) {
		if ((await count()) > 0) entry.seen = true;
		else await sleep(250);
	}
	if (rec.t1) entry.ended = `${rec.outcome}: ${rec.text.slice(0, 120)}`; // it ended before it was left
	if (how === 'abort') {
		ac.abort(new Error('the soak abandons this call'));
	} else {
		w.leaving = true;
		await w.client.close().catch(() => {});
		w.client = undefined;
	}
	await pending;
	for (let k = 0; k < 120; k++) {
		if ((await count()) === 0) {
			entry.gone = true;
			break;
		}
		await sleep(250);
	}
	if (how === 'abort') return true;
	w.leaving = false;
	return reopen(w);
}

async function worker(w, ctl) {
	let j = 0;
	try {
		if (!(await reopen(w))) return;
		const onVictim = w.i % 10 === 5;
		const leaving = w.i % 10 === 7 ? (w.kind === 'sse' ? 'close' : w.i === 17 ? 'abort' : 'close') : '';
		// A
		for (; j < HALF; j++) {
			if (onVictim && j === HALF - 3) await killed;
			if (leaving && j === Math.floor(HALF / 2) && !(await leaveMidCall(w, ctl, leaving))) return;
			const op = pick(w, j);
			const sid = onVictim && (op === 'python' || op === 'shell') ? victim : shared[(w.i + j) % shared.length];
			await one(w, op, sid);
			doneA++;
		}
		w.phase = 'B';
		// B: from the engine's stop until it is back and the sandboxes answer
		await stopBegun;
		let done = false;
		recovered.then(() => (done = true));
		for (let b = 0; !done; b++) {
			await one(w, pick(w, b), shared[(w.i + b) % shared.length]);
			if (!done) await Promise.race([sleep(400), recovered]);
		}
		w.phase = 'C';
		for (j = HALF; j < CALLS; j++) await one(w, pick(w, j), shared[(w.i + j) % shared.length]);
		w.leaving = true;
		await disconnect(w.client);
	} catch (e) {
		transportErrors.push({ session: w.name, op: 'session', text: `the session stopped: ${describe(e)}` });
	} finally {
		if (w.phase === 'A') doneA += HALF - j; // the calls it will not make
		w.skipped = w.phase === 'A' ? CALLS - j : w.phase === 'B' ? CALLS - HALF : CALLS - j;
		w.phase = 'done';
	}
}

// Waits until every shared sandbox runs a Python call (Podman: they lived
// through the stop), or makes new ones (Docker stopped them).
async function recover(ctl) {
	for (let k = 0; k < 240; k++) {
		const rs = [];
		for (const sid of shared) rs.push(await ctlCall(ctl, 'execute_python_code', { sandbox_id: sid, code: 'print(1)' }));
		if (rs.every((r) => !r.isError)) return 'the shared sandboxes answer again';
		if (rs.some((r) => r.isError && DEATH.test(r.text || ''))) {
			const fresh = [];
			for (let s = 0; s < SHARED; s++) {
				for (let t = 0; ; t++) {
					const r = await ctlCall(ctl, 'create_sandbox', {});
					if (!r.isError && r.json?.sandbox_id) {
						fresh.push(r.json.sandbox_id);
						break;
					}
					if (t >= 120) throw new Error(`create_sandbox after the restart: ${r.text}`);
					await sleep(500);
				}
			}
			for (const sid of fresh) {
				const r = await ctlCall(ctl, 'execute_python_code', { sandbox_id: sid, code: 'print(1)' });
				if (r.isError) throw new Error(`a new sandbox's first Python call: ${r.text}`);
			}
			replaced.push(...shared);
			shared = fresh;
			return `the shared sandboxes died with the engine (${rs.find((r) => r.isError).text.slice(0, 160)}): ${SHARED} new ones made`;
		}
		await sleep(500);
	}
	throw new Error('the shared sandboxes do not answer 120 s after the engine is back');
}
const replaced = [];
const workersNow = [];

async function main() {
	assert.ok(PID > 0, 'SBX_SOAK_PID is not set');
	const ctl = await check('the control session connects', () => connect(streamableTransport(), 'soak-control'));
	if (!ctl) return;
	// The pool of the default settings fills first: its containers are part of the start.
	await sleep(2000);
	const before = proc();
	diag(`SOAK before ${before.rss} ${before.threads} ${before.fds}`);
	diag(`SOAK fds-before ${JSON.stringify(fdKinds())}`);
	const made = await check(`${SHARED} shared sandboxes and the victim V are made and run Python`, async () => {
		for (let s = 0; s < SHARED; s++) shared.push(await createSandbox(ctl));
		victim = await createSandbox(ctl);
		for (const sid of [...shared, victim]) await callOk(ctl, 'execute_python_code', { sandbox_id: sid, code: 'x = 1' });
		return true;
	});
	if (!made) return;
	const vContainer = await check('the engine names the victim\'s container', () => containerOf(victim));

	const workers = workersNow;
	for (let i = 0; i < SESSIONS; i++) workers.push({ i, n: 0, phase: 'A', kind: i < SSE ? 'sse' : 'streamable', name: `${i < SSE ? 'sse' : 'http'}${i}`, leaving: false });
	aCalls = SESSIONS * HALF;
	let peak = before;
	const sampler = setInterval(() => {
		try {
			const p = proc();
			peak = { rss: Math.max(peak.rss, p.rss), threads: Math.max(peak.threads, p.threads), fds: Math.max(peak.fds, p.fds) };
		} catch {
			/* the server is gone: other checks say so */
		}
	}, 100);
	const t0 = performance.now();
	const running = Promise.all(workers.map((w) => worker(w, ctl)));

	// A: the kill, once 40% of A's calls ended.
	const kill = (async () => {
		while (doneA < aCalls * 0.4) await sleep(50);
		const r = await engineRequest('POST', `/containers/${vContainer}/kill?signal=KILL`);
		killDone = performance.now();
		markKilled();
		return r;
	})();
	const kr = await kill;
	diag(`V (${victim}) killed through the engine: HTTP ${kr.status}`);
	// B: the engine stop, once every session is past A.
	while (workers.some((w) => w.phase === 'A')) await sleep(100);
	phase = 'B';
	let restart = '';
	try {
		engineStopAt = performance.now();
		markStopBegun();
		const stopMs = await privateEngine('stop');
		engineDown = performance.now();
		const downCalls = () => calls.filter((c) => c.t0 >= engineDown && c.t1 > 0).length;
		for (let k = 0; k < 600 && downCalls() < DOWN_CALLS; k++) await sleep(100);
		const startMs = await privateEngine('start');
		const how = await recover(ctl);
		restart = `stopped in ${stopMs} ms, ${downCalls()} calls ended while it was down, started in ${startMs} ms; ${how}`;
	} catch (e) {
		restart = `FAILED: ${describe(e)}`;
	}
	const recoveredAt = performance.now();
	markRecovered();
	phase = 'C';
	await running;
	const t1 = performance.now();
	clearInterval(sampler);

	// ---- the end: everything goes (the control session's transport errors
	// on the way count with the others) ----
	await check('the run\'s sandboxes are deleted', async () => {
		for (const sid of [...shared, victim, ...replaced]) await ctlCall(ctl, 'delete_sandbox', { sandbox_id: sid });
		const l = (await ctlCall(ctl, 'list_sandboxes', {})).json || {};
		assert.ok(Array.isArray(l.sandboxes), `list_sandboxes: ${JSON.stringify(l).slice(0, 300)}`);
		const live = l.sandboxes.filter((s) => s.status !== 'deleted');
		assert.equal(live.length, 0, `left: ${JSON.stringify(live).slice(0, 300)}`);
	});
	// ---- checks ----
	const byOutcome = (list) => {
		const o = {};
		for (const c of list) o[c.outcome] = (o[c.outcome] || 0) + 1;
		return JSON.stringify(o);
	};
	diag(`calls: ${calls.length} ${byOutcome(calls)}; A ${byOutcome(calls.filter((c) => c.phase === 'A'))}, B ${byOutcome(calls.filter((c) => c.phase === 'B'))}, C ${byOutcome(calls.filter((c) => c.phase === 'C'))}`);
	diag(`engine restart: ${restart}`);

	if (transportErrors.length === 0) ok(`no transport error over ${calls.length} calls of ${SESSIONS} sessions (${SSE} SSE)`);
	else {
		const kinds = {};
		for (const t of transportErrors) {
			const k = `${t.op}: ${t.text.slice(0, 160)}`;
			kinds[k] = (kinds[k] || 0) + 1;
		}
		notOk(`no transport error over ${calls.length} calls of ${SESSIONS} sessions (${SSE} SSE): ${transportErrors.length} failed`);
		diag(Object.entries(kinds).map(([k, n]) => `${n} x ${k}`).join('\n'));
	}
	const skipped = workers.reduce((a, w) => a + (w.skipped || 0), 0);
	const gaveUp = workers.filter((w) => w.skipped > 0).map((w) => w.name);
	if (skipped === 0) ok(`every session connected and made its ${CALLS} calls`);
	else notOk(`every session connected and made its ${CALLS} calls: ${gaveUp.length} sessions gave up (could not connect 10 times running, or their session failed), ${skipped} of ${SESSIONS * CALLS} calls never made: ${gaveUp.slice(0, 10).join(' ')}`);
	const pending = calls.filter((c) => c.outcome === 'pending' || c.outcome === 'lost');
	if (pending.length === 0) ok(`no lost call: each of the ${calls.length} calls had its answer`);
	else notOk(`no lost call: ${pending.length} of ${calls.length} had no answer (${calls.filter((c) => c.outcome === 'lost').length} timed out after ${CALL_TIMEOUT / 1000} s)`);

	const onV = calls.filter((c) => c.sid === victim && c.phase === 'A');
	const vBefore = onV.filter((c) => c.t1 < killDone);
	const vAfter = onV.filter((c) => c.t0 > killDone);
	const otherA = calls.filter((c) => c.phase === 'A' && c.sid !== victim && c.outcome !== 'abandoned' && c.outcome !== 'transport');
	const badA = otherA.filter((c) => c.outcome !== 'ok');
	if (badA.length === 0) ok(`A: the ${otherA.length} calls not on V succeed while V is killed`);
	else {
		notOk(`A: the ${otherA.length} calls not on V succeed while V is killed (${badA.length} tool errors)`);
		diag(badA.slice(0, 5).map((c) => `${c.session} ${c.op} ${c.outcome}: ${c.text.slice(0, 300)}`).join('\n'));
	}
	const vOkBefore = vBefore.filter((c) => c.outcome === 'ok').length;
	const vBad = vAfter.filter((c) => c.outcome !== 'transport' && !(c.outcome === 'tool' && DEATH.test(c.text)));
	const vDeath = vAfter.filter((c) => c.outcome === 'tool' && DEATH.test(c.text));
	if (vOkBefore > 0 && vDeath.length > 0 && vBad.length === 0) ok(`A: calls on V succeed before the kill (${vOkBefore}), after it each is a tool error naming its container's death (${vDeath.length}): ${vDeath[0].text.slice(0, 200)}`);
	else {
		notOk(`A: calls on V succeed before the kill (${vOkBefore}), after it each is a tool error naming its container's death (${vDeath.length}; ${vBad.length} other)`);
		diag(vBad.slice(0, 5).map((c) => `${c.session} ${c.op} ${c.outcome}: ${c.text.slice(0, 300)}`).join('\n'));
	}
	// A call that failed in transport before it ran is counted there.
	const cancelText = cancels.map((c) => `${c.session} ${c.how}: ${c.ended ? `ended before it was left (${c.ended})` : c.seen ? 'ran' : 'NOT SEEN'}, ${c.gone ? 'gone' : 'STILL THERE'}`).join('; ');
	const ran = cancels.filter((c) => !(c.ended && c.ended.startsWith('transport')));
	if (ran.length > 0 && ran.every((c) => c.seen && c.gone && !c.ended)) ok(`A: ${cancels.length} sessions leave mid-call (abort or transport closed): each call's sleep ran and is gone afterwards: ${cancelText}`);
	else notOk(`A: ${cancels.length} sessions leave mid-call: each call's sleep ran and is gone afterwards: ${cancelText}`);

	const inB = calls.filter((c) => c.phase === 'B' && c.outcome !== 'transport');
	const engineErr = inB.filter((c) => c.outcome === 'tool' && ENGINE.test(c.text));
	const badB = inB.filter((c) => c.outcome === 'wrong' || (c.outcome === 'tool' && !ENGINE.test(c.text) && !DEATH.test(c.text)));
	if (!restart.startsWith('FAILED') && engineErr.length > 0 && badB.length === 0) ok(`B: the engine restarts (${restart}); ${inB.length} calls meanwhile, ${engineErr.length} tool errors naming the engine (${engineErr[0].text.slice(0, 200)}), none saying anything else`);
	else {
		notOk(`B: the engine restarts (${restart}); tool errors name the engine (${engineErr.length}) or the sandbox's death; ${badB.length} other failures (results that are not the call's output, or tool errors saying something else)`);
		diag(badB.slice(0, 5).map((c) => `${c.session} ${c.op} ${c.outcome}: ${c.text.slice(0, 300)}`).join('\n'));
	}
	const inC = calls.filter((c) => c.phase === 'C' && c.outcome !== 'transport');
	const badC = inC.filter((c) => c.outcome !== 'ok');
	const sessionsC = new Set(inC.filter((c) => c.outcome === 'ok').map((c) => c.session));
	if (badC.length === 0 && sessionsC.size === SESSIONS) ok(`C: after the engine is back, the ${inC.length} calls of all ${SESSIONS} sessions succeed again`);
	else {
		// The first failure in the line itself: a report that keeps only the
		// log's last lines still says what it was.
		const first = badC.length ? `; first: ${badC[0].session} ${badC[0].op} ${badC[0].outcome} after ${(badC[0].t1 - badC[0].t0).toFixed(0)} ms: ${badC[0].text.slice(0, 300)}` : '';
		notOk(`C: after the engine is back, the ${inC.length} calls succeed (${badC.length} failed; ${sessionsC.size} of ${SESSIONS} sessions${first})`);
		diag(badC.slice(0, 5).map((c) => `${c.session} ${c.op} ${c.outcome}: ${c.text.slice(0, 300)}`).join('\n'));
	}

	// ---- figures ----
	const okMs = calls.filter((c) => c.outcome === 'ok' && c.phase !== 'B').map((c) => c.t1 - c.t0).sort((a, b) => a - b);
	const q = (p) => (okMs.length ? okMs[Math.min(okMs.length - 1, Math.round(p * (okMs.length - 1)))].toFixed(1) : 'nan');
	const acCalls = calls.filter((c) => c.phase !== 'B').length;
	const seconds = (t1 - t0 - (recoveredAt - engineStopAt)) / 1000;
	diag(`SOAK calls ${calls.length} ok ${calls.filter((c) => c.outcome === 'ok').length} tool ${calls.filter((c) => c.outcome === 'tool').length} wrong ${calls.filter((c) => c.outcome === 'wrong').length} transport ${transportErrors.length} abandoned ${calls.filter((c) => c.outcome === 'abandoned').length} lost ${pending.length} not-made ${skipped} sessions-gave-up ${gaveUp.length}`);
	const slow = calls.filter((c) => c.t1 > 0 && c.phase !== 'B').sort((a, b) => b.t1 - b.t0 - (a.t1 - a.t0)).slice(0, 5);
	diag(`SOAK slowest of A and C: ${slow.map((c) => `${c.session} ${c.op} ${c.phase} ${c.outcome} ${(c.t1 - c.t0).toFixed(0)} ms`).join('; ')}`);
	diag(`SOAK rate ${(acCalls / seconds).toFixed(1)} calls/s over phases A and C (${acCalls} calls in ${seconds.toFixed(1)} s, the restart's ${((recoveredAt - engineStopAt) / 1000).toFixed(1)} s left out)`);
	diag(`SOAK latency p50 ${q(0.5)} p99 ${q(0.99)} ms (${okMs.length} successful calls of A and C)`);
	diag(`SOAK peak ${peak.rss} ${peak.threads} ${peak.fds}`);

	await disconnect(ctl);
	// The server's threads, RSS and descriptors after the run are checked by
	// tests/e2e/soak.sh once this process has exited: until then the idle
	// keep-alive connections of its HTTP client stay open on the server.
}

// Stopped by the harness's time limit: say where the run was.
process.on('SIGTERM', () => {
	const open = calls.filter((c) => c.outcome === 'pending');
	diag(`stopped: phase ${phase}, ${calls.length} calls, ${open.length} without an answer (${open.slice(0, 5).map((c) => `${c.session} ${c.op} ${c.phase}`).join(', ')}), ${transportErrors.length} transport errors, workers ${JSON.stringify(workersNow.reduce((o, w) => ((o[w.phase] = (o[w.phase] || 0) + 1), o), {}))}`);
});
runMain(main, 'the soak');
