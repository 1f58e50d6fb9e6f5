import { I32_SEQ } from './layout.js';

/**
 * The seqlock read protocol, in one place; every read of a slot's values goes through it:
 *
 * ```
 * do { seq = seqBegin(i32, b); ...copy fields... } while (!seqUnchanged(i32, b, seq));
 * ```
 *
 * `seqBegin` waits while the writer is inside the slot at Int32 offset `b` (odd sequence) and
 * returns the even sequence it saw; `seqUnchanged` says whether the writer stayed out while the
 * fields were copied. They are tiny so they inline, and they take the view as an argument so the
 * caller's copy of it stays in a register across the atomic loads. (A single helper that filled a
 * scratch array made a trending scan ~25% slower.)
 */
export function seqBegin(i32: Int32Array, b: number): number {
  for (;;) {
    const seq = Atomics.load(i32, b + I32_SEQ);
    if ((seq & 1) === 0) return seq;
  }
}

/** See {@link seqBegin}. */
export function seqUnchanged(i32: Int32Array, b: number, seq: number): boolean {
  return Atomics.load(i32, b + I32_SEQ) === seq;
}
