// The calibration panel: load a labelled examples file (JSONL, as for
// verdict calibrate), score it with the loaded model and show how good the
// probabilities are: per field accuracy, log-loss, Brier score and expected
// calibration error before and after the fitted temperatures, with
// reliability diagrams.
import { reliabilitySvg } from '../reliability';
import type { CalibrationReport, FieldQuality } from '../types';
import { h, replace } from './dom';
import { errorText } from './toast';

export interface CalibrationHost {
  /** The schema being edited, in the engine's format. */
  schema(): unknown;
  ready(): boolean;
  report(examples: string, backend: string): Promise<CalibrationReport>;
}

const pct = (v: number) => `${(100 * v).toFixed(1)}%`;
const f3 = (v: number) => v.toFixed(3);
const temp = (v: number) => (v === 0 ? 'per field' : v.toPrecision(3));

export class CalibrationPanel {
  readonly el: HTMLElement;
  private file: { name: string; text: string; lines: number } | null = null;
  private rep: CalibrationReport | null = null;
  private busy = false;
  private error = '';
  private backend = 'json';

  constructor(private host: CalibrationHost) {
    this.el = h('div.calibration#calibration-panel');
  }

  /** Loads an examples file's text. */
  load(name: string, text: string) {
    this.file = { name, text, lines: text.split('\n').filter((l) => l.trim()).length };
    this.rep = null;
    this.error = '';
    this.render();
  }

  async run() {
    if (!this.file || this.busy) return;
    this.busy = true;
    this.error = '';
    this.render();
    try {
      this.rep = await this.host.report(this.file.text, this.backend === 'json' ? '' : this.backend);
    } catch (e) {
      this.error = errorText(e);
      this.rep = null;
    } finally {
      this.busy = false;
      this.render();
    }
  }

  render() {
    const input = h('input#calibration-file', { type: 'file', accept: '.jsonl,.json,.txt', 'aria-label': 'Examples file',
      onchange: async () => {
        const f = input.files?.[0];
        if (f) this.load(f.name, await f.text());
      } });
    const backend = h('select#calibration-backend', { 'aria-label': 'Backend', onchange: () => { this.backend = backend.value; } },
      h('option', { value: 'json', selected: this.backend === 'json' }, 'json'),
      h('option', { value: 'cached', selected: this.backend === 'cached' }, 'cached'));
    const toolbar = h('div.toolbar', null,
      h('label.btn.small', { title: 'labelled examples, one JSON object a line: {"text": ..., "labels": {field: answer}}' }, 'Load examples…', input),
      h('label.small', null, 'Backend ', backend),
      h('button.btn.small.primary#calibration-run', { type: 'button', disabled: !this.file || this.busy || !this.host.ready(), onclick: () => this.run() },
        this.busy ? 'Scoring…' : 'Run calibration'),
      h('span.muted.small', null, this.file ? `${this.file.name}: ${this.file.lines} examples` : 'Load an examples file (JSONL) to see how good the probabilities are on the current schema.'));
    replace(this.el, toolbar,
      this.error ? h('div.error#calibration-error', { role: 'alert' }, this.error) : null,
      this.rep ? this.renderReport(this.rep) : null);
  }

  private renderReport(r: CalibrationReport): HTMLElement {
    const c = r.calibration;
    return h('div.calibration-report', null,
      h('p.small.muted', null, `Backend ${r.backend}: ${c.examples} examples, ${c.decisions} labelled decisions. Fitted global temperature ${temp(c.global_temperature)}. `,
        'After: in-sample (the temperatures were fitted on these examples). Diagrams: grey before, blue after; dashed: perfect calibration.'),
      h('div.quality-grid', null, [r.overall, ...r.fields].map((f) => this.fieldCard(f))),
      r.mistakes?.length ? h('details.mistakes', null, h('summary', null, `Most confident mistakes (${r.mistakes.length})`),
        h('table.mistakes-table', null,
          h('thead', null, h('tr', null, ['example', 'decision', 'answered', 'label', 'confidence', 'text'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', null, r.mistakes.map((m) => h('tr', null, h('td', null, String(m.example)), h('td', null, m.decision), h('td', null, m.predicted),
            h('td', null, m.label), h('td.num', null, pct(m.confidence)), h('td', null, m.text.length > 160 ? m.text.slice(0, 160) + '…' : m.text)))))) : null);
  }

  private fieldCard(f: FieldQuality): HTMLElement {
    const row = (label: string, a: string, b: string) => h('tr', null, h('td', null, label), h('td.num', null, a), h('td.num', null, b));
    return h('div.quality-card', { dataset: { field: f.field } },
      h('h4', null, f.field),
      h('table.quality-table', null,
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, `${f.decisions} decisions`), h('th.num', { scope: 'col' }, 'before'), h('th.num', { scope: 'col' }, 'after'))),
        h('tbody', null,
          row('temperature', temp(f.before.temperature), temp(f.after.temperature)),
          row('accuracy', pct(f.before.accuracy), pct(f.after.accuracy)),
          row('log-loss', f3(f.before.log_loss), f3(f.after.log_loss)),
          row('Brier score', f3(f.before.brier), f3(f.after.brier)),
          row('calibration error (ECE)', f3(f.before.ece), f3(f.after.ece)))),
      reliabilitySvg(f));
  }
}
