/**
 * The one path a retrieve or a search takes, wherever it runs: validate → hash → pin (see
 * read-requests.ts) → plan (see planQuery) → run → build. `start` does the steps before the run and
 * `finish` the one after it; the run itself is the caller's (the database's thread sends the task
 * to a worker through its QueryFront, a worker module's thread runs it where it is, see
 * thread-db.ts). What differs between the two ops is one entry of {@link READS}.
 */
import { performance } from 'node:perf_hooks';
import { InternalError, InvalidInputError, STAGE, stageEnd, stageStart, type InFlightGuard } from 'tidal-load';
import type { RetrieveTask, SearchTask, UserQueryState, WorkerRetrieveResult, WorkerSearchResult } from 'tidal-query';
import { LazyCursor, type Cursors } from './cursor.js';
import { estimateBytes, type QueryPlan } from './query-front.js';
import {
  cutPage,
  prepareRetrieve,
  prepareSearch,
  retrieveResults,
  searchResults,
  type ChainDeps,
  type PreparedRead,
  type RanAs,
  type ReadDeps,
} from './read-requests.js';
import type { PinnedRow } from './pinned-rankings.js';
import type { SessionRegistry } from './sessions.js';
import type { QueryControl, RetrieveRequest, RetrieveResults, SearchRequest, SearchResults } from './types.js';
import { checkUserFilter } from './user-requests.js';
import type { UserRegistry } from './users.js';
import { checkId, defaultWindow } from './validate.js';

/** Each read op's request, task, executor answer and result. */
export interface ReadTypes {
  retrieve: { req: RetrieveRequest; task: RetrieveTask; answer: WorkerRetrieveResult; results: RetrieveResults };
  search: { req: SearchRequest; task: SearchTask; answer: WorkerSearchResult; results: SearchResults };
}

export type ReadOp = keyof ReadTypes;

/** What one op brings to the pipeline. */
interface ReadKind<Op extends ReadOp> {
  /** Validate, hash and pin: the request made into its task. */
  prepare(req: ReadTypes[Op]['req'], deps: ReadDeps): PreparedRead<ReadTypes[Op]['task']>;
  /** The rows of the answer, best first. */
  rows(r: ReadTypes[Op]['answer']): readonly PinnedRow[];
  /** The answer with other rows (their ordinals), as objects or as JSON. */
  withRows(r: ReadTypes[Op]['answer'], rows: readonly PinnedRow[], ordinals: Int32Array, asJson: boolean): ReadTypes[Op]['answer'];
  build(r: ReadTypes[Op]['answer'], ran: RanAs, next: LazyCursor, now: number): ReadTypes[Op]['results'];
  /** Whether callers asking the same may share one execution (see WorkSharing). */
  shareable(task: ReadTypes[Op]['task']): boolean;
  /** The answer's size for the kept-results bound. */
  bytes(this: void, r: ReadTypes[Op]['answer']): number;
}

export const READS: { readonly [Op in ReadOp]: ReadKind<Op> } = {
  retrieve: {
    prepare: prepareRetrieve,
    rows: (r) => r.items,
    withRows: (r, rows, ordinals, asJson) => {
      const items = rows as WorkerRetrieveResult['items'];
      const { itemsJson: _json, ...rest } = r;
      return asJson ? { ...rest, items: [], itemsJson: JSON.stringify(items), ordinals } : { ...rest, items, ordinals };
    },
    build: retrieveResults,
    // A session's query excludes what that session has seen: it is its own, never shared.
    // A user's query is theirs too (their hidden items, blocks and seen set): never shared.
    shareable: (task) => task.exclude === null && !task.user,
    bytes: (r) => (r.itemsJson === undefined ? estimateBytes(r.items) : 2 * r.itemsJson.length),
  },
  search: {
    prepare: prepareSearch,
    rows: (r) => r.hits,
    withRows: (r, rows, ordinals, asJson) => {
      const hits = rows as WorkerSearchResult['hits'];
      const { hitsJson: _json, ...rest } = r;
      return asJson ? { ...rest, hits: [], hitsJson: JSON.stringify(hits), ordinals } : { ...rest, hits, ordinals };
    },
    build: searchResults,
    shareable: (task) => !task.user,
    bytes: (r) => (r.hitsJson === undefined ? estimateBytes(r.hits) : 2 * r.hitsJson.length),
  },
};

/** A read validated and planned: what its run and its result are made from. */
export interface PlannedRead<Op extends ReadOp> {
  readonly op: Op;
  readonly read: PreparedRead<ReadTypes[Op]['task']>;
  readonly plan: QueryPlan;
  /** `performance.now()` when it was planned. */
  readonly started: number;
}

/** Decides a validated read's control options and level (see planQuery). */
export type ReadPlanner = (req: QueryControl, op: ReadOp, guard: InFlightGuard) => QueryPlan;

/** The read pipeline of one thread: what its validation needs, how it plans, how it finds an id's ordinal. */
export class ReadPipeline {
  readonly #deps: ReadDeps;
  readonly #plan: ReadPlanner;
  readonly #ordinalOf: (id: string) => number | undefined;

  constructor(deps: ReadDeps, plan: ReadPlanner, ordinalOf: (id: string) => number | undefined) {
    this.#deps = deps;
    this.#plan = plan;
    this.#ordinalOf = ordinalOf;
  }

  /**
   * Validate → hash → pin → plan, for a query holding its in-flight slot. On bad input the slot
   * is released and the error thrown.
   */
  start<Op extends ReadOp>(op: Op, req: ReadTypes[Op]['req'], guard: InFlightGuard): PlannedRead<Op> {
    let read: PreparedRead<ReadTypes[Op]['task']>;
    let plan: QueryPlan;
    const t = stageStart();
    try {
      read = READS[op].prepare(req, this.#deps);
      plan = this.#plan(req, op, guard);
    } catch (err) {
      guard[Symbol.dispose]();
      throw err;
    } finally {
      stageEnd(STAGE.plan, t);
    }
    return { op, read, plan, started: performance.now() };
  }

  /**
   * The result of a read from its executor's answer. A chain's first page pins what follows the
   * page (see pinned-rankings.ts); its `nextCursor` is made when first read.
   */
  finish<Op extends ReadOp>(q: PlannedRead<Op>, r: ReadTypes[Op]['answer'], ageMs: number): ReadTypes[Op]['results'] {
    // The result built from the executor's answer: counted with the hydration of its rows.
    const t = stageStart();
    try {
      return this.#finish(q, r, ageMs);
    } finally {
      stageEnd(STAGE.hydration, t);
    }
  }

  #finish<Op extends ReadOp>(q: PlannedRead<Op>, r: ReadTypes[Op]['answer'], ageMs: number): ReadTypes[Op]['results'] {
    const kind: ReadKind<Op> = READS[q.op];
    const ran = { level: q.plan.level, reason: q.plan.reason, ageMs, started: q.started };
    if (!q.read.pinning) return kind.build(r, ran, new LazyCursor(() => null), performance.now());
    const { limit, asJson } = q.read;
    const rows = kind.rows(r);
    const ordinals = Int32Array.from(rows, (row, i) => r.ordinals?.[i] ?? this.#ordinalOf(row.id) ?? -1);
    let next = new LazyCursor(() => null);
    if (rows.length > limit && r.nowMs !== undefined) {
      const chains = this.#chains();
      const now = chains.now();
      const query = q.read.hash();
      const ranking = {
        query,
        nowMs: r.nowMs,
        level: q.plan.level,
        reason: q.plan.reason,
        answer: kind.withRows(r, [], new Int32Array(0), false),
        rows: rows.slice(limit),
        ordinals: ordinals.subarray(limit),
      };
      const id = chains.store.add(ranking, now);
      const { epoch } = chains.store;
      next = new LazyCursor(() => this.#deps.cursors.encode({ query, epoch, id, offset: 0, issuedAtMs: now }));
    }
    return kind.build(kind.withRows(r, rows.slice(0, limit), ordinals.slice(0, limit), asJson), ran, next, performance.now());
  }

  /**
   * A later page of a cursor chain, cut from its pinned ranking (no executor runs): at the level,
   * with the warnings and explain of the chain's first page, `ageMs` the time since it ranked.
   */
  fromPin<Op extends ReadOp>(q: PlannedRead<Op>): ReadTypes[Op]['results'] {
    const kind: ReadKind<Op> = READS[q.op];
    const { ranking, state } = q.read.next!;
    const chains = this.#chains();
    const { task } = q.read;
    const cut = cutPage(ranking, state.offset, q.read.limit, task.user, this.#deps.schema.creatorField, (id) => chains.stored(id));
    const now = chains.now();
    const more = cut.offset < ranking.rows.length;
    const next = new LazyCursor(() => (more ? this.#deps.cursors.encode({ ...state, offset: cut.offset, issuedAtMs: now }) : null));
    const answer = kind.withRows(ranking.answer as ReadTypes[Op]['answer'], cut.rows, cut.ordinals, q.read.asJson);
    const ran = { level: ranking.level, reason: ranking.reason, ageMs: Math.max(0, now - ranking.nowMs), started: q.started };
    return kind.build(answer, ran, next, performance.now());
  }

  #chains(): ChainDeps {
    const chains = this.#deps.chains;
    if (chains === null) throw new InternalError('a cursor chain reached a thread that keeps none');
    return chains;
  }
}

/** What validating a read needs of the database's own thread. */
export interface MainReadState {
  readonly schema: ReadDeps['schema'];
  readonly cursors: Cursors;
  readonly sessions: SessionRegistry;
  readonly users: UserRegistry;
  readonly clock: () => number;
  readonly ordinalOf: (id: string) => number | undefined;
  readonly chains: ChainDeps;
}

/** The read dependencies of the database's thread: its sessions, its users, its co-engagement lists. */
export function mainReadDeps(s: MainReadState): ReadDeps {
  return {
    schema: s.schema,
    defaultWindow: defaultWindow(s.schema),
    cursors: s.cursors,
    chains: s.chains,
    exclude: (session) => s.sessions.exclude(session, s.clock()),
    userState: (req) => userState(s, req),
    relatedTask: (id) => relatedTask(s, id),
  };
}

/** The user state a query naming `user` sends its worker (null without one); validates `userFilter`. */
function userState(s: MainReadState, req: RetrieveRequest | SearchRequest): UserQueryState | null {
  const filter = checkUserFilter(req.userFilter, req.user !== undefined, s.schema);
  if (req.user === undefined) return null;
  const id = checkId('user', req.user);
  // Profile `following` ranks the followed creators' items: the filter comes with it.
  return s.users.queryState('user', id, filter.unseen, filter.following || (req as RetrieveRequest).profile === 'following');
}

/** The co-engagement list profile `related` ranks, for the item `id`. */
function relatedTask(s: MainReadState, id: string): RetrieveTask['related'] {
  checkId('item', id);
  const ordinal = s.ordinalOf(id);
  if (ordinal === undefined) throw new InvalidInputError('item', "the id of an item written or signalled (profile 'related')", id);
  return s.users.relatedTask(ordinal);
}
