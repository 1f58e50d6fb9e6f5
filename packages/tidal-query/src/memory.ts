/**
 * Each query thread's memory, published where the database's thread reads it without a message:
 * a SharedArrayBuffer (the "board") of {@link MEMORY_SLOTS} slots, one per query thread. A thread
 * claims a slot by writing its thread id into the slot's owner cell (compare-and-exchange), then
 * publishes its figures into the slot under a seqlock (odd while it writes), so a reader never
 * takes half of one publication and half of another. The figures are the byte lengths of the
 * arrays the thread holds and its isolate's heap, measured when published (see {@link measureThread}).
 */
import { threadId } from 'node:worker_threads';
import type { Catalog } from './catalog.js';
import { creatorListBytes } from './profiles/creator-lists.js';
import { itemVectorBytes } from './profiles/for-you-vectors.js';

/** Query threads the board has slots for; a thread past them publishes nothing. */
export const MEMORY_SLOTS = 64;

/** The figures of one query thread, in bytes unless said otherwise. */
export interface ThreadMemory {
  threadId: number;
  /** The catalogue's arrays: presence, creation times, metadata columns, created order, creator lists. */
  catalogBytes: number;
  /** Items present in the catalogue. */
  catalogItems: number;
  /** The text index's postings and per-document arrays. */
  textBytes: number;
  /** Terms with postings in the text index. */
  textTerms: number;
  /**
   * The popular subset (int8 copies of its members' rows), `for_you`'s neighbours kept per user,
   * and the int8 item vectors and their norms when the thread keeps rows of its own (the
   * process's shared rows are counted once, on the main thread).
   */
  vectorBytes: number;
  /** Items with an int8 vector in rows of the thread's own (0 when it reads the shared ones). */
  vectorRows: number;
  /** The catalog image the thread's catalogue and text index read (shared/catalog-image.ts): its generation, 0 for none. */
  imageGen: number;
  /** That image's bytes (shared memory, once per process whichever threads read it). */
  imageBytes: number;
  /** The thread's V8 heap: used and reserved. */
  heapUsed: number;
  heapTotal: number;
  /** ArrayBuffers allocated by the thread's isolate (the arrays above included). */
  arrayBuffers: number;
}

const FIELDS = [
  'catalogBytes',
  'catalogItems',
  'textBytes',
  'textTerms',
  'vectorBytes',
  'vectorRows',
  'imageGen',
  'imageBytes',
  'heapUsed',
  'heapTotal',
  'arrayBuffers',
] as const;
/** Int32 cells before the figures: per slot its owner's thread id, then per slot its sequence. */
const I32_CELLS = 2 * MEMORY_SLOTS;

/** A new board for {@link MEMORY_SLOTS} threads (the database's thread makes it, every query thread maps it). */
export function createMemoryBoard(): SharedArrayBuffer {
  return new SharedArrayBuffer(I32_CELLS * 4 + MEMORY_SLOTS * FIELDS.length * 8);
}

function views(board: SharedArrayBuffer): { i32: Int32Array; f64: Float64Array } {
  return { i32: new Int32Array(board, 0, I32_CELLS), f64: new Float64Array(board, I32_CELLS * 4, MEMORY_SLOTS * FIELDS.length) };
}

/**
 * Measures this thread's state: `catalog` (with the structures derived from it), `subsetBytes` and
 * the catalog image it reads (`image`, null for none).
 */
export function measureThread(
  catalog: Catalog,
  subsetBytes: number,
  image: { gen: number; bytes: number } | null = null,
): Omit<ThreadMemory, 'threadId'> {
  const text = catalog.text.stats();
  const vectors = itemVectorBytes(catalog);
  const mem = process.memoryUsage();
  return {
    catalogBytes: catalog.arrayBytes + creatorListBytes(catalog),
    catalogItems: catalog.presentCount,
    textBytes: text.arrayBytes,
    textTerms: text.terms,
    vectorBytes: vectors.bytes + subsetBytes,
    vectorRows: vectors.rows,
    imageGen: image?.gen ?? 0,
    imageBytes: image?.bytes ?? 0,
    heapUsed: mem.heapUsed,
    heapTotal: mem.heapTotal,
    arrayBuffers: mem.arrayBuffers,
  };
}

/** A query thread's side of the board. */
export class MemoryBoardWriter {
  readonly #i32: Int32Array;
  readonly #f64: Float64Array;
  /** This thread's slot, or -1 when every slot is taken. */
  readonly slot: number;

  constructor(board: SharedArrayBuffer, id: number = threadId) {
    const { i32, f64 } = views(board);
    this.#i32 = i32;
    this.#f64 = f64;
    let slot = -1;
    for (let s = 0; s < MEMORY_SLOTS && slot < 0; s++) if (Atomics.compareExchange(i32, s, 0, id) === 0) slot = s;
    this.slot = slot;
  }

  publish(m: Omit<ThreadMemory, 'threadId'>): void {
    const s = this.slot;
    if (s < 0) return;
    const seq = MEMORY_SLOTS + s;
    Atomics.add(this.#i32, seq, 1);
    const b = s * FIELDS.length;
    for (let f = 0; f < FIELDS.length; f++) this.#f64[b + f] = m[FIELDS[f]!];
    Atomics.add(this.#i32, seq, 1);
  }
}

/**
 * The figures of every thread in `live` that published, in slot order. A slot whose owner is not
 * in `live` (a thread that exited) is freed for the next thread.
 */
export function readMemoryBoard(board: SharedArrayBuffer, live: ReadonlySet<number>): ThreadMemory[] {
  const { i32, f64 } = views(board);
  const out: ThreadMemory[] = [];
  for (let s = 0; s < MEMORY_SLOTS; s++) {
    const owner = Atomics.load(i32, s);
    if (owner === 0) continue;
    if (!live.has(owner)) {
      // The exited thread writes no more: its figures go before the slot is free to claim.
      Atomics.store(i32, MEMORY_SLOTS + s, 0);
      Atomics.store(i32, s, 0);
      continue;
    }
    const m = { threadId: owner } as ThreadMemory;
    const b = s * FIELDS.length;
    let seq: number;
    do {
      while ((seq = Atomics.load(i32, MEMORY_SLOTS + s)) & 1);
      for (let f = 0; f < FIELDS.length; f++) m[FIELDS[f]!] = f64[b + f]!;
    } while (Atomics.load(i32, MEMORY_SLOTS + s) !== seq);
    // A slot claimed and not yet published (sequence 0) has no figures yet.
    if (seq > 0) out.push(m);
  }
  return out;
}
