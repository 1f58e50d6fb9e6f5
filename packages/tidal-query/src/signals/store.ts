/**
 * Hot engagement state per (item ordinal, signal kind), kept in SharedArrayBuffers so the main
 * thread (the only writer) updates it in place and query workers read it without copies.
 *
 * Consistency between threads is a per-slot seqlock (see `layout.ts` for the memory format): the
 * writer makes `seq` odd, writes, makes it even again; a reader retries until it sees the same even
 * `seq` before and after its reads. Readers never block the writer, and a reader can only spin
 * for as long as one `apply` takes.
 *
 * Nothing here reads the wall clock: the state is a pure function of the sequence of `apply`
 * calls, so replaying the write-ahead log after a crash rebuilds it exactly.
 */
import { CapacityError, InternalError, InvalidInputError } from 'tidal-load';
import {
  CONTROL_INT32,
  CONTROL_SLOTS_USED,
  F64_COUNT,
  F64_NEWEST,
  F64_OLDEST,
  F64_SCORE,
  F64_TREF,
  HOUR_BUCKETS,
  I32_HOUR_BUCKETS,
  I32_HOUR_HEAD,
  I32_KIND,
  I32_MINUTE_BUCKETS,
  I32_MINUTE_HEAD,
  I32_ORDINAL,
  I32_SEQ,
  MAX_EVENT_MS,
  MINUTE_BUCKETS,
  MS_PER_HOUR,
  MS_PER_MINUTE,
  SLOT_BYTES,
  SLOT_F64,
  SLOT_INT32,
} from './layout.js';

export { SLOT_BYTES } from './layout.js';

/** A counting window a signal kind can declare. `'all'` is the all-time count. */
export type WindowName = '1h' | '24h' | '7d' | 'all';

/** A window velocity can be computed over (events per second). */
export type VelocityWindow = Exclude<WindowName, 'all'>;

/** What the store needs to know about one signal kind of the schema. */
export interface SignalKindSpec {
  /** The kind's name in the schema. */
  name: string;
  /** Half-life of the decayed score, in milliseconds (`Infinity` disables decay). */
  halfLifeMs: number;
  /** Windows the schema declares for this kind; `read` reports exactly these. */
  windows: readonly WindowName[];
  /** Whether the schema asks for velocities over the declared windows. */
  velocity: boolean;
}

/** One consistent reading of a slot, as returned by {@link SignalStore.read}. */
export interface SignalValues {
  /** Decayed score at the reading time. */
  score: number;
  /** All-time event count. */
  count: number;
  /** Event counts for the requested windows. */
  windows: Partial<Record<WindowName, number>>;
  /** Events per second over the requested windows; present only when velocity was asked for. */
  velocity?: Partial<Record<VelocityWindow, number>>;
}

/**
 * The shared memory behind a store: plain SharedArrayBuffers and numbers, so it can be posted to a
 * worker (structured clone shares the buffers, it does not copy them) and passed to
 * {@link SignalStore.attach}.
 */
export interface SignalArena {
  readonly control: SharedArrayBuffer;
  readonly index: SharedArrayBuffer;
  readonly slots: SharedArrayBuffer;
  /** Number of signal kinds; the `index` row width. */
  readonly kinds: number;
  readonly maxOrdinals: number;
  readonly maxSlots: number;
}

/** Options of {@link SignalStore.create}. */
export interface SignalStoreOptions {
  /** The schema's signal kinds; a kind's index in this array is its `kind` number. */
  kinds: readonly SignalKindSpec[];
  /** Ordinals are `0..maxOrdinals-1`. */
  maxOrdinals: number;
  /** Maximum number of (ordinal, kind) pairs with state; reserved up front. */
  maxSlots: number;
}

const LN2 = Math.LN2;
const MINUTES_1H = 60;
const HOURS_24H = 24;
const HOURS_7D = 168;
const SECONDS_1H = 3_600;
const SECONDS_24H = 86_400;
const SECONDS_7D = 604_800;

const CAPACITY_HINT = 'raise the capacity.signalSlots builder option';

/**
 * Sum of the ring buckets for units in `[now - span + 1, now] ∩ [head - len + 1, head]`. The caller
 * holds the seqlock; `now` may be any number (NaN or far past/future reads as an empty window).
 */
function ringSum(i32: Int32Array, base: number, len: number, head: number, now: number, span: number): number {
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
    for (let i = from; i < to; i++) sum += i32[i];
  } else {
    for (let i = from; i < end; i++) sum += i32[i];
    const wrapTo = to - len;
    for (let i = base; i < wrapTo; i++) sum += i32[i];
  }
  return sum;
}

/**
 * Records one event in a ring of `len` buckets whose newest unit is at `headAt`. `first` means the
 * slot has no event yet, so the head is meaningless.
 */
function bumpRing(i32: Int32Array, headAt: number, base: number, len: number, unit: number, first: boolean): void {
  if (first) {
    i32.fill(0, base, base + len);
    i32[headAt] = unit;
    i32[base + (unit % len)] = 1;
    return;
  }
  const head = i32[headAt];
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
    i32[base + (unit % len)] += 1;
  }
  // Older than the ring covers: counted in the all-time count and score only.
}

function checkKinds(kinds: readonly SignalKindSpec[]): Float64Array {
  if (!Array.isArray(kinds)) throw new InvalidInputError('kinds', 'an array of signal kind specs', kinds);
  const lambdas = new Float64Array(kinds.length);
  for (let k = 0; k < kinds.length; k++) {
    const spec = kinds[k];
    const halfLife = spec?.halfLifeMs;
    if (typeof halfLife !== 'number' || !(halfLife > 0)) {
      throw new InvalidInputError(`kinds[${k}].halfLifeMs`, 'a positive number of milliseconds', halfLife);
    }
    lambdas[k] = LN2 / halfLife;
  }
  return lambdas;
}

function checkCount(field: string, value: number): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidInputError(field, 'a positive integer', value);
  }
}

/**
 * Per-(ordinal, kind) engagement state in shared memory: decayed score, all-time count, minute and
 * hour rings for windowed counts. Create it with {@link SignalStore.create} on the writer thread
 * and open it in workers with {@link SignalStore.attach}.
 */
export class SignalStore {
  private readonly control: Int32Array;
  private readonly index: Int32Array;
  private readonly i32: Int32Array;
  private readonly f64: Float64Array;
  private readonly lambdas: Float64Array;
  private readonly kindCount: number;
  private readonly ordinalCount: number;
  private readonly slotCapacity: number;
  private readonly writable: boolean;
  private readonly sharedArena: SignalArena;

  private constructor(arena: SignalArena, lambdas: Float64Array, writable: boolean) {
    this.sharedArena = arena;
    this.control = new Int32Array(arena.control);
    this.index = new Int32Array(arena.index);
    this.i32 = new Int32Array(arena.slots);
    this.f64 = new Float64Array(arena.slots);
    this.lambdas = lambdas;
    this.kindCount = arena.kinds;
    this.ordinalCount = arena.maxOrdinals;
    this.slotCapacity = arena.maxSlots;
    this.writable = writable;
  }

  /**
   * Reserves the arena for `maxSlots` slots and an index of `maxOrdinals * kinds` entries. Call on
   * the writer thread; that instance is the only one that may call {@link apply} and
   * {@link importState}.
   *
   * @throws InvalidInputError for a bad kind spec or a non-positive capacity.
   * @throws CapacityError if the platform cannot reserve that much shared memory.
   */
  static create(options: SignalStoreOptions): SignalStore {
    const lambdas = checkKinds(options.kinds);
    checkCount('maxOrdinals', options.maxOrdinals);
    checkCount('maxSlots', options.maxSlots);
    const kinds = options.kinds.length;
    const { maxOrdinals, maxSlots } = options;
    let control: SharedArrayBuffer;
    let index: SharedArrayBuffer;
    let slots: SharedArrayBuffer;
    try {
      control = new SharedArrayBuffer(CONTROL_INT32 * 4);
      index = new SharedArrayBuffer(maxOrdinals * kinds * 4);
      slots = new SharedArrayBuffer(maxSlots * SLOT_BYTES);
    } catch (err) {
      if (err instanceof RangeError) {
        throw new CapacityError(
          'signal state',
          maxSlots,
          `could not reserve ${maxSlots} slots for ${maxOrdinals} ordinals (${err.message}); lower capacity.signalSlots or the ordinal capacity`,
        );
      }
      throw err;
    }
    const arena: SignalArena = Object.freeze({ control, index, slots, kinds, maxOrdinals, maxSlots });
    return new SignalStore(arena, lambdas, true);
  }

  /**
   * Opens, read-only, an arena created by {@link create} on another thread. `kinds` must be the
   * same kind list the writer was created with (half-lives are not stored in the arena).
   *
   * @throws InvalidInputError if the arena is malformed or does not match `kinds`.
   */
  static attach(arena: SignalArena, kinds: readonly SignalKindSpec[]): SignalStore {
    const lambdas = checkKinds(kinds);
    if (typeof arena !== 'object' || arena === null) {
      throw new InvalidInputError('arena', 'a signal arena object', arena);
    }
    if (arena.kinds !== kinds.length) {
      throw new InvalidInputError('arena.kinds', `${kinds.length} (the number of signal kinds given)`, arena.kinds);
    }
    checkCount('arena.maxOrdinals', arena.maxOrdinals);
    checkCount('arena.maxSlots', arena.maxSlots);
    const expect = (field: 'control' | 'index' | 'slots', bytes: number): void => {
      const buf = arena[field];
      if (!(buf instanceof SharedArrayBuffer) || buf.byteLength !== bytes) {
        throw new InvalidInputError(`arena.${field}`, `a SharedArrayBuffer of ${bytes} bytes`, buf);
      }
    };
    expect('control', CONTROL_INT32 * 4);
    expect('index', arena.maxOrdinals * arena.kinds * 4);
    expect('slots', arena.maxSlots * SLOT_BYTES);
    const copy: SignalArena = Object.freeze({
      control: arena.control,
      index: arena.index,
      slots: arena.slots,
      kinds: arena.kinds,
      maxOrdinals: arena.maxOrdinals,
      maxSlots: arena.maxSlots,
    });
    return new SignalStore(copy, lambdas, false);
  }

  /** The shared buffers and sizes, to post to a worker and pass to {@link attach} there. */
  get arena(): SignalArena {
    return this.sharedArena;
  }

  /** Number of signal kinds. */
  get kinds(): number {
    return this.kindCount;
  }

  /** Ordinal capacity. */
  get maxOrdinals(): number {
    return this.ordinalCount;
  }

  /** Slot capacity. */
  get maxSlots(): number {
    return this.slotCapacity;
  }

  // ---------------------------------------------------------------------------------------------
  // Writer

  /**
   * Records one event of `kind` on item `ordinal` with `weight` at `atMs`, allocating the pair's
   * slot on its first event. Writer thread only. Events may arrive out of time order: the score
   * takes them pre-decayed and the rings count them if they still fall inside.
   *
   * @throws InvalidInputError for an ordinal or kind out of range, a non-finite weight or a time
   *   outside `[0, 2^31 minutes)`. Nothing is written.
   * @throws CapacityError when a new slot is needed and all `maxSlots` are in use.
   */
  apply(ordinal: number, kind: number, weight: number, atMs: number): void {
    this.requireWriter('apply signal events');
    this.checkPair(ordinal, kind);
    if (typeof weight !== 'number' || !Number.isFinite(weight)) {
      throw new InvalidInputError('weight', 'a finite number', weight);
    }
    if (typeof atMs !== 'number' || !(atMs >= 0 && atMs < MAX_EVENT_MS)) {
      throw new InvalidInputError('atMs', `a time in milliseconds in [0, ${MAX_EVENT_MS})`, atMs);
    }

    const ix = ordinal * this.kindCount + kind;
    // The writer is the index's only mutator, so its own plain read is current.
    const entry = this.index[ix];
    if (entry !== 0) {
      this.record(entry - 1, kind, weight, atMs);
      return;
    }

    const slot = this.control[CONTROL_SLOTS_USED];
    if (slot >= this.slotCapacity) {
      throw new CapacityError('signal state', this.slotCapacity, CAPACITY_HINT);
    }
    const b = slot * SLOT_INT32;
    this.i32[b + I32_ORDINAL] = ordinal;
    this.i32[b + I32_KIND] = kind;
    // The first event goes in before the slot is published, so no reader ever sees an empty slot.
    this.record(slot, kind, weight, atMs);
    Atomics.store(this.control, CONTROL_SLOTS_USED, slot + 1);
    Atomics.store(this.index, ix, slot + 1);
  }

  private record(slot: number, kind: number, weight: number, atMs: number): void {
    const i32 = this.i32;
    const f64 = this.f64;
    const b = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    const minute = Math.floor(atMs / MS_PER_MINUTE);
    const hour = Math.floor(atMs / MS_PER_HOUR);

    Atomics.add(i32, b + I32_SEQ, 1);
    const count = f64[fb + F64_COUNT];
    const first = count === 0;
    if (first) {
      f64[fb + F64_SCORE] = weight;
      f64[fb + F64_TREF] = atMs;
      f64[fb + F64_NEWEST] = atMs;
      f64[fb + F64_OLDEST] = atMs;
    } else {
      const lambda = this.lambdas[kind];
      const tRef = f64[fb + F64_TREF];
      if (atMs >= tRef) {
        f64[fb + F64_SCORE] = f64[fb + F64_SCORE] * Math.exp(-lambda * (atMs - tRef)) + weight;
        f64[fb + F64_TREF] = atMs;
      } else {
        // A late event is decayed to the reference time instead of moving the reference back.
        f64[fb + F64_SCORE] = f64[fb + F64_SCORE] + weight * Math.exp(-lambda * (tRef - atMs));
      }
      if (atMs > f64[fb + F64_NEWEST]) f64[fb + F64_NEWEST] = atMs;
      if (atMs < f64[fb + F64_OLDEST]) f64[fb + F64_OLDEST] = atMs;
    }
    f64[fb + F64_COUNT] = count + 1;
    bumpRing(i32, b + I32_MINUTE_HEAD, b + I32_MINUTE_BUCKETS, MINUTE_BUCKETS, minute, first);
    bumpRing(i32, b + I32_HOUR_HEAD, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, hour, first);
    Atomics.add(i32, b + I32_SEQ, 1);
  }

  // ---------------------------------------------------------------------------------------------
  // Readers (any thread)

  /**
   * The slot holding (ordinal, kind), or -1 if the pair has no event yet.
   *
   * @throws InvalidInputError for an ordinal or kind out of range.
   */
  slotOf(ordinal: number, kind: number): number {
    this.checkPair(ordinal, kind);
    return Atomics.load(this.index, ordinal * this.kindCount + kind) - 1;
  }

  /** Number of slots in use; slots `0..slotsUsed()-1` are all initialised. */
  slotsUsed(): number {
    return Atomics.load(this.control, CONTROL_SLOTS_USED);
  }

  /** The ordinal a slot belongs to (fixed once the slot is published). */
  slotOrdinal(slot: number): number {
    this.checkSlot(slot);
    return this.i32[slot * SLOT_INT32 + I32_ORDINAL];
  }

  /** The signal kind a slot belongs to (fixed once the slot is published). */
  slotKind(slot: number): number {
    this.checkSlot(slot);
    return this.i32[slot * SLOT_INT32 + I32_KIND];
  }

  /** The decayed score at `nowMs`; a time before the score's reference time does not grow it. */
  decayedScore(slot: number, nowMs: number): number {
    this.checkSlot(slot);
    const i32 = this.i32;
    const f64 = this.f64;
    const seqAt = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    const lambda = this.lambdas[i32[seqAt + I32_KIND]];
    for (;;) {
      const s1 = Atomics.load(i32, seqAt);
      if ((s1 & 1) !== 0) continue;
      const score = f64[fb + F64_SCORE];
      const tRef = f64[fb + F64_TREF];
      if (Atomics.load(i32, seqAt) !== s1) continue;
      const dt = nowMs - tRef;
      return dt > 0 ? score * Math.exp(-lambda * dt) : score;
    }
  }

  /** All-time event count. */
  allTimeCount(slot: number): number {
    this.checkSlot(slot);
    // A single aligned Float64 load, but the seqlock still guards against a torn 64-bit read.
    const i32 = this.i32;
    const seqAt = slot * SLOT_INT32;
    const at = slot * SLOT_F64 + F64_COUNT;
    for (;;) {
      const s1 = Atomics.load(i32, seqAt);
      if ((s1 & 1) !== 0) continue;
      const count = this.f64[at];
      if (Atomics.load(i32, seqAt) === s1) return count;
    }
  }

  /** Time (ms) of the newest event; lets a scan skip slots quiet for the whole window cheaply. */
  newestAt(slot: number): number {
    this.checkSlot(slot);
    const i32 = this.i32;
    const seqAt = slot * SLOT_INT32;
    const at = slot * SLOT_F64 + F64_NEWEST;
    for (;;) {
      const s1 = Atomics.load(i32, seqAt);
      if ((s1 & 1) !== 0) continue;
      const newest = this.f64[at];
      if (Atomics.load(i32, seqAt) === s1) return newest;
    }
  }

  /** Time (ms) of the oldest event. */
  oldestAt(slot: number): number {
    this.checkSlot(slot);
    const i32 = this.i32;
    const seqAt = slot * SLOT_INT32;
    const at = slot * SLOT_F64 + F64_OLDEST;
    for (;;) {
      const s1 = Atomics.load(i32, seqAt);
      if ((s1 & 1) !== 0) continue;
      const oldest = this.f64[at];
      if (Atomics.load(i32, seqAt) === s1) return oldest;
    }
  }

  /**
   * Events in `window` ending at `nowMs`: `'1h'` is the 60 minutes up to and including `nowMs`'s
   * minute, `'24h'` and `'7d'` the 24 or 168 hours up to and including its hour, `'all'` the
   * all-time count. Only what the rings still hold counts. With `coarse` every window reads the
   * all-time count (the cheap degraded mode).
   */
  windowCount(slot: number, window: WindowName, nowMs: number, coarse = false): number {
    if (coarse || window === 'all') return this.allTimeCount(slot);
    this.checkSlot(slot);
    const i32 = this.i32;
    const b = slot * SLOT_INT32;
    if (window === '1h') {
      const now = Math.floor(nowMs / MS_PER_MINUTE);
      for (;;) {
        const s1 = Atomics.load(i32, b);
        if ((s1 & 1) !== 0) continue;
        const sum = ringSum(i32, b + I32_MINUTE_BUCKETS, MINUTE_BUCKETS, i32[b + I32_MINUTE_HEAD], now, MINUTES_1H);
        if (Atomics.load(i32, b) === s1) return sum;
      }
    }
    const span = window === '24h' ? HOURS_24H : window === '7d' ? HOURS_7D : -1;
    if (span < 0) throw new InvalidInputError('window', "one of '1h', '24h', '7d', 'all'", window);
    const now = Math.floor(nowMs / MS_PER_HOUR);
    for (;;) {
      const s1 = Atomics.load(i32, b);
      if ((s1 & 1) !== 0) continue;
      const sum = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, i32[b + I32_HOUR_HEAD], now, span);
      if (Atomics.load(i32, b) === s1) return sum;
    }
  }

  /**
   * Events per second over `window` ending at `nowMs` (its count divided by 3600, 86400 or 604800).
   * With `coarse` it is always the 24h count / 86400, whichever window was asked.
   */
  velocity(slot: number, window: VelocityWindow, nowMs: number, coarse = false): number {
    if (coarse) return this.windowCount(slot, '24h', nowMs) / SECONDS_24H;
    switch (window) {
      case '1h':
        return this.windowCount(slot, '1h', nowMs) / SECONDS_1H;
      case '24h':
        return this.windowCount(slot, '24h', nowMs) / SECONDS_24H;
      case '7d':
        return this.windowCount(slot, '7d', nowMs) / SECONDS_7D;
      default:
        throw new InvalidInputError('window', "one of '1h', '24h', '7d'", window);
    }
  }

  /**
   * Everything the ranking needs from one slot, read in one seqlock-consistent pass: the decayed
   * score, the all-time count, the counts for `windows`, and (if `velocity`) the velocities over
   * those of `windows` that are not `'all'`. `coarse` applies the same degradation as
   * {@link windowCount} and {@link velocity}.
   */
  read(slot: number, nowMs: number, coarse: boolean, windows: readonly WindowName[], velocity: boolean): SignalValues {
    this.checkSlot(slot);
    const i32 = this.i32;
    const f64 = this.f64;
    const b = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    const lambda = this.lambdas[i32[b + I32_KIND]];
    const nowMinute = Math.floor(nowMs / MS_PER_MINUTE);
    const nowHour = Math.floor(nowMs / MS_PER_HOUR);
    let score = 0;
    let tRef = 0;
    let count = 0;
    let c1h = 0;
    let c24h = 0;
    let c7d = 0;
    let want1h = false;
    let want24h = false;
    let want7d = false;
    for (const w of windows) {
      if (w === '1h') want1h = true;
      else if (w === '24h') want24h = true;
      else if (w === '7d') want7d = true;
      else if (w !== 'all') throw new InvalidInputError('windows', "a list of '1h', '24h', '7d', 'all'", w);
    }
    // Coarse velocity is the real 24h count even though coarse windows are all-time counts.
    const need24h = coarse ? velocity && (want1h || want24h || want7d) : want24h;
    for (;;) {
      const s1 = Atomics.load(i32, b);
      if ((s1 & 1) !== 0) continue;
      score = f64[fb + F64_SCORE];
      tRef = f64[fb + F64_TREF];
      count = f64[fb + F64_COUNT];
      if (!coarse && want1h) {
        c1h = ringSum(i32, b + I32_MINUTE_BUCKETS, MINUTE_BUCKETS, i32[b + I32_MINUTE_HEAD], nowMinute, MINUTES_1H);
      }
      if (need24h || (!coarse && want7d)) {
        const head = i32[b + I32_HOUR_HEAD];
        if (need24h) c24h = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, head, nowHour, HOURS_24H);
        if (!coarse && want7d) c7d = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, head, nowHour, HOURS_7D);
      }
      if (Atomics.load(i32, b) === s1) break;
    }
    const dt = nowMs - tRef;
    const values: SignalValues = {
      score: dt > 0 ? score * Math.exp(-lambda * dt) : score,
      count,
      windows: {},
    };
    const vel: Partial<Record<VelocityWindow, number>> | undefined = velocity ? {} : undefined;
    for (const w of windows) {
      switch (w) {
        case 'all':
          values.windows.all = count;
          break;
        case '1h':
          values.windows['1h'] = coarse ? count : c1h;
          if (vel) vel['1h'] = coarse ? c24h / SECONDS_24H : c1h / SECONDS_1H;
          break;
        case '24h':
          values.windows['24h'] = coarse ? count : c24h;
          if (vel) vel['24h'] = c24h / SECONDS_24H;
          break;
        case '7d':
          values.windows['7d'] = coarse ? count : c7d;
          if (vel) vel['7d'] = coarse ? c24h / SECONDS_24H : c7d / SECONDS_7D;
          break;
      }
    }
    if (vel) values.velocity = vel;
    return values;
  }

  // ---------------------------------------------------------------------------------------------
  // Checkpoints (writer thread)

  /**
   * A copy of the slots in use, byte for byte (`slotsUsed() * SLOT_BYTES` bytes), for a checkpoint.
   * Writer thread only: it reads without the seqlock because nothing else mutates the slots.
   */
  exportState(): Uint8Array<ArrayBuffer> {
    this.requireWriter('export signal state');
    const used = this.control[CONTROL_SLOTS_USED];
    return new Uint8Array(this.sharedArena.slots, 0, used * SLOT_BYTES).slice();
  }

  /**
   * Loads a checkpoint written by {@link exportState} into this store, which must be freshly
   * created and empty. `kindRemap[oldKind]` gives each old kind's new index, or -1 to drop that
   * kind's slots (the remaining slots are compacted); without it kinds keep their indices. All
   * checks run before anything is written.
   *
   * @throws InvalidInputError if the store is not empty, the length is not a multiple of
   *   {@link SLOT_BYTES}, a slot names an ordinal or kind out of range, or two slots end up on the
   *   same (ordinal, kind).
   * @throws CapacityError if the kept slots do not fit in `maxSlots`.
   */
  importState(bytes: Uint8Array, kindRemap?: ArrayLike<number>): void {
    this.requireWriter('import signal state');
    if (!(bytes instanceof Uint8Array)) throw new InvalidInputError('bytes', 'a Uint8Array', bytes);
    const used = this.control[CONTROL_SLOTS_USED];
    if (used !== 0) throw new InvalidInputError('signal store', 'empty before importState', `${used} slots in use`);
    if (bytes.byteLength % SLOT_BYTES !== 0) {
      throw new InvalidInputError('signal state length', `a multiple of ${SLOT_BYTES} bytes`, bytes.byteLength);
    }
    const oldSlots = bytes.byteLength / SLOT_BYTES;
    // Copy to an aligned buffer once so headers can be read as Int32 regardless of bytes' offset.
    const src = new Int32Array(oldSlots * SLOT_INT32);
    new Uint8Array(src.buffer).set(bytes);

    const newKinds = new Int32Array(oldSlots);
    const seen = new Map<number, number>();
    let kept = 0;
    for (let s = 0; s < oldSlots; s++) {
      const b = s * SLOT_INT32;
      const ordinal = src[b + I32_ORDINAL];
      const oldKind = src[b + I32_KIND];
      let kind = oldKind;
      if (kindRemap !== undefined) {
        if (oldKind < 0 || oldKind >= kindRemap.length) {
          throw new InvalidInputError(`signal state slot ${s} kind`, `below ${kindRemap.length} (the kind remap length)`, oldKind);
        }
        kind = kindRemap[oldKind];
        if (kind === -1) {
          newKinds[s] = -1;
          continue;
        }
        if (!Number.isInteger(kind) || kind < 0 || kind >= this.kindCount) {
          throw new InvalidInputError(`kindRemap[${oldKind}]`, `-1 or an integer in [0, ${this.kindCount})`, kind);
        }
      } else if (kind < 0 || kind >= this.kindCount) {
        throw new InvalidInputError(`signal state slot ${s} kind`, `an integer in [0, ${this.kindCount})`, kind);
      }
      if (ordinal < 0 || ordinal >= this.ordinalCount) {
        throw new InvalidInputError(`signal state slot ${s} ordinal`, `an integer in [0, ${this.ordinalCount})`, ordinal);
      }
      const ix = ordinal * this.kindCount + kind;
      const dup = seen.get(ix);
      if (dup !== undefined) {
        throw new InvalidInputError(
          `signal state slot ${s}`,
          `a distinct (ordinal, kind) pair (slot ${dup} already holds ordinal ${ordinal}, kind ${kind})`,
          kind,
        );
      }
      seen.set(ix, s);
      newKinds[s] = kind;
      kept++;
    }
    if (kept > this.slotCapacity) {
      throw new CapacityError('signal state', this.slotCapacity, CAPACITY_HINT);
    }

    const dst = this.i32;
    let slot = 0;
    for (let s = 0; s < oldSlots; s++) {
      const kind = newKinds[s];
      if (kind === -1) continue;
      const from = s * SLOT_INT32;
      const to = slot * SLOT_INT32;
      dst.set(src.subarray(from, from + SLOT_INT32), to);
      // A checkpoint is taken between writes so its sequences are even; forcing that keeps a
      // damaged one from stalling readers, and keeping the value keeps import/export byte-exact.
      dst[to + I32_SEQ] &= ~1;
      dst[to + I32_KIND] = kind;
      slot++;
    }
    Atomics.store(this.control, CONTROL_SLOTS_USED, kept);
    for (let s = 0; s < kept; s++) {
      const b = s * SLOT_INT32;
      Atomics.store(this.index, dst[b + I32_ORDINAL] * this.kindCount + dst[b + I32_KIND], s + 1);
    }
  }

  // ---------------------------------------------------------------------------------------------

  private requireWriter(operation: string): void {
    if (!this.writable) {
      throw new InternalError(`cannot ${operation}: this signal store was attached read-only; only the creating thread writes`);
    }
  }

  private checkPair(ordinal: number, kind: number): void {
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= this.ordinalCount) {
      throw new InvalidInputError('ordinal', `an integer in [0, ${this.ordinalCount})`, ordinal);
    }
    if (!Number.isInteger(kind) || kind < 0 || kind >= this.kindCount) {
      throw new InvalidInputError('kind', `an integer in [0, ${this.kindCount})`, kind);
    }
  }

  private checkSlot(slot: number): void {
    // One unsigned compare rejects negatives, fractions and NaN without a branch per case.
    if (slot >>> 0 !== slot || slot >= this.slotCapacity) {
      throw new InvalidInputError('slot', `an integer in [0, ${this.slotCapacity})`, slot);
    }
  }
}
