import type { DegradationLevelName } from 'tidal-core';

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
  /**
   * `false` when the request was never served: a later stage of the chain refused it, and the
   * stages before give back what they granted (a tenant's token) without taking a latency sample.
   * Absent means served.
   */
  readonly served?: boolean;
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
  /** The in-flight stage's rate bound on the queries, with the rate it follows, when it has one. */
  readonly rateBound?: { readonly limit: number; readonly inFlight: number; readonly ratePerSec: number };
  /** Keys the stage holds state for (tenant buckets, period counters), where it keeps any. */
  readonly tracked?: number;
}

/** One stage of the chain. `admit` never waits and never throws. */
export interface AdmissionStage {
  readonly name: RefusalReason;
  admit(request: RequestInfo, nowMs: number): Ticket | Refusal;
  stats(): StageStats;
}

/** Milliseconds since some fixed origin; injected so tests never read the wall clock. */
export type Clock = () => number;

/** Token-bucket settings: `rate` tokens per second, up to `burst` saved. */
export interface RateSpec {
  readonly ratePerSecond: number;
  readonly burst: number;
}

/**
 * The whole chain's settings. Every stage can be switched off; the server's defaults come from the
 * CLI (`tidal serve --help`), which maps its flags onto this shape.
 */
export interface AdmissionOptions {
  /**
   * Stage 2: the fixed in-flight cap, a memory bound: every admitted request, query or write, holds
   * a slot (and up to the body limit of memory) until its response closes. `0` disables it. The
   * server resolves `auto` to a number.
   */
  readonly inFlightCap: number;
  /**
   * Stage 2's rate bound (Little's law): the queries in flight at most the measured service rate ×
   * `targetWaitMs`, from `floor` up to `inFlightCap`, so what is admitted waits about the target at
   * most and the rest is refused at once (`TIDAL_SERVE_INFLIGHT`). `false` or absent: the fixed
   * cap only.
   */
  readonly rateBound?:
    | false
    | {
        /** How long an admitted request may wait in the server: the bound is rate × this. */
        readonly targetWaitMs: number;
        /**
         * The bound never falls below this, and starts at it (no rate is known yet). Keep it at or
         * above the in-flight count from which the database serves its cheapest level, or the
         * heaviest load would be held to the dearest level.
         */
        readonly floor: number;
        /** The service rate is counted over windows of this length. @default 100 */
        readonly windowMs?: number;
        /** The routes it holds and counts (a write's completion says little of a query's wait). @default ['retrieve', 'search'] */
        readonly routes?: readonly string[];
      };
  /** Stage 3: the AIMD limit below the cap; `false` disables it. */
  readonly adaptive:
    | false
    | {
        /** The limit never falls below this. */
        readonly floor: number;
        /** Where the limit starts (default: the cap). */
        readonly initial?: number;
        /** A response slower than this counts as congestion. */
        readonly targetLatencyMs: number;
        /** Length of one observation window. */
        readonly windowMs: number;
        /** Multiplicative decrease factor, in (0, 1). */
        readonly backoff: number;
        /**
         * A window decreases the limit only when more than this fraction of its responses were slow
         * or failed, so a single pause (a GC, a neighbour) that slows a few responses does not.
         * @default 0.25
         */
        readonly slowFraction?: number;
        /** A window closes only once it holds this many responses; a quieter one runs on. @default 10 */
        readonly minSamples?: number;
        /** Added to the limit after each good window, at least. @default 1 */
        readonly increase?: number;
        /**
         * The routes the limit governs: the query routes, whose latency is what it learns from.
         * Writes (`signals`, `items`, `sessions`, ...) are governed by the write path's own
         * backpressure and the memory guard instead: a write is never refused by a limit learned
         * from query latency, and its latency never moves the limit. @default ['retrieve', 'search']
         */
        readonly routes?: readonly string[];
      };
  /** Stage 4: one token bucket per tenant; `false` disables it. */
  readonly tenants:
    | false
    | {
        /** Per-tier defaults (free 100/s, pro 1000/s, burst = rate). */
        readonly tiers?: Partial<Readonly<Record<Tier, RateSpec>>>;
        /** Explicit settings for named tenants, overriding their tier. */
        readonly overrides?: Readonly<Record<string, RateSpec>>;
        /** Past this many tenants, new ones share one overflow bucket. */
        readonly maxTenants: number;
      };
  /** Stage 5: permits per route name (a route not named has no pool); `{}` disables it. */
  readonly permits: Readonly<Record<string, number>>;
  /** Stage 6: a quota per key per period; `false` disables it. */
  readonly period:
    | false
    | {
        readonly quota: number;
        readonly periodMs: number;
        /** Periods start at multiples of `periodMs` (wall-clock aligned) rather than at the key's first request. */
        readonly align: boolean;
        /** What the quota is counted by. */
        readonly key: 'tenant' | 'tenant+route';
        /**
         * Keys counted at once; expired periods are dropped first, and past it new keys share one
         * overflow counter. @default 100_000
         */
        readonly maxKeys?: number;
      };
}

/** The stages in order; a request refused by one never reaches the next. */
export interface AdmissionChain {
  admit(request: RequestInfo, nowMs: number): Ticket | Refusal;
  /** Every enabled stage's counters, in chain order. */
  stats(): StageStats[];
}

/**
 * One second of the server's life, for `/stats` and the dashboard. Rates are per second over the
 * last second; latencies are over the last `windowSeconds`.
 */
export interface ServeSample {
  /** Milliseconds since the epoch (the server's clock). */
  readonly t: number;
  readonly inFlight: number;
  /** tidal's current degradation level (`Full`, `ReducedCandidates`, ...). */
  readonly level: string;
  readonly offeredPerSec: number;
  /** Successful (2xx) responses per second. */
  readonly goodputPerSec: number;
  /** Refusals per second by reason: the chain's reasons and tidal's error codes. */
  readonly refusedPerSec: Readonly<Record<string, number>>;
  /**
   * Successful (2xx) query answers per second at each degradation level, by the level each answer
   * says it ran at (`x-tidal-degradation-level`). Their sum is the query share of `goodputPerSec`.
   */
  readonly levelsPerSec: Readonly<Record<DegradationLevelName, number>>;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly windowSeconds: number;
  /**
   * Per HTTP acceptor thread, when the server runs several (absent with one): each one's rates over
   * the last second and its requests in flight now.
   */
  readonly acceptors?: readonly {
    readonly id: number;
    readonly offeredPerSec: number;
    readonly goodputPerSec: number;
    readonly refusedPerSec: number;
    readonly inFlight: number;
  }[];
}
