/**
 * A write the signal state cannot hold is refused before it is queued, whole, and the database
 * keeps working and reopens with exactly what was acknowledged.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CapacityError } from 'tidal-load';
import { TidalDb } from '../src/db.js';

const NOW = Date.UTC(2025, 0, 1);
const SCHEMA = {
  signals: [
    { name: 'view', halfLifeMs: 3_600_000 },
    { name: 'like', halfLifeMs: 86_400_000 },
  ],
};
const root = mkdtempSync(join(tmpdir(), 'tidal-capacity-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function open(dir: string, capacity: { items?: number; signalSlots?: number }) {
  return TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => NOW)
    .capacity(capacity)
    .open();
}

const count = (db: TidalDb, id: string, kind = 'view') => db.itemSignals(id)[kind]?.count ?? 0;

describe('capacity', () => {
  it('refuses a signal to a new pair when the slots are full, keeps serving the pairs that hold one, and reopens', async () => {
    const dir = join(root, 'slots');
    const db = await open(dir, { signalSlots: 2 });
    await db.signals([
      { item: 'a', kind: 'view' },
      { item: 'b', kind: 'view' },
    ]);
    const before = db.stats().writes.committedEvents;
    const err = await db.signal({ item: 'c', kind: 'view' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CapacityError);
    expect(err).toMatchObject({ code: 'TIDAL_CAPACITY', resource: 'signal state', capacity: 2 });
    expect((err as Error).message).toContain('capacity.signalSlots');
    // Another kind of a held item is a new pair too; a batch with one new pair is refused whole.
    await expect(
      db.signals([
        { item: 'a', kind: 'view' },
        { item: 'a', kind: 'like' },
      ]),
    ).rejects.toBeInstanceOf(CapacityError);
    expect(db.stats().writes.committedEvents).toBe(before);
    // Pairs that hold their slot keep working.
    await db.signals([
      { item: 'a', kind: 'view' },
      { item: 'b', kind: 'view' },
      { item: 'a', kind: 'view' },
    ]);
    expect(count(db, 'a')).toBe(3);
    expect(count(db, 'c')).toBe(0);
    await db.close();

    const again = await open(dir, { signalSlots: 2 });
    expect(count(again, 'a')).toBe(3);
    expect(count(again, 'b')).toBe(2);
    await again.signal({ item: 'b', kind: 'view' });
    await expect(again.signal({ item: 'c', kind: 'view' })).rejects.toBeInstanceOf(CapacityError);
    await again.close();
  });

  it('refuses new item ids past capacity.items, taking back the ordinals of the refused call', async () => {
    const dir = join(root, 'items');
    const db = await open(dir, { items: 3 });
    await db.signals([
      { item: 'a', kind: 'view' },
      { item: 'b', kind: 'view' },
    ]);
    // Two new ids, one more than fits: refused whole, and the one that would fit is not kept.
    await expect(
      db.signals([
        { item: 'c', kind: 'view' },
        { item: 'd', kind: 'view' },
      ]),
    ).rejects.toMatchObject({
      code: 'TIDAL_CAPACITY',
      resource: 'item ids',
      capacity: 3,
    });
    await expect(db.upsertItems([{ id: 'x' }, { id: 'y' }])).rejects.toBeInstanceOf(CapacityError);
    // The third id still has room.
    await db.upsertItems([{ id: 'x', text: 'x' }]);
    await expect(db.signal({ item: 'z', kind: 'view' })).rejects.toBeInstanceOf(CapacityError);
    await db.signal({ item: 'x', kind: 'like' });
    await db.close();

    const again = await open(dir, { items: 3 });
    expect(count(again, 'x', 'like')).toBe(1);
    expect(await again.get('x')).toMatchObject({ id: 'x' });
    expect(await again.get('y')).toBeUndefined();
    await again.close();
  });
});
