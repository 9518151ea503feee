// The Dataset tab: load a JSONL or CSV file, score every record with the
// schema on the loaded model, watch the progress, see how often each answer
// was given and the results table, export them.
import { exportName, flatten, progressText, type DatasetRow, type DatasetState } from '../dataset';
import { bytesOf } from '../files';
import { fmtBytes, fmtMs } from '../format';
import { h, replace } from './dom';
import './dataset.css';

export interface DatasetHost {
  load(name: string, content: string): Promise<DatasetState>;
  /** Starts a run with the current schema. */
  start(): Promise<DatasetState>;
  cancel(): Promise<void>;
  results(offset: number, limit: number): Promise<DatasetRow[]>;
  exportData(format: 'jsonl' | 'csv'): Promise<string>;
  exportText(name: string, content: string): void;
  /** Why a run cannot start now (no model, a schema problem), or null. */
  blocked(): string | null;
  /** The largest file the service takes from this page, in bytes. */
  maxBytes(): number;
  error(message: string): void;
}

/** Rows fetched at a time. */
export const PAGE = 100;

const EMPTY: DatasetState = {
  state: 'empty', records: 0, invalid: 0, done: 0, errors: 0, total: 0, rate: 0, elapsed_ms: 0, left_ms: 0,
  summary: { records: 0, errors: 0, fields: [] },
};

export class DatasetPanel {
  readonly el: HTMLElement;
  private st: DatasetState = EMPTY;
  private rows: DatasetRow[] = [];
  private fetching = false;
  private refetch = false;
  private file = h('input#dataset-file', { type: 'file', accept: '.jsonl,.ndjson,.json,.csv', hidden: true,
    onchange: () => this.pick() }) as HTMLInputElement;
  private toolbar = h('div.toolbar');
  private progress = h('div.dataset-progress#dataset-progress', { role: 'status' });
  private counts = h('div.dataset-counts#dataset-counts');
  private table = h('div.table-wrap.dataset-table-wrap');

  constructor(private host: DatasetHost) {
    this.el = h('div.dataset#dataset', null, this.file, this.toolbar, this.progress, this.counts, this.table);
    this.render();
  }

  get state(): DatasetState {
    return this.st;
  }

  /** Takes a state from the service (an event or a call's answer). */
  update(st: DatasetState) {
    const prev = this.st;
    this.st = st;
    if (st.state === 'empty' || st.state === 'loaded' || (st.state === 'running' && prev.state !== 'running')) this.rows = [];
    this.render();
    // Keep the first page filled while it runs; the final rows when it ends.
    if (st.state !== 'empty' && st.state !== 'loaded' && (this.rows.length < Math.min(PAGE, st.done) || st.state !== 'running')) this.fetchRows();
  }

  private async pick() {
    const f = this.file.files?.[0];
    this.file.value = '';
    if (!f) return;
    if (f.size > this.host.maxBytes()) {
      this.host.error(`${f.name} is ${fmtBytes(f.size)}: the app takes files up to ${fmtBytes(this.host.maxBytes())} here; score larger ones with verdict score-file`);
      return;
    }
    try {
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(await bytesOf(f));
      } catch {
        throw new Error(`${f.name} is not UTF-8 text`);
      }
      this.update(await this.host.load(f.name, text));
    } catch (e) {
      this.host.error(String((e as Error)?.message ?? e));
    }
  }

  private async run() {
    try {
      this.update(await this.host.start());
    } catch (e) {
      this.host.error(String((e as Error)?.message ?? e));
    }
  }

  private async exportAs(format: 'jsonl' | 'csv') {
    try {
      this.host.exportText(exportName(this.st.name, format), await this.host.exportData(format));
    } catch (e) {
      this.host.error(String((e as Error)?.message ?? e));
    }
  }

  /** Fetches the rows from the start to what is shown (a page at least); one fetch at a time. */
  private async fetchRows(more = false) {
    if (this.fetching) {
      this.refetch = true;
      return;
    }
    this.fetching = true;
    try {
      const want = more ? this.rows.length + PAGE : Math.max(PAGE, this.rows.length);
      const got: DatasetRow[] = [];
      while (got.length < want) {
        const part = await this.host.results(got.length, Math.min(1000, want - got.length));
        got.push(...part);
        if (!part.length) break;
      }
      this.rows = got;
      this.renderTable();
    } catch (e) {
      this.host.error(String((e as Error)?.message ?? e));
    } finally {
      this.fetching = false;
      if (this.refetch) {
        this.refetch = false;
        this.fetchRows();
      }
    }
  }

  render() {
    this.renderControls();
    this.renderProgress();
    this.renderCounts();
    this.renderTable();
  }

  /** The toolbar: what can be done now (the model and the schema change it). */
  renderControls() {
    const st = this.st;
    const running = st.state === 'running';
    const blocked = this.host.blocked();
    const hasResults = st.summary.records > 0;
    replace(this.toolbar,
      h('button.btn.small#dataset-load', { type: 'button', disabled: running, onclick: () => this.file.click(),
        title: 'A JSONL file ({"id": ..., "text": ...} a line) or a CSV file with a text column (and an id column)' }, 'Load file…'),
      running
        ? h('button.btn.small.danger#dataset-stop', { type: 'button', onclick: () => this.host.cancel().catch((e) => this.host.error(String(e?.message ?? e))) }, 'Stop')
        : h('button.btn.small.primary#dataset-run', { type: 'button', disabled: st.state === 'empty' || !!blocked, title: blocked ?? 'Score every record with the schema',
          onclick: () => this.run() }, st.state === 'loaded' ? 'Run' : 'Run again'),
      h('button.btn.small#dataset-export-jsonl', { type: 'button', disabled: !hasResults, onclick: () => this.exportAs('jsonl') }, 'Export JSONL'),
      h('button.btn.small#dataset-export-csv', { type: 'button', disabled: !hasResults, onclick: () => this.exportAs('csv') }, 'Export CSV'),
      h('span.muted.small#dataset-info', null, st.state === 'empty'
        ? 'Score a file of records with the schema: JSONL with {"id", "text"} a line, or CSV with a text column.'
        : `${st.name} · ${st.records.toLocaleString('en-US')} records${st.invalid ? ` (${st.invalid} unreadable: they become error rows)` : ''}${blocked && !running ? ` · ${blocked}` : ''}`));
  }

  private renderProgress() {
    const st = this.st;
    if (st.state === 'empty' || st.state === 'loaded') {
      replace(this.progress);
      this.progress.hidden = true;
      return;
    }
    this.progress.hidden = false;
    const pct = st.total ? Math.min(100, (100 * st.done) / st.total) : 0;
    const label: Record<string, string> = { running: 'Scoring', done: 'Done', stopped: 'Stopped', failed: 'Failed' };
    replace(this.progress,
      h('div.bar-track', { role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': String(st.total), 'aria-valuenow': String(st.done) },
        h('div.bar-fill', { style: { width: `${pct.toFixed(1)}%` } })),
      h('div.small', { class: `small dataset-status-${st.state}`, dataset: { status: st.state } },
        h('b', null, label[st.state] ?? st.state), ' · ', progressText(st),
        st.state !== 'running' && st.elapsed_ms ? ` · ${fmtMs(st.elapsed_ms)}` : '',
        st.error ? h('span.error-text', null, ` · ${st.error}`) : null));
  }

  private renderCounts() {
    const fields = this.st.summary.fields ?? [];
    if (!fields.length) {
      replace(this.counts);
      return;
    }
    replace(this.counts, fields.map((f) => {
      const total = f.values.reduce((a, v) => a + v.count, 0);
      return h('div.dataset-field', { dataset: { field: f.field } },
        h('div.dataset-field-name', null, f.field),
        f.values.slice(0, 12).map((v) => h('div.bar-row', { title: `${v.value}: ${v.count} of ${total}` },
          h('span.bar-label', null, v.value),
          h('div.bar-track', null, h('div.bar-fill', { style: { width: `${total ? (100 * v.count) / total : 0}%` } })),
          h('span.bar-pct', null, String(v.count)))),
        f.values.length > 12 ? h('div.small.muted', null, `and ${f.values.length - 12} more values`) : null);
    }));
  }

  private renderTable() {
    const st = this.st;
    if (!this.rows.length) {
      replace(this.table, st.state === 'empty' || st.state === 'loaded' ? null : h('div.empty', null, st.state === 'running' ? 'The first results appear here.' : 'No results.'));
      return;
    }
    const cols = (st.summary.fields ?? []).map((f) => f.field);
    const more = this.rows.length < st.summary.records;
    replace(this.table,
      h('table.history-table.dataset-table#dataset-table', null,
        h('thead', null, h('tr', null,
          h('th', { scope: 'col' }, 'id'), h('th.num', { scope: 'col' }, 'line'),
          cols.map((c) => h('th', { scope: 'col' }, c)),
          h('th.num', { scope: 'col' }, 'time'))),
        h('tbody', null, this.rows.map((r) => {
          const a = flatten(r.answer);
          return h('tr', { class: r.error ? 'error-row' : '', dataset: { id: r.id } },
            h('td', null, r.id), h('td.num', null, String(r.line)),
            r.error ? h('td.error-text', { colSpan: Math.max(1, cols.length) }, r.error) : cols.map((c) => h('td', null, a[c] ?? '')),
            h('td.num', null, r.error && !r.elapsed_ms ? '' : fmtMs(r.elapsed_ms)));
        }))),
      more ? h('button.btn.small.link#dataset-more', { type: 'button', onclick: () => this.fetchRows(true) },
        `Show more (${this.rows.length.toLocaleString('en-US')} of ${st.summary.records.toLocaleString('en-US')} shown)`) : null);
  }
}
