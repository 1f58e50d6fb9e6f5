/**
 * Admission, scheduling and work sharing through a real database. The only worker's whole
 * pipeline is held with blocking fault tasks, so every query issued meanwhile waits in the
 * scheduler, and what happens to it is decided by the test's order of events, not by timing.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { AbortedError, DegradationLevel, InvalidInputError, OverloadedError, TimeoutError } from 'tidal-load';
import { TidalDb, internalsOf } from '../src/db.js';
import type { RetrieveResults } from '../src/types.js';

const NOW = Date.UTC(2025, 0, 1);
const HOUR = 3_600_000;
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: HOUR, velocity: true, windows: ['1h', '24h', 'all'] as const }] };

/** Fills the pool's whole pipeline with blocking tasks; `release` lets them go and waits for the queue to drain. */
function holdPipeline(db: TidalDb): { release: () => Promise<void> } {
  const pool = internalsOf(db).pool;
  const gate = new SharedArrayBuffer(4);
  const held = Array.from({ length: pool.depth }, () => pool.run({ op: 'fault', mode: 'block', gate }));
  const release = async () => {
    const cell = new Int32Array(gate);
    Atomics.store(cell, 0, 1);
    Atomics.notify(cell, 0);
    await Promise.all(held);
    await pool.drain();
  };
  // A failed assertion must not leave the worker held for the tests after it.
  onTestFinished(release);
  return { release };
}

async function open(
  configure: (b: ReturnType<typeof TidalDb.builder>) => ReturnType<typeof TidalDb.builder> = (b) => b,
  clock: () => number = () => NOW,
): Promise<TidalDb> {
  const db = await configure(TidalDb.builder().ephemeral().schema(SCHEMA).workers(1).clock(clock)).open();
  await db.upsertItems([
    { id: 'a', text: 'alpha' },
    { id: 'b', text: 'beta' },
    { id: 'c', text: 'gamma' },
  ]);
  await db.signals([
    { item: 'a', kind: 'view' },
    { item: 'a', kind: 'view' },
    { item: 'b', kind: 'view' },
  ]);
  return db;
}

describe('the scheduler in front of the workers', () => {
  let db: TidalDb;
  beforeAll(async () => {
    db = await open();
  });
  afterAll(() => db.close());

  it('runs waiting queries by criticality: critical, then default, then sheddable, each in arrival order', async () => {
    const hold = holdPipeline(db);
    const order: string[] = [];
    const q = (name: string, criticality: 'critical' | 'default' | 'sheddable' | undefined, limit: number) =>
      db.retrieve({ profile: 'popular', limit, ...(criticality === undefined ? {} : { criticality }) }).then((r) => {
        order.push(name);
        return r;
      });
    const all = [
      q('shed-1', 'sheddable', 1),
      q('default-1', undefined, 2),
      q('critical-1', 'critical', 3),
      q('default-2', 'default', 1),
      q('shed-2', 'sheddable', 2),
      q('critical-2', 'critical', 1),
    ];
    expect(internalsOf(db).pool.scheduler.waiting).toBe(6);
    expect(db.stats().queued).toBe(6);
    await hold.release();
    await Promise.all(all);
    // One worker runs its pipeline in order, so results come back in the order they left the queue.
    expect(order).toEqual(['critical-1', 'critical-2', 'default-1', 'default-2', 'shed-1', 'shed-2']);
  });

  it('queries aborted or timed out while they wait leave the queue and never reach a worker', async () => {
    const pool = internalsOf(db).pool;
    const before = { posted: pool.posted, dropped: pool.scheduler.dropped, skipped: db.stats().cancelledBeforeRun };
    const hold = holdPipeline(db);
    const controller = new AbortController();
    const aborted = db.retrieve({ profile: 'popular', limit: 1, signal: controller.signal });
    const timedOut = db.search({ text: 'alpha', timeoutMs: 1 });
    const kept = db.retrieve({ profile: 'popular', limit: 2 });
    expect(pool.scheduler.waiting).toBe(3);
    controller.abort();
    await expect(aborted).rejects.toBeInstanceOf(AbortedError);
    await expect(timedOut).rejects.toBeInstanceOf(TimeoutError);
    expect(pool.scheduler.waiting).toBe(1);
    // They left the queue: their in-flight slots are free before the workers are.
    expect(db.load.inFlight).toBe(1);
    await hold.release();
    expect((await kept).items.map((x) => x.id)).toEqual(['a', 'b']);
    expect(pool.posted - before.posted).toBe(1);
    expect(pool.scheduler.dropped - before.dropped).toBe(2);
    expect(db.stats().cancelledBeforeRun - before.skipped).toBe(2);
    expect(db.load.inFlight).toBe(0);
  });
});

describe('criticality and the level option', () => {
  let db: TidalDb;
  beforeAll(async () => {
    db = await open((b) => b.loadThresholds({ reducedCandidates: 2, coarseAggregates: 3, noDiversity: 4 }).admissionLimit(8));
  });
  afterAll(() => db.close());

  it('refuses a sheddable query before a default one at the same load', async () => {
    const hold = holdPipeline(db);
    const admitted = [1, 2, 3, 4].map((limit) => db.retrieve({ profile: 'popular', limit }));
    expect(db.load.inFlight).toBe(4);
    // The fifth query: a sheddable one is judged by twice the count (10 > 8), a default one by 5.
    const shed = await db.retrieve({ profile: 'popular', criticality: 'sheddable' }).catch((e: unknown) => e);
    expect(shed).toBeInstanceOf(OverloadedError);
    expect(shed).toMatchObject({ code: 'TIDAL_OVERLOADED', inFlight: 4, admissionLimit: 8 });
    const dflt = db.retrieve({ profile: 'popular', limit: 3, criticality: 'default' });
    expect(db.load.inFlight).toBe(5);
    await hold.release();
    await Promise.all([...admitted, dflt]);
    expect(db.load.inFlight).toBe(0);
  });

  it('degrades a sheddable query as if twice as many queries were in flight, and says so', async () => {
    const alone = await db.search({ text: 'alpha', boost: 1, criticality: 'sheddable' });
    // 1 in flight, judged as 2: ReducedCandidates, which halves the BM25 depth.
    expect(alone).toMatchObject({ degradationLevel: DegradationLevel.ReducedCandidates, levelReason: 'criticality' });
    const dflt = await db.search({ text: 'alpha', boost: 1 });
    expect(dflt).toMatchObject({ degradationLevel: DegradationLevel.Full, levelReason: 'load' });
    expect(alone.explain.bm25Limit).toBe(dflt.explain.bm25Limit! / 2);
  });

  it("reports the worker's service time on explain: the execution alone, within the call's own time", async () => {
    const r = await db.retrieve({ profile: 'trending' });
    const s = await db.search({ text: 'alpha' });
    for (const x of [r, s]) {
      expect(x.explain.serviceMs).toEqual(expect.any(Number));
      expect(x.explain.serviceMs!).toBeGreaterThan(0);
      expect(x.explain.serviceMs!).toBeLessThanOrEqual(x.tookMs);
    }
  });

  it('runs at the level asked for or a cheaper one the load requires, never a better one', async () => {
    const asked = await db.retrieve({ profile: 'trending', level: 'CoarseAggregates' });
    expect(asked).toMatchObject({ degradationLevel: DegradationLevel.CoarseAggregates, levelReason: 'requested' });
    expect(asked.explain.windows).toBe('all-time');
    expect((await db.search({ text: 'alpha', level: DegradationLevel.NoDiversity })).explain.diversityApplied).toBe(false);
    const hold = holdPipeline(db);
    const pending: Promise<RetrieveResults>[] = [];
    // In flight at entry: 1, 2, 3 → the load gives Full, ReducedCandidates, CoarseAggregates.
    pending.push(db.retrieve({ profile: 'trending', limit: 1, level: 'ReducedCandidates' }));
    pending.push(db.retrieve({ profile: 'trending', limit: 2, level: 'Full' }));
    pending.push(db.retrieve({ profile: 'trending', limit: 3, level: 'ReducedCandidates' }));
    await hold.release();
    const [a, b, c] = await Promise.all(pending);
    expect([a, b, c].map((r) => [r!.degradationLevel, r!.levelReason])).toEqual([
      [DegradationLevel.ReducedCandidates, 'requested'],
      [DegradationLevel.ReducedCandidates, 'load'],
      [DegradationLevel.CoarseAggregates, 'load'],
    ]);
    expect(c!.explain.windows).toBe('all-time');
  });

  it('refuses a criticality or level it does not know, naming the field', async () => {
    for (const criticality of ['urgent', 1, null, 'Critical']) {
      await expect(db.retrieve({ profile: 'new', criticality: criticality as 'critical' })).rejects.toMatchObject({
        code: 'TIDAL_INVALID_INPUT',
        field: 'criticality',
      });
    }
    for (const level of [4, -1, 1.5, 'Fast', 'full', null, Number.NaN]) {
      const err = await db.search({ text: 'alpha', level: level as DegradationLevel }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect(err).toMatchObject({ field: 'level' });
    }
    expect(db.load.inFlight).toBe(0);
  });
});

describe('deadlines choose the level', () => {
  let db: TidalDb;
  beforeAll(async () => {
    db = await open();
  });
  afterAll(() => db.close());

  it('runs a query at the best level whose measured service time fits its timeoutMs', async () => {
    const recorder = internalsOf(db).recorder;
    // Measured service times per level (what the worker reported for earlier queries).
    // Wide margins between the estimates and the budgets: the budget that is left when the level is
    // chosen also falls by the time the query waited, which on a busy machine can be tens of ms.
    const measured = [600, 350, 120, 4];
    for (let i = 0; i < 64; i++) for (const level of [0, 1, 2, 3] as const) recorder.record(level, measured[level]!, measured[level]!);
    const roomy = await db.retrieve({ profile: 'trending', timeoutMs: 10_000 });
    expect(roomy).toMatchObject({ degradationLevel: DegradationLevel.Full, levelReason: 'load' });
    const tight = await db.retrieve({ profile: 'trending', timeoutMs: 200 });
    expect(tight).toMatchObject({ degradationLevel: DegradationLevel.CoarseAggregates, levelReason: 'deadline' });
    expect(tight.explain.windows).toBe('all-time');
    expect(await db.retrieve({ profile: 'trending', timeoutMs: 500 })).toMatchObject({
      degradationLevel: DegradationLevel.ReducedCandidates,
      levelReason: 'deadline',
    });
    expect(await db.search({ text: 'alpha', timeoutMs: 50 })).toMatchObject({
      degradationLevel: DegradationLevel.NoDiversity,
      levelReason: 'deadline',
    });
    // Without a deadline the load alone decides.
    expect(await db.retrieve({ profile: 'trending' })).toMatchObject({ degradationLevel: DegradationLevel.Full, levelReason: 'load' });
  });
});

describe('work sharing', () => {
  let now = NOW;
  let db: TidalDb;
  beforeAll(async () => {
    db = await open(
      (b) => b,
      () => now,
    );
  });
  afterAll(() => db.close());

  it('two identical queries waiting together share one worker task, and both see a write made between them', async () => {
    const pool = internalsOf(db).pool;
    const before = { posted: pool.posted, shared: db.stats().shared };
    const hold = holdPipeline(db);
    const first = db.retrieve({ profile: 'popular', limit: 3 });
    // c gets two views after the first call and before the second: the shared execution has not
    // left the queue, so it reads them, for both callers.
    await db.signals([
      { item: 'c', kind: 'view' },
      { item: 'c', kind: 'view' },
      { item: 'c', kind: 'view' },
    ]);
    const second = db.retrieve({ profile: 'popular', limit: 3 });
    const different = db.retrieve({ profile: 'popular', limit: 2 });
    await hold.release();
    const [a, b] = await Promise.all([first, second, different]);
    expect(pool.posted - before.posted).toBe(2);
    expect(db.stats().shared - before.shared).toBe(1);
    expect(a.items.map((x) => x.id)).toEqual(['c', 'a', 'b']);
    expect(b.items).toEqual(a.items);
    expect([a.ageMs, b.ageMs]).toEqual([0, 0]);
    // Each caller has its own arrays.
    expect(b.items).not.toBe(a.items);
  });

  it('one of two sharers aborting leaves the other served by the one execution', async () => {
    const pool = internalsOf(db).pool;
    const posted = pool.posted;
    const hold = holdPipeline(db);
    const controller = new AbortController();
    const leaving = db.search({ text: 'alpha', signal: controller.signal });
    const staying = db.search({ text: 'alpha' });
    controller.abort();
    await expect(leaving).rejects.toBeInstanceOf(AbortedError);
    await hold.release();
    expect((await staying).hits.map((h) => h.id)).toEqual(['a']);
    expect(pool.posted - posted).toBe(1);
  });

  it('answers from a result at most maxStalenessMs old only at CoarseAggregates and below, with its age', async () => {
    const pool = internalsOf(db).pool;
    const run = (level?: 'Full' | 'ReducedCandidates' | 'CoarseAggregates' | 'NoDiversity') =>
      db.retrieve({ profile: 'trending', limit: 2, ...(level ? { level } : {}) });
    // Full and ReducedCandidates: every call runs.
    for (const level of [undefined, 'ReducedCandidates'] as const) {
      const posted = pool.posted;
      await run(level);
      now += 10;
      expect(await run(level)).toMatchObject({ ageMs: 0 });
      expect(pool.posted - posted).toBe(2);
    }
    let posted = pool.posted;
    const fromCache = db.stats().fromCache;
    expect(await run('CoarseAggregates')).toMatchObject({ ageMs: 0, degradationLevel: DegradationLevel.CoarseAggregates });
    now += 250;
    expect(await run('CoarseAggregates')).toMatchObject({
      ageMs: 250,
      degradationLevel: DegradationLevel.CoarseAggregates,
      levelReason: 'requested',
    });
    expect(pool.posted - posted).toBe(1);
    expect(db.stats().fromCache - fromCache).toBe(1);
    now += 1;
    expect(await run('CoarseAggregates')).toMatchObject({ ageMs: 0 });
    expect(pool.posted - posted).toBe(2);
    // NoDiversity: up to 1000 ms.
    posted = pool.posted;
    await run('NoDiversity');
    now += 1000;
    expect(await run('NoDiversity')).toMatchObject({ ageMs: 1000 });
    expect(pool.posted - posted).toBe(1);
    // A change to the items drops what was kept.
    await db.upsert({ id: 'd', text: 'delta' });
    expect(await run('NoDiversity')).toMatchObject({ ageMs: 0 });
    expect(pool.posted - posted).toBe(2);
  });

  it('maxStalenessMs is configurable per level, and 0 keeps nothing', async () => {
    let t = NOW;
    const strict = await open(
      (b) => b.workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 50 } }),
      () => t,
    );
    try {
      const pool = internalsOf(strict).pool;
      const posted = pool.posted;
      await strict.retrieve({ profile: 'popular', level: 'CoarseAggregates' });
      expect(await strict.retrieve({ profile: 'popular', level: 'CoarseAggregates' })).toMatchObject({ ageMs: 0 });
      expect(pool.posted - posted).toBe(2);
      await strict.retrieve({ profile: 'popular', level: 'NoDiversity' });
      t += 50;
      expect(await strict.retrieve({ profile: 'popular', level: 'NoDiversity' })).toMatchObject({ ageMs: 50 });
      expect(pool.posted - posted).toBe(3);
    } finally {
      await strict.close();
    }
    const bad = (ws: object) => TidalDb.builder().ephemeral().schema(SCHEMA).workSharing(ws).open();
    await expect(bad({ maxStalenessMs: { full: 10 } })).rejects.toMatchObject({ field: 'workSharing.maxStalenessMs.full' });
    await expect(bad({ maxStalenessMs: { noDiversity: -1 } })).rejects.toMatchObject({ field: 'workSharing.maxStalenessMs.noDiversity' });
    await expect(bad({ maxEntries: 1.5 })).rejects.toMatchObject({ field: 'workSharing.maxEntries' });
    await expect(bad({ ttl: 1 })).rejects.toMatchObject({ field: 'workSharing.ttl' });
  });
});
