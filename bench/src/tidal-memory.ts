/**
 * `npm run bench -- --suite memory`: tidal's resident memory after load (the query suite's items,
 * signals, with `--users N` the personalization suite's users, each with 20 signals naming them and
 * 5 follows, and `warm()`) with nothing else of the bench in the process. Each reading is taken in a
 * child process of its own that loads the corpus into tidal and nothing else (no SQL side; the
 * corpus is streamed in batches and not kept), then reports:
 *
 * - its `/proc/self/smaps_rollup` at each step (RSS, anonymous, file-backed Rss and Pss), after a
 *   full collection of the main thread's heap (`--expose-gc`);
 * - after `warm()`, each thread's V8 heap and ArrayBuffer bytes, the main thread's from itself and
 *   each query worker's from itself (a worker module, harness/memory-worker.ts, asked through a
 *   BroadcastChannel: the worker collects its garbage first), and the resident pages by mapping
 *   (harness/memory.ts, `mappingBreakdown`): the database's files (the ANN snapshot), the binary,
 *   the libraries, the anonymous memory.
 *
 * With `--baseline DIR` (another built checkout) the readings of both trees alternate, `--runs`
 * each, so the two are measured side by side on the same machine state.
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import v8 from 'node:v8';
import { BroadcastChannel } from 'node:worker_threads';
import type * as tidalCore from 'tidal-core';
import { Corpus, personalizationSchema, tidalSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { collectGarbage, loadAverage, loadBaseline, parseOptions, Report } from './harness/index.js';
import { mappingBreakdown, residentMemory } from './harness/memory.js';
import { CHILD_MARK, describeReading, f0, measureTidalAlone, MiB, type TidalMemoryReading } from './harness/memory-alone.js';
import type { ReportAnswer, ThreadMemory } from './harness/memory-worker.js';
import { threadMemory } from './harness/memory-worker.js';

const DIMS = 128;
const BATCH = 1000;
const here = path.dirname(fileURLToPath(import.meta.url));

/** Asks every worker (through memory-worker.ts) for its memory; `count` answers or 10 s. */
async function askWorkers(channelName: string, count: number): Promise<ThreadMemory[]> {
  const channel = new BroadcastChannel(channelName);
  const got = new Map<number, ThreadMemory>();
  try {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 120_000);
      channel.onmessage = (e: { data: unknown }) => {
        const a = e.data as ReportAnswer;
        if (a.op !== 'answer') return;
        got.set(a.memory.threadId, a.memory);
        if (got.size >= count) {
          clearTimeout(timer);
          resolve();
        }
      };
      channel.postMessage({ op: 'report', id: 1 });
    });
  } finally {
    channel.close();
  }
  return [...got.values()].sort((a, b) => a.threadId - b.threadId);
}

interface ChildOptions {
  items: number;
  users: number;
  workers: number | undefined;
  tree: string | undefined;
  snapshotDir: string | undefined;
  /** No worker module: the process's figures without it, and no per-worker report. */
  bare: boolean;
  /** No forced collection anywhere; `settleMs` of waiting after warm() instead. */
  uncollected: boolean;
  settleMs: number;
  /** The query workers' young generation cap in MiB; 0: V8's own; −1: the tree's default. */
  youngGenerationMb: number;
}

async function child({
  items,
  users,
  workers,
  tree,
  snapshotDir,
  bare,
  uncollected,
  settleMs,
  youngGenerationMb,
}: ChildOptions): Promise<void> {
  const core: typeof tidalCore = tree
    ? ((await import(pathToFileURL(path.join(path.resolve(tree), 'packages', 'tidal-core', 'dist', 'index.js')).href)) as typeof tidalCore)
    : await import('tidal-core');
  const steps: TidalMemoryReading['steps'] = [];
  const step = (name: string): void => {
    if (!uncollected) collectGarbage();
    steps.push({ step: name, memory: residentMemory() });
  };
  const corpus = new Corpus({ items, dims: DIMS, seed: 42 });
  step('started');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-memory-'));
  const channel = `tidal-memory-${process.pid}`;
  const builder = core.TidalDb.builder()
    .path(dir)
    .schema(users > 0 ? personalizationSchema(DIMS) : tidalSchema(DIMS))
    .clock(() => corpus.now);
  if (!bare) {
    builder.workerModule(pathToFileURL(path.join(here, 'harness', 'memory-worker.js')), {
      channel,
      collect: !uncollected,
      ...(snapshotDir !== undefined ? { snapshotDir: path.resolve(snapshotDir) } : {}),
    });
  }
  if (workers !== undefined) builder.workers(workers);
  if (youngGenerationMb >= 0) builder.workerYoungGenerationMb(youngGenerationMb);
  const db = await builder.open();
  try {
    step('open');
    for (const batch of corpus.items(BATCH)) await db.upsertItems(batch);
    step('items');
    for (const chunk of corpus.signalChunks(BATCH)) await db.signals(corpus.toSignals(chunk));
    step('signals');
    if (users > 0) {
      await loadUsers(db, corpus, items, users);
      step('users');
    }
    // Until every worker uses the ANN index (built on its own thread above 20 000 rows; an older
    // tree's warm takes no options and builds it in the warm).
    const warmed = await db.warm({ waitForAnn: true });
    if (settleMs > 0) await new Promise((resolve) => setTimeout(resolve, settleMs));
    const workerThreads = bare ? [] : await askWorkers(channel, warmed.length);
    step('warm');
    const memory = (db.stats() as { memory?: tidalCore.MemoryStats }).memory;
    const reading: TidalMemoryReading = {
      items,
      workers: warmed.length,
      steps,
      main: threadMemory(!uncollected),
      workerThreads,
      mappings: mappingBreakdown(fs.realpathSync(dir)),
      loadAverage: loadAverage(),
      ...(memory
        ? {
            components: {
              signals: memory.signals.bytes,
              users: memory.users.bytes,
              'users written': memory.users.usedBytes ?? 0,
              cursors: memory.cursors.bytes,
              catalog: memory.catalog.bytes,
              text: memory.text.bytes,
              // The catalog image, once per process (a baseline tree older than it has none).
              'catalog image': (memory as { catalogImage?: { bytes: number } }).catalogImage?.bytes ?? 0,
              vectors: memory.vectors.bytes,
            },
          }
        : {}),
    };
    // The main thread's heap snapshot too, after its reading (a snapshot grows the heap).
    if (snapshotDir !== undefined) v8.writeHeapSnapshot(path.join(snapshotDir, 'main.heapsnapshot'));
    process.stdout.write(`${CHILD_MARK}${JSON.stringify(reading)}\n`);
  } finally {
    await db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** `users` users through the public API: 20 signals each on random items (a third likes), 5 follows. */
async function loadUsers(db: tidalCore.TidalDb, corpus: Corpus, items: number, users: number): Promise<void> {
  const rand = mulberry32(0x9e5);
  for (let u = 0; u < users; u += BATCH) {
    await db.upsertUsers(Array.from({ length: Math.min(BATCH, users - u) }, (_, i) => ({ id: `user-${u + i}` })));
  }
  for (let u = 0; u < users; u++) {
    const user = `user-${u}`;
    const evs = Array.from({ length: 20 }, () => ({
      item: corpus.id(Math.floor(rand() * items)),
      kind: rand() < 0.33 ? 'like' : 'view',
      user,
    }));
    await db.signals(evs);
    await Promise.all(
      Array.from({ length: 5 }, () => db.follow({ user, creator: `creator-${String(Math.floor(rand() * 1000)).padStart(5, '0')}` })),
    );
  }
}

const opts = parseOptions('memory', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  users: { type: 'int', default: 0, min: 0, description: 'users (20 signals and 5 follows each), the personalization schema' },
  workers: { type: 'int', default: 0, min: 0, description: "tidal's query workers (0: one per core)" },
  runs: { type: 'int', default: 1, description: 'readings per tree (each a process of its own)' },
  baseline: { type: 'string', description: 'another built checkout: its tidal-core measured beside this one, readings alternating' },
  tree: { type: 'string', description: '(child) the checkout whose tidal-core to load' },
  snapshot: {
    type: 'string',
    description: '(child) a directory where the main thread and each worker write a heap snapshot after the reading',
  },
  bare: { type: 'boolean', description: '(child) no worker module, so no per-worker figures: what the module itself costs' },
  uncollected: { type: 'boolean', description: '(child) no forced collection in any thread' },
  'young-generation': {
    type: 'int',
    default: -1,
    min: -1,
    description: "the query workers' young generation cap in MiB (-1: the tree's default; 0: V8's own, in a tree that takes 0)",
  },
  settle: { type: 'int', default: 0, min: 0, description: '(child) milliseconds to wait after warm() before the readings' },
  child: { type: 'boolean', description: '(internal) take one reading in this process' },
});
const WORKERS = opts.workers === 0 ? undefined : opts.workers;

async function main(): Promise<void> {
  if (opts.child)
    return child({
      items: opts.items,
      users: opts.users,
      workers: WORKERS,
      tree: opts.tree,
      snapshotDir: opts.snapshot,
      bare: opts.bare,
      uncollected: opts.uncollected,
      settleMs: opts.settle,
      youngGenerationMb: opts['young-generation'],
    });
  const baseline = loadBaseline(opts.baseline, ['tidal-core']);
  const report = new Report('memory', opts);
  const trees: { label: string; tree?: string }[] = [{ label: 'this tree' }];
  if (baseline) trees.unshift({ label: `baseline ${baseline.commit.slice(0, 7)}`, tree: baseline.dir });
  const rows: { label: string; reading: TidalMemoryReading }[] = [];
  for (let run = 0; run < opts.runs; run++) {
    for (const t of run % 2 === 0 ? trees : [...trees].reverse()) {
      const reading = measureTidalAlone({
        items: opts.items,
        users: opts.users,
        ...(WORKERS !== undefined ? { workers: WORKERS } : {}),
        ...(t.tree ? { tree: t.tree } : {}),
        ...(opts['young-generation'] >= 0 ? { youngGenerationMb: opts['young-generation'] } : {}),
      });
      report.line(`${t.label}, run ${run + 1} (load average ${reading.loadAverage}):`);
      for (const l of describeReading(reading)) report.line(l);
      rows.push({ label: t.label, reading });
    }
  }
  report.line();
  report.table(
    'tidal alone after load',
    [
      'tree',
      'RSS MiB',
      'anonymous',
      'file-backed (Rss)',
      'file-backed (Pss)',
      'worker V8 heaps',
      'worker ArrayBuffers',
      'main V8 heap',
      'load',
    ],
    rows.map(({ label, reading: r }) => {
      const m = r.steps[r.steps.length - 1]!.memory;
      const sum = (k: 'heapCommitted' | 'arrayBuffers') => r.workerThreads.reduce((s, w) => s + w[k], 0) / MiB;
      return [
        label,
        f0(m.rssMiB),
        f0(m.anonymousMiB),
        f0(m.fileBackedMiB),
        f0(m.fileBackedPssMiB),
        f0(sum('heapCommitted')),
        f0(sum('arrayBuffers')),
        f0(r.main.heapCommitted / MiB),
        String(r.loadAverage),
      ];
    }),
  );
  report.set('readings', rows);
  report.finish();
}

main().catch((err: unknown) => {
  process.stderr.write(`memory bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
