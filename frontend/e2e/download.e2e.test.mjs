// A new user's flow with the models dialog (issue 15): a fake Hugging Face
// Hub serves the micro checkpoint as google/gemma-3n-E2B-it, gated; the
// download says where to accept the licence, succeeds with a token entered
// in the dialog, and the model loads by its id and is listed on this
// computer afterwards.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { browse, out, serve } from './uiharness.mjs';

const here = new URL('.', import.meta.url).pathname;
const REPO = 'google/gemma-3n-E2B-it';
const COMMIT = 'e2e0'.repeat(10);
const TOKEN = 'hf_e2e_token';

/** The micro checkpoint's files, as the Hub lists them. */
function checkpoint() {
  const dir = mkdtempSync(join(tmpdir(), 'verdict-e2e-hub-'));
  execFileSync('tar', ['xzf', join(here, '..', '..', 'testdata', 'gemma3n-micro-bf16.tar.gz'), '-C', dir]);
  const src = join(dir, 'gemma3n-micro-bf16');
  const files = {};
  for (const name of readdirSync(src)) {
    if (name === 'expected.safetensors' || name === 'meta.json') continue;
    const b = readFileSync(join(src, name));
    const lfs = name.endsWith('.safetensors');
    const git = createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
    files[name] = { b, entry: { type: 'file', path: name, size: b.length, oid: git, ...(lfs ? { lfs: { oid: createHash('sha256').update(b).digest('hex'), size: b.length } } : {}) } };
  }
  return files;
}

/** A fake Hub: the revision, tree and resolve endpoints for one gated repo. */
function fakeHub(files) {
  const server = createServer((req, res) => {
    const p = new URL(req.url, 'http://x').pathname;
    const notFound = (code) => res.writeHead(404, { 'X-Error-Code': code }).end('{}');
    if (p === `/api/models/${REPO}/revision/main`) return res.end(JSON.stringify({ id: REPO, sha: COMMIT, gated: 'manual' }));
    if (p === `/api/models/${REPO}/tree/${COMMIT}`) return res.end(JSON.stringify(Object.values(files).map((f) => f.entry)));
    const prefix = `/${REPO}/resolve/${COMMIT}/`;
    if (p.startsWith(prefix)) {
      if (req.headers.authorization !== `Bearer ${TOKEN}`) return res.writeHead(401, { 'X-Error-Code': 'GatedRepo' }).end('restricted');
      const f = files[decodeURIComponent(p.slice(prefix.length))];
      if (!f) return notFound('EntryNotFound');
      return res.writeHead(200, { 'Content-Length': f.b.length }).end(f.b);
    }
    return notFound('RepoNotFound');
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

let hub;
let srv;
let ctx;
let page;

before(async () => {
  hub = await fakeHub(checkpoint());
  const home = mkdtempSync(join(tmpdir(), 'verdict-e2e-hf-'));
  Object.assign(process.env, {
    HF_ENDPOINT: `http://127.0.0.1:${hub.address().port}`, HF_HOME: home, HF_HUB_CACHE: join(home, 'hub'), HF_TOKEN: '',
    OLLAMA_MODELS: join(home, 'ollama'), VERDICT_PACKED_CACHE: 'off',
  });
  srv = await serve();
  ({ ctx, page } = await browse(1280, 900));
});

after(async () => {
  await ctx?.close();
  srv?.stop();
  hub?.close();
});

test('download a gated Gemma 3n repo from the models dialog, then load it by its id', async () => {
  await page.goto(srv.url);
  await page.locator('#model-chip[data-state="none"]').waitFor();
  await page.locator('#browse-models').click();
  const dlg = page.locator('#models-dialog[open]');
  await dlg.waitFor();
  await dlg.locator('#no-local').waitFor();
  const row = dlg.locator(`#hub-repos li[data-repo="${REPO}"]`);
  await row.locator('.badge.warn').waitFor(); // gated
  assert.match(await row.textContent(), /\d+ KB · 4 files/);
  assert.match(await dlg.locator('#hub-repos li[data-repo="google/gemma-3n-E4B-it"]').textContent(), /size unknown: no model google\/gemma-3n-E4B-it/);

  await row.locator('button[data-action="download"]').click();
  await dlg.locator('#download-error').waitFor();
  assert.match(await dlg.locator('#download-error').textContent(), /is gated/);
  assert.equal(await dlg.locator('#licence-link').getAttribute('href'), `${process.env.HF_ENDPOINT}/${REPO}`);

  await dlg.locator('#hub-token-input').fill(TOKEN);
  await dlg.locator('.token-form button[type="submit"]').click();
  await dlg.locator('#hub-token', { hasText: 'entered for this session' }).waitFor();
  await row.locator('button[data-action="download"]').click();
  await dlg.locator('#download-load').waitFor({ timeout: 60000 });
  await page.screenshot({ path: join(out, 'download-done.png') });
  await row.locator('.badge.ok').waitFor(); // downloaded

  await dlg.locator('#download-load').click();
  await page.locator('#models-dialog').waitFor({ state: 'hidden' });
  await page.locator('#model-chip[data-state="ready"], #model-chip[data-state="error"]').waitFor({ timeout: 120000 });
  assert.equal(await page.locator('#model-chip').getAttribute('data-state'), 'ready', await page.locator('#model-chip').textContent());
  assert.equal(await page.locator('#model-name').textContent(), REPO);

  await page.locator('#browse-models').click();
  const local = dlg.locator('#local-models li.model-row[data-source="huggingface"]');
  await local.waitFor();
  assert.match(await local.textContent(), new RegExp(`${REPO}.*Hugging Face cache · safetensors`));
  await page.screenshot({ path: join(out, 'models-local.png') });
});
