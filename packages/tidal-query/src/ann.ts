import { Index, MetricKind, ScalarKind, type Matches } from 'usearch';

/**
 * Approximate nearest neighbours over item embeddings (usearch HNSW, cosine). Keys are ordinals.
 * Each query worker holds its own index, filled from SQLite as the catalog refreshes.
 */
export class AnnIndex {
  readonly #index: Index;
  readonly dims: number;

  constructor(dims: number) {
    this.dims = dims;
    this.#index = new Index({
      dimensions: dims,
      metric: MetricKind.Cos,
      quantization: ScalarKind.F32,
      // connectivity 16 / expansion_add 128 / expansion_search 128: recall@10 above 0.95 on the
      // bench corpus (bench/ reports it) at under a millisecond per 500-candidate search.
      connectivity: 16,
      expansion_add: 128,
      expansion_search: 128,
      multi: false,
    });
  }

  get size(): number {
    return Number(this.#index.size());
  }

  /** Adds or replaces vectors. `vectors` holds `keys.length` rows of `dims` floats. */
  upsert(keys: number[], vectors: Float32Array): void {
    if (keys.length === 0) return;
    const replaced: bigint[] = [];
    for (const k of keys) if (this.#index.contains(BigInt(k))) replaced.push(BigInt(k));
    if (replaced.length > 0) this.#index.remove(BigUint64Array.from(replaced));
    // Big batches (a bulk load) use every core; small ones stay on this thread.
    this.#index.add(BigUint64Array.from(keys, BigInt), vectors, keys.length >= 1024 ? 0 : 1);
  }

  remove(key: number): void {
    if (this.#index.contains(BigInt(key))) this.#index.remove(BigInt(key));
  }

  /**
   * The `k` nearest keys to `vector`, closest first, with cosine similarity (1 − cosine distance).
   */
  search(vector: Float32Array, k: number): { keys: Int32Array; similarity: Float32Array } {
    const n = Math.min(k, this.size);
    if (n === 0) return { keys: new Int32Array(0), similarity: new Float32Array(0) };
    const m = this.#index.search(vector, n, 1) as Matches;
    const len = m.keys.length;
    const keys = new Int32Array(len);
    const similarity = new Float32Array(len);
    for (let i = 0; i < len; i++) {
      keys[i] = Number(m.keys[i]);
      similarity[i] = 1 - m.distances[i]!;
    }
    return { keys, similarity };
  }
}
