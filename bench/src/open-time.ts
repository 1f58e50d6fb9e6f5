/**
 * `npm run bench:open`: how long a database of the bench corpus takes from `open()` to its first
 * answered query, the first time (no saved ANN index: the index is built on its own thread while
 * queries are answered, vector searches exactly) and again after close (the saved index is mapped).
 *
 * Phases, each timed from outside through the public API: the load (items and the bench's three
 * signal kinds written into a directory, then closed; skipped when `--dir` already holds the
 * corpus), the first open (the saved index removed first), its first queries (trending, text, a
 * vector search, hybrid, popular around a context vector), the ANN build to the end (a progress line
 * every `--progress-s` seconds from `stats().annBuild`) and the same queries with the index, the
 * close, the reopen and its first queries. Memory is read after each open and once the index is used.
 *
 * Flags: `--items N` (default 100 000), `--dir PATH` (keep the loaded directory for later runs),
 * `--load-only` (load into `--dir` and stop), `--only first|reopen` (one phase: the first open closed
 * without waiting for the ANN build, or a reopen of a directory whose index was saved),
 * `--no-catalog-snapshot` (remove the saved catalog snapshot before each open: every worker reads
 * the items table). Each open's line says, per worker, whether its catalog came from the snapshot.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TidalDb, type WarmResult } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import { CATEGORIES, Corpus, tidalSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { Progress, Report, fmtDuration, fmtInt, fmtMs, loadAverage, nowMs, parseOptions } from './harness/index.js';
import { logMemory, type ResidentMemory } from './harness/memory.js';

const opts = parseOptions('open', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  dir: { type: 'string', description: 'the database directory to load into, or reuse when it holds the corpus already' },
  'progress-s': { type: 'int', default: 30, min: 1, description: 'seconds between progress lines of the ANN build' },
  'load-only': { type: 'boolean', default: false, description: 'load the corpus into --dir and stop (the timed phases run later)' },
  'no-catalog-snapshot': {
    type: 'boolean',
    default: false,
    description: 'remove the saved catalog snapshot before each open (every worker reads the items table, as before it existed)',
  },
  only: {
    type: 'string',
    default: 'all',
    description: 'all; first (the first open, closed without waiting for the build); reopen (with the saved index)',
  },
});
const DIMS = 128;
const BATCH = 1000;
/** Written after the load: the directory holds this corpus. */
const MARKER = 'bench-open-corpus.json';

interface FirstQuery {
  name: string;
  ms: number;
  vectorSearch: string | null;
}

/**
 * Each worker's warm steps and where its catalog came from: `sync 3.1 s + structures 0.2 s + terms
 * 0.1 s + paths 0.3 s (catalog snapshot at version 1000, 0 rows read)`.
 */
function fmtSteps(results: readonly WarmResult[]): string {
  return results
    .map((r) => {
      const st = r.stepsMs;
      const from =
        r.catalogSnapshotVersion > 0
          ? `catalog ${(r as { catalogSource?: string }).catalogSource === 'image' ? 'image' : 'snapshot'} at version ${fmtInt(r.catalogSnapshotVersion)}, ${fmtInt(r.refreshedRows)} rows read`
          : `no catalog snapshot, ${fmtInt(r.refreshedRows)} rows read`;
      return `sync ${fmtDuration(st.sync)} + structures ${fmtDuration(st.structures)} + terms ${fmtDuration(st.terms)} + paths ${fmtDuration(st.paths)} (${from})`;
    })
    .join('; ');
}

async function main(): Promise<void> {
  const report = new Report('open', opts);
  const log = (line = ''): void => report.line(line);
  log(`${fmtInt(opts.items)} items, ${DIMS}-dim embeddings; load average ${loadAverage()} at the start`);
  const corpus = new Corpus({ items: opts.items, dims: DIMS, seed: 42 });
  const dir = opts.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-open-'));
  const builder = () =>
    TidalDb.builder()
      .path(dir)
      .schema(tidalSchema(DIMS))
      .clock(() => corpus.now);

  const marker = path.join(dir, MARKER);
  const loaded = fs.existsSync(marker) && (JSON.parse(fs.readFileSync(marker, 'utf8')) as { items: number }).items === opts.items;
  if (!loaded) {
    const t = nowMs();
    const db = await builder().open();
    const p = new Progress('items', opts.items);
    for (const batch of corpus.items(BATCH)) {
      await db.upsertItems(batch);
      p.tick(batch.length);
    }
    p.finish();
    const chunks = [...corpus.signalChunks(BATCH)];
    const s = new Progress(
      'signals',
      chunks.reduce((n, c) => n + c.length, 0),
      'signals',
    );
    for (const chunk of chunks) {
      const batch = corpus.toSignals(chunk);
      await db.signals(batch);
      s.tick(batch.length);
    }
    s.finish();
    // Closed before any warm saw the items: the index has never been built.
    await db.close();
    fs.writeFileSync(marker, JSON.stringify({ items: opts.items }));
    log(`load: ${fmtDuration(nowMs() - t)} (items and signals written, closed)`);
    report.set('loadMs', nowMs() - t);
  } else {
    log(`load: reusing ${dir}`);
  }
  if (opts['load-only']) {
    report.finish();
    return;
  }
  const only = opts.only;
  if (only !== 'all' && only !== 'first' && only !== 'reopen') throw new Error(`--only must be all, first or reopen, got ${only}`);

  const rand = mulberry32(7);
  const vector = Array.from(corpus.contextVector(rand, CATEGORIES.indexOf('music')));
  const queries: [string, (db: TidalDb) => Promise<{ explain: { vectorSearch?: string } }>][] = [
    ['trending', (db) => db.retrieve({ profile: 'trending', limit: 20 })],
    ['search text', (db) => db.search({ text: 'jazz piano', limit: 10 })],
    ['search vector', (db) => db.search({ vector, limit: 10 })],
    ['search hybrid', (db) => db.search({ text: 'jazz piano', vector, limit: 10 })],
    ['popular around a vector', (db) => db.retrieve({ profile: 'popular', context: vector, limit: 10 })],
  ];
  const firstQueries = async (db: TidalDb): Promise<FirstQuery[]> => {
    const out: FirstQuery[] = [];
    for (const [name, q] of queries) {
      const t = nowMs();
      const r = await q(db);
      out.push({ name, ms: nowMs() - t, vectorSearch: r.explain.vectorSearch ?? null });
    }
    return out;
  };
  const fmtQueries = (qs: FirstQuery[]): string =>
    qs.map((q) => `${q.name} ${fmtMs(q.ms)} ms${q.vectorSearch ? ` (${q.vectorSearch})` : ''}`).join(', ');
  const memory: Record<string, ResidentMemory> = {};

  /** Opens, answers the first queries, and reports both; the database stays open. */
  const openAndAsk = async (
    label: string,
  ): Promise<{
    db: TidalDb;
    openMs: number;
    firstAnsweredMs: number;
    first: FirstQuery[];
    t0: number;
    parts: { parts: number; warm: number };
    warm: readonly WarmResult[];
  }> => {
    if (opts['no-catalog-snapshot']) fs.rmSync(path.join(dir, 'catalog-snapshot.bin'), { force: true });
    const t0 = nowMs();
    const db = await builder().open();
    const openMs = nowMs() - t0;
    const parts = internalsOf(db).openMs();
    const first = await firstQueries(db);
    const firstAnsweredMs = openMs + first[0]!.ms;
    log(
      `${label}: open() ${fmtDuration(openMs)}, first answered query ${fmtDuration(firstAnsweredMs)} after open() began; ANN ${db.stats().annBuild.state}; load average ${loadAverage()}`,
    );
    log(`  first queries: ${fmtQueries(first)}`);
    log(
      `  open() on the calling thread: ${fmtDuration(parts.parts)} opening (storage, signal recovery, users), then the warm ${fmtDuration(parts.warm)}`,
    );
    log(`  open()'s warm per worker: ${fmtSteps(internalsOf(db).lastWarm())}`);
    // The write path reads the stored item ids after the open: memory is read once they are in.
    while (!internalsOf(db).idsFilled()) await new Promise((resolve) => setTimeout(resolve, 5));
    log(`  item ids read into the write path's map ${fmtDuration(nowMs() - t0)} after open() began`);
    memory[label] = logMemory(`after the ${label}`, log);
    return { db, openMs, firstAnsweredMs, first, t0, parts, warm: internalsOf(db).lastWarm() };
  };

  if (only !== 'reopen') {
    // The first open: no saved index.
    for (const f of fs.readdirSync(dir)) if (f.startsWith('ann-')) fs.rmSync(path.join(dir, f), { force: true });
    const { db, openMs, firstAnsweredMs, first, t0 } = await openAndAsk('first open');
    const result: Record<string, unknown> = { openMs, firstAnsweredMs, first };
    if (only === 'all') {
      const timer = setInterval(() => {
        const b = db.stats().annBuild;
        log(
          `  ANN build: ${b.state}, ${fmtInt(b.rowsDone)} / ${fmtInt(b.rowsTotal)} rows, ${fmtDuration(b.elapsedMs)}; load average ${loadAverage()}`,
        );
      }, opts['progress-s'] * 1000);
      await db.warm({ waitForAnn: true });
      clearInterval(timer);
      const annReadyMs = nowMs() - t0;
      const build = db.stats().annBuild;
      log(
        `ANN index used by every worker ${fmtDuration(annReadyMs)} after open() began (build ${fmtDuration(build.elapsedMs)}, ${fmtInt(build.vectors)} vectors)`,
      );
      const withIndex = await firstQueries(db);
      log(`  the same queries with the index: ${fmtQueries(withIndex)}`);
      memory.withIndex = logMemory('with the index', log);
      Object.assign(result, { annReadyMs, annBuildMs: build.elapsedMs, withIndex });
    }
    const tc = nowMs();
    await db.close();
    result.closeMs = nowMs() - tc;
    log(`close: ${fmtDuration(nowMs() - tc)}${only === 'first' ? ' (the ANN build stopped)' : ''}`);
    report.set('firstOpen', result);
  }
  if (only !== 'first') {
    const { db: again, openMs, firstAnsweredMs, first, parts, warm } = await openAndAsk('reopen');
    const tc = nowMs();
    await again.close();
    log(`close: ${fmtDuration(nowMs() - tc)}`);
    const steps = warm.map((r) => ({ ...r.stepsMs, catalogSnapshotVersion: r.catalogSnapshotVersion, refreshedRows: r.refreshedRows }));
    report.set('reopen', { openMs, firstAnsweredMs, first, parts, steps, closeMs: nowMs() - tc });
  }
  if (opts.dir === undefined) fs.rmSync(dir, { recursive: true, force: true });
  report.set('items', opts.items);
  report.set('memory', memory);
  report.set('loadAverageAfter', loadAverage());
  report.finish();
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
});
