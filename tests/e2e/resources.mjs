// SPDX-License-Identifier: MIT
// Files as MCP resources (src/tools/resources.c) through the official SDK
// client, once per transport: the capability, notifications/resources/
// list_changed after a run that writes files, listResources (every page)
// with the files of the run, listResourceTemplates, readResource of a text
// file and of a PNG (a blob of its bytes, the same as its _meta link
// serves), a traversal refused with -32602, and bob's read of alice's file
// answered -32002 like a sandbox that does not exist.
import assert from 'node:assert/strict';

import { ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { check } from './tap.mjs';
import { callOk, cfg, connect, createSandbox, disconnect, sleep, sseTransport, streamableTransport } from './util.mjs';

const PLOT_CODE = `
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.savefig('res-plot.png')
open('res-note.txt', 'w').write('r\\u00e9sum\\u00e9 e2e\\n')
print('saved')
`;
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

// Every entry of every page.
async function listAll(client) {
	const all = [];
	let cursor;
	for (let pages = 0; pages < 50; pages++) {
		const r = await client.listResources(cursor ? { cursor } : {});
		all.push(...r.resources);
		cursor = r.nextCursor;
		if (!cursor) return all;
	}
	throw new Error('more than 50 pages');
}

// Waits up to MS for PRED() to hold.
async function waitFor(pred, ms) {
	const end = Date.now() + ms;
	while (!pred() && Date.now() < end) await sleep(50);
	return pred();
}

async function resourcesOver(label, makeTransport) {
	const t = (name) => `resources (${label}): ${name}`;
	let changed = 0;
	const client = await check(t('initialize advertises resources with listChanged'), async () => {
		const c = await connect(makeTransport(), `e2e-resources-${label}`);
		assert.equal(c.getServerCapabilities()?.resources?.listChanged, true, JSON.stringify(c.getServerCapabilities()));
		c.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
			changed++;
		});
		return c;
	});
	if (!client) return;
	let sid;
	try {
		sid = await check(t('create a sandbox'), async () => createSandbox(client, `e2e-res-${label.replace(/[^A-Za-z0-9_.-]/g, '-')}`), 120000);
		if (!sid) return;
		await check(t('notifications/resources/list_changed after a run that writes files'), async () => {
			changed = 0;
			const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: PLOT_CODE }, 180000);
			assert.equal(r.exit_code, 0, JSON.stringify(r));
			assert.ok(await waitFor(() => changed > 0, 5000), 'no list_changed within 5 s of the response');
			changed = 0;
			await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'echo e2e > res-cmd.txt' });
			assert.ok(await waitFor(() => changed > 0, 5000), 'no list_changed after a command that wrote a file');
		}, 200000);
		const base = `sandbox://${sid}/`;
		const mine = await check(t('listResources: the files of the run, with mimeType, size and a link'), async () => {
			const all = await listAll(client);
			const byName = Object.fromEntries(all.filter((r) => r.uri.startsWith(base)).map((r) => [r.name, r]));
			for (const name of ['res-plot.png', 'res-note.txt', 'res-cmd.txt']) {
				const r = byName[name];
				assert.ok(r, `${name} not listed: ${JSON.stringify(all.map((x) => x.uri))}`);
				assert.equal(r.uri, `${base}${name}`);
				assert.ok(Number.isInteger(r.size) && r.size > 0, `${name}: size ${r.size}`);
				const link = r._meta?.['mcp-sandbox/link'];
				assert.ok(typeof link === 'string' && link.startsWith(`${cfg.base}/artifacts/`), `${name}: link ${link}`);
			}
			assert.equal(byName['res-plot.png'].mimeType, 'image/png');
			assert.match(byName['res-note.txt'].mimeType, /^text\/plain/);
			return byName;
		});
		await check(t('listResourceTemplates: sandbox://{sandbox_id}/{path}'), async () => {
			const r = await client.listResourceTemplates();
			assert.ok(r.resourceTemplates.some((x) => x.uriTemplate === 'sandbox://{sandbox_id}/{path}'), JSON.stringify(r));
		});
		await check(t('readResource of a text file: its text'), async () => {
			const r = await client.readResource({ uri: `${base}res-note.txt` });
			assert.equal(r.contents.length, 1);
			assert.equal(r.contents[0].uri, `${base}res-note.txt`);
			assert.equal(r.contents[0].text, 'r\u00e9sum\u00e9 e2e\n');
		});
		await check(t('readResource of a PNG: a base64 blob of the bytes its link serves'), async () => {
			const r = await client.readResource({ uri: `${base}res-plot.png` });
			const c = r.contents[0];
			assert.equal(c.mimeType, 'image/png');
			assert.equal(c.text, undefined);
			const bytes = Buffer.from(c.blob, 'base64');
			assert.deepEqual(bytes.subarray(0, 8), PNG_MAGIC, 'PNG signature');
			assert.ok(mine, 'no listing from the step before');
			assert.equal(bytes.length, mine['res-plot.png'].size, 'the listed size');
			const res = await fetch(mine['res-plot.png']._meta['mcp-sandbox/link']);
			assert.equal(res.status, 200);
			assert.deepEqual(Buffer.from(await res.arrayBuffer()), bytes, 'the link serves the same bytes');
		});
		await check(t('readResource: sandbox://ID/%2e%2e/etc/passwd is -32602'), async () => {
			await assert.rejects(client.readResource({ uri: `${base}%2e%2e/%2e%2e/etc/passwd` }), (e) => {
				assert.equal(e.code, -32602, String(e));
				assert.match(e.message, /malformed resource URI/);
				return true;
			});
		});
		await check(t("readResource of another tenant's file is -32002, as for no sandbox"), async () => {
			assert.ok(cfg.keyBob, 'SBX_E2E_KEY_BOB is not set');
			const bob = await connect(makeTransport(cfg.keyBob), `e2e-resources-bob-${label}`);
			try {
				await assert.rejects(bob.readResource({ uri: `${base}res-note.txt` }), (e) => {
					assert.equal(e.code, -32002, String(e));
					assert.match(e.message, /no sandbox/);
					return true;
				});
				const list = await listAll(bob);
				assert.ok(!list.some((r) => r.uri.startsWith(base)), "bob lists none of alice's files");
			} finally {
				await disconnect(bob);
			}
		});
	} finally {
		if (sid) await callOk(client, 'delete_sandbox', { sandbox_id: sid }).catch(() => {});
		await disconnect(client);
	}
}

export async function resourcesCase() {
	await resourcesOver('SSE', sseTransport);
	await resourcesOver('Streamable HTTP', streamableTransport);
}
