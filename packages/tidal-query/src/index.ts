export { RetrieveExecutor } from './retrieve.js';
export type { RetrieveExecutorOptions } from './retrieve.js';
export { FEED_CANDIDATE_BUDGET, FOR_YOU_BUDGETS, FULL_PLAN, LEVEL_PLANS, levelPlan, tunedPlan } from './plan.js';
export type { AnnPlan, ContextPlan, DiversityPlan, FeedsPlan, ForYouBudget, ForYouPlan, LevelPlan, PlanOverrides, TextPlan, TrendingPlan, WindowsPlan } from './plan.js';
export { SearchExecutor, ftsQuery, RRF_K, BM25_CANDIDATES, NO_DIVERSITY_POSTINGS_BUDGET } from './search.js';
export { TextIndex, BLOCK_SIZE } from './text/text-index.js';
export type { TextIndexStats } from './text/text-index.js';
export { searchTopK } from './text/top-k.js';
export type { TextSearchOptions, TextTopK } from './text/top-k.js';
export { tokenize, queryTerms } from './text/tokenizer.js';
export { Catalog } from './catalog.js';
export { buildCreatorLists, creatorListsOf } from './profiles/creator-lists.js';
export type { CreatorLists } from './profiles/creator-lists.js';
export { compileFilter } from './filter.js';
export { diversify } from './diversity.js';
export { readItemSignals } from './item-signals.js';
export { AnnIndex } from './ann.js';
export { TopK } from './topk.js';
export { ItemsWriter, rowToItem, blobToVector } from './items-table.js';
export type { StoredItem, ItemRow } from './items-table.js';
export { SignalStore, SLOT_BYTES } from './signals/store.js';
export { MAX_EVENT_MS } from './signals/layout.js';
export type { SignalArena, SignalKindSpec, SignalValues, WindowName } from './signals/store.js';
export type { QueryContext } from './context.js';
export { WARM_SYNC_BYTES, CANCEL_CELLS, CELL_CANCELLED, runTask } from './protocol.js';
export type {
  AnnSource,
  AnnWarning,
  NiceWarning,
  BatchEntryResult,
  BatchMessage,
  FailedResult,
  FaultMessage,
  PersistAnnMessage,
  PersistAnnResult,
  ResultOf,
  RetrieveMessage,
  SearchMessage,
  SkippedResult,
  TaskOf,
  TaskPool,
  TaskRunOptions,
  WarmMessage,
  WarmResult,
  WorkerInit,
  WorkerOp,
  WorkerProtocol,
  WorkerResult,
  WorkerTask,
} from './protocol.js';
export type * from './types.js';

/** The piscina worker entry, as a file URL string. */
export const WORKER_FILENAME = new URL('./worker.js', import.meta.url).href;
export { FOR_YOU_WEIGHTS, FOR_YOU_EXPLORE, RECENCY_HALF_LIFE_MS } from './profiles/for-you.js';
export { TrendingCache } from './profiles/trending-cache.js';
export { hashString } from './user-state.js';
export { HOT_GRAVITY, TOP_WINDOW_MS } from './profiles/hot-top.js';
export { RISING_BASELINE } from './profiles/rising.js';
