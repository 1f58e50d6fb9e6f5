// tidal-core/internal: for the sibling packages, the bench and the cross-package tests, not for applications.
export { internalsOf } from './db.js';
export type { TidalDbInternals } from './db.js';
export { PRIORITY, QueryScheduler } from './scheduler.js';
export type { SchedulerOptions, SubmitOptions } from './scheduler.js';
export { canonicalKey } from './sharing.js';
