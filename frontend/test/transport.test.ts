import { browserTransport, isWails, wailsTransport } from '../src/transport';
import { classify, composeInput, readFile, refusedFile, splitFiles } from '../src/files';
import { Api, base64 } from '../src/api';

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
    expect(img.reason).toContain('added as media');
    const bad = await readFile(new File([new Uint8Array([0x63, 0xe9])], 'latin1.txt'));
    expect(bad).toMatchObject({ supported: false, reason: 'not UTF-8 text' });
    expect(composeInput('  typed ', [txt, img])).toBe('typed\n\n[ticket.txt]\nThe server is down.');
  });
});

describe('media files', () => {
  it('reads text here and sends the rest to the media service', () => {
    const fs = [new File(['a'], 'note.txt'), new File(['b'], 'photo.png'), new File(['c'], 'clip.wav'), new File(['d'], 'blob.bin')];
    const { text, media } = splitFiles(fs);
    expect(text.map((f) => f.name)).toEqual(['note.txt']);
    expect(media.map((f) => f.name)).toEqual(['photo.png', 'clip.wav', 'blob.bin']);
    expect(refusedFile({ name: 'x.png', size: 3 }, 'broken')).toEqual({ name: 'x.png', size: 3, kind: 'image', supported: false, reason: 'broken' });
  });

  it('uploads files as multipart in the browser and reports the error of a refused upload', async () => {
    const sent: { url: string; body: unknown }[] = [];
    let reply = { status: 200, body: '{"results":[{"name":"photo.png","item":{"id":"a1","kind":"image","tokens":256}}]}' };
    const fetch = (async (url: string, init: RequestInit) => {
      sent.push({ url, body: init.body });
      return { ok: reply.status < 300, status: reply.status, text: async () => reply.body };
    }) as unknown as typeof globalThis.fetch;
    const api = new Api(browserTransport({ fetch, base: 'http://x' }));
    const rs = await api.upload([new File([new Uint8Array([1, 2, 3])], 'photo.png')]);
    expect(rs[0].item?.id).toBe('a1');
    expect(sent[0].url).toBe('http://x/api/upload');
    expect(sent[0].body).toBeInstanceOf(FormData);
    expect((sent[0].body as FormData).getAll('file')).toHaveLength(1);
    reply = { status: 413, body: '{"error":"the upload is 300.0 MB, over the limit of 256 MB: send fewer or smaller files"}' };
    await expect(api.upload([new File(['x'], 'big.mp4')])).rejects.toThrow('over the limit of 256 MB');
    expect(await api.upload([])).toEqual([]);
  });

  it('sends base64 through the bound method where there is no upload route', async () => {
    const calls: unknown[][] = [];
    const w = {
      go: { app: { Media: { Upload: async (...a: unknown[]) => (calls.push(a), { name: a[0], error: 'not media' }) } } },
      runtime: { EventsOn: () => () => {} },
    };
    const api = new Api(wailsTransport(w));
    const rs = await api.upload([new File([new Uint8Array([104, 105])], 'hi.bin')]);
    expect(calls).toEqual([['hi.bin', 'aGk=']]);
    expect(rs[0].error).toBe('not media');
    expect(await base64(new Blob([new Uint8Array(70000).fill(65)]))).toHaveLength(Math.ceil(70000 / 3) * 4);
  });
});
