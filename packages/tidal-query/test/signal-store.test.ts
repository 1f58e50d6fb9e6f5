import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { CapacityError, DegradationLevel, InvalidInputError, TidalError } from 'tidal-load';
import { atLevels } from './level-runner.js';
import { Catalog } from '../src/catalog.js';
import { popularity, type QueryContext } from '../src/context.js';
import { readItemSignals } from '../src/item-signals.js';
import { openStorage } from 'tidal-wal/storage';
import { ItemsWriter } from '../src/items-table.js';
import { RetrieveExecutor } from '../src/retrieve.js';
import type { Profile } from '../src/types.js';
import { SLOT_BYTES, SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import * as L from '../src/signals/layout.js';
import { WINDOW_MS, windowStartMs } from '../src/windows.js';
import { mulberry32 } from './helpers/random.js';
import { LAYOUT1_KINDS, LAYOUT1_T0, layout1Bytes, layout1Events, layout1Now, type Layout1Event } from './layout1-fixture.js';
import { bumpRing } from '../src/signals/rings.js';

const MIN = 60_000;
const HOUR = 3_600_000;
// Monday 2025-01-06 12:00 UTC: on a whole hour, so 5-minute and hour boundaries are easy to name.
const T0 = Date.UTC(2025, 0, 6, 12, 0, 0);
// The first start of a 14-hour bucket (the 7d ring's) after T0.
const T7 = Math.ceil(T0 / L.UNIT_7D_MS) * L.UNIT_7D_MS;

function kind(name: string, halfLifeMs: number): SignalKindSpec {
  return { name, halfLifeMs, windows: ['1h', '24h', '7d', 'all'], velocity: true };
}

const KINDS = [kind('view', HOUR), kind('like', 2 * HOUR), kind('share', 4 * HOUR)];

function newStore(maxSlots = 64, kinds: SignalKindSpec[] = KINDS, maxOrdinals = 16): SignalStore {
  return SignalStore.create({ kinds, maxOrdinals, maxSlots });
}

/** What a checkpoint stores: the used prefix of the slot arena, byte for byte. */
function stateBytes(store: SignalStore): Uint8Array {
  return new Uint8Array(store.arena.slots, 0, store.slotsUsed() * SLOT_BYTES).slice();
}

function oldestAt(store: SignalStore, slot: number): number {
  return new Float64Array(store.arena.slots)[slot * L.SLOT_F64 + L.F64_OLDEST]!;
}

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected an error');
}

describe('SignalStore decayed score', () => {
  it('halves after one half-life and does not grow before its reference time', () => {
    const store = newStore();
    store.apply(0, 0, 8, T0);
    const slot = store.slotOf(0, 0);
    expect(store.decayedScore(slot, T0)).toBe(8);
    expect(store.decayedScore(slot, T0 + HOUR)).toBeCloseTo(4, 12);
    expect(store.decayedScore(slot, T0 + 2 * HOUR)).toBeCloseTo(2, 12);
    expect(store.decayedScore(slot, T0 - 10 * MIN)).toBe(8);

    store.apply(0, 0, 1, T0 + HOUR);
    expect(store.decayedScore(slot, T0 + HOUR)).toBeCloseTo(5, 12);
    expect(store.decayedScore(slot, T0 + 2 * HOUR)).toBeCloseTo(2.5, 12);
  });

  it('uses each kind’s own half-life', () => {
    const store = newStore();
    store.apply(3, 1, 6, T0);
    store.apply(3, 2, 6, T0);
    expect(store.decayedScore(store.slotOf(3, 1), T0 + 2 * HOUR)).toBeCloseTo(3, 12);
    expect(store.decayedScore(store.slotOf(3, 2), T0 + 2 * HOUR)).toBeCloseTo(6 * Math.SQRT1_2, 12);
  });

  it('pre-decays out-of-order events so the order of arrival does not matter', () => {
    const events: [number, number][] = [
      [3, T0],
      [2, T0 + 25 * MIN],
      [5, T0 + 3 * HOUR + 7],
      [1.5, T0 + 90 * MIN],
    ];
    const inOrder = newStore();
    for (const [w, t] of [...events].sort((a, b) => a[1] - b[1])) inOrder.apply(1, 0, w, t);
    const shuffled = newStore();
    for (const [w, t] of [events[2]!, events[0]!, events[3]!, events[1]!]) shuffled.apply(1, 0, w, t);

    const now = T0 + 5 * HOUR;
    const a = inOrder.decayedScore(inOrder.slotOf(1, 0), now);
    const b = shuffled.decayedScore(shuffled.slotOf(1, 0), now);
    expect(b).toBeCloseTo(a, 12);
    const expected = events.reduce((sum, [w, t]) => sum + w * 2 ** (-(now - t) / HOUR), 0);
    expect(a).toBeCloseTo(expected, 12);
  });
});

describe('SignalStore windows', () => {
  it('counts the 1h window in 5-minute buckets: an event counts for 55 to 60 minutes, never past 60', () => {
    const store = newStore();
    store.apply(0, 0, 1, T0 - 1); // last millisecond of the 5-minute bucket before T0's
    store.apply(0, 0, 1, T0); // first millisecond of T0's bucket
    const slot = store.slotOf(0, 0);
    expect(store.windowCount(slot, '1h', T0 - 1)).toBe(1);
    expect(store.windowCount(slot, '1h', T0)).toBe(2);
    store.apply(0, 0, 1, T0 + 2 * MIN + 30_000); // the middle of T0's bucket
    expect(store.windowCount(slot, '1h', T0 + 55 * MIN - 1)).toBe(3);
    // From T0 + 55 min the window is the 12 buckets from T0's on: the event at T0 - 1, 55 minutes
    // and 1 ms old, has left it (the part of the window before its oldest bucket is dropped).
    expect(store.windowCount(slot, '1h', T0 + 55 * MIN)).toBe(2);
    expect(store.velocity(slot, '1h', T0 + 55 * MIN)).toBe(2 / 3600);
    // The events of T0's bucket leave together, when the first of them is exactly 60 minutes old.
    expect(store.windowCount(slot, '1h', T0 + 60 * MIN - 1)).toBe(2);
    expect(store.windowCount(slot, '1h', T0 + 60 * MIN)).toBe(0);
    expect(store.windowCount(slot, '1h', T0 + 1000 * HOUR)).toBe(0);
    expect(store.windowCount(slot, '1h', T0 - 2 * HOUR)).toBe(0);
    expect(store.windowCount(slot, 'all', T0 + 1000 * HOUR)).toBe(3);
  });

  it('counts the 24h window in hours: an event counts for 23 to 24 hours', () => {
    const store = newStore();
    store.apply(0, 1, 1, T0 - 1);
    store.apply(0, 1, 1, T0);
    const slot = store.slotOf(0, 1);
    expect(store.windowCount(slot, '24h', T0 - 1)).toBe(1);
    expect(store.windowCount(slot, '24h', T0 + 23 * HOUR - 1)).toBe(2);
    expect(store.windowCount(slot, '24h', T0 + 23 * HOUR)).toBe(1);
    expect(store.windowCount(slot, '24h', T0 + 24 * HOUR - 1)).toBe(1);
    expect(store.windowCount(slot, '24h', T0 + 24 * HOUR)).toBe(0);
  });

  it('counts the 7d window in 14-hour buckets: an event counts for 154 to 168 hours', () => {
    const store = newStore();
    store.apply(0, 2, 1, T7 - 1);
    store.apply(0, 2, 1, T7);
    store.apply(0, 2, 1, T7 + 13 * HOUR);
    const slot = store.slotOf(0, 2);
    expect(store.windowCount(slot, '7d', T7 - 1)).toBe(1);
    expect(store.windowCount(slot, '7d', T7 + 154 * HOUR - 1)).toBe(3);
    expect(store.windowCount(slot, '7d', T7 + 154 * HOUR)).toBe(2);
    expect(store.velocity(slot, '7d', T7 + 154 * HOUR)).toBe(2 / 604_800);
    expect(store.windowCount(slot, '7d', T7 + 168 * HOUR - 1)).toBe(2);
    expect(store.windowCount(slot, '7d', T7 + 168 * HOUR)).toBe(0);
  });

  it('starts each window where windowStartMs says: an event at its start counts, one a millisecond earlier does not', () => {
    for (const now of [T0, T0 + 1, T0 + 4 * MIN + 59_999, T7 + 13 * HOUR + 7 * MIN, T7 + 3 * 24 * HOUR]) {
      for (const w of ['1h', '24h', '7d'] as const) {
        const store = newStore();
        const start = windowStartMs(w, now);
        store.apply(0, 0, 1, start);
        store.apply(1, 0, 1, start - 1);
        expect(store.windowCount(store.slotOf(0, 0), w, now), `${w} at ${now}`).toBe(1);
        expect(store.windowCount(store.slotOf(1, 0), w, now), `${w} at ${now}`).toBe(0);
        expect(now - start).toBeLessThanOrEqual(WINDOW_MS[w]);
        expect(now - start).toBeGreaterThan(WINDOW_MS[w] * (11 / 12) - 1);
      }
    }
  });

  it('wraps the 1h ring and ignores events too old for it', () => {
    const store = newStore();
    for (let u = 0; u < 12; u++) store.apply(0, 0, 1, T0 + u * 5 * MIN);
    const slot = store.slotOf(0, 0);
    expect(store.windowCount(slot, '1h', T0 + 55 * MIN)).toBe(12);

    // Bucket 12 reuses bucket 0's place.
    store.apply(0, 0, 1, T0 + 60 * MIN + 30_000);
    expect(store.windowCount(slot, '1h', T0 + 60 * MIN)).toBe(12);
    expect(store.allTimeCount(slot)).toBe(13);

    // Jumping to bucket 15 clears buckets 13 and 14 (and the places of 1..3): the ring holds 4..15.
    store.apply(0, 0, 1, T0 + 75 * MIN);
    expect(store.windowCount(slot, '1h', T0 + 75 * MIN)).toBe(10);
    // A reader whose clock is behind the newest event sees the ring only up to its own bucket.
    expect(store.windowCount(slot, '1h', T0 + 60 * MIN)).toBe(9);

    // Late but still inside the ring: counted.
    store.apply(0, 0, 1, T0 + 25 * MIN);
    expect(store.windowCount(slot, '1h', T0 + 75 * MIN)).toBe(11);
    // Bucket 3 is head - 12: too old for the ring, counted all-time only.
    store.apply(0, 0, 1, T0 + 20 * MIN - 1);
    expect(store.windowCount(slot, '1h', T0 + 75 * MIN)).toBe(11);
    expect(store.allTimeCount(slot)).toBe(16);

    // A gap of a full lap or more clears everything.
    store.apply(0, 0, 1, T0 + 500 * MIN);
    expect(store.windowCount(slot, '1h', T0 + 500 * MIN)).toBe(1);
    expect(store.windowCount(slot, '1h', T0 + 135 * MIN)).toBe(0);
    expect(store.allTimeCount(slot)).toBe(17);
  });

  it('counts 24h and 7d from their own rings, with wrap-around and too-old events', () => {
    const store = newStore();
    for (let h = 0; h < 200; h++) store.apply(2, 1, 1, T7 + h * HOUR + 17 * MIN);
    const slot = store.slotOf(2, 1);
    const now = T7 + 199 * HOUR + 59 * MIN;
    expect(store.windowCount(slot, '24h', now)).toBe(24);
    // now is in 14-hour bucket 14 (hours 196..209): the 7d window is buckets 3..14, hours 42..199.
    expect(store.windowCount(slot, '7d', now)).toBe(158);
    expect(store.windowCount(slot, 'all', now)).toBe(200);
    // Hour boundary: at hour 200 the 24h window starts at hour 177.
    expect(store.windowCount(slot, '24h', T7 + 200 * HOUR - 1)).toBe(24);
    expect(store.windowCount(slot, '24h', T7 + 200 * HOUR)).toBe(23);
    // Bucket boundary: at hour 210 the 7d window starts at hour 56.
    expect(store.windowCount(slot, '7d', T7 + 210 * HOUR - 1)).toBe(158);
    expect(store.windowCount(slot, '7d', T7 + 210 * HOUR)).toBe(144);

    store.apply(2, 1, 1, T7 + 190 * HOUR); // inside the 24h ring [176, 199] and the 7d ring
    expect(store.windowCount(slot, '24h', now)).toBe(25);
    expect(store.windowCount(slot, '7d', now)).toBe(159);
    store.apply(2, 1, 1, T7 + 175 * HOUR + 59 * MIN); // hour 175 = head - 24: too old for 24h, not for 7d
    expect(store.windowCount(slot, '24h', now)).toBe(25);
    expect(store.windowCount(slot, '7d', now)).toBe(160);
    store.apply(2, 1, 1, T7 + 41 * HOUR); // 14-hour bucket 2 = head - 12: too old for 7d
    expect(store.windowCount(slot, '7d', now)).toBe(160);
    expect(store.allTimeCount(slot)).toBe(203);

    expect(store.windowCount(slot, '24h', T7 + 209 * HOUR)).toBe(15);
    expect(store.windowCount(slot, '7d', T7 + 1000 * HOUR)).toBe(0);
    expect(store.newestAt(slot)).toBe(T7 + 199 * HOUR + 17 * MIN);
    expect(oldestAt(store, slot)).toBe(T7 + 17 * MIN);
  });

  it('saturates a bucket at its largest count instead of wrapping', () => {
    const store = newStore();
    store.apply(0, 0, 1, T0);
    const slot = store.slotOf(0, 0);
    const i32 = new Int32Array(store.arena.slots);
    const b = slot * L.SLOT_INT32;
    const rings = [
      [L.I32_BUCKETS_1H, L.BUCKETS_1H, L.UNIT_1H_MS],
      [L.I32_BUCKETS_24H, L.BUCKETS_24H, L.UNIT_24H_MS],
      [L.I32_BUCKETS_7D, L.BUCKETS_7D, L.UNIT_7D_MS],
    ] as const;
    // As if 2^31 - 2 events had been counted in T0's buckets.
    for (const [base, len, unit] of rings) i32[b + base + (Math.floor(T0 / unit) % len)] = L.BUCKET_MAX - 1;
    for (let i = 1; i <= 3; i++) store.apply(0, 0, 1, T0 + i);
    for (const w of ['1h', '24h', '7d'] as const) expect(store.windowCount(slot, w, T0)).toBe(L.BUCKET_MAX);
    expect(store.velocity(slot, '1h', T0)).toBe(L.BUCKET_MAX / 3600);
    // The all-time count (a Float64) goes on counting.
    expect(store.allTimeCount(slot)).toBe(4);
  });

  it('matches a direct model of the rings on a seeded random event stream', () => {
    // Seeded, so a failure reproduces exactly.
    const rand = mulberry32(0x5eed);
    const store = newStore();
    const rings = { '1h': [L.UNIT_1H_MS, L.BUCKETS_1H], '24h': [HOUR, 24], '7d': [L.UNIT_7D_MS, 12] } as const;
    type Ring = keyof typeof rings;
    const heads: Record<Ring, number> = { '1h': -Infinity, '24h': -Infinity, '7d': -Infinity };
    const events: { t: number; w: number; ok: Record<Ring, boolean> }[] = [];
    let clock = T0;
    for (let i = 0; i < 3000; i++) {
      clock += Math.floor(rand() * 4 * MIN);
      // About one event in six is late, some by more than a ring's length.
      const late = rand() < 1 / 6 ? Math.floor(rand() * 9 * 24 * HOUR) : 0;
      const t = Math.max(0, clock - late);
      const w = Math.round(rand() * 100) / 10;
      const ok = {} as Record<Ring, boolean>;
      for (const r of Object.keys(rings) as Ring[]) {
        const [unit, len] = rings[r];
        const u = Math.floor(t / unit);
        ok[r] = u > heads[r] - len;
        heads[r] = Math.max(heads[r], u);
      }
      events.push({ t, w, ok });
      store.apply(9, 0, w, t);
    }
    const slot = store.slotOf(9, 0);
    const expectWindow = (nowMs: number, r: Ring): number => {
      const [unit, len] = rings[r];
      const now = Math.floor(nowMs / unit);
      return events.filter((e) => {
        const u = Math.floor(e.t / unit);
        return e.ok[r] && u > heads[r] - len && u <= now && u > now - len;
      }).length;
    };
    for (const offset of [-3 * HOUR, -61 * MIN, -MIN, 0, 1, 59 * MIN, 5 * HOUR, 30 * HOUR, 8 * 24 * HOUR]) {
      const now = clock + offset;
      for (const r of Object.keys(rings) as Ring[]) expect(store.windowCount(slot, r, now)).toBe(expectWindow(now, r));
    }
    expect(store.allTimeCount(slot)).toBe(events.length);
    expect(store.newestAt(slot)).toBe(Math.max(...events.map((e) => e.t)));
    expect(oldestAt(store, slot)).toBe(Math.min(...events.map((e) => e.t)));
    const now = clock + HOUR;
    const score = events.reduce((sum, e) => sum + e.w * 2 ** (-(now - e.t) / HOUR), 0);
    expect(store.decayedScore(slot, now) / score).toBeCloseTo(1, 10);
  });

  it('computes velocities as window counts per second', () => {
    const store = newStore();
    for (let i = 0; i < 3; i++) store.apply(0, 0, 1, T0 - 30 * HOUR + i);
    for (let i = 0; i < 2; i++) store.apply(0, 0, 1, T0 - MIN + i);
    store.apply(0, 0, 1, T0 - 3 * HOUR);
    const slot = store.slotOf(0, 0);
    expect(store.velocity(slot, '1h', T0)).toBe(2 / 3600);
    expect(store.velocity(slot, '24h', T0)).toBe(3 / 86400);
    expect(store.velocity(slot, '7d', T0)).toBe(6 / 604800);
  });

  it('coarse mode reads the all-time count for windows and the 24h count for velocity', () => {
    const store = newStore();
    for (let i = 0; i < 3; i++) store.apply(0, 0, 1, T0 - 30 * HOUR + i);
    for (let i = 0; i < 2; i++) store.apply(0, 0, 1, T0 - MIN + i);
    const slot = store.slotOf(0, 0);
    for (const w of ['1h', '24h', '7d', 'all'] as const) {
      expect(store.windowCount(slot, w, T0, true)).toBe(5);
    }
    for (const w of ['1h', '24h', '7d'] as const) {
      expect(store.velocity(slot, w, T0, true)).toBe(2 / 86400);
    }
    expect(store.windowCount(slot, '1h', T0)).toBe(2);
    expect(store.velocity(slot, '7d', T0)).toBe(5 / 604800);
  });

  it('read() returns the declared windows in one pass, matching the single readers', () => {
    const store = newStore();
    for (let i = 0; i < 40; i++) store.apply(4, 2, 0.5 + i, T0 + i * 17 * MIN);
    const slot = store.slotOf(4, 2);
    const now = T0 + 12 * HOUR;
    const all = ['1h', '24h', '7d', 'all'] as const;

    const full = store.read(slot, now, false, all, true);
    expect(full.score).toBe(store.decayedScore(slot, now));
    expect(full.count).toBe(40);
    for (const w of all) expect(full.windows[w]).toBe(store.windowCount(slot, w, now));
    for (const w of ['1h', '24h', '7d'] as const) expect(full.velocity?.[w]).toBe(store.velocity(slot, w, now));

    const coarse = store.read(slot, now, true, all, true);
    for (const w of all) expect(coarse.windows[w]).toBe(40);
    for (const w of ['1h', '24h', '7d'] as const) expect(coarse.velocity?.[w]).toBe(store.velocity(slot, w, now, true));

    const some = store.read(slot, now, false, ['1h', 'all'], false);
    expect(some.velocity).toBeUndefined();
    expect(Object.keys(some.windows).sort()).toEqual(['1h', 'all']);
    expect(some.windows['1h']).toBe(store.windowCount(slot, '1h', now));
  });
});

describe('SignalStore slots and index', () => {
  it('uses 0 in the index for absent pairs and slot + 1 for present ones', () => {
    const store = newStore();
    const index = new Int32Array(store.arena.index);
    expect(index.length).toBe(16 * KINDS.length);
    expect(index.every((v) => v === 0)).toBe(true);
    expect(store.slotOf(5, 1)).toBe(-1);
    expect(store.slotsUsed()).toBe(0);

    store.apply(5, 1, 1, T0);
    store.apply(2, 0, 1, T0);
    store.apply(5, 1, 1, T0 + 1);
    expect(store.slotsUsed()).toBe(2);
    expect(store.slotOf(5, 1)).toBe(0);
    expect(store.slotOf(2, 0)).toBe(1);
    expect(index[5 * KINDS.length + 1]).toBe(1);
    expect(index[2 * KINDS.length + 0]).toBe(2);
    expect(index.filter((v) => v !== 0).length).toBe(2);
    expect(store.slotOrdinal(0)).toBe(5);
    expect(store.slotKind(0)).toBe(1);
    expect(store.slotOrdinal(1)).toBe(2);
    expect(store.slotKind(1)).toBe(0);
    expect(store.allTimeCount(0)).toBe(2);
  });

  it('throws CapacityError when every slot is taken, and keeps serving existing slots', () => {
    const store = newStore(2);
    store.apply(0, 0, 1, T0);
    store.apply(1, 0, 1, T0);
    const err = catchError(() => store.apply(2, 0, 1, T0));
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).resource).toBe('signal state');
    expect((err as CapacityError).capacity).toBe(2);
    expect((err as Error).message).toContain('capacity.signalSlots');
    expect(store.slotsUsed()).toBe(2);
    expect(store.slotOf(2, 0)).toBe(-1);
    store.apply(1, 0, 1, T0 + 1);
    expect(store.allTimeCount(store.slotOf(1, 0))).toBe(2);
  });

  it('rejects out-of-range input, naming the field, without writing', () => {
    const store = newStore();
    const cases: [() => unknown, string][] = [
      [() => store.apply(16, 0, 1, T0), 'ordinal'],
      [() => store.apply(-1, 0, 1, T0), 'ordinal'],
      [() => store.apply(1.5, 0, 1, T0), 'ordinal'],
      [() => store.apply(0, 3, 1, T0), 'kind'],
      [() => store.apply(0, 0, Number.NaN, T0), 'weight'],
      [() => store.apply(0, 0, 1, -1), 'atMs'],
      [() => store.apply(0, 0, 1, Number.POSITIVE_INFINITY), 'atMs'],
      [() => store.slotOf(0, -1), 'kind'],
      [() => store.decayedScore(64, T0), 'slot'],
      [() => store.windowCount(-1, '1h', T0), 'slot'],
    ];
    for (const [fn, field] of cases) {
      const err = catchError(fn);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect((err as InvalidInputError).field).toBe(field);
    }
    expect(store.slotsUsed()).toBe(0);
    expect(catchError(() => newStore(0))).toBeInstanceOf(InvalidInputError);
    expect(catchError(() => newStore(4, [kind('bad', 0)]))).toBeInstanceOf(InvalidInputError);
  });

  it('attaches read-only to the same arena and validates it', () => {
    const store = newStore();
    const reader = SignalStore.attach(structuredClone(store.arena), KINDS);
    store.apply(7, 2, 3, T0);
    expect(reader.slotsUsed()).toBe(1);
    const slot = reader.slotOf(7, 2);
    expect(slot).toBe(0);
    expect(reader.decayedScore(slot, T0 + 4 * HOUR)).toBeCloseTo(1.5, 12);
    expect(reader.windowCount(slot, '1h', T0)).toBe(1);

    const err = catchError(() => reader.apply(0, 0, 1, T0));
    expect(TidalError.is(err)).toBe(true);
    expect(reader.slotsUsed()).toBe(1);
    expect(catchError(() => SignalStore.attach(store.arena, KINDS.slice(0, 2)))).toBeInstanceOf(InvalidInputError);
    expect(catchError(() => SignalStore.attach({ ...store.arena, slots: new SharedArrayBuffer(SLOT_BYTES) }, KINDS))).toBeInstanceOf(
      InvalidInputError,
    );
  });
});

describe('SignalStore checkpoints', () => {
  function populate(store: SignalStore): void {
    let t = T0;
    for (let i = 0; i < 300; i++) {
      const ordinal = (i * 7) % 11;
      const k = i % 3;
      // Every fifth event arrives late, to exercise the out-of-order paths.
      const at = i % 5 === 4 ? t - 90 * MIN : t;
      store.apply(ordinal, k, 1 + (i % 4), at);
      t += 13 * MIN + 7;
    }
  }

  it('is a pure function of the apply sequence', () => {
    const a = newStore();
    const b = newStore();
    populate(a);
    populate(b);
    const bytes = stateBytes(a);
    expect(bytes.byteLength).toBe(a.slotsUsed() * SLOT_BYTES);
    expect(Buffer.from(bytes).equals(Buffer.from(stateBytes(b)))).toBe(true);
  });

  it('round-trips through exportState/importState', () => {
    const src = newStore();
    populate(src);
    const bytes = stateBytes(src);
    const dst = newStore();
    dst.importState(bytes);
    expect(dst.slotsUsed()).toBe(src.slotsUsed());
    expect(Buffer.from(stateBytes(dst)).equals(Buffer.from(bytes))).toBe(true);

    const now = T0 + 70 * HOUR;
    for (let o = 0; o < 16; o++) {
      for (let k = 0; k < 3; k++) {
        const s = src.slotOf(o, k);
        expect(dst.slotOf(o, k)).toBe(s);
        if (s < 0) continue;
        expect(dst.read(s, now, false, ['1h', '24h', '7d', 'all'], true)).toEqual(
          src.read(s, now, false, ['1h', '24h', '7d', 'all'], true),
        );
      }
    }
    // The store keeps working after the import: existing pairs update in place, new pairs append.
    const s = dst.slotOf(0, 0);
    const before = dst.allTimeCount(s);
    dst.apply(0, 0, 1, T0 + 70 * HOUR);
    expect(dst.allTimeCount(s)).toBe(before + 1);
    dst.apply(15, 2, 1, T0 + 70 * HOUR);
    expect(dst.slotOf(15, 2)).toBe(src.slotsUsed());
  });

  it('remaps kinds on import, dropping a removed kind and compacting the slots', () => {
    const src = newStore();
    populate(src);
    const bytes = stateBytes(src);
    const newKinds = [KINDS[0]!, KINDS[2]!];
    const dst = newStore(64, newKinds);
    dst.importState(bytes, [0, -1, 1]);

    let expectedSlots = 0;
    const now = T0 + 70 * HOUR;
    for (let o = 0; o < 16; o++) {
      expect(dst.slotOf(o, 0) >= 0).toBe(src.slotOf(o, 0) >= 0);
      expect(dst.slotOf(o, 1) >= 0).toBe(src.slotOf(o, 2) >= 0);
      for (const [oldK, newK] of [
        [0, 0],
        [2, 1],
      ] as const) {
        const s = src.slotOf(o, oldK);
        if (s < 0) continue;
        expectedSlots++;
        const d = dst.slotOf(o, newK);
        expect(dst.slotOrdinal(d)).toBe(o);
        expect(dst.slotKind(d)).toBe(newK);
        expect(dst.read(d, now, false, ['1h', '24h', '7d', 'all'], true)).toEqual(
          src.read(s, now, false, ['1h', '24h', '7d', 'all'], true),
        );
      }
    }
    expect(dst.slotsUsed()).toBe(expectedSlots);
    expect(expectedSlots).toBeLessThan(src.slotsUsed());
    for (let s = 0; s < dst.slotsUsed(); s++) {
      expect(dst.slotOf(dst.slotOrdinal(s), dst.slotKind(s))).toBe(s);
    }
  });

  it('validates what it imports', () => {
    const src = newStore();
    populate(src);
    const bytes = stateBytes(src);

    const err = catchError(() => newStore().importState(bytes.subarray(0, SLOT_BYTES + 8)));
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(catchError(() => newStore(2).importState(bytes))).toBeInstanceOf(CapacityError);
    // Fewer kinds and no remap: kind 2 no longer exists.
    expect(catchError(() => newStore(64, KINDS.slice(0, 2)).importState(bytes))).toBeInstanceOf(InvalidInputError);
    // Two old kinds folded onto one new kind would collide.
    expect(catchError(() => newStore().importState(bytes, [0, 0, 1]))).toBeInstanceOf(InvalidInputError);
    expect(catchError(() => newStore(64, KINDS, 4).importState(bytes))).toBeInstanceOf(InvalidInputError);
    // A remap with a hole where an old kind's new index should be.
    const remap = new Array<number>(3);
    remap[0] = 0;
    remap[2] = 1;
    const hole = catchError(() => newStore().importState(bytes, remap));
    expect(hole).toBeInstanceOf(InvalidInputError);
    expect((hole as InvalidInputError).field).toBe('kindRemap[1]');

    const used = newStore();
    used.apply(0, 0, 1, T0);
    expect(catchError(() => used.importState(bytes))).toBeInstanceOf(InvalidInputError);

    // A failed import writes nothing.
    const dst = newStore(2);
    catchError(() => dst.importState(bytes));
    expect(dst.slotsUsed()).toBe(0);
    expect(new Int32Array(dst.arena.index).every((v) => v === 0)).toBe(true);
  });
});

// A reader thread over the real store: it attaches to the arena the main thread writes and reads
// every slot through SignalStore.read until the writer is done. The events are built so that any
// consistent reading satisfies score = count = 7d count >= 24h count >= 1h count; a reading that
// mixes two states of a slot (a torn read) breaks one of them. The seqlock's retry count says how
// often a read met the writer inside its slot, so the test knows the two really overlapped.
const TORN_READER = `
const { parentPort, workerData } = require('node:worker_threads');
const { arena, kinds, storeUrl, seqlockUrl, shared, slots, maxReads, nowMs } = workerData;
Promise.all([import(storeUrl), import(seqlockUrl)]).then(([{ SignalStore }, { seqlockRetries }]) => {
  const store = SignalStore.attach(arena, kinds);
  const control = new Int32Array(shared);
  const windows = ['1h', '24h', '7d'];
  const last = new Float64Array(slots);
  const examples = [];
  let reads = 0, torn = 0, regressions = 0;
  parentPort.postMessage({ type: 'ready' });
  while (reads < maxReads) {
    const writerDone = Atomics.load(control, 0) === 1;
    const used = store.slotsUsed();
    for (let s = 0; s < used; s++) {
      const v = store.read(s, nowMs, false, windows, false);
      reads++;
      const w = v.windows;
      if (v.score !== v.count || w['7d'] !== v.count || w['24h'] > w['7d'] || w['1h'] > w['24h']) {
        torn++;
        if (examples.length < 3) examples.push({ slot: s, ...v });
      }
      if (v.count < last[s]) regressions++;
      last[s] = v.count;
    }
    Atomics.store(control, 1, seqlockRetries());
    // One more full pass after the writer finished, so the last states are read too.
    if (writerDone) break;
  }
  const counts = [];
  for (let s = 0; s < store.slotsUsed(); s++) counts.push(store.allTimeCount(s));
  parentPort.postMessage({ type: 'done', reads, retries: seqlockRetries(), torn, regressions, examples, counts });
});
`;

interface TornReport {
  type: 'done';
  reads: number;
  retries: number;
  torn: number;
  regressions: number;
  examples: unknown[];
  counts: number[];
}

describe('SignalStore across threads', () => {
  it('never returns a torn slot to a reader thread whose reads overlap the writer', async () => {
    const SLOTS = 4;
    // The writer writes MIN_EVENTS, then goes on until the reader has had to copy a slot again
    // (the writer changed it mid-read) OVERLAPS times, or until MAX_EVENTS.
    const MIN_EVENTS = 200_000;
    const OVERLAPS = 100;
    const MAX_EVENTS = 20_000_000;
    // Events over 100 hours (inside the 168-hour ring), read as of the end of them; no decay, so
    // a consistent score is the count.
    const MINUTES = 6_000;
    const nowMs = T0 + MINUTES * MIN;
    const kinds: SignalKindSpec[] = [{ name: 'view', halfLifeMs: Infinity, windows: ['1h', '24h', '7d'], velocity: false }];
    const store = SignalStore.create({ kinds, maxOrdinals: SLOTS, maxSlots: SLOTS });
    const shared = new SharedArrayBuffer(8);
    const control = new Int32Array(shared);
    const worker = new Worker(TORN_READER, {
      eval: true,
      workerData: {
        arena: store.arena,
        kinds,
        storeUrl: new URL('../dist/signals/store.js', import.meta.url).href,
        seqlockUrl: new URL('../dist/signals/seqlock.js', import.meta.url).href,
        shared,
        slots: SLOTS,
        maxReads: 4 * MAX_EVENTS,
        nowMs,
      },
    });
    let events = 0;
    try {
      const report = await new Promise<TornReport>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('exit', (code) => reject(new Error(`reader exited early with code ${code}`)));
        worker.on('message', (msg: { type: string }) => {
          if (msg.type !== 'ready') return resolve(msg as TornReport);
          while (events < MIN_EVENTS || (events < MAX_EVENTS && Atomics.load(control, 1) < OVERLAPS)) {
            store.apply(events % SLOTS, 0, 1, T0 + (events % MINUTES) * MIN);
            events++;
          }
          Atomics.store(control, 0, 1);
        });
      });

      expect(report.retries).toBeGreaterThanOrEqual(OVERLAPS);
      expect(report.examples).toEqual([]);
      expect(report.torn).toBe(0);
      expect(report.regressions).toBe(0);
      expect(report.reads).toBeGreaterThan(0);
      expect(report.counts).toEqual(Array.from({ length: SLOTS }, (_, s) => store.allTimeCount(s)));
      expect(report.counts.reduce((a, b) => a + b, 0)).toBe(events);
    } finally {
      worker.removeAllListeners('exit');
      await worker.terminate();
    }
  });
});

describe('SignalStore growth', () => {
  it('grows across its initial size, keeping every value, to exactly the same state as a fixed reservation', () => {
    // 3 kinds × 8000 ordinals = 24 000 index entries and 3000 slots: both past their first step.
    const grown = newStore(3000, KINDS, 8000);
    const fixed = SignalStore.create({ kinds: KINDS, maxOrdinals: 8000, maxSlots: 3000, reservation: 'fixed' });
    const { index, slots } = grown.arena;
    expect(slots.growable).toBe(true);
    expect(slots.maxByteLength).toBe(3000 * SLOT_BYTES);
    expect(index.maxByteLength).toBe(8000 * KINDS.length * 4);
    expect(fixed.arena.slots.growable).toBe(false);
    const firstSlots = slots.byteLength / SLOT_BYTES;
    const firstEntries = index.byteLength / 4;
    expect(firstSlots).toBeLessThan(3000);
    expect(firstEntries).toBeLessThan(8000 * KINDS.length);
    // A reader attached before the growth sees it: the buffers are the same memory.
    const reader = SignalStore.attach(structuredClone(grown.arena), KINDS);
    // Past the index's current length every pair reads as absent.
    expect(grown.slotOf(7999, 2)).toBe(-1);
    expect(reader.slotOf(7999, 2)).toBe(-1);

    const now = T0 + 30 * HOUR;
    const all = ['1h', '24h', '7d', 'all'] as const;
    let before: ReturnType<SignalStore['read']>[] = [];
    for (let i = 0; i < 3000; i++) {
      // Ordinals spread to the top of the range, so the index grows too.
      const ordinal = (i * 2663) % 8000;
      for (let e = 0; e < 1 + (i % 3); e++) {
        for (const store of [grown, fixed]) store.apply(ordinal, i % 3, 1 + e, T0 + i * MIN + e);
      }
      if (i === firstSlots - 1) before = Array.from({ length: firstSlots }, (_, s) => grown.read(s, now, false, all, true));
    }
    expect(slots.byteLength).toBe(3000 * SLOT_BYTES);
    expect(index.byteLength).toBeGreaterThan(firstEntries * 4);
    for (let s = 0; s < firstSlots; s++) expect(grown.read(s, now, false, all, true)).toEqual(before[s]);
    expect(Buffer.from(stateBytes(grown)).equals(Buffer.from(stateBytes(fixed)))).toBe(true);
    expect(Buffer.from(new Uint8Array(index)).equals(Buffer.from(new Uint8Array(fixed.arena.index)))).toBe(true);
    expect(reader.slotsUsed()).toBe(3000);
    for (let i = 0; i < 3000; i++) {
      const ordinal = (i * 2663) % 8000;
      const s = reader.slotOf(ordinal, i % 3);
      expect(s).toBe(i);
      expect(reader.allTimeCount(s)).toBe(1 + (i % 3));
    }
    // A checkpoint of the grown arena loads into a fresh store, which grows to hold it.
    const loaded = newStore(3000, KINDS, 8000);
    loaded.importState(stateBytes(grown));
    expect(Buffer.from(stateBytes(loaded)).equals(Buffer.from(stateBytes(grown)))).toBe(true);
    for (let s = 0; s < 3000; s += 97) expect(loaded.slotOf(loaded.slotOrdinal(s), loaded.slotKind(s))).toBe(s);
    // Past the maximum the store refuses, as before.
    expect(catchError(() => grown.apply(7999, 0, 1, T0))).toBeInstanceOf(CapacityError);
  });

  it('shows a worker the growth of an arena it attached before the growth', async () => {
    const store = newStore(5000, KINDS, 5000);
    const sync = new SharedArrayBuffer(4);
    const storeUrl = new URL('../dist/signals/store.js', import.meta.url).href;
    const worker = new Worker(
      `
      const { parentPort, workerData } = require('node:worker_threads');
      const { arena, kinds, sync, storeUrl, pairs } = workerData;
      import(storeUrl).then(({ SignalStore }) => {
        const reader = SignalStore.attach(arena, kinds);
        const slotsView = new Int32Array(arena.slots);
        const lengthBefore = slotsView.length;
        parentPort.postMessage({ type: 'ready' });
        Atomics.wait(new Int32Array(sync), 0, 0);
        // A scan by slot number first, as retrieve does, then lookups by pair.
        let scanned = 0;
        for (let s = 0; s < reader.slotsUsed(); s++) scanned += reader.allTimeCount(s);
        let found = 0, counted = 0;
        for (let o = 0; o < pairs; o++) {
          const s = reader.slotOf(o, o % 3);
          if (s >= 0) { found++; counted += reader.allTimeCount(s); }
        }
        parentPort.postMessage({ type: 'done', lengthBefore, lengthAfter: slotsView.length, used: reader.slotsUsed(), scanned, found, counted });
      });
      `,
      { eval: true, workerData: { arena: store.arena, kinds: KINDS, sync, storeUrl, pairs: 5000 } },
    );
    try {
      const report = await new Promise<{
        lengthBefore: number;
        lengthAfter: number;
        used: number;
        scanned: number;
        found: number;
        counted: number;
      }>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('exit', (code) => reject(new Error(`worker exited early with code ${code}`)));
        worker.on('message', (msg: { type: string }) => {
          if (msg.type === 'ready') {
            try {
              for (let o = 0; o < 5000; o++) store.apply(o, o % 3, 1, T0 + o);
            } catch (err) {
              reject(err);
            }
            Atomics.store(new Int32Array(sync), 0, 1);
            Atomics.notify(new Int32Array(sync), 0);
          } else {
            resolve(msg as never);
          }
        });
      });
      expect(report.lengthBefore).toBeLessThan(5000 * L.SLOT_INT32);
      expect(report.lengthAfter).toBe(5000 * L.SLOT_INT32);
      expect(report.used).toBe(5000);
      expect(report.scanned).toBe(5000);
      expect(report.found).toBe(5000);
      expect(report.counted).toBe(5000);
    } finally {
      worker.removeAllListeners('exit');
      await worker.terminate();
    }
  });
});

describe('SignalStore reservation', () => {
  it('shows a reader an empty reserved slot past its views as absent', () => {
    const store = newStore(3000, KINDS, 3000);
    const reader = SignalStore.attach(structuredClone(store.arena), KINDS);
    const first = store.arena.slots.byteLength / SLOT_BYTES;
    const ordinals = Array.from({ length: first + 10 }, (_, i) => i);
    store.reserve(ordinals, new Array<number>(ordinals.length).fill(0), ordinals.length);
    store.apply(first + 9, 0, 1, T0);
    // The first lookup the reader makes lands past the views it was created with.
    expect(reader.slotOf(first + 5, 0)).toBe(-1);
    expect(reader.slotOf(first + 9, 0)).toBe(first + 9);
    expect(reader.hasEvents(first + 9)).toBe(true);
  });

  it('reserves a batch all or none', () => {
    const store = newStore(4);
    store.apply(0, 0, 1, T0);
    store.apply(1, 0, 1, T0);
    const index = () => Buffer.from(new Uint8Array(store.arena.index));
    const before = { bytes: stateBytes(store), index: index() };
    const unchanged = () => {
      expect(store.slotsUsed()).toBe(2);
      expect(Buffer.from(stateBytes(store)).equals(Buffer.from(before.bytes))).toBe(true);
      expect(index().equals(before.index)).toBe(true);
    };

    // Three new pairs (one named twice) and an existing one: one more than the two free slots.
    const err = catchError(() => store.reserve([2, 0, 3, 2, 4], [0, 0, 0, 0, 1], 5));
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).resource).toBe('signal state');
    expect((err as CapacityError).capacity).toBe(4);
    expect((err as Error).message).toContain('capacity.signalSlots');
    unchanged();

    // An ordinal past the capacity, after new pairs that would fit: refused, nothing reserved.
    const ids = catchError(() => store.reserve([2, 16], [0, 0], 2));
    expect(ids).toBeInstanceOf(CapacityError);
    expect((ids as CapacityError).resource).toBe('item ids');
    expect((ids as CapacityError).capacity).toBe(16);
    expect((ids as Error).message).toContain('capacity.items');
    unchanged();
    const bad = catchError(() => store.reserve([2, 3], [0, 3], 2));
    expect(bad).toBeInstanceOf(InvalidInputError);
    expect((bad as InvalidInputError).field).toBe('kinds[1]');
    expect((catchError(() => store.reserve([2], [0], 2)) as InvalidInputError).field).toBe('count');
    // A hole inside `count` is refused as the bad value it is, not read as a number.
    const holes = new Array<number>(3);
    holes[0] = 2;
    holes[2] = 3;
    const hole = catchError(() => store.reserve(holes, [0, 0, 0], 3));
    expect(hole).toBeInstanceOf(InvalidInputError);
    expect((hole as InvalidInputError).field).toBe('ordinals[1]');
    expect((catchError(() => store.reserve([2, 3, 4], holes, 3)) as InvalidInputError).field).toBe('kinds[1]');
    unchanged();

    // Two new pairs, one named twice, and existing ones: fits exactly.
    store.reserve([2, 1, 3, 2, 0], [0, 0, 0, 0, 0], 5);
    expect(store.slotsUsed()).toBe(4);
    // Only the first `count` entries count.
    store.reserve([0, 9], [0, 0], 1);
    expect(store.slotsUsed()).toBe(4);

    expect(store.canHoldOrdinal(15)).toBe(true);
    expect(store.canHoldOrdinal(16)).toBe(false);
    expect(store.canHoldOrdinal(-1)).toBe(false);
  });

  it('keeps serving pairs that hold a slot once the store is full', () => {
    const store = newStore(2);
    store.apply(0, 0, 1, T0);
    store.reserve([1], [2], 1);
    // Full: reserving held pairs (written or only reserved) never fails, and neither do their events.
    store.reserve([0, 1, 0], [0, 2, 0], 3);
    store.apply(1, 2, 5, T0);
    store.apply(0, 0, 1, T0 + 1);
    expect(store.allTimeCount(store.slotOf(1, 2))).toBe(1);
    expect(store.allTimeCount(store.slotOf(0, 0))).toBe(2);
    expect(store.slotsUsed()).toBe(2);
    expect(catchError(() => store.reserve([0, 2], [0, 0], 2))).toBeInstanceOf(CapacityError);
    expect(catchError(() => store.apply(2, 0, 1, T0))).toBeInstanceOf(CapacityError);
  });

  it('grows to hold a reservation larger than the arena holds now', () => {
    const store = newStore(3000, KINDS, 8000);
    const first = store.arena.slots.byteLength / SLOT_BYTES;
    const firstEntries = store.arena.index.byteLength / 4;
    // Ordinals up to the top of the range, so the index must grow as well as the slots.
    const ordinals = Array.from({ length: 3000 }, (_, i) => (i * 2663) % 8000);
    const kinds = ordinals.map((o) => o % 3);
    store.reserve(ordinals, kinds, 3000);
    expect(first).toBeLessThan(3000);
    expect(firstEntries).toBeLessThan(8000 * 3);
    expect(store.slotsUsed()).toBe(3000);
    expect(store.arena.slots.byteLength).toBe(3000 * SLOT_BYTES);
    for (const o of ordinals) store.apply(o, o % 3, 1, T0);
    for (const o of ordinals) expect(store.allTimeCount(store.slotOf(o, o % 3))).toBe(1);
    expect(store.slotsUsed()).toBe(3000);
  });

  it('leaves a reserved slot without events invisible to reads, scans and checkpoints', () => {
    const store = newStore();
    store.apply(4, 0, 2, T0);
    // Reserved for a write that never commits.
    store.reserve([5, 4], [0, 1], 2);
    const reader = SignalStore.attach(structuredClone(store.arena), KINDS);
    expect(store.slotsUsed()).toBe(3);
    for (const s of [store, reader]) {
      expect(s.slotOf(5, 0)).toBe(-1);
      expect(s.slotOf(4, 1)).toBe(-1);
      expect(s.slotOf(4, 0)).toBe(0);
      expect([0, 1, 2].map((slot) => s.hasEvents(slot))).toEqual([true, false, false]);
    }
    // A checkpoint carries the empty slots; the import keeps them empty and reserved.
    const bytes = stateBytes(store);
    expect(bytes.byteLength).toBe(3 * SLOT_BYTES);
    const dst = newStore(3);
    dst.importState(bytes);
    expect(dst.slotsUsed()).toBe(3);
    expect(dst.slotOf(5, 0)).toBe(-1);
    expect(dst.slotOf(4, 1)).toBe(-1);
    expect([0, 1, 2].map((slot) => dst.hasEvents(slot))).toEqual([true, false, false]);
    // Full, yet the reserved pairs still take their events (the log replayed after the import).
    dst.apply(5, 0, 1, T0);
    expect(dst.slotOf(5, 0)).toBe(1);
    expect(dst.allTimeCount(1)).toBe(1);
    expect(dst.read(1, T0, false, ['all'], false)).toEqual({ score: 1, count: 1, windows: { all: 1 } });
    // With a kind dropped the empty slot of the kept kind survives the compaction, still empty.
    const remapped = newStore(3, [KINDS[0]!, KINDS[2]!]);
    remapped.importState(bytes, [0, -1, 1]);
    expect(remapped.slotsUsed()).toBe(2);
    expect(remapped.slotOf(5, 0)).toBe(-1);
    expect(remapped.hasEvents(1)).toBe(false);
  });
});

describe('SignalStore reserved slots in queries', () => {
  /** Items 0..5 present; item 0 has events in every kind, item 1 only in kind 0, items 2..5 only reserved slots. */
  function setup(kinds: SignalKindSpec[]): { ctx: QueryContext; retrieve: (profile: Profile) => ReturnType<RetrieveExecutor['run']> } {
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const items = new ItemsWriter(db);
    for (let o = 0; o < 6; o++)
      items.upsert({ ordinal: o, id: `i${o}`, text: null, metadata: {}, createdAt: T0, embedding: null }, o + 1, false);
    const schema = { kinds, metadata: {}, embeddingDims: 0 };
    const catalog = new Catalog(db, schema);
    catalog.refresh();
    const store = newStore(64, kinds);
    store.reserve([2, 3, 4, 5], [0, kinds.length - 1, 0, kinds.length - 1], 4);
    for (let k = 0; k < kinds.length; k++) store.apply(0, k, 3, T0);
    store.apply(1, 0, 1, T0);
    store.reserve([1, 2], [kinds.length - 1, kinds.length - 1], 2);
    const ctx: QueryContext = { schema, catalog, store, ann: null, db };
    const executor = atLevels(new RetrieveExecutor(ctx));
    const retrieve = (profile: Profile) =>
      executor.run(
        { profile, context: null, filter: null, diversity: null, limit: 10, window: '24h', exclude: null },
        DegradationLevel.Full,
        T0 + MIN,
      );
    return { ctx, retrieve };
  }

  for (const [name, kinds] of [
    ['one kind', [KINDS[0]!]],
    ['several kinds', KINDS],
  ] as const) {
    it(`leaves items with only reserved slots out of trending and popular scans (${name})`, () => {
      const { retrieve } = setup([...kinds]);
      for (const profile of ['trending', 'popular'] as const) {
        const result = retrieve(profile);
        expect(result.items.map((i) => i.id)).toEqual(['i0', 'i1']);
        expect(result.explain.candidates).toBe(2);
        for (const item of result.items) {
          for (const values of Object.values(item.signals)) expect(values.count).toBeGreaterThan(0);
        }
      }
    });
  }

  it('gives an item with only reserved slots no signal values and no popularity', () => {
    const { ctx } = setup(KINDS);
    expect(readItemSignals(ctx.store, ctx.schema, 3, T0, false)).toEqual({});
    expect(popularity(ctx, 3, T0)).toBe(0);
    expect(Object.keys(readItemSignals(ctx.store, ctx.schema, 1, T0, false))).toEqual(['view']);
    expect(popularity(ctx, 1, T0)).toBe(1);
  });
});

describe('SignalStore layout-1 checkpoints', () => {
  const events = layout1Events();
  const now = layout1Now(events);
  const layout2 = (): SignalStore => {
    const store = SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16, maxSlots: 64 });
    for (const e of events) store.apply(e.ordinal, e.kind, e.weight, e.at);
    return store;
  };

  it('converts a checkpoint written by the 1 024-byte layout to the slots the same events give now', () => {
    const old = layout1Bytes();
    expect(old.byteLength).toBe(12 * 1024);
    const expected = layout2();
    const imported = SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16, maxSlots: 64 });
    imported.importState(old, undefined, 1);
    expect(imported.slotsUsed()).toBe(12);
    // Byte for byte: headers, rings and sequences, so every window at every time agrees too.
    expect(Buffer.from(stateBytes(imported)).equals(Buffer.from(stateBytes(expected)))).toBe(true);
    const windows = ['1h', '24h', '7d', 'all'] as const;
    for (let s = 0; s < 12; s++) {
      for (const at of [now, now + 50 * MIN, now + 20 * HOUR, now + 6 * 24 * HOUR]) {
        expect(imported.read(s, at, false, windows, true)).toEqual(expected.read(s, at, false, windows, true));
      }
    }
    // The reading time has slots with events in the 1h window, so this compares more than empty rings.
    const active = [...Array(12).keys()].filter((s) => imported.windowCount(s, '1h', now) > 0);
    expect(active.length).toBeGreaterThan(0);
    // It goes on like a store that counted the events itself.
    imported.apply(1, 2, 1, now);
    expected.apply(1, 2, 1, now);
    expect(Buffer.from(stateBytes(imported)).equals(Buffer.from(stateBytes(expected)))).toBe(true);
  });

  it('converts with a kind remap and keeps an empty layout-1 reservation empty', () => {
    const reserved = new Uint8Array(1024);
    // What layout 1's reserve() wrote: the ordinal (Int32 3) and the kind (Int32 4), nothing else.
    new Int32Array(reserved.buffer).set([5, 1], 3);
    const bytes = new Uint8Array(13 * 1024);
    bytes.set(layout1Bytes());
    bytes.set(reserved, 12 * 1024);
    const kinds = [LAYOUT1_KINDS[2]!, LAYOUT1_KINDS[0]!];
    const dst = SignalStore.create({ kinds, maxOrdinals: 16, maxSlots: 64 });
    dst.importState(bytes, [1, -1, 0], 1);
    const src = layout2();
    for (let o = 0; o < 4; o++) {
      for (const [oldK, newK] of [
        [0, 1],
        [2, 0],
      ] as const) {
        expect(dst.read(dst.slotOf(o, newK), now, false, ['1h', '24h', '7d'], true)).toEqual(
          src.read(src.slotOf(o, oldK), now, false, ['1h', '24h', '7d'], true),
        );
      }
    }
    expect(dst.slotsUsed()).toBe(8);
    expect(dst.slotOf(5, 1)).toBe(-1);
  });

  /** Layout 1's writer, as it was (seqlock, header, score, 60 minute and 168 hour buckets), for slots the fixture does not hold. */
  function layout1Encode(kinds: readonly SignalKindSpec[], list: readonly Layout1Event[]): Uint8Array {
    const slotOf = new Map<number, number>();
    for (const e of list) if (!slotOf.has(e.ordinal * 64 + e.kind)) slotOf.set(e.ordinal * 64 + e.kind, slotOf.size);
    const buf = new ArrayBuffer(slotOf.size * 1024);
    const i32 = new Int32Array(buf);
    const f64 = new Float64Array(buf);
    for (const e of list) {
      const s = slotOf.get(e.ordinal * 64 + e.kind)!;
      const b = s * 256;
      const fb = s * 128;
      i32[b + 3] = e.ordinal;
      i32[b + 4] = e.kind;
      i32[b]! += 1;
      const count = f64[fb + 6]!;
      const first = count === 0;
      if (first) {
        f64.set([e.weight, e.at, 0, e.at, e.at], fb + 4);
      } else {
        const lambda = Math.LN2 / kinds[e.kind]!.halfLifeMs;
        const tRef = f64[fb + 5]!;
        if (e.at >= tRef) {
          f64[fb + 4] = f64[fb + 4]! * Math.exp(-lambda * (e.at - tRef)) + e.weight;
          f64[fb + 5] = e.at;
        } else {
          f64[fb + 4] = f64[fb + 4]! + e.weight * Math.exp(-lambda * (tRef - e.at));
        }
        if (e.at > f64[fb + 7]!) f64[fb + 7] = e.at;
        if (e.at < f64[fb + 8]!) f64[fb + 8] = e.at;
      }
      f64[fb + 6] = count + 1;
      bumpRing(i32, b + 1, b + 20, 60, Math.floor(e.at / MIN), first);
      bumpRing(i32, b + 2, b + 80, 168, Math.floor(e.at / HOUR), first);
      i32[b]! += 1;
    }
    return new Uint8Array(buf);
  }

  it('converts exactly at the far edges, where the new rings need the oldest buckets layout 1 held', () => {
    // The encoder writes what the layout-1 store wrote: the fixture, byte for byte.
    expect(Buffer.from(layout1Encode(LAYOUT1_KINDS, events)).equals(Buffer.from(layout1Bytes()))).toBe(true);
    // An hour H ≡ 13 (mod 14) and its last minute M ≡ 4 (mod 5): then the 1h window's oldest bucket
    // starts at minute M - 59, the oldest minute layout 1 kept, and the 7d window's at hour H - 167,
    // the oldest hour it kept.
    let h = Math.ceil(LAYOUT1_T0 / HOUR);
    while (h % 14 !== 13) h++;
    const newest = (h * 60 + 59) * MIN + 10_000;
    const edge: Layout1Event[] = [
      { ordinal: 2, kind: 0, weight: 1, at: newest },
      { ordinal: 2, kind: 0, weight: 2, at: h * 60 * MIN + 5_000 }, // minute M - 59
      { ordinal: 2, kind: 0, weight: 3, at: h * 60 * MIN - 1 }, // minute M - 60: no ring of either layout
      { ordinal: 2, kind: 0, weight: 4, at: (h - 167) * HOUR + 1 }, // hour H - 167
      { ordinal: 2, kind: 0, weight: 5, at: (h - 168) * HOUR + 1 }, // hour H - 168
      { ordinal: 3, kind: 1, weight: 1, at: newest - 20 * MIN },
    ];
    const converted = SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16, maxSlots: 64 });
    converted.importState(layout1Encode(LAYOUT1_KINDS, edge), undefined, 1);
    const applied = SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16, maxSlots: 64 });
    for (const e of edge) applied.apply(e.ordinal, e.kind, e.weight, e.at);
    expect(Buffer.from(stateBytes(converted)).equals(Buffer.from(stateBytes(applied)))).toBe(true);
    const slot = converted.slotOf(2, 0);
    expect(converted.windowCount(slot, '1h', newest)).toBe(2);
    expect(converted.windowCount(slot, '24h', newest)).toBe(3);
    expect(converted.windowCount(slot, '7d', newest)).toBe(4);
    expect(converted.allTimeCount(slot)).toBe(5);
  });

  it('refuses an unknown layout and a length that is not whole slots of the layout, naming them', () => {
    const store = SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16, maxSlots: 64 });
    const bad = catchError(() => store.importState(layout1Bytes(), undefined, 3));
    expect(bad).toBeInstanceOf(InvalidInputError);
    expect((bad as InvalidInputError).field).toBe('layout');
    const short = catchError(() => store.importState(layout1Bytes().subarray(0, 1024 + 256), undefined, 1));
    expect((short as InvalidInputError).field).toBe('signal state length');
    expect(store.slotsUsed()).toBe(0);
  });
});
