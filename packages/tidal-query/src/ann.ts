import { InternalError } from 'tidal-load';
// Before usearch, which it protects from `node -e`'s global __dirname (see the module).
import { restoreDirname } from './usearch-guard.js';
import { MetricKind, exactSearch } from 'usearch';
import type { VectorSearcher } from './context.js';
import { LEVEL_PLANS } from './plan.js';
import { gated, nativeInt8Index, type NativeIndex } from './usearch-native.js';

restoreDirname();

/**
 * The HNSW parameters every index is built with. connectivity 16 / expansion_add 128 /
 * expansion_search 128: recall@10 above 0.95 on the bench corpus (bench/ reports it) at under a
 * millisecond per 500-candidate search. Vectors are held as int8 rows, each scaled by its largest
 * component ({@link toInt8}, fed to usearch's addon as they are: usearch-native.ts). At 100 000
 * bench vectors, k = 64 searched as {@link AnnIndex.search} does, three builds each
 * (bench/probes/ann-quantization.ts): recall@10 0.959–0.964 against half precision's 0.977–0.982,
 * a search 0.79–0.80× the time, the file 0.68× (27.7 against 40.5 MB, mapped once per query worker;
 * at 1 000 000 vectors 277 against 404 MB), a similarity within 2.8e-3 of the exact cosine (f16:
 * 1e-4; usearch's own float → int8 cast, scaling by the norm: recall 0.883–0.892, 1.5e-2). The
 * search effort follows the `k` asked for: usearch
 * searches with `max(expansion_search, k)` candidates, so a level's ANN top-k (500 → 200) is its
 * search breadth too (`bench:retrieve`: 1.36 → 0.78 ms at 100 000 items); below 128 a layered
 * index's snapshot is mapped with the narrowest breadth (see `NARROWEST_BREADTH`). A snapshot records this string and is rebuilt when it
 * differs, because a graph built with other parameters would silently search differently.
 */
export const ANN_PARAMS = 'hnsw-cos-i8max-m16-ef128-128';

/** The search breadth every index is built with (`expansion_search` in {@link ANN_PARAMS}). */
const EXPANSION_SEARCH = 128;

/**
 * The narrowest search breadth any plan asks for: every plan's ANN top-k and `for_you`'s. usearch
 * searches `max(expansion_search, k)` candidates, so a snapshot is mapped with this
 * `expansion_search` and a search of breadth `b` asks for `max(k, b)` neighbours (keeping the
 * nearest `k`): each level pays its own search effort down to this breadth, through one mapping of
 * the file per worker (a view per breadth mapped it six times: 379 MiB file-backed RSS at 100 000
 * items against 64 MiB).
 */
const NARROWEST_BREADTH: number = Math.min(EXPANSION_SEARCH, ...LEVEL_PLANS.flatMap((p) => [p.ann.topK, p.forYou.ann]));

/**
 * Batches at least this large may be added with every core (a bulk load); smaller ones always on
 * this thread. usearch's concurrent insertion leaves a few vectors with no inbound link, so that no
 * search ever finds them: 1 to 6 per parallel build whatever its size (measured with each vector
 * searched for itself: 19 of 30 parallel builds of 300 vectors lost at least one, 0 of 30 built on
 * one thread; 2 to 3 of 100 000 at 64 dims). For a bulk load that is 0.003 % of the items, the
 * price of a build in half the time (18 s against 39 s at 100 000 × 64); for a small index it would
 * be a visible hole, so a small index is never built concurrently.
 */
const PARALLEL_BATCH = 1024;

function newIndex(dims: number, expansionSearch = EXPANSION_SEARCH): NativeIndex {
  return nativeInt8Index(dims, 16, 128, expansionSearch);
}

/** `rows` rows of `dims` floats as int8 rows, each scaled by its largest component ({@link toInt8}). */
function int8Rows(vectors: Float32Array, dims: number): Int8Array {
  const out = new Int8Array(vectors.length);
  for (let at = 0; at < vectors.length; at += dims) toInt8(vectors.subarray(at, at + dims), out, at);
  return out;
}

/** The first `counts[0]` of a one-query search's answer. */
function firstQuery(m: [BigUint64Array, Float32Array, BigUint64Array]): { keys: BigUint64Array; distances: Float32Array } {
  const n = Number(m[2][0] ?? 0n);
  return { keys: m[0].subarray(0, n), distances: m[1].subarray(0, n) };
}

/**
 * Approximate nearest neighbours over item embeddings (usearch HNSW, cosine). Keys are ordinals.
 *
 * Two shapes. A plain index holds every vector in this thread's memory and takes updates in place.
 * A layered index ({@link AnnIndex.view}) searches a saved snapshot memory-mapped read-only, so
 * every query worker shares one copy of it through the page cache, plus a small private `delta`
 * index holding the vectors added or replaced since the snapshot; the snapshot's entries that were
 * replaced or deleted since are hidden by a tombstone set. A viewed usearch index refuses `add` and
 * `remove` ("immutable index"), hence the layering.
 */
export class AnnIndex implements VectorSearcher {
  readonly dims: number;
  /** An approximate search (see {@link VectorSearcher.method}). */
  readonly method = 'ann';
  /** The memory-mapped snapshot (read-only), or null for a plain index. */
  #base: NativeIndex | null = null;
  #baseSize = 0;
  /** Keys of `#base` whose vector is stale: deleted or replaced since the snapshot. */
  readonly #dead = new Set<number>();
  /** Vectors added or replaced since the snapshot; for a plain index, every vector. */
  #delta: NativeIndex | null = null;
  /**
   * Whether `#delta`'s last reservation made room for concurrent insertion. usearch reserves its
   * per-thread state only when an add outgrows the capacity, with that add's thread count; a
   * concurrent add that fits in a capacity reserved for one thread fails ("Reserve capacity ahead
   * of insertions!"), so such an add runs on this thread.
   */
  #deltaConcurrent = false;

  /** An empty plain index. */
  constructor(dims: number) {
    this.dims = dims;
  }

  /**
   * A layered index over the snapshot at `file`, memory-mapped: nothing is copied, and the pages
   * are shared with every other thread or process mapping the same file. The file must not be
   * modified while mapped (snapshots are only ever replaced by renaming a new file into place).
   * @throws when usearch cannot map the file or it holds vectors of other dimensions.
   */
  static view(dims: number, file: string): AnnIndex {
    const base = newIndex(dims, NARROWEST_BREADTH);
    base.view(file);
    checkDims(base, dims, file);
    const ann = new AnnIndex(dims);
    ann.#base = base;
    ann.#baseSize = Number(base.size());
    return ann;
  }

  /**
   * A plain index with a private in-memory copy of the snapshot at `file`, for a thread that will
   * change most of it or save it again.
   * @throws when usearch cannot read the file or it holds vectors of other dimensions.
   */
  static load(dims: number, file: string): AnnIndex {
    const index = newIndex(dims);
    index.load(file);
    checkDims(index, dims, file);
    const ann = new AnnIndex(dims);
    ann.#delta = index;
    return ann;
  }

  /** Number of live vectors. */
  get size(): number {
    return this.#baseSize - this.#dead.size + (this.#delta ? Number(this.#delta.size()) : 0);
  }

  /** Whether this index searches a memory-mapped snapshot (and so cannot be saved as it is). */
  get layered(): boolean {
    return this.#base !== null;
  }

  /**
   * Adds or replaces vectors. `vectors` holds `keys.length` rows of `dims` floats; a key appears
   * at most once. `threads`: 1 = this thread; 0 (the default) = every core for a batch of
   * {@link PARALLEL_BATCH} or more (a bulk load), this thread for a smaller one.
   */
  upsert(keys: readonly number[], vectors: Float32Array, threads?: number): void {
    if (keys.length === 0) return;
    const big = BigUint64Array.from(keys, BigInt);
    if (this.#base) {
      const inBase = this.#base.contains(big);
      for (let i = 0; i < keys.length; i++) if (inBase[i]) this.#dead.add(keys[i]!);
    }
    const delta = (this.#delta ??= newIndex(this.dims));
    const inDelta = delta.contains(big);
    const replaced: bigint[] = [];
    for (let i = 0; i < keys.length; i++) if (inDelta[i]) replaced.push(big[i]!);
    if (replaced.length > 0) delta.remove(BigUint64Array.from(replaced));
    const reserves = Number(delta.size()) + keys.length >= Number(delta.capacity());
    const concurrent = threads !== 1 && keys.length >= PARALLEL_BATCH && (reserves || this.#deltaConcurrent);
    if (reserves) this.#deltaConcurrent = concurrent;
    delta.add(big, int8Rows(vectors, this.dims), concurrent ? (threads ?? 0) : 1);
  }

  /** Removes a key if present. */
  remove(key: number): void {
    const k = BigUint64Array.of(BigInt(key));
    if (this.#base && !this.#dead.has(key) && this.#base.contains(k)[0] === true) this.#dead.add(key);
    if (this.#delta?.contains(k)[0] === true) this.#delta.remove(k);
  }

  /**
   * The `k` nearest keys to `vector`, closest first, with cosine similarity (1 − cosine distance).
   * Searches run on this thread. A layered index searches its snapshot with `breadth` candidates
   * (a level's ANN top-k; at least {@link NARROWEST_BREADTH}, 128 when not given); a plain index,
   * and the delta, always search with 128.
   */
  search(vector: Float32Array, k: number, breadth = EXPANSION_SEARCH): { keys: Int32Array; similarity: Float32Array } {
    const n = Math.min(k, this.size);
    if (n <= 0) return { keys: new Int32Array(0), similarity: new Float32Array(0) };
    const query = toInt8(vector);
    const a = this.#searchBase(query, n, breadth);
    const b =
      this.#delta && this.#delta.size() > 0 ? firstQuery(this.#delta.search(query, Math.min(n, Number(this.#delta.size())), 1)) : null;
    const bLen = b ? b.keys.length : 0;
    // Merge the two distance-ordered lists (ties: the lower key first, so every worker agrees).
    const keys = new Int32Array(Math.min(n, a.keys.length + bLen));
    const similarity = new Float32Array(keys.length);
    let i = 0;
    let j = 0;
    for (let o = 0; o < keys.length; o++) {
      const takeA =
        j >= bLen ||
        (i < a.keys.length &&
          (a.distances[i]! < b!.distances[j]! || (a.distances[i] === b!.distances[j] && a.keys[i]! < Number(b!.keys[j]))));
      if (takeA) {
        keys[o] = a.keys[i]!;
        similarity[o] = 1 - a.distances[i]!;
        i++;
      } else {
        keys[o] = Number(b!.keys[j]);
        similarity[o] = 1 - b!.distances[j]!;
        j++;
      }
    }
    return { keys, similarity };
  }

  /**
   * The `n` nearest live keys of the snapshot. Tombstoned keys are skipped, so the search asks for
   * a few more than `n` (twice the share of tombstones, plus 16) and doubles the request while too
   * few live keys come back; among the nearest `n + tombstones` at least `n` are live, which bounds
   * the retries. Asking for more is not free: k = 1000 costs twice k = 500.
   */
  #searchBase(query: Int8Array, n: number, breadth: number): { keys: number[]; distances: number[] } {
    const keys: number[] = [];
    const distances: number[] = [];
    const base = this.#base;
    if (!base || this.#baseSize - this.#dead.size <= 0) return { keys, distances };
    const dead = this.#dead;
    // The snapshot is mapped with the narrowest breadth: asking for `breadth` neighbours searches
    // with that many candidates (and the nearest `n` live ones are kept). As a plain index searches
    // with 128, a breadth above 128 searches with 128 unless `n` asks for more.
    const beam = Math.min(breadth, EXPANSION_SEARCH);
    const most = Math.min(this.#baseSize, Math.max(beam, n + dead.size));
    let want = Math.min(most, Math.max(beam, n + Math.ceil((2 * n * dead.size) / this.#baseSize) + 16));
    for (;;) {
      keys.length = 0;
      distances.length = 0;
      const m = firstQuery(base.search(query, want, 1));
      for (let i = 0; i < m.keys.length && keys.length < n; i++) {
        const key = Number(m.keys[i]);
        if (dead.has(key)) continue;
        keys.push(key);
        distances.push(m.distances[i]!);
      }
      // Done when enough are live, when the graph had no more to give, or at the bound.
      if (keys.length >= n || m.keys.length < want || want >= most) return { keys, distances };
      want = Math.min(most, want * 2);
    }
  }

  /**
   * Writes the index to `file` (usearch's format). Only a plain index can be saved: a layered one
   * would first have to be merged into a full copy (see `AnnIndex.load`).
   * @throws for a layered index, or when usearch cannot write the file.
   */
  save(file: string): void {
    if (this.#base) throw new InternalError('a layered ANN index cannot be saved; load the snapshot and apply the changes instead');
    (this.#delta ?? newIndex(this.dims)).save(file);
  }
}

/**
 * A vector scaled to int8 (its largest component to ±127): cosine is blind to a vector's scale, so
 * a cosine search over such rows ranks like one over the floats, to int8 rounding, at half the cost.
 */
export function toInt8(vector: Float32Array, out: Int8Array = new Int8Array(vector.length), offset = 0): Int8Array {
  let max = 0;
  for (let i = 0; i < vector.length; i++) max = Math.max(max, Math.abs(vector[i]!));
  const scale = max > 0 ? 127 / max : 0;
  for (let i = 0; i < vector.length; i++) out[offset + i] = Math.round(vector[i]! * scale);
  return out;
}

/**
 * The `k` rows of `matrix` (`matrix.length / dims` row-major int8 vectors, see {@link toInt8})
 * nearest to `vector` by cosine, closest first, with each one's similarity as the int8 search
 * measured it (1 − distance): an exact search (usearch's SIMD kernel), on this thread. 8 192 rows
 * of 128 dims: ~0.2 ms on the bench machine (float32 rows: twice that).
 */
export function exactNearestWithSimilarity(
  matrix: Int8Array,
  dims: number,
  vector: Float32Array,
  k: number,
): { rows: Int32Array; similarity: Float32Array } {
  return exactInt8(matrix, toInt8(vector), dims, k, MetricKind.Cos, 1);
}

/**
 * usearch's exact search of `query` over the int8 rows of `matrix`, the `k` nearest (at most the
 * rows) closest first, each with (1 − its distance) × `times`: a cosine, or (inner product) the
 * product, which `times` scales.
 */
function exactInt8(
  matrix: Int8Array,
  query: Int8Array,
  dims: number,
  k: number,
  metric: MetricKind,
  times: number,
): { rows: Int32Array; similarity: Float32Array } {
  const n = Math.min(k, Math.floor(matrix.length / dims));
  if (n <= 0) return { rows: new Int32Array(0), similarity: new Float32Array(0) };
  // usearch's addon reads a dataset from the start of its buffer, whatever the view's byteOffset
  // (javascript/lib.cpp, 2.25.3): a view that starts further in is searched as a copy.
  const data = matrix.byteOffset === 0 ? matrix : matrix.slice();
  const m = gated(() => exactSearch(data, query, dims, n, metric, 1));
  const similarity = new Float32Array(m.distances.length);
  for (let i = 0; i < similarity.length; i++) similarity[i] = Math.max(-1, Math.min(1, (1 - m.distances[i]!) * times));
  return { rows: Int32Array.from(m.keys, Number), similarity };
}

/**
 * Brings int8 rows (each from {@link toInt8}, `inverseNorms[r]` 1 / its norm, 0 for a row left
 * out) to one common scale in place: each row to unit length, then times the largest scale that
 * keeps every component of every row within ±127, which it returns (0 when no row has a norm).
 * An inner product over such rows ranks as cosine does, to int8 rounding, and usearch's exact
 * int8 kernel computes it in 0.62× cosine's time (2 048 rows of 128: 42.7 against 69.3 µs a search,
 * bench/probes/ann-quantization.ts, Node 24), for it does not compute each row's norm again (see {@link exactNearestOnScale}).
 * Rounding moves a cosine by about 0.003 at 128 dimensions (the rows' own scale: 0.002).
 */
export function toCommonScale(rows: Int8Array, inverseNorms: Float32Array, dims: number): number {
  const n = inverseNorms.length;
  let most = 0;
  for (let r = 0; r < n; r++) {
    const inv = inverseNorms[r]!;
    let big = 0;
    for (let i = r * dims; i < (r + 1) * dims; i++) big = Math.max(big, Math.abs(rows[i]!));
    most = Math.max(most, big * inv);
  }
  const scale = most > 0 ? 127 / most : 0;
  for (let r = 0; r < n; r++) {
    const f = scale * inverseNorms[r]!;
    for (let i = r * dims; i < (r + 1) * dims; i++) rows[i] = Math.round(rows[i]! * f);
  }
  return scale;
}

/**
 * The `k` rows of `matrix` (rows brought to one common `scale` by {@link toCommonScale}) nearest
 * to `vector` by cosine, closest first, with each one's similarity: an exact inner-product search
 * (usearch's SIMD kernel) on this thread, the similarity its product over the scale and the
 * query's int8 norm.
 */
export function exactNearestOnScale(
  matrix: Int8Array,
  scale: number,
  dims: number,
  vector: Float32Array,
  k: number,
): { rows: Int32Array; similarity: Float32Array } {
  const query = toInt8(vector);
  let sq = 0;
  for (let i = 0; i < query.length; i++) sq += query[i]! * query[i]!;
  // usearch's inner-product distance is 1 − the product.
  return exactInt8(matrix, query, dims, k, MetricKind.IP, sq > 0 && scale > 0 ? 1 / (scale * Math.sqrt(sq)) : 0);
}

/** Cosine similarity of two vectors of equal length (0 if either is zero). */
export function cosine(a: Float32Array, b: Float32Array, bOffset = 0): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[bOffset + i]!;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : 0;
}

function checkDims(index: NativeIndex, dims: number, file: string): void {
  // usearch takes the dimensions from the file, whatever the index was created with.
  const got = Number(index.dimensions());
  if (got !== dims) throw new InternalError(`${file} holds ${got}-dimensional vectors, not ${dims}`);
}
