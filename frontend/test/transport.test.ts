import { browserTransport, isWails, wailsTransport } from '../src/transport';
import { classify, composeInput, readFile } from '../src/files';

class FakeES {
  static last: FakeES;
  onopen: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onmessage: ((m: { data: string }) => void) | null = null;
  constructor(public url: string) {
    FakeES.last = this;
  }
}

describe('transport', () => {
  it('detects the Wails window', () => {
    expect(isWails({})).toBe(false);
    expect(isWails({ go: { app: {} } })).toBe(false);
    expect(isWails({ go: { app: {} }, runtime: { EventsOn: () => () => {} } })).toBe(true);
  });

  it('calls bound methods in the window', async () => {
    const calls: unknown[][] = [];
    const w = {
      go: { app: { Models: { Open: async (...a: unknown[]) => (calls.push(a), { state: 'loading' }) }, Runs: { Start: async () => Promise.reject('a run is in progress') } } },
      runtime: { EventsOn: (name: string, cb: (d: unknown) => void) => (cb({ name }), () => {}) },
    };
    const t = wailsTransport(w);
    expect(await t.call('Models', 'Open', 'builtin')).toEqual({ state: 'loading' });
    expect(calls).toEqual([['builtin']]);
    await expect(t.call('Runs', 'Start', {})).rejects.toThrow('a run is in progress');
    await expect(t.call('Nope', 'X')).rejects.toThrow('no method Nope.X');
    const got: unknown[] = [];
    t.on('model:state', (d) => got.push(d));
    expect(got).toEqual([{ name: 'model:state' }]);
  });

  it('posts JSON and streams events in the browser', async () => {
    const requests: { url: string; body: string }[] = [];
    const fetch = (async (url: string, init: RequestInit) => {
      requests.push({ url, body: String(init.body) });
      if (url.endsWith('/Bad')) return new Response(JSON.stringify({ error: 'no model is loaded' }), { status: 422 });
      return new Response(JSON.stringify({ ok: true }), { status: 200 });
    }) as unknown as typeof globalThis.fetch;
    const t = browserTransport({ fetch, EventSource: FakeES as unknown as new (u: string) => EventSource, base: 'http://x' });
    expect(await t.call('Scorer', 'Check', { fields: [] })).toEqual({ ok: true });
    expect(requests[0]).toEqual({ url: 'http://x/api/Scorer/Check', body: '[{"fields":[]}]' });
    await expect(t.call('Runs', 'Bad')).rejects.toThrow('no model is loaded');

    const got: unknown[] = [];
    const conn: boolean[] = [];
    t.onConnection((c) => conn.push(c));
    const off = t.on('run:update', (d) => got.push(d));
    expect(FakeES.last.url).toBe('http://x/api/events');
    FakeES.last.onopen!();
    FakeES.last.onmessage!({ data: JSON.stringify({ name: 'run:update', data: { id: 'run-1' } }) });
    FakeES.last.onmessage!({ data: JSON.stringify({ name: 'log:entries', data: [] }) });
    FakeES.last.onmessage!({ data: 'not json' });
    off();
    FakeES.last.onmessage!({ data: JSON.stringify({ name: 'run:update', data: { id: 'run-2' } }) });
    FakeES.last.onerror!();
    expect(got).toEqual([{ id: 'run-1' }]);
    expect(conn).toEqual([false, true, false]);
  });
});

describe('files', () => {
  it.each([
    ['note.txt', '', 'text'], ['ticket', 'text/plain', 'text'], ['photo.JPG', '', 'image'], ['x.webp', '', 'image'],
    ['a.wav', '', 'audio'], ['clip.mp4', '', 'video'], ['blob.bin', 'application/octet-stream', 'other'], ['mystery', 'image/avif', 'image'],
  ])('classifies %s (%s) as %s', (name, mime, kind) => expect(classify(name, mime)).toBe(kind));

  it('reads text files and refuses the rest', async () => {
    const txt = await readFile(new File(['The server is down.'], 'ticket.txt', { type: 'text/plain' }));
    expect(txt).toMatchObject({ kind: 'text', supported: true, text: 'The server is down.' });
    const img = await readFile(new File([new Uint8Array([0x89, 0x50])], 'photo.png', { type: 'image/png' }));
    expect(img).toMatchObject({ kind: 'image', supported: false });
    expect(img.reason).toContain('not supported in the app yet');
    const bad = await readFile(new File([new Uint8Array([0x63, 0xe9])], 'latin1.txt'));
    expect(bad).toMatchObject({ supported: false, reason: 'not UTF-8 text' });
    expect(composeInput('  typed ', [txt, img])).toBe('typed\n\n[ticket.txt]\nThe server is down.');
  });
});
