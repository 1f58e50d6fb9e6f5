/**
 * The database's side of replication (see docs/scale-out.md#replication): the outbox of its own
 * committed batches, the positions applied of every other replica, and the last-writer-wins stamps
 * of items. The write path calls it inside each batch's transaction ({@link ReplicaState.record},
 * {@link ReplicaState.itemWrite}, {@link ReplicaState.mark}, {@link ReplicaState.endBatch}) and
 * after the commit ({@link ReplicaState.committed}); the replication link reaches it through the
 * {@link ReplicaHost} the write path builds over it.
 *
 * The outbox is a table, not memory: a batch is in it from the transaction that committed it until
 * every live replica applied it (the link says when: {@link ReplicaState.release}), so a replica
 * that was cut off from the log, or killed, publishes from the file, and a log that lost entries
 * is filled again from it.
 */
import { randomUUID } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import {
  InvalidInputError,
  type OriginPosition,
  type ReplicaHead,
  type ReplicaHost,
  type ReplicationGap,
  type ReplicatedBatch,
  type ReplicatedEvent,
  type ReplicationLinkStats,
  type WarningSink,
} from 'tidal-load';
import { openWriterConnection } from 'tidal-wal';
import { META, Meta, openStorage } from 'tidal-wal/storage';
import type { WritePath } from './write-path.js';
import type { OriginStats, ReplicaStats } from './replica-stats.js';

export type { OriginStats, ReplicaStats } from './replica-stats.js';

/** The first event of a foreign batch in the group commit: the `count` events after it are the batch's. */
export interface ReplMarkEvent {
  readonly type: 'repl-mark';
  readonly origin: string;
  readonly seq: number;
  readonly at: number;
  readonly position: string;
  readonly count: number;
  /**
   * The origin's seq this batch was queued after (what was applied of the origin then). The commit
   * drops the batch when that is no longer so: an earlier batch of the origin failed to commit, and
   * the follower reads both again.
   */
  readonly after: number;
  /** Set by the commit when it dropped the batch. */
  dropped?: boolean;
}

/** A stamp of an item write: the origin's time (ms) and the origin's replica id. */
export interface ItemStamp {
  readonly at: number;
  readonly origin: string;
}

/** Whether stamp `a` is after stamp `b`: later time, or the same time and a higher origin id. */
export function stampAfter(a: ItemStamp, b: ItemStamp): boolean {
  return a.at > b.at || (a.at === b.at && a.origin > b.origin);
}

/** Replication state of one database, on the writer connection. */
export class ReplicaState {
  readonly replicaId: string;
  readonly #meta: Meta;
  readonly #insertOutbox: Database.Statement;
  readonly #selectOutbox: Database.Statement<[number, number], { seq: number; at: number; body: string }>;
  readonly #countOutbox: Database.Statement<[number], number>;
  readonly #firstOutbox: Database.Statement<[], number | null>;
  readonly #deleteOutbox: Database.Statement<[number]>;
  readonly #setOrigin: Database.Statement;
  readonly #getClock: Database.Statement<[string], ItemStamp>;
  readonly #setClock: Database.Statement;
  /** What was committed of each origin: its seq is the bound below which a batch is a duplicate. */
  readonly #origins = new Map<string, OriginPosition>();
  #position: string | null;
  /** The own events of the batch being committed. */
  #buffer: ReplicatedEvent[] = [];
  #outboxAdded = false;
  readonly #listeners: (() => void)[] = [];
  /** The number of the last own batch; `#base`: the number own batches were first numbered above. */
  #batch: number;
  readonly #base: number;
  #batchAt = 0;
  /** The own batches through this number reached the log since this process opened the file. */
  #publishedThrough = -1;
  /** Per other replica: its latest batch number known here, and when its own report of it was read. */
  readonly #heads = new Map<string, { seq: number; reportedAt: number | null }>();
  /** Per other replica this one is behind: since when (this clock). */
  readonly #behindSince = new Map<string, number>();
  readonly #gaps = new Map<string, ReplicationGap>();
  readonly #lost: ReplicationGap[] = [];
  readonly #skip = new Set<string>();
  readonly #clock: () => number;

  constructor(db: Database.Database, meta: Meta, clock: () => number) {
    this.#meta = meta;
    this.#clock = clock;
    let id = meta.get(META.replicaId);
    if (id === undefined) {
      id = randomUUID();
      meta.set(META.replicaId, id);
    }
    this.replicaId = id;
    this.#position = meta.get(META.replicationPosition) ?? null;
    this.#insertOutbox = db.prepare('INSERT INTO repl_outbox (seq, at, body) VALUES (?, ?, ?)');
    this.#selectOutbox = db.prepare('SELECT seq, at, body FROM repl_outbox WHERE seq > ? ORDER BY seq LIMIT ?');
    this.#countOutbox = db.prepare<[number], number>('SELECT COUNT(*) FROM repl_outbox WHERE seq > ?').pluck();
    this.#firstOutbox = db.prepare<[], number | null>('SELECT MIN(seq) FROM repl_outbox').pluck();
    this.#deleteOutbox = db.prepare('DELETE FROM repl_outbox WHERE seq <= ?');
    this.#setOrigin = db.prepare('INSERT OR REPLACE INTO repl_origins (origin, seq, origin_at, applied_at) VALUES (?, ?, ?, ?)');
    this.#getClock = db.prepare('SELECT at, origin FROM repl_item_clock WHERE id = ?');
    this.#setClock = db.prepare('INSERT OR REPLACE INTO repl_item_clock (id, at, origin) VALUES (?, ?, ?)');
    const rows = db
      .prepare('SELECT origin, seq, origin_at AS originAt, applied_at AS appliedAt FROM repl_origins')
      .all() as OriginPosition[];
    for (const r of rows) this.#origins.set(r.origin, r);
    let base = meta.get(META.replicationBatchBase);
    if (base === undefined) {
      const maxRow = (db.prepare('SELECT MAX(seq) FROM repl_outbox').pluck().get() as number | null) ?? 0;
      base = Math.max(meta.get(META.lastSeq) ?? 0, maxRow);
      meta.set(META.replicationBatchBase, base);
    }
    this.#base = base;
    this.#batch = meta.get(META.replicationBatch) ?? base;
    const last = db.prepare('SELECT at FROM repl_outbox WHERE seq = ?').pluck().get(this.#batch) as number | undefined;
    this.#batchAt = last ?? 0;
  }

  // ---- inside a batch's transaction -------------------------------------------------------------

  /** Starts a batch: what a batch that failed to commit left in the buffer is dropped. */
  beginBatch(): void {
    this.#buffer = [];
    this.#outboxAdded = false;
    this.#pendingBatch = null;
  }

  /** An own write of the batch, for the outbox. */
  record(e: ReplicatedEvent): void {
    this.#buffer.push(e);
  }

  /**
   * An item write (upsert or delete) of item `id`. Own (`foreign` null): stamped with `now`, raised
   * above the item's stored stamp so it wins on every replica; returns the stamp. Foreign: applied
   * when its stamp is after the stored one; returns null when it lost.
   */
  itemWrite(id: string, now: number, foreign: ItemStamp | null): number | null {
    const stored = this.#getClock.get(id);
    if (foreign !== null) {
      if (stored !== undefined && !stampAfter(foreign, stored)) return null;
      this.#setClock.run(id, foreign.at, foreign.origin);
      return foreign.at;
    }
    const at = stored !== undefined && stored.at >= now ? stored.at + 1 : now;
    this.#setClock.run(id, at, this.replicaId);
    return at;
  }

  /** A foreign batch committed in this transaction: its origin's position and the log position. */
  mark(m: ReplMarkEvent, now: number): void {
    this.#setOrigin.run(m.origin, m.seq, m.at, now);
    this.#meta.set(META.replicationPosition, m.position);
  }

  /**
   * Ends a batch: its own writes become one outbox row, numbered one above the previous own batch
   * (the number is stored in the same transaction). A batch that fails to commit rolls the row and
   * the number back; {@link beginBatch} of the next one re-reads neither, so the number is taken
   * from the file again here.
   */
  endBatch(now: number): void {
    if (this.#buffer.length === 0) return;
    const n = (this.#meta.get(META.replicationBatch) ?? this.#base) + 1;
    this.#insertOutbox.run(n, now, JSON.stringify(this.#buffer));
    this.#meta.set(META.replicationBatch, n);
    this.#buffer = [];
    this.#outboxAdded = true;
    this.#pendingBatch = { seq: n, at: now };
  }

  #pendingBatch: { seq: number; at: number } | null = null;

  // ---- after the commit -------------------------------------------------------------------------

  /** The batch committed: its marks become the applied positions; the link hears of a new outbox row. */
  committed(marks: readonly ReplMarkEvent[], now: number): void {
    for (const m of marks) {
      this.#origins.set(m.origin, { origin: m.origin, seq: m.seq, originAt: m.at, appliedAt: now });
      this.#position = m.position;
      this.#skip.delete(m.origin);
      const gap = this.#gaps.get(m.origin);
      if (gap !== undefined) {
        if (m.seq >= gap.to) this.#gaps.delete(m.origin);
        else if (m.seq >= gap.from) this.#gaps.set(m.origin, { ...gap, from: m.seq + 1 });
      }
      if (m.seq >= (this.#heads.get(m.origin)?.seq ?? -1)) this.#behindSince.delete(m.origin);
    }
    if (this.#pendingBatch !== null) {
      this.#batch = this.#pendingBatch.seq;
      this.#batchAt = this.#pendingBatch.at;
      this.#pendingBatch = null;
    }
    if (this.#outboxAdded) {
      this.#outboxAdded = false;
      for (const l of this.#listeners) l();
    }
  }

  /** The seq of the last batch of `origin` committed here (−1: none). */
  appliedSeq(origin: string): number {
    return this.#origins.get(origin)?.seq ?? -1;
  }

  /**
   * Whether a foreign batch `(origin, seq, prev)` queued after `applied` of its origin is to be
   * applied now: `prev` was applied (or the gap was given up on). Otherwise the gap is recorded.
   */
  inOrder(origin: string, seq: number, prev: number, applied: number): boolean {
    this.learnHead(origin, seq, false);
    if (prev <= applied) return true;
    if (this.#skip.has(origin)) {
      this.#skip.delete(origin);
      return true;
    }
    const gap = this.#gaps.get(origin);
    if (gap === undefined || gap.from !== applied + 1) {
      this.#gaps.set(origin, { origin, from: applied + 1, to: seq - 1, since: gap?.since ?? this.#clock() });
    } else if (seq - 1 < gap.to) {
      this.#gaps.set(origin, { ...gap, to: seq - 1 });
    }
    return false;
  }

  // ---- for the link -----------------------------------------------------------------------------

  unpublished(limit: number): ReplicatedBatch[] {
    return this.#selectOutbox.all(this.#publishedThrough, limit).map((r) => ({
      origin: this.replicaId,
      seq: r.seq,
      prev: r.seq - 1 > this.#base ? r.seq - 1 : -1,
      at: r.at,
      events: JSON.parse(r.body) as ReplicatedEvent[],
    }));
  }

  unpublishedCount(): number {
    return this.#countOutbox.get(this.#publishedThrough) ?? 0;
  }

  /** Own batches the outbox holds. */
  retainedCount(): number {
    return this.#countOutbox.get(-1) ?? 0;
  }

  /** The batches through `seq` are in the log: the publisher goes on after them. */
  published(throughSeq: number): void {
    if (throughSeq > this.#publishedThrough) this.#publishedThrough = throughSeq;
  }

  /** Deletes the outbox rows through `seq`; a small transaction of its own, between batches. */
  release(throughSeq: number): void {
    this.#deleteOutbox.run(throughSeq);
  }

  /** The publisher appends again from `fromSeq`. */
  republish(fromSeq: number): void {
    if (fromSeq - 1 < this.#publishedThrough) this.#publishedThrough = fromSeq - 1;
  }

  head(): ReplicaHead {
    const first = this.#firstOutbox.get() ?? null;
    const last = this.#batch > this.#base ? this.#batch : -1;
    return { seq: last, at: last === -1 ? 0 : this.#batchAt, from: first ?? last + 1, first: this.#base + 1 };
  }

  /** `origin`'s latest batch number is at least `seq`; `reported`: the origin's own report of it. */
  learnHead(origin: string, seq: number, reported: boolean): void {
    const now = this.#clock();
    const known = this.#heads.get(origin);
    if (known === undefined || seq > known.seq) {
      const applied = this.appliedSeq(origin);
      if (seq > applied && !this.#behindSince.has(origin)) this.#behindSince.set(origin, now);
      this.#heads.set(origin, { seq, reportedAt: reported ? now : (known?.reportedAt ?? null) });
    } else if (reported) {
      this.#heads.set(origin, { seq: known.seq, reportedAt: now });
    }
  }

  gaps(): ReplicationGap[] {
    return [...this.#gaps.values()];
  }

  /** Gives up on `origin`'s gap: it is listed as lost now, and the origin's next batch applies whatever its `prev`. */
  skipGap(origin: string, missing?: { from: number; to: number }): void {
    const gap = this.#gaps.get(origin);
    this.#gaps.delete(origin);
    const lost = missing ?? gap;
    if (lost !== undefined) this.#lost.push({ origin, from: lost.from, to: lost.to, since: gap?.since ?? this.#clock() });
    this.#skip.add(origin);
  }

  onOutbox(listener: () => void): void {
    this.#listeners.push(listener);
  }

  position(): string | null {
    return this.#position;
  }

  origins(): OriginPosition[] {
    return [...this.#origins.values()];
  }

  stats(link: ReplicationLinkStats): ReplicaStats {
    const now = this.#clock();
    const ids = new Set([...this.#origins.keys(), ...this.#heads.keys()]);
    const origins: OriginStats[] = [];
    for (const origin of ids) {
      const o = this.#origins.get(origin) ?? { origin, seq: -1, originAt: 0, appliedAt: 0 };
      const head = this.#heads.get(origin);
      const behind = Math.max(0, (head?.seq ?? o.seq) - o.seq);
      const since = this.#behindSince.get(origin);
      origins.push({
        ...o,
        // Across two clocks: skew between the hosts adds to (or hides) the lag.
        lagMs: Math.max(0, o.appliedAt - o.originAt),
        head: Math.max(head?.seq ?? -1, o.seq),
        behind,
        behindMs: behind === 0 || since === undefined ? 0 : Math.max(0, now - since),
        headAgeMs: head?.reportedAt == null ? null : Math.max(0, now - head.reportedAt),
      });
    }
    return {
      replicaId: this.replicaId,
      unpublished: this.unpublishedCount(),
      retained: this.retainedCount(),
      position: this.#position,
      origins,
      gaps: this.gaps(),
      lost: [...this.#lost],
      link,
    };
  }
}

/** The {@link ReplicaHost} a link is started with: the state above and the write path's foreign entry. */
export function replicaHost(state: ReplicaState, writes: WritePath, clock: () => number, onWarning: WarningSink): ReplicaHost {
  return {
    replicaId: state.replicaId,
    now: clock,
    unpublished: (limit) => state.unpublished(limit),
    unpublishedCount: () => state.unpublishedCount(),
    published: (seq) => state.published(seq),
    release: (seq) => state.release(seq),
    republish: (seq) => state.republish(seq),
    head: () => state.head(),
    learnHead: (origin, seq) => state.learnHead(origin, seq, true),
    gaps: () => state.gaps(),
    skipGap: (origin, missing) => state.skipGap(origin, missing),
    onOutbox: (listener) => state.onOutbox(listener),
    position: () => state.position(),
    applyForeign: (batches) => writes.applyForeign(batches),
    origins: () => state.origins(),
    onWarning,
  };
}

/**
 * Writes a copy of the database a new replica starts from: the file as of the last commit (one
 * `sqlite3_serialize`, so consistent with the batches committed so far; it holds the main thread
 * for about the time it takes to copy the file in memory), to `file`, atomically (a temporary
 * file renamed).
 */
export function writeReplicaSnapshot(db: Database.Database, file: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, db.serialize());
  renameSync(tmp, file);
}

/**
 * Makes `dir` a new replica from a peer's snapshot (see {@link writeReplicaSnapshot}): the file
 * goes in as `dir`'s database, without the peer's replica id (the next open makes one), with the
 * peer recorded as applied through the last sequence number of the snapshot (so its batches up to
 * there, which the snapshot holds, are dropped when the stream brings them), without the peer's
 * outbox (the peer publishes it) and without its agent sessions (they stay on their replica). The
 * peer's stream position stays: the new replica reads on from where the peer had applied.
 * @throws InvalidInputError (`dir`) when `dir` already holds a database; (`snapshot`) when the file
 * is not a replicating database's snapshot.
 */
export function installReplicaSnapshot(snapshot: string, dir: string, now: number): void {
  const target = join(dir, 'tidal.db');
  if (existsSync(target) && statSync(target).size > 0) {
    throw new InvalidInputError('dir', 'a directory without a database (a replica is bootstrapped once, before its first open)', dir);
  }
  mkdirSync(dir, { recursive: true });
  const tmp = `${target}.bootstrap`;
  copyFileSync(snapshot, tmp);
  const db = openWriterConnection(tmp, 'process');
  try {
    openStorage(db, snapshot);
    const meta = new Meta(db);
    const peer = meta.get(META.replicaId);
    if (peer === undefined) {
      throw new InvalidInputError('snapshot', 'a snapshot of a database opened with a replication link (it has no replica id)', snapshot);
    }
    // The peer's own batches the snapshot holds: through its batch number (a peer that never
    // numbered a batch: through its last signal sequence number, as format 5 numbered them).
    const lastSeq =
      meta.get(META.replicationBatch) ??
      Math.max(meta.get(META.lastSeq) ?? 0, (db.prepare('SELECT MAX(seq) FROM signal_log').pluck().get() as number | null) ?? 0);
    db.transaction(() => {
      meta.delete(META.replicaId);
      meta.delete(META.replicationBatch);
      meta.delete(META.replicationBatchBase);
      db.prepare('INSERT OR REPLACE INTO repl_origins (origin, seq, origin_at, applied_at) VALUES (?, ?, ?, ?)').run(
        peer,
        lastSeq,
        now,
        now,
      );
      db.exec('DELETE FROM repl_outbox; DELETE FROM session_items; DELETE FROM sessions');
    })();
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
  renameSync(tmp, target);
}
