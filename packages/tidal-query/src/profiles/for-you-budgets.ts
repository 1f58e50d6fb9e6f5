/**
 * How many candidates a warm user's `for_you` takes from each source at one level. The score
 * rewards recency, creator affinity and velocity as well as similarity, so the best items are not
 * all near the preference vector: at 100 000 items, of the top 10 over the 500 nearest neighbours
 * that lie outside the 200 nearest, 82 % are under two days old and 76 % are by a creator the user
 * has affinity with. Sixty-four neighbours plus these cheap sources find them for less than a
 * wider ANN search (whose cost grows with its breadth: 500 neighbours 1.4 ms, 200 0.5 ms).
 */
export interface ForYouBudget {
  /** ANN neighbours of the preference vector. */
  readonly ann: number;
  /** The creators the user has the largest positive affinity with, whose newest items are taken. */
  readonly creators: number;
  /** Newest items passing the query's predicate, per such creator. */
  readonly perCreator: number;
  /** The newest items passing the query's predicate. */
  readonly newest: number;
  /** The first items of `trending` over the query's window passing the predicate. */
  readonly trending: number;
  /** Active slots per velocity kind the trending source may read. */
  readonly trendingSlots: number;
}

/**
 * Per level (indexed by `DegradationLevel`), the candidate budget of a warm user's feed; each level
 * takes fewer than the one above from every source. Chosen at 100 000 items and 10 000 users
 * (`bench:personalization`, docs/BENCHMARKS.md), against the exhaustive ranking (every item scored
 * by the same mix, velocity over the largest of all items): the depth per affinity creator weighs
 * most (16 creators × 16 items: overlap@10 0.96; × 8: 0.78; × 4: 0.53), the ANN's breadth little,
 * and trending is what puts the largest velocity among the candidates (without it 0.85). The ANN
 * search is each level's largest cost and follows its breadth (each breadth has a view of its own,
 * see `NARROW_BREADTHS` in ann.ts): over 300 users, Full with 128 neighbours overlapped the
 * exhaustive ranking 0.959 at 1.55 ms in the worker, with 64 0.950 at 1.00 ms, with 48 0.947 and
 * with 32 0.944 at 0.97 ms. So Full asks for 64, and each level below for fewer.
 */
export const FOR_YOU_BUDGETS: readonly ForYouBudget[] = Object.freeze([
  Object.freeze({ ann: 64, creators: 16, perCreator: 16, newest: 50, trending: 50, trendingSlots: 512 }),
  Object.freeze({ ann: 48, creators: 16, perCreator: 12, newest: 40, trending: 30, trendingSlots: 256 }),
  Object.freeze({ ann: 40, creators: 12, perCreator: 10, newest: 30, trending: 25, trendingSlots: 256 }),
  Object.freeze({ ann: 32, creators: 12, perCreator: 8, newest: 20, trending: 20, trendingSlots: 128 }),
]);
