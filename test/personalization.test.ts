/**
 * The feedback loop's arithmetic and the `for_you` profile, each against an oracle written out
 * here: the preference EMA, the creator affinity's decay, the bounded seen set; for_you's weighted
 * mix, its cold start, its exploration places and its per-call weights.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TidalDb, USER_DEFAULTS, type RetrieveFields } from 'tidal-core';
import { DAY, HOUR, NOW, TestClock } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

async function open(clock = new TestClock(NOW)): Promise<TidalDb> {
  return TidalDb.builder().ephemeral().workers(1).clock(clock.read).schema(USER_SCHEMA).capacity({ items: 4096, signalSlots: 8192 }).open();
}

const f32 = (xs: number[]): number[] => Array.from(new Float32Array(xs));
const LAMBDA = Math.LN2 / USER_DEFAULTS.affinityHalfLifeMs;

describe('the feedback loop', () => {
  it('moves the preference vector, the creator affinity and the seen set as documented', async () => {
    const db = await open();
    try {
      await db.upsertItems([
        { id: 'a1', embedding: [2, 0, 0], metadata: { creator: 'ana' } },
        { id: 'a2', embedding: [1, 0, 0], metadata: { creator: 'ana' } },
        { id: 'b1', embedding: [0, 3, 0], metadata: { creator: 'ben' } },
        { id: 'c1', embedding: [0, 0, 1], metadata: { creator: 'cy' } },
      ]);
      await db.upsertUsers([{ id: 'u' }]);
      await db.signal({ item: 'a1', kind: 'view', user: 'u', at: NOW - 2 * HOUR }); // no preference rate: seen only
      expect((await db.getUser('u'))!).toMatchObject({ preference: null, seen: ['a1'], affinity: {} });
      await db.signal({ item: 'a1', kind: 'like', user: 'u', weight: 2, at: NOW - HOUR });
      // A first positive signal sets p to the unit embedding.
      let p = [1, 0, 0];
      expect(Array.from((await db.getUser('u'))!.preference!)).toEqual(f32(p));
      await db.signal({ item: 'b1', kind: 'like', user: 'u', at: NOW });
      p = f32(p.map((x, i) => 0.5 * x + 0.5 * [0, 1, 0][i]!));
      expect(Array.from((await db.getUser('u'))!.preference!)).toEqual(p);
      await db.signal({ item: 'c1', kind: 'skip', user: 'u', at: NOW });
      p = f32(p.map((x, i) => 0.75 * x - 0.25 * [0, 0, 1][i]!));
      expect(Array.from((await db.getUser('u'))!.preference!)).toEqual(p);
      // Affinity: S·e^(−λ·dt) + w; an earlier event is decayed to the reference time.
      await db.signal({ item: 'a2', kind: 'like', user: 'u', weight: 1, at: NOW - 3 * HOUR });
      const u = (await db.getUser('u'))!;
      expect(u.affinity.ana).toBeCloseTo(2 * Math.exp(-LAMBDA * HOUR) + Math.exp(-LAMBDA * 3 * HOUR), 12);
      expect(u.affinity.ben).toBeCloseTo(1, 12);
      expect(u.affinity.cy).toBeCloseTo(-1, 12);
      // Seen: newest first, a repeat moves an item to the front.
      expect(u.seen).toEqual(['a2', 'c1', 'b1', 'a1']);
    } finally {
      await db.close();
    }
  });

  it(`keeps the last ${USER_DEFAULTS.seenLimit} distinct items in the seen set`, async () => {
    const db = await open();
    try {
      await db.upsertUsers([{ id: 'u' }]);
      const n = USER_DEFAULTS.seenLimit + 40;
      await db.signals(Array.from({ length: n }, (_, i) => ({ item: `x${i}`, kind: 'view', user: 'u' })));
      const seen = (await db.getUser('u'))!.seen;
      expect(seen).toHaveLength(USER_DEFAULTS.seenLimit);
      expect(seen[0]).toBe(`x${n - 1}`);
      expect(seen.at(-1)).toBe(`x${n - USER_DEFAULTS.seenLimit}`);
    } finally {
      await db.close();
    }
  });

  it(`keeps at most ${USER_DEFAULTS.maxAffinities} creator affinities by the documented rule, the same after a reopen`, async () => {
    // The rule, written out: S ← S·e^(−λ·dt) + w (an earlier event decayed to the reference time
    // instead); a creator past the bound makes the smallest affinity at the latest reference time
    // go, ties to the first creator by name.
    const model = (events: readonly { creator: number; w: number; at: number }[]): Map<string, { score: number; at: number }> => {
      const held = new Map<string, { score: number; at: number }>();
      for (const e of events) {
        const c = `c${e.creator}`;
        const a = held.get(c);
        if (a === undefined) {
          held.set(c, { score: e.w, at: e.at });
          if (held.size <= USER_DEFAULTS.maxAffinities) continue;
          const ref = Math.max(...[...held.values()].map((x) => x.at));
          const value = (x: { score: number; at: number }): number => x.score * Math.exp(-LAMBDA * (ref - x.at));
          const [worst] = [...held].sort(([n1, x1], [n2, x2]) => value(x1) - value(x2) || (n1 < n2 ? -1 : 1))[0]!;
          held.delete(worst);
        } else if (e.at >= a.at) {
          a.score = a.score * Math.exp(-LAMBDA * (e.at - a.at)) + e.w;
          a.at = e.at;
        } else {
          a.score += e.w * Math.exp(-LAMBDA * (a.at - e.at));
        }
      }
      return held;
    };
    const CREATORS = USER_DEFAULTS.maxAffinities + 16;
    const event = (creator: fc.Arbitrary<number>) =>
      fc.record({ creator, like: fc.boolean(), weight: fc.integer({ min: 1, max: 4 }), ageH: fc.integer({ min: 0, max: 96 }) });
    // Past the bound in every run: a first event for most creators, in a drawn order, then more.
    const firsts = fc
      .shuffledSubarray(
        Array.from({ length: CREATORS }, (_, c) => c),
        { minLength: USER_DEFAULTS.maxAffinities + 2 },
      )
      .chain((cs) => fc.tuple(...cs.map((c) => event(fc.constant(c)))));
    const more = fc.array(event(fc.integer({ min: 0, max: CREATORS - 1 })), { maxLength: 80 });
    await fc.assert(
      fc.asyncProperty(firsts, more, fc.integer({ min: 1, max: 40 }), async (first, then, batch) => {
        const drawn = [...first, ...then];
        const dir = mkdtempSync(join(tmpdir(), 'tidal-affinity-'));
        const opened = (): Promise<TidalDb> =>
          TidalDb.builder()
            .path(dir)
            .workers(1)
            .clock(() => NOW)
            .schema(USER_SCHEMA)
            .capacity({ items: 4096, signalSlots: 8192 })
            .open();
        try {
          let db = await opened();
          await db.upsertItems(
            Array.from({ length: CREATORS }, (_, c) => ({ id: `i${c}`, embedding: [1, c, 0], metadata: { creator: `c${c}` } })),
          );
          await db.upsertUsers([{ id: 'u' }]);
          const signals = drawn.map((e) => ({
            item: `i${e.creator}`,
            kind: e.like ? 'like' : 'skip',
            user: 'u',
            weight: e.weight,
            at: NOW - e.ageH * HOUR,
          }));
          for (let i = 0; i < signals.length; i += batch) await db.signals(signals.slice(i, i + batch));
          const held = model(drawn.map((e) => ({ creator: e.creator, w: e.like ? e.weight : -e.weight, at: NOW - e.ageH * HOUR })));
          const before = (await db.getUser('u'))!.affinity;
          expect(Object.keys(before)).toEqual([...held.keys()].sort());
          for (const [c, a] of held) expect(before[c]).toBeCloseTo(a.score * Math.exp(-LAMBDA * (NOW - a.at)), 9);
          await db.close();
          db = await opened();
          try {
            expect((await db.getUser('u'))!.affinity).toEqual(before);
          } finally {
            await db.close();
          }
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 12 },
    );
  });
});

// ---- for_you ---------------------------------------------------------------------------------

const CORPUS = [
  { id: 'j1', embedding: [1, 0.1, 0], creator: 'ana', ageH: 1, views: 30 },
  { id: 'j2', embedding: [0.9, 0.3, 0.1], creator: 'ana', ageH: 30, views: 5 },
  { id: 'j3', embedding: [0.8, 0, 0.5], creator: 'ben', ageH: 6, views: 12 },
  { id: 'r1', embedding: [0.1, 1, 0], creator: 'cy', ageH: 2, views: 40 },
  { id: 'r2', embedding: [0.2, 0.9, 0.3], creator: 'cy', ageH: 50, views: 1 },
  { id: 'p1', embedding: [0, 0.2, 1], creator: 'di', ageH: 12, views: 20 },
  { id: 'p2', embedding: [0.3, 0.3, 0.9], creator: 'ed', ageH: 70, views: 8 },
  { id: 'p3', embedding: [0.5, 0.5, 0.5], creator: 'fay', ageH: 3, views: 2 },
];

type CorpusEntry = (typeof CORPUS)[number];

/** CORPUS and 32 more items of eight creators (the explorers outnumber the exploration places). */
const LARGER: CorpusEntry[] = [
  ...CORPUS,
  ...Array.from({ length: 32 }, (_, i) => ({
    id: `g${i}`,
    embedding: [((i * 7) % 11) / 10, ((i * 5) % 7) / 6, ((i * 3) % 5) / 4 + 0.05],
    creator: ['ana', 'ben', 'cy', 'di', 'ed', 'fay', 'gus', 'hal'][i % 8]!,
    ageH: (i * 13) % 90,
    views: (i * 17) % 37,
  })),
];

async function corpusDb(corpus: readonly CorpusEntry[] = CORPUS): Promise<TidalDb> {
  const db = await open();
  await db.upsertItems(
    corpus.map((c) => ({ id: c.id, embedding: c.embedding, metadata: { creator: c.creator }, createdAt: NOW - c.ageH * HOUR })),
  );
  await db.signals(
    corpus.flatMap((c) => Array.from({ length: c.views }, (_, i) => ({ item: c.id, kind: 'view', at: NOW - (i % 50) * 60_000 }))),
  );
  await db.upsertUsers([{ id: 'fan' }, { id: 'new' }]);
  // fan likes j1 and r1: preference between them, affinity to ana (weight 3) and cy (weight 1).
  await db.signal({ item: 'j1', kind: 'like', user: 'fan', weight: 3, at: NOW });
  await db.signal({ item: 'r1', kind: 'like', user: 'fan', weight: 1, at: NOW });
  return db;
}

const cos = (a: readonly number[], b: readonly number[]): number => {
  let d = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return d / Math.sqrt(na * nb);
};

/** The documented for_you score of every corpus item, best first (ties: corpus order). */
async function oracle(
  db: TidalDb,
  user: string,
  w = { similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 },
  hidden: string[] = [],
  corpus: readonly CorpusEntry[] = CORPUS,
): Promise<{ id: string; score: number }[]> {
  const u = (await db.getUser(user))!;
  const pool = corpus.filter((c) => !hidden.includes(c.id));
  const velocity = new Map(pool.map((c) => [c.id, db.itemSignals(c.id).view?.velocity?.['1h'] ?? 0]));
  const maxV = Math.max(...velocity.values());
  const affs = Object.values(u.affinity).filter((a) => a > 0);
  const maxA = Math.max(0, ...affs);
  const scored = pool.map((c, i) => {
    const vel = maxV > 0 ? velocity.get(c.id)! / maxV : 0;
    const rec = 2 ** (-(c.ageH * HOUR) / DAY);
    if (u.preference === null) return { id: c.id, i, score: (w.velocity * vel + w.recency * rec) / (w.velocity + w.recency) };
    const sim = Math.max(0, cos(Array.from(u.preference), c.embedding));
    const aff = maxA > 0 ? Math.max(0, u.affinity[c.creator] ?? 0) / maxA : 0;
    return { id: c.id, i, score: w.similarity * sim + w.velocity * vel + w.recency * rec + w.affinity * aff };
  });
  scored.sort((a, b) => b.score - a.score || a.i - b.i);
  return scored.map(({ id, score }) => ({ id, score }));
}

async function feed(db: TidalDb, req: Omit<RetrieveFields, 'profile'> & { user: string }): Promise<{ id: string; score: number }[]> {
  const r = await db.retrieve({ profile: 'for_you', limit: CORPUS.length, ...req });
  return r.items.map((i) => ({ id: i.id, score: i.score }));
}

/**
 * A candidate's similarity comes from int8 rows (the ANN index's, or the items' copy): within 0.005
 * at these dimensions, 0.002 of the score (`digits` 2).
 */
function expectRanking(got: { id: string; score: number }[], want: { id: string; score: number }[], digits = 2): void {
  expect(got.map((g) => g.id)).toEqual(want.map((w) => w.id));
  for (let i = 0; i < want.length; i++) expect(got[i]!.score, want[i]!.id).toBeCloseTo(want[i]!.score, digits);
}

describe('for_you', () => {
  it('ranks by the documented mix of similarity, velocity, recency and affinity, at every level', async () => {
    const db = await corpusDb();
    try {
      const want = await oracle(db, 'fan');
      for (const level of ['Full', 'ReducedCandidates'] as const) expectRanking(await feed(db, { user: 'fan', explore: 0, level }), want);
      const r = await db.retrieve({ profile: 'for_you', user: 'fan', explore: 0 });
      expect(r.explain).toMatchObject({
        coldStart: false,
        annTopK: USER_DEFAULTS.forYouBudgets[0]!.ann,
        annCandidates: CORPUS.length,
        explored: 0,
      });
      expect((await db.retrieve({ profile: 'for_you', user: 'fan', level: 'ReducedCandidates' })).explain.annTopK).toBe(
        USER_DEFAULTS.forYouBudgets[1]!.ann,
      );
      // Per-call weights.
      const simOnly = { similarity: 1, velocity: 0, recency: 0, affinity: 0 };
      expectRanking(await feed(db, { user: 'fan', explore: 0, weights: simOnly }), await oracle(db, 'fan', simOnly));
      const affFirst = { similarity: 0.1, velocity: 0.1, recency: 0.1, affinity: 5 };
      expectRanking(await feed(db, { user: 'fan', explore: 0, weights: affFirst }), await oracle(db, 'fan', affFirst));
      // A hidden item never comes back, and the rest keep the oracle's order.
      await db.hide({ user: 'fan', item: 'j1' });
      expectRanking(await feed(db, { user: 'fan', explore: 0 }), await oracle(db, 'fan', undefined, ['j1']));
    } finally {
      await db.close();
    }
  });

  it('gives a user without history the cold start: trending blended with recency', async () => {
    const db = await corpusDb();
    try {
      const r = await db.retrieve({ profile: 'for_you', user: 'new', limit: CORPUS.length });
      expect(r.explain.coldStart).toBe(true);
      expectRanking(
        r.items.map((i) => ({ id: i.id, score: i.score })),
        await oracle(db, 'new'),
      );
    } finally {
      await db.close();
    }
  });

  it('gives every round(1/explore)-th place to a creator without affinity, the same for the same (user, seed)', async () => {
    const db = await corpusDb();
    try {
      const plain = (await oracle(db, 'fan')).map((x) => x.id);
      const creator = new Map(CORPUS.map((c) => [c.id, c.creator]));
      for (const seed of [0, 1, 2, 3]) {
        const a = (await feed(db, { user: 'fan', explore: 0.25, seed })).map((x) => x.id);
        const b = (await feed(db, { user: 'fan', explore: 0.25, seed })).map((x) => x.id);
        expect(a).toEqual(b);
        expect([...a].sort()).toEqual([...plain].sort());
        const explorers = [a[3]!, a[7]!];
        for (const id of explorers) expect(['ana', 'cy'], `${id} at an exploration place`).not.toContain(creator.get(id));
        // The other places are the score order without the explorers.
        expect(a.filter((_, i) => i !== 3 && i !== 7)).toEqual(plain.filter((id) => !explorers.includes(id)));
      }
      const r = await db.retrieve({ profile: 'for_you', user: 'fan', limit: 8, explore: 0.25 });
      expect(r.explain.explored).toBe(2);
      const seeds = new Set<string>();
      for (let seed = 0; seed < 12; seed++) seeds.add((await feed(db, { user: 'fan', explore: 0.25, seed })).map((x) => x.id).join());
      expect(seeds.size).toBeGreaterThan(1);
    } finally {
      await db.close();
    }
  });

  it('fills each exploration place with the unplaced explorer of smallest hash, and a short feed is the long one’s first places', async () => {
    const db = await corpusDb(LARGER);
    try {
      const plain = (await oracle(db, 'fan', undefined, [], LARGER)).map((x) => x.id);
      // The exploration order written out: FNV-1a of the ids, a murmur3 finaliser over (user, seed, item).
      const fnv = (s: string): number => {
        let h = 0x811c9dc5;
        for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
        return h >>> 0;
      };
      const mix = (a: number, b: number, c: number): number => {
        let h = (a ^ Math.imul(b, 0x9e3779b1) ^ Math.imul(c, 0x85ebca6b)) >>> 0;
        h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
        h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
        return (h ^ (h >>> 16)) >>> 0;
      };
      const affine = new Set(['ana', 'cy']);
      for (let seed = 0; seed < 12; seed++) {
        const explorers = LARGER.map((c, i) => ({ id: c.id, i, h: mix(fnv('fan'), seed, fnv(c.id)), creator: c.creator }))
          .filter((c) => !affine.has(c.creator))
          .sort((a, b) => a.h - b.h || a.i - b.i)
          .map((c) => c.id);
        const want: string[] = [];
        const placed = new Set<string>();
        while (want.length < plain.length) {
          const next = (want.length + 1) % 4 === 0 ? explorers.find((id) => !placed.has(id)) : undefined;
          const id = next ?? plain.find((x) => !placed.has(x))!;
          placed.add(id);
          want.push(id);
        }
        for (const limit of [1, 4, 7, 8, 12, 20, LARGER.length]) {
          const got = (await feed(db, { user: 'fan', explore: 0.25, seed, limit })).map((x) => x.id);
          expect(got, `seed ${seed}, limit ${limit}`).toEqual(want.slice(0, limit));
        }
      }
    } finally {
      await db.close();
    }
  });
});

// ---- for_you's candidate sources -------------------------------------------------------------

/**
 * Items only one source can find: without an embedding they are never ANN neighbours (and their
 * similarity is 0), so the ANN finds exactly the eight embedded items of CORPUS at every level
 * that searches it (NoDiversity searches none for the fan, who has creator affinities).
 * - `ana-k`: by ana, the fan's strongest affinity, 31 + k hours old: the affinity creators' source;
 * - `cy-k`: by cy, a weaker affinity, 50 + k hours old: the same source, to a depth that follows
 *   cy's affinity over ana's;
 * - `new-k`: by zed (no affinity), k + 1 minutes old, the newest items: the newest source;
 * - `hot-k`: by yan (no affinity), ten days old, 41 + k views in the last hour (more than any
 *   CORPUS item): the trending source, and the largest velocity, which every velocity is divided by.
 */
const SOURCED = [
  ...Array.from({ length: 40 }, (_, k) => ({ id: `ana-${k}`, creator: 'ana', ageMs: (31 + k) * HOUR, views: 0 })),
  ...Array.from({ length: 40 }, (_, k) => ({ id: `cy-${k}`, creator: 'cy', ageMs: (50 + k) * HOUR, views: 0 })),
  ...Array.from({ length: 60 }, (_, k) => ({ id: `new-${k}`, creator: 'zed', ageMs: (k + 1) * 60_000, views: 0 })),
  ...Array.from({ length: 30 }, (_, k) => ({ id: `hot-${k}`, creator: 'yan', ageMs: 240 * HOUR, views: 41 + k })),
];

async function sourcedDb(): Promise<TidalDb> {
  const db = await corpusDb();
  await db.upsertItems(SOURCED.map((c) => ({ id: c.id, metadata: { creator: c.creator }, createdAt: NOW - c.ageMs })));
  await db.signals(
    SOURCED.flatMap((c) => Array.from({ length: c.views }, (_, i) => ({ item: c.id, kind: 'view', at: NOW - (i % 50) * 60_000 }))),
  );
  return db;
}

const LEVELS = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;

/**
 * The documented candidates of a warm user at `level` (the union, in source order, of the ANN's
 * neighbours, the top affinity creators' newest, the newest and trending), each scored by the mix.
 */
async function sourcedOracle(
  db: TidalDb,
  level: number,
  hidden: string[] = [],
): Promise<{ ranking: { id: string; score: number }[]; added: Record<string, number> }> {
  const b = USER_DEFAULTS.forYouBudgets[level]!;
  const u = (await db.getUser('fan'))!;
  const window = level === 2 ? '24h' : '1h'; // CoarseAggregates reads the 24h velocity
  const all = [
    ...CORPUS.map((c) => ({ id: c.id, creator: c.creator, ageMs: c.ageH * HOUR, embedding: c.embedding })),
    ...SOURCED.map((c) => ({ ...c, embedding: null })),
  ].filter((c) => !hidden.includes(c.id));
  const order = new Map(all.map((c, i) => [c.id, i]));
  const newestFirst = [...all].sort((x, y) => x.ageMs - y.ageMs || order.get(x.id)! - order.get(y.id)!);
  const velocity = (id: string): number => db.itemSignals(id).view?.velocity?.[window] ?? 0;
  const sources: Record<string, string[]> = {
    // Every level that searches the graph asks for more neighbours than the 8 embedded items; at
    // NoDiversity a user with creator affinities (the fan) gets none.
    ann: b.annWithAffinity > 0 ? all.filter((c) => c.embedding !== null).map((c) => c.id) : [],
    // Each creator's depth: the floor's share of perCreator, the rest in proportion to its affinity over the largest.
    creators: Object.entries(u.affinity)
      .filter(([, a]) => a > 0)
      .sort((x, y) => y[1] - x[1])
      .slice(0, b.creators)
      .flatMap(([creator, a], _, top) =>
        newestFirst
          .filter((c) => c.creator === creator)
          .slice(0, Math.max(1, Math.round(b.perCreator * (b.creatorFloor + (1 - b.creatorFloor) * (a / top[0]![1])))))
          .map((c) => c.id),
      ),
    newest: newestFirst.slice(0, b.newest).map((c) => c.id),
    // Trending: every item with a view in the window, by velocity (the budgets' slots exceed them).
    trending: all
      .filter((c) => velocity(c.id) > 0)
      .sort((x, y) => velocity(y.id) - velocity(x.id))
      .slice(0, b.trending)
      .map((c) => c.id),
  };
  const candidates: string[] = [];
  const added: Record<string, number> = {};
  for (const [source, ids] of Object.entries(sources)) {
    added[source] = 0;
    for (const id of ids) {
      if (candidates.includes(id)) continue;
      candidates.push(id);
      added[source]++;
    }
  }
  const byId = new Map(all.map((c) => [c.id, c]));
  const maxV = Math.max(...candidates.map(velocity));
  const maxA = Math.max(0, ...Object.values(u.affinity));
  const scored = candidates.map((id) => {
    const c = byId.get(id)!;
    const sim = c.embedding ? Math.max(0, cos(Array.from(u.preference!), c.embedding)) : 0;
    const aff = maxA > 0 ? Math.max(0, u.affinity[c.creator] ?? 0) / maxA : 0;
    const score = 0.4 * sim + (0.3 * velocity(id)) / maxV + 0.2 * 2 ** (-c.ageMs / DAY) + 0.1 * aff;
    return { id, i: order.get(id)!, score };
  });
  scored.sort((x, y) => y.score - x.score || x.i - y.i);
  return { ranking: scored.map(({ id, score }) => ({ id, score })), added };
}

describe('for_you candidate sources', () => {
  it('ranks the ANN neighbours, the affinity creators\u2019 newest, the newest and trending by the mix, each cut per level', async () => {
    const db = await sourcedDb();
    try {
      for (let level = 0; level < LEVELS.length; level++) {
        const want = await sourcedOracle(db, level);
        const r = await db.retrieve({ profile: 'for_you', user: 'fan', explore: 0, level: LEVELS[level], limit: 200 });
        expectRanking(
          r.items.map((i) => ({ id: i.id, score: i.score })),
          want.ranking,
        );
        expect(r.explain.forYouSources, LEVELS[level]).toEqual(want.added);
        expect(r.explain.annTopK).toBe(USER_DEFAULTS.forYouBudgets[level]!.annWithAffinity);
      }
      // Every source adds items only it finds, and each level takes fewer of them than the one above.
      expect((await db.retrieve({ profile: 'for_you', user: 'fan', explore: 0, limit: 200 })).explain.forYouSources).toEqual({
        ann: 8,
        creators: 44,
        newest: 50,
        trending: 30,
      });
      // NoDiversity searches no graph for the fan: ana's and cy's embedded items (j1, j2, r1, r2) come in with their creators.
      expect(
        (await db.retrieve({ profile: 'for_you', user: 'fan', explore: 0, limit: 200, level: 'NoDiversity' })).explain.forYouSources,
      ).toEqual({ ann: 0, creators: 24, newest: 20, trending: 20 });
      const budgets = USER_DEFAULTS.forYouBudgets;
      for (let l = 1; l < budgets.length; l++) {
        for (const k of ['ann', 'creators', 'newest', 'trending', 'trendingSlots'] as const)
          expect(budgets[l]![k], `${LEVELS[l]} ${k}`).toBeLessThanOrEqual(budgets[l - 1]![k]);
        expect(budgets[l]!.creators * budgets[l]!.perCreator).toBeLessThan(budgets[l - 1]!.creators * budgets[l - 1]!.perCreator);
      }
      // A hidden item is no source's candidate, and the next one of its source takes its place.
      await db.hide({ user: 'fan', item: 'ana-0' });
      await db.hide({ user: 'fan', item: 'new-0' });
      const want = await sourcedOracle(db, 0, ['ana-0', 'new-0']);
      const r = await db.retrieve({ profile: 'for_you', user: 'fan', explore: 0, limit: 200 });
      expectRanking(
        r.items.map((i) => ({ id: i.id, score: i.score })),
        want.ranking,
      );
      expect(r.explain.forYouSources).toEqual({ ann: 8, creators: 44, newest: 50, trending: 30 });
    } finally {
      await db.close();
    }
  });
});
