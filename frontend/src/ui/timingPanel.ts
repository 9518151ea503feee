// The timing breakdown of both sides: a waterfall on one time axis and a
// table of the numbers.
import { fmtMs, fmtPrefillRate, fmtPrefillTokens, fmtRate } from '../format';
import type { LiveRun } from '../run';
import { isFinished, towerItems } from '../run';
import type { SideTiming } from '../types';
import { generatorLane, mediaLane, scorerLane, ticks, type Lane } from '../waterfall';
import { h, replace } from './dom';

const CONTENTION = 'Both sides ran at the same time on the same compute device: each side\'s timings include contention with the other.';

function liveTiming(t: SideTiming | undefined, finished: boolean, elapsed: number): SideTiming | undefined {
  if (!t) return undefined;
  if (finished) return t;
  return { ...t, total_ms: Math.max(t.total_ms, elapsed - t.start_ms) };
}

export class TimingPanel {
  readonly el: HTMLElement;
  private body: HTMLElement;

  constructor() {
    this.body = h('div.timing-body');
    this.el = h('section.card#timing', { 'aria-label': 'Timing' }, h('header.card-head', null, h('h2', null, 'Timing')), this.body);
  }

  render(run: LiveRun | null) {
    if (!run) {
      replace(this.body, h('div.empty', null, 'Input preparation, prefill, first token, first decision and decode speed of both sides appear here.'));
      return;
    }
    const el = run.elapsedMs;
    const sT = liveTiming(run.scorer?.timing, isFinished(run.scorer?.status), el);
    const gT = liveTiming(run.generator?.timing, isFinished(run.generator?.status), el);
    const lanes: Lane[] = [];
    if (run.media) lanes.push(mediaLane(run.media, run.media.status === 'preparing' ? el : 0));
    if (sT) lanes.push(withRunning(scorerLane(sT), !isFinished(run.scorer?.status), sT));
    if (gT) lanes.push(withRunning(generatorLane(gT), !isFinished(run.generator?.status), gT));
    const span = Math.max(1, el, ...lanes.map((l) => l.end));
    const pct = (v: number) => `${(Math.max(0, v) / span) * 100}%`;
    const axis = h('div.wf-axis', null, ticks(span).map((t) => h('span.wf-tick', { class: t > 0.85 * span ? 'wf-tick end' : 'wf-tick', style: { left: pct(t) } }, fmtMs(t))));
    const laneEls = lanes.map((l) =>
      h('div.wf-lane', { dataset: { side: l.side } },
        h('span.wf-name', null, l.side === 'scorer' ? 'Scorer' : l.side === 'towers' ? 'Towers' : 'Generation'),
        h('div.wf-track', null,
          l.segments.map((s) => h('div.wf-seg', { class: `wf-seg wf-${s.kind}`, title: `${s.label}: ${fmtMs(s.end - s.start)} (${fmtMs(s.start)} → ${fmtMs(s.end)})`, style: { left: pct(s.start), width: pct(s.end - s.start) } })),
          l.markers.map((m) => h('div.wf-mark', { class: `wf-mark wf-${m.kind}${m.at > 0.6 * span ? ' flip' : ''}`, title: `${m.label}: ${fmtMs(m.sideMs)} after the side started (${fmtMs(m.at)} into the run)`, style: { left: pct(m.at) } }, h('span', null, `${m.label} ${fmtMs(m.sideMs)}`))))));
    const legend = h('div.wf-legend.small', null,
      [['prep', 'input preparation'], ['prefill', 'prefill'], ['branches', 'branch batches'], ['decode', 'decode'], ['wait', 'running / other']].map(([k, label]) =>
        h('span', null, h('i', { class: `sw wf-${k}` }), label)));

    const m = run.media;
    const items = towerItems(m);
    const towers = m ? (m.status === 'done' ? `${fmtMs(m.tower_ms)} · shared` : m.status === 'preparing' ? `running (${m.done}/${m.total})` : m.error ?? m.status) + (items ? ` · ${items}` : '') : null;
    const row = (label: string, s: string | null, g: string | null, help = '') =>
      h('tr', null, h('th', { scope: 'row', title: help }, label), h('td', null, s ?? '—'), h('td', null, g ?? '—'));
    const S = run.scorer ? sT : undefined;
    const G = run.generator ? gT : undefined;
    const table = h('table.timing-table#timing-table', null,
      h('thead', null, h('tr', null, h('th', null, ''), h('th', { scope: 'col' }, 'Scorer'), h('th', { scope: 'col' }, 'Generation'))),
      h('tbody', null,
        row('Started at', S ? fmtMs(S.start_ms) : null, G ? fmtMs(G.start_ms) : null, 'from the start of the run'),
        row('Input preparation', S ? fmtMs(S.input_preparation_ms) : null, G ? fmtMs(G.input_preparation_ms) : null, m ? 'the wait for the media towers, then prompt building, tokenizing, schema compilation' : 'prompt building, tokenizing, schema compilation'),
        m ? row('Media towers', S ? towers : null, G ? towers : null, `${m.images} image(s) or frame(s)${m.audio ? ' and audio' : ''}: ${m.soft_tokens.toLocaleString('en-US')} soft tokens, computed once for both sides`) : null,
        row('Prefill', S ? `${fmtMs(S.prefill_ms)} · ${fmtPrefillTokens(S)}` : null, G ? `${fmtMs(G.prefill_ms)} · ${fmtPrefillTokens(G)}` : null,
          'the prompt\'s tokens; reused ones come from an earlier request\'s prefix and cost nothing'),
        row('Prefill speed', S ? fmtPrefillRate(S) : null, G ? fmtPrefillRate(G) : null, 'over the tokens the prefill computed'),
        row('First token', null, G?.first_token_ms ? fmtMs(G.first_token_ms) : null, 'from the side\'s start'),
        row('First decision', S?.first_decision_ms ? fmtMs(S.first_decision_ms) : null, null, 'first completed decision, from the side\'s start'),
        row('Branch batches', S?.branch_batches_ms?.length ? `${S.branch_batches_ms.length} · ${S.branch_batches_ms.map((b) => fmtMs(b)).join(' + ')}` : null, null),
        row('Decode speed', null, G?.decode_tokens_per_second ? `${fmtRate(G.decode_tokens_per_second)} · ${G.output_tokens ?? 0} tok` : null, 'tokens after the first'),
        row('Total', S ? fmtMs(S.total_ms) : null, G ? fmtMs(G.total_ms) : null, 'from the side\'s start')));
    replace(this.body,
      run.concurrent ? h('p.note#contention', { role: 'note' }, '⚠ ', CONTENTION) : null,
      m ? h('p.note#media-note', { role: 'note' }, h('b', null, 'Media: '), m.note, m.tower_ms ? ` Towers: ${fmtMs(m.tower_ms)} for ${m.soft_tokens.toLocaleString('en-US')} soft tokens.` : '') : null,
      h('div.waterfall#waterfall', null, axis, laneEls),
      legend,
      table);
  }
}

/** A side still running gets a striped segment up to now. */
function withRunning(l: Lane, running: boolean, t: SideTiming): Lane {
  if (!running) return l;
  const last = l.segments.reduce((m, s) => Math.max(m, s.end), t.start_ms);
  const end = t.start_ms + t.total_ms;
  const segs = l.segments.filter((s) => s.kind !== 'wait');
  if (end > last) segs.push({ kind: 'wait', label: 'running', start: last, end });
  return { ...l, segments: segs, end: Math.max(l.end, end) };
}
