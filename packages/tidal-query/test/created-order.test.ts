/**
 * The catalog's newest-first order and the per-creator lists are patched after item writes rather
 * than rebuilt: after random upserts (new createdAt, new creator, no creator), deletions and
 * re-upserts, read after one refresh or several, they equal the order sorted from scratch, and
 * small changes do not sort every item again.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Catalog } from '../src/catalog.js';
import { ItemsWriter } from '../src/items-table.js';
import { creatorListsOf } from '../src/profiles/creator-lists.js';
import type { QuerySchema } from '../src/types.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2025, 0, 6, 12, 0, 0);
const ITEMS = 400;
const SCHEMA: QuerySchema = { kinds: [], metadata: { creator: 'string' }, embeddingDims: 0, creatorField: 'creator' };
const CREATORS = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6'];

/** The lists written out: each creator's present items, by createdAt descending, ties by ordinal. */
function oracle(catalog: Catalog): Map<string, number[]> {
  const col = catalog.columns.get('creator');
  if (!col || col.type !== 'string') throw new Error('no creator column');
  const out = new Map<string, number[]>();
  const present: number[] = [];
  for (let o = 0; o < catalog.ids.length; o++) if (catalog.present[o] === 1) present.push(o);
  present.sort((a, b) => catalog.createdAt[b]! - catalog.createdAt[a]! || a - b);
  for (const o of present) {
    const code = col.codes[o]!;
    if (code < 0) continue;
    const name = col.values[code]!;
    out.set(name, [...(out.get(name) ?? []), o]);
  }
  return out;
}

function named(catalog: Catalog, lists: Map<number, Int32Array>): Map<string, number[]> {
  const col = catalog.columns.get('creator');
  if (!col || col.type !== 'string') throw new Error('no creator column');
  return new Map([...lists].map(([code, l]) => [col.values[code]!, [...l]]));
}

describe('created order', () => {
  it('is patched after item writes, and equals the order sorted from scratch', () => {
    const rand = mulberry32(0x5e7);
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const writer = new ItemsWriter(db);
    let version = 0;
    // createdAt from few distinct hours, so ties (broken by ordinal) are common.
    const write = (o: number): void => {
      const metadata = rand() < 0.9 ? { creator: CREATORS[Math.floor(rand() * CREATORS.length)] } : {};
      writer.upsert(
        { ordinal: o, id: `i${o}`, text: null, metadata, createdAt: NOW - Math.floor(rand() * 50) * HOUR, embedding: null },
        ++version,
        true,
      );
    };
    db.transaction(() => {
      for (let o = 0; o < ITEMS; o++) write(o);
    })();
    const catalog = new Catalog(db, SCHEMA);
    catalog.refresh();
    expect([...catalog.byCreatedDesc()]).toEqual([...catalog.sortByCreated()]);
    let lists = creatorListsOf(catalog, 'creator');
    const sortsAfterBuild = catalog.orderSorts;
    let patched = 0;
    for (let round = 0; round < 120; round++) {
      // Mostly a few changes (patched); now and then more than 1/8 of the items (rebuilt).
      const big = round % 40 === 39;
      const n = big ? ITEMS / 4 : 1 + Math.floor(rand() * 6);
      db.transaction(() => {
        for (let k = 0; k < n; k++) {
          // New ordinals too, past every earlier row.
          const o = rand() < 0.1 ? ITEMS + round * 8 + k : Math.floor(rand() * ITEMS);
          if (rand() < 0.25) writer.delete(o, ++version);
          else write(o);
        }
      })();
      catalog.refresh();
      // Read after one refresh or after several: the change log must span them.
      if (rand() < 0.4) continue;
      expect([...catalog.byCreatedDesc()], `round ${round}`).toEqual([...catalog.sortByCreated()]);
      const next = creatorListsOf(catalog, 'creator');
      expect(named(catalog, next), `round ${round}`).toEqual(oracle(catalog));
      if (next === lists) patched++;
      lists = next;
    }
    // Three rounds rebuild (the big ones, at most); every other read patched the cached order.
    expect(catalog.orderSorts - sortsAfterBuild).toBeLessThanOrEqual(3);
    expect(patched).toBeGreaterThan(40);
  });
});
