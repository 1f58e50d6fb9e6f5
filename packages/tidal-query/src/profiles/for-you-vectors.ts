import type Database from 'better-sqlite3';
import { toInt8 } from '../ann.js';
import type { Catalog } from '../catalog.js';
import type { QueryContext } from '../context.js';
import { blobToVector } from '../items-table.js';
import { VectorRows, type SharedVectorBuffers } from '../shared/item-vectors.js';

/**
 * Every present item's embedding as int8 (scaled to ±127, see `toInt8`), by ordinal: the
 * similarity of a candidate that is not an ANN neighbour. Reading the vectors row by row from the
 * items table cost ~12 µs a row (about 4 ms for the ~300 such candidates of a Full feed at 100 000
 * items); these rows are one pass over the table when first needed (or at warm), then the rows
 * changed since, and cost `embeddingDims` + 8 bytes per item (13 MB at 100 000 items of 128
 * dimensions). A query worker's rows are the process's shared ones (shared/item-vectors.ts: one
 * copy for every query thread); a catalog without them keeps rows of its own. int8 rounding moves
 * a cosine by about 0.002 at 128 dimensions, the score by a tenth of that.
 */
export class Int8Vectors {
  /** The items version this thread's reads of the rows stand at (its catalog's, for kept rows). */
  version: number;
  readonly db: Database.Database;
  readonly store: VectorRows;
  readonly all: Database.Statement;
  readonly changed: Database.Statement;

  constructor(db: Database.Database, version: number, store: VectorRows) {
    this.db = db;
    this.version = version;
    this.store = store;
    this.all = db
      .prepare('SELECT ordinal, present, embedding FROM items WHERE version <= ? AND present = 1 AND embedding IS NOT NULL')
      .raw();
    this.changed = db.prepare('SELECT ordinal, present, embedding FROM items WHERE version > ? AND version <= ?').raw();
  }

  /** Row `o` is item `o`'s vector; zero for an item without one (absent, or no embedding). */
  get rows(): Int8Array {
    return this.store.rows;
  }

  /** 1 / |row|, 0 for an item without a vector. */
  get inverseNorms(): Float32Array {
    return this.store.inverseNorms;
  }

  /** Per row: odd while a writer changes it (see shared/item-vectors.ts). */
  get seqs(): Int32Array {
    return this.store.seqs;
  }

  /** Rows with a vector (a non-zero inverse norm). */
  get live(): number {
    return this.store.live;
  }

  /** One past the highest ordinal that ever had a row. */
  get extent(): number {
    return this.store.extent;
  }
}

const int8Vectors = new WeakMap<Catalog, Int8Vectors>();

/**
 * Bytes of `catalog`'s int8 vectors, their norms and sequences, and the rows with a vector (0 when
 * none are kept, or when they are the process's shared ones: those are counted once, not per thread).
 */
export function itemVectorBytes(catalog: Catalog): { bytes: number; rows: number } {
  const v = int8Vectors.get(catalog);
  return v && !v.store.shared ? { bytes: v.store.bytes, rows: v.live } : { bytes: 0, rows: 0 };
}

/** The int8 vectors of `ctx`'s items, brought up to its catalog's version. */
export function itemVectors(ctx: QueryContext): Int8Vectors {
  const dims = ctx.schema.embeddingDims;
  let v = int8Vectors.get(ctx.catalog);
  if (!v || v.db !== ctx.db) {
    v = newVectors(ctx, null);
    ctx.catalog.derivedBuilds++;
    for (const row of v.all.iterate(v.version) as IterableIterator<[number, number, Buffer | null]>) setRow(v, dims, row);
  } else if (v.version < ctx.catalog.version) {
    for (const row of v.changed.iterate(v.version, ctx.catalog.version) as IterableIterator<[number, number, Buffer | null]>)
      setRow(v, dims, row);
    v.version = ctx.catalog.version;
  }
  v.store.refreshViews();
  return v;
}

/**
 * The int8 vectors of `ctx`'s items, kept from now on by the catalog's refreshes: each row the
 * catalog reads goes through {@link feedVector}, and the caller sets `version` after each refresh,
 * so no query (and no warm) reads the table a second time for them. Call before the catalog's
 * first refresh; at 1 000 000 items the separate pass cost as much as the catalog's own. `shared`:
 * the process's rows (the caller writes them only under their lock), else rows of this thread's own.
 */
export function keptItemVectors(ctx: QueryContext, shared: SharedVectorBuffers | null = null): Int8Vectors {
  if (ctx.catalog.version !== 0) throw new Error('keptItemVectors: the catalog has been refreshed already');
  return newVectors(ctx, shared);
}

/** One row the catalog read, into `v` (see {@link keptItemVectors}). */
export function feedVector(v: Int8Vectors, dims: number, ordinal: number, present: boolean, embedding: Buffer | null): void {
  setRow(v, dims, [ordinal, present ? 1 : 0, embedding]);
}

/**
 * Takes `v`'s lock when its rows do not reach `target` yet (and returns true), and writes there the
 * rows between them and the caller's catalog at `catalogVersion` (which may have read rows while
 * another thread held the lock); the caller's refresh then writes the rows it reads after
 * `v.store.version`, publishes and unlocks. False: the rows reach `target` already, nothing is held
 * (or, without `wait`, another thread holds the lock: the caller brings them up after it).
 */
export function beginVectorWrite(v: Int8Vectors, dims: number, catalogVersion: number, target: number, wait = true): boolean {
  const store = v.store;
  if (store.version >= target) return false;
  if (!wait) {
    if (!store.tryLock()) return false;
  } else {
    store.lock();
  }
  if (store.version >= target) {
    store.unlock();
    return false;
  }
  if (catalogVersion > store.version) {
    for (const row of v.changed.iterate(store.version, catalogVersion) as IterableIterator<[number, number, Buffer | null]>)
      setRow(v, dims, row);
    store.publish(catalogVersion);
  }
  return true;
}

/**
 * Writes `v`'s rows up to `target` from the items table (under the lock), whatever the caller's
 * catalog has read; returns the rows read (0 when they reach `target` already).
 */
export function fillVectorRows(v: Int8Vectors, dims: number, target: number): number {
  const store = v.store;
  if (store.version >= target) return 0;
  store.lock();
  let n = 0;
  try {
    if (store.version >= target) return 0;
    for (const row of v.changed.iterate(store.version, target) as IterableIterator<[number, number, Buffer | null]>) {
      setRow(v, dims, row);
      n++;
    }
    store.publish(target);
  } finally {
    store.unlock();
  }
  return n;
}

function newVectors(ctx: QueryContext, shared: SharedVectorBuffers | null): Int8Vectors {
  const store = new VectorRows(ctx.schema.embeddingDims, shared);
  const v = new Int8Vectors(ctx.db, ctx.catalog.version, store);
  int8Vectors.set(ctx.catalog, v);
  return v;
}

function intoInt8(vector: Float32Array, out: Int8Array, offset: number): void {
  toInt8(vector, out, offset);
}

function setRow(v: Int8Vectors, dims: number, [o, present, blob]: [number, number, Buffer | null]): void {
  const ok = present === 1 && blob !== null && blob.byteLength === dims * 4;
  v.store.set(o, ok ? blobToVector(blob) : null, intoInt8);
}

/**
 * A reader that finds a row being written reads it again at once up to this many times (a writer
 * changes a row in about a microsecond), then sleeps 1 ms between tries: a writer descheduled
 * inside a row (a loaded machine) holds it for a time slice.
 */
const ROW_SPINS = 1024;
/**
 * Sleeps on one row before giving up on it (~10 s): a row odd for that long belongs to a writer
 * that died (the next writer rewrites it), and counts as without a vector until then.
 */
const ROW_WAITS = 10_000;

/** After the `tries`-th read of row `o` found it being written: whether to read it again (after a pause once past the spins). */
function retryRow(seqs: Int32Array, o: number, seq: number, tries: number): boolean {
  if (tries < ROW_SPINS) return true;
  if (tries >= ROW_SPINS + ROW_WAITS) return false;
  Atomics.wait(seqs, o, seq, 1);
  return true;
}

/**
 * cosine(p, row o) over the int8 rows, `pScale` = 1 / |p|; 0 for an item without a vector. The row
 * and its norm are read between two reads of the row's sequence (again if a writer was inside).
 */
export function cosineInt8(v: Int8Vectors, dims: number, p: Float32Array, pScale: number, o: number): number {
  const norms = v.inverseNorms;
  if (o >= norms.length) return 0;
  const seqs = v.seqs;
  const rows = v.rows;
  const base = o * dims;
  for (let tries = 0; ; tries++) {
    const seq = Atomics.load(seqs, o);
    if ((seq & 1) !== 0) {
      if (retryRow(seqs, o, seq, tries)) continue;
      return 0;
    }
    const inv = norms[o]!;
    if (inv === 0) {
      if (Atomics.load(seqs, o) === seq) return 0;
      if (retryRow(seqs, o, seq, tries)) continue;
      return 0;
    }
    // Four sums, so the additions do not wait on each other: 0.74x the time of one sum.
    let d0 = 0;
    let d1 = 0;
    let d2 = 0;
    let d3 = 0;
    let k = 0;
    for (; k + 3 < dims; k += 4) {
      d0 += p[k]! * rows[base + k]!;
      d1 += p[k + 1]! * rows[base + k + 1]!;
      d2 += p[k + 2]! * rows[base + k + 2]!;
      d3 += p[k + 3]! * rows[base + k + 3]!;
    }
    for (; k < dims; k++) d0 += p[k]! * rows[base + k]!;
    if (Atomics.load(seqs, o) === seq) return (d0 + d1 + d2 + d3) * pScale * inv;
    if (!retryRow(seqs, o, seq, tries)) return 0;
  }
}

/** Whether this machine stores the low byte first: {@link cosinesInt8} reads four int8 lanes per 32-bit load then. */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** Where the touch pass of {@link cosinesInt8} leaves its sum. */
let _touchSink = 0;

/**
 * {@link cosineInt8} of `p` with each of `ordinals[from..to)`, into `out` at the same indexes,
 * bit for bit the same values. A first pass touches every row (its norm and each 64-byte line), so
 * the rows' cache misses are in flight together rather than one row at a time (at 1 000 000 items
 * the int8 copy is 128 MB and a candidate's row is in no cache); then the dot products read 4 int8
 * lanes per 32-bit load (little-endian machines, `dims` a multiple of 4) with `p` widened to
 * float64 once, in the same four sums, in the same order, as the one-row kernel, each row between
 * two reads of its sequence as there.
 */
export function cosinesInt8(
  v: Int8Vectors,
  dims: number,
  p: Float32Array,
  pScale: number,
  ordinals: ArrayLike<number>,
  from: number,
  to: number,
  out: Float64Array,
): void {
  const rows = v.rows;
  const norms = v.inverseNorms;
  const seqs = v.seqs;
  let touched = 0;
  for (let i = from; i < to; i++) {
    const o = ordinals[i]!;
    if (o >= norms.length) continue;
    touched += norms[o]!;
    for (let at = o * dims, end = at + dims; at < end; at += 64) touched += rows[at]!;
  }
  _touchSink += touched;
  if (!LITTLE_ENDIAN || dims % 4 !== 0) {
    for (let i = from; i < to; i++) out[i] = cosineInt8(v, dims, p, pScale, ordinals[i]!);
    return;
  }
  const p64 = Float64Array.from(p);
  const words = new Int32Array(rows.buffer, rows.byteOffset, rows.length >> 2);
  const quads = dims >> 2;
  for (let i = from; i < to; i++) {
    const o = ordinals[i]!;
    out[i] = 0;
    if (o >= norms.length) continue;
    for (let tries = 0; ; tries++) {
      const seq = Atomics.load(seqs, o);
      if ((seq & 1) !== 0) {
        if (retryRow(seqs, o, seq, tries)) continue;
        break;
      }
      const inv = norms[o]!;
      let d0 = 0;
      let d1 = 0;
      let d2 = 0;
      let d3 = 0;
      if (inv !== 0) {
        for (let q = 0, w = o * quads, k = 0; q < quads; q++, w++, k += 4) {
          const x = words[w]!;
          d0 += p64[k]! * ((x << 24) >> 24);
          d1 += p64[k + 1]! * ((x << 16) >> 24);
          d2 += p64[k + 2]! * ((x << 8) >> 24);
          d3 += p64[k + 3]! * (x >> 24);
        }
      }
      if (Atomics.load(seqs, o) !== seq) {
        if (retryRow(seqs, o, seq, tries)) continue;
        break;
      }
      out[i] = inv === 0 ? 0 : (d0 + d1 + d2 + d3) * pScale * inv;
      break;
    }
  }
}
