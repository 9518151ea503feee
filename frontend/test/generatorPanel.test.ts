import { GeneratorPanel } from '../src/ui/generatorPanel';
import { findAnswer } from '../src/jsonparse';
import { applyUpdate, fromRecord, startRun, type LiveRun } from '../src/run';
import { fields, record } from './fixtures';

const started = { id: 'run-1', started_ms: 0, scorer: true, generator: true, concurrent: true, model: 'm', random_weights: true };

/** Counts reads of the element's layout (each forces a synchronous layout in a browser), and writes of scrollTop. */
function countLayoutReads(el: HTMLElement): { reads: number; scrolls: number } {
  const c = { reads: 0, scrolls: 0 };
  for (const k of ['scrollTop', 'scrollHeight', 'clientHeight', 'offsetHeight', 'offsetTop', 'scrollWidth', 'clientWidth']) {
    let v = 0;
    Object.defineProperty(el, k, { configurable: true, get: () => (c.reads++, v), set: (x: number) => (k === 'scrollTop' && c.scrolls++, v = x) });
  }
  const rect = el.getBoundingClientRect.bind(el);
  el.getBoundingClientRect = () => (c.reads++, rect());
  return c;
}

describe('generation panel while streaming', () => {
  it('appends only the new text and reads no layout', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    let run: LiveRun = startRun(started);
    g.render(run);
    const text = g.el.querySelector('#gen-text') as HTMLElement;
    const c = countLayoutReads(text);
    run = applyUpdate(run, { id: 'run-1', elapsed_ms: 5, generator: { status: 'decoding', delta: 'Hello', tokens: 1 } });
    g.render(run);
    const first = text.querySelector('.gen-chunk')!.firstChild;
    for (let i = 0; i < 200; i++) {
      run = applyUpdate(run, { id: 'run-1', elapsed_ms: 10 + i, generator: { status: 'decoding', delta: ` w${i}`, tokens: 2 + i } });
      g.render(run);
    }
    expect(text.textContent).toBe('Hello' + Array.from({ length: 200 }, (_, i) => ` w${i}`).join(''));
    expect(text.querySelector('.gen-chunk')!.firstChild).toBe(first); // not replaced
    expect(c.reads).toBe(0);
    expect(g.el.querySelector('#gen-tokens')!.textContent).toBe('201 tok');
  });

  it('reads no layout on the scroll events its own scrolling causes', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    let run: LiveRun = startRun(started);
    g.render(run);
    const text = g.el.querySelector('#gen-text') as HTMLElement;
    const c = countLayoutReads(text);
    for (let i = 0; i < 20; i++) {
      run = applyUpdate(run, { id: 'run-1', elapsed_ms: 10 + i, generator: { status: 'decoding', delta: ` w${i}`, tokens: 1 + i } });
      g.render(run);
      text.dispatchEvent(new Event('scroll'));
    }
    expect(c.scrolls).toBe(20);
    expect(c.reads).toBe(0);
  });

  it('follows the end while it is in view; scrolling up stops that at once', () => {
    // jsdom has no IntersectionObserver: this one reports what the test says is in view.
    let report: ((es: { isIntersecting: boolean }[]) => void) | null = null;
    const observed: Element[] = [];
    vi.stubGlobal('IntersectionObserver', class {
      constructor(cb: (es: { isIntersecting: boolean }[]) => void) { report = cb; }
      observe(el: Element) { observed.push(el); }
    });
    try {
      const g = new GeneratorPanel({ stop: () => {} });
      const text = g.el.querySelector('#gen-text') as HTMLElement;
      const c = countLayoutReads(text);
      let run: LiveRun = startRun(started);
      let n = 0;
      const more = () => {
        run = applyUpdate(run, { id: 'run-1', elapsed_ms: ++n, generator: { status: 'decoding', delta: ` w${n}`, tokens: n } });
        g.render(run);
      };
      more();
      expect(observed).toEqual([text.lastElementChild]); // the end stays the text's last child
      expect(c.scrolls).toBe(1);
      text.dispatchEvent(new WheelEvent('wheel', { deltaY: -40 }));
      more();
      expect(c.scrolls).toBe(1); // scrolled up: the text stays where the user put it
      report!([{ isIntersecting: false }]);
      more();
      expect(c.scrolls).toBe(1);
      report!([{ isIntersecting: true }]); // back at the end
      more();
      expect(c.scrolls).toBe(2);
      text.dispatchEvent(new Event('pointerdown'));
      more();
      expect(c.scrolls).toBe(2); // a press (a selection, the scroll bar) holds it too
      expect(text.lastElementChild).toBe(observed[0]);
      expect(c.reads).toBe(0);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it('streams long text in blocks that end at a line break, or at a space in a long line', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    let run: LiveRun = startRun(started);
    let want = '';
    for (let i = 0; i < 400; i++) {
      const piece = i % 50 === 49 ? 'end.\n' : `word${i} `;
      want += piece;
      run = applyUpdate(run, { id: 'run-1', elapsed_ms: i, generator: { status: 'decoding', delta: piece, tokens: i + 1 } });
      g.render(run);
    }
    const long = 'x'.repeat(20) + ' ';
    for (let i = 0; i < 200; i++) {
      want += long;
      run = applyUpdate(run, { id: 'run-1', elapsed_ms: 400 + i, generator: { status: 'decoding', delta: long, tokens: 401 + i } });
      g.render(run);
    }
    const text = g.el.querySelector('#gen-text')!;
    expect(text.textContent).toBe(want);
    const blocks = [...text.querySelectorAll('.gen-chunk')].map((b) => b.textContent!);
    expect(blocks.length).toBeGreaterThan(3);
    for (const b of blocks.slice(0, -1)) {
      expect(b.length).toBeLessThan(2 * 800 + 2 * 21); // a long line is cut at the first space after 1,600 characters
      expect(b.endsWith('\n') || b.endsWith(' ')).toBe(true);
    }
  });

  it('keeps its Stop button while tokens arrive, so a click is not lost', () => {
    let stopped = 0;
    const g = new GeneratorPanel({ stop: () => stopped++ });
    let run: LiveRun = applyUpdate(startRun(started), { id: 'run-1', elapsed_ms: 5, generator: { status: 'decoding', delta: 'a', tokens: 1 } });
    g.render(run);
    const stop = g.el.querySelector('button.stop') as HTMLButtonElement;
    run = applyUpdate(run, { id: 'run-1', elapsed_ms: 6, generator: { status: 'decoding', delta: 'b', tokens: 2 } });
    g.render(run);
    expect(g.el.querySelector('button.stop')).toBe(stop);
    expect(stop.disabled).toBe(false);
    stop.click();
    expect(stopped).toBe(1);
  });

  it('starts over for another run', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    g.render(applyUpdate(startRun(started), { id: 'run-1', elapsed_ms: 5, generator: { status: 'decoding', delta: 'first run', tokens: 1 } }));
    g.render(fromRecord(record('run-2')));
    expect(g.el.querySelector('#gen-text')!.textContent).toBe('{"priority": "high", "refund_requested": true}');
  });
});

describe('the JSON answer', () => {
  const names = ['priority', 'refund_requested'];
  it.each([
    ['{"priority": "high"}', { priority: 'high' }],
    ['Use {} for nothing. {"priority": "low", "x": {"y": "}"}}', { priority: 'low', x: { y: '}' } }],
    ['{"example": 1} then {"refund_requested": true}', { refund_requested: true }],
    ['{bad} {"priority": "low"}', { priority: 'low' }],
  ])('finds the object with the fields in %j', (text, want) => {
    const p = findAnswer(text, names);
    expect(p.ok && p.value).toEqual(want);
  });
  it.each([
    ['', 'no text'],
    ['no braces', 'no JSON object'],
    ['{}', 'no JSON object with the fields (priority, refund_requested)'],
    ['{"other": 1}', 'no JSON object with the fields'],
    ['{} {"priority": ', 'not complete'],
    ['{a: 1}', 'not valid JSON'],
  ])('reports %j', (text, msg) => {
    const p = findAnswer(text, names);
    expect(p.ok).toBe(false);
    expect(!p.ok && p.error).toContain(msg);
  });

  it('is not "parses as JSON" for a stray {} in the text', () => {
    const g = new GeneratorPanel({ stop: () => {} });
    const rec = record('run-1');
    rec.generator!.text = 'The answer is {} as far as I can tell.';
    g.render(fromRecord(rec), fields.map((f) => f.name));
    expect(g.el.querySelector('#gen-parsed')!.textContent).not.toContain('parses as JSON');
    expect(g.el.querySelector('#gen-parsed')!.textContent).toContain('No JSON answer: no JSON object with the fields');
  });
});

describe('timing chart labels', () => {
  it('open to the left near the end of the axis, so they stay inside the card', async () => {
    const { TimingPanel } = await import('../src/ui/timingPanel');
    const t = new TimingPanel();
    const rec = record('run-1');
    // The generator's first token comes at 95% of the run.
    rec.generator!.timing = { ...rec.generator!.timing, start_ms: 2, first_token_ms: 535, total_ms: 562 };
    t.render(fromRecord(rec));
    const marks = [...t.el.querySelectorAll('.wf-mark')].map((m) => [m.querySelector('span')!.textContent, m.classList.contains('flip')]);
    expect(marks).toContainEqual(['first token 535 ms', true]);
    expect(marks).toContainEqual(['first decision 100 ms', false]);
    const ticks = [...t.el.querySelectorAll('.wf-tick')];
    expect(ticks[0].classList.contains('end')).toBe(false);
    const last = ticks[ticks.length - 1] as HTMLElement;
    expect(last.classList.contains('end')).toBe(parseFloat(last.style.left) > 85);
  });
});
