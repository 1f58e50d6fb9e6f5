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
  ERROR_CODES,
  describeValue,
} from './errors.js';
export type { ErrorCode, DependencyFailure } from './errors.js';
export { WARNING_CODES, emitProcessWarning } from './warnings.js';
export type { TidalWarning, WarningCode, WarningSink } from './warnings.js';
export { DegradationLevel, levelName, isDegradationLevel, checkLevel } from './levels.js';
export type { DegradationLevelName } from './levels.js';
export {
  LoadDetector,
  InFlightGuard,
  DEFAULT_THRESHOLDS,
  resolveThresholds,
  resolveAdmissionLimit,
  checkCriticality,
  CRITICALITIES,
  SHEDDABLE_LOAD_FACTOR,
} from './detector.js';
export type { Thresholds, LoadDetectorOptions, LoadView, Criticality } from './detector.js';
export { TokenBucket, MAX_BURST, MILLITOKENS_PER_TOKEN, checkRate, checkBurst, addMillitokens, takeWaitMs } from './token-bucket.js';
export { RateLimiter, RateLimiterConfig, RATE_LIMITER_DEFAULTS, resolveRateLimiterConfig } from './rate-limiter.js';
export type { LimitedOptions, RateLimit, RateLimiterStats } from './rate-limiter.js';
export {
  LocalRateSource,
  LocalPeriodSource,
  LocalSlotSource,
  SLOT_CEILING,
  checkSlotLimit,
  checkLimitKey,
  periodOutcome,
} from './shared-limits.js';
export type {
  RateBackend,
  RateDecision,
  RateSource,
  PeriodOutcome,
  PeriodBackend,
  PeriodDecision,
  PeriodSource,
  SlotBackend,
  SlotLease,
  SlotSource,
  AcquireOptions,
  LocalRateOptions,
  LocalPeriodOptions,
  LocalSlotOptions,
} from './shared-limits.js';
