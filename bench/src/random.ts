/**
 * The one seeded generator of the repository: the demo corpus (tidal-serve), the bench's synthetic
 * data and the tests' random inputs all use it, so a failure or a figure reproduces from its seed.
 * It lives with the demo corpus in tidal-serve; the bench and the tests import it from here.
 */
export { mulberry32 } from 'tidal-serve/demo';
