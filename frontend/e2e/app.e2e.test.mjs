// End-to-end test of the browser mode: `verdict serve` driven through
// headless Debian Chromium by playwright-core.
//
//   VERDICT_BIN   the verdict binary (default: ../verdict from frontend/)
//   CHROMIUM      the browser (default: /usr/bin/chromium)
//   E2E_OUT       where screenshots and exports go (default: a temporary folder)
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { crc32, deflateSync } from 'node:zlib';
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
  // Synthetic capture drivers: a colour-bar camera and a 480 Hz microphone.
  server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--model', 'none', '--settings='], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, VERDICT_CAPTURE: 'synthetic' },
  });
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

/** A w×h RGB PNG: a gradient, shifted by seed. */
function png(w, h, seed = 0) {
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) {
    const row = y * (w * 3 + 1);
    for (let x = 0; x < w; x++) {
      raw[row + 1 + 3 * x] = (x * 255) / Math.max(1, w - 1);
      raw[row + 2 + 3 * x] = (y * 255) / Math.max(1, h - 1);
      raw[row + 3 + 3 * x] = (seed * 40) % 256;
    }
  }
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  return Buffer.concat([Buffer.from('\x89PNG\r\n\x1a\n', 'latin1'), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

/** A 16-bit mono WAV of a 440 Hz tone. */
function wav(seconds, rate = 22050) {
  const n = Math.round(seconds * rate);
  const b = Buffer.alloc(44 + 2 * n);
  b.write('RIFF', 0, 'latin1');
  b.writeUInt32LE(36 + 2 * n, 4);
  b.write('WAVEfmt ', 8, 'latin1');
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(2 * rate, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36, 'latin1');
  b.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(12000 * Math.sin((2 * Math.PI * 440 * i) / rate)), 44 + 2 * i);
  return b;
}

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
  // A long generation, so that it is still decoding when Escape lands
  // (96 tokens of the built-in model can end first on a fast machine).
  await page.keyboard.press('Control+,');
  await page.locator('#settings[open]').waitFor();
  await page.locator('#settings input[name="max_tokens"]').fill('1024');
  await page.locator('#settings button[type="submit"]').click();
  await page.locator('#settings').waitFor({ state: 'hidden' });
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

test('takes text files; media files go to the media panel, broken ones say why', async () => {
  const txt = join(out, 'ticket.txt');
  writeFileSync(txt, 'The invoice was charged twice.');
  const broken = join(out, 'broken.png');
  writeFileSync(broken, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  await page.locator('#file-picker').setInputFiles([txt, broken]);
  await page.locator('#file-chips .chip.ok').waitFor();
  await page.locator('#media-error:not([hidden])').waitFor();
  assert.match(await page.locator('#media-error').textContent(), /broken\.png/);
  assert.equal(await page.locator('.media-item').count(), 0);
  await page.locator('#tab-prompt').click();
  await page.locator('#prompt-text', { hasText: 'charged twice' }).waitFor();
});

test('runs on an image and a WAV: what the model receives, its token cost, the distributions', async () => {
  const img = join(out, 'gradient.png');
  writeFileSync(img, png(64, 48));
  const tone = join(out, 'tone.wav');
  writeFileSync(tone, wav(1));
  await page.locator('#file-picker').setInputFiles([img, tone]);
  const image = page.locator('.media-item[data-kind="image"]');
  const audio = page.locator('.media-item[data-kind="audio"]');
  await image.waitFor();
  await audio.waitFor();
  // The 768×768 image the vision tower receives, the 16 kHz waveform, the costs.
  const view = image.locator('.model-view img');
  await page.waitForFunction((el) => el.complete && el.naturalWidth > 0, await view.elementHandle());
  assert.deepEqual(await view.evaluate((el) => [el.naturalWidth, el.naturalHeight]), [768, 768]);
  assert.match(await image.textContent(), /64×48 PNG/);
  assert.equal(await image.locator('.tokens').textContent(), '256 tokens');
  assert.equal(await audio.locator('.tokens').textContent(), '188 tokens');
  assert.match(await audio.locator('svg.waveform path').getAttribute('d'), /^M/);
  await page.locator('#token-budget', { hasText: 'of 8,192 prompt tokens (media 444' }).waitFor();
  // Playback: a play button, or why there is no speaker.
  const play = audio.locator('.play');
  if (await play.isDisabled()) assert.match(await audio.textContent(), /no speaker: /);
  await page.locator('#media-devices').scrollIntoViewIfNeeded();
  await page.locator('#input').scrollIntoViewIfNeeded();
  await shot('media.png');

  await page.locator('#tab-prompt').click();
  await page.locator('#prompt-text', { hasText: '<image 1>' }).waitFor();
  assert.match(await page.locator('#prompt-text').textContent(), /<audio>/);

  await page.locator('#run').click();
  // Wait for this run to start and end: the panels still show the last
  // run's "done" until the new run's first update.
  await page.locator('#stop-run').waitFor();
  await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 180000 });
  await page.locator('#scorer-panel .pill[data-status="done"]').waitFor({ timeout: 180000 });
  await page.locator('#generator-panel .pill[data-status="done"]').waitFor({ timeout: 180000 });
  assert.equal(await page.locator('#scorer-panel .dist.filled').count(), 5);
  const ps = await page.locator('#scorer-panel .dist[data-field="department"] .bar-row').evaluateAll((rows) => rows.map((r) => Number(r.dataset.p)));
  assert.ok(Math.abs(ps.reduce((a, b) => a + b, 0) - 1) < 1e-3, `departments sum to ${ps}`);
  assert.match(await page.locator('#scorer-stage').textContent(), /prefill .* branch batch/);
  // The towers ran once; both sides count the wait as input preparation.
  assert.match(await page.locator('#media-note').textContent(), /ran once/);
  const rows = await page.locator('#timing-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const towers = rows.find((r) => r[0] === 'Media towers');
  assert.ok(towers && /shared/.test(towers[1]) && towers[1] === towers[2], `towers row ${towers}`);
  const prep = rows.find((r) => r[0] === 'Input preparation');
  assert.match(prep[1], /\d/);
  assert.match(prep[2], /\d/);
  const prefill = rows.find((r) => r[0] === 'Prefill');
  const tokens = prefill.slice(1).map((c) => Number(/(\d+) tok/.exec(c)[1]));
  assert.ok(tokens[0] > 444 && tokens[0] === tokens[1], `prompt tokens ${tokens}`);
  await page.locator('#scorer-panel').scrollIntoViewIfNeeded();
  await shot('run-media.png');
  await page.locator('#timing').scrollIntoViewIfNeeded();
  await shot('timing-media.png');
  await page.locator('#tab-history').click();
  await page.locator('#history-table tr[data-run="run-4"]', { hasText: '1 img + audio' }).waitFor();
});

test('camera snapshot and live feed, microphone recording (synthetic devices)', async () => {
  await page.locator('#input').scrollIntoViewIfNeeded();
  await page.locator('#media-devices li[data-feature="camera"]', { hasText: 'camera ✓' }).waitFor();
  assert.match(await page.locator('#media-devices').textContent(), /synthetic devices/);
  await page.locator('#snapshot').click();
  const snap = page.locator('.media-item[data-kind="image"]').nth(1);
  await snap.waitFor();
  assert.match(await snap.textContent(), /640×480 .*camera/);

  await page.locator('#camera-toggle').click();
  const feed = page.locator('#camera-feed');
  await page.waitForFunction(() => /seq=\d+/.test(document.querySelector('#camera-feed')?.getAttribute('src') ?? ''));
  const first = await feed.getAttribute('src');
  await page.waitForFunction((src) => document.querySelector('#camera-feed').getAttribute('src') !== src, first);
  await page.waitForFunction((el) => el.complete && el.naturalWidth === 320, await feed.elementHandle());
  await shot('camera.png');
  await page.locator('#camera-toggle').click();
  await page.locator('#camera-live').waitFor({ state: 'hidden' });

  await page.locator('#record-seconds').selectOption('5');
  await page.locator('#record').click();
  // tone.wav is still in the input: the recording would replace it, so the page asks first.
  await page.locator('#record-confirm', { hasText: 'replaces tone.wav' }).waitFor();
  await page.locator('#record-replace').click();
  await page.locator('#record-countdown', { hasText: /s left/ }).waitFor();
  await page.waitForTimeout(1200);
  await page.locator('#record-stop').click();
  await page.locator('.media-item[data-kind="audio"]', { hasText: 'microphone' }).waitFor();
  assert.equal(await page.locator('.media-item[data-kind="audio"]').count(), 1);
  await page.locator('#clear-media').click();
  await page.locator('.media-empty').waitFor();
});

test('refuses a ninth image with the limit', async () => {
  const files = [];
  for (let i = 1; i <= 9; i++) {
    const p = join(out, `small-${i}.png`);
    writeFileSync(p, png(16, 12, i));
    files.push(p);
  }
  await page.locator('#file-picker').setInputFiles(files);
  await page.locator('#media-error', { hasText: 'small-9.png: images 9 exceeds the limit of 8' }).waitFor();
  assert.equal(await page.locator('.media-item[data-kind="image"]').count(), 8);
  await page.locator('#media-error').scrollIntoViewIfNeeded();
  await shot('limit.png');
  await page.locator('#clear-media').click();
  await page.locator('.media-empty').waitFor();
});

test('shows a video as the model receives it: a frame a second with its time, and the soundtrack', async (t) => {
  const clip = join(out, 'clip.mp4');
  const ff = spawnSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=10:duration=3', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=16000:duration=3',
    '-c:v', 'mpeg4', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-y', clip]);
  if (ff.error || ff.status !== 0) {
    if (process.env.VERDICT_REQUIRE_MEDIA_TOOLS === '1') assert.fail(`ffmpeg: ${ff.error ?? ff.stderr}`);
    t.skip('no ffmpeg');
    return;
  }
  await page.locator('#file-picker').setInputFiles([clip]);
  const video = page.locator('.media-item[data-kind="video"]');
  await video.waitFor();
  assert.deepEqual(await video.locator('.frame figcaption').allTextContents(), ['0:00', '0:01', '0:02']);
  assert.equal(await video.locator('.tokens').textContent(), `${3 * 256 + 188} tokens`);
  assert.match(await video.locator('svg.waveform path').getAttribute('d'), /^M/);
  await page.waitForFunction(() => [...document.querySelectorAll('.frame img')].every((i) => i.complete && i.naturalWidth > 0));
  await video.scrollIntoViewIfNeeded();
  await shot('video.png');
  await page.locator('#clear-media').click();
  await page.locator('.media-empty').waitFor();
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

test('keeps the access token out of the address bar; the API refuses requests without it', async () => {
  assert.match(baseURL, /\/#token=[0-9a-f]{32}$/);
  assert.doesNotMatch(page.url(), /token/);
  const status = (headers) =>
    page.evaluate((h) => fetch('/api/Models/Info', { method: 'POST', headers: { 'Content-Type': 'application/json', ...h }, body: '[]' }).then((r) => r.status), headers);
  assert.equal(await status({}), 401);
  const token = new URL(baseURL).hash.slice('#token='.length);
  assert.equal(await status({ 'X-Verdict-Token': token }), 200);
  // A reload keeps the token: the page still talks to the server.
  await page.reload();
  await page.locator('#model-chip[data-state="ready"]').waitFor();
});
