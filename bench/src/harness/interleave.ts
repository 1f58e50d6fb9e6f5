/**
 * Variants side by side in one run: every round runs each variant once, in an order that rotates
 * (AB, BA, AB, ... for two), so a machine that gets busier or quieter during the run shifts every
 * variant alike. The result is each variant's time per round and, per round, its ratio to the
 * first variant's time in that same round: the ratio's median and range are the figure on a
 * shared machine, the absolute times move with its load.
 */

import { collectGarbage } from './stats.js';

export interface Variant {
  readonly name: string;
  /** One round's work; `round` counts from 0 over the timed rounds (warm-up rounds are negative). */
  readonly run: (round: number) => unknown;
}

export interface InterleaveOptions {
  /** Timed rounds. */
  readonly rounds: number;
  /** Untimed rounds first (same rotation), so every variant runs warm. @default 1 */
  readonly warmup?: number;
  /** A full collection before every variant's turn (with `--expose-gc`). @default true */
  readonly gc?: boolean;
}

export interface Spread {
  median: number;
  min: number;
  max: number;
}

export interface VariantResult {
  name: string;
  /** Milliseconds per timed round, in round order. */
  ms: number[];
  /** Over the rounds. */
  round: Spread;
  /** This variant's ms ÷ the first variant's ms, per round: median, min, max. 1 for the first. */
  ratio: Spread;
}

/** Median (the mean of the middle two for an even count), min and max. */
export function spread(xs: readonly number[]): Spread {
  const s = Float64Array.from(xs).sort();
  const n = s.length;
  if (n === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  const median = n % 2 === 1 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
  return { median, min: s[0]!, max: s[n - 1]! };
}

/** Runs the variants in rotating order, `warmup` untimed rounds then `rounds` timed ones. */
export async function interleave(variants: readonly Variant[], options: InterleaveOptions): Promise<VariantResult[]> {
  const warmup = options.warmup ?? 1;
  const gc = options.gc ?? true;
  const ms: number[][] = variants.map(() => []);
  for (let r = -warmup; r < options.rounds; r++) {
    const turn = r + warmup;
    for (let j = 0; j < variants.length; j++) {
      const k = (turn + j) % variants.length;
      if (gc) collectGarbage();
      const t0 = process.hrtime.bigint();
      await variants[k]!.run(r);
      const t = Number(process.hrtime.bigint() - t0) / 1e6;
      if (r >= 0) ms[k]!.push(t);
    }
  }
  return variants.map((v, k) => ({
    name: v.name,
    ms: ms[k]!,
    round: spread(ms[k]!),
    ratio: spread(ms[k]!.map((t, r) => t / ms[0]![r]!)),
  }));
}

/** `0.98× (0.91–1.05)`: a ratio's median and its range over rounds. */
export function fmtSpread(s: Spread): string {
  return `${s.median.toFixed(2)}× (${s.min.toFixed(2)}–${s.max.toFixed(2)})`;
}
