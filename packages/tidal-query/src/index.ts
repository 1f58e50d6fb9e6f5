export { RetrieveExecutor } from './retrieve.js';
export { FEED_CANDIDATE_BUDGET, FOR_YOU_BUDGETS, forYouBudgetAt, levelPlan, tunedPlan } from './plan.js';
export type { ForYouBudget, LevelPlan, PlanOverrides } from './plan.js';
export { ftsQuery } from './search.js';
export { TextIndex } from './text/text-index.js';
export { searchTopK } from './text/top-k.js';
export { queryTerms } from './text/tokenizer.js';
export { Catalog } from './catalog.js';
export { buildCreatorLists, creatorListsOf } from './profiles/creator-lists.js';
export { readItemSignals } from './item-signals.js';
export { AnnIndex, cosine, exactNearestOnScale, exactNearestWithSimilarity, toCommonScale, toInt8 } from './ann.js';
export { RETRIEVE_TASK_KEYS, SEARCH_TASK_KEYS } from './warm-paths.js';
export { ItemsWriter, blobToVector } from './items-table.js';
export type { StoredItem } from './items-table.js';
export { SignalStore, SLOT_BYTES, SLOT_LAYOUT } from './signals/store.js';
export { MAX_EVENT_MS } from './signals/layout.js';
export type { SignalArena, SignalKindSpec, SignalValues, WindowName } from './signals/store.js';
export type { QueryContext, VectorSearcher } from './context.js';
export { WARM_SYNC_BYTES, CANCEL_CELLS, CELL_CANCELLED, runTask } from './protocol.js';
export { unpackAnswer, type PackedRows } from './packed-rows.js';
export type {
  AnnSource,
  AnnWarning,
  BatchEntryResult,
  ResultOf,
  RetrieveMessage,
  SearchMessage,
  SkippedResult,
  TaskOf,
  WarmMessage,
  WarmResult,
  WorkerInit,
  WorkerOp,
  WorkerResult,
  WorkerTask,
} from './protocol.js';
export type * from './types.js';

/** The piscina worker entry, as a file URL string. */
export const WORKER_FILENAME = new URL('./worker.js', import.meta.url).href;
/** The ANN builder thread's entry (see ann-builder.ts), for `new Worker(new URL(...))`. */
export const ANN_BUILDER_FILENAME = new URL('./ann-builder.js', import.meta.url).href;
export type { AnnBuilderInit, AnnBuilderMessage } from './ann-builder.js';
export { AnnGate } from './ann-build-gate.js';
export { nativeGateCells, processNativeGate } from './native-gate.js';
export { ExactVectors } from './exact-vectors.js';
export { FOR_YOU_WEIGHTS, FOR_YOU_EXPLORE, RECENCY_HALF_LIFE_MS } from './profiles/for-you.js';
export { hashString } from './user-state.js';
export { HOT_GRAVITY } from './profiles/hot-top.js';
export { RISING_BASELINE } from './profiles/rising.js';
export { createMemoryBoard, readMemoryBoard } from './memory.js';
export type { ThreadMemory } from './memory.js';
export { createSharedVectors, sharedVectorBytes, sharedVectorRows } from './shared/item-vectors.js';
export type { SharedVectorBuffers } from './shared/item-vectors.js';
export { CatalogShare, createCatalogShare, readCatalogImage, SHARE_MIN_ROWS, writeCatalogImage } from './shared/catalog-image.js';
export type { CatalogShareInit } from './shared/catalog-image.js';
export { SharedRecordsReader, SharedRecordsWriter, hashBytes, sharedRecordRetries } from './shared/records.js';
export type { FoundRecord, SharedRecordsBuffers, SharedRecordsStats } from './shared/records.js';
export {
  decodeRelated,
  decodeSession,
  decodeUserRecord,
  decodeUserState,
  decayedAffinities,
  encodeRelated,
  encodeSession,
  encodeUserState,
} from './shared/state-records.js';
export type { SessionRecord, UserRecord } from './shared/state-records.js';
