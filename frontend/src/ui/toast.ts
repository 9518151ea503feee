import { h } from './dom';

let host: HTMLElement | null = null;
let reporter: ((msg: string) => void) | null = null;

/** Error toasts are also sent here (to the Go log). */
export function setToastReporter(f: (msg: string) => void) {
  reporter = f;
}

/** How long an error toast stays at the least: long enough to read, not forever. */
export const ERROR_MS = 10000;

/**
 * Shows a short message in the corner. Every toast closes by itself (errors
 * after ERROR_MS at the least; a pointer over it holds it open); errors that
 * belong to a panel are shown in that panel instead.
 */
export function toast(message: string, kind: 'info' | 'error' | 'ok' = 'info', ms = 4000) {
  if (!host) {
    host = h('div.toasts', { role: 'status', 'aria-live': 'polite' });
    document.body.appendChild(host);
  }
  const close = h('button.toast-close', { type: 'button', 'aria-label': 'Dismiss', onclick: () => el.remove() }, '×');
  const el = h(`div.toast`, { class: `toast toast-${kind}` }, h('span', null, message), close);
  host.appendChild(el);
  const life = kind === 'error' ? Math.max(ms, ERROR_MS) : ms;
  let timer = setTimeout(() => el.remove(), life);
  el.addEventListener('mouseenter', () => clearTimeout(timer));
  el.addEventListener('mouseleave', () => (timer = setTimeout(() => el.remove(), life / 2)));
  if (kind === 'error') reporter?.(message);
  while (host.children.length > 4) host.firstElementChild?.remove();
}

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
