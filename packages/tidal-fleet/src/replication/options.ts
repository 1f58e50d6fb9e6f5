import { InvalidInputError, type WarningSink } from 'tidal-load';

/** Options of `RedisStreamReplication.connect`; every field optional. */
export interface RedisStreamReplicationOptions {
  /**
   * The stream's key: every replica of one deployment names the same.
   * @default 'tidal:replication'
   */
  stream?: string;
  /**
   * How long one `XREAD` waits for new entries, in milliseconds: the longest a close waits for the follower.
   * @default 1_000
   */
  blockMs?: number;
  /**
   * Entries read per `XREAD`: each is one batch (≤ the origin's `groupCommit.maxBatch` events),
   * so 64 entries are at most 64 k events queued into the group commit at once.
   * @default 64
   */
  readCount?: number;
  /**
   * Outbox batches appended per `MULTI` (one round trip).
   * @default 64
   */
  publishCount?: number;
  /**
   * Entries the stream keeps (`XADD … MAXLEN ~`): a replica away for longer than the fleet takes
   * to write this many batches cannot catch up from the stream (`TIDAL_REPLICATION_GAP`). At the
   * ≈ 200 bytes of a one-signal batch, a million entries are ≈ 200 MB of Redis memory.
   * @default 1_000_000
   */
  maxLen?: number;
  /**
   * The wait after a failed attempt (Redis away, a write refused), in milliseconds.
   * @default 250
   */
  retryMs?: number;
  /**
   * How often this replica reports what it applied (and its latest batch) and reads the others'
   * reports, in milliseconds: an outbox is released, and a lost batch appended again, at this pace.
   * @default 500
   */
  ackIntervalMs?: number;
  /**
   * How long a live replica's position of this origin may stay below what this origin published
   * before the batches after it are appended again, in milliseconds. Four report intervals: a
   * follower that reads on reports a new position well within it.
   * @default 2_000
   */
  resendAfterMs?: number;
  /**
   * How long a replica may stay silent (no report while this one reaches Redis) before this one
   * stops holding its outbox for it, in milliseconds. A replica away longer than this may miss
   * batches (`TIDAL_REPLICATION_GAP`) and is bootstrapped from a peer. At 60 one-signal batches/s
   * (≈ 130 bytes a row), ten minutes hold ≈ 36 000 rows, ≈ 5 MB of the database file.
   * @default 600_000
   */
  peerTimeoutMs?: number;
  /**
   * The clock the report, release and republish timings are measured on, milliseconds (not the
   * database's, which a deployment or a test may fix).
   * @default Date.now
   */
  clock?: () => number;
  /** Receives the replication warnings. @default the database's `onWarning` */
  onWarning?: WarningSink;
}

export const DEFAULTS = Object.freeze({
  stream: 'tidal:replication',
  blockMs: 1_000,
  readCount: 64,
  publishCount: 64,
  maxLen: 1_000_000,
  retryMs: 250,
  ackIntervalMs: 500,
  resendAfterMs: 2_000,
  peerTimeoutMs: 600_000,
});

export function checkWhole(field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidInputError(`options.${field}`, `a whole number from ${min} to ${max}`, v);
  }
  return v;
}
