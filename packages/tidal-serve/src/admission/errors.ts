/**
 * What a stage answers with: refusals (stable codes, statuses, retry times measured from drain or
 * refill), once-only tickets, and the checks every stage runs on its settings.
 *
 * A refusal is a plain object, not an `Error`: under overload it is the common answer, and building
 * an `Error` (its stack capture above all) was most of what a refusal cost in tidal-core.
 */
import { InvalidInputError, RETRY_AFTER_MAX_MS, RETRY_AFTER_MIN_MS } from 'tidal-core';
import type { Outcome, Refusal, RefusalReason, Ticket } from './types.js';

/** The stable `code` of each reason's refusal, as written in the response body. */
export const REFUSAL_CODES = Object.freeze({
  inflight: 'TIDAL_SERVE_INFLIGHT',
  adaptive: 'TIDAL_SERVE_ADAPTIVE',
  tenant: 'TIDAL_SERVE_TENANT_RATE',
  permits: 'TIDAL_SERVE_PERMITS',
  period: 'TIDAL_SERVE_PERIOD_QUOTA',
} as const satisfies Record<RefusalReason, string>);

/** The refusal codes, for docs and tests. */
export type RefusalCode = (typeof REFUSAL_CODES)[RefusalReason];

/** 503 for capacity (the server is short), 429 for quota (the client asked for more than its share). */
export const REFUSAL_STATUS = Object.freeze({
  inflight: 503,
  adaptive: 503,
  tenant: 429,
  permits: 503,
  period: 429,
} as const satisfies Record<RefusalReason, 503 | 429>);

/**
 * The outcome the chain releases a ticket with when a later stage refused the request: it was never
 * served, so the stages give back what they granted without taking a latency sample from it.
 */
export const NOT_SERVED: Outcome = Object.freeze({ latencyMs: 0, ok: true, served: false });

/** Rounds a wait up to a whole millisecond, within tidal's bounds (1 ms – 10 s). */
export function clampRetryAfterMs(ms: number): number {
  if (!(ms > RETRY_AFTER_MIN_MS)) return RETRY_AFTER_MIN_MS; // NaN included
  const up = Math.ceil(ms);
  return up > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : up;
}

/** Builds a refusal. Every refusal has the same shape, so the server's write path stays monomorphic. */
export function refuse(
  reason: RefusalReason,
  retryAfterMs: number,
  message: string,
  headers: Readonly<Record<string, string>> | undefined = undefined,
): Refusal {
  return {
    admitted: false,
    status: REFUSAL_STATUS[reason],
    code: REFUSAL_CODES[reason],
    reason,
    retryAfterMs: clampRetryAfterMs(retryAfterMs),
    message,
    headers,
  };
}

/** Weight of a new latency sample in the running mean: about the last 16 responses count. */
const LATENCY_ALPHA = 1 / 16;

/**
 * The measured drain of a pool of slots: a running mean of how long a request holds one. By Little's
 * law `inFlight` holders drain at `inFlight / meanLatencyMs` per millisecond, so `excess` slots free
 * in `excess × meanLatencyMs / inFlight` ms.
 *
 * Before the first release there is no latency to average; then every request admitted so far is
 * still running, so the time since the first admission is a floor of the oldest one's latency and
 * stands in for the mean.
 */
export class DrainMeter {
  #meanMs = 0;
  #samples = 0;
  #firstAdmitMs = Number.NaN;

  /** Notes an admission (only the first one matters). */
  admitted(nowMs: number): void {
    if (this.#firstAdmitMs !== this.#firstAdmitMs) this.#firstAdmitMs = nowMs;
  }

  /** Adds one request's time in its slot. */
  record(latencyMs: number): void {
    if (!(latencyMs >= 0) || latencyMs === Infinity) return;
    this.#meanMs = this.#samples === 0 ? latencyMs : this.#meanMs + (latencyMs - this.#meanMs) * LATENCY_ALPHA;
    this.#samples++;
  }

  /** The running mean, or `null` before the first sample. */
  get meanMs(): number | null {
    return this.#samples === 0 ? null : this.#meanMs;
  }

  /** How long a request holds its slot: the running mean, or before any, the time since the first admission. */
  holdMs(nowMs: number): number {
    return this.#samples > 0 ? this.#meanMs : nowMs - this.#firstAdmitMs;
  }

  /** Milliseconds until `excess` of the `inFlight` slots have freed at the measured drain. */
  retryAfterMs(excess: number, inFlight: number, nowMs: number): number {
    return (excess * this.holdMs(nowMs)) / (inFlight > 1 ? inFlight : 1);
  }
}

/** What a ticket tells its stage when it is released (once). */
export interface ReleaseTarget<T extends Ticket> {
  onRelease(ticket: T, outcome: Outcome): void;
}

/**
 * A ticket that calls its stage back the first time it is released and never again, whatever order
 * or how often the server releases it.
 */
export class OnceTicket implements Ticket {
  readonly admitted = true as const;
  readonly headers: Readonly<Record<string, string>> | undefined;
  /** The time the ticket was granted, for stages that need it. */
  readonly admittedMs: number;
  /** Stage-specific tag (the adaptive limit's decrease epoch), `0` when unused. */
  readonly epoch: number;
  #target: ReleaseTarget<OnceTicket> | null;

  constructor(
    target: ReleaseTarget<OnceTicket>,
    admittedMs: number,
    epoch = 0,
    headers: Readonly<Record<string, string>> | undefined = undefined,
  ) {
    this.#target = target;
    this.admittedMs = admittedMs;
    this.epoch = epoch;
    this.headers = headers;
  }

  release(outcome: Outcome): void {
    const target = this.#target;
    if (target === null) return;
    this.#target = null;
    target.onRelease(this, outcome);
  }
}

// Setting checks. They name the option, what it must be and what it got (InvalidInputError's message).

export function checkInteger(field: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `a whole number ≥ ${min}` : `a whole number from ${min} to ${max}`;
    throw new InvalidInputError(field, range, value);
  }
  return value;
}

export function checkPositive(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidInputError(field, 'a positive finite number', value);
  }
  return value;
}

export function checkOpenFraction(field: string, value: unknown): number {
  if (typeof value !== 'number' || !(value > 0 && value < 1)) {
    throw new InvalidInputError(field, 'a number strictly between 0 and 1', value);
  }
  return value;
}

export function checkObject(field: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidInputError(field, 'an object', value);
  }
  return value as Record<string, unknown>;
}
