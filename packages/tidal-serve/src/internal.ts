// tidal-serve/internal: the admission stages, replies, keys, recorder and CLI config, for this package's
// tests, the cross-package tests and the bench; not for applications (they use tidal-serve).
export type { AdmissionStage } from './admission/types.js';
export type { DashboardStats } from './dashboard/dashboard.js';
export { composeAdmissionStages } from './admission/chain.js';
export { createInFlightCap } from './admission/inflight-cap.js';
export type { InFlightCapStage } from './admission/inflight-cap.js';
export { createAdaptiveLimit, ADAPTIVE_DEFAULTS } from './admission/adaptive-limit.js';
export type { AdaptiveLimitSettings, AdaptiveLimitStage } from './admission/adaptive-limit.js';
export { createTenantLimiter, TIER_DEFAULTS, OVERFLOW_TENANT } from './admission/tenant-limiter.js';
export type { TenantLimiterSettings, TenantLimiterStage } from './admission/tenant-limiter.js';
export { createPermitPool } from './admission/permit-pool.js';
export type { PermitPoolStage, RoutePermitStats } from './admission/permit-pool.js';
export { createPeriodLimit, PERIOD_DEFAULTS, OVERFLOW_KEY } from './admission/period-limit.js';
export type { PeriodLimitSettings, PeriodLimitStage, PeriodOutcome } from './admission/period-limit.js';
export {
  createSharedAdmissionChain,
  createSharedTenantLimiter,
  createSharedPeriodLimit,
  isSharedStats,
  batchSize,
} from './admission/shared-limits.js';
export type {
  SharedSources,
  SharedRateSource,
  SharedStageStats,
  SharedTenantSettings,
  SharedPeriodSettings,
} from './admission/shared-limits.js';
export { REFUSAL_CODES, REFUSAL_STATUS, NOT_SERVED, clampRetryAfterMs } from './admission/errors.js';
export type { RefusalCode } from './admission/errors.js';
export { refusalBody, refusalHeaders } from './admission/refusal.js';
export { isExempt } from './server.js';
export { routeName, TIMEOUT_HEADER, LEVEL_HEADER } from './routes.js';
export { ServeError, SERVE_ERROR_CODES, errorReply, retryHeaders } from './errors.js';
export type { ServeErrorCode, ErrorReply } from './errors.js';
export { KeyRing, MIN_KEY_LENGTH } from './keys.js';
export type { KeyGrant } from './keys.js';
export { Recorder } from './recorder.js';
export type { RecorderOptions } from './recorder.js';
export {
  parseServeArgs,
  admissionOptions,
  autoInFlightCap,
  isLoopback,
  HELP,
  CONFIG_DEFAULTS,
  WORKER_NICE_AUTO,
  resolveWorkerNice,
} from './config.js';
export type { ServeConfig, TenantRates, PoolShape } from './config.js';
export { handleShutdown } from './shutdown.js';
export type { ShutdownOptions } from './shutdown.js';
