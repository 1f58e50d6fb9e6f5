import { levelPlan, type DegradationLevel } from 'tidal-load';
import { compileFilter, type Predicate } from './filter.js';
import { popularity, velocityOf, type QueryContext } from './context.js';
import { selectAndHydrate } from './tail.js';
import { TopK } from './topk.js';
import type { Explain, RetrieveTask, RetrievedItem, VelocityWindow, WorkerRetrieveResult } from './types.js';

const WINDOW_MS: Record<VelocityWindow, number> = { '1h': 3_600_000, '24h': 86_400_000, '7d': 604_800_000 };

/** With diversity on, this many times the limit are ranked so the greedy pass has room to skip. */
const DIVERSITY_OVERFETCH = 5;

/**
 * The retrieve pipeline, six stages: candidates (ANN around a context vector, the signal index, or
 * the creation-time order) → filter → load aggregates → score by profile → diversity → limit.
 * The degradation level is decided by the caller at entry and only read here.
 */
export class RetrieveExecutor {
  readonly #ctx: QueryContext;

  constructor(ctx: QueryContext) {
    this.#ctx = ctx;
  }

  run(task: RetrieveTask, level: DegradationLevel, nowMs: number): Omit<WorkerRetrieveResult, 'serviceMs'> {
    const ctx = this.#ctx;
    const plan = levelPlan(level);
    const coarse = plan.coarseAggregates;
    const velocityWindow: VelocityWindow = coarse ? '24h' : task.window;
    const useDiversity = task.diversity !== null && plan.diversity;
    const want = useDiversity ? task.limit * DIVERSITY_OVERFETCH : task.limit;
    const pass = this.#admit(compileFilter(task.filter, ctx.catalog), task.exclude);
    const explain: Explain = {
      annTopK: null,
      bm25Limit: null,
      windows: coarse ? 'all-time' : 'exact',
      velocityWindow,
      diversityApplied: useDiversity,
      candidates: 0,
      afterFilter: 0,
    };
    const warnings: string[] = [];

    let ranked: number[];
    let scores: number[];
    let similarity: Map<number, number> | null = null;
    if (task.context) {
      ({ ranked, scores, similarity } = this.#aroundContext(task, plan.annTopK, pass, velocityWindow, coarse, nowMs, explain));
      if (!ctx.ann) warnings.push('no item has an embedding yet: the context vector found no candidates');
    } else if (task.profile === 'new') {
      ({ ranked, scores } = this.#newest(want, pass, explain));
    } else {
      ({ ranked, scores } = this.#fromSignals(task, want, pass, velocityWindow, coarse, nowMs, explain));
    }

    const diversity = useDiversity ? task.diversity : null;
    const items = selectAndHydrate(ctx, ranked, scores, { diversity, limit: task.limit, nowMs, coarse, warnings }, (base, o) => {
      const item: RetrievedItem = { ...base, createdAt: ctx.catalog.createdAt[o]! };
      const sim = similarity?.get(o);
      if (sim !== undefined) item.similarity = sim;
      return item;
    });
    return { items, warnings, explain };
  }

  #admit(filter: Predicate, exclude: Int32Array | null): Predicate {
    const present = this.#ctx.catalog.present;
    if (!exclude || exclude.length === 0) return (o) => present[o] === 1 && filter(o);
    const skip = new Set(exclude);
    return (o) => present[o] === 1 && !skip.has(o) && filter(o);
  }

  #score(profile: RetrieveTask['profile'], o: number, window: VelocityWindow, coarse: boolean, nowMs: number): [number, number] {
    const ctx = this.#ctx;
    if (profile === 'new') return [ctx.catalog.createdAt[o]!, 0];
    const pop = popularity(ctx, o, nowMs);
    if (profile === 'popular') return [pop, 0];
    return [velocityOf(ctx, o, window, nowMs, coarse), pop];
  }

  #aroundContext(
    task: RetrieveTask,
    topK: number,
    pass: Predicate,
    window: VelocityWindow,
    coarse: boolean,
    nowMs: number,
    explain: Explain,
  ): { ranked: number[]; scores: number[]; similarity: Map<number, number> } {
    explain.annTopK = topK;
    const similarity = new Map<number, number>();
    const ann = this.#ctx.ann;
    if (!ann) return { ranked: [], scores: [], similarity };
    const found = ann.search(task.context!, topK);
    explain.candidates = found.keys.length;
    const top = new TopK(Math.max(found.keys.length, 1));
    for (let i = 0; i < found.keys.length; i++) {
      const o = found.keys[i]!;
      if (!pass(o)) continue;
      explain.afterFilter++;
      similarity.set(o, found.similarity[i]!);
      const [p, s] = this.#score(task.profile, o, window, coarse, nowMs);
      // Items the profile cannot tell apart stay in similarity order.
      top.push(o, p, s === 0 ? found.similarity[i]! : s);
    }
    const { ordinals, primary } = top.sorted();
    return { ranked: ordinals, scores: primary, similarity };
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
    coarse: boolean,
    nowMs: number,
    explain: Explain,
  ): { ranked: number[]; scores: number[] } {
    const { store, schema } = this.#ctx;
    const kinds = schema.kinds;
    const trending = task.profile === 'trending';
    const top = new TopK(want);
    const used = store.slotsUsed();
    // One kind (the common case) needs no per-item accumulation: each slot is one item.
    const considered = trending ? kinds.filter((k) => k.velocity).length : kinds.length;
    if (considered === 1) {
      const only = trending ? kinds.findIndex((k) => k.velocity) : 0;
      const horizon = nowMs - WINDOW_MS[window];
      for (let s = 0; s < used; s++) {
        if (store.slotKind(s) !== only) continue;
        if (!store.hasEvents(s)) continue;
        explain.candidates++;
        const o = store.slotOrdinal(s);
        if (!pass(o)) continue;
        explain.afterFilter++;
        const decayed = store.decayedScore(s, nowMs);
        if (!trending) top.push(o, decayed, 0);
        else top.push(o, store.newestAt(s) < horizon ? 0 : store.velocity(s, window, nowMs, coarse), decayed);
      }
    } else {
      const seen = new Set<number>();
      for (let s = 0; s < used; s++) {
        const k = store.slotKind(s);
        if (!store.hasEvents(s)) continue;
        if (trending && !kinds[k]!.velocity) continue;
        const o = store.slotOrdinal(s);
        if (seen.has(o)) continue;
        seen.add(o);
        explain.candidates++;
        if (!pass(o)) continue;
        explain.afterFilter++;
        const [p, sec] = this.#score(task.profile, o, window, coarse, nowMs);
        top.push(o, p, sec);
      }
    }
    const { ordinals, primary } = top.sorted();
    return { ranked: ordinals, scores: primary };
  }
}
