// The input: typed text, and files by drag and drop or a picker. Text files
// become part of the input; images, audio and video go to the media panel.
import { fmtBytes } from '../format';
import type { RunProgress } from '../media';
import type { InputFile } from '../types';
import { h, replace } from './dom';

export interface InputHost {
  input(): string;
  files(): InputFile[];
  setInput(s: string): void;
  addFiles(f: InputFile[]): void;
  /** Files picked or dropped in the browser (text read here, media uploaded). */
  pickFiles(f: File[]): void;
  removeFile(i: number): void;
  mode(): 'desktop' | 'browser';
  chooseFiles(): void;
  canRun(): { ok: boolean; why: string };
  running(): boolean;
  /** Stop was pressed (or both sides are over) and the server has not confirmed the end yet. */
  stopping?(): boolean;
  run(which: 'both' | 'scorer' | 'generator'): void;
  stop(): void;
  inputTokensHint(): string;
  /** The run's progress, shown in the run bar while it runs (null: none). */
  progress?(): RunProgress | null;
}

export class InputPanel {
  readonly el: HTMLElement;
  readonly textarea: HTMLTextAreaElement;
  private chips: HTMLElement;
  /** The Run and Stop buttons: the page places them in its sticky run bar. */
  readonly actions: HTMLElement;
  private picker: HTMLInputElement;
  /** The run's progress: in the sticky run bar, so it stays in view. */
  private progressEl: HTMLElement;
  private progressText: HTMLElement;
  private progressBar: HTMLProgressElement;

  constructor(private host: InputHost, media?: HTMLElement) {
    this.textarea = h('textarea#input-text', { rows: 3, placeholder: 'Type or paste the input — or drop text, images, audio or video here.', 'aria-label': 'Input text', spellcheck: true,
      oninput: () => this.host.setInput(this.textarea.value) });
    this.picker = h('input', { type: 'file', multiple: true, hidden: true, id: 'file-picker', onchange: () => {
      const fs = [...(this.picker.files ?? [])];
      this.picker.value = '';
      this.host.pickFiles(fs);
    } });
    this.chips = h('ul.file-chips#file-chips');
    this.actions = h('div.run-actions');
    this.progressText = h('span.run-progress-text#run-progress-text');
    this.progressBar = h('progress#run-progress-bar', { max: 1, 'aria-label': 'run progress' });
    this.progressEl = h('div.run-progress#run-progress', { hidden: true }, this.progressBar, this.progressText);
    const drop = h('div.dropzone', { style: '--wails-drop-target: drop' }, this.textarea, this.chips,
      h('div.drop-hint', null, 'Drop text, images, audio or video to add them'));
    // Browser drag and drop (the window delivers drops through Wails instead).
    drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
    drop.addEventListener('dragleave', () => drop.classList.remove('over'));
    drop.addEventListener('drop', async (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      const files = [...(e.dataTransfer?.files ?? [])];
      if (files.length && this.host.mode() === 'browser') this.host.pickFiles(files);
    });
    this.el = h('section.card.input#input', { 'aria-label': 'Input' },
      h('header.card-head', null, h('h2', null, 'Input'),
        h('div.head-actions', null,
          h('button.btn.small#add-files', { type: 'button', title: 'Add text, image, audio or video files', onclick: () => (this.host.mode() === 'desktop' ? this.host.chooseFiles() : this.picker.click()) }, 'Add files…'),
          this.picker)),
      drop,
      media ?? null);
  }

  /** Puts text into the box (presets, restored state). */
  setText(s: string) {
    this.textarea.value = s;
  }

  render() {
    if (document.activeElement !== this.textarea && this.textarea.value !== this.host.input()) this.textarea.value = this.host.input();
    const files = this.host.files();
    replace(this.chips, files.map((f, i) =>
      h('li.chip', { class: `chip ${f.supported ? 'ok' : 'unsupported'}`, title: f.supported ? `${f.name}: text, part of the input` : `${f.name}: ${f.reason}` },
        h('span.chip-kind', null, f.kind),
        h('span.chip-name', null, f.name),
        h('span.chip-size.muted', null, fmtBytes(f.size)),
        f.supported ? null : h('span.chip-note', null, 'not supported'),
        h('button.icon', { type: 'button', 'aria-label': `Remove ${f.name}`, onclick: () => this.host.removeFile(i) }, '×'))));
    const can = this.host.canRun();
    const running = this.host.running();
    replace(this.actions,
      running && this.host.stopping?.()
        ? h('button.btn.danger#stop-run', { type: 'button', disabled: true, title: 'Waiting for the server to confirm that the run has stopped' }, 'Stopping…')
        : running
        ? h('button.btn.danger#stop-run', { type: 'button', title: 'Stop both sides (Esc)', onclick: () => this.host.stop() }, '■ Stop')
        : h('button.btn.primary#run', { type: 'button', disabled: !can.ok, title: can.ok ? 'Run the scorer and generation side by side (Ctrl+Enter)' : can.why, onclick: () => this.host.run('both') }, '▶ Run side by side'),
      h('button.btn#run-scorer', { type: 'button', disabled: !can.ok || running, title: 'Run the scorer alone (Ctrl+Shift+Enter)', onclick: () => this.host.run('scorer') }, 'Score only'),
      h('button.btn#run-generator', { type: 'button', disabled: !can.ok || running, title: 'Run generation alone', onclick: () => this.host.run('generator') }, 'Generate only'),
      // Why Run is held back is shown whole (it wraps); the token hint may be cut.
      can.ok ? h('span.muted.small.run-hint', null, this.host.inputTokensHint()) : h('span.small.run-why#run-why', { role: 'status' }, can.why),
      h('span.kbd-hint.small.muted', null, h('kbd', null, 'Ctrl'), '+', h('kbd', null, 'Enter'), ' run · ', h('kbd', null, 'Esc'), ' stop'),
      this.progressEl);
    this.renderProgress();
  }

  /** Updates the run's progress line (at the run's update rate, without rebuilding the buttons). */
  renderProgress() {
    const p = this.host.progress?.() ?? null;
    this.progressEl.hidden = !p;
    if (!p) return;
    if (this.progressText.textContent !== p.text) this.progressText.textContent = p.text;
    this.progressEl.title = p.text;
    if (p.fraction == null) this.progressBar.removeAttribute('value');
    else this.progressBar.value = Math.max(0, Math.min(1, p.fraction));
  }
}
