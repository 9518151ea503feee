// The schema editor: fields with their contract type and options, presets,
// JSON import and export.
import { FIELD_TYPES, fromEngine, newField, optionNoun, problems, decisions, toEngine, withType, moveField, type SchemaDraft, type FieldDraft } from '../schema';
import type { Preset, SchemaCheck, FieldType } from '../types';
import { h, replace } from './dom';
import { errorText, toast } from './toast';

export interface SchemaEditorHost {
  draft(): SchemaDraft;
  schemaName(): string;
  presets(): Preset[];
  check(): SchemaCheck | undefined;
  /** structural: the editor re-renders (fields or options added, removed, moved, retyped). */
  change(d: SchemaDraft, name: string, structural: boolean): void;
  loadPreset(p: Preset): void;
  exportText(name: string, content: string): void;
}

export class SchemaEditor {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private status: HTMLElement;
  private presetSelect: HTMLSelectElement;
  private jsonMode = false;
  /** Why the JSON in the editor was not applied (shown under it, and in the status). */
  private jsonError = '';

  constructor(private host: SchemaEditorHost) {
    this.presetSelect = h('select#preset', { 'aria-label': 'Preset schema', onchange: () => this.pickPreset() });
    const importInput = h('input#schema-import', { type: 'file', accept: '.json,application/json', hidden: true, onchange: (e: Event) => this.importFile(e) });
    this.body = h('div.schema-body');
    this.status = h('div.schema-status', { 'aria-live': 'polite' });
    this.el = h('section.card.schema#schema', { 'aria-label': 'Schema' },
      h('header.card-head', null,
        h('h2', null, 'Schema'),
        h('div.head-actions', null,
          this.presetSelect,
          h('button.btn.small', { type: 'button', title: 'Import a schema from a JSON file', onclick: () => importInput.click() }, 'Import'),
          h('button.btn.small', { type: 'button', title: 'Export the schema as JSON', onclick: () => this.exportJSON() }, 'Export'),
          h('button.btn.small#schema-json-toggle', { type: 'button', title: 'Edit the schema as JSON', 'aria-pressed': 'false', onclick: () => this.toggleJSON() }, '{ }'),
          importInput)),
      this.body,
      this.status);
    this.render();
  }

  private pickPreset() {
    const id = this.presetSelect.value;
    const p = this.host.presets().find((p) => p.id === id);
    if (p) this.host.loadPreset(p);
  }

  private async importFile(e: Event) {
    const input = e.target as HTMLInputElement;
    const f = input.files?.[0];
    input.value = '';
    if (!f) return;
    try {
      const d = fromEngine(JSON.parse(await f.text()));
      this.host.change(d, f.name.replace(/\.json$/i, ''), true);
      // The imported schema replaces what the editor shows: the JSON text
      // and its error too when the JSON editor is open.
      this.jsonError = '';
      this.render();
      toast(`Imported ${d.fields.length} fields from ${f.name}`, 'ok');
    } catch (err) {
      toast(`Cannot import ${f.name}: ${errorText(err)}`, 'error');
    }
  }

  private exportJSON() {
    const name = (this.host.schemaName() || 'schema').replace(/[^\w.-]+/g, '-');
    this.host.exportText(`${name}.json`, JSON.stringify(toEngine(this.host.draft()), null, 2) + '\n');
  }

  private toggleJSON() {
    this.jsonMode = !this.jsonMode;
    this.jsonError = '';
    this.el.querySelector('#schema-json-toggle')?.setAttribute('aria-pressed', String(this.jsonMode));
    this.render();
  }

  /** Re-renders the preset list (when presets arrive). */
  renderPresets() {
    const cur = this.host.schemaName();
    replace(this.presetSelect,
      h('option', { value: '' }, 'Presets…'),
      this.host.presets().map((p) => h('option', { value: p.id, title: p.description, selected: p.id === cur }, p.name)));
  }

  render() {
    const d = this.host.draft();
    if (this.jsonMode) {
      const ta = h('textarea.json-edit#schema-json', { spellcheck: false, 'aria-label': 'Schema JSON', rows: 24 });
      ta.value = JSON.stringify(toEngine(d), null, 2);
      const errBox = h('div.json-error#schema-json-error', { role: 'alert', hidden: !this.jsonError }, this.jsonError);
      const apply = () => {
        let d: SchemaDraft;
        try {
          d = fromEngine(JSON.parse(ta.value));
        } catch (err) {
          this.jsonError = `Not applied: ${errorText(err)}`;
          errBox.textContent = this.jsonError;
          errBox.hidden = false;
          this.renderStatus();
          return;
        }
        this.jsonMode = false;
        this.jsonError = '';
        this.el.querySelector('#schema-json-toggle')?.setAttribute('aria-pressed', 'false');
        this.host.change(d, this.host.schemaName(), true);
        this.render();
      };
      replace(this.body, ta, errBox, h('div.row-actions', null,
        h('button.btn.primary.small', { type: 'button', onclick: apply }, 'Apply JSON'),
        h('button.btn.small', { type: 'button', onclick: () => this.toggleJSON() }, 'Cancel')));
      this.renderStatus();
      return;
    }
    const fields = h('ol.fields');
    d.fields.forEach((f, i) => fields.appendChild(this.fieldCard(d, f, i)));
    const addButtons = FIELD_TYPES.map((t) =>
      h('button.btn.small.add-field', { type: 'button', title: `Add a ${t.label.toLowerCase()} field: ${t.help}`, dataset: { type: t.type }, onclick: () => this.addField(t.type) }, `+ ${t.label}`));
    const wording = h('details.wording', null,
      h('summary', null, 'Prompt wording'),
      h('label.lbl', null, 'Instructions',
        h('input', { value: d.instructions, placeholder: 'Read the input and answer every field in JSON.', oninput: (e: Event) => this.edit((x) => (x.instructions = (e.target as HTMLInputElement).value)) })),
      h('label.lbl', null, 'Input label',
        h('input', { value: d.input_label, placeholder: 'Input', oninput: (e: Event) => this.edit((x) => (x.input_label = (e.target as HTMLInputElement).value)) })));
    replace(this.body, wording, fields, h('div.add-fields', null, h('span.muted', null, 'Add field:'), addButtons));
    this.renderStatus();
  }

  private fieldCard(d: SchemaDraft, f: FieldDraft, i: number): HTMLElement {
    const probs = problems(d).filter((p) => p.field === i);
    const typeSel = h('select.field-type', { 'aria-label': `Type of ${f.name}`, onchange: (e: Event) => this.retype(i, (e.target as HTMLSelectElement).value as FieldType) },
      FIELD_TYPES.map((t) => h('option', { value: t.type, selected: t.type === f.type, title: t.help }, t.label)));
    const card = h('li.field-card', { dataset: { field: String(i) } },
      h('div.field-row', null,
        h('input.field-name', { value: f.name, 'aria-label': 'Field name', placeholder: 'name', spellcheck: false,
          oninput: (e: Event) => this.edit((x) => (x.fields[i].name = (e.target as HTMLInputElement).value)) }),
        typeSel,
        h('div.field-tools', null,
          h('button.icon', { type: 'button', title: 'Move up', 'aria-label': `Move ${f.name} up`, disabled: i === 0, onclick: () => this.move(i, i - 1) }, '↑'),
          h('button.icon', { type: 'button', title: 'Move down', 'aria-label': `Move ${f.name} down`, disabled: i === d.fields.length - 1, onclick: () => this.move(i, i + 1) }, '↓'),
          h('button.icon.danger', { type: 'button', title: 'Remove field', 'aria-label': `Remove ${f.name}`, onclick: () => this.removeField(i) }, '×'))),
      h('input.field-question', { value: f.question, 'aria-label': 'Question', placeholder: 'The question, e.g. How urgent is this ticket?',
        oninput: (e: Event) => this.edit((x) => (x.fields[i].question = (e.target as HTMLInputElement).value)) }),
      this.typeBody(f, i),
      probs.length ? h('ul.problems', null, probs.map((p) => h('li', null, p.detail))) : null);
    return card;
  }

  /** What a field of f's type edits beyond its name and question (one case per field type). */
  private typeBody(f: FieldDraft, i: number): HTMLElement {
    switch (f.type) {
      case 'bool':
        return h('div.muted.small', null, 'Answered true or false.');
      case 'choice':
      case 'independent':
      case 'score':
        return this.optionsList(f, i);
      case 'catalog':
        return h('div.catalog-body', null, this.catalogK(f, i), this.optionsList(f, i));
    }
  }

  /** A catalog field's k: how many distinct entries it names, 1..entries (checked by problems()). */
  private catalogK(f: FieldDraft, i: number): HTMLElement {
    const n = f.options.length;
    const count = h('span.muted.catalog-count', null, `of ${n} entr${n === 1 ? 'y' : 'ies'}, in order`);
    return h('label.catalog-k', { title: 'How many distinct entries the answer names (1 to the number of entries)' }, 'names k =',
      h('input.field-k', { type: 'number', min: 1, max: Math.max(1, n), step: 1, value: String(f.k ?? ''), 'aria-label': `k of ${f.name}`,
        oninput: (e: Event) => {
          const v = (e.target as HTMLInputElement).value.trim();
          this.edit((x) => (x.fields[i].k = v === '' ? 0 : Number(v)));
        } }),
      count);
  }

  private optionsList(f: FieldDraft, i: number): HTMLElement {
    const noun = optionNoun(f.type);
    const list = h('ul.options');
    f.options.forEach((o, j) => {
      const name = h('input.opt-name', { value: o.name, placeholder: noun, 'aria-label': `${noun} ${j + 1} of ${f.name}`, spellcheck: false,
        oninput: (e: Event) => this.edit((x) => (x.fields[i].options[j].name = (e.target as HTMLInputElement).value)),
        onkeydown: (e: KeyboardEvent) => {
          if (e.key === 'Enter' && j === f.options.length - 1) {
            e.preventDefault();
            this.addOption(i);
          }
        } });
      list.appendChild(h('li.option', null,
        name,
        f.type === 'score'
          ? h('input.opt-value', { value: o.value ?? '', placeholder: 'value', title: 'Numeric value (when the name is not a number)', 'aria-label': `value of ${noun} ${j + 1}`,
            oninput: (e: Event) => this.edit((x) => (x.fields[i].options[j].value = (e.target as HTMLInputElement).value)) })
          : null,
        h('input.opt-desc', { value: o.description, placeholder: 'description (criteria)', 'aria-label': `description of ${noun} ${j + 1}`,
          oninput: (e: Event) => this.edit((x) => (x.fields[i].options[j].description = (e.target as HTMLInputElement).value)) }),
        h('button.icon.danger', { type: 'button', title: `Remove ${noun}`, 'aria-label': `Remove ${noun} ${o.name}`, onclick: () => this.removeOption(i, j) }, '×')));
    });
    return h('div.options-wrap', null, list,
      h('button.btn.link.small.add-option', { type: 'button', onclick: () => this.addOption(i) }, `+ add ${noun}`));
  }

  renderStatus() {
    const d = this.host.draft();
    const c = this.host.check();
    const local = problems(d);
    const summary = `${d.fields.length} field${d.fields.length === 1 ? '' : 's'} · ${decisions(d)} decision${decisions(d) === 1 ? '' : 's'}`;
    let msg: HTMLElement;
    if (this.jsonMode) msg = this.jsonError ? h('span.bad', null, 'the JSON has a problem: not applied') : h('span.muted', null, 'editing as JSON: Apply JSON to use it');
    else if (local.length) msg = h('span.bad', null, `${local.length} problem${local.length === 1 ? '' : 's'}: ${local[0].message}`);
    else if (c && !c.ok) msg = h('span.bad', null, c.error ?? 'invalid schema');
    else if (c && c.ok) msg = h('span.good', null, '✓ ready to score');
    else msg = h('span.muted', null, 'checking…');
    replace(this.status, h('span', null, summary), msg);
    // Field-level problems shown inline only on structural renders; keep the status current.
  }

  /** Applies a text edit without re-rendering (keeps the focus). */
  private edit(f: (d: SchemaDraft) => void) {
    const d = structuredClone(this.host.draft());
    f(d);
    this.host.change(d, this.host.schemaName(), false);
    this.renderProblems(d);
    this.renderStatus();
  }

  /** Updates each field card's list of problems in place. */
  private renderProblems(d: SchemaDraft) {
    const all = problems(d);
    this.body.querySelectorAll<HTMLElement>('li.field-card').forEach((card) => {
      const i = Number(card.dataset.field);
      const msgs = all.filter((p) => p.field === i).map((p) => p.detail);
      let ul = card.querySelector(':scope > ul.problems');
      if (!msgs.length) {
        ul?.remove();
        return;
      }
      if (!ul) {
        ul = h('ul.problems');
        card.appendChild(ul);
      }
      replace(ul, msgs.map((m) => h('li', null, m)));
    });
  }

  private structural(d: SchemaDraft, focus?: string) {
    this.host.change(d, this.host.schemaName(), true);
    this.render();
    if (focus) (this.body.querySelector(focus) as HTMLElement | null)?.focus();
  }

  private addField(t: FieldType) {
    const d = structuredClone(this.host.draft());
    d.fields.push(newField(t, d.fields));
    this.structural(d, `li.field-card[data-field="${d.fields.length - 1}"] .field-question`);
  }

  private removeField(i: number) {
    const d = structuredClone(this.host.draft());
    d.fields.splice(i, 1);
    this.structural(d);
  }

  private move(i: number, j: number) {
    this.structural(moveField(structuredClone(this.host.draft()), i, j), `li.field-card[data-field="${j}"] .field-name`);
  }

  private retype(i: number, t: FieldType) {
    const d = structuredClone(this.host.draft());
    d.fields[i] = withType(d.fields[i], t);
    this.structural(d, `li.field-card[data-field="${i}"] .field-type`);
  }

  private addOption(i: number) {
    const d = structuredClone(this.host.draft());
    const f = d.fields[i];
    const next = f.type === 'score' ? String(Math.max(0, ...f.options.map((o) => Number(o.name)).filter(isFinite)) + 1) : '';
    f.options.push({ name: next, description: '' });
    this.structural(d, `li.field-card[data-field="${i}"] li.option:last-child .opt-name`);
  }

  private removeOption(i: number, j: number) {
    const d = structuredClone(this.host.draft());
    d.fields[i].options.splice(j, 1);
    this.structural(d);
  }
}
