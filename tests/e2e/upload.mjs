// SPDX-License-Identifier: MIT
// Case 3: upload_file_to_sandbox copies files from inside sandbox.upload_dir
// only: no absolute path elsewhere, no symlink pointing out, no '..'.
import assert from 'node:assert/strict';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { check } from './tap.mjs';
import { callErr, callOk, cfg } from './util.mjs';

export async function uploadCase(client, sid) {
	const t = (name) => `upload: ${name}`;
	const content = `uploaded by the e2e suite ${process.pid}\n`;
	const inside = path.join(cfg.uploadDir, 'hello-e2e.txt');
	writeFileSync(inside, content);
	mkdirSync(path.join(cfg.uploadDir, 'sub'), { recursive: true });
	writeFileSync(path.join(cfg.uploadDir, 'sub', 'nested-e2e.txt'), 'nested\n');
	const outside = path.join(cfg.tmp, 'outside-e2e.txt');
	writeFileSync(outside, 'secret outside the upload folder\n');
	symlinkSync('/etc/passwd', path.join(cfg.uploadDir, 'link-to-passwd'));
	symlinkSync(outside, path.join(cfg.uploadDir, 'link-outside'));
	symlinkSync(cfg.tmp, path.join(cfg.uploadDir, 'link-dir'));

	await check(t('a file inside the upload folder lands in /app/results, with a link'), async () => {
		const u = await callOk(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: inside });
		assert.equal(u.path, '/app/results/hello-e2e.txt', JSON.stringify(u));
		assert.equal(u.size, Buffer.byteLength(content));
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'cat /app/results/hello-e2e.txt' });
		assert.equal(r.exit_code, 0, JSON.stringify(r));
		assert.equal(r.stdout, content);
		assert.ok(u.url, `no url in ${JSON.stringify(u)}`);
		const res = await fetch(u.url);
		assert.equal(res.status, 200);
		assert.equal(await res.text(), content);
	});
	await check(t("'..' that stays inside the folder, and dest_path as a file path"), async () => {
		const u = await callOk(client, 'upload_file_to_sandbox', {
			sandbox_id: sid,
			local_file_path: `${cfg.uploadDir}/sub/../hello-e2e.txt`,
			dest_path: '/app/results/renamed-e2e.txt',
		});
		assert.equal(u.path, '/app/results/renamed-e2e.txt', JSON.stringify(u));
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'cat renamed-e2e.txt' });
		assert.equal(r.stdout, content);
	});
	await check(t('a nested file with an explicit dest_path'), async () => {
		await callOk(client, 'upload_file_to_sandbox', {
			sandbox_id: sid,
			local_file_path: path.join(cfg.uploadDir, 'sub', 'nested-e2e.txt'),
			dest_path: '/app/results',
		});
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'cat /app/results/nested-e2e.txt' });
		assert.equal(r.stdout, 'nested\n', JSON.stringify(r));
	});
	await check(t('/etc/passwd (outside the folder) is refused'), async () => {
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: '/etc/passwd' });
	});
	await check(t('a file next to the folder is refused'), async () => {
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: outside });
	});
	await check(t('symlinks in the folder pointing out are refused'), async () => {
		for (const name of ['link-to-passwd', 'link-outside', 'link-dir/outside-e2e.txt'])
			await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: path.join(cfg.uploadDir, name) }, name);
	});
	await check(t("'..' out of the folder is refused"), async () => {
		const viaDots = `${cfg.uploadDir}/../outside-e2e.txt`;
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: viaDots }, viaDots);
		const deep = `${cfg.uploadDir}/sub/../../outside-e2e.txt`;
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: deep }, deep);
	});
	await check(t('a missing file and a directory are refused'), async () => {
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: path.join(cfg.uploadDir, 'missing-e2e') });
		await callErr(client, 'upload_file_to_sandbox', { sandbox_id: sid, local_file_path: path.join(cfg.uploadDir, 'sub') });
	});
	await check(t('nothing refused reached the sandbox'), async () => {
		const r = await callOk(client, 'execute_terminal_command', {
			sandbox_id: sid,
			command: 'grep -rl "secret outside" /app /tmp 2>/dev/null; ls /app/results',
		});
		assert.doesNotMatch(r.stdout, /outside-e2e|link-/, r.stdout);
	});
}
