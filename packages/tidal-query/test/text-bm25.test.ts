import { describe, expect, it } from 'vitest';
import { Catalog } from '../src/catalog.js';
import { ftsQuery } from '../src/search.js';
import { queryTerms } from '../src/text/tokenizer.js';
import { searchTopK } from '../src/text/top-k.js';
import { SCHEMA, fixtures, randomText, randomWords, type TextFixture } from './text-helpers.js';

const fixture = fixtures();

/** The index's top k equals the oracle FTS5 table's: same ordinals in the same order, bm25() within 1e-9. */
function expectSameAsFts5(f: TextFixture, text: string, k: number, catalog: Catalog = f.catalog): number {
  const match = ftsQuery(text);
  const terms = queryTerms(text, 32);
  if (match === null) {
    expect(terms).toEqual([]);
    return 0;
  }
  const want = f.fts5(match, k);
  const got = searchTopK(catalog.text, terms, k);
  expect(Array.from(got.ordinals), `${text} k=${k}`).toEqual(want.map((r) => r[0]));
  for (let i = 0; i < want.length; i++) {
    const s = want[i]![1];
    expect(Math.abs(-got.scores[i]! - s) / Math.abs(s), `${text} k=${k} rank ${i}`).toBeLessThanOrEqual(1e-9);
  }
  return want.length;
}

/** The index's totals are the oracle's: N and the token total its bm25() used. */
function expectSameTotals(f: TextFixture, catalog: Catalog = f.catalog): void {
  expect({ rows: catalog.text.documents, tokens: catalog.text.tokens }).toEqual(f.fts5Totals());
}

describe('text index BM25 = bm25() of an FTS5 table with content over the same texts', () => {
  it('on seeded random corpora with deletes and replacements, for many queries and k', () => {
    let compared = 0;
    for (const seed of [1, 2, 3]) {
      const f = fixture();
      const words = randomWords(seed, 60 + seed * 40);
      const n = 400 + seed * 200;
      for (let o = 0; o < n; o++) f.upsert(o, words.rand() < 0.03 ? (words.rand() < 0.5 ? '' : '!!! ...') : randomText(words, 25));
      f.sync();
      expectSameTotals(f);
      // Deletes and replacements take their rows out of the totals at once, as the oracle's do.
      for (let i = 0; i < n / 4; i++) {
        const o = Math.floor(words.rand() * n);
        const r = words.rand();
        if (r < 0.4) f.delete(o);
        else if (r < 0.8) f.upsert(o, randomText(words, 40));
        else f.upsert(n + i, randomText(words, 10));
        // Sync at odd moments, so some changes land between two syncs and some alone.
        if (words.rand() < 0.1) {
          f.sync();
          expectSameTotals(f);
        }
      }
      f.sync();
      expectSameTotals(f);
      for (let q = 0; q < 60; q++) {
        const len = 1 + Math.floor(words.rand() * 4);
        const text = Array.from({ length: len }, () => (words.rand() < 0.05 ? 'zzznothing' : words.word(words.rand()))).join(' ');
        for (const k of [1, 5, 10, 50, 100, 100_000]) compared += expectSameAsFts5(f, text, k);
      }
    }
    expect(compared).toBeGreaterThan(10_000);
  });

  it('keeps live totals: a delete or a replacement leaves N and avgdl at once, unlike a contentless_delete table', () => {
    const f = fixture();
    for (let o = 0; o < 10; o++) f.upsert(o, o < 3 ? 'jazz piano' : 'rock guitar');
    f.sync();
    for (let o = 3; o < 9; o++) f.delete(o);
    f.upsert(0, 'jazz jazz piano');
    f.sync();
    // 4 documents of 3 + 2 + 2 + 2 tokens; the contentless_delete table still counts all 11 rows
    // ever inserted (10, and 0 again) and their 23 tokens.
    expect(f.catalog.text.documents).toBe(4);
    expect(f.catalog.text.tokens).toBe(9);
    expect(f.catalog.text.avgdl).toBe(9 / 4);
    expectSameTotals(f);
    expect(f.fts5Totals('contentless')).toEqual({ rows: 11, tokens: 23 });
    expectSameAsFts5(f, 'jazz', 10);
    expectSameAsFts5(f, 'piano guitar', 10);
    // The two FTS5 tables disagree on the scores, and the index is on the oracle's side.
    const got = searchTopK(f.catalog.text, ['jazz'], 10);
    const quirk = f.contentlessFts5('"jazz"', 10);
    expect(quirk.map((r) => r[0])).toEqual(Array.from(got.ordinals));
    expect(Math.abs(-got.scores[0]! - quirk[0]![1])).toBeGreaterThan(0.1);
  });

  it('rebuilds the same totals and scores on open, from the item rows alone', () => {
    const f = fixture();
    const words = randomWords(7, 50);
    for (let o = 0; o < 300; o++) f.upsert(o, randomText(words, 20));
    f.sync();
    for (let o = 0; o < 300; o += 3) f.delete(o);
    for (let o = 1; o < 300; o += 5) f.upsert(o, randomText(words, 30));
    f.sync();
    // A worker opening the file now: a new catalog, one sync from version 0.
    const reopened = new Catalog(f.db, SCHEMA);
    reopened.refresh();
    expect(reopened.text.documents).toBe(f.catalog.text.documents);
    expect(reopened.text.tokens).toBe(f.catalog.text.tokens);
    expectSameTotals(f, reopened);
    for (let q = 0; q < 20; q++) {
      const text = `${words.word(words.rand())} ${words.word(words.rand())}`;
      const a = searchTopK(f.catalog.text, queryTerms(text), 20);
      const b = searchTopK(reopened.text, queryTerms(text), 20);
      expect(Array.from(b.ordinals)).toEqual(Array.from(a.ordinals));
      expect(Array.from(b.scores)).toEqual(Array.from(a.scores));
      expectSameAsFts5(f, text, 20, reopened);
    }
  });

  it('on unicode text: case, accents, combining marks, CJK, Greek, Cyrillic, astral letters', () => {
    const f = fixture();
    const texts = [
      'Crème brûlée au café, naïve école',
      'CAFÉ CRÈME — ÉCOLE NAÏVE',
      'cafe\u0301 cre\u0300me e\u0301cole',
      'Straße nach München über Köln',
      'STRASSE straße ẞ',
      '東京タワー と 北京 東京タワー',
      '한국어 텍스트 한국어',
      'Ελληνικά ΕΛΛΗΝΙΚΑ ελληνικα Ωμέγα',
      'текст ТЕКСТ Москва',
      '𐐀𐐁 𐐨𐐩 🎸guitar🎸 guitar',
      'İstanbul ǅungla Ǆemal ﬁne Ａｂｃ',
      '!!! ... —',
    ];
    let o = 0;
    for (let round = 0; round < 5; round++) for (const t of texts) f.upsert(o++, round % 2 ? t.toUpperCase() : t);
    f.sync();
    // Rewrite some, delete some: the totals move with them.
    for (let i = 0; i < o; i += 4) f.upsert(i, texts[(i * 7) % texts.length]!);
    for (let i = 1; i < o; i += 6) f.delete(i);
    f.sync();
    expectSameTotals(f);
    const queries = [
      'café',
      'CAFE',
      'cafe\u0301',
      'creme brulee',
      'École NAÏVE',
      'strasse',
      'STRAßE',
      'münchen',
      'uber koln',
      '東京タワー',
      '北京',
      '한국어',
      'ελληνικα',
      'ΩΜΕΓΑ',
      'ТЕКСТ москва',
      '𐐨𐐩',
      '𐐀𐐁',
      'guitar',
      'istanbul',
      'ǆungla',
      'fine',
      'ａｂｃ',
      '!!!',
    ];
    let compared = 0;
    for (const q of queries) for (const k of [1, 3, 100]) compared += expectSameAsFts5(f, q, k);
    expect(compared).toBeGreaterThan(200);
  });

  it('breaks ties by ordinal, ascending, like ORDER BY bm25(t), rowid on the oracle', () => {
    const f = fixture();
    for (let o = 0; o < 50; o++) f.upsert(49 - o, 'same words here');
    f.sync();
    const got = searchTopK(f.catalog.text, ['same'], 5);
    expect(Array.from(got.ordinals)).toEqual([0, 1, 2, 3, 4]);
    expectSameAsFts5(f, 'same', 5);
  });
});
