/**
 * A database's lifecycle behind `TidalDb.open`, `warm` and `close`: the directory and its lock, the
 * writer connection, recovery, the write path, the query workers and the query front, made in that
 * order by {@link openParts} and taken down in the reverse one by {@link shutdown}.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { DegradationLevel, InternalError, InvalidInputError, TidalError, type WarningSink } from 'tidal-load';
import { AckMark, MemoryGuard, SignalLog, SlotCheckpoint, WalCheckpointer, openWriterConnection } from 'tidal-wal';
import {
  SignalStore,
  SLOT_BYTES,
  SLOT_LAYOUT,
  CatalogShare,
  createCatalogShare,
  createSharedVectors,
  type SharedVectorBuffers,
  type TaskEnvelope,
  type WarmResult,
} from 'tidal-query';
import { AnnBuild } from './ann-build.js';
import { createEphemeralDir, removeEphemeralDir } from './ephemeral-dirs.js';
import { Cursors } from './cursor.js';
import { PinnedRankings } from './pinned-rankings.js';
import { lockDirectory } from './dir-lock.js';
import { checkKindCapacity, type FilledOptions, type ResolvedOptions } from './options.js';
import { decideSchema } from './schema-store.js';
import { prepareDirectory } from './paths.js';
import { QueryFront } from './query-front.js';
import { QueryPool } from './query-pool.js';
import { mainReadDeps, ReadPipeline } from './read-pipeline.js';
import { recover } from './recovery.js';
import { ReplicaState } from './replication.js';
import { SessionRegistry } from './sessions.js';
import { WorkSharing } from './sharing.js';
import { Meta, openStorage } from 'tidal-wal/storage';
import type { UserRegistry } from './users.js';
import { defaultWindow } from './validate.js';
import type { HostInit } from './worker-host.js';
import { LinkServer } from './worker-link.js';
import type { LinkHandlers } from './thread-methods.js';
import { WritePath } from './write-path.js';
import { SharedStateWriter } from './shared-state.js';
import { memoryStats, type MemoryStats } from './memory-stats.js';
import { NativeHeap } from './native-heap.js';

/** The query workers' entry when the database has a worker module. */
const WORKER_HOST_FILENAME = new URL('./worker-host.js', import.meta.url).href;

/**
 * What an open that failed throws: a `TidalError` as it was, a file SQLite cannot read as a
 * database as bad input naming the path, anything else (an I/O error) as `InternalError`.
 */
function openFailure(err: unknown, dir: string, file: string): TidalError {
  if (TidalError.is(err)) return err;
  const message = (err as Error)?.message ?? String(err);
  const code = (err as { code?: unknown })?.code;
  if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') {
    return new InvalidInputError('path', `a directory holding a tidal database, or none (${file}: ${message})`, dir, { cause: err });
  }
  return new InternalError(`could not open the database in ${dir}: ${message}`, { cause: err });
}

/** What an open database is made of: the modules the facade delegates to, and what closing takes down. */
export interface DbParts {
  /** The directory holding the data (a temporary one for ephemeral databases). */
  readonly dir: string;
  readonly ephemeral: boolean;
  /** The writer connection. */
  readonly db: Database.Database;
  readonly store: SignalStore;
  readonly writes: WritePath;
  readonly sessions: SessionRegistry;
  readonly users: UserRegistry;
  readonly pool: QueryPool;
  /** The ANN index build on a thread of its own, when a warm leaves it there. */
  readonly annBuild: AnnBuild;
  /** Gives freed native memory back after each warm round (native-heap.ts). */
  readonly nativeHeap: NativeHeap;
  readonly queries: QueryFront;
  readonly sharing: WorkSharing;
  readonly reads: ReadPipeline;
  /** The pinned rankings of cursor chains (see pinned-rankings.ts). */
  readonly pins: PinnedRankings;
  /** Every item's int8 vector, once for every query thread (null: no embeddings, or each thread keeps its own). */
  readonly vectors: SharedVectorBuffers | null;
  /**
   * This thread's end of the catalog images' channel: it keeps the newest image and hands it to a
   * query thread that starts later (the pool's threads answer only between tasks).
   */
  readonly catalogImages: CatalogShare;
  /** The users', sessions' and co-engagement's shared records, when the database has a worker module; else null. */
  readonly shared: SharedStateWriter | null;
  /** What the worker threads are told when the database has a worker module; null without one. */
  readonly host: HostInit | null;
  /** The highest acknowledged sequence number, beside the database; null when nothing is promised. */
  readonly ackMark: AckMark | null;
  /** Copies SQLite's WAL into the database file on a worker thread, so commits only append. */
  readonly walCheckpointer: WalCheckpointer | null;
  /** Releases the directory's lock (see dir-lock.ts). */
  readonly unlock: () => void;
  /** The replication state when the database replicates, else null. */
  readonly replica: ReplicaState | null;
  /** The options with the schema the open decided on (the stored one, or the given one applied). */
  readonly options: FilledOptions;
}

/**
 * Opens the directory and every part of the database on it. On failure, what was opened is closed
 * again (an ephemeral directory deleted) and the error thrown (see {@link openFailure}).
 */
export function openParts(resolved: ResolvedOptions): DbParts {
  const { migrate, ...rest } = resolved;
  const ephemeral = rest.dir === null;
  let dir: string;
  try {
    dir = rest.dir ?? createEphemeralDir();
  } catch (err) {
    throw new InternalError(`could not create a temporary directory for an ephemeral database: ${(err as Error).message}`, { cause: err });
  }
  prepareDirectory(dir);
  const file = join(dir, 'tidal.db');
  let unlock: (() => void) | undefined;
  let db: Database.Database;
  try {
    unlock = lockDirectory(dir);
    db = openWriterConnection(file, rest.durability);
  } catch (err) {
    unlock?.();
    if (ephemeral) removeEphemeralDir(dir);
    throw openFailure(err, dir, file);
  }
  let ackMark: AckMark | null = null;
  let walCheckpointer: WalCheckpointer | null = null;
  let catalogImages: CatalogShare | null = null;
  try {
    openStorage(db, file);
    const meta = new Meta(db);
    const decided = decideSchema({ db, meta, given: rest.schema, allow: migrate, file, onWarning: rest.onWarning });
    checkKindCapacity(rest.capacity.items, decided.schema.kinds.length);
    const o: FilledOptions = { ...rest, schema: decided.schema };
    const cursors = new Cursors(meta);
    const log = new SignalLog(db);
    const checkpointRows = new SlotCheckpoint(db, SLOT_BYTES, o.capacity.signalSlots, SLOT_LAYOUT);
    const store = SignalStore.create({ kinds: o.schema.kinds, maxOrdinals: o.capacity.items, maxSlots: o.capacity.signalSlots });
    ackMark = o.durability === 'none' ? null : AckMark.open(`${file}-ack`, o.onWarning);
    const start = recover({
      db,
      meta,
      log,
      checkpointRows,
      store,
      ackMark,
      schema: o.schema,
      storeSchema: decided.store,
      file,
      onWarning: o.onWarning,
    });
    decided.warn();
    const users = start.users;
    const sessions = new SessionRegistry(db, o.sessions, o.rateLimit, o.clock, o.onWarning);
    // The write path is made below; validation only asks it for ordinals once queries run.
    const ordinalOf = (id: string): number | undefined => writes.ordinalOf(id);
    const pins = new PinnedRankings(o.cursors);
    const chains = { store: pins, now: o.clock, stored: (id: string) => writes.item(id) };
    const readDeps = mainReadDeps({ schema: o.schema, cursors, sessions, users, clock: o.clock, ordinalOf, chains });
    const memoryGuard = MemoryGuard.create(o.memoryGuard, o.onWarning);
    walCheckpointer = WalCheckpointer.start(db, file, o.onWarning);
    /** The items version every acknowledged item write reached, for worker modules' threads (BigInt64). */
    const itemsVersionCell = new BigInt64Array(new SharedArrayBuffer(8));
    const replica = o.replication === null ? null : new ReplicaState(db, meta, o.clock);
    const writes = new WritePath(
      o,
      {
        db,
        meta,
        log,
        checkpointRows,
        store,
        sessions,
        users,
        memoryGuard,
        ackMark,
        onWarning: o.onWarning,
        itemsVersionCell,
        replica,
      },
      start,
    );
    const inFlight = new SharedArrayBuffer(4);
    // Threads that answer queries themselves (a worker module's) read users, sessions and
    // co-engagement from shared memory; without one every read starts on this thread, which has them.
    const shared =
      o.workerModule === null
        ? null
        : new SharedStateWriter(() => {
            const st = shared!.stats;
            o.onWarning({
              code: 'TIDAL_SHARED_STATE_FULL',
              message: `The shared state for other threads could not hold a record (${st.records} records, ${st.usedBytes} bytes); reads that miss it there go to the database's thread.`,
            });
          });
    if (shared !== null) {
      // Publishing the co-engagement lists names every item that has one.
      writes.willName(users.relatedItems);
      users.share(shared, (ordinal) => writes.idOf(ordinal));
      sessions.share(shared);
    }
    const host: HostInit | undefined =
      o.workerModule === null || shared === null
        ? undefined
        : {
            module: o.workerModule,
            thread: {
              link: `tidal-link-${randomUUID()}`,
              inFlight,
              itemsVersion: itemsVersionCell.buffer,
              records: shared.buffers,
              cursorSecret: cursors.secretHex,
              thresholds: o.loadThresholds,
              workSharing: o.workSharing,
              admissionLimit: o.admissionLimit,
              workers: o.workers,
              loadManagement: o.loadManagement,
              schema: o.schema,
              defaultWindow: defaultWindow(o.schema),
            },
          };
    const vectors = createSharedVectors(o.schema.embeddingDims, o.capacity.items);
    const catalogShare = createCatalogShare(`tidal-catalog-${randomUUID()}`, o.sharedCatalogMinItems, o.workers);
    catalogImages = new CatalogShare(catalogShare);
    const pool = new QueryPool(
      {
        file,
        schema: o.schema,
        arena: store.arena,
        nice: o.workerNice,
        annBackgroundRows: o.annBackgroundRows,
        ...(vectors ? { vectors } : {}),
        catalogShare,
        ...(host ? { host } : {}),
      },
      o.workers,
      {
        ...(host ? { filename: WORKER_HOST_FILENAME, eventLoop: true } : {}),
        ...(o.workerYoungGenerationMb !== null ? { youngGenerationMb: o.workerYoungGenerationMb } : {}),
      },
    );
    const sharing = new WorkSharing(o.workSharing, o.clock, () => performance.now());
    const queries = new QueryFront(pool, sharing, {
      thresholds: o.loadThresholds,
      admissionLimit: o.admissionLimit,
      workers: o.workers,
      loadManagement: o.loadManagement,
      clock: o.clock,
      itemsVersion: () => writes.itemsVersion,
      inFlight,
    });
    const reads = new ReadPipeline(readDeps, (req, op, guard) => queries.plan(req, op, guard), ordinalOf);
    const annBuild = new AnnBuild({ file, dir, dims: o.schema.embeddingDims, workerNice: o.workerNice, onWarning: o.onWarning });
    const parts = {
      dir,
      ephemeral,
      db,
      store,
      writes,
      sessions,
      users,
      pool,
      annBuild,
      nativeHeap: new NativeHeap(),
      queries,
      sharing,
      reads,
      pins,
      vectors,
      catalogImages,
      shared,
      host: host ?? null,
      replica,
      options: o,
    };
    return { ...parts, ackMark, walCheckpointer, unlock };
  } catch (err) {
    ackMark?.close();
    catalogImages?.close();
    void walCheckpointer?.close();
    db.close();
    unlock();
    if (ephemeral) removeEphemeralDir(dir);
    throw openFailure(err, dir, file);
  }
}

/** The envelope of a task sent to every worker (warm, persist-ann): the clock and the items now. */
export function envelope(o: FilledOptions, writes: WritePath, level: DegradationLevel = DegradationLevel.Full): TaskEnvelope {
  return { level, nowMs: o.clock(), itemsVersion: writes.itemsVersion };
}

/**
 * Raises on this thread what a warm's workers reported: only the elected worker reports an ANN
 * warning, the catalog snapshot's goes once, and a worker's process.emitWarning would not reach this thread's 'warning' listeners.
 * The nice warning goes once per database: returns whether it has gone now or before.
 */
export function raiseWarmWarnings(results: readonly WarmResult[], onWarning: WarningSink, niceWarned: boolean): boolean {
  for (const r of results) {
    if (r.annWarning) onWarning(r.annWarning);
  }
  // Every worker whose first sync this warm was finds the same catalog snapshot: one warning.
  const catalog = results.find((r) => r.catalogWarning !== undefined);
  if (catalog?.catalogWarning) onWarning(catalog.catalogWarning);
  const unset = results.find((r) => r.niceWarning !== undefined);
  if (unset?.niceWarning && !niceWarned) {
    onWarning(unset.niceWarning);
    return true;
  }
  return niceWarned;
}

/**
 * Opens this thread's ends of every worker's link and tells the workers to start the worker
 * module. `started` resolves once each has (rejects with the first failure, naming the module);
 * the link is returned at once, so a close while they start closes it.
 */
export function startWorkerModule(
  host: HostInit,
  threadIds: readonly number[],
  handlers: Omit<LinkHandlers, 'moduleStarted'>,
): { link: LinkServer; started: Promise<void> } {
  const waiting = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();
  const started = threadIds.map((id) => new Promise<void>((resolve, reject) => waiting.set(id, { resolve, reject })));
  const moduleStarted = (threadId: number, failure: string | null): null => {
    const w = waiting.get(threadId);
    waiting.delete(threadId);
    if (failure === null) w?.resolve();
    else w?.reject(new InternalError(`the worker module ${host.module.url} failed to start in worker thread ${threadId}: ${failure}`));
    return null;
  };
  const link = new LinkServer(host.thread.link, threadIds, { ...handlers, moduleStarted });
  link.control({ op: 'start' });
  return { link, started: Promise.all(started).then(() => {}) };
}

/**
 * Flushes pending writes, checkpoints the signal state, closes the sessions, waits for running
 * queries, stops the workers and closes SQLite; throws the first failure after everything was
 * taken down.
 */
export async function shutdown(p: DbParts, o: FilledOptions, link: LinkServer | null): Promise<void> {
  let failure: unknown;
  // The worker module stops first (an acceptor stops taking requests); writes it sent before
  // are in the queue the flush below commits.
  link?.close();
  try {
    p.writes.close(!p.ephemeral);
  } catch (err) {
    failure = err;
  }
  // After the flush, so the session signals it committed are counted. Closes every open
  // session and stops the sweeper.
  try {
    p.sessions.shutdown(o.clock());
  } catch (err) {
    failure ??= err;
  }
  await p.pool.drain();
  // A build still running ends within ann.closeWaitMs and saves what it has (the next open resumes
  // it); an ephemeral database keeps nothing, so its build is just stopped.
  if (p.ephemeral) await p.annBuild.stop();
  else await p.annBuild.finish(o.annCloseWaitMs);
  // Brings the ANN snapshot up to the committed items, so the next open maps it and applies
  // nothing (see QueryPool.persistAnn). An ephemeral database's directory is deleted below anyway.
  if (!p.ephemeral) await p.pool.persistAnn(envelope(o, p.writes));
  await p.pool.destroy();
  p.catalogImages.close();
  await p.walCheckpointer?.close();
  p.db.close();
  p.ackMark?.close();
  p.unlock();
  if (p.ephemeral) removeEphemeralDir(p.dir);
  if (!failure) return;
  throw TidalError.is(failure) ? failure : new InternalError(`close failed: ${messageOf(failure)}`, { cause: failure });
}

/** A thrown value's message: an Error's own, anything else as `String` writes it. */
function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** `stats().memory` of an open database's parts; `pins` the cursors' pinned rankings. */
export function partsMemory(p: DbParts, pins: { bytes: number; pinned: number }): MemoryStats {
  return memoryStats({
    arena: p.store.arena,
    slots: p.store.slotsUsed(),
    shared: p.shared,
    vectors: p.vectors,
    users: p.users.size,
    heldUsers: p.users.held,
    sessions: p.sessions.size,
    cursors: { bytes: pins.bytes, pinned: pins.pinned },
    workers: p.pool.memory(),
    nativeHeap: p.nativeHeap.stats(),
  });
}
