import type { QueryContext } from './context.js';
import { diversify } from './diversity.js';
import { STAGE, stageEnd, stageStart } from 'tidal-load';
import { SIGNALS_ELSEWHERE, readItemSignals, type SignalsJson } from './item-signals.js';
import type { Diversity, SignalValues } from './types.js';

/** What every returned item or hit has, before an executor adds its own fields. */
export interface HydratedBase {
  id: string;
  score: number;
  /** 1-based position in the result. */
  rank: number;
  signals: Record<string, SignalValues>;
}

export interface TailOptions {
  /** The caps to honour, or null when diversity is off (not asked for, or not at this level). */
  diversity: Diversity | null;
  limit: number;
  nowMs: number;
  /** Read signals with the CoarseAggregates degradation. */
  coarse: boolean;
  /** Where the relaxation warning goes, if the caps had to be relaxed to fill the limit. */
  warnings: string[];
  /**
   * For an answer sent as JSON at a level that reuses signals (`WindowsPlan.reuse`): each row's
   * signals are taken as JSON from `kept` into `json`, in order, and the row's own `signals` is
   * {@link SIGNALS_ELSEWHERE} (see `spliceSignals`); a row `kept` does not answer is read as without it.
   */
  signalsJson?: { readonly kept: SignalsJson; readonly json: string[] } | null;
}

/**
 * The last stages both executors share: diversity (when on) → limit → hydrate. `ranked` holds
 * ordinals best first and `scores` their scores, index for index. Each pick becomes a
 * {@link HydratedBase} (id, score, rank, the item's signals) that `hydrate` extends with the
 * executor's own fields for that ordinal.
 */
export function selectAndHydrate<T extends HydratedBase>(
  ctx: QueryContext,
  ranked: readonly number[],
  scores: readonly number[],
  options: TailOptions,
  hydrate: (base: HydratedBase, ordinal: number) => T,
): T[] {
  const { nowMs, coarse } = options;
  const order = tailOrder(ctx, ranked, options);
  const t = stageStart();
  const kept = options.signalsJson ?? null;
  const rows = order.map((i, r) => {
    const o = ranked[i]!;
    const id = ctx.catalog.ids[o]!;
    let signals: Record<string, SignalValues>;
    const json = kept === null ? null : kept.kept.get(o, id, nowMs, coarse);
    if (json === null) signals = readItemSignals(ctx.store, ctx.schema, o, nowMs, coarse);
    else {
      kept!.json.push(json);
      signals = SIGNALS_ELSEWHERE;
    }
    return hydrate({ id, score: scores[i]!, rank: r + 1, signals }, o);
  });
  stageEnd(STAGE.hydration, t);
  return rows;
}

/**
 * The diversity and limit stages of {@link selectAndHydrate} alone: the indexes into `ranked` of
 * the items returned, in order (a relaxed diversity pass adds its warning to `options.warnings`).
 */
export function tailOrder(
  ctx: QueryContext,
  ranked: readonly number[],
  options: Pick<TailOptions, 'diversity' | 'limit' | 'warnings'>,
): number[] {
  const { diversity, limit } = options;
  if (diversity) {
    const d = diversify(ranked, diversity, limit, ctx.catalog);
    if (d.relaxed)
      options.warnings.push(
        `diversity relaxed: not enough candidates to honour maxPer ${JSON.stringify(diversity.maxPer)} within limit ${limit}`,
      );
    return d.picked;
  }
  const n = Math.min(limit, ranked.length);
  const order = new Array<number>(n);
  for (let i = 0; i < n; i++) order[i] = i;
  return order;
}
