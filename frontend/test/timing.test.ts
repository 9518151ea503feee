import { fmtPrefillRate, fmtPrefillTokens } from '../src/format';
import { toCSV } from '../src/history';
import { fromRecord } from '../src/run';
import { HistoryPanel } from '../src/ui/historyPanel';
import { TimingPanel } from '../src/ui/timingPanel';
import { record } from './fixtures';

/** A run whose scorer reused 200 of its 214 prompt tokens: 14 computed in 0.30 ms. */
function reusedRun(id = 'run-2') {
  const r = record(id);
  r.scorer!.timing = { ...r.scorer!.timing, prefill_ms: 0.3, prompt_tokens: 214, prefix_reused_tokens: 200, prefill_tokens_per_second: 14 / 0.0003 };
  return r;
}

describe('a prefill with a reused prefix', () => {
  it('names the reused and computed tokens and the computed rate', () => {
    const t = reusedRun().scorer!.timing;
    expect(fmtPrefillTokens(t)).toBe('214 tok (200 reused, 14 computed)');
    expect(fmtPrefillRate(t)).toBe('46,667 tok/s computed');
    const plain = record('run-1').scorer!.timing;
    expect(fmtPrefillTokens(plain)).toBe('200 tok');
    expect(fmtPrefillRate(plain)).toBe('4,000 tok/s');
  });

  it('shows them in the timing table', () => {
    const p = new TimingPanel();
    p.render(fromRecord(reusedRun()));
    const rows = [...p.el.querySelectorAll('#timing-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    expect(rows).toContainEqual(['Prefill', '0.30 ms · 214 tok (200 reused, 14 computed)', '60 ms · 200 tok']);
    expect(rows).toContainEqual(['Prefill speed', '46,667 tok/s computed', '3,300 tok/s']);
  });

  it('shows them in the history and its CSV', () => {
    const runs = [record('run-1'), reusedRun()];
    const p = new HistoryPanel({
      history: () => runs, baselineId: () => null, currentId: () => null, setBaseline: () => {}, open: () => {}, remove: () => {}, clear: () => {}, exportText: () => {},
    });
    p.render();
    const cell = (id: string) => p.el.querySelector(`tr[data-run="${id}"] .reused`);
    expect(cell('run-2')!.textContent).toBe('200 reused, 14 computed');
    expect(cell('run-2')!.parentElement!.textContent).toContain('46,667 tok/s');
    expect(cell('run-1')).toBeNull();
    const cells = (line: string) => [...line.matchAll(/("(?:[^"]|"")*"|[^,]*)(?:,|$)/g)].map((m) => m[1]);
    const [head, first, second] = toCSV(runs).split('\r\n').map(cells);
    const col = head.indexOf('scorer_prefix_reused_tokens');
    expect(col).toBeGreaterThan(0);
    expect([first[col], second[col]]).toEqual(['0', '200']);
  });
});
