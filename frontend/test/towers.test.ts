import { runProgress, towerForecast } from '../src/media';
import { applyUpdate, startRun } from '../src/run';
import type { MediaItem, TowerEstimate } from '../src/types';
import { InputPanel, type InputHost } from '../src/ui/inputPanel';
import { MediaPanel, type MediaHost } from '../src/ui/mediaPanel';

const item = (id: string, tower?: TowerEstimate, kind: MediaItem['kind'] = 'image'): MediaItem =>
  ({ id, kind, name: `${id}.png`, source: 'upload', tokens: 256, added_ms: 1, tower });
const measured = (ms: number, over: Partial<TowerEstimate> = {}): TowerEstimate =>
  ({ ms, measured: true, device: 'CPU', basis: '16.5 s an image, 2 timed', ...over });

describe('the towers before a run', () => {
  it('say how long the towers will take on this machine', () => {
    const one = towerForecast([item('a', measured(16500))])!;
    expect(one.text).toBe("The image will take about 17 s in the towers on this machine's CPU (measured here: 16.5 s an image, 2 timed).");
    expect(one.short).toBe('towers about 17 s');
    const two = towerForecast([item('a', measured(16500, { loads: true })), item('b', measured(16500)), item('c', measured(0, { cached: true }))])!;
    expect(two.ms).toBe(33000);
    expect(two.text).toMatch(/^The 2 items will take about 33 s in the towers on this machine's CPU, plus loading the tower the first time/);
  });

  it('say when the speed is not measured yet, or the outputs are cached', () => {
    const f = towerForecast([item('a', { ms: 0, measured: false, device: 'CPU' })])!;
    expect(f.measured).toBe(false);
    expect(f.text).toContain("not measured yet: the first run times them (on a CPU an image can take tens of seconds)");
    expect(towerForecast([item('a', measured(0, { cached: true }))])!.text).toContain('cached, no tower time');
    expect(towerForecast([item('a')])).toBeNull(); // no model loaded
    // an item the model cannot take (a text-only model: 0 tokens) has no tower time
    expect(towerForecast([{ ...item('a', { ms: 0, measured: false, device: 'CPU' }), tokens: 0 }])).toBeNull();
  });

  it('show in the media panel, marked when slow', () => {
    const host = { items: () => [item('a', measured(30000))], limits: () => undefined, availability: () => undefined, camera: () => ({ live: false, seq: 0 }),
      cameraFrame: () => null, recording: () => null, playback: () => ({ playing: false }), preview: () => undefined, error: () => null } as unknown as MediaHost;
    const p = new MediaPanel(host);
    p.render();
    const el = p.el.querySelector('#tower-estimate') as HTMLElement;
    expect(el.hidden).toBe(false);
    expect(el.textContent).toContain('about 30 s');
    expect(el.classList.contains('slow')).toBe(true);
  });
});

describe('the run bar while a run goes', () => {
  const started = { id: 'run-1', started_ms: 0, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true };
  const media = { status: 'preparing' as const, done: 0, total: 1, stage: 'image 1', images: 1, audio: false, soft_tokens: 256, note: '', block: 12, blocks: 86, item_ms: 3200, left_ms: 13300, fraction: 0.2 };

  it('shows the towers\' share done and time left', () => {
    let run = startRun(started);
    run = applyUpdate(run, { id: 'run-1', elapsed_ms: 3300, media });
    expect(runProgress(run)).toEqual({ text: 'Towers: image 1 (1 of 1) · block 12 of 86 · 3.20 s, about 13.3 s left', fraction: 0.2 });
    run = applyUpdate(run, { id: 'run-1', elapsed_ms: 20000, media: { ...media, status: 'done', fraction: 1 }, scorer: { status: 'prefilling', done: 0, total: 4 } });
    expect(runProgress(run)!.text).toMatch(/^Scorer: /);
    expect(runProgress(null)).toBeNull();
  });

  it('keeps it in the run bar, updated without rebuilding the buttons', () => {
    let progress = runProgress(applyUpdate(startRun(started), { id: 'run-1', elapsed_ms: 3300, media }));
    const host: InputHost = {
      input: () => 'x', files: () => [], setInput: () => {}, addFiles: () => {}, pickFiles: () => {}, removeFile: () => {}, mode: () => 'browser', chooseFiles: () => {},
      canRun: () => ({ ok: true, why: '' }), running: () => true, run: () => {}, stop: () => {}, inputTokensHint: () => '', progress: () => progress,
    };
    const p = new InputPanel(host);
    p.render();
    const stop = p.actions.querySelector('#stop-run');
    const el = p.actions.querySelector('#run-progress') as HTMLElement;
    expect(el.hidden).toBe(false);
    expect((el.querySelector('progress') as HTMLProgressElement).value).toBeCloseTo(0.2);
    progress = { text: 'Towers: image 1 (1 of 1) · block 40 of 86', fraction: 0.55 };
    p.renderProgress();
    expect(el.textContent).toBe('Towers: image 1 (1 of 1) · block 40 of 86');
    expect((el.querySelector('progress') as HTMLProgressElement).value).toBeCloseTo(0.55);
    expect(p.actions.querySelector('#stop-run')).toBe(stop);
    progress = null;
    p.renderProgress();
    expect(el.hidden).toBe(true);
  });
});
