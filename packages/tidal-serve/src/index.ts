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
export { createAdmissionChain } from './admission/chain.js';
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
export { REFUSAL_CODES, REFUSAL_STATUS, NOT_SERVED, clampRetryAfterMs } from './admission/errors.js';
export type { RefusalCode } from './admission/errors.js';
