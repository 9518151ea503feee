// Finding the JSON object a model wrote (as app.ExtractJSON does in Go).

export type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

/** The end (index after the closing brace) of the object starting at t[start], or -1 if it is not complete. */
function objectEnd(t: string, start: number): number {
  let depth = 0;
  let inStr = false;
  let esc = false;
  for (let i = start; i < t.length; i++) {
    const c = t[i];
    if (inStr) {
      if (esc) esc = false;
      else if (c === '\\') esc = true;
      else if (c === '"') inStr = false;
    } else if (c === '"') inStr = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i + 1;
  }
  return -1;
}

/**
 * The model's JSON answer: the first complete object in text that holds at
 * least one of the fields (any object when fields is empty). A stray `{}` or
 * an example object without the fields is skipped, not taken as the answer
 * (as app.ExtractAnswer does for the run record).
 */
export function findAnswer(text: string, fields: string[]): Parsed {
  const t = text.trim();
  if (!t) return { ok: false, error: 'no text yet' };
  let from = 0;
  let seen = 0;
  let bad = '';
  for (;;) {
    const start = t.indexOf('{', from);
    if (start < 0) break;
    const end = objectEnd(t, start);
    if (end < 0) return { ok: false, error: 'the JSON object is not complete' };
    seen++;
    try {
      const v: unknown = JSON.parse(t.slice(start, end));
      if (v && typeof v === 'object' && !Array.isArray(v) && (!fields.length || fields.some((f) => f in (v as object)))) return { ok: true, value: v };
      from = end;
    } catch (e) {
      bad ||= (e as Error).message;
      from = start + 1;
    }
  }
  if (!seen) return { ok: false, error: 'no JSON object in the text' };
  if (bad) return { ok: false, error: `not valid JSON: ${bad}` };
  return { ok: false, error: `no JSON object with the fields (${fields.join(', ')})` };
}
