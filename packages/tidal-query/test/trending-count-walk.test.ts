import Database from 'better-sqlite3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { openStorage } from 'tidal-wal/storage';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { levelPlan, tunedPlan } from '../src/plan.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SLOT_BYTES, SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { Diversity, RetrieveTask, VelocityWindow } from '../src/types.js';
import { mulberry32 } from './helpers/random.js';

/*
 * Trending over 1h walks the count order (signals/order.ts, candidates/trending.ts). At Full its
 * answer must be the scan's on any data, after any writes, and after an import, and it must visit
 * few slots where a few items lead the hour. Below Full the level's budget cuts the same walk
 * short: no level may read more slots than the one above it, over any window.
 */

const MIN = 60_000;
const HOUR = 60 * MIN;
const NOW = Date.UTC(2025, 0, 6, 12, 30, 0);
const FULL = levelPlan(DegradationLevel.Full);
const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;
const SEED = Number(process.env['TIDAL_FUZZ_SEED'] ?? 20251202);

const KINDS: Record<string, SignalKindSpec[]> = {
  one: [{ name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true }],
  two: [
    { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
    { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', 'all'], velocity: false },
  ],
  three: [
    { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
    { name: 'like', halfLifeMs: 24 * HOUR, windows: ['1h', 'all'], velocity: true },
    { name: 'share', halfLifeMs: 3 * HOUR, windows: ['7d'], velocity: false },
  ],
};

interface World {
  ctx: QueryContext;
  store: SignalStore;
  ordered: RetrieveExecutor;
  scan: RetrieveExecutor;
}

function world(items: number, kinds: SignalKindSpec[], store?: SignalStore): World {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const writer = new ItemsWriter(db);
  db.transaction(() => {
    for (let o = 0; o < items; o++) {
      const item = { ordinal: o, id: `i${o}`, text: null, metadata: { category: `c${o % 5}` }, createdAt: NOW - o * MIN, embedding: null };
      writer.upsert(item, o + 1, false);
    }
  })();
  const schema = { kinds, metadata: { category: 'string' as const }, embeddingDims: 0 };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const s = store ?? SignalStore.create({ kinds, maxOrdinals: items, maxSlots: items * kinds.length });
  const ctx: QueryContext = { schema, catalog, store: s, ann: null, db };
  return {
    ctx,
    store: s,
    ordered: new RetrieveExecutor(ctx, { trendingCache: null }),
    scan: new RetrieveExecutor(ctx, { exhaustive: true }),
  };
}

function task(over: Partial<RetrieveTask> = {}): RetrieveTask {
  return { profile: 'trending', context: null, filter: null, diversity: null, limit: 10, window: '1h', exclude: null, ...over };
}

function ranked(exec: RetrieveExecutor, t: RetrieveTask, nowMs: number): [string, number][] {
  return exec.run(t, FULL, nowMs).items.map((i) => [i.id, i.score]);
}

/** Slots of a velocity kind with an event in the 1h window at `nowMs`, by brute force. */
function activeInHour(w: World, nowMs: number): number {
  const start = (Math.floor(nowMs / MIN) - 59) * MIN;
  let n = 0;
  for (let s = 0; s < w.store.slotsUsed(); s++) {
    if (w.ctx.schema.kinds[w.store.slotKind(s)]!.velocity && w.store.hasEvents(s) && w.store.newestAt(s) >= start) n++;
  }
  return n;
}

/** A catalogue where a few items lead the hour: Zipf-like counts, most items quiet for hours. */
function zipfWorld(items: number, kinds: SignalKindSpec[], seed: number): World {
  const w = world(items, kinds);
  const rand = mulberry32(seed);
  for (let o = 0; o < items; o++) {
    const events = 2 + Math.floor(5_000 / (o + 1));
    for (let e = 0; e < events; e++) {
      const k = Math.floor(rand() * kinds.length);
      // Half in the last three hours, half over the week.
      const age = rand() < 0.5 ? rand() * 3 * HOUR : rand() * 168 * HOUR;
      w.store.apply(o, k, 1, NOW - Math.floor(age));
    }
  }
  return w;
}

const event = fc.record({
  item: fc.nat({ max: 10_000 }),
  kind: fc.nat({ max: 2 }),
  // Minutes before NOW; some after it (a clock behind its events: the newest event is then
  // hours ahead of the window, and the imported bound leans on its older events' share).
  ageMin: fc.oneof(fc.integer({ min: -5, max: 90 }), fc.integer({ min: -180, max: 0 }), fc.integer({ min: 0, max: 60 * 24 * 8 })),
  weight: fc.constantFrom(1, 1, 1, 2, 0.25, 0, -1),
});

describe('trending at Full over 1h: the walk down the count order', () => {
  it('returns the scan of every slot on random data, after more writes and at other clocks', () => {
    fc.assert(
      fc.property(
        fc.record({
          items: fc.integer({ min: 20, max: 300 }),
          kinds: fc.constantFrom('one', 'two', 'three'),
          events: fc.array(event, { maxLength: 1_500 }),
          later: fc.array(event, { maxLength: 400 }),
          limit: fc.integer({ min: 1, max: 40 }),
          category: fc.option(fc.nat({ max: 4 })),
          clockMin: fc.integer({ min: -30, max: 120 }),
        }),
        (p) => {
          const kinds = KINDS[p.kinds]!;
          const w = world(p.items, kinds);
          const apply = (events: typeof p.events) => {
            for (const e of events) w.store.apply(e.item % p.items, e.kind % kinds.length, e.weight, NOW - e.ageMin * MIN);
          };
          const check = () => {
            const t = task({ limit: p.limit, filter: p.category === null ? null : { category: `c${p.category}` } });
            for (const nowMs of [NOW, NOW + p.clockMin * MIN]) expect(ranked(w.ordered, t, nowMs)).toEqual(ranked(w.scan, t, nowMs));
          };
          apply(p.events);
          check();
          // Written since: on the dirty list, or merged by a rebuild.
          apply(p.later);
          check();
          // Imported: every count key bounded from the rings.
          const bytes = new Uint8Array(w.store.arena.slots, 0, w.store.slotsUsed() * SLOT_BYTES).slice();
          const copy = SignalStore.create({ kinds, maxOrdinals: p.items, maxSlots: p.items * kinds.length });
          copy.importState(bytes);
          const imported = world(p.items, kinds, copy);
          const t = task({ limit: p.limit });
          for (const nowMs of [NOW, NOW + p.clockMin * MIN]) expect(ranked(imported.ordered, t, nowMs)).toEqual(ranked(w.scan, t, nowMs));
        },
      ),
      { numRuns: 150, seed: SEED },
    );
  });

  it('visits a few of the slots active in the hour where a few items lead it', () => {
    for (const kinds of Object.values(KINDS)) {
      const w = zipfWorld(2_000, kinds, 3);
      const active = activeInHour(w, NOW);
      expect(active).toBeGreaterThan(500);
      for (const limit of [10, 50]) {
        const t = task({ limit });
        const r = w.ordered.run(t, FULL, NOW);
        expect(r.items.map((i) => i.id)).toEqual(w.scan.run(t, FULL, NOW).items.map((i) => i.id));
        // The dirty list is read whole; the walk itself stops after a fraction of the hour's slots.
        // With two velocity kinds an unseen item is bounded by the sum of two lists' bounds, so a
        // deep page (50 of a few hundred movers) walks much further: only the first page is held.
        if (limit === 10 || kinds.filter((k) => k.velocity).length === 1) {
          expect(r.explain.slotsVisited! - w.store.order.dirtyCount).toBeLessThan(active / 4);
        }
      }
    }
  });

  it('sees an item that moved up after the orders were built, on the dirty list and after a rebuild', () => {
    const kinds = KINDS['one']!;
    const w = zipfWorld(2_000, kinds, 5);
    const quiet = 1_500;
    const top = () => w.ordered.run(task({ limit: 5 }), FULL, NOW).items.map((i) => i.id);
    expect(top()).not.toContain(`i${quiet}`);
    // 1 000 events in the last minute: on the dirty list (not yet in the orders).
    for (let e = 0; e < 1_000; e++) w.store.apply(quiet, 0, 1, NOW - 30_000);
    expect(top()[0]).toBe(`i${quiet}`);
    // Old events on many other slots: rebuilds merge the item's new count into the count order.
    const generation = w.store.order.generation;
    for (let o = 0; o < 1_000; o++) w.store.apply(o, 0, 1, NOW - 100 * HOUR);
    expect(w.store.order.generation).toBeGreaterThan(generation);
    expect(w.store.order.dirtyCount).toBeLessThan(1_000);
    expect(top()[0]).toBe(`i${quiet}`);
    expect(ranked(w.ordered, task({ limit: 30 }), NOW)).toEqual(ranked(w.scan, task({ limit: 30 }), NOW));
  });

  it('after an import, bounds each item by the events its minute ring holds', () => {
    const kinds = KINDS['one']!;
    const w = world(40, kinds);
    // Item 0: 100 events 50 minutes ago (its newest); items 1–10: 60 events each, 10 minutes ago.
    // Imported, item 0's bound is its 100 events, amplified by 9 minutes of the window only; the
    // others' 60 by 49 minutes: the walk meets all ten of them before item 0, and must not stop.
    for (let e = 0; e < 100; e++) w.store.apply(0, 0, 1, NOW - 50 * MIN);
    for (let o = 1; o <= 10; o++) for (let e = 0; e < 60; e++) w.store.apply(o, 0, 1, NOW - 10 * MIN);
    const bytes = new Uint8Array(w.store.arena.slots, 0, w.store.slotsUsed() * SLOT_BYTES).slice();
    const copy = SignalStore.create({ kinds, maxOrdinals: 40, maxSlots: 40 });
    copy.importState(bytes);
    const imported = world(40, kinds, copy);
    const t = task({ limit: 5 });
    expect(ranked(imported.ordered, t, NOW)[0]![0]).toBe('i0');
    expect(ranked(imported.ordered, t, NOW)).toEqual(ranked(w.scan, t, NOW));
  });

  it('after an import, keeps the scan answer and visits few slots', () => {
    for (const kinds of Object.values(KINDS)) {
      const w = zipfWorld(2_000, kinds, 9);
      const bytes = new Uint8Array(w.store.arena.slots, 0, w.store.slotsUsed() * SLOT_BYTES).slice();
      const copy = SignalStore.create({ kinds, maxOrdinals: 2_000, maxSlots: 2_000 * kinds.length });
      copy.importState(bytes);
      const imported = world(2_000, kinds, copy);
      for (const nowMs of [NOW, NOW + 20 * MIN, NOW + 3 * HOUR]) {
        for (const limit of [10, 50]) {
          const t = task({ limit });
          expect(ranked(imported.ordered, t, nowMs)).toEqual(ranked(w.scan, t, nowMs));
        }
      }
      const r = imported.ordered.run(task(), FULL, NOW);
      expect(r.explain.slotsVisited!).toBeLessThan(activeInHour(imported, NOW) / 2);
      // Later events add to the imported bound.
      for (let e = 0; e < 2_000; e++) copy.apply(1_900, 0, 1, NOW - 10_000);
      expect(imported.ordered.run(task({ limit: 1 }), FULL, NOW).items[0]!.id).toBe('i1900');
    }
  });
});

describe('trending below Full: a prefix of the same walk', () => {
  it('reads no more slots at each level than at the one above, over 1h, 24h and 7d', () => {
    const diversity: Diversity = { maxPer: { category: 2 } };
    for (const [name, kinds] of Object.entries(KINDS)) {
      const w = zipfWorld(20_000, kinds, 13);
      const rand = mulberry32(17);
      const check = (when: string, nowMs: number) => {
        for (const window of ['1h', '24h', '7d'] as VelocityWindow[]) {
          for (const t of [task({ window }), task({ window, limit: 20, diversity }), task({ window, filter: { category: 'c2' } })]) {
            const visited = LEVELS.map((level) => w.ordered.run(t, levelPlan(level), nowMs).explain.slotsVisited!);
            const label = `${name}, ${when}, ${window}, limit ${t.limit}${t.diversity ? ', diversity' : ''}${t.filter ? ', filter' : ''}: ${visited.join(' ≥ ')}`;
            for (let l = 1; l < LEVELS.length; l++) expect(visited[l]!, label).toBeLessThanOrEqual(visited[l - 1]!);
          }
        }
      };
      check('built', NOW);
      // Written since the orders were built: on the dirty list, read whole at every level.
      for (let e = 0; e < 150; e++) w.store.apply(Math.floor(rand() ** 3 * 20_000), 0, 1, NOW - Math.floor(rand() * 30 * MIN));
      expect(w.store.order.dirtyCount).toBeGreaterThan(0);
      check('dirty', NOW);
      check('20 min later', NOW + 20 * MIN);
    }
  });
});

describe('trending below Full over 1h: the budget cuts the walk', () => {
  it('scores exactly what it ranks, reads no more than Full, and is the scan where the budget does not stop the walk', () => {
    const REDUCED = levelPlan(DegradationLevel.ReducedCandidates);
    fc.assert(
      fc.property(
        fc.record({
          items: fc.integer({ min: 20, max: 300 }),
          kinds: fc.constantFrom('one', 'two', 'three'),
          events: fc.array(event, { maxLength: 1_500 }),
          later: fc.array(event, { maxLength: 200 }),
          limit: fc.integer({ min: 1, max: 40 }),
          category: fc.option(fc.nat({ max: 4 })),
          budget: fc.oneof(fc.integer({ min: 1, max: 400 }), fc.constant(1e9)),
        }),
        (p) => {
          const kinds = KINDS[p.kinds]!;
          const w = world(p.items, kinds);
          for (const e of [...p.events, ...p.later]) w.store.apply(e.item % p.items, e.kind % kinds.length, e.weight, NOW - e.ageMin * MIN);
          const plan = tunedPlan(REDUCED, { trending: { slots: p.budget } });
          const t = task({ limit: p.limit, filter: p.category === null ? null : { category: `c${p.category}` } });
          const full = w.ordered.run(t, FULL, NOW);
          const cut = w.ordered.run(t, plan, NOW);
          expect(cut.explain.slotsVisited!).toBeLessThanOrEqual(full.explain.slotsVisited!);
          // Every item ranked with its exact velocity (or 0 where the walk did not reach it), best first.
          const exact = new Map(w.scan.run({ ...t, limit: p.items }, FULL, NOW).items.map((i) => [i.id, i.score]));
          for (const i of cut.items) if (i.score > 0) expect(i.score).toBe(exact.get(i.id));
          for (let j = 1; j < cut.items.length; j++) expect(cut.items[j]!.score).toBeLessThanOrEqual(cut.items[j - 1]!.score);
          if (p.budget >= w.store.slotsUsed()) expect(cut.items).toEqual(full.items);
          expect(full.items).toEqual(w.scan.run(t, FULL, NOW).items);
        },
      ),
      { numRuns: 150, seed: SEED },
    );
  });
});
