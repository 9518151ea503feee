// The models dialog: the Gemma 3n and Gemma 4 models already on this
// computer (the Hugging Face cache, folders opened before, Ollama, LM
// Studio) to load, each with its family, and the Gemma repos on the Hub to
// download, with progress, cancel and a token for gated repos.
import { fmtBytes } from '../format';
import { h, replace } from './dom';
import { familyName } from './family';
import { errorText, toast } from './toast';
import './modelsDialog.css';

/** A model found on disk (Go: models.Local). */
export interface LocalModel {
  spec: string;
  name: string;
  /** The decoder family: 'gemma3n' or 'gemma4' (Go: models.Local.Family). */
  family: string;
  source: 'huggingface' | 'folder' | 'ollama' | 'lmstudio';
  path: string;
  format: 'safetensors' | 'gguf';
  size_bytes: number;
  quant?: string;
  vision: boolean;
  audio: boolean;
}

/** A repo the dialog offers (Go: app.HubRepo). */
export interface HubRepo {
  repo: string;
  title: string;
  /** The checkpoint's decoder family: 'gemma3n' or 'gemma4'. */
  family?: string;
  size_bytes: number;
  files: number;
  gated: boolean;
  path?: string;
  error?: string;
  /** The plain message when the Hub cannot be reached (error keeps the details). */
  offline?: string;
}

/** The download in progress or the last one (Go: app.DownloadState). */
export interface DownloadState {
  state: 'idle' | 'downloading' | 'done' | 'error' | 'cancelled';
  repo?: string;
  stage?: string;
  file?: string;
  file_index?: number;
  files?: number;
  done?: number;
  total?: number;
  bytes_per_sec?: number;
  left_ms?: number;
  path?: string;
  spec?: string;
  error?: string;
  gated?: boolean;
  licence_url?: string;
  /** The plain message of a download that could not reach the Hub. */
  offline?: string;
}

export interface TokenInfo {
  present: boolean;
  source?: string;
}

/** The event that carries a DownloadState. */
export const DownloadEvent = 'hub:download';

export interface LibraryHost {
  local(): Promise<LocalModel[]>;
  repos(): Promise<HubRepo[]>;
  token(): Promise<TokenInfo>;
  setToken(token: string): Promise<TokenInfo>;
  state(): Promise<DownloadState>;
  download(repo: string): Promise<DownloadState>;
  cancel(): Promise<DownloadState>;
  /** Loads the model named by spec (a Hub id, a folder or a file). */
  open(spec: string): void;
}

const SOURCES: Record<LocalModel['source'], string> = {
  huggingface: 'Hugging Face cache',
  folder: 'opened before',
  ollama: 'Ollama',
  lmstudio: 'LM Studio',
};

export class ModelsDialog {
  readonly el: HTMLDialogElement;
  private localEl = h('div#local-models');
  private reposEl = h('div#hub-repos');
  private tokenEl = h('div.token-row#hub-token');
  private progressEl = h('div.download#download-progress', { 'aria-live': 'polite' });
  private dl: DownloadState = { state: 'idle' };
  private local: LocalModel[] | null = null;
  private repos: HubRepo[] | null = null;
  private tokenInfo: TokenInfo = { present: false };
  /** hub:download events taken so far. */
  private events = 0;

  constructor(private host: LibraryHost) {
    this.el = h('dialog#models-dialog.models-dialog', { 'aria-label': 'Models' },
      h('div.dialog-head', null, h('h2', null, 'Models'), h('span.spacer'),
        h('button.btn.small#models-refresh', { type: 'button', onclick: () => this.refresh() }, 'Refresh'),
        h('button.btn.small#models-close', { type: 'button', onclick: () => this.close() }, 'Close')),
      h('section', { 'aria-label': 'On this computer' }, h('h3', null, 'On this computer'), this.localEl),
      h('section', { 'aria-label': 'Download from Hugging Face' }, h('h3', null, 'Download from Hugging Face'),
        this.tokenEl, this.reposEl, this.progressEl));
  }

  /** Shows the dialog and asks for the lists. */
  open() {
    if (typeof this.el.showModal === 'function') this.el.showModal();
    else this.el.setAttribute('open', '');
    return this.refresh();
  }

  /**
   * Asks again for the local models, the repos, the token and (unless
   * events are already telling it) the download.
   */
  async refresh(withState = true) {
    this.render();
    await Promise.all([
      this.host.local().then((l) => (this.local = l), (e) => this.fail(e)),
      this.host.repos().then((r) => (this.repos = r), (e) => this.fail(e)),
      this.host.token().then((t) => (this.tokenInfo = t), () => undefined),
      withState ? this.host.state().then((d) => (this.dl = d), () => undefined) : undefined,
    ]);
    this.render();
  }

  /** Takes a hub:download event. A finished download refreshes the lists. */
  update(d: DownloadState) {
    this.events++;
    this.apply(d);
  }

  private apply(d: DownloadState) {
    const finished = this.dl.state === 'downloading' && d.state === 'done';
    this.dl = d;
    // A download that found the Hub out of reach: offline until a Refresh hears from it.
    if (d.state === 'error' && d.offline && this.repos) this.repos = this.repos.map((r) => ({ ...r, offline: r.offline ?? d.offline }));
    this.renderProgress();
    this.renderRepos();
    if (finished) {
      toast(`Downloaded ${d.repo}`, 'ok');
      void this.refresh(false);
    }
  }

  private fail(e: unknown) {
    toast(errorText(e), 'error');
  }

  private render() {
    this.renderLocal();
    this.renderRepos();
    this.renderToken();
    this.renderProgress();
  }

  private renderLocal() {
    if (this.local == null) {
      replace(this.localEl, h('p.muted', null, 'Looking for Gemma 3n and Gemma 4 models…'));
      return;
    }
    if (!this.local.length) {
      replace(this.localEl, h('p.muted#no-local', null, 'No Gemma 3n or Gemma 4 model found in the Hugging Face cache, the folders opened before, Ollama or LM Studio. Download one below, or open a folder.'));
      return;
    }
    replace(this.localEl, h('ul.model-list', null, this.local.map((m) => h('li.model-row', { dataset: { spec: m.spec, source: m.source } },
      h('div.model-row-main', null,
        h('b', { title: m.path }, m.name),
        m.family ? h('span.badge.info.family', { dataset: { family: m.family } }, familyName(m.family)) : null,
        h('span.muted', null, ` ${SOURCES[m.source] ?? m.source} · ${m.format}${m.quant ? ` ${m.quant}` : ''} · ${fmtBytes(m.size_bytes)}`),
        h('span.modalities', null, towerBadges(m))),
      h('button.btn.small.primary', { type: 'button', onclick: () => this.load(m.spec) }, 'Load')))));
  }

  private renderRepos() {
    if (this.repos == null) {
      replace(this.reposEl, h('p.muted', null, 'Asking the Hub for sizes…'));
      return;
    }
    const busy = this.dl.state === 'downloading';
    const offline = this.offline();
    const list = h('ul.model-list', null, this.repos.map((r) => {
      const mine = busy && this.dl.repo === r.repo;
      const size = r.offline ? h('span.muted', null, ' size unknown while offline')
        : r.error ? h('span.err', { title: r.error }, ` size unknown: ${r.error}`) : h('span.muted', null, ` ${fmtBytes(r.size_bytes)} · ${r.files} files`);
      return h('li.model-row', { dataset: { repo: r.repo } },
        h('div.model-row-main', null,
          h('b', null, r.repo),
          r.family ? h('span.badge.info.family', { dataset: { family: r.family } }, familyName(r.family)) : null,
          h('span.muted', null, ` ${r.title}`), size,
          r.gated ? h('span.badge.warn', { title: 'accept the licence on the Hub and give a token' }, 'gated') : null,
          r.path ? h('span.badge.ok', { title: r.path }, 'downloaded') : null),
        r.path ? h('button.btn.small.primary', { type: 'button', onclick: () => this.load(r.repo) }, 'Load') : null,
        h('button.btn.small', { type: 'button', disabled: busy || !!offline, title: offline ? `${offline}: Refresh once it is back` : '', dataset: { action: 'download' }, onclick: () => this.download(r.repo) },
          mine ? 'Downloading…' : r.path ? 'Check again' : 'Download'));
    }));
    const details = this.repos.filter((r) => r.offline && r.error).map((r) => `${r.repo}: ${r.error}`);
    if (this.dl.state === 'error' && this.dl.offline) details.push(`download of ${this.dl.repo}: ${this.dl.error ?? ''}`);
    replace(this.reposEl, offline ? offlineNote(offline, details) : null, list);
  }

  /** The plain message while the Hub cannot be reached ("" when it can). */
  private offline(): string {
    const r = this.repos?.find((r) => r.offline);
    return r?.offline ?? '';
  }

  private renderToken() {
    if (this.tokenInfo.present) {
      replace(this.tokenEl, h('span.muted', null, `Hugging Face token: ${this.tokenInfo.source === 'entered' ? 'entered for this session' : `from ${this.tokenInfo.source}`}`),
        h('button.btn.small', { type: 'button', onclick: () => { this.tokenInfo = { present: false }; this.renderToken(); } }, 'Change'));
      return;
    }
    const input = h('input#hub-token-input', { type: 'password', placeholder: 'hf_…', 'aria-label': 'Hugging Face token', autocomplete: 'off', spellcheck: false });
    replace(this.tokenEl,
      h('form.token-form', { onsubmit: (e: Event) => { e.preventDefault(); void this.saveToken(input.value); } },
        h('label', { for: 'hub-token-input' }, 'Token'), input, h('button.btn.small', { type: 'submit' }, 'Use token')),
      h('p.small.muted', null, 'Gemma repos are gated: accept the licence on the repo\'s page, then give a token of that account (kept for this session only).'));
  }

  private renderProgress() {
    const d = this.dl;
    switch (d.state) {
      case 'idle':
        replace(this.progressEl);
        break;
      case 'downloading': {
        const f = d.total ? Math.min(1, (d.done ?? 0) / d.total) : 0;
        replace(this.progressEl,
          h('div', null, h('b', null, `Downloading ${d.repo}`), h('span.muted', null, d.file ? ` · ${d.stage ?? ''} ${d.file} (${d.file_index} of ${d.files})` : ' · asking the Hub')),
          h('progress#download-bar', { max: 1, value: f }),
          h('div.muted#download-text', null, downloadText(d)),
          h('button.btn.small#download-cancel', { type: 'button', onclick: () => this.cancel() }, 'Cancel'));
        break;
      }
      case 'done':
        replace(this.progressEl, h('span.ok', null, `${d.repo} is downloaded (${fmtBytes(d.total)}).`),
          h('button.btn.small.primary#download-load', { type: 'button', onclick: () => this.load(d.spec ?? d.repo ?? '') }, 'Load it'));
        break;
      default:
        // Offline, the repos' note says it once (with this error in its details).
        if (d.offline) {
          replace(this.progressEl, this.offline() ? null : offlineNote(d.offline, [d.error ?? ''], 'download-error'));
          break;
        }
        replace(this.progressEl, h('span.err#download-error', null, d.error ?? d.state),
          d.gated && d.licence_url ? h('a#licence-link', { href: d.licence_url, target: '_blank', rel: 'noopener noreferrer', title: d.licence_url, onclick: (e: Event) => openExternal(e, d.licence_url!) }, 'Accept the licence') : null);
    }
  }

  private load(spec: string) {
    this.host.open(spec);
    this.close();
  }

  close() {
    if (typeof this.el.close === 'function') this.el.close();
    else this.el.removeAttribute('open');
  }

  private async download(repo: string) {
    try {
      const seen = this.events;
      const d = await this.host.download(repo);
      // Events may have overtaken the answer (a quick failure): they are newer.
      if (this.events === seen) this.apply(d);
    } catch (e) {
      this.fail(e);
    }
  }

  private async cancel() {
    try {
      await this.host.cancel();
    } catch (e) {
      this.fail(e);
    }
  }

  private async saveToken(token: string) {
    if (!token.trim()) return;
    try {
      this.tokenInfo = await this.host.setToken(token);
      this.renderToken();
      this.repos = await this.host.repos();
      this.renderRepos();
    } catch (e) {
      this.fail(e);
    }
  }
}

/** In the window, links open in the system's browser (Wails ignores them otherwise). */
function openExternal(e: Event, url: string) {
  const rt = (globalThis as { runtime?: { BrowserOpenURL?: (u: string) => void } }).runtime;
  if (rt?.BrowserOpenURL) {
    e.preventDefault();
    rt.BrowserOpenURL(url);
  }
}

/** One plain message for a Hub out of reach, the raw errors (each once) behind a disclosure. */
function offlineNote(message: string, details: string[], id = 'hub-offline'): HTMLElement {
  return h('div.offline-note', { id, role: 'status' },
    h('span', null, message),
    h('details.offline-details', null, h('summary', null, 'Details'),
      h('ul', null, [...new Set(details)].map((d) => h('li', null, h('code', null, d))))));
}

function towerBadges(m: LocalModel) {
  const b = (on: boolean, name: string) => h('span.modality', { class: `modality ${on ? 'on' : 'off'}`, dataset: { tower: name } }, on ? `${name} ✓` : `no ${name}`);
  return [b(m.vision, 'vision'), b(m.audio, 'audio')];
}

/** "1.2 GB of 10.9 GB · 42 MB/s · about 3 min left". */
export function downloadText(d: DownloadState): string {
  const parts = [`${fmtBytes(d.done ?? 0)} of ${fmtBytes(d.total ?? 0)}`];
  if (d.total) parts[0] = `${Math.floor((100 * (d.done ?? 0)) / d.total)}% · ${parts[0]}`;
  if (d.bytes_per_sec) parts.push(`${fmtBytes(d.bytes_per_sec)}/s`);
  if (d.left_ms != null && d.left_ms >= 0 && (d.done ?? 0) < (d.total ?? 0)) parts.push(`about ${fmtLeft(d.left_ms)} left`);
  return parts.join(' · ');
}

/** A time left: "40 s", "3 min", "1 h 20 min". */
export function fmtLeft(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
