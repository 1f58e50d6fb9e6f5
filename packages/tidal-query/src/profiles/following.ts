import type { Predicate } from '../filter.js';
import { popularity, type QueryContext, type WorkCounter } from '../context.js';
import { TopK } from '../topk.js';
import type { Explain, RetrieveTask } from '../types.js';
import { creatorListsOf } from './creator-lists.js';
import { Budget, finish, type FeedRanking } from './feed-budget.js';

/**
 * `following`: the items of the creators the user follows, newest first (`order: 'newest'`, score
 * = createdAt) or by popularity (`'popular'`, ties to the newer). The followed creators' lists are
 * merged newest first; `newest` stops at the `want`-th item that passes, `popular` scores every
 * item of the followed creators without a budget, the newest `limit` of them with one.
 */
export function following(
  ctx: QueryContext,
  task: RetrieveTask,
  want: number,
  pass: Predicate,
  nowMs: number,
  limit: number | null,
  explain: Explain,
  work: WorkCounter,
): FeedRanking {
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
      best.push(o, popularity(ctx, o, nowMs, work), created[o]);
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
