export {
  TidalError,
  InvalidInputError,
  ClosedError,
  CapacityError,
  InternalError,
  OverloadedError,
  BackpressureError,
  MemoryPressureError,
  RateLimitedError,
  SessionClosedError,
  WriterFailedError,
  AbortedError,
  TimeoutError,
  SlotTimeoutError,
  PooledSessionError,
  UnexpectedReplyError,
  DependencyUnavailableError,
  DirectoryLockedError,
  CursorExpiredError,
  MissingPackageError,
  SchemaChangeError,
  ERROR_CODES,
} from './errors.js';
export type { ErrorCode, CursorGoneReason } from './errors.js';
export { reviveError } from './revive-error.js';
export { COMPATIBLE_SCHEMA_CHANGES, INCOMPATIBLE_SCHEMA_CHANGES, describeSchemaChange } from './schema-changes.js';
export type { CompatibleSchemaChange, IncompatibleSchemaChange, SchemaChange, SchemaChangeKind } from './schema-changes.js';
export { WARNING_CODES, emitProcessWarning } from './warnings.js';
export type { TidalWarning, WarningCode, WarningSink } from './warnings.js';
export { DegradationLevel, levelName, checkLevel } from './levels.js';
export { STAGES, STAGE, STAGE_CLOCK, STAGE_TIMES_ON, stageStart, stageEnd, stageAdd, stageTotal, stageTotals } from './stage-times.js';
export type { Stage } from './stage-times.js';
export type { DegradationLevelName } from './levels.js';
export { LoadDetector, InFlightGuard, DEFAULT_THRESHOLDS, resolveThresholds, resolveAdmissionLimit, checkCriticality } from './detector.js';
export type { Thresholds, LoadView, Criticality } from './detector.js';
export { TokenBucket, MILLITOKENS_PER_TOKEN, checkRate, checkBurst, addMillitokens, takeWaitMs } from './token-bucket.js';
export { RateLimiter, RateLimiterConfig, RATE_LIMITER_DEFAULTS, resolveRateLimiterConfig } from './rate-limiter.js';
export type { LimitedOptions, RateLimit } from './rate-limiter.js';
export { LocalRateSource, LocalSlotSource, SLOT_CEILING, checkSlotLimit, checkLimitKey, periodOutcome } from './shared-limits.js';
export type {
  RateBackend,
  RateDecision,
  RateSource,
  PeriodOutcome,
  PeriodBackend,
  PeriodDecision,
  PeriodSource,
  SlotLease,
  SlotSource,
  AcquireOptions,
} from './shared-limits.js';
// The contract between a replicating database and the log that carries its batches (tidal-fleet implements the log).
export type {
  ReplicatedItem,
  ReplicatedEvent,
  ReplicatedBatch,
  ForeignBatch,
  OriginPosition,
  ReplicaHead,
  ReplicationGap,
  ReplicaHost,
  ReplicationLinkStats,
  ReplicationLink,
} from './replication.js';
