/**
 * `SlotReader.velocities`, the batch read `for_you` scores its candidates with: bit for bit the
 * per-ordinal loop of `slotOf` and `velocity` it replaces, for every window, coarse or not, any
 * subset of kinds, ordinals with and without slots (and a reserved slot still empty).
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-load';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { VelocityWindow } from '../src/signals/types.js';
import { mulberry32 } from './helpers/random.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2025, 0, 6, 12, 0, 0);
const ORDINALS = 300;

function kind(name: string, halfLifeMs: number): SignalKindSpec {
  return { name, halfLifeMs, windows: ['1h', '24h', '7d', 'all'], velocity: true };
}

const KINDS = [kind('view', HOUR), kind('like', 2 * HOUR), kind('share', 4 * HOUR)];

/** What the per-ordinal loop gives: the sum over `kinds` of the velocity of each slot with an event. */
function oneByOne(store: SignalStore, o: number, kinds: readonly number[], window: VelocityWindow, nowMs: number, coarse: boolean) {
  let sum = 0;
  let slots = 0;
  for (const k of kinds) {
    const slot = store.slotOf(o, k);
    if (slot < 0) continue;
    sum += store.velocity(slot, window, nowMs, coarse);
    slots++;
  }
  return { sum, slots };
}

describe('SlotReader.velocities', () => {
  it('equals slotOf and velocity per ordinal, bit for bit', () => {
    const rand = mulberry32(23);
    const store = SignalStore.create({ kinds: KINDS, maxOrdinals: ORDINALS + 10, maxSlots: 1024 });
    // Events over the past week, denser for some ordinals, on random kinds; a third of ordinals none.
    for (let e = 0; e < 6000; e++) {
      const o = Math.floor(rand() ** 2 * ORDINALS);
      if (o % 3 === 2) continue;
      const k = Math.floor(rand() * KINDS.length);
      store.apply(o, k, 1 + Math.floor(rand() * 3), T0 - Math.floor(rand() * 8 * 24 * HOUR));
    }
    // A reserved slot that holds no event yet reads as none.
    store.reserve([ORDINALS + 1], [0], 1);
    const ordinals = Array.from({ length: 500 }, () => Math.floor(rand() * (ORDINALS + 2)));
    ordinals.push(ORDINALS + 1);
    const out = new Float64Array(ordinals.length);
    let compared = 0;
    let moving = 0;
    for (const kinds of [[0, 1, 2], [0, 2], [1], []]) {
      for (const window of ['1h', '24h', '7d'] as const) {
        for (const coarse of [false, true]) {
          for (const nowMs of [T0, T0 + 17 * 60_000, T0 + 30 * HOUR]) {
            out.fill(Number.NaN);
            const read = store.velocities(ordinals, ordinals.length, kinds, window, nowMs, coarse, out);
            let slots = 0;
            ordinals.forEach((o, i) => {
              const want = oneByOne(store, o, kinds, window, nowMs, coarse);
              slots += want.slots;
              expect(Object.is(out[i], want.sum), `ordinal ${o}, kinds ${kinds.join()}, ${window}, coarse ${coarse}`).toBe(true);
              if (want.sum > 0) moving++;
              compared++;
            });
            expect(read).toBe(slots);
          }
        }
      }
    }
    expect(compared).toBe(4 * 3 * 2 * 3 * ordinals.length);
    // Not a comparison of zeros: a good share of the reads found events in their window.
    expect(moving).toBeGreaterThan(compared / 10);
  });

  it('reads only the first n ordinals and rejects an ordinal, kind or window out of range', () => {
    const store = SignalStore.create({ kinds: KINDS, maxOrdinals: 8, maxSlots: 16 });
    store.apply(1, 0, 1, T0);
    const out = new Float64Array(3).fill(-1);
    expect(store.velocities([1, 1, 1], 2, [0], '1h', T0, false, out)).toBe(2);
    expect([...out]).toEqual([1 / 3600, 1 / 3600, -1]);
    expect(() => store.velocities([8], 1, [0], '1h', T0, false, out)).toThrow(InvalidInputError);
    expect(() => store.velocities([1], 1, [3], '1h', T0, false, out)).toThrow(InvalidInputError);
    expect(() => store.velocities([1], 1, [0], 'all' as VelocityWindow, T0, false, out)).toThrow(InvalidInputError);
  });
});
