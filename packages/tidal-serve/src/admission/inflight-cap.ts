import { DrainMeter, OnceTicket, checkInteger, refuse } from './errors.js';
import type { AdmissionStage, Outcome, Refusal, RequestInfo, StageStats, Ticket } from './types.js';

/** The in-flight cap, with its live counters. */
export interface InFlightCapStage extends AdmissionStage {
  readonly name: 'inflight';
  /** Requests holding a ticket now. */
  readonly inFlight: number;
  readonly limit: number;
}

class InFlightCap implements InFlightCapStage {
  readonly name = 'inflight' as const;
  readonly limit: number;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;
  readonly #drain = new DrainMeter();
  readonly #message: string;

  constructor(limit: number) {
    this.limit = limit;
    this.#message = `${limit} requests are in flight, the in-flight cap; retry after x-retry-after-ms`;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  admit(_request: RequestInfo, nowMs: number): Ticket | Refusal {
    // The whole decision: one add and a compare. Everything else is on the refusal or release path.
    if (++this.#inFlight > this.limit) {
      this.#inFlight--;
      this.#rejected++;
      // One slot frees in hold ÷ in flight, but the next arrival takes it: a retry sooner than one
      // mean hold finds the same holders (on average none has finished) and is refused again.
      return refuse('inflight', this.#drain.holdMs(nowMs), this.#message);
    }
    this.#admitted++;
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs);
  }

  onRelease(_ticket: OnceTicket, outcome: Outcome): void {
    this.#inFlight--;
    if (outcome.served !== false) this.#drain.record(outcome.latencyMs);
  }

  stats(): StageStats {
    return { name: 'inflight', limit: this.limit, inFlight: this.#inFlight, admitted: this.#admitted, rejected: this.#rejected };
  }
}

/**
 * Stage 2: a fixed cap on requests in flight, every route counted (a memory bound: each holds up to
 * the body limit). Over it, a 503 `TIDAL_SERVE_INFLIGHT` at once, with `retryAfterMs` the measured
 * mean time a request holds its slot: the time the cap takes to turn over, every holder replaced
 * once, the soonest a retry meets different holders. (One slot frees sooner, mean ÷ in flight by
 * Little's law, but the next arrival takes it: a hint that short, 1–2 ms, was a retry storm.)
 *
 * @param limit - a whole number ≥ 1 (the chain skips the stage for `0`).
 * @throws {@link InvalidInputError} naming `options.inFlightCap`.
 */
export function createInFlightCap(limit: number): InFlightCapStage {
  return new InFlightCap(checkInteger('options.inFlightCap', limit, 1));
}
