// SPDX-License-Identifier: MIT
// Case 1: the seed's workflow through the official SDK client, once per
// transport: initialize, tools/list, list -> create -> install -> check ->
// execute, a plot and a CSV fetched through their artifact links, the
// terminal tool.
import assert from 'node:assert/strict';

import { check } from './tap.mjs';
import { TOOLS, call, callOk, cfg, connect, createSandbox, disconnect, installAndWait, raw } from './util.mjs';

// Checks the tools/list answer: the seven tools of the seed and delete_sandbox with their
// exact names and parameters; a tool added since must still be well formed.
// Returns the tools by name.
export function checkToolList(tools) {
	const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
	assert.equal(Object.keys(byName).length, tools.length, 'no tool twice');
	const missing = Object.keys(TOOLS).filter((n) => !byName[n]);
	assert.deepEqual(missing, [], `the tools, exact names: missing ${missing.join(', ')}`);
	for (const t of tools) {
		assert.match(t.name, /^[A-Za-z0-9_.-]{1,64}$/, `tool name ${JSON.stringify(t.name)}`);
		assert.equal(t.inputSchema?.type, 'object', `${t.name}: inputSchema is an object schema`);
	}
	for (const [name, want] of Object.entries(TOOLS)) {
		const t = byName[name];
		assert.ok(typeof t.description === 'string' && t.description.length > 10, `${name} has a description`);
		assert.equal(t.inputSchema.type, 'object', `${name}: inputSchema is an object schema`);
		const props = Object.keys(t.inputSchema.properties || {}).sort();
		assert.deepEqual(props, [...want.params].sort(), `${name}: parameter names`);
		const req = [...(t.inputSchema.required || [])].sort();
		assert.deepEqual(req, [...want.required].sort(), `${name}: required parameters`);
	}
	return byName;
}

const PLOT_CODE = `
import matplotlib.pyplot as plt
import pandas as pd
plt.plot([1, 2, 3], [1, 4, 9])
plt.title('e2e')
plt.savefig('plot.png')
pd.DataFrame({'x': [1, 2, 3], 'y': [1, 4, 9]}).to_csv('data.csv', index=False)
print('saved')
`;
const CSV_TEXT = 'x,y\n1,1\n2,4\n3,9\n';
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

// Files with active content (script a browser would run) and one without a
// known type, written by code.
const ACTIVE_FILES = [
	['page.html', '<!doctype html><title>e2e</title><script>document.title = "ran"</script>\n'],
	['PAGE.HTM', '<html><body onload="alert(1)">e2e</body></html>\n'],
	['pic.svg', '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>\n'],
	['data.xml', '<?xml version="1.0"?><a>e2e</a>\n'],
	['noext', '<html><script>alert(1)</script></html>\n'],
];
const ACTIVE_CODE = `${ACTIVE_FILES.map(([name, text]) => `open(${JSON.stringify(name)}, 'w').write(${JSON.stringify(text)})`).join('\n')}\nprint('written')\n`;
// What src/http/artifact_route.c sends per file: [name, Content-Type,
// Content-Security-Policy or null when absent]. X-Content-Type-Options:
// nosniff and Cache-Control: no-store always.
const ARTIFACT_HEADERS = [
	['plot.png', 'image/png', null],
	['data.csv', 'text/csv; charset=utf-8', null],
	['page.html', 'text/html; charset=utf-8', 'sandbox'],
	['PAGE.HTM', 'text/html; charset=utf-8', 'sandbox'],
	['pic.svg', 'image/svg+xml', 'sandbox'],
	['data.xml', 'application/xml', 'sandbox'],
	['noext', 'application/octet-stream', null],
];

function fileNamed(files, base) {
	const f = files.find((x) => typeof x.path === 'string' && x.path.split('/').pop() === base);
	assert.ok(f, `${base} is not among the files: ${JSON.stringify(files)}`);
	return f;
}

// The workflow over one transport; LABEL names the TAP points.
export async function seedWorkflow(label, makeTransport) {
	const t = (name) => `${label}: ${name}`;
	const client = await check(t('initialize'), async () => {
		const c = await connect(makeTransport(), `e2e-seed-${label}`);
		const info = c.getServerVersion();
		assert.ok(info && typeof info.name === 'string' && info.name.length > 0, 'serverInfo.name');
		assert.ok(typeof info.version === 'string' && info.version.length > 0, 'serverInfo.version');
		assert.ok(c.getServerCapabilities()?.tools, 'the tools capability is advertised');
		const instr = c.getInstructions();
		assert.equal(typeof instr, 'string', 'instructions are given');
		assert.match(instr, /savefig/, 'the instructions mention savefig');
		return c;
	});
	if (!client) return;
	try {
		await check(t('tools/list: the tools, exact names and parameters'), async () => {
			const { tools } = await client.listTools();
			checkToolList(tools);
		});
		await check(t('ping answers {}'), async () => {
			assert.deepEqual(await client.ping(), {});
		});

		await check(t('list_sandboxes answers before any create'), async () => {
			await callOk(client, 'list_sandboxes', {});
		});
		const sid = await check(t('create_sandbox gives a sandbox id'), async () => createSandbox(client, `e2e-${label.replace(/[^A-Za-z0-9_.-]/g, "-")}`));
		if (!sid) return;
		await check(t('list_sandboxes lists the new sandbox'), async () => {
			const list = await callOk(client, 'list_sandboxes', {});
			assert.ok(JSON.stringify(list).includes(sid), `${sid} not in ${JSON.stringify(list)}`);
		});

		const installed = await check(t('install sbxdemo, poll its status until success'), async () => {
			const seen = await installAndWait(client, sid, 'sbxdemo');
			return seen;
		}, 200000);
		await check(t('check_package_installation_status of a package never installed: not_installed'), async () => {
			const st = await callOk(client, 'check_package_installation_status', { sandbox_id: sid, package_name: 'never-installed-e2e' });
			assert.equal(st.status, 'not_installed', JSON.stringify(st));
		});
		await check(t('execute_python_code imports sbxdemo and prints 42'), async () => {
			assert.ok(installed, 'the install step failed');
			const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: 'import sbxdemo; print(sbxdemo.VALUE)' });
			assert.equal(r.exit_code, 0, JSON.stringify(r));
			assert.equal(r.stdout.trim(), '42', JSON.stringify(r));
		});
		await check(t('execute_python_code: a raised exception gives its traceback and a non-zero exit'), async () => {
			const r = await call(client, 'execute_python_code', { sandbox_id: sid, code: 'raise ValueError("e2e-boom")' });
			assert.ok(r.json, `no JSON: ${r.text}`);
			assert.notEqual(r.json.exit_code, 0, r.text);
			assert.match(r.json.stderr, /ValueError: e2e-boom/, r.text);
		});

		const files = await check(t('a matplotlib plot and a pandas CSV come back as files with links'), async () => {
			const res = await call(client, 'execute_python_code', { sandbox_id: sid, code: PLOT_CODE }, 180000);
			assert.ok(!res.isError && res.json, `execute_python_code failed: ${res.text}`);
			assert.deepEqual(res.result.structuredContent, res.json, 'structuredContent is the text');
			const r = res.json;
			assert.equal(r.exit_code, 0, JSON.stringify(r));
			assert.match(r.stdout, /saved/);
			assert.ok(Array.isArray(r.files), `no files array: ${JSON.stringify(r)}`);
			const png = fileNamed(r.files, 'plot.png');
			const csv = fileNamed(r.files, 'data.csv');
			for (const f of [png, csv]) {
				assert.ok(Number.isInteger(f.size) && f.size > 0, `size of ${f.path}`);
				assert.ok(f.url.startsWith(`${cfg.base}/artifacts/`), `link ${f.url} is under ${cfg.base}/artifacts/`);
				assert.ok(f.url.includes(encodeURIComponent(sid)), `link ${f.url} names the sandbox`);
				assert.match(new URL(f.url).search, /^\?exp=[1-9][0-9]*&kid=[0-9a-f]{12}&sig=[A-Za-z0-9_-]{43}$/, `link ${f.url} is signed`);
			}
			assert.equal(png.mime_type, 'image/png');
			assert.match(csv.mime_type, /^text\/csv/);
			// 2025-06-18 and later: a resource_link content item per file.
			const links = (res.result.content || []).filter((c) => c.type === 'resource_link');
			for (const f of [png, csv]) {
				const l = links.find((x) => x.uri === f.url);
				assert.ok(l, `no resource_link for ${f.url} in ${JSON.stringify(res.result.content)}`);
				assert.equal(l.mimeType, f.mime_type);
			}
			return { png, csv };
		}, 200000);

		await check(t('the PNG link: magic bytes, image/png, Content-Length, inline'), async () => {
			assert.ok(files, 'no files from the previous step');
			const res = await fetch(files.png.url);
			assert.equal(res.status, 200);
			const body = Buffer.from(await res.arrayBuffer());
			assert.deepEqual(body.subarray(0, 8), PNG_MAGIC, 'PNG signature');
			assert.match(res.headers.get('content-type') || '', /^image\/png/);
			assert.equal(Number(res.headers.get('content-length')), body.length, 'Content-Length is the body length');
			assert.equal(body.length, files.png.size, 'the size in the result is the size served');
			assert.match(res.headers.get('content-disposition') || '', /^inline/);
		});
		await check(t('the CSV link: text/csv and the text written'), async () => {
			assert.ok(files, 'no files from the previous step');
			const res = await fetch(files.csv.url);
			assert.equal(res.status, 200);
			assert.match(res.headers.get('content-type') || '', /^text\/csv/);
			assert.equal(await res.text(), CSV_TEXT);
		});
		await check(t('artifact headers: nosniff and no-store on every file; CSP sandbox on HTML, SVG and XML only'), async () => {
			assert.ok(files, 'no files from the previous step');
			const res = await call(client, 'execute_python_code', { sandbox_id: sid, code: ACTIVE_CODE });
			assert.ok(!res.isError && res.json, `execute_python_code failed: ${res.text}`);
			assert.equal(res.json.exit_code, 0, res.text);
			const served = [files.png, files.csv, ...ACTIVE_FILES.map(([base]) => fileNamed(res.json.files, base))];
			for (const f of served) {
				const base = f.path.split('/').pop();
				const [, type, csp] = ARTIFACT_HEADERS.find(([b]) => b === base);
				for (const method of ['GET', 'HEAD']) {
					const r = await fetch(f.url, { method });
					const what = `${method} ${base}`;
					assert.equal(r.status, 200, what);
					assert.equal(r.headers.get('content-type'), type, `${what}: Content-Type`);
					assert.equal(r.headers.get('x-content-type-options'), 'nosniff', `${what}: X-Content-Type-Options`);
					assert.equal(r.headers.get('cache-control'), 'no-store', `${what}: Cache-Control`);
					assert.equal(r.headers.get('content-security-policy'), csp, `${what}: Content-Security-Policy`);
					assert.equal(r.headers.get('content-disposition'), `inline; filename="${base}"`, `${what}: Content-Disposition`);
					const body = Buffer.from(await r.arrayBuffer());
					assert.equal(body.length, method === 'GET' ? f.size : 0, `${what}: body length`);
				}
			}
		});
		await check(t('artifacts: a signed link to a file removed since is 404; hand-made links are 403'), async () => {
			assert.ok(files, 'no files from the earlier step');
			const r = await call(client, 'execute_python_code', { sandbox_id: sid, code: "open('gone-e2e.txt', 'w').write('x')" });
			assert.ok(!r.isError && r.json, r.text);
			const gone = fileNamed(r.json.files, 'gone-e2e.txt');
			assert.equal((await fetch(gone.url)).status, 200, 'the link before the file is removed');
			await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'rm /app/results/gone-e2e.txt' });
			const missing = await fetch(gone.url);
			assert.equal(missing.status, 404, 'a signed link to a missing file');
			const s = encodeURIComponent(sid);
			for (const path of [`/artifacts/${s}/no-such-file-e2e.png`, '/artifacts/no-such-sandbox-e2e/plot.png', `/artifacts/${s}/plot.png`]) {
				const res = await raw({ path });
				assert.equal(res.status, 403, `${path} without a signature: HTTP ${res.status}`);
				assert.match(res.body.toString('utf8'), /invalid link/, path);
			}
			// The plot's signed link with another path, or with its query cut, is 403 too.
			const u = new URL(files.png.url);
			const other = await raw({ path: u.pathname.replace(/plot\.png$/, 'data.csv') + u.search });
			assert.equal(other.status, 403, 'the PNG link with the path of the CSV');
			const cut = await raw({ path: `${u.pathname}?exp=${u.searchParams.get('exp')}` });
			assert.equal(cut.status, 403, 'the PNG link without its sig');
		});
		await check(t("artifacts: '..' in the path is refused (400 when the path is malformed, else 403: no link is signed for it)"), async () => {
			assert.ok(files, 'no files from the earlier step');
			const s = encodeURIComponent(sid);
			const { search } = new URL(files.png.url);
			for (const [path, status] of [
				[`/artifacts/${s}/../../../../etc/passwd`, 403],
				[`/artifacts/${s}/..%2F..%2F..%2Fetc%2Fpasswd`, 400],
				[`/artifacts/${s}/%2e%2e/%2e%2e/%2e%2e/etc/passwd`, 403],
				[`/artifacts/${s}/../plot.png`, 403],
				[`/artifacts/${s}/../plot.png${search}`, 403],
				[`/artifacts/${s}/%2e%2e/plot.png${search}`, 403],
				[`/artifacts/..%2F${s}/plot.png`, 400],
				[`/artifacts/..%2F${s}/plot.png${search}`, 400],
			]) {
				const res = await raw({ path });
				assert.equal(res.status, status, `${path}: HTTP ${res.status}`);
				assert.ok(!res.body.toString('latin1').includes('root:'), `${path} leaked /etc/passwd`);
			}
		});

		await check(t('execute_terminal_command: echo, exit code 0'), async () => {
			const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'echo hello-e2e' });
			assert.equal(r.exit_code, 0, JSON.stringify(r));
			assert.equal(r.stdout, 'hello-e2e\n');
		});
		await check(t('execute_terminal_command: stderr and a non-zero exit code'), async () => {
			const r = await call(client, 'execute_terminal_command', { sandbox_id: sid, command: 'echo oops-e2e >&2; exit 3' });
			assert.ok(r.json, `no JSON: ${r.text}`);
			assert.equal(r.json.exit_code, 3, r.text);
			assert.match(r.json.stderr, /oops-e2e/, r.text);
			assert.equal(r.json.stdout, '', r.text);
		});
		await check(t('execute_terminal_command sees the files in /app/results'), async () => {
			const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'cd /app/results && ls' });
			assert.match(r.stdout, /plot\.png/);
			assert.match(r.stdout, /data\.csv/);
		});
		await check(t('delete_sandbox: deleted; then a call on it says so, the list and its links forget it'), async () => {
			const r = await callOk(client, 'delete_sandbox', { sandbox_id: sid });
			assert.equal(r.deleted, true, JSON.stringify(r));
			assert.equal(r.sandbox_id, sid, JSON.stringify(r));
			const after = await call(client, 'execute_python_code', { sandbox_id: sid, code: 'print(1)' });
			assert.ok(after.isError, `a call after the delete: ${after.text}`);
			assert.match(after.text, /was deleted/);
			const list = await callOk(client, 'list_sandboxes', {});
			assert.ok(!JSON.stringify(list).includes(sid), `${sid} still listed: ${JSON.stringify(list)}`);
			assert.ok(files, 'no files from the earlier step');
			const u = new URL(files.png.url);
			const link = await raw({ path: u.pathname + u.search });
			assert.equal(link.status, 404, 'its (signed) artifact link');
		});
	} finally {
		await disconnect(client);
	}
}
