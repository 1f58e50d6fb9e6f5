import type { Predicate } from '../filter.js';
import type { QueryContext } from '../context.js';

/**
 * A walk of `trending`: the `want` first items passing `admit` (by default the query's predicate),
 * reading at most `slots` active slots per velocity kind.
 */
export type TrendingWalk = (want: number, slots: number, admit?: Predicate) => number[];

/** The trending cache keeps this many times the places a query wants, so its own predicate can drop some. */
const TRENDING_CACHE_ROOM = 4;

/**
 * The trending source's lists, unfiltered (present items only), kept for one state: one clock,
 * one items version, one published generation of the signal orders with its dirty list and slot
 * count. Trending is the same for every user at one clock, so a burst of `for_you` queries walks
 * the active slots once (0.26 ms of a Full feed's 2.9 ms at 100 000 items) and each query filters
 * the shared list by its own predicate (hard negatives, seen, filters). One list per (velocity
 * window, the plan's trending budget, places, slots); all are dropped when the state moves. A
 * list ranks a fixed set of items in a total order independent of any predicate, so the first
 * `want` of it passing a predicate are exactly what a walk with that predicate returns, as long
 * as the list is the whole set or holds `want` passing items; otherwise the query walks with its
 * own predicate. (So the source reads the recency prefix wherever a budget would cut the 1h count
 * walk short: where that walk stops depends on the predicate, see `candidates/trending.ts`.)
 * Every event moves the state (a new slot the slot count, a first change the dirty list, a
 * further one on a dirty slot the orders' `redirtied` count): under a clock that does not move (an
 * injected one) a kept list once outlived every later write to a slot already dirty, so a replica
 * ranked `for_you` from a list older than the signals it had applied.
 *
 * At CoarseAggregates and NoDiversity a list of the same items version walked at most `staleMs` ago
 * (the level's `maxStalenessMs`, as work sharing keeps results: TaskEnvelope) serves whatever the
 * signals did since: with a clock that moves every millisecond and signals written throughout, the
 * exact stamp never repeats, and each query walked trending again (kept, the executor's CPU per
 * NoDiversity `for_you` through `tidal serve` fell 128 → 102 µs, 144 → 97 with `unseen`).
 * Each query still filters it by its own predicate, so a user's hides, seen set and filters hold.
 */
export class TrendingCache {
  #stamp: readonly number[] = [];
  readonly #lists = new Map<string, number[]>();
  /** Unfiltered lists walked (cache misses). */
  computed = 0;
  /** Queries served from a kept list. */
  served = 0;
  /** Queries whose predicate left too few of a kept list: walked with their own predicate. */
  fallbacks = 0;

  /**
   * The `want` first of trending passing `pass`, from the kept list for this state (or, with
   * `staleMs`, for this items version at most that old) when it holds enough.
   */
  take(
    ctx: QueryContext,
    walk: TrendingWalk,
    key: string,
    nowMs: number,
    want: number,
    slots: number,
    pass: Predicate,
    staleMs = 0,
  ): number[] {
    const order = ctx.store.order;
    // Orders switched off: trending scans, and nothing here could tell the signals moved.
    if (!order.begin()) return walk(want, slots);
    const stamp = [nowMs, ctx.catalog.version, order.generation, order.dirtyCount, order.redirtied, ctx.store.slotsUsed()];
    const kept = this.#stamp;
    const old = nowMs - (kept[0] ?? Number.NaN);
    const usable = stamp.every((x, i) => x === kept[i]) || (staleMs > 0 && stamp[1] === kept[1] && old >= 0 && old <= staleMs);
    if (!usable) {
      this.#stamp = stamp;
      this.#lists.clear();
    }
    const room = want * TRENDING_CACHE_ROOM;
    const lkey = `${key}|${want}|${slots}`;
    let list = this.#lists.get(lkey);
    if (list) this.served++;
    else {
      const present = ctx.catalog.present;
      list = walk(room, slots, (o) => present[o] === 1);
      this.#lists.set(lkey, list);
      this.computed++;
    }
    const out: number[] = [];
    for (let i = 0; i < list.length && out.length < want; i++) if (pass(list[i]!)) out.push(list[i]!);
    if (out.length < want && list.length >= room) {
      this.fallbacks++;
      return walk(want, slots);
    }
    return out;
  }
}

/** A query's trending cache (null: none) and how old its level lets a kept list be. */
export interface KeptTrending {
  readonly cache: TrendingCache | null;
  readonly staleMs: number;
}

/** The trending source through the cache when there is one. */
export function trendingOf(
  kept: KeptTrending,
  ctx: QueryContext,
  walk: TrendingWalk,
  key: string,
  nowMs: number,
  want: number,
  slots: number,
  pass: Predicate,
): number[] {
  return kept.cache ? kept.cache.take(ctx, walk, key, nowMs, want, slots, pass, kept.staleMs) : walk(want, slots);
}
