// The public API of tidal: what README.md, docs/errors.md and docs/warnings.md describe. The other
// packages' classes (the load detector, the rate limiter, the write path, the signal store) are
// reached through TidalDb, never imported by an application.
export { TidalDb } from './db.js';
export { TidalDbBuilder } from './builder.js';
export { DEFAULTS } from './options.js';
export { autoAdmissionLimit } from './load-options.js';
export { querySlots } from './query-pool.js';
export type { QueryStats, LatencySummary, VectorSearchMode } from './stats.js';
export type { MemoryStats } from './memory-stats.js';
export type { NativeHeapStats } from './native-heap.js';
export type { ThreadMemory } from 'tidal-query';
export type { TextEmbedder, EmbedAnswer, EmbedCallOptions, SemanticFallback } from './embedding.js';
export type { TidalOptions, CapacityOptions, WorkerModule, AnnOptions, WarmOptions } from './options.js';
export type { AnnBuildStats } from './ann-build.js';
export type { ThreadDb } from './thread-db.js';
export type { DbCalls } from './thread-methods.js';
export type { WorkerModuleExports } from './worker-host.js';
export type { WorkSharingOptions } from './sharing.js';
export type { LevelReason } from './level-choice.js';
export type { MetricsRegistry } from './metrics.js';
export type { MigrateOptions, SchemaDefinition, SignalKindDefinition } from './schema.js';
export type { DiversityOf, FieldsOf, FieldValue, FilterOf, KindOf, MetadataOf } from './schema-types.js';
export { MAX_ID_LENGTH, MAX_TEXT_LENGTH, MAX_LIMIT, MAX_BATCH, MAX_METADATA_BYTES } from './validate.js';
export type {
  Item,
  ItemInput,
  SignalInput,
  RetrieveRequest,
  RetrieveFields,
  SearchFields,
  RetrieveResults,
  SearchRequest,
  SearchResults,
  QueryControl,
} from './types.js';
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
  DirectoryLockedError,
  CursorExpiredError,
  MissingPackageError,
  SchemaChangeError,
  COMPATIBLE_SCHEMA_CHANGES,
  INCOMPATIBLE_SCHEMA_CHANGES,
  ERROR_CODES,
  WARNING_CODES,
  DegradationLevel,
  levelName,
  DEFAULT_THRESHOLDS,
  RateLimiterConfig,
  RATE_LIMITER_DEFAULTS,
} from 'tidal-load';
export type {
  ErrorCode,
  CursorGoneReason,
  TidalWarning,
  WarningCode,
  WarningSink,
  DegradationLevelName,
  Thresholds,
  LoadView,
  LimitedOptions,
  Criticality,
  ReplicationLink,
  ReplicationLinkStats,
  OriginPosition,
  ReplicationGap,
  SchemaChange,
  SchemaChangeKind,
  CompatibleSchemaChange,
  IncompatibleSchemaChange,
} from 'tidal-load';
export type { OriginStats, ReplicaStats } from './replica-stats.js';
export { SESSION_DEFAULTS } from './session-options.js';
export { CURSOR_DEFAULTS } from './pinned-rankings.js';
export type { CursorOptions, PinnedRankingStats } from './pinned-rankings.js';
export type { User, UserInput } from './user-types.js';
export { USER_DEFAULTS } from './users.js';
export type { UserCreatorInput, UserFilter, UserItemInput } from './user-requests.js';
export type { SessionHandle, SessionInfo, SessionSummary, OpenSessionOptions } from './sessions.js';
export type { SessionOptions } from './session-options.js';
export type {
  Diversity,
  Explain,
  Filter,
  FieldCondition,
  RangeCondition,
  Profile,
  ForYouWeights,
  RetrievedItem,
  SearchHit,
  SignalValues,
  WarmResult,
  AnnSource,
  AnnWarning,
  WindowName,
  VelocityWindow,
} from 'tidal-query';
export type { Durability, GroupCommitOptions, MemoryGuardOptions } from 'tidal-wal';
export { RETRY_AFTER_MIN_MS, RETRY_AFTER_MAX_MS } from 'tidal-wal';
