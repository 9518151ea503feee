import { fromEngine, toEngine, type SchemaDraft } from '../src/schema';
import { InputPanel, type InputHost } from '../src/ui/inputPanel';
import { SchemaEditor } from '../src/ui/schemaEditor';
import { ticketSchema } from './fixtures';

function editor() {
  let draft: SchemaDraft = fromEngine(ticketSchema);
  let name = 'ticket';
  const ed = new SchemaEditor({
    draft: () => draft, schemaName: () => name, presets: () => [], check: () => undefined,
    change: (d, n) => { draft = d; name = n; }, loadPreset: () => {}, exportText: () => {},
  });
  document.body.appendChild(ed.el);
  return { ed, draft: () => draft };
}

/** A JSON file (jsdom's File has no text()). */
function jsonFile(name: string, content: unknown): File {
  const text = JSON.stringify(content);
  return Object.assign(new File([text], name, { type: 'application/json' }), { text: async () => text });
}

/** Picks file in the editor's Import input. */
async function importFile(ed: SchemaEditor, file: File) {
  const input = ed.el.querySelector('#schema-import') as HTMLInputElement;
  Object.defineProperty(input, 'files', { value: [file], configurable: true });
  input.dispatchEvent(new Event('change'));
  for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
}

describe('schema editor: import and problems', () => {
  it('an import replaces the JSON editor\'s text and clears its error', async () => {
    const { ed, draft } = editor();
    (ed.el.querySelector('#schema-json-toggle') as HTMLButtonElement).click();
    const ta = () => ed.el.querySelector('#schema-json') as HTMLTextAreaElement;
    ta().value = '{"fields": [';
    [...ed.el.querySelectorAll('button')].find((b) => b.textContent === 'Apply JSON')!.click();
    const err = () => ed.el.querySelector('#schema-json-error') as HTMLElement;
    expect(err().hidden).toBe(false);
    expect(err().textContent).toMatch(/^Not applied: /);

    const imported = { fields: [{ name: 'spam', question: 'Is it spam?', type: 'bool' }] };
    await importFile(ed, jsonFile('spam.json', imported));
    expect(draft().fields.map((f) => f.name)).toEqual(['spam']);
    expect(JSON.parse(ta().value)).toEqual(toEngine(draft()));
    expect(err().hidden).toBe(true);
    expect(err().textContent).toBe('');
    expect(ed.el.querySelector('.schema-status')!.textContent).not.toContain('has a problem');
    ed.el.remove();
  });

  it('an import in the form editor shows the imported fields', async () => {
    const { ed } = editor();
    await importFile(ed, jsonFile('spam.json', { fields: [{ name: 'spam', question: 'Is it spam?', type: 'bool' }] }));
    expect([...ed.el.querySelectorAll<HTMLInputElement>('.field-card .field-name')].map((i) => i.value)).toEqual(['spam']);
    ed.el.remove();
  });

  it('the status names the field of a problem; its card says what it lacks', () => {
    const { ed } = editor();
    const q = ed.el.querySelector('li.field-card[data-field="1"] .field-question') as HTMLInputElement;
    q.value = '';
    q.dispatchEvent(new Event('input'));
    expect(ed.el.querySelector('.schema-status')!.textContent).toContain('1 problem: field 2 (refund_requested) needs a question');
    expect(ed.el.querySelector('li.field-card[data-field="1"] .problems')!.textContent).toBe('needs a question');
    ed.el.remove();
  });
});

describe('run bar', () => {
  it('shows why Run is held back whole', () => {
    const why = 'fix the schema: field 12 (refund_requested_by_the_customer_in_writing) needs a question';
    const host: InputHost = {
      input: () => '', files: () => [], setInput: () => {}, addFiles: () => {}, pickFiles: () => {}, removeFile: () => {},
      mode: () => 'browser', chooseFiles: () => {}, canRun: () => ({ ok: false, why }), running: () => false,
      run: () => {}, stop: () => {}, inputTokensHint: () => '',
    };
    const p = new InputPanel(host);
    p.render();
    const el = p.actions.querySelector('#run-why')!;
    expect(el.textContent).toBe(why);
    expect(el.classList.contains('run-hint')).toBe(false); // the hint's style cuts it to one line
    expect((p.actions.querySelector('#run') as HTMLButtonElement).disabled).toBe(true);
  });
});
