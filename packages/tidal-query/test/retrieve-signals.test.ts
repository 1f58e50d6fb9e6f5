import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { levelPlan } from '../src/plan.js';
import { atLevels, type LevelRunner } from './level-runner.js';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SLOT_BYTES, SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { Diversity, Filter, Profile, RetrieveTask, VelocityWindow } from '../src/types.js';
import { windowStartMs } from '../src/windows.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2025, 0, 6, 12, 30, 0);
const ITEMS = 2_400;
const CATEGORIES = 12;
const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;

function spec(name: string, halfLifeMs: number, velocity: boolean): SignalKindSpec {
  return { name, halfLifeMs, windows: ['1h', '24h', '7d', 'all'], velocity };
}

const SCHEMAS: Record<string, SignalKindSpec[]> = {
  'one kind': [spec('view', 6 * HOUR, true)],
  'two kinds, one with velocity': [spec('view', 6 * HOUR, true), spec('like', DAY, false)],
  'three kinds with velocity': [spec('view', 6 * HOUR, true), spec('like', DAY, true), spec('share', 3 * DAY, true)],
};

interface World {
  ctx: QueryContext;
  store: SignalStore;
  ordered: LevelRunner<RetrieveTask, ReturnType<RetrieveExecutor['run']>>;
  scan: LevelRunner<RetrieveTask, ReturnType<RetrieveExecutor['run']>>;
  /** Applies `n` more seeded events (hot items mostly, recent), leaving them on the dirty list. */
  more(n: number, seed: number, weight?: () => number): void;
}

/**
 * 2 400 items in 12 categories. About 60% get events of kind 0 (a Zipf-like count, times over the
 * last 8 days, a few items "rising" within the last hours), a third of those get the other kinds:
 * about 1 400 + 900 slots. `weights` draws event weights (1 unless given).
 */
function world(kinds: SignalKindSpec[], seed = 7, weights?: (rand: () => number) => number): World {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const items = new ItemsWriter(db);
  db.transaction(() => {
    for (let o = 0; o < ITEMS; o++) {
      items.upsert(
        { ordinal: o, id: `i${o}`, text: null, metadata: { category: `c${o % CATEGORIES}` }, createdAt: NOW - o * MIN, embedding: null },
        o + 1,
        false,
      );
    }
  })();
  const schema = { kinds, metadata: { category: 'string' as const }, embeddingDims: 0 };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds, maxOrdinals: ITEMS, maxSlots: ITEMS * kinds.length });
  const rand = mulberry32(seed);
  const weight = () => (weights ? weights(rand) : 1);
  for (let o = 0; o < ITEMS; o++) {
    if (rand() > 0.6) continue;
    const rising = rand() < 0.05;
    const count = 1 + Math.floor(40 / (1 + rand() * 60));
    for (let k = 0; k < kinds.length; k++) {
      if (k > 0 && rand() > 0.35) continue;
      for (let e = 0; e < count; e++) {
        const age = rising && rand() < 0.8 ? rand() * 3 * HOUR : rand() * 8 * DAY;
        store.apply(o, k, weight(), NOW - Math.floor(age));
      }
    }
  }
  const ctx: QueryContext = { schema, catalog, store, ann: null, db };
  return {
    ctx,
    store,
    // Every active slot scored at every level, so each level's ranking is exact and the scan is its
    // oracle; the levels' own trending budgets are tested on their own. Full has no budget (the
    // count walk over 1h), the levels below one larger than any window (the recency prefix).
    ordered: atLevels(new RetrieveExecutor(ctx), (l) => ({ trending: { slots: l === DegradationLevel.Full ? Infinity : 1e9 } })),
    scan: atLevels(new RetrieveExecutor(ctx, { exhaustive: true })),
    more(n, s, w) {
      const r = mulberry32(s);
      for (let i = 0; i < n; i++) {
        const o = Math.floor(Math.pow(r(), 2) * ITEMS);
        const k = Math.floor(r() * kinds.length);
        store.apply(o, k, w ? w() : 1, NOW - Math.floor(r() * 2 * HOUR));
      }
    },
  };
}

function task(profile: Profile, window: VelocityWindow, over: Partial<RetrieveTask> = {}): RetrieveTask {
  return { profile, context: null, filter: null, diversity: null, limit: 10, window, exclude: null, ...over };
}

const FILTERS: (Filter | null)[] = [null, { category: 'c3' }];
const DIVERSITIES: (Diversity | null)[] = [null, { maxPer: { category: 2 } }];
const PROFILES: [Profile, VelocityWindow][] = [
  ['popular', '24h'],
  ['trending', '1h'],
  ['trending', '24h'],
  ['trending', '7d'],
];

/**
 * The scan's answer, exactly; except trending over 1h at CoarseAggregates and below, which ranks by
 * the 24h velocity at a cost no higher than ReducedCandidates': it takes the 1h walk down the count
 * order (the budget here never stops it) and its fill, and scores everything they find by 24h
 * velocity. So: no more slots visited than at ReducedCandidates, every item scored with its exact
 * 24h velocity, best first, and none of the exact 1h top (which the walk always finds) left out
 * for an item of a lower 24h velocity.
 */
function expectSameAsScan(w: World, t: RetrieveTask, level: DegradationLevel, nowMs = NOW): void {
  const a = w.ordered.run(t, level, nowMs);
  const b = w.scan.run(t, level, nowMs);
  if (t.profile === 'trending' && t.window === '1h' && level >= DegradationLevel.CoarseAggregates) {
    const reduced = w.ordered.run(t, DegradationLevel.ReducedCandidates, nowMs);
    expect(a.explain.slotsVisited!).toBeLessThanOrEqual(reduced.explain.slotsVisited!);
    const rows = coarseRows(w, nowMs);
    const ord = (id: string) => Number(id.slice(1));
    for (const i of a.items) expect(i.score, i.id).toBe(rows.get(ord(i.id))!.v24);
    if (t.diversity === null || level === DegradationLevel.NoDiversity) {
      const scores = a.items.map((i) => i.score);
      for (let j = 1; j < scores.length; j++) expect(scores[j]!).toBeLessThanOrEqual(scores[j - 1]!);
      const last = scores[scores.length - 1] ?? Infinity;
      const given = new Set(a.items.map((i) => i.id));
      const hourTop = w.scan.run({ ...t, diversity: null }, DegradationLevel.Full, nowMs).items.filter((i) => i.score > 0);
      for (const i of hourTop) if (!given.has(i.id)) expect(rows.get(ord(i.id))!.v24, i.id).toBeLessThanOrEqual(last);
      expect(a.items.length).toBe(b.items.length);
    }
    return;
  }
  expect(a.items.map((i) => [i.id, i.score])).toEqual(b.items.map((i) => [i.id, i.score]));
  expect(a.warnings).toEqual(b.warnings);
}

/** By brute force, per item with a velocity-kind slot: its 24h velocity, its secondary score, and whether it has an event in the last hour. */
function coarseRows(w: World, nowMs: number): Map<number, { v24: number; sec: number; recent: boolean }> {
  const { store, ctx } = w;
  const kinds = ctx.schema.kinds;
  const velocityKinds = kinds.flatMap((k, i) => (k.velocity ? [i] : []));
  const start = windowStartMs('1h', nowMs);
  const rows = new Map<number, { v24: number; sec: number; recent: boolean }>();
  for (let o = 0; o < ITEMS; o++) {
    const slots = velocityKinds.map((k) => store.slotOf(o, k)).filter((s) => s >= 0);
    if (slots.length === 0) continue;
    const recent = slots.some((s) => store.newestAt(s) >= start);
    const v24 = slots.reduce((sum, s) => sum + store.velocity(s, '24h', nowMs), 0);
    let sec = 0;
    if (velocityKinds.length === 1) sec = store.decayedScore(slots[0]!, nowMs);
    else for (let k = 0; k < kinds.length; k++) if (store.slotOf(o, k) >= 0) sec += store.decayedScore(store.slotOf(o, k), nowMs);
    rows.set(o, { v24, sec, recent });
  }
  return rows;
}

/** Slots of a velocity kind whose newest event counts in `window` at `nowMs`, by brute force. */
function activeSlots(store: SignalStore, kinds: readonly SignalKindSpec[], window: VelocityWindow, nowMs: number): number {
  const start = windowStartMs(window, nowMs);
  let n = 0;
  for (let s = 0; s < store.slotsUsed(); s++) {
    if (kinds[store.slotKind(s)]!.velocity && store.hasEvents(s) && store.newestAt(s) >= start) n++;
  }
  return n;
}

describe('retrieve from the signal orders', () => {
  for (const [name, kinds] of Object.entries(SCHEMAS)) {
    it(`returns what the scan of every slot returns (${name})`, () => {
      const w = world(kinds);
      expect(w.store.slotsUsed()).toBeGreaterThan(1_000);
      const check = () => {
        for (const [profile, window] of PROFILES) {
          for (const filter of FILTERS) {
            for (const diversity of DIVERSITIES) {
              for (const level of LEVELS) expectSameAsScan(w, task(profile, window, { filter, diversity }), level);
            }
          }
        }
      };
      check();
      // Changed slots since the last rebuild: on the dirty list, with stale places in the orders.
      w.more(40, 11);
      expect(w.store.order.dirtyCount).toBeGreaterThan(0);
      check();
      // Many more: several rebuilds.
      w.more(3_000, 12);
      check();
      // Later clocks, where most of the 1h window is empty and the fill decides most places.
      for (const later of [NOW + 50 * MIN, NOW + 2 * DAY]) {
        for (const [profile, window] of PROFILES) expectSameAsScan(w, task(profile, window, { limit: 40 }), DegradationLevel.Full, later);
      }
      // A clock before some events: the bound exp(key − λ·now) overestimates them.
      expectSameAsScan(w, task('popular', '24h'), DegradationLevel.Full, NOW - 30 * MIN);
      const excluded = Int32Array.from({ length: 300 }, (_, i) => i);
      expectSameAsScan(w, task('popular', '24h', { exclude: excluded }), DegradationLevel.Full);
      expectSameAsScan(w, task('trending', '1h', { exclude: excluded }), DegradationLevel.Full);
    });
  }

  it('ranks like the scan with negative weights (scores at or below zero) and with ties', () => {
    const signed = world(SCHEMAS['two kinds, one with velocity']!, 3, (r) => (r() < 0.3 ? -2 : 1));
    signed.more(500, 4, () => -1);
    for (const [profile, window] of PROFILES) {
      for (const limit of [10, 2_000]) expectSameAsScan(signed, task(profile, window, { limit }), DegradationLevel.Full);
    }
    // Every event at one time with weight 1: whole runs of equal scores, broken by ordinal.
    const kinds = SCHEMAS['one kind']!;
    const tied = world(kinds, 5);
    for (let o = 0; o < ITEMS; o += 3) tied.store.apply(o, 0, 1, NOW - HOUR);
    for (const limit of [10, 500]) {
      expectSameAsScan(tied, task('popular', '24h', { limit }), DegradationLevel.Full);
      expectSameAsScan(tied, task('trending', '1h', { limit }), DegradationLevel.Full);
    }
  });

  it('visits a few slots for popular, not all of them', () => {
    const w = world(SCHEMAS['two kinds, one with velocity']!);
    const used = w.store.slotsUsed();
    const r = w.ordered.run(task('popular', '24h'), DegradationLevel.Full, NOW);
    const scan = w.scan.run(task('popular', '24h'), DegradationLevel.Full, NOW);
    expect(scan.explain.slotsVisited).toBeGreaterThanOrEqual(used);
    expect(r.explain.slotsVisited).toBeLessThan(used / 8);
    expect(r.explain.slotsVisited).toBeGreaterThanOrEqual(10);
  });

  it('visits the slots active in the trending window, not all of them, and scans when most are', () => {
    const kinds = SCHEMAS['one kind']!;
    const w = world(kinds);
    const used = w.store.slotsUsed();
    const active = activeSlots(w.store, kinds, '1h', NOW);
    expect(active).toBeGreaterThan(10);
    const r = w.ordered.run(task('trending', '1h'), DegradationLevel.Full, NOW);
    // The active slots, plus at most the dirty list (its active members are counted twice).
    expect(r.explain.slotsVisited).toBeGreaterThanOrEqual(active);
    expect(r.explain.slotsVisited).toBeLessThanOrEqual(active + 2 * w.store.order.dirtyCount);
    expect(r.explain.slotsVisited).toBeLessThan(used / 4);
    // Most slots active in 7d: visiting them out of slot order would cost more than the scan.
    expect(3 * activeSlots(w.store, kinds, '7d', NOW)).toBeGreaterThan(used);
    expect(w.ordered.run(task('trending', '7d'), DegradationLevel.Full, NOW).explain.slotsVisited).toBe(used);
  });

  it('does less work level by level, and CoarseAggregates never more than ReducedCandidates', () => {
    const kinds = SCHEMAS['two kinds, one with velocity']!;
    const w = world(kinds);
    const diversity: Diversity = { maxPer: { category: 2 } };
    const visited = (t: RetrieveTask, level: DegradationLevel) => w.ordered.run(t, level, NOW).explain.slotsVisited!;

    const popular = LEVELS.map((level) => visited(task('popular', '24h', { diversity }), level));
    expect(popular[3]!).toBeLessThan(popular[0]! / 2);

    const trending7d = LEVELS.map((level) => visited(task('trending', '7d', { diversity }), level));
    expect(trending7d[1]!).toBeLessThanOrEqual(trending7d[0]!);
    expect(trending7d[2]!).toBeLessThan(trending7d[1]! / 2);
    expect(trending7d[3]!).toBeLessThanOrEqual(trending7d[2]!);
    expect(trending7d[3]!).toBeLessThan(trending7d[0]! / 2);

    for (const window of ['1h', '24h'] as const) {
      const t = task('trending', window, { diversity });
      expect(visited(t, DegradationLevel.CoarseAggregates)).toBeLessThanOrEqual(visited(t, DegradationLevel.ReducedCandidates));
    }
  });

  it("with the level plan's own budgets, trending visits fewer slots at each level than the one above", () => {
    const kinds = SCHEMAS['one kind']!;
    const w = world(kinds);
    const planned = atLevels(new RetrieveExecutor(w.ctx));
    expect(w.store.slotsUsed()).toBeGreaterThanOrEqual(1_000);
    for (const window of ['24h', '7d'] as const) {
      // Active slots well past the largest budget below Full, so every budget bites.
      expect(activeSlots(w.store, kinds, window, NOW)).toBeGreaterThan(levelPlan(DegradationLevel.ReducedCandidates).trending.slots);
      const t = task('trending', window, { limit: 10 });
      const visited = LEVELS.map((level) => planned.run(t, level, NOW).explain.slotsVisited!);
      for (let l = 1; l < LEVELS.length; l++)
        expect(visited[l]!, `${window} level ${l}: ${visited.join(', ')}`).toBeLessThan(visited[l - 1]!);
      expect(visited[3]!).toBeLessThan(visited[0]! / 4);
    }
  });

  it('below Full, trending scores only the most recently active slots of its budget, and keeps the leaders', () => {
    // The plan: every active slot at Full, a budget below it, never a bigger one a level down.
    const budgets = LEVELS.map((level) => levelPlan(level).trending.slots);
    expect(budgets[0]).toBe(Infinity);
    for (let l = 1; l < budgets.length; l++) {
      expect(Number.isFinite(budgets[l]!)).toBe(true);
      expect(budgets[l]!).toBeLessThanOrEqual(budgets[l - 1]!);
    }
    // The mechanism, on this small world with budgets to its scale (the walk stays cheaper than
    // the scan while the slots to visit are under a third of all slots).
    const kinds = SCHEMAS['one kind']!;
    const w = world(kinds);
    const scaled = [Infinity, 160, 160, 80];
    const budgeted = atLevels(new RetrieveExecutor(w.ctx), (l) => ({ trending: { slots: scaled[l]! } }));
    const active = activeSlots(w.store, kinds, '24h', NOW);
    expect(active).toBeGreaterThan(2 * scaled[1]!);
    const t = task('trending', '24h', { limit: 10 });
    const full = budgeted.run(t, DegradationLevel.Full, NOW);
    expect(full.explain.slotsVisited).toBeGreaterThanOrEqual(active);
    const dirty = w.store.order.dirtyCount;
    for (const level of [DegradationLevel.ReducedCandidates, DegradationLevel.NoDiversity]) {
      const r = budgeted.run(t, level, NOW);
      // The budget, plus the dirty list (written since the orders were rebuilt: the newest of all;
      // its active members are counted twice, read and then scored).
      expect(r.explain.slotsVisited!, `level ${level}`).toBeLessThanOrEqual(scaled[level]! + 2 * dirty);
      expect(r.explain.slotsVisited!).toBeLessThan(full.explain.slotsVisited! / 2);
    }
    // The leaders of a window have the most events in it, so the newest slots hold them.
    const reduced = budgeted.run(t, DegradationLevel.ReducedCandidates, NOW);
    const fullIds = new Set(full.items.map((i) => i.id));
    expect(reduced.items.filter((i) => fullIds.has(i.id)).length).toBeGreaterThanOrEqual(8);
  });

  it('starts over, or scans, when the orders are rebuilt twice while it reads them', () => {
    const w = world(SCHEMAS['one kind']!);
    const order = w.store.order;
    expect(order.begin()).toBe(true);
    const before = order.generation;
    w.more(5_000, 21);
    expect(order.generation).toBeGreaterThanOrEqual(before + 2);
    expect(order.stillValid()).toBe(false);
    order.begin();
    expect(order.stillValid()).toBe(true);
    expectSameAsScan(w, task('popular', '24h'), DegradationLevel.Full);
  });

  it('rebuilds the orders from the slots of an imported checkpoint', () => {
    const kinds = SCHEMAS['three kinds with velocity']!;
    const w = world(kinds);
    w.more(100, 31);
    const bytes = new Uint8Array(w.store.arena.slots, 0, w.store.slotsUsed() * SLOT_BYTES).slice();
    const copy = SignalStore.create({ kinds, maxOrdinals: ITEMS, maxSlots: ITEMS * kinds.length });
    copy.importState(bytes);
    expect(copy.order.dirtyCount).toBe(0);
    const ctx: QueryContext = { ...w.ctx, store: copy };
    const imported = atLevels(new RetrieveExecutor(ctx));
    for (const [profile, window] of PROFILES) {
      const t = task(profile, window);
      expect(imported.run(t, DegradationLevel.Full, NOW).items).toEqual(w.scan.run(t, DegradationLevel.Full, NOW).items);
    }
    // A worker's read-only view of the same arena reads the same orders.
    const reader = SignalStore.attach(structuredClone(copy.arena), kinds);
    const viaWorker = atLevels(new RetrieveExecutor({ ...ctx, store: reader }));
    expect(viaWorker.run(task('popular', '24h'), DegradationLevel.Full, NOW).items).toEqual(
      imported.run(task('popular', '24h'), DegradationLevel.Full, NOW).items,
    );
  });
});
