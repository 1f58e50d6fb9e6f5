import type { Predicate } from '../filter.js';
import { popularity, velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import type { OrdinalSet } from '../ordinal-set.js';
import { Floor, type TopK } from '../topk.js';
import type { VelocityWindow } from '../types.js';
import { COUNT_RATE } from '../signals/order.js';
import { WINDOW_MS, windowStartMs } from '../windows.js';
import { hasSlotIn, walkByDecay, type StageCounts } from './walks.js';

/**
 * trending: the items with the highest velocity in the window, scored exactly; then, if fewer
 * than `want` of them passed, the remaining places by the secondary score (velocity 0) from the
 * key orders. Two ways to find them:
 *
 * - over the 1h window with no slot budget (Full), a threshold walk down the count order (see
 *   `signals/order.ts`): after the dirty list, each velocity kind's slots by count key, until the
 *   `want`-th best velocity beats the sum of the lists' bounds strictly (no item not visited can
 *   then take a place), or the bounds say no item not visited has an event in the window. At
 *   1 000 000 items it visits a few hundred of the 13 433 slots active in the last hour. A walk
 *   that would visit more slots than the window holds (activity spread evenly) stops there and
 *   the query takes the other way.
 * - otherwise the slots with an event inside the window, every one (the dirty list, then the
 *   recency order's prefix).
 *
 * CoarseAggregates reads the 24h velocity for a 1h query, and the 24h window holds more active
 * slots than the 1h one: walking it would make the cheap level the dear one. So a coarse 1h
 * query walks the 24h window only when it holds no more slots than the 1h walk would visit (two
 * binary searches tell); otherwise it ranks the 1h walk's slots by their 24h velocity. Either way
 * it visits no more slots than the 1h window holds, and when it does not walk the 24h window
 * it differs from the exact coarse ranking only in leaving out items quiet for the last hour.
 *
 * Below Full it scores at most `slotBudget` active slots per velocity kind, the most recently
 * active first (the plan's `trending.slots`): the cost then follows the budget, not the
 * window's activity.
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
  const zeros: number[] = [];
  let moving = 0;

  if (window === '1h' && requested === '1h' && !Number.isFinite(slotBudget)) {
    let cap = order.dirtyCount;
    for (const k of velocityKinds) cap += order.newerThan(k, start);
    const walked = byCount(ctx, seen, want, pass, start, nowMs, velocityKinds, only, isVelocity, cap, counts, work);
    if (walked === false) return false;
    if (walked !== null) {
      for (let i = 0; i < walked.ordinals.length; i++) {
        const v = walked.values[i]!;
        top.push(walked.ordinals[i]!, v, walked.secondary[i]);
        if (v > 0) moving++;
        else zeros.push(walked.secondary[i]!);
      }
      return fill(ctx, seen, want - moving, zeros, pass, velocityKinds, only, nowMs, top, counts, work) && order.stillValid();
    }
    counts.candidates = 0;
    counts.afterFilter = 0;
  }
  seen.reset();

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
  for (let j = 0; j < order.dirtyCount; j++) {
    const s = order.dirtySlot(j);
    if (!(s >>> 0 === s && s < used)) return false;
    work.slots++;
    if (!isVelocity[store.slotKind(s)] || !store.hasEvents(s) || store.newestAt(s) < start) continue;
    active[n++] = s;
  }
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

  return fill(ctx, seen, want - moving, zeros, pass, velocityKinds, only, nowMs, top, counts, work) && order.stillValid();
}

/**
 * The places the items with a velocity left (`need`), by the secondary score among the items with
 * velocity 0: `zeros` (the secondary scores of those already visited), then the key orders' walk
 * over the items not in `seen`. False if the orders were overwritten mid-read.
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
): boolean {
  if (need <= 0) return true;
  const floor = new Floor(need);
  for (const z of zeros) floor.push(z);
  // The scan's candidates for the remaining places: items with a slot of a velocity kind; their
  // secondary score is that one kind's decayed score, or with several velocity kinds the popularity.
  const lists = only >= 0 ? [only] : ctx.schema.kinds.map((_, k) => k);
  const admit: Predicate = only >= 0 ? pass : (o) => pass(o) && hasSlotIn(ctx, o, velocityKinds, work);
  return walkByDecay(ctx, lists, admit, nowMs, seen, floor, counts, work, (o, v) => top.push(o, 0, v));
}

/** Items a count walk visited and their scores, index for index. */
interface Walked {
  ordinals: number[];
  values: number[];
  secondary: number[];
}

/**
 * The threshold walk down the count order for the 1h window starting at `start` (see
 * {@link trendingOrdered}): every item that passes and may hold one of the `want` places by
 * velocity, with its velocity and secondary score. Null when it would visit more than `cap`
 * slots; false if an entry was torn.
 */
function byCount(
  ctx: QueryContext,
  seen: OrdinalSet,
  want: number,
  pass: Predicate,
  start: number,
  nowMs: number,
  velocityKinds: readonly number[],
  only: number,
  isVelocity: readonly boolean[],
  cap: number,
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
    out.ordinals.push(o);
    out.values.push(v);
    out.secondary.push(sec);
    floor.push(v);
  };

  // The slots written since the orders were built: their keys in the orders may be stale.
  for (let j = 0; j < order.dirtyCount; j++) {
    const s = order.dirtySlot(j);
    if (!(s >>> 0 === s && s < used)) return false;
    work.slots++;
    if (!isVelocity[store.slotKind(s)] || !store.hasEvents(s) || store.newestAt(s) < start) continue;
    visit(s);
  }

  // A list's bound at position i: the velocity its slot (and every slot after it) can have in the
  // window, exp(ckey − μ·start) events over the window's seconds; 0 below one event. Rounding in
  // ckey and μ·start (both large) is covered by a relative margin on the exponent.
  const decay = COUNT_RATE * start;
  const boundAt = (i: number): number => {
    const key = order.countKeyAt(i);
    const events = Math.exp(key - decay + (Math.abs(key) + Math.abs(decay)) * 4e-16 + 1e-12);
    return events < 1 ? 0 : events / SECONDS_1H;
  };
  const n = velocityKinds.length;
  const cursor = new Int32Array(n);
  const end = new Int32Array(n);
  const bound = new Float64Array(n);
  for (let li = 0; li < n; li++) {
    cursor[li] = order.start(velocityKinds[li]!);
    end[li] = order.end(velocityKinds[li]!);
    bound[li] = cursor[li]! < end[li]! ? boundAt(cursor[li]!) : 0;
  }
  let visited = 0;
  for (;;) {
    let threshold = 0;
    let best = -1;
    for (let li = 0; li < n; li++) {
      if (cursor[li]! >= end[li]!) continue;
      threshold += bound[li]!;
      if (best < 0 || bound[li]! > bound[best]!) best = li;
    }
    // Every item not visited has no event in the window (or there is none left): velocity 0.
    if (best < 0 || threshold === 0) break;
    // Velocities summed over kinds in another order than the bounds: a relative margin for rounding.
    if (floor.full && floor.min > threshold * (1 + 1e-12)) break;
    if (visited >= cap) return null;
    const s = order.countSlotAt(cursor[best]!);
    if (!(s >>> 0 === s && s < used)) return false;
    cursor[best]!++;
    bound[best] = cursor[best]! < end[best]! ? boundAt(cursor[best]!) : 0;
    work.slots++;
    visited++;
    visit(s);
  }
  return out;
}
