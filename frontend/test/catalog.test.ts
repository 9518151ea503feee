// The catalog field in the frontend: the schema editor's catalog type, the
// live names from run updates, the catalog card, the trie-decoded choice,
// the backend setting and the generator's agreement with an array answer.
import { fromEngine, problems, toEngine, withType, decisions, type SchemaDraft } from '../src/schema';
import { agrees, applyUpdate, fromRecord, scorerValue, startRun } from '../src/run';
import { fieldSummary } from '../src/history';
import { ScorerPanel, catalogTimingLine, headline, msPerToken, tokenText, winnerP } from '../src/ui/scorerPanel';
import { SchemaEditor } from '../src/ui/schemaEditor';
import type { CatalogStep, FieldResult, RunRecord } from '../src/types';

const toolsSchema = {
  instructions: 'Read the request and choose the tools that serve it.',
  fields: [{
    name: 'tools', question: 'Which tools?', type: 'catalog', k: 2,
    entries: { refund_order: 'Refund an order', track_package: 'Track a package', '7zip': 'Unpack an archive', '42': 'The answer' },
  }],
};

const step = (chosen: number, legal: number, tokens: [number, string, number][]): CatalogStep => ({
  node: chosen, chosen, legal, tokens: tokens.map(([id, text, p]) => ({ id, text, p })),
});

const steps: CatalogStep[] = [
  step(11, 9, [[11, 'refund', 0.7], [12, 'track', 0.2], [13, 'cancel', 0.04], [14, 'search', 0.03], [15, 'send', 0.02], [16, 'get', 0.006], [17, 'list', 0.004]]),
  step(21, 2, [[21, '_order', 0.9], [22, '_payment', 0.1]]),
  step(31, 8, [[31, 'track', 0.6], [32, 'cancel', 0.4]]),
  step(41, 1, [[41, '_package', 1]]),
];

const toolsField: FieldResult = {
  name: 'tools', type: 'catalog', confidence: 0.41, allowed_token_mass: 1, decisions: [],
  names: ['refund_order', 'track_package'], steps, path_probability: 0.7 * 0.9 * 0.6,
  catalog_timing: { tokens: 4, prefill_ms: 120, ms_per_token: 12.5, sparse_head_ms_per_token: 0.004, dense_head_ms_per_token: 1.6, max_legal: 9, dense_max_relative_gap: 1e-6 },
  elapsed_ms: 300,
};

function editor(start: SchemaDraft) {
  let draft = start;
  const ed = new SchemaEditor({
    draft: () => draft, schemaName: () => 'tools', presets: () => [], check: () => undefined,
    change: (d) => (draft = d), loadPreset: () => {}, exportText: () => {},
  });
  document.body.appendChild(ed.el);
  return { ed, draft: () => draft };
}

describe('catalog schema', () => {
  it('round-trips entries in order, with descriptions and k', () => {
    const d = fromEngine(toolsSchema);
    expect(d.fields[0].type).toBe('catalog');
    expect(d.fields[0].k).toBe(2);
    const eng = toEngine(d) as { fields: Record<string, unknown>[] };
    // The entries stay in order even where a name looks like an integer.
    expect(eng.fields[0]).toEqual({
      name: 'tools', question: 'Which tools?', type: 'catalog', k: 2,
      entries: [
        { name: '42', description: 'The answer' }, // JS object order: integer keys first, as the source object gives them
        { name: 'refund_order', description: 'Refund an order' },
        { name: 'track_package', description: 'Track a package' },
        { name: '7zip', description: 'Unpack an archive' },
      ],
    });
    expect(fromEngine(JSON.parse(JSON.stringify(eng)))).toEqual(d);
    expect(problems(d)).toEqual([]);
    expect(decisions(d)).toBe(1);
  });

  it('checks k against the number of entries', () => {
    const d = fromEngine(toolsSchema);
    const withK = (k: number | undefined) => problems({ ...d, fields: [{ ...d.fields[0], k }] }).map((p) => p.message);
    for (const [k, bad] of [[1, false], [4, false], [0, true], [5, true], [1.5, true], [-1, true], [undefined, true]] as const) {
      const msgs = withK(k);
      expect(msgs.length > 0, `k = ${k}: ${msgs}`).toBe(bad);
      if (bad) expect(msgs[0]).toContain('k must be 1..4');
    }
    expect(problems({ ...d, fields: [{ ...d.fields[0], options: [], k: 1 }] }).map((p) => p.message)).toEqual(['field 1 (tools): a catalog needs at least 1 entry']);
    expect(() => fromEngine({ fields: [{ name: 't', question: 'q', type: 'catalog', k: '2', entries: ['a'] }] })).toThrow('k must be a number');
  });

  it('retypes a field to a catalog with k = 1 and back without k', () => {
    const c = withType({ name: 'f', question: 'q', type: 'bool', options: [] }, 'catalog');
    expect(c.k).toBe(1);
    expect(c.options.map((o) => o.name)).toEqual(['entry_a', 'entry_b']);
    expect('k' in withType(c, 'choice')).toBe(false);
  });

  it('edits k in the schema editor and shows the problem inline', () => {
    const { ed, draft } = editor(fromEngine(toolsSchema));
    const k = ed.el.querySelector('.field-k') as HTMLInputElement;
    expect(k.value).toBe('2');
    expect(k.max).toBe('4');
    expect(ed.el.querySelector('.catalog-count')!.textContent).toBe('of 4 entries, in order');
    expect(ed.el.querySelectorAll('li.option')).toHaveLength(4);
    expect((ed.el.querySelector('li.option .opt-desc') as HTMLInputElement).value).toBe('The answer');
    k.value = '9';
    k.dispatchEvent(new Event('input'));
    expect(draft().fields[0].k).toBe(9);
    expect(ed.el.querySelector('li.field-card .problems')!.textContent).toContain('k = 9, but the catalog has 4 entries (k must be 1..4)');
    k.value = '3';
    k.dispatchEvent(new Event('input'));
    expect(draft().fields[0].k).toBe(3);
    expect(ed.el.querySelector('li.field-card .problems')).toBeNull();
    (ed.el.querySelector('button.add-field[data-type="catalog"]') as HTMLButtonElement).click();
    expect(draft().fields[1]).toMatchObject({ type: 'catalog', k: 1 });
    ed.el.remove();
  });
});

const started = { id: 'run-c', started_ms: 1, scorer: true, generator: false, concurrent: false, model: 'm', random_weights: true };

describe('catalog live steps', () => {
  it('accumulates the steps per field and keeps the latest names', () => {
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 5, scorer: { status: 'decoding', done: 0, total: 2, catalog: [
      { field: 'tools', names: [], step: steps[0] },
      { field: 'tools', names: ['refund_order'], step: steps[1] },
      { field: 'other', names: ['a'], step: steps[3] },
    ] } });
    expect(r.scorer!.catalog!.get('tools')).toEqual({ names: ['refund_order'], steps: steps.slice(0, 2) });
    const before = r;
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 6, scorer: { status: 'decoding', done: 0, total: 2 } });
    expect(r.scorer!.catalog!.get('tools')!.steps).toHaveLength(2); // an update without steps keeps them
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 7, scorer: { status: 'decoding', done: 0, total: 2, catalog: [
      { field: 'tools', names: ['refund_order'], step: steps[2] },
      { field: 'tools', names: ['refund_order', 'track_package'], step: steps[3] },
    ] } });
    expect(r.scorer!.catalog!.get('tools')).toEqual({ names: ['refund_order', 'track_package'], steps });
    expect(r.scorer!.catalog!.get('other')!.steps).toHaveLength(1);
    expect(before.scorer!.catalog!.get('tools')!.steps).toHaveLength(2); // updates do not change the run they start from
    expect(applyUpdate(r, { id: 'run-x', elapsed_ms: 8, scorer: { status: 'decoding', done: 0, total: 2, catalog: [{ field: 'tools', names: [], step: steps[0] }] } })).toBe(r);
  });
});

describe('catalog card', () => {
  const order = [{ name: 'tools', type: 'catalog' }];

  it('shows the names as they are emitted, then the finished field', () => {
    const p = new ScorerPanel({ stop: () => {} });
    let r = startRun(started);
    p.render(r, order);
    const card = () => p.el.querySelector('[data-field="tools"]')!;
    expect(card().classList.contains('pending')).toBe(true);
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 5, scorer: { status: 'decoding', done: 0, total: 1, catalog: [
      { field: 'tools', names: [], step: steps[0] }, { field: 'tools', names: ['refund_order'], step: steps[1] },
    ] } });
    p.render(r, order);
    expect([...card().querySelectorAll('.cat-name')].map((e) => e.textContent)).toEqual(['refund_order']);
    expect(card().querySelector('.dist-win')!.textContent).toBe('refund_order');
    expect(card().querySelector('.cat-live-steps')!.textContent).toBe('2 steps decoded');
    expect(card().querySelector('.cat-step .cat-chosen')!.textContent).toBe('_order');
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 9, scorer: { status: 'decoding', done: 0, total: 1, catalog: [
      { field: 'tools', names: ['refund_order', 'track_package'], step: steps[3] },
    ] } });
    p.render(r, order);
    expect([...card().querySelectorAll('.cat-name')].map((e) => e.textContent)).toEqual(['refund_order', 'track_package']);

    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 10, scorer: { status: 'done', done: 1, total: 1, fields: [toolsField] } });
    p.render(r, order);
    expect(card().classList.contains('filled')).toBe(true);
    expect(card().querySelector('.dist-win')!.textContent).toBe('refund_order, track_package');
    const rows = [...card().querySelectorAll('.cat-step')];
    expect(rows).toHaveLength(4);
    expect(rows.map((e) => e.querySelector('.cat-legal')!.textContent)).toEqual(['9 legal', '2 legal', '8 legal', '1 legal']);
    expect(rows.map((e) => e.querySelector('.cat-chosen')!.textContent)).toEqual(['refund', '_order', 'track', '_package']);
    // The first step: 5 tokens shown, 2 behind the toggle, 2 legal tokens not listed.
    const first = rows[0];
    expect(first.querySelectorAll('.cat-toks > .cat-tok')).toHaveLength(5);
    expect(first.querySelector('.cat-tok.chosen .cat-tok-p')!.textContent).toBe('70.0%');
    const more = first.querySelector('.cat-more') as HTMLElement;
    const toggle = first.querySelector('.cat-more-toggle') as HTMLButtonElement;
    expect(more.hidden).toBe(true);
    expect(toggle.textContent).toBe('+2 more');
    toggle.click();
    expect(more.hidden).toBe(false);
    expect(more.querySelectorAll('.cat-tok')).toHaveLength(2);
    expect(toggle.getAttribute('aria-expanded')).toBe('true');
    expect(first.textContent).toContain('(2 not listed)');
    expect(rows[1].querySelector('.cat-more-toggle')).toBeNull();
    expect(card().querySelector('.dist-meta')!.textContent).toContain('path probability 37.80%');
    expect(card().querySelector('.cat-timing')!.textContent).toBe('sparse head 0.004 ms/token vs dense 1.6 ms/token (400× less), decode 13 ms/token');
  });

  it('shows a finished record the same way, and a one-line compact head', () => {
    const rec = { id: 'run-c', started_ms: 1, model: 'm', random_weights: true, input: { text: 'x', chars: 1 }, settings: {} as RunRecord['settings'], concurrent: false, total_ms: 20,
      scorer: { status: 'done', fields: [toolsField], fields_total: 1, calibration: { applied: false, detail: 'uncalibrated: none' }, cached_schema: false, timing: { start_ms: 0, input_preparation_ms: 1, prefill_ms: 2, prefill_tokens_per_second: 1, prompt_tokens: 3, total_ms: 20 } },
    } as RunRecord;
    const p = new ScorerPanel({ stop: () => {} }, true);
    // The live result comes without its final time; the record's result replaces it.
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 3, scorer: { status: 'done', done: 1, total: 1, fields: [{ ...toolsField, elapsed_ms: 0 }] } });
    p.render(r, order);
    expect(p.el.querySelector('[data-field="tools"] .dist-meta')!.textContent).toContain('done at 0.00 ms');
    p.render(r, order);
    p.render(fromRecord(rec), order);
    expect(p.el.querySelector('[data-field="tools"] .dist-meta')!.textContent).toContain('done at 300 ms');
    expect(p.el.querySelector('.dists.compact [data-field="tools"] .dist-win')!.textContent).toBe('refund_order, track_package');
    expect(p.el.querySelector('[data-field="tools"] .dist-p')!.textContent).toBe('37.8% · conf 41.0%');
  });

  it('formats the heads\' timing and the tokens', () => {
    expect(msPerToken(0.00413)).toBe('0.0041 ms/token');
    expect(msPerToken(123.4)).toBe('120 ms/token');
    expect(catalogTimingLine({ tokens: 3, prefill_ms: 1, ms_per_token: 2, sparse_head_ms_per_token: 0.5, dense_head_ms_per_token: 2, max_legal: 3 }))
      .toBe('sparse head 0.5 ms/token vs dense 2 ms/token (4.0× less), decode 2 ms/token');
    expect(catalogTimingLine({ tokens: 3, prefill_ms: 1, ms_per_token: 2, sparse_head_ms_per_token: 0.5, max_legal: 3 }))
      .toBe('sparse head 0.5 ms/token (dense head not timed), decode 2 ms/token');
    expect(tokenText({ id: 5, text: ' a\n', p: 1 })).toBe('␣a⏎');
    expect(tokenText({ id: 5, p: 1 })).toBe('#5');
    expect(tokenText(undefined, 9)).toBe('#9');
    expect(headline(toolsField)).toBe('refund_order, track_package');
    expect(winnerP(toolsField)).toBe('37.8%');
    expect(fieldSummary(toolsField)).toBe('refund_order, track_package (path 37.8%)');
  });

  it('notes a choice decoded through the trie, without the boundary-fix tag', () => {
    const choice: FieldResult = {
      name: 'priority', type: 'choice', winner: 'high', confidence: 0.5, allowed_token_mass: 1, elapsed_ms: 4,
      names: ['high'], steps: [steps[3]],
      decisions: [{ name: 'priority', confidence: 0.5, allowed_token_mass: 1, temperature: 1, boundary: 'catalog',
        candidates: [{ value: 'high', probability: 0.7, log_likelihood: -0.3 }, { value: 'low | medium', probability: 0.3, log_likelihood: -1.2 }] }],
    };
    const p = new ScorerPanel({ stop: () => {} });
    let r = startRun(started);
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 3, scorer: { status: 'done', done: 1, total: 1, fields: [{ ...choice, elapsed_ms: 0 }] } });
    p.render(r, [{ name: 'priority', type: 'choice' }]);
    expect(p.el.querySelector('[data-field="priority"] .dist-meta')!.textContent).toContain('done at 0.00 ms');
    r = applyUpdate(r, { id: 'run-c', elapsed_ms: 4, scorer: { status: 'done', done: 1, total: 1, fields: [choice] } });
    p.render(r, [{ name: 'priority', type: 'choice' }]);
    const card = p.el.querySelector('[data-field="priority"]')!;
    expect(card.querySelector('.dist-meta')!.textContent).toContain('done at 4.0 ms');
    expect([...card.querySelectorAll('.bar-row')].map((e) => e.getAttribute('data-value'))).toEqual(['high', 'low | medium']);
    expect(card.querySelector('.trie-note')!.textContent).toBe('decoded through the trie (1 step)');
    expect(card.querySelector('.tag.warn')).toBeNull();
  });
});

describe('catalog answers', () => {
  it('compares the generated array with the names in order', () => {
    expect(scorerValue(toolsField)).toEqual(['refund_order', 'track_package']);
    for (const [g, want] of [
      [{ tools: ['refund_order', 'track_package'] }, true],
      [{ tools: ['track_package', 'refund_order'] }, false],
      [{ tools: ['refund_order'] }, false],
      [{ tools: 'refund_order' }, false],
      [{ other: 1 }, null],
    ] as const) expect(agrees(toolsField, g), JSON.stringify(g)).toBe(want);
  });
});

describe('scorer backend setting', () => {
  it('saves the backend picked, and leaves an unset one unset', async () => {
    const { SettingsDialog } = await import('../src/ui/settingsDialog');
    const prefs = {
      run: { generation: { max_tokens: 96, temperature: 0, top_k: 64, top_p: 0.95, seed: 0, prompt: 'schema' as const }, scorer: { branch_batch: 8, temperature: 1 } },
      log_level: 'info',
    };
    const saved: unknown[] = [];
    let cur: typeof prefs = prefs;
    const d = new SettingsDialog({ prefs: () => cur, save: async (p) => void saved.push(p), defaults: async () => prefs, settingsPath: () => '' });
    document.body.appendChild(d.el);
    const submit = async () => {
      (d.el.querySelector('button[type="submit"]') as HTMLButtonElement).click();
      await new Promise((r) => setTimeout(r, 0));
    };
    d.open();
    const sel = () => d.el.querySelector('select[name="backend"]') as HTMLSelectElement;
    expect(sel().value).toBe('json');
    await submit();
    expect((saved[0] as typeof prefs).run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '' });
    d.open();
    sel().value = 'catalog';
    await submit();
    expect((saved[1] as typeof prefs).run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '', backend: 'catalog' });
    cur = saved[1] as typeof prefs;
    d.open();
    expect(sel().value).toBe('catalog');
    sel().value = 'json';
    await submit();
    expect((saved[2] as typeof prefs).run.scorer).toEqual({ branch_batch: 8, temperature: 1, calibration: '', backend: 'json' });
    d.el.remove();
  });
});
