/**
 * The shared tenant limiter and period limit against sources whose answers the test hands out one
 * by one: `admit` stays synchronous, the shared answer arrives later and corrects what the stage
 * holds.
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import type { PeriodDecision } from 'tidal-load';
import {
  batchSize,
  createSharedAdmissionChain,
  createSharedPeriodLimit,
  createSharedTenantLimiter,
  type SharedGrant,
} from '../src/admission/shared-limits.js';
import type { AdmissionOptions, RequestInfo } from '../src/admission/types.js';

const REQ: RequestInfo = { route: 'search', tenant: 'acme', tier: 'free' };
const flush = () => new Promise((r) => setImmediate(r));

function deferredRate(burst: number) {
  const calls: { key: string; n: number; answer: (d: SharedGrant) => void }[] = [];
  return {
    calls,
    source: { burst, takeUpTo: (key: string, n: number) => new Promise<SharedGrant>((answer) => calls.push({ key, n, answer })) },
  };
}

describe('shared tenant limiter', () => {
  it('borrows one batch ahead of the shared answer, spends what it grants, and waits as long as the shared bucket says', async () => {
    const { calls, source } = deferredRate(100);
    const spec = { ratePerSecond: 200, burst: 100 };
    const stage = createSharedTenantLimiter({ tiers: { free: spec }, maxTenants: 10, source: () => source });
    const batch = batchSize(spec);
    expect(batch).toBe(2);
    // A new tenant is not refused for want of a round trip: it borrows up to one batch.
    for (let i = 0; i < batch; i++) expect(stage.admit(REQ, 0).admitted).toBe(true);
    expect(calls.map((c) => [c.key, c.n])).toEqual([['acme', batch + 1]]);
    const refused = stage.admit(REQ, 0);
    expect(refused).toMatchObject({ admitted: false, status: 429, code: 'TIDAL_SERVE_TENANT_RATE', retryAfterMs: 1 });
    // The shared bucket grants the batch and the debt asked when the first was borrowed.
    calls[0]!.answer({ backend: 'redis', granted: 3, retryAfterMs: 0 });
    await flush();
    expect(stage.admit(REQ, 1).admitted).toBe(true);
    expect(calls).toHaveLength(2);
    // The shared bucket is empty for 40 ms: refused with that wait, nothing asked meanwhile.
    calls[1]!.answer({ backend: 'redis', granted: 0, retryAfterMs: 40 });
    await flush();
    let r = stage.admit(REQ, 1);
    while (r.admitted) r = stage.admit(REQ, 1);
    expect(r).toMatchObject({ retryAfterMs: 40, headers: { 'x-tidal-limit-backend': 'redis' } });
    expect(calls).toHaveLength(2);
    // Once the wait is over it borrows again, and asks for the batch and the debt.
    expect(stage.admit(REQ, 41).admitted).toBe(true);
    expect(calls.map((c) => c.n)).toEqual([3, 2, 3]);
    calls[2]!.answer({ backend: 'local', granted: 3, retryAfterMs: 0 });
    await flush();
    const t = stage.admit(REQ, 42);
    expect(t).toMatchObject({ admitted: true, headers: { 'x-tidal-limit-backend': 'local' } });
    expect(stage.stats()).toMatchObject({ name: 'tenant', shared: true, backend: 'local', backends: { redis: 2, local: 1, none: 0 } });
  });

  it('takes a partial grant: the debt is paid first, and what is left is spent', async () => {
    const { calls, source } = deferredRate(100);
    const stage = createSharedTenantLimiter({ tiers: { free: { ratePerSecond: 200, burst: 100 } }, maxTenants: 10, source: () => source });
    // Borrows the batch (2) and asks for it and the debt: 3.
    expect(stage.admit(REQ, 0).admitted).toBe(true);
    expect(stage.admit(REQ, 0).admitted).toBe(true);
    expect(stage.admit(REQ, 0).admitted).toBe(false);
    // The bucket holds 1 of the 3: it goes to the debt, still 1 short of even.
    calls[0]!.answer({ backend: 'redis', granted: 1, retryAfterMs: 0 });
    await flush();
    expect(stage.admit(REQ, 1).admitted, 'owing 1, less than a batch: it may borrow one more').toBe(true);
    expect(calls.map((c) => c.n)).toEqual([3, 4]);
    expect(stage.admit(REQ, 1).admitted, 'owing a batch: refused until the bucket grants').toBe(false);
    calls[1]!.answer({ backend: 'redis', granted: 4, retryAfterMs: 0 });
    await flush();
    expect(stage.admit(REQ, 2).admitted, 'even again: the grant paid the debt of 2, 2 left to spend').toBe(true);
    expect(stage.admit(REQ, 2).admitted).toBe(true);
  });

  it('asks at most its share of the burst, the size of the fallback bucket', () => {
    const { calls, source } = deferredRate(8);
    const stage = createSharedTenantLimiter({
      tiers: { free: { ratePerSecond: 10_000, burst: 8 } },
      maxTenants: 10,
      source: () => source,
      replicas: () => 4,
    });
    stage.admit(REQ, 0);
    expect(calls[0]!.n).toBe(2);
  });

  it('names the field of a bad setting', () => {
    expect(() => createSharedTenantLimiter({ maxTenants: 0, source: () => deferredRate(1).source })).toThrow(InvalidInputError);
    expect(() => createSharedTenantLimiter({ maxTenants: 1, source: undefined as never })).toThrow(/options\.tenants\.source/);
  });
});

describe('shared period limit', () => {
  function countingSource(quota: number) {
    const counts = new Map<string, number>();
    const keys: string[] = [];
    let down = false;
    return {
      keys,
      setDown: (v: boolean) => (down = v),
      source: {
        take: async (key: string, n: number): Promise<PeriodDecision> => {
          keys.push(key);
          if (down) return { backend: 'none', outcome: 'allowed' };
          const c = (counts.get(key) ?? 0) + n;
          counts.set(key, c);
          return { backend: 'redis', outcome: c < quota ? 'allowed' : c === quota ? 'hitQuota' : 'overQuota' };
        },
      },
    };
  }

  it('admits until the shared window is used up, counts coalesced, and starts again with the next aligned window', async () => {
    const { keys, source } = countingSource(3);
    const stage = createSharedPeriodLimit({ quota: 3, periodMs: 1_000, source });
    expect(stage.admit(REQ, 10).admitted).toBe(true);
    expect(stage.admit(REQ, 11).admitted).toBe(true);
    await flush();
    // The two admitted while the first count was on its way went in one call.
    expect(keys).toEqual(['acme:0', 'acme:0']);
    const third = stage.admit(REQ, 12);
    expect(third.admitted).toBe(true);
    await flush();
    const over = stage.admit(REQ, 500);
    expect(over).toMatchObject({
      admitted: false,
      status: 429,
      code: 'TIDAL_SERVE_PERIOD_QUOTA',
      retryAfterMs: 500,
      headers: { 'x-quota-state': 'over-quota', 'x-quota-reset-ms': '500' },
    });
    expect(stage.admit(REQ, 1_000).admitted).toBe(true);
    await flush();
    expect(keys.at(-1)).toBe('acme:1');
  });

  it('admits unchecked (fail-open) while the source cannot decide, and says so', async () => {
    const { setDown, source } = countingSource(1);
    setDown(true);
    const stage = createSharedPeriodLimit({ quota: 1, periodMs: 1_000, source });
    for (let i = 0; i < 5; i++) {
      expect(stage.admit(REQ, i).admitted).toBe(true);
      await flush();
    }
    expect(stage.stats()).toMatchObject({ backend: 'none', backends: { none: 5 } });
  });
});

describe('createSharedAdmissionChain', () => {
  const options: AdmissionOptions = {
    inFlightCap: 10,
    adaptive: false,
    tenants: { maxTenants: 5 },
    permits: { search: 3 },
    period: { quota: 5, periodMs: 1_000, align: true, key: 'tenant' },
  };

  it('puts the shared stages where the local ones sit', () => {
    const chain = createSharedAdmissionChain(options, () => 0, {
      rate: () => deferredRate(100).source,
      period: { take: async () => ({ backend: 'redis', outcome: 'allowed' }) },
    });
    expect(chain.stages.map((s) => s.name)).toEqual(['inflight', 'tenant', 'permits', 'period']);
    expect(
      chain
        .stats()
        .filter((s) => 'shared' in s)
        .map((s) => s.name),
    ).toEqual(['tenant', 'period']);
  });

  it('refuses a shared window counted by tenant and route', () => {
    expect(() =>
      createSharedAdmissionChain({ ...options, period: { quota: 5, periodMs: 1_000, align: true, key: 'tenant+route' } }, () => 0, {
        period: { take: async () => ({ backend: 'redis', outcome: 'allowed' }) },
      }),
    ).toThrow(/options\.period\.key/);
  });
});
