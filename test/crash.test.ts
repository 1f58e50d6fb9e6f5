/**
 * Crash safety of the write path, end to end: a child process writes continuously and is killed
 * with SIGKILL at random points; the tail of SQLite's WAL is then cut or corrupted on purpose.
 * Kill points and damage come from a seeded PRNG: a failure names its seed and round.
 */
import { closeSync, mkdtempSync, openSync, rmSync, statSync, truncateSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb, type TidalWarning } from 'tidal-core';
import { BASE, ITEMS, SCHEMA, replayState } from './fixtures/crash-events.mjs';
import { readAckMark, writeThenKill } from './fixtures/crash-harness.mjs';
import { mulberry32 } from './helpers.js';

const SEED = 0x71da1;
const NOW = BASE + 10_000_000;
const root = mkdtempSync(join(tmpdir(), 'tidal-crash-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function reopen(dir: string, warnings: TidalWarning[]): Promise<TidalDb> {
  return (
    TidalDb.builder()
      .path(dir)
      .schema(SCHEMA)
      .workers(1)
      // Small: this process opens ~30 databases, and each signal arena keeps its address-space
      // reservation until it is garbage-collected; with large arenas, spawning the writer failed
      // with ENOMEM once enough had piled up.
      .capacity({ items: 4096, signalSlots: 4096 })
      .clock(() => NOW)
      .onWarning((w) => warnings.push(w))
      .open()
  );
}

/**
 * Checks that the database holds exactly the first `total` events of the stream, where `total` is
 * the number of events it holds: every (item, kind) has the count and decayed score of an
 * independent replay of events 0..total−1. So nothing is missing from the middle, nothing is
 * counted twice, and the state equals a replay of the log. Returns `total`.
 */
function expectPrefix(db: TidalDb, context: string): number {
  let total = 0;
  for (let i = 0; i < ITEMS; i++) {
    for (const v of Object.values(db.itemSignals(`item-${i}`))) total += v.count;
  }
  const expected = replayState(total, NOW);
  for (let i = 0; i < ITEMS; i++) {
    const got = db.itemSignals(`item-${i}`);
    for (const kind of ['view', 'like']) {
      const want = expected.get(`item-${i}/${kind}`);
      if (!want) {
        expect(got[kind], `${context}: item-${i}/${kind}`).toBeUndefined();
        continue;
      }
      expect(got[kind]?.count, `${context}: item-${i}/${kind} count`).toBe(want.count);
      expect(got[kind]!.score, `${context}: item-${i}/${kind} score`).toBeCloseTo(want.score, 9);
    }
  }
  return total;
}

describe('crash: SIGKILL at random points', () => {
  it('keeps every acknowledged signal exactly once across 20 kills, with checkpoints in between', async () => {
    const rand = mulberry32(SEED);
    const dir = join(root, 'kills');
    let next = 0;
    for (let round = 0; round < 20; round++) {
      const context = `seed ${SEED} round ${round}`;
      // Between 1 and 24 batches of 25 events, and a checkpoint interval that makes some kills land
      // around a checkpoint and others far from one.
      const minAcks = 25 + Math.floor(rand() * 24) * 25;
      const checkpointEvery = [100, 350, 1_000_000][Math.floor(rand() * 3)]!;
      const acked = await writeThenKill(dir, next, minAcks, checkpointEvery);
      const warnings: TidalWarning[] = [];
      const db = await reopen(dir, warnings);
      try {
        const total = expectPrefix(db, context);
        // At least everything acknowledged; at most the one batch that was committed but whose
        // acknowledgement the kill cut short.
        expect(total, context).toBeGreaterThanOrEqual(acked);
        expect(total - acked, context).toBeLessThanOrEqual(25);
        // A kill -9 loses nothing the OS already has: no tail-loss warning.
        expect(warnings, context).toEqual([]);
        next = total;
      } finally {
        // Every other round closes (a checkpoint) and the others reopen without one being needed.
        await db.close();
      }
    }
    expect(next).toBeGreaterThan(20 * 25);
  });
});

describe('crash: a torn or corrupt WAL tail', () => {
  const damages = ['truncate', 'truncate', 'truncate', 'corrupt', 'corrupt', 'corrupt'] as const;

  it.each(damages.map((d, i) => [d, i] as const))('reopens cleanly after the test %s the tail (case %i)', async (damage, index) => {
    const rand = mulberry32(SEED + 1 + index);
    const dir = join(root, `tail-${index}`);
    const context = `seed ${SEED + 1 + index} ${damage}`;
    await writeThenKill(dir, 0, 400 + Math.floor(rand() * 400));
    const ackedSeq = readAckMark(dir);
    expect(ackedSeq, context).toBeGreaterThan(0);

    const wal = join(dir, 'tidal.db-wal');
    const size = statSync(wal).size;
    expect(size, context).toBeGreaterThan(32);
    // Damage somewhere in the back half of the WAL, never the 32-byte header alone.
    const at = Math.floor(size / 2 + rand() * (size / 2 - 64)) + 32;
    if (damage === 'truncate') {
      truncateSync(wal, at);
    } else {
      const fd = openSync(wal, 'r+');
      const junk = Buffer.alloc(64);
      for (let i = 0; i < junk.length; i++) junk[i] = Math.floor(rand() * 256);
      writeSync(fd, junk, 0, junk.length, Math.min(at, size - junk.length));
      closeSync(fd);
    }

    const warnings: TidalWarning[] = [];
    const db = await reopen(dir, warnings);
    try {
      // SQLite keeps the commits before the first bad frame: a prefix of the stream, never a hole.
      const total = expectPrefix(db, context);
      expect(total, context).toBeLessThanOrEqual(ackedSeq!);
      if (total < ackedSeq!) {
        expect(
          warnings.map((w) => w.code),
          context,
        ).toEqual(['TIDAL_WAL_TAIL_LOST']);
        expect(warnings[0]!.message, context).toContain(`sequence numbers ${total + 1} to ${ackedSeq}`);
      } else {
        expect(warnings, context).toEqual([]);
      }
      // Numbering continues after the highest number ever acknowledged, never reusing one.
      const seq = await db.signal({ item: 'item-0', kind: 'view', at: BASE });
      expect(seq, context).toBe(ackedSeq! + 1);
    } finally {
      await db.close();
    }
  });

  it('at least one damage case actually cut acknowledged events (the check above is not vacuous)', async () => {
    // Truncating a WAL to its header loses every commit in it; the ack mark must say so.
    const dir = join(root, 'tail-header');
    await writeThenKill(dir, 0, 300);
    const ackedSeq = readAckMark(dir)!;
    truncateSync(join(dir, 'tidal.db-wal'), 40);
    const warnings: TidalWarning[] = [];
    const db = await reopen(dir, warnings);
    try {
      const total = expectPrefix(db, 'header');
      expect(total).toBeLessThan(ackedSeq);
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_WAL_TAIL_LOST']);
    } finally {
      await db.close();
    }
  });
});
