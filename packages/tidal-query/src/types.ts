import type { DegradationLevel } from 'tidal-load';
import type { PackedRows } from './packed-rows.js';
import type { SignalKindSpec, SignalValues, WindowName } from './signals/store.js';

export type { SignalKindSpec, SignalValues, WindowName };

export type FieldType = 'string' | 'number';

/** The parts of a database's schema the query side needs, already validated. */
export interface QuerySchema {
  readonly kinds: readonly SignalKindSpec[];
  /** Filterable metadata fields and their types. */
  readonly metadata: Readonly<Record<string, FieldType>>;
  readonly embeddingDims: number;
  /**
   * The metadata field (a declared string field) that names an item's creator, for blocks,
   * follows, creator affinity and exploration; absent when the schema names none.
   */
  readonly creatorField?: string;
  /**
   * Per kind (schema order): the rate a user's signal of that kind moves their preference vector
   * toward (> 0) or away from (< 0) the item's embedding; 0 for kinds that do not. Main thread only.
   */
  readonly preferenceRates?: readonly number[];
  /** Half-life of a user's creator affinities, in ms. Main thread only. */
  readonly affinityHalfLifeMs?: number;
}

export interface RangeCondition {
  gt?: number;
  gte?: number;
  lt?: number;
  lte?: number;
}

/** One field's condition: equality, set membership, or a numeric / time range. */
export type FieldCondition = string | number | { in: readonly (string | number)[] } | RangeCondition;

/** Conditions on metadata fields (and `createdAt`), all of which must hold. */
export type Filter = Readonly<Record<string, FieldCondition>>;

export interface Diversity {
  /** At most this many results share one value of the field. */
  maxPer: Readonly<Record<string, number>>;
}

export type Profile = 'trending' | 'popular' | 'new' | 'for_you' | 'following' | 'hot' | 'rising' | 'top' | 'related';

/** `following`: newest first, or by popularity (the sum of decayed scores). */
export type FollowingOrder = 'newest' | 'popular';

/**
 * `related`: the item's co-engagement list as the main thread holds it: each partner's decayed
 * score, all referring to one time (the query decays them to its clock).
 */
export interface RelatedTask {
  /** The item's ordinal (never returned). */
  item: number;
  /** Partners in the list. */
  n: number;
  /** The time (epoch ms) every score refers to. */
  at: number;
  /** The partners' ordinals (the first `n`): the published list itself, shared and read-only. */
  partners: Int32Array;
  /** Their scores at `at` (the first `n`), beside `partners`. */
  scores: Float32Array;
  /** The decay rate of a co-engagement score, per ms. */
  lambda: number;
}
export type VelocityWindow = '1h' | '24h' | '7d';

/** A retrieve request after validation (what the workers receive). */
export interface RetrieveTask {
  profile: Profile;
  context: Float32Array | null;
  filter: Filter | null;
  diversity: Diversity | null;
  limit: number;
  window: VelocityWindow;
  /** Ordinals to leave out (an agent session's already-seen items). */
  exclude: Int32Array | null;
  /** The user the query is for: their hard negatives always apply, their state feeds `for_you`. */
  user?: UserQueryState | null;
  /** `for_you` only: the weights, exploration share and seed (defaults filled in). */
  forYou?: ForYouOptions | null;
  /** `following` only: the order (default `'newest'`). */
  order?: FollowingOrder | null;
  /** `related` only: the item and its co-engagement list. */
  related?: RelatedTask | null;
  /** The worker serializes the results as one JSON string (`itemsJson` / `hitsJson`) and sends no objects. */
  asJson?: boolean;
}

/**
 * What a query worker needs of one user, copied into the task: hidden items and blocked creators
 * (never returned), and what the user filters and `for_you` read.
 */
export interface UserQueryState {
  /** Hidden item ordinals. */
  hidden: Int32Array;
  /** Blocked creators (values of the schema's creator field). */
  blocked: readonly string[];
  /** The seen set's ordinals, when the `unseen` filter is on; else null. */
  seen: Int32Array | null;
  /** Followed creators, when the `following` filter is on; else null. */
  following: readonly string[] | null;
  /** The preference vector (for_you), or null when the user has none. */
  preference: Float32Array | null;
  /**
   * Creator affinities (for_you), decayed to one common time: only their ratios are used, and
   * every affinity decays at the same rate, so the ratios hold at any later time.
   */
  affinityCreators: readonly string[];
  affinityScores: Float64Array;
  /** Hash of the user id, for the deterministic exploration order. */
  idHash: number;
}

/** The `for_you` mix: the score is Σ weight × feature (features in [0, 1]). */
export interface ForYouWeights {
  similarity: number;
  velocity: number;
  recency: number;
  affinity: number;
}

export interface ForYouOptions {
  weights: ForYouWeights;
  /** Share of places (0 to 0.5) given to items of creators the user has no affinity with. */
  explore: number;
  seed: number;
}

export interface SearchTask {
  text: string | null;
  vector: Float32Array | null;
  filter: Filter | null;
  diversity: Diversity | null;
  limit: number;
  /** Multiplier on log1p(popularity) added to the relevance score; 0 switches the boost off. */
  boost: number;
  /** The user the search is for: their hidden items and blocked creators never come back. */
  user?: UserQueryState | null;
  /** The worker serializes the results as one JSON string (`itemsJson` / `hitsJson`) and sends no objects. */
  asJson?: boolean;
}

/** What a level did to one query, so a caller can see the degradation take effect. */
export interface Explain {
  annTopK: number | null;
  bm25Limit: number | null;
  /** `exact` windows or `all-time` counts (CoarseAggregates). */
  windows: 'exact' | 'all-time';
  /** The window velocity was read from. */
  velocityWindow: VelocityWindow;
  diversityApplied: boolean;
  candidates: number;
  afterFilter: number;
  /**
   * Text search only: term occurrences the BM25 top-k scored (one per query term of each document
   * scored), counted as they are scored. Falls with the BM25 depth: the pruning skips what cannot
   * reach the k-th score.
   */
  postingsScored?: number;
  /** Text search only: postings the top-k search jumped over without reading them. */
  postingsSkipped?: number;
  /** Text search only: blocks of 128 postings skipped whole (their maxima could not reach the k-th score). */
  blocksSkipped?: number;
  /** Text search only: the postings budget of the level stopped the search (an approximate top-k). */
  textBudgetExhausted?: boolean;
  /**
   * Signal slots the candidate and scoring stages read (a slot's header or values; hydration not
   * included), counted as they are read. Set by retrieve.
   */
  slotsVisited?: number;
  /** Keys the ANN search returned, as counted from its answer; null when no ANN search ran. */
  annCandidates?: number | null;
  /**
   * How the vector neighbours were found, when a vector search ran: `ann` by the ANN index,
   * `exact` by comparing every item's int8 vector while the index is being built on its own thread
   * (exact answers, at a cost that grows with the catalogue: see `stats().annBuild`).
   */
  vectorSearch?: 'ann' | 'exact';
  /** Result items whose signals were read to hydrate them. */
  rowsHydrated?: number;
  /**
   * Of an answer sent as JSON at NoDiversity (`tidal serve`'s answers), the rows whose signals
   * were this query thread's copy of them, made by an answer up to 1 s before with no signal
   * written to the item since, instead of read again (absent where the level reads every row's).
   */
  signalsReused?: number;
  /**
   * Candidates found by an exact search over the most popular items instead of (or beside) the
   * graph: around a context vector below Full (profile `popular`), and `for_you`'s neighbours at
   * NoDiversity for a user without creator affinities, and at every level while the ANN index is
   * built (`stats().vectorSearch` 'exact').
   */
  popularCandidates?: number;
  /**
   * `for_you`'s neighbours taken from the ones this query thread's last graph search for the user
   * found, without searching (NoDiversity, a user without creator affinities).
   */
  reusedNeighbours?: number;
  /**
   * Milliseconds the worker spent executing the query (set by the database on the result; for a
   * result shared with or cached from another query, that execution's time, see `ageMs`).
   */
  serviceMs?: number;
  /** for_you: whether the user had no preference vector (the cold-start ranking ran). */
  coldStart?: boolean;
  /**
   * for_you (a warm user): the candidates each source added that no earlier source had, in source
   * order: ANN neighbours passing the filter, the affinity creators' newest, the newest, trending.
   */
  forYouSources?: { ann: number; creators: number; newest: number; trending: number };
  /** for_you: places given to exploration (items of creators the user has no affinity with). */
  explored?: number;
  /** Candidates dropped for the user: hidden items, blocked creators, and the user filters. */
  userFiltered?: number;
  /**
   * following, hot, rising, top: the most candidates the level lets the profile visit (null at
   * Full: every candidate the profile defines, or as many as its exact early stop needs).
   */
  candidateBudget?: number | null;
  /** following, hot, rising, top: the budget stopped the candidate walk (the ranking may differ from Full's). */
  budgetExhausted?: boolean;
  /**
   * Structures of the worker this query built from scratch before it could run: the created order,
   * the creator lists, the int8 item vectors, the popular subset, and (search) the block summaries
   * of a text term. warm() builds them in every worker, so a query after it, with no item written
   * since, reports 0.
   */
  lazyBuilds?: number;
}

export interface RetrievedItem {
  id: string;
  score: number;
  rank: number;
  /** Signal values used, per kind that has any state for the item. */
  signals: Record<string, SignalValues>;
  /** Cosine similarity to the context vector, when one was given. */
  similarity?: number;
  createdAt: number;
}

export interface SearchHit {
  id: string;
  score: number;
  rank: number;
  /** SQLite FTS5 bm25() score (lower is better, as SQLite reports it), when the text matched. */
  bm25?: number;
  /** Cosine similarity to the query vector, when the vector search found it. */
  semantic?: number;
  signals: Record<string, SignalValues>;
}

export interface WorkerRetrieveResult {
  /** Time the worker spent executing the query, in ms (queueing excluded). */
  serviceMs: number;
  /** The clock the query ranked at. */
  nowMs?: number;
  items: RetrievedItem[];
  /** The items' ordinals, in order (what a cursor records of a page), when the worker sent them. */
  ordinals?: Int32Array;
  /** With `asJson`: the items as JSON (then `items` is empty). */
  itemsJson?: string;
  /**
   * From the executor, at a level that reuses signals with `asJson`: the signals as JSON of the
   * items whose own `signals` is the placeholder, in order (`spliceSignals` puts them together).
   */
  signalsJson?: string[];
  /** From a worker to the database's thread: the items packed (packed-rows.ts; then `items` is empty until unpacked). */
  itemsPacked?: PackedRows;
  warnings: string[];
  explain: Explain;
}

export interface WorkerSearchResult {
  serviceMs: number;
  /** The clock the query ranked at. */
  nowMs?: number;
  hits: SearchHit[];
  /** The hits' ordinals, in order (what a cursor records of a page). */
  ordinals?: Int32Array;
  /** With `asJson`: the hits as JSON (then `hits` is empty). */
  hitsJson?: string;
  /** From a worker to the database's thread: the hits packed (packed-rows.ts; then `hits` is empty until unpacked). */
  hitsPacked?: PackedRows;
  warnings: string[];
  explain: Explain;
  mode: 'text' | 'vector' | 'hybrid';
}

export interface TaskEnvelope {
  level: DegradationLevel;
  nowMs: number;
  itemsVersion: number;
  /**
   * How old, in ms of the clock, the level lets what a query shares with others be (the work sharing
   * option's `maxStalenessMs` for its level: 0 or absent at Full and ReducedCandidates): `for_you`'s
   * trending list (profiles/trending-cache.ts).
   */
  staleMs?: number;
}
