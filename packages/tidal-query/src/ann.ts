import { InternalError } from 'tidal-load';
import { Index, MetricKind, ScalarKind, exactSearch, type Matches } from 'usearch';

/**
 * The HNSW parameters every index is built with. connectivity 16 / expansion_add 128 /
 * expansion_search 128: recall@10 above 0.95 on the bench corpus (bench/ reports it) at under a
 * millisecond per 500-candidate search. The search effort follows the `k` asked for: usearch
 * searches with `max(expansion_search, k)` candidates, so a level's ANN top-k (500 → 200) is its
 * search breadth too (`bench:retrieve`: 1.36 → 0.78 ms at 100 000 items); below 128, `search`'s
 * `ef` narrows a snapshot's search. A snapshot records this string and is rebuilt when it
 * differs, because a graph built with other parameters would silently search differently.
 */
export const ANN_PARAMS = 'hnsw-cos-f32-m16-ef128-128';

/** Batches at least this large are added with every core (a bulk load); smaller ones on this thread. */
const PARALLEL_BATCH = 1024;

/** The search expansion every index is built with (ANN_PARAMS' second 128). */
const EXPANSION_SEARCH = 128;

/** At most this many narrower views of a snapshot per index (one per search expansion asked for). */
const NARROW_VIEWS = 4;

function newIndex(dims: number, expansionSearch = EXPANSION_SEARCH): Index {
  return new Index({
    dimensions: dims,
    metric: MetricKind.Cos,
    quantization: ScalarKind.F32,
    connectivity: 16,
    expansion_add: 128,
    expansion_search: expansionSearch,
    multi: false,
  });
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
export class AnnIndex {
  readonly dims: number;
  /** The memory-mapped snapshot (read-only), or null for a plain index. */
  #base: Index | null = null;
  #baseSize = 0;
  /** The snapshot's file, for {@link AnnIndex.search}'s narrower views. */
  #file: string | null = null;
  /**
   * The snapshot mapped again with a smaller search expansion, by expansion: usearch fixes the
   * expansion per index object, and a second view of the same file shares its pages.
   */
  readonly #narrow = new Map<number, Index>();
  /** Keys of `#base` whose vector is stale: deleted or replaced since the snapshot. */
  readonly #dead = new Set<number>();
  /** Vectors added or replaced since the snapshot; for a plain index, every vector. */
  #delta: Index | null = null;

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
    const base = newIndex(dims);
    base.view(file);
    checkDims(base, dims, file);
    const ann = new AnnIndex(dims);
    ann.#base = base;
    ann.#baseSize = Number(base.size());
    ann.#file = file;
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
   * at most once. `threads`: 0 = every core, 1 = this thread; by default every core for batches of
   * 1024 or more (a bulk load) and this thread otherwise.
   */
  upsert(keys: readonly number[], vectors: Float32Array, threads?: number): void {
    if (keys.length === 0) return;
    const big = BigUint64Array.from(keys, BigInt);
    if (this.#base) {
      const inBase = this.#base.contains(big) as boolean[];
      for (let i = 0; i < keys.length; i++) if (inBase[i]) this.#dead.add(keys[i]!);
    }
    this.#delta ??= newIndex(this.dims);
    const inDelta = this.#delta.contains(big) as boolean[];
    const replaced: bigint[] = [];
    for (let i = 0; i < keys.length; i++) if (inDelta[i]) replaced.push(big[i]!);
    if (replaced.length > 0) this.#delta.remove(BigUint64Array.from(replaced));
    this.#delta.add(big, vectors, threads ?? (keys.length >= PARALLEL_BATCH ? 0 : 1));
  }

  /** Removes a key if present. */
  remove(key: number): void {
    const k = BigInt(key);
    if (this.#base && !this.#dead.has(key) && this.#base.contains(k)) this.#dead.add(key);
    if (this.#delta?.contains(k)) this.#delta.remove(k);
  }

  /**
   * The `k` nearest keys to `vector`, closest first, with cosine similarity (1 − cosine distance).
   * Searches run on this thread. `ef`, below the built expansion (128), searches the snapshot with
   * that expansion instead (usearch's effort is max(expansion, k)): cheaper, lower recall. It
   * applies to a layered index's snapshot only; the delta, and a plain index, search with 128.
   */
  search(vector: Float32Array, k: number, ef: number = EXPANSION_SEARCH): { keys: Int32Array; similarity: Float32Array } {
    const n = Math.min(k, this.size);
    if (n <= 0) return { keys: new Int32Array(0), similarity: new Float32Array(0) };
    const a = this.#searchBase(vector, n, this.#baseFor(ef));
    const b = this.#delta && this.#delta.size() > 0 ? (this.#delta.search(vector, Math.min(n, Number(this.#delta.size())), 1) as Matches) : null;
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
  #searchBase(vector: Float32Array, n: number, base: Index | null): { keys: number[]; distances: number[] } {
    const keys: number[] = [];
    const distances: number[] = [];
    if (!base || this.#baseSize - this.#dead.size <= 0) return { keys, distances };
    const dead = this.#dead;
    const most = Math.min(this.#baseSize, n + dead.size);
    let want = Math.min(most, n + Math.ceil((2 * n * dead.size) / this.#baseSize) + 16);
    for (;;) {
      keys.length = 0;
      distances.length = 0;
      const m = base.search(vector, want, 1) as Matches;
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

  /** The snapshot's index searching with expansion `ef` (the built one when `ef` is not below it). */
  #baseFor(ef: number): Index | null {
    const e = Math.max(1, Math.floor(ef));
    if (!this.#base || !this.#file || !(e < EXPANSION_SEARCH)) return this.#base;
    let view = this.#narrow.get(e);
    if (!view) {
      if (this.#narrow.size >= NARROW_VIEWS) return this.#base;
      try {
        view = newIndex(this.dims, e);
        view.view(this.#file);
        checkDims(view, this.dims, this.#file);
      } catch {
        // The file was swept after a newer snapshot (this index maps it still): the built expansion.
        view = this.#base;
      }
      this.#narrow.set(e, view);
    }
    return view;
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
 * nearest to `vector` by cosine, closest first: an exact search (usearch's SIMD kernel), on this
 * thread. 8 192 rows of 128 dims: ~0.2 ms on the bench machine (float32 rows: twice that).
 */
export function exactNearest(matrix: Int8Array, dims: number, vector: Float32Array, k: number): Int32Array {
  const n = Math.min(k, Math.floor(matrix.length / dims));
  if (n <= 0) return new Int32Array(0);
  const m = exactSearch(matrix, toInt8(vector), dims, n, MetricKind.Cos, 1) as Matches;
  return Int32Array.from(m.keys, Number);
}

/**
 * {@link exactNearest} with each row's cosine similarity to `vector` as the int8 search measured it
 * (1 − distance), closest first.
 */
export function exactNearestWithSimilarity(matrix: Int8Array, dims: number, vector: Float32Array, k: number): { rows: Int32Array; similarity: Float32Array } {
  const n = Math.min(k, Math.floor(matrix.length / dims));
  if (n <= 0) return { rows: new Int32Array(0), similarity: new Float32Array(0) };
  const m = exactSearch(matrix, toInt8(vector), dims, n, MetricKind.Cos, 1) as Matches;
  return { rows: Int32Array.from(m.keys, Number), similarity: Float32Array.from(m.distances, (d) => 1 - d) };
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

function checkDims(index: Index, dims: number, file: string): void {
  // usearch takes the dimensions from the file, whatever the index was created with.
  const got = Number(index.dimensions());
  if (got !== dims) throw new InternalError(`${file} holds ${got}-dimensional vectors, not ${dims}`);
}
