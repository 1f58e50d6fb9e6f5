import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { OVERFLOW_KEY, createPeriodLimit } from '../../src/admission/period-limit.js';
import type { PeriodLimitSettings } from '../../src/admission/period-limit.js';
import type { Refusal, RequestInfo, Ticket } from '../../src/admission/types.js';

const req = (tenant: string, route = 'retrieve'): RequestInfo => ({ route, tenant, tier: 'free' });
const BASE: PeriodLimitSettings = { quota: 3, periodMs: 1000, align: false, key: 'tenant' };

describe('period limit', () => {
  it('reports Allowed below the quota, HitQuota for the request that uses the last unit, OverQuota past it', () => {
    const stage = createPeriodLimit(BASE);
    expect([0, 1, 2, 3, 4].map((t) => stage.take('k', t))).toEqual(['allowed', 'allowed', 'hit-quota', 'over-quota', 'over-quota']);
    // A new window once the period (from the key's first request) has passed.
    expect(stage.take('k', 999)).toBe('over-quota');
    expect(stage.take('k', 1000)).toBe('allowed');
  });

  it('puts the quota state in the ticket and refusal headers, and refuses OverQuota with a 429 until the period ends', () => {
    const stage = createPeriodLimit(BASE);
    const a = stage.admit(req('t'), 100) as Ticket;
    expect(a.headers).toEqual({ 'x-quota-limit': '3', 'x-quota-remaining': '2', 'x-quota-reset-ms': '1000', 'x-quota-state': 'allowed' });
    stage.admit(req('t'), 200);
    const hit = stage.admit(req('t'), 300) as Ticket;
    expect(hit.admitted).toBe(true);
    expect(hit.headers).toMatchObject({ 'x-quota-remaining': '0', 'x-quota-reset-ms': '800', 'x-quota-state': 'hit-quota' });
    const over = stage.admit(req('t'), 450) as Refusal;
    expect(over).toMatchObject({ admitted: false, status: 429, code: 'TIDAL_SERVE_PERIOD_QUOTA', reason: 'period', retryAfterMs: 650 });
    expect(over.headers).toMatchObject({ 'x-quota-remaining': '0', 'x-quota-reset-ms': '650', 'x-quota-state': 'over-quota' });
    expect(stage.admit(req('t'), 1100).admitted).toBe(true);
    expect(stage.stats()).toMatchObject({ name: 'period', limit: 3, admitted: 4, rejected: 1, inFlight: 4 });
    a.release({ latencyMs: 1, ok: true });
    a.release({ latencyMs: 1, ok: true });
    expect(stage.stats().inFlight).toBe(3);
  });

  it('aligns windows to multiples of periodMs with align', () => {
    const stage = createPeriodLimit({ ...BASE, align: true });
    expect(stage.take('k', 1_750)).toBe('allowed');
    expect(stage.windowOf('k')).toEqual({ startMs: 1_000, count: 1 });
    stage.take('k', 1_800);
    stage.take('k', 1_900);
    expect(stage.take('k', 1_999)).toBe('over-quota');
    // Unaligned, this window would run to 2 750; aligned it ends at 2 000.
    expect(stage.take('k', 2_000)).toBe('allowed');
    expect(stage.windowOf('k')).toEqual({ startMs: 2_000, count: 1 });
    const r = stage.admit(req('x'), 2_300) as Ticket;
    expect(r.headers?.['x-quota-reset-ms']).toBe('700');
  });

  it('counts by tenant, or by tenant and route', () => {
    const byTenant = createPeriodLimit({ ...BASE, quota: 1 });
    expect(byTenant.admit(req('t', 'retrieve'), 0).admitted).toBe(true);
    expect(byTenant.admit(req('t', 'search'), 0).admitted).toBe(false);
    const byRoute = createPeriodLimit({ ...BASE, quota: 1, key: 'tenant+route' });
    expect(byRoute.admit(req('t', 'retrieve'), 0).admitted).toBe(true);
    expect(byRoute.admit(req('t', 'search'), 0).admitted).toBe(true);
    expect(byRoute.admit(req('t', 'search'), 0).admitted).toBe(false);
  });

  it('bounds the key map: expired periods are evicted, and past maxKeys new keys share one overflow counter', () => {
    const stage = createPeriodLimit({ ...BASE, quota: 2, maxKeys: 3 });
    for (const k of ['a', 'b', 'c']) stage.take(k, 0);
    // Full of live windows: new keys share the overflow counter (quota 2 between all of them).
    expect(['d', 'e', 'f'].map((k) => stage.take(k, 10))).toEqual(['allowed', 'hit-quota', 'over-quota']);
    expect(stage.keys).toBe(3);
    expect(stage.overflowed).toBe(3);
    expect(stage.windowOf('d')).toBeNull();
    expect(stage.windowOf(OVERFLOW_KEY)).toMatchObject({ count: 3 });
    // A renewed key moves to the back; once a and c have expired, new keys replace them.
    stage.take('b', 600);
    stage.take('b', 1_000);
    expect(stage.take('g', 1_001)).toBe('allowed');
    expect(stage.windowOf('a')).toBeNull();
    expect(stage.windowOf('g')).toEqual({ startMs: 1_001, count: 1 });
    expect(stage.windowOf('b')).toEqual({ startMs: 1_000, count: 1 });
    // Far in the future, a stream of fresh keys never grows the map past maxKeys.
    for (let i = 0; i < 1_000; i++) stage.take(`k${i}`, 10_000 + i * 1_000);
    expect(stage.keys).toBeLessThanOrEqual(3);
    expect(stage.stats().tracked).toBe(stage.keys);
    // Each of those found an expired window to evict: none had to share the overflow counter.
    expect(stage.overflowed).toBe(3);
  });

  it('bounds keys across routes too with tenant+route: maxKeys is the total, expired windows of any route make room', () => {
    const stage = createPeriodLimit({ ...BASE, key: 'tenant+route', maxKeys: 2 });
    expect(stage.admit(req('t', 'retrieve'), 0).admitted).toBe(true);
    expect(stage.admit(req('t', 'search'), 500).admitted).toBe(true);
    expect(stage.keys).toBe(2);
    // Full: a third key shares the overflow counter…
    stage.admit(req('u', 'search'), 600);
    expect(stage.overflowed).toBe(1);
    expect(stage.windowOf('u', 'search')).toBeNull();
    // …until the retrieve window expires, and its slot goes to a key of another route.
    stage.admit(req('u', 'search'), 1_000);
    expect(stage.windowOf('t', 'retrieve')).toBeNull();
    expect(stage.windowOf('u', 'search')).toEqual({ startMs: 1_000, count: 1 });
    expect(stage.windowOf('t', 'search')).toEqual({ startMs: 500, count: 1 });
    expect(stage.keys).toBe(2);
  });

  it('refuses bad settings, naming them', () => {
    expect(() => createPeriodLimit({ ...BASE, quota: 0 })).toThrow(/options\.period\.quota/);
    expect(() => createPeriodLimit({ ...BASE, periodMs: 0.5 })).toThrow(/options\.period\.periodMs/);
    expect(() => createPeriodLimit({ ...BASE, align: 'yes' as never })).toThrow(/options\.period\.align must be a boolean/);
    expect(() => createPeriodLimit({ ...BASE, key: 'ip' as never })).toThrow(InvalidInputError);
    expect(() => createPeriodLimit({ ...BASE, maxKeys: -1 })).toThrow(/options\.period\.maxKeys/);
  });
});
