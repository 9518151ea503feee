// A text-only model (a gemma4_text folder such as the tiny Gemma 4 fixture)
// in the page: Run says why media it cannot take would be refused, and the
// model bar's figures keep their whole text in a title when they give way.
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS, mediaRefusal } from '../src/media';
import { ModelBar } from '../src/ui/modelBar';
import { MediaPanel, modelView, type MediaHost } from '../src/ui/mediaPanel';
import type { MediaItem, ModelInfo } from '../src/types';

const image: MediaItem = { id: 'i1', kind: 'image', name: 'photo.png', source: 'upload', width: 64, height: 48, tokens: 256, added_ms: 1 };
const image2: MediaItem = { ...image, id: 'i2', name: 'other.png' };
const clip: MediaItem = { id: 'a1', kind: 'audio', name: 'tone.wav', source: 'upload', duration_ms: 1000, tokens: 188, sound: true, added_ms: 2 };
const silent: MediaItem = { id: 'v1', kind: 'video', name: 'clip.mp4', source: 'file', width: 32, height: 24, duration_ms: 2000, tokens: 512, sound: false, added_ms: 3 };
const loud: MediaItem = { ...silent, id: 'v2', sound: true };

/** A ready model taking text, and images and audio as given. */
function model(vision: boolean, audio: boolean, inputs = true): ModelInfo {
  const note = (t: string) => `this checkpoint has no ${t} tower`;
  return {
    state: 'ready', name: 'gemma4-synthetic-tiny', family: 'gemma4', random_weights: false, builtin: false, params: 385446, layers: 6, load_ms: 208,
    size_bytes: 1.77e6,
    inputs: inputs ? [
      { name: 'text', supported: true },
      { name: 'image', supported: vision, note: vision ? undefined : note('vision') },
      { name: 'audio', supported: audio, note: audio ? undefined : note('audio') },
      { name: 'video', supported: vision, note: vision ? undefined : note('vision') },
    ] : undefined,
  };
}

describe('media the model cannot take', () => {
  it.each([
    ['text only, an image', model(false, false), [image], 'the model has no vision tower: remove the image'],
    ['text only, two images and a video', model(false, false), [image, image2, silent], 'the model has no vision tower: remove the 2 images and video'],
    ['text only, a clip', model(false, false), [clip], 'the model has no audio tower: remove the audio'],
    ['vision only, a video with sound', model(true, false), [loud], 'the model has no audio tower: remove the video with sound'],
    ['vision only, a silent video and an image', model(true, false), [silent, image], ''],
    ['audio only, a clip', model(false, true), [clip], ''],
    ['both towers, everything', model(true, true), [image, clip, loud], ''],
    ['text only, no media', model(false, false), [], ''],
    ['inputs not listed', model(false, false, false), [image], ''],
    ['still loading', { ...model(false, false), state: 'loading' as const }, [image], ''],
  ])('%s', (_, m, items, want) => expect(mediaRefusal(items, m)).toBe(want));
});

describe('the model bar of a Gemma 4 folder', () => {
  it('names the family, marks image and audio off with the reason, and titles the figures', () => {
    const b = new ModelBar({ model: () => model(false, false), mode: () => 'browser', availability: () => undefined, loadBuiltin() {}, loadFolder() {}, chooseFolder() {} });
    b.render();
    expect(b.el.querySelector('#model-family')!.textContent).toBe('Gemma 4');
    const off = [...b.el.querySelectorAll('.modality.off')].map((e) => [e.textContent, e.getAttribute('title')]);
    expect(off).toEqual([
      ['no image', 'image: this checkpoint has no vision tower'],
      ['no audio', 'audio: this checkpoint has no audio tower'],
      ['no video', 'video: this checkpoint has no vision tower'],
    ]);
    const figures = b.el.querySelector('#model-figures')!;
    expect(figures.getAttribute('title')).toBe('385.4 K params · 1.8 MB · 6 layers · loaded in 208 ms');
    expect(figures.textContent!.trim()).toBe(figures.getAttribute('title'));
  });
});

describe("an image's view as the loaded model receives it", () => {
  it("captions Gemma 4's aspect-keeping view with its size once loaded", () => {
    const fig = modelView({ ...image, model_view: '/media/i1/model.png' }, () => {});
    const img = fig.querySelector('img')!;
    expect(img.getAttribute('src')).toBe('/media/i1/model.png');
    expect(fig.querySelector('figcaption')!.textContent).toBe('model input 768×768');
    Object.defineProperty(img, 'naturalWidth', { value: 672 });
    Object.defineProperty(img, 'naturalHeight', { value: 480 });
    img.dispatchEvent(new Event('load'));
    expect(fig.querySelector('figcaption')!.textContent).toBe('model input 672×480');
  });

  it('leaves no broken image when the server has no view (the model takes no images)', () => {
    const fig = modelView({ ...image, model_view: '/media/i1/model.png' }, () => {});
    const box = document.createElement('div');
    box.appendChild(fig);
    fig.querySelector('img')!.dispatchEvent(new Event('error'));
    expect(box.querySelector('.model-view')).toBeNull();
  });

  it('shows no view without a view URL', () => {
    const items = [{ ...image, tokens: 0, thumb: '/media/i1/thumb.jpg', note: '40×30 (gemma4-synthetic-tiny takes no images)' },
      { ...image2, model_view: '/media/i2/model.png' }];
    const host = {
      items: () => items, limits: () => DEFAULT_LIMITS, availability: () => undefined, camera: () => ({ live: false, seq: 0 }),
      cameraFrame: () => null, recording: () => null, playback: () => ({ playing: false }), preview: () => undefined, error: () => null,
      remove() {}, clear() {}, snapshot() {}, toggleCamera() {}, record() {}, stopRecording() {}, play() {}, stopPlayback() {}, refresh() {},
    } as unknown as MediaHost;
    const p = new MediaPanel(host);
    p.render();
    const [none, one] = [...p.el.querySelectorAll('.media-item')];
    expect(none.querySelector('.model-view')).toBeNull();
    expect(none.querySelector('figure.original img')!.getAttribute('src')).toBe('/media/i1/thumb.jpg');
    expect(none.textContent).toContain('takes no images');
    expect(one.querySelector('.model-view img')!.getAttribute('src')).toBe('/media/i2/model.png');
  });
});
