import { BUCKET_MAX } from './layout.js';

/*
 * The window rings of a slot (see `layout.ts`): counting an event into one, and summing a window
 * out of one. Plain functions over the slot's Int32 view; the caller holds the seqlock
 * (reads) or is the writer. Every index stays inside the slot's ring, so element reads take `!`.
 */

/**
 * Sum of the ring buckets for units in `[now - span + 1, now] ∩ [head - len + 1, head]`. The caller
 * holds the seqlock; `now` may be any number (NaN or far past/future reads as an empty window).
 */
export function ringSum(i32: Int32Array, base: number, len: number, head: number, now: number, span: number): number {
  const hi = now < head ? now : head;
  let lo = now - span + 1;
  const ringLo = head - len + 1;
  if (lo < ringLo) lo = ringLo;
  // Units below 0 were never written; clamping keeps the modulo below non-negative.
  if (lo < 0) lo = 0;
  if (!(lo <= hi)) return 0;
  // At most one lap, so the range is one run of buckets or two (split where the ring wraps).
  const from = base + (lo % len);
  const to = from + (hi - lo) + 1;
  const end = base + len;
  let sum = 0;
  if (to <= end) {
    for (let i = from; i < to; i++) sum += i32[i]!;
  } else {
    for (let i = from; i < end; i++) sum += i32[i]!;
    const wrapTo = to - len;
    for (let i = base; i < wrapTo; i++) sum += i32[i]!;
  }
  return sum;
}

/**
 * Records one event in a ring of `len` buckets whose newest unit is at `headAt`. `first` means the
 * slot has no event yet, so the head is meaningless.
 */
export function bumpRing(i32: Int32Array, headAt: number, base: number, len: number, unit: number, first: boolean): void {
  if (first) {
    i32.fill(0, base, base + len);
    i32[headAt] = unit;
    i32[base + (unit % len)] = 1;
    return;
  }
  const head = i32[headAt]!;
  if (unit > head) {
    if (unit - head >= len) {
      i32.fill(0, base, base + len);
    } else {
      // Buckets for the units skipped over still hold counts from one lap ago.
      let idx = (head + 1) % len;
      for (let u = head + 1; u <= unit; u++) {
        i32[base + idx] = 0;
        if (++idx === len) idx = 0;
      }
    }
    i32[headAt] = unit;
    i32[base + (unit % len)] = 1;
  } else if (unit > head - len) {
    const at = base + (unit % len);
    // Saturates: an Int32 past its maximum would wrap to a negative count.
    if (i32[at]! < BUCKET_MAX) i32[at]! += 1;
  }
  // Older than the ring covers: counted in the all-time count and score only.
}
