/**
 * trending and text search at a large catalogue, the executors called directly (no worker hop, no
 * ANN index: the embeddings are left out, so a million items load in a minute): the bench corpus
 * into an in-memory items table, a worker-style catalog with its text index, and a signal store;
 * then per query type the mean time per query and the work counters, and whether the answer is the
 * exhaustive one (trending: the scan of every slot; text: every posting scored).
 */
import Database from 'better-sqlite3';
import { openStorage } from 'tidal-wal/storage';
import {
  Catalog,
  RetrieveExecutor,
  SignalStore,
  levelPlan,
  queryTerms,
  searchTopK,
  type QueryContext,
  type RetrieveTask,
} from 'tidal-query';
import { DegradationLevel } from 'tidal-core';
import { CATEGORIES, Corpus, tidalSchema } from '../src/corpus.js';
import { Report, fmtInt, nowMs, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('hot-paths', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  queries: { type: 'int', default: 50, description: 'distinct queries per type' },
  reps: { type: 'int', default: 5, description: 'timed passes over them' },
  only: { type: 'string', default: '', description: 'only the query types whose name contains TEXT' },
});

function build(corpus: Corpus): QueryContext {
  const tidal = tidalSchema(corpus.dims);
  const kinds = tidal.signals.map((s) => ({ name: s.name, halfLifeMs: s.halfLifeMs, windows: [...s.windows], velocity: s.velocity }));
  const schema = { kinds, metadata: { category: 'string' as const, creator: 'string' as const }, embeddingDims: corpus.dims };
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const insert = db.prepare('INSERT INTO items VALUES (?, ?, 1, ?, ?, ?, NULL, ?)');
  const CHUNK = 10_000;
  for (let start = 0; start < corpus.size; start += CHUNK) {
    const n = Math.min(CHUNK, corpus.size - start);
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        const it = corpus.item(start + i);
        const meta = JSON.stringify({ category: it.metadata.category, creator: it.metadata.creator });
        insert.run(start + i, it.id, it.text, meta, it.createdAt, start + i + 1);
      }
    })();
  }
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  catalog.text.summarizeAll();
  const summary = corpus.signalSummary();
  const store = SignalStore.create({ kinds, maxOrdinals: corpus.size, maxSlots: summary.viewedItems + summary.likedItems + 1024 });
  for (const chunk of corpus.signalChunks(10_000)) {
    for (let e = 0; e < chunk.length; e++) store.apply(chunk.item[e]!, chunk.kind[e]!, 1, chunk.at[e]!);
  }
  return { schema, catalog, store, ann: null, db };
}

function same(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

async function main(): Promise<void> {
  const report = new Report('hot-paths', opts);
  const corpus = new Corpus({ items: opts.items, seed: 42 });
  const t0 = nowMs();
  const ctx = build(corpus);
  report.line(`${fmtInt(opts.items)} items, ${fmtInt(ctx.store.slotsUsed())} slots, built in ${((nowMs() - t0) / 1000).toFixed(1)} s`);
  const now = corpus.now;
  const ordered = new RetrieveExecutor(ctx, { trendingCache: null });
  const scan = new RetrieveExecutor(ctx, { exhaustive: true, trendingCache: null });
  const rand = mulberry32(7);
  const base: RetrieveTask = {
    profile: 'trending',
    context: null,
    filter: null,
    diversity: null,
    limit: 20,
    window: '1h',
    exclude: null,
  };
  const texts = Array.from({ length: opts.queries }, () => {
    const c = Math.floor(rand() * CATEGORIES.length);
    return { terms: queryTerms(corpus.textQuery(rand, c), 32), category: CATEGORIES[c]! };
  });
  const rows: string[][] = [];
  const types: { name: string; run: () => { ids: number[]; work: number }; exact: () => number[] }[] = [];
  for (const level of [DegradationLevel.Full, DegradationLevel.NoDiversity]) {
    const plan = levelPlan(level);
    for (const window of ['1h', '24h'] as const) {
      for (const diversity of [null, { maxPer: { creator: 2 } }]) {
        const task = { ...base, window, diversity };
        const ids = (exec: RetrieveExecutor) => {
          const picked: number[] = [];
          const r = exec.run(task, plan, now, picked);
          return { ids: picked, work: r.explain.slotsVisited ?? 0 };
        };
        types.push({
          name: `trending ${window}${diversity ? ' diversity' : ''} L${level}`,
          run: () => ids(ordered),
          exact: () => ids(scan).ids,
        });
      }
    }
  }
  for (const depth of [10, 200]) {
    for (const filtered of [false, true]) {
      let q = 0;
      const run = (prune = true) => {
        const t = texts[q++ % texts.length]!;
        const accept = filtered ? (o: number) => ctx.catalog.fieldValue('category', o) === t.category : undefined;
        const r = searchTopK(ctx.catalog.text, t.terms, depth, { ...(accept ? { accept } : {}), prune });
        return { ids: Array.from(r.ordinals), work: r.postingsScored };
      };
      // The exact run goes back one query, so it scores the query just timed.
      types.push({ name: `text k=${depth}${filtered ? ' filtered' : ''}`, run: () => run(), exact: () => (q--, run(false).ids) });
    }
  }
  for (const t of types.filter((x) => x.name.includes(opts.only))) {
    let work = 0;
    let agree = 0;
    for (let i = 0; i < opts.queries; i++) {
      const a = t.run();
      work += a.work;
      if (same(a.ids, t.exact())) agree++;
    }
    const s = nowMs();
    for (let r = 0; r < opts.reps; r++) for (let i = 0; i < opts.queries; i++) t.run();
    const us = ((nowMs() - s) * 1000) / (opts.reps * opts.queries);
    const row = [t.name, us.toFixed(0), fmtInt(Math.round(work / opts.queries)), `${agree}/${opts.queries}`];
    report.line(row.join(' | '));
    rows.push(row);
  }
  report.table('', ['query', 'µs/query', 'work/query', 'same as exhaustive'], rows);
  report.finish();
}

await main();
