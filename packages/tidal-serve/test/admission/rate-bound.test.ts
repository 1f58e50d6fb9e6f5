import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { createAdmissionChain, createSharedAdmissionState } from '../../src/admission/chain.js';
import { createInFlightCap, type InFlightCapStage } from '../../src/admission/inflight-cap.js';
import type { AdmissionOptions, AdmissionStage, Refusal, RequestInfo, Ticket } from '../../src/admission/types.js';

const QUERY: RequestInfo = { route: 'retrieve', tenant: 'anonymous', tier: 'free' };
const WRITE: RequestInfo = { route: 'signals', tenant: 'anonymous', tier: 'free' };

function ticket(r: Ticket | Refusal): Ticket {
  if (!r.admitted) throw new Error(`refused: ${r.code}`);
  return r;
}

/**
 * Completes `perMs` queries every millisecond from `fromMs` to `toMs`, each held `holdMs`: a
 * service rate the stage can only learn from the releases.
 */
function serveAt(stage: AdmissionStage, fromMs: number, toMs: number, perMs: number, holdMs = 1): void {
  for (let t = fromMs; t < toMs; t++) {
    const held = Array.from({ length: perMs }, () => ticket(stage.admit(QUERY, t)));
    for (const h of held) h.release({ latencyMs: holdMs, ok: true });
  }
}

function boundOf(stage: InFlightCapStage): number {
  return stage.rateBound!.limit;
}

/**
 * A deterministic queue: arrivals every `gapMs`, `servers` servers taking `serviceMs` each, first
 * come first served. Every arrival asks `stage`; what it admits waits for a server and is released
 * when served, with its time in the system. Returns the admitted requests' latencies and the refusals.
 */
function simulate(
  stage: AdmissionStage,
  o: { gapMs: number; durationMs: number; servers: number; serviceMs: number },
): { latencies: number[]; refused: Refusal[]; served: number } {
  const busyUntil = new Array<number>(o.servers).fill(-1);
  const running: ({ ticket: Ticket; at: number } | null)[] = new Array(o.servers).fill(null);
  const queue: { ticket: Ticket; at: number }[] = [];
  const latencies: number[] = [];
  const refused: Refusal[] = [];
  // Ends every service due by `t`, in time order, each freed server taking the next in the queue.
  const advance = (t: number): void => {
    for (;;) {
      let s = -1;
      for (let i = 0; i < o.servers; i++) if (running[i] !== null && busyUntil[i]! <= t && (s < 0 || busyUntil[i]! < busyUntil[s]!)) s = i;
      if (s < 0) return;
      const end = busyUntil[s]!;
      const job = running[s]!;
      latencies.push(end - job.at);
      job.ticket.release({ latencyMs: end - job.at, ok: true });
      const next = queue.shift();
      running[s] = next ?? null;
      if (next !== undefined) busyUntil[s] = end + o.serviceMs;
    }
  };
  for (let i = 0; i * o.gapMs < o.durationMs; i++) {
    const t = i * o.gapMs;
    advance(t);
    const r = stage.admit(QUERY, t);
    if (!r.admitted) {
      refused.push(r);
      continue;
    }
    const idle = running.indexOf(null);
    if (idle >= 0) {
      running[idle] = { ticket: r, at: t };
      busyUntil[idle] = t + o.serviceMs;
    } else queue.push({ ticket: r, at: t });
  }
  return { latencies, refused, served: latencies.length };
}

describe('the in-flight stage’s rate bound (Little’s law on the measured service rate)', () => {
  it('starts at its floor, rises with the measured rate and falls with it, within the cap', () => {
    const stage = createInFlightCap(1000, { targetWaitMs: 100, floor: 20, windowMs: 100 });
    expect(boundOf(stage)).toBe(20);
    serveAt(stage, 0, 1000, 3); // 3 a ms: 3 × 100 ms of wait = 300 in flight
    expect(boundOf(stage)).toBeGreaterThanOrEqual(285);
    expect(boundOf(stage)).toBeLessThanOrEqual(303);
    expect(stage.rateBound!.ratePerSec).toBeCloseTo(3000, -2);
    serveAt(stage, 1000, 2000, 1); // the service slows to 1 a ms: the bound follows it down
    expect(boundOf(stage)).toBeGreaterThanOrEqual(95);
    expect(boundOf(stage)).toBeLessThanOrEqual(101);
    serveAt(stage, 2000, 3000, 20); // 20 a ms would be 2 000: the cap holds
    expect(boundOf(stage)).toBe(1000);
    // A trickle: one completion in a long window, the floor again.
    serveAt(stage, 3000, 3001, 1);
    ticket(stage.admit(QUERY, 9000)).release({ latencyMs: 1, ok: true });
    expect(boundOf(stage)).toBe(20);
    expect(stage.stats().rateBound).toEqual({ limit: 20, inFlight: 0, ratePerSec: expect.any(Number) });
  });

  it('counts only what was served well: refusals by later stages and failures are no service rate', () => {
    const stage = createInFlightCap(1000, { targetWaitMs: 100, floor: 20, windowMs: 100 });
    for (let t = 0; t < 1000; t++) {
      for (let i = 0; i < 3; i++) ticket(stage.admit(QUERY, t)).release({ latencyMs: 0, ok: true, served: false });
      ticket(stage.admit(QUERY, t)).release({ latencyMs: 1, ok: false });
    }
    expect(boundOf(stage)).toBe(20);
  });

  it('refuses a burst beyond the bound at once, with TIDAL_SERVE_INFLIGHT and a retry time measured from the drain', () => {
    const stage = createInFlightCap(1000, { targetWaitMs: 100, floor: 20, windowMs: 100 });
    serveAt(stage, 0, 1000, 2, 40); // 2 a ms, each held 40 ms
    const bound = boundOf(stage);
    expect(bound).toBeGreaterThanOrEqual(190);
    const held = Array.from({ length: bound }, () => ticket(stage.admit(QUERY, 1000)));
    const burst = Array.from({ length: 50 }, () => stage.admit(QUERY, 1000));
    for (const r of burst) {
      expect(r).toMatchObject({ admitted: false, status: 503, code: 'TIDAL_SERVE_INFLIGHT', reason: 'inflight', retryAfterMs: 40 });
      expect((r as Refusal).message).toMatch(/queries are in flight, the bound of the measured rate \(\d+\/s\) × 100 ms of wait/);
    }
    // Writes are not held by it (only by the cap): one is admitted while every query is refused.
    expect(stage.admit(WRITE, 1000).admitted).toBe(true);
    expect(stage.stats()).toMatchObject({ inFlight: bound + 1, rejected: 50, rateBound: { limit: bound, inFlight: bound } });
    held[0]!.release({ latencyMs: 1, ok: true });
    expect(stage.admit(QUERY, 1001).admitted).toBe(true);
  });

  it('in a deterministic 10× overload, nothing it admits waits longer than the target; a fixed cap lets them wait 2.5×', () => {
    // Two servers of 2 ms each: 1 query a ms. Arrivals at 10 a ms. Target 250 ms.
    const run = { gapMs: 0.1, durationMs: 5000, servers: 2, serviceMs: 2 };
    const bounded = simulate(createInFlightCap(640, { targetWaitMs: 250, floor: 20, windowMs: 100 }), run);
    expect(Math.max(...bounded.latencies)).toBeLessThanOrEqual(250);
    // Refusing the rest costs no goodput: the servers never idle once the queue formed.
    expect(bounded.served).toBeGreaterThanOrEqual(0.98 * (run.durationMs / 2) * 2 - 300);
    expect(bounded.refused.length).toBeGreaterThan(40_000);
    expect(bounded.refused.every((r) => r.code === 'TIDAL_SERVE_INFLIGHT' && r.status === 503 && r.retryAfterMs >= 1)).toBe(true);
    const fixed = simulate(createInFlightCap(640), run);
    expect(Math.max(...fixed.latencies)).toBeGreaterThan(600);
  });

  it('decides as one server across chains over one shared state', () => {
    const options: AdmissionOptions = {
      inFlightCap: 1000,
      rateBound: { targetWaitMs: 100, floor: 20, windowMs: 100 },
      adaptive: false,
      tenants: false,
      permits: {},
      period: false,
    };
    const shared = createSharedAdmissionState(options);
    let now = 0;
    const a = createAdmissionChain(options, () => now, { shared });
    const b = createAdmissionChain(options, () => now, { shared });
    const limitOf = () => a.stats()[0]!.rateBound!.limit;
    expect(limitOf()).toBe(20);
    // Each chain serves 1 a ms: together 2 a ms, a bound of 200 that both see.
    for (now = 0; now < 1000; now++) {
      ticket(a.admit(QUERY, now)).release({ latencyMs: 1, ok: true });
      ticket(b.admit(QUERY, now)).release({ latencyMs: 1, ok: true });
    }
    expect(limitOf()).toBeGreaterThanOrEqual(190);
    expect(limitOf()).toBeLessThanOrEqual(202);
    expect(b.stats()[0]!.rateBound!.limit).toBe(limitOf());
    const bound = limitOf();
    for (let i = 0; i < bound; i++) ticket((i % 2 === 0 ? a : b).admit(QUERY, now));
    expect(a.admit(QUERY, now)).toMatchObject({ admitted: false, code: 'TIDAL_SERVE_INFLIGHT' });
    expect(b.admit(QUERY, now)).toMatchObject({ admitted: false, code: 'TIDAL_SERVE_INFLIGHT' });
    // The service slows to one chain's 1 a ms: the shared bound falls for both.
    for (now = 1000; now < 2000; now++) ticket(a.admit(WRITE, now)).release({ latencyMs: 1, ok: true });
    expect(limitOf()).toBe(bound); // writes are no query service
    const c = createAdmissionChain(options, () => now, { shared });
    expect(c.stats()[0]!.rateBound!.inFlight).toBe(bound);
  });

  it('follows a shared rate down as it falls', () => {
    const options: AdmissionOptions = {
      inFlightCap: 1000,
      rateBound: { targetWaitMs: 100, floor: 20, windowMs: 100 },
      adaptive: false,
      tenants: false,
      permits: {},
      period: false,
    };
    const shared = createSharedAdmissionState(options);
    let now = 0;
    const a = createAdmissionChain(options, () => now, { shared });
    const b = createAdmissionChain(options, () => now, { shared });
    for (now = 0; now < 1000; now++) {
      ticket(a.admit(QUERY, now)).release({ latencyMs: 1, ok: true });
      ticket(b.admit(QUERY, now)).release({ latencyMs: 1, ok: true });
    }
    expect(b.stats()[0]!.rateBound!.limit).toBeGreaterThanOrEqual(190);
    for (now = 1000; now < 2000; now++) ticket(a.admit(QUERY, now)).release({ latencyMs: 1, ok: true });
    expect(b.stats()[0]!.rateBound!.limit).toBeGreaterThanOrEqual(95);
    expect(b.stats()[0]!.rateBound!.limit).toBeLessThanOrEqual(101);
  });

  it('refuses bad settings with InvalidInputError naming the field', () => {
    const bad: [unknown, RegExp][] = [
      [{ targetWaitMs: 0, floor: 10 }, /options\.rateBound\.targetWaitMs/],
      [{ targetWaitMs: 100, floor: 0 }, /options\.rateBound\.floor/],
      [{ targetWaitMs: 100, floor: 101 }, /options\.rateBound\.floor must be a whole number from 1 to 100/],
      [{ targetWaitMs: 100, floor: 10, windowMs: -1 }, /options\.rateBound\.windowMs/],
      [{ targetWaitMs: 100, floor: 10, routes: [] }, /options\.rateBound\.routes/],
      [7, /options\.rateBound must be an object/],
    ];
    for (const [value, message] of bad) {
      expect(() => createInFlightCap(100, value as AdmissionOptions['rateBound'])).toThrow(InvalidInputError);
      expect(() => createInFlightCap(100, value as AdmissionOptions['rateBound'])).toThrow(message);
    }
    const options: AdmissionOptions = {
      inFlightCap: 0,
      rateBound: { targetWaitMs: 100, floor: 10 },
      adaptive: false,
      tenants: false,
      permits: {},
      period: false,
    };
    expect(() => createAdmissionChain(options, () => 0)).toThrow(
      /options\.inFlightCap must be a whole number ≥ 1 when options\.rateBound is on/,
    );
  });
});
