export { GroupCommit, GROUP_COMMIT_DEFAULTS, MAX_QUEUE_EVENTS_LIMIT, resolveGroupCommitOptions } from './group-commit.js';
export type { GroupCommitOptions, GroupCommitHooks, GroupCommitDeps, GroupCommitStats } from './group-commit.js';
export { DrainRate, retryAfterMs, RETRY_AFTER_MIN_MS, RETRY_AFTER_MAX_MS, DRAIN_HALF_LIFE_MS } from './backpressure.js';
export {
  MemoryGuard,
  MEMORY_GUARD_DEFAULTS,
  MEMORY_SAMPLE_INTERVAL_MS,
  AUTO_FLOOR_MIN_BYTES,
  AUTO_FLOOR_SHARE,
  autoFloorBytes,
  parseMeminfo,
  resolveMemoryGuardOptions,
} from './memory-guard.js';
export type { MemoryGuardOptions, FilledMemoryGuardOptions, MemInfo } from './memory-guard.js';
export { AckMark } from './ack-mark.js';
// The warning catalogue lives beside the errors in tidal-load; re-exported here, where it began.
export { WARNING_CODES, emitProcessWarning } from 'tidal-load';
export type { TidalWarning, WarningCode, WarningSink } from 'tidal-load';
export { SignalLog } from './signal-log.js';
export type { LogRecord } from './signal-log.js';
export { openWriterConnection, assertDurability, DURABILITIES } from './connection.js';
export type { Durability } from './connection.js';
export { SlotCheckpoint, CHECKPOINT_CHUNK_BYTES } from './slot-checkpoint.js';
export { WalCheckpointer, WAL_CHECKPOINT_POLL_MS } from './wal-checkpointer.js';
