import type { Predicate } from '../filter.js';
import { velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import { hashString, mix3 } from '../user-state.js';
import type { Explain, ForYouOptions, RetrieveTask, UserQueryState, VelocityWindow } from '../types.js';

/** tidalDB's mix: preference similarity, velocity, recency, creator affinity. */
export const FOR_YOU_WEIGHTS = Object.freeze({ similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 });

/** The share of places given to exploration by default: every 10th. */
export const FOR_YOU_EXPLORE = 0.1;

/** Half-life of the recency feature: an item a day old scores 0.5, two days 0.25. */
export const RECENCY_HALF_LIFE_MS = 86_400_000;

/** Where the cold-start ranking takes its candidates (the retrieve executor's own stages). */
export interface ColdStartSources {
  /** The `want` items ranked first by `trending`, passing the query's predicate. */
  trending(want: number): number[];
  /** The `want` newest items passing the query's predicate. */
  newest(want: number): number[];
}

export interface ForYouRanking {
  ranked: number[];
  scores: number[];
  similarity: Map<number, number>;
}

/**
 * The `for_you` profile. Candidates: the ANN's `annTopK` neighbours of the user's preference
 * vector (the level's ANN breadth, as for a context vector: 500 at Full, 200 below), or for a
 * user without one (cold start) the level's `annTopK` first items of `trending` and of `new`.
 * Every feature is in [0, 1]:
 *
 * - similarity = max(0, cosine(preference, item));
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
  annTopK: number,
  pass: Predicate,
  window: VelocityWindow,
  _coarse: boolean,
  nowMs: number,
  explain: Explain,
  work: WorkCounter,
  sources: ColdStartSources,
): ForYouRanking {
  const user = task.user!;
  const options = task.forYou!;
  const similarity = new Map<number, number>();
  const cold = user.preference === null;
  explain.coldStart = cold;
  explain.explored = 0;
  let candidates: number[];
  if (cold) {
    const seen = new Set<number>();
    candidates = [];
    for (const o of [...sources.trending(annTopK), ...sources.newest(annTopK)]) {
      if (seen.has(o)) continue;
      seen.add(o);
      candidates.push(o);
    }
    explain.candidates = candidates.length;
  } else {
    explain.annTopK = annTopK;
    candidates = [];
    const ann = ctx.ann;
    if (ann) {
      const found = ann.search(user.preference!, annTopK);
      explain.annCandidates = found.keys.length;
      explain.candidates = found.keys.length;
      for (let i = 0; i < found.keys.length; i++) {
        const o = found.keys[i]!;
        if (!pass(o)) continue;
        candidates.push(o);
        similarity.set(o, found.similarity[i]!);
      }
    } else {
      explain.annCandidates = 0;
    }
  }
  explain.afterFilter = candidates.length;

  const w = options.weights;
  const n = candidates.length;
  const velocity = new Float64Array(n);
  let maxVelocity = 0;
  for (let i = 0; i < n; i++) {
    velocity[i] = velocityOf(ctx, candidates[i]!, window, nowMs, false, work);
    if (velocity[i]! > maxVelocity) maxVelocity = velocity[i]!;
  }
  const affinity = affinityOf(ctx, user);
  const created = ctx.catalog.createdAt;
  const score = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const o = candidates[i]!;
    const vel = maxVelocity > 0 ? velocity[i]! / maxVelocity : 0;
    const rec = Math.pow(2, -Math.max(0, nowMs - created[o]!) / RECENCY_HALF_LIFE_MS);
    if (cold) {
      const total = w.velocity + w.recency;
      score[i] = total > 0 ? (w.velocity * vel + w.recency * rec) / total : 0;
    } else {
      const sim = Math.max(0, similarity.get(o) ?? 0);
      score[i] = w.similarity * sim + w.velocity * vel + w.recency * rec + w.affinity * affinity.of(o);
    }
  }
  const byScore = Array.from({ length: n }, (_, i) => i).sort((a, b) => score[b]! - score[a]! || candidates[a]! - candidates[b]!);
  let order = byScore;
  if (!cold && options.explore > 0) order = interleave(ctx, user, options, candidates, byScore, affinity, task.limit, explain);
  return { ranked: order.map((i) => candidates[i]!), scores: order.map((i) => score[i]!), similarity };
}

/** The user's affinity to an item's creator, normalised by their largest (0 without a creator). */
function affinityOf(ctx: QueryContext, user: UserQueryState): { of(o: number): number; positive(o: number): boolean } {
  const field = ctx.schema.creatorField;
  const col = field === undefined ? undefined : ctx.catalog.columns.get(field);
  if (!col || col.type !== 'string' || user.affinityCreators.length === 0) return { of: () => 0, positive: () => false };
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
  };
}

function interleave(
  ctx: QueryContext,
  user: UserQueryState,
  options: ForYouOptions,
  candidates: readonly number[],
  byScore: readonly number[],
  affinity: { positive(o: number): boolean },
  limit: number,
  explain: Explain,
): number[] {
  const every = Math.max(2, Math.round(1 / options.explore));
  const ids = ctx.catalog.ids;
  const explorers: { i: number; h: number }[] = [];
  for (const i of byScore) {
    const o = candidates[i]!;
    if (affinity.positive(o)) continue;
    explorers.push({ i, h: mix3(user.idHash, options.seed >>> 0, hashString(ids[o] ?? '')) });
  }
  explorers.sort((a, b) => a.h - b.h || candidates[a.i]! - candidates[b.i]!);
  const used = new Uint8Array(candidates.length);
  const out: number[] = [];
  let e = 0;
  let s = 0;
  while (out.length < candidates.length) {
    if ((out.length + 1) % every === 0) {
      while (e < explorers.length && used[explorers[e]!.i]) e++;
      if (e < explorers.length) {
        const i = explorers[e++]!.i;
        used[i] = 1;
        if (out.length < limit) explain.explored!++;
        out.push(i);
        continue;
      }
    }
    while (s < byScore.length && used[byScore[s]!]) s++;
    if (s >= byScore.length) break;
    used[byScore[s]!] = 1;
    out.push(byScore[s++]!);
  }
  return out;
}
