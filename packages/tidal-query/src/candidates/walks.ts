import type { Predicate } from '../filter.js';
import { popularity, type QueryContext, type WorkCounter } from '../context.js';
import type { OrdinalSet } from '../ordinal-set.js';
import { Floor, type TopK } from '../topk.js';

/**
 * The threshold walks over the signal store's key orders (`popular`, the fill of `trending`, the
 * popularity walks of `hot` and `top`). Each reads the orders between `order.begin()` and
 * `order.stillValid()` and reports a torn read (the orders overwritten mid-read) as false, so the
 * caller can start over.
 */

/**
 * Readings of the slot orders that found them overwritten mid-read before a candidate stage falls
 * back to the scan. A rebuild publishes at most every 64 changed slots and a reading takes
 * microseconds, so one retry is already rare.
 */
export const ORDER_ATTEMPTS = 3;

/** Counts of one candidate stage, kept apart so a reading that has to start over leaves none. */
export interface StageCounts {
  candidates: number;
  afterFilter: number;
}

/** How a threshold walk ended, for a caller that caps it (see {@link threshold}). */
export interface WalkEnd {
  /** Asked before each entry is taken: true stops the walk there. */
  readonly stop: () => boolean;
  /** The k-th best beat every entry not taken (the walk's own exact stop). */
  early: boolean;
  /** `stop` stopped it. */
  capped: boolean;
}

/** What a popularity walk found (see {@link popularityWalk}). */
export interface PopularityWalkResult {
  /** The items that passed, in the order visited, with their popularity. */
  ordinals: number[];
  values: number[];
  /** Items visited (passing or not). */
  visited: number;
  /**
   * `early`: the `want`-th best beat every item not visited (exact); `exhausted`: every item with
   * a signal slot was visited (exact, the others score 0); `capped`: it stopped at `max`.
   */
  end: 'early' | 'exhausted' | 'capped';
}

/** popular: the threshold walk over every kind's key order. False if the orders were overwritten mid-read. */
export function popularOrdered(
  ctx: QueryContext,
  seen: OrdinalSet,
  want: number,
  pass: Predicate,
  nowMs: number,
  top: TopK,
  counts: StageCounts,
  work: WorkCounter,
): boolean {
  const kinds = ctx.schema.kinds.map((_, k) => k);
  const order = ctx.store.order;
  if (!order.begin()) return false;
  seen.reset();
  const floor = new Floor(want);
  const ok = walkByDecay(ctx, kinds, pass, nowMs, seen, floor, counts, work, (o, v) => top.push(o, v, 0));
  return ok && order.stillValid();
}

/**
 * The items passing `admit`, most popular first, by the threshold walk over every kind's key
 * order, capped at `max` items visited (see {@link PopularityWalkResult}); null when the orders
 * cannot be read (switched off, or overwritten on every attempt).
 */
export function popularityWalk(
  ctx: QueryContext,
  seen: OrdinalSet,
  want: number,
  admit: Predicate,
  max: number,
  nowMs: number,
  work: WorkCounter,
): PopularityWalkResult | null {
  const kinds = ctx.schema.kinds.map((_, k) => k);
  const order = ctx.store.order;
  for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
    if (!order.begin()) return null;
    seen.reset();
    const counts: StageCounts = { candidates: 0, afterFilter: 0 };
    const end: WalkEnd = { stop: () => counts.candidates >= max, early: false, capped: false };
    const ordinals: number[] = [];
    const values: number[] = [];
    const ok = walkByDecay(
      ctx,
      kinds,
      admit,
      nowMs,
      seen,
      new Floor(want),
      counts,
      work,
      (o, v) => {
        ordinals.push(o);
        values.push(v);
      },
      end,
    );
    if (!ok || !order.stillValid()) continue;
    return { ordinals, values, visited: counts.candidates, end: end.early ? 'early' : end.capped ? 'capped' : 'exhausted' };
  }
  return null;
}

/**
 * How {@link threshold} reads its bounds. `zeroStops`: once the bounds sum to 0 no entry not taken
 * is worth anything (trending's count bounds: no event in the window), so the walk ends there;
 * without it entries bounded by 0 are still taken (`popular` visits its scores ≤ 0 while its floor
 * is short). `margin`: the floor's minimum must beat the bounds' sum times 1 + margin, for values
 * summed in another order than the bounds.
 */
export interface ThresholdRule {
  readonly zeroStops: boolean;
  readonly margin: number;
}

const EXACT: ThresholdRule = { zeroStops: false, margin: 0 };

/**
 * The threshold algorithm's sorted-access loop over the orders of the kinds in `lists`: `boundAt(i)`
 * bounds what any slot at or after position `i` of its range is worth; each step advances the
 * list with the largest bound and hands its slot to `consider`, until `floor` is full and its
 * minimum beats the sum of the bounds strictly (see `rule`), or the lists are exhausted, or
 * `walkEnd.stop()` says so (recorded in `walkEnd`). False if an entry was torn (the orders were
 * overwritten mid-read).
 */
export function threshold(
  ctx: QueryContext,
  lists: readonly number[],
  boundAt: (i: number) => number,
  slotAt: (i: number) => number,
  floor: Floor,
  used: number,
  work: WorkCounter,
  consider: (slot: number) => void,
  walkEnd?: WalkEnd,
  rule: ThresholdRule = EXACT,
): boolean {
  const order = ctx.store.order;
  const n = lists.length;
  const cursor = new Int32Array(n);
  const end = new Int32Array(n);
  const bound = new Float64Array(n);
  for (let li = 0; li < n; li++) {
    cursor[li] = order.start(lists[li]!);
    end[li] = order.end(lists[li]!);
    bound[li] = cursor[li]! < end[li]! ? boundAt(cursor[li]!) : 0;
  }
  for (;;) {
    let threshold = 0;
    let best = -1;
    for (let li = 0; li < n; li++) {
      if (cursor[li]! >= end[li]!) continue;
      threshold += bound[li]!;
      if (best < 0 || bound[li]! > bound[best]!) best = li;
    }
    if (best < 0 || (rule.zeroStops && threshold === 0)) break;
    if (floor.full && floor.min > threshold * (1 + rule.margin)) {
      if (walkEnd) walkEnd.early = true;
      break;
    }
    if (walkEnd?.stop()) {
      walkEnd.capped = true;
      break;
    }
    const s = slotAt(cursor[best]!);
    if (!(s >>> 0 === s && s < used)) return false;
    cursor[best]!++;
    bound[best] = cursor[best]! < end[best]! ? boundAt(cursor[best]!) : 0;
    work.slots++;
    consider(s);
  }
  return true;
}

/**
 * The slots written since the orders were built (their places in the orders may be stale), each
 * read and handed to `consider` when `wanted(slot)`. With `end`, `end.stop()` is asked before each
 * and can stop it (recorded in `end.capped`). False if an entry was torn.
 */
export function dirtySlots(
  ctx: QueryContext,
  used: number,
  work: WorkCounter,
  wanted: (slot: number) => boolean,
  consider: (slot: number) => void,
  end?: WalkEnd,
): boolean {
  const order = ctx.store.order;
  for (let j = 0; j < order.dirtyCount; j++) {
    if (end?.stop()) {
      end.capped = true;
      return true;
    }
    const s = order.dirtySlot(j);
    if (!(s >>> 0 === s && s < used)) return false;
    work.slots++;
    if (wanted(s)) consider(s);
  }
  return true;
}

export function hasSlotIn(ctx: QueryContext, o: number, kinds: readonly number[], work: WorkCounter): boolean {
  for (const k of kinds) {
    work.slots++;
    if (ctx.store.slotOf(o, k) >= 0) return true;
  }
  return false;
}

/**
 * The threshold algorithm over the key orders of `lists`, after the dirty slots: an item's value is
 * the sum of its decayed scores over `lists`, and an item not yet seen can be worth at most the
 * sum of each list's bound at its cursor (`exp(key − λ·now)`, or 0 once a list is exhausted or at
 * its scores ≤ 0). Stops when `floor` (the best values so far) is full and its minimum beats that
 * sum strictly, so ties are resolved exactly as a scan resolves them. Items in `seen` are skipped;
 * `push` receives each new item that passes `admit`. False if the orders were overwritten mid-read.
 * With `end`, `end.stop()` can stop it before any slot (recorded there).
 */
export function walkByDecay(
  ctx: QueryContext,
  lists: readonly number[],
  admit: Predicate,
  nowMs: number,
  seen: OrdinalSet,
  floor: Floor,
  counts: StageCounts,
  work: WorkCounter,
  push: (o: number, value: number) => void,
  end?: WalkEnd,
): boolean {
  const store = ctx.store;
  const order = store.order;
  const used = store.slotsUsed();
  const kindCount = ctx.schema.kinds.length;
  const single = lists.length === 1 ? lists[0]! : -1;
  const inLists = new Uint8Array(kindCount);
  for (const k of lists) inLists[k] = 1;

  const value = (o: number, s: number): number => {
    if (single >= 0) return store.decayedScore(s, nowMs);
    if (lists.length === kindCount) return popularity(ctx, o, nowMs, work);
    let sum = 0;
    for (const k of lists) {
      const slot = store.slotOf(o, k);
      if (slot < 0) continue;
      work.slots++;
      sum += store.decayedScore(slot, nowMs);
    }
    return sum;
  };
  const consider = (s: number): void => {
    const o = store.slotOrdinal(s);
    if (!seen.add(o)) return;
    counts.candidates++;
    if (!admit(o)) return;
    counts.afterFilter++;
    const v = value(o, s);
    push(o, v);
    floor.push(v);
  };

  if (!dirtySlots(ctx, used, work, (s) => inLists[store.slotKind(s)] === 1 && store.hasEvents(s), consider, end)) return false;
  if (end?.capped) return true;

  // Per list, the bound at position i: exp(key − λ·now), 0 for the scores ≤ 0. Rounding in `key`
  // and in `λ·now` (both large) is covered by a relative margin on the exponent, so the bound
  // never falls below a value it bounds.
  const kindAt = (i: number): number => {
    for (const k of lists) if (i >= order.start(k) && i < order.end(k)) return k;
    return lists[0]!;
  };
  const rates = ctx.schema.kinds.map((_, k) => store.decayRate(k));
  const boundAt = (i: number): number => {
    const key = order.keyAt(i);
    if (key === Number.NEGATIVE_INFINITY) return 0;
    const decay = rates[single >= 0 ? single : kindAt(i)]! * nowMs;
    return Math.exp(key - decay + (Math.abs(key) + Math.abs(decay)) * 4e-16 + 1e-12);
  };
  return threshold(ctx, lists, boundAt, (i) => order.keySlotAt(i), floor, used, work, consider, end);
}
