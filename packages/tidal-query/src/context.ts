import type Database from 'better-sqlite3';
import type { Catalog } from './catalog.js';
import type { SignalStore } from './signals/store.js';
import type { QuerySchema } from './types.js';

/**
 * A nearest-neighbour search over the items' embeddings: the ANN index (`AnnIndex`), or, while that
 * is being built on its own thread, an exact search over every item's int8 vector (`ExactVectors`).
 */
export interface VectorSearcher {
  readonly dims: number;
  /** Live vectors searched. */
  readonly size: number;
  /** `ann`: approximate (HNSW); `exact`: every vector compared, as the index's answers are measured against. */
  readonly method: 'ann' | 'exact';
  /**
   * The `k` nearest keys (ordinals) to `vector`, closest first, with their cosine similarity.
   * `breadth`: the candidates an approximate search considers (ignored by an exact one).
   */
  search(vector: Float32Array, k: number, breadth?: number): { keys: Int32Array; similarity: Float32Array };
}

/** What an executor reads: one worker's catalog, vector search, connection and the shared signals. */
export interface QueryContext {
  readonly schema: QuerySchema;
  readonly catalog: Catalog;
  readonly store: SignalStore;
  readonly ann: VectorSearcher | null;
  readonly db: Database.Database;
}

/** Where a query counts the work it does: signal slots whose values it read. */
export interface WorkCounter {
  slots: number;
}

/**
 * Sum of decayed scores over every kind: the item's popularity. `work.slots` grows by the slots
 * read. Summed in kind order, so every caller gets the same bits for the same item.
 */
export function popularity(ctx: QueryContext, ordinal: number, nowMs: number, work?: WorkCounter): number {
  let sum = 0;
  for (let k = 0; k < ctx.schema.kinds.length; k++) {
    const slot = ctx.store.slotOf(ordinal, k);
    if (slot < 0) continue;
    sum += ctx.store.decayedScore(slot, nowMs);
    if (work) work.slots++;
  }
  return sum;
}

/**
 * Sum of velocities over the kinds that track velocity (with `coarse`, the store's coarse
 * velocity: the 24h count, whatever `window` says).
 */
export function velocityOf(
  ctx: QueryContext,
  ordinal: number,
  window: '1h' | '24h' | '7d',
  nowMs: number,
  coarse: boolean,
  work?: WorkCounter,
): number {
  let sum = 0;
  const kinds = ctx.schema.kinds;
  for (let k = 0; k < kinds.length; k++) {
    if (!kinds[k]!.velocity) continue;
    const slot = ctx.store.slotOf(ordinal, k);
    if (slot < 0) continue;
    sum += ctx.store.velocity(slot, window, nowMs, coarse);
    if (work) work.slots++;
  }
  return sum;
}
