// A small harness for the UI's layout and responsiveness tests: starts
// `verdict serve` on the built-in model and a headless Debian Chromium.
//
//   VERDICT_BIN   the verdict binary (default: ../verdict from frontend/)
//   CHROMIUM      the browser (default: /usr/bin/chromium)
//   E2E_OUT       where screenshots go (default: a temporary folder)
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const here = new URL('.', import.meta.url).pathname;
export const out = resolve(process.env.E2E_OUT ?? mkdtempSync(join(tmpdir(), 'verdict-e2e-')));
mkdirSync(out, { recursive: true });

/** Starts `verdict serve` (no model, no settings file, then extra's flags); resolves to its URL and a stop function. */
export async function serve(extra = []) {
  const bin = resolve(process.env.VERDICT_BIN ?? join(here, '..', '..', 'verdict'));
  const server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--model', 'none', '--settings=', ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, VERDICT_CAPTURE: 'synthetic' },
  });
  let log = '';
  server.stderr.on('data', (d) => (log += d));
  const url = await new Promise((ok, fail) => {
    let buf = '';
    const timer = setTimeout(() => fail(new Error(`verdict serve did not start:\n${log}`)), 30000);
    server.stdout.on('data', (d) => {
      buf += d;
      const m = /serving on (http:\/\/\S+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    server.on('exit', (code) => fail(new Error(`verdict serve exited with ${code}:\n${log}`)));
  });
  return { url, log: () => log, stop: () => server.kill('SIGINT') };
}

/** A fresh headless browser with one page of the given size. */
export async function browse(width, height) {
  const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'verdict-chromium-')), {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
    viewport: { width, height },
  });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  page.setDefaultTimeout(60000);
  return { ctx, page };
}

/** Loads the page and the built-in model, and waits for the preset to be checked. */
export async function ready(page, url) {
  await page.goto(url);
  await page.locator('#model-chip[data-state="none"], #model-chip[data-state="ready"]').waitFor();
  if ((await page.locator('#model-chip').getAttribute('data-state')) !== 'ready') {
    await page.locator('#load-builtin').click();
    await page.locator('#model-chip[data-state="ready"]').waitFor();
  }
  await page.locator('#run:not([disabled])').waitFor();
}

/** Sets the generation's token limit through the settings dialog. */
export async function setMaxTokens(page, n) {
  await page.keyboard.press('Control+,');
  await page.locator('#settings[open]').waitFor();
  await page.locator('#settings input[name="max_tokens"]').fill(String(n));
  await page.locator('#settings button[type="submit"]').click();
  await page.locator('#settings').waitFor({ state: 'hidden' });
}
