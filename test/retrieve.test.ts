import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DegradationLevel, type ItemInput, type RetrievedItem, type TidalDb } from 'tidal-core';
import { CORPUS, DAY, HOUR, MINUTE, NOW, cosine, events, idsOf, openCorpusDb, openDb, mulberry32, type TestClock } from './helpers.js';

function expectRanks(items: readonly RetrievedItem[]): void {
  expect(items.map((i) => i.rank)).toEqual(items.map((_, i) => i + 1));
}

function byCreatedDesc(list: readonly { id: string; createdAt: number }[]): string[] {
  return [...list].sort((a, b) => b.createdAt - a.createdAt).map((c) => c.id);
}

describe('retrieve: trending', () => {
  let db: TidalDb;
  let clock: TestClock;

  beforeAll(async () => {
    ({ db, clock } = await openDb());
    await db.upsertItems(['t-hot', 't-warm', 't-stale', 't-edge-in', 't-edge-out'].map((id) => ({ id, text: id, createdAt: NOW - DAY })));
    await db.signals([
      // 3 views in the last hour.
      { item: 't-hot', kind: 'view', at: NOW - 5 * MINUTE },
      { item: 't-hot', kind: 'view', at: NOW - 10 * MINUTE },
      { item: 't-hot', kind: 'view', at: NOW - 20 * MINUTE },
      // 1 view in the last hour, 10 three hours ago.
      { item: 't-warm', kind: 'view', at: NOW - 15 * MINUTE },
      ...events('t-warm', 'view', 10, NOW - 3 * HOUR),
      // 20 views, all between two and five hours ago: plenty of engagement, none of it recent.
      ...Array.from({ length: 20 }, (_, i) => ({ item: 't-stale', kind: 'view', at: NOW - 2 * HOUR - i * 9 * MINUTE })),
      // The 1h window at NOW is twelve 5-minute buckets, the oldest from NOW - 55 min: just inside and just outside it.
      { item: 't-edge-in', kind: 'view', at: NOW - 55 * MINUTE },
      { item: 't-edge-out', kind: 'view', at: NOW - 55 * MINUTE - 1 },
    ]);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('orders by velocity over the default 1h window; an event older than the window does not count', async () => {
    const r = await db.retrieve({ profile: 'trending' });
    // Equal velocities (t-warm, t-edge-in; t-stale, t-edge-out) are broken by the decayed score.
    expect(idsOf(r.items)).toEqual(['t-hot', 't-warm', 't-edge-in', 't-stale', 't-edge-out']);
    expect(r.items.map((i) => i.score)).toEqual([3 / 3600, 1 / 3600, 1 / 3600, 0, 0]);
    expectRanks(r.items);
    expect(r.explain.velocityWindow).toBe('1h');

    const edgeIn = r.items.find((i) => i.id === 't-edge-in')!;
    const edgeOut = r.items.find((i) => i.id === 't-edge-out')!;
    expect(edgeIn.signals.view!.windows['1h']).toBe(1);
    expect(edgeIn.signals.view!.velocity!['1h']).toBe(1 / 3600);
    expect(edgeOut.signals.view!.windows['1h']).toBe(0);
    expect(edgeOut.signals.view!.velocity!['1h']).toBe(0);
    expect(edgeOut.signals.view!.count).toBe(1);
    expect(db.itemSignals('t-stale').view!.windows['1h']).toBe(0);
    expect(db.itemSignals('t-stale').view!.count).toBe(20);
  });

  it('ranks over the window asked for', async () => {
    const r = await db.retrieve({ profile: 'trending', window: '24h' });
    expect(r.explain.velocityWindow).toBe('24h');
    expect(r.items.slice(0, 3).map((i) => [i.id, i.score])).toEqual([
      ['t-stale', 20 / 86_400],
      ['t-warm', 11 / 86_400],
      ['t-hot', 3 / 86_400],
    ]);
    // Whatever a window counts, an item needs a velocity kind's events to trend at all.
    expect(idsOf(r.items).sort()).toEqual(['t-edge-in', 't-edge-out', 't-hot', 't-stale', 't-warm']);
  });

  it('honours the limit', async () => {
    const r = await db.retrieve({ profile: 'trending', limit: 2 });
    expect(idsOf(r.items)).toEqual(['t-hot', 't-warm']);
    expectRanks(r.items);
  });

  it('moves with the clock: once events fall out of the window they stop counting', async () => {
    clock.set(NOW + 45 * MINUTE);
    try {
      const r = await db.retrieve({ profile: 'trending' });
      // t-hot's events are now 50, 55 and 65 minutes old; t-warm's and t-edge-in's are past the hour.
      expect(r.items[0]!.id).toBe('t-hot');
      expect(r.items[0]!.score).toBe(2 / 3600);
      expect(r.items.slice(1).map((i) => i.score)).toEqual([0, 0, 0, 0]);

      // A fresh event puts an item ahead of one whose events have aged out.
      await db.signals(events('t-edge-out', 'view', 3, NOW + 44 * MINUTE));
      const r2 = await db.retrieve({ profile: 'trending', limit: 2 });
      expect(idsOf(r2.items)).toEqual(['t-edge-out', 't-hot']);
      expect(r2.items[0]!.score).toBe(3 / 3600);
    } finally {
      clock.set(NOW);
    }
  });
});

describe('retrieve: popular', () => {
  let db: TidalDb;
  let clock: TestClock;

  beforeAll(async () => {
    ({ db, clock } = await openDb());
    await db.upsertItems(['p-now', 'p-old2', 'p-recent2', 'p-like', 'p-mixed'].map((id) => ({ id, createdAt: NOW - DAY })));
    await db.signals([
      { item: 'p-now', kind: 'view', at: NOW }, // 1
      ...events('p-old2', 'view', 2, NOW - 3 * HOUR), // 2 × 2^-3 = 0.25
      ...events('p-recent2', 'view', 2, NOW - 30 * MINUTE), // 2 × 2^-0.5 ≈ 1.414
      { item: 'p-like', kind: 'like', at: NOW - DAY }, // 2^-1 = 0.5 (like's half-life is a day)
      { item: 'p-mixed', kind: 'view', at: NOW - HOUR }, // 0.5
      { item: 'p-mixed', kind: 'like', at: NOW - 2 * DAY }, // + 0.25
    ]);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('orders by the decayed score summed over kinds: one event now beats two events three half-lives ago', async () => {
    const r = await db.retrieve({ profile: 'popular' });
    expect(idsOf(r.items)).toEqual(['p-recent2', 'p-now', 'p-mixed', 'p-like', 'p-old2']);
    const score = Object.fromEntries(r.items.map((i) => [i.id, i.score]));
    expect(score['p-now']).toBe(1);
    expect(score['p-old2']).toBeCloseTo(0.25, 12);
    expect(score['p-recent2']).toBeCloseTo(2 * Math.SQRT1_2, 12);
    expect(score['p-like']).toBeCloseTo(0.5, 12);
    expect(score['p-mixed']).toBeCloseTo(0.75, 12);
    expectRanks(r.items);

    const old = r.items.find((i) => i.id === 'p-old2')!;
    expect(old.signals.view!.count).toBe(2);
    expect(old.signals.view!.score).toBeCloseTo(0.25, 12);
  });

  it('decays with the clock, each kind at its own half-life', async () => {
    clock.set(NOW + 10 * HOUR);
    try {
      const r = await db.retrieve({ profile: 'popular' });
      const score = Object.fromEntries(r.items.map((i) => [i.id, i.score]));
      expect(score['p-now']).toBeCloseTo(2 ** -10, 12);
      expect(score['p-old2']).toBeCloseTo(0.25 * 2 ** -10, 12);
      expect(score['p-recent2']).toBeCloseTo(2 * 2 ** -10.5, 12);
      expect(score['p-like']).toBeCloseTo(0.5 * 2 ** (-10 / 24), 12);
      expect(score['p-mixed']).toBeCloseTo(0.5 * 2 ** -10 + 0.25 * 2 ** (-10 / 24), 12);
      // Ten hours on, the slow-decaying likes lead.
      expect(idsOf(r.items)).toEqual(['p-like', 'p-mixed', 'p-recent2', 'p-now', 'p-old2']);
    } finally {
      clock.set(NOW);
    }
  });
});

describe('retrieve: signal weights', () => {
  let db: TidalDb;

  beforeAll(async () => {
    ({ db } = await openDb({ workers: 1 }));
    await db.upsertItems([{ id: 'heavy' }, { id: 'many' }]);
    await db.signals([{ item: 'heavy', kind: 'view', weight: 10, at: NOW }, ...events('many', 'view', 3, NOW)]);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('a weight adds to the decayed score, while counts and velocity count events', async () => {
    const popular = await db.retrieve({ profile: 'popular' });
    expect(popular.items.map((i) => [i.id, i.score])).toEqual([
      ['heavy', 10],
      ['many', 3],
    ]);
    const trending = await db.retrieve({ profile: 'trending' });
    expect(trending.items.map((i) => [i.id, i.score])).toEqual([
      ['many', 3 / 3600],
      ['heavy', 1 / 3600],
    ]);
    expect(db.itemSignals('heavy').view!.count).toBe(1);
    expect(db.itemSignals('heavy').view!.score).toBe(10);
  });
});

describe('retrieve: new, filters, limit, explain', () => {
  let db: TidalDb;

  beforeAll(async () => {
    ({ db } = await openCorpusDb());
    await db.signals([
      ...events('j1', 'view', 5, NOW - MINUTE),
      ...events('r2', 'view', 4, NOW - MINUTE),
      ...events('p2', 'view', 3, NOW - MINUTE),
      ...events('c1', 'view', 2, NOW - MINUTE),
      ...events('j2', 'like', 1, NOW - MINUTE),
    ]);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('new orders by createdAt, newest first, and reports it as the score', async () => {
    const r = await db.retrieve({ profile: 'new' });
    expect(idsOf(r.items)).toEqual(byCreatedDesc(CORPUS));
    expect(idsOf(r.items)).toEqual(['r3', 'j2', 'r1', 'c2', 'p1', 'p2', 'j3', 'j1', 'r2', 'c1']);
    for (const item of r.items) {
      const c = CORPUS.find((x) => x.id === item.id)!;
      expect(item.createdAt).toBe(c.createdAt);
      expect(item.score).toBe(c.createdAt);
    }
    expectRanks(r.items);
  });

  it('filters on string equality', async () => {
    const r = await db.retrieve({ profile: 'new', filter: { category: 'jazz' } });
    expect(idsOf(r.items)).toEqual(byCreatedDesc(CORPUS.filter((c) => c.metadata.category === 'jazz')));
    expect(idsOf(r.items)).toEqual(['j2', 'j3', 'j1']);
    expectRanks(r.items);
    expect(r.explain.afterFilter).toBe(3);
  });

  it('filters on set membership', async () => {
    const r = await db.retrieve({ profile: 'new', filter: { category: { in: ['pop', 'classical'] } } });
    expect(idsOf(r.items)).toEqual(['c2', 'p1', 'p2', 'c1']);
    const unknown = await db.retrieve({ profile: 'new', filter: { category: { in: ['polka'] } } });
    expect(unknown.items).toEqual([]);
  });

  it('filters on a numeric range, bounds included or excluded as asked', async () => {
    const r = await db.retrieve({ profile: 'new', filter: { duration: { gte: 200, lt: 300 } } });
    // r1 (200) is in, j3 (300) is out.
    expect(idsOf(r.items)).toEqual(['r3', 'j2', 'r1', 'r2']);
    const strict = await db.retrieve({ profile: 'new', filter: { duration: { gt: 200, lte: 300 } } });
    expect(idsOf(strict.items)).toEqual(['r3', 'j2', 'j3', 'r2']);
    const exact = await db.retrieve({ profile: 'new', filter: { duration: 900 } });
    expect(idsOf(exact.items)).toEqual(['c1']);
  });

  it('filters on a createdAt range', async () => {
    const r = await db.retrieve({ profile: 'new', filter: { createdAt: { gte: NOW - 6 * HOUR } } });
    expect(idsOf(r.items)).toEqual(['r3', 'j2', 'r1', 'c2']);
    const window = await db.retrieve({ profile: 'new', filter: { createdAt: { gt: NOW - 5 * DAY, lt: NOW - 6 * HOUR } } });
    expect(idsOf(window.items)).toEqual(['p1', 'p2', 'j3']);
  });

  it('filters restrict the signal profiles too, and conditions combine', async () => {
    const all = await db.retrieve({ profile: 'popular' });
    expect(idsOf(all.items)).toEqual(['j1', 'r2', 'p2', 'c1', 'j2']);

    const rockOrPop = await db.retrieve({ profile: 'popular', filter: { category: { in: ['rock', 'pop'] } } });
    expect(idsOf(rockOrPop.items)).toEqual(['r2', 'p2']);
    const both = await db.retrieve({ profile: 'trending', filter: { category: { in: ['rock', 'pop'] }, duration: { lt: 200 } } });
    expect(idsOf(both.items)).toEqual(['p2']);
    const recent = await db.retrieve({ profile: 'trending', filter: { createdAt: { gte: NOW - 8 * DAY, lte: NOW - 4 * DAY } } });
    expect(idsOf(recent.items)).toEqual(['j1', 'r2']);
  });

  it('honours the limit and ranks 1..n', async () => {
    for (const limit of [1, 3, 7]) {
      const r = await db.retrieve({ profile: 'new', limit });
      expect(r.items).toHaveLength(limit);
      expect(idsOf(r.items)).toEqual(byCreatedDesc(CORPUS).slice(0, limit));
      expectRanks(r.items);
    }
    const popular = await db.retrieve({ profile: 'popular', limit: 2 });
    expect(idsOf(popular.items)).toEqual(['j1', 'r2']);
    // The default limit is 20: the whole ten-item corpus.
    expect((await db.retrieve({ profile: 'new' })).items).toHaveLength(10);
  });

  it('runs at Full and explains itself without a context vector', async () => {
    for (const profile of ['trending', 'popular', 'new'] as const) {
      const r = await db.retrieve({ profile });
      expect(r.degradationLevel).toBe(DegradationLevel.Full);
      expect(r.degradationLevel).toBe(0);
      expect(r.explain.annTopK).toBeNull();
      expect(r.explain.bm25Limit).toBeNull();
      expect(r.explain.windows).toBe('exact');
      expect(r.explain.diversityApplied).toBe(false);
      expect(r.warnings).toEqual([]);
      expect(r.tookMs).toBeGreaterThanOrEqual(0);
      for (const item of r.items) expect(item.similarity).toBeUndefined();
    }
    const diverse = await db.retrieve({ profile: 'new', diversity: { maxPer: { creator: 5 } } });
    expect(diverse.explain.diversityApplied).toBe(true);
  });

  it('with a context vector: annTopK 500 and a similarity per item', async () => {
    const context = [1, 0.2, 0.05, 0];
    const r = await db.retrieve({ profile: 'new', context });
    expect(r.degradationLevel).toBe(DegradationLevel.Full);
    expect(r.explain.annTopK).toBe(500);
    expect(r.explain.windows).toBe('exact');
    expect(r.explain.candidates).toBe(10);
    expect(idsOf(r.items)).toEqual(byCreatedDesc(CORPUS));
    for (const item of r.items) {
      const c = CORPUS.find((x) => x.id === item.id)!;
      // The index's int8 rows: within 1e-2 of the exact cosine (docs/api.md).
      expect(Math.abs(item.similarity! - cosine(context, c.embedding))).toBeLessThan(1e-2);
    }
  });
});

describe('retrieve: diversity', () => {
  let db: TidalDb;
  // Creator x has the five newest items, y the next three, z the oldest one.
  const fixture: ItemInput[] = [
    ['x1', 'x'],
    ['x2', 'x'],
    ['x3', 'x'],
    ['x4', 'x'],
    ['x5', 'x'],
    ['y1', 'y'],
    ['y2', 'y'],
    ['y3', 'y'],
    ['z1', 'z'],
  ].map(([id, creator], i) => ({
    id: id!,
    metadata: { creator: creator!, category: i % 2 === 0 ? 'even' : 'odd' },
    createdAt: NOW - i * HOUR,
  }));

  beforeAll(async () => {
    ({ db } = await openDb());
    await db.upsertItems(fixture);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('caps results per creator, skipping over-represented items in rank order', async () => {
    const r = await db.retrieve({ profile: 'new', limit: 5, diversity: { maxPer: { creator: 2 } } });
    expect(idsOf(r.items)).toEqual(['x1', 'x2', 'y1', 'y2', 'z1']);
    expectRanks(r.items);
    expect(r.warnings).toEqual([]);
    expect(r.explain.diversityApplied).toBe(true);

    const one = await db.retrieve({ profile: 'new', limit: 3, diversity: { maxPer: { creator: 1 } } });
    expect(idsOf(one.items)).toEqual(['x1', 'y1', 'z1']);
    expect(one.warnings).toEqual([]);
  });

  it('without diversity the newest creator takes over', async () => {
    const r = await db.retrieve({ profile: 'new', limit: 5 });
    expect(idsOf(r.items)).toEqual(['x1', 'x2', 'x3', 'x4', 'x5']);
    expect(r.explain.diversityApplied).toBe(false);
  });

  it('relaxes the cap with a warning rather than return fewer than the limit', async () => {
    const r = await db.retrieve({ profile: 'new', limit: 7, diversity: { maxPer: { creator: 2 } } });
    expect(r.items).toHaveLength(7);
    // The five that honour the cap keep the top, in rank order; the best skipped ones fill the rest.
    expect(idsOf(r.items)).toEqual(['x1', 'x2', 'y1', 'y2', 'z1', 'x3', 'x4']);
    expectRanks(r.items);
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toMatch(/diversity relaxed/);

    // Asking for everything returns everything.
    const all = await db.retrieve({ profile: 'new', limit: 20, diversity: { maxPer: { creator: 1 } } });
    expect(idsOf(all.items).sort()).toEqual(fixture.map((f) => f.id).sort());
    expect(all.warnings[0]).toMatch(/diversity relaxed/);
  });

  it('applies after the filter', async () => {
    const r = await db.retrieve({ profile: 'new', filter: { category: 'even' }, limit: 3, diversity: { maxPer: { creator: 1 } } });
    // even: x1, x3, x5, y2, z1
    expect(idsOf(r.items)).toEqual(['x1', 'y2', 'z1']);
    expect(r.warnings).toEqual([]);
  });
});

describe('retrieve: around a context vector', () => {
  let db: TidalDb;
  const NEAR = 700;
  const context = [1, 0, 0, 0];
  // Near item i is (127, x, y, z) with whole x, y, z, in a direction of its own, x² + y² + z² growing
  // with i: similarity to the context falls strictly with i, by at least 2.8e-5. Whole numbers up to
  // 127 are what the ANN index holds exactly (int8 rows scaled by their largest component), so its
  // similarities are the exact ones and can tell these items apart.
  const near: ItemInput[] = [];
  const rand = mulberry32(42);
  const sign = () => (rand() < 0.5 ? -1 : 1);
  for (let m = 1, i = 0; i < NEAR; m++) {
    let xyz: number[] | null = null;
    for (let x = 0; x * x <= m && xyz === null; x++) {
      for (let y = 0; x * x + y * y <= m; y++) {
        const z = Math.sqrt(m - x * x - y * y);
        if (Number.isInteger(z)) {
          xyz = [x, y, z];
          break;
        }
      }
    }
    if (xyz === null) continue; // m = 4^a(8b + 7): not a sum of three squares
    const turn = Math.floor(rand() * 3);
    const [x, y, z] = [xyz[turn % 3]!, xyz[(turn + 1) % 3]!, xyz[(turn + 2) % 3]!];
    near.push({
      id: `n${i}`,
      embedding: [127, sign() * x, sign() * y, sign() * z],
      metadata: { creator: `creator-${i % 50}`, category: 'near' },
      createdAt: NOW - (i + 1) * MINUTE,
    });
    i++;
  }
  // Opposite the context, newest of all and the most engaged: it wins every profile over the
  // whole corpus, but it is not among the 500 nearest neighbours of the context.
  const far: ItemInput = { id: 'far', embedding: [-1, 0.05, 0.02, 0.01], metadata: { creator: 'far', category: 'far' }, createdAt: NOW };

  beforeAll(async () => {
    ({ db } = await openDb());
    await db.upsertItems([...near, far]);
    await db.signals([
      ...events('far', 'view', 50, NOW - MINUTE),
      ...events('far', 'like', 50, NOW - MINUTE),
      ...events('n5', 'view', 3, NOW - MINUTE),
      ...events('n17', 'view', 2, NOW - MINUTE),
      ...events('n100', 'view', 1, NOW - MINUTE),
    ]);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('without a context the far item wins every profile', async () => {
    for (const profile of ['trending', 'popular', 'new'] as const) {
      const r = await db.retrieve({ profile, limit: 3 });
      expect(r.items[0]!.id).toBe('far');
    }
  });

  it('ranks only the ANN neighbours of the context', async () => {
    for (const profile of ['trending', 'popular'] as const) {
      const r = await db.retrieve({ profile, context, limit: 3 });
      expect(idsOf(r.items)).toEqual(['n5', 'n17', 'n100']);
      expect(r.explain.annTopK).toBe(500);
      expect(r.explain.candidates).toBe(500);
      expect(r.degradationLevel).toBe(DegradationLevel.Full);
    }
    const newest = await db.retrieve({ profile: 'new', context, limit: 3 });
    expect(idsOf(newest.items)).toEqual(['n0', 'n1', 'n2']);

    const wide = await db.retrieve({ profile: 'popular', context, limit: 1000 });
    expect(wide.items).toHaveLength(500);
    expect(idsOf(wide.items)).not.toContain('far');
  });

  it('keeps items the profile cannot tell apart in similarity order, and reports the similarity', async () => {
    const r = await db.retrieve({ profile: 'popular', context, limit: 40 });
    expect(idsOf(r.items.slice(0, 3))).toEqual(['n5', 'n17', 'n100']);
    const rest = r.items.slice(3);
    for (let i = 1; i < rest.length; i++) expect(rest[i - 1]!.similarity!).toBeGreaterThanOrEqual(rest[i]!.similarity!);
    for (const item of r.items) {
      const input = near.find((n) => n.id === item.id)!;
      expect(item.similarity).toBeCloseTo(cosine(context, input.embedding as number[]), 5);
    }
    // The unsignalled ones are exactly the most similar near items, most similar first.
    const expected = near
      .map((n) => n.id)
      .filter((id) => !['n5', 'n17', 'n100'].includes(id))
      .slice(0, rest.length);
    expect(idsOf(rest)).toEqual(expected);
  });

  it('combines a context with a filter and diversity', async () => {
    const r = await db.retrieve({ profile: 'popular', context, filter: { category: 'far' } });
    expect(r.items).toEqual([]);
    const d = await db.retrieve({ profile: 'new', context, limit: 10, diversity: { maxPer: { creator: 1 } } });
    expect(new Set(d.items.map((i) => i.id)).size).toBe(10);
    expect(d.explain.diversityApplied).toBe(true);
    expect(d.warnings).toEqual([]);
    expect(idsOf(d.items)).not.toContain('far');
  });
});
