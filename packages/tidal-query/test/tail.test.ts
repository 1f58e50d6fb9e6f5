import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { readItemSignals } from '../src/item-signals.js';
import { openStorage } from 'tidal-wal/storage';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import { selectAndHydrate, type HydratedBase, type TailOptions } from '../src/tail.js';
import type { QuerySchema } from '../src/types.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2025, 0, 6, 12, 0, 0);
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: HOUR, windows: ['1h', '24h', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 2 * HOUR, windows: ['7d'], velocity: false },
];

const open: Database.Database[] = [];
afterEach(() => {
  for (const db of open.splice(0)) db.close();
});

/** A query context over items `i0, i1, …` (ordinal = index) with the given `cat` values. */
function context(cats: readonly (string | null)[]): QueryContext & { store: SignalStore } {
  const db = new Database(':memory:');
  open.push(db);
  openStorage(db, ':memory:');
  const insert = db.prepare('INSERT INTO items (ordinal, id, present, metadata, created_at, version) VALUES (?, ?, 1, ?, ?, ?)');
  cats.forEach((cat, o) => insert.run(o, `i${o}`, JSON.stringify(cat === null ? {} : { cat }), 1000 + o, o + 1));
  const schema: QuerySchema = { kinds: KINDS, metadata: { cat: 'string' }, embeddingDims: 0 };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds: KINDS, maxOrdinals: 64, maxSlots: 64 });
  return { schema, catalog, store, ann: null, db };
}

function options(over: Partial<TailOptions> & { warnings: string[] }): TailOptions {
  return { diversity: null, limit: 10, nowMs: T0, coarse: false, ...over };
}

const plain = (base: HydratedBase): HydratedBase => base;
/** Scores that differ from the rank, so a pick is seen to carry its own score. */
const scoresOf = (n: number): number[] => Array.from({ length: n }, (_, i) => 100 - i * 7);

describe('selectAndHydrate: diversity', () => {
  it('keeps at most maxPer results per field value, walking in rank order', () => {
    const ctx = context(['a', 'a', 'b', 'a', 'c', 'b', 'd']);
    const ranked = [0, 1, 2, 3, 4, 5, 6];
    const scores = scoresOf(7);
    const warnings: string[] = [];
    const out = selectAndHydrate(ctx, ranked, scores, options({ diversity: { maxPer: { cat: 1 } }, limit: 3, warnings }), plain);
    expect(out.map((h) => h.id)).toEqual(['i0', 'i2', 'i4']);
    expect(out.map((h) => h.rank)).toEqual([1, 2, 3]);
    expect(out.map((h) => h.score)).toEqual([scores[0], scores[2], scores[4]]);
    expect(warnings).toEqual([]);
  });

  it('honours a cap above one, and leaves items without the field uncapped', () => {
    const ctx = context(['a', 'a', 'a', null, null, 'b']);
    const warnings: string[] = [];
    const out = selectAndHydrate(
      ctx,
      [0, 1, 2, 3, 4, 5],
      scoresOf(6),
      options({ diversity: { maxPer: { cat: 2 } }, limit: 5, warnings }),
      plain,
    );
    expect(out.map((h) => h.id)).toEqual(['i0', 'i1', 'i3', 'i4', 'i5']);
    expect(warnings).toEqual([]);
  });

  it('relaxes the caps to fill the limit: the skipped candidates come after the diverse picks, in rank order, with a warning', () => {
    const ctx = context(['a', 'a', 'a', 'b', 'a']);
    const warnings: string[] = [];
    const out = selectAndHydrate(
      ctx,
      [0, 1, 2, 3, 4],
      scoresOf(5),
      options({ diversity: { maxPer: { cat: 1 } }, limit: 4, warnings }),
      plain,
    );
    expect(out.map((h) => h.id)).toEqual(['i0', 'i3', 'i1', 'i2']);
    expect(out.map((h) => h.rank)).toEqual([1, 2, 3, 4]);
    expect(warnings).toEqual(['diversity relaxed: not enough candidates to honour maxPer {"cat":1} within limit 4']);
  });

  it('does not warn when there are simply fewer candidates than the limit', () => {
    const ctx = context(['a', 'b']);
    const warnings: string[] = [];
    const out = selectAndHydrate(ctx, [0, 1], scoresOf(2), options({ diversity: { maxPer: { cat: 1 } }, limit: 5, warnings }), plain);
    expect(out.map((h) => h.id)).toEqual(['i0', 'i1']);
    expect(warnings).toEqual([]);
  });
});

describe('selectAndHydrate: limit', () => {
  it('without diversity takes the first `limit` of the ranking, caps or not', () => {
    const ctx = context(['a', 'a', 'a', 'a']);
    const warnings: string[] = [];
    const out = selectAndHydrate(ctx, [3, 1, 2, 0], [9, 8, 7, 6], options({ limit: 3, warnings }), plain);
    expect(out.map((h) => [h.id, h.score, h.rank])).toEqual([
      ['i3', 9, 1],
      ['i1', 8, 2],
      ['i2', 7, 3],
    ]);
    expect(warnings).toEqual([]);
  });

  it('returns the whole ranking when it is shorter than the limit, and nothing for an empty one', () => {
    const ctx = context(['a', 'b']);
    expect(selectAndHydrate(ctx, [1, 0], [2, 1], options({ limit: 10, warnings: [] }), plain).map((h) => h.id)).toEqual(['i1', 'i0']);
    expect(selectAndHydrate(ctx, [], [], options({ diversity: { maxPer: { cat: 1 } }, warnings: [] }), plain)).toEqual([]);
  });
});

describe('selectAndHydrate: hydration', () => {
  it("reports each pick's signals per kind with state, and what the executor adds for its ordinal", () => {
    const ctx = context(['a', 'b', 'c']);
    ctx.store.apply(1, 0, 2, T0 - 10 * 60_000);
    ctx.store.apply(1, 1, 1, T0 - 2 * HOUR);
    ctx.store.apply(2, 1, 3, T0 - 30 * 60_000);
    const seen: number[] = [];
    const out = selectAndHydrate(ctx, [2, 1, 0], [3, 2, 1], options({ warnings: [] }), (base, o) => {
      seen.push(o);
      return { ...base, createdAt: ctx.catalog.createdAt[o]! };
    });
    expect(seen).toEqual([2, 1, 0]);
    expect(out.map((h) => h.createdAt)).toEqual([1002, 1001, 1000]);
    const read = (o: number, k: number, coarse = false) =>
      ctx.store.read(ctx.store.slotOf(o, k), T0, coarse, KINDS[k]!.windows, KINDS[k]!.velocity);
    expect(out[0]!.signals).toEqual({ like: read(2, 1) });
    expect(out[1]!.signals).toEqual({ view: read(1, 0), like: read(1, 1) });
    expect(out[2]!.signals).toEqual({});
    expect(out[1]!.signals.view!.score).toBeCloseTo(2 * 2 ** (-10 / 60), 12);
    expect(out[1]!.signals.view!.velocity).toBeDefined();
    expect(out[1]!.signals.like!.velocity).toBeUndefined();
  });

  it('reads coarse aggregates when asked (all-time counts for the windows)', () => {
    const ctx = context(['a']);
    ctx.store.apply(0, 0, 1, T0 - 3 * HOUR);
    ctx.store.apply(0, 0, 1, T0 - 60_000);
    const exact = selectAndHydrate(ctx, [0], [1], options({ warnings: [] }), plain)[0]!;
    const coarse = selectAndHydrate(ctx, [0], [1], options({ coarse: true, warnings: [] }), plain)[0]!;
    expect(exact.signals.view!.windows['1h']).toBe(1);
    expect(coarse.signals.view!.windows['1h']).toBe(2);
  });
});

describe('readItemSignals', () => {
  it('is the per-kind read the results report, and empty for an item without state', () => {
    const ctx = context(['a', 'b']);
    ctx.store.apply(0, 1, 4, T0 - HOUR);
    expect(readItemSignals(ctx.store, ctx.schema, 0, T0, false)).toEqual({
      like: ctx.store.read(ctx.store.slotOf(0, 1), T0, false, ['7d'], false),
    });
    expect(readItemSignals(ctx.store, ctx.schema, 0, T0, false).like!.score).toBeCloseTo(4 * Math.SQRT1_2, 12);
    expect(readItemSignals(ctx.store, ctx.schema, 1, T0, false)).toEqual({});
  });
});
