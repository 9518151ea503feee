// Stop and Esc act at once during a long generation: the page's main thread
// stays free while 4,096 tokens stream in (issue 9, point 6).
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

/** Watches the main thread: long tasks, gaps between animation frames, and Escape's wait. */
function watch() {
  const w = window;
  w.__lt = [];
  w.__gaps = [];
  w.__ltAt = [];
  w.__done = false;
  new PerformanceObserver((l) => {
    for (const e of l.getEntries()) { w.__lt.push(e.duration); w.__ltAt.push([Math.round(e.startTime), Math.round(e.duration)]); }
  }).observe({ type: 'longtask' });
  let last = performance.now();
  const loop = (t) => {
    w.__gaps.push(t - last);
    last = t;
    if (!w.__done) requestAnimationFrame(loop);
  };
  requestAnimationFrame(loop);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') w.__esc = performance.now() - e.timeStamp;
  }, true);
}

const tokens = () => page.evaluate(() => Number(/(\d+) tok/.exec(document.querySelector('#gen-tokens')?.textContent ?? '')?.[1] ?? 0));

async function generateThenStop(stop, until) {
  await page.evaluate(watch);
  const t0 = Date.now();
  await page.locator('#run-generator').click();
  await page.locator('#generator-panel .pill[data-status="decoding"]').waitFor();
  await page.waitForFunction((n) => {
    const m = /(\d+) tok/.exec(document.querySelector('#gen-tokens')?.textContent ?? '');
    return (m && Number(m[1]) >= n) || document.querySelector('#generator-panel .pill[data-status="done"]');
  }, until, { timeout: 300000, polling: 100 });
  assert.equal(await page.locator('#generator-panel .pill[data-status="decoding"]').count(), 1, 'the generation is still running');
  const before = await tokens();
  const s0 = Date.now();
  await stop();
  await page.locator('#generator-panel .pill[data-status="cancelled"]').waitFor({ timeout: 30000 });
  const stopMs = Date.now() - s0;
  const stats = await page.evaluate(() => {
    window.__done = true;
    const lt = window.__lt;
    return { at: JSON.stringify(window.__ltAt), esc: window.__esc, longTasks: lt.length, longMs: lt.reduce((a, b) => a + b, 0), maxLong: Math.max(0, ...lt), maxGap: Math.max(...window.__gaps) };
  });
  const wall = Date.now() - t0;
  console.log(JSON.stringify({ tokensAtStop: before, stopMs, wallMs: wall, ...stats }));
  return { stopMs, wall, ...stats };
}

test('Esc stops a 4,096-token generation at once; the page stays responsive', async () => {
  await ready(page, srv.url);
  await setMaxTokens(page, 4096);
  const r = await generateThenStop(() => page.keyboard.press('Escape'), 3000);
  await page.screenshot({ path: join(out, 'long-generation.png') });
  assert.ok(r.esc < 100, `Escape waited ${r.esc.toFixed(0)} ms for the main thread`);
  assert.ok(r.stopMs < 1000, `the generation showed "stopped" ${r.stopMs} ms after Escape`);
  assert.ok(r.maxLong < 250, `the longest task took ${r.maxLong.toFixed(0)} ms`);
  assert.ok(r.longMs < 0.1 * r.wall, `long tasks took ${r.longMs.toFixed(0)} ms of ${r.wall} ms`);
  assert.ok(r.maxGap < 500, `the longest gap between animation frames was ${r.maxGap.toFixed(0)} ms`);
});

test('the Stop button stops a long generation at once, and keeps its colour on hover', async () => {
  const r = await generateThenStop(async () => {
    await page.locator('#stop-run').hover();
    const bg = await page.locator('#stop-run').evaluate((b) => getComputedStyle(b).backgroundColor);
    const danger = await page.evaluate(() => getComputedStyle(document.documentElement).getPropertyValue('--bad').trim());
    assert.notEqual(bg, 'rgb(250, 251, 252)', 'the hovered Stop button turned white');
    assert.match(bg, /^rgb\((1[5-9]\d|2\d\d), \d{1,2}, \d{1,2}\)$/, `the hovered Stop button is ${bg} (the danger colour is ${danger})`);
    await page.locator('#stop-run').click();
  }, 2000);
  assert.ok(r.stopMs < 1000, `the generation showed "stopped" ${r.stopMs} ms after the click`);
  assert.ok(r.maxLong < 250, `the longest task took ${r.maxLong.toFixed(0)} ms`);
});
