import { exactNearestWithSimilarity } from './ann.js';
import type { VectorSearcher } from './context.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';

/**
 * The vector search a worker answers with while its ANN index is being built on its own thread:
 * every item's int8 vector (the copy the catalog sync keeps, see `keptItemVectors`) compared with
 * the query by usearch's exact SIMD kernel. Exact, so its answers are what the index's recall is
 * measured against; its cost grows with the catalogue (one pass over `items × dims` bytes: about
 * 2 ms at 100 000 × 128, 75–190 ms at 1 000 000 on the bench machine), where the index's does not.
 */
export class ExactVectors implements VectorSearcher {
  readonly method = 'exact';
  readonly dims: number;
  readonly #vectors: Int8Vectors;

  constructor(dims: number, vectors: Int8Vectors) {
    this.dims = dims;
    this.#vectors = vectors;
  }

  get size(): number {
    return this.#vectors.live;
  }

  search(vector: Float32Array, k: number): { keys: Int32Array; similarity: Float32Array } {
    const v = this.#vectors;
    const n = Math.min(k, v.live);
    if (n <= 0) return { keys: new Int32Array(0), similarity: new Float32Array(0) };
    // Rows without a vector are zero and may sort anywhere: asking for as many more as there are
    // of them leaves at least `n` live rows in the answer, at the cost of a longer heap only.
    const empty = v.extent - v.live;
    const found = exactNearestWithSimilarity(v.rows.subarray(0, v.extent * this.dims), this.dims, vector, n + empty);
    const keys = new Int32Array(n);
    const similarity = new Float32Array(n);
    let m = 0;
    for (let i = 0; i < found.rows.length && m < n; i++) {
      const o = found.rows[i]!;
      if (v.inverseNorms[o] === 0) continue;
      keys[m] = o;
      similarity[m++] = found.similarity[i]!;
    }
    return m === n ? { keys, similarity } : { keys: keys.subarray(0, m), similarity: similarity.subarray(0, m) };
  }
}
