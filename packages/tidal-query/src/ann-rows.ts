import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { AnnIndex } from './ann.js';

/** Rows per usearch add when building: bounds the Float32 copy, and lets a budget be checked. */
export const BUILD_CHUNK = 8192;

interface AnnRow {
  ordinal: number;
  present: number;
  embedding: Buffer | null;
  version: number;
}

/** Where rows are applied: the index is created on the first embedding. */
export interface AnnHolder {
  index: AnnIndex | null;
}

/** Item rows with `from < version <= to`, in version order, with what the ANN index needs. */
export function annRowsStatement(db: Database.Database): Database.Statement<[number, number]> {
  return db.prepare('SELECT ordinal, present, embedding, version FROM items WHERE version > ? AND version <= ? ORDER BY version');
}

/**
 * Applies the rows with `from < version <= to` to `holder`'s index (created on the first
 * embedding), in batches of {@link BUILD_CHUNK}, calling `onChunk` with the rows read so far after
 * each. `threads` as `AnnIndex.upsert` takes it. Returns the rows read, or -1 when `deadline`
 * (a `performance.now()` time) passed first.
 */
export function applyAnnRows(
  rows: Database.Statement<[number, number]>,
  holder: AnnHolder,
  dims: number,
  from: number,
  to: number,
  threads: number | undefined,
  deadline: number,
  onChunk?: (read: number) => void,
): number {
  let keys: number[] = [];
  let blobs: Buffer[] = [];
  let read = 0;
  const flush = (): void => {
    holder.index ??= new AnnIndex(dims);
    holder.index.upsert(keys, flatten(blobs, dims), threads);
    keys = [];
    blobs = [];
    onChunk?.(read);
  };
  for (const row of rows.iterate(from, to) as IterableIterator<AnnRow>) {
    read++;
    // One row per ordinal in one statement, so removals and additions commute.
    if (row.present === 1 && row.embedding) {
      keys.push(row.ordinal);
      blobs.push(row.embedding);
      if (keys.length >= BUILD_CHUNK) {
        flush();
        if (performance.now() > deadline) return -1;
      }
    } else {
      holder.index?.remove(row.ordinal);
    }
  }
  if (keys.length > 0) flush();
  onChunk?.(read);
  return read;
}

/** Row-major Float32 vectors from embedding blobs (byte copies: a blob's offset need not be aligned). */
export function flatten(blobs: Buffer[], dims: number): Float32Array {
  const flat = new Float32Array(blobs.length * dims);
  const bytes = new Uint8Array(flat.buffer);
  for (let i = 0; i < blobs.length; i++) bytes.set(blobs[i]!.subarray(0, dims * 4), i * dims * 4);
  return flat;
}
