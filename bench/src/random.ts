/**
 * The one seeded generator of the repository: the bench's synthetic data and the tests' random
 * inputs both use it, so a failure or a figure reproduces from its seed. It lives with the bench
 * because the bench is compiled to plain JavaScript and never published; the tests import this
 * source file directly.
 */

/** mulberry32: tiny, fast, and good enough for synthetic data; returns floats in [0, 1). */
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
