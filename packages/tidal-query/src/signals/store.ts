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
import { checkArena, createArena, INDEX_STEP, indexView, nextSize, SLOT_STEP } from './arena.js';
import {
  BUCKETS_1H,
  BUCKETS_24H,
  BUCKETS_7D,
  CONTROL_SLOTS_USED,
  F64_COUNT,
  F64_NEWEST,
  F64_OLDEST,
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
  MAX_EVENT_MS,
  SLOT_BYTES,
  SLOT_F64,
  SLOT_INT32,
  SLOT_LAYOUT,
  UNIT_1H_MS,
  UNIT_24H_MS,
  UNIT_7D_MS,
} from './layout.js';
import { LEGACY_SLOT_BYTES, LEGACY_SLOT_LAYOUT, convertLegacySlots } from './legacy.js';
import { OrderWriter } from './order.js';
import { SlotReader } from './reader.js';
import { bumpRing } from './rings.js';
import { checkCount, checkKinds, type SignalArena, type SignalKindSpec, type SignalStoreOptions } from './types.js';

export { SLOT_BYTES, SLOT_LAYOUT } from './layout.js';
export { SignalOrder, type OrderArena } from './order.js';
export type { SignalArena, SignalKindSpec, SignalStoreOptions, SignalValues, VelocityWindow, WindowName } from './types.js';

/*
 * The store is split by job: `types.ts` (its vocabulary), `arena.ts` (the shared buffers),
 * `seqlock.ts` and `rings.ts` (the slot protocol and ring arithmetic), `reader.ts` (every read,
 * any thread), and this file: creating and attaching, the writer, and loading a checkpoint.
 * Element reads take `!` where the index is in bounds by construction: a slot is touched only after
 * the views were grown to hold it, and kinds and ordinals are checked on the way in.
 */

const CAPACITY_HINT = 'raise the capacity.signalSlots builder option';
const ORDINAL_HINT = 'raise the capacity.items builder option';

/**
 * Per-(ordinal, kind) engagement state in shared memory: decayed score, all-time count, one ring of
 * buckets per window (5-minute buckets for 1h, hours for 24h, 14-hour buckets for 7d). Create it with {@link SignalStore.create} on the writer thread
 * and open it in workers with {@link SignalStore.attach}.
 *
 * The arena grows on demand up to its reservation. A slot can be taken ahead of its first event
 * ({@link reserve}, at admission); until that event is applied the slot holds no state, and every
 * read treats it as absent.
 */
export class SignalStore extends SlotReader {
  private readonly writable: boolean;
  private readonly orderWriter: OrderWriter | null;

  private constructor(arena: SignalArena, lambdas: Float64Array, writable: boolean) {
    super(arena, lambdas);
    this.writable = writable;
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
    return new SignalStore(createArena(kinds, maxOrdinals, maxSlots, reservation), lambdas, true);
  }

  /**
   * Opens, read-only, an arena created by {@link create} on another thread. `kinds` must be the
   * same kind list the writer was created with (half-lives are not stored in the arena).
   *
   * @throws InvalidInputError if the arena is malformed or does not match `kinds`.
   */
  static attach(arena: SignalArena, kinds: readonly SignalKindSpec[]): SignalStore {
    const lambdas = checkKinds(kinds);
    return new SignalStore(checkArena(arena, kinds.length), lambdas, false);
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
      // `i < count` is inside both, but an array-like may have holes: those fail the checks as well.
      if (ordinal === undefined || !Number.isInteger(ordinal) || ordinal < 0) {
        throw new InvalidInputError(`ordinals[${i}]`, 'a non-negative integer', ordinal);
      }
      if (ordinal >= this.ordinalCount) throw new CapacityError('item ids', this.ordinalCount, ORDINAL_HINT);
      if (kind === undefined || !Number.isInteger(kind) || kind < 0 || kind >= kindCount) {
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
    const used = this.control[CONTROL_SLOTS_USED]!;
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
      // Checked by pass 1.
      const ordinal = ordinals[i]!;
      const kind = kinds[i]!;
      const ix = ordinal * kindCount + kind;
      if (grown[ix] !== 0) continue;
      const slot = this.control[CONTROL_SLOTS_USED]!;
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
    const entry = ix < this.index.length ? this.index[ix]! : 0;
    if (entry !== 0) {
      this.record(entry - 1, kind, weight, atMs);
      this.orderWriter!.touch(entry - 1, atMs, this.i32, this.f64);
      return;
    }

    const slot = this.control[CONTROL_SLOTS_USED]!;
    if (slot >= this.slotCapacity) {
      throw new CapacityError('signal state', this.slotCapacity, CAPACITY_HINT);
    }
    this.growSlots(slot + 1);
    this.growIndex(ix + 1);
    this.claim(slot, ordinal, kind);
    // The first event goes in before the slot is published: a slot allocated here is never seen empty.
    this.record(slot, kind, weight, atMs);
    this.publish(slot, ix);
    this.orderWriter!.touch(slot, atMs, this.i32, this.f64);
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

    Atomics.add(i32, b + I32_SEQ, 1);
    const count = f64[fb + F64_COUNT]!;
    const first = count === 0;
    if (first) {
      f64[fb + F64_SCORE] = weight;
      f64[fb + F64_TREF] = atMs;
      f64[fb + F64_NEWEST] = atMs;
      f64[fb + F64_OLDEST] = atMs;
    } else {
      const lambda = this.lambdas[kind]!;
      const tRef = f64[fb + F64_TREF]!;
      if (atMs >= tRef) {
        f64[fb + F64_SCORE] = f64[fb + F64_SCORE]! * Math.exp(-lambda * (atMs - tRef)) + weight;
        f64[fb + F64_TREF] = atMs;
      } else {
        // A late event is decayed to the reference time instead of moving the reference back.
        f64[fb + F64_SCORE] = f64[fb + F64_SCORE]! + weight * Math.exp(-lambda * (tRef - atMs));
      }
      if (atMs > f64[fb + F64_NEWEST]!) f64[fb + F64_NEWEST] = atMs;
      if (atMs < f64[fb + F64_OLDEST]!) f64[fb + F64_OLDEST] = atMs;
    }
    f64[fb + F64_COUNT] = count + 1;
    bumpRing(i32, b + I32_HEAD_1H, b + I32_BUCKETS_1H, BUCKETS_1H, Math.floor(atMs / UNIT_1H_MS), first);
    bumpRing(i32, b + I32_HEAD_24H, b + I32_BUCKETS_24H, BUCKETS_24H, Math.floor(atMs / UNIT_24H_MS), first);
    bumpRing(i32, b + I32_HEAD_7D, b + I32_BUCKETS_7D, BUCKETS_7D, Math.floor(atMs / UNIT_7D_MS), first);
    Atomics.add(i32, b + I32_SEQ, 1);
  }

  // ---------------------------------------------------------------------------------------------
  // Checkpoints (writer thread)

  /**
   * Loads a checkpoint (the first `slotsUsed() * SLOT_BYTES` bytes of an arena's `slots`, byte for
   * byte) into this store, which must be freshly created and empty. `layout` is the slot layout the
   * checkpoint was written in: {@link SLOT_LAYOUT} (the default) is copied as it is; layout 1 (1 024-byte
   * slots, 60 minute and 168 hour buckets) is converted, exactly: each of its windows as this layout
   * would have counted the same events (see `legacy.ts`). `kindRemap[oldKind]` gives each
   * old kind's new index, or -1 to drop that kind's slots (the remaining slots are compacted);
   * without it kinds keep their indices. A slot with no events (reserved, never written) is kept as
   * the same empty reservation. All checks run before anything is written.
   *
   * @throws InvalidInputError if the store is not empty, `layout` is not 1 or {@link SLOT_LAYOUT},
   *   the length is not a multiple of that layout's slot size, a slot names an ordinal or kind out of
   *   range, or two slots end up on the same (ordinal, kind).
   * @throws CapacityError if the kept slots do not fit in `maxSlots`.
   */
  importState(bytes: Uint8Array, kindRemap?: ArrayLike<number>, layout: number = SLOT_LAYOUT): void {
    this.requireWriter('import signal state');
    if (!(bytes instanceof Uint8Array)) throw new InvalidInputError('bytes', 'a Uint8Array', bytes);
    const used = this.control[CONTROL_SLOTS_USED];
    if (used !== 0) throw new InvalidInputError('signal store', 'empty before importState', `${used} slots in use`);
    if (layout !== SLOT_LAYOUT && layout !== LEGACY_SLOT_LAYOUT) {
      throw new InvalidInputError('layout', `${LEGACY_SLOT_LAYOUT} or ${SLOT_LAYOUT} (the signal slot layouts this version reads)`, layout);
    }
    const slotBytes = layout === SLOT_LAYOUT ? SLOT_BYTES : LEGACY_SLOT_BYTES;
    if (bytes.byteLength % slotBytes !== 0) {
      throw new InvalidInputError('signal state length', `a multiple of ${slotBytes} bytes (slot layout ${layout})`, bytes.byteLength);
    }
    const oldSlots = bytes.byteLength / slotBytes;
    // Copy to an aligned buffer once so headers can be read as Int32 regardless of bytes' offset.
    const raw = new Int32Array(bytes.byteLength / 4);
    new Uint8Array(raw.buffer).set(bytes);
    const src = layout === SLOT_LAYOUT ? raw : convertLegacySlots(raw, oldSlots);

    const newKinds = new Int32Array(oldSlots);
    const seen = new Map<number, number>();
    let kept = 0;
    let topIx = -1;
    for (let s = 0; s < oldSlots; s++) {
      const b = s * SLOT_INT32;
      const ordinal = src[b + I32_ORDINAL]!;
      const oldKind = src[b + I32_KIND]!;
      let kind = oldKind;
      if (kindRemap !== undefined) {
        if (oldKind < 0 || oldKind >= kindRemap.length) {
          throw new InvalidInputError(`signal state slot ${s} kind`, `below ${kindRemap.length} (the kind remap length)`, oldKind);
        }
        const remapped = kindRemap[oldKind];
        if (remapped === -1) {
          newKinds[s] = -1;
          continue;
        }
        // An array-like may have a hole at `oldKind`.
        if (remapped === undefined || !Number.isInteger(remapped) || remapped < 0 || remapped >= this.kindCount) {
          throw new InvalidInputError(`kindRemap[${oldKind}]`, `-1 or an integer in [0, ${this.kindCount})`, remapped);
        }
        kind = remapped;
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
      const kind = newKinds[s]!;
      if (kind === -1) continue;
      const from = s * SLOT_INT32;
      const to = slot * SLOT_INT32;
      dst.set(src.subarray(from, from + SLOT_INT32), to);
      // A checkpoint is taken between writes so its sequences are even; forcing that keeps a
      // damaged one from stalling readers, and keeping the value keeps import/export byte-exact.
      dst[to + I32_SEQ]! &= ~1;
      dst[to + I32_KIND] = kind;
      slot++;
    }
    Atomics.store(this.control, CONTROL_SLOTS_USED, kept);
    for (let s = 0; s < kept; s++) {
      const b = s * SLOT_INT32;
      Atomics.store(this.index, dst[b + I32_ORDINAL]! * this.kindCount + dst[b + I32_KIND]!, s + 1);
    }
    this.orderWriter!.rebuildAll(kept, this.i32, this.f64, (s, atMs) => this.windowCount(s, '1h', atMs));
  }

  private requireWriter(operation: string): void {
    if (!this.writable) {
      throw new InternalError(`cannot ${operation}: this signal store was attached read-only; only the creating thread writes`);
    }
  }
}
