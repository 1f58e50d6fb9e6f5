/// <reference lib="es2024.sharedmemory" />
import { threadId } from 'node:worker_threads';
import { InvalidInputError } from 'tidal-load';

/*
 * Every item's int8 vector, once per process: the rows the query threads' for_you and exact vector
 * search read, in SharedArrayBuffers the database's thread reserves and every query thread maps.
 *
 * Who writes: a query thread, while it holds the write lock. A thread that syncs its catalog to an
 * items version the rows do not reach yet takes the lock, writes the rows changed after `version`
 * (from its catalog's refresh, or read from the items table for a gap), then raises `version`; a
 * thread whose sync finds `version` already there writes nothing. So the rows reflect the items
 * table at `version` at least (rows written after it may be there too: a newer state, never an
 * older one), and a read that syncs to the version a write was acknowledged at sees that write.
 *
 * How a reader sees a whole row: each row has a sequence, odd while the writer changes it. A reader
 * reads the sequence, the row and its norm, then the sequence again, and reads the row again if the
 * sequence was odd or moved (see `cosineInt8`). Growing (doubling, under the lock) only commits
 * pages of a growable reservation; `capacity` is raised after the buffers are, so a view of
 * `capacity` rows is always inside them. A copy of many rows (the exact search's) checks one
 * sequence for all of them instead, WRITING, odd while the writer is inside any row.
 *
 * Layout: `control`, Int32 × CONTROL_INTS then a BigInt64 version: LOCK (0 free, else the holder's
 * thread id + 1), PROGRESS (bumped as the holder reads rows, see `lock`), CAPACITY (rows the views
 * may span), EXTENT (one past the highest ordinal that ever had a row), LIVE (rows with a vector),
 * WRITING;
 * `rows` int8 × dims per row; `norms` float32 per row (1 / |row|, 0 without a vector); `seqs` Int32
 * per row.
 */

const LOCK = 0;
const PROGRESS = 1;
const CAPACITY = 2;
const EXTENT = 3;
const LIVE = 4;
/** Odd while the writer is inside any row (one writer at a time): a whole-range copy checks it once. */
const WRITING = 5;
const CONTROL_INTS = 8;
/** The BigInt64 cell of the items version the rows reflect follows the Int32 cells. */
const CONTROL_BYTES = CONTROL_INTS * 4 + 8;

/** Rows committed at first; doubled as ordinals need. */
const INITIAL_ROWS = 1024;
/**
 * A waiter takes the lock over from a holder that showed no progress for this many 1 s waits: the
 * holder's thread died (the holder bumps PROGRESS every {@link PROGRESS_ROWS} rows it reads, ~30
 * ms; the longest step without rows, the close-time save of the catalog snapshot, takes seconds).
 */
const STALLED_WAITS = 60;
const PROGRESS_ROWS = 1024;

/** The buffers of the shared item vectors, given to every query thread. */
export interface SharedVectorBuffers {
  readonly control: SharedArrayBuffer;
  readonly rows: SharedArrayBuffer;
  readonly norms: SharedArrayBuffer;
  readonly seqs: SharedArrayBuffer;
  readonly dims: number;
  /** Ordinals the reservation holds (the database's `capacity.items`). */
  readonly maxRows: number;
}

/**
 * Reserves the shared vectors for `maxRows` ordinals of `dims` dimensions, or returns null when the
 * platform cannot reserve that much as a growable buffer (Node 20 caps a reservation at 4 GiB:
 * `capacity.items` × `embeddingDims` past it, at 4 Mi items more than 1 024 dimensions): each
 * query thread then keeps rows of its own. No fixed buffer of the maximum instead: that would be
 * committed address space for every ordinal the capacity allows.
 */
export function createSharedVectors(dims: number, maxRows: number): SharedVectorBuffers | null {
  if (dims <= 0) return null;
  const first = Math.min(INITIAL_ROWS, maxRows);
  try {
    const control = new SharedArrayBuffer(CONTROL_BYTES);
    new Int32Array(control)[CAPACITY] = first;
    return Object.freeze({
      control,
      rows: reserve(first * dims, maxRows * dims),
      norms: reserve(first * 4, maxRows * 4),
      seqs: reserve(first * 4, maxRows * 4),
      dims,
      maxRows,
    });
  } catch (err) {
    if (err instanceof RangeError) return null;
    throw err;
  }
}

/** Checks buffers posted from another thread against `dims`. @throws InvalidInputError when they do not fit. */
export function checkSharedVectors(b: SharedVectorBuffers, dims: number): SharedVectorBuffers {
  if (typeof b !== 'object' || b === null || !(b.control instanceof SharedArrayBuffer) || b.control.byteLength !== CONTROL_BYTES) {
    throw new InvalidInputError('vectors', 'the shared item vectors (createSharedVectors)', b);
  }
  if (b.dims !== dims) throw new InvalidInputError('vectors.dims', `${dims} (the schema's embeddingDims)`, b.dims);
  for (const [field, buf, perRow] of [
    ['rows', b.rows, dims],
    ['norms', b.norms, 4],
    ['seqs', b.seqs, 4],
  ] as const) {
    const max = buf instanceof SharedArrayBuffer ? (buf.growable ? buf.maxByteLength : buf.byteLength) : -1;
    if (max !== b.maxRows * perRow)
      throw new InvalidInputError(`vectors.${field}`, `a SharedArrayBuffer reserving ${b.maxRows * perRow} bytes`, buf);
  }
  return b;
}

/** Bytes of the rows, norms and sequences the views span (what a reader can have touched). */
export function sharedVectorBytes(b: SharedVectorBuffers): number {
  return Atomics.load(new Int32Array(b.control, 0, CONTROL_INTS), CAPACITY) * (b.dims + 8);
}

/** Rows with a vector in the shared vectors. */
export function sharedVectorRows(b: SharedVectorBuffers): number {
  return Atomics.load(new Int32Array(b.control, 0, CONTROL_INTS), LIVE);
}

/**
 * One thread's handle on the item vectors: the shared buffers, or (`shared` false) buffers of its
 * own, made and grown here, when the database gave none. The same code reads and writes both.
 */
export class VectorRows {
  readonly dims: number;
  readonly shared: boolean;
  #buffers: SharedVectorBuffers;
  readonly #ctl: Int32Array;
  readonly #version: BigInt64Array;
  /** Views of `capacity` rows (see {@link refreshViews}). */
  rows: Int8Array = new Int8Array(0);
  inverseNorms: Float32Array = new Float32Array(0);
  seqs: Int32Array = new Int32Array(0);
  #held = 0;
  #written = 0;

  constructor(dims: number, buffers: SharedVectorBuffers | null) {
    this.dims = dims;
    this.shared = buffers !== null;
    this.#buffers = buffers ?? ownBuffers(dims, INITIAL_ROWS);
    this.#ctl = new Int32Array(this.#buffers.control, 0, CONTROL_INTS);
    this.#version = new BigInt64Array(this.#buffers.control, CONTROL_INTS * 4, 1);
    this.refreshViews();
  }

  /** The items version the rows reflect at least. */
  get version(): number {
    return Number(Atomics.load(this.#version, 0));
  }

  get live(): number {
    return Atomics.load(this.#ctl, LIVE);
  }

  get extent(): number {
    return Atomics.load(this.#ctl, EXTENT);
  }

  /** Bytes committed for the rows, norms and sequences. */
  get bytes(): number {
    return sharedVectorBytes(this.#buffers);
  }

  /** The sequence of all rows: odd while the writer is inside one (see {@link copyRows}). */
  get writing(): number {
    return Atomics.load(this.#ctl, WRITING);
  }

  /** Makes the views span the rows committed now (another thread may have grown them). */
  refreshViews(): void {
    const cap = Atomics.load(this.#ctl, CAPACITY);
    if (cap === this.inverseNorms.length && this.rows.buffer === this.#buffers.rows) return;
    const b = this.#buffers;
    this.rows = new Int8Array(b.rows, 0, cap * this.dims);
    this.inverseNorms = new Float32Array(b.norms, 0, cap);
    this.seqs = new Int32Array(b.seqs, 0, cap);
  }

  /**
   * Takes the write lock (re-entrant within a thread). A holder that shows no progress for
   * {@link STALLED_WAITS} waits of 1 s belongs to a thread that died: the lock is taken from it,
   * and the rows after `version` (the one it may have left half written among them) are written
   * again by the new holder.
   */
  lock(): void {
    if (this.#held++ > 0) return;
    const me = threadId + 1;
    let still = 0;
    let seen = Atomics.load(this.#ctl, PROGRESS);
    for (;;) {
      const owner = Atomics.compareExchange(this.#ctl, LOCK, 0, me);
      if (owner === 0) break;
      Atomics.wait(this.#ctl, LOCK, owner, 1000);
      const now = Atomics.load(this.#ctl, PROGRESS);
      still = now === seen ? still + 1 : 0;
      seen = now;
      if (still >= STALLED_WAITS && Atomics.compareExchange(this.#ctl, LOCK, owner, me) === owner) break;
    }
    this.refreshViews();
  }

  /** Takes the write lock when it is free (or this thread's already): whether it did. Never waits. */
  tryLock(): boolean {
    if (this.#held > 0 || Atomics.compareExchange(this.#ctl, LOCK, 0, threadId + 1) === 0) {
      this.#held++;
      this.refreshViews();
      return true;
    }
    return false;
  }

  unlock(): void {
    if (--this.#held > 0) return;
    Atomics.store(this.#ctl, LOCK, 0);
    Atomics.notify(this.#ctl, LOCK);
  }

  /** Raises the version the rows reflect (under the lock). */
  publish(version: number): void {
    if (version > this.version) Atomics.store(this.#version, 0, BigInt(version));
  }

  /** Writes row `o` (under the lock): int8 of `vector`, or none (`vector` null). */
  set(o: number, vector: Float32Array | null, toInt8: (v: Float32Array, out: Int8Array, offset: number) => void): void {
    if (o >= this.inverseNorms.length) this.#grow(o + 1);
    if (o >= this.extent) Atomics.store(this.#ctl, EXTENT, o + 1);
    const dims = this.dims;
    const rows = this.rows;
    const norms = this.inverseNorms;
    const had = norms[o]! > 0;
    const seq = Atomics.load(this.seqs, o) | 1;
    Atomics.store(this.#ctl, WRITING, Atomics.load(this.#ctl, WRITING) | 1);
    Atomics.store(this.seqs, o, seq);
    let inv = 0;
    if (vector === null) {
      rows.fill(0, o * dims, (o + 1) * dims);
    } else {
      toInt8(vector, rows, o * dims);
      let sq = 0;
      for (let k = 0; k < dims; k++) sq += rows[o * dims + k]! * rows[o * dims + k]!;
      inv = sq > 0 ? 1 / Math.sqrt(sq) : 0;
    }
    norms[o] = inv;
    Atomics.store(this.seqs, o, seq + 1);
    Atomics.add(this.#ctl, WRITING, 1);
    const delta = (inv > 0 ? 1 : 0) - (had ? 1 : 0);
    if (delta !== 0) Atomics.add(this.#ctl, LIVE, delta);
    this.tick();
  }

  /** Counts a row the lock's holder read (written or not): every {@link PROGRESS_ROWS}th shows the waiters it is alive. */
  tick(): void {
    if (++this.#written % PROGRESS_ROWS === 0) Atomics.add(this.#ctl, PROGRESS, 1);
  }

  /** Replaces every row with `rows`/`norms` (a loaded snapshot) at `version` (under the lock). */
  load(rows: Int8Array, norms: Float32Array, live: number, extent: number, version: number): void {
    if (norms.length > this.inverseNorms.length) this.#grow(norms.length);
    const all = this.seqs;
    Atomics.store(this.#ctl, WRITING, Atomics.load(this.#ctl, WRITING) | 1);
    for (let o = 0; o < all.length; o++) Atomics.store(all, o, Atomics.load(all, o) | 1);
    this.rows.fill(0);
    this.rows.set(rows);
    this.inverseNorms.fill(0);
    this.inverseNorms.set(norms);
    for (let o = 0; o < all.length; o++) Atomics.store(all, o, Atomics.load(all, o) + 1);
    Atomics.add(this.#ctl, WRITING, 1);
    Atomics.store(this.#ctl, LIVE, live);
    Atomics.store(this.#ctl, EXTENT, extent);
    Atomics.store(this.#version, 0, BigInt(version));
  }

  #grow(min: number): void {
    let cap = Math.max(INITIAL_ROWS, this.inverseNorms.length);
    while (cap < min) cap *= 2;
    const b = this.#buffers;
    cap = Math.min(cap, b.maxRows);
    if (cap < min) throw new RangeError(`item vectors: ordinal ${min - 1} is past the ${b.maxRows} reserved`);
    if (this.shared || (b.rows.growable && b.rows.maxByteLength >= cap * this.dims)) {
      growTo(b.rows, cap * this.dims);
      growTo(b.norms, cap * 4);
      growTo(b.seqs, cap * 4);
    } else {
      const next = ownBuffers(this.dims, cap);
      new Int8Array(next.rows).set(this.rows);
      new Float32Array(next.norms).set(this.inverseNorms);
      new Int32Array(next.seqs).set(this.seqs);
      this.#buffers = { ...next, control: b.control };
    }
    Atomics.store(this.#ctl, CAPACITY, cap);
    this.refreshViews();
  }
}

/**
 * Copies rows `[from, to)` of `src` (their int8 values and norms) into `rows` and `norms` from
 * index 0, each row whole: when the writer was inside a row (WRITING odd, or moved during the
 * copy), the rows' own sequences are read before and after a second copy, and a row a writer
 * was inside is copied again on its own until it reads whole (a row that stays odd for ~10 s is
 * left zero with a zero norm: its writer died). For a native kernel that cannot read shared memory.
 */
export function copyRows(src: VectorRows, from: number, to: number, rows: Int8Array, norms: Float32Array, seqsBefore: Int32Array): void {
  const dims = src.dims;
  // Mostly no writer is inside any row: one sequence for the whole range then, read before and after.
  const writing = src.writing;
  if ((writing & 1) === 0) {
    rows.set(src.rows.subarray(from * dims, to * dims));
    norms.set(src.inverseNorms.subarray(from, to));
    if (src.writing === writing) return;
  }
  const seqs = src.seqs;
  for (let o = from; o < to; o++) seqsBefore[o - from] = Atomics.load(seqs, o);
  rows.set(src.rows.subarray(from * dims, to * dims));
  norms.set(src.inverseNorms.subarray(from, to));
  for (let o = from; o < to; o++) {
    let seq = seqsBefore[o - from]!;
    if ((seq & 1) === 0 && Atomics.load(seqs, o) === seq) continue;
    const at = (o - from) * dims;
    let whole = false;
    for (let tries = 0; tries < COPY_SPINS + COPY_WAITS && !whole; tries++) {
      seq = Atomics.load(seqs, o);
      if ((seq & 1) === 0) {
        rows.set(src.rows.subarray(o * dims, (o + 1) * dims), at);
        norms[o - from] = src.inverseNorms[o]!;
        whole = Atomics.load(seqs, o) === seq;
      }
      if (!whole && tries >= COPY_SPINS) Atomics.wait(seqs, o, seq, 1);
    }
    if (!whole) {
      rows.fill(0, at, at + dims);
      norms[o - from] = 0;
    }
  }
}
const COPY_SPINS = 1024;
const COPY_WAITS = 10_000;

/** A growable buffer of `max` bytes, `initial` of them usable (a RangeError when it cannot be reserved). */
function reserve(initial: number, max: number): SharedArrayBuffer {
  return initial < max ? new SharedArrayBuffer(initial, { maxByteLength: max }) : new SharedArrayBuffer(max);
}

function growTo(buf: SharedArrayBuffer, bytes: number): void {
  if (buf.byteLength >= bytes) return;
  if (!buf.growable) return; // a fixed reservation is the maximum already
  buf.grow(bytes);
}

/** A thread's own buffers of `rows` rows (not shared with any other thread). */
function ownBuffers(dims: number, rows: number): SharedVectorBuffers {
  const control = new SharedArrayBuffer(CONTROL_BYTES);
  new Int32Array(control)[CAPACITY] = rows;
  return {
    control,
    rows: new SharedArrayBuffer(rows * dims),
    norms: new SharedArrayBuffer(rows * 4),
    seqs: new SharedArrayBuffer(rows * 4),
    dims,
    maxRows: Number.MAX_SAFE_INTEGER,
  };
}
