import type { Predicate } from '../filter.js';
import type { Explain, RetrieveTask } from '../types.js';
import type { FeedRanking } from './feed-budget.js';

/**
 * `related`: the item's co-engagement partners (never the item itself), by their co-engagement
 * score decayed to the query's clock; ties to the lower ordinal. The list is at most
 * the index's per-item bound long, so no level has anything to cut.
 */
export function related(task: RetrieveTask, pass: Predicate, nowMs: number, explain: Explain): FeedRanking {
  const r = task.related!;
  // At most 32 entries, each inserted in place (best first, ties by ordinal): no index array,
  // comparator closure or copies, which cost more than the comparisons at this size.
  const ordinals: number[] = [];
  const values: number[] = [];
  let candidates = 0;
  // Every score refers to the list's time: one decay for the list.
  const decay = Math.exp(-r.lambda * Math.max(0, nowMs - r.at));
  const p = r.partners;
  const s = r.scores;
  for (let i = 0; i < r.n; i++) {
    const o = p[i]!;
    if (o === r.item) continue;
    candidates++;
    if (!pass(o)) continue;
    const v = s[i]! * decay;
    let j = ordinals.length;
    ordinals.push(o);
    values.push(v);
    while (j > 0 && (values[j - 1]! < v || (values[j - 1] === v && ordinals[j - 1]! > o))) {
      ordinals[j] = ordinals[j - 1]!;
      values[j] = values[j - 1]!;
      j--;
    }
    ordinals[j] = o;
    values[j] = v;
  }
  explain.candidates = candidates;
  explain.afterFilter = ordinals.length;
  return { ranked: ordinals, scores: values };
}
