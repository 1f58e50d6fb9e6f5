import type { Explain } from '../types.js';
import type { TopK } from '../topk.js';

/** Ordinals best first and their scores, index for index. */
export interface FeedRanking {
  ranked: number[];
  scores: number[];
}

/** Counts a walk against the plan's candidate budget (`plan.feeds.candidateBudget`). */
export class Budget {
  visited = 0;
  exhausted = false;
  readonly #limit: number;

  constructor(limit: number | null) {
    this.#limit = limit ?? Infinity;
  }

  /** Takes one visit; false (and `exhausted`) when none is left. */
  take(): boolean {
    if (this.visited >= this.#limit) {
      this.exhausted = true;
      return false;
    }
    this.visited++;
    return true;
  }
}

export function finish(top: TopK, budget: Budget, passed: number, limit: number | null, explain: Explain): FeedRanking {
  explain.candidates = budget.visited;
  explain.afterFilter = passed;
  explain.candidateBudget = limit;
  explain.budgetExhausted = budget.exhausted;
  const { ordinals, primary } = top.sorted();
  return { ranked: ordinals, scores: primary };
}
