/**
 * The messages the main thread sends a query worker and what each returns: one map from op to
 * (task, result), so a caller gets the result type of the task it sent without casting. The
 * worker (worker.ts) dispatches on `op`; {@link runTask} is the one place the untyped value a
 * piscina pool resolves with becomes the result type of its task.
 */
import type { CatalogShareInit } from './shared/catalog-image.js';
import type { SharedVectorBuffers } from './shared/item-vectors.js';
import type { SignalArena } from './signals/store.js';
import type { QuerySchema, RetrieveTask, SearchTask, TaskEnvelope, WorkerRetrieveResult, WorkerSearchResult } from './types.js';

/** What every query worker is started with (piscina's `workerData`). */
export interface WorkerInit {
  file: string;
  schema: QuerySchema;
  arena: SignalArena;
  /**
   * {@link CANCEL_CELLS} Int32 cells, one per cancellable query in flight: the main thread sets a
   * query's cell when its caller aborted or timed out, and a worker that picks the query up skips
   * it. Only the main thread writes; a worker reads a cell once, before it runs the task.
   */
  cancel: SharedArrayBuffer;
  /**
   * The memory board (memory.ts): each query thread publishes the bytes of its catalogue, text
   * index and vectors and its heap there, at each warm and every {@link MEMORY_PUBLISH_TASKS}
   * queries it runs. Absent: nothing is published.
   */
  memory?: SharedArrayBuffer;
  /**
   * The nice value each worker thread sets for itself when it starts (0: the process's own). A
   * higher value lets the thread that posts the queries (and answers HTTP, in tidal serve) take a
   * core first when the machine is short of CPU. Linux only; elsewhere the worker reports why not.
   */
  nice?: number;
  /**
   * The database's `ann.backgroundRows`: a worker whose first task is not a warm (it replaces one
   * that died) maps the saved index, or searches exactly rather than build one larger than this in
   * a query. @default Infinity
   */
  annBackgroundRows?: number;
  /**
   * The int8 item vectors, once per process (shared/item-vectors.ts): every query thread reads
   * and keeps the same rows. Absent (no embeddings, or the platform could not reserve them): each
   * thread keeps rows of its own.
   */
  vectors?: SharedVectorBuffers;
  /**
   * The catalog images (shared/catalog-image.ts): one query thread reads the items and posts its
   * catalog and text index in shared memory, the others read that. Absent: each thread keeps its own.
   */
  catalogShare?: CatalogShareInit;
  /**
   * The process's native gate (native-gate.ts): an exiting process waits for this thread's calls
   * into usearch. Absent: ungated.
   */
  nativeGate?: SharedArrayBuffer | null;
  /**
   * Whatever the code that wraps this worker's entry needs (tidal-core's worker host: the database
   * link and the module to start); this package never reads it.
   */
  host?: unknown;
}

/**
 * Cancellable queries that can be in flight at once with a cell of their own. Above the admission
 * cap's default (256 on 2 cores) with room for a raised cap; a query beyond it still rejects on time
 * but is not skipped by the worker.
 */
export const CANCEL_CELLS = 4096;

/** Queries a thread runs between two publications of its memory figures (one costs a pass over the text index's terms). */
export const MEMORY_PUBLISH_TASKS = 1024;

/** A cell's value once its query was cancelled (0: runnable). */
export const CELL_CANCELLED = 1;

/** What a worker answers for a query whose cell said it was cancelled: it did not run. */
export interface SkippedResult {
  skipped: true;
}

/** Bytes of the SharedArrayBuffer a warm task needs: the ANN election (Int32 1–3; 0 is unused). */
export const WARM_SYNC_BYTES = 16;

export interface RetrieveMessage {
  op: 'retrieve';
  env: TaskEnvelope;
  task: RetrieveTask;
  /** The query's cancel cell (see {@link WorkerInit.cancel}), or -1 when it cannot be cancelled. */
  cell: number;
}

export interface SearchMessage {
  op: 'search';
  env: TaskEnvelope;
  task: SearchTask;
  /** The query's cancel cell (see {@link WorkerInit.cancel}), or -1 when it cannot be cancelled. */
  cell: number;
}

/**
 * Several queries in one message, so one round trip to the worker carries them all. Each keeps its
 * own envelope (level, clock, items version) and cancel cell; the worker runs them in order and
 * answers one entry per query, in the same order.
 */
export interface BatchMessage {
  op: 'batch';
  queries: (RetrieveMessage | SearchMessage)[];
}

/** A query of a batch that threw: the error, as the worker caught it (structured-cloned). */
export interface FailedResult {
  failed: unknown;
}

/** One entry of a batch's answer, for the query at the same position. */
export type BatchEntryResult = WorkerRetrieveResult | WorkerSearchResult | SkippedResult | FailedResult;

export interface WarmMessage {
  op: 'warm';
  env: TaskEnvelope;
  /**
   * {@link WARM_SYNC_BYTES} bytes, zeroed, shared by every warm task of one warm(): Int32 1–3
   * carry the ANN build election and its outcome.
   */
  barrier: SharedArrayBuffer;
  /**
   * When the elected worker builds the ANN index itself and when it leaves the build to a thread of
   * its own (ann-builder.ts): above `backgroundRows` rows to add, or whenever such a build is
   * `running` (then only that thread writes snapshots).
   */
  annBuild: { backgroundRows: number; running: boolean };
}

export interface PersistAnnMessage {
  op: 'persist-ann';
  env: TaskEnvelope;
  /** Give up (saving nothing) once this much time has gone, checked between batches. */
  budgetMs: number;
}

/**
 * Fault injection, for the write-path and pool fault tests only: `exit` ends the worker thread
 * with `process.exit(1)` (a real crash, after which piscina starts a replacement), `throw` fails
 * the task with a plain `Error`, `block` holds the worker until the test opens the gate (so a test
 * can queue tasks behind it and decide, without timing, what happens while they wait). Only the internal query pool can send it; no public method of
 * the database builds one.
 */
export type FaultMessage =
  | { op: 'fault'; mode: 'exit' | 'throw' }
  /** Holds the worker (its event loop included) until Int32 0 of `gate` is non-zero. */
  | { op: 'fault'; mode: 'block'; gate: SharedArrayBuffer };

/** Where the ANN index came from in a warm. */
export type AnnSource =
  /** Built from the items table: there was no usable snapshot. */
  | 'built'
  /** A snapshot saved earlier (by a previous open, warm or close) was mapped, plus the rows after it. */
  | 'snapshot'
  /** No item has an embedding. */
  | 'none'
  /** The elected worker failed or timed out, so each worker built its own from the items table. */
  | 'fallback'
  /**
   * Being built on a thread of its own (too many rows to add for a warm to wait): vector searches
   * are exact (`explain.vectorSearch: 'exact'`) until the next warm adopts it.
   */
  | 'building';

/** A warning the main thread should raise (workers cannot reach its `process` listeners). */
export interface AnnWarning {
  code: 'TIDAL_ANN_SNAPSHOT_REBUILT' | 'TIDAL_ANN_SNAPSHOT_UNSAVED';
  message: string;
}

/** A catalog snapshot a worker found damaged or inconsistent with the items table (and read the table instead). */
export interface CatalogWarning {
  code: 'TIDAL_CATALOG_SNAPSHOT_UNUSABLE';
  message: string;
}

/** A worker that could not set the nice value it was asked for (see {@link WorkerInit.nice}). */
export interface NiceWarning {
  code: 'TIDAL_WORKER_NICE_UNSET';
  message: string;
}

/** What one worker reports from a warm task. */
export interface WarmResult {
  /** The worker thread that ran this warm task. */
  threadId: number;
  threadItems: number;
  annSize: number;
  refreshedRows: number;
  /**
   * Of those rows, how many the warm read an embedding of: only the rows whose int8 vector this
   * worker wrote (the first thread to sync them) or whose embedding its ANN index took in.
   */
  refreshedEmbeddings: number;
  /**
   * The items version of the catalog snapshot (catalog-snapshot.ts) or catalog image
   * (shared/catalog-image.ts) this worker's first sync loaded: the rows up to it came from there,
   * the rows after it from the items table. 0 when the first sync read every row from the table.
   */
  catalogSnapshotVersion: number;
  /**
   * Where this worker's first sync took its catalog from: `'rows'` (every row read from the items
   * table), `'snapshot'` (the snapshot file) or `'image'` (a catalog image another thread posted).
   */
  catalogSource: 'rows' | 'snapshot' | 'image';
  /** Set by the warm whose sync found the catalog snapshot unusable (the main thread raises it once per warm). */
  catalogWarning?: CatalogWarning;
  /**
   * Where this worker's ANN index came from, as the warm that last replaced it found (a warm that
   * leaves the index as it was repeats the earlier answer). The same on every worker after a warm.
   */
  annSource: AnnSource;
  /** The items version the snapshot this worker maps covers (0 without one). */
  annSnapshotVersion: number;
  /**
   * Item rows newer than the stored snapshot that this worker's index took in: those the elected
   * worker folded into a refreshed snapshot plus those this worker applied on top of it.
   */
  annRowsApplied: number;
  /** Whether this worker was the elected one (built, loaded or checked the snapshot). */
  annElected: boolean;
  /** Set on the elected worker only, so the main thread raises it once per warm. */
  annWarning?: AnnWarning;
  /**
   * Structures this warm built from scratch in this worker that a query would otherwise build on
   * first use: the created order, the creator lists, the int8 item vectors, the popular subset (a
   * warm with nothing new to build reports 0; see `explain.lazyBuilds`).
   */
  structuresBuilt: number;
  /** Text terms whose block summaries this warm computed (a term's first search would have). */
  termsSummarized: number;
  /** Queries this warm ran once each and threw away (each profile at Full, the three searches), so V8 compiles them first. */
  pathsRun: number;
  /**
   * Milliseconds this warm spent per step in this worker: `sync` (the ANN election and the catalog
   * read: item rows, the text index, the int8 vectors, the index catch-up), `structures` (the
   * orders, creator lists and popular subset), `terms` (text block summaries), `paths` (the
   * compiling queries).
   */
  stepsMs: { sync: number; structures: number; terms: number; paths: number };
  /** This worker thread's nice value, as the kernel reports it. */
  nice: number;
  /** Set when the thread could not take the nice value it was asked for. */
  niceWarning?: NiceWarning;
  /** This worker thread's young generation limit in MiB, as its `resourceLimits` say (V8's own when not capped). */
  youngGenerationMb: number;
}

/** What a persist-ann task did. */
export interface PersistAnnResult {
  /** The version the saved snapshot covers, or null when nothing was saved. */
  savedVersion: number | null;
  reason: 'saved' | 'unchanged' | 'no-index' | 'budget';
  /** The version the saved catalog snapshot reflects, or null when none was saved (see `AnnLifecycle.persist`). */
  catalogSavedVersion: number | null;
}

/** Every worker op: the message that asks for it and what the worker resolves it with. */
export interface WorkerProtocol {
  retrieve: { task: RetrieveMessage; result: WorkerRetrieveResult | SkippedResult };
  search: { task: SearchMessage; result: WorkerSearchResult | SkippedResult };
  batch: { task: BatchMessage; result: BatchEntryResult[] };
  warm: { task: WarmMessage; result: WarmResult };
  'persist-ann': { task: PersistAnnMessage; result: PersistAnnResult };
  /** `block` resolves with nothing once the gate opens; the others fail (or their worker dies). */
  fault: { task: FaultMessage; result: null };
}

export type WorkerOp = keyof WorkerProtocol;
/**
 * The message for one op. The `& { op: Op }` restates what each message already says, so that
 * TypeScript can infer `Op` from a message literal's `op`.
 */
export type TaskOf<Op extends WorkerOp> = WorkerProtocol[Op]['task'] & { op: Op };
/** What the worker resolves one op's task with. */
export type ResultOf<Op extends WorkerOp> = WorkerProtocol[Op]['result'];
/** Any message a worker accepts. */
export type WorkerTask = WorkerProtocol[WorkerOp]['task'];
/** Any value a worker resolves a task with. */
export type WorkerResult = ResultOf<WorkerOp>;

/** Options passed through to the pool's `run` (piscina's `RunOptions` accepts these). */
export interface TaskRunOptions {
  /** Aborting it removes a queued task from the queue, or ends the worker running it. */
  signal?: AbortSignal | null;
}

/** The part of a piscina pool {@link runTask} uses; a `Piscina` (of any task type) is one. */
export interface TaskPool {
  run(task: WorkerTask, options?: TaskRunOptions): Promise<unknown>;
}

/**
 * Runs one task on `pool` and resolves with that op's result type:
 * `runTask(pool, { op: 'warm', env, barrier })` is a `Promise<WarmResult>`. A generic caller
 * passes its own op through: `runTask<Op>(pool, msg)` with `msg: TaskOf<Op>`.
 */
export function runTask<Op extends WorkerOp>(pool: TaskPool, task: TaskOf<Op>, options?: TaskRunOptions): Promise<ResultOf<Op>> {
  // The protocol's one cast: the worker's dispatch answers each op with ResultOf<that op> (its
  // handlers are typed by this map), and structured cloning keeps the shape.
  return pool.run(task, options) as Promise<ResultOf<Op>>;
}
