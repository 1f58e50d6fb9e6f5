/**
 * One query worker's in-memory inverted index of the items' text, kept beside the catalog and fed
 * by the same sync (every changed row, with its text): per term a postings list of (ordinal, term
 * frequency) sorted by ordinal, cut into blocks of {@link BLOCK_SIZE} with each block's largest
 * impact, so that a top-k search can skip blocks that cannot reach the k-th score (see top-k.ts).
 *
 * Postings are kept sorted under any order of changes: a new ordinal past a term's last one is an
 * append (the bulk-load case), anything else a binary search and a copy within the arrays. The block
 * summaries of a term are rebuilt only when a query needs them after the term changed, or when the
 * average document length they were computed with has drifted by more than {@link AVGDL_DRIFT}.
 *
 * BM25's collection totals (N, the documents with text, and their token total, whence avgdl) are
 * the index's own, kept by the same {@link TextIndex.set} that changes the postings: a replaced or
 * removed text leaves them at once. They are the live counts, which is what BM25 means by N and
 * avgdl; FTS5's contentless_delete tables differ here (a delete there cannot subtract what it no
 * longer knows, so their totals count every row ever inserted, see bm25.ts). Nothing is stored: a
 * worker's first sync reads every item row, so the totals are rebuilt with the postings on open.
 */
import { impact } from './bm25.js';
import { tokenize } from './tokenizer.js';

/** Postings per block: the unit a search skips or scores. */
export const BLOCK_SIZE = 128;
const BLOCK_SHIFT = 7;
/** Relative change of avgdl after which a term's block maxima are recomputed rather than scaled. */
export const AVGDL_DRIFT = 0.02;

/** A term's postings. Exposed to the searcher in this directory only. */
export class Postings {
  docs: Int32Array = new Int32Array(4);
  tfs: Int32Array = new Int32Array(4);
  length = 0;
  /** Last ordinal of each block. */
  blockLast: Int32Array = new Int32Array(0);
  /** Largest impact of each block, at {@link summaryAvgdl}. */
  blockMax: Float64Array = new Float64Array(0);
  /** Largest impact over the whole list, at {@link summaryAvgdl}. */
  maxImpact = 0;
  /** The avgdl the block maxima were computed with; NaN when the postings changed since. */
  summaryAvgdl = Number.NaN;

  add(ordinal: number, tf: number): void {
    const n = this.length;
    if (n === this.docs.length) this.#grow(n * 2);
    if (n === 0 || this.docs[n - 1]! < ordinal) {
      this.docs[n] = ordinal;
      this.tfs[n] = tf;
    } else {
      const at = lowerBound(this.docs, 0, n, ordinal);
      this.docs.copyWithin(at + 1, at, n);
      this.tfs.copyWithin(at + 1, at, n);
      this.docs[at] = ordinal;
      this.tfs[at] = tf;
    }
    this.length = n + 1;
    this.summaryAvgdl = Number.NaN;
  }

  remove(ordinal: number): void {
    const n = this.length;
    const at = lowerBound(this.docs, 0, n, ordinal);
    if (at === n || this.docs[at] !== ordinal) return;
    this.docs.copyWithin(at, at + 1, n);
    this.tfs.copyWithin(at, at + 1, n);
    this.length = n - 1;
    this.summaryAvgdl = Number.NaN;
  }

  /**
   * Brings the block summaries to `avgdl` (see the module comment for when that costs a pass);
   * whether it computed them.
   */
  summarize(lengths: Int32Array, avgdl: number): boolean {
    const s = this.summaryAvgdl;
    if (s === s && Math.abs(avgdl / s - 1) <= AVGDL_DRIFT) return false;
    const n = this.length;
    const blocks = (n + BLOCK_SIZE - 1) >> BLOCK_SHIFT;
    if (this.blockLast.length < blocks || this.blockLast.length > 2 * blocks + 8) {
      this.blockLast = new Int32Array(blocks);
      this.blockMax = new Float64Array(blocks);
    }
    let all = 0;
    for (let j = 0; j < blocks; j++) {
      const end = Math.min(n, (j + 1) << BLOCK_SHIFT);
      let max = 0;
      for (let i = j << BLOCK_SHIFT; i < end; i++) {
        const v = impact(this.tfs[i]!, lengths[this.docs[i]!]!, avgdl);
        if (v > max) max = v;
      }
      this.blockLast[j] = this.docs[end - 1]!;
      this.blockMax[j] = max;
      if (max > all) all = max;
    }
    this.maxImpact = all;
    this.summaryAvgdl = avgdl;
    return true;
  }

  /** Bytes held by the typed arrays. */
  get bytes(): number {
    return this.docs.byteLength + this.tfs.byteLength + this.blockLast.byteLength + this.blockMax.byteLength;
  }

  #grow(cap: number): void {
    const docs = new Int32Array(cap);
    docs.set(this.docs);
    this.docs = docs;
    const tfs = new Int32Array(cap);
    tfs.set(this.tfs);
    this.tfs = tfs;
  }
}

/** The first index in `a[from, to)` whose value is ≥ `x` (`to` if none). */
export function lowerBound(a: Int32Array, from: number, to: number, x: number): number {
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Sizes of a text index, for benchmarks and reports. */
export interface TextIndexStats {
  /** Documents with text in the index. */
  documents: number;
  terms: number;
  postings: number;
  /** Bytes of the postings, block summaries and per-document arrays (not the term strings). */
  arrayBytes: number;
}

export class TextIndex {
  readonly #terms = new Map<string, Postings>();
  /** Terms whose first block summaries a search computed (rather than a warm: see {@link summarizeAll}). */
  summaries = 0;
  /** Per ordinal, the postings lists it is in (to take it out again); undefined when absent. */
  #docTerms: (Postings[] | undefined)[] = [];
  /** Per ordinal, its token count (FTS5's column size); 0 when absent. */
  #lengths = new Int32Array(1024);
  /** BM25's N: ordinals with a non-empty text (one of no words counts, with 0 tokens, as in FTS5). */
  #documents = 0;
  /** Σ #lengths: avgdl's numerator. */
  #tokens = 0;
  #postings = 0;

  /** The current text of `ordinal`: null (or '') takes it out, and its tokens out of the totals. */
  set(ordinal: number, text: string | null): void {
    this.#remove(ordinal);
    if (!text) return;
    if (ordinal >= this.#lengths.length) {
      let cap = this.#lengths.length;
      while (cap <= ordinal) cap *= 2;
      const grown = new Int32Array(cap);
      grown.set(this.#lengths);
      this.#lengths = grown;
    }
    const words = tokenize(text);
    // Term frequencies in first-seen order; most texts have a few dozen words, so a Map is cheap.
    const tf = new Map<string, number>();
    for (const w of words) tf.set(w, (tf.get(w) ?? 0) + 1);
    const lists: Postings[] = [];
    for (const [w, f] of tf) {
      let p = this.#terms.get(w);
      if (!p) {
        p = new Postings();
        this.#terms.set(w, p);
      }
      p.add(ordinal, f);
      lists.push(p);
    }
    this.#docTerms[ordinal] = lists;
    this.#lengths[ordinal] = words.length;
    this.#documents++;
    this.#tokens += words.length;
    this.#postings += lists.length;
  }

  /** Documents (ordinals with text) in the index: BM25's N. */
  get documents(): number {
    return this.#documents;
  }

  /** Tokens of every document in the index (repeats counted): BM25's total column size. */
  get tokens(): number {
    return this.#tokens;
  }

  /** Average document length for BM25 (0 when empty). */
  get avgdl(): number {
    return this.#documents > 0 ? this.#tokens / this.#documents : 0;
  }

  /** The postings of a term as {@link tokenize} spells it, or undefined. */
  postings(term: string): Postings | undefined {
    const p = this.#terms.get(term);
    return p && p.length > 0 ? p : undefined;
  }

  /**
   * Brings every term's block summaries to the current avgdl, as a search of each would: the
   * worker's warm, so that no first search of a term after it pays for that term's pass. Returns
   * the terms it summarized.
   */
  summarizeAll(): number {
    const avgdl = this.avgdl;
    let n = 0;
    for (const p of this.#terms.values()) if (p.length > 0 && p.summarize(this.#lengths, avgdl)) n++;
    return n;
  }

  /** The term with the longest postings list (undefined when there is no text): what warm searches once. */
  commonestTerm(): string | undefined {
    let best: string | undefined;
    let length = 0;
    for (const [term, p] of this.#terms) {
      if (p.length > length) {
        best = term;
        length = p.length;
      }
    }
    return best;
  }

  /** Token counts by ordinal (read-only for callers). */
  get lengths(): Int32Array {
    return this.#lengths;
  }

  stats(): TextIndexStats {
    let bytes = this.#lengths.byteLength;
    let terms = 0;
    for (const p of this.#terms.values()) {
      if (p.length === 0) continue;
      terms++;
      bytes += p.bytes;
    }
    // The per-document lists of postings references: one pointer each (4 bytes with V8's
    // compressed pointers) plus an array header.
    bytes += this.#postings * 4 + this.#documents * 16;
    return { documents: this.#documents, terms, postings: this.#postings, arrayBytes: bytes };
  }

  #remove(ordinal: number): void {
    const lists = this.#docTerms[ordinal];
    if (!lists) return;
    for (const p of lists) p.remove(ordinal);
    this.#docTerms[ordinal] = undefined;
    this.#documents--;
    this.#tokens -= this.#lengths[ordinal]!;
    this.#postings -= lists.length;
    this.#lengths[ordinal] = 0;
  }
}
