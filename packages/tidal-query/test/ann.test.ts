import {
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
  openSync,
  writeSync,
  closeSync,
  statSync,
  truncateSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DegradationLevel, InternalError } from 'tidal-load';
import { AnnIndex, exactNearestOnScale, exactNearestWithSimilarity, toCommonScale, toInt8 } from '../src/ann.js';
import { nativeInt8Index } from '../src/usearch-native.js';
import { FOR_YOU_BUDGETS, levelPlan } from '../src/plan.js';
import { SNAPSHOT_SIDECAR, discardSnapshot, readSnapshot, writeSnapshot, type AnnSnapshotMeta } from '../src/ann-snapshot.js';
import { mulberry32 } from './helpers/random.js';

const DIMS = 8;

/**
 * The index holds int8 rows scaled by their largest component: a similarity within 1e-2 of the
 * exact cosine (at 8 dimensions the largest error of 20 000 random pairs was 8.3e-3).
 */
const INT8_COSINE = 1e-2;

function vectors(n: number, seed: number): Float32Array {
  const r = mulberry32(seed);
  const out = new Float32Array(n * DIMS);
  for (let i = 0; i < out.length; i++) out[i] = r() * 2 - 1;
  return out;
}

function row(m: Float32Array, i: number): Float32Array {
  return m.slice(i * DIMS, (i + 1) * DIMS);
}

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(na * nb);
}

/** Exact nearest key by cosine among `live` (key → vector). */
function exactTop(live: Map<number, Float32Array>, q: Float32Array): number {
  let best = -1;
  let bestSim = -Infinity;
  for (const [k, v] of live) {
    const sim = cosine(v, q);
    if (sim > bestSim) {
      bestSim = sim;
      best = k;
    }
  }
  return best;
}

const N = 400;
const data = vectors(N, 1);
const keys = Array.from({ length: N }, (_, i) => i);
const queries = vectors(40, 2);

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'tidal-ann-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function saved(version = N): { meta: AnnSnapshotMeta; path: string } {
  const plain = new AnnIndex(DIMS);
  plain.upsert(keys, data);
  const meta = writeSnapshot(dir, plain, version);
  return { meta, path: join(dir, meta.file) };
}

describe('AnnIndex', () => {
  it('finds the exact nearest item, closest first, with cosine similarity', () => {
    const ann = new AnnIndex(DIMS);
    ann.upsert(keys, data);
    expect(ann.size).toBe(N);
    const live = new Map(keys.map((k) => [k, row(data, k)]));
    for (let q = 0; q < 40; q++) {
      const v = row(queries, q);
      const r = ann.search(v, 10);
      expect(r.keys[0]).toBe(exactTop(live, v));
      expect(Math.abs(r.similarity[0]! - cosine(row(data, r.keys[0]!), v))).toBeLessThan(INT8_COSINE);
      for (let i = 1; i < r.keys.length; i++) expect(r.similarity[i]!).toBeLessThanOrEqual(r.similarity[i - 1]!);
    }
  });

  it('holds int8 rows scaled by their largest component: similarities within 5e-3 of the exact cosine at 64 dimensions', () => {
    // usearch's own float → int8 cast scales a vector by its norm: the same search then strayed up
    // to 1.7e-2 from the exact cosine (ours 2.2e-3), so a vector that reached the addon as floats
    // would fail here.
    const dims = 64;
    const n = 2000;
    const r = mulberry32(9);
    const data = Float32Array.from({ length: n * dims }, () => r() * 2 - 1);
    const ann = new AnnIndex(dims);
    ann.upsert(
      Array.from({ length: n }, (_, i) => i),
      data,
      1,
    );
    let worst = 0;
    for (let q = 0; q < 200; q++) {
      const v = Float32Array.from({ length: dims }, () => r() * 2 - 1);
      const got = ann.search(v, 10);
      expect(got.keys).toHaveLength(10);
      for (let i = 0; i < got.keys.length; i++) {
        const k = got.keys[i]!;
        worst = Math.max(worst, Math.abs(got.similarity[i]! - cosine(data.slice(k * dims, (k + 1) * dims), v)));
      }
    }
    expect(worst).toBeLessThan(5e-3);
  });

  it('exact search: a matrix that is a view further into its buffer is searched where it is', () => {
    // usearch's addon reads a dataset from its buffer's start; rows 100.. of a larger matrix must
    // still answer with their own nearest (row numbers counted from the view).
    const rows = new Int8Array(200 * DIMS);
    for (let i = 0; i < 200; i++) toInt8(row(data, i), rows, i * DIMS);
    const view = rows.subarray(100 * DIMS);
    for (let q = 0; q < 10; q++) {
      const v = row(data, 100 + q * 7);
      expect(exactNearestWithSimilarity(view, DIMS, v, 1).rows[0]).toBe(q * 7);
    }
  });

  it("rows of one common scale: an inner-product search ranks as cosine over the floats, whatever the rows' norms", () => {
    // 2 048 rows of 128 dimensions (the popular subset's shape), their lengths spread over two
    // orders of magnitude, one row all in one component (it sets the scale), one row left out.
    const dims = 128;
    const n = 2048;
    const r = mulberry32(21);
    const gauss = () => (r() + r() + r() + r() - 2) * 1.7;
    const data = new Float32Array(n * dims);
    for (let i = 0; i < n; i++) {
      const length = 0.1 * 100 ** r();
      for (let k = 0; k < dims; k++) data[i * dims + k] = gauss() * length;
    }
    data.fill(0, 7 * dims, 8 * dims);
    data[7 * dims + 3] = 5;
    const rows = new Int8Array(n * dims);
    const inverseNorms = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      toInt8(data.subarray(i * dims, (i + 1) * dims), rows, i * dims);
      let sq = 0;
      for (let k = i * dims; k < (i + 1) * dims; k++) sq += rows[k]! * rows[k]!;
      inverseNorms[i] = 1 / Math.sqrt(sq);
    }
    inverseNorms[9] = 0;
    const scale = toCommonScale(rows, inverseNorms, dims);
    expect(scale).toBeCloseTo(127, 5);
    expect(rows.subarray(9 * dims, 10 * dims).every((x) => x === 0)).toBe(true);
    let found = 0;
    let worst = 0;
    for (let q = 0; q < 100; q++) {
      const v = Float32Array.from({ length: dims }, gauss);
      const exact = Array.from({ length: n }, (_, i) => i)
        .filter((i) => i !== 9)
        .map((i) => ({ i, sim: cosine(data.slice(i * dims, (i + 1) * dims), v) }))
        .sort((a, b) => b.sim - a.sim)
        .slice(0, 10)
        .map((e) => e.i);
      const got = exactNearestOnScale(rows, scale, dims, v, 10);
      expect(got.rows).toHaveLength(10);
      for (let i = 0; i < 10; i++) {
        const k = got.rows[i]!;
        if (exact.includes(k)) found++;
        worst = Math.max(worst, Math.abs(got.similarity[i]! - cosine(data.slice(k * dims, (k + 1) * dims), v)));
        if (i > 0) expect(got.similarity[i]!).toBeLessThanOrEqual(got.similarity[i - 1]!);
      }
    }
    // Rows searched by inner product at their own scale: recall@10 0.74 here (the longest rows win).
    expect(found / 1000).toBeGreaterThan(0.9);
    expect(worst).toBeLessThan(1e-2);
    // A view further into its buffer is searched where it is (see exactNearestWithSimilarity).
    const view = rows.subarray(100 * dims);
    for (let q = 0; q < 5; q++) {
      const v = data.slice((100 + q * 7) * dims, (101 + q * 7) * dims);
      expect(exactNearestOnScale(view, scale, dims, v, 1).rows[0]).toBe(q * 7);
    }
  });

  it('replaces and removes in place', () => {
    const ann = new AnnIndex(DIMS);
    ann.upsert(keys, data);
    ann.upsert([5], row(queries, 0));
    ann.remove(6);
    ann.remove(10_000); // absent: nothing happens
    expect(ann.size).toBe(N - 1);
    expect(ann.search(row(queries, 0), 1).keys[0]).toBe(5);
    expect([...ann.search(row(data, 6), N).keys]).not.toContain(6);
  });

  it('a mapped snapshot answers exactly as the index it was saved from', () => {
    const plain = new AnnIndex(DIMS);
    plain.upsert(keys, data);
    const meta = writeSnapshot(dir, plain, N);
    const viewed = AnnIndex.view(DIMS, join(dir, meta.file));
    const loaded = AnnIndex.load(DIMS, join(dir, meta.file));
    expect(viewed.layered).toBe(true);
    expect(loaded.layered).toBe(false);
    expect(viewed.size).toBe(N);
    for (let q = 0; q < 40; q++) {
      const v = row(queries, q);
      const want = plain.search(v, 20);
      for (const other of [viewed, loaded]) {
        const got = other.search(v, 20);
        expect([...got.keys]).toEqual([...want.keys]);
        expect([...got.similarity]).toEqual([...want.similarity]);
      }
    }
  });

  /** A snapshot of 5 000 random 16-dimension vectors written to `dir` and viewed; `r` goes on drawing. */
  function viewedSnapshot(seed: number): { ann: AnnIndex; file: string; dims: number; r: () => number } {
    const dims = 16;
    const n = 5_000;
    const r = mulberry32(seed);
    const plain = new AnnIndex(dims);
    plain.upsert(
      Array.from({ length: n }, (_, i) => i),
      Float32Array.from({ length: n * dims }, () => r() * 2 - 1),
      1,
    );
    const file = join(dir, writeSnapshot(dir, plain, n).file);
    return { ann: AnnIndex.view(dims, file), file, dims, r };
  }

  /**
   * For each breadth, `queries` searches of that many neighbours answer as usearch itself viewed
   * with `expansion_search` = the breadth; and the breadth is a real knob: the default search (128)
   * answers otherwise for some of them.
   */
  function expectSearchesAsViews(seed: number, breadths: readonly number[], queries: number): void {
    const { ann, file, dims, r } = viewedSnapshot(seed);
    let differs = 0;
    for (const breadth of breadths) {
      expect(breadth).toBeLessThan(128);
      const reference = nativeInt8Index(dims, 16, 128, breadth);
      reference.view(file);
      for (let q = 0; q < queries; q++) {
        const v = Float32Array.from({ length: dims }, () => r() * 2 - 1);
        const got = [...ann.search(v, breadth, breadth).keys];
        const [refKeys, , counts] = reference.search(toInt8(v), breadth, 1);
        expect(got, `breadth ${breadth}`).toEqual(Array.from(refKeys.subarray(0, Number(counts[0])), Number));
        if (got.join() !== [...ann.search(v, breadth).keys].join()) differs++;
      }
    }
    expect(differs).toBeGreaterThan(0);
  }

  it('layered: a breadth below 128 searches the snapshot with that breadth, as a view opened with it does', () => {
    expectSearchesAsViews(4, [levelPlan(DegradationLevel.NoDiversity).ann.topK], 40);
  });

  it('layered: every level of for_you searches with its own breadth, as a view opened with it does', () => {
    const breadths = FOR_YOU_BUDGETS.map((b) => b.ann);
    // Each level asks for fewer neighbours than the one above.
    for (let l = 1; l < breadths.length; l++) expect(breadths[l]!).toBeLessThan(breadths[l - 1]!);
    expectSearchesAsViews(11, breadths, 20);
  });

  it('layered: a breadth of 128 or more searches as the default; a swept snapshot file keeps its mapping', () => {
    const { ann, file, dims, r } = viewedSnapshot(7);
    const narrow = levelPlan(DegradationLevel.NoDiversity).ann.topK;
    const qs = Array.from({ length: 40 }, () => Float32Array.from({ length: dims }, () => r() * 2 - 1));
    const before = qs.map((v) => [...ann.search(v, narrow, narrow).keys]);
    for (const v of qs) {
      const built = [...ann.search(v, narrow).keys];
      for (const breadth of [128, 500]) expect([...ann.search(v, narrow, breadth).keys]).toEqual(built);
      // Below the narrowest breadth the narrowest one answers, and still fills k.
      expect([...ann.search(v, 10, 4).keys]).toHaveLength(10);
    }
    // A newer snapshot renamed into place sweeps this file: the index answers as before, from the
    // mapping it holds.
    rmSync(file);
    expect(qs.map((v) => [...ann.search(v, narrow, narrow).keys])).toEqual(before);
  });

  it('a small batch asked for every core is still built on one thread: every vector finds itself', () => {
    // Concurrent insertion leaves some vector of a small build unreachable in most builds (19 of
    // 30 builds of 300), so four builds would almost surely show one if small batches ran in parallel.
    for (let build = 0; build < 4; build++) {
      const ann = new AnnIndex(DIMS);
      ann.upsert(keys, data, 0);
      for (let i = 0; i < N; i++) expect(ann.search(row(data, i), 1).keys[0], `vector ${i} of build ${build}`).toBe(i);
    }
  });

  it('a bulk batch after small ones is added, though the index reserved room for one thread only', () => {
    const big = 1500;
    const more = vectors(big, 5);
    const ann = new AnnIndex(DIMS);
    ann.upsert(keys.slice(0, 300), data.subarray(0, 300 * DIMS));
    // Fits in the capacity the one-thread add reserved: usearch would refuse it concurrently.
    ann.upsert(keys.slice(300), data.subarray(300 * DIMS), 0);
    // Outgrows it: this one may use every core.
    ann.upsert(
      Array.from({ length: big }, (_, i) => N + i),
      more,
      0,
    );
    expect(ann.size).toBe(N + big);
    expect(ann.search(row(more, 7), 1).keys[0]).toBe(N + 7);
  });

  it('layered: replaced vectors move, deleted keys never come back, new keys are found', () => {
    const { path } = saved();
    const ann = AnnIndex.view(DIMS, path);
    const live = new Map(keys.map((k) => [k, row(data, k)]));
    // Replace 3 with a query vector, delete 7, add 1000.
    ann.upsert([3], row(queries, 0));
    live.set(3, row(queries, 0));
    ann.remove(7);
    live.delete(7);
    ann.upsert([1000], row(queries, 1));
    live.set(1000, row(queries, 1));
    expect(ann.size).toBe(N);

    expect(ann.search(row(queries, 0), 1).keys[0]).toBe(3);
    expect(ann.search(row(queries, 0), 1).similarity[0]).toBeCloseTo(1, 5);
    expect(ann.search(row(queries, 1), 1).keys[0]).toBe(1000);
    const all = ann.search(row(data, 7), N + 10);
    expect(all.keys.length).toBe(N);
    expect([...all.keys]).not.toContain(7);
    // Key 3 appears once, with its new vector's similarity.
    const old3 = ann.search(row(data, 3), N);
    const at = [...old3.keys].indexOf(3);
    expect([...old3.keys].filter((k) => k === 3)).toHaveLength(1);
    expect(Math.abs(old3.similarity[at]! - cosine(row(queries, 0), row(data, 3)))).toBeLessThan(INT8_COSINE);
    for (let q = 2; q < 40; q++) expect(ann.search(row(queries, q), 1).keys[0]).toBe(exactTop(live, row(queries, q)));
  });

  it('layered: with most of the snapshot deleted, searches still fill k with live keys', () => {
    const { path } = saved();
    const ann = AnnIndex.view(DIMS, path);
    const live = new Map<number, Float32Array>();
    for (const k of keys) {
      if (k % 10 === 0) live.set(k, row(data, k));
      else ann.remove(k);
    }
    expect(ann.size).toBe(N / 10);
    for (let q = 0; q < 40; q++) {
      const v = row(queries, q);
      const r = ann.search(v, 15);
      expect(r.keys.length).toBe(15);
      for (const k of r.keys) expect(k % 10).toBe(0);
      expect(r.keys[0]).toBe(exactTop(live, v));
    }
    // Delete and re-add the same key: live once, in the delta.
    ann.remove(0);
    ann.upsert([0], row(data, 0));
    expect(ann.size).toBe(N / 10);
    expect([...ann.search(row(data, 0), N).keys].filter((k) => k === 0)).toHaveLength(1);
  });

  it('a layered index cannot be saved; a file of other dimensions is refused', () => {
    const { path } = saved();
    expect(() => AnnIndex.view(DIMS, path).save(join(dir, 'x.usearch'))).toThrow(/layered/);
    expect(() => AnnIndex.view(DIMS * 2, path)).toThrow(/8-dimensional/);
    expect(() => AnnIndex.load(DIMS * 2, path)).toThrow(/8-dimensional/);
    expect(() => AnnIndex.load(DIMS * 2, path)).toThrow(InternalError);
  });
});

describe('ANN snapshot files', () => {
  it('round-trips: the sidecar describes the file, and a verified read accepts it', () => {
    const { meta } = saved(123);
    expect(meta).toMatchObject({ format: 1, version: 123, dims: DIMS, count: N });
    expect(meta.bytes).toBe(statSync(join(dir, meta.file)).size);
    const found = readSnapshot(dir, DIMS, 123, true);
    expect(found.kind).toBe('ok');
    if (found.kind === 'ok') expect(found.meta).toEqual(meta);
    expect(readdirSync(dir).sort()).toEqual([SNAPSHOT_SIDECAR, meta.file].sort());
  });

  it('missing when there is no sidecar, even with an orphan index file', () => {
    expect(readSnapshot(dir, DIMS, 10, true)).toEqual({ kind: 'missing' });
    const { meta } = saved();
    rmSync(join(dir, SNAPSHOT_SIDECAR));
    expect(readSnapshot(dir, DIMS, N, true)).toEqual({ kind: 'missing' });
    discardSnapshot(dir);
    expect(readdirSync(dir)).not.toContain(meta.file);
  });

  it('a new snapshot replaces the old one and sweeps leftovers', () => {
    const first = saved(10).meta;
    writeFileSync(join(dir, 'ann-5-abcdef.usearch.tmp'), 'partial');
    writeFileSync(join(dir, `${SNAPSHOT_SIDECAR}.0011.tmp`), '{');
    writeFileSync(join(dir, 'tidal.db'), 'not ours');
    const second = saved(20).meta;
    expect(second.file).not.toBe(first.file);
    expect(readdirSync(dir).sort()).toEqual([SNAPSHOT_SIDECAR, second.file, 'tidal.db'].sort());
    discardSnapshot(dir);
    expect(readdirSync(dir)).toEqual(['tidal.db']);
  });

  it('damaged index bytes fail the checksum', () => {
    const { path } = saved();
    const fd = openSync(path, 'r+');
    writeSync(fd, Buffer.alloc(64, 0xab), 0, 64, Math.floor(statSync(path).size / 2));
    closeSync(fd);
    const found = readSnapshot(dir, DIMS, N, true);
    expect(found.kind).toBe('unusable');
    if (found.kind === 'unusable') expect(found.reason).toMatch(/checksum/);
    // Without verification only the size is checked (what workers do after the elected one verified).
    expect(readSnapshot(dir, DIMS, N, false).kind).toBe('ok');
  });

  it('a truncated or missing index file, or a garbled sidecar, is unusable', () => {
    const { path } = saved();
    truncateSync(path, 100);
    expect(readSnapshot(dir, DIMS, N, false)).toMatchObject({ kind: 'unusable', reason: expect.stringMatching(/bytes/) });
    rmSync(path);
    expect(readSnapshot(dir, DIMS, N, false)).toMatchObject({ kind: 'unusable', reason: expect.stringMatching(/cannot read/) });
    writeFileSync(join(dir, SNAPSHOT_SIDECAR), '{"format":1,');
    expect(readSnapshot(dir, DIMS, N, false)).toMatchObject({ kind: 'unusable', reason: expect.stringMatching(/JSON/) });
    writeFileSync(join(dir, SNAPSHOT_SIDECAR), JSON.stringify({ format: 1, file: '../../etc/passwd' }));
    expect(readSnapshot(dir, DIMS, N, false)).toMatchObject({ kind: 'unusable', reason: expect.stringMatching(/malformed/) });
  });

  it('other dimensions or HNSW parameters are ignored; a snapshot newer than the items is unusable', () => {
    const { meta } = saved(50);
    expect(readSnapshot(dir, DIMS * 2, 50, true)).toMatchObject({ kind: 'ignored' });
    expect(readSnapshot(dir, DIMS, 49, true)).toMatchObject({ kind: 'unusable', reason: expect.stringMatching(/version 50/) });
    writeFileSync(join(dir, SNAPSHOT_SIDECAR), JSON.stringify({ ...meta, params: 'hnsw-other' }));
    expect(readSnapshot(dir, DIMS, 50, true)).toMatchObject({ kind: 'ignored' });
    writeFileSync(join(dir, SNAPSHOT_SIDECAR), JSON.stringify({ ...meta, format: 2 }));
    expect(readSnapshot(dir, DIMS, 50, true)).toMatchObject({ kind: 'ignored' });
    expect((JSON.parse(readFileSync(join(dir, SNAPSHOT_SIDECAR), 'utf8')) as AnnSnapshotMeta).file).toBe(meta.file);
  });
});
