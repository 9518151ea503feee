import { describe, expect, it } from 'vitest';
import { ModelBar, deviceLine, deviceWarning, replicaLines, residentSummary } from '../src/ui/modelBar';
import { SettingsDialog, deviceNote, plainDeviceReason } from '../src/ui/settingsDialog';
import { familyName } from '../src/ui/family';
import type { DeviceInfo, ModelInfo, Preferences, ReplicaInfo } from '../src/types';

const cpu: DeviceInfo = { requested: 'cpu', backend: 'cpu', name: 'AMD EPYC', cores: 16, simd: 'avx512' };
const fellBack: DeviceInfo = {
  ...cpu, requested: 'cuda', fallback: true,
  note: 'using the CPU: cuda: no usable libverdict_cuda.so (set VERDICT_CUDA_LIB, or put it next to the executable): /x/libverdict_cuda.so: no such file',
};
const gpu: DeviceInfo = { requested: 'cuda', backend: 'cuda', name: 'H200', memory_bytes: 141e9 };
const resident = { weights: 'q4', weight_bytes: 1.5e9, kv_positions: 131072, kv_bytes: 2.1e9, towers: [] as string[] };

function model(device?: DeviceInfo, state: ModelInfo['state'] = 'ready'): ModelInfo {
  return { state, name: 'gemma-3n-E2B-it', random_weights: false, builtin: false, params: 5.4e9, layers: 30, load_ms: 1200, device, resident: state === 'ready' ? resident : undefined };
}

function bar(m: ModelInfo) {
  const b = new ModelBar({ model: () => m, mode: () => 'browser', availability: () => undefined, loadBuiltin() {}, loadFolder() {}, chooseFolder() {} });
  b.render();
  return b.el;
}

describe('device line and resident summary', () => {
  it.each([
    [cpu, 'cpu · 16 cores AVX-512'],
    [{ ...cpu, cores: 1, simd: 'portable' }, 'cpu · 1 core portable'],
    [{ requested: 'cpu', backend: 'cpu' }, 'cpu'],
    [gpu, 'cuda · H200 · 141 GB'],
    [{ requested: 'cuda', backend: 'cuda' }, 'cuda'],
  ])('%o → %s', (d, want) => expect(deviceLine(d as DeviceInfo)).toBe(want));

  it('sums up the resident memory and the towers loaded', () => {
    expect(residentSummary(model(cpu))).toBe('1.5 GB q4 · KV 2.1 GB');
    expect(residentSummary({ ...model(cpu), resident: { ...resident, weights: 'f32', towers: ['vision', 'audio'] } })).toBe('1.5 GB f32 · KV 2.1 GB · vision + audio loaded');
    expect(residentSummary({ ...model(cpu), resident: { ...resident, ple_bytes: 4.03e9, towers: ['vision'] } })).toBe('1.5 GB q4 · KV 2.1 GB · per-layer table 4.0 GB · vision loaded');
    expect(residentSummary(model(cpu, 'loading'))).toBe('');
  });

  it('warns when the CPU stands in for a GPU', () => {
    expect(deviceWarning(cpu)).toBeNull();
    expect(deviceWarning(gpu)).toBeNull();
    expect(deviceWarning(fellBack)).toEqual({ text: 'cuda failed', level: 'warn' });
    expect(deviceWarning({ ...fellBack, requested: 'auto' })).toEqual({ text: 'no GPU', level: 'info' });
  });
});

describe('model bar device chip', () => {
  it('shows the device and what is resident', () => {
    const el = bar(model(gpu));
    expect(el.querySelector('#device-chip')!.textContent).toBe('cuda · H200 · 141 GB · 1.5 GB q4 · KV 2.1 GB');
    expect(el.querySelector('#device-fallback')).toBeNull();
  });

  it('shows the fallback as a warning with the reason', () => {
    const el = bar(model(fellBack));
    const chip = el.querySelector<HTMLElement>('#device-chip')!;
    expect(chip.hidden).toBe(false);
    const badge = el.querySelector<HTMLElement>('#device-fallback')!;
    expect(badge.textContent).toBe('cuda failed');
    expect(badge.className).toBe('badge warn');
    expect(badge.title).toContain('no usable libverdict_cuda.so');
    expect(chip.title).toContain('resident: 1.5 GB q4 · KV 2.1 GB');
  });

  it('shows the device while loading, and nothing without a model', () => {
    const loading = bar(model(fellBack, 'loading'));
    expect(loading.querySelector('#device-chip')!.textContent).toBe('cpu · 16 cores AVX-512cuda failed');
    expect(bar(model(undefined, 'none')).querySelector<HTMLElement>('#device-chip')!.hidden).toBe(true);
  });
});

describe('settings dialog device choice', () => {
  const prefs: Preferences = {
    run: { generation: { max_tokens: 96, temperature: 0, top_k: 64, top_p: 0.95, seed: 0, prompt: 'schema' }, scorer: { branch_batch: 8, temperature: 1 } },
    log_level: 'info', device: 'cuda',
  };

  it('explains what runs now', () => {
    expect(deviceNote(undefined).text).toBe('Chosen when a model loads.');
    expect(deviceNote(cpu)).toEqual({ text: 'Now: cpu · 16 cores AVX-512.', warn: false });
    const n = deviceNote(fellBack);
    expect(n.warn).toBe(true);
    expect(n.text).toBe('Now: cpu · 16 cores AVX-512 (asked: cuda). Verdict\'s GPU library (libverdict_cuda.so) is not next to the app or on the library path. The CPU runs the model.');
    expect(n.detail).toBe(fellBack.note);
    expect(deviceNote({ ...fellBack, requested: 'auto' }).warn).toBe(false);
    // A note no sentence rephrases is shown as it is.
    expect(deviceNote({ ...fellBack, note: 'using the CPU: cuda: something new' })).toEqual({ text: 'Now: cpu · 16 cores AVX-512 (asked: cuda). Using the CPU: cuda: something new', warn: true });
  });

  it.each([
    // The CUDA runtime without a driver: libcuda.so.1 does not load.
    ['using the CPU: cuda: the driver (CUDA 0) is older than this library\'s runtime (CUDA 12040)', 'No NVIDIA GPU driver found on this machine (libcuda could not be loaded).'],
    ['using the CPU: cuda: no CUDA device (driver version 0, runtime 12040)', 'No NVIDIA GPU driver found on this machine (libcuda could not be loaded).'],
    ['using the CPU: cuda: no usable libverdict_cuda.so (set VERDICT_CUDA_LIB, or put it next to the executable): /opt/v/libverdict_cuda.so: libcuda.so.1: cannot open shared object file: No such file or directory',
      'No NVIDIA GPU driver found on this machine (libcuda could not be loaded).'],
    ['using the CPU: cuda: no usable libverdict_cuda.so (set VERDICT_CUDA_LIB, or put it next to the executable): /x/libverdict_cuda.so: no such file; libverdict_cuda.so: libverdict_cuda.so: cannot open shared object file: No such file or directory',
      'Verdict\'s GPU library (libverdict_cuda.so) is not next to the app or on the library path.'],
    ['using the CPU: cuda: the driver (CUDA 11080) is older than this library\'s runtime (CUDA 12040)', 'The NVIDIA driver is older than this build needs (it supports CUDA 11.8, the build CUDA 12.4): update the driver.'],
    ['using the CPU: cuda: no CUDA device (driver version 12040, runtime 12040)', 'No NVIDIA GPU found on this machine.'],
    ['using the CPU: cuda: no device 2 (1 present)', 'There is no GPU 2: this machine has 1.'],
    ['using the CPU: cuda: device compute capability 7.5 is older than 8.0', 'The GPU is too old for Verdict (compute capability 7.5; it needs 8.0 or newer).'],
    ['using the CPU: cuda: ABI mismatch: the library implements backend ABI 7, this verdict needs 8; rebuild libverdict_cuda.so', 'The GPU library is from another version of Verdict: rebuild or reinstall it.'],
    ['using the CPU: loading on cuda failed: out of memory', 'Loading the model on the GPU failed.'],
    ['using the CPU: cuda: something new', ''],
  ])('says %j plainly', (note, want) => {
    expect(plainDeviceReason(note)).toBe(want);
  });

  it('keeps the raw note behind a details disclosure', () => {
    const d = new SettingsDialog({ prefs: () => prefs, save: async () => {}, defaults: async () => prefs, settingsPath: () => '', device: () => fellBack });
    d.open();
    const note = d.el.querySelector('#device-note')!;
    expect(note.firstChild!.textContent).toMatch(/^Now: .*Verdict's GPU library/);
    const det = note.querySelector('details')!;
    expect(det.open).toBe(false);
    expect(det.querySelector('code')!.textContent).toBe(fellBack.note);
  });

  it('offers the device and saves the choice', async () => {
    let saved: Preferences | undefined;
    const d = new SettingsDialog({ prefs: () => prefs, save: async (p) => { saved = p; }, defaults: async () => prefs, settingsPath: () => '', device: () => fellBack });
    document.body.append(d.el);
    d.open();
    const sel = d.el.querySelector<HTMLSelectElement>('select[name="device"]')!;
    expect([...sel.options].map((o) => o.value)).toEqual(['auto', 'cpu', 'cuda']);
    expect(sel.value).toBe('cuda');
    expect(d.el.querySelector('#device-note')!.className).toContain('warn');
    expect(d.el.querySelector('#device-note')!.textContent).toContain('no usable libverdict_cuda.so');
    sel.value = 'cpu';
    d.el.querySelector<HTMLButtonElement>('button[type="submit"]')!.click();
    await new Promise((r) => setTimeout(r, 0));
    expect(saved?.device).toBe('cpu');
  });

  it('keeps a cuda:N setting among the choices', () => {
    const d = new SettingsDialog({ prefs: () => ({ ...prefs, device: 'cuda:1' }), save: async () => {}, defaults: async () => prefs, settingsPath: () => '' });
    d.open();
    const sel = d.el.querySelector<HTMLSelectElement>('select[name="device"]')!;
    expect(sel.value).toBe('cuda:1');
    expect(d.el.querySelector('#device-note')!.textContent).toBe('Chosen when a model loads.');
  });
});

describe('model bar replicas (serve --devices)', () => {
  const g0: DeviceInfo = { ...gpu, requested: 'cuda:0' }, g1: DeviceInfo = { ...gpu, requested: 'cuda:1' };
  const reps: ReplicaInfo[] = [
    { device: g0, up: true, requests: 120, running: 3 },
    { device: g1, up: true, requests: 118, running: 2 },
  ];

  it('shows how many devices share the requests, and each in the title', () => {
    const el = bar({ ...model(g0), replicas: reps });
    expect(el.querySelector('#device-replicas')!.textContent).toBe(' × 2 devices');
    expect(el.querySelector('#replicas-down')).toBeNull();
    const title = el.querySelector<HTMLElement>('#device-chip')!.title;
    expect(title).toContain('cuda:0 · cuda · H200 · 141 GB: 120 answered, 3 running');
    expect(title).toContain('cuda:1 · cuda · H200 · 141 GB: 118 answered, 2 running');
  });

  it('warns when a device is down, with its error', () => {
    const down = [reps[0], { ...reps[1], up: false, error: 'cuda: stream failed (error 700)' }];
    const el = bar({ ...model(g0), replicas: down });
    const badge = el.querySelector<HTMLElement>('#replicas-down')!;
    expect(badge.textContent).toBe('1 of 2 down');
    expect(badge.title).toBe('cuda:1: cuda: stream failed (error 700)');
    expect(replicaLines(down)[1]).toBe('cuda:1 · cuda · H200 · 141 GB: down — cuda: stream failed (error 700); its requests ran again on the others');
  });

  it('shows nothing for one device', () => {
    const el = bar({ ...model(g0), replicas: [reps[0]] });
    expect(el.querySelector('#device-replicas')).toBeNull();
  });
});

describe('model family', () => {
  it.each([
    ['gemma3n', 'Gemma 3n'],
    ['gemma4', 'Gemma 4'],
  ])('the bar shows %s as %s beside the name', (family, want) => {
    const el = bar({ ...model(cpu), family });
    const badge = el.querySelector('#model-family') as HTMLElement;
    expect(badge.textContent).toBe(want);
    expect(badge.dataset.family).toBe(family);
    expect(badge.previousElementSibling!.id).toBe('model-name');
  });

  it('shows no family badge when the info has none, nor before the model is ready', () => {
    expect(bar(model(cpu)).querySelector('#model-family')).toBeNull();
    expect(bar({ ...model(cpu, 'loading'), family: 'gemma4' }).querySelector('#model-family')).toBeNull();
  });

  it('names an unknown family as it is', () => {
    expect(familyName('gemma9')).toBe('gemma9');
    expect(familyName(undefined)).toBe('');
  });
});
