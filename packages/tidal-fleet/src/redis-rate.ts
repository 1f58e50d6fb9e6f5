import {
  LocalRateSource,
  UnexpectedReplyError,
  checkBurst,
  checkLimitKey,
  checkRate,
  emitProcessWarning,
  InvalidInputError,
  type RateDecision,
  type RateSource,
  type WarningSink,
} from 'tidal-load';
import { redisScript, type FleetRedis } from './redis.js';

/**
 * The shared token bucket, one atomic script per decision. Credit is kept in millitokens like
 * tidal-load's TokenBucket; the time is the server's (`TIME`), so replicas whose clocks disagree
 * still refill one bucket at one rate. Every key gets a TTL: the time a drained bucket takes to fill
 * again, after which a missing key and a full bucket are the same thing.
 *
 * KEYS[1] the bucket; ARGV rate (tokens/s), burst, n. Returns {allowed 0|1, retryAfterMs, remaining}.
 */
export const TOKEN_BUCKET_SCRIPT = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local full = burst * 1000
local s = redis.call('HMGET', KEYS[1], 'mt', 'ts')
local mt = tonumber(s[1])
local ts = tonumber(s[2])
if mt == nil or ts == nil then mt = full; ts = now end
if now > ts then
  mt = math.min(full, mt + (now - ts) * rate)
  ts = now
end
local need = n * 1000
local allowed = 0
local retry = 0
if mt >= need - 1e-6 then
  mt = mt - need
  allowed = 1
else
  retry = math.max(1, math.ceil((need - mt) / rate - 1e-6))
end
redis.call('HSET', KEYS[1], 'mt', tostring(mt), 'ts', tostring(ts))
redis.call('PEXPIRE', KEYS[1], math.ceil(full / rate) + 1000)
return {allowed, retry, math.floor(mt / 1000 + 1e-6)}`;

const SCRIPT = redisScript(TOKEN_BUCKET_SCRIPT);

/** Options of {@link RedisRateSource}. */
export interface RedisRateOptions {
  /** The fleet's sustained rate, tokens per second per key, shared by every replica. */
  ratePerSecond: number;
  /** The fleet's bucket capacity, in tokens. */
  burst: number;
  /**
   * Key prefix under the connection's, so two limits on one Redis do not share buckets.
   * @default 'rate:'
   */
  name?: string;
  /** Receives `TIDAL_SHARED_LIMIT_LOCAL` and `TIDAL_SHARED_LIMIT_RESTORED`. @default emitProcessWarning */
  onWarning?: WarningSink;
}

export interface RedisRateStats {
  redisDecisions: number;
  localDecisions: number;
  /** Outages: times the source went from Redis to its local bucket. */
  fallbacks: number;
  /** The local bucket's rate now: the fleet rate ÷ the replicas last seen alive. */
  localRatePerSecond: number;
  replicasLastSeen: number;
}

/**
 * A token bucket per key shared by every replica through Redis. When Redis cannot be reached (not
 * connected, a timeout, the breaker open) the decision is made at once on a local bucket running at
 * the fleet rate ÷ the replicas last seen alive, so N cut-off replicas together still admit about
 * the fleet's quota rather than N times it; the next decision that reaches Redis is shared again.
 * Every decision says which bucket made it.
 */
export class RedisRateSource implements RateSource {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly #redis: FleetRedis;
  readonly #prefix: string;
  readonly #warn: WarningSink;
  readonly #rateArgs: [string, string];
  #local: LocalRateSource | null = null;
  #localReplicas = 0;
  #outageSinceMs: number | null = null;
  readonly #stats = { redisDecisions: 0, localDecisions: 0, fallbacks: 0 };

  /** @throws {@link InvalidInputError} for a rate or burst out of range. */
  constructor(redis: FleetRedis, options: RedisRateOptions) {
    this.ratePerSecond = checkRate('options.ratePerSecond', options.ratePerSecond);
    this.burst = checkBurst('options.burst', options.burst);
    this.#redis = redis;
    this.#prefix = redis.key(options.name ?? 'rate:');
    this.#warn = options.onWarning ?? emitProcessWarning;
    this.#rateArgs = [String(this.ratePerSecond), String(this.burst)];
  }

  /**
   * Takes `n` tokens from `key`'s shared bucket, or from the local one when Redis cannot answer
   * within the command timeout. Never waits longer than that timeout.
   * @throws {@link InvalidInputError} for a bad key or n; {@link UnexpectedReplyError} when Redis answers what the script cannot.
   */
  async take(key: string, n: number, nowMs: number): Promise<RateDecision> {
    checkLimitKey('key', key);
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > this.burst)
      throw new InvalidInputError('n', `a whole number from 1 to ${this.burst}`, n);
    const out = await this.#redis.eval(SCRIPT, [this.#prefix + key], [...this.#rateArgs, String(n)], nowMs);
    if (out.ok) {
      const decision = decodeTokenReply(out.value);
      if (this.#outageSinceMs !== null) {
        this.#warn({
          code: 'TIDAL_SHARED_LIMIT_RESTORED',
          message: `redis answers again: the shared rate limit decides on the shared bucket again, after ${Math.max(0, nowMs - this.#outageSinceMs)} ms on the local one`,
        });
        this.#outageSinceMs = null;
      }
      this.#stats.redisDecisions++;
      return decision;
    }
    if (out.failure === 'reply')
      throw new UnexpectedReplyError('redis token bucket', 'an array of allowed, retryAfterMs and remaining', String(out.error));
    return this.#takeLocal(key, n, nowMs, out.error);
  }

  #takeLocal(key: string, n: number, nowMs: number, error: unknown): RateDecision {
    const replicas = Math.max(1, this.#redis.replicasLastSeen);
    if (this.#local === null || this.#localReplicas !== replicas) {
      // The local share: the fleet rate and burst divided among the replicas last seen alive.
      this.#local = new LocalRateSource(this.ratePerSecond / replicas, Math.max(1, Math.floor(this.burst / replicas)));
      this.#localReplicas = replicas;
    }
    if (this.#outageSinceMs === null) {
      this.#outageSinceMs = nowMs;
      this.#stats.fallbacks++;
      this.#warn({
        code: 'TIDAL_SHARED_LIMIT_LOCAL',
        message:
          `redis cannot be reached (${error instanceof Error ? error.message : String(error)}): this replica limits on a local bucket at ` +
          `${this.ratePerSecond / replicas} tokens/s, the fleet's ${this.ratePerSecond} ÷ ${replicas} replicas last seen alive`,
      });
    }
    this.#stats.localDecisions++;
    // A share of the burst can be smaller than n: cap the ask so a large n is refused by rate, not thrown.
    return this.#local.takeNow(key, Math.min(n, this.#local.burst), nowMs);
  }

  stats(): RedisRateStats {
    const replicas = Math.max(1, this.#redis.replicasLastSeen);
    return { ...this.#stats, localRatePerSecond: this.ratePerSecond / replicas, replicasLastSeen: replicas };
  }
}

/**
 * Reads the token-bucket script's reply.
 * @throws {@link UnexpectedReplyError} for anything the script cannot return.
 */
export function decodeTokenReply(reply: unknown): RateDecision {
  if (
    Array.isArray(reply) &&
    reply.length === 3 &&
    reply.every((v) => typeof v === 'number' && Number.isInteger(v) && v >= 0) &&
    (reply[0] === 0 || reply[0] === 1)
  ) {
    const [allowed, retryAfterMs, remaining] = reply as [number, number, number];
    if ((allowed === 1) === (retryAfterMs === 0)) return { backend: 'redis', allowed: allowed === 1, retryAfterMs, remaining };
  }
  throw new UnexpectedReplyError('redis token bucket', 'an array of allowed (0 or 1), retryAfterMs and remaining', reply);
}
