import type Database from 'better-sqlite3';
import { toInt8 } from '../ann.js';
import type { Catalog } from '../catalog.js';
import type { QueryContext } from '../context.js';
import { blobToVector } from '../items-table.js';

/**
 * Every present item's embedding as int8 (scaled to ±127, see `toInt8`), by ordinal, kept per
 * catalog (one per worker): the similarity of a candidate that is not an ANN neighbour. Reading the
 * vectors row by row from the items table cost ~12 µs a row (about 4 ms for the ~300 such
 * candidates of a Full feed at 100 000 items); this copy is one pass over the table when first
 * needed (or at warm), then the rows changed since, and costs `embeddingDims` + 4 bytes per item
 * (13 MB at 100 000 items of 128 dimensions). int8 rounding moves a cosine by about 0.002 at 128
 * dimensions, the score by a tenth of that.
 */
export interface Int8Vectors {
  version: number;
  readonly db: Database.Database;
  /** Row `o` is item `o`'s vector; zero for an item without one (absent, or no embedding). */
  rows: Int8Array;
  /** 1 / |row|, 0 for an item without a vector. */
  inverseNorms: Float32Array;
  /** Rows with a vector (a non-zero inverse norm). */
  live: number;
  /** One past the highest ordinal that ever had a row. */
  extent: number;
  readonly all: Database.Statement;
  readonly changed: Database.Statement;
}

const int8Vectors = new WeakMap<Catalog, Int8Vectors>();

/** Bytes of `catalog`'s int8 vectors and their norms, and the rows with a vector (0 when none are kept). */
export function itemVectorBytes(catalog: Catalog): { bytes: number; rows: number } {
  const v = int8Vectors.get(catalog);
  return v ? { bytes: v.rows.byteLength + v.inverseNorms.byteLength, rows: v.live } : { bytes: 0, rows: 0 };
}

/** The int8 vectors of `ctx`'s items, brought up to its catalog's version. */
export function itemVectors(ctx: QueryContext): Int8Vectors {
  const dims = ctx.schema.embeddingDims;
  let v = int8Vectors.get(ctx.catalog);
  if (!v || v.db !== ctx.db) {
    v = newVectors(ctx);
    ctx.catalog.derivedBuilds++;
    for (const row of v.all.iterate(v.version) as IterableIterator<[number, number, Buffer | null]>) setRow(v, dims, row);
  } else if (v.version < ctx.catalog.version) {
    for (const row of v.changed.iterate(v.version, ctx.catalog.version) as IterableIterator<[number, number, Buffer | null]>)
      setRow(v, dims, row);
    v.version = ctx.catalog.version;
  }
  return v;
}

/**
 * The int8 vectors of `ctx`'s items, kept from now on by the catalog's refreshes: each row the
 * catalog reads goes through {@link feedVector}, and the caller sets `version` after each refresh,
 * so no query (and no warm) reads the table a second time for them. Call before the catalog's
 * first refresh; at 1 000 000 items the separate pass cost as much as the catalog's own.
 */
export function keptItemVectors(ctx: QueryContext): Int8Vectors {
  if (ctx.catalog.version !== 0) throw new Error('keptItemVectors: the catalog has been refreshed already');
  return newVectors(ctx);
}

/** One row the catalog read, into `v` (see {@link keptItemVectors}). */
export function feedVector(v: Int8Vectors, dims: number, ordinal: number, present: boolean, embedding: Buffer | null): void {
  setRow(v, dims, [ordinal, present ? 1 : 0, embedding]);
}

function newVectors(ctx: QueryContext): Int8Vectors {
  const v: Int8Vectors = {
    version: ctx.catalog.version,
    db: ctx.db,
    rows: new Int8Array(0),
    inverseNorms: new Float32Array(0),
    live: 0,
    extent: 0,
    all: ctx.db.prepare('SELECT ordinal, present, embedding FROM items WHERE version <= ? AND present = 1 AND embedding IS NOT NULL').raw(),
    changed: ctx.db.prepare('SELECT ordinal, present, embedding FROM items WHERE version > ? AND version <= ?').raw(),
  };
  int8Vectors.set(ctx.catalog, v);
  return v;
}

function setRow(v: Int8Vectors, dims: number, [o, present, blob]: [number, number, Buffer | null]): void {
  if (o >= v.inverseNorms.length) {
    let n = Math.max(1024, v.inverseNorms.length);
    while (n <= o) n *= 2;
    const rows = new Int8Array(n * dims);
    rows.set(v.rows);
    const norms = new Float32Array(n);
    norms.set(v.inverseNorms);
    v.rows = rows;
    v.inverseNorms = norms;
  }
  if (o >= v.extent) v.extent = o + 1;
  const had = v.inverseNorms[o]! > 0;
  if (present !== 1 || !blob || blob.byteLength !== dims * 4) {
    v.inverseNorms[o] = 0;
    v.rows.fill(0, o * dims, (o + 1) * dims);
    if (had) v.live--;
    return;
  }
  toInt8(blobToVector(blob), v.rows, o * dims);
  let sq = 0;
  for (let k = 0; k < dims; k++) sq += v.rows[o * dims + k]! * v.rows[o * dims + k]!;
  v.inverseNorms[o] = sq > 0 ? 1 / Math.sqrt(sq) : 0;
  v.live += (v.inverseNorms[o] > 0 ? 1 : 0) - (had ? 1 : 0);
}

/** cosine(p, row o) over the int8 copy, `pScale` = 1 / |p|; 0 for an item without a vector. */
export function cosineInt8(v: Int8Vectors, dims: number, p: Float32Array, pScale: number, o: number): number {
  const inv = o < v.inverseNorms.length ? v.inverseNorms[o]! : 0;
  if (inv === 0) return 0;
  const rows = v.rows;
  const base = o * dims;
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
  return (d0 + d1 + d2 + d3) * pScale * inv;
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
 * float64 once, in the same four sums, in the same order, as the one-row kernel.
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
    const inv = o < norms.length ? norms[o]! : 0;
    if (inv === 0) {
      out[i] = 0;
      continue;
    }
    let d0 = 0;
    let d1 = 0;
    let d2 = 0;
    let d3 = 0;
    for (let q = 0, w = o * quads, k = 0; q < quads; q++, w++, k += 4) {
      const x = words[w]!;
      d0 += p64[k]! * ((x << 24) >> 24);
      d1 += p64[k + 1]! * ((x << 16) >> 24);
      d2 += p64[k + 2]! * ((x << 8) >> 24);
      d3 += p64[k + 3]! * (x >> 24);
    }
    out[i] = (d0 + d1 + d2 + d3) * pScale * inv;
  }
}
