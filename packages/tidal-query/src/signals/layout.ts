/**
 * Memory layout of the shared signal-state arena. The writer (main thread) and the query workers
 * agree on these offsets and nothing else, so they are the on-memory format: changing one is a
 * format change, and checkpoints (the slot arena's used prefix, copied byte for byte) embed the
 * slot layout, numbered by {@link SLOT_LAYOUT} (see `legacy.ts` for the layouts before it).
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
 *   again by a reader that meets a published slot past them). Within a slot (layout 2, 256 bytes):
 *
 * ```
 *  Int32 index   Float64 index   field
 *  0                             seq (seqlock: odd while the writer is inside)
 *  1                             1h ring head: floor(atMs / 300000), the newest 5-minute unit
 *  2                             24h ring head: floor(atMs / 3600000), the newest hour
 *  3                             7d ring head: floor(atMs / 50400000), the newest 14-hour unit
 *  4                             ordinal
 *  5                             kind
 *  6..7          3               decayed score S
 *  8..9          4               tRef: the time (ms) S is referenced to
 *  10..11        5               all-time event count
 *  12..13        6               newest event time (ms)
 *  14..15        7               oldest event time (ms)
 *  16..27                        12 buckets of 5 minutes, ring indexed by unit % 12 (the 1h window)
 *  28..51                        24 buckets of 1 hour, ring indexed by unit % 24 (the 24h window)
 *  52..63                        12 buckets of 14 hours, ring indexed by unit % 12 (the 7d window)
 * ```
 *
 * Each window has its own ring of exactly as many buckets as the window spans, so a window is the
 * `len` buckets up to and including the one `now` falls in: it covers between `(len − 1)` and `len`
 * units back from `now` (1h: 55 to 60 minutes; 24h: 23 to 24 hours; 7d: 154 to 168 hours) and never
 * counts an event older than the window, but drops the events of the part of the oldest bucket that
 * has already left it (at most one unit: 5 minutes, 1 hour, 14 hours, ≤ 1/12 of each window).
 * Buckets are Int32 counters that saturate at {@link BUCKET_MAX} instead of wrapping.
 *
 * `index` and `slots` are growable SharedArrayBuffers: address space for the maximum is reserved up
 * front (not charged against the host's overcommit limit) and memory is committed as they grow.
 * Growing never moves a byte, so views and offsets stay valid on every thread.
 */

/** The slot layout's number, stored with every checkpoint. Layout 1 was 1 024-byte slots (`legacy.ts`). */
export const SLOT_LAYOUT = 2;
/** Bytes per slot. */
export const SLOT_BYTES = 256;
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
export const I32_HEAD_1H = 1;
export const I32_HEAD_24H = 2;
export const I32_HEAD_7D = 3;
export const I32_ORDINAL = 4;
export const I32_KIND = 5;

// Float64 offsets within a slot.
export const F64_SCORE = 3;
export const F64_TREF = 4;
export const F64_COUNT = 5;
export const F64_NEWEST = 6;
export const F64_OLDEST = 7;

export const MS_PER_MINUTE = 60_000;
export const MS_PER_HOUR = 3_600_000;

/** The 1h window's ring: 12 buckets of 5 minutes. */
export const UNIT_1H_MS = 5 * MS_PER_MINUTE;
export const BUCKETS_1H = 12;
export const I32_BUCKETS_1H = 16;
/** The 24h window's ring: 24 buckets of 1 hour. */
export const UNIT_24H_MS = MS_PER_HOUR;
export const BUCKETS_24H = 24;
export const I32_BUCKETS_24H = I32_BUCKETS_1H + BUCKETS_1H;
/** The 7d window's ring: 12 buckets of 14 hours. */
export const UNIT_7D_MS = 14 * MS_PER_HOUR;
export const BUCKETS_7D = 12;
export const I32_BUCKETS_7D = I32_BUCKETS_24H + BUCKETS_24H;

/** A bucket's largest count: one more event leaves it there (the all-time count, a Float64, goes on). */
export const BUCKET_MAX = 0x7fff_ffff;

/**
 * Exclusive upper bound on event times, kept from layout 1 (whose minute head was an Int32): an
 * absolute minute index stays below 2^31 (about the year 6053), and every ring head here is smaller.
 */
export const MAX_EVENT_MS = 2 ** 31 * MS_PER_MINUTE;
