// End-to-end test of the browser mode: `verdict serve` driven through
// headless Debian Chromium by playwright-core.
//
//   VERDICT_BIN   the verdict binary (default: ../verdict from frontend/)
//   CHROMIUM      the browser (default: /usr/bin/chromium)
//   E2E_OUT       where screenshots and exports go (default: a temporary folder)
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const here = new URL('.', import.meta.url).pathname;
const bin = resolve(process.env.VERDICT_BIN ?? join(here, '..', '..', 'verdict'));
const out = resolve(process.env.E2E_OUT ?? mkdtempSync(join(tmpdir(), 'verdict-e2e-')));
mkdirSync(out, { recursive: true });

let server;
let serverLog = '';
let baseURL;
let browser;
let page;
const pageErrors = [];

before(async () => {
  server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--model', 'none', '--settings='], { stdio: ['ignore', 'pipe', 'pipe'] });
  server.stderr.on('data', (d) => (serverLog += d));
  baseURL = await new Promise((resolveURL, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`verdict serve did not start:\n${serverLog}`)), 30000);
    server.stdout.on('data', (d) => {
      buf += d;
      const m = /serving on (http:\/\/\S+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        resolveURL(m[1]);
      }
    });
    server.on('exit', (code) => reject(new Error(`verdict serve exited with ${code}:\n${serverLog}`)));
  });
  // A fresh profile for every run.
  browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'verdict-chromium-')), {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
    viewport: { width: 1440, height: 1000 },
    acceptDownloads: true,
  });
  page = browser.pages()[0] ?? (await browser.newPage());
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.setDefaultTimeout(60000);
});

after(async () => {
  await browser?.close();
  server?.kill('SIGINT');
  if (pageErrors.length) console.error('page errors:', pageErrors);
});

const shot = (name) => page.screenshot({ path: join(out, name), fullPage: false });

test('loads the built-in model', async () => {
  await page.goto(baseURL);
  await page.locator('#model-chip[data-state="none"]').waitFor();
  assert.match(await page.locator('#connection').textContent(), /browser/);
  await page.locator('#load-builtin').click();
  await page.locator('#model-chip[data-state="ready"]').waitFor();
  assert.match(await page.locator('#model-name').textContent(), /random weights/);
  await page.locator('#random-weights').waitFor();
  assert.match(await page.locator('#model-chip').textContent(), /loaded in/);
  await page.locator('#banner:not([hidden])').waitFor();
});

test('has the support-ticket preset with a sample input', async () => {
  assert.equal(await page.locator('#preset').inputValue(), 'ticket');
  assert.equal(await page.locator('.field-card').count(), 5);
  assert.match(await page.locator('#input-text').inputValue(), /order arrived/);
  await page.locator('.schema-status .good').waitFor();
});

test('runs one request: distributions, generation and both timing breakdowns', async () => {
  await page.locator('#run').click();
  // Live: the stop button replaces Run while it runs.
  await page.locator('#stop-run').waitFor();
  await page.locator('#scorer-panel .pill[data-status="done"]').waitFor();
  await page.locator('#generator-panel .pill[data-status="done"]').waitFor();
  assert.equal(await page.locator('#scorer-panel .dist.filled').count(), 5);
  for (const [field, bars] of [['priority', 4], ['department', 5], ['refund_requested', 2], ['issues', 4], ['anger', 5]]) {
    const card = page.locator(`#scorer-panel .dist[data-field="${field}"]`);
    assert.equal(await card.locator('.bar-row').count(), bars, field);
    assert.match(await card.locator('.dist-meta').textContent(), /confidence .*%.*allowed mass/);
  }
  // Probabilities of a choice sum to 1.
  const ps = await page.locator('#scorer-panel .dist[data-field="priority"] .bar-row').evaluateAll((rows) => rows.map((r) => Number(r.dataset.p)));
  assert.ok(Math.abs(ps.reduce((a, b) => a + b, 0) - 1) < 1e-3, `priorities sum to ${ps}`);
  assert.equal(await page.locator('#scorer-panel .dist[data-field="priority"] .bar-row.winner').count(), 1);
  assert.ok((await page.locator('#gen-text').textContent()).length > 0);
  assert.match(await page.locator('#gen-tokens').textContent(), /\d+ tok/);

  // Timing: both lanes on one axis, both columns of numbers, and the contention note.
  assert.equal(await page.locator('#waterfall .wf-lane').count(), 2);
  assert.match(await page.locator('#contention').textContent(), /contention/);
  const rows = await page.locator('#timing-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const row = (label) => rows.find((r) => r[0] === label);
  assert.match(row('Prefill speed')[1], /tok\/s/);
  assert.match(row('Prefill speed')[2], /tok\/s/);
  assert.match(row('First decision')[1], /\d+(\.\d+)? (ms|s)/);
  assert.match(row('First token')[2], /\d+(\.\d+)? (ms|s)/);
  assert.match(row('Decode speed')[2], /tok\/s/);
  assert.match(row('Total')[1], /\d/);
  assert.match(row('Total')[2], /\d/);
  await page.locator('#scorer-panel').scrollIntoViewIfNeeded();
  await shot('run.png');
  await page.locator('#timing').scrollIntoViewIfNeeded();
  await shot('timing.png');
});

test('exports the run as JSON and CSV', async () => {
  await page.locator('#tab-history').click();
  await page.locator('#history-table tr[data-run="run-1"]').waitFor();
  const [json] = await Promise.all([page.waitForEvent('download'), page.locator('#export-json').click()]);
  const jpath = join(out, json.suggestedFilename());
  await json.saveAs(jpath);
  const doc = JSON.parse(readFileSync(jpath, 'utf8'));
  assert.equal(doc.format, 'verdict-runs');
  assert.equal(doc.runs.length, 1);
  assert.equal(doc.runs[0].scorer.fields.length, 5);
  assert.equal(doc.runs[0].scorer.status, 'done');
  assert.ok(doc.runs[0].generator.timing.first_token_ms > 0);
  assert.ok(doc.runs[0].random_weights);

  const [csv] = await Promise.all([page.waitForEvent('download'), page.locator('#export-csv').click()]);
  const cpath = join(out, csv.suggestedFilename());
  await csv.saveAs(cpath);
  const lines = readFileSync(cpath, 'utf8').trimEnd().split('\r\n');
  assert.ok(lines[0].startsWith('id,started,model'));
  assert.ok(lines[0].includes('field:priority'));
  assert.ok(lines[1].startsWith('run-1,'));
});

test('compares a second run with the baseline and stops a run', async () => {
  await page.locator('#history-table tr[data-run="run-1"] .star').click();
  await page.locator('#run-generator').click();
  await page.locator('#generator-panel .pill[data-status="decoding"]').waitFor();
  await page.keyboard.press('Escape');
  await page.locator('#generator-panel .pill[data-status="cancelled"]').waitFor();
  assert.match(await page.locator('#scorer-panel').textContent(), /not part of this run/);
  await page.locator('#history-table tr[data-run="run-2"]').waitFor();
  assert.match(await page.locator('#history-table tr[data-run="run-2"]').textContent(), /[+−±]\d*\.?\d*%/);
  assert.equal(await page.locator('#history-table tr.baseline').getAttribute('data-run'), 'run-1');
});

test('settings apply to the next run (Ctrl+, then Ctrl+Enter)', async () => {
  await page.keyboard.press('Control+,');
  await page.locator('#settings[open]').waitFor();
  await page.locator('#settings input[name="max_tokens"]').fill('8');
  await page.locator('#settings button[type="submit"]').click();
  await page.locator('#settings').waitFor({ state: 'hidden' });
  await page.keyboard.press('Control+Enter');
  await page.locator('#history-table tr[data-run="run-3"]').waitFor();
  assert.equal(await page.locator('#gen-tokens').textContent(), '8 tok');
  assert.equal(await page.locator('#scorer-panel .dist.filled').count(), 5);
});

test('takes text files and lists other files as not supported yet', async () => {
  const txt = join(out, 'ticket.txt');
  writeFileSync(txt, 'The invoice was charged twice.');
  const png = join(out, 'photo.png');
  writeFileSync(png, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  await page.locator('#file-picker').setInputFiles([txt, png]);
  await page.locator('#file-chips .chip.ok').waitFor();
  assert.match(await page.locator('#file-chips .chip.unsupported').textContent(), /not supported yet/);
  await page.locator('#tab-prompt').click();
  await page.locator('#prompt-text', { hasText: 'charged twice' }).waitFor();
});

test('edits the schema and shows the logs', async () => {
  await page.locator('button.add-field[data-type="bool"]').click();
  assert.equal(await page.locator('.field-card').count(), 6);
  await page.keyboard.type('Is the customer a business?');
  await page.locator('.schema-status .good').waitFor();
  assert.match(await page.locator('.schema-status').textContent(), /6 fields · 9 decisions/);
  await page.locator('#tab-logs').click();
  await page.locator('#log-list li', { hasText: 'run finished' }).first().waitFor();
  await shot('logs.png');
  assert.deepEqual(pageErrors, []);
});
