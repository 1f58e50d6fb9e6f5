import { describe, expect, it } from 'vitest';
import { ftsQuery } from '../src/search.js';
import { queryTerms } from '../src/text/tokenizer.js';
import { searchTopK } from '../src/text/top-k.js';
import { fixtures, randomText, randomWords, type TextFixture } from './text-helpers.js';

const fixture = fixtures();

/** The index's top k equals FTS5's: same ordinals in the same order, bm25() within 1e-9. */
function expectSameAsFts5(f: TextFixture, text: string, k: number): number {
  const match = ftsQuery(text);
  const terms = queryTerms(text, 32);
  if (match === null) {
    expect(terms).toEqual([]);
    return 0;
  }
  const want = f.fts5(match, k);
  const got = searchTopK(f.catalog.text, terms, k);
  expect(Array.from(got.ordinals), `${text} k=${k}`).toEqual(want.map((r) => r[0]));
  for (let i = 0; i < want.length; i++) {
    const s = want[i]![1];
    expect(Math.abs(-got.scores[i]! - s) / Math.abs(s), `${text} k=${k} rank ${i}`).toBeLessThanOrEqual(1e-9);
  }
  return want.length;
}

describe('text index BM25 = FTS5 bm25()', () => {
  it('on seeded random corpora with deletes and replacements, for many queries and k', () => {
    let compared = 0;
    for (const seed of [1, 2, 3]) {
      const f = fixture();
      const words = randomWords(seed, 60 + seed * 40);
      const n = 400 + seed * 200;
      for (let o = 0; o < n; o++) f.upsert(o, words.rand() < 0.03 ? (words.rand() < 0.5 ? '' : '!!! ...') : randomText(words, 25));
      f.sync();
      // Deletes and replacements: on a contentless_delete table they leave FTS5's row and token
      // totals as they were, which the index must follow.
      for (let i = 0; i < n / 4; i++) {
        const o = Math.floor(words.rand() * n);
        const r = words.rand();
        if (r < 0.4) f.delete(o);
        else if (r < 0.8) f.upsert(o, randomText(words, 40));
        else f.upsert(n + i, randomText(words, 10));
        // Sync at odd moments, so some changes land between two syncs and some alone.
        if (words.rand() < 0.1) f.sync();
      }
      f.sync();
      for (let q = 0; q < 60; q++) {
        const len = 1 + Math.floor(words.rand() * 4);
        const text = Array.from({ length: len }, () => (words.rand() < 0.05 ? 'zzznothing' : words.word(words.rand()))).join(' ');
        for (const k of [1, 5, 10, 50, 100, 100_000]) compared += expectSameAsFts5(f, text, k);
      }
    }
    expect(compared).toBeGreaterThan(10_000);
  });

  it('uses FTS5 totals, not live counts: after deletes N still counts the deleted rows', () => {
    const f = fixture();
    for (let o = 0; o < 10; o++) f.upsert(o, o < 3 ? 'jazz piano' : 'rock guitar');
    f.sync();
    for (let o = 3; o < 9; o++) f.delete(o);
    f.upsert(0, 'jazz jazz piano');
    f.sync();
    // FTS5: 11 rows ever inserted; the index holds 4 documents.
    expect(f.catalog.text.rows).toBe(11);
    expect(f.catalog.text.documents).toBe(4);
    expectSameAsFts5(f, 'jazz', 10);
    expectSameAsFts5(f, 'piano guitar', 10);
  });

  it('breaks ties by ordinal, ascending, like ORDER BY bm25(items_fts), rowid', () => {
    const f = fixture();
    for (let o = 0; o < 50; o++) f.upsert(49 - o, 'same words here');
    f.sync();
    const got = searchTopK(f.catalog.text, ['same'], 5);
    expect(Array.from(got.ordinals)).toEqual([0, 1, 2, 3, 4]);
    expectSameAsFts5(f, 'same', 5);
  });
});
