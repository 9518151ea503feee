// verdict serve's OpenAI-compatible routes driven by real clients, as a
// program would use them with only the base URL and the API key changed:
// OpenAI's official `openai` package and the Vercel AI SDK with its
// OpenAI-compatible provider, against `verdict serve --model builtin`. It
// also runs docs/api.md's TypeScript example (and its Python one, where
// Python's `openai` package is installed) as they are written.
//
//   VERDICT_BIN         the verdict binary (default: ../../../verdict from here)
//   VERDICT_TOKENIZER   where the binary finds the tokenizer, when not in its usual places
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, streamText } from 'ai';
import { z } from 'zod';

const here = new URL('.', import.meta.url).pathname;
const root = resolve(here, '..', '..', '..');
const bin = resolve(process.env.VERDICT_BIN ?? join(root, 'verdict'));

let server;
let BASE;
let TOKEN;
let client;

/** Starts `verdict serve --model builtin` and waits for the model. */
before(async () => {
  const home = mkdtempSync(join(tmpdir(), 'verdict-openai-'));
  server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--model', 'builtin', '--settings='], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, VERDICT_CAPTURE: 'synthetic', XDG_CONFIG_HOME: home },
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
  TOKEN = url.slice(url.indexOf('#token=') + '#token='.length);
  BASE = url.slice(0, url.indexOf('/#token='));
  for (const deadline = Date.now() + 120000; ; ) {
    const r = await fetch(`${BASE}/v1/verdict/models`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    const { models } = await r.json();
    const state = models[0]?.state;
    if (state === 'ready') break;
    if (state === 'error' || Date.now() > deadline) throw new Error(`the model did not load: ${JSON.stringify(models[0])}\n${log}`);
    await new Promise((ok) => setTimeout(ok, 200));
  }
  client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: TOKEN, maxRetries: 0 });
});

after(() => server?.kill('SIGINT'));

const user = (content) => [{ role: 'user', content }];

test('models: the list and one model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.equal(ids[0], 'builtin');
  const m = await client.models.retrieve('builtin');
  assert.equal(m.object, 'model');
  assert.equal(m.owned_by, 'verdict');
});

test('chat: a completion, and the same streamed with the usage last', async () => {
  const req = { model: 'builtin', messages: [{ role: 'system', content: 'Be brief.' }, ...user('Say hi.')], max_tokens: 8, seed: 11 };
  const one = await client.chat.completions.create(req);
  const c = one.choices[0];
  assert.equal(one.object, 'chat.completion');
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.equal(one.usage.total_tokens, one.usage.prompt_tokens + one.usage.completion_tokens);
  assert.equal(one.verdict.generation.seed, 11);

  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, c.message.content);
  assert.equal(finish, c.finish_reason);
  assert.deepEqual(usage, one.usage);

  // The SDK's stream helper puts the message together the same way.
  const runner = client.chat.completions.stream(req);
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, c.message.content);
});

test('chat: logprobs with alternatives, greedy', async () => {
  const one = await client.chat.completions.create({
    model: 'builtin', messages: user('Count to three.'), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const { content } = one.choices[0].logprobs;
  assert.ok(content.length > 0);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token, 'greedy: the most probable token');
    assert.ok(Array.isArray(t.bytes));
  }
});

test('chat: stop sequences end the text before them', async () => {
  const req = { model: 'builtin', messages: user('Write.'), max_tokens: 24, temperature: 0 };
  const full = (await client.chat.completions.create(req)).choices[0].message.content;
  const stop = [...full].slice(4, 7).join('');
  const cut = await client.chat.completions.create({ ...req, stop: [stop] });
  assert.equal(cut.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('chat: structured output, answered by the scorer with its distributions', async () => {
  const one = await client.chat.completions.create({
    model: 'builtin',
    messages: [{ role: 'system', content: 'You triage support tickets.' }, ...user('The site is down and we lose money!')],
    response_format: {
      type: 'json_schema',
      json_schema: {
        name: 'triage',
        strict: true,
        schema: {
          type: 'object',
          additionalProperties: false,
          required: ['urgent', 'team', 'severity', 'issues'],
          properties: {
            urgent: { type: 'boolean', description: 'Is this urgent?' },
            team: { type: 'string', enum: ['billing', 'tech'], description: 'Which team?' },
            severity: { type: 'integer', minimum: 1, maximum: 3, description: 'How severe?' },
            issues: { type: 'array', items: { type: 'string', enum: ['outage', 'billing', 'login'] }, description: 'Which problems?' },
          },
        },
      },
    },
  });
  const answer = JSON.parse(one.choices[0].message.content);
  assert.deepEqual(Object.keys(answer), ['urgent', 'team', 'severity', 'issues']);
  assert.equal(typeof answer.urgent, 'boolean');
  assert.ok(['billing', 'tech'].includes(answer.team));
  assert.ok([1, 2, 3].includes(answer.severity));
  assert.ok(Array.isArray(answer.issues));
  const score = one.verdict.score;
  assert.equal(score.random_weights, true);
  assert.deepEqual(score.answer.team, answer.team);
  for (const f of score.fields) {
    for (const d of f.decisions) {
      const sum = d.candidates.reduce((a, c) => a + c.probability, 0);
      assert.ok(Math.abs(sum - 1) < 1e-9, `${d.name} sums to ${sum}`);
    }
  }
});

test('chat: tools chosen by the catalog decoder', async () => {
  const tools = ['refund_order', 'reset_password', 'escalate', 'track_package'].map((name) => ({
    type: 'function',
    function: { name, description: name.replace('_', ' '), parameters: { type: 'object', properties: {} } },
  }));
  for (const k of [1, 3]) {
    const one = await client.chat.completions.create({
      model: 'builtin', messages: user('I was charged twice and want my money back.'), tools, tool_choice: 'auto', verdict: { select_tools: k },
    });
    const c = one.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    const names = c.message.tool_calls.map((t) => t.function.name);
    assert.equal(new Set(names).size, k);
    for (const t of c.message.tool_calls) {
      assert.ok(tools.some((x) => x.function.name === t.function.name));
      assert.equal(t.function.arguments, '{}');
    }
    assert.deepEqual(one.verdict.selection.names, names);
    assert.ok(one.verdict.selection.steps.length >= k);
  }
});

test('completions: a raw prompt, and the prompt scored with echo', async () => {
  const one = await client.completions.create({ model: 'builtin', prompt: 'The capital of France is', max_tokens: 4, temperature: 0 });
  assert.equal(one.object, 'text_completion');
  assert.equal(typeof one.choices[0].text, 'string');
  const scored = await client.completions.create({ model: 'builtin', prompt: 'The cat sat.', max_tokens: 0, echo: true, logprobs: 2 });
  const lp = scored.choices[0].logprobs;
  assert.equal(scored.choices[0].text, 'The cat sat.');
  assert.equal(lp.tokens[0], '<bos>');
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.tokens.length, scored.usage.prompt_tokens);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 2);
  }
});

test('errors: the clients raise their usual errors', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages: user('hi') }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, e.constructor.name);
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'builtin', messages: user('hi'), n: 2 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, e.constructor.name);
    assert.equal(e.param, 'n');
    return true;
  });
  await assert.rejects(
    client.chat.completions.create({
      model: 'builtin', messages: user('hi'),
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { name: { type: 'string' } } } } },
    }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.match(e.message, /response_format\.json_schema\.schema\.properties\.name: type "string" without enum is not a decision Verdict can score/);
      return true;
    },
  );
  const stranger = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'sk-not-the-token', maxRetries: 0 });
  await assert.rejects(stranger.models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, e.constructor.name);
    assert.equal(e.code, 'invalid_api_key');
    return true;
  });
});

test('Vercel AI SDK: text, a stream and an object', async () => {
  const verdict = createOpenAICompatible({
    name: 'verdict', baseURL: `${BASE}/v1`, apiKey: TOKEN, supportsStructuredOutputs: true, includeUsage: true,
  });
  const model = verdict('builtin');
  const gen = await generateText({ model, prompt: 'Say hi.', maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  assert.equal(typeof gen.text, 'string');
  assert.ok(['stop', 'length'].includes(gen.finishReason));
  assert.ok(gen.usage.outputTokens > 0);

  const st = streamText({ model, prompt: 'Say hi.', maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  let text = '';
  for await (const piece of st.textStream) text += piece;
  assert.equal(text, gen.text);
  assert.ok((await st.usage).outputTokens > 0);

  const { object } = await generateObject({
    model,
    schema: z.object({ urgent: z.boolean().describe('Is this urgent?'), team: z.enum(['billing', 'tech']).describe('Which team?') }),
    prompt: 'The site is down and we lose money!',
    maxRetries: 0,
  });
  assert.equal(typeof object.urgent, 'boolean');
  assert.ok(['billing', 'tech'].includes(object.team));

  await assert.rejects(
    generateText({ model: verdict('no-such-model'), prompt: 'hi', maxRetries: 0 }),
    (e) => {
      assert.equal(e.statusCode, 404, String(e));
      return true;
    },
  );
});

/** The fenced block of lang in docs/api.md's OpenAI-compatible section. */
function docBlock(lang) {
  const doc = readFileSync(join(root, 'docs', 'api.md'), 'utf8');
  const start = doc.indexOf('\n## OpenAI-compatible API\n');
  assert.ok(start >= 0, 'docs/api.md has an OpenAI-compatible API section');
  const section = doc.slice(start, doc.indexOf('\n## ', start + 1));
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(section);
  assert.ok(m, `the section has a ${lang} block`);
  return m[1];
}

test("docs/api.md's TypeScript example, as written", () => {
  const dir = mkdtempSync(join(here, '.doc-'));
  try {
    writeFileSync(join(dir, 'example.mjs'), docBlock('ts'));
    const run = spawnSync(process.execPath, [join(dir, 'example.mjs')], { env: { ...process.env, BASE, TOKEN }, encoding: 'utf8', timeout: 120000 });
    assert.equal(run.status, 0, run.stderr);
    const out = run.stdout;
    assert.match(out, /top_logprobs|logprob/);
    assert.match(out, /urgent/);
    assert.match(out, /probability/);
    assert.match(out, /'(refund_order|reset_password|escalate)', '(refund_order|reset_password|escalate)'/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("docs/api.md's Python example, as written (where Python's openai package is installed)", (t) => {
  const probe = spawnSync('python3', ['-c', 'import openai'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    t.skip("Python's openai package is not installed");
    return;
  }
  const code = `BASE = ${JSON.stringify(BASE)}\nTOKEN = ${JSON.stringify(TOKEN)}\n` + docBlock('python');
  const run = spawnSync('python3', ['-c', code], { encoding: 'utf8', timeout: 120000 });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /urgent/);
});
