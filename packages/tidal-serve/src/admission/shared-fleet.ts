/**
 * What `tidal serve --redis / --embedder / --pg` connect to: the shared limits' Redis and the
 * embedder, with its concurrency slots on PostgreSQL. Opened before the database, closed after it.
 */
import { EmbedderClient, FleetRedis, RedisPeriodSource, RedisRateSource, openSlotSource } from 'tidal-fleet';
import type { ServeConfig } from '../config.js';
import type { SharedSources } from './shared-limits.js';
import type { RateSpec } from './types.js';

/** How long the server waits for Redis at start before it starts anyway (on the local fallback). */
export const REDIS_START_WAIT_MS = 2_000;

/** The connections `tidal serve` holds for the fleet. */
export interface Fleet {
  /** The sources the shared admission chain decides through; `undefined` without `--redis`. */
  readonly shared: SharedSources | undefined;
  readonly embedder: EmbedderClient | undefined;
  /** For `/stats` (`fleet`). */
  stats(): Record<string, unknown>;
  /** Idempotent. */
  close(): Promise<void>;
}

/**
 * Connects what the flags name. Redis is waited for up to {@link REDIS_START_WAIT_MS}, then left
 * to connect in the background: until it answers, the tenant limit runs on its local fallback
 * (the fleet rate ÷ the replicas last seen) and the period limit admits (fail-open), each with its
 * warning. PostgreSQL is not optional once named: a database that cannot be reached, or a
 * transaction pooler in front of it, refuses to start.
 */
export async function openFleet(config: ServeConfig, log: (line: string) => void): Promise<Fleet> {
  let redis: FleetRedis | undefined;
  let shared: SharedSources | undefined;
  const rates = new Map<string, RedisRateSource>();
  let period: RedisPeriodSource | undefined;
  if (config.redis !== undefined) {
    const r = FleetRedis.connect(config.redis);
    redis = r;
    const started = Date.now();
    while (!r.ready && Date.now() - started < REDIS_START_WAIT_MS) await new Promise((resolve) => setTimeout(resolve, 20));
    if (r.ready) await r.beat();
    else log(`redis at ${config.redis} does not answer yet: the shared limits decide locally until it does`);
    if (config.periodQuota !== undefined)
      period = new RedisPeriodSource(r, { periodMs: config.periodMs, quota: config.periodQuota, name: 'period:' });
    shared = {
      rate: (spec: RateSpec) => {
        const id = `${spec.ratePerSecond}:${spec.burst}`;
        let source = rates.get(id);
        if (source === undefined)
          rates.set(id, (source = new RedisRateSource(r, { ratePerSecond: spec.ratePerSecond, burst: spec.burst, name: 'tenant:' })));
        return source;
      },
      ...(period === undefined ? {} : { period }),
      replicas: () => r.replicasLastSeen,
      onError: (err) => log(`a shared limit failed: ${err instanceof Error ? err.message : String(err)}`),
    };
  }
  let slots: Awaited<ReturnType<typeof openSlotSource>> | undefined;
  let embedder: EmbedderClient | undefined;
  try {
    if (config.embedder !== undefined) {
      if (config.embedderMaxConcurrency !== undefined) slots = await openSlotSource(config.pg);
      embedder = new EmbedderClient({
        url: config.embedder,
        ...(slots === undefined ? {} : { slots: { source: slots, maxConcurrentCalls: config.embedderMaxConcurrency! } }),
      });
    }
  } catch (err) {
    await redis?.close();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    shared,
    embedder,
    stats() {
      const out: Record<string, unknown> = {};
      if (redis !== undefined) {
        out.redis = { ready: redis.ready, replicasLastSeen: redis.replicasLastSeen, breaker: redis.breaker.state };
        out.tenantBuckets = [...rates.values()].map((s) => ({ ratePerSecond: s.ratePerSecond, burst: s.burst, ...s.stats() }));
        if (period !== undefined) out.period = period.stats();
      }
      if (embedder !== undefined)
        out.embedder = { ...embedder.stats(), slots: config.pg === undefined ? (slots === undefined ? 'none' : 'local') : 'postgres' };
      return out;
    },
    close() {
      closing ??= Promise.all([redis?.close(), slots?.close()]).then(() => {});
      return closing;
    },
  };
}
