/**
 * trending and text search through the public API at a large catalogue, without the ANN index
 * (the items are written without embeddings, so `warm()` has no graph to build and a million
 * items are ready in minutes): the bench corpus's items and signals into a TidalDb, `warm()`,
 * then per query type `--queries` timed queries after 30 warm-up, one at a time, as the query
 * suite runs them. Reports each type's caller time and its worker time (`explain.serviceMs`)
 * apart, p50 and p99, and the work counters of the median query.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TidalDb, type RetrieveResults, type SearchResults } from 'tidal-core';
import { CATEGORIES, Corpus, tidalSchema } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, loadAverage, nowMs, parseOptions, summarize } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('worker-time', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  queries: { type: 'int', default: 300, description: 'timed queries per type, after 30 warm-up' },
});
const WARMUP = 30;

async function main(): Promise<void> {
  const report = new Report('worker-time', opts);
  const corpus = new Corpus({ items: opts.items, dims: 128, seed: 42 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-worker-time-'));
  const db = await TidalDb.builder()
    .path(dir)
    .schema(tidalSchema(128))
    .clock(() => corpus.now)
    .open();
  try {
    const t0 = nowMs();
    for (const batch of corpus.items(1000)) await db.upsertItems(batch.map(({ embedding: _, ...item }) => item));
    for (const chunk of corpus.signalChunks(1000)) await db.signals(corpus.toSignals(chunk));
    const t1 = nowMs();
    await db.warm();
    report.line(
      `${fmtInt(opts.items)} items (no embeddings) and their signals in ${((t1 - t0) / 1000).toFixed(0)} s, warm ${((nowMs() - t1) / 1000).toFixed(1)} s; load average ${loadAverage()}`,
    );
    const rand = mulberry32(7);
    const types: { name: string; run: () => Promise<RetrieveResults | SearchResults> }[] = [
      { name: 'retrieve trending', run: () => db.retrieve({ profile: 'trending', limit: 20 }) },
      { name: 'search text', run: () => db.search({ text: corpus.textQuery(rand), limit: 10 }) },
      {
        name: 'search text, 5% filter',
        run: () => {
          const c = Math.floor(rand() * CATEGORIES.length);
          return db.search({ text: corpus.textQuery(rand, c), filter: { category: CATEGORIES[c]! }, limit: 10 });
        },
      },
    ];
    const rows: string[][] = [];
    const json: Record<string, unknown> = {};
    for (const t of types) {
      const caller: number[] = [];
      const worker: number[] = [];
      const work: number[] = [];
      for (let i = 0; i < WARMUP + opts.queries; i++) {
        const s = nowMs();
        const r = await t.run();
        const ms = nowMs() - s;
        if (i < WARMUP) continue;
        caller.push(ms);
        const e = r.explain as { serviceMs?: number; slotsVisited?: number; postingsScored?: number };
        worker.push(e.serviceMs ?? Number.NaN);
        work.push(e.slotsVisited ?? e.postingsScored ?? 0);
      }
      const c = summarize(caller);
      const w = summarize(worker);
      const row = [t.name, fmtMs(c.p50), fmtMs(c.p99), fmtMs(w.p50), fmtMs(w.p99), fmtInt(summarize(work).p50)];
      report.line(row.join(' | '));
      rows.push(row);
      json[t.name] = { caller: c, worker: w, work: summarize(work) };
    }
    report.table('', ['query', 'caller p50 ms', 'caller p99 ms', 'worker p50 ms', 'worker p99 ms', 'slots or postings (p50)'], rows);
    report.set('queries', json);
    report.set('loadAverageEnd', loadAverage());
    report.finish();
  } finally {
    await db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
