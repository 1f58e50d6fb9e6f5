/**
 * How long an origin holds its batches: two databases in this process on one real redis-server,
 * each link on a clock the test moves. A batch stays in the origin's outbox until the other
 * replica applied it, while that replica is silent for less than `peerTimeoutMs`; one silent longer
 * is no longer waited for. Every wait is for a state the stats show, never for a duration.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { RedisStreamReplication } from 'tidal-fleet';
import { servicesSkipped, startRedis, trimStream, type RedisServer } from '../packages/tidal-fleet/test/helpers/services.js';

const SCHEMA = {
  signals: [{ name: 'view', halfLifeMs: 3_600_000, windows: ['all' as const] }],
  metadata: { creator: 'string' as const },
};
const T0 = Date.UTC(2025, 5, 1);
const PEER_TIMEOUT_MS = 60_000;
const RESEND_AFTER_MS = 1_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it holds (every 5 ms, at most 30 s): the state is waited for, not a duration. */
async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within 30 s: ${what}`);
    await sleep(5);
  }
}

describe.skipIf(servicesSkipped)('replication: an origin holds its batches for the live replicas', () => {
  let redis: RedisServer;
  let root: string;
  const open: TidalDb[] = [];
  /** The links' clock (ms), moved by the test. */
  let now = 0;

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
    rmSync(root, { recursive: true, force: true });
  });

  async function replica(name: string, warnings: string[] = [], stream = 'test:retention'): Promise<TidalDb> {
    const link = RedisStreamReplication.connect(redis.url, {
      stream,
      blockMs: 50,
      retryMs: 10,
      ackIntervalMs: 5,
      resendAfterMs: RESEND_AFTER_MS,
      peerTimeoutMs: PEER_TIMEOUT_MS,
      clock: () => now,
    });
    const db = await TidalDb.builder()
      .path(join(root, name))
      .schema(SCHEMA)
      .workers(1)
      .clock(() => T0)
      .onWarning((w) => warnings.push(w.code))
      .replication(link)
      .open();
    open.push(db);
    return db;
  }

  it('keeps a batch until the other replica applied it, and stops waiting for one silent past peerTimeoutMs', async () => {
    root = mkdtempSync(join(tmpdir(), 'tidal-repl-retention-'));
    now = 1_000_000;
    const a = await replica('a');
    const b = await replica('b');
    for (let i = 0; i < 3; i++) await a.signal({ item: `x${i}`, kind: 'view', at: T0 - i });
    await until('b applied a’s three batches', () => b.itemSignals('x2').view?.count === 1);
    // Past the links' first reports: a releases what b reported applied.
    now += 100;
    await until('a released them', () => a.stats().replication!.retained === 0);

    await b.close();
    open.splice(open.indexOf(b), 1);
    await a.signal({ item: 'y0', kind: 'view', at: T0 });
    await a.signal({ item: 'y1', kind: 'view', at: T0 });
    await until('a published them', () => a.stats().replication!.unpublished === 0);
    const published = a.stats().replication!.link.published;
    // b is silent for less than peerTimeoutMs, its position below what a published: a appends them again, and holds them.
    now += RESEND_AFTER_MS + 1;
    await until('a appended them again for b', () => a.stats().replication!.link.published >= published + 2);
    expect(a.stats().replication!.retained).toBe(2);

    // Silent for longer than peerTimeoutMs: b is no longer waited for.
    now += PEER_TIMEOUT_MS;
    await until('a stopped holding them for b', () => a.stats().replication!.retained === 0);
  });

  it('fills from the outbox what was trimmed from the stream, and warns only of what neither holds', async () => {
    root = mkdtempSync(join(tmpdir(), 'tidal-repl-retention-'));
    now = 1_000_000;
    const S = 'test:retention:trimmed';
    const a = await replica('a', [], S);
    let b = await replica('b', [], S);
    for (let i = 0; i < 3; i++) await a.signal({ item: `x${i}`, kind: 'view', at: T0 - i });
    await until('b applied a’s three batches', () => b.itemSignals('x2').view?.count === 1);
    await b.close();
    open.splice(open.indexOf(b), 1);
    // Batch 4 reaches the stream and is trimmed from it; batch 5 stays: the stream starts after
    // b's stored position, but a still holds batch 4 for b.
    await a.signal({ item: 'y0', kind: 'view', at: T0 });
    await until('a published batch 4', () => a.stats().replication!.unpublished === 0);
    await trimStream(redis.url, S);
    await a.signal({ item: 'y1', kind: 'view', at: T0 });
    await until('a published batch 5', () => a.stats().replication!.unpublished === 0);
    const warnings: string[] = [];
    b = await replica('b', warnings, S);
    await until('b holds back batch 5', () => b.stats().replication!.gaps.length === 1);
    // a sends batch 4 again once b's position stayed below it for resendAfterMs. The clock moves
    // again while it has not: b's report from before its close may have been older than its last
    // batch, and the one after the reopen then counts as a move (at most 10 × 1 s, far inside
    // peerTimeoutMs).
    let polls = 0;
    let moves = 0;
    await until('b applied batches 4 and 5', () => {
      if (polls++ % 100 === 0 && moves < 10) {
        now += RESEND_AFTER_MS + 1;
        moves++;
      }
      return b.itemSignals('y0').view?.count === 1 && b.itemSignals('y1').view?.count === 1;
    });
    expect(b.stats().replication!.lost).toEqual([]);
    expect(warnings).not.toContain('TIDAL_REPLICATION_GAP');

    // b away for longer than peerTimeoutMs: a stops holding batch 6 for it, and the stream loses it.
    await b.close();
    open.splice(open.indexOf(b), 1);
    await a.signal({ item: 'z0', kind: 'view', at: T0 });
    await until('a published batch 6', () => a.stats().replication!.unpublished === 0);
    now += PEER_TIMEOUT_MS + 1;
    await until('a released batch 6', () => a.stats().replication!.retained === 0);
    await trimStream(redis.url, S);
    const later: string[] = [];
    b = await replica('b', later, S);
    // No later batch of a shows the gap: the report and a read of the whole stream do.
    await until('b found batch 6 missing', () => b.stats().replication!.lost.length === 1);
    const origin = a.stats().replication!.replicaId;
    expect(b.stats().replication!.lost[0]).toMatchObject({ origin, from: 6, to: 6 });
    expect(later).toContain('TIDAL_REPLICATION_GAP');
    expect(b.itemSignals('z0').view).toBeUndefined();
  });
});
