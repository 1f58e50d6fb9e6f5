/**
 * mulberry32: tiny, fast, and good enough for synthetic data; returns floats in [0, 1). The bench
 * uses this same generator (through `bench/src/random.ts`), so the demo corpus is the bench corpus
 * item for item; tidal-query's tests hold a copy below this package (its `test/helpers/random.ts`,
 * tied to this one by test/seeded-random.test.ts), so every random test input reproduces from its seed.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Mixes several integers into one 32-bit seed (murmur3 finaliser per step). Streams for different
 * purposes get different `salt`s so that, say, adding a draw to the text of an item does not shift
 * its signals.
 */
export function mixSeed(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) {
    h ^= p >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** One uniform draw in [0, 1) from a hashed position, without creating a generator. */
export function hashUniform(...parts: number[]): number {
  return mixSeed(...parts) / 4294967296;
}

/** Standard normal draws (Box-Muller, caching the second value). */
export function gaussian(rand: () => number): () => number {
  let spare = Number.NaN;
  return () => {
    if (!Number.isNaN(spare)) {
      const s = spare;
      spare = Number.NaN;
      return s;
    }
    let u = rand();
    while (u <= Number.EPSILON) u = rand();
    const v = rand();
    const r = Math.sqrt(-2 * Math.log(u));
    spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  };
}
