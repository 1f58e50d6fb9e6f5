import type Database from 'better-sqlite3';
import { levelPlan, type DegradationLevel } from 'tidal-load';
import { compileFilter, type Predicate } from './filter.js';
import { popularity, type QueryContext } from './context.js';
import { selectAndHydrate } from './tail.js';
import type { Explain, SearchHit, SearchTask, WorkerSearchResult } from './types.js';

/** Reciprocal rank fusion constant (Cormack et al.); ranks are 1-based. */
export const RRF_K = 60;

/**
 * BM25 candidates per query at Full (halved from ReducedCandidates). 200 is 20× the default limit
 * of 10: room for the filter, the signal boost and diversity to reorder, while the cost stays that
 * of SQLite's own top-N sort.
 */
export const BM25_CANDIDATES = 200;

const MAX_TERMS = 32;

/**
 * The FTS5 MATCH expression for free text: each distinct word double-quoted (so no FTS5 syntax in
 * user text can do anything) and joined with OR, ranked by bm25(). Returns null when the text has
 * no word at all.
 */
export function ftsQuery(text: string): string | null {
  const words = text.toLowerCase().match(/[\p{L}\p{N}]+/gu);
  if (!words) return null;
  const unique = [...new Set(words)].slice(0, MAX_TERMS);
  return unique.map((w) => `"${w}"`).join(' OR ');
}

/**
 * The search pipeline, eight stages: mode → BM25 candidates (FTS5 bm25()) → ANN candidates → RRF
 * fusion → filter → signal boost → diversity → limit.
 */
export class SearchExecutor {
  readonly #ctx: QueryContext;
  readonly #ftsLimited: Database.Statement;
  readonly #ftsAll: Database.Statement;

  constructor(ctx: QueryContext) {
    this.#ctx = ctx;
    this.#ftsLimited = ctx.db.prepare(
      'SELECT rowid AS o, bm25(items_fts) AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s LIMIT ?',
    );
    this.#ftsAll = ctx.db.prepare('SELECT rowid AS o, bm25(items_fts) AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s');
    this.#ftsLimited.raw(true);
    this.#ftsAll.raw(true);
  }

  run(task: SearchTask, level: DegradationLevel, nowMs: number): Omit<WorkerSearchResult, 'serviceMs'> {
    const ctx = this.#ctx;
    const plan = levelPlan(level);
    const mode = task.text !== null && task.vector !== null ? 'hybrid' : task.text !== null ? 'text' : 'vector';
    const useDiversity = task.diversity !== null && plan.diversity;
    const filter = compileFilter(task.filter, ctx.catalog);
    const present = ctx.catalog.present;
    const pass: Predicate = task.filter ? (o) => present[o] === 1 && filter(o) : (o) => present[o] === 1;
    const warnings: string[] = [];
    const explain: Explain = {
      annTopK: null,
      bm25Limit: null,
      windows: plan.coarseAggregates ? 'all-time' : 'exact',
      velocityWindow: plan.coarseAggregates ? '24h' : '1h',
      diversityApplied: useDiversity,
      candidates: 0,
      afterFilter: 0,
    };

    // Stage 2: BM25 candidates, filtered as they stream so a selective filter still yields enough.
    const bm25 = new Map<number, { score: number; rank: number }>();
    if (task.text !== null) {
      // With nothing after it to reorder the hits (no vector to fuse, no filter, no boost, no
      // diversity at this level), BM25 order is the final order: fetch only `limit` rows, which
      // is the same FTS5 query a caller would write by hand.
      const reordered = mode !== 'text' || task.filter !== null || task.boost > 0 || useDiversity;
      const depth = Math.max(1, Math.floor(BM25_CANDIDATES / plan.bm25Divisor));
      const limit = reordered ? depth : Math.min(depth, task.limit);
      explain.bm25Limit = limit;
      const match = ftsQuery(task.text);
      if (match === null) {
        warnings.push('the text has no searchable word');
      } else {
        const rows = (task.filter ? this.#ftsAll.iterate(match) : this.#ftsLimited.iterate(match, limit)) as IterableIterator<[number, number]>;
        for (const [o, s] of rows) {
          explain.candidates++;
          if (!pass(o)) continue;
          bm25.set(o, { score: s, rank: bm25.size + 1 });
          if (bm25.size >= limit) break;
        }
      }
    }

    // Stage 3: ANN candidates.
    const ann = new Map<number, { similarity: number; rank: number }>();
    if (task.vector !== null) {
      explain.annTopK = plan.annTopK;
      if (ctx.ann) {
        const found = ctx.ann.search(task.vector, plan.annTopK);
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
      const boosted = task.boost > 0 ? s * (1 + task.boost * Math.log1p(popularity(ctx, o, nowMs))) : s;
      entries.push([o, boosted]);
    }
    entries.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const ranked = entries.map((e) => e[0]);
    const scores = entries.map((e) => e[1]);

    // Stage 7–8: diversity, limit.
    const diversity = useDiversity ? task.diversity : null;
    const hits = selectAndHydrate(ctx, ranked, scores, { diversity, limit: task.limit, nowMs, coarse: plan.coarseAggregates, warnings }, (base, o) => {
      const hit: SearchHit = { ...base };
      const b = bm25.get(o);
      if (b) hit.bm25 = b.score;
      const a = ann.get(o);
      if (a) hit.semantic = a.similarity;
      return hit;
    });
    return { hits, warnings, explain, mode };
  }
}
