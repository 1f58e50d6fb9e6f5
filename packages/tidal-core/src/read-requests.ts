/**
 * A retrieve or search request made into the task a query executor runs, and its answer made into
 * the result the caller gets. One module for both places a query runs: the database's own thread
 * (the facade sends the task to a worker) and an HTTP acceptor's worker thread (the task runs where
 * the request arrived, see thread-db.ts).
 */
import { InternalError, InvalidInputError } from 'tidal-load';
import type { DegradationLevel } from 'tidal-load';
import type {
  QuerySchema,
  RetrieveTask,
  SearchTask,
  StoredItem,
  UserQueryState,
  WorkerRetrieveResult,
  WorkerSearchResult,
} from 'tidal-query';
import { type Cursors, type LazyCursor, lazyQueryHash, type CursorState } from './cursor.js';
import type { PinnedRanking, PinnedRankings, PinnedRow } from './pinned-rankings.js';
import type { LevelReason } from './level-choice.js';
import type { Item, RetrieveRequest, RetrieveResults, SearchRequest, SearchResults } from './types.js';
import { checkFeedOptions, checkForYou, checkUserFilter } from './user-requests.js';
import {
  checkAsJson,
  checkDiversity,
  checkFilter,
  checkFiniteNumber,
  checkLimit,
  checkProfile,
  checkText,
  checkVector,
  checkWindow,
} from './validate.js';

/** Keys every query takes (QueryControl and UserQuery). */
const CONTROL_KEYS = ['criticality', 'level', 'signal', 'timeoutMs', 'asJson', 'cursor', 'paginate', 'user', 'userFilter'];
const RETRIEVE_KEYS: ReadonlySet<string> = new Set([
  ...CONTROL_KEYS,
  ...['profile', 'order', 'item', 'context', 'filter', 'diversity', 'limit', 'window', 'session', 'weights', 'explore', 'seed'],
]);
const SEARCH_KEYS: ReadonlySet<string> = new Set([
  ...CONTROL_KEYS,
  ...['text', 'vector', 'semantic', 'filter', 'diversity', 'boost', 'limit'],
]);

/** The largest `boost`: log1p of the largest finite popularity is about 710, so scores stay finite. */
export const MAX_BOOST = 1000;

/**
 * Refuses a key the request type does not take: a typo (`limt: 50`) would otherwise run the query
 * with the default and say nothing. Keys whose value is undefined count too.
 */
function checkKeys(req: object, keys: ReadonlySet<string>, what: string): void {
  for (const k in req) {
    if (!keys.has(k))
      throw new InvalidInputError(k, `absent: a ${what} request takes ${[...keys].join(', ')}`, (req as Record<string, unknown>)[k]);
  }
}

/** What a cursor chain needs of the database's thread, the one place its pinned rankings live. */
export interface ChainDeps {
  readonly store: PinnedRankings;
  /** The database clock (a pinned ranking's TTL runs on it). */
  now(): number;
  /** The stored item, or undefined once it is deleted: a later page drops what is gone. */
  stored(id: string): StoredItem | undefined;
}

/** What turning a request into a task needs of the thread it runs on. */
export interface ReadDeps {
  readonly schema: QuerySchema;
  readonly defaultWindow: RetrieveTask['window'];
  readonly cursors: Cursors;
  /** Cursor chains; null in a thread that sends every request with `paginate` or `cursor` to the database's. */
  readonly chains: ChainDeps | null;
  /** The ordinals a session's query leaves out (null without a session). */
  exclude(session: RetrieveRequest['session']): Int32Array | null;
  /** The user state a query naming `user` ranks with (null without one); validates `userFilter`. */
  userState(req: RetrieveRequest | SearchRequest): UserQueryState | null;
  /** The co-engagement list profile `related` ranks, for the item `id`. */
  relatedTask(id: string): RetrieveTask['related'];
}

/** A later page of a cursor chain: the ranking it is cut from, and where. */
export interface ChainPage {
  readonly ranking: PinnedRanking;
  readonly state: CursorState;
}

/** A validated request: its task, its cursor's query hash (made on demand) and its place in a cursor chain. */
export interface PreparedRead<T> {
  readonly task: T;
  readonly hash: () => string;
  /** The page size asked for (a chain's first page ranks `cursors.depth` items). */
  readonly limit: number;
  /** Whether the result is sent as JSON (the task's own flag is off when its rows are pinned). */
  readonly asJson: boolean;
  /** A chain's first page: its task ranks the chain's whole ranking, and what follows the page is pinned. */
  readonly pinning: boolean;
  /** A later page: cut from its chain's pinned ranking, no task runs. */
  readonly next: ChainPage | null;
}

function chainsOf(deps: ReadDeps): ChainDeps {
  if (deps.chains === null) throw new InternalError('a query with paginate or cursor reached a thread that keeps no cursor chains');
  return deps.chains;
}

/**
 * The request's place in a cursor chain. Without `cursor`, `paginate: true` starts one: the task
 * ranks `cursors.depth` items (at least the page) and the result is built from the head. With
 * `cursor`, the cursor is checked against the query and its chain's ranking found (or refused).
 */
function chain<T extends RetrieveTask | SearchTask>(
  deps: ReadDeps,
  req: RetrieveRequest | SearchRequest,
  task: T,
  hash: () => string,
): PreparedRead<T> {
  const paginate = req.paginate;
  if (paginate !== undefined && typeof paginate !== 'boolean') throw new InvalidInputError('paginate', 'a boolean', paginate);
  const limit = task.limit;
  const asJson = task.asJson === true;
  if (req.cursor !== undefined) {
    const chains = chainsOf(deps);
    const state = deps.cursors.decode(req.cursor, hash());
    return { task, hash, limit, asJson, pinning: false, next: { ranking: chains.store.get(state, chains.now()), state } };
  }
  if (paginate !== true) return { task, hash, limit, asJson, pinning: false, next: null };
  const { depth } = chainsOf(deps).store.options;
  // A page as long as the chain is the whole chain: nothing to pin.
  if (limit >= depth) return { task, hash, limit, asJson, pinning: false, next: null };
  task.limit = depth;
  // The rows are cut into pages here: the worker sends objects, and the page is serialized after.
  delete task.asJson;
  return { task, hash, limit, asJson, pinning: true, next: null };
}

/** Validates a retrieve request into its task. @throws InvalidInputError naming the bad field. */
export function prepareRetrieve(req: RetrieveRequest, deps: ReadDeps): PreparedRead<RetrieveTask> {
  if (typeof req !== 'object' || req === null) throw new InvalidInputError('request', 'a retrieve request object', req);
  checkKeys(req, RETRIEVE_KEYS, 'retrieve');
  const { schema } = deps;
  const profile = checkProfile(req.profile, schema);
  const window = checkWindow(req.window, profile === 'top' ? '24h' : deps.defaultWindow);
  const feed = checkFeedOptions(req, window);
  const task: RetrieveTask = {
    profile,
    context: req.context === undefined ? null : checkVector('context', req.context, schema.embeddingDims),
    filter: checkFilter(req.filter, schema),
    diversity: checkDiversity(req.diversity, schema),
    limit: checkLimit('limit', req.limit, 20),
    window,
    exclude: deps.exclude(req.session),
    user: deps.userState(req),
    forYou: checkForYou(req, schema),
    order: feed.order,
    related: feed.item === null ? null : deps.relatedTask(feed.item),
  };
  if (checkAsJson(req.asJson)) task.asJson = true;
  const hash = lazyQueryHash('retrieve', {
    order: feed.order,
    item: feed.item,
    profile,
    context: task.context,
    filter: task.filter,
    diversity: task.diversity,
    window: task.window,
    session: req.session?.id ?? null,
    user: req.user ?? null,
    userFilter: checkUserFilter(req.userFilter, req.user !== undefined, schema),
    forYou: task.forYou,
  });
  return chain(deps, req, task, hash);
}

/** Validates a search request into its task. @throws InvalidInputError naming the bad field. */
export function prepareSearch(req: SearchRequest, deps: ReadDeps): PreparedRead<SearchTask> {
  if (typeof req !== 'object' || req === null) throw new InvalidInputError('request', 'a search request object', req);
  checkKeys(req, SEARCH_KEYS, 'search');
  const { schema } = deps;
  const text = req.text === undefined ? null : checkText('text', req.text);
  const vector = req.vector === undefined ? null : checkVector('vector', req.vector, schema.embeddingDims);
  if (text === null && vector === null) throw new InvalidInputError('request', 'a search with text, vector or both', req);
  const boost = checkFiniteNumber('boost', req.boost, 0);
  if (boost < 0 || boost > MAX_BOOST) throw new InvalidInputError('boost', `a finite number from 0 to ${MAX_BOOST}`, boost);
  const task: SearchTask = {
    text,
    vector,
    filter: checkFilter(req.filter, schema),
    diversity: checkDiversity(req.diversity, schema),
    limit: checkLimit('limit', req.limit, 10),
    boost,
    user: deps.userState(req),
  };
  if (checkAsJson(req.asJson)) task.asJson = true;
  const hash = lazyQueryHash('search', {
    text,
    vector,
    filter: task.filter,
    diversity: task.diversity,
    boost,
    user: req.user ?? null,
    userFilter: checkUserFilter(req.userFilter, req.user !== undefined, schema),
  });
  return chain(deps, req, task, hash);
}

/** A chain's later page: its rows, their ordinals and where the next page starts. */
export interface CutPage {
  readonly rows: PinnedRow[];
  readonly ordinals: Int32Array;
  /** The offset the next page starts at (the pinned ranking's length: none). */
  readonly offset: number;
}

/**
 * The next `limit` rows of a pinned ranking from `offset`, without the items deleted since the
 * ranking was made nor, for a query naming a user, the items they hid and their blocked creators'
 * items (as `user` holds them now): hard negatives never come back, on any page.
 */
export function cutPage(
  ranking: PinnedRanking,
  offset: number,
  limit: number,
  user: UserQueryState | null | undefined,
  creatorField: string | undefined,
  stored: (id: string) => StoredItem | undefined,
): CutPage {
  const hidden = user && user.hidden.length > 0 ? new Set(user.hidden) : null;
  const blocked = user && user.blocked.length > 0 && creatorField !== undefined ? new Set(user.blocked) : null;
  const rows: PinnedRow[] = [];
  const ordinals: number[] = [];
  const all = ranking.rows;
  let i = offset;
  for (; i < all.length && rows.length < limit; i++) {
    const row = all[i]!;
    const ordinal = ranking.ordinals[i]!;
    if (hidden?.has(ordinal)) continue;
    const item = stored(row.id);
    if (item === undefined) continue;
    if (blocked) {
      const creator = item.metadata[creatorField!];
      if (typeof creator === 'string' && blocked.has(creator)) continue;
    }
    // A copy: a caller changing its page leaves the chain's ranking as it was.
    rows.push({ ...row });
    ordinals.push(ordinal);
  }
  return { rows, ordinals: Int32Array.from(ordinals), offset: i };
}

/** An item as `get` returns it, from its stored row (undefined without one). */
export function storedItem(row: StoredItem | undefined): Item | undefined {
  if (!row) return undefined;
  const item: Item = { id: row.id, metadata: row.metadata, createdAt: row.createdAt };
  if (row.text !== null) item.text = row.text;
  if (row.embedding !== null) item.embedding = row.embedding;
  return item;
}

/** How a query ran, for its result. */
export interface RanAs {
  readonly level: DegradationLevel;
  readonly reason: LevelReason;
  /** How old a shared or cached answer was (0 when it ran for this call). */
  readonly ageMs: number;
  /** `performance.now()` when the query was planned. */
  readonly started: number;
}

/**
 * A page of results: `{ [list]: rows, nextCursor, ...between, degradationLevel, levelReason,
 * ageMs, warnings, explain, tookMs }`, in that key order (what JSON shows), with `nextCursor` an
 * accessor that makes the cursor when first read.
 */
function page(
  list: 'items' | 'hits',
  rows: readonly unknown[],
  between: Record<string, unknown>,
  r: { readonly warnings: readonly string[]; readonly explain: object; readonly serviceMs: number },
  ran: RanAs,
  next: LazyCursor,
  now: number,
): Record<string, unknown> {
  const out: Record<string, unknown> = { [list]: rows.slice() };
  Object.defineProperty(out, 'nextCursor', {
    enumerable: true,
    configurable: true,
    get: () => next.value,
    set: (v: string | null) => {
      next.value = v;
    },
  });
  Object.assign(out, between);
  out.degradationLevel = ran.level;
  out.levelReason = ran.reason;
  out.ageMs = ran.ageMs;
  out.warnings = r.warnings.slice();
  out.explain = { ...r.explain, serviceMs: r.serviceMs };
  out.tookMs = now - ran.started;
  return out;
}

/** A retrieve's result from its executor's answer; `nextCursor` is made when first read. */
export function retrieveResults(r: WorkerRetrieveResult, ran: RanAs, next: LazyCursor, now: number): RetrieveResults {
  const out = page('items', r.items, {}, r, ran, next, now) as unknown as RetrieveResults;
  if (r.itemsJson !== undefined) out.itemsJson = r.itemsJson;
  return out;
}

/** A search's result from its executor's answer; `nextCursor` is made when first read. */
export function searchResults(r: WorkerSearchResult, ran: RanAs, next: LazyCursor, now: number): SearchResults {
  const out = page('hits', r.hits, { mode: r.mode }, r, ran, next, now) as unknown as SearchResults;
  if (r.hitsJson !== undefined) out.hitsJson = r.hitsJson;
  return out;
}
