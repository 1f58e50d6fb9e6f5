/**
 * The database's side of replication (see docs/scale-out.md#replication): the outbox of its own
 * committed batches, the positions applied of every other replica, and the last-writer-wins stamps
 * of items. The write path calls it inside each batch's transaction ({@link ReplicaState.record},
 * {@link ReplicaState.itemWrite}, {@link ReplicaState.mark}, {@link ReplicaState.endBatch}) and
 * after the commit ({@link ReplicaState.committed}); the replication link reaches it through the
 * {@link ReplicaHost} the write path builds over it.
 *
 * The outbox is a table, not memory: a batch is in it from the transaction that committed it until
 * the log has it, so a replica that was cut off from the log, or killed, publishes from the file.
 */
import { randomUUID } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import {
  InvalidInputError,
  type OriginPosition,
  type ReplicaHost,
  type ReplicatedBatch,
  type ReplicatedEvent,
  type ReplicationLinkStats,
  type WarningSink,
} from 'tidal-load';
import { openWriterConnection } from 'tidal-wal';
import { META, Meta, openStorage } from 'tidal-wal/storage';
import type { WritePath } from './write-path.js';
import type { ReplicaStats } from './replica-stats.js';

export type { ReplicaStats } from './replica-stats.js';

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
  readonly #selectOutbox: Database.Statement<[number], { seq: number; at: number; body: string }>;
  readonly #countOutbox: Database.Statement<[], number>;
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

  constructor(db: Database.Database, meta: Meta) {
    this.#meta = meta;
    let id = meta.get(META.replicaId);
    if (id === undefined) {
      id = randomUUID();
      meta.set(META.replicaId, id);
    }
    this.replicaId = id;
    this.#position = meta.get(META.replicationPosition) ?? null;
    this.#insertOutbox = db.prepare('INSERT INTO repl_outbox (seq, at, body) VALUES (?, ?, ?)');
    this.#selectOutbox = db.prepare('SELECT seq, at, body FROM repl_outbox ORDER BY seq LIMIT ?');
    this.#countOutbox = db.prepare<[], number>('SELECT COUNT(*) FROM repl_outbox').pluck();
    this.#deleteOutbox = db.prepare('DELETE FROM repl_outbox WHERE seq <= ?');
    this.#setOrigin = db.prepare('INSERT OR REPLACE INTO repl_origins (origin, seq, origin_at, applied_at) VALUES (?, ?, ?, ?)');
    this.#getClock = db.prepare('SELECT at, origin FROM repl_item_clock WHERE id = ?');
    this.#setClock = db.prepare('INSERT OR REPLACE INTO repl_item_clock (id, at, origin) VALUES (?, ?, ?)');
    const rows = db
      .prepare('SELECT origin, seq, origin_at AS originAt, applied_at AS appliedAt FROM repl_origins')
      .all() as OriginPosition[];
    for (const r of rows) this.#origins.set(r.origin, r);
  }

  // ---- inside a batch's transaction -------------------------------------------------------------

  /** Starts a batch: what a batch that failed to commit left in the buffer is dropped. */
  beginBatch(): void {
    this.#buffer = [];
    this.#outboxAdded = false;
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

  /** Ends a batch: its own writes become one outbox row, numbered by the batch's first sequence number. */
  endBatch(firstSeq: number, now: number): void {
    if (this.#buffer.length === 0) return;
    this.#insertOutbox.run(firstSeq, now, JSON.stringify(this.#buffer));
    this.#buffer = [];
    this.#outboxAdded = true;
  }

  // ---- after the commit -------------------------------------------------------------------------

  /** The batch committed: its marks become the applied positions; the link hears of a new outbox row. */
  committed(marks: readonly ReplMarkEvent[], now: number): void {
    for (const m of marks) {
      this.#origins.set(m.origin, { origin: m.origin, seq: m.seq, originAt: m.at, appliedAt: now });
      this.#position = m.position;
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

  // ---- for the link -----------------------------------------------------------------------------

  unpublished(limit: number): ReplicatedBatch[] {
    return this.#selectOutbox.all(limit).map((r) => ({
      origin: this.replicaId,
      seq: r.seq,
      at: r.at,
      events: JSON.parse(r.body) as ReplicatedEvent[],
    }));
  }

  unpublishedCount(): number {
    return this.#countOutbox.get() ?? 0;
  }

  /** Deletes the outbox rows through `seq`; a small transaction of its own, between batches. */
  published(throughSeq: number): void {
    this.#deleteOutbox.run(throughSeq);
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
    return {
      replicaId: this.replicaId,
      unpublished: this.unpublishedCount(),
      position: this.#position,
      // Across two clocks: skew between the hosts adds to (or hides) the lag.
      origins: this.origins().map((o) => ({ ...o, lagMs: Math.max(0, o.appliedAt - o.originAt) })),
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
    const lastSeq = Math.max(
      meta.get(META.lastSeq) ?? 0,
      (db.prepare('SELECT MAX(seq) FROM signal_log').pluck().get() as number | null) ?? 0,
    );
    db.transaction(() => {
      meta.delete(META.replicaId);
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
