/**
 * Memory layout of the shared signal-state arena. The writer (main thread) and the query workers
 * agree on these offsets and nothing else, so they are the on-memory format: changing one is a
 * format change, and checkpoints (the slot arena's used prefix, copied byte for byte) embed the
 * slot layout.
 *
 * Three SharedArrayBuffers:
 *
 * - `control` (Int32): `[CONTROL_SLOTS_USED]` is the number of slots in use. The writer publishes it
 *   with `Atomics.store` only after `slots` has grown to hold the new slot and its header is written,
 *   so a reader scanning `0..used-1` never meets an uninitialised slot or reads past the buffer. A
 *   slot may be published before its first event (reserved at admission): its all-time count is 0
 *   and it holds no state until that event is applied.
 * - `index` (Int32, up to `maxOrdinals * kinds` entries, growable): entry `ordinal * kinds + kind`
 *   holds `slot + 1`, and `0` (or an entry past the current length) means the pair has no slot.
 *   Written with `Atomics.store` after `control`.
 * - `slots` (up to `maxSlots * SLOT_BYTES` bytes, growable): one fixed-size slot per (ordinal, kind),
 *   seen through an Int32Array and a Float64Array over the same bytes (fixed-length views, made
 *   again by a reader that meets a published slot past them). Within a slot:
 *
 * ```
 *  Int32 index   Float64 index   field
 *  0                             seq (seqlock: odd while the writer is inside)
 *  1                             minute head: floor(atMs / 60000) of the newest minute in the ring
 *  2                             hour head: floor(atMs / 3600000)
 *  3                             ordinal
 *  4                             kind
 *  5..7                          reserved
 *  8..9          4               decayed score S
 *  10..11        5               tRef: the time (ms) S is referenced to
 *  12..13        6               all-time event count
 *  14..15        7               newest event time (ms)
 *  16..17        8               oldest event time (ms)
 *  18..19        9               reserved
 *  20..79                        60 minute buckets, ring indexed by absMinute % 60
 *  80..247                       168 hour buckets, ring indexed by absHour % 168
 *  248..255                      reserved
 * ```
 *
 * `index` and `slots` are growable SharedArrayBuffers: address space for the maximum is reserved up
 * front (not charged against the host's overcommit limit) and memory is committed as they grow.
 * Growing never moves a byte, so views and offsets stay valid on every thread.
 */

/** Bytes per slot. */
export const SLOT_BYTES = 1024;
/** Int32 elements per slot. */
export const SLOT_INT32 = SLOT_BYTES / 4;
/** Float64 elements per slot. */
export const SLOT_F64 = SLOT_BYTES / 8;

/** `control` Int32 index of the published slot count. */
export const CONTROL_SLOTS_USED = 0;
/** Int32 elements in `control`; the rest is spare so the count sits alone in its cache line. */
export const CONTROL_INT32 = 16;

// Int32 offsets within a slot.
export const I32_SEQ = 0;
export const I32_MINUTE_HEAD = 1;
export const I32_HOUR_HEAD = 2;
export const I32_ORDINAL = 3;
export const I32_KIND = 4;

// Float64 offsets within a slot.
export const F64_SCORE = 4;
export const F64_TREF = 5;
export const F64_COUNT = 6;
export const F64_NEWEST = 7;
export const F64_OLDEST = 8;

/** Int32 offset of the first minute bucket. */
export const I32_MINUTE_BUCKETS = 20;
/** Minute buckets in the ring: exactly the `1h` window. */
export const MINUTE_BUCKETS = 60;
/** Int32 offset of the first hour bucket. */
export const I32_HOUR_BUCKETS = I32_MINUTE_BUCKETS + MINUTE_BUCKETS;
/** Hour buckets in the ring: exactly the `7d` window. */
export const HOUR_BUCKETS = 168;

export const MS_PER_MINUTE = 60_000;
export const MS_PER_HOUR = 3_600_000;

/**
 * Exclusive upper bound on event times: the minute head is an Int32, so an absolute minute index
 * must stay below 2^31 (about the year 6053).
 */
export const MAX_EVENT_MS = 2 ** 31 * MS_PER_MINUTE;
