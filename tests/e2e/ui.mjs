// SPDX-License-Identifier: MIT
// The page (/ui, src/http/ui_route.c) in a real browser: Debian's chromium
// driven by playwright-core, headless, against the server tests/e2e/ui.sh
// started with API keys. Tenant alice's sandbox is made with the SDK client,
// with a PNG, a CSV, an HTML file that tries to run script and a text file
// under /app/results; tenant bob has one too. Then, in the browser: / leads
// to /ui with its Content-Security-Policy; a wrong key shows the server's
// refusal; alice's key shows her sandbox (not bob's), kept over a reload in
// sessionStorage (nothing in localStorage); her files: the PNG drawn from its
// signed link (and a ranged fetch of it from the page: 206), the CSV as a table whose markup-looking cell is text, the HTML
// in a sandboxed srcdoc frame (frame-src 'none' lets it be) where its script does not run, the text, a download;
// a delete dismissed keeps the sandbox, one confirmed removes it (the page and
// list_sandboxes agree); log out. All along: the key only ever in an
// Authorization header of POST/DELETE /mcp (never in a URL), no error or CSP
// violation on the page itself. Screenshots go to SBX_UI_SCREENSHOTS.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

import { chromium } from 'playwright-core';

import { check, diag, notOk, runMain } from './tap.mjs';
import { callOk, cfg, connect, createSandbox, disconnect, streamableTransport } from './util.mjs';

const CHROMIUM = process.env.SBX_UI_CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SBX_UI_SCREENSHOTS || path.join(cfg.tmp, 'ui-screenshots');
const WAIT = 30000;

// A 40x20 PNG, made in the sandbox with zlib alone (no library needed).
const MAKE_FILES = `
import struct, zlib
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
w, h = 40, 20
raw = b''.join(b'\\x00' + bytes([200, 30, 30]) * w for _ in range(h))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
open('plot.png', 'wb').write(png)
open('data.csv', 'w').write('city,note,value\\nParis,"a, quoted ""comma""",1\\nOslo,<b>not markup</b>,2\\n')
open('report.html', 'w').write("<h1 id='h'>Report</h1><script>document.getElementById('h').textContent='SCRIPT RAN'; parent.document.title='PWNED'</script><img src='x' onerror=\\"parent.document.title='PWNED'\\">")
open('notes.txt', 'w').write('plain notes <i>not italic</i>\\n')
print('made')
`;

async function shot(page, name) {
	try {
		await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
	} catch (e) {
		diag(`screenshot ${name}: ${e.message}`);
	}
}

function rowOf(page, sid) {
	return page.locator(`#sandbox-table tbody tr[data-sandbox-id="${sid}"]`);
}

function fileLink(page, name) {
	return page.locator('#file-list li a.name', { hasText: name });
}

async function main() {
	mkdirSync(SHOTS, { recursive: true });
	const alice = await connect(streamableTransport(cfg.key), 'ui-test-alice');
	const bob = await connect(streamableTransport(cfg.keyBob), 'ui-test-bob');
	let browser;
	try {
		const sid = await check('alice makes a sandbox with files (SDK client)', async () => {
			const id = await createSandbox(alice, 'ui-test');
			const r = await callOk(alice, 'execute_python_code', { sandbox_id: id, code: MAKE_FILES });
			assert.match(r.stdout || '', /made/, JSON.stringify(r));
			return id;
		});
		const bobSid = await check('bob makes a sandbox too', () => createSandbox(bob, 'bob-private'));
		if (!sid) return;

		browser = await check(`chromium starts (${CHROMIUM}, headless)`, () =>
			chromium.launch({
				executablePath: CHROMIUM,
				headless: true,
				args: process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [],
			}),
		);
		if (!browser) return;
		diag(`chromium ${browser.version()}`);
		const context = await browser.newContext({ acceptDownloads: true });
		const page = await context.newPage();

		// What the page does all along.
		const pageErrors = [];
		const cspViolations = [];
		const keyInUrl = [];
		const mcpAuth = [];
		page.on('pageerror', (e) => pageErrors.push(e.message));
		page.on('console', (m) => {
			const where = m.location() ? m.location().url : '';
			if (/Content Security Policy/i.test(m.text()) && !where.startsWith('about:srcdoc')) cspViolations.push(`${where}: ${m.text()}`);
		});
		page.on('request', (rq) => {
			for (const k of [cfg.key, cfg.keyBob, 'msk_wrong'])
				if (k && rq.url().includes(k)) keyInUrl.push(rq.url());
			if (new URL(rq.url()).pathname.endsWith('/mcp')) mcpAuth.push({ method: rq.method(), auth: rq.headers().authorization || '' });
		});

		await check('GET / leads to /ui, served with the page\'s Content-Security-Policy and nosniff', async () => {
			const resp = await page.goto(`${cfg.base}/`);
			assert.equal(new URL(page.url()).pathname, '/ui');
			const h = resp.headers();
			assert.match(h['content-security-policy'] || '', /default-src 'self'/);
			assert.match(h['content-security-policy'] || '', /frame-ancestors 'none'/);
			assert.match(h['content-security-policy'] || '', /frame-src 'none'/);
			assert.equal(h['x-content-type-options'], 'nosniff');
			await page.locator('#key').waitFor({ timeout: WAIT });
		});
		await shot(page, '01-login');

		await check('a wrong key shows the server\'s refusal, and the login stays', async () => {
			await page.fill('#key', 'msk_wrong_key_for_the_page_test');
			await page.click('#login-button');
			const err = page.locator('#error');
			await err.waitFor({ state: 'visible', timeout: WAIT });
			const text = await err.textContent();
			assert.match(text, /refused the API key/, text);
			assert.ok(await page.locator('#login').isVisible());
			assert.ok(!(await page.locator('#sandboxes').isVisible()));
			assert.equal(await page.evaluate(() => sessionStorage.length), 0);
			diag(`shown: ${text}`);
		});
		await shot(page, '02-wrong-key');

		await check('alice\'s key shows her sandbox: name, status, expiry; not bob\'s', async () => {
			await page.fill('#key', cfg.key);
			await page.click('#login-button');
			const row = rowOf(page, sid);
			await row.waitFor({ timeout: WAIT });
			const cells = await row.locator('td').allTextContents();
			assert.equal(cells[0], 'ui-test');
			assert.equal(cells[1], sid);
			assert.equal(cells[2], 'running');
			assert.match(cells[4], /^in \d/, `expires: ${cells[4]}`);
			assert.match(cells[7], /^\d+\.\d s CPU, \d.* memory, \d.* disk$/, `usage: ${cells[7]}`);
			assert.ok(!(await page.locator('#error').isVisible()));
			if (bobSid) assert.equal(await rowOf(page, bobSid).count(), 0, 'bob\'s sandbox is on alice\'s page');
			assert.equal(await page.locator('#key').inputValue(), '', 'the key stays in the input');
		});
		await shot(page, '03-sandboxes');

		await check('the key is in sessionStorage only, and a reload keeps the page logged in', async () => {
			assert.equal(await page.evaluate(() => localStorage.length), 0);
			const stored = await page.evaluate(() => Object.values(sessionStorage));
			assert.deepEqual(stored, [cfg.key]);
			await page.reload();
			await rowOf(page, sid).waitFor({ timeout: WAIT });
		});

		await check('Files lists her four files (MCP resources)', async () => {
			await rowOf(page, sid).locator('button.files').click();
			for (const f of ['plot.png', 'data.csv', 'report.html', 'notes.txt']) await fileLink(page, f).waitFor({ timeout: WAIT });
			assert.equal(await page.locator('#file-list li').count(), 4);
		});
		await shot(page, '04-files');

		await check('the PNG is drawn from its signed link on the page\'s origin', async () => {
			await fileLink(page, 'plot.png').click();
			const img = page.locator('#preview img');
			await img.waitFor({ timeout: WAIT });
			await page.waitForFunction(() => {
				const i = document.querySelector('#preview img');
				return i && i.complete && i.naturalWidth > 0;
			}, null, { timeout: WAIT });
			const { w, h, src } = await img.evaluate((i) => ({ w: i.naturalWidth, h: i.naturalHeight, src: i.src }));
			assert.equal(w, 40);
			assert.equal(h, 20);
			const u = new URL(src);
			assert.equal(u.origin, new URL(cfg.base).origin);
			assert.match(u.pathname, new RegExp(`^/artifacts/${sid}/plot\\.png$`));
			assert.match(u.search, /[?&]sig=/);
		});
		await shot(page, '05-png');

		await check('a ranged fetch of the PNG from the page\'s origin: 206, its first 8 bytes', async () => {
			const src = await page.locator('#preview img').getAttribute('src');
			const got = await page.evaluate(async (url) => {
				const r = await fetch(url, { headers: { Range: 'bytes=0-7' } });
				const b = new Uint8Array(await r.arrayBuffer());
				return { status: r.status, range: r.headers.get('content-range'), accept: r.headers.get('accept-ranges'), bytes: [...b] };
			}, src);
			assert.equal(got.status, 206);
			assert.match(got.range || '', /^bytes 0-7\/\d+$/);
			assert.equal(got.accept, 'bytes');
			assert.deepEqual(got.bytes, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
		});

		await check('the CSV is a table; a cell that looks like markup is text', async () => {
			await fileLink(page, 'data.csv').click();
			const table = page.locator('#preview table.csv-table');
			await table.waitFor({ timeout: WAIT });
			assert.deepEqual(await table.locator('thead th').allTextContents(), ['city', 'note', 'value']);
			const rows = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
			assert.deepEqual(rows, [
				['Paris', 'a, quoted "comma"', '1'],
				['Oslo', '<b>not markup</b>', '2'],
			]);
			assert.equal(await table.locator('b').count(), 0);
		});
		await shot(page, '06-csv');

		await check('the HTML is shown in a sandboxed frame where its script does not run', async () => {
			await fileLink(page, 'report.html').click();
			const frameEl = page.locator('#preview iframe');
			await frameEl.waitFor({ timeout: WAIT });
			const frame = await (await frameEl.elementHandle()).contentFrame();
			await frame.locator('#h').waitFor({ timeout: WAIT });
			await page.waitForTimeout(500);
			assert.equal(await frame.locator('#h').textContent(), 'Report', 'the file\'s script ran');
			assert.equal(await page.title(), 'mcp-sandbox', 'the file\'s script or handler reached the page');
			assert.equal(await frameEl.getAttribute('sandbox'), '');
		});
		await shot(page, '07-html');

		await check('the text file is shown as text', async () => {
			await fileLink(page, 'notes.txt').click();
			const pre = page.locator('#preview pre');
			await pre.waitFor({ timeout: WAIT });
			assert.equal(await pre.textContent(), 'plain notes <i>not italic</i>\n');
			assert.equal(await pre.locator('i').count(), 0);
		});

		await check('Download saves the CSV through its signed link', async () => {
			const li = page.locator('#file-list li', { has: page.locator('a.name', { hasText: 'data.csv' }) });
			const [dl] = await Promise.all([page.waitForEvent('download', { timeout: WAIT }), li.locator('a.download').click()]);
			assert.equal(dl.suggestedFilename(), 'data.csv');
			assert.match(dl.url(), /\/artifacts\/.+\/data\.csv\?.*sig=/);
			const file = await dl.path();
			assert.match(await readFile(file, 'utf8'), /^city,note,value\n/);
		});

		await check('a delete dismissed at the confirmation keeps the sandbox', async () => {
			page.once('dialog', (d) => d.dismiss());
			await rowOf(page, sid).locator('button.delete').click();
			await page.waitForTimeout(500);
			assert.equal(await rowOf(page, sid).count(), 1);
		});

		await check('a delete confirmed removes it: gone from the page and from list_sandboxes', async () => {
			let asked = '';
			page.once('dialog', (d) => {
				asked = d.message();
				d.accept();
			});
			await rowOf(page, sid).locator('button.delete').click();
			await rowOf(page, sid).waitFor({ state: 'detached', timeout: WAIT });
			assert.match(asked, new RegExp(`Delete sandbox ui-test \\(${sid}\\)`));
			assert.ok(await page.locator('#no-sandboxes').isVisible());
			assert.ok(!(await page.locator('#files').isVisible()), 'the files of a deleted sandbox stay shown');
			const list = await callOk(alice, 'list_sandboxes', {});
			assert.ok(!list.sandboxes.some((s) => s.sandbox_id === sid), JSON.stringify(list));
		});
		await shot(page, '08-deleted');

		await check('Log out: the login again, nothing in sessionStorage', async () => {
			await page.click('#logout');
			await page.locator('#key').waitFor({ state: 'visible', timeout: WAIT });
			assert.equal(await page.evaluate(() => sessionStorage.length), 0);
		});

		await check('the key went only in Authorization headers to /mcp, never in a URL', () => {
			assert.deepEqual(keyInUrl, []);
			assert.ok(mcpAuth.length > 0);
			assert.ok(mcpAuth.some((m) => m.auth === `Bearer ${cfg.key}`));
			for (const m of mcpAuth) assert.match(m.auth, /^Bearer msk_/, JSON.stringify(m));
		});
		await check('no script error and no Content-Security-Policy violation on the page', () => {
			assert.deepEqual(pageErrors, []);
			assert.deepEqual(cspViolations, []);
		});
	} catch (e) {
		notOk('the browser steps ran', e);
	} finally {
		if (browser) await browser.close().catch(() => {});
		await disconnect(alice);
		await disconnect(bob);
	}
}

runMain(main, 'ui.mjs');
