import type { Predicate } from '../filter.js';
import { popularity, velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import type { OrdinalSet } from '../ordinal-set.js';
import { Floor, type TopK } from '../topk.js';
import type { VelocityWindow } from '../types.js';
import { COUNT_RATE } from '../signals/order.js';
import { WINDOW_MS, windowStartMs } from '../windows.js';
import { dirtySlots, hasSlotIn, threshold, walkByDecay, type StageCounts, type WalkEnd } from './walks.js';

/**
 * trending: the items with the highest velocity in the window, scored exactly; then, if fewer
 * than `want` of them passed, the remaining places by the secondary score (velocity 0) from the
 * key orders. Two ways to find them:
 *
 * - over the 1h window, a threshold walk down the count order (see `signals/order.ts`): after the
 *   dirty list, each velocity kind's slots by count key, until the `want`-th best velocity beats
 *   the sum of the lists' bounds strictly (no item not visited can then take a place), or the
 *   bounds say no item not visited has an event in the window, or (with `cutWalk`) `slotBudget`
 *   slots have been walked (the plan's `trending.slots`, all velocity kinds together; `Infinity`
 *   at Full). So a level's walk is the first `slotBudget` steps of Full's: it walks no more slots,
 *   and answers as Full does wherever Full's walk ends within the budget. At 1 000 000 items Full
 *   visits a few hundred of the 13 433 slots active in the last hour. A walk that would visit more slots than
 *   the window holds (activity spread evenly), with no budget to stop it first, stops there and
 *   the query takes the other way.
 * - otherwise (24h and 7d, or the 1h walk given up) the slots with an event inside the window: the
 *   dirty list, then the recency order's prefix, at most `slotBudget` per velocity kind, the most
 *   recently active first, so that below Full the cost follows the budget, not the window's
 *   activity.
 *
 * CoarseAggregates ranks a 1h query by the 24h velocity (the level's rule: velocity reads use the
 * 24h window), at a cost no higher than ReducedCandidates'. The count key bounds the events after
 * any start, so the same order serves the day, but its 24h bound (`exp(ckey − μ·start)` with start
 * a day back) amplifies an event of the last hour e^23-fold and never stops a walk: walking the
 * day made the cheap level the dear one (1.23× Full, before the budgets). So a coarse 1h query
 * walks the 1h walk, with its own budget (a prefix of the walk of the level above), scores every
 * item it finds by its 24h velocity, and fills the places left, as every trending query does, by
 * popularity among the items quiet in the hour, each scored by its 24h velocity too: the item that
 * led the day hours ago and is quiet now is the popular one, and outranks the hour's few movers.
 * Its fill needs no more places than the level above's (an item moving in the hour moves in the
 * day), so it walks no further. Where the walk is given up it ranks the 1h window's active slots
 * by their 24h velocity, or the 24h window's when that holds no more slots (two binary searches
 * tell).
 *
 * The count walk's answer below Full depends on where the predicate lets it stop, and the coarse
 * one's fill on `want`, so neither is one order that every predicate can filter. `for_you`'s trending
 * source keeps one list for many users' predicates (`profiles/trending-cache.ts`): it asks without
 * `cutWalk`, and takes the count walk only unbudgeted (exact), the recency prefix otherwise.
 *
 * Null when the slots to visit are more than a third of all slots (a 7d window over a week of
 * events, scored in full): visiting them out of slot order would cost more than the scan
 * (measured: ~3× per slot), so the caller scans.
 */
const SECONDS_1H = WINDOW_MS['1h'] / 1000;

export function trendingOrdered(
  ctx: QueryContext,
  seen: OrdinalSet,
  want: number,
  pass: Predicate,
  window: VelocityWindow,
  requested: VelocityWindow,
  slotBudget: number,
  cutWalk: boolean,
  nowMs: number,
  top: TopK,
  counts: StageCounts,
  work: WorkCounter,
): boolean | null {
  const store = ctx.store;
  const specs = ctx.schema.kinds;
  const velocityKinds: number[] = [];
  for (let k = 0; k < specs.length; k++) if (specs[k]!.velocity) velocityKinds.push(k);
  if (velocityKinds.length === 0) return true;
  const only = velocityKinds.length === 1 ? velocityKinds[0]! : -1;
  const isVelocity = specs.map((s) => s.velocity);
  const order = store.order;
  if (!order.begin()) return false;
  const used = store.slotsUsed();
  const zeros: number[] = [];
  let moving = 0;
  // A coarse 1h query: whatever finds the items, each is scored by its 24h velocity.
  const coarseScore = window !== requested && requested === '1h' ? window : null;

  if (requested === '1h' && (cutWalk || (window === '1h' && !Number.isFinite(slotBudget)))) {
    const hourStart = windowStartMs('1h', nowMs);
    let cap = order.dirtyCount;
    for (const k of velocityKinds) cap += order.newerThan(k, hourStart);
    const walk: CountWalk = { start: hourStart, cap, budget: slotBudget, scoreBy: window };
    const walked = byCount(ctx, seen, want, pass, walk, nowMs, velocityKinds, only, isVelocity, counts, work);
    if (walked === false) return false;
    if (walked !== null) {
      for (let i = 0; i < walked.ordinals.length; i++) {
        const v = walked.values[i]!;
        top.push(walked.ordinals[i]!, v, walked.secondary[i]);
        if (v > 0) moving++;
        else zeros.push(walked.secondary[i]!);
      }
      const filled = fill(ctx, seen, want - moving, zeros, pass, velocityKinds, only, nowMs, top, counts, work, coarseScore);
      return filled && order.stillValid();
    }
    counts.candidates = 0;
    counts.afterFilter = 0;
  }
  seen.reset();

  let start = windowStartMs(window, nowMs);
  if (window !== requested && requested === '1h') {
    const requestedStart = windowStartMs(requested, nowMs);
    let budget = 0;
    let active = 0;
    for (const k of velocityKinds) {
      budget += order.newerThan(k, requestedStart);
      active += order.newerThan(k, start);
    }
    if (active > budget) start = requestedStart;
  }

  const visit = (s: number): void => {
    const o = store.slotOrdinal(s);
    if (!seen.add(o)) return;
    counts.candidates++;
    if (!pass(o)) return;
    counts.afterFilter++;
    let v: number;
    let sec: number;
    if (only >= 0) {
      v = store.velocity(s, window, nowMs, false);
      sec = store.decayedScore(s, nowMs);
    } else {
      v = velocityOf(ctx, o, window, nowMs, false, work);
      sec = popularity(ctx, o, nowMs, work);
    }
    top.push(o, v, sec);
    if (v > 0) moving++;
    else zeros.push(sec);
  };

  // The active slots, gathered and then visited in slot order: the recency order is random in
  // memory, and 1 KiB slots read in ascending order cost about a third less than read at random.
  let n = 0;
  for (const k of velocityKinds) n += Math.min(slotBudget, order.newerThan(k, start));
  if (3 * (n + order.dirtyCount) > used) return null;
  const active = new Int32Array(n + order.dirtyCount);
  n = 0;
  const gather = (s: number): void => {
    active[n++] = s;
  };
  if (!dirtySlots(ctx, used, work, activeSince(ctx, isVelocity, start), gather)) return false;
  for (const k of velocityKinds) {
    const end = Math.min(order.end(k), order.start(k) + slotBudget);
    for (let i = order.start(k); i < end && order.newestAt(i) >= start; i++) {
      const s = order.newestSlotAt(i);
      if (!(s >>> 0 === s && s < used)) return false;
      active[n++] = s;
    }
  }
  const inOrder = active.subarray(0, n).sort();
  for (let i = 0; i < n; i++) {
    work.slots++;
    visit(inOrder[i]!);
  }

  return fill(ctx, seen, want - moving, zeros, pass, velocityKinds, only, nowMs, top, counts, work, coarseScore) && order.stillValid();
}

/** Slots of a velocity kind with an event at or after `start`. */
function activeSince(ctx: QueryContext, isVelocity: readonly boolean[], start: number): (slot: number) => boolean {
  const store = ctx.store;
  return (s) => isVelocity[store.slotKind(s)] === true && store.hasEvents(s) && store.newestAt(s) >= start;
}

/**
 * The places the items with a velocity left (`need`), by the secondary score among the items with
 * velocity 0: `zeros` (the secondary scores of those already visited), then the key orders' walk
 * over the items not in `seen`. With `scoreBy` (a coarse 1h query) each item so found is scored
 * by its velocity over that window instead of 0: an item quiet in the hour may lead the day.
 * False if the orders were overwritten mid-read.
 */
function fill(
  ctx: QueryContext,
  seen: OrdinalSet,
  need: number,
  zeros: readonly number[],
  pass: Predicate,
  velocityKinds: readonly number[],
  only: number,
  nowMs: number,
  top: TopK,
  counts: StageCounts,
  work: WorkCounter,
  scoreBy: VelocityWindow | null,
): boolean {
  if (need <= 0) return true;
  const floor = new Floor(need);
  for (const z of zeros) floor.push(z);
  // The scan's candidates for the remaining places: items with a slot of a velocity kind; their
  // secondary score is that one kind's decayed score, or with several velocity kinds the popularity.
  const lists = only >= 0 ? [only] : ctx.schema.kinds.map((_, k) => k);
  const admit: Predicate = only >= 0 ? pass : (o) => pass(o) && hasSlotIn(ctx, o, velocityKinds, work);
  // The velocity reads the slots the walk has just read (and counted) for the secondary score.
  const push = scoreBy
    ? (o: number, v: number) => top.push(o, velocityOf(ctx, o, scoreBy, nowMs, false), v)
    : (o: number, v: number) => top.push(o, 0, v);
  return walkByDecay(ctx, lists, admit, nowMs, seen, floor, counts, work, push);
}

/** Items a count walk visited and their scores, index for index. */
interface Walked {
  ordinals: number[];
  values: number[];
  secondary: number[];
}

/** Where a count walk starts (the 1h window's start) and how far it may go (see {@link byCount}). */
interface CountWalk {
  readonly start: number;
  /** The slots the window holds (with the dirty list): a walk past them is given up. */
  readonly cap: number;
  /** The level's budget: the walk ends there with what it found. */
  readonly budget: number;
  /**
   * The velocity the items found are scored by: `'1h'`, or `'24h'` for a coarse 1h query. The walk
   * itself (its bounds and its stop) is the 1h one either way, so a coarse walk is a prefix of the
   * walk of the level above: never more slots.
   */
  readonly scoreBy: VelocityWindow;
}

/**
 * The threshold walk down the count order for the 1h window starting at `walk.start` (see
 * {@link trendingOrdered}): every item that passes and may hold one of the `want` places by 1h
 * velocity, with its velocity over `walk.scoreBy` and its secondary score, among the first
 * `walk.budget` slots walked.
 * Null when it would walk more than `walk.cap` slots before its budget; false if an entry was torn.
 */
function byCount(
  ctx: QueryContext,
  seen: OrdinalSet,
  want: number,
  pass: Predicate,
  walk: CountWalk,
  nowMs: number,
  velocityKinds: readonly number[],
  only: number,
  isVelocity: readonly boolean[],
  counts: StageCounts,
  work: WorkCounter,
): Walked | false | null {
  const store = ctx.store;
  const order = store.order;
  const used = store.slotsUsed();
  seen.reset();
  const out: Walked = { ordinals: [], values: [], secondary: [] };
  const floor = new Floor(want);
  const visit = (s: number): void => {
    const o = store.slotOrdinal(s);
    if (!seen.add(o)) return;
    counts.candidates++;
    if (!pass(o)) return;
    counts.afterFilter++;
    const v = only >= 0 ? store.velocity(s, '1h', nowMs, false) : velocityOf(ctx, o, '1h', nowMs, false, work);
    const sec = only >= 0 ? store.decayedScore(s, nowMs) : popularity(ctx, o, nowMs, work);
    // The 24h rings are in the slots just read (and counted).
    const score =
      walk.scoreBy === '1h'
        ? v
        : only >= 0
          ? store.velocity(s, walk.scoreBy, nowMs, false)
          : velocityOf(ctx, o, walk.scoreBy, nowMs, false);
    out.ordinals.push(o);
    out.values.push(score);
    out.secondary.push(sec);
    floor.push(v);
  };

  // The slots written since the orders were built: their keys in the orders may be stale.
  if (!dirtySlots(ctx, used, work, activeSince(ctx, isVelocity, walk.start), visit)) return false;

  // A list's bound at position i: the velocity its slot (and every slot after it) can have in the
  // window, exp(ckey − μ·start) events over the window's seconds; 0 below one event. Rounding in
  // ckey and μ·start (both large) is covered by a relative margin on the exponent; velocities are
  // summed over kinds in another order than the bounds, hence the rule's margin.
  const decay = COUNT_RATE * walk.start;
  const boundAt = (i: number): number => {
    const key = order.countKeyAt(i);
    const events = Math.exp(key - decay + (Math.abs(key) + Math.abs(decay)) * 4e-16 + 1e-12);
    return events < 1 ? 0 : events / SECONDS_1H;
  };
  const limit = Math.min(walk.cap, walk.budget);
  let walked = 0;
  const end: WalkEnd = { stop: () => walked >= limit, early: false, capped: false };
  const step = (s: number): void => {
    walked++;
    visit(s);
  };
  const rule = { zeroStops: true, margin: 1e-12 };
  if (!threshold(ctx, velocityKinds, boundAt, (i) => order.countSlotAt(i), floor, used, work, step, end, rule)) return false;
  return end.capped && walk.budget > walk.cap ? null : out;
}
