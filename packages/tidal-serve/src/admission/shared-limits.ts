/**
 * The tenant limiter and the period limit decided by sources every replica shares (tidal-fleet's
 * `RedisRateSource` and `RedisPeriodSource`), behind the chain's synchronous `admit`.
 *
 * `admit` never waits on the network. Each stage answers from what it holds in this process and
 * talks to the shared source in the background:
 * - tenant: a replica spends a local *credit* of tokens the shared bucket granted it, and asks for
 *   the next batch (one `take(tenant, batch)`) while it still has some. The fleet admits what the
 *   shared bucket granted, give or take the credit each replica holds (at most 1.5 batches unspent)
 *   or borrowed (at most one batch, only while the shared bucket is not known to be empty, so a
 *   tenant's first request is not refused for want of a round trip).
 * - period: a request is admitted unless the shared window is known to be used up, and counted
 *   into it afterwards (the counts of requests admitted meanwhile coalesce into one `INCRBY`). The
 *   fleet admits the quota plus what its replicas admit during one round trip.
 *
 * bench/src/fleet.ts measures this against awaiting the shared decision per request: a refusal
 * from local state costs what the local limiter's costs, one awaited costs a round
 * trip to Redis.
 */
import { InvalidInputError } from 'tidal-core';
import type { PeriodBackend, PeriodSource, RateBackend } from 'tidal-load';
import { composeAdmissionStages, createAdmissionChain, type BuiltAdmissionChain } from './chain.js';
import { OnceTicket, checkInteger, checkObject, refuse } from './errors.js';
import { PERIOD_DEFAULTS } from './period-limit.js';
import { resolveTenants, type TenantLimiterSettings } from './tenant-limiter.js';
import type {
  AdmissionOptions,
  AdmissionStage,
  Clock,
  Outcome,
  RateSpec,
  Refusal,
  RequestInfo,
  StageStats,
  Ticket,
  Tier,
} from './types.js';

/** A partial grant of a shared bucket: the tokens taken (0 when refused) and the wait when none. */
export interface SharedGrant {
  readonly backend: RateBackend;
  /** Tokens taken, from 1 to the n asked; 0 when the bucket held not one whole token. */
  readonly granted: number;
  /** `0` when granted; otherwise the milliseconds until all n asked would be there. */
  readonly retryAfterMs: number;
}

/**
 * A shared token bucket per key (tidal-fleet's `RedisRateSource`), with the burst it was built with
 * (a replica asks it for at most its share of the burst), taken from by partial grants.
 */
export interface SharedRateSource {
  readonly burst: number;
  /** Takes as many of `n` tokens as the bucket holds, at least one, or none with the wait. */
  takeUpTo(key: string, n: number, nowMs: number): Promise<SharedGrant>;
}

/** Decisions by the backend that made them, for `/stats` and `/metrics`. */
export interface BackendCounts {
  redis: number;
  local: number;
  /** Fixed-window decisions nobody could make: admitted unchecked (fail-open). */
  none: number;
}

/** A shared stage's counters: the chain's, plus the shared decisions by backend. */
export interface SharedStageStats extends StageStats {
  readonly shared: true;
  /** Decisions the shared source made (one per batch or per coalesced count), by backend. */
  readonly backends: Readonly<BackendCounts>;
  /** The backend of the latest decision: where the limit is being decided now. */
  readonly backend: PeriodBackend | null;
  /** Calls to the shared source that failed outright (a reply the script cannot give). */
  readonly errors: number;
}

/** True for the stats of a stage built here. */
export function isSharedStats(s: StageStats): s is SharedStageStats {
  return (s as Partial<SharedStageStats>).shared === true;
}

const BACKEND_HEADERS = Object.freeze({
  redis: Object.freeze({ 'x-tidal-limit-backend': 'redis' }),
  local: Object.freeze({ 'x-tidal-limit-backend': 'local' }),
  none: Object.freeze({ 'x-tidal-limit-backend': 'none' }),
});

/**
 * Tokens asked of the shared bucket at once: 10 ms of the tenant's fleet rate, at least 1, and at
 * most a quarter of the burst, so the batches in flight across a few replicas never hold the whole
 * bucket. 10 ms of rate keeps the calls to Redis at ≤ 100 per second per tenant per replica.
 */
export function batchSize(spec: RateSpec): number {
  return Math.max(1, Math.min(Math.ceil(spec.ratePerSecond / 100), Math.floor(spec.burst / 4)));
}

interface Lease {
  readonly source: SharedRateSource;
  readonly batch: number;
  readonly message: string;
  /** Tokens granted and not spent; negative while borrowing ahead of the shared answer. */
  credit: number;
  pending: boolean;
  /** The shared bucket said it is empty until then: no borrowing, no asking. */
  blockedUntilMs: number;
  backend: RateBackend;
}

/** Settings of {@link createSharedTenantLimiter}. */
export interface SharedTenantSettings extends TenantLimiterSettings {
  /** The shared bucket of one rate spec (the CLI builds a `RedisRateSource` per spec). */
  readonly source: (spec: RateSpec) => SharedRateSource;
  /** Receives what a failed call to the shared source threw. @default ignored (counted in `errors`) */
  readonly onError?: (err: unknown) => void;
  /** The replicas last seen alive (the source's fallback bucket holds burst ÷ this). @default () => 1 */
  readonly replicas?: () => number;
}

class SharedTenantLimiter implements AdmissionStage {
  readonly name = 'tenant' as const;
  readonly #tiers: Readonly<Record<Tier, RateSpec>>;
  readonly #overrides: ReadonlyMap<string, RateSpec>;
  readonly #maxTenants: number;
  readonly #sourceOf: (spec: RateSpec) => SharedRateSource;
  readonly #sources = new Map<string, SharedRateSource>();
  readonly #leases = new Map<string, Lease>();
  readonly #onError: (err: unknown) => void;
  readonly #replicas: () => number;
  #overflow: Lease | null = null;
  readonly #backends: BackendCounts = { redis: 0, local: 0, none: 0 };
  #backend: RateBackend | null = null;
  #errors = 0;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;

  constructor(
    tiers: Readonly<Record<Tier, RateSpec>>,
    overrides: ReadonlyMap<string, RateSpec>,
    maxTenants: number,
    source: (spec: RateSpec) => SharedRateSource,
    onError: (err: unknown) => void,
    replicas: () => number,
  ) {
    this.#replicas = replicas;
    this.#tiers = tiers;
    this.#overrides = overrides;
    this.#maxTenants = maxTenants;
    this.#sourceOf = source;
    this.#onError = onError;
  }

  #source(spec: RateSpec): SharedRateSource {
    const id = `${spec.ratePerSecond}:${spec.burst}`;
    let s = this.#sources.get(id);
    if (s === undefined) this.#sources.set(id, (s = this.#sourceOf(spec)));
    return s;
  }

  #newLease(spec: RateSpec, message: string): Lease {
    return {
      source: this.#source(spec),
      batch: batchSize(spec),
      message,
      credit: 0,
      pending: false,
      blockedUntilMs: Number.NEGATIVE_INFINITY,
      backend: 'redis',
    };
  }

  #lease(request: RequestInfo): [string, Lease] {
    const tenant = request.tenant;
    const known = this.#leases.get(tenant);
    if (known !== undefined) return [tenant, known];
    const override = this.#overrides.get(tenant);
    if (override !== undefined || this.#leases.size < this.#maxTenants) {
      const spec = override ?? this.#tiers[request.tier] ?? this.#tiers.free;
      const lease = this.#newLease(
        spec,
        `tenant ${JSON.stringify(tenant)} is over its fleet-wide rate of ${spec.ratePerSecond}/s (burst ${spec.burst}); retry after x-retry-after-ms`,
      );
      this.#leases.set(tenant, lease);
      return [tenant, lease];
    }
    // Past maxTenants the new tenants share one bucket, shared by the fleet too.
    this.#overflow ??= this.#newLease(
      this.#tiers.free,
      `more than ${this.#maxTenants} tenants are active; the ones past it share one bucket of ${this.#tiers.free.ratePerSecond}/s, now empty; retry after x-retry-after-ms`,
    );
    return ['(overflow)', this.#overflow];
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const [key, lease] = this.#lease(request);
    const open = nowMs >= lease.blockedUntilMs;
    if (lease.credit >= 1 || (open && lease.credit > -lease.batch)) {
      lease.credit--;
      if (open && !lease.pending && lease.credit * 2 < lease.batch) this.#refill(key, lease, nowMs);
      this.#inFlight++;
      this.#admitted++;
      return new SharedTenantTicket(this, lease, nowMs, BACKEND_HEADERS[lease.backend]);
    }
    if (open && !lease.pending) this.#refill(key, lease, nowMs);
    this.#rejected++;
    // Blocked: the shared bucket's own wait. Otherwise the answer to the batch asked is a round trip away.
    return refuse('tenant', open ? 1 : lease.blockedUntilMs - nowMs, lease.message, BACKEND_HEADERS[lease.backend]);
  }

  /**
   * Asks the shared bucket for a batch plus what was borrowed, in the background, and takes what it
   * holds of that (a partial grant pays the debt first). All or none would starve a replica under
   * sustained overload: a bucket drained every few milliseconds by replicas asking for a batch
   * never gathers a batch plus a debt, so the replica that borrowed would be refused every time.
   */
  #refill(key: string, lease: Lease, nowMs: number): void {
    lease.pending = true;
    // At most this replica's share of the burst: the source's fallback bucket holds only that much,
    // and caps a larger ask itself, answering for fewer tokens than were asked.
    const max = Math.max(1, Math.floor(lease.source.burst / Math.max(1, this.#replicas())));
    const n = Math.min(max, lease.batch + Math.max(0, -lease.credit));
    lease.source.takeUpTo(key, n, nowMs).then(
      (d) => {
        lease.pending = false;
        lease.backend = d.backend;
        this.#backend = d.backend;
        this.#backends[d.backend]++;
        if (d.granted > 0) lease.credit += d.granted;
        else lease.blockedUntilMs = nowMs + Math.max(1, d.retryAfterMs);
      },
      (err: unknown) => {
        lease.pending = false;
        this.#errors++;
        // No answer at all (not even the source's fallback): wait a little before asking again.
        lease.blockedUntilMs = nowMs + 100;
        this.#onError(err);
      },
    );
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    this.#inFlight--;
    // Refused further down the chain: the token stays with this replica.
    if (outcome.served === false) (ticket as SharedTenantTicket).lease.credit++;
  }

  stats(): SharedStageStats {
    return {
      name: 'tenant',
      limit: this.#maxTenants,
      inFlight: this.#inFlight,
      admitted: this.#admitted,
      rejected: this.#rejected,
      tracked: this.#leases.size,
      shared: true,
      backends: { ...this.#backends },
      backend: this.#backend,
      errors: this.#errors,
    };
  }
}

class SharedTenantTicket extends OnceTicket {
  readonly lease: Lease;

  constructor(target: SharedTenantLimiter, lease: Lease, nowMs: number, headers: Readonly<Record<string, string>>) {
    super(target, nowMs, 0, headers);
    this.lease = lease;
  }
}

/**
 * Stage 4 with the tenant buckets shared by every replica: the same tiers, overrides and
 * `maxTenants` as `createTenantLimiter`, each bucket held by `settings.source(spec)`. A refusal is
 * the same 429 `TIDAL_SERVE_TENANT_RATE`; every ticket and refusal carries `x-tidal-limit-backend`
 * (`redis`, or `local` while the source answers from its fallback).
 *
 * @throws {@link InvalidInputError} naming the `options.tenants.*` field.
 */
export function createSharedTenantLimiter(settings: SharedTenantSettings): AdmissionStage {
  const { tiers, overrides, maxTenants } = resolveTenants(settings);
  if (typeof settings.source !== 'function')
    throw new InvalidInputError('options.tenants.source', 'a function returning the shared bucket of a rate', settings.source);
  return new SharedTenantLimiter(
    tiers,
    overrides,
    maxTenants,
    settings.source,
    settings.onError ?? (() => {}),
    settings.replicas ?? (() => 1),
  );
}

interface WindowState {
  /** The window's index, `floor(now / periodMs)`: windows are aligned, so every replica counts the same one. */
  index: number;
  /** The shared count reached the quota: refuse until the window ends. */
  closed: boolean;
  /** Admitted here and not yet counted in the shared window. */
  uncounted: number;
  pending: boolean;
  state: 'allowed' | 'hit-quota';
}

/** Settings of {@link createSharedPeriodLimit}. */
export interface SharedPeriodSettings {
  readonly quota: number;
  readonly periodMs: number;
  /** The shared window (the CLI passes a `RedisPeriodSource` of the same quota and period). */
  readonly source: PeriodSource;
  /** Keys counted at once here; past it the oldest is dropped (its window stays counted in the source). @default 100_000 */
  readonly maxKeys?: number;
  readonly onError?: (err: unknown) => void;
}

class SharedPeriodLimit implements AdmissionStage {
  readonly name = 'period' as const;
  readonly #quota: number;
  readonly #quotaText: string;
  readonly #periodMs: number;
  readonly #maxKeys: number;
  readonly #source: PeriodSource;
  readonly #onError: (err: unknown) => void;
  readonly #message: string;
  readonly #windows = new Map<string, WindowState>();
  readonly #backends: BackendCounts = { redis: 0, local: 0, none: 0 };
  #backend: PeriodBackend | null = null;
  #errors = 0;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;

  constructor(quota: number, periodMs: number, maxKeys: number, source: PeriodSource, onError: (err: unknown) => void) {
    this.#quota = quota;
    this.#quotaText = String(quota);
    this.#periodMs = periodMs;
    this.#maxKeys = maxKeys;
    this.#source = source;
    this.#onError = onError;
    this.#message = `the fleet-wide quota of ${quota} requests per ${periodMs} ms is used up; retry after x-retry-after-ms`;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const key = request.tenant;
    const index = Math.floor(nowMs / this.#periodMs);
    let w = this.#windows.get(key);
    if (w === undefined || w.index !== index) {
      if (w === undefined && this.#windows.size >= this.#maxKeys) this.#windows.delete(this.#windows.keys().next().value!);
      // What the ended window had not counted yet no longer matters: it has ended.
      w = { index, closed: false, uncounted: 0, pending: false, state: 'allowed' };
      this.#windows.set(key, w);
    }
    const resetMs = (index + 1) * this.#periodMs - nowMs;
    // The shared script answers one of three outcomes, not a count: the remaining quota is not
    // known here, so there is no x-quota-remaining.
    if (w.closed) {
      this.#rejected++;
      return refuse('period', resetMs, this.#message, {
        'x-quota-limit': this.#quotaText,
        'x-quota-reset-ms': String(Math.ceil(resetMs)),
        'x-quota-state': 'over-quota',
        'x-tidal-limit-backend': this.#backend ?? 'redis',
      });
    }
    w.uncounted++;
    if (!w.pending) this.#flush(key, w, nowMs);
    this.#inFlight++;
    this.#admitted++;
    return new OnceTicket(this, nowMs, 0, {
      'x-quota-limit': this.#quotaText,
      'x-quota-reset-ms': String(Math.ceil(resetMs)),
      'x-quota-state': w.state,
      'x-tidal-limit-backend': this.#backend ?? 'redis',
    });
  }

  /** Counts what was admitted into the shared window, in the background; one call per key in flight. */
  #flush(key: string, w: WindowState, nowMs: number): void {
    const n = w.uncounted;
    w.uncounted = 0;
    w.pending = true;
    // The window's index in the key: every replica counts an aligned window in the same key, and
    // the source's expiry (the period) drops it after.
    this.#source.take(`${key}:${w.index}`, n, nowMs).then(
      (d) => {
        w.pending = false;
        this.#backend = d.backend;
        this.#backends[d.backend]++;
        if (d.outcome === 'overQuota') w.closed = true;
        else if (d.outcome === 'hitQuota') {
          // The last unit went to this replica's count: the next request is over.
          w.closed = true;
          w.state = 'hit-quota';
        }
        if (w.uncounted > 0 && this.#windows.get(key) === w) this.#flush(key, w, nowMs);
      },
      (err: unknown) => {
        w.pending = false;
        this.#errors++;
        this.#onError(err);
      },
    );
  }

  onRelease(_ticket: OnceTicket, _outcome: Outcome): void {
    this.#inFlight--;
  }

  stats(): SharedStageStats {
    return {
      name: 'period',
      limit: this.#quota,
      inFlight: this.#inFlight,
      admitted: this.#admitted,
      rejected: this.#rejected,
      tracked: this.#windows.size,
      shared: true,
      backends: { ...this.#backends },
      backend: this.#backend,
      errors: this.#errors,
    };
  }
}

/**
 * Stage 6 with the window shared by every replica: `quota` requests per tenant per aligned
 * `periodMs`, counted in `settings.source`. Over it → the same 429 `TIDAL_SERVE_PERIOD_QUOTA`, with
 * `x-quota-limit`, `x-quota-reset-ms`, `x-quota-state` and `x-tidal-limit-backend` (no
 * `x-quota-remaining`: the shared window answers an outcome, not a count). While the source cannot
 * reach its server it admits (fail-open) and says `none`.
 *
 * @throws {@link InvalidInputError} naming the `options.period.*` field.
 */
export function createSharedPeriodLimit(settings: SharedPeriodSettings): AdmissionStage {
  const s = checkObject('options.period', settings);
  if (typeof (s.source as PeriodSource | undefined)?.take !== 'function')
    throw new InvalidInputError('options.period.source', 'a shared fixed window (take(key, n, nowMs))', s.source);
  return new SharedPeriodLimit(
    checkInteger('options.period.quota', s.quota, 1),
    checkInteger('options.period.periodMs', s.periodMs, 1),
    s.maxKeys === undefined ? PERIOD_DEFAULTS.maxKeys : checkInteger('options.period.maxKeys', s.maxKeys, 1),
    settings.source,
    settings.onError ?? (() => {}),
  );
}

/** The shared sources {@link createSharedAdmissionChain} decides through. */
export interface SharedSources {
  /** The tenant buckets, one source per rate spec; without it the tenant limiter stays in process. */
  readonly rate?: (spec: RateSpec) => SharedRateSource;
  /** The fixed window; without it the period limit stays in process. */
  readonly period?: PeriodSource;
  /** The replicas last seen alive. @default () => 1 */
  readonly replicas?: () => number;
  readonly onError?: (err: unknown) => void;
}

/**
 * `createAdmissionChain` with the tenant limiter and the period limit deciding through `shared`:
 * the same stages in the same order (cap → adaptive → tenant → permits → period), each setting
 * checked the same way. A shared window is counted by tenant on aligned periods.
 *
 * @throws {@link InvalidInputError} for any bad setting, and for `options.period.key` other than
 *   `'tenant'` with a shared window.
 */
export function createSharedAdmissionChain(options: AdmissionOptions, clock: Clock, shared: SharedSources): BuiltAdmissionChain {
  const o = checkObject('options', options) as unknown as AdmissionOptions;
  const rate = shared.rate;
  const period = shared.period;
  const local = createAdmissionChain(
    { ...o, tenants: rate === undefined ? o.tenants : false, period: period === undefined ? o.period : false },
    clock,
  );
  const stages = [...local.stages];
  const onError = shared.onError ?? (() => {});
  if (rate !== undefined && o.tenants !== false) {
    const tenant = createSharedTenantLimiter({
      ...(checkObject('options.tenants', o.tenants) as unknown as TenantLimiterSettings),
      source: rate,
      onError,
      replicas: shared.replicas ?? (() => 1),
    });
    // Right after the cap and the adaptive limit, before the permit pools: where the local one sits.
    const at = stages.findIndex((s) => s.name !== 'inflight' && s.name !== 'adaptive');
    stages.splice(at === -1 ? stages.length : at, 0, tenant);
  }
  if (period !== undefined && o.period !== false) {
    const p = checkObject('options.period', o.period);
    if (p.key !== 'tenant') throw new InvalidInputError('options.period.key', '"tenant" with a shared window', p.key);
    const settings: SharedPeriodSettings = { quota: p.quota as number, periodMs: p.periodMs as number, source: period, onError };
    stages.push(createSharedPeriodLimit(p.maxKeys === undefined ? settings : { ...settings, maxKeys: p.maxKeys as number }));
  }
  return composeAdmissionStages(stages);
}
