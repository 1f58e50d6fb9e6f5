import { exactNearestOnScale, toCommonScale } from '../ann.js';
import type { Predicate } from '../filter.js';
import type { QueryContext, VectorSearcher, WorkCounter } from '../context.js';
import { OrdinalSet } from '../ordinal-set.js';
import type { ContextPlan } from '../plan.js';
import { itemVectors, type Int8Vectors } from '../profiles/for-you-vectors.js';
import { copyRows } from '../shared/item-vectors.js';
import { TopK } from '../topk.js';
import type { Explain, RetrieveTask, VelocityWindow } from '../types.js';
import { score } from './scan.js';
import type { CandidateSources } from './sources.js';
import { ORDER_ATTEMPTS } from './walks.js';

/**
 * Items in the popular subset searched exactly around a context vector below Full. Measured at
 * 100 000 items (10 000 with signals), `bench:retrieve`: overlap@10 with Full 0.68 with 2 048, 0.79
 * with 4 096, 0.86 with 8 192. 8 192 × 128 int8 is 1 MiB per worker, searched in ~0.2 ms.
 */
const POPULAR_SUBSET = 8192;

/**
 * Items in the uniform sample that tells, around a context vector, how far Full's ANN ball
 * reaches: its 500 nearest of N items are about its `500 × SAMPLE / N` nearest of the sample, so
 * the similarity of that sample row is the ball's radius, measured in the query's own region (the
 * popular subset alone cannot tell it: popularity is not spread evenly over the space). 4 096 × 128
 * int8 is 512 KiB per worker, searched exactly in ≈ 0.1 ms.
 */
const BALL_SAMPLE = 4096;

/**
 * The fewest sample rows the radius may be read from: below it (a corpus over 500 × 4 096 / 8 ≈
 * 256 000 items) the estimate is too coarse, and the pass takes the ANN's neighbours as before.
 */
const BALL_MIN_RANK = 8;

/**
 * Rebuilds of the slot orders after which the popular subset is rebuilt. Membership only decides
 * which items are candidates (their popularity is always read fresh), so it may lag a little.
 */
const SUBSET_STALE_GENERATIONS = 16;

/** The rank of an empty subset: no member (`rank[o] ?? 0` reads 0 for every item). */
const NO_RANK = new Int32Array(0);

/**
 * The most popular items and their vectors, kept per executor (one per worker): the vectors are
 * copies of the int8 item rows (for-you-vectors.ts, one per process) brought to one common scale
 * (`toCommonScale`), not the items table's floats, and a member's similarity is the int8 inner
 * product's. Reading the floats (and keeping them, 4 MiB, and a cache of every vector looked up,
 * 6 MiB) cost a worker 11.8 MiB at 100 000 items; the rounding moves a cosine by about 0.003 at 128
 * dimensions. An inner product over rows of one scale costs 0.62× a cosine over rows of their own
 * (2 048 rows of 128, bench/probes/ann-quantization.ts, Node 24: 42.7 against 69.3 µs a search).
 */
interface PopularSubset {
  generation: number;
  catalogVersion: number;
  ann: VectorSearcher | null;
  ordinals: Int32Array;
  /** The members' vectors, row by row, as int8 of one common scale (see `toCommonScale`): searched by inner product. */
  matrix: Int8Array;
  /** The matrix's scale. */
  scale: number;
  /** `rank[o]` is 1 + the row of ordinal `o` (rows are in popularity order), 0 for a non-member. */
  rank: Int32Array;
  /** A uniform sample of the items with an embedding (every few ordinals), int8 rows of one common scale: see {@link BALL_SAMPLE}. */
  sample: Int8Array;
  /** The sample's scale. */
  sampleScale: number;
  /** Items with an embedding the sample stands for (the ANN's size when it was drawn). */
  sampled: number;
}

/**
 * Candidates around a context vector: the ANN's neighbours, and for `popular` where the plan says
 * so the popular subset's members inside Full's ANN ball in their place or beside them (see
 * {@link ContextPlan}). Keeps the popular subset and its vectors per executor (one per worker).
 */
export class ContextCandidates {
  readonly #ctx: QueryContext;
  readonly #sources: CandidateSources;
  readonly #seen = new OrdinalSet();
  #subset: PopularSubset | null = null;
  /** One row's norm and sequence, for {@link copyRows}. */
  readonly #norm = new Float32Array(1);
  readonly #seq = new Int32Array(1);

  /** Bytes of the popular subset's arrays. */
  get subsetBytes(): number {
    const s = this.#subset;
    return s ? s.ordinals.byteLength + s.matrix.buffer.byteLength + s.rank.byteLength + s.sample.buffer.byteLength : 0;
  }

  constructor(ctx: QueryContext, sources: CandidateSources) {
    this.#ctx = ctx;
    this.#sources = sources;
  }

  /**
   * Builds the popular subset and its vectors (from the int8 item rows, which it brings to the
   * catalog's version first), so the first query around a context vector after open does not pay for it.
   */
  warm(nowMs: number): void {
    if (this.#ctx.ann) this.#popularSubset(nowMs, { slots: 0 });
  }

  around(
    task: RetrieveTask,
    topK: number,
    plan: ContextPlan,
    pass: Predicate,
    window: VelocityWindow,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
  ): { ranked: number[]; scores: number[]; similarity: Map<number, number> } {
    explain.annTopK = topK;
    const similarity = new Map<number, number>();
    const ann = this.#ctx.ann;
    if (!ann) return { ranked: [], scores: [], similarity };
    const fullTopK = plan.ballTopK;
    const shortlist = plan.popularShortlist;
    // Below Full, `popular` ranks the popular members of Full's ball without searching the graph
    // at all when the sample can tell the ball's radius and enough members fall inside it: the
    // HNSW search was most of such a query's cost at every level.
    if (task.profile === 'popular' && plan.popularStandIn) {
      const subset = this.#popularSubset(nowMs, work);
      const rows = subset ? Math.min(shortlist, subset.ordinals.length) : 0;
      const fill = plan.fillBall;
      const ball = subset && rows > 0 ? this.#ballMembers(subset, rows, task.context!, fullTopK, pass, task.limit, fill) : null;
      if (ball) {
        explain.annCandidates = null;
        explain.popularCandidates = ball.keys.length;
        return this.#rankAround(task, ball.keys, ball.sims, pass, window, nowMs, explain, work, similarity);
      }
    }
    const found = ann.search(task.context!, topK, topK);
    explain.vectorSearch = ann.method;
    explain.annCandidates = found.keys.length;
    // Popularity-aware candidates below Full: the ANN's neighbours plus the popular items that the
    // Full search (a wider ball) would have found. A popular item is in Full's ball about as often
    // as the wider ball is larger: if v of this search's neighbours are among the level's shortlist
    // (the shortlist most popular members of the subset), the Full ball holds about
    // v × (Full top-k / this top-k) of them, taken as the nearest members of the shortlist by an
    // exact search.
    let keys: ArrayLike<number> = found.keys;
    let sims: ArrayLike<number> = found.similarity;
    if (task.profile === 'popular' && plan.popularStandIn) {
      const subset = this.#popularSubset(nowMs, work);
      const rows = subset ? Math.min(shortlist, subset.ordinals.length) : 0;
      if (subset && rows > 0) {
        let inShortlist = 0;
        for (let i = 0; i < found.keys.length; i++) {
          const r = subset.rank[found.keys[i]!] ?? 0;
          if (r > 0 && r <= rows) inShortlist++;
        }
        const extra = Math.min(rows, Math.round((inShortlist * fullTopK) / topK));
        if (extra > 0) {
          const near = exactNearestOnScale(subset.matrix.subarray(0, rows * ann.dims), subset.scale, ann.dims, task.context!, extra);
          const seen = this.#seen;
          seen.reset();
          const mk: number[] = Array.from(found.keys);
          const ms: number[] = Array.from(found.similarity);
          for (const o of mk) seen.add(o);
          for (let i = 0; i < near.rows.length; i++) {
            const o = subset.ordinals[near.rows[i]!]!;
            if (!seen.add(o)) continue;
            mk.push(o);
            ms.push(near.similarity[i]!);
          }
          explain.popularCandidates = mk.length - found.keys.length;
          keys = mk;
          sims = ms;
        }
      }
    }
    return this.#rankAround(task, keys, sims, pass, window, nowMs, explain, work, similarity);
  }

  /**
   * The `k` members nearest to `vector` among the popular subset's first `shortlist`, nearest
   * first, with their similarity (the int8 search's): `for_you`'s neighbours at a level whose plan
   * says so, for a user without creator affinities (see `ForYouPlan.popularNeighbours`). Measured
   * on one thread at 100 000 items (`bench:personalization --sweep --sweep-no-affinity`, when this
   * pass was a cosine over rows of their own scale): such a NoDiversity query 0.120 ms of CPU with 2 048 rows, 0.163 with 4 096, 0.227 searching the graph;
   * overlap@10 with the exhaustive ranking 0.161, 0.163 and 0.185. Null without an ANN index
   * (nothing to stand in for) or a subset.
   */
  nearestPopular(
    vector: Float32Array,
    k: number,
    shortlist: number,
    nowMs: number,
    work: WorkCounter,
  ): { keys: number[]; sims: number[] } | null {
    if (!this.#ctx.ann) return null;
    const subset = this.#popularSubset(nowMs, work);
    const dims = this.#ctx.schema.embeddingDims;
    const rows = subset ? Math.min(shortlist, subset.ordinals.length) : 0;
    if (!subset || rows === 0 || vector.length !== dims) return null;
    const near = exactNearestOnScale(subset.matrix.subarray(0, rows * dims), subset.scale, dims, vector, k);
    const keys: number[] = [];
    const sims: number[] = [];
    for (let i = 0; i < near.rows.length; i++) {
      keys.push(subset.ordinals[near.rows[i]!]!);
      sims.push(near.similarity[i]!);
    }
    return { keys, sims };
  }

  /** The candidates around a context vector, filtered and ranked by the profile's score. */
  #rankAround(
    task: RetrieveTask,
    keys: ArrayLike<number>,
    sims: ArrayLike<number>,
    pass: Predicate,
    window: VelocityWindow,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
    similarity: Map<number, number>,
  ): { ranked: number[]; scores: number[]; similarity: Map<number, number> } {
    explain.candidates = keys.length;
    const top = new TopK(Math.max(keys.length, 1));
    for (let i = 0; i < keys.length; i++) {
      const o = keys[i]!;
      if (!pass(o)) continue;
      explain.afterFilter++;
      similarity.set(o, sims[i]!);
      const [p, s] = score(this.#ctx, task.profile, o, window, nowMs, work);
      // Items the profile cannot tell apart stay in similarity order.
      top.push(o, p, s === 0 ? sims[i]! : s);
    }
    const { ordinals, primary } = top.sorted();
    return { ranked: ordinals, scores: primary, similarity };
  }

  /**
   * The members of the shortlist (the first `rows` of the popular subset) inside Full's ANN ball
   * around `vector`, nearest first, with their similarity; null when this cannot stand in for the
   * ANN: a corpus too large for the sample to tell the radius ({@link BALL_MIN_RANK}), or fewer
   * than `need` members in the ball that `pass` keeps (a region with few popular items, or a
   * narrow filter, where Full ranks unpopular neighbours by similarity too) unless `fill`.
   *
   * With `fill` (the levels below ReducedCandidates), a ball short of `need` is topped up with the
   * shortlist's nearest members just outside it instead of searching the graph: with a shortlist
   * of 2 048 the ball held fewer than a page in ~97 % of `bench:retrieve`'s queries, so the shorter
   * shortlist meant to make NoDiversity cheap made it run the HNSW search (and the exact pass
   * besides) nearly every time, 0.67× Full's time against CoarseAggregates' 0.45×.
   *
   * The radius is the similarity of the sample row at rank `fullTopK × sample / items`: the same
   * share of the sample as Full's ball is of the corpus, measured around this vector. Both exact
   * passes are int8 inner products (see {@link PopularSubset}), a fraction of the ≈ 0.8 ms of
   * an HNSW search of 200 on the bench corpus.
   */
  #ballMembers(
    subset: PopularSubset,
    rows: number,
    vector: Float32Array,
    fullTopK: number,
    pass: Predicate,
    need: number,
    fill = false,
  ): { keys: number[]; sims: number[] } | null {
    const dims = this.#ctx.schema.embeddingDims;
    const sampleRows = subset.sample.length / dims;
    if (subset.sampled <= 0) return null;
    const rank = Math.round((fullTopK * sampleRows) / subset.sampled);
    if (rank < BALL_MIN_RANK || rank > sampleRows) return null;
    const edge = exactNearestOnScale(subset.sample, subset.sampleScale, dims, vector, rank);
    if (edge.rows.length < rank) return null;
    const radius = edge.similarity[rank - 1]!;
    const matrix = subset.matrix.subarray(0, rows * dims);
    // Twice the members a ball of this share would hold if popularity were spread evenly; doubled
    // again while the last one found is still inside.
    let k = Math.min(rows, Math.max(64, Math.ceil((2 * fullTopK * rows) / subset.sampled)));
    let near = exactNearestOnScale(matrix, subset.scale, dims, vector, k);
    while (k < rows && near.rows.length === k && near.similarity[k - 1]! >= radius) {
      k = Math.min(rows, 2 * k);
      near = exactNearestOnScale(matrix, subset.scale, dims, vector, k);
    }
    let inside = 0;
    let passing = 0;
    while (inside < near.rows.length && near.similarity[inside]! >= radius) {
      if (pass(subset.ordinals[near.rows[inside]!]!)) passing++;
      inside++;
    }
    if (passing < need) {
      if (!fill) return null;
      // The nearest members outside the ball, until `need` pass (or the shortlist runs out).
      if (near.rows.length < rows && near.rows.length - inside < need - passing) {
        k = Math.min(rows, inside + 2 * need);
        near = exactNearestOnScale(matrix, subset.scale, dims, vector, k);
      }
      while (inside < near.rows.length && passing < need) {
        if (pass(subset.ordinals[near.rows[inside]!]!)) passing++;
        inside++;
      }
    }
    const keys: number[] = [];
    const sims: number[] = [];
    for (let i = 0; i < inside; i++) {
      keys.push(subset.ordinals[near.rows[i]!]!);
      sims.push(near.similarity[i]!);
    }
    return { keys, sims };
  }

  /**
   * The {@link POPULAR_SUBSET} most popular present items with an embedding, and their int8 rows:
   * rebuilt when the slot orders moved on by {@link SUBSET_STALE_GENERATIONS}, when items changed
   * or when the ANN index was replaced. The rows are copied from the int8 item vectors (brought to
   * the catalog's version first), each whole (see `copyRows`): no read of the items table.
   */
  #popularSubset(nowMs: number, work: WorkCounter): PopularSubset | null {
    const ctx = this.#ctx;
    const generation = ctx.store.order.generation;
    const version = ctx.catalog.version;
    const old = this.#subset;
    // An empty subset (nothing popular yet) is not kept: the next call looks again.
    const fresh = old !== null && old.ordinals.length > 0;
    if (fresh && old.ann === ctx.ann && old.catalogVersion === version && generation - old.generation < SUBSET_STALE_GENERATIONS)
      return old;
    if (!old || old.ann !== ctx.ann) ctx.catalog.derivedBuilds++;
    const present = ctx.catalog.present;
    const top = new TopK(POPULAR_SUBSET);
    let ok = false;
    for (let attempt = 0; attempt < ORDER_ATTEMPTS && !ok; attempt++) {
      ok = this.#sources.popularInto(POPULAR_SUBSET, (o) => present[o] === 1, nowMs, top, work);
    }
    if (!ok) return old;
    const ranked = top.sorted().ordinals;
    const dims = ctx.schema.embeddingDims;
    const vectors = itemVectors(ctx);
    const ordinals = new Int32Array(ranked.length);
    const matrix = new Int8Array(ranked.length * dims);
    const norms = new Float32Array(ranked.length);
    let members = 0;
    for (const o of ranked) {
      if (!this.#copyRow(vectors, o, matrix, members * dims)) continue;
      norms[members] = this.#norm[0]!;
      ordinals[members++] = o;
    }
    const scale = toCommonScale(matrix.subarray(0, members * dims), norms.subarray(0, members), dims);
    // Nothing popular yet: no rank per item (the subset is looked for again at the next call).
    const rank = members === 0 ? NO_RANK : new Int32Array(ctx.catalog.ids.length);
    for (let r = 0; r < members; r++) rank[ordinals[r]!] = r + 1;
    const { sample, sampleScale, sampled } =
      old && old.ann === ctx.ann && old.catalogVersion === version ? old : this.#ballSample(vectors, dims);
    this.#subset = {
      generation,
      catalogVersion: version,
      ann: ctx.ann,
      ordinals: ordinals.slice(0, members),
      matrix: matrix.subarray(0, members * dims),
      scale,
      rank,
      sample,
      sampleScale,
      sampled,
    };
    return this.#subset;
  }

  /** Copies item `o`'s int8 row into `out` at `at`, whole; false (nothing copied) when it has no vector. */
  #copyRow(vectors: Int8Vectors, o: number, out: Int8Array, at: number): boolean {
    if (o >= vectors.inverseNorms.length || vectors.inverseNorms[o] === 0) return false;
    const dims = this.#ctx.schema.embeddingDims;
    copyRows(vectors.store, o, o + 1, out.subarray(at, at + dims), this.#norm, this.#seq);
    return this.#norm[0] !== 0;
  }

  /** {@link BALL_SAMPLE} present items with an embedding, every few ordinals, as int8 rows of one common scale. */
  #ballSample(vectors: Int8Vectors, dims: number): { sample: Int8Array; sampleScale: number; sampled: number } {
    const ctx = this.#ctx;
    const present = ctx.catalog.present;
    const n = ctx.catalog.ids.length;
    const sampled = ctx.ann?.size ?? 0;
    const stride = Math.max(1, Math.floor(n / BALL_SAMPLE));
    const sample = new Int8Array(Math.min(BALL_SAMPLE, n) * dims);
    const norms = new Float32Array(Math.min(BALL_SAMPLE, n));
    let rows = 0;
    for (let o = 0; o < n && rows * dims < sample.length; o += stride) {
      if (present[o] !== 1) continue;
      if (this.#copyRow(vectors, o, sample, rows * dims)) norms[rows++] = this.#norm[0]!;
    }
    const sampleScale = toCommonScale(sample.subarray(0, rows * dims), norms.subarray(0, rows), dims);
    // The rows stand for the items with an embedding in proportion to how many were drawn.
    return { sample: sample.subarray(0, rows * dims), sampleScale, sampled };
  }
}
