import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { ClosedError, DegradationLevel, InFlightGuard, InternalError, InvalidInputError, TidalError, type LoadView } from 'tidal-load';
import { AckMark, MemoryGuard, SignalLog, SlotCheckpoint, WalCheckpointer, openWriterConnection } from 'tidal-wal';
import {
  readItemSignals,
  SignalStore,
  SLOT_BYTES,
  type Explain,
  type QuerySchema,
  type RetrievedItem,
  type RetrieveTask,
  type SearchHit,
  type SearchTask,
  type SignalValues,
  type TaskEnvelope,
  type UserQueryState,
  type WarmResult,
} from 'tidal-query';
import { QueryPool } from './query-pool.js';
import { WorkSharing } from './sharing.js';
import { resolveOptions, type FilledOptions, type TidalOptions } from './options.js';
import { TidalDbBuilder } from './builder.js';
import { prepareDirectory } from './paths.js';
import { lockDirectory } from './dir-lock.js';
import { createMetrics, type Metrics } from './metrics.js';
import { QueryRecorder, type QueryStats } from './stats.js';
import { SessionRegistry, type OpenSessionOptions, type SessionHandle, type SessionInfo, type SessionSummary } from './sessions.js';
import type { Item, ItemInput, QueryControl, RetrieveRequest, RetrieveResults, SearchRequest, SearchResults, SignalInput } from './types.js';
import { checkBatch, checkId, defaultWindow } from './validate.js';
import { Meta, openStorage } from './storage.js';
import { recover } from './recovery.js';
import { WritePath } from './write-path.js';
import { Cursors, LazyCursor } from './cursor.js';
import { nextCursor, prepareRetrieve, prepareSearch, retrieveResults, searchResults, type PreparedRead, type ReadDeps } from './read-requests.js';
import { embedMissing, semanticSearch } from './embedding.js';
import type { User, UserInput, UserRegistry } from './users.js';
import { checkUserFilter, type UserCreatorInput, type UserItemInput } from './user-requests.js';
import { estimateBytes, QueryFront, type QueryPlan } from './query-front.js';
import { LinkServer } from './worker-link.js';
import { threadHandlers } from './thread-handlers.js';
import type { HostInit } from './worker-host.js';

/** The query workers' entry when the database has a worker module. */
const WORKER_HOST_FILENAME = new URL('./worker-host.js', import.meta.url).href;

/** What the fault-injection tests reach behind the facade; not exported from the package. */
export interface TidalDbInternals {
  /** The writer connection (e.g. to set `max_page_count` and make commits fail with SQLITE_FULL). */
  readonly writer: Database.Database;
  readonly pool: QueryPool;
  /** Service-time estimates per level (tests record samples to steer deadline-based levels). */
  readonly recorder: QueryRecorder;
  readonly sharing: WorkSharing;
}

/** A validated query's control options and the level it runs at. */
const internals = new WeakMap<TidalDb, TidalDbInternals>();

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

/** The internals of an open database, for tests that inject faults. */
export function internalsOf(db: TidalDb): TidalDbInternals {
  const found = internals.get(db);
  if (found === undefined) throw new InternalError('not a TidalDb');
  return found;
}

/**
 * An embedded ranking database. Open one with {@link TidalDb.builder}; close it with
 * {@link TidalDb.close} (or `await using`).
 *
 * A facade: the write path (validation, ordinals and slot reservation, group commit, checkpoints)
 * is {@link WritePath}, recovery on open is {@link recover}, the file format is `storage.ts`, and
 * queries go to the worker pool with their in-flight slot from the load detector.
 */
export class TidalDb implements AsyncDisposable {
  readonly #o: FilledOptions;
  readonly #schema: QuerySchema;
  readonly #dir: string;
  readonly #ephemeral: boolean;
  readonly #db: Database.Database;
  readonly #store: SignalStore;
  readonly #writes: WritePath;
  /** The highest acknowledged sequence number, beside the database; null when nothing is promised. */
  #ackMark: AckMark | null = null;
  /** Copies SQLite's WAL into the database file on a worker thread, so commits only append. */
  #walCheckpointer: WalCheckpointer | null = null;
  readonly #pool: QueryPool;
  readonly #queries: QueryFront;
  readonly #sessions: SessionRegistry;
  readonly #users: UserRegistry;
  readonly #cursors: Cursors;
  /** What validating a query needs of this thread (sessions, users, co-engagement). */
  readonly #readDeps: ReadDeps;
  /** The items version every acknowledged item write reached, for worker modules' threads (BigInt64). */
  readonly #itemsVersionCell = new BigInt64Array(new SharedArrayBuffer(8));
  /** The worker module's link to every worker thread, once they started it (see workerModule). */
  #link: LinkServer | null = null;
  #host: HostInit | null = null;
  /** Releases the directory's lock (see dir-lock.ts). */
  #unlock!: () => void;
  /** Whether `TIDAL_WORKER_NICE_UNSET` was raised (once per database, not once per warm). */
  #niceWarned = false;
  #metrics: Metrics | null = null;
  #closing: Promise<void> | undefined;

  /** Starts configuring a database. */
  static builder(): TidalDbBuilder {
    return new TidalDbBuilder();
  }

  /** Opens a database from options (what the builder calls). */
  static async open(options: TidalOptions): Promise<TidalDb> {
    const o = resolveOptions(options);
    const db = new TidalDb(o);
    try {
      if (o.metricsRegistry) {
        const load = db.#queries.load;
        db.#metrics = await createMetrics(o.metricsRegistry, { inFlight: () => load.inFlight, level: () => load.level, rejected: () => load.rejected });
        db.#queries.attachMetrics(db.#metrics);
      }
      await db.warm();
    } catch (err) {
      await db.close().catch(() => {});
      throw err;
    }
    return db;
  }

  private constructor(o: FilledOptions) {
    this.#o = o;
    this.#schema = o.schema;
    this.#ephemeral = o.dir === null;
    try {
      this.#dir = o.dir ?? mkdtempSync(join(tmpdir(), 'tidal-'));
    } catch (err) {
      throw new InternalError(`could not create a temporary directory for an ephemeral database: ${(err as Error).message}`, { cause: err });
    }
    prepareDirectory(this.#dir);
    const file = join(this.#dir, 'tidal.db');
    try {
      this.#unlock = lockDirectory(this.#dir);
      this.#db = openWriterConnection(file, o.durability);
    } catch (err) {
      this.#unlock?.();
      if (this.#ephemeral) rmSync(this.#dir, { recursive: true, force: true });
      throw openFailure(err, this.#dir, file);
    }
    try {
      openStorage(this.#db, file);
      const meta = new Meta(this.#db);
      this.#cursors = new Cursors(meta);
      const log = new SignalLog(this.#db);
      const checkpointRows = new SlotCheckpoint(this.#db, SLOT_BYTES, o.capacity.signalSlots);
      this.#store = SignalStore.create({ kinds: o.schema.kinds, maxOrdinals: o.capacity.items, maxSlots: o.capacity.signalSlots });
      this.#ackMark = o.durability === 'none' ? null : AckMark.open(`${file}-ack`, o.onWarning);
      const start = recover({ db: this.#db, meta, log, checkpointRows, store: this.#store, ackMark: this.#ackMark, schema: o.schema, file, onWarning: o.onWarning });
      this.#users = start.users;
      this.#sessions = new SessionRegistry(this.#db, o.sessions, o.rateLimit, o.clock, o.onWarning);
      this.#readDeps = {
        schema: o.schema,
        defaultWindow: defaultWindow(o.schema),
        cursors: this.#cursors,
        exclude: (session) => this.#sessions.exclude(session, this.#o.clock()),
        userState: (req) => this.#userState(req),
        relatedTask: (id) => this.#relatedTask(id),
      };
      const memoryGuard = MemoryGuard.create(o.memoryGuard, o.onWarning);
      this.#walCheckpointer = WalCheckpointer.start(this.#db, file, o.onWarning);
      this.#writes = new WritePath(
        o,
        {
          db: this.#db,
          meta,
          log,
          checkpointRows,
          store: this.#store,
          sessions: this.#sessions,
          users: start.users,
          memoryGuard,
          ackMark: this.#ackMark,
          onWarning: o.onWarning,
          itemsVersionCell: this.#itemsVersionCell,
        },
        start,
      );
      const inFlight = new SharedArrayBuffer(4);
      const host: HostInit | undefined =
        o.workerModule === null
          ? undefined
          : {
              module: o.workerModule,
              thread: {
                link: `tidal-link-${randomUUID()}`,
                inFlight,
                itemsVersion: this.#itemsVersionCell.buffer as SharedArrayBuffer,
                cursorSecret: this.#cursors.secretHex,
                thresholds: o.loadThresholds,
                admissionLimit: o.admissionLimit,
                workers: o.workers,
                loadManagement: o.loadManagement,
                schema: o.schema,
                defaultWindow: defaultWindow(o.schema),
              },
            };
      this.#host = host ?? null;
      this.#pool = new QueryPool(
        { file, schema: o.schema, arena: this.#store.arena, nice: o.workerNice, ...(host ? { host } : {}) },
        o.workers,
        host ? { filename: WORKER_HOST_FILENAME, eventLoop: true } : {},
      );
      const sharing = new WorkSharing(o.workSharing, o.clock, () => performance.now());
      const writes = this.#writes;
      this.#queries = new QueryFront(this.#pool, sharing, {
        thresholds: o.loadThresholds,
        admissionLimit: o.admissionLimit,
        workers: o.workers,
        loadManagement: o.loadManagement,
        clock: o.clock,
        itemsVersion: () => writes.itemsVersion,
        inFlight,
      });
      internals.set(this, { writer: this.#db, pool: this.#pool, recorder: this.#queries.recorder, sharing });
    } catch (err) {
      this.#ackMark?.close();
      void this.#walCheckpointer?.close();
      this.#db.close();
      this.#unlock();
      if (this.#ephemeral) rmSync(this.#dir, { recursive: true, force: true });
      throw openFailure(err, this.#dir, file);
    }
  }

  #check(operation: string): void {
    if (this.#closing) throw new ClosedError(operation);
  }

  // ---- items -------------------------------------------------------------------------------

  /** Inserts or replaces one item; resolves when it is durable. */
  async upsert(item: ItemInput): Promise<void> {
    await this.upsertItems([item]);
  }

  /** Inserts or replaces items, all or none; resolves when they are durable and visible to queries. */
  async upsertItems(items: readonly ItemInput[]): Promise<void> {
    this.#check('upsert items');
    checkBatch('items', items);
    await this.#writes.upsertItems(await embedMissing(this, items, this.#schema.embeddingDims, this.#o.onWarning));
  }

  /** The stored item, or undefined if there is none (or it was deleted). */
  async get(id: string): Promise<Item | undefined> {
    this.#check('get an item');
    checkId('id', id);
    const row = this.#writes.item(id);
    if (!row) return undefined;
    const item: Item = { id: row.id, metadata: row.metadata, createdAt: row.createdAt };
    if (row.text !== null) item.text = row.text;
    if (row.embedding !== null) item.embedding = row.embedding;
    return item;
  }

  /** Deletes an item: it never comes back from a query. Its signal state is kept (a re-upsert finds it). */
  async delete(id: string): Promise<void> {
    this.#check('delete an item');
    checkId('id', id);
    await this.#writes.delete(id);
  }

  // ---- signals -----------------------------------------------------------------------------

  /** Records one signal; resolves with its sequence number once it is durable. */
  async signal(signal: SignalInput): Promise<number> {
    return this.signals([signal]);
  }

  /**
   * Records signals, all or none (one invalid entry refuses the batch, nothing is written);
   * resolves with the first one's sequence number once all are durable (an empty batch writes nothing
   * and resolves with the last number handed out so far; items writes draw from the same sequence).
   */
  async signals(batch: readonly SignalInput[]): Promise<number> {
    this.#check('write signals');
    checkBatch('signals', batch);
    return this.#writes.signals(batch, null);
  }

  /** The signal values of one item per kind (decayed score, counts, windows, velocity), as queries see them now. */
  itemSignals(id: string): Record<string, SignalValues> {
    this.#check('read signals');
    checkId('id', id);
    const ordinal = this.#writes.ordinalOf(id);
    if (ordinal === undefined) return {};
    return readItemSignals(this.#store, this.#schema, ordinal, this.#o.clock(), false);
  }

  // ---- users -------------------------------------------------------------------------------

  /**
   * Inserts or replaces users, all or none; resolves when they are durable. A replaced user keeps
   * the state their writes built (seen set, preference vector, affinities, hides, blocks, follows).
   */
  async upsertUsers(users: readonly UserInput[]): Promise<void> {
    this.#check('upsert users');
    checkBatch('users', users);
    await this.#writes.upsertUsers(users);
  }

  /** The stored user and their state, or undefined if there is none (or it was deleted). */
  async getUser(id: string): Promise<User | undefined> {
    this.#check('get a user');
    checkId('id', id);
    return this.#users.get(id, this.#o.clock());
  }

  /** Deletes a user and all their state; resolves at once when the id was never written. */
  async deleteUser(id: string): Promise<void> {
    this.#check('delete a user');
    checkId('id', id);
    await this.#writes.deleteUser(id);
  }

  /** Hides an item from a user: no retrieve or search naming the user returns it again, at any level. */
  async hide(edge: UserItemInput): Promise<void> {
    this.#check('hide an item');
    await this.#userEdge('hide', edge);
  }

  /** Undoes {@link TidalDb.hide}. */
  async unhide(edge: UserItemInput): Promise<void> {
    this.#check('unhide an item');
    await this.#userEdge('unhide', edge);
  }

  /** Blocks a creator for a user: none of their items comes back to the user from any query naming them. */
  async block(edge: UserCreatorInput): Promise<void> {
    this.#check('block a creator');
    await this.#creatorEdge('block', edge);
  }

  /** Undoes {@link TidalDb.block}. */
  async unblock(edge: UserCreatorInput): Promise<void> {
    this.#check('unblock a creator');
    await this.#creatorEdge('unblock', edge);
  }

  /** Follows a creator: `userFilter: { following: true }` keeps only followed creators' items. */
  async follow(edge: UserCreatorInput): Promise<void> {
    this.#check('follow a creator');
    await this.#creatorEdge('follow', edge);
  }

  /** Undoes {@link TidalDb.follow}. */
  async unfollow(edge: UserCreatorInput): Promise<void> {
    this.#check('unfollow a creator');
    await this.#creatorEdge('unfollow', edge);
  }

  async #userEdge(op: 'hide' | 'unhide', edge: UserItemInput): Promise<void> {
    if (typeof edge !== 'object' || edge === null) throw new InvalidInputError(op, 'an object { user, item }', edge);
    await this.#writes.hide(op, edge.user, edge.item);
  }

  async #creatorEdge(op: 'block' | 'unblock' | 'follow' | 'unfollow', edge: UserCreatorInput): Promise<void> {
    if (typeof edge !== 'object' || edge === null) throw new InvalidInputError(op, 'an object { user, creator }', edge);
    await this.#writes.relate(op, edge.user, edge.creator);
  }

  // ---- agent sessions ----------------------------------------------------------------------

  /**
   * Opens an agent session; durable when it returns. The handle is plain data (`{ id, agentId }`)
   * and stays valid across restarts while the session is open.
   * @throws InvalidInputError for an empty or oversized agent or a ttlMs that is not a whole number
   * of milliseconds from 1 to a year; CapacityError past `sessions.maxOpen` open sessions.
   */
  openSession(options: OpenSessionOptions): SessionHandle {
    this.#check('open a session');
    return this.#sessions.open(options, this.#o.clock());
  }

  /**
   * Records one signal attributed to the session: a real signal, validated and written like
   * `signal()`, that also marks the item as seen by the session and extends its TTL. Resolves with
   * its sequence number once durable.
   * @throws SessionClosedError when the session is closed or expired; RateLimitedError when its
   * token bucket is empty (nothing is written; counted in the summary's `rejections`);
   * InvalidInputError for a bad signal.
   */
  async sessionSignal(session: SessionHandle, signal: SignalInput): Promise<number> {
    this.#check('write session signals');
    const now = this.#o.clock();
    const s = this.#sessions.admit(session, now);
    return this.#sessions.write(s, () => this.#writes.signals([signal], { id: s.handle.id, at: now }));
  }

  /**
   * Closes the session and resolves with its summary once the signals it already sent are durable
   * (they are counted). Its rate-limit bucket and seen set are dropped.
   * @throws SessionClosedError when it is already closed (by the caller or its TTL).
   */
  async closeSession(session: SessionHandle): Promise<SessionSummary> {
    this.#check('close a session');
    return this.#sessions.close(session, this.#o.clock());
  }

  /** The open sessions, in the order they were opened. */
  openSessions(): SessionInfo[] {
    this.#check('list sessions');
    return this.#sessions.list(this.#o.clock());
  }

  /**
   * Closes every session past its TTL now, as the sweeper does every `sessions.sweepIntervalMs`;
   * resolves with their summaries (each also goes to `onSessionExpired`).
   */
  async sweepSessions(): Promise<SessionSummary[]> {
    this.#check('sweep sessions');
    return this.#sessions.sweep(this.#o.clock());
  }

  // ---- queries -----------------------------------------------------------------------------

  /**
   * Ranked retrieval by a profile (trending, popular, new), optionally around a context vector.
   * Takes an optional `signal`, `timeoutMs`, `criticality` and `level` (see {@link QueryControl}).
   */
  retrieve(req: RetrieveRequest): Promise<RetrieveResults> {
    const admitted = this.#queries.admit(req, 'retrieve', this.#closing !== undefined);
    return admitted instanceof InFlightGuard ? this.#retrieve(req, admitted) : Promise.reject(admitted);
  }

  /** Validates and plans a retrieve, then runs it on a worker. */
  #retrieve(req: RetrieveRequest, guard: InFlightGuard): Promise<RetrieveResults> {
    let read: PreparedRead<RetrieveTask>;
    let plan: QueryPlan;
    try {
      read = prepareRetrieve(req, this.#readDeps);
      plan = this.#queries.plan(req, 'retrieve', guard);
    } catch (err) {
      guard[Symbol.dispose]();
      return Promise.reject(err);
    }
    return this.#retrieveInWorker(read, plan, performance.now());
  }

  async #retrieveInWorker(read: PreparedRead<RetrieveTask>, plan: QueryPlan, started: number): Promise<RetrieveResults> {
    const { task } = read;
    // A session's query excludes what that session has seen: it is its own, never shared.
    // A user's query is theirs too (their hidden items, blocks and seen set): never shared.
    const a = await this.#queries.run('retrieve', task, plan, task.exclude === null && !task.user && !task.after, (r) => (r.itemsJson === undefined ? estimateBytes(r.items) : 2 * r.itemsJson.length));
    const r = a.result;
    const next = new LazyCursor(() => this.#nextCursor(read, r.nowMs, r.items, r.ordinals));
    return retrieveResults(r, { level: plan.level, reason: plan.reason, ageMs: a.ageMs, started }, next, performance.now());
  }

  /**
   * Text (BM25), vector (ANN) or hybrid (RRF) search. Takes an optional `signal`, `timeoutMs`,
   * `criticality` and `level` (see {@link QueryControl}); with `semantic: true`, embeds `text`
   * through the configured embedder first (see {@link semanticSearch}).
   */
  search(req: SearchRequest): Promise<SearchResults> {
    if (req?.semantic !== undefined) return semanticSearch(this, req, this.#schema.embeddingDims, (r) => this.search(r));
    const admitted = this.#queries.admit(req, 'search', this.#closing !== undefined);
    return admitted instanceof InFlightGuard ? this.#search(req, admitted) : Promise.reject(admitted);
  }

  async #search(req: SearchRequest, guard: InFlightGuard): Promise<SearchResults> {
    let read: PreparedRead<SearchTask>;
    let plan: QueryPlan;
    try {
      read = prepareSearch(req, this.#readDeps);
      plan = this.#queries.plan(req, 'search', guard);
    } catch (err) {
      guard[Symbol.dispose]();
      throw err;
    }
    const { task } = read;
    const started = performance.now();
    const a = await this.#queries.run('search', task, plan, !task.user && !task.after, (r) => (r.hitsJson === undefined ? estimateBytes(r.hits) : 2 * r.hitsJson.length));
    const r = a.result;
    const next = new LazyCursor(() => this.#nextCursor(read, r.nowMs, r.hits, r.ordinals));
    return searchResults(r, { level: plan.level, reason: plan.reason, ageMs: a.ageMs, started }, next, performance.now());
  }

  /** The cursor of the page after `rows`, or null when it was the last one (see {@link nextCursor}). */
  #nextCursor(read: PreparedRead<RetrieveTask | SearchTask>, nowMs: number | undefined, rows: readonly { id: string }[], ordinals?: ArrayLike<number>): string | null {
    return nextCursor(this.#cursors, read, nowMs, rows, ordinals, (id) => this.#writes.ordinalOf(id));
  }

  /** The user state a query naming `user` sends its worker (null without one); validates `userFilter`. */
  #userState(req: RetrieveRequest | SearchRequest): UserQueryState | null {
    const filter = checkUserFilter(req.userFilter, req.user !== undefined, this.#schema);
    if (req.user === undefined) return null;
    const id = checkId('user', req.user);
    // Profile `following` ranks the followed creators' items: the filter comes with it.
    return this.#users.queryState('user', id, filter.unseen, filter.following || (req as RetrieveRequest).profile === 'following');
  }

  /** The co-engagement list profile `related` ranks, for the item `id`. */
  #relatedTask(id: string): RetrieveTask['related'] {
    checkId('item', id);
    const ordinal = this.#writes.ordinalOf(id);
    if (ordinal === undefined) throw new InvalidInputError('item', "the id of an item written or signalled (profile 'related')", id);
    return this.#users.relatedTask(ordinal);
  }

  #envelope(level: DegradationLevel = DegradationLevel.Full): TaskEnvelope {
    return { level, nowMs: this.#o.clock(), itemsVersion: this.#writes.itemsVersion };
  }

  /**
   * Load figures: queries in flight, the current level, queries served per level, refusals,
   * latency percentiles (end to end, and worker service time per level), and the write queue.
   */
  stats(): QueryStats {
    const gc = this.#writes.groupCommit;
    return this.#queries.stats({ ...gc.stats, queueLimit: gc.options.maxQueueEvents });
  }


  /** The in-flight count, the level a query entering now would get, and the limits (read-only). */
  get load(): LoadView {
    return this.#queries.load;
  }

  /**
   * Makes every query worker load the items committed so far (catalog and ANN index), so the next
   * queries do not pay for it. `open()` calls it; call it again after a bulk load.
   *
   * The ANN index is built once: one worker builds it from the items (or reuses the snapshot saved
   * in the database directory, bringing it up to date when many rows changed after it) and saves
   * it; every worker then maps the saved file and applies the few rows newer than it. Each result
   * says where the index came from (`annSource`: 'built' or 'snapshot') and how many rows newer
   * than the stored snapshot were applied (`annRowsApplied`). An unusable snapshot is rebuilt, with
   * one `TIDAL_ANN_SNAPSHOT_REBUILT` process warning.
   */
  async warm(): Promise<WarmResult[]> {
    this.#check('warm');
    const results = await this.#pool.warm(this.#envelope());
    // Only the elected worker reports one, and a worker's process.emitWarning would not reach this
    // thread's 'warning' listeners: raise it here.
    for (const r of results) {
      if (r.annWarning) this.#o.onWarning(r.annWarning);
    }
    const unset = results.find((r) => r.niceWarning !== undefined);
    if (unset?.niceWarning && !this.#niceWarned) {
      this.#niceWarned = true;
      this.#o.onWarning(unset.niceWarning);
    }
    if (this.#host !== null && this.#link === null) await this.#startWorkerModule(results.map((r) => r.threadId));
    return results;
  }

  /**
   * Opens this thread's ends of every worker's link, tells the workers to start the worker
   * module, and resolves once each has (rejects with the first failure, naming the module).
   */
  async #startWorkerModule(threadIds: readonly number[]): Promise<void> {
    const waiting = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();
    const started = threadIds.map((id) => new Promise<void>((resolve, reject) => waiting.set(id, { resolve, reject })));
    const moduleStarted = (threadId: number, failure: string | null): null => {
      const w = waiting.get(threadId);
      waiting.delete(threadId);
      if (failure === null) w?.resolve();
      else w?.reject(new InternalError(`the worker module ${this.#host!.module.url} failed to start in worker thread ${threadId}: ${failure}`));
      return null;
    };
    this.#link = new LinkServer(this.#host!.thread.link, threadIds, { ...threadHandlers(this, this.#queries), moduleStarted });
    this.#link.control({ op: 'start' });
    await Promise.all(started);
  }

  /** Commits every queued write now. */
  async flush(): Promise<void> {
    this.#check('flush');
    this.#writes.flush();
  }

  /** The directory holding the data (a temporary one for ephemeral databases). */
  get path(): string {
    return this.#dir;
  }

  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /**
   * Flushes pending writes, checkpoints the signal state, waits for running queries, stops the
   * workers and closes SQLite. Idempotent: every call returns the same promise.
   */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    let failure: unknown;
    // The worker module stops first (an acceptor stops taking requests); writes it sent before
    // are in the queue the flush below commits.
    this.#link?.close();
    try {
      this.#writes.close(!this.#ephemeral);
    } catch (err) {
      failure = err;
    }
    // After the flush, so the session signals it committed are counted. Closes every open
    // session and stops the sweeper.
    try {
      this.#sessions.shutdown(this.#o.clock());
    } catch (err) {
      failure ??= err;
    }
    await this.#pool.drain();
    // Brings the ANN snapshot up to the committed items, so the next open maps it and applies
    // nothing (see QueryPool.persistAnn). An ephemeral database's directory is deleted below anyway.
    if (!this.#ephemeral) await this.#pool.persistAnn(this.#envelope());
    await this.#pool.destroy();
    await this.#walCheckpointer?.close();
    this.#db.close();
    this.#ackMark?.close();
    this.#unlock();
    if (this.#ephemeral) rmSync(this.#dir, { recursive: true, force: true });
    if (failure) throw TidalError.is(failure) ? failure : new InternalError(`close failed: ${(failure as Error)?.message ?? String(failure)}`, { cause: failure });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

export type { Explain, RetrievedItem, SearchHit };
