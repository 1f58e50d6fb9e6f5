import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { createInFlightCap } from '../../src/admission/inflight-cap.js';
import { NOT_SERVED } from '../../src/admission/errors.js';
import type { Refusal, RequestInfo, Ticket } from '../../src/admission/types.js';

const REQ: RequestInfo = { route: 'retrieve', tenant: 'anonymous', tier: 'free' };

function ticket(r: Ticket | Refusal): Ticket {
  if (!r.admitted) throw new Error(`refused: ${r.code}`);
  return r;
}

describe('in-flight cap', () => {
  it('admits up to the cap, refuses the next with a cheap 503, and admits again once a slot frees', () => {
    const cap = createInFlightCap(3);
    const held = [0, 1, 2].map(() => ticket(cap.admit(REQ, 0)));
    const refused = cap.admit(REQ, 0);
    expect(refused).toMatchObject({ admitted: false, status: 503, code: 'TIDAL_SERVE_INFLIGHT', reason: 'inflight' });
    // A plain object: no Error, so no stack was captured.
    expect(refused).not.toBeInstanceOf(Error);
    expect(cap.inFlight).toBe(3);
    held[1]!.release({ latencyMs: 5, ok: true });
    expect(cap.inFlight).toBe(2);
    expect(cap.admit(REQ, 5).admitted).toBe(true);
    expect(cap.stats()).toEqual({ name: 'inflight', limit: 3, inFlight: 3, admitted: 4, rejected: 1 });
  });

  it('releases a ticket once however often it is released', () => {
    const cap = createInFlightCap(2);
    const a = ticket(cap.admit(REQ, 0));
    const b = ticket(cap.admit(REQ, 0));
    a.release({ latencyMs: 1, ok: true });
    a.release({ latencyMs: 1, ok: true });
    a.release(NOT_SERVED);
    expect(cap.inFlight).toBe(1);
    b.release({ latencyMs: 1, ok: false });
    expect(cap.inFlight).toBe(0);
    // A double release did not open a third slot.
    ticket(cap.admit(REQ, 1));
    ticket(cap.admit(REQ, 1));
    expect(cap.admit(REQ, 1).admitted).toBe(false);
  });

  it('computes retryAfterMs from the measured drain: the mean time a request holds its slot, the cap’s turnover', () => {
    const cap = createInFlightCap(4);
    // Before any release: the time since the first admission stands in for the mean latency.
    const held = [0, 1, 2, 3].map(() => ticket(cap.admit(REQ, 1000)));
    expect((cap.admit(REQ, 1400) as Refusal).retryAfterMs).toBe(400);
    // Measured: requests held 80 ms each. One of the 4 slots frees every 20 ms, but the next
    // arrival takes it; only after 80 ms have the holders turned over.
    for (const t of held) t.release({ latencyMs: 80, ok: true });
    const again = [0, 1, 2, 3].map(() => ticket(cap.admit(REQ, 2000)));
    expect((cap.admit(REQ, 2000) as Refusal).retryAfterMs).toBe(80);
    // Slower service, longer wait: the number follows the measurement, not a constant.
    for (const t of again) t.release({ latencyMs: 400, ok: true });
    for (let i = 0; i < 4; i++) ticket(cap.admit(REQ, 3000));
    expect((cap.admit(REQ, 3000) as Refusal).retryAfterMs).toBeGreaterThan(80);
  });

  it('never hints a retry storm: with 640 in flight held 100 ms each, the hint is 100 ms, not 1', () => {
    const cap = createInFlightCap(640);
    const first = Array.from({ length: 640 }, () => ticket(cap.admit(REQ, 0)));
    for (const t of first) t.release({ latencyMs: 100, ok: true });
    for (let i = 0; i < 640; i++) ticket(cap.admit(REQ, 100));
    expect((cap.admit(REQ, 100) as Refusal).retryAfterMs).toBe(100);
  });

  it('refuses a cap that is not a whole number ≥ 1', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, '8' as unknown as number]) {
      expect(() => createInFlightCap(bad)).toThrow(InvalidInputError);
    }
    expect(() => createInFlightCap(2.5)).toThrow(/options\.inFlightCap must be a whole number ≥ 1, got 2\.5/);
  });
});
