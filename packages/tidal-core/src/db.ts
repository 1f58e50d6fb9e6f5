import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { Piscina } from 'piscina';
import { CapacityError, ClosedError, DegradationLevel, InternalError, InvalidInputError, LoadDetector, TidalError } from 'tidal-load';
import { AckMark, GroupCommit, MemoryGuard, SignalLog, SlotCheckpoint, WalCheckpointer, openWriterConnection } from 'tidal-wal';
import {
  ItemsWriter,
  MAX_EVENT_MS,
  SignalStore,
  SLOT_BYTES,
  WORKER_FILENAME,
  type Explain,
  type QuerySchema,
  type RetrievedItem,
  type RetrieveTask,
  type SearchHit,
  type SearchTask,
  type SignalValues,
  type StoredItem,
  type TaskEnvelope,
  type WarmResult,
  type WorkerInit,
  type WorkerRetrieveResult,
  type WorkerSearchResult,
  type WorkerTask,
} from 'tidal-query';
import { mergeSessionOptions, resolveOptions, type FilledOptions, type TidalOptions } from './options.js';
import { prepareDirectory } from './paths.js';
import { Metrics } from './metrics.js';
import { QueryRecorder, type QueryStats } from './stats.js';
import { SessionRegistry, type OpenSessionOptions, type SessionHandle, type SessionInfo, type SessionOptions, type SessionSummary } from './sessions.js';
import type { RateLimiterConfig } from 'tidal-load';
import type {
  Item,
  ItemInput,
  RetrieveRequest,
  RetrieveResults,
  SearchRequest,
  SearchResults,
  SignalInput,
} from './types.js';
import {
  checkBatch,
  checkDiversity,
  checkFilter,
  checkFiniteNumber,
  checkId,
  checkWeight,
  isValidId,
  isValidWeight,
  checkLimit,
  checkMetadata,
  checkProfile,
  checkText,
  checkTime,
  checkVector,
  checkWindow,
  defaultWindow,
  MAX_ID_LENGTH,
} from './validate.js';

const META_DDL = `
  CREATE TABLE IF NOT EXISTS tidal_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS signal_checkpoint (chunk INTEGER PRIMARY KEY, data BLOB NOT NULL);
`;

/** Tasks a query worker holds at once (one running, the rest waiting in its message queue). */
const PIPELINE_DEPTH = 4;

type WriteEvent =
  | { t: 0; ordinal: number; id: string; kind: number; weight: number; at: number; session: string | null }
  | { t: 1; item: StoredItem; replacing: boolean }
  | { t: 2; ordinal: number };

/**
 * An embedded ranking database. Open one with {@link TidalDb.builder}; close it with
 * {@link TidalDb.close} (or `await using`).
 */
export class TidalDb implements AsyncDisposable {
  readonly #o: FilledOptions;
  readonly #schema: QuerySchema;
  readonly #dir: string;
  readonly #ephemeral: boolean;
  readonly #db: Database.Database;
  readonly #log: SignalLog;
  /** The signal store's checkpoint rows, rewritten incrementally. */
  readonly #checkpointRows: SlotCheckpoint;
  readonly #items: ItemsWriter;
  readonly #store: SignalStore;
  readonly #kindIndex: Map<string, number>;
  readonly #ids = new Map<string, number>();
  readonly #gc: GroupCommit<WriteEvent>;
  /** The highest acknowledged sequence number, beside the database; null when nothing is promised. */
  #ackMark: AckMark | null = null;
  /** Copies SQLite's WAL into the database file on a worker thread, so commits only append. */
  #walCheckpointer: WalCheckpointer | null = null;
  readonly #pool: Piscina;
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #detector: LoadDetector;
  readonly #recorder = new QueryRecorder();
  readonly #metrics: Metrics | null;
  readonly #defaultWindow: RetrieveTask['window'];
  readonly #sessions: SessionRegistry;
  /** The next ordinal to hand out: above every ordinal ever committed. */
  #nextOrdinal = 0;
  /**
   * Ordinals handed out whose `items` row is not committed yet. A batch that fails to commit leaves
   * them here, so the next write of the same id still inserts the row.
   */
  readonly #unpersisted = new Set<number>();
  #itemsVersion = 0;
  #eventsSinceCheckpoint = 0;
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
    this.#dir = o.dir ?? mkdtempSync(join(tmpdir(), 'tidal-'));
    prepareDirectory(this.#dir);
    const file = join(this.#dir, 'tidal.db');
    this.#db = openWriterConnection(file, o.durability);
    try {
      this.#db.exec(META_DDL);
      this.#log = new SignalLog(this.#db);
      this.#checkpointRows = new SlotCheckpoint(this.#db, SLOT_BYTES, o.capacity.signalSlots);
      this.#items = new ItemsWriter(this.#db);
      this.#kindIndex = new Map(o.schema.kinds.map((k, i) => [k.name, i]));
      this.#defaultWindow = defaultWindow(o.schema);
      this.#checkStoredSchema();
      this.#store = SignalStore.create({ kinds: o.schema.kinds, maxOrdinals: o.capacity.items, maxSlots: o.capacity.signalSlots });
      for (const { ordinal, id } of this.#items.keys()) this.#ids.set(id, ordinal);
      for (const ordinal of this.#ids.values()) if (ordinal >= this.#nextOrdinal) this.#nextOrdinal = ordinal + 1;
      this.#itemsVersion = this.#items.maxVersion();
      this.#recoverSignals();
      this.#sessions = new SessionRegistry(this.#db, o.sessions, o.rateLimit, o.clock, o.onWarning);
      const memoryGuard = MemoryGuard.create(o.memoryGuard, o.onWarning);
      this.#ackMark = o.durability === 'none' ? null : AckMark.open(`${file}-ack`, o.onWarning);
      this.#walCheckpointer = WalCheckpointer.start(this.#db, file, o.onWarning);
      this.#gc = new GroupCommit<WriteEvent>(
        this.#db,
        { commit: (events, firstSeq) => this.#commit(events, firstSeq), afterCommit: (events) => this.#afterCommit(events) },
        this.#recoveredLastSeq(),
        o.groupCommit,
        { memoryGuard, ackMark: this.#ackMark },
      );
      const init: WorkerInit = { file, schema: o.schema, arena: this.#store.arena };
      this.#detector = new LoadDetector({
        thresholds: o.loadThresholds,
        admissionLimit: o.admissionLimit,
        retryAfterMs: (inFlight) => this.#retryAfterMs(inFlight),
      });
      this.#metrics = o.metricsRegistry
        ? new Metrics(o.metricsRegistry, {
            inFlight: () => this.#detector.inFlight,
            level: () => this.#detector.level,
            rejected: () => this.#detector.rejected,
          })
        : null;
      this.#pool = new Piscina({
        filename: WORKER_FILENAME,
        minThreads: o.workers,
        maxThreads: o.workers,
        // Workers hold the catalog and ANN index; an idle one must not be reaped and rebuilt.
        idleTimeout: 2 ** 31 - 1,
        // Tasks are pipelined: a worker holds up to this many, so it starts the next one the
        // moment it finishes instead of waiting for the main thread to answer its completion
        // message. Under overload the main thread is busiest exactly when that round trip
        // matters; without pipelining, measured goodput at 3× capacity fell to 55% of C.
        concurrentTasksPerWorker: PIPELINE_DEPTH,
        workerData: init,
      });
    } catch (err) {
      this.#ackMark?.close();
      void this.#walCheckpointer?.close();
      this.#db.close();
      if (this.#ephemeral) rmSync(this.#dir, { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * The last sequence number to continue from. SQLite recovers a prefix of the commits (it stops at
   * the first torn or corrupt WAL frame), so the only possible loss is at the tail; the ack mark
   * says whether acknowledged commits were in it. If so, warn, and continue numbering after the
   * highest acknowledged number so no number a caller has seen is ever handed out twice.
   */
  #recoveredLastSeq(): number {
    const recovered = this.#log.lastSeq();
    const acked = this.#ackMark?.read();
    if (acked === undefined || acked <= recovered) return recovered;
    this.#o.onWarning({
      code: 'TIDAL_WAL_TAIL_LOST',
      message:
        `${acked - recovered} acknowledged events (sequence numbers ${recovered + 1} to ${acked}) were not recovered from ` +
        `${join(this.#dir, 'tidal.db-wal')}: its tail was torn or corrupt and SQLite kept only the commits before it. ` +
        `The database is consistent as of sequence number ${recovered}; new writes are numbered from ${acked + 1}.`,
    });
    return acked;
  }

  /** Refuses to reinterpret stored data under an incompatible schema. */
  #checkStoredSchema(): void {
    const get = this.#db.prepare('SELECT value FROM tidal_meta WHERE key = ?').pluck();
    const storedDims = get.get('embeddingDims') as string | undefined;
    if (storedDims !== undefined && Number(storedDims) !== this.#schema.embeddingDims) {
      const any = this.#db.prepare('SELECT 1 FROM items WHERE embedding IS NOT NULL LIMIT 1').get();
      if (any) {
        throw new InvalidInputError('schema.embeddingDims', `${storedDims}, the dimension of the embeddings already stored`, this.#schema.embeddingDims);
      }
    }
    this.#db.prepare('INSERT OR REPLACE INTO tidal_meta (key, value) VALUES (?, ?)').run('embeddingDims', String(this.#schema.embeddingDims));
  }

  /** Signal state = the last checkpoint + the log after it, with kinds remapped by name. */
  #recoverSignals(): void {
    const get = this.#db.prepare('SELECT value FROM tidal_meta WHERE key = ?').pluck();
    const storedKinds = JSON.parse((get.get('kinds') as string | undefined) ?? 'null') as string[] | null;
    const current = this.#schema.kinds.map((k) => k.name);
    const remap = (storedKinds ?? current).map((name) => this.#kindIndex.get(name) ?? -1);
    const saved = this.#checkpointRows.load();
    if (saved.length > 0) this.#store.importState(saved, remap);
    let replayed = 0;
    for (const rec of this.#log.replay(this.#log.checkpointSeq())) {
      const kind = remap[rec.kind] ?? -1;
      if (kind >= 0) {
        this.#store.apply(rec.ordinal, kind, rec.weight, rec.at);
        this.#checkpointRows.markDirty(this.#store.slotOf(rec.ordinal, kind));
      }
      replayed++;
    }
    this.#eventsSinceCheckpoint = replayed;
    const changed = storedKinds === null || storedKinds.join('\u0000') !== current.join('\u0000');
    // The log stores kind numbers: after a schema change, checkpoint at once so the log never mixes
    // two numberings. Dropping a kind renumbers slots, so that checkpoint rewrites every row.
    if (changed && (saved.length > 0 || replayed > 0)) {
      this.#checkpointRows.markAllDirty();
      this.#checkpoint(this.#log.lastSeq());
    }
    this.#db.prepare('INSERT OR REPLACE INTO tidal_meta (key, value) VALUES (?, ?)').run('kinds', JSON.stringify(current));
  }

  /**
   * Writes the signal slots changed since the last checkpoint and marks the log through
   * `throughSeq` as covered, in one transaction; the covered rows are then deleted a slice per
   * batch (see #commit). Runs between batches, when the store reflects exactly the events
   * committed so far.
   */
  #checkpoint(throughSeq: number): void {
    this.#db.transaction(() => {
      this.#checkpointRows.write(this.#store.arena.slots, this.#store.slotsUsed(), SLOT_BYTES);
      this.#db.prepare('INSERT OR REPLACE INTO tidal_meta (key, value) VALUES (?, ?)').run('kinds', JSON.stringify(this.#schema.kinds.map((k) => k.name)));
      this.#log.checkpointThrough(throughSeq);
    })();
    this.#checkpointRows.committed();
    this.#eventsSinceCheckpoint = 0;
  }

  #commit(events: readonly WriteEvent[], firstSeq: number): void {
    let seq = firstSeq;
    let version = this.#itemsVersion;
    for (const e of events) {
      if (e.t === 0) {
        if (this.#unpersisted.has(e.ordinal)) this.#items.ensureKey(e.ordinal, e.id);
        this.#log.appendAt(seq, e);
      } else if (e.t === 1) {
        this.#items.upsert(e.item, ++version, e.replacing);
      } else {
        this.#items.delete(e.ordinal, ++version);
      }
      seq++;
    }
    this.#sessions.persistBatch(events);
    this.#log.setLastSeq(seq - 1);
    // Log rows a checkpoint covers are deleted here, two per event written: deleting costs about
    // what inserting does, so the backlog a checkpoint leaves drains within half a checkpoint
    // interval, and no single batch pays for a million deletes.
    this.#log.reclaim(2 * events.length);
  }

  #afterCommit(events: readonly WriteEvent[]): void {
    this.#sessions.applyBatch(events);
    let signals = 0;
    for (const e of events) {
      if (e.t === 0) {
        this.#store.apply(e.ordinal, e.kind, e.weight, e.at);
        this.#checkpointRows.markDirty(this.#store.slotOf(e.ordinal, e.kind));
        signals++;
        this.#unpersisted.delete(e.ordinal);
      } else {
        this.#itemsVersion++;
        if (e.t === 1) this.#unpersisted.delete(e.item.ordinal);
      }
    }
    this.#eventsSinceCheckpoint += signals;
    // The group commit advances nextSeq before this hook runs, so nextSeq − 1 is this batch's last
    // event. A higher number would mark events not yet written as checkpointed, and replay would
    // skip them after the next crash.
    if (this.#eventsSinceCheckpoint >= this.#o.checkpointEveryEvents) this.#checkpoint(this.#gc.nextSeq - 1);
  }

  #ordinal(id: string): { ordinal: number; known: boolean } {
    const known = this.#ids.get(id);
    if (known !== undefined) return { ordinal: known, known: true };
    const ordinal = this.#nextOrdinal;
    if (ordinal >= this.#o.capacity.items) {
      throw new CapacityError('item ids', this.#o.capacity.items, 'raise the capacity.items builder option');
    }
    this.#nextOrdinal++;
    this.#ids.set(id, ordinal);
    this.#unpersisted.add(ordinal);
    return { ordinal, known: false };
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
    // Validated and given ordinals only once the write is admitted (see #signalEvents).
    await this.#gc.enqueue(() => {
      const now = this.#o.clock();
      const valid = items.map((it, i) => this.#validateItem(it, `items[${i}]`, now));
      return valid.map((v): WriteEvent => {
        const { ordinal, known } = this.#ordinal(v.id);
        return { t: 1, item: { ...v, ordinal }, replacing: known };
      });
    });
  }

  #validateItem(it: ItemInput, at: string, now: number): Omit<StoredItem, 'ordinal'> {
    if (typeof it !== 'object' || it === null) throw new InvalidInputError(at, 'an item object', it);
    return {
      id: checkId(`${at}.id`, it.id),
      text: checkText(`${at}.text`, it.text),
      metadata: checkMetadata(`${at}.metadata`, it.metadata, this.#schema),
      createdAt: it.createdAt === undefined ? now : checkTime(`${at}.createdAt`, it.createdAt),
      embedding: it.embedding === undefined || it.embedding === null ? null : checkVector(`${at}.embedding`, it.embedding, this.#schema.embeddingDims),
    };
  }

  /** The stored item, or undefined if there is none (or it was deleted). */
  async get(id: string): Promise<Item | undefined> {
    this.#check('get an item');
    checkId('id', id);
    const row = this.#items.get(id);
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
    const ordinal = this.#ids.get(id);
    if (ordinal === undefined) return;
    await this.#gc.enqueue([{ t: 2, ordinal }]);
  }

  // ---- signals -----------------------------------------------------------------------------

  /** Records one signal; resolves with its sequence number once it is durable. */
  async signal(signal: SignalInput): Promise<number> {
    return this.signals([signal]);
  }

  /**
   * Records signals, all or none (one invalid entry refuses the batch, nothing is written);
   * resolves with the first one's sequence number once all are durable.
   */
  async signals(batch: readonly SignalInput[]): Promise<number> {
    this.#check('write signals');
    checkBatch('signals', batch);
    return this.#gc.enqueue(this.#signalEvents(batch, null));
  }

  /**
   * The builder of a batch's events, for `GroupCommit.enqueue`, which runs it only once the write
   * is admitted. So a refused write costs no per-signal work (under overload most writes are
   * refused, and validating them first cost about a quarter of the accepted throughput), and
   * no ordinal is handed out to it (one handed out to a refused write would never get its `items`
   * key). It validates the whole batch before handing out any ordinal.
   */
  #signalEvents(batch: readonly SignalInput[], session: string | null): () => WriteEvent[] {
    return () => this.#buildSignalEvents(batch, session);
  }

  #buildSignalEvents(batch: readonly SignalInput[], session: string | null): WriteEvent[] {
    const now = this.#o.clock();
    const events = batch.map((s, i): WriteEvent & { t: 0 } => {
      // Fast path for a well-formed signal, accepting exactly what the checks below accept but
      // without building their field names (four strings per signal, ~15 % of ingest time).
      // Anything it does not accept falls through to the checks, which name the bad field.
      if (typeof s === 'object' && s !== null) {
        const kind = this.#kindIndex.get(s.kind as string);
        const { item, weight, at } = s as { item: unknown; weight: unknown; at: unknown };
        if (
          kind !== undefined &&
          isValidId(item) && isValidWeight(weight) &&
          (at === undefined || (typeof at === 'number' && at >= 0 && at < MAX_EVENT_MS))
        ) {
          return { t: 0, ordinal: -1, id: item, kind, weight: weight ?? 1, at: at ?? now, session };
        }
      }
      const at = batch.length === 1 ? 'signal' : `signals[${i}]`;
      if (typeof s !== 'object' || s === null) throw new InvalidInputError(at, 'a signal object', s);
      const kind = this.#kindIndex.get(s.kind as string);
      if (kind === undefined) {
        throw new InvalidInputError(`${at}.kind`, `a signal kind declared in the schema (${[...this.#kindIndex.keys()].join(', ')})`, s.kind);
      }
      return {
        t: 0,
        ordinal: -1,
        id: checkId(`${at}.item`, s.item),
        kind,
        weight: checkWeight(`${at}.weight`, s.weight, 1),
        at: s.at === undefined ? now : checkTime(`${at}.at`, s.at),
        session,
      };
    });
    // Ordinals are handed out only once the whole batch is valid; filled in place, as this runs for
    // every signal on the hottest path.
    for (const e of events) e.ordinal = this.#ids.get(e.id) ?? this.#ordinal(e.id).ordinal;
    return events;
  }

  /** The signal values of one item per kind (decayed score, counts, windows, velocity), as queries see them now. */
  itemSignals(id: string): Record<string, SignalValues> {
    this.#check('read signals');
    checkId('id', id);
    const ordinal = this.#ids.get(id);
    const out: Record<string, SignalValues> = {};
    if (ordinal === undefined) return out;
    const now = this.#o.clock();
    this.#schema.kinds.forEach((spec, k) => {
      const slot = this.#store.slotOf(ordinal, k);
      if (slot >= 0) out[spec.name] = this.#store.read(slot, now, false, spec.windows, spec.velocity);
    });
    return out;
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
    if (typeof options?.agent === 'string') checkId('agent', options.agent);
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
    return this.#sessions.write(s, now, () => this.#gc.enqueue(this.#signalEvents([signal], s.handle.id)));
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

  /** Ranked retrieval by a profile (trending, popular, new), optionally around a context vector. */
  async retrieve(req: RetrieveRequest): Promise<RetrieveResults> {
    this.#check('retrieve');
    // Admission first: one atomic add and a compare before any per-query work.
    using guard = this.#detector.enter();
    if (typeof req !== 'object' || req === null) throw new InvalidInputError('request', 'a retrieve request object', req);
    const task: RetrieveTask = {
      profile: checkProfile(req.profile, this.#schema),
      context: req.context === undefined ? null : checkVector('context', req.context, this.#schema.embeddingDims),
      filter: checkFilter(req.filter, this.#schema),
      diversity: checkDiversity(req.diversity, this.#schema),
      limit: checkLimit('limit', req.limit, 20),
      window: checkWindow(req.window, this.#defaultWindow),
      exclude: this.#sessions.exclude(req.session, this.#o.clock()),
    };
    const started = performance.now();
    const env = this.#envelope(guard.level);
    const r = (await this.#query('retrieve', { op: 'retrieve', env, task }, started)) as WorkerRetrieveResult;
    return { items: r.items, degradationLevel: env.level, warnings: r.warnings, explain: r.explain, tookMs: performance.now() - started };
  }

  /** Text (BM25), vector (ANN) or hybrid (RRF) search. */
  async search(req: SearchRequest): Promise<SearchResults> {
    this.#check('search');
    using guard = this.#detector.enter();
    if (typeof req !== 'object' || req === null) throw new InvalidInputError('request', 'a search request object', req);
    const text = req.text === undefined ? null : checkText('text', req.text);
    const vector = req.vector === undefined ? null : checkVector('vector', req.vector, this.#schema.embeddingDims);
    if (text === null && vector === null) throw new InvalidInputError('request', 'a search with text, vector or both', req);
    const boost = checkFiniteNumber('boost', req.boost, 0);
    if (boost < 0) throw new InvalidInputError('boost', 'a finite number ≥ 0', boost);
    const task: SearchTask = {
      text,
      vector,
      filter: checkFilter(req.filter, this.#schema),
      diversity: checkDiversity(req.diversity, this.#schema),
      limit: checkLimit('limit', req.limit, 10),
      boost,
    };
    const started = performance.now();
    const env = this.#envelope(guard.level);
    const r = (await this.#query('search', { op: 'search', env, task }, started)) as WorkerSearchResult;
    return { hits: r.hits, mode: r.mode, degradationLevel: env.level, warnings: r.warnings, explain: r.explain, tookMs: performance.now() - started };
  }

  #envelope(level: DegradationLevel = DegradationLevel.Full): TaskEnvelope {
    return { level, nowMs: this.#o.clock(), itemsVersion: this.#itemsVersion };
  }

  /** Runs a query task and records its latency, level and service time. */
  async #query(op: 'retrieve' | 'search', msg: WorkerTask & { op: 'retrieve' | 'search' }, started: number): Promise<WorkerRetrieveResult | WorkerSearchResult> {
    let r: WorkerRetrieveResult | WorkerSearchResult;
    try {
      r = (await this.#run(msg)) as WorkerRetrieveResult | WorkerSearchResult;
    } catch (err) {
      this.#recorder.failed++;
      this.#metrics?.failed();
      throw err;
    }
    const latency = performance.now() - started;
    this.#recorder.record(msg.env.level, latency, r.serviceMs);
    this.#metrics?.served(op, msg.env.level, latency);
    return r;
  }

  /**
   * Retry-After for a refused query: the time the queries in flight need to drain at the measured
   * service time, inFlight × meanServiceMs / workers, clamped to 1 ms – 10 s.
   */
  #retryAfterMs(inFlight: number): number {
    const ms = Math.ceil((inFlight * this.#recorder.meanServiceMs) / this.#o.workers);
    return Math.min(10_000, Math.max(1, ms));
  }

  /**
   * Load figures: queries in flight, the current level, queries served per level, refusals,
   * latency percentiles (end to end, and worker service time per level), and the write queue.
   */
  stats(): QueryStats {
    const writes = { ...this.#gc.stats, queueLimit: this.#gc.options.maxQueueEvents };
    return this.#recorder.snapshot(this.#detector.inFlight, this.#detector.level, this.#detector.rejected, writes);
  }

  /** The in-flight counter and the level thresholds (for tests and dashboards). */
  get load(): LoadDetector {
    return this.#detector;
  }

  async #run(msg: WorkerTask): Promise<unknown> {
    const p = this.#pool.run(msg).catch((err: unknown) => {
      throw TidalError.is(err) ? err : new InternalError(`query worker failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    });
    this.#inFlight.add(p);
    try {
      return await p;
    } finally {
      this.#inFlight.delete(p);
    }
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
    const workers = this.#o.workers;
    // Int32 1–3: the election of the one worker that builds (or loads) the ANN index.
    const barrier = new SharedArrayBuffer(16);
    const env = this.#envelope();
    const byThread = new Map<number, WarmResult>();
    // Piscina may hand two warm tasks to one worker (a worker still starting is skipped, and a
    // worker takes several tasks at once), so rounds continue until every thread has answered.
    // Each round is cheap once the index is built; the bound only guards against a pool that
    // never starts a thread.
    for (let round = 0; round < 20 && byThread.size < workers; round++) {
      const runs: Promise<unknown>[] = [];
      for (let i = byThread.size; i < workers; i++) runs.push(this.#run({ op: 'warm', env, barrier }));
      for (const r of (await Promise.all(runs)) as WarmResult[]) {
        // A thread that ran two tasks keeps the one that reports the election, if either does.
        if (!byThread.has(r.threadId) || r.annElected) byThread.set(r.threadId, r);
      }
      if (byThread.size < workers) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const results = [...byThread.values()];
    // Only the elected worker reports one, and a worker's process.emitWarning would not reach this
    // thread's 'warning' listeners: raise it here.
    for (const r of results) {
      if (r.annWarning) this.#o.onWarning(r.annWarning);
    }
    return results;
  }

  /** Commits every queued write now. */
  async flush(): Promise<void> {
    this.#check('flush');
    this.#gc.flushSync();
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
    try {
      this.#gc.close();
      if (this.#eventsSinceCheckpoint > 0 && !this.#ephemeral) this.#checkpoint(this.#gc.nextSeq - 1);
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
    await Promise.allSettled([...this.#inFlight]);
    // Brings the ANN snapshot up to the committed items, so the next open maps it and applies
    // nothing. One worker does it; it costs about what applying the changes since the snapshot
    // costs, gives up past the budget (the next open then applies them), and is not waited for
    // beyond it. An ephemeral database's directory is deleted below anyway.
    if (!this.#ephemeral) {
      const budgetMs = 30_000;
      let timer: NodeJS.Timeout | undefined;
      const task: WorkerTask = { op: 'persist-ann', env: this.#envelope(), budgetMs };
      await Promise.race([
        // A failure only costs the next open the changes since the last snapshot.
        this.#pool.run(task).catch(() => undefined),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, budgetMs + 10_000);
        }),
      ]);
      clearTimeout(timer);
    }
    await this.#pool.destroy();
    await this.#walCheckpointer?.close();
    this.#db.close();
    this.#ackMark?.close();
    if (this.#ephemeral) rmSync(this.#dir, { recursive: true, force: true });
    if (failure) throw failure;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** Fluent configuration; every setter validates in {@link TidalDbBuilder.open}. */
export class TidalDbBuilder {
  readonly #o: Partial<TidalOptions> = {};

  /** Keep the database in this directory. */
  path(dir: string): this {
    this.#o.path = dir;
    return this;
  }

  /** A throwaway database in a temporary directory, deleted on close. */
  ephemeral(): this {
    this.#o.ephemeral = true;
    return this;
  }

  schema(schema: TidalOptions['schema']): this {
    this.#o.schema = schema;
    return this;
  }

  /** Number of query worker threads (default: the number of cores). */
  workers(n: number): this {
    this.#o.workers = n;
    return this;
  }

  /** Source of "now" in milliseconds (default Date.now). */
  clock(fn: () => number): this {
    this.#o.clock = fn;
    return this;
  }

  durability(d: NonNullable<TidalOptions['durability']>): this {
    this.#o.durability = d;
    return this;
  }

  groupCommit(options: NonNullable<TidalOptions['groupCommit']>): this {
    this.#o.groupCommit = options;
    return this;
  }

  capacity(options: NonNullable<TidalOptions['capacity']>): this {
    this.#o.capacity = options;
    return this;
  }

  /** In-flight counts at which queries degrade (see {@link TidalOptions.loadThresholds}). */
  loadThresholds(thresholds: NonNullable<TidalOptions['loadThresholds']>): this {
    this.#o.loadThresholds = thresholds;
    return this;
  }

  /** Hard cap on queries in flight: `'auto'`, `0` (off) or a whole number above the last threshold. */
  admissionLimit(limit: NonNullable<TidalOptions['admissionLimit']>): this {
    this.#o.admissionLimit = limit;
    return this;
  }

  /** `false`: no degradation and no admission cap (for comparisons). */
  loadManagement(enabled: boolean): this {
    this.#o.loadManagement = enabled;
    return this;
  }

  /** Export metrics into this prom-client registry. */
  metrics(registry: NonNullable<TidalOptions['metricsRegistry']>): this {
    this.#o.metricsRegistry = registry;
    return this;
  }

  checkpointEveryEvents(n: number): this {
    this.#o.checkpointEveryEvents = n;
    return this;
  }

  /** Write refusal under host memory pressure: `{ floorBytes: 'auto' | 0 | bytes, meminfoPath }`. */
  memoryGuard(options: NonNullable<TidalOptions['memoryGuard']>): this {
    this.#o.memoryGuard = options;
    return this;
  }

  /** Where warnings go (default: process.emitWarning). */
  onWarning(sink: NonNullable<TidalOptions['onWarning']>): this {
    this.#o.onWarning = sink;
    return this;
  }

  /**
   * Rate limit on session signals: `RateLimiterConfig.limited(ratePerSecond, burst)` per (agent,
   * session), or `RateLimiterConfig.unlimited()` (the default). Validated at `open()`.
   */
  rateLimiter(config: RateLimiterConfig): this {
    this.#o.rateLimiter = config;
    return this;
  }

  /** Session options: `{ defaultTtlMs, sweepIntervalMs, maxOpen, onExpired }` (see {@link SessionOptions}). */
  sessions(options: SessionOptions): this {
    this.#o.sessions = mergeSessionOptions(this.#o.sessions, options);
    return this;
  }

  /** How often the TTL sweeper runs, in milliseconds (default 60 000). */
  sweepIntervalMs(ms: number): this {
    return this.sessions({ sweepIntervalMs: ms });
  }

  /** Called with the summary of every session its TTL closes (see {@link SessionOptions.onExpired}). */
  onSessionExpired(callback: NonNullable<SessionOptions['onExpired']>): this {
    return this.sessions({ onExpired: callback });
  }

  /** Validates the options and opens the database, with its workers warm. */
  open(): Promise<TidalDb> {
    return TidalDb.open(this.#o as TidalOptions);
  }
}

export type { Explain, RetrievedItem, SearchHit };
