/**
 * What an FTS5 table on the item write path costs:
 *
 *     npm run probes && node --expose-gc bench/probes/dist/probes/fts5-ingest.js
 *
 * The same N corpus items (text, metadata, a `--dims` embedding) go through the real write path,
 * `TidalDb.upsertItems` in batches of 1000 on a file, two ways in one run, interleaved round by
 * round (A B, B A, …) so that a busier moment of the machine shifts both alike:
 *
 * - without: the write path as it is (the items table; the text index is built from it);
 * - with FTS5: the same, plus a contentless_delete FTS5 table over the text kept by triggers on
 *   `items` (a replaced row is deleted from it first), which is what the writer used to write.
 *   Triggers save the two statement calls per item from JavaScript that the writer made, so this
 *   is, if anything, a little below what those writes cost.
 *
 * Each way opens a fresh database, so both start from an empty file. Flags: `--items N` per round
 * (default 20000), `--rounds N` per way (default 3), `--dims N` (default 128). Prints items/s per
 * round and the median of each way (`--json FILE` writes them).
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { TidalDb } from 'tidal-core';
import { Corpus, tidalSchema } from '../src/corpus.js';
import { Report, collectGarbage, fmtInt, fmtRatio, nowMs, parseOptions } from '../src/harness/index.js';

const opts = parseOptions('fts5-ingest', {
  items: { type: 'int', default: 20_000, description: 'items per round' },
  rounds: { type: 'int', default: 3, description: 'rounds per way; the median is reported' },
  dims: { type: 'int', default: 128, description: 'embedding dimensions' },
});
const ITEMS = opts.items;
const ROUNDS = opts.rounds;
const DIMS = opts.dims;
const BATCH = 1000;

type Way = 'without' | 'with FTS5';

const FTS5_ON_ITEMS = `
  CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', contentless_delete=1);
  CREATE TRIGGER items_fts_insert AFTER INSERT ON items WHEN new.text IS NOT NULL AND new.text <> '' BEGIN
    INSERT INTO items_fts (rowid, text) VALUES (new.ordinal, new.text);
  END;
  CREATE TRIGGER items_fts_update AFTER UPDATE ON items BEGIN
    DELETE FROM items_fts WHERE rowid = old.ordinal;
    INSERT INTO items_fts (rowid, text) SELECT new.ordinal, new.text WHERE new.text IS NOT NULL AND new.text <> '';
  END;
`;

const corpus = new Corpus({ items: ITEMS, dims: DIMS });
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-fts5-ingest-'));

const open = (dir: string): Promise<TidalDb> =>
  TidalDb.builder()
    .path(dir)
    .schema(tidalSchema(DIMS))
    .clock(() => corpus.now)
    .open();

/** One way, one round: a fresh file, every item once; returns items/s over the upsert calls alone. */
async function round(way: Way, n: number): Promise<number> {
  const dir = path.join(root, `${n}-${way === 'without' ? 'plain' : 'fts5'}`);
  // Create the file, then (with FTS5) add the table and its triggers before any item is written.
  await (await open(dir)).close();
  if (way === 'with FTS5') {
    const raw = new Database(path.join(dir, 'tidal.db'));
    raw.exec(FTS5_ON_ITEMS);
    raw.close();
  }
  const db = await open(dir);
  let ms = 0;
  try {
    for (const batch of corpus.items(BATCH)) {
      const t = nowMs();
      await db.upsertItems(batch);
      ms += nowMs() - t;
    }
  } finally {
    await db.close();
  }
  if (way === 'with FTS5') {
    // The triggers did write: every item with text has its FTS5 row.
    const raw = new Database(path.join(dir, 'tidal.db'), { readonly: true });
    const rows = raw.prepare('SELECT count(*) FROM items_fts_docsize').pluck().get() as number;
    raw.close();
    if (rows !== ITEMS) throw new Error(`items_fts holds ${rows} rows, expected ${ITEMS}`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return (ITEMS / ms) * 1000;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function main(): Promise<void> {
  const report = new Report('fts5-ingest', opts);
  report.line(`${fmtInt(ITEMS)} items per round, ${ROUNDS} rounds per way, ${DIMS}-dim embeddings, batches of ${BATCH}`);
  report.line();
  const rates: Record<Way, number[]> = { without: [], 'with FTS5': [] };
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const order: Way[] = r % 2 === 0 ? ['without', 'with FTS5'] : ['with FTS5', 'without'];
      for (const way of order) {
        collectGarbage();
        rates[way].push(await round(way, r));
      }
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
  const without = median(rates.without);
  const withFts = median(rates['with FTS5']);
  const rows = [...rates.without.keys()].map((r) => [String(r + 1), fmtInt(rates.without[r]!), fmtInt(rates['with FTS5'][r]!)]);
  rows.push(['median', fmtInt(without), fmtInt(withFts)]);
  report.table('items/s over the upsert calls', ['round', 'without', 'with FTS5'], rows);
  report.line(`without / with FTS5: ${fmtRatio(without / withFts)}`);
  report.finish();
}

await main();
