/**
 * The item columns a main-thread executor reads (profile `related`) against the workers' catalog:
 * the same executor over either returns the same items, scores and `explain` for random co-
 * engagement lists, filters, diversity caps, user states, exclusions and cursors, before and
 * after further item writes (replacements, deletions, ids known only from signals).
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { Catalog } from '../src/catalog.js';
import { ItemColumns } from '../src/item-columns.js';
import { ItemsWriter } from '../src/items-table.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { Filter, QuerySchema, RetrieveTask, UserQueryState } from '../src/types.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from '../../../bench/src/random.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2025, 0, 6, 12, 0, 0);
const ITEMS = 300;
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 24 * HOUR, windows: ['all'], velocity: false },
];
const SCHEMA: QuerySchema = { kinds: KINDS, metadata: { category: 'string', creator: 'string', score: 'number' }, embeddingDims: 0, creatorField: 'creator' };
const CATEGORIES = ['a', 'b', 'c', 'd'];
const CREATORS = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5'];

function pick<T>(rand: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rand() * xs.length)]!;
}

function metadata(rand: () => number): Record<string, unknown> {
  const m: Record<string, unknown> = {};
  // Some fields missing or of the other type: both representations must agree on those too.
  if (rand() < 0.9) m.category = rand() < 0.95 ? pick(rand, CATEGORIES) : 7;
  if (rand() < 0.9) m.creator = pick(rand, CREATORS);
  if (rand() < 0.8) m.score = rand() < 0.9 ? Math.floor(rand() * 10) : String(Math.floor(rand() * 10));
  return m;
}

function randomFilter(rand: () => number): Filter | null {
  const f: Record<string, Filter[string]> = {};
  if (rand() < 0.3) f.category = rand() < 0.5 ? pick(rand, CATEGORIES) : { in: [pick(rand, CATEGORIES), pick(rand, [...CATEGORIES, 'zz'])] };
  if (rand() < 0.3) f.score = rand() < 0.3 ? Math.floor(rand() * 10) : rand() < 0.5 ? { gte: Math.floor(rand() * 10) } : { gt: 2, lt: 8 };
  if (rand() < 0.2) f.createdAt = { gte: NOW - Math.floor(rand() * ITEMS) * HOUR };
  if (rand() < 0.1) f.creator = { in: [pick(rand, CREATORS)] };
  return Object.keys(f).length === 0 ? null : f;
}

function randomUser(rand: () => number): UserQueryState | null {
  if (rand() < 0.4) return null;
  const ordinals = (n: number) => Int32Array.from({ length: n }, () => Math.floor(rand() * (ITEMS + 20)));
  return {
    hidden: ordinals(Math.floor(rand() * 20)),
    blocked: rand() < 0.5 ? [pick(rand, CREATORS)] : [],
    seen: rand() < 0.5 ? ordinals(Math.floor(rand() * 30)) : null,
    following: rand() < 0.2 ? [pick(rand, CREATORS), pick(rand, CREATORS)] : null,
    preference: null,
    affinityCreators: [],
    affinityScores: new Float64Array(0),
    idHash: 1,
  };
}

function relatedTask(rand: () => number): RetrieveTask {
  const n = Math.floor(rand() * 33);
  // Partners may be ordinals past every row (ids known only from signals) or deleted items.
  const partners = Int32Array.from({ length: n }, () => Math.floor(rand() * (ITEMS + 40)));
  const item = Math.floor(rand() * ITEMS);
  const limit = 1 + Math.floor(rand() * 12);
  const t: RetrieveTask = {
    profile: 'related',
    context: null,
    filter: randomFilter(rand),
    diversity: rand() < 0.3 ? { maxPer: { creator: 1 + Math.floor(rand() * 2) } } : rand() < 0.1 ? { maxPer: { score: 1 } } : null,
    limit,
    window: '24h',
    exclude: rand() < 0.2 ? Int32Array.from({ length: 5 }, () => Math.floor(rand() * ITEMS)) : null,
    user: randomUser(rand),
    related: {
      item,
      n,
      entries: Float64Array.from({ length: 3 * n }, (_, j) =>
        j % 3 === 0 ? partners[j / 3]! : j % 3 === 1 ? Math.floor(rand() * 6) + (rand() < 0.5 ? 0 : rand()) : NOW - Math.floor(rand() * 96) * HOUR,
      ),
      lambda: Math.LN2 / (7 * 24 * HOUR),
    },
  };
  if (rand() < 0.2) t.after = partners.slice(0, Math.floor(rand() * 4));
  return t;
}

describe('ItemColumns', () => {
  it('ranks related as the catalog does, through the same executor, across item writes', () => {
    const rand = mulberry32(0x1c0);
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const writer = new ItemsWriter(db);
    let version = 0;
    const write = (o: number): void => writer.upsert({ ordinal: o, id: `i${o}`, text: o % 3 === 0 ? `text ${o}` : null, metadata: metadata(rand), createdAt: NOW - o * HOUR, embedding: null }, ++version, true);
    db.transaction(() => {
      for (let o = 0; o < ITEMS; o++) write(o);
      for (let o = ITEMS; o < ITEMS + 10; o++) writer.ensureKey(o, `signal-only-${o}`);
    })();
    const store = SignalStore.create({ kinds: KINDS, maxOrdinals: ITEMS + 64, maxSlots: 4 * ITEMS });
    for (let e = 0; e < 2000; e++) store.apply(Math.floor(rand() * (ITEMS + 10)), rand() < 0.7 ? 0 : 1, 1, NOW - Math.floor(rand() * 48 * HOUR));

    const catalog = new Catalog(db, SCHEMA);
    const columns = new ItemColumns(db, SCHEMA);
    const viaCatalog = new RetrieveExecutor({ schema: SCHEMA, catalog, store, ann: null, db });
    const viaColumns = new RetrieveExecutor({ schema: SCHEMA, catalog: columns.asCatalog(), store, ann: null, db });
    let compared = 0;
    let nonEmpty = 0;
    for (let round = 0; round < 4; round++) {
      catalog.refresh();
      columns.syncTo(version);
      expect(columns.version).toBe(catalog.version);
      for (let q = 0; q < 150; q++) {
        const t = relatedTask(rand);
        const level = pick(rand, [DegradationLevel.Full, DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity]);
        const want = viaCatalog.run(t, level, NOW);
        const got = viaColumns.run(t, level, NOW);
        expect(got, `round ${round} query ${q}`).toEqual(want);
        compared++;
        if (want.items.length > 0) nonEmpty++;
      }
      // Replacements (new metadata), deletions and re-upserts between rounds.
      db.transaction(() => {
        for (let k = 0; k < 40; k++) {
          const o = Math.floor(rand() * ITEMS);
          if (rand() < 0.3) writer.delete(o, ++version);
          else write(o);
        }
      })();
    }
    expect(compared).toBe(600);
    expect(nonEmpty).toBeGreaterThan(300);
  });

  it('pulls only the rows written since it last looked', () => {
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const writer = new ItemsWriter(db);
    const columns = new ItemColumns(db, SCHEMA);
    for (let o = 0; o < 5; o++) writer.upsert({ ordinal: o, id: `i${o}`, text: null, metadata: { creator: 'c0' }, createdAt: NOW, embedding: null }, o + 1, false);
    expect(columns.refresh()).toBe(5);
    columns.syncTo(5);
    expect(columns.refresh()).toBe(0);
    writer.upsert({ ordinal: 2, id: 'i2', text: null, metadata: { creator: 'c9' }, createdAt: NOW, embedding: null }, 6, true);
    columns.syncTo(6);
    expect(columns.version).toBe(6);
    expect(columns.fieldValue('creator', 2)).toBe('c9');
    expect(columns.fieldValue('creator', 1)).toBe('c0');
    expect(columns.fieldValue('creator', 99)).toBeUndefined();
  });
});
