import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  DegradationLevel,
  InvalidInputError,
  OverloadedError,
  TidalDb,
  TidalError,
  autoAdmissionLimit,
  type RetrieveResults,
  type SearchResults,
} from 'tidal-core';

const NOW = Date.UTC(2026, 5, 1, 12);
const HOUR = 3_600_000;
const schema = {
  signals: [{ name: 'view', halfLifeMs: 6 * HOUR, velocity: true, windows: ['1h', '24h', '7d', 'all'] as const }],
  metadata: { creator: 'string' as const },
  embeddingDims: 4,
};

async function seed(db: TidalDb): Promise<void> {
  // 12 items from 3 creators; item-i gets i views 3 hours ago (outside 1h, inside 24h) and one
  // view now for even i, so the 1h and 24h windows and all-time counts all differ.
  const items = Array.from({ length: 12 }, (_, i) => ({
    id: `item-${i}`,
    text: `song number ${i} jazz`,
    embedding: [1, i / 12, 0, 0.1],
    metadata: { creator: `c${i % 3}` },
    createdAt: NOW - i * 1000,
  }));
  await db.upsertItems(items);
  const signals = [];
  for (let i = 0; i < 12; i++) {
    for (let k = 0; k < i; k++) signals.push({ item: `item-${i}`, kind: 'view', at: NOW - 3 * HOUR });
    if (i % 2 === 0) signals.push({ item: `item-${i}`, kind: 'view', at: NOW - 60_000 });
  }
  await db.signals(signals);
}

describe('degradation levels through the executors', () => {
  // A database and a registry of its own per test: no test reads what another one's queries left
  // (counters, the level, a shared result), so each passes alone and in any order.
  let db: TidalDb;
  let registry: Registry;
  beforeEach(async () => {
    registry = new Registry();
    db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(schema)
      .loadThresholds({ reducedCandidates: 2, coarseAggregates: 3, noDiversity: 4 })
      .admissionLimit(6)
      .metrics(registry)
      .open();
    await seed(db);
  });
  afterEach(() => db.close());

  it('goes Full → ReducedCandidates → CoarseAggregates → NoDiversity as queries pile up, and back to Full', async () => {
    // Issued in one tick, before any completes: the n-th query enters with n in flight.
    const pending: Promise<RetrieveResults>[] = [];
    for (let i = 0; i < 5; i++) {
      pending.push(db.retrieve({ profile: 'trending', context: [1, 0.5, 0, 0.1], diversity: { maxPer: { creator: 1 } }, limit: 6 }));
    }
    expect(db.load.inFlight).toBe(5);
    const results = await Promise.all(pending);
    expect(results.map((r) => r.degradationLevel)).toEqual([0, 1, 2, 3, 3]);
    expect(results.map((r) => r.explain.annTopK)).toEqual([500, 200, 100, 64, 64]);
    expect(results.map((r) => r.explain.windows)).toEqual(['exact', 'exact', 'all-time', 'all-time', 'all-time']);
    expect(results.map((r) => r.explain.velocityWindow)).toEqual(['1h', '1h', '24h', '24h', '24h']);
    expect(results.map((r) => r.explain.diversityApplied)).toEqual([true, true, true, false, false]);
    expect(db.load.inFlight).toBe(0);
    const after = await db.retrieve({ profile: 'trending' });
    expect(after.degradationLevel).toBe(DegradationLevel.Full);
  });

  it('makes each level visible in the results themselves', async () => {
    const pending: Promise<RetrieveResults>[] = [];
    for (let i = 0; i < 4; i++) pending.push(db.retrieve({ profile: 'trending', diversity: { maxPer: { creator: 1 } }, limit: 6 }));
    const [full, reduced, coarse, noDiv] = await Promise.all(pending);
    // Full: 1h velocity — only the even items had a view in the last hour, one each: a tie broken
    // by decayed score, so item-10 leads.
    expect(full!.items[0]!.id).toBe('item-10');
    expect(full!.items[0]!.signals.view!.windows['1h']).toBe(1);
    expect(reduced!.items[0]!.signals.view!.windows['1h']).toBe(1);
    // CoarseAggregates: windowed reads are the all-time count and velocity comes from the 24h
    // window, whatever the hour says: item-10 (10 + 1 views) and item-11 (11 views, none in the
    // last hour) tie at 11, item-10 ahead by its decayed score (its view of the last minute).
    expect(coarse!.items[0]!.signals.view!.windows['1h']).toBe(coarse!.items[0]!.signals.view!.count);
    expect(coarse!.items[0]!.score).toBeCloseTo(11 / 86_400, 12);
    expect(coarse!.items.map((i) => i.id).slice(0, 2)).toEqual(['item-10', 'item-11']);
    expect(coarse!.items[1]!.score).toBe(coarse!.items[0]!.score);
    // Diversity on: one per creator, relaxed with a warning to fill the limit; off: no warning.
    expect(full!.warnings.some((w) => w.includes('diversity relaxed'))).toBe(true);
    expect(new Set(full!.items.slice(0, 3).map((i) => Number(i.id.split('-')[1]) % 3)).size).toBe(3);
    expect(full!.items.slice(0, 3).map((i) => i.id)).toEqual(['item-10', 'item-8', 'item-6']);
    expect(noDiv!.explain.diversityApplied).toBe(false);
    expect(noDiv!.warnings.some((w) => w.includes('diversity'))).toBe(false);
  });

  it('halves the BM25 candidate limit at each level from ReducedCandidates on, in search', async () => {
    const pending: Promise<SearchResults>[] = [];
    for (let i = 0; i < 4; i++) pending.push(db.search({ text: 'jazz song', vector: [1, 0, 0, 0], limit: 3 }));
    const results = await Promise.all(pending);
    expect(results.map((r) => r.degradationLevel)).toEqual([0, 1, 2, 3]);
    expect(results.map((r) => r.explain.bm25Limit)).toEqual([200, 100, 50, 25]);
    expect(results.map((r) => r.explain.annTopK)).toEqual([500, 200, 100, 64]);
    for (const r of results) expect(r.hits).toHaveLength(3);
  });

  it('refuses past the admission cap at once while the admitted queries complete, and leaks nothing', async () => {
    const before = db.stats();
    const calls = Array.from({ length: 10 }, () =>
      db.retrieve({ profile: 'popular', limit: 3 }).then(
        (r) => r,
        (e: unknown) => e,
      ),
    );
    // The refusals settle before the event loop turns even once: no worker, no queue involved.
    const order: string[] = [];
    const settledEarly = Promise.race([
      Promise.all(calls.slice(6)).then(() => order.push('refusals')),
      new Promise((r) => setImmediate(r)).then(() => order.push('immediate')),
    ]);
    await settledEarly;
    expect(order[0]).toBe('refusals');
    const outcomes = await Promise.all(calls);
    const refused = outcomes.filter((o): o is OverloadedError => o instanceof OverloadedError);
    const served = outcomes.filter((o) => !(o instanceof Error)) as RetrieveResults[];
    expect(refused).toHaveLength(4);
    expect(served).toHaveLength(6);
    for (const s of served) expect(s.items).toHaveLength(3);
    for (const r of refused) {
      expect(r.code).toBe('TIDAL_OVERLOADED');
      expect(r.admissionLimit).toBe(6);
      expect(r.inFlight).toBe(6);
      expect(r.retryAfterMs).toBeGreaterThanOrEqual(1);
    }
    expect(db.load.inFlight).toBe(0);
    const after = db.stats();
    expect(after.rejected - before.rejected).toBe(4);
    const servedNow = Object.values(after.served).reduce((a, b) => a + b, 0) - Object.values(before.served).reduce((a, b) => a + b, 0);
    expect(servedNow).toBe(6);
    expect(after.inFlight).toBe(0);
    expect(after.level).toBe('Full');
    expect(after.latencyMs.samples).toBeGreaterThan(0);
    expect(after.writes.depth).toBe(0);
    expect(after.writes.committedEvents).toBeGreaterThan(0);
    expect(after.writes.queueLimit).toBeGreaterThan(0);
  });

  it('does not count invalid queries as in flight once they are refused', async () => {
    await expect(db.retrieve({ profile: 'popular', limit: 0 })).rejects.toBeInstanceOf(InvalidInputError);
    expect(db.load.inFlight).toBe(0);
  });

  it('exports the figures as Prometheus metrics', async () => {
    // Four searches at once run at the four levels; ten retrieves at once past the cap of 6 leave four refused.
    await Promise.all(Array.from({ length: 4 }, () => db.search({ text: 'jazz song', vector: [1, 0, 0, 0], limit: 3 })));
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, () => db.retrieve({ profile: 'popular', limit: 3 }).catch((e: unknown) => e)),
    );
    expect(outcomes.filter((o) => o instanceof OverloadedError)).toHaveLength(4);
    const text = await registry.metrics();
    expect(text).toMatch(/tidal_queries_total\{level="Full",op="retrieve"\} \d+/);
    expect(text).toMatch(/tidal_queries_total\{level="NoDiversity",op="search"\} 1/);
    expect(text).toMatch(/tidal_queries_rejected_total 4/);
    expect(text).toMatch(/tidal_queries_in_flight 0/);
    expect(text).toMatch(/tidal_degradation_level 0/);
    expect(text).toMatch(/tidal_query_duration_seconds_count\{op="search"\} 4/);
  });

  it('refuses with a real OverloadedError that carries no stack frames, as a rejected promise, never a throw', async () => {
    // Six different queries: identical ones in flight could share one answer, which frees its slots at once.
    const admitted = Array.from({ length: 6 }, (_, i) => db.retrieve({ profile: 'new', limit: 100 + i }));
    let returned: Promise<RetrieveResults> | undefined;
    expect(() => {
      returned = db.retrieve({ profile: 'popular' });
    }).not.toThrow();
    const err = await returned!.catch((e: unknown) => e);
    await Promise.all(admitted);
    expect(err).toBeInstanceOf(OverloadedError);
    expect(err).toBeInstanceOf(TidalError);
    expect(err).toBeInstanceOf(Error);
    expect(OverloadedError.is(err) && TidalError.is(err)).toBe(true);
    const e = err as OverloadedError;
    expect([e.code, e.name, e.inFlight, e.admissionLimit]).toEqual(['TIDAL_OVERLOADED', 'OverloadedError', 6, 6]);
    expect(e.message).toMatch(/^overloaded: 6 queries in flight, admission limit 6; retry after \d+ ms$/);
    // Name and message only: capturing the frames was most of a refusal's cost.
    expect(e.stack).toBe(`OverloadedError: ${e.message}`);
    // Other errors still have their stack.
    expect(new InvalidInputError('limit', 'a number', 'x').stack).toMatch(/\n\s+at /);
  });
});

describe('load management options', () => {
  const base = () => TidalDb.builder().ephemeral().workers(1).schema(schema);

  it('with load management off, every query runs at Full and none is refused', async () => {
    const db = await base().loadManagement(false).open();
    try {
      const results = await Promise.all(Array.from({ length: 40 }, () => db.retrieve({ profile: 'new', limit: 1 })));
      expect(new Set(results.map((r) => r.degradationLevel))).toEqual(new Set([DegradationLevel.Full]));
      expect(db.stats().rejected).toBe(0);
    } finally {
      await db.close();
    }
  });

  it('refuses to open with invalid thresholds or admission limits, naming them', async () => {
    await expect(base().loadThresholds({ reducedCandidates: 10, coarseAggregates: 5 }).open()).rejects.toThrow(
      /loadThresholds.coarseAggregates must be greater than the previous threshold \(10\).*got 5 \(number\)/,
    );
    await expect(base().loadThresholds({ noDiversity: 0.5 }).open()).rejects.toBeInstanceOf(InvalidInputError);
    await expect(base().admissionLimit(1.5).open()).rejects.toThrow(/admissionLimit must be/);
    await expect(base().admissionLimit(100).open()).rejects.toThrow(/above loadThresholds.noDiversity \(128\)/);
    await expect(
      base()
        .admissionLimit('many' as unknown as number)
        .open(),
    ).rejects.toBeInstanceOf(InvalidInputError);
  });

  it("resolves admissionLimit 'auto' from the thresholds and the pool size", async () => {
    expect(autoAdmissionLimit({ reducedCandidates: 32, coarseAggregates: 64, noDiversity: 128 }, 2)).toBe(512);
    expect(autoAdmissionLimit({ reducedCandidates: 200, coarseAggregates: 500, noDiversity: 1000 }, 2)).toBe(1384);
    const db = await base().open();
    try {
      expect(db.load.admissionLimit).toBe(autoAdmissionLimit(db.load.thresholds, 1));
      expect(db.load.thresholds).toEqual({ reducedCandidates: 32, coarseAggregates: 64, noDiversity: 128 });
    } finally {
      await db.close();
    }
  });
});
