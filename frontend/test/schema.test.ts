import { decisions, fromEngine, moveField, newField, problems, SchemaFormatError, toEngine, withType } from '../src/schema';
import { ticketSchema } from './fixtures';

describe('schema', () => {
  it('reads every option format of the scorer', () => {
    const d = fromEngine({
      fields: [
        { name: 'a', question: 'q', type: 'choice', options: { low: 'can wait', high: 'today' } },
        { name: 'b', question: 'q', type: 'independent', labels: ['x', 'y'] },
        { name: 'c', question: 'q', type: 'score', levels: [{ name: 'mild', description: 'd', value: 1 }, { name: 'bad', value: 2 }] },
        { name: 'd', question: 'q', type: 'independent', options: { z: 'zed' } },
        { name: 'e', question: 'q', type: 'bool' },
      ],
    });
    expect(d.fields[0].options).toEqual([{ name: 'low', description: 'can wait' }, { name: 'high', description: 'today' }]);
    expect(d.fields[1].options.map((o) => o.name)).toEqual(['x', 'y']);
    expect(d.fields[2].options[0]).toEqual({ name: 'mild', description: 'd', value: '1' });
    expect(d.fields[3].options).toEqual([{ name: 'z', description: 'zed' }]);
    expect(d.fields[4].options).toEqual([]);
    expect(decisions(d)).toBe(1 + 2 + 1 + 1 + 1);
  });

  it('round-trips through the engine format', () => {
    const d = fromEngine(ticketSchema);
    const e = toEngine(d) as any;
    expect(e.instructions).toBe(ticketSchema.instructions);
    expect(e.fields[0]).toEqual({ name: 'priority', question: 'How urgent is this ticket?', type: 'choice', options: [{ name: 'low' }, { name: 'medium' }, { name: 'high' }, { name: 'critical' }] });
    expect(e.fields[1]).toEqual({ name: 'refund_requested', question: 'Does the customer ask for a refund?', type: 'bool' });
    expect(e.fields[2].labels).toEqual([{ name: 'late delivery' }, { name: 'damaged item' }]);
    expect(e.fields[3].levels).toEqual([{ name: '1' }, { name: '2' }, { name: '3' }]);
    expect(fromEngine(e)).toEqual(d);
    expect(problems(d)).toEqual([]);
  });

  it.each([
    [{}, 'no "fields"'],
    [[], 'JSON object'],
    [{ fields: [{ name: 'x', type: 'maybe' }] }, 'unknown type'],
    [{ fields: [{ name: 'x', type: 'choice', options: 3 }] }, 'object or an array'],
  ])('rejects %j', (j, msg) => {
    expect(() => fromEngine(j)).toThrow(SchemaFormatError);
    expect(() => fromEngine(j)).toThrow(msg);
  });

  it('finds problems while typing', () => {
    const d = fromEngine(ticketSchema);
    d.fields[1].name = 'priority';
    d.fields[0].options = [{ name: 'only', description: '' }];
    d.fields[3].options = [{ name: '2', description: '' }, { name: '1', description: '' }];
    d.fields[2].question = '';
    d.fields[3].options.push({ name: '', description: '' });
    const msgs = problems(d).map((p) => `${p.field}: ${p.message}`);
    // Each problem names its field by number and name (the status line and Run's reason show them).
    expect(msgs).toEqual([
      '0: field 1 (priority): a choice needs at least 2 options',
      '1: field 2 (priority) has the same name as field 1',
      '2: field 3 (issues) needs a question',
      '3: field 4 (anger): level 3 has no name',
      '3: field 4 (anger): levels must increase',
    ]);
    // The field's own card says it without the label.
    expect(problems(d).filter((p) => p.field === 2).map((p) => p.detail)).toEqual(['needs a question']);
    d.fields[0].name = ' ';
    expect(problems(d)[0].message).toBe('field 1 needs a name');
    expect(problems({ instructions: '', input_label: '', fields: [] })[0].message).toMatch(/at least one field/);
  });

  it('adds, retypes and moves fields', () => {
    const d = fromEngine(ticketSchema);
    const f = newField('score', d.fields);
    expect(f.name).toBe('field_5');
    expect(f.options.map((o) => o.name)).toEqual(['1', '2', '3', '4', '5']);
    expect(withType(f, 'bool').options).toEqual([]);
    expect(withType(withType(f, 'bool'), 'choice').options.map((o) => o.name)).toEqual(['yes', 'no']);
    expect(withType(d.fields[0], 'independent').options.map((o) => o.name)).toEqual(['low', 'medium', 'high', 'critical']);
    const moved = moveField(d, 0, 2);
    expect(moved.fields.map((x) => x.name)).toEqual(['refund_requested', 'issues', 'priority', 'anger']);
    expect(moveField(d, 0, -1)).toBe(d);
  });
});
