/**
 * A query worker's warm sends itself tasks with the keys of a real one, in the same order, so
 * that the deserialized warm task has the shape V8 will see in real queries (tidal-query's
 * warm-paths.ts). Here: the tasks this thread writes have exactly those keys, in that order, for
 * every retrieve profile and for a search.
 */
import { describe, expect, it } from 'vitest';
import { RETRIEVE_TASK_KEYS, SEARCH_TASK_KEYS } from 'tidal-query';
import { prepareRetrieve, prepareSearch, type ReadDeps } from '../src/read-requests.js';
import type { RetrieveRequest } from '../src/types.js';

const deps = {
  schema: {
    kinds: [{ name: 'view', halfLifeMs: 3_600_000, windows: ['1h', '24h'], velocity: true }],
    metadata: { creator: 'string' },
    embeddingDims: 2,
    creatorField: 'creator',
  },
  defaultWindow: '1h',
  cursors: null,
  chains: null,
  exclude: () => null,
  userState: () => null,
  relatedTask: () => ({ item: 0, n: 0, at: 0, partners: new Int32Array(0), scores: new Float32Array(0), lambda: 0 }),
} as unknown as ReadDeps;

describe('the keys of a query task', () => {
  const requests: RetrieveRequest[] = [
    { profile: 'trending' },
    { profile: 'popular', context: [1, 0] },
    { profile: 'new', limit: 5 },
    { profile: 'hot', diversity: { maxPer: { creator: 2 } } },
    { profile: 'rising', window: '24h' },
    { profile: 'top' },
    { profile: 'following', user: 'u', order: 'newest' },
    { profile: 'for_you', user: 'u', explore: 0 },
    { profile: 'related', item: 'a' },
  ];
  for (const req of requests) {
    it(`retrieve ${req.profile}: ${RETRIEVE_TASK_KEYS.join(', ')}`, () => {
      expect(Object.keys(prepareRetrieve(req, deps).task)).toEqual(RETRIEVE_TASK_KEYS);
    });
  }

  it(`search: ${SEARCH_TASK_KEYS.join(', ')}`, () => {
    expect(Object.keys(prepareSearch({ text: 'jazz' }, deps).task)).toEqual(SEARCH_TASK_KEYS);
    expect(Object.keys(prepareSearch({ text: 'jazz', vector: [0, 1] }, deps).task)).toEqual(SEARCH_TASK_KEYS);
  });
});
