/**
 * The int8 item vectors once per process (shared/item-vectors.ts): a reader never takes a row half
 * written by a writer thread, and a query thread whose catalog read rows while another thread was
 * the writer still brings the shared rows up to the version it is asked for.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { AnnLifecycle, type AnnContext } from '../src/ann-lifecycle.js';
import { Catalog } from '../src/catalog.js';
import { ItemsWriter } from '../src/items-table.js';
import { measureThread } from '../src/memory.js';
import { cosineInt8, cosinesInt8, itemVectors, type Int8Vectors } from '../src/profiles/for-you-vectors.js';
import { VectorRows, copyRows, createSharedVectors, sharedVectorRows } from '../src/shared/item-vectors.js';
import type { QuerySchema } from '../src/types.js';

describe('shared item vectors against a writer thread', () => {
  it('a reader never takes half of one row and half of another (cosineInt8, cosinesInt8, copyRows)', async () => {
    const dims = 1024;
    const buffers = createSharedVectors(dims, 16)!;
    const url = new URL('../dist/shared/item-vectors.js', import.meta.url).href;
    // The writer rewrites row 3 over and over, all +1 then all −1 in turn, under the lock.
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       import(workerData.url).then(({ VectorRows }) => {
         const rows = new VectorRows(workerData.dims, workerData.buffers);
         const up = new Float32Array(workerData.dims).fill(1);
         const down = new Float32Array(workerData.dims).fill(-1);
         const toInt8 = (v, out, at) => { for (let k = 0; k < v.length; k++) out[at + k] = Math.round(v[k] * 127); };
         rows.lock(); rows.set(3, up, toInt8); rows.unlock();
         parentPort.postMessage('ready');
         // A pause between rewrites as long as one (a row is rewritten once per commit that changes
         // it, not back to back): without it a reader could find the row odd at every try.
         let spin = 0;
         for (let i = 0; i < 100000; i++) {
           rows.lock(); rows.set(3, i % 2 ? up : down, toInt8); rows.unlock();
           for (let k = 0; k < 2000; k++) spin += k;
         }
         parentPort.postMessage(spin > 0 ? 'done' : 'done');
       });`,
      { eval: true, workerData: { buffers, dims, url } },
    );
    try {
      let done = false;
      await new Promise<void>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('message', (m) => (m === 'ready' ? resolve() : (done = true)));
      });
      const reader = new VectorRows(dims, buffers);
      const v = reader as unknown as Int8Vectors;
      const p = new Float32Array(dims).fill(1);
      const pScale = 1 / Math.sqrt(dims);
      const out = new Float64Array(2);
      const copied = { rows: new Int8Array(2 * dims), norms: new Float32Array(2), seqs: new Int32Array(2) };
      const ordinals = [3, 3];
      let reads = 0;
      let overlapped = 0;
      const torn: number[] = [];
      const seen = new Set<number>();
      while (!done || reads === 0) {
        const before = Atomics.load(reader.seqs, 3);
        // Runs of copies, then runs of cosines: a cosine that waited for the writer ends in step
        // with it, and the copies after it drift across its rewrites.
        if (reads % 64 < 32) {
          copyRows(reader, 2, 4, copied.rows, copied.norms, copied.seqs);
          // The copy of row 3 is its second row: one value in every lane, and the norm of it.
          const lanes = new Set(copied.rows.subarray(dims));
          if ((lanes.size !== 1 || copied.norms[1] !== reader.inverseNorms[3]) && torn.length < 5) torn.push(lanes.size);
          seen.add(Math.sign(copied.rows[dims]!));
        } else {
          const one = cosineInt8(v, dims, p, pScale, 3);
          cosinesInt8(v, dims, p, pScale, ordinals, 0, 2, out);
          for (const c of [one, out[0]!, out[1]!]) {
            // A whole row is all +1 or all −1: its cosine with p is ±1 (to float rounding).
            if (Math.abs(Math.abs(c) - 1) > 1e-6 && torn.length < 5) torn.push(c);
            seen.add(Math.sign(c));
          }
        }
        if (Atomics.load(reader.seqs, 3) !== before) overlapped++;
        reads++;
        if (reads % 256 === 0) await new Promise((r) => setImmediate(r));
      }
      expect(torn).toEqual([]);
      // The reads overlapped the writer's rewrites, and saw both rows.
      expect(overlapped).toBeGreaterThan(0);
      expect([...seen].sort()).toEqual([-1, 1]);
    } finally {
      await worker.terminate();
    }
  });
});

const DIMS = 4;
const SCHEMA: QuerySchema = { kinds: [], metadata: {}, embeddingDims: DIMS };

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A query thread's items state over `file`, reading and writing `shared`. */
function thread(file: string, shared: ReturnType<typeof createSharedVectors>): { ctx: AnnContext; items: AnnLifecycle } {
  const db = new Database(file, { readonly: true });
  const catalog = new Catalog(db, SCHEMA);
  const ctx = { schema: SCHEMA, catalog, db, store: null, ann: null } as unknown as AnnContext;
  return { ctx, items: new AnnLifecycle(db, catalog, ctx, join(file, '..'), Number.POSITIVE_INFINITY, shared) };
}

describe('shared item vectors between query threads', () => {
  it('are one copy, and a thread whose catalog ran ahead of them brings them up to the version asked', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-shared-vectors-'));
    dirs.push(dir);
    const file = join(dir, 'tidal.db');
    const wdb = new Database(file);
    openStorage(wdb, file);
    const writer = new ItemsWriter(wdb);
    const put = (id: string, ordinal: number, embedding: number[], version: number): void => {
      writer.upsert({ id, ordinal, text: null, metadata: {}, createdAt: 0, embedding: Float32Array.from(embedding) }, version, false);
    };
    put('a', 0, [1, 0, 0, 0], 1);
    put('b', 1, [0, 1, 0, 0], 2);
    const shared = createSharedVectors(DIMS, 1024)!;
    const a = thread(file, shared);
    const b = thread(file, shared);
    a.items.sync(2);
    b.items.sync(2);
    const p = Float32Array.from([0, 0, 1, 0]);
    const sim = (t: { ctx: AnnContext }, o: number): number => cosineInt8(itemVectors(t.ctx), DIMS, p, 1, o);
    // One copy: both threads read the same rows, and neither counts a copy of its own.
    expect(itemVectors(a.ctx).rows.buffer).toBe(itemVectors(b.ctx).rows.buffer);
    expect(sharedVectorRows(shared)).toBe(2);
    expect(measureThread(a.ctx.catalog, 0).vectorRows).toBe(0);
    expect(measureThread(b.ctx.catalog, 0).vectorBytes).toBe(0);

    // b writes version 3; then a, asked for 3, finds it there and writes nothing, while its
    // catalog reads version 4 too.
    put('a', 0, [0, 0, 1, 0], 3);
    b.items.sync(3);
    put('b', 1, [0, 0, 1, 0], 4);
    a.items.sync(3);
    expect(a.ctx.catalog.version).toBe(4);
    expect(sim(b, 0)).toBeCloseTo(1, 5);
    // Asked for 4 now, a's catalog has it: a writes the rows its catalog read while b was the writer.
    a.items.sync(4);
    expect(sim(a, 1)).toBeCloseTo(1, 5);
    expect(sim(b, 1)).toBeCloseTo(1, 5);
    expect(sharedVectorRows(shared)).toBe(2);
    wdb.close();
  });

  it('are not reserved past what the platform can grow (each thread then keeps rows of its own)', () => {
    // 2^40 ordinals × 2^14 dimensions: 2^54 bytes, past what any platform reserves (Node 20: 4 GiB).
    expect(createSharedVectors(2 ** 14, 2 ** 40)).toBeNull();
    expect(createSharedVectors(0, 1024)).toBeNull();
    const dir = mkdtempSync(join(tmpdir(), 'tidal-shared-vectors-'));
    dirs.push(dir);
    const file = join(dir, 'tidal.db');
    const wdb = new Database(file);
    openStorage(wdb, file);
    new ItemsWriter(wdb).upsert(
      { id: 'a', ordinal: 0, text: null, metadata: {}, createdAt: 0, embedding: Float32Array.from([1, 0, 0, 0]) },
      1,
      false,
    );
    const a = thread(file, null);
    a.items.sync(1);
    expect(measureThread(a.ctx.catalog, 0).vectorRows).toBe(1);
    expect(cosineInt8(itemVectors(a.ctx), DIMS, Float32Array.from([1, 0, 0, 0]), 1, 0)).toBeCloseTo(1, 5);
    wdb.close();
  });
});
