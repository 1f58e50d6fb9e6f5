import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DegradationLevel, TidalDb, type RetrieveResults, type SignalValues } from 'tidal-core';

/*
 * The seed's rule for CoarseAggregates (and NoDiversity below it): windowed count reads give the
 * all-time count and velocity reads the 24h window, `trending` over 1h included (docs/api.md,
 * "ranks by the 24h window whatever `window` says"), at a cost no higher than ReducedCandidates'.
 */

const NOW = Date.UTC(2026, 5, 1, 12);
const MIN = 60_000;
const HOUR = 60 * MIN;
const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;
const schema = {
  signals: [{ name: 'view', halfLifeMs: 6 * HOUR, velocity: true, windows: ['1h', '24h', '7d', 'all'] as const }],
  metadata: { category: 'string' as const },
};

async function openDb(configure: (b: ReturnType<typeof TidalDb.builder>) => ReturnType<typeof TidalDb.builder> = (b) => b) {
  return configure(
    TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(schema),
  ).open();
}

/** The minimal case: A has 50 views 5 h ago, B 3 views 10 minutes ago, both in one category. */
async function seedMinimal(db: TidalDb): Promise<void> {
  await db.upsertItems([
    { id: 'A', text: 'tide report', metadata: { category: 'news' }, createdAt: NOW - 6 * HOUR },
    { id: 'B', text: 'tide chart', metadata: { category: 'news' }, createdAt: NOW - 6 * HOUR },
  ]);
  const signals = [];
  for (let i = 0; i < 50; i++) signals.push({ item: 'A', kind: 'view', at: NOW - 5 * HOUR });
  for (let i = 0; i < 3; i++) signals.push({ item: 'B', kind: 'view', at: NOW - 10 * MIN });
  await db.signals(signals);
}

const NAMES = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
const coarse = (level: DegradationLevel): boolean => level >= DegradationLevel.CoarseAggregates;

/** What the rule says an item's 1h reads are, from its own exact windows (read at Full). */
function expected1h(exact: SignalValues, level: DegradationLevel): { count: number; velocity: number } {
  return coarse(level)
    ? { count: exact.count, velocity: exact.windows['24h']! / 86_400 }
    : { count: exact.windows['1h']!, velocity: exact.windows['1h']! / 3_600 };
}

describe('CoarseAggregates through the load: the issue’s minimal case', () => {
  let db: TidalDb;
  beforeAll(async () => {
    db = await openDb((b) => b.loadThresholds({ reducedCandidates: 2, coarseAggregates: 4, noDiversity: 8 }).admissionLimit(16));
    await seedMinimal(db);
  });
  afterAll(() => db.close());

  it('ranks trending over 1h by the 24h velocity once three queries are held in flight', async () => {
    const query = { profile: 'trending' as const, window: '1h' as const, filter: { category: 'news' }, limit: 2 };
    // Issued in one tick: the fourth enters with three others in flight.
    const pending: Promise<RetrieveResults>[] = [];
    for (let i = 0; i < 4; i++) pending.push(db.retrieve(query));
    const results = await Promise.all(pending);
    const full = results[0]!;
    const atCoarse = results[3]!;
    expect(full.degradationLevel).toBe(DegradationLevel.Full);
    expect(atCoarse.degradationLevel).toBe(DegradationLevel.CoarseAggregates);
    // Full: by the last hour, B (3 views) leads; A has none in the hour.
    expect(full.items.map((i) => i.id)).toEqual(['B', 'A']);
    // CoarseAggregates: by the 24h window, A (50 views) leads B (3), and reads its all-time 50.
    expect(atCoarse.explain.velocityWindow).toBe('24h');
    expect(atCoarse.items.map((i) => i.id)).toEqual(['A', 'B']);
    expect(atCoarse.items.map((i) => i.score)).toEqual([50 / 86_400, 3 / 86_400]);
    expect(atCoarse.items[0]!.signals.view!.windows['1h']).toBe(50);
  });
});

describe('the window and velocity rule at each level', () => {
  let db: TidalDb;
  let exact: Map<string, SignalValues>;
  beforeAll(async () => {
    db = await openDb();
    await seedMinimal(db);
    // C: 2 views in the hour and 20 three days ago, so its all-time, 24h and 1h counts all differ.
    await db.upsertItems([{ id: 'C', text: 'tide table', metadata: { category: 'news' }, createdAt: NOW - 96 * HOUR }]);
    const signals = [];
    for (let i = 0; i < 2; i++) signals.push({ item: 'C', kind: 'view', at: NOW - 20 * MIN });
    for (let i = 0; i < 20; i++) signals.push({ item: 'C', kind: 'view', at: NOW - 72 * HOUR });
    await db.signals(signals);
    exact = new Map();
    for (const id of ['A', 'B', 'C']) exact.set(id, db.itemSignals(id).view!);
  });
  afterAll(() => db.close());

  const check = (level: DegradationLevel, items: readonly { id: string; signals: Record<string, SignalValues> }[]) => {
    expect(items.length).toBe(3);
    for (const item of items) {
      const want = expected1h(exact.get(item.id)!, level);
      const view = item.signals.view!;
      expect(view.windows['1h'], `${item.id} at level ${level}`).toBe(want.count);
      expect(view.velocity!['1h'], `${item.id} at level ${level}`).toBe(want.velocity);
    }
  };

  it('holds the exact reads the test relies on', () => {
    expect(exact.get('C')!.count).toBe(22);
    expect(exact.get('C')!.windows['24h']).toBe(2);
    expect(exact.get('A')!.windows['1h']).toBe(0);
  });

  for (const level of LEVELS) {
    it(`trending over 1h at ${NAMES[level]}: ranks by ${coarse(level) ? '24h' : '1h'} velocity`, async () => {
      const r = await db.retrieve({ profile: 'trending', window: '1h', filter: { category: 'news' }, limit: 3, level });
      expect(r.degradationLevel).toBe(level);
      expect(r.explain.windows).toBe(coarse(level) ? 'all-time' : 'exact');
      expect(r.explain.velocityWindow).toBe(coarse(level) ? '24h' : '1h');
      check(level, r.items);
      // The score is the velocity the rule reads; B 3 and C 2 in the hour; A 50, B 3, C 2 in the day.
      expect(r.items.map((i) => i.id)).toEqual(coarse(level) ? ['A', 'B', 'C'] : ['B', 'C', 'A']);
      for (const i of r.items) if (i.score > 0) expect(i.score).toBe(i.signals.view!.velocity!['1h']);
    });

    it(`popular at ${NAMES[level]}: the same ranking, the level's windowed reads`, async () => {
      const r = await db.retrieve({ profile: 'popular', window: '1h', limit: 3, level });
      expect(r.degradationLevel).toBe(level);
      expect(r.explain.windows).toBe(coarse(level) ? 'all-time' : 'exact');
      check(level, r.items);
      expect(r.items.map((i) => i.id)).toEqual(['A', 'B', 'C']);
    });

    it(`search at ${NAMES[level]}: the level's windowed reads on every hit`, async () => {
      const r = await db.search({ text: 'tide', boost: 1, limit: 3, level });
      expect(r.degradationLevel).toBe(level);
      expect(r.explain.windows).toBe(coarse(level) ? 'all-time' : 'exact');
      expect(r.explain.velocityWindow).toBe(coarse(level) ? '24h' : '1h');
      check(level, r.hits);
    });
  }
});

describe('the cost rule: no level dearer than the one above, CoarseAggregates no dearer than ReducedCandidates', () => {
  // A busy hour and a busier day: 300 items with a view in the last hour and 300 more over the
  // day, each of those past ReducedCandidates' trending budget (256), so walking the day's active
  // slots (or the hour's) in full would show.
  let db: TidalDb;
  beforeAll(async () => {
    db = await openDb();
    const items = [];
    const signals = [];
    for (let i = 0; i < 600; i++) {
      items.push({
        id: `bg-${i}`,
        text: `tide note ${i % 7 === 0 ? 'swell' : 'calm'}`,
        metadata: { category: `c${i % 3}` },
        createdAt: NOW - 48 * HOUR,
      });
      const at = i < 300 ? NOW - (i % 55) * MIN - MIN : NOW - 2 * HOUR - (i % 21) * HOUR;
      for (let k = 0; k <= i % 4; k++) signals.push({ item: `bg-${i}`, kind: 'view', at });
    }
    await db.upsertItems(items);
    await db.signals(signals);
  });
  afterAll(() => db.close());

  it('trending over 1h reads no more slots at each level, and ranks what it read by the level’s velocity', async () => {
    for (const filter of [undefined, { category: 'c1' }]) {
      const results = [];
      for (const level of LEVELS)
        results.push(await db.retrieve({ profile: 'trending', window: '1h', ...(filter ? { filter } : {}), limit: 10, level }));
      const visited = results.map((r) => r.explain.slotsVisited!);
      const label = `${filter ? 'filtered' : 'unfiltered'}: ${visited.join(' ≥ ')}`;
      for (let l = 1; l < LEVELS.length; l++) expect(visited[l]!, label).toBeLessThanOrEqual(visited[l - 1]!);
      // The day holds 600 active slots: CoarseAggregates reads its budget's worth, not the day.
      expect(visited[DegradationLevel.CoarseAggregates]!, label).toBeLessThan(visited[DegradationLevel.ReducedCandidates]!);
      for (const [l, r] of results.entries()) {
        for (const i of r.items) expect(i.score, `level ${l}`).toBe(i.signals.view!.velocity!['1h']);
        for (let j = 1; j < r.items.length; j++) expect(r.items[j]!.score).toBeLessThanOrEqual(r.items[j - 1]!.score);
      }
    }
  });

  it('popular reads no more slots at each level', async () => {
    const visited = [];
    for (const level of LEVELS) visited.push((await db.retrieve({ profile: 'popular', limit: 10, level })).explain.slotsVisited!);
    for (let l = 1; l < LEVELS.length; l++) expect(visited[l]!, visited.join(' ≥ ')).toBeLessThanOrEqual(visited[l - 1]!);
  });

  it('search scores no more postings at each level', async () => {
    const scored = [];
    for (const level of LEVELS) {
      const r = await db.search({ text: 'tide swell', boost: 1, diversity: { maxPer: { category: 4 } }, limit: 10, level });
      scored.push(r.explain.postingsScored!);
    }
    for (let l = 1; l < LEVELS.length; l++) expect(scored[l]!, scored.join(' ≥ ')).toBeLessThanOrEqual(scored[l - 1]!);
  });
});
