/**
 * Three real replicas (child processes) against one real Redis and one real PostgreSQL. The
 * durations are the server's (Redis `TIME`) or each replica's own clock, read around the counts: the
 * assertions compare counts with the rate × the time that actually passed, so a slow machine changes
 * the numbers, not the verdict.
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

  async function startRateReplicas(rate: number, burst: number): Promise<void> {
    replicas = [0, 1, 2].map(() => new Replica(rateReplica, [redis.url, String(rate), String(burst)]));
    for (const r of replicas) expect(await r.next()).toMatch(/^ready /);
    // Let every heartbeat land, so each replica has seen the other two.
    await sleep(300);
  }

  const snapshots = async (command: 'mark' | 'stop'): Promise<Snapshot[]> =>
    Promise.all(replicas.map(async (r) => JSON.parse(await r.ask(command)) as Snapshot));

  it('hold one shared Redis quota within ±5% over the run', async () => {
    const rate = 150;
    const burst = 15;
    await startRateReplicas(rate, burst);
    const t0 = await serverMs();
    for (const r of replicas) r.send('go');
    await sleep(3_000);
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
    await sleep(800);
    await redis.kill();
    await sleep(300);
    const a = await snapshots('mark');
    await sleep(1_500);
    const b = await snapshots('mark');
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
    let c = await snapshots('mark');
    for (let i = 0; i < 100 && !c.every((s, j) => s.redis.total > b[j]!.redis.total + 20); i++) {
      await sleep(50);
      c = await snapshots('mark');
    }
    expect(
      c.map((s, j) => s.redis.total > b[j]!.redis.total + 20),
      'every replica decides on the shared bucket again',
    ).toEqual([true, true, true]);
    const end = await snapshots('stop');
    expect(end.every((s) => s.stats.fallbacks === 1)).toBe(true);
  });

  it('kill -9 of a replica holding a slot frees it for the replica waiting', async () => {
    // Limit 2, one slot each: two replicas hold, the third waits.
    replicas = [0, 1, 2].map(() => new Replica(slotHolder, [postgres.url, 'upstream', '2', '1']));
    const lines = replicas.map((r) => r.next(30_000).then((line) => ({ r, line })));
    const firstTwo = await Promise.race([
      Promise.all([lines[0]!, lines[1]!]),
      Promise.all([lines[0]!, lines[2]!]),
      Promise.all([lines[1]!, lines[2]!]),
    ]);
    const holders = firstTwo.map((x) => x.r);
    const waiter = replicas.find((r) => !holders.includes(r))!;
    expect(firstTwo.map((x) => x.line.split(' ')[1]).sort()).toEqual(['0', '1']);
    await sleep(300);
    let waiterHeld = false;
    void lines[replicas.indexOf(waiter)]!.then(() => (waiterHeld = true));
    expect(waiterHeld, 'the limit holds across the three').toBe(false);
    const victim = holders[0]!;
    const freed = firstTwo[0].line.split(' ')[1];
    await victim.kill();
    const { line } = await lines[replicas.indexOf(waiter)]!;
    expect(line.split(' ')[1], "the waiter got the dead replica's slot").toBe(freed);
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
