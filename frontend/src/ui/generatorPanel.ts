// The generation panel: the model's answer streamed token by token, and the
// JSON in it once it parses, checked against the scorer's answers.
//
// A long generation sends thousands of updates: the panel appends only the
// new text, keeps its header elements (a Stop button replaced under the
// pointer would lose the click) and never reads layout (the auto-scroll
// follows a flag that an IntersectionObserver on the text's end keeps).
import { fmtRate } from '../format';
import { findAnswer } from '../jsonparse';
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
  private title: HTMLElement;
  private pill: HTMLElement;
  private tokens: HTMLElement;
  private rate: HTMLElement;
  private stopBtn: HTMLButtonElement;
  private text: HTMLElement;
  /** The last child of the text: while it is in view, the text follows its end. */
  private end: HTMLElement;
  private parsed: HTMLElement;
  /** The run and text length on screen: updates of the same run append the rest. */
  private shownRun = '';
  private shownLen = 0;
  private pillKey = '';
  private parsedKey = '';
  /** The block the text grows in, and its length: finished blocks are not laid out again. */
  private chunk: HTMLElement | null = null;
  private chunkLen = 0;
  /** Whether the text follows the end (the user has not scrolled up). */
  private follow = true;

  constructor(private host: GeneratorPanelHost) {
    this.title = h('span.sub');
    this.pill = h('span.pill-slot');
    this.tokens = h('span.progress#gen-tokens', { hidden: true });
    this.rate = h('span.progress', { hidden: true });
    this.stopBtn = h('button.btn.small.stop', { type: 'button', title: 'Stop generating (Esc stops both)', disabled: true, onclick: () => this.host.stop('generator') }, 'Stop');
    this.head = h('header.card-head', null,
      h('h2', null, 'Generation', this.title),
      h('div.head-actions', null, this.pill, this.tokens, this.rate, this.stopBtn));
    this.end = h('span.gen-end', { 'aria-hidden': 'true' });
    this.text = h('pre.gen-text#gen-text', { 'aria-live': 'off', tabindex: 0 }, this.end);
    // Whether the end is in view comes from the browser after its layout: no
    // scroll, ours or the user's, reads layout. Scrolling up, or a press in
    // the text (a selection, the scroll bar), stops following at once; the
    // end coming back into view starts it again. "In view" reaches half the
    // box below its bottom edge: a scroll back down aims at the end as it was
    // when the scroll began, and the text that arrives while it glides must
    // not leave the end just out of reach.
    if (typeof IntersectionObserver === 'function') {
      new IntersectionObserver((es) => { this.follow = es[es.length - 1].isIntersecting; },
        { root: this.text, rootMargin: '0px 0px 50% 0px' }).observe(this.end);
    }
    const away = () => { this.follow = false; };
    this.text.addEventListener('wheel', (e) => { if (e.deltaY < 0) away(); }, { passive: true });
    this.text.addEventListener('keydown', (e) => { if (['ArrowUp', 'PageUp', 'Home'].includes(e.key)) away(); });
    this.text.addEventListener('pointerdown', away);
    this.parsed = h('div.parsed#gen-parsed');
    this.el = h('section.card.side#generator-panel', { 'aria-label': 'Generation' }, this.head, this.text, this.parsed);
  }

  /** Shows run; fields are the schema's field names (the JSON answer holds some of them). */
  render(run: LiveRun | null, fields: string[] = []) {
    const g = run?.generator;
    const t = g?.timing;
    this.title.textContent = run?.record?.generator?.prompt_mode === 'chat' ? ' chat prompt' : ' same prompt, written answer';
    this.stopBtn.disabled = !g || isFinished(g.status);
    const pillKey = g ? g.status : '';
    if (pillKey !== this.pillKey) {
      this.pillKey = pillKey;
      replace(this.pill, g ? statusPill(g.status) : null);
    }
    this.tokens.hidden = !g;
    if (g) setText(this.tokens, `${g.tokens} tok`);
    this.rate.hidden = !(g && t?.decode_tokens_per_second);
    if (g && t?.decode_tokens_per_second) setText(this.rate, fmtRate(t.decode_tokens_per_second));
    if (!run || !g) {
      this.text.replaceChildren(this.end);
      this.shownRun = '';
      this.shownLen = 0;
      this.chunk = null;
      this.text.classList.add('empty-text');
      this.text.dataset.placeholder = run ? 'Generation is not part of this run.' : 'The model\'s own answer streams here, token by token.';
      replace(this.parsed);
      this.parsedKey = '';
      return;
    }
    this.text.classList.toggle('empty-text', g.text === '');
    this.text.dataset.placeholder = g.status === 'preparing' && run.media?.status === 'preparing'
      ? `waiting for the towers: ${towerStage(run)}…`
      : g.status === 'preparing' || g.status === 'prefilling' ? `reading the input…${g.status === 'prefilling' ? prefillStage(t, run.elapsedMs) : ''}` : '';
    this.showText(run.id, g.text);
    this.text.classList.toggle('streaming', !isFinished(g.status));
    this.renderParsed(run, fields);
  }

  /** Appends what is new of text (or starts over for another run or a different text). */
  private showText(id: string, text: string) {
    if (id !== this.shownRun || text.length < this.shownLen) {
      this.shownRun = id;
      this.shownLen = 0;
      this.text.replaceChildren(this.end);
      this.chunk = null;
      this.follow = true;
    }
    if (text.length === this.shownLen) return;
    this.append(text.slice(this.shownLen));
    this.shownLen = text.length;
    // A write only: the browser clamps it to the end.
    if (this.follow) this.text.scrollTop = 1e9;
  }

  /**
   * Appends s to the text in blocks of about CHUNK characters, each ended at
   * a line break (or, in a long line, at a space): a new token then lays out
   * only the last block, not the whole text.
   */
  private append(s: string) {
    while (s) {
      if (!this.chunk || this.chunkLen >= CHUNK) {
        const nl = this.chunk ? s.indexOf('\n') : -1;
        const sp = this.chunk && this.chunkLen >= 2 * CHUNK ? s.indexOf(' ') : -1;
        const cut = nl >= 0 ? nl + 1 : sp >= 0 ? sp + 1 : this.chunk ? -1 : 0;
        if (cut > 0) {
          this.chunk!.appendChild(document.createTextNode(s.slice(0, cut)));
          s = s.slice(cut);
        }
        if (cut >= 0) {
          this.chunk = h('div.gen-chunk');
          this.chunkLen = 0;
          this.text.insertBefore(this.chunk, this.end);
          if (!s) return;
        }
      }
      this.chunk!.appendChild(document.createTextNode(s));
      this.chunkLen += s.length;
      return;
    }
  }

  private renderParsed(run: LiveRun, fields: string[]) {
    const g = run.generator!;
    const names = fields.length ? fields : [...(run.scorer?.fields.keys() ?? [])];
    const p = findAnswer(g.text, names);
    const finished = isFinished(g.status);
    // Rebuild only when what is shown changes (not on every token).
    const key = JSON.stringify([run.id, g.status, g.error ?? '', run.scorer?.fields.size ?? 0, p.ok ? p.value : finished ? p.error : '']);
    if (key === this.parsedKey) return;
    this.parsedKey = key;
    const errBox = g.status === 'error' && g.error ? h('div.side-error', { role: 'alert' }, g.error) : null;
    if (!p.ok) {
      replace(this.parsed, errBox, h('div.parse-state.muted', null, finished ? `No JSON answer: ${p.error}.` : 'Waiting for a complete JSON object…'));
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

/** About how many characters a block of the streamed text holds. */
const CHUNK = 800;

function setText(el: HTMLElement, s: string) {
  if (el.textContent !== s) el.textContent = s;
}
