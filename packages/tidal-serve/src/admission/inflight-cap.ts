import { DrainMeter, OnceTicket, checkInteger, refuse } from './errors.js';
import { LocalRateBound, SharedRateBound, resolveRateBound, type RateBoundMeter, type ResolvedRateBound } from './rate-bound.js';
import { INFLIGHT_CELLS, SharedDrainMeter, type SharedView } from './shared-memory.js';
import type { AdmissionOptions, AdmissionStage, Outcome, Refusal, RequestInfo, StageStats, Ticket } from './types.js';

/** The in-flight cap, with its live counters. */
export interface InFlightCapStage extends AdmissionStage {
  readonly name: 'inflight';
  /** Requests holding a ticket now. */
  readonly inFlight: number;
  readonly limit: number;
  /** The rate bound on the queries, or `null` without one. */
  readonly rateBound: RateBoundMeter | null;
}

/** A ticket's tag: it holds a slot of the rate bound too. */
const GOVERNED = 1;

/** The rate bound's part of a decision, shared by both stages. */
class RateGate {
  readonly meter: RateBoundMeter;
  readonly #s: ResolvedRateBound;
  #messageFor = -1;
  #messageRate = -1;
  #message = '';

  constructor(meter: RateBoundMeter, s: ResolvedRateBound) {
    this.meter = meter;
    this.#s = s;
  }

  /** True when the route is held by the bound and got a slot; false for a free route; null at the bound. */
  enter(route: string, nowMs: number): boolean | null {
    if (!this.#s.routes.has(route)) return false;
    return this.meter.tryEnter(nowMs) ? true : null;
  }

  message(): string {
    const limit = this.meter.limit;
    const rate = Math.round(this.meter.ratePerSec);
    if (limit !== this.#messageFor || rate !== this.#messageRate) {
      this.#messageFor = limit;
      this.#messageRate = rate;
      this.#message = `${limit} queries are in flight, the bound of the measured rate (${rate}/s) × ${this.#s.targetWaitMs} ms of wait; retry after x-retry-after-ms`;
    }
    return this.#message;
  }

  release(ticket: OnceTicket, outcome: Outcome): void {
    if (ticket.epoch === GOVERNED) this.meter.leave(ticket.admittedMs + outcome.latencyMs, outcome.served !== false && outcome.ok);
  }

  stats(): StageStats['rateBound'] {
    const m = this.meter;
    return { limit: m.limit, inFlight: m.inFlight, ratePerSec: Math.round(m.ratePerSec) };
  }
}

class InFlightCap implements InFlightCapStage {
  readonly name = 'inflight' as const;
  readonly limit: number;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;
  readonly #drain = new DrainMeter();
  readonly #message: string;
  readonly #gate: RateGate | null;

  constructor(limit: number, gate: RateGate | null) {
    this.limit = limit;
    this.#gate = gate;
    this.#message = `${limit} requests are in flight, the in-flight cap; retry after x-retry-after-ms`;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get rateBound(): RateBoundMeter | null {
    return this.#gate?.meter ?? null;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    // The whole decision: one add and a compare (two with the rate bound). Everything else is on
    // the refusal or release path.
    if (++this.#inFlight > this.limit) {
      this.#inFlight--;
      this.#rejected++;
      // One slot frees in hold ÷ in flight, but the next arrival takes it: a retry sooner than one
      // mean hold finds the same holders (on average none has finished) and is refused again.
      return refuse('inflight', this.#drain.holdMs(nowMs), this.#message);
    }
    const gate = this.#gate;
    const held = gate === null ? false : gate.enter(request.route, nowMs);
    if (held === null) {
      this.#inFlight--;
      this.#rejected++;
      return refuse('inflight', this.#drain.holdMs(nowMs), gate!.message());
    }
    this.#admitted++;
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs, held ? GOVERNED : 0);
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    this.#inFlight--;
    this.#gate?.release(ticket, outcome);
    if (outcome.served !== false) this.#drain.record(outcome.latencyMs);
  }

  stats(): StageStats {
    const s: StageStats = {
      name: 'inflight',
      limit: this.limit,
      inFlight: this.#inFlight,
      admitted: this.#admitted,
      rejected: this.#rejected,
    };
    return this.#gate === null ? s : { ...s, rateBound: this.#gate.stats() };
  }
}

/**
 * Stage 2: a cap on requests in flight, every route counted (a memory bound: each holds up to the
 * body limit), and with `rateBound` a bound on the queries in flight that follows the measured
 * service rate (rate-bound.ts: rate × `targetWaitMs`, from `floor` to the cap). Over either, a 503
 * `TIDAL_SERVE_INFLIGHT` at once, with `retryAfterMs` the measured mean time a request holds its
 * slot: the time the slots take to turn over, every holder replaced once, the soonest a retry meets
 * different holders. (One slot frees sooner, mean ÷ in flight by Little's law, but the next arrival
 * takes it: a hint that short, 1–2 ms, was a retry storm.)
 *
 * @param limit - a whole number ≥ 1 (the chain skips the stage for `0`).
 * @throws {@link InvalidInputError} naming `options.inFlightCap` or the `options.rateBound.*` field.
 */
export function createInFlightCap(limit: number, rateBound: AdmissionOptions['rateBound'] = false): InFlightCapStage {
  const cap = checkInteger('options.inFlightCap', limit, 1);
  const s = resolveRateBound(rateBound, cap);
  return new InFlightCap(cap, s === null ? null : new RateGate(new LocalRateBound(s, cap), s));
}

/** The cap over shared cells: every thread's chain counts into the same in-flight cell. */
class SharedInFlightCap implements InFlightCapStage {
  readonly name = 'inflight' as const;
  readonly limit: number;
  readonly #cells: Int32Array;
  readonly #at: number;
  readonly #drain: SharedDrainMeter;
  readonly #message: string;
  readonly #gate: RateGate | null;

  constructor(view: SharedView, limit: number, gate: RateGate | null) {
    this.limit = limit;
    this.#cells = view.cells;
    this.#at = view.layout.inflight;
    this.#drain = new SharedDrainMeter(view, this.#at + INFLIGHT_CELLS.drain);
    this.#message = `${limit} requests are in flight, the in-flight cap; retry after x-retry-after-ms`;
    this.#gate = gate;
  }

  get inFlight(): number {
    return Atomics.load(this.#cells, this.#at + INFLIGHT_CELLS.inFlight);
  }

  get rateBound(): RateBoundMeter | null {
    return this.#gate?.meter ?? null;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    // One atomic add and a compare: of the threads racing for the last slot, one gets it.
    const c = this.#cells;
    if (Atomics.add(c, this.#at + INFLIGHT_CELLS.inFlight, 1) >= this.limit) {
      Atomics.sub(c, this.#at + INFLIGHT_CELLS.inFlight, 1);
      Atomics.add(c, this.#at + INFLIGHT_CELLS.rejected, 1);
      return refuse('inflight', this.#drain.holdMs(nowMs), this.#message);
    }
    const gate = this.#gate;
    const held = gate === null ? false : gate.enter(request.route, nowMs);
    if (held === null) {
      Atomics.sub(c, this.#at + INFLIGHT_CELLS.inFlight, 1);
      Atomics.add(c, this.#at + INFLIGHT_CELLS.rejected, 1);
      return refuse('inflight', this.#drain.holdMs(nowMs), gate!.message());
    }
    Atomics.add(c, this.#at + INFLIGHT_CELLS.admitted, 1);
    this.#drain.admitted(nowMs);
    return new OnceTicket(this, nowMs, held ? GOVERNED : 0);
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    Atomics.sub(this.#cells, this.#at + INFLIGHT_CELLS.inFlight, 1);
    this.#gate?.release(ticket, outcome);
    if (outcome.served !== false) this.#drain.record(outcome.latencyMs);
  }

  stats(): StageStats {
    const c = this.#cells;
    const at = this.#at;
    const s: StageStats = {
      name: 'inflight',
      limit: this.limit,
      inFlight: Atomics.load(c, at),
      admitted: Atomics.load(c, at + INFLIGHT_CELLS.admitted),
      rejected: Atomics.load(c, at + INFLIGHT_CELLS.rejected),
    };
    return this.#gate === null ? s : { ...s, rateBound: this.#gate.stats() };
  }
}

/** {@link createInFlightCap} over a shared state's cells (built by the chain with `{ shared }`). */
export function createInFlightCapInSharedMemory(
  view: SharedView,
  limit: number,
  rateBound: AdmissionOptions['rateBound'] = false,
): InFlightCapStage {
  const cap = checkInteger('options.inFlightCap', limit, 1);
  const s = resolveRateBound(rateBound, cap);
  const gate = s === null ? null : new RateGate(new SharedRateBound(s, cap, view, view.layout.inflight + INFLIGHT_CELLS.rate), s);
  return new SharedInFlightCap(view, cap, gate);
}
