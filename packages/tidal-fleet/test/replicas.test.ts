/**
 * Three real replicas (child processes) against one real Redis and one real PostgreSQL. The
 * durations are the server's (Redis `TIME`) or each replica's own clock, read around the counts: the
 * assertions compare counts with the rate × the time that actually passed, so a slow machine changes
 * the numbers, not the verdict. No step waits a fixed time: each waits for the counts or the state it
 * needs (a heartbeat seen, a decision made, a fallback taken), with a bound only against a hang.
 */
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddingServer } from './helpers/embedding-server.js';
import { Replica } from './helpers/replicas.js';
import { servicesSkipped, startPostgres, startRedis, type PostgresServer, type RedisServer } from './helpers/services.js';

const rateReplica = fileURLToPath(new URL('./fixtures/rate-replica.mjs', import.meta.url));
const slotHolder = fileURLToPath(new URL('./fixtures/slot-holder.mjs', import.meta.url));
const embedReplica = fileURLToPath(new URL('./fixtures/embed-replica.mjs', import.meta.url));

interface Snapshot {
  atMs: number;
  redis: { allowed: number; total: number };
  local: { allowed: number; total: number };
  stats: { localRatePerSecond: number; replicasLastSeen: number; fallbacks: number };
}

// Between two looks at the replicas' counts; how long the test waits is decided by the counts.
const POLL_MS = 20;
const pause = () => new Promise((r) => setTimeout(r, POLL_MS));

describe.skipIf(servicesSkipped)('three replicas', () => {
  let redis: RedisServer;
  let postgres: PostgresServer;
  let replicas: Replica[] = [];

  beforeAll(async () => {
    [redis, postgres] = await Promise.all([startRedis(), startPostgres()]);
  });
  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.kill()));
    replicas = [];
  });
  afterAll(async () => {
    await Promise.all([redis?.stop(), postgres?.stop()]);
  });

  async function serverMs(): Promise<number> {
    const client = createClient({ url: redis.url });
    client.on('error', () => {});
    await client.connect();
    const [s, us] = await client.time();
    client.destroy();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  }

  const snapshots = async (command: 'mark' | 'stop'): Promise<Snapshot[]> =>
    Promise.all(replicas.map(async (r) => JSON.parse(await r.ask(command)) as Snapshot));

  /** Snapshots taken until `done` holds for them; fails saying what it waited for after `timeoutMs`. */
  async function until(what: string, done: (s: Snapshot[]) => boolean, timeoutMs = 60_000): Promise<Snapshot[]> {
    const started = Date.now();
    for (;;) {
      const s = await snapshots('mark');
      if (done(s)) return s;
      if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms; last seen ${JSON.stringify(s)}`);
      await pause();
    }
  }

  async function startRateReplicas(rate: number, burst: number): Promise<void> {
    replicas = [0, 1, 2].map(() => new Replica(rateReplica, [redis.url, String(rate), String(burst)]));
    for (const r of replicas) expect(await r.next()).toMatch(/^ready /);
    await until('every replica has seen the other two', (s) => s.every((x) => x.stats.replicasLastSeen === 3));
  }

  it('hold one shared Redis quota within ±5% over the run', async () => {
    const rate = 150;
    const burst = 15;
    await startRateReplicas(rate, burst);
    const t0 = await serverMs();
    for (const r of replicas) r.send('go');
    // Until about three seconds of the quota were granted, however long the machine takes for it.
    const target = burst + rate * 3;
    await until(`${target} granted`, (s) => s.reduce((sum, x) => sum + x.redis.allowed + x.local.allowed, 0) >= target);
    const end = await snapshots('stop');
    const elapsedMs = (await serverMs()) - t0;
    const allowed = end.reduce((sum, s) => sum + s.redis.allowed + s.local.allowed, 0);
    const offered = end.reduce((sum, s) => sum + s.redis.total + s.local.total, 0);
    const expected = burst + (rate * elapsedMs) / 1000;
    expect(offered, 'the replicas offered far more than the quota').toBeGreaterThan(2 * expected);
    expect(allowed / expected).toBeGreaterThan(0.95);
    expect(allowed / expected).toBeLessThan(1.05);
    expect(
      end.every((s) => s.redis.allowed > 0),
      'every replica got a share of the one quota',
    ).toBe(true);
  });

  it('with Redis killed mid-run, each limits at the quota ÷ 3, and all rejoin the shared bucket when it returns', async () => {
    const rate = 90;
    const burst = 9;
    await startRateReplicas(rate, burst);
    for (const r of replicas) r.send('go');
    await until('every replica decides on the shared bucket', (s) => s.every((x) => x.redis.allowed > 0 && x.redis.total > 20));
    await redis.kill();
    const a = await until('every replica fell back to its local bucket', (s) =>
      s.every((x) => x.stats.fallbacks === 1 && x.local.total > 0),
    );
    // Until each replica was granted about a second of its share locally (30 at 90/s ÷ 3) and
    // offered more than twice its share meanwhile (the bucket saturated): a window the bounds below
    // measure by each replica's own clock, however long the machine takes to fill it.
    const b = await until('every replica kept deciding locally', (s) =>
      s.every((x, i) => {
        const share = ((rate / 3) * (x.atMs - a[i]!.atMs)) / 1000;
        return x.local.allowed - a[i]!.local.allowed >= rate / 3 && x.local.total - a[i]!.local.total > 2 * share;
      }),
    );
    for (const [i, s] of b.entries()) {
      expect(s.stats).toMatchObject({ localRatePerSecond: rate / 3, replicasLastSeen: 3, fallbacks: 1 });
      const localAllowed = s.local.allowed - a[i]!.local.allowed;
      const localOffered = s.local.total - a[i]!.local.total;
      const share = ((rate / 3) * (s.atMs - a[i]!.atMs)) / 1000;
      expect(localOffered, `replica ${i} kept deciding, locally`).toBeGreaterThan(2 * share);
      expect(s.redis.total - a[i]!.redis.total, `replica ${i} made no shared decision while Redis was down`).toBe(0);
      // At most its third of the rate, give or take a token of bucket phase at each end, and its
      // share of the burst, which a replica stalled by a busy machine saves up meanwhile. At least
      // half of it: a replica the machine stalls offers less for a while (one took 42 of 50 on a
      // loaded 2-core machine), and what this bound proves is that it kept admitting, locally.
      expect(localAllowed, `replica ${i}`).toBeGreaterThanOrEqual(Math.floor(share * 0.5));
      expect(localAllowed, `replica ${i}`).toBeLessThanOrEqual(Math.ceil(share) + Math.floor(burst / 3) + 1);
    }
    await redis.restart();
    await until('every replica decides on the shared bucket again', (c) => c.every((s, j) => s.redis.total > b[j]!.redis.total + 20));
    const end = await snapshots('stop');
    expect(end.every((s) => s.stats.fallbacks === 1)).toBe(true);
  });

  it('kill -9 of a replica holding a slot frees it for the replica waiting', async () => {
    // Limit 2, one slot each: two replicas hold, the third finds both taken and waits.
    replicas = [0, 1, 2].map(() => new Replica(slotHolder, [postgres.url, 'upstream', '2', '1']));
    const first = await Promise.all(replicas.map(async (r) => ({ r, line: await r.next(30_000) })));
    const holders = first.filter((x) => x.line.startsWith('held '));
    const waiters = first.filter((x) => x.line === 'waiting');
    expect(holders.map((x) => x.line.split(' ')[1]).sort(), 'the limit holds across the three').toEqual(['0', '1']);
    expect(waiters).toHaveLength(1);
    const waiter = waiters[0]!.r;
    const victim = holders[0]!;
    await victim.r.kill();
    const line = await waiter.next(30_000);
    expect(line.split(' ')[1], "the waiter got the dead replica's slot").toBe(victim.line.split(' ')[1]);
  });

  it('× many concurrent embedder calls never exceed max_concurrent_calls at the embedding server', async () => {
    const server = await startEmbeddingServer({ latencyMs: 15 });
    try {
      const run = async (maxConcurrentCalls: number): Promise<number> => {
        server.resetCounts();
        replicas = [0, 1, 2].map(() => new Replica(embedReplica, [postgres.url, server.url, '12', String(maxConcurrentCalls)]));
        for (const r of replicas) expect(await r.next()).toBe('ready');
        const results = await Promise.all(replicas.map(async (r) => JSON.parse(await r.ask('go')) as { ok: number; failed: string[] }));
        expect(results.map((r) => r.failed)).toEqual([[], [], []]);
        expect(results.map((r) => r.ok)).toEqual([12, 12, 12]);
        await Promise.all(replicas.map((r) => r.kill()));
        replicas = [];
        return server.maxInFlight;
      };
      // Without the slots the three replicas put far more on the upstream at once...
      expect(await run(0)).toBeGreaterThan(3);
      // ...with them, never more than its limit, and the limit is used.
      expect(await run(3)).toBe(3);
    } finally {
      await server.close();
    }
  });
});
