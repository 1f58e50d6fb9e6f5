import { InvalidInputError } from 'tidal-core';
import { periodOutcome } from 'tidal-load';
import { OnceTicket, checkInteger, checkObject, refuse } from './errors.js';
import { SLOT, SLOT_FLOATS, SLOT_INTS, TABLE, keyHashes, lock, unlock, type SharedView, type TableLayout } from './shared-memory.js';
import type { AdmissionStage, Outcome, Refusal, RequestInfo, StageStats, Ticket } from './types.js';

/** Settings of {@link createPeriodLimit}: `options.period`. */
export interface PeriodLimitSettings {
  readonly quota: number;
  readonly periodMs: number;
  readonly align: boolean;
  readonly key: 'tenant' | 'tenant+route';
  /** @default 100_000 */
  readonly maxKeys?: number;
}

export const PERIOD_DEFAULTS = Object.freeze({
  // An entry is a key string plus a two-field object, ≈ 100–150 bytes: 100 000 keys ≈ 10–15 MB.
  maxKeys: 100_000,
});

/** tidal-load's three fixed-window outcomes, as `x-quota-state` spells them. */
const QUOTA_STATE = Object.freeze({ allowed: 'allowed', hitQuota: 'hit-quota', overQuota: 'over-quota' } as const);

/** What one request did to its key's quota (seed: PeriodAllowed / PeriodHitQuota / PeriodOverQuota). */
export type PeriodOutcome = (typeof QUOTA_STATE)[keyof typeof QUOTA_STATE];

/** The key the shared overflow counter answers for in `windowOf`. */
export const OVERFLOW_KEY = '(overflow)';

interface Window {
  startMs: number;
  count: number;
}

/** The period limit, with what tests and `/stats` read. */
export interface PeriodLimitStage extends AdmissionStage {
  readonly name: 'period';
  /** Keys counted now. */
  readonly keys: number;
  /** Requests counted on the shared overflow counter. */
  readonly overflowed: number;
  /**
   * Accounts for one request under `key` (a tenant) at `nowMs`: what `admit` does, without a
   * ticket. `route` matters only with `key: 'tenant+route'`; `''` otherwise.
   */
  take(key: string, nowMs: number, route?: string): PeriodOutcome;
  /** The window `key` (and `route`) is counted in now (a copy; `OVERFLOW_KEY` for the shared one), or `null` when it has none. */
  windowOf(key: string, route?: string): { readonly startMs: number; readonly count: number } | null;
}

class PeriodLimit implements PeriodLimitStage {
  readonly name = 'period' as const;
  readonly #quota: number;
  readonly #quotaText: string;
  readonly #periodMs: number;
  readonly #align: boolean;
  readonly #byRoute: boolean;
  readonly #maxKeys: number;
  readonly #message: string;
  /**
   * Windows by route (all under `''` when counting by tenant alone), then by tenant: two lookups of
   * strings the server already holds, rather than building and hashing a `tenant+route` string per
   * request. In each map insertion order is window-start order: a key whose period renews is
   * deleted and set again, so it moves to the end. Expired windows are therefore always at the
   * front, and dropping them costs O(1) per key dropped, never a scan.
   */
  readonly #groups = new Map<string, Map<string, Window>>();
  #size = 0;
  /** Keys past maxKeys share this counter: memory stays bounded and the quota still applies, more strictly. */
  readonly #overflow: Window = { startMs: Number.NEGATIVE_INFINITY, count: 0 };
  #overflowed = 0;
  #inFlight = 0;
  #admitted = 0;
  #rejected = 0;

  constructor(s: Required<PeriodLimitSettings>) {
    this.#quota = s.quota;
    this.#quotaText = String(s.quota);
    this.#periodMs = s.periodMs;
    this.#align = s.align;
    this.#byRoute = s.key === 'tenant+route';
    this.#maxKeys = s.maxKeys;
    this.#message = `the quota of ${s.quota} requests per ${s.periodMs} ms is used up; retry after x-retry-after-ms`;
  }

  get keys(): number {
    return this.#size;
  }

  get overflowed(): number {
    return this.#overflowed;
  }

  #startAt(nowMs: number): number {
    return this.#align ? Math.floor(nowMs / this.#periodMs) * this.#periodMs : nowMs;
  }

  /** Drops expired windows from the front of `group`, at most `max` of them. */
  #evict(route: string, group: Map<string, Window>, nowMs: number, max: number): void {
    let dropped = 0;
    for (const [key, w] of group) {
      if (dropped >= max || w.startMs + this.#periodMs > nowMs) break;
      group.delete(key);
      dropped++;
    }
    this.#size -= dropped;
    if (group.size === 0) this.#groups.delete(route);
  }

  #window(route: string, key: string, nowMs: number): Window {
    const group = this.#groups.get(route);
    const w = group?.get(key);
    if (w !== undefined) {
      if (nowMs >= w.startMs + this.#periodMs) {
        w.startMs = this.#startAt(nowMs);
        w.count = 0;
        group!.delete(key);
        group!.set(key, w);
      }
      return w;
    }
    // A new key: tidy a little as it comes in, everything expired only when the map is full.
    if (group !== undefined) this.#evict(route, group, nowMs, 2);
    if (this.#size >= this.#maxKeys) for (const [r, g] of this.#groups) this.#evict(r, g, nowMs, Number.POSITIVE_INFINITY);
    if (this.#size < this.#maxKeys) {
      const fresh = { startMs: this.#startAt(nowMs), count: 0 };
      let into = this.#groups.get(route);
      if (into === undefined) this.#groups.set(route, (into = new Map<string, Window>()));
      into.set(key, fresh);
      this.#size++;
      return fresh;
    }
    this.#overflowed++;
    const o = this.#overflow;
    if (nowMs >= o.startMs + this.#periodMs) {
      o.startMs = this.#startAt(nowMs);
      o.count = 0;
    }
    return o;
  }

  /** Counts one request under `key`; returns its window. */
  #count(route: string, key: string, nowMs: number): Window {
    const w = this.#window(route, key, nowMs);
    // Stop counting one past the quota: the state is decided, and the count cannot grow without bound.
    if (w.count <= this.#quota) w.count++;
    return w;
  }

  #outcome(w: Window): PeriodOutcome {
    return QUOTA_STATE[periodOutcome(w.count, this.#quota)];
  }

  take(key: string, nowMs: number, route = ''): PeriodOutcome {
    return this.#outcome(this.#count(route, key, nowMs));
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const w = this.#count(this.#byRoute ? request.route : '', request.tenant, nowMs);
    const outcome = this.#outcome(w);
    // Whole milliseconds, rounded up: a retry that late finds the new period (and an integer prints
    // several times faster than a fraction).
    const resetMs = Math.ceil(w.startMs + this.#periodMs - nowMs);
    const headers = {
      'x-quota-limit': this.#quotaText,
      'x-quota-remaining': String(w.count < this.#quota ? this.#quota - w.count : 0),
      'x-quota-reset-ms': String(resetMs),
      'x-quota-state': outcome,
    };
    if (outcome === 'over-quota') {
      this.#rejected++;
      // The quota refills when the period ends.
      return refuse('period', resetMs, this.#message, headers);
    }
    this.#inFlight++;
    this.#admitted++;
    return new OnceTicket(this, nowMs, 0, headers);
  }

  onRelease(_ticket: OnceTicket, _outcome: Outcome): void {
    this.#inFlight--;
  }

  windowOf(key: string, route = ''): { readonly startMs: number; readonly count: number } | null {
    const w = key === OVERFLOW_KEY ? this.#overflow : this.#groups.get(route)?.get(key);
    return w === undefined ? null : { startMs: w.startMs, count: w.count };
  }

  stats(): StageStats {
    return {
      name: 'period',
      limit: this.#quota,
      inFlight: this.#inFlight,
      admitted: this.#admitted,
      rejected: this.#rejected,
      tracked: this.#size,
    };
  }
}

/**
 * Stage 6: a fixed-window quota per key (the tenant, or tenant and route). A key's window opens on
 * its first request, or with `align` at a multiple of `periodMs`, and starts again once the period
 * has passed. Each request is `allowed` below the quota, `hit-quota` for the one that uses the last
 * unit, `over-quota` beyond it: the last is a 429 `TIDAL_SERVE_PERIOD_QUOTA` with `retryAfterMs` the
 * time to the period's end. Tickets and refusals carry `x-quota-limit`, `x-quota-remaining`,
 * `x-quota-reset-ms` and `x-quota-state`. The window lives in this process: N replicas admit N quotas.
 *
 * @throws {@link InvalidInputError} naming the `options.period.*` field.
 */
export function createPeriodLimit(settings: PeriodLimitSettings): PeriodLimitStage {
  return new PeriodLimit(resolvePeriod(settings));
}

function resolvePeriod(settings: PeriodLimitSettings): Required<PeriodLimitSettings> {
  const s = checkObject('options.period', settings);
  if (typeof s.align !== 'boolean') throw new InvalidInputError('options.period.align', 'a boolean', s.align);
  if (s.key !== 'tenant' && s.key !== 'tenant+route')
    throw new InvalidInputError('options.period.key', '"tenant" or "tenant+route"', s.key);
  return {
    quota: checkInteger('options.period.quota', s.quota, 1),
    periodMs: checkInteger('options.period.periodMs', s.periodMs, 1),
    align: s.align,
    key: s.key,
    maxKeys: s.maxKeys === undefined ? PERIOD_DEFAULTS.maxKeys : checkInteger('options.period.maxKeys', s.maxKeys, 1),
  };
}

/**
 * The period counters in a shared table: an entry per key (tenant, or tenant and route), found by
 * its hashes; a request counts under the entry's spinlock (renew the window if its period is over,
 * add one up to one past the quota), so a renewal and a count never interleave. A new key takes,
 * under the table's lock, the first entry on its probe path whose window has expired (expired
 * windows are dropped first, as in one thread), else an empty one while fewer than `maxKeys` are
 * used, else the overflow counter. Entries are never emptied, so a probe always reaches its key.
 */
class SharedPeriodLimit implements PeriodLimitStage {
  readonly name = 'period' as const;
  readonly #s: Required<PeriodLimitSettings>;
  readonly #quotaText: string;
  readonly #message: string;
  readonly #c: Int32Array;
  readonly #f: Float64Array;
  readonly #t: TableLayout;
  readonly #mask: number;
  readonly #hash = new Int32Array(2);

  constructor(s: Required<PeriodLimitSettings>, view: SharedView) {
    this.#s = s;
    this.#quotaText = String(s.quota);
    this.#message = `the quota of ${s.quota} requests per ${s.periodMs} ms is used up; retry after x-retry-after-ms`;
    this.#c = view.cells;
    this.#f = view.floats;
    this.#t = view.layout.period!;
    this.#mask = this.#t.slots - 1;
  }

  get keys(): number {
    return Atomics.load(this.#c, this.#t.header + TABLE.size);
  }

  get overflowed(): number {
    return Atomics.load(this.#c, this.#t.header + TABLE.overflowed);
  }

  #startAt(nowMs: number): number {
    return this.#s.align ? Math.floor(nowMs / this.#s.periodMs) * this.#s.periodMs : nowMs;
  }

  #int(slot: number, field: number): number {
    return this.#t.ints + slot * SLOT_INTS + field;
  }

  #start(slot: number): number {
    return this.#t.floats + slot * SLOT_FLOATS;
  }

  /** The key in `#hash`'s entry, locked, or −1. */
  #findLocked(): number {
    const c = this.#c;
    const h = this.#hash[0]!;
    const fp = this.#hash[1]!;
    for (let i = h & this.#mask; ; i = (i + 1) & this.#mask) {
      if (Atomics.load(c, this.#int(i, SLOT.state)) === 0) return -1;
      if (Atomics.load(c, this.#int(i, SLOT.hash)) !== h || Atomics.load(c, this.#int(i, SLOT.fp)) !== fp) continue;
      lock(c, this.#int(i, SLOT.lock));
      // An expired entry can be given to another key (under its lock): check again.
      if (Atomics.load(c, this.#int(i, SLOT.hash)) === h && Atomics.load(c, this.#int(i, SLOT.fp)) === fp) return i;
      unlock(c, this.#int(i, SLOT.lock));
    }
  }

  #expired(slot: number, nowMs: number): boolean {
    return this.#f[this.#start(slot)]! + this.#s.periodMs <= nowMs;
  }

  /** The entry `(route, key)` counts in, locked; its window renewed if its period is over. */
  #entry(route: string, key: string, nowMs: number): number {
    keyHashes(route, key, this.#hash);
    const c = this.#c;
    let slot = this.#findLocked();
    if (slot === -1) slot = this.#insert(nowMs);
    if (this.#expired(slot, nowMs)) {
      this.#f[this.#start(slot)] = this.#startAt(nowMs);
      Atomics.store(c, this.#int(slot, SLOT.count), 0);
    }
    return slot;
  }

  #insert(nowMs: number): number {
    const c = this.#c;
    const head = this.#t.header;
    const h = this.#hash[0]!;
    const fp = this.#hash[1]!;
    lock(c, head + TABLE.lock);
    try {
      const again = this.#findLocked();
      if (again !== -1) return again;
      let i = h & this.#mask;
      for (; Atomics.load(c, this.#int(i, SLOT.state)) !== 0; i = (i + 1) & this.#mask) {
        lock(c, this.#int(i, SLOT.lock));
        if (this.#expired(i, nowMs)) {
          // Reused: the key whose window expired starts afresh elsewhere when it comes back.
          Atomics.store(c, this.#int(i, SLOT.hash), h);
          Atomics.store(c, this.#int(i, SLOT.fp), fp);
          return i;
        }
        unlock(c, this.#int(i, SLOT.lock));
      }
      if (Atomics.load(c, head + TABLE.size) < this.#s.maxKeys) {
        lock(c, this.#int(i, SLOT.lock));
        this.#f[this.#start(i)] = Number.NEGATIVE_INFINITY;
        Atomics.store(c, this.#int(i, SLOT.hash), h);
        Atomics.store(c, this.#int(i, SLOT.fp), fp);
        Atomics.store(c, this.#int(i, SLOT.state), 1);
        Atomics.add(c, head + TABLE.size, 1);
        return i;
      }
      Atomics.add(c, head + TABLE.overflowed, 1);
      const o = this.#t.slots;
      lock(c, this.#int(o, SLOT.lock));
      if (Atomics.load(c, head + TABLE.overflowReady) === 0) {
        this.#f[this.#start(o)] = Number.NEGATIVE_INFINITY;
        Atomics.store(c, head + TABLE.overflowReady, 1);
      }
      return o;
    } finally {
      unlock(c, head + TABLE.lock);
    }
  }

  /** Counts one request (stops one past the quota); returns the count and the window's start. */
  #count(route: string, key: string, nowMs: number): { count: number; startMs: number } {
    const slot = this.#entry(route, key, nowMs);
    const c = this.#c;
    const at = this.#int(slot, SLOT.count);
    let count = Atomics.load(c, at);
    if (count <= this.#s.quota) Atomics.store(c, at, ++count);
    const startMs = this.#f[this.#start(slot)]!;
    unlock(c, this.#int(slot, SLOT.lock));
    return { count, startMs };
  }

  #outcome(count: number): PeriodOutcome {
    return QUOTA_STATE[periodOutcome(count, this.#s.quota)];
  }

  take(key: string, nowMs: number, route = ''): PeriodOutcome {
    return this.#outcome(this.#count(route, key, nowMs).count);
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const w = this.#count(this.#s.key === 'tenant+route' ? request.route : '', request.tenant, nowMs);
    const outcome = this.#outcome(w.count);
    const q = this.#s.quota;
    const resetMs = Math.ceil(w.startMs + this.#s.periodMs - nowMs);
    const headers = {
      'x-quota-limit': this.#quotaText,
      'x-quota-remaining': String(w.count < q ? q - w.count : 0),
      'x-quota-reset-ms': String(resetMs),
      'x-quota-state': outcome,
    };
    const head = this.#t.header;
    if (outcome === 'over-quota') {
      Atomics.add(this.#c, head + TABLE.rejected, 1);
      return refuse('period', resetMs, this.#message, headers);
    }
    Atomics.add(this.#c, head + TABLE.inFlight, 1);
    Atomics.add(this.#c, head + TABLE.admitted, 1);
    return new OnceTicket(this, nowMs, 0, headers);
  }

  onRelease(_ticket: OnceTicket, _outcome: Outcome): void {
    Atomics.sub(this.#c, this.#t.header + TABLE.inFlight, 1);
  }

  windowOf(key: string, route = ''): { readonly startMs: number; readonly count: number } | null {
    const c = this.#c;
    let slot: number;
    if (key === OVERFLOW_KEY) {
      slot = this.#t.slots;
      if (Atomics.load(c, this.#t.header + TABLE.overflowReady) === 0) return null;
      lock(c, this.#int(slot, SLOT.lock));
    } else {
      keyHashes(route, key, this.#hash);
      slot = this.#findLocked();
      if (slot === -1) return null;
    }
    const w = { startMs: this.#f[this.#start(slot)]!, count: Atomics.load(c, this.#int(slot, SLOT.count)) };
    unlock(c, this.#int(slot, SLOT.lock));
    return w;
  }

  stats(): StageStats {
    const c = this.#c;
    const h = this.#t.header;
    return {
      name: 'period',
      limit: this.#s.quota,
      inFlight: Atomics.load(c, h + TABLE.inFlight),
      admitted: Atomics.load(c, h + TABLE.admitted),
      rejected: Atomics.load(c, h + TABLE.rejected),
      tracked: Atomics.load(c, h + TABLE.size),
    };
  }
}

/** {@link createPeriodLimit} over a shared state's table (built by the chain with `{ shared }`). */
export function createPeriodLimitInSharedMemory(settings: PeriodLimitSettings, view: SharedView): PeriodLimitStage {
  return new SharedPeriodLimit(resolvePeriod(settings), view);
}
