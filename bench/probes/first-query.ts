/**
 * The first query of each profile after `warm()` against the median of the next ones: two query
 * workers, each round two concurrent queries (one on each worker), on the demo corpus with users,
 * follows and co-engagement. The next rounds run twice: interleaved (every profile in turn, as the
 * first ones ran) and back to back (one profile's rounds in a row, its data in the CPU caches).
 * Prints the round's time as the caller saw it (`tookMs`, the slower of the two), the worker's
 * service time, and the queries' `explain.lazyBuilds` (structures a query built on first use; 0
 * when warm() built them), and each worker's `WarmResult` counts.
 */
import { TidalDb } from 'tidal-core';
import { CATEGORIES, Corpus, personalizationSchema } from '../src/corpus.js';
import { Report, fmtInt, nowMs, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('first-query', {
  items: { type: 'int', default: 5000, description: 'catalogue size' },
  next: { type: 'int', default: 20, min: 1, description: 'rounds after the first; their median is reported' },
  plain: { type: 'boolean', description: 'items and users without embeddings: no ANN index builds beside the queries, no vector profiles' },
});
const DIMS = 64;

type Answer = { tookMs: number; explain: { serviceMs?: number; lazyBuilds?: number } };

async function main(): Promise<void> {
  const report = new Report('first-query', opts);
  const corpus = new Corpus({ items: opts.items, dims: DIMS, seed: 42 });
  const db = await TidalDb.builder()
    .ephemeral()
    .schema(personalizationSchema(DIMS))
    .clock(() => corpus.now)
    .workers(2)
    .open();
  try {
    for (const batch of corpus.items(1000)) await db.upsertItems(opts.plain ? batch.map(({ embedding: _, ...item }) => item) : batch);
    for (const batch of corpus.signalBatches(1000)) await db.signals(batch);
    const users = ['u1', 'u2', 'u3', 'u4'];
    for (const [k, u] of users.entries()) {
      await db.upsertUsers([opts.plain ? { id: u } : { id: u, embedding: corpus.contextVector(mulberry32(k + 1), k % CATEGORIES.length) }]);
      await db.signals(Array.from({ length: 10 }, (_, i) => ({ item: corpus.id(k * 50 + i), kind: 'view', user: u })));
      for (let i = 0; i < 5; i++) await db.follow({ user: u, creator: String(corpus.item(k * 50 + i).metadata.creator) });
    }
    // Co-engagement for `related`: users who viewed a few items together.
    await db.upsertUsers(Array.from({ length: 40 }, (_, u) => ({ id: `c${u}` })));
    for (let u = 0; u < 40; u++) {
      await db.signals(Array.from({ length: 6 }, (_, i) => ({ item: corpus.id((u % 5) * 3 + i), kind: 'view', user: `c${u}` })));
    }
    const t0 = nowMs();
    const warmed = await db.warm();
    report.line(`${fmtInt(opts.items)} items, 2 workers; warm() took ${(nowMs() - t0).toFixed(0)} ms`);
    for (const w of warmed) {
      const built = `${w.structuresBuilt} structures built, ${w.termsSummarized} terms summarized`;
      report.line(`- worker ${w.threadId}: ${built}, ${w.pathsRun} paths run in ${w.stepsMs.paths.toFixed(0)} ms`);
    }
    report.line();
    const vec = corpus.contextVector(mulberry32(7), 0);
    const rel = corpus.id(2);
    const profiles: [string, (i: number) => Promise<Answer>][] = [
      ['trending', () => db.retrieve({ profile: 'trending', limit: 10 })],
      ['popular', () => db.retrieve({ profile: 'popular', limit: 10 })],
      ['popular + context', () => db.retrieve({ profile: 'popular', context: vec, limit: 10 })],
      ['new', () => db.retrieve({ profile: 'new', limit: 10 })],
      ['for_you', (i) => db.retrieve({ profile: 'for_you', user: users[i % 4]!, limit: 10 })],
      ['following', (i) => db.retrieve({ profile: 'following', user: users[i % 4]!, limit: 10 })],
      ['hot', () => db.retrieve({ profile: 'hot', limit: 10 })],
      ['rising', () => db.retrieve({ profile: 'rising', limit: 10 })],
      ['top', () => db.retrieve({ profile: 'top', limit: 10 })],
      ['related', () => db.retrieve({ profile: 'related', item: rel, limit: 10 })],
      ['search text', () => db.search({ text: 'jazz piano', limit: 10 })],
      ['search vector', () => db.search({ vector: vec, limit: 10 })],
      ['search hybrid', () => db.search({ text: 'jazz piano', vector: vec, limit: 10 })],
    ];
    const vectorProfiles = new Set(['popular + context', 'search vector', 'search hybrid']);
    const active = profiles.filter(([name]) => !(opts.plain && vectorProfiles.has(name)));
    type Round = { took: number; service: number; builds: number };
    const pair = async (q: (i: number) => Promise<Answer>, i: number): Promise<Round> => {
      const rs = await Promise.all([q(i), q(i + 1)]);
      return {
        took: Math.max(...rs.map((r) => r.tookMs)),
        service: Math.max(...rs.map((r) => r.explain.serviceMs ?? 0)),
        builds: rs.reduce((n, r) => n + (r.explain.lazyBuilds ?? 0), 0),
      };
    };
    // The first round of every profile, in order; then rounds of every profile in the same order
    // (each query after another profile's, as its first was: the CPU caches hold that profile's
    // data); then each profile's rounds back to back (the caches hold its own).
    const firsts: Round[] = [];
    for (const [, q] of active) firsts.push(await pair(q, 0));
    const interleaved: Round[][] = active.map(() => []);
    for (let i = 1; i <= opts.next; i++) for (const [p, [, q]] of active.entries()) interleaved[p]!.push(await pair(q, 2 * i));
    const backToBack: Round[][] = active.map(() => []);
    for (const [p, [, q]] of active.entries()) for (let i = 1; i <= opts.next; i++) backToBack[p]!.push(await pair(q, 2 * (opts.next + i)));
    const med = (xs: Round[], k: 'took' | 'service'): number => xs.map((n) => n[k]).sort((a, b) => a - b)[xs.length >> 1]!;
    const rows = active.map(([name], p) => {
      const first = firsts[p]!;
      const mi = interleaved[p]!;
      const mb = backToBack[p]!;
      return [
        name,
        first.took.toFixed(2),
        first.service.toFixed(2),
        String(first.builds),
        `${med(mi, 'took').toFixed(2)} / ${med(mi, 'service').toFixed(2)}`,
        `${med(mb, 'took').toFixed(2)} / ${med(mb, 'service').toFixed(2)}`,
        `${(first.took / med(mi, 'took')).toFixed(1)}× / ${(first.service / med(mi, 'service')).toFixed(1)}×`,
        `${(first.took / med(mb, 'took')).toFixed(1)}× / ${(first.service / med(mb, 'service')).toFixed(1)}×`,
      ];
    });
    const head = [
      'query',
      'first ms',
      'first worker ms',
      'lazy builds',
      'median, interleaved (ms / worker)',
      'median, back to back (ms / worker)',
      'first ÷ interleaved',
      'first ÷ back to back',
    ];
    report.table('first round after warm() against the next ones', head, rows);
  } finally {
    await db.close();
  }
  report.finish();
}

await main();
