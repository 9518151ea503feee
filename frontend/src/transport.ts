// One way to call the Go services and hear their events, in the Wails window
// (window.go / window.runtime) or in the browser mode (verdict serve: JSON
// POSTs and server-sent events).

export type Listener = (data: any) => void;

export interface Transport {
  mode: 'desktop' | 'browser';
  call<T = unknown>(service: string, method: string, ...args: unknown[]): Promise<T>;
  on(event: string, cb: Listener): () => void;
  /** Called with true/false as the event connection comes and goes. */
  onConnection(cb: (connected: boolean) => void): void;
  /** Sends files as multipart/form-data to POST /api/upload (browser mode only). */
  upload?(form: FormData): Promise<unknown>;
}

interface WailsWindow {
  go?: Record<string, Record<string, Record<string, (...a: unknown[]) => Promise<unknown>>>>;
  runtime?: { EventsOn(name: string, cb: Listener): () => void };
}

/** The Go package whose structs are bound (window.go.app.Models, ...). */
export const BOUND_PACKAGE = 'app';

export function isWails(w: unknown = globalThis): boolean {
  const ww = w as WailsWindow;
  return !!(ww.go && ww.go[BOUND_PACKAGE] && ww.runtime && typeof ww.runtime.EventsOn === 'function');
}

export function wailsTransport(w: unknown = globalThis): Transport {
  const ww = w as WailsWindow;
  return {
    mode: 'desktop',
    async call<T>(service: string, method: string, ...args: unknown[]): Promise<T> {
      const fn = ww.go?.[BOUND_PACKAGE]?.[service]?.[method];
      if (!fn) throw new Error(`no method ${service}.${method}`);
      try {
        return (await fn(...args)) as T;
      } catch (e) {
        // Wails rejects with the Go error's text.
        throw e instanceof Error ? e : new Error(String(e));
      }
    },
    on(event, cb) {
      return ww.runtime!.EventsOn(event, cb);
    },
    onConnection(cb) {
      cb(true);
    },
  };
}

/** The header that carries `verdict serve`'s access token. */
export const TOKEN_HEADER = 'X-Verdict-Token';
/** Where the page keeps the token (per origin, so per port). */
export const TOKEN_KEY = 'verdict.token';

interface PageWindow {
  location: { hash: string; pathname: string; search: string };
  history: { replaceState(data: unknown, unused: string, url: string): void };
  localStorage: Pick<Storage, 'getItem' | 'setItem'>;
}

/**
 * The access token of `verdict serve`. The address it prints carries it in
 * the fragment (#token=...), which browsers never send to a server: the page
 * keeps it, takes it out of the address bar, and finds it again on a reload.
 */
export function pageToken(w: PageWindow = globalThis as unknown as PageWindow): string {
  const m = /(?:^#|&)token=([^&]*)/.exec(w.location.hash);
  if (m) {
    const token = decodeURIComponent(m[1]);
    try {
      w.localStorage.setItem(TOKEN_KEY, token);
    } catch {
      // storage refused (private mode): the token lasts as long as the page
    }
    w.history.replaceState(null, '', w.location.pathname + w.location.search);
    return token;
  }
  try {
    return w.localStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

/** The fields that hold media URLs (app.MediaItem, FramePreview, CameraFrame). */
const MEDIA_URL_KEYS = new Set(['thumb', 'model_view', 'url']);

/**
 * Adds the token to every media URL in a result or event (a thumb,
 * model_view or url field starting with /media/): an <img> cannot send the
 * token header. Other strings, such as a file path under /media/, stay as
 * they are.
 */
export function withMediaToken<T>(v: T, token: string): T {
  if (!token) return v;
  const q = `token=${encodeURIComponent(token)}`;
  const walk = (x: unknown, key: string): unknown => {
    if (typeof x === 'string') {
      if (!MEDIA_URL_KEYS.has(key) || !x.startsWith('/media/')) return x;
      return `${x}${x.includes('?') ? '&' : '?'}${q}`;
    }
    if (Array.isArray(x)) return x.map((e) => walk(e, ''));
    if (x && typeof x === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, val] of Object.entries(x)) out[k] = walk(val, k);
      return out;
    }
    return x;
  };
  return walk(v, '') as T;
}

export interface BrowserDeps {
  fetch: typeof fetch;
  EventSource?: new (url: string) => EventSource;
  base?: string;
  /** `verdict serve`'s access token, sent with every request. */
  token?: string;
}

export function browserTransport(deps: BrowserDeps = { fetch: globalThis.fetch.bind(globalThis), EventSource: globalThis.EventSource }): Transport {
  const base = deps.base ?? '';
  const token = deps.token ?? '';
  const auth: Record<string, string> = token ? { [TOKEN_HEADER]: token } : {};
  const listeners = new Map<string, Set<Listener>>();
  const connection = new Set<(c: boolean) => void>();
  let es: EventSource | null = null;
  let connected = false;

  const setConnected = (c: boolean) => {
    if (c === connected) return;
    connected = c;
    connection.forEach((f) => f(c));
  };

  const ensure = () => {
    if (es || !deps.EventSource) return;
    es = new deps.EventSource(token ? `${base}/api/events?token=${encodeURIComponent(token)}` : `${base}/api/events`);
    es.onopen = () => setConnected(true);
    es.onerror = () => setConnected(false);
    es.onmessage = (m: MessageEvent) => {
      let ev: { name: string; data: unknown };
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      const data = withMediaToken(ev.data, token);
      listeners.get(ev.name)?.forEach((f) => f(data));
    };
  };

  return {
    mode: 'browser',
    async call<T>(service: string, method: string, ...args: unknown[]): Promise<T> {
      const resp = await deps.fetch(`${base}/api/${service}/${method}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...auth },
        body: JSON.stringify(args),
      });
      const text = await resp.text();
      let body: any = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        throw new Error(`${service}.${method}: ${resp.status} ${text.slice(0, 200)}`);
      }
      if (!resp.ok) throw new Error(body && body.error ? body.error : `${service}.${method}: HTTP ${resp.status}`);
      return withMediaToken(body, token) as T;
    },
    on(event, cb) {
      ensure();
      if (!listeners.has(event)) listeners.set(event, new Set());
      listeners.get(event)!.add(cb);
      return () => listeners.get(event)?.delete(cb);
    },
    onConnection(cb) {
      connection.add(cb);
      ensure();
      cb(connected);
    },
    async upload(form: FormData) {
      const resp = await deps.fetch(`${base}/api/upload`, { method: 'POST', body: form, headers: auth });
      const text = await resp.text();
      let body: any = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        throw new Error(`upload: ${resp.status} ${text.slice(0, 200)}`);
      }
      if (!resp.ok) throw new Error(body && body.error ? body.error : `upload: HTTP ${resp.status}`);
      return withMediaToken(body, token);
    },
  };
}

/** The transport for where the page runs. */
export function detectTransport(): Transport {
  return isWails()
    ? wailsTransport()
    : browserTransport({ fetch: globalThis.fetch.bind(globalThis), EventSource: globalThis.EventSource, token: pageToken() });
}
