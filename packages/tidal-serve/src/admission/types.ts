/**
 * The contract between the HTTP server and the admission chain. The chain runs before any body
 * parsing: it sees only what the request line and headers say (route, tenant), and answers with
 * either a ticket, which the server must release exactly once however the request ends, or a
 * refusal, which the server writes as it is (status, `Retry-After`, `x-retry-after-ms`, body).
 */

/** Why a request was refused by the HTTP chain (tidal's own refusals use their error codes). */
export type RefusalReason = 'inflight' | 'adaptive' | 'tenant' | 'permits' | 'period';

/** Tiers an API key can carry; each has a default rate (free 100/s, pro 1000/s). */
export type Tier = 'free' | 'pro';

/** What the chain knows about a request: nothing that needs the body. */
export interface RequestInfo {
  /** The route's name, e.g. `retrieve`, `search`, `signals`, as the server registered it. */
  readonly route: string;
  /** The tenant the API key maps to, or `anonymous` on a loopback server without keys. */
  readonly tenant: string;
  readonly tier: Tier;
}

/** How a request ended, reported back to the stages when its ticket is released. */
export interface Outcome {
  /** Wall time from admission to the end of the response, in milliseconds. */
  readonly latencyMs: number;
  /**
   * False when the request failed for a capacity reason (a 503 from tidal itself, a timeout, an
   * internal error): the adaptive limit reads it as a congestion signal. Client errors (4xx) and
   * client aborts count as ok: they say nothing about the server's capacity.
   */
  readonly ok: boolean;
}

/** A refusal, ready to be written. */
export interface Refusal {
  readonly admitted: false;
  /** 503 for capacity (cap, adaptive, permits), 429 for quota (tenant, period). */
  readonly status: 503 | 429;
  /** The stable error code in the body, e.g. `TIDAL_SERVE_INFLIGHT`. */
  readonly code: string;
  readonly reason: RefusalReason;
  /** When a retry may succeed, from measured drain or refill; never a constant. */
  readonly retryAfterMs: number;
  readonly message: string;
  /** Extra response headers (the period limit's quota headers). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** An admission: hold it for the request's life, release it once. */
export interface Ticket {
  readonly admitted: true;
  /** Headers to add to the response (quota state). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Idempotent: a second call does nothing. */
  release(outcome: Outcome): void;
}

/** Counters every stage exposes, for /metrics, /stats and the dashboard. */
export interface StageStats {
  readonly name: RefusalReason;
  /** The stage's current limit (in flight, permits, rate...), or `null` when disabled. */
  readonly limit: number | null;
  readonly inFlight: number;
  readonly admitted: number;
  readonly rejected: number;
}

/** One stage of the chain. `admit` never waits and never throws. */
export interface AdmissionStage {
  readonly name: RefusalReason;
  admit(request: RequestInfo, nowMs: number): Ticket | Refusal;
  stats(): StageStats;
}

/** Milliseconds since some fixed origin; injected so tests never read the wall clock. */
export type Clock = () => number;
