/**
 * Three real `tidal serve --redis` processes against one real redis-server share one tenant quota;
 * with Redis killed each limits at the quota ÷ 3. The counts are compared with the rate × the time
 * that actually passed around them (each process's clock is the loader's), so a slow machine changes
 * the numbers, not the verdict.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { servicesSkipped, startRedis, type RedisServer } from '../../tidal-fleet/test/helpers/services.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const RATE = 150;
const BURST = 15;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Replica {
  child: ChildProcess;
  url: string;
  admitted: number;
  refused: number;
  stderr: string;
}

function startReplica(redisUrl: string): Promise<Replica> {
  const child = spawn(
    process.execPath,
    [
      CLI,
      'serve',
      '--demo',
      '--demo-items',
      '500',
      '--port',
      '0',
      '--workers',
      '1',
      '--redis',
      redisUrl,
      '--tenant-rate',
      `free=${RATE}:${BURST}`,
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const replica: Replica = { child, url: '', admitted: 0, refused: 0, stderr: '' };
  child.stderr.on('data', (d: Buffer) => (replica.stderr += d.toString('utf8')));
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no "listening" line within 30 s:\n${replica.stderr}`)), 30_000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m && replica.url === '') {
        clearTimeout(timer);
        replica.url = m[1]!;
        resolve(replica);
      }
    });
    child.once('exit', (code) => reject(new Error(`tidal serve exited (${code}):\n${replica.stderr}`)));
  });
}

async function stats(r: Replica): Promise<{
  chain: { name: string; backend?: string; backends?: Record<string, number> }[];
  fleet: { redis: { replicasLastSeen: number }; tenantBuckets: { localDecisions: number; localRatePerSecond: number }[] };
}> {
  // /stats is exempt from the chain: never refused, even for a tenant over its quota.
  const res = await fetch(`${r.url}/stats`);
  expect(res.status).toBe(200);
  return (await res.json()) as never;
}

describe.skipIf(servicesSkipped)('three tidal serve --redis replicas', () => {
  let redis: RedisServer;
  let replicas: Replica[] = [];
  const agent = new Agent({ connections: 8 });
  let running = false;
  let loaders: Promise<void>[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    replicas = await Promise.all([0, 1, 2].map(() => startReplica(redis.url)));
    // Every replica has announced itself and seen the other two (heartbeats every second).
    for (let i = 0; i < 100; i++) {
      const seen = await Promise.all(replicas.map(async (r) => (await stats(r)).fleet.redis.replicasLastSeen));
      if (seen.every((n) => n === 3)) break;
      await sleep(100);
    }
  }, 60_000);

  afterAll(async () => {
    running = false;
    await Promise.all(loaders);
    for (const r of replicas) r.child.kill('SIGKILL');
    await agent.close();
    await redis?.stop();
  });

  /** Four callers per replica, each sending its next request as soon as the last is answered. */
  function load(): void {
    running = true;
    for (const r of replicas) r.admitted = r.refused = 0;
    loaders = replicas.flatMap((r) =>
      [0, 1, 2, 3].map(async () => {
        while (running) {
          const res = await request(`${r.url}/items/none`, { dispatcher: agent });
          const body = (await res.body.json()) as { code?: string };
          if (res.statusCode === 429 && body.code === 'TIDAL_SERVE_TENANT_RATE') r.refused++;
          else r.admitted++;
        }
      }),
    );
  }

  it('share one quota within ±5%, then each limits at the quota ÷ 3 with Redis killed', async () => {
    expect(await Promise.all(replicas.map(async (r) => (await stats(r)).fleet.redis.replicasLastSeen))).toEqual([3, 3, 3]);
    const t0 = Date.now();
    load();
    await sleep(5_000);
    // Every request sent is answered and counted before the window closes: a response still in
    // flight at the deadline cannot be missed (a loaded machine delays answers, not admissions).
    running = false;
    await Promise.all(loaders);
    const elapsedMs = Date.now() - t0;
    const admitted = replicas.reduce((n, r) => n + r.admitted, 0);
    const offered = admitted + replicas.reduce((n, r) => n + r.refused, 0);
    const expected = BURST + (RATE * elapsedMs) / 1000;
    expect(offered, 'the replicas were offered far more than the quota').toBeGreaterThan(2 * expected);
    expect(admitted / expected, `admitted ${admitted}, expected ${expected.toFixed(0)}`).toBeGreaterThan(0.95);
    expect(admitted / expected, `admitted ${admitted}, expected ${expected.toFixed(0)}`).toBeLessThan(1.05);
    expect(
      replicas.every((r) => r.admitted > 0),
      'every replica got a share of the one quota',
    ).toBe(true);
    const shared = await Promise.all(replicas.map(stats));
    for (const s of shared) {
      // On a busy machine a command can outlast the 50 ms timeout and be decided locally: rare, not never.
      const backends = s.chain.find((x) => x.name === 'tenant')!.backends!;
      expect(backends.redis, JSON.stringify(backends)).toBeGreaterThan(10 * backends.local!);
    }
    const metrics = await (await fetch(`${replicas[0]!.url}/metrics`)).text();
    expect(metrics).toMatch(/tidal_serve_limit_decisions_total\{stage="tenant",backend="redis"\} [1-9]/);

    await redis.kill();
    load();
    await sleep(500);
    const a = replicas.map((r) => ({ admitted: r.admitted, refused: r.refused, atMs: Date.now() }));
    await sleep(1_500);
    const b = replicas.map((r) => ({ admitted: r.admitted, refused: r.refused, atMs: Date.now() }));
    running = false;
    await Promise.all(loaders);
    for (const [i, r] of replicas.entries()) {
      const share = ((RATE / 3) * (b[i]!.atMs - a[i]!.atMs)) / 1000;
      const got = b[i]!.admitted - a[i]!.admitted;
      expect(b[i]!.refused - a[i]!.refused, `replica ${i} kept limiting`).toBeGreaterThan(share);
      // Its third of the rate, give or take its share of the burst and a batch of credit at each end.
      expect(got, `replica ${i}`).toBeGreaterThanOrEqual(Math.floor(share * 0.85) - 2);
      expect(got, `replica ${i}`).toBeLessThanOrEqual(Math.ceil(share + BURST / 3) + 2);
      const s = await stats(r);
      expect(s.chain.find((x) => x.name === 'tenant')?.backend).toBe('local');
      expect(s.fleet.tenantBuckets[0]).toMatchObject({ localRatePerSecond: RATE / 3 });
      expect(s.fleet.tenantBuckets[0]!.localDecisions).toBeGreaterThan(0);
      expect(r.stderr).toMatch(/TIDAL_SHARED_LIMIT_LOCAL/);
    }
  }, 30_000);
});
