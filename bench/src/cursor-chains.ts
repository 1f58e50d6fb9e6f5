/**
 * `npm run bench -- --suite cursor`: what a cursor chain costs. Per query, interleaved round by
 * round on one database (two query workers, the bench corpus with users): a page alone (`limit`
 * items, no cursor), the first page of a chain (`paginate: true`: it ranks `cursors.depth` items
 * and keeps the rest), and a later page of a chain (cut from the kept ranking on the database's
 * thread, no worker). Reports the median time at the caller (`tookMs`) and in the worker
 * (`explain.serviceMs`) of each, and the bytes one chain keeps.
 *
 * Flags: `--items N` (default 100 000), `--rounds N` (default 30), `--limit N` (page size, default
 * 20), `--depth N` (`cursors.depth`, default its default).
 */
import { CURSOR_DEFAULTS, TidalDb, type RetrieveRequest, type SearchRequest } from 'tidal-core';
import { Corpus, personalizationSchema } from './corpus.js';
import { Report, fmtInt, nowMs, parseOptions } from './harness/index.js';
import { mulberry32 } from './random.js';

const opts = parseOptions('cursor', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  rounds: { type: 'int', default: 30, min: 1, description: 'timed rounds; medians are reported' },
  limit: { type: 'int', default: 20, min: 1, description: 'page size' },
  depth: { type: 'int', default: CURSOR_DEFAULTS.depth, min: 1, description: 'cursors.depth: items a chain ranks at its first page' },
});
const DIMS = 64;

type Answer = { tookMs: number; nextCursor: string | null; explain: { serviceMs?: number } };
type Query = (extra: { limit: number; paginate?: boolean; cursor?: string }) => Promise<Answer>;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

async function main(): Promise<void> {
  const report = new Report('cursor', opts);
  const corpus = new Corpus({ items: opts.items, dims: DIMS, seed: 42 });
  const db = await TidalDb.builder()
    .ephemeral()
    .schema(personalizationSchema(DIMS))
    .clock(() => corpus.now)
    .workers(2)
    .cursors({ depth: opts.depth })
    .open();
  try {
    const t0 = nowMs();
    for (const batch of corpus.items(1000)) await db.upsertItems(batch);
    for (const batch of corpus.signalBatches(1000)) await db.signals(batch);
    const users = ['u1', 'u2', 'u3', 'u4'];
    for (const [k, u] of users.entries()) {
      await db.upsertUsers([{ id: u, embedding: corpus.contextVector(mulberry32(k + 1), k) }]);
      await db.signals(Array.from({ length: 20 }, (_, i) => ({ item: corpus.id(k * 50 + i), kind: 'view', user: u })));
    }
    await db.warm({ waitForAnn: true });
    report.line(
      `${fmtInt(opts.items)} items loaded and warm in ${((nowMs() - t0) / 1000).toFixed(1)} s; page size ${opts.limit}, depth ${opts.depth}`,
    );
    report.line();
    const vec = corpus.contextVector(mulberry32(7), 0);
    const r =
      (req: RetrieveRequest): Query =>
      (extra) =>
        db.retrieve({ ...req, ...extra });
    const s =
      (req: SearchRequest): Query =>
      (extra) =>
        db.search({ ...req, ...extra });
    const queries: [string, Query][] = [
      ['trending', r({ profile: 'trending' })],
      ['popular', r({ profile: 'popular' })],
      ['hot', r({ profile: 'hot' })],
      ['new', r({ profile: 'new' })],
      ['for_you', r({ profile: 'for_you', user: 'u1' })],
      ['search text', s({ text: 'jazz piano' })],
      ['search hybrid', s({ text: 'jazz piano', vector: vec })],
    ];
    const rows: string[][] = [];
    let bytesPerChain = 0;
    for (const [name, q] of queries) {
      const alone: Answer[] = [];
      const first: Answer[] = [];
      const later: Answer[] = [];
      for (let round = 0; round < opts.rounds + 1; round++) {
        const a = await q({ limit: opts.limit });
        const before = db.stats().cursors.bytes;
        const f = await q({ limit: opts.limit, paginate: true });
        bytesPerChain = Math.max(bytesPerChain, db.stats().cursors.bytes - before);
        const l = f.nextCursor === null ? null : await q({ limit: opts.limit, cursor: f.nextCursor });
        // The first round warms this query's path: not counted.
        if (round === 0) continue;
        alone.push(a);
        first.push(f);
        if (l !== null) later.push(l);
      }
      const took = (xs: Answer[]) => (xs.length === 0 ? '–' : median(xs.map((x) => x.tookMs)).toFixed(3));
      const worker = (xs: Answer[]) => (xs.length === 0 ? '–' : median(xs.map((x) => x.explain.serviceMs ?? 0)).toFixed(3));
      const serviceOf = (xs: Answer[]) => median(xs.map((x) => x.explain.serviceMs ?? 0));
      const ratio = serviceOf(first) / serviceOf(alone);
      rows.push([name, took(alone), worker(alone), took(first), worker(first), `${ratio.toFixed(1)}×`, took(later)]);
    }
    const head = [
      'query',
      'page alone ms',
      'its worker ms',
      'first page of a chain ms',
      'its worker ms',
      'worker: first / alone',
      'later page ms',
    ];
    report.table(`medians of ${opts.rounds} rounds, interleaved`, head, rows);
    const st = db.stats().cursors;
    report.line(
      `kept after the run: ${fmtInt(st.pinned)} rankings, ${fmtInt(st.bytes)} bytes (at most ${fmtInt(bytesPerChain)} bytes for one chain); ${fmtInt(st.evicted)} evicted`,
    );
  } finally {
    await db.close();
  }
  report.finish();
}

await main();
