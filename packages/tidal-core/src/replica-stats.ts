// Its own module, so the public declarations that name it do not reach the file format
// (tidal-wal/storage) through replication.ts.
import type { OriginPosition, ReplicationLinkStats } from 'tidal-load';

/** `stats().replication`: this replica's outbox and what it applied of the others. */
export interface ReplicaStats {
  /** This database's replica id. */
  replicaId: string;
  /** Own committed batches not yet in the log. */
  unpublished: number;
  /** The log position of the last foreign batch applied, or null. */
  position: string | null;
  /** Per other replica: the last batch applied, and how long after its commit there it committed here. */
  origins: (OriginPosition & { lagMs: number })[];
  /** What the link reports (connected, published, read, applied). */
  link: ReplicationLinkStats;
}
