import {
  sharedVectorBytes,
  sharedVectorRows,
  type SharedRecordsBuffers,
  type SharedVectorBuffers,
  type SignalArena,
  type ThreadMemory,
} from 'tidal-query';
import type { NativeHeapStats } from './native-heap.js';
import type { SharedStateWriter } from './shared-state.js';

/**
 * The memory of the database by component, in bytes (`stats().memory`). Every figure is the byte
 * length of the buffers the component holds (or, for `process` and the heaps, what V8 and the OS
 * report), measured when `stats()` is called; a query thread's are as it last published them (at
 * its last warm, then every 1024 queries it runs). Only the cursors' figure is an estimate: their
 * pinned rows are objects, not buffers.
 */
export interface MemoryStats {
  /** The whole process (`process.memoryUsage()`): resident set, the main thread's heap, external memory and ArrayBuffers. */
  process: { rss: number; heapUsed: number; heapTotal: number; external: number; arrayBuffers: number };
  /** The signal state: its SharedArrayBuffers (index, slots, slot orders), one copy per process; `slots` in use. */
  signals: { bytes: number; slots: number };
  /**
   * Users, sessions and co-engagement lists: the bytes of the shared records every thread reads
   * them from (0 without a worker module: they then live in the main thread's heap), the bytes of
   * the records' arena written so far (`usedBytes`: the pages a reader can have touched; the arena
   * doubles as it grows, so `bytes` may be up to twice that) and of the blocks the records take
   * now (`liveBytes`), the records kept there, and the users and sessions the database's thread knows;
   * `held`: the users whose whole state that thread keeps in its heap (every user without a worker
   * module; with one, those whose record found no room, `TIDAL_SHARED_STATE_FULL`).
   */
  users: { bytes: number; usedBytes: number; liveBytes: number; records: number; users: number; held: number; sessions: number };
  /** Cursor chains' pinned rankings (an estimate from the rows held) and how many. */
  cursors: { bytes: number; pinned: number };
  /**
   * Per query thread, summed over the threads that published (`copies`): each holds its own copy.
   * `catalog`: presence, creation times, metadata columns, created order, creator lists; `items` present.
   */
  catalog: { bytes: number; items: number; copies: number };
  /** The text index's postings and per-document arrays, summed over the query threads; `terms` of one copy. */
  text: { bytes: number; terms: number; copies: number };
  /**
   * The catalog images (catalogue and text index written once into shared memory by one query
   * thread, docs/architecture.md): `bytes` of the distinct images the threads read now, counted
   * once; `images` how many (two while threads move from one to the next); `threads` reading one.
   * `catalog.bytes` and `text.bytes` are then each thread's own rows beside its image.
   */
  catalogImage: { bytes: number; images: number; threads: number };
  /**
   * The int8 item vectors and their norms, and the popular subset: `sharedBytes` the rows every
   * query thread reads, once per process; `bytes` those plus what each thread holds of its own (the
   * popular subset; the rows too where they are not shared), summed; `rows` with a vector;
   * `copies` the threads holding rows of their own (0 when they are shared).
   */
  vectors: { bytes: number; sharedBytes: number; rows: number; copies: number };
  /** Every thread's heap: the main thread (`threadId` 0) first, then each query thread with its components. */
  threads: ThreadMemory[];
  /** Freed native memory given back to the kernel after each warm round (native-heap.ts). */
  nativeHeap: NativeHeapStats;
}

function buffersBytes(...buffers: SharedArrayBuffer[]): number {
  let bytes = 0;
  for (const b of buffers) bytes += b.byteLength;
  return bytes;
}

export function signalBytes(arena: SignalArena): number {
  const o = arena.order;
  return buffersBytes(arena.control, arena.index, arena.slots, o.control, ...o.entries, ...o.dirty);
}

export function recordBytes(buffers: SharedRecordsBuffers): number {
  return buffersBytes(buffers.control, buffers.index, buffers.arena);
}

/** What {@link memoryStats} reads. */
export interface MemorySources {
  arena: SignalArena;
  slots: number;
  shared: SharedStateWriter | null;
  vectors: SharedVectorBuffers | null;
  users: number;
  heldUsers: number;
  sessions: number;
  cursors: { bytes: number; pinned: number };
  workers: readonly ThreadMemory[];
  nativeHeap: NativeHeapStats;
}

export function memoryStats(src: MemorySources): MemoryStats {
  const mem = process.memoryUsage();
  const main: ThreadMemory = {
    threadId: 0,
    catalogBytes: 0,
    catalogItems: 0,
    textBytes: 0,
    textTerms: 0,
    vectorBytes: 0,
    vectorRows: 0,
    imageGen: 0,
    imageBytes: 0,
    heapUsed: mem.heapUsed,
    heapTotal: mem.heapTotal,
    arrayBuffers: mem.arrayBuffers,
  };
  const sum = (f: (t: ThreadMemory) => number): number => src.workers.reduce((a, t) => a + f(t), 0);
  const most = (f: (t: ThreadMemory) => number): number => src.workers.reduce((a, t) => Math.max(a, f(t)), 0);
  const copies = src.workers.length;
  const sharedBytes = src.vectors === null ? 0 : sharedVectorBytes(src.vectors);
  return {
    process: { rss: mem.rss, heapUsed: mem.heapUsed, heapTotal: mem.heapTotal, external: mem.external, arrayBuffers: mem.arrayBuffers },
    signals: { bytes: signalBytes(src.arena), slots: src.slots },
    users: {
      bytes: src.shared === null ? 0 : recordBytes(src.shared.buffers),
      usedBytes: src.shared?.stats.usedBytes ?? 0,
      liveBytes: src.shared?.stats.liveBytes ?? 0,
      records: src.shared?.stats.records ?? 0,
      users: src.users,
      held: src.heldUsers,
      sessions: src.sessions,
    },
    cursors: src.cursors,
    catalog: { bytes: sum((t) => t.catalogBytes), items: most((t) => t.catalogItems), copies },
    text: { bytes: sum((t) => t.textBytes), terms: most((t) => t.textTerms), copies },
    catalogImage: imagesOf(src.workers),
    vectors: {
      bytes: sharedBytes + sum((t) => t.vectorBytes),
      sharedBytes,
      rows: Math.max(
        most((t) => t.vectorRows),
        src.vectors === null ? 0 : sharedVectorRows(src.vectors),
      ),
      copies: src.workers.filter((t) => t.vectorRows > 0).length,
    },
    threads: [main, ...src.workers],
    nativeHeap: src.nativeHeap,
  };
}

/** The distinct catalog images `threads` read: each counted once. */
function imagesOf(threads: readonly ThreadMemory[]): MemoryStats['catalogImage'] {
  const images = new Map<number, number>();
  let readers = 0;
  for (const t of threads) {
    if (t.imageGen === 0) continue;
    readers++;
    images.set(t.imageGen, t.imageBytes);
  }
  let bytes = 0;
  for (const b of images.values()) bytes += b;
  return { bytes, images: images.size, threads: readers };
}
