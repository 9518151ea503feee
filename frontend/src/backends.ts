// Scoring backends side by side: which ones a run can use, and how far two
// runs' distributions are apart (KL divergence, winner changes).
import type { Backend, Decision, RunRecord, ScorerSettings } from './types';

export interface BackendChoice {
  value: Exclude<Backend, ''>;
  label: string;
}

const ALL: BackendChoice[] = [
  { value: 'json', label: 'json: candidate likelihoods' },
  { value: 'cached', label: 'cached: single-token answer codes' },
  { value: 'catalog', label: 'catalog: choice fields decoded through a token trie too' },
  { value: 'head', label: 'head: the trained decision head' },
];

/** The backends a run can use: head only when a head file is set. */
export function backendChoices(s: ScorerSettings | undefined): BackendChoice[] {
  return ALL.filter((b) => b.value !== 'head' || !!s?.head);
}

/** A run's backend ("" and unset mean json). */
export function backendOf(r: RunRecord | undefined): Exclude<Backend, ''> {
  return (r?.settings?.scorer?.backend || 'json') as Exclude<Backend, ''>;
}

/** KL(p ‖ q) in nats; q is floored at 1e-12 as the engine's scorer.KL does. */
export function kl(p: number[], q: number[]): number {
  let d = 0;
  for (let i = 0; i < p.length; i++) if (p[i] > 0) d += p[i] * Math.log(p[i] / Math.max(q[i] ?? 0, 1e-12));
  return Math.max(d, 0);
}

export interface WinnerChange {
  field: string;
  decision: string;
  from: string;
  to: string;
}

export interface DistributionDiff {
  /** Decisions found in both runs with the same candidates. */
  compared: number;
  meanKL: number;
  maxKL: number;
  /** The decision whose distribution moved the most. */
  maxDecision: string;
  changes: WinnerChange[];
}

function winner(d: Decision): string {
  let best = d.candidates[0];
  for (const c of d.candidates) if (c.probability > best.probability) best = c;
  return best?.value ?? '';
}

/** How run's distributions differ from base's: KL(base ‖ run) per decision and the winners that changed. */
export function distributionDiff(base: RunRecord, run: RunRecord): DistributionDiff | null {
  const other = new Map<string, Decision>();
  for (const f of run.scorer?.fields ?? []) for (const d of f.decisions ?? []) other.set(`${f.name}\u0000${d.name}`, d);
  const out: DistributionDiff = { compared: 0, meanKL: 0, maxKL: 0, maxDecision: '', changes: [] };
  for (const f of base.scorer?.fields ?? []) {
    for (const d of f.decisions ?? []) {
      const o = other.get(`${f.name}\u0000${d.name}`);
      if (!o || o.candidates.length !== d.candidates.length) continue;
      const idx = new Map(o.candidates.map((c, j) => [c.value, j]));
      if (!d.candidates.every((c) => idx.has(c.value))) continue;
      const p = d.candidates.map((c) => c.probability);
      const q = d.candidates.map((c) => o.candidates[idx.get(c.value)!].probability);
      const v = kl(p, q);
      out.compared++;
      out.meanKL += v;
      if (v > out.maxKL || !out.maxDecision) {
        out.maxKL = Math.max(out.maxKL, v);
        out.maxDecision = d.name;
      }
      const a = winner(d);
      const b = winner(o);
      if (a !== b) out.changes.push({ field: f.name, decision: d.name, from: a, to: b });
    }
  }
  if (!out.compared) return null;
  out.meanKL /= out.compared;
  return out;
}

/** A diff in a few words: "KL 0.031 (max 0.210) · 2 of 8 winners changed". */
export function diffSummary(d: DistributionDiff): string {
  const w = d.changes.length ? `${d.changes.length} of ${d.compared} winners changed` : `all ${d.compared} winners same`;
  return `KL ${d.meanKL.toFixed(3)} (max ${d.maxKL.toFixed(3)}) · ${w}`;
}
