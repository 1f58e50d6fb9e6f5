/**
 * Warnings: conditions the database recovered from by itself but that an operator should know
 * about. They never stop a call; by default they go to `process.emitWarning` (printed on stderr as
 * `(node:PID) [CODE] TidalWarning: message`), or to the `onWarning` callback given at open.
 *
 * The codes are public API like the error codes beside them: `docs/warnings.md` lists them and a
 * test ties that list to {@link WARNING_CODES} both ways.
 */

export const WARNING_CODES = [
  /** On open, fewer events were recovered than had been acknowledged: the tail of SQLite's WAL was cut off. */
  'TIDAL_WAL_TAIL_LOST',
  /** The acknowledgement mark could not be written; tail-loss detection is off until the next open. */
  'TIDAL_ACK_MARK_FAILED',
  /** The memory guard is off because the host has no meminfo file (not Linux) and the floor was `'auto'`. */
  'TIDAL_MEMORY_GUARD_UNAVAILABLE',
  /** The memory guard could not re-read its meminfo file and keeps its last sample. */
  'TIDAL_MEMORY_GUARD_STALE',
  /** The WAL checkpoint worker failed; SQLite checkpoints on the main thread again. */
  'TIDAL_WAL_CHECKPOINTER_FAILED',
  /** The saved ANN index was damaged or unreadable and was rebuilt from the items. */
  'TIDAL_ANN_SNAPSHOT_REBUILT',
  /** The shared ANN index could not be built or saved; each query worker built its own. */
  'TIDAL_ANN_SNAPSHOT_UNSAVED',
  /** The saved catalog snapshot was damaged or newer than the items table; the query workers read the items table instead. */
  'TIDAL_CATALOG_SNAPSHOT_UNUSABLE',
  /** The ANN index is being built on a thread of its own; vector searches are exact (and slower) until it is ready. */
  'TIDAL_ANN_BUILDING',
  /** The ANN index build on its own thread failed; vector searches stay exact, and the next `warm()` tries again. */
  'TIDAL_ANN_BUILD_FAILED',
  /** `close()` waits (up to `ann.closeWaitMs`) for an ANN index build on its own thread; the progress so far. */
  'TIDAL_ANN_CLOSE_WAIT',
  /** `close()` cut an ANN index build short and saved what it had built; the next open adds the rest. */
  'TIDAL_ANN_BUILD_RESUMABLE',
  /** An `onSessionExpired` callback threw or rejected; the session was closed all the same. */
  'TIDAL_SESSION_CALLBACK_FAILED',
  /** Closing expired sessions failed; a session whose row could not be removed is closed again by the next open. */
  'TIDAL_SESSION_SWEEP_FAILED',
  /** Code that runs after a commit threw (a bug): the writer stopped, later writes get WriterFailedError. */
  'TIDAL_WRITER_STOPPED',
  /** A signal-state checkpoint failed and rolled back; the log still holds every event, the next one is tried later. */
  'TIDAL_CHECKPOINT_FAILED',
  /** The shared rate limit's Redis cannot be reached; this replica limits on a local bucket at the fleet quota ÷ replicas. */
  'TIDAL_SHARED_LIMIT_LOCAL',
  /** The shared rate limit's Redis answers again; decisions are shared again. */
  'TIDAL_SHARED_LIMIT_RESTORED',
  /** The shared concurrency slots' PostgreSQL cannot be reached; this replica holds each limit ÷ replicas in process. */
  'TIDAL_SHARED_SLOTS_LOCAL',
  /** The shared concurrency slots' PostgreSQL answers again; slots are held on it again. */
  'TIDAL_SHARED_SLOTS_RESTORED',
  /** The shared fixed-window limit's Redis cannot be reached; requests are admitted unchecked (fail-open). */
  'TIDAL_SHARED_LIMIT_OPEN',
  /** Items upserted without an embedding could not get one from the embedder; they were written without one. */
  'TIDAL_EMBEDDING_SKIPPED',
  /** A query worker could not set the nice value `workerNice` asked for (not Linux, or refused); it runs at the process's. */
  'TIDAL_WORKER_NICE_UNSET',
  /** The replication log's Redis cannot be reached; writes are acknowledged and served locally and published when it returns. */
  'TIDAL_REPLICATION_AWAY',
  /** The replication log's Redis answers again; the outbox is published and the follower reads on. */
  'TIDAL_REPLICATION_RESTORED',
  /** Foreign batches could not be applied (capacity, or an entry that is not a batch); the follower retries or skips, as the message says. */
  'TIDAL_REPLICATION_STALLED',
  /** The replication log no longer holds the entries after this replica's stored position (trimmed by retention). */
  'TIDAL_REPLICATION_GAP',
  /** The shared memory holding user, session and co-engagement state for other threads is full; their personalized reads go to the database's thread. */
  'TIDAL_SHARED_STATE_FULL',
  /** On open, the given schema differed from the stored one; the changes were applied and stored. */
  'TIDAL_SCHEMA_CHANGED',
] as const;

export type WarningCode = (typeof WARNING_CODES)[number];

/** What an `onWarning` callback receives. */
export interface TidalWarning {
  /** Stable: match on it. */
  code: WarningCode;
  /** For people: names what happened and what was done about it; may change between versions. */
  message: string;
}

/** Receives every warning (see `onWarning`). */
export type WarningSink = (warning: TidalWarning) => void;

/** The default sink: a Node.js process warning of type `TidalWarning` with the code set. */
export function emitProcessWarning(warning: TidalWarning): void {
  process.emitWarning(warning.message, { type: 'TidalWarning', code: warning.code });
}
