/**
 * The HNSW index's vectors as f16 (what tidal builds) against int8, at a large catalogue: the f16
 * snapshot a personalization run kept (`--index`, the bench corpus's vectors under their ordinals)
 * against an int8 index built here from the same vectors (`--i8` keeps it for a later run), both
 * mapped as the query workers map theirs. Then `--queries` context vectors searched as for_you's
 * Full asks (k = 80 at ef = 64), the two indexes taking turns, twice; p50 and p90 per index, and
 * recall@10 and of the exact 64 against the exact search for the first 100.
 */
import fs from 'node:fs';
import { Index, MetricKind, ScalarKind, exactSearch } from 'usearch';
import { Corpus } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, loadAverage, nowMs, parseOptions, summarize } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('ann-quantization', {
  items: { type: 'int', default: 1_000_000, description: 'items of the bench corpus the f16 index holds' },
  index: { type: 'string', default: '', description: 'the f16 snapshot (ann-*.usearch) of a `--suite personalization --dir` run' },
  i8: { type: 'string', default: '/tmp/tidal-ann-i8.usearch', description: 'the int8 index: built here when the file is missing' },
  queries: { type: 'int', default: 400, description: 'context vectors searched' },
});
const DIMS = 128;
const K = 80;
const EF = 64;

function index(quantization: ScalarKind): Index {
  return new Index({
    dimensions: DIMS,
    metric: MetricKind.Cos,
    quantization,
    connectivity: 16,
    expansion_add: 128,
    expansion_search: EF,
    multi: false,
  });
}

function main(): void {
  if (opts.index === '') throw new Error('--index names the f16 snapshot to compare with');
  const report = new Report('ann-quantization', opts);
  const corpus = new Corpus({ items: opts.items, dims: DIMS });
  const matrix = corpus.embeddingMatrix();
  if (!fs.existsSync(opts.i8)) {
    const t = nowMs();
    const built = index(ScalarKind.I8);
    const keys = new BigUint64Array(opts.items).map((_, i) => BigInt(i));
    for (let s = 0; s < opts.items; s += 100_000) {
      built.add(keys.subarray(s, s + 100_000), matrix.subarray(s * DIMS, (s + 100_000) * DIMS), 2);
      process.stderr.write(`int8 index: ${fmtInt(Math.min(opts.items, s + 100_000))} of ${fmtInt(opts.items)} added\n`);
    }
    built.save(opts.i8);
    report.line(`int8 index built in ${((nowMs() - t) / 1000).toFixed(0)} s (2 threads)`);
  }
  const f16 = index(ScalarKind.F16);
  f16.view(opts.index);
  const i8 = index(ScalarKind.I8);
  i8.view(opts.i8);
  report.line(
    `${fmtInt(Number(f16.size()))} and ${fmtInt(Number(i8.size()))} vectors; files ${fmtInt(fs.statSync(opts.index).size)} and ${fmtInt(fs.statSync(opts.i8).size)} bytes; load average ${loadAverage()}`,
  );
  const rand = mulberry32(7);
  const queries = Array.from({ length: opts.queries }, (_, q) => corpus.contextVector(rand, q % 20));
  const sides = [
    ['f16', f16],
    ['int8', i8],
  ] as const;
  const times: Record<string, number[]> = { f16: [], int8: [] };
  const found: Record<string, number[][]> = { f16: [], int8: [] };
  for (let rep = 0; rep < 2; rep++) {
    for (let q = 0; q < queries.length; q++) {
      for (const [name, idx] of (q + rep) % 2 === 0 ? sides : [...sides].reverse()) {
        const s = nowMs();
        const r = idx.search(queries[q]!, K, 1);
        times[name]!.push(nowMs() - s);
        if (rep === 0) found[name]![q] = Array.from(r.keys.slice(0, 64), Number);
      }
    }
  }
  const exact = Math.min(100, queries.length);
  const recall: Record<string, [number, number]> = { f16: [0, 0], int8: [0, 0] };
  for (let q = 0; q < exact; q++) {
    const truth = Array.from(exactSearch(matrix, queries[q]!, DIMS, 64, MetricKind.Cos, 2).keys, Number);
    for (const [name] of sides) {
      const got = found[name]![q]!;
      recall[name]![0] += truth.slice(0, 10).filter((x) => got.slice(0, 10).includes(x)).length / 10 / exact;
      recall[name]![1] += truth.filter((x) => got.includes(x)).length / 64 / exact;
    }
  }
  const rows = sides.map(([name]) => {
    const t = summarize(times[name]!);
    return [name, fmtMs(t.p50), fmtMs(t.p90), recall[name]![0].toFixed(3), recall[name]![1].toFixed(3)];
  });
  report.table(
    `search, k = ${K} at ef = ${EF}, ${fmtInt(2 * queries.length)} per index (ms); recall over ${exact}`,
    ['vectors', 'p50', 'p90', 'recall@10', 'of the exact 64'],
    rows,
  );
  report.finish();
}

main();
