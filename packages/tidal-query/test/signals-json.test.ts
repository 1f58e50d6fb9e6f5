/**
 * NoDiversity's kept signals (`WindowsPlan.reuse`, item-signals.ts): an answer sent as JSON takes
 * each row's signals as this thread last serialized them, up to SIGNALS_REUSE_MS before the query,
 * unless a signal was written to the item since. Checked against the same executor with the reuse
 * turned off (the level's plan otherwise), byte for byte.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DegradationLevel, InternalError } from 'tidal-load';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import {
  SIGNALS_ELSEWHERE,
  SIGNALS_KEPT_ITEMS,
  SIGNALS_REUSE_MS,
  SignalsJson,
  readItemSignals,
  spliceSignals,
} from '../src/item-signals.js';
import { levelPlan, tunedPlan } from '../src/plan.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SearchExecutor } from '../src/search.js';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { RetrieveTask, SearchTask } from '../src/types.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2025, 0, 6, 12, 30, 0);
const ITEMS = 600;
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', 'all'], velocity: false },
];
const NO_DIV = levelPlan(DegradationLevel.NoDiversity);
/** NoDiversity reading every row's signals afresh: the reference. */
const FRESH = tunedPlan(NO_DIV, { windows: { reuse: false } });

function world(): { ctx: QueryContext; store: SignalStore } {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const items = new ItemsWriter(db);
  db.transaction(() => {
    for (let o = 0; o < ITEMS; o++) {
      // Ids a JSON string escapes, one of them holding the very text the splice looks for.
      const id = o === 3 ? 'say "signals":{} \\' : o === 5 ? `i${o}\u00e9\u{1f600}` : `i${o}`;
      items.upsert(
        { ordinal: o, id, text: `word${o % 7} common`, metadata: {}, createdAt: NOW - o * 60_000, embedding: null },
        o + 1,
        false,
      );
    }
  })();
  const schema = { kinds: KINDS, metadata: {}, embeddingDims: 0 };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds: KINDS, maxOrdinals: ITEMS, maxSlots: 2 * ITEMS });
  const rand = mulberry32(3);
  for (let o = 0; o < ITEMS; o++) {
    const n = 1 + Math.floor(30 * rand() ** 3);
    for (let e = 0; e < n; e++) store.apply(o, rand() < 0.8 ? 0 : 1, 1, NOW - Math.floor(rand() * 30 * HOUR));
  }
  return { ctx: { schema, catalog, store, ann: null, db }, store };
}

const trending = (asJson = true): RetrieveTask => ({
  profile: 'trending',
  context: null,
  filter: null,
  diversity: null,
  limit: 20,
  window: '24h',
  exclude: null,
  ...(asJson ? { asJson: true } : {}),
});

/** The answer's JSON as the query thread writes it (worker.ts). */
function answer(exec: RetrieveExecutor, task: RetrieveTask, plan = NO_DIV, nowMs = NOW): { json: string; reused?: number } {
  const r = exec.run(task, plan, nowMs);
  const rows = JSON.stringify(r.items);
  return { json: r.signalsJson ? spliceSignals(rows, r.signalsJson) : rows, reused: r.explain.signalsReused };
}

describe("NoDiversity's kept signals", () => {
  it('answers byte for byte as reading every row afresh, the first time and again at the same clock', () => {
    const { ctx } = world();
    const exec = new RetrieveExecutor(ctx);
    const want = answer(exec, trending(), FRESH).json;
    expect(JSON.parse(want)).toHaveLength(20);
    // The first answer marks its rows, the second keeps their copies, the third takes them.
    expect(answer(exec, trending())).toEqual({ json: want, reused: 0 });
    expect(answer(exec, trending())).toEqual({ json: want, reused: 0 });
    expect(answer(exec, trending())).toEqual({ json: want, reused: 20 });
    // The rows hold the signals, not the placeholder.
    for (const item of JSON.parse(want) as { signals: Record<string, unknown> }[])
      expect(Object.keys(item.signals).length).toBeGreaterThan(0);
  });

  it('counts a signal written to an item since, at once', () => {
    const { ctx, store } = world();
    const exec = new RetrieveExecutor(ctx);
    answer(exec, trending());
    const before = JSON.parse(answer(exec, trending()).json) as { id: string; signals: { like?: { count: number } } }[];
    // A like on the fifth row: a kind it may have had no slot for yet (a new slot), and a view on the first (its slot moves on).
    const fifth = ctx.catalog.ids.indexOf(before[4]!.id);
    const first = ctx.catalog.ids.indexOf(before[0]!.id);
    store.apply(fifth, 1, 1, NOW - 1000);
    store.apply(first, 0, 1, NOW - 1000);
    const again = answer(exec, trending());
    expect(again.json).toBe(answer(exec, trending(), FRESH).json);
    expect(again.reused).toBeLessThanOrEqual(18);
    const after = JSON.parse(again.json) as { id: string; signals: { like?: { count: number } } }[];
    const row = after.find((i) => i.id === before[4]!.id)!;
    expect(row.signals.like?.count).toBe((before[4]!.signals.like?.count ?? 0) + 1);
  });

  it(`reuses a row's signals up to ${SIGNALS_REUSE_MS} ms after they were read, and reads them again past it`, () => {
    const { ctx } = world();
    const exec = new RetrieveExecutor(ctx);
    answer(exec, trending(), NO_DIV, NOW);
    const t0 = answer(exec, trending(), NO_DIV, NOW).json;
    // Within the bound: the copy made at NOW, though the scores have decayed a little since.
    const later = answer(exec, trending(), NO_DIV, NOW + SIGNALS_REUSE_MS);
    expect(later).toEqual({ json: t0, reused: 20 });
    expect(answer(exec, trending(), FRESH, NOW + SIGNALS_REUSE_MS).json).not.toBe(t0);
    // Past it, and for a clock behind the copy: read afresh.
    const past = answer(exec, trending(), NO_DIV, NOW + SIGNALS_REUSE_MS + 1);
    expect(past).toEqual({ json: answer(exec, trending(), FRESH, NOW + SIGNALS_REUSE_MS + 1).json, reused: 0 });
    expect(answer(exec, trending(), NO_DIV, NOW).reused).toBe(0);
  });

  it('leaves every other answer as it was: objects, another level, a coarse copy not taken at Full', () => {
    const { ctx } = world();
    const exec = new RetrieveExecutor(ctx);
    answer(exec, trending());
    const objects = exec.run(trending(false), NO_DIV, NOW);
    expect(objects.signalsJson).toBeUndefined();
    expect(objects.explain.signalsReused).toBeUndefined();
    const o = ctx.catalog.ids.indexOf(objects.items[0]!.id);
    expect(objects.items[0]!.signals).toEqual(readItemSignals(ctx.store, ctx.schema, o, NOW, true));
    for (const level of [DegradationLevel.Full, DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates]) {
      const r = exec.run(trending(), levelPlan(level), NOW);
      expect(r.signalsJson, `level ${level}`).toBeUndefined();
      expect(r.explain.signalsReused).toBeUndefined();
    }
  });

  it("reads a search's hits and related's rows afresh, which seldom come back within the second", () => {
    const { ctx } = world();
    const retrieve = new RetrieveExecutor(ctx);
    const search = new SearchExecutor(ctx);
    const task: SearchTask = { text: 'common', vector: null, filter: null, diversity: null, limit: 20, boost: 1, asJson: true };
    for (let i = 0; i < 3; i++) {
      const r = search.run(task, NO_DIV, NOW);
      expect(r.hits).toHaveLength(20);
      // Every hit holds its own signals: none is the placeholder a kept copy leaves.
      for (const hit of r.hits) expect(hit.signals).not.toBe(SIGNALS_ELSEWHERE);
      expect(r.explain.signalsReused).toBeUndefined();
    }
    // Rows of a kept copy go to a retrieve profile but not to related: its rows are read as at every level.
    const related: RetrieveTask = {
      ...trending(),
      profile: 'related',
      related: { item: 0, n: 4, at: NOW, partners: Int32Array.from([1, 2, 3, 4]), scores: Float32Array.from([4, 3, 2, 1]), lambda: 1e-9 },
    };
    for (let i = 0; i < 3; i++) {
      const r = retrieve.run(related, NO_DIV, NOW);
      expect(r.items).toHaveLength(4);
      expect(r.signalsJson).toBeUndefined();
      expect(r.explain.signalsReused).toBeUndefined();
    }
  });

  it('keeps at most SIGNALS_KEPT_ITEMS items, and reads an ordinal given to another id afresh', () => {
    const { ctx, store } = world();
    const kept = new SignalsJson(store, KINDS);
    // A first sight is only marked (the caller reads the row); a second within the second keeps it.
    expect(kept.get(7, 'i7', NOW, true)).toBeNull();
    expect(kept.get(8, 'i8', NOW - 1000, true)).toBeNull();
    expect(kept.get(8, 'i8', NOW + 1000, true)).toBeNull();
    const json = kept.get(7, 'i7', NOW + 999, true);
    expect(json).toBe(JSON.stringify(readItemSignals(store, ctx.schema, 7, NOW + 999, true)));
    expect(kept.get(7, 'i7', NOW + 999, true)).toBe(json);
    expect(kept.reused).toBe(1);
    kept.get(7, 'someone else', NOW + 999, true);
    expect(kept.reused).toBe(1);
    // Exact windows are another copy than coarse ones.
    expect(kept.get(7, 'someone else', NOW + 999, false)).toBe(JSON.stringify(readItemSignals(store, ctx.schema, 7, NOW + 999, false)));
    expect(kept.reused).toBe(1);
    for (let round = 0; round < 3; round++) for (let o = 0; o < ITEMS; o++) kept.get(o, `i${o}`, NOW + round, true);
    expect(kept.size).toBeLessThanOrEqual(Math.min(ITEMS, SIGNALS_KEPT_ITEMS));
  });

  it('splices each row its own signals, and refuses rows that do not match the list', () => {
    const rows = [
      { id: 'a "signals":{"\u0000":0} b', signals: SIGNALS_ELSEWHERE, n: 1 },
      { id: '\\', signals: {}, n: 2 },
      { id: 'c', signals: SIGNALS_ELSEWHERE, n: 3 },
    ];
    const out = JSON.parse(spliceSignals(JSON.stringify(rows), ['{"v":1}', '{}'])) as unknown;
    expect(out).toEqual([
      { id: 'a "signals":{"\u0000":0} b', signals: { v: 1 }, n: 1 },
      { id: '\\', signals: {}, n: 2 },
      { id: 'c', signals: {}, n: 3 },
    ]);
    expect(() => spliceSignals(JSON.stringify(rows), ['{}'])).toThrow(InternalError);
  });
});
