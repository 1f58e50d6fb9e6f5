import type { DegradationLevel } from 'tidal-load';
import type { Diversity, Explain, Filter, Profile, RetrievedItem, SearchHit, VelocityWindow } from 'tidal-query';
import type { SessionHandle } from './sessions.js';

/** An item as written. Everything but `id` is optional. */
export interface ItemInput {
  /** 1 to 512 characters. */
  id: string;
  /** Indexed for BM25 text search; up to 100 000 characters. */
  text?: string | null;
  /** `schema.embeddingDims` finite numbers, not all zero; indexed for ANN search. */
  embedding?: readonly number[] | Float32Array | null;
  /** Any JSON object up to 64 KiB; fields declared in `schema.metadata` must have their declared type. */
  metadata?: Record<string, unknown>;
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

/** One engagement event. */
export interface SignalInput {
  item: string;
  /** A signal kind declared in the schema. */
  kind: string;
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
}

/** Cancellation and a deadline, accepted by every query. */
export interface QueryControl {
  /**
   * Aborts the query: if a worker has not started it, it never runs; if one has, the call rejects at
   * once and the worker's result is discarded. Rejects with `AbortedError` (`name === 'AbortError'`,
   * `cause` = the signal's reason).
   */
  signal?: AbortSignal;
  /**
   * Milliseconds the caller will wait, from the call: past it the query rejects with `TimeoutError`
   * and, if a worker has not started it, never runs. A whole number from 1 to 2 147 483 647.
   * @default no deadline
   */
  timeoutMs?: number;
}

export interface RetrieveRequest extends QueryControl {
  /** `trending` (velocity), `popular` (decayed score) or `new` (creation time). */
  profile: Profile;
  /** Rank among the ANN neighbours of this vector instead of the whole corpus. */
  context?: readonly number[] | Float32Array;
  filter?: Filter;
  diversity?: Diversity;
  /**
   * 1 to 1000.
   * @default 20
   */
  limit?: number;
  /**
   * The velocity window `trending` ranks by.
   * @default the shortest window a velocity kind declares
   */
  window?: VelocityWindow;
  /**
   * An open agent session: the items it has signalled are left out (an "unseen" filter), so the
   * agent's next query reflects what it did. A closed or expired session throws SessionClosedError.
   */
  session?: SessionHandle;
}

export interface RetrieveResults {
  items: RetrievedItem[];
  /** The level the query ran at, decided once when it entered. */
  degradationLevel: DegradationLevel;
  /** Things the caller may want to know, such as a relaxed diversity cap. */
  warnings: string[];
  /** What the level did: candidate counts, windows, whether diversity ran. */
  explain: Explain;
  tookMs: number;
}

export interface SearchRequest extends QueryControl {
  /** Free text, matched word by word (any word) and ranked by BM25. */
  text?: string;
  /** A query vector, matched by ANN (cosine). With `text` too, the two are fused by RRF. */
  vector?: readonly number[] | Float32Array;
  filter?: Filter;
  diversity?: Diversity;
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
  hits: SearchHit[];
  mode: 'text' | 'vector' | 'hybrid';
  degradationLevel: DegradationLevel;
  warnings: string[];
  explain: Explain;
  tookMs: number;
}
