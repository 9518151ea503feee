// Issue 29: the model bar names the ready model's decoder family beside its
// name (the built-in model is a Gemma 3n): "Gemma 3n" at 1440×900, "3n" at
// 1024×700 (the title has it whole), the badge and the inputs whole inside
// the chip at both. Screenshots in E2E_OUT.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browse, out, ready, serve } from './uiharness.mjs';

let srv;

before(async () => {
  srv = await serve();
});

after(() => srv?.stop());

for (const [w, hgt, shown] of [[1024, 700, '3n'], [1440, 900, 'Gemma 3n']]) {
  test(`the model bar shows the family (${w}×${hgt})`, async () => {
    const { ctx, page } = await browse(w, hgt);
    try {
      await ready(page, srv.url);
      const badge = page.locator('#model-chip #model-family');
      assert.equal(await badge.innerText(), shown);
      assert.equal(await badge.getAttribute('title'), 'decoder family: Gemma 3n');
      assert.equal(await badge.getAttribute('data-family'), 'gemma3n');
      // The badge follows the name; it and the inputs are whole, inside the chip.
      const fit = await page.evaluate(() => {
        const chip = document.querySelector('#model-chip').getBoundingClientRect();
        const cut = [...document.querySelectorAll('#model-family, #model-chip .modality')].filter((e) => {
          const r = e.getBoundingClientRect();
          if (!r.width) return false; // hidden (a narrow window leaves out "text ✓")
          return r.left < chip.left || r.right > chip.right + 0.5 || e.scrollWidth > e.clientWidth + 1;
        }).map((e) => e.textContent);
        return { cut, afterName: document.querySelector('#model-family').previousElementSibling?.id === 'model-name' };
      });
      assert.deepEqual(fit, { cut: [], afterName: true });
      await page.screenshot({ path: join(out, `family-${w}x${hgt}.png`) });
    } finally {
      await ctx.close();
    }
  });
}
