import type { VectorSearcher } from '../context.js';

/** Users whose neighbours a thread keeps: 16 384 × 64 neighbours is 4 MiB of keys. */
export const NEIGHBOUR_CACHE_USERS = 16_384;

/**
 * How long a user's graph neighbours stand for them at a level that reuses them. A preference
 * moves with each signal naming the user, a little at a time; the neighbours are only candidates
 * (each is scored against the preference of the query), so neighbours of a slightly older
 * preference cost a feed little, where a graph search costs a NoDiversity query most of its time.
 */
export const NEIGHBOUR_TTL_MS = 60_000;

/** Sign bits of the preference's first 32 components that may differ from the cached entry's. */
const FINGERPRINT_SLACK = 4;

interface Entry {
  keys: Int32Array;
  ann: VectorSearcher;
  fingerprint: number;
  atMs: number;
}

/** The sign bits of `v`'s first 32 components: neighbours of a moved preference keep most of them. */
function fingerprint(v: Float32Array): number {
  let f = 0;
  for (let i = 0; i < 32 && i < v.length; i++) if (v[i]! > 0) f |= 1 << i;
  return f;
}

function bitCount(x: number): number {
  let n = 0;
  for (let v = x; v !== 0; v &= v - 1) n++;
  return n;
}

/**
 * `for_you`'s graph neighbours of each user a thread last searched for, kept for
 * {@link NEIGHBOUR_TTL_MS} by the query's clock: a level whose plan says `reuseNeighbours` takes
 * them instead of searching (see `ForYouPlan.reuseNeighbours`). Keyed by the user's id hash and
 * checked against a fingerprint of the preference (its first 32 components' signs), so another
 * user of the same hash, or a preference that moved far, is a miss; and against the ANN index
 * they came from (a new index is a miss). At most {@link NEIGHBOUR_CACHE_USERS} users, the
 * oldest written first out. One per query thread: a thread runs one query at a time.
 */
export class NeighbourCache {
  readonly #entries = new Map<number, Entry>();
  readonly #max: number;
  hits = 0;
  misses = 0;

  constructor(max = NEIGHBOUR_CACHE_USERS) {
    this.#max = max;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The neighbours kept for the user, nearest first, or null (none, too old, another index or preference). */
  get(idHash: number, preference: Float32Array, ann: VectorSearcher, nowMs: number): Int32Array | null {
    const e = this.#entries.get(idHash);
    if (
      !e ||
      e.ann !== ann ||
      nowMs - e.atMs > NEIGHBOUR_TTL_MS ||
      nowMs < e.atMs ||
      bitCount(e.fingerprint ^ fingerprint(preference)) > FINGERPRINT_SLACK
    ) {
      this.misses++;
      return null;
    }
    this.hits++;
    return e.keys;
  }

  /** Keeps `keys` (nearest first) as the user's neighbours at `nowMs`. */
  set(idHash: number, preference: Float32Array, ann: VectorSearcher, keys: Int32Array, nowMs: number): void {
    const entries = this.#entries;
    entries.delete(idHash);
    if (entries.size >= this.#max) entries.delete(entries.keys().next().value!);
    entries.set(idHash, { keys, ann, fingerprint: fingerprint(preference), atMs: nowMs });
  }

  /** Bytes of the kept keys. */
  get bytes(): number {
    let n = 0;
    for (const e of this.#entries.values()) n += e.keys.byteLength;
    return n;
  }
}
