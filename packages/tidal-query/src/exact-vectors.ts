import { exactNearestWithSimilarity } from './ann.js';
import type { VectorSearcher } from './context.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';
import { copyRows } from './shared/item-vectors.js';

/**
 * Bytes of int8 rows the search copies out of shared memory at a time (usearch reads no shared
 * memory). At 100 000 × 128, side by side with the single call over private rows: 1 MiB chunks
 * 2.3–2.5× its time, 4 MiB ones 1.7–3.1× (load average 15–17).
 */
const CHUNK_BYTES = 1 << 22;

/**
 * The vector search a worker answers with while its ANN index is being built on its own thread:
 * every item's int8 vector (the rows the catalog sync keeps, see `keptItemVectors`) compared with
 * the query by usearch's exact SIMD kernel. Exact, so its answers are what the index's recall is
 * measured against; its cost grows with the catalogue (one pass over `items × dims` bytes: about
 * 2 ms at 100 000 × 128, 75–190 ms at 1 000 000 on the bench machine), where the index's does not.
 * The rows live in shared memory, which usearch does not read: they are copied, whole rows (see
 * `copyRows`), a chunk of {@link CHUNK_BYTES} at a time into this thread's scratch (allocated on
 * its first exact search), searched there, and the chunks' nearest merged.
 */
export class ExactVectors implements VectorSearcher {
  readonly method = 'exact';
  readonly dims: number;
  readonly #vectors: Int8Vectors;
  #scratch: { rows: Int8Array; norms: Float32Array; seqs: Int32Array } | null = null;

  constructor(dims: number, vectors: Int8Vectors) {
    this.dims = dims;
    this.#vectors = vectors;
  }

  get size(): number {
    return this.#vectors.live;
  }

  /** Lets the scratch go (the ANN index answers now); the next exact search allocates it again. */
  release(): void {
    this.#scratch = null;
  }

  search(vector: Float32Array, k: number): { keys: Int32Array; similarity: Float32Array } {
    const v = this.#vectors;
    const dims = this.dims;
    const n = Math.min(k, v.live);
    if (n <= 0) return { keys: new Int32Array(0), similarity: new Float32Array(0) };
    const chunk = Math.max(1, Math.floor(CHUNK_BYTES / dims));
    const s = (this.#scratch ??= { rows: new Int8Array(chunk * dims), norms: new Float32Array(chunk), seqs: new Int32Array(chunk) });
    const extent = Math.min(v.extent, v.inverseNorms.length);
    const keys: number[] = [];
    const sims: number[] = [];
    for (let from = 0; from < extent; from += chunk) {
      const to = Math.min(extent, from + chunk);
      const rows = to - from;
      copyRows(v.store, from, to, s.rows, s.norms, s.seqs);
      let empty = 0;
      for (let i = 0; i < rows; i++) if (s.norms[i] === 0) empty++;
      if (empty === rows) continue;
      // Rows without a vector are zero and may sort anywhere: asking for as many more as there are
      // of them leaves at least `n` live rows of the chunk in its answer.
      const found = exactNearestWithSimilarity(s.rows.subarray(0, rows * dims), dims, vector, Math.min(rows, n + empty));
      let m = 0;
      for (let i = 0; i < found.rows.length && m < n; i++) {
        const r = found.rows[i]!;
        if (s.norms[r] === 0) continue;
        keys.push(from + r);
        sims.push(found.similarity[i]!);
        m++;
      }
    }
    const order = Array.from(keys.keys()).sort((a, b) => sims[b]! - sims[a]! || keys[a]! - keys[b]!);
    const m = Math.min(n, order.length);
    const outKeys = new Int32Array(m);
    const similarity = new Float32Array(m);
    for (let i = 0; i < m; i++) {
      outKeys[i] = keys[order[i]!]!;
      similarity[i] = sims[order[i]!]!;
    }
    return { keys: outKeys, similarity };
  }
}
