import { browserTransport, pageToken, TOKEN_HEADER, TOKEN_KEY, withMediaToken } from '../src/transport';

class FakeES {
  static last: FakeES;
  onopen: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onmessage: ((m: { data: string }) => void) | null = null;
  constructor(public url: string) {
    FakeES.last = this;
  }
}

function fakeWindow(hash: string, stored: string | null = null) {
  const store = new Map<string, string>();
  if (stored !== null) store.set(TOKEN_KEY, stored);
  const replaced: string[] = [];
  return {
    w: {
      location: { hash, pathname: '/', search: '' },
      history: { replaceState: (_d: unknown, _u: string, url: string) => replaced.push(url) },
      localStorage: { getItem: (k: string) => store.get(k) ?? null, setItem: (k: string, v: string) => void store.set(k, v) },
    },
    store,
    replaced,
  };
}

describe('access token', () => {
  it('takes the token from the printed address, keeps it and hides it', () => {
    const f = fakeWindow('#token=abc123');
    expect(pageToken(f.w)).toBe('abc123');
    expect(f.store.get(TOKEN_KEY)).toBe('abc123');
    expect(f.replaced).toEqual(['/']);
    // A reload: no fragment any more, the kept token.
    expect(pageToken(fakeWindow('', 'abc123').w)).toBe('abc123');
    // A new launch's address replaces an old token.
    expect(pageToken(fakeWindow('#token=new', 'old').w)).toBe('new');
    expect(pageToken(fakeWindow('').w)).toBe('');
  });

  it('adds the token to media URLs only', () => {
    const item = { id: 'a1', path: '/media/alice/usb/photo.png', thumb: '/media/a1/thumb.jpg', model_view: '/media/a1/model.png', frames: [{ url: '/media/a1/frame/0.jpg' }], note: 'see /media/x' };
    expect(withMediaToken([{ name: 'photo.png', path: '/media/alice/usb/photo.png', media: { item } }], 't k')).toEqual([
      {
        name: 'photo.png',
        path: '/media/alice/usb/photo.png',
        media: {
          item: {
            id: 'a1',
            path: '/media/alice/usb/photo.png',
            thumb: '/media/a1/thumb.jpg?token=t%20k',
            model_view: '/media/a1/model.png?token=t%20k',
            frames: [{ url: '/media/a1/frame/0.jpg?token=t%20k' }],
            note: 'see /media/x',
          },
        },
      },
    ]);
    expect(withMediaToken({ url: '/media/camera/live.jpg?seq=3' }, 'k')).toEqual({ url: '/media/camera/live.jpg?seq=3&token=k' });
    expect(withMediaToken(item, '')).toBe(item);
    expect(withMediaToken(null, 'k')).toBe(null);
  });

  it('sends the token with calls, uploads and the event stream', async () => {
    const sent: { url: string; headers: Record<string, string> }[] = [];
    const fetch = (async (url: string, init: RequestInit) => {
      sent.push({ url, headers: (init.headers ?? {}) as Record<string, string> });
      return new Response(JSON.stringify({ item: { model_view: '/media/a1/model.png' } }), { status: 200 });
    }) as unknown as typeof globalThis.fetch;
    const t = browserTransport({ fetch, EventSource: FakeES as unknown as new (u: string) => EventSource, token: 's3cret' });
    expect(await t.call('Media', 'Items')).toEqual({ item: { model_view: '/media/a1/model.png?token=s3cret' } });
    expect(sent[0].headers[TOKEN_HEADER]).toBe('s3cret');
    await t.upload!(new FormData());
    expect(sent[1]).toEqual({ url: '/api/upload', headers: { [TOKEN_HEADER]: 's3cret' } });
    const got: unknown[] = [];
    t.on('camera:frame', (d) => got.push(d));
    expect(FakeES.last.url).toBe('/api/events?token=s3cret');
    FakeES.last.onmessage!({ data: JSON.stringify({ name: 'camera:frame', data: { url: '/media/camera/live.jpg?seq=1' } }) });
    expect(got).toEqual([{ url: '/media/camera/live.jpg?seq=1&token=s3cret' }]);
  });
});
