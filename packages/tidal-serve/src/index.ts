export type {
  AdmissionStage,
  Clock,
  Outcome,
  Refusal,
  RefusalReason,
  RequestInfo,
  StageStats,
  Ticket,
  Tier,
} from './admission/types.js';
