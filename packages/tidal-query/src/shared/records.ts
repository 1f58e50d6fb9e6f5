/// <reference lib="es2024.sharedmemory" />
import { InvalidInputError } from 'tidal-load';

/*
 * Shared records: byte strings by string key, written by one thread and read by every thread of the
 * process without a message. The user state, the open sessions and the co-engagement lists live
 * here once per process (see tidal-core's shared-state.ts), so a query that names a user, a session
 * or an item runs in whichever thread it arrives at.
 *
 * Layout (little-endian, in three SharedArrayBuffers):
 * - `control`, Int32 × CONTROL_INTS: SEQ (the seqlock: odd while the writer changes what a reader
 *   follows), INDEX_AT (the Int32 offset of the live index table), INDEX_CAP (its entries, a power
 *   of two), FULL (1 once a record could not be stored: a reader that misses a key must then ask
 *   the writer's thread).
 * - `index`, Int32, growable: two halves, each a table of (tag, offset) entries, open addressing
 *   with linear probing from the FNV-1a hash of the key's UTF-8 bytes (so keys are compared as
 *   UTF-8, where a lone surrogate reads as U+FFFD). tag 0 is empty, −1 a deleted entry, else
 *   `(hash & 0x7fffffff) | 1`. A
 *   table that fills is rebuilt, larger, in the other half, and switched to in one seqlock section.
 * - `arena`, bytes, growable: records in blocks of size classes (64 bytes, then four classes per
 *   power of two: at most a quarter of a block is padding). A record: u32 key bytes, u32 value
 *   bytes, u32 generation (a number the writer never gives twice), u32 block bytes, the key's UTF-8,
 *   padding to 8, the value.
 *
 * The writer never changes a record a key points at: it writes the new one into a free block (or
 * past the used end), points the key at it inside the seqlock, and only then frees the old block
 * for reuse. A reader copies the value out and checks the sequence, doing the read again if it
 * moved. That is enough for reuse too: a reader can only be inside a freed block if it followed the
 * key before the section that moved the key away, and that section moved the sequence. So a reader
 * never keeps a torn record, and a freed block is written again without waiting for readers.
 * Resident memory is the blocks in use plus the free ones (the high-water mark of the used end).
 */

const SEQ = 0;
const INDEX_AT = 1;
const INDEX_CAP = 2;
const FULL = 3;
const CONTROL_INTS = 8;

const EMPTY = 0;
const DELETED = -1;
/** Entries start at this many and double; a table is at most half full (deleted entries count). */
const MIN_CAP = 1024;
const HEADER = 16;
const MIN_BLOCK = 64;

/** The buffers of a record store, posted to every thread that reads it. */
export interface SharedRecordsBuffers {
  readonly control: SharedArrayBuffer;
  readonly index: SharedArrayBuffer;
  readonly arena: SharedArrayBuffer;
  /** Index entries a half can hold at most. */
  readonly maxEntries: number;
}

function tagOf(hash: number): number {
  return (hash & 0x7fffffff) | 1;
}

function pad8(n: number): number {
  return (n + 7) & ~7;
}

/** The block a record of `bytes` takes: 64, then four sizes per power of two (a multiple of 8). */
export function blockBytes(bytes: number): number {
  if (bytes <= MIN_BLOCK) return MIN_BLOCK;
  const step = 2 ** Math.floor(Math.log2(bytes - 1)) / 4;
  return Math.ceil(bytes / step) * step;
}

function growable(initial: number, max: number): SharedArrayBuffer {
  try {
    return new SharedArrayBuffer(Math.min(initial, max), { maxByteLength: max });
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    return new SharedArrayBuffer(max);
  }
}

function ensureBytes(buf: SharedArrayBuffer, bytes: number): boolean {
  if (buf.byteLength >= bytes) return true;
  const max = buf.growable ? buf.maxByteLength : buf.byteLength;
  if (bytes > max) return false;
  buf.grow(Math.min(max, Math.max(bytes, buf.byteLength * 2)));
  return true;
}

const encoder = new TextEncoder();

/** FNV-1a over a key's UTF-8 bytes `k[from, to)`: where the key's entry is looked for. */
export function hashBytes(k: Uint8Array, from = 0, to = k.length): number {
  let h = 0x811c9dc5;
  for (let i = from; i < to; i++) {
    h ^= k[i]!;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Counters of a store, for `stats()` and tests. */
export interface SharedRecordsStats {
  records: number;
  /** Bytes of the blocks records take. */
  liveBytes: number;
  /** Bytes of the arena written so far: the blocks in use and the free ones. */
  usedBytes: number;
  /** Blocks written again after a record left them. */
  reused: number;
  /** Whether a record could not be stored (reads of missing keys then go to the writer's thread). */
  full: boolean;
}

/**
 * The writer's side: the only thread that changes the records. `set` and `delete` take effect for
 * readers at once (each is one seqlock section). The writer finds a key's record through the shared
 * index as a reader does, and keeps no table of its own: one held a key string and an object of
 * three boxed numbers per record, ~13 MiB of the writer's heap at 100 000 records.
 */
export class SharedRecordsWriter {
  readonly buffers: SharedRecordsBuffers;
  readonly #control: Int32Array;
  /** Records stored. */
  #count = 0;
  /** Free blocks by size. */
  readonly #free = new Map<number, number[]>();
  #used = 0;
  #liveBytes = 0;
  #reused = 0;
  #generation = 0;
  #depth = 0;
  #tombstones = 0;

  /**
   * @param maxArenaBytes bytes the arena may grow to; address space is reserved, pages are
   *   committed as records arrive.
   * @param maxEntries keys the store may hold at most.
   */
  constructor(maxArenaBytes = 2 ** 31 - 8, maxEntries = 1 << 22) {
    if (!Number.isInteger(maxArenaBytes) || maxArenaBytes < 4096 || maxArenaBytes > 2 ** 31 - 8) {
      throw new InvalidInputError('maxArenaBytes', 'an integer from 4096 to 2^31 - 8', maxArenaBytes);
    }
    if (!Number.isInteger(maxEntries) || maxEntries < MIN_CAP)
      throw new InvalidInputError('maxEntries', `an integer ≥ ${MIN_CAP}`, maxEntries);
    const cap = 2 ** Math.ceil(Math.log2(maxEntries * 2));
    this.buffers = Object.freeze({
      control: new SharedArrayBuffer(CONTROL_INTS * 4),
      index: growable(MIN_CAP * 2 * 4, 2 * cap * 2 * 4),
      arena: growable(1 << 16, maxArenaBytes),
      maxEntries: cap,
    });
    this.#control = new Int32Array(this.buffers.control);
    Atomics.store(this.#control, INDEX_CAP, MIN_CAP);
  }

  get stats(): SharedRecordsStats {
    return {
      records: this.#count,
      liveBytes: this.#liveBytes,
      usedBytes: this.#used,
      reused: this.#reused,
      full: Atomics.load(this.#control, FULL) === 1,
    };
  }

  #enter(): void {
    if (this.#depth++ === 0) Atomics.add(this.#control, SEQ, 1);
  }

  #leave(): void {
    if (--this.#depth === 0) Atomics.add(this.#control, SEQ, 1);
  }

  /**
   * Stores `value` under `key`, replacing what it held. Returns false, with the key removed and the
   * store marked full, when there is no room.
   */
  set(key: string, value: Uint8Array): boolean {
    const k = encoder.encode(key);
    const block = blockBytes(HEADER + pad8(k.length) + value.length);
    const offset = this.#allocate(block);
    if (offset < 0) return this.#refuse(key);
    writeRecord(this.buffers.arena, offset, k, value, ++this.#generation >>> 0, block);
    const hash = hashBytes(k);
    const slot = this.#slotOf(hash, k);
    if (slot >= 0) {
      // The key's entry now points at the new record; the old block is free once the section ends.
      const entry = Atomics.load(this.#control, INDEX_AT) + 2 * slot + 1;
      const idx = new Int32Array(this.buffers.index);
      const before = idx[entry]!;
      const beforeBlock = blockAt(this.buffers.arena, before);
      this.#enter();
      idx[entry] = offset;
      this.#leave();
      this.#release(before, beforeBlock);
      this.#liveBytes += block - beforeBlock;
      return true;
    }
    let put: boolean;
    this.#enter();
    try {
      put = this.#insert(hash, offset);
    } finally {
      this.#leave();
    }
    if (!put) {
      this.#release(offset, block);
      return this.#refuse(key);
    }
    this.#count++;
    this.#liveBytes += block;
    return true;
  }

  /** The index entry of `key` (its UTF-8 `k`, its hash `hash`) in the live table, or −1. */
  #slotOf(hash: number, k: Uint8Array): number {
    const cap = Atomics.load(this.#control, INDEX_CAP);
    const at = Atomics.load(this.#control, INDEX_AT);
    const idx = new Int32Array(this.buffers.index);
    const arena = new Uint8Array(this.buffers.arena);
    const tag = tagOf(hash);
    for (let i = hash & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
      const t = idx[at + 2 * i]!;
      if (t === EMPTY) return -1;
      if (t === tag && keyAt(arena, idx[at + 2 * i + 1]!, k)) return i;
    }
    return -1;
  }

  #refuse(key: string): false {
    this.delete(key);
    Atomics.store(this.#control, FULL, 1);
    return false;
  }

  /** A free block of `block` bytes, or one past the used end; −1 when the arena cannot grow to it. */
  #allocate(block: number): number {
    const free = this.#free.get(block);
    if (free !== undefined && free.length > 0) {
      this.#reused++;
      return free.pop()!;
    }
    if (!ensureBytes(this.buffers.arena, this.#used + block)) return -1;
    const offset = this.#used;
    this.#used += block;
    return offset;
  }

  /** Frees a block no key points at any more (after the section that moved its key away). */
  #release(offset: number, block: number): void {
    let free = this.#free.get(block);
    if (free === undefined) this.#free.set(block, (free = []));
    free.push(offset);
  }

  /** Removes `key`; false if it was not there. */
  delete(key: string): boolean {
    const k = encoder.encode(key);
    const slot = this.#slotOf(hashBytes(k), k);
    if (slot < 0) return false;
    const idx = new Int32Array(this.buffers.index);
    const at = Atomics.load(this.#control, INDEX_AT);
    const offset = idx[at + 2 * slot + 1]!;
    this.#enter();
    idx[at + 2 * slot] = DELETED;
    this.#leave();
    this.#tombstones++;
    this.#count--;
    const block = blockAt(this.buffers.arena, offset);
    this.#liveBytes -= block;
    this.#release(offset, block);
    return true;
  }

  /** A new entry for a key not in the table, pointing at `offset`; inside the seqlock. False when the table is full. */
  #insert(hash: number, offset: number): boolean {
    let cap = Atomics.load(this.#control, INDEX_CAP);
    if (2 * (this.#count + 1 + this.#tombstones) > cap) {
      if (!this.#rebuild(this.#count + 1)) return false;
      cap = Atomics.load(this.#control, INDEX_CAP);
    }
    const idx = new Int32Array(this.buffers.index);
    const at = Atomics.load(this.#control, INDEX_AT);
    for (let i = hash & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
      const t = idx[at + 2 * i]!;
      if (t !== EMPTY && t !== DELETED) continue;
      if (t === DELETED) this.#tombstones--;
      idx[at + 2 * i + 1] = offset;
      idx[at + 2 * i] = tagOf(hash);
      return true;
    }
    return false;
  }

  /**
   * Builds a table for the live records in the index half not in use and switches to it. Readers
   * cannot be in the half written: they look at the other one until the switch, and a reader of an
   * older switch sees the sequence move. Called inside the seqlock. False, with nothing changed,
   * when the table would pass its reservation.
   */
  #rebuild(entries: number): boolean {
    let cap = Math.max(MIN_CAP, 2 ** Math.ceil(Math.log2(entries * 4)));
    if (cap > this.buffers.maxEntries) cap = this.buffers.maxEntries;
    if (2 * entries > cap) return false;
    const half = this.buffers.maxEntries * 2;
    const from = Atomics.load(this.#control, INDEX_AT);
    const fromCap = Atomics.load(this.#control, INDEX_CAP);
    const at = from === 0 ? half : 0;
    ensureBytes(this.buffers.index, (at + cap * 2) * 4);
    const idx = new Int32Array(this.buffers.index);
    const arena = new Uint8Array(this.buffers.arena);
    idx.fill(0, at, at + cap * 2);
    // Every live entry of the table in use, placed by its key's hash (the tag keeps only 30 bits of it).
    for (let j = 0; j < fromCap; j++) {
      const tag = idx[from + 2 * j]!;
      if (tag === EMPTY || tag === DELETED) continue;
      const offset = idx[from + 2 * j + 1]!;
      const hash = hashBytes(arena, offset + HEADER, offset + HEADER + u32At(arena, offset));
      for (let i = hash & (cap - 1); ; i = (i + 1) & (cap - 1)) {
        if (idx[at + 2 * i] !== EMPTY) continue;
        idx[at + 2 * i] = tag;
        idx[at + 2 * i + 1] = offset;
        break;
      }
    }
    this.#tombstones = 0;
    Atomics.store(this.#control, INDEX_AT, at);
    Atomics.store(this.#control, INDEX_CAP, cap);
    return true;
  }
}

function writeRecord(
  arena: SharedArrayBuffer,
  offset: number,
  key: Uint8Array,
  value: Uint8Array,
  generation: number,
  block: number,
): void {
  const dv = new DataView(arena);
  dv.setUint32(offset, key.length, true);
  dv.setUint32(offset + 4, value.length, true);
  dv.setUint32(offset + 8, generation, true);
  dv.setUint32(offset + 12, block, true);
  const bytes = new Uint8Array(arena);
  bytes.set(key, offset + HEADER);
  bytes.set(value, offset + HEADER + pad8(key.length));
}

/** The block size of the record at `offset` (its header's fourth word). */
function blockAt(arena: SharedArrayBuffer, offset: number): number {
  return new DataView(arena).getUint32(offset + 12, true);
}

function u32At(arena: Uint8Array, at: number): number {
  return (arena[at]! | (arena[at + 1]! << 8) | (arena[at + 2]! << 16) | (arena[at + 3]! << 24)) >>> 0;
}

/** Whether the record at `offset` has key `key` (bounds-checked: a racing read may see garbage). */
function keyAt(arena: Uint8Array, offset: number, key: Uint8Array, length = key.length): boolean {
  if (offset < 0 || offset + HEADER + length > arena.length) return false;
  if (u32At(arena, offset) !== length) return false;
  const base = offset + HEADER;
  for (let i = 0; i < length; i++) if (arena[base + i] !== key[i]) return false;
  return true;
}

/** A record a reader found: its value (a private copy) and which record it was, for caches. */
export interface FoundRecord {
  readonly value: Uint8Array;
  /** Offset and generation: equal for two reads of the same record, different for any other. */
  readonly offset: number;
  readonly generation: number;
}

/** Reads done again on this thread because the writer changed the store meanwhile. */
let retries = 0;

/** See {@link retries}: the cross-thread test asserts with it that reads and writes overlapped. */
export function sharedRecordRetries(): number {
  return retries;
}

/** A reader's view of a store; any thread, any number of them. */
export class SharedRecordsReader {
  readonly #control: Int32Array;
  readonly #buffers: SharedRecordsBuffers;
  /**
   * Fixed-length views of the growable index and arena, made again only when a buffer has grown
   * (a view that tracks a growable buffer's length reads ~7× slower an element), and the key
   * encoded into {@link #key}: made per lookup, they took most of a lookup's time.
   */
  #index: Int32Array;
  #arena: Uint8Array;
  #key = new Uint8Array(256);

  constructor(buffers: SharedRecordsBuffers) {
    if (
      typeof buffers !== 'object' ||
      buffers === null ||
      !(buffers.control instanceof SharedArrayBuffer) ||
      !(buffers.index instanceof SharedArrayBuffer) ||
      !(buffers.arena instanceof SharedArrayBuffer)
    ) {
      throw new InvalidInputError('records', 'the buffers of a SharedRecordsWriter', buffers);
    }
    this.#buffers = buffers;
    this.#control = new Int32Array(buffers.control);
    this.#index = new Int32Array(buffers.index, 0, buffers.index.byteLength >> 2);
    this.#arena = new Uint8Array(buffers.arena, 0, buffers.arena.byteLength);
  }

  /** Whether the writer once failed to store a record (a missing key may then exist on its thread). */
  get full(): boolean {
    return Atomics.load(this.#control, FULL) === 1;
  }

  /**
   * The record under `key`, or undefined. `cached` is a record this thread found before: when the
   * key still points at it, it is returned as it is and nothing is copied.
   */
  get(key: string, cached?: FoundRecord): FoundRecord | undefined {
    const first = encoder.encodeInto(key, this.#key);
    let kn = first.written;
    if (first.read < key.length) {
      this.#key = new Uint8Array(3 * key.length);
      kn = encoder.encodeInto(key, this.#key).written;
    }
    const k = this.#key;
    const hash = hashBytes(k, 0, kn);
    const tag = tagOf(hash);
    const c = this.#control;
    for (;;) {
      const seq = Atomics.load(c, SEQ);
      if ((seq & 1) === 1) continue;
      const at = Atomics.load(c, INDEX_AT);
      const cap = Atomics.load(c, INDEX_CAP);
      // After the loads above: a grown buffer's length is seen with the position that needs it.
      const b = this.#buffers;
      if (b.index.byteLength >> 2 !== this.#index.length) this.#index = new Int32Array(b.index, 0, b.index.byteLength >> 2);
      if (b.arena.byteLength !== this.#arena.length) this.#arena = new Uint8Array(b.arena, 0, b.arena.byteLength);
      const idx = this.#index;
      const arena = this.#arena;
      let found: FoundRecord | undefined;
      let sane = cap > 0 && (cap & (cap - 1)) === 0 && at + cap * 2 <= idx.length;
      for (let i = hash & (cap - 1), n = 0; sane && n < cap; i = (i + 1) & (cap - 1), n++) {
        const t = idx[at + 2 * i]!;
        if (t === EMPTY) break;
        if (t !== tag) continue;
        const offset = idx[at + 2 * i + 1]!;
        if (!keyAt(arena, offset, k, kn)) continue;
        const generation = u32At(arena, offset + 8);
        if (cached !== undefined && cached.offset === offset && cached.generation === generation) {
          found = cached;
          break;
        }
        const len = u32At(arena, offset + 4);
        const start = offset + HEADER + pad8(kn);
        if (start + len > arena.length) {
          sane = false;
          break;
        }
        found = { value: arena.slice(start, start + len), offset, generation };
        break;
      }
      if (Atomics.load(c, SEQ) === seq && sane) return found;
      retries++;
    }
  }
}
