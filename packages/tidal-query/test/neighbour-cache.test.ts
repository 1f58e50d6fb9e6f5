import { describe, expect, it } from 'vitest';
import type { VectorSearcher } from '../src/context.js';
import { NEIGHBOUR_TTL_MS, NeighbourCache } from '../src/profiles/neighbour-cache.js';

const ann = {} as VectorSearcher;
const other = {} as VectorSearcher;

/** A 32-component preference whose components' signs are `signs`' bits. */
function pref(signs: number): Float32Array {
  return Float32Array.from({ length: 32 }, (_, i) => ((signs >>> i) & 1 ? 0.5 : -0.5));
}

describe('NeighbourCache', () => {
  it("gives back a user's neighbours while kept, for the same index and a preference not moved far", () => {
    const cache = new NeighbourCache();
    const keys = Int32Array.of(5, 3, 9);
    cache.set(7, pref(0b1011), ann, keys, 1_000);
    expect(cache.get(7, pref(0b1011), ann, 1_000)).toBe(keys);
    expect(cache.get(7, pref(0b1011), ann, 1_000 + NEIGHBOUR_TTL_MS)).toBe(keys);
    // Four of the 32 signs may differ; five are another preference.
    expect(cache.get(7, pref(0b1011 ^ 0b1111_0000), ann, 2_000)).toBe(keys);
    expect(cache.get(7, pref(0b1011 ^ 0b1_1111_0000), ann, 2_000)).toBeNull();
    // Too old, from a clock that went back, another ANN index, another user.
    expect(cache.get(7, pref(0b1011), ann, 1_001 + NEIGHBOUR_TTL_MS)).toBeNull();
    expect(cache.get(7, pref(0b1011), ann, 999)).toBeNull();
    expect(cache.get(7, pref(0b1011), other, 1_000)).toBeNull();
    expect(cache.get(8, pref(0b1011), ann, 1_000)).toBeNull();
    expect([cache.hits, cache.misses]).toEqual([3, 5]);
  });

  it('keeps at most its number of users, the oldest written leaving first', () => {
    const cache = new NeighbourCache(3);
    for (let u = 0; u < 4; u++) cache.set(u, pref(u), ann, Int32Array.of(u), 0);
    expect(cache.size).toBe(3);
    expect(cache.get(0, pref(0), ann, 0)).toBeNull();
    // Writing a user again makes it the newest.
    cache.set(1, pref(1), ann, Int32Array.of(11), 0);
    cache.set(4, pref(4), ann, Int32Array.of(4), 0);
    expect(cache.get(2, pref(2), ann, 0)).toBeNull();
    expect(cache.get(1, pref(1), ann, 0)).toEqual(Int32Array.of(11));
    expect(cache.bytes).toBe(3 * 4);
  });
});
