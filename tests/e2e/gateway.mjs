// SPDX-License-Identifier: MIT
// Case 2: through supergateway, as the seed's client configuration uses it
// (`npx -y supergateway --sse "http://HOST:PORT/sse?api_key=KEY"`): MCP over
// the bridge's stdio, spoken by the SDK's StdioClientTransport.
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { check, diag } from './tap.mjs';
import { callOk, cfg, createSandbox, sseUrlWithKey } from './util.mjs';
import { checkToolList } from './seed.mjs';

export async function gatewayCase() {
	const t = (name) => `supergateway: ${name}`;
	let stderr = '';
	let transport;
	const client = await check(t('initialize over stdio through the bridge'), async () => {
		assert.ok(cfg.gateway, 'SBX_E2E_GATEWAY (the supergateway program) is not set');
		transport = new StdioClientTransport({
			command: process.execPath,
			args: [cfg.gateway, '--sse', sseUrlWithKey(), '--logLevel', 'info'],
			stderr: 'pipe',
			env: { ...process.env },
		});
		transport.stderr?.on('data', (d) => {
			stderr += d.toString();
			if (stderr.length > 20000) stderr = stderr.slice(-10000);
		});
		const c = new Client({ name: 'e2e-supergateway', version: '1.0.0' }, { capabilities: {} });
		await c.connect(transport);
		// Should this process be stopped, the bridge goes with it.
		const pid = transport.pid;
		if (pid) process.once('exit', () => {
			try {
				process.kill(pid, 'SIGTERM');
			} catch {
				/* already gone */
			}
		});
		assert.ok(c.getServerVersion()?.name, 'serverInfo.name through the bridge');
		return c;
	}, 60000);
	const dump = () => {
		if (stderr) diag(`--- supergateway stderr (tail):\n${stderr.trimEnd().split('\n').slice(-10).join('\n')}`);
	};
	if (!client) {
		dump();
		await transport?.close().catch(() => {});
		return;
	}
	let failed = false;
	const step = async (name, fn, limit) => {
		const v = await check(t(name), fn, limit);
		if (v === undefined) failed = true;
		return v;
	};
	try {
		await step('tools/list', async () => {
			const { tools } = await client.listTools();
			checkToolList(tools);
			return true;
		});
		const sid = await step('create_sandbox', async () => createSandbox(client, 'e2e-gateway'));
		await step('execute_python_code prints', async () => {
			assert.ok(sid, 'no sandbox from the previous step');
			const r = await callOk(client, 'execute_python_code', { sandbox_id: sid, code: 'print("via", "gateway", 6 * 7)' });
			assert.equal(r.exit_code, 0, JSON.stringify(r));
			assert.equal(r.stdout, 'via gateway 42\n');
			return true;
		});
	} finally {
		if (failed) dump();
		await client.close().catch(() => {});
	}
}
