import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { NOT_SERVED } from '../../src/admission/errors.js';
import { OVERFLOW_TENANT, createTenantLimiter } from '../../src/admission/tenant-limiter.js';
import type { Refusal, RequestInfo, Tier } from '../../src/admission/types.js';

const req = (tenant: string, tier: Tier = 'free'): RequestInfo => ({ route: 'retrieve', tenant, tier });

/** How many of `n` requests at one instant are admitted. */
function burst(stage: ReturnType<typeof createTenantLimiter>, request: RequestInfo, n: number, nowMs: number): number {
  let admitted = 0;
  for (let i = 0; i < n; i++) if (stage.admit(request, nowMs).admitted) admitted++;
  return admitted;
}

describe('tenant limiter', () => {
  it('gives the tiers their defaults: free 100/s and pro 1000/s, burst = rate, one bucket per tenant', () => {
    const stage = createTenantLimiter({ maxTenants: 10 });
    expect(burst(stage, req('a'), 150, 0)).toBe(100);
    expect(burst(stage, req('b', 'pro'), 1500, 0)).toBe(1000);
    // Tenants do not share: c is untouched by a and b.
    expect(burst(stage, req('c'), 100, 0)).toBe(100);
    // Refilled at the rate: 100/s is one token every 10 ms.
    expect(burst(stage, req('a'), 5, 50)).toBe(5);
    expect(stage.stats()).toMatchObject({ name: 'tenant', admitted: 1205, rejected: 550, tracked: 3 });
  });

  it('refuses with a 429 whose retryAfterMs is the time to the next token', () => {
    const stage = createTenantLimiter({ maxTenants: 10, tiers: { free: { ratePerSecond: 4, burst: 2 } } });
    expect(burst(stage, req('a'), 2, 1000)).toBe(2);
    const r = stage.admit(req('a'), 1000) as Refusal;
    expect(r).toMatchObject({ admitted: false, status: 429, code: 'TIDAL_SERVE_TENANT_RATE', reason: 'tenant', retryAfterMs: 250 });
    expect((stage.admit(req('a'), 1100) as Refusal).retryAfterMs).toBe(150);
    expect(stage.admit(req('a'), 1250).admitted).toBe(true);
  });

  it('lets explicit overrides win over the tier, and they never count against maxTenants', () => {
    const stage = createTenantLimiter({
      maxTenants: 1,
      overrides: { vip: { ratePerSecond: 5, burst: 7 }, slow: { ratePerSecond: 1, burst: 1 } },
    });
    expect(burst(stage, req('vip', 'free'), 20, 0)).toBe(7);
    expect(burst(stage, req('slow', 'pro'), 20, 0)).toBe(1);
    // The one non-override slot is still free for an ordinary tenant.
    expect(burst(stage, req('a'), 200, 0)).toBe(100);
    expect(stage.bucketFor('a')?.shared).toBe(false);
    expect(stage.tenants).toBe(3);
  });

  it('bounds the map: past maxTenants new tenants share one overflow bucket at the free rate', () => {
    const stage = createTenantLimiter({ maxTenants: 2, tiers: { free: { ratePerSecond: 10, burst: 10 } } });
    expect(burst(stage, req('a'), 1, 0)).toBe(1);
    expect(burst(stage, req('b', 'pro'), 1, 0)).toBe(1);
    // Ten thousand more tenants: the map stays at two, all of them draw on the one shared bucket.
    let admitted = 0;
    for (let i = 0; i < 10_000; i++) if (stage.admit(req(`t${i}`, i % 2 === 0 ? 'pro' : 'free'), 0).admitted) admitted++;
    expect(stage.tenants).toBe(2);
    expect(stage.stats().tracked).toBe(2);
    expect(admitted).toBe(10);
    expect(stage.overflowed).toBe(10_000);
    expect(stage.bucketFor(OVERFLOW_TENANT)).toMatchObject({ ratePerSecond: 10, burst: 10, shared: true });
    expect(stage.bucketFor('t5')).toBeNull();
    // The known tenants keep their own buckets.
    expect(burst(stage, req('a'), 20, 0)).toBe(9);
  });

  it('gives the token back when a later stage refused the request (released unserved), not when it was served', () => {
    const stage = createTenantLimiter({ maxTenants: 10, tiers: { free: { ratePerSecond: 1, burst: 2 } } });
    const a = stage.admit(req('a'), 0);
    const b = stage.admit(req('a'), 0);
    expect(a.admitted && b.admitted).toBe(true);
    expect(stage.admit(req('a'), 0).admitted).toBe(false);
    if (a.admitted) {
      a.release(NOT_SERVED);
      a.release(NOT_SERVED); // once only: no second token
    }
    if (b.admitted) b.release({ latencyMs: 3, ok: true });
    expect(stage.bucketFor('a')?.available(0)).toBe(1);
    expect(stage.stats().inFlight).toBe(0);
  });

  it('refuses bad settings, naming them', () => {
    expect(() => createTenantLimiter({ maxTenants: 0 })).toThrow(/options\.tenants\.maxTenants/);
    expect(() => createTenantLimiter({ maxTenants: 1.5 })).toThrow(InvalidInputError);
    expect(() => createTenantLimiter({ maxTenants: 1, tiers: { pro: { ratePerSecond: 0, burst: 1 } } })).toThrow(
      /options\.tenants\.tiers\.pro\.ratePerSecond must be a positive finite number, got 0/,
    );
    expect(() => createTenantLimiter({ maxTenants: 1, overrides: { x: { ratePerSecond: 1, burst: 0.5 } } })).toThrow(
      /options\.tenants\.overrides\.x\.burst/,
    );
    expect(() => createTenantLimiter({ maxTenants: 1, tiers: { gold: { ratePerSecond: 1, burst: 1 } } as never })).toThrow(
      /options\.tenants\.tiers/,
    );
  });
});
