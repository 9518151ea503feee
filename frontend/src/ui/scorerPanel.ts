// The scorer panel: a live distribution for every field, filled in as each
// field finishes.
import { fmtMass, fmtMs, fmtPct } from '../format';
import type { LiveRun } from '../run';
import { isFinished, pendingLabel, scorerStage } from '../run';
import type { FieldResult } from '../types';
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
  }
}

/** The probability of the scorer's answer ("62.0%"; for labels, how many are yes). */
export function winnerP(f: FieldResult): string {
  const bars = barsOf(f);
  if (f.type === 'independent') return `${bars.filter((b) => b.winner).length}/${bars.length} yes`;
  const w = bars.find((b) => b.winner);
  return w ? fmtPct(w.p) : '—';
}

export class ScorerPanel {
  readonly el: HTMLElement;
  private head: HTMLElement;
  private list: HTMLElement;
  private foot: HTMLElement;
  private cards = new Map<string, HTMLElement>();
  private shownRun = '';
  private filled = new Set<string>();

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
      if (this.filled.has(name)) continue;
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
      if (win) win.textContent = pendingLabel(sc);
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

  private fill(card: HTMLElement, f: FieldResult) {
    card.classList.remove('pending');
    card.classList.add('filled');
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
    const merged = f.decisions.some((d) => d.boundary) ? h('span.tag.warn', { title: 'the tokenizer merged the key and value; the schema was fixed up' }, 'boundary fix') : null;
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
        h('span', { title: 'from the start of the scorer to this field\'s last decision' }, 'done at ', h('b', null, fmtMs(f.elapsed_ms)))));
  }
}
