/** Timing, percentiles, number formatting, a self-rewriting progress line and tables. */

/** Monotonic milliseconds with sub-microsecond resolution. */
export function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** Runs `fn` and returns its result with the elapsed milliseconds. */
export async function timed<T>(fn: () => Promise<T> | T): Promise<{ value: T; ms: number }> {
  const start = process.hrtime.bigint();
  const value = await fn();
  return { value, ms: Number(process.hrtime.bigint() - start) / 1e6 };
}

export interface Summary {
  n: number;
  mean: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

/**
 * Nearest-rank percentile of an ascending array. Nearest-rank rather than interpolation so that a
 * reported p99 is a latency some query actually had.
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samples: readonly number[]): Summary {
  const s = Float64Array.from(samples).sort();
  let sum = 0;
  for (const x of s) sum += x;
  return {
    n: s.length,
    mean: s.length ? sum / s.length : Number.NaN,
    min: s.length ? s[0]! : Number.NaN,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    p999: percentile(s, 99.9),
    max: s.length ? s[s.length - 1]! : Number.NaN,
  };
}

/** Forces a full collection between phases when run with `--expose-gc`, so one phase's garbage is not billed to the next. */
export function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === 'function') gc();
}

/**
 * The calling thread's V8 heap plus ArrayBuffer bytes after two full collections, for a probe that
 * measures memory; `probe` is named when the process runs without `--expose-gc` (it then exits).
 */
export function collectedHeapBytes(probe: string): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc !== 'function') {
    process.stderr.write(`${probe}: run it with node --expose-gc\n`);
    process.exit(2);
  }
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

// ---------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------

const intFormat = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function fmtInt(n: number): string {
  return Number.isFinite(n) ? intFormat.format(Math.round(n)) : String(n);
}

/** Milliseconds with precision that suits the magnitude: 0.042, 1.37, 12.4, 1234. */
export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms < 1) return ms.toFixed(3);
  if (ms < 10) return ms.toFixed(2);
  if (ms < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

export function fmtRatio(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  return x >= 10 ? `${x.toFixed(0)}×` : `${x.toFixed(2)}×`;
}

export function fmtDuration(ms: number): string {
  if (ms < 1000) return `${ms.toFixed(0)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

// ---------------------------------------------------------------------------------------------
// Progress
// ---------------------------------------------------------------------------------------------

/**
 * One status line on stderr. On a terminal it rewrites itself in place (at most every 100 ms, so
 * drawing it costs nothing measurable); when stderr is a file or a pipe it writes a line every
 * 10 s instead, so logs stay readable and still show that a long phase is alive.
 */
export class Progress {
  private readonly start = nowMs();
  private last: number;
  private done = 0;
  private readonly tty = process.stderr.isTTY === true;
  private finished = false;

  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly unit = 'items',
  ) {
    // Off a terminal the first line waits a full interval, so a short phase logs only its summary.
    this.last = this.tty ? 0 : this.start;
  }

  /** Adds `n` completed units; `extra` is appended to the line (for example a second rate). */
  tick(n: number, extra?: string): void {
    this.done += n;
    const t = nowMs();
    if (t - this.last < (this.tty ? 100 : 10_000)) return;
    this.last = t;
    this.render(t, extra);
  }

  /** Ends the line and returns the elapsed milliseconds. */
  finish(extra?: string): number {
    const t = nowMs();
    if (!this.finished) {
      this.finished = true;
      this.render(t, extra);
      if (this.tty) process.stderr.write('\n');
    }
    return t - this.start;
  }

  get elapsedMs(): number {
    return nowMs() - this.start;
  }

  private render(t: number, extra?: string): void {
    const elapsed = t - this.start;
    const rate = elapsed > 0 ? (this.done / elapsed) * 1000 : 0;
    const pct = this.total > 0 ? ` (${((100 * this.done) / this.total).toFixed(0)}%)` : '';
    const line =
      `${this.label}: ${fmtInt(this.done)}/${fmtInt(this.total)} ${this.unit}${pct}, ` +
      `${fmtInt(rate)} ${this.unit}/s, ${fmtDuration(elapsed)}${extra ? `, ${extra}` : ''}`;
    if (this.tty) process.stderr.write(`\r${line}\x1b[K`);
    else process.stderr.write(`${line}\n`);
  }
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/** Renders a table as aligned plain text: numbers right-aligned, text left-aligned. */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const numeric = header.map((_, c) => rows.length > 0 && rows.every((r) => /^[-+]?[\d.,]+(×|%| ms)?$|^$/.test(r[c] ?? '')));
  const fmt = (r: readonly string[]) =>
    r
      .map((cell, c) => (numeric[c] ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!)))
      .join('  ')
      .trimEnd();
  return [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt)].join('\n');
}

/** Renders a GitHub markdown table; numeric-looking columns are right-aligned. */
export function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const numeric = header.map((_, c) => rows.length > 0 && rows.every((r) => /^[-+]?[\d.,]+(×|%| ms)?$|^$|^—$/.test(r[c] ?? '')));
  const line = (r: readonly string[]) => `| ${r.join(' | ')} |`;
  return [line(header), `|${numeric.map((n) => (n ? '---:' : '---')).join('|')}|`, ...rows.map(line)].join('\n');
}
