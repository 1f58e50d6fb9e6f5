/**
 * Profiles `following`, `hot`, `rising` and `top`, each against an oracle written out here from
 * the events the test wrote (decayed scores, ring windows, ages), at every level on a corpus small
 * enough for the budget not to bite; then the budget's cut on a corpus larger than it, counted in
 * explain; and the bad inputs of the new options.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, USER_DEFAULTS, type DegradationLevelName, type RetrieveRequest } from 'tidal-core';
import { DAY, HOUR, MINUTE, NOW, TestClock, mulberry32 } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const FEED_CANDIDATE_BUDGET = USER_DEFAULTS.feedCandidateBudget;
const LEVELS: DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
const HALF_LIFE: Record<string, number> = { view: HOUR, like: 24 * HOUR, skip: HOUR };

interface Ev {
  item: string;
  kind: string;
  weight: number;
  at: number;
}

const rand = mulberry32(0x5eed);
const N = 48;
const CREATORS = ['c0', 'c1', 'c2', 'c3', 'c4'];
// Distinct creation times (no ties for the oracles to break), a third of them within the last day.
const ITEMS = Array.from({ length: N }, (_, i) => ({
  id: `t${i}`,
  creator: CREATORS[i % CREATORS.length]!,
  createdAt: NOW - Math.round((i % 3 === 0 ? rand() * 20 * HOUR : 20 * HOUR + rand() * 9 * DAY) / 1000) * 1000 - i,
}));
const EVENTS: Ev[] = [];
for (let n = 0; n < 900; n++) {
  const i = Math.floor(rand() ** 2 * N);
  const recent = rand() < 0.4;
  const at = NOW - Math.round(recent ? rand() * 90 * MINUTE : rand() * 6 * DAY);
  EVENTS.push({ item: `t${i}`, kind: rand() < 0.75 ? 'view' : 'like', weight: 1 + Math.floor(rand() * 3), at });
}

const clock = new TestClock(NOW);
let db: TidalDb;

beforeAll(async () => {
  db = await TidalDb.builder()
    .ephemeral()
    .workers(1)
    .clock(clock.read)
    .schema(USER_SCHEMA)
    .capacity({ items: 8192, signalSlots: 16384 })
    .open();
  await db.upsertItems(ITEMS.map((t) => ({ id: t.id, metadata: { creator: t.creator }, createdAt: t.createdAt, embedding: [1, 0, 0] })));
  await db.signals(EVENTS);
  await db.upsertUsers([{ id: 'u' }]);
  await db.follow({ user: 'u', creator: 'c1' });
  await db.follow({ user: 'u', creator: 'c3' });
});
afterAll(async () => {
  await db?.close();
});

/** Σ over the item's events of weight · 2^(−age / half-life). */
function popularity(id: string): number {
  let s = 0;
  for (const e of EVENTS) if (e.item === id) s += e.weight * 2 ** (-(NOW - e.at) / HALF_LIFE[e.kind]!);
  return s;
}

/** Views in the window as the rings count them: 1h from the 5-minute bucket 55 minutes back, 24h from the hour 23 hours back (NOW is on both boundaries). */
function views(id: string, window: '1h' | '24h'): number {
  const start = window === '1h' ? NOW - 55 * MINUTE : NOW - 23 * HOUR;
  return EVENTS.filter((e) => e.item === id && e.kind === 'view' && e.at >= start).length;
}

const created = new Map(ITEMS.map((t) => [t.id, t.createdAt]));
const index = new Map(ITEMS.map((t, i) => [t.id, i]));
type Scored = { id: string; score: number; tie: number };
const rank = (xs: Scored[]): Scored[] => xs.sort((a, b) => b.score - a.score || b.tie - a.tie || index.get(a.id)! - index.get(b.id)!);

const ORACLES: Record<string, () => Scored[]> = {
  hot: () =>
    rank(
      ITEMS.map((t) => ({
        id: t.id,
        score: (Math.max(0, popularity(t.id)) + 1) / ((NOW - t.createdAt) / HOUR + 2) ** 1.8,
        tie: t.createdAt,
      })),
    ),
  top: () => rank(ITEMS.filter((t) => t.createdAt >= NOW - DAY).map((t) => ({ id: t.id, score: popularity(t.id), tie: t.createdAt }))),
  rising: () =>
    rank(
      ITEMS.filter((t) => views(t.id, '1h') > 0).map((t) => ({
        id: t.id,
        score: views(t.id, '1h') / 3600 - views(t.id, '24h') / 86400,
        tie: views(t.id, '1h') / 3600,
      })),
    ),
  followingNewest: () =>
    rank(ITEMS.filter((t) => t.creator === 'c1' || t.creator === 'c3').map((t) => ({ id: t.id, score: t.createdAt, tie: 0 }))),
  followingPopular: () =>
    rank(
      ITEMS.filter((t) => t.creator === 'c1' || t.creator === 'c3').map((t) => ({ id: t.id, score: popularity(t.id), tie: t.createdAt })),
    ),
};

const REQUESTS: Record<string, RetrieveRequest> = {
  hot: { profile: 'hot' },
  top: { profile: 'top', window: '24h' },
  rising: { profile: 'rising', window: '1h' },
  followingNewest: { profile: 'following', user: 'u' },
  followingPopular: { profile: 'following', user: 'u', order: 'popular' },
};

describe('feed profiles against their oracles', () => {
  for (const name of Object.keys(ORACLES)) {
    it(`${name} ranks as written out, at every level`, async () => {
      const want = ORACLES[name]!();
      expect(want.length).toBeGreaterThan(5);
      for (const level of LEVELS) {
        const r = await db.retrieve({ ...REQUESTS[name]!, level, limit: 1000 });
        expect(
          r.items.map((i) => i.id),
          `${name} at ${level}`,
        ).toEqual(want.map((w) => w.id));
        for (let i = 0; i < want.length; i++) expect(r.items[i]!.score / want[i]!.score, `${name} ${want[i]!.id}`).toBeCloseTo(1, 9);
        expect(r.explain.candidateBudget).toBe(level === 'Full' ? null : FEED_CANDIDATE_BUDGET);
        expect(r.explain.budgetExhausted).toBe(false);
      }
    });
  }

  it('hot stops its walk early, exactly: an old item with many signals still ranks where the oracle puts it', async () => {
    const want = ORACLES.hot!()
      .slice(0, 5)
      .map((w) => w.id);
    const r = await db.retrieve({ profile: 'hot', limit: 5 });
    expect(r.items.map((i) => i.id)).toEqual(want);
    expect(r.explain.candidates).toBeLessThan(N);
    expect(USER_DEFAULTS.hotGravity).toBe(1.8);
  });

  it('honours the user: a hidden item and a blocked creator never come back, and the unseen filter', async () => {
    await db.upsertUsers([{ id: 'v' }]);
    const top = ORACLES.hot!();
    await db.hide({ user: 'v', item: top[0]!.id });
    await db.block({ user: 'v', creator: 'c2' });
    await db.signal({ item: top[1]!.id, kind: 'view', user: 'v', at: NOW - 2 * DAY });
    const r = await db.retrieve({ profile: 'hot', user: 'v', userFilter: { unseen: true }, limit: 1000 });
    const allowed = top.filter((w, i) => i > 1 && created.has(w.id) && ITEMS[index.get(w.id)!]!.creator !== 'c2').map((w) => w.id);
    expect(r.items.map((i) => i.id)).toEqual(allowed);
    expect(r.explain.userFiltered).toBeGreaterThan(0);
  });
});

describe('the level budget', () => {
  it(`visits at most ${FEED_CANDIDATE_BUDGET} candidates below Full, every one at Full`, async () => {
    const big = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .capacity({ items: 8192, signalSlots: 16384 })
      .open();
    try {
      const n = FEED_CANDIDATE_BUDGET + 300;
      await big.upsertItems(
        Array.from({ length: n }, (_, i) => ({ id: `b${i}`, metadata: { creator: `k${i % 2}` }, createdAt: NOW - i * 1000 })),
      );
      // Every item active in the last hour; the older ones engaged the most.
      await big.signals(Array.from({ length: n }, (_, i) => ({ item: `b${i}`, kind: 'view', weight: 1 + i, at: NOW - (i % 50) * 1000 })));
      await big.upsertUsers([{ id: 'u' }]);
      await big.follow({ user: 'u', creator: 'k0' });
      await big.follow({ user: 'u', creator: 'k1' });
      for (const req of [{ profile: 'rising' }, { profile: 'following', user: 'u', order: 'popular' }] as RetrieveRequest[]) {
        const full = await big.retrieve({ ...req, level: 'Full', limit: 10 });
        const reduced = await big.retrieve({ ...req, level: 'ReducedCandidates', limit: 10 });
        expect(full.explain, req.profile).toMatchObject({ candidates: n, budgetExhausted: false, candidateBudget: null });
        expect(reduced.explain, req.profile).toMatchObject({
          candidates: FEED_CANDIDATE_BUDGET,
          budgetExhausted: true,
          candidateBudget: FEED_CANDIDATE_BUDGET,
        });
        expect(reduced.explain.slotsVisited!, req.profile).toBeLessThan(full.explain.slotsVisited!);
      }
      // top walks by popularity within the window: the 300 oldest items (the most engaged) are
      // found first, at every level, within the budget.
      for (const level of LEVELS) {
        const r = await big.retrieve({ profile: 'top', level, limit: 10 });
        expect(
          r.items.map((i) => i.id),
          level,
        ).toEqual(Array.from({ length: 10 }, (_, i) => `b${n - 1 - i}`));
        expect(r.explain.candidates, level).toBeLessThan(100);
        expect(r.explain.budgetExhausted, level).toBe(false);
      }
      // hot's early stop at Full: items with no signals score 1 / (age + 2)^g, strictly falling with age.
      const quiet = await TidalDb.builder()
        .ephemeral()
        .workers(1)
        .clock(() => NOW)
        .schema(USER_SCHEMA)
        .open();
      try {
        await quiet.upsertItems(Array.from({ length: 500 }, (_, i) => ({ id: `q${i}`, createdAt: NOW - i * HOUR })));
        const r = await quiet.retrieve({ profile: 'hot', limit: 20 });
        expect(r.items.map((i) => i.id)).toEqual(Array.from({ length: 20 }, (_, i) => `q${i}`));
        expect(r.explain.candidates).toBe(20); // the 21st is only looked at for its age
      } finally {
        await quiet.close();
      }
    } finally {
      await big.close();
    }
  }, 180_000);
});

describe('hot: the most popular first, then the newest', () => {
  it('one old item with a huge score no longer makes the walk visit everything younger; exact at Full, and within the budget below', async () => {
    const hot = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .capacity({ items: 8192, signalSlots: 16384 })
      .open();
    try {
      const n = 3000;
      const weight = (i: number): number => (i === n - 1 ? 1_000_000 : 1 + ((i * 7919) % 10));
      await hot.upsertItems(Array.from({ length: n }, (_, i) => ({ id: `h${i}`, createdAt: NOW - i * HOUR })));
      // Every event at NOW, so an item's popularity is its weight.
      await hot.signals(Array.from({ length: n }, (_, i) => ({ item: `h${i}`, kind: 'view', weight: weight(i), at: NOW })));
      const oracle = Array.from({ length: n }, (_, i) => ({ id: `h${i}`, i, score: (weight(i) + 1) / (i + 2) ** 1.8 }))
        .sort((a, b) => b.score - a.score || a.i - b.i)
        .map((w) => w.id);
      for (const level of LEVELS) {
        const r = await hot.retrieve({ profile: 'hot', level, limit: 10 });
        expect(
          r.items.map((i) => i.id),
          level,
        ).toEqual(oracle.slice(0, 10));
        // With the largest popularity (10^6) as the bound, the walk went through the ~2 200 items
        // younger than (10^6 / 10th score)^(1/1.8) hours; the ~400 visits to find the 256 most popular bound the rest at 10.
        expect(r.explain.candidates, level).toBeLessThan(600);
      }
      // The old item is found by popularity however far down the creation order it is.
      expect(oracle.indexOf(`h${n - 1}`)).toBeLessThan(100);
      const deep = await hot.retrieve({ profile: 'hot', level: 'NoDiversity', limit: 100 });
      expect(deep.items.map((i) => i.id)).toEqual(oracle.slice(0, 100));
      expect(deep.explain.candidates).toBeLessThanOrEqual(FEED_CANDIDATE_BUDGET);
    } finally {
      await hot.close();
    }
  }, 180_000);
});

describe('top by popularity within its window', () => {
  // 3 000 items, 2 000 of them created in the last day (more than the budget), two kinds of
  // signals of mixed weights (some negative), engagement independent of age and a fifth of the
  // window without any signal: the newest-first budget walk would miss most of the top.
  const M = 3000;
  const r2 = mulberry32(0x70b);
  const items = Array.from({ length: M }, (_, i) => ({
    id: `w${i}`,
    createdAt: NOW - (i < 2000 ? i * 40_000 : DAY + (i - 2000) * 100_000) - 7,
  }));
  const events: Ev[] = [];
  for (let i = 0; i < M; i++) {
    if (i < 2000 && i % 5 === 0) continue;
    const n = 1 + Math.floor(6 * r2() ** 3);
    for (let e = 0; e < n; e++) {
      const kind = r2() < 0.7 ? 'view' : 'like';
      events.push({ item: `w${i}`, kind, weight: r2() < 0.05 ? -2 : 1 + Math.floor(r2() * 5), at: NOW - Math.floor(r2() * 3 * DAY) });
    }
  }
  const pop = new Map<string, number>();
  for (const e of events) pop.set(e.item, (pop.get(e.item) ?? 0) + e.weight * 2 ** (-(NOW - e.at) / HALF_LIFE[e.kind]!));
  const order = new Map(items.map((t, i) => [t.id, i]));
  const oracle = (window: number): Scored[] =>
    items
      .filter((t) => t.createdAt >= NOW - window)
      .map((t) => ({ id: t.id, score: pop.get(t.id) ?? 0, tie: t.createdAt }))
      .sort((a, b) => b.score - a.score || b.tie - a.tie || order.get(a.id)! - order.get(b.id)!);
  let w: TidalDb;
  beforeAll(async () => {
    w = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .capacity({ items: 8192, signalSlots: 16384 })
      .open();
    await w.upsertItems(items.map((t) => ({ id: t.id, createdAt: t.createdAt })));
    await w.signals(events);
  });
  afterAll(async () => {
    await w?.close();
  });

  it('is exact at every level, and visits fewer items than the window holds', async () => {
    const want = oracle(DAY);
    expect(want.length).toBe(2000);
    for (const limit of [1, 10, 40]) {
      for (const level of LEVELS) {
        const r = await w.retrieve({ profile: 'top', window: '24h', level, limit });
        expect(
          r.items.map((i) => i.id),
          `limit ${limit} at ${level}`,
        ).toEqual(want.slice(0, limit).map((x) => x.id));
        for (let i = 0; i < limit; i++) expect(r.items[i]!.score / want[i]!.score).toBeCloseTo(1, 9);
        expect(r.explain.budgetExhausted).toBe(false);
        // A walk by popularity meets the top of the window long before it has seen the window.
        expect(r.explain.candidates, `limit ${limit} at ${level}`).toBeLessThan(1000);
      }
    }
  });

  it('fills the places no signalled item takes with the newest unsignalled ones, exactly', async () => {
    const sparse = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .open();
    try {
      // 400 items, 300 in the window; 5 of them and 60 older ones with signals.
      const xs = Array.from({ length: 400 }, (_, i) => ({ id: `s${i}`, createdAt: NOW - i * 288_000 - 1 }));
      await sparse.upsertItems(xs);
      const signalled = [3, 50, 77, 120, 299, ...Array.from({ length: 60 }, (_, k) => 300 + k)];
      await sparse.signals(signalled.map((i) => ({ item: `s${i}`, kind: 'like', weight: i === 77 ? -1 : 2, at: NOW - i * 1000 })));
      const score = (i: number): number => (signalled.includes(i) ? (i === 77 ? -1 : 2) * 2 ** (-(i * 1000) / HALF_LIFE.like!) : 0);
      const inWindow = xs.map((x, i) => ({ id: x.id, i, created: x.createdAt })).filter((x) => x.created >= NOW - DAY);
      expect(inWindow.length).toBe(300);
      const expected = inWindow.sort((a, b) => score(b.i) - score(a.i) || b.created - a.created).map((x) => x.id);
      for (const level of LEVELS) {
        const r = await sparse.retrieve({ profile: 'top', window: '24h', level, limit: 20 });
        expect(
          r.items.map((i) => i.id),
          level,
        ).toEqual(expected.slice(0, 20));
        expect(r.explain.candidates, level).toBeLessThan(300);
      }
    } finally {
      await sparse.close();
    }
  });
});

describe('bad inputs', () => {
  const refused = (field: string) => (err: unknown) => InvalidInputError.is(err) && err.field === field;
  it('names the field', async () => {
    // @ts-expect-error -- the types require `user` for following; an untyped caller gets the error.
    await expect(db.retrieve({ profile: 'following' })).rejects.toSatisfy(refused('user'));
    await expect(db.retrieve({ profile: 'following', user: 'u', order: 'oldest' as 'newest' })).rejects.toSatisfy(refused('order'));
    await expect(db.retrieve({ profile: 'hot', order: 'popular' })).rejects.toSatisfy(refused('order'));
    await expect(db.retrieve({ profile: 'rising', window: '7d' })).rejects.toSatisfy(refused('window'));
    await expect(db.retrieve({ profile: 'top', context: [1, 0, 0] })).rejects.toSatisfy(refused('context'));
    await expect(db.retrieve({ profile: 'new', item: 't1' })).rejects.toSatisfy(refused('item'));
    await expect(db.retrieve({ profile: 'following', user: 'nobody' })).rejects.toSatisfy(refused('user'));
  });
});
