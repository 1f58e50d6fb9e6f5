/**
 * `npm run bench:order`: what a query that walks items newest first (`hot`, `following`, the
 * for_you creator pool) pays after item writes: the catalog's newest-first order and the
 * per-creator lists, patched with the rows that changed, against the same two built from scratch
 * (what every item write cost such a query before they were patched).
 *
 * `--items` (default 100 000) items of the bench corpus in a SQLite file, read by a catalog as a
 * query worker reads them. Then, for 1, 16 and 256 items re-upserted per refresh (a new createdAt,
 * a creator drawn again), `--rounds` (default 30) rounds of: the writes, the catalog's refresh
 * (untimed), then both ways, in alternating order. Reports the median ms per refresh of each way
 * and their ratio.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Catalog, ItemsWriter, buildCreatorLists, creatorListsOf, type QuerySchema } from 'tidal-query';
import { Corpus } from './corpus.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './random.js';
import { Report, fmtInt, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('order', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  rounds: { type: 'int', default: 30, description: 'rounds per row (writes, refresh, both ways)' },
});
const ITEMS = opts.items;
const ROUNDS = opts.rounds;
const CHANGES = [1, 16, 256] as const;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function main(): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-order-'));
  try {
    run(path.join(dir, 'items.db'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function run(file: string): void {
  const corpus = new Corpus({ items: ITEMS, dims: 4 });
  const report = new Report('order', opts);
  report.line(`${fmtInt(ITEMS)} items (${fmtInt(corpus.creators)} creators), ${ROUNDS} rounds per row.`);
  const writerDb = new Database(file);
  writerDb.pragma('journal_mode = WAL');
  openStorage(writerDb, file);
  const writer = new ItemsWriter(writerDb);
  const stored = new Array<{ id: string; metadata: Record<string, unknown>; createdAt: number }>(ITEMS);
  let version = 0;
  let t = nowMs();
  for (const batch of corpus.items(5000)) {
    writerDb.transaction(() => {
      for (const item of batch) {
        const ordinal = corpus.indexOf(item.id);
        stored[ordinal] = { id: item.id, metadata: item.metadata, createdAt: item.createdAt };
        writer.upsert(
          { ordinal, id: item.id, text: null, metadata: item.metadata, createdAt: item.createdAt, embedding: null },
          ++version,
          false,
        );
      }
    })();
  }
  console.log(`wrote ${fmtInt(ITEMS)} items in ${fmtInt(nowMs() - t)} ms`);

  const db = new Database(file, { readonly: true, fileMustExist: true });
  const schema: QuerySchema = { kinds: [], metadata: { category: 'string', creator: 'string' }, embeddingDims: 0, creatorField: 'creator' };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  t = nowMs();
  catalog.byCreatedDesc();
  creatorListsOf(catalog, 'creator');
  console.log(`first build of the order and the creator lists: ${(nowMs() - t).toFixed(1)} ms`);

  const rand = mulberry32(3);
  let clock = stored.reduce((m, s) => Math.max(m, s.createdAt), 0);
  const rows: string[][] = [];
  for (const changes of CHANGES) {
    const patched: number[] = [];
    const scratch: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      writerDb.transaction(() => {
        for (let k = 0; k < changes; k++) {
          const o = Math.floor(rand() * ITEMS);
          const s = stored[o]!;
          // Re-upserted: now the newest, by another creator of the corpus now and then.
          const other = stored[Math.floor(rand() * ITEMS)]!;
          s.createdAt = ++clock;
          if (rand() < 0.5) s.metadata = { ...s.metadata, creator: other.metadata.creator };
          writer.upsert(
            { ordinal: o, id: s.id, text: null, metadata: s.metadata, createdAt: s.createdAt, embedding: null },
            ++version,
            true,
          );
        }
      })();
      catalog.refresh();
      const ways: [number[], () => void][] = [
        [
          patched,
          () => {
            catalog.byCreatedDesc();
            creatorListsOf(catalog, 'creator');
          },
        ],
        [
          scratch,
          () => {
            catalog.sortByCreated();
            buildCreatorLists(catalog, 'creator');
          },
        ],
      ];
      if (round % 2 === 1) ways.reverse();
      for (const [times, fn] of ways) {
        const s = nowMs();
        fn();
        times.push(nowMs() - s);
      }
    }
    const p = median(patched);
    const f = median(scratch);
    rows.push([fmtInt(changes), p.toFixed(3), f.toFixed(3), `${(f / p).toFixed(1)}×`]);
    console.log(`${fmtInt(changes)} changed per refresh: patched ${p.toFixed(3)} ms, from scratch ${f.toFixed(3)} ms`);
  }
  report.line();
  report.table('', ['items changed per refresh', 'patched ms (p50)', 'from scratch ms (p50)', 'from scratch ÷ patched'], rows);
  report.finish();
  writerDb.close();
  db.close();
}

main();
