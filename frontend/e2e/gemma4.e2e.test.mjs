// A Gemma 4 model in the app, end to end: the tiny synthetic Gemma 4
// checkpoint (testdata/gemma4-synthetic-tiny.tar.gz: dense, text only, a
// 512-token vocabulary) with its test tokenizer
// (engine/gemma4/testdata/tokenizer.json) beside it, opened through the page
// as a user does: "Open folder…" at 1440×900, the Models dialog's row at
// 1024×700. The model bar (the name, the family badge "Gemma 4" / "4", text
// the only input, image and audio off with the reason), the prompt in Gemma
// 4's turn format, a run of a small schema and a generation side by side
// (distributions summing to 1, the text, the timing breakdown), an image the
// model cannot take refused before Run with what to do. Screenshots in
// E2E_OUT. The OpenAI-compatible routes on the same model:
// app/api/gemma4_test.go.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { deflateSync, crc32 } from 'node:zlib';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { browse, out, serve } from './uiharness.mjs';

const repo = resolve(new URL('.', import.meta.url).pathname, '..', '..');

/** The tiny Gemma 4 checkpoint unpacked in a temporary folder, with its test tokenizer as tokenizer.json. */
function gemma4Folder() {
  const dir = mkdtempSync(join(tmpdir(), 'verdict-gemma4-'));
  const tar = spawnSync('tar', ['-xzf', join(repo, 'testdata', 'gemma4-synthetic-tiny.tar.gz'), '-C', dir]);
  assert.equal(tar.status, 0, `tar: ${tar.stderr}`);
  const folder = join(dir, 'gemma4-synthetic-tiny');
  copyFileSync(join(repo, 'engine', 'gemma4', 'testdata', 'tokenizer.json'), join(folder, 'tokenizer.json'));
  return folder;
}

/** A w×h grey RGB PNG. */
function png(w, h) {
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
  const raw = Buffer.alloc((w * 3 + 1) * h, 128);
  for (let y = 0; y < h; y++) raw[y * (w * 3 + 1)] = 0;
  return Buffer.concat([Buffer.from('\x89PNG\r\n\x1a\n', 'latin1'), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

// A small schema: a choice, a bool and a score.
const schema = {
  instructions: 'Read the note and answer every field in JSON.',
  fields: [
    { name: 'mood', question: 'What is the mood of the note?', type: 'choice', options: { happy: 'glad', sad: 'unhappy', calm: 'neither' } },
    { name: 'urgent', question: 'Is it urgent?', type: 'bool' },
    { name: 'length', question: 'How long is it?', type: 'score', levels: { 0: 'short', 1: 'medium', 2: 'long' } },
  ],
};
const note = 'The printer on floor two is jammed again and the report is due in an hour.';

let srv;
let folder;

before(async () => {
  folder = gemma4Folder();
  srv = await serve();
});

after(() => srv?.stop());

/** Waits for the load to end and requires the model ready (else the chip's error). */
async function loaded(page, family) {
  await page.locator(`#model-chip[data-state="ready"] #model-family[data-family="${family}"], #model-chip[data-state="error"]`).waitFor();
  assert.equal(await page.locator('#model-chip').getAttribute('data-state'), 'ready', await page.locator('#model-chip').innerText());
}

/** The model bar of the ready Gemma 4 folder: name, badge (shown as shown), inputs, all whole inside the chip. */
async function checkModelBar(page, shown) {
  assert.equal(await page.locator('#model-name').innerText(), 'gemma4-synthetic-tiny');
  assert.equal(await page.locator('#model-name').getAttribute('title'), `gemma4-synthetic-tiny\n${folder}`);
  const badge = page.locator('#model-chip #model-family');
  assert.equal(await badge.innerText(), shown);
  assert.equal(await badge.getAttribute('title'), 'decoder family: Gemma 4');
  assert.equal(await badge.getAttribute('data-family'), 'gemma4');
  assert.equal(await page.locator('#random-weights').count(), 0);
  // Text only: image, audio and video off, each saying why.
  const inputs = await page.locator('#model-chip .modality').evaluateAll((es) => es.map((e) => [e.dataset.input, e.classList.contains('on'), e.title]));
  assert.deepEqual(inputs, [
    ['text', true, 'text: supported'],
    ['image', false, 'image: this checkpoint has no vision tower'],
    ['audio', false, 'audio: this checkpoint has no audio tower'],
    ['video', false, 'video: this checkpoint has no vision tower'],
  ]);
  assert.match(await page.locator('#model-figures').getAttribute('title'), /^385\.4 K params · [\d.]+ MB · 6 layers · loaded in \d/);
  const fit = await page.evaluate(() => {
    const chip = document.querySelector('#model-chip').getBoundingClientRect();
    return [...document.querySelectorAll('#model-name, #model-family, #model-chip .modality')].filter((e) => {
      const r = e.getBoundingClientRect();
      if (!r.width) return false; // hidden (a narrow window leaves out "text ✓")
      return r.left < chip.left || r.right > chip.right + 0.5 || e.scrollWidth > e.clientWidth + 1;
    }).map((e) => e.textContent);
  });
  assert.deepEqual(fit, []);
}

/**
 * Runs the page's schema and input side by side and checks what renders:
 * a distribution per field summing to 1 with one winner, the generated
 * text, and both sides' timing rows, their prompt tokens the preview's.
 */
async function runSideBySide(page, w, hgt, fields) {
  // The preview (debounced) has caught up with the input: the prompt tab shows it, in Gemma 4's turns.
  await page.locator('#tab-prompt').click();
  const input = await page.locator('#input-text').inputValue();
  await page.locator('#prompt-text', { hasText: input }).waitFor();
  const prompt = await page.locator('#prompt-text').textContent();
  assert.ok(prompt.startsWith('<bos><|turn>user\n') && prompt.endsWith('<turn|>\n<|turn>model\n'), `not Gemma 4's turns: ${JSON.stringify(prompt)}`);
  assert.doesNotMatch(prompt, /start_of_turn|end_of_turn/);
  const meta = await page.locator('div.muted', { hasText: 'The shared prefix the scorer computes once' }).textContent();
  const count = /· ([\d,]+) tokens of 8,192/.exec(meta)?.[1];
  assert.ok(count, `no token count in ${JSON.stringify(meta)}`);
  const tokens = Number(count.replace(/,/g, ''));
  // The run bar's count (debounced) comes to the same.
  await page.locator('.run-hint', { hasText: `${count} / 8,192 tokens` }).waitFor();

  await page.locator('#run:not([disabled])').click();
  await page.locator('#scorer-panel .pill[data-status="done"]').waitFor();
  await page.locator('#generator-panel .pill[data-status="done"]').waitFor();
  assert.equal(await page.locator('#scorer-panel .dist.filled').count(), fields.length);
  for (const f of fields) {
    const card = page.locator(`#scorer-panel .dist[data-field="${f}"]`);
    const ps = await card.locator('.bar-row').evaluateAll((rows) => rows.map((r) => Number(r.dataset.p)));
    if ((await card.locator('.dist-head .tag').first().textContent()) === 'independent') {
      // A yes/no decision per label: each its own probability.
      assert.ok(ps.length >= 2 && ps.every((p) => p >= 0 && p <= 1), `${f}: probabilities ${ps}`);
    } else {
      assert.ok(ps.length >= 2 && Math.abs(ps.reduce((a, b) => a + b, 0) - 1) < 1e-3, `${f}: probabilities ${ps} do not sum to 1`);
      assert.equal(await card.locator('.bar-row.winner').count(), 1, f);
    }
    assert.match(await card.locator('.dist-meta').textContent(), /confidence .*%.*allowed mass/);
  }
  assert.ok((await page.locator('#gen-text').textContent()).length > 0, 'no generated text');
  assert.match(await page.locator('#gen-tokens').textContent(), /^\d+ tok$/);
  await page.locator('#scorer-panel').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(out, `gemma4-run-${w}x${hgt}.png`) });

  assert.equal(await page.locator('#waterfall .wf-lane').count(), 2);
  const rows = await page.locator('#timing-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const row = (label) => rows.find((r) => r[0] === label) ?? assert.fail(`no timing row ${label}: ${JSON.stringify(rows)}`);
  // Both sides prefill the scorer's prompt (the generation's default): the preview's count.
  for (const side of [1, 2]) assert.match(row('Prefill')[side], new RegExp(`· ${tokens.toLocaleString('en-US')} tok$`));
  assert.match(row('Prefill speed')[1], /tok\/s/);
  assert.match(row('Prefill speed')[2], /tok\/s/);
  assert.match(row('First decision')[1], /\d+(\.\d+)? (ms|s)/);
  assert.match(row('First token')[2], /\d+(\.\d+)? (ms|s)/);
  assert.match(row('Decode speed')[2], /tok\/s/);
  assert.match(row('Total')[1], /\d/);
  assert.match(row('Total')[2], /\d/);
  await page.locator('#timing').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(out, `gemma4-timing-${w}x${hgt}.png`) });
}

test('a Gemma 4 folder opened with "Open folder…": its model bar, a run side by side, an image it cannot take (1440×900)', async () => {
  const { ctx, page } = await browse(1440, 900);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await page.goto(srv.url);
    await page.locator('#model-chip[data-state="none"]').waitFor();
    await page.locator('#open-folder').click();
    await page.locator('#model-path').fill(folder);
    await page.locator('form.model-path button[type="submit"]').click();
    await loaded(page, 'gemma4');
    await checkModelBar(page, 'Gemma 4');
    await page.screenshot({ path: join(out, 'gemma4-model-1440x900.png') });

    // The small schema through the JSON editor, and a note.
    if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
    await page.locator('#schema-json-toggle').click();
    await page.locator('#schema-json').fill(JSON.stringify(schema));
    await page.locator('#schema-panel button', { hasText: 'Apply JSON' }).click();
    await page.locator('#schema-panel .field-card[data-field="2"] .field-name').waitFor();
    await page.locator('.schema-status .good').waitFor();
    await page.locator('#input-text').fill(note);
    await runSideBySide(page, 1440, 900, ['mood', 'urgent', 'length']);

    // An image: the model has no vision tower, so Run waits and says what to do.
    const img = join(out, 'gemma4-gray.png');
    writeFileSync(img, png(40, 30));
    await page.locator('#file-picker').setInputFiles([img]);
    await page.locator('.media-item[data-kind="image"]').waitFor();
    const why = page.locator('#run-why');
    await why.waitFor();
    assert.equal(await why.textContent(), 'the model has no vision tower: remove the image');
    assert.ok(await page.locator('#run').isDisabled());
    // No view of what the vision tower would receive (no broken image): the item says why.
    const item = page.locator('.media-item[data-kind="image"]');
    await item.locator('.model-view').waitFor({ state: 'detached' });
    assert.match(await item.locator('.media-note').textContent(), /gemma4-synthetic-tiny .*takes no images/);
    await page.locator('.media-item[data-kind="image"]').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(out, 'gemma4-image-refused-1440x900.png') });
    await page.locator('#clear-media').click();
    await page.locator('.media-item').waitFor({ state: 'detached' });
    await page.locator('#run:not([disabled])').waitFor();
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
  }
});

test('the Gemma 4 folder loaded again from the Models dialog: the narrow badge, a run side by side (1024×700)', async () => {
  const { ctx, page } = await browse(1024, 700);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    // From another model, so that the row's Load is what brings it back.
    await page.goto(srv.url);
    await page.locator('#model-chip[data-state="ready"]').waitFor();
    // The server's media are shared by every tab: none left over from the test before.
    if (await page.locator('#clear-media').count()) {
      await page.locator('#clear-media').click();
      await page.locator('.media-item').first().waitFor({ state: 'detached' });
    }
    await page.locator('#load-builtin').click();
    await loaded(page, 'gemma3n');
    await page.locator('#browse-models').click();
    const row = page.locator(`#local-models li.model-row[data-spec="${folder}"]`);
    assert.match(await row.innerText(), /gemma4-synthetic-tiny\s*Gemma 4/);
    await row.locator('button', { hasText: 'Load' }).click();
    await loaded(page, 'gemma4');
    await checkModelBar(page, '4');
    assert.ok(!(await page.locator('#model-chip .modality[data-input="text"]').isVisible()), 'text ✓ is shown below 1200 px');
    await page.screenshot({ path: join(out, 'gemma4-model-1024x700.png') });

    // The page's own preset (the support ticket) and its sample input.
    const fields = await page.locator('#schema-panel .field-card .field-name').evaluateAll((es) => es.map((e) => e.value));
    assert.ok(fields.length > 0);
    await runSideBySide(page, 1024, 700, fields);
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
  }
});
