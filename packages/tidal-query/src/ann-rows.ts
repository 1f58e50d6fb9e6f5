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
  let read = 0;
  const batch = new AnnBatch(holder, dims, threads, () => onChunk?.(read));
  for (const row of rows.iterate(from, to) as IterableIterator<AnnRow>) {
    read++;
    if (batch.row(row.ordinal, row.present === 1, row.embedding) && performance.now() > deadline) return -1;
  }
  batch.flush();
  onChunk?.(read);
  return read;
}

/**
 * Rows applied to an index as they are read: a removal at once, additions in batches of
 * {@link BUILD_CHUNK}, so no more than one batch of embedding blobs is held (not every row's). The
 * rows must hold each ordinal at most once (one statement's), so removals and additions commute.
 */
export class AnnBatch {
  #keys: number[] = [];
  #blobs: Buffer[] = [];
  readonly #holder: AnnHolder;
  readonly #dims: number;
  readonly #threads: number | undefined;
  readonly #onFlush: (() => void) | undefined;

  constructor(holder: AnnHolder, dims: number, threads?: number, onFlush?: () => void) {
    this.#holder = holder;
    this.#dims = dims;
    this.#threads = threads;
    this.#onFlush = onFlush;
  }

  /** Takes one row (`embedding` null: none, removed); true when it completed a batch, applied. */
  row(ordinal: number, present: boolean, embedding: Buffer | null): boolean {
    if (!present || !embedding) {
      this.#holder.index?.remove(ordinal);
      return false;
    }
    this.#keys.push(ordinal);
    this.#blobs.push(embedding);
    if (this.#keys.length < BUILD_CHUNK) return false;
    this.flush();
    return true;
  }

  /** Applies the additions taken since the last batch (the index is created on the first). */
  flush(): void {
    if (this.#keys.length === 0) return;
    this.#holder.index ??= new AnnIndex(this.#dims);
    this.#holder.index.upsert(this.#keys, flatten(this.#blobs, this.#dims), this.#threads);
    this.#keys = [];
    this.#blobs = [];
    this.#onFlush?.();
  }
}

/** Row-major Float32 vectors from embedding blobs (byte copies: a blob's offset need not be aligned). */
export function flatten(blobs: Buffer[], dims: number): Float32Array {
  const flat = new Float32Array(blobs.length * dims);
  const bytes = new Uint8Array(flat.buffer);
  for (let i = 0; i < blobs.length; i++) bytes.set(blobs[i]!.subarray(0, dims * 4), i * dims * 4);
  return flat;
}
