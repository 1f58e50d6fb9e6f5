/**
 * The repository has one seeded generator, mulberry32: the demo corpus's (tidal-serve/demo, which the
 * bench uses too) and the copy tidal-query's tests hold below it. They must draw the same sequence,
 * so an input or a figure reproduces from its seed whichever of them drew it.
 */
import { describe, expect, it } from 'vitest';
import { mulberry32 as demo } from 'tidal-serve/demo';
import { mulberry32 as queryTests } from '../packages/tidal-query/test/helpers/random.js';

describe('mulberry32', () => {
  it("tidal-query's tests draw what the demo corpus draws, seed for seed", () => {
    for (const seed of [0, 1, 42, 0x9e3779b9, -1, 2 ** 32 + 7]) {
      const [a, b] = [demo(seed), queryTests(seed)];
      const drawn = Array.from({ length: 1_000 }, () => [a(), b()]);
      expect(
        drawn.every(([x, y]) => x === y),
        `seed ${seed}`,
      ).toBe(true);
      expect(drawn.every(([x]) => x! >= 0 && x! < 1)).toBe(true);
    }
    expect(demo(1)()).not.toBe(demo(2)());
  });
});
