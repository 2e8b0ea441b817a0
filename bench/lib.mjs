// SPDX-License-Identifier: MIT
// Shared helpers of the node side of `make bench` (bench/run-mcp-bench):
// timing, quantiles, the official SDK client over Streamable HTTP, and a
// minimal keep-alive JSON-RPC client on node:http for comparison.
import http from 'node:http';
import { performance } from 'node:perf_hooks';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export const PROTOCOL = '2025-06-18';
export const now = () => performance.now();
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The q-quantile of V (nearest rank, as bench/bench-engine.c computes it).
export function quantile(v, q) {
	if (v.length === 0) return NaN;
	const s = [...v].sort((a, b) => a - b);
	const i = Math.min(s.length - 1, Math.round(q * (s.length - 1)));
	return s[i];
}

// One machine-readable line for run-mcp-bench: RESULT NAME P50 P99 N FAILED.
export function result(name, samples, failed = 0) {
	const f = (x) => (Number.isFinite(x) ? x.toFixed(3) : 'nan');
	console.log(`RESULT ${name} ${f(quantile(samples, 0.5))} ${f(quantile(samples, 0.99))} ${samples.length} ${failed}`);
}

export async function sdkConnect(base) {
	const client = new Client({ name: 'mcp-sandbox-bench', version: '1.0.0' }, { capabilities: {} });
	await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
	return client;
}

export async function sdkClose(client) {
	try {
		await client.transport.terminateSession();
	} catch {
		/* closing anyway */
	}
	await client.close().catch(() => {});
}

// The JSON object a tool answered with (structuredContent, else the first
// text item parsed), plus isError.
export function toolJson(res) {
	let json = res.structuredContent;
	if (!json) {
		const t = (res.content || []).find((c) => c.type === 'text');
		try {
			json = t ? JSON.parse(t.text) : undefined;
		} catch {
			json = undefined;
		}
	}
	return { json, isError: !!res.isError };
}

// A minimal Streamable HTTP client: one keep-alive connection, POSTs with the
// session header, reads an application/json or text/event-stream answer.
export class RawClient {
	constructor(base) {
		this.url = new URL(`${base}/mcp`);
		this.agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
		this.session = undefined;
		this.nextId = 1;
	}

	post(body) {
		const data = Buffer.from(JSON.stringify(body));
		const headers = {
			'Content-Type': 'application/json',
			Accept: 'application/json, text/event-stream',
			'Content-Length': data.length,
		};
		if (this.session) {
			headers['Mcp-Session-Id'] = this.session;
			headers['MCP-Protocol-Version'] = PROTOCOL;
		}
		return new Promise((resolve, reject) => {
			const req = http.request(this.url, { method: 'POST', agent: this.agent, headers }, (res) => {
				const chunks = [];
				res.on('data', (c) => chunks.push(c));
				res.on('end', () => {
					const text = Buffer.concat(chunks).toString('utf8');
					const sid = res.headers['mcp-session-id'];
					if (sid && !this.session) this.session = sid;
					if (res.statusCode === 202) return resolve(undefined);
					if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`));
					if ((res.headers['content-type'] || '').startsWith('text/event-stream')) {
						for (const line of text.split('\n')) {
							if (!line.startsWith('data:')) continue;
							const msg = JSON.parse(line.slice(5));
							if (msg.id === body.id) return resolve(msg);
						}
						return reject(new Error('no response on the event stream'));
					}
					resolve(JSON.parse(text));
				});
				res.on('error', reject);
			});
			req.on('error', reject);
			req.end(data);
		});
	}

	async connect() {
		const r = await this.post({
			jsonrpc: '2.0',
			id: 0,
			method: 'initialize',
			params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'mcp-sandbox-bench-raw', version: '1.0.0' } },
		});
		if (!r?.result) throw new Error(`initialize: ${JSON.stringify(r)}`);
		await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' });
	}

	async request(method, params) {
		const r = await this.post({ jsonrpc: '2.0', id: this.nextId++, method, params });
		if (r.error) throw new Error(`${method}: ${r.error.message}`);
		return r.result;
	}

	callTool(name, args) {
		return this.request('tools/call', { name, arguments: args });
	}

	async close() {
		if (this.session) {
			await new Promise((resolve) => {
				const req = http.request(
					this.url,
					{ method: 'DELETE', agent: this.agent, headers: { 'Mcp-Session-Id': this.session, 'MCP-Protocol-Version': PROTOCOL } },
					(res) => {
						res.resume();
						res.on('end', resolve);
					},
				);
				req.on('error', resolve);
				req.end();
			});
		}
		this.agent.destroy();
	}
}
