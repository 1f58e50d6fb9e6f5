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
