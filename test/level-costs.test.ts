/**
 * Each degradation level makes a personalized read cheaper than the level above it, not just
 * different (DESIGN.md §4): through the public API, with every source holding more than any level
 * takes, `for_you` (with and without `unseen`) and hybrid search report strictly less work at each
 * cheaper level in what `explain` counts: the ANN breadth, the candidates scored and the signal
 * slots read; and `NoDiversity` walks no HNSW graph: a user with creator affinities gets no
 * neighbours there, one without gets them from the popular subset.
 */
import { describe, expect, it } from 'vitest';
import { TidalDb, USER_DEFAULTS, type Explain } from 'tidal-core';
import { HOUR, NOW, TestClock } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const LEVELS = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;
const CREATORS = 20;
const PER_CREATOR = 40;
const WORDS = ['river', 'stone', 'lamp', 'ember', 'field'];

/**
 * 800 items: 20 creators × 40, each embedded, with a text, its own age and a few views in the last
 * hour (so trending holds every item); `fan` likes the newest item of 16 creators (an affinity to
 * each, weights falling) and viewed 30 others (its seen set); `viewer` has an embedding and views.
 */
async function costsDb(): Promise<TidalDb> {
  const db = await TidalDb.builder()
    .ephemeral()
    .workers(1)
    .clock(new TestClock(NOW).read)
    .schema(USER_SCHEMA)
    .capacity({ items: 4096, signalSlots: 8192 })
    .open();
  const items = Array.from({ length: CREATORS * PER_CREATOR }, (_, i) => {
    const c = i % CREATORS;
    const k = Math.floor(i / CREATORS);
    return {
      id: `c${c}-${k}`,
      embedding: [Math.cos(i * 0.37) + 1.1, Math.sin(i * 0.53) + 1.1, ((i * 7) % 13) / 13 + 0.1],
      text: `${WORDS[i % WORDS.length]} ${WORDS[(i * 3 + 1) % WORDS.length]} item ${i}`,
      metadata: { creator: `creator-${c}` },
      createdAt: NOW - (k * CREATORS + c + 1) * 60_000,
    };
  });
  await db.upsertItems(items);
  await db.signals(
    items.flatMap((it, i) => Array.from({ length: 1 + (i % 5) }, (_, v) => ({ item: it.id, kind: 'view', at: NOW - v * 60_000 }))),
  );
  // The viewer's preference is its embedding, and views move no affinity: it has none.
  await db.upsertUsers([{ id: 'fan' }, { id: 'viewer', embedding: [1, 1.5, 0.4] }, { id: 'newcomer', embedding: [1.6, 0.7, 0.9] }]);
  await db.signals(Array.from({ length: 16 }, (_, c) => ({ item: `c${c}-0`, kind: 'like', user: 'fan', weight: 16 - c, at: NOW - HOUR })));
  await db.signals(
    Array.from({ length: 30 }, (_, i) => ({ item: `c${i % CREATORS}-${10 + i}`, kind: 'view', user: 'fan', at: NOW - HOUR })),
  );
  await db.signals(Array.from({ length: 5 }, (_, i) => ({ item: `c${i}-3`, kind: 'view', user: 'viewer', at: NOW - HOUR })));
  return db;
}

/** Each of `pick`'s counts at each level, best level first. */
async function perLevel(run: (level: (typeof LEVELS)[number]) => Promise<Explain>, pick: (e: Explain) => number | null | undefined) {
  const out: number[] = [];
  for (const level of LEVELS) out.push(pick(await run(level)) ?? Number.NaN);
  return out;
}

function expectStrictlyFalling(counts: readonly number[], what: string): void {
  for (let l = 1; l < counts.length; l++)
    expect(counts[l], `${what} at ${LEVELS[l]} (all: ${counts.join(', ')})`).toBeLessThan(counts[l - 1]!);
}

describe('every level costs a personalized read less than the level above', () => {
  it('for_you, with and without unseen: fewer ANN neighbours, candidates and slots read at each level', async () => {
    const db = await costsDb();
    try {
      for (const userFilter of [undefined, { unseen: true }]) {
        const run = async (level: (typeof LEVELS)[number]) =>
          (await db.retrieve({ profile: 'for_you', user: 'fan', level, limit: 20, ...(userFilter ? { userFilter } : {}) })).explain;
        const what = userFilter ? 'for_you + unseen' : 'for_you';
        // The fan has creator affinities: at NoDiversity the creators carry the feed and no graph is searched.
        const ann = await perLevel(run, (e) => e.annTopK);
        expect(ann, what).toEqual(USER_DEFAULTS.forYouBudgets.map((b) => b.annWithAffinity));
        expectStrictlyFalling(ann, `${what} annTopK`);
        expectStrictlyFalling(await perLevel(run, (e) => e.annCandidates), `${what} annCandidates`);
        expect(await perLevel(run, (e) => (e.vectorSearch === undefined ? 0 : 1)), `${what} graph searched`).toEqual([1, 1, 1, 0]);
        expectStrictlyFalling(await perLevel(run, (e) => e.candidates), `${what} candidates`);
        expectStrictlyFalling(await perLevel(run, (e) => e.slotsVisited), `${what} slotsVisited`);
        if (userFilter) expect((await run('Full')).userFiltered, what).toBeGreaterThan(0);
      }
    } finally {
      await db.close();
    }
  });

  it('for_you of a user without creator affinities: fewer neighbours at each level, at NoDiversity kept ones or the popular subset\u2019s, not the graph', async () => {
    const db = await costsDb();
    try {
      const run = async (level: (typeof LEVELS)[number]) =>
        (await db.retrieve({ profile: 'for_you', user: 'viewer', level, limit: 20 })).explain;
      const ann = await perLevel(run, (e) => e.annTopK);
      expect(ann).toEqual(USER_DEFAULTS.forYouBudgets.map((b) => b.ann));
      expectStrictlyFalling(ann, 'annTopK');
      expectStrictlyFalling(await perLevel(run, (e) => e.annCandidates), 'annCandidates');
      // The neighbours are the feed for this user, and at NoDiversity no graph is searched: the
      // viewer's come from the last search of a level above on this thread (the runs above),
      // kept for the user; a user with none kept gets the preference's nearest among the popular
      // subset (every item here has views), by an exact int8 search.
      expect(USER_DEFAULTS.forYouBudgets.map((b) => [b.reuseNeighbours, b.popularNeighbours])).toEqual([
        [false, false],
        [false, false],
        [false, false],
        [true, true],
      ]);
      expect(await perLevel(run, (e) => (e.vectorSearch === undefined ? 0 : 1))).toEqual([1, 1, 1, 0]);
      expect(await perLevel(run, (e) => e.reusedNeighbours ?? 0)).toEqual([0, 0, 0, ann[3]]);
      expect(await perLevel(run, (e) => e.popularCandidates ?? 0)).toEqual([0, 0, 0, 0]);
      const first = (await db.retrieve({ profile: 'for_you', user: 'newcomer', level: 'NoDiversity', limit: 20 })).explain;
      expect([first.vectorSearch, first.reusedNeighbours, first.popularCandidates]).toEqual([undefined, undefined, ann[3]]);
      expect((await run('NoDiversity')).forYouSources?.ann).toBeGreaterThan(0);
      expectStrictlyFalling(await perLevel(run, (e) => e.candidates), 'candidates');
      expectStrictlyFalling(await perLevel(run, (e) => e.slotsVisited), 'slotsVisited');
      expect((await run('Full')).forYouSources?.creators).toBe(0);
    } finally {
      await db.close();
    }
  });

  it('hybrid search: fewer ANN neighbours, BM25 hits and candidates at each level', async () => {
    const db = await costsDb();
    try {
      const run = async (level: (typeof LEVELS)[number]) =>
        (await db.search({ text: 'river stone', vector: [1, 1.5, 0.4], level, limit: 10, diversity: { maxPer: { creator: 2 } } })).explain;
      expectStrictlyFalling(await perLevel(run, (e) => e.annTopK), 'hybrid annTopK');
      expectStrictlyFalling(await perLevel(run, (e) => e.bm25Limit), 'hybrid bm25Limit');
      expectStrictlyFalling(await perLevel(run, (e) => e.candidates), 'hybrid candidates');
    } finally {
      await db.close();
    }
  });
});

describe("for_you's trending list at the levels that let shared work be stale", () => {
  /** 300 items, the oldest first; `late` (the oldest) has no signal yet; users `a` and `b` are new. */
  async function feedDb(noDiversityStaleMs?: number): Promise<TidalDb> {
    let b = TidalDb.builder().ephemeral().workers(1).clock(new TestClock(NOW).read).schema(USER_SCHEMA);
    if (noDiversityStaleMs !== undefined) b = b.workSharing({ maxStalenessMs: { noDiversity: noDiversityStaleMs } });
    const db = await b.open();
    const items = Array.from({ length: 300 }, (_, i) => ({
      id: i === 0 ? 'late' : `i${i}`,
      embedding: [1 + (i % 7), 1 + (i % 5), 1 + (i % 3)],
      metadata: { creator: `creator-${i % 10}` },
      createdAt: NOW - (300 - i) * 60_000,
    }));
    await db.upsertItems(items);
    await db.signals(items.slice(1).map((it, i) => ({ item: it.id, kind: 'view', at: NOW - (i % 50) * 60_000 })));
    await db.upsertUsers([{ id: 'a' }, { id: 'b' }]);
    return db;
  }

  /** Whether `late`, after a burst of views, is in user b's feed at `level`, user a's feed having been asked first. */
  async function lateFound(db: TidalDb, level: 'Full' | 'NoDiversity'): Promise<boolean> {
    const feed = (user: string) => db.retrieve({ profile: 'for_you', user, limit: 50, level });
    expect((await feed('a')).items.map((i) => i.id)).not.toContain('late');
    await db.signals(Array.from({ length: 40 }, () => ({ item: 'late', kind: 'view', at: NOW })));
    return (await feed('b')).items.some((i) => i.id === 'late');
  }

  it('NoDiversity keeps the list its clock allows through new signals; Full, or a staleness of 0, walks again', async () => {
    for (const [stale, level, found] of [
      [undefined, 'NoDiversity', false],
      [0, 'NoDiversity', true],
      [undefined, 'Full', true],
    ] as const) {
      const db = await feedDb(stale);
      try {
        expect(await lateFound(db, level), `${level}, maxStalenessMs ${stale ?? 'default'}`).toBe(found);
      } finally {
        await db.close();
      }
    }
  });
});
