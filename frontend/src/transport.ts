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

export interface BrowserDeps {
  fetch: typeof fetch;
  EventSource?: new (url: string) => EventSource;
  base?: string;
}

export function browserTransport(deps: BrowserDeps = { fetch: globalThis.fetch.bind(globalThis), EventSource: globalThis.EventSource }): Transport {
  const base = deps.base ?? '';
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
    es = new deps.EventSource(`${base}/api/events`);
    es.onopen = () => setConnected(true);
    es.onerror = () => setConnected(false);
    es.onmessage = (m: MessageEvent) => {
      let ev: { name: string; data: unknown };
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      listeners.get(ev.name)?.forEach((f) => f(ev.data));
    };
  };

  return {
    mode: 'browser',
    async call<T>(service: string, method: string, ...args: unknown[]): Promise<T> {
      const resp = await deps.fetch(`${base}/api/${service}/${method}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
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
      return body as T;
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
      const resp = await deps.fetch(`${base}/api/upload`, { method: 'POST', body: form });
      const text = await resp.text();
      let body: any = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        throw new Error(`upload: ${resp.status} ${text.slice(0, 200)}`);
      }
      if (!resp.ok) throw new Error(body && body.error ? body.error : `upload: HTTP ${resp.status}`);
      return body;
    },
  };
}

/** The transport for where the page runs. */
export function detectTransport(): Transport {
  return isWails() ? wailsTransport() : browserTransport();
}
