import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BackpressureError, InvalidInputError } from 'tidal-load';
import { DrainRate, retryAfterMs } from '../src/backpressure.js';
import { GroupCommit, RETRY_AFTER_MAX_MS, RETRY_AFTER_MIN_MS, SignalLog } from '../src/index.js';
import type { LogRecord } from '../src/signal-log.js';
import { openTestDb } from './db.js';

type Ev = Omit<LogRecord, 'seq'>;
const ev = (ordinal: number): Ev => ({ ordinal, kind: 0, weight: 1, at: 1000 + ordinal, session: null });
const evs = (from: number, n: number): Ev[] => Array.from({ length: n }, (_, i) => ev(from + i));

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/**
 * A group commit whose writer is stalled until the test lets it run: timers are fake, so no batch
 * commits until `vi.advanceTimersToNextTimer()`. The clock is manual and every committed event
 * "takes" `msPerEvent` of it, so the measured drain rate is exactly 1 / msPerEvent.
 */
function stalled(opts: { maxBatch: number; maxQueueEvents: number; msPerEvent: number }) {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-bp-'));
  dirs.push(dir);
  const db = openTestDb(join(dir, 'db.sqlite'));
  const log = new SignalLog(db);
  const clock = { now: 0 };
  const batches: number[] = [];
  const gc = new GroupCommit<Ev>(
    db,
    {
      commit(events, firstSeq) {
        batches.push(events.length);
        events.forEach((e, i) => log.appendAt(firstSeq + i, e));
        log.setLastSeq(firstSeq + events.length - 1);
        clock.now += opts.msPerEvent * events.length;
      },
    },
    0,
    { maxBatch: opts.maxBatch, maxDelayMs: 1000, maxQueueEvents: opts.maxQueueEvents },
    { nowMs: () => clock.now },
  );
  return { gc, log, clock, batches };
}

/** Lets the stalled writer commit exactly one batch. */
async function commitOneBatch(): Promise<void> {
  vi.advanceTimersToNextTimer();
  await Promise.resolve();
}

describe('retryAfterMs', () => {
  it('is (depth − maxQueueEvents + 1) / drain rate, rounded up and clamped', () => {
    expect(retryAfterMs(100, 100, 0.5)).toBe(2);
    expect(retryAfterMs(139, 100, 2)).toBe(20);
    expect(retryAfterMs(100, 100, 1000)).toBe(RETRY_AFTER_MIN_MS);
    expect(retryAfterMs(1_000_000, 100, 0.001)).toBe(RETRY_AFTER_MAX_MS);
    expect(retryAfterMs(100, 100, 0)).toBe(RETRY_AFTER_MAX_MS);
    expect(retryAfterMs(100, 100, Number.NaN)).toBe(RETRY_AFTER_MAX_MS);
  });

  it('never decreases as the queue gets deeper, at any drain rate', () => {
    const violations: string[] = [];
    for (const rate of [0.0001, 0.013, 0.5, 1, 7.3, 130, 1e6]) {
      let previous = 0;
      for (let depth = 1000; depth < 50_000; depth += 37) {
        const ms = retryAfterMs(depth, 1000, rate);
        if (ms < previous || ms < RETRY_AFTER_MIN_MS || ms > RETRY_AFTER_MAX_MS)
          violations.push(`rate ${rate} depth ${depth}: ${ms} after ${previous}`);
        previous = ms;
      }
    }
    expect(violations).toEqual([]);
  });
});

describe('DrainRate', () => {
  it('uses the prior until the first sample, then the ratio of events to time', () => {
    const r = new DrainRate(42, 1000);
    expect(r.perMs).toBe(42);
    expect(r.measured).toBe(false);
    r.record(100, 10);
    r.record(300, 10);
    expect(r.measured).toBe(true);
    // Both samples are recent; the ratio of decayed sums weights each by its duration.
    expect(r.perMs).toBeGreaterThan(19);
    expect(r.perMs).toBeLessThan(21);
  });

  it('follows a change of rate within a few half-lives', () => {
    const r = new DrainRate(1, 100);
    for (let i = 0; i < 100; i++) r.record(10, 1); // 10 events/ms
    for (let i = 0; i < 100; i++) r.record(1, 10); // then 0.1 events/ms for 1 s = 10 half-lives
    expect(r.perMs).toBeCloseTo(0.1, 2);
  });
});

describe('GroupCommit backpressure', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('refuses at the threshold with depth and maxQueueEvents, before anything is enqueued', async () => {
    const { gc, log } = stalled({ maxBatch: 4, maxQueueEvents: 8, msPerEvent: 0.25 });
    const accepted: Promise<number>[] = [];
    for (let i = 0; i < 8; i++) accepted.push(gc.enqueue([ev(i)]));
    // The writer is stalled: awaiting does not drain anything.
    await Promise.resolve();
    expect(gc.depth).toBe(8);

    const build = vi.fn(() => [ev(99)]);
    const refused = gc.enqueue(build);
    const err = await refused.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackpressureError);
    expect(err).toMatchObject({ code: 'TIDAL_BACKPRESSURE', depth: 8, maxQueueEvents: 8 });
    // Nothing was built or queued for the refused write.
    expect(build).not.toHaveBeenCalled();
    expect(gc.depth).toBe(8);
    expect(gc.stats.refusedBackpressure).toBe(1);

    await vi.runAllTimersAsync();
    expect(await Promise.all(accepted)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect([...log.replay(0)].map((r) => r.ordinal)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // Below the threshold again: accepted, and numbered after the others (the refusal used no number).
    const again = gc.enqueue([ev(8)]);
    await vi.runAllTimersAsync();
    await expect(again).resolves.toBe(9);
    gc.close();
  });

  it('admits a whole multi-event call under the threshold and refuses a whole one at it', async () => {
    const { gc, log } = stalled({ maxBatch: 4, maxQueueEvents: 8, msPerEvent: 0.25 });
    const first = gc.enqueue(evs(0, 7));
    const second = gc.enqueue(evs(7, 5)); // depth 7 < 8: admitted whole, depth 12
    expect(gc.depth).toBe(12);
    await expect(gc.enqueue(evs(12, 3))).rejects.toBeInstanceOf(BackpressureError);
    expect(gc.depth).toBe(12);
    await vi.runAllTimersAsync();
    await expect(first).resolves.toBe(1);
    await expect(second).resolves.toBe(8);
    expect([...log.replay(0)].length).toBe(12);
    gc.close();
  });

  it('computes retryAfterMs from the measured drain rate, not a constant', async () => {
    // Every event takes 0.5 ms of the manual clock: 2 events per ms.
    const { gc, batches } = stalled({ maxBatch: 4, maxQueueEvents: 8, msPerEvent: 0.5 });
    for (let i = 0; i < 16; i++) void gc.enqueue([ev(i)]).catch(() => {});
    await vi.runAllTimersAsync();
    expect(batches).toEqual([4, 4]);
    // Eight were refused at depth 8; the two batches that drained measured 8 events in 4 ms.
    expect(gc.stats.refusedBackpressure).toBe(8);
    expect(gc.stats.drainPerMs).toBeCloseTo(2, 1);

    void gc.enqueue(evs(100, 7)).catch(() => {});
    void gc.enqueue(evs(200, 9)).catch(() => {}); // depth 16
    const err = (await gc.enqueue([ev(300)]).catch((e: unknown) => e)) as BackpressureError;
    // 16 − 8 + 1 = 9 events must drain at ~2 per ms: 5 ms.
    expect(err.retryAfterMs).toBe(Math.ceil(9 / gc.stats.drainPerMs));
    expect(err.retryAfterMs).toBe(5);
    await vi.runAllTimersAsync();
    gc.close();
  });

  it('asks a caller at a deeper queue to wait at least as long', async () => {
    // Every event takes 0.75 ms: the measured rate stays 4/3 events per ms whatever the batch size.
    const { gc } = stalled({ maxBatch: 4, maxQueueEvents: 8, msPerEvent: 0.75 });
    for (let i = 0; i < 8; i++) void gc.enqueue([ev(i)]);
    await commitOneBatch();
    await commitOneBatch();
    expect(gc.stats.drainPerMs).toBeCloseTo(4 / 3, 9);
    let next = 8;
    const waits: number[] = [];
    for (let excess = 0; excess < 24; excess++) {
      while (gc.depth >= 8) await commitOneBatch();
      // One admitted call takes the depth to 8 + excess; the next write is refused there.
      const add = 8 + excess - gc.depth;
      void gc.enqueue(evs(next, add));
      next += add;
      const err = (await gc.enqueue([ev(next)]).catch((e: unknown) => e)) as BackpressureError;
      expect(err).toBeInstanceOf(BackpressureError);
      expect(err.depth).toBe(8 + excess);
      expect(err.retryAfterMs).toBe(Math.ceil((excess + 1) / gc.stats.drainPerMs));
      waits.push(err.retryAfterMs);
    }
    for (let i = 1; i < waits.length; i++) expect(waits[i]).toBeGreaterThanOrEqual(waits[i - 1]!);
    expect(waits.at(-1)).toBeGreaterThan(waits[0]!);
    await vi.runAllTimersAsync();
    gc.close();
  });

  it('refuses a threshold that is not a whole number of at least maxBatch', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-bp-'));
    dirs.push(dir);
    const db = openTestDb(join(dir, 'db.sqlite'));
    const make = (o: object) => () => new GroupCommit(db, { commit() {} }, 0, o);
    expect(make({ maxQueueEvents: 1.5 })).toThrow(InvalidInputError);
    expect(make({ maxQueueEvents: 1.5 })).toThrow(
      /options\.maxQueueEvents must be a whole number from options\.maxBatch \(1024\) to 1000000, got 1\.5/,
    );
    expect(make({ maxBatch: 64, maxQueueEvents: 63 })).toThrow(/options\.maxQueueEvents/);
    expect(make({ maxQueueEvents: 2_000_000 })).toThrow(/options\.maxQueueEvents/);
    expect(make({ maxQueueEvents: Number.NaN })).toThrow(/options\.maxQueueEvents/);
    expect(make({ maxBatch: 64, maxQueueEvents: 64 })).not.toThrow();
    db.close();
  });
});
