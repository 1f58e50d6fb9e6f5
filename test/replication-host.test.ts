/**
 * The database's side of replication, in one process, through an in-memory log the test pumps by
 * hand: the outbox, the drop of an `(origin, seq)` already applied, last-writer-wins on items with
 * their tombstones, the stored position across a reopen, and the 4 → 5 format migration. Every
 * step is an explicit pump, so the order of events is the test's, not the scheduler's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TidalDb, type ReplicationLink, type ReplicationLinkStats } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import type { ReplicaHost, ReplicatedBatch } from 'tidal-load';

interface Entry {
  readonly id: string;
  readonly batch: ReplicatedBatch;
}

/** A log shared by the links of one test, in memory: entry ids are their index, zero-padded. */
class MemoryLog {
  readonly entries: Entry[] = [];
  append(batch: ReplicatedBatch): void {
    this.entries.push({ id: String(this.entries.length + 1).padStart(8, '0'), batch });
  }
}

/** A link that moves batches only when told to. */
class ManualLink implements ReplicationLink {
  host: ReplicaHost | null = null;
  applied = 0;
  constructor(readonly log: MemoryLog) {}
  start(host: ReplicaHost): void {
    this.host = host;
  }
  /** Appends the whole outbox to the log, then marks it published. */
  publish(): number {
    const batches = this.host!.unpublished(1_000);
    for (const b of batches) this.log.append(b);
    if (batches.length > 0) this.host!.published(batches[batches.length - 1]!.seq);
    return batches.length;
  }
  /** Applies every entry after the stored position (or after `from`). */
  async follow(from?: string): Promise<number> {
    const after = from ?? this.host!.position() ?? '';
    const entries = this.log.entries.filter((e) => e.id > after);
    const n = await this.host!.applyForeign(entries.map((e) => ({ batch: e.batch, position: e.id })));
    this.applied += n;
    return n;
  }
  stats(): ReplicationLinkStats {
    return { connected: true, published: 0, read: 0, applied: this.applied };
  }
  async close(): Promise<void> {}
}

const SCHEMA = {
  signals: [
    { name: 'view', halfLifeMs: 3_600_000, windows: ['1h' as const, 'all' as const] },
    { name: 'like', halfLifeMs: 86_400_000, windows: ['all' as const] },
  ],
  metadata: { creator: 'string' as const },
  creatorField: 'creator',
};
const T0 = Date.UTC(2025, 5, 1);

describe('replication: the host side', () => {
  let root: string;
  let now = T0;
  const open: TidalDb[] = [];

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'tidal-repl-host-'));
    now = T0;
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
    rmSync(root, { recursive: true, force: true });
  });

  async function replica(name: string, log: MemoryLog, items?: number, maxBatch?: number): Promise<{ db: TidalDb; link: ManualLink }> {
    const link = new ManualLink(log);
    const builder = TidalDb.builder()
      .path(join(root, name))
      .schema(SCHEMA)
      .workers(1)
      .clock(() => now)
      .replication(link);
    if (items !== undefined) builder.capacity({ items });
    if (maxBatch !== undefined) builder.groupCommit({ maxBatch });
    const db = await builder.open();
    open.push(db);
    return { db, link };
  }

  async function closeDb(db: TidalDb): Promise<void> {
    open.splice(open.indexOf(db), 1);
    await db.close();
  }

  it("applies another replica's signals, and drops a batch appended twice", async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log);
    await a.db.signals([
      { item: 'x', kind: 'view', at: T0 - 1000 },
      { item: 'x', kind: 'like', weight: 2, at: T0 - 500 },
    ]);
    await a.db.signal({ item: 'y', kind: 'view', at: T0 - 10 });
    expect(a.db.stats().replication!.unpublished).toBe(2);
    expect(a.link.publish()).toBe(2);
    expect(a.db.stats().replication!.unpublished).toBe(0);
    // The same batches again: what a replica killed between appending and deleting its outbox rows does.
    for (const e of [...log.entries]) log.append(e.batch);
    expect(await b.link.follow()).toBe(2);
    expect(b.db.itemSignals('x')).toEqual(a.db.itemSignals('x'));
    expect(b.db.itemSignals('y')).toEqual(a.db.itemSignals('y'));
    expect(b.db.itemSignals('x').view!.count).toBe(1);
    // Its own batches, read back from the log, are not applied again either.
    expect(await a.link.follow()).toBe(0);
    expect(a.db.itemSignals('x').view!.count).toBe(1);
    // A foreign batch is not published again by the replica that applied it.
    expect(b.db.stats().replication!.unpublished).toBe(0);
    const origins = b.db.stats().replication!.origins;
    expect(origins.map((o) => o.origin)).toEqual([a.db.stats().replication!.replicaId]);
  });

  it('items: the last writer wins by origin time, ties by origin id, and a tombstone keeps an older write out', async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log);
    // Both write item z at the same instant: the higher replica id wins on both.
    await a.db.upsert({ id: 'z', text: 'from a', metadata: { creator: 'ana' } });
    await b.db.upsert({ id: 'z', text: 'from b', metadata: { creator: 'bo' } });
    a.link.publish();
    b.link.publish();
    await a.link.follow();
    await b.link.follow();
    const idA = a.db.stats().replication!.replicaId;
    const idB = b.db.stats().replication!.replicaId;
    const winner = idA > idB ? 'from a' : 'from b';
    expect((await a.db.get('z'))?.text).toBe(winner);
    expect((await b.db.get('z'))?.text).toBe(winner);

    // b deletes w later than a wrote it; a's write arrives at b after the delete: the tombstone wins.
    now = T0 + 1000;
    await a.db.upsert({ id: 'w', text: 'early', metadata: { creator: 'ana' } });
    now = T0 + 2000;
    await b.db.upsert({ id: 'w', text: 'b', metadata: { creator: 'bo' } });
    await b.db.delete('w');
    b.link.publish();
    await a.link.follow();
    a.link.publish();
    await b.link.follow();
    expect(await a.db.get('w')).toBeUndefined();
    expect(await b.db.get('w')).toBeUndefined();

    // A replica whose clock is behind still overwrites what it has seen: its stamp goes past the stored one.
    now = T0;
    await a.db.upsert({ id: 'w', text: 'again', metadata: { creator: 'ana' } });
    a.link.publish();
    await b.link.follow();
    expect((await b.db.get('w'))?.text).toBe('again');
    expect((await a.db.get('w'))?.text).toBe('again');
  });

  it('the outbox and the stored position survive a reopen: nothing published twice from memory, nothing applied twice', async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log);
    await a.db.signals([{ item: 'x', kind: 'view', at: T0 - 1 }]);
    await a.db.signals([{ item: 'x', kind: 'view', at: T0 - 2 }]);
    await closeDb(a.db);
    const a2 = await replica('a', log);
    expect(a2.db.stats().replication!.unpublished).toBe(2);
    a2.link.publish();
    await b.link.follow();
    const position = b.db.stats().replication!.position;
    expect(position).toBe(log.entries[log.entries.length - 1]!.id);
    await closeDb(b.db);
    const b2 = await replica('b', log);
    expect(b2.db.stats().replication!.position).toBe(position);
    // Read again from the start of the log: every batch is dropped.
    expect(await b2.link.follow('')).toBe(0);
    expect(b2.db.itemSignals('x').view!.count).toBe(2);
  });

  it("a batch after a missing one waits: the gap shows, and the origin's batches apply in order once it appends them again", async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log);
    const origin = a.db.stats().replication!.replicaId;
    for (let i = 1; i <= 3; i++) await a.db.signals([{ item: 'x', kind: 'view', at: T0 - i }]);
    expect(a.link.publish()).toBe(3);
    // The log loses the second batch (a Redis restarted without it): the origin still holds all three.
    log.entries.splice(1, 1);
    expect(a.db.stats().replication).toMatchObject({ unpublished: 0, retained: 3 });
    now = T0 + 10;
    expect(await b.link.follow()).toBe(1);
    expect(b.db.itemSignals('x').view!.count).toBe(1);
    now = T0 + 25;
    let stats = b.db.stats().replication!;
    expect(stats.gaps).toEqual([{ origin, from: 2, to: 2, since: T0 + 10 }]);
    expect(stats.origins).toEqual([expect.objectContaining({ origin, seq: 1, head: 3, behind: 2, behindMs: 15 })]);

    a.link.host!.republish(2);
    expect(a.link.publish()).toBe(2);
    expect(await b.link.follow()).toBe(2);
    expect(b.db.itemSignals('x').view!.count).toBe(3);
    stats = b.db.stats().replication!;
    expect(stats.gaps).toEqual([]);
    expect(stats.origins).toEqual([expect.objectContaining({ origin, seq: 3, head: 3, behind: 0, behindMs: 0 })]);
    // Every replica applied them: they leave the origin's outbox.
    a.link.host!.release(3);
    expect(a.db.stats().replication).toMatchObject({ unpublished: 0, retained: 0 });
    expect(a.link.host!.head()).toMatchObject({ seq: 3, from: 4 });

    // A gap the origin cannot fill any more is given up on when told: the next batch applies, the range is recorded lost.
    await a.db.signals([{ item: 'x', kind: 'view', at: T0 - 4 }]);
    await a.db.signals([{ item: 'x', kind: 'view', at: T0 - 5 }]);
    a.link.publish();
    log.entries.splice(log.entries.length - 2, 1);
    expect(await b.link.follow()).toBe(0);
    b.link.host!.skipGap(origin);
    expect(await b.link.follow(log.entries[log.entries.length - 2]!.id)).toBe(1);
    stats = b.db.stats().replication!;
    expect(stats.gaps).toEqual([]);
    expect(stats.lost).toEqual([expect.objectContaining({ origin, from: 4, to: 4 })]);
    expect(b.db.itemSignals('x').view!.count).toBe(4);
  });

  it('users travel: a hide and a block on one replica keep the item and the creator from that user on the other', async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log);
    await a.db.upsertItems([
      { id: 'p', metadata: { creator: 'ana' } },
      { id: 'q', metadata: { creator: 'bo' } },
      { id: 'r', metadata: { creator: 'cy' } },
    ]);
    await a.db.upsertUsers([{ id: 'mia' }]);
    await a.db.signals([
      { item: 'p', kind: 'view', user: 'mia', at: T0 - 3 },
      { item: 'q', kind: 'view', at: T0 - 2 },
      { item: 'r', kind: 'view', at: T0 - 1 },
    ]);
    await a.db.hide({ user: 'mia', item: 'p' });
    await a.db.block({ user: 'mia', creator: 'bo' });
    a.link.publish();
    await b.link.follow();
    const user = await b.db.getUser('mia');
    expect(user).toMatchObject({ hidden: ['p'], blocked: ['bo'], seen: ['p'] });
    const ids = (await b.db.retrieve({ profile: 'popular', user: 'mia', limit: 10 })).items.map((i) => i.id);
    expect(ids).toEqual(['r']);
  });

  it("a user's preference and affinities move alike everywhere, whether or not a replica holds the item when the signal comes", async () => {
    const log = new MemoryLog();
    const liked = {
      signals: [{ name: 'like', halfLifeMs: 86_400_000, windows: ['all' as const], preference: 0.5 }],
      metadata: { creator: 'string' as const },
      creatorField: 'creator',
      embeddingDims: 3,
    };
    const open3 = async (name: string) => {
      const link = new ManualLink(log);
      const db = await TidalDb.builder()
        .path(join(root, name))
        .schema(liked)
        .workers(1)
        .clock(() => now)
        .replication(link)
        .open();
      open.push(db);
      return { db, link };
    };
    const [a, b, c, d] = [await open3('a'), await open3('b'), await open3('c'), await open3('d')];
    // c's item q reaches b (through the log), not a.
    await c.db.upsertItems([{ id: 'q', metadata: { creator: 'bo' }, embedding: [0, 0, 1] }]);
    c.link.publish();
    await b.link.follow();
    // d's item p reaches a (handed over directly), and b only after a's signals.
    await d.db.upsertItems([{ id: 'p', metadata: { creator: 'ana' }, embedding: [1, 0, 0] }]);
    const dp = d.link.host!.unpublished(10);
    expect(await a.link.host!.applyForeign(dp.map((batch) => ({ batch, position: '00000000' })))).toBe(1);
    await a.db.upsertUsers([{ id: 'mia', embedding: [0, 1, 0] }]);
    await a.db.signals([
      { item: 'p', kind: 'like', user: 'mia', at: T0 - 2 },
      { item: 'q', kind: 'like', user: 'mia', at: T0 - 1 },
    ]);
    a.link.publish();
    d.link.publish();
    await b.link.follow();
    const there = await b.db.getUser('mia');
    const here = await a.db.getUser('mia');
    // At the origin p moved mia (a held it) and q did not (a did not hold it): so on b too.
    expect(Object.keys(here!.affinity)).toEqual(['ana']);
    expect(there!.affinity).toEqual(here!.affinity);
    expect(Array.from(there!.preference!)).toEqual(Array.from(here!.preference!));
    expect(here!.preference![0]).toBeGreaterThan(0);
    expect(here!.preference![2]).toBe(0);
  });

  it('opens a format-4 file: the replication tables are created empty and replication starts from there', async () => {
    const dir = join(root, 'v4');
    const plain = await TidalDb.builder().path(dir).schema(SCHEMA).workers(1).open();
    await plain.signal({ item: 'x', kind: 'view', at: T0 - 1 });
    await plain.close();
    const raw = new Database(join(dir, 'tidal.db'));
    raw.exec('DROP TABLE repl_outbox; DROP TABLE repl_origins; DROP TABLE repl_item_clock');
    raw.pragma('user_version = 4');
    raw.close();
    const log = new MemoryLog();
    const a = await replica('v4', log);
    expect(a.db.itemSignals('x').view!.count).toBe(1);
    // What was written before replication is not in the outbox; what follows is.
    expect(a.db.stats().replication!.unpublished).toBe(0);
    await a.db.signal({ item: 'x', kind: 'view', at: T0 - 2 });
    expect(a.db.stats().replication!.unpublished).toBe(1);
    const check = new Database(join(dir, 'tidal.db'), { readonly: true });
    expect(check.pragma('user_version', { simple: true })).toBeGreaterThanOrEqual(5);
    check.close();
  });
  it('a foreign batch this replica cannot hold stops the batches after it: none of its origin is skipped', async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    const b = await replica('b', log, 3);
    const first = await a.db.signal({ item: 'x', kind: 'view', at: T0 - 3 });
    await a.db.signals(['p', 'q', 'r', 's'].map((item) => ({ item, kind: 'view' as const, at: T0 - 2 })));
    await a.db.signal({ item: 'x', kind: 'view', at: T0 - 1 });
    a.link.publish();
    await expect(b.link.follow()).rejects.toMatchObject({ code: 'TIDAL_CAPACITY' });
    // The first batch applied, the one after the refused batch not: the origin's position stays before the refusal.
    expect(b.db.stats().replication!.origins.map((o) => o.seq)).toEqual([first]);
    expect(b.db.itemSignals('x').view!.count).toBe(1);
  });
  it('a foreign batch whose transaction fails drops the batches of its origin committed after it, and both apply on the next read', async () => {
    const log = new MemoryLog();
    const a = await replica('a', log);
    // One write per transaction, so the batches commit apart.
    const b = await replica('b', log, undefined, 1);
    const seqs: number[] = [];
    for (let i = 0; i < 3; i++) seqs.push(await a.db.signal({ item: 'x', kind: 'view', at: T0 - i }));
    a.link.publish();
    // The transaction that applies the second batch fails (as on a full disk).
    const writer = internalsOf(b.db).writer;
    writer.exec(
      `CREATE TEMP TRIGGER fail_second BEFORE INSERT ON repl_origins WHEN NEW.seq = ${seqs[1]} BEGIN SELECT RAISE(ABORT, 'disk full'); END`,
    );
    await expect(b.link.follow()).rejects.toThrow(/disk full/);
    expect(b.db.stats().replication!.origins.map((o) => o.seq)).toEqual([seqs[0]]);
    expect(b.db.itemSignals('x').view!.count).toBe(1);
    writer.exec('DROP TRIGGER fail_second');
    expect(await b.link.follow()).toBe(2);
    expect(b.db.itemSignals('x').view!.count).toBe(3);
  });
});
