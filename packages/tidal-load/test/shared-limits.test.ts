import { describe, expect, it } from 'vitest';
import {
  AbortedError,
  InvalidInputError,
  LocalRateSource,
  LocalSlotSource,
  SLOT_CEILING,
  SlotTimeoutError,
  checkSlotLimit,
  type PeriodSource,
  type RateSource,
  type SlotSource,
} from '../src/index.js';
import { LocalPeriodSource } from '../src/shared-limits.js';

describe('LocalRateSource', () => {
  it('takes n tokens all or none, names its backend, and says when to retry', async () => {
    const source: RateSource = new LocalRateSource(10, 5);
    expect(await source.take('k', 3, 0)).toEqual({ backend: 'local', allowed: true, retryAfterMs: 0, remaining: 2 });
    // Three more than the two left: nothing is taken, and 100 ms buys the missing token at 10/s.
    expect(await source.take('k', 3, 0)).toEqual({ backend: 'local', allowed: false, retryAfterMs: 100, remaining: 2 });
    expect(await source.take('k', 3, 100)).toEqual({ backend: 'local', allowed: true, retryAfterMs: 0, remaining: 0 });
    expect((await source.take('other', 5, 100)).allowed, 'keys have buckets of their own').toBe(true);
  });

  it('refuses an n over the burst (it could never be taken) and an empty key', async () => {
    const source = new LocalRateSource(10, 5);
    expect(() => source.takeNow('k', 6, 0)).toThrow(InvalidInputError);
    expect(() => source.takeNow('k', 0, 0)).toThrow(/n must be a whole number from 1 to 5, got 0/);
    expect(() => source.takeNow('', 1, 0)).toThrow(/key must be a non-empty string/);
  });

  it('bounds its buckets', () => {
    const source = new LocalRateSource(1, 1, { maxKeys: 2 });
    for (const k of ['a', 'b', 'c']) source.takeNow(k, 1, 0);
    expect(source.size).toBe(2);
    expect(source.takeNow('a', 1, 0).allowed, 'the dropped bucket comes back full').toBe(true);
  });
});

describe('LocalPeriodSource', () => {
  it('answers allowed below the quota, hitQuota at it, overQuota past it, and opens a new window after the period', async () => {
    const source: PeriodSource = new LocalPeriodSource(1000, 3);
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push((await source.take('k', 1, 10 + i)).outcome);
    expect(outcomes).toEqual(['allowed', 'allowed', 'hitQuota', 'overQuota']);
    expect((await source.take('k', 1, 1009)).outcome, 'the window opened at 10 runs to 1010').toBe('overQuota');
    expect(await source.take('k', 1, 1010)).toEqual({ backend: 'local', outcome: 'allowed' });
    expect((await source.take('k', 2, 1011)).outcome).toBe('hitQuota');
  });
});

describe('LocalSlotSource', () => {
  it('holds the limit, hands a released slot to the first waiter, and release is idempotent', async () => {
    const source: SlotSource = new LocalSlotSource();
    const deadlineMs = Date.now() + 60_000;
    const a = await source.acquire('up', 2, { deadlineMs });
    const b = await source.acquire('up', 2, { deadlineMs });
    expect([a.slot, b.slot, a.backend]).toEqual([0, 1, 'local']);
    const order: string[] = [];
    const c = source.acquire('up', 2, { deadlineMs }).then((l) => (order.push('c'), l));
    const d = source.acquire('up', 2, { deadlineMs }).then((l) => (order.push('d'), l));
    await Promise.resolve();
    expect(order).toEqual([]);
    a.release();
    a.release();
    const cl = await c;
    expect(cl.slot).toBe(0);
    expect(order).toEqual(['c']);
    b.release();
    expect((await d).slot).toBe(1);
    expect(order).toEqual(['c', 'd']);
  });

  it('fails a waiter whose deadline passes, naming the limit and the wait', async () => {
    let now = 1_000;
    const source = new LocalSlotSource({ now: () => now });
    await source.acquire('up', 1, { deadlineMs: 2_000 });
    const waiting = source.acquire('up', 1, { deadlineMs: now + 5 });
    now += 5;
    const err = await waiting.catch((e: unknown) => e);
    expect(SlotTimeoutError.is(err)).toBe(true);
    expect(err).toMatchObject({ dependency: 'up', maxConcurrentCalls: 1, waitedMs: 5 });
    expect((err as Error).message).toMatch(/takes 1 call at once; this one waited 5 ms/);
  });

  it('leaves the queue on abort', async () => {
    const source = new LocalSlotSource();
    const held = await source.acquire('up', 1, { deadlineMs: Date.now() + 60_000 });
    const controller = new AbortController();
    const waiting = source.acquire('up', 1, { deadlineMs: Date.now() + 60_000, signal: controller.signal });
    controller.abort(new Error('client gone'));
    expect(AbortedError.is(await waiting.catch((e: unknown) => e))).toBe(true);
    held.release();
    expect(source.held('up')).toBe(0);
    expect(source.tryAcquire('up', 1)).not.toBeNull();
  });

  it('refuses a limit that is not a whole number from 1 to the ceiling', async () => {
    expect(SLOT_CEILING).toBe(32);
    for (const bad of [0, 1.5, 33, Number.NaN, '2']) expect(() => checkSlotLimit('max_concurrent_calls', bad)).toThrow(InvalidInputError);
    await expect(new LocalSlotSource().acquire('up', 2.5, { deadlineMs: 0 })).rejects.toThrow(
      /limit must be a whole number from 1 to 32, got 2.5/,
    );
  });
});
