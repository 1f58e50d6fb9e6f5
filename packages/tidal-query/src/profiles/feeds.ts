import { INCREMENTAL_SHARE, markOrdinals, mergeCreated, sortCreated, type Catalog } from '../catalog.js';
import type { Predicate } from '../filter.js';
import { popularity, type QueryContext, type WorkCounter } from '../context.js';
import { Floor, TopK } from '../topk.js';
import type { Explain, RetrieveTask, VelocityWindow } from '../types.js';

/**
 * Candidates `following`, `hot`, `rising` and `top` may visit below Full. Each visit reads the
 * item's slots (one per kind): 2 000 visits are ~4 000 slot reads, about 0.3 ms on the bench
 * machine, whatever the corpus size; at Full they visit what their definition needs.
 */
export const FEED_CANDIDATE_BUDGET = 2000;

/** `hot`'s gravity: score = (max(0, popularity) + 1) / (age in hours + 2)^1.8 (Hacker News' exponent). */
export const HOT_GRAVITY = 1.8;

const MS_PER_MINUTE = 60_000;
const MS_PER_HOUR = 3_600_000;

/** The window lengths `top` ranks the items created in. */
export const TOP_WINDOW_MS: Readonly<Record<VelocityWindow, number>> = Object.freeze({ '1h': MS_PER_HOUR, '24h': 24 * MS_PER_HOUR, '7d': 168 * MS_PER_HOUR });

/** `rising` compares a window's velocity with the next longer one's. */
export const RISING_BASELINE: Readonly<Partial<Record<VelocityWindow, VelocityWindow>>> = Object.freeze({ '1h': '24h', '24h': '7d' });

/** Readings of the slot orders overwritten mid-read before `rising` and `hot` fall back to a scan. */
const ORDER_ATTEMPTS = 3;

/** The earliest time (ms) an event can have and still count in `window` at `nowMs` (ring units). */
export function windowStartMs(window: VelocityWindow, nowMs: number): number {
  if (window === '1h') return (Math.floor(nowMs / MS_PER_MINUTE) - 59) * MS_PER_MINUTE;
  return (Math.floor(nowMs / MS_PER_HOUR) - (window === '24h' ? 23 : 167)) * MS_PER_HOUR;
}

export interface FeedRanking {
  ranked: number[];
  scores: number[];
}

/** Counts a walk against the level's budget. */
class Budget {
  visited = 0;
  exhausted = false;
  readonly #limit: number;

  constructor(limit: number | null) {
    this.#limit = limit ?? Infinity;
  }

  /** Takes one visit; false (and `exhausted`) when none is left. */
  take(): boolean {
    if (this.visited >= this.#limit) {
      this.exhausted = true;
      return false;
    }
    this.visited++;
    return true;
  }
}

function finish(top: TopK, budget: Budget, passed: number, limit: number | null, explain: Explain): FeedRanking {
  explain.candidates = budget.visited;
  explain.afterFilter = passed;
  explain.candidateBudget = limit;
  explain.budgetExhausted = budget.exhausted;
  const { ordinals, primary } = top.sorted();
  return { ranked: ordinals, scores: primary };
}

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
 * many signals made the walk visit every item younger than it. Below Full at most the budget in
 * all, half of it by popularity, the rest newest first.
 */
export function hot(
  ctx: QueryContext,
  want: number,
  pass: Predicate,
  nowMs: number,
  limit: number | null,
  explain: Explain,
  work: WorkCounter,
  walk?: PopularityWalk,
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
  if (walk && order.length > popular) {
    const found = walk(popular, pass, limit === null ? Infinity : Math.floor(limit / 2));
    if (found) {
      budget.visited = found.visited;
      walked = new Set(found.ordinals);
      passed = found.ordinals.length;
      for (let i = 0; i < found.ordinals.length; i++) {
        const o = found.ordinals[i]!;
        const s = (Math.max(0, found.values[i]!) + 1) / denominator(o);
        top.push(o, s, created[o]!);
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
    top.push(o, s, created[o]!);
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

/** What a popularity walk found (see {@link PopularityWalk}). */
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

/**
 * The items passing `admit`, most popular first as the threshold walk over the kinds' key orders
 * meets them, until the `want`-th best passing item beats every item not visited, every item with a
 * slot was visited, or `max` items were; null when the orders cannot be read.
 */
export type PopularityWalk = (want: number, admit: Predicate, max: number) => PopularityWalkResult | null;

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
 * that walk did not keep (at Full all of them, so at most twice the window in all).
 *
 * Below Full at most `limit` items are visited in all, so a window larger than the budget is
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
  walk?: PopularityWalk,
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
  if (walk && inWindow > want && (2 * want * order.length) / inWindow < walkCap) {
    const found = walk(want, (o) => created[o]! >= start && pass(o), walkCap);
    if (found) {
      budget.visited = found.visited;
      for (let i = 0; i < found.ordinals.length; i++) best.push(found.ordinals[i]!, found.values[i]!, created[found.ordinals[i]!]!);
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
          best.push(o, 0, created[o]!);
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
    best.push(o, popularity(ctx, o, nowMs, work), created[o]!);
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

/**
 * `rising`: the items with an event of a velocity kind in `window`, scored by velocity growth:
 * Σ over velocity kinds (velocity over `window` − velocity over the next longer window, see
 * {@link RISING_BASELINE}); ties to the higher velocity over `window`, then the lower ordinal.
 * Positive for an item engaged faster lately than over the longer window. Windows are read exactly
 * at every level (the profile is their difference). At Full every active item; below Full the
 * `budget` most recently active.
 */
export function rising(ctx: QueryContext, want: number, pass: Predicate, window: VelocityWindow, nowMs: number, limit: number | null, explain: Explain, work: WorkCounter): FeedRanking {
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
function activeSince(ctx: QueryContext, kinds: readonly number[], start: number, limit: number | null, work: WorkCounter): { ordinals: number[]; exhausted: boolean } {
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

export interface CreatorLists {
  version: number;
  field: string;
  /** Per creator code, its present items newest first (the catalog's created order). */
  lists: Map<number, Int32Array>;
  /** Per ordinal, the creator code whose list holds it (-1: none). */
  codeOf: Int32Array;
}

const creatorLists = new WeakMap<Catalog, CreatorLists>();

/**
 * Each creator's present items, newest first. Cached per catalog; after item writes only the
 * lists of the creators whose items changed are merged again (O(their items + changed)), and a
 * change larger than 1/{@link INCREMENTAL_SHARE} of the items rebuilds them all (O(items)).
 */
export function creatorListsOf(catalog: Catalog, field: string): Map<number, Int32Array> {
  const cached = creatorLists.get(catalog);
  if (cached && cached.version === catalog.version && cached.field === field) return cached.lists;
  const col = catalog.columns.get(field);
  const codes = col && col.type === 'string' ? col.codes : null;
  const changed = cached && cached.field === field ? catalog.changedSince(cached.version) : null;
  const next =
    cached && changed !== null && codes !== null && changed.length <= catalog.presentCount / INCREMENTAL_SHARE
      ? patchCreatorLists(cached, catalog, codes, changed)
      : buildCreatorLists(catalog, field);
  next.version = catalog.version;
  creatorLists.set(catalog, next);
  return next.lists;
}

function codeNow(catalog: Catalog, codes: Int32Array, o: number): number {
  return catalog.present[o] === 1 ? (codes[o] ?? -1) : -1;
}

/** Every creator's list built from scratch (O(items)); {@link creatorListsOf} caches and patches them. */
export function buildCreatorLists(catalog: Catalog, field: string): CreatorLists {
  const col = catalog.columns.get(field);
  const codes = col && col.type === 'string' ? col.codes : null;
  const grouped = new Map<number, number[]>();
  const codeOf = new Int32Array(catalog.present.length).fill(-1);
  if (codes !== null) {
    for (const o of catalog.byCreatedDesc()) {
      const code = codes[o]!;
      if (code < 0) continue;
      codeOf[o] = code;
      let l = grouped.get(code);
      if (!l) grouped.set(code, (l = []));
      l.push(o);
    }
  }
  const lists = new Map([...grouped].map(([c, l]) => [c, Int32Array.from(l)]));
  return { version: catalog.version, field, lists, codeOf };
}

function patchCreatorLists(cached: CreatorLists, catalog: Catalog, codes: Int32Array, changed: Int32Array): CreatorLists {
  let codeOf = cached.codeOf;
  if (codeOf.length < catalog.present.length) {
    const grown = new Int32Array(catalog.present.length).fill(-1);
    grown.set(codeOf);
    codeOf = grown;
  }
  // The creators whose lists lose or gain an item: each list is merged once with every change.
  const adds = new Map<number, number[]>();
  for (const o of changed) {
    if (codeOf[o]! >= 0 && !adds.has(codeOf[o]!)) adds.set(codeOf[o]!, []);
    const now = codeNow(catalog, codes, o);
    if (now < 0) continue;
    const l = adds.get(now);
    if (l) l.push(o);
    else adds.set(now, [o]);
  }
  const drop = markOrdinals(changed, catalog.present.length);
  for (const [c, added] of adds) {
    const merged = mergeCreated(cached.lists.get(c) ?? EMPTY, drop, sortCreated(Int32Array.from(added), catalog.createdAt), catalog.createdAt);
    if (merged.length === 0) cached.lists.delete(c);
    else cached.lists.set(c, merged);
  }
  for (const o of changed) codeOf[o] = codeNow(catalog, codes, o);
  return { version: catalog.version, field: cached.field, lists: cached.lists, codeOf };
}

const EMPTY = new Int32Array(0);

/**
 * `following`: the items of the creators the user follows, newest first (`order: 'newest'`, score
 * = createdAt) or by popularity (`'popular'`, ties to the newer). The followed creators' lists are
 * merged newest first; `newest` stops at the `want`-th item that passes, `popular` scores every
 * item of the followed creators at Full, the newest `budget` of them below.
 */
export function following(ctx: QueryContext, task: RetrieveTask, want: number, pass: Predicate, nowMs: number, limit: number | null, explain: Explain, work: WorkCounter): FeedRanking {
  const field = ctx.schema.creatorField;
  const col = field === undefined ? undefined : ctx.catalog.columns.get(field);
  const followed = task.user?.following ?? [];
  const heads: Int32Array[] = [];
  if (field !== undefined && col && col.type === 'string') {
    const lists = creatorListsOf(ctx.catalog, field);
    for (const c of followed) {
      const code = col.dict.get(c);
      const l = code === undefined ? undefined : lists.get(code);
      if (l && l.length > 0) heads.push(l);
    }
  }
  const created = ctx.catalog.createdAt;
  const newest = (task.order ?? 'newest') === 'newest';
  const best = new TopK(want);
  const budget = new Budget(limit);
  let passed = 0;
  const merge = new NewestFirst(heads, created);
  for (let o = merge.next(); o >= 0; o = merge.next()) {
    if (!budget.take()) break;
    if (!pass(o)) continue;
    passed++;
    if (newest) {
      best.push(o, created[o]!, 0);
      if (passed >= want) break;
    } else {
      best.push(o, popularity(ctx, o, nowMs, work), created[o]!);
    }
  }
  return finish(best, budget, passed, limit, explain);
}

/** A k-way merge of newest-first lists (ties: the lower ordinal), by a binary heap of list heads. */
class NewestFirst {
  readonly #lists: Int32Array[];
  readonly #pos: Int32Array;
  readonly #heap: number[];
  readonly #created: Float64Array;

  constructor(lists: Int32Array[], created: Float64Array) {
    this.#lists = lists;
    this.#pos = new Int32Array(lists.length);
    this.#created = created;
    this.#heap = [];
    for (let i = 0; i < lists.length; i++) this.#push(i);
  }

  #before(a: number, b: number): boolean {
    const oa = this.#lists[a]![this.#pos[a]!]!;
    const ob = this.#lists[b]![this.#pos[b]!]!;
    const ca = this.#created[oa]!;
    const cb = this.#created[ob]!;
    return ca !== cb ? ca > cb : oa < ob;
  }

  #push(i: number): void {
    const h = this.#heap;
    let j = h.length;
    h.push(i);
    while (j > 0) {
      const p = (j - 1) >> 1;
      if (!this.#before(h[j]!, h[p]!)) break;
      [h[j], h[p]] = [h[p]!, h[j]!];
      j = p;
    }
  }

  /** The next ordinal, or −1 when every list is done. */
  next(): number {
    const h = this.#heap;
    if (h.length === 0) return -1;
    const i = h[0]!;
    const o = this.#lists[i]![this.#pos[i]!]!;
    this.#pos[i]!++;
    if (this.#pos[i]! < this.#lists[i]!.length) this.#down(0);
    else {
      const last = h.pop()!;
      if (h.length > 0) {
        h[0] = last;
        this.#down(0);
      }
    }
    return o;
  }

  #down(j: number): void {
    const h = this.#heap;
    for (;;) {
      const l = 2 * j + 1;
      if (l >= h.length) return;
      const r = l + 1;
      const c = r < h.length && this.#before(h[r]!, h[l]!) ? r : l;
      if (!this.#before(h[c]!, h[j]!)) return;
      [h[j], h[c]] = [h[c]!, h[j]!];
      j = c;
    }
  }
}

/**
 * `related`: the item's co-engagement partners (never the item itself), by their co-engagement
 * score decayed to the query's clock; ties to the lower ordinal. The list is at most
 * the index's per-item bound long, so no level has anything to cut.
 */
export function related(task: RetrieveTask, pass: Predicate, nowMs: number, explain: Explain): FeedRanking {
  const r = task.related!;
  // At most 32 entries, each inserted in place (best first, ties by ordinal): no index array,
  // comparator closure or copies, which cost more than the comparisons at this size.
  const ordinals: number[] = [];
  const values: number[] = [];
  let candidates = 0;
  const e = r.entries;
  for (let i = 0; i < r.n; i++) {
    const o = e[3 * i]!;
    if (o === r.item) continue;
    candidates++;
    if (!pass(o)) continue;
    const v = e[3 * i + 1]! * Math.exp(-r.lambda * Math.max(0, nowMs - e[3 * i + 2]!));
    let j = ordinals.length;
    ordinals.push(o);
    values.push(v);
    while (j > 0 && (values[j - 1]! < v || (values[j - 1] === v && ordinals[j - 1]! > o))) {
      ordinals[j] = ordinals[j - 1]!;
      values[j] = values[j - 1]!;
      j--;
    }
    ordinals[j] = o;
    values[j] = v;
  }
  explain.candidates = candidates;
  explain.afterFilter = ordinals.length;
  return { ranked: ordinals, scores: values };
}
