/**
 * `npm run bench:replication`: replication through a Redis Stream, on a real redis-server this
 * bench starts on a loopback port of its own (`node scripts/ensure-services.mjs` installs it).
 *
 * Three databases in this process, each in its own directory: `plain` (no replication), `origin`
 * (replicating) and `follower` (replicating, applying what `origin` publishes).
 *
 * 1. Write throughput, replication on against off: `--callers` callers each awaiting
 *    `signals([...batch])` for `--ms`, on `plain` and on `origin` in interleaved rounds (medians).
 *    Each `origin` round also times the follower: signals replicated per second, from the round's
 *    start until the follower holds every signal of it.
 * 2. Lag under an offered load: `--rate` signals/s in batches of `--batch` on `origin` for `--ms`;
 *    per batch, the time from its commit on `origin` to its commit on `follower` (one clock, one
 *    process), p50 and p99.
 *
 * All three share the machine's cores (and Redis), so "on" pays for the follower's applying too.
 * Flags: `--ms N` (default 2000), `--rounds N` (3), `--callers N` (4), `--batch N` (100),
 * `--rate N` (20000), `--items N` (10000).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TidalDb, type ReplicationLink, type SignalInput } from 'tidal-core';
import { RedisStreamReplication } from 'tidal-fleet';
import type { ReplicaHost } from 'tidal-load';
import { Report, fmtInt, fmtMs, fmtRatio, parseOptions, percentile, startRedis } from './harness/index.js';

const opts = parseOptions('replication', {
  ms: { type: 'int', default: 2000, description: 'milliseconds per timed round' },
  rounds: { type: 'int', default: 3, description: 'interleaved rounds of on and off; medians reported' },
  callers: { type: 'int', default: 4, description: 'callers awaiting one signals() call at a time' },
  batch: { type: 'int', default: 100, description: 'signals per call' },
  rate: { type: 'int', default: 20_000, description: 'signals/s offered in the lag phase' },
  items: { type: 'int', default: 10_000, description: 'distinct item ids the signals spread over' },
});

const report = new Report('replication', opts);
const log = (line = ''): void => report.line(line);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NOW = Date.UTC(2025, 5, 1);
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 6 * 3_600_000, windows: ['1h' as const, 'all' as const] }] };

/** Wraps a link so each foreign batch's commit-to-applied time is recorded. */
class TimedLink implements ReplicationLink {
  readonly lagsMs: number[] = [];
  applied = 0;
  constructor(readonly inner: ReplicationLink) {}
  start(host: ReplicaHost): void {
    this.inner.start({
      ...host,
      applyForeign: async (batches) => {
        const n = await host.applyForeign(batches);
        const t = Date.now();
        for (const { batch } of batches) {
          if (batch.origin === host.replicaId) continue;
          this.lagsMs.push(t - batch.at);
          this.applied += batch.events.length;
        }
        return n;
      },
    });
  }
  stats() {
    return this.inner.stats();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

let next = 0;
function batchOf(n: number): SignalInput[] {
  const out: SignalInput[] = [];
  for (let i = 0; i < n; i++) out.push({ item: `item-${next++ % opts.items}`, kind: 'view', at: NOW - (next % 3_600_000) });
  return out;
}

async function open(dir: string, link?: ReplicationLink): Promise<TidalDb> {
  const b = TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => Date.now())
    .onWarning(() => {});
  if (link) b.replication(link);
  return b.open();
}

/** Closed loop: `callers` callers each awaiting one call at a time for `ms`; returns signals written. */
async function closedLoop(db: TidalDb, ms: number): Promise<number> {
  const end = performance.now() + ms;
  let written = 0;
  await Promise.all(
    Array.from({ length: opts.callers }, async () => {
      while (performance.now() < end) {
        await db.signals(batchOf(opts.batch));
        written += opts.batch;
      }
    }),
  );
  return written;
}

/** Resolves once the follower has applied `target` signals; returns when (performance.now()). */
async function caughtUp(link: TimedLink, target: number, boundMs = 120_000): Promise<number> {
  const end = performance.now() + boundMs;
  while (link.applied < target) {
    if (performance.now() > end) throw new Error(`the follower applied ${link.applied} of ${target} within ${boundMs} ms`);
    await sleep(2);
  }
  return performance.now();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const redis = await startRedis();
const root = mkdtempSync(join(tmpdir(), 'tidal-bench-repl-'));
try {
  const stream = 'bench:replication';
  const followerLink = new TimedLink(RedisStreamReplication.connect(redis.url, { stream }));
  const originLink = new TimedLink(RedisStreamReplication.connect(redis.url, { stream }));
  const plain = await open(join(root, 'plain'));
  const origin = await open(join(root, 'origin'), originLink);
  const follower = await open(join(root, 'follower'), followerLink);
  await sleep(500);

  // 1. Throughput, on against off, interleaved.
  const off: number[] = [];
  const on: number[] = [];
  const replicated: number[] = [];
  await closedLoop(plain, 300); // warm-up
  const warm = await closedLoop(origin, 300);
  let sent = warm;
  await caughtUp(followerLink, sent);
  for (let r = 0; r < opts.rounds; r++) {
    const a = await closedLoop(plain, opts.ms);
    off.push(a / (opts.ms / 1000));
    const start = performance.now();
    const b = await closedLoop(origin, opts.ms);
    on.push(b / (opts.ms / 1000));
    sent += b;
    const done = await caughtUp(followerLink, sent);
    replicated.push(b / ((done - start) / 1000));
  }
  log(
    `### Write throughput, replication on against off (${opts.callers} callers × ${opts.batch} signals a call, ${opts.rounds} interleaved rounds of ${opts.ms} ms, medians)\n`,
  );
  log(
    report.markdown(
      ['database', 'signals/s written', 'vs off', 'signals/s replicated to the follower'],
      [
        ['replication off', fmtInt(median(off)), fmtRatio(1), '—'],
        [
          'replication on (outbox, publisher, a follower in the same process)',
          fmtInt(median(on)),
          fmtRatio(median(on) / median(off)),
          fmtInt(median(replicated)),
        ],
      ],
    ),
  );
  report.set('throughput', { offPerSecond: off, onPerSecond: on, replicatedPerSecond: replicated });

  // 2. Lag at an offered rate (open loop).
  followerLink.lagsMs.length = 0;
  const perTick = opts.batch;
  const intervalMs = (1000 * perTick) / opts.rate;
  const t0 = performance.now();
  let ticks = 0;
  const writes: Promise<number>[] = [];
  while (performance.now() - t0 < opts.ms) {
    const due = t0 + ticks * intervalMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    writes.push(origin.signals(batchOf(perTick)));
    ticks++;
  }
  await Promise.all(writes);
  sent += ticks * perTick;
  await caughtUp(followerLink, sent);
  const lags = Float64Array.from(followerLink.lagsMs).sort();
  const offered = (ticks * perTick) / ((performance.now() - t0) / 1000);
  log(
    `\n### Lag from the origin's commit to the follower's commit (${fmtInt(opts.rate)} signals/s offered in calls of ${perTick}, ${opts.ms} ms)\n`,
  );
  log(
    report.markdown(
      ['offered signals/s', 'batches replicated', 'lag p50 (ms)', 'lag p99 (ms)', 'lag max (ms)'],
      [
        [
          fmtInt(offered),
          fmtInt(lags.length),
          fmtMs(percentile(lags, 50)),
          fmtMs(percentile(lags, 99)),
          fmtMs(lags[lags.length - 1] ?? Number.NaN),
        ],
      ],
    ),
  );
  report.set('lag', { offeredPerSecond: offered, batches: lags.length, p50Ms: percentile(lags, 50), p99Ms: percentile(lags, 99) });
  const counts = [origin, follower].map((db) => db.itemSignals('item-0').view?.count ?? 0);
  log(`\nitem-0's view count on the origin and the follower: ${counts.join(' and ')}`);
  await Promise.all([plain.close(), origin.close(), follower.close()]);
  report.finish();
} finally {
  redis.child.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
}
