/**
 * The co-engagement index's memory (docs/api.md, `related`): `--items` items, each with a full list
 * (32 partners: item i paired with i ± 1..16), counted through the index itself over a real file.
 * Reports, per item, the V8 heap plus ArrayBuffer bytes the lists take on the database's thread
 * (a database without a worker module keeps them there) after a full collection, and the bytes of
 * a list's shared record (with a worker module the lists live only there, one per process).
 *
 * Run with `--expose-gc`. With `--baseline DIR` (another built checkout) its index is measured the
 * same way, in this process.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { Report, collectedHeapBytes, fmtInt, loadAverage, loadBaseline, parseOptions } from '../src/harness/index.js';

const opts = parseOptions('related-memory', {
  items: { type: 'int', default: 20_000, description: 'items, each with a full list of 32 partners' },
  baseline: { type: 'string', default: '', description: 'another built checkout: its index measured the same way' },
});
const baseline = loadBaseline(opts.baseline === '' ? undefined : opts.baseline, ['tidal-core']);

// Exits naming the probe when the process lacks --expose-gc.
collectedHeapBytes('related-memory');

function heapBytes(): number {
  return collectedHeapBytes('related-memory');
}

interface Index {
  begin(): void;
  record(a: number, b: number, at: number): void;
  persist(): void;
  apply(): void;
  task(item: number): unknown;
}

async function measure(root: string, label: string): Promise<{ heap: number; record: number }> {
  const url = (p: string) => pathToFileURL(path.join(root, p)).href;
  const { CoEngagementIndex } = (await import(url('packages/tidal-core/dist/co-engagement.js'))) as {
    CoEngagementIndex: new (db: Database.Database) => Index;
  };
  const { openStorage } = (await import(url('packages/tidal-wal/dist/storage/index.js'))) as {
    openStorage: (db: Database.Database, file: string) => void;
  };
  const { encodeRelated } = (await import(url('packages/tidal-query/dist/index.js'))) as { encodeRelated: (t: unknown) => Uint8Array };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-related-memory-'));
  const file = path.join(dir, 'db.sqlite');
  const db = new Database(file);
  try {
    openStorage(db, file);
    const before = heapBytes();
    const index = new CoEngagementIndex(db);
    const n = opts.items;
    const at = 1_800_000_000_000;
    for (let from = 0; from < n; from += 500) {
      index.begin();
      for (let i = from; i < Math.min(n, from + 500); i++) for (let k = 1; k <= 16; k++) index.record(i, (i + k) % n, at + i);
      db.transaction(() => index.persist())();
      index.apply();
    }
    const heap = (heapBytes() - before) / n;
    const record = encodeRelated(index.task(n >> 1)).byteLength;
    process.stderr.write(`  ${label}: ${fmtInt(heap)} B a list in the heap, ${record} B a shared record\n`);
    return { heap, record };
  } finally {
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const report = new Report('related-memory', opts);
  const here = path.dirname(fileURLToPath(import.meta.url));
  const rows: string[][] = [];
  if (baseline) {
    const b = await measure(baseline.dir, `baseline ${baseline.commit.slice(0, 7)}`);
    rows.push([`baseline ${baseline.commit.slice(0, 7)}`, fmtInt(b.heap), String(b.record)]);
  }
  const a = await measure(path.resolve(here, '../../../..'), 'this tree');
  rows.push(['this tree', fmtInt(a.heap), String(a.record)]);
  report.table(
    `${fmtInt(opts.items)} items with full lists (32 partners), load average ${loadAverage()}`,
    ['tree', 'heap B a list', 'shared record B'],
    rows,
  );
  report.finish();
}

main().catch((err: unknown) => {
  process.stderr.write(`related-memory failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
