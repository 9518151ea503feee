import { budget, countdown, describe as describeItem, fmtDuration, mergeItems, recordProgress, summary, waveformPath, DEFAULT_LIMITS } from '../src/media';
import { MediaPanel, type MediaHost } from '../src/ui/mediaPanel';
import { modalityLabel } from '../src/ui/modelBar';
import { TimingPanel } from '../src/ui/timingPanel';
import { applyUpdate, fromRecord, scorerStage, startRun } from '../src/run';
import type { MediaAvailability, MediaItem, PromptPreview, RunMedia } from '../src/types';
import { record } from './fixtures';

const image: MediaItem = {
  id: 'i1', kind: 'image', name: 'photo.png', source: 'upload', format: 'PNG', width: 64, height: 48, tokens: 256,
  thumb: '/media/i1/thumb.jpg', model_view: '/media/i1/model.png', note: '64×48 stretched to 768×768', added_ms: 1,
};
const audio: MediaItem = {
  id: 'a1', kind: 'audio', name: 'tone.wav', source: 'microphone', duration_ms: 1500, tokens: 188, sound: true,
  waveform: [{ min: -0.5, max: 0.5 }, { min: 0, max: 0 }, { min: -1, max: 0.25 }], added_ms: 2,
};
const video: MediaItem = {
  id: 'v1', kind: 'video', name: 'clip.mp4', source: 'file', width: 320, height: 240, duration_ms: 3000, tokens: 3 * 256 + 188, sound: true,
  frames: [0, 1, 2].map((i) => ({ ms: i * 1000, caption: `0:0${i}`, url: `/media/v1/frame/${i}.jpg` })), waveform: [{ min: -0.1, max: 0.1 }], added_ms: 3,
};
const preview = (tokens: number, media: number): PromptPreview => ({ text: '', tokens, media_tokens: media, images: 1, audio: true, max_tokens: 8192 });
const noDevices: MediaAvailability = {
  drivers: 'hardware',
  camera: { available: false, reason: 'no camera: no video capture device (/dev/video*) was found' },
  microphone: { available: false, reason: 'no microphone: the sound system offers only pseudo-devices' },
  speaker: { available: false, reason: 'no speaker: ALSA error at snd_pcm_open' },
  video: { available: true, devices: ['ffmpeg version 5.1'] },
};

describe('media logic', () => {
  it('counts the media against the prompt limit', () => {
    let b = budget([image, audio], DEFAULT_LIMITS, undefined);
    expect(b).toMatchObject({ media: 444, total: null, max: 8192, over: false });
    expect(b.text).toBe('444 media tokens of 8,192 (load a model to count the text)');
    b = budget([image, audio], DEFAULT_LIMITS, preview(700, 444));
    expect(b).toMatchObject({ media: 444, total: 700, over: false });
    expect(b.text).toBe('700 of 8,192 prompt tokens (media 444 + text and questions 256)');
    expect(b.mediaShare).toBeCloseTo(444 / 8192);
    b = budget([image], DEFAULT_LIMITS, preview(9000, 8448));
    expect(b.over).toBe(true);
    expect(b.mediaShare + b.restShare).toBeLessThanOrEqual(1.0000001);
    expect(budget([], DEFAULT_LIMITS, undefined).text).toBe('');
  });

  it('describes items and limits', () => {
    expect(summary([image, image, audio, video])).toBe('2 images · 1 audio clip · 1 video (3 frames and sound)');
    expect(describeItem(image)).toBe('64×48 PNG · upload');
    expect(describeItem(audio)).toBe('1.5 s · microphone');
    expect(describeItem(video)).toBe('3.0 s 320×240 with sound · file');
    expect(fmtDuration(65000)).toBe('1:05');
    expect(mergeItems([image], [audio, image]).map((i) => i.id)).toEqual(['i1', 'a1']);
  });

  it('draws waveforms and counts down recordings', () => {
    const d = waveformPath(audio.waveform, 30, 20);
    expect(d.match(/M/g)).toHaveLength(3);
    expect(d.startsWith('M5.0 5.0V15.0')).toBe(true); // ±0.5 around the middle
    expect(waveformPath([], 30, 20)).toBe('');
    const r = { recording: true, device: 'AudioTest', recorded_ms: 1800, total_ms: 5000 };
    expect(countdown(r)).toBe('Recording from AudioTest… 3.2 s left');
    expect(recordProgress(r)).toBeCloseTo(0.36);
    expect(countdown({ ...r, recording: false })).toBe('');
  });

  it('labels the model inputs from its towers and ffmpeg', () => {
    expect(modalityLabel('image', true, undefined, noDevices)).toEqual([true, 'image ✓', 'image: supported']);
    expect(modalityLabel('audio', false, 'this checkpoint has no audio tower', noDevices)[1]).toBe('no audio');
    const noFFmpeg = { ...noDevices, video: { available: false, reason: 'video input is unavailable: ffmpeg was not found on PATH' } };
    expect(modalityLabel('video', true, undefined, noFFmpeg)).toEqual([false, 'video ✗', 'video: the model takes it, but video input is unavailable: ffmpeg was not found on PATH']);
  });
});

function host(over: Partial<MediaHost> = {}): MediaHost & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    items: () => [image, audio, video],
    limits: () => DEFAULT_LIMITS,
    availability: () => noDevices,
    camera: () => ({ live: false, seq: 0 }),
    cameraFrame: () => null,
    recording: () => null,
    playback: () => ({ playing: false }),
    preview: () => preview(1400, 1400 - 200),
    error: () => null,
    remove: (id) => calls.push(`remove ${id}`),
    clear: () => calls.push('clear'),
    snapshot: () => calls.push('snapshot'),
    toggleCamera: () => calls.push('camera'),
    record: (s) => calls.push(`record ${s}`),
    stopRecording: () => calls.push('stop recording'),
    play: (id) => calls.push(`play ${id}`),
    stopPlayback: () => calls.push('stop playback'),
    refresh: () => calls.push('refresh'),
    ...over,
  };
}

describe('media panel', () => {
  it('previews exactly what the model receives, with token costs', () => {
    const p = new MediaPanel(host());
    p.render();
    const items = p.el.querySelectorAll('.media-item');
    expect([...items].map((i) => i.getAttribute('data-kind'))).toEqual(['image', 'audio', 'video']);
    const img = items[0].querySelector('.model-view img')!;
    expect(img.getAttribute('src')).toBe('/media/i1/model.png');
    expect(items[0].textContent).toContain('model input 768×768');
    expect(items[0].querySelector('.tokens')!.textContent).toBe('256 tokens');
    expect(items[1].querySelector('svg.waveform path')!.getAttribute('d')).toMatch(/^M/);
    expect(items[1].querySelector('.tokens')!.textContent).toBe('188 tokens');
    expect([...items[2].querySelectorAll('.frame figcaption')].map((c) => c.textContent)).toEqual(['0:00', '0:01', '0:02']);
    expect(items[2].querySelector('.tokens')!.textContent).toBe('956 tokens');
    expect(p.el.querySelector('#token-budget')!.textContent).toContain('1,400 of 8,192 prompt tokens');
  });

  it('shows missing devices with their reasons and disables what needs them', () => {
    const h = host();
    const p = new MediaPanel(h);
    p.render();
    expect((p.el.querySelector('#snapshot') as HTMLButtonElement).disabled).toBe(true);
    expect(p.el.querySelector('#snapshot')!.getAttribute('title')).toContain('no video capture device');
    expect((p.el.querySelector('#record') as HTMLButtonElement).disabled).toBe(true);
    const play = p.el.querySelector('.media-item[data-kind="audio"] .play') as HTMLButtonElement;
    expect(play.disabled).toBe(true);
    expect(p.el.querySelector('.media-item[data-kind="audio"] .no-speaker')!.textContent).toBe('no speaker: ALSA error at snd_pcm_open');
    const lines = [...p.el.querySelectorAll('#media-devices li')].map((l) => l.textContent);
    expect(lines).toContain('camera unavailable: no video capture device (/dev/video*) was found');
    expect(lines).toContain('speaker unavailable: ALSA error at snd_pcm_open');
    expect(lines).toContain('video (ffmpeg) ✓');
  });

  it('drives the camera, the microphone and playback', () => {
    const devices: MediaAvailability = { ...noDevices, drivers: 'synthetic', camera: { available: true }, microphone: { available: true }, speaker: { available: true } };
    let live = false;
    let rec: ReturnType<MediaHost['recording']> = null;
    const h = host({ availability: () => devices, camera: () => ({ live, seq: 4, device: 'VideoTest' }), cameraFrame: () => '/media/camera/live.jpg?seq=4', recording: () => rec });
    const p = new MediaPanel(h);
    p.render();
    (p.el.querySelector('#snapshot') as HTMLButtonElement).click();
    (p.el.querySelector('#camera-toggle') as HTMLButtonElement).click();
    (p.el.querySelector('#record-seconds') as HTMLSelectElement).value = '10';
    (p.el.querySelector('#record') as HTMLButtonElement).click();
    (p.el.querySelector('#record-replace') as HTMLButtonElement).click(); // the input's audio would be replaced
    (p.el.querySelector('.media-item[data-kind="audio"] .play') as HTMLButtonElement).click();
    (p.el.querySelector('.media-item[data-kind="image"] .icon.danger') as HTMLButtonElement).click();
    expect(h.calls).toEqual(['snapshot', 'camera', 'record 10', 'play a1', 'remove i1']);
    expect(p.el.textContent).toContain('synthetic devices');

    live = true;
    rec = { recording: true, device: 'AudioTest', recorded_ms: 2500, total_ms: 10000 };
    p.render();
    expect((p.el.querySelector('#camera-live') as HTMLElement).hidden).toBe(false);
    expect(p.el.querySelector('#camera-feed')!.getAttribute('src')).toBe('/media/camera/live.jpg?seq=4');
    p.frame('/media/camera/live.jpg?seq=5');
    expect(p.el.querySelector('#camera-feed')!.getAttribute('src')).toBe('/media/camera/live.jpg?seq=5');
    expect(p.el.querySelector('#camera-toggle')!.textContent).toBe('■ Stop camera');
    expect(p.el.querySelector('#record-countdown')!.textContent).toBe('Recording from AudioTest… 7.5 s left');
    (p.el.querySelector('#record-stop') as HTMLButtonElement).click();
    expect(h.calls.at(-1)).toBe('stop recording');
  });

  it('shows a refused file and an over-limit prompt', () => {
    const p = new MediaPanel(host({ error: () => '9.png: images 9 exceeds the limit of 8', preview: () => preview(9000, 8448) }));
    p.render();
    const err = p.el.querySelector('#media-error') as HTMLElement;
    expect(err.hidden).toBe(false);
    expect(err.textContent).toContain('images 9 exceeds the limit of 8');
    expect(p.el.querySelector('#token-budget')!.classList.contains('over')).toBe(true);
    expect(p.el.querySelector('#token-budget')!.textContent).toContain('over the limit');
  });
});

describe('media panel: replace, duplicates, whose list', () => {
  it('offers to replace the WAV with a video that has sound, naming what goes', () => {
    const wavOnly = [image, { ...audio, name: 'tone.wav', source: 'upload' as const }];
    const h = host({ items: () => wavOnly, replace: (p) => h.calls.push(`replace ${p}`), discard: (p) => h.calls.push(`discard ${p}`) });
    const p = new MediaPanel(h);
    p.render();
    expect((p.el.querySelector('#media-offer') as HTMLElement).hidden).toBe(true);
    p.offer([{ name: 'clip.mp4', error: 'clip.mp4 (soundtrack, besides tone.wav): audio sources 2 exceeds the limit of 1', limit: { limit: 'audio sources', value: 2, max: 1 },
      replace: { pending: 'p1', ids: ['a1'], names: ['tone.wav'], why: 'the input takes one audio source, and its soundtrack is one' } }]);
    const offer = p.el.querySelector('#media-offer') as HTMLElement;
    expect(offer.hidden).toBe(false);
    expect(offer.textContent).toContain('clip.mp4 was not added: the input takes one audio source, and its soundtrack is one.');
    expect(p.el.querySelector('#media-replace')!.textContent).toBe('Replace tone.wav with clip.mp4');
    expect(p.el.querySelector('#media-keep')!.textContent).toBe('Keep tone.wav');
    (p.el.querySelector('#media-replace') as HTMLButtonElement).click();
    expect(h.calls).toEqual(['replace p1']);
    expect(offer.hidden).toBe(true);
    // Keep drops the offer on the server too.
    p.offer([{ name: 'b.wav', error: 'x', replace: { pending: 'p2', ids: ['a1'], names: ['tone.wav'], why: 'w' } }]);
    (p.el.querySelector('#media-keep') as HTMLButtonElement).click();
    expect(h.calls).toEqual(['replace p1', 'discard p2']);
    // Results without an offer leave the panel as it is.
    p.offer([{ name: 'c.png', item: image }]);
    expect(offer.hidden).toBe(true);
  });

  it('names a video that a second video or a recording would take out', () => {
    const devices: MediaAvailability = { ...noDevices, microphone: { available: true } };
    const h = host({ items: () => [image, video], availability: () => devices });
    const p = new MediaPanel(h);
    p.render();
    p.offer([{ name: 'silent.mp4', error: 'videos 2 exceeds the limit of 1', replace: { pending: 'p3', ids: ['v1'], names: ['clip.mp4'], why: 'the input takes one video' } }]);
    expect(p.el.querySelector('#media-replace')!.textContent).toBe('Replace clip.mp4 (the whole video) with silent.mp4');
    (p.el.querySelector('#record') as HTMLButtonElement).click();
    expect(p.el.querySelector('#record-confirm')!.textContent).toContain('The recording replaces clip.mp4 (the whole video).');
    expect(h.calls).toEqual([]);
  });

  it('says whose the media list is', () => {
    const p = new MediaPanel(host({ mode: () => 'browser' }));
    p.render();
    expect(p.el.querySelector('#media-shared')!.textContent).toContain('Shared by every browser tab');
    const d = new MediaPanel(host({ mode: () => 'desktop' }));
    d.render();
    expect(d.el.querySelector('#media-shared')!.textContent).toContain('for this window');
  });
});

describe('runs with media', () => {
  const media = (over: Partial<RunMedia>): RunMedia => ({ status: 'preparing', done: 0, total: 2, images: 1, audio: true, soft_tokens: 444, note: 'The vision and audio towers ran once for this run.', ...over });

  it('shows the towers, then the scorer stages, live', () => {
    let run = startRun({ id: 'run-9', started_ms: 0, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true });
    run = applyUpdate(run, { id: 'run-9', elapsed_ms: 50, media: media({ stage: 'image 1' }) });
    expect(scorerStage(run)).toBe('waiting for the towers: image 1 (1 of 2)');
    const timing = { start_ms: 0, input_preparation_ms: 800, prefill_ms: 0, prefill_tokens_per_second: 0, prompt_tokens: 0, total_ms: 0 };
    run = applyUpdate(run, { id: 'run-9', elapsed_ms: 900, media: media({ status: 'done', done: 2, tower_ms: 790 }), scorer: { status: 'prefilling', done: 0, total: 4, timing } });
    expect(scorerStage(run)).toBe('input ready in 800 ms · prefilling the shared prefix');
    run = applyUpdate(run, { id: 'run-9', elapsed_ms: 950, scorer: { status: 'scoring', done: 0, total: 4, timing: { ...timing, prefill_ms: 40, branch_batches_ms: [5, 6] } } });
    expect(scorerStage(run)).toBe('prefill done in 40 ms · 2 branch batches done');
    expect(run.media?.tower_ms).toBe(790);
  });

  it('puts the shared tower time in the timing panel', () => {
    const rec = { ...record('run-1'), media: media({ status: 'done', done: 2, tower_ms: 1234 }) };
    const t = new TimingPanel();
    t.render(fromRecord(rec));
    expect(t.el.querySelector('#media-note')!.textContent).toContain('ran once');
    const rows = [...t.el.querySelectorAll('#timing-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    expect(rows).toContainEqual(['Media towers', '1.23 s · shared', '1.23 s · shared']);
  });
});
