/**
 * The write path through TidalDb: backpressure and the memory guard refuse before anything is
 * enqueued, a batch call is accepted or refused whole, and bad write-path options refuse to open.
 *
 * The writer is "stalled" the simplest deterministic way: writes are issued synchronously, so the
 * group commit cannot run a batch until the test yields.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BackpressureError, InvalidInputError, MemoryPressureError, TidalDb, type TidalWarning } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';

const NOW = Date.UTC(2025, 0, 1);
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000, velocity: true }] };
const MiB = 1024 * 1024;
const root = mkdtempSync(join(tmpdir(), 'tidal-write-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = () => join(root, `db-${n++}`);

function builder(dir = freshDir()) {
  return TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => NOW)
    .capacity({ items: 4096, signalSlots: 4096 });
}

function meminfo(availableMiB: number): string {
  const path = join(root, `meminfo-${n++}`);
  writeFileSync(path, `MemTotal: ${8192 * 1024} kB\nMemAvailable: ${availableMiB * 1024} kB\nSwapFree: 0 kB\n`);
  return path;
}

const count = (db: TidalDb, id: string) => db.itemSignals(id).view?.count ?? 0;

describe('backpressure through TidalDb', () => {
  it('refuses every kind of write at the threshold, whole and before anything is enqueued', async () => {
    const db = await builder().groupCommit({ maxBatch: 8, maxQueueEvents: 16 }).open();
    try {
      await db.upsertItems([{ id: 'kept' }]);
      const accepted: Promise<number>[] = [];
      for (let i = 0; i < 16; i++) accepted.push(db.signal({ item: 'a', kind: 'view' }));
      // Depth 16: every write method is refused, with the numbers the caller needs.
      const err = await db.signal({ item: 'a', kind: 'view' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BackpressureError);
      expect(err).toMatchObject({ code: 'TIDAL_BACKPRESSURE', depth: 16, maxQueueEvents: 16 });
      expect((err as BackpressureError).retryAfterMs).toBeGreaterThanOrEqual(1);
      await expect(
        db.signals([
          { item: 'b', kind: 'view' },
          { item: 'c', kind: 'view' },
        ]),
      ).rejects.toBeInstanceOf(BackpressureError);
      await expect(db.upsertItems([{ id: 'd' }])).rejects.toBeInstanceOf(BackpressureError);
      await expect(db.delete('kept')).rejects.toBeInstanceOf(BackpressureError);
      // Admission comes first, so a refusal costs no per-signal work: even a malformed call is
      // refused for the queue, not inspected.
      await expect(db.signals([{ item: 'e', kind: 'no-such-kind' }])).rejects.toBeInstanceOf(BackpressureError);

      await Promise.all(accepted);
      expect(count(db, 'a')).toBe(16);
      // The refused calls left nothing behind: no signal, no item, no id.
      expect(db.itemSignals('b')).toEqual({});
      expect(db.itemSignals('c')).toEqual({});
      expect(await db.get('d')).toBeUndefined();
      expect(await db.get('kept')).toBeDefined();
      // Drained: accepted again.
      await db.signals([
        { item: 'b', kind: 'view' },
        { item: 'c', kind: 'view' },
      ]);
      expect(count(db, 'b') + count(db, 'c')).toBe(2);
    } finally {
      await db.close();
    }
  });

  it('refuses a whole batch with InvalidInputError for one bad entry, naming it', async () => {
    const db = await builder().open();
    try {
      const err = await db
        .signals([
          { item: 'x', kind: 'view' },
          { item: 'y', kind: 'nope' },
        ])
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect((err as InvalidInputError).field).toBe('signals[1].kind');
      expect(db.itemSignals('x')).toEqual({});
    } finally {
      await db.close();
    }
  });

  it('hands out no item ordinal to a refused write, so ids survive a reopen intact', async () => {
    const dir = freshDir();
    const db = await builder(dir).groupCommit({ maxBatch: 4, maxQueueEvents: 4 }).open();
    const fill = [0, 1, 2, 3].map(() => db.signal({ item: 'filler', kind: 'view' }));
    await expect(db.signal({ item: 'ghost', kind: 'view' })).rejects.toBeInstanceOf(BackpressureError);
    await Promise.all(fill);
    await db.signal({ item: 'other', kind: 'view' });
    await db.signal({ item: 'ghost', kind: 'view' });
    await db.close();
    const again = await builder(dir).open();
    try {
      expect([count(again, 'filler'), count(again, 'other'), count(again, 'ghost')]).toEqual([4, 1, 1]);
    } finally {
      await again.close();
    }
  });

  it('refuses to open with a threshold or batch size that is not a sane whole number', async () => {
    await expect(builder().groupCommit({ maxQueueEvents: 100.5 }).open()).rejects.toThrow(
      /groupCommit\.maxQueueEvents must be a whole number/,
    );
    await expect(builder().groupCommit({ maxBatch: 64, maxQueueEvents: 10 }).open()).rejects.toThrow(/groupCommit\.maxQueueEvents/);
    await expect(builder().groupCommit({ maxBatch: 0 }).open()).rejects.toThrow(/groupCommit\.maxBatch/);
    await expect(builder().groupCommit({ maxDelayMs: -1 }).open()).rejects.toThrow(InvalidInputError);
  });
});

describe('memory guard through TidalDb', () => {
  it('refuses writes under the floor and still serves reads', async () => {
    const db = await builder()
      .memoryGuard({ floorBytes: 64 * MiB, meminfoPath: meminfo(10) })
      .open();
    try {
      const err = await db.signal({ item: 'a', kind: 'view' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(MemoryPressureError);
      expect(err).toMatchObject({ code: 'TIDAL_MEMORY_PRESSURE', availableBytes: 10 * MiB, floorBytes: 64 * MiB });
      await expect(db.upsertItems([{ id: 'a' }])).rejects.toBeInstanceOf(MemoryPressureError);
      // Reads never consult the guard.
      const res = await db.retrieve({ profile: 'trending' });
      expect(res.items).toEqual([]);
      expect(db.itemSignals('a')).toEqual({});
    } finally {
      await db.close();
    }
  });

  it('admits writes over the floor, and with the guard off (0) whatever the host has', async () => {
    const ok = await builder()
      .memoryGuard({ floorBytes: 64 * MiB, meminfoPath: meminfo(100) })
      .open();
    const off = await builder()
      .memoryGuard({ floorBytes: 0, meminfoPath: meminfo(1) })
      .open();
    try {
      await ok.signal({ item: 'a', kind: 'view' });
      await off.signal({ item: 'a', kind: 'view' });
      expect([count(ok, 'a'), count(off, 'a')]).toEqual([1, 1]);
    } finally {
      await ok.close();
      await off.close();
    }
  });

  it('refuses to open with a floor that is not a whole number, or a guard that cannot read its file', async () => {
    await expect(builder().memoryGuard({ floorBytes: 1.5 }).open()).rejects.toThrow(
      /memoryGuard\.floorBytes must be 'auto', 0 \(off\) or a whole number of bytes, got 1\.5/,
    );
    await expect(
      builder()
        .memoryGuard({ floorBytes: '64' as never })
        .open(),
    ).rejects.toBeInstanceOf(InvalidInputError);
    await expect(
      builder()
        .memoryGuard({ floorBytes: 64 * MiB, meminfoPath: join(root, 'absent') })
        .open(),
    ).rejects.toThrow(/memoryGuard\.meminfoPath/);
  });

  it("runs without a guard, with a warning, on a host without meminfo when the floor is 'auto'", async () => {
    const warnings: TidalWarning[] = [];
    const db = await builder()
      .memoryGuard({ meminfoPath: join(root, 'absent') })
      .onWarning((w) => warnings.push(w))
      .open();
    try {
      await db.signal({ item: 'a', kind: 'view' });
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_MEMORY_GUARD_UNAVAILABLE']);
    } finally {
      await db.close();
    }
  });
});

describe('the item ids after a reopen', () => {
  it('are read after the open: a write or read right after it finds a stored id, and its signals survive the next reopen', async () => {
    const dir = freshDir();
    // More ids than one page of the fill (2 048), some items, most known only from a signal, one deleted.
    const ids = Array.from({ length: 3000 }, (_, i) => `i${i}`);
    const before = await builder(dir).open();
    await before.upsertItems(ids.slice(0, 100).map((id) => ({ id, text: `item ${id}` })));
    await before.signals(ids.slice(100).map((item) => ({ item, kind: 'view' })));
    await before.delete('i5');
    await before.close();

    const db = await builder(dir).open();
    const counts = new Map<string, number>();
    try {
      expect(internalsOf(db).idsFilled()).toBe(false);
      expect(count(db, 'i150')).toBe(1);
      const written = db.signals(['i2999', 'i7', 'i5', 'fresh', 'i2999'].map((item) => ({ item, kind: 'view' as const })));
      await db.upsert({ id: 'i2000', text: 'now an item' });
      await written;
      while (!internalsOf(db).idsFilled()) await new Promise((resolve) => setImmediate(resolve));
      for (const id of ['i2999', 'i7', 'i5', 'fresh', 'i2000', 'i150']) counts.set(id, count(db, id));
      expect(Object.fromEntries(counts)).toEqual({ i2999: 3, i7: 1, i5: 1, fresh: 1, i2000: 1, i150: 1 });
    } finally {
      await db.close();
    }
    const again = await builder(dir).open();
    try {
      for (const [id, n] of counts) expect(count(again, id), id).toBe(n);
      expect((await again.get('i2000'))?.text).toBe('now an item');
      const trending = await again.retrieve({ profile: 'trending', limit: 5 });
      expect(trending.items.map((r) => r.id)).toContain('i2000');
    } finally {
      await again.close();
    }
  });
});

describe('the item ids when a worker module publishes co-engagement lists', () => {
  const IDLE = new URL('./fixtures/idle-module.mjs', import.meta.url);

  /** A database of 100 items and one user who viewed `viewed` of them (each view pairs with the last ones). */
  async function written(viewed: number): Promise<string> {
    const dir = freshDir();
    const db = await builder(dir).open();
    await db.upsertItems(Array.from({ length: 100 }, (_, i) => ({ id: `i${i}`, text: `item ${i}` })));
    await db.upsertUsers([{ id: 'u' }]);
    for (let i = 0; i < viewed; i++) await db.signal({ item: `i${i}`, kind: 'view', user: 'u' });
    await db.close();
    return dir;
  }

  it('reads them during the open when the lists name more items than one indexed read each would cost', async () => {
    const dir = await written(90);
    const db = await builder(dir).workerModule(IDLE, null).open();
    try {
      expect(internalsOf(db).idsFilled()).toBe(true);
      expect(count(db, 'i3')).toBe(1);
    } finally {
      await db.close();
    }
  });

  it('leaves them to the fill after the open when the lists name few items, or without a worker module', async () => {
    const few = await written(3);
    const db = await builder(few).workerModule(IDLE, null).open();
    try {
      expect(internalsOf(db).idsFilled()).toBe(false);
      expect(count(db, 'i2')).toBe(1);
    } finally {
      await db.close();
    }
    const many = await written(90);
    const plain = await builder(many).open();
    try {
      expect(internalsOf(plain).idsFilled()).toBe(false);
    } finally {
      await plain.close();
    }
  });
});
