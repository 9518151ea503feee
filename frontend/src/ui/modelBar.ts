// The model: what is loaded, its size and inputs, load progress and errors,
// and loading another (the built-in model or a Gemma 3n or Gemma 4 folder).
import { fmtBytes, fmtMs, fmtParams } from '../format';
import type { DeviceInfo, MediaAvailability, ModelInfo, ReplicaInfo } from '../types';
import { h, replace } from './dom';
import { familyName } from './family';

export interface ModelHost {
  model(): ModelInfo;
  mode(): 'desktop' | 'browser';
  /** What media features work here (video needs ffmpeg). */
  availability(): MediaAvailability | undefined;
  loadBuiltin(): void;
  loadFolder(path: string): void;
  chooseFolder(): void;
  /** Stops the load in progress. */
  cancelLoad?(): void;
  /** Opens the models dialog (models on disk, downloads). */
  browseModels?(): void;
}

export class ModelBar {
  readonly el: HTMLElement;
  private chip: HTMLElement;
  private device: HTMLElement;
  private pathForm: HTMLFormElement;

  constructor(private host: ModelHost) {
    this.chip = h('div.model-chip#model-chip', { 'aria-live': 'polite' });
    this.device = h('div.device-chip#device-chip', { hidden: true });
    const path = h('input#model-path', { placeholder: '/path/to/gemma-3n-E2B-it', 'aria-label': 'Model folder', spellcheck: false,
      onkeydown: (e: KeyboardEvent) => { if (e.key === 'Escape') this.pathForm.hidden = true; } });
    this.pathForm = h('form.model-path', { hidden: true, onsubmit: (e: Event) => { e.preventDefault(); if (path.value.trim()) { this.host.loadFolder(path.value.trim()); this.pathForm.hidden = true; } } },
      path, h('button.btn.small.primary', { type: 'submit' }, 'Load'),
      h('button.btn.small', { type: 'button', onclick: () => (this.pathForm.hidden = true) }, 'Cancel'));
    this.el = h('div.model-bar', null,
      h('div.model-info', null, this.chip, this.device),
      h('div.model-actions', null,
        h('button.btn.small#load-builtin', { type: 'button', title: 'Load the built-in tiny model (random weights)', onclick: () => this.host.loadBuiltin() }, 'Built-in'),
        this.host.browseModels ? h('button.btn.small#browse-models', { type: 'button', title: 'Gemma 3n and Gemma 4 models on this computer, and downloads from Hugging Face', onclick: () => this.host.browseModels?.() }, 'Models…') : null,
        h('button.btn.small#open-folder', { type: 'button', title: 'Open a Hugging Face Gemma 3n or Gemma 4 checkpoint folder', onclick: () => this.openFolder() }, 'Open folder…'),
        this.pathForm));
  }

  private openFolder() {
    if (this.host.mode() === 'desktop') {
      this.host.chooseFolder();
      return;
    }
    this.pathForm.hidden = false;
    (this.pathForm.querySelector('input') as HTMLInputElement).focus();
  }

  render() {
    const m = this.host.model();
    const dot = h('span.dot', { class: `dot dot-${m.state}` });
    let body: (HTMLElement | string | null)[];
    switch (m.state) {
      case 'none':
        body = [h('b', null, 'No model'), h('span.muted', null, ' — load the built-in model or a Gemma 3n or Gemma 4 folder')];
        break;
      case 'loading':
        body = [h('span.spinner', { 'aria-hidden': 'true' }), h('b', null, `Loading ${m.name ?? m.spec ?? ''}`),
          h('span.muted#model-progress', null, ` ${loadProgress(m)}`),
          this.host.cancelLoad ? h('button.btn.small#cancel-load', { type: 'button', title: 'Stop loading this model', onclick: () => this.host.cancelLoad?.() }, 'Cancel') : null];
        break;
      case 'error':
        body = [h('b', null, 'Model failed to load'), h('span.err', { title: m.error }, ` ${m.error ?? ''}`)];
        break;
      case 'ready': {
        const inputs = (m.inputs ?? []).map((i) => {
          const [on, label, title] = modalityLabel(i.name, i.supported, i.note, this.host.availability());
          return h('span.modality', { class: `modality ${on ? 'on' : 'off'}`, dataset: { input: i.name }, title }, label);
        });
        // The figures give way first in a narrow bar (style.css): the title has them whole.
        const figures = `${fmtParams(m.params)} params${m.size_bytes ? ` · ${fmtBytes(m.size_bytes)}` : ''} · ${m.layers} layers · loaded in ${fmtMs(m.load_ms)}`;
        body = [
          h('b#model-name', { title: [m.name, m.path].filter((x) => x).join('\n') }, m.name ?? ''),
          m.family ? familyBadge(m.family) : null,
          m.random_weights ? h('span.badge.warn#random-weights', { title: m.note ?? '' }, 'random weights') : null,
          h('span.muted#model-figures', { title: figures }, ` ${figures}`),
          h('span.modalities', null, inputs),
        ];
        break;
      }
    }
    replace(this.chip, dot, ...body);
    this.chip.dataset.state = m.state;
    this.renderDevice(m);
  }

  /** The device chip: the backend, and the ready model's resident memory; a badge when the CPU stands in for a GPU. */
  private renderDevice(m: ModelInfo) {
    const d = m.device;
    this.device.hidden = !d || m.state === 'none';
    if (!d || m.state === 'none') return;
    const warn = deviceWarning(d);
    const res = m.state === 'ready' ? residentSummary(m) : '';
    const reps = m.replicas && m.replicas.length > 1 ? m.replicas : null;
    const lines = reps ? replicaLines(reps) : [];
    const down = reps ? reps.filter((r) => !r.up) : [];
    const title = [deviceLine(d), res && `resident: ${res}`, d.note, ...lines].filter((x) => x).join('\n');
    this.device.title = title;
    replace(this.device,
      h('span#device-name', null, deviceLine(d)),
      reps ? h('span#device-replicas', { title: lines.join('\n') }, ` × ${reps.length} devices`) : null,
      res ? h('span.muted#device-resident', null, ` · ${res}`) : null,
      warn ? h('span#device-fallback', { class: `badge ${warn.level}`, title: d.note ?? '' }, warn.text) : null,
      down.length ? h('span.badge.warn#replicas-down', { title: down.map((r) => `${r.device.requested}: ${r.error ?? 'failed'}`).join('\n') },
        `${down.length} of ${reps!.length} down`) : null);
  }
}

/**
 * One line a replica (serve --devices): "cuda:1 · cuda · H200 · 141 GB: 120
 * answered, 3 running", or its error once its device failed.
 */
export function replicaLines(reps: ReplicaInfo[]): string[] {
  return reps.map((r) => {
    const name = `${r.device.requested} · ${deviceLine(r.device)}`;
    if (!r.up) return `${name}: down — ${r.error ?? 'its device failed'}; its requests ran again on the others`;
    return `${name}: ${r.requests} answered, ${r.running} running`;
  });
}

/**
 * A load's progress: "packing weights to 4 bits 42% · 3.2 GB · 12 s, about
 * 16 s left" (the share and time left when the stage counts its work).
 */
export function loadProgress(m: ModelInfo): string {
  const parts = [m.stage ?? ''];
  const el = m.elapsed_ms ?? 0;
  const f = m.total ? Math.min(1, (m.done ?? 0) / m.total) : undefined;
  if (f != null) parts[0] += ` ${Math.floor(f * 100)}%`;
  if (m.size_bytes) parts.push(fmtBytes(m.size_bytes));
  let time = fmtMs(el);
  // The stage began some time into the load: the estimate is rough, and shown only once it means something.
  if (f != null && f > 0.02 && f < 1 && el > 2000) time += `, about ${fmtMs((el * (1 - f)) / f)} left`;
  parts.push(time);
  return parts.filter((p) => p).join(' · ');
}

/**
 * A modality's label: whether the model takes it (its checkpoint has the
 * tower) and, for video, whether ffmpeg is there to read it.
 */
/** The ready model's family beside its name: "Gemma 3n", "Gemma 4" (narrow windows hide the word "Gemma": style.css). */
export function familyBadge(family: string): HTMLElement {
  const name = familyName(family);
  const word = name.startsWith('Gemma ') ? 'Gemma ' : '';
  return h('span.badge.info#model-family', { title: `decoder family: ${name}`, dataset: { family } },
    word ? h('span.family-word', null, word) : null, name.slice(word.length));
}

export function modalityLabel(name: string, supported: boolean, note: string | undefined, a: MediaAvailability | undefined): [boolean, string, string] {
  if (!supported) return [false, /no .* tower/.test(note ?? '') ? `no ${name}` : `${name} ?`, `${name}: ${note ?? 'not supported'}`];
  if (name === 'video' && a && !a.video.available) return [false, 'video ✗', `video: the model takes it, but ${a.video.reason ?? 'ffmpeg is missing'}`];
  return [true, `${name} ✓`, `${name}: ${note ?? 'supported'}`];
}

const SIMD: Record<string, string> = { avx512: 'AVX-512', avx2: 'AVX2', neon: 'NEON', portable: 'portable' };

/** The backend in a line: "cpu · 16 cores AVX-512", "cuda · H200 · 141 GB". */
export function deviceLine(d: DeviceInfo): string {
  if (d.backend === 'cpu') {
    const cores = d.cores ? `${d.cores} ${d.cores === 1 ? 'core' : 'cores'}` : '';
    return ['cpu', [cores, d.simd ? SIMD[d.simd] ?? d.simd : ''].filter((x) => x).join(' ')].filter((x) => x).join(' · ');
  }
  return [d.backend, d.name ?? '', d.memory_bytes ? fmtBytes(d.memory_bytes) : ''].filter((x) => x).join(' · ');
}

/** What the ready model holds: "1.5 GB q4 · KV 2.1 GB · per-layer table 4.0 GB · vision loaded" ('' without a report). */
export function residentSummary(m: ModelInfo): string {
  const r = m.resident;
  if (!r) return '';
  const parts = [`${fmtBytes(r.weight_bytes)} ${r.weights}`, `KV ${fmtBytes(r.kv_bytes)}`];
  if (r.ple_bytes) parts.push(`per-layer table ${fmtBytes(r.ple_bytes)}`);
  if (r.towers.length) parts.push(`${r.towers.join(' + ')} loaded`);
  return parts.join(' · ');
}

/**
 * The badge when the CPU stands in for the GPU asked for: a warning for an
 * explicit cuda, a milder note for auto (no GPU here is no fault); null
 * when the backend is the one asked for.
 */
export function deviceWarning(d: DeviceInfo): { text: string; level: 'warn' | 'info' } | null {
  if (!d.fallback) return null;
  if (d.requested === 'auto') return { text: 'no GPU', level: 'info' };
  return { text: `${d.requested} failed`, level: 'warn' };
}
