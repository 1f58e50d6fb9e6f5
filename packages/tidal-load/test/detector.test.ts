import { describe, expect, it } from 'vitest';
import {
  DEFAULT_THRESHOLDS,
  DegradationLevel,
  InvalidInputError,
  LoadDetector,
  OverloadedError,
  levelName,
  resolveAdmissionLimit,
  type DegradationLevelName,
} from '../src/index.js';

describe('DegradationLevel', () => {
  it('is ordered and named', () => {
    expect(DegradationLevel.Full < DegradationLevel.ReducedCandidates).toBe(true);
    expect(DegradationLevel.ReducedCandidates < DegradationLevel.CoarseAggregates).toBe(true);
    expect(DegradationLevel.CoarseAggregates < DegradationLevel.NoDiversity).toBe(true);
    expect([0, 1, 2, 3].map((l) => levelName(l as DegradationLevel))).toEqual([
      'Full',
      'ReducedCandidates',
      'CoarseAggregates',
      'NoDiversity',
    ]);
    expect(JSON.parse(JSON.stringify({ level: DegradationLevel.CoarseAggregates }))).toEqual({ level: 2 });
  });

  it('is frozen: a level cannot be reassigned, added or removed', () => {
    expect(Object.isFrozen(DegradationLevel)).toBe(true);
    const levels = DegradationLevel as Record<string, number | string>;
    // ESM modules run in strict mode, where writing to a frozen object throws.
    expect(() => {
      levels.Full = 3;
    }).toThrow(TypeError);
    expect(() => {
      levels.Extra = 4;
    }).toThrow(TypeError);
    expect(() => delete levels.NoDiversity).toThrow(TypeError);
    expect(DegradationLevel).toEqual({
      Full: 0,
      ReducedCandidates: 1,
      CoarseAggregates: 2,
      NoDiversity: 3,
      0: 'Full',
      1: 'ReducedCandidates',
      2: 'CoarseAggregates',
      3: 'NoDiversity',
    });
  });

  it('maps a level back to its name, as a numeric enum does, typed as the name', () => {
    const level: DegradationLevel = [DegradationLevel.Full, DegradationLevel.NoDiversity][1]!;
    const name: DegradationLevelName = DegradationLevel[level];
    expect(name).toBe('NoDiversity');
    for (const n of [0, 1, 2, 3] as const) expect(DegradationLevel[DegradationLevel[n]]).toBe(n);
  });
});

describe('LoadDetector', () => {
  it('decides the level from the count at entry, across every threshold and back', () => {
    const d = new LoadDetector({ thresholds: { reducedCandidates: 3, coarseAggregates: 5, noDiversity: 7 } });
    const guards = Array.from({ length: 8 }, () => d.enter());
    expect(guards.map((g) => g.level)).toEqual([0, 0, 1, 1, 2, 2, 3, 3]);
    expect(d.inFlight).toBe(8);
    expect(d.level).toBe(DegradationLevel.NoDiversity);
    // A guard's level never changes once decided, whatever happens to the count afterwards.
    for (const g of guards.slice(1)) g[Symbol.dispose]();
    expect(guards[7]!.level).toBe(DegradationLevel.NoDiversity);
    expect(d.inFlight).toBe(1);
    expect(d.level).toBe(DegradationLevel.Full);
    guards[0]![Symbol.dispose]();
    expect(d.inFlight).toBe(0);
  });

  it('accepts the seed thresholds 200 / 500 / 1000', () => {
    const d = new LoadDetector({ thresholds: { reducedCandidates: 200, coarseAggregates: 500, noDiversity: 1000 } });
    expect([199, 200, 499, 500, 999, 1000].map((n) => d.levelFor(n))).toEqual([0, 1, 1, 2, 2, 3]);
  });

  it('works with `using` and does not decrement twice', () => {
    const d = new LoadDetector();
    {
      using g = d.enter();
      expect(d.inFlight).toBe(1);
      g[Symbol.dispose]();
      expect(d.inFlight).toBe(0);
    }
    expect(d.inFlight).toBe(0);
  });

  it('shows a guard that was never disposed', () => {
    const d = new LoadDetector();
    const leaked = d.enter();
    {
      using _ok = d.enter();
    }
    expect(d.inFlight).toBe(1);
    expect(leaked.disposed).toBe(false);
  });

  it('keeps the count in a SharedArrayBuffer another thread can map', () => {
    const d = new LoadDetector();
    const view = new Int32Array(d.buffer);
    const g = d.enter();
    expect(Atomics.load(view, 0)).toBe(1);
    g[Symbol.dispose]();
    expect(Atomics.load(view, 0)).toBe(0);
  });

  it('refuses past the admission limit at once, without keeping the slot', () => {
    const d = new LoadDetector({
      thresholds: { reducedCandidates: 1, coarseAggregates: 2, noDiversity: 3 },
      admissionLimit: 4,
      retryAfterMs: (n, l) => n * 10 + l,
    });
    const held = [d.enter(), d.enter(), d.enter(), d.enter()];
    let err: unknown;
    try {
      d.enter();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(OverloadedError);
    expect(err).toMatchObject({ code: 'TIDAL_OVERLOADED', inFlight: 4, admissionLimit: 4, retryAfterMs: 44 });
    expect(d.inFlight).toBe(4);
    expect(d.rejected).toBe(1);
    for (const g of held) g[Symbol.dispose]();
    expect(d.inFlight).toBe(0);
    expect(() => d.enter()[Symbol.dispose]()).not.toThrow();
  });

  it('has no cap with admissionLimit 0', () => {
    const d = new LoadDetector({ admissionLimit: 0 });
    const gs = Array.from({ length: 5000 }, () => d.enter());
    expect(d.inFlight).toBe(5000);
    for (const g of gs) g[Symbol.dispose]();
  });

  it('refuses thresholds that are not strictly increasing positive whole numbers', () => {
    const bad = [
      { reducedCandidates: 0 },
      { reducedCandidates: -5 },
      { reducedCandidates: 2.5 },
      { reducedCandidates: 10, coarseAggregates: 10 },
      { coarseAggregates: 1000, noDiversity: 999 },
      { noDiversity: Number.NaN },
    ];
    for (const thresholds of bad) {
      expect(() => new LoadDetector({ thresholds })).toThrow(InvalidInputError);
    }
    expect(() => new LoadDetector({ thresholds: { coarseAggregates: 10 } })).toThrow(
      /loadThresholds.coarseAggregates must be greater than the previous threshold \(32\)/,
    );
    expect(DEFAULT_THRESHOLDS.reducedCandidates).toBeLessThan(DEFAULT_THRESHOLDS.coarseAggregates);
  });

  it('refuses an admission limit that is not a whole number or not above the last threshold', () => {
    expect(() => new LoadDetector({ admissionLimit: 1.5 })).toThrow(InvalidInputError);
    expect(() => new LoadDetector({ admissionLimit: -1 })).toThrow(InvalidInputError);
    expect(() => new LoadDetector({ admissionLimit: DEFAULT_THRESHOLDS.noDiversity })).toThrow(
      'admissionLimit must be 0 (disabled) or a whole number above loadThresholds.noDiversity (128), got 128 (number)',
    );
    expect(new LoadDetector({ admissionLimit: DEFAULT_THRESHOLDS.noDiversity + 1 }).admissionLimit).toBe(129);
  });

  it("resolves 'auto' only where the caller says what it stands for", () => {
    const t = DEFAULT_THRESHOLDS;
    expect(resolveAdmissionLimit('auto', t, { auto: 256 })).toBe(256);
    expect(resolveAdmissionLimit(0, t, { auto: 256 })).toBe(0);
    expect(() => resolveAdmissionLimit('auto', t)).toThrow(InvalidInputError);
    expect(() => resolveAdmissionLimit(2 ** 30 + 1, t)).toThrow(InvalidInputError);
    expect(() => resolveAdmissionLimit(Number.NaN, t, { field: 'load.admissionLimit', auto: 256 })).toThrow(
      "load.admissionLimit must be 'auto', 0 (disabled) or a whole number above loadThresholds.noDiversity (128), got NaN (number)",
    );
  });
});
