import { InvalidInputError } from './errors.js';

/**
 * Degradation levels, ordered from best quality to cheapest. A level is a small integer so that
 * comparing two levels is one integer compare and a level fits in a SharedArrayBuffer slot. Frozen:
 * every copy of the package must agree on the numbers, so no caller may reassign one.
 */
export const DegradationLevel = Object.freeze({
  Full: 0,
  ReducedCandidates: 1,
  CoarseAggregates: 2,
  NoDiversity: 3,
} as const);

export type DegradationLevel = (typeof DegradationLevel)[keyof typeof DegradationLevel];

const NAMES = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;
export type DegradationLevelName = (typeof NAMES)[number];

/** The level's name, as it appears in logs, metrics and JSON. */
export function levelName(level: DegradationLevel): DegradationLevelName {
  return NAMES[level];
}

export function isDegradationLevel(value: unknown): value is DegradationLevel {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < NAMES.length;
}

/** The level named or numbered by `value`, or undefined when it is neither. */
function asLevel(value: unknown): DegradationLevel | undefined {
  if (isDegradationLevel(value)) return value;
  if (typeof value !== 'string') return undefined;
  const i = (NAMES as readonly string[]).indexOf(value);
  return i < 0 ? undefined : (i as DegradationLevel);
}

/**
 * Validates a level given by a caller: a {@link DegradationLevel} (0–3) or its name
 * (`'Full'`, `'ReducedCandidates'`, `'CoarseAggregates'`, `'NoDiversity'`).
 * @throws {@link InvalidInputError} naming `field` and the value.
 */
export function checkLevel(value: unknown, field = 'level'): DegradationLevel {
  const level = asLevel(value);
  if (level === undefined) {
    throw new InvalidInputError(field, `a DegradationLevel (0 to ${NAMES.length - 1}) or its name (${NAMES.map((n) => `'${n}'`).join(', ')})`, value);
  }
  return level;
}

/**
 * What each level changes in the query pipelines (DESIGN.md §4). Executors read only this, so the
 * table lives in one place.
 */
export interface LevelPlan {
  /** ANN candidates fetched per query. */
  readonly annTopK: number;
  /** Divisor applied to the BM25 candidate limit. */
  readonly bm25Divisor: number;
  /** Windowed counts are read from the all-time count, velocity from the 24h window. */
  readonly coarseAggregates: boolean;
  /** The diversity pass runs. */
  readonly diversity: boolean;
  /**
   * trending scores at most this many of the window's active slots per velocity kind, the most
   * recently active first (plus the slots written since the orders were last rebuilt); `Infinity`
   * scores them all. The items that lead a window are the ones with the most events in it, so they
   * are the ones most likely to have one in the last moments: the prefix of the recency order
   * holds them (measured: docs/overload.md, "What each level skips").
   */
  readonly trendingSlots: number;
}

/**
 * Each level cuts every stage's budget again, so each costs less than the one above it. Measured on
 * 100 000 items, 2 cores shared with other work (`bench:retrieve` for the executors alone,
 * `bench:overload --levels-only` for the worker's mean service time per query type, cache off;
 * docs/overload.md, "What each level skips"):
 *
 * - ANN top-k 500 → 200 → 100 → 64, and below 128 the search breadth with it (a layered index
 *   searches a view of its snapshot opened with `expansion_search = k`; without that, usearch
 *   searches max(128, k) and 64 would cost what 128 does). Hybrid: 0.70× / 0.54× / 0.40× Full's
 *   service time, overlap@10 0.88 / 0.78 / 0.72.
 * - BM25 depth 200 → 100 → 50 → 25 (divisor 1, 2, 4, 8): MaxScore's θ rises sooner the smaller
 *   the depth, so fewer postings are scored. Only where something reorders the BM25 hits (fusion,
 *   a boost, diversity): a plain or filtered text search fetches its page. Text: 0.71× / 0.59× /
 *   0.43×.
 * - trending slots ∞ → 256 → 128 → 64 per velocity kind: 1h trending visits 1 828 → 499 → 371 →
 *   307 slots, overlap@10 1.00 at each (the leaders of a window are its most recently active
 *   slots); service time 0.27× / 0.17× / 0.10× Full's.
 *
 * On the whole mix: 0.48× (ReducedCandidates), 0.36× (CoarseAggregates), 0.27× (NoDiversity); the
 * run before, same plan, 0.44×, 0.37×, 0.32×.
 */
const PLANS: readonly LevelPlan[] = Object.freeze([
  Object.freeze({ annTopK: 500, bm25Divisor: 1, coarseAggregates: false, diversity: true, trendingSlots: Number.POSITIVE_INFINITY }),
  Object.freeze({ annTopK: 200, bm25Divisor: 2, coarseAggregates: false, diversity: true, trendingSlots: 256 }),
  Object.freeze({ annTopK: 100, bm25Divisor: 4, coarseAggregates: true, diversity: true, trendingSlots: 128 }),
  Object.freeze({ annTopK: 64, bm25Divisor: 8, coarseAggregates: true, diversity: false, trendingSlots: 64 }),
]);

export function levelPlan(level: DegradationLevel): LevelPlan {
  return PLANS[level]!;
}
