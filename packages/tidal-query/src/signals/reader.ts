import { InvalidInputError } from 'tidal-load';
import { indexView } from './arena.js';
import {
  BUCKETS_1H,
  BUCKETS_24H,
  BUCKETS_7D,
  CONTROL_SLOTS_USED,
  F64_COUNT,
  F64_NEWEST,
  F64_SCORE,
  F64_TREF,
  I32_BUCKETS_1H,
  I32_BUCKETS_24H,
  I32_BUCKETS_7D,
  I32_HEAD_1H,
  I32_HEAD_24H,
  I32_HEAD_7D,
  I32_KIND,
  I32_ORDINAL,
  I32_SEQ,
  SLOT_BYTES,
  SLOT_F64,
  SLOT_INT32,
  UNIT_1H_MS,
  UNIT_24H_MS,
  UNIT_7D_MS,
} from './layout.js';
import { SignalOrder } from './order.js';
import { ringSum } from './rings.js';
import { seqBegin, seqUnchanged } from './seqlock.js';
import type { SignalArena, SignalValues, VelocityWindow, WindowName } from './types.js';

const SECONDS_1H = 3_600;
const SECONDS_24H = 86_400;
const SECONDS_7D = 604_800;

/**
 * The reading half of `SignalStore` (any thread): the views over an arena, kept as long as
 * the buffers have grown, and every read of a slot, each one seqlock-consistent. The store adds the
 * writer's half; a store attached in a worker is one that only reads.
 *
 * Element reads take `!`: every one follows {@link checkSlot}, which puts the slot inside the views,
 * and a slot's kind is below `kinds` (the writer checked it before claiming the slot).
 */
export class SlotReader {
  protected readonly control: Int32Array;
  // Fixed-length views, made again when a slot or entry past them is met: Node 20 runs element
  // access through length-tracking views about 10× slower (`npm run bench:store`).
  protected index: Int32Array;
  protected i32: Int32Array;
  protected f64: Float64Array;
  /** Slots the views cover: the buffer's length when they were made. */
  protected viewSlots = 0;
  /** The highest published slot count this instance has seen; never above `viewSlots`. */
  protected seenUsed = 0;
  protected readonly lambdas: Float64Array;
  protected readonly kindCount: number;
  protected readonly ordinalCount: number;
  protected readonly slotCapacity: number;
  protected readonly sharedArena: SignalArena;
  private readonly orderReader: SignalOrder;

  protected constructor(arena: SignalArena, lambdas: Float64Array) {
    this.sharedArena = arena;
    this.control = new Int32Array(arena.control);
    this.index = indexView(arena.index);
    this.i32 = new Int32Array(0);
    this.f64 = new Float64Array(0);
    this.mapSlots();
    this.lambdas = lambdas;
    this.kindCount = arena.kinds;
    this.ordinalCount = arena.maxOrdinals;
    this.slotCapacity = arena.maxSlots;
    this.orderReader = new SignalOrder(arena.order, arena.kinds);
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

  /** Slot capacity: the reservation the slots grow into. */
  get maxSlots(): number {
    return this.slotCapacity;
  }

  /**
   * The slot holding (ordinal, kind), or -1 if the pair has no event yet (no slot, or a reserved
   * slot still empty).
   *
   * @throws InvalidInputError for an ordinal or kind out of range.
   */
  slotOf(ordinal: number, kind: number): number {
    this.checkPair(ordinal, kind);
    const ix = ordinal * this.kindCount + kind;
    if (ix >= this.index.length) {
      this.index = indexView(this.sharedArena.index);
      // Past the index's current length nothing was ever published.
      if (ix >= this.index.length) return -1;
    }
    const slot = Atomics.load(this.index, ix) - 1;
    if (slot < 0) return -1;
    // The writer grew the slots before it published this entry.
    if (slot >= this.viewSlots) this.mapSlots();
    return this.f64[slot * SLOT_F64 + F64_COUNT] !== 0 ? slot : -1;
  }

  /**
   * The write sequence of `slot` (a slot {@link slotOf} returned): even while no write is inside
   * it, and moved by every write to it, so an unchanged even sequence means unchanged values.
   */
  slotSeq(slot: number): number {
    return Atomics.load(this.i32, slot * SLOT_INT32 + I32_SEQ);
  }

  /**
   * The slot orders by decay key and by newest event (see `order.ts`), for a query that wants the
   * top of either without scanning every slot. One reader per store instance.
   */
  get order(): SignalOrder {
    return this.orderReader;
  }

  /** The decay rate λ = ln 2 / half-life of `kind`, per millisecond (0 for no decay). */
  decayRate(kind: number): number {
    this.checkPair(0, kind);
    return this.lambdas[kind]!;
  }

  /** Number of slots in use; slots `0..slotsUsed()-1` all have their header (some may be empty). */
  slotsUsed(): number {
    return Atomics.load(this.control, CONTROL_SLOTS_USED);
  }

  /**
   * Whether the slot holds at least one event. A scan over `0..slotsUsed()-1` skips slots for which
   * this is false: they were reserved for a write that has not been (or never was) applied.
   */
  hasEvents(slot: number): boolean {
    this.checkSlot(slot);
    // Outside the seqlock on purpose: the count only ever leaves 0 once, so any reading is either
    // 0 (not yet) or not 0 (from then on); the values themselves are read under the seqlock.
    return this.f64[slot * SLOT_F64 + F64_COUNT] !== 0;
  }

  /** The ordinal a slot belongs to (fixed once the slot is published). */
  slotOrdinal(slot: number): number {
    this.checkSlot(slot);
    return this.i32[slot * SLOT_INT32 + I32_ORDINAL]!;
  }

  /** The signal kind a slot belongs to (fixed once the slot is published). */
  slotKind(slot: number): number {
    this.checkSlot(slot);
    return this.i32[slot * SLOT_INT32 + I32_KIND]!;
  }

  /** The decayed score at `nowMs`; a time before the score's reference time does not grow it. */
  decayedScore(slot: number, nowMs: number): number {
    this.checkSlot(slot);
    const i32 = this.i32;
    const f64 = this.f64;
    const b = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    let seq: number;
    let score: number;
    let tRef: number;
    do {
      seq = seqBegin(i32, b);
      score = f64[fb + F64_SCORE]!;
      tRef = f64[fb + F64_TREF]!;
    } while (!seqUnchanged(i32, b, seq));
    const dt = nowMs - tRef;
    return dt > 0 ? score * Math.exp(-this.lambdas[i32[b + I32_KIND]!]! * dt) : score;
  }

  /** All-time event count. */
  allTimeCount(slot: number): number {
    return this.scalar(slot, F64_COUNT);
  }

  /** Time (ms) of the newest event; lets a scan skip slots quiet for the whole window cheaply. */
  newestAt(slot: number): number {
    return this.scalar(slot, F64_NEWEST);
  }

  /**
   * Events in `window` ending at `nowMs`: the window's ring buckets up to and including the one
   * `nowMs` falls in: `'1h'` the twelve 5-minute buckets, `'24h'` the 24 hours, `'7d'` the twelve
   * 14-hour buckets (so a window reaches between one bucket less than its length and its length
   * back, see `layout.ts`); `'all'` the all-time count. Only what the rings still hold counts. With
   * `coarse` every window reads the all-time count (the cheap degraded mode).
   */
  windowCount(slot: number, window: WindowName, nowMs: number, coarse = false): number {
    if (coarse || window === 'all') return this.allTimeCount(slot);
    this.checkSlot(slot);
    const i32 = this.i32;
    const b = slot * SLOT_INT32;
    let seq: number;
    let sum: number;
    // One branch per window with the ring's constants written out: ringSum's modulo by a constant
    // compiles to a multiply, by a variable to a division.
    if (window === '1h') {
      const now = Math.floor(nowMs / UNIT_1H_MS);
      do {
        seq = seqBegin(i32, b);
        sum = ringSum(i32, b + I32_BUCKETS_1H, BUCKETS_1H, i32[b + I32_HEAD_1H]!, now, BUCKETS_1H);
      } while (!seqUnchanged(i32, b, seq));
      return sum;
    }
    if (window === '24h') {
      const now = Math.floor(nowMs / UNIT_24H_MS);
      do {
        seq = seqBegin(i32, b);
        sum = ringSum(i32, b + I32_BUCKETS_24H, BUCKETS_24H, i32[b + I32_HEAD_24H]!, now, BUCKETS_24H);
      } while (!seqUnchanged(i32, b, seq));
      return sum;
    }
    if (window !== '7d') throw new InvalidInputError('window', "one of '1h', '24h', '7d', 'all'", window);
    const now = Math.floor(nowMs / UNIT_7D_MS);
    do {
      seq = seqBegin(i32, b);
      sum = ringSum(i32, b + I32_BUCKETS_7D, BUCKETS_7D, i32[b + I32_HEAD_7D]!, now, BUCKETS_7D);
    } while (!seqUnchanged(i32, b, seq));
    return sum;
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
   * The sum of {@link velocity} over `kinds` (in that order, each with a slot that has an event) for
   * each of the first `n` of `ordinals`, into `out`: what a loop of {@link slotOf} and
   * {@link velocity} per ordinal gives, bit for bit. Returns the slots read. In passes over all
   * the ordinals (their index entries, then a touch of the slot lines the read will use, then the
   * reads), so the cache misses of one ordinal do not wait on another's: at 1 000 000 items a
   * candidate's slots are in no cache, and one read after another cost ~3× these passes.
   *
   * @throws InvalidInputError for an ordinal or kind out of range.
   */
  velocities(
    ordinals: ArrayLike<number>,
    n: number,
    kinds: readonly number[],
    window: VelocityWindow,
    nowMs: number,
    coarse: boolean,
    out: Float64Array,
  ): number {
    for (const k of kinds) this.checkPair(0, k);
    let ringAt: number;
    let ringLen: number;
    let unitMs: number;
    let seconds: number;
    if (coarse || window === '24h') [ringAt, ringLen, unitMs, seconds] = [I32_BUCKETS_24H, BUCKETS_24H, UNIT_24H_MS, SECONDS_24H];
    else if (window === '1h') [ringAt, ringLen, unitMs, seconds] = [I32_BUCKETS_1H, BUCKETS_1H, UNIT_1H_MS, SECONDS_1H];
    else if (window === '7d') [ringAt, ringLen, unitMs, seconds] = [I32_BUCKETS_7D, BUCKETS_7D, UNIT_7D_MS, SECONDS_7D];
    else throw new InvalidInputError('window', "one of '1h', '24h', '7d'", window);
    const kn = kinds.length;
    if (kn === 0) {
      out.fill(0, 0, n);
      return 0;
    }
    const slots = scratchSlots(n * kn);
    const kindCount = this.kindCount;
    // 1. The index entries: the slot of each (ordinal, kind), -1 for none yet.
    let highest = -1;
    for (let i = 0; i < n; i++) {
      const o = ordinals[i]!;
      this.checkPair(o, 0);
      for (let j = 0; j < kn; j++) {
        const ix = o * kindCount + kinds[j]!;
        if (ix >= this.index.length) this.index = indexView(this.sharedArena.index);
        const slot = ix < this.index.length ? Atomics.load(this.index, ix) - 1 : -1;
        slots[i * kn + j] = slot;
        if (slot > highest) highest = slot;
      }
    }
    // The writer grew the slots before it published any of these entries.
    if (highest >= this.viewSlots) this.mapSlots();
    const i32 = this.i32;
    const f64 = this.f64;
    // 2. A touch of each slot's header line and of its ring's first and last bucket, so the loads
    // of every slot are in flight together; the sum is kept so the loads are not dropped.
    let touched = 0;
    for (let j = 0; j < n * kn; j++) {
      const slot = slots[j]!;
      if (slot < 0) continue;
      const b = slot * SLOT_INT32;
      touched += i32[b]! + i32[b + ringAt]! + i32[b + ringAt + ringLen - 1]!;
    }
    _touchSink ^= touched;
    // 3. The reads, as slotOf (a slot without an event is none) and velocity do them.
    const now = Math.floor(nowMs / unitMs);
    let read = 0;
    for (let i = 0; i < n; i++) {
      let sum = 0;
      for (let j = 0; j < kn; j++) {
        const slot = slots[i * kn + j]!;
        if (slot < 0 || f64[slot * SLOT_F64 + F64_COUNT] === 0) continue;
        const b = slot * SLOT_INT32;
        const head = b + (ringAt === I32_BUCKETS_1H ? I32_HEAD_1H : ringAt === I32_BUCKETS_24H ? I32_HEAD_24H : I32_HEAD_7D);
        let seq: number;
        let count: number;
        do {
          seq = seqBegin(i32, b);
          count = ringSum(i32, b + ringAt, ringLen, i32[head]!, now, ringLen);
        } while (!seqUnchanged(i32, b, seq));
        sum += count / seconds;
        read++;
      }
      out[i] = sum;
    }
    return read;
  }

  /**
   * Everything the ranking needs from one slot, read in one seqlock-consistent pass: the decayed
   * score, the all-time count, the counts for `windows`, and (if `velocity`) the velocities over
   * those of `windows` that are not `'all'`. `coarse` applies the same degradation as
   * {@link windowCount} and {@link velocity}.
   */
  read(slot: number, nowMs: number, coarse: boolean, windows: readonly WindowName[], velocity: boolean): SignalValues {
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
    this.checkSlot(slot);
    const i32 = this.i32;
    const f64 = this.f64;
    const b = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    const now1h = Math.floor(nowMs / UNIT_1H_MS);
    const now24h = Math.floor(nowMs / UNIT_24H_MS);
    const now7d = Math.floor(nowMs / UNIT_7D_MS);
    const sum1h = !coarse && want1h;
    const sum7d = !coarse && want7d;
    let seq: number;
    let score: number;
    let tRef: number;
    let count: number;
    let c1h = 0;
    let c24h = 0;
    let c7d = 0;
    do {
      seq = seqBegin(i32, b);
      score = f64[fb + F64_SCORE]!;
      tRef = f64[fb + F64_TREF]!;
      count = f64[fb + F64_COUNT]!;
      if (sum1h) c1h = ringSum(i32, b + I32_BUCKETS_1H, BUCKETS_1H, i32[b + I32_HEAD_1H]!, now1h, BUCKETS_1H);
      if (need24h) c24h = ringSum(i32, b + I32_BUCKETS_24H, BUCKETS_24H, i32[b + I32_HEAD_24H]!, now24h, BUCKETS_24H);
      if (sum7d) c7d = ringSum(i32, b + I32_BUCKETS_7D, BUCKETS_7D, i32[b + I32_HEAD_7D]!, now7d, BUCKETS_7D);
    } while (!seqUnchanged(i32, b, seq));
    const dt = nowMs - tRef;
    const lambda = this.lambdas[i32[b + I32_KIND]!]!;
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

  /** One Float64 field of a slot, read under the seqlock (a 64-bit read may tear without it). */
  private scalar(slot: number, field: number): number {
    this.checkSlot(slot);
    const i32 = this.i32;
    const f64 = this.f64;
    const b = slot * SLOT_INT32;
    const at = slot * SLOT_F64 + field;
    let seq: number;
    let value: number;
    do {
      seq = seqBegin(i32, b);
      value = f64[at]!;
    } while (!seqUnchanged(i32, b, seq));
    return value;
  }

  /** Makes the slot views cover the whole buffer as it is now. */
  protected mapSlots(): void {
    const buf = this.sharedArena.slots;
    const slots = Math.floor(buf.byteLength / SLOT_BYTES);
    this.i32 = new Int32Array(buf, 0, slots * SLOT_INT32);
    this.f64 = new Float64Array(buf, 0, slots * SLOT_F64);
    this.viewSlots = slots;
  }

  protected checkPair(ordinal: number, kind: number): void {
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= this.ordinalCount) {
      throw new InvalidInputError('ordinal', `an integer in [0, ${this.ordinalCount})`, ordinal);
    }
    if (!Number.isInteger(kind) || kind < 0 || kind >= this.kindCount) {
      throw new InvalidInputError('kind', `an integer in [0, ${this.kindCount})`, kind);
    }
  }

  protected checkSlot(slot: number): void {
    // Only published slots: past them the buffer may not have grown yet. The count only grows, so
    // a slot below the last count seen needs no atomic load. One unsigned compare rejects
    // negatives, fractions and NaN without a branch per case.
    if (slot >>> 0 !== slot || slot >= this.seenUsed) this.checkNewSlot(slot);
  }

  /** Out of line, so the common path of {@link checkSlot} stays one compare and inlines. */
  private checkNewSlot(slot: number): void {
    const used = Atomics.load(this.control, CONTROL_SLOTS_USED);
    if (slot >>> 0 !== slot || slot >= used) {
      throw new InvalidInputError('slot', `an integer in [0, ${used}) (the slots in use)`, slot);
    }
    this.seenUsed = used;
    // Published since the views were made: the writer grew the buffer before publishing it.
    if (used > this.viewSlots) this.mapSlots();
  }
}

/** The slots of one {@link SlotReader.velocities} call, kept for the thread's life. */
let slotScratch = new Int32Array(1024);

function scratchSlots(n: number): Int32Array {
  if (slotScratch.length < n) slotScratch = new Int32Array(Math.max(n, 2 * slotScratch.length));
  return slotScratch;
}

/** Where the touch pass of {@link SlotReader.velocities} leaves its sum. */
let _touchSink = 0;
