// The settings dialog: generation and scorer settings, the compute device,
// the log level, and one-click defaults.
import { backendChoices } from '../backends';
import type { Device, DeviceInfo, Normalize, Preferences, ScorerSettings } from '../types';
import { h } from './dom';
import { deviceLine } from './modelBar';
import { errorText, toast } from './toast';

const NORMALIZE: [Normalize, string][] = [
  ['none', 'none: the model\'s own distributions'],
  ['contextual', 'contextual: divide by the prior on content-free inputs (Zhao et al. 2021)'],
  ['pmi', 'pmi: divide by each value\'s likelihood under a neutral premise (Holtzman et al. 2021)'],
];

export interface SettingsHost {
  prefs(): Preferences | undefined;
  save(p: Preferences): Promise<void>;
  defaults(): Promise<Preferences>;
  settingsPath(): string;
  /** The backend of the model loaded or loading (undefined before a load). */
  device?(): DeviceInfo | undefined;
}

const DEVICES: [string, string][] = [
  ['auto', 'auto (the GPU if there is one)'],
  ['cpu', 'cpu'],
  ['cuda', 'cuda (the GPU)'],
];

/**
 * Why the GPU was not used, in a plain sentence, from the backend's note
 * (the library loader's or the CUDA runtime's words); '' for a note no
 * sentence here rephrases.
 */
export function plainDeviceReason(note: string): string {
  const n = note.replace(/^using the CPU: /, '');
  let m: RegExpExecArray | null;
  if (/libcuda\.so[.\d]*: cannot open shared object file|driver version 0\b|driver \(CUDA 0\)/.test(n)) return 'No NVIDIA GPU driver found on this machine (libcuda could not be loaded).';
  if (/no usable libverdict_cuda\.so/.test(n)) return 'Verdict\'s GPU library (libverdict_cuda.so) is not next to the app or on the library path.';
  if ((m = /driver \(CUDA (\d+)\) is older than this library's runtime \(CUDA (\d+)\)/.exec(n))) {
    return `The NVIDIA driver is older than this build needs (it supports CUDA ${cudaVersion(m[1])}, the build CUDA ${cudaVersion(m[2])}): update the driver.`;
  }
  if (/no CUDA device/.test(n)) return 'No NVIDIA GPU found on this machine.';
  if ((m = /no device (\d+) \((\d+) present\)/.exec(n))) return `There is no GPU ${m[1]}: this machine has ${m[2]}.`;
  if ((m = /compute capability (\d+\.\d+) is older than 8\.0/.exec(n))) return `The GPU is too old for Verdict (compute capability ${m[1]}; it needs 8.0 or newer).`;
  if (/ABI mismatch/.test(n)) return 'The GPU library is from another version of Verdict: rebuild or reinstall it.';
  if (/^loading on \w+ failed/.test(n)) return 'Loading the model on the GPU failed.';
  return '';
}

/** A CUDA version as CUDA numbers it: 12040 is 12.4. */
function cudaVersion(v: string): string {
  const n = Number(v);
  return `${Math.floor(n / 1000)}.${Math.floor((n % 1000) / 10)}`;
}

/**
 * What runs the model now, next to the device choice: the backend, and why
 * the CPU stands in for a GPU asked for, in a sentence; detail keeps the
 * backend's own words when the sentence rephrases them.
 */
export function deviceNote(d: DeviceInfo | undefined): { text: string; warn: boolean; detail?: string } {
  if (!d) return { text: 'Chosen when a model loads.', warn: false };
  const now = `Now: ${deviceLine(d)}${d.requested !== d.backend ? ` (asked: ${d.requested})` : ''}.`;
  if (!d.fallback || !d.note) return { text: now, warn: false };
  const warn = d.requested !== 'auto';
  const plain = plainDeviceReason(d.note);
  if (!plain) return { text: `${now} ${d.note.charAt(0).toUpperCase()}${d.note.slice(1)}`, warn };
  return { text: `${now} ${plain} The CPU runs the model.`, warn, detail: d.note };
}

export class SettingsDialog {
  readonly el: HTMLDialogElement;
  private form: HTMLFormElement;

  constructor(private host: SettingsHost) {
    this.form = h('form.settings-form', { method: 'dialog' });
    this.el = h('dialog#settings', { 'aria-label': 'Settings' }, this.form);
  }

  open() {
    const p = this.host.prefs();
    if (!p) return;
    this.fill(p);
    if (typeof this.el.showModal === 'function') this.el.showModal();
    else this.el.setAttribute('open', '');
    (this.form.querySelector('input') as HTMLInputElement | null)?.focus();
  }

  private fill(p: Preferences) {
    const g = p.run.generation;
    const s = p.run.scorer;
    const num = (name: string, label: string, v: number, attrs: Record<string, unknown>, help: string) =>
      h('label.lbl', { title: help }, label, h('input', { name, type: 'number', value: String(v), required: true, ...attrs }), h('span.help', null, help));
    // The body scrolls between the title and the buttons, so the dialog fits the window.
    this.form.replaceChildren(
      h('h2', null, 'Settings'),
      h('div.settings-body', null,
        h('fieldset', null, h('legend', null, 'Generation'),
          num('max_tokens', 'Max tokens', g.max_tokens, { min: 1, max: 4096, step: 1 }, '1 – 4096'),
          num('temperature', 'Temperature', g.temperature, { min: 0, max: 5, step: 'any' }, '0 is greedy'),
          num('top_k', 'Top-k', g.top_k, { min: 0, max: 1000, step: 1 }, '0 is off'),
          num('top_p', 'Top-p', g.top_p, { min: 0, max: 1, step: 'any' }, '1 is off'),
          num('seed', 'Seed', g.seed, { min: 0, step: 1 }, 'for sampling'),
          h('label.lbl.span3', null, 'Prompt',
            h('select', { name: 'prompt' },
              h('option', { value: 'schema', selected: g.prompt === 'schema' }, 'The scorer\'s prompt: write the JSON answer'),
              h('option', { value: 'chat', selected: g.prompt === 'chat' }, 'The input alone, as a chat message')))),
        h('fieldset', null, h('legend', null, 'Scorer'),
          num('branch_batch', 'Branch batch', s.branch_batch, { min: 1, max: 64, step: 1 }, 'branch rows run together, 1 – 64'),
          num('scorer_temperature', 'Temperature', s.temperature, { min: 0.01, max: 100, step: 'any' }, 'divides the log-likelihoods; 1 is the model\'s own'),
          h('label.lbl.span2', null, 'Calibration file', h('input', { name: 'calibration', value: s.calibration ?? '', placeholder: 'path to a file from verdict calibrate (optional)' })),
          h('label.lbl.span2', { title: 'catalog fields are decoded through their token trie under any backend' }, 'Backend',
            h('select', { name: 'backend' },
              backendChoices(s).map((b) => h('option', { value: b.value, selected: (s.backend || 'json') === b.value }, b.label)))),
          h('label.lbl.wide', { title: 'divide out the answers the model leans to whatever the input says' }, 'Correction',
            h('select', { name: 'normalize' },
              NORMALIZE.map(([v, label]) => h('option', { value: v, selected: (s.normalize || 'none') === v }, label))))),
        this.deviceSet(p.device || 'auto'),
        h('fieldset', null, h('legend', null, 'Logs'),
          h('label.lbl', null, 'Level', h('select', { name: 'log_level' },
            ['error', 'warning', 'info', 'debug', 'trace'].map((l) => h('option', { value: l, selected: l === p.log_level }, l))))),
        h('p.small.muted', null, this.host.settingsPath() ? `Saved in ${this.host.settingsPath()}` : 'Kept for this session only.')),
      h('div.row-actions', null,
        h('button.btn', { type: 'button', onclick: () => this.resetDefaults() }, 'Defaults'),
        h('span.spacer'),
        h('button.btn', { type: 'button', onclick: () => this.el.close() }, 'Cancel'),
        h('button.btn.primary', { type: 'submit', onclick: (e: Event) => this.submit(e) }, 'Save')));
  }

  private deviceSet(cur: string) {
    const choices = DEVICES.some(([v]) => v === cur) ? DEVICES : [...DEVICES, [cur, cur] as [string, string]];
    const note = deviceNote(this.host.device?.());
    return h('fieldset', null, h('legend', null, 'Compute'),
      h('label.lbl.span2', { title: 'changing it loads the model again on the new device' }, 'Device',
        h('select', { name: 'device' }, choices.map(([v, label]) => h('option', { value: v, selected: v === cur }, label))),
        h('span.help', null, 'auto: the GPU when the CUDA library loads and finds one, else the CPU; a change loads the model again')),
      h('p.small#device-note', { class: `small device-note${note.warn ? ' warn' : ''}` }, note.text,
        note.detail ? h('details.device-detail', null, h('summary', null, 'details'), h('code', null, note.detail)) : null));
  }

  private async resetDefaults() {
    try {
      this.fill(await this.host.defaults());
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }

  private async submit(e: Event) {
    e.preventDefault();
    if (!this.form.reportValidity()) return;
    const f = new FormData(this.form);
    const n = (k: string) => Number(f.get(k));
    const prev = this.host.prefs()?.run.scorer;
    const backend = String(f.get('backend') ?? 'json') as ScorerSettings['backend'];
    const normalize = String(f.get('normalize') ?? 'none') as Normalize;
    const device = String(f.get('device') ?? 'auto') as Device;
    const p: Preferences = {
      run: {
        generation: { max_tokens: n('max_tokens'), temperature: n('temperature'), top_k: n('top_k'), top_p: n('top_p'), seed: n('seed'), prompt: f.get('prompt') as 'schema' | 'chat' },
        scorer: {
          branch_batch: n('branch_batch'), temperature: n('scorer_temperature'), calibration: String(f.get('calibration') ?? '').trim(),
          // json and "" mean the same (and none and ""): an unset one stays unset unless another is picked.
          ...(backend !== 'json' || prev?.backend ? { backend } : {}),
          ...(normalize !== 'none' || prev?.normalize ? { normalize } : {}),
          ...(prev?.head ? { head: prev.head } : {}),
        },
      },
      log_level: String(f.get('log_level')),
      // "" means auto: an unset device stays unset unless another is picked.
      ...(device !== 'auto' || this.host.prefs()?.device ? { device } : {}),
    };
    try {
      await this.host.save(p);
      this.el.close();
      toast('Settings saved', 'ok');
    } catch (err) {
      toast(errorText(err), 'error');
    }
  }
}
