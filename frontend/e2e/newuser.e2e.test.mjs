// What a new user and a hostile input still found (issue 28), at 1024×700
// with no network: the Models dialog offline, the schema's problems by field
// and Run's whole reason, an import over a broken JSON edit, a duplicate
// image, a video beside a WAV offered as a replacement, the towers' time
// before a run and their progress in the run bar during it, and a reused
// prefix in the timing table and the history.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateSync, crc32 } from 'node:zlib';
import { browse, out, ready, serve } from './uiharness.mjs';

const W = 1024;
const H = 700;
let srv;
let ctx;
let page;
const shot = (name) => page.screenshot({ path: join(out, name) });

/** An address where nothing listens: the Hub is out of reach. */
async function closedPort() {
  const s = createServer();
  await new Promise((ok) => s.listen(0, '127.0.0.1', ok));
  const { port } = s.address();
  await new Promise((ok) => s.close(ok));
  return port;
}

before(async () => {
  const home = mkdtempSync(join(tmpdir(), 'verdict-e2e-hf-'));
  Object.assign(process.env, {
    HF_ENDPOINT: `http://127.0.0.1:${await closedPort()}`, HF_HOME: home, HF_HUB_CACHE: join(home, 'hub'), HF_TOKEN: '',
    OLLAMA_MODELS: join(home, 'ollama'),
  });
  srv = await serve();
  ({ ctx, page } = await browse(W, H));
  await ready(page, srv.url);
});

after(async () => {
  await ctx?.close();
  srv?.stop();
});

/** A w×h RGB PNG: a gradient, its blue set by seed. */
function png(w, h, seed = 0) {
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const o = y * (w * 3 + 1) + 1 + 3 * x;
      raw[o] = (x * 255) / Math.max(1, w - 1);
      raw[o + 1] = (y * 255) / Math.max(1, h - 1);
      raw[o + 2] = (seed * 40) % 256;
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
  ihdr.set([8, 2, 0, 0, 0], 8);
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

const file = (name, data) => {
  const p = join(out, name);
  writeFileSync(p, data);
  return p;
};

/** Whether the element is whole inside the viewport and not cut by its own box. */
const inView = (loc) => loc.evaluate((el, [w, h]) => {
  const r = el.getBoundingClientRect();
  return r.top >= 0 && r.bottom <= h && r.left >= 0 && r.right <= w && el.scrollWidth <= el.clientWidth + 1;
}, [W, H]);

test('offline, the Models dialog says so once, in plain words, and holds the downloads back', async () => {
  await page.locator('#browse-models').click();
  const dlg = page.locator('#models-dialog[open]');
  await dlg.locator('#hub-offline').waitFor({ timeout: 30000 });
  const host = new URL(process.env.HF_ENDPOINT).host;
  assert.equal(await dlg.locator('#hub-offline > span').textContent(), `Can't reach ${host} — check the connection; models on this machine still work`);
  const buttons = dlg.locator('button[data-action="download"]');
  assert.equal(await buttons.count(), 12); // models.KnownRepos: 4 Gemma 3n repos and 8 Gemma 4 ones
  for (const b of await buttons.all()) assert.equal(await b.isDisabled(), true);
  // The raw errors are behind the closed disclosure, not on the page.
  assert.equal(await dlg.locator('#hub-offline details').getAttribute('open'), null);
  const visible = await dlg.evaluate((d) => d.innerText);
  assert.equal(visible.split("Can't reach").length, 2, visible);
  assert.doesNotMatch(visible, /dial tcp|connection refused|cannot reach the Hub at/);
  await shot('models-offline.png');
  await dlg.locator('#hub-offline summary').click();
  assert.match(await dlg.locator('#hub-offline details').textContent(), /connection refused/);
  await dlg.locator('#models-close').click();
});

test('a field without a question: the problem names it, and Run says why it waits, whole', async () => {
  if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
  const q = page.locator('#schema-panel li.field-card[data-field="1"] .field-question');
  const question = await q.inputValue();
  await q.fill('');
  const why = page.locator('#run-why');
  await why.waitFor();
  assert.equal(await why.textContent(), 'fix the schema: field 2 (department) needs a question');
  assert.ok(await inView(why), 'the reason is cut or out of view');
  assert.match(await page.locator('.schema-status').textContent(), /1 problem: field 2 \(department\) needs a question/);
  assert.equal(await page.locator('#schema-panel li.field-card[data-field="1"] .problems').textContent(), 'needs a question');
  await shot('run-why.png');
  await q.fill(question);
  await page.locator('#run:not([disabled])').waitFor();
});

test('an Import over a broken JSON edit replaces the text and clears its error', async () => {
  await page.locator('#schema-json-toggle').click();
  await page.locator('#schema-json').fill('{"fields": [');
  await page.locator('#schema-panel button', { hasText: 'Apply JSON' }).click();
  await page.locator('#schema-json-error:not([hidden])').waitFor();
  const schema = { fields: [{ name: 'spam', question: 'Is it spam?', type: 'bool' }] };
  await page.locator('#schema-import').setInputFiles(file('spam.json', JSON.stringify(schema)));
  await page.locator('#schema-json-error[hidden]').waitFor({ state: 'attached' });
  assert.deepEqual(JSON.parse(await page.locator('#schema-json').inputValue()), schema);
  assert.doesNotMatch(await page.locator('.schema-status').textContent(), /problem/);
  await shot('schema-import.png');
  await page.locator('#schema-panel button', { hasText: 'Cancel' }).click();
  await page.locator('#preset').selectOption('ticket');
  await page.locator('.schema-status .good').waitFor();
  await page.locator('#schema-toggle').click(); // the main column gets its width back
});

test('the same image is not added twice; a video beside a WAV offers to replace it', async (t) => {
  const img = file('gradient.png', png(64, 48));
  await page.locator('#file-picker').setInputFiles([img]);
  await page.locator('.media-item[data-kind="image"]').waitFor();
  await page.locator('#file-picker').setInputFiles([file('gradient-copy.png', png(64, 48))]);
  await page.locator('#media-error', { hasText: 'gradient-copy.png has the same content as gradient.png, already in the input: it is not added twice' }).waitFor();
  assert.equal(await page.locator('.media-item[data-kind="image"]').count(), 1);
  assert.match(await page.locator('#media-shared').textContent(), /^Shared by every browser tab on this server/);

  const clip = join(out, 'clip.mp4');
  const ff = spawnSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=160x120:rate=10:duration=2', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=16000:duration=2',
    '-c:v', 'mpeg4', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-y', clip]);
  if (ff.error || ff.status !== 0) {
    t.skip('no ffmpeg');
    return;
  }
  await page.locator('#file-picker').setInputFiles([file('tone.wav', wav(1))]);
  await page.locator('.media-item[data-kind="audio"]').waitFor();
  await page.locator('#file-picker').setInputFiles([clip]);
  const offer = page.locator('#media-offer:not([hidden])');
  await offer.waitFor();
  assert.match(await offer.textContent(), /^clip\.mp4 was not added: the input takes one audio source, and its soundtrack is one\./);
  assert.equal(await page.locator('#media-replace').textContent(), 'Replace tone.wav with clip.mp4');
  assert.equal(await page.locator('#media-error').isHidden(), true); // said once, in the offer
  await offer.scrollIntoViewIfNeeded();
  await shot('media-replace.png');
  await page.locator('#media-replace').click();
  await page.locator('.media-item[data-kind="video"]').waitFor();
  await page.locator('.media-item[data-kind="audio"]').waitFor({ state: 'detached' });
  assert.equal(await page.locator('#media-offer').isHidden(), true);
  await page.locator('#clear-media').click();
  await page.locator('.media-empty').waitFor();
});

test('the towers: their progress stays in the run bar, the time left steady; then their time is told before a run', async () => {
  await page.locator('#file-picker').setInputFiles([file('first.png', png(80, 60, 1))]);
  const est = page.locator('#tower-estimate:not([hidden])');
  await est.waitFor();
  assert.match(await est.textContent(), /not measured yet: the first run times them \(on a CPU an image can take tens of seconds\)/);
  await page.locator('#run').click();
  const progress = page.locator('#run-progress:not([hidden])');
  await progress.waitFor();
  const text = page.locator('#run-progress-text');
  await page.locator('#run-progress-text', { hasText: 'block' }).waitFor({ timeout: 120000 });
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight)); // scrolled down, the run bar stays
  assert.ok(await inView(progress), 'the progress is out of view');
  // Sample the time left through the pass.
  const lefts = [];
  const t0 = Date.now();
  let shotTaken = false;
  for (;;) {
    const s = await text.textContent().catch(() => '');
    if (!/^Towers:/.test(s)) break;
    const m = /about ([\d.]+) (ms|s) left/.exec(s);
    if (m) lefts.push([Date.now() - t0, Number(m[1]) * (m[2] === 's' ? 1000 : 1)]);
    if (m && !shotTaken) {
      await shot('run-progress.png');
      shotTaken = true;
    }
    await page.waitForTimeout(250);
  }
  console.log('time left through the pass (ms since the first sample, ms left):', JSON.stringify(lefts));
  assert.ok(lefts.length >= 3, `only ${lefts.length} estimates`);
  // Steady: it never rises by more than a quarter of the first estimate from one sample to the next.
  for (let i = 1; i < lefts.length; i++) assert.ok(lefts[i][1] <= lefts[i - 1][1] + 0.25 * lefts[0][1], `the estimate rose: ${lefts[i - 1][1]} → ${lefts[i][1]} ms`);
  await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 180000 });

  // Measured now: the next image's time is told before Run; the first one is cached.
  await page.locator('#file-picker').setInputFiles([file('second.png', png(60, 80, 2))]);
  await page.locator('#tower-estimate:not([hidden])', { hasText: "The image will take about" }).waitFor();
  assert.match(await est.textContent(), /^The image will take about \d+ s in the towers on this machine's CPU \(measured here: [\d.]+ s an image, 1 timed\)\.$/);
  assert.match(await page.locator('.run-hint').textContent(), /towers about \d+ s/);
  await est.scrollIntoViewIfNeeded();
  await shot('tower-estimate.png');
  await page.locator('#clear-media').click();
  await page.locator('.media-empty').waitFor();
});

test('the same prompt again: the prefill names its reused and computed tokens and its speed over the computed', async () => {
  // A scorer run of the built-in model is over in a fraction of a second: wait for its history entry.
  const runs = async () => Number((await page.locator('#tab-history .count').textContent().catch(() => '0')) || 0);
  for (let i = 0; i < 2; i++) {
    const n = await runs();
    await page.locator('#run-scorer:not([disabled])').click();
    await page.waitForFunction((want) => Number(document.querySelector('#tab-history .count')?.textContent ?? 0) >= want, n + 1, { timeout: 120000 });
  }
  const rows = await page.locator('#timing-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const prefill = rows.find((r) => r[0] === 'Prefill');
  const m = /· ([\d,]+) tok \(([\d,]+) reused, ([\d,]+) computed\)$/.exec(prefill[1]);
  assert.ok(m, `prefill ${prefill[1]}`);
  const n = (s) => Number(s.replace(/,/g, ''));
  assert.equal(n(m[2]) + n(m[3]), n(m[1]));
  assert.match(rows.find((r) => r[0] === 'Prefill speed')[1], /tok\/s computed$/);
  await page.locator('#timing').scrollIntoViewIfNeeded();
  await shot('timing-reused.png');
  await page.locator('#tab-history').click();
  const last = page.locator('#history-table tbody tr').first();
  assert.match(await last.locator('.reused').textContent(), /^[\d,]+ reused, [\d,]+ computed$/);
  await page.locator('#history').scrollIntoViewIfNeeded();
  await shot('history-reused.png');
});
