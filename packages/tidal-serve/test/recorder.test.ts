import { describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { startServer } from 'tidal-serve';
import { Recorder } from 'tidal-serve/internal';

function recorder(start = 10_000) {
  let now = start;
  let inFlight = 0;
  const r = new Recorder({ clock: () => now, inFlight: () => inFlight, level: () => 'Full', historySeconds: 10, windowSeconds: 3 });
  return {
    r,
    advance: (ms: number): void => {
      now += ms;
    },
    setInFlight: (n: number): void => {
      inFlight = n;
    },
  };
}

describe('Recorder', () => {
  it('reports the last complete second: offered, goodput and refusals by reason', () => {
    const { r, advance, setInFlight } = recorder();
    r.record('retrieve', 200, undefined, 5);
    r.record('retrieve', 200, undefined, 7);
    r.record('retrieve', 503, 'inflight', 0);
    r.record('signals', 429, 'TIDAL_RATE_LIMITED', 1);
    r.record('search', 400, 'TIDAL_INVALID_INPUT', 1);
    // Still inside the second: nothing complete yet.
    expect(r.sample().offeredPerSec).toBe(0);
    advance(1000);
    setInFlight(4);
    const s = r.sample();
    expect(s).toMatchObject({ t: 11_000, inFlight: 4, level: 'Full', offeredPerSec: 5, goodputPerSec: 2, windowSeconds: 3 });
    expect(s.refusedPerSec).toEqual({ inflight: 1, TIDAL_RATE_LIMITED: 1 });
  });

  it('takes percentiles over the window of served requests, within a bin of the truth, and forgets older seconds', () => {
    const { r, advance } = recorder();
    for (let i = 1; i <= 100; i++) r.record('retrieve', 200, undefined, i);
    r.record('retrieve', 503, 'inflight', 10_000); // a refusal: not in the percentiles
    advance(1000);
    const s = r.sample();
    expect(s.p50Ms).toBeGreaterThan(50 / 1.05);
    expect(s.p50Ms).toBeLessThan(50 * 1.05);
    expect(s.p99Ms).toBeGreaterThan(99 / 1.05);
    expect(s.p99Ms).toBeLessThan(99 * 1.05);
    advance(3000); // past the 3 s window
    expect(r.sample().p99Ms).toBe(0);
  });

  it('reuses a slot of the ring for a new second without keeping its old counts', () => {
    const { r, advance } = recorder();
    r.record('retrieve', 200, undefined, 1);
    advance(10_000); // the same slot, ten seconds later
    r.record('retrieve', 503, 'permits', 0);
    advance(1000);
    const s = r.sample();
    expect(s.offeredPerSec).toBe(1);
    expect(s.goodputPerSec).toBe(0);
    expect(s.refusedPerSec).toEqual({ permits: 1 });
  });

  it('counts 2xx answers by the degradation level they ran at, per second, and nothing else', () => {
    const { r, advance } = recorder();
    const none = { Full: 0, ReducedCandidates: 0, CoarseAggregates: 0, NoDiversity: 0 };
    expect(r.sample().levelsPerSec).toEqual(none);
    r.record('retrieve', 200, undefined, 1, 'Full');
    r.record('retrieve', 200, undefined, 1, 'Full');
    r.record('search', 200, undefined, 1, 'ReducedCandidates');
    r.record('retrieve', 200, undefined, 1, 'NoDiversity');
    r.record('retrieve', 200, undefined, 1, 'NoDiversity');
    r.record('retrieve', 200, undefined, 1, 'NoDiversity');
    // Not a query answer at a level: a refusal, an error, a write, an unknown or inherited name.
    r.record('retrieve', 503, 'TIDAL_OVERLOADED', 0, 'CoarseAggregates');
    r.record('retrieve', 500, 'TIDAL_SERVE_INTERNAL', 1, 'CoarseAggregates');
    r.record('signals', 200, undefined, 1);
    r.record('retrieve', 200, undefined, 1, 'Degraded');
    r.record('retrieve', 200, undefined, 1, 'toString');
    // The second in progress is not reported yet.
    expect(r.sample().levelsPerSec).toEqual(none);
    advance(1000);
    r.record('retrieve', 200, undefined, 1, 'CoarseAggregates');
    const s = r.sample();
    expect(s.levelsPerSec).toEqual({ Full: 2, ReducedCandidates: 1, CoarseAggregates: 0, NoDiversity: 3 });
    expect(s.goodputPerSec).toBe(9);
    advance(1000);
    expect(r.sample().levelsPerSec).toEqual({ ...none, CoarseAggregates: 1 });
    // A second with no answers at all, and a slot of the ring reused ten seconds on: zeros.
    advance(1000);
    expect(r.sample().levelsPerSec).toEqual(none);
    advance(7000); // second 20: the slot second 10 filled
    r.record('retrieve', 200, undefined, 1, 'Full');
    advance(1000);
    expect(r.sample().levelsPerSec).toEqual({ ...none, Full: 1 });
  });

  it('refuses a window longer than the history', () => {
    expect(() => new Recorder({ inFlight: () => 0, level: () => 'Full', historySeconds: 5, windowSeconds: 6 })).toThrow(/windowSeconds/);
  });
});

describe('Recorder in a server', () => {
  it('counts each query answer under the level its answer carries', async () => {
    let now = 50_000;
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }] })
      .open();
    const server = await startServer({ db, port: 0, clock: () => now });
    try {
      await db.upsertItems(Array.from({ length: 20 }, (_, i) => ({ id: `item-${i}` })));
      // The caller's `level` makes a query run no better than it: a level per query, whatever the load.
      const asked = ['Full', 'NoDiversity', 'NoDiversity', 'CoarseAggregates', 'ReducedCandidates', 'NoDiversity'];
      const seen: (string | null)[] = [];
      for (const [i, level] of asked.entries()) {
        const path = i % 2 === 0 ? '/retrieve' : '/search';
        const body = path === '/retrieve' ? { profile: 'popular', level, limit: 3 } : { text: 'item', level, limit: 3 };
        const res = await fetch(`${server.url!}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        expect(res.status, await res.text()).toBe(200);
        seen.push(res.headers.get('x-tidal-degradation-level'));
      }
      expect(seen).toEqual(asked);
      // A write and an error carry no level.
      expect(
        (await fetch(`${server.url!}/signals`, { method: 'POST', body: JSON.stringify([{ item: 'item-1', kind: 'view' }]) })).status,
      ).toBe(200);
      expect((await fetch(`${server.url!}/retrieve`, { method: 'POST', body: '{"profile":"nope"}' })).status).toBe(400);
      now += 1000;
      const s = server.recorder.sample();
      expect(s.levelsPerSec).toEqual({ Full: 1, ReducedCandidates: 1, CoarseAggregates: 1, NoDiversity: 3 });
      expect(s.goodputPerSec).toBe(7);
    } finally {
      await server.close();
      await db.close();
    }
  });
});
