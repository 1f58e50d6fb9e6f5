/**
 * Two trees (or two variants) answering one query list in blocks that take turns: the figure
 * `--baseline` reports. Each block of `block` queries runs on one side, then the same block on the
 * other, who goes first alternating (see interleave.ts), after one warm-up block each; every
 * query's time at the caller, its worker time where it has one, and the ids it returned.
 */
import { fmtSpread, interleave, type Spread, type VariantResult } from './interleave.js';
import { fmtMs, fmtRatio, nowMs, summarize, type Summary } from './stats.js';

/** One side: runs a query and says what it returned. */
export interface BlockSide<Q> {
  readonly name: string;
  readonly run: (query: Q) => Promise<{ readonly ids: readonly string[]; readonly serviceMs?: number }>;
}

export interface BlockComparison {
  readonly before: Summary;
  readonly after: Summary;
  /** Worker times, from the answers that carry one (empty summaries otherwise). */
  readonly worker: { readonly before: Summary; readonly after: Summary };
  /** Each side's blocks: `after.ratio` is after ÷ before per block (median and range). */
  readonly blocks: { readonly before: VariantResult; readonly after: VariantResult };
  readonly perBlock: Spread;
  /** The mean share of before's ids that after returned too. */
  readonly agreement: number;
}

/** The share of `before`'s ids that `after` holds (1 when both are empty). */
export function agreement(after: readonly string[], before: readonly string[]): number {
  if (before.length === 0) return after.length === 0 ? 1 : 0;
  const a = new Set(after);
  let n = 0;
  for (const id of before) if (a.has(id)) n++;
  return n / before.length;
}

/**
 * Runs `queries` (a warm-up block, then the timed ones: a whole number of blocks) on both sides.
 * @throws RangeError when the queries are not at least two whole blocks.
 */
export async function compareInBlocks<Q>(
  sides: readonly [BlockSide<Q>, BlockSide<Q>],
  queries: readonly Q[],
  block: number,
): Promise<BlockComparison> {
  const blocks = queries.length / block - 1;
  if (!Number.isInteger(blocks) || blocks < 1) {
    throw new RangeError(`compareInBlocks: ${queries.length} queries are not a warm-up block and whole blocks of ${block}`);
  }
  const ms: number[][] = [[], []];
  const service: number[][] = [[], []];
  const ids: (readonly string[])[][] = [[], []];
  const variants = sides.map((side, k) => ({
    name: side.name,
    run: async (round: number) => {
      const from = (round + 1) * block;
      for (let i = from; i < from + block; i++) {
        const t = nowMs();
        const r = await side.run(queries[i]!);
        const took = nowMs() - t;
        if (round < 0) continue;
        ms[k]!.push(took);
        if (r.serviceMs !== undefined && !Number.isNaN(r.serviceMs)) service[k]!.push(r.serviceMs);
        ids[k]![i] = r.ids;
      }
    },
  }));
  const [b, a] = await interleave(variants, { rounds: blocks, warmup: 1 });
  let agree = 0;
  for (let i = block; i < queries.length; i++) agree += agreement(ids[1]![i]!, ids[0]![i]!);
  return {
    before: summarize(ms[0]!),
    after: summarize(ms[1]!),
    worker: { before: summarize(service[0]!), after: summarize(service[1]!) },
    blocks: { before: b!, after: a! },
    perBlock: a!.ratio,
    agreement: agree / (queries.length - block),
  };
}

/**
 * A comparison's row: the label, each side's p50, after ÷ before of the p50 and per block, each
 * side's p99, with `worker` each side's worker p50, and the share of the same top ids.
 */
export function blockRow(label: string, c: BlockComparison, worker: boolean): string[] {
  return [
    label,
    fmtMs(c.before.p50),
    fmtMs(c.after.p50),
    fmtRatio(c.after.p50 / c.before.p50),
    fmtSpread(c.perBlock),
    fmtMs(c.before.p99),
    fmtMs(c.after.p99),
    ...(worker ? [fmtMs(c.worker.before.p50), fmtMs(c.worker.after.p50)] : []),
    `${(100 * c.agreement).toFixed(1)}%`,
  ];
}
