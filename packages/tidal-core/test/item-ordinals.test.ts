/**
 * The write path's ordinal map over a real items table: it starts empty and fills after the open,
 * and whatever the order of fills, hand-outs, refusals (rollbacks) and commits, every id answers the
 * ordinal a map read whole at the open would have, new ids get ordinals above every stored one, and
 * once the fill is complete no lookup reads the table.
 */
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ItemsWriter } from 'tidal-query';
import { openStorage } from 'tidal-wal/storage';
import { ItemOrdinals, type StoredOrdinals } from '../src/item-ordinals.js';

/** An items table holding `stored` ids (every third one known only from a signal). */
function table(stored: readonly string[]): ItemsWriter {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const items = new ItemsWriter(db);
  db.transaction(() => {
    stored.forEach((id, ordinal) => {
      if (ordinal % 3 === 2) items.ensureKey(ordinal, id);
      else items.upsert({ ordinal, id, text: null, metadata: {}, createdAt: 0, embedding: null }, ordinal + 1, false);
    });
  })();
  return items;
}

/** Counts the table reads a lookup makes (the fill's pages apart). */
function counted(items: ItemsWriter): { source: StoredOrdinals; lookups: () => number } {
  let lookups = 0;
  const source: StoredOrdinals = {
    nextOrdinal: () => items.nextOrdinal(),
    ordinalOf: (id) => (lookups++, items.ordinalOf(id)),
    idAt: (o) => (lookups++, items.idAt(o)),
    keysAfter: (after, limit) => items.keysAfter(after, limit),
  };
  return { source, lookups: () => lookups };
}

type Op =
  | { op: 'fill'; limit: number }
  | { op: 'of'; id: number }
  | { op: 'idOf'; ordinal: number }
  | { op: 'call'; ids: number[]; refused: boolean };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('fill' as const), limit: fc.integer({ min: 1, max: 7 }) }),
  fc.record({ op: fc.constant('of' as const), id: fc.integer({ min: 0, max: 59 }) }),
  fc.record({ op: fc.constant('idOf' as const), ordinal: fc.integer({ min: 0, max: 70 }) }),
  fc.record({
    op: fc.constant('call' as const),
    ids: fc.array(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 4 }),
    refused: fc.boolean(),
  }),
);

describe('ItemOrdinals', () => {
  it('answers as a map read whole at the open, through any interleaving of fills, calls and refusals', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 30 }), fc.array(op, { maxLength: 60 }), (storedCount, ops) => {
        // Ids in an order unlike their ordinals', so the fill (id order) jumps about the ordinals.
        const name = (k: number) => `item-${((k * 37) % 60).toString(36)}-${k}`;
        const stored = Array.from({ length: storedCount }, (_, k) => name(k));
        const items = table(stored);
        const ordinals = new ItemOrdinals(items, 1000);
        const model = new Map(stored.map((id, o) => [id, o]));
        let next = storedCount;
        for (const o of ops) {
          if (o.op === 'fill') ordinals.fill(o.limit);
          else if (o.op === 'of') expect(ordinals.of(name(o.id))).toBe(model.get(name(o.id)));
          else if (o.op === 'idOf') {
            const want = [...model].find(([, ord]) => ord === o.ordinal)?.[0];
            expect(ordinals.idOf(o.ordinal)).toBe(want);
          } else {
            const mark = ordinals.begin();
            const fresh: string[] = [];
            for (const k of o.ids) {
              const id = name(k);
              const { ordinal, known } = ordinals.take(id);
              const had = model.get(id);
              expect(known).toBe(had !== undefined);
              if (had !== undefined) expect(ordinal).toBe(had);
              else {
                expect(ordinal).toBe(next++);
                model.set(id, ordinal);
                fresh.push(id);
              }
            }
            if (o.refused) {
              ordinals.rollback(mark);
              for (const id of fresh) model.delete(id);
              next -= fresh.length;
            } else {
              // Committed: the rows are written, as the write path does for an id met only in a signal.
              for (const id of fresh) items.ensureKey(model.get(id)!, id);
            }
          }
        }
        for (let pages = 0; pages < 100 && !ordinals.fill(3); pages++);
        expect(ordinals.complete).toBe(true);
        for (const [id, o] of model) {
          expect(ordinals.of(id)).toBe(o);
          expect(ordinals.idOf(o)).toBe(id);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('reads the table for a miss only until the fill is complete', () => {
    const stored = Array.from({ length: 10 }, (_, k) => `id-${k}`);
    const { source, lookups } = counted(table(stored));
    const ordinals = new ItemOrdinals(source, 1000);
    expect(ordinals.complete).toBe(false);
    expect(ordinals.of('id-7')).toBe(7);
    expect(ordinals.of('id-7')).toBe(7);
    expect(ordinals.idOf(4)).toBe('id-4');
    expect(ordinals.of('absent')).toBeUndefined();
    expect(lookups()).toBe(3);
    expect(ordinals.fill(4)).toBe(false);
    expect(ordinals.fill(4)).toBe(false);
    expect(ordinals.fill(4)).toBe(true);
    expect(ordinals.complete).toBe(true);
    expect(ordinals.of('absent')).toBeUndefined();
    expect(ordinals.idOf(99)).toBeUndefined();
    expect(ordinals.of('id-9')).toBe(9);
    expect(lookups()).toBe(3);
    // A new id goes above every stored ordinal, though the map never held most of them at the open.
    expect(ordinals.take('new').ordinal).toBe(10);
  });
});
