import type { Predicate } from '../filter.js';
import { popularity, type QueryContext, type WorkCounter } from '../context.js';
import type { CandidateSources } from '../candidates/sources.js';
import { ORDER_ATTEMPTS } from '../candidates/walks.js';
import { Floor, TopK } from '../topk.js';
import type { Explain, VelocityWindow } from '../types.js';
import { WINDOW_MS } from '../windows.js';
import { Budget, finish, type FeedRanking } from './feed-budget.js';

/** `hot`'s gravity: score = (max(0, popularity) + 1) / (age in hours + 2)^1.8 (Hacker News' exponent). */
export const HOT_GRAVITY = 1.8;

const MS_PER_HOUR = 3_600_000;

/** The window lengths `top` ranks the items created in. */
export const TOP_WINDOW_MS: Readonly<Record<VelocityWindow, number>> = WINDOW_MS;

/**
 * The most popular items `hot` scores first (see {@link hot}): the popularity of the
 * {@link HOT_POPULAR}-th bounds every item not among them.
 */
export const HOT_POPULAR = 256;

/**
 * `hot`: score = (max(0, popularity) + 1) / (age_h + 2)^{@link HOT_GRAVITY}, age_h = hours since
 * `createdAt` (0 for a future one); ties to the newer item, then the lower ordinal. Every present
 * item is a candidate (one with no signals scores 1 / (age_h + 2)^g).
 *
 * Two walks, a threshold algorithm over the two things the score grows with. The popularity walk
 * (the kinds' key orders, as `top` uses) scores the {@link HOT_POPULAR} most popular items first;
 * when it ends by itself, the popularity P of the last of them bounds every item it did not reach
 * (0 when it reached every item with a signal). Then the creation-order walk goes newest first
 * over the rest and stops, exactly, once the k-th best beats what any older item can reach:
 * (P + 1) / (age_h + 2)^g. Without the popularity walk (or when it was cut short) P is the largest
 * popularity of any item (the sum over kinds of the largest decayed score), and one old item with
 * many signals made the walk visit every item younger than it. With a budget (`limit`), at most the budget
 * in all, half of it by popularity, the rest newest first.
 */
export function hot(
  ctx: QueryContext,
  want: number,
  pass: Predicate,
  nowMs: number,
  limit: number | null,
  explain: Explain,
  work: WorkCounter,
  sources: CandidateSources,
): FeedRanking {
  const order = ctx.catalog.byCreatedDesc();
  const created = ctx.catalog.createdAt;
  const denominator = (o: number): number => Math.pow(Math.max(0, nowMs - created[o]!) / MS_PER_HOUR + 2, HOT_GRAVITY);
  const top = new TopK(want);
  const floor = new Floor(want);
  const budget = new Budget(limit);
  let passed = 0;
  let bound = Math.max(0, popularityBound(ctx, nowMs, work)) + 1;
  let walked: Set<number> | null = null;
  const popular = Math.max(want, HOT_POPULAR);
  if (order.length > popular) {
    const found = sources.popularityWalk(popular, pass, limit === null ? Infinity : Math.floor(limit / 2), nowMs, work);
    if (found) {
      budget.visited = found.visited;
      walked = new Set(found.ordinals);
      passed = found.ordinals.length;
      for (let i = 0; i < found.ordinals.length; i++) {
        const o = found.ordinals[i]!;
        const s = (Math.max(0, found.values[i]!) + 1) / denominator(o);
        top.push(o, s, created[o]);
        floor.push(s);
      }
      if (found.end === 'exhausted') bound = 1;
      else if (found.end === 'early') bound = Math.min(bound, Math.max(0, nth(found.values, popular)) + 1);
    }
  }
  for (let i = 0; i < order.length; i++) {
    const o = order[i]!;
    if (walked?.has(o)) continue;
    const denom = denominator(o);
    if (floor.full && floor.min > bound / denom) break;
    if (!budget.take()) break;
    if (!pass(o)) continue;
    passed++;
    const s = (Math.max(0, popularity(ctx, o, nowMs, work)) + 1) / denom;
    top.push(o, s, created[o]);
    floor.push(s);
  }
  return finish(top, budget, passed, limit, explain);
}

/** The `n`-th largest of `values` (n ≥ 1, at most its length). */
function nth(values: readonly number[], n: number): number {
  return Float64Array.from(values).sort()[values.length - n]!;
}

/**
 * An upper bound on any item's popularity at `nowMs`: per kind, the largest decayed score (the
 * bound at the head of its key order, or a dirty slot's value), summed. Infinity when the orders
 * cannot be read (switched off, or overwritten on every attempt): the walk then never stops early.
 */
function popularityBound(ctx: QueryContext, nowMs: number, work: WorkCounter): number {
  const store = ctx.store;
  const order = store.order;
  const kinds = ctx.schema.kinds.length;
  for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
    if (!order.begin()) return Infinity;
    const used = store.slotsUsed();
    const best = new Float64Array(kinds);
    let torn = false;
    for (let k = 0; k < kinds; k++) {
      if (order.start(k) >= order.end(k)) continue;
      const key = order.keyAt(order.start(k));
      if (key === Number.NEGATIVE_INFINITY) continue;
      const decay = store.decayRate(k) * nowMs;
      // The same relative margin as the popular walk's bounds: rounding never puts it below a value.
      best[k] = Math.exp(key - decay + (Math.abs(key) + Math.abs(decay)) * 4e-16 + 1e-12);
    }
    for (let j = 0; j < order.dirtyCount && !torn; j++) {
      const s = order.dirtySlot(j);
      if (!(s >>> 0 === s && s < used)) {
        torn = true;
        break;
      }
      work.slots++;
      const k = store.slotKind(s);
      const v = store.decayedScore(s, nowMs);
      if (v > best[k]!) best[k] = v;
    }
    if (torn || !order.stillValid()) continue;
    let sum = 0;
    for (let k = 0; k < kinds; k++) sum += best[k]!;
    return sum;
  }
  return Infinity;
}

/**
 * `top`: the items created in the last `window` (createdAt ≥ now − window), by popularity; ties
 * to the newer item, then the lower ordinal.
 *
 * Two walks, each exact when it runs to its end. The popularity walk visits the items by
 * popularity (the key orders, as `popular` does) and keeps those created in the window; it stops,
 * exactly, once the k-th best beats every item not visited. It visits about k × items ÷ (items in
 * the window) items when engagement does not depend on age (fewer when the newer items are the
 * engaged ones), so it runs when twice that is under the window's size: at 100 000 items, k = 10,
 * a 24h window of 3 300 items is ranked in a few hundred visits instead of 3 300. It never visits
 * more items than the window holds. The creation-order walk visits the window newest first: it
 * runs alone for a short window, and after a popularity walk that reached its cap, over the items
 * that walk did not keep (without a budget all of them, so at most twice the window in all).
 *
 * With a budget at most `limit` items are visited in all, so a window larger than the budget is
 * exact whenever the popularity walk stopped by itself, and otherwise ranks the most popular of
 * the window among the items visited; a window of at most half the budget is always exact.
 * Counted in `explain.candidates`.
 */
export function top(
  ctx: QueryContext,
  want: number,
  pass: Predicate,
  window: VelocityWindow,
  nowMs: number,
  limit: number | null,
  explain: Explain,
  work: WorkCounter,
  sources: CandidateSources,
): FeedRanking {
  const order = ctx.catalog.byCreatedDesc();
  const created = ctx.catalog.createdAt;
  const start = nowMs - TOP_WINDOW_MS[window];
  const inWindow = countCreatedSince(order, created, start);
  const budget = new Budget(limit);
  const best = new TopK(want);
  let passed = 0;
  let kept: Set<number> | null = null;
  const walkCap = Math.min(inWindow, limit ?? Infinity);
  if (inWindow > want && (2 * want * order.length) / inWindow < walkCap) {
    const found = sources.popularityWalk(want, (o) => created[o]! >= start && pass(o), walkCap, nowMs, work);
    if (found) {
      budget.visited = found.visited;
      for (let i = 0; i < found.ordinals.length; i++) best.push(found.ordinals[i]!, found.values[i]!, created[found.ordinals[i]!]);
      passed = found.ordinals.length;
      if (found.end === 'early') return finish(best, budget, passed, limit, explain);
      kept = new Set(found.ordinals);
      if (found.end === 'exhausted') {
        // Every item with a signal slot was visited: the rest of the window scores 0, the newest first.
        let zeros = 0;
        for (let i = 0; i < inWindow && zeros < want; i++) {
          const o = order[i]!;
          if (kept.has(o)) continue;
          if (!budget.take()) break;
          if (!pass(o)) continue;
          passed++;
          zeros++;
          best.push(o, 0, created[o]);
        }
        return finish(best, budget, passed, limit, explain);
      }
    }
  }
  for (let i = 0; i < inWindow; i++) {
    const o = order[i]!;
    if (kept?.has(o)) continue;
    if (!budget.take()) break;
    if (!pass(o)) continue;
    passed++;
    best.push(o, popularity(ctx, o, nowMs, work), created[o]);
  }
  return finish(best, budget, passed, limit, explain);
}

/** How many of `order` (newest first) were created at or after `start`: a binary search. */
function countCreatedSince(order: Int32Array, created: Float64Array, start: number): number {
  let lo = 0;
  let hi = order.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (created[order[mid]!]! >= start) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
