// tidal-serve/demo: the synthetic corpus `tidal serve --demo` loads (the bench uses the same one).
export * from './corpus.js';
export { mulberry32, mixSeed, gaussian } from './random.js';
export { CATEGORIES, VOCABULARY, SHARED_VOCABULARY } from './vocabulary.js';
export { loadDemo, DEMO_DEFAULTS } from './load.js';
export type { DemoOptions, DemoProgress } from './load.js';
