/**
 * `npm start`: builds a synthetic catalogue into an ephemeral tidal database and shows what the
 * ranking and search calls return, then ten seconds of 3× overload. `--items N` sets the catalogue
 * size (default 50000), `--overload-seconds N` the overload part (0 skips it).
 */

import { TidalDb, levelName, type DegradationLevel, type Item, type SignalValues } from 'tidal-core';
import { CATEGORIES, Corpus, tidalSchema } from './corpus.js';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { overloadDemo } from './overload-demo.js';
import { showPersonalization } from './demo-personalization.js';
import { mulberry32 } from './random.js';
import { Progress, fmtDuration, fmtInt, fmtMs, nowMs, parseOptions, textTable } from './harness/index.js';

const opts = parseOptions('npm start', {
  items: { type: 'int', default: 50_000, description: 'catalogue size' },
  'overload-seconds': { type: 'int', default: 10, min: 0, description: 'seconds of 3× overload at the end (0 skips it)' },
});
const ITEMS = opts.items;
// 64 dimensions keep the build quick; the benchmark uses 128.
const DIMS = 64;
const BATCH = 1000;
const OVERLOAD_SECONDS = opts['overload-seconds'];

function log(line = ''): void {
  process.stdout.write(`${line}\n`);
}

async function main(): Promise<void> {
  const started = nowMs();
  const corpus = new Corpus({ items: ITEMS, dims: DIMS, seed: 42 });
  const expected = corpus.signalSummary();
  log(`tidal demo: ${fmtInt(ITEMS)} items in ${CATEGORIES.length} categories, ${fmtInt(expected.total)} view and like signals`);
  log(`the clock is fixed at ${new Date(corpus.now).toISOString()}; every signal happened in the 7 days before it`);
  log();

  const db = await TidalDb.builder()
    .ephemeral()
    .schema(tidalSchema(DIMS))
    .clock(() => corpus.now)
    // The database's warnings as lines of the demo (the default sink is a Node.js process warning).
    .onWarning((w) => log(`warning ${w.code}: ${w.message}`))
    .open();

  try {
    {
      const p = new Progress('loading items', ITEMS);
      for (const batch of corpus.items(BATCH)) {
        await db.upsertItems(batch);
        p.tick(batch.length);
      }
      const ms = p.finish();
      log(`items:   ${fmtInt(ITEMS)} in ${fmtDuration(ms)} (${fmtInt((ITEMS / ms) * 1000)} items/s)`);
    }
    {
      const p = new Progress('loading signals', expected.total, 'signals');
      let n = 0;
      for (const batch of corpus.signalBatches(BATCH)) {
        await db.signals(batch);
        n += batch.length;
        p.tick(batch.length);
      }
      const ms = p.finish();
      log(`signals: ${fmtInt(n)} in ${fmtDuration(ms)} (${fmtInt((n / ms) * 1000)} signals/s)`);
    }
    const warmStart = nowMs();
    const warmed = await db.warm();
    log(`workers warmed in ${fmtDuration(nowMs() - warmStart)}`);
    if (warmed.some((w) => w.annSource === 'building')) {
      // Queries would be answered now, vector searches exactly; the timings below are of the index.
      await db.warm({ waitForAnn: true });
      log(`ANN index built on its own thread, used by every worker ${fmtDuration(nowMs() - warmStart)} after the warm began`);
    }

    const rand = mulberry32(2024);
    const music = CATEGORIES.indexOf('music');
    const musicVector = corpus.contextVector(rand, music);
    const text = 'jazz piano';
    // A few untimed rounds first, two of each call at a time so that every worker sees each one.
    // warm() already built each worker's structures and compiled its paths at Full; these rounds
    // settle what a running service has besides (V8's later tiers, the caches of these queries),
    // so the timings below show a running service, not a cold start.
    const calls = [
      () => db.retrieve({ profile: 'trending', limit: 10 }),
      () => db.retrieve({ profile: 'new', filter: { category: 'cooking' }, diversity: { maxPer: { creator: 2 } }, limit: 10 }),
      () => db.retrieve({ profile: 'popular', context: musicVector, limit: 10 }),
      () => db.search({ text, limit: 10 }),
      () => db.search({ text, vector: musicVector, boost: 0.1, diversity: { maxPer: { creator: 2 } }, limit: 10 }),
    ];
    for (let round = 0; round < 3; round++) {
      for (const call of calls) await Promise.all([call(), call()]);
    }

    const lookup = new Map<string, Item>();
    // The schema declares both fields strings; anything else shows as `?`.
    const shown = (v: unknown): string => (typeof v === 'string' ? v : '?');
    const meta = async (id: string) => {
      let item = lookup.get(id);
      if (!item) {
        item = await db.get(id);
        if (item) lookup.set(id, item);
      }
      return {
        category: shown(item?.metadata.category),
        creator: shown(item?.metadata.creator),
        text: item?.text ?? '',
        createdAt: item?.createdAt ?? Number.NaN,
      };
    };

    // 1. Trending: ranked by view velocity over the last hour.
    {
      const r = await db.retrieve({ profile: 'trending', limit: 10 });
      heading('Trending now', 'retrieve({ profile: "trending", limit: 10 })', r.tookMs, r.degradationLevel, r.warnings);
      const rows: string[][] = [];
      for (const it of r.items) {
        const m = await meta(it.id);
        const v = it.signals.view;
        rows.push([
          String(it.rank),
          it.id,
          score(it.score),
          m.category,
          m.creator,
          win(v, '1h'),
          win(v, '24h'),
          win(v, '7d'),
          win(it.signals.like, '24h'),
        ]);
      }
      log(textTable(['#', 'id', 'score', 'category', 'creator', 'views 1h', 'views 24h', 'views 7d', 'likes 24h'], rows));
    }

    // 2. Newest in one category, at most two per creator.
    {
      const category = 'cooking';
      const r = await db.retrieve({ profile: 'new', filter: { category }, diversity: { maxPer: { creator: 2 } }, limit: 10 });
      heading(
        `Newest in "${category}", at most 2 per creator`,
        `retrieve({ profile: "new", filter: { category: "${category}" }, diversity: { maxPer: { creator: 2 } } })`,
        r.tookMs,
        r.degradationLevel,
        r.warnings,
      );
      const rows: string[][] = [];
      for (const it of r.items) {
        const m = await meta(it.id);
        rows.push([
          String(it.rank),
          it.id,
          ago(corpus.now - it.createdAt),
          m.category,
          m.creator,
          total(it.signals.view),
          total(it.signals.like),
        ]);
      }
      log(textTable(['#', 'id', 'created', 'category', 'creator', 'views', 'likes'], rows));
    }

    // 3. Popular among the neighbours of a context vector (a reader who has been reading music).
    {
      const r = await db.retrieve({ profile: 'popular', context: musicVector, limit: 10 });
      heading(
        'Popular around a "music" context vector',
        'retrieve({ profile: "popular", context: vector })',
        r.tookMs,
        r.degradationLevel,
        r.warnings,
      );
      const rows: string[][] = [];
      for (const it of r.items) {
        const m = await meta(it.id);
        rows.push([
          String(it.rank),
          it.id,
          score(it.score),
          it.similarity === undefined ? '' : it.similarity.toFixed(3),
          m.category,
          m.creator,
          total(it.signals.view),
          total(it.signals.like),
        ]);
      }
      log(textTable(['#', 'id', 'score', 'similarity', 'category', 'creator', 'views', 'likes'], rows));
    }

    // 4. Text search.
    {
      const s = await db.search({ text, limit: 10 });
      heading(`Search "${text}"`, `search({ text: "${text}" })`, s.tookMs, s.degradationLevel, s.warnings);
      const rows: string[][] = [];
      for (const h of s.hits) {
        const m = await meta(h.id);
        rows.push([
          String(h.rank),
          h.id,
          score(h.score),
          h.bm25 === undefined ? '' : h.bm25.toFixed(2),
          m.category,
          m.creator,
          clip(m.text, 48),
        ]);
      }
      log(textTable(['#', 'id', 'score', 'bm25', 'category', 'creator', 'text'], rows));
    }

    // 5. Hybrid: the same words plus the context vector, fused by reciprocal rank, boosted by engagement.
    {
      const s = await db.search({ text, vector: musicVector, boost: 0.1, diversity: { maxPer: { creator: 2 } }, limit: 10 });
      heading(
        `Hybrid search "${text}" + "music" vector`,
        `search({ text: "${text}", vector, boost: 0.1, diversity: { maxPer: { creator: 2 } } })`,
        s.tookMs,
        s.degradationLevel,
        s.warnings,
      );
      const rows: string[][] = [];
      for (const h of s.hits) {
        const m = await meta(h.id);
        rows.push([
          String(h.rank),
          h.id,
          h.score.toFixed(4),
          h.bm25 === undefined ? '' : h.bm25.toFixed(2),
          h.semantic === undefined ? '' : h.semantic.toFixed(3),
          m.category,
          m.creator,
          total(h.signals.view),
        ]);
      }
      log(textTable(['#', 'id', 'score', 'bm25', 'semantic', 'category', 'creator', 'views'], rows));
    }
    log();
    await showPersonalization(db, corpus);
    if (OVERLOAD_SECONDS > 0) {
      log();
      await overloadDemo(db, corpus, log, {
        seconds: OVERLOAD_SECONDS,
        factor: 3,
        capacitySeconds: 2,
        workers: availableParallelism(),
        chartPath: join(tmpdir(), 'tidal-overload-demo.svg'),
      });
    }
  } finally {
    await db.close();
  }
  log();
  log(`done in ${fmtDuration(nowMs() - started)}`);
}

function heading(title: string, call: string, tookMs: number, level: DegradationLevel, warnings: readonly string[]): void {
  log();
  log(`${title}  (${fmtMs(tookMs)} ms, level ${levelName(level)})`);
  log(`  ${call}`);
  for (const w of warnings) log(`  warning: ${w}`);
}

function score(x: number): string {
  if (x === 0) return '0';
  return Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(2) : x.toPrecision(3);
}

function win(v: SignalValues | undefined, w: '1h' | '24h' | '7d'): string {
  const n = v?.windows[w];
  return n === undefined ? '' : fmtInt(n);
}

function total(v: SignalValues | undefined): string {
  return v ? fmtInt(v.count) : '0';
}

function ago(ms: number): string {
  const h = ms / 3_600_000;
  if (h < 1) return `${Math.round(ms / 60_000)} min ago`;
  if (h < 48) return `${h.toFixed(1)} h ago`;
  return `${(h / 24).toFixed(1)} d ago`;
}

function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}

main()
  .then(() => {
    // A handle left open after close() would keep the demo alive; say so instead of hanging.
    setTimeout(() => {
      process.stderr.write('demo: something kept the process alive 5 s after close(); exiting\n');
      process.exit(0);
    }, 5000).unref();
  })
  .catch((err: unknown) => {
    process.stderr.write(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
