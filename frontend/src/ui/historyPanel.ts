// The run history: every finished run with its key numbers, compared with a
// chosen baseline, and exported as JSON or CSV.
import { ellipsis, fmtDelta, fmtMs, fmtRate, fmtTime } from '../format';
import { METRICS, delta, exportName, sameAnswers, settingsDiff, settingsSummary, toCSV, toJSON, verdictOf } from '../history';
import type { RunRecord } from '../types';
import { h, replace } from './dom';
import { backendTag, distributionCell, repeatControl, type RepeatHost } from './backendCells';

export interface HistoryHost extends Partial<RepeatHost> {
  history(): RunRecord[];
  baselineId(): string | null;
  currentId(): string | null;
  setBaseline(id: string | null): void;
  open(id: string): void;
  remove(id: string): void;
  clear(): void;
  exportText(name: string, content: string): void;
}

const SHOWN = ['total', 'scorer_first_decision', 'scorer_prefill_tps', 'gen_first_token', 'gen_decode_tps'];

export class HistoryPanel {
  readonly el: HTMLElement;

  constructor(private host: HistoryHost) {
    this.el = h('div.history#history');
  }

  render() {
    const runs = this.host.history().slice().reverse();
    const base = this.host.history().find((r) => r.id === this.host.baselineId());
    const all = this.host.history();
    const toolbar = h('div.toolbar', null,
      h('button.btn.small#export-json', { type: 'button', disabled: !all.length, onclick: () => this.host.exportText(exportName('json'), toJSON(all)) }, 'Export JSON'),
      h('button.btn.small#export-csv', { type: 'button', disabled: !all.length, onclick: () => this.host.exportText(exportName('csv'), toCSV(all)) }, 'Export CSV'),
      h('button.btn.small', { type: 'button', disabled: !all.length, onclick: () => this.host.clear() }, 'Clear'),
      h('span.muted.small', null, base ? `Baseline: ${base.id} — changes are against it (green: better, red: worse)` : 'Pick a baseline (☆) to compare runs with it.'));
    if (!runs.length) {
      replace(this.el, toolbar, h('div.empty', null, 'Finished runs appear here.'));
      return;
    }
    const metrics = METRICS.filter((m) => SHOWN.includes(m.key));
    const fmt = (key: string, v: number | undefined) => (key.endsWith('tps') ? fmtRate(v) : fmtMs(v));
    const table = h('table.history-table#history-table', null,
      h('thead', null, h('tr', null,
        h('th', { scope: 'col', title: 'baseline' }, '☆'),
        h('th', { scope: 'col' }, 'Run'),
        h('th', { scope: 'col' }, 'Input'),
        h('th', { scope: 'col' }, 'Status'),
        metrics.map((m) => h('th.num', { scope: 'col', title: m.key.endsWith('prefill_tps') ? 'prefill speed over the tokens it computed (a reused prefix costs nothing)' : '' }, m.label)),
        h('th', { scope: 'col', title: 'scorer answers equal to the baseline\'s' }, 'Same answers'),
        h('th', { scope: 'col', title: 'how far the distributions are from the baseline\'s: mean KL(baseline ‖ run) over the decisions, and the winners that changed' }, 'Distributions'),
        h('th', { scope: 'col' }, ''))),
      h('tbody', null, runs.map((r) => {
        const isBase = base?.id === r.id;
        const same = base && !isBase ? sameAnswers(base, r) : null;
        const diff = base && !isBase ? settingsDiff(base.settings, r.settings) : [];
        return h('tr', { class: `${isBase ? 'baseline' : ''} ${this.host.currentId() === r.id ? 'current' : ''} ${diff.length ? 'settings-differ' : ''}`, dataset: { run: r.id } },
          h('td', null, h('button.icon.star', { type: 'button', 'aria-pressed': String(isBase), title: isBase ? 'Unset the baseline' : 'Use as the baseline', onclick: () => this.host.setBaseline(isBase ? null : r.id) }, isBase ? '★' : '☆')),
          h('td.run-cell', null, h('div', null, h('b', null, r.id), r.scorer ? backendTag(r) : null), h('div.small.muted', null, `${fmtTime(r.started_ms)}${r.schema_name ? ' · ' + r.schema_name : ''}`),
            h('div.run-settings.small.muted', { title: 'the settings of this run' }, settingsSummary(r.settings)),
            diff.length ? h('span.tag.warn.settings-diff', { title: `Settings differ from the baseline's: ${diff.join('; ')}. Its changes are not like for like.` }, `settings differ: ${diff.join(', ')}`) : null),
          h('td.input-cell', { title: r.input.text.slice(0, 500) + mediaTitle(r) },
            r.input.media?.length ? h('span.tag', { title: mediaTitle(r).trim() }, mediaBadge(r)) : null, ' ', ellipsis(r.input.text, 60)),
          h('td.small', null, [r.scorer ? `scorer ${r.scorer.status}` : '', r.generator ? `gen ${r.generator.status}` : ''].filter(Boolean).join(' · ')),
          metrics.map((m) => {
            const v = m.get(r);
            const d = base && !isBase ? delta(v, m.get(base)) : null;
            const verdict = verdictOf(m, d);
            return h('td.num', null, fmt(m.key, v), m.key === 'scorer_prefill_tps' ? reusedNote(r) : null,
              d != null ? h('div', { class: `delta ${verdict ?? ''}` }, fmtDelta(d)) : null);
          }),
          h('td', null, same ? `${same.same}/${same.compared}` : isBase ? 'baseline' : '—'),
          distributionCell(base, r),
          h('td.actions', null,
            this.host.repeat && this.host.backends ? repeatControl(this.host as RepeatHost, r) : null,
            h('button.btn.small.link', { type: 'button', onclick: () => this.host.open(r.id) }, 'View'),
            h('button.icon.danger', { type: 'button', title: 'Delete', 'aria-label': `Delete ${r.id}`, onclick: () => this.host.remove(r.id) }, '×')));
      })));
    replace(this.el, toolbar, h('div.table-wrap', null, table));
  }
}

/** "200 reused, 14 computed" under a scorer prefill that reused an earlier prefix. */
function reusedNote(r: RunRecord): HTMLElement | null {
  const t = r.scorer?.timing;
  const reused = Math.min(t?.prefix_reused_tokens ?? 0, t?.prompt_tokens ?? 0);
  if (!t || reused <= 0) return null;
  const n = (v: number) => v.toLocaleString('en-US');
  return h('div.small.muted.reused', { title: `${n(t.prompt_tokens)} prompt tokens: ${n(reused)} taken from an earlier request's prefix` },
    `${n(reused)} reused, ${n(t.prompt_tokens - reused)} computed`);
}

/** "2 img + audio" for a run's media. */
function mediaBadge(r: RunRecord): string {
  const m = r.input.media ?? [];
  const n = (k: string) => m.filter((x) => x.kind === k).length;
  const parts = [];
  if (n('image')) parts.push(`${n('image')} img`);
  if (n('video')) parts.push('video');
  if (n('audio')) parts.push('audio');
  return parts.join(' + ');
}

function mediaTitle(r: RunRecord): string {
  const m = r.input.media ?? [];
  return m.length ? `\nmedia: ${m.map((x) => `${x.name} (${x.kind}, ${x.tokens} tokens)`).join(', ')}` : '';
}
