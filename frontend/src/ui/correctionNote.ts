// A field's scoring correction (--normalize) in its card: the method, and
// the uncorrected answer when the correction changed it.
import { fmtPct } from '../format';
import type { Decision, FieldResult } from '../types';
import { h } from './dom';

function top(values: string[], p: number[]): [string, number] {
  let best = 0;
  for (let j = 1; j < p.length; j++) if (p[j] > p[best]) best = j;
  return [values[best], p[best]];
}

/** One decision before and after its correction, for the note's title. */
function line(d: Decision): string {
  const c = d.correction!;
  const vals = d.candidates.map((x) => x.value);
  const ref = c.prior_probabilities ? `prior ${c.prior_probabilities.map((v) => fmtPct(v)).join(' / ')}`
    : `neutral log-likelihoods ${(c.neutral_log_likelihoods ?? []).map((v) => v.toFixed(2)).join(' / ')}`;
  return `${d.name}: raw ${c.raw_probabilities.map((v, j) => `${vals[j]} ${fmtPct(v)}`).join(', ')}; ${ref}`;
}

/** The note, or null for a field no correction touched. */
export function correctionNote(f: FieldResult): HTMLElement | null {
  const ds = (f.decisions ?? []).filter((d) => d.correction);
  if (!ds.length) return null;
  const method = ds[0].correction!.method;
  const changed = ds.filter((d) => top(d.candidates.map((c) => c.value), d.correction!.raw_probabilities)[0] !== top(d.candidates.map((c) => c.value), d.candidates.map((c) => c.probability))[0]);
  const raw = (d: Decision) => top(d.candidates.map((c) => c.value), d.correction!.raw_probabilities);
  const text = changed.length
    ? `${method}-corrected; uncorrected: ${changed.map((d) => `${ds.length > 1 ? d.name + ' ' : ''}${raw(d)[0]} (${fmtPct(raw(d)[1])})`).join(', ')}`
    : `${method}-corrected; same answer uncorrected`;
  return h('span.correction-note', { title: ds.map(line).join('\n') }, text);
}
