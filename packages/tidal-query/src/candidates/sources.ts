import type { Predicate } from '../filter.js';
import type { QueryContext, WorkCounter } from '../context.js';
import { OrdinalSet } from '../ordinal-set.js';
import { TopK } from '../topk.js';
import type { Explain, VelocityWindow } from '../types.js';
import { scan } from './scan.js';
import { trendingOrdered } from './trending.js';
import { ORDER_ATTEMPTS, popularOrdered, popularityWalk, type PopularityWalkResult, type StageCounts } from './walks.js';

/** Ordinals best first and their scores, index for index. */
export interface Ranking {
  ranked: number[];
  scores: number[];
}

/** Where a candidate stage counts what it visited and what passed. */
export type CandidateCounts = Pick<Explain, 'candidates' | 'afterFilter'>;

/**
 * The candidate sources of the signal store and the creation order, as one object a profile is
 * handed: `popular` and `trending` by the slot orders (or the scan), the newest items, and the
 * popularity walk `hot` and `top` start from. Each reads only what it is given (the predicate, the
 * windows, the budget) and the thread's shared state; nothing here knows the profile asking or
 * the level. One per executor (one per worker), which keeps the ordinal set the walks share.
 *
 * `popular` walks each kind's slots by forward-decay key and stops, threshold-algorithm style,
 * once no unvisited item can beat the k-th best; `trending` visits the slots with an event inside
 * its window (a prefix of the recency order) and fills any remaining places the way `popular`
 * does. Both return exactly what a scan of every slot returns (see `exhaustive`).
 */
export class CandidateSources {
  readonly #ctx: QueryContext;
  readonly #exhaustive: boolean;
  readonly #seen = new OrdinalSet();

  /** With `exhaustive`, `popular` and `trending` scan every slot: the reference the walks are tested against. */
  constructor(ctx: QueryContext, exhaustive = false) {
    this.#ctx = ctx;
    this.#exhaustive = exhaustive;
  }

  /**
   * The `want` best by `profile` (popular or trending) passing `pass`: trending over the velocity
   * `window` (`requested` is the task's own, see {@link trendingOrdered}), reading at most
   * `slotBudget` active slots per velocity kind; with `cutWalk` a finite budget over 1h cuts the
   * count walk short instead (retrieve's trending levels; `for_you`'s shared source keeps the
   * recency prefix, see {@link trendingOrdered}).
   */
  bySignals(
    profile: 'popular' | 'trending',
    want: number,
    pass: Predicate,
    window: VelocityWindow,
    requested: VelocityWindow,
    slotBudget: number,
    nowMs: number,
    counts: CandidateCounts,
    work: WorkCounter,
    cutWalk = false,
  ): Ranking {
    if (!this.#exhaustive) {
      for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
        const stage: StageCounts = { candidates: 0, afterFilter: 0 };
        const top = new TopK(want);
        const ok =
          profile === 'trending'
            ? trendingOrdered(this.#ctx, this.#seen, want, pass, window, requested, slotBudget, cutWalk, nowMs, top, stage, work)
            : popularOrdered(this.#ctx, this.#seen, want, pass, nowMs, top, stage, work);
        if (ok === null) break;
        if (!ok) continue;
        counts.candidates = stage.candidates;
        counts.afterFilter = stage.afterFilter;
        const { ordinals, primary } = top.sorted();
        return { ranked: ordinals, scores: primary };
      }
    }
    return scan(this.#ctx, profile, want, pass, window, nowMs, counts, work);
  }

  /**
   * The `want` most popular items passing `pass` into `top` by the threshold walk (one reading of
   * the orders); false if the orders were overwritten mid-read or cannot be read.
   */
  popularInto(want: number, pass: Predicate, nowMs: number, top: TopK, work: WorkCounter): boolean {
    return popularOrdered(this.#ctx, this.#seen, want, pass, nowMs, top, { candidates: 0, afterFilter: 0 }, work);
  }

  /** See {@link popularityWalk}. */
  popularityWalk(want: number, admit: Predicate, max: number, nowMs: number, work: WorkCounter): PopularityWalkResult | null {
    return popularityWalk(this.#ctx, this.#seen, want, admit, max, nowMs, work);
  }

  /** The `want` newest items passing `pass`, scored by creation time. */
  newest(want: number, pass: Predicate, counts: CandidateCounts): Ranking {
    const order = this.#ctx.catalog.byCreatedDesc();
    const created = this.#ctx.catalog.createdAt;
    const ranked: number[] = [];
    const scores: number[] = [];
    let i = 0;
    for (; i < order.length && ranked.length < want; i++) {
      const o = order[i]!;
      if (!pass(o)) continue;
      ranked.push(o);
      scores.push(created[o]!);
    }
    counts.candidates = i;
    counts.afterFilter = ranked.length;
    return { ranked, scores };
  }
}
