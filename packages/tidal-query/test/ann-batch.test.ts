/**
 * AnnBatch, how a catalog sync feeds its ANN index: additions in batches of BUILD_CHUNK (so a sync
 * of 100 000 rows never holds every embedding blob at once), removals at once.
 */
import { describe, expect, it } from 'vitest';
import type { AnnIndex } from '../src/ann.js';
import { AnnBatch, BUILD_CHUNK } from '../src/ann-rows.js';

const DIMS = 2;

/** An index that records what it was asked: the keys of each upsert, and the removals. */
function recordingIndex(): { index: AnnIndex; upserts: number[][]; removed: number[]; vectors: number[] } {
  const upserts: number[][] = [];
  const removed: number[] = [];
  const vectors: number[] = [];
  const index = {
    upsert(keys: number[], flat: Float32Array) {
      upserts.push([...keys]);
      vectors.push(...flat);
    },
    remove(key: number) {
      removed.push(key);
    },
  } as unknown as AnnIndex;
  return { index, upserts, removed, vectors };
}

function blob(x: number): Buffer {
  return Buffer.from(new Float32Array([x, -x]).buffer);
}

describe('AnnBatch', () => {
  it('applies additions in batches of BUILD_CHUNK as the rows go by, the rest at flush', () => {
    const rec = recordingIndex();
    const holder = { index: rec.index };
    let flushes = 0;
    const batch = new AnnBatch(holder, DIMS, undefined, () => flushes++);
    const n = 2 * BUILD_CHUNK + 5;
    const full: boolean[] = [];
    for (let o = 0; o < n; o++) full.push(batch.row(o, true, blob(o)));
    // Two batches applied while reading, at the BUILD_CHUNK-th and 2·BUILD_CHUNK-th row.
    expect(rec.upserts.map((k) => k.length)).toEqual([BUILD_CHUNK, BUILD_CHUNK]);
    expect(full.flatMap((f, i) => (f ? [i] : []))).toEqual([BUILD_CHUNK - 1, 2 * BUILD_CHUNK - 1]);
    batch.flush();
    batch.flush();
    expect(rec.upserts.map((k) => k.length)).toEqual([BUILD_CHUNK, BUILD_CHUNK, 5]);
    expect(flushes).toBe(3);
    expect(rec.upserts.flat()).toEqual(Array.from({ length: n }, (_, o) => o));
    expect(rec.vectors.slice(2 * (n - 1))).toEqual([n - 1, -(n - 1)]);
  });

  it('removes a row without an embedding, or not present, at once; creates no index for removals', () => {
    const rec = recordingIndex();
    const holder = { index: rec.index as AnnIndex | null };
    const batch = new AnnBatch(holder, DIMS);
    batch.row(3, false, blob(3));
    batch.row(4, true, null);
    expect(rec.removed).toEqual([3, 4]);
    batch.flush();
    expect(rec.upserts).toEqual([]);

    const empty = { index: null as AnnIndex | null };
    new AnnBatch(empty, DIMS).row(1, false, null);
    expect(empty.index).toBeNull();
  });
});
