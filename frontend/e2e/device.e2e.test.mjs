// The device setting (issue 12): the settings dialog offers the compute
// device; cuda without its library is the CPU, said in the dialog and as a
// warning in the model bar, and a run still works. The model bar fits at
// 1024×700 and 1440×900. Screenshots go to E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;

before(async () => {
  // No CUDA library here, whatever the machine has.
  process.env.VERDICT_CUDA_LIB = join(mkdtempSync(join(tmpdir(), 'verdict-nocuda-')), 'libverdict_cuda.so');
  srv = await serve();
});

after(() => srv?.stop());

/** The top bar's parts that overlap one another or leave the viewport, and text cut short in them. */
async function topBarProblems(page) {
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const parts = ['.brand', '.model-info', '.model-actions', '.top-actions'].map((s) => [s, document.querySelector(s)]).filter(([, e]) => e && !e.hidden);
    const bad = [];
    const boxes = parts.map(([s, e]) => [s, e.getBoundingClientRect()]);
    for (const [s, r] of boxes) if (r.left < 0 || r.right > vw + 0.5) bad.push(`${s} [${r.left}, ${r.right}] leaves the ${vw} px viewport`);
    for (let i = 1; i < boxes.length; i++) {
      if (boxes[i][1].left < boxes[i - 1][1].right - 0.5) bad.push(`${boxes[i][0]} overlaps ${boxes[i - 1][0]}`);
    }
    for (const e of document.querySelectorAll('#device-chip, #device-chip > span')) {
      if (e.scrollWidth > e.clientWidth + 1) bad.push(`"${e.textContent}" is cut: ${e.scrollWidth} > ${e.clientWidth}`);
    }
    const top = document.querySelector('.topbar').getBoundingClientRect();
    for (const s of ['#model-chip', '#device-chip']) {
      const r = document.querySelector(s).getBoundingClientRect();
      if (r.top < top.top || r.bottom > top.bottom + 0.5) bad.push(`${s} [${r.top}, ${r.bottom}] leaves the top bar [${top.top}, ${top.bottom}]`);
    }
    return bad;
  });
}

test('settings: pick cuda without its library, see the fallback, run on the CPU', async () => {
  const { ctx, page } = await browse(1024, 700);
  try {
    await ready(page, srv.url);
    // auto (the default) fell back already: a mild note, the reason in its title.
    await page.locator('#device-fallback', { hasText: 'no GPU' }).waitFor();
    assert.match(await page.locator('#device-fallback').getAttribute('title'), /no usable libverdict_cuda\.so/);
    assert.match(await page.locator('#device-chip').textContent(), /^cpu · \d+ cores? \S+ · .+ q4 · KV /);

    await page.keyboard.press('Control+,');
    await page.locator('#settings[open]').waitFor();
    assert.equal(await page.locator('#settings select[name="device"]').inputValue(), 'auto');
    await page.locator('#settings select[name="device"]').selectOption('cuda');
    await page.locator('#settings button[type="submit"]').click();
    await page.locator('#settings').waitFor({ state: 'hidden' });

    // The model loads again; cuda does not open: the CPU, with a warning.
    await page.locator('#device-fallback.warn', { hasText: 'cuda failed' }).waitFor();
    await page.locator('#model-chip[data-state="ready"]').waitFor();
    assert.match(await page.locator('#device-fallback').getAttribute('title'), /using the CPU: cuda: no usable libverdict_cuda\.so/);
    await page.screenshot({ path: join(out, 'device-1024x700.png') });
    assert.deepEqual(await topBarProblems(page), []);

    await page.keyboard.press('Control+,');
    await page.locator('#settings[open]').waitFor();
    assert.equal(await page.locator('#settings select[name="device"]').inputValue(), 'cuda');
    const note = page.locator('#settings #device-note');
    assert.match(await note.textContent(), /Now: cpu .*\(asked: cuda\)\. Verdict's GPU library \(libverdict_cuda\.so\) is not next to the app/);
    assert.match(await note.locator('details code').textContent(), /^using the CPU: cuda: no usable libverdict_cuda\.so/);
    assert.match(await note.getAttribute('class'), /warn/);
    await note.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(out, 'device-settings-1024x700.png') });
    const nb = await note.boundingBox();
    const db = await page.locator('#settings').boundingBox();
    assert.ok(nb.x >= db.x && nb.x + nb.width <= db.x + db.width + 0.5, `the note ${JSON.stringify(nb)} sticks out of the dialog ${JSON.stringify(db)}`);
    await page.locator('#settings button', { hasText: 'Cancel' }).click();

    // A run works on the CPU.
    await page.locator('#run:not([disabled])').click();
    await page.locator('#scorer-panel .dist.filled').first().waitFor({ timeout: 120000 });
    await page.locator('#run:not([disabled])').waitFor({ timeout: 120000 });
  } finally {
    await ctx.close();
  }
});

test('at 1440×900: the model bar shows the device and the fallback in full', async () => {
  const { ctx, page } = await browse(1440, 900);
  try {
    await ready(page, srv.url);
    await page.locator('#device-fallback').waitFor();
    await page.screenshot({ path: join(out, 'device-1440x900.png') });
    assert.deepEqual(await topBarProblems(page), []);
  } finally {
    await ctx.close();
  }
});
