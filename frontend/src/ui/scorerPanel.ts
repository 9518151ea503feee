// The scorer panel: a live distribution for every field, filled in as each
// field finishes.
import { fmtMass, fmtMs, fmtPct } from '../format';
import type { LiveCatalog, LiveRun } from '../run';
import { isFinished, pendingLabel, scorerStage } from '../run';
import type { CatalogStep, CatalogTiming, FieldResult, TokenProb } from '../types';
import { correctionNote } from './correctionNote';
import { h, replace } from './dom';
import { statusPill } from './common';

export interface ScorerPanelHost {
  stop(side: 'scorer'): void;
  /** The compact view (one line per field) was switched on or off. */
  compactChanged?(compact: boolean): void;
}

interface Bar {
  label: string;
  p: number;
  winner: boolean;
  title?: string;
}

/** The bars of a field: options in schema order, the winner marked. */
export function barsOf(f: FieldResult): Bar[] {
  switch (f.type) {
    case 'choice':
    case 'score': {
      const cands = f.decisions[0]?.candidates ?? [];
      return cands.map((c) => ({ label: c.value, p: c.probability, winner: c.value === f.winner, title: `log-likelihood ${c.log_likelihood.toFixed(3)}` }));
    }
    case 'bool': {
      const p = f.p_true ?? 0;
      return [
        { label: 'true', p, winner: p > 0.5 },
        { label: 'false', p: 1 - p, winner: p <= 0.5 },
      ];
    }
    case 'independent':
      return (f.labels ?? []).map((l) => ({ label: l.label, p: l.p_yes, winner: l.p_yes > 0.5, title: `P(yes); confidence ${fmtPct(l.confidence)}` }));
    case 'catalog':
      return []; // a catalog card shows its names and steps instead
  }
}

export function headline(f: FieldResult): string {
  switch (f.type) {
    case 'choice':
      return String(f.winner);
    case 'score':
      return `${f.winner}${f.expected_level != null ? `  (E = ${f.expected_level.toFixed(2)})` : ''}`;
    case 'bool':
      return String((f.p_true ?? 0) > 0.5);
    case 'independent': {
      const yes = (f.labels ?? []).filter((l) => l.p_yes > 0.5).map((l) => l.label);
      return yes.length ? yes.join(', ') : 'none';
    }
    case 'catalog':
      return (f.names ?? []).join(', ') || 'none';
  }
}

/** The probability of the scorer's answer ("62.0%"; for labels, how many are yes). */
export function winnerP(f: FieldResult): string {
  const bars = barsOf(f);
  if (f.type === 'independent') return `${bars.filter((b) => b.winner).length}/${bars.length} yes`;
  if (f.type === 'catalog') return fmtPct(f.path_probability);
  const w = bars.find((b) => b.winner);
  return w ? fmtPct(w.p) : '—';
}

/** How many of a step's legal tokens a step row shows before its "+N more". */
export const STEP_TOKENS = 5;

/** Whether a field was answered by the trie decoder (a catalog, or a choice under the catalog backend). */
export function trieDecoded(f: FieldResult): boolean {
  return f.type === 'catalog' || !!f.steps?.length || f.decisions.some((d) => d.boundary === 'catalog');
}

/** A token as a step row shows it: its text with spaces and newlines visible, or its id. */
export function tokenText(t: TokenProb | undefined, id?: number): string {
  if (!t) return id != null ? `#${id}` : '?';
  if (!t.text) return `#${t.id}`;
  return t.text.replace(/\n/g, '⏎').replace(/ /g, '␣');
}

/** Milliseconds per token in two significant digits ("0.0041", "1.6", "120"). */
export function msPerToken(v: number | undefined): string {
  if (v == null || !isFinite(v)) return '—';
  return `${Number(v.toPrecision(2))} ms/token`;
}

/** The timing line of a trie decode: "sparse head 0.004 ms/token vs dense 1.6 ms/token (400× less), decode 12 ms/token". */
export function catalogTimingLine(t: CatalogTiming): string {
  let s = `sparse head ${msPerToken(t.sparse_head_ms_per_token)}`;
  const d = t.dense_head_ms_per_token;
  if (d != null && d > 0) {
    s += ` vs dense ${msPerToken(d)}`;
    if (t.sparse_head_ms_per_token > 0) {
      const r = d / t.sparse_head_ms_per_token;
      s += ` (${r >= 10 ? Math.round(r) : r.toFixed(1)}× less)`;
    }
  } else s += ' (dense head not timed)';
  return `${s}, decode ${msPerToken(t.ms_per_token)}`;
}

/**
 * One step of a trie decode: the chosen token, the legal-set size, and the
 * most probable legal tokens as bars, the first STEP_TOKENS shown and the
 * rest behind a "+N more" toggle.
 */
export function stepRow(st: CatalogStep, index: number): HTMLElement {
  const chosen = st.tokens.find((t) => t.id === st.chosen);
  const tok = (t: TokenProb) => h('span', { class: `cat-tok${t.id === st.chosen ? ' chosen' : ''}`, title: `token ${t.id}: ${fmtPct(t.p, 2)}`, dataset: { id: String(t.id), p: t.p.toFixed(6) } },
    h('span.cat-tok-text', null, tokenText(t)),
    h('span.cat-tok-bar', null, h('span.cat-tok-fill', { style: { width: `${Math.max(0, Math.min(1, t.p)) * 100}%` } })),
    h('span.cat-tok-p', null, fmtPct(t.p)));
  const first = st.tokens.slice(0, STEP_TOKENS).map(tok);
  const rest = st.tokens.slice(STEP_TOKENS);
  const more = h('span.cat-more', { hidden: true }, rest.map(tok));
  const toggle = rest.length
    ? h('button.btn.link.small.cat-more-toggle', { type: 'button', 'aria-expanded': 'false', onclick: () => {
      more.hidden = !more.hidden;
      toggle!.setAttribute('aria-expanded', String(!more.hidden));
      toggle!.textContent = more.hidden ? `+${rest.length} more` : 'fewer';
    } }, `+${rest.length} more`)
    : null;
  const unseen = st.legal - st.tokens.length;
  return h('div.cat-step', { dataset: { step: String(index), legal: String(st.legal) } },
    h('span.cat-chosen', { title: 'the chosen token' }, tokenText(chosen, st.chosen)),
    h('span.cat-legal', { title: 'the size of the legal set at this step' }, `${st.legal} legal`),
    h('span.cat-toks', null, first, more, toggle, unseen > 0 ? h('span.muted.small', null, ` (${unseen} not listed)`) : null));
}

/** A trie decode's names as chips, in order. */
function nameChips(names: string[]): HTMLElement {
  return h('ol.cat-names', null, names.map((n, i) => h('li.cat-name', { dataset: { index: String(i) } }, n)));
}

export class ScorerPanel {
  readonly el: HTMLElement;
  private head: HTMLElement;
  private list: HTMLElement;
  private foot: HTMLElement;
  private cards = new Map<string, HTMLElement>();
  private shownRun = '';
  private filled = new Set<string>();
  /** What a filled trie-decoded card shows: refilled when the run's record brings a later result (its final done-at time). */
  private catalogShown = new Map<string, string>();

  private compact: boolean;

  constructor(private host: ScorerPanelHost, compact = false) {
    this.compact = compact;
    this.head = h('header.card-head');
    this.list = h('div.dists', { 'aria-live': 'polite' });
    this.list.classList.toggle('compact', compact);
    this.foot = h('footer.card-foot.small.muted');
    this.el = h('section.card.side#scorer-panel', { 'aria-label': 'Scorer' }, this.head, this.list, this.foot);
  }

  render(run: LiveRun | null, fields: { name: string; type: string }[]) {
    const sc = run?.scorer;
    // The head is rebuilt only when it changes: a Stop button replaced under the pointer loses the click.
    const headKey = sc ? JSON.stringify([sc.status, sc.done, sc.total || fields.length, scorerStage(run), this.compact]) : run ? '-' : String(this.compact);
    if (headKey !== this.headKey) {
      this.headKey = headKey;
      this.renderHead(run, fields);
    }
    this.renderBody(run, fields);
  }

  private headKey: string | null = null;

  private renderHead(run: LiveRun | null, fields: { name: string; type: string }[]) {
    const sc = run?.scorer;
    const stop = h('button.btn.small.stop', { type: 'button', title: 'Stop the scorer (Esc stops both)', disabled: !sc || isFinished(sc.status), onclick: () => this.host.stop('scorer') }, 'Stop');
    replace(this.head,
      h('h2', null, 'Scorer', h('span.sub', null, ' decision distributions')),
      h('div.head-actions', null,
        sc ? statusPill(sc.status) : null,
        sc ? h('span.progress#scorer-progress', null, `${sc.done}/${sc.total || fields.length} fields`) : null,
        h('button.btn.small#compact-toggle', { type: 'button', 'aria-pressed': String(this.compact), title: 'One line per field: the answer, its probability and confidence',
          onclick: () => this.setCompact(!this.compact, run, fields) }, 'Compact'),
        stop),
      sc ? h('div.stage.small.muted#scorer-stage', { 'aria-live': 'polite' }, scorerStage(run)) : null);
  }

  private setCompact(on: boolean, run: LiveRun | null, fields: { name: string; type: string }[]) {
    this.compact = on;
    this.list.classList.toggle('compact', on);
    this.host.compactChanged?.(on);
    this.headKey = null;
    this.render(run, fields);
  }

  private renderBody(run: LiveRun | null, fields: { name: string; type: string }[]) {
    const sc = run?.scorer;

    if (!run || !sc) {
      this.shownRun = '';
      this.cards.clear();
      this.filled.clear();
      this.catalogShown.clear();
      replace(this.list, h('div.empty', null,
        run ? 'The scorer is not part of this run.' : 'Run a request to see the probability of every answer, field by field.'));
      replace(this.foot);
      this.foot.hidden = true;
      return;
    }
    if (this.shownRun !== run.id) {
      this.shownRun = run.id;
      this.cards.clear();
      this.filled.clear();
      this.catalogShown.clear();
      replace(this.list);
      for (const f of fields) {
        const card = h('article.dist.pending', { dataset: { field: f.name } },
          h('div.dist-head', null, h('span.dist-name', null, f.name), h('span.tag', null, f.type), h('span.dist-win.muted', null, 'waiting…')),
          h('div.dist-bars', null, h('div.skeleton')));
        this.cards.set(f.name, card);
        this.list.appendChild(card);
      }
    }
    for (const [name, f] of sc.fields) {
      if (f.names) { // a trie decode: its live result has no done-at time yet
        const key = JSON.stringify(f);
        if (this.catalogShown.get(name) === key) continue;
        this.catalogShown.set(name, key);
      } else if (this.filled.has(name)) continue;
      let card = this.cards.get(name);
      if (!card) {
        card = h('article.dist', { dataset: { field: name } });
        this.cards.set(name, card);
        this.list.appendChild(card);
      }
      this.fill(card, f);
      this.filled.add(name);
    }
    // Cards without a result wait while the scorer runs, and say why once it is over.
    const over = isFinished(sc.status);
    for (const [name, card] of this.cards) {
      if (this.filled.has(name)) continue;
      card.classList.toggle('pending', !over);
      card.classList.toggle('unscored', over);
      const win = card.querySelector('.dist-win');
      const live = sc.catalog?.get(name);
      if (win) win.textContent = live && !over ? (live.names.join(', ') || 'decoding…') : pendingLabel(sc);
      if (live) this.fillLive(card, live);
      if (over) card.querySelector('.skeleton')?.remove();
    }
    if (sc.error && sc.status === 'error') {
      if (!this.list.querySelector('.side-error')) this.list.prepend(h('div.side-error', { role: 'alert' }, sc.error));
    }
    const rec = run.record?.scorer;
    this.foot.hidden = false;
    replace(this.foot,
      rec?.calibration ? h('span', null, rec.calibration.applied ? '✓ calibrated: ' : 'uncalibrated: ', rec.calibration.detail.replace(/^uncalibrated: /, '')) : null,
      h('span', null, 'Confidence = 1 − normalised entropy; allowed mass = probability on the allowed values. Neither is an accuracy estimate.'),
      h('span', null, 'Fields are scored independently: no field sees another\'s answer.'));
  }

  /** A catalog card while its decode runs: the names emitted so far and the latest step. */
  private fillLive(card: HTMLElement, live: LiveCatalog) {
    const key = String(live.steps.length);
    if (card.dataset.liveSteps === key) return;
    card.dataset.liveSteps = key;
    card.classList.add('live');
    const bars = card.querySelector('.dist-bars');
    if (!bars) return;
    const last = live.steps[live.steps.length - 1];
    replace(bars,
      h('div.cat-live', null,
        live.names.length ? nameChips(live.names) : h('span.muted.small', null, 'no name emitted yet'),
        h('span.small.muted.cat-live-steps', null, `${live.steps.length} step${live.steps.length === 1 ? '' : 's'} decoded`)),
      last ? h('div.cat-steps', null, stepRow(last, live.steps.length - 1)) : null);
  }

  private fill(card: HTMLElement, f: FieldResult) {
    card.classList.remove('pending', 'live');
    card.classList.add('filled');
    if (f.type === 'catalog') {
      this.fillCatalog(card, f);
      return;
    }
    const bars = barsOf(f);
    const rows = bars.map((b) => {
      const fill = h('div.bar-fill', { style: { width: '0%' } });
      const row = h('div.bar-row', { class: `bar-row${b.winner ? ' winner' : ''}`, title: b.title ?? '', dataset: { value: b.label, p: b.p.toFixed(6) } },
        h('span.bar-label', null, b.label),
        h('div.bar-track', null, fill),
        h('span.bar-pct', null, fmtPct(b.p)));
      // Let the bar grow from zero.
      const raf = typeof requestAnimationFrame === 'function' ? requestAnimationFrame : (fn: () => void) => setTimeout(fn, 0);
      raf(() => (fill.style.width = `${Math.max(0, Math.min(1, b.p)) * 100}%`));
      return row;
    });
    const merged = f.decisions.some((d) => d.boundary && d.boundary !== 'catalog') ? h('span.tag.warn', { title: 'the tokenizer merged the key and value; the schema was fixed up' }, 'boundary fix') : null;
    replace(card,
      h('div.dist-head', null,
        h('span.dist-name', null, f.name),
        h('span.tag', null, f.type),
        merged,
        h('span.dist-win', { title: 'the answer the scorer gives' }, headline(f)),
        h('span.dist-p', { title: 'its probability · confidence' }, `${winnerP(f)} · conf ${fmtPct(f.confidence)}`)),
      h('div.dist-bars', null, rows),
      h('div.dist-meta', null,
        h('span', { title: '1 − normalised entropy: how concentrated the distribution is (not how often it is right)' }, 'confidence ', h('b', null, fmtPct(f.confidence))),
        h('span', { title: 'the model\'s total probability on the allowed values' }, 'allowed mass ', h('b', null, fmtMass(f.allowed_token_mass))),
        f.type === 'score' && f.expected_level != null ? h('span', null, 'expected level ', h('b', null, f.expected_level.toFixed(2))) : null,
        trieDecoded(f) ? h('span.trie-note', { title: 'the catalog backend: the options decoded through their token trie; a candidate "a | b" is options that share a subtree' },
          `decoded through the trie${f.steps?.length ? ` (${f.steps.length} step${f.steps.length === 1 ? '' : 's'})` : ''}`) : null,
        correctionNote(f),
        h('span', { title: 'from the start of the scorer to this field\'s last decision' }, 'done at ', h('b', null, fmtMs(f.elapsed_ms)))));
  }

  /** A finished catalog field: its names in order, a row per step, the path probability and the heads' timing. */
  private fillCatalog(card: HTMLElement, f: FieldResult) {
    const names = f.names ?? [];
    const steps = f.steps ?? [];
    const t = f.catalog_timing;
    replace(card,
      h('div.dist-head', null,
        h('span.dist-name', null, f.name),
        h('span.tag', null, f.type),
        h('span.dist-win', { title: 'the entries the scorer names, in order' }, headline(f)),
        h('span.dist-p', { title: 'the path probability · confidence' }, `${winnerP(f)} · conf ${fmtPct(f.confidence)}`)),
      h('div.dist-bars.cat-body', null,
        nameChips(names),
        h('div.cat-steps', null, steps.map((st, i) => stepRow(st, i)))),
      h('div.dist-meta', null,
        h('span', { title: 'the product of the chosen tokens\' probabilities, each over its legal set' }, 'path probability ', h('b', null, fmtPct(f.path_probability, 2))),
        h('span', { title: '1 − normalised entropy of the steps (not how often it is right)' }, 'confidence ', h('b', null, fmtPct(f.confidence))),
        h('span', null, 'steps ', h('b', null, String(steps.length))),
        t ? h('span', null, 'largest legal set ', h('b', null, String(t.max_legal))) : null,
        h('span', { title: 'from the start of the scorer to the end of this decode' }, 'done at ', h('b', null, fmtMs(f.elapsed_ms)))),
      t ? h('div.cat-timing.small', { title: `${t.tokens} tokens decoded; prefill ${fmtMs(t.prefill_ms)}${t.dense_max_relative_gap != null ? `; dense head's largest relative gap ${t.dense_max_relative_gap.toExponential(1)}` : ''}` }, catalogTimingLine(t)) : null);
  }
}
