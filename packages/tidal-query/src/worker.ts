/**
 * The query worker entry (a piscina worker). Each worker opens its own read-only SQLite connection,
 * keeps a columnar catalog and an ANN index of the items, and maps the shared signal state. Before a
 * task runs, the worker pulls the item rows committed since it last looked, so a query sees every
 * write acknowledged before it started.
 *
 * The ANN index is built once and shared: during warm one worker (elected through the warm task's
 * SharedArrayBuffer) builds it, or brings the saved snapshot up to date, and saves it in the
 * database directory (see ann-snapshot.ts); every worker then memory-maps that file and keeps the
 * changes after it in a small private index of its own (see AnnIndex).
 */
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { threadId, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { AnnIndex } from './ann.js';
import { discardSnapshot, readSnapshot, writeSnapshot, type AnnSnapshotMeta } from './ann-snapshot.js';
import { Catalog } from './catalog.js';
import type { QueryContext } from './context.js';
import { RetrieveExecutor } from './retrieve.js';
import { SearchExecutor } from './search.js';
import { SignalStore, type SignalArena } from './signals/store.js';
import type { QuerySchema, RetrieveTask, SearchTask, TaskEnvelope, WorkerRetrieveResult, WorkerSearchResult } from './types.js';

export interface WorkerInit {
  file: string;
  schema: QuerySchema;
  arena: SignalArena;
}

/** Bytes of the SharedArrayBuffer a warm task needs: the ANN election (Int32 1–3; 0 is unused). */
export const WARM_SYNC_BYTES = 16;

export type WorkerTask =
  | {
      op: 'warm';
      env: TaskEnvelope;
      /**
       * {@link WARM_SYNC_BYTES} bytes, zeroed, shared by every warm task of one warm(): Int32 1–3
       * carry the ANN build election and its outcome.
       */
      barrier: SharedArrayBuffer;
    }
  | {
      op: 'persist-ann';
      env: TaskEnvelope;
      /** Give up (saving nothing) once this much time has gone, checked between batches. */
      budgetMs: number;
    }
  | { op: 'retrieve'; env: TaskEnvelope; task: RetrieveTask }
  | { op: 'search'; env: TaskEnvelope; task: SearchTask };

/** Where the ANN index came from in a warm. */
export type AnnSource =
  /** Built from the items table: there was no usable snapshot. */
  | 'built'
  /** A snapshot saved earlier (by a previous open, warm or close) was mapped, plus the rows after it. */
  | 'snapshot'
  /** No item has an embedding. */
  | 'none'
  /** The elected worker failed or timed out, so each worker built its own from the items table. */
  | 'fallback';

/** A warning the main thread should raise (workers cannot reach its `process` listeners). */
export interface AnnWarning {
  code: 'TIDAL_ANN_SNAPSHOT_REBUILT' | 'TIDAL_ANN_SNAPSHOT_UNSAVED';
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
}

/** What a persist-ann task did. */
export interface PersistAnnResult {
  /** The version the saved snapshot covers, or null when nothing was saved. */
  savedVersion: number | null;
  reason: 'saved' | 'unchanged' | 'no-index' | 'budget';
}

interface State {
  db: Database.Database;
  catalog: Catalog;
  ctx: QueryContext & { ann: AnnIndex | null };
  retrieve: RetrieveExecutor;
  search: SearchExecutor;
  /** The database directory, where snapshots live. */
  dir: string;
  /**
   * The items version the ANN index reflects. Equal to the catalog's version except right after a
   * snapshot was adopted, until the next sync brings both to the same version.
   */
  annVersion: number;
  /** The snapshot file the ANN index maps, or null for a plain index (or none). */
  annFile: string | null;
  /** Rows the last sync applied to the ANN index on top of an adopted snapshot. */
  annCaughtUp: number;
  /** Where the current ANN index came from, as the last warm that changed it reported. */
  annOrigin: Pick<WarmResult, 'annSource' | 'annSnapshotVersion' | 'annRowsApplied'>;
  /** Item rows after a version, in version order, with what the ANN index needs. */
  annRows: Database.Statement<[number, number]>;
  annPending: Database.Statement<[number]>;
  maxVersion: Database.Statement<[]>;
}

interface AnnRow {
  ordinal: number;
  present: number;
  embedding: Buffer | null;
  version: number;
}

/** Int32 slots of the warm task's buffer. */
const ANN_STATE = 1;
const ANN_OUTCOME = 2;
/** Rows the elected worker folded into a refreshed snapshot (capped at 2^31 − 1). */
const ANN_FOLDED = 3;

const IDLE = 0;
const BUSY = 1;
/** A snapshot is in the sidecar for every worker to adopt. */
const READY = 2;
/** No embeddings: nothing to adopt. */
const EMPTY = 3;
/** The elected worker could not produce a snapshot: each worker builds its own. */
const FAILED = 4;

const OUTCOME_BUILT = 1;
const OUTCOME_SNAPSHOT = 2;

/**
 * Up to this many rows after a snapshot, every worker applies them itself (on one thread, ~1.7 ms a
 * row at 100 000 items × 128 dims) rather than the elected worker loading a copy, applying them with every
 * core and saving a new snapshot (~0.6 s of fixed cost at 100 000 items, then ~0.3 ms a row).
 */
const CATCH_UP_ROWS = 256;
/** Rows per usearch add when building: bounds the Float32 copy, and lets a budget be checked. */
const BUILD_CHUNK = 8192;
/** How long a worker waits for the elected one before building its own index. */
const ELECTION_WAIT_MS = 20 * 60_000;

let state: State | undefined;

function init(): State {
  const { file, schema, arena } = workerData as WorkerInit;
  const db = new Database(file, { readonly: true, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  const catalog = new Catalog(db, schema);
  const store = SignalStore.attach(arena, [...schema.kinds]);
  const ctx = { schema, catalog, store, ann: null as AnnIndex | null, db };
  return {
    db,
    catalog,
    ctx,
    retrieve: new RetrieveExecutor(ctx),
    search: new SearchExecutor(ctx),
    dir: dirname(file),
    annVersion: 0,
    annFile: null,
    annCaughtUp: 0,
    annOrigin: { annSource: 'none', annSnapshotVersion: 0, annRowsApplied: 0 },
    annRows: db.prepare('SELECT ordinal, present, embedding, version FROM items WHERE version > ? AND version <= ? ORDER BY version'),
    annPending: db.prepare('SELECT COUNT(*) FROM items WHERE version > ?').pluck() as Database.Statement<[number]>,
    maxVersion: db.prepare('SELECT COALESCE(MAX(version), 0) FROM items').pluck() as Database.Statement<[]>,
  };
}

/** Pulls item changes up to at least `version`; returns the number of rows read. */
function sync(s: State, version: number): number {
  if (s.catalog.version >= version && s.annVersion === s.catalog.version) return 0;
  if (s.annVersion === s.catalog.version) {
    const rows = refreshWithAnn(s);
    s.annVersion = s.catalog.version;
    return rows;
  }
  // The index and the catalog stand at different versions (a snapshot was just adopted): the
  // catalog reads its rows, the index the rows after its own version, in one read transaction so
  // both see the same commits.
  return s.db.transaction(() => {
    const rows = s.catalog.refresh();
    if (s.catalog.version > s.annVersion) {
      s.annCaughtUp = applyAnnRows(s, s.annVersion, s.catalog.version, undefined, Number.POSITIVE_INFINITY);
      s.annVersion = s.catalog.version;
    }
    return rows;
  })();
}

/** The catalog refresh, with each changed row applied to the ANN index as it goes by. */
function refreshWithAnn(s: State): number {
  const dims = s.ctx.schema.embeddingDims;
  const keys: number[] = [];
  const blobs: Buffer[] = [];
  const removed: number[] = [];
  const rows = s.catalog.refresh((row) => {
    if (row.present && row.embedding) {
      keys.push(row.ordinal);
      blobs.push(row.embedding);
    } else {
      removed.push(row.ordinal);
    }
  });
  // The index exists from the first embedding on; a schema without embeddings never builds one.
  if (removed.length > 0 && s.ctx.ann) for (const o of removed) s.ctx.ann.remove(o);
  if (keys.length > 0) {
    s.ctx.ann ??= new AnnIndex(dims);
    s.ctx.ann.upsert(keys, flatten(blobs, dims));
  }
  return rows;
}

/**
 * Applies the rows with `from < version <= to` to `s.ctx.ann` (created on the first embedding), in
 * batches of {@link BUILD_CHUNK}. Returns the rows read, or -1 when `deadline` passed first.
 */
function applyAnnRows(s: State, from: number, to: number, threads: number | undefined, deadline: number): number {
  const dims = s.ctx.schema.embeddingDims;
  let keys: number[] = [];
  let blobs: Buffer[] = [];
  let read = 0;
  const flush = (): void => {
    s.ctx.ann ??= new AnnIndex(dims);
    s.ctx.ann.upsert(keys, flatten(blobs, dims), threads);
    keys = [];
    blobs = [];
  };
  for (const row of s.annRows.iterate(from, to) as IterableIterator<AnnRow>) {
    read++;
    // One row per ordinal in one statement, so removals and additions commute.
    if (row.present === 1 && row.embedding) {
      keys.push(row.ordinal);
      blobs.push(row.embedding);
      if (keys.length >= BUILD_CHUNK) {
        flush();
        if (performance.now() > deadline) return -1;
      }
    } else {
      s.ctx.ann?.remove(row.ordinal);
    }
  }
  if (keys.length > 0) flush();
  return read;
}

function flatten(blobs: Buffer[], dims: number): Float32Array {
  // Byte copies: a blob's offset in its Buffer need not be 4-byte aligned for a Float32Array view.
  const flat = new Float32Array(blobs.length * dims);
  const bytes = new Uint8Array(flat.buffer);
  for (let i = 0; i < blobs.length; i++) bytes.set(blobs[i]!.subarray(0, dims * 4), i * dims * 4);
  return flat;
}

function itemsVersion(s: State, env: TaskEnvelope): number {
  return Math.max(env.itemsVersion, s.maxVersion.get() as number);
}

interface Prepared {
  state: typeof READY | typeof EMPTY;
  outcome: typeof OUTCOME_BUILT | typeof OUTCOME_SNAPSHOT;
  /** Rows after the stored snapshot folded into the new one (0 when there was none). */
  folded: number;
  warning?: AnnWarning;
}

/**
 * The elected worker's part of warm: make the snapshot in the sidecar cover (nearly) everything
 * committed, then map it. A sound snapshot with at most {@link CATCH_UP_ROWS} rows after it is used
 * as it is; one with more is loaded, brought up to date and saved again; without one (or when it is
 * damaged) the index is built from the items table and saved. Being the only worker building, the
 * elected one adds with every core.
 */
function prepareSnapshot(s: State, env: TaskEnvelope): Prepared {
  const dims = s.ctx.schema.embeddingDims;
  // A schema without embeddings: nothing to build, and any snapshot is from another schema.
  if (dims === 0) {
    discardSnapshot(s.dir);
    return { state: EMPTY, outcome: OUTCOME_BUILT, folded: 0 };
  }
  const current = itemsVersion(s, env);
  const found = readSnapshot(s.dir, dims, current, true);
  let warning: AnnWarning | undefined;
  const rebuilt = (reason: string): AnnWarning => ({
    code: 'TIDAL_ANN_SNAPSHOT_REBUILT',
    message: `The ANN snapshot in ${s.dir} is unusable (${reason}); the index was rebuilt from the items table.`,
  });
  if (found.kind === 'unusable') warning = rebuilt(found.reason);
  if (found.kind === 'unusable' || found.kind === 'ignored') discardSnapshot(s.dir);
  const stored = found.kind === 'ok' ? found.meta.version : -1;

  // A re-warm after a bulk load: this worker's own index (built by queries) is newer than any
  // snapshot, so it is the cheapest start.
  const own = s.ctx.ann;
  if (own && !own.layered && s.annVersion === s.catalog.version && s.annVersion > stored) {
    return { ...saveAndMap(s, own, s.annVersion, current), outcome: OUTCOME_BUILT, folded: 0, ...(warning ? { warning } : {}) };
  }

  if (found.kind === 'ok') {
    try {
      if ((s.annPending.get(stored) as number) <= CATCH_UP_ROWS) {
        // Mapped here already, so a file usearch rejects counts as damaged and is rebuilt.
        adopt(s, found.meta, found.path);
        return { state: READY, outcome: OUTCOME_SNAPSHOT, folded: 0 };
      }
      let copy: AnnIndex;
      try {
        copy = AnnIndex.load(dims, found.path);
      } catch (err) {
        throw new SnapshotReadError((err as Error).message, { cause: err });
      }
      const r = saveAndMap(s, copy, stored, current);
      return { ...r, outcome: OUTCOME_SNAPSHOT, folded: Math.min(r.read, 2 ** 31 - 1) };
    } catch (err) {
      if (!isSnapshotReadError(err)) throw err;
      warning = rebuilt((err as Error).message);
      discardSnapshot(s.dir);
    }
  }
  return { ...saveAndMap(s, new AnnIndex(dims), 0, current), outcome: OUTCOME_BUILT, folded: 0, ...(warning ? { warning } : {}) };
}

/** Marks errors from mapping or loading a stored snapshot (as opposed to writing a new one). */
class SnapshotReadError extends Error {}

function isSnapshotReadError(err: unknown): err is SnapshotReadError {
  return err instanceof SnapshotReadError;
}

/**
 * Applies rows `(from, to]` to `ann` with every core, saves it as the snapshot, and makes the
 * mapped file this worker's index in place of the private copy, like every other worker's.
 */
function saveAndMap(s: State, ann: AnnIndex, from: number, to: number): { state: typeof READY | typeof EMPTY; read: number } {
  const previous = s.ctx.ann;
  s.ctx.ann = ann;
  let read: number;
  try {
    read = applyAnnRows(s, from, to, 0, Number.POSITIVE_INFINITY);
  } finally {
    s.ctx.ann = previous;
  }
  if (ann.size === 0) {
    discardSnapshot(s.dir);
    return { state: EMPTY, read };
  }
  let meta: AnnSnapshotMeta;
  try {
    meta = writeSnapshot(s.dir, ann, to);
  } catch (err) {
    // Unsaved, but built: this worker keeps it, and only the others build their own.
    s.ctx.ann = ann;
    s.annVersion = to;
    s.annFile = null;
    throw err;
  }
  adopt(s, meta, join(s.dir, meta.file));
  return { state: READY, read };
}

/**
 * Makes the snapshot this worker's index (and returns true), unless it already maps that file. A
 * worker's own index, even a newer one, is replaced: mapping the shared file costs little, the rows
 * after it are applied by the next sync, and every worker then searches the same graph.
 * @throws SnapshotReadError when usearch cannot map the file or it does not hold what the sidecar says.
 */
function adopt(s: State, meta: AnnSnapshotMeta, path: string): boolean {
  if (s.annFile === meta.file && s.ctx.ann) return false;
  let ann: AnnIndex;
  try {
    ann = AnnIndex.view(s.ctx.schema.embeddingDims, path);
  } catch (err) {
    throw new SnapshotReadError((err as Error).message, { cause: err });
  }
  if (ann.size !== meta.count) throw new SnapshotReadError(`${meta.file} holds ${ann.size} vectors, the sidecar says ${meta.count}`);
  s.ctx.ann = ann;
  s.annVersion = meta.version;
  s.annFile = meta.file;
  return true;
}

/**
 * The ANN part of a warm task, before the catalog sync. The first worker to flip the election slot
 * from IDLE to BUSY prepares the snapshot; the others sleep on the slot (bounded) until it says
 * READY, EMPTY or FAILED, then map the snapshot. On FAILED or a timeout each worker falls back to
 * building its own index in the sync that follows, as before snapshots existed.
 *
 * Returns where the index comes from this time (recorded if the worker's index changed), with the
 * warning to raise if this worker is the elected one.
 */
function warmAnn(s: State, msg: Extract<WorkerTask, { op: 'warm' }>): { elected: boolean; origin: State['annOrigin']; warning?: AnnWarning } {
  const sync32 = new Int32Array(msg.barrier);
  const elected = Atomics.compareExchange(sync32, ANN_STATE, IDLE, BUSY) === IDLE;
  let warning: AnnWarning | undefined;
  if (elected) {
    let prepared: Prepared | null = null;
    try {
      prepared = prepareSnapshot(s, msg.env);
      warning = prepared.warning;
      Atomics.store(sync32, ANN_OUTCOME, prepared.outcome);
      Atomics.store(sync32, ANN_FOLDED, prepared.folded);
    } catch (err) {
      warning = {
        code: 'TIDAL_ANN_SNAPSHOT_UNSAVED',
        message: `The ANN index could not be saved in ${s.dir} (${(err as Error).message}); each query worker built its own.`,
      };
    }
    Atomics.store(sync32, ANN_STATE, prepared ? prepared.state : FAILED);
    Atomics.notify(sync32, ANN_STATE);
  } else {
    const deadline = Date.now() + ELECTION_WAIT_MS;
    while (Atomics.load(sync32, ANN_STATE) === BUSY && Date.now() < deadline) Atomics.wait(sync32, ANN_STATE, BUSY, 1000);
  }
  const outcome = Atomics.load(sync32, ANN_STATE);
  // Rows after the stored snapshot: those folded into the refreshed one; the caller adds those this
  // worker applies on top.
  const done = (annSource: AnnSource, annSnapshotVersion: number, annRowsApplied: number) => {
    const origin = { annSource, annSnapshotVersion, annRowsApplied };
    return warning ? { elected, origin, warning } : { elected, origin };
  };
  if (outcome === EMPTY) return done('none', 0, 0);
  if (outcome === READY) {
    const found = readSnapshot(s.dir, s.ctx.schema.embeddingDims, Number.MAX_SAFE_INTEGER, false);
    try {
      if (found.kind !== 'ok') throw new Error(`the snapshot is gone (${found.kind})`);
      adopt(s, found.meta, found.path);
      const built = Atomics.load(sync32, ANN_OUTCOME) === OUTCOME_BUILT;
      return done(built ? 'built' : 'snapshot', found.meta.version, built ? 0 : Atomics.load(sync32, ANN_FOLDED));
    } catch {
      // Fall through: this worker builds its own.
    }
  }
  // FAILED, a snapshot this worker could not map, or the elected worker still busy after the wait:
  // the sync that follows builds (or completes) this worker's own index from the items table.
  return done('fallback', 0, 0);
}

/**
 * The close-time save: bring the snapshot up to the committed items so the next open maps it and
 * applies nothing. Costs about what the changes since the last snapshot cost to apply (a copy of the
 * snapshot is loaded and they are added with every core); a worker holding a plain index of its
 * own (built by queries, no snapshot under it) saves that instead. Never builds from nothing: that
 * is left to the next open's warm.
 */
function persistAnn(s: State, env: TaskEnvelope, budgetMs: number): PersistAnnResult {
  const deadline = performance.now() + budgetMs;
  const dims = s.ctx.schema.embeddingDims;
  const current = itemsVersion(s, env);
  const found = readSnapshot(s.dir, dims, current, true);
  const snapshotVersion = found.kind === 'ok' ? found.meta.version : -1;
  if (found.kind === 'ok' && snapshotVersion >= current) return { savedVersion: null, reason: 'unchanged' };
  const own = s.ctx.ann;
  if (own && !own.layered && s.annVersion > snapshotVersion && own.size > 0) {
    writeSnapshot(s.dir, own, s.annVersion);
    return { savedVersion: s.annVersion, reason: 'saved' };
  }
  if (found.kind !== 'ok') return { savedVersion: null, reason: 'no-index' };
  const copy = AnnIndex.load(dims, found.path);
  const previous = s.ctx.ann;
  s.ctx.ann = copy;
  let read: number;
  try {
    read = applyAnnRows(s, snapshotVersion, current, 0, deadline);
  } finally {
    s.ctx.ann = previous;
  }
  if (read < 0) return { savedVersion: null, reason: 'budget' };
  if (copy.size === 0) {
    discardSnapshot(s.dir);
    return { savedVersion: null, reason: 'no-index' };
  }
  writeSnapshot(s.dir, copy, current);
  return { savedVersion: current, reason: 'saved' };
}

export default function run(msg: WorkerTask): WorkerRetrieveResult | WorkerSearchResult | WarmResult | PersistAnnResult {
  const started = performance.now();
  state ??= init();
  const s = state;
  switch (msg.op) {
    case 'retrieve': {
      sync(s, msg.env.itemsVersion);
      const r = s.retrieve.run(msg.task, msg.env.level, msg.env.nowMs);
      return { ...r, serviceMs: performance.now() - started };
    }
    case 'search': {
      sync(s, msg.env.itemsVersion);
      const r = s.search.run(msg.task, msg.env.level, msg.env.nowMs);
      return { ...r, serviceMs: performance.now() - started };
    }
    case 'persist-ann':
      return persistAnn(s, msg.env, msg.budgetMs);
    case 'warm': {
      const annBefore = s.ctx.ann;
      const fileBefore = s.annFile;
      const ann = msg.barrier.byteLength >= WARM_SYNC_BYTES ? warmAnn(s, msg) : null;
      s.annCaughtUp = 0;
      const refreshed = sync(s, msg.env.itemsVersion);
      // A warm that left the worker's index as it was (same mapped file, nothing new) reports where
      // it came from the last time; one that replaced it records the new origin.
      if (ann && (s.ctx.ann !== annBefore || s.annFile !== fileBefore)) {
        s.annOrigin = { ...ann.origin, annRowsApplied: ann.origin.annRowsApplied + s.annCaughtUp };
      }
      return {
        threadId,
        threadItems: s.catalog.presentCount,
        annSize: s.ctx.ann?.size ?? 0,
        refreshedRows: refreshed,
        ...s.annOrigin,
        annElected: ann?.elected ?? false,
        ...(ann?.warning ? { annWarning: ann.warning } : {}),
      };
    }
  }
}
