import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DegradationLevel, type ItemInput, type SearchHit, type SearchResults, type TidalDb } from 'tidal-core';
import { CORPUS, DAY, NOW, corpusItem, cosine, events, idsOf, openCorpusDb } from './helpers.js';

const RRF_K = 60;

/**
 * Two items with the same text, and embeddings equally similar to TWIN_QUERY: as relevant as each
 * other in every mode. Only twin-b has signals.
 */
const TWINS: ItemInput[] = [
  {
    id: 'twin-a',
    text: 'twin echo melody',
    embedding: [-1, 0, 0, -0.5],
    metadata: { category: 'twin', creator: 'tw' },
    createdAt: NOW - 10 * DAY,
  },
  {
    id: 'twin-b',
    text: 'twin echo melody',
    embedding: [-1, 0, -0.5, 0],
    metadata: { category: 'twin', creator: 'tw' },
    createdAt: NOW - 10 * DAY,
  },
];
const TWIN_QUERY = [-1, 0, 0, 0];
const TWIN_B_VIEWS = 5;

/** Every item with text or an embedding in the search database. */
const DOCS: { id: string; text: string; embedding: number[]; category: string; duration?: number; createdAt: number }[] = [
  ...CORPUS.map((c) => ({
    id: c.id,
    text: c.text,
    embedding: c.embedding,
    category: c.metadata.category,
    duration: c.metadata.duration,
    createdAt: c.createdAt,
  })),
  ...TWINS.map((t) => ({ id: t.id, text: t.text!, embedding: [...(t.embedding as number[])], category: 'twin', createdAt: t.createdAt! })),
];

const Q = [1, 0.2, 0.05, 0];

function tokens(text: string): string[] {
  return text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
}

/** SQLite FTS5's bm25() (k1 = 1.2, b = 0.75), as it reports it: negative, lower is better. */
function fts5Bm25(query: string, docId: string): number {
  const terms = [...new Set(tokens(query))];
  const n = DOCS.length;
  const avgdl = DOCS.reduce((s, d) => s + tokens(d.text).length, 0) / n;
  const doc = tokens(DOCS.find((d) => d.id === docId)!.text);
  let score = 0;
  for (const term of terms) {
    const df = DOCS.filter((d) => tokens(d.text).includes(term)).length;
    let idf = Math.log((n - df + 0.5) / (df + 0.5));
    if (idf <= 0) idf = 1e-6;
    const tf = doc.filter((w) => w === term).length;
    score += (idf * (tf * 2.2)) / (tf + 1.2 * (1 - 0.75 + (0.75 * doc.length) / avgdl));
  }
  return -score;
}

function expectRanks(hits: readonly SearchHit[]): void {
  expect(hits.map((h) => h.rank)).toEqual(hits.map((_, i) => i + 1));
}

function expectNoTies(values: readonly number[]): void {
  expect(new Set(values).size).toBe(values.length);
}

describe('search', () => {
  let db: TidalDb;

  beforeAll(async () => {
    ({ db } = await openCorpusDb());
    await db.upsertItems(TWINS);
    await db.signals(events('twin-b', 'view', TWIN_B_VIEWS, NOW));
  });
  afterAll(async () => {
    await db?.close();
  });

  describe('text only', () => {
    it('ranks by BM25: an item matching more of the query words ranks higher', async () => {
      const r = await db.search({ text: 'jazz piano', limit: 100 });
      expect(r.mode).toBe('text');
      expect(r.hits[0]!.id).toBe('j1'); // the only item with both words
      expect(idsOf(r.hits).sort()).toEqual(['c2', 'j1', 'j2', 'j3', 'r3']);
      // j1 wins although it is longer than most items matching one word (BM25 favours short texts).
      for (const id of ['c2', 'j2', 'j3']) expect(tokens(corpusItem(id).text).length).toBeLessThan(tokens(corpusItem('j1').text).length);
    });

    it('ranks by BM25: a rarer word outweighs a common one', async () => {
      const r = await db.search({ text: 'saxophone guitar', limit: 100 });
      // saxophone is in one document, guitar in four; j3 (guitar) is even shorter than j2.
      expect(r.hits[0]!.id).toBe('j2');
      expect(tokens(corpusItem('j3').text).length).toBeLessThan(tokens(corpusItem('j2').text).length);
      expect(idsOf(r.hits).sort()).toEqual(['j2', 'j3', 'p2', 'r1', 'r2']);
    });

    it('reports bm25 (SQLite FTS5 bm25(), lower is better) and no semantic score', async () => {
      for (const text of ['jazz piano', 'saxophone guitar', 'rock guitar', 'concerto recording violin']) {
        const r = await db.search({ text, limit: 100 });
        expect(r.hits.length).toBeGreaterThan(0);
        expectRanks(r.hits);
        for (const h of r.hits) {
          expect(h.semantic).toBeUndefined();
          expect(h.bm25).toBeLessThan(0);
          expect(h.bm25).toBeCloseTo(fts5Bm25(text, h.id), 9);
          expect(h.score).toBe(-h.bm25!);
        }
        const bm25 = r.hits.map((h) => h.bm25!);
        expect(bm25).toEqual([...bm25].sort((a, b) => a - b));
      }
    });

    it('returns no hits, with a warning, for text without a searchable word', async () => {
      const r = await db.search({ text: '!!!' });
      expect(r.hits).toEqual([]);
      expect(r.mode).toBe('text');
      expect(r.warnings).toContain('the text has no searchable word');
      expect(r.degradationLevel).toBe(DegradationLevel.Full);

      const words = await db.search({ text: 'zzzunknownword' });
      expect(words.hits).toEqual([]);
      expect(words.warnings).toEqual([]);
    });

    it('treats query syntax as plain words', async () => {
      const r = await db.search({ text: 'jazz OR NOT "piano" AND trio*', limit: 100 });
      expect(r.hits[0]!.id).toBe('j1');
      // "and" is a word like any other (r3 and p1 have it); "or", "not" and "trio*" do nothing special.
      expect(idsOf(r.hits).sort()).toEqual(['c2', 'j1', 'j2', 'j3', 'p1', 'r3']);
    });
  });

  describe('vector only', () => {
    it('reports the cosine similarity as semantic, the exact nearest neighbour first', async () => {
      const r = await db.search({ vector: Q, limit: 100 });
      expect(r.mode).toBe('vector');
      const expected = DOCS.map((d) => ({ id: d.id, s: cosine(Q, d.embedding) })).sort((a, b) => b.s - a.s);
      expectNoTies(expected.map((e) => Math.round(e.s * 1e5)));
      expect(idsOf(r.hits)).toEqual(expected.map((e) => e.id));
      expectRanks(r.hits);
      for (const h of r.hits) {
        expect(h.bm25).toBeUndefined();
        // The index's int8 rows: within 1e-2 of the exact cosine (docs/api.md).
        expect(Math.abs(h.semantic! - cosine(Q, DOCS.find((d) => d.id === h.id)!.embedding))).toBeLessThan(1e-2);
        expect(h.score).toBe(h.semantic);
      }
    });

    it('finds an item from its own embedding with similarity 1', async () => {
      for (const c of CORPUS) {
        const r = await db.search({ vector: c.embedding, limit: 1 });
        expect(idsOf(r.hits)).toEqual([c.id]);
        expect(r.hits[0]!.semantic).toBeCloseTo(1, 5);
      }
      // Scale does not matter to cosine.
      const scaled = await db.search({ vector: corpusItem('p1').embedding.map((x) => x * 37), limit: 1 });
      expect(idsOf(scaled.hits)).toEqual(['p1']);
    });
  });

  describe('hybrid', () => {
    async function expectRrf(text: string, vector: number[]): Promise<SearchResults> {
      const textOnly = await db.search({ text, limit: 1000 });
      const vectorOnly = await db.search({ vector, limit: 1000 });
      expectNoTies(textOnly.hits.map((h) => h.bm25!));
      expectNoTies(vectorOnly.hits.map((h) => h.semantic!));
      const textRank = new Map(textOnly.hits.map((h) => [h.id, h.rank]));
      const vectorRank = new Map(vectorOnly.hits.map((h) => [h.id, h.rank]));

      const r = await db.search({ text, vector, limit: 1000 });
      expect(r.mode).toBe('hybrid');
      expect(idsOf(r.hits).sort()).toEqual([...new Set([...textRank.keys(), ...vectorRank.keys()])].sort());
      for (const h of r.hits) {
        const rt = textRank.get(h.id);
        const rv = vectorRank.get(h.id);
        const expected = (rt === undefined ? 0 : 1 / (RRF_K + rt)) + (rv === undefined ? 0 : 1 / (RRF_K + rv));
        expect(h.score).toBe(expected);
        if (rt === undefined) expect(h.bm25).toBeUndefined();
        else expect(h.bm25).toBe(textOnly.hits[rt - 1]!.bm25);
        if (rv === undefined) expect(h.semantic).toBeUndefined();
        else expect(h.semantic).toBe(vectorOnly.hits[rv - 1]!.semantic);
      }
      const scores = r.hits.map((h) => h.score);
      expect(scores).toEqual([...scores].sort((a, b) => b - a));
      expectRanks(r.hits);
      return r;
    }

    it('fuses the BM25 and ANN lists by RRF with k = 60 and 1-based ranks', async () => {
      const r = await expectRrf('jazz piano', Q);
      // j1 is first in both lists: 2 / 61.
      expect(r.hits[0]!.id).toBe('j1');
      expect(r.hits[0]!.score).toBe(1 / 61 + 1 / 61);
    });

    it('fuses lists that disagree', async () => {
      const r = await expectRrf('guitar', corpusItem('c2').embedding);
      // c2 leads the vector list but has no guitar; p2 is in both.
      const c2 = r.hits.find((h) => h.id === 'c2')!;
      expect(c2.bm25).toBeUndefined();
      expect(c2.score).toBe(1 / 61);
      await expectRrf('violin recording pop', [0.2, 0.9, 0.1, 0.4]);
    });

    it('with text that has no searchable word, ranks the vector list alone and warns', async () => {
      const r = await db.search({ text: '!!!', vector: Q, limit: 3 });
      expect(r.mode).toBe('hybrid');
      expect(r.warnings).toContain('the text has no searchable word');
      const vectorOnly = await db.search({ vector: Q, limit: 3 });
      expect(idsOf(r.hits)).toEqual(idsOf(vectorOnly.hits));
      expect(r.hits.map((h) => h.score)).toEqual([1 / 61, 1 / 62, 1 / 63]);
    });
  });

  describe('filters', () => {
    it('apply to text search', async () => {
      const rock = await db.search({ text: 'guitar', filter: { category: 'rock' } });
      expect(idsOf(rock.hits).sort()).toEqual(['r1', 'r2']);
      const short = await db.search({ text: 'guitar', filter: { duration: { lt: 200 } } });
      expect(idsOf(short.hits)).toEqual(['p2']);
      const recent = await db.search({ text: 'guitar jazz', filter: { createdAt: { gte: NOW - 2 * DAY } } });
      expect(idsOf(recent.hits).sort()).toEqual(['j2', 'p2', 'r1']);
      const none = await db.search({ text: 'guitar', filter: { category: 'polka' } });
      expect(none.hits).toEqual([]);
    });

    it('apply to vector search', async () => {
      const long = await db.search({ vector: Q, limit: 100, filter: { duration: { gte: 250 } } });
      const expectedLong = DOCS.filter((d) => d.duration !== undefined && d.duration >= 250)
        .sort((a, b) => cosine(Q, b.embedding) - cosine(Q, a.embedding))
        .map((d) => d.id);
      expect(idsOf(long.hits)).toEqual(expectedLong);
      expect(expectedLong.sort()).toEqual(['c1', 'c2', 'j3', 'r3']);

      const recent = await db.search({ vector: Q, limit: 100, filter: { createdAt: { gte: NOW - DAY } } });
      expect(idsOf(recent.hits).sort()).toEqual(['c2', 'j2', 'p1', 'r1', 'r3']);
      const none = await db.search({ vector: Q, filter: { category: 'polka' } });
      expect(none.hits).toEqual([]);
    });

    it('apply to hybrid search', async () => {
      const r = await db.search({ text: 'jazz piano', vector: Q, limit: 100, filter: { category: { in: ['jazz', 'classical'] } } });
      expect(idsOf(r.hits).sort()).toEqual(['c1', 'c2', 'j1', 'j2', 'j3']);
      expectRanks(r.hits);
      const none = await db.search({ text: 'jazz', vector: Q, filter: { duration: { gt: 100_000 } } });
      expect(none.hits).toEqual([]);
    });
  });

  describe('boost', () => {
    it('lifts an item with signals above an equally relevant one without, in text search', async () => {
      const plain = await db.search({ text: 'echo' });
      expect(idsOf(plain.hits)).toEqual(['twin-a', 'twin-b']);
      expect(plain.hits[0]!.score).toBe(plain.hits[1]!.score);
      const base = plain.hits[0]!.score;

      const boosted = await db.search({ text: 'echo', boost: 1 });
      expect(idsOf(boosted.hits)).toEqual(['twin-b', 'twin-a']);
      expect(boosted.hits[0]!.score).toBeCloseTo(base * (1 + Math.log1p(TWIN_B_VIEWS)), 12);
      expect(boosted.hits[1]!.score).toBe(base);
      expect(boosted.hits[0]!.signals.view!.count).toBe(TWIN_B_VIEWS);
      expect(boosted.hits[0]!.bm25).toBe(boosted.hits[1]!.bm25);
    });

    it('gives an item whose popularity is negative (negative weights) no boost, never a NaN score', async () => {
      await db.signals(events('twin-a', 'view', 3, NOW - 1000, -4));
      const boosted = await db.search({ text: 'echo', boost: 2 });
      for (const h of boosted.hits) expect(Number.isFinite(h.score)).toBe(true);
      const plain = await db.search({ text: 'echo' });
      expect(boosted.hits.find((h) => h.id === 'twin-a')!.score).toBe(plain.hits.find((h) => h.id === 'twin-a')!.score);
    });

    it('lifts it in vector and hybrid search too', async () => {
      const plain = await db.search({ vector: TWIN_QUERY, limit: 2 });
      expect(idsOf(plain.hits)).toEqual(['twin-a', 'twin-b']);
      expect(plain.hits[0]!.semantic).toBe(plain.hits[1]!.semantic);

      const boosted = await db.search({ vector: TWIN_QUERY, limit: 2, boost: 0.5 });
      expect(idsOf(boosted.hits)).toEqual(['twin-b', 'twin-a']);
      expect(boosted.hits[0]!.score).toBeCloseTo(plain.hits[0]!.score * (1 + 0.5 * Math.log1p(TWIN_B_VIEWS)), 6);

      const hybrid = await db.search({ text: 'melody', vector: TWIN_QUERY, limit: 2, boost: 0.5 });
      expect(idsOf(hybrid.hits)).toEqual(['twin-b', 'twin-a']);
    });
  });

  describe('limit, diversity, explain', () => {
    it('honours the limit and ranks 1..n in every mode', async () => {
      for (const req of [{ text: 'guitar rock jazz piano' }, { vector: Q }, { text: 'guitar rock jazz piano', vector: Q }]) {
        const all = await db.search({ ...req, limit: 100 });
        expect(all.hits.length).toBeGreaterThan(3);
        const three = await db.search({ ...req, limit: 3 });
        expect(idsOf(three.hits)).toEqual(idsOf(all.hits).slice(0, 3));
        expectRanks(three.hits);
      }
      // The default limit is 10.
      expect((await db.search({ vector: Q })).hits).toHaveLength(10);
    });

    it('applies diversity, relaxing it with a warning when needed', async () => {
      const all = await db.search({ text: 'guitar', limit: 100 });
      const category = (id: string) => DOCS.find((d) => d.id === id)!.category;
      const firstPerCategory = idsOf(all.hits).filter((id, i, ids) => ids.findIndex((x) => category(x) === category(id)) === i);
      expect(firstPerCategory).toHaveLength(3);

      const r = await db.search({ text: 'guitar', limit: 3, diversity: { maxPer: { category: 1 } } });
      expect(idsOf(r.hits)).toEqual(idsOf(all.hits).filter((id) => firstPerCategory.includes(id)));
      expect(r.warnings).toEqual([]);
      expect(r.explain.diversityApplied).toBe(true);
      expectRanks(r.hits);

      const relaxed = await db.search({ text: 'guitar', limit: 4, diversity: { maxPer: { category: 1 } } });
      expect(relaxed.hits).toHaveLength(4);
      expect(relaxed.warnings[0]).toMatch(/diversity relaxed/);
    });

    it('runs at Full and explains the candidate limits of each mode', async () => {
      const text = await db.search({ text: 'guitar' });
      expect(text.degradationLevel).toBe(DegradationLevel.Full);
      // Nothing reorders a plain text search, so it fetches only the hits it returns.
      expect(text.explain.bm25Limit).toBe(10);
      expect((await db.search({ text: 'guitar', boost: 1 })).explain.bm25Limit).toBe(200);
      // Nor does a filter: it is the top-k's accept test.
      expect((await db.search({ text: 'guitar', filter: { category: 'rock' } })).explain.bm25Limit).toBe(10);
      expect(text.explain.annTopK).toBeNull();
      expect(text.explain.windows).toBe('exact');
      expect(text.explain.diversityApplied).toBe(false);

      const vector = await db.search({ vector: Q });
      expect(vector.degradationLevel).toBe(DegradationLevel.Full);
      expect(vector.explain.bm25Limit).toBeNull();
      expect(vector.explain.annTopK).toBe(500);

      const hybrid = await db.search({ text: 'guitar', vector: Q });
      expect(hybrid.degradationLevel).toBe(DegradationLevel.Full);
      expect(hybrid.explain.bm25Limit).toBe(200);
      expect(hybrid.explain.annTopK).toBe(500);
      expect(hybrid.tookMs).toBeGreaterThanOrEqual(0);
    });
  });
});
