import { agrees, applyUpdate, fromRecord, running, scorerValue, startRun } from '../src/run';
import { findAnswer } from '../src/jsonparse';
import { fields, record } from './fixtures';

const started = { id: 'run-1', started_ms: 1, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true };

describe('live runs', () => {
  it('builds the run from coalesced updates', () => {
    let r = startRun(started);
    expect(running(r)).toBe(true);
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 50, generator: { status: 'decoding', delta: '{"prio', tokens: 2 } });
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 100, scorer: { status: 'scoring', fields: [fields[1]], done: 1, total: 4 }, generator: { status: 'decoding', delta: 'rity"', tokens: 3 } });
    r = applyUpdate(r, { id: 'run-2', elapsed_ms: 120, generator: { status: 'decoding', delta: 'OTHER RUN', tokens: 9 } });
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 90, scorer: { status: 'scoring', fields: [fields[0], fields[2]], done: 3, total: 4 } });
    expect(r.generator!.text).toBe('{"priority"');
    expect(r.generator!.tokens).toBe(3);
    expect([...r.scorer!.fields.keys()]).toEqual(['refund_requested', 'priority', 'issues']);
    expect(r.scorer!.done).toBe(3);
    expect(r.elapsedMs).toBe(100); // never goes back
    r = applyUpdate(r, { id: 'run-1', elapsed_ms: 200, scorer: { status: 'done', fields: [fields[3]], done: 4, total: 4 }, generator: { status: 'done', tokens: 3 } });
    expect(running(r)).toBe(false);
  });

  it('takes the final record, and ignores updates after it', () => {
    const r = fromRecord(record('run-1'));
    expect(r.scorer!.fields.size).toBe(4);
    expect(r.generator!.tokens).toBe(21);
    expect(applyUpdate(r, { id: 'run-1', elapsed_ms: 1e6, generator: { status: 'decoding', delta: 'x', tokens: 1 } })).toBe(r);
  });

  it('compares the generated JSON with the scorer', () => {
    expect(scorerValue(fields[0])).toBe('high');
    expect(scorerValue(fields[1])).toBe(true);
    expect(scorerValue(fields[2])).toEqual({ 'late delivery': true, 'damaged item': false });
    expect(scorerValue(fields[3])).toBe(3);
    const gen = { priority: 'high', refund_requested: false, issues: { 'late delivery': true, 'damaged item': false }, anger: '3' };
    expect(fields.map((f) => agrees(f, gen))).toEqual([true, false, true, true]);
    expect(agrees(fields[0], {})).toBeNull();
    expect(agrees(fields[2], { issues: 'yes' })).toBe(false);
  });
});

describe('findAnswer with no fields: any object', () => {
  it.each([
    ['{"a": 1}', { a: 1 }],
    ['```json\n{"priority": "high", "n": {"x": "}"}}\n```', { priority: 'high', n: { x: '}' } }],
    ['Sure: {"q": "say \\"hi\\""} done', { q: 'say "hi"' }],
  ])('finds the object in %j', (text, want) => {
    const p = findAnswer(text, []);
    expect(p.ok && p.value).toEqual(want);
  });
  it.each([['', 'no text'], ['no braces', 'no JSON object'], ['{"a": ', 'not complete'], ['{a: 1}', 'not valid JSON']])('reports %j', (text, msg) => {
    const p = findAnswer(text, []);
    expect(p.ok).toBe(false);
    expect(!p.ok && p.error).toContain(msg);
  });
});
