/**
 * The query pool through a real database: a worker that crashes, and queries aborted or timed out
 * while they wait. A worker is held with a blocking fault task, so what happens while queries wait
 * behind it is decided by the test's order of events, not by timing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AbortedError, InternalError, InvalidInputError, TimeoutError } from 'tidal-load';
import { TidalDb, internalsOf } from '../src/db.js';
import { QUERY_BATCH } from '../src/query-pool.js';

const NOW = Date.UTC(2025, 0, 1);
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }] };

let db: TidalDb;
beforeAll(async () => {
  db = await TidalDb.builder()
    .ephemeral()
    .schema(SCHEMA)
    .workers(1)
    .clock(() => NOW)
    .open();
  await db.upsertItems([
    { id: 'a', text: 'alpha' },
    { id: 'b', text: 'beta' },
  ]);
  await db.signals([
    { item: 'a', kind: 'view' },
    { item: 'a', kind: 'view' },
    { item: 'b', kind: 'view' },
  ]);
});
afterAll(() => db.close());

/** Holds the only worker until the returned function is called; resolves when it has let go. */
function holdWorker(): { release: () => Promise<void> } {
  const gate = new SharedArrayBuffer(4);
  const held = internalsOf(db).pool.run({ op: 'fault', mode: 'block', gate });
  return {
    release: async () => {
      const cell = new Int32Array(gate);
      Atomics.store(cell, 0, 1);
      Atomics.notify(cell, 0);
      await held;
      await internalsOf(db).pool.drain();
    },
  };
}

const served = () => Object.values(db.stats().served).reduce((a, b) => a + b, 0);

describe('query pool', () => {
  it('a worker that crashes fails its task with InternalError, and the pool replaces it', async () => {
    await expect(internalsOf(db).pool.run({ op: 'fault', mode: 'exit' })).rejects.toBeInstanceOf(InternalError);
    for (let i = 0; i < 3; i++) {
      const res = await db.retrieve({ profile: 'popular', limit: 2 });
      expect(res.items.map((x) => x.id)).toEqual(['a', 'b']);
    }
  });

  it('a query whose signal is already aborted is refused without being posted', async () => {
    const before = { served: served(), skipped: db.stats().cancelledBeforeRun, cancelled: db.stats().cancelled };
    const reason = new Error('client went away');
    const err = await db.retrieve({ profile: 'popular', signal: AbortSignal.abort(reason) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect(err).toMatchObject({ name: 'AbortError', code: 'TIDAL_ABORTED', cause: reason });
    expect(db.stats()).toMatchObject({ cancelled: before.cancelled + 1, cancelledBeforeRun: before.skipped, inFlight: 0 });
    expect(served()).toBe(before.served);
  });

  it('a query that times out while it waits rejects at once and never runs', async () => {
    const pool = internalsOf(db).pool;
    const before = { served: served(), skipped: db.stats().cancelledBeforeRun, batches: pool.batches };
    const worker = holdWorker();
    try {
      const timedOut = db.search({ text: 'alpha', timeoutMs: 1_000 });
      // The pool posts what a turn of the event loop started on the next one (setImmediate): wait
      // for the search to be handed to the held worker, so the timer fires after it was posted
      // (with a 1 ms timeout, a busy machine fired it first and the search was never posted).
      while (pool.batches === before.batches) await new Promise((r) => setImmediate(r));
      await expect(timedOut).rejects.toBeInstanceOf(TimeoutError);
      await expect(timedOut).rejects.toMatchObject({ code: 'TIDAL_TIMEOUT', timeoutMs: 1_000 });
      // The worker still holds the task: it counts as load until the worker is done with it.
      expect(db.load.inFlight).toBe(1);
    } finally {
      await worker.release();
    }
    expect(db.load.inFlight).toBe(0);
    expect(db.stats().cancelledBeforeRun).toBe(before.skipped + 1);
    expect(served()).toBe(before.served);
  });

  it('a query aborted while it waits rejects at once, never runs, and the queries around it are served', async () => {
    const before = { served: served(), skipped: db.stats().cancelledBeforeRun };
    const worker = holdWorker();
    const controller = new AbortController();
    const kept1 = db.retrieve({ profile: 'popular', limit: 1 });
    const aborted = db.retrieve({ profile: 'popular', signal: controller.signal, timeoutMs: 60_000 });
    const kept2 = db.search({ text: 'beta', signal: new AbortController().signal });
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    await worker.release();
    expect((await kept1).items.map((x) => x.id)).toEqual(['a']);
    expect((await kept2).hits.map((x) => x.id)).toEqual(['b']);
    expect(db.stats().cancelledBeforeRun).toBe(before.skipped + 1);
    expect(served()).toBe(before.served + 2);
  });

  it('a burst queued behind a busy worker reaches it in batches, one message for several queries, each answered on its own', async () => {
    const pool = internalsOf(db).pool;
    const before = { posted: pool.posted, batches: pool.batches, served: served() };
    const worker = holdWorker();
    // Distinct queries (no two share an execution), one of them given up while it waits.
    const controller = new AbortController();
    const burst = Array.from({ length: 24 }, (_, i) =>
      i % 2 === 0 ? db.retrieve({ profile: 'popular', limit: 1 + i / 2 }) : db.search({ text: 'alpha', limit: 1 + (i - 1) / 2 }),
    );
    const givenUp = db.retrieve({ profile: 'popular', limit: 99, signal: controller.signal });
    controller.abort();
    await expect(givenUp).rejects.toMatchObject({ name: 'AbortError' });
    await worker.release();
    const results = await Promise.all(burst);
    results.forEach((r, i) => {
      if ('items' in r) expect(r.items.map((x) => x.id)).toEqual(i === 0 ? ['a'] : ['a', 'b']);
      else expect(r.hits.map((x) => x.id)).toEqual(['a']);
    });
    expect(served()).toBe(before.served + 24);
    const posted = pool.posted - before.posted;
    const batches = pool.batches - before.batches;
    expect(posted).toBeGreaterThanOrEqual(24);
    // One message per query would be 24 or 25; at most 8 a message, spread over the free slots.
    expect(batches).toBeLessThanOrEqual(6);
    expect(batches).toBeGreaterThanOrEqual(Math.ceil(24 / QUERY_BATCH));
  });

  it('refuses a signal or timeoutMs it cannot use, naming the field', async () => {
    for (const timeoutMs of [0, -1, 1.5, Number.NaN, 2 ** 31, '5']) {
      await expect(db.retrieve({ profile: 'new', timeoutMs: timeoutMs as number })).rejects.toMatchObject({
        code: 'TIDAL_INVALID_INPUT',
        field: 'timeoutMs',
      });
    }
    for (const signal of [{}, 'abort', { aborted: false }]) {
      await expect(db.search({ text: 'x', signal: signal as AbortSignal })).rejects.toBeInstanceOf(InvalidInputError);
    }
    expect(db.load.inFlight).toBe(0);
  });
});
