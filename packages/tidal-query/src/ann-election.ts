/**
 * The warm-time election of the worker that makes the ANN snapshot. During warm the first worker
 * to flip a slot of the warm task's SharedArrayBuffer builds the index, or brings the saved
 * snapshot up to date, and saves it in the database directory (see ann-snapshot.ts); every worker
 * then memory-maps that file. Where that would add more rows than a warm waits for, the index is
 * built on a thread of its own (ann-builder.ts) instead.
 *
 * The election sees one worker's ANN state only through {@link ElectionHost}; the state itself,
 * and the sync that keeps the index up to date after the snapshot, are ann-lifecycle.ts's.
 */
import { join } from 'node:path';
import { AnnIndex } from './ann.js';
import { discardSnapshot, readSnapshot, writeSnapshot, type AnnSnapshotMeta } from './ann-snapshot.js';
import type { AnnSource, AnnWarning, WarmMessage, WarmResult } from './protocol.js';
import type { TaskEnvelope } from './types.js';

/** Where a worker's ANN index came from, as a warm reports it. */
export type AnnOrigin = Pick<WarmResult, 'annSource' | 'annSnapshotVersion' | 'annRowsApplied'>;

/** What the election reads and changes of one worker's ANN state. */
export interface ElectionHost {
  /** The database directory, where snapshots live. */
  readonly dir: string;
  readonly dims: number;
  /** The items version a task must see: its envelope's, or the table's if that is ahead. */
  itemsVersion(env: TaskEnvelope): number;
  /** Item rows after `version`. */
  pendingAfter(version: number): number;
  /** Whether at least `n` items have an embedding. */
  embeddedAtLeast(n: number): boolean;
  /** Applies rows `(from, to]` to `ann` with every core; returns the rows read. */
  applyRows(ann: AnnIndex, from: number, to: number): number;
  /** The worker's own plain index (not over a snapshot) and its version, when it is at the catalog's version; else null. */
  plainIndex(): { index: AnnIndex; version: number } | null;
  /** Whether the worker's index is the one mapped from `file`. */
  maps(file: string): boolean;
  /** Makes `ann`, at `version`, the worker's index (mapped from `file`, or null for a private one), ending any deferral. */
  install(ann: AnnIndex, version: number, file: string | null): void;
  /** Drops the worker's index: it is built on its own thread, and searches are exact meanwhile. */
  defer(): void;
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
/**
 * The index needs more rows added than a warm waits for: it is built on a thread of its own
 * (ann-builder.ts) and every worker answers vector searches exactly meanwhile.
 */
const DEFERRED = 5;

const OUTCOME_BUILT = 1;
const OUTCOME_SNAPSHOT = 2;

/**
 * Up to this many rows after a snapshot, every worker applies them itself (on one thread, ~1.7 ms a
 * row at 100 000 items × 128 dims) rather than the elected worker loading a copy, applying them with every
 * core and saving a new snapshot (~0.6 s of fixed cost at 100 000 items, then ~0.3 ms a row).
 */
export const CATCH_UP_ROWS = 256;
/** How long a worker waits for the elected one before building its own index. */
const ELECTION_WAIT_MS = 20 * 60_000;

interface Prepared {
  state: typeof READY | typeof EMPTY | typeof DEFERRED;
  outcome: typeof OUTCOME_BUILT | typeof OUTCOME_SNAPSHOT;
  /** Rows after the stored snapshot folded into the new one (0 when there was none). */
  folded: number;
  warning?: AnnWarning;
}

/** Marks errors from mapping or loading a stored snapshot (as opposed to writing a new one). */
class SnapshotReadError extends Error {}

function isSnapshotReadError(err: unknown): err is SnapshotReadError {
  return err instanceof SnapshotReadError;
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
export function warmAnn(host: ElectionHost, msg: WarmMessage): { elected: boolean; origin: AnnOrigin; warning?: AnnWarning } {
  const sync32 = new Int32Array(msg.barrier);
  const elected = Atomics.compareExchange(sync32, ANN_STATE, IDLE, BUSY) === IDLE;
  let warning: AnnWarning | undefined;
  if (elected) {
    let prepared: Prepared | null = null;
    try {
      prepared = prepareSnapshot(host, msg.env, msg.annBuild);
      warning = prepared.warning;
      Atomics.store(sync32, ANN_OUTCOME, prepared.outcome);
      Atomics.store(sync32, ANN_FOLDED, prepared.folded);
    } catch (err) {
      warning = {
        code: 'TIDAL_ANN_SNAPSHOT_UNSAVED',
        message: `The ANN index could not be saved in ${host.dir} (${(err as Error).message}); each query worker built its own.`,
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
  if (outcome === DEFERRED) {
    // Built on its own thread: this worker searches exactly until a warm adopts the result.
    host.defer();
    return done('building', 0, 0);
  }
  if (outcome === READY) {
    const found = readSnapshot(host.dir, host.dims, Number.MAX_SAFE_INTEGER, false);
    try {
      if (found.kind !== 'ok') throw new Error(`the snapshot is gone (${found.kind})`);
      adoptSnapshot(host, found.meta, found.path);
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
 * Makes the snapshot the worker's index (and returns true), unless it already maps that file. A
 * worker's own index, even a newer one, is replaced: mapping the shared file costs little, the rows
 * after it are applied by the next sync, and every worker then searches the same graph.
 * @throws SnapshotReadError when usearch cannot map the file or it does not hold what the sidecar says.
 */
export function adoptSnapshot(host: ElectionHost, meta: AnnSnapshotMeta, path: string): boolean {
  if (host.maps(meta.file)) return false;
  let ann: AnnIndex;
  try {
    ann = AnnIndex.view(host.dims, path);
  } catch (err) {
    throw new SnapshotReadError((err as Error).message, { cause: err });
  }
  if (ann.size !== meta.count) throw new SnapshotReadError(`${meta.file} holds ${ann.size} vectors, the sidecar says ${meta.count}`);
  host.install(ann, meta.version, meta.file);
  return true;
}

/**
 * The elected worker's part of warm: make the snapshot in the sidecar cover (nearly) everything
 * committed, then map it. A sound snapshot with at most {@link CATCH_UP_ROWS} rows after it is used
 * as it is; one with more is loaded, brought up to date and saved again; without one (or when it is
 * damaged) the index is built from the items table and saved. Being the only worker building, the
 * elected one adds with every core. Where that would add more than `build.backgroundRows` rows, or
 * while a build runs on its own thread (`build.running`: only it writes snapshots then), nothing
 * is built here: {@link DEFERRED}.
 */
function prepareSnapshot(host: ElectionHost, env: TaskEnvelope, build: WarmMessage['annBuild']): Prepared {
  const dir = host.dir;
  const dims = host.dims;
  // A schema without embeddings: nothing to build, and any snapshot is from another schema.
  if (dims === 0) {
    discardSnapshot(dir);
    return { state: EMPTY, outcome: OUTCOME_BUILT, folded: 0 };
  }
  const current = host.itemsVersion(env);
  const found = readSnapshot(dir, dims, current, true);
  let warning: AnnWarning | undefined;
  const background = (rows: number): boolean => build.running || rows > build.backgroundRows;
  const manyEmbedded = (): boolean => build.running || host.embeddedAtLeast(build.backgroundRows + 1);
  const rebuilt = (reason: string): AnnWarning => ({
    code: 'TIDAL_ANN_SNAPSHOT_REBUILT',
    message: `The ANN snapshot in ${dir} is unusable (${reason}); the index is rebuilt from the items table.`,
  });
  const deferred = (): Prepared => ({ state: DEFERRED, outcome: OUTCOME_BUILT, folded: 0, ...(warning ? { warning } : {}) });
  if (found.kind === 'unusable') warning = rebuilt(found.reason);
  if (found.kind === 'unusable' || found.kind === 'ignored') discardSnapshot(dir);
  const stored = found.kind === 'ok' ? found.meta.version : -1;

  // A re-warm after a bulk load: this worker's own index (built by queries) is newer than any
  // snapshot, so it is the cheapest start.
  const own = build.running ? null : host.plainIndex();
  if (own && own.version > stored) {
    return { ...saveAndMap(host, own.index, own.version, current), outcome: OUTCOME_BUILT, folded: 0, ...(warning ? { warning } : {}) };
  }

  if (found.kind === 'ok') {
    try {
      const after = host.pendingAfter(stored);
      if (after <= CATCH_UP_ROWS) {
        // Mapped here already, so a file usearch rejects counts as damaged and is rebuilt.
        adoptSnapshot(host, found.meta, found.path);
        return { state: READY, outcome: OUTCOME_SNAPSHOT, folded: 0 };
      }
      if (background(after)) return deferred();
      let copy: AnnIndex;
      try {
        copy = AnnIndex.load(dims, found.path);
      } catch (err) {
        throw new SnapshotReadError((err as Error).message, { cause: err });
      }
      const r = saveAndMap(host, copy, stored, current);
      return { ...r, outcome: OUTCOME_SNAPSHOT, folded: Math.min(r.read, 2 ** 31 - 1) };
    } catch (err) {
      if (!isSnapshotReadError(err)) throw err;
      warning = rebuilt(err.message);
      discardSnapshot(dir);
    }
  }
  if (manyEmbedded()) return deferred();
  return { ...saveAndMap(host, new AnnIndex(dims), 0, current), outcome: OUTCOME_BUILT, folded: 0, ...(warning ? { warning } : {}) };
}

/**
 * Applies rows `(from, to]` to `ann` with every core, saves it as the snapshot, and makes the
 * mapped file the worker's index in place of the private copy, like every other worker's.
 */
function saveAndMap(host: ElectionHost, ann: AnnIndex, from: number, to: number): { state: typeof READY | typeof EMPTY; read: number } {
  const read = host.applyRows(ann, from, to);
  if (ann.size === 0) {
    discardSnapshot(host.dir);
    return { state: EMPTY, read };
  }
  let meta: AnnSnapshotMeta;
  try {
    meta = writeSnapshot(host.dir, ann, to);
  } catch (err) {
    // Unsaved, but built: this worker keeps it, and only the others build their own.
    host.install(ann, to, null);
    throw err;
  }
  adoptSnapshot(host, meta, join(host.dir, meta.file));
  return { state: READY, read };
}
