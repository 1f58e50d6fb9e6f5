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
/// <reference lib="es2024.sharedmemory" />
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
import { OrderWriter, SignalOrder, createOrderArena, orderControlInts, orderDirtyBytes, orderEntryBytes, type OrderArena } from './order.js';

export { SLOT_BYTES } from './layout.js';
export { SignalOrder, type OrderArena } from './order.js';

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
 * {@link SignalStore.attach}. `index` and `slots` are growable buffers reserved up to
 * `maxOrdinals * kinds * 4` and `maxSlots * SLOT_BYTES` bytes (or fixed buffers of exactly that
 * size where the platform cannot reserve that much growable memory); growth is visible to every
 * thread holding the arena, because it is the same memory.
 */
export interface SignalArena {
  readonly control: SharedArrayBuffer;
  readonly index: SharedArrayBuffer;
  readonly slots: SharedArrayBuffer;
  /** Number of signal kinds; the `index` row width. */
  readonly kinds: number;
  readonly maxOrdinals: number;
  readonly maxSlots: number;
  /**
   * The slot orders (by decay key and by newest event) that let `popular` and `trending` skip the
   * scan; see `order.ts`. Derived from the slots, never checkpointed.
   */
  readonly order: OrderArena;
}

/** Options of {@link SignalStore.create}. */
export interface SignalStoreOptions {
  /** The schema's signal kinds; a kind's index in this array is its `kind` number. */
  kinds: readonly SignalKindSpec[];
  /** Ordinals are `0..maxOrdinals-1`. */
  maxOrdinals: number;
  /** Maximum number of (ordinal, kind) pairs with state: the reservation the slots grow into. */
  maxSlots: number;
  /**
   * `'grow'` reserves address space for the maximum and commits memory as slots are taken;
   * `'fixed'` allocates the maximum up front, which counts in full against the host's overcommit
   * limit (kept to compare the two).
   * @default 'grow'
   */
  reservation?: 'grow' | 'fixed';
}

const LN2 = Math.LN2;
const MINUTES_1H = 60;
const HOURS_24H = 24;
const HOURS_7D = 168;
const SECONDS_1H = 3_600;
const SECONDS_24H = 86_400;
const SECONDS_7D = 604_800;

const CAPACITY_HINT = 'raise the capacity.signalSlots builder option';
const ORDINAL_HINT = 'raise the capacity.items builder option';

/**
 * Growth steps. Slots come in whole checkpoint rows (64 slots = 64 KiB), starting at 16 rows
 * (1 MiB) and doubling, so a store that reaches 4 Mi slots grows 12 times; the index starts at
 * 64 KiB. Growing only commits pages (nothing is copied and views stay valid), and committed pages
 * are resident only once written, so doubling costs no memory beyond the slots in use.
 */
const SLOT_STEP = 64;
const INITIAL_SLOTS = 16 * SLOT_STEP;
const INDEX_STEP = 16_384;

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
function seqBegin(i32: Int32Array, b: number): number {
  for (;;) {
    const seq = Atomics.load(i32, b + I32_SEQ);
    if ((seq & 1) === 0) return seq;
  }
}

/** See {@link seqBegin}. */
function seqUnchanged(i32: Int32Array, b: number, seq: number): boolean {
  return Atomics.load(i32, b + I32_SEQ) === seq;
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
 * A buffer of `maxBytes` at most, `initialBytes` of it usable now. Falls back to a fixed buffer of
 * the maximum when the platform refuses a growable reservation that large (Node 20 caps
 * `maxByteLength` at 4 GiB).
 */
function reserveBuffer(initialBytes: number, maxBytes: number, reservation: 'grow' | 'fixed'): SharedArrayBuffer {
  if (reservation === 'grow' && initialBytes < maxBytes) {
    try {
      return new SharedArrayBuffer(initialBytes, { maxByteLength: maxBytes });
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
    }
  }
  return new SharedArrayBuffer(maxBytes);
}

/** The next size of a growing buffer, in elements: at least `need`, doubling, in whole steps, capped. */
function nextSize(current: number, need: number, step: number, max: number): number {
  const target = Math.max(need, current * 2);
  return Math.min(max, Math.ceil(target / step) * step);
}

/** A fixed-length view of the index as long as the buffer is now. */
function indexView(buf: SharedArrayBuffer): Int32Array {
  return new Int32Array(buf, 0, buf.byteLength / 4);
}

/** The maximum a buffer can reach: its reservation if growable, else its length. */
function maxBytesOf(buf: SharedArrayBuffer): number {
  return buf.growable ? buf.maxByteLength : buf.byteLength;
}

/**
 * Per-(ordinal, kind) engagement state in shared memory: decayed score, all-time count, minute and
 * hour rings for windowed counts. Create it with {@link SignalStore.create} on the writer thread
 * and open it in workers with {@link SignalStore.attach}.
 *
 * The arena grows on demand up to its reservation. A slot can be taken ahead of its first event
 * ({@link reserve}, at admission); until that event is applied the slot holds no state, and every
 * read treats it as absent.
 */
export class SignalStore {
  private readonly control: Int32Array;
  // Fixed-length views, made again when a slot or entry past them is met: Node 20 runs element
  // access through length-tracking views about 10× slower (`npm run bench:store`).
  private index: Int32Array;
  private i32: Int32Array;
  private f64: Float64Array;
  /** Slots the views cover: the buffer's length when they were made. */
  private viewSlots = 0;
  /** The highest published slot count this instance has seen; never above `viewSlots`. */
  private seenUsed = 0;
  private readonly lambdas: Float64Array;
  private readonly kindCount: number;
  private readonly ordinalCount: number;
  private readonly slotCapacity: number;
  private readonly writable: boolean;
  private readonly sharedArena: SignalArena;
  private readonly orderReader: SignalOrder;
  private readonly orderWriter: OrderWriter | null;

  private constructor(arena: SignalArena, lambdas: Float64Array, writable: boolean) {
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
    this.writable = writable;
    this.orderReader = new SignalOrder(arena.order, arena.kinds);
    this.orderWriter = writable ? new OrderWriter(arena.order, arena.kinds, lambdas) : null;
  }

  /**
   * Reserves the arena for up to `maxSlots` slots and an index of up to `maxOrdinals * kinds`
   * entries, and commits a small first part of each. Call on the writer thread; that instance is
   * the only one that may call {@link reserve}, {@link apply} and {@link importState}.
   *
   * @throws InvalidInputError for a bad kind spec or a non-positive capacity.
   * @throws CapacityError if the platform cannot reserve that much shared memory.
   */
  static create(options: SignalStoreOptions): SignalStore {
    const lambdas = checkKinds(options.kinds);
    checkCount('maxOrdinals', options.maxOrdinals);
    checkCount('maxSlots', options.maxSlots);
    const reservation = options.reservation ?? 'grow';
    if (reservation !== 'grow' && reservation !== 'fixed') {
      throw new InvalidInputError('reservation', "'grow' or 'fixed'", reservation);
    }
    const kinds = options.kinds.length;
    const { maxOrdinals, maxSlots } = options;
    let control: SharedArrayBuffer;
    let index: SharedArrayBuffer;
    let slots: SharedArrayBuffer;
    let order: OrderArena;
    try {
      control = new SharedArrayBuffer(CONTROL_INT32 * 4);
      const entries = maxOrdinals * kinds;
      index = reserveBuffer(Math.min(entries, INDEX_STEP) * 4, entries * 4, reservation);
      slots = reserveBuffer(Math.min(maxSlots, INITIAL_SLOTS) * SLOT_BYTES, maxSlots * SLOT_BYTES, reservation);
      order = createOrderArena(kinds, maxSlots, INITIAL_SLOTS, (initial, max) => reserveBuffer(initial, max, reservation));
    } catch (err) {
      if (err instanceof RangeError) {
        throw new CapacityError(
          'signal state',
          maxSlots,
          `could not reserve ${maxSlots} slots for ${maxOrdinals} ordinals (${err.message}); lower capacity.signalSlots or capacity.items`,
        );
      }
      throw err;
    }
    const arena: SignalArena = Object.freeze({ control, index, slots, kinds, maxOrdinals, maxSlots, order });
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
      if (!(buf instanceof SharedArrayBuffer) || maxBytesOf(buf) !== bytes) {
        throw new InvalidInputError(`arena.${field}`, `a SharedArrayBuffer reserving ${bytes} bytes`, buf);
      }
    };
    expect('control', CONTROL_INT32 * 4);
    expect('index', arena.maxOrdinals * arena.kinds * 4);
    expect('slots', arena.maxSlots * SLOT_BYTES);
    const order = arena.order as OrderArena | undefined;
    const sab = (field: string, buf: unknown, bytes: number): SharedArrayBuffer => {
      if (!(buf instanceof SharedArrayBuffer) || maxBytesOf(buf) !== bytes) {
        throw new InvalidInputError(`arena.order.${field}`, `a SharedArrayBuffer reserving ${bytes} bytes`, buf);
      }
      return buf;
    };
    if (typeof order !== 'object' || order === null || !Array.isArray(order.entries) || !Array.isArray(order.dirty)) {
      throw new InvalidInputError('arena.order', 'the signal order buffers', order);
    }
    const orderCopy: OrderArena = Object.freeze({
      control: sab('control', order.control, orderControlInts(arena.kinds) * 4),
      entries: Object.freeze([0, 1].map((b) => sab(`entries[${b}]`, order.entries[b], orderEntryBytes(arena.maxSlots)))) as unknown as OrderArena['entries'],
      dirty: Object.freeze([0, 1].map((b) => sab(`dirty[${b}]`, order.dirty[b], orderDirtyBytes(arena.maxSlots)))) as unknown as OrderArena['dirty'],
    });
    const copy: SignalArena = Object.freeze({
      control: arena.control,
      index: arena.index,
      slots: arena.slots,
      kinds: arena.kinds,
      maxOrdinals: arena.maxOrdinals,
      maxSlots: arena.maxSlots,
      order: orderCopy,
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

  /** Slot capacity: the reservation the slots grow into. */
  get maxSlots(): number {
    return this.slotCapacity;
  }

  // ---------------------------------------------------------------------------------------------
  // Writer

  /**
   * Whether `ordinal` is inside the ordinal capacity, so an item may be given it; check before
   * handing out a new ordinal. The index grows when a slot is reserved for the ordinal.
   */
  canHoldOrdinal(ordinal: number): boolean {
    return Number.isInteger(ordinal) && ordinal >= 0 && ordinal < this.ordinalCount;
  }

  /**
   * Gives each pair `(ordinals[i], kinds[i])`, `i < count`, that has no slot a slot now, growing
   * the arena if needed: all of them or none. Afterwards {@link apply} on any of these pairs cannot
   * fail for capacity. A pair that already has a slot (reserved or written) needs nothing and never
   * fails. Writer thread only.
   *
   * A reserved slot holds no state until its first event is applied, and may stay that way (its
   * batch never committed): reads, scans and checkpoints treat it as absent.
   *
   * @throws InvalidInputError for a count, ordinal or kind that is not a valid index. Nothing is reserved.
   * @throws CapacityError `'item ids'` for an ordinal at or past `maxOrdinals`, `'signal state'` when
   *   the new pairs do not all fit in `maxSlots` (or the platform refuses to commit the memory).
   *   Nothing is reserved.
   */
  reserve(ordinals: ArrayLike<number>, kinds: ArrayLike<number>, count: number): void {
    this.requireWriter('reserve signal slots');
    if (!Number.isInteger(count) || count < 0 || count > ordinals.length || count > kinds.length) {
      throw new InvalidInputError('count', `an integer in [0, ${Math.min(ordinals.length, kinds.length)}]`, count);
    }
    const index = this.index;
    const kindCount = this.kindCount;
    // Pass 1 checks everything and counts the pairs that need a slot, so a refusal leaves no trace.
    let fresh = 0;
    let topIx = -1;
    let pending: Set<number> | null = null;
    for (let i = 0; i < count; i++) {
      const ordinal = ordinals[i];
      const kind = kinds[i];
      if (!Number.isInteger(ordinal) || ordinal < 0) {
        throw new InvalidInputError(`ordinals[${i}]`, 'a non-negative integer', ordinal);
      }
      if (ordinal >= this.ordinalCount) throw new CapacityError('item ids', this.ordinalCount, ORDINAL_HINT);
      if (!Number.isInteger(kind) || kind < 0 || kind >= kindCount) {
        throw new InvalidInputError(`kinds[${i}]`, `an integer in [0, ${kindCount})`, kind);
      }
      const ix = ordinal * kindCount + kind;
      if (ix < index.length && index[ix] !== 0) continue;
      // A batch may name a new pair more than once; it takes one slot.
      if (count > 1) {
        pending ??= new Set();
        if (pending.has(ix)) continue;
        pending.add(ix);
      }
      fresh++;
      if (ix > topIx) topIx = ix;
    }
    if (fresh === 0) return;
    const used = this.control[CONTROL_SLOTS_USED];
    if (used + fresh > this.slotCapacity) {
      throw new CapacityError(
        'signal state',
        this.slotCapacity,
        `${fresh} new (item, kind) pairs need slots and ${this.slotCapacity - used} are free; ${CAPACITY_HINT}`,
      );
    }
    // Growth commits memory before anything is written; if the platform refuses, nothing was taken.
    this.growSlots(used + fresh);
    this.growIndex(topIx + 1);
    const grown = this.index;
    for (let i = 0; i < count; i++) {
      const ordinal = ordinals[i];
      const kind = kinds[i];
      const ix = ordinal * kindCount + kind;
      if (grown[ix] !== 0) continue;
      const slot = this.control[CONTROL_SLOTS_USED];
      this.claim(slot, ordinal, kind);
      this.publish(slot, ix);
    }
  }

  /**
   * Records one event of `kind` on item `ordinal` with `weight` at `atMs`. The pair's slot is the
   * one {@link reserve} gave it, or is allocated now (growing the arena) on its first event. Writer
   * thread only. Events may arrive out of time order: the score takes them pre-decayed and the
   * rings count them if they still fall inside.
   *
   * @throws InvalidInputError for an ordinal or kind out of range, a non-finite weight or a time
   *   outside `[0, 2^31 minutes)`. Nothing is written.
   * @throws CapacityError when the pair has no slot and all `maxSlots` are in use.
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
    const entry = ix < this.index.length ? this.index[ix] : 0;
    if (entry !== 0) {
      this.record(entry - 1, kind, weight, atMs);
      this.orderWriter!.touch(entry - 1, this.i32, this.f64);
      return;
    }

    const slot = this.control[CONTROL_SLOTS_USED];
    if (slot >= this.slotCapacity) {
      throw new CapacityError('signal state', this.slotCapacity, CAPACITY_HINT);
    }
    this.growSlots(slot + 1);
    this.growIndex(ix + 1);
    this.claim(slot, ordinal, kind);
    // The first event goes in before the slot is published: a slot allocated here is never seen empty.
    this.record(slot, kind, weight, atMs);
    this.publish(slot, ix);
    this.orderWriter!.touch(slot, this.i32, this.f64);
  }

  /** Writes a new slot's header. The slot's memory is still zero: no events, seq 0. */
  private claim(slot: number, ordinal: number, kind: number): void {
    const b = slot * SLOT_INT32;
    this.i32[b + I32_ORDINAL] = ordinal;
    this.i32[b + I32_KIND] = kind;
  }

  /** Publishes slot `slot` (the next one) as holding index entry `ix`, in the order readers rely on. */
  private publish(slot: number, ix: number): void {
    Atomics.store(this.control, CONTROL_SLOTS_USED, slot + 1);
    Atomics.store(this.index, ix, slot + 1);
  }

  /**
   * Makes the slots view at least `slots` long. Called before a slot is published, so a reader
   * that sees a slot count also sees a buffer that holds it.
   *
   * @throws CapacityError if the platform refuses to commit the memory.
   */
  private growSlots(slots: number): void {
    const buf = this.sharedArena.slots;
    if (slots * SLOT_BYTES <= buf.byteLength) return;
    const next = nextSize(buf.byteLength / SLOT_BYTES, slots, SLOT_STEP, this.slotCapacity);
    this.grow(buf, next * SLOT_BYTES, 'signal state', this.slotCapacity, CAPACITY_HINT);
    this.mapSlots();
  }

  /** Makes the index at least `entries` long; see {@link growSlots}. */
  private growIndex(entries: number): void {
    const buf = this.sharedArena.index;
    if (entries * 4 <= buf.byteLength) return;
    const max = this.ordinalCount * this.kindCount;
    const next = nextSize(buf.byteLength / 4, entries, INDEX_STEP, max);
    this.grow(buf, next * 4, 'item ids', this.ordinalCount, ORDINAL_HINT);
    this.index = indexView(buf);
  }

  /** Makes the slot views cover the whole buffer as it is now. */
  private mapSlots(): void {
    const buf = this.sharedArena.slots;
    const slots = Math.floor(buf.byteLength / SLOT_BYTES);
    this.i32 = new Int32Array(buf, 0, slots * SLOT_INT32);
    this.f64 = new Float64Array(buf, 0, slots * SLOT_F64);
    this.viewSlots = slots;
  }

  private grow(buf: SharedArrayBuffer, bytes: number, resource: string, limit: number, hint: string): void {
    try {
      buf.grow(bytes);
    } catch (err) {
      if (err instanceof RangeError) {
        throw new CapacityError(resource, limit, `could not grow the signal state to ${bytes} bytes (${err.message}); ${hint}`);
      }
      throw err;
    }
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
  // ---------------------------------------------------------------------------------------------
  // Readers (any thread)

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
    const b = slot * SLOT_INT32;
    const fb = slot * SLOT_F64;
    let seq: number;
    let score: number;
    let tRef: number;
    do {
      seq = seqBegin(i32, b);
      score = f64[fb + F64_SCORE];
      tRef = f64[fb + F64_TREF];
    } while (!seqUnchanged(i32, b, seq));
    const dt = nowMs - tRef;
    return dt > 0 ? score * Math.exp(-this.lambdas[i32[b + I32_KIND]] * dt) : score;
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
    let seq: number;
    let sum: number;
    // One branch per window with the ring's constants written out: ringSum's modulo by a constant
    // compiles to a multiply, by a variable to a division.
    if (window === '1h') {
      const now = Math.floor(nowMs / MS_PER_MINUTE);
      do {
        seq = seqBegin(i32, b);
        sum = ringSum(i32, b + I32_MINUTE_BUCKETS, MINUTE_BUCKETS, i32[b + I32_MINUTE_HEAD], now, MINUTES_1H);
      } while (!seqUnchanged(i32, b, seq));
      return sum;
    }
    const span = window === '24h' ? HOURS_24H : window === '7d' ? HOURS_7D : -1;
    if (span < 0) throw new InvalidInputError('window', "one of '1h', '24h', '7d', 'all'", window);
    const now = Math.floor(nowMs / MS_PER_HOUR);
    do {
      seq = seqBegin(i32, b);
      sum = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, i32[b + I32_HOUR_HEAD], now, span);
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
    const nowMinute = Math.floor(nowMs / MS_PER_MINUTE);
    const nowHour = Math.floor(nowMs / MS_PER_HOUR);
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
      score = f64[fb + F64_SCORE];
      tRef = f64[fb + F64_TREF];
      count = f64[fb + F64_COUNT];
      if (sum1h) c1h = ringSum(i32, b + I32_MINUTE_BUCKETS, MINUTE_BUCKETS, i32[b + I32_MINUTE_HEAD], nowMinute, MINUTES_1H);
      if (need24h || sum7d) {
        const head = i32[b + I32_HOUR_HEAD];
        if (need24h) c24h = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, head, nowHour, HOURS_24H);
        if (sum7d) c7d = ringSum(i32, b + I32_HOUR_BUCKETS, HOUR_BUCKETS, head, nowHour, HOURS_7D);
      }
    } while (!seqUnchanged(i32, b, seq));
    const dt = nowMs - tRef;
    const lambda = this.lambdas[i32[b + I32_KIND]];
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
      value = f64[at];
    } while (!seqUnchanged(i32, b, seq));
    return value;
  }

  // ---------------------------------------------------------------------------------------------
  // Checkpoints (writer thread)

  /**
   * Loads a checkpoint (the first `slotsUsed() * SLOT_BYTES` bytes of an arena's `slots`, byte for
   * byte) into this store, which must be freshly created and empty. `kindRemap[oldKind]` gives each
   * old kind's new index, or -1 to drop that kind's slots (the remaining slots are compacted);
   * without it kinds keep their indices. A slot with no events (reserved, never written) is kept as
   * the same empty reservation. All checks run before anything is written.
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
    let topIx = -1;
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
      if (ix > topIx) topIx = ix;
      kept++;
    }
    if (kept > this.slotCapacity) {
      throw new CapacityError('signal state', this.slotCapacity, CAPACITY_HINT);
    }
    this.growSlots(kept);
    this.growIndex(topIx + 1);

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
    this.orderWriter!.rebuildAll(kept, this.i32, this.f64);
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
