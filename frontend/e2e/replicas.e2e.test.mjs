// serve --devices (issue 30): with two replicas (two CPU replicas here, as
// the tests' fake devices; GPUs on a GPU machine), the model bar says the
// requests are spread over 2 devices, each replica's line in its title,
// and the bar still fits at 1024×700 and 1440×900. A run works. Screenshots
// in E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;

before(async () => {
  srv = await serve(['--devices', 'cpu,cpu']);
});

after(() => srv?.stop());

for (const [w, hgt, run] of [[1024, 700, true], [1440, 900, false]]) {
  test(`the model bar shows two replicas and each one in its title (${w}×${hgt})`, async () => {
    const { ctx, page } = await browse(w, hgt);
    try {
      await ready(page, srv.url);
      await page.locator('#device-replicas', { hasText: '× 2 devices' }).waitFor();
      const title = await page.locator('#device-replicas').getAttribute('title');
      const lines = title.split('\n');
      assert.equal(lines.length, 2, title);
      for (const l of lines) assert.match(l, /^cpu · cpu · \d+ cores?.*: \d+ answered, \d+ running$/);
      assert.equal(await page.locator('#replicas-down').count(), 0);
      // The chip and its parts fit the top bar.
      const cut = await page.evaluate(() => [...document.querySelectorAll('#device-chip, #device-chip > span')]
        .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent));
      assert.deepEqual(cut, []);
      if (run) { // a run on the replicas works
        await page.locator('#run').click();
        await page.locator('#stop-run').waitFor();
        await page.locator('#stop-run').waitFor({ state: 'detached', timeout: 120000 });
        await page.locator('#scorer-panel .pill[data-status="done"]').waitFor();
      }
      await page.screenshot({ path: join(out, `replicas-${w}x${hgt}.png`) });
    } finally {
      await ctx.close();
    }
  });
}
