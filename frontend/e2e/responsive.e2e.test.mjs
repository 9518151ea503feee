// Stop and Esc act at once during a long generation, and the page does a
// bounded amount of work while 4,096 tokens stream in (issue 9, point 6;
// issue 28, item 0). The assertions count what the page does — DOM write
// batches per animation frame, layout reads, characters written per token,
// the cancel request sent from the key's own handler — so that they hold on a
// loaded machine; the timings (long tasks, gaps between frames, Escape's
// wait) are printed as JSON figures, not asserted.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve, setMaxTokens } from './uiharness.mjs';

let srv;
let ctx;
let page;

/**
 * Runs in the page before its scripts (so the app's fetch is the wrapped
 * one): counts layout reads made by the app's code while window.__st.counting,
 * and notes the cancel requests with the input event whose task sent them.
 */
function instrument() {
  const st = (window.__st = { counting: false, reads: 0, readStacks: [], cancels: [], keys: [], task: null });
  const app = () => {
    const s = new Error().stack ?? '';
    return s.includes('/assets/') ? s : null;
  };
  const note = (what) => {
    if (!st.counting) return;
    const s = app();
    if (!s) return;
    st.reads++;
    if (st.readStacks.length < 5) st.readStacks.push(`${what}: ${s.split('\n').slice(2, 5).join(' | ')}`);
  };
  const getters = {
    Element: ['scrollTop', 'scrollLeft', 'scrollWidth', 'scrollHeight', 'clientTop', 'clientLeft', 'clientWidth', 'clientHeight'],
    HTMLElement: ['offsetTop', 'offsetLeft', 'offsetWidth', 'offsetHeight', 'offsetParent', 'innerText'],
  };
  for (const [cls, names] of Object.entries(getters)) {
    for (const n of names) {
      const d = Object.getOwnPropertyDescriptor(window[cls].prototype, n);
      Object.defineProperty(window[cls].prototype, n, { ...d, get() { note(n); return d.get.call(this); } });
    }
  }
  const methods = [
    [Element.prototype, ['getBoundingClientRect', 'getClientRects', 'scrollIntoView', 'checkVisibility', 'computedStyleMap']],
    [Range.prototype, ['getBoundingClientRect', 'getClientRects']],
    [window, ['getComputedStyle']],
  ];
  for (const [obj, names] of methods) {
    for (const n of names) {
      const f = obj[n];
      if (typeof f !== 'function') continue;
      obj[n] = function (...a) { note(n); return f.apply(this, a); };
    }
  }
  // Which input event's task is running: a cancel sent from it is sent at once.
  for (const type of ['keydown', 'click']) {
    window.addEventListener(type, (e) => {
      if (type === 'keydown') st.keys.push(e.key);
      st.task = type === 'keydown' ? e.key : `click ${e.target?.id ?? ''}`;
      setTimeout(() => (st.task = null));
    }, true);
  }
  const fetch0 = window.fetch;
  window.fetch = function (input, init) {
    if (/\/api\/Runs\/Cancel\b/.test(String(input?.url ?? input))) st.cancels.push(st.task);
    return fetch0.call(this, input, init);
  };
}

before(async () => {
  srv = await serve();
  ({ ctx, page } = await browse(1440, 900));
  await page.addInitScript(instrument);
  await ready(page, srv.url);
  await setMaxTokens(page, 4096);
});

after(async () => {
  await ctx?.close();
  srv?.stop();
});

/**
 * Starts counting: animation frames, the streamed text's DOM write batches
 * (tagged with the frame they came in), the characters and nodes they add,
 * and, as figures only, long tasks and the gaps between frames.
 */
function watch() {
  const st = window.__st;
  Object.assign(st, { frame: 0, done: false, batches: 0, perFrame: {}, added: 0, nodes: 0, maxNodes: 0, removed: 0, lt: [], gaps: [], esc: null, cancels: [] });
  st.lto = new PerformanceObserver((l) => {
    for (const e of l.getEntries()) st.lt.push(e.duration);
  });
  st.lto.observe({ type: 'longtask' });
  let last = performance.now();
  // Registered again first thing in each frame: it runs before the app's
  // frame callback, so a batch drawn in frame n sees st.frame === n.
  const loop = (t) => {
    if (!st.done) requestAnimationFrame(loop);
    st.frame++;
    st.gaps.push(t - last);
    last = t;
  };
  requestAnimationFrame(loop);
  st.mo = new MutationObserver((records) => {
    if (!st.counting) return;
    st.batches++;
    st.perFrame[st.frame] = (st.perFrame[st.frame] ?? 0) + 1;
    let nodes = 0;
    for (const r of records) {
      if (r.type === 'characterData') st.added += r.target.data.length - (r.oldValue?.length ?? 0);
      for (const n of r.addedNodes) {
        nodes++;
        if (n.nodeType === Node.TEXT_NODE) st.added += n.data.length;
      }
      st.removed += r.removedNodes.length;
    }
    st.nodes += nodes;
    st.maxNodes = Math.max(st.maxNodes, nodes);
  });
  st.mo.observe(document.querySelector('#gen-text'), { childList: true, characterData: true, characterDataOldValue: true, subtree: true });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') st.esc = performance.now() - e.timeStamp;
  }, { capture: true, once: true });
}

/** The streamed text's token count and length; counting (when given) turns on or off in the same task. */
const genText = (counting) => page.evaluate((c) => {
  if (c != null) window.__st.counting = c;
  return {
    tokens: Number(/(\d+) tok/.exec(document.querySelector('#gen-tokens')?.textContent ?? '')?.[1] ?? 0),
    chars: document.querySelector('#gen-text').textContent.length,
  };
}, counting);

/**
 * Generates until `until` tokens, counting what the page does meanwhile,
 * then stops with stop() and waits for "stopped". Returns the counts and
 * the timings (printed as figures).
 */
async function generateThenStop(stop, until) {
  await page.evaluate(watch);
  const t0 = Date.now();
  await page.locator('#run-generator').click();
  await page.locator('#generator-panel .pill[data-status="decoding"]').waitFor();
  const from = await genText(true);
  await page.waitForFunction((n) => {
    const m = /(\d+) tok/.exec(document.querySelector('#gen-tokens')?.textContent ?? '');
    return (m && Number(m[1]) >= n) || document.querySelector('#generator-panel .pill[data-status="done"]');
  }, until, { timeout: 300000, polling: 100 });
  const to = await genText(false);
  const counts = await page.evaluate(() => {
    const st = window.__st;
    const per = Object.values(st.perFrame);
    return { frames: st.frame, batches: st.batches, maxBatchesPerFrame: Math.max(0, ...per), charsAdded: st.added, nodesAdded: st.nodes, maxNodesPerBatch: st.maxNodes, nodesRemoved: st.removed, layoutReads: st.reads, readStacks: st.readStacks };
  });
  assert.equal(await page.locator('#generator-panel .pill[data-status="decoding"]').count(), 1, 'the generation is still running');
  const s0 = Date.now();
  await stop();
  await page.locator('#generator-panel .pill[data-status="cancelled"]').waitFor({ timeout: 60000 });
  const stopMs = Date.now() - s0;
  const times = await page.evaluate(() => {
    const st = window.__st;
    st.done = true;
    st.lto.disconnect();
    st.mo.disconnect();
    const lt = st.lt;
    return { cancels: st.cancels, keys: st.keys, escWaitMs: st.esc, longTasks: lt.length, longTaskMs: Math.round(lt.reduce((a, b) => a + b, 0)), maxLongTaskMs: Math.round(Math.max(0, ...lt)), maxFrameGapMs: Math.round(Math.max(...st.gaps)) };
  });
  const r = { tokens: [from.tokens, to.tokens], chars: [from.chars, to.chars], ...counts, stopMs, wallMs: Date.now() - t0, ...times };
  console.log(JSON.stringify({ ...r, readStacks: undefined }));
  return r;
}

/** The counted assertions about the page's work while the text streamed. */
function assertBoundedWork(r) {
  assert.ok(r.tokens[1] > r.tokens[0] && r.batches > 0, `nothing streamed while counting: ${JSON.stringify(r.tokens)}`);
  assert.ok(r.maxBatchesPerFrame <= 1, `${r.maxBatchesPerFrame} DOM write batches of the streamed text in one animation frame`);
  assert.equal(r.layoutReads, 0, `the page read layout ${r.layoutReads} times while streaming:\n${r.readStacks.join('\n')}`);
  // Each character is written once: the text grows by appending, never rewritten.
  assert.equal(r.charsAdded, r.chars[1] - r.chars[0], 'characters written to the streamed text vs its growth');
  assert.equal(r.nodesRemoved, 0, 'nodes of the streamed text were removed while it grew');
  // A batch adds a text node, and at a block's end the next block and its text.
  assert.ok(r.maxNodesPerBatch <= 3, `a batch added ${r.maxNodesPerBatch} nodes`);
  assert.ok(r.nodesAdded <= 3 * r.batches, `${r.nodesAdded} nodes in ${r.batches} batches`);
}

test('Esc stops a 4,096-token generation at once; the page\'s work while it streams is bounded', async () => {
  const r = await generateThenStop(() => page.keyboard.press('Escape'), 3000);
  await page.screenshot({ path: join(out, 'long-generation.png') });
  assert.ok(r.keys.includes('Escape'), 'Escape did not reach the page');
  assert.deepEqual(r.cancels, ['Escape'], 'the cancel request was not sent from Escape\'s own handler');
  assert.equal(await page.locator('#generator-panel .pill[data-status="cancelled"]').textContent(), 'stopped');
  assert.ok((await genText()).tokens < 4096, 'the generation ran to its end');
  assertBoundedWork(r);
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
  assert.deepEqual(r.cancels, ['click stop-run'], 'the cancel request was not sent from the click\'s own handler');
  assert.equal(await page.locator('#generator-panel .pill[data-status="cancelled"]').textContent(), 'stopped');
  assertBoundedWork(r);
});

test('the streamed text follows its end until the user scrolls up, and again once they scroll back down', async () => {
  const at = () => page.locator('#gen-text').evaluate((t) => ({ top: Math.round(t.scrollTop), fromEnd: Math.round(t.scrollHeight - t.clientHeight - t.scrollTop) }));
  /** Waits for n more tokens. */
  const after = async (n) => {
    const { tokens } = await genText();
    await page.waitForFunction((k) => Number(/(\d+) tok/.exec(document.querySelector('#gen-tokens').textContent)?.[1] ?? 0) >= k, tokens + n, { timeout: 120000, polling: 50 });
    return at();
  };
  /** Waits for a wheel's (maybe animated) scroll to end: scrollTop the same 300 ms apart. */
  const settled = async () => {
    for (let a = await at(), b = null; ; b = a, a = await at()) {
      if (a.top === b?.top) return a;
      await page.waitForTimeout(300);
    }
  };
  await page.locator('#run-generator').click();
  await page.locator('#generator-panel .pill[data-status="decoding"]').waitFor();
  const end = await after(800);
  assert.ok(end.top > 0 && end.fromEnd <= 1, `the text does not follow its end: ${JSON.stringify(end)}`);
  const box = await page.locator('#gen-text').boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.wheel(0, -200);
  const up = await settled();
  assert.ok(up.fromEnd > 100, `the wheel did not scroll up: ${JSON.stringify(up)}`);
  const still = await after(300);
  assert.equal(still.top, up.top, 'the text moved away from where the user scrolled it');
  assert.ok(still.fromEnd > up.fromEnd, 'no text came in meanwhile');
  await page.mouse.wheel(0, 1e6);
  await page.waitForFunction(() => { const t = document.querySelector('#gen-text'); return t.scrollHeight - t.clientHeight - t.scrollTop <= 1; }, null, { timeout: 60000, polling: 50 });
  const back = await after(300);
  assert.ok(back.fromEnd <= 1 && back.top > still.top, `the text does not follow its end again: ${JSON.stringify(back)}`);
  assert.equal(await page.locator('#generator-panel .pill[data-status="decoding"]').count(), 1, 'the generation ended before the last check');
  console.log(JSON.stringify({ end, up, still, back }));
  await page.keyboard.press('Escape');
  await page.locator('#generator-panel .pill[data-status="cancelled"]').waitFor({ timeout: 60000 });
});
