import {
  InvalidInputError,
  UnexpectedReplyError,
  checkLimitKey,
  emitProcessWarning,
  type PeriodDecision,
  type PeriodOutcome,
  type PeriodSource,
  type WarningSink,
} from 'tidal-load';
import { redisScript, type FleetRedis } from './redis.js';

/**
 * The shared fixed window: INCRBY the key by n, hang the period on it as its expiry the first time it
 * appears (or whenever it is found without one, so no key can outlive its window), and answer 1 below
 * the quota, 2 exactly at it, 0 past it. Exported so a test evaluates the very text the limiter ships.
 *
 * KEYS[1] the window; ARGV n, quota, periodMs.
 */
export const PERIOD_SCRIPT = `local count = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
local quota = tonumber(ARGV[2])
if count < quota then
  return 1
elseif count == quota then
  return 2
end
return 0`;

const SCRIPT = redisScript(PERIOD_SCRIPT);

/** Options of {@link RedisPeriodSource}. */
export interface RedisPeriodOptions {
  /** The window's length, in milliseconds. */
  periodMs: number;
  /** Requests per window per key, shared by every replica. */
  quota: number;
  /**
   * Key prefix under the connection's.
   * @default 'period:'
   */
  name?: string;
  /** Receives `TIDAL_SHARED_LIMIT_OPEN`, once per outage. @default emitProcessWarning */
  onWarning?: WarningSink;
}

export interface RedisPeriodStats {
  redisDecisions: number;
  /** Requests admitted unchecked because Redis could not be reached. */
  failedOpen: number;
}

/**
 * A fixed window per key shared by every replica through Redis. When Redis cannot be reached the
 * request is admitted (`backend: 'none'`) with a warning and a count: the limiter guards the
 * service, it must not be able to close it. A reply the script cannot give raises.
 */
export class RedisPeriodSource implements PeriodSource {
  readonly periodMs: number;
  readonly quota: number;
  readonly #redis: FleetRedis;
  readonly #prefix: string;
  readonly #warn: WarningSink;
  readonly #args: [string, string];
  #open = false;
  readonly #stats: RedisPeriodStats = { redisDecisions: 0, failedOpen: 0 };

  /** @throws {@link InvalidInputError} for a period or quota that is not a positive whole number. */
  constructor(redis: FleetRedis, options: RedisPeriodOptions) {
    for (const field of ['periodMs', 'quota'] as const) {
      const v = options[field];
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 2 ** 31 - 1)
        throw new InvalidInputError(`options.${field}`, 'a whole number from 1 to 2147483647', v);
    }
    this.periodMs = options.periodMs;
    this.quota = options.quota;
    this.#redis = redis;
    this.#prefix = redis.key(options.name ?? 'period:');
    this.#warn = options.onWarning ?? emitProcessWarning;
    this.#args = [String(this.quota), String(this.periodMs)];
  }

  /**
   * Counts `n` requests against `key`'s shared window.
   * @throws {@link InvalidInputError} for a bad key or n; {@link UnexpectedReplyError} for a reply the script cannot give.
   */
  async take(key: string, n: number, nowMs: number): Promise<PeriodDecision> {
    checkLimitKey('key', key);
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 2 ** 31 - 1)
      throw new InvalidInputError('n', 'a whole number from 1 to 2147483647', n);
    const out = await this.#redis.eval(SCRIPT, [this.#prefix + key], [String(n), ...this.#args], nowMs);
    if (out.ok) {
      this.#open = false;
      this.#stats.redisDecisions++;
      return { backend: 'redis', outcome: decodePeriodReply(out.value) };
    }
    if (out.failure === 'reply') throw new UnexpectedReplyError('redis fixed window', '1, 2 or 0', String(out.error));
    this.#stats.failedOpen++;
    if (!this.#open) {
      this.#open = true;
      this.#warn({
        code: 'TIDAL_SHARED_LIMIT_OPEN',
        message: `redis cannot be reached (${out.error instanceof Error ? out.error.message : String(out.error)}): the shared fixed window admits requests unchecked until it answers again`,
      });
    }
    return { backend: 'none', outcome: 'allowed' };
  }

  stats(): RedisPeriodStats {
    return { ...this.#stats };
  }
}

/**
 * Reads the fixed-window script's reply: 1 allowed, 2 exactly at the quota, 0 over it.
 * @throws {@link UnexpectedReplyError} for anything else.
 */
export function decodePeriodReply(reply: unknown): PeriodOutcome {
  if (reply === 1) return 'allowed';
  if (reply === 2) return 'hitQuota';
  if (reply === 0) return 'overQuota';
  throw new UnexpectedReplyError('redis fixed window', '1, 2 or 0', reply);
}
