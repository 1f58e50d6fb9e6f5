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
export { createServer, startServer, isExempt, SERVER_DEFAULTS } from './server.js';
export type { ServerOptions, StartOptions, TidalServer, CloseOptions, ServeDb, DashboardHandler, DashboardFactory } from './server.js';
export { routeName, TIMEOUT_HEADER, LEVEL_HEADER } from './routes.js';
export { ServeError, SERVE_ERROR_CODES, errorReply, retryHeaders } from './errors.js';
export type { ServeErrorCode, ErrorReply } from './errors.js';
export { KeyRing, MIN_KEY_LENGTH } from './keys.js';
export type { KeyGrant } from './keys.js';
export { Recorder } from './recorder.js';
export type { RecorderOptions } from './recorder.js';
export { parseServeArgs, admissionOptions, autoInFlightCap, isLoopback, HELP, CONFIG_DEFAULTS, PIPELINE_DEPTH } from './config.js';
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
export type { CorpusItem, CorpusOptions, CorpusSignal, SignalColumns, SignalKind, DemoOptions, DemoProgress } from './demo/index.js';
