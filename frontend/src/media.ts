// What the media panel shows, computed from the media service's state: token
// costs against the prompt limit, waveforms, countdowns, limits.
import { fmtAbout } from './format';
import { isFinished, running, scorerStage, towerStage, type LiveRun } from './run';
import type { MediaItem, MediaLimits, ModelInfo, Peak, PromptPreview, RecordingState } from './types';

export const DEFAULT_LIMITS: MediaLimits = {
  max_images: 8,
  max_audio_ms: 30000,
  max_silent_video_ms: 60000,
  max_video_with_sound_ms: 30000,
  max_video_frames: 32,
  video_fps: 1,
  max_audio_sources: 1,
  max_upload_bytes: 256 << 20,
  image_tokens: 256,
  audio_tokens: 188,
  max_input_tokens: 8192,
  model_image_side: 768,
  record_seconds: [5, 10, 30],
};

/** Soft tokens of the items: 256 per image or video frame, 188 per audio source. */
export function mediaTokens(items: MediaItem[]): number {
  return items.reduce((n, it) => n + (it.tokens ?? 0), 0);
}

export interface Budget {
  /** Soft tokens of the media. */
  media: number;
  /** The whole prompt (text, media, questions), when a model counted it. */
  total: number | null;
  max: number;
  over: boolean;
  /** Fraction of the limit used by the media and by the rest (0..1 each, clamped). */
  mediaShare: number;
  restShare: number;
  text: string;
}

/**
 * The prompt's token budget: the media's soft tokens and, when a model
 * counted it, the whole prompt, against the 8,192-token limit.
 */
export function budget(items: MediaItem[], limits: MediaLimits | undefined, preview: PromptPreview | undefined): Budget {
  const max = preview?.max_tokens || limits?.max_input_tokens || DEFAULT_LIMITS.max_input_tokens;
  const media = preview && preview.tokens ? preview.media_tokens : mediaTokens(items);
  const total = preview && preview.tokens ? preview.tokens : null;
  const used = total ?? media;
  const n = (v: number) => v.toLocaleString('en-US');
  const parts = [];
  if (media) parts.push(`media ${n(media)}`);
  if (total != null) parts.push(`text and questions ${n(Math.max(0, total - media))}`);
  const text = total != null
    ? `${n(total)} of ${n(max)} prompt tokens${parts.length ? ` (${parts.join(' + ')})` : ''}`
    : media
      ? `${n(media)} media tokens of ${n(max)} (load a model to count the text)`
      : '';
  const clamp = (v: number) => Math.max(0, Math.min(1, v));
  const mediaShare = clamp(media / max);
  return { media, total, max, over: used > max, mediaShare, restShare: clamp(Math.min((used - media) / max, 1 - mediaShare)), text };
}

/** One line per kind: "2 images · 1 audio clip · 1 video (12 frames)". */
export function summary(items: MediaItem[]): string {
  const images = items.filter((i) => i.kind === 'image').length;
  const audio = items.filter((i) => i.kind === 'audio').length;
  const videos = items.filter((i) => i.kind === 'video');
  const parts = [];
  if (images) parts.push(`${images} image${images === 1 ? '' : 's'}`);
  if (audio) parts.push(`${audio} audio clip${audio === 1 ? '' : 's'}`);
  for (const v of videos) parts.push(`1 video (${v.frames?.length ?? 0} frames${v.sound ? ' and sound' : ''})`);
  return parts.join(' · ');
}

/** An SVG path of a min/max waveform in a width×height box (0 at mid-height). */
export function waveformPath(peaks: Peak[] | undefined, width: number, height: number): string {
  if (!peaks || !peaks.length) return '';
  const mid = height / 2;
  const step = width / peaks.length;
  const y = (v: number) => (mid - Math.max(-1, Math.min(1, v)) * mid).toFixed(1);
  const parts: string[] = [];
  peaks.forEach((p, i) => {
    const x = (i * step + step / 2).toFixed(1);
    // At least a hairline so silence still shows.
    const hi = Math.max(p.max, p.min + 0.01);
    parts.push(`M${x} ${y(hi)}V${y(p.min)}`);
  });
  return parts.join('');
}

/** A duration: "0.8 s", "12.5 s", "1:05". */
export function fmtDuration(ms: number | undefined): string {
  if (ms == null || !isFinite(ms)) return '—';
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

/** The recording's countdown: "Recording… 3.2 s left". */
export function countdown(r: RecordingState | null | undefined): string {
  if (!r || !r.recording) return '';
  const left = Math.max(0, r.total_ms - r.recorded_ms);
  return `Recording from ${r.device ?? 'the microphone'}… ${(left / 1000).toFixed(1)} s left`;
}

/** Fraction of the recording done (0..1). */
export function recordProgress(r: RecordingState | null | undefined): number {
  if (!r || !r.total_ms) return 0;
  return Math.max(0, Math.min(1, r.recorded_ms / r.total_ms));
}

/** What an item is, in a line: "64×48 PNG · upload", "1.5 s WAV · upload". */
export function describe(it: MediaItem): string {
  const parts: string[] = [];
  if (it.kind === 'image') parts.push(`${it.width}×${it.height}${it.format ? ` ${it.format}` : ''}`);
  if (it.kind === 'audio') parts.push(`${fmtDuration(it.duration_ms)}${it.format ? ` ${it.format}` : ''}`);
  if (it.kind === 'video') parts.push(`${fmtDuration(it.duration_ms)} ${it.width}×${it.height}${it.sound ? ' with sound' : ', silent'}`);
  parts.push(it.source);
  return parts.join(' · ');
}

/**
 * Why the ready model cannot take the media, as a run would be refused
 * (app.canTake): images and video need its vision tower, audio and a video's
 * sound its audio tower; '' when it can, or when the model does not list its
 * inputs. A text-only checkpoint (a gemma4_text folder) takes none.
 */
export function mediaRefusal(items: MediaItem[], model: ModelInfo): string {
  if (model.state !== 'ready' || !model.inputs) return '';
  const takes = (name: string) => model.inputs!.some((i) => i.name === name && i.supported);
  const seen = items.filter((it) => it.kind !== 'audio' && !takes('image'));
  if (seen.length) return `the model has no vision tower: remove the ${kinds(seen)}`;
  const heard = items.filter((it) => (it.kind === 'audio' || (it.kind === 'video' && it.sound)) && !takes('audio'));
  if (heard.length) return `the model has no audio tower: remove the ${heard.some((it) => it.kind === 'video') ? 'video with sound' : 'audio'}`;
  return '';
}

/** "image", "2 images", "video", "image and video". */
function kinds(items: MediaItem[]): string {
  const images = items.filter((it) => it.kind === 'image').length;
  const parts = [images === 1 ? 'image' : images > 1 ? `${images} images` : '', items.some((it) => it.kind === 'video') ? 'video' : ''];
  return parts.filter((p) => p).join(' and ');
}

/** Keeps the order of current, adds items it lacks (from an upload's results). */
export function mergeItems(current: MediaItem[], added: MediaItem[]): MediaItem[] {
  const ids = new Set(current.map((i) => i.id));
  return current.concat(added.filter((i) => !ids.has(i.id)));
}

/** What the towers will take before a run, from their speed measured on this machine. */
export interface TowerForecast {
  /** Expected ms of the items not cached (0 when unmeasured or all cached). */
  ms: number;
  measured: boolean;
  cached: boolean;
  /** The line the media panel shows. */
  text: string;
  /** The few words the run bar shows. */
  short: string;
}

/** The towers' expected time for the items, or null when no model says it
 * (items the model cannot take, 0 tokens, go through no tower). */
export function towerForecast(items: MediaItem[]): TowerForecast | null {
  const ts = items.filter((i) => i.tower && i.tokens > 0);
  if (!ts.length) return null;
  const todo = ts.filter((i) => !i.tower!.cached);
  const device = `this machine's ${ts[0].tower!.device}`;
  if (!todo.length) {
    return { ms: 0, measured: true, cached: true, text: `The towers encoded ${ts.length === 1 ? 'this item' : 'these items'} before: their output is cached, no tower time.`, short: 'towers cached' };
  }
  const what = todo.length === 1 ? `The ${todo[0].kind === 'audio' ? 'audio clip' : todo[0].kind}` : `The ${todo.length} items`;
  const loads = todo.some((i) => i.tower!.loads) ? ', plus loading the tower the first time' : '';
  if (todo.some((i) => !i.tower!.measured)) {
    const cpu = ts[0].tower!.device === 'CPU' ? ' (on a CPU an image can take tens of seconds)' : '';
    return { ms: 0, measured: false, cached: false, short: 'towers not timed yet',
      text: `The towers' speed on ${device} is not measured yet: the first run times them${cpu}.` };
  }
  const ms = todo.reduce((n, i) => n + i.tower!.ms, 0);
  const basis = [...new Set(todo.map((i) => i.tower!.basis).filter(Boolean))].join('; ');
  return { ms, measured: true, cached: false, short: `towers ${fmtAbout(ms)}`,
    text: `${what} will take ${fmtAbout(ms)} in the towers on ${device}${loads} (measured here: ${basis}).` };
}

/** The run's progress for the run bar: the towers' share done, else what a side is doing. */
export interface RunProgress {
  text: string;
  /** 0..1, or null when the stage has no share to show. */
  fraction: number | null;
}

export function runProgress(r: LiveRun | null | undefined): RunProgress | null {
  if (!r || !running(r)) return null;
  const m = r.media;
  if (m && m.status === 'preparing') return { text: `Towers: ${towerStage(r)}`, fraction: m.fraction ?? null };
  if (r.scorer && !isFinished(r.scorer.status)) return { text: `Scorer: ${scorerStage(r)}`, fraction: r.scorer.total ? r.scorer.done / r.scorer.total : null };
  if (r.generator && !isFinished(r.generator.status)) return { text: `Generation: ${r.generator.status}, ${r.generator.tokens} tokens`, fraction: null };
  return null;
}
