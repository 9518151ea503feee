// Backends side by side in the app (issue 14, points 4 and 5): a scorer run
// under the cached backend picked in the run bar, repeated with json from
// the history, the Distributions column against the baseline; the
// Calibration tab on a loaded examples file. Screenshots go to E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;

before(async () => {
  srv = await serve();
});

after(() => srv?.stop());

/** Waits for run id to be in the history table. */
async function inHistory(page, id) {
  await page.locator('#tab-history').click();
  await page.locator(`#history-table tr[data-run="${id}"]`).waitFor({ timeout: 180000 });
}

test('a run under the cached backend, repeated with json, compared in the history', async () => {
  const { ctx, page } = await browse(1440, 900);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await ready(page, srv.url);
    const opts = await page.locator('#run-backend option').evaluateAll((os) => os.map((o) => o.value));
    assert.deepEqual(opts, ['', 'json', 'cached', 'catalog']);
    await page.locator('#run-backend').selectOption('cached');
    await page.locator('#run-scorer:not([disabled])').click();
    await inHistory(page, 'run-1');
    const row1 = page.locator('#history-table tr[data-run="run-1"]');
    assert.equal(await row1.locator('.backend-tag').textContent(), 'cached');
    await row1.locator('.star').click();
    await row1.locator('select.repeat-backend').selectOption('json');
    await inHistory(page, 'run-2');
    const row2 = page.locator('#history-table tr[data-run="run-2"]');
    assert.equal(await row2.locator('.backend-tag').textContent(), 'json');
    const cell = await row2.locator('.dist-cell').textContent();
    console.log(`cached (baseline) vs json on the ticket preset: ${cell}`);
    assert.match(cell, /^KL \d+\.\d{3} \(max \d+\.\d{3}\) · (all \d+ winners same|\d+ of \d+ winners changed)/);
    assert.match(await row2.locator('.dist-cell').getAttribute('title'), /KL\(baseline ‖ run\) over \d+ decisions/);
    await page.locator('#history-table').screenshot({ path: join(out, 'backends-history.png') });
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
  }
});

test('the Calibration tab reports on a loaded examples file', async () => {
  const { ctx, page } = await browse(1440, 900);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await ready(page, srv.url);
    const file = join(out, 'ticket-examples.jsonl');
    writeFileSync(file, [
      { text: 'My parcel is two weeks late and the screen is cracked <b>refund now</b>', labels: { priority: 'high', refund_requested: true } },
      { text: 'Thanks, all good.', labels: { priority: 'low', refund_requested: false } },
      { text: 'Charged twice, please fix.', labels: { priority: 'medium', refund_requested: true } },
    ].map((e) => JSON.stringify(e)).join('\n') + '\n');
    await page.locator('#tab-calibration').click();
    await page.locator('#calibration-file').setInputFiles(file);
    await page.locator('#calibration-panel', { hasText: 'ticket-examples.jsonl: 3 examples' }).waitFor();
    await page.locator('#calibration-run:not([disabled])').click();
    await page.locator('#calibration-panel .quality-card').first().waitFor({ timeout: 180000 });
    const cards = await page.locator('#calibration-panel .quality-card h4').allTextContents();
    assert.deepEqual(cards, ['all fields', 'priority', 'refund_requested']);
    assert.equal(await page.locator('#calibration-panel svg.reliability').count(), 3);
    assert.equal(await page.locator('#calibration-panel b').count(), 0);
    await page.locator('#calibration-panel').screenshot({ path: join(out, 'calibration-panel.png') });
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
  }
});
