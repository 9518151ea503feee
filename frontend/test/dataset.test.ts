import { exportName, flatten, fmtLeft, progressText, type DatasetRow, type DatasetState } from '../src/dataset';
import { DatasetPanel, PAGE, type DatasetHost } from '../src/ui/datasetPanel';

const base: DatasetState = {
  state: 'loaded', name: 'tickets.jsonl', format: 'jsonl', records: 250, invalid: 2, done: 0, errors: 0, total: 250,
  rate: 0, elapsed_ms: 0, left_ms: 0, summary: { records: 0, errors: 0, fields: [] },
};

function rowsOf(n: number): DatasetRow[] {
  return Array.from({ length: n }, (_, i) => i % 10 === 3
    ? { id: `t${i}`, line: i + 1, error: 'the text is empty', elapsed_ms: 0 }
    : { id: `t${i}`, line: i + 1, answer: { priority: i % 2 ? 'high' : 'low', refund: i % 3 === 0, issues: { late: true, broken: false }, tools: ['a', 'b'] }, elapsed_ms: 12.5 });
}

/** A fake service: its calls recorded, its results served from rows. */
function fakeHost(rows: DatasetRow[], over: Partial<DatasetHost> = {}) {
  const calls: string[] = [];
  const exported: [string, string][] = [];
  const errors: string[] = [];
  let blocked: string | null = null;
  const host: DatasetHost = {
    load: async (name, content) => (calls.push(`load ${name} ${content.length}`), { ...base, name }),
    start: async () => (calls.push('start'), { ...base, state: 'running' }),
    cancel: async () => void calls.push('cancel'),
    results: async (offset, limit) => (calls.push(`results ${offset} ${limit}`), rows.slice(offset, offset + limit)),
    exportData: async (f) => (calls.push(`export ${f}`), `content ${f}`),
    exportText: (n, c) => void exported.push([n, c]),
    blocked: () => blocked,
    maxBytes: () => 1000,
    error: (m) => void errors.push(m),
    ...over,
  };
  return { host, calls, exported, errors, block: (b: string | null) => (blocked = b) };
}

const flush = () => new Promise((r) => setTimeout(r, 0));
const q = (el: HTMLElement, sel: string) => el.querySelector(sel) as HTMLElement;

describe('dataset helpers', () => {
  it('flattens answers as the Go side counts them', () => {
    expect(flatten({ a: 'x', b: true, c: { d: false, e: true }, f: ['p', 'q'], g: 3 })).toEqual({ a: 'x', b: 'true', 'c.d': 'false', 'c.e': 'true', f: 'p, q', g: '3' });
    expect(flatten(null)).toEqual({});
    expect(flatten(['x'])).toEqual({});
  });
  it('writes the progress with the rate and the time left', () => {
    expect(progressText({ ...base, state: 'running', done: 42, total: 1200, errors: 1, rate: 5.06, left_ms: 229_000 })).toBe('42 of 1,200 records · 1 error · 5.1/s · about 3 min 49 s left');
    expect(progressText({ ...base, state: 'done', done: 3, total: 3, errors: 2, rate: 12.4, left_ms: 0 })).toBe('3 of 3 records · 2 errors · 12/s');
    expect(fmtLeft(0)).toBe('');
    expect(fmtLeft(3_725_000)).toBe('1 h 2 min');
    expect(exportName('tickets.jsonl', 'csv')).toBe('tickets-results.csv');
    expect(exportName(undefined, 'jsonl')).toBe('dataset-results.jsonl');
  });
});

describe('dataset panel', () => {
  it('loads a file, runs, shows progress, counts and the table, exports', async () => {
    const rows = rowsOf(250);
    const f = fakeHost(rows);
    const p = new DatasetPanel(f.host);
    expect((q(p.el, '#dataset-run') as HTMLButtonElement).disabled).toBe(true);
    expect(q(p.el, '#dataset-info').textContent).toContain('JSONL with {"id", "text"} a line');

    const input = q(p.el, '#dataset-file') as HTMLInputElement;
    const file = new File(['{"text": "a"}\n{"text": "b"}\n'], 'tickets.jsonl');
    Object.defineProperty(input, 'files', { value: [file], configurable: true });
    input.dispatchEvent(new Event('change'));
    await flush();
    await flush();
    expect(f.calls).toContain('load tickets.jsonl 28');
    expect(q(p.el, '#dataset-info').textContent).toBe('tickets.jsonl · 250 records (2 unreadable: they become error rows)');
    expect(q(p.el, '#dataset-progress').hidden).toBe(true);

    q(p.el, '#dataset-run').click();
    await flush();
    expect(f.calls).toContain('start');
    expect(q(p.el, '#dataset-stop')).not.toBeNull();
    expect((q(p.el, '#dataset-load') as HTMLButtonElement).disabled).toBe(true);

    // Progress events: the bar, the line, the first rows fetched.
    p.update({ ...base, state: 'running', done: 20, errors: 2, rate: 4, left_ms: 57_500,
      summary: { records: 20, errors: 2, fields: [{ field: 'priority', values: [{ value: 'high', count: 12 }, { value: 'low', count: 6 }] }] } });
    await flush();
    const bar = q(p.el, '#dataset-progress .bar-fill');
    expect(bar.style.width).toBe('8%');
    expect(q(p.el, '#dataset-progress').textContent).toBe('Scoring · 20 of 250 records · 2 errors · 4.0/s · about 58 s left');
    const field = q(p.el, '[data-field="priority"]');
    expect([...field.querySelectorAll('.bar-row')].map((r) => r.textContent)).toEqual(['high12', 'low6']);
    expect((field.querySelector('.bar-row .bar-fill') as HTMLElement).style.width).toBe(`${(100 * 12) / 18}%`);

    q(p.el, '#dataset-stop').click();
    await flush();
    expect(f.calls).toContain('cancel');

    const fields = [
      { field: 'priority', values: [{ value: 'high', count: 113 }, { value: 'low', count: 112 }] },
      { field: 'refund', values: [{ value: 'false', count: 150 }, { value: 'true', count: 75 }] },
      { field: 'issues.late', values: [{ value: 'true', count: 225 }] },
      { field: 'tools', values: [{ value: 'a', count: 225 }, { value: 'b', count: 225 }] },
    ];
    p.update({ ...base, state: 'done', done: 250, errors: 25, rate: 10, elapsed_ms: 25_000, summary: { records: 250, errors: 25, fields } });
    await flush();
    await flush();
    expect(q(p.el, '#dataset-progress').textContent).toBe('Done · 250 of 250 records · 25 errors · 10/s · 25.0 s');
    const table = q(p.el, '#dataset-table');
    expect([...table.querySelectorAll('thead th')].map((th) => th.textContent)).toEqual(['id', 'line', 'priority', 'refund', 'issues.late', 'tools', 'time']);
    const body = [...table.querySelectorAll('tbody tr')];
    expect(body.length).toBe(PAGE);
    expect([...body[0].querySelectorAll('td')].map((td) => td.textContent)).toEqual(['t0', '1', 'low', 'true', 'true', 'a, b', '13 ms']);
    expect(body[3].classList.contains('error-row')).toBe(true);
    expect([...body[3].querySelectorAll('td')].map((td) => td.textContent)).toEqual(['t3', '4', 'the text is empty', '']);

    // More rows, then all.
    q(p.el, '#dataset-more').click();
    await flush();
    await flush();
    expect(p.el.querySelectorAll('#dataset-table tbody tr').length).toBe(200);
    q(p.el, '#dataset-more').click();
    await flush();
    await flush();
    expect(p.el.querySelectorAll('#dataset-table tbody tr').length).toBe(250);
    expect(p.el.querySelector('#dataset-more')).toBeNull();

    q(p.el, '#dataset-export-csv').click();
    await flush();
    q(p.el, '#dataset-export-jsonl').click();
    await flush();
    expect(f.exported).toEqual([['tickets-results.csv', 'content csv'], ['tickets-results.jsonl', 'content jsonl']]);
    expect(f.errors).toEqual([]);
  });

  it('says why it cannot run, and shows the service errors', async () => {
    const f = fakeHost([], { start: async () => { throw new Error('the model is still loading'); } });
    const p = new DatasetPanel(f.host);
    p.update(base);
    f.block('load a model first');
    p.renderControls();
    const run = q(p.el, '#dataset-run') as HTMLButtonElement;
    expect(run.disabled).toBe(true);
    expect(run.title).toBe('load a model first');
    expect(q(p.el, '#dataset-info').textContent).toContain('· load a model first');
    f.block(null);
    p.renderControls();
    const input = q(p.el, '#dataset-file') as HTMLInputElement;
    Object.defineProperty(input, 'files', { value: [new File(['x'.repeat(2000)], 'big.jsonl')], configurable: true });
    input.dispatchEvent(new Event('change'));
    await flush();
    expect(f.calls).toEqual([]);
    expect(f.errors).toEqual(['big.jsonl is 2.0 KB: the app takes files up to 1.0 KB here; score larger ones with verdict score-file']);
    f.errors.length = 0;
    q(p.el, '#dataset-run').click();
    await flush();
    expect(f.errors).toEqual(['the model is still loading']);
    p.update({ ...base, state: 'failed', done: 3, error: 'write failed', summary: { records: 3, errors: 0, fields: [] } });
    await flush();
    expect(q(p.el, '#dataset-progress .error-text').textContent).toBe(' · write failed');
    expect((q(p.el, '#dataset-export-csv') as HTMLButtonElement).disabled).toBe(false);
  });
});
