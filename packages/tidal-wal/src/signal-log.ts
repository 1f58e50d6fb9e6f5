import type Database from 'better-sqlite3';
import { META, Meta } from './storage/meta.js';

/** One durable signal event, as logged. `ordinal` and `kind` are the dense ids the store uses. */
export interface LogRecord {
  seq: number;
  ordinal: number;
  kind: number;
  weight: number;
  at: number;
  session: string | null;
}

/**
 * The durable log of signal events, in SQLite. Rows are appended inside the group-commit
 * transaction; on open the signal state is rebuilt from the last checkpoint plus the rows after it.
 * Its tables (`signal_log`, and `tidal_meta` for {@link META}.lastSeq and {@link META}.checkpointSeq)
 * are created by the file format (`storage/ddl.ts`), not here.
 */
export class SignalLog {
  readonly #db: Database.Database;
  readonly #insert: Database.Statement;
  readonly #meta: Meta;
  readonly #deleteRange: Database.Statement;
  /** Rows up to this sequence number are covered by the checkpoint (dead). */
  #deadThrough: number;
  /** Dead rows up to this sequence number are deleted. */
  #reclaimedThrough: number;

  constructor(db: Database.Database) {
    this.#db = db;
    this.#insert = db.prepare('INSERT INTO signal_log (seq, ordinal, kind, weight, at, session) VALUES (?, ?, ?, ?, ?, ?)');
    this.#meta = new Meta(db);
    this.#deleteRange = db.prepare('DELETE FROM signal_log WHERE seq > ? AND seq <= ?');
    this.#deadThrough = this.checkpointSeq();
    const first = db.prepare('SELECT MIN(seq) FROM signal_log').pluck().get() as number | null;
    this.#reclaimedThrough = first === null ? this.#deadThrough : Math.min(first - 1, this.#deadThrough);
  }

  /** Appends `event` as number `seq`, without building a record object (the per-signal hot path). */
  appendAt(seq: number, event: Readonly<Omit<LogRecord, 'seq'>>): void {
    this.#insert.run(seq, event.ordinal, event.kind, event.weight, event.at, event.session);
  }

  /** Records the highest sequence number handed out, so numbers stay monotonic across restarts. */
  setLastSeq(seq: number): void {
    this.#meta.set(META.lastSeq, seq);
  }

  /** The highest sequence number ever committed (0 for a new database). */
  lastSeq(): number {
    const meta = this.#meta.get(META.lastSeq) ?? 0;
    const logged = (this.#db.prepare('SELECT MAX(seq) FROM signal_log').pluck().get() as number | null) ?? 0;
    return Math.max(meta, logged);
  }

  /** The sequence number the last checkpoint covers (0: none). */
  checkpointSeq(): number {
    return this.#meta.get(META.checkpointSeq) ?? 0;
  }

  /**
   * Marks everything up to `seq` as covered by a checkpoint, leaving the rows in place: replay
   * starts after `seq`, so they are dead, and {@link reclaim} deletes them a slice at a time.
   * Deleting a million rows at once holds the main thread for hundreds of milliseconds; spread over
   * the following batches it costs each one a little. Call in the checkpoint's transaction.
   */
  checkpointThrough(seq: number): void {
    this.#meta.set(META.checkpointSeq, seq);
    this.#deadThrough = seq;
  }

  /** Deletes up to `maxSeqs` sequence numbers' worth of dead rows; call inside a transaction. Returns the rows deleted. */
  reclaim(maxSeqs: number): number {
    if (this.#reclaimedThrough >= this.#deadThrough) return 0;
    const to = Math.min(this.#deadThrough, this.#reclaimedThrough + maxSeqs);
    const n = this.#deleteRange.run(this.#reclaimedThrough, to).changes;
    this.#reclaimedThrough = to;
    return n;
  }

  /** The records after `afterSeq`, in sequence order. */
  *replay(afterSeq: number): IterableIterator<LogRecord> {
    const stmt = this.#db.prepare('SELECT seq, ordinal, kind, weight, at, session FROM signal_log WHERE seq > ? ORDER BY seq');
    yield* stmt.iterate(afterSeq) as IterableIterator<LogRecord>;
  }
}
