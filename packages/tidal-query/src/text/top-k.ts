/**
 * Top-k BM25 over a {@link TextIndex} whose work falls with k: once k documents are held, the k-th
 * score θ is a bar every later document must pass, and
 *
 * - MaxScore (Turtle & Flood 1995): the terms whose upper bounds (idf × the list's largest impact)
 *   together cannot pass θ become "non-essential": their lists are no longer walked, only probed
 *   (a forward seek) for a document of the other lists that could still pass θ with them;
 * - block maxima (Ding & Suel 2011): with one list left to walk (always so for a one-word query), a
 *   block of 128 postings whose largest impact, plus every other term's bound, cannot pass θ is
 *   skipped whole.
 *
 * (Block-max WAND was measured first: on 1–3 word queries it scored fewer postings, but its
 * per-document pivoting cost more time than it saved; MaxScore was faster at every k.)
 *
 * The result is the exact top k of exhaustive scoring: the same documents and scores (computed as
 * FTS5 does, see bm25.ts, summed in query order), ties broken by ordinal, ascending. Documents are
 * visited in ordinal order, so a later document with the k-th score loses the tie and only a score
 * strictly above θ gets in. Bounds summed in another order than the score leave 1e-12 of room for
 * rounding.
 *
 * The work is counted where it is done: postings scored (one per term of each document scored) and
 * whole blocks jumped over; the postings of the query's terms not scored are reported beside them.
 */
import { idf, impact } from './bm25.js';
import { BLOCK_SIZE, type Postings, type TextIndex } from './text-index.js';

const BLOCK_SHIFT = 7;
const END = 0x7fffffff;
/** Room for rounding in bounds summed in another order than the scores. */
const ROUNDING = 1 + 1e-12;

export interface TextSearchOptions {
  /** Only documents it accepts are scored and returned (the query's filter). */
  accept?: (ordinal: number) => boolean;
  /**
   * Stop after this many postings are scored: the result is then the best of what was seen, an
   * approximation (`exhausted` says so). Default: no budget.
   */
  postingsBudget?: number;
  /** false scores every matching document (the reference the pruning is tested against). */
  prune?: boolean;
}

export interface TextTopK {
  /** Ordinals, best first. */
  ordinals: Int32Array;
  /** BM25 scores (positive: FTS5's bm25() is their negation), parallel to `ordinals`. */
  scores: Float64Array;
  /** Term occurrences scored: one per query term of each document scored. */
  postingsScored: number;
  /** Postings of the query's terms not scored (jumped over, cut off by the bound, or refused by the filter). */
  postingsSkipped: number;
  /** Blocks of postings skipped whole (their maxima could not reach the k-th score). */
  blocksSkipped: number;
  /** Documents the filter refused before they were scored. */
  filtered: number;
  /** The postings budget stopped the search before it was exact. */
  budgetExhausted: boolean;
}

/**
 * The factor on block maxima computed at avgdl `stored` that keeps them upper bounds at `avgdl`.
 * An impact tf·(k1+1) / (tf + k1·(1 − b + b·|D|/avgdl)) grows with avgdl (a document becomes
 * relatively shorter), but by less than avgdl does: K(avgdl) ≥ K(stored) · stored/avgdl when avgdl ≥
 * stored, so impact(avgdl) ≤ impact(stored) · avgdl/stored. A shrinking avgdl only lowers impacts.
 */
export function boundScale(stored: number, avgdl: number): number {
  return avgdl > stored ? (avgdl / stored) * ROUNDING : 1;
}

class Cursor {
  readonly docs: Int32Array;
  readonly tfs: Int32Array;
  readonly blockLast: Int32Array;
  readonly blockMax: Float64Array;
  readonly length: number;
  readonly blocks: number;
  readonly idf: number;
  /** Multiplier on the stored block maxima: ≥ 1 when avgdl has grown since they were computed. */
  readonly scale: number;
  /** Upper bound of the term's contribution to any document. */
  readonly ub: number;
  pos = 0;
  doc: number;

  constructor(list: Postings, idf: number, scale: number) {
    this.docs = list.docs;
    this.tfs = list.tfs;
    this.blockLast = list.blockLast;
    this.blockMax = list.blockMax;
    this.length = list.length;
    this.blocks = (list.length + BLOCK_SIZE - 1) >> BLOCK_SHIFT;
    this.idf = idf;
    this.scale = scale;
    this.ub = idf * (list.maxImpact * scale);
    this.doc = list.docs[0]!;
  }

  next(): void {
    const pos = ++this.pos;
    this.doc = pos < this.length ? this.docs[pos]! : END;
  }

  /** Moves to the first posting ≥ `target`; returns the number of whole blocks jumped. */
  seek(target: number): number {
    const blockLast = this.blockLast;
    const blocks = this.blocks;
    let j = this.pos >> BLOCK_SHIFT;
    let jumped = 0;
    let pos = this.pos;
    if (blockLast[j]! < target) {
      // Gallop over the block ends, then binary search the bracket.
      let step = 1;
      let lo = j + 1;
      let hi = lo;
      while (hi < blocks && blockLast[hi]! < target) {
        lo = hi + 1;
        hi += step;
        step *= 2;
      }
      if (hi > blocks) hi = blocks;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (blockLast[mid]! < target) lo = mid + 1;
        else hi = mid;
      }
      jumped = lo - j - 1;
      j = lo;
      if (j >= blocks) {
        this.pos = this.length;
        this.doc = END;
        return jumped;
      }
      pos = j << BLOCK_SHIFT;
    }
    const docs = this.docs;
    const stop = Math.min(this.length, (j + 1) << BLOCK_SHIFT);
    while (pos < stop && docs[pos]! < target) pos++;
    this.pos = pos;
    this.doc = pos < this.length ? docs[pos]! : END;
    return jumped;
  }
}

/**
 * The `k` best documents for `terms` (distinct, as {@link tokenize} spells them; the query's order
 * is the order scores are summed in, as FTS5 sums its phrases).
 */
export function searchTopK(index: TextIndex, terms: readonly string[], k: number, options: TextSearchOptions = {}): TextTopK {
  const { accept, postingsBudget = Number.POSITIVE_INFINITY, prune = true } = options;
  const out: TextTopK = {
    ordinals: new Int32Array(0),
    scores: new Float64Array(0),
    postingsScored: 0,
    postingsSkipped: 0,
    blocksSkipped: 0,
    filtered: 0,
    budgetExhausted: false,
  };
  const rows = index.documents;
  const avgdl = index.avgdl;
  const lengths = index.lengths;
  // In query order: scores and bounds are summed in this order.
  const byQuery: Cursor[] = [];
  let total = 0;
  for (const term of terms) {
    const list = index.postings(term);
    if (!list) continue;
    // A term never summarized before (a list written since only has its summaries brought up to date).
    const fresh = list.blockLast.length === 0;
    if (list.summarize(lengths, avgdl) && fresh) index.summaries++;
    byQuery.push(new Cursor(list, idf(rows, list.length), boundScale(list.summaryAvgdl, avgdl)));
    total += list.length;
  }
  if (byQuery.length === 0 || k <= 0) return out;

  const heap = new ResultHeap(k);
  if (byQuery.length === 1) {
    single(byQuery[0]!, heap, lengths, avgdl, accept, postingsBudget, prune, out);
    heap.drain(out);
    out.postingsSkipped = total - out.postingsScored;
    return out;
  }
  multi(byQuery, heap, lengths, avgdl, accept, postingsBudget, prune, out);
  heap.drain(out);
  out.postingsSkipped = total - out.postingsScored;
  return out;
}
/**
 * One term: block-max pruning alone (the pivot is always the next posting), as a plain loop over
 * the blocks. Same result and counters as the general loop.
 */
function single(
  c: Cursor,
  heap: ResultHeap,
  lengths: Int32Array,
  avgdl: number,
  accept: ((ordinal: number) => boolean) | undefined,
  budget: number,
  prune: boolean,
  out: TextTopK,
): void {
  const { docs, tfs, blockMax, length, blocks, idf: w, scale, ub } = c;
  let scored = 0;
  let blocksSkipped = 0;
  let filtered = 0;
  let theta = prune ? heap.threshold : -1;
  for (let j = 0; j < blocks; j++) {
    const from = j << BLOCK_SHIFT;
    const to = Math.min(length, from + BLOCK_SIZE);
    if (theta >= 0) {
      // Nothing left can pass θ.
      if (ub * ROUNDING <= theta) break;
      if (w * (blockMax[j]! * scale) <= theta) {
        blocksSkipped++;
        continue;
      }
    }
    for (let i = from; i < to; i++) {
      const d = docs[i]!;
      if (accept && !accept(d)) {
        filtered++;
        continue;
      }
      const score = w * impact(tfs[i]!, lengths[d]!, avgdl);
      scored++;
      heap.offer(d, score);
      if (scored >= budget) {
        out.budgetExhausted = i + 1 < length;
        out.postingsScored = scored;
        out.blocksSkipped = blocksSkipped;
        out.filtered = filtered;
        return;
      }
    }
    if (prune) theta = heap.threshold;
  }
  out.postingsScored = scored;
  out.blocksSkipped = blocksSkipped;
  out.filtered = filtered;
}

/**
 * Several terms: MaxScore (Turtle & Flood 1995) with block maxima on the last essential list. Cursors
 * are ordered by upper bound, ascending; those in [0, essential) are "non-essential": their bounds
 * together cannot lift a document past θ, so only documents in the other lists are candidates, and
 * a non-essential list is probed (a forward seek) only for a candidate that could still make it.
 */
function multi(
  byQuery: Cursor[],
  heap: ResultHeap,
  lengths: Int32Array,
  avgdl: number,
  accept: ((ordinal: number) => boolean) | undefined,
  postingsBudget: number,
  prune: boolean,
  out: TextTopK,
): void {
  const n = byQuery.length;
  const byBound = byQuery.slice().sort((a, b) => a.ub - b.ub);
  const upper = new Float64Array(n);
  for (let i = 0, sum = 0; i < n; i++) upper[i] = sum += byBound[i]!.ub;
  const parts = new Float64Array(n);
  const qOf = new Int32Array(n);
  for (let i = 0; i < n; i++) qOf[i] = byQuery.indexOf(byBound[i]!);
  let essential = 0;
  let scored = 0;
  let blocksSkipped = 0;
  let filtered = 0;
  let theta = prune ? heap.threshold : -1;

  for (;;) {
    // The next candidate: the smallest document among the essential lists.
    let d = END;
    for (let i = essential; i < n; i++) {
      const doc = byBound[i]!.doc;
      if (doc < d) d = doc;
    }
    if (d === END) break;
    // One essential list left: skip its blocks that cannot reach θ even with every other list's bound.
    if (theta >= 0 && essential === n - 1) {
      const c = byBound[essential]!;
      const rest = essential > 0 ? upper[essential - 1]! : 0;
      const j = c.pos >> BLOCK_SHIFT;
      if ((c.idf * (c.blockMax[j]! * c.scale) + rest) * ROUNDING <= theta) {
        blocksSkipped += c.seek(c.blockLast[j]! + 1) + 1;
        continue;
      }
    }
    if (accept && !accept(d)) {
      filtered++;
      for (let i = essential; i < n; i++) if (byBound[i]!.doc === d) byBound[i]!.next();
      continue;
    }
    const len = lengths[d]!;
    for (let q = 0; q < n; q++) parts[q] = 0;
    let partial = 0;
    for (let i = essential; i < n; i++) {
      const c = byBound[i]!;
      if (c.doc !== d) continue;
      const v = c.idf * impact(c.tfs[c.pos]!, len, avgdl);
      parts[qOf[i]!] = v;
      partial += v;
      scored++;
      c.next();
    }
    // Probe the non-essential lists, highest bound first, while the document can still pass θ.
    let alive = true;
    for (let i = essential - 1; i >= 0; i--) {
      if ((partial + upper[i]!) * ROUNDING <= theta) {
        alive = false;
        break;
      }
      const c = byBound[i]!;
      if (c.doc < d) blocksSkipped += c.seek(d);
      if (c.doc === d) {
        const v = c.idf * impact(c.tfs[c.pos]!, len, avgdl);
        parts[qOf[i]!] = v;
        partial += v;
        scored++;
        c.next();
      }
    }
    if (alive) {
      // The score as FTS5 sums it: in query order.
      let score = 0;
      for (let q = 0; q < n; q++) score += parts[q]!;
      heap.offer(d, score);
      if (prune) {
        theta = heap.threshold;
        while (essential < n && upper[essential]! * ROUNDING <= theta) essential++;
      }
    }
    if (scored >= postingsBudget) {
      out.budgetExhausted = byQuery.some((c) => c.doc !== END);
      break;
    }
  }

  out.postingsScored = scored;
  out.blocksSkipped = blocksSkipped;
  out.filtered = filtered;
}

/** The k best (score, ordinal) pairs seen: a binary heap with the worst on top. */
class ResultHeap {
  readonly k: number;
  docs: Int32Array;
  scores: Float64Array;
  size = 0;

  constructor(k: number) {
    this.k = k;
    // A deep k (a filtered query) starts small and grows.
    const cap = Math.min(k, 256);
    this.docs = new Int32Array(cap);
    this.scores = new Float64Array(cap);
  }

  /** The score to beat once k are held; -1 before (every BM25 score is positive). */
  get threshold(): number {
    return this.size === this.k ? this.scores[0]! : -1;
  }

  /** Offers documents in increasing ordinal order: a tie with the worst held one loses. */
  offer(doc: number, score: number): void {
    if (this.size < this.k) {
      if (this.size === this.docs.length) this.grow();
      this.up(this.size++, doc, score);
    } else if (score > this.scores[0]!) {
      this.down(doc, score);
    }
  }

  /** Empties the heap into `out`, best first. */
  drain(out: TextTopK): void {
    const n = this.size;
    const ordinals = new Int32Array(n);
    const scores = new Float64Array(n);
    for (let i = n - 1; i >= 0; i--) {
      ordinals[i] = this.docs[0]!;
      scores[i] = this.scores[0]!;
      const last = --this.size;
      if (last > 0) this.down(this.docs[last]!, this.scores[last]!);
    }
    out.ordinals = ordinals;
    out.scores = scores;
  }

  private grow(): void {
    const cap = Math.min(this.k, this.docs.length * 2);
    const docs = new Int32Array(cap);
    docs.set(this.docs);
    this.docs = docs;
    const scores = new Float64Array(cap);
    scores.set(this.scores);
    this.scores = scores;
  }

  // Worse = a lower score, or the same score and a larger ordinal.

  private up(i: number, doc: number, score: number): void {
    const docs = this.docs;
    const scores = this.scores;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const ps = scores[parent]!;
      // Stop once the parent is worse than the new entry.
      if (ps < score || (ps === score && docs[parent]! > doc)) break;
      docs[i] = docs[parent]!;
      scores[i] = ps;
      i = parent;
    }
    docs[i] = doc;
    scores[i] = score;
  }

  /** Replaces the top with (doc, score) and sifts it down. */
  private down(doc: number, score: number): void {
    const docs = this.docs;
    const scores = this.scores;
    const n = this.size;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      let cs = scores[c]!;
      if (c + 1 < n) {
        const rs = scores[c + 1]!;
        if (rs < cs || (rs === cs && docs[c + 1]! > docs[c]!)) {
          c++;
          cs = rs;
        }
      }
      // Stop unless the worse child is worse than the entry.
      if (!(cs < score || (cs === score && docs[c]! > doc))) break;
      docs[i] = docs[c]!;
      scores[i] = cs;
      i = c;
    }
    docs[i] = doc;
    scores[i] = score;
  }
}
