import { generatorLane, scorerLane, ticks } from '../src/waterfall';
import { record } from './fixtures';

describe('waterfall', () => {
  it('lays the scorer out on the run axis', () => {
    const l = scorerLane(record('r').scorer!.timing);
    expect(l.segments.map((s) => [s.kind, s.start, s.end])).toEqual([
      ['prep', 1, 6], ['prefill', 6, 56], ['branches', 56, 96], ['branches', 96, 126], ['branches', 126, 146], ['wait', 146, 151],
    ]);
    expect(l.markers).toEqual([{ kind: 'first-decision', label: 'first decision', at: 101, sideMs: 100 }]);
    expect(l.end).toBe(151);
  });

  it('lays the generator out on the same axis', () => {
    const l = generatorLane(record('r').generator!.timing);
    expect(l.segments.map((s) => [s.kind, s.start, s.end])).toEqual([['prep', 2, 3], ['prefill', 3, 63], ['decode', 64, 564]]);
    expect(l.markers[0]).toMatchObject({ kind: 'first-token', at: 64, sideMs: 62 });
  });

  it('picks round ticks', () => {
    expect(ticks(1000)).toEqual([0, 200, 400, 600, 800, 1000]);
    expect(ticks(2100)).toEqual([0, 500, 1000, 1500, 2000]);
    expect(ticks(0)).toEqual([0]);
  });
});
