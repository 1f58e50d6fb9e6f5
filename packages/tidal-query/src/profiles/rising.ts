import type { Predicate } from '../filter.js';
import type { QueryContext, WorkCounter } from '../context.js';
import { ORDER_ATTEMPTS } from '../candidates/walks.js';
import { TopK } from '../topk.js';
import type { Explain, VelocityWindow } from '../types.js';
import { windowStartMs } from '../windows.js';
import { Budget, finish, type FeedRanking } from './feed-budget.js';

/** `rising` compares a window's velocity with the next longer one's. */
export const RISING_BASELINE: Readonly<Partial<Record<VelocityWindow, VelocityWindow>>> = Object.freeze({ '1h': '24h', '24h': '7d' });
/**
 * `rising`: the items with an event of a velocity kind in `window`, scored by velocity growth:
 * Σ over velocity kinds (velocity over `window` − velocity over the next longer window, see
 * {@link RISING_BASELINE}); ties to the higher velocity over `window`, then the lower ordinal.
 * Positive for an item engaged faster lately than over the longer window. Windows are read exactly
 * at every level (the profile is their difference). Without a budget every active item; with
 * one the `limit` most recently active.
 */
export function rising(
  ctx: QueryContext,
  want: number,
  pass: Predicate,
  window: VelocityWindow,
  nowMs: number,
  limit: number | null,
  explain: Explain,
  work: WorkCounter,
): FeedRanking {
  const store = ctx.store;
  const specs = ctx.schema.kinds;
  const kinds: number[] = [];
  for (let k = 0; k < specs.length; k++) if (specs[k]!.velocity) kinds.push(k);
  const baseline = RISING_BASELINE[window]!;
  const start = windowStartMs(window, nowMs);
  const candidates = activeSince(ctx, kinds, start, limit, work);
  const best = new TopK(want);
  const budget = new Budget(limit);
  budget.visited = candidates.ordinals.length;
  budget.exhausted = candidates.exhausted;
  let passed = 0;
  for (const o of candidates.ordinals) {
    if (!pass(o)) continue;
    passed++;
    let growth = 0;
    let recent = 0;
    for (const k of kinds) {
      const s = store.slotOf(o, k);
      if (s < 0) continue;
      work.slots++;
      const v = store.velocity(s, window, nowMs, false);
      recent += v;
      growth += v - store.velocity(s, baseline, nowMs, false);
    }
    best.push(o, growth, recent);
  }
  return finish(best, budget, passed, limit, explain);
}

/**
 * The distinct items with a slot of one of `kinds` whose newest event is at or after `start`: the
 * dirty slots, then the recency orders' prefixes (most recently active first), at most `limit`.
 * A scan of every slot when the orders cannot be read.
 */
function activeSince(
  ctx: QueryContext,
  kinds: readonly number[],
  start: number,
  limit: number | null,
  work: WorkCounter,
): { ordinals: number[]; exhausted: boolean } {
  const store = ctx.store;
  const order = store.order;
  const max = limit ?? Infinity;
  const isKind = new Uint8Array(ctx.schema.kinds.length);
  for (const k of kinds) isKind[k] = 1;
  for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
    if (!order.begin()) break;
    const used = store.slotsUsed();
    const seen = new Set<number>();
    const out: number[] = [];
    let torn = false;
    let exhausted = false;
    const add = (s: number): boolean => {
      if (!(s >>> 0 === s && s < used)) {
        torn = true;
        return false;
      }
      work.slots++;
      if (!isKind[store.slotKind(s)] || !store.hasEvents(s) || store.newestAt(s) < start) return true;
      const o = store.slotOrdinal(s);
      if (seen.has(o)) return true;
      if (out.length >= max) {
        exhausted = true;
        return false;
      }
      seen.add(o);
      out.push(o);
      return true;
    };
    for (let j = 0; j < order.dirtyCount; j++) if (!add(order.dirtySlot(j))) break;
    // The kinds' prefixes merged by newest event time, so a budget keeps the most recently active.
    const at = kinds.map((k) => order.start(k));
    while (!torn && !exhausted) {
      let pick = -1;
      for (let i = 0; i < kinds.length; i++) {
        const k = kinds[i]!;
        if (at[i]! >= order.end(k) || order.newestAt(at[i]!) < start) continue;
        if (pick < 0 || order.newestAt(at[i]!) > order.newestAt(at[pick]!)) pick = i;
      }
      if (pick < 0) break;
      if (!add(order.newestSlotAt(at[pick]!++))) break;
    }
    if (torn || !order.stillValid()) continue;
    return { ordinals: out, exhausted };
  }
  const out: number[] = [];
  const seen = new Set<number>();
  let exhausted = false;
  for (let s = 0, used = store.slotsUsed(); s < used; s++) {
    work.slots++;
    if (!isKind[store.slotKind(s)] || !store.hasEvents(s) || store.newestAt(s) < start) continue;
    const o = store.slotOrdinal(s);
    if (seen.has(o)) continue;
    if (out.length >= max) {
      exhausted = true;
      break;
    }
    seen.add(o);
    out.push(o);
  }
  return { ordinals: out, exhausted };
}
