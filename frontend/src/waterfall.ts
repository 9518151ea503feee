// The timing waterfall: both sides' phases on one time axis (ms from the
// run's start).
import type { RunMedia, SideTiming } from './types';

export interface Segment {
  kind: 'prep' | 'prefill' | 'branches' | 'decode' | 'wait';
  label: string;
  start: number;
  end: number;
}

export interface Marker {
  kind: 'first-token' | 'first-decision';
  label: string;
  /** Where it sits on the run's time axis. */
  at: number;
  /** Its time from the side's start (what the timing table shows). */
  sideMs: number;
}

export interface Lane {
  side: 'scorer' | 'generator' | 'towers';
  segments: Segment[];
  markers: Marker[];
  end: number;
}

export function scorerLane(t: SideTiming): Lane {
  const s0 = t.start_ms;
  const segs: Segment[] = [];
  let at = s0;
  const push = (kind: Segment['kind'], label: string, dur: number) => {
    if (dur > 0) segs.push({ kind, label, start: at, end: at + dur });
    at += Math.max(0, dur);
  };
  push('prep', 'input preparation', t.input_preparation_ms);
  push('prefill', 'prefill (shared prefix)', t.prefill_ms);
  (t.branch_batches_ms ?? []).forEach((b, i, all) => push('branches', `branch batch ${i + 1}/${all.length}`, b));
  const end = s0 + t.total_ms;
  if (end > at + 0.5) segs.push({ kind: 'wait', label: 'assembling the answer', start: at, end });
  const markers: Marker[] = t.first_decision_ms ? [{ kind: 'first-decision', label: 'first decision', at: s0 + t.first_decision_ms, sideMs: t.first_decision_ms }] : [];
  return { side: 'scorer', segments: segs, markers, end: Math.max(end, at) };
}

export function generatorLane(t: SideTiming): Lane {
  const s0 = t.start_ms;
  const segs: Segment[] = [];
  const prepEnd = s0 + t.input_preparation_ms;
  if (t.input_preparation_ms > 0) segs.push({ kind: 'prep', label: 'input preparation', start: s0, end: prepEnd });
  const prefillEnd = prepEnd + t.prefill_ms;
  if (t.prefill_ms > 0) segs.push({ kind: 'prefill', label: 'prefill', start: prepEnd, end: prefillEnd });
  const end = s0 + t.total_ms;
  const first = t.first_token_ms ? s0 + t.first_token_ms : undefined;
  if (first != null && end > first) segs.push({ kind: 'decode', label: `decode (${t.output_tokens ?? 0} tokens)`, start: first, end });
  const markers: Marker[] = first != null ? [{ kind: 'first-token', label: 'first token', at: first, sideMs: t.first_token_ms! }] : [];
  return { side: 'generator', segments: segs, markers, end: Math.max(end, prefillEnd) };
}

/**
 * The towers' lane: one segment per finished item, in the order they ran
 * from the run's start (cached items take no time and say so), then the
 * item in its tower up to now.
 */
export function mediaLane(m: RunMedia, elapsed = 0): Lane {
  const segs: Segment[] = [];
  let at = 0;
  for (const it of m.items ?? []) {
    const dur = it.cached ? 0 : Math.max(0, it.ms);
    segs.push({ kind: 'prep', label: it.cached ? `${it.what} (cached)` : it.what, start: at, end: at + dur });
    at += dur;
  }
  if (m.status === 'preparing' && m.stage) {
    const end = Math.max(at, at + (m.item_ms ?? 0), elapsed);
    segs.push({ kind: 'wait', label: `${m.stage} (running)`, start: at, end });
    at = end;
  }
  return { side: 'towers', segments: segs, markers: [], end: Math.max(at, m.tower_ms ?? 0) };
}

/** Round tick spacing for an axis of length span split into about n parts. */
export function ticks(span: number, n = 6): number[] {
  if (!(span > 0)) return [0];
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  for (let v = 0; v <= span + 1e-9; v += step) out.push(Number(v.toFixed(6)));
  return out;
}
