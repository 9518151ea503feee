// Reliability diagrams: accuracy against confidence per bin, before and
// after calibration, drawn as SVG (the pictures of verdict calibrate
// --report, drawn in the page).
import type { FieldQuality, QualityMetrics } from './types';

const NS = 'http://www.w3.org/2000/svg';
export const SIZE = 200;
export const PAD = 28;

export interface DiagramPoint {
  x: number;
  y: number;
  r: number;
  count: number;
  confidence: number;
  accuracy: number;
}

/** The points of a metrics' non-empty bins in diagram coordinates; the area grows with the bin's share of n decisions. */
export function diagramPoints(m: QualityMetrics, n: number): DiagramPoint[] {
  return (m.bins ?? []).filter((b) => b.count > 0).map((b) => ({
    x: PAD + b.confidence * SIZE,
    y: PAD + (1 - b.accuracy) * SIZE,
    r: 2.5 + (5 * b.count) / Math.max(n, 1),
    count: b.count, confidence: b.confidence, accuracy: b.accuracy,
  }));
}

function el(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text != null) e.textContent = text;
  return e;
}

/** A field's reliability diagram: before (grey) and after (blue) over the diagonal of perfect calibration. */
export function reliabilitySvg(f: FieldQuality): SVGSVGElement {
  const W = SIZE + 2 * PAD;
  const svg = el('svg', { viewBox: `0 0 ${W} ${W}`, width: W, height: W, role: 'img', class: 'reliability' }) as SVGSVGElement;
  svg.appendChild(el('title', {}, `reliability diagram: ${f.field}`));
  svg.appendChild(el('rect', { x: PAD, y: PAD, width: SIZE, height: SIZE, fill: '#fafafa', stroke: '#999' }));
  svg.appendChild(el('line', { x1: PAD, y1: PAD + SIZE, x2: PAD + SIZE, y2: PAD, stroke: '#999', 'stroke-dasharray': '4 3' }));
  for (const t of [0, 0.5, 1]) {
    svg.appendChild(el('text', { x: PAD + t * SIZE, y: PAD + SIZE + 13, 'font-size': 10, 'text-anchor': 'middle' }, String(t)));
    svg.appendChild(el('text', { x: PAD - 4, y: PAD + (1 - t) * SIZE + 3, 'font-size': 10, 'text-anchor': 'end' }, String(t)));
  }
  svg.appendChild(el('text', { x: PAD + SIZE / 2, y: PAD + SIZE + 25, 'font-size': 10, 'text-anchor': 'middle' }, 'confidence'));
  const series = (m: QualityMetrics, color: string, cls: string) => {
    const pts = diagramPoints(m, f.decisions);
    if (pts.length > 1) svg.appendChild(el('polyline', { points: pts.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5, class: cls }));
    for (const p of pts) {
      const c = el('circle', { cx: p.x.toFixed(1), cy: p.y.toFixed(1), r: p.r.toFixed(1), fill: color, 'fill-opacity': 0.75, class: cls });
      c.appendChild(el('title', {}, `${p.count} decisions, confidence ${p.confidence.toFixed(2)}, accuracy ${p.accuracy.toFixed(2)}`));
      svg.appendChild(c);
    }
  };
  series(f.before, '#888', 'before');
  series(f.after, '#1f6feb', 'after');
  return svg;
}
