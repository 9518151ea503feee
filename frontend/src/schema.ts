// The schema editor's model and its conversion to and from the scorer's JSON
// format (engine/scorer ParseSchema).
import type { FieldType } from './types';

export interface OptionDraft {
  name: string;
  description: string;
  /** A score level's value when its name is not a number. */
  value?: string;
}

export interface FieldDraft {
  name: string;
  question: string;
  type: FieldType;
  options: OptionDraft[];
  /** A catalog field's number of distinct entries to name (1..entries). */
  k?: number;
}

export interface SchemaDraft {
  instructions: string;
  input_label: string;
  fields: FieldDraft[];
}

export const FIELD_TYPES: { type: FieldType; label: string; help: string }[] = [
  { type: 'choice', label: 'Choice', help: 'exactly one of the options: winner and full distribution' },
  { type: 'independent', label: 'Independent', help: 'each label true or false on its own: one yes-probability per label' },
  { type: 'bool', label: 'Bool', help: 'JSON true or false: probability of true' },
  { type: 'score', label: 'Score', help: 'one of ordered numeric levels: distribution and expected level' },
  { type: 'catalog', label: 'Catalog', help: 'k distinct entries of a named catalog, in order: decoded through a token trie' },
];

/** What the options of a field type are called. */
export function optionNoun(t: FieldType): string {
  return t === 'independent' ? 'label' : t === 'score' ? 'level' : t === 'catalog' ? 'entry' : 'option';
}

/** The JSON key the scorer reads a field's options from. */
function optionKey(t: FieldType): 'options' | 'labels' | 'levels' | 'entries' | null {
  return t === 'choice' ? 'options' : t === 'independent' ? 'labels' : t === 'score' ? 'levels' : t === 'catalog' ? 'entries' : null;
}

export function emptySchema(): SchemaDraft {
  return { instructions: '', input_label: '', fields: [] };
}

export function newField(type: FieldType, existing: FieldDraft[]): FieldDraft {
  let n = existing.length + 1;
  const names = new Set(existing.map((f) => f.name));
  while (names.has(`field_${n}`)) n++;
  const f: FieldDraft = { name: `field_${n}`, question: '', type, options: [] };
  return withType(f, type);
}

/** The field with another type, its options adapted (bool has none, score levels default to 1..5, a catalog names k = 1 entry). */
export function withType(f: FieldDraft, type: FieldType): FieldDraft {
  let options = f.options;
  if (type === 'bool') options = [];
  else if (type === 'score' && (options.length < 2 || f.type !== 'score')) {
    options = ['1', '2', '3', '4', '5'].map((name) => ({ name, description: '' }));
  } else if (f.type === 'bool' || f.type === 'score' || options.length === 0) {
    options = type === 'independent' ? [{ name: 'label a', description: '' }] : type === 'catalog' ? [
      { name: 'entry_a', description: '' },
      { name: 'entry_b', description: '' },
    ] : [
      { name: 'yes', description: '' },
      { name: 'no', description: '' },
    ];
  }
  const out: FieldDraft = { ...f, type, options: options.map((o) => ({ ...o })) };
  if (type === 'catalog') out.k = f.k != null && f.k >= 1 && f.k <= options.length ? f.k : 1;
  else delete out.k;
  return out;
}

/** The schema in the scorer's JSON format. */
export function toEngine(d: SchemaDraft): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (d.instructions.trim()) out.instructions = d.instructions.trim();
  if (d.input_label.trim()) out.input_label = d.input_label.trim();
  out.fields = d.fields.map((f) => {
    const o: Record<string, unknown> = { name: f.name, question: f.question, type: f.type };
    const key = optionKey(f.type);
    if (key) {
      o[key] = f.options.map((op) => {
        const item: Record<string, unknown> = { name: op.name };
        if (op.description.trim()) item.description = op.description.trim();
        if (f.type === 'score' && op.value != null && op.value.trim() !== '') item.value = Number(op.value);
        return item;
      });
    }
    // An array keeps the entries' order whatever their names (a JS object puts integer-like keys first).
    if (f.type === 'catalog') o.k = f.k ?? 1;
    return o;
  });
  return out;
}

export class SchemaFormatError extends Error {}

/** Reads the scorer's JSON format (options as a name→description object, an
 *  array of names, or an array of {name, description, value}). */
export function fromEngine(json: unknown): SchemaDraft {
  if (!json || typeof json !== 'object' || Array.isArray(json)) throw new SchemaFormatError('a schema is a JSON object with "fields"');
  const j = json as Record<string, unknown>;
  if (!Array.isArray(j.fields)) throw new SchemaFormatError('the schema has no "fields" array');
  const str = (v: unknown) => (typeof v === 'string' ? v : v == null ? '' : String(v));
  return {
    instructions: str(j.instructions),
    input_label: str(j.input_label),
    fields: j.fields.map((raw, i) => {
      if (!raw || typeof raw !== 'object') throw new SchemaFormatError(`field ${i + 1} is not an object`);
      const f = raw as Record<string, unknown>;
      const type = str(f.type) as FieldType;
      if (!['choice', 'independent', 'bool', 'score', 'catalog'].includes(type)) {
        throw new SchemaFormatError(`field ${str(f.name) || i + 1}: unknown type "${str(f.type)}" (choice, independent, bool, score, catalog)`);
      }
      const src = type === 'independent' ? (f.labels ?? f.options) : type === 'score' ? f.levels : type === 'choice' ? f.options : type === 'catalog' ? f.entries : undefined;
      const fd: FieldDraft = { name: str(f.name), question: str(f.question), type, options: readOptions(src, str(f.name)) };
      if (type === 'catalog') {
        if (f.k != null && typeof f.k !== 'number') throw new SchemaFormatError(`field ${fd.name}: k must be a number`);
        fd.k = typeof f.k === 'number' ? f.k : 0;
      }
      return fd;
    }),
  };
}

function readOptions(src: unknown, field: string): OptionDraft[] {
  if (src == null) return [];
  if (Array.isArray(src)) {
    return src.map((it) => {
      if (typeof it === 'string' || typeof it === 'number') return { name: String(it), description: '' };
      if (it && typeof it === 'object') {
        const o = it as Record<string, unknown>;
        const od: OptionDraft = { name: String(o.name ?? ''), description: String(o.description ?? '') };
        if (o.value != null) od.value = String(o.value);
        return od;
      }
      throw new SchemaFormatError(`field ${field}: each option is a name or {"name", "description"}`);
    });
  }
  if (typeof src === 'object') {
    return Object.entries(src as Record<string, unknown>).map(([name, d]) => ({ name, description: String(d ?? '') }));
  }
  throw new SchemaFormatError(`field ${field}: options must be an object or an array`);
}

export interface DraftProblem {
  field: number; // -1: the schema as a whole
  /** The problem naming its field: "field 2 (priority) needs a question" (the status, Run's reason). */
  message: string;
  /** The same inside the field's own card: "needs a question". */
  detail: string;
}

/** How a problem names field i: "field 2 (priority)", or "field 2" while it has no name. */
export function fieldLabel(f: FieldDraft, i: number): string {
  return f.name.trim() ? `field ${i + 1} (${f.name.trim()})` : `field ${i + 1}`;
}

/** Quick checks made while typing (the Go scorer makes the full check). */
export function problems(d: SchemaDraft): DraftProblem[] {
  const out: DraftProblem[] = [];
  if (d.fields.length === 0) out.push({ field: -1, message: 'add at least one field', detail: 'add at least one field' });
  const first = new Map<string, number>();
  d.fields.forEach((f, i) => {
    const label = fieldLabel(f, i);
    // "needs …" and "has …" read after the field's label; other details after a colon.
    const p = (detail: string) => out.push({ field: i, detail, message: /^(needs|has) /.test(detail) ? `${label} ${detail}` : `${label}: ${detail}` });
    if (!f.name.trim()) p('needs a name');
    else if (first.has(f.name)) p(`has the same name as field ${first.get(f.name)! + 1}`);
    else first.set(f.name, i);
    if (!f.question.trim()) p('needs a question');
    const noun = optionNoun(f.type);
    const names = new Set<string>();
    f.options.forEach((o, j) => {
      if (!o.name.trim()) p(`${noun} ${j + 1} has no name`);
      else if (names.has(o.name)) p(`duplicate ${noun} "${o.name}"`);
      names.add(o.name);
    });
    if (f.type === 'choice' && f.options.length < 2) p('a choice needs at least 2 options');
    if (f.type === 'independent' && f.options.length < 1) p('an independent field needs at least 1 label');
    if (f.type === 'catalog') {
      const k = f.k ?? 0;
      if (f.options.length < 1) p('a catalog needs at least 1 entry');
      else if (!Number.isInteger(k) || k < 1 || k > f.options.length) p(`k = ${k}, but the catalog has ${f.options.length} entr${f.options.length === 1 ? 'y' : 'ies'} (k must be 1..${f.options.length})`);
    }
    if (f.type === 'score') {
      if (f.options.length < 2) p('a score needs at least 2 levels');
      const vals = f.options.map((o) => (o.value != null && o.value.trim() !== '' ? Number(o.value) : Number(o.name)));
      if (vals.some((v) => !isFinite(v))) p('every level needs a number (its name or a value)');
      else if (vals.some((v, k) => k > 0 && v <= vals[k - 1])) p('levels must increase');
    }
  });
  return out;
}

/** The number of primitive decisions (branches) of the schema. */
export function decisions(d: SchemaDraft): number {
  return d.fields.reduce((n, f) => n + (f.type === 'independent' ? f.options.length : 1), 0);
}

export function moveField(d: SchemaDraft, from: number, to: number): SchemaDraft {
  if (to < 0 || to >= d.fields.length) return d;
  const fields = d.fields.slice();
  const [f] = fields.splice(from, 1);
  fields.splice(to, 0, f);
  return { ...d, fields };
}
