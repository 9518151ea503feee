import { ERROR_MS, toast } from '../src/ui/toast';
import { SchemaEditor } from '../src/ui/schemaEditor';
import { MediaPanel, type MediaHost } from '../src/ui/mediaPanel';
import { HistoryPanel } from '../src/ui/historyPanel';
import { settingsDiff, settingsSummary } from '../src/history';
import { inputKey, recordKey, staleness } from '../src/stale';
import { fromEngine, toEngine, type SchemaDraft } from '../src/schema';
import type { MediaAvailability, MediaItem } from '../src/types';
import { record, ticketSchema } from './fixtures';

describe('toasts', () => {
  afterEach(() => vi.useRealTimers());
  it('close by themselves, errors too', () => {
    vi.useFakeTimers();
    toast('saved', 'ok');
    toast('the service failed', 'error');
    const shown = () => [...document.querySelectorAll('.toast span')].map((e) => e.textContent);
    expect(shown()).toEqual(['saved', 'the service failed']);
    vi.advanceTimersByTime(4001);
    expect(shown()).toEqual(['the service failed']);
    vi.advanceTimersByTime(ERROR_MS);
    expect(shown()).toEqual([]);
  });
});

function editor(draft: SchemaDraft) {
  const host = {
    draft: () => draft, schemaName: () => 'ticket', presets: () => [], check: () => ({ ok: true, fields: 4, decisions: 5 }),
    change: (d: SchemaDraft) => (draft = d), loadPreset: () => {}, exportText: () => {},
  };
  const ed = new SchemaEditor(host);
  document.body.appendChild(ed.el);
  return { ed, now: () => draft };
}

describe('schema editor in JSON mode', () => {
  it('shows a JSON error inline, and the status does not say ready', () => {
    document.querySelectorAll('.toast').forEach((t) => t.remove());
    const { ed, now } = editor(fromEngine(ticketSchema));
    (ed.el.querySelector('#schema-json-toggle') as HTMLButtonElement).click();
    expect(ed.el.querySelector('.schema-status')!.textContent).not.toContain('ready');
    const ta = ed.el.querySelector('#schema-json') as HTMLTextAreaElement;
    ta.value = '{"fields": [';
    [...ed.el.querySelectorAll('button')].find((b) => b.textContent === 'Apply JSON')!.click();
    const err = ed.el.querySelector('#schema-json-error') as HTMLElement;
    expect(err.hidden).toBe(false);
    expect(err.textContent).toMatch(/^Not applied: .*JSON/);
    expect(ed.el.querySelector('.schema-status')!.textContent).toContain('not applied');
    expect(ed.el.querySelector('.schema-status')!.textContent).not.toContain('ready');
    expect(document.querySelector('.toast')).toBeNull();
    expect(ed.el.querySelector('#schema-json')).toBe(ta); // the text stays to be fixed
    ta.value = JSON.stringify({ ...ticketSchema, fields: ticketSchema.fields.slice(0, 2) });
    [...ed.el.querySelectorAll('button')].find((b) => b.textContent === 'Apply JSON')!.click();
    expect(now().fields).toHaveLength(2);
    expect(ed.el.querySelector('#schema-json-error')).toBeNull();
    expect(ed.el.querySelector('.schema-status')!.textContent).toContain('ready');
  });
});

const avail = (speaker: MediaAvailability['speaker']): MediaAvailability => ({
  camera: { available: true, devices: ['cam'] }, microphone: { available: true, devices: ['mic'] }, speaker, video: { available: true }, drivers: 'synthetic',
} as MediaAvailability);

function media(items: MediaItem[], a: MediaAvailability) {
  const calls: number[] = [];
  const host: MediaHost = {
    items: () => items, limits: () => undefined, availability: () => a, camera: () => ({ live: false, seq: 0 }), cameraFrame: () => null,
    recording: () => null, playback: () => ({ playing: false }), preview: () => undefined, error: () => null,
    remove: () => {}, clear: () => {}, snapshot: () => {}, toggleCamera: () => {}, record: (s) => calls.push(s), stopRecording: () => {},
    play: () => {}, stopPlayback: () => {}, refresh: () => {},
  };
  const p = new MediaPanel(host);
  p.render();
  return { p, calls };
}

const wav: MediaItem = { id: 'm1', kind: 'audio', name: 'tone.wav', source: 'upload', tokens: 188, duration_ms: 1000, waveform: [] } as unknown as MediaItem;

describe('media panel', () => {
  it('asks before a recording replaces an audio file', () => {
    const { p, calls } = media([wav], avail({ available: true }));
    (p.el.querySelector('#record') as HTMLButtonElement).click();
    expect(calls).toEqual([]);
    expect(p.el.querySelector('#record-confirm')!.textContent).toContain('replaces tone.wav');
    (p.el.querySelector('#record-keep') as HTMLButtonElement).click();
    expect(p.el.querySelector('#record-confirm')).toBeNull();
    expect(calls).toEqual([]);
    (p.el.querySelector('#record') as HTMLButtonElement).click();
    (p.el.querySelector('#record-replace') as HTMLButtonElement).click();
    expect(calls).toEqual([5]);
  });

  it('records at once when there is no audio to replace', () => {
    const { p, calls } = media([], avail({ available: true }));
    (p.el.querySelector('#record') as HTMLButtonElement).click();
    expect(calls).toEqual([5]);
  });

  it('says in plain words why there is no speaker, the driver\'s text behind "details"', () => {
    const alsa = 'oto: ALSA error at snd_pcm_open: No such file or directory';
    const { p } = media([], avail({ available: false, reason: 'no speaker: no sound output device was found', detail: alsa }));
    const li = p.el.querySelector('li[data-feature="speaker"]')!;
    expect(li.querySelector('.reason')!.textContent).toBe('no sound output device was found');
    expect(li.querySelector('details summary')!.textContent).toBe('details');
    expect(li.querySelector('details code')!.textContent).toBe(alsa);
  });
});

describe('history settings', () => {
  const base = record('run-1');
  const other = record('run-2', { settings: { ...base.settings, generation: { ...base.settings.generation, max_tokens: 8 } } });
  it('summarises and compares settings', () => {
    expect(settingsSummary(base.settings)).toBe('32 tok · temp 0 · top-k 64 · top-p 0.95 · seed 0 · schema prompt · batch 8');
    expect(settingsDiff(base.settings, other.settings)).toEqual(['max_tokens 32 → 8']);
    expect(settingsDiff(base.settings, { ...base.settings, scorer: { ...base.settings.scorer, calibration: 'ticket' } })).toEqual(['scorer calibration (none) → ticket']);
    expect(settingsDiff(base.settings, record('run-3').settings)).toEqual([]);
  });

  it('shows each run\'s settings and marks a run whose settings differ from the baseline', () => {
    const p = new HistoryPanel({
      history: () => [base, other, record('run-3')], baselineId: () => 'run-1', currentId: () => null, setBaseline: () => {},
      open: () => {}, remove: () => {}, clear: () => {}, exportText: () => {},
    });
    p.render();
    const row = (id: string) => p.el.querySelector(`tr[data-run="${id}"]`)!;
    expect(row('run-2').querySelector('.run-settings')!.textContent).toContain('8 tok');
    expect(row('run-1').querySelector('.run-settings')!.textContent).toContain('32 tok');
    expect(row('run-2').classList.contains('settings-differ')).toBe(true);
    expect(row('run-2').querySelector('.settings-diff')!.textContent).toBe('settings differ: max_tokens 32 → 8');
    expect(row('run-3').querySelector('.settings-diff')).toBeNull();
    expect(row('run-1').querySelector('.settings-diff')).toBeNull();
  });
});

describe('stale results', () => {
  const rec = record('run-1');
  const now = (text: string, media: string[] = [], schema: unknown = toEngine(fromEngine(ticketSchema))) => inputKey(text, media, schema);
  it('are not stale for the input they were computed for', () => {
    expect(staleness(recordKey(rec), now(rec.input.text))).toBe('');
    expect(staleness(recordKey(rec), now(` ${rec.input.text}\n`))).toBe('');
    expect(staleness(null, now('anything'))).toBe('');
  });
  it.each([
    ['the text', now('My parcel is late'), 'the input text changed'],
    ['the media', now(rec.input.text, ['m1']), 'the media changed'],
    ['the schema', now(rec.input.text, [], { ...ticketSchema, fields: ticketSchema.fields.slice(1) }), 'the schema changed'],
    ['two things', now('other', ['m1']), 'the input text and the media changed'],
  ])('are stale when %s changed', (_, key, msg) => {
    expect(staleness(recordKey(rec), key)).toContain(msg);
  });
});
