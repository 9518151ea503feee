import { ellipsis, fmtBytes, fmtDelta, fmtMass, fmtMs, fmtParams, fmtPct, fmtRate } from '../src/format';

describe('format', () => {
  it.each([
    [0.423, '0.42 ms'], [8.34, '8.3 ms'], [412.4, '412 ms'], [1250, '1.25 s'], [72400, '72.4 s'], [undefined, '—'], [NaN, '—'],
  ])('fmtMs(%s) = %s', (v, want) => expect(fmtMs(v as number)).toBe(want));

  it.each([[45.12, '45.1 tok/s'], [1234.4, '1,234 tok/s'], [0, '—'], [undefined, '—']])('fmtRate(%s) = %s', (v, want) =>
    expect(fmtRate(v as number)).toBe(want));

  it.each([[0.532, '53.2%'], [0.0004, '<0.1%'], [0.99999, '>99.9%'], [1, '100%'], [0, '0.0%']])('fmtPct(%s) = %s', (v, want) =>
    expect(fmtPct(v)).toBe(want));

  it('formats masses, sizes, parameters and deltas', () => {
    expect(fmtMass(0.823)).toBe('0.82');
    expect(fmtMass(3.1e-6)).toBe('3.1e-6');
    expect(fmtBytes(512)).toBe('512 B');
    expect(fmtBytes(10870)).toBe('11 KB');
    expect(fmtBytes(1234)).toBe('1.2 KB');
    expect(fmtBytes(10.2e9)).toBe('10 GB');
    expect(fmtParams(42235312)).toBe('42.2 M');
    expect(fmtParams(5.44e9)).toBe('5.44 B');
    expect(fmtDelta(12.46)).toBe('+12.5%');
    expect(fmtDelta(-3)).toBe('−3.0%');
    expect(fmtDelta(0.01)).toBe('±0%');
    expect(fmtDelta(null)).toBe('—');
    expect(ellipsis('a  b\nc', 10)).toBe('a b c');
    expect(ellipsis('abcdefghijkl', 5)).toBe('abcd…');
  });
});
