/**
 * The database thread's memory per user (docs/api.md, "Memory per user"): V8 heap plus
 * ArrayBuffer bytes after a full collection, grown by `--users` users of each shape, divided by
 * their count. The shapes: a user with no history; the personalization corpus's user (20 signals
 * on items of 20 creators, 5 follows); a user at the bounds (more than 512 distinct items signalled,
 * so the seen set is full, over more than 64 creators, so 64 affinities; a quarter as many users).
 * A worker module is configured, so the users and the co-engagement lists their signals make live
 * in the shared records and not in this heap (the records written are reported beside it): what is
 * left is what the thread keeps per user id, and its cache of records it decoded (the lists it
 * reads back when a batch changes them), bounded at 4 096 records whatever the users: at 2 000
 * users a shape it added ~1.6 KB to each, so the default is 10 000.
 *
 * With `--bare`, no worker module: everything stays in the heap of the database's thread.
 *
 * Run with `--expose-gc`. With `--baseline DIR` (another built checkout) the same users are built in
 * a database of each tree, one after the other, in this process.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { TidalDb } from 'tidal-core';
import { personalizationSchema } from '../src/corpus.js';
import { Report, collectedHeapBytes, fmtInt, loadAverage, loadBaseline, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('user-memory', {
  users: { type: 'int', default: 10_000, description: 'users of each shape (a quarter as many at the bounds)' },
  baseline: { type: 'string', default: '', description: 'another built checkout: its tidal-core measured the same way' },
  bare: { type: 'boolean', description: 'no worker module: every user and co-engagement list in the heap of the database thread' },
});
const baseline = loadBaseline(opts.baseline === '' ? undefined : opts.baseline, ['tidal-core']);

const DIMS = 128;
const ITEMS = 4096;
const CREATORS = 256;

// Exits naming the probe when the process lacks --expose-gc.
collectedHeapBytes('user-memory');

function heapBytes(): number {
  return collectedHeapBytes('user-memory');
}

interface Shape {
  name: string;
  users: number;
  /** Signals per user and how many distinct creators they cover. */
  signals: number;
  creators: number;
  follows: number;
}

/** Bytes of the shared records written so far (users and co-engagement lists; 0 in a tree that reports none). */
function recordBytes(db: TidalDb): number {
  return (db.stats() as { memory?: { users: { usedBytes?: number } } }).memory?.users.usedBytes ?? 0;
}

/** Per shape, bytes per user: on the database's thread, and of the shared records written. */
async function measure(Db: typeof TidalDb, moduleUrl: URL): Promise<{ heap: number[]; records: number[] }> {
  const rand = mulberry32(7);
  const builder = Db.builder().schema(personalizationSchema(DIMS)).ephemeral().workers(1);
  const db = await (opts.bare ? builder : builder.workerModule(moduleUrl)).open();
  try {
    for (let k = 0; k < ITEMS; k += 1024) {
      await db.upsertItems(
        Array.from({ length: 1024 }, (_, j) => ({
          id: `i${k + j}`,
          embedding: Array.from({ length: DIMS }, () => rand() - 0.5),
          metadata: { category: 'c', creator: `c${(k + j) % CREATORS}` },
        })),
      );
    }
    const shapes: Shape[] = [
      { name: 'no history', users: opts.users, signals: 0, creators: 0, follows: 0 },
      { name: '20 signals, 20 creators, 5 follows', users: opts.users, signals: 20, creators: 20, follows: 5 },
      { name: 'at the bounds: 600 signals, 100 creators', users: Math.max(1, opts.users >> 2), signals: 600, creators: 100, follows: 0 },
    ];
    const perUser: number[] = [];
    const records: number[] = [];
    for (const [s, shape] of shapes.entries()) {
      const ids = Array.from({ length: shape.users }, (_, u) => `s${s}-u${u}`);
      const before = heapBytes();
      const recordsBefore = recordBytes(db);
      for (let u = 0; u < ids.length; u += 1000) await db.upsertUsers(ids.slice(u, u + 1000).map((id) => ({ id })));
      for (const id of ids) {
        const base = Math.floor(rand() * ITEMS);
        // Item base + j·CREATORS·k + c lands on creator (base + c) mod CREATORS: `creators` of them, distinct items.
        const items = Array.from({ length: shape.signals }, (_, j) => {
          const c = j % shape.creators;
          return `i${(base + c + CREATORS * Math.floor(j / shape.creators)) % ITEMS}`;
        });
        for (let j = 0; j < items.length; j += 500)
          await db.signals(items.slice(j, j + 500).map((item) => ({ item, kind: 'like', user: id })));
        for (let f = 0; f < shape.follows; f++) await db.follow({ user: id, creator: `c${(base + 7 * f) % CREATORS}` });
      }
      perUser.push((heapBytes() - before) / shape.users);
      records.push((recordBytes(db) - recordsBefore) / shape.users);
      process.stderr.write(`  ${shape.name}: ${fmtInt(perUser.at(-1)!)} B per user, ${fmtInt(records.at(-1)!)} B of shared records\n`);
    }
    return { heap: perUser, records };
  } finally {
    await db.close();
  }
}

async function main(): Promise<void> {
  const report = new Report('user-memory', opts);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-user-memory-'));
  const moduleFile = path.join(dir, 'module.mjs');
  fs.writeFileSync(moduleFile, 'export function start() {}\nexport function stop() {}\n');
  try {
    const rows: string[][] = [];
    const names = ['no history', '20 signals over 20 creators, 5 follows', 'at the bounds (512 seen, 64 affinities)'];
    const after = await measure(TidalDb, pathToFileURL(moduleFile));
    let before: { heap: number[]; records: number[] } | undefined;
    if (baseline) {
      const old = await baseline.load<{ TidalDb: typeof TidalDb }>('tidal-core');
      before = await measure(old.TidalDb, pathToFileURL(moduleFile));
      report.line(`Baseline: ${baseline.dir} at ${baseline.commit} (before) against this tree (after).`);
    }
    for (const [i, name] of names.entries()) {
      const cells = (m: { heap: number[]; records: number[] }): string[] => [fmtInt(m.heap[i]!), fmtInt(m.records[i]!)];
      rows.push([name, ...cells(after), ...(before ? [...cells(before), (after.heap[i]! / before.heap[i]!).toFixed(2)] : [])]);
    }
    report.table(
      `Bytes per user: heap and ArrayBuffers on the database's thread, and the shared records written (users and the co-engagement lists their signals made; ${fmtInt(opts.users)} users a shape), load average ${loadAverage()}`,
      ['user', 'thread', 'records', ...(before ? ['baseline thread', 'baseline records', 'thread after ÷ before'] : [])],
      rows,
    );
    report.finish();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
