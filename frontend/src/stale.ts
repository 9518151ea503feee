// Whether the results on screen belong to the input being edited: results
// of an earlier input are marked stale.
import { fromEngine, toEngine } from './schema';
import type { RunRecord } from './types';

/** What a run depends on: the input text, the media and the schema, as one string. */
export function inputKey(text: string, mediaIds: string[], schema: unknown): string {
  let s: unknown = schema;
  try {
    s = toEngine(fromEngine(schema)); // one spelling for equal schemas
  } catch {
    /* keep it as it is */
  }
  return JSON.stringify([text.trim(), mediaIds, s]);
}

/** The key of a finished run's input. */
export function recordKey(r: RunRecord): string {
  return inputKey(r.input.text, (r.input.media ?? []).map((m) => m.id), r.schema);
}

/**
 * Why the results on screen are stale ('' when they are not): shown is the
 * key of the input they were computed for, current that of the input now.
 */
export function staleness(shown: string | null, current: string): string {
  if (shown == null || shown === current) return '';
  const [t0, m0, s0] = JSON.parse(shown) as [string, string[], unknown];
  const [t1, m1, s1] = JSON.parse(current) as [string, string[], unknown];
  const what = [t0 !== t1 ? 'the input text' : '', JSON.stringify(m0) !== JSON.stringify(m1) ? 'the media' : '', JSON.stringify(s0) !== JSON.stringify(s1) ? 'the schema' : ''].filter(Boolean);
  return `These results are for an earlier input: ${what.join(' and ').replace(/ and (?=.* and )/, ', ')} changed since. Run again to update them.`;
}
