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
import { AnnIndex, Catalog, RetrieveExecutor, SignalStore, levelPlan, tunedPlan, type LevelPlan, type PlanOverrides, type QueryContext, type RetrieveTask } from 'tidal-query';
import { DegradationLevel, levelName } from 'tidal-core';
import { Corpus, SIGNAL_KINDS, tidalSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { collectGarbage, describeMachine, fmtInt, intFlag, markdownTable, nowMs } from './stats.js';

const argv = process.argv.slice(2);
const ITEMS = intFlag(argv, 'items', 100_000);
const QUERIES = intFlag(argv, 'queries', 50);
const REPS = intFlag(argv, 'reps', 5);
const ONLY = argv.find((a) => a.startsWith('--only='))?.slice('--only='.length) ?? '';
/** `--shortlists=4096,2048`: extra rows for popular around a context vector, searching that many popular items at every level. */
const SHORTLISTS = (argv.find((a) => a.startsWith('--shortlists='))?.slice('--shortlists='.length) ?? '')
  .split(',')
  .filter((x) => x !== '')
  .map(Number);
/** `--ann-topk=128,100`: extra rows for popular around a context vector with that ANN top-k below Full. */
const ANN_TOPKS = (argv.find((a) => a.startsWith('--ann-topk='))?.slice('--ann-topk='.length) ?? '')
  .split(',')
  .filter((x) => x !== '')
  .map(Number);
/** `--trending-slots=256,128`: extra rows for trending scoring that many active slots below Full. */
const TRENDING_SLOTS = (argv.find((a) => a.startsWith('--trending-slots='))?.slice('--trending-slots='.length) ?? '')
  .split(',')
  .filter((x) => x !== '')
  .map(Number);
const log = (s = '') => process.stdout.write(`${s}\n`);

const LEVELS = [
  DegradationLevel.Full,
  DegradationLevel.ReducedCandidates,
  DegradationLevel.CoarseAggregates,
  DegradationLevel.NoDiversity,
] as const;

function build(corpus: Corpus): QueryContext {
  const dims = corpus.dims;
  const tidal = tidalSchema(dims);
  const kinds = tidal.signals.map((s) => ({ name: s.name, halfLifeMs: s.halfLifeMs, windows: [...s.windows], velocity: s.velocity }));
  const schema = { kinds, metadata: { category: 'string' as const, creator: 'string' as const }, embeddingDims: dims };
  const db = new Database(':memory:');
  db.exec(`CREATE TABLE items (ordinal INTEGER PRIMARY KEY, id TEXT NOT NULL, present INTEGER NOT NULL, text TEXT,
    metadata TEXT, created_at REAL, embedding BLOB, version INTEGER NOT NULL)`);
  // The catalog reads FTS5's totals for its text index; the items here carry no text.
  db.exec(`CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', contentless_delete=1)`);
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
        insert.run(start + i, it.id, JSON.stringify({ category: it.metadata.category, creator: it.metadata.creator }), it.createdAt, blob, start + i + 1);
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
  log(`loaded ${fmtInt(corpus.size)} items, ${fmtInt(events)} events (${SIGNAL_KINDS.join(', ')}) into ${fmtInt(store.slotsUsed())} slots; apply ${((applyMs * 1e6) / events).toFixed(0)} ns/event`);
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
    { name: 'trending (7d)', tasks: repeat({ ...base, profile: 'trending', window: '7d' }), scan: true },
    { name: 'popular', tasks: repeat({ ...base, profile: 'popular' }), scan: true },
    {
      name: 'popular, category filter',
      tasks: Array.from({ length: QUERIES }, () => ({ ...base, profile: 'popular' as const, filter: { category: corpus.randomCategory(rand) } })),
      scan: true,
    },
    {
      name: 'new, category filter',
      tasks: Array.from({ length: QUERIES }, () => ({ ...base, profile: 'new' as const, filter: { category: corpus.randomCategory(rand) } })),
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
  const tops = cells.map(({ run, plan }) => p.tasks.map((t) => run.exec.run(t, plan, now).items.slice(0, 10).map((i) => i.id)));
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
    const row: Row = { ns: 0, overlap: overlapWith(full, tops[c]!), slots: slots / n, ann: ann / n, popular: popular / n, candidates: candidates / n };
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

function main(): void {
  log(`# bench:retrieve — ${describeMachine()}`);
  const corpus = new Corpus({ items: ITEMS });
  const t0 = nowMs();
  const ctx = build(corpus);
  log(`built in ${((nowMs() - t0) / 1000).toFixed(1)} s`);
  const ordered = new RetrieveExecutor(ctx);
  const scan = new RetrieveExecutor(ctx, { exhaustive: true });
  // Variants of the exact pass around a context vector: the same shortlist at every level below Full.
  const below = (overrides: PlanOverrides) => (level: DegradationLevel) => (level === DegradationLevel.Full ? levelPlan(level) : tunedPlan(levelPlan(level), overrides));
  const shortlists = SHORTLISTS.map((n) => ({ how: `shortlist ${n}`, exec: ordered, plan: below({ context: { popularShortlist: n } }) }));
  const annTopKs = ANN_TOPKS.map((k) => ({ how: `ANN top-k ${k}`, exec: ordered, plan: below({ ann: { topK: k } }) }));
  const trendingSlots = TRENDING_SLOTS.map((n) => ({ how: `trending slots ${n}`, exec: ordered, plan: below({ trending: { slots: n } }) }));
  const now = corpus.now;
  const rows: string[][] = [];
  for (const p of profiles(corpus).filter((q) => q.name.includes(ONLY))) {
    const runs: Run[] = p.scan ? [{ how: 'scan (before)', exec: scan }, { how: 'orders', exec: ordered }] : [{ how: '', exec: ordered }];
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
  log('Ratio and overlap@10 are against the first Full row of the profile (the scan\'s, where there is one).');
  log();
  log(markdownTable(['profile', 'candidates from', 'level', 'ns/query', 'vs Full', 'overlap@10', 'slotsVisited', 'annCandidates', 'popularCandidates', 'candidates'], rows));
}

main();
