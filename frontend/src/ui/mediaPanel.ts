// The input's media: previews of exactly what the model receives (the
// 768×768 image, the 16 kHz waveform, the sampled video frames with their
// times), their token cost against the prompt limit, the camera (snapshot
// and live feed), the microphone (recording with a countdown) and playback.
import { budget, countdown, describe, fmtDuration, recordProgress, summary, towerForecast, waveformPath } from '../media';
import type { CameraState, Feature, MediaAvailability, MediaItem, MediaLimits, MediaResult, PlaybackState, PromptPreview, RecordingState } from '../types';
import { h, replace } from './dom';

export interface MediaHost {
  items(): MediaItem[];
  limits(): MediaLimits | undefined;
  availability(): MediaAvailability | undefined;
  camera(): CameraState;
  /** The URL of the latest live frame. */
  cameraFrame(): string | null;
  recording(): RecordingState | null;
  playback(): PlaybackState;
  preview(): PromptPreview | undefined;
  /** The last refused file or device error, shown until the next change. */
  error(): string | null;
  remove(id: string): void;
  clear(): void;
  snapshot(): void;
  toggleCamera(): void;
  record(seconds: number): void;
  stopRecording(): void;
  play(id: string): void;
  stopPlayback(): void;
  refresh(): void;
  /** Adds an offer's file in place of the items it names (MediaResult.replace). */
  replace?(pending: string): void;
  /** Drops an offer: the items it would replace stay. */
  discard?(pending: string): void;
  /** Where the page runs: the list is the server's, shared by every tab (browser) or the window's. */
  mode?(): 'desktop' | 'browser';
}

/** Says whose the media list is: the Media service keeps one list for every page it serves. */
export function sharedLine(mode: 'desktop' | 'browser'): string {
  return mode === 'browser'
    ? 'Shared by every browser tab on this server: changes here show in each.'
    : 'Kept by the app for this window until it closes.';
}

/** The items a recording replaces: the audio clip, or a video with its soundtrack. */
export function soundItems(items: MediaItem[]): MediaItem[] {
  return items.filter((i) => i.kind === 'audio' || (i.kind === 'video' && i.sound));
}

/** "tone.wav", "clip.mp4 (the whole video)" for the items a replace takes out. */
function replacedNames(items: MediaItem[], ids: string[], names: string[]): string {
  return names.map((n, k) => (items.find((i) => i.id === ids[k])?.kind === 'video' ? `${n} (the whole video)` : n)).join(', ');
}

const SVG = 'http://www.w3.org/2000/svg';

/** A waveform as an SVG element. */
export function waveformSVG(peaks: MediaItem['waveform'], width = 240, height = 48): SVGSVGElement {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('class', 'waveform');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'waveform of the 16 kHz audio the model hears');
  const mid = document.createElementNS(SVG, 'line');
  mid.setAttribute('x1', '0');
  mid.setAttribute('x2', String(width));
  mid.setAttribute('y1', String(height / 2));
  mid.setAttribute('y2', String(height / 2));
  mid.setAttribute('class', 'wave-mid');
  const path = document.createElementNS(SVG, 'path');
  path.setAttribute('d', waveformPath(peaks, width, height));
  path.setAttribute('class', 'wave-path');
  svg.append(mid, path);
  return svg;
}

/** "camera", "microphone", "speaker", "video" with why one is unavailable. */
function featureLine(name: string, f: Feature | undefined) {
  if (!f) return h('li', { class: 'dev dev-unknown', dataset: { feature: name } }, `${name}: checking…`);
  if (f.available) return h('li', { class: 'dev dev-on', dataset: { feature: name }, title: (f.devices ?? []).join(', ') }, `${name} ✓`);
  return h('li', { class: 'dev dev-off', dataset: { feature: name }, title: f.reason ?? '' }, `${name} unavailable: `, h('span.reason', null, (f.reason ?? 'unknown').replace(/^no \w+: /, '')),
    f.detail ? h('details.dev-detail', null, h('summary', null, 'details'), h('code', null, f.detail)) : null);
}

export class MediaPanel {
  readonly el: HTMLElement;
  private bar: HTMLElement;
  private live: HTMLElement;
  private liveImg: HTMLImageElement;
  private rec: HTMLElement;
  private list: HTMLElement;
  private budgetEl: HTMLElement;
  private errEl: HTMLElement;
  private devices: HTMLElement;
  private viewer: HTMLDialogElement;
  private seconds: HTMLSelectElement;
  private shownItems = '';
  /** A recording would replace this audio file: the bar asks first. */
  private confirmReplace: string | null = null;
  /** A refused file that could replace the items holding its place. */
  private offerResult: MediaResult | null = null;
  private offerEl: HTMLElement;
  private sharedEl: HTMLElement;
  private towerEl: HTMLElement;

  constructor(private host: MediaHost) {
    this.bar = h('div.media-bar');
    this.seconds = h('select#record-seconds', { 'aria-label': 'Recording length' });
    this.liveImg = h('img#camera-feed', { alt: 'live camera', width: 320, height: 240 });
    this.live = h('div.camera-live#camera-live', { hidden: true }, this.liveImg, h('span.small.muted.live-label'));
    this.rec = h('div.recording#recording', { hidden: true });
    this.list = h('ul.media-items#media-items', { 'aria-label': 'Media the model receives' });
    this.budgetEl = h('div.budget#token-budget');
    this.errEl = h('div.media-error#media-error', { role: 'alert', hidden: true });
    this.offerEl = h('div.confirm.media-offer#media-offer', { role: 'alert', hidden: true });
    this.sharedEl = h('p.small.muted.media-shared#media-shared');
    this.towerEl = h('p.small.tower-estimate#tower-estimate', { hidden: true });
    this.devices = h('ul.devices#media-devices', { 'aria-label': 'Media devices' });
    this.viewer = h('dialog.viewer#media-viewer', { onclick: (e: Event) => { if (e.target === this.viewer) this.viewer.close(); } });
    this.el = h('div.media#media', null, this.bar, this.offerEl, this.errEl, this.live, this.rec, this.list, this.budgetEl, this.towerEl, this.sharedEl, this.devices, this.viewer);
  }

  render() {
    this.renderBar();
    this.renderLive();
    this.renderRecording();
    this.renderItems();
    this.renderBudget();
    this.renderOffer();
    const err = this.host.error();
    this.errEl.hidden = !err;
    this.errEl.textContent = err ?? '';
    this.sharedEl.textContent = sharedLine(this.host.mode?.() ?? 'browser');
    this.sharedEl.title = 'The media list is the Verdict server\'s, not this tab\'s: every page open on it sees and runs the same images, audio and video.';
    const f = towerForecast(this.host.items());
    this.towerEl.hidden = !f;
    this.towerEl.textContent = f?.text ?? '';
    this.towerEl.classList.toggle('slow', !!f && (!f.measured || f.ms >= 10000));
    const a = this.host.availability();
    replace(this.devices, featureLine('camera', a?.camera), featureLine('microphone', a?.microphone), featureLine('speaker', a?.speaker),
      featureLine('video (ffmpeg)', a?.video),
      a ? h('li.dev', null, h('button.btn.link.small#refresh-devices', { type: 'button', title: 'Look for devices and ffmpeg again', onclick: () => this.host.refresh() }, 'check again'),
        a.drivers === 'synthetic' ? h('span.badge.warn', { title: 'VERDICT_CAPTURE=synthetic: test drivers (colour bars, a 480 Hz tone)' }, 'synthetic devices') : null) : null);
  }

  /** The live frame changed (called at the feed's rate, without a full render). */
  frame(url: string | null) {
    if (url && this.liveImg.getAttribute('src') !== url) this.liveImg.src = url;
  }

  private renderBar() {
    const a = this.host.availability();
    const cam = this.host.camera();
    const rec = this.host.recording();
    const limits = this.host.limits();
    const camOK = !!a?.camera.available;
    const micOK = !!a?.microphone.available;
    const camWhy = a ? (camOK ? '' : a.camera.reason ?? 'no camera') : 'checking the devices…';
    const micWhy = a ? (micOK ? '' : a.microphone.reason ?? 'no microphone') : 'checking the devices…';
    const choices = limits?.record_seconds ?? [5, 10, 30];
    if (this.seconds.options.length !== choices.length) {
      replace(this.seconds, choices.map((s) => h('option', { value: String(s) }, `${s} s`)));
    }
    this.seconds.disabled = !micOK || !!rec?.recording;
    replace(this.bar,
      h('span.media-label', null, 'Media'),
      h('button.btn.small#snapshot', { type: 'button', disabled: !camOK, title: camOK ? 'Take a picture: it becomes an input image' : camWhy, onclick: () => this.host.snapshot() }, 'Snapshot'),
      h('button.btn.small#camera-toggle', { type: 'button', disabled: !camOK && !cam.live, 'aria-pressed': String(cam.live), title: camOK ? 'Show the camera live (about 3 frames a second)' : camWhy, onclick: () => this.host.toggleCamera() }, cam.live ? '■ Stop camera' : '● Live camera'),
      h('span.sep'),
      rec?.recording
        ? h('button.btn.small.danger#record-stop', { type: 'button', title: 'Stop early: what was recorded becomes the input audio', onclick: () => this.host.stopRecording() }, '■ Stop recording')
        : h('button.btn.small#record', { type: 'button', disabled: !micOK, title: micOK ? 'Record from the microphone: the clip becomes the input audio' : micWhy, onclick: () => this.askRecord() }, '● Record'),
      this.seconds,
      this.confirmReplace != null && !rec?.recording
        ? h('span.confirm#record-confirm', { role: 'alert' },
          `The recording replaces ${this.confirmReplace}. `,
          h('button.btn.small.danger#record-replace', { type: 'button', onclick: () => this.startRecording() }, 'Record and replace'),
          h('button.btn.small#record-keep', { type: 'button', onclick: () => { this.confirmReplace = null; this.renderBar(); } }, 'Keep it'))
        : null,
      h('span.spacer'),
      this.host.items().length ? h('button.btn.small.link#clear-media', { type: 'button', onclick: () => this.host.clear() }, 'Remove all media') : null);
  }

  /** Records at once, or first asks when the recording would replace the audio source. */
  private askRecord() {
    const sound = soundItems(this.host.items());
    if (!sound.length) return this.startRecording();
    this.confirmReplace = replacedNames(sound, sound.map((a) => a.id), sound.map((a) => a.name));
    this.renderBar();
  }

  /**
   * Takes the outcome of adding files: a refusal that a replace would undo
   * becomes the offer shown (the server keeps the latest one only).
   */
  offer(rs: MediaResult[]) {
    const o = [...rs].reverse().find((r) => r.replace);
    if (!o) return;
    this.offerResult = o;
    this.renderOffer();
  }

  private renderOffer() {
    const o = this.offerResult;
    this.offerEl.hidden = !o;
    if (!o?.replace) return replace(this.offerEl);
    const rp = o.replace;
    const names = replacedNames(this.host.items(), rp.ids, rp.names);
    const done = () => {
      this.offerResult = null;
      this.renderOffer();
    };
    replace(this.offerEl,
      h('span', null, `${o.name} was not added: ${rp.why}. `),
      h('button.btn.small.danger#media-replace', { type: 'button', onclick: () => { done(); this.host.replace?.(rp.pending); } }, `Replace ${names} with ${o.name}`),
      h('button.btn.small#media-keep', { type: 'button', onclick: () => { done(); this.host.discard?.(rp.pending); } }, `Keep ${rp.names.join(', ')}`));
  }

  private startRecording() {
    this.confirmReplace = null;
    this.host.record(Number(this.seconds.value));
    this.renderBar();
  }

  private renderLive() {
    const cam = this.host.camera();
    this.live.hidden = !cam.live;
    const label = this.live.querySelector('.live-label');
    if (label) label.textContent = cam.live ? `${cam.device ?? 'camera'} · live preview, about 3 frames a second (the snapshot is full size)` : '';
    if (cam.live) this.frame(this.host.cameraFrame());
    else this.liveImg.removeAttribute('src');
  }

  private renderRecording() {
    const r = this.host.recording();
    this.rec.hidden = !r?.recording;
    if (!r?.recording) return;
    replace(this.rec,
      h('span.rec-dot', { 'aria-hidden': 'true' }),
      h('span#record-countdown', null, countdown(r)),
      h('div.rec-track', null, h('div.rec-fill', { style: { width: `${recordProgress(r) * 100}%` } })));
  }

  private renderItems() {
    const items = this.host.items();
    const pb = this.host.playback();
    const a = this.host.availability();
    const speakerWhy = a ? (a.speaker.available ? '' : a.speaker.reason ?? 'no speaker') : 'checking the speaker…';
    // Previews are images: rebuild only when the items or the playback change.
    const key = JSON.stringify([items.map((i) => [i.id, i.tokens]), pb.playing ? pb.id : '', speakerWhy]);
    if (key === this.shownItems) return;
    this.shownItems = key;
    if (!items.length) {
      const hint = 'Images, audio and video: drop them here or add files, take a snapshot or record. Each image reaches the model stretched to 768×768 (256 tokens); audio as 16 kHz mono (188 tokens); video as a frame a second with its soundtrack.';
      replace(this.list, h('li.media-empty.muted.small', { title: hint },
        'Images, audio and video: drop them here or add files, take a snapshot or record. Each image reaches the model stretched to 768×768 (256 tokens); audio as 16 kHz mono (188 tokens); video as a frame a second with its soundtrack.'));
      return;
    }
    replace(this.list, items.map((it) => this.item(it, pb, speakerWhy)));
  }

  private item(it: MediaItem, pb: PlaybackState, speakerWhy: string): HTMLElement {
    const remove = h('button.icon.danger', { type: 'button', 'aria-label': `Remove ${it.name}`, title: 'Remove', onclick: () => this.host.remove(it.id) }, '×');
    const head = h('div.media-head', null,
      h('span.tag', null, it.kind),
      h('b.media-name', { title: it.name }, it.name),
      h('span.tokens', { title: 'soft tokens the model receives' }, `${it.tokens.toLocaleString('en-US')} tokens`),
      remove);
    const meta = h('div.media-meta.small.muted', null, describe(it), it.note ? h('div.media-note', null, it.note) : null);
    let body: HTMLElement | null = null;
    if (it.kind === 'image') {
      body = h('div.media-previews', null,
        it.model_view ? modelView(it, () => this.open(it)) : null,
        it.thumb ? h('figure.original', null, h('img', { src: it.thumb, alt: `${it.name}, original` }), h('figcaption', null, `original ${it.width}×${it.height}`)) : null);
    } else if (it.kind === 'audio') {
      body = h('div.media-previews', null, this.audio(it, pb, speakerWhy));
    } else if (it.kind === 'video') {
      body = h('div.media-previews.video', null,
        h('div.frames', null, (it.frames ?? []).map((f) =>
          h('figure.frame', { dataset: { ms: String(f.ms) } }, h('img', { src: f.url, alt: `frame at ${f.caption}`, width: 96, height: 96 }), h('figcaption', null, f.caption)))),
        it.sound ? this.audio(it, pb, speakerWhy) : null);
    }
    return h('li.media-item', { dataset: { id: it.id, kind: it.kind } }, head, body, meta);
  }

  private audio(it: MediaItem, pb: PlaybackState, speakerWhy: string): HTMLElement {
    const playing = pb.playing && pb.id === it.id;
    const play = playing
      ? h('button.btn.small.play', { type: 'button', onclick: () => this.host.stopPlayback() }, '■ Stop')
      : h('button.btn.small.play', { type: 'button', disabled: !!speakerWhy, title: speakerWhy || 'Play what the model hears (16 kHz mono)', onclick: () => this.host.play(it.id) }, '▶ Play');
    return h('div.audio-preview', null,
      waveformSVG(it.waveform),
      h('div.audio-side', null,
        play,
        h('span.small.muted', null, `${fmtDuration(it.duration_ms)} · 16 kHz mono`),
        speakerWhy ? h('span.small.no-speaker', { title: speakerWhy }, speakerWhy.startsWith('no speaker') ? speakerWhy : `no speaker: ${speakerWhy}`) : null));
  }

  private open(it: MediaItem) {
    replace(this.viewer,
      h('form', { method: 'dialog' },
        h('header.card-head', null, h('h2', null, it.name, h('span.sub', null, ' as the vision tower receives it')), h('button.icon', { 'aria-label': 'Close' }, '×')),
        h('img.full', { src: it.model_view, alt: `${it.name} as the vision tower receives it` }),
        h('p.small.muted', null, it.note ?? '')));
    if (typeof this.viewer.showModal === 'function') this.viewer.showModal();
    else this.viewer.setAttribute('open', '');
  }

  private renderBudget() {
    const items = this.host.items();
    const b = budget(items, this.host.limits(), this.host.preview());
    this.budgetEl.hidden = !b.text;
    this.budgetEl.classList.toggle('over', b.over);
    replace(this.budgetEl,
      h('div.budget-track', { title: `the prompt limit is ${b.max.toLocaleString('en-US')} tokens` },
        h('div.budget-media', { style: { width: `${b.mediaShare * 100}%` } }),
        h('div.budget-rest', { style: { width: `${b.restShare * 100}%` } })),
      h('span.small', null, items.length ? `${summary(items)} → ` : '', b.text, b.over ? ' — over the limit: remove some media or text' : ''));
  }
}

/**
 * The image the vision tower receives, its caption its size: 768×768 for
 * Gemma 3n (the default until the image loads), Gemma 4's processor keeps the
 * aspect ratio, so the caption follows the loaded image. A view the server
 * cannot give (the loaded model takes no images: the item's note says so)
 * leaves no broken image.
 */
export function modelView(it: MediaItem, open: () => void): HTMLElement {
  const caption = h('figcaption', null, 'model input 768×768');
  const img = h('img', { src: it.model_view, alt: `${it.name} as the model sees it`, width: 128, height: 128, onclick: open }) as HTMLImageElement;
  const fig = h('figure.model-view', { title: 'What the vision tower receives: click for full size' }, img, caption);
  img.addEventListener('load', () => {
    if (img.naturalWidth && img.naturalHeight) caption.textContent = `model input ${img.naturalWidth}×${img.naturalHeight}`;
  });
  img.addEventListener('error', () => fig.remove());
  return fig;
}
