import {
  BUCKET_MAX,
  BUCKETS_1H,
  BUCKETS_24H,
  BUCKETS_7D,
  I32_BUCKETS_1H,
  I32_BUCKETS_24H,
  I32_BUCKETS_7D,
  I32_HEAD_1H,
  I32_HEAD_24H,
  I32_HEAD_7D,
  I32_KIND,
  I32_ORDINAL,
  I32_SEQ,
  F64_COUNT,
  F64_NEWEST,
  F64_OLDEST,
  F64_SCORE,
  F64_TREF,
  MS_PER_HOUR,
  MS_PER_MINUTE,
  SLOT_F64,
  SLOT_INT32,
  UNIT_1H_MS,
  UNIT_7D_MS,
} from './layout.js';

/*
 * Slot layout 1, the one checkpoints were written in before layout 2 (`layout.ts`), and its
 * conversion. A layout-1 slot was 1 024 bytes:
 *
 *  Int32 index   Float64 index   field
 *  0                             seq
 *  1                             minute head: floor(atMs / 60000)
 *  2                             hour head: floor(atMs / 3600000)
 *  3                             ordinal
 *  4                             kind
 *  8..17         4..8            score, tRef, all-time count, newest, oldest (as in layout 2)
 *  20..79                        60 minute buckets, ring indexed by minute % 60
 *  80..247                       168 hour buckets, ring indexed by hour % 168
 *
 * The conversion is exact: each of layout 2's buckets is a whole number of layout 1's (5 minutes,
 * 1 hour, 14 hours), and its rings reach less far back than layout 1's (55 minutes before the head's
 * 5-minute unit against 59; 161 hours before the head's 14-hour unit against 167), so every bucket
 * is a sum of buckets layout 1 still held, and the result is the slot that applying the same events
 * to a layout-2 store gives. A sum past Int32 saturates at BUCKET_MAX, as counting would.
 */

export const LEGACY_SLOT_LAYOUT = 1;
export const LEGACY_SLOT_BYTES = 1024;
const OLD_INT32 = LEGACY_SLOT_BYTES / 4;
const OLD_F64 = LEGACY_SLOT_BYTES / 8;
const OLD_MINUTE_HEAD = 1;
const OLD_HOUR_HEAD = 2;
const OLD_ORDINAL = 3;
const OLD_KIND = 4;
const OLD_F64_FIELDS = 4;
const OLD_MINUTES = 20;
const OLD_MINUTE_LEN = 60;
const OLD_HOURS = 80;
const OLD_HOUR_LEN = 168;

const MINUTES_PER_1H_UNIT = UNIT_1H_MS / MS_PER_MINUTE;
const HOURS_PER_7D_UNIT = UNIT_7D_MS / MS_PER_HOUR;

/** `oldSlots` layout-1 slots (`src`, Int32 over their bytes) as layout-2 slots. */
export function convertLegacySlots(src: Int32Array, oldSlots: number): Int32Array {
  const dst = new Int32Array(oldSlots * SLOT_INT32);
  const srcF64 = new Float64Array(src.buffer, src.byteOffset, oldSlots * OLD_F64);
  const dstF64 = new Float64Array(dst.buffer);
  for (let s = 0; s < oldSlots; s++) {
    const o = s * OLD_INT32;
    const d = s * SLOT_INT32;
    dst[d + I32_SEQ] = src[o + I32_SEQ]!;
    dst[d + I32_ORDINAL] = src[o + OLD_ORDINAL]!;
    dst[d + I32_KIND] = src[o + OLD_KIND]!;
    const of = s * OLD_F64 + OLD_F64_FIELDS;
    const df = s * SLOT_F64;
    dstF64[df + F64_SCORE] = srcF64[of]!;
    dstF64[df + F64_TREF] = srcF64[of + 1]!;
    dstF64[df + F64_COUNT] = srcF64[of + 2]!;
    dstF64[df + F64_NEWEST] = srcF64[of + 3]!;
    dstF64[df + F64_OLDEST] = srcF64[of + 4]!;
    // A reserved slot with no event has no heads or buckets (all zero, as layout 1 left them).
    if (srcF64[of + 2] === 0) continue;
    const minuteHead = src[o + OLD_MINUTE_HEAD]!;
    const hourHead = src[o + OLD_HOUR_HEAD]!;
    const oldMinute = (m: number): number =>
      m >= 0 && m > minuteHead - OLD_MINUTE_LEN && m <= minuteHead ? src[o + OLD_MINUTES + (m % OLD_MINUTE_LEN)]! : 0;
    const oldHour = (h: number): number =>
      h >= 0 && h > hourHead - OLD_HOUR_LEN && h <= hourHead ? src[o + OLD_HOURS + (h % OLD_HOUR_LEN)]! : 0;

    const head1h = Math.floor(minuteHead / MINUTES_PER_1H_UNIT);
    dst[d + I32_HEAD_1H] = head1h;
    for (let u = Math.max(0, head1h - BUCKETS_1H + 1); u <= head1h; u++) {
      let sum = 0;
      for (let m = u * MINUTES_PER_1H_UNIT; m < (u + 1) * MINUTES_PER_1H_UNIT; m++) sum += oldMinute(m);
      dst[d + I32_BUCKETS_1H + (u % BUCKETS_1H)] = Math.min(sum, BUCKET_MAX);
    }
    dst[d + I32_HEAD_24H] = hourHead;
    for (let h = Math.max(0, hourHead - BUCKETS_24H + 1); h <= hourHead; h++) {
      dst[d + I32_BUCKETS_24H + (h % BUCKETS_24H)] = oldHour(h);
    }
    const head7d = Math.floor(hourHead / HOURS_PER_7D_UNIT);
    dst[d + I32_HEAD_7D] = head7d;
    for (let u = Math.max(0, head7d - BUCKETS_7D + 1); u <= head7d; u++) {
      let sum = 0;
      for (let h = u * HOURS_PER_7D_UNIT; h < (u + 1) * HOURS_PER_7D_UNIT; h++) sum += oldHour(h);
      dst[d + I32_BUCKETS_7D + (u % BUCKETS_7D)] = Math.min(sum, BUCKET_MAX);
    }
  }
  return dst;
}
