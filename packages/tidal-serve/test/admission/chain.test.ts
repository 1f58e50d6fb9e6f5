import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { composeAdmissionStages, createAdmissionChain } from '../../src/admission/chain.js';
import { NOT_SERVED } from '../../src/admission/errors.js';
import type {
  AdmissionOptions,
  AdmissionStage,
  Outcome,
  Refusal,
  RefusalReason,
  RequestInfo,
  StageStats,
  Ticket,
} from '../../src/admission/types.js';

const REQ: RequestInfo = { route: 'retrieve', tenant: 'acme', tier: 'free' };
const OK: Outcome = { latencyMs: 5, ok: true };

/** A stage that records every call; it refuses while `refusing` is set. */
function spy(name: RefusalReason, log: string[]) {
  const state = { refusing: false, releases: [] as Outcome[] };
  const stage: AdmissionStage = {
    name,
    admit(): Ticket | Refusal {
      log.push(`admit ${name}`);
      if (state.refusing) return { admitted: false, status: 503, code: `REFUSED_BY_${name}`, reason: name, retryAfterMs: 1, message: name };
      return {
        admitted: true,
        release(outcome: Outcome) {
          log.push(`release ${name}${outcome.served === false ? ' unserved' : ''}`);
          state.releases.push(outcome);
        },
      };
    },
    stats: (): StageStats => ({ name, limit: null, inFlight: 0, admitted: 0, rejected: 0 }),
  };
  return { stage, state };
}

const ALL_ON: AdmissionOptions = {
  inFlightCap: 8,
  adaptive: { floor: 2, targetLatencyMs: 50, windowMs: 100, backoff: 0.5 },
  tenants: { maxTenants: 100, tiers: { free: { ratePerSecond: 1, burst: 3 } } },
  permits: { retrieve: 2 },
  period: { quota: 5, periodMs: 60_000, align: true, key: 'tenant' },
};

describe('admission chain', () => {
  it('asks the stages in order; a refusal by stage N releases 1..N-1 unserved and never asks N+1', () => {
    const log: string[] = [];
    const names: RefusalReason[] = ['inflight', 'adaptive', 'tenant', 'permits', 'period'];
    const spies = names.map((n) => spy(n, log));
    const chain = composeAdmissionStages(spies.map((s) => s.stage));
    for (let n = 0; n < names.length; n++) {
      log.length = 0;
      spies[n]!.state.refusing = true;
      const r = chain.admit(REQ, 0);
      expect(r).toMatchObject({ admitted: false, code: `REFUSED_BY_${names[n]}` });
      const asked = names.slice(0, n + 1).map((s) => `admit ${s}`);
      const givenBack = names
        .slice(0, n)
        .reverse()
        .map((s) => `release ${s} unserved`);
      expect(log).toEqual([...asked, ...givenBack]);
      spies[n]!.state.refusing = false;
    }
  });

  it('admitted, its ticket releases every stage once, last first, with the outcome', () => {
    const log: string[] = [];
    const spies = (['inflight', 'tenant', 'period'] as const).map((n) => spy(n, log));
    const chain = composeAdmissionStages(spies.map((s) => s.stage));
    const t = chain.admit(REQ, 0) as Ticket;
    log.length = 0;
    t.release(OK);
    t.release(OK);
    t.release(NOT_SERVED);
    expect(log).toEqual(['release period', 'release tenant', 'release inflight']);
    for (const s of spies) expect(s.state.releases).toEqual([OK]);
  });

  it('builds the enabled stages in order inflight → adaptive → tenant → permits → period', () => {
    const chain = createAdmissionChain(ALL_ON, () => 0);
    expect(chain.stats().map((s) => s.name)).toEqual(['inflight', 'adaptive', 'tenant', 'permits', 'period']);
    const some = createAdmissionChain({ ...ALL_ON, adaptive: false, permits: {} }, () => 0);
    expect(some.stats().map((s) => s.name)).toEqual(['inflight', 'tenant', 'period']);
    const none = createAdmissionChain({ inFlightCap: 0, adaptive: false, tenants: false, permits: {}, period: false }, () => 0);
    expect(none.stats()).toEqual([]);
    const t = none.admit(REQ, 0);
    expect(t.admitted).toBe(true);
  });

  it('with the real stages: a request refused by one stage is never counted by a later one, and gives back what earlier ones granted', () => {
    const chain = createAdmissionChain(ALL_ON, () => 0);
    const counts = () => Object.fromEntries(chain.stats().map((s) => [s.name, { in: s.inFlight, ok: s.admitted, no: s.rejected }]));

    // Two held on the route's 2 permits; the third is refused by permits, after the tenant granted it a token.
    const held = [chain.admit(REQ, 0), chain.admit(REQ, 0)] as Ticket[];
    expect(held.every((t) => t.admitted)).toBe(true);
    expect(held[1]!.headers).toMatchObject({ 'x-quota-state': 'allowed', 'x-quota-remaining': '3' });
    const byPermits = chain.admit(REQ, 0) as Refusal;
    expect(byPermits.code).toBe('TIDAL_SERVE_PERMITS');
    expect(counts()).toEqual({
      inflight: { in: 2, ok: 3, no: 0 },
      adaptive: { in: 2, ok: 3, no: 0 },
      tenant: { in: 2, ok: 3, no: 0 },
      permits: { in: 2, ok: 2, no: 1 },
      period: { in: 2, ok: 2, no: 0 }, // never reached
    });
    // The token was given back: the tenant's burst of 3 still has 1 for the next request.
    for (const t of held) t.release(OK);
    const third = chain.admit(REQ, 0) as Ticket;
    expect(third.admitted).toBe(true);
    third.release(OK);

    // Now the tenant's bucket is empty: refused by tenant, never reaching permits or period.
    const byTenant = chain.admit(REQ, 0) as Refusal;
    expect(byTenant).toMatchObject({ status: 429, code: 'TIDAL_SERVE_TENANT_RATE' });
    expect(counts()).toEqual({
      inflight: { in: 0, ok: 5, no: 0 },
      adaptive: { in: 0, ok: 5, no: 0 },
      tenant: { in: 0, ok: 4, no: 1 },
      permits: { in: 0, ok: 3, no: 1 },
      period: { in: 0, ok: 3, no: 0 },
    });
  });

  it('with the real stages: the cap refuses first, and nothing behind it is asked', () => {
    const chain = createAdmissionChain({ ...ALL_ON, inFlightCap: 1, adaptive: false, permits: {} }, () => 0);
    const held = chain.admit(REQ, 0) as Ticket;
    const refused = chain.admit(REQ, 0) as Refusal;
    expect(refused).toMatchObject({ status: 503, code: 'TIDAL_SERVE_INFLIGHT' });
    expect(chain.stats().map((s) => [s.name, s.admitted, s.rejected])).toEqual([
      ['inflight', 1, 1],
      ['tenant', 1, 0],
      ['period', 1, 0],
    ]);
    held.release(OK);
  });

  it('refuses bad settings before building anything, naming the field', () => {
    const bad: Array<[Partial<Record<keyof AdmissionOptions, unknown>>, RegExp]> = [
      [{ inFlightCap: 1.5 }, /options\.inFlightCap must be a whole number ≥ 0, got 1\.5/],
      [{ inFlightCap: -1 }, /options\.inFlightCap/],
      [{ inFlightCap: '48' }, /options\.inFlightCap/],
      [{ inFlightCap: 0 }, /options\.inFlightCap must be a whole number ≥ 1 when options\.adaptive is on/],
      [{ adaptive: { ...(ALL_ON.adaptive as object), backoff: 2 } }, /options\.adaptive\.backoff/],
      [{ adaptive: undefined }, /options\.adaptive/],
      [{ tenants: { maxTenants: -3 } }, /options\.tenants\.maxTenants/],
      [{ permits: { retrieve: 0 } }, /options\.permits\.retrieve/],
      [{ permits: undefined }, /options\.permits must be an object/],
      [{ period: { quota: 1, periodMs: 1000, align: true, key: 'ip' } }, /options\.period\.key/],
    ];
    for (const [patch, message] of bad) {
      const options = { ...ALL_ON, ...patch } as AdmissionOptions;
      expect(() => createAdmissionChain(options, () => 0)).toThrow(InvalidInputError);
      expect(() => createAdmissionChain(options, () => 0)).toThrow(message);
    }
    expect(() => createAdmissionChain(null as never, () => 0)).toThrow(/options must be an object/);
    expect(() => createAdmissionChain(ALL_ON, 5 as never)).toThrow(/clock/);
  });
});
