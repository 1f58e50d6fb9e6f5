/**
 * for_you against its own formula, for `bench:personalization`: the exhaustive ranking (every item
 * scored by the documented mix), where each of its top items lies in each candidate source, and a
 * sweep of candidate budgets run side by side on this thread.
 *
 * The sweep runs the same executor a query worker runs, over a context like a worker's (its own
 * read-only connection and catalog, the database's signal state, the workers' ANN snapshot), so a
 * budget set that is not a level's plan can be timed and scored without changing the workers.
 * Ordinals are the corpus indexes: the bench writes the items in order.
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { DegradationLevel, levelName, type TidalDb } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import {
  AnnIndex,
  Catalog,
  FOR_YOU_WEIGHTS,
  RetrieveExecutor,
  creatorListsOf,
  levelPlan,
  tunedPlan,
  type LevelPlan,
  type QueryContext,
  type RetrieveTask,
  type UserQueryState,
} from 'tidal-query';
import { fmtInt, fmtMs, summarize } from './harness/index.js';

const DAY = 86_400_000;

/** The bench corpus as the exhaustive ranking reads it, by corpus index. */
export interface ForYouData {
  readonly dims: number;
  readonly now: number;
  /** Row-major unit embeddings. */
  readonly embeddings: Float32Array;
  readonly created: Float64Array;
  /** 1h view velocity, as `db.itemSignals` reports it. */
  readonly velocity: Float64Array;
  readonly maxVelocity: number;
  readonly creatorOf: readonly string[];
}

/** A user as the exhaustive ranking and the sweep see them. */
export interface SweepUser {
  readonly id: string;
  readonly preference: Float32Array;
  /** Positive affinities only. */
  readonly affinity: ReadonlyMap<string, number>;
  readonly state: UserQueryState;
}

/** What makes an exhaustive top item score: each feature as the mix weighs it. */
export interface Features {
  similarity: number;
  velocity: number;
  recency: number;
  affinity: number;
}

export function features(data: ForYouData, user: SweepUser, i: number): Features {
  const { dims, embeddings } = data;
  const p = user.preference;
  let d = 0;
  let np = 0;
  for (let k = 0; k < dims; k++) {
    d += p[k]! * embeddings[i * dims + k]!;
    np += p[k]! * p[k]!;
  }
  let maxA = 0;
  for (const a of user.affinity.values()) if (a > maxA) maxA = a;
  return {
    similarity: np > 0 ? Math.max(0, d / Math.sqrt(np)) : 0,
    velocity: data.maxVelocity > 0 ? data.velocity[i]! / data.maxVelocity : 0,
    recency: 2 ** (-Math.max(0, data.now - data.created[i]!) / DAY),
    affinity: maxA > 0 ? (user.affinity.get(data.creatorOf[i]!) ?? 0) / maxA : 0,
  };
}

/**
 * The top `n` of every item by 0.4·similarity + 0.3·velocity + 0.2·recency + 0.1·affinity,
 * velocity over `maxVelocity` (by default the largest of all items), among every item or the
 * indexes `among` (ties: the earlier). The embeddings are unit vectors, so the cosine is the dot
 * product over |p|.
 */
export function exhaustiveTop(
  data: ForYouData,
  user: SweepUser,
  n = 10,
  among?: ArrayLike<number>,
  maxVelocity = data.maxVelocity,
): number[] {
  const { dims, embeddings, created, velocity, creatorOf, now } = data;
  const w = FOR_YOU_WEIGHTS;
  const items = created.length;
  const fixedPart = (i: number): number =>
    w.velocity * (maxVelocity > 0 ? velocity[i]! / maxVelocity : 0) + w.recency * 2 ** (-Math.max(0, now - created[i]!) / DAY);
  // Over every item, the features that do not depend on the user are computed once per data set.
  let part: Float64Array | null = null;
  if (!among) {
    part = fixedScores.get(data) ?? null;
    if (!part || maxVelocity !== data.maxVelocity) {
      part = new Float64Array(items);
      for (let i = 0; i < items; i++) part[i] = fixedPart(i);
      if (maxVelocity === data.maxVelocity) fixedScores.set(data, part);
    }
  }
  const p = user.preference;
  let np = 0;
  for (let k = 0; k < dims; k++) np += p[k]! * p[k]!;
  const pScale = np > 0 ? 1 / Math.sqrt(np) : 0;
  let maxA = 0;
  for (const a of user.affinity.values()) if (a > maxA) maxA = a;
  const best: { i: number; s: number }[] = [];
  const count = among ? among.length : items;
  for (let j = 0; j < count; j++) {
    const i = among ? among[j]! : j;
    let d0 = 0;
    let d1 = 0;
    const base = i * dims;
    let k = 0;
    for (; k + 1 < dims; k += 2) {
      d0 += p[k]! * embeddings[base + k]!;
      d1 += p[k + 1]! * embeddings[base + k + 1]!;
    }
    if (k < dims) d0 += p[k]! * embeddings[base + k]!;
    // The affinity feature is at most w.affinity: an item that cannot pass the n-th without it is skipped before the lookup.
    let s = w.similarity * Math.max(0, (d0 + d1) * pScale) + (part ? part[i]! : fixedPart(i));
    if (best.length === n && s + w.affinity <= best[n - 1]!.s) continue;
    if (maxA > 0) s += (w.affinity * (user.affinity.get(creatorOf[i]!) ?? 0)) / maxA;
    if (best.length === n && s <= best[n - 1]!.s) continue;
    let at = best.length;
    while (at > 0 && best[at - 1]!.s < s) at--;
    best.splice(at, 0, { i, s });
    if (best.length > n) best.pop();
  }
  return best.map((b) => b.i);
}

const fixedScores = new WeakMap<ForYouData, Float64Array>();

/** The corpus indexes of retrieved items (`item-000123` is index 123). */
export function indexesOf(items: readonly { id: string }[]): number[] {
  return items.map((it) => Number(it.id.slice(5)));
}

/** |a[..10] ∩ b[..10]| / min(10, |b|), 1 when both are empty. */
export function overlapAt10<T>(a: readonly T[], b: readonly T[]): number {
  const want = new Set(b.slice(0, 10));
  if (want.size === 0) return a.length === 0 ? 1 : 0;
  let hit = 0;
  for (const id of a.slice(0, 10)) if (want.has(id)) hit++;
  return hit / want.size;
}

/** A query context on this thread over the open database `db` in `dir` (see the file's comment). */
export function sweepContext(db: TidalDb, dir: string, ann: string | ExactNeighbours): { ctx: QueryContext; exec: RetrieveExecutor } {
  const { store, schema } = internalsOf(db);
  const ro = new Database(path.join(dir, 'tidal.db'), { readonly: true, fileMustExist: true });
  const catalog = new Catalog(ro, schema);
  catalog.refresh();
  const index = typeof ann === 'string' ? AnnIndex.view(schema.embeddingDims, path.join(dir, ann)) : (ann as unknown as AnnIndex);
  const ctx: QueryContext = { schema, catalog, store, ann: index, db: ro };
  return { ctx, exec: new RetrieveExecutor(ctx) };
}

/**
 * A stand-in for the ANN index (`--exact-ann`): each user's exact nearest neighbours, computed
 * once, and a search of k is their first k. For a catalogue whose HNSW graph is not built yet: the
 * sweep's quality is then that of exact neighbours (an HNSW search of the same k finds nearly the
 * same), and its times leave the ANN search out.
 */
export class ExactNeighbours {
  readonly #found = new WeakMap<Float32Array, { keys: Int32Array; similarity: Float32Array }>();
  readonly size: number;

  constructor(data: ForYouData, users: readonly SweepUser[], depth: number) {
    const { dims, embeddings } = data;
    const items = data.created.length;
    this.size = items;
    const sims = new Float32Array(items);
    for (const u of users) {
      const p = u.state.preference!;
      let np = 0;
      for (let k = 0; k < dims; k++) np += p[k]! * p[k]!;
      const scale = np > 0 ? 1 / Math.sqrt(np) : 0;
      for (let i = 0; i < items; i++) {
        let d = 0;
        for (let k = 0; k < dims; k++) d += p[k]! * embeddings[i * dims + k]!;
        sims[i] = d * scale;
      }
      // The depth-th largest similarity by a sorted copy, then the items above it in order.
      const sorted = Float32Array.from(sims).sort();
      const floor = sorted[Math.max(0, items - depth)]!;
      const keys: number[] = [];
      for (let i = 0; i < items; i++) if (sims[i]! >= floor) keys.push(i);
      keys.sort((a, b) => sims[b]! - sims[a]! || a - b);
      keys.length = Math.min(keys.length, depth);
      this.#found.set(p, { keys: Int32Array.from(keys), similarity: Float32Array.from(keys, (i) => sims[i]!) });
    }
  }

  search(vector: Float32Array, k: number): { keys: Int32Array; similarity: Float32Array } {
    const f = this.#found.get(vector);
    if (!f) throw new Error('ExactNeighbours: a vector of no sweep user');
    return { keys: f.keys.subarray(0, k), similarity: f.similarity.subarray(0, k) };
  }
}

export function forYouTask(user: SweepUser, limit = 10): RetrieveTask {
  return {
    profile: 'for_you',
    context: null,
    filter: null,
    diversity: null,
    limit,
    window: '1h',
    exclude: null,
    user: user.state,
    forYou: { weights: { ...FOR_YOU_WEIGHTS }, explore: 0, seed: 0 },
  };
}

/** A budget set of the sweep: a level's plan with some for_you budgets replaced. */
export interface SweepSet {
  readonly name: string;
  readonly level: DegradationLevel;
  readonly plan: LevelPlan;
}

const LEVEL_NAMES: Record<string, DegradationLevel> = {
  Full: DegradationLevel.Full,
  ReducedCandidates: DegradationLevel.ReducedCandidates,
  CoarseAggregates: DegradationLevel.CoarseAggregates,
  NoDiversity: DegradationLevel.NoDiversity,
};
const FIELDS = [
  'ann',
  'annWithAffinity',
  'popularNeighbours',
  'popularRows',
  'reuseNeighbours',
  'creators',
  'perCreator',
  'creatorFloor',
  'perCreatorGrowth',
  'newest',
  'newestGrowth',
  'trending',
  'trendingSlots',
] as const;

/**
 * `--sweep` sets, separated by `/`: `[Level:]field=n,field=n`, the level's plan (Full without one)
 * with those for_you budgets (`popularNeighbours`, `reuseNeighbours`: 0 or 1); every level's own
 * plan comes first. The sets share one executor, so a set that reuses neighbours takes those of
 * the same user's query in an earlier set (the levels' plans come first, Full's among them).
 */
export function sweepSets(spec: string): SweepSet[] {
  const sets: SweepSet[] = Object.values(LEVEL_NAMES).map((level) => ({
    name: `${levelName(level)} (plan)`,
    level,
    plan: levelPlan(level),
  }));
  for (const part of spec.split('/').filter((s) => s.trim() !== '')) {
    const [head, body] = part.includes(':') ? part.split(':', 2) : ['Full', part];
    const level = LEVEL_NAMES[head!.trim()];
    if (level === undefined) throw new Error(`--sweep: unknown level ${head}`);
    const forYou: Record<string, number | boolean> = {};
    for (const kv of body!.split(',')) {
      const [k, v] = kv.split('=');
      const key = k!.trim();
      if (!(FIELDS as readonly string[]).includes(key)) throw new Error(`--sweep: ${key} is not one of ${FIELDS.join(', ')}`);
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) throw new Error(`--sweep: ${key} must be a number ≥ 0, got ${v}`);
      forYou[key] = key === 'popularNeighbours' || key === 'reuseNeighbours' ? n > 0 : n;
    }
    sets.push({ name: `${levelName(level)} ${body!.trim()}`, level, plan: tunedPlan(levelPlan(level), { forYou }) });
  }
  return sets;
}

export interface SweepRow {
  name: string;
  overlap: number;
  p50Ms: number;
  /** CPU time of the process (this thread: the workers are idle meanwhile), which a busy machine's preemption does not inflate. */
  cpuP50Ms: number;
  cpuMeanMs: number;
  candidates: number;
}

/**
 * Every set on every user, interleaved: per user, each set runs in turn (the order rotated by one
 * each user), `reps` times; overlap@10 with the exhaustive top 10.
 */
export function sweep(
  exec: RetrieveExecutor,
  sets: readonly SweepSet[],
  users: readonly SweepUser[],
  truth: readonly (readonly number[])[],
  now: number,
  reps: number,
): SweepRow[] {
  const times = sets.map(() => [] as number[]);
  const cpu = sets.map(() => [] as number[]);
  const overlap = sets.map(() => 0);
  const candidates = sets.map(() => 0);
  // One untimed pass: each set's first query builds what the executor keeps (the int8 vectors,
  // the creator lists, the ANN view of its breadth).
  for (const s of sets) exec.run(forYouTask(users[0]!), s.plan, now);
  for (let rep = 0; rep < reps; rep++) {
    users.forEach((u, q) => {
      const task = forYouTask(u);
      for (let j = 0; j < sets.length; j++) {
        const k = (j + q + rep) % sets.length;
        const c0 = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        const r = exec.run(task, sets[k]!.plan, now);
        times[k]!.push(Number(process.hrtime.bigint() - t0) / 1e6);
        const c = process.cpuUsage(c0);
        cpu[k]!.push((c.user + c.system) / 1000);
        if (rep === 0) {
          overlap[k]! += overlapAt10(indexesOf(r.items), truth[q]!);
          candidates[k]! += r.explain.candidates;
        }
      }
    });
  }
  return sets.map((s, k) => {
    const sm = summarize(times[k]!);
    const c = summarize(cpu[k]!);
    return {
      name: s.name,
      overlap: overlap[k]! / users.length,
      p50Ms: sm.p50,
      cpuP50Ms: c.p50,
      cpuMeanMs: c.mean,
      candidates: candidates[k]! / users.length,
    };
  });
}

export function sweepTable(rows: readonly SweepRow[]): string[][] {
  return rows.map((r) => [r.name, r.overlap.toFixed(3), fmtMs(r.cpuP50Ms), fmtMs(r.cpuMeanMs), fmtMs(r.p50Ms), fmtInt(r.candidates)]);
}

/** Depths at which each source's recall of the exhaustive top 10 is reported. */
export const SOURCE_DEPTHS = {
  ann: [32, 64, 128, 256, 512, 1024, 2048],
  newest: [50, 100, 200, 500, 1000, 2000, 5000, 10000],
  trending: [20, 50, 100, 200, 500, 1000],
  creators: [
    [16, 16],
    [16, 32],
    [32, 16],
    [32, 50],
  ],
} as const;

/**
 * Where each exhaustive top item lies in each source: its rank among the first 2 048 of an ANN
 * search 2 048 wide (its ANN rank), in the newest-first order, in trending over 1h (the first
 * 1 000), and its creator's rank among the user's affinities with its place in that creator's
 * newest-first list. Returns the recall of each source at each of {@link SOURCE_DEPTHS}, and the
 * mean features of the items no source at `budget` (a plan's for_you budget at this catalogue, see
 * `forYouBudgetAt`) holds.
 */
export function sourceRecall(
  ctx: QueryContext,
  exec: RetrieveExecutor,
  data: ForYouData,
  users: readonly SweepUser[],
  truth: readonly (readonly number[])[],
  budget: LevelPlan['forYou'],
  now: number,
): { rows: string[][]; missed: string } {
  const order = ctx.catalog.byCreatedDesc();
  const newestRank = new Int32Array(ctx.catalog.present.length).fill(-1);
  for (let r = 0; r < order.length; r++) newestRank[order[r]!] = r;
  const trendingTask: RetrieveTask = {
    profile: 'trending',
    context: null,
    filter: null,
    diversity: null,
    limit: 1000,
    window: '1h',
    exclude: null,
  };
  const trending = indexesOf(exec.run(trendingTask, levelPlan(DegradationLevel.Full), now).items);
  const trendingRank = new Map<number, number>();
  trending.forEach((o, r) => trendingRank.set(o, r));
  const lists = creatorListsOf(ctx.catalog, 'creator');
  const col = ctx.catalog.columns.get('creator');
  const codeOf = (name: string): number | undefined => (col && col.type === 'string' ? col.dict.get(name) : undefined);
  const hits = {
    ann: SOURCE_DEPTHS.ann.map(() => 0),
    newest: SOURCE_DEPTHS.newest.map(() => 0),
    trending: SOURCE_DEPTHS.trending.map(() => 0),
    creators: SOURCE_DEPTHS.creators.map(() => 0),
  };
  let total = 0;
  let missedCount = 0;
  const missed: Features = { similarity: 0, velocity: 0, recency: 0, affinity: 0 };
  const all: Features = { similarity: 0, velocity: 0, recency: 0, affinity: 0 };
  users.forEach((u, q) => {
    const ann = ctx.ann!.search(u.state.preference!, 2048, 2048);
    const annRank = new Map<number, number>();
    Array.from(ann.keys).forEach((o, r) => annRank.set(o, r));
    const byAffinity = [...u.affinity].sort((a, b) => b[1] - a[1]);
    const creators = byAffinity.map(([c]) => c);
    const maxA = byAffinity[0]?.[1] ?? 0;
    for (const i of truth[q]!) {
      total++;
      const a = annRank.get(i) ?? Infinity;
      SOURCE_DEPTHS.ann.forEach((d, j) => (hits.ann[j]! += a < d ? 1 : 0));
      const n = newestRank[i]! < 0 ? Infinity : newestRank[i]!;
      SOURCE_DEPTHS.newest.forEach((d, j) => (hits.newest[j]! += n < d ? 1 : 0));
      const t = trendingRank.get(i) ?? Infinity;
      SOURCE_DEPTHS.trending.forEach((d, j) => (hits.trending[j]! += t < d ? 1 : 0));
      const cr = creators.indexOf(data.creatorOf[i]!);
      const code = codeOf(data.creatorOf[i]!);
      const list = code === undefined ? undefined : lists.get(code);
      const at = list ? list.indexOf(i) : -1;
      SOURCE_DEPTHS.creators.forEach(([c, p], j) => (hits.creators[j]! += cr >= 0 && cr < c && at >= 0 && at < p ? 1 : 0));
      const f = features(data, u, i);
      for (const k of Object.keys(all) as (keyof Features)[]) all[k] += f[k];
      const held =
        a < budget.ann ||
        n < budget.newest ||
        t < budget.trending ||
        (cr >= 0 &&
          cr < budget.creators &&
          at >= 0 &&
          at <
            Math.max(1, Math.round(budget.perCreator * (budget.creatorFloor + (1 - budget.creatorFloor) * (byAffinity[cr]![1] / maxA)))));
      if (!held) {
        missedCount++;
        for (const k of Object.keys(missed) as (keyof Features)[]) missed[k] += f[k];
      }
    }
  });
  const pct = (h: number): string => `${((100 * h) / total).toFixed(0)} %`;
  const rows: string[][] = [
    ['ANN (first k of 2 048)', SOURCE_DEPTHS.ann.map((d, j) => `${d}: ${pct(hits.ann[j]!)}`).join(', ')],
    ['newest', SOURCE_DEPTHS.newest.map((d, j) => `${d}: ${pct(hits.newest[j]!)}`).join(', ')],
    ['trending 1h', SOURCE_DEPTHS.trending.map((d, j) => `${d}: ${pct(hits.trending[j]!)}`).join(', ')],
    ['creators × per creator', SOURCE_DEPTHS.creators.map(([c, p], j) => `${c}×${p}: ${pct(hits.creators[j]!)}`).join(', ')],
  ];
  const mean = (f: Features, n: number): string =>
    `similarity ${(f.similarity / n).toFixed(3)}, velocity ${(f.velocity / n).toFixed(3)}, recency ${(f.recency / n).toFixed(3)}, affinity ${(f.affinity / n).toFixed(3)}`;
  const line =
    `${fmtInt(missedCount)} of ${fmtInt(total)} exhaustive top items (${pct(missedCount)}) are in no source at Full's budgets; ` +
    `their mean features: ${missedCount > 0 ? mean(missed, missedCount) : 'none'}; all top items': ${mean(all, total)}.`;
  return { rows, missed: line };
}
