import { DegradationLevel } from 'tidal-load';

/**
 * What each degradation level does, in one place (DESIGN.md §4): every number or switch an executor
 * varies by level is a field of its level's plan, with the measurement that chose it beside it.
 * Executors receive a plan (or one of its parts) and never look at the level itself; the query
 * worker turns the level it was given into its plan ({@link levelPlan}), once per query.
 *
 * Each level cuts every stage's budget again, so each costs less than the one above it. Measured on
 * 100 000 items, 2 cores shared with other work (`bench:retrieve` for the executors alone,
 * `bench:overload --levels-only` for the worker's mean service time per query type, cache off;
 * docs/overload.md, "What each level skips"). On the whole mix: 0.48× (ReducedCandidates), 0.36×
 * (CoarseAggregates), 0.27× (NoDiversity) Full's service time; the run before, same plan, 0.44×,
 * 0.37×, 0.32×.
 */
export interface LevelPlan {
  readonly text: TextPlan;
  readonly ann: AnnPlan;
  /** Candidates around a context vector (retrieve with `context`). */
  readonly context: ContextPlan;
  readonly trending: TrendingPlan;
  readonly windows: WindowsPlan;
  readonly diversity: DiversityPlan;
  /** `following`, `hot`, `rising` and `top`. */
  readonly feeds: FeedsPlan;
  readonly forYou: ForYouPlan;
}

/**
 * Search's BM25 stage. Depth 200 → 100 → 50 → 25: MaxScore's θ rises sooner the smaller the depth,
 * so fewer postings are scored. Only where something reorders the BM25 hits (fusion, a boost,
 * diversity): a plain or filtered text search fetches its page. Text: 0.71× / 0.59× / 0.43× Full's
 * service time.
 */
export interface TextPlan {
  /**
   * BM25 candidates per query. Full's 200 is 20× the default limit of 10: room for the filter, the
   * signal boost and diversity to reorder. The text index's top-k search costs less the smaller
   * this is, so halving it is a real saving.
   */
  readonly bm25Depth: number;
  /**
   * Postings a text query may score before it stops with the best it has seen (an approximate
   * top-k, flagged in `explain.textBudgetExhausted`); `Infinity`: exact. At 100 000 items of the
   * bench corpus a 1–3 word query at depth 100 scores ~2 000 postings, at most 3 642 over
   * `bench:text`'s 300 queries: NoDiversity's 4 096 cuts none of those, only longer queries over
   * common terms, so that the deepest level has a bounded worst case (~4 096 × 30 ns ≈ 0.12 ms) as
   * well as a mean.
   */
  readonly postingsBudget: number;
}

/**
 * The ANN stage of search and of retrieve around a context vector. Top-k 500 → 200 → 100 → 64, and
 * below 128 the search breadth with it (a layered index searches a view of its snapshot opened with
 * `expansion_search = k`; without that, usearch searches max(128, k) and 64 would cost what 128
 * does). Hybrid: 0.70× / 0.54× / 0.40× Full's service time, overlap@10 0.88 / 0.78 / 0.72.
 */
export interface AnnPlan {
  /** ANN candidates fetched per query (also the search breadth). */
  readonly topK: number;
}

/**
 * `popular` around a context vector below Full: the popular subset's members inside Full's ANN
 * ball stand in for (or add to) the ANN's neighbours.
 *
 * The shortlist: how many of the popular subset's most popular members the exact pass searches.
 * Its rows are in popularity order, so a shortlist is a prefix of the same matrix. Measured at
 * 100 000 items, `bench:retrieve --shortlists=…` (200 queries, levels interleaved, shared machine):
 * overlap@10 with Full 0.87 with 8 192, 0.85 with 6 144, 0.81 with 4 096, 0.70 with 2 048, 0.56
 * with 1 024, 0.41 with none; the pass itself is 8 192 × 128 int8 ≈ 0.2–0.3 ms against ~0.07 ms
 * for 2 048, next to an HNSW search of 200 that costs ~0.6× the Full one of 500. ReducedCandidates
 * keeps the margin above its 0.8 floor; CoarseAggregates (no floor of its own) and NoDiversity
 * (floor 0.6) take a shorter one. Those figures are for the ANN's neighbours plus the shortlist's;
 * where the ball's members alone stand in, `bench:retrieve --only=context` (40 queries, limit 20,
 * shared machine) gave ReducedCandidates 0.17× Full's time, overlap@10 0.85 (no HNSW search in 39
 * of 40 queries), CoarseAggregates 0.41×, 0.83.
 *
 * Below ReducedCandidates the ball is topped up from the shortlist rather than searching the graph
 * (`fillBall`), and that changed the choice: `bench:retrieve --only=context --shortlists=3072,4096`
 * (40 queries, limit 20, shared machine) gave CoarseAggregates 0.21× Full's time, overlap@10 0.86
 * with 4 096; NoDiversity 0.16×, 0.53 with 2 048 (under its 0.6 floor), 0.18×, 0.72 with 3 072,
 * 0.17×, 0.83 with 4 096. Past the HNSW search the shortlist's length no longer shows in the time
 * (the pass over 4 096 int8 rows is ≈ 0.1 ms), so NoDiversity keeps 4 096 and is cheaper than
 * CoarseAggregates by what it skips after the candidates.
 */
export interface ContextPlan {
  /** The popular subset's members stand in for the ANN's neighbours (or add to them). */
  readonly popularStandIn: boolean;
  /**
   * A ball holding fewer than a page of members is topped up with the shortlist's nearest members
   * just outside it instead of searching the graph: with a shortlist of 2 048 the ball held fewer
   * than a page in ~97 % of `bench:retrieve`'s queries, so the shorter shortlist meant to make
   * NoDiversity cheap made it run the HNSW search (and the exact pass besides) nearly every time,
   * 0.67× Full's time against CoarseAggregates' 0.45×.
   */
  readonly fillBall: boolean;
  /** Members of the popular subset the exact pass searches (a prefix in popularity order). */
  readonly popularShortlist: number;
  /** The top-k of the ANN ball the members stand in for: Full's. */
  readonly ballTopK: number;
}

/**
 * trending's budget below Full, ∞ → 256 → 128 → 64, read two ways by window (candidates/trending.ts):
 *
 * - over 1h, the walk down the count order stops after `slots` slots walked, every velocity kind
 *   together (the slots written since the orders were last rebuilt are read on top, at every
 *   level). Full walks until its answer is exact; a level's walk is the first `slots` steps of
 *   that same walk, so it never reads more than the level above it, and answers as Full does
 *   wherever Full's walk ends sooner. At 100 000 items (`bench:retrieve`, limit 20 with `maxPer`
 *   2, so 100 places ranked above NoDiversity) 444 → 444 → 340 → 251 slots visited, 212 of them
 *   the slots written since the last rebuild; overlap@10 with the exhaustive ranking 1.00 at each.
 * - over 24h and 7d, at most `slots` of the window's active slots per velocity kind, the most
 *   recently active first; `Infinity` scores them all (or scans, where they are most slots). The
 *   items that lead a window are the ones with the most events in it, so they are the ones most
 *   likely to have one in the last moments: the prefix of the recency order holds them. At 100 000
 *   items 24h read 14 871 (the scan) → 599 → 471 → 407 slots, 7d 14 871 → 640 → 471 → 407,
 *   overlap@10 1.00 at each.
 */
export interface TrendingPlan {
  readonly slots: number;
}

export interface WindowsPlan {
  /** Windowed counts are read from the all-time count, velocity from the 24h window. */
  readonly coarse: boolean;
  /**
   * A retrieve answer sent as JSON takes a row's signals as this thread last serialized them, up
   * to `SIGNALS_REUSE_MS` (1 s) before the query, unless a signal was written to the item since
   * (item-signals.ts): reading and formatting them was most of a row's cost. Not `related`'s rows
   * nor a search's, which seldom come back within the second.
   */
  readonly reuse: boolean;
}

export interface DiversityPlan {
  /** The diversity pass runs. */
  readonly enabled: boolean;
}

/**
 * Candidates `following`, `hot`, `rising` and `top` may visit (`Infinity`: what their definition
 * needs). Each visit reads the item's slots (one per kind): 2 000 visits are ~4 000 slot reads,
 * about 0.3 ms on the bench machine, whatever the corpus size.
 */
export interface FeedsPlan {
  readonly candidateBudget: number;
}

/**
 * How many candidates `for_you` takes from each source. A warm user's score rewards recency,
 * creator affinity and velocity as well as similarity, so the best items are not all near the
 * preference vector: at 100 000 items, of the top 10 over the 500 nearest neighbours that lie
 * outside the 200 nearest, 82 % are under two days old and 76 % are by a creator the user has
 * affinity with. Sixty-four neighbours plus these cheap sources find them for less than a wider ANN
 * search (whose cost grows with its breadth: 500 neighbours 1.4 ms, 200 0.5 ms).
 *
 * Chosen against the exhaustive ranking (every item scored by the same mix, velocity over the largest
 * of all items) with `bench:personalization --sweep` (100 of the bench's 10 000 users, budget sets
 * side by side on one thread; docs/BENCHMARKS.md, "for_you budget sweep"). Where the exhaustive
 * top 10 lie: at 100 000 items 92 % among the newest 16 of the 16 strongest affinity creators
 * (97 % among their newest 32), 4 % among the 64 nearest neighbours, 5 % among the 50 newest items,
 * 3 % in trending (which still matters: it puts the largest velocity among the candidates, the
 * velocity feature's divisor). So the creators' depth is what buys quality, and most of it at the
 * strongest creators: an item's affinity feature is its creator's affinity over the largest, so a
 * weak creator's older items cannot outrank the rest, and each creator's depth follows its
 * affinity (`creatorFloor`). At 100 000 items, Full 16 × 32 with a floor of a quarter overlapped
 * the exhaustive top 10 0.989 with 406 candidates, where 16 × 16 for every creator gave 0.948 with
 * 388; the levels below 0.982 / 0.967 / 0.935 (0.891 / 0.832 / 0.755 before).
 *
 * A creator's list grows with the catalogue (the bench corpus has a creator per 50 items, their
 * sizes Zipf-distributed, so the largest creators' lists are longer the more items there are), and
 * the same depth reaches back less far: at 300 000 items the same budgets gave 0.971 / 0.930 /
 * 0.883 / 0.807; 1.5× the depth 0.989 / 0.978 / 0.955 / 0.924 and 2× 0.991 / 0.989 / 0.977 /
 * 0.964. √3 ≈ 1.7× is between, so `perCreator` grows as the square root of the catalogue over
 * 100 000 items (`perCreatorGrowth` 0.5): at 300 000 items 0.991 / 0.986 / 0.970 / 0.949 with
 * 604 / 466 / 335 / 268 candidates, at 1 000 000 items (101 / 76 / 63 / 51 for the strongest
 * creator) 0.989 / 0.980 / 0.963 / 0.931 with 958 / 741 / 518 / 424. A smaller exponent costs
 * quality fast there: 0.4 / 0.3 / 0.2 gave Full 0.981 / 0.975 / 0.940 and NoDiversity (0.3, 0.2)
 * 0.792 / 0.719; a larger one buys little (NoDiversity 0.972 at 0.65, 0.983 at 0.8 and 1; Full
 * 0.989 at 0.65 and 0.8 for 1 227 and 1 574 candidates), so 0.5 stays at every level. The newest
 * items hold few of the top items at any size (1 % among the newest 50 at 1 000 000; Full with
 * `newestGrowth` 0.5 0.989 there, as without), so they do not grow. Through the workers at
 * 1 000 000 items Full takes 4.1 ms p50 at the caller and NoDiversity's 424 candidates 2.6 ms, so
 * no level's budgets meet 2 ms there: the ANN search alone at k = 64 takes 1.35 to 1.67 ms. The
 * ANN search is each level's largest fixed cost and follows its breadth (each breadth has a view
 * of its own, see `NARROWEST_BREADTH` in ann.ts): at 100 000 items, with 16 × 16 for every
 * creator, 128 neighbours overlapped 0.959 at 1.55 ms in the worker, 64 0.950 at 1.00 ms, 32 0.944
 * at 0.97 ms, so Full asks for 64 and each level below for fewer, at every catalogue size.
 *
 * Past a few dozen neighbours the search's cost hardly follows its breadth, and where the user
 * has creator affinities its neighbours hold few of the top items (the 32 nearest 4 % of the
 * exhaustive top 10 at 100 000 items): so NoDiversity searches no graph for such a user
 * ({@link ForYouPlan.annWithAffinity}). `bench:personalization --sweep` (100 users, `--exact-ann`)
 * gave NoDiversity without neighbours 0.909 overlap@10 with the exhaustive ranking against 0.924
 * with 32; in process (bench/probes/level-throughput.ts, 100 000 items, load average 12–19) a
 * NoDiversity feed without the search cost 0.30× Full's CPU per call, with it 0.76×. A user without
 * affinities (`bench:serve --mix personal`'s users only view) has only the neighbours to find what
 * is near their taste: without them NoDiversity overlapped Full's answer 0.19 against 0.51 (and
 * the popular subset's 32 nearest by an exact pass 0.25, for no less CPU), so that user keeps the
 * search.
 */
export interface ForYouPlan {
  /** ANN neighbours of the preference vector. */
  readonly ann: number;
  /**
   * ANN neighbours for a user with a positive creator affinity (the creators source then holds
   * most of the best items); `ann` for a user without one.
   */
  readonly annWithAffinity: number;
  /**
   * For a user without a positive creator affinity: the `ann` neighbours are the preference's
   * nearest among the popular subset's `popularRows` most popular members (an exact int8 search),
   * not the graph's. See `ContextCandidates.nearestPopular`.
   */
  readonly popularNeighbours: boolean;
  /** The popular subset's members `popularNeighbours` searches (the most popular first). */
  readonly popularRows: number;
  /**
   * For a user without a positive creator affinity: the neighbours this query thread's last graph
   * search for the user found, while kept (`NeighbourCache`: a minute, the preference not moved
   * far), before `popularNeighbours` or the graph. Each is scored against the current preference.
   */
  readonly reuseNeighbours: boolean;
  /** The creators the user has the largest positive affinity with, whose newest items are taken. */
  readonly creators: number;
  /**
   * Newest items passing the query's predicate, per such creator, at {@link FOR_YOU_REFERENCE_ITEMS}
   * items: the creator of the largest affinity gets this many, the others
   * `perCreator × (creatorFloor + (1 − creatorFloor) × affinity ÷ largest)`.
   */
  readonly perCreator: number;
  /** The share of `perCreator` every affinity creator gets whatever its affinity (1: all the same depth). */
  readonly creatorFloor: number;
  /** `perCreator` grows as (items ÷ {@link FOR_YOU_REFERENCE_ITEMS})^perCreatorGrowth above the reference. */
  readonly perCreatorGrowth: number;
  /** The newest items passing the query's predicate, at {@link FOR_YOU_REFERENCE_ITEMS} items. */
  readonly newest: number;
  /** `newest` grows as (items ÷ {@link FOR_YOU_REFERENCE_ITEMS})^newestGrowth above the reference. */
  readonly newestGrowth: number;
  /** The first items of `trending` over the query's window passing the predicate. */
  readonly trending: number;
  /** Active slots per velocity kind the trending source may read. */
  readonly trendingSlots: number;
  /** A user without a preference vector takes this many of `trending` and of `new`: the level's ANN breadth. */
  readonly coldStart: number;
}

/** The catalogue size a plan's `for_you` depths are given at; above it they grow ({@link forYouBudgetAt}). */
export const FOR_YOU_REFERENCE_ITEMS = 100_000;

/**
 * The catalogue size past which the `for_you` depths stop growing, to bound their cost: there Full's
 * strongest creator gets 101 items, 958 candidates per query at 1 000 000 items, where Full
 * overlapped the exhaustive top 10 0.989 (`bench:personalization --sweep`). Growth was measured at
 * 100 000, 300 000 and 1 000 000 items; past the limit nothing is measured.
 */
export const FOR_YOU_GROWTH_LIMIT_ITEMS = 1_000_000;

/**
 * `plan`'s budgets for a catalogue of `items` present items: `perCreator` and `newest` are walks of
 * newest-first lists, and a list of a catalogue k times larger over the same days is k times longer,
 * so the same depth reaches back 1/k as far. Each grows by its exponent from
 * {@link FOR_YOU_REFERENCE_ITEMS} up to {@link FOR_YOU_GROWTH_LIMIT_ITEMS}; below the reference the
 * plan's own values hold.
 */
export function forYouBudgetAt(plan: ForYouPlan, items: number): ForYouPlan {
  const x = Math.min(FOR_YOU_GROWTH_LIMIT_ITEMS, Math.max(FOR_YOU_REFERENCE_ITEMS, items)) / FOR_YOU_REFERENCE_ITEMS;
  if (x === 1) return plan;
  return {
    ...plan,
    perCreator: Math.round(plan.perCreator * x ** plan.perCreatorGrowth),
    newest: Math.round(plan.newest * x ** plan.newestGrowth),
  };
}

/** The plan's type with every part optional, for {@link tunedPlan}. */
export type PlanOverrides = { readonly [P in keyof LevelPlan]?: Partial<LevelPlan[P]> };

function freezePlan(plan: LevelPlan): LevelPlan {
  for (const part of Object.values(plan)) Object.freeze(part);
  return Object.freeze(plan);
}

const FULL = freezePlan({
  text: { bm25Depth: 200, postingsBudget: Number.POSITIVE_INFINITY },
  ann: { topK: 500 },
  context: { popularStandIn: false, fillBall: false, popularShortlist: 8192, ballTopK: 500 },
  trending: { slots: Number.POSITIVE_INFINITY },
  windows: { coarse: false, reuse: false },
  diversity: { enabled: true },
  feeds: { candidateBudget: Number.POSITIVE_INFINITY },
  forYou: {
    ann: 64,
    annWithAffinity: 64,
    popularNeighbours: false,
    popularRows: 2048,
    reuseNeighbours: false,
    creators: 16,
    perCreator: 32,
    creatorFloor: 0.25,
    perCreatorGrowth: 0.5,
    newest: 50,
    newestGrowth: 0,
    trending: 50,
    trendingSlots: 512,
    coldStart: 500,
  },
});

const REDUCED_CANDIDATES = freezePlan({
  text: { bm25Depth: 100, postingsBudget: Number.POSITIVE_INFINITY },
  ann: { topK: 200 },
  context: { popularStandIn: true, fillBall: false, popularShortlist: 8192, ballTopK: 500 },
  trending: { slots: 256 },
  windows: { coarse: false, reuse: false },
  diversity: { enabled: true },
  feeds: { candidateBudget: 2000 },
  forYou: {
    ann: 48,
    annWithAffinity: 48,
    popularNeighbours: false,
    popularRows: 2048,
    reuseNeighbours: false,
    creators: 16,
    perCreator: 24,
    creatorFloor: 0.25,
    perCreatorGrowth: 0.5,
    newest: 40,
    newestGrowth: 0,
    trending: 30,
    trendingSlots: 256,
    coldStart: 200,
  },
});

const COARSE_AGGREGATES = freezePlan({
  text: { bm25Depth: 50, postingsBudget: Number.POSITIVE_INFINITY },
  ann: { topK: 100 },
  context: { popularStandIn: true, fillBall: true, popularShortlist: 4096, ballTopK: 500 },
  trending: { slots: 128 },
  windows: { coarse: true, reuse: false },
  diversity: { enabled: true },
  feeds: { candidateBudget: 2000 },
  forYou: {
    ann: 40,
    annWithAffinity: 40,
    popularNeighbours: false,
    popularRows: 2048,
    reuseNeighbours: false,
    creators: 12,
    perCreator: 20,
    creatorFloor: 0.25,
    perCreatorGrowth: 0.5,
    newest: 30,
    newestGrowth: 0,
    trending: 25,
    trendingSlots: 256,
    coldStart: 100,
  },
});

const NO_DIVERSITY = freezePlan({
  text: { bm25Depth: 25, postingsBudget: 4096 },
  ann: { topK: 64 },
  context: { popularStandIn: true, fillBall: true, popularShortlist: 4096, ballTopK: 500 },
  trending: { slots: 64 },
  windows: { coarse: true, reuse: true },
  diversity: { enabled: false },
  feeds: { candidateBudget: 2000 },
  forYou: {
    ann: 32,
    annWithAffinity: 0,
    popularNeighbours: true,
    popularRows: 2048,
    reuseNeighbours: true,
    creators: 12,
    perCreator: 16,
    creatorFloor: 0.25,
    perCreatorGrowth: 0.5,
    newest: 20,
    newestGrowth: 0,
    trending: 20,
    trendingSlots: 128,
    coldStart: 64,
  },
});

/** Every level's plan, indexed by `DegradationLevel`. */
export const LEVEL_PLANS: readonly LevelPlan[] = Object.freeze([FULL, REDUCED_CANDIDATES, COARSE_AGGREGATES, NO_DIVERSITY]);

/** The plan of `level`. */
export function levelPlan(level: DegradationLevel): LevelPlan {
  return LEVEL_PLANS[level] ?? FULL;
}

/**
 * Each level's `for_you` budget without the cold start's depth (what `USER_DEFAULTS.forYouBudgets`
 * shows), indexed by `DegradationLevel`: a view of the plans, not a table of its own.
 */
export type ForYouBudget = Omit<ForYouPlan, 'coldStart'>;
export const FOR_YOU_BUDGETS: readonly ForYouBudget[] = Object.freeze(
  LEVEL_PLANS.map(({ forYou: { coldStart: _, ...budget } }) => Object.freeze(budget)),
);

/** The feeds' candidate budget wherever a plan bounds it (what `USER_DEFAULTS.feedCandidateBudget` shows). */
export const FEED_CANDIDATE_BUDGET: number = REDUCED_CANDIDATES.feeds.candidateBudget;

/** Full's plan: what a query gets when nothing degrades it. */
export const FULL_PLAN: LevelPlan = LEVEL_PLANS[DegradationLevel.Full]!;

/**
 * `base` with some fields replaced, frozen like every plan: for benchmarks and tests that vary one
 * budget (`bench:retrieve --shortlists=…`, trending's exact ranking at every level's windows).
 */
export function tunedPlan(base: LevelPlan, overrides: PlanOverrides): LevelPlan {
  const out: Record<string, object> = {};
  for (const key of Object.keys(base) as (keyof LevelPlan)[]) out[key] = { ...base[key], ...overrides[key] };
  return freezePlan(out as unknown as LevelPlan);
}
