// The page's messages (issue 9, point 11): stale results, JSON-mode schema
// errors in place, a run's settings in the history.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve, setMaxTokens } from './uiharness.mjs';

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

// runOnce runs once and waits until the run is in the history and over. A
// short run can end before its Stop button is ever seen, so the history's
// count, not the button, says the run happened.
async function runOnce() {
  const runs = () => page.evaluate(() => Number(document.querySelector('#tab-history .count')?.textContent ?? 0));
  const before = await runs();
  await page.locator('#run').click();
  await page.waitForFunction((n) => Number(document.querySelector('#tab-history .count')?.textContent ?? 0) > n, before,
    { timeout: 120000 });
  await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 120000 });
}

test('results of an earlier input are marked stale when the input changes', async () => {
  await ready(page, srv.url);
  await runOnce();
  assert.equal(await page.locator('#stale-note').isHidden(), true, 'fresh results are marked stale');
  await page.locator('#input-text').fill('A different ticket: the app crashes on login.');
  await page.locator('#stale-note:not([hidden])').waitFor();
  assert.match(await page.locator('#stale-note').textContent(), /earlier input: the input text changed/);
  await page.screenshot({ path: join(out, 'stale.png') });
  await runOnce();
  await page.locator('#stale-note').waitFor({ state: 'hidden' });
});

test('the history shows each run\'s settings and marks a baseline with other settings', async () => {
  await page.locator('#tab-history').click();
  await page.locator('#history-table tr[data-run="run-1"] .star').click();
  await setMaxTokens(page, 8);
  await runOnce();
  const row = page.locator('#history-table tr[data-run="run-3"]');
  await row.waitFor();
  assert.match(await row.locator('.run-settings').textContent(), /^8 tok · temp 0/);
  assert.equal(await row.locator('.settings-diff').textContent(), 'settings differ: max_tokens 96 → 8');
  assert.equal(await page.locator('#history-table tr[data-run="run-2"] .settings-diff').count(), 0);
  assert.equal(await page.locator('#tab-history .count').textContent(), '3');
  await page.locator('#history-table').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(out, 'history-settings.png') });
});

test('a schema JSON error shows in the editor, and the status does not say ready', async () => {
  if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
  await page.locator('#schema-json-toggle').click();
  await page.locator('#schema-json').fill('{"fields": [');
  await page.locator('#schema-panel button', { hasText: 'Apply JSON' }).click();
  await page.locator('#schema-json-error:not([hidden])').waitFor();
  assert.match(await page.locator('#schema-json-error').textContent(), /^Not applied: /);
  assert.doesNotMatch(await page.locator('.schema-status').textContent(), /ready/);
  assert.equal(await page.locator('.toast-error').count(), 0);
  await page.screenshot({ path: join(out, 'schema-json-error.png') });
  await page.locator('#schema-panel button', { hasText: 'Cancel' }).click();
  await page.locator('.schema-status .good').waitFor();
});
