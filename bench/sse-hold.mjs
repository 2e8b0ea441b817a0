// SPDX-License-Identifier: MIT
// Opens N idle legacy SSE sessions (GET /sse held open, each on its own TCP
// connection) against BASE_URL and reads the server's memory while they are
// open, from /proc/PID/status (the server runs on this machine).
//   node sse-hold.mjs BASE_URL N PID
// A session counts as accepted once its `endpoint` event arrived; one that is
// refused, closed or silent for 5 s does not. Prints RESULT-style lines:
//   SSE attempted N accepted A refused R (reasons)
//   RSS <label> <kB> threads <T>
//   SSE released_after_ms MS  (until the thread count is back, at most 30 s)
// and closes every connection before it exits.
import fs from 'node:fs';
import http from 'node:http';

const [base, nArg, pidArg] = process.argv.slice(2);
const N = Number(nArg || 1000);
const PID = Number(pidArg);
const PARALLEL = Math.min(N, Number(process.env.SBX_BENCH_SSE_PARALLEL || 250));
const WAIT_MS = 5000;

function status(label, quiet = false) {
	const s = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
	const rss = Number(/VmRSS:\s+(\d+)/.exec(s)?.[1] ?? NaN);
	const threads = Number(/Threads:\s+(\d+)/.exec(s)?.[1] ?? NaN);
	if (!quiet) console.log(`RSS ${label} ${rss} threads ${threads}`);
	return threads;
}

const open = [];
const reasons = {};
let accepted = 0;

function one() {
	return new Promise((resolve) => {
		let done = false;
		const finish = (ok, why) => {
			if (done) return;
			done = true;
			clearTimeout(timer);
			if (ok) accepted++;
			else reasons[why] = (reasons[why] || 0) + 1;
			resolve();
		};
		const req = http.get(`${base}/sse`, { agent: false, headers: { Accept: 'text/event-stream' } }, (res) => {
			if (res.statusCode !== 200) {
				res.resume();
				req.destroy();
				return finish(false, `HTTP ${res.statusCode}`);
			}
			let buf = '';
			res.setEncoding('utf8');
			res.on('data', (d) => {
				buf += d;
				if (!done && buf.includes('event: endpoint')) {
					open.push(req);
					finish(true);
				}
				if (buf.length > 65536) buf = buf.slice(-1024);
			});
			res.on('close', () => finish(false, 'closed'));
		});
		const timer = setTimeout(() => {
			req.destroy();
			finish(false, 'no endpoint event in 5 s');
		}, WAIT_MS);
		req.on('error', (e) => finish(false, e.code || e.message));
	});
}

const threads0 = status('before');
let started = 0;
async function worker() {
	while (started < N) {
		started++;
		await one();
	}
}
await Promise.all(Array.from({ length: Math.min(PARALLEL, N) }, worker));
await new Promise((r) => setTimeout(r, 1000));
// Accepted but closed since (e.g. by a connection cap) does not count.
const alive = open.filter((r) => !r.destroyed && r.socket && !r.socket.destroyed).length;
const why = Object.entries(reasons)
	.map(([k, v]) => `${v}x ${k}`)
	.join(', ');
console.log(`SSE attempted ${N} accepted ${accepted} alive ${alive} refused ${N - accepted}${why ? ` (${why})` : ''}`);
status('held');
// How long the server takes to notice that the clients went away.
for (const r of open) r.destroy();
const t0 = Date.now();
while (status('after', true) > threads0 && Date.now() - t0 < 30000) await new Promise((r) => setTimeout(r, 250));
console.log(`SSE released_after_ms ${Date.now() - t0}`);
status('after');
