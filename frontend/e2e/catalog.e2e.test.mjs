// The catalog field in the app (issue 10, point 5): the Tools preset (a
// catalog field of the fixture's 42 tools, k = 2) in the schema editor, a
// run on the built-in model, the names in the tools card with a row per
// trie step and the sparse-vs-dense head timing. Screenshots go to E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;

before(async () => {
  srv = await serve();
});

after(() => srv?.stop());

/** Opens the schema side panel and picks the Tools preset. */
async function pickTools(page) {
  if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
  await page.locator('#schema-panel .field-card').first().waitFor();
  const presets = await page.locator('#preset option').evaluateAll((os) => os.map((o) => [o.value, o.textContent]));
  assert.ok(presets.some(([v]) => v === 'tools'), `no tools preset among ${JSON.stringify(presets)}`);
  await page.locator('#preset').selectOption('tools');
  await page.locator('#schema-panel .field-card select.field-type').first().waitFor();
  await page.waitForFunction(() => document.querySelector('#schema-panel .field-card select.field-type')?.value === 'catalog');
  await page.locator('#schema-panel .schema-status', { hasText: 'ready to score' }).waitFor();
}

/**
 * Records the run updates' catalog steps as the page receives them: how
 * many steps each update carried, and whether the tools field's result had
 * arrived by then.
 */
function recordUpdates(page) {
  return page.addInitScript(() => {
    window.__catalogUpdates = [];
    const ES = window.EventSource;
    window.EventSource = class extends ES {
      constructor(...a) {
        super(...a);
        this.addEventListener('message', (m) => {
          try {
            const ev = JSON.parse(m.data);
            if (ev.name !== 'run:update' || !ev.data.scorer) return;
            const sc = ev.data.scorer;
            if (sc.catalog?.length || sc.fields?.some((f) => f.name === 'tools')) {
              window.__catalogUpdates.push({ steps: sc.catalog?.length ?? 0, names: sc.catalog?.at(-1)?.names ?? null, result: !!sc.fields?.some((f) => f.name === 'tools') });
            }
          } catch {}
        });
      }
    };
  });
}

/** Records, in the page, whether the tools card showed names before its final result. */
async function watchLive(page) {
  await page.evaluate(() => {
    window.__catalogLive = [];
    new MutationObserver(() => {
      const card = document.querySelector('#scorer-panel .dist.live[data-field="tools"]:not(.filled)');
      if (card) window.__catalogLive.push(card.querySelectorAll('.cat-name').length);
    }).observe(document.querySelector('#scorer-panel'), { subtree: true, childList: true, attributes: true });
  });
}

for (const [w, hgt] of [[1024, 700], [1440, 900]]) {
  test(`at ${w}×${hgt}: the Tools preset names two tools, with step rows and the heads' timing`, async () => {
    const { ctx, page } = await browse(w, hgt);
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    try {
      await recordUpdates(page);
      await ready(page, srv.url);
      await pickTools(page);
      const k = page.locator('#schema-panel .field-k');
      assert.equal(await k.inputValue(), '2');
      assert.equal(await k.getAttribute('max'), '42');
      assert.equal(await page.locator('#schema-panel li.option').count(), 42);
      assert.match(await page.locator('#schema-panel .catalog-count').textContent(), /of 42 entries/);
      await page.screenshot({ path: join(out, `catalog-${w}x${hgt}-schema.png`) });
      // k out of range is a problem shown inline, and Run is held back.
      await k.fill('43');
      await page.locator('#schema-panel .field-card .problems', { hasText: 'k must be 1..42' }).waitFor();
      await k.fill('2');
      await page.locator('#schema-panel .field-card .problems').waitFor({ state: 'detached' });
      await page.locator('#schema-toggle').click();
      await page.locator('#schema-panel').waitFor({ state: 'hidden' });
      assert.ok((await page.locator('#input-text').inputValue()).trim().length > 0, 'the preset gave no sample input');

      await watchLive(page);
      await page.locator('#run:not([disabled])').click();
      const card = page.locator('#scorer-panel [data-field="tools"]');
      await card.waitFor();
      await page.locator('#scorer-panel .dist.filled[data-field="tools"]').waitFor({ timeout: 180000 });
      await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 180000 });
      const names = await card.locator('.cat-name').allTextContents();
      assert.equal(names.length, 2, `names: ${names}`);
      assert.notEqual(names[0], names[1], 'the two names are not distinct');
      assert.equal(await card.locator('.dist-win').textContent(), names.join(', '));
      const rows = await card.locator('.cat-step').count();
      assert.ok(rows >= 2, `${rows} step rows`);
      const legal = await card.locator('.cat-step .cat-legal').allTextContents();
      assert.ok(legal.every((l) => /^\d+ legal$/.test(l)), `legal-set sizes: ${legal}`);
      assert.ok(await card.locator('.cat-step .cat-tok').count() >= rows, 'a step row without tokens');
      const timing = await card.locator('.cat-timing').textContent();
      assert.match(timing, /^sparse head [\d.e+-]+ ms\/token vs dense [\d.e+-]+ ms\/token \([\d.]+× less\), decode [\d.e+-]+ ms\/token$/);
      const live = await page.evaluate(() => window.__catalogLive);
      const updates = await page.evaluate(() => window.__catalogUpdates);
      const steps = updates.reduce((n, u) => n + u.steps, 0);
      assert.equal(steps, rows, `the updates carried ${steps} catalog steps, the result has ${rows}`);
      assert.deepEqual(updates.filter((u) => u.names).at(-1).names, names, 'the last live names are not the result\'s');
      console.log(`${w}×${hgt}: names ${names.join(', ')}; ${rows} steps; legal ${legal.join(' ')}; ${timing}; ` +
        `updates with catalog steps: ${JSON.stringify(updates)}; tools card showing live names (count per mutation): ${JSON.stringify(live.slice(0, 20))}`);
      await card.scrollIntoViewIfNeeded();
      await page.waitForTimeout(300);
      await page.screenshot({ path: join(out, `catalog-${w}x${hgt}.png`) });
      await card.screenshot({ path: join(out, `catalog-${w}x${hgt}-card.png`) });
      // The generation panel compares its JSON with the names (a row for the tools field).
      await page.locator('#generator-panel .agree li, #generator-panel .parse-state').first().waitFor();
      // Compact: the names joined on one line.
      await page.locator('#compact-toggle').click();
      assert.equal(await page.locator('#scorer-panel .dists.compact [data-field="tools"] .dist-win').textContent(), names.join(', '));
      await page.screenshot({ path: join(out, `catalog-${w}x${hgt}-compact.png`) });
      await page.locator('#compact-toggle').click();
      assert.deepEqual(errors, []);
    } finally {
      await ctx.close();
    }
  });
}

// Last: the backend setting stays with the server for the rest of its session.
test('at 1440×900: under the catalog backend the ticket preset\'s choice fields are decoded through the trie', async () => {
  const { ctx, page } = await browse(1440, 900);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await ready(page, srv.url);
    await page.keyboard.press('Control+,');
    await page.locator('#settings[open]').waitFor();
    assert.equal(await page.locator('#settings select[name="backend"]').inputValue(), 'json');
    await page.locator('#settings select[name="backend"]').selectOption('catalog');
    await page.locator('#settings button[type="submit"]').click();
    await page.locator('#settings').waitFor({ state: 'hidden' });
    if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
    await page.locator('#preset').selectOption('ticket');
    await page.locator('#schema-panel .schema-status', { hasText: 'ready to score' }).waitFor();
    await page.locator('#schema-toggle').click();
    await page.locator('#run:not([disabled])').click();
    await page.locator('#scorer-panel .dists').waitFor();
    await page.waitForFunction(() => /^(\d+)\/\1 fields$/.test(document.querySelector('#scorer-progress')?.textContent ?? '') ||
      !!document.querySelector('#scorer-panel .side-error'), null, { timeout: 180000 });
    await page.screenshot({ path: join(out, 'catalog-backend-1440x900.png') });
    assert.equal(await page.locator('#scorer-panel .side-error').count(), 0, await page.locator('#scorer-panel .side-error').first().textContent().catch(() => ''));
    await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 180000 });
    const cards = await page.locator('#scorer-panel .dist.filled').evaluateAll((ds) => ds.map((d) => ({
      field: d.dataset.field, type: d.querySelector('.tag')?.textContent, bars: d.querySelectorAll('.bar-row').length,
      note: d.querySelector('.trie-note')?.textContent ?? null, fix: !!d.querySelector('.tag.warn'),
    })));
    console.log(`catalog backend: ${JSON.stringify(cards)}`);
    const choices = cards.filter((c) => c.type === 'choice');
    assert.equal(choices.length, 2, JSON.stringify(cards));
    for (const c of choices) {
      assert.match(c.note ?? '', /^decoded through the trie \(\d+ steps?\)$/, `${c.field}: ${c.note}`);
      assert.ok(c.bars >= 1, `${c.field} has no candidate bars`);
      assert.equal(c.fix, false, `${c.field} shows the boundary-fix tag`);
    }
    for (const c of cards.filter((c) => c.type !== 'choice')) assert.equal(c.note, null, `${c.field} (${c.type}) is noted as trie-decoded`);
    await page.locator('#scorer-panel .dist.filled .trie-note').first().scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(out, 'catalog-backend-1440x900.png') });
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
  }
});
