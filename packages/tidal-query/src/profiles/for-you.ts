import type { CandidateSources } from '../candidates/sources.js';
import type { Predicate } from '../filter.js';
import type { QueryContext, WorkCounter } from '../context.js';
import { OrdinalSet } from '../ordinal-set.js';
import { forYouBudgetAt, type ForYouPlan, type LevelPlan } from '../plan.js';
import { TopK } from '../topk.js';
import { mix3 } from '../user-state.js';
import { creatorListsOf } from './creator-lists.js';
import type { NeighbourCache } from './neighbour-cache.js';
import { cosinesInt8, itemVectors } from './for-you-vectors.js';
import { trendingOf, type KeptTrending, type TrendingWalk } from './trending-cache.js';
import type { Explain, ForYouOptions, RetrieveTask, UserQueryState, VelocityWindow } from '../types.js';

/** tidalDB's mix: preference similarity, velocity, recency, creator affinity. */
export const FOR_YOU_WEIGHTS = Object.freeze({ similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 });

/** The share of places given to exploration by default: every 10th. */
export const FOR_YOU_EXPLORE = 0.1;

/** Half-life of the recency feature: an item a day old scores 0.5, two days 0.25. */
export const RECENCY_HALF_LIFE_MS = 86_400_000;

/** 2^(−age / half-life) as e^(−age · ln 2 / half-life): `Math.exp` costs a third of `Math.pow`. */
const RECENCY_RATE = Math.LN2 / RECENCY_HALF_LIFE_MS;

/** With diversity asked for, this many times the limit are ranked (as the retrieve executor does). */
const DIVERSITY_ROOM = 5;

/** Visits per creator list, as a multiple of `perCreator`, before a restrictive filter gives up on it. */
const CREATOR_SCAN_FACTOR = 4;

/**
 * This thread's marks of the candidates one `for_you` query has taken, by ordinal (a query runs to
 * the end before the next starts on this thread).
 */
const candidateMarks = new OrdinalSet();

/**
 * The `k` members of the popular subset nearest to a vector among its `rows` most popular, with
 * their similarity (see `ContextCandidates.nearestPopular`); null when there is none to search.
 */
export type NearestPopular = (vector: Float32Array, k: number, rows: number) => { keys: ArrayLike<number>; sims: ArrayLike<number> } | null;

/** Where `for_you` may take a warm user's neighbours from besides the graph (see `ForYouPlan`). */
export interface NeighbourSources {
  nearestPopular: NearestPopular;
  /** This thread's users' last graph neighbours; null: none kept. */
  cache: NeighbourCache | null;
  nowMs: number;
}

const NO_SOURCES: NeighbourSources = { nearestPopular: () => null, cache: null, nowMs: 0 };

export interface ForYouRanking {
  ranked: number[];
  scores: number[];
  similarity: Map<number, number>;
}

/**
 * The `for_you` profile. A warm user's candidates are the union, without repeats, of the plan's
 * sources ({@link ForYouPlan}): the ANN neighbours of the preference vector, the newest items of the
 * creators the user has the largest affinity with, the newest items, and the first of `trending`
 * (each passing the query's predicate). A user without a preference vector (cold start) takes the
 * first `coldStart` (the plan's ANN breadth) of `trending` and of `new`.
 * Every feature is in [0, 1]:
 *
 * - similarity = max(0, cosine(preference, item)) (0 for an item without an embedding);
 * - velocity = the item's velocity ÷ the largest velocity among the candidates (0 when none moves);
 * - recency = 2^(−age / 24 h), age = now − createdAt (0 for a future createdAt);
 * - affinity = max(0, the user's affinity to the item's creator) ÷ the user's largest affinity.
 *
 * score = w.similarity·similarity + w.velocity·velocity + w.recency·recency + w.affinity·affinity.
 * Cold start scores (w.velocity·velocity + w.recency·recency) ÷ (w.velocity + w.recency): trending
 * blended with recency. Ties go to the lower ordinal.
 *
 * Exploration (warm users only): with share e > 0, every round(1/e)-th place (1-based) goes to the
 * next candidate, in the order of a hash of (user, seed, item id), whose creator the user has no
 * positive affinity with and that is not placed yet; the other places take the best remaining by
 * score. Deterministic for a given (user, seed) and state.
 */
export function forYou(
  ctx: QueryContext,
  task: RetrieveTask,
  plan: LevelPlan,
  pass: Predicate,
  window: VelocityWindow,
  nowMs: number,
  explain: Explain,
  work: WorkCounter,
  sources: CandidateSources,
  trending: KeptTrending,
  neighbourSources: NeighbourSources = NO_SOURCES,
): ForYouRanking {
  const user = task.user!;
  const options = task.forYou!;
  const cold = user.preference === null;
  const affinity = affinityOf(ctx, user);
  // Every candidate passed the query's predicate, which admits only present ordinals.
  const marks = candidateMarks.reset(ctx.catalog.present.length);
  // The sources, over the query's windows; trending reads at most the plan's slots per velocity kind.
  const counts = { candidates: 0, afterFilter: 0 };
  const walk: TrendingWalk = (want, slots, admit = pass) =>
    sources.bySignals('trending', want, admit, window, task.window, Math.min(slots, plan.trending.slots), nowMs, counts, work).ranked;
  const newest = (want: number): number[] => sources.newest(want, pass, counts).ranked;
  explain.coldStart = cold;
  explain.explored = 0;
  let candidates: number[];
  // A warm user's candidates' similarity to the preference vector, index for index.
  let sims: Float64Array = NO_SIMS;
  if (cold) {
    const depth = plan.forYou.coldStart;
    candidates = [];
    const key = `${task.window}|${window}|${plan.trending.slots}|cold`;
    const kept = trendingOf(trending, ctx, walk, key, nowMs, depth, Number.POSITIVE_INFINITY, pass);
    for (const list of [kept, newest(depth)]) {
      for (const o of list) {
        if (marks.has(o)) continue;
        marks.add(o);
        candidates.push(o);
      }
    }
    explain.candidates = candidates.length;
  } else {
    const key = `${task.window}|${window}|${plan.trending.slots}|warm`;
    const budget = forYouBudgetAt(plan.forYou, ctx.catalog.presentCount);
    const fromTrending = (want: number, slots: number): number[] => trendingOf(trending, ctx, walk, key, nowMs, want, slots, pass);
    ({ candidates, sims } = warmCandidates(ctx, user, budget, pass, marks, affinity, explain, newest, fromTrending, neighbourSources));
  }
  explain.afterFilter = candidates.length;

  const w = options.weights;
  const n = candidates.length;
  // Each feature in a pass of its own over the candidates: their rows lie in no cache at a million
  // items, and a tight pass has the loads of many candidates in flight at once.
  const velocity = new Float64Array(n);
  work.slots += ctx.store.velocities(candidates, n, velocityKinds(ctx), window, nowMs, false, velocity);
  let maxVelocity = 0;
  for (let i = 0; i < n; i++) if (velocity[i]! > maxVelocity) maxVelocity = velocity[i]!;
  const created = ctx.catalog.createdAt;
  const recency = new Float64Array(n);
  for (let i = 0; i < n; i++) recency[i] = Math.exp(-Math.max(0, nowMs - created[candidates[i]!]!) * RECENCY_RATE);
  const affinities = new Float64Array(n);
  if (!cold) for (let i = 0; i < n; i++) affinities[i] = affinity.of(candidates[i]!);
  const coldTotal = w.velocity + w.recency;
  // Only the places the tail can take are ranked (the limit, the diversity pass's room, a cursor's
  // earlier pages): bounded selections instead of a sort of every candidate.
  const places = Math.max(1, Math.min(task.diversity ? task.limit * DIVERSITY_ROOM : task.limit, n));
  // Kept by candidate index, ties to the lower ordinal (the secondary key is the ordinal negated).
  const top = new TopK(places);
  const score = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const o = candidates[i]!;
    const vel = maxVelocity > 0 ? velocity[i]! / maxVelocity : 0;
    const rec = recency[i]!;
    if (cold) score[i] = coldTotal > 0 ? (w.velocity * vel + w.recency * rec) / coldTotal : 0;
    else score[i] = w.similarity * Math.max(0, sims[i]!) + w.velocity * vel + w.recency * rec + w.affinity * affinities[i]!;
    top.push(i, score[i]!, -o);
  }
  const byScore = top.sorted().ordinals;
  const order =
    cold || options.explore <= 0 ? byScore : interleave(ctx, user, options, candidates, byScore, affinity, places, task.limit, explain);
  const ranked = new Array<number>(order.length);
  const scores = new Array<number>(order.length);
  const similarity = new Map<number, number>();
  for (let r = 0; r < order.length; r++) {
    const i = order[r]!;
    ranked[r] = candidates[i]!;
    scores[r] = score[i]!;
    if (!cold) similarity.set(candidates[i]!, sims[i]!);
  }
  return { ranked, scores, similarity };
}

/**
 * A warm user's candidates from the four sources of `budget`, each passing `pass`, in source
 * order without repeats, marked in `marks`, with each one's similarity, index for index (the ANN's
 * for its neighbours, from the items' int8 copy for the others, see {@link itemVectors}, in one
 * pass once every source has added its own). Counted per source in `explain.forYouSources` (the
 * candidates each source added that no earlier one had).
 */
function warmCandidates(
  ctx: QueryContext,
  user: UserQueryState,
  budget: ForYouPlan,
  pass: Predicate,
  marks: OrdinalSet,
  affinity: Affinity,
  explain: Explain,
  newest: (want: number) => number[],
  trending: (want: number, slots: number) => number[],
  neighbourSources: NeighbourSources,
): { candidates: number[]; sims: Float64Array } {
  const out: number[] = [];
  const annSims: number[] = [];
  const counts = { ann: 0, creators: 0, newest: 0, trending: 0 };
  // The creators the user has the largest positive affinity with (ties: the first in the user's list).
  const field = ctx.schema.creatorField;
  const strongest = field !== undefined && budget.creators > 0 && budget.perCreator > 0 ? affinity.top(budget.creators) : [];
  // With creators to take from, the neighbours hold few of the best items: the plan's breadth for that case.
  const breadth = strongest.length > 0 ? budget.annWithAffinity : budget.ann;
  explain.annTopK = breadth;
  const found = neighboursOf(ctx, user, budget, breadth, strongest.length > 0, neighbourSources, explain);
  if (found) {
    for (let i = 0; i < found.keys.length; i++) {
      const o = found.keys[i]!;
      if (!pass(o) || marks.has(o)) continue;
      out.push(o);
      // Kept neighbours have no similarity to this preference yet: the int8 pass below gives it.
      if (found.sims) annSims.push(found.sims[i]!);
      marks.add(o);
    }
  }
  explain.annCandidates = ctx.ann ? (found?.searched ?? 0) : 0;
  counts.ann = out.length;
  const add = (o: number, source: keyof typeof counts): void => {
    if (marks.has(o)) return;
    marks.add(o);
    out.push(o);
    counts[source]++;
  };
  if (strongest.length > 0) {
    const lists = creatorListsOf(ctx.catalog, field!);
    for (const { code, share } of strongest) {
      const list = lists.get(code);
      if (!list) continue;
      // The floor's share of the depth for every creator, the rest in proportion to the affinity:
      // an item's affinity feature is its creator's share, so a creator of small affinity adds
      // little to its items' scores and its older items cannot outrank what the other sources hold.
      const depth = Math.max(1, Math.round(budget.perCreator * (budget.creatorFloor + (1 - budget.creatorFloor) * share)));
      const visits = Math.min(list.length, depth * CREATOR_SCAN_FACTOR);
      let taken = 0;
      for (let i = 0; i < visits && taken < depth; i++) {
        const o = list[i]!;
        if (!pass(o)) continue;
        taken++;
        add(o, 'creators');
      }
    }
  }
  if (budget.newest > 0) for (const o of newest(budget.newest)) add(o, 'newest');
  if (budget.trending > 0) for (const o of trending(budget.trending, budget.trendingSlots)) add(o, 'trending');
  explain.candidates = (found?.keys.length ?? 0) + counts.creators + counts.newest + counts.trending;
  explain.forYouSources = counts;
  const sims = new Float64Array(out.length);
  for (let i = 0; i < annSims.length; i++) sims[i] = annSims[i]!;
  const vectors = ctx.ann ? itemVectors(ctx) : null;
  const p = user.preference!;
  const dims = ctx.schema.embeddingDims;
  if (vectors && p.length === dims) {
    let pNorm = 0;
    for (let k = 0; k < p.length; k++) pNorm += p[k]! * p[k]!;
    const pScale = pNorm > 0 ? 1 / Math.sqrt(pNorm) : 0;
    cosinesInt8(vectors, dims, p, pScale, out, annSims.length, out.length, sims);
  }
  return { candidates: out, sims };
}

/**
 * A warm user's `breadth` neighbours, nearest first: at a level that reuses them, the ones this
 * thread's last graph search for the user found (a user without creator affinities, while kept,
 * see {@link NeighbourCache}; their similarity is then left to the caller); else, where the plan
 * says so for such a user, or for every user while the ANN index is built (the search would be
 * exact over every row), the nearest among the popular subset's most popular; else the graph's
 * (kept for the next time). `searched`: the neighbours the graph gave (0 when it was not searched).
 */
function neighboursOf(
  ctx: QueryContext,
  user: UserQueryState,
  budget: ForYouPlan,
  breadth: number,
  withAffinity: boolean,
  src: NeighbourSources,
  explain: Explain,
): { keys: ArrayLike<number>; sims: ArrayLike<number> | null; searched: number } | null {
  const ann = ctx.ann;
  if (!ann || breadth <= 0) return null;
  const preference = user.preference!;
  if (!withAffinity && budget.reuseNeighbours && src.cache) {
    const kept = src.cache.get(user.idHash, preference, ann, src.nowMs);
    if (kept) {
      const keys = kept.length > breadth ? kept.subarray(0, breadth) : kept;
      explain.reusedNeighbours = keys.length;
      return { keys, sims: null, searched: 0 };
    }
  }
  // While the ANN index is built on its own thread the vector search is exact over every row: a
  // Full for_you cost ~3x its graph search's at 100 000 items (and it grows with the catalogue),
  // and under load the query threads starved the build itself. The popular subset's nearest stand
  // in at every level until the index is in use.
  if ((!withAffinity && budget.popularNeighbours) || ann.method === 'exact') {
    const popular = src.nearestPopular(preference, breadth, budget.popularRows);
    if (popular) {
      explain.popularCandidates = popular.keys.length;
      return { keys: popular.keys, sims: popular.sims, searched: 0 };
    }
  }
  // The search's expansion follows the budget too (usearch searches max(expansion, k)), so a
  // level asking for fewer neighbours searches less of the graph.
  const graph = ann.search(preference, breadth, breadth);
  explain.vectorSearch = ann.method;
  src.cache?.set(user.idHash, preference, ann, graph.keys, src.nowMs);
  return { keys: graph.keys, sims: graph.similarity, searched: graph.keys.length };
}

const NO_SIMS = new Float64Array(0);

/** The indexes of the schema's kinds that track velocity, in order (what `velocityOf` sums over). */
function velocityKinds(ctx: QueryContext): number[] {
  const kinds = ctx.schema.kinds;
  const list: number[] = [];
  for (let k = 0; k < kinds.length; k++) if (kinds[k]!.velocity) list.push(k);
  return list;
}

interface Affinity {
  /** The user's affinity to `o`'s creator over their largest, in [0, 1]. */
  of(o: number): number;
  /** Whether the user has a positive affinity to `o`'s creator. */
  positive(o: number): boolean;
  /** The creator codes of the `n` largest positive affinities, largest first (ties: the user's order), each with its share of the largest. */
  top(n: number): { code: number; share: number }[];
}

/** The user's affinity to an item's creator, normalised by their largest (0 without a creator). */
function affinityOf(ctx: QueryContext, user: UserQueryState): Affinity {
  const field = ctx.schema.creatorField;
  const col = field === undefined ? undefined : ctx.catalog.columns.get(field);
  if (!col || col.type !== 'string' || user.affinityCreators.length === 0) return { of: () => 0, positive: () => false, top: () => [] };
  let max = 0;
  for (const s of user.affinityScores) if (s > max) max = s;
  const byCode = new Map<number, number>();
  for (let i = 0; i < user.affinityCreators.length; i++) {
    const code = col.dict.get(user.affinityCreators[i]!);
    const s = user.affinityScores[i]!;
    if (code !== undefined && s > 0) byCode.set(code, s);
  }
  return {
    of: (o) => (max > 0 ? (byCode.get(col.codes[o]!) ?? 0) / max : 0),
    positive: (o) => byCode.has(col.codes[o]!),
    top: (n) =>
      [...byCode]
        .sort((a, b) => b[1] - a[1])
        .slice(0, n)
        .map(([code, s]) => ({ code, share: s / max })),
  };
}

/**
 * The first `places` places of the exploration order (see {@link forYou}), as indexes into
 * `candidates`, from `byScore` (the indexes of the best `places` candidates by score, best first).
 * Within `places` places at most `places` candidates by score and `places` explorers are ever
 * taken (each pick, either way, uses one place, and what one list skips was placed from the
 * other), so the `places` explorers of smallest hash are all it reads: the result is the same
 * prefix the whole interleave gives.
 */
function interleave(
  ctx: QueryContext,
  user: UserQueryState,
  options: ForYouOptions,
  candidates: readonly number[],
  byScore: readonly number[],
  affinity: Affinity,
  places: number,
  limit: number,
  explain: Explain,
): number[] {
  const every = Math.max(2, Math.round(1 / options.explore));
  const catalog = ctx.catalog;
  // Smallest hash first (the hash negated as the primary key), ties to the lower ordinal.
  const pick = new TopK(places);
  for (let i = 0; i < candidates.length; i++) {
    const o = candidates[i]!;
    if (affinity.positive(o)) continue;
    pick.push(i, -mix3(user.idHash, options.seed >>> 0, catalog.idHash(o)), -o);
  }
  const explorers = pick.sorted().ordinals;
  const used = new Set<number>();
  const out: number[] = [];
  let e = 0;
  let s = 0;
  while (out.length < places) {
    if ((out.length + 1) % every === 0) {
      while (e < explorers.length && used.has(explorers[e]!)) e++;
      if (e < explorers.length) {
        const i = explorers[e++]!;
        used.add(i);
        if (out.length < limit) explain.explored!++;
        out.push(i);
        continue;
      }
    }
    while (s < byScore.length && used.has(byScore[s]!)) s++;
    if (s >= byScore.length) break;
    used.add(byScore[s]!);
    out.push(byScore[s++]!);
  }
  return out;
}
