// The backends side by side: KL and winner changes against a baseline, the
// history's Distributions column and its "Repeat with" menu, the run bar's
// backend menu and the backend and correction settings.
import { backendChoices, backendOf, diffSummary, distributionDiff, kl } from '../src/backends';
import type { FieldResult, Preferences, RunRecord } from '../src/types';
import { BackendPicker } from '../src/ui/backendPicker';
import { HistoryPanel, type HistoryHost } from '../src/ui/historyPanel';
import { SettingsDialog } from '../src/ui/settingsDialog';
import { fields, record } from './fixtures';

/** A copy of the fixture's fields with priority's distribution replaced. */
function withPriority(probs: number[], winner: string): FieldResult[] {
  const out = structuredClone(fields);
  out[0].winner = winner;
  out[0].decisions[0].candidates.forEach((c, i) => (c.probability = probs[i]));
  return out;
}

function runWith(id: string, f: FieldResult[], backend = ''): RunRecord {
  const r = record(id);
  r.scorer = { ...r.scorer!, fields: f };
  r.settings = { ...r.settings, scorer: { ...r.settings.scorer, ...(backend ? { backend: backend as 'cached' } : {}) } };
  return r;
}

describe('distribution differences', () => {
  it('computes KL(p ‖ q) in nats', () => {
    expect(kl([0.5, 0.5], [0.5, 0.5])).toBe(0);
    expect(kl([1, 0], [0.5, 0.5])).toBeCloseTo(Math.log(2), 12);
    expect(kl([0.6, 0.4], [0.2, 0.8])).toBeCloseTo(0.6 * Math.log(3) + 0.4 * Math.log(0.5), 12);
    expect(kl([1, 0], [0, 1])).toBeCloseTo(Math.log(1e12), 6); // floored, finite
  });

  it('compares a run with the baseline decision by decision', () => {
    const base = runWith('run-1', fields);
    const same = distributionDiff(base, runWith('run-2', fields))!;
    expect(same).toMatchObject({ compared: 5, meanKL: 0, changes: [] });
    expect(diffSummary(same)).toBe('KL 0.000 (max 0.000) · all 5 winners same');
    const moved = distributionDiff(base, runWith('run-3', withPriority([0.7, 0.1, 0.1, 0.1], 'low')))!;
    const want = kl([0.1, 0.2, 0.6, 0.1], [0.7, 0.1, 0.1, 0.1]);
    expect(moved.compared).toBe(5);
    expect(moved.maxKL).toBeCloseTo(want, 12);
    expect(moved.meanKL).toBeCloseTo(want / 5, 12);
    expect(moved.maxDecision).toBe('priority');
    expect(moved.changes).toEqual([{ field: 'priority', decision: 'priority', from: 'high', to: 'low' }]);
    expect(diffSummary(moved)).toBe(`KL ${(want / 5).toFixed(3)} (max ${want.toFixed(3)}) · 1 of 5 winners changed`);
    // Candidates that differ (a catalog decode's partitions) are not compared.
    const other = structuredClone(fields).slice(0, 1);
    other[0].decisions[0].candidates[0].value = 'low | medium';
    expect(distributionDiff(base, runWith('run-4', other))).toBeNull();
  });

  it('offers head only when a head file is set', () => {
    expect(backendChoices({ branch_batch: 8, temperature: 1 }).map((b) => b.value)).toEqual(['json', 'cached', 'catalog']);
    expect(backendChoices({ branch_batch: 8, temperature: 1, head: 'h.safetensors' }).map((b) => b.value)).toEqual(['json', 'cached', 'catalog', 'head']);
    expect(backendOf(record('run-1'))).toBe('json');
    expect(backendOf(runWith('run-2', fields, 'cached'))).toBe('cached');
  });
});

describe('history with backends', () => {
  it('shows each run\'s backend, its distributions against the baseline, and repeats a run with another backend', () => {
    const runs = [runWith('run-1', fields), runWith('run-2', withPriority([0.7, 0.1, 0.1, 0.1], 'low'), 'cached')];
    const repeats: [string, string][] = [];
    let baseline: string | null = 'run-1';
    const host: HistoryHost = {
      history: () => runs, baselineId: () => baseline, currentId: () => null, setBaseline: (id) => (baseline = id),
      open: () => undefined, remove: () => undefined, clear: () => undefined, exportText: () => undefined,
      backends: () => backendChoices(undefined), repeat: (id, b) => void repeats.push([id, b]),
    };
    const p = new HistoryPanel(host);
    p.render();
    const row = (id: string) => p.el.querySelector(`tr[data-run="${id}"]`)!;
    expect(row('run-2').querySelector('.backend-tag')!.textContent).toBe('cached');
    expect(row('run-1').querySelector('.backend-tag')!.textContent).toBe('json');
    expect(row('run-1').querySelector('.dist-cell')!.textContent).toBe('baseline');
    const cell = row('run-2').querySelector('.dist-cell') as HTMLElement;
    expect(cell.textContent).toContain('1 of 5 winners changed');
    expect(cell.textContent).toContain('priority: high → low');
    expect(cell.title).toContain('KL(baseline ‖ run) over 5 decisions');
    const sel = row('run-2').querySelector('select.repeat-backend') as HTMLSelectElement;
    expect([...sel.options].map((o) => o.value)).toEqual(['', 'json', 'catalog']); // not its own backend
    sel.value = 'json';
    sel.dispatchEvent(new Event('change'));
    expect(repeats).toEqual([['run-2', 'json']]);
    expect(sel.value).toBe('');
    baseline = null;
    p.render();
    expect(row('run-2').querySelector('.dist-cell')!.textContent).toBe('—');
  });
});

const prefs = (): Preferences => ({
  run: { generation: { max_tokens: 96, temperature: 0, top_k: 64, top_p: 0.95, seed: 0, prompt: 'schema' }, scorer: { branch_batch: 8, temperature: 1 } },
  log_level: 'info',
});

describe('backend per run', () => {
  it('overrides the saved backend only when another is picked', () => {
    let p = prefs();
    const b = new BackendPicker(() => p.run.scorer);
    b.render();
    expect([...b.el.options].map((o) => o.value)).toEqual(['', 'json', 'cached', 'catalog']);
    expect(b.override(p.run)).toBeUndefined();
    b.el.value = 'cached';
    b.el.dispatchEvent(new Event('change'));
    expect(b.override(p.run)!.scorer).toEqual({ branch_batch: 8, temperature: 1, backend: 'cached' });
    expect(b.override(p.run)!.generation).toEqual(p.run.generation);
    p = { ...p, run: { ...p.run, scorer: { ...p.run.scorer, backend: 'cached' } } };
    expect(b.override(p.run)).toBeUndefined(); // the saved one already
    b.el.value = 'json';
    b.el.dispatchEvent(new Event('change'));
    expect(b.override(p.run)!.scorer.backend).toBe('json');
  });

  it('saves the cached backend and a correction in the settings', async () => {
    let cur = prefs();
    const saved: Preferences[] = [];
    const d = new SettingsDialog({ prefs: () => cur, save: async (p) => void saved.push(p), defaults: async () => prefs(), settingsPath: () => '' });
    document.body.appendChild(d.el);
    const submit = async () => {
      (d.el.querySelector('button[type="submit"]') as HTMLButtonElement).click();
      await new Promise((r) => setTimeout(r, 0));
    };
    const sel = (n: string) => d.el.querySelector(`select[name="${n}"]`) as HTMLSelectElement;
    d.open();
    expect(sel('normalize').value).toBe('none');
    expect([...sel('backend').options].map((o) => o.value)).toEqual(['json', 'cached', 'catalog']);
    await submit();
    expect(saved[0].run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '' });
    d.open();
    sel('backend').value = 'cached';
    sel('normalize').value = 'pmi';
    await submit();
    expect(saved[1].run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '', backend: 'cached', normalize: 'pmi' });
    cur = { ...saved[1], run: { ...saved[1].run, scorer: { ...saved[1].run.scorer, head: 'h.safetensors' } } };
    d.open();
    expect(sel('backend').value).toBe('cached');
    expect(sel('normalize').value).toBe('pmi');
    expect([...sel('backend').options].map((o) => o.value)).toContain('head');
    sel('normalize').value = 'none';
    await submit();
    expect(saved[2].run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '', backend: 'cached', normalize: 'none', head: 'h.safetensors' });
    d.el.remove();
  });
});

describe('correction note', () => {
  it('names the method and the uncorrected answer when it differs', async () => {
    const { correctionNote } = await import('../src/ui/correctionNote');
    expect(correctionNote(fields[0])).toBeNull();
    const f = structuredClone(fields[0]);
    f.decisions[0].correction = { method: 'contextual', raw_probabilities: [0.7, 0.1, 0.1, 0.1], raw_confidence: 0.3, prior_probabilities: [0.5, 0.2, 0.2, 0.1] };
    const el = correctionNote(f)!;
    expect(el.textContent).toBe('contextual-corrected; uncorrected: low (70.0%)');
    expect(el.title).toBe('priority: raw low 70.0%, medium 10.0%, high 10.0%, critical 10.0%; prior 50.0% / 20.0% / 20.0% / 10.0%');
    f.decisions[0].correction = { method: 'pmi', raw_probabilities: [0.1, 0.1, 0.7, 0.1], raw_confidence: 0.3, neutral_log_likelihoods: [-1, -2, -3, -4] };
    expect(correctionNote(f)!.textContent).toBe('pmi-corrected; same answer uncorrected');
    expect(correctionNote(f)!.title).toContain('neutral log-likelihoods -1.00 / -2.00 / -3.00 / -4.00');
  });
});
