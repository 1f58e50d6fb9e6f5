/**
 * Fault injection on the write path, through a real database: SQLite refusing a commit (disk full),
 * a bug in the step after a commit, and the acknowledgement mark failing. Each must leave nothing
 * half-written, keep queries working, throw nothing into the event loop, and let the next open hold
 * exactly what was acknowledged.
 */
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { InternalError, WriterFailedError, type TidalWarning } from 'tidal-load';
import { SignalStore } from 'tidal-query';
import { TidalDb, internalsOf } from '../src/db.js';

const NOW = Date.UTC(2025, 0, 1);
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }], metadata: { category: 'string' as const } };
const root = mkdtempSync(join(tmpdir(), 'tidal-faults-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = () => join(root, `db-${n++}`);

let uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);
beforeEach(() => {
  uncaught = [];
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
});
afterEach(() => {
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onUncaught);
  vi.restoreAllMocks();
  expect(uncaught).toEqual([]);
});

function open(dir: string, warnings: TidalWarning[] = []) {
  return TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => NOW)
    .onWarning((w) => warnings.push(w))
    .open();
}

const views = (db: TidalDb, id: string) => db.itemSignals(id).view?.count ?? 0;

describe('write-path faults', () => {
  it('a commit SQLite refuses (disk full) rolls back whole; the writer goes on', async () => {
    const dir = freshDir();
    const db = await open(dir);
    await db.upsertItems([{ id: 'a', text: 'kept', metadata: { category: 'x' } }]);
    await db.signals([
      { item: 'a', kind: 'view' },
      { item: 'a', kind: 'view' },
    ]);
    const { writer } = internalsOf(db);
    const pages = writer.pragma('page_count', { simple: true }) as number;
    writer.pragma(`max_page_count = ${pages}`);
    // Far more than the free pages: the transaction fails with SQLITE_FULL.
    const big = Array.from({ length: 200 }, (_, i) => ({ id: `big-${i}`, text: 'x'.repeat(4000) + i }));
    const refused = db.upsertItems(big);
    const sameBatch = db.signal({ item: 'new-item', kind: 'view' });
    await expect(refused).rejects.toBeInstanceOf(InternalError);
    await expect(refused).rejects.toMatchObject({ cause: { code: 'SQLITE_FULL' } });
    await expect(sameBatch).rejects.toBeInstanceOf(InternalError);
    // Nothing of the batch is visible.
    expect(await db.get('big-0')).toBeUndefined();
    expect(views(db, 'new-item')).toBe(0);
    expect(views(db, 'a')).toBe(2);
    // Space comes back: the same writes succeed, with no id lost or duplicated.
    writer.pragma('max_page_count = 1073741823');
    await db.signal({ item: 'new-item', kind: 'view' });
    await db.upsertItems(big.slice(0, 2));
    expect(views(db, 'new-item')).toBe(1);
    expect((await db.retrieve({ profile: 'new', limit: 10 })).items.map((i) => i.id)).toContain('big-1');
    await db.close();

    const warnings: TidalWarning[] = [];
    const again = await open(dir, warnings);
    expect(views(again, 'a')).toBe(2);
    expect(views(again, 'new-item')).toBe(1);
    expect(await again.get('big-1')).toMatchObject({ id: 'big-1' });
    expect(await again.get('big-2')).toBeUndefined();
    expect(warnings).toEqual([]);
    await again.close();
  });

  it('a bug after the commit stops the writer, keeps queries working, and the next open holds what was acknowledged', async () => {
    const dir = freshDir();
    const warnings: TidalWarning[] = [];
    const db = await open(dir, warnings);
    await db.upsertItems([{ id: 'a', text: 'hello', metadata: { category: 'x' } }]);
    await db.signal({ item: 'a', kind: 'view' });
    const apply = vi.spyOn(SignalStore.prototype, 'apply').mockImplementationOnce(function (this: SignalStore) {
      throw new TypeError('a bug in apply');
    });
    // The batch committed before the bug: durable, so acknowledged.
    await expect(
      db.signals([
        { item: 'a', kind: 'view' },
        { item: 'b', kind: 'view' },
      ]),
    ).resolves.toBeGreaterThan(0);
    expect(apply).toHaveBeenCalledTimes(1);
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_WRITER_STOPPED']);
    await expect(db.signal({ item: 'a', kind: 'view' })).rejects.toBeInstanceOf(WriterFailedError);
    await expect(db.upsertItems([{ id: 'c' }])).rejects.toMatchObject({ code: 'TIDAL_WRITER_FAILED' });
    // Reads are served from the state as it was.
    const res = await db.retrieve({ profile: 'popular', limit: 5 });
    expect(res.items.map((i) => i.id)).toEqual(['a']);
    await db.close();

    const again = await open(dir);
    // 1 before the bug + the acknowledged batch of 2 (1 for a, 1 for b); not the refused write.
    expect(views(again, 'a')).toBe(2);
    expect(views(again, 'b')).toBe(1);
    await again.signal({ item: 'a', kind: 'view' });
    expect(views(again, 'a')).toBe(3);
    await again.close();
  });

  it('an acknowledgement mark that cannot be written is a warning, not a failure', async () => {
    const dir = freshDir();
    const first = await open(dir);
    await first.close();
    // Every write to /dev/full fails with ENOSPC; reading it gives zeros (no mark).
    rmSync(join(dir, 'tidal.db-ack'));
    symlinkSync('/dev/full', join(dir, 'tidal.db-ack'));
    const warnings: TidalWarning[] = [];
    const db = await open(dir, warnings);
    await db.signal({ item: 'a', kind: 'view' });
    await db.signal({ item: 'a', kind: 'view' });
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_ACK_MARK_FAILED']);
    expect(views(db, 'a')).toBe(2);
    await db.close();
    rmSync(join(dir, 'tidal.db-ack'));
    const again = await open(dir, warnings);
    expect(views(again, 'a')).toBe(2);
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_ACK_MARK_FAILED']);
    await again.close();
  });
  it('a refused commit leaves every user as it was: hidden items, creators, affinities and co-engagement', async () => {
    const HOUR = 3_600_000;
    const schema = {
      signals: [{ name: 'like', halfLifeMs: HOUR, preference: 0.5 }],
      metadata: { creator: 'string' as const },
      creatorField: 'creator',
      embeddingDims: 2,
    };
    const dir = freshDir();
    const openUsers = () =>
      TidalDb.builder()
        .path(dir)
        .schema(schema)
        .workers(1)
        .clock(() => NOW)
        .open();
    const db = await openUsers();
    await db.upsertItems(
      ['p', 'q', 'r', 's'].map((id, i) => ({ id, embedding: [1, i], metadata: { creator: `c${i}` }, createdAt: NOW - HOUR })),
    );
    await db.upsertUsers([{ id: 'mia' }]);
    await db.signal({ item: 'p', kind: 'like', user: 'mia', at: NOW - 2 });
    await db.signal({ item: 'q', kind: 'like', user: 'mia', at: NOW - 1 });
    await db.hide({ user: 'mia', item: 'r' });
    await db.follow({ user: 'mia', creator: 'c0' });
    const before = await db.getUser('mia');
    const related = (await db.retrieve({ profile: 'related', item: 'p', limit: 5 })).items.map((i) => i.id);
    expect(related).toEqual(['q']);

    const { writer } = internalsOf(db);
    writer.pragma(`max_page_count = ${writer.pragma('page_count', { simple: true }) as number}`);
    const big = Array.from({ length: 200 }, (_, i) => ({ id: `big-${i}`, text: 'x'.repeat(4000) + i }));
    // One batch: each of these changes a collection mia's published state holds.
    const batch = [
      db.upsertItems(big),
      db.hide({ user: 'mia', item: 's' }),
      db.unhide({ user: 'mia', item: 'r' }),
      db.follow({ user: 'mia', creator: 'c3' }),
      db.unfollow({ user: 'mia', creator: 'c0' }),
      db.block({ user: 'mia', creator: 'c2' }),
      db.signal({ item: 'q', kind: 'like', user: 'mia', at: NOW }),
      db.signal({ item: 's', kind: 'like', user: 'mia', at: NOW }),
    ];
    for (const w of batch) await expect(w).rejects.toBeInstanceOf(InternalError);
    expect(await db.getUser('mia')).toEqual(before);
    expect((await db.retrieve({ profile: 'related', item: 'p', limit: 5 })).items.map((i) => i.id)).toEqual(related);

    writer.pragma('max_page_count = 1073741823');
    await db.signal({ item: 's', kind: 'like', user: 'mia', at: NOW });
    await db.hide({ user: 'mia', item: 'q' });
    const after = await db.getUser('mia');
    expect(after!.hidden).toEqual(['q', 'r']);
    expect(after!.following).toEqual(['c0']);
    expect(after!.blocked).toEqual([]);
    expect(Object.keys(after!.affinity).sort()).toEqual(['c0', 'c1', 'c3']);
    await db.close();
    const again = await openUsers();
    expect(await again.getUser('mia')).toEqual(after);
    await again.close();
  });
});
