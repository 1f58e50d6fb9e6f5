/**
 * `npm run bench -- --suite query` (the default suite): tidal against the hand-written SQL an
 * application would otherwise write, on the same synthetic corpus, on this machine. `--help` lists
 * the flags.
 *
 * With `--baseline DIR` (another checkout, built) it compares two trees instead of tidal and SQL:
 * the same corpus into this tree's tidal-core and DIR's, then every query type in blocks that
 * take turns, reporting after ÷ before (see compareTrees).
 *
 * Every latency is measured at the caller, one query at a time: it is the latency an application
 * sees, including the hop to a query worker, not a throughput figure. Beside it, the worker's own
 * time for the same queries (`explain.serviceMs`: from the task's start in the worker to its
 * result, the catalog sync included), so the query's cost and the hop's are read apart.
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type * as tidalCore from 'tidal-core';
import { TidalDb, levelName, type DegradationLevel, type RetrieveResults, type SearchResults } from 'tidal-core';
import { SqlBaseline, ftsMatchExpression } from './baseline.js';
import { CATEGORIES, Corpus, mixSeed, tidalSchema, type CorpusSignal, type SignalColumns } from './corpus.js';
import { mulberry32 } from './random.js';
import {
  Progress,
  Report,
  agreement,
  blockRow,
  collectGarbage,
  compareInBlocks,
  describeMachine,
  fmtDuration,
  fmtInt,
  fmtMs,
  fmtRatio,
  loadAverage,
  loadBaseline,
  machine,
  markdownTable,
  nowMs,
  parseOptions,
  summarize,
  type BlockSide,
  type Summary,
} from './harness/index.js';
import { logMemory } from './harness/memory.js';
import { describeReading, measureTidalAlone } from './harness/memory-alone.js';

const opts = parseOptions('query', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  queries: { type: 'int', default: 300, description: 'timed queries per query type, after 30 warm-up queries' },
  workers: { type: 'int', default: 0, min: 0, description: "tidal's query workers (0: one per core)" },
  inflight: { type: 'int', default: 1, description: 'signal batches in flight during ingest' },
  baseline: { type: 'string', description: 'another built checkout: its tidal-core against this one instead of SQL' },
  'young-generation': {
    type: 'int',
    default: 0,
    min: 0,
    description: "the query workers' young generation cap in MiB (0: V8's own); with --baseline, this tree's side only",
  },
  'skip-memory': { type: 'boolean', description: 'no second load of tidal alone in a child process for its memory after load' },
});
const argv = opts.argv;
const ITEMS = opts.items;
const QUERIES = opts.queries;
const WARMUP = 30;
const WORKERS = opts.workers === 0 ? undefined : opts.workers;
const INFLIGHT = opts.inflight;
const YOUNG_GENERATION = opts['young-generation'];
const baseline = loadBaseline(opts.baseline, ['tidal-core']);
const DIMS = 128;
const BATCH = 1000;
const RECALL_QUERIES = 200;
/** Queries per turn when tidal and the SQL take turns (see compare()). */
const BLOCK = 30;
/** Candidate depths of tidal's hybrid search at full quality, so both sides fuse the same lists. */
const HYBRID_BM25_CANDIDATES = 200;
const HYBRID_VECTOR_CANDIDATES = 500;

const TARGETS = {
  ingestRatio: 0.5,
  trendingP50Ms: 2,
  hybridP50Ms: 10,
  recallAt10: 0.95,
  retrieveSpeedup: 5,
  textOverhead: 1.2,
};

interface QueryRow {
  key: string;
  label: string;
  tidal: Summary;
  /** The same queries' time in the query worker (`explain.serviceMs`). */
  worker: Summary;
  /** tidal's own `tookMs` (from the call to the result, inside the process), median. */
  tidalTookP50: number;
  sql: Summary;
  /** SQL p50 / tidal p50: how many times faster tidal is. */
  speedup: number;
  /** Mean share of the SQL result ids that tidal returned too. */
  agreement: number;
  levels: Record<string, number>;
  warnings: number;
  meanResults: number;
}

function log(line = ''): void {
  process.stdout.write(`${line}\n`);
}

async function main(): Promise<void> {
  if (baseline) return compareTrees(await baseline.load<typeof tidalCore>('tidal-core'));
  const started = nowMs();
  const m = machine();
  const report = new Report('query', opts);
  log(`tidal benchmark: ${fmtInt(ITEMS)} items, ${DIMS}-dim embeddings, ${QUERIES} queries per type after ${WARMUP} warm-up`);
  const loadAtStart = loadAverage();
  log(`load average (1 min) before the run: ${loadAtStart}`);
  if (loadAtStart > m.cores / 2) {
    log(`warning: the machine is already busy (load ${loadAtStart} on ${m.cores} cores); the timings will be inflated`);
  }

  const corpus = new Corpus({ items: ITEMS, dims: DIMS, seed: 42 });
  const summary = corpus.signalSummary();
  log(
    `corpus: ${fmtInt(ITEMS)} items in ${CATEGORIES.length} categories, ${fmtInt(corpus.creators)} creators; ` +
      `${fmtInt(summary.views)} views on ${fmtInt(summary.viewedItems)} items, ${fmtInt(summary.likes)} likes on ${fmtInt(summary.likedItems)} items`,
  );

  const tidalDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-bench-'));
  const builder = TidalDb.builder()
    .path(tidalDir)
    .schema(tidalSchema(DIMS))
    .clock(() => corpus.now);
  if (WORKERS !== undefined) builder.workers(WORKERS);
  if (YOUNG_GENERATION > 0) builder.workerYoungGenerationMb(YOUNG_GENERATION);
  const db = await builder.open();
  const sql = new SqlBaseline(DIMS);

  try {
    // ------------------------------------------------------------------ items
    // Only the database calls are timed: generating the corpus is not part of either side's cost.
    log();
    let tidalItemsMs = 0;
    let sqlItemsMs = 0;
    {
      const p = new Progress('items into tidal', ITEMS);
      for (const batch of corpus.items(BATCH)) {
        const t = nowMs();
        await db.upsertItems(batch);
        tidalItemsMs += nowMs() - t;
        p.tick(batch.length);
      }
      p.finish();
    }
    collectGarbage();
    {
      const p = new Progress('items into SQLite', ITEMS);
      let first = 0;
      for (const batch of corpus.items(BATCH)) {
        const t = nowMs();
        sql.insertItems(batch, first);
        sqlItemsMs += nowMs() - t;
        first += batch.length;
        p.tick(batch.length);
      }
      p.finish();
    }
    log(
      `items: tidal ${fmtInt((ITEMS / tidalItemsMs) * 1000)} items/s, SQLite (rows + FTS5 + BLOB) ${fmtInt((ITEMS / sqlItemsMs) * 1000)} items/s`,
    );

    // ------------------------------------------------------------------ signals
    collectGarbage();
    const chunks: SignalColumns[] = [...corpus.signalChunks(BATCH)];
    const totalSignals = chunks.reduce((s, c) => s + c.length, 0);
    const tidalIngest = await ingestTidal(db, corpus, chunks, totalSignals);
    const countCheck = checkSignalCounts(db, corpus);
    log(`signal counts read back from tidal: ${countCheck.matched}/${countCheck.sampled} sampled items match the corpus`);
    collectGarbage();
    const rawIngest = ingestRaw(sql, corpus, chunks, totalSignals);
    const ingestRatio = tidalIngest.rate / rawIngest.rate;
    const appendMs = sql.appendOnly(lazyBatches(corpus, chunks)).reduce((a, b) => a + b, 0);
    const appendRate = (totalSignals / appendMs) * 1000;
    log(
      `signals: tidal ${fmtInt(tidalIngest.rate)}/s durable (batch ack p50 ${fmtMs(tidalIngest.ack.p50)} ms, p99 ${fmtMs(tidalIngest.ack.p99)} ms), ` +
        `raw batched INSERT ${fmtInt(rawIngest.rate)}/s; ratio ${ingestRatio.toFixed(2)}; ` +
        `into a table without indexes ${fmtInt(appendRate)}/s`,
    );

    // ------------------------------------------------------------------ warm
    sql.analyze();
    sql.loadVectors();
    collectGarbage();
    const warmStart = nowMs();
    const firstWarm = await db.warm();
    const warmReturnedMs = nowMs() - warmStart;
    // The queries below measure the ANN index: wait for it when warm left it to its own thread.
    const warmed = firstWarm.some((w) => w.annSource === 'building') ? await db.warm({ waitForAnn: true }) : firstWarm;
    const warmMs = nowMs() - warmStart;
    log(
      `warm: returned in ${fmtDuration(warmReturnedMs)} (index ${firstWarm[0]?.annSource ?? '?'}), ANN index used by every worker after ${fmtDuration(warmMs)} for ${warmed.length} worker${warmed.length === 1 ? '' : 's'} ` +
        `(ANN sizes ${warmed.map((w) => fmtInt(w.annSize)).join(', ')}, index ${warmed[0]?.annSource ?? '?'}); ` +
        `rss ${fmtInt(process.memoryUsage().rss / 2 ** 20)} MiB`,
    );
    // This process holds the SQL side as well; tidal's own figure is the child's (below).
    report.set('memoryAfterLoad', logMemory('after load, this process (tidal and the SQL side)', log));

    // ------------------------------------------------------------------ queries
    log();
    const rows: QueryRow[] = [];
    const now = corpus.now;

    rows.push(
      await compare(
        'trending',
        'retrieve trending',
        () => () => ({}),
        () => db.retrieve({ profile: 'trending', limit: 20 }),
        () => sql.trending(now, 20),
      ),
    );

    rows.push(
      await compare(
        'new-filtered',
        'retrieve new, 5% filter',
        (rand) => () => ({ category: corpus.randomCategory(rand) }),
        (q) => db.retrieve({ profile: 'new', filter: { category: q.category }, limit: 20 }),
        (q) => sql.newest(q.category, 20),
      ),
    );

    rows.push(
      await compare(
        'context',
        'retrieve popular around a context vector',
        (rand) => () => ({ vector: corpus.contextVector(rand) }),
        (q) => db.retrieve({ profile: 'popular', context: q.vector, limit: 20 }),
        (q) => sql.nearest(q.vector, 20),
      ),
    );

    rows.push(
      await compare(
        'text',
        'search text',
        (rand) => () => {
          const text = corpus.textQuery(rand);
          return { text, match: ftsMatchExpression(text) };
        },
        (q) => db.search({ text: q.text, limit: 10 }),
        (q) => sql.text(q.match, 10),
      ),
    );

    rows.push(
      await compare(
        'text-filtered',
        'search text, 5% filter',
        (rand) => () => {
          const c = Math.floor(rand() * CATEGORIES.length);
          const text = corpus.textQuery(rand, c);
          return { text, match: ftsMatchExpression(text), category: CATEGORIES[c]! };
        },
        (q) => db.search({ text: q.text, filter: { category: q.category }, limit: 10 }),
        (q) => sql.textFiltered(q.match, q.category, 10),
      ),
    );

    rows.push(
      await compare(
        'hybrid',
        'search hybrid (text + vector)',
        (rand) => () => {
          const c = Math.floor(rand() * CATEGORIES.length);
          const text = corpus.textQuery(rand, c);
          return { text, match: ftsMatchExpression(text), vector: corpus.contextVector(rand, c) };
        },
        (q) => db.search({ text: q.text, vector: q.vector, limit: 10 }),
        (q) => sql.hybrid(q.match, q.vector, 10, HYBRID_BM25_CANDIDATES, HYBRID_VECTOR_CANDIDATES),
      ),
    );

    // Context a reader may ask about; none of it is part of a target.
    const extras = [...(await baselineVariants(sql, corpus)), ...(await textBreakdown(db, sql, corpus))];

    // ------------------------------------------------------------------ recall
    collectGarbage();
    const recall = await measureRecall(db, sql, corpus);
    log(
      `ANN recall@10 over ${RECALL_QUERIES} query vectors: ${recall.mean.toFixed(4)} (min ${recall.min.toFixed(2)}); ` +
        `vector-only search p50 ${fmtMs(recall.latency.p50)} ms, p99 ${fmtMs(recall.latency.p99)} ms`,
    );

    // ------------------------------------------------------------------ report
    const byKey = (k: string) => rows.find((r) => r.key === k)!;
    const targets = [
      target(
        `durable ingest ≥ ${TARGETS.ingestRatio}× raw batched INSERT`,
        ingestRatio >= TARGETS.ingestRatio,
        `${ingestRatio.toFixed(2)}× (${fmtInt(tidalIngest.rate)} vs ${fmtInt(rawIngest.rate)} signals/s)`,
      ),
      target(
        `retrieve trending p50 ≤ ${TARGETS.trendingP50Ms} ms`,
        byKey('trending').tidal.p50 <= TARGETS.trendingP50Ms,
        `${fmtMs(byKey('trending').tidal.p50)} ms`,
      ),
      target(
        `hybrid search p50 ≤ ${TARGETS.hybridP50Ms} ms`,
        byKey('hybrid').tidal.p50 <= TARGETS.hybridP50Ms,
        `${fmtMs(byKey('hybrid').tidal.p50)} ms`,
      ),
      target(`ANN recall@10 ≥ ${TARGETS.recallAt10}`, recall.mean >= TARGETS.recallAt10, recall.mean.toFixed(4)),
      ...['trending', 'new-filtered', 'context'].map((k) =>
        target(
          `${byKey(k).label} ≥ ${TARGETS.retrieveSpeedup}× faster than SQL (p50)`,
          byKey(k).speedup >= TARGETS.retrieveSpeedup,
          `${fmtRatio(byKey(k).speedup)} (${fmtMs(byKey(k).tidal.p50)} vs ${fmtMs(byKey(k).sql.p50)} ms)`,
        ),
      ),
      target(
        `search text within ${TARGETS.textOverhead}× of direct FTS5 (p50)`,
        byKey('text').tidal.p50 <= TARGETS.textOverhead * byKey('text').sql.p50,
        `${(byKey('text').tidal.p50 / byKey('text').sql.p50).toFixed(2)}× (${fmtMs(byKey('text').tidal.p50)} vs ${fmtMs(byKey('text').sql.p50)} ms)`,
      ),
    ];

    // tidal's memory after the same load with nothing else of the bench in the process.
    let memoryAlone: ReturnType<typeof measureTidalAlone> | undefined;
    if (!opts['skip-memory']) {
      log('memory after load, tidal alone (the same items, signals and warm() in a process of its own):');
      memoryAlone = measureTidalAlone({ items: ITEMS, ...(WORKERS !== undefined ? { workers: WORKERS } : {}) });
      for (const l of describeReading(memoryAlone)) log(l);
    }

    const loadAtEnd = loadAverage();
    log(`load average (1 min) at the end, the bench's own threads included: ${loadAtEnd}`);
    const command = `npm run bench -- --suite query${argv.length ? ` ${argv.join(' ')}` : ''}`;
    const md = renderMarkdown({
      command,
      machine: describeMachine(m),
      load: [loadAtStart, loadAtEnd],
      tidalItemsRate: (ITEMS / tidalItemsMs) * 1000,
      sqlItemsRate: (ITEMS / sqlItemsMs) * 1000,
      totalSignals,
      tidalIngest,
      rawIngest,
      ingestRatio,
      appendRate,
      countCheck,
      warmMs,
      rows,
      extras,
      recall,
      targets,
    });
    log();
    log('```markdown');
    log(md);
    log('```');

    const json = {
      loadAverage: { start: loadAtStart, end: loadAtEnd },
      config: {
        items: ITEMS,
        dims: DIMS,
        queries: QUERIES,
        warmup: WARMUP,
        workers: WORKERS ?? 'default',
        inflight: INFLIGHT,
        batch: BATCH,
      },
      corpus: { ...summary, creators: corpus.creators, now: new Date(corpus.now).toISOString() },
      items: { tidalPerSec: (ITEMS / tidalItemsMs) * 1000, sqlPerSec: (ITEMS / sqlItemsMs) * 1000 },
      ingest: {
        signals: totalSignals,
        tidal: { perSec: tidalIngest.rate, wallPerSec: tidalIngest.wallRate, ackMs: tidalIngest.ack },
        raw: { perSec: rawIngest.rate, txMs: rawIngest.tx },
        ratio: ingestRatio,
        unindexedAppendPerSec: appendRate,
      },
      signalCountCheck: countCheck,
      warm: { ms: warmMs, returnedMs: warmReturnedMs, workers: warmed },
      memoryTidalAlone: memoryAlone,
      tidalStats: db.stats(),
      queries: rows,
      baselineVariants: extras,
      recall,
      targets,
    };
    for (const [k, v] of Object.entries(json)) report.set(k, v);
    report.finish();
    log(`total time: ${fmtDuration(nowMs() - started)}`);
  } finally {
    await db.close();
    sql.close();
    fs.rmSync(tidalDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// --baseline DIR: this tree against another
// ---------------------------------------------------------------------------------------------

type Query = { run: (db: TidalDb) => Promise<RetrieveResults | SearchResults> };

/** The query types of the comparison with SQL, as calls any tree's TidalDb takes. */
function treeQueries(corpus: Corpus): { label: string; make: (rand: () => number) => () => Query }[] {
  return [
    { label: 'retrieve trending', make: () => () => ({ run: (db) => db.retrieve({ profile: 'trending', limit: 20 }) }) },
    {
      label: 'retrieve new, 5% filter',
      make: (rand) => () => {
        const category = corpus.randomCategory(rand);
        return { run: (db) => db.retrieve({ profile: 'new', filter: { category }, limit: 20 }) };
      },
    },
    {
      label: 'retrieve popular around a context vector',
      make: (rand) => () => {
        const context = corpus.contextVector(rand);
        return { run: (db) => db.retrieve({ profile: 'popular', context, limit: 20 }) };
      },
    },
    {
      label: 'search text',
      make: (rand) => () => {
        const text = corpus.textQuery(rand);
        return { run: (db) => db.search({ text, limit: 10 }) };
      },
    },
    {
      label: 'search text, 5% filter',
      make: (rand) => () => {
        const c = Math.floor(rand() * CATEGORIES.length);
        const text = corpus.textQuery(rand, c);
        return { run: (db) => db.search({ text, filter: { category: CATEGORIES[c]! }, limit: 10 }) };
      },
    },
    {
      label: 'search hybrid (text + vector)',
      make: (rand) => () => {
        const c = Math.floor(rand() * CATEGORIES.length);
        const text = corpus.textQuery(rand, c);
        const vector = corpus.contextVector(rand, c);
        return { run: (db) => db.search({ text, vector, limit: 10 }) };
      },
    },
  ];
}

/**
 * The same corpus into this tree's tidal-core (after) and the baseline's (before), each in a
 * directory of its own, the batches of both taking turns; then every query type over the same
 * query list, in blocks of BLOCK queries that take turns (who goes first alternating, one warm-up
 * block each). Per query type: each side's p50 and p99, after ÷ before of the p50, and of every
 * block's total (median and range over blocks: the figure on a shared machine), and the share of
 * before's top ids that after returned too.
 */
async function compareTrees(before: typeof tidalCore): Promise<void> {
  const report = new Report('query', opts);
  report.line(`Baseline: ${baseline!.dir} at ${baseline!.commit} (before) against this tree (after).`);
  report.line();
  const corpus = new Corpus({ items: ITEMS, dims: DIMS, seed: 42 });
  const sides = [
    { name: 'before', Db: before.TidalDb },
    { name: 'after', Db: TidalDb },
  ];
  const dirs: string[] = [];
  const dbs: TidalDb[] = [];
  try {
    for (const side of sides) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `tidal-bench-${side.name}-`));
      dirs.push(dir);
      const builder = side.Db.builder()
        .path(dir)
        .schema(tidalSchema(DIMS))
        .clock(() => corpus.now);
      if (WORKERS !== undefined) builder.workers(WORKERS);
      if (side.name === 'after' && YOUNG_GENERATION > 0) builder.workerYoungGenerationMb(YOUNG_GENERATION);
      dbs.push(await builder.open());
    }
    const writeMs = [0, 0];
    let turn = 0;
    const write = async (call: (db: TidalDb) => Promise<unknown>) => {
      for (const k of turn++ % 2 === 0 ? [0, 1] : [1, 0]) {
        const t = nowMs();
        await call(dbs[k]!);
        writeMs[k]! += nowMs() - t;
      }
    };
    const p = new Progress('items and signals into both trees', ITEMS);
    for (const batch of corpus.items(BATCH)) {
      await write((db) => db.upsertItems(batch));
      p.tick(batch.length);
    }
    for (const chunk of corpus.signalChunks(BATCH)) {
      const batch = corpus.toSignals(chunk);
      await write((db) => db.signals(batch));
    }
    p.finish();
    for (const db of dbs) await db.warm({ waitForAnn: true });
    collectGarbage();

    report.line(
      `Items and signals written in batches of ${BATCH}, the two trees taking turns: before ${fmtInt(writeMs[0]!)} ms, ` +
        `after ${fmtInt(writeMs[1]!)} ms, after ÷ before ${fmtRatio(writeMs[1]! / writeMs[0]!)}.`,
    );
    report.line();
    const rows: string[][] = [];
    const results: unknown[] = [{ label: 'write', beforeMs: writeMs[0], afterMs: writeMs[1] }];
    const blocks = Math.ceil(QUERIES / BLOCK);
    let seed = 0;
    for (const q of treeQueries(corpus)) {
      const next = q.make(mulberry32(mixSeed(7, ++seed)));
      const queries = Array.from({ length: (blocks + 1) * BLOCK }, () => next());
      const side = (k: number): BlockSide<Query> => ({
        name: sides[k]!.name,
        run: async (query) => {
          const r = await query.run(dbs[k]!);
          return { ids: ('items' in r ? r.items : r.hits).map((x) => x.id), serviceMs: outcomeOf(r).serviceMs };
        },
      });
      const c = await compareInBlocks([side(0), side(1)], queries, BLOCK);
      const { before: sb, after: sa } = c;
      const row = blockRow(q.label, c, true);
      process.stderr.write(`${row.join(' | ')}\n`);
      rows.push(row);
      results.push({
        label: q.label,
        before: sb,
        after: sa,
        worker: c.worker,
        blocks: c.blocks,
        agreement: c.agreement,
      });
    }
    report.table(
      `${fmtInt(ITEMS)} items; ${blocks * BLOCK} timed queries per type in blocks of ${BLOCK}, after one warm-up block`,
      [
        '',
        'before p50 ms',
        'after p50 ms',
        'after ÷ before (p50)',
        'after ÷ before per block (range)',
        'before p99 ms',
        'after p99 ms',
        'before worker p50 ms',
        'after worker p50 ms',
        'same top-k',
      ],
      rows,
    );
    report.set('baseline', { dir: baseline!.dir, commit: baseline!.commit });
    report.set('rows', results);
    report.finish();
  } finally {
    for (const db of dbs) await db.close();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Ingest
// ---------------------------------------------------------------------------------------------

interface IngestResult {
  /** Signals per second of time spent waiting for acknowledgements. */
  rate: number;
  /** Signals per second of wall time including building the batch objects. */
  wallRate: number;
  ack: Summary;
}

async function ingestTidal(db: TidalDb, corpus: Corpus, chunks: SignalColumns[], total: number): Promise<IngestResult> {
  const p = new Progress('signals into tidal', total, 'signals');
  const acks: number[] = [];
  let inDb = 0;
  const wallStart = nowMs();
  if (INFLIGHT === 1) {
    for (const chunk of chunks) {
      const batch = corpus.toSignals(chunk);
      const t = nowMs();
      await db.signals(batch);
      const ms = nowMs() - t;
      inDb += ms;
      acks.push(ms);
      p.tick(batch.length);
    }
  } else {
    // A window of batches in flight, as a pipelined producer would run; the rate is then over wall time.
    const window = new Set<Promise<void>>();
    const t0 = nowMs();
    for (const chunk of chunks) {
      const batch: CorpusSignal[] = corpus.toSignals(chunk);
      const t = nowMs();
      const pr: Promise<void> = db.signals(batch).then(() => {
        acks.push(nowMs() - t);
        p.tick(batch.length);
        window.delete(pr);
      });
      window.add(pr);
      if (window.size >= INFLIGHT) await Promise.race(window);
    }
    await Promise.all(window);
    inDb = nowMs() - t0;
  }
  const wall = nowMs() - wallStart;
  p.finish();
  return { rate: (total / inDb) * 1000, wallRate: (total / wall) * 1000, ack: summarize(acks) };
}

/** Object batches built one at a time, so a million-item run never holds all of them at once. */
function* lazyBatches(corpus: Corpus, chunks: readonly SignalColumns[]): Generator<CorpusSignal[]> {
  for (const chunk of chunks) yield corpus.toSignals(chunk);
}

function ingestRaw(sql: SqlBaseline, corpus: Corpus, chunks: SignalColumns[], total: number): { rate: number; tx: Summary } {
  const p = new Progress('signals into SQLite', total, 'signals');
  const tx: number[] = [];
  let inDb = 0;
  for (const chunk of chunks) {
    const batch = corpus.toSignals(chunk);
    const t = nowMs();
    sql.insertSignals(batch);
    const ms = nowMs() - t;
    inDb += ms;
    tx.push(ms);
    p.tick(batch.length);
  }
  p.finish();
  return { rate: (total / inDb) * 1000, tx: summarize(tx) };
}

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

interface Outcome {
  level: DegradationLevel;
  warnings: number;
  ids: string[];
  tookMs: number;
  /** Worker time (`explain.serviceMs`); NaN when the answer did not come from a worker's execution. */
  serviceMs: number;
}

/** Read after the clock stopped, so neither side's timing includes the bench's own bookkeeping. */
function outcomeOf(r: RetrieveResults | SearchResults): Outcome {
  const list: { id: string }[] = 'items' in r ? r.items : r.hits;
  const serviceMs = (r.explain as { serviceMs?: number }).serviceMs ?? Number.NaN;
  return { level: r.degradationLevel, warnings: r.warnings.length, ids: list.map((x) => x.id), tookMs: r.tookMs, serviceMs };
}

/** The share of the SQL answer that tidal's answer also holds (1 when both are empty). */

let querySeed = 0;

/**
 * Runs one query type on both sides over the same query list (warm-up then measured), one query
 * at a time. `make` builds a query generator from a seeded RNG.
 */
async function compare<Q>(
  key: string,
  label: string,
  make: (rand: () => number) => () => Q,
  onTidal: (q: Q) => Promise<RetrieveResults | SearchResults>,
  onSql: (q: Q) => readonly { id: string }[],
): Promise<QueryRow> {
  const next = make(mulberry32(mixSeed(7, ++querySeed)));
  const queries: Q[] = Array.from({ length: WARMUP + QUERIES }, () => next());
  collectGarbage();

  const p = new Progress(label, queries.length, 'query pairs');
  const tidalMs: number[] = [];
  const sqlMs: number[] = [];
  const took: number[] = [];
  const service: number[] = [];
  const levels: Record<string, number> = {};
  let warnings = 0;
  let results = 0;
  let agree = 0;
  // The two sides take turns in blocks of BLOCK queries (who goes first alternates), so load from
  // anything else on the machine lands on both alike. Blocks rather than single queries because a
  // brute-force scan sweeps the CPU caches; alternating every query would bill that to tidal.
  const tidalOut = new Array<RetrieveResults | SearchResults>(queries.length);
  const sqlOut = new Array<readonly { id: string }[]>(queries.length);
  for (let b = 0; b * BLOCK < queries.length; b++) {
    const from = b * BLOCK;
    const to = Math.min(queries.length, from + BLOCK);
    for (const side of b % 2 === 0 ? (['tidal', 'sql'] as const) : (['sql', 'tidal'] as const)) {
      for (let i = from; i < to; i++) {
        const t = nowMs();
        if (side === 'tidal') {
          tidalOut[i] = await onTidal(queries[i]!);
          if (i >= WARMUP) tidalMs.push(nowMs() - t);
        } else {
          sqlOut[i] = onSql(queries[i]!);
          if (i >= WARMUP) sqlMs.push(nowMs() - t);
        }
        p.tick(0.5);
      }
      // Let the progress line and any timers run between blocks of synchronous SQL.
      await new Promise((r) => setImmediate(r));
    }
  }
  for (let i = WARMUP; i < queries.length; i++) {
    const o = outcomeOf(tidalOut[i]!);
    took.push(o.tookMs);
    if (!Number.isNaN(o.serviceMs)) service.push(o.serviceMs);
    const name = levelName(o.level);
    levels[name] = (levels[name] ?? 0) + 1;
    warnings += o.warnings;
    results += o.ids.length;
    agree += agreement(
      o.ids,
      sqlOut[i]!.map((h) => h.id),
    );
  }
  p.finish();
  const tidal = summarize(tidalMs);
  const sql = summarize(sqlMs);
  const row: QueryRow = {
    key,
    label,
    tidal,
    worker: summarize(service),
    tidalTookP50: summarize(took).p50,
    sql,
    speedup: sql.p50 / tidal.p50,
    agreement: agree / QUERIES,
    levels,
    warnings,
    meanResults: results / QUERIES,
  };
  log(
    `${label.padEnd(42)} tidal p50 ${fmtMs(tidal.p50).padStart(7)} p99 ${fmtMs(tidal.p99).padStart(7)} ms ` +
      `(worker p50 ${fmtMs(row.worker.p50).padStart(7)} p99 ${fmtMs(row.worker.p99).padStart(7)}) | ` +
      `SQL p50 ${fmtMs(sql.p50).padStart(7)} p99 ${fmtMs(sql.p99).padStart(7)} ms | ${fmtRatio(row.speedup)} | ` +
      `same answer ${(100 * row.agreement).toFixed(1)}%`,
  );
  return row;
}

interface ContextRow {
  side: 'tidal' | 'SQL';
  label: string;
  latency: Summary;
}

/** Several ways of running the same queries, taking turns in blocks of BLOCK queries (rotating who goes first). */
async function interleaved<Q>(queries: readonly Q[], warmup: number, runs: readonly ((q: Q) => unknown)[]): Promise<Summary[]> {
  const ms: number[][] = runs.map(() => []);
  for (let b = 0; b * BLOCK < queries.length; b++) {
    const from = b * BLOCK;
    const to = Math.min(queries.length, from + BLOCK);
    for (let j = 0; j < runs.length; j++) {
      const k = (b + j) % runs.length;
      for (let i = from; i < to; i++) {
        const t = nowMs();
        await runs[k]!(queries[i]!);
        if (i >= warmup) ms[k]!.push(nowMs() - t);
      }
    }
  }
  return ms.map(summarize);
}

/** One timed loop over pre-built queries; the first `warmup` are not recorded. */
async function timeLoop<Q>(queries: readonly Q[], warmup: number, run: (q: Q) => unknown): Promise<Summary> {
  const ms: number[] = [];
  for (let i = 0; i < queries.length; i++) {
    const t = nowMs();
    await run(queries[i]!);
    if (i >= warmup) ms.push(nowMs() - t);
  }
  return summarize(ms);
}

/**
 * Two variants of the SQL side: the per-query BLOB scan (what the vector query costs when nobody
 * thought to cache the vectors), and the "new, filtered" query with a composite (category,
 * created_at) index, which turns its sort into an index walk.
 */
async function baselineVariants(sql: SqlBaseline, corpus: Corpus): Promise<ContextRow[]> {
  const out: ContextRow[] = [];
  {
    const rand = mulberry32(mixSeed(7, 1001));
    // A few seconds a query at a million items: a handful of queries shows the magnitude.
    const n = Math.min(ITEMS > 200_000 ? 5 : 20, QUERIES);
    const vectors = Array.from({ length: n + 2 }, () => corpus.contextVector(rand));
    const p = new Progress('SQL context vector, BLOB scan per query', vectors.length, 'queries');
    const latency = await timeLoop(vectors, 2, async (v) => {
      sql.nearestFromBlobs(v, 20);
      p.tick(1);
      await new Promise((r) => setImmediate(r));
    });
    p.finish();
    out.push({ side: 'SQL', label: 'context vector, BLOBs read from SQLite per query', latency });
  }
  {
    sql.db.exec('CREATE INDEX items_category_created ON items(category, created_at)');
    sql.analyze();
    const rand = mulberry32(mixSeed(7, 1002));
    const cats = Array.from({ length: WARMUP + QUERIES }, () => corpus.randomCategory(rand));
    const latency = await timeLoop(cats, WARMUP, (c) => sql.newest(c, 20));
    sql.db.exec('DROP INDEX items_category_created');
    sql.analyze();
    out.push({ side: 'SQL', label: 'new, 5% filter, with a (category, created_at) index', latency });
  }
  for (const v of out) log(`${v.side} variant: ${v.label}: p50 ${fmtMs(v.latency.p50)} ms, p99 ${fmtMs(v.latency.p99)} ms`);
  return out;
}

/**
 * Where the time of a text-only search goes: the FTS5 query at tidal's candidate depth (200
 * instead of 10), and the fixed cost of one tidal call (a word no item has: validation, the hop
 * to a worker and back, an FTS5 lookup that finds nothing).
 */
async function textBreakdown(db: TidalDb, sql: SqlBaseline, corpus: Corpus): Promise<ContextRow[]> {
  const rand = mulberry32(mixSeed(7, 1003));
  const texts = Array.from({ length: WARMUP + QUERIES }, (_, i) => ({
    match: ftsMatchExpression(corpus.textQuery(rand)),
    nothing: `qqxz${i}`,
  }));
  const [top10, top200, floor] = await interleaved(texts, WARMUP, [
    (q) => sql.text(q.match, 10),
    (q) => sql.text(q.match, HYBRID_BM25_CANDIDATES),
    (q) => db.search({ text: q.nothing, limit: 10 }),
  ]);
  const out: ContextRow[] = [
    { side: 'SQL', label: 'FTS5 text query, LIMIT 10 (as the baseline above)', latency: top10! },
    { side: 'SQL', label: `FTS5 text query, LIMIT ${HYBRID_BM25_CANDIDATES} (tidal's BM25 candidate depth)`, latency: top200! },
    { side: 'tidal', label: 'search for a word no item has (fixed cost of a call)', latency: floor! },
  ];
  for (const v of out) log(`${v.side}: ${v.label}: p50 ${fmtMs(v.latency.p50)} ms, p99 ${fmtMs(v.latency.p99)} ms`);
  return out;
}

/** Reads the counts back for a sample of items with signals: proof that the ingest landed whole. */
function checkSignalCounts(db: TidalDb, corpus: Corpus): { sampled: number; matched: number } {
  const rand = mulberry32(mixSeed(7, 3001));
  let sampled = 0;
  let matched = 0;
  for (let tries = 0; sampled < 100 && tries < 100_000; tries++) {
    const i = Math.floor(rand() * corpus.size);
    const want = corpus.signalCounts(i);
    if (want.views === 0) continue;
    const got = db.itemSignals(corpus.id(i));
    sampled++;
    if ((got.view?.count ?? 0) === want.views && (got.like?.count ?? 0) === want.likes) matched++;
  }
  return { sampled, matched };
}

interface RecallResult {
  mean: number;
  min: number;
  queries: number;
  levels: Record<string, number>;
  /** Latency of the vector-only searches themselves (ANN candidates, no fusion). */
  latency: Summary;
}

async function measureRecall(db: TidalDb, sql: SqlBaseline, corpus: Corpus): Promise<RecallResult> {
  const rand = mulberry32(mixSeed(7, 2001));
  const vectors = Array.from({ length: RECALL_QUERIES }, () => corpus.contextVector(rand));
  // The exact answers first: a brute-force scan between two tidal searches would evict the ANN
  // graph from the CPU caches and inflate the latencies recorded here.
  const exact = vectors.map((v) => new Set(sql.nearest(v, 10).map((h) => h.id)));
  const p = new Progress('recall@10', RECALL_QUERIES, 'queries');
  let sum = 0;
  let min = 1;
  const levels: Record<string, number> = {};
  const ms: number[] = [];
  for (let i = 0; i < RECALL_QUERIES; i++) {
    const t = nowMs();
    // boost 0: rank by similarity alone, so the comparison is with exact cosine order.
    const s = await db.search({ vector: vectors[i]!, limit: 10, boost: 0 });
    ms.push(nowMs() - t);
    const truth = exact[i]!;
    let hit = 0;
    for (const h of s.hits) if (truth.has(h.id)) hit++;
    const r = hit / truth.size;
    sum += r;
    min = Math.min(min, r);
    const name = levelName(s.degradationLevel);
    levels[name] = (levels[name] ?? 0) + 1;
    p.tick(1);
  }
  p.finish();
  return { mean: sum / RECALL_QUERIES, min, queries: RECALL_QUERIES, levels, latency: summarize(ms) };
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

interface Target {
  name: string;
  met: boolean;
  value: string;
}

function target(name: string, met: boolean, value: string): Target {
  log(`target ${met ? 'MET   ' : 'MISSED'} ${name}: ${value}`);
  return { name, met, value };
}

function renderMarkdown(r: {
  command: string;
  machine: string;
  load: [number, number];
  tidalItemsRate: number;
  sqlItemsRate: number;
  totalSignals: number;
  tidalIngest: IngestResult;
  rawIngest: { rate: number; tx: Summary };
  ingestRatio: number;
  appendRate: number;
  countCheck: { sampled: number; matched: number };
  warmMs: number;
  rows: QueryRow[];
  extras: ContextRow[];
  recall: RecallResult;
  targets: Target[];
}): string {
  const parts: string[] = [];
  parts.push(`Command: \`${r.command}\``);
  parts.push(
    `Machine: ${r.machine}; 1-minute load average ${r.load[0]} before the run and ${r.load[1]} at its end (the bench's own threads included).`,
  );
  parts.push(
    `Corpus: ${fmtInt(ITEMS)} items, ${DIMS}-dim embeddings, ${fmtInt(r.totalSignals)} signals; ` +
      `${QUERIES} sequential queries per type after ${WARMUP} warm-up; tidal workers: ${WORKERS ?? 'default (one per core)'}` +
      `${INFLIGHT > 1 ? `; ${INFLIGHT} signal batches in flight` : ''}.`,
  );
  parts.push(
    markdownTable(
      ['Write path', 'tidal', 'hand-written SQL', 'tidal / SQL'],
      [
        ['items (batches of 1000), items/s', fmtInt(r.tidalItemsRate), fmtInt(r.sqlItemsRate), fmtRatio(r.tidalItemsRate / r.sqlItemsRate)],
        ['signals (batches of 1000), durable signals/s', fmtInt(r.tidalIngest.rate), fmtInt(r.rawIngest.rate), fmtRatio(r.ingestRatio)],
        ['signal batch ack / transaction p50, ms', fmtMs(r.tidalIngest.ack.p50), fmtMs(r.rawIngest.tx.p50), ''],
        ['signal batch ack / transaction p99, ms', fmtMs(r.tidalIngest.ack.p99), fmtMs(r.rawIngest.tx.p99), ''],
      ],
    ),
  );
  parts.push(
    `The SQL signals table has the (kind, at) and (item) indexes its queries need; the same batches into a table ` +
      `without any index run at ${fmtInt(r.appendRate)} signals/s (context, not a target). After the ingest, the ` +
      `counts tidal reports for ${r.countCheck.sampled} sampled items matched the corpus for ${r.countCheck.matched}.`,
  );
  parts.push(
    markdownTable(
      [
        'Query',
        'tidal p50 ms',
        'tidal p99 ms',
        'worker p50 ms',
        'worker p99 ms',
        'SQL p50 ms',
        'SQL p99 ms',
        'speed-up (SQL p50 / tidal p50)',
        'same top-k as SQL',
        'tidal levels',
      ],
      r.rows.map((q) => [
        q.label,
        fmtMs(q.tidal.p50),
        fmtMs(q.tidal.p99),
        fmtMs(q.worker.p50),
        fmtMs(q.worker.p99),
        fmtMs(q.sql.p50),
        fmtMs(q.sql.p99),
        fmtRatio(q.speedup),
        `${(100 * q.agreement).toFixed(1)}%`,
        Object.entries(q.levels)
          .map(([k, v]) => `${k} ${v}`)
          .join(', '),
      ]),
    ),
  );
  parts.push(
    markdownTable(
      ['Context measurement (no target)', 'side', 'p50 ms', 'p99 ms', 'queries'],
      r.extras.map((v) => [v.label, v.side, fmtMs(v.latency.p50), fmtMs(v.latency.p99), String(v.latency.n)]),
    ),
  );
  parts.push(
    `ANN recall@10 (${r.recall.queries} query vectors, exact brute-force cosine as truth): ${r.recall.mean.toFixed(4)} (worst query ${r.recall.min.toFixed(2)}); those vector-only searches took p50 ${fmtMs(r.recall.latency.p50)} ms, p99 ${fmtMs(r.recall.latency.p99)} ms. Warm-up of the query workers until every one uses the ANN index (built on its own thread and saved, then mapped by every worker): ${fmtDuration(r.warmMs)}.`,
  );
  parts.push(
    markdownTable(
      ['Target', 'Result', 'Measured'],
      r.targets.map((t) => [t.name, t.met ? 'met' : 'missed', t.value]),
    ),
  );
  return parts.join('\n\n');
}

// A handle left open after close() would keep the process alive; say so instead of hanging.
main()
  .then(() => {
    setTimeout(() => {
      process.stderr.write('bench: something kept the process alive 5 s after close(); exiting\n');
      process.exit(0);
    }, 5000).unref();
  })
  .catch((err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
