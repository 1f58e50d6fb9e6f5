import { compileFilter, type Predicate } from './filter.js';
import { popularity, type QueryContext } from './context.js';
import { FULL_PLAN, LEVEL_PLANS, type LevelPlan } from './plan.js';
import { selectAndHydrate } from './tail.js';
import { queryTerms } from './text/tokenizer.js';
import { searchTopK } from './text/top-k.js';
import { compileUserPredicate } from './user-state.js';
import type { Explain, SearchHit, SearchTask, WorkerSearchResult } from './types.js';

/** Reciprocal rank fusion constant (Cormack et al.); ranks are 1-based. */
export const RRF_K = 60;

/** BM25 candidates per query at Full (see `TextPlan.bm25Depth`). */
export const BM25_CANDIDATES = FULL_PLAN.text.bm25Depth;

/** The smallest postings budget any plan gives a text query (see `TextPlan.postingsBudget`). */
export const NO_DIVERSITY_POSTINGS_BUDGET = Math.min(...LEVEL_PLANS.map((p) => p.text.postingsBudget));

const MAX_TERMS = 32;

/**
 * The FTS5 MATCH expression for free text: each distinct term (split and folded as FTS5's
 * unicode61 tokenizer does, so each quoted string is exactly one FTS5 term) double-quoted, so no
 * FTS5 syntax in user text can do anything, and joined with OR, ranked by bm25(). Returns null when
 * the text has no word at all. The search ranks with the in-memory text index; this expression is
 * what the same query is on the FTS5 table (the reference the index is tested against).
 */
export function ftsQuery(text: string): string | null {
  const terms = queryTerms(text, MAX_TERMS);
  if (terms.length === 0) return null;
  return terms.map((w) => `"${w}"`).join(' OR ');
}

/**
 * The search pipeline, eight stages: mode → BM25 candidates (the worker's text index, block-max
 * WAND top-k, scored as FTS5's bm25()) → ANN candidates → RRF fusion → filter → signal boost →
 * diversity → limit.
 */
export class SearchExecutor {
  readonly #ctx: QueryContext;

  constructor(ctx: QueryContext) {
    this.#ctx = ctx;
  }

  /** Runs a search; the hits' ordinals are pushed onto `picked` when it is given. */
  run(task: SearchTask, plan: LevelPlan, nowMs: number, picked?: number[]): Omit<WorkerSearchResult, 'serviceMs'> {
    const ctx = this.#ctx;
    const builds = ctx.catalog.derivedBuilds + ctx.catalog.text.summaries;
    const mode = task.text !== null && task.vector !== null ? 'hybrid' : task.text !== null ? 'text' : 'vector';
    const useDiversity = task.diversity !== null && plan.diversity.enabled;
    const filter = compileFilter(task.filter, ctx.catalog);
    const present = ctx.catalog.present;
    const userCount = { dropped: 0 };
    const user = compileUserPredicate(task.user, ctx.catalog, ctx.schema.creatorField, userCount);
    const base: Predicate = task.filter ? (o) => present[o] === 1 && filter(o) : (o) => present[o] === 1;
    // A user's hidden items and blocked creators are dropped inside each candidate stage (the BM25
    // top-k takes it as its accept test), so the page is filled with items the user may see.
    const pass: Predicate = user ? (o) => base(o) && user(o) : base;
    const filtered = task.filter !== null || user !== null;
    const warnings: string[] = [];
    const explain: Explain = {
      annTopK: null,
      bm25Limit: null,
      windows: plan.windows.coarse ? 'all-time' : 'exact',
      velocityWindow: plan.windows.coarse ? '24h' : '1h',
      diversityApplied: useDiversity,
      candidates: 0,
      afterFilter: 0,
    };

    // Stage 2: BM25 candidates: the top `limit` by BM25 among the items the filter keeps.
    const bm25 = new Map<number, { score: number; rank: number }>();
    if (task.text !== null) {
      // With nothing after it to reorder the hits (no vector to fuse, no boost, no diversity at
      // this level), BM25 order is the final order: fetch only `limit` rows. A filter (and the
      // user's predicate) does not reorder: it is the top-k's accept test, so the top `limit` it
      // returns are already the filtered top `limit`. Fetching the level's depth instead cost a
      // filtered query ~depth / selectivity documents tested before θ could rise (at a 5 % filter,
      // ~4 000 for depth 200), and no level could cut that.
      const reordered = mode !== 'text' || task.boost > 0 || useDiversity;
      const depth = Math.max(1, plan.text.bm25Depth);
      const limit = reordered ? depth : Math.min(depth, task.limit);
      explain.bm25Limit = limit;
      const terms = queryTerms(task.text, MAX_TERMS);
      if (terms.length === 0) {
        warnings.push('the text has no searchable word');
      } else {
        const found = searchTopK(ctx.catalog.text, terms, limit, {
          ...(filtered ? { accept: pass } : {}),
          ...(Number.isFinite(plan.text.postingsBudget) ? { postingsBudget: plan.text.postingsBudget } : {}),
        });
        explain.candidates += found.ordinals.length + found.filtered;
        explain.postingsScored = found.postingsScored;
        explain.postingsSkipped = found.postingsSkipped;
        explain.blocksSkipped = found.blocksSkipped;
        explain.textBudgetExhausted = found.budgetExhausted;
        // FTS5 reports bm25() negated (lower is better); hits keep that convention.
        for (let i = 0; i < found.ordinals.length; i++) bm25.set(found.ordinals[i]!, { score: -found.scores[i]!, rank: i + 1 });
      }
    }

    // Stage 3: ANN candidates.
    const ann = new Map<number, { similarity: number; rank: number }>();
    if (task.vector !== null) {
      explain.annTopK = plan.ann.topK;
      if (ctx.ann) {
        // The search breadth follows the level's top-k below 128 too.
        const found = ctx.ann.search(task.vector, plan.ann.topK, plan.ann.topK);
        explain.vectorSearch = ctx.ann.method;
        explain.candidates += found.keys.length;
        for (let i = 0; i < found.keys.length; i++) {
          const o = found.keys[i]!;
          if (!pass(o)) continue;
          ann.set(o, { similarity: found.similarity[i]!, rank: ann.size + 1 });
        }
      } else {
        warnings.push('no item has an embedding yet: the vector found no candidates');
      }
    }

    // Stage 4–6: fusion (stage 5, the filter, already ran on each candidate stream).
    const fused = new Map<number, number>();
    if (mode === 'hybrid') {
      for (const [o, b] of bm25) fused.set(o, 1 / (RRF_K + b.rank));
      for (const [o, a] of ann) fused.set(o, (fused.get(o) ?? 0) + 1 / (RRF_K + a.rank));
    } else if (mode === 'text') {
      for (const [o, b] of bm25) fused.set(o, -b.score);
    } else {
      for (const [o, a] of ann) fused.set(o, a.similarity);
    }
    explain.afterFilter = fused.size;

    // Stage 6: signal boost, multiplicative so it means the same for every mode's score scale.
    const entries: [number, number][] = [];
    for (const [o, s] of fused) {
      // Negative signal weights can make the popularity negative: it earns no boost rather than a
      // NaN (log1p below −1) or a sign flip.
      const boosted = task.boost > 0 ? s * (1 + task.boost * Math.log1p(Math.max(0, popularity(ctx, o, nowMs)))) : s;
      entries.push([o, boosted]);
    }
    entries.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const ranked = entries.map((e) => e[0]);
    const scores = entries.map((e) => e[1]);

    // Stage 7–8: diversity, limit.
    const diversity = useDiversity ? task.diversity : null;
    // A search's hits are read afresh at every level: they seldom come back within the second (4–6 %
    // of them under the serve bench's personal mix), where a kept copy costs more than it saves.
    const hits = selectAndHydrate(
      ctx,
      ranked,
      scores,
      { diversity, limit: task.limit, nowMs, coarse: plan.windows.coarse, warnings },
      (base, o) => {
        const hit: SearchHit = { ...base };
        picked?.push(o);
        const b = bm25.get(o);
        if (b) hit.bm25 = b.score;
        const a = ann.get(o);
        if (a) hit.semantic = a.similarity;
        return hit;
      },
    );
    if (task.user) explain.userFiltered = userCount.dropped;
    explain.lazyBuilds = ctx.catalog.derivedBuilds + ctx.catalog.text.summaries - builds;
    return { hits, warnings, explain, mode };
  }
}
