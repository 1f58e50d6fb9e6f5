import { InvalidInputError } from 'tidal-core';
import { MILLITOKENS_PER_TOKEN, TokenBucket, addMillitokens, checkBurst, checkRate, takeWaitMs } from 'tidal-load';
import { OnceTicket, checkInteger, checkObject, refuse } from './errors.js';
import { SLOT, SLOT_FLOATS, SLOT_INTS, TABLE, keyHashes, lock, unlock, type SharedView, type TableLayout } from './shared-memory.js';
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

/** One tenant's bucket, and the refusal it answers with when empty (built once, not per refusal). */
interface Bucket {
  readonly tokens: TokenBucket;
  readonly message: string;
}

/** The tenant limiter, with what tests and `/stats` read. */
export interface TenantLimiterStage extends AdmissionStage {
  readonly name: 'tenant';
  /** Tenants with a bucket of their own (overrides included). */
  readonly tenants: number;
  /** Requests that drew on the shared overflow bucket. */
  readonly overflowed: number;
  /** The bucket `tenant` draws on now (`OVERFLOW_TENANT` for the shared one), or `null` before its first request. */
  bucketFor(
    tenant: string,
  ): { readonly ratePerSecond: number; readonly burst: number; readonly shared: boolean; available(nowMs: number): number } | null;
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
      const bucket = { tokens: new TokenBucket(spec.ratePerSecond, spec.burst, nowMs), message: tenantMessage(tenant, spec) };
      this.#buckets.set(tenant, bucket);
      if (override !== undefined) this.#overridesSeen++;
      return bucket;
    }
    this.#overflowed++;
    if (this.#overflow === null) {
      const spec = this.#tiers.free;
      this.#overflow = {
        tokens: new TokenBucket(spec.ratePerSecond, spec.burst, nowMs),
        message: `more than ${this.#maxTenants} tenants are active; the ones past it share one bucket of ${spec.ratePerSecond}/s, now empty; retry after x-retry-after-ms`,
      };
    }
    return this.#overflow;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const bucket = this.#bucket(request, nowMs);
    const wait = bucket.tokens.tryTake(nowMs);
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
    if (outcome.served === false) (ticket as TenantTicket).bucket.tokens.refund();
  }

  bucketFor(tenant: string): ReturnType<TenantLimiterStage['bucketFor']> {
    const b = tenant === OVERFLOW_TENANT ? this.#overflow : this.#buckets.get(tenant);
    if (b === undefined || b === null) return null;
    const t = b.tokens;
    return {
      ratePerSecond: t.ratePerSecond,
      burst: t.burst,
      shared: b === this.#overflow,
      available: (nowMs: number) => t.available(nowMs),
    };
  }

  stats(): StageStats {
    return {
      name: 'tenant',
      limit: this.#maxTenants,
      inFlight: this.#inFlight,
      admitted: this.#admitted,
      rejected: this.#rejected,
      tracked: this.#buckets.size,
    };
  }
}

class TenantTicket extends OnceTicket {
  readonly bucket: Bucket;

  constructor(target: TenantLimiter, bucket: Bucket, nowMs: number) {
    super(target, nowMs);
    this.bucket = bucket;
  }
}

/** A tier's or tenant's rate, checked as tidal-load's `TokenBucket` checks its own. */
function checkSpec(field: string, value: unknown): RateSpec {
  const o = checkObject(field, value);
  return Object.freeze({
    ratePerSecond: checkRate(`${field}.ratePerSecond`, o.ratePerSecond),
    burst: checkBurst(`${field}.burst`, o.burst),
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
  const r = resolveTenants(settings);
  return new TenantLimiter(r.tiers, r.overrides, r.maxTenants);
}

/** `options.tenants`, checked: the tiers with their defaults filled in, the overrides by tenant. */
export interface ResolvedTenants {
  readonly tiers: Readonly<Record<Tier, RateSpec>>;
  readonly overrides: ReadonlyMap<string, RateSpec>;
  readonly maxTenants: number;
}

/** @throws {@link InvalidInputError} naming the `options.tenants.*` field. */
export function resolveTenants(settings: TenantLimiterSettings): ResolvedTenants {
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
  return { tiers: Object.freeze(tiers), overrides, maxTenants };
}

// The bucket's fields in its table entry's Float64 part, read and written under the entry's lock.
const MILLI = 0;
const LAST = 1;
const RATE = 2;
const BURST = 3;

function tenantMessage(tenant: string, spec: { readonly ratePerSecond: number; readonly burst: number }): string {
  return `tenant ${JSON.stringify(tenant)} is over its rate of ${spec.ratePerSecond}/s (burst ${spec.burst}); retry after x-retry-after-ms`;
}

/**
 * The tenant buckets in a shared table: an entry per tenant, found by its hash (and told from
 * another by a second hash), inserted under the table's lock, never moved nor freed (as the
 * single-thread limiter never drops a bucket). A bucket is taken from and refunded under its entry's
 * spinlock, with tidal-load's bucket arithmetic (`addMillitokens`, `takeWaitMs`) on its Float64 fields.
 */
class SharedTenantLimiter implements TenantLimiterStage {
  readonly name = 'tenant' as const;
  readonly #r: ResolvedTenants;
  readonly #c: Int32Array;
  readonly #f: Float64Array;
  readonly #t: TableLayout;
  readonly #mask: number;
  readonly #hash = new Int32Array(2);
  readonly #overflowMessage: string;
  /** Messages of the tenants refused lately, so a refusal does not build its string every time. */
  readonly #messages = new Map<string, string>();

  constructor(r: ResolvedTenants, view: SharedView) {
    this.#r = r;
    this.#c = view.cells;
    this.#f = view.floats;
    this.#t = view.layout.tenants!;
    this.#mask = this.#t.slots - 1;
    const spec = r.tiers.free;
    this.#overflowMessage = `more than ${r.maxTenants} tenants are active; the ones past it share one bucket of ${spec.ratePerSecond}/s, now empty; retry after x-retry-after-ms`;
  }

  get tenants(): number {
    return Atomics.load(this.#c, this.#t.header + TABLE.size);
  }

  get overflowed(): number {
    return Atomics.load(this.#c, this.#t.header + TABLE.overflowed);
  }

  /** The entry of the key in `#hash`, or −1. */
  #find(): number {
    const c = this.#c;
    const h = this.#hash[0]!;
    const fp = this.#hash[1]!;
    for (let i = h & this.#mask; ; i = (i + 1) & this.#mask) {
      const e = this.#t.ints + i * SLOT_INTS;
      if (Atomics.load(c, e + SLOT.state) === 0) return -1;
      if (Atomics.load(c, e + SLOT.hash) === h && Atomics.load(c, e + SLOT.fp) === fp) return i;
    }
  }

  #init(slot: number, spec: RateSpec, nowMs: number): void {
    const b = this.#t.floats + slot * SLOT_FLOATS;
    this.#f[MILLI + b] = spec.burst * MILLITOKENS_PER_TOKEN;
    this.#f[LAST + b] = nowMs;
    this.#f[RATE + b] = spec.ratePerSecond;
    this.#f[BURST + b] = spec.burst;
  }

  /** The entry `request`'s tenant draws on: its own, a new one, or the overflow one (`slots`). */
  #slot(request: RequestInfo, nowMs: number): number {
    keyHashes('', request.tenant, this.#hash);
    const known = this.#find();
    if (known !== -1) return known;
    const c = this.#c;
    const head = this.#t.header;
    lock(c, head + TABLE.lock);
    try {
      const again = this.#find();
      if (again !== -1) return again;
      const override = this.#r.overrides.get(request.tenant);
      if (override !== undefined || Atomics.load(c, head + TABLE.tiered) < this.#r.maxTenants) {
        const h = this.#hash[0]!;
        let i = h & this.#mask;
        while (Atomics.load(c, this.#t.ints + i * SLOT_INTS + SLOT.state) !== 0) i = (i + 1) & this.#mask;
        const e = this.#t.ints + i * SLOT_INTS;
        this.#init(i, override ?? this.#r.tiers[request.tier] ?? this.#r.tiers.free, nowMs);
        Atomics.store(c, e + SLOT.hash, h);
        Atomics.store(c, e + SLOT.fp, this.#hash[1]!);
        // Published last: a thread that sees the entry used sees its key and its bucket.
        Atomics.store(c, e + SLOT.state, 1);
        Atomics.add(c, head + TABLE.size, 1);
        if (override === undefined) Atomics.add(c, head + TABLE.tiered, 1);
        return i;
      }
      Atomics.add(c, head + TABLE.overflowed, 1);
      if (Atomics.load(c, head + TABLE.overflowReady) === 0) {
        this.#init(this.#t.slots, this.#r.tiers.free, nowMs);
        Atomics.store(c, head + TABLE.overflowReady, 1);
      }
      return this.#t.slots;
    } finally {
      unlock(c, head + TABLE.lock);
    }
  }

  /** `0` when a token was taken, else the whole milliseconds until one will be there (as `TokenBucket.tryTake`). */
  #tryTake(slot: number, nowMs: number): number {
    const f = this.#f;
    const b = this.#t.floats + slot * SLOT_FLOATS;
    const l = this.#t.ints + slot * SLOT_INTS + SLOT.lock;
    lock(this.#c, l);
    const rate = f[RATE + b]!;
    let milli = f[MILLI + b]!;
    const last = f[LAST + b]!;
    if (nowMs > last) {
      milli = addMillitokens(milli, (nowMs - last) * rate, f[BURST + b]!);
      f[LAST + b] = nowMs;
    }
    const wait = takeWaitMs(milli, 1, rate);
    f[MILLI + b] = wait === 0 ? milli - MILLITOKENS_PER_TOKEN : milli;
    unlock(this.#c, l);
    return wait;
  }

  refund(slot: number): void {
    const f = this.#f;
    const b = this.#t.floats + slot * SLOT_FLOATS;
    const l = this.#t.ints + slot * SLOT_INTS + SLOT.lock;
    lock(this.#c, l);
    f[MILLI + b] = addMillitokens(f[MILLI + b]!, MILLITOKENS_PER_TOKEN, f[BURST + b]!);
    unlock(this.#c, l);
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const slot = this.#slot(request, nowMs);
    const wait = this.#tryTake(slot, nowMs);
    const head = this.#t.header;
    if (wait !== 0) {
      Atomics.add(this.#c, head + TABLE.rejected, 1);
      return refuse('tenant', wait, slot === this.#t.slots ? this.#overflowMessage : this.#messageOf(request.tenant, slot));
    }
    Atomics.add(this.#c, head + TABLE.inFlight, 1);
    Atomics.add(this.#c, head + TABLE.admitted, 1);
    return new SharedTenantTicket(this, slot, nowMs);
  }

  #messageOf(tenant: string, slot: number): string {
    let m = this.#messages.get(tenant);
    if (m === undefined) {
      const b = this.#t.floats + slot * SLOT_FLOATS;
      m = tenantMessage(tenant, { ratePerSecond: this.#f[RATE + b]!, burst: this.#f[BURST + b]! });
      // Bounded: a flood of new tenants rebuilds messages rather than growing this map.
      if (this.#messages.size >= 1024) this.#messages.clear();
      this.#messages.set(tenant, m);
    }
    return m;
  }

  onRelease(ticket: OnceTicket, outcome: Outcome): void {
    Atomics.sub(this.#c, this.#t.header + TABLE.inFlight, 1);
    if (outcome.served === false) this.refund((ticket as SharedTenantTicket).slot);
  }

  bucketFor(tenant: string): ReturnType<TenantLimiterStage['bucketFor']> {
    let slot: number;
    if (tenant === OVERFLOW_TENANT) {
      if (Atomics.load(this.#c, this.#t.header + TABLE.overflowReady) === 0) return null;
      slot = this.#t.slots;
    } else {
      keyHashes('', tenant, this.#hash);
      slot = this.#find();
      if (slot === -1) return null;
    }
    const f = this.#f;
    const b = this.#t.floats + slot * SLOT_FLOATS;
    const l = this.#t.ints + slot * SLOT_INTS + SLOT.lock;
    const c = this.#c;
    return {
      ratePerSecond: f[RATE + b]!,
      burst: f[BURST + b]!,
      shared: slot === this.#t.slots,
      available: (nowMs: number) => {
        lock(c, l);
        const elapsed = nowMs > f[LAST + b]! ? nowMs - f[LAST + b]! : 0;
        const milli = addMillitokens(f[MILLI + b]!, elapsed * f[RATE + b]!, f[BURST + b]!);
        unlock(c, l);
        return milli / MILLITOKENS_PER_TOKEN;
      },
    };
  }

  stats(): StageStats {
    const c = this.#c;
    const h = this.#t.header;
    return {
      name: 'tenant',
      limit: this.#r.maxTenants,
      inFlight: Atomics.load(c, h + TABLE.inFlight),
      admitted: Atomics.load(c, h + TABLE.admitted),
      rejected: Atomics.load(c, h + TABLE.rejected),
      tracked: Atomics.load(c, h + TABLE.size),
    };
  }
}

class SharedTenantTicket extends OnceTicket {
  readonly slot: number;

  constructor(target: SharedTenantLimiter, slot: number, nowMs: number) {
    super(target, nowMs);
    this.slot = slot;
  }
}

/** {@link createTenantLimiter} over a shared state's table (built by the chain with `{ shared }`). */
export function createTenantLimiterInSharedMemory(settings: TenantLimiterSettings, view: SharedView): TenantLimiterStage {
  return new SharedTenantLimiter(resolveTenants(settings), view);
}
