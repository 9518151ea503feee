// The calibration panel: a loaded examples file is reported on; the figures
// and reliability diagrams are drawn, and strings from the examples stay text.
import { diagramPoints, PAD, SIZE } from '../src/reliability';
import type { CalibrationReport, FieldQuality, QualityMetrics } from '../src/types';
import { CalibrationPanel } from '../src/ui/calibrationPanel';

function metrics(T: number, bins: [number, number, number][]): QualityMetrics {
  const all = Array.from({ length: 10 }, (_, b) => ({ lo: b / 10, hi: (b + 1) / 10, count: 0, confidence: 0, accuracy: 0 }));
  for (const [count, confidence, accuracy] of bins) all[Math.min(9, Math.floor(confidence * 10))] = { ...all[Math.floor(confidence * 10)], count, confidence, accuracy };
  return { temperature: T, accuracy: 0.5, log_loss: 0.9123, brier: 0.4567, ece: 0.2345, bins: all };
}

const evil = '<img src=x onerror="alert(1)">';
const fq = (field: string): FieldQuality => ({
  field, decisions: 4,
  before: metrics(1, [[3, 0.95, 0.33], [1, 0.55, 1]]),
  after: { ...metrics(2.5, [[4, 0.62, 0.5]]), ece: 0.12 },
});
const report: CalibrationReport = {
  calibration: { global_temperature: 2.5, field_temperatures: { priority: 2.5 }, examples: 2, decisions: 4 },
  backend: 'json',
  overall: { ...fq('all fields'), after: { ...fq('x').after, temperature: 0 } },
  fields: [fq('priority'), fq(evil)],
  mistakes: [{ example: 1, text: `says ${evil}`, decision: 'priority', predicted: 'high', label: 'low', confidence: 0.95 }],
};

describe('reliability diagram', () => {
  it('places each non-empty bin at (confidence, accuracy)', () => {
    const pts = diagramPoints(fq('f').before, 4);
    expect(pts).toHaveLength(2);
    expect(pts[0].x).toBeCloseTo(PAD + 0.55 * SIZE);
    expect(pts[0].y).toBeCloseTo(PAD); // accuracy 1 at the top
    expect(pts[1].y).toBeCloseTo(PAD + (1 - 0.33) * SIZE);
    expect(pts[1].r).toBeGreaterThan(pts[0].r); // 3 decisions against 1
  });
});

describe('calibration panel', () => {
  it('reports on a loaded examples file', async () => {
    const calls: [string, string][] = [];
    let ready = true;
    let answer: Promise<CalibrationReport> = Promise.resolve(report);
    const p = new CalibrationPanel({ schema: () => ({}), ready: () => ready, report: (ex, b) => (calls.push([ex, b]), answer) });
    document.body.appendChild(p.el);
    p.render();
    const run = () => p.el.querySelector('#calibration-run') as HTMLButtonElement;
    expect(run().disabled).toBe(true); // nothing loaded
    const text = '{"text": "a", "labels": {"priority": "low"}}\n\n{"text": "b", "labels": {"priority": "high"}}\n';
    p.load('ex.jsonl', text);
    expect(p.el.textContent).toContain('ex.jsonl: 2 examples');
    expect(run().disabled).toBe(false);
    (p.el.querySelector('#calibration-backend') as HTMLSelectElement).value = 'cached';
    p.el.querySelector('#calibration-backend')!.dispatchEvent(new Event('change'));
    await p.run();
    expect(calls).toEqual([[text, 'cached']]);
    const cards = p.el.querySelectorAll('.quality-card');
    expect([...cards].map((c) => c.querySelector('h4')!.textContent)).toEqual(['all fields', 'priority', evil]);
    expect(p.el.querySelectorAll('svg.reliability')).toHaveLength(3);
    expect(cards[1].querySelectorAll('circle.before')).toHaveLength(2);
    expect(cards[1].querySelectorAll('circle.after')).toHaveLength(1);
    const cells = [...cards[1].querySelectorAll('tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    expect(cells).toEqual([
      ['temperature', '1.00', '2.50'], ['accuracy', '50.0%', '50.0%'], ['log-loss', '0.912', '0.912'],
      ['Brier score', '0.457', '0.457'], ['calibration error (ECE)', '0.234', '0.120'],
    ]);
    expect(cards[0].querySelector('tbody tr')!.children[2].textContent).toBe('per field');
    // Strings from the examples and the schema are text, never markup.
    expect(p.el.querySelector('img')).toBeNull();
    expect(p.el.querySelector('.mistakes-table')!.textContent).toContain(`says ${evil}`);
    expect(cards[2].querySelector('svg title')!.textContent).toBe(`reliability diagram: ${evil}`);
    // An error is shown, the report cleared.
    answer = Promise.reject(new Error('calibrate: example 2: label for unknown field "x"'));
    await p.run();
    expect(p.el.querySelector('#calibration-error')!.textContent).toContain('unknown field "x"');
    expect(p.el.querySelector('.quality-card')).toBeNull();
    ready = false;
    p.render();
    expect(run().disabled).toBe(true);
    p.el.remove();
  });
});
