/**
 * The catalog keeps each ordinal's id hash once asked for (`for_you`'s exploration order reads it
 * per candidate): it is always the hash of the id the ordinal holds now: asked before the ordinal
 * had an item and again after, past the arrays' first size, and after the catalog takes another's
 * state. (An ordinal keeps the id it was first written with: the items table never renames it.)
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Catalog } from '../src/catalog.js';
import { ItemsWriter } from '../src/items-table.js';
import type { QuerySchema } from '../src/types.js';
import { hashString } from '../src/user-state.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const SCHEMA: QuerySchema = { kinds: [], metadata: { creator: 'string' }, embeddingDims: 0, creatorField: 'creator' };

function store(): { db: Database.Database; write: (o: number, id: string) => void } {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const writer = new ItemsWriter(db);
  let version = 0;
  return {
    db,
    write: (o, id) => writer.upsert({ ordinal: o, id, text: null, metadata: {}, createdAt: 0, embedding: null }, ++version, true),
  };
}

describe('Catalog.idHash', () => {
  it("is the hash of the ordinal's id now, asked before its item was written and after, through growth", () => {
    const rand = mulberry32(0x1d);
    const { db, write } = store();
    const catalog = new Catalog(db, SCHEMA);
    const ids = new Map<number, string>();
    let n = 0;
    for (let round = 0; round < 6; round++) {
      // Each round writes new ordinals (past the arrays' size, and ones asked for while empty) and
      // writes some old ones again.
      for (let k = 0; k < 900; k++) {
        const o = rand() < 0.7 ? n++ : Math.floor(rand() * Math.max(1, n));
        const id = ids.get(o) ?? `item-${round}-${k}-é${o}`;
        write(o, id);
        ids.set(o, id);
      }
      catalog.refresh();
      for (let k = 0; k < 600; k++) {
        const o = Math.floor(rand() * (n + 50));
        expect(catalog.idHash(o), `ordinal ${o}`).toBe(hashString(ids.get(o) ?? ''));
      }
    }
    // Asked twice, the kept hash answers the same.
    for (const [o, id] of ids) expect(catalog.idHash(o)).toBe(hashString(id));
  });

  it("after taking another catalog's state, is of that state's ids", () => {
    const a = store();
    const b = store();
    for (let o = 0; o < 300; o++) {
      a.write(o, `a${o}`);
      b.write(o, `b${o}`);
    }
    const ca = new Catalog(a.db, SCHEMA);
    const cb = new Catalog(b.db, SCHEMA);
    ca.refresh();
    cb.refresh();
    for (let o = 0; o < 300; o++) expect(ca.idHash(o)).toBe(hashString(`a${o}`));
    ca.rebase(cb.exportState());
    for (let o = 0; o < 300; o++) expect(ca.idHash(o)).toBe(hashString(`b${o}`));
  });
});
