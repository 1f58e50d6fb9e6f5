import type { DegradationLevel, TidalDb } from 'tidal-core';
import type { Corpus } from './corpus.js';

/** One query of the mix, ready to run; resolves with the level it ran at. */
export type Query = (db: TidalDb) => Promise<DegradationLevel>;

/**
 * The query mix of the overload runs (the benchmark and the demo): a quarter trending, a tenth
 * newest in a category, 15 % popular around a context vector, a quarter text search, a tenth
 * filtered text search, 15 % hybrid; parameters drawn once, up front, from `rand`.
 */
export function prepareQueries(corpus: Corpus, rand: () => number, n: number): Query[] {
  const out: Query[] = [];
  for (let i = 0; i < n; i++) {
    const r = rand();
    const diversity = { maxPer: { creator: 2 } };
    if (r < 0.25) out.push(async (db) => (await db.retrieve({ profile: 'trending', diversity, limit: 20 })).degradationLevel);
    else if (r < 0.35) {
      const category = corpus.randomCategory(rand);
      out.push(async (db) => (await db.retrieve({ profile: 'new', filter: { category }, diversity, limit: 20 })).degradationLevel);
    } else if (r < 0.5) {
      const context = corpus.contextVector(rand);
      out.push(async (db) => (await db.retrieve({ profile: 'popular', context, diversity, limit: 20 })).degradationLevel);
    } else if (r < 0.75) {
      const text = corpus.textQuery(rand);
      out.push(async (db) => (await db.search({ text, diversity, limit: 10 })).degradationLevel);
    } else if (r < 0.85) {
      const text = corpus.textQuery(rand);
      const category = corpus.randomCategory(rand);
      out.push(async (db) => (await db.search({ text, filter: { category }, limit: 10 })).degradationLevel);
    } else {
      const c = Math.floor(rand() * 20);
      const text = corpus.textQuery(rand, c);
      const vector = corpus.contextVector(rand, c);
      out.push(async (db) => (await db.search({ text, vector, diversity, limit: 10 })).degradationLevel);
    }
  }
  return out;
}
