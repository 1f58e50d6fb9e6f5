/**
 * The memory board (memory.ts): each query thread's figures, published under a seqlock and read by
 * the database's thread; and what a thread measures, from the arrays it holds.
 */
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { MEMORY_SLOTS, MemoryBoardWriter, createMemoryBoard, measureThread, readMemoryBoard, type ThreadMemory } from '../src/memory.js';
import { creatorListsOf } from '../src/profiles/creator-lists.js';
import { itemVectors } from '../src/profiles/for-you-vectors.js';
import type { QuerySchema } from '../src/types.js';

const DIMS = 8;
const SCHEMA: QuerySchema = {
  kinds: [],
  metadata: { creator: 'string', duration: 'number' },
  embeddingDims: DIMS,
  creatorField: 'creator',
};

function figures(v: number): Omit<ThreadMemory, 'threadId'> {
  return {
    catalogBytes: v,
    catalogItems: v,
    textBytes: v,
    textTerms: v,
    vectorBytes: v,
    vectorRows: v,
    imageGen: v,
    imageBytes: v,
    heapUsed: v,
    heapTotal: v,
    arrayBuffers: v,
  };
}

describe('memory board', () => {
  it('gives each thread a slot, reads the live ones, frees an exited thread’s slot without its figures', () => {
    const board = createMemoryBoard();
    const a = new MemoryBoardWriter(board, 101);
    const b = new MemoryBoardWriter(board, 102);
    expect([a.slot, b.slot]).toEqual([0, 1]);
    a.publish(figures(7));
    // b claimed a slot and has not published: no figures of it yet.
    expect(readMemoryBoard(board, new Set([101, 102]))).toEqual([{ threadId: 101, ...figures(7) }]);
    b.publish(figures(9));
    expect(readMemoryBoard(board, new Set([101, 102])).map((t) => t.threadId)).toEqual([101, 102]);
    // 101 exited: its slot is freed, and the next thread there shows nothing until it publishes.
    expect(readMemoryBoard(board, new Set([102])).map((t) => t.threadId)).toEqual([102]);
    const c = new MemoryBoardWriter(board, 103);
    expect(c.slot).toBe(0);
    expect(readMemoryBoard(board, new Set([102, 103])).map((t) => t.threadId)).toEqual([102]);
    c.publish(figures(3));
    expect(readMemoryBoard(board, new Set([102, 103]))).toEqual([
      { threadId: 103, ...figures(3) },
      { threadId: 102, ...figures(9) },
    ]);
  });

  it('a thread past the slots publishes nothing', () => {
    const board = createMemoryBoard();
    const live = new Set<number>();
    for (let i = 1; i <= MEMORY_SLOTS; i++) {
      live.add(i);
      new MemoryBoardWriter(board, i).publish(figures(i));
    }
    const late = new MemoryBoardWriter(board, 999);
    expect(late.slot).toBe(-1);
    late.publish(figures(1));
    live.add(999);
    expect(readMemoryBoard(board, live)).toHaveLength(MEMORY_SLOTS);
  });

  it('a reader never takes half of one publication and half of another, against a writer thread', async () => {
    const board = createMemoryBoard();
    const url = new URL('../dist/memory.js', import.meta.url).href;
    const worker = new Worker(
      `const { workerData, parentPort, threadId } = require('node:worker_threads');
       import(workerData.url).then(({ MemoryBoardWriter }) => {
         const w = new MemoryBoardWriter(workerData.board, threadId);
         const f = (v) => ({ catalogBytes: v, catalogItems: v, textBytes: v, textTerms: v, vectorBytes: v, vectorRows: v, imageGen: v, imageBytes: v, heapUsed: v, heapTotal: v, arrayBuffers: v });
         w.publish(f(1));
         parentPort.postMessage('ready');
         for (let i = 2; i <= 300000; i++) w.publish(f(i));
         parentPort.postMessage('done');
       });`,
      { eval: true, workerData: { board, url } },
    );
    try {
      const live = new Set([worker.threadId]);
      let done = false;
      await new Promise<void>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('message', (m) => (m === 'ready' ? resolve() : (done = true)));
      });
      let reads = 0;
      const torn: string[] = [];
      const seen = new Set<number>();
      while (!done || reads === 0) {
        const [t] = readMemoryBoard(board, live);
        reads++;
        const values = Object.entries(t!).filter(([k]) => k !== 'threadId');
        if (values.some(([, v]) => v !== t!.catalogBytes) && torn.length < 5) torn.push(JSON.stringify(t));
        seen.add(t!.catalogBytes);
        // Let the worker's 'done' message in now and then.
        if (reads % 1000 === 0) await new Promise((r) => setImmediate(r));
      }
      expect(torn).toEqual([]);
      // The reads saw the writer move on: they overlapped its publications.
      expect(seen.size).toBeGreaterThan(1);
    } finally {
      await worker.terminate();
    }
  });
});

describe('measureThread', () => {
  it('is the byte length of the arrays the catalogue, text index and vectors hold, and grows with the items', () => {
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const writer = new ItemsWriter(db);
    const catalog = new Catalog(db, SCHEMA);
    const ctx = { schema: SCHEMA, catalog, db } as unknown as QueryContext;
    let version = 0;
    const write = (from: number, to: number): void => {
      for (let o = from; o < to; o++) {
        const embedding = Float32Array.from({ length: DIMS }, (_, d) => ((o + d) % 7) - 3);
        writer.upsert(
          {
            ordinal: o,
            id: `i${o}`,
            text: `alpha beta word${o}`,
            metadata: { creator: `c${o % 9}`, duration: o },
            createdAt: o,
            embedding,
          },
          ++version,
          false,
        );
      }
      catalog.refresh();
    };
    write(0, 100);
    const v = itemVectors(ctx);
    const small = measureThread(catalog, 0);
    expect(small.vectorBytes).toBe(v.rows.byteLength + v.inverseNorms.byteLength + v.seqs.byteLength);
    expect(small.vectorRows).toBe(100);
    expect(small.textBytes).toBe(catalog.text.stats().arrayBytes);
    expect(small.catalogItems).toBe(100);
    // Presence (1 byte), creation time (8) and two columns (4 + 8) per ordinal of the capacity.
    const cap = catalog.present.length;
    expect(small.catalogBytes).toBeGreaterThanOrEqual(cap * (1 + 8 + 4 + 8));
    // The created order and the creator lists count once built.
    const withLists = (creatorListsOf(catalog, 'creator'), catalog.byCreatedDesc(), measureThread(catalog, 0));
    expect(withLists.catalogBytes).toBeGreaterThanOrEqual(small.catalogBytes + 2 * 100 * 4);
    expect(measureThread(catalog, 1234).vectorBytes).toBe(small.vectorBytes + 1234);

    write(100, 5000);
    itemVectors(ctx);
    const large = measureThread(catalog, 0);
    expect(large.catalogBytes).toBeGreaterThan(withLists.catalogBytes);
    expect(large.textBytes).toBeGreaterThan(small.textBytes);
    expect(large.textTerms).toBeGreaterThan(small.textTerms);
    expect(large.vectorBytes).toBeGreaterThanOrEqual(5000 * (DIMS + 4));
    expect(large.vectorRows).toBe(5000);
    expect(large.heapUsed).toBeGreaterThan(0);
  });
});
