import { InvalidInputError } from './errors.js';
import { TokenBucket, checkBurst, checkRate } from './token-bucket.js';

/**
 * How session signals are rate-limited: {@link RateLimiterConfig.unlimited} (the default) or
 * {@link RateLimiterConfig.limited}. Plain frozen data, so it can be logged, compared and built by
 * a second copy of the package. It is validated when a database opens with it (or a
 * {@link RateLimiter} is built from it), not when it is created.
 */
export type RateLimiterConfig =
  | { readonly kind: 'unlimited' }
  | {
      readonly kind: 'limited';
      /** Sustained signals per second, per (agent, session). */
      readonly ratePerSecond: number;
      /** Signals a session may send at once after being idle (the bucket's capacity). */
      readonly burst: number;
      /** See {@link LimitedOptions.maxBuckets}. */
      readonly maxBuckets?: number;
    };

/** Options of {@link RateLimiterConfig.limited}. */
export interface LimitedOptions {
  /**
   * Token buckets held at once, one per (agent, session) that has signalled. Past it, a key without
   * a bucket of its own shares a single overflow bucket (same rate and burst) with every other such
   * key until a bucket is dropped: memory stays bounded and the limit still applies, more strictly.
   * @default 100_000 (bench/src/ratelimit.ts measures the heap a bucket holds, with several
   * sessions per agent and with one)
   */
  maxBuckets?: number;
}

const UNLIMITED: RateLimiterConfig = Object.freeze({ kind: 'unlimited' });

export const RateLimiterConfig = Object.freeze({
  /** No rate limit (the default): every session signal is admitted. */
  unlimited(): RateLimiterConfig {
    return UNLIMITED;
  },
  /**
   * A token bucket per (agent, session): `ratePerSecond` sustained, `burst` at once.
   *
   * @param ratePerSecond - a positive finite number (fractions allowed: 0.5 is one signal every 2 s).
   * @param burst - a whole number from 1 to 1 000 000 000.
   */
  limited(ratePerSecond: number, burst: number, options: LimitedOptions = {}): RateLimiterConfig {
    const config: { kind: 'limited'; ratePerSecond: number; burst: number; maxBuckets?: number } = {
      kind: 'limited',
      ratePerSecond,
      burst,
    };
    if (options?.maxBuckets !== undefined) config.maxBuckets = options.maxBuckets;
    return Object.freeze(config);
  },
});

/** A validated limited configuration with every field filled in. */
export interface RateLimit {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly maxBuckets: number;
}

export const RATE_LIMITER_DEFAULTS = Object.freeze({
  // A bucket is its state and its map entries; with one session per agent, each agent also has a map
  // of its own (bench/src/ratelimit.ts measures the heap of both cases). It matches sessions.maxOpen,
  // so a database at its default limits never reaches the overflow bucket.
  maxBuckets: 100_000,
  maxBucketsLimit: 2 ** 24,
});

/**
 * Validates a {@link RateLimiterConfig}: `null` for unlimited, the filled-in limit otherwise.
 * @throws {@link InvalidInputError} naming `field.ratePerSecond`, `field.burst` or `field.maxBuckets`.
 */
export function resolveRateLimiterConfig(value: unknown, field = 'rateLimiter'): RateLimit | null {
  if (value === undefined) return null;
  const kind = typeof value === 'object' && value !== null ? (value as { kind?: unknown }).kind : undefined;
  if (kind === 'unlimited') return null;
  if (kind !== 'limited') {
    throw new InvalidInputError(field, 'RateLimiterConfig.unlimited() or RateLimiterConfig.limited(ratePerSecond, burst)', value);
  }
  const v = value as { ratePerSecond?: unknown; burst?: unknown; maxBuckets?: unknown };
  const ratePerSecond = checkRate(`${field}.ratePerSecond`, v.ratePerSecond);
  const burst = checkBurst(`${field}.burst`, v.burst);
  const maxBuckets = v.maxBuckets ?? RATE_LIMITER_DEFAULTS.maxBuckets;
  if (
    typeof maxBuckets !== 'number' ||
    !Number.isInteger(maxBuckets) ||
    maxBuckets < 1 ||
    maxBuckets > RATE_LIMITER_DEFAULTS.maxBucketsLimit
  ) {
    throw new InvalidInputError(`${field}.maxBuckets`, `a whole number from 1 to ${RATE_LIMITER_DEFAULTS.maxBucketsLimit}`, maxBuckets);
  }
  return Object.freeze({ ratePerSecond, burst, maxBuckets });
}

/** What a {@link RateLimiter} holds. */
export interface RateLimiterStats {
  /** Buckets of their own held now, at most `maxBuckets`. */
  buckets: number;
  maxBuckets: number;
  /** Checks answered by the shared overflow bucket since the limiter was created. */
  overflowChecks: number;
}

/**
 * Token-bucket rate limiting keyed by (agent, session): each pair gets its own {@link TokenBucket},
 * created full on its first check and refilled lazily. No timers, no I/O; the caller passes the
 * time.
 *
 * Memory is bounded by `maxBuckets`: past it, a pair without a bucket of its own is checked against
 * one overflow bucket shared by all such pairs, so it is still limited (together they get one
 * pair's rate) and nothing more is allocated. Dropping a pair's bucket ({@link drop}, done when a
 * session closes) frees the room; a pair that was on the overflow bucket gets a full bucket of its
 * own at its next check once there is room.
 */
export class RateLimiter {
  readonly #limit: RateLimit | null;
  // Two levels rather than one map on `${agent}\0${session}`: a check then hashes the caller's own
  // strings (V8 caches a string's hash) instead of building and hashing a new key every time.
  readonly #agents = new Map<string, Map<string, TokenBucket>>();
  #size = 0;
  #overflow: TokenBucket | null = null;
  #overflowChecks = 0;

  /** @throws {@link InvalidInputError} for an invalid configuration. */
  constructor(config: RateLimiterConfig = RateLimiterConfig.unlimited()) {
    this.#limit = resolveRateLimiterConfig(config, 'config');
  }

  /** The rate and burst, or `null` when unlimited. */
  get rateLimit(): RateLimit | null {
    return this.#limit;
  }

  /** Buckets of their own held now (the overflow bucket not counted). */
  get size(): number {
    return this.#size;
  }

  stats(): RateLimiterStats {
    return { buckets: this.#size, maxBuckets: this.#limit?.maxBuckets ?? 0, overflowChecks: this.#overflowChecks };
  }

  /**
   * Takes one token from the pair's bucket.
   *
   * @returns `0` when admitted (always, when unlimited); otherwise the milliseconds until the bucket
   * has a token again, rounded up to a whole millisecond. A refusal takes nothing.
   */
  tryTake(agentId: string, sessionId: string, nowMs: number): number {
    const limit = this.#limit;
    if (limit === null) return 0;
    let sessions = this.#agents.get(agentId);
    let bucket = sessions?.get(sessionId);
    if (bucket === undefined) {
      if (this.#size < limit.maxBuckets) {
        bucket = new TokenBucket(limit.ratePerSecond, limit.burst, nowMs);
        if (sessions === undefined) {
          sessions = new Map();
          this.#agents.set(agentId, sessions);
        }
        sessions.set(sessionId, bucket);
        this.#size++;
      } else {
        bucket = this.#overflow ??= new TokenBucket(limit.ratePerSecond, limit.burst, nowMs);
        this.#overflowChecks++;
      }
    }
    return bucket.tryTake(nowMs);
  }

  /** Forgets the pair's bucket, freeing its room. Returns whether it had one. */
  drop(agentId: string, sessionId: string): boolean {
    const sessions = this.#agents.get(agentId);
    if (sessions === undefined || !sessions.delete(sessionId)) return false;
    if (sessions.size === 0) this.#agents.delete(agentId);
    this.#size--;
    return true;
  }

  /** Forgets every bucket, the overflow one included. */
  clear(): void {
    this.#agents.clear();
    this.#size = 0;
    this.#overflow = null;
  }
}
