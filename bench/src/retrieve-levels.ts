/**
 * `npm run bench:retrieve`: what each degradation level costs a retrieve, and what it returns.
 *
 * The bench corpus (`--items`, default 100 000, with its signals) is loaded straight into a signal
 * store, a worker-style catalog over an in-memory SQLite items table and an in-memory ANN index;
 * then, per query profile and per level, the executor is called directly (the level forced), and
 * reported: mean ns per query, the work counters of `explain`, and overlap@10 with the Full result
 * for the same query and clock. `popular` and `trending` run twice in the same process: through the
 * slot orders and with the scan of every slot they replace (`exhaustive`).
 *
 * Flags: `--items N`, `--queries N` (distinct queries per profile, default 50), `--reps N` (timed
 * passes over them, default 5, levels interleaved within each pass), `--only=TEXT` (only the profiles whose name
 * contains TEXT), `--shortlists=N,M` (rows for popular around a context vector searching N, M popular items).
 */
import Database from 'better-sqlite3';
import { openStorage } from 'tidal-wal/storage';
import * as tidalQuery from 'tidal-query';
import {
  levelPlan,
  tunedPlan,
  type LevelPlan,
  type PlanOverrides,
  type QueryContext,
  type RetrieveExecutor,
  type RetrieveTask,
} from 'tidal-query';
import { DegradationLevel, levelName } from 'tidal-core';
import { Corpus, SIGNAL_KINDS, tidalSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { Report, collectGarbage, fmtInt, fmtSpread, interleave, loadBaseline, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('retrieve', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  queries: { type: 'int', default: 50, description: 'distinct queries per profile' },
  reps: { type: 'int', default: 5, description: 'timed passes over them, levels interleaved within each pass' },
  only: { type: 'string', default: '', description: 'only the profiles whose name contains TEXT' },
  shortlists: { type: 'ints', description: 'extra rows for popular around a context vector searching that many popular items' },
  'ann-topk': { type: 'ints', description: 'extra rows for popular around a context vector with that ANN top-k below Full' },
  'trending-slots': { type: 'ints', description: 'extra rows for trending scoring that many active slots below Full' },
  baseline: { type: 'string', description: 'another built checkout: its tidal-query against this one, interleaved, per profile and level' },
});
const ITEMS = opts.items;
const QUERIES = opts.queries;
const REPS = opts.reps;
const ONLY = opts.only;
const SHORTLISTS = opts.shortlists;
const ANN_TOPKS = opts['ann-topk'];
const TRENDING_SLOTS = opts['trending-slots'];
const baseline = loadBaseline(opts.baseline, ['tidal-query']);
const report = new Report('retrieve', opts);
const log = (s = '') => report.line(s);

type TidalQuery = typeof tidalQuery;

const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;

function build(corpus: Corpus, { AnnIndex, Catalog, SignalStore }: TidalQuery): QueryContext {
  const dims = corpus.dims;
  const tidal = tidalSchema(dims);
  const kinds = tidal.signals.map((s) => ({ name: s.name, halfLifeMs: s.halfLifeMs, windows: [...s.windows], velocity: s.velocity }));
  const schema = { kinds, metadata: { category: 'string' as const, creator: 'string' as const }, embeddingDims: dims };
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  // A baseline tree from before file format 4 reads its text totals from FTS5: an empty table serves it.
  db.exec("CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, content='', contentless_delete=1)");
  const insert = db.prepare('INSERT INTO items VALUES (?, ?, 1, NULL, ?, ?, ?, ?)');
  const ann = new AnnIndex(dims);
  const CHUNK = 10_000;
  for (let start = 0; start < corpus.size; start += CHUNK) {
    const n = Math.min(CHUNK, corpus.size - start);
    const keys: number[] = [];
    const vectors = new Float32Array(n * dims);
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        const it = corpus.item(start + i);
        const blob = Buffer.from(it.embedding.buffer, it.embedding.byteOffset, it.embedding.byteLength);
        insert.run(
          start + i,
          it.id,
          JSON.stringify({ category: it.metadata.category, creator: it.metadata.creator }),
          it.createdAt,
          blob,
          start + i + 1,
        );
        keys.push(start + i);
        vectors.set(it.embedding, i * dims);
      }
    })();
    ann.upsert(keys, vectors, 0);
  }
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const summary = corpus.signalSummary();
  const store = SignalStore.create({ kinds, maxOrdinals: corpus.size, maxSlots: summary.viewedItems + summary.likedItems + 1024 });
  let applyMs = 0;
  let events = 0;
  for (const chunk of corpus.signalChunks(10_000)) {
    const t0 = nowMs();
    for (let e = 0; e < chunk.length; e++) store.apply(chunk.item[e]!, chunk.kind[e]!, 1, chunk.at[e]!);
    applyMs += nowMs() - t0;
    events += chunk.length;
  }
  log(
    `loaded ${fmtInt(corpus.size)} items, ${fmtInt(events)} events (${SIGNAL_KINDS.join(', ')}) into ${fmtInt(store.slotsUsed())} slots; apply ${((applyMs * 1e6) / events).toFixed(0)} ns/event`,
  );
  return { schema, catalog, store, ann, db };
}

interface Profile {
  name: string;
  tasks: RetrieveTask[];
  /** Also run the scan of every slot (popular, trending). */
  scan: boolean;
}

function profiles(corpus: Corpus): Profile[] {
  const rand = mulberry32(99);
  const diversity = { maxPer: { creator: 2 } };
  const base = { context: null, filter: null, diversity, limit: 20, window: '1h' as const, exclude: null };
  const repeat = (t: RetrieveTask) => Array.from({ length: QUERIES }, () => t);
  return [
    { name: 'trending (1h)', tasks: repeat({ ...base, profile: 'trending' }), scan: true },
    { name: 'trending (24h)', tasks: repeat({ ...base, profile: 'trending', window: '24h' }), scan: true },
    { name: 'trending (7d)', tasks: repeat({ ...base, profile: 'trending', window: '7d' }), scan: true },
    { name: 'popular', tasks: repeat({ ...base, profile: 'popular' }), scan: true },
    {
      name: 'popular, category filter',
      tasks: Array.from({ length: QUERIES }, () => ({
        ...base,
        profile: 'popular' as const,
        filter: { category: corpus.randomCategory(rand) },
      })),
      scan: true,
    },
    {
      name: 'new, category filter',
      tasks: Array.from({ length: QUERIES }, () => ({
        ...base,
        profile: 'new' as const,
        filter: { category: corpus.randomCategory(rand) },
      })),
      scan: false,
    },
    {
      name: 'popular around a context vector',
      tasks: Array.from({ length: QUERIES }, () => ({ ...base, profile: 'popular' as const, context: corpus.contextVector(rand) })),
      scan: false,
    },
  ];
}

interface Row {
  ns: number;
  overlap: number;
  slots: number;
  ann: number;
  popular: number;
  candidates: number;
}

interface Run {
  how: string;
  exec: RetrieveExecutor;
  /** The plan each level runs by (default: the level's own). */
  plan?: (level: DegradationLevel) => LevelPlan;
}

/** Overlap@10 of `tops` with `full`, query by query (a query whose Full top 10 is empty counts 1). */
function overlapWith(full: string[][], tops: string[][]): number {
  let overlap = 0;
  for (let q = 0; q < tops.length; q++) {
    const want = new Set(full[q]);
    const got = tops[q]!.filter((id) => want.has(id)).length;
    overlap += want.size === 0 ? 1 : got / want.size;
  }
  return overlap / tops.length;
}

/**
 * Every (run, level) of one profile: tops and work counters first, then `REPS` timed passes, the
 * (run, level) pairs interleaved within each pass so a shared machine's noise falls on all of them
 * alike rather than on whichever level happened to run during a busy spell.
 */
function measureProfile(p: Profile, runs: Run[], now: number): { run: Run; level: DegradationLevel; row: Row }[] {
  const cells = runs.flatMap((run) => LEVELS.map((level) => ({ run, level, plan: run.plan ? run.plan(level) : levelPlan(level) })));
  const tops = cells.map(({ run, plan }) =>
    p.tasks.map((t) =>
      run.exec
        .run(t, plan, now)
        .items.slice(0, 10)
        .map((i) => i.id),
    ),
  );
  const full = tops[0]!;
  const out = cells.map(({ run, level, plan }, c) => {
    let slots = 0;
    let ann = 0;
    let candidates = 0;
    let popular = 0;
    for (const t of p.tasks) {
      const e = run.exec.run(t, plan, now).explain;
      slots += e.slotsVisited ?? 0;
      ann += e.annCandidates ?? 0;
      popular += e.popularCandidates ?? 0;
      candidates += e.candidates;
    }
    const n = p.tasks.length;
    const row: Row = {
      ns: 0,
      overlap: overlapWith(full, tops[c]!),
      slots: slots / n,
      ann: ann / n,
      popular: popular / n,
      candidates: candidates / n,
    };
    return { run, level, plan, row };
  });
  collectGarbage();
  for (let r = 0; r < REPS; r++) {
    for (const cell of out) {
      const t0 = process.hrtime.bigint();
      for (const t of p.tasks) cell.run.exec.run(t, cell.plan, now);
      cell.row.ns += Number(process.hrtime.bigint() - t0) / (REPS * p.tasks.length);
    }
  }
  return out;
}

async function main(): Promise<void> {
  const corpus = new Corpus({ items: ITEMS });
  if (baseline) return compareTrees(corpus, await baseline.load<TidalQuery>('tidal-query'));
  const { RetrieveExecutor } = tidalQuery;
  const t0 = nowMs();
  const ctx = build(corpus, tidalQuery);
  log(`built in ${((nowMs() - t0) / 1000).toFixed(1)} s`);
  const ordered = new RetrieveExecutor(ctx);
  const scan = new RetrieveExecutor(ctx, { exhaustive: true });
  // Variants of the exact pass around a context vector: the same shortlist at every level below Full.
  const below = (overrides: PlanOverrides) => (level: DegradationLevel) =>
    level === DegradationLevel.Full ? levelPlan(level) : tunedPlan(levelPlan(level), overrides);
  const shortlists = SHORTLISTS.map((n) => ({ how: `shortlist ${n}`, exec: ordered, plan: below({ context: { popularShortlist: n } }) }));
  const annTopKs = ANN_TOPKS.map((k) => ({ how: `ANN top-k ${k}`, exec: ordered, plan: below({ ann: { topK: k } }) }));
  const trendingSlots = TRENDING_SLOTS.map((n) => ({ how: `trending slots ${n}`, exec: ordered, plan: below({ trending: { slots: n } }) }));
  const now = corpus.now;
  const rows: string[][] = [];
  for (const p of profiles(corpus).filter((q) => q.name.includes(ONLY))) {
    const runs: Run[] = p.scan
      ? [
          { how: 'scan (before)', exec: scan },
          { how: 'orders', exec: ordered },
        ]
      : [{ how: '', exec: ordered }];
    if (p.tasks[0]!.context) runs.push(...shortlists, ...annTopKs);
    if (p.tasks[0]!.profile === 'trending') runs.push(...trendingSlots);
    const cells = measureProfile(p, runs, now);
    const fullNs = cells[0]!.row.ns;
    for (const { run, level, row } of cells) {
      rows.push([
        p.name,
        run.how,
        levelName(level),
        fmtInt(Math.round(row.ns)),
        (row.ns / fullNs).toFixed(2),
        row.overlap.toFixed(2),
        fmtInt(Math.round(row.slots)),
        row.ann > 0 ? fmtInt(Math.round(row.ann)) : '–',
        row.ann > 0 ? fmtInt(Math.round(row.popular)) : '–',
        fmtInt(Math.round(row.candidates)),
      ]);
      log(rows[rows.length - 1]!.join(' | '));
    }
  }
  log();
  log(`Slots: ${fmtInt(ctx.store.slotsUsed())}; dirty slots at query time: ${ctx.store.order.dirtyCount}.`);
  log("Ratio and overlap@10 are against the first Full row of the profile (the scan's, where there is one).");
  log();
  report.table(
    '',
    [
      'profile',
      'candidates from',
      'level',
      'ns/query',
      'vs Full',
      'overlap@10',
      'slotsVisited',
      'annCandidates',
      'popularCandidates',
      'candidates',
    ],
    rows,
  );
  report.finish();
}

/**
 * `--baseline DIR`: the same corpus loaded into this tree's tidal-query and DIR's, then per
 * profile and level `REPS` interleaved passes of each tree's executor over the same queries.
 * Reports ns/query of each and after ÷ before per pass (median and range), and the overlap@10 of
 * the two trees' answers.
 */
async function compareTrees(corpus: Corpus, before: TidalQuery): Promise<void> {
  log(`Baseline: ${baseline!.dir} at ${baseline!.commit} (before) against this tree (after).`);
  log();
  const after = new tidalQuery.RetrieveExecutor(build(corpus, tidalQuery));
  const old = new before.RetrieveExecutor(build(corpus, before));
  // A tree from before the plan per level runs an executor that takes the level itself.
  const planOf = (tree: TidalQuery, level: DegradationLevel): LevelPlan =>
    'levelPlan' in tree ? tree.levelPlan(level) : (level as unknown as LevelPlan);
  const now = corpus.now;
  const rows: string[][] = [];
  const results: unknown[] = [];
  for (const p of profiles(corpus).filter((q) => q.name.includes(ONLY))) {
    for (const level of LEVELS) {
      const plans = [planOf(tidalQuery, level), planOf(before, level)] as const;
      const tops = [after, old].map((exec, i) =>
        p.tasks.map((t) =>
          exec
            .run(t, plans[i]!, now)
            .items.slice(0, 10)
            .map((x) => x.id),
        ),
      );
      const pass = (exec: RetrieveExecutor, plan: LevelPlan) => () => {
        for (const t of p.tasks) exec.run(t, plan, now);
      };
      const [a, b] = await interleave(
        [
          { name: 'before', run: pass(old, plans[1]) },
          { name: 'after', run: pass(after, plans[0]) },
        ],
        { rounds: REPS },
      );
      const ns = (ms: number) => fmtInt((ms * 1e6) / p.tasks.length);
      const overlap = overlapWith(tops[1]!, tops[0]!).toFixed(2);
      const row = [p.name, levelName(level), ns(a!.round.median), ns(b!.round.median), fmtSpread(b!.ratio), overlap];
      rows.push(row);
      results.push({ profile: p.name, level: levelName(level), before: a, after: b });
      process.stderr.write(`${row.join(' | ')}\n`);
    }
  }
  report.table(
    `after ÷ before, ${REPS} interleaved passes of ${QUERIES} queries`,
    ['profile', 'level', 'before ns/query', 'after ns/query', 'after ÷ before (range)', 'overlap@10 after vs before'],
    rows,
  );
  report.set('baseline', { dir: baseline!.dir, commit: baseline!.commit, rows: results });
  report.finish();
}

await main();
