// SPDX-License-Identifier: MIT
// The end-to-end suite: drives a running mcp-sandboxd (SBX_E2E_URL) with the
// official MCP TypeScript SDK client and supergateway. Started by
// tests/e2e/run.sh, which owns the server, the package index and the plan;
// this prints flat TAP points (no plan) on stdout.
//
// SBX_E2E_ONLY=seed,gateway,http,outside,resources,upload,bad,timeout,many,slow,flood,tenants runs a subset
// (adopt, the adoption phase, is run.sh's and tests/e2e/adopt.mjs').
import { check, diag, runMain } from './tap.mjs';
import { cfg, connect, createSandbox, disconnect, sseTransport, streamableTransport } from './util.mjs';
import { seedWorkflow } from './seed.mjs';
import { gatewayCase } from './gateway.mjs';
import { uploadCase } from './upload.mjs';
import { badInputCase } from './badinput.mjs';
import { httpCase } from './http.mjs';
import { floodCase, manySessionsCase, slowCallCase, timeoutCase } from './concurrency.mjs';
import { outsideCase } from './outside.mjs';
import { tenantsCase } from './tenants.mjs';
import { resourcesCase } from './resources.mjs';

const only = process.env.SBX_E2E_ONLY ? new Set(process.env.SBX_E2E_ONLY.split(',')) : null;
const want = (name) => !only || only.has(name);

async function main() {
	diag(`server ${cfg.base} on ${cfg.engine}`);
	if (want('seed')) {
		await seedWorkflow('SSE', sseTransport);
		await seedWorkflow('Streamable HTTP', streamableTransport);
	}
	if (want('gateway')) await gatewayCase();
	if (want('http')) await httpCase();
	if (want('outside')) await outsideCase();
	if (want('resources')) await resourcesCase();

	// One session and one sandbox shared by the remaining cases.
	if (['upload', 'bad', 'timeout', 'many', 'slow', 'flood'].some(want)) {
		const client = await check('shared session and sandbox for the remaining cases', async () => connect(streamableTransport(), 'e2e-shared'), 30000);
		const sid = client ? await check('create the shared sandbox', async () => createSandbox(client, 'e2e-shared'), 120000) : undefined;
		try {
			if (client && sid) {
				if (want('upload')) await uploadCase(client, sid);
				if (want('bad')) await badInputCase(client, sid);
				if (want('timeout')) await timeoutCase(client, sid);
			}
			if (want('many')) await manySessionsCase(sid);
			if (want('slow')) await slowCallCase(sid);
			if (want('flood')) await floodCase(sid);
		} finally {
			await disconnect(client);
		}
	}
	// Last: its refusals of bad keys count against 127.0.0.1 (a few).
	if (want('tenants')) await tenantsCase();
}

runMain(main, 'the suite');
