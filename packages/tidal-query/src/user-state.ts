import type { Catalog } from './catalog.js';
import type { Predicate } from './filter.js';
import type { UserQueryState } from './types.js';

/** Counts what a user's state dropped, for `explain.userFiltered`. */
export interface UserFilterCount {
  dropped: number;
}

/** The dictionary codes of `values` in the catalog's column `field` (values it never saw match nothing). */
function codesOf(catalog: Catalog, field: string, values: readonly string[]): Set<number> {
  const col = catalog.columns.get(field);
  const out = new Set<number>();
  if (!col || col.type !== 'string') return out;
  for (const v of values) {
    const c = col.dict.get(v);
    if (c !== undefined) out.add(c);
  }
  return out;
}

/**
 * The predicate a user's state puts in front of every candidate stage: hidden items and items of
 * blocked creators never pass, nor (with `unseen`) items in the seen set, and (with `following`)
 * only items of followed creators do. Null when the user's state keeps everything.
 *
 * It is combined with the request's filter before any top-k selection, so a page is filled with
 * items the user may see instead of coming back short, at every level: each level only changes
 * how many candidates are generated, never whether this runs.
 */
export function compileUserPredicate(
  user: UserQueryState | null | undefined,
  catalog: Catalog,
  creatorField: string | undefined,
  count: UserFilterCount,
): Predicate | null {
  if (!user) return null;
  const tests: Predicate[] = [];
  if (user.hidden.length > 0) {
    const hidden = new Set(user.hidden);
    tests.push((o) => !hidden.has(o));
  }
  if (user.seen !== null && user.seen.length > 0) {
    const seen = new Set(user.seen);
    tests.push((o) => !seen.has(o));
  }
  if (creatorField !== undefined) {
    const col = catalog.columns.get(creatorField);
    const codes = col && col.type === 'string' ? col : null;
    if (user.blocked.length > 0 && codes) {
      const blocked = codesOf(catalog, creatorField, user.blocked);
      if (blocked.size > 0) tests.push((o) => !blocked.has(codes.codes[o]!));
    }
    if (user.following !== null) {
      const followed = codesOf(catalog, creatorField, user.following);
      tests.push(codes && followed.size > 0 ? (o) => followed.has(codes.codes[o]!) : () => false);
    }
  } else if (user.following !== null) {
    tests.push(() => false);
  }
  if (tests.length === 0) return null;
  return (o) => {
    for (const t of tests) {
      if (!t(o)) {
        count.dropped++;
        return false;
      }
    }
    return true;
  };
}

/** 32-bit FNV-1a of a string: the user and item halves of the exploration order's hash. */
export function hashString(s: string, seed = 0x811c9dc5): number {
  let h = seed >>> 0;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A 32-bit mix of three numbers (murmur3's finaliser over a combination): the exploration order. */
export function mix3(a: number, b: number, c: number): number {
  let h = (a ^ Math.imul(b, 0x9e3779b1) ^ Math.imul(c, 0x85ebca6b)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
