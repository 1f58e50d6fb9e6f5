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
 * 3. The refusal path of the shared tenant limit: the chain's synchronous stage answering from its
 *    local credit, against awaiting the shared bucket per request, against the in-process limiter.
 * 4. Search through the embedder: `search({ text, semantic: true, timeoutMs: 500 })` p99 and goodput
 *    while the embedding server slows from 20 ms to 2 s, with the protected EmbedderClient and with a
 *    plain fetch as the embedder, in the same run.
 *
 * Flags: `--ms N` per timed round (default 1500), `--rounds N` (default 4), `--concurrency N` (default 32).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createClient } from 'redis';
import { DependencyUnavailableError, EmbedderClient, FleetRedis, RedisPeriodSource, RedisRateSource } from 'tidal-fleet';
import { LocalRateSource } from 'tidal-load';
import { TidalDb, type TextEmbedder } from 'tidal-core';
import { createSharedTenantLimiter, createTenantLimiter } from 'tidal-serve/internal';
import { Report, fmtInt, fmtMs, fmtRatio, parseOptions, percentile, startRedis } from './harness/index.js';

const opts = parseOptions('fleet', {
  ms: { type: 'int', default: 1500, description: 'milliseconds per timed round' },
  rounds: { type: 'int', default: 4, description: 'interleaved rounds; medians reported' },
  concurrency: { type: 'int', default: 32, description: 'callers awaiting one decision at a time' },
});
const ROUND_MS = opts.ms;
const ROUNDS = opts.rounds;
const CONCURRENCY = opts.concurrency;

const report = new Report('fleet', opts);
const log = (line = ''): void => report.line(line);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
  const flexible = new RateLimiterRedis({
    storeClient: raw,
    useRedisPackage: true,
    points: 2 ** 31 - 1,
    duration: 60,
    keyPrefix: 'bench-rlf',
  });
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
    report.markdown(
      ['limiter', 'decisions/s', 'p99', 'vs rate-limiter-flexible'],
      contenders.map(([name]) => {
        const rounds = results.get(name)!;
        const rate = median(rounds.map((x) => x.perSecond));
        return [name, fmtInt(rate), fmtMs(median(rounds.map((x) => x.p99))), fmtRatio(rate / flexRate)];
      }),
    ),
  );
  await fleet.close();
  raw.destroy();
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
      rows.push([
        `${slowMs} ms`,
        name,
        fmtInt(offered),
        `${((100 * good) / offered).toFixed(1)}%`,
        fmtInt(shed),
        fmtMs(percentile(lat, 99)),
        fmtInt(maxInFlight),
      ]);
    }
  }
  log(`\n### The embedder slowing down (${RATE} calls/s offered, open loop; goodput = answered within ${DEADLINE_MS} ms)\n`);
  log(
    report.markdown(
      ['embedder latency', 'client', 'calls', 'goodput', 'refused fast', 'caller p99', 'max in flight at the embedder'],
      rows,
    ),
  );
  server.closeAllConnections();
  server.close();
}

/** Refusals per second and p99: every decision refuses (a bucket of 1 token per 1 000 s). */
async function refusals(url: string): Promise<void> {
  const fleet = FleetRedis.connect(url, { prefix: 'bench-refuse:', heartbeatIntervalMs: 0, commandTimeoutMs: 1_000 });
  while (!fleet.ready) await sleep(10);
  const spec = { ratePerSecond: 0.001, burst: 1 };
  const shared = new RedisRateSource(fleet, spec);
  const stage = createSharedTenantLimiter({ tiers: { free: spec }, maxTenants: 100, source: () => shared });
  const local = createTenantLimiter({ tiers: { free: spec }, maxTenants: 100 });
  const req = (k: string) => ({ route: 'search', tenant: k, tier: 'free' as const });
  // A synchronous decision awaited as a resolved promise never lets I/O in: yield to the event loop
  // every 100 decisions, so the stage's background refills (and Redis's answers) get through.
  let calls = 0;
  const yielding = (decision: unknown): Promise<unknown> =>
    ++calls % 100 === 0 ? new Promise((r) => setImmediate(() => r(decision))) : Promise.resolve(decision);
  const contenders: [string, (key: string) => Promise<unknown>][] = [
    ['shared stage: synchronous admit on local credit, refilled in the background', (k) => yielding(stage.admit(req(k), Date.now()))],
    ['awaiting the shared bucket per request (RedisRateSource.take)', (k) => shared.take(k, 1, Date.now())],
    ['in-process tenant limiter (no sharing)', (k) => yielding(local.admit(req(k), Date.now()))],
  ];
  const results = new Map<string, Round[]>(contenders.map(([name]) => [name, []]));
  for (const [, decide] of contenders) await measure(decide);
  for (let r = 0; r < ROUNDS; r++) for (const [name, decide] of contenders) results.get(name)!.push(await measure(decide));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const awaited = median(results.get(contenders[1]![0])!.map((x) => x.perSecond));
  log(
    `\n### The refusal path of the shared tenant limit (${CONCURRENCY} callers, every decision a refusal, medians of ${ROUNDS} rounds)\n`,
  );
  log(
    report.markdown(
      ['tenant limit', 'refusals/s', 'p99', 'vs awaiting Redis'],
      contenders.map(([name]) => {
        const rounds = results.get(name)!;
        const rate = median(rounds.map((x) => x.perSecond));
        return [name, fmtInt(rate), fmtMs(median(rounds.map((x) => x.p99))), fmtRatio(rate / awaited)];
      }),
    ),
  );
  await fleet.close();
}

/** Hybrid search from text through the embedder while it slows down, protected and not. */
async function semanticSearch(): Promise<void> {
  const DIMS = 16;
  let latencyMs = 20;
  const vectorOf = (text: string): number[] => Array.from({ length: DIMS }, (_, d) => Math.sin((text.length + 1) * (d + 1)));
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      const input = (JSON.parse(body) as { input: string[] }).input;
      setTimeout(
        () =>
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ data: input.map((t, index) => ({ index, embedding: vectorOf(t) })) })),
        latencyMs,
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // A plain fetch with no deadline and no bulkhead: what calling the embedder directly looks like.
  const naive: TextEmbedder = {
    async tryEmbed(text) {
      const r = await fetch(`${url}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: [text] }) });
      const body = (await r.json()) as { data: { embedding: number[] }[] };
      return { vector: body.data[0]!.embedding, degradation: null };
    },
  };
  const words = ['river', 'stone', 'harbour', 'lantern', 'meadow', 'copper', 'signal', 'orbit', 'cedar', 'falcon'];
  const open = async (e: TextEmbedder): Promise<TidalDb> => {
    const db = await TidalDb.builder()
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }], embeddingDims: DIMS })
      .ephemeral()
      .workers(1)
      .embedder(e)
      .open();
    const items = Array.from({ length: 2_000 }, (_, i) => {
      const text = `${words[i % 10]} ${words[(i * 7) % 10]} ${words[(i * 3) % 10]} item${i}`;
      return { id: `i${i}`, text, embedding: vectorOf(text) };
    });
    for (let i = 0; i < items.length; i += 500) await db.upsertItems(items.slice(i, i + 500));
    return db;
  };
  const dbs = { protected: await open(new EmbedderClient({ url, maxInFlight: 16, timeoutMs: 2_000 })), unprotected: await open(naive) };
  const DEADLINE_MS = 500;
  const RATE = 100;
  // Warm both: the first searches of a database pay for its workers' caches.
  for (const db of Object.values(dbs))
    for (let i = 0; i < 30; i++) await db.search({ text: words[i % 10]!, semantic: true, timeoutMs: 5_000 });
  const rows: string[][] = [];
  for (const slowMs of [20, 200, 2_000]) {
    for (const name of ['protected', 'unprotected'] as const) {
      latencyMs = slowMs;
      const db = dbs[name];
      const lat: number[] = [];
      let good = 0;
      let hybrid = 0;
      let failed = 0;
      const pending: Promise<void>[] = [];
      const runMs = Math.max(ROUND_MS, 2 * slowMs + 500);
      const start = performance.now();
      for (let i = 0; performance.now() - start < runMs; i++) {
        const t = performance.now();
        pending.push(
          db.search({ text: words[i % 10]!, semantic: true, timeoutMs: DEADLINE_MS }).then(
            (r) => {
              const ms = performance.now() - t;
              lat.push(ms);
              if (ms <= DEADLINE_MS) good++;
              if (r.mode === 'hybrid') hybrid++;
            },
            () => {
              lat.push(performance.now() - t);
              failed++;
            },
          ),
        );
        await sleep(1000 / RATE);
      }
      const offered = pending.length;
      await Promise.all(pending);
      lat.sort((a, b) => a - b);
      rows.push([
        `${slowMs} ms`,
        name,
        fmtInt(offered),
        `${((100 * good) / offered).toFixed(1)}%`,
        `${((100 * hybrid) / offered).toFixed(1)}%`,
        fmtInt(failed),
        fmtMs(percentile(lat, 99)),
      ]);
    }
  }
  log(
    `\n### Search through the embedder slowing down (${RATE} searches/s offered, open loop, timeoutMs ${DEADLINE_MS}; goodput = answered within it)\n`,
  );
  log(report.markdown(['embedder latency', 'embedder', 'searches', 'goodput', 'ran hybrid', 'failed', 'search p99'], rows));
  await Promise.all([dbs.protected.close(), dbs.unprotected.close()]);
  server.closeAllConnections();
  server.close();
}

const redis = await startRedis();
try {
  await decisions(redis.url);
  await refusals(redis.url);
  await embedder();
  await semanticSearch();
  report.finish();
} finally {
  redis.child.kill('SIGKILL');
}
