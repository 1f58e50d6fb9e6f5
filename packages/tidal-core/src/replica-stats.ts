// Its own module, so the public declarations that name it do not reach the file format
// (tidal-wal/storage) through replication.ts.
import type { OriginPosition, ReplicationGap, ReplicationLinkStats } from 'tidal-load';

/** Per other replica in `stats().replication.origins`. */
export interface OriginStats extends OriginPosition {
  /** How long after its commit at the origin the last batch applied here committed here (across two clocks). */
  lagMs: number;
  /** The origin's latest batch number known here (its report through the log, or a later batch read). */
  head: number;
  /** Batches of the origin committed there and not yet applied here: `head − seq`, 0 when caught up. */
  behind: number;
  /** How long this replica has been behind the origin (since it learned of a batch it has not applied), 0 when caught up. */
  behindMs: number;
  /** How old the origin's last report of its head is, ms (null: none yet); while the log is away it grows, and `behind` cannot see past it. */
  headAgeMs: number | null;
}

/** `stats().replication`: this replica's outbox and what it applied of the others. */
export interface ReplicaStats {
  /** This database's replica id. */
  replicaId: string;
  /** Own committed batches not yet in the log. */
  unpublished: number;
  /** Own batches the outbox holds: not yet applied by every live replica (published or not). */
  retained: number;
  /** The log position of the last foreign batch applied, or null. */
  position: string | null;
  /** Per other replica: the last batch applied, how long after its commit there it committed here, and how far behind it this replica is. */
  origins: OriginStats[];
  /** Batches of another replica this one misses and waits for (the origin republishes them). */
  gaps: ReplicationGap[];
  /** Gaps given up on: the origin no longer held the batches; the replica needs a bootstrap to have them. */
  lost: ReplicationGap[];
  /** What the link reports (connected, published, read, applied). */
  link: ReplicationLinkStats;
}
