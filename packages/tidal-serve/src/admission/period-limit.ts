import { InvalidInputError } from 'tidal-core';
import { OnceTicket, checkInteger, checkObject, refuse } from './errors.js';
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

/** What one request did to its key's quota (seed: PeriodAllowed / PeriodHitQuota / PeriodOverQuota). */
export type PeriodOutcome = 'allowed' | 'hit-quota' | 'over-quota';

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
      if (into === undefined) this.#groups.set(route, (into = new Map()));
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
    return w.count < this.#quota ? 'allowed' : w.count === this.#quota ? 'hit-quota' : 'over-quota';
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
    return { name: 'period', limit: this.#quota, inFlight: this.#inFlight, admitted: this.#admitted, rejected: this.#rejected, tracked: this.#size };
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
  const s = checkObject('options.period', settings);
  if (typeof s.align !== 'boolean') throw new InvalidInputError('options.period.align', 'a boolean', s.align);
  if (s.key !== 'tenant' && s.key !== 'tenant+route') throw new InvalidInputError('options.period.key', '"tenant" or "tenant+route"', s.key);
  return new PeriodLimit({
    quota: checkInteger('options.period.quota', s.quota, 1),
    periodMs: checkInteger('options.period.periodMs', s.periodMs, 1),
    align: s.align,
    key: s.key,
    maxKeys: s.maxKeys === undefined ? PERIOD_DEFAULTS.maxKeys : checkInteger('options.period.maxKeys', s.maxKeys, 1),
  });
}
