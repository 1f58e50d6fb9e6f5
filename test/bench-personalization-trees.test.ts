/**
 * `bench:personalization --baseline`'s comparison (bench/src/personalization-trees.ts) with this
 * tree on both sides, on a tiny corpus: every query type is timed on both trees over the same
 * requests, and what both trees answer alike (the followed creators' newest, the co-engaged items)
 * agrees in full. Counts and agreement only, never times.
 */
import { describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { personalizationSchema } from '../bench/src/corpus.js';
import type { Baseline, Report } from '../bench/src/harness/index.js';
import { compareTrees } from '../bench/src/personalization-trees.js';

interface Row {
  label: string;
  before: { n: number };
  after: { n: number };
  agreement: number;
}

describe('bench:personalization --baseline', () => {
  it('times each personalized query type on both trees over the same requests', async () => {
    const kept = new Map<string, unknown>();
    const tables: { head: readonly string[]; rows: readonly (readonly string[])[] }[] = [];
    const report = {
      line: () => {},
      table: (_title: string, head: readonly string[], rows: readonly (readonly string[])[]) => tables.push({ head, rows }),
      set: (k: string, v: unknown) => kept.set(k, v),
    } as unknown as Report;
    const baseline: Baseline = { dir: '/same', commit: 'same', load: async <T>() => ({}) as T };
    await compareTrees(
      baseline,
      TidalDb,
      TidalDb,
      { items: 400, users: 40, history: 5, queries: 30, dims: 16, schema: personalizationSchema(16) },
      report,
    );
    const result = kept.get('baseline') as { types: Row[] };
    expect(result.types.map((r) => r.label)).toEqual(['for_you, Full', 'for_you, NoDiversity', 'for_you + unseen', 'following', 'related']);
    for (const r of result.types) {
      // One block of 30 timed per side (the warm-up block is not counted).
      expect([r.before.n, r.after.n]).toEqual([30, 30]);
    }
    const byLabel = new Map(result.types.map((r) => [r.label, r]));
    expect(byLabel.get('following')!.agreement).toBe(1);
    expect(byLabel.get('related')!.agreement).toBe(1);
    expect(tables).toHaveLength(1);
    expect(tables[0]!.rows).toHaveLength(5);
  }, 120_000);
});
