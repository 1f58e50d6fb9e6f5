import type { DegradationLevel } from 'tidal-load';
import type { SignalKindSpec, SignalValues, WindowName } from './signals/store.js';

export type { SignalKindSpec, SignalValues, WindowName };

export type FieldType = 'string' | 'number';

/** The parts of a database's schema the query side needs, already validated. */
export interface QuerySchema {
  readonly kinds: readonly SignalKindSpec[];
  /** Filterable metadata fields and their types. */
  readonly metadata: Readonly<Record<string, FieldType>>;
  readonly embeddingDims: number;
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

export type Profile = 'trending' | 'popular' | 'new';
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
}

export interface SearchTask {
  text: string | null;
  vector: Float32Array | null;
  filter: Filter | null;
  diversity: Diversity | null;
  limit: number;
  /** Multiplier on log1p(popularity) added to the relevance score; 0 switches the boost off. */
  boost: number;
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
  /** Result items whose signals were read to hydrate them. */
  rowsHydrated?: number;
  /**
   * Popular items added to the ANN's candidates around a context vector by an exact search over the
   * most popular items (below Full, profile `popular`).
   */
  popularCandidates?: number;
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
  items: RetrievedItem[];
  warnings: string[];
  explain: Explain;
}

export interface WorkerSearchResult {
  serviceMs: number;
  hits: SearchHit[];
  warnings: string[];
  explain: Explain;
  mode: 'text' | 'vector' | 'hybrid';
}

export interface TaskEnvelope {
  level: DegradationLevel;
  nowMs: number;
  itemsVersion: number;
}
