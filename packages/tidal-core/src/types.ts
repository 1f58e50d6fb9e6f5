import type { Criticality, DegradationLevel, DegradationLevelName } from 'tidal-load';
import type { LevelReason } from './level-choice.js';
import type { Explain, FollowingOrder, ForYouWeights, Profile, RetrievedItem, SearchHit, VelocityWindow } from 'tidal-query';
import type { SchemaDefinition } from './schema.js';
import type { DiversityOf, FilterOf, KindOf, MetadataOf } from './schema-types.js';
import type { SessionHandle } from './sessions.js';
import type { UserFilter } from './user-requests.js';

/** A user a query is for, and filters on their state (shared by retrieve and search). */
export interface UserQuery {
  /**
   * Start a cursor chain: the query ranks `cursors.depth` items, returns the first page and keeps
   * the rest, and `nextCursor` pages through it: every page of the chain comes from this ranking,
   * whatever is written between them. Without it, `nextCursor` is null.
   * @default false
   */
  paginate?: boolean;
  /**
   * The `nextCursor` of the previous page of the same query: the next page of its chain, cut from
   * the ranking the chain's first page made (see `paginate`).
   */
  cursor?: string;
  /**
   * A user id (written with `upsertUsers`): their hidden items and blocked creators' items are
   * never returned, at any level. Required by `for_you`.
   */
  user?: string;
  /** Filters on the user's state: `unseen`, `unblocked` (always on with a user), `following`. */
  userFilter?: UserFilter;
}

/**
 * An item as written. Everything but `id` is optional. `S`, the schema (inferred by the builder),
 * types `metadata`: see {@link MetadataOf}.
 */
export interface ItemInput<S extends SchemaDefinition = SchemaDefinition> {
  /** 1 to 512 characters. */
  id: string;
  /** Indexed for BM25 text search; up to 100 000 characters. */
  text?: string | null;
  /** `schema.embeddingDims` finite numbers, not all zero; indexed for ANN search. */
  embedding?: readonly number[] | Float32Array | null;
  /**
   * Any JSON object up to 64 KiB; fields declared in `schema.metadata` must have their declared type.
   * Under a schema the builder inferred, only its declared fields compile.
   */
  metadata?: MetadataOf<S>;
  /**
   * Creation time in milliseconds since the epoch (the `new` profile and `createdAt` filters use it).
   * @default now (the database clock)
   */
  createdAt?: number;
}

/** An item as stored. */
export interface Item {
  id: string;
  text?: string;
  embedding?: Float32Array;
  metadata: Record<string, unknown>;
  createdAt: number;
}

/** One engagement event; `S`, the schema (inferred by the builder), types `kind`. */
export interface SignalInput<S extends SchemaDefinition = SchemaDefinition> {
  item: string;
  /** A signal kind declared in the schema. */
  kind: KindOf<S>;
  /**
   * Added to the decayed score (counts and velocity count events, whatever their weight).
   * @default 1
   */
  weight?: number;
  /**
   * When it happened, in milliseconds since the epoch. Out-of-order events are fine.
   * @default now (the database clock)
   */
  at?: number;
  /**
   * The user the signal is from (an id written with `upsertUsers`). In the same batch, durably:
   * the item joins the user's seen set and, for a kind with a `preference` rate, the user's
   * preference vector and affinity to the item's creator move.
   */
  user?: string;
}

/** Cancellation, a deadline, a priority and a level cap, accepted by every query. */
export interface QueryControl {
  /**
   * How much the query matters: `'critical'` runs before every waiting `'default'` and
   * `'sheddable'` query; `'sheddable'` (previews, prefetch) runs after them, and is degraded and
   * refused as if twice as many queries were in flight (with the default thresholds it degrades
   * from 16 in flight and is refused past half the admission cap).
   * @default 'default'
   */
  criticality?: Criticality;
  /**
   * The best level the query may run at: a `DegradationLevel` or its name. It runs at this level,
   * or at a cheaper one when the load or its deadline requires; never better than the load allows.
   * For previews and prefetch, and to measure the cost and quality of each level.
   * @default DegradationLevel.Full (the load decides)
   */
  level?: DegradationLevel | DegradationLevelName;
  /**
   * Aborts the query: if a worker has not started it, it never runs; if one has, the call rejects at
   * once and the worker's result is discarded. Rejects with `AbortedError` (`name === 'AbortError'`,
   * `cause` = the signal's reason).
   */
  signal?: AbortSignal;
  /**
   * Milliseconds the caller will wait, from the call: past it the query rejects with `TimeoutError`
   * and, if a worker has not started it, never runs (it leaves the queue). The level is chosen to
   * fit it too: the best level whose measured service time, plus the estimated wait for a worker,
   * fits in it (`levelReason: 'deadline'` when that made it cheaper). A whole number from 1 to
   * 2 147 483 647.
   * @default no deadline
   */
  timeoutMs?: number;
  /**
   * For a server that forwards the answer as JSON: the worker serializes the items (hits) into
   * `itemsJson` (`hitsJson`) and `items` (`hits`) comes back empty, so the calling thread neither
   * receives nor serializes their objects. Cursors, levels and every other field are as without it.
   * @default false
   */
  asJson?: boolean;
}

/**
 * What `retrieve()` takes: {@link RetrieveFields}, with what a profile needs required, so a
 * request that could only be refused does not compile: `user` for `for_you` and `following`, `item`
 * for `related`.
 */
export type RetrieveRequest<S extends SchemaDefinition = SchemaDefinition> =
  | (RetrieveFields<S> & { profile: 'for_you' | 'following'; user: string })
  | (RetrieveFields<S> & { profile: 'related'; item: string })
  | (RetrieveFields<S> & { profile: Exclude<Profile, 'for_you' | 'following' | 'related'> });

/** The fields of a {@link RetrieveRequest}, each profile's together; `S` types `filter` and `diversity`. */
export interface RetrieveFields<S extends SchemaDefinition = SchemaDefinition> extends QueryControl, UserQuery {
  /**
   * `trending` (velocity), `popular` (decayed score), `new` (creation time), `for_you` (a user's
   * feed; needs `user`), `following` (the followed creators' items; needs `user`), `hot` (popularity
   * decaying with age), `rising` (velocity growth between windows), `top` (the most popular items
   * created in `window`) or `related` (the items most co-engaged with `item`).
   */
  profile: Profile;
  /**
   * `following` only: `'newest'` first, or `'popular'` (the sum of decayed scores) first.
   * @default 'newest'
   */
  order?: FollowingOrder;
  /** `related` only, required: the item id whose co-engaged items are ranked. */
  item?: string;
  /** Rank among the ANN neighbours of this vector instead of the whole corpus. */
  context?: readonly number[] | Float32Array;
  /** Conditions on declared metadata fields and `createdAt`. */
  filter?: FilterOf<S>;
  diversity?: DiversityOf<S>;
  /**
   * 1 to 1000.
   * @default 20
   */
  limit?: number;
  /**
   * The velocity window `trending` ranks by; for `rising` the recent window (`'1h'` or `'24h'`,
   * compared with the next longer one); for `top` the creation window.
   * @default the shortest window a velocity kind declares; `'24h'` for `top`
   */
  window?: VelocityWindow;
  /**
   * An open agent session: the items it has signalled are left out (an "unseen" filter), so the
   * agent's next query reflects what it did. A closed or expired session throws SessionClosedError.
   */
  session?: SessionHandle;
  /**
   * `for_you` only: the weights of its mix, each from 0 to 1000.
   * @default { similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 }
   */
  weights?: Partial<ForYouWeights>;
  /**
   * `for_you` only: the share of places (0 to 0.5) given to items of creators the user has no
   * affinity with: every round(1 / explore)-th place.
   * @default 0.1
   */
  explore?: number;
  /**
   * `for_you` only: the exploration order's seed (a whole number from 0 to 2^32 − 1); the same
   * (user, seed) and state give the same feed.
   * @default 0
   */
  seed?: number;
}

export interface RetrieveResults {
  /**
   * Pass it as `cursor` (with the same request) for the next page; null without `paginate`, and
   * after the chain's last page.
   */
  nextCursor: string | null;
  items: RetrievedItem[];
  /** With `asJson`: `items` as a JSON array, and `items` is empty. */
  itemsJson?: string;
  /** The level the query ran at, decided once when it entered. */
  degradationLevel: DegradationLevel;
  /** Why it ran at that level: the load, its criticality, the `level` it asked for, or its deadline. */
  levelReason: LevelReason;
  /**
   * How much older than the call the result is, in ms of the database clock: 0 unless it was
   * answered, at CoarseAggregates or NoDiversity, by an identical query's result (at most
   * `workSharing.maxStalenessMs` old).
   */
  ageMs: number;
  /** Things the caller may want to know, such as a relaxed diversity cap. */
  warnings: string[];
  /** What the level did: candidate counts, windows, whether diversity ran. */
  explain: Explain;
  tookMs: number;
}

/** What `search()` takes: {@link SearchFields} with `text`, `vector` or both (a search of neither does not compile). */
export type SearchRequest<S extends SchemaDefinition = SchemaDefinition> = SearchFields<S> &
  ({ text: string } | { vector: readonly number[] | Float32Array });

/** The fields of a {@link SearchRequest}; `S` types `filter` and `diversity`. */
export interface SearchFields<S extends SchemaDefinition = SchemaDefinition> extends QueryControl, UserQuery {
  /** Free text, matched word by word (any word) and ranked by BM25. */
  text?: string;
  /** A query vector, matched by ANN (cosine). With `text` too, the two are fused by RRF. */
  vector?: readonly number[] | Float32Array;
  /**
   * Embed `text` through the configured embedder (`builder.embedder`) and run hybrid; when the
   * embedder is slow, down or shedding, run on the text alone and say why in `semanticFallback`.
   * @default false
   */
  semantic?: boolean;
  /** Conditions on declared metadata fields and `createdAt`. */
  filter?: FilterOf<S>;
  diversity?: DiversityOf<S>;
  /**
   * Multiplies the relevance score by 1 + boost × ln(1 + popularity), popularity being the sum of
   * decayed signal scores.
   * @default 0 (no boost)
   */
  boost?: number;
  /**
   * 1 to 1000.
   * @default 10
   */
  limit?: number;
}

export interface SearchResults {
  /**
   * Pass it as `cursor` (with the same request) for the next page; null without `paginate`, and
   * after the chain's last page.
   */
  nextCursor: string | null;
  hits: SearchHit[];
  /** With `asJson`: `hits` as a JSON array, and `hits` is empty. */
  hitsJson?: string;
  mode: 'text' | 'vector' | 'hybrid';
  /**
   * Only with `semantic: true`: `null` when the text was embedded (mode `hybrid`), otherwise why
   * the search ran on the text alone (`embedder_shed`, `embedder_timeout`, `embedder_failed`,
   * `embedder_bad_vector`, `embedder_error`).
   */
  semanticFallback?: string | null;
  degradationLevel: DegradationLevel;
  /** Why it ran at that level (see {@link RetrieveResults.levelReason}). */
  levelReason: LevelReason;
  /** How much older than the call the result is, in ms (see {@link RetrieveResults.ageMs}). */
  ageMs: number;
  warnings: string[];
  explain: Explain;
  tookMs: number;
}
