// Input files picked or dropped in the browser (the window reads them in Go:
// app.System.ReadFiles). Text files become part of the input; images, audio
// and video are uploaded to the media service; other files are listed as not
// supported.
import type { InputFile } from './types';

export const MAX_TEXT_FILE_BYTES = 1 << 20;

const byExt: Record<string, InputFile['kind']> = {};
const add = (kind: InputFile['kind'], exts: string) => exts.split(' ').forEach((e) => (byExt[e] = kind));
add('text', 'txt md markdown json jsonl csv tsv log xml html htm yaml yml eml rst ini toml');
add('image', 'png jpg jpeg gif webp bmp');
add('audio', 'wav mp3 flac ogg m4a');
add('video', 'mp4 mov mkv webm avi');

/** A file's kind from its name, else its MIME type. */
export function classify(name: string, mime = ''): InputFile['kind'] {
  const dot = name.lastIndexOf('.');
  if (dot > 0) {
    const k = byExt[name.slice(dot + 1).toLowerCase()];
    if (k) return k;
  }
  for (const k of ['text', 'image', 'audio', 'video'] as const) {
    if (mime.startsWith(k + '/')) return k;
  }
  return 'other';
}

/** Reads a browser File as an input file. */
export async function readFile(f: File): Promise<InputFile> {
  const kind = classify(f.name, f.type);
  const out: InputFile = { name: f.name, size: f.size, kind, supported: false };
  if (kind === 'text') {
    if (f.size > MAX_TEXT_FILE_BYTES) {
      out.reason = `text file of ${f.size} bytes exceeds the limit of ${MAX_TEXT_FILE_BYTES}`;
      return out;
    }
    const buf = await bytesOf(f);
    try {
      out.text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
      out.supported = true;
    } catch {
      out.reason = 'not UTF-8 text';
    }
    return out;
  }
  out.reason = kind === 'other' ? 'not a text, image, audio or video file' : `${kind}: added as media`;
  return out;
}

/**
 * Splits picked or dropped files: text files are read here; everything else
 * goes to the media service, which recognises images, audio and video from
 * their content and says why it refuses the rest.
 */
export function splitFiles(files: File[]): { text: File[]; media: File[] } {
  const out = { text: [] as File[], media: [] as File[] };
  for (const f of files) (classify(f.name, f.type) === 'text' ? out.text : out.media).push(f);
  return out;
}

/** A refused media file as an input-file chip that says why. */
export function refusedFile(f: { name: string; size: number; type?: string }, reason: string): InputFile {
  return { name: f.name, size: f.size, kind: classify(f.name, f.type ?? ''), supported: false, reason };
}

/** The model's input: the typed text, then each text file under its name. */
export function composeInput(typed: string, files: InputFile[]): string {
  const parts = [typed.trim()].filter(Boolean);
  for (const f of files) {
    if (f.supported && f.text != null) parts.push(`[${f.name}]\n${f.text.trim()}`);
  }
  return parts.join('\n\n');
}

/** A blob's bytes (FileReader where Blob.arrayBuffer is missing). */
export function bytesOf(f: Blob): Promise<Uint8Array> {
  if (typeof f.arrayBuffer === 'function') return f.arrayBuffer().then((b) => new Uint8Array(b));
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(new Uint8Array(r.result as ArrayBuffer));
    r.onerror = () => reject(r.error);
    r.readAsArrayBuffer(f);
  });
}
