/**
 * The one seeded generator of the repository: the demo corpus (tidal-serve) and the bench's synthetic
 * data use it, so a figure reproduces from its seed. It lives with the demo corpus in tidal-serve; the
 * bench imports it from here (tidal-query's tests hold a copy of their own, held to the same sequence
 * by test/seeded-random.test.ts).
 */
export { mulberry32 } from 'tidal-serve/demo';
