import type { Catalog } from './catalog.js';
import type { FieldCondition, Filter, RangeCondition } from './types.js';

export type Predicate = (ordinal: number) => boolean;

const ALWAYS: Predicate = () => true;

/**
 * Compiles a validated filter against a catalog into one predicate on ordinals. String equality
 * and membership compare dictionary codes, so the per-item cost is an array read and an integer
 * compare per condition. A value the catalog has never seen matches nothing.
 */
export function compileFilter(filter: Filter | null, catalog: Catalog): Predicate {
  if (!filter) return ALWAYS;
  const tests: Predicate[] = [];
  for (const [field, cond] of Object.entries(filter)) tests.push(compileCondition(field, cond, catalog));
  if (tests.length === 0) return ALWAYS;
  if (tests.length === 1) return tests[0]!;
  return (o) => {
    for (const t of tests) if (!t(o)) return false;
    return true;
  };
}

function compileCondition(field: string, cond: FieldCondition, catalog: Catalog): Predicate {
  if (field === 'createdAt') {
    return rangeOrEquals(cond, catalog.createdAt);
  }
  const col = catalog.columns.get(field);
  if (!col) return () => false;
  if (col.type === 'string') {
    if (typeof cond === 'object' && 'in' in cond) {
      const codes = new Set<number>();
      for (const v of cond.in) {
        const c = col.dict.get(String(v));
        if (c !== undefined) codes.add(c);
      }
      if (codes.size === 0) return () => false;
      if (codes.size === 1) {
        const only = [...codes][0]!;
        return (o) => col.codes[o] === only;
      }
      return (o) => codes.has(col.codes[o]!);
    }
    // Validated filters give a string field a string or `in`; a range on one matches nothing.
    if (typeof cond === 'object') return () => false;
    const code = col.dict.get(String(cond));
    if (code === undefined) return () => false;
    return (o) => col.codes[o] === code;
  }
  return rangeOrEquals(cond, col.values);
}

// Compiled per query: the catalog's arrays are not replaced while a query runs.
function rangeOrEquals(cond: FieldCondition, values: Float64Array): Predicate {
  if (typeof cond === 'number') return (o) => values[o] === cond;
  if (typeof cond === 'object' && 'in' in cond) {
    const set = new Set(cond.in.map(Number));
    return (o) => set.has(values[o]!);
  }
  const r = cond as RangeCondition;
  const lo = r.gte ?? r.gt ?? -Infinity;
  const loStrict = r.gte === undefined && r.gt !== undefined;
  const hi = r.lte ?? r.lt ?? Infinity;
  const hiStrict = r.lte === undefined && r.lt !== undefined;
  return (o) => {
    const v = values[o]!;
    if (Number.isNaN(v)) return false;
    if (loStrict ? v <= lo : v < lo) return false;
    if (hiStrict ? v >= hi : v > hi) return false;
    return true;
  };
}
