/**
 * The query worker entry (a piscina worker). Each worker opens its own read-only SQLite connection,
 * keeps a columnar catalog and an ANN index of the items, and maps the shared signal state. Before a
 * query runs, the worker pulls the item rows committed since it last looked, so a query sees every
 * write acknowledged before it started. The messages and their results are in protocol.ts; the
 * sync and the ANN index's snapshot and catch-up in ann-lifecycle.ts, its election in ann-election.ts.
 */
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { resourceLimits, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { STAGE, STAGE_TIMES_ON, stageAdd, stageEnd, stageStart, stageTotal } from 'tidal-load';
import { AnnLifecycle, type AnnContext } from './ann-lifecycle.js';
import { Catalog } from './catalog.js';
import {
  CELL_CANCELLED,
  MEMORY_PUBLISH_TASKS,
  type BatchEntryResult,
  type NiceWarning,
  type BatchMessage,
  type FaultMessage,
  type ResultOf,
  type RetrieveMessage,
  type SearchMessage,
  type SkippedResult,
  type WorkerInit,
  type WorkerResult,
  type WorkerTask,
} from './protocol.js';
import { adoptNativeGate } from './native-gate.js';
import { applyNice } from './nice.js';
import { MemoryBoardWriter, measureThread } from './memory.js';
import { spliceSignals } from './item-signals.js';
import { packAnswer } from './packed-rows.js';
import { levelPlan } from './plan.js';
import { RetrieveExecutor } from './retrieve.js';
import { SearchExecutor } from './search.js';
import { CatalogShare } from './shared/catalog-image.js';
import { checkSharedVectors } from './shared/item-vectors.js';
import { SignalStore } from './signals/store.js';
import { exercisePaths } from './warm-paths.js';

interface State {
  retrieve: RetrieveExecutor;
  search: SearchExecutor;
  items: AnnLifecycle;
  ctx: AnnContext;
  cancel: Int32Array;
  /** This thread's slot on the memory board, if the database gave one. */
  memory: MemoryBoardWriter | null;
  /** Queries run since the memory figures were last published. */
  sincePublished: number;
  /** This thread's nice value after init, and why it is not the one asked for, if it is not. */
  nice: number;
  niceWarning?: NiceWarning;
}

let state: State | undefined;

function init(): State {
  const { file, schema, arena, cancel, memory, nice = 0, annBackgroundRows, vectors, catalogShare, nativeGate } = workerData as WorkerInit;
  adoptNativeGate(nativeGate);
  const priority = applyNice(nice);
  const db = new Database(file, { readonly: true, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  // The worker reads the items table only to sync its catalog (sequentially, by version): SQLite's
  // page cache earns nothing there. 2 MiB instead of better-sqlite3's 16: about 30 MiB less RSS with
  // two workers at 100 000 items (the memory suite).
  db.pragma('cache_size = -2000');
  const catalog = new Catalog(db, schema);
  const store = SignalStore.attach(arena, [...schema.kinds]);
  const ctx: AnnContext = { schema, catalog, store, ann: null, db };
  return {
    retrieve: new RetrieveExecutor(ctx),
    search: new SearchExecutor(ctx),
    items: new AnnLifecycle(
      db,
      catalog,
      ctx,
      dirname(file),
      annBackgroundRows,
      vectors ? checkSharedVectors(vectors, schema.embeddingDims) : null,
      catalogShare ? new CatalogShare(catalogShare) : null,
    ),
    ctx,
    cancel: new Int32Array(cancel),
    memory: memory ? new MemoryBoardWriter(memory) : null,
    sincePublished: 0,
    ...priority,
  };
}

/** Whether the caller gave up on the query before this worker got to it (see WorkerInit.cancel). */
function cancelled(s: State, cell: number): boolean {
  return cell >= 0 && Atomics.load(s.cancel, cell) === CELL_CANCELLED;
}

/** Publishes this thread's memory figures (see WorkerInit.memory). */
function publishMemory(s: State): void {
  s.sincePublished = 0;
  s.memory?.publish(measureThread(s.ctx.catalog, s.retrieve.subsetBytes, s.items.image));
}

/** Counts a query run; every {@link MEMORY_PUBLISH_TASKS}th publishes the memory figures. */
function ran(s: State): void {
  if (++s.sincePublished >= MEMORY_PUBLISH_TASKS) publishMemory(s);
}

const SKIPPED: SkippedResult = Object.freeze({ skipped: true });

/** The executor's stage time (see tidal-load's stage-times.ts): its run less the hydration inside it. */
const STAGES_OFF = Object.freeze({ t: 0, hydration: 0 });

function executorStart(): { t: number; hydration: number } {
  if (!STAGE_TIMES_ON) return STAGES_OFF;
  return { t: stageStart(), hydration: STAGE_TIMES_ON ? stageTotal(STAGE.hydration) : 0 };
}

function executorEnd(started: { t: number; hydration: number }): void {
  if (!STAGE_TIMES_ON) return;
  stageEnd(STAGE.executor, started.t);
  stageAdd(STAGE.executor, started.hydration - stageTotal(STAGE.hydration));
}

function retrieve(s: State, msg: RetrieveMessage, started: number): ResultOf<'retrieve'> {
  if (cancelled(s, msg.cell)) return SKIPPED;
  s.items.sync(msg.env.itemsVersion);
  const nowMs = msg.env.nowMs;
  // The ordinals go back with the items: the main thread's cursor records them, and looking each
  // id up there cost 2 % of its time under load.
  const picked: number[] = [];
  const t = executorStart();
  const r = s.retrieve.run(msg.task, levelPlan(msg.env.level), nowMs, picked, msg.env.staleMs ?? 0);
  executorEnd(t);
  ran(s);
  const ordinals = Int32Array.from(picked);
  // Serialized here, off the thread that answers every request: a string crosses the port as
  // one copy, where the items' objects were cloned, then stringified there.
  if (msg.task.asJson) {
    const j = stageStart();
    const itemsJson = r.signalsJson ? spliceSignals(JSON.stringify(r.items), r.signalsJson) : JSON.stringify(r.items);
    stageEnd(STAGE.json, j);
    return { ...r, items: [], itemsJson, signalsJson: undefined, ordinals, nowMs, serviceMs: performance.now() - started };
  }
  return { ...r, ordinals, nowMs, serviceMs: performance.now() - started };
}

function search(s: State, msg: SearchMessage, started: number): ResultOf<'search'> {
  if (cancelled(s, msg.cell)) return SKIPPED;
  s.items.sync(msg.env.itemsVersion);
  const nowMs = msg.env.nowMs;
  const picked: number[] = [];
  const t = executorStart();
  const r = s.search.run(msg.task, levelPlan(msg.env.level), nowMs, picked);
  executorEnd(t);
  ran(s);
  const ordinals = Int32Array.from(picked);
  if (msg.task.asJson) {
    const j = stageStart();
    const hitsJson = JSON.stringify(r.hits);
    stageEnd(STAGE.json, j);
    return { ...r, hits: [], hitsJson, ordinals, nowMs, serviceMs: performance.now() - started };
  }
  return { ...r, ordinals, nowMs, serviceMs: performance.now() - started };
}

/**
 * Each query of a batch in order, its service time its own; one that throws fails alone. The
 * answers' rows cross packed (packed-rows.ts): the thread they go to reads every embedded query's.
 */
function batch(s: State, msg: BatchMessage): BatchEntryResult[] {
  const out: BatchEntryResult[] = [];
  for (const q of msg.queries) {
    const started = performance.now();
    try {
      out.push(packAnswer(q.op === 'retrieve' ? retrieve(s, q, started) : search(s, q, started)));
    } catch (err) {
      out.push({ failed: err });
    }
  }
  return out;
}

/** See {@link FaultMessage}: for fault tests only. */
function fault(msg: FaultMessage): null {
  if (msg.mode === 'block') {
    const gate = new Int32Array(msg.gate);
    while (Atomics.load(gate, 0) === 0) Atomics.wait(gate, 0, 0, 1000);
    return null;
  }
  if (msg.mode === 'exit') process.exit(1);
  throw new Error('injected query worker fault');
}

/**
 * Runs a query in the calling worker thread, as a posted `retrieve` or `search` task would run:
 * for code loaded into a query worker (an HTTP acceptor) that answers a request where it arrived,
 * with no message to another thread. The thread's state is made on first use, as for any task.
 */
export function runInThread(msg: RetrieveMessage): ResultOf<'retrieve'>;
export function runInThread(msg: SearchMessage): ResultOf<'search'>;
export function runInThread(msg: RetrieveMessage | SearchMessage): ResultOf<'retrieve'> | ResultOf<'search'> {
  const started = performance.now();
  state ??= init();
  return msg.op === 'retrieve' ? retrieve(state, msg, started) : search(state, msg, started);
}

export default function run(msg: WorkerTask): WorkerResult {
  const started = performance.now();
  state ??= init();
  const s = state;
  switch (msg.op) {
    case 'retrieve':
      return retrieve(s, msg, started);
    case 'search':
      return search(s, msg, started);
    case 'batch':
      return batch(s, msg);
    case 'persist-ann':
      return s.items.persist(msg.env, msg.budgetMs);
    case 'warm': {
      const warmed = s.items.warm(msg);
      const catalog = s.ctx.catalog;
      const builds = catalog.derivedBuilds;
      const t1 = performance.now();
      s.retrieve.warm(msg.env.nowMs);
      const t2 = performance.now();
      const termsSummarized = catalog.text.summarizeAll();
      const t3 = performance.now();
      const pathsRun = exercisePaths(
        (m) => (m.op === 'retrieve' ? retrieve(s, m, performance.now()) : search(s, m, performance.now())),
        s.ctx,
        msg.env,
      );
      const t4 = performance.now();
      publishMemory(s);
      return {
        ...warmed,
        structuresBuilt: catalog.derivedBuilds - builds,
        termsSummarized,
        pathsRun,
        stepsMs: { sync: t1 - started, structures: t2 - t1, terms: t3 - t2, paths: t4 - t3 },
        nice: s.nice,
        youngGenerationMb: resourceLimits.maxYoungGenerationSizeMb ?? 0,
        ...(s.niceWarning ? { niceWarning: s.niceWarning } : {}),
      };
    }
    case 'fault':
      return fault(msg);
  }
}
