/**
 * `for_you`'s trending source kept per state (clock, items version, signal orders): a burst of
 * queries at one clock walks trending once, each query still filters it by its own predicate, and
 * the rankings equal those of an executor walking trending with each query's predicate.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { atLevels } from './level-runner.js';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { levelPlan } from '../src/plan.js';
import { TrendingCache } from '../src/profiles/trending-cache.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { Filter, RetrieveTask, UserQueryState } from '../src/types.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const NOW = Date.UTC(2025, 0, 6, 12, 30, 0);
const ITEMS = 2_000;
const CREATORS = 40;
const LEVELS = [DegradationLevel.Full, DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity];

function world(): { ctx: QueryContext; store: SignalStore; writer: ItemsWriter; catalog: Catalog } {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const writer = new ItemsWriter(db);
  db.transaction(() => {
    for (let o = 0; o < ITEMS; o++) {
      writer.upsert(
        {
          ordinal: o,
          id: `i${o}`,
          text: null,
          metadata: { creator: `c${o % CREATORS}`, category: `k${o % 7}` },
          createdAt: NOW - o * 7 * MIN,
          embedding: null,
        },
        o + 1,
        false,
      );
    }
  })();
  const kinds: SignalKindSpec[] = [{ name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true }];
  const schema = {
    kinds,
    metadata: { creator: 'string' as const, category: 'string' as const },
    embeddingDims: 0,
    creatorField: 'creator',
  };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds, maxOrdinals: ITEMS + 10, maxSlots: ITEMS + 10 });
  const rand = mulberry32(5);
  for (let o = 0; o < ITEMS; o++) {
    if (rand() > 0.7) continue;
    const count = 1 + Math.floor(30 / (1 + rand() * 40));
    for (let e = 0; e < count; e++) store.apply(o, 0, 1, NOW - Math.floor(rand() * (rand() < 0.5 ? 2 * HOUR : 48 * HOUR)));
  }
  return { ctx: { schema, catalog, store, ann: null, db }, store, writer, catalog };
}

function user(over: Partial<UserQueryState> = {}): UserQueryState {
  return {
    hidden: new Int32Array(0),
    blocked: [],
    seen: null,
    following: null,
    preference: new Float32Array(0),
    affinityCreators: ['c3', 'c7'],
    affinityScores: Float64Array.from([2, 1]),
    idHash: 17,
    ...over,
  };
}

function task(u: UserQueryState, filter: Filter | null = null): RetrieveTask {
  return {
    profile: 'for_you',
    context: null,
    filter,
    diversity: null,
    limit: 200,
    window: '1h',
    exclude: null,
    user: u,
    forYou: { weights: { similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 }, explore: 0, seed: 0 },
  };
}

const ranking = (r: { items: { id: string; score: number }[] }): [string, number][] => r.items.map((i) => [i.id, i.score]);

describe('for_you trending cache', () => {
  it('walks trending once per state for every user, and ranks as the uncached walk does', () => {
    const w = world();
    const cache = new TrendingCache();
    const cached = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: cache }));
    const walked = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: null }));
    // Trending's first items by the uncached walk: the ones worth hiding.
    const first = walked
      .run({ ...task(user()), profile: 'trending', user: null, limit: 8 }, DegradationLevel.Full, NOW)
      .items.map((i) => Number(i.id.slice(1)));
    expect(first).toHaveLength(8);
    const users = [
      user(),
      user({ hidden: Int32Array.from(first.slice(0, 5)), idHash: 3 }),
      user({ blocked: ['c1', 'c2', 'c5'], seen: Int32Array.from(first.slice(5)), idHash: 9 }),
    ];
    for (const level of LEVELS) {
      const before = cache.computed;
      for (const [i, u] of users.entries()) {
        const filter = i === 2 ? { category: { in: ['k1', 'k2', 'k3', 'k4'] } } : null;
        const a = cached.run(task(u, filter), level, NOW);
        const b = walked.run(task(u, filter), level, NOW);
        expect(ranking(a), `level ${level} user ${i}`).toEqual(ranking(b));
        expect(a.explain.forYouSources!.trending).toBe(b.explain.forYouSources!.trending);
        // The cache never serves what the user hid or cannot see.
        const ids = new Set(a.items.map((it) => Number(it.id.slice(1))));
        for (const o of u.hidden) expect(ids.has(o), `hidden i${o}`).toBe(false);
        for (const o of u.seen ?? []) expect(ids.has(o), `seen i${o}`).toBe(false);
      }
      // Three users, one walk.
      expect(cache.computed - before, `level ${level}`).toBe(1);
    }
    expect(cache.served).toBe(2 * LEVELS.length);
    expect(cache.fallbacks).toBe(0);
  });

  it('walks again when the clock, the signals or the items move', () => {
    const w = world();
    const cache = new TrendingCache();
    const cached = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: cache }));
    const walked = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: null }));
    const same = (nowMs: number): void =>
      expect(ranking(cached.run(task(user()), DegradationLevel.Full, nowMs))).toEqual(
        ranking(walked.run(task(user()), DegradationLevel.Full, nowMs)),
      );
    same(NOW);
    same(NOW);
    expect(cache.computed).toBe(1);
    same(NOW + MIN);
    expect(cache.computed).toBe(2);
    // A burst of views on an item without a slot yet (old, by a creator without affinity): its new
    // slot is seen at the same clock, and trending is what brings it in.
    let quiet = ITEMS - 1;
    while (w.store.slotOf(quiet, 0) >= 0 || quiet % CREATORS === 3 || quiet % CREATORS === 7) quiet--;
    const has = (o: number): boolean => cached.run(task(user()), DegradationLevel.Full, NOW + MIN).items.some((i) => i.id === `i${o}`);
    expect(has(quiet)).toBe(false);
    for (let e = 0; e < 40; e++) w.store.apply(quiet, 0, 1, NOW + MIN - e * 1000);
    same(NOW + MIN);
    expect(cache.computed).toBe(3);
    expect(has(quiet)).toBe(true);
    // A deleted item leaves the kept list with the items version.
    w.writer.delete(quiet, ITEMS + 1);
    w.catalog.refresh();
    same(NOW + MIN);
    expect(cache.computed).toBe(4);
    expect(has(quiet)).toBe(false);
  });

  it('walks again after events on a slot already dirty, at a clock that does not move', () => {
    const w = world();
    const cache = new TrendingCache();
    const cached = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: cache }));
    const walked = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: null }));
    let quiet = ITEMS - 1;
    while (w.store.slotOf(quiet, 0) >= 0 || quiet % CREATORS === 3 || quiet % CREATORS === 7) quiet--;
    // One view: the item gets its slot, on the dirty list, and is not trending yet.
    w.store.apply(quiet, 0, 1, NOW - HOUR);
    const run = () => cached.run(task(user()), DegradationLevel.Full, NOW);
    expect(run().items.some((i) => i.id === `i${quiet}`)).toBe(false);
    const computed = cache.computed;
    // A burst on that same slot, the clock where it was: no new slot, no new dirty entry.
    const dirty = w.store.order.dirtyCount;
    for (let e = 0; e < 40; e++) w.store.apply(quiet, 0, 1, NOW - e * 1000);
    expect(w.store.order.dirtyCount).toBe(dirty);
    const after = run();
    expect(cache.computed).toBe(computed + 1);
    expect(ranking(after)).toEqual(ranking(walked.run(task(user()), DegradationLevel.Full, NOW)));
    expect(after.items.some((i) => i.id === `i${quiet}`)).toBe(true);
  });

  it('at a level that lets shared work be stale, keeps the list through signals and the clock up to that age, never through item changes', () => {
    const w = world();
    const cache = new TrendingCache();
    const exec = new RetrieveExecutor(w.ctx, { trendingCache: cache });
    const STALE = 1000;
    const noDiversity = levelPlan(DegradationLevel.NoDiversity);
    const run = (u: UserQueryState, nowMs: number, staleMs: number, plan = noDiversity) =>
      exec.run(task(u), plan, nowMs, undefined, staleMs);
    run(user(), NOW, STALE);
    expect(cache.computed).toBe(1);
    // Views on an item without a slot, and the clock on by less than the staleness: the list is kept.
    let quiet = ITEMS - 1;
    while (w.store.slotOf(quiet, 0) >= 0 || quiet % CREATORS === 3 || quiet % CREATORS === 7) quiet--;
    for (let e = 0; e < 40; e++) w.store.apply(quiet, 0, 1, NOW - e * 1000);
    const kept = run(user(), NOW + STALE, STALE);
    expect(cache.computed).toBe(1);
    expect(kept.items.some((i) => i.id === `i${quiet}`)).toBe(false);
    // Each query still applies its own predicate to the kept list: what a user hid never comes back.
    const hidden = Int32Array.from(kept.items.slice(0, 5).map((i) => Number(i.id.slice(1))));
    const hiding = run(user({ hidden, idHash: 5 }), NOW + STALE, STALE);
    expect(cache.computed).toBe(1);
    for (const o of hidden) expect(hiding.items.some((i) => i.id === `i${o}`)).toBe(false);
    // Past the staleness, at a level that allows none, or after an item write: walked again.
    expect(run(user(), NOW + STALE + 1, STALE).items.some((i) => i.id === `i${quiet}`)).toBe(true);
    expect(cache.computed).toBe(2);
    for (let e = 0; e < 5; e++) w.store.apply(quiet, 0, 1, NOW + STALE + 1);
    run(user(), NOW + STALE + 2, 0, levelPlan(DegradationLevel.Full));
    expect(cache.computed).toBe(3);
    // (Full's budget is another list: NoDiversity's own is walked once again, then kept.)
    run(user(), NOW + STALE + 3, STALE);
    run(user(), NOW + STALE + 4, STALE);
    expect(cache.computed).toBe(4);
    // An item write (the same count of items, so the same budget): the kept list is of another version.
    w.writer.upsert(
      { ordinal: 0, id: 'i0', text: null, metadata: { creator: 'c0', category: 'k0' }, createdAt: NOW, embedding: null },
      ITEMS + 1,
      true,
    );
    w.catalog.refresh();
    run(user(), NOW + STALE + 5, STALE);
    expect(cache.computed).toBe(5);
  });

  it('walks with the query\u2019s own predicate when it leaves too few of the kept list', () => {
    const w = world();
    const cache = new TrendingCache();
    const cached = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: cache }));
    const walked = atLevels(new RetrieveExecutor(w.ctx, { trendingCache: null }));
    cached.run(task(user()), DegradationLevel.Full, NOW);
    // One creator in forty: about 5 of the 200 kept items pass, fewer than the 50 trending wants.
    const narrow = task(user(), { creator: 'c11' });
    expect(ranking(cached.run(narrow, DegradationLevel.Full, NOW))).toEqual(ranking(walked.run(narrow, DegradationLevel.Full, NOW)));
    expect(cache.fallbacks).toBe(1);
    expect(cache.computed).toBe(1);
  });
});
