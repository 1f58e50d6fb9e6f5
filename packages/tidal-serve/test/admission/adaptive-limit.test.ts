/**
 * The AIMD limit against a simulated server, on an injected clock: every millisecond, requests
 * arrive at the offered rate, the admitted ones finish after a latency the model decides, and the
 * stage sees exactly the releases a real server would send. Nothing depends on wall time.
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { createAdaptiveLimit } from '../../src/admission/adaptive-limit.js';
import type { AdaptiveLimitSettings, AdaptiveLimitStage } from '../../src/admission/adaptive-limit.js';
import { NOT_SERVED } from '../../src/admission/errors.js';
import type { RequestInfo, Ticket } from '../../src/admission/types.js';

const REQ: RequestInfo = { route: 'retrieve', tenant: 'anonymous', tier: 'free' };

const SETTINGS: AdaptiveLimitSettings = { cap: 100, floor: 4, targetLatencyMs: 30, windowMs: 100, backoff: 0.5 };

interface Running {
  readonly ticket: Ticket;
  readonly startMs: number;
  readonly doneMs: number;
}

/** A server with `workers` parallel slots of `serviceMs` each: past them, requests queue and latency grows with in flight. */
function queueingLatency(workers: number, serviceMs: number) {
  return (inFlight: number): number => serviceMs * Math.max(1, inFlight / workers);
}

interface PhaseResult {
  offered: number;
  admitted: number;
  refused: number;
  completed: number;
  latencies: number[];
  /** The limit at every window boundary (each 100 ms of simulated time). */
  limits: number[];
}

/** Drives the stage through one phase. `slowAt(t)` can force a response's latency (a pause). */
class Simulation {
  now = 0;
  readonly running: Running[] = [];
  readonly stage: AdaptiveLimitStage;
  #carry = 0;

  constructor(settings: AdaptiveLimitSettings = SETTINGS) {
    this.stage = createAdaptiveLimit(settings, () => this.now);
  }

  run(durationMs: number, ratePerSecond: number, latency: (inFlight: number, nowMs: number) => number): PhaseResult {
    const r: PhaseResult = { offered: 0, admitted: 0, refused: 0, completed: 0, latencies: [], limits: [] };
    const end = this.now + durationMs;
    for (; this.now < end; this.now++) {
      // Releases first, in completion order, as the server's 'close' events would come.
      for (let i = this.running.length - 1; i >= 0; i--) {
        const job = this.running[i]!;
        if (job.doneMs <= this.now) {
          this.running.splice(i, 1);
          const latencyMs = this.now - job.startMs;
          job.ticket.release({ latencyMs, ok: true });
          r.completed++;
          r.latencies.push(latencyMs);
        }
      }
      this.#carry += ratePerSecond / 1000;
      for (; this.#carry >= 1; this.#carry--) {
        r.offered++;
        const answer = this.stage.admit(REQ, this.now);
        if (!answer.admitted) {
          r.refused++;
          continue;
        }
        r.admitted++;
        const inFlight = this.running.length + 1;
        this.running.push({ ticket: answer, startMs: this.now, doneMs: this.now + Math.max(1, Math.round(latency(inFlight, this.now))) });
      }
      if (this.now % 100 === 0) r.limits.push(this.stage.limit);
    }
    return r;
  }
}

function percentile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

describe('adaptive limit (AIMD)', () => {
  it('converges under sustained overload: the limit settles where latency meets the target, goodput stays at capacity', () => {
    // 10 workers × 10 ms = 1000 requests/s of capacity; latency reaches the 30 ms target at 30 in flight.
    const sim = new Simulation();
    const latency = queueingLatency(10, 10);
    sim.run(2_000, 5_000, latency); // 5× capacity: learn
    const steady = sim.run(10_000, 5_000, latency);
    // Settled: every window of the last 10 s kept the limit well under the cap of 100 and near the
    // knee at 30, and admitted work stayed near the target instead of queueing to the cap's 100 ms.
    expect(Math.max(...steady.limits)).toBeLessThanOrEqual(45);
    expect(Math.min(...steady.limits)).toBeGreaterThanOrEqual(10);
    expect(percentile(steady.latencies, 0.5)).toBeLessThanOrEqual(30);
    expect(percentile(steady.latencies, 0.99)).toBeLessThanOrEqual(50);
    // The excess was refused at once, and the workers stayed busy: ≥ 95% of capacity served.
    expect(steady.refused).toBeGreaterThan(steady.offered / 2);
    expect(steady.completed).toBeGreaterThanOrEqual(0.95 * 10 * 1000);
    expect(sim.stage.decreases).toBeGreaterThan(0);

    // The cap alone (adaptive off) would have admitted 100 in flight, i.e. 100 ms latency: the
    // model is what makes the limit matter.
    expect(latency(100)).toBe(100);
  });

  it('recovers after the load drops: back to the cap, with no refusal at the lower load', () => {
    const sim = new Simulation();
    const latency = queueingLatency(10, 10);
    sim.run(5_000, 5_000, latency);
    const low = sim.stage.limit;
    expect(low).toBeLessThan(50);
    // 300/s: 3 in flight, 10 ms each, a third of the target: the limit climbs half way to where
    // the target would be met each window, so it is at the cap within a second.
    const quiet = sim.run(1_000, 300, latency);
    expect(quiet.refused).toBe(0);
    expect(sim.stage.limit).toBe(100);
  });

  it('after congestion, admits everything within 1 s of the load falling below capacity (the CLI settings)', () => {
    // The CLI's settings on 2 workers: cap 640, floor 136, 250 ms target and windows, × 0.9.
    const sim = new Simulation({ cap: 640, floor: 136, targetLatencyMs: 250, windowMs: 250, backoff: 0.9 });
    // 10× overload: every response takes 400 ms (the queue), so window after window is cut.
    const congested = sim.run(10_000, 20_000, () => 400);
    expect(congested.refused).toBeGreaterThan(congested.offered / 2);
    expect(sim.stage.limit).toBe(136);
    // Then 3 000/s at 100 ms each: 300 in flight, under the cap, latency well under the target.
    // What is still in flight from the overload finishes slowly in the first 400 ms.
    const phases = Array.from({ length: 10 }, () => sim.run(200, 3_000, () => 100));
    const refusedAfter1s = phases.slice(5).reduce((n, p) => n + p.refused, 0);
    expect(refusedAfter1s).toBe(0);
    expect(phases.slice(5).reduce((n, p) => n + p.admitted, 0)).toBe(phases.slice(5).reduce((n, p) => n + p.offered, 0));
    expect(sim.stage.limit).toBeGreaterThanOrEqual(300);
  });

  it('makes no false rejection after a single GC-like spike: a few very slow responses in one window do not cut the limit', () => {
    const sim = new Simulation({ ...SETTINGS, cap: 64 });
    // Healthy: 2000/s on 50 workers of 10 ms (capacity 5000/s), ≈ 20 in flight.
    const healthy = queueingLatency(50, 10);
    expect(sim.run(2_000, 2_000, healthy).refused).toBe(0);
    expect(sim.stage.limit).toBe(64);
    // One pause: the 20 requests admitted in these 10 ms (about all that were in flight) take
    // 300 ms, ten times the target; everything else is normal.
    const spike = sim.run(1_500, 2_000, (inFlight, now) => (now >= 2_050 && now < 2_060 ? 300 : healthy(inFlight)));
    expect(spike.latencies.filter((ms) => ms >= 300)).toHaveLength(20);
    expect(sim.stage.decreases).toBe(0);
    expect(sim.stage.limit).toBe(64);
    // Then a legitimate burst of 40 at once (below the cap, above what a halved limit of 32 would
    // allow): all admitted. A limit that cut on any slow response would refuse 8 of them here.
    const burst = Array.from({ length: 40 }, () => sim.stage.admit(REQ, sim.now));
    expect(burst.filter((r) => !r.admitted)).toHaveLength(0);
    for (const r of burst) if (r.admitted) r.release({ latencyMs: 10, ok: true });
    expect(spike.refused).toBe(0);
  });

  it('cuts on failed responses as well as slow ones, and never below the floor', () => {
    const now = { t: 0 };
    const stage = createAdaptiveLimit({ ...SETTINGS, cap: 40, floor: 8 }, () => now.t);
    for (let window = 0; window < 10; window++) {
      now.t += 100;
      const held: Ticket[] = [];
      for (let i = 0; i < Math.min(10, stage.limit); i++) {
        const r = stage.admit(REQ, now.t);
        if (r.admitted) held.push(r);
      }
      // Fast but failed (tidal's own 503s, timeouts): a congestion signal.
      for (const t of held) t.release({ latencyMs: 1, ok: false });
    }
    expect(stage.limit).toBe(8);
    expect(stage.stats().limit).toBe(8);
  });

  it('ignores responses admitted before a cut, so one queue is not cut for twice', () => {
    const now = { t: 0 };
    const stage = createAdaptiveLimit({ ...SETTINGS, cap: 40, minSamples: 10 }, () => now.t);
    const old = Array.from({ length: 40 }, () => stage.admit(REQ, 0)).filter((r): r is Ticket => r.admitted);
    expect(old).toHaveLength(40);
    now.t = 100;
    for (const t of old.slice(0, 10)) t.release({ latencyMs: 100, ok: true });
    expect(stage.limit).toBe(20);
    // The other 30 were admitted under the old limit: slow as they are, they do not cut again.
    now.t = 300;
    for (const t of old.slice(10)) t.release({ latencyMs: 300, ok: true });
    expect(stage.decreases).toBe(1);
    expect(stage.limit).toBe(20);
  });

  it('refuses at the limit without waiting, with retryAfterMs from the measured drain; unserved releases take no sample', () => {
    const now = { t: 0 };
    const stage = createAdaptiveLimit({ ...SETTINGS, cap: 4, floor: 1 }, () => now.t);
    const held = Array.from({ length: 4 }, () => stage.admit(REQ, 0)).filter((r): r is Ticket => r.admitted);
    const refused = stage.admit(REQ, 0);
    expect(refused).toMatchObject({ admitted: false, status: 503, code: 'TIDAL_SERVE_ADAPTIVE', reason: 'adaptive' });
    // Unserved releases (a later stage refused) free the slot but are no latency sample.
    for (const t of held) t.release(NOT_SERVED);
    expect(stage.inFlight).toBe(0);
    const again = Array.from({ length: 4 }, () => stage.admit(REQ, 0)).filter((r): r is Ticket => r.admitted);
    for (const t of again) t.release({ latencyMs: 20, ok: true });
    for (let i = 0; i < 4; i++) stage.admit(REQ, 10);
    const r = stage.admit(REQ, 10);
    expect(r.admitted).toBe(false);
    // The drain (20 ms mean / 4 in flight = 5 ms) is shorter than a window: the limit cannot rise
    // before the window closes, so the hint is the window's 100 ms.
    if (!r.admitted) expect(r.retryAfterMs).toBe(100);
    // A long drain wins over the window: 4 in flight at 2 s each, 1 over → 500 ms.
    const slow = createAdaptiveLimit({ ...SETTINGS, cap: 4, floor: 1 }, () => 0);
    const held2 = Array.from({ length: 4 }, () => slow.admit(REQ, 0)).filter((x): x is Ticket => x.admitted);
    for (const t of held2) t.release({ latencyMs: 2_000, ok: true });
    for (let i = 0; i < 4; i++) slow.admit(REQ, 0);
    expect(slow.admit(REQ, 0)).toMatchObject({ admitted: false, retryAfterMs: 500 });
  });

  it('governs the query routes only: writes are never refused by it and their latency never moves it', () => {
    const now = { t: 0 };
    const stage = createAdaptiveLimit({ ...SETTINGS, cap: 4, floor: 1, minSamples: 1 }, () => now.t);
    const queries = Array.from({ length: 4 }, () => stage.admit(REQ, 0));
    expect(queries.every((r) => r.admitted)).toBe(true);
    expect(stage.admit({ ...REQ, route: 'search' }, 0).admitted).toBe(false);
    // The limit is full of queries: every write route still passes, and holds nothing.
    for (const route of ['signals', 'items', 'sessions', 'item-signals', 'other']) {
      const w = stage.admit({ ...REQ, route }, 0);
      expect(w.admitted).toBe(true);
      // Slow writes, window after window: no sample, no cut.
      now.t += 200;
      if (w.admitted) w.release({ latencyMs: 10_000, ok: false });
    }
    expect(stage.inFlight).toBe(4);
    expect(stage.decreases).toBe(0);
    expect(stage.stats()).toMatchObject({ admitted: 4, rejected: 1, inFlight: 4 });
    // Slow queries do cut it.
    now.t += 200;
    for (const q of queries) if (q.admitted) q.release({ latencyMs: 10_000, ok: true });
    expect(stage.decreases).toBe(1);
    // The routes it governs can be named.
    const writesToo = createAdaptiveLimit({ ...SETTINGS, cap: 1, floor: 1, routes: ['retrieve', 'signals'] }, () => 0);
    expect(writesToo.admit({ ...REQ, route: 'signals' }, 0).admitted).toBe(true);
    expect(writesToo.admit(REQ, 0).admitted).toBe(false);
    expect(() => createAdaptiveLimit({ ...SETTINGS, routes: 'retrieve' as unknown as string[] }, () => 0)).toThrow(
      /options\.adaptive\.routes/,
    );
  });

  it('refuses bad settings, naming them', () => {
    const clock = () => 0;
    expect(() => createAdaptiveLimit({ ...SETTINGS, floor: 0 }, clock)).toThrow(/options\.adaptive\.floor/);
    expect(() => createAdaptiveLimit({ ...SETTINGS, floor: 101 }, clock)).toThrow(
      /options\.adaptive\.floor must be a whole number from 1 to 100/,
    );
    expect(() => createAdaptiveLimit({ ...SETTINGS, initial: 2 }, clock)).toThrow(/options\.adaptive\.initial/);
    expect(() => createAdaptiveLimit({ ...SETTINGS, backoff: 1 }, clock)).toThrow(
      /options\.adaptive\.backoff must be a number strictly between 0 and 1, got 1/,
    );
    expect(() => createAdaptiveLimit({ ...SETTINGS, targetLatencyMs: -5 }, clock)).toThrow(InvalidInputError);
    expect(() => createAdaptiveLimit({ ...SETTINGS, windowMs: Number.POSITIVE_INFINITY }, clock)).toThrow(/options\.adaptive\.windowMs/);
    expect(() => createAdaptiveLimit({ ...SETTINGS, slowFraction: 0 }, clock)).toThrow(/options\.adaptive\.slowFraction/);
    expect(() => createAdaptiveLimit({ ...SETTINGS, minSamples: 0.5 }, clock)).toThrow(/options\.adaptive\.minSamples/);
  });
});
