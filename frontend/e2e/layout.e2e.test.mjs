// The page's layout at 1024×700 and 1440×900 (issue 9, point 10): Input and
// Run first, both result panels side by side, a sticky run bar, the schema
// editor a side panel, nothing cut off or overflowing. Screenshots go to E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve, setMaxTokens } from './uiharness.mjs';

let srv;

before(async () => {
  srv = await serve();
});

after(() => srv?.stop());

/**
 * The box of the first element matching sel. The run bar's buttons are
 * redrawn when the input or the schema check changes: ask again when one
 * was replaced between finding it and measuring it.
 */
async function box(page, sel) {
  let b = null;
  for (let i = 0; i < 5 && !b; i++) {
    await page.locator(sel).first().waitFor();
    b = await page.locator(sel).first().boundingBox();
  }
  return b;
}

/** The element's box, asserted to lie inside the viewport. */
async function inView(page, sel, what) {
  const vp = page.viewportSize();
  const b = await box(page, sel);
  assert.ok(b, `${what} (${sel}) is not shown`);
  assert.ok(b.x >= 0 && b.y >= 0 && b.x + b.width <= vp.width && b.y + b.height <= vp.height,
    `${what} (${sel}) at ${JSON.stringify(b)} is outside the ${vp.width}×${vp.height} viewport`);
  return b;
}

/** Boxes of the elements matching sel that stick out of the box of container. */
async function outside(page, container, sel) {
  return page.evaluate(([c, s]) => {
    const box = document.querySelector(c).getBoundingClientRect();
    return [...document.querySelectorAll(s)].map((e) => [e.textContent, e.getBoundingClientRect()])
      .filter(([, r]) => r.left < box.left - 0.5 || r.right > box.right + 0.5)
      .map(([t, r]) => `${t} [${Math.round(r.left)}, ${Math.round(r.right)}] outside [${Math.round(box.left)}, ${Math.round(box.right)}]`);
  }, [container, sel]);
}

async function runOnce(page) {
  // A run of the built-in model can end within a frame (a warm second run
  // takes about 0.2 s): generate long enough for the Stop button to be seen.
  await setMaxTokens(page, 1200);
  await page.locator('#run').click();
  await page.locator('#stop-run').waitFor();
  await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 120000 });
  await page.locator('#scorer-panel .dist.filled').first().waitFor();
  await page.waitForTimeout(600); // the bars grow in
}

for (const [w, hgt] of [[1024, 700], [1440, 900]]) {
  test(`at ${w}×${hgt}: Run and the first results are in view, side by side`, async () => {
    const { ctx, page } = await browse(w, hgt);
    try {
      await ready(page, srv.url);
      const before = await box(page, '#run');
      // The device lines arrive after the page: they must not move Run.
      await page.locator('#media-devices li[data-feature="camera"]', { hasText: 'camera ✓' }).waitFor();
      await page.locator('#media-devices li[data-feature="speaker"]:not(.dev-unknown)').waitFor();
      const afterDevices = await box(page, '#run');
      assert.equal(afterDevices.y, before.y, 'Run moved when the device lines arrived');
      const devices = await box(page, '#media-devices');
      assert.ok(afterDevices.y + afterDevices.height <= devices.y, 'Run is below the device lines (they can push it down)');
      await runOnce(page);
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}.png`) });
      await inView(page, '#input-text', 'the input');
      await inView(page, '#run', 'Run');
      await inView(page, '#scorer-panel .dist.filled .dist-head', 'the first scorer field');
      await inView(page, '#scorer-panel .dist.filled .bar-row', 'the first bar');
      const gt = await box(page, '#gen-text');
      assert.ok(gt.y + 60 <= hgt, `the generated text starts at y=${gt.y}, below the fold`);
      const s = await box(page, '#scorer-panel');
      const g = await box(page, '#generator-panel');
      assert.equal(Math.round(s.y), Math.round(g.y), 'the result panels are not side by side');
      assert.ok(s.x + s.width <= g.x, 'the result panels overlap');

      // Compact: one line per field, the first three in view.
      await page.locator('#compact-toggle').click();
      const heights = await page.locator('#scorer-panel .dist').evaluateAll((ds) => ds.map((d) => d.getBoundingClientRect().height));
      assert.ok(heights.every((x) => x < 32), `compact fields are ${heights} px high`);
      await inView(page, '#scorer-panel .dist:nth-child(3)', 'the third field in the compact view');
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}-compact.png`) });
      await page.locator('#compact-toggle').click();

      // The run bar stays in view when the page scrolls to the timing card.
      await page.locator('#timing').scrollIntoViewIfNeeded();
      await page.locator('#timing').evaluate((el) => el.scrollIntoView({ block: 'end' }));
      await inView(page, '#run', 'Run (sticky) after scrolling down');
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}-timing.png`) });
      const overflow = await page.evaluate(() => [...document.querySelectorAll('#timing, .col-main')].map((e) => e.scrollWidth - e.clientWidth));
      assert.deepEqual(overflow, [0, 0], 'horizontal overflow of the timing card and the main column');
      assert.deepEqual(await outside(page, '#timing', '#timing .wf-mark span, #timing .wf-tick, #timing .wf-legend span'), []);
    } finally {
      await ctx.close();
    }
  });
}

test('at 1440×900: the schema side panel shows option and type names in full', async () => {
  const { ctx, page } = await browse(1440, 900);
  try {
    await ready(page, srv.url);
    if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
    await page.locator('#schema-panel .field-card').first().waitFor();
    await inView(page, '#run', 'Run with the schema open');
    const cut = await page.evaluate(() => {
      const c = document.createElement('canvas').getContext('2d');
      const bad = [];
      for (const i of document.querySelectorAll('#schema-panel .opt-name, #schema-panel .field-name')) {
        if (i.scrollWidth > i.clientWidth) bad.push(`${i.value}: ${i.scrollWidth} > ${i.clientWidth}`);
      }
      for (const s of document.querySelectorAll('#schema-panel select.field-type')) {
        const st = getComputedStyle(s);
        c.font = `${st.fontWeight} ${st.fontSize} ${st.fontFamily}`;
        const need = c.measureText(s.selectedOptions[0].textContent).width + parseFloat(st.paddingLeft) + 16;
        if (need > s.clientWidth) bad.push(`${s.selectedOptions[0].textContent}: needs ${Math.ceil(need)} px, has ${s.clientWidth}`);
      }
      return bad;
    });
    assert.deepEqual(cut, []);
    await page.screenshot({ path: join(out, 'layout-1440x900-schema.png') });
    // Closed, the panel gives its room back to the results.
    await page.locator('#schema-toggle').click();
    await page.locator('#schema-panel').waitFor({ state: 'hidden' });
  } finally {
    await ctx.close();
  }
});

test('at 1024×700 with the schema open: the run bar\'s controls neither overlap nor leave the bar', async () => {
  const { ctx, page } = await browse(1024, 700);
  try {
    await ready(page, srv.url);
    if ((await page.locator('#schema-toggle').getAttribute('aria-expanded')) !== 'true') await page.locator('#schema-toggle').click();
    await page.locator('#schema-panel .field-card').first().waitFor();
    await inView(page, '#run', 'Run with the schema open');
    const bad = await page.evaluate(() => {
      const bar = document.querySelector('#run-bar').getBoundingClientRect();
      const els = [...document.querySelectorAll('#run-bar button')].filter((e) => e.offsetParent);
      const rs = els.map((e) => [e.textContent, e.getBoundingClientRect()]);
      const out = [];
      for (const [t, r] of rs) {
        if (r.left < bar.left - 0.5 || r.right > bar.right + 0.5 || r.top < bar.top - 0.5 || r.bottom > bar.bottom + 0.5) out.push(`${t} leaves the bar`);
      }
      for (let i = 0; i < rs.length; i++) {
        for (let j = i + 1; j < rs.length; j++) {
          const [a, ra] = rs[i];
          const [b, rb] = rs[j];
          if (ra.left < rb.right - 0.5 && rb.left < ra.right - 0.5 && ra.top < rb.bottom - 0.5 && rb.top < ra.bottom - 0.5) out.push(`${a} overlaps ${b}`);
        }
      }
      return out;
    });
    await page.screenshot({ path: join(out, 'layout-1024x700-schema.png') });
    assert.deepEqual(bad, []);
  } finally {
    await ctx.close();
  }
});
