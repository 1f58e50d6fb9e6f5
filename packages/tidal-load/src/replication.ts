/**
 * The contract between a database that replicates its writes and the log that carries them to the
 * other replicas (tidal-fleet's `RedisStreamReplication` is one; a test can be another). The
 * database is the {@link ReplicaHost}: it keeps the outbox of its own committed batches, applies the
 * batches of other replicas through its own group commit, and stores the log position it applied in
 * the same transaction. The {@link ReplicationLink} moves batches between the two and decides
 * nothing about their content.
 */
import type { WarningSink } from './warnings.js';

/** An item as it travels: what the origin wrote, with its last-writer-wins stamp. */
export interface ReplicatedItem {
  readonly id: string;
  readonly text: string | null;
  readonly metadata: Record<string, unknown>;
  readonly createdAt: number;
  readonly embedding: readonly number[] | null;
}

/**
 * One write of a batch. Signals name their item and kind by name (replicas map them to their own
 * ordinals and kind numbers); item writes carry `stamp`, the origin's clock at the write, raised
 * above the stamp the item had there, so the last writer wins everywhere (ties by origin id).
 */
export type ReplicatedEvent =
  | {
      readonly t: 'signal';
      readonly item: string;
      readonly kind: string;
      readonly weight: number;
      readonly at: number;
      readonly user: string | null;
      /**
       * For a signal that moved its user's preference and creator affinity at the origin: the
       * item's creator and embedding (Float32, little-endian, base64) as the origin read them, so
       * every replica moves the user's state alike whether or not, and in which version, it holds
       * the item when the signal arrives. Absent: the follower reads the item it holds.
       */
      readonly f?: { readonly c: string | null; readonly v: string | null };
    }
  | { readonly t: 'upsert'; readonly item: ReplicatedItem; readonly stamp: number }
  | { readonly t: 'delete'; readonly id: string; readonly stamp: number }
  | {
      readonly t: 'user-upsert';
      readonly id: string;
      readonly metadata: Record<string, unknown>;
      readonly embedding: readonly number[] | null;
    }
  | { readonly t: 'user-delete'; readonly id: string }
  | { readonly t: 'hide' | 'unhide'; readonly user: string; readonly item: string }
  | { readonly t: 'block' | 'unblock' | 'follow' | 'unfollow'; readonly user: string; readonly creator: string };

/** One committed batch of one replica's own writes. `(origin, seq)` names it across the fleet. */
export interface ReplicatedBatch {
  /** The replica that took the writes. */
  readonly origin: string;
  /** The origin's batch number: one above its previous batch's, so a follower sees a batch it misses. */
  readonly seq: number;
  /**
   * The number of the origin's batch before this one, or −1 when none is to be waited for (the
   * origin's first numbered batch, or an entry written before batches carried it). A follower
   * applies the batch only once it applied `prev`.
   */
  readonly prev: number;
  /** The origin's clock when the batch committed, in milliseconds (replication lag is measured from it). */
  readonly at: number;
  readonly events: readonly ReplicatedEvent[];
}

/** A foreign batch read from the log, with the log position just past it. */
export interface ForeignBatch {
  readonly batch: ReplicatedBatch;
  /** The log's position of this batch; stored with it, so a restart reads on after it. */
  readonly position: string;
}

/** Batches of one origin this replica has not applied while it holds or has seen a later one. */
export interface ReplicationGap {
  readonly origin: string;
  /** The first batch number missing. */
  readonly from: number;
  /** The last batch number missing (the batch after it was seen). */
  readonly to: number;
  /** When this replica first saw the gap, its clock (ms). */
  readonly since: number;
}

/** This replica's latest own batch and what of its outbox it still holds. */
export interface ReplicaHead {
  /** The number of the last own batch committed (−1: none yet). */
  readonly seq: number;
  /** Its commit time, ms (0: none yet). */
  readonly at: number;
  /** The lowest own batch number still held in the outbox (`seq + 1` when it holds none). */
  readonly from: number;
  /** The number of the first own batch there ever was: numbers below it never existed. */
  readonly first: number;
}

/** What the host applied of one origin, as stored. */
export interface OriginPosition {
  readonly origin: string;
  /** The origin's `seq` of the last batch applied. */
  readonly seq: number;
  /** The origin's commit time of that batch. */
  readonly originAt: number;
  /** This replica's clock when it committed that batch. */
  readonly appliedAt: number;
}

/** What a database offers the link that replicates it. */
export interface ReplicaHost {
  /** This database's replica id: made on the first open with replication, stored in the file. */
  readonly replicaId: string;
  /** The host's clock, milliseconds. */
  now(): number;
  /**
   * Own committed batches not yet published, oldest first, at most `limit` (read from the file, not
   * memory). After a restart every batch the outbox holds counts as not yet published.
   */
  unpublished(limit: number): ReplicatedBatch[];
  /** Own batches not yet published. */
  unpublishedCount(): number;
  /** The batches through `seq` reached the log; they stay in the outbox until {@link release}d. */
  published(throughSeq: number): void;
  /** Every live replica applied the own batches through `seq`: they leave the outbox. */
  release(throughSeq: number): void;
  /** The own batches from `fromSeq` on that the outbox holds are to be appended again (the log lost them). */
  republish(fromSeq: number): void;
  /** This replica's latest own batch and the lowest one its outbox holds. */
  head(): ReplicaHead;
  /** Another replica's latest batch number as it reported it, for how far behind it this replica is. */
  learnHead(origin: string, seq: number): void;
  /** The gaps this replica waits on, per origin. */
  gaps(): readonly ReplicationGap[];
  /**
   * The origin cannot fill its gap here (its outbox no longer holds the batches): the next batch of
   * `origin` is applied whatever its `prev`, and the gap is recorded as lost. `missing`: the range
   * lost when no batch after it was seen (the follower read the whole stream and the origin's
   * report says it holds neither), recorded instead of a held-back gap.
   */
  skipGap(origin: string, missing?: { from: number; to: number }): void;
  /** Calls `listener` after every commit that added an own batch to the outbox. */
  onOutbox(listener: () => void): void;
  /** The log position stored with the last foreign batch applied; null before the first. */
  position(): string | null;
  /**
   * Applies foreign batches through the group commit, each with its position in the same
   * transaction; a batch whose `(origin, seq)` is not above what was applied of its origin is
   * dropped, and one whose `prev` is above it is held back as a gap ({@link gaps}). Resolves with the batches applied once they are durable; rejects as a write does
   * (`BackpressureError`, `CapacityError`, `ClosedError`), in which case the link reads again
   * from {@link position}.
   */
  applyForeign(batches: readonly ForeignBatch[]): Promise<number>;
  /** What was applied of each origin. */
  origins(): readonly OriginPosition[];
  readonly onWarning: WarningSink;
}

/** What a replication link reports (`stats().replication.link`). */
export interface ReplicationLinkStats {
  /** Whether the link reaches its log now. */
  readonly connected: boolean;
  /** Own batches appended to the log since start. */
  readonly published: number;
  /** Entries read from the log since start (own ones included). */
  readonly read: number;
  /** Foreign batches the host applied since start. */
  readonly applied: number;
}

/** Carries a host's batches to the other replicas and theirs to it. */
export interface ReplicationLink {
  /** Starts publishing the host's outbox and following the others; called once, after the database opened. */
  start(host: ReplicaHost): void;
  stats(): ReplicationLinkStats;
  /** Stops both loops and the connections; idempotent. The database closes it before it closes. */
  close(): Promise<void>;
}
