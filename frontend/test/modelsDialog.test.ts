import { ModelsDialog, downloadText, fmtLeft, type DownloadState, type HubRepo, type LibraryHost, type LocalModel, type TokenInfo } from '../src/ui/modelsDialog';

const local: LocalModel[] = [
  { spec: 'google/gemma-3n-E2B-it', name: 'google/gemma-3n-E2B-it', family: 'gemma3n', source: 'huggingface', path: '/hf/snap', format: 'safetensors', size_bytes: 10.9e9, quant: 'BF16', vision: true, audio: true },
  { spec: '/o/blobs/sha256-1', name: 'gemma4:e4b', family: 'gemma4', source: 'ollama', path: '/o/blobs/sha256-1', format: 'gguf', size_bytes: 5.6e9, quant: 'Q4_K_M', vision: false, audio: false },
];

const repos: HubRepo[] = [
  { repo: 'google/gemma-3n-E2B-it', title: 'Gemma 3n E2B, instruction-tuned', size_bytes: 10.9e9, files: 7, gated: true, path: '/hf/snap' },
  { repo: 'google/gemma-3n-E4B-it', title: 'Gemma 3n E4B, instruction-tuned', size_bytes: 15.7e9, files: 8, gated: true },
  { repo: 'google/gemma-3n-E2B', title: 'Gemma 3n E2B, base', size_bytes: 0, files: 0, gated: false, error: 'cannot reach the Hub' },
  { repo: 'google/gemma-4-E2B-it', title: 'Gemma 4 E2B, instruction-tuned', family: 'gemma4', size_bytes: 10.2e9, files: 6, gated: false },
];

function fakeHost(over: Partial<LibraryHost> = {}) {
  const calls: string[] = [];
  let token: TokenInfo = { present: false };
  const host: LibraryHost = {
    local: async () => (calls.push('local'), local),
    repos: async () => (calls.push('repos'), repos),
    token: async () => token,
    setToken: async (t) => (calls.push(`token ${t}`), (token = { present: true, source: 'entered' })),
    state: async () => ({ state: 'idle' }),
    download: async (repo) => (calls.push(`download ${repo}`), { state: 'downloading', repo }),
    cancel: async () => (calls.push('cancel'), { state: 'downloading' }),
    open: (spec) => void calls.push(`open ${spec}`),
    ...over,
  };
  return { host, calls };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe('models dialog', () => {
  it('lists the local models with source, format, quantisation, size and towers', async () => {
    const { host, calls } = fakeHost();
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    const rows = [...d.el.querySelectorAll('#local-models li.model-row')];
    expect(rows.map((r) => (r as HTMLElement).dataset.source)).toEqual(['huggingface', 'ollama']);
    expect(rows[0].textContent).toContain('Hugging Face cache · safetensors BF16 · 11 GB');
    expect(rows[1].textContent).toContain('Ollama · gguf Q4_K_M · 5.6 GB');
    expect(rows.map((r) => r.querySelector('.family')!.textContent)).toEqual(['Gemma 3n', 'Gemma 4']);
    expect([...rows[0].querySelectorAll('.modality.on')].map((b) => b.textContent)).toEqual(['vision ✓', 'audio ✓']);
    expect([...rows[1].querySelectorAll('.modality.off')].map((b) => b.textContent)).toEqual(['no vision', 'no audio']);
    (rows[1].querySelector('button') as HTMLButtonElement).click();
    expect(calls).toContain('open /o/blobs/sha256-1');
    expect(d.el.open).toBe(false);
  });

  it('says so when nothing is found', async () => {
    const { host } = fakeHost({ local: async () => [] });
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    expect(d.el.querySelector('#no-local')!.textContent).toContain('No Gemma 3n or Gemma 4 model found');
  });

  it('lists the repos with sizes, errors, gating and what is downloaded', async () => {
    const { host, calls } = fakeHost();
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    const row = (repo: string) => d.el.querySelector(`#hub-repos li[data-repo="${repo}"]`)!;
    expect(row('google/gemma-3n-E4B-it').textContent).toContain('16 GB · 8 files');
    expect(row('google/gemma-4-E2B-it').querySelector('.family')!.textContent).toBe('Gemma 4');
    expect(row('google/gemma-3n-E4B-it').querySelector('.family')).toBeNull();
    expect(row('google/gemma-3n-E4B-it').querySelector('.badge.warn')!.textContent).toBe('gated');
    expect(row('google/gemma-3n-E2B').querySelector('.err')!.textContent).toContain('cannot reach the Hub');
    expect(row('google/gemma-3n-E2B-it').querySelector('.badge.ok')!.textContent).toBe('downloaded');
    (row('google/gemma-3n-E2B-it').querySelector('button.primary') as HTMLButtonElement).click();
    expect(calls).toContain('open google/gemma-3n-E2B-it');
  });

  it('downloads with progress and cancel, then offers to load', async () => {
    const { host, calls } = fakeHost();
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    (d.el.querySelector('#hub-repos li[data-repo="google/gemma-3n-E4B-it"] button[data-action="download"]') as HTMLButtonElement).click();
    await tick();
    expect(calls).toContain('download google/gemma-3n-E4B-it');
    d.update({ state: 'downloading', repo: 'google/gemma-3n-E4B-it', stage: 'downloading', file: 'model-00001-of-00004.safetensors', file_index: 2, files: 8, done: 4.2e9, total: 10e9, bytes_per_sec: 42e6, left_ms: 138000 });
    expect((d.el.querySelector('#download-bar') as HTMLProgressElement).value).toBeCloseTo(0.42);
    expect(d.el.querySelector('#download-text')!.textContent).toBe('42% · 4.2 GB of 10 GB · 42 MB/s · about 2 min left');
    expect(d.el.querySelector('#download-progress')!.textContent).toContain('model-00001-of-00004.safetensors (2 of 8)');
    expect([...d.el.querySelectorAll('button[data-action="download"]')].every((b) => (b as HTMLButtonElement).disabled)).toBe(true);
    (d.el.querySelector('#download-cancel') as HTMLButtonElement).click();
    await tick();
    expect(calls).toContain('cancel');
    const before = calls.filter((c) => c === 'local').length;
    d.update({ state: 'done', repo: 'google/gemma-3n-E4B-it', spec: 'google/gemma-3n-E4B-it', path: '/hf/e4b', done: 10e9, total: 10e9 });
    await tick();
    expect(calls.filter((c) => c === 'local').length).toBe(before + 1); // the lists are asked again
    (d.el.querySelector('#download-load') as HTMLButtonElement).click();
    expect(calls).toContain('open google/gemma-3n-E4B-it');
  });

  it('links to the licence of a gated repo and takes a token', async () => {
    const { host, calls } = fakeHost();
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    d.update({ state: 'error', repo: 'google/gemma-3n-E4B-it', gated: true, licence_url: 'https://huggingface.co/google/gemma-3n-E4B-it', error: 'google/gemma-3n-E4B-it is gated (HTTP 401): accept its licence' });
    expect(d.el.querySelector('#download-error')!.textContent).toContain('is gated');
    expect((d.el.querySelector('#licence-link') as HTMLAnchorElement).href).toBe('https://huggingface.co/google/gemma-3n-E4B-it');
    // In the window, the link goes to the system's browser.
    const opened: string[] = [];
    (globalThis as { runtime?: unknown }).runtime = { BrowserOpenURL: (u: string) => opened.push(u) };
    (d.el.querySelector('#licence-link') as HTMLAnchorElement).click();
    delete (globalThis as { runtime?: unknown }).runtime;
    expect(opened).toEqual(['https://huggingface.co/google/gemma-3n-E4B-it']);
    const input = d.el.querySelector('#hub-token-input') as HTMLInputElement;
    expect(input.type).toBe('password');
    input.value = 'hf_abc';
    (d.el.querySelector('.token-form button[type="submit"]') as HTMLButtonElement).click();
    await tick();
    await tick();
    expect(calls).toContain('token hf_abc');
    expect(d.el.querySelector('#hub-token')!.textContent).toContain('entered for this session');
    expect(d.el.querySelector('#hub-token-input')).toBeNull();
  });

  it('keeps an event that overtakes the answer to Download', async () => {
    let dialog: ModelsDialog | undefined;
    const { host } = fakeHost({
      download: async (repo) => {
        // The failure's event arrives before the call's answer.
        dialog!.update({ state: 'error', repo, error: 'cannot reach the Hub' });
        return { state: 'downloading', repo };
      },
    });
    const d = (dialog = new ModelsDialog(host));
    document.body.appendChild(d.el);
    await d.open();
    (d.el.querySelector('#hub-repos li[data-repo="google/gemma-3n-E4B-it"] button[data-action="download"]') as HTMLButtonElement).click();
    await tick();
    expect(d.el.querySelector('#download-error')!.textContent).toBe('cannot reach the Hub');
  });

  it('formats the time left and the progress line', () => {
    expect(fmtLeft(40_000)).toBe('40 s');
    expect(fmtLeft(180_000)).toBe('3 min');
    expect(fmtLeft(4_800_000)).toBe('1 h 20 min');
    const d: DownloadState = { state: 'downloading', done: 0, total: 0 };
    expect(downloadText(d)).toBe('0 B of 0 B');
    expect(downloadText({ state: 'downloading', done: 5e8, total: 1e9, left_ms: -1 })).toBe('50% · 500 MB of 1.0 GB');
  });
});

describe('models dialog offline', () => {
  const raw = (repo: string) => `cannot reach the Hub at https://huggingface.co (no network, or HF_ENDPOINT is wrong): Get "https://huggingface.co/api/models/${repo}/revision/main": dial tcp: lookup huggingface.co on 127.0.0.53:53: server misbehaving`;
  const offline = "Can't reach huggingface.co — check the connection; models on this machine still work";
  const offlineRepos: HubRepo[] = ['google/gemma-3n-E2B-it', 'google/gemma-3n-E4B-it', 'google/gemma-3n-E2B', 'google/gemma-3n-E4B'].map((repo) => (
    { repo, title: repo, size_bytes: 0, files: 0, gated: false, error: raw(repo), offline }));

  it('says it once in plain words, disables the downloads and keeps the details behind a disclosure', async () => {
    const { host, calls } = fakeHost({ repos: async () => offlineRepos });
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    const note = d.el.querySelector('#hub-offline')!;
    expect(note.querySelector('span')!.textContent).toBe(offline);
    // The raw errors (with the resolver's address) are only inside the closed disclosure.
    const details = note.querySelector('details')!;
    expect(details.open).toBe(false);
    expect(details.querySelectorAll('li')).toHaveLength(4);
    const outside = d.el.textContent!.replace(details.textContent!, '');
    expect(outside).not.toContain('127.0.0.53');
    expect(outside.split(offline)).toHaveLength(2);
    const buttons = [...d.el.querySelectorAll<HTMLButtonElement>('button[data-action="download"]')];
    expect(buttons).toHaveLength(4);
    expect(buttons.every((b) => b.disabled)).toBe(true);
    // The local models still load.
    expect(d.el.querySelectorAll('#local-models li.model-row button:not([disabled])')).toHaveLength(2);
    expect(calls.filter((c) => c.startsWith('download'))).toEqual([]);
  });

  it('a download that cannot reach the Hub turns the dialog offline until a Refresh hears from it', async () => {
    // The Hub answered the dialog's listing; the download then found it gone.
    const failed: DownloadState = { state: 'error', repo: 'google/gemma-3n-E4B-it', error: raw('google/gemma-3n-E4B-it'), offline };
    let last: DownloadState = { state: 'idle' };
    const { host } = fakeHost({ repos: async () => repos.slice(0, 2), state: async () => last });
    const d = new ModelsDialog(host);
    document.body.appendChild(d.el);
    await d.open();
    expect(d.el.querySelector('#hub-offline')).toBeNull();
    d.update((last = failed));
    expect(d.el.querySelector('#hub-offline span')!.textContent).toBe(offline);
    expect(d.el.querySelector('#download-error')).toBeNull();
    expect([...d.el.querySelectorAll<HTMLButtonElement>('button[data-action="download"]')].every((b) => b.disabled)).toBe(true);
    expect(d.el.querySelector('#hub-offline details')!.textContent).toContain('download of google/gemma-3n-E4B-it');
    await d.refresh();
    expect(d.el.querySelector('#hub-offline')).toBeNull();
    expect([...d.el.querySelectorAll<HTMLButtonElement>('button[data-action="download"]')].some((b) => b.disabled)).toBe(false);
    // The failed download still says what happened, in the same plain words.
    const err = d.el.querySelector('#download-error')!;
    expect(err.querySelector('span')!.textContent).toBe(offline);
    expect(err.textContent!.replace(err.querySelector('details')!.textContent!, '')).not.toContain('127.0.0.53');
  });
});
