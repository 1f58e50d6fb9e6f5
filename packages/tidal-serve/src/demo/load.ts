import type { TidalDb } from 'tidal-core';
import { Corpus } from './corpus.js';

/** How {@link loadDemo} fills a database. */
export interface DemoOptions {
  /** Items to generate. @default 20000 */
  readonly items?: number;
  /** Embedding length; the schema the database was opened with must say the same. @default 128 */
  readonly dims?: number;
  /** @default 42 */
  readonly seed?: number;
  /**
   * The moment every timestamp of the corpus is relative to. Default: now on the wall clock, so the
   * corpus's last hour is the real last hour and `trending` has something to rank.
   */
  readonly now?: number;
  /** Items per `upsertItems` call and signals per `signals` call. @default 1000 */
  readonly batchSize?: number;
  /** Called after every batch with what is loaded so far. */
  readonly onProgress?: (progress: DemoProgress) => void;
}

export interface DemoProgress {
  readonly phase: 'items' | 'signals';
  readonly done: number;
  readonly total: number;
}

export const DEMO_DEFAULTS = Object.freeze({ items: 20_000, dims: 128, seed: 42, batchSize: 1000 });

/**
 * Loads the synthetic corpus (items, then their view and like signals) into `db` and warms its
 * workers. Resolves with the corpus, so a caller can draw queries that fit it.
 */
export async function loadDemo(db: TidalDb, options: DemoOptions = {}): Promise<Corpus> {
  const corpus = new Corpus({
    items: options.items ?? DEMO_DEFAULTS.items,
    dims: options.dims ?? DEMO_DEFAULTS.dims,
    seed: options.seed ?? DEMO_DEFAULTS.seed,
    now: options.now ?? Date.now(),
  });
  const batch = options.batchSize ?? DEMO_DEFAULTS.batchSize;
  const report = options.onProgress ?? (() => {});
  let done = 0;
  for (const items of corpus.items(batch)) {
    await db.upsertItems(items);
    done += items.length;
    report({ phase: 'items', done, total: corpus.size });
  }
  const total = corpus.signalSummary().total;
  done = 0;
  for (const signals of corpus.signalBatches(batch)) {
    await db.signals(signals);
    done += signals.length;
    report({ phase: 'signals', done, total });
  }
  await db.warm();
  return corpus;
}
