/**
 * `npm run bench:text`: the text index's top-k BM25 against SQLite FTS5 on the same rows.
 *
 * 1. Writes `--items` items of the bench corpus into a database with tidal's items tables (through
 *    the items writer) and their texts into an FTS5 table beside them, the comparison (tidal itself
 *    writes and reads no FTS5 table).
 * 2. Builds the text index twice: through a worker's catalog refresh (reading the rows from SQLite,
 *    as a query worker does at warm) and from the texts in memory (the index alone); reports the
 *    time, and the heap the index holds (with `--expose-gc`).
 * 3. For `--queries` queries of 1–3 words (the corpus's text queries), at k = 10, 100 and 200:
 *    FTS5 directly (`MATCH … ORDER BY bm25(items_fts) LIMIT k`, the MATCH expression tidal builds),
 *    the index's pruned top-k, and the index scoring every match; `--rounds` interleaved rounds,
 *    the median round reported as ns per query. Every pruned result is checked against FTS5 (same
 *    ordinals, scores within 1e-9).
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Catalog, ItemsWriter, TextIndex, ftsQuery, queryTerms, searchTopK, type QuerySchema } from 'tidal-query';
import { Corpus } from './corpus.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './random.js';
import { Report, collectGarbage, fmtInt, fmtRatio, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('text', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  queries: { type: 'int', default: 300, description: 'text queries of 1–3 words' },
  rounds: { type: 'int', default: 7, description: 'interleaved rounds; the median round is reported' },
});
const ITEMS = opts.items;
const QUERIES = opts.queries;
const ROUNDS = opts.rounds;
const DEPTHS = [10, 100, 200] as const;

function heapUsed(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function main(): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-text-'));
  const file = path.join(dir, 'text.db');
  try {
    run(file);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function run(file: string): void {
  const corpus = new Corpus({ items: ITEMS, dims: 4 });
  const report = new Report('text', opts);
  report.line(`${fmtInt(ITEMS)} items, ${QUERIES} queries, ${ROUNDS} rounds.`);

  // 1. The database.
  const writerDb = new Database(file);
  writerDb.pragma('journal_mode = WAL');
  openStorage(writerDb, file);
  // The comparison: an FTS5 table over the same texts, filled beside tidal's items (tidal itself no
  // longer writes one).
  writerDb.exec("CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', contentless_delete=1)");
  const ftsInsert = writerDb.prepare('INSERT INTO items_fts (rowid, text) VALUES (?, ?)');
  const writer = new ItemsWriter(writerDb);
  const texts: string[] = new Array<string>(ITEMS);
  let t = nowMs();
  let version = 0;
  for (const batch of corpus.items(2000)) {
    writerDb.transaction(() => {
      for (const item of batch) {
        const ordinal = corpus.indexOf(item.id);
        texts[ordinal] = item.text;
        writer.upsert(
          { ordinal, id: item.id, text: item.text, metadata: item.metadata, createdAt: item.createdAt, embedding: null },
          ++version,
          false,
        );
        if (item.text) ftsInsert.run(ordinal, item.text);
      }
    })();
  }
  console.log(`wrote ${fmtInt(ITEMS)} items in ${fmtInt(nowMs() - t)} ms`);
  writerDb.close();

  const db = new Database(file, { readonly: true, fileMustExist: true });
  const schema: QuerySchema = { kinds: [], metadata: { category: 'string', creator: 'string' }, embeddingDims: 0 };

  // 2. Build: through a catalog refresh, then the index alone from memory.
  t = nowMs();
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const catalogMs = nowMs() - t;

  const before = heapUsed();
  t = nowMs();
  let alone: TextIndex | null = new TextIndex();
  for (let o = 0; o < ITEMS; o++) alone.set(o, texts[o]!);
  const buildMs = nowMs() - t;
  const heapBytes = heapUsed() - before;
  const stats = alone.stats();
  alone = null; // eslint-disable-line no-useless-assignment -- releases the index before the queries run beside the catalog's

  const index = catalog.text;

  // 3. Queries.
  const rand = mulberry32(7);
  const queries = Array.from({ length: QUERIES }, () => corpus.textQuery(rand));
  const matches = queries.map((q) => ftsQuery(q)!);
  const terms = queries.map((q) => queryTerms(q, 32));
  const fts = db.prepare('SELECT rowid, bm25(items_fts) AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s LIMIT ?').raw(true);
  const ftsTie = db
    .prepare('SELECT rowid, bm25(items_fts) AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s, rowid LIMIT ?')
    .raw(true);

  // Correctness first: the pruned top-k is FTS5's (ties broken by rowid on both sides).
  let checked = 0;
  const scored = new Map<number, number>();
  const scoredEach = new Map<number, number[]>(DEPTHS.map((k) => [k, []]));
  const skippedBlocks = new Map<number, number>();
  let exhaustivePostings = 0;
  for (let i = 0; i < QUERIES; i++) {
    for (const k of DEPTHS) {
      const want = ftsTie.all(matches[i]!, k) as [number, number][];
      const got = searchTopK(index, terms[i]!, k);
      if (got.ordinals.length !== want.length)
        throw new Error(`query ${queries[i]} k=${k}: ${got.ordinals.length} hits, FTS5 ${want.length}`);
      for (let j = 0; j < want.length; j++) {
        const [o, s] = want[j]!;
        const rel = Math.abs(-got.scores[j]! - s) / Math.abs(s);
        if (got.ordinals[j] !== o || rel > 1e-9)
          throw new Error(`query ${queries[i]} k=${k} rank ${j}: ${got.ordinals[j]} ${-got.scores[j]!} vs FTS5 ${o} ${s}`);
      }
      checked++;
      scored.set(k, (scored.get(k) ?? 0) + got.postingsScored);
      scoredEach.get(k)!.push(got.postingsScored);
      skippedBlocks.set(k, (skippedBlocks.get(k) ?? 0) + got.blocksSkipped);
    }
    exhaustivePostings += searchTopK(index, terms[i]!, 10, { prune: false }).postingsScored;
  }
  console.log(`checked ${checked} results against FTS5: identical`);

  type Engine = 'fts5' | 'index' | 'exhaustive';
  const engines: Engine[] = ['fts5', 'index', 'exhaustive'];
  const samples = new Map<string, number[]>();
  let sink = 0;
  const once = (engine: Engine, k: number): number => {
    const start = nowMs();
    for (let i = 0; i < QUERIES; i++) {
      if (engine === 'fts5') {
        sink += fts.all(matches[i]!, k).length;
      } else {
        // The index's cost includes splitting and folding the query text, as a search pays it.
        const q = queryTerms(queries[i]!, 32);
        sink += searchTopK(index, q, k, engine === 'exhaustive' ? { prune: false } : {}).ordinals.length;
      }
    }
    return ((nowMs() - start) * 1e6) / QUERIES;
  };
  // Warm-up round, not counted.
  for (const k of DEPTHS) for (const e of engines) once(e, k);
  for (let r = 0; r < ROUNDS; r++) {
    for (const k of DEPTHS) {
      for (const e of engines) {
        const key = `${e}@${k}`;
        if (!samples.has(key)) samples.set(key, []);
        samples.get(key)!.push(once(e, k));
      }
    }
  }
  if (sink < 0) console.log(sink);

  const ns = (e: Engine, k: number) => median(samples.get(`${e}@${k}`)!);
  const rows = DEPTHS.map((k) => [
    String(k),
    fmtInt(ns('fts5', k)),
    fmtInt(ns('index', k)),
    fmtInt(ns('exhaustive', k)),
    fmtRatio(ns('fts5', k) / ns('index', k)),
    fmtInt(scored.get(k)! / QUERIES),
    fmtInt(Math.max(...scoredEach.get(k)!)),
    fmtInt(skippedBlocks.get(k)! / QUERIES),
  ]);
  report.line();
  report.table(
    'top-k BM25, ns per query',
    [
      'k',
      'FTS5 ns/query',
      'index ns/query',
      'index, no pruning, ns/query',
      'FTS5 / index',
      'postings scored / query',
      'max',
      'blocks skipped / query',
    ],
    rows,
  );
  report.line(`Postings scored per query without pruning (every match): ${fmtInt(exhaustivePostings / QUERIES)}.`);
  report.line();
  report.table(
    'the index',
    ['index', 'value'],
    [
      ['documents', fmtInt(stats.documents)],
      ['terms', fmtInt(stats.terms)],
      ['postings', fmtInt(stats.postings)],
      ['typed arrays (MB)', (stats.arrayBytes / 1e6).toFixed(1)],
      ['heap held (MB, --expose-gc)', (heapBytes / 1e6).toFixed(1)],
      ['build from memory (ms)', fmtInt(buildMs)],
      ['catalog refresh incl. index (ms)', fmtInt(catalogMs)],
    ],
  );
  report.finish();
  db.close();
}

main();
