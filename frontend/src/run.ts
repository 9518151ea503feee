// A run as the UI shows it, built from run:update events (coalesced deltas)
// and replaced by the final record from run:done.
import { fmtMs } from './format';
import type { CatalogStep, FieldResult, RunMedia, RunRecord, RunStarted, RunUpdate, SideStatus, SideTiming } from './types';

/** A field's trie decode so far: the names emitted and every step chosen. */
export interface LiveCatalog {
  names: string[];
  steps: CatalogStep[];
}

export interface LiveScorer {
  status: SideStatus;
  error?: string;
  fields: Map<string, FieldResult>;
  /** The trie decodes under way (and done), by field, from the updates' catalog steps. */
  catalog?: Map<string, LiveCatalog>;
  done: number;
  total: number;
  timing?: SideTiming;
}

export interface LiveGenerator {
  status: SideStatus;
  error?: string;
  text: string;
  tokens: number;
  timing?: SideTiming;
}

export interface LiveRun {
  id: string;
  startedMs: number;
  elapsedMs: number;
  concurrent: boolean;
  randomWeights: boolean;
  model: string;
  scorer?: LiveScorer;
  generator?: LiveGenerator;
  /** The media preparation (the towers run once for both sides). */
  media?: RunMedia;
  /** The final record, once the run is done. */
  record?: RunRecord;
  /** Stop was pressed: the run is stopping until run:done confirms it. */
  stopping?: boolean;
}

export const FINISHED: SideStatus[] = ['done', 'cancelled', 'error'];

export function isFinished(s: SideStatus | undefined): boolean {
  return s == null || FINISHED.includes(s);
}

export function startRun(s: RunStarted): LiveRun {
  return {
    id: s.id,
    startedMs: s.started_ms,
    elapsedMs: 0,
    concurrent: s.concurrent,
    randomWeights: s.random_weights,
    model: s.model,
    scorer: s.scorer ? { status: 'preparing', fields: new Map(), done: 0, total: 0 } : undefined,
    generator: s.generator ? { status: 'preparing', text: '', tokens: 0 } : undefined,
  };
}

/** Applies one update; updates of another run are ignored. */
export function applyUpdate(r: LiveRun, u: RunUpdate): LiveRun {
  if (u.id !== r.id || r.record) return r;
  const next: LiveRun = { ...r, elapsedMs: Math.max(r.elapsedMs, u.elapsed_ms) };
  if (u.media) next.media = u.media;
  if (u.scorer) {
    const sc: LiveScorer = r.scorer ?? { status: 'preparing', fields: new Map(), done: 0, total: 0 };
    const fields = new Map(sc.fields);
    for (const f of u.scorer.fields ?? []) fields.set(f.name, f);
    let catalog = sc.catalog;
    if (u.scorer.catalog?.length) {
      catalog = new Map(catalog);
      for (const c of u.scorer.catalog) {
        const prev = catalog.get(c.field);
        catalog.set(c.field, { names: c.names ?? prev?.names ?? [], steps: [...(prev?.steps ?? []), c.step] });
      }
    }
    next.scorer = {
      status: u.scorer.status,
      error: u.scorer.error,
      fields,
      catalog,
      done: u.scorer.done,
      total: u.scorer.total,
      timing: u.scorer.timing ?? sc.timing,
    };
  }
  if (u.generator) {
    const g: LiveGenerator = r.generator ?? { status: 'preparing', text: '', tokens: 0 };
    next.generator = {
      status: u.generator.status,
      error: u.generator.error,
      text: g.text + (u.generator.delta ?? ''),
      tokens: u.generator.tokens,
      timing: u.generator.timing ?? g.timing,
    };
  }
  return next;
}

/** The run as its final record says. */
export function fromRecord(rec: RunRecord): LiveRun {
  const sc = rec.scorer;
  const g = rec.generator;
  return {
    id: rec.id,
    startedMs: rec.started_ms,
    elapsedMs: rec.total_ms,
    concurrent: rec.concurrent,
    randomWeights: rec.random_weights,
    model: rec.model,
    media: rec.media,
    scorer: sc && {
      status: sc.status,
      error: sc.error,
      fields: new Map(sc.fields.map((f) => [f.name, f])),
      done: sc.fields.length,
      total: sc.fields_total,
      timing: sc.timing,
    },
    generator: g && {
      status: g.status,
      error: g.error,
      text: g.text,
      tokens: g.timing.output_tokens ?? 0,
      timing: g.timing,
    },
    record: rec,
  };
}

/** What the scorer is doing, live: waiting for the towers, prefilling, branch batches. */
export function scorerStage(r: LiveRun | null | undefined): string {
  const sc = r?.scorer;
  if (!sc) return '';
  const t = sc.timing;
  const batches = t?.branch_batches_ms?.length ?? 0;
  const nb = `${batches} branch batch${batches === 1 ? '' : 'es'}`;
  switch (sc.status) {
    case 'preparing':
      return r!.media && r!.media.status === 'preparing' ? `waiting for the towers: ${towerStage(r!)}` : 'building the prompt';
    case 'prefilling':
      return `input ready in ${fmtMs(t?.input_preparation_ms)} · prefilling the shared prefix${prefillStage(t, r!.elapsedMs)}`;
    case 'scoring':
      return `prefill done in ${fmtMs(t?.prefill_ms)} · ${nb} done`;
    case 'done':
      return t ? `prefill ${fmtMs(t.prefill_ms)} · ${nb}` : '';
  }
  return '';
}

/**
 * A long prefill's progress: " · layer 12 of 30 · about 3.20 s left" (the
 * time left once a layer is done); "" before the first layer.
 */
export function prefillStage(t: SideTiming | undefined, elapsedMs: number): string {
  if (!t?.prefill_layers || !t.prefill_done) return '';
  let s = ` · layer ${t.prefill_done} of ${t.prefill_layers}`;
  const spent = elapsedMs - t.start_ms - t.input_preparation_ms;
  if (t.prefill_done < t.prefill_layers && spent > 0) s += ` · about ${fmtMs((spent * (t.prefill_layers - t.prefill_done)) / t.prefill_done)} left`;
  return s;
}

/** The towers' progress: "image 1 (1 of 2) · block 12 of 84 · 3.2 s, about 20 s left". */
export function towerStage(r: LiveRun): string {
  const m = r.media;
  if (!m) return '';
  if (!m.stage) return `${m.done} of ${m.total}`;
  let s = `${m.stage} (${Math.min(m.done + 1, m.total)} of ${m.total})`;
  if (m.loading) s += ' · loading the tower';
  else if (m.blocks) s += ` · block ${m.block ?? 0} of ${m.blocks}`;
  if (m.item_ms) s += ` · ${fmtMs(m.item_ms)}${m.left_ms ? `, about ${fmtMs(m.left_ms)} left` : ''}`;
  return s;
}

/**
 * Whether the run is still going on the server: until run:done, while a
 * side runs, the towers run, or a Stop waits for its confirmation.
 */
export function running(r: LiveRun | null | undefined): boolean {
  return !!r && !r.record && (!isFinished(r.scorer?.status) || !isFinished(r.generator?.status) || r.media?.status === 'preparing' || !!r.stopping);
}

/**
 * Whether the run is stopping: Stop was pressed, or both sides are over
 * while the towers still run, and run:done has not come yet.
 */
export function stopping(r: LiveRun | null | undefined): boolean {
  return running(r) && (!!r!.stopping || (isFinished(r!.scorer?.status) && isFinished(r!.generator?.status)));
}

/** The run marked as stopping (Stop of both sides pressed). */
export function markStopping(r: LiveRun): LiveRun {
  return r.record ? r : { ...r, stopping: true };
}

/** What a field card without a result says: waiting while the scorer runs, why not once it is over. */
export function pendingLabel(sc: LiveScorer | undefined): string {
  switch (sc?.status) {
    case 'cancelled':
      return 'not scored: stopped';
    case 'error':
      return 'not scored: error';
    case 'done':
      return 'not scored';
  }
  return 'waiting…';
}

/** The towers' time per item for the timing table: "image 1 1.2 s · audio cached". */
export function towerItems(m: RunMedia | undefined): string {
  return (m?.items ?? []).map((it) => `${it.what} ${it.cached ? 'cached' : fmtMs(it.ms)}`).join(' · ');
}

/** The value the scorer gives a field, as the JSON answer writes it. */
export function scorerValue(f: FieldResult): unknown {
  switch (f.type) {
    case 'choice':
      return f.winner;
    case 'score':
      return f.winner != null && isFinite(Number(f.winner)) ? Number(f.winner) : f.winner;
    case 'bool':
      return (f.p_true ?? 0) > 0.5;
    case 'independent':
      return Object.fromEntries((f.labels ?? []).map((l) => [l.label, l.p_yes > 0.5]));
    case 'catalog':
      return f.names ?? [];
  }
}

/** Whether the generated JSON gives a field the scorer's value. */
export function agrees(f: FieldResult, generated: unknown): boolean | null {
  if (!generated || typeof generated !== 'object' || !(f.name in (generated as object))) return null;
  const g = (generated as Record<string, unknown>)[f.name];
  const s = scorerValue(f);
  if (f.type === 'independent') {
    if (!g || typeof g !== 'object') return false;
    return Object.entries(s as Record<string, boolean>).every(([k, v]) => (g as Record<string, unknown>)[k] === v);
  }
  if (f.type === 'score') return Number(g) === Number(s);
  if (f.type === 'catalog') {
    const names = s as string[];
    return Array.isArray(g) && g.length === names.length && g.every((v, i) => v === names[i]);
  }
  return g === s;
}
