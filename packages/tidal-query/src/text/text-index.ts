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
 * longer knows, so their totals count every row ever inserted, see bm25.ts). The whole index, totals
 * included, is saved in the catalog snapshot ({@link TextIndex.exportState}, catalog-snapshot.ts) and
 * loaded from it by a worker's first sync; without one, that sync reads every item row.
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
  /** The term's number in its index (what a document's term list holds). */
  id = -1;

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
    // A shared image's list is never written: the first change copies it (an append always does).
    if (this.docs.buffer instanceof SharedArrayBuffer) this.#grow(n);
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

  /** Gives back the arrays' room past the postings (the bulk load's doubling leaves up to half). */
  trim(): void {
    const cap = Math.max(4, this.length);
    if (this.docs.length > cap) this.#grow(cap);
  }

  /** Bytes held by the typed arrays (those of a shared image's list not counted: see TextIndex.stats). */
  get bytes(): number {
    const lists = this.docs.buffer instanceof SharedArrayBuffer ? 0 : this.docs.byteLength + this.tfs.byteLength;
    return lists + this.blockLast.byteLength + this.blockMax.byteLength;
  }

  #grow(cap: number): void {
    const docs = new Int32Array(cap);
    docs.set(this.docs.subarray(0, this.length));
    this.docs = docs;
    const tfs = new Int32Array(cap);
    tfs.set(this.tfs.subarray(0, this.length));
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

/**
 * A text index's contents as flat arrays (see {@link TextIndex.exportState}): the terms by id, each
 * term's postings one after another in `docs`/`tfs` (`postingLengths[id]` of them, in id order), and
 * the per-ordinal arrays with the documents' term lists packed in `pool`. Block summaries are not
 * part of it: a warm recomputes them ({@link TextIndex.summarizeAll}).
 */
export interface TextIndexState {
  terms: string[];
  postingLengths: Int32Array;
  docs: Int32Array;
  tfs: Int32Array;
  docStart: Int32Array;
  docCount: Int32Array;
  pool: Int32Array;
  lengths: Int32Array;
  documents: number;
  tokens: number;
  postings: number;
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
  /** Postings by term id (`Postings.id`), for the documents' term lists. */
  readonly #byId: Postings[] = [];
  /** Terms whose first block summaries a search computed (rather than a warm: see {@link summarizeAll}). */
  summaries = 0;
  /**
   * Per ordinal, the terms it is in (to take it out again): the ids `#pool[#docStart[o], +n)`, where
   * `#docCount[o]` is n + 1, and 0 when the ordinal is absent. One flat array rather than a JS array
   * per document: 4 bytes a posting instead of an object and its slack on the heap.
   */
  #docStart = new Int32Array(1024);
  #docCount = new Int32Array(1024);
  #pool = new Int32Array(1024);
  #poolUsed = 0;
  /** Pool entries of replaced or removed documents, reclaimed by {@link compactPool}. */
  #poolGarbage = 0;
  /** Per ordinal, its token count (FTS5's column size); 0 when absent. */
  #lengths = new Int32Array(1024);
  /** Whether the per-document arrays are views of a shared image, copied before the first change. */
  #shared = false;
  /** BM25's N: ordinals with a non-empty text (one of no words counts, with 0 tokens, as in FTS5). */
  #documents = 0;
  /** Σ #lengths: avgdl's numerator. */
  #tokens = 0;
  #postings = 0;

  /** The current text of `ordinal`: null (or '') takes it out, and its tokens out of the totals. */
  set(ordinal: number, text: string | null): void {
    this.#own();
    this.#remove(ordinal);
    if (!text) return;
    if (ordinal >= this.#lengths.length) {
      let cap = this.#lengths.length;
      while (cap <= ordinal) cap *= 2;
      this.#lengths = grown(this.#lengths, cap, this.#lengths.length);
      this.#docStart = grown(this.#docStart, cap, this.#docStart.length);
      this.#docCount = grown(this.#docCount, cap, this.#docCount.length);
    }
    const words = tokenize(text);
    // Term frequencies in first-seen order; most texts have a few dozen words, so a Map is cheap.
    const tf = new Map<string, number>();
    for (const w of words) tf.set(w, (tf.get(w) ?? 0) + 1);
    if (this.#poolUsed + tf.size > this.#pool.length) this.#reservePool(tf.size);
    const start = this.#poolUsed;
    let at = start;
    for (const [w, f] of tf) {
      let p = this.#terms.get(w);
      if (!p) {
        p = new Postings();
        p.id = this.#byId.length;
        this.#byId.push(p);
        this.#terms.set(w, p);
      }
      p.add(ordinal, f);
      this.#pool[at++] = p.id;
    }
    this.#poolUsed = at;
    this.#docStart[ordinal] = start;
    this.#docCount[ordinal] = tf.size + 1;
    this.#lengths[ordinal] = words.length;
    this.#documents++;
    this.#tokens += words.length;
    this.#postings += tf.size;
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
    for (const p of this.#terms.values()) {
      // The warm follows the bulk load: the arrays give back the room its doubling left.
      p.trim();
      if (p.length > 0 && p.summarize(this.#lengths, avgdl)) n++;
    }
    // Only when it changes something: a pool loaded from a snapshot is packed already.
    if (this.#poolGarbage > 0 || this.#pool.length > Math.max(1024, this.#poolUsed)) this.compactPool();
    return n;
  }

  /**
   * Rewrites the documents' term lists without the entries of replaced or removed documents, in
   * an array of their size: each set() of a document that had text leaves its old list behind,
   * and one is rewritten once they are as many as the live entries (or at a warm).
   */
  compactPool(): void {
    this.#own();
    const live = this.#poolUsed - this.#poolGarbage;
    const pool = new Int32Array(Math.max(1024, live));
    const start = this.#docStart;
    const count = this.#docCount;
    let at = 0;
    for (let o = 0; o < count.length; o++) {
      const n = count[o]! - 1;
      if (n < 0) continue;
      pool.set(this.#pool.subarray(start[o], start[o]! + n), at);
      start[o] = at;
      at += n;
    }
    this.#pool = pool;
    this.#poolUsed = at;
    this.#poolGarbage = 0;
  }

  /** Room for `n` more pool entries: a compaction when half the pool is garbage, else a doubling. */
  #reservePool(n: number): void {
    if (this.#poolGarbage >= this.#poolUsed - this.#poolGarbage) this.compactPool();
    if (this.#poolUsed + n <= this.#pool.length) return;
    let cap = this.#pool.length;
    while (cap < this.#poolUsed + n) cap *= 2;
    this.#pool = grown(this.#pool, cap, this.#poolUsed);
  }

  /**
   * The `n` terms with the longest postings lists, longest first (fewer when the index holds
   * fewer): what warm searches, alone and together, so both the one-term and the several-term
   * search are compiled before a query needs them.
   */
  commonestTerms(n: number): string[] {
    const best: { term: string; length: number }[] = [];
    for (const [term, p] of this.#terms) {
      if (p.length === 0 || (best.length === n && p.length <= best[n - 1]!.length)) continue;
      if (best.length === n) best.pop();
      let at = best.length;
      while (at > 0 && best[at - 1]!.length < p.length) at--;
      best.splice(at, 0, { term, length: p.length });
    }
    return best.map((b) => b.term);
  }

  /** Token counts by ordinal (read-only for callers). */
  get lengths(): Int32Array {
    return this.#lengths;
  }

  /** The index's sizes; `arrayBytes` counts this thread's own arrays, not those a shared image lends. */
  stats(): TextIndexStats {
    const shared = this.#shared;
    let bytes = shared ? 0 : this.#lengths.byteLength;
    let terms = 0;
    for (const p of this.#terms.values()) {
      if (p.length === 0) continue;
      terms++;
      bytes += p.bytes;
    }
    // The per-document term lists.
    if (!shared) bytes += this.#pool.byteLength + this.#docStart.byteLength + this.#docCount.byteLength;
    return { documents: this.#documents, terms, postings: this.#postings, arrayBytes: bytes };
  }

  /**
   * The index as {@link TextIndexState}. The term lists are packed without the entries of replaced
   * or removed documents; the postings arrays are copies, the rest views of the index's own arrays
   * (valid until its next change).
   */
  exportState(): TextIndexState {
    const terms = this.termsById();
    const postingLengths = new Int32Array(this.#byId.length);
    let total = 0;
    for (let id = 0; id < this.#byId.length; id++) total += postingLengths[id] = this.#byId[id]!.length;
    const docs = new Int32Array(total);
    const tfs = new Int32Array(total);
    let at = 0;
    for (const p of this.#byId) {
      docs.set(p.docs.subarray(0, p.length), at);
      tfs.set(p.tfs.subarray(0, p.length), at);
      at += p.length;
    }
    if (this.#poolGarbage > 0) this.compactPool();
    return {
      terms,
      postingLengths,
      docs,
      tfs,
      docStart: this.#docStart,
      docCount: this.#docCount,
      pool: this.#pool.subarray(0, this.#poolUsed),
      lengths: this.#lengths,
      documents: this.#documents,
      tokens: this.#tokens,
      postings: this.#postings,
    };
  }

  /**
   * Replaces an empty index's contents with `state` (as {@link exportState} gave it). Each term's
   * postings are views into `state.docs`/`state.tfs` (no copy): the first change past a list's end
   * copies that list out. The per-ordinal arrays are taken as they are.
   */
  importState(state: TextIndexState): void {
    if (this.#byId.length > 0 || this.#documents > 0) throw new Error('TextIndex.importState: the index is not empty');
    const cap = state.lengths.length;
    if (state.docStart.length !== cap || state.docCount.length !== cap || state.postingLengths.length !== state.terms.length) {
      throw new Error('TextIndex.importState: inconsistent array sizes');
    }
    let total = 0;
    for (const n of state.postingLengths) total += n;
    if (total !== state.docs.length || total !== state.tfs.length) throw new Error('TextIndex.importState: postings lengths do not add up');
    let at = 0;
    for (let id = 0; id < state.terms.length; id++) {
      const n = state.postingLengths[id]!;
      const p = new Postings();
      p.id = id;
      // A list of none keeps the room a new one starts with (a view of 0 could not grow by doubling).
      if (n > 0) {
        p.docs = state.docs.subarray(at, at + n);
        p.tfs = state.tfs.subarray(at, at + n);
        p.length = n;
      }
      at += n;
      this.#byId.push(p);
      this.#terms.set(state.terms[id]!, p);
    }
    // The state's arrays are declared over any buffer for TypeScript < 5.7 readers of the published
    // declarations; exportState and the structured clone that carries them make ArrayBuffer ones.
    this.#docStart = state.docStart as Int32Array<ArrayBuffer>;
    this.#docCount = state.docCount as Int32Array<ArrayBuffer>;
    this.#pool = state.pool.length >= 1024 ? (state.pool as Int32Array<ArrayBuffer>) : grown(state.pool, 1024, state.pool.length);
    this.#poolUsed = state.pool.length;
    this.#poolGarbage = 0;
    this.#lengths = state.lengths as Int32Array<ArrayBuffer>;
    this.#documents = state.documents;
    this.#tokens = state.tokens;
    this.#postings = state.postings;
    this.#shared = state.lengths.buffer instanceof SharedArrayBuffer;
  }

  /** Copies the per-document arrays a shared image lent before the first change to them. */
  #own(): void {
    if (!this.#shared) return;
    this.#shared = false;
    this.#docStart = this.#docStart.slice();
    this.#docCount = this.#docCount.slice();
    this.#lengths = this.#lengths.slice();
    this.#pool = grown(this.#pool, Math.max(1024, this.#poolUsed), this.#poolUsed);
  }

  /** The term ids of `ordinal`'s document, in its first-seen order (empty when it has no text). */
  docTerms(ordinal: number): Int32Array {
    const n = ordinal < this.#docCount.length ? this.#docCount[ordinal]! - 1 : -1;
    return n < 0 ? new Int32Array(0) : this.#pool.slice(this.#docStart[ordinal], this.#docStart[ordinal]! + n);
  }

  /** Every term ever indexed, by id (those whose postings are empty now included). */
  termsById(): string[] {
    const out: string[] = new Array<string>(this.#byId.length);
    for (const [term, p] of this.#terms) out[p.id] = term;
    return out;
  }

  #remove(ordinal: number): void {
    if (ordinal >= this.#docCount.length) return;
    const n = this.#docCount[ordinal]! - 1;
    if (n < 0) return;
    const start = this.#docStart[ordinal]!;
    for (let i = start; i < start + n; i++) this.#byId[this.#pool[i]!]!.remove(ordinal);
    this.#docCount[ordinal] = 0;
    this.#poolGarbage += n;
    this.#documents--;
    this.#tokens -= this.#lengths[ordinal]!;
    this.#postings -= n;
    this.#lengths[ordinal] = 0;
  }
}

/** A copy of `a[0, keep)` in an array of `cap`. */
function grown(a: Int32Array, cap: number, keep: number): Int32Array<ArrayBuffer> {
  const out = new Int32Array(cap);
  out.set(a.subarray(0, keep));
  return out;
}
