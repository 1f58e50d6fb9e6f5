// The public surface of tidal-serve: the server (`createServer`, `startServer`), the admission chain
// as a fastify plugin (`tidalAdmission`) or shared across threads, the dashboard, and their types.
// The stages, replies, keys, the CLI's config and the demo corpus are in tidal-serve/internal and
// tidal-serve/demo.
export { createServer, startServer, SERVER_DEFAULTS } from './server.js';
export type { ServerOptions, StartOptions, TidalServer, CloseOptions, ServeDb, DashboardHandler, DashboardFactory } from './server.js';
export { tidalAdmission } from './admission/fastify-plugin.js';
export type { TidalAdmissionOptions } from './admission/fastify-plugin.js';
export { createAdmissionChain, createSharedAdmissionState } from './admission/chain.js';
export type { BuiltAdmissionChain, ChainBuildOptions } from './admission/chain.js';
export type { SharedAdmissionState } from './admission/shared-memory.js';
export type {
  AdmissionChain,
  AdmissionOptions,
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
export { createDashboard } from './dashboard/dashboard.js';
export type { Dashboard } from './dashboard/dashboard.js';
export { DASHBOARD_DEFAULTS } from './dashboard/options.js';
export type { DashboardOptions } from './dashboard/options.js';
