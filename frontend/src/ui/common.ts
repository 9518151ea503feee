import type { SideStatus } from '../types';
import { h } from './dom';

const LABELS: Record<SideStatus, string> = {
  preparing: 'preparing…',
  prefilling: 'prefilling…',
  scoring: 'scoring…',
  decoding: 'decoding…',
  done: 'done',
  cancelled: 'stopped',
  error: 'error',
};

export function statusPill(s: SideStatus): HTMLElement {
  return h('span.pill', { class: `pill pill-${s}`, dataset: { status: s } }, LABELS[s] ?? s);
}
