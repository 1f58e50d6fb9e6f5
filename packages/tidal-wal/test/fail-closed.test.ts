import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InternalError, WriterFailedError } from 'tidal-load';
import { GroupCommit, SignalLog } from '../src/index.js';
import type { LogRecord } from '../src/signal-log.js';
import { openTestDb } from './db.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

type Ev = Omit<LogRecord, 'seq'>;
const ev = (ordinal: number): Ev => ({ ordinal, kind: 0, weight: 1, at: 1000 + ordinal, session: null });

/** A group commit whose after-commit step throws on the event with ordinal `poison`. */
function setup(poison: number, failCommitOn = -1) {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-wal-'));
  dirs.push(dir);
  const db = openTestDb(join(dir, 'db.sqlite'));
  const log = new SignalLog(db);
  const applied: number[] = [];
  const failures: WriterFailedError[] = [];
  const gc = new GroupCommit<Ev>(
    db,
    {
      commit(events, firstSeq) {
        events.forEach((e, i) => {
          if (e.ordinal === failCommitOn) throw new Error('SQLITE_FULL: database or disk is full');
          log.appendAt(firstSeq + i, e);
        });
        log.setLastSeq(firstSeq + events.length - 1);
      },
      afterCommit(events) {
        for (const e of events) {
          if (e.ordinal === poison) throw new TypeError('bug in the after-commit step');
          applied.push(e.ordinal);
        }
      },
    },
    log.lastSeq(),
    { maxBatch: 4, maxDelayMs: 1000 },
    { onFailure: (err) => failures.push(err) },
  );
  return { gc, log, applied, failures };
}

describe('GroupCommit fails closed', () => {
  it('acknowledges the committed batch, refuses what is queued behind it and every later write', async () => {
    const { gc, log, failures } = setup(2);
    // Two batches: [0..3] commits and its after-commit step throws at 2; [4, 5] is still queued.
    const first = [0, 1, 2, 3].map((i) => gc.enqueue([ev(i)]));
    const queued = [4, 5].map((i) => gc.enqueue([ev(i)]));
    gc.flushSync();
    await expect(Promise.all(first)).resolves.toEqual([1, 2, 3, 4]);
    for (const q of queued) await expect(q).rejects.toBeInstanceOf(WriterFailedError);
    await expect(gc.enqueue([ev(6)])).rejects.toBeInstanceOf(WriterFailedError);
    expect(gc.failure).toBeInstanceOf(WriterFailedError);
    expect(gc.failure?.cause).toBeInstanceOf(TypeError);
    expect(failures).toHaveLength(1);
    expect(gc.depth).toBe(0);
    // Durable: exactly the acknowledged batch is in the log, nothing of the refused ones.
    expect([...log.replay(0)].map((r) => r.ordinal)).toEqual([0, 1, 2, 3]);
    gc.close();
  });

  it('throws nothing into the event loop when the failure happens on the batch timer', async () => {
    const { gc, failures } = setup(0);
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      // Four events fill the batch: it commits on the next turn of the event loop, not in flushSync.
      const seq = await gc.enqueue([ev(0), ev(1), ev(2), ev(3)]);
      expect(seq).toBe(1);
      await new Promise((resolve) => setImmediate(resolve));
      expect(uncaught).toEqual([]);
      expect(failures).toHaveLength(1);
      await expect(gc.enqueue([ev(9)])).rejects.toBeInstanceOf(WriterFailedError);
    } finally {
      process.off('uncaughtException', onUncaught);
      gc.close();
    }
  });

  it('a failed commit rolls back and rejects its batch, and the writer goes on', async () => {
    const { gc, log, failures } = setup(-1, 1);
    const bad = gc.enqueue([ev(0), ev(1)]);
    gc.flushSync();
    await expect(bad).rejects.toBeInstanceOf(InternalError);
    expect([...log.replay(0)]).toEqual([]);
    await expect(gc.enqueue([ev(2), ev(3), ev(4), ev(5)])).resolves.toBe(1);
    expect(gc.failure).toBeNull();
    expect(failures).toEqual([]);
    gc.close();
  });
});
