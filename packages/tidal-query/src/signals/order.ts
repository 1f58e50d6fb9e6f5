/// <reference lib="es2024.sharedmemory" />
/**
 * Two orders over the signal slots, kept by the writer and read by the query workers, so that
 * `popular` and `trending` visit a few slots instead of scanning all of them:
 *
 * - **by forward-decay key**, per kind: `key = ln S + λ·tRef` for a slot whose decayed score `S`
 *   (referenced to `tRef`) is positive. Its value at any `now ≥ tRef` is `exp(key − λ·now)`, so all
 *   slots of one kind decay by the same factor and their order only changes when an event arrives.
 *   Before `tRef` the store does not grow a score, so `exp(key − λ·now)` is then an upper bound, not
 *   the value: readers use keys as bounds and read the values from the slots. A slot whose `S ≤ 0`
 *   (negative weights) has no logarithm: it gets the key `−∞`, sorts after every positive one (its
 *   value is ≤ 0 at every time) and the non-positive ones are in slot order among themselves, which
 *   a reader that needs them must visit all of.
 * - **by newest event time**, per kind: a slot with an event inside a window has its newest event
 *   inside it, so the slots active in a window are a prefix of this order.
 * - **by count key**, per kind: `ckey = ln C + μ·cRef`, where `C = Σ exp(−μ·(cRef − tᵢ))` over the
 *   slot's events, each counted once whatever its weight, and μ = 1 / {@link COUNT_KEY_MS}. So
 *   `exp(ckey − μ·start) = Σ exp(μ·(tᵢ − start))` bounds the events at or after `start`, for any
 *   `start` and any clock: every such event adds at least 1, every other one more than 0. With
 *   `start` an hour back (the 1h window), a slot's bound is its events in the window, amplified at
 *   most e-fold, plus its earlier events, decayed e-fold per hour: on the bench corpus about three
 *   times its count in the window. A threshold walk down this order finds the slots with the most
 *   events in the last hour after visiting a few of them (`candidates/trending.ts`). The writer
 *   keeps C per slot in its own memory (it is not in the slot); after an import it starts from the
 *   slot's minute ring (see {@link OrderWriter.rebuildAll}).
 *
 * Layout and concurrency. The orders are rebuilt in generations: a rebuild merges the previous
 * order (minus the slots changed since) with the changed slots, sorted, into the other of two
 * entry buffers, then publishes it. Between rebuilds every changed slot is appended once to the
 * published buffer's *dirty list*; a reader visits the dirty slots with their current values and
 * walks the published order for the rest, whose keys are still exact because those slots did not
 * change. A rebuild runs when the dirty list reaches {@link dirtyLimit}: it costs O(slots + d log d)
 * on the writer every d changed slots, and a reader O(d) at most on top of what it walks.
 *
 * `control` (Int32): `[GEN]` counts rebuild starts and ends (odd while one is running); published
 * generation `q = GEN >> 1` lives in buffer `q & 1`. Per buffer, a block of `kinds + 2` Int32:
 * the dirty list length, then the start of each kind's range and the end of the last. The writer
 * writes only into the other buffer while readers read one, so a reader that began at `GEN = g`
 * read a stable buffer as long as `GEN < 2·(g >> 1) + 3` when it ends (the next rebuild into its
 * buffer has not begun); otherwise it starts over. Entries are 6 Float64: key, its slot, newest
 * time, its slot, count key, its slot (the three orders side by side). Nothing here is in a
 * checkpoint: after an import the orders are rebuilt from the slots.
 */
import { F64_COUNT, F64_NEWEST, F64_SCORE, F64_TREF, I32_KIND, SLOT_F64, SLOT_INT32 } from './layout.js';

/** The shared memory of the orders, posted to workers inside the signal arena. */
export interface OrderArena {
  readonly control: SharedArrayBuffer;
  readonly entries: readonly [SharedArrayBuffer, SharedArrayBuffer];
  readonly dirty: readonly [SharedArrayBuffer, SharedArrayBuffer];
}

const GEN = 0;
/** Set (for good) when the writer could not grow an entry buffer: readers then scan. */
const DISABLED = 1;
/**
 * Events on slots already on the dirty list (wrapping Int32): the one change a reader could not
 * otherwise see between two rebuilds, as neither the dirty list nor the slot count moves.
 */
const REDIRTIED = 2;
const BLOCK_BASE = 16;
/** Float64 per entry: decay key, its slot, newest time, its slot, count key, its slot. */
export const ENTRY_F64 = 6;
/**
 * The count key's e-folding time (1 / μ): the 1h window's length. On the bench corpus at 1 000 000
 * items (99 813 view slots, 13 433 of them active in the last hour), the slots whose bound reaches
 * the 20th (100th) best count in the hour, summed from every event's time: 46 (228) with 1 h, 65
 * (338) with 30 min, 44 (226) with 2 h. The decay key would bound them too (65, 392 with the kind's
 * 6 h half-life), but only through the events' weights, which may be any number.
 */
export const COUNT_KEY_MS = 3_600_000;
/** μ: the count key's rate per millisecond. */
export const COUNT_RATE = 1 / COUNT_KEY_MS;
const ENTRY_BYTES = ENTRY_F64 * 8;
/** Dirty list capacity per buffer: the most changed slots a reader may have to visit. */
export const DIRTY_CAP = 4096;
const DIRTY_MIN = 64;
const ENTRY_STEP = 1024;

/** One of the two entry buffers and its dirty list. */
type Half = 0 | 1;

/** The buffer published generation `q` lives in. */
function halfOf(q: number): Half {
  return (q & 1) as Half;
}

export function orderControlInts(kinds: number): number {
  return BLOCK_BASE + 2 * (kinds + 2);
}

export function orderEntryBytes(maxSlots: number): number {
  return maxSlots * ENTRY_BYTES;
}

export function orderDirtyBytes(maxSlots: number): number {
  return Math.min(DIRTY_CAP, maxSlots) * 4;
}

/**
 * Changed slots that trigger a rebuild, for `indexed` slots in the orders: about 2·√n (a rebuild
 * moves n entries every d changes, a reader visits up to d dirty slots; 2·√n keeps both near √n
 * per operation), between 64 and {@link DIRTY_CAP}. At 15 000 slots: 245; at 1.5 M: 2 449.
 */
export function dirtyLimit(indexed: number, cap: number): number {
  return Math.min(cap, Math.max(DIRTY_MIN, Math.ceil(2 * Math.sqrt(indexed))));
}

/** Allocates the order buffers; `reserve` makes a buffer of `initialBytes` growable to `maxBytes`. */
export function createOrderArena(
  kinds: number,
  maxSlots: number,
  initialSlots: number,
  reserve: (initialBytes: number, maxBytes: number) => SharedArrayBuffer,
): OrderArena {
  const control = new SharedArrayBuffer(orderControlInts(kinds) * 4);
  const entry = (): SharedArrayBuffer => reserve(Math.min(maxSlots, initialSlots) * ENTRY_BYTES, orderEntryBytes(maxSlots));
  const dirty = (): SharedArrayBuffer => new SharedArrayBuffer(orderDirtyBytes(maxSlots));
  return Object.freeze({ control, entries: Object.freeze([entry(), entry()] as const), dirty: Object.freeze([dirty(), dirty()] as const) });
}

/**
 * The reading side of the orders (any thread). Use as: {@link begin}, read ranges, entries and the
 * dirty list, then {@link stillValid}; if it says no, the entries may have been overwritten while
 * they were read and the reading must start over.
 */
export class SignalOrder {
  readonly #arena: OrderArena;
  readonly #control: Int32Array;
  readonly #kinds: number;
  readonly #views: [Float64Array, Float64Array];
  readonly #dirtyViews: [Int32Array, Int32Array];
  #q = 0;
  #entries: Float64Array;
  #dirty: Int32Array;
  #dirtyLen = 0;
  readonly #starts: Int32Array;

  constructor(arena: OrderArena, kinds: number) {
    this.#arena = arena;
    this.#control = new Int32Array(arena.control);
    this.#kinds = kinds;
    this.#views = [entryView(arena.entries[0]), entryView(arena.entries[1])];
    this.#dirtyViews = [new Int32Array(arena.dirty[0]), new Int32Array(arena.dirty[1])];
    this.#entries = this.#views[0];
    this.#dirty = this.#dirtyViews[0];
    this.#starts = new Int32Array(kinds + 1);
  }

  /**
   * Takes the published generation: ranges, entries and dirty list as of now. False when the orders
   * are switched off (the platform refused them memory): scan instead.
   */
  begin(): boolean {
    if (Atomics.load(this.#control, DISABLED) !== 0) return false;
    const g = Atomics.load(this.#control, GEN);
    this.#q = g >> 1;
    const buf = halfOf(this.#q);
    const block = BLOCK_BASE + buf * (this.#kinds + 2);
    this.#dirtyLen = Atomics.load(this.#control, block);
    for (let k = 0; k <= this.#kinds; k++) this.#starts[k] = Atomics.load(this.#control, block + 1 + k);
    const need = this.#starts[this.#kinds]! * ENTRY_F64;
    if (this.#views[buf].length < need) this.#views[buf] = entryView(this.#arena.entries[buf]);
    this.#entries = this.#views[buf];
    this.#dirty = this.#dirtyViews[buf];
    return true;
  }

  /** Whether what was read since {@link begin} came from a buffer the writer left alone. */
  stillValid(): boolean {
    return Atomics.load(this.#control, GEN) < 2 * this.#q + 3;
  }

  /** First entry of kind `k`'s range. */
  start(k: number): number {
    return this.#starts[k]!;
  }

  /** One past the last entry of kind `k`'s range. */
  end(k: number): number {
    return this.#starts[k + 1]!;
  }

  /** The decay key at position `i` of the key order (descending; `−∞` for a score ≤ 0). */
  keyAt(i: number): number {
    return this.#entries[i * ENTRY_F64]!;
  }

  /** The slot at position `i` of the key order (not yet checked: see {@link stillValid}). */
  keySlotAt(i: number): number {
    return this.#entries[i * ENTRY_F64 + 1]!;
  }

  /** The newest event time at position `i` of the recency order (descending). */
  newestAt(i: number): number {
    return this.#entries[i * ENTRY_F64 + 2]!;
  }

  /** The slot at position `i` of the recency order. */
  newestSlotAt(i: number): number {
    return this.#entries[i * ENTRY_F64 + 3]!;
  }

  /** The count key at position `i` of the count order (descending; see the module comment). */
  countKeyAt(i: number): number {
    return this.#entries[i * ENTRY_F64 + 4]!;
  }

  /** The slot at position `i` of the count order. */
  countSlotAt(i: number): number {
    return this.#entries[i * ENTRY_F64 + 5]!;
  }

  /**
   * How many entries of kind `k`'s recency range have their newest event at or after `atMs`: the
   * length of the prefix a window starting at `atMs` visits, found by binary search.
   */
  newerThan(k: number, atMs: number): number {
    let lo = this.#starts[k]!;
    let hi = this.#starts[k + 1]!;
    const first = lo;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#entries[mid * ENTRY_F64 + 2]! >= atMs) lo = mid + 1;
      else hi = mid;
    }
    return lo - first;
  }

  /** Slots changed since the published generation was built, each once. */
  get dirtyCount(): number {
    return this.#dirtyLen;
  }

  dirtySlot(j: number): number {
    return this.#dirty[j]!;
  }

  /**
   * Events on slots already dirty, counted (wrapping): with {@link dirtyCount} and the generation,
   * a state a reader keeps something for has moved when any of them did.
   */
  get redirtied(): number {
    return Atomics.load(this.#control, REDIRTIED);
  }

  /** Rebuilds published so far (for tests and benchmarks). */
  get generation(): number {
    return Atomics.load(this.#control, GEN) >> 1;
  }
}

/**
 * The writing side (the store's writer thread only): marks changed slots and rebuilds. Reads slot
 * values straight from the arena views it is given, without the seqlock: it is the only writer.
 */
export class OrderWriter {
  readonly #arena: OrderArena;
  readonly #control: Int32Array;
  readonly #kinds: number;
  readonly #lambdas: Float64Array;
  readonly #dirtyCap: number;
  readonly #views: [Float64Array, Float64Array];
  readonly #dirtyViews: [Int32Array, Int32Array];
  /** `stamp[slot] === this.#stamp` when the slot is on the current dirty list. */
  #stampOf = new Int32Array(1024);
  /** Per slot, the count key's C and its reference time (see the module comment); C = 0: none yet. */
  #count = new Float64Array(1024);
  #countRef = new Float64Array(1024);
  #stamp = 1;
  #indexed = 0;
  #limit: number;

  constructor(arena: OrderArena, kinds: number, lambdas: Float64Array) {
    this.#arena = arena;
    this.#control = new Int32Array(arena.control);
    this.#kinds = kinds;
    this.#lambdas = lambdas;
    this.#dirtyCap = arena.dirty[0].byteLength / 4;
    this.#views = [entryView(arena.entries[0]), entryView(arena.entries[1])];
    this.#dirtyViews = [new Int32Array(arena.dirty[0]), new Int32Array(arena.dirty[1])];
    this.#limit = dirtyLimit(0, this.#dirtyCap);
  }

  /** Slots in the published orders. */
  get indexed(): number {
    return this.#indexed;
  }

  /**
   * Records that `slot` got an event at `atMs` (its first or a later one), rebuilding the orders
   * when the dirty list is full. `i32`/`f64` are the writer's current views of the slots.
   */
  touch(slot: number, atMs: number, i32: Int32Array, f64: Float64Array): void {
    if (this.#control[DISABLED] !== 0) return;
    if (slot >= this.#stampOf.length) this.#growSlots(slot);
    this.#countEvent(slot, atMs);
    if (this.#stampOf[slot] === this.#stamp) {
      Atomics.add(this.#control, REDIRTIED, 1);
      return;
    }
    this.#stampOf[slot] = this.#stamp;
    const buf = halfOf(this.#published());
    const block = this.#block(buf);
    const len = this.#control[block]!;
    this.#dirtyViews[buf][len] = slot;
    Atomics.store(this.#control, block, len + 1);
    if (len + 1 >= this.#limit) this.rebuild(i32, f64);
  }

  /** Merges the dirty slots into the orders and publishes the result. */
  rebuild(i32: Int32Array, f64: Float64Array): void {
    const cur = halfOf(this.#published());
    const block = this.#block(cur);
    const len = this.#control[block]!;
    this.#merge(this.#dirtyViews[cur].slice(0, len), true, i32, f64);
  }

  /**
   * Drops the orders and builds them again from every slot of `0..used-1` that has events (after
   * a checkpoint is imported). The events' times are gone, so each count key starts from what a
   * 1h window can still count: a 1h count reads the minute ring alone, which holds the events of
   * the 60 minutes up to the newest one N and nothing older, whatever the clock. So C starts as
   * `hourAt(slot, N)`, those events each weighing at most 1 referenced to N; the older ones can
   * never count again. Later events add to it as they arrive.
   */
  rebuildAll(used: number, i32: Int32Array, f64: Float64Array, hourAt: (slot: number, atMs: number) => number): void {
    if (this.#control[DISABLED] !== 0) return;
    const slots: number[] = [];
    if (used > 0 && used - 1 >= this.#stampOf.length) this.#growSlots(used - 1);
    for (let s = 0; s < used; s++) {
      const fb = s * SLOT_F64;
      const n = f64[fb + F64_COUNT]!;
      if (n === 0) continue;
      slots.push(s);
      const newest = f64[fb + F64_NEWEST]!;
      // At least a hair above 0, so the slot keeps a finite key (it is visited only if that passes).
      this.#count[s] = Math.max(hourAt(s, newest), Number.MIN_VALUE);
      this.#countRef[s] = newest;
    }
    this.#merge(Int32Array.from(slots), false, i32, f64);
  }

  /** Adds an event at `atMs` to the slot's count key (a late event decayed to the reference). */
  #countEvent(slot: number, atMs: number): void {
    const c = this.#count[slot]!;
    const ref = this.#countRef[slot]!;
    if (c === 0) {
      this.#count[slot] = 1;
      this.#countRef[slot] = atMs;
    } else if (atMs >= ref) {
      this.#count[slot] = c * Math.exp(-COUNT_RATE * (atMs - ref)) + 1;
      this.#countRef[slot] = atMs;
    } else {
      this.#count[slot] = c + Math.exp(-COUNT_RATE * (ref - atMs));
    }
  }

  /** Grows the per-slot writer arrays to hold `slot`. */
  #growSlots(slot: number): void {
    let n = this.#stampOf.length;
    while (n <= slot) n *= 2;
    const stamps = new Int32Array(n);
    stamps.set(this.#stampOf);
    this.#stampOf = stamps;
    const count = new Float64Array(n);
    count.set(this.#count);
    this.#count = count;
    const ref = new Float64Array(n);
    ref.set(this.#countRef);
    this.#countRef = ref;
  }

  #published(): number {
    return this.#control[GEN]! >> 1;
  }

  #block(buf: number): number {
    return BLOCK_BASE + buf * (this.#kinds + 2);
  }

  #merge(changed: Int32Array, keepOld: boolean, i32: Int32Array, f64: Float64Array): void {
    const kinds = this.#kinds;
    const g = this.#control[GEN]!;
    const cur = halfOf(g >> 1);
    const nxt: Half = cur === 0 ? 1 : 0;
    const curBlock = this.#block(cur);
    const nxtBlock = this.#block(nxt);

    const oldTotal = keepOld ? this.#control[curBlock + 1 + kinds]! : 0;
    try {
      this.#ensure(nxt, oldTotal + changed.length);
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
      // Memory the slots themselves could still get: the queries lose their shortcut, not their answers.
      Atomics.store(this.#control, DISABLED, 1);
      return;
    }
    Atomics.store(this.#control, GEN, g + 1);
    const src = this.#views[cur];
    const dst = this.#views[nxt];
    const stampOf = this.#stampOf;
    const stamp = this.#stamp;

    // The changed slots by kind, with their keys and newest times.
    const byKind: number[][] = Array.from({ length: kinds }, () => []);
    for (let j = 0; j < changed.length; j++) byKind[i32[changed[j]! * SLOT_INT32 + I32_KIND]!]!.push(changed[j]!);
    const starts = new Int32Array(kinds + 1);
    let out = 0;
    for (let k = 0; k < kinds; k++) {
      starts[k] = out;
      const lambda = this.#lambdas[k]!;
      const slots = byKind[k]!;
      const n = slots.length;
      const key = new Float64Array(n);
      const newest = new Float64Array(n);
      const countKey = new Float64Array(n);
      for (let j = 0; j < n; j++) {
        const slot = slots[j]!;
        const fb = slot * SLOT_F64;
        const score = f64[fb + F64_SCORE]!;
        key[j] = score > 0 ? Math.log(score) + lambda * f64[fb + F64_TREF]! : Number.NEGATIVE_INFINITY;
        newest[j] = f64[fb + F64_NEWEST]!;
        // No count yet (cannot happen: every slot in the orders was touched or imported): first in the order, always visited.
        const c = this.#count[slot]!;
        countKey[j] = c > 0 ? Math.log(c) + COUNT_RATE * this.#countRef[slot]! : Number.POSITIVE_INFINITY;
      }
      const byKey = sortedBy(slots, key);
      const byNewest = sortedBy(slots, newest);
      const byCount = sortedBy(slots, countKey);

      const from = keepOld ? this.#control[curBlock + 1 + k]! : 0;
      const to = keepOld ? this.#control[curBlock + 2 + k]! : 0;
      const wrote = mergeInto(dst, out, 0, src, from, to, 0, slots, key, byKey, stampOf, stamp);
      mergeInto(dst, out, 2, src, from, to, 2, slots, newest, byNewest, stampOf, stamp);
      mergeInto(dst, out, 4, src, from, to, 4, slots, countKey, byCount, stampOf, stamp);
      out += wrote;
    }
    starts[kinds] = out;
    this.#indexed = out;
    this.#control[nxtBlock] = 0;
    for (let k = 0; k <= kinds; k++) this.#control[nxtBlock + 1 + k] = starts[k]!;
    this.#stamp++;
    this.#limit = dirtyLimit(out, this.#dirtyCap);
    Atomics.store(this.#control, GEN, g + 2);
  }

  /** Grows entry buffer `buf` to hold `entries`, before anything is written into it. */
  #ensure(buf: Half, entries: number): void {
    const sab = this.#arena.entries[buf];
    const max = sab.growable ? sab.maxByteLength : sab.byteLength;
    // Each slot is in the orders once, so they never hold more entries than the reservation's slots.
    const bytes = Math.min(max, entries * ENTRY_BYTES);
    if (bytes > sab.byteLength) {
      const step = ENTRY_STEP * ENTRY_BYTES;
      sab.grow(Math.min(max, Math.max(bytes, Math.ceil((sab.byteLength * 2) / step) * step)));
    }
    if (this.#views[buf].length * 8 < bytes) this.#views[buf] = entryView(sab);
  }
}

function entryView(buf: SharedArrayBuffer): Float64Array {
  return new Float64Array(buf, 0, Math.floor(buf.byteLength / 8));
}

/** Indices into `slots`, by `key` descending, then slot ascending (every thread agrees). */
function sortedBy(slots: readonly number[], key: Float64Array): Int32Array {
  const idx = Int32Array.from({ length: slots.length }, (_, i) => i);
  idx.sort((a, b) => (key[b]! > key[a]! ? 1 : key[b]! < key[a]! ? -1 : slots[a]! - slots[b]!));
  return idx;
}

/**
 * Writes into `dst` from entry `out` (field pair at offset `off`) the merge of the old range
 * `[from, to)` of `src` (pair at `srcOff`), leaving out slots on the dirty list, with the changed
 * slots in `order`. Both inputs are sorted by (value desc, slot asc). Returns the entries written.
 */
function mergeInto(
  dst: Float64Array,
  out: number,
  off: number,
  src: Float64Array,
  from: number,
  to: number,
  srcOff: number,
  slots: readonly number[],
  value: Float64Array,
  order: Int32Array,
  stampOf: Int32Array,
  stamp: number,
): number {
  let i = from;
  let j = 0;
  let w = out;
  const n = order.length;
  for (;;) {
    while (i < to && stampOf[src[i * ENTRY_F64 + srcOff + 1]!] === stamp) i++;
    const haveOld = i < to;
    if (!haveOld && j >= n) break;
    let takeOld: boolean;
    if (!haveOld) takeOld = false;
    else if (j >= n) takeOld = true;
    else {
      const ov = src[i * ENTRY_F64 + srcOff]!;
      const nv = value[order[j]!]!;
      takeOld = ov > nv || (ov === nv && src[i * ENTRY_F64 + srcOff + 1]! < slots[order[j]!]!);
    }
    const at = w * ENTRY_F64 + off;
    if (takeOld) {
      dst[at] = src[i * ENTRY_F64 + srcOff]!;
      dst[at + 1] = src[i * ENTRY_F64 + srcOff + 1]!;
      i++;
    } else {
      dst[at] = value[order[j]!]!;
      dst[at + 1] = slots[order[j]!]!;
      j++;
    }
    w++;
  }
  return w - out;
}
