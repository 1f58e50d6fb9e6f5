/**
 * The contracts of limits that may be shared by every replica of a deployment, and their local
 * implementations. A caller holds a {@link RateSource}, a {@link PeriodSource} or a
 * {@link SlotSource} and does not know whether the state is in this process or on a server:
 * tidal-fleet implements the same interfaces on Redis and PostgreSQL, and falls back to these local
 * ones when its server cannot be reached. Nothing here does I/O; the caller passes the time.
 */
import { AbortedError, InvalidInputError, SlotTimeoutError } from './errors.js';
import { TokenBucket, checkBurst, checkRate } from './token-bucket.js';

/** Where a rate decision was made: the shared server, or this process (alone, or as a fallback). */
export type RateBackend = 'redis' | 'local';

/** One token-bucket decision. */
export interface RateDecision {
  /** Which bucket decided: the shared one, or a bucket in this process. */
  readonly backend: RateBackend;
  readonly allowed: boolean;
  /** `0` when allowed; otherwise the milliseconds until the tokens asked for will be there. */
  readonly retryAfterMs: number;
  /** Whole tokens left in the bucket after this decision. */
  readonly remaining: number;
}

/** A token bucket per key. */
export interface RateSource {
  /**
   * Takes `n` tokens from `key`'s bucket, all or none. Never rejects for an unreachable server: a
   * shared source answers from a local bucket then, and says so in `backend`.
   *
   * @param nowMs - this process's clock; a shared source decides on its server's clock instead.
   * @throws {@link InvalidInputError} for an empty key or an `n` outside 1–burst.
   */
  take(key: string, n: number, nowMs: number): Promise<RateDecision>;
}

/** The three outcomes of a fixed-window decision. */
export type PeriodOutcome =
  /** Below the quota: admitted. */
  | 'allowed'
  /** Exactly at the quota: admitted, and the last one this window. */
  | 'hitQuota'
  /** Past the quota: refused. */
  | 'overQuota';

/**
 * Where a fixed-window decision was made; `'none'` means no limiter could decide and the request
 * was admitted unchecked (fail-open: the limiter guards the service, it must not be able to close it).
 */
export type PeriodBackend = 'redis' | 'local' | 'none';

export interface PeriodDecision {
  readonly backend: PeriodBackend;
  readonly outcome: PeriodOutcome;
}

/** A fixed window per key: `quota` per `periodMs`, the window opening on the key's first request. */
export interface PeriodSource {
  /**
   * Counts `n` requests against `key`'s current window.
   * @throws {@link InvalidInputError} for an empty key or an `n` that is not a positive whole number.
   */
  take(key: string, n: number, nowMs: number): Promise<PeriodDecision>;
}

/** Where a concurrency slot is held. */
export type SlotBackend = 'postgres' | 'local';

/** A held slot. `release()` gives it back; calling it again does nothing. */
export interface SlotLease {
  readonly backend: SlotBackend;
  readonly resource: string;
  /** Which slot, 0 to limit − 1. */
  readonly slot: number;
  release(): void;
}

export interface AcquireOptions {
  /** When to give up waiting, on the source's clock (`Date.now()` unless it was given another). */
  deadlineMs: number;
  /** Aborting leaves the wait at once with an `AbortedError`. */
  signal?: AbortSignal;
}

/** Concurrency slots: at most `limit` calls to `resource` at once. */
export interface SlotSource {
  /**
   * Takes one of `resource`'s `limit` slots, waiting for one when all are taken. The wait counts
   * against the deadline.
   *
   * @throws {@link SlotTimeoutError} naming the limit and the wait when the deadline passes first.
   * @throws {@link InvalidInputError} for a limit that is not a whole number from 1 to {@link SLOT_CEILING}.
   */
  acquire(resource: string, limit: number, options: AcquireOptions): Promise<SlotLease>;
}

/**
 * The most slots a resource may have. Each call holding a shared slot holds a lock on a database
 * session for its length, so a slot limit is for an upstream that takes a few calls at once (an
 * embedder with `max_concurrent_calls`), not a throughput setting.
 */
export const SLOT_CEILING = 32;

/**
 * Validates a configured concurrency limit. A value that is not a whole number is refused rather than
 * read as unlimited: a limit an operator set and the code silently ignored is an upstream flooded by
 * the calls it was set to hold back.
 * @throws {@link InvalidInputError}
 */
export function checkSlotLimit(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > SLOT_CEILING) {
    throw new InvalidInputError(field, `a whole number from 1 to ${SLOT_CEILING}`, value);
  }
  return value;
}

/** @throws {@link InvalidInputError} unless `key` is a non-empty string of at most 512 characters. */
export function checkLimitKey(field: string, key: unknown): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > 512) {
    throw new InvalidInputError(field, 'a non-empty string of at most 512 characters', key);
  }
  return key;
}

function checkCount(field: string, n: unknown, max: number): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > max) {
    throw new InvalidInputError(field, `a whole number from 1 to ${max}`, n);
  }
  return n;
}

/** Options of {@link LocalRateSource}. */
export interface LocalRateOptions {
  /**
   * Buckets kept at once; past it the least recently created is dropped (it comes back full).
   * @default 100_000
   */
  maxKeys?: number;
}

/** A {@link TokenBucket} per key, in this process. */
export class LocalRateSource implements RateSource {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly #maxKeys: number;
  readonly #buckets = new Map<string, TokenBucket>();

  /** @throws {@link InvalidInputError} for a rate, burst or maxKeys out of range. */
  constructor(ratePerSecond: number, burst: number, options: LocalRateOptions = {}) {
    this.ratePerSecond = checkRate('ratePerSecond', ratePerSecond);
    this.burst = checkBurst('burst', burst);
    this.#maxKeys = checkCount('options.maxKeys', options.maxKeys ?? 100_000, 2 ** 24);
  }

  /** Decides at once; the promise is only there to match {@link RateSource}. */
  take(key: string, n: number, nowMs: number): Promise<RateDecision> {
    return Promise.resolve(this.takeNow(key, n, nowMs));
  }

  /** {@link take} without the promise. */
  takeNow(key: string, n: number, nowMs: number): RateDecision {
    checkLimitKey('key', key);
    checkCount('n', n, this.burst);
    let bucket = this.#buckets.get(key);
    if (bucket === undefined) {
      if (this.#buckets.size >= this.#maxKeys) this.#buckets.delete(this.#buckets.keys().next().value!);
      bucket = new TokenBucket(this.ratePerSecond, this.burst, nowMs);
      this.#buckets.set(key, bucket);
    }
    const retryAfterMs = bucket.tryTake(nowMs, n);
    return { backend: 'local', allowed: retryAfterMs === 0, retryAfterMs, remaining: Math.floor(bucket.available(nowMs) + 1e-6) };
  }

  get size(): number {
    return this.#buckets.size;
  }
}

/** Options of {@link LocalPeriodSource}. */
export interface LocalPeriodOptions {
  /**
   * Windows kept at once; past it, windows that have ended are dropped, then the oldest.
   * @default 100_000
   */
  maxKeys?: number;
}

/** The outcome of the `count`-th request of a window whose quota is `quota`. */
export function periodOutcome(count: number, quota: number): PeriodOutcome {
  return count < quota ? 'allowed' : count === quota ? 'hitQuota' : 'overQuota';
}

/**
 * A fixed window per key, in this process: `quota` requests per `periodMs`. A key's window opens on
 * its first request and starts again once the period has passed. N replicas each running one admit
 * N quotas: this is the single-process limiter, and the shape of the shared one.
 */
export class LocalPeriodSource implements PeriodSource {
  readonly periodMs: number;
  readonly quota: number;
  readonly #maxKeys: number;
  readonly #windows = new Map<string, { startMs: number; count: number }>();

  /** @throws {@link InvalidInputError} for a period, quota or maxKeys that is not a positive whole number. */
  constructor(periodMs: number, quota: number, options: LocalPeriodOptions = {}) {
    this.periodMs = checkCount('periodMs', periodMs, 2 ** 31 - 1);
    this.quota = checkCount('quota', quota, 2 ** 31 - 1);
    this.#maxKeys = checkCount('options.maxKeys', options.maxKeys ?? 100_000, 2 ** 24);
  }

  take(key: string, n: number, nowMs: number): Promise<PeriodDecision> {
    return Promise.resolve(this.takeNow(key, n, nowMs));
  }

  /** {@link take} without the promise. */
  takeNow(key: string, n: number, nowMs: number): PeriodDecision {
    checkLimitKey('key', key);
    checkCount('n', n, 2 ** 31 - 1);
    let window = this.#windows.get(key);
    if (window === undefined || nowMs - window.startMs >= this.periodMs) {
      if (window === undefined && this.#windows.size >= this.#maxKeys) this.#evict(nowMs);
      window = { startMs: nowMs, count: 0 };
      this.#windows.set(key, window);
    }
    window.count += n;
    return { backend: 'local', outcome: periodOutcome(window.count, this.quota) };
  }

  #evict(nowMs: number): void {
    for (const [key, w] of this.#windows) if (nowMs - w.startMs >= this.periodMs) this.#windows.delete(key);
    if (this.#windows.size >= this.#maxKeys) this.#windows.delete(this.#windows.keys().next().value!);
  }
}

/** Options of {@link LocalSlotSource}. */
export interface LocalSlotOptions {
  /** The clock deadlines are read on. @default Date.now */
  now?: () => number;
}

interface SlotWaiter {
  wake(): void;
}

/**
 * Concurrency slots in this process: what a deployment without a database gets, the limit holding
 * in this process alone. Waiters are served in arrival order, each woken by a release (no polling).
 */
export class LocalSlotSource implements SlotSource {
  readonly #now: () => number;
  readonly #held = new Map<string, Set<number>>();
  readonly #waiters = new Map<string, SlotWaiter[]>();

  constructor(options: LocalSlotOptions = {}) {
    this.#now = options.now ?? Date.now;
  }

  /** Slots of `resource` held now by this process. */
  held(resource: string): number {
    return this.#held.get(resource)?.size ?? 0;
  }

  /** Takes a free slot of `resource` without waiting, or returns `null`. */
  tryAcquire(resource: string, limit: number): SlotLease | null {
    checkLimitKey('resource', resource);
    checkSlotLimit('limit', limit);
    // A waiter queued before this call has the first claim on a freed slot.
    if ((this.#waiters.get(resource)?.length ?? 0) > 0) return null;
    return this.#take(resource, limit);
  }

  #take(resource: string, limit: number): SlotLease | null {
    let held = this.#held.get(resource);
    if (held === undefined) {
      held = new Set();
      this.#held.set(resource, held);
    }
    if (held.size >= limit) return null;
    let slot = 0;
    while (held.has(slot)) slot++;
    held.add(slot);
    let released = false;
    return {
      backend: 'local',
      resource,
      slot,
      release: () => {
        if (released) return;
        released = true;
        held.delete(slot);
        this.#waiters.get(resource)?.shift()?.wake();
      },
    };
  }

  async acquire(resource: string, limit: number, options: AcquireOptions): Promise<SlotLease> {
    checkLimitKey('resource', resource);
    checkSlotLimit('limit', limit);
    const deadlineMs = options.deadlineMs;
    if (typeof deadlineMs !== 'number' || Number.isNaN(deadlineMs))
      throw new InvalidInputError('options.deadlineMs', 'a number (milliseconds on the source clock)', deadlineMs);
    const signal = options.signal;
    if (signal?.aborted) throw new AbortedError('acquire', signal.reason);
    const immediate = this.tryAcquire(resource, limit);
    if (immediate !== null) return immediate;
    const startMs = this.#now();
    let queue = this.#waiters.get(resource);
    if (queue === undefined) {
      queue = [];
      this.#waiters.set(resource, queue);
    }
    const waiters = queue;
    return new Promise<SlotLease>((resolve, reject) => {
      const waiter: SlotWaiter = {
        wake: () => {
          const lease = this.#take(resource, limit);
          if (lease === null) {
            // The limit was lowered under us: wait for the next release.
            waiters.unshift(waiter);
            return;
          }
          cleanup();
          resolve(lease);
        },
      };
      const leave = (err: Error): void => {
        const i = waiters.indexOf(waiter);
        if (i >= 0) waiters.splice(i, 1);
        cleanup();
        reject(err);
      };
      const onAbort = (): void => leave(new AbortedError('acquire', signal?.reason));
      const timer = setTimeout(
        () => leave(new SlotTimeoutError(resource, limit, Math.max(0, Math.round(this.#now() - startMs)))),
        Math.max(0, deadlineMs - startMs),
      );
      function cleanup(): void {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      waiters.push(waiter);
    });
  }
}
