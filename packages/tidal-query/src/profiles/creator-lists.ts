import { INCREMENTAL_SHARE, markOrdinals, mergeCreated, sortCreated, type Catalog } from '../catalog.js';

export interface CreatorLists {
  version: number;
  field: string;
  /** Per creator code, its present items newest first (the catalog's created order). */
  lists: Map<number, Int32Array>;
  /** Per ordinal, the creator code whose list holds it (-1: none). */
  codeOf: Int32Array;
}

const creatorLists = new WeakMap<Catalog, CreatorLists>();

/**
 * Each creator's present items, newest first. Cached per catalog; after item writes only the
 * lists of the creators whose items changed are merged again (O(their items + changed)), and a
 * change larger than 1/{@link INCREMENTAL_SHARE} of the items rebuilds them all (O(items)).
 */
export function creatorListsOf(catalog: Catalog, field: string): Map<number, Int32Array> {
  const cached = creatorLists.get(catalog);
  if (cached && cached.version === catalog.version && cached.field === field) return cached.lists;
  const col = catalog.columns.get(field);
  const codes = col && col.type === 'string' ? col.codes : null;
  const changed = cached && cached.field === field ? catalog.changedSince(cached.version) : null;
  const next =
    cached && changed !== null && codes !== null && changed.length <= catalog.presentCount / INCREMENTAL_SHARE
      ? patchCreatorLists(cached, catalog, codes, changed)
      : (catalog.derivedBuilds++, buildCreatorLists(catalog, field));
  next.version = catalog.version;
  creatorLists.set(catalog, next);
  return next.lists;
}

/** Bytes of `catalog`'s cached creator lists (0 when none were built). */
export function creatorListBytes(catalog: Catalog): number {
  const cached = creatorLists.get(catalog);
  if (!cached) return 0;
  let bytes = cached.codeOf.byteLength;
  for (const l of cached.lists.values()) bytes += l.byteLength;
  return bytes;
}

function codeNow(catalog: Catalog, codes: Int32Array, o: number): number {
  return catalog.present[o] === 1 ? (codes[o] ?? -1) : -1;
}

/** Every creator's list built from scratch (O(items)); {@link creatorListsOf} caches and patches them. */
export function buildCreatorLists(catalog: Catalog, field: string): CreatorLists {
  const col = catalog.columns.get(field);
  const codes = col && col.type === 'string' ? col.codes : null;
  const grouped = new Map<number, number[]>();
  const codeOf = new Int32Array(catalog.present.length).fill(-1);
  if (codes !== null) {
    for (const o of catalog.byCreatedDesc()) {
      const code = codes[o]!;
      if (code < 0) continue;
      codeOf[o] = code;
      let l = grouped.get(code);
      if (!l) grouped.set(code, (l = []));
      l.push(o);
    }
  }
  const lists = new Map([...grouped].map(([c, l]) => [c, Int32Array.from(l)]));
  return { version: catalog.version, field, lists, codeOf };
}

function patchCreatorLists(cached: CreatorLists, catalog: Catalog, codes: Int32Array, changed: Int32Array): CreatorLists {
  let codeOf = cached.codeOf;
  if (codeOf.length < catalog.present.length) {
    const grown = new Int32Array(catalog.present.length).fill(-1);
    grown.set(codeOf);
    codeOf = grown;
  }
  // The creators whose lists lose or gain an item: each list is merged once with every change.
  const adds = new Map<number, number[]>();
  for (const o of changed) {
    if (codeOf[o]! >= 0 && !adds.has(codeOf[o]!)) adds.set(codeOf[o]!, []);
    const now = codeNow(catalog, codes, o);
    if (now < 0) continue;
    const l = adds.get(now);
    if (l) l.push(o);
    else adds.set(now, [o]);
  }
  const drop = markOrdinals(changed, catalog.present.length);
  for (const [c, added] of adds) {
    const merged = mergeCreated(
      cached.lists.get(c) ?? EMPTY,
      drop,
      sortCreated(Int32Array.from(added), catalog.createdAt),
      catalog.createdAt,
    );
    if (merged.length === 0) cached.lists.delete(c);
    else cached.lists.set(c, merged);
  }
  for (const o of changed) codeOf[o] = codeNow(catalog, codes, o);
  return { version: catalog.version, field: cached.field, lists: cached.lists, codeOf };
}

const EMPTY = new Int32Array(0);
