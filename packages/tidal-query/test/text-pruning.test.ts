import { DegradationLevel } from 'tidal-load';
import { describe, expect, it } from 'vitest';
import { atLevels } from './level-runner.js';
import type { QueryContext } from '../src/context.js';
import { NO_DIVERSITY_POSTINGS_BUDGET, SearchExecutor } from '../src/search.js';
import { SignalStore } from '../src/signals/store.js';
import { AVGDL_DRIFT } from '../src/text/text-index.js';
import { queryTerms } from '../src/text/tokenizer.js';
import { boundScale, searchTopK, type TextSearchOptions } from '../src/text/top-k.js';
import { impact } from '../src/text/bm25.js';
import { mulberry32 } from './helpers/random.js';
import type { SearchTask } from '../src/types.js';
import { SCHEMA, fixtures, randomText, randomWords, type TextFixture } from './text-helpers.js';

const fixture = fixtures();

/** Pruned and exhaustive top k: the same ordinals and bit-identical scores. */
function expectExact(f: TextFixture, terms: string[], k: number, options: TextSearchOptions = {}): { pruned: number; all: number } {
  const pruned = searchTopK(f.catalog.text, terms, k, options);
  const all = searchTopK(f.catalog.text, terms, k, { ...options, prune: false });
  expect(Array.from(pruned.ordinals), `${terms.join(' ')} k=${k}`).toEqual(Array.from(all.ordinals));
  expect(Array.from(pruned.scores)).toEqual(Array.from(all.scores));
  expect(pruned.postingsScored).toBeLessThanOrEqual(all.postingsScored);
  return { pruned: pruned.postingsScored, all: all.postingsScored };
}

describe('text top-k pruning', () => {
  it('returns exactly what scoring every match returns, with and without a filter, as avgdl drifts', () => {
    const f = fixture();
    const words = randomWords(11, 80);
    for (let o = 0; o < 3000; o++) f.upsert(o, randomText(words, 20), words.rand() < 0.3 ? 'b' : 'a');
    f.sync();
    const queries = Array.from({ length: 80 }, () =>
      queryTerms(Array.from({ length: 1 + Math.floor(words.rand() * 4) }, () => words.word(words.rand())).join(' ')),
    );
    const odd = (o: number) => o % 3 !== 0;
    let saved = 0;
    const round = () => {
      for (const terms of queries) {
        for (const k of [1, 10, 100, 200]) {
          const r = expectExact(f, terms, k);
          saved += r.all - r.pruned;
          expectExact(f, terms, k, { accept: odd });
        }
      }
    };
    round();
    // Longer texts under other terms raise avgdl a little (the stored block maxima are scaled),
    // then a lot (they are recomputed); shorter ones lower it.
    const avgdl = f.catalog.text.avgdl;
    let o = 3000;
    while (f.catalog.text.avgdl < avgdl * (1 + AVGDL_DRIFT / 2)) {
      f.upsert(o++, Array.from({ length: 60 }, () => 'filler').join(' '));
      f.sync();
    }
    round();
    for (let i = 0; i < 200; i++) f.upsert(o++, Array.from({ length: 80 }, () => 'filler').join(' '));
    f.sync();
    round();
    for (let i = 0; i < 3000; i++) f.upsert(o++, 'x');
    f.sync();
    round();
    expect(saved).toBeGreaterThan(0);
  });

  it('block maxima stay upper bounds when avgdl grows, once scaled', () => {
    const rand = mulberry32(3);
    let unscaledBelow = 0;
    for (let i = 0; i < 20_000; i++) {
      const tf = 1 + Math.floor(rand() * 6);
      const len = tf + Math.floor(rand() * 40);
      const stored = 1 + rand() * 30;
      const avgdl = stored * (1 + rand() * AVGDL_DRIFT * 2);
      const now = impact(tf, len, avgdl);
      expect(impact(tf, len, stored) * boundScale(stored, avgdl)).toBeGreaterThanOrEqual(now);
      // Shrinking: the stored value bounds it as it is.
      expect(boundScale(avgdl, stored)).toBe(1);
      expect(impact(tf, len, avgdl)).toBeGreaterThanOrEqual(impact(tf, len, stored));
      if (impact(tf, len, stored) < now) unscaledBelow++;
    }
    // Without the scale the stored maxima would be below the true impacts: the scale is needed.
    expect(unscaledBelow).toBeGreaterThan(10_000);
  });

  describe('through the search executor', () => {
    function executor(items = 3000): {
      run: (task: Partial<SearchTask>, level: DegradationLevel) => ReturnType<SearchExecutor['run']>;
      f: TextFixture;
    } {
      const f = fixture();
      const words = randomWords(5, 200);
      for (let o = 0; o < items; o++) f.upsert(o, randomText(words, 16));
      f.sync();
      const store = SignalStore.create({ kinds: [], maxOrdinals: 64, maxSlots: 64 });
      const ctx: QueryContext = { schema: SCHEMA, catalog: f.catalog, store, ann: null, db: f.db };
      const search = atLevels(new SearchExecutor(ctx));
      const base: SearchTask = { text: null, vector: null, filter: null, diversity: null, limit: 10, boost: 0 };
      return { f, run: (task, level) => search.run({ ...base, ...task }, level, 0) };
    }

    it('scores fewer postings at depth 100 than 200, and fewer still at limit 10; the top k is exact', () => {
      const { f, run } = executor();
      const text = 'cafe jazz';
      const matches = f.fts5(`"cafe" OR "jazz"`, 100_000).length;
      expect(matches).toBeGreaterThanOrEqual(500);

      // A boost reorders the BM25 candidates, so the level's full depth is fetched.
      const full = run({ text, boost: 0.5 }, DegradationLevel.Full);
      const reduced = run({ text, boost: 0.5 }, DegradationLevel.ReducedCandidates);
      const top10 = run({ text }, DegradationLevel.Full);
      expect([full.explain.bm25Limit, reduced.explain.bm25Limit, top10.explain.bm25Limit]).toEqual([200, 100, 10]);
      const [p200, p100, p10] = [full.explain.postingsScored!, reduced.explain.postingsScored!, top10.explain.postingsScored!];
      const all = searchTopK(f.catalog.text, ['cafe', 'jazz'], 10, { prune: false }).postingsScored;
      expect(p200).toBeLessThan(all);
      expect(p100).toBeLessThan(0.9 * p200);
      expect(p10).toBeLessThan(0.6 * p100);
      expect(full.explain.postingsScored! + full.explain.postingsSkipped!).toBe(all);

      // Each level's hits are the exhaustive top k at its depth.
      for (const [r, k] of [
        [top10, 10],
        [reduced, 100],
        [full, 200],
      ] as const) {
        const exact = searchTopK(f.catalog.text, ['cafe', 'jazz'], k, { prune: false });
        const byId = new Map(Array.from(exact.ordinals, (o, i) => [`i${o}`, -exact.scores[i]!]));
        for (const h of r.hits) expect(h.bm25).toBe(byId.get(h.id));
      }
      expect(top10.hits.map((h) => h.id)).toEqual(
        Array.from(searchTopK(f.catalog.text, ['cafe', 'jazz'], 10, { prune: false }).ordinals, (o) => `i${o}`),
      );
    });

    it('scores fewer postings at each level than the one above when the depth is fetched', () => {
      const { f, run } = executor();
      const text = 'cafe jazz';
      expect(f.fts5(`"cafe" OR "jazz"`, 100_000).length).toBeGreaterThanOrEqual(500);
      // A boost reorders the BM25 candidates, so each level fetches its own depth.
      const levels = [
        DegradationLevel.Full,
        DegradationLevel.ReducedCandidates,
        DegradationLevel.CoarseAggregates,
        DegradationLevel.NoDiversity,
      ];
      const runs = levels.map((level) => run({ text, boost: 0.5 }, level));
      const scored = runs.map((r) => r.explain.postingsScored!);
      for (let l = 1; l < levels.length; l++) expect(scored[l]!, scored.join(', ')).toBeLessThan(scored[l - 1]!);
      expect(scored[3]!).toBeLessThan(scored[0]! / 2);
      // What was scored is what came back: each level's candidates are its depth's exact top k.
      for (const r of runs) expect(r.explain.candidates).toBe(r.explain.bm25Limit);
    });

    it("fetches only the page for a filtered text search: the filter is the top-k's accept test, so nothing reorders", () => {
      // One item in 4 in category b, with far more matches in it than the depth of 200.
      const f = fixture();
      const words = randomWords(5, 200);
      for (let o = 0; o < 6000; o++) f.upsert(o, randomText(words, 16), o % 4 === 0 ? 'b' : 'a');
      f.sync();
      const ctx: QueryContext = {
        schema: SCHEMA,
        catalog: f.catalog,
        store: SignalStore.create({ kinds: [], maxOrdinals: 64, maxSlots: 64 }),
        ann: null,
        db: f.db,
      };
      const search = atLevels(new SearchExecutor(ctx));
      const run = (task: Partial<SearchTask>, level: DegradationLevel) =>
        search.run({ text: null, vector: null, filter: null, diversity: null, limit: 10, boost: 0, ...task }, level, 0);
      const text = 'cafe jazz';
      const filter = { cat: 'b' };
      const plain = run({ text, filter }, DegradationLevel.Full);
      // The same query with a boost fetches the level's depth (200).
      const deep = run({ text, filter, boost: 1e-12 }, DegradationLevel.Full);
      expect(plain.explain.bm25Limit).toBe(10);
      expect(deep.explain.bm25Limit).toBe(200);
      expect(plain.explain.postingsScored!).toBeLessThan(deep.explain.postingsScored! / 2);
      // The page is the exact filtered top 10: the exhaustive top k among the accepted documents.
      expect(f.fts5(`"cafe" OR "jazz"`, 100_000).filter(([o]) => o % 4 === 0).length).toBeGreaterThan(500);
      const accept = (o: number) => f.catalog.present[o] === 1 && o % 4 === 0;
      const exact = searchTopK(f.catalog.text, ['cafe', 'jazz'], 10, { prune: false, accept });
      expect(plain.hits.map((h) => h.id)).toEqual(Array.from(exact.ordinals, (o) => `i${o}`));
    });

    it('stops at the postings budget at NoDiversity, and says so', () => {
      const { run } = executor(8000);
      // Every common word: far more postings than the budget, and little to prune at depth 100.
      const text = 'cafe creme ecole naive jazz piano tokyo 東京 straße über';
      const deep = run({ text, boost: 0.5 }, DegradationLevel.NoDiversity);
      const coarse = run({ text, boost: 0.5 }, DegradationLevel.CoarseAggregates);
      expect(coarse.explain.textBudgetExhausted).toBe(false);
      expect(coarse.explain.postingsScored).toBeGreaterThan(NO_DIVERSITY_POSTINGS_BUDGET);
      expect(deep.explain.textBudgetExhausted).toBe(true);
      expect(deep.explain.postingsScored).toBeLessThan(NO_DIVERSITY_POSTINGS_BUDGET + 10);
      expect(deep.hits.length).toBe(10);
    });
  });
});
