import { describe, expect, it } from 'vitest';
import { Recorder } from 'tidal-serve';

function recorder(start = 10_000) {
  let now = start;
  let inFlight = 0;
  const r = new Recorder({ clock: () => now, inFlight: () => inFlight, level: () => 'Full', historySeconds: 10, windowSeconds: 3 });
  return {
    r,
    advance(ms: number) {
      now += ms;
    },
    setInFlight(n: number) {
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
    r.record('retrieve', 503, 'inflight', 10_000);   // a refusal: not in the percentiles
    advance(1000);
    const s = r.sample();
    expect(s.p50Ms).toBeGreaterThan(50 / 1.05);
    expect(s.p50Ms).toBeLessThan(50 * 1.05);
    expect(s.p99Ms).toBeGreaterThan(99 / 1.05);
    expect(s.p99Ms).toBeLessThan(99 * 1.05);
    advance(3000);   // past the 3 s window
    expect(r.sample().p99Ms).toBe(0);
  });

  it('reuses a slot of the ring for a new second without keeping its old counts', () => {
    const { r, advance } = recorder();
    r.record('retrieve', 200, undefined, 1);
    advance(10_000);   // the same slot, ten seconds later
    r.record('retrieve', 503, 'permits', 0);
    advance(1000);
    const s = r.sample();
    expect(s.offeredPerSec).toBe(1);
    expect(s.goodputPerSec).toBe(0);
    expect(s.refusedPerSec).toEqual({ permits: 1 });
  });

  it('refuses a window longer than the history', () => {
    expect(() => new Recorder({ inFlight: () => 0, level: () => 'Full', historySeconds: 5, windowSeconds: 6 })).toThrow(/windowSeconds/);
  });
});
