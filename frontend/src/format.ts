// Readable numbers.

/** Milliseconds: "0.42 ms", "8.3 ms", "412 ms", "1.25 s", "72.4 s". */
export function fmtMs(ms: number | undefined | null): string {
  if (ms == null || !isFinite(ms)) return '—';
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(2)} s`;
  return `${(ms / 1000).toFixed(1)} s`;
}

/** A rate: "45.1 tok/s", "1,234 tok/s". */
export function fmtRate(r: number | undefined | null): string {
  if (r == null || !isFinite(r) || r <= 0) return '—';
  if (r < 100) return `${r.toFixed(1)} tok/s`;
  return `${Math.round(r).toLocaleString('en-US')} tok/s`;
}

/** What a prefill's token counts and speed describe. */
export interface PrefillCounts {
  prompt_tokens: number;
  prefix_reused_tokens?: number;
  prefill_tokens_per_second: number;
}

/** A prefill's tokens: "214 tok", or "214 tok (200 reused, 14 computed)" when a prefix was reused. */
export function fmtPrefillTokens(t: PrefillCounts): string {
  const n = (v: number) => v.toLocaleString('en-US');
  const reused = Math.min(t.prefix_reused_tokens ?? 0, t.prompt_tokens);
  const s = `${n(t.prompt_tokens)} tok`;
  return reused > 0 ? `${s} (${n(reused)} reused, ${n(t.prompt_tokens - reused)} computed)` : s;
}

/** A prefill's speed, over the computed tokens: "46,000 tok/s computed" when a prefix was reused. */
export function fmtPrefillRate(t: PrefillCounts): string {
  const r = fmtRate(t.prefill_tokens_per_second);
  return (t.prefix_reused_tokens ?? 0) > 0 && r !== '—' ? `${r} computed` : r;
}

/** A rough span of time: "about 17 s", "about 2 min". */
export function fmtAbout(ms: number): string {
  const s = Math.max(1, Math.round(ms / 1000));
  if (s < 90) return `about ${s} s`;
  return `about ${Math.round(s / 60)} min`;
}

/** A probability as a percentage: "53.2%", "<0.1%", "100%". */
export function fmtPct(p: number | undefined | null, digits = 1): string {
  if (p == null || !isFinite(p)) return '—';
  const v = p * 100;
  if (v > 0 && v < 0.1) return '<0.1%';
  if (v >= 99.95 && v < 100) return '>99.9%';
  if (v === 100) return '100%';
  return `${v.toFixed(digits)}%`;
}

/** A small probability mass in scientific notation when tiny: "0.82", "3.1e-6". */
export function fmtMass(m: number | undefined | null): string {
  if (m == null || !isFinite(m)) return '—';
  if (m === 0) return '0';
  if (m >= 0.01) return m.toFixed(2);
  return m.toExponential(1);
}

/** Bytes: "512 B", "10.9 KB", "1.2 GB". */
export function fmtBytes(n: number | undefined | null): string {
  if (n == null || !isFinite(n) || n < 0) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** A parameter count: "42.2 M", "5.4 B". */
export function fmtParams(n: number | undefined | null): string {
  if (n == null || !isFinite(n) || n <= 0) return '—';
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} K`;
  return String(n);
}

/** A signed percentage change: "+12.5%", "−3.0%", "±0%". */
export function fmtDelta(pct: number | null | undefined): string {
  if (pct == null || !isFinite(pct)) return '—';
  if (Math.abs(pct) < 0.05) return '±0%';
  const s = Math.abs(pct) >= 100 ? Math.round(Math.abs(pct)).toString() : Math.abs(pct).toFixed(1);
  return `${pct > 0 ? '+' : '−'}${s}%`;
}

/** A clock time: "14:03:27". */
export function fmtTime(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Text shortened to n characters with an ellipsis. */
export function ellipsis(s: string, n: number): string {
  const t = s.replace(/\s+/g, ' ').trim();
  return t.length <= n ? t : t.slice(0, n - 1) + '…';
}
