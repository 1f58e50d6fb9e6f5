import { createHash, randomUUID } from 'node:crypto';
import { ErrorReply, createClient } from 'redis';
import { InvalidInputError } from 'tidal-load';
import { Breaker, type BreakerOptions } from './breaker.js';

/** Options of {@link FleetRedis.connect}. */
export interface FleetRedisOptions {
  /**
   * How long one command may take before it counts as a failure, in milliseconds. A decision never
   * waits on Redis longer than this: it is answered locally instead.
   * @default 50 (a script round trip on a LAN is ≈ 0.2–1 ms; 50 ms is far past any healthy one)
   */
  commandTimeoutMs?: number;
  /** The breaker that stops trying a Redis that keeps failing. */
  breaker?: BreakerOptions;
  /**
   * Prefix of every key this connection writes.
   * @default 'tidal:'
   */
  prefix?: string;
  /**
   * This replica's name in the heartbeat set. Unique per process.
   * @default a random UUID
   */
  replicaId?: string;
  /**
   * How often this replica announces itself, in milliseconds. `0` turns the heartbeat off (the
   * replica count then stays at what it last was, 1 at first).
   * @default 1_000
   */
  heartbeatIntervalMs?: number;
  /**
   * How long a replica counts as alive after its last heartbeat, in milliseconds.
   * @default 3 × heartbeatIntervalMs (3 s when the heartbeat is off)
   */
  replicaTtlMs?: number;
  /** The clock the breaker runs on. @default Date.now */
  now?: () => number;
}

type Client = ReturnType<typeof createClient>;

/**
 * The outcome of one call through {@link FleetRedis.eval}. A failure is `skipped` (Redis was not
 * tried: not connected, breaker open), `unreachable` (tried: refused, reset, timed out) or `reply`
 * (Redis answered with an error: it is up, the call is wrong).
 */
export type RedisOutcome<T> = { ok: true; value: T } | { ok: false; error: unknown; failure: 'skipped' | 'unreachable' | 'reply' };

/** Thrown into a call that took longer than `commandTimeoutMs`. */
export class RedisCommandTimeout extends Error {
  constructor(readonly timeoutMs: number) {
    super(`redis did not answer within ${timeoutMs} ms`);
  }
}

/** A Redis script: its text and SHA1, run by EVALSHA with a fallback to EVAL when Redis lacks it. */
export interface RedisScript {
  readonly text: string;
  readonly sha: string;
}

export function redisScript(text: string): RedisScript {
  return Object.freeze({ text, sha: createHash('sha1').update(text).digest('hex') });
}

/**
 * Counts the replicas alive: each announces itself with its id scored by the server's clock, entries
 * older than the TTL are dropped, and the set itself expires when every replica is gone.
 */
export const HEARTBEAT_SCRIPT = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])`;

const HEARTBEAT = redisScript(HEARTBEAT_SCRIPT);

/**
 * One Redis connection shared by the fleet's limiters, built never to make a caller wait on a dead
 * server: no offline queue (a command while disconnected fails at once), a short command timeout,
 * and a breaker that stops trying for a while after failures. It also announces this replica in a
 * heartbeat set, so a limiter cut off from Redis knows how many replicas it shares the quota with.
 */
export class FleetRedis {
  readonly prefix: string;
  readonly replicaId: string;
  readonly commandTimeoutMs: number;
  readonly breaker: Breaker;
  readonly #client: Client;
  readonly #now: () => number;
  readonly #replicaTtlMs: number;
  #heartbeat: NodeJS.Timeout | null = null;
  #replicas = 1;
  #closed: Promise<void> | null = null;

  private constructor(client: Client, options: FleetRedisOptions) {
    this.#client = client;
    this.prefix = options.prefix ?? 'tidal:';
    this.replicaId = options.replicaId ?? randomUUID();
    this.commandTimeoutMs = options.commandTimeoutMs ?? 50;
    this.breaker = new Breaker(options.breaker);
    this.#now = options.now ?? Date.now;
    const interval = options.heartbeatIntervalMs ?? 1_000;
    this.#replicaTtlMs = options.replicaTtlMs ?? 3 * (interval > 0 ? interval : 1_000);
    if (interval > 0) {
      this.#heartbeat = setInterval(() => void this.beat(), interval);
      this.#heartbeat.unref();
    }
  }

  /**
   * Connects to `url` (`redis://host:port`). Resolves at once: while the server cannot be reached
   * the limiters decide locally, and the client keeps reconnecting in the background.
   * @throws {@link InvalidInputError} for a bad option.
   */
  static connect(url: string, options: FleetRedisOptions = {}): FleetRedis {
    if (typeof url !== 'string' || !/^rediss?:\/\//.test(url)) throw new InvalidInputError('url', 'a redis:// or rediss:// URL', url);
    for (const field of ['commandTimeoutMs', 'heartbeatIntervalMs', 'replicaTtlMs'] as const) {
      const v = options[field];
      if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 3_600_000)) {
        throw new InvalidInputError(`options.${field}`, 'a whole number of milliseconds from 0 to 3600000', v);
      }
    }
    const timeout = options.commandTimeoutMs ?? 50;
    const client = createClient({
      url,
      disableOfflineQueue: true,
      socket: {
        connectTimeout: Math.max(timeout * 4, 200),
        // Reconnect quickly at first, then every second: a returning Redis is picked up within ≈ 1 s.
        reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 5), 1_000),
      },
    });
    // Errors surface on the calls that meet them; the event must be listened to or it would throw.
    client.on('error', () => {});
    const fleet = new FleetRedis(client, options);
    client.on('ready', () => void fleet.beat());
    client.connect().catch(() => {});
    return fleet;
  }

  /** Whether the client holds a ready connection now. */
  get ready(): boolean {
    return this.#client.isReady;
  }

  /** Replicas seen alive in the heartbeat set at the last heartbeat that reached Redis (this one included). */
  get replicasLastSeen(): number {
    return this.#replicas;
  }

  /** The full key for `name` under this connection's prefix. */
  key(name: string): string {
    return this.prefix + name;
  }

  /**
   * Runs `script` through the readiness check, the breaker and the timeout. Never rejects: an
   * outcome with `ok: false` says what failed. A reply error (the server answered, with an error)
   * counts as a success for the breaker: Redis is up.
   */
  async eval(script: RedisScript, keys: string[], args: string[], nowMs = this.#now()): Promise<RedisOutcome<unknown>> {
    if (this.#closed !== null || !this.#client.isReady)
      return { ok: false, error: new Error('redis is not connected'), failure: 'skipped' };
    if (!this.breaker.allow(nowMs)) return { ok: false, error: new Error('redis breaker is open'), failure: 'skipped' };
    try {
      const value = await this.#withTimeout(this.#evalsha(script, keys, args));
      this.breaker.success();
      return { ok: true, value };
    } catch (error) {
      if (isReplyError(error)) {
        this.breaker.success();
        return { ok: false, error, failure: 'reply' };
      }
      this.breaker.failure(nowMs);
      return { ok: false, error, failure: 'unreachable' };
    }
  }

  async #evalsha(script: RedisScript, keys: string[], args: string[]): Promise<unknown> {
    try {
      return await this.#client.evalSha(script.sha, { keys, arguments: args });
    } catch (error) {
      // A restarted (or flushed) Redis has lost its script cache: send the text once, which caches it.
      if (isReplyError(error) && error.message.startsWith('NOSCRIPT'))
        return await this.#client.eval(script.text, { keys, arguments: args });
      throw error;
    }
  }

  #withTimeout<T>(work: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      // The timer fires in the event loop's timers phase, before the I/O of the same turn is read: a
      // replica whose loop was busy past the timeout would count a reply that had already arrived as
      // a timeout. setImmediate runs after that I/O, so only a reply that really is late loses.
      timer = setTimeout(() => setImmediate(() => reject(new RedisCommandTimeout(this.commandTimeoutMs))), this.commandTimeoutMs);
    });
    work.catch(() => {});
    return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
  }

  /** Announces this replica and reads how many are alive. Called by the heartbeat timer; exposed for tests. */
  async beat(): Promise<number> {
    const out = await this.eval(HEARTBEAT, [this.key('replicas')], [this.replicaId, String(this.#replicaTtlMs)]);
    if (out.ok && typeof out.value === 'number' && Number.isInteger(out.value) && out.value >= 1) this.#replicas = out.value;
    return this.#replicas;
  }

  /** The raw client, for tests and tools; limiters go through {@link eval}. */
  get client(): Client {
    return this.#client;
  }

  /** Stops the heartbeat, leaves the heartbeat set (best effort) and closes the connection. Idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#heartbeat) clearInterval(this.#heartbeat);
      this.#heartbeat = null;
      if (this.#client.isReady) {
        await this.#withTimeout(this.#client.zRem(this.key('replicas'), this.replicaId)).catch(() => {});
        await this.#withTimeout(this.#client.close()).catch(() => {});
      }
      try {
        this.#client.destroy();
      } catch {
        // Already closed.
      }
    })();
    return this.#closed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

function isReplyError(error: unknown): error is ErrorReply {
  return error instanceof ErrorReply;
}
