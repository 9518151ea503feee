// Run history: metrics, comparison with a baseline, JSON and CSV export.
import type { FieldResult, RunRecord, RunSettings } from './types';
import { fmtPct } from './format';

export interface Metric {
  key: string;
  label: string;
  /** Lower is better (times) or higher is better (rates). */
  better: 'lower' | 'higher';
  get: (r: RunRecord) => number | undefined;
}

const pos = (v: number | undefined) => (v != null && isFinite(v) && v > 0 ? v : undefined);

export const METRICS: Metric[] = [
  { key: 'total', label: 'Total', better: 'lower', get: (r) => pos(r.total_ms) },
  { key: 'scorer_prefill_tps', label: 'Scorer prefill', better: 'higher', get: (r) => pos(r.scorer?.timing.prefill_tokens_per_second) },
  { key: 'scorer_first_decision', label: 'First decision', better: 'lower', get: (r) => pos(r.scorer?.timing.first_decision_ms) },
  { key: 'scorer_total', label: 'Scorer total', better: 'lower', get: (r) => pos(r.scorer?.timing.total_ms) },
  { key: 'gen_prefill_tps', label: 'Gen prefill', better: 'higher', get: (r) => pos(r.generator?.timing.prefill_tokens_per_second) },
  { key: 'gen_first_token', label: 'First token', better: 'lower', get: (r) => pos(r.generator?.timing.first_token_ms) },
  { key: 'gen_decode_tps', label: 'Decode', better: 'higher', get: (r) => pos(r.generator?.timing.decode_tokens_per_second) },
  { key: 'gen_total', label: 'Gen total', better: 'lower', get: (r) => pos(r.generator?.timing.total_ms) },
];

/** Percentage change of v against base (null when either is missing). */
export function delta(v: number | undefined, base: number | undefined): number | null {
  if (v == null || base == null || base === 0) return null;
  return ((v - base) / base) * 100;
}

/** Whether a change is an improvement, a regression or noise (within 2%). */
export function verdictOf(m: Metric, pct: number | null): 'better' | 'worse' | 'same' | null {
  if (pct == null) return null;
  if (Math.abs(pct) < 2) return 'same';
  const up = pct > 0;
  return (m.better === 'higher') === up ? 'better' : 'worse';
}

/** How many fields two runs answer the same way (the scorer's answers). */
export function sameAnswers(a: RunRecord, b: RunRecord): { same: number; compared: number } {
  const fa = new Map((a.scorer?.fields ?? []).map((f) => [f.name, f]));
  let same = 0;
  let compared = 0;
  for (const f of b.scorer?.fields ?? []) {
    const g = fa.get(f.name);
    if (!g) continue;
    compared++;
    if (fieldSummaryValue(f) === fieldSummaryValue(g)) same++;
  }
  return { same, compared };
}

function fieldSummaryValue(f: FieldResult): string {
  switch (f.type) {
    case 'choice':
    case 'score':
      return String(f.winner);
    case 'bool':
      return String((f.p_true ?? 0) > 0.5);
    case 'independent':
      return (f.labels ?? []).map((l) => `${l.label}=${l.p_yes > 0.5}`).join(',');
    case 'catalog':
      return (f.names ?? []).join(',');
  }
}

/** One field's answer in a few characters: "high (62.1%)", "true (71.0%)", "late delivery 88.0%; ...". */
export function fieldSummary(f: FieldResult): string {
  switch (f.type) {
    case 'choice':
    case 'score': {
      const c = f.decisions[0]?.candidates.find((c) => c.value === f.winner);
      const e = f.type === 'score' && f.expected_level != null ? `, E=${f.expected_level.toFixed(2)}` : '';
      return `${f.winner} (${fmtPct(c?.probability)}${e})`;
    }
    case 'bool':
      return `${(f.p_true ?? 0) > 0.5} (p_true ${fmtPct(f.p_true)})`;
    case 'independent':
      return (f.labels ?? []).map((l) => `${l.label} ${fmtPct(l.p_yes)}`).join('; ');
    case 'catalog':
      return `${(f.names ?? []).join(', ')} (path ${fmtPct(f.path_probability)})`;
  }
}

export function toJSON(runs: RunRecord[]): string {
  return JSON.stringify({ format: 'verdict-runs', version: 1, exported_ms: Date.now(), runs }, null, 2) + '\n';
}

/** RFC 4180 field quoting. */
export function csvCell(v: unknown): string {
  if (v == null) return '';
  const s = typeof v === 'string' ? v : typeof v === 'number' ? (isFinite(v) ? String(Number(v.toFixed(4))) : '') : JSON.stringify(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export const CSV_COLUMNS: [string, (r: RunRecord) => unknown][] = [
  ['id', (r) => r.id],
  ['started', (r) => new Date(r.started_ms).toISOString()],
  ['model', (r) => r.model],
  ['random_weights', (r) => r.random_weights],
  ['schema', (r) => r.schema_name ?? ''],
  ['input_chars', (r) => r.input.chars],
  ['input_files', (r) => (r.input.files ?? []).map((f) => f.name).join('; ')],
  ['input_media', (r) => (r.input.media ?? []).map((m) => `${m.kind}:${m.name}`).join('; ')],
  ['media_tokens', (r) => (r.input.media ?? []).reduce((n, m) => n + m.tokens, 0)],
  ['media_tower_ms', (r) => r.media?.tower_ms],
  ['input', (r) => r.input.text],
  ['concurrent', (r) => r.concurrent],
  ['total_ms', (r) => r.total_ms],
  ['scorer_status', (r) => r.scorer?.status],
  ['scorer_prompt_tokens', (r) => r.scorer?.timing.prompt_tokens],
  ['scorer_input_preparation_ms', (r) => r.scorer?.timing.input_preparation_ms],
  ['scorer_prefill_ms', (r) => r.scorer?.timing.prefill_ms],
  ['scorer_prefix_reused_tokens', (r) => r.scorer?.timing.prefix_reused_tokens ?? 0],
  ['scorer_prefill_tokens_per_second', (r) => r.scorer?.timing.prefill_tokens_per_second],
  ['scorer_first_decision_ms', (r) => r.scorer?.timing.first_decision_ms],
  ['scorer_total_ms', (r) => r.scorer?.timing.total_ms],
  ['scorer_answer', (r) => r.scorer?.answer],
  ['generator_status', (r) => r.generator?.status],
  ['generator_prompt_tokens', (r) => r.generator?.timing.prompt_tokens],
  ['generator_input_preparation_ms', (r) => r.generator?.timing.input_preparation_ms],
  ['generator_prefill_ms', (r) => r.generator?.timing.prefill_ms],
  ['generator_prefill_tokens_per_second', (r) => r.generator?.timing.prefill_tokens_per_second],
  ['generator_first_token_ms', (r) => r.generator?.timing.first_token_ms],
  ['generator_decode_tokens_per_second', (r) => r.generator?.timing.decode_tokens_per_second],
  ['generator_output_tokens', (r) => r.generator?.timing.output_tokens],
  ['generator_total_ms', (r) => r.generator?.timing.total_ms],
  ['generator_text', (r) => r.generator?.text],
  ['generator_parsed', (r) => r.generator?.parsed],
];

/** Runs as CSV: fixed columns, then one column per field name ("field:NAME"). */
export function toCSV(runs: RunRecord[]): string {
  const fieldNames: string[] = [];
  for (const r of runs) for (const f of r.scorer?.fields ?? []) if (!fieldNames.includes(f.name)) fieldNames.push(f.name);
  const header = [...CSV_COLUMNS.map(([k]) => k), ...fieldNames.map((n) => `field:${n}`)];
  const rows = runs.map((r) => {
    const fields = new Map((r.scorer?.fields ?? []).map((f) => [f.name, f]));
    return [
      ...CSV_COLUMNS.map(([, get]) => csvCell(get(r))),
      ...fieldNames.map((n) => csvCell(fields.has(n) ? fieldSummary(fields.get(n)!) : '')),
    ].join(',');
  });
  return [header.map(csvCell).join(','), ...rows].join('\r\n') + '\r\n';
}

/** A file name for an export: verdict-runs-20261129-140327.csv */
export function exportName(ext: 'json' | 'csv', now = new Date()): string {
  const p = (n: number) => String(n).padStart(2, '0');
  const stamp = `${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}-${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
  return `verdict-runs-${stamp}.${ext}`;
}

/** A run's settings in a few words: "96 tok · temp 0 · top-k 64 · top-p 0.95 · seed 0 · schema prompt · batch 8". */
export function settingsSummary(s: RunSettings | undefined): string {
  if (!s) return '';
  const g = s.generation;
  const sc = s.scorer;
  return [
    `${g.max_tokens} tok`, `temp ${g.temperature}`, `top-k ${g.top_k}`, `top-p ${g.top_p}`, `seed ${g.seed}`, `${g.prompt} prompt`,
    `batch ${sc.branch_batch}`, sc.temperature !== 1 ? `scorer temp ${sc.temperature}` : '', sc.calibration ? `calibration ${sc.calibration}` : '',
  ].filter(Boolean).join(' · ');
}

/** The settings where b differs from a: "max_tokens 96 → 8". */
export function settingsDiff(a: RunSettings | undefined, b: RunSettings | undefined): string[] {
  if (!a || !b) return [];
  const out: string[] = [];
  for (const side of ['generation', 'scorer'] as const) {
    const x = a[side] as unknown as Record<string, unknown>;
    const y = b[side] as unknown as Record<string, unknown>;
    for (const k of new Set([...Object.keys(x), ...Object.keys(y)])) {
      const vx = x[k] ?? '';
      const vy = y[k] ?? '';
      if (vx !== vy) out.push(`${side === 'scorer' ? 'scorer ' : ''}${k} ${vx === '' ? '(none)' : vx} → ${vy === '' ? '(none)' : vy}`);
    }
  }
  return out;
}
