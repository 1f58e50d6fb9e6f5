import { ContextCandidates } from './candidates/context.js';
import { CandidateSources, type Ranking } from './candidates/sources.js';
import { compileFilter, type Predicate } from './filter.js';
import type { QueryContext, WorkCounter } from './context.js';
import type { LevelPlan } from './plan.js';
import { creatorListsOf } from './profiles/creator-lists.js';
import { following } from './profiles/following.js';
import { itemVectors } from './profiles/for-you-vectors.js';
import { forYou } from './profiles/for-you.js';
import { hot, top } from './profiles/hot-top.js';
import { related } from './profiles/related.js';
import { rising } from './profiles/rising.js';
import { TrendingCache } from './profiles/trending-cache.js';
import { NeighbourCache } from './profiles/neighbour-cache.js';
import { keptSignalsOf } from './item-signals.js';
import { selectAndHydrate } from './tail.js';
import { compileUserPredicate } from './user-state.js';
import { velocityWindowFor } from './windows.js';
import type { Explain, RetrieveTask, RetrievedItem, WorkerRetrieveResult } from './types.js';

/** With diversity on, this many times the limit are ranked so the greedy pass has room to skip. */
const DIVERSITY_OVERFETCH = 5;

/** Options of {@link RetrieveExecutor}. */
export interface RetrieveExecutorOptions {
  /**
   * Scan every signal slot for `popular` and `trending` instead of walking the slot orders: the
   * reference the orders are tested and benchmarked against.
   * @default false
   */
  exhaustive?: boolean;
  /**
   * Where `for_you` keeps trending between queries at one clock (see {@link TrendingCache}); null:
   * every query walks trending with its own predicate (the reference the cache is tested against).
   * @default a new cache
   */
  trendingCache?: TrendingCache | null;
}

/**
 * The retrieve pipeline, six stages: candidates (ANN around a context vector, the signal slot
 * orders, or the creation-time order) → filter → load aggregates → score by profile → diversity →
 * limit. What each stage may spend is the plan's (see {@link LevelPlan}): the level was decided by
 * the caller at entry, and the executor only reads the plan it was given.
 *
 * The profiles are modules of their own (`profiles/`), handed the candidate sources
 * ({@link CandidateSources}) they draw from.
 */
export class RetrieveExecutor {
  readonly #ctx: QueryContext;
  readonly #sources: CandidateSources;
  readonly #context: ContextCandidates;
  readonly #trendingCache: TrendingCache | null;
  readonly #neighbours = new NeighbourCache();

  constructor(ctx: QueryContext, options: RetrieveExecutorOptions = {}) {
    this.#ctx = ctx;
    this.#sources = new CandidateSources(ctx, options.exhaustive === true);
    this.#context = new ContextCandidates(ctx, this.#sources);
    this.#trendingCache = options.trendingCache === undefined ? new TrendingCache() : options.trendingCache;
  }

  /**
   * Builds what the profiles read besides the shared state, each of which a query would otherwise
   * build on first use: the created order (new, hot, top, for_you's newest), each creator's items
   * (following, for_you), every item's int8 vector (for_you; one pass over the items table) and the
   * popular subset and its vectors (around a context vector). Called by the worker's warm, so the
   * first query of a profile after open does not pay for them (see `explain.lazyBuilds`).
   */
  warm(nowMs: number): void {
    const ctx = this.#ctx;
    ctx.catalog.byCreatedDesc();
    if (ctx.schema.creatorField !== undefined) creatorListsOf(ctx.catalog, ctx.schema.creatorField);
    if (ctx.ann) itemVectors(ctx);
    this.#context.warm(nowMs);
  }

  /**
   * Bytes of the popular subset this executor keeps (see {@link ContextCandidates.subsetBytes}) and
   * of `for_you`'s kept neighbours (see {@link NeighbourCache}).
   */
  get subsetBytes(): number {
    return this.#context.subsetBytes + this.#neighbours.bytes;
  }

  /**
   * Ranks `task` by `plan` as of `nowMs`; `picked`, when given, receives the returned items' ordinals
   * in order. `staleMs`: how old a trending list `for_you` shares with other queries may be (TaskEnvelope).
   */
  run(task: RetrieveTask, plan: LevelPlan, nowMs: number, picked?: number[], staleMs = 0): Omit<WorkerRetrieveResult, 'serviceMs'> {
    const ctx = this.#ctx;
    const builds = ctx.catalog.derivedBuilds;
    const coarse = plan.windows.coarse;
    const velocityWindow = velocityWindowFor(task.window, coarse);
    const useDiversity = task.diversity !== null && plan.diversity.enabled;
    const want = useDiversity ? task.limit * DIVERSITY_OVERFETCH : task.limit;
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

    const rankedBy = this.#rank(task, plan, want, pass, nowMs, staleMs, explain, work, warnings);
    const { ranked, scores } = rankedBy;
    const similarity = rankedBy.similarity ?? null;
    explain.slotsVisited = work.slots;
    if (task.user) explain.userFiltered = userCount.dropped;

    const diversity = useDiversity ? task.diversity : null;
    let hydrated = 0;
    // `related`'s rows seldom come back within the second (3 % of them under the serve bench's
    // personal mix, for_you's 86 %, following's 73 %): there the copies cost more than they save.
    const reuse = task.asJson === true && plan.windows.reuse && task.profile !== 'related';
    const signalsJson = reuse ? { kept: keptSignalsOf(ctx.store, ctx.schema.kinds), json: [] } : null;
    const reusedBefore = signalsJson?.kept.reused ?? 0;
    const tail = { diversity, limit: task.limit, nowMs, coarse, warnings, signalsJson };
    const items = selectAndHydrate(ctx, ranked, scores, tail, (base, o) => {
      hydrated++;
      picked?.push(o);
      // Extended in place: no spread copy per item.
      const item: RetrievedItem = Object.assign(base, { createdAt: ctx.catalog.createdAt[o]! });
      const sim = similarity?.get(o);
      if (sim !== undefined) item.similarity = sim;
      return item;
    });
    explain.rowsHydrated = hydrated;
    explain.lazyBuilds = ctx.catalog.derivedBuilds - builds;
    if (signalsJson === null) return { items, warnings, explain };
    explain.signalsReused = signalsJson.kept.reused - reusedBefore;
    return { items, warnings, explain, signalsJson: signalsJson.json };
  }

  /**
   * Stages 1–4: the profile's candidates, filtered and scored, best first; with the similarity to
   * the query's vector of each, for the profiles that rank around one.
   */
  #rank(
    task: RetrieveTask,
    plan: LevelPlan,
    want: number,
    pass: Predicate,
    nowMs: number,
    staleMs: number,
    explain: Explain,
    work: WorkCounter,
    warnings: string[],
  ): Ranking & { similarity?: Map<number, number> } {
    const ctx = this.#ctx;
    const sources = this.#sources;
    const window = velocityWindowFor(task.window, plan.windows.coarse);
    // The feeds' budget: what their definition needs (null) or at most the plan's visits.
    const budget = Number.isFinite(plan.feeds.candidateBudget) ? plan.feeds.candidateBudget : null;
    switch (task.profile) {
      case 'for_you':
        return forYou(
          ctx,
          task,
          plan,
          pass,
          window,
          nowMs,
          explain,
          work,
          sources,
          { cache: this.#trendingCache, staleMs },
          {
            nearestPopular: (vector, k, rows) => this.#context.nearestPopular(vector, k, rows, nowMs, work),
            cache: this.#neighbours,
            nowMs,
          },
        );
      case 'related':
        return related(task, pass, nowMs, explain);
      case 'following':
        return following(ctx, task, want, pass, nowMs, budget, explain, work);
      case 'hot':
        return hot(ctx, want, pass, nowMs, budget, explain, work, sources);
      case 'top':
        return top(ctx, want, pass, task.window, nowMs, budget, explain, work, sources);
      case 'rising':
        return rising(ctx, want, pass, task.window, nowMs, budget, explain, work);
      default:
        break;
    }
    if (task.context) {
      const r = this.#context.around(task, plan.ann.topK, plan.context, pass, window, nowMs, explain, work);
      if (!ctx.ann) warnings.push('no item has an embedding yet: the context vector found no candidates');
      return r;
    }
    if (task.profile === 'new') return sources.newest(want, pass, explain);
    return sources.bySignals(task.profile, want, pass, window, task.window, plan.trending.slots, nowMs, explain, work, true);
  }

  #admit(filter: Predicate, exclude: Int32Array | null, user: Predicate | null): Predicate {
    const present = this.#ctx.catalog.present;
    // The user's predicate runs last, after the cheap tests, so `userFiltered` counts only the
    // candidates their state alone removed.
    const base: Predicate =
      !exclude || exclude.length === 0
        ? (o) => present[o] === 1 && filter(o)
        : (
            (skip) => (o: number) =>
              present[o] === 1 && !skip.has(o) && filter(o)
          )(new Set(exclude));
    if (!user) return base;
    return (o) => base(o) && user(o);
  }
}
