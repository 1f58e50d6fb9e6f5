import { InvalidInputError } from './errors.js';

/** The largest burst a bucket accepts: keeps `burst × 1000` millitokens an exact integer. */
export const MAX_BURST = 1_000_000_000;

/**
 * Credit is kept in millitokens (1 token = 1000). A refill over `dt` ms then adds
 * `dt × ratePerSecond` millitokens, which is an exact integer for whole rates and a whole-millisecond
 * clock, so `retryAfterMs` comes out exact instead of drifting by float rounding (with plain
 * tokens, 18 ms at 10/s leaves a wait of 82.00000000000001 ms, rounded up to 83 instead of 82).
 */
export const MILLITOKENS_PER_TOKEN = 1000;
const PER_TOKEN = MILLITOKENS_PER_TOKEN;
/** Tolerance for fractional rates, whose refills are not exact binary fractions. */
const EPSILON = 1e-6;

// The bucket's arithmetic on its two numbers, for a bucket whose state lives elsewhere (a table
// in shared memory, read and written under a lock): the same steps, to the same results, as
// TokenBucket's own.

/** A bucket's credit after `added` millitokens (a refill, a refund), never above `burst` tokens. */
export function addMillitokens(millitokens: number, added: number, burst: number): number {
  const full = burst * PER_TOKEN;
  const next = millitokens + added;
  return next > full ? full : next;
}

/**
 * `0` when a bucket holding `millitokens` has `count` tokens to give; otherwise the milliseconds
 * until it will at `ratePerSecond`, rounded up to a whole millisecond (see {@link TokenBucket.tryTake}).
 * Takes nothing: on `0` the caller subtracts `count × MILLITOKENS_PER_TOKEN`.
 */
export function takeWaitMs(millitokens: number, count: number, ratePerSecond: number): number {
  const need = count * PER_TOKEN;
  if (millitokens >= need - EPSILON) return 0;
  const wait = Math.ceil((need - millitokens) / ratePerSecond - EPSILON);
  return wait < 1 ? 1 : wait;
}

/** Throws {@link InvalidInputError} unless `value` is a positive finite number. */
export function checkRate(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidInputError(field, 'a positive finite number', value);
  }
  return value;
}

/** Throws {@link InvalidInputError} unless `value` is a whole number from 1 to {@link MAX_BURST}. */
export function checkBurst(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_BURST) {
    throw new InvalidInputError(field, `a whole number from 1 to ${MAX_BURST}`, value);
  }
  return value;
}

/**
 * A token bucket: holds up to `burst` tokens and refills at `ratePerSecond`. The refill is computed
 * lazily when the bucket is checked, from the time passed since the last check: there is no timer,
 * so an idle bucket costs nothing but its memory. The caller passes the time, which keeps the bucket
 * free of I/O and lets tests drive it with a fake clock.
 *
 * @example
 * ```ts
 * const bucket = new TokenBucket(10, 2, Date.now()); // 10 tokens/s, bursts of 2, starts full
 * bucket.tryTake(Date.now()); // 0: taken
 * bucket.tryTake(Date.now()); // 0: taken
 * bucket.tryTake(Date.now()); // 100: empty, one token in 100 ms
 * ```
 */
export class TokenBucket {
  /** Refill rate, tokens per second. */
  readonly ratePerSecond: number;
  /** Capacity, in tokens. */
  readonly burst: number;
  #millitokens: number;
  #lastMs: number;

  /**
   * @param ratePerSecond - positive and finite.
   * @param burst - a whole number from 1 to {@link MAX_BURST}; the bucket starts full.
   * @param nowMs - the current time in milliseconds, on the same clock later checks use.
   * @throws {@link InvalidInputError} for a rate or burst out of range.
   */
  constructor(ratePerSecond: number, burst: number, nowMs: number) {
    this.ratePerSecond = checkRate('ratePerSecond', ratePerSecond);
    this.burst = checkBurst('burst', burst);
    this.#millitokens = burst * PER_TOKEN;
    this.#lastMs = nowMs;
  }

  #refill(nowMs: number): void {
    // A clock that steps backwards (an NTP correction) adds nothing rather than taking credit away.
    if (nowMs > this.#lastMs) {
      this.#millitokens = addMillitokens(this.#millitokens, (nowMs - this.#lastMs) * this.ratePerSecond, this.burst);
      this.#lastMs = nowMs;
    }
  }

  /**
   * Takes `count` tokens (default one) if there are that many; all or none.
   *
   * @param count - tokens to take, a whole number from 1 to `burst` (the caller checks it: a count
   * over the burst could never be taken).
   * @returns `0` when the tokens were taken; otherwise the milliseconds until `count` tokens will be
   * available (nothing is taken), rounded up to a whole millisecond so that a retry exactly that
   * much later always finds them. Exact when the wait is a whole number of milliseconds.
   */
  tryTake(nowMs: number, count = 1): number {
    this.#refill(nowMs);
    const wait = takeWaitMs(this.#millitokens, count, this.ratePerSecond);
    if (wait === 0) this.#millitokens -= count * PER_TOKEN;
    return wait;
  }

  /**
   * Gives back `count` tokens (default one) taken for a request that was then not served; the
   * bucket never holds more than `burst`.
   */
  refund(count = 1): void {
    this.#millitokens = addMillitokens(this.#millitokens, count * PER_TOKEN, this.burst);
  }

  /** Tokens available at `nowMs` (fractional while refilling). Refills, takes nothing. */
  available(nowMs: number): number {
    this.#refill(nowMs);
    return this.#millitokens / PER_TOKEN;
  }
}
