import { applyUpdate, fromRecord, markStopping, pendingLabel, prefillStage, running, scorerStage, startRun, stopping, towerItems, towerStage } from '../src/run';
import { InputPanel, type InputHost } from '../src/ui/inputPanel';
import { ScorerPanel } from '../src/ui/scorerPanel';
import { TimingPanel } from '../src/ui/timingPanel';
import { loadProgress } from '../src/ui/modelBar';
import { mediaLane } from '../src/waterfall';
import type { RunMedia } from '../src/types';
import { fields, record } from './fixtures';

const started = { id: 'run-1', started_ms: 1, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true };
const order = fields.map((f) => ({ name: f.name, type: f.type }));
const towers = (over: Partial<RunMedia> = {}): RunMedia => ({
  status: 'preparing', done: 0, total: 2, stage: 'image 1', images: 1, audio: true, soft_tokens: 444, note: '', items: [], ...over,
});

function inputHost(r: () => ReturnType<typeof startRun>, stop: () => void): InputHost {
  return {
    input: () => 'x', files: () => [], setInput: () => {}, addFiles: () => {}, pickFiles: () => {}, removeFile: () => {},
    mode: () => 'browser', chooseFiles: () => {}, canRun: () => ({ ok: true, why: '' }),
    running: () => running(r()), stopping: () => stopping(r()), run: () => {}, stop, inputTokensHint: () => '',
  };
}

describe('stopping a run', () => {
  it('stays "stopping…" until the server confirms the end', () => {
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 100, media: towers({ block: 3, blocks: 40 }) });
    let stops = 0;
    const panel = new InputPanel(inputHost(() => r, () => stops++));
    panel.render();
    const button = () => panel.actions.querySelector('#stop-run') as HTMLButtonElement;
    expect(button().textContent).toBe('■ Stop');
    button().click();
    expect(stops).toBe(1);

    r = markStopping(r);
    // Both sides report "stopped" at once while the towers end their block.
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 150, scorer: { status: 'cancelled', done: 0, total: 4 }, generator: { status: 'cancelled', tokens: 0 } });
    expect(running(r)).toBe(true);
    expect(stopping(r)).toBe(true);
    panel.render();
    expect(button().textContent).toBe('Stopping…');
    expect(button().disabled).toBe(true);
    button().click();
    expect(stops).toBe(1);

    // run:done: the run is over and another can start.
    r = fromRecord(record('run-1'));
    expect(running(r)).toBe(false);
    expect(stopping(r)).toBe(false);
    panel.render();
    expect(panel.actions.querySelector('#stop-run')).toBeNull();
    expect((panel.actions.querySelector('#run') as HTMLButtonElement).disabled).toBe(false);
  });

  it('counts towers still running after both sides stopped as stopping', () => {
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 100, media: towers(), scorer: { status: 'cancelled', done: 0, total: 4 }, generator: { status: 'cancelled', tokens: 0 } });
    expect(running(r)).toBe(true);
    expect(stopping(r)).toBe(true);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 200, media: towers({ status: 'cancelled', stage: undefined }) });
    expect(running(r)).toBe(false);
  });

  it('clears the field cards\' "waiting…" once the scorer stopped', () => {
    const p = new ScorerPanel({ stop: () => {} });
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 10, scorer: { status: 'scoring', fields: [fields[1]], done: 1, total: 4 } });
    p.render(r, order);
    expect([...p.el.querySelectorAll('.dist.pending .dist-win')].map((e) => e.textContent)).toEqual(['waiting…', 'waiting…', 'waiting…']);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 20, scorer: { status: 'cancelled', done: 1, total: 4 } });
    p.render(r, order);
    expect(p.el.querySelectorAll('.dist.pending')).toHaveLength(0);
    expect(p.el.querySelectorAll('.skeleton')).toHaveLength(0);
    expect([...p.el.querySelectorAll('.dist.unscored .dist-win')].map((e) => e.textContent)).toEqual(['not scored: stopped', 'not scored: stopped', 'not scored: stopped']);
    expect(p.el.querySelector('[data-field="refund_requested"] .dist-win')!.textContent).toBe('true');
    expect(p.el.textContent).not.toContain('waiting…');
    expect(pendingLabel({ status: 'error', fields: new Map(), done: 0, total: 1 })).toBe('not scored: error');
  });
});

describe('tower progress and times', () => {
  it('says which item, which block, and the time left', () => {
    const r = applyUpdate(startRun(started), { id: 'run-1', elapsed_ms: 100, media: towers({ block: 12, blocks: 84, item_ms: 3200, left_ms: 19200 }) });
    expect(towerStage(r)).toBe('image 1 (1 of 2) · block 12 of 84 · 3.20 s, about 19.2 s left');
    const loading = applyUpdate(startRun(started), { id: 'run-1', elapsed_ms: 100, media: towers({ loading: true, block: 3, blocks: 84, item_ms: 500 }) });
    expect(towerStage(loading)).toBe('image 1 (1 of 2) · loading the tower · 500 ms');
  });

  it('splits the tower time per item in the table and the waterfall, cached ones marked', () => {
    const m = towers({ status: 'done', stage: undefined, done: 2, tower_ms: 1250, items: [{ what: 'image 1', ms: 1200, cached: false }, { what: 'audio', ms: 0.4, cached: true }] });
    expect(towerItems(m)).toBe('image 1 1.20 s · audio cached');
    const lane = mediaLane(m);
    expect(lane.segments.map((s) => [s.label, s.start, s.end])).toEqual([['image 1', 0, 1200], ['audio (cached)', 1200, 1200]]);
    const t = new TimingPanel();
    t.render(fromRecord(record('run-1', { media: m })));
    expect([...t.el.querySelectorAll('.wf-lane .wf-name')].map((e) => e.textContent)).toEqual(['Towers', 'Scorer', 'Generation']);
    const rows = [...t.el.querySelectorAll('#timing-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    expect(rows).toContainEqual(['Media towers', '1.25 s · shared · image 1 1.20 s · audio cached', '1.25 s · shared · image 1 1.20 s · audio cached']);
  });
});

describe('model load progress', () => {
  it('shows the share packed and the time left', () => {
    expect(loadProgress({ state: 'loading', random_weights: false, builtin: false, stage: 'packing weights to 4 bits', done: 1e9, total: 4e9, elapsed_ms: 10000, size_bytes: 0 }))
      .toBe('packing weights to 4 bits 25% · 10.0 s, about 30.0 s left');
    expect(loadProgress({ state: 'loading', random_weights: true, builtin: true, stage: 'generating random weights', elapsed_ms: 250 })).toBe('generating random weights · 250 ms');
  });
});

describe('prefill progress', () => {
  it('says the layer and the time left of a long prefill', () => {
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 3000, scorer: { status: 'prefilling', done: 0, total: 4,
      timing: { start_ms: 0, input_preparation_ms: 1000, prefill_ms: 0, prefill_tokens_per_second: 0, prompt_tokens: 4000, total_ms: 3000, prefill_done: 10, prefill_layers: 30 } } });
    expect(scorerStage(r)).toBe('input ready in 1.00 s · prefilling the shared prefix · layer 10 of 30 · about 4.00 s left');
    expect(prefillStage(undefined, 10)).toBe('');
  });
});
