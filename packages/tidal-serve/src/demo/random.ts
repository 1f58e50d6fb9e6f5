/**
 * mulberry32: tiny, fast, and good enough for synthetic data; returns floats in [0, 1). The bench
 * and the tests use this same generator (through `bench/src/random.ts`), so the demo corpus is the
 * bench corpus item for item and every random test input reproduces from its seed.
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
