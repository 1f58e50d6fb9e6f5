/**
 * The values of the ANN builder thread's gate (`AnnBuilderInit.gate`, one Int32 the database thread
 * writes and the builder reads between its steps), in one place for both sides.
 */
export const AnnGate = Object.freeze({
  /** Build. */
  RUN: 0,
  /** Wait before reading anything (tests that must see queries answered during a build). */
  HOLD: 1,
  /** Fail there, as a build that cannot save its index would (tests). */
  FAIL: 2,
  /** End there without a word (an ephemeral database is closing: nothing is kept). */
  END: 3,
  /** Save what is built at the end of the window being added, and end (a closing database that will not wait longer). */
  SAVE: 4,
  /** Wait after the first window (tests of a close during a build). */
  HOLD_AFTER_WINDOW: 5,
});
