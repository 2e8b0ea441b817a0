// SPDX-License-Identifier: MIT
// A flat TAP producer for automake's tap-driver: one "ok N - name" or
// "not ok N - name" line per check, "# " diagnostics, no plan (the wrapper,
// tests/e2e/run.sh, adds its own checks and prints the plan at the end).
// The points are numbered from SBX_E2E_TAP_OFFSET + 1: run.sh runs more than
// one node script in one TAP stream.
import { readFileSync } from 'node:fs';

const offset = Number(process.env.SBX_E2E_TAP_OFFSET || 0);
let count = 0;
let failures = 0;

function clean(name) {
	// '#' would start a TAP directive, a newline a new TAP line.
	return String(name).replace(/[#\n\r]/g, ' ');
}

// Diagnostics, cut to a readable size (a failing assertion may hold a
// whole tool result).
export function diag(text, maxLines = 40, maxLine = 400) {
	const lines = String(text).split('\n');
	for (const line of lines.slice(0, maxLines))
		process.stdout.write(`# ${line.length > maxLine ? `${line.slice(0, maxLine)}... (${line.length} chars)` : line}\n`);
	if (lines.length > maxLines) process.stdout.write(`# ... (${lines.length - maxLines} more lines)\n`);
}

// The last lines of the server's stderr, shown after each failure.
function serverTail(lines = 15) {
	const file = process.env.SBX_E2E_SERVER_LOG;
	if (!file) return;
	let text;
	try {
		text = readFileSync(file, 'utf8');
	} catch {
		return;
	}
	const tail = text.trimEnd().split('\n').slice(-lines);
	if (tail.length === 0 || (tail.length === 1 && tail[0] === '')) return;
	diag(`--- last ${tail.length} lines of the server's stderr:`);
	diag(tail.map((l) => `  ${l}`).join('\n'), lines + 1);
}

// What failed, with the causes behind it: Node's "fetch failed" says what
// happened to the connection only in err.cause (ECONNRESET, "other side
// closed", UND_ERR_SOCKET and the socket's addresses).
function describe(err) {
	if (err && err.name === 'AssertionError') return err.message;
	let text = err && err.stack ? err.stack.split('\n').slice(0, 6).join('\n') : String(err);
	for (let c = err?.cause, depth = 0; c && depth < 4; c = c.cause, depth++) {
		const code = c.code ? ` [${c.code}]` : '';
		const socket = c.socket ? ` ${JSON.stringify(c.socket)}` : '';
		text += `\ncaused by: ${c.name || 'Error'}${code}: ${c.message ?? String(c)}${socket}`;
	}
	return text;
}

export function ok(name) {
	count++;
	process.stdout.write(`ok ${offset + count} - ${clean(name)}\n`);
}

export function notOk(name, err) {
	count++;
	failures++;
	process.stdout.write(`not ok ${offset + count} - ${clean(name)}\n`);
	if (err !== undefined) diag(describe(err));
	serverTail();
}

// Runs FN as one TAP point, within LIMIT ms. Returns FN's value, or
// undefined when it failed (later steps check their prerequisites).
export async function check(name, fn, limit = 120000) {
	let timer;
	const timeout = new Promise((_, reject) => {
		timer = setTimeout(() => reject(new Error(`timed out after ${limit} ms`)), limit);
	});
	try {
		const value = await Promise.race([Promise.resolve().then(fn), timeout]);
		ok(name);
		return value;
	} catch (err) {
		notOk(name, err);
		return undefined;
	} finally {
		clearTimeout(timer);
	}
}

// A node script's whole life: exits on SIGTERM/SIGINT/SIGHUP (so that 'exit'
// hooks end child processes), reports unhandled rejections, runs MAIN, says
// how many checks ran, and exits 0 (the TAP points carry the failures) or 1
// when MAIN threw (then WHAT stopped).
export function runMain(main, what) {
	for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => process.exit(1));
	process.on('unhandledRejection', (e) => diag(`unhandled rejection: ${e && e.stack ? e.stack : e}`));
	main().then(
		() => {
			diag(`${count} checks, ${failures} failed`);
			process.exit(0);
		},
		(e) => {
			diag(`${what} stopped: ${e && e.stack ? e.stack : e}`);
			process.exit(1);
		},
	);
}
