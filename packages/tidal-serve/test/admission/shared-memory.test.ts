/**
 * The chain over shared memory: chains built in one thread over one state decide exactly as one
 * chain does (injected clock, a scripted workload), and chains in real worker threads hammering one
 * state never hold more than the cap (counts, no timing).
 */
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { createAdmissionChain, createSharedAdmissionState, type BuiltAdmissionChain } from '../../src/admission/chain.js';
import type { AdmissionOptions, RequestInfo, Ticket, Tier } from '../../src/admission/types.js';

const OPTIONS: AdmissionOptions = {
  inFlightCap: 24,
  adaptive: { floor: 4, targetLatencyMs: 40, windowMs: 50, backoff: 0.5, minSamples: 5 },
  tenants: {
    tiers: { free: { ratePerSecond: 200, burst: 6 }, pro: { ratePerSecond: 2000, burst: 20 } },
    overrides: { vip: { ratePerSecond: 50, burst: 3 } },
    maxTenants: 4,
  },
  permits: { retrieve: 10, search: 7 },
  period: { quota: 60, periodMs: 400, align: true, key: 'tenant+route', maxKeys: 6 },
};

const TENANTS = ['t0', 't1', 't2', 't3', 't4', 't5', 't6', 'vip'];
const ROUTES = ['retrieve', 'search', 'signals', 'items'];

/** A deterministic workload: arrivals every ms, each admitted request held for a scripted time. */
function replay(chains: BuiltAdmissionChain[], clock: { t: number }, steps: number): string[] {
  let x = 0x9e3779b9;
  const rnd = (): number => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const held: { ticket: Ticket; until: number; start: number; ok: boolean }[] = [];
  const log: string[] = [];
  let k = 0;
  for (; clock.t < steps; clock.t++) {
    for (let i = held.length - 1; i >= 0; i--) {
      const h = held[i]!;
      if (h.until > clock.t) continue;
      held.splice(i, 1);
      h.ticket.release({ latencyMs: clock.t - h.start, ok: h.ok });
    }
    // The load swings: calm, then a burst whose responses are slow (the adaptive limit cuts), then calm.
    const burst = clock.t % 1000 >= 300 && clock.t % 1000 < 600;
    const arrivals = burst ? 3 : rnd() < 0.6 ? 1 : 0;
    for (let a = 0; a < arrivals; a++) {
      const tenant = TENANTS[Math.floor(rnd() * TENANTS.length)]!;
      const tier: Tier = tenant === 't1' ? 'pro' : 'free';
      const req: RequestInfo = { route: ROUTES[Math.floor(rnd() * ROUTES.length)]!, tenant, tier };
      const chain = chains[k++ % chains.length]!;
      const r = chain.admit(req, clock.t);
      if (r.admitted) {
        const hold = burst ? 30 + Math.floor(rnd() * 60) : 2 + Math.floor(rnd() * 20);
        held.push({ ticket: r, start: clock.t, until: clock.t + hold, ok: rnd() > 0.02 });
        log.push(`${clock.t} ${req.tenant} ${req.route} ok ${JSON.stringify(r.headers ?? {})}`);
      } else {
        log.push(`${clock.t} ${req.tenant} ${req.route} ${r.reason} ${r.retryAfterMs} ${r.message} ${JSON.stringify(r.headers ?? {})}`);
      }
    }
  }
  for (const h of held) h.ticket.release({ latencyMs: 1, ok: true });
  return log;
}

describe('admission chain over shared memory', () => {
  it('two chains over one shared state decide exactly as one chain, request by request, and report the same figures', () => {
    const oneClock = { t: 0 };
    const one = createAdmissionChain(OPTIONS, () => oneClock.t, { shared: createSharedAdmissionState(OPTIONS) });
    const oneLog = replay([one], oneClock, 3_000);

    const twoClock = { t: 0 };
    const state = createSharedAdmissionState(OPTIONS);
    const a = createAdmissionChain(OPTIONS, () => twoClock.t, { shared: state });
    const b = createAdmissionChain(OPTIONS, () => twoClock.t, { shared: state });
    const twoLog = replay([a, b], twoClock, 3_000);

    expect(twoLog).toEqual(oneLog);
    // Every stage refused something and admitted something: the workload exercised them all.
    const reasons = new Set(oneLog.map((l) => l.split(' ')[3]));
    for (const r of ['ok', 'inflight', 'adaptive', 'tenant', 'permits', 'period']) expect(reasons).toContain(r);
    // Either chain reads the whole server's counters; all tickets are back.
    expect(a.stats()).toEqual(one.stats());
    expect(b.stats()).toEqual(one.stats());
    for (const s of a.stats()) expect(s.inFlight).toBe(0);
    const perChain = a.stats().find((s) => s.name === 'inflight')!;
    expect(perChain.admitted + perChain.rejected).toBe(oneLog.length);
  });

  it('decides as the thread-local chain does, refusal for refusal', () => {
    // With room for every key: past maxKeys the shared period table gives a new key an expired
    // entry on its probe path only, where one thread drops every expired window first.
    const options: AdmissionOptions = {
      ...OPTIONS,
      period: { ...(OPTIONS.period as object as Exclude<AdmissionOptions['period'], false>), maxKeys: 1_000 },
    };
    const localClock = { t: 0 };
    const local = createAdmissionChain(options, () => localClock.t);
    const localLog = replay([local], localClock, 3_000);
    const sharedClock = { t: 0 };
    const shared = createAdmissionChain(options, () => sharedClock.t, { shared: createSharedAdmissionState(options) });
    const sharedLog = replay([shared], sharedClock, 3_000);
    // Who was admitted and who refused, by which stage (the retry hints' drain is kept in whole µs
    // in shared memory, so those may differ in their last millisecond).
    const decision = (l: string): string => l.split(' ').slice(0, 4).join(' ');
    expect(sharedLog.map(decision)).toEqual(localLog.map(decision));
    const counts = (c: BuiltAdmissionChain) =>
      c.stats().map(({ name, admitted, rejected, inFlight }) => ({ name, admitted, rejected, inFlight }));
    expect(counts(shared)).toEqual(counts(local));
  });

  it('refuses a shared state made from other settings, and a thing that is not one', () => {
    const state = createSharedAdmissionState(OPTIONS);
    expect(() => createAdmissionChain({ ...OPTIONS, inFlightCap: 25 }, () => 0, { shared: state })).toThrow(InvalidInputError);
    expect(() => createAdmissionChain(OPTIONS, () => 0, { shared: { buffer: new SharedArrayBuffer(64), fingerprint: 0 } })).toThrow(
      /shared/,
    );
    expect(() => createSharedAdmissionState({ ...OPTIONS, inFlightCap: -1 })).toThrow(/options\.inFlightCap/);
    // Plain data: it survives a structured clone (what postMessage and workerData do).
    const copy = structuredClone(state);
    expect(copy.buffer).toBeInstanceOf(SharedArrayBuffer);
    createAdmissionChain(OPTIONS, () => 0, { shared: copy });
  });

  it('in worker threads hammering one state, never more than the cap are admitted at once, and every release brings the count back to 0', async () => {
    const CAP = 5;
    const PERMITS = 3;
    const options: AdmissionOptions = { inFlightCap: CAP, adaptive: false, tenants: false, permits: { retrieve: PERMITS }, period: false };
    const state = createSharedAdmissionState(options);
    // Probes the workers count into while they hold a ticket: [all, retrieve, max all, max retrieve].
    const probe = new SharedArrayBuffer(16);
    const chainUrl = new URL('../../dist/admission/chain.js', import.meta.url).href;
    const THREADS = 4;
    const ROUNDS = 40_000;
    const results = await Promise.all(
      Array.from({ length: THREADS }, (_, i) => {
        const worker = new Worker(new URL('./shared-hammer.mjs', import.meta.url), {
          workerData: { options, state, probe, chainUrl, seed: 1 + i, rounds: ROUNDS },
        });
        return new Promise<{ admitted: number; refused: number }>((resolve, reject) => {
          worker.once('message', (m: { admitted: number; refused: number }) => {
            resolve(m);
            void worker.terminate();
          });
          worker.once('error', reject);
        });
      }),
    );
    const p = new Int32Array(probe);
    expect(Atomics.load(p, 2)).toBeLessThanOrEqual(CAP);
    expect(Atomics.load(p, 3)).toBeLessThanOrEqual(PERMITS);
    expect(Atomics.load(p, 0)).toBe(0);
    // A chain on this thread over the same state sees the whole server: every ticket back, and the
    // counts of all four threads.
    const here = createAdmissionChain(options, Date.now, { shared: state });
    const [cap, pools] = here.stats();
    expect(cap!.inFlight).toBe(0);
    expect(pools!.inFlight).toBe(0);
    const admitted = results.reduce((n, r) => n + r.admitted, 0);
    const refused = results.reduce((n, r) => n + r.refused, 0);
    expect(admitted + refused).toBe(THREADS * ROUNDS);
    expect(cap!.admitted).toBe(admitted + pools!.rejected);
    expect(cap!.rejected + pools!.rejected).toBe(refused);
    expect(refused).toBeGreaterThan(0);
  });
});
