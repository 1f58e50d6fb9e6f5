import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SlotCheckpoint } from '../src/index.js';
import { CHECKPOINT_CHUNK_BYTES } from '../src/slot-checkpoint.js';
import { openTestDb } from './db.js';

const SLOT = 1024;
const PER_ROW = CHECKPOINT_CHUNK_BYTES / SLOT;
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup(maxSlots = 1000) {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-ckpt-'));
  dirs.push(dir);
  const db = openTestDb(join(dir, 'db.sqlite'));
  const arena = new SharedArrayBuffer(maxSlots * SLOT);
  const bytes = new Uint8Array(arena);
  /** Writes slot `s` (a stand-in for the store applying an event) and marks it dirty. */
  const touch = (ck: SlotCheckpoint, s: number, value: number) => {
    bytes.fill(value, s * SLOT, (s + 1) * SLOT);
    ck.markDirty(s);
  };
  const checkpoint = (ck: SlotCheckpoint, used: number) => {
    const n = db.transaction(() => ck.write(arena, used, SLOT))();
    ck.committed();
    return n;
  };
  return { db, arena, bytes, touch, checkpoint, maxSlots };
}

describe('SlotCheckpoint', () => {
  it('rewrites only the rows whose slots changed, and the rows always concatenate to the arena', () => {
    const { db, bytes, touch, checkpoint, maxSlots } = setup();
    const ck = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    for (let s = 0; s < 300; s++) touch(ck, s, 1 + (s % 200));
    // First checkpoint: everything (no rows yet, no chunk-size marker).
    expect(checkpoint(ck, 300)).toBe(Math.ceil(300 / PER_ROW));
    expect(ck.load().equals(Buffer.from(bytes.subarray(0, 300 * SLOT)))).toBe(true);

    // Two hot slots in row 0 and one new slot in the partial last row.
    touch(ck, 3, 7);
    touch(ck, 5, 8);
    touch(ck, 300, 9);
    expect(checkpoint(ck, 301)).toBe(2);
    expect(ck.load().equals(Buffer.from(bytes.subarray(0, 301 * SLOT)))).toBe(true);

    // Nothing changed: nothing written.
    expect(checkpoint(ck, 301)).toBe(0);
    // A reopened checkpoint with the same chunk size starts incremental.
    const again = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    touch(again, 10, 3);
    expect(checkpoint(again, 301)).toBe(1);
    expect(again.load().equals(Buffer.from(bytes.subarray(0, 301 * SLOT)))).toBe(true);
    db.close();
  });

  it('rewrites the rows of slots allocated since the last checkpoint, even if never marked dirty', () => {
    const { db, bytes, touch, checkpoint, maxSlots } = setup();
    const ck = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    for (let s = 0; s < 100; s++) touch(ck, s, 1);
    checkpoint(ck, 100);
    // Slots 100..129 are taken (their headers written) without an event, so nothing marks them;
    // slot 130 gets an event. Row 1 was stored holding 36 slots and must be rewritten whole, or
    // row 2 would land at slot 100 when the rows are concatenated.
    bytes.fill(4, 100 * SLOT, 130 * SLOT);
    touch(ck, 130, 5);
    expect(checkpoint(ck, 131)).toBe(2);
    expect(ck.load().equals(Buffer.from(bytes.subarray(0, 131 * SLOT)))).toBe(true);
    // The same holds across a reopen: the rows' slot count is read back from the table.
    bytes.fill(6, 131 * SLOT, 140 * SLOT);
    const again = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    expect(checkpoint(again, 140)).toBe(1);
    expect(again.load().equals(Buffer.from(bytes.subarray(0, 140 * SLOT)))).toBe(true);
    expect(checkpoint(again, 140)).toBe(0);
    db.close();
  });

  it('keeps rows dirty when the transaction rolls back', () => {
    const { db, arena, touch, checkpoint, maxSlots } = setup();
    const ck = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    for (let s = 0; s < 10; s++) touch(ck, s, 1);
    checkpoint(ck, 10);
    touch(ck, 2, 5);
    expect(() =>
      db.transaction(() => {
        ck.write(arena, 10, SLOT);
        throw new Error('disk full');
      })(),
    ).toThrow('disk full');
    expect(checkpoint(ck, 10)).toBe(1);
    db.close();
  });

  it('rewrites everything when told to, or when the rows were written with another chunk size', () => {
    const { db, touch, checkpoint, maxSlots } = setup();
    const ck = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    for (let s = 0; s < 200; s++) touch(ck, s, 1);
    checkpoint(ck, 200);
    ck.markAllDirty();
    expect(checkpoint(ck, 200)).toBe(Math.ceil(200 / PER_ROW));
    db.prepare("UPDATE tidal_meta SET value = '8388608' WHERE key = 'checkpoint_chunk_bytes'").run();
    expect(checkpoint(new SlotCheckpoint(db, SLOT, maxSlots, 2), 200)).toBe(Math.ceil(200 / PER_ROW));
    db.close();
  });

  it('rewrites everything after rows of another slot layout, and names the layout they are in', () => {
    const { db, bytes, touch, checkpoint, maxSlots } = setup();
    const old = new SlotCheckpoint(db, SLOT, maxSlots, 1);
    for (let s = 0; s < 200; s++) touch(old, s, 1);
    checkpoint(old, 200);
    expect(new SlotCheckpoint(db, SLOT, maxSlots, 1).storedLayout).toBe(1);
    // A file from before the key names no layout: its rows are layout 1.
    db.prepare("DELETE FROM tidal_meta WHERE key = 'checkpoint_slot_layout'").run();
    const ck = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    expect(ck.storedLayout).toBe(1);
    // Half the slots, as if the new layout's slots were smaller: every row is rewritten, none kept.
    touch(ck, 3, 9);
    expect(checkpoint(ck, 100)).toBe(Math.ceil(100 / PER_ROW));
    expect(ck.load().equals(Buffer.from(bytes.subarray(0, 100 * SLOT)))).toBe(true);
    const again = new SlotCheckpoint(db, SLOT, maxSlots, 2);
    expect(again.storedLayout).toBe(2);
    expect(checkpoint(again, 100)).toBe(0);
    db.close();
  });
});
