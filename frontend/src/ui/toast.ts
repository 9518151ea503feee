import { h } from './dom';

let host: HTMLElement | null = null;
let reporter: ((msg: string) => void) | null = null;

/** Error toasts are also sent here (to the Go log). */
export function setToastReporter(f: (msg: string) => void) {
  reporter = f;
}

/** Shows a short message in the corner (errors stay until dismissed). */
export function toast(message: string, kind: 'info' | 'error' | 'ok' = 'info', ms = 4000) {
  if (!host) {
    host = h('div.toasts', { role: 'status', 'aria-live': 'polite' });
    document.body.appendChild(host);
  }
  const close = h('button.toast-close', { type: 'button', 'aria-label': 'Dismiss', onclick: () => el.remove() }, '×');
  const el = h(`div.toast`, { class: `toast toast-${kind}` }, h('span', null, message), close);
  host.appendChild(el);
  if (kind !== 'error') setTimeout(() => el.remove(), ms);
  else reporter?.(message);
  while (host.children.length > 4) host.firstElementChild?.remove();
}

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
