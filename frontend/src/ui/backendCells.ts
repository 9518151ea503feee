// The history's backend parts: a run's backend, its distributions against
// the baseline's (KL, winner changes) and repeating its scorer side with
// another backend.
import { backendOf, diffSummary, distributionDiff, type BackendChoice } from '../backends';
import type { RunRecord } from '../types';
import { h } from './dom';

export interface RepeatHost {
  /** The backends a repeat can use. */
  backends(): BackendChoice[];
  repeat(id: string, backend: string): void;
}

/** The run's backend and correction as a tag: "cached", "json · pmi". */
export function backendTag(r: RunRecord): HTMLElement {
  const n = r.settings?.scorer?.normalize;
  const text = backendOf(r) + (n && n !== 'none' ? ` · ${n}` : '');
  return h('span.tag.backend-tag', { title: `scorer backend ${backendOf(r)}${n && n !== 'none' ? `, corrected by ${n}` : ''}` }, text);
}

/** The Distributions cell: how far r's distributions are from base's. */
export function distributionCell(base: RunRecord | undefined, r: RunRecord): HTMLElement {
  if (!base) return h('td.dist-cell', null, '—');
  if (base.id === r.id) return h('td.dist-cell', null, 'baseline');
  const d = distributionDiff(base, r);
  if (!d) return h('td.dist-cell.muted', { title: 'no decisions in common with the baseline' }, '—');
  const changes = d.changes.map((c) => `${c.decision}: ${c.from} → ${c.to}`);
  const title = [`KL(baseline ‖ run) over ${d.compared} decisions: mean ${d.meanKL.toFixed(4)}, max ${d.maxKL.toFixed(4)} nats (${d.maxDecision})`,
    ...(changes.length ? ['winners changed:', ...changes] : ['no winner changed'])].join('\n');
  return h('td.dist-cell', { title }, h('div', null, diffSummary(d)),
    d.changes.length ? h('div.small.winner-changes', null, changes.slice(0, 3).join('; ') + (changes.length > 3 ? '; …' : '')) : null);
}

/** A "Repeat with" menu: the run's scorer side again under another backend. */
export function repeatControl(host: RepeatHost, r: RunRecord): HTMLElement | null {
  if (!r.scorer || !r.schema) return null;
  const cur = backendOf(r);
  const others = host.backends().filter((b) => b.value !== cur);
  if (!others.length) return null;
  const sel = h('select.repeat-backend', { 'aria-label': `Repeat ${r.id} with another backend`, title: 'run the scorer again on the same input, schema and settings with another backend',
    onchange: () => {
      if (sel.value) host.repeat(r.id, sel.value);
      sel.value = '';
    } },
  h('option', { value: '' }, 'Repeat with…'),
  others.map((b) => h('option', { value: b.value, title: b.label }, b.value)));
  return sel;
}
