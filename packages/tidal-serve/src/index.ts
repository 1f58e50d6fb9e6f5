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
