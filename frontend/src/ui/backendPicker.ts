// The run bar's backend menu: the scorer backend of the next run ("as in
// the settings" unless another is picked).
import { backendChoices } from '../backends';
import type { RunSettings, ScorerSettings } from '../types';
import { h, replace } from './dom';

export class BackendPicker {
  readonly el: HTMLSelectElement;
  private picked = '';

  constructor(private settings: () => ScorerSettings | undefined) {
    this.el = h('select.run-backend#run-backend', { 'aria-label': 'Scorer backend of the next run', title: 'the scorer backend of the next run',
      onchange: () => { this.picked = this.el.value; } });
  }

  render() {
    const s = this.settings();
    const choices = backendChoices(s);
    if (!choices.some((c) => c.value === this.picked)) this.picked = '';
    replace(this.el,
      h('option', { value: '', selected: this.picked === '' }, `backend: ${s?.backend || 'json'} (settings)`),
      choices.map((c) => h('option', { value: c.value, selected: this.picked === c.value, title: c.label }, `backend: ${c.value}`)));
  }

  /** The run's settings with the picked backend, or undefined to use the saved settings. */
  override(run: RunSettings | undefined): RunSettings | undefined {
    if (!run || !this.picked || this.picked === (run.scorer.backend || 'json')) return undefined;
    return { ...run, scorer: { ...run.scorer, backend: this.picked as ScorerSettings['backend'] } };
  }
}
