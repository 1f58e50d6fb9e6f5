import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { atLevels, type LevelRunner } from './level-runner.js';
import { AnnIndex } from '../src/ann.js';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import { SearchExecutor } from '../src/search.js';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { RetrieveTask, UserQueryState } from '../src/types.js';
import { cosine } from '../src/ann.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2025, 0, 6, 12, 0, 0);
const ITEMS = 6_000;
const DIMS = 16;
const CLUSTERS = 6;
const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 24 * HOUR, windows: ['all'], velocity: false },
];

function gauss(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/**
 * 6 000 items around 6 centres in 16 dimensions; a third of them get events (popularity drawn
 * independently of position), so a wider ball around a vector holds proportionally more popular
 * items: the case where 200 neighbours instead of 500 lose most of the popular top 10.
 */
function world(): {
  ctx: QueryContext;
  exec: LevelRunner<RetrieveTask, ReturnType<RetrieveExecutor['run']>>;
  vector: (r: () => number) => Float32Array;
  vectors: Float32Array;
} {
  const rand = mulberry32(17);
  const centres = Array.from({ length: CLUSTERS }, () => Float32Array.from({ length: DIMS }, () => gauss(rand)));
  const vector = (r: () => number): Float32Array => {
    const c = centres[Math.floor(r() * CLUSTERS)]!;
    return Float32Array.from(c, (x) => x + 0.35 * gauss(r));
  };
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const items = new ItemsWriter(db);
  const ann = new AnnIndex(DIMS);
  const vectors = new Float32Array(ITEMS * DIMS);
  db.transaction(() => {
    for (let o = 0; o < ITEMS; o++) {
      const v = vector(rand);
      vectors.set(v, o * DIMS);
      items.upsert({ ordinal: o, id: `i${o}`, text: null, metadata: {}, createdAt: NOW - o, embedding: v }, o + 1, false);
    }
  })();
  ann.upsert(
    Array.from({ length: ITEMS }, (_, o) => o),
    vectors,
    1,
  );
  const schema = { kinds: KINDS, metadata: {}, embeddingDims: DIMS };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds: KINDS, maxOrdinals: ITEMS, maxSlots: 2 * ITEMS });
  for (let o = 0; o < ITEMS; o++) {
    if (rand() > 0.33) continue;
    const n = 1 + Math.floor(30 * Math.pow(rand(), 3));
    for (let e = 0; e < n; e++) store.apply(o, rand() < 0.8 ? 0 : 1, 1, NOW - Math.floor(rand() * 48 * HOUR));
  }
  const ctx: QueryContext = { schema, catalog, store, ann, db };
  return { ctx, exec: atLevels(new RetrieveExecutor(ctx)), vector, vectors };
}

function task(context: Float32Array): RetrieveTask {
  return { profile: 'popular', context, filter: null, diversity: null, limit: 10, window: '1h', exclude: null };
}

describe('retrieve around a context vector', () => {
  it("keeps the Full top 10 by popularity from ReducedCandidates on, from the popular members of Full's ball, with no ANN search", () => {
    const { exec, vector } = world();
    const rand = mulberry32(5);
    let kept = 0;
    let asked = 0;
    for (let q = 0; q < 20; q++) {
      const t = task(vector(rand));
      const full = exec.run(t, DegradationLevel.Full, NOW);
      const want = new Set(full.items.map((i) => i.id));
      expect(full.explain.annCandidates).toBe(500);
      expect(full.explain.popularCandidates).toBeUndefined();
      for (const level of [DegradationLevel.ReducedCandidates, DegradationLevel.NoDiversity]) {
        const r = exec.run(t, level, NOW);
        // The HNSW search is skipped: the candidates are the shortlist's members inside the
        // radius the uniform sample gives Full's ball, a fraction of Full's 500.
        expect(r.explain.annCandidates).toBeNull();
        expect(r.explain.popularCandidates).toBeGreaterThanOrEqual(t.limit);
        expect(r.explain.candidates).toBe(r.explain.popularCandidates);
        expect(r.explain.candidates).toBeLessThan(full.explain.candidates / 2);
        kept += r.items.filter((i) => want.has(i.id)).length;
        asked += want.size;
      }
    }
    // Without the popular candidates this world keeps about 40% (200 of 500 neighbours).
    expect(kept / asked).toBeGreaterThanOrEqual(0.8);
  });

  it("answers the popular members' similarity to the vector: the exact cosine, to int8 rounding", () => {
    // The popular subset's rows are searched by inner product at one common scale (toCommonScale):
    // the similarity is the product over that scale and the query's norm.
    const { exec, vector, vectors } = world();
    const rand = mulberry32(11);
    const sim = (v: Float32Array, id: string) => cosine(v, vectors, Number(id.slice(1)) * DIMS);
    let checked = 0;
    let worst = 0;
    for (let q = 0; q < 10; q++) {
      const v = vector(rand);
      const around = exec.run(task(v), DegradationLevel.NoDiversity, NOW);
      expect(around.explain.popularCandidates).toBeGreaterThan(0);
      // for_you's neighbours at NoDiversity: the popular subset's nearest to the preference.
      const preference: UserQueryState = {
        hidden: new Int32Array(0),
        blocked: [],
        seen: null,
        following: null,
        preference: v,
        affinityCreators: [],
        affinityScores: new Float64Array(0),
        idHash: q,
      };
      const forYou: RetrieveTask = {
        ...task(v),
        profile: 'for_you',
        context: null,
        user: preference,
        forYou: { weights: { similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 }, explore: 0, seed: 0 },
      };
      const feed = exec.run(forYou, DegradationLevel.NoDiversity, NOW);
      expect(feed.explain.popularCandidates).toBeGreaterThan(0);
      for (const item of [...around.items, ...feed.items]) {
        expect(item.similarity).toBeDefined();
        worst = Math.max(worst, Math.abs(item.similarity! - sim(v, item.id)));
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(100);
    // 6.0e-3 here, at 16 dimensions.
    expect(worst).toBeLessThan(0.01);
  });

  it('searches the graph after all where the ball holds too few popular members for the page', () => {
    const { exec, vector } = world();
    // Full's ball is 500 of 6 000 items, a third of them popular: never 450 members.
    const t = { ...task(vector(mulberry32(5))), limit: 450 };
    const r = exec.run(t, DegradationLevel.ReducedCandidates, NOW);
    expect(r.explain.annCandidates).toBe(200);
    expect(r.explain.popularCandidates).toBeGreaterThan(0);
  });

  it('below ReducedCandidates tops a short ball up from the shortlist instead of searching the graph', () => {
    const { exec, vector } = world();
    const t = { ...task(vector(mulberry32(5))), limit: 450 };
    const reduced = exec.run(t, DegradationLevel.ReducedCandidates, NOW);
    expect(reduced.explain.annCandidates).toBe(200);
    for (const level of [DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity]) {
      const r = exec.run(t, level, NOW);
      expect(r.explain.annCandidates, `level ${level}`).toBeNull();
      expect(r.explain.popularCandidates).toBeGreaterThanOrEqual(t.limit);
      expect(r.items.length).toBe(t.limit);
    }
  });

  it('a vector search asks the ANN for fewer candidates at each level than the one above', () => {
    const { ctx, vector } = world();
    const search = atLevels(new SearchExecutor(ctx));
    const rand = mulberry32(9);
    for (let q = 0; q < 5; q++) {
      const v = vector(rand);
      for (const text of [null, 'x'] as const) {
        const got = LEVELS.map(
          (level) => search.run({ text, vector: v, filter: null, diversity: null, limit: 10, boost: 0 }, level, NOW).explain.candidates,
        );
        for (let l = 1; l < LEVELS.length; l++) expect(got[l]!, got.join(', ')).toBeLessThan(got[l - 1]!);
        expect(got[3]!).toBeLessThan(got[0]! / 4);
      }
    }
  });

  it('warm() builds the popular subset from the int8 item rows, in one pass, so the first query below Full reads nothing', () => {
    const { ctx, vector } = world();
    // Counts the statements run against the items table from here on.
    let reads = 0;
    const prepare = ctx.db.prepare.bind(ctx.db);
    const counting = new Proxy(ctx.db, {
      get(target, prop, receiver) {
        if (prop !== 'prepare') return Reflect.get(target, prop, receiver) as unknown;
        return (sql: string) => {
          const stmt = prepare(sql);
          const counted: typeof stmt = new Proxy(stmt, {
            get(t, p) {
              const v = Reflect.get(t, p, t) as unknown;
              if (typeof v !== 'function') return v;
              return (...args: unknown[]) => {
                if (p === 'get' || p === 'all' || p === 'iterate') reads++;
                const out = (v as (...a: unknown[]) => unknown).apply(t, args);
                // pluck() and friends return the statement itself: keep counting through it.
                return out === t ? counted : out;
              };
            },
          });
          return counted;
        };
      },
    });
    const executor = new RetrieveExecutor({ ...ctx, db: counting });
    const exec = atLevels(executor);
    executor.warm(NOW);
    // One pass over the table for the int8 rows (a worker's catalog sync keeps them; this bare
    // context has none yet), not one read per member's float vector (8 192 members, 4 096 sampled).
    expect(reads).toBe(1);
    reads = 0;
    const r = exec.run(task(vector(mulberry32(3))), DegradationLevel.ReducedCandidates, NOW);
    expect(r.explain.popularCandidates).toBeGreaterThan(0);
    expect(reads).toBe(0);
    // What it keeps: per member its ordinal and int8 row, a rank per item, the int8 sample; no
    // float vectors (they were 4 × DIMS bytes a member, and again for each vector looked up).
    expect(executor.subsetBytes).toBeGreaterThan(0);
    expect(executor.subsetBytes).toBeLessThanOrEqual(ITEMS * (4 + DIMS) + ITEMS * 4 + 4096 * DIMS);
  });

  it("searches a shorter popular shortlist at the deeper levels, above each level's quality floor", () => {
    const { exec, vector, ctx } = world();
    const short = atLevels(new RetrieveExecutor(ctx), (l) => ({ context: { popularShortlist: [0, 8192, 400, 200][l]! } }));
    const rand = mulberry32(9);
    const kept = { reduced: 0, coarse: 0, noDiversity: 0, none: 0 };
    let asked = 0;
    const none = atLevels(new RetrieveExecutor(ctx), () => ({ context: { popularShortlist: 0 } }));
    for (let q = 0; q < 20; q++) {
      const t = task(vector(rand));
      const want = new Set(exec.run(t, DegradationLevel.Full, NOW).items.map((i) => i.id));
      const count = (e: LevelRunner<RetrieveTask, ReturnType<RetrieveExecutor['run']>>, level: DegradationLevel) =>
        e.run(t, level, NOW).items.filter((i) => want.has(i.id)).length;
      kept.reduced += count(short, DegradationLevel.ReducedCandidates);
      kept.coarse += count(short, DegradationLevel.CoarseAggregates);
      kept.noDiversity += count(short, DegradationLevel.NoDiversity);
      kept.none += count(none, DegradationLevel.ReducedCandidates);
      asked += want.size;
    }
    // A shorter shortlist keeps no more than the whole subset, more than none.
    expect(kept.reduced).toBeGreaterThanOrEqual(kept.coarse);
    expect(kept.coarse).toBeGreaterThan(kept.none);
    expect(kept.noDiversity).toBeGreaterThan(kept.none);
    expect(kept.reduced / asked).toBeGreaterThanOrEqual(0.8);
    expect(kept.noDiversity / asked).toBeGreaterThanOrEqual(0.6);
  });
});
