/// <reference lib="es2024.sharedmemory" />
import { InvalidInputError } from 'tidal-load';
import { hashString } from '../user-state.js';

/*
 * Shared records: byte strings by string key, written by one thread and read by every thread of the
 * process without a message. The user state, the open sessions and the co-engagement lists live
 * here once per process (see tidal-core's shared-state.ts), so a query that names a user, a session
 * or an item runs in whichever thread it arrives at.
 *
 * Layout (all little-endian, in three kinds of SharedArrayBuffer):
 * - `control`, Int32 × CONTROL_INTS: SEQ (the seqlock: odd while the writer changes what a reader
 *   follows), ACTIVE (the arena records are read from, 0 or 1), INDEX_AT (the Int32 offset of the
 *   live index table), INDEX_CAP (its entries, a power of two), EPOCH (bumped by every compaction,
 *   so that a reader's cache of decoded records never mixes two arenas' offsets), FULL (1 once a
 *   record could not be stored: a reader that misses a key must then ask the writer's thread).
 * - `index`, Int32, growable: two halves, each a table of (tag, offset) entries, open addressing
 *   with linear probing. tag 0 is empty, −1 a deleted entry, else `(hash & 0x7fffffff) | 1`.
 * - `arenas[0..1]`, bytes, growable: records appended one after another, each 8-byte aligned:
 *   u32 key bytes, u32 value bytes, the key's UTF-8, padding to 8, the value, padding to 8.
 *
 * A record once written never changes: the writer appends a new one and points the key's entry at
 * it (entry changes happen inside the seqlock). When garbage outgrows the live bytes, the writer
 * copies the live records into the other arena and builds the other index half there, out of the
 * readers' sight, then switches ACTIVE, INDEX_AT and INDEX_CAP inside the seqlock. A reader copies
 * the value out and then checks the sequence: a read that overlapped a change is done again, so a
 * reader never keeps a torn record, and a compaction can reuse an arena only after every reader of
 * it has seen the sequence move.
 */

const SEQ = 0;
const ACTIVE = 1;
const INDEX_AT = 2;
const INDEX_CAP = 3;
const EPOCH = 4;
const FULL = 5;
const CONTROL_INTS = 8;

const EMPTY = 0;
const DELETED = -1;
/** Entries start at this many and double; a table is at most half full (deleted entries count). */
const MIN_CAP = 1024;
const HEADER = 8;

/** The buffers of a record store, posted to every thread that reads it. */
export interface SharedRecordsBuffers {
  readonly control: SharedArrayBuffer;
  readonly index: SharedArrayBuffer;
  readonly arenas: readonly [SharedArrayBuffer, SharedArrayBuffer];
  /** Index entries a half can hold at most. */
  readonly maxEntries: number;
}

function tagOf(hash: number): number {
  return (hash & 0x7fffffff) | 1;
}

function pad8(n: number): number {
  return (n + 7) & ~7;
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

/** What the writer knows of one live record. */
interface Live {
  offset: number;
  bytes: number;
  key: Uint8Array;
  hash: number;
}

/** Counters of a store, for `stats()` and tests. */
export interface SharedRecordsStats {
  records: number;
  liveBytes: number;
  /** Bytes of the active arena in use, garbage included. */
  usedBytes: number;
  compactions: number;
  /** Whether a record could not be stored (reads of missing keys then go to the writer's thread). */
  full: boolean;
}

/**
 * The writer's side: the only thread that changes the records. `set` and `delete` take effect for
 * readers at once (each is one seqlock section); `batch` makes several take effect together.
 */
export class SharedRecordsWriter {
  readonly buffers: SharedRecordsBuffers;
  readonly #control: Int32Array;
  readonly #live = new Map<string, Live>();
  #used = 0;
  #liveBytes = 0;
  #compactions = 0;
  #depth = 0;
  #tombstones = 0;

  /**
   * @param maxArenaBytes bytes an arena may grow to (each of two); address space is reserved, pages
   *   are committed as records arrive.
   * @param maxEntries keys the store may hold at most.
   */
  constructor(maxArenaBytes = 1 << 30, maxEntries = 1 << 22) {
    if (!Number.isInteger(maxArenaBytes) || maxArenaBytes < 4096 || maxArenaBytes > 2 ** 31 - 8) {
      throw new InvalidInputError('maxArenaBytes', 'an integer from 4096 to 2^31 - 8', maxArenaBytes);
    }
    if (!Number.isInteger(maxEntries) || maxEntries < MIN_CAP)
      throw new InvalidInputError('maxEntries', `an integer ≥ ${MIN_CAP}`, maxEntries);
    const cap = 2 ** Math.ceil(Math.log2(maxEntries * 2));
    this.buffers = Object.freeze({
      control: new SharedArrayBuffer(CONTROL_INTS * 4),
      index: growable(MIN_CAP * 2 * 4, 2 * cap * 2 * 4),
      arenas: Object.freeze([growable(1 << 16, maxArenaBytes), growable(1 << 16, maxArenaBytes)]) as unknown as readonly [
        SharedArrayBuffer,
        SharedArrayBuffer,
      ],
      maxEntries: cap,
    });
    this.#control = new Int32Array(this.buffers.control);
    Atomics.store(this.#control, INDEX_CAP, MIN_CAP);
  }

  get stats(): SharedRecordsStats {
    return {
      records: this.#live.size,
      liveBytes: this.#liveBytes,
      usedBytes: this.#used,
      compactions: this.#compactions,
      full: Atomics.load(this.#control, FULL) === 1,
    };
  }

  /** Runs `fn` with readers held off the changes it makes until it returns: they see all or none. */
  batch(fn: () => void): void {
    this.#enter();
    try {
      fn();
    } finally {
      this.#leave();
    }
  }

  #enter(): void {
    if (this.#depth++ === 0) Atomics.add(this.#control, SEQ, 1);
  }

  #leave(): void {
    if (--this.#depth === 0) Atomics.add(this.#control, SEQ, 1);
  }

  /**
   * Stores `value` under `key`, replacing what it held. Returns false, with the key removed and the
   * store marked full, when there is no room even after a compaction.
   */
  set(key: string, value: Uint8Array): boolean {
    const k = encoder.encode(key);
    const bytes = HEADER + pad8(k.length) + pad8(value.length);
    if (!this.#room(bytes)) {
      this.delete(key);
      Atomics.store(this.#control, FULL, 1);
      return false;
    }
    const arena = this.buffers.arenas[Atomics.load(this.#control, ACTIVE)]!;
    const offset = this.#used;
    writeRecord(arena, offset, k, value);
    this.#used += bytes;
    const hash = hashString(key);
    const before = this.#live.get(key);
    let put: boolean;
    this.#enter();
    try {
      put = this.#put(hash, k, offset, before === undefined);
    } finally {
      this.#leave();
    }
    if (!put) {
      Atomics.store(this.#control, FULL, 1);
      return false;
    }
    if (before !== undefined) this.#liveBytes -= before.bytes;
    this.#live.set(key, { offset, bytes, key: k, hash });
    this.#liveBytes += bytes;
    return true;
  }

  /** Removes `key`; false if it was not there. */
  delete(key: string): boolean {
    const live = this.#live.get(key);
    if (live === undefined) return false;
    this.#enter();
    try {
      const idx = new Int32Array(this.buffers.index);
      const at = Atomics.load(this.#control, INDEX_AT);
      const slot = this.#find(idx, at, Atomics.load(this.#control, INDEX_CAP), live);
      if (slot >= 0) {
        idx[at + 2 * slot] = DELETED;
        this.#tombstones++;
      }
    } finally {
      this.#leave();
    }
    this.#live.delete(key);
    this.#liveBytes -= live.bytes;
    return true;
  }

  /** The entry of a live record in the table at `at`. */
  #find(idx: Int32Array, at: number, cap: number, live: Live): number {
    const tag = tagOf(live.hash);
    for (let i = live.hash & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
      const t = idx[at + 2 * i]!;
      if (t === EMPTY) return -1;
      if (t === tag && idx[at + 2 * i + 1] === live.offset) return i;
    }
    return -1;
  }

  /** Points the key's entry at `offset` (a new entry when `fresh`); inside the seqlock. False when the table is full. */
  #put(hash: number, key: Uint8Array, offset: number, fresh: boolean): boolean {
    let cap = Atomics.load(this.#control, INDEX_CAP);
    if (fresh && 2 * (this.#live.size + 1 + this.#tombstones) > cap) {
      if (!this.#rebuild(Atomics.load(this.#control, ACTIVE), this.#live.size + 1)) return false;
      cap = Atomics.load(this.#control, INDEX_CAP);
    }
    const idx = new Int32Array(this.buffers.index);
    const at = Atomics.load(this.#control, INDEX_AT);
    const arena = new Uint8Array(this.buffers.arenas[Atomics.load(this.#control, ACTIVE)]!);
    const tag = tagOf(hash);
    let free = -1;
    for (let i = hash & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
      const t = idx[at + 2 * i]!;
      if (t === EMPTY) {
        if (free < 0) free = i;
        break;
      }
      if (t === DELETED) {
        if (free < 0) free = i;
        continue;
      }
      if (t === tag && !fresh && keyAt(arena, idx[at + 2 * i + 1]!, key)) {
        idx[at + 2 * i + 1] = offset;
        return true;
      }
    }
    if (free < 0) return false;
    if (idx[at + 2 * free] === DELETED) this.#tombstones--;
    idx[at + 2 * free + 1] = offset;
    idx[at + 2 * free] = tag;
    return true;
  }

  /**
   * Makes room for `bytes` more: grows the active arena, or compacts the live records into the
   * other one when garbage is at least half of what is used. False when neither makes room.
   */
  #room(bytes: number): boolean {
    const active = Atomics.load(this.#control, ACTIVE);
    const garbage = this.#used - this.#liveBytes;
    if (garbage > this.#liveBytes && garbage > 1 << 16) this.#compact();
    const arena = this.buffers.arenas[Atomics.load(this.#control, ACTIVE)]!;
    if (ensureBytes(arena, this.#used + bytes)) return true;
    if (Atomics.load(this.#control, ACTIVE) === active && garbage > 0) {
      this.#compact();
      return ensureBytes(this.buffers.arenas[Atomics.load(this.#control, ACTIVE)]!, this.#used + bytes);
    }
    return false;
  }

  /** Copies the live records into the other arena, builds the other index half there, switches. */
  #compact(): void {
    const from = Atomics.load(this.#control, ACTIVE);
    const to = 1 - from;
    const src = new Uint8Array(this.buffers.arenas[from]!);
    const dst = this.buffers.arenas[to]!;
    if (!ensureBytes(dst, this.#liveBytes)) return;
    const out = new Uint8Array(dst);
    let used = 0;
    for (const live of this.#live.values()) {
      out.set(src.subarray(live.offset, live.offset + live.bytes), used);
      live.offset = used;
      used += live.bytes;
    }
    this.#used = used;
    this.#compactions++;
    this.#enter();
    try {
      // The same number of keys fits the table it had, so this rebuild cannot fail.
      this.#rebuild(to, this.#live.size);
      Atomics.add(this.#control, EPOCH, 1);
    } finally {
      this.#leave();
    }
  }

  /**
   * Builds a table for the live records (their offsets in arena `arena`) in the index half not in
   * use and switches to it and to that arena. Readers cannot be in the half written: they look at
   * the other one until the switch, and a reader of an older switch sees the sequence move.
   * Called inside the seqlock. False, with nothing changed, when the table would pass its reservation.
   */
  #rebuild(arena: number, entries: number): boolean {
    let cap = Math.max(MIN_CAP, 2 ** Math.ceil(Math.log2(entries * 4)));
    if (cap > this.buffers.maxEntries) cap = this.buffers.maxEntries;
    if (2 * entries > cap) return false;
    const half = this.buffers.maxEntries * 2;
    const at = Atomics.load(this.#control, INDEX_AT) === 0 ? half : 0;
    ensureBytes(this.buffers.index, (at + cap * 2) * 4);
    const idx = new Int32Array(this.buffers.index);
    idx.fill(0, at, at + cap * 2);
    for (const live of this.#live.values()) {
      for (let i = live.hash & (cap - 1); ; i = (i + 1) & (cap - 1)) {
        if (idx[at + 2 * i] !== EMPTY) continue;
        idx[at + 2 * i] = tagOf(live.hash);
        idx[at + 2 * i + 1] = live.offset;
        break;
      }
    }
    this.#tombstones = 0;
    Atomics.store(this.#control, ACTIVE, arena);
    Atomics.store(this.#control, INDEX_AT, at);
    Atomics.store(this.#control, INDEX_CAP, cap);
    return true;
  }
}

function writeRecord(arena: SharedArrayBuffer, offset: number, key: Uint8Array, value: Uint8Array): void {
  const dv = new DataView(arena);
  dv.setUint32(offset, key.length, true);
  dv.setUint32(offset + 4, value.length, true);
  const bytes = new Uint8Array(arena);
  bytes.set(key, offset + HEADER);
  bytes.set(value, offset + HEADER + pad8(key.length));
}

/** Whether the record at `offset` has key `key` (bounds-checked: a racing read may see garbage). */
function keyAt(arena: Uint8Array, offset: number, key: Uint8Array): boolean {
  if (offset < 0 || offset + HEADER + key.length > arena.length) return false;
  const n = arena[offset]! | (arena[offset + 1]! << 8) | (arena[offset + 2]! << 16) | (arena[offset + 3]! << 24);
  if (n !== key.length) return false;
  const base = offset + HEADER;
  for (let i = 0; i < key.length; i++) if (arena[base + i] !== key[i]) return false;
  return true;
}

/** A record a reader found: its value (a private copy) and where it was, for caches. */
export interface FoundRecord {
  readonly value: Uint8Array;
  /** Epoch and offset: equal for two reads of the same record, different for any other. */
  readonly epoch: number;
  readonly offset: number;
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

  constructor(buffers: SharedRecordsBuffers) {
    if (
      typeof buffers !== 'object' ||
      buffers === null ||
      !(buffers.control instanceof SharedArrayBuffer) ||
      !(buffers.index instanceof SharedArrayBuffer) ||
      !Array.isArray(buffers.arenas) ||
      !buffers.arenas.every((a) => a instanceof SharedArrayBuffer)
    ) {
      throw new InvalidInputError('records', 'the buffers of a SharedRecordsWriter', buffers);
    }
    this.#buffers = buffers;
    this.#control = new Int32Array(buffers.control);
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
    const k = encoder.encode(key);
    const hash = hashString(key);
    const tag = tagOf(hash);
    const c = this.#control;
    for (;;) {
      const seq = Atomics.load(c, SEQ);
      if ((seq & 1) === 1) continue;
      const epoch = Atomics.load(c, EPOCH);
      const arenaBuf = this.#buffers.arenas[Atomics.load(c, ACTIVE) & 1]!;
      const at = Atomics.load(c, INDEX_AT);
      const cap = Atomics.load(c, INDEX_CAP);
      const idx = new Int32Array(this.#buffers.index, 0, Math.min(this.#buffers.index.byteLength >> 2, at + cap * 2));
      const arena = new Uint8Array(arenaBuf);
      let found: FoundRecord | undefined;
      let sane = cap > 0 && (cap & (cap - 1)) === 0 && at + cap * 2 <= idx.length;
      for (let i = hash & (cap - 1), n = 0; sane && n < cap; i = (i + 1) & (cap - 1), n++) {
        const t = idx[at + 2 * i]!;
        if (t === EMPTY) break;
        if (t !== tag) continue;
        const offset = idx[at + 2 * i + 1]!;
        if (!keyAt(arena, offset, k)) continue;
        if (cached !== undefined && cached.epoch === epoch && cached.offset === offset) {
          found = cached;
          break;
        }
        const len = arena[offset + 4]! | (arena[offset + 5]! << 8) | (arena[offset + 6]! << 16) | (arena[offset + 7]! << 24);
        const start = offset + HEADER + pad8(k.length);
        if (len < 0 || start + len > arena.length) {
          sane = false;
          break;
        }
        found = { value: arena.slice(start, start + len), epoch, offset };
        break;
      }
      if (Atomics.load(c, SEQ) === seq && sane) return found;
      retries++;
    }
  }
}
