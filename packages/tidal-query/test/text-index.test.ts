/**
 * The text index's postings and totals under random sets, replacements and removals (with the
 * documents' term lists compacted along the way, and by a warm's summarizeAll) equal an index
 * built from scratch from the final texts, term by term; a search ranks the same on both.
 */
import { describe, expect, it } from 'vitest';
import { TextIndex } from '../src/text/text-index.js';
import { searchTopK } from '../src/text/top-k.js';
import { tokenize } from '../src/text/tokenizer.js';
import { mulberry32 } from './helpers/random.js';

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta', 'eta', 'theta', 'iota', 'kappa', 'lambda', 'mu'];

function randomText(rand: () => number): string | null {
  const r = rand();
  if (r < 0.08) return null;
  if (r < 0.1) return '!!';
  const n = 1 + Math.floor(rand() * 12);
  return Array.from({ length: n }, () => WORDS[Math.floor(rand() * rand() * WORDS.length)]!).join(' ');
}

/** Each term's (ordinal, tf) pairs, as the index holds them. */
function postingsOf(index: TextIndex): Map<string, [number, number][]> {
  const out = new Map<string, [number, number][]>();
  for (const w of WORDS) {
    const p = index.postings(w);
    if (!p) continue;
    out.set(
      w,
      Array.from({ length: p.length }, (_, i) => [p.docs[i]!, p.tfs[i]!]),
    );
  }
  return out;
}

function expectSame(index: TextIndex, texts: Map<number, string | null>): void {
  const fresh = new TextIndex();
  for (const [o, t] of [...texts].sort((a, b) => a[0] - b[0])) fresh.set(o, t);
  expect(postingsOf(index)).toEqual(postingsOf(fresh));
  expect(index.documents).toBe(fresh.documents);
  expect(index.tokens).toBe(fresh.tokens);
  expect(index.stats().postings).toBe(fresh.stats().postings);
  for (const [o, t] of texts) expect(index.lengths[o] ?? 0).toBe(t ? tokenize(t).length : 0);
  for (const terms of [['alpha'], ['beta', 'mu'], ['gamma', 'delta', 'kappa']]) {
    const a = searchTopK(index, terms, 10);
    const b = searchTopK(fresh, terms, 10);
    expect([...a.ordinals]).toEqual([...b.ordinals]);
    expect([...a.scores]).toEqual([...b.scores]);
  }
}

describe('text index', () => {
  it('equals an index built from the final texts after random sets, replacements and removals', () => {
    for (const seed of [1, 2, 3]) {
      const rand = mulberry32(seed);
      const index = new TextIndex();
      const texts = new Map<number, string | null>();
      const ORDINALS = 3000;
      for (let step = 0; step < 12_000; step++) {
        // Mostly the bulk load's appends first, then replacements, removals and new ordinals.
        const o = step < ORDINALS ? step : Math.floor(rand() * ORDINALS * 1.2);
        const t = step >= ORDINALS && rand() < 0.2 ? null : randomText(rand);
        index.set(o, t);
        texts.set(o, t);
        if (step === ORDINALS) index.summarizeAll();
        if (step % 4000 === 3999) expectSame(index, texts);
      }
      index.summarizeAll();
      expectSame(index, texts);
    }
  });

  it("keeps the documents' term lists near their live size under rewrites", () => {
    const rand = mulberry32(9);
    const index = new TextIndex();
    for (let o = 0; o < 2000; o++) index.set(o, randomText(rand));
    index.summarizeAll();
    const settled = index.stats().arrayBytes;
    // Each rewrite leaves its old list behind until a compaction: 20 rounds would hold 20 lists a document.
    for (let round = 0; round < 20; round++) for (let o = 0; o < 2000; o++) index.set(o, randomText(rand));
    expect(index.stats().arrayBytes).toBeLessThan(settled * 2.5);
    index.summarizeAll();
    expect(index.stats().arrayBytes).toBeLessThan(settled * 1.5);
  });
});
