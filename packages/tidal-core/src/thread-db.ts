/**
 * The database as code loaded into a query worker sees it (see `TidalDbBuilder.workerModule`):
 * reads run in the calling thread, on its own catalog, indexes, the shared signal state and the
 * shared user, session and co-engagement records (shared-state.ts), with no message to another
 * thread; writes, and the few reads only the database's thread can answer (see `retrieve`), travel
 * there through the worker's link (worker-link.ts), batched per turn of the event loop.
 *
 * Admission is shared: the in-flight count lives in the database's SharedArrayBuffer, so a query
 * admitted here counts for every thread, and its level is picked from the whole process's load.
 */
import { performance } from 'node:perf_hooks';
import { type DegradationLevel, InFlightGuard, InvalidInputError, SessionClosedError, type LoadView, type Thresholds } from 'tidal-load';
import type { QuerySchema, RetrieveTask, SharedRecordsBuffers } from 'tidal-query';
import { Cursors } from './cursor.js';
import { QueryFront } from './query-front.js';
import { READS, ReadPipeline, type PlannedRead, type ReadOp, type ReadTypes } from './read-pipeline.js';
import { WorkSharing, type FilledWorkSharing } from './sharing.js';
import { ThreadRunner } from './thread-runner.js';
import type { ReadDeps } from './read-requests.js';
import { SharedStateReader } from './shared-state.js';
import { checkUserFilter } from './user-requests.js';
import { checkId } from './validate.js';
import type { QueryControl, RetrieveRequest, RetrieveResults, SearchRequest, SearchResults, SignalInput } from './types.js';
import { Forwarding, type LinkCalls, type LinkMethod } from './thread-methods.js';
import type { LinkClient } from './worker-link.js';

/** What a worker thread is told about the database it serves (part of its `workerData`). */
export interface ThreadInit {
  /** The link's channel name (see worker-link.ts). */
  readonly link: string;
  /** The load detector's in-flight cell. */
  readonly inFlight: SharedArrayBuffer;
  /** The items version every acknowledged item write reached (a BigInt64 cell). */
  readonly itemsVersion: SharedArrayBuffer;
  /** Users, sessions and co-engagement lists, as the database's thread publishes them (see shared-state.ts). */
  readonly records: SharedRecordsBuffers;
  /** The cursor secret, hex: a cursor made here pages on in any thread, and the other way round. */
  readonly cursorSecret: string;
  readonly thresholds: Readonly<Thresholds>;
  /** The database's work sharing: identical queries one thread takes share an execution, as there. */
  readonly workSharing: FilledWorkSharing;
  readonly admissionLimit: number;
  readonly workers: number;
  readonly loadManagement: boolean;
  readonly schema: QuerySchema;
  readonly defaultWindow: RetrieveTask['window'];
}

/** Query records sent to the database's thread at most this often (its stats, metrics and dashboard). */
const REPORT_INTERVAL_MS = 100;

/** One query this thread answered, for the database thread's recorder: level, latency, service time. */
export type QueryRecord = readonly [op: 'retrieve' | 'search', level: DegradationLevel, latencyMs: number, serviceMs: number | null];

/** A cursor chain's pinned rankings live on the database's thread: every page of one goes there. */
function inChain(req: RetrieveRequest | SearchRequest): boolean {
  return req.paginate === true || req.cursor !== undefined;
}

/** A search whose text the database's thread embeds (`semantic`) goes there, and so does every page of a chain. */
function needsMainSearch(req: SearchRequest): boolean {
  return req.semantic !== undefined || inChain(req);
}

/**
 * Thrown by a read's dependency when only the database's thread can answer (a record the shared
 * state does not hold: an item nothing co-engaged with, a session past its TTL that thread closes,
 * a store that ran out of room): the read is forwarded there. One instance, made once: a throw
 * captures no stack.
 */
class Elsewhere extends Error {}
const ELSEWHERE = new Elsewhere('answered by the database thread');

/** The read dependencies of a thread that is not the database's: users, sessions and co-engagement from shared memory. */
function threadReadDeps(init: ThreadInit, cursors: Cursors, shared: SharedStateReader): ReadDeps {
  const { schema } = init;
  return {
    schema,
    defaultWindow: init.defaultWindow,
    cursors,
    chains: null,
    exclude: (session) => {
      if (session === undefined) return null;
      if (typeof session !== 'object' || session === null || typeof session.id !== 'string') {
        throw new InvalidInputError('session', 'a session handle returned by openSession()', session);
      }
      const s = shared.session(session.id);
      if (s === undefined) {
        if (shared.incomplete) throw ELSEWHERE;
        throw new SessionClosedError(session.id, 'retrieve with a session');
      }
      if (session.agentId !== s.agentId) {
        throw new InvalidInputError(
          'session.agentId',
          `the agent the session was opened for (${JSON.stringify(s.agentId)})`,
          session.agentId,
        );
      }
      // Past its TTL the database's thread closes it on the spot (and tells the application).
      if (Date.now() >= s.expiresAt) throw ELSEWHERE;
      return s.seen.length === 0 ? null : s.seen;
    },
    userState: (req) => {
      const filter = checkUserFilter(req.userFilter, req.user !== undefined, schema);
      if (req.user === undefined) return null;
      const id = checkId('user', req.user);
      const base = shared.user(id);
      if (base === undefined) {
        if (shared.incomplete) throw ELSEWHERE;
        throw new InvalidInputError('user', 'the id of a user written with upsertUsers (and not deleted)', id);
      }
      // Profile `following` ranks the followed creators' items: the filter comes with it.
      const following = filter.following || (req as RetrieveRequest).profile === 'following';
      return { ...base, seen: filter.unseen ? base.seen : null, following: following ? base.following : null };
    },
    relatedTask: (id) => {
      checkId('item', id);
      // Only lists with partners are shared: an unknown item, or one nothing co-engaged with, is the database thread's to tell.
      const task = shared.related(id);
      if (task === undefined) throw ELSEWHERE;
      return task;
    },
  };
}

/** A request without what cannot cross a thread (its AbortSignal stays here). */
function portable<T extends QueryControl>(req: T): T {
  if (req?.signal === undefined) return req;
  const { signal: _signal, ...rest } = req;
  return rest as T;
}

/**
 * The database as a worker thread's code uses it. Made by the query worker when the database was
 * opened with a worker module, and handed to the module's `start(db, data)`.
 */
export class ThreadDb extends Forwarding {
  readonly #link: LinkClient;
  readonly #runner = new ThreadRunner();
  readonly #queries: QueryFront;
  readonly #reads: ReadPipeline;
  #records: QueryRecord[] = [];
  #reportTimer: NodeJS.Timeout | undefined;
  /** Queries answered in this thread, and forwarded to the database's thread. */
  readonly counts = { local: 0, forwarded: 0 };
  readonly load: LoadView;

  constructor(init: ThreadInit, link: LinkClient) {
    super();
    this.#link = link;
    const itemsVersion = new BigInt64Array(init.itemsVersion);
    // The one query front, as on the database's thread, with this thread's runner: its clock is
    // the wall clock (Date.now), whatever builder.clock says there.
    this.#queries = new QueryFront(this.#runner, new WorkSharing(init.workSharing, Date.now, () => performance.now()), {
      thresholds: init.thresholds,
      admissionLimit: init.admissionLimit,
      workers: init.workers,
      loadManagement: init.loadManagement,
      clock: Date.now,
      itemsVersion: () => Number(Atomics.load(itemsVersion, 0)),
      inFlight: init.inFlight,
      onServed: (record) => this.#report(record),
    });
    this.load = this.#queries.load;
    const deps = threadReadDeps(init, Cursors.fromSecret(init.cursorSecret), new SharedStateReader(init.records));
    this.#reads = new ReadPipeline(
      deps,
      (req, op, guard) => this.#queries.plan(req, op, guard),
      () => undefined,
    );
  }

  // ---- reads, in this thread ------------------------------------------------------------

  /**
   * As `TidalDb.retrieve`. Runs here, personalized or not, unless only the database's thread can
   * answer it (a cursor chain; `related` on an item nothing co-engaged with; a session past its
   * TTL), which it then forwards there (its `signal` stays here: a forwarded query is not aborted
   * with it).
   */
  retrieve(req: RetrieveRequest): Promise<RetrieveResults> {
    const elsewhere = () => this.#forward('retrieve', [portable(req)]);
    if (typeof req === 'object' && req !== null && inChain(req)) return elsewhere();
    return this.#local('retrieve', req, elsewhere);
  }

  /** As `TidalDb.search`; with `semantic` or a cursor chain, forwarded to the database's thread. */
  search(req: SearchRequest): Promise<SearchResults> {
    const elsewhere = () => this.#forward('search', [portable(req)]);
    if (typeof req === 'object' && req !== null && needsMainSearch(req)) return elsewhere();
    return this.#local('search', req, elsewhere);
  }

  /**
   * Admission (one atomic add on the shared count), validation and the level now, as on the
   * database's thread; the query itself runs in this thread after this turn of the event loop,
   * with the others this turn admitted (thread-runner.ts), so the count holds every request this
   * thread has taken and not answered, and a burst sees its own load.
   */
  #local<Op extends ReadOp>(
    operation: Op,
    req: ReadTypes[Op]['req'],
    elsewhere: () => Promise<ReadTypes[Op]['results']>,
  ): Promise<ReadTypes[Op]['results']> {
    const admitted = this.#queries.admit(req, operation, false);
    if (!(admitted instanceof InFlightGuard)) return Promise.reject(admitted);
    let q: PlannedRead<Op>;
    try {
      q = this.#reads.start(operation, req, admitted);
    } catch (err) {
      return err === ELSEWHERE ? elsewhere() : Promise.reject(err);
    }
    return this.#run(q);
  }

  async #run<Op extends ReadOp>(q: PlannedRead<Op>): Promise<ReadTypes[Op]['results']> {
    const kind = READS[q.op];
    const a = await this.#queries.run(q.op, q.read.task, q.plan, kind.shareable(q.read.task), kind.bytes);
    this.counts.local++;
    return this.#reads.finish(q, a.result, a.ageMs);
  }

  /** Queries taken by this thread and not run yet. */
  get queued(): number {
    return this.#runner.waiting;
  }

  #report(record: QueryRecord): void {
    this.#records.push(record);
    if (this.#reportTimer !== undefined) return;
    this.#reportTimer = setTimeout(() => {
      this.#reportTimer = undefined;
      const records = this.#records;
      this.#records = [];
      void this.#link.call('recordQueries', [records]).catch(() => {});
    }, REPORT_INTERVAL_MS);
    this.#reportTimer.unref();
  }

  #forward<M extends LinkMethod>(method: M, args: LinkCalls[M]['args']): Promise<LinkCalls[M]['answer']> {
    this.counts.forwarded++;
    return this.#link.call(method, args);
  }

  /** What each forwarded method of the one table calls (see `Forwarding`). */
  forward<M extends LinkMethod>(method: M, args: LinkCalls[M]['args']): Promise<LinkCalls[M]['answer']> {
    return this.#forward(method, args);
  }

  /** As `TidalDb.signal`: sent across as `signals([signal])`. */
  signal(signal: SignalInput): Promise<number> {
    return this.#forward('signals', [[signal]]);
  }

  /** A worker thread does not close the database: the thread that opened it does. */
  get closed(): boolean {
    return false;
  }

  /** Sends what is left of the query records; the link itself closes with the worker. */
  flushReports(): void {
    if (this.#reportTimer !== undefined) clearTimeout(this.#reportTimer);
    this.#reportTimer = undefined;
    if (this.#records.length === 0) return;
    const records = this.#records;
    this.#records = [];
    void this.#link.call('recordQueries', [records]).catch(() => {});
  }
}
