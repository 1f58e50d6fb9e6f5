import type Database from 'better-sqlite3';
import { DegradationLevel as Level, levelPlan, type DegradationLevel } from 'tidal-load';
import { toInt8 } from '../ann.js';
import type { Catalog } from '../catalog.js';
import type { Predicate } from '../filter.js';
import { velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import { blobToVector } from '../items-table.js';
import { TopK } from '../topk.js';
import { hashString, mix3 } from '../user-state.js';
import { creatorListsOf } from './feeds.js';
import { FOR_YOU_BUDGETS, type ForYouBudget } from './for-you-budgets.js';
import type { Explain, ForYouOptions, RetrieveTask, UserQueryState, VelocityWindow } from '../types.js';

export { FOR_YOU_BUDGETS, type ForYouBudget };

/** tidalDB's mix: preference similarity, velocity, recency, creator affinity. */
export const FOR_YOU_WEIGHTS = Object.freeze({ similarity: 0.4, velocity: 0.3, recency: 0.2, affinity: 0.1 });

/** The share of places given to exploration by default: every 10th. */
export const FOR_YOU_EXPLORE = 0.1;

/** Half-life of the recency feature: an item a day old scores 0.5, two days 0.25. */
export const RECENCY_HALF_LIFE_MS = 86_400_000;

/** 2^(−age / half-life) as e^(−age · ln 2 / half-life): `Math.exp` costs a third of `Math.pow`. */
const RECENCY_RATE = Math.LN2 / RECENCY_HALF_LIFE_MS;

/**
 * What `for_you` takes candidates from besides the ANN (the retrieve executor's own stages):
 * the cold start uses both, a warm user's feed both as bounded extra sources.
 */
export interface ForYouSources {
  /**
   * The `want` items ranked first by `trending`, passing `admit` (by default the query's
   * predicate), reading at most `slots` active slots per velocity kind.
   */
  trending(want: number, slots: number, admit?: Predicate): number[];
  /** The `want` newest items passing the query's predicate. */
  newest(want: number): number[];
  /** Where the trending source's unfiltered lists are kept between queries; none: every query walks. */
  trendingCache?: TrendingCache;
}

/** The trending cache keeps this many times the places a query wants, so its own predicate can drop some. */
const TRENDING_CACHE_ROOM = 4;

/**
 * The trending source's lists, unfiltered (present items only), kept for one state: one clock,
 * one items version, one published generation of the signal orders with its dirty list and slot
 * count. Trending is the same for every user at one clock, so a burst of `for_you` queries walks
 * the active slots once (0.26 ms of a Full feed's 2.9 ms at 100 000 items) and each query filters
 * the shared list by its own predicate (hard negatives, seen, filters). One list per (velocity
 * window, level, places, slots); all are dropped when the state moves. A list ranks a fixed set of
 * items in a total order independent of any predicate, so the first `want` of it passing a
 * predicate are exactly what a walk with that predicate returns, as long as the list is the whole
 * set or holds `want` passing items; otherwise the query walks with its own predicate.
 * An event on a slot already dirty in the same generation at the same clock is not seen until
 * the clock moves: the staleness is the clock's resolution.
 */
export class TrendingCache {
  #stamp: readonly number[] = [];
  readonly #lists = new Map<string, number[]>();
  /** Unfiltered lists walked (cache misses). */
  computed = 0;
  /** Queries served from a kept list. */
  served = 0;
  /** Queries whose predicate left too few of a kept list: walked with their own predicate. */
  fallbacks = 0;

  /** The `want` first of trending passing `pass`, from the kept list for this state when it holds enough. */
  take(ctx: QueryContext, sources: ForYouSources, key: string, nowMs: number, want: number, slots: number, pass: Predicate): number[] {
    const order = ctx.store.order;
    // Orders switched off: trending scans, and nothing here could tell the signals moved.
    if (!order.begin()) return sources.trending(want, slots);
    const stamp = [nowMs, ctx.catalog.version, order.generation, order.dirtyCount, ctx.store.slotsUsed()];
    if (stamp.some((x, i) => x !== this.#stamp[i])) {
      this.#stamp = stamp;
      this.#lists.clear();
    }
    const room = want * TRENDING_CACHE_ROOM;
    const lkey = `${key}|${want}|${slots}`;
    let list = this.#lists.get(lkey);
    if (list) this.served++;
    else {
      const present = ctx.catalog.present;
      list = sources.trending(room, slots, (o) => present[o] === 1);
      this.#lists.set(lkey, list);
      this.computed++;
    }
    const out: number[] = [];
    for (let i = 0; i < list.length && out.length < want; i++) if (pass(list[i]!)) out.push(list[i]!);
    if (out.length < want && list.length >= room) {
      this.fallbacks++;
      return sources.trending(want, slots);
    }
    return out;
  }
}

/** The trending source through the cache when there is one. */
function trendingOf(ctx: QueryContext, sources: ForYouSources, key: string, nowMs: number, want: number, slots: number, pass: Predicate): number[] {
  return sources.trendingCache ? sources.trendingCache.take(ctx, sources, key, nowMs, want, slots, pass) : sources.trending(want, slots);
}

/** With diversity asked for, this many times the limit are ranked (as the retrieve executor does). */
const DIVERSITY_ROOM = 5;

/** Visits per creator list, as a multiple of `perCreator`, before a restrictive filter gives up on it. */
const CREATOR_SCAN_FACTOR = 4;

export interface ForYouRanking {
  ranked: number[];
  scores: number[];
  similarity: Map<number, number>;
}

/**
 * The `for_you` profile. A warm user's candidates are the union, without repeats, of the level's
 * {@link FOR_YOU_BUDGETS}: the ANN neighbours of the preference vector, the newest items of the
 * creators the user has the largest affinity with, the newest items, and the first of `trending`
 * (each passing the query's predicate). A user without a preference vector (cold start) takes the
 * first `annTopK` (the level plan's ANN breadth: 500 at Full, 200 below) of `trending` and of `new`.
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
  level: DegradationLevel,
  pass: Predicate,
  window: VelocityWindow,
  nowMs: number,
  explain: Explain,
  work: WorkCounter,
  sources: ForYouSources,
  budgets: readonly ForYouBudget[] = FOR_YOU_BUDGETS,
): ForYouRanking {
  const user = task.user!;
  const options = task.forYou!;
  const cold = user.preference === null;
  const affinity = affinityOf(ctx, user);
  // Every candidate passed the query's predicate, which admits only present ordinals.
  const marks = candidateMarks(ctx.catalog.present.length);
  explain.coldStart = cold;
  explain.explored = 0;
  let candidates: number[];
  // A warm user's candidates' similarity to the preference vector, index for index.
  const sims: number[] = [];
  if (cold) {
    const annTopK = levelPlan(level).annTopK;
    candidates = [];
    const trending = trendingOf(ctx, sources, `${task.window}|${window}|${level}|cold`, nowMs, annTopK, Number.POSITIVE_INFINITY, pass);
    for (const list of [trending, sources.newest(annTopK)]) {
      for (const o of list) {
        if (marks.has(o)) continue;
        marks.add(o);
        candidates.push(o);
      }
    }
    explain.candidates = candidates.length;
  } else {
    const trending = (want: number, slots: number): number[] => trendingOf(ctx, sources, `${task.window}|${window}|${level}|warm`, nowMs, want, slots, pass);
    candidates = warmCandidates(ctx, user, budgets[level] ?? budgets[Level.Full]!, pass, marks, sims, affinity, explain, sources.newest, trending);
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
  const created = ctx.catalog.createdAt;
  const coldTotal = w.velocity + w.recency;
  // Only the places the tail can take are ranked (the limit, the diversity pass's room, a cursor's
  // earlier pages): bounded selections instead of a sort of every candidate.
  const places = Math.max(1, Math.min((task.diversity ? task.limit * DIVERSITY_ROOM : task.limit) + (task.after?.length ?? 0), n));
  // Kept by candidate index, ties to the lower ordinal (the secondary key is the ordinal negated).
  const top = new TopK(places);
  const score = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const o = candidates[i]!;
    const vel = maxVelocity > 0 ? velocity[i]! / maxVelocity : 0;
    const rec = Math.exp(-Math.max(0, nowMs - created[o]!) * RECENCY_RATE);
    if (cold) score[i] = coldTotal > 0 ? (w.velocity * vel + w.recency * rec) / coldTotal : 0;
    else score[i] = w.similarity * Math.max(0, sims[i]!) + w.velocity * vel + w.recency * rec + w.affinity * affinity.of(o);
    top.push(i, score[i]!, -o);
  }
  const byScore = top.sorted().ordinals;
  const order = cold || options.explore <= 0 ? byScore : interleave(ctx, user, options, candidates, byScore, affinity, places, task.limit, explain);
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
 * This thread's marks of the candidates one `for_you` query has taken, by ordinal: a mark number
 * per query instead of a set of each query's own (a query runs to the end before the next starts
 * on this thread). 4 bytes per item.
 */
class CandidateMarks {
  #marks = new Uint32Array(0);
  #mark = 0;

  /** Starts a query over ordinals below `size`: every ordinal unmarked. */
  begin(size: number): this {
    if (this.#marks.length < size) {
      this.#marks = new Uint32Array(Math.max(size, 2 * this.#marks.length, 1024));
      this.#mark = 0;
    }
    if (this.#mark === 0xffffffff) {
      this.#marks.fill(0);
      this.#mark = 0;
    }
    this.#mark++;
    return this;
  }

  has(o: number): boolean {
    return this.#marks[o] === this.#mark;
  }

  add(o: number): void {
    this.#marks[o] = this.#mark;
  }
}

const marksOf = new CandidateMarks();

function candidateMarks(size: number): CandidateMarks {
  return marksOf.begin(size);
}

/**
 * A warm user's candidates from the four sources of `budget`, each passing `pass`, in source
 * order without repeats, marked in `marks`; `sims` receives each one's similarity (the ANN's for its
 * neighbours, from the items' int8 copy for the others, see {@link itemVectors}). Counted per source in
 * `explain.forYouSources` (the candidates each source added that no earlier one had).
 */
function warmCandidates(
  ctx: QueryContext,
  user: UserQueryState,
  budget: ForYouBudget,
  pass: Predicate,
  marks: CandidateMarks,
  sims: number[],
  affinity: Affinity,
  explain: Explain,
  newest: ForYouSources['newest'],
  trending: (want: number, slots: number) => number[],
): number[] {
  const out: number[] = [];
  const counts = { ann: 0, creators: 0, newest: 0, trending: 0 };
  explain.annTopK = budget.ann;
  const ann = ctx.ann;
  let annFound = 0;
  if (ann && budget.ann > 0) {
    // The search's expansion follows the budget too (usearch searches max(expansion, k)), so a
    // level asking for fewer neighbours searches less of the graph.
    const found = ann.search(user.preference!, budget.ann, budget.ann);
    annFound = found.keys.length;
    for (let i = 0; i < found.keys.length; i++) {
      const o = found.keys[i]!;
      if (!pass(o) || marks.has(o)) continue;
      out.push(o);
      sims.push(found.similarity[i]!);
      marks.add(o);
    }
  }
  explain.annCandidates = ann ? annFound : 0;
  counts.ann = out.length;
  const vectors = ctx.ann ? itemVectors(ctx) : null;
  const p = user.preference!;
  const dims = ctx.schema.embeddingDims;
  let pNorm = 0;
  for (let k = 0; k < p.length; k++) pNorm += p[k]! * p[k]!;
  const pScale = pNorm > 0 ? 1 / Math.sqrt(pNorm) : 0;
  const add = (o: number, source: keyof typeof counts): void => {
    if (marks.has(o)) return;
    marks.add(o);
    sims.push(vectors && p.length === dims ? cosineInt8(vectors, dims, p, pScale, o) : 0);
    out.push(o);
    counts[source]++;
  };
  // The creators the user has the largest positive affinity with (ties: the first in the user's list).
  const field = ctx.schema.creatorField;
  if (field !== undefined && budget.creators > 0 && budget.perCreator > 0) {
    const lists = creatorListsOf(ctx.catalog, field);
    const codes = affinity.topCodes(budget.creators);
    for (const code of codes) {
      const list = lists.get(code);
      if (!list) continue;
      const visits = Math.min(list.length, budget.perCreator * CREATOR_SCAN_FACTOR);
      let taken = 0;
      for (let i = 0; i < visits && taken < budget.perCreator; i++) {
        const o = list[i]!;
        if (!pass(o)) continue;
        taken++;
        add(o, 'creators');
      }
    }
  }
  if (budget.newest > 0) for (const o of newest(budget.newest)) add(o, 'newest');
  if (budget.trending > 0) for (const o of trending(budget.trending, budget.trendingSlots)) add(o, 'trending');
  explain.candidates = annFound + counts.creators + counts.newest + counts.trending;
  explain.forYouSources = counts;
  return out;
}

/**
 * Every present item's embedding as int8 (scaled to ±127, see `toInt8`), by ordinal, kept per
 * catalog (one per worker): the similarity of a candidate that is not an ANN neighbour. Reading the
 * vectors row by row from the items table cost ~12 µs a row (about 4 ms for the ~300 such
 * candidates of a Full feed at 100 000 items); this copy is one pass over the table when first
 * needed (or at warm), then the rows changed since, and costs `embeddingDims` + 4 bytes per item
 * (13 MB at 100 000 items of 128 dimensions). int8 rounding moves a cosine by about 0.002 at 128
 * dimensions, the score by a tenth of that.
 */
export interface Int8Vectors {
  version: number;
  readonly db: Database.Database;
  rows: Int8Array;
  /** 1 / |row|, 0 for an item without a vector. */
  inverseNorms: Float32Array;
  readonly all: Database.Statement;
  readonly changed: Database.Statement;
}

const int8Vectors = new WeakMap<Catalog, Int8Vectors>();

/** The int8 vectors of `ctx`'s items, brought up to its catalog's version. */
export function itemVectors(ctx: QueryContext): Int8Vectors {
  const dims = ctx.schema.embeddingDims;
  let v = int8Vectors.get(ctx.catalog);
  if (!v || v.db !== ctx.db) {
    v = {
      version: ctx.catalog.version,
      db: ctx.db,
      rows: new Int8Array(0),
      inverseNorms: new Float32Array(0),
      all: ctx.db.prepare('SELECT ordinal, present, embedding FROM items WHERE version <= ? AND present = 1 AND embedding IS NOT NULL').raw(),
      changed: ctx.db.prepare('SELECT ordinal, present, embedding FROM items WHERE version > ? AND version <= ?').raw(),
    };
    int8Vectors.set(ctx.catalog, v);
    for (const row of v.all.iterate(v.version) as IterableIterator<[number, number, Buffer | null]>) setRow(v, dims, row);
  } else if (v.version < ctx.catalog.version) {
    for (const row of v.changed.iterate(v.version, ctx.catalog.version) as IterableIterator<[number, number, Buffer | null]>) setRow(v, dims, row);
    v.version = ctx.catalog.version;
  }
  return v;
}

function setRow(v: Int8Vectors, dims: number, [o, present, blob]: [number, number, Buffer | null]): void {
  if (o >= v.inverseNorms.length) {
    let n = Math.max(1024, v.inverseNorms.length);
    while (n <= o) n *= 2;
    const rows = new Int8Array(n * dims);
    rows.set(v.rows);
    const norms = new Float32Array(n);
    norms.set(v.inverseNorms);
    v.rows = rows;
    v.inverseNorms = norms;
  }
  if (present !== 1 || !blob || blob.byteLength !== dims * 4) {
    v.inverseNorms[o] = 0;
    return;
  }
  toInt8(blobToVector(blob), v.rows, o * dims);
  let sq = 0;
  for (let k = 0; k < dims; k++) sq += v.rows[o * dims + k]! * v.rows[o * dims + k]!;
  v.inverseNorms[o] = sq > 0 ? 1 / Math.sqrt(sq) : 0;
}

/** cosine(p, row o) over the int8 copy, `pScale` = 1 / |p|; 0 for an item without a vector. */
export function cosineInt8(v: Int8Vectors, dims: number, p: Float32Array, pScale: number, o: number): number {
  const inv = o < v.inverseNorms.length ? v.inverseNorms[o]! : 0;
  if (inv === 0) return 0;
  const rows = v.rows;
  const base = o * dims;
  // Four sums, so the additions do not wait on each other: 0.74x the time of one sum.
  let d0 = 0;
  let d1 = 0;
  let d2 = 0;
  let d3 = 0;
  let k = 0;
  for (; k + 3 < dims; k += 4) {
    d0 += p[k]! * rows[base + k]!;
    d1 += p[k + 1]! * rows[base + k + 1]!;
    d2 += p[k + 2]! * rows[base + k + 2]!;
    d3 += p[k + 3]! * rows[base + k + 3]!;
  }
  for (; k < dims; k++) d0 += p[k]! * rows[base + k]!;
  return (d0 + d1 + d2 + d3) * pScale * inv;
}

interface Affinity {
  /** The user's affinity to `o`'s creator over their largest, in [0, 1]. */
  of(o: number): number;
  /** Whether the user has a positive affinity to `o`'s creator. */
  positive(o: number): boolean;
  /** The creator codes of the `n` largest positive affinities, largest first (ties: the user's order). */
  topCodes(n: number): number[];
}

/** The user's affinity to an item's creator, normalised by their largest (0 without a creator). */
function affinityOf(ctx: QueryContext, user: UserQueryState): Affinity {
  const field = ctx.schema.creatorField;
  const col = field === undefined ? undefined : ctx.catalog.columns.get(field);
  if (!col || col.type !== 'string' || user.affinityCreators.length === 0) return { of: () => 0, positive: () => false, topCodes: () => [] };
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
    topCodes: (n) => [...byCode].sort((a, b) => b[1] - a[1]).slice(0, n).map(([code]) => code),
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
  const ids = ctx.catalog.ids;
  // Smallest hash first (the hash negated as the primary key), ties to the lower ordinal.
  const pick = new TopK(places);
  for (let i = 0; i < candidates.length; i++) {
    const o = candidates[i]!;
    if (affinity.positive(o)) continue;
    pick.push(i, -mix3(user.idHash, options.seed >>> 0, hashString(ids[o] ?? '')), -o);
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
