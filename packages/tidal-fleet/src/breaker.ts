/** Options of {@link Breaker}. */
export interface BreakerOptions {
  /**
   * Consecutive failures that open the breaker.
   * @default 3
   */
  failureThreshold?: number;
  /**
   * How long an open breaker refuses to try, in milliseconds; then one call probes.
   * @default 2_000
   */
  openMs?: number;
}

export const BREAKER_DEFAULTS = Object.freeze({ failureThreshold: 3, openMs: 2_000 });

export type BreakerState = 'closed' | 'open' | 'halfOpen';

/**
 * A circuit breaker on the caller's clock (Redis's connection and the embedder each hold one): closed until `failureThreshold` failures in a row, then
 * open for `openMs` (nothing is tried: a dead server is not waited on once per request), then one
 * probe at a time until a success closes it or a failure opens it again.
 */
export class Breaker {
  readonly failureThreshold: number;
  readonly openMs: number;
  #failures = 0;
  #openUntilMs = 0;
  #state: BreakerState = 'closed';
  #probing = false;
  #opened = 0;

  constructor(options: BreakerOptions = {}) {
    this.failureThreshold = options.failureThreshold ?? BREAKER_DEFAULTS.failureThreshold;
    this.openMs = options.openMs ?? BREAKER_DEFAULTS.openMs;
  }

  get state(): BreakerState {
    return this.#state;
  }

  /** Times the breaker opened since it was made. */
  get opened(): number {
    return this.#opened;
  }

  /** Whether a call may try the server now. A true answer in half-open state is the one probe. */
  allow(nowMs: number): boolean {
    if (this.#state === 'closed') return true;
    if (this.#state === 'open') {
      if (nowMs < this.#openUntilMs) return false;
      this.#state = 'halfOpen';
    }
    if (this.#probing) return false;
    this.#probing = true;
    return true;
  }

  /**
   * The call `allow` let through ended with neither a success nor a failure of the server (its
   * caller left, or it was refused before it was sent): a half-open breaker lets the next call probe.
   */
  cancel(): void {
    this.#probing = false;
  }

  success(): void {
    this.#failures = 0;
    this.#probing = false;
    this.#state = 'closed';
  }

  failure(nowMs: number): void {
    this.#probing = false;
    this.#failures++;
    if (this.#state === 'halfOpen' || this.#failures >= this.failureThreshold) {
      if (this.#state !== 'open') this.#opened++;
      this.#state = 'open';
      this.#openUntilMs = nowMs + this.openMs;
    }
  }
}
