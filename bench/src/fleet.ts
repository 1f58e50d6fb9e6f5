/**
 * `npm run bench:fleet`: the limits shared across replicas, on a real redis-server this bench starts
 * on a loopback port of its own (it must be installed: `node scripts/ensure-services.mjs`).
 *
 * 1. Decisions per second and p99 latency, in interleaved rounds of the same run: tidal-load's local
 *    bucket, tidal-fleet's Redis token bucket and Redis fixed window, and rate-limiter-flexible's
 *    RateLimiterRedis on the same Redis, each with `--concurrency` callers awaiting one decision at
 *    a time.
 * 2. The embedder as a dependency: goodput (calls answered within the caller's 500 ms deadline) and
 *    p99 while a local embedding server slows from 20 ms to 2 s, with the protection (bulkhead,
 *    deadline, retry policy) and without it (plain fetch, no deadline).
 *
 * Flags: `--ms N` per timed round (default 1500), `--rounds N` (default 4), `--concurrency N` (default 32).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import { createServer as createNetServer, Socket, type AddressInfo } from 'node:net';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createClient } from 'redis';
import { DependencyUnavailableError, EmbedderClient, FleetRedis, RedisPeriodSource, RedisRateSource } from 'tidal-fleet';
import { LocalRateSource } from 'tidal-load';
import { describeMachine, fmtInt, fmtMs, fmtRatio, intFlag, loadAverage, markdownTable, percentile } from './stats.js';

const argv = process.argv.slice(2);
const ROUND_MS = intFlag(argv, 'ms', 1500);
const ROUNDS = intFlag(argv, 'rounds', 4);
const CONCURRENCY = intFlag(argv, 'concurrency', 32);

const log = (line = ''): void => void process.stdout.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createNetServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

async function startRedis(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  child.on('error', (err) => {
    process.stderr.write(`redis-server could not start (${err.message}); run node scripts/ensure-services.mjs\n`);
    process.exit(1);
  });
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = new Socket();
      s.once('error', () => resolve(false));
      s.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    });
    if (ok) break;
    await sleep(25);
  }
  return { url: `redis://127.0.0.1:${port}`, child };
}

interface Round {
  perSecond: number;
  p99: number;
}

async function measure(decide: (key: string) => Promise<unknown>): Promise<Round> {
  const latencies: number[] = [];
  const end = performance.now() + ROUND_MS;
  let n = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, i) => {
      const key = `k${i % 64}`;
      while (performance.now() < end) {
        const t = performance.now();
        await decide(key);
        latencies.push(performance.now() - t);
        n++;
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  return { perSecond: (n * 1000) / ROUND_MS, p99: percentile(latencies, 99) };
}

async function decisions(url: string): Promise<void> {
  const fleet = FleetRedis.connect(url, { prefix: 'bench:', heartbeatIntervalMs: 0, commandTimeoutMs: 1_000 });
  const raw = createClient({ url });
  raw.on('error', () => {});
  await raw.connect();
  while (!fleet.ready) await sleep(10);
  // Limits far above the load: every decision is an admit, so all four do the same work each time.
  const local = new LocalRateSource(1e9, 1e9);
  const bucket = new RedisRateSource(fleet, { ratePerSecond: 1e9, burst: 1e9 });
  const window = new RedisPeriodSource(fleet, { periodMs: 60_000, quota: 2 ** 31 - 1 });
  const flexible = new RateLimiterRedis({ storeClient: raw, useRedisPackage: true, points: 2 ** 31 - 1, duration: 60, keyPrefix: 'bench-rlf' });
  const contenders: [string, (key: string) => Promise<unknown>][] = [
    ['tidal-load LocalRateSource (in process)', (k) => local.take(k, 1, Date.now())],
    ['tidal-fleet RedisRateSource (token bucket, 1 EVALSHA)', (k) => bucket.take(k, 1, Date.now())],
    ['tidal-fleet RedisPeriodSource (fixed window, 1 EVALSHA)', (k) => window.take(k, 1, Date.now())],
    ['rate-limiter-flexible RateLimiterRedis (node-redis)', (k) => flexible.consume(k, 1)],
  ];
  const results = new Map<string, Round[]>(contenders.map(([name]) => [name, []]));
  for (const [, decide] of contenders) await measure(decide); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, decide] of contenders) results.get(name)!.push(await measure(decide));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const flexRate = median(results.get(contenders[3]![0])!.map((x) => x.perSecond));
  log(`### Decisions (${CONCURRENCY} callers, ${ROUNDS} interleaved rounds of ${ROUND_MS} ms, medians)\n`);
  log(
    markdownTable(
      ['limiter', 'decisions/s', 'p99', 'vs rate-limiter-flexible'],
      contenders.map(([name]) => {
        const rounds = results.get(name)!;
        const rate = median(rounds.map((x) => x.perSecond));
        return [name, fmtInt(rate), fmtMs(median(rounds.map((x) => x.p99))), fmtRatio(rate / flexRate)];
      }),
    ),
  );
  await fleet.close();
  await raw.destroy();
}

async function embedder(): Promise<void> {
  let latencyMs = 20;
  let inFlight = 0;
  let maxInFlight = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setTimeout(() => {
        inFlight--;
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ index: 0, embedding: [1, 0, 0, 0] }] }));
      }, latencyMs);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const DEADLINE_MS = 500;
  const RATE = 200; // calls offered per second, open loop: arrivals do not wait for answers
  const protectedClient = new EmbedderClient({ url, maxInFlight: 16, timeoutMs: DEADLINE_MS });
  const naive = async (): Promise<void> => {
    const r = await fetch(`${url}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: ['q'] }) });
    await r.json();
  };
  const rows: string[][] = [];
  for (const slowMs of [20, 200, 2_000]) {
    for (const [name, call] of [
      ['protected', () => protectedClient.embed('q')],
      ['unprotected', naive],
    ] as const) {
      latencyMs = slowMs;
      maxInFlight = inFlight;
      const lat: number[] = [];
      let good = 0;
      let shed = 0;
      const pending: Promise<void>[] = [];
      const runMs = Math.max(ROUND_MS, 2 * slowMs + 500);
      const start = performance.now();
      for (let i = 0; performance.now() - start < runMs; i++) {
        const t = performance.now();
        pending.push(
          (call as () => Promise<unknown>)().then(
            () => {
              const ms = performance.now() - t;
              lat.push(ms);
              if (ms <= DEADLINE_MS) good++;
            },
            (err: unknown) => {
              lat.push(performance.now() - t);
              if (DependencyUnavailableError.is(err)) shed++;
            },
          ),
        );
        await sleep(1000 / RATE);
      }
      const offered = pending.length;
      await Promise.all(pending);
      lat.sort((a, b) => a - b);
      rows.push([`${slowMs} ms`, name, fmtInt(offered), `${((100 * good) / offered).toFixed(1)}%`, fmtInt(shed), fmtMs(percentile(lat, 99)), fmtInt(maxInFlight)]);
    }
  }
  log(`\n### The embedder slowing down (${RATE} calls/s offered, open loop; goodput = answered within ${DEADLINE_MS} ms)\n`);
  log(markdownTable(['embedder latency', 'client', 'calls', 'goodput', 'refused fast', 'caller p99', 'max in flight at the embedder'], rows));
  server.closeAllConnections();
  server.close();
}

const redis = await startRedis();
try {
  log(`# bench:fleet — ${describeMachine()}; load average ${loadAverage().toFixed(2)} at start\n`);
  await decisions(redis.url);
  await embedder();
} finally {
  redis.child.kill('SIGKILL');
}
