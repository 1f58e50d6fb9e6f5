/**
 * The seeded generator of tidal-query's tests: mulberry32, floats in [0, 1). A random input
 * reproduces from its seed. It is the demo corpus's generator (tidal-serve/demo), kept here so the
 * tests of this package import nothing above it; test/seeded-random.test.ts holds the two to the same
 * sequence.
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
