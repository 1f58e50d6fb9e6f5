import {
  LocalRateSource,
  UnexpectedReplyError,
  checkBurst,
  checkLimitKey,
  checkRate,
  emitProcessWarning,
  InvalidInputError,
  type RateBackend,
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
 * A replica that names itself (ARGV[5]) takes its fair share: while the bucket is less than half
 * full (someone is short of tokens), it gets at most what the refill owes it since its last ask, at
 * the rate ÷ the replicas that asked in the last window (`a:<id>` the time of its last ask, `v:<id>`
 * what it is owed, at most its share of the burst). Without the share, the replica whose asks
 * happen to reach the server first after each refill takes the whole quota and the others none.
 * Tokens a replica leaves stay in the bucket; past half full anyone takes them.
 *
 * KEYS[1] the bucket; ARGV rate (tokens/s), burst, n (the most wanted), least (the fewest worth
 * taking: n for all or none, 1 for a partial grant), the replica's id or '' (no share). Takes
 * min(n, the whole tokens there, its share) when that is at least `least`. Returns
 * {granted, retryAfterMs, remaining}: granted 0 with the milliseconds until all n would be there,
 * or the tokens taken with 0.
 */
export const TOKEN_BUCKET_SCRIPT = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local least = tonumber(ARGV[4])
local me = ARGV[5]
local full = burst * 1000
local s = redis.call('HMGET', KEYS[1], 'mt', 'ts')
local mt = tonumber(s[1])
local ts = tonumber(s[2])
if mt == nil or ts == nil then mt = full; ts = now end
if now > ts then
  mt = math.min(full, mt + (now - ts) * rate)
  ts = now
end
local granted = math.min(n, math.floor(mt / 1000 + 1e-6))
local retry = 0
local v = nil
local askers = 1
local short = mt < full / 2
if me ~= '' then
  local window = math.max(1000, math.ceil(4 * full / rate))
  local fields = redis.call('HGETALL', KEYS[1])
  local last = nil
  for i = 1, #fields, 2 do
    local f = fields[i]
    if string.sub(f, 1, 2) == 'a:' then
      local id = string.sub(f, 3)
      local at = tonumber(fields[i + 1])
      if id == me then last = at
      elseif at >= now - window then askers = askers + 1
      else redis.call('HDEL', KEYS[1], f, 'v:' .. id) end
    end
  end
  local cap = full / askers
  v = tonumber(redis.call('HGET', KEYS[1], 'v:' .. me))
  if v == nil or last == nil or last < now - window then v = cap
  elseif now > last then v = math.min(cap, v + (now - last) * rate / askers) end
  if short then granted = math.min(granted, math.floor(v / 1000 + 1e-6)) end
end
if granted >= least then
  mt = math.max(0, mt - granted * 1000)
  if v ~= nil then v = math.max(0, v - granted * 1000) end
else
  granted = 0
  retry = math.max(1, math.ceil((n * 1000 - mt) / rate - 1e-6))
  if v ~= nil and short then retry = math.max(retry, math.ceil((n * 1000 - v) * askers / rate - 1e-6)) end
end
redis.call('HSET', KEYS[1], 'mt', tostring(mt), 'ts', tostring(ts))
if v ~= nil then redis.call('HSET', KEYS[1], 'a:' .. me, tostring(now), 'v:' .. me, tostring(v)) end
redis.call('PEXPIRE', KEYS[1], math.ceil(full / rate) + 1000)
return {granted, retry, math.floor(mt / 1000 + 1e-6)}`;

const SCRIPT = redisScript(TOKEN_BUCKET_SCRIPT);

/** Keys remembered as decided on Redis, at most (as many as a local bucket keeps by default). */
const MAX_SHARED_KEYS = 100_000;

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

/** What {@link RedisRateSource.takeUpTo} answers: the tokens taken, none when refused. */
export interface RateGrant {
  readonly backend: RateBackend;
  /** Tokens taken: from 1 to the n asked when granted, 0 when refused. */
  readonly granted: number;
  /** `0` when granted; otherwise the milliseconds until all n asked would be there. */
  readonly retryAfterMs: number;
  /** Whole tokens left in the bucket after this decision. */
  readonly remaining: number;
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
  /** Keys the shared bucket decided since their last local decision: their local bucket starts empty. */
  readonly #sharedKeys = new Set<string>();
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
   * Takes `n` tokens from `key`'s shared bucket, all or none, or from the local one when Redis
   * cannot answer within the command timeout. Never waits longer than that timeout.
   * @throws {@link InvalidInputError} for a bad key or n; {@link UnexpectedReplyError} when Redis answers what the script cannot.
   */
  async take(key: string, n: number, nowMs: number): Promise<RateDecision> {
    const g = await this.#take(key, n, n, false, nowMs);
    return { backend: g.backend, allowed: g.granted > 0, retryAfterMs: g.retryAfterMs, remaining: g.remaining };
  }

  /**
   * Takes as many of `n` tokens as `key`'s bucket holds, at least one: a partial grant. Refused only
   * when not one whole token is there, with the wait until all `n` would be. Replicas that take
   * batches from one saturated bucket share it by how often they ask, not by who asks for less: an
   * all-or-none ask larger than what the bucket gathers between the others' asks would never fit.
   * @throws {@link InvalidInputError} for a bad key or n; {@link UnexpectedReplyError} when Redis answers what the script cannot.
   */
  takeUpTo(key: string, n: number, nowMs: number): Promise<RateGrant> {
    return this.#take(key, n, 1, true, nowMs);
  }

  async #take(key: string, n: number, least: number, share: boolean, nowMs: number): Promise<RateGrant> {
    checkLimitKey('key', key);
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > this.burst)
      throw new InvalidInputError('n', `a whole number from 1 to ${this.burst}`, n);
    const out = await this.#redis.eval(
      SCRIPT,
      [this.#prefix + key],
      [...this.#rateArgs, String(n), String(least), share ? this.#redis.replicaId : ''],
      nowMs,
    );
    if (out.ok) {
      const grant = decodeTokenReply(out.value, n, least);
      if (this.#outageSinceMs !== null) {
        this.#warn({
          code: 'TIDAL_SHARED_LIMIT_RESTORED',
          message: `redis answers again: the shared rate limit decides on the shared bucket again, after ${Math.max(0, nowMs - this.#outageSinceMs)} ms on the local one`,
        });
        this.#outageSinceMs = null;
      }
      this.#stats.redisDecisions++;
      if (this.#sharedKeys.size >= MAX_SHARED_KEYS) this.#sharedKeys.clear();
      this.#sharedKeys.add(key);
      return grant;
    }
    if (out.failure === 'reply')
      throw new UnexpectedReplyError('redis token bucket', 'an array of granted, retryAfterMs and remaining', String(out.error));
    return this.#takeLocal(key, n, least, nowMs, out.error);
  }

  #takeLocal(key: string, n: number, least: number, nowMs: number, error: unknown): RateGrant {
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
    if (this.#sharedKeys.delete(key)) {
      // What the local bucket gathered while the shared one decided was the shared bucket's to give:
      // a Redis that misses one command in a few (a loaded machine, a 50 ms timeout) would
      // otherwise add a local share of the burst to the fleet's quota at every miss.
      const full = this.#local.takeNow(key, this.#local.burst, nowMs);
      if (!full.allowed && full.remaining >= 1) this.#local.takeNow(key, full.remaining, nowMs);
    }
    // A share of the burst can be smaller than n: cap the ask so a large n is refused by rate, not thrown.
    const want = Math.min(n, this.#local.burst);
    const d = this.#local.takeNow(key, want, nowMs);
    if (d.allowed) return { backend: 'local', granted: want, retryAfterMs: 0, remaining: d.remaining };
    // A partial grant takes the whole tokens the local bucket holds.
    if (least < want && d.remaining >= least) {
      const part = this.#local.takeNow(key, d.remaining, nowMs);
      if (part.allowed) return { backend: 'local', granted: d.remaining, retryAfterMs: 0, remaining: part.remaining };
    }
    return { backend: 'local', granted: 0, retryAfterMs: d.retryAfterMs, remaining: d.remaining };
  }

  stats(): RedisRateStats {
    const replicas = Math.max(1, this.#redis.replicasLastSeen);
    return { ...this.#stats, localRatePerSecond: this.ratePerSecond / replicas, replicasLastSeen: replicas };
  }
}

/**
 * Reads the token-bucket script's reply to an ask of `n` tokens, at least `least` of them.
 * @throws {@link UnexpectedReplyError} for anything the script cannot return.
 */
export function decodeTokenReply(reply: unknown, n: number, least: number): RateGrant {
  if (Array.isArray(reply) && reply.length === 3 && reply.every((v) => typeof v === 'number' && Number.isInteger(v) && v >= 0)) {
    const [granted, retryAfterMs, remaining] = reply as [number, number, number];
    const grantable = granted === 0 || (granted >= least && granted <= n);
    if (grantable && granted > 0 === (retryAfterMs === 0)) return { backend: 'redis', granted, retryAfterMs, remaining };
  }
  throw new UnexpectedReplyError('redis token bucket', `an array of granted (0, or ${least} to ${n}), retryAfterMs and remaining`, reply);
}
