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
  if (Atomics.load(i32, b + I32_SEQ) === seq) return true;
  retries++;
  return false;
}

/** Copies done again on this thread because the writer entered the slot while they ran. */
let retries = 0;

/**
 * How many times a read on this thread (any store instance of it) copied a slot's fields while the
 * writer changed them, and so copied again, since the thread started. Counted only on that slow
 * path, so the common read pays nothing; the cross-thread test asserts with it that reads and
 * writes really overlapped.
 */
export function seqlockRetries(): number {
  return retries;
}
