import { describe, expect, it } from 'vitest';
import {
  InvalidInputError,
  RATE_LIMITER_DEFAULTS,
  RateLimiter,
  RateLimiterConfig,
  TokenBucket,
  resolveRateLimiterConfig,
} from '../src/index.js';

/** Every outcome of `tryTake` at the given times (the bucket's clock is whatever the test says). */
function takes(bucket: TokenBucket, times: readonly number[]): number[] {
  return times.map((t) => bucket.tryTake(t));
}

describe('TokenBucket', () => {
  it('starts full, refuses past the burst with the exact wait for one token, and refills lazily', () => {
    const b = new TokenBucket(10, 2, 1000); // one token every 100 ms
    expect(takes(b, [1000, 1000, 1000])).toEqual([0, 0, 100]);
    // The wait shrinks with the time passed since the refusal; a refusal takes nothing.
    expect(takes(b, [1030, 1099])).toEqual([70, 1]);
    expect(takes(b, [1100, 1100])).toEqual([0, 100]);
    expect(b.available(1150)).toBe(0.5);
  });

  it('never holds more than burst tokens, however long it was idle', () => {
    const b = new TokenBucket(1, 3, 0);
    expect(takes(b, [0, 0, 0, 0])).toEqual([0, 0, 0, 1000]);
    expect(b.available(3_600_000)).toBe(3);
    expect(takes(b, [3_600_000, 3_600_000, 3_600_000, 3_600_000])).toEqual([0, 0, 0, 1000]);
  });

  it('rounds a fractional wait up, so a retry after exactly retryAfterMs succeeds and one a millisecond earlier does not', () => {
    const third = new TokenBucket(3, 1, 0); // a token every 333.3 ms
    expect(third.tryTake(0)).toBe(0);
    const wait = third.tryTake(0);
    expect(wait).toBe(334);
    expect(third.tryTake(wait - 1)).toBe(1);
    expect(third.tryTake(wait)).toBe(0);

    const slow = new TokenBucket(0.5, 1, 0); // a token every 2 s
    expect(takes(slow, [0, 0, 1500, 2000])).toEqual([0, 2000, 500, 0]);

    // Whole rates stay exact: with plain fractional tokens the wait at 18 ms would be
    // 82.00000000000001 and round up to 83.
    const ten = new TokenBucket(10, 1, 0);
    expect(takes(ten, [0, 18, 99, 100])).toEqual([0, 82, 1, 0]);

    const tenth = new TokenBucket(0.1, 1, 0); // fractional rates refill by inexact binary steps
    expect(takes(tenth, [0, 3000, 9999, 10_000])).toEqual([0, 7000, 1, 0]);
  });

  it('ignores a clock that steps backwards instead of taking credit away', () => {
    const b = new TokenBucket(10, 1, 1000);
    expect(takes(b, [1000, 900, 1050, 1100])).toEqual([0, 100, 50, 0]);
  });

  it('takes a refunded token back, never past the burst', () => {
    const b = new TokenBucket(10, 2, 0);
    expect(takes(b, [0, 0, 0])).toEqual([0, 0, 100]);
    b.refund();
    expect(takes(b, [0, 0])).toEqual([0, 100]);
    b.refund(5);
    expect(b.available(0)).toBe(2);
  });

  it('refuses a rate or burst it cannot use', () => {
    expect(() => new TokenBucket(0, 1, 0)).toThrow('ratePerSecond must be a positive finite number, got 0 (number)');
    expect(() => new TokenBucket(Number.NaN, 1, 0)).toThrow(InvalidInputError);
    expect(() => new TokenBucket(1, 1.5, 0)).toThrow('burst must be a whole number from 1 to 1000000000, got 1.5 (number)');
  });
});

describe('RateLimiterConfig', () => {
  it('is validated when resolved, naming the option and the value', () => {
    const cases: [RateLimiterConfig, string][] = [
      [RateLimiterConfig.limited(-1, 5), 'rateLimiter.ratePerSecond must be a positive finite number, got -1 (number)'],
      [RateLimiterConfig.limited(0, 5), 'rateLimiter.ratePerSecond must be a positive finite number, got 0 (number)'],
      [RateLimiterConfig.limited(Infinity, 5), 'rateLimiter.ratePerSecond must be a positive finite number, got Infinity (number)'],
      [RateLimiterConfig.limited(Number.NaN, 5), 'rateLimiter.ratePerSecond must be a positive finite number, got NaN (number)'],
      [RateLimiterConfig.limited(5, 0), 'rateLimiter.burst must be a whole number from 1 to 1000000000, got 0 (number)'],
      [RateLimiterConfig.limited(5, 2.5), 'rateLimiter.burst must be a whole number from 1 to 1000000000, got 2.5 (number)'],
      [
        RateLimiterConfig.limited(5, '10' as unknown as number),
        'rateLimiter.burst must be a whole number from 1 to 1000000000, got "10" (string of length 2)',
      ],
      [
        RateLimiterConfig.limited(5, 10, { maxBuckets: 0 }),
        'rateLimiter.maxBuckets must be a whole number from 1 to 16777216, got 0 (number)',
      ],
    ];
    for (const [config, message] of cases) {
      expect(() => resolveRateLimiterConfig(config)).toThrow(message);
    }
    expect(() => resolveRateLimiterConfig({ ratePerSecond: 5, burst: 10 })).toThrow(
      'rateLimiter must be RateLimiterConfig.unlimited() or RateLimiterConfig.limited(ratePerSecond, burst), got a value of type object',
    );
    expect(() => new RateLimiter(RateLimiterConfig.limited(1, -3))).toThrow('config.burst must be');
  });

  it('fills in the defaults and is plain frozen data', () => {
    expect(resolveRateLimiterConfig(undefined)).toBeNull();
    expect(resolveRateLimiterConfig(RateLimiterConfig.unlimited())).toBeNull();
    expect(resolveRateLimiterConfig(RateLimiterConfig.limited(0.5, 3))).toEqual({
      ratePerSecond: 0.5,
      burst: 3,
      maxBuckets: RATE_LIMITER_DEFAULTS.maxBuckets,
    });
    const config = RateLimiterConfig.limited(50, 100, { maxBuckets: 10 });
    expect(JSON.parse(JSON.stringify(config))).toEqual({ kind: 'limited', ratePerSecond: 50, burst: 100, maxBuckets: 10 });
    expect(Object.isFrozen(config)).toBe(true);
  });
});

describe('RateLimiter', () => {
  it('is unlimited by default and then holds no bucket at all', () => {
    const limiter = new RateLimiter();
    for (let i = 0; i < 1000; i++) expect(limiter.tryTake('agent', `s${i % 3}`, 0)).toBe(0);
    expect(limiter.rateLimit).toBeNull();
    expect(limiter.size).toBe(0);
  });

  it('keys buckets by (agent, session): neither the agent nor the session alone shares one', () => {
    const limiter = new RateLimiter(RateLimiterConfig.limited(1, 1));
    expect(limiter.tryTake('a', 's1', 0)).toBe(0);
    expect(limiter.tryTake('a', 's1', 0)).toBe(1000);
    expect(limiter.tryTake('a', 's2', 0)).toBe(0); // same agent, other session
    expect(limiter.tryTake('b', 's1', 0)).toBe(0); // same session id, other agent
    expect(limiter.size).toBe(3);
  });

  it('drops a bucket: its room is freed and the pair starts again with a full bucket', () => {
    const limiter = new RateLimiter(RateLimiterConfig.limited(1, 2));
    expect([0, 0, 0].map(() => limiter.tryTake('a', 's', 0))).toEqual([0, 0, 1000]);
    expect(limiter.drop('a', 's')).toBe(true);
    expect(limiter.drop('a', 's')).toBe(false);
    expect(limiter.size).toBe(0);
    expect([0, 0, 0].map(() => limiter.tryTake('a', 's', 0))).toEqual([0, 0, 1000]);
  });

  it('past maxBuckets, new pairs share one overflow bucket; a dropped bucket makes room again', () => {
    const limiter = new RateLimiter(RateLimiterConfig.limited(1, 2, { maxBuckets: 2 }));
    expect(limiter.tryTake('a', 's1', 0)).toBe(0);
    expect(limiter.tryTake('a', 's2', 0)).toBe(0);
    expect(limiter.size).toBe(2);
    // s3 and s4 have no room: together they get one bucket of burst 2.
    expect(limiter.tryTake('a', 's3', 0)).toBe(0);
    expect(limiter.tryTake('b', 's4', 0)).toBe(0);
    expect(limiter.tryTake('a', 's3', 0)).toBe(1000);
    expect(limiter.tryTake('b', 's4', 0)).toBe(1000);
    expect(limiter.stats()).toEqual({ buckets: 2, maxBuckets: 2, overflowChecks: 4 });
    // The pairs with a bucket of their own are unaffected.
    expect(limiter.tryTake('a', 's1', 0)).toBe(0);
    expect(limiter.stats().overflowChecks).toBe(4);

    limiter.drop('a', 's1');
    expect(limiter.tryTake('b', 's4', 0)).toBe(0); // its own, full bucket now
    expect(limiter.stats()).toEqual({ buckets: 2, maxBuckets: 2, overflowChecks: 4 });
    expect(limiter.tryTake('a', 's3', 0)).toBe(1000); // still on the (empty) overflow bucket
  });

  it('stays at maxBuckets however many pairs it sees', () => {
    const limiter = new RateLimiter(RateLimiterConfig.limited(100, 10, { maxBuckets: 100 }));
    for (let i = 0; i < 10_000; i++) limiter.tryTake(`agent-${i % 97}`, `session-${i}`, i);
    expect(limiter.size).toBe(100);
    expect(limiter.stats().overflowChecks).toBe(9_900);
    limiter.clear();
    expect(limiter.size).toBe(0);
  });
});
