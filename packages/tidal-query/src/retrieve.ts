import type Database from 'better-sqlite3';
import { DegradationLevel as Level, levelPlan, type DegradationLevel } from 'tidal-load';
import { cosine, exactNearest, exactNearestWithSimilarity, toInt8, type AnnIndex } from './ann.js';
import { blobToVector } from './items-table.js';
import { compileFilter, type Predicate } from './filter.js';
import { popularity, velocityOf, type QueryContext, type WorkCounter } from './context.js';
import { readItemSignals } from './item-signals.js';
import { selectAndHydrate, tailOrder } from './tail.js';
import { Floor, TopK } from './topk.js';
import { compileUserPredicate } from './user-state.js';
import { forYou, TrendingCache } from './profiles/for-you.js';
import { FEED_CANDIDATE_BUDGET, following, hot, related, rising, top, windowStartMs, type PopularityWalkResult } from './profiles/feeds.js';
import type { Explain, RetrieveTask, RetrievedItem, SignalValues, VelocityWindow, WorkerRetrieveResult } from './types.js';

const WINDOW_MS: Record<VelocityWindow, number> = { '1h': 3_600_000, '24h': 86_400_000, '7d': 604_800_000 };

/** With diversity on, this many times the limit are ranked so the greedy pass has room to skip. */
const DIVERSITY_OVERFETCH = 5;

/**
 * Readings of the slot orders that found them overwritten mid-read before the candidate stage falls
 * back to the scan. A rebuild publishes at most every 64 changed slots and a reading takes
 * microseconds, so one retry is already rare.
 */
const ORDER_ATTEMPTS = 3;

/**
 * Items in the popular subset searched exactly around a context vector below Full. Measured at
 * 100 000 items (10 000 with signals), `bench:retrieve`: overlap@10 with Full 0.68 with 2 048, 0.79
 * with 4 096, 0.86 with 8 192. 8 192 × 128 int8 is 1 MiB per worker (plus the float vectors
 * cached, 4 MiB), searched in ~0.2 ms.
 */
const POPULAR_SUBSET = 8192;

/**
 * Per level (indexed by `DegradationLevel`; Full searches no subset), how many of the popular
 * subset's most popular members the exact pass searches. Its rows are in popularity order, so a
 * shortlist is a prefix of the same matrix. Measured at 100 000 items, `bench:retrieve
 * --shortlists=…` (200 queries, levels interleaved, shared machine): overlap@10 with Full 0.87 with
 * 8 192, 0.85 with 6 144, 0.81 with 4 096, 0.70 with 2 048, 0.56 with 1 024, 0.41 with none; the
 * pass itself is 8 192 × 128 int8 ≈ 0.2–0.3 ms against ~0.07 ms for 2 048, next to an HNSW search
 * of 200 that costs ~0.6× the Full one of 500. ReducedCandidates keeps the margin above its 0.8
 * floor; CoarseAggregates (no floor of its own) and NoDiversity (floor 0.6) take a shorter one.
 * Those figures are for the ANN's neighbours plus the shortlist's; where the ball's members alone
 * stand in (see `#ballMembers`), `bench:retrieve --only=context` (40 queries, limit 20, shared
 * machine) gave ReducedCandidates 0.17× Full's time, overlap@10 0.85 (no HNSW search in 39 of 40
 * queries), CoarseAggregates 0.41×, 0.83.
 *
 * Below ReducedCandidates the ball is topped up from the shortlist rather than searching the graph
 * (see `#ballMembers`' `fill`), and that changed the choice: `bench:retrieve --only=context
 * --shortlists=3072,4096` (40 queries, limit 20, shared machine) gave CoarseAggregates 0.21× Full's
 * time, overlap@10 0.86 with 4 096; NoDiversity 0.16×, 0.53 with 2 048 (under its 0.6 floor),
 * 0.18×, 0.72 with 3 072, 0.17×, 0.83 with 4 096. Past the HNSW search the shortlist's length no
 * longer shows in the time (the pass over 4 096 int8 rows is ≈ 0.1 ms), so NoDiversity keeps
 * 4 096 and is cheaper than CoarseAggregates by what it skips after the candidates.
 */
const POPULAR_SHORTLIST: readonly number[] = [POPULAR_SUBSET, POPULAR_SUBSET, 4096, 4096];

/**
 * Items in the uniform sample that tells, around a context vector, how far Full's ANN ball
 * reaches: its 500 nearest of N items are about its `500 × SAMPLE / N` nearest of the sample, so
 * the similarity of that sample row is the ball's radius, measured in the query's own region (the
 * popular subset alone cannot tell it: popularity is not spread evenly over the space). 4 096 × 128
 * int8 is 512 KiB per worker, searched exactly in ≈ 0.1 ms.
 */
const BALL_SAMPLE = 4096;

/**
 * The fewest sample rows the radius may be read from: below it (a corpus over 500 × 4 096 / 8 ≈
 * 256 000 items) the estimate is too coarse, and the pass takes the ANN's neighbours as before.
 */
const BALL_MIN_RANK = 8;

/**
 * Rebuilds of the slot orders after which the popular subset is rebuilt. Membership only decides
 * which items are candidates (their popularity is always read fresh), so it may lag a little.
 */
const SUBSET_STALE_GENERATIONS = 16;

/** The most popular items and their vectors, kept per executor (one per worker). */
interface PopularSubset {
  generation: number;
  catalogVersion: number;
  ann: AnnIndex | null;
  ordinals: Int32Array;
  /** The members' vectors, row by row, as int8 (see `toInt8`). */
  matrix: Int8Array;
  /** The members' vectors as stored, for the similarity of the ones picked. */
  floats: Float32Array;
  /** `rank[o]` is 1 + the row of ordinal `o` (rows are in popularity order), 0 for a non-member. */
  rank: Int32Array;
  /** A uniform sample of the items with an embedding (every few ordinals), int8 rows: see {@link BALL_SAMPLE}. */
  sample: Int8Array;
  /** Items with an embedding the sample stands for (the ANN's size when it was drawn). */
  sampled: number;
}

/** Options of {@link RetrieveExecutor}. */
export interface RetrieveExecutorOptions {
  /**
   * Scan every signal slot for `popular` and `trending` instead of walking the slot orders: the
   * reference the orders are tested and benchmarked against.
   * @default false
   */
  exhaustive?: boolean;
  /**
   * Per level (indexed by `DegradationLevel`), how many of the popular subset's most popular
   * members the exact pass around a context vector searches: a benchmark knob, see
   * {@link POPULAR_SHORTLIST}.
   */
  popularShortlist?: readonly number[];
  /**
   * Per level, how many of a window's active slots per velocity kind trending scores, in place of
   * the level plan's `trendingSlots`: `Infinity` at every level gives the exact ranking of each
   * level's windows (what the tests compare the scan with), smaller values are a benchmark knob.
   */
  trendingSlots?: readonly number[];
  /**
   * Per level, the ANN top-k around a context vector in place of the level plan's `annTopK`: a
   * benchmark knob (`bench:retrieve --ann-topk=…`).
   */
  annTopK?: readonly number[];
  /**
   * Where `for_you` keeps trending between queries at one clock (see {@link TrendingCache}); null:
   * every query walks trending with its own predicate (the reference the cache is tested against).
   * @default a new cache
   */
  trendingCache?: TrendingCache | null;
  /**
   * Read each returned item's `signals` on first access instead of while ranking (see
   * {@link DeferredSignals}): for an executor on the thread that writes the signal store, which
   * calls {@link DeferredSignals.settle} before every write. Null: read while ranking.
   * @default null
   */
  deferredSignals?: DeferredSignals | null;
}

/** One result's items whose signal values are read on first access (see {@link DeferredSignals}). */
interface DeferredPage {
  readonly nowMs: number;
  readonly coarse: boolean;
  readonly ordinals: readonly number[];
  /** Per item, its values once read (or set by the caller); undefined while deferred. */
  readonly values: (Record<string, SignalValues> | undefined)[];
}

/**
 * The returned items' signal values, read when the caller first reads an item's `signals` rather
 * while ranking: a result's signals are ~1 KiB of signal store per item and kind, most of what a
 * main-thread `related` query touched (and, with the slots out of cache, most of its time), and
 * a caller that shows ids and scores never reads them.
 *
 * A value read later is the one read while ranking would have given: it is read as of the
 * query's clock and level, and the store only changes through {@link settle}'s caller, which
 * settles first: every value still deferred is read before the first write to the store. Pages
 * are held weakly, so a result the caller dropped is never read.
 */
export class DeferredSignals {
  readonly #ctx: Pick<QueryContext, 'store' | 'schema'>;
  #pending: WeakRef<DeferredPage>[] = [];
  /** Pages pending after the last sweep of dropped ones: the next sweep runs at twice as many. */
  #sweepAt = 64;

  constructor(ctx: Pick<QueryContext, 'store' | 'schema'>) {
    this.#ctx = ctx;
  }

  /** Pages whose values may still be deferred (tests). */
  get pending(): number {
    return this.#pending.length;
  }

  /** Reads every value still deferred, as of its query. Call before each write to the signal store. */
  settle(): void {
    const pending = this.#pending;
    if (pending.length === 0) return;
    this.#pending = [];
    this.#sweepAt = 64;
    for (const ref of pending) {
      const page = ref.deref();
      if (page === undefined) continue;
      for (let i = 0; i < page.ordinals.length; i++) if (page.values[i] === undefined) this.read(page, i);
    }
  }

  /** The values of a page's item `i`, read now (and kept). */
  read(page: DeferredPage, i: number): Record<string, SignalValues> {
    const v = readItemSignals(this.#ctx.store, this.#ctx.schema, page.ordinals[i]!, page.nowMs, page.coarse);
    page.values[i] = v;
    return v;
  }

  /** A page for `ordinals`, settled with the others before the next write. */
  page(ordinals: readonly number[], nowMs: number, coarse: boolean): DeferredPage {
    const page: DeferredPage = { nowMs, coarse, ordinals, values: new Array(ordinals.length).fill(undefined) };
    if (ordinals.length === 0) return page;
    const pending = this.#pending;
    pending.push(new WeakRef(page));
    if (pending.length >= this.#sweepAt) {
      this.#pending = pending.filter((r) => r.deref() !== undefined);
      this.#sweepAt = Math.max(64, 2 * this.#pending.length);
    }
    return page;
  }
}

/**
 * A returned item whose `signals` are read on first access (see {@link DeferredSignals}). Every
 * instance shares one accessor pair, defined on the instance so `signals` stays an own enumerable
 * property (JSON, spread and structuredClone read it): an object literal with `get`/`set` made two
 * closures per item and, its accessors all different, a map of its own (the building of the 20
 * items was a quarter of a main-thread `related` call, `bench/src/related-cost.ts`).
 */
class DeferredItem implements RetrievedItem {
  declare id: string;
  declare score: number;
  declare rank: number;
  declare signals: Record<string, SignalValues>;
  declare createdAt: number;
  declare similarity?: number;
  readonly #deferred: DeferredSignals;
  readonly #page: DeferredPage;
  readonly #i: number;

  static readonly #signals: PropertyDescriptor = {
    enumerable: true,
    configurable: true,
    get(this: DeferredItem): Record<string, SignalValues> {
      return this.#page.values[this.#i] ?? this.#deferred.read(this.#page, this.#i);
    },
    set(this: DeferredItem, v: Record<string, SignalValues>) {
      this.#page.values[this.#i] = v;
    },
  };

  constructor(deferred: DeferredSignals, page: DeferredPage, i: number, id: string, score: number, createdAt: number) {
    this.#deferred = deferred;
    this.#page = page;
    this.#i = i;
    this.id = id;
    this.score = score;
    this.rank = i + 1;
    Object.defineProperty(this, 'signals', DeferredItem.#signals);
    this.createdAt = createdAt;
  }
}

/** The velocity window a level reads: the task's own, or 24h at CoarseAggregates (the level plan). */
export function velocityWindowFor(window: VelocityWindow, coarse: boolean): VelocityWindow {
  return coarse ? '24h' : window;
}

/** Counts of one candidate stage, kept apart so a reading that has to start over leaves none. */
interface StageCounts {
  candidates: number;
  afterFilter: number;
}

/** How a threshold walk ended, for a caller that caps it (see `#threshold`). */
interface WalkEnd {
  /** Asked before each entry is taken: true stops the walk there. */
  readonly stop: () => boolean;
  /** The k-th best beat every entry not taken (the walk's own exact stop). */
  early: boolean;
  /** `stop` stopped it. */
  capped: boolean;
}

/**
 * A set of ordinals for one query, as stamps in an array reused across queries: clearing is one
 * increment, and a test is one load (a Set cost a trending walk over 10 000 slots about a third of
 * its time).
 */
class Seen {
  #stamps = new Uint32Array(1024);
  #epoch = 0;

  /** Empties the set. */
  reset(): void {
    if (++this.#epoch === 0xffffffff) {
      this.#stamps.fill(0);
      this.#epoch = 1;
    }
  }

  /** Adds `o`; false if it was already in. */
  add(o: number): boolean {
    let stamps = this.#stamps;
    if (o >= stamps.length) {
      let n = stamps.length;
      while (n <= o) n *= 2;
      const grown = new Uint32Array(n);
      grown.set(stamps);
      this.#stamps = stamps = grown;
    }
    if (stamps[o] === this.#epoch) return false;
    stamps[o] = this.#epoch;
    return true;
  }
}

/**
 * The retrieve pipeline, six stages: candidates (ANN around a context vector, the signal slot
 * orders, or the creation-time order) → filter → load aggregates → score by profile → diversity →
 * limit. The degradation level is decided by the caller at entry and only read here.
 *
 * `popular` walks each kind's slots by forward-decay key and stops, threshold-algorithm style,
 * once no unvisited item can beat the k-th best; `trending` visits the slots with an event inside
 * its window (a prefix of the recency order) and fills any remaining places the way `popular`
 * does. Both return exactly what a scan of every slot returns (see `options.exhaustive`).
 */
export class RetrieveExecutor {
  readonly #ctx: QueryContext;
  readonly #exhaustive: boolean;
  readonly #shortlist: readonly number[];
  readonly #trendingSlots: readonly number[] | undefined;
  readonly #annTopK: readonly number[] | undefined;
  readonly #trendingCache: TrendingCache | null;
  readonly #deferred: DeferredSignals | null;
  readonly #seen = new Seen();
  #subset: PopularSubset | null = null;
  /** Vectors of items looked up for the subset, by ordinal (null: the item has no embedding). */
  readonly #vectors = new Map<number, Float32Array | null>();
  #embedding: Database.Statement | null = null;
  #changedSince: Database.Statement | null = null;

  constructor(ctx: QueryContext, options: RetrieveExecutorOptions = {}) {
    this.#ctx = ctx;
    this.#exhaustive = options.exhaustive === true;
    this.#shortlist = options.popularShortlist ?? POPULAR_SHORTLIST;
    this.#trendingSlots = options.trendingSlots;
    this.#annTopK = options.annTopK;
    this.#trendingCache = options.trendingCache === undefined ? new TrendingCache() : options.trendingCache;
    this.#deferred = options.deferredSignals ?? null;
  }

  /**
   * Builds what the candidate stage reads besides the shared state: the popular subset and its
   * vectors (a few thousand rows of the items table on the first build). Called by the worker's
   * warm, so the first query around a context vector after open does not pay for it.
   */
  warm(nowMs: number): void {
    if (this.#ctx.ann) this.#popularSubset(nowMs, { slots: 0 });
  }

  /** Ranks `task` at `level` as of `nowMs`; `picked`, when given, receives the returned items' ordinals in order. */
  run(task: RetrieveTask, level: DegradationLevel, nowMs: number, picked?: number[]): Omit<WorkerRetrieveResult, 'serviceMs'> {
    const ctx = this.#ctx;
    const plan = levelPlan(level);
    const trendingSlots = this.#trendingSlots?.[level] ?? plan.trendingSlots;
    const coarse = plan.coarseAggregates;
    const velocityWindow = velocityWindowFor(task.window, coarse);
    const useDiversity = task.diversity !== null && plan.diversity;
    const after = task.after && task.after.length > 0 ? task.after : null;
    // A cursor's earlier pages are ranked too (so the next page continues the unpaged order) and
    // removed before the tail.
    const want = (useDiversity ? task.limit * DIVERSITY_OVERFETCH : task.limit) + (after?.length ?? 0);
    const userCount = { dropped: 0 };
    const userPass = compileUserPredicate(task.user, ctx.catalog, ctx.schema.creatorField, userCount);
    const pass = this.#admit(compileFilter(task.filter, ctx.catalog), task.exclude, userPass);
    const explain: Explain = {
      annTopK: null,
      bm25Limit: null,
      windows: coarse ? 'all-time' : 'exact',
      velocityWindow,
      diversityApplied: useDiversity,
      candidates: 0,
      afterFilter: 0,
      slotsVisited: 0,
      annCandidates: null,
      rowsHydrated: 0,
    };
    const warnings: string[] = [];
    const work: WorkCounter = { slots: 0 };

    let ranked: number[];
    let scores: number[];
    let similarity: Map<number, number> | null = null;
    if (task.profile === 'for_you') {
      ({ ranked, scores, similarity } = forYou(ctx, task, level, pass, velocityWindow, nowMs, explain, work, {
        trending: (want, slots, admit = pass) => this.#fromSignals({ ...task, profile: 'trending' }, want, admit, velocityWindow, Math.min(slots, trendingSlots), nowMs, { ...explain }, work).ranked,
        newest: (want) => this.#newest(want, pass, { ...explain }).ranked,
        ...(this.#trendingCache ? { trendingCache: this.#trendingCache } : {}),
      }));
    } else if (task.profile === 'related') {
      ({ ranked, scores } = related(task, pass, nowMs, explain));
    } else if (task.profile === 'following' || task.profile === 'hot' || task.profile === 'rising' || task.profile === 'top') {
      const budget = level === Level.Full ? null : FEED_CANDIDATE_BUDGET;
      if (task.profile === 'following') ({ ranked, scores } = following(ctx, task, want, pass, nowMs, budget, explain, work));
      else if (task.profile === 'hot') ({ ranked, scores } = hot(ctx, want, pass, nowMs, budget, explain, work, (w, admit, max) => this.#popularityWalk(w, admit, max, nowMs, work)));
      else if (task.profile === 'top') ({ ranked, scores } = top(ctx, want, pass, task.window, nowMs, budget, explain, work, (w, admit, max) => this.#popularityWalk(w, admit, max, nowMs, work)));
      else ({ ranked, scores } = rising(ctx, want, pass, task.window, nowMs, budget, explain, work));
    } else if (task.context) {
      ({ ranked, scores, similarity } = this.#aroundContext(task, this.#annTopK?.[level] ?? plan.annTopK, this.#shortlist[level] ?? POPULAR_SUBSET, pass, velocityWindow, nowMs, explain, work));
      if (!ctx.ann) warnings.push('no item has an embedding yet: the context vector found no candidates');
    } else if (task.profile === 'new') {
      ({ ranked, scores } = this.#newest(want, pass, explain));
    } else {
      ({ ranked, scores } = this.#fromSignals(task, want, pass, velocityWindow, trendingSlots, nowMs, explain, work));
    }
    explain.slotsVisited = work.slots;
    if (after) {
      const skip = new Set(after);
      const keptRanked: number[] = [];
      const keptScores: number[] = [];
      for (let i = 0; i < ranked.length; i++) {
        if (skip.has(ranked[i]!)) continue;
        keptRanked.push(ranked[i]!);
        keptScores.push(scores[i]!);
      }
      ranked = keptRanked;
      scores = keptScores;
    }
    if (task.user) explain.userFiltered = userCount.dropped;

    const diversity = useDiversity ? task.diversity : null;
    if (this.#deferred) {
      const items = this.#deferredItems(ranked, scores, similarity, { diversity, limit: task.limit, warnings }, nowMs, coarse, picked);
      explain.rowsHydrated = items.length;
      return { items, warnings, explain };
    }
    let hydrated = 0;
    const items = selectAndHydrate(ctx, ranked, scores, { diversity, limit: task.limit, nowMs, coarse, warnings }, (base, o) => {
      hydrated++;
      picked?.push(o);
      // Extended in place: a spread copy cost main-thread `related` a sixth of its time.
      const item: RetrievedItem = Object.assign(base, { createdAt: ctx.catalog.createdAt[o]! });
      const sim = similarity?.get(o);
      if (sim !== undefined) item.similarity = sim;
      return item;
    });
    explain.rowsHydrated = hydrated;
    return { items, warnings, explain };
  }

  /**
   * The tail with the items' signals deferred (see {@link DeferredSignals}): the same items, fields
   * and order as {@link selectAndHydrate} and the hydrate step of {@link run} give, `signals` an
   * accessor that reads the values on first access.
   */
  #deferredItems(
    ranked: readonly number[],
    scores: readonly number[],
    similarity: Map<number, number> | null,
    options: Parameters<typeof tailOrder>[2],
    nowMs: number,
    coarse: boolean,
    picked: number[] | undefined,
  ): RetrievedItem[] {
    const { catalog } = this.#ctx;
    // Without diversity the tail is the ranking's first `limit`: no index array for it.
    const order = options.diversity ? tailOrder(this.#ctx, ranked, options) : null;
    const n = order ? order.length : Math.min(options.limit, ranked.length);
    const ordinals = new Array<number>(n);
    for (let r = 0; r < n; r++) ordinals[r] = order ? ranked[order[r]!]! : ranked[r]!;
    const deferred = this.#deferred!;
    const page = deferred.page(ordinals, nowMs, coarse);
    const items = new Array<RetrievedItem>(n);
    for (let r = 0; r < n; r++) {
      const o = ordinals[r]!;
      picked?.push(o);
      const item = new DeferredItem(deferred, page, r, catalog.ids[o]!, scores[order ? order[r]! : r]!, catalog.createdAt[o]!);
      const sim = similarity?.get(o);
      if (sim !== undefined) item.similarity = sim;
      items[r] = item;
    }
    return items;
  }

  #admit(filter: Predicate, exclude: Int32Array | null, user: Predicate | null): Predicate {
    const present = this.#ctx.catalog.present;
    // The user's predicate runs last, after the cheap tests, so `userFiltered` counts only the
    // candidates their state alone removed.
    const base: Predicate = !exclude || exclude.length === 0 ? (o) => present[o] === 1 && filter(o) : ((skip) => (o: number) => present[o] === 1 && !skip.has(o) && filter(o))(new Set(exclude));
    if (!user) return base;
    return (o) => base(o) && user(o);
  }

  #score(profile: RetrieveTask['profile'], o: number, window: VelocityWindow, nowMs: number, work: WorkCounter): [number, number] {
    const ctx = this.#ctx;
    if (profile === 'new' || profile === 'for_you') return [ctx.catalog.createdAt[o]!, 0];
    const pop = popularity(ctx, o, nowMs, work);
    if (profile === 'popular') return [pop, 0];
    return [velocityOf(ctx, o, window, nowMs, false, work), pop];
  }

  #aroundContext(
    task: RetrieveTask,
    topK: number,
    shortlist: number,
    pass: Predicate,
    window: VelocityWindow,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
  ): { ranked: number[]; scores: number[]; similarity: Map<number, number> } {
    explain.annTopK = topK;
    const similarity = new Map<number, number>();
    const ann = this.#ctx.ann;
    if (!ann) return { ranked: [], scores: [], similarity };
    const fullTopK = levelPlan(Level.Full).annTopK;
    // Below Full, `popular` ranks the popular members of Full's ball without searching the graph
    // at all when the sample can tell the ball's radius and enough members fall inside it: the
    // HNSW search was most of such a query's cost at every level.
    if (task.profile === 'popular' && topK < fullTopK) {
      const subset = this.#popularSubset(nowMs, work);
      const rows = subset ? Math.min(shortlist, subset.ordinals.length) : 0;
      const fill = topK < levelPlan(Level.ReducedCandidates).annTopK;
      const ball = subset && rows > 0 ? this.#ballMembers(subset, rows, task.context!, fullTopK, pass, task.limit, fill) : null;
      if (ball) {
        explain.annCandidates = null;
        explain.popularCandidates = ball.keys.length;
        return this.#rankAround(task, ball.keys, ball.sims, pass, window, nowMs, explain, work, similarity);
      }
    }
    const found = ann.search(task.context!, topK, topK);
    explain.annCandidates = found.keys.length;
    // Popularity-aware candidates below Full: the ANN's neighbours plus the popular items that the
    // Full search (a wider ball) would have found. A popular item is in Full's ball about as often
    // as the wider ball is larger: if v of this search's neighbours are among the level's shortlist
    // (the shortlist most popular members of the subset), the Full ball holds about
    // v × (Full top-k / this top-k) of them, taken as the nearest members of the shortlist by an
    // exact search.
    let keys: ArrayLike<number> = found.keys;
    let sims: ArrayLike<number> = found.similarity;
    if (task.profile === 'popular' && topK < fullTopK) {
      const subset = this.#popularSubset(nowMs, work);
      const rows = subset ? Math.min(shortlist, subset.ordinals.length) : 0;
      if (subset && rows > 0) {
        let inShortlist = 0;
        for (let i = 0; i < found.keys.length; i++) {
          const r = subset.rank[found.keys[i]!] ?? 0;
          if (r > 0 && r <= rows) inShortlist++;
        }
        const extra = Math.min(rows, Math.round((inShortlist * fullTopK) / topK));
        if (extra > 0) {
          const near = exactNearest(subset.matrix.subarray(0, rows * ann.dims), ann.dims, task.context!, extra);
          const seen = this.#seen;
          seen.reset();
          const mk: number[] = Array.from(found.keys);
          const ms: number[] = Array.from(found.similarity);
          for (const o of mk) seen.add(o);
          for (let i = 0; i < near.length; i++) {
            const row = near[i]!;
            const o = subset.ordinals[row]!;
            if (!seen.add(o)) continue;
            mk.push(o);
            ms.push(cosine(task.context!, subset.floats, row * ann.dims));
          }
          explain.popularCandidates = mk.length - found.keys.length;
          keys = mk;
          sims = ms;
        }
      }
    }
    return this.#rankAround(task, keys, sims, pass, window, nowMs, explain, work, similarity);
  }

  /** The candidates around a context vector, filtered and ranked by the profile's score. */
  #rankAround(
    task: RetrieveTask,
    keys: ArrayLike<number>,
    sims: ArrayLike<number>,
    pass: Predicate,
    window: VelocityWindow,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
    similarity: Map<number, number>,
  ): { ranked: number[]; scores: number[]; similarity: Map<number, number> } {
    explain.candidates = keys.length;
    const top = new TopK(Math.max(keys.length, 1));
    for (let i = 0; i < keys.length; i++) {
      const o = keys[i]!;
      if (!pass(o)) continue;
      explain.afterFilter++;
      similarity.set(o, sims[i]!);
      const [p, s] = this.#score(task.profile, o, window, nowMs, work);
      // Items the profile cannot tell apart stay in similarity order.
      top.push(o, p, s === 0 ? sims[i]! : s);
    }
    const { ordinals, primary } = top.sorted();
    return { ranked: ordinals, scores: primary, similarity };
  }

  /**
   * The members of the shortlist (the first `rows` of the popular subset) inside Full's ANN ball
   * around `vector`, nearest first, with their similarity; null when this cannot stand in for the
   * ANN: a corpus too large for the sample to tell the radius ({@link BALL_MIN_RANK}), or fewer
   * than `need` members in the ball that `pass` keeps (a region with few popular items, or a
   * narrow filter, where Full ranks unpopular neighbours by similarity too) unless `fill`.
   *
   * With `fill` (the levels below ReducedCandidates), a ball short of `need` is topped up with the
   * shortlist's nearest members just outside it instead of searching the graph: with a shortlist
   * of 2 048 the ball held fewer than a page in ~97 % of `bench:retrieve`'s queries, so the shorter
   * shortlist meant to make NoDiversity cheap made it run the HNSW search (and the exact pass
   * besides) nearly every time, 0.67× Full's time against CoarseAggregates' 0.45×.
   *
   * The radius is the similarity of the sample row at rank `fullTopK × sample / items`: the same
   * share of the sample as Full's ball is of the corpus, measured around this vector. Both exact
   * passes are int8 (≈ 0.1 ms for the sample, ≈ 0.2 ms for 8 192 members), against ≈ 0.8 ms for
   * an HNSW search of 200 on the bench corpus.
   */
  #ballMembers(subset: PopularSubset, rows: number, vector: Float32Array, fullTopK: number, pass: Predicate, need: number, fill = false): { keys: number[]; sims: number[] } | null {
    const dims = this.#ctx.schema.embeddingDims;
    const sampleRows = subset.sample.length / dims;
    if (subset.sampled <= 0) return null;
    const rank = Math.round((fullTopK * sampleRows) / subset.sampled);
    if (rank < BALL_MIN_RANK || rank > sampleRows) return null;
    const edge = exactNearestWithSimilarity(subset.sample, dims, vector, rank);
    if (edge.rows.length < rank) return null;
    const radius = edge.similarity[rank - 1]!;
    const matrix = subset.matrix.subarray(0, rows * dims);
    // Twice the members a ball of this share would hold if popularity were spread evenly; doubled
    // again while the last one found is still inside.
    let k = Math.min(rows, Math.max(64, Math.ceil((2 * fullTopK * rows) / subset.sampled)));
    let near = exactNearestWithSimilarity(matrix, dims, vector, k);
    while (k < rows && near.rows.length === k && near.similarity[k - 1]! >= radius) {
      k = Math.min(rows, 2 * k);
      near = exactNearestWithSimilarity(matrix, dims, vector, k);
    }
    let inside = 0;
    let passing = 0;
    while (inside < near.rows.length && near.similarity[inside]! >= radius) {
      if (pass(subset.ordinals[near.rows[inside]!]!)) passing++;
      inside++;
    }
    if (passing < need) {
      if (!fill) return null;
      // The nearest members outside the ball, until `need` pass (or the shortlist runs out).
      if (near.rows.length < rows && near.rows.length - inside < need - passing) {
        k = Math.min(rows, inside + 2 * need);
        near = exactNearestWithSimilarity(matrix, dims, vector, k);
      }
      while (inside < near.rows.length && passing < need) {
        if (pass(subset.ordinals[near.rows[inside]!]!)) passing++;
        inside++;
      }
    }
    const keys: number[] = [];
    const sims: number[] = [];
    for (let i = 0; i < inside; i++) {
      const row = near.rows[i]!;
      keys.push(subset.ordinals[row]!);
      sims.push(cosine(vector, subset.floats, row * dims));
    }
    return { keys, sims };
  }

  /**
   * The {@link POPULAR_SUBSET} most popular present items with an embedding, and their vectors:
   * rebuilt when the slot orders moved on by {@link SUBSET_STALE_GENERATIONS}, when items changed
   * (their cached vectors are dropped first) or when the ANN index was replaced. Vectors come from
   * the items table once and are cached; the first build reads a few thousand rows (~20 ms).
   */
  #popularSubset(nowMs: number, work: WorkCounter): PopularSubset | null {
    const ctx = this.#ctx;
    const store = ctx.store;
    const generation = store.order.generation;
    const version = ctx.catalog.version;
    const old = this.#subset;
    if (old && old.ann === ctx.ann && old.catalogVersion === version && generation - old.generation < SUBSET_STALE_GENERATIONS) return old;
    this.#embedding ??= ctx.db.prepare('SELECT embedding FROM items WHERE ordinal = ? AND present = 1').pluck();
    this.#changedSince ??= ctx.db.prepare('SELECT ordinal FROM items WHERE version > ?').pluck();
    if (!old || old.ann !== ctx.ann) this.#vectors.clear();
    else if (old.catalogVersion !== version) {
      for (const o of this.#changedSince.iterate(old.catalogVersion) as IterableIterator<number>) this.#vectors.delete(o);
    }
    const present = ctx.catalog.present;
    const top = new TopK(POPULAR_SUBSET);
    let ok = false;
    for (let attempt = 0; attempt < ORDER_ATTEMPTS && !ok; attempt++) {
      const counts: StageCounts = { candidates: 0, afterFilter: 0 };
      ok = this.#popularOrdered(POPULAR_SUBSET, (o) => present[o] === 1, nowMs, top, counts, work) === true;
    }
    if (!ok) return old;
    const ranked = top.sorted().ordinals;
    const dims = ctx.schema.embeddingDims;
    const ordinals: number[] = [];
    const floats = new Float32Array(ranked.length * dims);
    const matrix = new Int8Array(ranked.length * dims);
    for (const o of ranked) {
      const v = this.#vectorOf(o, dims);
      if (!v) continue;
      floats.set(v, ordinals.length * dims);
      toInt8(v, matrix, ordinals.length * dims);
      ordinals.push(o);
    }
    const rank = new Int32Array(ctx.catalog.ids.length);
    for (let r = 0; r < ordinals.length; r++) rank[ordinals[r]!] = r + 1;
    const { sample, sampled } = old && old.ann === ctx.ann && old.catalogVersion === version ? old : this.#ballSample(dims);
    this.#subset = {
      generation,
      catalogVersion: version,
      ann: ctx.ann,
      ordinals: Int32Array.from(ordinals),
      matrix: matrix.subarray(0, ordinals.length * dims),
      floats: floats.subarray(0, ordinals.length * dims),
      rank,
      sample,
      sampled,
    };
    return this.#subset;
  }

  /** The embedding of ordinal `o` (null: none), from the cache or the items table. */
  #vectorOf(o: number, dims: number): Float32Array | null {
    let v = this.#vectors.get(o);
    if (v === undefined) {
      const blob = this.#embedding!.get(o) as Buffer | null | undefined;
      v = blob && blob.byteLength === dims * 4 ? blobToVector(blob) : null;
      this.#vectors.set(o, v);
    }
    return v;
  }

  /** {@link BALL_SAMPLE} present items with an embedding, every few ordinals, as int8 rows. */
  #ballSample(dims: number): { sample: Int8Array; sampled: number } {
    const ctx = this.#ctx;
    const present = ctx.catalog.present;
    const n = ctx.catalog.ids.length;
    const sampled = ctx.ann?.size ?? 0;
    const stride = Math.max(1, Math.floor(n / BALL_SAMPLE));
    const sample = new Int8Array(Math.min(BALL_SAMPLE, n) * dims);
    let rows = 0;
    for (let o = 0; o < n && rows * dims < sample.length; o += stride) {
      if (present[o] !== 1) continue;
      const v = this.#vectorOf(o, dims);
      if (!v) continue;
      toInt8(v, sample, rows * dims);
      rows++;
    }
    // The rows stand for the items with an embedding in proportion to how many were drawn.
    return { sample: sample.subarray(0, rows * dims), sampled };
  }

  #newest(want: number, pass: Predicate, explain: Explain): { ranked: number[]; scores: number[] } {
    const order = this.#ctx.catalog.byCreatedDesc();
    const created = this.#ctx.catalog.createdAt;
    const ranked: number[] = [];
    const scores: number[] = [];
    let i = 0;
    for (; i < order.length && ranked.length < want; i++) {
      const o = order[i]!;
      if (!pass(o)) continue;
      ranked.push(o);
      scores.push(created[o]!);
    }
    explain.candidates = i;
    explain.afterFilter = ranked.length;
    return { ranked, scores };
  }

  #fromSignals(
    task: RetrieveTask,
    want: number,
    pass: Predicate,
    window: VelocityWindow,
    slotBudget: number,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
  ): { ranked: number[]; scores: number[] } {
    if (!this.#exhaustive) {
      for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
        const counts: StageCounts = { candidates: 0, afterFilter: 0 };
        const top = new TopK(want);
        const ok =
          task.profile === 'trending'
            ? this.#trendingOrdered(want, pass, window, task.window, slotBudget, nowMs, top, counts, work)
            : this.#popularOrdered(want, pass, nowMs, top, counts, work);
        if (ok === null) break;
        if (!ok) continue;
        explain.candidates = counts.candidates;
        explain.afterFilter = counts.afterFilter;
        const { ordinals, primary } = top.sorted();
        return { ranked: ordinals, scores: primary };
      }
    }
    return this.#scan(task, want, pass, window, nowMs, explain, work);
  }

  /** popular: the threshold walk over every kind's key order. False if the orders were overwritten mid-read. */
  #popularOrdered(want: number, pass: Predicate, nowMs: number, top: TopK, counts: StageCounts, work: WorkCounter): boolean {
    const kinds = this.#ctx.schema.kinds.map((_, k) => k);
    const order = this.#ctx.store.order;
    if (!order.begin()) return false;
    const seen = this.#seen;
    seen.reset();
    const floor = new Floor(want);
    const ok = this.#walkByDecay(kinds, pass, nowMs, seen, floor, counts, work, (o, v) => top.push(o, v, 0));
    return ok && order.stillValid();
  }

  /**
   * The items passing `admit`, most popular first, by the threshold walk over every kind's key
   * order, capped at `max` items visited (see {@link PopularityWalkResult}); null when the orders
   * cannot be read (switched off, or overwritten on every attempt).
   */
  #popularityWalk(want: number, admit: Predicate, max: number, nowMs: number, work: WorkCounter): PopularityWalkResult | null {
    const kinds = this.#ctx.schema.kinds.map((_, k) => k);
    const order = this.#ctx.store.order;
    for (let attempt = 0; attempt < ORDER_ATTEMPTS; attempt++) {
      if (!order.begin()) return null;
      const seen = this.#seen;
      seen.reset();
      const counts: StageCounts = { candidates: 0, afterFilter: 0 };
      const end: WalkEnd = { stop: () => counts.candidates >= max, early: false, capped: false };
      const ordinals: number[] = [];
      const values: number[] = [];
      const ok = this.#walkByDecay(kinds, admit, nowMs, seen, new Floor(want), counts, work, (o, v) => {
        ordinals.push(o);
        values.push(v);
      }, end);
      if (!ok || !order.stillValid()) continue;
      return { ordinals, values, visited: counts.candidates, end: end.early ? 'early' : end.capped ? 'capped' : 'exhausted' };
    }
    return null;
  }

  /**
   * trending: the slots of a velocity kind with an event inside the window, scored exactly (the
   * dirty list, then the recency order's prefix); then, if fewer than `want` of them passed, the
   * remaining places by the secondary score (velocity 0) from the key orders.
   *
   * CoarseAggregates reads the 24h velocity for a 1h query, and the 24h window holds more active
   * slots than the 1h one: walking it would make the cheap level the dear one. So a coarse 1h
   * query walks the 24h window only when it holds no more slots than the 1h walk would visit (two
   * binary searches tell); otherwise it ranks the 1h walk's slots by their 24h velocity. Either way
   * it visits no more slots than ReducedCandidates does, and when it does not walk the 24h window
   * it differs from the exact coarse ranking only in leaving out items quiet for the last hour.
   *
   * Below Full it scores at most `slotBudget` active slots per velocity kind, the most recently
   * active first (the level plan's `trendingSlots`): the cost then follows the budget, not the
   * window's activity.
   *
   * Null when the slots to visit are more than a third of all slots (a 7d window over a week of
   * events, scored in full): visiting them out of slot order would cost more than the scan
   * (measured: ~3× per slot), so the caller scans.
   */
  #trendingOrdered(
    want: number,
    pass: Predicate,
    window: VelocityWindow,
    requested: VelocityWindow,
    slotBudget: number,
    nowMs: number,
    top: TopK,
    counts: StageCounts,
    work: WorkCounter,
  ): boolean | null {
    const ctx = this.#ctx;
    const store = ctx.store;
    const specs = ctx.schema.kinds;
    const velocityKinds: number[] = [];
    for (let k = 0; k < specs.length; k++) if (specs[k]!.velocity) velocityKinds.push(k);
    if (velocityKinds.length === 0) return true;
    const only = velocityKinds.length === 1 ? velocityKinds[0]! : -1;
    const isVelocity = specs.map((s) => s.velocity);
    const order = store.order;
    if (!order.begin()) return false;
    const used = store.slotsUsed();
    let start = windowStartMs(window, nowMs);
    if (window !== requested && requested === '1h') {
      const requestedStart = windowStartMs(requested, nowMs);
      let budget = 0;
      let active = 0;
      for (const k of velocityKinds) {
        budget += order.newerThan(k, requestedStart);
        active += order.newerThan(k, start);
      }
      if (active > budget) start = requestedStart;
    }
    const seen = this.#seen;
    seen.reset();
    const zeros: number[] = [];
    let moving = 0;

    const visit = (s: number): void => {
      const o = store.slotOrdinal(s);
      if (!seen.add(o)) return;
      counts.candidates++;
      if (!pass(o)) return;
      counts.afterFilter++;
      let v: number;
      let sec: number;
      if (only >= 0) {
        v = store.velocity(s, window, nowMs, false);
        sec = store.decayedScore(s, nowMs);
      } else {
        v = velocityOf(ctx, o, window, nowMs, false, work);
        sec = popularity(ctx, o, nowMs, work);
      }
      top.push(o, v, sec);
      if (v > 0) moving++;
      else zeros.push(sec);
    };

    // The active slots, gathered and then visited in slot order: the recency order is random in
    // memory, and 1 KiB slots read in ascending order cost about a third less than read at random.
    let n = 0;
    for (const k of velocityKinds) n += Math.min(slotBudget, order.newerThan(k, start));
    if (3 * (n + order.dirtyCount) > used) return null;
    const active = new Int32Array(n + order.dirtyCount);
    n = 0;
    for (let j = 0; j < order.dirtyCount; j++) {
      const s = order.dirtySlot(j);
      if (!(s >>> 0 === s && s < used)) return false;
      work.slots++;
      if (!isVelocity[store.slotKind(s)] || !store.hasEvents(s) || store.newestAt(s) < start) continue;
      active[n++] = s;
    }
    for (const k of velocityKinds) {
      const end = Math.min(order.end(k), order.start(k) + slotBudget);
      for (let i = order.start(k); i < end && order.newestAt(i) >= start; i++) {
        const s = order.newestSlotAt(i);
        if (!(s >>> 0 === s && s < used)) return false;
        active[n++] = s;
      }
    }
    const inOrder = active.subarray(0, n).sort();
    for (let i = 0; i < n; i++) {
      work.slots++;
      visit(inOrder[i]!);
    }

    const need = want - moving;
    if (need > 0) {
      const floor = new Floor(need);
      for (const z of zeros) floor.push(z);
      // The scan's candidates for the remaining places: items with a slot of a velocity kind; their
      // secondary score is that one kind's decayed score, or with several velocity kinds the popularity.
      const lists = only >= 0 ? [only] : specs.map((_, k) => k);
      const admit: Predicate = only >= 0 ? pass : (o) => pass(o) && this.#hasSlotIn(o, velocityKinds, work);
      const ok = this.#walkByDecay(lists, admit, nowMs, seen, floor, counts, work, (o, v) => top.push(o, 0, v));
      if (!ok) return false;
    }
    return order.stillValid();
  }

  /**
   * The threshold algorithm's sorted-access loop over the orders of the kinds in `lists`: `boundAt(i)`
   * bounds what any slot at or after position `i` of its range is worth; each step advances the
   * list with the largest bound and hands its slot to `consider`, until `floor` is full and its
   * minimum beats the sum of the bounds strictly, or the lists are exhausted, or `walkEnd.stop()`
   * says so (recorded in `walkEnd`). False if an entry was torn (the orders were overwritten mid-read).
   */
  #threshold(
    lists: readonly number[],
    boundAt: (i: number) => number,
    slotAt: (i: number) => number,
    floor: Floor,
    used: number,
    work: WorkCounter,
    consider: (slot: number) => void,
    walkEnd?: WalkEnd,
  ): boolean {
    const order = this.#ctx.store.order;
    const n = lists.length;
    const cursor = new Int32Array(n);
    const end = new Int32Array(n);
    const bound = new Float64Array(n);
    for (let li = 0; li < n; li++) {
      cursor[li] = order.start(lists[li]!);
      end[li] = order.end(lists[li]!);
      bound[li] = cursor[li]! < end[li]! ? boundAt(cursor[li]!) : 0;
    }
    for (;;) {
      let threshold = 0;
      let best = -1;
      for (let li = 0; li < n; li++) {
        if (cursor[li]! >= end[li]!) continue;
        threshold += bound[li]!;
        if (best < 0 || bound[li]! > bound[best]!) best = li;
      }
      if (best < 0) break;
      if (floor.full && floor.min > threshold) {
        if (walkEnd) walkEnd.early = true;
        break;
      }
      if (walkEnd?.stop()) {
        walkEnd.capped = true;
        break;
      }
      const s = slotAt(cursor[best]!);
      if (!(s >>> 0 === s && s < used)) return false;
      cursor[best]!++;
      bound[best] = cursor[best]! < end[best]! ? boundAt(cursor[best]!) : 0;
      work.slots++;
      consider(s);
    }
    return true;
  }

  #hasSlotIn(o: number, kinds: readonly number[], work: WorkCounter): boolean {
    for (const k of kinds) {
      work.slots++;
      if (this.#ctx.store.slotOf(o, k) >= 0) return true;
    }
    return false;
  }

  /**
   * The threshold algorithm over the key orders of `lists`, after the dirty slots: an item's value is
   * the sum of its decayed scores over `lists`, and an item not yet seen can be worth at most the
   * sum of each list's bound at its cursor (`exp(key − λ·now)`, or 0 once a list is exhausted or at
   * its scores ≤ 0). Stops when `floor` (the best values so far) is full and its minimum beats that
   * sum strictly, so ties are resolved exactly as a scan resolves them. Items in `seen` are skipped;
   * `push` receives each new item that passes `admit`. False if the orders were overwritten mid-read.
   * With `end`, `end.stop()` can stop it before any slot (recorded there).
   */
  #walkByDecay(
    lists: readonly number[],
    admit: Predicate,
    nowMs: number,
    seen: Seen,
    floor: Floor,
    counts: StageCounts,
    work: WorkCounter,
    push: (o: number, value: number) => void,
    end?: WalkEnd,
  ): boolean {
    const ctx = this.#ctx;
    const store = ctx.store;
    const order = store.order;
    const used = store.slotsUsed();
    const kindCount = ctx.schema.kinds.length;
    const single = lists.length === 1 ? lists[0]! : -1;
    const inLists = new Uint8Array(kindCount);
    for (const k of lists) inLists[k] = 1;

    const value = (o: number, s: number): number => {
      if (single >= 0) return store.decayedScore(s, nowMs);
      if (lists.length === kindCount) return popularity(ctx, o, nowMs, work);
      let sum = 0;
      for (const k of lists) {
        const slot = store.slotOf(o, k);
        if (slot < 0) continue;
        work.slots++;
        sum += store.decayedScore(slot, nowMs);
      }
      return sum;
    };
    const consider = (s: number): void => {
      const o = store.slotOrdinal(s);
      if (!seen.add(o)) return;
      counts.candidates++;
      if (!admit(o)) return;
      counts.afterFilter++;
      const v = value(o, s);
      push(o, v);
      floor.push(v);
    };

    for (let j = 0; j < order.dirtyCount; j++) {
      if (end?.stop()) {
        end.capped = true;
        return true;
      }
      const s = order.dirtySlot(j);
      if (!(s >>> 0 === s && s < used)) return false;
      work.slots++;
      if (!inLists[store.slotKind(s)] || !store.hasEvents(s)) continue;
      consider(s);
    }

    // Per list, the bound at position i: exp(key − λ·now), 0 for the scores ≤ 0. Rounding in `key`
    // and in `λ·now` (both large) is covered by a relative margin on the exponent, so the bound
    // never falls below a value it bounds.
    const kindAt = (i: number): number => {
      for (const k of lists) if (i >= order.start(k) && i < order.end(k)) return k;
      return lists[0]!;
    };
    const rates = ctx.schema.kinds.map((_, k) => store.decayRate(k));
    const boundAt = (i: number): number => {
      const key = order.keyAt(i);
      if (key === Number.NEGATIVE_INFINITY) return 0;
      const decay = rates[single >= 0 ? single : kindAt(i)]! * nowMs;
      return Math.exp(key - decay + (Math.abs(key) + Math.abs(decay)) * 4e-16 + 1e-12);
    };
    return this.#threshold(lists, boundAt, (i) => order.keySlotAt(i), floor, used, work, consider, end);
  }

  /** The reference: every slot of the arena, scored. */
  #scan(
    task: RetrieveTask,
    want: number,
    pass: Predicate,
    window: VelocityWindow,
    nowMs: number,
    explain: Explain,
    work: WorkCounter,
  ): { ranked: number[]; scores: number[] } {
    const { store, schema } = this.#ctx;
    const kinds = schema.kinds;
    const trending = task.profile === 'trending';
    const top = new TopK(want);
    const used = store.slotsUsed();
    explain.candidates = 0;
    explain.afterFilter = 0;
    // One kind (the common case) needs no per-item accumulation: each slot is one item.
    const considered = trending ? kinds.filter((k) => k.velocity).length : kinds.length;
    if (considered === 1) {
      const only = trending ? kinds.findIndex((k) => k.velocity) : 0;
      const horizon = nowMs - WINDOW_MS[window];
      for (let s = 0; s < used; s++) {
        work.slots++;
        if (store.slotKind(s) !== only) continue;
        if (!store.hasEvents(s)) continue;
        explain.candidates++;
        const o = store.slotOrdinal(s);
        if (!pass(o)) continue;
        explain.afterFilter++;
        const decayed = store.decayedScore(s, nowMs);
        if (!trending) top.push(o, decayed, 0);
        else top.push(o, store.newestAt(s) < horizon ? 0 : store.velocity(s, window, nowMs, false), decayed);
      }
    } else {
      const seen = new Set<number>();
      for (let s = 0; s < used; s++) {
        work.slots++;
        const k = store.slotKind(s);
        if (!store.hasEvents(s)) continue;
        if (trending && !kinds[k]!.velocity) continue;
        const o = store.slotOrdinal(s);
        if (seen.has(o)) continue;
        seen.add(o);
        explain.candidates++;
        if (!pass(o)) continue;
        explain.afterFilter++;
        const [p, sec] = this.#score(task.profile, o, window, nowMs, work);
        top.push(o, p, sec);
      }
    }
    const { ordinals, primary } = top.sorted();
    return { ranked: ordinals, scores: primary };
  }
}
