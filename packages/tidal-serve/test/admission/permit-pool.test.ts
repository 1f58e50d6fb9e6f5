import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { NOT_SERVED } from '../../src/admission/errors.js';
import { createPermitPool } from '../../src/admission/permit-pool.js';
import type { Outcome, Refusal, RequestInfo, Ticket } from '../../src/admission/types.js';

const on = (route: string): RequestInfo => ({ route, tenant: 'anonymous', tier: 'free' });
const OK: Outcome = { latencyMs: 10, ok: true };

describe('permit pool', () => {
  it('try-acquires per route without waiting: the permit-less request is refused at once with a 503', () => {
    const pool = createPermitPool({ retrieve: 2, search: 1 });
    const a = pool.admit(on('retrieve'), 0);
    const b = pool.admit(on('retrieve'), 0);
    expect(a.admitted && b.admitted).toBe(true);
    const r = pool.admit(on('retrieve'), 0) as Refusal;
    expect(r).toMatchObject({ admitted: false, status: 503, code: 'TIDAL_SERVE_PERMITS', reason: 'permits' });
    // Routes are independent, and a route without a pool is never limited.
    expect(pool.admit(on('search'), 0).admitted).toBe(true);
    for (let i = 0; i < 100; i++) expect(pool.admit(on('items'), 0).admitted).toBe(true);
    expect(pool.routeStats()).toEqual({
      retrieve: { limit: 2, inFlight: 2, admitted: 2, rejected: 1 },
      search: { limit: 1, inFlight: 1, admitted: 1, rejected: 0 },
    });
    expect(pool.stats()).toMatchObject({ name: 'permits', limit: 3, inFlight: 3, admitted: 3, rejected: 1 });
  });

  it('retryAfterMs follows the route’s measured drain', () => {
    const pool = createPermitPool({ retrieve: 2 });
    const held = [pool.admit(on('retrieve'), 0), pool.admit(on('retrieve'), 0)] as Ticket[];
    for (const t of held) t.release({ latencyMs: 60, ok: true });
    pool.admit(on('retrieve'), 100);
    pool.admit(on('retrieve'), 100);
    // The pool's turnover: the 60 ms a request holds a permit (not 60 ms / 2 permits, which the
    // next arrival would take first).
    expect((pool.admit(on('retrieve'), 100) as Refusal).retryAfterMs).toBe(60);
  });

  it('cannot be wedged or leaked: releases in any order, repeated, with any outcome, always return exactly the permits taken', () => {
    const action = fc.oneof(
      fc.record({ kind: fc.constant('acquire' as const) }),
      fc.record({
        kind: fc.constant('release' as const),
        which: fc.nat(),
        outcome: fc.constantFrom<Outcome>(OK, NOT_SERVED, { latencyMs: 0, ok: false }),
      }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.array(action, { maxLength: 60 }), (max, actions) => {
        const pool = createPermitPool({ retrieve: max });
        const tickets: Ticket[] = [];
        const live = new Set<Ticket>();
        for (const a of actions) {
          if (a.kind === 'acquire') {
            const r = pool.admit(on('retrieve'), 0);
            // Refused exactly when every permit is held by a ticket not yet released.
            expect(r.admitted).toBe(live.size < max);
            if (r.admitted) {
              tickets.push(r);
              live.add(r);
            }
          } else if (tickets.length > 0) {
            // Any ticket, released or not: a second release must do nothing.
            const t = tickets[a.which % tickets.length]!;
            t.release(a.outcome);
            live.delete(t);
          }
          expect(pool.stats().inFlight).toBe(live.size);
        }
        // Everything released (the server's 'close' always fires): the pool is whole again.
        for (const t of tickets) t.release(OK);
        expect(pool.stats().inFlight).toBe(0);
        for (let i = 0; i < max; i++) expect(pool.admit(on('retrieve'), 0).admitted).toBe(true);
        expect(pool.admit(on('retrieve'), 0).admitted).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('refuses a permit count that is not a whole number ≥ 1', () => {
    expect(() => createPermitPool({ retrieve: 0 })).toThrow(/options\.permits\.retrieve must be a whole number ≥ 1, got 0/);
    expect(() => createPermitPool({ retrieve: 2.5 })).toThrow(/options\.permits\.retrieve/);
    expect(() => createPermitPool(null as never)).toThrow(/options\.permits must be an object/);
  });
});
