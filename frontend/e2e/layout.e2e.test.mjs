// The page's layout at 1024×700 and 1440×900 (issue 9, point 10; issue 28,
// items 9 and 12): Input and Run first, the first field cards in view after a
// run, both result panels side by side, a sticky run bar in at most two rows,
// the schema editor a side panel, the top bar and the settings dialog whole;
// nothing cut off, covered or overflowing. Screenshots go to E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { browse, out, ready, serve, setMaxTokens } from './uiharness.mjs';

let srv;

before(async () => {
  // No CUDA library, whatever the machine has: the settings' device note is the same everywhere.
  process.env.VERDICT_CUDA_LIB = join(mkdtempSync(join(tmpdir(), 'verdict-nocuda-')), 'libverdict_cuda.so');
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

/**
 * Problems among the visible elements matching sels: one overlapping
 * another, or leaving the viewport.
 */
async function collisions(page, sels) {
  return page.evaluate((ss) => {
    const vw = document.documentElement.clientWidth;
    const vh = document.documentElement.clientHeight;
    const els = ss.flatMap((s) => [...document.querySelectorAll(s)].map((e) => [s, e])).filter(([, e]) => e.checkVisibility());
    const rs = els.map(([s, e]) => [`${s} "${e.textContent.trim().slice(0, 24)}"`, e.getBoundingClientRect()]);
    const bad = [];
    for (const [t, r] of rs) if (r.left < -0.5 || r.top < -0.5 || r.right > vw + 0.5 || r.bottom > vh + 0.5) bad.push(`${t} leaves the viewport`);
    for (let i = 0; i < rs.length; i++) {
      for (let j = i + 1; j < rs.length; j++) {
        const [a, ra] = rs[i];
        const [b, rb] = rs[j];
        if (ra.left < rb.right - 0.5 && rb.left < ra.right - 0.5 && ra.top < rb.bottom - 0.5 && rb.top < ra.bottom - 0.5) bad.push(`${a} overlaps ${b}`);
      }
    }
    return bad;
  }, sels);
}

/**
 * Text cut short in the visible elements matching sel: an element whose
 * text overflows it, or a select too narrow for its chosen option's text.
 */
async function cut(page, sel) {
  return page.evaluate((s) => {
    const c = document.createElement('canvas').getContext('2d');
    const bad = [];
    for (const e of document.querySelectorAll(s)) {
      if (!e.checkVisibility()) continue;
      if (e instanceof HTMLSelectElement) {
        const st = getComputedStyle(e);
        c.font = `${st.fontWeight} ${st.fontSize} ${st.fontFamily}`;
        const text = e.selectedOptions[0]?.textContent ?? '';
        const need = c.measureText(text).width + parseFloat(st.paddingLeft) + 16;
        if (need > e.clientWidth) bad.push(`${text}: needs ${Math.ceil(need)} px, has ${e.clientWidth}`);
      } else if (e.scrollWidth > e.clientWidth + 0.5) {
        bad.push(`${e.textContent.trim()}: ${e.scrollWidth} > ${e.clientWidth}`);
      }
    }
    return bad;
  }, sel);
}

/** Whether box a lies inside box b. */
const within = (a, b) => a.x >= b.x - 0.5 && a.y >= b.y - 0.5 && a.x + a.width <= b.x + b.width + 0.5 && a.y + a.height <= b.y + b.height + 0.5;

/** The run bar's controls: in at most two rows, none overlapping or leaving the bar, the backend menu's text whole. */
async function runBarProblems(page) {
  const bad = await page.evaluate(() => {
    const bar = document.querySelector('#run-bar').getBoundingClientRect();
    const els = [...document.querySelectorAll('#run-bar button, #run-bar select')].filter((e) => e.checkVisibility());
    const rs = els.map((e) => [e.id || e.textContent, e.getBoundingClientRect()]);
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
    // Rows: controls whose vertical middles are within 8 px of each other.
    const mids = rs.map(([, r]) => (r.top + r.bottom) / 2).sort((a, b) => a - b);
    const rows = mids.filter((m, i) => i === 0 || m - mids[i - 1] > 8).length;
    if (rows > 2) out.push(`the run bar's controls are in ${rows} rows (bar ${Math.round(bar.height)} px high)`);
    return out;
  });
  return bad.concat(await cut(page, '#run-backend'));
}

/** Waits until no finite animation or transition runs (the bars grow in, the cards' highlight fades). */
async function settled(page) {
  await page.waitForFunction(() => document.getAnimations().every((a) => a.playState !== 'running' || a.effect?.getComputedTiming().endTime === Infinity),
    null, { polling: 100 });
}

async function runOnce(page) {
  // A run of the built-in model can end within a frame (a warm second run
  // takes about 0.2 s): generate long enough for the Stop button to be seen.
  await setMaxTokens(page, 1200);
  await page.locator('#run').click();
  await page.locator('#stop-run').waitFor();
  await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 120000 });
  await page.locator('#scorer-panel .dist.filled').first().waitFor();
  await settled(page);
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
      // The first field cards whole, below the run bar: one at 700 px, two at 900 px.
      const bar = await box(page, '#run-bar');
      const cards = await page.locator('#scorer-panel .dist').evaluateAll((ds) => ds.slice(0, 2).map((d) => d.getBoundingClientRect().toJSON()));
      for (const c of cards.slice(0, hgt >= 900 ? 2 : 1)) {
        assert.ok(c.top >= bar.y + bar.height && c.bottom <= hgt, `a field card spans y ${Math.round(c.top)}–${Math.round(c.bottom)} of the ${hgt} px viewport (the run bar ends at ${Math.round(bar.y + bar.height)})`);
      }
      assert.deepEqual(await runBarProblems(page), []);
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
    assert.deepEqual(await cut(page, '#schema-panel .opt-name, #schema-panel .field-name, #schema-panel select.field-type'), []);
    assert.deepEqual(await runBarProblems(page), []);
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
    await page.screenshot({ path: join(out, 'layout-1024x700-schema.png') });
    assert.deepEqual(await runBarProblems(page), []);
    // The result panels keep a useful width (one above the other when the column is narrow).
    for (const s of ['#scorer-panel', '#generator-panel']) {
      const b = await box(page, s);
      assert.ok(b.width >= 480, `${s} is ${Math.round(b.width)} px wide`);
    }
  } finally {
    await ctx.close();
  }
});

for (const [w, hgt] of [[1024, 700], [1440, 900]]) {
  test(`at ${w}×${hgt}: the top bar's parts neither overlap nor cut, with Open folder's form open too`, async () => {
    const { ctx, page } = await browse(w, hgt);
    try {
      await ready(page, srv.url);
      await page.locator('#device-chip:not([hidden])').waitFor();
      const parts = ['.brand', '#model-chip', '#device-chip', '.model-actions > button', '#connection', '#open-settings'];
      const chip = await box(page, '#model-chip');
      const problems = async () => {
        const bad = await collisions(page, [...parts, '.model-path input', '.model-path button']);
        const c = await box(page, '#model-chip');
        if (c.width < chip.width - 0.5) bad.push(`the model chip shrank from ${chip.width} to ${c.width} px`);
        // The badge and the inputs whole, inside the chip (it cuts what overflows it).
        for (const e of await page.locator('#model-chip > .badge, #model-chip .modality').all()) {
          if (!(await e.isVisible())) continue;
          const b = await e.boundingBox();
          if (!within(b, c)) bad.push(`"${await e.textContent()}" at ${JSON.stringify(b)} is cut by the chip ${JSON.stringify(c)}`);
        }
        return bad.concat(await cut(page, '#model-chip > .badge, #device-chip, #connection, .model-actions > button'));
      };
      assert.deepEqual(await problems(), []);
      await page.locator('#open-folder').click();
      await page.locator('#model-path').waitFor();
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}-open-folder.png`) });
      assert.deepEqual(await problems(), []);
      // Nothing covers Cancel: a plain click reaches it; Escape in the path closes the form too.
      await page.locator('.model-path button', { hasText: 'Cancel' }).click({ timeout: 5000 });
      await page.locator('#model-path').waitFor({ state: 'hidden' });
      await page.locator('#open-folder').click();
      await page.locator('#model-path').press('Escape');
      await page.locator('#model-path').waitFor({ state: 'hidden' });
    } finally {
      await ctx.close();
    }
  });

  test(`at ${w}×${hgt}: the settings dialog fits the window, its buttons in view; the device note is a sentence`, async () => {
    const { ctx, page } = await browse(w, hgt);
    try {
      await ready(page, srv.url);
      await page.locator('#device-chip:not([hidden])').waitFor();
      await page.keyboard.press('Control+,');
      await page.locator('#settings[open]').waitFor();
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}-settings.png`) });
      const dlg = await box(page, '#settings');
      assert.ok(dlg.y >= 0 && dlg.y + dlg.height <= hgt, `the dialog spans y ${dlg.y}–${dlg.y + dlg.height} of ${hgt}`);
      for (const s of ['#settings button[type="submit"]', '#settings .row-actions button']) {
        const b = await inView(page, s, 'a button of the dialog');
        assert.ok(within(b, dlg), `${s} at ${JSON.stringify(b)} is outside the dialog ${JSON.stringify(dlg)}`);
      }
      assert.deepEqual(await cut(page, '#settings select'), []);
      // The last setting is reached by scrolling inside the dialog; the buttons stay.
      await page.locator('#settings select[name="log_level"]').scrollIntoViewIfNeeded();
      assert.ok(within(await box(page, '#settings select[name="log_level"]'), dlg), 'the log level is not shown inside the dialog');
      await inView(page, '#settings button[type="submit"]', 'Save after scrolling');
      // No GPU library here: a plain sentence, the loader's words behind "details".
      const note = page.locator('#settings #device-note');
      await note.scrollIntoViewIfNeeded();
      assert.match(await note.evaluate((n) => n.firstChild.textContent), /^Now: cpu .*\(asked: auto\)\. Verdict's GPU library \(libverdict_cuda\.so\) is not next to the app or on the library path\. The CPU runs the model\.$/);
      const raw = note.locator('details code');
      assert.equal(await raw.isVisible(), false, 'the raw note shows before details is opened');
      await note.locator('summary').click();
      assert.match(await raw.textContent(), /^using the CPU: cuda: no usable libverdict_cuda\.so/);
      await raw.scrollIntoViewIfNeeded();
      assert.ok(within(await raw.boundingBox(), dlg), 'the raw note sticks out of the dialog');
      await page.screenshot({ path: join(out, `layout-${w}x${hgt}-settings-details.png`) });
    } finally {
      await ctx.close();
    }
  });
}
