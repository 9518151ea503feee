import { csvCell, delta, exportName, fieldSummary, METRICS, sameAnswers, toCSV, toJSON, verdictOf } from '../src/history';
import { fields, record } from './fixtures';

describe('history', () => {
  it('compares with a baseline', () => {
    const base = record('run-1', {}, { total: 200, decode: 40 });
    const r = record('run-2', {}, { total: 150, decode: 50 });
    const total = METRICS.find((m) => m.key === 'scorer_total')!;
    const decode = METRICS.find((m) => m.key === 'gen_decode_tps')!;
    const dt = delta(total.get(r), total.get(base));
    const dd = delta(decode.get(r), decode.get(base));
    expect(dt).toBeCloseTo(-25);
    expect(dd).toBeCloseTo(25);
    expect(verdictOf(total, dt)).toBe('better');
    expect(verdictOf(decode, dd)).toBe('better');
    expect(verdictOf(decode, -10)).toBe('worse');
    expect(verdictOf(total, 1)).toBe('same');
    expect(delta(undefined, 3)).toBeNull();
    expect(sameAnswers(base, r)).toEqual({ same: 4, compared: 4 });
    const other = record('run-3');
    other.scorer = { ...other.scorer!, fields: [{ ...fields[0], winner: 'low' }, fields[1]] };
    expect(sameAnswers(base, other)).toEqual({ same: 1, compared: 2 });
  });

  it('summarises fields', () => {
    expect(fieldSummary(fields[0])).toBe('high (60.0%)');
    expect(fieldSummary(fields[1])).toBe('true (p_true 80.0%)');
    expect(fieldSummary(fields[2])).toBe('late delivery 90.0%; damaged item 30.0%');
    expect(fieldSummary(fields[3])).toBe('3 (70.0%, E=2.50)');
  });

  it('quotes CSV cells', () => {
    expect(csvCell('plain')).toBe('plain');
    expect(csvCell('a,b')).toBe('"a,b"');
    expect(csvCell('say "hi"')).toBe('"say ""hi"""');
    expect(csvCell('two\nlines')).toBe('"two\nlines"');
    expect(csvCell(1.23456789)).toBe('1.2346');
    expect(csvCell(undefined)).toBe('');
    expect(csvCell({ a: 1 })).toBe('"{""a"":1}"');
  });

  it('exports CSV with a column per field', () => {
    const csv = toCSV([record('run-1'), record('run-2')]);
    const lines = csv.trimEnd().split('\r\n');
    expect(lines).toHaveLength(3);
    const header = lines[0].split(',');
    expect(header.slice(0, 3)).toEqual(['id', 'started', 'model']);
    expect(header.slice(-4)).toEqual(['field:priority', 'field:refund_requested', 'field:issues', 'field:anger']);
    expect(lines[1]).toContain('"My parcel is late, ""urgent"", please refund"');
    expect(lines[1]).toContain('high (60.0%)');
    expect(lines[1].startsWith('run-1,2026-11-29T14:03:27.000Z,')).toBe(true);
  });

  it('exports JSON that reads back', () => {
    const j = JSON.parse(toJSON([record('run-1')]));
    expect(j.format).toBe('verdict-runs');
    expect(j.runs[0].id).toBe('run-1');
    expect(exportName('csv', new Date(2026, 10, 29, 9, 5, 7))).toBe('verdict-runs-20261129-090507.csv');
  });
});
