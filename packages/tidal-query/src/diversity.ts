import type { Catalog } from './catalog.js';
import type { Diversity } from './types.js';

export interface DiversityOutcome {
  /** Indices into the ranked input, in rank order. */
  picked: number[];
  /** The caps could not be met with the candidates at hand and were relaxed to fill the limit. */
  relaxed: boolean;
}

/**
 * Greedy diversity: walk the ranked candidates and keep one unless a `maxPer` field value is
 * already at its cap. If that leaves fewer than `limit`, the skipped candidates fill the rest in
 * rank order after the diverse picks (a warning says so): fewer results would be worse than a
 * relaxed cap.
 */
export function diversify(ranked: readonly number[], diversity: Diversity, limit: number, catalog: Catalog): DiversityOutcome {
  const fields = Object.entries(diversity.maxPer);
  const counts = fields.map(() => new Map<string | number, number>());
  const picked: number[] = [];
  const skipped: number[] = [];
  for (let i = 0; i < ranked.length && picked.length < limit; i++) {
    const o = ranked[i]!;
    let ok = true;
    for (let f = 0; f < fields.length; f++) {
      const v = catalog.fieldValue(fields[f]![0], o);
      if (v !== undefined && (counts[f]!.get(v) ?? 0) >= fields[f]![1]) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      skipped.push(i);
      continue;
    }
    for (let f = 0; f < fields.length; f++) {
      const v = catalog.fieldValue(fields[f]![0], o);
      if (v !== undefined) counts[f]!.set(v, (counts[f]!.get(v) ?? 0) + 1);
    }
    picked.push(i);
  }
  if (picked.length >= limit || skipped.length === 0) return { picked, relaxed: false };
  // The diverse picks keep the top; the relaxed fill comes after them, in rank order.
  const fill = skipped.slice(0, limit - picked.length);
  return { picked: [...picked, ...fill], relaxed: true };
}
