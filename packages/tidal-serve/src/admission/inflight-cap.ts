import { DrainMeter, OnceTicket, checkInteger, refuse } from './errors.js';
import { INFLIGHT_CELLS, SharedDrainMeter, type SharedView } from './shared-memory.js';
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

/** The cap over shared cells: every thread's chain counts into the same in-flight cell. */
class SharedInFlightCap implements InFlightCapStage {
  readonly name = 'inflight' as const;
  readonly limit: number;
  readonly #cells: Int32Array;
  readonly #at: number;
  readonly #drain: SharedDrainMeter;
  readonly #message: string;

  constructor(view: SharedView, limit: number) {
    this.limit = limit;
    this.#cells = view.cells;
    this.#at = view.layout.inflight;
    this.#drain = new SharedDrainMeter(view, this.#at + INFLIGHT_CELLS.drain);
    this.#message = `${limit} requests are in flight, the in-flight cap; retry after x-retry-after-ms`;
  }

  get inFlight(): number {
    return Atomics.load(this.#cells, this.#at + INFLIGHT_CELLS.inFlight);
  }

  admit(_request: RequestInfo, nowMs: number): Ticket | Refusal {
    // One atomic add and a compare: of the threads racing for the last slot, one gets it.
    const c = this.#cells;
    if (Atomics.add(c, this.#at + INFLIGHT_CELLS.inFlight, 1) >= this.limit) {
      Atomics.sub(c, this.#at + INFLIGHT_CELLS.inFlight, 1);
      Atomics.add(c, this.#at + INFLIGHT_CELLS.rejected, 1);
      return refuse('inflight', this.#drain.holdMs(nowMs), this.#message);
    }
    Atomics.add(c, this.#at + INFLIGHT_CELLS.admitted, 1);
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs);
  }

  onRelease(_ticket: OnceTicket, outcome: Outcome): void {
    Atomics.sub(this.#cells, this.#at + INFLIGHT_CELLS.inFlight, 1);
    if (outcome.served !== false) this.#drain.record(outcome.latencyMs);
  }

  stats(): StageStats {
    const c = this.#cells;
    const at = this.#at;
    return {
      name: 'inflight',
      limit: this.limit,
      inFlight: Atomics.load(c, at),
      admitted: Atomics.load(c, at + INFLIGHT_CELLS.admitted),
      rejected: Atomics.load(c, at + INFLIGHT_CELLS.rejected),
    };
  }
}

/** {@link createInFlightCap} over a shared state's cells (built by the chain with `{ shared }`). */
export function createInFlightCapInSharedMemory(view: SharedView, limit: number): InFlightCapStage {
  return new SharedInFlightCap(view, checkInteger('options.inFlightCap', limit, 1));
}
