// The log viewer: the app's logrus entries, with the level and a filter.
import type { LogEntry } from '../types';
import { h, replace } from './dom';

export interface LogsHost {
  logs(): LogEntry[];
  level(): string;
  setLevel(l: string): void;
  clear(): void;
}

const LEVELS = ['error', 'warning', 'info', 'debug', 'trace'];

export class LogsPanel {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private filter = '';
  private levelSel: HTMLSelectElement;
  private shown = 0;

  constructor(private host: LogsHost) {
    this.levelSel = h('select#log-level', { 'aria-label': 'Log level', onchange: () => this.host.setLevel(this.levelSel.value) },
      LEVELS.map((l) => h('option', { value: l }, l)));
    const filter = h('input#log-filter', { type: 'search', placeholder: 'Filter…', 'aria-label': 'Filter logs',
      oninput: (e: Event) => { this.filter = (e.target as HTMLInputElement).value.toLowerCase(); this.shown = -1; this.render(); } });
    this.list = h('ol.log-list#log-list', { 'aria-live': 'off' });
    this.el = h('div.logs', null,
      h('div.toolbar', null, h('label.small', null, 'Level ', this.levelSel), filter,
        h('button.btn.small', { type: 'button', onclick: () => { this.host.clear(); this.shown = -1; } }, 'Clear')),
      this.list);
  }

  render() {
    this.levelSel.value = this.host.level();
    const logs = this.host.logs();
    const match = (e: LogEntry) => !this.filter || `${e.level} ${e.message} ${JSON.stringify(e.fields ?? {})}`.toLowerCase().includes(this.filter);
    const atBottom = this.list.scrollTop + this.list.clientHeight >= this.list.scrollHeight - 8;
    if (this.shown < 0 || this.shown > logs.length) {
      replace(this.list);
      this.shown = 0;
    }
    const add = logs.slice(this.shown).filter(match).map((e) =>
      h('li', { class: `log log-${e.level}` },
        h('time', null, new Date(e.time_ms).toLocaleTimeString()),
        h('span.lvl', null, e.level),
        h('span.msg', null, e.message),
        e.fields ? h('span.fields', null, Object.entries(e.fields).map(([k, v]) => `${k}=${v}`).join(' ')) : null));
    this.list.append(...add);
    this.shown = logs.length;
    while (this.list.children.length > 2000) this.list.firstElementChild?.remove();
    if (atBottom) this.list.scrollTop = this.list.scrollHeight;
  }
}
