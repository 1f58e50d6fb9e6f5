import type { AdmissionChain, AdmissionOptions, Clock, Refusal, RequestInfo, Ticket } from './types.js';

const ADMIT_ALL: Ticket = Object.freeze({ admitted: true as const, release(): void {} });

/**
 * Builds the admission chain from its settings. (The stages are being built; until they land this
 * admits every request.)
 */
export function createAdmissionChain(_options: AdmissionOptions, _clock: Clock): AdmissionChain {
  return {
    admit(_request: RequestInfo, _nowMs: number): Ticket | Refusal {
      return ADMIT_ALL;
    },
    stats() {
      return [];
    },
  };
}
