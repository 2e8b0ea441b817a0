// SPDX-License-Identifier: MIT
// The adoption phase of tests/e2e/run.sh, one step per run:
//   node adopt.mjs before   against server A (sandbox.remove_on_exit=false):
//                           creates a named sandbox, leaves a file in
//                           /app/results and one in /tmp, fetches the
//                           file's artifact link, and hands the sandbox over
//                           in SBX_E2E_TMP/adopt.json;
//   node adopt.mjs after    against server B (same server.instance and state
//                           folder, started after A was stopped by SIGTERM):
//                           the sandbox is listed with the same id, name and
//                           creation time (and asleep), the first call wakes
//                           it and says so, its files are there, its artifact
//                           link works, its name is still taken.
// Flat TAP points like run.mjs, then "# N checks, F failed".
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';

import { check, diag, runMain } from './tap.mjs';
import { callErr, callOk, cfg, connect, disconnect, sandboxIdOf, streamableTransport } from './util.mjs';

const NAME = 'e2e-adopt';
const RESULT_FILE = 'adopted.txt';
const RESULT_TEXT = 'written before the restart\n';
const TMP_FILE = '/tmp/adopt-e2e.txt';
const TMP_LINE = 'shell state before the restart';
const TMP_TEXT = `${TMP_LINE}\n`;
const HANDOFF = `${cfg.tmp}/adopt.json`;
// A swarm cannot keep a stopped task's container: there sandboxes never sleep.
const SLEEPS = cfg.engine !== 'swarm';

// Waits up to 60 s for the sandbox named NAME to be listed sleeping.
async function asleep(client) {
	const until = Date.now() + 60000;
	let entry;
	while (Date.now() < until) {
		({ entry } = await listed(client));
		if (entry.status === 'sleeping') return entry;
		await new Promise((r) => setTimeout(r, 500));
	}
	assert.fail(`not asleep after 60 s: ${JSON.stringify(entry)}`);
}

function fileNamed(files, base) {
	assert.ok(Array.isArray(files), `no files array: ${JSON.stringify(files)}`);
	const f = files.find((x) => typeof x.path === 'string' && x.path.split('/').pop() === base);
	assert.ok(f, `${base} is not among the files: ${JSON.stringify(files)}`);
	return f;
}

// The one entry of list_sandboxes named NAME.
async function listed(client) {
	const list = await callOk(client, 'list_sandboxes', {});
	assert.ok(Array.isArray(list.sandboxes), JSON.stringify(list));
	const mine = list.sandboxes.filter((s) => s.name === NAME);
	assert.equal(mine.length, 1, `one sandbox named ${NAME}: ${JSON.stringify(list)}`);
	return { list, entry: mine[0] };
}

async function fetchText(url, what) {
	const res = await fetch(url);
	const text = await res.text();
	assert.equal(res.status, 200, `${what}: HTTP ${res.status} ${text.slice(0, 200)}`);
	assert.equal(res.headers.get('content-type'), 'text/plain; charset=utf-8', `${what}: Content-Type`);
	return text;
}

async function before(client) {
	const t = (name) => `adopt, server A: ${name}`;
	const handoff = {};
	const save = () => writeFileSync(HANDOFF, JSON.stringify(handoff));

	const sid = await check(t(`create_sandbox ${NAME}`), async () => {
		const json = await callOk(client, 'create_sandbox', { name: NAME });
		assert.equal(json.name, NAME, JSON.stringify(json));
		assert.equal(json.status, 'running', JSON.stringify(json));
		return sandboxIdOf(json);
	});
	if (!sid) return;
	handoff.sandbox_id = sid;
	handoff.name = NAME;
	save();
	await check(t('list_sandboxes lists it'), async () => {
		const { entry } = await listed(client);
		assert.equal(entry.sandbox_id, sid, JSON.stringify(entry));
		assert.equal(entry.status, 'running', JSON.stringify(entry));
		handoff.created = entry.created;
		save();
	});
	await check(t(`execute_python_code writes /app/results/${RESULT_FILE}; its link serves it`), async () => {
		const r = await callOk(client, 'execute_python_code', {
			sandbox_id: sid,
			code: `open(${JSON.stringify(RESULT_FILE)}, 'w').write(${JSON.stringify(RESULT_TEXT)})\nprint('written')`,
		});
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		const f = fileNamed(r.files, RESULT_FILE);
		assert.ok(f.url.startsWith(`${cfg.base}/artifacts/`), f.url);
		assert.equal(await fetchText(f.url, 'the link'), RESULT_TEXT);
		const u = new URL(f.url);
		assert.match(u.search, /^\?exp=[1-9][0-9]*&kid=[0-9a-f]{12}&sig=[A-Za-z0-9_-]{43}$/, `${f.url} is signed`);
		handoff.link_path = u.pathname + u.search;
		save();
	});
	await check(t(`execute_terminal_command writes ${TMP_FILE}`), async () => {
		const r = await callOk(client, 'execute_terminal_command', {
			sandbox_id: sid,
			command: `echo '${TMP_LINE}' > ${TMP_FILE} && cat ${TMP_FILE}`,
		});
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		assert.equal(r.stdout, TMP_TEXT, JSON.stringify(r));
	});
	if (SLEEPS)
		await check(t('unused for sandbox.idle_timeout, it is listed sleeping, since when, and when it expires'), async () => {
			const entry = await asleep(client);
			assert.match(entry.asleep_since ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, JSON.stringify(entry));
			assert.ok(entry.expires, JSON.stringify(entry));
			assert.equal(entry.reason, undefined, JSON.stringify(entry));
		}, 90000);
}

async function after(client) {
	const t = (name) => `adopt, server B: ${name}`;
	const handoff = await check(t('the handoff of server A is there'), async () => {
		const h = JSON.parse(readFileSync(HANDOFF, 'utf8'));
		for (const k of ['sandbox_id', 'name', 'created', 'link_path']) assert.ok(h[k], `no ${k} in ${JSON.stringify(h)}`);
		return h;
	});
	const sid = handoff?.sandbox_id;

	await check(t('list_sandboxes lists the sandbox alone, with the same id, name and creation time'), async () => {
		assert.ok(handoff, 'no handoff');
		const { list, entry } = await listed(client);
		assert.equal(entry.sandbox_id, sid, JSON.stringify(entry));
		assert.equal(entry.name, handoff.name, JSON.stringify(entry));
		assert.equal(entry.created, handoff.created, JSON.stringify(entry));
		// Adopted as it was left: asleep where it slept, not started.
		assert.equal(entry.status, SLEEPS ? 'sleeping' : 'running', JSON.stringify(entry));
		// Server A's pool containers were removed, not adopted.
		assert.equal(list.sandboxes.length, 1, JSON.stringify(list));
		assert.equal(list.count, 1, JSON.stringify(list));
	});
	await check(t(SLEEPS ? 'execute_terminal_command wakes it, says so, and sees the files of /app/results and /tmp' : 'execute_terminal_command sees the files of /app/results and /tmp'), async () => {
		assert.ok(sid, 'no sandbox id');
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: `cat /app/results/${RESULT_FILE} ${TMP_FILE}` });
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		assert.equal(r.stdout, RESULT_TEXT + TMP_TEXT, JSON.stringify(r));
		// The first call woke it: the result says so.
		if (SLEEPS) assert.match(r.notice ?? '', /was asleep .* woken for this call/, JSON.stringify(r));
	});
	await check(t('execute_python_code, given the name, reads the file'), async () => {
		assert.ok(handoff, 'no handoff');
		const r = await callOk(client, 'execute_python_code', { sandbox_id: handoff.name, code: `print(open('/app/results/${RESULT_FILE}').read(), end='')` });
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		assert.equal(r.stdout, RESULT_TEXT, JSON.stringify(r));
	});
	await check(t("server A's artifact link, on server B, serves the file"), async () => {
		assert.ok(handoff, 'no handoff');
		assert.equal(await fetchText(`${cfg.base}${handoff.link_path}`, handoff.link_path), RESULT_TEXT);
		// Signed with the secret of the state folder: the same link without its query is refused.
		const plain = await fetch(`${cfg.base}${handoff.link_path.split('?')[0]}`);
		assert.equal(plain.status, 403, 'the link without its signature');
	});
	await check(t('a file written now comes back with a working link'), async () => {
		assert.ok(sid, 'no sandbox id');
		const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: "open('after.txt', 'w').write('after\\n')" });
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		const f = fileNamed(r.files, 'after.txt');
		assert.ok(f.url.startsWith(`${cfg.base}/artifacts/`), f.url);
		assert.equal(await fetchText(f.url, 'the link'), 'after\n');
	});
	await check(t(`the name ${NAME} is still taken`), async () => {
		const r = await callErr(client, 'create_sandbox', { name: NAME }, 'create_sandbox of a taken name');
		assert.ok(r.text.includes(`a sandbox named "${NAME}" already exists`), r.text);
	});
}

async function main() {
	const step = process.argv[2];
	assert.ok(step === 'before' || step === 'after', `usage: adopt.mjs before|after (not ${step})`);
	diag(`adoption, ${step} the restart: server ${cfg.base} on ${cfg.engine}`);
	const client = await check(`adopt, server ${step === 'before' ? 'A' : 'B'}: initialize`, async () => connect(streamableTransport(), `e2e-adopt-${step}`), 30000);
	if (client) {
		try {
			if (step === 'before') await before(client);
			else await after(client);
		} finally {
			await disconnect(client);
		}
	}
}

runMain(main, 'the step');
