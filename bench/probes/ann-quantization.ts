/**
 * How the HNSW index holds its vectors, three ways over the same bench corpus vectors (`--items`,
 * 128 dimensions, the graph's parameters tidal's): half precision through usearch's `Index` (what
 * tidal built before), int8 through usearch's `Index` (its own float → int8 cast, which scales a
 * vector by its norm), and tidal's `AnnIndex` (int8 rows scaled by their largest component, fed to
 * the addon as they are). Each is built (2 threads) and saved, then mapped as a query worker maps
 * it, and `--queries` context vectors are searched at k = `--k` as `AnnIndex` searches (k + 16 asked,
 * the nearest k kept; for_you's Full: 64), the three taking turns, `--reps` times. Reports the build time, the file size, search
 * p50 / p90, recall@10 and of the exact k against the exact float search (the first 200 queries),
 * and the largest and p99 error of a returned similarity against the exact cosine.
 *
 * Then the exact int8 pass over a popular subset's shape (the first `--rows` vectors, `--subset-k`
 * nearest: for_you's neighbours at NoDiversity), two ways taking turns: cosine over rows each
 * scaled by its largest component (`exactNearestWithSimilarity`), and an inner product over rows
 * brought to one common scale (`toCommonScale`, `exactNearestOnScale`, what the popular subset
 * holds). Time per search, recall@10 against the exact float cosine over the same rows, similarity error.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AnnIndex, cosine, exactNearestOnScale, exactNearestWithSimilarity, toCommonScale, toInt8 } from 'tidal-query';
import { Index, MetricKind, ScalarKind, exactSearch } from 'usearch';
import { Corpus } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, loadAverage, nowMs, parseOptions, summarize } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('ann-quantization', {
  items: { type: 'int', default: 100_000, description: 'bench corpus vectors indexed' },
  queries: { type: 'int', default: 400, description: 'context vectors searched' },
  k: { type: 'int', default: 64, description: 'neighbours per search, and the search breadth' },
  reps: { type: 'int', default: 3, description: 'passes over the queries' },
  rows: { type: 'int', default: 2048, description: "the exact pass's rows (the popular subset for_you searches at NoDiversity)" },
  'subset-k': { type: 'int', default: 32, description: "the exact pass's neighbours (for_you's breadth at NoDiversity)" },
});
const DIMS = 128;
const EXACT = 200;
/** `AnnIndex` asks a snapshot for k + 16 neighbours (so a few tombstones cost no retry): the usearch sides do the same. */
const ASKED_BEYOND_K = 16;

interface Side {
  name: string;
  buildMs: number;
  bytes: number;
  search(q: Float32Array): { keys: number[]; similarity: number[] };
}

function usearchIndex(quantization: ScalarKind, breadth: number): Index {
  return new Index({
    dimensions: DIMS,
    metric: MetricKind.Cos,
    quantization,
    connectivity: 16,
    expansion_add: 128,
    expansion_search: breadth,
    multi: false,
  });
}

function usearchSide(name: string, quantization: ScalarKind, matrix: Float32Array, n: number, dir: string): Side {
  const t = nowMs();
  const built = usearchIndex(quantization, 128);
  built.add(
    BigUint64Array.from({ length: n }, (_, i) => BigInt(i)),
    matrix,
    2,
  );
  const buildMs = nowMs() - t;
  const file = path.join(dir, `${name}.usearch`);
  built.save(file);
  const viewed = usearchIndex(quantization, opts.k);
  viewed.view(file);
  return {
    name,
    buildMs,
    bytes: fs.statSync(file).size,
    search: (q) => {
      // As `AnnIndex.search` asks a snapshot with no tombstones: 16 more than k, the nearest k kept.
      const m = viewed.search(q, opts.k + ASKED_BEYOND_K, 1);
      return { keys: Array.from(m.keys.slice(0, opts.k), Number), similarity: Array.from(m.distances.slice(0, opts.k), (d) => 1 - d) };
    },
  };
}

function tidalSide(matrix: Float32Array, n: number, dir: string): Side {
  const t = nowMs();
  const built = new AnnIndex(DIMS);
  built.upsert(
    Array.from({ length: n }, (_, i) => i),
    matrix,
    2,
  );
  const buildMs = nowMs() - t;
  const file = path.join(dir, 'tidal.usearch');
  built.save(file);
  const viewed = AnnIndex.view(DIMS, file);
  return {
    name: 'tidal int8 (max-scaled)',
    buildMs,
    bytes: fs.statSync(file).size,
    search: (q) => {
      const m = viewed.search(q, opts.k, opts.k);
      return { keys: Array.from(m.keys), similarity: Array.from(m.similarity) };
    },
  };
}

/** The exact int8 pass over the first `--rows` vectors, both ways (see the header). */
function subsetPass(report: Report, matrix: Float32Array, queries: Float32Array[]): void {
  const rows = Math.min(opts.rows, matrix.length / DIMS);
  const k = Math.min(opts['subset-k'], rows);
  const own = new Int8Array(rows * DIMS);
  const norms = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    toInt8(matrix.subarray(r * DIMS, (r + 1) * DIMS), own, r * DIMS);
    let sq = 0;
    for (let i = r * DIMS; i < (r + 1) * DIMS; i++) sq += own[i]! * own[i]!;
    norms[r] = sq > 0 ? 1 / Math.sqrt(sq) : 0;
  }
  const common = own.slice();
  const t0 = nowMs();
  const scale = toCommonScale(common, norms, DIMS);
  const scaleMs = nowMs() - t0;
  const ways = [
    { name: 'cosine, rows at their own scale', search: (q: Float32Array) => exactNearestWithSimilarity(own, DIMS, q, k) },
    { name: 'inner product, rows at one scale', search: (q: Float32Array) => exactNearestOnScale(common, scale, DIMS, q, k) },
  ];
  const times = ways.map(() => [] as number[]);
  const recall = ways.map(() => 0);
  const errors = ways.map(() => [] as number[]);
  const exact = Math.min(EXACT, queries.length);
  for (let rep = 0; rep < opts.reps; rep++) {
    for (let q = 0; q < queries.length; q++) {
      for (let j = 0; j < ways.length; j++) {
        const w = (j + q + rep) % ways.length;
        const t = nowMs();
        const got = ways[w]!.search(queries[q]!);
        times[w]!.push(nowMs() - t);
        if (rep > 0 || q >= exact) continue;
        const truth = new Set(
          Array.from(exactSearch(matrix.subarray(0, rows * DIMS), queries[q]!, DIMS, 10, MetricKind.Cos, 1).keys, Number),
        );
        for (let i = 0; i < got.rows.length; i++) {
          const r = got.rows[i]!;
          if (i < 10 && truth.has(r)) recall[w]! += 1 / 10 / exact;
          errors[w]!.push(Math.abs(got.similarity[i]! - cosine(queries[q]!, matrix.subarray(r * DIMS, (r + 1) * DIMS))));
        }
      }
    }
  }
  report.table(
    `the exact pass over ${fmtInt(rows)} rows, k = ${k}, ${fmtInt(opts.reps * queries.length)} searches each (µs); recall and error over the first ${exact}; bringing the rows to one scale took ${(scaleMs * 1000).toFixed(0)} µs`,
    ['rows', 'p50 µs', 'p90 µs', 'recall@10', 'similarity error p99 / max'],
    ways.map((w, i) => {
      const t = summarize(times[i]!);
      const e = errors[i]!.sort((a, b) => a - b);
      return [
        w.name,
        (t.p50 * 1000).toFixed(1),
        (t.p90 * 1000).toFixed(1),
        recall[i]!.toFixed(3),
        `${e[Math.floor(e.length * 0.99)]!.toExponential(1)} / ${e[e.length - 1]!.toExponential(1)}`,
      ];
    }),
  );
}

function main(): void {
  const report = new Report('ann-quantization', opts);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-annq-'));
  try {
    const n = opts.items;
    const corpus = new Corpus({ items: n, dims: DIMS });
    const matrix = corpus.embeddingMatrix();
    report.line(`${fmtInt(n)} vectors of ${DIMS} dimensions; load average ${loadAverage()}`);
    const sides = [
      usearchSide('f16', ScalarKind.F16, matrix, n, dir),
      usearchSide('i8 (usearch cast)', ScalarKind.I8, matrix, n, dir),
      tidalSide(matrix, n, dir),
    ];
    const rand = mulberry32(7);
    const queries = Array.from({ length: opts.queries }, (_, q) => corpus.contextVector(rand, q % 20));
    const times = sides.map(() => [] as number[]);
    const found = sides.map(() => [] as { keys: number[]; similarity: number[] }[]);
    for (let rep = 0; rep < opts.reps; rep++) {
      for (let q = 0; q < queries.length; q++) {
        // The three take turns, the first rotating, so none always runs with a warmer cache.
        for (let j = 0; j < sides.length; j++) {
          const s = (j + q + rep) % sides.length;
          const t = nowMs();
          const r = sides[s]!.search(queries[q]!);
          times[s]!.push(nowMs() - t);
          if (rep === 0) found[s]![q] = r;
        }
      }
    }
    const exact = Math.min(EXACT, queries.length);
    const recall = sides.map(() => [0, 0]);
    const errors = sides.map(() => [] as number[]);
    for (let q = 0; q < exact; q++) {
      const truth = Array.from(exactSearch(matrix, queries[q]!, DIMS, opts.k, MetricKind.Cos, 2).keys, Number);
      const top10 = new Set(truth.slice(0, 10));
      const all = new Set(truth);
      sides.forEach((_, s) => {
        const got = found[s]![q]!;
        recall[s]![0]! += got.keys.slice(0, 10).filter((x) => top10.has(x)).length / 10 / exact;
        recall[s]![1]! += got.keys.filter((x) => all.has(x)).length / opts.k / exact;
        got.keys.forEach((key, i) =>
          errors[s]!.push(Math.abs(got.similarity[i]! - cosine(queries[q]!, matrix.subarray(key * DIMS, (key + 1) * DIMS)))),
        );
      });
    }
    report.table(
      `search, k = ${opts.k} (${opts.k + ASKED_BEYOND_K} asked), ${fmtInt(opts.reps * queries.length)} per index (ms); recall and similarity error over the first ${exact}`,
      ['vectors', 'build s', 'file MB', 'p50', 'p90', 'recall@10', `of the exact ${opts.k}`, 'similarity error p99 / max'],
      sides.map((side, s) => {
        const t = summarize(times[s]!);
        const e = errors[s]!.sort((a, b) => a - b);
        return [
          side.name,
          (side.buildMs / 1000).toFixed(1),
          (side.bytes / 1e6).toFixed(1),
          fmtMs(t.p50),
          fmtMs(t.p90),
          recall[s]![0]!.toFixed(3),
          recall[s]![1]!.toFixed(3),
          `${e[Math.floor(e.length * 0.99)]!.toExponential(1)} / ${e[e.length - 1]!.toExponential(1)}`,
        ];
      }),
    );
    subsetPass(report, matrix, queries);
    report.line(`load average at the end ${loadAverage()}`);
    report.finish();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
