export type {
  AdmissionChain,
  AdmissionOptions,
  AdmissionStage,
  Clock,
  Outcome,
  RateSpec,
  Refusal,
  RefusalReason,
  RequestInfo,
  ServeSample,
  StageStats,
  Ticket,
  Tier,
} from './admission/types.js';
export { createAdmissionChain, createSharedAdmissionState } from './admission/chain.js';
export type { ChainBuildOptions } from './admission/chain.js';
export type { SharedAdmissionState } from './admission/shared-memory.js';
export { createDashboard } from './dashboard/dashboard.js';
export type { Dashboard, DashboardStats } from './dashboard/dashboard.js';
export { DASHBOARD_DEFAULTS } from './dashboard/options.js';
export type { DashboardOptions } from './dashboard/options.js';
export { composeAdmissionStages } from './admission/chain.js';
export type { BuiltAdmissionChain } from './admission/chain.js';
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
export { createSharedAdmissionChain, createSharedTenantLimiter, createSharedPeriodLimit, isSharedStats, batchSize } from './admission/shared-limits.js';
export type { SharedSources, SharedRateSource, SharedStageStats, SharedTenantSettings, SharedPeriodSettings } from './admission/shared-limits.js';
// The shared-limit contracts the stages above decide through (tidal-fleet implements them).
export type { RateSource, RateDecision, PeriodSource, PeriodDecision } from 'tidal-load';
export { REFUSAL_CODES, REFUSAL_STATUS, NOT_SERVED, clampRetryAfterMs } from './admission/errors.js';
export { refusalBody, refusalHeaders } from './admission/refusal.js';
export { tidalAdmission } from './admission/fastify-plugin.js';
export type { TidalAdmissionOptions } from './admission/fastify-plugin.js';
export type { RefusalCode } from './admission/errors.js';
export { createServer, startServer, isExempt, SERVER_DEFAULTS } from './server.js';
export type { ServerOptions, StartOptions, TidalServer, CloseOptions, ServeDb, DashboardHandler, DashboardFactory } from './server.js';
export { routeName, TIMEOUT_HEADER, LEVEL_HEADER } from './routes.js';
export { ServeError, SERVE_ERROR_CODES, errorReply, retryHeaders } from './errors.js';
export type { ServeErrorCode, ErrorReply } from './errors.js';
export { KeyRing, MIN_KEY_LENGTH } from './keys.js';
export type { KeyGrant } from './keys.js';
export { Recorder } from './recorder.js';
export type { RecorderOptions } from './recorder.js';
export { parseServeArgs, admissionOptions, autoInFlightCap, isLoopback, HELP, CONFIG_DEFAULTS, WORKER_NICE_AUTO, resolveWorkerNice } from './config.js';
export type { ServeConfig, TenantRates, PoolShape } from './config.js';
export { handleShutdown } from './shutdown.js';
export type { ShutdownOptions } from './shutdown.js';
// The synthetic corpus `tidal serve --demo` loads; the bench uses the same one (bench/src/corpus.ts).
export {
  Corpus,
  CATEGORIES,
  VOCABULARY,
  SHARED_VOCABULARY,
  SIGNAL_KINDS,
  DEFAULT_NOW,
  tidalSchema,
  normalize,
  mixSeed,
  gaussian,
  loadDemo,
  DEMO_DEFAULTS,
} from './demo/index.js';
export { mulberry32 } from './demo/random.js';
export type { CorpusItem, CorpusOptions, CorpusSignal, SignalColumns, SignalKind, DemoOptions, DemoProgress } from './demo/index.js';
