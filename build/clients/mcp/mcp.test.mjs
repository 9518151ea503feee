// Verdict's MCP server driven by the official MCP TypeScript SDK, as an MCP
// client would: `verdict mcp --model builtin` over stdio, and the /mcp
// endpoint of `verdict serve --model builtin` over streamable HTTP with the
// printed token as a bearer token. Each lists the tools and calls score,
// select_tools (exactly k distinct names) and generate.
//
//   VERDICT_BIN   the verdict binary (default: ../../../verdict from here)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const here = new URL('.', import.meta.url).pathname;
const bin = resolve(process.env.VERDICT_BIN ?? join(here, '..', '..', '..', 'verdict'));

const schema = {
  fields: [
    { name: 'urgent', question: 'Is this urgent?', type: 'bool' },
    { name: 'team', question: 'Which team?', type: 'choice', options: { billing: 'payments', tech: 'bugs' } },
  ],
};
const catalog = [
  { name: 'refund_order', description: "Refund a customer's order" },
  { name: 'reset_password', description: "Reset a user's password" },
  { name: 'escalate', description: 'Escalate to a human agent' },
  { name: 'track_package', description: 'Track a package' },
  { name: 'cancel_subscription', description: 'Cancel a subscription' },
];

/** Lists the tools and calls each one through client. */
async function exercise(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['generate', 'score', 'select_tools']);
  for (const t of tools) {
    assert.ok(t.description, `${t.name} has a description`);
    assert.equal(t.inputSchema.type, 'object');
  }

  const score = await client.callTool({ name: 'score', arguments: { schema, text: 'The site is down and we lose money!' } });
  assert.ok(!score.isError, JSON.stringify(score.content));
  const s = score.structuredContent;
  assert.deepEqual(Object.keys(s.answer).sort(), ['team', 'urgent']);
  assert.equal(s.backend, 'json');
  assert.equal(s.random_weights, true);
  for (const f of s.fields) {
    for (const d of f.decisions) {
      const sum = d.candidates.reduce((a, c) => a + c.probability, 0);
      assert.ok(Math.abs(sum - 1) < 1e-9, `${f.name} sums to ${sum}`);
    }
  }
  assert.deepEqual(JSON.parse(score.content[0].text).answer, s.answer);

  for (const k of [1, 3]) {
    const sel = await client.callTool({
      name: 'select_tools',
      arguments: { catalog, request: 'I was charged twice and want my money back', k },
    });
    assert.ok(!sel.isError, JSON.stringify(sel.content));
    const r = sel.structuredContent;
    assert.equal(r.names.length, k);
    assert.equal(new Set(r.names).size, k, `distinct: ${r.names}`);
    for (const n of r.names) assert.ok(catalog.some((e) => e.name === n), `${n} is in the catalog`);
    assert.equal(r.picks.length, k);
    for (const p of r.picks) {
      assert.ok(p.probability > 0 && p.probability <= 1);
      const sum = p.distribution.reduce((a, x) => a + x.probability, 0);
      assert.ok(Math.abs(sum - 1) < 1e-9, `pick ${p.name}'s distribution sums to ${sum}`);
    }
  }

  const gen = await client.callTool({ name: 'generate', arguments: { prompt: 'Say hi.', max_tokens: 5, temperature: 0.8, seed: 1 } });
  assert.ok(!gen.isError, JSON.stringify(gen.content));
  const g = gen.structuredContent;
  assert.equal(typeof g.text, 'string');
  assert.ok(g.tokens >= 1 && g.tokens <= 5);
  assert.ok(['stop', 'length'].includes(g.finish_reason));
  assert.ok(g.timings.total_ms > 0);

  // A bad argument is a tool error naming it.
  const bad = await client.callTool({ name: 'select_tools', arguments: { catalog, request: 'x', k: 9 } });
  assert.equal(bad.isError, true);
  assert.match(bad.content[0].text, /k = 9, but the catalog has 5 entries/);
}

test('verdict mcp over stdio', { timeout: 180_000 }, async () => {
  const transport = new StdioClientTransport({
    command: bin,
    args: ['mcp', '--model', 'builtin'],
    env: { ...process.env },
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (d) => (log += d));
  const client = new Client({ name: 'verdict-mcp-test', version: '0.1.0' });
  try {
    await client.connect(transport);
    assert.equal(client.getServerVersion()?.name, 'verdict');
    await exercise(client);
  } catch (e) {
    e.message += `\nverdict mcp's stderr:\n${log}`;
    throw e;
  } finally {
    await client.close();
  }
});

/** Starts `verdict serve --model builtin`; resolves to its base URL, token and a stop function. */
async function serve() {
  const server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--model', 'builtin', '--settings='], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, VERDICT_CAPTURE: 'synthetic' },
  });
  let log = '';
  server.stderr.on('data', (d) => (log += d));
  const url = await new Promise((ok, fail) => {
    let buf = '';
    const timer = setTimeout(() => fail(new Error(`verdict serve did not start:\n${log}`)), 30000);
    server.stdout.on('data', (d) => {
      buf += d;
      const m = /serving on (http:\/\/\S+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    server.on('exit', (code) => fail(new Error(`verdict serve exited with ${code}:\n${log}`)));
  });
  const [base, token] = url.split('/#token=');
  return { base, token, log: () => log, stop: () => server.kill('SIGINT') };
}

test('verdict serve /mcp over streamable HTTP', { timeout: 180_000 }, async () => {
  const srv = await serve();
  try {
    // The model loads in the background.
    const auth = { Authorization: `Bearer ${srv.token}` };
    for (let i = 0; ; i++) {
      const r = await (await fetch(`${srv.base}/v1/verdict/models`, { headers: auth })).json();
      const state = r.models[0]?.state;
      if (state === 'ready') break;
      assert.notEqual(state, 'error', JSON.stringify(r));
      assert.ok(i < 600, 'the model did not load in 60 s');
      await new Promise((ok) => setTimeout(ok, 100));
    }
    // Without the token: 401, from another origin: 403.
    const init = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const post = (headers) =>
      fetch(`${srv.base}/mcp`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify(init),
      });
    assert.equal((await post({})).status, 401);
    assert.equal((await post({ ...auth, Origin: 'http://evil.example' })).status, 403);

    const transport = new StreamableHTTPClientTransport(new URL(`${srv.base}/mcp`), { requestInit: { headers: auth } });
    const client = new Client({ name: 'verdict-mcp-test', version: '0.1.0' });
    try {
      await client.connect(transport);
      await exercise(client);
    } finally {
      await client.close();
    }
  } catch (e) {
    e.message += `\nverdict serve's log:\n${srv.log()}`;
    throw e;
  } finally {
    srv.stop();
  }
});
