import type Database from 'better-sqlite3';
import type { DegradationLevel } from 'tidal-load';
import { DeferredSignals, ItemColumns, RetrieveExecutor, type QuerySchema, type RetrieveTask, type SignalStore, type WorkerRetrieveResult } from 'tidal-query';

/**
 * Profile `related` served on the main thread. Its candidates are the co-engagement list the main
 * thread holds (at most 32 partners), so the whole ranking is microseconds of work; what the query
 * paid through a worker was the round trip (measured at 100 000 items, `bench:personalization`:
 * 0.66 ms at the caller for 0.085 ms of worker time). Here the executor a worker runs ranks it, over the main thread's signal
 * store and a copy of the item columns read from the writer connection ({@link ItemColumns}), so
 * filters, hard negatives, user filters, cursors, diversity and `explain` are the workers' own.
 * The returned items' `signals` are read on first access (see {@link DeferredSignals}): reading
 * them was most of a query's cost (profile in `bench/src/related-cost.ts`).
 *
 * The columns are built on first use (or by `warm`): one pass over the items table; every later
 * query pulls only the rows changed since.
 */
export class RelatedQuery {
  readonly #columns: ItemColumns;
  readonly #executor: RetrieveExecutor;
  readonly #deferred: DeferredSignals;

  constructor(db: Database.Database, schema: QuerySchema, store: SignalStore) {
    this.#columns = new ItemColumns(db, schema);
    this.#deferred = new DeferredSignals({ store, schema });
    this.#executor = new RetrieveExecutor({ schema, catalog: this.#columns.asCatalog(), store, ann: null, db }, { deferredSignals: this.#deferred });
  }

  /**
   * Reads the signal values of the results still deferred (see {@link DeferredSignals}): the
   * write path calls it before it applies signals to the store, so a result's `signals` read
   * later are the ones of its query.
   */
  settle(): void {
    this.#deferred.settle();
  }

  /** Brings the item columns up to the committed items (`itemsVersion`). */
  sync(itemsVersion: number): void {
    this.#columns.syncTo(itemsVersion);
  }

  /**
   * Ranks a validated `related` task at `level` as of `nowMs`, seeing every item write up to
   * `itemsVersion`; `picked` receives the returned items' ordinals (for the next cursor).
   */
  run(task: RetrieveTask, level: DegradationLevel, nowMs: number, itemsVersion: number, picked: number[]): Omit<WorkerRetrieveResult, 'serviceMs'> {
    this.#columns.syncTo(itemsVersion);
    return this.#executor.run(task, level, nowMs, picked);
  }
}
