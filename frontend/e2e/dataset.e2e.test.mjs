// The Dataset tab (issue 15, point 3): load a JSONL file, score it on the
// built-in model, see the progress, the answer counts and the table, export.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;
let ctx;
let page;

before(async () => {
  srv = await serve();
  ({ ctx, page } = await browse(1440, 900));
});

after(async () => {
  await ctx?.close();
  srv?.stop();
});

test('scores a JSONL file: progress, answer counts, the table, CSV export', async () => {
  await ready(page, srv.url);
  await page.locator('#tab-dataset').click();
  assert.equal(await page.locator('#dataset-run').isDisabled(), true);
  const texts = ['My parcel is late.', 'Thanks, all good!', 'The screen arrived cracked, refund please.', 'Where is my order?', 'I was charged twice.'];
  const lines = texts.map((t, i) => JSON.stringify(i % 2 ? { text: t } : { id: `t${i}`, text: t }));
  lines.splice(2, 0, '{not json');
  const file = join(out, 'tickets.jsonl');
  writeFileSync(file, lines.join('\n') + '\n');
  await page.locator('#dataset-file').setInputFiles(file);
  await page.locator('#dataset-info', { hasText: 'tickets.jsonl · 6 records (1 unreadable' }).waitFor();

  await page.locator('#dataset-run:not([disabled])').click();
  await page.locator('#dataset-progress [data-status="done"]').waitFor({ timeout: 120000 });
  const status = await page.locator('#dataset-progress').textContent();
  assert.match(status, /^Done · 6 of 6 records · 1 error · [\d.]+\/s · /);
  assert.equal(await page.locator('#dataset-table tbody tr').count(), 6);
  assert.equal(await page.locator('#dataset-table tbody tr.error-row').count(), 1);
  assert.match(await page.locator('#dataset-table tbody tr.error-row').textContent(), /bad JSON/);
  assert.equal(await page.locator('#dataset-table tbody tr').first().getAttribute('data-id'), 't0');
  // Five scored records: every field's counts add up to five.
  const priority = page.locator('#dataset-counts [data-field="priority"] .bar-pct');
  const counts = (await priority.allTextContents()).map(Number);
  assert.equal(counts.reduce((a, b) => a + b, 0), 5);
  await page.locator('#dataset').screenshot({ path: join(out, 'dataset-tab.png') });

  const [csv] = await Promise.all([page.waitForEvent('download'), page.locator('#dataset-export-csv').click()]);
  assert.equal(csv.suggestedFilename(), 'tickets-results.csv');
  const cpath = join(out, csv.suggestedFilename());
  await csv.saveAs(cpath);
  const rows = readFileSync(cpath, 'utf8').trimEnd().split('\n');
  assert.equal(rows.length, 7);
  assert.ok(rows[0].startsWith('id,line,error,elapsed_ms,priority,department,refund_requested,'), rows[0]);
  assert.ok(rows[3].startsWith('3,3,bad JSON'), rows[3]);
});
