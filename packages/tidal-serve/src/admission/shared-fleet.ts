/**
 * What `tidal serve --redis / --embedder / --pg` connect to: the shared limits' Redis and the
 * embedder, with its concurrency slots on PostgreSQL. Opened before the database, closed after it.
 */
import { Gauge, type Registry } from 'prom-client';
import type { ReplicationLink, TextEmbedder } from 'tidal-core';
import {
  EmbedderClient,
  FleetRedis,
  RedisPeriodSource,
  RedisRateSource,
  RedisStreamReplication,
  SharedSlots,
  openSlotSource,
} from 'tidal-fleet';
import type { ServeConfig } from '../config.js';
import type { SharedSources } from './shared-limits.js';
import type { RateSpec } from './types.js';

/** How long the server waits for Redis at start before it starts anyway (on the local fallback). */
export const REDIS_START_WAIT_MS = 2_000;

/** The connections `tidal serve` holds for the fleet. */
export interface Fleet {
  /** The sources the shared admission chain decides through; `undefined` without `--redis`. */
  readonly shared: SharedSources | undefined;
  // As tidal-core's interface, not tidal-fleet's class: this declaration must not name the optional peer.
  readonly embedder: TextEmbedder | undefined;
  /** For `/stats` (`fleet`). */
  stats(): Record<string, unknown>;
  /** Idempotent. */
  close(): Promise<void>;
}

/**
 * Connects what the flags name. Redis is waited for up to {@link REDIS_START_WAIT_MS}, then left
 * to connect in the background: until it answers, the tenant limit runs on its local fallback
 * (the fleet rate ÷ the replicas last seen) and the period limit admits (fail-open), each with its
 * warning. PostgreSQL likewise: waited for up to 2 s, then the embedder's slots are held in
 * process (the limit ÷ the replicas last seen, at least 1) until it answers, with
 * `TIDAL_SHARED_SLOTS_LOCAL`; only a transaction pooler in front of it refuses to start (a
 * configuration to fix, not an outage to wait out). With `registry`, `/metrics` gets the
 * embedder's breaker state and where its slots are held.
 */
export async function openFleet(config: ServeConfig, log: (line: string) => void, registry?: Registry): Promise<Fleet> {
  let redis: FleetRedis | undefined;
  let shared: SharedSources | undefined;
  const rates = new Map<string, RedisRateSource>();
  let period: RedisPeriodSource | undefined;
  if (config.redis !== undefined) {
    const r = FleetRedis.connect(config.redis, { commandTimeoutMs: config.redisTimeoutMs });
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
      if (config.embedderMaxConcurrency !== undefined) {
        const r = redis;
        slots = await openSlotSource(config.pg, r === undefined ? {} : { replicas: () => r.replicasLastSeen });
        if (slots instanceof SharedSlots && slots.backend === 'local')
          log(`postgres at ${redactUrl(config.pg!)} does not answer yet: the embedder's slots are held in this process until it does`);
      }
      embedder = new EmbedderClient({
        url: config.embedder,
        ...(slots === undefined ? {} : { slots: { source: slots, maxConcurrentCalls: config.embedderMaxConcurrency! } }),
      });
      if (registry !== undefined) embedderMetrics(registry, embedder, slots);
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
        out.embedder = {
          ...embedder.stats(),
          slots: slotsBackend(slots),
          ...(slots instanceof SharedSlots ? { slotStats: slots.stats() } : {}),
        };
      return out;
    },
    close() {
      closing ??= Promise.all([redis?.close(), slots?.close()]).then(() => {});
      return closing;
    },
  };
}

/** `--replicate`: the replication link through a Redis Stream on `url`. */
export function connectReplication(url: string): ReplicationLink {
  return RedisStreamReplication.connect(url);
}

/** Where the embedder's slots are held now: `postgres`, `local` (in process), or `none` (no limit). */
function slotsBackend(slots: object | undefined): 'postgres' | 'local' | 'none' {
  return slots === undefined ? 'none' : slots instanceof SharedSlots ? slots.backend : 'local';
}

/** A URL without its password, for a log line. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '(the --pg URL)';
  }
}

const BREAKER_STATES = ['closed', 'open', 'halfOpen'] as const;
const SLOT_BACKENDS = ['postgres', 'local', 'none'] as const;

/**
 * `tidal_serve_embedder_breaker{state}` and `tidal_serve_embedder_slots{backend}`: 1 for the state
 * the embedder's breaker is in and for where its slots are held, 0 for the others, read at scrape time.
 */
function embedderMetrics(registry: Registry, embedder: EmbedderClient, slots: object | undefined): void {
  new Gauge({
    name: 'tidal_serve_embedder_breaker',
    help: "The embedder's breaker: 1 for its state now (closed, open = every call answered from BM25 at once, halfOpen = one call probing)",
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const now = embedder.stats().breaker;
      for (const state of BREAKER_STATES) this.set({ state }, state === now ? 1 : 0);
    },
  });
  new Gauge({
    name: 'tidal_serve_embedder_slots',
    help: "Where the embedder's concurrency slots are held: 1 for postgres (every replica), local (this process) or none",
    labelNames: ['backend'],
    registers: [registry],
    collect() {
      const now = slotsBackend(slots);
      for (const backend of SLOT_BACKENDS) this.set({ backend }, backend === now ? 1 : 0);
    },
  });
}
