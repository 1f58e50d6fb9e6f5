import type { Predicate } from '../filter.js';
import { popularity, velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import type { OrdinalSet } from '../ordinal-set.js';
import { Floor, type TopK } from '../topk.js';
import type { VelocityWindow } from '../types.js';
import { windowStartMs } from '../windows.js';
import { hasSlotIn, walkByDecay, type StageCounts } from './walks.js';

/**
 * trending: the slots of a velocity kind with an event inside the window, scored exactly (the
 * dirty list, then the recency order's prefix); then, if fewer than `want` of them passed, the
 * remaining places by the secondary score (velocity 0) from the key orders.
 *
 * CoarseAggregates reads the 24h velocity for a 1h query, and the 24h window holds more active
 * slots than the 1h one: walking it would make the cheap level the dear one. So a coarse 1h
 * query walks the 24h window only when it holds no more slots than the 1h walk would visit (two
 * binary searches tell); otherwise it ranks the 1h walk's slots by their 24h velocity. Either way
 * it visits no more slots than ReducedCandidates does, and when it does not walk the 24h window
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
  seen.reset();
  const zeros: number[] = [];
  let moving = 0;

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

  const need = want - moving;
  if (need > 0) {
    const floor = new Floor(need);
    for (const z of zeros) floor.push(z);
    // The scan's candidates for the remaining places: items with a slot of a velocity kind; their
    // secondary score is that one kind's decayed score, or with several velocity kinds the popularity.
    const lists = only >= 0 ? [only] : specs.map((_, k) => k);
    const admit: Predicate = only >= 0 ? pass : (o) => pass(o) && hasSlotIn(ctx, o, velocityKinds, work);
    const ok = walkByDecay(ctx, lists, admit, nowMs, seen, floor, counts, work, (o, v) => top.push(o, 0, v));
    if (!ok) return false;
  }
  return order.stillValid();
}
