// Finding the JSON object a model wrote (as app.ExtractJSON does in Go).

export type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

/** The first complete JSON object in text (e.g. inside a ```json fence). */
export function extractJSON(text: string): Parsed {
  const t = text.trim();
  if (!t) return { ok: false, error: 'no text yet' };
  const start = t.indexOf('{');
  if (start < 0) return { ok: false, error: 'no JSON object in the text' };
  // Scan for the matching brace, honouring strings and escapes.
  let depth = 0;
  let inStr = false;
  let esc = false;
  for (let i = start; i < t.length; i++) {
    const c = t[i];
    if (inStr) {
      if (esc) esc = false;
      else if (c === '\\') esc = true;
      else if (c === '"') inStr = false;
      continue;
    }
    if (c === '"') inStr = true;
    else if (c === '{') depth++;
    else if (c === '}') {
      depth--;
      if (depth === 0) {
        try {
          return { ok: true, value: JSON.parse(t.slice(start, i + 1)) };
        } catch (e) {
          return { ok: false, error: `not valid JSON: ${(e as Error).message}` };
        }
      }
    }
  }
  return { ok: false, error: 'the JSON object is not complete' };
}
