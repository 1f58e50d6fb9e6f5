export { TidalDb, TidalDbBuilder } from './db.js';
export type { LoadView } from './db.js';
export { DEFAULTS, autoAdmissionLimit } from './options.js';
export type { QueryStats, LatencySummary } from './stats.js';
export type { TidalOptions, CapacityOptions } from './options.js';
export type { SchemaDefinition, SignalKindDefinition } from './schema.js';
export { MAX_ID_LENGTH, MAX_TEXT_LENGTH, MAX_LIMIT, MAX_BATCH, MAX_METADATA_BYTES } from './validate.js';
export type {
  Item,
  ItemInput,
  SignalInput,
  RetrieveRequest,
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
  ERROR_CODES,
  DegradationLevel,
  levelName,
  levelPlan,
  LoadDetector,
  InFlightGuard,
  DEFAULT_THRESHOLDS,
} from 'tidal-load';
export type { ErrorCode, DegradationLevelName, LevelPlan, Thresholds } from 'tidal-load';
export { RateLimiterConfig, RateLimiter, TokenBucket, RATE_LIMITER_DEFAULTS } from 'tidal-load';
export type { LimitedOptions, RateLimit, RateLimiterStats } from 'tidal-load';
export { SESSION_DEFAULTS } from './sessions.js';
export type { SessionHandle, SessionInfo, SessionOptions, SessionSummary, OpenSessionOptions } from './sessions.js';
export type {
  Diversity,
  Explain,
  Filter,
  FieldCondition,
  RangeCondition,
  Profile,
  RetrievedItem,
  SearchHit,
  SignalValues,
  WindowName,
  VelocityWindow,
} from 'tidal-query';
export type { Durability, GroupCommitOptions, MemoryGuardOptions, TidalWarning, WarningCode } from 'tidal-wal';
export { RETRY_AFTER_MIN_MS, RETRY_AFTER_MAX_MS, WARNING_CODES } from 'tidal-wal';
