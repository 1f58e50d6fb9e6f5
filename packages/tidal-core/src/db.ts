import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { ClosedError, InFlightGuard, InternalError, InvalidInputError, type LoadView } from 'tidal-load';
import { readItemSignals, type QuerySchema, type SignalStore, type SignalValues, type WarmResult } from 'tidal-query';
import type { AnnBuild } from './ann-build.js';
import type { QueryPool } from './query-pool.js';
import type { WorkSharing } from './sharing.js';
import {
  checkOptionObject,
  resolveOptions,
  type FilledOptions,
  type ResolvedOptions,
  type TidalOptions,
  type WarmOptions,
} from './options.js';
import { TidalDbBuilder } from './builder.js';
import type { SchemaDefinition } from './schema.js';
import type { QueryRecorder, QueryStats, VectorSearchMode } from './stats.js';
import type { OpenSessionOptions, SessionHandle, SessionInfo, SessionSummary } from './sessions.js';
import type { Item, ItemInput, RetrieveRequest, RetrieveResults, SearchRequest, SearchResults, SignalInput } from './types.js';
import { checkBatch, checkFile, checkId } from './validate.js';
import type { WritePath } from './write-path.js';
import { storedItem } from './read-requests.js';
import { READS, type PlannedRead, type ReadOp, type ReadTypes } from './read-pipeline.js';
import { embedMissing, semanticSearch } from './embedding.js';
import type { User, UserInput } from './user-types.js';
import type { UserRegistry } from './users.js';
import { creatorEdge, itemEdge, type UserCreatorInput, type UserItemInput } from './user-requests.js';
import type { QueryFront } from './query-front.js';
import type { LinkServer } from './worker-link.js';
import { threadHandlers } from './thread-handlers.js';
import { envelope, openParts, partsMemory, raiseWarmWarnings, shutdown, startWorkerModule, type DbParts } from './lifecycle.js';
import { fixMmapThreshold } from './native-heap.js';
import { installReplicaSnapshot, replicaHost, writeReplicaSnapshot } from './replication.js';
import { exportAnnBuildMetrics, exportMemoryMetrics, exportReplicationMetrics } from './metrics.js';

/** What the fault-injection tests reach behind the facade; not exported from the package. */
export interface TidalDbInternals {
  /** The writer connection (e.g. to set `max_page_count` and make commits fail with SQLITE_FULL). */
  readonly writer: Database.Database;
  readonly pool: QueryPool;
  /** Service-time estimates per level (tests record samples to steer deadline-based levels). */
  readonly recorder: QueryRecorder;
  readonly sharing: WorkSharing;
  /** The signal state, the schema the workers query by and the users: what a query context on the database's thread needs (the bench's for_you sweep). */
  readonly store: SignalStore;
  readonly schema: QuerySchema;
  readonly users: UserRegistry;
  /** The ANN build on its own thread (tests hold it, or make it fail). */
  readonly annBuild: AnnBuild;
  /** What the last warm round's workers reported (`open()`'s included), for the bench. */
  lastWarm(): readonly WarmResult[];
  /** `open()` on this thread, for the bench: the synchronous opening (storage, recovery), then the warm. */
  openMs(): { parts: number; warm: number };
  /** Settles once the warm rounds started so far (the one after a build's end included) have. */
  warmed(): Promise<unknown>;
  /** Whether the write path's ordinal map holds every stored id (it fills after the open: item-ordinals.ts). */
  idsFilled(): boolean;
}

/** Each open database's internals, for {@link internalsOf}. */
const internals = new WeakMap<TidalDb, TidalDbInternals>();

/** The internals of an open database, for tests that inject faults. */
export function internalsOf(db: TidalDb): TidalDbInternals {
  const found = internals.get(db);
  if (found === undefined) throw new InternalError('not a TidalDb');
  return found;
}

/**
 * An embedded ranking database. Open one with {@link TidalDb.builder}; close it with
 * {@link TidalDb.close} (or `await using`). A facade: the write path (validation, ordinals and slot reservation, group commit, checkpoints)
 * is {@link WritePath}; opening (recovery included), warming and closing are lifecycle.ts; a query
 * is admitted by its {@link QueryFront}, validated and planned, and its result built, by the read
 * pipeline (read-pipeline.ts), and it runs on the worker pool.
 */
export class TidalDb<S extends SchemaDefinition = SchemaDefinition> implements AsyncDisposable {
  readonly #o: FilledOptions;
  readonly #schema: QuerySchema;
  /** Every part of the open database (see lifecycle.ts); the reads' pipeline is `#p.reads` (read-pipeline.ts). */
  readonly #p: DbParts;
  readonly #store: SignalStore;
  readonly #writes: WritePath;
  readonly #queries: QueryFront;
  readonly #users: UserRegistry;
  /** The worker module's link to every worker thread, once they started it (see workerModule). */
  #link: LinkServer | null = null;
  /** Whether `TIDAL_WORKER_NICE_UNSET` was raised (once per database, not once per warm). */
  #niceWarned = false;
  /** The last warm round (see {@link #warmRound}), settled or not. */
  #warming: Promise<unknown> = Promise.resolve();
  #lastWarm: readonly WarmResult[] = [];
  #openMs = { parts: 0, warm: 0 };
  #closing: Promise<void> | undefined;

  /** Starts configuring a database. */
  static builder<S extends SchemaDefinition = SchemaDefinition>(): TidalDbBuilder<S> {
    return new TidalDbBuilder<S>();
  }

  /**
   * Makes `dir` a new replica from `snapshot`, a peer's {@link TidalDb.replicaSnapshot}: open it
   * afterwards with a replication link on the same stream, and it follows on from where the peer
   * was, without replaying the stream from its start.
   * @throws InvalidInputError (`dir`) when `dir` already holds a database; (`snapshot`) for a file
   * that is not a replicating database's snapshot.
   */
  static bootstrapReplica(snapshot: string, dir: string): void {
    checkFile('snapshot', snapshot);
    checkFile('dir', dir);
    installReplicaSnapshot(snapshot, dir, Date.now());
  }

  /** Opens a database from options (what the builder calls). */
  static async open<const S extends SchemaDefinition = SchemaDefinition>(options: TidalOptions<S>): Promise<TidalDb<S>> {
    const o = resolveOptions(options);
    const t0 = performance.now();
    await fixMmapThreshold(o.mmapThresholdKb);
    const db = new TidalDb<S>(o);
    db.#openMs.parts = performance.now() - t0;
    try {
      if (o.metricsRegistry) {
        await db.#queries.exportMetrics(o.metricsRegistry);
        await exportAnnBuildMetrics(o.metricsRegistry, () => db.#p.annBuild.stats());
        await exportMemoryMetrics(o.metricsRegistry, () => db.stats().memory);
      }
      const t1 = performance.now();
      await db.warm();
      db.#openMs.warm = performance.now() - t1;
      db.#writes.fillIds();
      // Last: the link publishes and applies from here on, on a database that is open and warm.
      if (o.replication !== null && db.#p.replica !== null) {
        if (o.metricsRegistry) await exportReplicationMetrics(o.metricsRegistry, () => db.stats().replication);
        o.replication.start(replicaHost(db.#p.replica, db.#writes, o.clock, o.onWarning));
      }
    } catch (err) {
      await db.close().catch(() => {});
      throw err;
    }
    return db;
  }

  /**
   * One warm of every worker; rounds never overlap (the one run after a build ends and the caller's
   * own), and one whose workers say `building` starts the build unless it runs.
   */
  #warmRound(): Promise<WarmResult[]> {
    const round = this.#warming.then(async () => {
      const { annBuild } = this.#p;
      const annArgs = { backgroundRows: this.#o.annBackgroundRows, running: annBuild.running };
      const results = await this.#p.pool.warm(envelope(this.#o, this.#writes), annArgs);
      this.#niceWarned = raiseWarmWarnings(results, this.#o.onWarning, this.#niceWarned);
      if (results.some((r) => r.annSource === 'building')) annBuild.start();
      this.#lastWarm = results;
      // What the round's reads and loads freed is not reused by the steady state: given back now.
      await this.#p.nativeHeap.trim();
      return results;
    });
    this.#warming = round.catch(() => {});
    return round;
  }

  private constructor(resolved: ResolvedOptions) {
    const p = openParts(resolved);
    const o = p.options;
    this.#o = o;
    this.#schema = o.schema;
    this.#p = p;
    ({ store: this.#store, writes: this.#writes, queries: this.#queries, users: this.#users } = p);
    // A finished build is adopted by a warm of its own, so no query pays for mapping it.
    p.annBuild.onDone = () => {
      if (!this.#closing) this.#warmRound().catch(() => {});
    };
    internals.set(this, {
      writer: p.db,
      pool: p.pool,
      recorder: p.queries.recorder,
      sharing: p.sharing,
      store: p.store,
      schema: o.schema,
      users: p.users,
      annBuild: p.annBuild,
      lastWarm: () => this.#lastWarm,
      openMs: () => ({ ...this.#openMs }),
      warmed: () => this.#warming,
      idsFilled: () => this.#writes.idsFilled,
    });
  }

  #check(operation: string): void {
    if (this.#closing) throw new ClosedError(operation);
  }

  // ---- items -------------------------------------------------------------------------------

  /** Inserts or replaces one item; resolves when it is durable. */
  async upsert(item: ItemInput<S>): Promise<void> {
    await this.upsertItems([item]);
  }

  /** Inserts or replaces items, all or none; resolves when they are durable and visible to queries. */
  async upsertItems(items: readonly ItemInput<S>[]): Promise<void> {
    this.#check('upsert items');
    checkBatch('items', items);
    await this.#writes.upsertItems(await embedMissing(this, items, this.#schema.embeddingDims, this.#o.onWarning));
  }

  /** The stored item, or undefined if there is none (or it was deleted). */
  async get(id: string): Promise<Item | undefined> {
    this.#check('get an item');
    checkId('id', id);
    return storedItem(this.#writes.item(id));
  }

  /** Deletes an item: it never comes back from a query. Its signal state is kept (a re-upsert finds it). */
  async delete(id: string): Promise<void> {
    this.#check('delete an item');
    checkId('id', id);
    await this.#writes.delete(id);
  }

  // ---- signals -----------------------------------------------------------------------------

  /** Records one signal; resolves with its sequence number once it is durable. */
  async signal(signal: SignalInput<S>): Promise<number> {
    return this.signals([signal]);
  }

  /**
   * Records signals, all or none (one invalid entry refuses the batch, nothing is written);
   * resolves with the first one's sequence number once all are durable (an empty batch writes nothing
   * and resolves with the last number handed out so far; items writes draw from the same sequence).
   */
  async signals(batch: readonly SignalInput<S>[]): Promise<number> {
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
    await this.#writes.hide('hide', ...itemEdge('hide', edge));
  }

  /** Undoes {@link TidalDb.hide}. */
  async unhide(edge: UserItemInput): Promise<void> {
    this.#check('unhide an item');
    await this.#writes.hide('unhide', ...itemEdge('unhide', edge));
  }

  /** Blocks a creator for a user: none of their items comes back to the user from any query naming them. */
  async block(edge: UserCreatorInput): Promise<void> {
    this.#check('block a creator');
    await this.#writes.relate('block', ...creatorEdge('block', edge));
  }

  /** Undoes {@link TidalDb.block}. */
  async unblock(edge: UserCreatorInput): Promise<void> {
    this.#check('unblock a creator');
    await this.#writes.relate('unblock', ...creatorEdge('unblock', edge));
  }

  /** Follows a creator: `userFilter: { following: true }` keeps only followed creators' items. */
  async follow(edge: UserCreatorInput): Promise<void> {
    this.#check('follow a creator');
    await this.#writes.relate('follow', ...creatorEdge('follow', edge));
  }

  /** Undoes {@link TidalDb.follow}. */
  async unfollow(edge: UserCreatorInput): Promise<void> {
    this.#check('unfollow a creator');
    await this.#writes.relate('unfollow', ...creatorEdge('unfollow', edge));
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
    return this.#p.sessions.open(options, this.#o.clock());
  }

  /**
   * Records one signal attributed to the session: a real signal, validated and written like
   * `signal()`, that also marks the item as seen by the session and extends its TTL. Resolves with
   * its sequence number once durable.
   * @throws SessionClosedError when the session is closed or expired; RateLimitedError when its
   * token bucket is empty (nothing is written; counted in the summary's `rejections`);
   * InvalidInputError for a bad signal.
   */
  async sessionSignal(session: SessionHandle, signal: SignalInput<S>): Promise<number> {
    this.#check('write session signals');
    const now = this.#o.clock();
    const s = this.#p.sessions.admit(session, now);
    return this.#p.sessions.write(s, () => this.#writes.signals([signal], { id: s.handle.id, at: now }));
  }

  /**
   * Closes the session and resolves with its summary once the signals it already sent are durable
   * (they are counted). Its rate-limit bucket and seen set are dropped.
   * @throws SessionClosedError when it is already closed (by the caller or its TTL).
   */
  async closeSession(session: SessionHandle): Promise<SessionSummary> {
    this.#check('close a session');
    return this.#p.sessions.close(session, this.#o.clock());
  }

  /** The open sessions, in the order they were opened. */
  openSessions(): SessionInfo[] {
    this.#check('list sessions');
    return this.#p.sessions.list(this.#o.clock());
  }

  /**
   * Closes every session past its TTL now, as the sweeper does every `sessions.sweepIntervalMs`;
   * resolves with their summaries (each also goes to `onSessionExpired`).
   */
  async sweepSessions(): Promise<SessionSummary[]> {
    this.#check('sweep sessions');
    return this.#p.sessions.sweep(this.#o.clock());
  }

  // ---- queries -----------------------------------------------------------------------------

  /**
   * Ranked retrieval by a profile (trending, popular, new), optionally around a context vector.
   * Takes an optional `signal`, `timeoutMs`, `criticality` and `level` (see {@link QueryControl}).
   */
  retrieve(request: RetrieveRequest<S>): Promise<RetrieveResults> {
    // The schema's type narrows what compiles; the checks at run time are the same for every S.
    const req = request as RetrieveRequest;
    const admitted = this.#queries.admit(req, 'retrieve', this.#closing !== undefined);
    return admitted instanceof InFlightGuard ? this.#retrieve(req, admitted) : Promise.reject(admitted);
  }

  /** Validates and plans a retrieve, then runs it on a worker. */
  #retrieve(req: RetrieveRequest, guard: InFlightGuard): Promise<RetrieveResults> {
    let q: PlannedRead<'retrieve'>;
    try {
      q = this.#p.reads.start('retrieve', req, guard);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#inWorker(q);
  }

  /** Runs a planned read on a worker (through work sharing and the scheduler) and builds its result. */
  async #inWorker<Op extends ReadOp>(q: PlannedRead<Op>): Promise<ReadTypes[Op]['results']> {
    if (q.read.next !== null) return this.#fromPin(q);
    const kind = READS[q.op];
    const a = await this.#queries.run(q.op, q.read.task, q.plan, kind.shareable(q.read.task), kind.bytes);
    return this.#p.reads.finish(q, a.result, a.ageMs);
  }

  /** A later page of a cursor chain: cut from its pinned ranking on this thread, no worker runs. */
  #fromPin<Op extends ReadOp>(q: PlannedRead<Op>): ReadTypes[Op]['results'] {
    try {
      const out = this.#p.reads.fromPin(q);
      this.#queries.recorder.record(out.degradationLevel, performance.now() - q.started, null);
      return out;
    } finally {
      q.plan.guard[Symbol.dispose]();
    }
  }

  /**
   * Text (BM25), vector (ANN) or hybrid (RRF) search. Takes an optional `signal`, `timeoutMs`,
   * `criticality` and `level` (see {@link QueryControl}); with `semantic: true`, embeds `text`
   * through the configured embedder first (see {@link semanticSearch}).
   */
  search(request: SearchRequest<S>): Promise<SearchResults> {
    const req = request as SearchRequest;
    if (req?.semantic !== undefined) return semanticSearch(this, req, this.#schema.embeddingDims, (r) => this.search(r));
    const admitted = this.#queries.admit(req, 'search', this.#closing !== undefined);
    if (!(admitted instanceof InFlightGuard)) return Promise.reject(admitted);
    try {
      return this.#inWorker(this.#p.reads.start('search', req, admitted));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Load figures: queries in flight, the current level, queries served per level, refusals,
   * latency percentiles (end to end, and worker service time per level), the write queue, and the
   * cursor chains' pinned rankings.
   */
  stats(): QueryStats {
    const gc = this.#writes.groupCommit;
    const pins = this.#p.pins.stats(this.#o.clock());
    const stats = this.#queries.stats({ ...gc.stats, queueLimit: gc.options.maxQueueEvents }, pins);
    const { replica } = this.#p;
    if (replica !== null && this.#o.replication !== null) stats.replication = replica.stats(this.#o.replication.stats());
    stats.annBuild = this.#p.annBuild.stats();
    stats.vectorSearch = vectorSearchOf(this.#lastWarm);
    return { ...stats, memory: partsMemory(this.#p, pins) };
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
   *
   * When that would add more than `ann.backgroundRows` rows (20 000 by default), the warm does not
   * wait: the index is built on a thread of its own (`annSource: 'building'`, one
   * `TIDAL_ANN_BUILDING` warning, progress in `stats().annBuild`), vector searches are exact
   * meanwhile (`explain.vectorSearch: 'exact'`), and a warm run by itself when the build ends makes
   * every worker use it. With `waitForAnn: true` this call returns only once they do.
   * @throws InvalidInputError for options that are not `{ waitForAnn?: boolean }`; InternalError
   * (with `waitForAnn`) when the build failed.
   */
  async warm(options?: WarmOptions): Promise<WarmResult[]> {
    this.#check('warm');
    checkOptionObject('options', options, ['waitForAnn']);
    const waitForAnn = options?.waitForAnn ?? false;
    if (typeof waitForAnn !== 'boolean') throw new InvalidInputError('options.waitForAnn', 'a boolean', waitForAnn);
    let results = await this.#warmRound();
    while (waitForAnn && results.some((r) => r.annSource === 'building')) {
      await this.#p.annBuild.settled();
      this.#check('warm');
      const build = this.#p.annBuild.stats();
      if (build.state === 'failed') throw new InternalError(`the ANN index build failed: ${build.error ?? 'no reason given'}`);
      results = await this.#warmRound();
    }
    const { host } = this.#p;
    if (host !== null && this.#link === null) {
      const { link, started } = startWorkerModule(
        host,
        results.map((r) => r.threadId),
        threadHandlers(this, this.#queries),
      );
      this.#link = link;
      await started;
    }
    return results;
  }

  /**
   * Writes to `file` a copy of this replicating database as of its last commit, for a new replica
   * to start from ({@link TidalDb.bootstrapReplica}); queued writes are committed first.
   * @throws InvalidInputError (`replication`) when the database was opened without a replication link.
   */
  async replicaSnapshot(file: string): Promise<void> {
    this.#check('write a replica snapshot');
    if (this.#p.replica === null) throw new InvalidInputError('replication', 'a database opened with a replication link', null);
    checkFile('file', file);
    this.#writes.flush();
    writeReplicaSnapshot(this.#p.db, file);
  }

  /** Commits every queued write now. */
  async flush(): Promise<void> {
    this.#check('flush');
    this.#writes.flush();
  }

  /** The directory holding the data (a temporary one for ephemeral databases). */
  get path(): string {
    return this.#p.dir;
  }

  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /**
   * Flushes pending writes, checkpoints the signal state, waits for running queries, stops the
   * workers and closes SQLite. Idempotent: every call returns the same promise.
   */
  close(): Promise<void> {
    // The replication link stops first: nothing is applied or published while the rest closes.
    this.#closing ??= (this.#o.replication?.close() ?? Promise.resolve())
      .catch(() => {})
      .then(() => shutdown(this.#p, this.#o, this.#link));
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** How the workers answer vector searches after `warms` (see `QueryStats.vectorSearch`). */
function vectorSearchOf(warms: readonly WarmResult[]): VectorSearchMode {
  if (warms.some((r) => r.annSource === 'building')) return 'exact';
  return warms.length === 0 || warms.every((r) => r.annSource === 'none') ? 'none' : 'ann';
}
