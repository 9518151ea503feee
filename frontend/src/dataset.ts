// The dataset service's types and calls, and the pure helpers of the
// Dataset tab: flattening answers into columns, progress text.
import type { Transport } from './transport';

export interface ValueCount { value: string; count: number }
export interface FieldCount { field: string; values: ValueCount[] }
export interface DatasetSummary { records: number; errors: number; fields: FieldCount[] | null }

export type DatasetStatus = 'empty' | 'loaded' | 'running' | 'done' | 'stopped' | 'failed';

export interface DatasetState {
  state: DatasetStatus;
  name?: string;
  format?: string;
  records: number;
  invalid: number;
  done: number;
  errors: number;
  total: number;
  rate: number;
  elapsed_ms: number;
  left_ms: number;
  error?: string;
  summary: DatasetSummary;
}

export interface DatasetRow {
  id: string;
  line: number;
  answer?: unknown;
  error?: string;
  elapsed_ms: number;
}

export const DatasetEvent = 'dataset:state';

/** The Go Dataset service. */
export function datasetApi(t: Transport) {
  return {
    load: (name: string, content: string) => t.call<DatasetState>('Dataset', 'Load', name, content),
    start: (schema: unknown) => t.call<DatasetState>('Dataset', 'Start', schema),
    cancel: () => t.call<void>('Dataset', 'Cancel'),
    state: () => t.call<DatasetState>('Dataset', 'State'),
    results: (offset: number, limit: number) => t.call<DatasetRow[]>('Dataset', 'Results', offset, limit),
    exportData: (format: 'jsonl' | 'csv') => t.call<string>('Dataset', 'Export', format),
    clear: () => t.call<void>('Dataset', 'Clear'),
  };
}

/** An answer object flattened as the Go side counts it: a field is its
 * name, a label of an object field "field.label", a list its entries
 * joined with ", ". */
export function flatten(answer: unknown, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  if (!answer || typeof answer !== 'object' || Array.isArray(answer)) return out;
  for (const [k, v] of Object.entries(answer as Record<string, unknown>)) {
    const name = prefix + k;
    if (Array.isArray(v)) out[name] = v.map(String).join(', ');
    else if (v && typeof v === 'object') Object.assign(out, flatten(v, name + '.'));
    else out[name] = String(v);
  }
  return out;
}

/** A duration to go: "12 s", "3 min 5 s", "1 h 2 min". */
export function fmtLeft(ms: number): string {
  if (!isFinite(ms) || ms <= 0) return '';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The progress line: "42 of 100 records · 3 errors · 5.1/s · about 12 s left". */
export function progressText(st: DatasetState): string {
  const parts = [`${st.done.toLocaleString('en-US')} of ${st.total.toLocaleString('en-US')} records`];
  if (st.errors) parts.push(`${st.errors} error${st.errors === 1 ? '' : 's'}`);
  if (st.rate > 0) parts.push(`${st.rate < 10 ? st.rate.toFixed(1) : Math.round(st.rate)}/s`);
  const left = st.state === 'running' ? fmtLeft(st.left_ms) : '';
  if (left) parts.push(`about ${left} left`);
  return parts.join(' · ');
}

/** An export's file name: "tickets-results.csv" for tickets.jsonl. */
export function exportName(name: string | undefined, format: 'jsonl' | 'csv'): string {
  const base = (name || 'dataset').replace(/\.[^.]*$/, '') || 'dataset';
  return `${base}-results.${format}`;
}
