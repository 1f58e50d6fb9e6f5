import { InvalidInputError } from 'tidal-core';
import { OnceTicket, checkInteger, checkObject, checkPositive, refuse } from './errors.js';
import type { AdmissionStage, Outcome, RateSpec, Refusal, RequestInfo, StageStats, Ticket, Tier } from './types.js';

/** Settings of {@link createTenantLimiter}: `options.tenants`. */
export interface TenantLimiterSettings {
  readonly tiers?: Partial<Readonly<Record<Tier, RateSpec>>>;
  readonly overrides?: Readonly<Record<string, RateSpec>>;
  readonly maxTenants: number;
}

/** Per-tier defaults: burst = rate, one second's worth saved. */
export const TIER_DEFAULTS: Readonly<Record<Tier, RateSpec>> = Object.freeze({
  free: Object.freeze({ ratePerSecond: 100, burst: 100 }),
  pro: Object.freeze({ ratePerSecond: 1000, burst: 1000 }),
});

/** The key the overflow bucket answers for in `bucketFor`. */
export const OVERFLOW_TENANT = '(overflow)';

const PER_TOKEN = 1000;
/** Tolerance for fractional rates, whose refills are not exact binary fractions. */
const EPSILON = 1e-6;

/**
 * One tenant's token bucket, in millitokens as tidal-load's `TokenBucket` keeps it (whole rates on
 * a whole-millisecond clock refill by exact integers, so waits come out exact). Kept here because
 * tidal-serve depends on tidal-core alone, which does not re-export the bucket.
 */
class Bucket {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly message: string;
  #milli: number;
  #lastMs: number;

  constructor(spec: RateSpec, nowMs: number, message: string) {
    this.ratePerSecond = spec.ratePerSecond;
    this.burst = spec.burst;
    this.message = message;
    this.#milli = spec.burst * PER_TOKEN;
    this.#lastMs = nowMs;
  }

  /** `0` when a token was taken, else the whole milliseconds until one will be there. */
  tryTake(nowMs: number): number {
    if (nowMs > this.#lastMs) {
      const full = this.burst * PER_TOKEN;
      const next = this.#milli + (nowMs - this.#lastMs) * this.ratePerSecond;
      this.#milli = next > full ? full : next;
      this.#lastMs = nowMs;
    }
    if (this.#milli >= PER_TOKEN - EPSILON) {
      this.#milli -= PER_TOKEN;
      return 0;
    }
    const wait = Math.ceil((PER_TOKEN - this.#milli) / this.ratePerSecond - EPSILON);
    return wait < 1 ? 1 : wait;
  }

  /** Gives a token back (the request was refused further down the chain). */
  refund(): void {
    const next = this.#milli + PER_TOKEN;
    const full = this.burst * PER_TOKEN;
    this.#milli = next > full ? full : next;
  }

  available(nowMs: number): number {
    const elapsed = nowMs > this.#lastMs ? nowMs - this.#lastMs : 0;
    return Math.min(this.burst * PER_TOKEN, this.#milli + elapsed * this.ratePerSecond) / PER_TOKEN;
  }
}

/** The tenant limiter, with what tests and `/stats` read. */
export interface TenantLimiterStage extends AdmissionStage {
  readonly name: 'tenant';
  /** Tenants with a bucket of their own (overrides included). */
  readonly tenants: number;
  /** Requests that drew on the shared overflow bucket. */
  readonly overflowed: number;
  /** The bucket `tenant` draws on now (`OVERFLOW_TENANT` for the shared one), or `null` before its first request. */
  bucketFor(tenant: string): { readonly ratePerSecond: number; readonly burst: number; readonly shared: boolean; available(nowMs: number): number } | null;
}

class TenantLimiter implements TenantLimiterStage {
  readonly name = 'tenant' as const;
  readonly #tiers: Readonly<Record<Tier, RateSpec>>;
  readonly #overrides: ReadonlyMap<string, RateSpec>;
  readonly #maxTenants: number;
  readonly #buckets = new Map<string, Bucket>();
  /** Tenants past maxTenants share this one, at the free tier's rate: memory stays bounded and a limit still applies. */
  #overflow: Bucket | null = null;
  #overflowed = 0;
  /** Buckets that belong to overrides, which do not count against maxTenants. */
  #overridesSeen = 0;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;

  constructor(tiers: Readonly<Record<Tier, RateSpec>>, overrides: ReadonlyMap<string, RateSpec>, maxTenants: number) {
    this.#tiers = tiers;
    this.#overrides = overrides;
    this.#maxTenants = maxTenants;
  }

  get tenants(): number {
    return this.#buckets.size;
  }

  get overflowed(): number {
    return this.#overflowed;
  }

  #bucket(request: RequestInfo, nowMs: number): Bucket {
    const tenant = request.tenant;
    const known = this.#buckets.get(tenant);
    if (known !== undefined) return known;
    // Named tenants are bounded by the configuration itself, so they never count against maxTenants.
    const override = this.#overrides.get(tenant);
    if (override !== undefined || this.#buckets.size - this.#overridesSeen < this.#maxTenants) {
      const spec = override ?? this.#tiers[request.tier] ?? this.#tiers.free;
      const bucket = new Bucket(spec, nowMs, `tenant ${JSON.stringify(tenant)} is over its rate of ${spec.ratePerSecond}/s (burst ${spec.burst}); retry after x-retry-after-ms`);
      this.#buckets.set(tenant, bucket);
      if (override !== undefined) this.#overridesSeen++;
      return bucket;
    }
    this.#overflowed++;
    if (this.#overflow === null) {
      const spec = this.#tiers.free;
      this.#overflow = new Bucket(spec, nowMs, `more than ${this.#maxTenants} tenants are active; the ones past it share one bucket of ${spec.ratePerSecond}/s, now empty; retry after x-retry-after-ms`);
    }
    return this.#overflow;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const bucket = this.#bucket(request, nowMs);
    const wait = bucket.tryTake(nowMs);
    if (wait !== 0) {
      this.#rejected++;
      return refuse('tenant', wait, bucket.message);
    }
    this.#inFlight++;
    this.#admitted++;
    return new TenantTicket(this, bucket, nowMs);
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    this.#inFlight--;
    if (outcome.served === false) (ticket as TenantTicket).bucket.refund();
  }

  bucketFor(tenant: string): ReturnType<TenantLimiterStage['bucketFor']> {
    const b = tenant === OVERFLOW_TENANT ? this.#overflow : this.#buckets.get(tenant);
    if (b === undefined || b === null) return null;
    return { ratePerSecond: b.ratePerSecond, burst: b.burst, shared: b === this.#overflow, available: (nowMs: number) => b.available(nowMs) };
  }

  stats(): StageStats {
    return { name: 'tenant', limit: this.#maxTenants, inFlight: this.#inFlight, admitted: this.#admitted, rejected: this.#rejected, tracked: this.#buckets.size };
  }
}

class TenantTicket extends OnceTicket {
  readonly bucket: Bucket;

  constructor(target: TenantLimiter, bucket: Bucket, nowMs: number) {
    super(target, nowMs);
    this.bucket = bucket;
  }
}

function checkSpec(field: string, value: unknown): RateSpec {
  const o = checkObject(field, value);
  return Object.freeze({
    ratePerSecond: checkPositive(`${field}.ratePerSecond`, o.ratePerSecond),
    burst: checkInteger(`${field}.burst`, o.burst, 1, 1_000_000_000),
  });
}

/**
 * Stage 4: a token bucket per tenant. A tenant's bucket comes from its override if it has one, else
 * from its tier (`free` 100/s, `pro` 1000/s, burst = rate, unless `tiers` says otherwise). Past
 * `maxTenants` tenants, each new one (overrides aside) draws on a single shared overflow bucket at
 * the free tier's rate. Empty → a 429 `TIDAL_SERVE_TENANT_RATE` whose `retryAfterMs` is the time to
 * the next token. A request refused further down the chain gets its token back.
 *
 * @throws {@link InvalidInputError} naming the `options.tenants.*` field.
 */
export function createTenantLimiter(settings: TenantLimiterSettings): TenantLimiterStage {
  const s = checkObject('options.tenants', settings);
  const maxTenants = checkInteger('options.tenants.maxTenants', s.maxTenants, 1);
  const tiers: Record<Tier, RateSpec> = { ...TIER_DEFAULTS };
  if (s.tiers !== undefined) {
    const t = checkObject('options.tenants.tiers', s.tiers);
    for (const [name, spec] of Object.entries(t)) {
      if (name !== 'free' && name !== 'pro') throw new InvalidInputError('options.tenants.tiers', 'keyed by free or pro', name);
      if (spec !== undefined) tiers[name] = checkSpec(`options.tenants.tiers.${name}`, spec);
    }
  }
  const overrides = new Map<string, RateSpec>();
  if (s.overrides !== undefined) {
    const o = checkObject('options.tenants.overrides', s.overrides);
    for (const [tenant, spec] of Object.entries(o)) overrides.set(tenant, checkSpec(`options.tenants.overrides.${tenant}`, spec));
  }
  return new TenantLimiter(Object.freeze(tiers), overrides, maxTenants);
}
