// The generation panel: the model's answer streamed token by token, and the
// JSON in it once it parses, checked against the scorer's answers.
import { fmtRate } from '../format';
import { extractJSON } from '../jsonparse';
import type { LiveRun } from '../run';
import { agrees, isFinished, prefillStage, towerStage } from '../run';
import { h, replace } from './dom';
import { statusPill } from './common';

export interface GeneratorPanelHost {
  stop(side: 'generator'): void;
}

export class GeneratorPanel {
  readonly el: HTMLElement;
  private head: HTMLElement;
  private text: HTMLElement;
  private parsed: HTMLElement;
  private lastParsedFor = '';

  constructor(private host: GeneratorPanelHost) {
    this.head = h('header.card-head');
    this.text = h('pre.gen-text#gen-text', { 'aria-live': 'off', tabindex: 0 });
    this.parsed = h('div.parsed#gen-parsed');
    this.el = h('section.card.side#generator-panel', { 'aria-label': 'Generation' }, this.head, this.text, this.parsed);
  }

  render(run: LiveRun | null) {
    const g = run?.generator;
    const t = g?.timing;
    const stop = h('button.btn.small.stop', { type: 'button', title: 'Stop generating (Esc stops both)', disabled: !g || isFinished(g.status), onclick: () => this.host.stop('generator') }, 'Stop');
    replace(this.head,
      h('h2', null, 'Generation', h('span.sub', null, run?.record?.generator?.prompt_mode === 'chat' ? ' chat prompt' : ' same prompt, written answer')),
      h('div.head-actions', null,
        g ? statusPill(g.status) : null,
        g ? h('span.progress#gen-tokens', null, `${g.tokens} tok`) : null,
        g && t?.decode_tokens_per_second ? h('span.progress', null, fmtRate(t.decode_tokens_per_second)) : null,
        stop));
    if (!run || !g) {
      this.text.textContent = '';
      this.text.classList.add('empty-text');
      this.text.dataset.placeholder = run ? 'Generation is not part of this run.' : 'The model\'s own answer streams here, token by token.';
      replace(this.parsed);
      this.lastParsedFor = '';
      return;
    }
    this.text.classList.toggle('empty-text', g.text === '');
    this.text.dataset.placeholder = g.status === 'preparing' && run.media?.status === 'preparing'
      ? `waiting for the towers: ${towerStage(run)}…`
      : g.status === 'preparing' || g.status === 'prefilling' ? `reading the input…${g.status === 'prefilling' ? prefillStage(t, run.elapsedMs) : ''}` : '';
    if (this.text.textContent !== g.text) {
      const atBottom = this.text.scrollTop + this.text.clientHeight >= this.text.scrollHeight - 8;
      this.text.textContent = g.text;
      if (atBottom) this.text.scrollTop = this.text.scrollHeight;
    }
    this.text.classList.toggle('streaming', !isFinished(g.status));
    const key = `${run.id}:${g.text.length}:${run.scorer?.fields.size ?? 0}:${g.status}`;
    if (key === this.lastParsedFor) return;
    this.lastParsedFor = key;
    const errBox = g.status === 'error' && g.error ? h('div.side-error', { role: 'alert' }, g.error) : null;
    const p = extractJSON(g.text);
    if (!p.ok) {
      replace(this.parsed, errBox, h('div.parse-state.muted', null, isFinished(g.status) ? `No JSON answer: ${p.error}.` : 'Waiting for a complete JSON object…'));
      return;
    }
    const rows = [...(run.scorer?.fields.values() ?? [])].map((f) => {
      const a = agrees(f, p.value);
      return h('li', { class: a == null ? 'missing' : a ? 'same' : 'differs' },
        h('span.mark', null, a == null ? '–' : a ? '✓' : '≠'), ` ${f.name}`,
        a == null ? h('span.muted', null, ' not in the generated JSON') : null);
    });
    replace(this.parsed, errBox,
      h('div.parse-state.good', null, '✓ the answer parses as JSON'),
      h('pre.json#gen-json', null, JSON.stringify(p.value, null, 2)),
      rows.length ? h('div.agree', null, h('div.small.muted', null, 'Against the scorer\'s answers:'), h('ul', null, rows)) : null);
  }
}
