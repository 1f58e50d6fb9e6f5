/**
 * Replication when Redis loses what it held while batches are in flight: three replicas, each a
 * child process with its own database, write bursts of requests (one signal each, on a tracer item
 * of its own, so every acknowledged request is counted exactly once or found missing) while
 * redis-server is SIGKILLed at a random point of the burst (when the stream reaches a random
 * length) and started again, empty or from its append-only file. After every burst each replica
 * must count every acknowledged tracer of every replica exactly once, with no gap left and none
 * given up on.
 *
 * Every wait is for a state (a stream length, an answer, a count), never for a duration; the kill
 * points come from a seeded generator, printed with any failure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { afterEach, describe, expect, it } from 'vitest';
import { Replica } from '../packages/tidal-fleet/test/helpers/replicas.js';
import { servicesSkipped, startRedis, type RedisServer } from '../packages/tidal-fleet/test/helpers/services.js';
// Seeded: the kill points of a run can be replayed from its seed.
import { mulberry32 } from 'tidal-serve/demo';

const REPLICA = fileURLToPath(new URL('./fixtures/replica.mjs', import.meta.url));
/** Requests per replica per burst: 3 × 40 entries for the kill to land among. */
const COUNT = 40;
const CONVERGE_MS = 60_000;
/** Reports every 50 ms, republish after 200 ms stuck: a burst's recovery takes well under a second. */
const LINK = JSON.stringify({ ackIntervalMs: 50, resendAfterMs: 200 });

interface Gap {
  origin: string;
  from: number;
  to: number;
}
interface Tracers {
  counts: number[];
  replication: { unpublished: number; gaps: Gap[]; lost: Gap[]; origins: { origin: string; behind: number }[] };
  warnings: string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(servicesSkipped)('replication: Redis lost while batches are in flight', () => {
  let redis: RedisServer | null = null;
  let dirs: string[] = [];
  let replicas: Replica[] = [];

  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.kill()));
    replicas = [];
    await redis?.stop();
    redis = null;
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    dirs = [];
  });

  async function ask<T>(r: Replica, op: string, extra: Record<string, unknown> = {}): Promise<T> {
    const answer = JSON.parse(await r.ask(JSON.stringify({ op, ...extra }))) as T & { error?: string };
    if (answer.error !== undefined) throw new Error(`replica answered ${answer.error}`);
    return answer;
  }

  async function start(server: RedisServer, i: number): Promise<Replica> {
    const replica = new Replica(REPLICA, [dirs[i]!, server.url, 'test:replication:loss', String(i), '', '', LINK]);
    expect((JSON.parse(await replica.next(60_000)) as { ready: boolean }).ready).toBe(true);
    replicas[i] = replica;
    return replica;
  }

  /**
   * Starts the three replicas and resolves once each has read the others' reports: an origin holds
   * its batches for the replicas it knows, from their first report on.
   */
  async function startAll(server: RedisServer): Promise<void> {
    dirs = [0, 1, 2].map(() => mkdtempSync(join(tmpdir(), 'tidal-repl-loss-')));
    await Promise.all([0, 1, 2].map((i) => start(server, i)));
    const client = createClient({ url: server.url });
    client.on('error', () => {});
    await client.connect();
    try {
      /** Each replica's count of reports, by its id. */
      const counts = async (): Promise<Map<string, number>> => {
        const all = await client.sendCommand<string[]>(['HGETALL', 'test:replication:loss:replicas']);
        const out = new Map<string, number>();
        for (let k = 0; k + 1 < all.length; k += 2) out.set(all[k]!, (JSON.parse(all[k + 1]!) as { n: number }).n);
        return out;
      };
      let first = await counts();
      while (first.size < 3) {
        await sleep(5);
        first = await counts();
      }
      // Two more reports from each after all three were there: each has read the other two.
      const reportedTwice = (now: Map<string, number>): boolean => [...first].every(([id, n]) => (now.get(id) ?? 0) >= n + 2);
      while (!reportedTwice(await counts())) await sleep(5);
    } finally {
      client.destroy();
    }
  }

  /** Resolves once the stream holds at least `length` entries (or `done` settled first). */
  async function streamReaches(server: RedisServer, length: number, done: { settled: boolean }): Promise<void> {
    const client = createClient({ url: server.url, disableOfflineQueue: true });
    client.on('error', () => {});
    await client.connect();
    try {
      while (!done.settled && Number(await client.sendCommand(['XLEN', 'test:replication:loss'])) < length) await sleep(1);
    } finally {
      client.destroy();
    }
  }

  const tracerIds = (tags: readonly number[], writers: readonly number[]): string[] =>
    tags.flatMap((tag) => writers.flatMap((r) => Array.from({ length: COUNT }, (_, i) => `tracer-${r}-${tag}-${i}`)));

  /**
   * Polls until every replica counts each tracer of `tags` once, with nothing unpublished, no gap
   * and nothing behind; fails at once on a count above one (applied twice) or a gap given up on.
   */
  async function everyTracerOnce(tags: readonly number[], context: string, writers: readonly number[] = [0, 1, 2]): Promise<void> {
    const ids = tracerIds(tags, writers);
    const deadline = Date.now() + CONVERGE_MS;
    let last: Tracers[] = [];
    while (Date.now() < deadline) {
      last = await Promise.all(replicas.map((r) => ask<Tracers>(r, 'tracers', { ids })));
      for (const t of last) {
        const twice = ids.filter((_, k) => t.counts[k]! > 1);
        expect(twice, `${context}: applied twice`).toEqual([]);
        expect(t.replication.lost, `${context}: gaps given up on`).toEqual([]);
      }
      const done = last.every(
        (t) =>
          t.counts.every((c) => c === 1) &&
          t.replication.unpublished === 0 &&
          t.replication.gaps.length === 0 &&
          t.replication.origins.every((o) => o.behind === 0),
      );
      if (done) return;
      await sleep(50);
    }
    const missing = last.map((t) => ids.filter((_, k) => t.counts[k] !== 1));
    throw new Error(
      `${context}: not every acknowledged tracer once within ${CONVERGE_MS} ms; missing per replica ` +
        `${JSON.stringify(missing.map((m) => ({ n: m.length, first: m.slice(0, 8) })))}; ` +
        `replication ${JSON.stringify(last.map((t) => t.replication))}`,
    );
  }

  /**
   * `kills` bursts on all three replicas; during each, Redis is SIGKILLed once the stream reaches a
   * random length, and restarted at once or once the bursts were acknowledged (coin flip).
   */
  async function killDuringBursts(server: RedisServer, kills: number, seed: number): Promise<void> {
    const next = mulberry32(seed);
    await startAll(server);
    const tags: number[] = [];
    for (let run = 0; run < kills; run++) {
      const context = `seed ${seed}, run ${run}`;
      const client = createClient({ url: server.url, disableOfflineQueue: true });
      client.on('error', () => {});
      await client.connect();
      const before = Number(await client.sendCommand(['XLEN', 'test:replication:loss']));
      client.destroy();
      const at = before + 1 + Math.floor(next() * (3 * COUNT - 2));
      const restartLate = next() < 0.5;
      const burst = { settled: false };
      const bursts = Promise.all(replicas.map((r) => ask(r, 'burst', { tag: run, count: COUNT }))).finally(() => {
        burst.settled = true;
      });
      await streamReaches(server, at, burst);
      await server.kill();
      if (restartLate) await bursts;
      await server.restart();
      await bursts;
      tags.push(run);
      await everyTracerOnce([run], context);
    }
    // Every earlier burst too: nothing was lost, or applied again, by the later kills.
    await everyTracerOnce(tags, `seed ${seed}, all runs`);
  }

  it('20 kills of a Redis without persistence mid-burst: every acknowledged request on every replica exactly once', async () => {
    redis = await startRedis();
    await killDuringBursts(redis, 20, Date.now() % 1_000_000);
  }, 600_000);

  it('a follower SIGKILLed while it applies a burst, with Redis killed too: restarted, it counts every tracer once', async () => {
    redis = await startRedis();
    const server = redis;
    const next = mulberry32(Date.now() % 1_000_000);
    await startAll(server);
    for (let run = 0; run < 5; run++) {
      // Replicas 0 and 1 write; replica 2 only follows, and is killed once the stream reaches a random length.
      const burst = { settled: false };
      const bursts = Promise.all([0, 1].map((r) => ask(replicas[r]!, 'burst', { tag: run, count: COUNT }))).finally(() => {
        burst.settled = true;
      });
      await streamReaches(server, 1 + Math.floor(next() * (2 * COUNT - 2)), burst);
      await replicas[2]!.kill();
      await server.kill();
      await server.restart();
      await bursts;
      await start(server, 2);
      await everyTracerOnce([run], `follower run ${run}`, [0, 1]);
    }
  }, 300_000);

  it('5 kills of a Redis with an append-only file (fsync every second) mid-burst: every acknowledged request exactly once', async () => {
    const aof = mkdtempSync(join(tmpdir(), 'tidal-repl-aof-'));
    try {
      redis = await startRedis({ appendOnlyDir: aof });
      await killDuringBursts(redis, 5, Date.now() % 1_000_000);
    } finally {
      await redis?.stop();
      redis = null;
      rmSync(aof, { recursive: true, force: true });
    }
  }, 300_000);
});
