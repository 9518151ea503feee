import { ScorerPanel, barsOf, headline } from '../src/ui/scorerPanel';
import { GeneratorPanel } from '../src/ui/generatorPanel';
import { TimingPanel } from '../src/ui/timingPanel';
import { SchemaEditor } from '../src/ui/schemaEditor';
import { fromRecord, startRun, applyUpdate } from '../src/run';
import { fromEngine, type SchemaDraft } from '../src/schema';
import { fields, record, ticketSchema } from './fixtures';

const order = fields.map((f) => ({ name: f.name, type: f.type }));

describe('scorer panel', () => {
  it('shows a bar per value with the winner marked', () => {
    expect(barsOf(fields[0]).map((b) => [b.label, b.winner])).toEqual([['low', false], ['medium', false], ['high', true], ['critical', false]]);
    expect(barsOf(fields[1]).map((b) => [b.label, b.p])).toEqual([['true', 0.8], ['false', expect.closeTo(0.2)]]);
    expect(headline(fields[2])).toBe('late delivery');
    expect(headline(fields[3])).toBe('3  (E = 2.50)');
  });

  it('fills fields in as they finish', () => {
    const p = new ScorerPanel({ stop: () => {} });
    let run = startRun({ id: 'run-1', started_ms: 0, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true });
    p.render(run, order);
    expect(p.el.querySelectorAll('.dist.pending')).toHaveLength(4);
    run = applyUpdate(run, { id: 'run-1', elapsed_ms: 10, scorer: { status: 'scoring', fields: [fields[1]], done: 1, total: 4 } });
    p.render(run, order);
    expect(p.el.querySelectorAll('.dist.pending')).toHaveLength(3);
    const refund = p.el.querySelector('[data-field="refund_requested"]')!;
    expect(refund.querySelector('.bar-row.winner')!.getAttribute('data-value')).toBe('true');
    expect(refund.querySelector('.dist-win')!.textContent).toBe('true');
    expect(p.el.querySelector('#scorer-progress')!.textContent).toBe('1/4 fields');
    p.render(fromRecord(record('run-1')), order);
    expect(p.el.querySelectorAll('.dist.filled')).toHaveLength(4);
    expect(p.el.querySelectorAll('[data-field="priority"] .bar-row')).toHaveLength(4);
    expect(p.el.textContent).toContain('Neither is an accuracy estimate');
  });
});

describe('generator and timing panels', () => {
  it('streams text and shows the parsed JSON with agreement', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    g.render(fromRecord(record('run-1')));
    expect(g.el.querySelector('#gen-text')!.textContent).toContain('"priority": "high"');
    expect(g.el.querySelector('#gen-json')!.textContent).toContain('"refund_requested": true');
    expect(g.el.querySelectorAll('.agree li.same')).toHaveLength(2);
    expect(g.el.querySelectorAll('.agree li.missing')).toHaveLength(2);
  });

  it('shows both timing breakdowns and the contention note', () => {
    const t = new TimingPanel();
    t.render(fromRecord(record('run-1')));
    expect(t.el.querySelector('#contention')!.textContent).toContain('contention');
    expect(t.el.querySelectorAll('.wf-lane')).toHaveLength(2);
    const rows = [...t.el.querySelectorAll('#timing-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    expect(rows).toContainEqual(['Prefill speed', '4,000 tok/s', '3,300 tok/s']);
    expect(rows).toContainEqual(['First token', '—', '62 ms']);
    expect(rows).toContainEqual(['First decision', '100 ms', '—']);
    expect(rows).toContainEqual(['Decode speed', '—', '40.0 tok/s · 21 tok']);
  });
});

describe('schema editor', () => {
  it('adds fields and exports the schema', () => {
    let draft: SchemaDraft = fromEngine(ticketSchema);
    const exported: string[] = [];
    const ed = new SchemaEditor({
      draft: () => draft,
      schemaName: () => 'ticket',
      presets: () => [],
      check: () => ({ ok: true, fields: 4, decisions: 5 }),
      change: (d) => (draft = d),
      loadPreset: () => {},
      exportText: (name, content) => exported.push(name, content),
    });
    document.body.appendChild(ed.el);
    expect(ed.el.querySelectorAll('.field-card')).toHaveLength(4);
    (ed.el.querySelector('button.add-field[data-type="bool"]') as HTMLButtonElement).click();
    expect(draft.fields).toHaveLength(5);
    expect(ed.el.querySelectorAll('.field-card')).toHaveLength(5);
    const q = ed.el.querySelector('li.field-card[data-field="4"] .field-question') as HTMLInputElement;
    expect(document.activeElement).toBe(q);
    q.value = 'Is it spam?';
    q.dispatchEvent(new Event('input'));
    expect(draft.fields[4].question).toBe('Is it spam?');
    (ed.el.querySelector('li.field-card[data-field="0"] .icon.danger') as HTMLButtonElement).click();
    expect(draft.fields.map((f) => f.name)).toEqual(['refund_requested', 'issues', 'anger', 'field_5']);
    [...ed.el.querySelectorAll('button')].find((b) => b.textContent === 'Export')!.click();
    expect(exported[0]).toBe('ticket.json');
    expect(JSON.parse(exported[1]).fields[3]).toEqual({ name: 'field_5', question: 'Is it spam?', type: 'bool' });
    expect(ed.el.querySelector('.schema-status')!.textContent).toContain('4 fields · 5 decisions');
  });
});

describe('schema editor problems', () => {
  it('updates a field\'s problems as its inputs change', () => {
    let draft: SchemaDraft = fromEngine(ticketSchema);
    const ed = new SchemaEditor({
      draft: () => draft, schemaName: () => '', presets: () => [], check: () => undefined,
      change: (d) => (draft = d), loadPreset: () => {}, exportText: () => {},
    });
    const q = ed.el.querySelector('li.field-card[data-field="1"] .field-question') as HTMLInputElement;
    q.value = '';
    q.dispatchEvent(new Event('input'));
    expect(ed.el.querySelector('li.field-card[data-field="1"] .problems')!.textContent).toContain('needs a question');
    q.value = 'Refund?';
    q.dispatchEvent(new Event('input'));
    expect(ed.el.querySelector('li.field-card[data-field="1"] .problems')).toBeNull();
  });
});

describe('settings dialog', () => {
  it('saves the default settings as they are', async () => {
    const { SettingsDialog } = await import('../src/ui/settingsDialog');
    const prefs = {
      run: { generation: { max_tokens: 96, temperature: 0, top_k: 64, top_p: 0.95, seed: 0, prompt: 'schema' as const }, scorer: { branch_batch: 8, temperature: 1 } },
      log_level: 'info',
    };
    let saved: unknown = null;
    const d = new SettingsDialog({ prefs: () => prefs, save: async (p) => void (saved = p), defaults: async () => prefs, settingsPath: () => '' });
    document.body.appendChild(d.el);
    d.open();
    const form = d.el.querySelector('form')!;
    expect(form.checkValidity()).toBe(true);
    (d.el.querySelector('input[name="max_tokens"]') as HTMLInputElement).value = '8';
    (d.el.querySelector('button[type="submit"]') as HTMLButtonElement).click();
    await new Promise((r) => setTimeout(r, 0));
    expect(saved).toEqual({ ...prefs, run: { ...prefs.run, generation: { ...prefs.run.generation, max_tokens: 8 }, scorer: { ...prefs.run.scorer, calibration: '' } } });
  });
});
